/* chunking_strategy on /v1/audio/transcriptions: voice activity detection
 * before transcription, with the server's VAD model (Silero) when it has one.
 *
 * The upload goes through the VAD model first (an engine job of its own);
 * its speech segments, widened by the prefix padding, are put one after the
 * other with a short silence between them, and only that goes to the STT
 * model. Silence costs no decoding and gives Whisper nothing to hallucinate
 * on. The job keeps the table of pieces so the transcript's segment times are
 * mapped back to the upload's own clock (srv_spans_map). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "server/multipart.h"
#include "server/server_internal.h"

/* Silence between two pieces: long enough that a decoder sees a pause. */
#define CHUNK_GAP_S 0.3

int srv_chunking_parse(const struct choir_multipart_part *p, srv_chunking *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof *out);
    out->padding_ms = 300; /* OpenAI's server_vad defaults */
    out->silence_ms = 200;
    out->threshold = 0.5f;
    if (!p || p->len == 0 || strcmp(p->data, "none") == 0)
        return 0;
    if (strcmp(p->data, "auto") == 0) {
        out->mode = SRV_CHUNK_AUTO;
        return 0;
    }
    cJSON *o = cJSON_ParseWithLength(p->data, p->len);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsObject(o) || !cJSON_IsString(type) || strcmp(type->valuestring, "server_vad") != 0) {
        cJSON_Delete(o);
        snprintf(msg, cap, "\"chunking_strategy\" is \"auto\" or {\"type\": \"server_vad\", \"threshold\", "
                           "\"prefix_padding_ms\", \"silence_duration_ms\"}");
        return -1;
    }
    out->mode = SRV_CHUNK_SERVER_VAD;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(o, "threshold");
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(o, "prefix_padding_ms");
    const cJSON *sil = cJSON_GetObjectItemCaseSensitive(o, "silence_duration_ms");
    int bad = 0;
    if (th) {
        bad |= !cJSON_IsNumber(th) || !(th->valuedouble > 0 && th->valuedouble < 1);
        out->threshold = (float)th->valuedouble;
    }
    if (pad) {
        bad |= !cJSON_IsNumber(pad) || !(pad->valuedouble >= 0 && pad->valuedouble <= 10000);
        out->padding_ms = (int)pad->valuedouble;
    }
    if (sil) {
        bad |= !cJSON_IsNumber(sil) || !(sil->valuedouble >= 0 && sil->valuedouble <= 10000);
        out->silence_ms = (int)sil->valuedouble;
    }
    cJSON_Delete(o);
    if (bad) {
        snprintf(msg, cap, "chunking_strategy: threshold is in (0, 1), prefix_padding_ms and silence_duration_ms "
                           "in 0..10000");
        return -1;
    }
    return 0;
}

int srv_chunking_apply(choir_server *s, struct MHD_Connection *c, const srv_chunking *ch, int rate, float **samples,
                       int64_t *n, srv_span **spans, int *n_spans, enum MHD_Result *ret)
{
    *spans = NULL;
    *n_spans = 0;
    if (ch->mode == SRV_CHUNK_NONE)
        return 0;
    srv_model vad;
    if (srv_model_first(s, CHOIR_TASK_VAD, &vad) < 0 || rate != CHOIR_RATE_STT) {
        if (ch->mode == SRV_CHUNK_AUTO)
            return 0; /* "auto": the server decides, and without a VAD model it transcribes all */
        *ret = srv_reply_error(s, c, 400, "chunking_strategy", "vad_unavailable",
                               rate != CHOIR_RATE_STT ? "server_vad chunking needs a 16-kHz model"
                                                      : "server_vad chunking needs a VAD model (Silero) on the server");
        return -1;
    }
    /* 1. where the speech is */
    srv_job *j = srv_job_create(s, SRV_JOB_TRANSCRIPT);
    if (!j) {
        *ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        return -1;
    }
    choir_job job = {0};
    job.model_id = vad.id;
    job.req.task = CHOIR_TASK_VAD;
    job.req.in.vad = (choir_vad_input){.samples = *samples, .n_samples = *n, .threshold = ch->threshold,
                                       .min_silence_ms = ch->silence_ms};
    int submitted;
    *ret = srv_job_submit(j, &job, c, &submitted);
    if (!submitted) {
        srv_job_destroy(j); /* it borrows *samples: wait for the ticket */
        return -1;
    }
    choir_reject_reason reason;
    int rc = srv_job_wait(j, c, &reason);
    if (rc < 0) {
        *ret = srv_reply_engine_error(s, c, rc, reason, j->error);
        srv_job_destroy(j); /* it borrows *samples: wait for the ticket */
        return -1;
    }
    /* 2. the pieces: segments widened by the padding, overlaps merged */
    srv_span *sp = j->n_segments ? choir_alloc(CHOIR_MEM_IO, (size_t)j->n_segments * sizeof *sp) : NULL;
    int k = 0;
    double total_s = (double)*n / rate, pad_s = ch->padding_ms / 1000.0;
    for (int i = 0; sp && i < j->n_segments; i++) {
        double a = j->segments[i].start_s - pad_s, b = j->segments[i].end_s + pad_s;
        a = a < 0 ? 0 : a;
        b = b > total_s ? total_s : b;
        if (b <= a)
            continue;
        if (k > 0 && a <= sp[k - 1].from_s + sp[k - 1].len_s) {
            double end = sp[k - 1].from_s + sp[k - 1].len_s;
            sp[k - 1].len_s = (b > end ? b : end) - sp[k - 1].from_s;
        } else {
            sp[k++] = (srv_span){.from_s = a, .len_s = b - a};
        }
    }
    int had = j->n_segments;
    srv_job_destroy(j);
    if (had && !sp) {
        *ret = srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        return -1;
    }
    /* 3. only the speech, with a short pause between pieces */
    int64_t gap = (int64_t)(CHUNK_GAP_S * rate), total = 0;
    for (int i = 0; i < k; i++) {
        sp[i].at_s = (double)total / rate;
        int64_t a = (int64_t)(sp[i].from_s * rate), b = (int64_t)((sp[i].from_s + sp[i].len_s) * rate);
        total += (b - a) + (i + 1 < k ? gap : 0);
    }
    choir_err err = {0};
    float *kept = total ? choir_engine_alloc_input(s->engine, (size_t)total * sizeof *kept, &err) : NULL;
    if (total && !kept) {
        choir_free(sp);
        *ret = err.code == CHOIR_EBUSY
                   ? srv_reply_error(s, c, 503, NULL, "memory_busy", "no memory for the speech pieces now; retry later")
                   : srv_reply_error(s, c, 500, NULL, NULL, "out of memory");
        return -1;
    }
    int64_t w = 0;
    for (int i = 0; i < k; i++) {
        int64_t a = (int64_t)(sp[i].from_s * rate), b = (int64_t)((sp[i].from_s + sp[i].len_s) * rate);
        memcpy(kept + w, *samples + a, (size_t)(b - a) * sizeof *kept);
        w += b - a;
        if (i + 1 < k) {
            memset(kept + w, 0, (size_t)gap * sizeof *kept);
            w += gap;
        }
    }
    choir_free(*samples);
    *samples = kept;
    *n = total;
    *spans = sp;
    *n_spans = k;
    if (k == 0)
        choir_free(sp), *spans = NULL;
    return 0;
}

double srv_spans_map(const srv_span *sp, int n, double t)
{
    if (n == 0)
        return t;
    int i = 0;
    while (i + 1 < n && sp[i + 1].at_s <= t)
        i++;
    double into = t - sp[i].at_s;
    if (into < 0)
        into = 0;
    if (into > sp[i].len_s)
        into = sp[i].len_s; /* inside the pause after a piece: its end */
    return sp[i].from_s + into;
}
