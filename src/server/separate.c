/* POST /v1/audio/separations: text-prompted source separation (SAM-Audio).
 *
 * multipart/form-data: file (audio, any rate; mixed to mono, resampled to
 * 48 kHz), model, description (default "speech"), anchors ("+:0.5:1.2,-:3:4"
 * or [["+",0.5,1.2]]), steps, method (midpoint|euler), seed, chunk_seconds,
 * overlap_seconds, response_format, return (target|residual), stream.
 *
 * response_format "json" (the default) answers as mlx-audio's server does:
 * {"target": base64 WAV, "residual": base64 WAV, "sample_rate": 48000}. An
 * audio format (wav, flac, mp3, opus, pcm, wav_f32) answers with the bytes of
 * one track, `return` choosing which; with stream=true those bytes are sent
 * chunk by chunk as the separation produces them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "choir/parse.h"
#include "choir/sam_audio.h"
#include "server/multipart.h"
#include "server/server_internal.h"

/* Everything the engine borrows until the ticket ends, in one block that the
 * job frees (through its input_text slot, freed after the ticket). */
typedef struct sep_block {
    choir_sam_request req;
    choir_sam_anchor anchors[CHOIR_SAM_MAX_ANCHORS];
    char description[1024];
} sep_block;

typedef struct sep_residual {
    float *x;
    int64_t n;
    int64_t got;
} sep_residual;

static void on_residual(void *user, const float *r, int64_t n, int64_t offset)
{
    sep_residual *s = user;
    if (offset < 0 || offset + n > s->n)
        return;
    memcpy(s->x + offset, r, (size_t)n * sizeof *r);
    if (offset + n > s->got)
        s->got = offset + n;
}

static const char *form_text(const choir_multipart *m, const char *name)
{
    const choir_multipart_part *p = choir_multipart_find(m, name);
    return p && p->len ? p->data : NULL;
}

static char *b64(const unsigned char *d, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = choir_alloc(CHOIR_MEM_IO, 4 * ((n + 2) / 3) + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        o[k++] = tab[v >> 18];
        o[k++] = tab[(v >> 12) & 63];
        o[k++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        o[k++] = i + 2 < n ? tab[v & 63] : '=';
    }
    o[k] = 0;
    return o;
}

/* base64 of x[n] encoded as WAV into `root` under `key`. */
static int add_track(cJSON *root, const char *key, const float *x, int64_t n)
{
    void *wav = NULL;
    size_t len = 0;
    if (choir_audio_encode_memory(CHOIR_FORMAT_WAV16, x, n, CHOIR_SAM_RATE, 1, &wav, &len, NULL) < 0)
        return -1;
    /* A memory encoder writes a streaming header (sizes unknown): fix the
     * RIFF and data sizes now that the length is known. */
    unsigned char *w = wav;
    for (size_t i = 12; len >= 44 && i + 8 <= len;) {
        uint32_t sz = (uint32_t)w[i + 4] | (uint32_t)w[i + 5] << 8 | (uint32_t)w[i + 6] << 16 | (uint32_t)w[i + 7] << 24;
        if (!memcmp(w + i, "data", 4)) {
            uint32_t d = (uint32_t)(len - i - 8), r = (uint32_t)(len - 8);
            for (int b = 0; b < 4; b++) w[i + 4 + b] = (unsigned char)(d >> (8 * b)), w[4 + b] = (unsigned char)(r >> (8 * b));
            break;
        }
        i += 8 + (size_t)sz;
    }
    char *s = b64(wav, len);
    choir_free(wav);
    if (!s)
        return -1;
    cJSON *item = cJSON_AddStringToObject(root, key, s);
    choir_free(s);
    return item ? 0 : -1;
}

enum MHD_Result srv_handle_separation(choir_server *s, struct MHD_Connection *c, srv_conn *conn)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    char boundary[CHOIR_MULTIPART_MAX_BOUNDARY + 1];
    choir_err err = {0};
    choir_multipart *m = choir_alloc(CHOIR_MEM_IO, sizeof *m);
    srv_job *j = NULL;
    sep_residual res = {0};
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
    const char *model = form_text(m, "model");
    const choir_multipart_part *file = choir_multipart_find(m, "file");
    if (!model || !file) {
        ret = srv_reply_error(s, c, 400, !file ? "file" : "model", NULL, "\"model\" and \"file\" are required");
        goto done;
    }
    sep_block *blk = choir_calloc(CHOIR_MEM_IO, 1, sizeof *blk);
    if (!blk) {
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    j = srv_job_create(s, SRV_JOB_SPEECH);
    if (!j) {
        choir_free(blk);
        ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        goto done;
    }
    j->input_text = (char *)blk;
    /* The model's defaults, replaced by what the form gives; the model's
     * check (choir_sam_check_params) bounds them. */
    choir_sam_params p;
    choir_sam_default_params(&p);
    /* Read as the flags' numbers are: each within what its type holds
     * (steps an int, the seed any 64-bit value, as `choir sep --seed`), so
     * no cast below is out of range. */
    double steps = p.steps;
    uint64_t seed = p.seed;
    const char *seed_s = form_text(m, "seed");
    int bad = choir_multipart_number(m, "chunk_seconds", -INFINITY, INFINITY, 0, &p.chunk_seconds) < 0;
    bad |= choir_multipart_number(m, "overlap_seconds", -INFINITY, INFINITY, 0, &p.overlap_seconds) < 0;
    bad |= choir_multipart_number(m, "steps", 0, 1 << 20, 1, &steps) < 0;
    bad |= seed_s && *seed_s && choir_parse_u64(seed_s, &seed) < 0;
    const char *method = form_text(m, "method"), *fmt_s = form_text(m, "response_format");
    const char *which = form_text(m, "return"), *stream_s = form_text(m, "stream");
    const char *desc = form_text(m, "description");
    int stream = stream_s && (!strcmp(stream_s, "true") || !strcmp(stream_s, "1"));
    int json = !fmt_s || !strcmp(fmt_s, "json");
    choir_audio_format fmt = CHOIR_FORMAT_WAV16;
    p.steps = (int)steps;
    if (method && !strcmp(method, "euler"))
        p.method = CHOIR_SAM_EULER;
    if (bad || (method && strcmp(method, "euler") && strcmp(method, "midpoint")) ||
        choir_sam_check_params(&p, &err) < 0) {
        ret = srv_reply_error(s, c, 400, NULL, NULL, "%s",
                              err.msg[0] ? err.msg : "steps, seed, chunk_seconds, overlap_seconds must be numbers; "
                                                     "method midpoint or euler");
        goto done;
    }
    if ((!json && choir_audio_format_parse(fmt_s, &fmt, NULL) < 0) || (json && stream) ||
        (which && strcmp(which, "target") && strcmp(which, "residual"))) {
        ret = srv_reply_error(s, c, 400, "response_format", NULL,
                              "response_format is json (both tracks) or an audio format (wav, pcm, flac, mp3, opus, "
                              "wav_f32) for one track; return is target or residual; stream needs an audio format");
        goto done;
    }
    if (choir_sam_parse_anchors(form_text(m, "anchors"), blk->anchors, CHOIR_SAM_MAX_ANCHORS, &blk->req.n_anchors,
                                &err) < 0) {
        ret = srv_reply_error(s, c, 400, "anchors", NULL, "%s", err.msg);
        goto done;
    }
    if (desc && strlen(desc) >= sizeof blk->description) {
        ret = srv_reply_error(s, c, 400, "description", NULL, "description longer than %zu bytes",
                              sizeof blk->description - 1);
        goto done;
    }
    snprintf(blk->description, sizeof blk->description, "%s", desc ? desc : "speech");
    blk->req.description = blk->description;
    blk->req.anchors = blk->anchors;
    blk->req.steps = p.steps;
    blk->req.method = p.method == CHOIR_SAM_EULER ? 1 : 0;
    blk->req.has_seed = 1;
    blk->req.seed = seed;
    blk->req.output_residual = which && !strcmp(which, "residual");
    srv_model sm;
    if (srv_model_find(s, model, &sm) < 0) {
        ret = srv_reply_error(s, c, 404, "model", "model_not_found", "the model \"%s\" does not exist", model);
        goto done;
    }
    if (!sm.kind || strcmp(sm.kind, "sam-audio") != 0) {
        ret = srv_reply_error(s, c, 400, "model", "wrong_task", "the model \"%s\" (%s) does not separate sources", model,
                              sm.kind ? sm.kind : "?");
        goto done;
    }
    choir_decode_opts opts = {.target_rate = CHOIR_SAM_RATE, .mono = 1};
    int rc = choir_audio_decode_memory(file->data, file->len, &opts, &audio, &err);
    if (rc < 0) {
        ret = srv_reply_error(s, c, rc == CHOIR_ENOMEM ? 500 : 415, "file", "unsupported_audio",
                              "cannot decode the uploaded audio: %s", err.msg);
        goto done;
    }
    if (json) {
        res.n = audio.frames;
        res.x = choir_calloc(CHOIR_MEM_IO, (size_t)(res.n ? res.n : 1), sizeof *res.x);
        if (!res.x) {
            ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
            goto done;
        }
        blk->req.on_residual = on_residual;
        blk->req.residual_user = &res;
        j->format = CHOIR_FORMAT_WAVF32; /* the target comes back as float WAV and is re-read below */
    } else {
        j->format = fmt;
    }
    j->stream = stream;
    j->samples = audio.samples;
    j->n_samples = audio.frames;
    audio.samples = NULL;
    choir_job job = {0};
    job.model_id = model;
    job.req.task = CHOIR_TASK_STS;
    job.req.in.sts.samples = j->samples;
    job.req.in.sts.n_samples = j->n_samples;
    job.req.in.sts.sample_rate = CHOIR_SAM_RATE;
    job.req.in.sts.chunk_seconds = p.chunk_seconds;
    job.req.in.sts.overlap_seconds = p.overlap_seconds;
    job.req.in.sts.has_chunk = job.req.in.sts.has_overlap = 1; /* resolved above, 0 included */
    job.req.extra = &blk->req;
    job.req.stream = stream;
    int submitted;
    ret = srv_job_submit(j, &job, c, &submitted);
    if (!submitted)
        goto done;
    if (!json) {
        if (stream) {
            ret = srv_job_reply_stream(j, c, choir_audio_format_mime(fmt));
            j = NULL; /* the response owns it now */
        } else {
            ret = srv_job_reply_whole(j, c, 200, choir_audio_format_mime(fmt));
        }
        goto done;
    }
    choir_reject_reason reason;
    rc = srv_job_wait(j, c, &reason);
    if (rc < 0) {
        ret = srv_reply_engine_error(s, c, rc, reason, j->error);
        goto done;
    }
    /* The target arrived as float WAV bytes: decode them back to samples. */
    choir_audio tgt = {0};
    cJSON *root = cJSON_CreateObject();
    if (!root || choir_audio_decode_memory(j->out.data, j->out.len, NULL, &tgt, &err) < 0 ||
        add_track(root, "target", tgt.samples, tgt.frames) < 0 || add_track(root, "residual", res.x, res.got) < 0 ||
        !cJSON_AddNumberToObject(root, "sample_rate", CHOIR_SAM_RATE)) {
        choir_audio_clear(&tgt);
        cJSON_Delete(root);
        ret = srv_reply_error(s, c, 500, NULL, NULL, "cannot encode the result");
        goto done;
    }
    choir_audio_clear(&tgt);
    ret = srv_reply_json(s, c, 200, root);
done:
    choir_audio_clear(&audio);
    srv_job_free(j);
    choir_free(res.x);
    choir_free(m);
    return ret;
}
