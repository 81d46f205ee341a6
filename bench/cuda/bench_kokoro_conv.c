/* Kokoro's generator convolutions on the GPU, the im2col path against the
 * implicit GEMM (choir/cuda_audio.h), in one run: each path and precision at
 * the real shapes of a 40-s piece (1600 frames: stage 0 256 channels over
 * 32000 samples, stage 1 128 channels over 192001), and a Snake unit's
 * convolution as the model ran it (AdaIN, Snake, conv, residual add: four
 * kernels and a tap matrix) against the fused operation. Every output is
 * compared with the f32 im2col result (cuBLAS without TF32) by relative L2.
 * Times are medians of timed repetitions (CUDA events) after a warm-up;
 * TFLOP/s counts 2 per multiply-add, GB/s the least bytes a convolution
 * must move (x read once, y written once, plus the residual).
 *
 * The implicit GEMM runs with the options of choir_cuda_conv_set_options:
 * "implicit"/"fused" the default (128 x 128 tiles, x staged through
 * registers); "wide" 128 x 256 tiles of 8 warps of 64 x 64 (bf16, tf32);
 * for the units also "wide-fs" (wide with Snake's sin by the SFU; bf16,
 * tf32), "prepass" (snake(adain(x)) written once, then the convolution
 * bringing it by cp.async; its time includes the prepass and the
 * statistics), "pre-wide" and "pre-fs" (the prepass with the wide shape /
 * the SFU's sin; bf16, tf32). "x def" is the default's time over the row's.
 *
 * Usage: bench_kokoro_conv [--reps N] [--batch B] [--no-im2col] [--no-variants]
 *                          [--prepass 0|1] [--prepass-mb MB] [--units]
 *   --no-im2col:   the im2col path only as the reference (not timed; for
 *                  large batches, where its tap matrices take most of the run)
 *   --no-variants: no wide shape and no SFU sin (the default, and the
 *                  prepass unless --prepass 0)
 *   --prepass 0|1: without / with (the default) the prepass rows
 *   --prepass-mb:  the prepass's group bytes (choir_cuda_conv_set_prepass_bytes)
 *   --units:       the Snake units' fused convolutions only */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/cuda_audio.h"
#include "choir/tensor.h"

static choir_cuda *g_cu;
static int g_reps = 10;
static bool g_im2col = true, g_variants = true, g_prepass = true, g_units_only = false;

static void check(int rc, const choir_err *err, const char *what) {
    if (rc) {
        fprintf(stderr, "bench: %s: %s\n", what, err->msg);
        exit(1);
    }
}

static uint64_t g_rng = 88172645463325252ull;
static float rnd(float lo, float hi) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 11) & 0xFFFFFF) / 16777216.0f;
}

static void *dev_alloc(size_t bytes) {
    choir_err err = {0};
    choir_cuda_buf b;
    check(choir_cuda_buf_alloc(g_cu, bytes, &b, &err), &err, "alloc");
    return b.ptr;
}

static void dev_free(void *p, size_t bytes) {
    choir_cuda_buf b = {p, bytes};
    choir_cuda_buf_free(g_cu, &b);
}

static void upload(void *dst, const void *src, size_t bytes) {
    choir_err err = {0};
    choir_cuda_buf b = {dst, bytes};
    check(choir_cuda_upload(g_cu, &b, 0, src, bytes, &err), &err, "upload");
}

/* n random floats on the device: at most 2^24 drawn, repeated past that (a
 * batch of 32 stage-1 pieces has 786M values; drawing them all on the host
 * took seconds per buffer). */
static float *dev_random(int64_t n, float lo, float hi) {
    const int64_t m = n < ((int64_t)1 << 24) ? n : ((int64_t)1 << 24);
    float *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)m * sizeof(float));
    for (int64_t i = 0; i < m; i++) h[i] = rnd(lo, hi);
    float *d = dev_alloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i += m) upload(d + i, h, (size_t)(n - i < m ? n - i : m) * sizeof(float));
    choir_free(h);
    return d;
}

/* Over the first 2^26 values at most (a batch of 32 stage-1 pieces has
 * 786M: their download and sum would take seconds per row). */
static double rel_l2_dev(const float *a, const float *ref, int64_t n) {
    choir_err err = {0};
    if (n > ((int64_t)1 << 26)) n = (int64_t)1 << 26;
    float *ha = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * 4), *hr = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * 4);
    choir_cuda_buf ba = {(void *)a, (size_t)n * 4}, br = {(void *)ref, (size_t)n * 4};
    check(choir_cuda_download(g_cu, ha, &ba, 0, (size_t)n * 4, &err), &err, "download");
    check(choir_cuda_download(g_cu, hr, &br, 0, (size_t)n * 4, &err), &err, "download");
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ha[i])) {
            num = INFINITY;
            break;
        }
        double d = (double)ha[i] - hr[i];
        num += d * d;
        den += (double)hr[i] * hr[i];
    }
    choir_free(ha);
    choir_free(hr);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One convolution setup: weights in f32 and bf16, x, y buffers. */
typedef struct shape {
    const char *stage;
    int64_t B, C, T;
    int K, dil;
} shape;

typedef struct bufs {
    float *x, *w32, *bias, *y, *ref, *res, *tmp;
    uint16_t *w16;
    float *nw, *nb, *gb, *alpha;
    int32_t *lens;
} bufs;

typedef int (*conv_fn)(const shape *sh, const bufs *b, bool bf16, choir_err *err);

static int plain_conv(const shape *sh, const bufs *b, bool bf16, choir_err *err) {
    choir_cuda_conv_weight w = {bf16 ? (const void *)b->w16 : (const void *)b->w32, bf16};
    int pad = (sh->K - 1) * sh->dil / 2;
    return choir_cuda_conv1d_batched(g_cu, b->x, sh->B, sh->C, sh->T, w, b->bias, sh->C, sh->K, 1,
                                     pad, sh->dil, b->lens, b->y, err);
}

/* The unit's second convolution as the model ran it before: AdaIN into a
 * temporary, Snake, the convolution, the residual added. */
static int unit_unfused(const shape *sh, const bufs *b, bool bf16, choir_err *err) {
    choir_cuda_conv_weight w = {bf16 ? (const void *)b->w16 : (const void *)b->w32, bf16};
    int pad = (sh->K - 1) * sh->dil / 2;
    int rc = choir_cuda_adain(g_cu, b->x, b->tmp, sh->B, sh->C, sh->T, b->lens, b->nw, b->nb, b->gb,
                              2 * sh->C, 1e-5f, err);
    if (!rc) rc = choir_cuda_snake(g_cu, b->tmp, sh->B, sh->C, sh->T, b->alpha, err);
    if (!rc)
        rc = choir_cuda_conv1d_batched(g_cu, b->tmp, sh->B, sh->C, sh->T, w, b->bias, sh->C, sh->K,
                                       1, pad, sh->dil, b->lens, b->y, err);
    if (!rc)
        rc = choir_cuda_add_scale(g_cu, b->res, b->y, b->y, sh->B * sh->C * sh->T, 1.0f, err);
    return rc;
}

static int unit_fused(const shape *sh, const bufs *b, bool bf16, choir_err *err) {
    choir_cuda_conv_weight w = {bf16 ? (const void *)b->w16 : (const void *)b->w32, bf16};
    int pad = (sh->K - 1) * sh->dil / 2;
    choir_cuda_adain_snake p = {b->lens, b->nw, b->nb, b->gb, 2 * sh->C, 1e-5f, b->alpha, NULL};
    return choir_cuda_conv1d_adain_snake(g_cu, b->x, sh->B, sh->C, sh->T, &p, w, b->bias, sh->C,
                                         sh->K, pad, sh->dil, b->lens, b->res, b->y, err);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of fn over g_reps timed runs after one warm-up; -1 on failure. */
static double time_ms(conv_fn fn, const shape *sh, const bufs *b, bool bf16) {
    choir_err err = {0};
    if (fn(sh, b, bf16, &err) || choir_cuda_sync(g_cu, &err)) {
        printf("    failed: %s\n", err.msg);
        return -1;
    }
    double t[64];
    int n = g_reps < 64 ? g_reps : 64;
    for (int i = 0; i < n; i++) {
        choir_cuda_timer *tm = choir_cuda_timer_begin(g_cu, &err);
        fn(sh, b, bf16, &err);
        t[i] = choir_cuda_timer_end_ms(tm, &err);
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
}

static void set_mode(int path, bool tf32) {
    choir_err err = {0};
    choir_cuda_conv_set_path(g_cu, (choir_cuda_conv_path)path);
    check(choir_cuda_set_tf32(g_cu, tf32, &err), &err, "tf32");
}

/* The reference: f32 im2col, unfused (for units) or plain. */
static void reference(conv_fn fn, const shape *sh, bufs *b) {
    choir_err err = {0};
    set_mode(CHOIR_CUDA_CONV_IM2COL, false);
    check(fn(sh, b, false, &err), &err, "reference");
    int64_t n = sh->B * sh->C * sh->T;
    check(choir_cuda_copy(g_cu, b->ref, b->y, (size_t)n * 4, &err), &err, "copy");
    check(choir_cuda_sync(g_cu, &err), &err, "sync");
}

static void run_shape(const shape *sh, bool unit) {
    const int64_t n = sh->B * sh->C * sh->T, nw = sh->C * sh->C * sh->K;
    bufs b;
    memset(&b, 0, sizeof b);
    float bound = 1.0f / sqrtf((float)(sh->C * sh->K));
    b.x = dev_random(n, -1, 1);
    b.w32 = dev_random(nw, -bound, bound);
    {
        float *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)nw * 4);
        uint16_t *h16 = choir_alloc(CHOIR_MEM_OTHER, (size_t)nw * 2);
        choir_err err = {0};
        choir_cuda_buf bw = {b.w32, (size_t)nw * 4};
        check(choir_cuda_download(g_cu, h, &bw, 0, (size_t)nw * 4, &err), &err, "download");
        for (int64_t i = 0; i < nw; i++) h16[i] = choir_f32_to_bf16(h[i]);
        b.w16 = dev_alloc((size_t)nw * 2);
        upload(b.w16, h16, (size_t)nw * 2);
        choir_free(h);
        choir_free(h16);
    }
    b.bias = dev_random(sh->C, -0.5f, 0.5f);
    b.y = dev_alloc((size_t)n * 4);
    b.ref = dev_alloc((size_t)n * 4);
    b.res = dev_random(n, -1, 1);
    b.tmp = dev_alloc((size_t)n * 4);
    b.nw = dev_random(sh->C, 0.5f, 1.5f);
    b.nb = dev_random(sh->C, -0.3f, 0.3f);
    b.gb = dev_random(sh->B * 2 * sh->C, -0.5f, 0.5f);
    b.alpha = dev_random(sh->C, 0.3f, 3.0f);
    {
        int32_t *hl = choir_alloc(CHOIR_MEM_OTHER, (size_t)sh->B * 4);
        for (int64_t i = 0; i < sh->B; i++) hl[i] = (int32_t)sh->T;
        b.lens = dev_alloc((size_t)sh->B * 4);
        upload(b.lens, hl, (size_t)sh->B * 4);
        choir_free(hl);
    }
    const double flop = 2.0 * sh->B * sh->C * (double)sh->C * sh->K * sh->T;
    const double bytes = (unit ? 3.0 : 2.0) * 4.0 * n;
    conv_fn old = unit ? unit_unfused : plain_conv, neu = unit ? unit_fused : plain_conv;
    /* the residual is rewritten by neither version (y is its own buffer) */
    reference(old, sh, &b);
    static const char *prec[] = {"f32", "tf32", "bf16"};
    /* impl 0: im2col (or the unfused unit); 1 on: the implicit GEMM with
     * these options (variant: a wide shape or the SFU's sin; unit: the fused
     * unit only; fast: bf16 and tf32 only) */
    static const struct {
        const char *label[2];
        unsigned opts;
        bool variant, unit, fast;
    } impls[] = {
        {{"im2col", "4-kernel"}, 0, false, false, false},
        {{"implicit", "fused"}, 0, false, false, false},
        {{"wide", "wide"}, CHOIR_CUDA_CONV_WIDE, true, false, false},
        {{"", "wide-fs"}, CHOIR_CUDA_CONV_WIDE | CHOIR_CUDA_CONV_FAST_SIN, true, true, true},
        {{"", "prepass"}, CHOIR_CUDA_CONV_PREPASS, false, true, false},
        {{"", "pre-wide"}, CHOIR_CUDA_CONV_PREPASS | CHOIR_CUDA_CONV_WIDE, true, true, true},
        {{"", "pre-fs"}, CHOIR_CUDA_CONV_PREPASS | CHOIR_CUDA_CONV_FAST_SIN, true, true, true},
    };
    double def_ms[3] = {0, 0, 0};
    for (int impl = 0; impl < (int)(sizeof impls / sizeof impls[0]); impl++) {
        if ((impl == 0 && !g_im2col) || (impls[impl].variant && !g_variants) ||
            (impls[impl].unit && !unit) ||
            ((impls[impl].opts & CHOIR_CUDA_CONV_PREPASS) && !g_prepass))
            continue;
        for (int p = 0; p < 3; p++) {
            if ((impls[impl].fast || impls[impl].opts == CHOIR_CUDA_CONV_WIDE) && p == 0) continue;
            set_mode(impl ? CHOIR_CUDA_CONV_AUTO : CHOIR_CUDA_CONV_IM2COL, p == 1);
            choir_cuda_conv_set_options(g_cu, impls[impl].opts);
            double ms = time_ms(impl ? neu : old, sh, &b, p == 2);
            double err = ms > 0 ? rel_l2_dev(b.y, b.ref, n) : NAN;
            if (impl == 1) def_ms[p] = ms;
            printf("%-7s %-6s B%-3lld C%-4lld T%-7lld k%-2d d%d %-5s %-9s %8.3f ms %7.1f TFLOP/s "
                   "%6.0f GB/s  rel_l2 %.2e",
                   sh->stage, unit ? "unit" : "conv", (long long)sh->B, (long long)sh->C,
                   (long long)sh->T, sh->K, sh->dil, prec[p], impls[impl].label[unit], ms,
                   flop / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9, err);
            if (impl >= 2 && def_ms[p] > 0 && ms > 0) printf("  x def %.2f", def_ms[p] / ms);
            printf("\n");
            fflush(stdout);
        }
    }
    choir_cuda_conv_set_options(g_cu, 0);
    set_mode(CHOIR_CUDA_CONV_AUTO, false);
    dev_free(b.x, n * 4), dev_free(b.w32, nw * 4), dev_free(b.w16, nw * 2);
    dev_free(b.bias, sh->C * 4), dev_free(b.y, n * 4), dev_free(b.ref, n * 4);
    dev_free(b.res, n * 4), dev_free(b.tmp, n * 4), dev_free(b.nw, sh->C * 4);
    dev_free(b.nb, sh->C * 4), dev_free(b.gb, sh->B * 2 * sh->C * 4), dev_free(b.alpha, sh->C * 4);
    dev_free(b.lens, sh->B * 4);
}

int main(int argc, char **argv) {
    int64_t batch = 1, prepass_mb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--no-im2col"))
            g_im2col = false;
        else if (!strcmp(argv[i], "--no-variants"))
            g_variants = false;
        else if (!strcmp(argv[i], "--prepass") && i + 1 < argc)
            g_prepass = atoi(argv[++i]) != 0;
        else if (!strcmp(argv[i], "--prepass-mb") && i + 1 < argc)
            prepass_mb = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--units"))
            g_units_only = true;
        else {
            fprintf(stderr, "usage: bench_kokoro_conv [--reps N] [--batch B] [--no-im2col] "
                            "[--no-variants] [--prepass 0|1] [--prepass-mb MB] [--units]\n");
            return 2;
        }
    }
    if (choir_cuda_device_count() < 1) {
        printf("bench_kokoro_conv: no CUDA device\n");
        return 77;
    }
    choir_err err = {0};
    g_cu = choir_cuda_init(0, &err);
    if (!g_cu) check(1, &err, "init");
    choir_cuda_conv_set_prepass_bytes(g_cu, prepass_mb << 20);
    printf("bench_kokoro_conv on %s, %d repetitions, batch %lld%s\n",
           choir_cuda_get_props(g_cu)->name, g_reps, (long long)batch,
           prepass_mb > 0 ? ", prepass groups of a set size" : "");
    const shape shapes[] = {
        {"stage1", batch, 128, 192001, 3, 1}, {"stage1", batch, 128, 192001, 7, 3},
        {"stage1", batch, 128, 192001, 11, 5}, {"stage1", batch, 128, 192001, 11, 1},
        {"stage0", batch, 256, 32000, 3, 1},  {"stage0", batch, 256, 32000, 11, 5},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && !g_units_only; i++)
        run_shape(&shapes[i], false);
    /* the model's Snake-unit convolutions (fused AdaIN + Snake, residual) */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (i != 3) run_shape(&shapes[i], true);
    choir_cuda_free(g_cu);
    return 0;
}
