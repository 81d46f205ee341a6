/* A SAM-Audio model with random weights built in memory, without files, a
 * config parser or a tokenizer (sam_random.c): for the GPU check and the GPU bench,
 * which run where choir's file and JSON libraries are not installed. The
 * structure is the real one (the codec's blocks and watermark path, the
 * DiT's layers); weights are uniform with 1/sqrt(fan-in) scales, Snake
 * alphas in [0.5, 1.5], so every path carries signal. */
#ifndef CHOIR_SAM_RANDOM_H
#define CHOIR_SAM_RANDOM_H

#include "sam_internal.h"

typedef struct sam_random_dims {
    int64_t enc_dim;          /* codec encoder width (64 published) */
    int n_enc;
    int enc_rates[SAM_MAX_RATES];
    int64_t latent, cb;       /* latent_dim, codebook_dim */
    int64_t dec_dim;          /* 1536 with the watermark path */
    int n_dec;
    int dec_rates[SAM_MAX_RATES];
    int watermark;            /* needs dec_dim 1536, 4 blocks, hop a multiple of 320 */
    int64_t D, H, L, text_dim, freq_dim, anchor_dim, max_pos;
    /* A T5 encoder of width text_dim (t5_layers 0: none, text prompts fail):
     * relu FFN, 32 buckets over 128 positions, no tokenizer (token ids from
     * the text's bytes, choir_sam_tokenize). Drawn after everything else, so
     * the codec's and the DiT's weights do not depend on it. */
    int64_t t5_layers, t5_heads, t5_d_kv, t5_d_ff, t5_vocab;
} sam_random_dims;

/* The published codec and a DiT of width D, H heads, L layers. */
void sam_random_published(sam_random_dims *d, int64_t D, int64_t H, int64_t L);

/* Builds the model on the CPU (device 0) or CUDA device `device - 1`
 * (bf16: matrices stored as bf16 there). NULL and err on failure. */
choir_sam *sam_random_model(const sam_random_dims *d, uint64_t seed, int device, int bf16, choir_err *err);
void sam_random_free(choir_sam *m);

#endif
