/* Internals of the Whisper model shared by its source files (not public). */
#ifndef CHOIR_WHISPER_INTERNAL_H
#define CHOIR_WHISPER_INTERNAL_H

#include "choir/tensor.h"
#include "choir/whisper.h"

/* One attention module: W [d, d] each; k has no bias. */
typedef struct wh_attn {
    choir_weight q, k, v, o;
    const float *bq, *bv, *bo; /* [d] */
} wh_attn;

/* One pre-LN residual block (decoder blocks also use cross_ln / cross). */
typedef struct wh_block {
    const float *attn_ln_g, *attn_ln_b; /* [d] */
    wh_attn attn;
    const float *cross_ln_g, *cross_ln_b; /* [d], decoder only */
    wh_attn cross;                        /* decoder only */
    const float *mlp_ln_g, *mlp_ln_b;     /* [d] */
    choir_weight fc1;                     /* [ffn, d] */
    const float *fc1_b;                   /* [ffn] */
    choir_weight fc2;                     /* [d, ffn] */
    const float *fc2_b;                   /* [d] */
} wh_block;

/* The model's device half (whisper_cuda.c), present while a GPU is attached. */
struct choir_whisper_gpu;

struct choir_whisper {
    choir_whisper_dims dims;
    choir_whisper_specials sp;
    choir_st *st;

    const float *conv1_w, *conv1_b; /* [d, n_mels, 3], [d] (torch layout) */
    const float *conv2_w, *conv2_b; /* [d, d, 3], [d] */
    const float *enc_pos;           /* [n_audio_ctx, d] */
    wh_block *enc;                  /* [n_audio_layer] */
    const float *enc_ln_g, *enc_ln_b;

    choir_weight tok_emb;  /* [n_vocab, d]; also the tied output projection */
    const float *dec_pos;  /* [n_text_ctx, d] */
    wh_block *dec;         /* [n_text_layer] */
    const float *dec_ln_g, *dec_ln_b;

    /* Converted copies (non-f32 vectors, transposed MLX convolutions, computed
     * positions), freed with the model. */
    void **owned;
    int n_owned, cap_owned;
    size_t bytes;
    /* Set by choir_whisper_gpu_attach: the network functions then run there. */
    struct choir_whisper_gpu *gpu;
};

struct choir_whisper_cross {
    int n_layer, n_ctx, d;
    float *k; /* [n_text_layer][n_audio_ctx][d]; NULL on the GPU */
    float *v;
    struct choir_whisper_gpu *gpu; /* GPU: K/V live in slot `slot` of its cross pool */
    int slot;
};

struct choir_whisper_seq {
    int n_layer, n_ctx, d; /* n_ctx: capacity in positions */
    int n_past;
    const choir_whisper_cross *cross;
    float *k; /* [n_text_layer][n_ctx][d]; NULL on the GPU */
    float *v;
    struct choir_whisper_gpu *gpu; /* GPU: the cache is slot `slot` of its self-attention pool */
    int slot;
};

#ifdef CHOIR_HAVE_CUDA
/* The GPU side of the network functions (whisper_cuda.c, whisper_cuda_dec.c),
 * called by whisper_net.c when m->gpu is set, after the same argument checks. */
int wg_encode(struct choir_whisper_gpu *g, const float *mel, int n, float *out, choir_err *err);
int wg_encode_cross(struct choir_whisper_gpu *g, const float *mel, int n,
                    choir_whisper_cross **cross, choir_err *err);
choir_whisper_cross *wg_cross_create(struct choir_whisper_gpu *g, const float *enc_out,
                                     choir_err *err);
void wg_cross_free(choir_whisper_cross *c);
/* Gives a freshly made sequence a cache slot on the device. */
int wg_seq_init(struct choir_whisper_gpu *g, choir_whisper_seq *s, choir_err *err);
void wg_seq_release(choir_whisper_seq *s);
void wg_seq_copy(choir_whisper_seq *dst, const choir_whisper_seq *src, int n_keep);
int wg_decode(struct choir_whisper_gpu *g, choir_whisper_seq *const *seqs, int n_seq,
              const int32_t *tokens, const int *n_tokens, bool all_positions, float *logits,
              choir_err *err);
#endif

#endif
