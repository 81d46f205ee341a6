/* The fake model (see fake_model.h). Its cost model is that of a real batched
 * model: a fixed cost per batch plus a cost per padded element, and arena use
 * of n * longest * bytes_per_unit * true_ratio. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/chunker.h"
#include "models/fake/fake_model.h"

typedef struct fake_weights {
    choir_fake_params p;
    int64_t file_bytes;
    int device;           /* choir_model_options.device it was loaded for */
    pthread_mutex_t gpu;  /* serialises batches of a GPU replica */
} fake_weights;

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t fnv1a(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xCBF29CE484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ULL;
    return h;
}

float choir_fake_tts_sample(const char *text, int64_t i)
{
    uint64_t h = fnv1a(text, strlen(text));
    double freq = 100.0 + (double)(h % 400);
    return (float)(0.5 * sin(2.0 * M_PI * freq * (double)i / 24000.0));
}

static int fake_probe(const char *dir, const struct cJSON *config)
{
    (void)dir;
    const cJSON *t = config ? cJSON_GetObjectItemCaseSensitive(config, "model_type") : NULL;
    return cJSON_IsString(t) && strcmp(t->valuestring, "choir-fake") == 0 ? 100 : 0;
}

static double num(const cJSON *c, const char *k, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void *fake_load(const char *dir, const choir_model_options *opt, choir_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        choir_err_set(err, CHOIR_ENOTFOUND, "%s: cannot open", path);
        return NULL;
    }
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *c = cJSON_Parse(buf);
    if (!c) {
        choir_err_set(err, CHOIR_EFORMAT, "%s: not JSON", path);
        return NULL;
    }
    /* tests of a model that cannot load (the probe still claims it) */
    if (num(c, "fail_load", 0) != 0) {
        cJSON_Delete(c);
        choir_err_set(err, CHOIR_EFORMAT, "%s: \"fail_load\" is set", path);
        return NULL;
    }
    fake_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (!w) {
        cJSON_Delete(c);
        choir_err_set(err, CHOIR_ENOMEM, "fake: out of memory");
        return NULL;
    }
    w->p.tasks = (uint32_t)num(c, "tasks", CHOIR_TASK_BIT(CHOIR_TASK_TTS) | CHOIR_TASK_BIT(CHOIR_TASK_STT));
    w->p.fixed_ms = num(c, "fixed_ms", 1);
    w->p.per_unit_us = num(c, "per_unit_us", 0);
    w->p.bytes_per_unit = (int64_t)num(c, "bytes_per_unit", 64);
    w->p.true_ratio = num(c, "true_ratio", 1);
    w->p.load_ms = num(c, "load_ms", 0);
    w->p.pieces = (int)num(c, "pieces", 4);
    w->p.segments = (int)num(c, "segments", 0);
    w->p.fail_on_length = (int)num(c, "fail_on_length", 0);
    w->p.device_weights_bytes = (int64_t)num(c, "device_weights_bytes", 0);
    w->p.device_bytes_per_unit = (int64_t)num(c, "device_bytes_per_unit", 0);
    cJSON_Delete(c);
    w->file_bytes = choir_model_dir_bytes(dir);
    w->device = opt ? opt->device : CHOIR_DEVICE_CPU;
    if (w->device < 0) {
        choir_err_set(err, CHOIR_EINVAL, "fake: bad device %d", w->device);
        choir_free(w);
        return NULL;
    }
    pthread_mutex_init(&w->gpu, NULL);
    sleep_s(w->p.load_ms / 1000.0);
    return w;
}

static void fake_free(void *weights)
{
    if (!weights)
        return;
    pthread_mutex_destroy(&((fake_weights *)weights)->gpu);
    choir_free(weights);
}

static int64_t fake_device_bytes(const void *weights)
{
    const fake_weights *w = weights;
    if (!w || w->device < 1)
        return 0;
    return w->p.device_weights_bytes > 0 ? w->p.device_weights_bytes : w->file_bytes;
}

static int64_t fake_resident(const void *weights)
{
    return ((const fake_weights *)weights)->file_bytes;
}

static int64_t fake_length(const void *weights, const choir_request *r)
{
    (void)weights;
    switch (r->task) {
    case CHOIR_TASK_TTS: return (int64_t)strlen(r->in.tts.text);
    case CHOIR_TASK_STT: return r->in.stt.n_samples;
    case CHOIR_TASK_VAD: return r->in.vad.n_samples;
    default: return r->in.sts.n_samples;
    }
}

/* The estimate does not know the weights' parameters before loading, so the
 * default bytes_per_unit is declared to the engine here; tests that change it
 * compare against the arena that the engine measured instead. */
/* The fake model does not chunk, but it takes chunking options as a chunked
 * model does (its default chunk 10 s, no overlap), so the front ends' answers
 * to them can be tested without real weights. */
static const choir_chunk_limits fake_chunk_limits = {"choir-fake", 0, 86400, 1};

static int fake_check(const void *weights, const choir_request *r, choir_err *err)
{
    (void)weights;
    if (r->task != CHOIR_TASK_STS)
        return 0;
    double chunk, overlap;
    choir_sts_chunking(&r->in.sts, 10, 0, &chunk, &overlap);
    return choir_chunk_check(&fake_chunk_limits, chunk, overlap, err);
}

static int64_t fake_estimate(const void *weights, const choir_request *r)
{
    int64_t bpu = weights ? ((const fake_weights *)weights)->p.bytes_per_unit : 64;
    return fake_length(weights, r) * bpu;
}

static int64_t fake_estimate_device(const void *weights, const choir_request *r)
{
    const fake_weights *w = weights;
    int64_t bpu = !w ? 64 : w->p.device_bytes_per_unit > 0 ? w->p.device_bytes_per_unit : w->p.bytes_per_unit;
    return fake_length(weights, r) * bpu;
}

static uint64_t samples_checksum(const float *x, int64_t n)
{
    return fnv1a(x, (size_t)n * sizeof *x);
}

#define FAKE_MAX_SEGMENTS 16

static int emit_piece(choir_request *r, int k, int pieces, int final, int segments, float *scratch,
                      int64_t scratch_n)
{
    choir_output out = {.final = final};
    char text[1024];
    choir_segment segs[FAKE_MAX_SEGMENTS];
    char seg_text[FAKE_MAX_SEGMENTS][24], word_text[FAKE_MAX_SEGMENTS][16];
    choir_word words[FAKE_MAX_SEGMENTS][2];
    if (r->task == CHOIR_TASK_TTS) {
        int64_t total = (int64_t)strlen(r->in.tts.text) * CHOIR_FAKE_TTS_SAMPLES_PER_CHAR;
        int64_t from = total * k / pieces, to = total * (k + 1) / pieces;
        if (!r->stream) {
            /* a non-streaming request gets all its audio in the final output */
            from = 0;
            to = total;
        }
        int64_t n = to - from < scratch_n ? to - from : scratch_n;
        for (int64_t i = 0; i < n; i++)
            scratch[i] = choir_fake_tts_sample(r->in.tts.text, from + i);
        out.samples = scratch;
        out.n_samples = n;
        out.sample_rate = 24000;
    } else {
        const float *x = r->task == CHOIR_TASK_STT ? r->in.stt.samples : r->in.sts.samples;
        int64_t n = r->task == CHOIR_TASK_STT ? r->in.stt.n_samples : r->in.sts.n_samples;
        if (final) {
            /* a final output carries the whole transcript: after streamed
             * pieces, their text comes first */
            size_t len = 0;
            text[0] = '\0';
            for (int p = 0; r->stream && p < k && len < sizeof text; p++)
                len += (size_t)snprintf(text + len, sizeof text - len, "partial %d/%d", p + 1, pieces);
            if (len < sizeof text)
                snprintf(text + len, sizeof text - len, "%lld samples, checksum %016llx", (long long)n,
                         (unsigned long long)samples_checksum(x, n));
        } else
            snprintf(text, sizeof text, "partial %d/%d", k + 1, pieces);
        out.text = text;
        /* With "segments" and timestamps, piece k is the segment [k, k+1) * duration / pieces:
         * a streamed piece carries its own, the final output all of them
         * (at most FAKE_MAX_SEGMENTS), as a real model's would. With word
         * timestamps, " piece" takes the first half of it and " N" the second. */
        if (segments && r->task == CHOIR_TASK_STT && r->in.stt.timestamps) {
            double dur = (double)n / (r->in.stt.sample_rate > 0 ? r->in.stt.sample_rate : 16000);
            int first = final ? 0 : k, last = final ? pieces : k + 1;
            if (last - first > FAKE_MAX_SEGMENTS)
                last = first + FAKE_MAX_SEGMENTS;
            for (int p = first; p < last; p++) {
                snprintf(seg_text[p - first], sizeof seg_text[0], " piece %d", p + 1);
                segs[p - first] = (choir_segment){.start_s = dur * p / pieces, .end_s = dur * (p + 1) / pieces,
                                                  .text = seg_text[p - first], .probability = 0.5f};
                if (r->in.stt.word_timestamps) {
                    choir_segment *g = &segs[p - first];
                    double mid = (g->start_s + g->end_s) / 2;
                    snprintf(word_text[p - first], sizeof word_text[0], " %d", p + 1);
                    words[p - first][0] = (choir_word){g->start_s, mid, " piece", 0.75f};
                    words[p - first][1] = (choir_word){mid, g->end_s, word_text[p - first], 0.25f};
                    g->words = words[p - first];
                    g->n_words = 2;
                }
            }
            out.segments = segs;
            out.n_segments = last - first;
        }
    }
    return choir_request_emit(r, &out);
}

static int fake_run_batch_locked(void *weights, choir_request *const *reqs, int n, choir_arena *arena,
                                 choir_err *err)
{
    const fake_weights *w = weights;
    int64_t longest = 0;
    for (int i = 0; i < n; i++) {
        int64_t len = fake_length(w, reqs[i]);
        if (len > longest)
            longest = len;
    }
    size_t need = (size_t)((double)(longest * w->p.bytes_per_unit * n) * (w->p.true_ratio > 0 ? w->p.true_ratio : 1));
    if (need > 0 && !choir_arena_alloc(arena, need))
        return choir_err_set(err, CHOIR_ENOMEM, "fake: arena of %zu bytes cannot hold %zu",
                             choir_arena_capacity(arena), need);
    /* one piece of TTS output at a time lives in the arena, as a real model's would */
    int64_t piece_max = 0;
    for (int i = 0; i < n; i++)
        if (reqs[i]->task == CHOIR_TASK_TTS) {
            int64_t total = (int64_t)strlen(reqs[i]->in.tts.text) * CHOIR_FAKE_TTS_SAMPLES_PER_CHAR;
            if (total > piece_max)
                piece_max = total;
        }
    float *scratch = NULL;
    size_t mark = choir_arena_mark(arena);
    if (piece_max) {
        scratch = choir_alloc(CHOIR_MEM_IO, (size_t)piece_max * sizeof *scratch);
        if (!scratch)
            return choir_err_set(err, CHOIR_ENOMEM, "fake: out of memory");
    }
    double total_s = w->p.fixed_ms / 1000.0 + w->p.per_unit_us * 1e-6 * (double)(longest * n);
    int pieces = w->p.pieces > 0 ? w->p.pieces : 4;
    for (int k = 0; k < pieces; k++) {
        /* A real model stops working on a batch whose requests have all been
         * cancelled (by their callers, a deadline or a shutdown): so does this one. */
        int live = 0;
        for (int i = 0; i < n; i++)
            live += !reqs[i]->done && !reqs[i]->status && !choir_request_cancelled(reqs[i]);
        if (!live)
            break;
        sleep_s(total_s / pieces);
        int final = k == pieces - 1;
        for (int i = 0; i < n; i++) {
            choir_request *r = reqs[i];
            if (r->done || choir_request_cancelled(r) || r->status)
                continue;
            if (w->p.fail_on_length && fake_length(w, r) == w->p.fail_on_length) {
                choir_request_fail(r, CHOIR_EINVAL, "fake: refuses length %d", w->p.fail_on_length);
                continue;
            }
            if (final || r->stream)
                emit_piece(r, k, pieces, final, w->p.segments, scratch, piece_max);
        }
    }
    choir_free(scratch);
    choir_arena_release(arena, mark);
    return 0;
}

static int fake_run_batch(void *weights, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err)
{
    fake_weights *w = weights;
    if (w->device < 1)
        return fake_run_batch_locked(weights, reqs, n, arena, err);
    pthread_mutex_lock(&w->gpu);
    int rc = fake_run_batch_locked(weights, reqs, n, arena, err);
    pthread_mutex_unlock(&w->gpu);
    return rc;
}

const choir_model_ops choir_model_fake_gpu = {
    .kind = "choir-fake",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_TTS) | CHOIR_TASK_BIT(CHOIR_TASK_STT) | CHOIR_TASK_BIT(CHOIR_TASK_STS),
    .max_batch = 64,
    .probe = fake_probe,
    .load = fake_load,
    .free = fake_free,
    .resident_bytes = fake_resident,
    .length = fake_length,
    .estimate = fake_estimate,
    .run_batch = fake_run_batch,
    .check = fake_check,
    .gpu = 1,
    .device_bytes = fake_device_bytes,
    .estimate_device = fake_estimate_device,
};

const choir_model_ops choir_model_fake = {
    .kind = "choir-fake",
    .tasks = CHOIR_TASK_BIT(CHOIR_TASK_TTS) | CHOIR_TASK_BIT(CHOIR_TASK_STT) | CHOIR_TASK_BIT(CHOIR_TASK_STS),
    .max_batch = 64,
    .probe = fake_probe,
    .load = fake_load,
    .free = fake_free,
    .resident_bytes = fake_resident,
    .length = fake_length,
    .estimate = fake_estimate,
    .run_batch = fake_run_batch,
    .check = fake_check,
};

int choir_fake_model_write(const char *dir, const choir_fake_params *p, choir_err *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return choir_err_set(err, CHOIR_EIO, "%s: cannot create", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return choir_err_set(err, CHOIR_EIO, "%s: cannot write", path);
    fprintf(f,
            "{\"model_type\": \"choir-fake\", \"tasks\": %u, \"fixed_ms\": %.17g, \"per_unit_us\": %.17g, "
            "\"bytes_per_unit\": %lld, \"true_ratio\": %.17g, \"load_ms\": %.17g, \"pieces\": %d, "
            "\"fail_on_length\": %d, \"device_weights_bytes\": %lld, \"device_bytes_per_unit\": %lld}\n",
            p->tasks ? p->tasks : (CHOIR_TASK_BIT(CHOIR_TASK_TTS) | CHOIR_TASK_BIT(CHOIR_TASK_STT)), p->fixed_ms,
            p->per_unit_us, (long long)(p->bytes_per_unit ? p->bytes_per_unit : 64),
            p->true_ratio > 0 ? p->true_ratio : 1.0, p->load_ms, p->pieces ? p->pieces : 4, p->fail_on_length,
            (long long)p->device_weights_bytes, (long long)p->device_bytes_per_unit);
    int bad = fclose(f) != 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f)
        return choir_err_set(err, CHOIR_EIO, "%s: cannot write", path);
    /* A sparse file: its size is the weights figure, without writing it. */
    if (p->weights_bytes > 0 && (fseek(f, (long)p->weights_bytes - 1, SEEK_SET) != 0 || fputc(0, f) == EOF))
        bad = 1;
    bad |= fclose(f) != 0;
    return bad ? choir_err_set(err, CHOIR_EIO, "%s: write failed", dir) : 0;
}
