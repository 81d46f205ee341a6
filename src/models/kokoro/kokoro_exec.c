/* Kokoro's executor: the network's backend forward objects on one backend
 * (kk_fnet: ALBERT and the six BiLSTMs; kk_dec: the decoder, the generator
 * and the F0 / N blocks), one stream for their working memory, and the
 * counters. The network code (kokoro_front_batch.c, kokoro_forward.c,
 * kokoro_tts.c) calls kk_net_*(m, ...) and never asks where it runs: the
 * model's attached executor (choir_kokoro_set_gpu: a CUDA backend) serves
 * every call under the backend's lock, and a model without one gets a CPU
 * executor for the call (nothing uploaded: the CPU weights are the model's
 * own arrays), so concurrent CPU calls share nothing.
 *
 * Grouping is the executor's: on a device a call for n pieces is one
 * batched pass (pieces padded, each within float summation order of its
 * pass alone); on the host the pieces run one by one, which is bit for bit
 * the single-piece computation and costs the same there. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_decoder.h"
#include "models/kokoro/kokoro_front_net.h"

#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda.h"
#endif

struct kk_exec {
    const choir_kokoro *m;
    choir_backend *be;
    bool owns_be;
    kk_dec *dec;     /* made on first use on the host, at create on a device */
    kk_fnet *fnet;
    choir_stream *s; /* working memory of one call at a time */
    choir_kokoro_gpu_stats stats;
};

static int need_dec(kk_exec *x, choir_err *err) {
    if (!x->dec && !(x->dec = kk_dec_create(x->m, x->be, err)))
        return err && err->code ? err->code : CHOIR_ENOMEM;
    return 0;
}

static int need_fnet(kk_exec *x, choir_err *err) {
    if (!x->fnet && !(x->fnet = kk_fnet_create(x->m, x->be, err)))
        return err && err->code ? err->code : CHOIR_ENOMEM;
    return 0;
}

kk_exec *kk_exec_create(const choir_kokoro *m, choir_backend *be, bool owns_be, choir_err *err) {
    kk_exec *x = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *x);
    if (!x) {
        if (owns_be) choir_backend_free(be);
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the executor");
        return NULL;
    }
    x->m = m, x->be = be, x->owns_be = owns_be;
    int rc = (x->s = choir_stream_create(be, err)) ? 0 : (err && err->code ? err->code : CHOIR_ENOMEM);
    /* a device gets every weight now (one upload, counted before serving) */
    if (!rc && !choir_backend_is_host(be)) {
        rc = need_dec(x, err);
        if (!rc) rc = need_fnet(x, err);
    }
    if (rc) {
        kk_exec_free(x);
        return NULL;
    }
    x->stats.weight_bytes = kk_exec_weight_bytes(x);
    return x;
}

void kk_exec_free(kk_exec *x) {
    if (!x) return;
    choir_stream_free(x->s);
    kk_dec_free(x->dec);
    kk_fnet_free(x->fnet);
    if (x->owns_be) choir_backend_free(x->be);
    choir_free(x);
}

int64_t kk_exec_weight_bytes(const kk_exec *x) {
    return x ? kk_dec_weight_bytes(x->dec) + kk_fnet_weight_bytes(x->fnet) : 0;
}
int64_t kk_exec_dec_weight_bytes(const kk_exec *x) { return x ? kk_dec_weight_bytes(x->dec) : 0; }
choir_backend *kk_exec_backend(const kk_exec *x) { return x ? x->be : NULL; }

void kk_exec_get_stats(kk_exec *x, choir_kokoro_gpu_stats *out) {
    choir_backend_lock(x->be);
    *out = x->stats;
    choir_backend_unlock(x->be);
}

void kk_exec_reset_stats(kk_exec *x) {
    choir_backend_lock(x->be);
    const int64_t wb = x->stats.weight_bytes;
    memset(&x->stats, 0, sizeof x->stats);
    x->stats.weight_bytes = wb;
    choir_backend_unlock(x->be);
}

/* One user at a time, on the calling thread's device (a CUDA context is
 * current per thread; engine workers share one). */
static int enter(kk_exec *x, choir_err *err) {
    choir_backend_lock(x->be);
#ifdef CHOIR_HAVE_CUDA
    struct choir_cuda *cu = choir_backend_cuda_context(x->be);
    int rc = cu ? choir_cuda_make_current(cu, err) : 0;
    if (rc) choir_backend_unlock(x->be);
    return rc;
#else
    (void)err;
    return 0;
#endif
}

static void leave(kk_exec *x) { choir_backend_unlock(x->be); }

static bool one_by_one(const kk_exec *x, int n) { return n > 1 && choir_backend_is_host(x->be); }

int kk_exec_albert(kk_exec *x, int n, const float *const *emb, const int64_t *T,
                   float *const *bert, float *const *d_en, choir_err *err) {
    if (n < 1) return 0;
    int rc = enter(x, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t R = 0;
        for (int i = b; i < b + step; i++) R += T[i] > 0 ? T[i] : 0;
        rc = choir_stream_reserve(x->s, (size_t)kk_fnet_albert_work_bytes(R), 0, err);
        if (!rc) rc = kk_fnet_albert(x->fnet, x->s, step, emb + b, T + b, bert + b, d_en + b, err);
    }
    x->stats.albert_seconds += choir_now_s() - t0;
    x->stats.albert_calls++;
    leave(x);
    return rc;
}

int kk_exec_bilstm(kk_exec *x, const kk_lstm *l, int n, const float *const *in, const int64_t *T,
                   float *const *y, choir_err *err) {
    if (n < 1) return 0;
    int rc = enter(x, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    const bool host = choir_backend_is_host(x->be);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t Tm = 0;
        for (int i = b; i < b + step; i++) Tm = T[i] > Tm ? T[i] : Tm;
        rc = choir_stream_reserve(
            x->s, (size_t)kk_fnet_bilstm_work_bytes(step, Tm, l->in, l->h, host), 0, err);
        if (!rc) rc = kk_fnet_bilstm(x->fnet, x->s, l, step, in + b, T + b, y + b, err);
    }
    x->stats.lstm_seconds += choir_now_s() - t0;
    x->stats.lstm_calls++;
    leave(x);
    return rc;
}

int kk_exec_text(kk_exec *x, int n, const int32_t *const *ids, const int64_t *T,
                 float *const *y, choir_err *err) {
    if (n < 1) return 0;
    int rc = enter(x, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t Tm = 0;
        for (int i = b; i < b + step; i++) Tm = T[i] > Tm ? T[i] : Tm;
        rc = choir_stream_reserve(x->s, (size_t)kk_fnet_text_work_bytes(step, Tm), 0, err);
        if (!rc) rc = kk_fnet_text_encoder(x->fnet, x->s, step, ids + b, T + b, y + b, err);
    }
    x->stats.lstm_seconds += choir_now_s() - t0;
    x->stats.lstm_calls++;
    leave(x);
    return rc;
}

int kk_exec_f0n(kk_exec *x, int n, const float *const *in, const int64_t *L,
                const float *const *s_pro, float *const *f0, float *const *n_out, choir_err *err) {
    if (n < 1) return 0;
    int rc = enter(x, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_dec(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t Lm = 0;
        for (int i = b; i < b + step; i++) Lm = L[i] > Lm ? L[i] : Lm;
        rc = choir_stream_reserve(x->s, (size_t)kk_dec_f0n_work_bytes(step, Lm), 0, err);
        if (!rc)
            rc = kk_dec_f0n_run(x->dec, x->s, step, in + b, L + b, s_pro + b, f0 + b, n_out + b,
                                err);
    }
    x->stats.f0n_seconds += choir_now_s() - t0;
    x->stats.f0n_calls++;
    leave(x);
    return rc;
}

int kk_exec_decode(kk_exec *x, const choir_kokoro_decode_input *in, int n, float **audio,
                   kk_dec_trace_fn trace, void *user, choir_err *err) {
    if (!x || (!in && n > 0) || !audio || n < 0)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad decode arguments");
    for (int i = 0; i < n; i++) audio[i] = NULL;
    for (int i = 0; i < n; i++)
        if (!in[i].asr || !in[i].f0 || !in[i].n || !in[i].style || in[i].frames < 1 ||
            in[i].frames > 100000)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "kokoro: piece %d: missing input or %lld frames (1..100000)", i,
                                 (long long)in[i].frames);
    if (n == 0) return 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        size_t ns = (size_t)in[i].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME;
        if (!(audio[i] = choir_alloc(CHOIR_MEM_IO, ns * sizeof(float))))
            rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for audio");
    }
    if (!rc) rc = enter(x, err);
    if (rc) goto fail;
    double t0 = choir_now_s();
    kk_dec_stats st = {0};
    rc = need_dec(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t L = 0;
        for (int i = b; i < b + step; i++) L = in[i].frames > L ? in[i].frames : L;
        rc = choir_stream_reserve(x->s, (size_t)kk_dec_work_bytes(step, L), 0, err);
        if (!rc) rc = kk_dec_run(x->dec, x->s, in + b, step, audio + b, trace, user, &st, err);
    }
    if (!rc) {
        x->stats.flops += st.flops;
        x->stats.bytes += st.bytes;
        x->stats.seconds += choir_now_s() - t0;
        x->stats.calls++;
        x->stats.pieces += n;
        CHOIR_LOGD("kokoro: %d pieces on %s: working memory high water %zu bytes", n,
                   choir_backend_name(x->be), choir_stream_high_water(x->s));
    }
    leave(x);
    if (!rc) return 0;
fail:
    for (int i = 0; i < n; i++) {
        choir_free(audio[i]);
        audio[i] = NULL;
    }
    return rc;
}

/* --- the model's executor ------------------------------------------------------ */

/* m's attached executor, or a CPU one for this call (*own set). */
static kk_exec *acquire(const choir_kokoro *m, bool *own, choir_err *err) {
    *own = false;
    if (m->exec) return m->exec;
    choir_backend *be = choir_backend_cpu(err);
    kk_exec *x = be ? kk_exec_create(m, be, true, err) : NULL;
    if (!x && err && !err->code) choir_err_set(err, CHOIR_ENOMEM, "kokoro: no CPU executor");
    *own = x != NULL;
    return x;
}

static void release(kk_exec *x, bool own) {
    if (own) kk_exec_free(x);
}

bool kk_net_batches(const choir_kokoro *m) {
    return m && m->exec && !choir_backend_is_host(m->exec->be);
}

int kk_net_albert(const choir_kokoro *m, int n, const float *const *emb, const int64_t *T,
                  float *const *bert, float *const *d_en, choir_err *err) {
    bool own;
    kk_exec *x = acquire(m, &own, err);
    int rc = x ? kk_exec_albert(x, n, emb, T, bert, d_en, err) : CHOIR_ENOMEM;
    release(x, own);
    return rc;
}

int kk_net_bilstm(const choir_kokoro *m, const kk_lstm *l, int n, const float *const *in,
                  const int64_t *T, float *const *y, choir_err *err) {
    bool own;
    kk_exec *x = acquire(m, &own, err);
    int rc = x ? kk_exec_bilstm(x, l, n, in, T, y, err) : CHOIR_ENOMEM;
    release(x, own);
    return rc;
}

int kk_net_text(const choir_kokoro *m, int n, const int32_t *const *ids, const int64_t *T,
                float *const *y, choir_err *err) {
    bool own;
    kk_exec *x = acquire(m, &own, err);
    int rc = x ? kk_exec_text(x, n, ids, T, y, err) : CHOIR_ENOMEM;
    release(x, own);
    return rc;
}

int kk_net_f0n(const choir_kokoro *m, int n, const float *const *in, const int64_t *L,
               const float *const *s_pro, float *const *f0, float *const *n_out, choir_err *err) {
    bool own;
    kk_exec *x = acquire(m, &own, err);
    int rc = x ? kk_exec_f0n(x, n, in, L, s_pro, f0, n_out, err) : CHOIR_ENOMEM;
    release(x, own);
    return rc;
}

int kk_net_decode(const choir_kokoro *m, const choir_kokoro_decode_input *in, int n, float **audio,
                  choir_err *err) {
    bool own;
    for (int i = 0; i < n && audio; i++) audio[i] = NULL;
    kk_exec *x = acquire(m, &own, err);
    int rc = x ? kk_exec_decode(x, in, n, audio, NULL, NULL, err) : CHOIR_ENOMEM;
    release(x, own);
    return rc;
}
