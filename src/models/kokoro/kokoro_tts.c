/* Kokoro serving shape: batches of pieces, and text to streamed audio.
 *
 * A batch runs its items concurrently, one item per worker of the default
 * pool; kernels called from a busy pool run inline, so each item's forward
 * pass is the same single-item computation it is alone, and its audio is
 * bit for bit what choir_kokoro_synthesize_ids gives (tests check this).
 * Items of different lengths therefore need no padding or masks: every
 * LSTM, instance norm and attention sees exactly its own sequence.
 *
 * When the model's executor batches (a device attached with
 * choir_kokoro_set_gpu: kk_net_batches), the items' text and prosody sides
 * run as one batched front (kk_front_batch: ALBERT, each BiLSTM and the F0 /
 * N blocks one executor call for all items, the host steps between them per
 * item on the pool), and then all their decoders as one padded batch
 * (kk_net_decode). */
#include <string.h>

#include "choir/alloc.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_internal.h"

typedef struct batch_job {
    const choir_kokoro *m;
    const kk_ws *call; /* the call's memory, or NULL */
    choir_kokoro_item *items;
    const choir_kokoro_params *params;
    int *status;
    choir_err *errs;
} batch_job;

static void run_items(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    batch_job *job = ctx;
    for (int64_t i = begin; i < end; i++) {
        choir_kokoro_item *it = &job->items[i];
        choir_kokoro_params p = *job->params;
        p.seed = job->params->seed + (uint64_t)i;
        p.trace = NULL;
        if (it->speed > 0) p.speed = it->speed;
        it->audio = NULL, it->n_samples = 0;
        if (!it->ids || !it->style)
            job->status[i] = choir_err_set(&job->errs[i], CHOIR_EINVAL,
                                           "kokoro: missing model, ids, style or output");
        else
            job->status[i] = kk_synthesize_in(job->m, job->call, it->ids, it->n_ids, it->style,
                                              &p, &it->audio, &it->n_samples, &job->errs[i]);
    }
}

/* The items' fronts as one batched front (each network stage one call for
 * all of them, kokoro_front_batch.c), then one batch for every decoder. */
static int batch_at_once(const choir_kokoro *m, choir_kokoro_item *items, int n,
                        const choir_kokoro_params *params, choir_err *err) {
    kk_piece *pieces = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *pieces);
    choir_kokoro_decode_input *in = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *in);
    float **audio = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *audio);
    const int32_t **ids = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *ids);
    const float **style = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *style);
    int *n_ids = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *n_ids);
    choir_kokoro_params *ps = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *ps);
    int rc = 0;
    if (!pieces || !in || !audio || !ids || !style || !n_ids || !ps) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for a batch of %d", n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        ps[i] = *params;
        ps[i].seed = params->seed + (uint64_t)i;
        ps[i].trace = NULL;
        if (items[i].speed > 0) ps[i].speed = items[i].speed;
        ids[i] = items[i].ids;
        n_ids[i] = items[i].n_ids;
        style[i] = items[i].style;
    }
    if ((rc = kk_front_batch(m, n, ids, n_ids, style, ps, pieces, err))) goto done;
    for (int i = 0; i < n; i++)
        in[i] = (choir_kokoro_decode_input){.asr = pieces[i].asr, .f0 = pieces[i].f0,
                                            .n = pieces[i].n, .style = items[i].style,
                                            .frames = pieces[i].L,
                                            .noise_seeded = pieces[i].seeded,
                                            .noise_seed = pieces[i].seed};
    if ((rc = kk_net_decode(m, NULL, in, n, audio, err))) goto done;
    for (int i = 0; i < n; i++) {
        items[i].audio = audio[i];
        items[i].n_samples = pieces[i].L * CHOIR_KOKORO_SAMPLES_PER_FRAME;
    }
done:
    for (int i = 0; pieces && i < n; i++) kk_piece_free(&pieces[i]);
    choir_free(pieces);
    choir_free(in);
    choir_free(audio);
    choir_free(ids);
    choir_free(style);
    choir_free(n_ids);
    choir_free(ps);
    return rc;
}

/* choir_kokoro_synthesize_batch in the call's memory (NULL: the counted
 * allocator); with it the items run one after another (one arena, one
 * user), each as alone. */
static int synthesize_batch_in(const choir_kokoro *m, const kk_ws *call, choir_kokoro_item *items,
                               int n, const choir_kokoro_params *params, choir_err *err) {
    choir_kokoro_params defaults = choir_kokoro_default_params();
    for (int i = 0; i < n; i++) items[i].audio = NULL, items[i].n_samples = 0;
    if (n == 0) return 0;
    int *status = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *status);
    choir_err *errs = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *errs);
    int rc = 0;
    if (!status || !errs) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for a batch of %d", n);
        goto done;
    }
    if (kk_net_batches(m)) {
        rc = batch_at_once(m, items, n, params ? params : &defaults, err);
        goto done;
    }
    batch_job job = {.m = m, .call = call, .items = items, .params = params ? params : &defaults,
                     .status = status, .errs = errs};
    if (n == 1 || call) run_items(&job, 0, n, 0);
    else choir_pool_parallel_for(choir_pool_default(), n, 1, run_items, &job);
    for (int i = 0; i < n && !rc; i++)
        if (status[i]) {
            rc = status[i];
            if (err) *err = errs[i];
            choir_err_prefix(err, "batch item %d", i);
        }
    if (rc)
        for (int i = 0; i < n; i++) {
            choir_free(items[i].audio);
            items[i].audio = NULL;
            items[i].n_samples = 0;
        }
done:
    choir_free(status);
    choir_free(errs);
    return rc;
}

int choir_kokoro_synthesize_batch(const choir_kokoro *m, choir_kokoro_item *items, int n,
                                  const choir_kokoro_params *params, choir_err *err) {
    if (!m || (!items && n > 0) || n < 0)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad batch arguments");
    kk_ws call;
    int rc = kk_call_open(m, params ? params->arena : NULL, &call, err);
    if (!rc) rc = synthesize_batch_in(m, call.arena ? &call : NULL, items, n, params, err);
    kk_call_close(&call);
    return rc;
}

choir_kokoro_speak_params choir_kokoro_default_speak_params(void) {
    choir_kokoro_speak_params p = {.synth = choir_kokoro_default_params(), .batch = 1,
                                   .short_first = true};
    return p;
}

int choir_kokoro_speak(const choir_kokoro *m, choir_phonemizer *ph, const choir_kokoro_voice *v,
                       const char *text, const choir_kokoro_speak_params *params,
                       choir_kokoro_audio_fn on_audio, void *user, choir_err *err) {
    choir_kokoro_speak_params defaults = choir_kokoro_default_speak_params();
    const choir_kokoro_speak_params *sp = params ? params : &defaults;
    if (!m || !ph || !v || !text || !on_audio)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: missing model, phonemizer, voice, text or callback");
    int batch = sp->batch < 1 ? 1 : sp->batch;
    choir_clause_list clauses = {0};
    choir_piece_list pieces = {0};
    int32_t *ids = NULL;
    choir_kokoro_item *items = NULL;
    kk_ws call;
    int rc = kk_call_open(m, sp->synth.arena, &call, err);
    if (rc) return rc;
    if ((rc = choir_phonemize_clauses(ph, text, &clauses, err))) goto done;
    if ((rc = choir_split_pieces(&clauses, CHOIR_KOKORO_MAX_PHONEMES, sp->short_first, &pieces, err)))
        goto done;
    const int stride = CHOIR_KOKORO_MAX_PHONEMES + 2;
    ids = choir_alloc(CHOIR_MEM_IO, (size_t)pieces.n * stride * sizeof *ids + 1);
    items = choir_calloc(CHOIR_MEM_IO, (size_t)(pieces.n ? pieces.n : 1), sizeof *items);
    if (!ids || !items) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for %d pieces", pieces.n);
        goto done;
    }
    int n_items = 0, dropped_total = 0;
    for (int i = 0; i < pieces.n; i++) {
        int dropped = 0;
        int n = choir_kokoro_phonemes_to_ids(m, pieces.items[i].phonemes, ids + (size_t)i * stride,
                                             stride, &dropped, err);
        if (n < 0) {
            rc = n;
            goto done;
        }
        dropped_total += dropped;
        if (n <= 2) continue; /* nothing the model can say */
        items[n_items].ids = ids + (size_t)i * stride;
        items[n_items].n_ids = n;
        items[n_items].style = choir_kokoro_voice_style(v, pieces.items[i].n_phonemes);
        n_items++;
    }
    if (dropped_total)
        CHOIR_LOGW("kokoro: %d phoneme symbol(s) outside the vocabulary dropped", dropped_total);

    /* the first piece alone (it is short), then groups of `batch` */
    for (int first = 0; first < n_items && !rc;) {
        int count = first == 0 ? 1 : (n_items - first < batch ? n_items - first : batch);
        choir_kokoro_params p = sp->synth;
        p.trace = NULL;
        p.seed = sp->synth.seed + (uint64_t)first;
        if ((rc = synthesize_batch_in(m, call.arena ? &call : NULL, items + first, count, &p, err)))
            break;
        for (int k = 0; k < count && !rc; k++) {
            choir_kokoro_item *it = &items[first + k];
            if (on_audio(user, it->audio, it->n_samples, first + k, n_items))
                rc = choir_err_set(err, CHOIR_ECANCELED, "kokoro: stopped by the caller");
        }
        for (int k = 0; k < count; k++) {
            choir_free(items[first + k].audio);
            items[first + k].audio = NULL;
        }
        first += count;
    }
done:
    kk_call_close(&call);
    choir_free(ids);
    choir_free(items);
    choir_piece_list_free(&pieces);
    choir_clause_list_free(&clauses);
    return rc;
}
