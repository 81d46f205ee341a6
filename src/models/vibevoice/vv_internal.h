/* Internals of VibeVoice-ASR shared by its source files (not public).
 *
 * Activations are time-major: a sequence of T frames with C channels is
 * [T][C], so the encoders' FFNs and norms are row operations and a causal
 * convolution of stride s reads, for output t, the s * cin floats of input
 * rows t*s .. t*s + s - 1 as one contiguous row (see vv_conv). */
#ifndef CHOIR_VV_INTERNAL_H
#define CHOIR_VV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/tensor.h"
#include "choir/vibevoice.h"

#define VV_MAX_TAP_BLOCKS 16

/* A causal Conv1d (stem, downsampling layers, head). Its taps are split into
 * blocks of `stride` taps: block g is a matrix [cout, stride * cin] applied
 * to the input rows starting at g * stride, so the convolution is a sum of
 * n_blocks linear layers over contiguous views (no im2col copy), for any
 * weight dtype. The input carries (kernel - stride) rows of left context. */
typedef struct vv_conv {
    int cin, cout, kernel, stride, n_blocks;
    choir_weight blk[VV_MAX_TAP_BLOCKS]; /* [cout, stride * cin]; taps past `kernel` are 0 */
    const float *taps1;                  /* cin == 1 and stride 1 (the stem): [kernel][cout] f32 */
    const float *bias;                   /* [cout] */
} vv_conv;

/* One pre-norm ConvNeXt block (Block1D). */
typedef struct vv_block {
    const float *norm, *ffn_norm;    /* [C] RMSNorm weights */
    const float *gamma, *ffn_gamma;  /* [C] layer scales */
    const float *dw, *dw_bias;       /* depthwise kernel [dw_kernel][C] f32, bias [C] */
    int dw_kernel;
    choir_weight fc1, fc2;           /* [ffn_mult C, C], [C, ffn_mult C] */
    const float *fc1_bias, *fc2_bias;
} vv_block;

typedef struct vv_encoder {
    choir_vibevoice_enc_dims d;
    int channels[CHOIR_VIBEVOICE_MAX_STAGES];
    vv_conv down[CHOIR_VIBEVOICE_MAX_STAGES]; /* down[0] is the stem */
    vv_block *blocks[CHOIR_VIBEVOICE_MAX_STAGES];
    vv_conv head;                              /* C_last -> vae_dim */
} vv_encoder;

typedef struct vv_connector {
    choir_weight fc1, fc2;           /* [H, vae], [H, H] */
    const float *fc1_bias, *fc2_bias, *norm; /* [H] */
} vv_connector;

typedef struct vv_layer {
    const float *attn_norm, *mlp_norm;   /* [H] */
    choir_weight q, k, v, o;             /* [nh D, H], [nkv D, H] x2, [H, nh D] */
    const float *q_bias, *k_bias, *v_bias;
    choir_weight gate, up, down;         /* [I, H] x2, [H, I] */
} vv_layer;

struct choir_vibevoice {
    choir_vibevoice_dims dims;
    choir_vibevoice_layout layout;
    choir_st *st;                   /* NULL for from_tensors */
    vv_encoder enc[2];              /* acoustic, semantic */
    vv_connector conn[2];
    choir_weight embed;             /* [vocab, H] */
    vv_layer *layers;
    const float *final_norm;        /* [H] */
    choir_weight lm_head;           /* [vocab, H] (the embedding when tied) */
    float *inv_freq;                /* [head_dim / 2] RoPE frequencies, as HF computes them */
    int lm_bits;
    void **owned;                   /* converted copies, freed with the model */
    int n_owned, cap_owned;
    size_t bytes;
};

/* --- the operations the forward passes are written in (vv_ops.c) ---------
 * One call per operation, every buffer given by the caller (from the state's
 * planned block): nothing here allocates. They mirror the backend operation
 * set the GPU version will use. */

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (w NULL: 1), r < rows. y may be x. */
void vv_rmsnorm(const float *x, float *y, int64_t rows, int64_t dim, const float *w, float eps);
/* y = x W^T + b (choir_linear). */
void vv_linear(const float *x, int64_t rows, const choir_weight *w, const float *b, float *y);
/* out[T_out][cout] = causal conv of in [(kernel - stride) + T_out * stride (+ slack)][cin];
 * tmp [T_out][cout] scratch when n_blocks > 1. */
void vv_conv_causal(const vv_conv *c, const float *in, int64_t t_out, float *out, float *tmp);
/* out[T][C] = bias + sum_j w[j] * in[t + j] over in [(k - 1) + T][C]. */
void vv_dwconv_causal(const float *in, int64_t T, int64_t C, int k, const float *w, const float *b,
                      float *out);
/* x[r][c] += g[c] * y[r][c] (g NULL: 1). */
void vv_add_scaled(float *x, const float *y, const float *g, int64_t rows, int64_t C);
void vv_gelu(float *x, int64_t n);                                   /* exact erf GELU */
/* gate = silu(gate) * up, elementwise over n. */
void vv_swiglu(float *gate, const float *up, int64_t n);
/* Rotates x[T][n_heads * D] in place for positions pos0 .. pos0 + T - 1
 * (HF's rotate-half layout). */
void vv_rope(float *x, int64_t T, int n_heads, int D, int64_t pos0, const float *inv_freq);
/* Causal GQA attention of T queries at positions pos0 .. pos0 + T - 1 over
 * the cache rows 0 .. pos0 + T - 1: q [T][nh D], kc / vc [ctx][nkv D], out
 * [T][nh D]. Flash-style: key blocks with an online softmax, never more
 * than a block of scores at a time. */
void vv_attention(const float *q, int64_t T, const float *kc, const float *vc, int64_t pos0,
                  int n_heads, int n_kv, int D, float *out);
/* out[i] = row ids[i] of E (dequantized). */
void vv_embed(const choir_weight *E, const int32_t *ids, int n, float *out);

/* --- model internals ------------------------------------------------------ */

/* The prefill chunk and encoder pass a plan defaults to. */
#define VV_DEFAULT_PREFILL 256
#define VV_DEFAULT_PIECE_HOPS 32
/* FFN rows per tile in the encoder blocks, capped so that a tile's hidden
 * activations stay near 4 M floats. */
int64_t vv_ffn_tile(int64_t C, int ffn_mult);

/* Streaming the transcript out of the model's JSON as it is decoded: a state
 * machine over the raw text that remembers the last object key and passes on
 * the characters of every string value whose key is "Content" (unescaped,
 * \uXXXX pairs included), a space between segments. Zero-initialise. */
typedef struct vv_content {
    int in_str, esc, is_key, emitting, n_emitted;
    char key[16];
    int key_len, expect_value;
    char hex[4];
    int n_hex;
    uint32_t high; /* a pending high surrogate */
} vv_content;

/* Feeds s[n] of raw output; writes the content text it completes to out
 * (room for 4 n + 8) and returns its length. */
size_t vv_content_feed(vv_content *c, const char *s, size_t n, char *out);

/* The repetition guard, called after each new token tok[n - 1]: run[p - 1]
 * (zeroed at the start, max_period entries) counts how many of the latest
 * tokens equal the token p before them. A tail that repeats a period p at
 * least min_repeats times and is at least min_tokens long is a loop: returns
 * that p (the smallest), else 0. */
int vv_loop_check(const int32_t *tok, int n, int *run, int max_period, int min_tokens, int min_repeats);

#endif
