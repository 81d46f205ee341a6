/* POST /v1/audio/speech (text to speech) and POST /v1/audio/enhancements
 * (speech to speech): validate the request, hand it to the engine, answer with
 * the encoded audio whole, as a chunked byte stream, or as SSE events. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "server/multipart.h"
#include "server/server_internal.h"

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = choir_alloc(CHOIR_MEM_IO, n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

int srv_voice_spec_ok(const char *spec)
{
    /* terms split by '+' or ',', each NAME or NAME(WEIGHT) */
    const char *p = spec;
    if (!*p || strlen(p) > SRV_VOICE_SPEC_MAX)
        return 0;
    for (;;) {
        size_t name = 0;
        if (*p == '.')
            return 0;
        while (isalnum((unsigned char)p[name]) || p[name] == '_' || p[name] == '-' || p[name] == '.')
            name++;
        if (name == 0)
            return 0;
        p += name;
        if (*p == '(') {
            size_t w = 1;
            while (isdigit((unsigned char)p[w]) || p[w] == '.')
                w++;
            if (w == 1 || p[w] != ')')
                return 0;
            p += w + 1;
        }
        if (*p == 0)
            return 1;
        if ((*p != '+' && *p != ',') || p[1] == 0)
            return 0;
        p++;
    }
}

/* Checks that `id` names a model (or an alias of one) serving `task`,
 * replying 404/400 if not; the model is copied to *m. */
static int check_model(choir_server *s, struct MHD_Connection *c, const char *id, choir_task task, srv_model *m,
                       enum MHD_Result *ret)
{
    if (srv_model_resolve(s, id, m) < 0) {
        *ret = srv_reply_error(s, c, 404, "model", "model_not_found", "the model \"%s\" does not exist", id);
        return -1;
    }
    if (!(m->tasks & CHOIR_TASK_BIT(task))) {
        *ret = srv_reply_error(s, c, 400, "model", "wrong_task", "the model \"%s\" (%s) does not do %s", id,
                               m->kind ? m->kind : "?", choir_task_name(task));
        return -1;
    }
    return 0;
}

enum MHD_Result srv_handle_speech(choir_server *s, struct MHD_Connection *c, srv_conn *conn)
{
    cJSON *req = conn->body ? cJSON_ParseWithLength(conn->body, conn->len) : NULL;
    srv_job *j = NULL;
    enum MHD_Result ret;
    if (!cJSON_IsObject(req)) {
        ret = srv_reply_error(s, c, 400, NULL, "invalid_json", "the body must be a JSON object");
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(req, "input");
    const cJSON *voice = cJSON_GetObjectItemCaseSensitive(req, "voice");
    const cJSON *speed = cJSON_GetObjectItemCaseSensitive(req, "speed");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(req, "response_format");
    const cJSON *stream_format = cJSON_GetObjectItemCaseSensitive(req, "stream_format");
    const cJSON *stream_flag = cJSON_GetObjectItemCaseSensitive(req, "stream");
    if (!cJSON_IsString(model) || !*model->valuestring) {
        ret = srv_reply_error(s, c, 400, "model", NULL, "\"model\" (a string) is required");
        goto done;
    }
    if (!cJSON_IsString(input) || !*input->valuestring) {
        ret = srv_reply_error(s, c, 400, "input", NULL, "\"input\" (a non-empty string) is required");
        goto done;
    }
    int chars = srv_utf8_chars(input->valuestring);
    if (chars > s->p.max_input_chars) {
        ret = srv_reply_error(s, c, 400, "input", "string_above_max_length",
                              "\"input\" has %d characters; the limit is %d", chars, s->p.max_input_chars);
        goto done;
    }
    if (voice && !cJSON_IsNull(voice) && !cJSON_IsString(voice)) {
        ret = srv_reply_error(s, c, 400, "voice", "invalid_voice", "\"voice\" must be a voice name (a string)");
        goto done;
    }
    double spd = 1.0;
    if (speed && !cJSON_IsNull(speed)) {
        if (!cJSON_IsNumber(speed) || !(speed->valuedouble >= 0.25 && speed->valuedouble <= 4.0)) {
            ret = srv_reply_error(s, c, 400, "speed", NULL, "\"speed\" must be a number from 0.25 to 4");
            goto done;
        }
        spd = speed->valuedouble;
    }
    choir_audio_format fmt = CHOIR_FORMAT_MP3;
    if (format && !cJSON_IsNull(format)) {
        const char *f = cJSON_IsString(format) ? format->valuestring : "";
        if (strcmp(f, "wav") && strcmp(f, "pcm") && strcmp(f, "flac") && strcmp(f, "mp3") && strcmp(f, "opus") &&
            strcmp(f, "aac")) {
            ret = srv_reply_error(s, c, 400, "response_format", NULL,
                                  "\"response_format\" must be wav, pcm, flac, mp3, opus or aac");
            goto done;
        }
        choir_audio_format_parse(f, &fmt, NULL);
    }
    /* As OpenAI's endpoint does, audio streams by default: a chunked
     * response whose first bytes leave with the first sentence. A client
     * that wants one body with a Content-Length (a WAV header with its true
     * sizes, say) asks with "stream": false. */
    int sse = 0, stream = 1;
    if (stream_flag && !cJSON_IsNull(stream_flag)) {
        if (!cJSON_IsBool(stream_flag)) {
            ret = srv_reply_error(s, c, 400, "stream", NULL, "\"stream\" must be true or false");
            goto done;
        }
        stream = cJSON_IsTrue(stream_flag);
    }
    if (stream_format && !cJSON_IsNull(stream_format)) {
        const char *sf = cJSON_IsString(stream_format) ? stream_format->valuestring : "";
        if (strcmp(sf, "sse") == 0)
            sse = 1;
        else if (strcmp(sf, "audio") != 0) {
            ret = srv_reply_error(s, c, 400, "stream_format", NULL, "\"stream_format\" must be audio or sse");
            goto done;
        }
        if (sse && !stream) {
            ret = srv_reply_error(s, c, 400, "stream", NULL, "\"stream_format\": \"sse\" needs \"stream\" true");
            goto done;
        }
    }
    srv_model m;
    if (check_model(s, c, model->valuestring, CHOIR_TASK_TTS, &m, &ret) < 0)
        goto done;
    /* The voice: one of the model's own, or a name (OpenAI's, an alias)
     * standing for one; anything else is refused with the list. */
    char voice_name[SRV_MODEL_ID_MAX];
    if (cJSON_IsString(voice)) {
        srv_voices v;
        char msg[2048];
        if (srv_voices_list(m.dir, &v) < 0) {
            ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
            goto done;
        }
        int found = srv_voice_resolve(s, &v, voice->valuestring, voice_name, sizeof voice_name, msg, sizeof msg);
        srv_voices_free(&v);
        /* Only voice names, or mixes of them, reach a model, never a path,
         * even for a model without a voices/ folder (the model looks names
         * up in its own folder and reads nothing else). */
        if (found < 0 || !srv_voice_spec_ok(voice->valuestring) || !srv_voice_spec_ok(voice_name)) {
            if (found == 0)
                snprintf(msg, sizeof msg, "\"voice\" must be one of the model's voice names, or a mix of them "
                                          "(\"af_heart\", \"af_heart(2)+am_adam(1)\")");
            ret = srv_reply_error(s, c, 400, "voice", found < 0 ? "voice_not_found" : "invalid_voice", "%s", msg);
            goto done;
        }
    }
    j = srv_job_create(s, SRV_JOB_SPEECH);
    if (!j || !(j->input_text = dup_str(input->valuestring)) ||
        (cJSON_IsString(voice) && !(j->voice = dup_str(voice_name)))) {
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    j->format = fmt;
    j->stream = stream;
    j->sse = sse;
    j->input_chars = chars;
    j->detachable = 1; /* the engine reads only the job's own copies */
    choir_job job = {0};
    job.model_id = m.id;
    job.req.task = CHOIR_TASK_TTS;
    job.req.in.tts.text = j->input_text;
    job.req.in.tts.voice = j->voice;
    job.req.in.tts.speed = (float)spd;
    job.req.stream = stream;
    int submitted;
    ret = srv_job_submit(j, &job, c, &submitted);
    if (!submitted)
        goto done;
    if (stream) {
        ret = srv_job_reply_stream(j, c, sse ? "text/event-stream" : choir_audio_format_mime(fmt));
        j = NULL; /* the response owns it now */
    } else {
        ret = srv_job_reply_whole(j, c, 200, choir_audio_format_mime(fmt));
    }
done:
    srv_job_free(j);
    cJSON_Delete(req);
    return ret;
}

enum MHD_Result srv_handle_enhancement(choir_server *s, struct MHD_Connection *c, srv_conn *conn)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    char boundary[CHOIR_MULTIPART_MAX_BOUNDARY + 1];
    choir_err err = {0};
    choir_multipart *m = choir_alloc(CHOIR_MEM_IO, sizeof *m);
    srv_job *j = NULL;
    choir_audio audio = {0};
    enum MHD_Result ret;
    if (!m) {
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    if (choir_multipart_boundary(ct, boundary, sizeof boundary, &err) < 0 ||
        choir_multipart_parse(conn->body ? conn->body : (char *)"", conn->len, boundary, m, &err) < 0) {
        ret = srv_reply_error(s, c, 400, NULL, "invalid_multipart", "%s", err.msg);
        goto done;
    }
    const choir_multipart_part *model = choir_multipart_find(m, "model");
    const choir_multipart_part *file = choir_multipart_find(m, "file");
    const choir_multipart_part *format = choir_multipart_find(m, "response_format");
    if (!model || !*model->data || !file) {
        ret = srv_reply_error(s, c, 400, !file ? "file" : "model", NULL, "\"model\" and \"file\" are required");
        goto done;
    }
    /* The values are the model's to bound (its check at submit): here they
     * are only read, and absent ones left to the model's defaults. */
    double chunk = 0, overlap = 0;
    int has_chunk = choir_multipart_number(m, "chunk_seconds", -INFINITY, INFINITY, 0, &chunk);
    int has_overlap = choir_multipart_number(m, "overlap_seconds", -INFINITY, INFINITY, 0, &overlap);
    choir_audio_format fmt = CHOIR_FORMAT_WAV16;
    if (has_chunk < 0 || has_overlap < 0) {
        ret = srv_reply_error(s, c, 400, has_chunk < 0 ? "chunk_seconds" : "overlap_seconds", NULL,
                              "chunk_seconds and overlap_seconds must be numbers (seconds)");
        goto done;
    }
    if (format && choir_audio_format_parse(format->data, &fmt, NULL) < 0) {
        ret = srv_reply_error(s, c, 400, "response_format", NULL,
                              "response_format must be one of wav, pcm, flac, mp3, opus, aac");
        goto done;
    }
    srv_model sm;
    if (check_model(s, c, model->data, CHOIR_TASK_STS, &sm, &ret) < 0)
        goto done;
    if (srv_decode_upload(s, c, sm.id, file, CHOIR_RATE_STS, &audio, &ret) < 0)
        goto done;
    j = srv_job_create(s, SRV_JOB_SPEECH);
    if (!j) {
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    j->format = fmt;
    j->detachable = 1; /* the engine reads only the job's own samples */
    j->samples = audio.samples;
    j->n_samples = audio.frames;
    audio.samples = NULL;
    choir_job job = {0};
    job.model_id = sm.id;
    job.req.task = CHOIR_TASK_STS;
    job.req.in.sts.samples = j->samples;
    job.req.in.sts.n_samples = j->n_samples;
    job.req.in.sts.sample_rate = CHOIR_RATE_STS;
    job.req.in.sts.chunk_seconds = chunk;
    job.req.in.sts.overlap_seconds = overlap;
    job.req.in.sts.has_chunk = has_chunk;
    job.req.in.sts.has_overlap = has_overlap;
    int submitted;
    ret = srv_job_submit(j, &job, c, &submitted);
    if (submitted)
        ret = srv_job_reply_whole(j, c, 200, choir_audio_format_mime(fmt));
done:
    choir_audio_clear(&audio);
    srv_job_free(j);
    choir_free(m);
    return ret;
}
