/* Kokoro on the CUDA backend (include/choir/kokoro.h, "the CUDA backend"):
 * the network's one implementation over backend operations, on a CUDA
 * backend over this object's context. The decoder, the iSTFTNet generator
 * and the F0 / N blocks (kokoro_decoder.c), ALBERT and the six LSTMs
 * (kokoro_front_net.c): weights uploaded once (the decoder's convolutions
 * bf16 when asked; ALBERT in the checkpoint's storage), one stream whose
 * working memory is grown to the largest call seen, one mutex around every
 * call (one CUDA stream, one cuBLAS handle). */
#include "choir/kokoro.h"

#ifdef CHOIR_HAVE_CUDA

#include <pthread.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_decoder.h"
#include "models/kokoro/kokoro_front_net.h"

#define KG_FRONT_FLOATS_PER_FRAME 7600
#define KG_CONV_SCRATCH ((int64_t)512 << 20)

struct choir_kokoro_gpu {
    const choir_kokoro *m;
    choir_cuda *cu;
    int bf16;
    pthread_mutex_t mu;

    choir_backend *be; /* over cu, not owning it */
    kk_dec *dec;       /* decoder, generator, F0 / N blocks on be */
    choir_stream *s;   /* their working memory, grown to the largest batch */
    kk_fnet *front;    /* the front's ALBERT and LSTMs on be */

    choir_kokoro_gpu_stats stats;
};

choir_kokoro_gpu *choir_kokoro_gpu_create(const choir_kokoro *m, choir_cuda *cu, int gpu_bf16,
                                          choir_err *err) {
    if (!m || !cu) {
        choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: missing model or CUDA context");
        return NULL;
    }
    choir_kokoro_gpu *g = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *g);
    if (!g) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
        return NULL;
    }
    g->m = m, g->cu = cu, g->bf16 = gpu_bf16 != 0;
    pthread_mutex_init(&g->mu, NULL);
    int rc = 0;
    if (!(g->be = choir_backend_cuda_over(cu, g->bf16, err)) ||
        !(g->dec = kk_dec_create(m, g->be, err)) || !(g->s = choir_stream_create(g->be, err)) ||
        !(g->front = kk_fnet_create(m, g->be, err)))
        rc = err && err->code ? err->code : CHOIR_ENOMEM;
    if (!rc) rc = choir_cuda_sync(cu, err);
    if (rc) {
        choir_err_prefix(err, "kokoro gpu: uploading the model");
        choir_kokoro_gpu_free(g);
        return NULL;
    }
    g->stats.weight_bytes = kk_dec_weight_bytes(g->dec) + kk_fnet_weight_bytes(g->front);
    CHOIR_LOGI("kokoro gpu: decoder and F0 / N weights %.1f MB on %s (%s convolutions); front "
               "%.1f MB",
               (double)kk_dec_weight_bytes(g->dec) / 1e6, choir_cuda_get_props(cu)->name,
               g->bf16 ? "bf16" : "f32", (double)kk_fnet_weight_bytes(g->front) / 1e6);
    return g;
}

void choir_kokoro_gpu_free(choir_kokoro_gpu *g) {
    if (!g) return;
    choir_stream_free(g->s);
    kk_dec_free(g->dec);
    kk_fnet_free(g->front);
    choir_backend_free(g->be);
    pthread_mutex_destroy(&g->mu);
    choir_free(g);
}

void choir_kokoro_set_gpu(choir_kokoro *m, choir_kokoro_gpu *g) {
    if (m) m->gpu = g;
}

int64_t choir_kokoro_gpu_estimate_bytes(int n, int64_t frames) {
    if (n < 1) n = 1;
    /* convolution taps (context scratch): the widest im2col, 128 channels x 11
     * taps at 120 samples per frame, for as many pieces as fit the 512 MB
     * group cap, and always at least one piece */
    int64_t taps = (frames + 1) * 120 * 128 * 11 * (int64_t)sizeof(float);
    if (taps < KG_CONV_SCRATCH) {
        int64_t per_group = KG_CONV_SCRATCH / taps;
        taps *= per_group < n ? per_group : n;
    }
    /* the front's work buffer, grown to the batched front's largest call:
     * ALBERT ~7.3k floats per id over all pieces' ids (at most one id per
     * frame), the shared LSTM (In + 10 H) = 3.2k floats per frame */
    int64_t front = (int64_t)n * (frames + 1) * KG_FRONT_FLOATS_PER_FRAME * (int64_t)sizeof(float);
    /* the stream serves the decoder and the F0 / N blocks in turn */
    int64_t work = kk_dec_work_bytes(n, frames);
    if (kk_dec_f0n_work_bytes(n, frames) > work) work = kk_dec_f0n_work_bytes(n, frames);
    return work + taps + front;
}

void choir_kokoro_gpu_get_stats(choir_kokoro_gpu *g, choir_kokoro_gpu_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->stats;
    pthread_mutex_unlock(&g->mu);
}

void choir_kokoro_gpu_reset_stats(choir_kokoro_gpu *g) {
    pthread_mutex_lock(&g->mu);
    const int64_t wb = g->stats.weight_bytes;
    memset(&g->stats, 0, sizeof g->stats);
    g->stats.weight_bytes = wb;
    pthread_mutex_unlock(&g->mu);
}

/* The decoder through the backend forward: the stream's working memory
 * grown (never shrunk) to this batch's plan, then one call for all pieces. */
static int decode_locked(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                         float **audio, kk_gpu_trace_fn trace, void *user, choir_err *err) {
    int64_t L = 0;
    for (int i = 0; i < n; i++) L = in[i].frames > L ? in[i].frames : L;
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = choir_stream_reserve(g->s, (size_t)kk_dec_work_bytes(n, L), 0, err);
    for (int i = 0; i < n && !rc; i++) {
        size_t ns = (size_t)in[i].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME;
        if (!(audio[i] = choir_alloc(CHOIR_MEM_IO, ns * sizeof(float))))
            rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of memory for audio");
    }
    kk_dec_stats st = {0};
    if (!rc) rc = kk_dec_run(g->dec, g->s, in, n, audio, trace, user, &st, err);
    if (rc) {
        for (int i = 0; i < n; i++) {
            choir_free(audio[i]);
            audio[i] = NULL;
        }
        return rc;
    }
    g->stats.flops += st.flops;
    g->stats.bytes += st.bytes;
    g->stats.seconds += choir_now_s() - t0;
    g->stats.calls++;
    g->stats.pieces += n;
    CHOIR_LOGD("kokoro gpu: %d pieces, %lld frames padded: working memory %zu of %lld bytes", n,
               (long long)L, choir_stream_high_water(g->s), (long long)kk_dec_work_bytes(n, L));
    return 0;
}

int kk_gpu_decode_traced(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                         float **audio, kk_gpu_trace_fn trace, void *user, choir_err *err) {
    if (!g || (!in && n > 0) || !audio || n < 0)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: bad decode arguments");
    for (int i = 0; i < n; i++) audio[i] = NULL;
    for (int i = 0; i < n; i++)
        if (!in[i].asr || !in[i].f0 || !in[i].n || !in[i].style || in[i].frames < 1 ||
            in[i].frames > 100000)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "kokoro gpu: piece %d: missing input or %lld frames (1..100000)",
                                 i, (long long)in[i].frames);
    if (n == 0) return 0;
    pthread_mutex_lock(&g->mu);
    int rc = decode_locked(g, in, n, audio, trace, user, err);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int choir_kokoro_gpu_decode(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                            float **audio, choir_err *err) {
    return kk_gpu_decode_traced(g, in, n, audio, NULL, NULL, err);
}

/* The F0 / N blocks through the backend forward, one batch for all pieces
 * (padded to the longest, zero tails), on the same stream as the decoder. */
int kk_gpu_f0n_blocks(choir_kokoro_gpu *g, int nb, const float *const *x, const int64_t *L,
                      const float *const *s_pro, float *const *f0, float *const *n,
                      choir_err *err) {
    if (!g || !kk_dec_has_f0n(g->dec)) return 1;
    if (nb < 1) return 0;
    int64_t Lm = 0;
    for (int b = 0; b < nb; b++) Lm = L[b] > Lm ? L[b] : Lm;
    pthread_mutex_lock(&g->mu);
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = choir_stream_reserve(g->s, (size_t)kk_dec_f0n_work_bytes(nb, Lm), 0, err);
    if (!rc) rc = kk_dec_f0n_run(g->dec, g->s, nb, x, L, s_pro, f0, n, err);
    g->stats.f0n_seconds += choir_now_s() - t0;
    g->stats.f0n_calls++;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int kk_gpu_albert(choir_kokoro_gpu *g, int n, const float *const *emb, const int64_t *T,
                  float *const *bert, float *const *d_en, choir_err *err) {
    if (!g || !kk_fnet_has_albert(g->front)) return 1;
    int64_t R = 0;
    for (int b = 0; b < n; b++) R += T[b] > 0 ? T[b] : 0;
    pthread_mutex_lock(&g->mu);
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = choir_stream_reserve(g->s, (size_t)kk_fnet_albert_work_bytes(R), 0, err);
    if (!rc) rc = kk_fnet_albert(g->front, g->s, n, emb, T, bert, d_en, err);
    g->stats.albert_seconds += choir_now_s() - t0;
    g->stats.albert_calls++;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int kk_gpu_bilstm(choir_kokoro_gpu *g, const kk_lstm *l, int n, const float *const *x,
                  const int64_t *T, float *const *y, choir_err *err) {
    if (!g || !kk_fnet_has_lstm(g->front, l)) return 1;
    int64_t Tm = 0;
    for (int b = 0; b < n; b++) Tm = T[b] > Tm ? T[b] : Tm;
    pthread_mutex_lock(&g->mu);
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc)
        rc = choir_stream_reserve(g->s, (size_t)kk_fnet_bilstm_work_bytes(n, Tm, l->in, l->h, false),
                                  0, err);
    if (!rc) rc = kk_fnet_bilstm(g->front, g->s, l, n, x, T, y, err);
    g->stats.lstm_seconds += choir_now_s() - t0;
    g->stats.lstm_calls++;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

#endif /* CHOIR_HAVE_CUDA */
