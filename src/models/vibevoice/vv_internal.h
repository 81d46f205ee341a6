/* Internals of VibeVoice-ASR shared by its source files (not public).
 *
 * Activations are time-major: a sequence of T frames with C channels is
 * [T][C], so the encoders' FFNs and norms are row operations and a causal
 * convolution of stride s reads, for output t, the s * cin floats of input
 * rows t*s .. t*s + s - 1 as one contiguous row (see vv_conv).
 *
 * The forward passes are written once, in the backend operations
 * (choir/backend.h, choir/backend_vibevoice.h) on the state's stream; every
 * weight pointer below is memory of the model's backend (on the CPU the
 * mapped or converted host tensor itself). */
#ifndef CHOIR_VV_INTERNAL_H
#define CHOIR_VV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/backend.h"
#include "choir/backend_vibevoice.h"
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
    choir_backend *be;              /* where the weights live and the passes run */
    int owns_be;                    /* be was made by the model (the CPU) */
    choir_backend_weights *ws;      /* the weights' backend copies (none on the CPU) */
    choir_vibevoice_layout layout;
    void (*release)(void *);        /* frees what the tensors live in (the mapped checkpoint), or NULL */
    void *release_ctx;
    vv_encoder enc[2];              /* acoustic, semantic */
    vv_connector conn[2];
    choir_weight embed;             /* [vocab, H] */
    vv_layer *layers;
    const float *final_norm;        /* [H] */
    choir_weight lm_head;           /* [vocab, H] (the embedding when tied) */
    int lm_bits;
    void **owned;                   /* converted copies, freed with the model */
    int n_owned, cap_owned;
    size_t bytes;
};

/* --- model internals ------------------------------------------------------ */

/* The prefill chunk and encoder pass a plan defaults to. */
#define VV_DEFAULT_PREFILL 256
#define VV_DEFAULT_PIECE_HOPS 32
/* FFN rows per tile in the encoder blocks, capped so that a tile's hidden
 * activations stay near 4 M floats. */
int64_t vv_ffn_tile(int64_t C, int ffn_mult);

/* The published encoders' strides (in the order applied) and depths. */
extern const int VV_DEFAULT_RATIOS[6];
extern const int VV_DEFAULT_DEPTHS[7];
/* Sets d->hop from the ratios and checks the chunk size and the special
 * token ids; CHOIR_EFORMAT naming `src` otherwise. */
int vv_dims_finish(choir_vibevoice_dims *d, const char *src, choir_err *err);

/* An empty model (counted), or NULL and err. */
choir_vibevoice *vv_model_new(choir_err *err);
/* Binds every tensor `find` gives (dims as given) and puts the weights on
 * `be` (NULL: a CPU backend of the model's own). Frees m and returns NULL
 * (err filled) on failure. */
choir_vibevoice *vv_build(choir_vibevoice *m, choir_vibevoice_tensor_fn find, void *ctx,
                          const choir_vibevoice_dims *dims, choir_backend *be, choir_err *err);

/* Puts every weight of a built model on m->be (choir_backend_weight /
 * choir_backend_vec; nothing moves on the CPU). 0 or the store's error. */
int vv_bind_backend(choir_vibevoice *m, choir_err *err);

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
