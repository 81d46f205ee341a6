/* Kokoro on the CUDA backend (include/choir/kokoro.h, "the CUDA backend"):
 * placement only. A CUDA backend over the caller's context and the model's
 * executor on it (kokoro_exec.c: the network's one implementation over
 * backend operations, every weight uploaded once, the decoder's
 * convolutions bf16 when asked, ALBERT in the checkpoint's storage, one
 * stream grown to the largest call, the backend's lock around each call). */
#include "choir/kokoro.h"

#ifdef CHOIR_HAVE_CUDA

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/log.h"
#include "models/kokoro/kokoro_decoder.h"
#include "models/kokoro/kokoro_front_net.h"

#define KG_FRONT_FLOATS_PER_FRAME 7600
#define KG_CONV_SCRATCH ((int64_t)512 << 20)

struct choir_kokoro_gpu {
    choir_backend *be; /* over the caller's context, not owning it */
    kk_exec *x;
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
    int rc = choir_cuda_make_current(cu, err);
    if (!rc && (!(g->be = choir_backend_cuda_over(cu, gpu_bf16 != 0, err)) ||
                !(g->x = kk_exec_create(m, g->be, false, err))))
        rc = err && err->code ? err->code : CHOIR_ENOMEM;
    if (!rc) rc = choir_cuda_sync(cu, err);
    if (rc) {
        choir_err_prefix(err, "kokoro gpu: uploading the model");
        choir_kokoro_gpu_free(g);
        return NULL;
    }
    CHOIR_LOGI("kokoro gpu: weights %.1f MB on %s (decoder %.1f MB, %s convolutions)",
               (double)kk_exec_weight_bytes(g->x) / 1e6, choir_cuda_get_props(cu)->name,
               (double)kk_exec_dec_weight_bytes(g->x) / 1e6, gpu_bf16 ? "bf16" : "f32");
    return g;
}

void choir_kokoro_gpu_free(choir_kokoro_gpu *g) {
    if (!g) return;
    kk_exec_free(g->x);
    choir_backend_free(g->be);
    choir_free(g);
}

kk_exec *kk_gpu_exec(choir_kokoro_gpu *g) { return g ? g->x : NULL; }

void choir_kokoro_set_gpu(choir_kokoro *m, choir_kokoro_gpu *g) {
    if (m) m->exec = g ? g->x : NULL;
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
    kk_exec_get_stats(g->x, out);
}

void choir_kokoro_gpu_reset_stats(choir_kokoro_gpu *g) { kk_exec_reset_stats(g->x); }

int choir_kokoro_gpu_decode(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                            float **audio, choir_err *err) {
    if (!g) return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: no GPU");
    return kk_exec_decode(g->x, in, n, audio, NULL, NULL, err);
}

#endif /* CHOIR_HAVE_CUDA */
