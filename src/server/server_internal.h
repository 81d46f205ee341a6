/* Shared between the server's files: the server object, the per-connection
 * state, the reply helpers and the engine-job plumbing that streams outputs. */
#ifndef CHOIR_SERVER_INTERNAL_H
#define CHOIR_SERVER_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "choir/audio.h"
#include "choir/buf.h"
#include "choir/encode.h"
#include "choir/engine.h"
#include "choir/server.h"
#include "choir/transcript.h"

struct cJSON;

#define SRV_MODEL_ID_MAX 128
#define SRV_PATH_MAX 4096

/* A name standing for another: a model alias or a voice alias (names.c). */
typedef struct srv_name_pair {
    char name[SRV_MODEL_ID_MAX];
    char target[SRV_MODEL_ID_MAX];
} srv_name_pair;

/* A model as the engine has it: the server keeps no table of its own (ids,
 * directories, adapters, registration times and withdrawals are the
 * engine's); id, kind and dir stay valid until the engine is freed. */
typedef choir_engine_model_info srv_model;

enum { SRV_STATUS_CLASSES = 6 }; /* 1xx..5xx, by status / 100 */

/* Where a connection is in its request (front_watch.c). */
typedef enum srv_peer_phase_t {
    SRV_PEER_HEADER = 0, /* waiting for a request header */
    SRV_PEER_BODY = 1,   /* header complete, body arriving */
    SRV_PEER_BUSY = 2    /* being served */
} srv_peer_phase_t;

/* One TCP connection (libmicrohttpd's socket context), in the registry. */
typedef struct srv_peer {
    struct srv_peer *prev, *next;
    int fd;
    srv_peer_phase_t phase;
    double since;       /* monotonic seconds when the phase began */
    int64_t body_bytes; /* received in the body phase */
    int requests;       /* completed on this connection */
    int cut;            /* the watchdog ended it */
    /* the request being served (front_queue.c) */
    double deadline;    /* monotonic seconds its answer is due by */
    int low_priority;   /* X-Choir-Priority: low (else normal) */
    int queue_headers;  /* it was submitted: replies carry x-ratelimit-* for ... */
    char queue_model[SRV_MODEL_ID_MAX]; /* ... this model ("" = every model) */
} srv_peer;

struct choir_server {
    choir_engine *engine;
    choir_server_params p;
    char host[64];
    char api_key[256];
    char admin_key[256];
    /* the --models folders, resolved (realpath): POST /v1/models registers
     * only directories inside them (a root that is itself a model: only it) */
    struct srv_root {
        char path[SRV_PATH_MAX];
        int is_model;
    } *roots;
    int n_roots;
    char cors[1024]; /* allowed origins, comma-separated, or "" */
    struct MHD_Daemon *daemon;
    int port;
    pthread_mutex_t lock; /* guards roots and the aliases */
    srv_name_pair *model_aliases, *voice_aliases;
    int n_model_aliases, cap_model_aliases, n_voice_aliases, cap_voice_aliases;
    atomic_int ready;
    atomic_int stopping;
    atomic_int shut_down;
    atomic_int in_flight; /* requests between their headers and their response's end */
    atomic_int requests_cut; /* in flight when shutdown's deadline came */
    int abort;            /* set (atomically) when shutdown cuts work: decodes stop */
    atomic_ullong responses[SRV_STATUS_CLASSES];
    atomic_ullong streams;
    pthread_t preload_thread;
    int preloading; /* preload_thread is to be joined */
    atomic_int preload_finished, preload_failed, preload_tried;
    /* connection registry and watchdog (front_watch.c) */
    pthread_mutex_t peers_mu;
    pthread_cond_t watch_cv;
    srv_peer *peers;
    int n_peers;
    pthread_t watch_thread;
    int watching, watch_stop;
    atomic_ullong connections_total, cut_header, cut_body;
    /* jobs whose answer went out while the engine still runs them
     * (front_queue.c); freed by the watchdog once finished. Under peers_mu. */
    struct srv_job *orphans;
    atomic_ullong answered_late_guard; /* answered by the HTTP side's deadline guard */
};

/* Per connection: the request body as it arrives. */
typedef struct srv_conn {
    char *body;
    size_t len, cap;
    int64_t declared;  /* Content-Length, or -1 (chunked) */
    int too_big;       /* the body passed max_upload_bytes: the rest is dropped */
    int refused;       /* the memory budget refused the body (its code): the rest is dropped */
    int counted;       /* counted in in_flight */
    int responded;     /* a response is queued: later calls only drain */
} srv_conn;

/* Checks a request's framing headers at the first call, before any body is
 * read: several Content-Length or Transfer-Encoding headers, both at once, or
 * Transfer-Encoding on HTTP/1.0 give 400; a coding other than chunked gives
 * 501. Returns 0 when the framing is sound, else the status (message in msg). */
unsigned srv_check_framing(struct MHD_Connection *c, const char *version, char *msg, size_t cap);

/* MHD_OPTION_NOTIFY_CONNECTION: registers and unregisters connections. */
void srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
/* The registry entry of a connection, or NULL. */
srv_peer *srv_peer_of(struct MHD_Connection *c);
/* Moves a connection to `phase` (the phase's clock starts now). */
void srv_peer_phase(choir_server *s, struct MHD_Connection *c, srv_peer_phase_t phase);
/* Counts body bytes received. */
void srv_peer_received(choir_server *s, struct MHD_Connection *c, size_t n);
/* Queue policy at the door (front_queue.c). Monotonic seconds. */
double srv_now(void);
/* The request's deadline, set when its header is complete: --request-timeout
 * from now, or sooner when the client sends "X-Request-Timeout: SECONDS".
 * Returns 0, or 400 (message in msg) for a header that is not a positive
 * number of seconds. */
unsigned srv_deadline_begin(choir_server *s, struct MHD_Connection *c, char *msg, size_t cap);
/* The request's deadline (now + --request-timeout when unknown). */
double srv_deadline_of(choir_server *s, struct MHD_Connection *c);
/* The request's priority, read with its deadline from X-Choir-Priority:
 * "low" (work the engine refuses first while degraded) or "normal" (the
 * default; "high" is the server's own, for warm-ups). 400 and msg for any
 * other value, else 0. */
unsigned srv_priority_begin(choir_server *s, struct MHD_Connection *c, char *msg, size_t cap);
choir_priority srv_priority_of(choir_server *s, struct MHD_Connection *c);
/* From now on, replies on c carry x-ratelimit-* headers for model id (NULL:
 * every model). */
void srv_queue_headers_for(struct MHD_Connection *c, const char *id);
/* Adds the x-ratelimit-* headers to a response, when the request was
 * submitted: limit = the model's queue capacity, remaining = its free
 * places, reset = the predicted wait (seconds, "0.4s"). */
void srv_add_queue_headers(choir_server *s, struct MHD_Connection *c, struct MHD_Response *r);
struct srv_job;
/* Keeps a job whose ticket is still running until the engine is done with
 * it; the watchdog frees it then (srv_reap_orphans). */
void srv_job_orphan(choir_server *s, struct srv_job *j);
/* Frees orphans whose tickets finished (all of them, waiting, when `all`).
 * peers_mu not held. */
void srv_reap_orphans(choir_server *s, int all);

/* Starts / stops the watchdog thread. */
int srv_watch_start(choir_server *s);
void srv_watch_stop(choir_server *s);
/* Open connections. */
int srv_peer_count(choir_server *s);

/* Looks a model up by id in the engine (not a withdrawn one); copies it to
 * *out when not NULL. 0 or CHOIR_ENOTFOUND. */
int srv_model_find(choir_server *s, const char *id, srv_model *out);
/* The engine's models that are not withdrawn, in registration order, in a
 * choir_alloc'd array (free with choir_free; NULL when there are none or
 * out of memory: *n says which, -1 for out of memory). */
srv_model *srv_models_list(choir_server *s, int *n);
/* The first of them doing `task` (what a job without a model id gets from
 * the engine; OpenAI's model names and VAD chunking default to it), copied
 * to *out. 0 or CHOIR_ENOTFOUND. */
int srv_model_first(choir_server *s, choir_task task, srv_model *out);
/* Resolves a directory a POST /v1/models names (absolute, or relative to a
 * --models folder) and checks that it lies inside a --models folder (or is
 * a --models model directory). 0 and the resolved path in out, or -1. */
int srv_admin_path(choir_server *s, const char *given, char *out, size_t cap);
/* Resolves a model name from a request (names.c): a registered id, an alias
 * (--alias), or one of OpenAI's names (tts-1, whisper-1, ...) standing for the
 * first model doing its task. Copies the model to *out; 0 or CHOIR_ENOTFOUND. */
int srv_model_resolve(choir_server *s, const char *name, srv_model *out);
/* Adds "aliases" (the names that resolve to m) to a model object. Takes lock. */
void srv_model_aliases_json(choir_server *s, const srv_model *m, struct cJSON *o);
/* Adds "voices" (the model's voice names) to a TTS model's object. */
void srv_model_voices_json(choir_server *s, const srv_model *m, struct cJSON *o);

/* The voices a model directory offers: the stems of voices/NAME.{bin,pt,safetensors}, sorted. */
typedef struct srv_voices {
    char **names;
    int n;
} srv_voices;
/* Lists them (none when there is no voices/ folder). 0 or CHOIR_ENOMEM. */
int srv_voices_list(const char *model_dir, srv_voices *out);
void srv_voices_free(srv_voices *v);
int srv_voices_has(const srv_voices *v, const char *name);
/* What voice alias `name` (--voice-alias, or one of OpenAI's voice names)
 * stands for among `v`: a pointer into v or buf, or NULL. Takes lock. */
const char *srv_voice_alias(choir_server *s, const srv_voices *v, const char *name, char *buf, size_t cap);
/* The voice to hand the model for a request's `voice`: the name itself, the
 * voice an alias stands for, or a mix of the model's names, copied to out.
 * A model without a voices/ folder takes any name. CHOIR_ENOTFOUND with msg
 * listing the voices there are, for a name the model does not have. */
int srv_voice_resolve(choir_server *s, const srv_voices *v, const char *voice, char *out, size_t cap, char *msg,
                      size_t msg_cap);
/* GET /v1/audio/voices[?model=ID]. */
enum MHD_Result srv_handle_voices(choir_server *s, struct MHD_Connection *c);

/* GET/POST/DELETE /v1/models[/{id}]. */
enum MHD_Result srv_handle_models(choir_server *s, struct MHD_Connection *c, const char *method, const char *url,
                                  srv_conn *conn);

/* Replies. Each queues a response and returns MHD's result. */
enum MHD_Result srv_reply(choir_server *s, struct MHD_Connection *c, unsigned status, const char *content_type,
                          const void *data, size_t len);
/* Serialises `json` (a cJSON *, deleted here) compactly. */
enum MHD_Result srv_reply_json(choir_server *s, struct MHD_Connection *c, unsigned status, void *json);
/* Adds CORS headers to a response when the request's Origin is allowed (--cors). */
void srv_add_cors(choir_server *s, struct MHD_Connection *c, struct MHD_Response *r);
/* Answers a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method). */
enum MHD_Result srv_reply_preflight(choir_server *s, struct MHD_Connection *c);
/* OpenAI's error shape. `param`/`code` may be NULL. Adds Retry-After for 429/503. */
enum MHD_Result srv_reply_error(choir_server *s, struct MHD_Connection *c, unsigned status, const char *param,
                                const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Maps an engine failure (code, reason, message) to the right status. */
enum MHD_Result srv_reply_engine_error(choir_server *s, struct MHD_Connection *c, int code,
                                       choir_reject_reason reason, const char *msg);
/* Rewrites an error message in place (NUL-terminated, `cap` bytes) for a
 * client: a registered model's directory becomes the model's id
 * ("kokoro/voices/x.bin"), any other absolute or ./-relative path "[path]".
 * Every engine or model message passes here before it leaves the server;
 * an altered one is logged whole. */
void srv_scrub_paths(choir_server *s, char *msg, size_t cap);
/* The same without the log line, for a message the operator already saw (a
 * model's load failure, which the engine logged when it happened, shown
 * again on every /v1/models and /health). */
void srv_scrub_paths_quietly(choir_server *s, char *msg, size_t cap);
/* The HTTP status an engine failure maps to. */
unsigned srv_engine_status(int code, choir_reject_reason reason);
void srv_count_status(choir_server *s, unsigned status);

/* A job between the engine's output callback (engine worker thread) and the
 * HTTP side (connection thread). Outputs are turned into response bytes in
 * the callback; the HTTP side either waits for the end (whole responses) or
 * drains the bytes as they come (streams). */
typedef enum srv_job_kind {
    SRV_JOB_SPEECH = 0,     /* TTS / STS audio, encoded */
    SRV_JOB_TRANSCRIPT = 1  /* STT text and segments */
} srv_job_kind;


/* One piece of speech kept by VAD chunking (chunking.c): `len_s` seconds
 * from `from_s` in the upload, at `at_s` in the audio the model hears. */
typedef struct srv_span {
    double from_s, at_s, len_s;
} srv_span;

typedef struct srv_job {
    choir_server *server;
    srv_job_kind kind;
    int stream;        /* bytes go out as they are produced */
    int sse;           /* stream as server-sent events */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* response bytes produced and not yet sent (stream) or all of them;
     * a stream has sent out.data[0, out_sent) */
    choir_buf out;
    size_t out_sent;
    int finished;      /* the final output was handled */
    int status;        /* 0 or the failure's code */
    choir_reject_reason reason;
    char error[CHOIR_ERR_MSG_MAX];
    /* speech */
    choir_audio_format format;
    choir_encoder *encoder;
    choir_buf sse_audio; /* encoded bytes of one output, before base64 */
    int input_chars;
    int64_t samples_out;
    int sample_rate;
    /* transcript */
    choir_buf text;    /* the whole transcript so far */
    choir_segment *segments; /* copies: text, tokens and words owned by the job */
    int n_segments, cap_segments;
    char language[16];
    int words, no_segments;  /* timestamp_granularities: verbose_json's "words", without "segments" */
    /* inputs borrowed by the engine until the ticket finishes */
    char *input_text, *voice, *lang, *prompt;
    float *samples;
    int64_t n_samples;
    choir_ticket *ticket;
    /* VAD chunking: segment times are mapped back through these (owned) */
    srv_span *spans;
    int n_spans;
    double deadline;   /* monotonic seconds: the answer is due (srv_job_submit) */
    int detachable;    /* everything the engine reads is owned by the job: srv_job_free
                          may leave a running ticket to the watchdog */
    struct srv_job *next_orphan;
} srv_job;

srv_job *srv_job_create(choir_server *s, srv_job_kind kind);
/* Cancels the ticket if it still runs; frees the job now when the ticket is
 * finished. A detachable job (j->detachable: the engine reads nothing the
 * handler frees) whose ticket still runs goes to the watchdog, which frees
 * it when the engine is done, so that a connection thread never waits for a
 * model; any other waits here for the ticket. NULL no-op. */
void srv_job_free(srv_job *j);
/* Frees the job now, waiting for its ticket to finish. NULL no-op. */
void srv_job_destroy(srv_job *j);
/* choir_output_fn for a job (user = the job). */
int srv_job_on_output(void *user, const choir_output *out);
/* Appends bytes to the job's output. Call with j->mu held. 0 or CHOIR_ENOMEM. */
int srv_job_append(srv_job *j, const void *data, size_t len);
/* Submits `job` with the job as its output sink. On refusal replies with the
 * mapped error and returns the reply's result with *submitted = 0. */
enum MHD_Result srv_job_submit(srv_job *j, choir_job *job, struct MHD_Connection *c, int *submitted);
/* Waits for the end (cancelling the job if the client `c`, when not NULL,
 * hangs up meanwhile); returns the job's status (0 or its failure's code, message
 * in j->error) and the engine's reason. */
int srv_job_wait(srv_job *j, struct MHD_Connection *c, choir_reject_reason *reason);
/* The whole transcript of a finished STT job. */
const char *srv_job_transcript(const srv_job *j);
/* Waits for the end and replies with the whole output (or the error). */
enum MHD_Result srv_job_reply_whole(srv_job *j, struct MHD_Connection *c, unsigned status,
                                    const char *content_type);
/* Replies 200 with a response that drains the job as it produces; the job is
 * freed when MHD is done with the response. */
enum MHD_Result srv_job_reply_stream(srv_job *j, struct MHD_Connection *c, const char *content_type);

struct choir_multipart_part;
/* Decodes an uploaded file to mono at `rate` Hz for model `model_id`: the
 * decoded size is admitted against the engine's memory budget before it
 * exists and bounded by the model's longest input. On failure replies (413
 * audio_too_long / audio_too_large, 503 memory_busy, 415, 500) and returns -1
 * with *ret set; 0 and the audio otherwise. */
int srv_decode_upload(choir_server *s, struct MHD_Connection *c, const char *model_id,
                      const struct choir_multipart_part *file, int rate, choir_audio *audio, enum MHD_Result *ret);

/* Route handlers (body complete). */
enum MHD_Result srv_handle_speech(choir_server *s, struct MHD_Connection *c, srv_conn *conn);
enum MHD_Result srv_handle_transcription(choir_server *s, struct MHD_Connection *c, srv_conn *conn, int translate);
enum MHD_Result srv_handle_enhancement(choir_server *s, struct MHD_Connection *c, srv_conn *conn);
enum MHD_Result srv_handle_separation(choir_server *s, struct MHD_Connection *c, srv_conn *conn); /* separate.c */

struct choir_multipart_part;
/* chunking_strategy (chunking.c). */
typedef enum srv_chunk_mode {
    SRV_CHUNK_NONE = 0,
    SRV_CHUNK_AUTO = 1,      /* VAD when the server has a VAD model, else the whole upload */
    SRV_CHUNK_SERVER_VAD = 2 /* VAD, or 400 without a VAD model */
} srv_chunk_mode;
typedef struct srv_chunking {
    srv_chunk_mode mode;
    float threshold;   /* speech probability threshold */
    int padding_ms;    /* kept before and after each speech segment */
    int silence_ms;    /* a pause this long ends a segment */
} srv_chunking;
/* Parses the form field (NULL/empty/"none": none; "auto"; a server_vad JSON
 * object). 0, or -1 with the reason in msg. */
int srv_chunking_parse(const struct choir_multipart_part *p, srv_chunking *out, char *msg, size_t cap);
/* Runs the server's VAD model over *samples (mono at `rate`) and replaces
 * them with the speech pieces, a short pause between each (*n may become 0:
 * no speech); the pieces go to *spans (choir_alloc'd). Does nothing for
 * SRV_CHUNK_NONE, or for AUTO without a VAD model. On failure replies and
 * returns -1 with *ret set. */
int srv_chunking_apply(choir_server *s, struct MHD_Connection *c, const srv_chunking *ch, int rate, float **samples,
                       int64_t *n, srv_span **spans, int *n_spans, enum MHD_Result *ret);
/* A time in the chunked audio mapped back to the upload's clock. */
double srv_spans_map(const srv_span *spans, int n, double t);

/* Formats a finished STT job's transcript (choir/transcript.h) into a
 * choir_alloc'd string (NULL on out of memory). */
char *srv_format_transcript(const srv_job *j, choir_transcript_format format, int translate, double duration_s);

/* 1 when `spec` is a voice name or a mix of names ("a", "a(2)+b", "a,b"):
 * names of letters, digits, '_', '-', '.' (not first), weights of digits
 * and '.', at most SRV_VOICE_SPEC_MAX bytes in all. Nothing that can name a
 * path passes. */
#define SRV_VOICE_SPEC_MAX (SRV_MODEL_ID_MAX - 1)
int srv_voice_spec_ok(const char *spec);

/* Length of a UTF-8 string in code points. */
int srv_utf8_chars(const char *s);

#endif
