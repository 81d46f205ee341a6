/* choir/vibevoice.h: VibeVoice-ASR, long-form multi-speaker speech-to-text
 * (microsoft/VibeVoice-ASR: two σ-VAE speech encoders, two connectors and a
 * Qwen2 language model that writes the transcript as JSON segments with
 * start, end, speaker and text).
 *
 * Layers, each usable alone (spec: ../shared/specs/vibevoice_asr.md):
 *  1. The model: an immutable, shareable `choir_vibevoice` (weights mapped from
 *     the checkpoint; only convolution kernels are re-laid out), loaded from
 *     any published layout (transformers' nested and flat names, the original
 *     sharded checkpoint, mlx-community's with a 4/8-bit language model).
 *  2. The network on per-request state: the audio front (24 kHz mono, −25 dBFS,
 *     padded to the hop), both encoders streamed over the audio with their
 *     causal-convolution caches, the connectors, and the language model with
 *     a KV cache (chunked prefill, flash-style attention, one-token steps).
 *     All working memory is planned up front: choir_vibevoice_plan_bytes says
 *     how much, and a state takes it in one block.
 *  3. Transcription: the exact prompt, greedy decoding with stop tokens, a
 *     repetition-loop guard and max_new_tokens, text streamed as decoded, and
 *     the model's JSON parsed into segments.
 *
 * Units: audio in samples at 24 kHz unless a rate is given, times in seconds,
 * sizes in bytes. */
#ifndef CHOIR_VIBEVOICE_H
#define CHOIR_VIBEVOICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"
#include "choir/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_VIBEVOICE_SAMPLE_RATE 24000
#define CHOIR_VIBEVOICE_MAX_STAGES 8

/* One σ-VAE encoder (acoustic or semantic: same topology). */
typedef struct choir_vibevoice_enc_dims {
    int vae_dim;     /* latent width: 64 acoustic, 128 semantic in the 7B model */
    int n_filters;   /* stem width (32) */
    int n_stages;    /* stem + downsampling layers, each with its blocks (7) */
    int ratios[CHOIR_VIBEVOICE_MAX_STAGES - 1]; /* strides in the order applied: 2,2,4,5,5,8 */
    int depths[CHOIR_VIBEVOICE_MAX_STAGES];     /* Block1D per stage: 3,3,3,3,3,3,8 */
    int ffn_mult;    /* FFN width / channels (4) */
    float eps;       /* RMSNorm epsilon (1e-5) */
} choir_vibevoice_enc_dims;

/* The Qwen2 language model. */
typedef struct choir_vibevoice_lm_dims {
    int hidden, n_layers, n_heads, n_kv_heads, head_dim, intermediate, vocab;
    double rope_theta; /* 1e6 */
    float eps;         /* RMSNorm epsilon (1e-6) */
    int max_positions; /* 32768 / 131072 */
    int tied;          /* tie_word_embeddings: the output projection is the embedding */
} choir_vibevoice_lm_dims;

typedef struct choir_vibevoice_dims {
    choir_vibevoice_enc_dims acoustic, semantic;
    choir_vibevoice_lm_dims lm;
    int hop;                 /* product of the ratios: samples per audio token (3200) */
    int64_t chunk_samples;   /* acoustic_tokenizer_chunk_size (1,440,000 = 60 s) */
    float connector_eps;     /* the connectors' RMSNorm epsilon (1e-6) */
    int32_t audio_token, audio_bos, audio_eos; /* <|box_start|>, <|object_ref_start|>, _end| */
    int32_t eos_token;       /* <|endoftext|> */
} choir_vibevoice_dims;

/* Reads the dimensions from a config.json of either kind: transformers'
 * (model_type vibevoice_asr: *_tokenizer_encoder_config, text_config) or the
 * original / mlx-community one (acoustic_tokenizer_config with encoder_ratios
 * listed in reverse and encoder_depths as "3-3-3-3-3-3-8", decoder_config).
 * Returns 0, or CHOIR_EFORMAT naming the missing or impossible field. */
int choir_vibevoice_read_config(const char *config_path, choir_vibevoice_dims *dims, choir_err *err);

/* The published sizes, for benchmarks: "1.5b" (Qwen2.5-1.5B LM) and "7b"
 * (the 8.3 B-parameter ASR model: Qwen2.5-7B). 0 or CHOIR_EINVAL. */
int choir_vibevoice_dims_named(const char *name, choir_vibevoice_dims *dims, choir_err *err);

/* --- the model ------------------------------------------------------------ */

typedef struct choir_vibevoice choir_vibevoice;

/* Which naming the checkpoint used (detected from the tensor names). */
typedef enum choir_vibevoice_layout {
    CHOIR_VIBEVOICE_LAYOUT_HF = 0,      /* transformers 5.x: model.acoustic_tokenizer_encoder.* */
    CHOIR_VIBEVOICE_LAYOUT_HF_FLAT,     /* earlier transformers: acoustic_tokenizer_encoder.*, language_model.model.* */
    CHOIR_VIBEVOICE_LAYOUT_ORIGINAL,    /* microsoft/VibeVoice-ASR: model.acoustic_tokenizer.encoder.* */
    CHOIR_VIBEVOICE_LAYOUT_MLX          /* mlx-community (sanitized, MLX conv layout [O, K, I]) */
} choir_vibevoice_layout;

/* Loads a model directory: config.json plus model.safetensors or shards with
 * model.safetensors.index.json. Tensors are memory-mapped and used in place
 * (any float dtype; MLX-quantized language-model linears and embedding),
 * except convolution kernels, which are copied once into the layout the
 * convolution needs. The acoustic decoder of the original checkpoint is
 * never touched. Returns NULL and fills err naming the directory and the
 * missing or mis-shaped tensor on failure. */
choir_vibevoice *choir_vibevoice_load(const char *dir, choir_err *err);

/* Builds a model over tensors the caller holds (a benchmark's generated
 * weights): `find` returns the tensor of a name in any layout, or NULL. The
 * tensors must outlive the model. */
typedef const choir_st_tensor *(*choir_vibevoice_tensor_fn)(void *ctx, const char *name);
choir_vibevoice *choir_vibevoice_from_tensors(choir_vibevoice_tensor_fn find, void *ctx,
                                              const choir_vibevoice_dims *dims, choir_err *err);

struct choir_backend;
struct choir_stream;

/* As choir_vibevoice_load / choir_vibevoice_from_tensors, with the weights
 * put on `be` (choir/backend.h: on the CPU nothing is copied; on CUDA every
 * tensor is uploaded once) and every forward pass run there. be NULL: a CPU
 * backend of the model's own. A given backend must outlive the model. */
choir_vibevoice *choir_vibevoice_load_on(const char *dir, struct choir_backend *be, choir_err *err);
choir_vibevoice *choir_vibevoice_from_tensors_on(choir_vibevoice_tensor_fn find, void *ctx,
                                                 const choir_vibevoice_dims *dims,
                                                 struct choir_backend *be, choir_err *err);

/* NULL is a no-op. */
void choir_vibevoice_free(choir_vibevoice *m);
/* The backend the model's weights are on (owned by the model unless given). */
struct choir_backend *choir_vibevoice_backend(const choir_vibevoice *m);
/* Device bytes of the weights' copies on a CUDA backend (0 on the CPU). */
int64_t choir_vibevoice_device_bytes(const choir_vibevoice *m);

const choir_vibevoice_dims *choir_vibevoice_get_dims(const choir_vibevoice *m);
choir_vibevoice_layout choir_vibevoice_get_layout(const choir_vibevoice *m);
/* Bytes of weights the model keeps (mapped tensors it uses plus its copies). */
size_t choir_vibevoice_weight_bytes(const choir_vibevoice *m);
/* Bits of the language model's quantized linears (0: float). */
int choir_vibevoice_lm_bits(const choir_vibevoice *m);

/* --- random weights (benchmarks, GPU checks) ------------------------------ */

/* Every tensor of a model with these dimensions under transformers' names,
 * generated in memory from `seed` (0: a fixed default): matrices in `dtype`
 * (f32, f16 or bf16) or, with q_bits 4 or 8, the language model's linears
 * and embedding as MLX codes (group 64); vectors f32. Values are uniform and
 * scaled like an initialised network, generated on the default pool (the
 * same values whatever its size). Pass choir_vibevoice_randw_find and
 * the object to choir_vibevoice_from_tensors[_on]; it must outlive the model.
 * NULL and err on bad arguments or when out of memory. */
typedef struct choir_vibevoice_randw choir_vibevoice_randw;
choir_vibevoice_randw *choir_vibevoice_randw_create(const choir_vibevoice_dims *dims, choir_dtype dtype,
                                                    int q_bits, uint64_t seed, choir_err *err);
/* NULL is a no-op. */
void choir_vibevoice_randw_free(choir_vibevoice_randw *w);
/* A choir_vibevoice_tensor_fn over the generated tensors (ctx: the object). */
const choir_st_tensor *choir_vibevoice_randw_find(void *ctx, const char *name);
/* Bytes and count of the generated tensors. */
size_t choir_vibevoice_randw_bytes(const choir_vibevoice_randw *w);
int choir_vibevoice_randw_count(const choir_vibevoice_randw *w);
/* The next value of the generator, uniform in [-1, 1) (test inputs). */
float choir_vibevoice_randw_uniform(choir_vibevoice_randw *w);

/* --- audio front ---------------------------------------------------------- */

/* The feature extractor: x (24 kHz mono) scaled to −25 dBFS RMS
 * (x *= 10^(−25/20) / (rms + 1e-6), then divided by max|x| + 1e-6 if that
 * exceeds 1), then zero-padded at the end to a multiple of `hop`. Writes
 * choir_vibevoice_padded_len(n, hop) samples to out. n may be 0. */
int64_t choir_vibevoice_padded_len(int64_t n, int hop);
void choir_vibevoice_normalize(const float *x, int64_t n, int hop, float *out);

/* --- working memory ------------------------------------------------------- */

/* Capacities a state is planned for. */
typedef struct choir_vibevoice_plan {
    int64_t max_samples;    /* longest padded 24 kHz input it will encode */
    int max_context;        /* prompt + generated tokens the KV cache holds */
    int prefill_chunk;      /* tokens per prefill step (0: 256) */
    int64_t enc_piece;      /* samples per encoder pass (0: 32 hops); any multiple of
                               the hop gives the same result, only memory changes */
    int kv_paged;           /* 1: the KV cache lives in the pages of a pool
                               (choir_vibevoice_state_create_paged), not in the block */
} choir_vibevoice_plan;

/* Bytes a state for `plan` needs (encoder activations and latents, the
 * prefill and step buffers, the KV cache), all in one block. */
int64_t choir_vibevoice_plan_bytes(const choir_vibevoice_dims *dims, const choir_vibevoice_plan *plan);

typedef struct choir_vibevoice_state choir_vibevoice_state;

/* A state over `mem` (choir_vibevoice_plan_bytes(plan) bytes, aligned to 64,
 * owned by the caller and kept until the state is freed; CPU models only)
 * or, with mem NULL, over one block its own stream reserves on the model's
 * backend. NULL and err (CHOIR_ENOMEM) on failure. */
choir_vibevoice_state *choir_vibevoice_state_create(const choir_vibevoice *m,
                                                    const choir_vibevoice_plan *plan, void *mem,
                                                    choir_err *err);
/* A state whose passes run on `stream` (of the model's backend; the caller
 * keeps it, and uses it from one thread, until the state is freed) and
 * whose buffers are carved from the stream's working memory: the engine's
 * batch arena on the CPU, so its high-water mark is what the state used.
 * The stream needs choir_vibevoice_plan_bytes(plan) of working memory,
 * kernel scratch included (choir_vibevoice_plan_scratch_bytes). Errors of
 * the passes stay on the stream (sticky) and are returned by each call. */
choir_vibevoice_state *choir_vibevoice_state_create_on(const choir_vibevoice *m,
                                                       const choir_vibevoice_plan *plan,
                                                       struct choir_stream *stream, choir_err *err);
/* The kernel scratch part of choir_vibevoice_plan_bytes (what a stream
 * given to choir_vibevoice_state_create_on reserves for kernels). */
int64_t choir_vibevoice_plan_scratch_bytes(const choir_vibevoice_dims *dims,
                                           const choir_vibevoice_plan *plan);
/* NULL is a no-op. */
void choir_vibevoice_state_free(choir_vibevoice_state *s);

/* --- the network ---------------------------------------------------------- */

/* Encodes normalised, padded audio x[n] (n a multiple of the hop, at most the
 * plan's max_samples) with both encoders, streaming over it in
 * acoustic_tokenizer_chunk_size pieces (each cut into plan.enc_piece passes)
 * with every causal convolution's left context carried over. The latents
 * (means) of the n / hop frames stay in the state; copies go to
 * acoustic[T][vae_a] and semantic[T][vae_s] when those are not NULL.
 * `chunk_samples` overrides the config's chunk size when > 0. */
int choir_vibevoice_encode(const choir_vibevoice *m, choir_vibevoice_state *s, const float *x,
                           int64_t n, int64_t chunk_samples, float *acoustic, float *semantic,
                           choir_err *err);

/* The connectors over the state's latents: out[T][hidden] = acoustic
 * connector + semantic connector, for the T frames encoded last. */
int choir_vibevoice_audio_embeds(const choir_vibevoice *m, choir_vibevoice_state *s, float *out,
                                 choir_err *err);

/* Empties the KV cache (a new sequence). */
void choir_vibevoice_reset(choir_vibevoice_state *s);
/* Rows of each later prefill step (and connector pass): 1 .. the plan's
 * prefill_chunk, which the state's buffers hold; for timing chunk sizes on
 * one state. 0, or CHOIR_EINVAL (nothing changed). */
int choir_vibevoice_set_prefill_chunk(choir_vibevoice_state *s, int chunk);
/* Tokens in the KV cache. */
int choir_vibevoice_seq_len(const choir_vibevoice_state *s);

/* Runs the prompt ids[n] through the language model in prefill chunks,
 * appending to the KV cache. Every audio_token position takes the next row of
 * the encoded audio's embeddings (computed chunk by chunk from the latents);
 * there must be exactly as many as encoded frames when any appear. Writes the
 * logits of the last position to logits[vocab] (may be NULL), and when given,
 * inputs_embeds[n][hidden] and hidden_final[n][hidden] (after the final norm)
 * for checks. CHOIR_ETOOBIG when the cache would overflow, CHOIR_EINVAL on a
 * token outside the vocabulary or a mismatched audio token count. */
int choir_vibevoice_prefill(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids,
                            int n, float *logits, float *inputs_embeds, float *hidden_final,
                            choir_err *err);
/* One decoding step: appends `token` and writes the next logits[vocab]. */
int choir_vibevoice_step(const choir_vibevoice *m, choir_vibevoice_state *s, int32_t token,
                         float *logits, choir_err *err);
/* On a device backend, for a state that owns its stream
 * (choir_vibevoice_state_create): on = record the step as a graph at the
 * next step after one run op by op, then replay it (one launch a step);
 * off (the default) = every step op by op, and a recorded graph is freed.
 * While the graph lives, the backend's kernel scratch cannot grow, so
 * another state on the same backend that needs more scratch (a longer
 * plan) fails with CHOIR_EBUSY: turn it on where one state decodes at a
 * time. No effect on the CPU. */
void choir_vibevoice_set_step_graph(choir_vibevoice_state *s, bool on);
/* Whether the last step was a graph replay. */
bool choir_vibevoice_step_graphed(const choir_vibevoice_state *s);

/* --- paged KV cache ------------------------------------------------------- */
/* The keys and values of many states in one pool on the model's backend,
 * in pages of CHOIR_VV_PAGE (128) positions (every layer's K and V rows of
 * those positions, f32): the engine sizes one pool from its device budget,
 * and a request is admitted by the pages its context needs, not by a count.
 * A state created on the pool reserves ceil(max_context / 128) pages when it
 * is created (CHOIR_EBUSY when the pool has fewer unreserved: admission),
 * takes them from the pool as its tokens fill them (its page table, in
 * backend memory, is what the attention reads), and gives them back when it
 * is freed. Results are those of a state with its own cache, up to the
 * summation order of the attention. */
typedef struct choir_vibevoice_kv_pool choir_vibevoice_kv_pool;
/* Bytes of one page for these dimensions (f32; _as: of `kv` values). */
int64_t choir_vibevoice_kv_page_bytes(const choir_vibevoice_dims *dims);
int64_t choir_vibevoice_kv_page_bytes_as(const choir_vibevoice_dims *dims, choir_dtype kv);
/* Pages a context of `tokens` positions takes. */
int choir_vibevoice_kv_pages_for(int64_t tokens);
/* A pool of bytes / choir_vibevoice_kv_page_bytes pages (at least one) on
 * m's backend, held by a stream of its own (counted in the backend's memory
 * and its device budget: CHOIR_EBUSY / CHOIR_ENOMEM when it does not fit).
 * NULL and err on failure. */
choir_vibevoice_kv_pool *choir_vibevoice_kv_pool_create(const choir_vibevoice *m, int64_t bytes,
                                                        choir_err *err);
/* The same pool holding `kv` values: CHOIR_DTYPE_F32 (as above) or
 * CHOIR_DTYPE_BF16 (pages of half the bytes: each new key and value is
 * rounded to bf16 as it is written and widened as the attention reads it,
 * so results are those of an f32 cache within bf16's rounding of K and V;
 * tests/test_vibevoice_batch.c states the bound). CHOIR_EINVAL for
 * another dtype. */
choir_vibevoice_kv_pool *choir_vibevoice_kv_pool_create_as(const choir_vibevoice *m, int64_t bytes,
                                                           choir_dtype kv, choir_err *err);
/* Frees the pool; every state on it must be freed first. NULL is a no-op. */
void choir_vibevoice_kv_pool_free(choir_vibevoice_kv_pool *p);
typedef struct choir_vibevoice_kv_usage {
    int pages;          /* in the pool */
    int reserved;       /* promised to live states (what admission checks) */
    int in_use;         /* holding tokens */
    int64_t page_bytes;
} choir_vibevoice_kv_usage;
void choir_vibevoice_kv_pool_usage(const choir_vibevoice_kv_pool *p, choir_vibevoice_kv_usage *u);
/* Whether a state of plan->max_context tokens would be admitted now. */
bool choir_vibevoice_kv_pool_fits(const choir_vibevoice_kv_pool *p, int max_context);
/* choir_vibevoice_state_create (own stream, mem NULL) with its KV cache in
 * the pool (plan->kv_paged is implied): CHOIR_EBUSY when the pool cannot
 * reserve its pages. The pool must outlive the state. */
choir_vibevoice_state *choir_vibevoice_state_create_paged(const choir_vibevoice *m, const choir_vibevoice_plan *plan,
                                                          choir_vibevoice_kv_pool *pool, choir_err *err);

/* --- batched decoding ----------------------------------------------------- */
/* Decoding steps of several sequences (states) at once: the rows of every
 * sequence go through each linear layer together (one pass over the
 * weights per step for all of them), attention runs per sequence over its
 * own KV cache, so the sequences may sit at different lengths, and the set
 * of sequences may change between steps (requests join and leave at step
 * boundaries). A step gives each sequence what choir_vibevoice_step would,
 * up to the summation order of products over more rows. */
typedef struct choir_vibevoice_batch choir_vibevoice_batch;
/* Working memory of a batch of up to max_batch sequences (backend memory
 * taken from its stream). */
int64_t choir_vibevoice_batch_bytes(const choir_vibevoice_dims *dims, int max_batch);
/* A batch whose steps run on `stream` (of the model's backend, kept by the
 * caller) with its buffers carved from the stream's working memory. NULL and
 * err on failure. */
choir_vibevoice_batch *choir_vibevoice_batch_create(const choir_vibevoice *m, int max_batch,
                                                    struct choir_stream *stream, choir_err *err);
/* NULL is a no-op. */
void choir_vibevoice_batch_free(choir_vibevoice_batch *b);
/* One step of n distinct sequences: states[i] appends tokens[i] and gets
 * its next logits (choir_vibevoice_logits). CHOIR_ETOOBIG when a sequence is
 * at its planned context, CHOIR_EINVAL on a bad token, a state of another
 * model or a state given twice; on an error no state advances. */
int choir_vibevoice_step_batch(const choir_vibevoice *m, choir_vibevoice_batch *b,
                               choir_vibevoice_state *const *states, const int32_t *tokens, int n,
                               choir_err *err);
/* choir_vibevoice_step_batch with greedy selection on the backend:
 * next[i] (host memory, n ids) gets states[i]'s next token, the first id
 * of its largest logit (choir_op_argmax_rows: what transcription's greedy
 * decoding picks from the logits, choir_argmax_f32), and only those n ids
 * come back from a device; the states' logits (choir_vibevoice_logits) are
 * not written. The stop rules (end-of-text ids, max_new_tokens, the loop
 * guard) need only the ids and stay with the caller. Errors as
 * choir_vibevoice_step_batch; CHOIR_EINVAL when next is NULL. */
int choir_vibevoice_step_batch_greedy(const choir_vibevoice *m, choir_vibevoice_batch *b,
                                      choir_vibevoice_state *const *states, const int32_t *tokens,
                                      int n, int32_t *next, choir_err *err);
/* Working memory of a batch over paged states of `pool`: the step's page
 * tables too (a row's table as long as the model's longest context, so the
 * size does not depend on the pool's). With such a batch, every state of a step must be on that
 * pool, and the step's attention is one operation for all its rows (each
 * row through its own page table) instead of one per sequence. */
int64_t choir_vibevoice_batch_bytes_paged(const choir_vibevoice_dims *dims, int max_batch,
                                          const choir_vibevoice_kv_pool *pool);
choir_vibevoice_batch *choir_vibevoice_batch_create_paged(const choir_vibevoice *m, int max_batch,
                                                          choir_vibevoice_kv_pool *pool,
                                                          struct choir_stream *stream, choir_err *err);
/* A paged batch on a device backend: on = each step of n rows is recorded
 * as a graph after one step of n rows (at the same table stride, the longest
 * page table of the step's states) ran op by op, then replayed (one launch
 * a step; the page tables, positions and slots are uploaded before it);
 * a graph per row count, re-recorded when the stride changes. off (the
 * default) = every step op by op, and the graphs are freed. While a graph
 * lives the backend's kernel scratch cannot grow (as with
 * choir_vibevoice_set_step_graph): reserve the stream's scratch for the
 * largest batch first. No effect on the CPU or on a batch without a pool. */
void choir_vibevoice_batch_set_graph(choir_vibevoice_batch *b, bool on);
/* Whether the batch's last step was a graph replay. */
bool choir_vibevoice_batch_graphed(const choir_vibevoice_batch *b);

/* The state's logits buffer [vocab] (what transcription decodes from). */
float *choir_vibevoice_logits(choir_vibevoice_state *s);

/* --- prompt, output ------------------------------------------------------- */

struct choir_tokenizer;

/* The prompt of spec 1.5 for `n_audio` audio tokens and `duration_s`:
 *   <|im_start|>system\nYou are a helpful assistant that transcribes audio
 *   input into text output in JSON format.<|im_end|>\n<|im_start|>user\n
 *   <|object_ref_start|>{<|box_start|> x n_audio}<|object_ref_end|>\nThis is
 *   a {dur:.2f} seconds audio, please transcribe it with these keys: Start
 *   time, End time, Speaker ID, Content<|im_end|>\n
 * or, with a non-empty `context` (hotwords, speaker names), "..., with extra
 * info: {context}\n\nPlease transcribe it with these keys: ...". The context
 * is encoded as plain text: special tokens written in it are not honoured.
 * *ids is choir_alloc'd (caller frees). 0 or a negative code. */
int choir_vibevoice_prompt(const struct choir_tokenizer *tok, const choir_vibevoice_dims *dims,
                           int n_audio, double duration_s, const char *context, int32_t **ids,
                           int *n_ids, choir_err *err);

/* One transcript segment. */
typedef struct choir_vibevoice_segment {
    double start, end;   /* seconds */
    int speaker;         /* speaker id, -1 when the model gave none */
    char *text;
} choir_vibevoice_segment;

/* Parses the model's output text (e.g. `assistant\n[{"Start":0.0,"End":7.56,
 * "Speaker":0,"Content":"..."}]`): the JSON list after the first '[' (keys
 * Start/Start time, End/End time, Speaker/Speaker ID, Content/Text, any
 * case; numbers or numeric strings). A list cut short (max_new_tokens, a
 * loop) yields its complete objects. *segs is choir_alloc'd with each text
 * (free with choir_vibevoice_segments_free). Returns the count (0 for a
 * well-formed empty list), or CHOIR_EFORMAT when there is no list with at
 * least one complete segment object and the text is not "[]". */
int choir_vibevoice_parse(const char *text, choir_vibevoice_segment **segs, choir_err *err);
void choir_vibevoice_segments_free(choir_vibevoice_segment *segs, int n);

/* --- transcription -------------------------------------------------------- */

typedef struct choir_vibevoice_opts {
    const char *context;      /* hotwords / context for the prompt, or NULL */
    int max_new_tokens;       /* 0: min(32768, 256 + 20 per second of audio) */
    double max_audio_s;       /* longer input fails with CHOIR_ETOOBIG (3660) */
    int loop_min_tokens;      /* repetition guard: a periodic tail at least this long (64) ... */
    int loop_min_repeats;     /* ... repeating its period at least this often (3) */
    int loop_max_period;      /* periods 1 .. this are watched (256); 0 turns the guard off */
    int64_t chunk_samples;    /* encoder chunk override (0: the config's) */
    int prefill_chunk;        /* 0: 256 */
    bool ignore_eos;          /* decode max_new_tokens regardless of stop tokens (tests) */
    /* Called with each piece of new text as it is decoded (whole UTF-8
     * characters only); return nonzero to stop decoding. May be NULL. */
    int (*on_text)(void *user, const char *text, size_t len);
    void *user;
} choir_vibevoice_opts;

void choir_vibevoice_default_opts(choir_vibevoice_opts *o);

/* Why decoding stopped. */
typedef enum choir_vibevoice_stop {
    CHOIR_VIBEVOICE_STOP_EOS = 0,   /* <|endoftext|> or <|im_end|> */
    CHOIR_VIBEVOICE_STOP_LENGTH,    /* max_new_tokens */
    CHOIR_VIBEVOICE_STOP_LOOP,      /* the repetition guard */
    CHOIR_VIBEVOICE_STOP_CANCELLED  /* on_text asked to stop */
} choir_vibevoice_stop;

typedef struct choir_vibevoice_result {
    char *raw;                      /* the decoded output (special tokens left out) */
    char *text;                     /* the segments' texts joined by spaces */
    choir_vibevoice_segment *segments;
    int n_segments;
    int malformed;                  /* the output was not a JSON segment list */
    choir_vibevoice_stop stop;
    int loop_period;                /* STOP_LOOP: the repeating period in tokens */
    int n_prompt, n_generated;      /* tokens */
    int n_audio_tokens;
    double duration;                /* seconds of input */
    double t_encode, t_prefill, t_decode; /* seconds spent */
} choir_vibevoice_result;

/* Bytes a state for transcribing n_samples at `rate` with these options
 * needs (what the engine reserves). */
int64_t choir_vibevoice_transcribe_bytes(const choir_vibevoice_dims *dims, int64_t n_samples, int rate,
                                         const choir_vibevoice_opts *o);

/* Transcribes pcm[n] (mono, `rate` Hz; resampled to 24 kHz when different):
 * front end, encoders, prompt, prefill, greedy decoding. Working memory is
 * `mem` (choir_vibevoice_transcribe_bytes bytes) or, when NULL, the counted
 * allocator. A malformed output is not an error: the result says so (raw
 * keeps the text). Returns 0, or CHOIR_ETOOBIG (longer than max_audio_s),
 * CHOIR_ENOMEM, CHOIR_EINVAL. Free the result with
 * choir_vibevoice_result_clear. */
int choir_vibevoice_transcribe(const choir_vibevoice *m, const struct choir_tokenizer *tok,
                               const float *pcm, int64_t n, int rate, const choir_vibevoice_opts *o,
                               void *mem, choir_vibevoice_result *res, choir_err *err);
/* As choir_vibevoice_transcribe, with the state carved from `stream` (the
 * engine's: on the CPU its working memory is the batch arena, which needs
 * choir_vibevoice_transcribe_state_bytes of room, scratch included). */
int choir_vibevoice_transcribe_on(const choir_vibevoice *m, const struct choir_tokenizer *tok,
                                  const float *pcm, int64_t n, int rate,
                                  const choir_vibevoice_opts *o, struct choir_stream *stream,
                                  choir_vibevoice_result *res, choir_err *err);
/* The state part of choir_vibevoice_transcribe_bytes (what the stream of
 * choir_vibevoice_transcribe_on must hold); *scratch (may be NULL) gets the
 * kernel scratch included in it. */
int64_t choir_vibevoice_transcribe_state_bytes(const choir_vibevoice_dims *dims, int64_t n_samples,
                                               int rate, const choir_vibevoice_opts *o,
                                               int64_t *scratch);
/* The plan a transcription of n_samples at `rate` with these options uses
 * (its state's capacities, the KV context of prompt + max_new_tokens), for
 * callers that size its memory themselves (the engine adapter: KV pages). */
void choir_vibevoice_transcribe_plan(const choir_vibevoice_dims *dims, int64_t n_samples, int rate,
                                     const choir_vibevoice_opts *o, choir_vibevoice_plan *plan);
void choir_vibevoice_result_clear(choir_vibevoice_result *r);

#ifdef __cplusplus
}
#endif
#endif
