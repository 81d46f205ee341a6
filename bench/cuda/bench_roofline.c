/* The CUDA backend against the card's measured ceilings.
 *
 * Measures, in one run: a large bf16 matmul through cuBLAS (TFLOP/s ceiling)
 * and a device-to-device copy (GB/s ceiling, bytes read plus written); then
 * choir's linear layers at Whisper large-v3-turbo sizes (d 1280, MLP 5120,
 * vocabulary 51866) in every weight storage, one and eight rows (the GEMV
 * path of a decoder step) and 1500 rows (an encoder window, cuBLAS), and the
 * attention, layer-norm and conv1d kernels at encoder and decoder sizes, and
 * the fused bf16 attention over encoder windows (per window, both tilings).
 * Each figure is the mean over timed repetitions after warm-ups, from CUDA
 * events on the context's stream.
 *
 * Usage: bench_cuda_roofline [--quick] [--attention] [--decode-linears]   (quick: fewer
 *        repetitions; attention: the ceilings and the attention lines only;
 *        decode-linears: the ceilings and the 7B VibeVoice-ASR language model's
 *        decode-step linears at 1..32 rows through each linear path) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/tensor.h"

static choir_cuda *g_cu;
static int g_reps = 20;
static double g_tflops_ceiling, g_gbs_ceiling;

static void check(int rc, const choir_err *err, const char *what) {
    if (rc) {
        fprintf(stderr, "bench: %s: %s\n", what, err->msg);
        exit(1);
    }
}

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static float rnd(void) { return (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f - 0.5f; }

static void *dev_random(size_t bytes, int as_bf16) {
    choir_err err = {0};
    choir_cuda_buf b;
    check(choir_cuda_buf_alloc(g_cu, bytes, &b, &err), &err, "alloc");
    size_t n = as_bf16 ? bytes / 2 : bytes / 4;
    void *h = choir_alloc(CHOIR_MEM_OTHER, bytes);
    for (size_t i = 0; i < n; i++) {
        if (as_bf16) ((uint16_t *)h)[i] = choir_f32_to_bf16(rnd());
        else ((float *)h)[i] = rnd();
    }
    check(choir_cuda_upload(g_cu, &b, 0, h, bytes, &err), &err, "upload");
    choir_free(h);
    return b.ptr; /* the bench keeps its buffers until exit */
}

typedef void (*bench_fn)(void *ctx);

/* Mean milliseconds per call over g_reps calls, after 3 warm-up calls. */
static double time_ms(bench_fn fn, void *ctx, int reps) {
    cudaStream_t s = (cudaStream_t)choir_cuda_stream(g_cu);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) fn(ctx);
    cudaEventRecord(a, s);
    for (int i = 0; i < reps; i++) fn(ctx);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    choir_err err = {0};
    check(choir_cuda_sync(g_cu, &err), &err, "sync");
    return ms / reps;
}

/* --- ceilings ------------------------------------------------------------ */

/* The library measures them (choir_cuda_measure_ceilings), so that every
 * bench states its figures against the same roofline. */
static void ceilings(void) {
    choir_err err = {0};
    check(choir_cuda_measure_ceilings(g_cu, &g_tflops_ceiling, &g_gbs_ceiling, &err), &err,
          "ceilings");
    printf("ceiling  bf16 matmul 8192x8192x8192 (cuBLAS, f32 accumulate): %.1f TFLOP/s\n",
           g_tflops_ceiling);
    printf("ceiling  device-to-device copy of 2 GiB: %.0f GB/s (read + written)\n", g_gbs_ceiling);
}

/* --- linear layers --------------------------------------------------------- */

typedef struct linear_ctx {
    const float *x;
    int64_t M;
    const choir_cuda_weight *W;
    float *y;
} linear_ctx;
static void run_linear(void *p) {
    linear_ctx *l = p;
    choir_err err = {0};
    check(choir_cuda_linear(g_cu, l->x, l->M, l->W, NULL, l->y, &err), &err, "linear");
}

typedef struct kind_spec {
    const char *name;
    choir_weight_kind kind;
    int bits;
} kind_spec;

static void make_weight(const kind_spec *ks, int64_t rows, int64_t cols, choir_cuda_weight *out) {
    choir_err err = {0};
    choir_weight w = {.kind = ks->kind, .rows = rows, .cols = cols};
    void *data = NULL, *sc = NULL, *bi = NULL;
    if (ks->kind == CHOIR_WEIGHT_QUANT) {
        int64_t words = rows * cols / 32 * ks->bits, groups = rows * cols / 64;
        data = choir_alloc(CHOIR_MEM_OTHER, words * 4);
        for (int64_t i = 0; i < words; i++) ((uint32_t *)data)[i] = rnd_u32();
        sc = choir_alloc(CHOIR_MEM_OTHER, groups * 2);
        bi = choir_alloc(CHOIR_MEM_OTHER, groups * 2);
        for (int64_t i = 0; i < groups; i++) {
            ((uint16_t *)sc)[i] = choir_f32_to_bf16(0.01f + 0.01f * rnd());
            ((uint16_t *)bi)[i] = choir_f32_to_bf16(0.1f * rnd());
        }
        w.scales = sc, w.biases = bi, w.sb_dtype = CHOIR_DTYPE_BF16, w.bits = ks->bits;
        w.group_size = 64;
    } else {
        size_t es = ks->kind == CHOIR_WEIGHT_F32 ? 4 : 2;
        data = choir_alloc(CHOIR_MEM_OTHER, rows * cols * es);
        for (int64_t i = 0; i < rows * cols; i++) {
            float v = rnd() * 0.1f;
            if (es == 4) ((float *)data)[i] = v;
            else if (ks->kind == CHOIR_WEIGHT_F16) ((uint16_t *)data)[i] = choir_f32_to_f16(v);
            else ((uint16_t *)data)[i] = choir_f32_to_bf16(v);
        }
    }
    w.data = data;
    check(choir_cuda_weight_upload(g_cu, &w, out, &err), &err, "weight upload");
    choir_free(data), choir_free(sc), choir_free(bi);
}

static void linears(void) {
    static const kind_spec kinds[] = {{"f32", CHOIR_WEIGHT_F32, 0},
                                      {"bf16", CHOIR_WEIGHT_BF16, 0},
                                      {"f16", CHOIR_WEIGHT_F16, 0},
                                      {"q8 g64", CHOIR_WEIGHT_QUANT, 8},
                                      {"q4 g64", CHOIR_WEIGHT_QUANT, 4}};
    static const struct { const char *what; int64_t rows, cols; } shapes[] = {
        {"attn q/k/v/o 1280x1280", 1280, 1280},
        {"mlp fc1 5120x1280", 5120, 1280},
        {"mlp fc2 1280x5120", 1280, 5120},
        {"logits 51866x1280", 51866, 1280},
    };
    static const int64_t Ms[] = {1, 8, 1500};
    float *x = dev_random(1500 * 5120 * 4, 0), *y = dev_random(1500 * 51866 * 4, 0);
    printf("\nlinear (whisper large-v3-turbo sizes); GEMV rows report GB/s of weight+x+y "
           "against the copy ceiling, 1500-row products TFLOP/s against the matmul ceiling\n");
    printf("%-24s %-7s %5s %10s %10s %8s\n", "shape", "weight", "M", "us", "figure", "of peak");
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (size_t ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++) {
            choir_cuda_weight W;
            make_weight(&kinds[ki], shapes[si].rows, shapes[si].cols, &W);
            for (size_t mi = 0; mi < sizeof(Ms) / sizeof(Ms[0]); mi++) {
                int64_t M = Ms[mi];
                if (M == 1500 && shapes[si].rows > 5120) continue; /* logits only per token */
                linear_ctx l = {x, M, &W, y};
                double ms = time_ms(run_linear, &l, M == 1500 ? g_reps / 2 + 1 : g_reps * 5);
                double us = ms * 1e3;
                if (M <= 8) {
                    double bytes = (double)choir_cuda_weight_bytes(&W) +
                                   4.0 * M * (shapes[si].rows + shapes[si].cols);
                    double gbs = bytes / (ms * 1e-3) / 1e9;
                    printf("%-24s %-7s %5lld %10.2f %7.0f GB/s %6.1f%%\n", shapes[si].what,
                           kinds[ki].name, (long long)M, us, gbs, 100.0 * gbs / g_gbs_ceiling);
                } else {
                    double tf = 2.0 * M * shapes[si].rows * shapes[si].cols / (ms * 1e-3) / 1e12;
                    printf("%-24s %-7s %5lld %10.2f %5.1f TFLOP/s %5.1f%%\n", shapes[si].what,
                           kinds[ki].name, (long long)M, us, tf, 100.0 * tf / g_tflops_ceiling);
                }
            }
            choir_cuda_weight_free(g_cu, &W);
        }
}

/* --- the decode step's linears at few rows ------------------------------------------ */

/* The linears of one decode step of the 7B VibeVoice-ASR language model
 * (Qwen2: d 3584, MLP 18944, 4 key heads of 128, vocabulary 152064; bf16):
 * 28 layers of q (with bias), k, v (bias), o, gate, up, down, then the LM
 * head, 14.1 GB. Four distinct layers are cycled (1.9 GB: no layer's weights
 * are still in L2 when it comes round again), filled by device copies of one
 * random block. For each row count M, the step through each path of
 * choir_cuda_linear (GEMV up to 8 rows, the skinny tensor-core kernel,
 * cuBLAS) and through the automatic choice: median of 7 steps after one
 * warm-up. Then, per shape, the time inside a step (events around each
 * call) for the automatic path at one row and the skinny kernel and cuBLAS
 * at 8 and 32 rows. */
enum { DL_LAYERS = 28, DL_COPIES = 4, DL_SHAPES = 8 };
static const struct { const char *what; int64_t rows, cols; int bias; } dl_shapes[DL_SHAPES] = {
    {"q 3584x3584", 3584, 3584, 1},         {"k 512x3584", 512, 3584, 1},
    {"v 512x3584", 512, 3584, 1},           {"o 3584x3584", 3584, 3584, 0},
    {"gate 18944x3584", 18944, 3584, 0},    {"up 18944x3584", 18944, 3584, 0},
    {"down 3584x18944", 3584, 18944, 0},    {"lm_head 152064x3584", 152064, 3584, 0},
};
static choir_cuda_weight g_dl_w[DL_COPIES][DL_SHAPES];
static float *g_dl_bias, *g_dl_x, *g_dl_y;

static void dl_make(void) {
    choir_err err = {0};
    size_t block = 64u << 20;
    const void *src = dev_random(block, 1);
    for (int c = 0; c < DL_COPIES; c++)
        for (int si = 0; si < DL_SHAPES; si++) {
            if (si == DL_SHAPES - 1 && c > 0) continue; /* one LM head */
            choir_cuda_weight *w = &g_dl_w[c][si];
            memset(w, 0, sizeof *w);
            w->kind = CHOIR_WEIGHT_BF16, w->rows = dl_shapes[si].rows, w->cols = dl_shapes[si].cols;
            size_t bytes = (size_t)(w->rows * w->cols) * 2;
            check(choir_cuda_buf_alloc(g_cu, bytes, &w->data, &err), &err, "alloc weight");
            for (size_t off = 0; off < bytes; off += block) {
                size_t n = bytes - off < block ? bytes - off : block;
                if (cudaMemcpyAsync((char *)w->data.ptr + off, src, n, cudaMemcpyDeviceToDevice,
                                    (cudaStream_t)choir_cuda_stream(g_cu)) != cudaSuccess) {
                    fprintf(stderr, "bench: weight fill failed\n");
                    exit(1);
                }
            }
        }
    g_dl_bias = dev_random(18944 * 4, 0);
    g_dl_x = dev_random((size_t)32 * 18944 * 4, 0);
    g_dl_y = dev_random((size_t)32 * 152064 * 4, 0);
    check(choir_cuda_sync(g_cu, &err), &err, "fill");
}

static void dl_call(int64_t M, int layer, int si) {
    choir_err err = {0};
    const choir_cuda_weight *w = &g_dl_w[si == DL_SHAPES - 1 ? 0 : layer % DL_COPIES][si];
    check(choir_cuda_linear(g_cu, g_dl_x, M, w, dl_shapes[si].bias ? g_dl_bias : NULL, g_dl_y, &err),
          &err, "linear");
}

static void dl_step(void *p) {
    int64_t M = *(const int64_t *)p;
    for (int l = 0; l < DL_LAYERS; l++)
        for (int si = 0; si < DL_SHAPES - 1; si++) dl_call(M, l, si);
    dl_call(M, 0, DL_SHAPES - 1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double dl_median_ms(int64_t M) {
    cudaStream_t s = (cudaStream_t)choir_cuda_stream(g_cu);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    double t[7];
    dl_step(&M);
    for (int i = 0; i < 7; i++) {
        cudaEventRecord(a, s);
        dl_step(&M);
        cudaEventRecord(b, s);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t[i] = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    choir_err err = {0};
    check(choir_cuda_sync(g_cu, &err), &err, "sync");
    qsort(t, 7, sizeof t[0], cmp_double);
    return t[3];
}

static const char *path_name(choir_cuda_linear_path p) {
    return p == CHOIR_CUDA_LINEAR_GEMV     ? "gemv"
           : p == CHOIR_CUDA_LINEAR_SKINNY ? "skinny"
           : p == CHOIR_CUDA_LINEAR_BLAS   ? "cublas"
                                           : "auto";
}

static void decode_linears(void) {
    dl_make();
    double bytes = 0;
    for (int si = 0; si < DL_SHAPES; si++)
        bytes += (si == DL_SHAPES - 1 ? 1.0 : DL_LAYERS) * dl_shapes[si].rows * dl_shapes[si].cols * 2;
    double bound = bytes / (g_gbs_ceiling * 1e9) * 1e3;
    printf("\ndecode-step linears of the 7B language model: %.2f GB of bf16 weights a step, bound %.3f ms "
           "at the copy ceiling; ms per step (median of 7), per path\n", bytes / 1e9, bound);
    printf("%4s %9s %9s %9s %9s  %s\n", "M", "gemv", "skinny", "cublas", "auto", "auto path");
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 28, 32};
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        int64_t M = Ms[mi];
        double ms[4] = {0};
        for (int p = CHOIR_CUDA_LINEAR_GEMV; p <= CHOIR_CUDA_LINEAR_BLAS + 1; p++) {
            choir_cuda_linear_path path = p > CHOIR_CUDA_LINEAR_BLAS ? CHOIR_CUDA_LINEAR_AUTO
                                                                     : (choir_cuda_linear_path)p;
            if (path == CHOIR_CUDA_LINEAR_GEMV && M > 8) continue;
            choir_cuda_linear_force(path);
            ms[p - 1] = dl_median_ms(M);
        }
        choir_cuda_linear_force(CHOIR_CUDA_LINEAR_AUTO);
        char g[16] = "-";
        if (M <= 8) snprintf(g, sizeof g, "%.3f", ms[0]);
        printf("%4lld %9s %9.3f %9.3f %9.3f  %s\n", (long long)M, g, ms[1], ms[2], ms[3],
               path_name(choir_cuda_linear_path_for(M, &g_dl_w[0][0])));
        printf("choir decode_linears M=%lld gemv_ms=%s skinny_ms=%.3f cublas_ms=%.3f auto_ms=%.3f "
               "bound_ms=%.3f\n", (long long)M, g, ms[1], ms[2], ms[3], bound);
        fflush(stdout);
    }
    /* Per shape inside a step, for the automatic path and the two others
     * at a few row counts. */
    static const struct { int64_t M; choir_cuda_linear_path p; } Ps[] = {
        {1, CHOIR_CUDA_LINEAR_AUTO},    {8, CHOIR_CUDA_LINEAR_SKINNY}, {8, CHOIR_CUDA_LINEAR_BLAS},
        {32, CHOIR_CUDA_LINEAR_SKINNY}, {32, CHOIR_CUDA_LINEAR_BLAS},
    };
    enum { NP = sizeof Ps / sizeof Ps[0] };
    cudaStream_t s = (cudaStream_t)choir_cuda_stream(g_cu);
    cudaEvent_t ev[2 * (DL_LAYERS * (DL_SHAPES - 1) + 1)];
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) cudaEventCreate(&ev[i]);
    printf("\nper shape inside a step (events around each call): us per call, GB/s of weights\n");
    printf("%-20s", "shape");
    for (int pi = 0; pi < NP; pi++) {
        char h[32];
        snprintf(h, sizeof h, "M=%lld %s", (long long)Ps[pi].M,
                 path_name(Ps[pi].p == CHOIR_CUDA_LINEAR_AUTO
                               ? choir_cuda_linear_path_for(Ps[pi].M, &g_dl_w[0][0])
                               : Ps[pi].p));
        printf(" %16s", h);
    }
    printf("\n");
    double us[NP][DL_SHAPES] = {{0}};
    for (int pi = 0; pi < NP; pi++) {
        int64_t M = Ps[pi].M;
        choir_cuda_linear_force(Ps[pi].p);
        dl_step(&M);
        int e = 0;
        for (int l = 0; l < DL_LAYERS; l++)
            for (int si = 0; si < DL_SHAPES - 1; si++) {
                cudaEventRecord(ev[e++], s);
                dl_call(M, l, si);
                cudaEventRecord(ev[e++], s);
            }
        cudaEventRecord(ev[e++], s);
        dl_call(M, 0, DL_SHAPES - 1);
        cudaEventRecord(ev[e++], s);
        cudaEventSynchronize(ev[e - 1]);
        e = 0;
        for (int l = 0; l < DL_LAYERS; l++)
            for (int si = 0; si < DL_SHAPES - 1; si++, e += 2) {
                float t = 0;
                cudaEventElapsedTime(&t, ev[e], ev[e + 1]);
                us[pi][si] += 1e3 * t / DL_LAYERS;
            }
        float t = 0;
        cudaEventElapsedTime(&t, ev[e], ev[e + 1]);
        us[pi][DL_SHAPES - 1] = 1e3 * t;
    }
    choir_cuda_linear_force(CHOIR_CUDA_LINEAR_AUTO);
    for (int si = 0; si < DL_SHAPES; si++) {
        printf("%-20s", dl_shapes[si].what);
        for (int pi = 0; pi < NP; pi++)
            printf(" %7.2f %4.0f GB/s", us[pi][si],
                   dl_shapes[si].rows * dl_shapes[si].cols * 2.0 / (us[pi][si] * 1e-6) / 1e9);
        printf("\n");
    }
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) cudaEventDestroy(ev[i]);
}

/* --- other kernels ----------------------------------------------------------- */

typedef struct attn_ctx {
    int64_t B, Tq, Tk, Dh;
    int heads;
    const float *q, *k, *v;
    const int32_t *kv_len;
    float *out;
} attn_ctx;
static void run_attn_encoder(void *p) {
    attn_ctx *a = p;
    choir_err err = {0};
    int64_t d = a->heads * a->Dh;
    check(choir_cuda_attention(g_cu, a->q, d, a->k, d, a->v, d, a->out, d, a->Tq, a->Tk, a->heads,
                               a->Dh, 0.125f, NULL, false, &err),
          &err, "attention");
}
static void run_attn_decoder(void *p) {
    attn_ctx *a = p;
    choir_err err = {0};
    int64_t d = a->heads * a->Dh;
    check(choir_cuda_attention_batched(g_cu, a->B, a->q, d, d, a->k, d, a->v, d, a->Tk * d,
                                       a->kv_len, a->out, d, d, 1, a->Tk, a->heads, a->Dh, 0.125f,
                                       false, &err),
          &err, "batched attention");
}

typedef struct flash_ctx {
    int64_t B, T;
    int heads;
    const uint16_t *q, *k, *v;
    uint16_t *out;
} flash_ctx;
static void run_flash(void *p) {
    flash_ctx *a = p;
    choir_err err = {0};
    int64_t d = a->heads * 64;
    check(choir_cuda_attention_bf16(g_cu, a->B, a->q, d, a->T * d, a->k, d, a->v, d, a->T * d,
                                    a->out, d, a->T * d, a->T, a->T, a->heads, 0, 64, 0.125f,
                                    false, &err),
          &err, "bf16 attention");
}

/* The fused bf16 attention over encoder windows (one, and 32 in one call),
 * each kernel and tiling (choir_cuda_attention_bf16_set_kernel): ms per
 * window and the share of the matmul ceiling. */
static void flash(void) {
    int heads = 20;
    int64_t d = heads * 64, T = 1500;
    static const int64_t Bs[] = {1, 32};
    static const struct {
        int kernel, rows;
        const char *name;
    } ks[] = {{1, 16, "kernel 1, 4 warps x 16 rows"},
              {1, 32, "kernel 1, 4 warps x 32 rows"},
              {2, 32, "kernel 2, 4 warps x 32 rows"},
              {3, 32, "kernel 2, 8 warps x 32 rows"},
              {4, 32, "kernel 2, 8 warps x 16 rows"}};
    for (size_t i = 0; i < 2; i++) {
        int64_t B = Bs[i], n = B * T * d * 2;
        flash_ctx a = {B, T, heads, dev_random(n, 1), dev_random(n, 1), dev_random(n, 1),
                       dev_random(n, 1)};
        for (size_t r = 0; r < sizeof ks / sizeof ks[0]; r++) {
            choir_cuda_attention_bf16_set_kernel(ks[r].kernel);
            choir_cuda_attention_bf16_set_rows(ks[r].rows);
            double ms = time_ms(run_flash, &a, B == 1 ? g_reps * 5 : g_reps) / (double)B;
            double flops = 4.0 * T * T * d, tf = flops / (ms * 1e-3) / 1e12;
            printf("attention bf16 fused, %2lld window(s) per call, %s: %.3f ms per window, "
                   "%.1f TFLOP/s (%.1f%% of the bf16 ceiling)\n",
                   (long long)B, ks[r].name, ms, tf, 100.0 * tf / g_tflops_ceiling);
        }
        choir_cuda_attention_bf16_set_kernel(0);
        choir_cuda_attention_bf16_set_rows(32);
    }
}

typedef struct misc_ctx {
    const float *x, *w;
    float *y;
    int64_t a, b, c;
    int stride;
} misc_ctx;
static void run_ln(void *p) {
    misc_ctx *m = p;
    choir_err err = {0};
    check(choir_cuda_layer_norm(g_cu, m->x, m->y, m->a, m->b, m->w, m->w, 1e-5f, &err), &err, "ln");
}
static void run_conv(void *p) {
    misc_ctx *m = p;
    choir_err err = {0};
    check(choir_cuda_conv1d(g_cu, m->x, m->a, m->b, m->w, NULL, m->c, 3, m->stride, 1, 1, 1, m->y, &err),
          &err, "conv1d");
}

/* The f32 attention of an encoder window (scores through cuBLAS). */
static void attn_f32_encoder(void) {
    int heads = 20;
    int64_t Dh = 64, d = heads * Dh, T = 1500;
    attn_ctx a = {1, T, T, Dh, heads, dev_random(T * d * 4, 0), dev_random(T * d * 4, 0),
                  dev_random(T * d * 4, 0), NULL, dev_random(T * d * 4, 0)};
    double ms = time_ms(run_attn_encoder, &a, g_reps / 2 + 1);
    double flops = 4.0 * T * T * d;
    printf("\nattention encoder window Tq=Tk=1500, 20 heads x 64: %.3f ms, %.1f TFLOP/s (%.1f%%)\n", ms,
           flops / (ms * 1e-3) / 1e12, 100.0 * flops / (ms * 1e-3) / 1e12 / g_tflops_ceiling);
}

static void kernels(void) {
    int heads = 20;
    int64_t Dh = 64, d = heads * Dh, T = 1500;
    double ms;
    attn_f32_encoder();
    static const int64_t Bs[] = {1, 8, 32};
    for (size_t i = 0; i < 3; i++) {
        int64_t B = Bs[i], Tk = 448;
        int32_t lens[32];
        for (int j = 0; j < 32; j++) lens[j] = (int32_t)Tk;
        choir_err err = {0};
        choir_cuda_buf lb;
        check(choir_cuda_buf_alloc(g_cu, sizeof(lens), &lb, &err), &err, "alloc");
        check(choir_cuda_upload(g_cu, &lb, 0, lens, sizeof(lens), &err), &err, "upload");
        attn_ctx dc = {B, 1, Tk, Dh, heads, dev_random(B * d * 4, 0), dev_random(B * Tk * d * 4, 0),
                       dev_random(B * Tk * d * 4, 0), lb.ptr, dev_random(B * d * 4, 0)};
        ms = time_ms(run_attn_decoder, &dc, g_reps * 5);
        double gbs = 2.0 * B * Tk * d * 4 / (ms * 1e-3) / 1e9;
        printf("attention decoder step B=%-2lld kv 448 (f32 cache): %.1f us, %.0f GB/s of KV (%.1f%%)\n",
               (long long)B, ms * 1e3, gbs, 100.0 * gbs / g_gbs_ceiling);
    }
    misc_ctx ln = {dev_random(T * d * 4, 0), dev_random(d * 4, 0), dev_random(T * d * 4, 0), T, d, 0, 1};
    ms = time_ms(run_ln, &ln, g_reps * 2);
    printf("layer_norm 1500x1280: %.1f us, %.0f GB/s\n", ms * 1e3,
           2.0 * T * d * 4 / (ms * 1e-3) / 1e9);
    misc_ctx c1 = {dev_random(128 * 3000 * 4, 0), dev_random(1280 * 128 * 3 * 4, 0),
                   dev_random(1280 * 3000 * 4, 0), 128, 3000, 1280, 1};
    ms = time_ms(run_conv, &c1, g_reps);
    printf("conv1d whisper conv1 128->1280 k3 T=3000: %.3f ms, %.2f TFLOP/s\n", ms,
           2.0 * 1280 * 3000 * 128 * 3 / (ms * 1e-3) / 1e12);
    misc_ctx c2 = {dev_random(1280 * 3000 * 4, 0), dev_random(1280 * 1280 * 3 * 4, 0),
                   dev_random(1280 * 1500 * 4, 0), 1280, 3000, 1280, 2};
    ms = time_ms(run_conv, &c2, g_reps / 2 + 1);
    printf("conv1d whisper conv2 1280->1280 k3 s2 T=3000: %.3f ms, %.2f TFLOP/s\n", ms,
           2.0 * 1280 * 1500 * 1280 * 3 / (ms * 1e-3) / 1e12);
}

int main(int argc, char **argv) {
    bool attention_only = false, decode_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) g_reps = 4;
        if (strcmp(argv[i], "--attention") == 0) attention_only = true;
        if (strcmp(argv[i], "--decode-linears") == 0) decode_only = true;
    }
    if (choir_cuda_device_count() == 0) {
        printf("no CUDA device visible: nothing to measure\n");
        return 77;
    }
    choir_err err = {0};
    g_cu = choir_cuda_init(0, &err);
    if (!g_cu) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    const choir_cuda_props *p = choir_cuda_get_props(g_cu);
    printf("device %s (sm_%d%d, %d SMs, %.0f GiB); datasheet-style bandwidth from clocks: %.0f GB/s\n",
           p->name, p->cc_major, p->cc_minor, p->sm_count, p->total_bytes / 1073741824.0,
           2.0 * p->mem_clock_khz * 1e3 * (p->mem_bus_bits / 8) / 1e9);
    ceilings();
    if (decode_only) {
        decode_linears();
        printf("\ndevice memory: peak %.2f GiB through the context\n",
               choir_cuda_mem_peak(g_cu) / 1073741824.0);
        return 0;
    }
    if (!attention_only) {
        linears();
        kernels();
    } else {
        attn_f32_encoder();
    }
    flash();
    printf("\ndevice memory: peak %.2f GiB through the context\n",
           choir_cuda_mem_peak(g_cu) / 1073741824.0);
    return 0;
}
