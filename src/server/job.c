/* Engine jobs seen from the HTTP side. The engine's worker thread hands each
 * output to srv_job_on_output, which turns it into response bytes at once
 * (encoded audio, SSE events, transcript text) under the job's lock; the
 * connection thread either waits for the final output or drains the bytes as
 * a chunked response while the engine is still producing. */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "server/server_internal.h"

srv_job *srv_job_create(choir_server *s, srv_job_kind kind)
{
    srv_job *j = choir_calloc(CHOIR_MEM_IO, 1, sizeof *j);
    if (!j)
        return NULL;
    j->server = s;
    j->kind = kind;
    j->out = (choir_buf)CHOIR_BUF_INIT(CHOIR_MEM_IO);
    j->sse_audio = (choir_buf)CHOIR_BUF_INIT(CHOIR_MEM_IO);
    j->text = (choir_buf)CHOIR_BUF_INIT(CHOIR_MEM_IO);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    return j;
}

static void free_words(const choir_word *w, int n)
{
    for (int k = 0; w && k < n; k++)
        choir_free((char *)w[k].text);
    choir_free((choir_word *)w);
}

/* The job's copies of the segments' text, tokens and words go. */
static void clear_segments(srv_job *j)
{
    for (int i = 0; i < j->n_segments; i++) {
        choir_free((char *)j->segments[i].text);
        choir_free((int32_t *)j->segments[i].tokens);
        free_words(j->segments[i].words, j->segments[i].n_words);
    }
    j->n_segments = 0;
}

/* A copy of a segment's words, their times mapped from the chunked audio to
 * the upload's; NULL for none or when out of memory (*ok 0). */
static choir_word *copy_words(const srv_job *j, const choir_segment *in, int *ok)
{
    *ok = 1;
    if (in->n_words <= 0)
        return NULL;
    choir_word *w = choir_calloc(CHOIR_MEM_IO, (size_t)in->n_words, sizeof *w);
    for (int k = 0; w && k < in->n_words; k++) {
        const choir_word *x = &in->words[k];
        size_t n = x->text ? strlen(x->text) : 0;
        char *text = choir_alloc(CHOIR_MEM_IO, n + 1);
        if (!text) {
            free_words(w, k);
            w = NULL;
            break;
        }
        memcpy(text, x->text ? x->text : "", n + 1);
        w[k] = (choir_word){.start_s = srv_spans_map(j->spans, j->n_spans, x->start_s),
                            .end_s = srv_spans_map(j->spans, j->n_spans, x->end_s), .text = text,
                            .probability = x->probability};
    }
    *ok = w != NULL;
    return w;
}

void srv_job_free(srv_job *j)
{
    if (!j)
        return;
    if (j->detachable && j->ticket && !choir_ticket_done(j->ticket)) {
        choir_ticket_cancel(j->ticket);
        if (!choir_ticket_done(j->ticket) && j->server->watching) {
            srv_job_orphan(j->server, j);
            return;
        }
    }
    srv_job_destroy(j);
}

void srv_job_destroy(srv_job *j)
{
    if (!j)
        return;
    /* first: after this no output callback can run on the job */
    choir_ticket_free(j->ticket);
    choir_encoder_free(j->encoder);
    clear_segments(j);
    choir_free(j->segments);
    choir_buf_free(&j->out);
    choir_buf_free(&j->sse_audio);
    choir_buf_free(&j->text);
    choir_free(j->input_text);
    choir_free(j->voice);
    choir_free(j->lang);
    choir_free(j->prompt);
    choir_free(j->samples);
    choir_free(j->spans);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    choir_free(j);
}

int srv_job_append(srv_job *j, const void *data, size_t len)
{
    /* a stream reader that caught up lets the buffer restart from 0 */
    if (j->out_sent && j->out_sent == j->out.len) {
        choir_buf_clear(&j->out);
        j->out_sent = 0;
    }
    return choir_buf_append(&j->out, data, len);
}

static int base64_sse(srv_job *j, const char *prefix, const unsigned char *data, size_t n, const char *suffix)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (srv_job_append(j, prefix, strlen(prefix)) < 0)
        return CHOIR_ENOMEM;
    char quad[4];
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)data[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)data[i + 1] << 8;
        if (i + 2 < n)
            v |= data[i + 2];
        quad[0] = tab[(v >> 18) & 63];
        quad[1] = tab[(v >> 12) & 63];
        quad[2] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        quad[3] = i + 2 < n ? tab[v & 63] : '=';
        if (srv_job_append(j, quad, 4) < 0)
            return CHOIR_ENOMEM;
    }
    return srv_job_append(j, suffix, strlen(suffix));
}

/* Appends `data: {json}\n\n` and deletes the object. */
static int sse_event(srv_job *j, cJSON *event)
{
    char *text = event ? cJSON_PrintUnformatted(event) : NULL;
    cJSON_Delete(event);
    if (!text)
        return CHOIR_ENOMEM;
    int rc = srv_job_append(j, "data: ", 6);
    if (rc == 0)
        rc = srv_job_append(j, text, strlen(text));
    if (rc == 0)
        rc = srv_job_append(j, "\n\n", 2);
    cJSON_free(text);
    return rc;
}

static int on_encoded(const void *data, size_t len, void *user)
{
    srv_job *j = user;
    if (j->sse)
        return choir_buf_append(&j->sse_audio, data, len) < 0;
    return srv_job_append(j, data, len) < 0;
}

static void job_fail(srv_job *j, int code, const char *msg)
{
    if (j->status)
        return;
    j->status = code ? code : CHOIR_EINTERNAL;
    snprintf(j->error, sizeof j->error, "%s", msg && *msg ? msg : choir_strerror(j->status));
    srv_scrub_paths(j->server, j->error, sizeof j->error);
}

static void flush_sse_audio(srv_job *j)
{
    if (!j->sse || j->sse_audio.len == 0)
        return;
    if (base64_sse(j, "data: {\"type\":\"speech.audio.delta\",\"audio\":\"", (const unsigned char *)j->sse_audio.data,
                   j->sse_audio.len, "\"}\n\n") < 0)
        job_fail(j, CHOIR_ENOMEM, "out of memory");
    choir_buf_clear(&j->sse_audio);
}

static void put_le32(char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (char)(v >> (8 * i));
}

/* A whole (not streamed) WAV response is complete in memory, so its RIFF and
 * data sizes, which the streaming encoder leaves "unknown", are filled in. */
static void fix_wav_sizes(srv_job *j)
{
    char *wav = j->out.data;
    size_t len = j->out.len;
    if (j->stream || (j->format != CHOIR_FORMAT_WAV16 && j->format != CHOIR_FORMAT_WAVF32) || len < 44 ||
        memcmp(wav, "RIFF", 4) != 0 || len > UINT32_MAX)
        return;
    for (size_t at = 12; at + 8 <= len && at < 256;) {
        uint32_t size = (uint32_t)(unsigned char)wav[at + 4] | (uint32_t)(unsigned char)wav[at + 5] << 8 |
                        (uint32_t)(unsigned char)wav[at + 6] << 16 | (uint32_t)(unsigned char)wav[at + 7] << 24;
        if (memcmp(wav + at, "data", 4) == 0) {
            put_le32(wav + 4, (uint32_t)(len - 8));
            put_le32(wav + at + 4, (uint32_t)(len - at - 8));
            return;
        }
        at += 8 + (size_t)size + (size & 1);
    }
}

static void on_audio(srv_job *j, const choir_output *out)
{
    choir_err err = {0};
    if (out->n_samples > 0 && !j->status) {
        if (!j->encoder) {
            j->sample_rate = out->sample_rate > 0 ? out->sample_rate : 24000;
            j->encoder = choir_encoder_create(j->format, j->sample_rate, 1, on_encoded, j, &err);
            if (!j->encoder)
                job_fail(j, err.code, err.msg);
        }
        if (j->encoder && choir_encoder_write(j->encoder, out->samples, out->n_samples, &err) < 0)
            job_fail(j, err.code, err.msg);
        j->samples_out += out->n_samples;
        flush_sse_audio(j);
    }
    if (!out->final)
        return;
    if (out->status)
        job_fail(j, out->status, out->error);
    if (!j->status) {
        /* an empty result is still a valid (empty) file */
        if (!j->encoder) {
            j->sample_rate = 24000;
            j->encoder = choir_encoder_create(j->format, j->sample_rate, 1, on_encoded, j, &err);
        }
        if (!j->encoder || choir_encoder_finish(j->encoder, &err) < 0)
            job_fail(j, err.code, err.msg);
        flush_sse_audio(j);
        if (!j->status)
            fix_wav_sizes(j);
    }
    if (!j->sse)
        return;
    cJSON *ev = cJSON_CreateObject();
    if (j->status) {
        cJSON_AddStringToObject(ev, "type", "error");
        cJSON *e = cJSON_AddObjectToObject(ev, "error");
        cJSON_AddStringToObject(e, "message", j->error);
        cJSON_AddStringToObject(e, "type", "server_error");
    } else {
        cJSON_AddStringToObject(ev, "type", "speech.audio.done");
        cJSON *u = cJSON_AddObjectToObject(ev, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", j->input_chars);
        cJSON_AddNumberToObject(u, "output_tokens", (double)j->samples_out);
        cJSON_AddNumberToObject(u, "total_tokens", (double)(j->input_chars + j->samples_out));
    }
    sse_event(j, ev);
}

/* Adds "segments" (OpenAI's verbose_json segment fields) for j's segments
 * [from, j->n_segments) to an SSE event, so a client gets the timestamps
 * with the text instead of asking again. */
static void add_segments(const srv_job *j, cJSON *ev, int from)
{
    if (from >= j->n_segments)
        return;
    cJSON *arr = cJSON_AddArrayToObject(ev, "segments");
    for (int i = from; arr && i < j->n_segments; i++) {
        const choir_segment *sg = &j->segments[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddNumberToObject(o, "start", sg->start_s);
        cJSON_AddNumberToObject(o, "end", sg->end_s);
        cJSON_AddStringToObject(o, "text", sg->text ? sg->text : "");
        if (sg->has_speaker)
            cJSON_AddNumberToObject(o, "speaker", sg->speaker);
        cJSON_AddItemToArray(arr, o);
    }
}

static void on_text(srv_job *j, const choir_output *out)
{
    const char *t = out->text ? out->text : "";
    int had_partials = j->text.len > 0;
    int segments_sent = j->n_segments; /* before this output's: what the stream has carried */
    /* The final output repeats the whole transcript and all segments (see
     * choir/model.h): it replaces what the partial pieces accumulated. */
    if (out->final) {
        choir_buf_clear(&j->text);
        if (out->n_segments > 0)
            clear_segments(j);
    }
    if (choir_buf_puts(&j->text, t) < 0)
        job_fail(j, CHOIR_ENOMEM, "out of memory");
    if (out->language && !j->language[0])
        snprintf(j->language, sizeof j->language, "%s", out->language);
    for (int i = 0; i < out->n_segments; i++) {
        if (j->n_segments == j->cap_segments) {
            int cap = j->cap_segments ? 2 * j->cap_segments : 16;
            choir_segment *grown = choir_realloc(j->segments, (size_t)cap * sizeof *grown);
            if (!grown) {
                job_fail(j, CHOIR_ENOMEM, "out of memory");
                break;
            }
            j->segments = grown;
            j->cap_segments = cap;
        }
        /* the output's pointers live only during this call: copies */
        const choir_segment *in = &out->segments[i];
        choir_segment *sg = &j->segments[j->n_segments];
        *sg = *in;
        sg->start_s = srv_spans_map(j->spans, j->n_spans, in->start_s);
        sg->end_s = srv_spans_map(j->spans, j->n_spans, in->end_s);
        size_t n = in->text ? strlen(in->text) : 0;
        char *text = choir_alloc(CHOIR_MEM_IO, n + 1);
        int32_t *tokens = in->n_tokens > 0 ? choir_alloc(CHOIR_MEM_IO, (size_t)in->n_tokens * sizeof *tokens) : NULL;
        int words_ok;
        choir_word *words = copy_words(j, in, &words_ok);
        if (!text || (in->n_tokens > 0 && !tokens) || !words_ok) {
            choir_free(text);
            choir_free(tokens);
            free_words(words, in->n_words);
            job_fail(j, CHOIR_ENOMEM, "out of memory");
            break;
        }
        sg->words = words;
        sg->n_words = words ? in->n_words : 0;
        memcpy(text, in->text ? in->text : "", n + 1);
        if (tokens)
            memcpy(tokens, in->tokens, (size_t)in->n_tokens * sizeof *tokens);
        sg->text = text;
        sg->tokens = tokens;
        sg->n_tokens = tokens ? in->n_tokens : 0;
        j->n_segments++;
    }
    if (!out->final) {
        if (j->sse && (*t || j->n_segments > segments_sent)) {
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddStringToObject(ev, "type", "transcript.text.delta");
            cJSON_AddStringToObject(ev, "delta", t);
            add_segments(j, ev, segments_sent);
            sse_event(j, ev);
        }
        return;
    }
    if (out->status)
        job_fail(j, out->status, out->error);
    if (!j->sse)
        return;
    cJSON *ev = cJSON_CreateObject();
    if (j->status) {
        cJSON_AddStringToObject(ev, "type", "error");
        cJSON *e = cJSON_AddObjectToObject(ev, "error");
        cJSON_AddStringToObject(e, "message", j->error);
        cJSON_AddStringToObject(e, "type", "server_error");
        sse_event(j, ev);
        return;
    }
    /* The final output repeats every segment; the stream sends only those no
     * delta carried (all of them when there were no partial pieces). */
    if (!had_partials && (*t || j->n_segments > 0)) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "transcript.text.delta");
        cJSON_AddStringToObject(d, "delta", t);
        add_segments(j, d, 0);
        sse_event(j, d);
    } else if (had_partials && j->n_segments > segments_sent) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "type", "transcript.text.delta");
        cJSON_AddStringToObject(d, "delta", "");
        add_segments(j, d, segments_sent);
        sse_event(j, d);
    }
    cJSON_AddStringToObject(ev, "type", "transcript.text.done");
    cJSON_AddStringToObject(ev, "text", t);
    sse_event(j, ev);
}

int srv_job_on_output(void *user, const choir_output *out)
{
    srv_job *j = user;
    pthread_mutex_lock(&j->mu);
    if (j->kind == SRV_JOB_SPEECH)
        on_audio(j, out);
    else
        on_text(j, out);
    if (out->final)
        j->finished = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

const char *srv_job_transcript(const srv_job *j)
{
    /* After the final output, j->text holds the whole transcript it carried. */
    return j->text.data ? j->text.data : "";
}

enum MHD_Result srv_job_submit(srv_job *j, choir_job *job, struct MHD_Connection *c, int *submitted)
{
    choir_server *s = j->server;
    choir_reject_reason reason = CHOIR_REJECT_NONE;
    choir_err err = {0};
    job->on_output = srv_job_on_output;
    job->user = j;
    job->priority = srv_priority_of(s, c);
    j->deadline = srv_deadline_of(s, c);
    srv_queue_headers_for(c, job->model_id);
    job->timeout_s = j->deadline - srv_now();
    if (job->timeout_s <= 0) {
        /* the upload and its decoding took the whole deadline */
        *submitted = 0;
        return srv_reply_error(s, c, 503, NULL, "deadline", "the request's deadline passed before it could be queued");
    }
    j->ticket = choir_engine_submit(s->engine, job, &reason, &err);
    *submitted = j->ticket != NULL;
    if (j->ticket)
        return MHD_YES;
    return srv_reply_engine_error(s, c, err.code, reason, err.msg);
}

/* 1 when the client has closed its side of the connection: a request nobody
 * will read is cancelled instead of computed to the end. */
static int client_gone(struct MHD_Connection *c)
{
    if (!c)
        return 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info)
        return 0;
    char b;
    ssize_t n = recv(info->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The engine ends a request at its deadline; a model step deaf to the cancel
 * flag is answered by the connection thread this long after it. */
#define SRV_DEADLINE_GRACE_S 0.5

/* 1 when the job's deadline passed more than the grace ago and it is still
 * running: it is cancelled and *reason/error say so. */
static int past_due(srv_job *j, choir_reject_reason *reason)
{
    if (!(j->deadline > 0) || srv_now() < j->deadline + SRV_DEADLINE_GRACE_S || choir_ticket_done(j->ticket))
        return 0;
    choir_ticket_cancel(j->ticket);
    atomic_fetch_add(&j->server->answered_late_guard, 1);
    *reason = CHOIR_REJECT_DEADLINE;
    return 1;
}

int srv_job_wait(srv_job *j, struct MHD_Connection *c, choir_reject_reason *reason)
{
    choir_err err = {0};
    int rc, running;
    while ((rc = choir_ticket_poll(j->ticket, 0.1, &running, &err)), running) {
        if (client_gone(c))
            choir_ticket_cancel(j->ticket);
        if (past_due(j, reason)) {
            pthread_mutex_lock(&j->mu);
            job_fail(j, CHOIR_ETIMEDOUT, "the deadline passed while the request was running");
            rc = j->status;
            pthread_mutex_unlock(&j->mu);
            return rc;
        }
        err.msg[0] = 0;
    }
    *reason = choir_ticket_reason(j->ticket);
    pthread_mutex_lock(&j->mu);
    if (rc < 0)
        job_fail(j, rc, err.msg);
    rc = j->status;
    pthread_mutex_unlock(&j->mu);
    return rc;
}

enum MHD_Result srv_job_reply_whole(srv_job *j, struct MHD_Connection *c, unsigned status,
                                    const char *content_type)
{
    choir_reject_reason reason;
    int rc = srv_job_wait(j, c, &reason);
    if (rc < 0)
        return srv_reply_engine_error(j->server, c, rc, reason, j->error);
    return srv_reply(j->server, c, status, content_type, j->out.data, j->out.len);
}

/* Waits (j->mu held) for the next change. The engine delivers a final output
 * for every request, failed ones included; the ticket is also polled so that
 * a request that ended without one cannot leave a reader waiting forever. */
static void wait_change(srv_job *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (!j->finished && j->ticket && choir_ticket_done(j->ticket)) {
        pthread_mutex_unlock(&j->mu);
        choir_err err = {0};
        int rc = choir_ticket_wait(j->ticket, 0, &err);
        pthread_mutex_lock(&j->mu);
        /* the final output may have arrived meanwhile */
        if (!j->finished) {
            if (rc < 0)
                job_fail(j, rc, err.msg);
            j->finished = 1;
        }
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->out_sent == j->out.len && !j->finished)
        wait_change(j);
    size_t n = j->out.len - j->out_sent;
    if (n == 0) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (n > max)
        n = max;
    memcpy(buf, j->out.data + j->out_sent, n);
    j->out_sent += n;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    srv_job_free(cls);
}

enum MHD_Result srv_job_reply_stream(srv_job *j, struct MHD_Connection *c, const char *content_type)
{
    choir_server *s = j->server;
    /* The status line waits for the first bytes, so that a request that fails
     * before producing anything (a model that cannot load, a deadline) still
     * gets its proper error status. */
    pthread_mutex_lock(&j->mu);
    int late = 0;
    choir_reject_reason reason = CHOIR_REJECT_NONE;
    while (j->out.len == 0 && !j->finished) {
        wait_change(j);
        if (!j->finished && (client_gone(c) || (late = past_due(j, &reason)))) {
            pthread_mutex_unlock(&j->mu);
            choir_ticket_cancel(j->ticket);
            pthread_mutex_lock(&j->mu);
            if (late) {
                job_fail(j, CHOIR_ETIMEDOUT, "the deadline passed before the first output");
                break;
            }
        }
    }
    int failed_early = j->out.len == 0 && j->status;
    pthread_mutex_unlock(&j->mu);
    if (failed_early) {
        int rc = late ? j->status : srv_job_wait(j, c, &reason);
        enum MHD_Result ret = srv_reply_engine_error(s, c, rc, reason, j->error);
        srv_job_free(j);
        return ret;
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, j,
                                                               stream_free);
    if (!r) {
        srv_job_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", content_type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    srv_add_queue_headers(s, c, r);
    srv_add_cors(j->server, c, r);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    srv_count_status(s, 200);
    atomic_fetch_add(&s->streams, 1);
    return ret;
}
