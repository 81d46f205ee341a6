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
};

struct choir_whisper_cross {
    int n_layer, n_ctx, d;
    float *k; /* [n_text_layer][n_audio_ctx][d] */
    float *v;
};

struct choir_whisper_seq {
    int n_layer, n_ctx, d; /* n_ctx: capacity in positions */
    int n_past;
    const choir_whisper_cross *cross;
    float *k; /* [n_text_layer][n_ctx][d] */
    float *v;
};

#endif
