/* choir/model.h: the interface every model implements, so the engine can drive
 * Whisper, Kokoro, Silero VAD and speech-to-speech models without knowing their
 * internals.
 *
 * A model is a table of functions (choir_model_ops) plus an opaque, immutable
 * "weights" object returned by load(). The engine owns scheduling: it groups
 * requests into batches, reserves their activation memory, gives each batch one
 * arena sized from the requests' estimates, and calls run_batch() on one thread.
 * A model delivers results through each request's output callback
 * (choir_request_emit), as soon as they exist: a streaming model emits partial
 * pieces (TTS audio per sentence, STT partial text) with final = 0 and closes
 * with one final = 1 output; a non-streaming model emits only the final one.
 *
 * Thread model: load/free are called with no batch running on that weights
 * object. run_batch may be called concurrently from several engine workers on the
 * same weights object (each call with its own arena and requests), so weights
 * must stay read-only after load and per-request state lives in the arena. */
#ifndef CHOIR_MODEL_H
#define CHOIR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "choir/arena.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

typedef enum choir_task {
    CHOIR_TASK_TTS = 0, /* text -> 24 kHz audio (Kokoro) */
    CHOIR_TASK_STT = 1, /* audio -> text and segments (Whisper, VibeVoice-ASR) */
    CHOIR_TASK_VAD = 2, /* 16 kHz audio -> speech segments (Silero) */
    CHOIR_TASK_STS = 3, /* audio -> audio (enhancement / separation) */
    CHOIR_TASK_COUNT
} choir_task;

#define CHOIR_TASK_BIT(t) (1u << (unsigned)(t))

/* A static name ("tts", "stt", "vad", "sts"); "unknown" otherwise. */
const char *choir_task_name(choir_task task);

/* Task inputs. Every pointer is borrowed: the caller keeps it valid until the
 * request's final output has been delivered (or the request failed). Strings
 * are NUL-terminated UTF-8; NULL means "the model's default". */
typedef struct choir_tts_input {
    const char *text;
    const char *voice;    /* voice name ("af_heart"), a mix of names ("af_heart(2)+am_adam"),
                             or NULL; only the model's own voices: never a path */
    const char *language; /* espeak-ng language code ("en-us") or NULL */
    float speed;          /* 1.0 = normal; 0 means 1.0 */
} choir_tts_input;

typedef struct choir_stt_input {
    const float *samples; /* mono, [-1, 1], at sample_rate */
    int64_t n_samples;
    int sample_rate;      /* Hz of samples; 0 means 16 kHz (see choir_model_ops.input_rate) */
    const char *language; /* ISO code ("en") or NULL to detect */
    const char *prompt;   /* initial prompt text (Whisper), context / hotwords (VibeVoice), or NULL */
    int translate;        /* 1: translate to English instead of transcribe */
    int timestamps;       /* 1: produce segment timestamps */
    int word_timestamps;  /* 1: also each word's times in its segment (Whisper; needs timestamps) */
    float temperature;    /* 0 = greedy, with the model's fallback to higher temperatures (Whisper) */
    int fixed_temperature;/* 1: decode at `temperature` only, no fallback (also at 0) */
    int max_tokens;       /* most text tokens: per 30 s window (Whisper), in all (VibeVoice);
                           * 0 = the model's default */
} choir_stt_input;

typedef struct choir_vad_input {
    const float *samples; /* mono, 16 kHz */
    int64_t n_samples;
    float threshold;       /* speech probability threshold; 0 = model default */
    int min_speech_ms;     /* 0 = default */
    int min_silence_ms;    /* 0 = default */
} choir_vad_input;

typedef struct choir_sts_input {
    const float *samples; /* mono */
    int64_t n_samples;
    int sample_rate;      /* Hz of `samples` */
    /* Chunked models (choir/chunker.h). A value is the model's default when
     * it is 0 and its has_ flag is not set (choir_sts_chunking); anything
     * else is checked against the model's limits at submit, never clamped. */
    double chunk_seconds;
    double overlap_seconds;
    int has_chunk;          /* 1: chunk_seconds as given, 0 too (then refused) */
    int has_overlap;        /* 1: overlap_seconds as given, 0 too (no overlap) */
} choir_sts_input;

/* One word of an STT segment, seconds from the start of the input. */
typedef struct choir_word {
    double start_s;
    double end_s;
    const char *text;  /* as the model spells it, usually with its leading space */
    float probability; /* mean probability of its tokens, or 0 when unknown */
} choir_word;

/* A span of a recording, with its text for STT (NULL for VAD). Times in seconds
 * from the start of the input. */
typedef struct choir_segment {
    double start_s;
    double end_s;
    const char *text;
    float probability; /* mean token / speech probability, or 0 when unknown */
    int has_speaker;   /* 1: `speaker` is the model's speaker id for this span */
    int speaker;
    /* How the segment was decoded (Whisper's verbose_json fields), when
     * has_decoding is 1; zero otherwise. */
    int has_decoding;
    int64_t seek;           /* mel frame (10 ms) where the segment's window began */
    const int32_t *tokens;  /* its text and timestamp tokens */
    int n_tokens;
    float temperature, avg_logprob, compression_ratio, no_speech_prob;
    /* Its words in order, when word timestamps were asked (n_words 0 otherwise). */
    const choir_word *words;
    int n_words;
} choir_segment;

/* One piece of a result. All pointers are valid only during the output
 * callback; a consumer that keeps data copies it. */
typedef struct choir_output {
    int final;                /* 1 for the last output of a request */
    int status;               /* CHOIR_OK, or the error a final output reports */
    const char *error;        /* message when status != 0 */
    /* audio (TTS, STS): `n_samples` new samples at `sample_rate` Hz, or none */
    const float *samples;
    int64_t n_samples;
    int sample_rate;
    /* text (STT): in a partial output, the new text of that piece; in the
     * final output, the whole transcript, whether or not pieces were streamed
     * before it (and `segments` then lists all segments) */
    const char *text;
    const char *language;
    /* segments (STT, VAD) produced by this piece */
    const choir_segment *segments;
    int n_segments;
} choir_output;

/* Receives outputs of one request in order. Called from an engine worker
 * thread; must not block for long. Return nonzero to cancel the request (the
 * model stops at its next emit; no further outputs are delivered except the
 * final one carrying CHOIR_ECANCELED). */
typedef int (*choir_output_fn)(void *user, const choir_output *out);

/* One request as a model sees it. The engine fills it; models read the input,
 * call choir_request_emit for outputs, and may set `status`/`error` through
 * choir_request_fail. Models must not touch the engine fields. */
typedef struct choir_request {
    choir_task task;
    union {
        choir_tts_input tts;
        choir_stt_input stt;
        choir_vad_input vad;
        choir_sts_input sts;
    } in;
    const void *extra;   /* model-specific options (documented by the model) or NULL */
    int stream;          /* 1: the caller wants partial outputs as they exist */

    /* engine fields */
    choir_output_fn on_output;
    void *on_output_user;
    int status;          /* 0, or the first error for this request */
    int done;            /* the final output has been delivered */
    int cancelled;       /* read with choir_request_cancelled (set from other threads) */
    uint64_t first_output_ns; /* when the first output was delivered (0: none yet) */
    double audio_seconds;     /* seconds of audio produced (TTS/STS) or consumed (STT/VAD) */
    char error[CHOIR_ERR_MSG_MAX];
} choir_request;

/* Delivers one output of `req` to its callback and returns 0, or
 * CHOIR_ECANCELED when the request is cancelled (then the model should stop
 * working on it and move on). Outputs after the final one are dropped. Sets
 * out->final's bookkeeping (done flag). Never fails otherwise. */
int choir_request_emit(choir_request *req, const choir_output *out);

/* 1 when the request was cancelled (by its caller or its callback): a model
 * may check it between steps to stop early. Safe from any thread. */
int choir_request_cancelled(const choir_request *req);

/* The chunk length and overlap (seconds) an STS input asks for, the model's
 * defaults where it asks for none (see choir_sts_input). */
void choir_sts_chunking(const choir_sts_input *in, double default_chunk_s, double default_overlap_s,
                        double *chunk_s, double *overlap_s);

/* Marks `req` failed with `code` and a message; the engine delivers a final
 * output carrying the error after run_batch returns. Returns `code`. */
int choir_request_fail(choir_request *req, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Continuous batching: a running batch that more requests may join between
 * the adapter's decoding steps (ops->run_batch_join). The engine fills it;
 * an adapter only calls the two functions below. */
typedef struct choir_batch_join choir_batch_join;
struct choir_batch_join {
    int (*take)(choir_batch_join *j, int live, choir_request **reqs, choir_arena **arenas);
    void (*leave)(choir_batch_join *j, choir_request *req, int overflow);
    void (*member_done)(choir_batch_join *j, choir_request *req); /* may be NULL */
};

/* Between two decoding steps, with `live` requests decoding in the batch:
 * requests of the batch's model and task that the engine admits now to
 * join it, the most urgent first, up to the model's max batch less `live`
 * (reqs and arenas have room for that many). Each is admitted against the
 * budgets as a batch of one is (its estimate x the calibration factor, its
 * device estimate on the batch's GPU), beside everything running, and gets
 * an arena of exactly that size in arenas[i]: all its working memory comes
 * from there. A request that does not fit stays queued, for a later batch,
 * and so do the ones behind it. Returns how many (0 with j NULL). The
 * adapter runs them as it runs the batch's own (outputs through
 * choir_request_emit, failures through choir_request_fail). */
int choir_batch_join_take(choir_batch_join *j, int live, choir_request **reqs, choir_arena **arenas);
/* A joined request is finished (its final output delivered or failed):
 * the engine finishes its ticket, frees its arena (whose high-water mark
 * calibrates the model's estimates) and its reservation, so a later join
 * can use them. overflow: its arena was too small before any output; the
 * engine puts it back in the queue with a doubled calibration instead of
 * failing it (at most three times, as a batch). Every taken request must be
 * left exactly once, before run_batch_join returns; the arena is gone after
 * this call. j NULL: no-op. */
void choir_batch_join_leave(choir_batch_join *j, choir_request *req, int overflow);
/* One of the batch's own requests (run_batch_join's `reqs`, not a joined
 * one) is finished before the batch ends, and the adapter has freed its
 * own memory: on a GPU the engine gives back now the part of the batch's
 * device reservation that was its alone (its pages of a GPU replica's
 * pool, ops->estimate_pool, and its share of the rest: the batch then
 * reserves what its remaining members need, as it would have at
 * dispatch), so that queued requests may join in its place; the host
 * reservation (the batch's arena) stays until the batch ends. Optional (a
 * member not reported keeps its part until then); at most once per member
 * (a second call does nothing), after its state is freed. j NULL: no-op. */
void choir_batch_join_member_done(choir_batch_join *j, choir_request *req);

/* Load-time options; zero-initialised means defaults. Weights run as stored:
 * a quantized model is made on disk by `choir convert --q-bits` (kernels use
 * the default compute pool, sized by CHOIR_THREADS). */
typedef struct choir_model_options {
    /* 1: prefer bf16 activations when supported; -1: f32 where a model
     * would otherwise follow its weights (VibeVoice's GPU KV cache is bf16
     * for a bf16 or quantized model by default); 0: the model's default. */
    int compute_bf16;
    /* Where the weights live and the batches run: 0 = the CPU (host memory),
     * k >= 1 = CUDA device k - 1 (CHOIR_DEVICE_GPU(k - 1)). The engine only
     * passes a GPU to an adapter whose ops->gpu is 1. */
    int device;
    /* On a GPU, for an adapter that keeps a pool (ops->pool_bytes): the
     * device bytes the engine's budget leaves the replica in all (its
     * weights, pool and buffers), beside every other replica and all
     * reservations; 0 when unknown (the adapter picks a size itself). */
    int64_t device_free_bytes;
} choir_model_options;

#define CHOIR_DEVICE_CPU 0
#define CHOIR_DEVICE_GPU(index) ((index) + 1)
/* The CUDA device index of a device number >= 1. */
#define CHOIR_DEVICE_GPU_INDEX(device) ((device) - 1)

typedef struct choir_model_ops {
    const char *kind;  /* "whisper", "kokoro", "silero-vad", "mossformer2", "vibevoice", ... */
    uint32_t tasks;    /* CHOIR_TASK_BIT() of the tasks it serves */
    int max_batch;     /* largest batch run_batch accepts (>= 1) */
    /* Hz the model wants STT input at (0: 16 kHz). Callers decode audio at
     * this rate and say so in choir_stt_input.sample_rate. */
    int input_rate;

    /* Score how well this model kind fits a model directory, given its parsed
     * config.json (NULL when the directory has none): 0 = not mine, higher is a
     * better match. Must not load weights. */
    int (*probe)(const char *dir, const struct cJSON *config);

    /* Loads weights from `dir` (memory-mapped where possible). Returns an opaque
     * weights object, or NULL and fills err. */
    void *(*load)(const char *dir, const choir_model_options *opt, choir_err *err);
    /* Releases a weights object. NULL is a no-op. */
    void (*free)(void *weights);

    /* Bytes of weights the object keeps resident (mapped + allocated), for the
     * memory budget. Optional: NULL means "the size of the files in dir". */
    int64_t (*resident_bytes)(const void *weights);

    /* Batching length of a request in the model's units (phonemes or text
     * bytes for TTS, samples for audio). Requests of similar length share a
     * batch. Optional: NULL uses strlen(text) or n_samples. Must be cheap. */
    int64_t (*length)(const void *weights, const choir_request *req);

    /* Activation bytes one request of this size needs inside a batch (arena
     * space: buffers, KV cache, per-request state). The engine reserves the sum
     * over a batch, scaled by a factor it calibrates from measured arena peaks.
     * `weights` is NULL when the model is not loaded yet; the estimate must
     * still be usable (from `length` alone). Must be cheap. */
    int64_t (*estimate)(const void *weights, const choir_request *req);

    /* Runs `n` requests (1 <= n <= max_batch) of one task, sorted by length
     * ascending, with all scratch from `arena`. Delivers each request's outputs
     * through choir_request_emit (final included). Returns 0, or a negative code
     * for a failure of the whole batch (requests not yet finished then fail with
     * it). A request-specific problem uses choir_request_fail and returns 0.
     * When the arena runs out, return CHOIR_ENOMEM: the engine raises its
     * calibration and retries the batch (up to 3 times) with more room. */
    int (*run_batch)(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                     choir_err *err);
    /* Optional: run_batch for a model that decodes in steps, with `join`
     * (see choir_batch_join_take) through which queued requests of the same
     * model and task join the batch between steps; each joined request has
     * its own arena. When set the engine calls it instead of run_batch.
     * Returning CHOIR_ENOMEM retries only the batch's own requests. */
    int (*run_batch_join)(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                          choir_batch_join *join, choir_err *err);

    /* Refuses at submit a request whose options this model can never run
     * (out of its documented range): returns CHOIR_EINVAL with a message
     * naming the option, the range and the value, or 0. It applies the same
     * check as the model's own entry points, after the same defaults, so
     * a request is never queued only to fail for its options. `weights` may
     * be NULL (not loaded yet). Must be cheap. Optional: NULL accepts all. */
    int (*check)(const void *weights, const choir_request *req, choir_err *err);

    /* --- GPUs (all optional; a CPU-only adapter leaves them 0 / NULL) --- */
    /* 1: load() accepts opt->device >= 1 and then keeps its weights in that
     * GPU's memory and runs batches there (set only in CUDA builds). A GPU
     * weights object must serialise its own use of the device: run_batch may
     * still be called from several engine workers at once. */
    int gpu;
    /* Device-memory bytes the weights object holds on its GPU (weights plus
     * any buffers kept between batches); 0 for a CPU object. NULL: 0. */
    int64_t (*device_bytes)(const void *weights);
    /* Device-memory bytes one request of this size needs while its batch runs
     * on a GPU (activations, KV cache, scratch), as `estimate` is for host
     * memory. `weights` may be NULL (not loaded yet). NULL: 0. */
    int64_t (*estimate_device)(const void *weights, const choir_request *req);
    /* Optional: a GPU replica that keeps part of every request's device
     * memory in one pool it allocates at load (VibeVoice's KV cache pages),
     * sized from choir_model_options.device_free_bytes and counted in
     * device_bytes. pool_bytes: the pool's size (0: none). estimate_pool:
     * the part of estimate_device one request takes from the pool (the
     * rest is its own working memory). The engine loads such a replica
     * before any batch runs on it, then admits a request there only when
     * its pool part fits the pool's unreserved bytes and the rest fits the
     * budget's free memory (a request whose pool part exceeds the whole
     * pool is refused as too large); the adapter must never need more of
     * the pool than the estimates of the requests it runs. Both NULL: no
     * pool. */
    int64_t (*pool_bytes)(const void *weights);
    int64_t (*estimate_pool)(const void *weights, const choir_request *req);
} choir_model_ops;

/* The built-in adapters, each defined in its model's folder
 * (src/models/whisper/whisper_model.c, src/models/kokoro/kokoro_model.c,
 * src/models/silero/silero_model.c, src/models/sts/mossformer2_model.c,
 * src/models/vibevoice/vv_model.c) and listed by choir_model_builtin. */
extern const choir_model_ops choir_model_whisper;
extern const choir_model_ops choir_model_kokoro;
extern const choir_model_ops choir_model_silero_vad;
extern const choir_model_ops choir_model_mossformer2;
extern const choir_model_ops choir_model_sam_audio; /* src/models/sam_audio/sam_model.c */
extern const choir_model_ops choir_model_vibevoice;
/* The test adapter (src/models/fake/fake_model.c, its options in
 * models/fake/fake_model.h): declared costs and deterministic outputs. It
 * claims only directories whose config.json says "model_type": "choir-fake",
 * so it is listed with the others and tests and benchmarks can serve it. */
extern const choir_model_ops choir_model_fake;

/* The STT input rate (Hz) of the built-in adapter of that kind:
 * ops->input_rate, 16000 when it gives none or no adapter has that kind. */
int choir_model_kind_input_rate(const char *kind);

/* Fills `out` with up to `cap` built-in adapters that are linked in; returns
 * how many there are. */
int choir_model_builtin(const choir_model_ops **out, int cap);

/* Picks the adapter for the model directory `dir`: reads dir/config.json (when
 * present) and asks each candidate's probe; the highest score wins. Candidates
 * are `extra` (n_extra entries, may be NULL) followed by the built-ins. Returns
 * the winner, or NULL and err (CHOIR_ENOTFOUND: no adapter recognises it). */
const choir_model_ops *choir_model_detect(const char *dir, const choir_model_ops *const *extra,
                                          int n_extra, choir_err *err);

/* Sum of the sizes of dir's *.safetensors files (what mapping them costs when
 * all pages are resident), or a negative code when dir cannot be read. */
int64_t choir_model_dir_bytes(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
