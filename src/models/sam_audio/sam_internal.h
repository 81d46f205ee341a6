/* SAM-Audio internals shared by the loader, the codec, T5, the DiT and the
 * separation loop. Shapes: linear weights [out, in]; conv weights [out, in, k]
 * (transposed convs [in, out, k], PyTorch layouts); sequence activations of
 * the codec are channels-first [C, T]; the DiT's are time-major [T, D]. */
#ifndef CHOIR_SAM_INTERNAL_H
#define CHOIR_SAM_INTERNAL_H

#include "choir/arena.h"
#include "choir/backend.h"
#include "choir/quant.h"
#include "choir/safetensors.h"
#include "choir/sam_audio.h"
#include "choir/tensor.h"
#include "choir/unigram.h"

#define SAM_MAX_RATES 6
#define SAM_WM_BLOCKS 4

/* A 1-D convolution, weight-norm already folded. */
typedef struct sam_conv {
    const float *w;      /* [cout, cin, k] */
    const float *b;      /* [cout] or NULL */
    int64_t cout, cin, k;
    int stride, dilation;
    int causal;          /* 1: left padding (k-1)d+1-stride ("auto" causal), else symmetric */
} sam_conv;

typedef struct sam_convt {
    const float *w;      /* [cin, cout, k] */
    const float *b;      /* [cout] */
    int64_t cin, cout, k;
    int stride;
    int causal;          /* 1: no padding, output cut to T*stride ("auto"); 0: pad (s+1)/2, out_pad s%2 */
} sam_convt;

/* ResidualUnit: act -> conv(k, dilation) -> act -> conv(k1), plus the input. */
typedef struct sam_ru {
    const float *alpha1, *alpha2; /* Snake alphas [dim]; NULL for the ELU units */
    sam_conv c1, c2;
} sam_ru;

typedef struct sam_enc_block {
    sam_ru ru[3];         /* dilations 1, 3, 9 */
    const float *alpha;   /* Snake before the strided conv */
    sam_conv down;        /* k = 2s, stride s */
} sam_enc_block;

typedef struct sam_dec_block {
    const float *alpha;   /* block.0 Snake [cin] */
    sam_convt up;         /* block.1 */
    sam_ru ru[3];         /* block.4/5/8, dilations 1, 3, 9 */
    /* watermark path pieces of this block */
    sam_convt wm_up;      /* block.3: causal ConvT cin/3 -> cout/3, stride wm */
    sam_ru wm_ru6, wm_ru7; /* block.6 / block.7: ELU units on cout/3 */
    sam_conv wm_down;     /* block.11: causal conv cout/3 -> cin/3, stride wm */
} sam_dec_block;

typedef struct sam_lstm {
    const float *w_ih[2], *w_hh[2], *b_ih[2], *b_hh[2]; /* [4H, H], [4H] */
    int64_t H;
} sam_lstm;

typedef struct sam_codec {
    int n_enc, n_dec;
    int enc_rates[SAM_MAX_RATES], dec_rates[SAM_MAX_RATES];
    int hop;
    int64_t latent, cb;   /* latent_dim, codebook_dim (C) */
    sam_conv enc_in;
    sam_enc_block enc[SAM_MAX_RATES];
    const float *enc_alpha;
    sam_conv enc_out, in_proj, out_proj, dec_in;
    sam_dec_block dec[SAM_MAX_RATES];
    /* watermarker */
    int has_wm;
    const float *wm_alpha;  /* encoder_block.pre.0 Snake [96] */
    sam_conv wm_pre1;       /* 96 -> 1, k7 (the output conv; tanh follows) */
    sam_conv wm_pre3;       /* 1 -> 32, k7 causal */
    sam_lstm wm_enc_lstm;
    sam_conv wm_post2;      /* 512 -> 128, k7 causal */
    const float *msg_emb;   /* [2 * 16, 128], host memory (summed there per message) */
    sam_conv wm_dec_pre0;   /* 128 -> 512, k7 causal */
    sam_lstm wm_dec_lstm;
    sam_conv wm_post1;      /* 32 -> 1, k7 causal */
} sam_codec;

typedef struct sam_t5_layer {
    choir_weight q, k, v, o;      /* [inner, d], o [d, inner] */
    const float *ln1, *ln2;       /* [d] */
    choir_weight wi, wi1, wo;     /* wi [ff, d] (wi1 for gated), wo [d, ff] */
} sam_t5_layer;

typedef struct sam_t5 {
    int64_t d, d_kv, n_heads, n_layers, d_ff, vocab;
    int buckets, max_distance, gated;
    float eps;
    const float *embed;           /* [vocab, d] f32 */
    const float *rel_bias;        /* [buckets, n_heads] */
    sam_t5_layer *layers;
    const float *final_ln;
    choir_unigram *tok;
    int max_length;
} sam_t5;

typedef struct sam_dit_layer {
    const float *table;           /* scale_shift_table [6, D] */
    choir_weight wq, wk, wv, wo;  /* heads contiguous (strided split folded) */
    const float *q_norm, *k_norm; /* [hd] */
    choir_weight cq, ck, cv, co;
    const float *cq_norm, *ck_norm;
    choir_weight w1, w2, w3;      /* SwiGLU [F, D], [D, F], [F, D] */
    const float *attn_norm, *ffn_norm; /* [D] */
} sam_dit_layer;

typedef struct sam_dit {
    int64_t D, H, hd, L, F, freq_dim, ctx_dim, out_ch, max_pos;
    float eps;
    float rope_theta;
    sam_dit_layer *layers;
    const float *final_table;     /* [2, D] */
    const float *norm;            /* [D] */
    choir_weight output;          /* [out_ch, D] */
    /* patcher: two GroupNorm(1) -> SiLU -> conv k3 blocks */
    const float *gn1_w, *gn1_b, *gn2_w, *gn2_b; /* [D] */
    const float *pconv1_w, *pconv1_b, *pconv2_w, *pconv2_b; /* [D, D, 3], [D] */
    choir_weight y_w1, y_w2, y_w3; /* context embedder (SwiGLU) */
    choir_weight t_w1, t_w2, t_w3; /* timestep embedder */
    choir_weight t_block;          /* [6D, D] */
    const float *t_block_b;        /* [6D] */
    /* SAMAudio's projections around the DiT */
    choir_weight proj;             /* [D, in_channels] */
    const float *proj_b;
    choir_weight memory_proj;      /* [D, text_dim] */
    const float *memory_proj_b;
    const float *anchor_embed_host; /* [num_anchors + 1, anchor_dim], host memory (gathered there) */
    choir_weight anchor_proj;      /* [D, anchor_dim] */
    float anchor_gate;             /* tanh(gate) */
    int64_t n_anchor_rows, anchor_dim;
    float *video_const;            /* [D]: tanh(g_v) * LayerNorm(conv.bias) (zero video), host */
    const float *video_const_dev;  /* the same on the backend */
    int64_t in_channels, text_dim;
} sam_dit;

struct choir_sam {
    sam_codec codec;
    sam_dit dit;
    sam_t5 t5;
    int has_t5;
    int sample_rate;
    int heads_folded;  /* the file already has contiguous heads (choir's native layout) */
    /* The backend the codec and the DiT run on. Every weight pointer of
     * codec and dit is backend memory (on the CPU the host weights
     * themselves), except the two tables marked host. T5 stays on the host
     * (once per request, a few tokens). */
    choir_backend *be;
    int own_be;
    choir_backend_weights *bw;
    /* ownership */
    choir_st *st, *t5_st;
    choir_ckpt *ck;
    choir_quant_config *qc;
    int mlx;           /* names/layouts of mlx-community's port */
    void **owned;
    int n_owned, cap_owned;
    size_t bytes;
};

/* Loader helpers (sam_load.c) used by the T5 loader (sam_t5.c). */
typedef struct sam_loader {
    choir_sam *m;
    const choir_st *st;  /* NULL: m->ck */
    choir_err *err;
    int status;
} sam_loader;

void *sam_own(sam_loader *ld, size_t bytes);
const float *sam_floats(sam_loader *ld, const char *name, int64_t numel);
void sam_matrix(sam_loader *ld, const char *prefix, int64_t rows, int64_t cols, choir_weight *W);
int sam_fail(sam_loader *ld, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int sam_t5_load(choir_sam *m, const char *dir, choir_err *err);
void sam_t5_free(sam_t5 *t5);

/* Puts the codec's and the DiT's weights on m->be (sam_backend.c): on the
 * CPU nothing moves; on CUDA every pointer is replaced by a device copy. */
int sam_backend_attach(choir_sam *m, choir_err *err);
void sam_backend_detach(choir_sam *m);
/* A stream on the model's backend with `work_bytes` of working memory;
 * NULL and err when it cannot be had. */
choir_stream *sam_stream_open(const choir_sam *m, size_t work_bytes, choir_err *err);

/* --- memory of a call (sam_plan.c) ---------------------------------------- */

/* What one stage of a call (an encode, a decode, an ODE, T5) takes:
 * `work`, the buffers it carves from its stream (device memory on a GPU,
 * the call's arena on the CPU); `scratch`, the kernel scratch of its
 * largest kernel call on m's backend (on the CPU carved from the arena too;
 * on CUDA the context's scratch, which grows to it and stays); `host`, host
 * buffers the stage carves from the arena on any backend (staging, state
 * pointers). */
typedef struct sam_need {
    size_t work, scratch, host;
} sam_need;

/* Bytes `need` takes from the call's arena on m's backend. */
size_t sam_need_arena(const choir_sam *m, const sam_need *need);
/* Bytes a piece of `bytes` takes from an arena (its alignment included). */
size_t sam_up(size_t bytes);

/* The memory of one call. `a` is a host arena: the caller's (the engine's
 * batch arena, from its current fill level) or one reserved for the call's
 * plan (`own`). On the CPU `s` is one stream whose working memory is `a`:
 * every stage of the call runs on it, carving its buffers and its kernel
 * scratch there and giving them back when it ends. On a device `s` is NULL:
 * each stage opens a device stream of its own under the backend's lock (as
 * the device's memory cannot come from a host arena), and `a` holds only
 * the host buffers. */
typedef struct sam_mem {
    choir_arena *a;
    choir_stream *s;
    choir_arena *own;
} sam_mem;

/* Opens a call over `arena`, or without one over an arena of `plan_bytes`
 * reserved now from the counted allocator. 0, or CHOIR_ENOMEM and err. */
int sam_mem_open(const choir_sam *m, choir_arena *arena, size_t plan_bytes, sam_mem *mem,
                 choir_err *err);
/* Frees the call's stream and its own arena (the caller's is left as the
 * stages gave it back). A zeroed mem is a no-op. */
void sam_mem_close(sam_mem *mem);

/* One stage of a call: the stream its operations run on, and where the
 * call's arena stood when it began (the stage's host buffers and, on the
 * CPU, its buffers and scratch are given back by sam_stage_end). */
typedef struct sam_stage {
    choir_stream *s;
    const sam_mem *mem;
    size_t mark;
    int device;
} sam_stage;

/* Begins a stage that takes `need`: on the CPU binds the call's stream to
 * the arena with need->scratch of kernel scratch carved from it; on a
 * device locks the backend and opens a stream of need->work bytes. Returns
 * 0, or CHOIR_ENOMEM (the arena or the device has no room) with err and
 * nothing held. */
int sam_stage_begin(const choir_sam *m, const sam_mem *mem, const sam_need *need,
                    sam_stage *st, choir_err *err);
void sam_stage_end(const choir_sam *m, sam_stage *st);
/* A host buffer of the stage (or of a caller that releases the arena
 * itself): `bytes` from the call's arena, or NULL and err. */
void *sam_host_alloc(const sam_mem *mem, size_t bytes, choir_err *err);

/* The codec's stages (sam_codec.c): what an encode of n samples and a
 * decode of T frames take, and the stages themselves in a call's memory. */
sam_need sam_encode_need(const choir_sam *m, int64_t n);
sam_need sam_decode_need(const choir_sam *m, int64_t T);
int sam_encode_in(const choir_sam *m, const sam_mem *mem, const float *x, int64_t n,
                  float *latent, choir_err *err);
int sam_decode_in(const choir_sam *m, const sam_mem *mem, const float *latent, int64_t T,
                  const uint8_t *message, float *y, choir_err *err);

/* T5 (sam_t5.c): the arena bytes of encoding n tokens (working memory and
 * kernel scratch; host only), and the encoding with them carved from
 * `arena` and given back. */
size_t sam_t5_bytes(const choir_sam *m, int n);
int sam_t5_in(const choir_sam *m, choir_arena *arena, const int32_t *ids, int n, float *out,
              choir_err *err);

/* separate_long's geometry of a job over n samples (sam_plan.c): chunk,
 * overlap and hop in samples (the chunk cut to the position table),
 * n_chunks, and the first chunk's length (the longest). */
typedef struct sam_geometry {
    int64_t chunk, overlap, hop, first_len;
    int n_chunks;
} sam_geometry;
void sam_job_geometry(const choir_sam *m, int64_t n, const choir_sam_params *p, sam_geometry *g);

/* One chunk of a round, as the plan sees it. */
typedef struct sam_chunk_dims {
    int64_t len;      /* samples */
    int text_len;     /* tokens */
    int method, steps;
} sam_chunk_dims;
/* Arena bytes of one round over these chunks (sam_sep.c's order: the
 * round's arrays and every chunk's latents, tables and decoded audio held
 * through the round, then the largest of its encodes, ODE groups and
 * decodes). */
size_t sam_round_bytes(const choir_sam *m, const sam_chunk_dims *c, int n);
/* Arena bytes of a job's state (the job, its text features, the tails). */
size_t sam_job_state_bytes(const choir_sam *m, int64_t overlap, int text_len);
size_t sam_job_struct_bytes(void);
/* The ODE of a batch of items (sam_ode.c): what it takes, and the ODE in a
 * call's memory. */
sam_need sam_ode_need(const choir_sam *m, const choir_sam_item *items, int n);
int sam_ode_in(const choir_sam *m, const sam_mem *mem, const choir_sam_item *items, int n,
               float *const *x, const choir_sam_params *p, choir_err *err);

#endif
