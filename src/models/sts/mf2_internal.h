/* MossFormer2_SE_48K internals shared by the loader, front end and network. */
#ifndef CHOIR_MF2_INTERNAL_H
#define CHOIR_MF2_INTERNAL_H

#include "choir/arena.h"
#include "choir/mossformer2.h"
#include "choir/pth.h"
#include "choir/quant.h"
#include "choir/safetensors.h"
#include "choir/stft.h"
#include "choir/tensor.h"

#define MF2_LAYERS 24
#define MF2_HIDDEN 2048  /* FLASH to_hidden output: v | u */
#define MF2_VU 1024
#define MF2_QK 128
#define MF2_GROUP 256    /* attention group size (and its scale 1/256) */
#define MF2_ROT 32       /* rotary dims of the 128 */
#define MF2_INNER 256    /* gated-FSMN width */
#define MF2_CONVK 17     /* ConvModule depthwise kernel */
#define MF2_FSMNK 39     /* FSMN memory kernel */
#define MF2_FBANK_FFT 2048
#define MF2_FBANK_BINS 1025

/* FFConvM: norm -> Linear -> SiLU -> x + depthwise conv (kernel 17). */
typedef struct mf2_ffconvm {
    float scale_g;           /* ScaleNorm gain (FLASH); unused with LayerNorm */
    const float *ln_w, *ln_b; /* LayerNorm [din] (gated FSMN); NULL for ScaleNorm */
    choir_weight lin;        /* [dout, din] */
    const float *lin_b;      /* [dout] */
    float *dw;               /* [17, dout], transposed from [dout, 1, 17] (owned) */
} mf2_ffconvm;

typedef struct mf2_flash {
    mf2_ffconvm to_hidden;   /* 512 -> 2048 */
    mf2_ffconvm to_qk;       /* 512 -> 128 */
    const float *gamma;      /* [4, 128]: quad_q, lin_q, quad_k, lin_k */
    const float *beta;       /* [4, 128] */
    mf2_ffconvm to_out;      /* 1024 -> 512 */
} mf2_flash;

typedef struct mf2_fsmn {
    choir_weight conv1;      /* [256, 512] */
    const float *conv1_b;    /* [256] */
    float prelu;
    const float *norm1_w, *norm1_b; /* [256] */
    mf2_ffconvm to_u, to_v;  /* 256 -> 256, LayerNorm */
    choir_weight linear;     /* [256, 256] */
    const float *linear_b;
    choir_weight project;    /* [256, 256], no bias */
    float *mem;              /* [39, 256], transposed from [256, 1, 39, 1] (owned) */
    const float *norm2_w, *norm2_b;
    choir_weight conv2;      /* [512, 256] */
    const float *conv2_b;    /* [512] */
} mf2_fsmn;

struct choir_mf2 {
    const float *norm_w, *norm_b;   /* [180] input GroupNorm */
    choir_weight enc;               /* [512, 180] */
    float pos_scale;
    float pos_freq[CHOIR_MF2_DIM / 2]; /* 1/10000^(2j/512) */
    float rot_freq[MF2_ROT / 2];       /* 1/10000^(2i/32) */
    mf2_flash flash[MF2_LAYERS];
    mf2_fsmn fsmn[MF2_LAYERS];
    const float *ln_w, *ln_b;       /* [512] stack LayerNorm, eps 1e-6 */
    const float *gn_w, *gn_b;       /* [512] intra GroupNorm */
    float prelu;
    choir_weight out;               /* rows 0..511 of conv1d_out [1024, 512] (speaker 0) */
    const float *out_b;             /* [512] */
    choir_weight output, output_gate; /* [512, 512] */
    const float *output_b, *output_gate_b;
    choir_weight dec;               /* [961, 512] */

    /* Front end (immutable, shared by all calls). */
    float *mel;                     /* [60, 1025] fbank triangles */
    float *fbank_window;            /* [1920] symmetric Hamming */
    choir_stft_plan *fbank_plan;    /* 2048-point, rectangular, hop 2048 (frames prepared by hand) */
    choir_stft_plan *stft_plan;     /* 1920-point, hop 384, symmetric Hamming */

    /* Ownership. */
    choir_st *st;
    choir_ckpt *ck;
    choir_quant_config *qc;
    void **owned;
    int n_owned, cap_owned;
    size_t bytes;
};

/* Front end (mf2_features.c). */
int mf2_frontend_init(choir_mf2 *m, choir_err *err);
void mf2_frontend_free(choir_mf2 *m);

/* The stages with their working memory from `work`, released before they
 * return (choir_mf2_features, _mask and _apply_mask make an arena of the
 * size each needs and call these). Bytes each takes from `work` at most: */
int64_t mf2_features_bytes(void);
/* Arena bytes of one pass over `samples` (features, mask and the largest
 * stage), and the counted bytes the STFT still takes outside it; the two
 * make choir_mf2_segment_bytes. */
int64_t mf2_pass_bytes(int64_t samples);
int64_t mf2_outside_bytes(int64_t samples);
int64_t mf2_mask_bytes(int64_t T);
int64_t mf2_apply_bytes(int64_t samples, int64_t T);
int mf2_features_in(const choir_mf2 *m, const float *x, int64_t n, float dither, uint64_t seed, float *fbank,
                    float *features, choir_arena *work, choir_err *err);
int mf2_mask_in(const choir_mf2 *m, const float *features, int64_t T, float *mask, choir_mf2_trace *trace,
                choir_arena *work, choir_err *err);
int mf2_apply_mask_in(const choir_mf2 *m, const float *x, int64_t n, const float *mask, int64_t T, float *y,
                      choir_arena *work, choir_err *err);

#endif
