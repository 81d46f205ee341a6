/* POST /v1/audio/transcriptions and /v1/audio/translations: a multipart upload
 * is decoded to mono at the model's input rate (16 kHz, 24 kHz for
 * VibeVoice), transcribed by the engine and answered as json, text, srt, vtt
 * or verbose_json (segments carry `speaker` when the model gives one; srt /
 * vtt label the speakers), or streamed as SSE transcript events. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "server/multipart.h"
#include "server/server_internal.h"

static char *dup_field(const choir_multipart_part *p)
{
    if (!p || p->len == 0)
        return NULL;
    char *d = choir_alloc(CHOIR_MEM_IO, p->len + 1);
    if (d)
        memcpy(d, p->data, p->len + 1);
    return d;
}

char *srv_format_transcript(const srv_job *j, choir_transcript_format format, int translate, double duration_s)
{
    choir_transcript t = {.text = srv_job_transcript(j),
                          .language = j->language[0] ? j->language : NULL,
                          .duration_s = duration_s,
                          .translate = translate,
                          .segments = j->segments,
                          .n_segments = j->n_segments,
                          .words = j->words,
                          .no_segments = j->no_segments};
    return choir_transcript_write(&t, format, NULL, NULL, NULL);
}

typedef struct decode_admit {
    choir_server *server;
    int refused; /* the budget refused the decoded size (not the length cap) */
} decode_admit;

static void *admit_decoded(void *user, size_t bytes, choir_err *err)
{
    decode_admit *a = user;
    void *p = choir_engine_alloc_input(a->server->engine, bytes, err);
    if (!p && err && (err->code == CHOIR_EBUSY || err->code == CHOIR_ETOOBIG))
        a->refused = 1;
    return p;
}

int srv_decode_upload(choir_server *s, struct MHD_Connection *c, const char *model_id, const choir_multipart_part *file,
                      int rate, choir_audio *audio, enum MHD_Result *ret)
{
    /* The decoded size is admitted against the memory budget before any of
     * it exists (at once, from the header, when the format states the
     * length), and the model's longest input bounds it too. */
    double max_s = choir_engine_model_max_audio(s->engine, model_id);
    decode_admit admit = {.server = s};
    choir_decode_opts opts = {.target_rate = rate,
                              .mono = 1,
                              .max_frames = isfinite(max_s) ? (int64_t)(max_s * rate) : 0,
                              .alloc = admit_decoded,
                              .alloc_user = &admit,
                              .cancel = &s->abort};
    choir_err err = {0};
    int rc = choir_audio_decode_memory(file->data, file->len, &opts, audio, &err);
    if (rc == 0)
        return 0;
    if (rc == CHOIR_ETOOBIG && !admit.refused)
        *ret = srv_reply_error(s, c, 413, "file", "audio_too_long", "%s (the model \"%s\" takes at most %.0f s)",
                               err.msg, model_id, max_s);
    else if (rc == CHOIR_ETOOBIG)
        *ret = srv_reply_error(s, c, 413, "file", "audio_too_large",
                               "the decoded audio would not fit the server's memory budget: %s", err.msg);
    else if (rc == CHOIR_EBUSY)
        *ret = srv_reply_error(s, c, 503, "file", "memory_busy",
                               "the decoded audio does not fit the server's memory budget now; retry later: %s",
                               err.msg);
    else if (rc == CHOIR_ECANCELED)
        *ret = srv_reply_error(s, c, 503, NULL, "shutdown", "the server is shutting down");
    else if (rc == CHOIR_ENOMEM)
        *ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory decoding the upload");
    else
        *ret = srv_reply_error(s, c, 415, "file", "unsupported_audio", "cannot decode the uploaded audio: %s",
                               err.msg);
    return -1;
}

/* timestamp_granularities[] (OpenAI's form field, repeated for several
 * values; also without the brackets): "segment" and / or "word". Word
 * timestamps need verbose_json, as OpenAI answers otherwise. 0, or -1 with
 * the message. */
static int parse_granularities(const choir_multipart *m, choir_transcript_format format, int *words,
                               int *segments, char *msg, size_t cap)
{
    int any = 0;
    *words = *segments = 0;
    for (int i = 0; i < m->n_parts; i++) {
        const choir_multipart_part *p = &m->parts[i];
        if (strcmp(p->name, "timestamp_granularities[]") != 0 && strcmp(p->name, "timestamp_granularities") != 0)
            continue;
        if (p->filename || !p->data) {
            snprintf(msg, cap, "\"timestamp_granularities[]\" is a form field, not a file");
            return -1;
        }
        if (strcmp(p->data, "word") == 0) {
            *words = 1;
        } else if (strcmp(p->data, "segment") == 0) {
            *segments = 1;
        } else {
            snprintf(msg, cap, "\"timestamp_granularities[]\" values are word and segment, not \"%.40s\"",
                     p->data);
            return -1;
        }
        any = 1;
    }
    if (!any)
        *segments = 1;
    if (*words && format != CHOIR_TRANSCRIPT_VERBOSE_JSON) {
        snprintf(msg, cap, "\"timestamp_granularities[]\"=word needs \"response_format\": verbose_json");
        return -1;
    }
    return 0;
}

enum MHD_Result srv_handle_transcription(choir_server *s, struct MHD_Connection *c, srv_conn *conn, int translate)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    char boundary[CHOIR_MULTIPART_MAX_BOUNDARY + 1];
    choir_err err = {0};
    choir_multipart *m = choir_alloc(CHOIR_MEM_IO, sizeof *m);
    srv_job *j = NULL;
    choir_audio audio = {0};
    char *body_text = NULL;
    enum MHD_Result ret;
    if (!m) {
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    int rc = choir_multipart_boundary(ct, boundary, sizeof boundary, &err);
    if (rc == 0)
        rc = choir_multipart_parse(conn->body ? conn->body : (char *)"", conn->len, boundary, m, &err);
    if (rc < 0) {
        ret = srv_reply_error(s, c, 400, NULL, "invalid_multipart", "%s", err.msg);
        goto done;
    }
    const choir_multipart_part *model = choir_multipart_find(m, "model");
    const choir_multipart_part *file = choir_multipart_find(m, "file");
    const choir_multipart_part *fmt_p = choir_multipart_find(m, "response_format");
    const choir_multipart_part *stream_p = choir_multipart_find(m, "stream");
    if (!file) {
        ret = srv_reply_error(s, c, 400, "file", NULL, "\"file\" (the audio upload) is required");
        goto done;
    }
    if (!model || !*model->data) {
        ret = srv_reply_error(s, c, 400, "model", NULL, "\"model\" is required");
        goto done;
    }
    choir_transcript_format format = CHOIR_TRANSCRIPT_JSON;
    if (fmt_p && fmt_p->len && (strcmp(fmt_p->data, "txt") == 0 ||
                                choir_transcript_format_parse(fmt_p->data, &format) < 0)) {
        ret = srv_reply_error(s, c, 400, "response_format", NULL,
                              "\"response_format\" must be json, text, srt, vtt or verbose_json");
        goto done;
    }
    double temperature = 0;
    if (choir_multipart_number(m, "temperature", 0, 1, 0, &temperature) < 0) {
        ret = srv_reply_error(s, c, 400, "temperature", NULL, "\"temperature\" must be a number from 0 to 1");
        goto done;
    }
    int stream = 0;
    if (stream_p && stream_p->len) {
        if (strcmp(stream_p->data, "true") == 0)
            stream = 1;
        else if (strcmp(stream_p->data, "false") != 0) {
            ret = srv_reply_error(s, c, 400, "stream", NULL, "\"stream\" must be true or false");
            goto done;
        }
    }
    int want_words, want_segments;
    char gran_msg[160];
    if (parse_granularities(m, format, &want_words, &want_segments, gran_msg, sizeof gran_msg) < 0) {
        ret = srv_reply_error(s, c, 400, "timestamp_granularities", NULL, "%s", gran_msg);
        goto done;
    }
    srv_chunking chunking;
    char chunk_msg[256];
    if (srv_chunking_parse(choir_multipart_find(m, "chunking_strategy"), &chunking, chunk_msg, sizeof chunk_msg) < 0) {
        ret = srv_reply_error(s, c, 400, "chunking_strategy", NULL, "%s", chunk_msg);
        goto done;
    }
    srv_model info;
    if (srv_model_resolve(s, model->data, &info) < 0) {
        ret = srv_reply_error(s, c, 404, "model", "model_not_found", "the model \"%s\" does not exist", model->data);
        goto done;
    }
    if (!(info.tasks & CHOIR_TASK_BIT(CHOIR_TASK_STT))) {
        ret = srv_reply_error(s, c, 400, "model", "wrong_task", "the model \"%s\" (%s) does not transcribe",
                              model->data, info.kind ? info.kind : "?");
        goto done;
    }
    int rate = choir_model_kind_input_rate(info.kind);
    if (srv_decode_upload(s, c, info.id, file, rate, &audio, &ret) < 0)
        goto done;
    double duration_s = (double)audio.frames / rate;
    srv_span *spans = NULL;
    int n_spans = 0;
    if (srv_chunking_apply(s, c, &chunking, rate, &audio.samples, &audio.frames, &spans, &n_spans, &ret) < 0)
        goto done;
    j = srv_job_create(s, SRV_JOB_TRANSCRIPT);
    if (j) {
        j->spans = spans;
        j->n_spans = n_spans;
    } else {
        choir_free(spans);
    }
    if (!j) {
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    j->stream = stream;
    j->sse = stream;
    j->words = want_words;
    j->no_segments = !want_segments;
    j->samples = audio.samples;
    j->n_samples = audio.frames;
    audio.samples = NULL;
    j->detachable = 1; /* the engine reads only the job's own samples and strings */
    j->lang = translate ? NULL : dup_field(choir_multipart_find(m, "language"));
    j->prompt = dup_field(choir_multipart_find(m, "prompt"));
    if (j->n_samples == 0 && chunking.mode != SRV_CHUNK_NONE) {
        /* VAD found no speech: an empty transcript, without asking the model */
        if (stream) {
            static const char done_event[] = "data: {\"type\":\"transcript.text.done\",\"text\":\"\"}\n\n";
            ret = srv_reply(s, c, 200, "text/event-stream", done_event, sizeof done_event - 1);
            goto done;
        }
        body_text = srv_format_transcript(j, format, translate, duration_s);
        ret = body_text ? srv_reply(s, c, 200, choir_transcript_format_mime(format), body_text, strlen(body_text))
                        : srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    choir_job job = {0};
    job.model_id = info.id;
    job.req.task = CHOIR_TASK_STT;
    job.req.stream = stream;
    job.req.in.stt.samples = j->samples;
    job.req.in.stt.n_samples = j->n_samples;
    job.req.in.stt.sample_rate = rate;
    job.req.in.stt.language = j->lang;
    job.req.in.stt.prompt = j->prompt;
    job.req.in.stt.translate = translate;
    job.req.in.stt.temperature = (float)temperature;
    job.req.in.stt.timestamps = format != CHOIR_TRANSCRIPT_JSON && format != CHOIR_TRANSCRIPT_TEXT;
    job.req.in.stt.word_timestamps = want_words;
    int submitted;
    ret = srv_job_submit(j, &job, c, &submitted);
    if (!submitted)
        goto done;
    if (stream) {
        ret = srv_job_reply_stream(j, c, "text/event-stream");
        j = NULL;
        goto done;
    }
    choir_reject_reason reason;
    rc = srv_job_wait(j, c, &reason);
    if (rc < 0) {
        ret = srv_reply_engine_error(s, c, rc, reason, j->error);
        goto done;
    }
    body_text = srv_format_transcript(j, format, translate, duration_s);
    if (!body_text)
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
    else
        ret = srv_reply(s, c, 200, choir_transcript_format_mime(format), body_text, strlen(body_text));
done:
    choir_free(body_text);
    choir_audio_clear(&audio);
    srv_job_free(j);
    choir_free(m);
    return ret;
}
