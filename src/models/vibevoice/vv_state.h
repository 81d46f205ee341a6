/* The per-request state of VibeVoice-ASR (vv_state.c): the planned buffers
 * of the encoders and the language model, the convolution caches, the
 * latents and the KV cache. */
#ifndef CHOIR_VV_STATE_H
#define CHOIR_VV_STATE_H

#include "models/vibevoice/vv_internal.h"

/* Kernel sizes of one encoder's convolutions (planning needs them). */
typedef struct vv_kernels {
    int down[CHOIR_VIBEVOICE_MAX_STAGES]; /* down[0]: the stem */
    int mixer, head;
} vv_kernels;

/* The published kernels: 7 for stem, mixers and head, 2 x ratio downsampling. */
void vv_kernels_default(const choir_vibevoice_enc_dims *d, vv_kernels *k);
void vv_kernels_of(const vv_encoder *e, vv_kernels *k);

/* Floats of each encoder buffer (the larger encoder's). */
typedef struct vv_enc_sizes {
    int64_t in, x, tmp, norm, tile, cache;
} vv_enc_sizes;

/* Everything of a state lives in backend memory carved from its stream
 * (one block), except the host copies a CUDA state keeps for the caller. */
struct choir_vibevoice_state {
    const choir_vibevoice *m;
    choir_vibevoice_plan plan;
    choir_stream *stream;   /* where its passes run */
    int owns_stream;        /* made by choir_vibevoice_state_create */
    choir_arena *over;      /* the caller's block as the stream's arena, or NULL */
    void *block;            /* backend memory of the whole layout */
    int host;               /* the backend's memory is host memory */
    int enc_fused;          /* the encoder blocks' fused device path (vv_encoder.c; CHOIR_VV_ENC_FUSED=1) */
    vv_kernels kernels[2];
    vv_enc_sizes sizes;
    /* encoders */
    int64_t piece;          /* samples per encoder pass (a multiple of the hop) */
    float *e_in;            /* a convolution's input with its left context [rows][cin] */
    float *e_x;             /* the stage activation [T][C] */
    float *e_tmp;           /* tap-block sums, mixer output [T][C] */
    float *e_norm;          /* the mixer's input with its context [(k - 1) + T][C] */
    float *e_tile;          /* FFN tile: normed [tile][C], hidden [tile][F], out [tile][C] */
    float *e_cache;         /* every convolution's left context, one encoder at a time */
    float *lat[2];          /* latents [max_frames][vae] of both encoders */
    int64_t max_frames, n_frames;
    /* language model */
    int prefill_chunk, ctx;
    float *x, *xn, *tmp;    /* [chunk][H] residual stream, normed, projection out */
    float *ca, *cb;         /* [chunk][H] connector outputs */
    float *q, *att;         /* [chunk][heads D] */
    float *gate, *up;       /* [chunk][I] */
    float *logits;          /* [vocab] backend memory */
    int32_t *ids, *pos;     /* [chunk] token ids and positions of a prefill chunk or step */
    float *logits_host;     /* [vocab] what the caller reads (s->logits on the CPU) */
    int32_t *pos_host;      /* [chunk] positions staged for upload (CUDA only) */
    int32_t *zeros;         /* [chunk] backend memory holding 0 (rows_scatter's slots) */
    float *k_cache, *v_cache; /* [layers][ctx][kv heads D]; NULL when paged */
    /* Paged (choir_vibevoice_state_create_paged): the cache is in the pool's
     * pages; table[p] is the page of positions p 128 .. p 128 + 127. */
    choir_vibevoice_kv_pool *pool;
    int32_t *table;         /* [max_pages] backend memory */
    int32_t *table_host;    /* [max_pages] host copy */
    int32_t *slots;         /* [chunk] backend memory: pool rows of the chunk's new keys */
    int32_t *slots_host;    /* [chunk] staged for upload */
    int max_pages, held, table_dirty;
    /* The decoding step recorded once (CUDA, a state owning its stream): it
     * reads the token and position from ids[0] and pos[0], so every later
     * step is one replay. step_direct counts the steps run op by op. */
    choir_graph *step_graph;
    int step_graph_on, step_graph_failed, step_graph_last, step_direct;
    int n_past;             /* tokens in the cache */
    int64_t audio_used;     /* latent frames consumed by prefill so far */
};

/* The pool behind paged states (vv_kvpool.c). */
struct choir_vibevoice_kv_pool {
    const choir_vibevoice *m;
    choir_stream *stream;   /* holds the pages */
    void *k, *v;            /* [layers][pages 128][kv heads D] of `kv` values */
    choir_dtype kv;         /* CHOIR_DTYPE_F32 or CHOIR_DTYPE_BF16 */
    int64_t layer_rows;     /* pages 128 */
    int pages, reserved;
    int n_free;
    int32_t *free_pages;    /* [pages] host stack of pages holding no tokens */
};

/* Layer l's key and value pool rows of a paged state (values of
 * s->pool->kv). */
/* The two halves of language-model layer w over `rows` rows of the residual
 * stream x [rows, H], shared by the prefill, a sequence's step and a batch's
 * step (xn [rows, H] is scratch). vv_layer_qkv: n = RMSNorm(x), q, k, v =
 * n W^T + bias (one operation: on CUDA one kernel for a step's row), then the
 * rotary positions pos [rows] on q and k. vv_layer_mlp, after the attention
 * wrote att [rows, nh D]: x += att o^T; n = RMSNorm(x); x += (SiLU(n gate^T)
 * * n up^T) down^T, the residual adds fused into the products where the
 * backend does that (a step's row on CUDA); gate, up [rows, I], tmp
 * [rows, H] scratch. The CPU computes exactly the operations in turn. */
void vv_layer_qkv(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, const float *x, float *xn,
                  int64_t rows, const int32_t *pos, float *q, float *k, float *v);
/* vv_layer_qkv for decoding steps, then the new key and value rows (k, v
 * [rows, kv heads D]) also to kout and vout (choir_op_rows_scatter's
 * destinations): with choir_vv_rope_kv_on, the rotations and the two
 * scatters as one operation (choir_op_rope_kv_rows), otherwise the two
 * ropes and the two scatters; the same floats either way. */
void vv_layer_qkv_store(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, const float *x, float *xn,
                        int64_t rows, const int32_t *pos, float *q, float *k, float *v, const choir_rows_out *kout,
                        const choir_rows_out *vout);
void vv_layer_mlp(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, float *x, float *xn,
                  const float *att, int64_t rows, float *gate, float *up, float *tmp);
/* The final norm and the output head over rows of x, into logits [rows, V]. */
void vv_lm_head(const choir_vibevoice *m, choir_stream *st, const float *x, float *xn, int64_t rows,
                float *logits);
void *vv_pool_k(const choir_vibevoice_state *s, int l);
void *vv_pool_v(const choir_vibevoice_state *s, int l);
/* A paged state takes pages for positions up to `tokens` (from its
 * reservation) and uploads its table when it changed. */
void vv_paged_hold(choir_vibevoice_state *s, int64_t tokens);
/* Pool rows of positions n_past .. n_past + rows - 1 into s->slots (after
 * vv_paged_hold(s, n_past + rows)). */
void vv_paged_slots(choir_vibevoice_state *s, int64_t rows);
/* Admission and release of a paged state's pages (vv_state.c calls them). */
int vv_paged_reserve(choir_vibevoice_kv_pool *p, int pages, choir_err *err);
void vv_paged_release(choir_vibevoice_state *s);

/* Bytes of the layout (one stream allocation) and of the kernel scratch a
 * state for `plan` reserves. */
void vv_plan_sizes(const choir_vibevoice_dims *dims, const choir_vibevoice_plan *plan, int64_t *layout_bytes,
                   int64_t *scratch_bytes);

/* The stream's first error as the call's return (0 when none). */
int vv_status(choir_vibevoice_state *s, choir_err *err);

/* out[n][H] = acoustic + semantic connector over latent frames f0 .. f0 + n - 1
 * (n at most the prefill chunk; uses s->tmp and s->cb). */
void vv_connect_rows(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t f0, int64_t n, float *out);

/* Encoding pass by pass (choir_vibevoice_encode is the whole loop, then
 * the downloads): where the next encoder pass starts. */
typedef struct vv_enc_cursor {
    int64_t n, chunk; /* samples to encode; samples per streaming chunk */
    int64_t c0, p0;   /* the chunk, and the pass within it */
    int e;            /* the encoder (2: both done) */
} vv_enc_cursor;
/* Checks n against the state and sets the cursor at the first pass; 0 or
 * the error. */
int vv_encode_start(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t n, int64_t chunk_samples,
                    vv_enc_cursor *c, choir_err *err);
/* Runs the next pass over x (queued on the state's stream); 1 while passes
 * remain, 0 once both encoders are done (the latents in the state). */
int vv_encode_pass(const choir_vibevoice *m, choir_vibevoice_state *s, const float *x, vv_enc_cursor *c);
/* Prefill chunk by chunk (choir_vibevoice_prefill is the whole loop): the
 * next chunk of the prompt ids[n] from *done (the prompt is checked when
 * *done is 0), *done advanced; 1 while rows remain, 0 once all n are in
 * (the last position's logits then in the state), or an error. */
int vv_prefill_next(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int n, int *done,
                    choir_err *err);

/* One transcription request in phases (vv_transcribe.c), so that the engine
 * adapter can decode several in shared steps (choir_vibevoice_step_batch). */
struct choir_tokenizer;
struct choir_tokenizer_stream;
/* The front end's loudness normalisation (choir_vibevoice_normalize) in
 * pieces, so that opening an hour of audio does not hold up the steps of
 * the requests decoding beside it: the passes in order, each over ranges of
 * samples, the arithmetic exactly the whole loop's. */
enum { VV_NORM_SQUARES = 0, VV_NORM_SCALE, VV_NORM_LIMIT, VV_NORM_PAD, VV_NORM_DONE };
typedef struct vv_norm {
    int pass;       /* VV_NORM_* */
    int64_t pos;    /* the next sample of the pass */
    double ss, scale, peak;
} vv_norm;
/* Advances st (zeroed to begin) by at most `piece` samples of x[0..n)
 * (piece <= 0: a whole pass) into out (choir_vibevoice_padded_len(n, hop)
 * samples; out may be x). 1 while work remains, 0 once out holds the
 * normalised, padded audio. */
int vv_norm_step(vv_norm *st, const float *x, int64_t n, int hop, float *out, int64_t piece);
/* Samples of a normalisation pass between two looks at the clock in
 * vv_job_prep: 42 s of audio, a few ms on the CPU (a whole hour takes
 * 0.4-0.5 s on a loaded 2-core machine, first touch of its buffer
 * included). */
#define VV_NORM_PIECE ((int64_t)1 << 20)

typedef struct vv_job {
    const choir_vibevoice *m;
    const struct choir_tokenizer *tok;
    choir_vibevoice_opts o;
    choir_vibevoice_state *s;
    choir_vibevoice_result res;
    struct choir_tokenizer_stream *ts;
    int32_t *gen;             /* [max_new] generated tokens */
    int *run;                 /* the loop guard's counters */
    int n_gen, max_new;
    int32_t im_end, pending;  /* pending: the token the next step appends */
    vv_content cs;
    char *cbuf;
    size_t cb_cap;
    double t_decode0;
    /* Until it decodes (vv_job_open, then vv_job_prep): */
    int phase;                /* 0 encoding (its front end first), 1 prefilling, 2 ready to decode */
    float *x;                 /* [np] the normalised audio, until it is encoded */
    const float *src;         /* [n_src] the 24 kHz audio, until it is normalised into x */
    int64_t n_src;
    float *src_owned;         /* src when the job resampled it (freed once normalised) */
    vv_norm norm;
    int64_t np;
    vv_enc_cursor enc;
    int32_t *prompt;          /* [n_prompt] the prompt ids, until they are prefilled */
    int n_prompt, prefilled;
} vv_job;

/* Resampling, prompt and state of one request, nothing run on the model
 * yet (the normalisation is vv_job_prep's first piece of work); 0 or the
 * error (nothing left to clear then). `pcm`, when it is at 24 kHz, must
 * stay valid until the job is encoded (the job reads it then). The state over `mem`, on `stream`, or with
 * `pool` its own block and the pool's pages (vv_transcribe.c). */
int vv_job_open(vv_job *j, const choir_vibevoice *m, const struct choir_tokenizer *tok, const float *pcm,
                int64_t n, int rate, const choir_vibevoice_opts *opts, void *mem, choir_stream *stream,
                choir_vibevoice_kv_pool *pool, choir_err *err);
/* The front end's normalisation, the encoders' passes and the prefill
 * chunks of an opened job, in order, for about `budget_s` seconds (0: to
 * the end): each piece of work (VV_NORM_PIECE samples of a normalisation
 * pass, one encoder pass, one prefill chunk) is waited for before the time is read,
 * so a call lasts at most the budget plus one piece. 1 while work remains,
 * 0 once the job is ready to decode (vv_job_next), or the error (the job
 * cleared then). */
int vv_job_prep(vv_job *j, double budget_s, choir_err *err);
/* vv_job_open and the whole vv_job_prep. */
int vv_job_begin(vv_job *j, const choir_vibevoice *m, const struct choir_tokenizer *tok, const float *pcm,
                 int64_t n, int rate, const choir_vibevoice_opts *opts, void *mem, choir_stream *stream,
                 choir_vibevoice_kv_pool *pool, choir_err *err);
/* After each step's logits: 1 when the job needs a step appending
 * j->pending, 0 when it stopped (EOS, length, loop, cancelled), or an error. */
int vv_job_next(vv_job *j, choir_err *err);
/* vv_job_next with the step's greedy pick t already made (by
 * choir_vibevoice_step_batch_greedy, on the backend): the same rules from
 * there on. */
int vv_job_take(vv_job *j, int32_t t, choir_err *err);
/* The result (the caller clears it with choir_vibevoice_result_clear); frees
 * the job's state either way. */
int vv_job_finish(vv_job *j, choir_vibevoice_result *res, choir_err *err);
/* Frees whatever the job holds. */
void vv_job_clear(vv_job *j);

#endif
