/* The CUDA kernels behind choir/backend_vibevoice.h (cuda_vibevoice.cu), with
 * the semantics of the CPU versions in src/tensor/backend/op_vibevoice.c. */
#ifndef CHOIR_CUDA_VIBEVOICE_H
#define CHOIR_CUDA_VIBEVOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/cuda.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

int choir_cuda_vv_conv_stem(choir_cuda *cu, const float *in, int64_t T, const float *taps,
                            const float *bias, int64_t cout, int kernel, float *out, choir_err *err);
int choir_cuda_vv_dwconv(choir_cuda *cu, const float *in, int64_t T, int64_t C, int kernel,
                         const float *w, const float *b, float *out, choir_err *err);
int choir_cuda_vv_add_scaled(choir_cuda *cu, float *x, const float *y, const float *g, int64_t rows,
                             int64_t C, choir_err *err);
/* choir_op_dwconv_residual_rows: x += g * dwconv(in), the floats of
 * choir_cuda_vv_dwconv then choir_cuda_vv_add_scaled in one kernel. */
int choir_cuda_vv_dwconv_residual(choir_cuda *cu, const float *in, int64_t T, int64_t C, int kernel,
                                  const float *w, const float *b, const float *g, float *x, choir_err *err);
int choir_cuda_vv_attention(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                            const float *vc, int64_t pos0, int n_heads, int n_kv, int D, float *out,
                            choir_err *err);
int choir_cuda_vv_attention_at(choir_cuda *cu, const float *q, int64_t T, const float *kc,
                               const float *vc, const int32_t *pos, int64_t max_keys, int n_heads,
                               int n_kv, int D, float *out, choir_err *err);
/* Over a paged cache (choir/backend_vibevoice.h): pos NULL: one sequence at
 * pos0 .. (table_stride ignored); otherwise row i's table at table + i
 * table_stride, keys 0 .. pos[i] up to max_keys. kv_bf16: the pool holds
 * bf16 values (uint16), widened as they are read. */
int choir_cuda_vv_attention_paged(choir_cuda *cu, const float *q, int64_t T, const void *kpool,
                                  const void *vpool, bool kv_bf16, const int32_t *table, int64_t table_stride,
                                  int64_t pos0, const int32_t *pos, int64_t max_keys, int n_heads,
                                  int n_kv, int D, float *out, choir_err *err);
/* Decode attention (a few rows, the split-keys path) over heads of 128
 * values takes k_vv_att_split128 unless this is off (on by default; off
 * gives the general split kernel, for before/after figures). Process-wide. */
void choir_cuda_vv_set_split128(bool on);
/* Warps a block of k_vv_att_split128: 4 (the default; CHOIR_VV_ATT_WARPS=8
 * in the environment gives 8) or 8 (the values loaded ahead of the keys).
 * Process-wide. */
void choir_cuda_vv_set_att_warps(int warps);
/* Decode attention v2 (k_vv_att_dec, issue #23; NOT RUN ON A GPU yet): the
 * split-keys path (up to 16 rows) over heads of 64 or 128 values and groups
 * of up to 8 query heads, K and V streamed together by warps with an online
 * softmax each, splits sized to the device, the last block of each (row, key
 * head) combining the splits (cu->attn_done counters). On by default
 * since it ran on an H100 on 7 Dec 2026 (the 7B step as a graph 6.99 ->
 * 6.56 ms at 10 minutes, 8.94 -> 7.52 at 60); CHOIR_VV_ATT_V2=0 in the
 * environment (read once, at the first decode attention) or
 * choir_cuda_vv_set_att_v2 turns it off. Process-wide. */
void choir_cuda_vv_set_att_v2(bool on);
bool choir_cuda_vv_att_v2_on(void);
/* Keys a split of v2 (a multiple of 16, at most 4096; 0: sized to the
 * device, the default; CHOIR_VV_ATT_V2_SPLIT). Process-wide. */
void choir_cuda_vv_set_att_v2_split(int keys);
/* Whether v2's last block combines (default) or a second launch does
 * (CHOIR_VV_ATT_V2_FOLD=0). Process-wide. */
void choir_cuda_vv_set_att_v2_fold(bool on);
/* v2 with a deeper ring of tiles a warp (on by default since its H100 run;
 * CHOIR_VV_ATT_V2_DEEP=0, read once with CHOIR_VV_ATT_V2, for v2's): bf16 caches keep
 * 4 tiles of 4 keys in flight a warp and take their scores 2 tiles at a
 * time, f32 caches 3 tiles, against v2's 2; the same sums as v2 bit for
 * bit. Process-wide. */
void choir_cuda_vv_set_att_v2_deep(bool on);
bool choir_cuda_vv_att_v2_deep_on(void);
/* v2 over bf16 caches of 128-value heads on the tensor cores
 * (k_vv_att_dec_tc; CHOIR_VV_ATT_TC=1, read once with CHOIR_VV_ATT_V2): q
 * and the probabilities rounded to bf16, f32 sums, so within the prefill's
 * bound (1e-2) of the f32 path rather than v2's 1e-5. NOT RUN ON A GPU: off
 * by default. Process-wide. */
void choir_cuda_vv_set_att_tc(bool on);
bool choir_cuda_vv_att_tc_on(void);

/* Prefill attention (more than 16 rows, heads of 64 or 128 values) on the
 * tensor cores (cuda_vv_flash.cu): q, K, V and the probabilities rounded
 * to bf16, f32 sums: 2-3e-3 from the f32 path (bound 1e-2) instead of 1e-6.
 * On by default since its H100 run (6 Dec 2026: 10 minutes' prefill 11,167 ->
 * 28,955 tokens/s); off, the f32 SIMT kernel k_vv_att_prefill runs.
 * choir_cuda_vv_prefill_flash sets it for the process; until it is called,
 * CHOIR_VV_PREFILL_FLASH=0 in the environment (read once, at the first
 * prefill) turns it off. Process-wide. */
void choir_cuda_vv_prefill_flash(bool on);
bool choir_cuda_vv_prefill_flash_on(void);
/* Warps (query rows / 16) per block of the flash prefill: 4 (default) or 8. */
void choir_cuda_vv_prefill_flash_warps(int warps);
/* The flash prefill's second kernel (cuda_vv_flash.cu, k_vv_flash2_prefill:
 * 32 query rows a warp, q in shared memory, 128 rows a block) instead of
 * k_vv_flash_prefill, for heads of 64 and 128 values (the warps setting
 * above then does not apply). On by default since it ran on an H100 on 7
 * Dec 2026 (60 minutes of prefill 20,494 -> 23,212 tokens/s);
 * choir_cuda_vv_prefill_flash_v2 sets it for the process; until it is
 * called, CHOIR_VV_FLASH_V2=0 in the environment (read once) turns it off.
 * Only when the flash prefill itself is on. Process-wide. */
void choir_cuda_vv_prefill_flash_v2(bool on);
bool choir_cuda_vv_prefill_flash_v2_on(void);
/* The flash prefill's third kernel (cuda_vv_flash_wg.cu, k_vv_flash_wg_prefill:
 * Hopper's warpgroup MMA, wgmma, FlashAttention-3 style; a draft NOT RUN ON
 * A GPU) instead of the second, for heads of 128 values on devices of
 * compute capability 9.0 (its object is sm_90a code); elsewhere, or if the
 * runtime refuses its launch (logged once), the second kernel runs. Mode 0
 * off, 1 on, 2 (the default) on with the softmax of a tile overlapping the
 * previous tile's P V (three-deep K/V). choir_cuda_vv_prefill_flash_wg sets
 * it for the process; until it is called, CHOIR_VV_FLASH_WG=0, 1 or 2 in
 * the environment (read once) sets it. Only when the flash prefill itself is
 * on. Process-wide. */
void choir_cuda_vv_prefill_flash_wg(int mode);
int choir_cuda_vv_prefill_flash_wg_mode(void);
/* False once the third kernel was declined (device or launch refused); it
 * is then not tried again in this process. */
bool choir_cuda_vv_prefill_flash_wg_usable(void);
/* Launches the third kernel (no conversion: bf16 K and V, the table as
 * choir_cuda_vv_flash_prefill's; pipelined: mode 2's variant). 0 launched;
 * 1 declined (D not 128, q not 16-byte aligned, not compute capability 9.0,
 * launch refused: the caller runs another kernel); else a (negative) choir
 * error code. */
int choir_cuda_vv_flash_wg_launch(choir_cuda *cu, const float *q, int64_t T, const void *k, const void *v,
                                  const int32_t *table, int64_t pos0, int n_heads, int n_kv, int D, bool pipelined,
                                  float *out, choir_err *err);
/* The third kernel's two wgmma forms alone on one warpgroup (a GPU check's
 * diagnosis): S = A B^T with A and B K-major in shared memory, then O = P V
 * with P = bf16(S / 8) from registers and V MN-major, each against a
 * double product on the host; *err_s, *err_o: relative L2 errors (inf if
 * not run). 0 ran; 1 not a compute capability 9.0 device; else an error. */
int choir_cuda_vv_wg_selftest(choir_cuda *cu, double *err_s, double *err_o, choir_err *err);
/* The flash prefill itself: T rows of q at pos0 .. over keys and values of
 * kv_bf16 ? bf16 : f32 (an f32 cache is rounded to bf16 into the context's
 * scratch first: 2 (pos0 + T) n_kv D bf16 values, each half aligned to 256
 * bytes), contiguous or through `table` (pages of CHOIR_VV_PAGE rows). K
 * and V rows 16-byte aligned. */
int choir_cuda_vv_flash_prefill(choir_cuda *cu, const float *q, int64_t T, const void *k, const void *v,
                                bool kv_bf16, const int32_t *table, int64_t pos0, int n_heads, int n_kv, int D,
                                float *out, choir_err *err);

/* Where choir_cuda_vv_rope_kv writes the rows of k or of v: row r to
 * dst + slot[r] slot_stride + pos[r] ld (elements: uint16 bf16 values
 * rounded to nearest even when bf16, floats otherwise; slot NULL: slot r),
 * as choir_cuda_rows_scatter(_bf16) writes them. */
typedef struct choir_cuda_vv_rows_dst {
    void *dst;
    bool bf16;
    int64_t slot_stride, ld;
    const int32_t *slot, *pos;
} choir_cuda_vv_rows_dst;
/* Heads up to this many values take choir_cuda_vv_rope_kv. */
#define CHOIR_CUDA_VV_ROPE_KV_MAX_D 1024
/* choir_op_rope_kv_rows (issue #23; NOT RUN ON A GPU yet): q [T][n_heads D]
 * and k [T][n_kv D] rotated in place at positions pos [T] (k_rope_rows'
 * floats), k's rotated rows and v's rows [T][n_kv D] written to kd and vd
 * (k_rows_scatter(_bf16)'s values), in one launch (k_vv_rope_kv). D even,
 * at most CHOIR_CUDA_VV_ROPE_KV_MAX_D. */
int choir_cuda_vv_rope_kv(choir_cuda *cu, float *q, float *k, const float *v, int64_t T, int n_heads, int n_kv,
                          int64_t D, const int32_t *pos, float theta, const choir_cuda_vv_rows_dst *kd,
                          const choir_cuda_vv_rows_dst *vd, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
