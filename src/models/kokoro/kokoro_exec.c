/* Kokoro's executor: the network's backend forward objects on one backend
 * (kk_fnet: ALBERT and the six BiLSTMs; kk_dec: the decoder, the generator
 * and the F0 / N blocks), one stream for their working memory, and the
 * counters. The network code (kokoro_front_batch.c, kokoro_forward.c,
 * kokoro_tts.c) calls kk_net_*(m, call, ...) and never asks where it runs:
 * the model's attached executor (choir_kokoro_set_gpu: a CUDA backend)
 * serves every call under the backend's lock, and a model without one runs
 * on its host executor (made at load; nothing uploaded: the CPU weights are
 * the model's own arrays), which is read-only, so concurrent CPU calls
 * share nothing but the weights: each stage runs on the call's stream (over
 * its batch arena, the stage's kernel scratch carved there and given back)
 * or, without one, on a stream of its own reserved for the stage.
 *
 * Grouping is the executor's: on a device a call for n pieces is one
 * batched pass (pieces padded, each within float summation order of its
 * pass alone); on the host the pieces run one by one, which is bit for bit
 * the single-piece computation and costs the same there. */
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
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
    kk_dec *dec;
    kk_fnet *fnet;
    choir_stream *s; /* a device's working memory, one call at a time */
    choir_kokoro_gpu_stats stats; /* a device's (the host executor keeps none) */
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
    /* every weight now (on a device one upload, counted before serving; on
     * the host the objects are made before threads share them) */
    if (!rc) {
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

/* Where one network call runs: a device's stream under its lock; on the
 * host the call's stream over its batch arena (nothing reserved, the
 * stage's kernel scratch carved from the arena and given back at the end),
 * or a stream made for the stage (its memory from the counted allocator). */
typedef struct kk_stage {
    kk_exec *x;
    choir_stream *s;
    choir_arena *a; /* the call's arena, when s is the call's stream */
    size_t mark;
    bool device;
} kk_stage;

static int stage_begin(kk_exec *x, const kk_ws *call, size_t scratch, kk_stage *st,
                       choir_err *err) {
    *st = (kk_stage){.x = x};
    if (!choir_backend_is_host(x->be)) {
        int rc = enter(x, err);
        if (!rc) st->device = true, st->s = x->s;
        return rc;
    }
    if (call && call->s) {
        st->s = call->s, st->a = call->arena, st->mark = choir_arena_mark(call->arena);
        /* never 0: that would leave the previous stage's scratch bound */
        int rc = choir_stream_use_arena(st->s, st->a, scratch > 256 ? scratch : 256, err);
        if (rc) st->s = NULL;
        return rc;
    }
    if (!(st->s = choir_stream_create(x->be, err))) return CHOIR_ENOMEM;
    return 0;
}

/* The stage's working memory: the call's arena has it already. */
static int stage_reserve(kk_stage *st, int64_t work_bytes, choir_err *err) {
    return st->a ? 0 : choir_stream_reserve(st->s, (size_t)work_bytes, 0, err);
}

static void stage_end(kk_stage *st) {
    if (st->device) {
        leave(st->x);
    } else if (st->a) {
        if (st->s) choir_stream_use_arena(st->s, NULL, 0, NULL); /* unbinds the scratch */
        choir_arena_release(st->a, st->mark);
    } else {
        choir_stream_free(st->s);
    }
}

int kk_exec_albert(kk_exec *x, int n, const float *const *emb, const int64_t *T,
                   float *const *bert, float *const *d_en, choir_err *err) {
    return kk_exec_albert_in(x, NULL, n, emb, T, bert, d_en, err);
}

int kk_exec_albert_in(kk_exec *x, const kk_ws *call, int n, const float *const *emb,
                      const int64_t *T, float *const *bert, float *const *d_en, choir_err *err) {
    if (n < 1) return 0;
    int64_t Tm = 0;
    for (int i = 0; i < n; i++) Tm = T[i] > Tm ? T[i] : Tm;
    kk_stage st;
    int rc = stage_begin(x, call, kk_host_scratch_bytes(Tm, 0), &st, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t R = 0;
        for (int i = b; i < b + step; i++) R += T[i] > 0 ? T[i] : 0;
        rc = stage_reserve(&st, kk_fnet_albert_work_bytes(R), err);
        if (!rc) rc = kk_fnet_albert(x->fnet, st.s, step, emb + b, T + b, bert + b, d_en + b, err);
    }
    if (st.device) x->stats.albert_seconds += choir_now_s() - t0, x->stats.albert_calls++;
    stage_end(&st);
    return rc;
}

int kk_exec_bilstm(kk_exec *x, const kk_lstm *l, int n, const float *const *in, const int64_t *T,
                   float *const *y, choir_err *err) {
    return kk_exec_bilstm_in(x, NULL, l, n, in, T, y, err);
}

int kk_exec_bilstm_in(kk_exec *x, const kk_ws *call, const kk_lstm *l, int n,
                      const float *const *in, const int64_t *T, float *const *y, choir_err *err) {
    if (n < 1) return 0;
    int64_t Tall = 0;
    for (int i = 0; i < n; i++) Tall = T[i] > Tall ? T[i] : Tall;
    kk_stage st;
    int rc = stage_begin(x, call, kk_host_scratch_bytes(0, Tall), &st, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    const bool host = choir_backend_is_host(x->be);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t Tm = 0;
        for (int i = b; i < b + step; i++) Tm = T[i] > Tm ? T[i] : Tm;
        rc = stage_reserve(&st, kk_fnet_bilstm_work_bytes(step, Tm, l->in, l->h, host), err);
        if (!rc) rc = kk_fnet_bilstm(x->fnet, st.s, l, step, in + b, T + b, y + b, err);
    }
    if (st.device) x->stats.lstm_seconds += choir_now_s() - t0, x->stats.lstm_calls++;
    stage_end(&st);
    return rc;
}

int kk_exec_text(kk_exec *x, int n, const int32_t *const *ids, const int64_t *T,
                 float *const *y, choir_err *err) {
    return kk_exec_text_in(x, NULL, n, ids, T, y, err);
}

int kk_exec_text_in(kk_exec *x, const kk_ws *call, int n, const int32_t *const *ids,
                    const int64_t *T, float *const *y, choir_err *err) {
    if (n < 1) return 0;
    int64_t Tall = 0;
    for (int i = 0; i < n; i++) Tall = T[i] > Tall ? T[i] : Tall;
    kk_stage st;
    int rc = stage_begin(x, call, kk_host_scratch_bytes(Tall, 0), &st, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t Tm = 0;
        for (int i = b; i < b + step; i++) Tm = T[i] > Tm ? T[i] : Tm;
        rc = stage_reserve(&st, kk_fnet_text_work_bytes(step, Tm), err);
        if (!rc) rc = kk_fnet_text_encoder(x->fnet, st.s, step, ids + b, T + b, y + b, err);
    }
    if (st.device) x->stats.lstm_seconds += choir_now_s() - t0, x->stats.lstm_calls++;
    stage_end(&st);
    return rc;
}

int kk_exec_duration(kk_exec *x, int n, float *const *d, const int64_t *T,
                     const float *const *norm_gb, float *const *y, choir_err *err) {
    if (n < 1) return 0;
    if (choir_backend_is_host(x->be))
        return choir_err_set(err, CHOIR_EINVAL,
                             "kokoro: the duration encoder in one call needs a device");
    int64_t Tm = 0;
    for (int i = 0; i < n; i++) Tm = T[i] > Tm ? T[i] : Tm;
    kk_stage st;
    int rc = stage_begin(x, NULL, 0, &st, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_fnet(x, err);
    if (!rc) rc = stage_reserve(&st, kk_fnet_duration_work_bytes(n, Tm), err);
    if (!rc) rc = kk_fnet_duration(x->fnet, st.s, n, d, T, norm_gb, y, err);
    x->stats.lstm_seconds += choir_now_s() - t0, x->stats.lstm_calls++;
    stage_end(&st);
    return rc;
}

int kk_exec_f0n(kk_exec *x, int n, const float *const *in, const int64_t *L,
                const float *const *s_pro, float *const *f0, float *const *n_out, choir_err *err) {
    return kk_exec_f0n_in(x, NULL, n, in, L, s_pro, f0, n_out, err);
}

int kk_exec_f0n_in(kk_exec *x, const kk_ws *call, int n, const float *const *in,
                   const int64_t *L, const float *const *s_pro, float *const *f0,
                   float *const *n_out, choir_err *err) {
    if (n < 1) return 0;
    int64_t Lall = 0;
    for (int i = 0; i < n; i++) Lall = L[i] > Lall ? L[i] : Lall;
    kk_stage st;
    int rc = stage_begin(x, call, kk_host_scratch_bytes(0, Lall), &st, err);
    if (rc) return rc;
    double t0 = choir_now_s();
    rc = need_dec(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t Lm = 0;
        for (int i = b; i < b + step; i++) Lm = L[i] > Lm ? L[i] : Lm;
        rc = stage_reserve(&st, kk_dec_f0n_work_bytes(step, Lm), err);
        if (!rc)
            rc = kk_dec_f0n_run(x->dec, st.s, step, in + b, L + b, s_pro + b, f0 + b, n_out + b,
                                err);
    }
    if (st.device) x->stats.f0n_seconds += choir_now_s() - t0, x->stats.f0n_calls++;
    stage_end(&st);
    return rc;
}

/* The LSTM's input [n, Lm, 640] in backend memory, gathered there from the
 * pieces' duration-encoder rows d[b] [T[b], 640] (host, stacked and uploaded)
 * by their durations: frame j of piece b is the row of the id it falls in
 * (kokoro_front_batch.c's alignment, without its copy of en). Frames past a
 * piece's length repeat its first row (the LSTM does not read them). */
static int gather_frames(choir_stream *s, int n, const float *const *d, const int64_t *T,
                         const int32_t *const *dur, const int64_t *L, int64_t Lm, float *xd) {
    const int64_t C = KK_HIDDEN + KK_STYLE;
    int64_t R = 0;
    for (int b = 0; b < n; b++) R += T[b];
    float *rows = choir_stream_floats(s, R * C, "kokoro duration rows"); /* [R, 640] */
    int32_t *idx = choir_stream_alloc(s, (size_t)(n * Lm) * sizeof(int32_t), "kokoro frame rows");
    int32_t *idx_host = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n * Lm) * sizeof(int32_t));
    int rc = choir_stream_status(s, NULL);
    if (!rc && !idx_host) rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory");
    if (rc) {
        choir_free(idx_host);
        return rc;
    }
    for (int64_t b = 0, r = 0; b < n; r += T[b], b++) {
        choir_op_upload(s, rows + r * C, d[b], (size_t)(T[b] * C) * sizeof(float));
        int32_t *ib = idx_host + b * Lm;
        int64_t j = 0;
        for (int64_t t = 0; t < T[b]; t++)
            for (int32_t k = 0; k < dur[b][t] && j < L[b]; k++) ib[j++] = (int32_t)(r + t);
        if (j != L[b]) {
            choir_free(idx_host);
            return choir_stream_fail(s, CHOIR_EINVAL, "kokoro: piece %d: durations sum to %lld, not %lld",
                                     (int)b, (long long)j, (long long)L[b]);
        }
        for (; j < Lm; j++) ib[j] = (int32_t)r;
    }
    choir_op_upload(s, idx, idx_host, (size_t)(n * Lm) * sizeof(int32_t));
    choir_free(idx_host); /* the upload is synchronous */
    const choir_weight table = choir_weight_f32(rows, R, C);
    return choir_op_rows_gather(s, &table, idx, n * Lm, xd);
}

int kk_exec_shared_f0n(kk_exec *x, int n, const float *const *en, const int64_t *L,
                       const float *const *s_pro, float *const *f0, float *const *n_out,
                       choir_err *err) {
    return kk_exec_shared_f0n_rows(x, n, en, NULL, NULL, L, s_pro, f0, n_out, err);
}

int kk_exec_shared_f0n_rows(kk_exec *x, int n, const float *const *en, const int64_t *T,
                            const int32_t *const *dur, const int64_t *L,
                            const float *const *s_pro, float *const *f0, float *const *n_out,
                            choir_err *err) {
    if (n < 1) return 0;
    if (choir_backend_is_host(x->be))
        return choir_err_set(err, CHOIR_EINVAL,
                             "kokoro: the shared LSTM and the F0 / N blocks in one call need a device");
    const kk_lstm *l = &x->m->shared;
    if (2 * l->h != KK_HIDDEN)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: a shared LSTM of %d units", l->h);
    int64_t Lm = 0;
    for (int i = 0; i < n; i++) Lm = L[i] > Lm ? L[i] : Lm;
    kk_stage st;
    int rc = stage_begin(x, NULL, 0, &st, err);
    if (rc) return rc;
    double t0 = choir_now_s(), t1 = t0;
    rc = need_fnet(x, err);
    if (!rc) rc = need_dec(x, err);
    /* the LSTM's output [n, Lm, 512] and its transpose [n, 512, Lm] stay;
     * gathered frames: its input [n, Lm, 640] too, and the rows and map */
    int64_t kept = 2 * (int64_t)n * Lm * KK_HIDDEN * (int64_t)sizeof(float) + 4096;
    if (dur) {
        int64_t R = 0;
        for (int i = 0; i < n; i++) R += T[i];
        kept += ((int64_t)n * Lm * (KK_HIDDEN + KK_STYLE + 1) + R * (KK_HIDDEN + KK_STYLE)) *
                    (int64_t)sizeof(float) + 8192;
    }
    if (!rc)
        rc = stage_reserve(&st, kept + kk_fnet_bilstm_work_bytes(n, Lm, l->in, l->h, false) +
                                    kk_dec_f0n_work_bytes(n, Lm), err);
    size_t mark = rc ? 0 : choir_stream_mark(st.s);
    float *y = rc ? NULL : choir_stream_floats(st.s, n * Lm * KK_HIDDEN, "kokoro shared LSTM output");
    float *xc = rc ? NULL : choir_stream_floats(st.s, n * KK_HIDDEN * Lm, "kokoro F0 / N input");
    float *xd = rc || !dur ? NULL
                           : choir_stream_floats(st.s, n * Lm * (KK_HIDDEN + KK_STYLE),
                                                 "kokoro shared LSTM input"); /* [n, Lm, 640] */
    if (!rc) rc = choir_stream_status(st.s, err);
    if (!rc && dur) {
        gather_frames(st.s, n, en, T, dur, L, Lm, xd);
        rc = choir_stream_status(st.s, err);
        if (!rc) rc = kk_fnet_bilstm_dev(x->fnet, st.s, l, n, xd, L, Lm, y, err);
    } else if (!rc) {
        rc = kk_fnet_bilstm_keep(x->fnet, st.s, l, n, en, L, Lm, y, err);
    }
    t1 = choir_now_s();
    if (!rc) {
        /* channels first; the LSTM's zero rows past a piece's length become
         * its zero columns, the padding the blocks' convolutions read */
        for (int64_t b = 0; b < n; b++)
            choir_op_transpose(st.s, y + b * Lm * KK_HIDDEN, Lm, KK_HIDDEN, NULL,
                               xc + b * KK_HIDDEN * Lm);
        rc = kk_dec_f0n_run_dev(x->dec, st.s, n, xc, Lm, L, s_pro, f0, n_out, err);
    }
    if (st.s && y) {
        if (rc) choir_stream_clear(st.s);
        choir_stream_release(st.s, mark);
    }
    x->stats.lstm_seconds += t1 - t0, x->stats.lstm_calls++;
    x->stats.f0n_seconds += choir_now_s() - t1, x->stats.f0n_calls++;
    stage_end(&st);
    return rc;
}

int kk_exec_decode(kk_exec *x, const choir_kokoro_decode_input *in, int n, float **audio,
                   kk_dec_trace_fn trace, void *user, choir_err *err) {
    return kk_exec_decode_in(x, NULL, in, n, audio, trace, user, err);
}

int kk_exec_decode_in(kk_exec *x, const kk_ws *call, const choir_kokoro_decode_input *in, int n,
                      float **audio, kk_dec_trace_fn trace, void *user, choir_err *err) {
    if (!x || (!in && n > 0) || !audio || n < 0)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad decode arguments");
    for (int i = 0; i < n; i++) audio[i] = NULL;
    int64_t Lall = 0;
    for (int i = 0; i < n; i++) {
        if (!in[i].asr || !in[i].f0 || !in[i].n || !in[i].style || in[i].frames < 1 ||
            in[i].frames > 100000)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "kokoro: piece %d: missing input or %lld frames (1..100000)", i,
                                 (long long)in[i].frames);
        Lall = in[i].frames > Lall ? in[i].frames : Lall;
    }
    if (n == 0) return 0;
    int rc = 0;
    /* the audio is the caller's output: the counted allocator, not the arena */
    for (int i = 0; i < n && !rc; i++) {
        size_t ns = (size_t)in[i].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME;
        if (!(audio[i] = choir_alloc(CHOIR_MEM_IO, ns * sizeof(float))))
            rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for audio");
    }
    kk_stage st = {0};
    if (!rc) rc = stage_begin(x, call, kk_host_scratch_bytes(0, Lall), &st, err);
    if (rc) goto fail;
    double t0 = choir_now_s();
    kk_dec_stats ds = {0};
    rc = need_dec(x, err);
    const int step = one_by_one(x, n) ? 1 : n;
    for (int b = 0; b < n && !rc; b += step) {
        int64_t L = 0;
        for (int i = b; i < b + step; i++) L = in[i].frames > L ? in[i].frames : L;
        rc = stage_reserve(&st, kk_dec_work_bytes(step, L), err);
        if (!rc) rc = kk_dec_run(x->dec, st.s, in + b, step, audio + b, trace, user, &ds, err);
    }
    if (!rc) {
        if (st.device) {
            x->stats.flops += ds.flops;
            x->stats.bytes += ds.bytes;
            x->stats.seconds += choir_now_s() - t0;
            x->stats.calls++;
            x->stats.pieces += n;
        }
        CHOIR_LOGD("kokoro: %d pieces on %s: working memory high water %zu bytes", n,
                   choir_backend_name(x->be), choir_stream_high_water(st.s));
    }
    stage_end(&st);
    if (!rc) return 0;
fail:
    for (int i = 0; i < n; i++) {
        choir_free(audio[i]);
        audio[i] = NULL;
    }
    return rc;
}

/* --- kernel scratch of a host stage ------------------------------------------ */

size_t kk_host_scratch_bytes(int64_t ids, int64_t frames) {
    const int64_t steps = ids > frames ? ids : frames;
    /* convolutions: the widest im2col is a decoder block's conv1 over
     * [x ; asr_res ; F0 ; N] (1090 channels x 3 taps); the generator's run
     * at up to 120 L + 1 samples, the text encoder's at the ids */
    const int64_t conv_len = frames > 0 ? 120 * frames + 1 : ids;
    size_t need = choir_conv1d_scratch_bytes(1090, conv_len, 3, 1, 1, 1, 1), s;
    if (frames > 0) {
        s = choir_conv_transpose1d_scratch_bytes(512, 2 * frames, 256, 20, 1);
        need = s > need ? s : need;
        s = choir_conv_transpose1d_scratch_bytes(256, 20 * frames, 128, 12, 1);
        need = s > need ? s : need;
    }
    /* an LSTM's gates (H 256 in every Kokoro LSTM) */
    s = (size_t)(4 * 256 * (steps + 1)) * sizeof(float);
    need = s > need ? s : need;
    if (ids > 0) {
        /* ALBERT: attention scores; its linears in bf16 (row blocks) or
         * quantized (group sums and permuted inputs, at the smallest group) */
        s = choir_attention_scratch_bytes(ids, ids);
        need = s > need ? s : need;
        const int64_t shapes[2][2] = {{KK_BERT_FF, KK_BERT}, {KK_BERT, KK_BERT_FF}};
        for (int i = 0; i < 2; i++) {
            choir_weight w = {.kind = CHOIR_WEIGHT_BF16, .rows = shapes[i][0], .cols = shapes[i][1]};
            s = choir_linear_scratch_bytes(ids, &w);
            need = s > need ? s : need;
            s = (size_t)(ids * (shapes[i][1] + shapes[i][1] / 32)) * sizeof(float) + 2 * CHOIR_ALIGN;
            need = s > need ? s : need;
        }
    }
    return need + 4 * CHOIR_ALIGN;
}

/* --- the call's memory -------------------------------------------------------- */

int kk_call_open(const choir_kokoro *m, choir_arena *arena, kk_ws *call, choir_err *err) {
    memset(call, 0, sizeof *call);
    /* a device keeps its own memory (the arena is not used there yet) */
    if (!arena || kk_net_batches(m)) return 0;
    call->arena = arena;
    call->base = choir_arena_mark(arena);
    if (!(call->s = choir_stream_create(m->host->be, err))) return CHOIR_ENOMEM;
    return 0;
}

void kk_call_close(kk_ws *call) {
    if (!call || !call->arena) return;
    choir_stream_free(call->s);
    choir_arena_release(call->arena, call->base);
    memset(call, 0, sizeof *call);
}

/* --- the model's executor ------------------------------------------------------ */

/* m's attached executor, else its host one. */
static kk_exec *executor(const choir_kokoro *m, choir_err *err) {
    kk_exec *x = m->exec ? m->exec : m->host;
    if (!x) choir_err_set(err, CHOIR_EINVAL, "kokoro: the model has no executor");
    return x;
}

bool kk_net_batches(const choir_kokoro *m) {
    return m && m->exec && !choir_backend_is_host(m->exec->be);
}

int kk_net_albert(const choir_kokoro *m, const kk_ws *call, int n, const float *const *emb,
                  const int64_t *T, float *const *bert, float *const *d_en, choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_albert_in(x, call, n, emb, T, bert, d_en, err) : CHOIR_EINVAL;
}

int kk_net_bilstm(const choir_kokoro *m, const kk_ws *call, const kk_lstm *l, int n,
                  const float *const *in, const int64_t *T, float *const *y, choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_bilstm_in(x, call, l, n, in, T, y, err) : CHOIR_EINVAL;
}

int kk_net_text(const choir_kokoro *m, const kk_ws *call, int n, const int32_t *const *ids,
                const int64_t *T, float *const *y, choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_text_in(x, call, n, ids, T, y, err) : CHOIR_EINVAL;
}

int kk_net_f0n(const choir_kokoro *m, const kk_ws *call, int n, const float *const *in,
               const int64_t *L, const float *const *s_pro, float *const *f0, float *const *n_out,
               choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_f0n_in(x, call, n, in, L, s_pro, f0, n_out, err) : CHOIR_EINVAL;
}

bool kk_net_front_on_device(const choir_kokoro *m) {
    /* On unless "0": ran on an H100 on 7 Dec 2026 (the kokoro check passing;
     * the batched front of 32 pieces 465 -> 157 ms with the persistent LSTM). */
    const char *v = getenv("CHOIR_KOKORO_FRONT_DEVICE");
    return kk_net_batches(m) && !(v && strcmp(v, "0") == 0);
}

int kk_net_shared_f0n_rows(const choir_kokoro *m, int n, const float *const *d, const int64_t *T,
                           const int32_t *const *dur, const int64_t *L, const float *const *s_pro,
                           float *const *f0, float *const *n_out, choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_shared_f0n_rows(x, n, d, T, dur, L, s_pro, f0, n_out, err) : CHOIR_EINVAL;
}

int kk_net_duration(const choir_kokoro *m, int n, float *const *d, const int64_t *T,
                    const float *const *norm_gb, float *const *y, choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_duration(x, n, d, T, norm_gb, y, err) : CHOIR_EINVAL;
}

bool kk_net_keeps_frames(const choir_kokoro *m) {
    return kk_net_batches(m) && kk_switch_on("CHOIR_KOKORO_SHARED_F0N");
}

int kk_net_shared_f0n(const choir_kokoro *m, int n, const float *const *en, const int64_t *L,
                      const float *const *s_pro, float *const *f0, float *const *n_out,
                      choir_err *err) {
    kk_exec *x = executor(m, err);
    return x ? kk_exec_shared_f0n(x, n, en, L, s_pro, f0, n_out, err) : CHOIR_EINVAL;
}

int kk_net_decode(const choir_kokoro *m, const kk_ws *call, const choir_kokoro_decode_input *in,
                  int n, float **audio, choir_err *err) {
    for (int i = 0; i < n && audio; i++) audio[i] = NULL;
    kk_exec *x = executor(m, err);
    return x ? kk_exec_decode_in(x, call, in, n, audio, NULL, NULL, err) : CHOIR_EINVAL;
}
