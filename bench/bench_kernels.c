/* Kernel throughput at the sizes the models run: linear (Whisper large-v3-turbo
 * d=1280, MLP 5120) for f32/f16/bf16 weights at M=1 (a decoder step) and
 * M=1500 (the encoder), Kokoro-like convolutions, attention, activations, with
 * memcpy bandwidth for scale. Usage: bench_kernels [--quick] [--threads N]
 * [--isa ref|best]. Figures are best-of-N wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/tensor.h"

static int g_reps = 5;

static float *rnd_floats(size_t n, float amp) {
    float *x = choir_alloc(CHOIR_MEM_OTHER, n * sizeof(float));
    if (!x) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    uint32_t s = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        x[i] = amp * ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    return x;
}

/* CPU seconds used by the whole process (all threads). On a shared machine
 * the wall time swings with the load; flops per CPU second (per-core
 * efficiency) stays comparable, so both are printed. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double g_cpu_best; /* CPU seconds of the fastest repetition of the last TIME_BEST */

#define TIME_BEST(best, stmt)                                                                      \
    do {                                                                                           \
        stmt; /* warm-up */                                                                        \
        best = 1e30;                                                                               \
        for (int r_ = 0; r_ < g_reps; r_++) {                                                      \
            double t0_ = choir_now_s(), c0_ = cpu_seconds();                                       \
            stmt;                                                                                  \
            double dt_ = choir_now_s() - t0_, dc_ = cpu_seconds() - c0_;                           \
            if (dt_ < best) best = dt_;                                                            \
            if (r_ == 0 || dc_ < g_cpu_best) g_cpu_best = dc_;                                     \
        }                                                                                          \
    } while (0)

static void bench_linear(int64_t M, int64_t N, int64_t K) {
    float *wf = rnd_floats((size_t)(N * K), 0.05f), *x = rnd_floats((size_t)(M * K), 1.0f);
    float *y = rnd_floats((size_t)(M * N), 0.0f);
    uint16_t *wh = choir_alloc(CHOIR_MEM_OTHER, (size_t)(N * K) * sizeof(uint16_t));
    const char *names[] = {"f32", "f16", "bf16"};
    for (int k = 0; k < 3; k++) {
        choir_weight W = choir_weight_f32(wf, N, K);
        if (k == 1) choir_f32_to_f16_n(wf, wh, N * K), W.kind = CHOIR_WEIGHT_F16, W.data = wh;
        if (k == 2) choir_f32_to_bf16_n(wf, wh, N * K), W.kind = CHOIR_WEIGHT_BF16, W.data = wh;
        double t;
        TIME_BEST(t, choir_linear(x, M, &W, NULL, y));
        double flops = 2.0 * (double)M * (double)N * (double)K;
        printf("linear %-4s M=%-5lld N=%-5lld K=%-5lld %8.3f ms %7.1f GFLOP/s %6.1f per core "
               "%6.1f GB/s weights\n",
               names[k], (long long)M, (long long)N, (long long)K, t * 1e3, flops / t * 1e-9,
               flops / g_cpu_best * 1e-9, (double)choir_weight_bytes(&W) / t * 1e-9);
    }
    choir_free(wf), choir_free(x), choir_free(y), choir_free(wh);
}

static void bench_conv_dil(int64_t Cin, int64_t Cout, int64_t T, int64_t K, int stride,
                           int groups, int dil) {
    int pad = (int)(K / 2) * dil;
    int64_t Tout = choir_conv1d_out_len(T, K, stride, pad, dil);
    float *x = rnd_floats((size_t)(Cin * T), 1.0f),
          *w = rnd_floats((size_t)(Cout * Cin / groups * K), 0.05f);
    float *y = rnd_floats((size_t)(Cout * Tout), 0.0f);
    double t;
    TIME_BEST(t, choir_conv1d(x, Cin, T, w, NULL, Cout, K, stride, pad, dil, groups, y));
    double flops = 2.0 * (double)Cout * (double)Tout * (double)(Cin / groups) * (double)K;
    printf("conv1d Cin=%-4lld Cout=%-4lld T=%-5lld K=%-2lld s=%d g=%-4d d=%d %8.3f ms %7.1f GFLOP/s "
           "%6.1f per core\n",
           (long long)Cin, (long long)Cout, (long long)T, (long long)K, stride, groups, dil,
           t * 1e3, flops / t * 1e-9, flops / g_cpu_best * 1e-9);
    choir_free(x), choir_free(w), choir_free(y);
}

static void bench_conv(int64_t Cin, int64_t Cout, int64_t T, int64_t K, int stride, int groups) {
    bench_conv_dil(Cin, Cout, T, K, stride, groups, 1);
}

static void bench_convt(int64_t Cin, int64_t Cout, int64_t T, int64_t K, int stride) {
    int pad = (int)((K - stride) / 2);
    int64_t Tout = choir_conv_transpose1d_out_len(T, K, stride, pad, 0, 1);
    float *x = rnd_floats((size_t)(Cin * T), 1.0f),
          *w = rnd_floats((size_t)(Cin * Cout * K), 0.05f);
    float *y = rnd_floats((size_t)(Cout * Tout), 0.0f);
    double t;
    TIME_BEST(t, choir_conv_transpose1d(x, Cin, T, w, NULL, Cout, K, stride, pad, 0, 1, 1, y));
    double flops = 2.0 * (double)Cin * (double)Cout * (double)T * (double)K;
    printf(
        "conv_transpose1d Cin=%-4lld Cout=%-4lld T=%-5lld K=%-2lld s=%-2d %8.3f ms %7.1f GFLOP/s "
        "%6.1f per core\n",
        (long long)Cin, (long long)Cout, (long long)T, (long long)K, stride, t * 1e3,
        flops / t * 1e-9, flops / g_cpu_best * 1e-9);
    choir_free(x), choir_free(w), choir_free(y);
}

static void bench_attention(int64_t Tq, int64_t Tk, int H, int64_t Dh, bool causal) {
    int64_t d = H * Dh;
    float *q = rnd_floats((size_t)(Tq * d), 1.0f), *k = rnd_floats((size_t)(Tk * d), 1.0f);
    float *v = rnd_floats((size_t)(Tk * d), 1.0f), *o = rnd_floats((size_t)(Tq * d), 0.0f);
    double t;
    TIME_BEST(t, choir_attention(q, d, k, d, v, d, o, d, Tq, Tk, H, Dh, 0.125f, NULL, causal));
    double flops = 4.0 * (double)Tq * (double)Tk * (double)d;
    printf("attention Tq=%-5lld Tk=%-5lld heads=%-2d Dh=%-3lld %s %8.3f ms %7.1f GFLOP/s "
           "%6.1f per core\n",
           (long long)Tq, (long long)Tk, H, (long long)Dh, causal ? "causal" : "full  ", t * 1e3,
           flops / t * 1e-9, flops / g_cpu_best * 1e-9);
    choir_free(q), choir_free(k), choir_free(v), choir_free(o);
}

/* A decoder step's attention over f16 caches: one query row per layer over
 * `layers` separate caches of Tk rows (together larger than the last-level
 * cache, as in a step), so the figure is the pass over memory a step makes.
 * GB/s counts the keys and values read. */
static void bench_attention_step_f16(int64_t Tk, int H, int64_t Dh, int layers) {
    int64_t d = H * Dh;
    size_t n = (size_t)(Tk * d);
    float *q = rnd_floats((size_t)d, 1.0f), *o = rnd_floats((size_t)d, 0.0f);
    float *src = rnd_floats(n, 1.0f);
    uint16_t *kv = choir_alloc(CHOIR_MEM_OTHER, 2 * (size_t)layers * n * sizeof(uint16_t));
    if (!kv) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < 2 * (size_t)layers; i++) choir_f32_to_f16_n(src, kv + i * n, (int64_t)n);
    double t;
    TIME_BEST(t, for (int l = 0; l < layers; l++) choir_attention_f16(
                     q, d, kv + 2 * (size_t)l * n, d, kv + (2 * (size_t)l + 1) * n, d, o, d, 1,
                     Tk, H, Dh, 0.125f, NULL, false));
    double bytes = 4.0 * (double)n * layers;
    printf("attention step f16 Tk=%-5lld heads=%-2d Dh=%-3lld x%d layers %8.3f ms %6.1f GB/s "
           "(%.3f CPU ms)\n",
           (long long)Tk, H, (long long)Dh, layers, t * 1e3, bytes / t * 1e-9, g_cpu_best * 1e3);
    choir_free(q), choir_free(o), choir_free(src), choir_free(kv);
}

static void bench_elementwise(int64_t n) {
    float *x = rnd_floats((size_t)n, 3.0f), *y = rnd_floats((size_t)n, 0.0f);
    double t;
    TIME_BEST(t, memcpy(y, x, (size_t)n * sizeof(float)));
    printf("memcpy %lld floats %8.3f ms %7.1f GB/s (read + write)\n", (long long)n, t * 1e3,
           2.0 * (double)n * 4 / t * 1e-9);
    struct {
        const char *name;
        void (*fn)(float *, int64_t);
    } ops[] = {
        {"gelu_erf", choir_gelu_erf}, {"gelu_tanh", choir_gelu_tanh}, {"silu", choir_silu},
        {"tanh", choir_tanh},         {"sigmoid", choir_sigmoid},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        TIME_BEST(t, (memcpy(y, x, (size_t)n * sizeof(float)), ops[i].fn(y, n)));
        printf("%-10s %lld floats %8.3f ms %7.2f Gelem/s (incl. copy)\n", ops[i].name, (long long)n,
               t * 1e3, (double)n / t * 1e-9);
    }
    TIME_BEST(t, choir_layer_norm(x, y, n / 1280, 1280, NULL, NULL, 1e-5f));
    printf("layer_norm rows=%lld dim=1280 %8.3f ms\n", (long long)(n / 1280), t * 1e3);
    TIME_BEST(t, (memcpy(y, x, (size_t)n * sizeof(float)), choir_softmax(y, n / 1500, 1500)));
    printf("softmax rows=%lld dim=1500 %8.3f ms (incl. copy)\n", (long long)(n / 1500), t * 1e3);
    choir_free(x), choir_free(y);
}

/* The decoder-step attention passes (--step runs only these). */
static void step_benches(bool quick) {
    bench_attention_step_f16(1500, 12, 64, quick ? 2 : 12); /* Whisper small's cross-attention */
    bench_attention_step_f16(1500, 8, 64, quick ? 2 : 6);   /* base */
    bench_attention_step_f16(1500, 20, 64, quick ? 2 : 4);  /* large-v3-turbo */
}

int main(int argc, char **argv) {
    bool quick = false, kokoro = false, step = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--kokoro"))
            kokoro = true;
        else if (!strcmp(argv[i], "--step"))
            step = true;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            choir_pool_set_default_threads(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            i++;
            choir_kernels_set_isa(!strcmp(argv[i], "ref")      ? CHOIR_ISA_REF
                                  : !strcmp(argv[i], "avx2")   ? CHOIR_ISA_AVX2
                                  : !strcmp(argv[i], "avx512") ? CHOIR_ISA_AVX512
                                                               : choir_kernels_best_isa());
        } else {
            fprintf(stderr, "usage: %s [--quick] [--kokoro] [--step] [--threads N] "
                            "[--isa ref|avx2|avx512|best]\n", argv[0]);
            return 2;
        }
    }
    if (quick) g_reps = 2;
    printf("isa %s, threads %d\n", choir_isa_name(choir_kernels_isa()),
           choir_pool_threads(choir_pool_default()));
    if (step) {
        step_benches(quick);
        return 0;
    }
    if (kokoro) {
        /* Kokoro-82M's convolutions at the paragraph's long piece (1436
         * frames; the generator runs at 2x, 20x and 120x that), frames cut
         * by 8 with --quick: decoder blocks, the generator's two stages of
         * Snake residual blocks (kernels 3/7/11, dilations 1/3/5), conv_post
         * and the two upsamplers. */
        int64_t T = quick ? 180 : 1436;
        bench_conv(1090, 1024, T, 3, 1, 1);
        bench_conv(1024, 1024, T, 3, 1, 1);
        bench_conv_dil(256, 256, 20 * T, 3, 1, 1, 1);
        bench_conv_dil(256, 256, 20 * T, 7, 1, 1, 3);
        bench_conv_dil(256, 256, 20 * T, 11, 1, 1, 5);
        bench_conv_dil(128, 128, 120 * T, 3, 1, 1, 1);
        bench_conv_dil(128, 128, 120 * T, 7, 1, 1, 3);
        bench_conv_dil(128, 128, 120 * T, 11, 1, 1, 5);
        bench_conv(128, 22, 120 * T, 7, 1, 1);
        bench_convt(512, 256, 2 * T, 20, 10);
        bench_convt(256, 128, 20 * T, 12, 6);
        return 0;
    }
    bench_elementwise(quick ? 1 << 20 : 1 << 23);
    bench_linear(1, 1280, 1280);
    bench_linear(1, 5120, 1280);
    bench_linear(4, 5120, 1280);
    bench_linear(quick ? 150 : 1500, 1280, 1280);
    if (!quick) bench_linear(1500, 5120, 1280);
    bench_conv(128, 1280, quick ? 300 : 3000, 3, 1, 1);  /* whisper stem */
    bench_conv(512, 512, quick ? 200 : 1000, 3, 1, 1);   /* kokoro decoder block */
    bench_conv(512, 512, quick ? 200 : 1000, 7, 1, 512); /* depthwise */
    bench_convt(512, 256, quick ? 100 : 500, 20, 10);    /* istftnet upsampler */
    bench_attention(quick ? 150 : 1500, quick ? 150 : 1500, 20, 64, false);
    bench_attention(1, 448, 20, 64, true);
    bench_attention(1, 1500, 20, 64, false);
    step_benches(quick);
    return 0;
}
