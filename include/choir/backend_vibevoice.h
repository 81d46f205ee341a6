/* choir/backend_vibevoice.h: the backend operations VibeVoice-ASR's
 * forward passes need beyond choir/backend.h: time-major causal
 * convolutions of its σ-VAE encoders, the per-channel scaled residual of its
 * ConvNeXt blocks, and a flash-style causal GQA attention over a KV cache
 * (queries at consecutive positions against every cached row before them).
 *
 * Conventions as in choir/backend.h: every pointer is backend memory of the
 * stream's backend, activations are row-major float32, errors are sticky on
 * the stream. Each operation has a CPU version (the reference, split over the
 * default pool) and a CUDA one (src/tensor/cuda/cuda_vibevoice.cu) that
 * tests/cuda/vibevoice_gpu_check.c compares with it. */
#ifndef CHOIR_BACKEND_VIBEVOICE_H
#define CHOIR_BACKEND_VIBEVOICE_H

#include <stdint.h>

#include "choir/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A causal convolution of one input channel with stride 1 over a row of
 * samples (the encoders' stem): out[t][c] = bias[c] + sum_k taps[k][c]
 * in[t + k] for t < T, k < kernel; `in` holds T + kernel - 1 samples (the
 * left context first), taps [kernel][cout], bias [cout] or NULL. */
int choir_op_conv_stem_rows(choir_stream *s, const float *in, int64_t T, const float *taps,
                            const float *bias, int64_t cout, int kernel, float *out);

/* A depthwise causal convolution over time-major rows: out[t][c] = b[c] +
 * sum_j w[j][c] in[t + j][c] for t < T, j < kernel; in [(kernel - 1) + T][C]
 * (the left context first), w [kernel][C], b [C] or NULL. out must not
 * alias in. */
int choir_op_dwconv_rows(choir_stream *s, const float *in, int64_t T, int64_t C, int kernel,
                         const float *w, const float *b, float *out);

/* x[r][c] += g[c] y[r][c] for r < rows, c < C (g NULL: 1): a residual with a
 * per-channel layer scale. */
int choir_op_add_scaled_rows(choir_stream *s, float *x, const float *y, const float *g,
                             int64_t rows, int64_t C);

/* The block's mixer half in one pass: x[t][c] += g[c] d[t][c] for t < T,
 * with d what choir_op_dwconv_rows(in, T, C, kernel, w, b) gives (g NULL:
 * 1). The floats of those two operations in turn, on each backend, without
 * d's rows in memory. x must not alias in. */
int choir_op_dwconv_residual_rows(choir_stream *s, const float *in, int64_t T, int64_t C, int kernel,
                                  const float *w, const float *b, const float *g, float *x);

/* Causal grouped-query attention of T queries at positions pos0 .. pos0 + T - 1
 * over the first pos0 + T rows of a KV cache: q [T][n_heads D], kc and vc
 * [rows][n_kv D] (the new rows already written), out [T][n_heads D]; query
 * head h reads key head h / (n_heads / n_kv); scale 1 / sqrt(D). Flash-style:
 * blocks of keys with an online softmax, so no score matrix is held (no
 * scratch). D at most 256. */
int choir_op_attention_cached(choir_stream *s, const float *q, int64_t T, const float *kc,
                              const float *vc, int64_t pos0, int n_heads, int n_kv, int D,
                              float *out);

/* The same attention with each query row's position in backend memory, read
 * when the operation runs (a graph replay reads the current values): row i
 * sees cache rows 0 .. pos[i] (int32), at most max_keys of them (the rows
 * the cache holds). What a graph-captured decoding step uses. */
int choir_op_attention_cached_at(choir_stream *s, const float *q, int64_t T, const float *kc,
                                 const float *vc, const int32_t *pos, int64_t max_keys, int n_heads,
                                 int n_kv, int D, float *out);

/* Paged KV caches: a layer's keys (and values) of many sequences live in one
 * pool of pages, [pages][CHOIR_VV_PAGE][n_kv D] rows; a sequence's page
 * table (int32, backend memory) names the page of each CHOIR_VV_PAGE of
 * its positions, so key k of that sequence is pool row
 * table[k / CHOIR_VV_PAGE] CHOIR_VV_PAGE + k % CHOIR_VV_PAGE. */
#define CHOIR_VV_PAGE 128

/* choir_op_attention_cached over a paged cache: T queries of one sequence at
 * positions pos0 .. pos0 + T - 1, its keys through `table` (at least
 * ceil((pos0 + T) / CHOIR_VV_PAGE) entries). Prefill chunks and steps whose
 * position the host knows. */
int choir_op_attention_paged(choir_stream *s, const float *q, int64_t T, const float *kpool,
                             const float *vpool, const int32_t *table, int64_t pos0, int n_heads,
                             int n_kv, int D, float *out);

/* Rows of several sequences at once over one paged cache, positions read
 * when the operation runs (graph replays, batched steps): row i uses the
 * table at table + i table_stride (stride 0: one table for every row) and
 * sees keys 0 .. pos[i], at most max_keys of them (tables hold at least
 * ceil(max_keys / CHOIR_VV_PAGE) entries). */
int choir_op_attention_paged_at(choir_stream *s, const float *q, int64_t T, const float *kpool,
                                const float *vpool, const int32_t *table, int64_t table_stride,
                                const int32_t *pos, int64_t max_keys, int n_heads, int n_kv, int D,
                                float *out);

/* The two paged operations over a pool of `kv` values: CHOIR_DTYPE_F32
 * (float, as above) or CHOIR_DTYPE_BF16 (uint16 bf16: half the bytes; each
 * value is widened to f32 as it is read and the arithmetic is the f32
 * operation's, so a bf16 pool gives what an f32 pool holding the same
 * rounded values gives). */
int choir_op_attention_paged_kv(choir_stream *s, const float *q, int64_t T, const void *kpool,
                                const void *vpool, choir_dtype kv, const int32_t *table,
                                int64_t pos0, int n_heads, int n_kv, int D, float *out);
int choir_op_attention_paged_at_kv(choir_stream *s, const float *q, int64_t T, const void *kpool,
                                   const void *vpool, choir_dtype kv, const int32_t *table,
                                   int64_t table_stride, const int32_t *pos, int64_t max_keys,
                                   int n_heads, int n_kv, int D, float *out);

/* A decoding step's attention inputs after its q/k/v product, in one
 * operation: choir_op_rope over q [T][n_heads D] and over k [T][n_kv D]
 * (all of each head, rotate-half, row r at position pos[r], base theta),
 * then choir_op_rows_scatter of k's rows to kout and of v's rows [T][n_kv D]
 * to vout (choir_rows_out: f32 or bf16 values, slot and position int32
 * backend memory read when the operation runs, so a contiguous cache or a
 * paged pool, and a graph replay writes where the current values say).
 * q and k are left rotated in place. Literally those four operations on the
 * CPU; on CUDA one kernel with their floats bit for bit
 * (choir_cuda_vv_rope_kv), or the four where it does not apply (heads of
 * more than 1024 values). kout->dst and vout->dst must not be NULL. Counted
 * as the operations it stands for. */
int choir_op_rope_kv_rows(choir_stream *s, float *q, float *k, const float *v, int64_t T, int n_heads, int n_kv,
                          int64_t D, const int32_t *pos, float theta, const choir_rows_out *kout,
                          const choir_rows_out *vout);

/* Whether VibeVoice's decoding steps (a sequence's and a batch's over a
 * paged pool) take choir_op_rope_kv_rows instead of the two ropes and two
 * row scatters (one launch instead of four a layer on CUDA; the same floats).
 * On by default since it ran on an H100 on 7 Dec 2026 (the 10-minute 7B
 * step 7.01 -> 6.83 ms as a graph); CHOIR_VV_ROPE_KV=0 in the environment
 * (read once, at the first call of choir_vv_rope_kv_on) or
 * choir_vv_set_rope_kv turns it off. A step already recorded as a graph keeps
 * the operations it was recorded with. Process-wide. */
void choir_vv_set_rope_kv(bool on);
bool choir_vv_rope_kv_on(void);

#ifdef __cplusplus
}
#endif
#endif
