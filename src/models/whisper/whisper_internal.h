/* Internals of the Whisper model shared by its source files (not public). */
#ifndef CHOIR_WHISPER_INTERNAL_H
#define CHOIR_WHISPER_INTERNAL_H

#include "choir/backend.h"
#include "choir/pool.h"
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

/* The network's weights on one backend (choir/backend.h), the only form the
 * forward (whisper_enc.c) reads them in: on the CPU the model's own pointers
 * (nothing copied; enc/dec are the model's block arrays), on a device their
 * copies there. */
typedef struct wh_net {
    choir_backend *be;
    int enc_windows;                /* encoder windows per pass */
    const float *conv1_w, *conv1_b; /* [d, n_mels, 3], [d] */
    const float *conv2_w, *conv2_b; /* [d, d, 3], [d] */
    const float *enc_pos;           /* [n_audio_ctx, d] */
    const wh_block *enc;            /* [n_audio_layer] */
    const float *enc_ln_g, *enc_ln_b;
    choir_weight tok_emb;           /* [n_vocab, d] */
    const float *dec_pos;           /* [n_text_ctx, d] */
    const wh_block *dec;            /* [n_text_layer] */
    const float *dec_ln_g, *dec_ln_b;
} wh_net;

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
    /* The CPU backend and the weights as the forward reads them there. */
    choir_backend *cpu;
    wh_net net;
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

/* --- the forward over backend operations (whisper_enc.c) ------------------ */

/* Points m->net at the model's host weights on a CPU backend (made here). */
int wh_net_init_cpu(choir_whisper *m, choir_err *err);

/* The encoder on nb windows at once: mel [nb][n_mels][3000] -> x
 * [nb][n_audio_ctx][d], both in backend memory; working memory from the
 * stream (wh_enc_work_bytes), released again. The stream's status is
 * returned. */
int wh_encode_windows(choir_stream *s, const wh_net *w, const choir_whisper_dims *D,
                      const float *mel, int64_t nb, float *x);
/* Working memory wh_encode_windows takes for nb windows, and the CPU
 * kernel scratch one of its calls takes at most. */
size_t wh_enc_work_bytes(const choir_whisper_dims *D, int64_t nb);
size_t wh_enc_scratch_bytes(const wh_net *w, const choir_whisper_dims *D, int64_t nb);
/* Cross-attention keys and values of one window from its encoder rows enc
 * [n_audio_ctx, d]: k, v [n_text_layer][n_audio_ctx][d], backend memory. */
int wh_cross_kv(choir_stream *s, const wh_net *w, const choir_whisper_dims *D, const float *enc,
                float *k, float *v);
size_t wh_cross_scratch_bytes(const wh_net *w, const choir_whisper_dims *D);
/* wh_cross_kv on the model's CPU backend, host memory in and out. */
int wh_cross_kv_host(const choir_whisper *m, const float *enc, float *k, float *v,
                     choir_err *err);

/* --- the decoder over backend operations (whisper_dec.c) ------------------ */

/* Cross-attention logits wanted from a decoder pass of one sequence: for
 * head i, its pre-softmax scores q.k / sqrt(Dh) of every new row against
 * the window's keys, into qk + i * N * A ([n_heads][N][A], backend memory). */
typedef struct wh_qk_req {
    int n_heads;
    const int32_t *layer, *head; /* [n_heads]: decoder layer and head, 0-based */
    float *qk;
} wh_qk_req;

/* The checks of choir_whisper_decode (tokens, windows, capacities). */
int choir_whisper_decode_check(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                               const int32_t *tokens, const int *n_tokens, choir_err *err);
/* Working memory of a decoder pass over N new tokens, and the CPU kernel
 * scratch one of its calls takes at most. */
size_t wh_dec_work_bytes(const choir_whisper_dims *D, int64_t N);
size_t wh_dec_scratch_bytes(const wh_net *w, const choir_whisper_dims *D, int64_t N);
/* choir_whisper_decode's computation on stream s (checked arguments; logits
 * NULL: none computed), qk NULL or the cross-attention logits wanted. */
int wh_decode_run(choir_stream *s, const wh_net *w, const choir_whisper_dims *D,
                  choir_whisper_seq *const *seqs, int n_seq, const int32_t *tokens,
                  const int *n_tokens, bool all_positions, float *logits, const wh_qk_req *qk);
/* wh_decode_run on a stream of its own over the model's CPU backend. */
int wh_decode_host(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                   const int32_t *tokens, const int *n_tokens, bool all_positions, float *logits,
                   const wh_qk_req *qk, choir_err *err);

/* --- the per-step rules (whisper_filters.c, whisper_rules.c) -------------- */

/* The filters before the timestamp mass rule (suppression, timestamp masks). */
void wf_masks(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens, float *logits);

/* What a step needs of one hypothesis' filtered logits. */
typedef struct wr_pick {
    int argmax;    /* first id of the largest filtered logit; 0 when all are -INFINITY */
    double lse;    /* log-sum-exp of the filtered row; -INFINITY when all are */
} wr_pick;

/* Applies the filters to logits [f->n_vocab] in place (as
 * choir_whisper_filter_logits) and fills out. wr_rules fuses the passes;
 * wr_rules_ref is its plain twin (filters, argmax, log-sum-exp one after
 * the other): both leave the same row and the same bits in out. */
void wr_rules(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens, float *logits,
              wr_pick *out);
void wr_rules_ref(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens,
                  float *logits, wr_pick *out);
/* wr_rules with the row's exponentials spread over `pool` (scratch: n_vocab
 * doubles), still added in order on the caller: the same bits. For when
 * there are fewer rows than threads. pool or scratch NULL: wr_rules. */
void wr_rules_pool(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens,
                   float *logits, wr_pick *out, choir_pool *pool, double *scratch);
/* The K (<= CHOIR_WHISPER_MAX_BEAM + 1) best ids of a filtered row into
 * ids[], value descending, equal values lower id first, -INFINITY never;
 * returns how many (fewer than K when fewer are finite). wr_topk is one
 * pass; wr_topk_ref is K passes, as the beam search first had it. */
int wr_topk(const float *logits, int V, int K, int *ids);
int wr_topk_ref(const float *logits, int V, int K, int *ids);

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
/* Pinned host memory of `bytes` for decoder logits, which wg_decode then
 * downloads into directly; NULL when the runtime refuses or WG_MAX_LENT
 * blocks are out (the caller then uses ordinary memory: not an error).
 * wg_logits_free gives a block back and returns true, or returns false
 * (doing nothing) when p was not lent by g. */
float *wg_logits_alloc(struct choir_whisper_gpu *g, size_t bytes);
bool wg_logits_free(struct choir_whisper_gpu *g, float *p);
#endif

/* Index of the largest of x[0..n) (the first on ties), and the log-sum-exp
 * of x[0..n) in double (-INFINITY when every entry is): the plain reference
 * forms the decoder and the fused rules (whisper_rules.c) share. */
int wh_argmax(const float *x, int n);
double wh_lse(const float *x, int n);

#endif
