/* The device half of an attached Whisper model, shared by whisper_cuda.c
 * (weights, encoder, cache pools, attach) and whisper_cuda_dec.c (decoder).
 * Private to src/models/whisper; CUDA builds only. */
#ifndef CHOIR_WHISPER_CUDA_H
#define CHOIR_WHISPER_CUDA_H

#ifdef CHOIR_HAVE_CUDA

#include "choir/cuda.h"
#include "models/whisper/whisper_internal.h"

#define WG_LN_EPS 1e-5f /* as whisper_net.c */
#define WG_MAX_LENT 8     /* pinned logits blocks lent at once */

/* One block's weights on the device; vectors f32, absent ones empty. The
 * cross members are used by decoder blocks only. */
typedef struct wg_block {
    choir_cuda_buf attn_ln_g, attn_ln_b, cross_ln_g, cross_ln_b, mlp_ln_g, mlp_ln_b; /* [d] */
    choir_cuda_weight q, k, v, o;     /* [d, d] */
    choir_cuda_buf bq, bv, bo;        /* [d] */
    choir_cuda_weight xq, xk, xv, xo; /* cross-attention [d, d] */
    choir_cuda_buf xbq, xbv, xbo;     /* [d] */
    choir_cuda_weight fc1, fc2;       /* [ffn, d], [d, ffn] */
    choir_cuda_buf fc1_b, fc2_b;      /* [ffn], [d] */
} wg_block;

/* Caches of one size in one device buffer per K and V, handed out by slot
 * number and grown by doubling (which moves them: graphs are dropped then). */
typedef struct wg_pool {
    choir_cuda_buf k, v;   /* [cap][slot_floats] each */
    int64_t slot_floats;   /* n_layer * positions * d */
    int cap;
    unsigned char *used;   /* host [cap] */
} wg_pool;

typedef struct choir_whisper_gpu choir_whisper_gpu;

struct choir_whisper_gpu {
    const choir_whisper *m;
    choir_cuda *cu;
    choir_whisper_gpu_opts opts;
    int64_t weight_bytes;

    /* encoder */
    choir_cuda_buf conv1_w, conv1_b; /* [d, n_mels, 3], [d] */
    choir_cuda_buf conv2_w, conv2_b; /* [d, d, 3], [d] */
    choir_cuda_buf enc_pos;          /* [A, d] */
    choir_cuda_buf enc_ln_g, enc_ln_b;
    wg_block *enc;                   /* [n_audio_layer] */

    /* decoder */
    wg_block *dec;                   /* [n_text_layer] */
    choir_cuda_buf dec_ln_g, dec_ln_b;
    choir_cuda_weight tok_emb;       /* [V, d]: the tied output projection */
    wg_pool self;                    /* [n_text_layer][n_text_ctx][d] per sequence */
    wg_pool cross;                   /* [n_text_layer][n_audio_ctx][d] per window */
    /* Step buffers for up to rows_cap token rows (whisper_cuda_dec.c): meta
     * int32 [4][rows_cap] (cache slot, cross slot, position, keys), then
     * x, h, q, k, v, att [rows_cap, d] and hid [rows_cap, ffn]; logits
     * [logits_cap, V] apart. Host staging (pinned) mirrors meta and x, so one
     * asynchronous upload feeds a step. */
    int rows_cap, logits_cap;
    choir_cuda_buf step, logits;
    void *staging;
    /* Pinned host blocks lent for logits (wg_logits_alloc): a step's logits
     * are downloaded into them directly, without the runtime's staging. */
    struct {
        void *p;
        size_t bytes;
    } lent[WG_MAX_LENT];
    choir_cuda_graph **graphs;       /* [rows_cap + 1], by batch size */
    /* The encoder runs the forward written over backend operations
     * (whisper_enc.c) on `be`, whose context is `cu`. `net` views the device
     * weights above as that forward reads them (net_enc: the encoder
     * blocks); `enc_stream` holds a pass's mel [W, n_mels, F] and rows
     * [W, A, d] (enc_mel, enc_x) and its working memory. */
    choir_backend *be;
    wh_net net;
    wh_block *net_enc;
    choir_stream *enc_stream;
    float *enc_mel, *enc_x;
    /* An error of a call that cannot return one (wg_seq_copy), reported by
     * the next decoder call. */
    choir_err sticky;
    int64_t steps_graph, steps_direct;
    int graph_failures;
};

/* Frees every graph (before anything they point into moves). */
void wg_graphs_drop(struct choir_whisper_gpu *g);
/* Scratch the context needs for the largest call with `rows` decoder rows. */
size_t wg_scratch_need(const struct choir_whisper_gpu *g, int64_t rows);
/* Decoder weights and buffers (whisper_cuda_dec.c): upload and free. */
int wg_dec_upload(struct choir_whisper_gpu *g, choir_err *err);
void wg_dec_free(struct choir_whisper_gpu *g);
/* Uploads one matrix: as stored, or f32 converted to bf16 when opts.bf16. */
int wg_weight_up(struct choir_whisper_gpu *g, const choir_weight *w, choir_cuda_weight *out,
                 choir_err *err);
int wg_vec_up(choir_cuda *cu, const float *host, int64_t n, choir_cuda_buf *out, choir_err *err);
void wg_block_free(choir_cuda *cu, wg_block *b);
static inline const float *wg_ptr(const choir_cuda_buf *b) { return (const float *)b->ptr; }

#endif
#endif
