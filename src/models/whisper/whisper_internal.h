/* Internals of the Whisper model shared by its source files (not public). */
#ifndef CHOIR_WHISPER_INTERNAL_H
#define CHOIR_WHISPER_INTERNAL_H

#include "choir/backend.h"
#include "choir/pool.h"
#include "choir/tensor.h"
#include "choir/whisper.h"
#include "choir/whisper_words.h"

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
    /* Keep the encoder's rows f32 on a device even with bf16 weights (the
     * bench's before figure; whisper_enc.c says when rows are bf16). */
    bool enc_f32_rows;
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
    /* generation_config.json's alignment_heads when the directory has
     * them (n_align > 0), else the size's table. */
    choir_whisper_head *align;
    int n_align;
    /* Set by choir_whisper_gpu_attach: the network functions then run there. */
    struct choir_whisper_gpu *gpu;
    /* The CPU backend and the weights as the forward reads them there. */
    choir_backend *cpu;
    wh_net net;
    /* Dtype of the caches made on the CPU (cross K/V and self-attention),
     * set with the network (wh_net_init_cpu: wh_cpu_cache_dtype): f32 for
     * f32 weights, else the weights' 16-bit type. Tests change it between
     * caches to compare against f32 caches; caches made earlier keep
     * theirs. */
    choir_dtype cache_kv;
};

/* Caches of one size in one backend buffer per K and V, handed out by slot
 * (the device's pools, whisper_cuda.c): slot i's layer l starts at element
 * i slot_elems + l positions d. Growing moves them: the owners' pointers are
 * repointed and captured graphs dropped. */
typedef struct wh_pool {
    void *k, *v;           /* backend memory [cap][slot_elems] each, of dtype dt */
    choir_dtype dt;        /* CHOIR_DTYPE_F32 or CHOIR_DTYPE_BF16 */
    int64_t slot_elems;    /* n_layer * positions * d */
    int positions;         /* per layer */
    int cap;
    unsigned char *used;   /* host [cap] */
    void **owner;          /* host [cap]: the choir_whisper_seq (of_seqs) or _cross of each slot */
    bool of_seqs;
} wh_pool;

/* Bytes of one cache element, and element i of a cache at base. */
static inline size_t wh_kv_size(choir_dtype dt) { return dt == CHOIR_DTYPE_F32 ? 4 : 2; }
static inline void *wh_kv_at(void *base, choir_dtype dt, int64_t i) {
    return (char *)base + (size_t)i * wh_kv_size(dt);
}

struct choir_whisper_cross {
    int n_layer, n_ctx, d;
    /* Backend memory [n_text_layer][n_audio_ctx][d] of dtype kv (on the CPU
     * the model's cache_kv; on a device the model's, bf16 for a
     * half-precision model): host arrays on the CPU, slot `slot` of `pool`
     * on a device. */
    void *k, *v;
    choir_dtype kv;
    struct choir_whisper_gpu *gpu; /* the device's, NULL on the CPU */
    wh_pool *pool;
    int slot;
    /* The batch stream whose arena holds this cache (the struct included),
     * NULL when it is memory of its own. Everything that attends to the
     * window (its sequences, their decoder passes) carves from it too. */
    choir_stream *bs;
};

struct choir_whisper_seq {
    int n_layer, n_ctx, d; /* n_ctx: capacity in positions */
    int positions;         /* positions per layer in memory (>= n_ctx) */
    int n_past;
    const choir_whisper_cross *cross;
    /* Backend memory [n_text_layer][positions][d] of dtype kv, as the
     * cross's. */
    void *k, *v;
    choir_dtype kv;
    struct choir_whisper_gpu *gpu; /* the device's, NULL on the CPU */
    wh_pool *pool;
    int slot;
    choir_stream *bs; /* as the cross's: the batch stream holding it, or NULL */
};

/* --- batch memory (CPU) --------------------------------------------------- */
/* A transcription given an arena (the engine's batch arena) runs on one
 * "batch stream" over it (choir_stream_use_arena): every window's cross
 * cache, every hypothesis' KV cache and tokens, the decoder's buffers of
 * each step and the encoder's activations are carved from it in scoped
 * (mark / release) order, and the kernel scratch is one block carved once.
 * Caches made on it are given back by releasing past them, not by their
 * free functions (which do nothing for them). Nothing in the forward then
 * allocates, and the arena's high-water mark is what the batch used. */

/* Kernel scratch the batch stream reserves for a call that decodes up to
 * n_windows windows at once with G hypotheses each: the largest any
 * encoder pass, cross K/V, prefill, step or word-timestamp pass takes. */
size_t wh_batch_scratch_bytes(const choir_whisper *m, int n_windows, int G);

/* --- the forward over backend operations (whisper_enc.c) ------------------ */

/* Points m->net at the model's host weights on a CPU backend (made here)
 * and sets m->cache_kv. */
int wh_net_init_cpu(choir_whisper *m, choir_err *err);
/* The dtype the CPU keeps a model's caches in: its decoder matrices' 16-bit
 * type (f16, bf16; f16 for quantized ones), f32 for f32 weights. A step
 * reads the whole cross-attention cache (for tiny in f32 a quarter of what
 * it reads), so 16 bits make it half; the kernels widen each value as they
 * read it (choir_attention_f16 / _bf16), so attention is f32 arithmetic over
 * the rounded keys and values, as whisper.cpp's f16 caches. */
choir_dtype wh_cpu_cache_dtype(const choir_whisper *m);

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
 * [n_audio_ctx, d] into c's k, v ([n_text_layer][n_audio_ctx][d], backend
 * memory of dtype c->kv; a bf16 or f16 cache takes n_audio_ctx d floats of the
 * stream's working memory for the f32 products, wh_cross_work_bytes). */
int wh_cross_kv(choir_stream *s, const wh_net *w, const choir_whisper_dims *D, const float *enc,
                choir_whisper_cross *c);
size_t wh_cross_work_bytes(const choir_whisper_dims *D);
size_t wh_cross_scratch_bytes(const wh_net *w, const choir_whisper_dims *D);
/* A window's cross cache with its K/V memory placed where the network runs
 * (contents undefined), or NULL and err (whisper_net.c). */
choir_whisper_cross *wh_cross_new(const choir_whisper *m, choir_stream *bs, choir_err *err);
/* choir_whisper_encode_cross with the caches carved from the batch stream bs
 * (NULL: as the public call). */
int wh_encode_cross(const choir_whisper *m, choir_stream *bs, const float *mel, int n, float *enc,
                    choir_whisper_cross **cross, choir_err *err);
/* choir_whisper_seq_create with the cache carved from bs (NULL: its own). */
choir_whisper_seq *wh_seq_new(const choir_whisper *m, int capacity, choir_stream *bs,
                              choir_err *err);

/* --- the decoder over backend operations (whisper_dec.c) ------------------ */

/* Cross-attention logits wanted from a decoder pass of one sequence: for
 * head i, its pre-softmax scores q.k / sqrt(Dh) of every new row against
 * the window's keys, into qk + i * N * A ([n_heads][N][A], host memory: a
 * device computes them in its own and downloads them there). */
typedef struct wh_qk_req {
    int n_heads;
    const int32_t *layer, *head; /* [n_heads]: decoder layer and head, 0-based */
    float *qk;
} wh_qk_req;

/* The checks of choir_whisper_decode (tokens, windows, capacities). */
int choir_whisper_decode_check(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                               const int32_t *tokens, const int *n_tokens, choir_err *err);
/* Working memory of a decoder pass over N new tokens (n_out logits rows
 * carved too, for a device), and the CPU kernel scratch one of its calls
 * takes at most with caches of dtype kv (16-bit ones are widened for a
 * call of many rows). */
size_t wh_dec_work_bytes(const choir_whisper_dims *D, int64_t N, int64_t n_out);
size_t wh_dec_scratch_bytes(const wh_net *w, const choir_whisper_dims *D, int64_t N,
                            choir_dtype kv);
/* Working memory a device's pass of n rows also carves to give the
 * cross-attention logits of n_heads heads (wh_qk_req). */
size_t wh_dec_qk_bytes(const choir_whisper_dims *D, int n_heads, int64_t n);

/* What a decoder call runs on: a stream over the network's backend and, on
 * a device, the captured steps. The CPU makes one per call (several engine
 * workers decode at once); an attached device keeps one (whisper_cuda.c). */
typedef struct wh_dec_rt {
    choir_stream *s;
    int32_t *staging;      /* host memory [WH_META * rows_cap] for a device's inputs */
    int rows_cap;          /* rows the stream's memory was planned for */
    choir_graph **graphs;  /* [rows_cap + 1] by batch size; NULL: no graphs */
    bool use_graphs;
    int64_t steps_graph, steps_direct;
    int graph_failures;
    /* Greedy decoding on the device (wh_greedy_run): graphs of 1, 2, 4, ...
     * steps by batch size, [(rows_cap + 1) * WH_GREEDY_KS], recorded for
     * the filter settings in gkey; pinned staging for the hypotheses. */
    choir_graph **ggraphs;
    int gkey[5];
    void *gstage;
    size_t gstage_bytes;
    choir_backend *be; /* for the pinned staging */
} wh_dec_rt;
#define WH_GREEDY_KS 5 /* graphs of 1, 2, 4, 8, 16 steps */
#define WH_META 5 /* int32 inputs per row: id, position, cache slot, cross slot, keys */

/* choir_whisper_decode's computation on rt (checked arguments; logits NULL:
 * none computed; host memory whatever the backend), qk NULL or the
 * cross-attention logits wanted (one sequence's: seqs[0]). A batch of one-token steps of
 * sequences that share a pool runs as one fixed sequence of operations over
 * the pools (the slots, positions and lengths read from backend memory), so
 * that a device captures it once per batch size and replays it. Returns 0
 * or the error, also in err. */
int wh_decode_run(wh_dec_rt *rt, const wh_net *w, const choir_whisper_dims *D,
                  choir_whisper_seq *const *seqs, int n_seq, const int32_t *tokens,
                  const int *n_tokens, bool all_positions, float *logits, const wh_qk_req *qk,
                  choir_err *err);
/* wh_decode_run over the model's CPU backend: on the batch stream of the
 * sequences' window when it has one, else on a stream of its own. */
int wh_decode_host(const choir_whisper *m, choir_whisper_seq *const *seqs, int n_seq,
                   const int32_t *tokens, const int *n_tokens, bool all_positions, float *logits,
                   const wh_qk_req *qk, choir_err *err);
/* Frees rt's graphs (before anything they point into moves). */
void wh_dec_graphs_drop(wh_dec_rt *rt);

/* Greedy decoding of n_seq hypotheses with the rules on the device
 * (choir/backend_whisper.h): after the start sequences, hypothesis i holds
 * n[i] tokens in tokens[i] (room for ld) and logits[i] [n_vocab] (host) are
 * its next-token logits. Each step applies f's rules (f->sample_begin
 * replaced by sample_begin[i]), appends the pick and feeds it, as the host
 * loop of whisper_decode.c does; hypothesis i stops at eot or once it holds
 * limit[i] tokens. Up to `steps` steps run per host wake-up, replayed from
 * graphs; the host only checks whether every hypothesis has stopped. Every
 * sequence's cache and window must be slots of the device's pools (else
 * CHOIR_EUNSUPPORTED, nothing done). On return tokens, n, sum_logprob
 * (added to) and the sequences' lengths are updated. */
typedef struct wh_greedy_req {
    const choir_whisper_filter *f;
    int32_t *const *tokens;
    int ld;
    int *n;
    double *sum_logprob;
    const int *sample_begin, *limit;
    const float *const *logits;
    int steps;
} wh_greedy_req;
int wh_greedy_run(wh_dec_rt *rt, const wh_net *w, const choir_whisper_dims *D,
                  choir_whisper_seq *const *seqs, int n_seq, const wh_greedy_req *q,
                  choir_err *err);
/* Backend memory wh_greedy_run carves for B hypotheses beside the step's. */
size_t wh_greedy_work_bytes(const choir_whisper_dims *D, int64_t B);

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

/* Where the network runs: the placement of its memory (whisper_net.c on the
 * CPU; the attached device's side, whisper_cuda.c). */
/* The weights as the forward reads them on the backend it runs on now. */
const wh_net *wh_active_net(const choir_whisper *m);
/* A stream with `work` bytes of working memory (and `scratch` bytes of CPU
 * kernel scratch) for one call: made for it on the CPU, the device's own
 * encoder stream there. wh_stream_done syncs it, reports its error (rc
 * when already failed) and frees or resets it. */
choir_stream *wh_stream_open(const choir_whisper *m, size_t work, size_t scratch, choir_err *err);
int wh_stream_done(const choir_whisper *m, choir_stream *s, int rc, choir_err *err);

#ifdef CHOIR_HAVE_CUDA
/* The device's side of that placement (whisper_cuda.c). */
const wh_net *wg_net(const struct choir_whisper_gpu *g);
choir_stream *wg_stream_open(struct choir_whisper_gpu *g, size_t work, choir_err *err);
int wg_stream_done(struct choir_whisper_gpu *g, int rc, choir_err *err);
/* A pool slot for a new window's cross K/V, or a new sequence's cache of
 * `capacity` positions (its k, v and slot filled); freeing gives it back. */
int wg_cross_init(struct choir_whisper_gpu *g, choir_whisper_cross *c, choir_err *err);
int wg_seq_init(struct choir_whisper_gpu *g, choir_whisper_seq *s, choir_err *err);
void wg_slot_release(wh_pool *p, int slot);
/* The first n_keep positions of src's cache into dst's, in stream order. */
void wg_seq_copy(struct choir_whisper_gpu *g, choir_whisper_seq *dst, const choir_whisper_seq *src,
                 int n_keep);
/* The decoder's runtime with room for N rows (n_out logits rows) and
 * `extra` bytes of working memory more (a pass giving cross-attention
 * logits: wh_dec_qk_bytes), or NULL and err. */
wh_dec_rt *wg_dec_rt(struct choir_whisper_gpu *g, int64_t N, int64_t n_out, size_t extra,
                     choir_err *err);
/* Decoder steps per host wake-up of greedy decoding with the rules on the
 * device (choir_whisper_gpu_opts.greedy_steps; 0: the rules on the host). */
int wg_greedy_steps(const struct choir_whisper_gpu *g);
/* Pinned host memory of `bytes` for decoder logits, which the decoder then
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
