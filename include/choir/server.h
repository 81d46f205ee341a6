/* choir/server.h: the HTTP front end, an OpenAI-compatible API over an engine.
 *
 * Routes (all JSON errors in OpenAI's shape {"error": {"message", "type",
 * "param", "code"}}):
 *   POST   /v1/audio/speech          JSON; audio bytes, chunked audio or SSE
 *   POST   /v1/audio/transcriptions  multipart; json, text, srt, vtt, verbose_json or SSE
 *   POST   /v1/audio/translations    the same, translated to English
 *   POST   /v1/audio/enhancements    multipart; audio in, audio out (STS models)
 *   GET    /v1/models, /v1/models/{id}
 *   POST   /v1/models; DELETE /v1/models/{id}  model administration: off unless an
 *          admin key is set; JSON only; directories inside the --models folders only
 *   GET    /health (503 until ready), /metrics (Prometheus text)
 *
 * The server borrows an engine and registers models in it; it never touches
 * model code. HTTP runs on libmicrohttpd with one thread per connection, so a
 * streamed response can wait for the engine's next output on its own thread.
 * All functions are thread-safe unless noted. */
#ifndef CHOIR_SERVER_H
#define CHOIR_SERVER_H

#include <stdint.h>

#include "choir/engine.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_server choir_server;

typedef struct choir_server_params {
    const char *host;         /* IPv4 address to bind ("127.0.0.1"); copied */
    int port;                 /* TCP port; 0 picks a free one (see choir_server_port) */
    const char *api_key;      /* required as "Authorization: Bearer KEY" (the scheme in any
                                 case) on every route but /health, /ui and the model
                                 administration when not NULL; "" is refused (it would turn
                                 authentication off unseen); copied */
    const char *admin_key;    /* NULL: model administration (POST /v1/models, DELETE
                                 /v1/models/{id}) is off (403). Otherwise those routes take
                                 this key, and only it; it must differ from api_key; copied */
    int64_t max_upload_bytes; /* larger request bodies get 413 (default 25 MiB) */
    int max_input_chars;      /* TTS input limit in characters (default 4096) */
    int max_connections;      /* concurrent connections in all (default 1024) */
    int max_client_connections; /* concurrent connections from one IP address (default 64;
                                   -1: no limit, e.g. behind a proxy that sends all traffic) */
    double header_timeout_s;  /* a request header must be complete this long after the
                                 connection opened or the previous response ended (default 20) */
    double keepalive_timeout_s; /* more time an idle keep-alive connection gets for its next
                                   request (default 60) */
    double body_timeout_s;    /* grace before the body rate floor applies (default 20) */
    double body_min_rate;     /* bytes/s a body must arrive at after the grace (default 500;
                                 -1: none) */
    double idle_timeout_s;    /* a connection with no traffic at all, e.g. a client that stops
                                 reading its response, is closed after this (default 120) */
    double request_timeout_s; /* engine deadline per request, seconds (default 300; `choir
                                 serve --request-timeout` takes CHOIR_SERVER_MIN_TIMEOUT_S..
                                 CHOIR_SERVER_MAX_TIMEOUT_S) */
    int ui;                   /* serve the web page at / and /ui/ (default 1) */
    const char *cors;         /* origins whose pages may call the API from a browser,
                                 comma-separated ("https://app.example,http://localhost:3000"),
                                 "*" for any; NULL/empty: none (default). Copied */
} choir_server_params;

/* The deadlines a request may be given, seconds: --request-timeout and
 * params.request_timeout_s (0 there: the default; outside these refused by
 * choir_server_create), and a client's X-Request-Timeout header (which only
 * shortens the server's; a value outside these, NaN, or not a number is
 * answered 400). */
#define CHOIR_SERVER_MIN_TIMEOUT_S 0.001
#define CHOIR_SERVER_MAX_TIMEOUT_S 1e9

/* The other bounds choir_server_create holds its params to (0 in a field is
 * its default); `choir serve`'s flags take the same ranges. The connection
 * timeouts (header, keep-alive, body grace) take CHOIR_SERVER_MIN..MAX_TIMEOUT_S,
 * the idle timeout 1..CHOIR_SERVER_MAX_TIMEOUT_S; the body rate floor
 * bytes/s up to CHOIR_SERVER_MAX_BODY_RATE, or -1 for none; connection
 * counts up to CHOIR_SERVER_MAX_CONNECTIONS (-1 for no per-client limit). */
#define CHOIR_SERVER_MIN_IDLE_TIMEOUT_S 1.0
#define CHOIR_SERVER_MAX_BODY_RATE 1e12
#define CHOIR_SERVER_MAX_CONNECTIONS (1 << 20)

/* Defaults for every field (host 127.0.0.1, port 8000). */
choir_server_params choir_server_default_params(void);

/* Makes a server over `engine` (borrowed: it must outlive the server). Does
 * not listen yet. NULL and err on bad params or out of memory. */
choir_server *choir_server_create(choir_engine *engine, const choir_server_params *params, choir_err *err);

/* Registers the model in directory `dir` under `id` (NULL: the directory's
 * base name) with the engine, detecting its adapter. Returns 0,
 * CHOIR_EINVAL (duplicate id, bad id), CHOIR_ENOTFOUND (no adapter fits). */
int choir_server_add_model(choir_server *s, const char *id, const char *dir, choir_err *err);

/* Makes `name` stand for the model `model_id` in requests (the model need not
 * be registered yet; a later alias of the same name replaces it). Without one,
 * OpenAI's names (tts-1, tts-1-hd, gpt-4o-mini-tts for speech; whisper-1,
 * gpt-4o-transcribe, gpt-4o-mini-transcribe for transcription) stand for the
 * first registered model doing the task. Returns 0, CHOIR_EINVAL (an empty or
 * over-long name), CHOIR_ENOMEM. */
int choir_server_add_alias(choir_server *s, const char *name, const char *model_id, choir_err *err);

/* Makes voice `name` stand for `voice` (a voice of the TTS models, or a mix)
 * wherever the requested model does not have a voice of that name. Without
 * one, OpenAI's voice names (alloy, ash, ballad, coral, echo, fable, onyx,
 * nova, sage, shimmer, verse, marin, cedar) map to Kokoro voices of a similar
 * kind that the model has. Returns 0, CHOIR_EINVAL, CHOIR_ENOMEM. */
int choir_server_add_voice_alias(choir_server *s, const char *name, const char *voice, choir_err *err);

/* Registers `dir` itself when it is a model directory, otherwise each of its
 * subdirectories that is one (others are skipped with a log line). `dir`
 * also becomes a folder POST /v1/models may register from (a model directory:
 * only itself). Returns the number registered (>= 0) or a negative code when
 * dir cannot be read. */
int choir_server_add_models_dir(choir_server *s, const char *dir, choir_err *err);

/* Starts listening. Returns 0, or CHOIR_EIO when the address cannot be bound. */
int choir_server_start(choir_server *s, choir_err *err);

/* Loads every registered model now, in a background thread, by running one
 * tiny warm-up request through each; /health answers 503 "loading" until it
 * has finished (then the server is ready, whether or not each load worked).
 * A model whose warm-up fails is logged at CHOIR_LOG_ERROR with the reason;
 * one that failed to load is named by /health and /v1/models until a later
 * load succeeds. Call after start. Returns 0 or CHOIR_EIO when the thread
 * cannot start. */
int choir_server_preload(choir_server *s, choir_err *err);

/* Whether the preload has finished: 1 when it has (*n_failed, when not NULL,
 * set to the number of models whose warm-up failed, *n_models to the number
 * tried), 0 while it runs, CHOIR_EINVAL when none was started. */
int choir_server_preload_done(choir_server *s, int *n_failed, int *n_models);

/* The bound TCP port (after start), or 0. */
int choir_server_port(const choir_server *s);

/* /health answers 503 "loading" until this is called with 1. */
void choir_server_set_ready(choir_server *s, int ready);

/* Graceful stop: stops accepting connections, refuses new requests with 503,
 * lets in-flight ones finish until shortly before `deadline_s` seconds have
 * passed (the last quarter, at most 1 s, is kept for cutting), then shuts the
 * engine down (failing what is left, which ends their responses) and closes
 * every connection. Returns 0, or CHOIR_ETIMEDOUT when some requests were
 * cut short (see choir_server_requests_cut). Returns once the engine's
 * running batches have stopped, which a model may delay by one step. Safe
 * to call twice. */
int choir_server_shutdown(choir_server *s, double deadline_s);

/* The number of requests the shutdown cut short (0 before it, or when all
 * finished in time). */
int choir_server_requests_cut(const choir_server *s);

/* Shuts down (deadline 0 when not done) and frees. NULL is a no-op. */
void choir_server_free(choir_server *s);

#ifdef __cplusplus
}
#endif
#endif
