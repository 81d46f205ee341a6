/* The Whisper encoder on the GPU at a published size (random bf16 weights),
 * its device time per 30-s window against the card's measured bf16 matmul
 * ceiling, with the rows between operations f32 (the path before the bf16
 * one) and bf16 (biases in cublasLt's epilogue, and without: GemmEx and a
 * bias pass), in the same run on the same model.
 *
 * The time is the device's: the mel windows are uploaded once, then
 * wh_encode_windows runs over device memory, synchronised, repeated; the
 * median of the repetitions after two warm-ups. FLOPs are the encoder's
 * matmul FLOPs (convolutions, projections, attention, MLP), as
 * `choir bench whisper` counts them; the ideal time is FLOPs over the
 * ceiling, and "% of ceiling" is ideal over measured.
 *
 * Usage: bench_whisper_enc_gpu [--dims large-v3-turbo|large-v3|small|base|tiny]
 *        [--windows N (32)] [--reps N (5)] [--rows f32|bf16|all (all)]
 *        [--layers N (the model's)] [--ceiling TFLOPS (measured unless given)]
 *        [--gelu-epilogue on|off (on, the default; the bf16 path's GELU in cublasLt's epilogue)]
 *        [--ln-warp on|off (on, the default; its layer norms one warp per row)]
 *        [--flash K|all (0: the default kernel of the bf16 attention; all: the
 *        bf16 path with each kernel of choir_cuda_attention_bf16_set_kernel,
 *        and with the GELU in cublasLt's epilogue)]
 * (--rows: only one path, for a profiler's kernel table; bf16 is the default
 * path, cublasLt epilogues) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/whisper.h"
#include "models/whisper/whisper_internal.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(float amp) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return amp * ((float)(g_rng >> 40) / 16777216.0f * 2.0f - 1.0f);
}

static float *vec(int64_t n, float amp, float base) {
    float *v = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(float));
    if (!v) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) v[i] = base + rnd(amp);
    return v;
}

static choir_weight mat(int64_t rows, int64_t cols, float amp) {
    uint16_t *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)(rows * cols) * 2);
    if (!h) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < rows * cols; i++) h[i] = choir_f32_to_bf16(rnd(amp));
    choir_weight W = {.kind = CHOIR_WEIGHT_BF16, .rows = rows, .cols = cols, .data = h};
    return W;
}

static void block(wh_block *b, int64_t d, int64_t ffn, bool dec) {
    float s = 1.0f / sqrtf((float)d);
    memset(b, 0, sizeof(*b));
    b->attn_ln_g = vec(d, 0.2f, 1.0f), b->attn_ln_b = vec(d, 0.1f, 0);
    b->mlp_ln_g = vec(d, 0.2f, 1.0f), b->mlp_ln_b = vec(d, 0.1f, 0);
    wh_attn *as[2] = {&b->attn, &b->cross};
    for (int a = 0; a < (dec ? 2 : 1); a++) {
        as[a]->q = mat(d, d, s), as[a]->k = mat(d, d, s);
        as[a]->v = mat(d, d, s), as[a]->o = mat(d, d, s);
        as[a]->bq = vec(d, 0.1f, 0), as[a]->bv = vec(d, 0.1f, 0), as[a]->bo = vec(d, 0.1f, 0);
    }
    if (dec) b->cross_ln_g = vec(d, 0.2f, 1.0f), b->cross_ln_b = vec(d, 0.1f, 0);
    b->fc1 = mat(ffn, d, s), b->fc1_b = vec(ffn, 0.1f, 0);
    b->fc2 = mat(d, ffn, 0.5f * s), b->fc2_b = vec(d, 0.1f, 0);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *dims = "large-v3-turbo";
    int nb = 32, reps = 5, first = 0, last = 2, flash = 0, layers = 0;
    bool gelu_epi = true, ln_warp = true; /* the library's defaults */
    double ceiling = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--dims") == 0) dims = argv[i + 1];
        else if (strcmp(argv[i], "--windows") == 0) nb = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--layers") == 0) layers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--gelu-epilogue") == 0) gelu_epi = strcmp(argv[i + 1], "off") != 0;
        else if (strcmp(argv[i], "--ln-warp") == 0) ln_warp = strcmp(argv[i + 1], "off") != 0;
        else if (strcmp(argv[i], "--ceiling") == 0) ceiling = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--flash") == 0)
            flash = strcmp(argv[i + 1], "all") == 0 ? -1 : atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rows") == 0) {
            if (strcmp(argv[i + 1], "bf16") == 0) first = last = 2;
            if (strcmp(argv[i + 1], "f32") == 0) first = last = 0;
        }
    }
    if (nb < 1 || reps < 1 || reps > 100) return 2;
    /* --flash all: the bf16 path once per kernel of the attention (1 to 4)
     * and with the GELU in the epilogue. */
    if (flash == -1 && last == 2) last = 9;
    if (choir_cuda_device_count() == 0) {
        printf("no CUDA device visible: nothing to measure\n");
        return 77;
    }
    /* d_model, heads, encoder layers, MLP, mel bins. */
    int64_t d = 1280, H = 20, L = 32, ffn = 5120, mels = 128;
    if (strcmp(dims, "large-v3") == 0) (void)0;
    else if (strcmp(dims, "small") == 0) d = 768, H = 12, L = 12, ffn = 3072, mels = 80;
    else if (strcmp(dims, "base") == 0) d = 512, H = 8, L = 6, ffn = 2048, mels = 80;
    else if (strcmp(dims, "tiny") == 0) d = 384, H = 6, L = 4, ffn = 1536, mels = 80;
    else if (strcmp(dims, "large-v3-turbo") != 0) {
        fprintf(stderr, "bench: unknown --dims %s\n", dims);
        return 2;
    }
    if (layers > 0 && layers < L) L = layers;
    choir_whisper m;
    memset(&m, 0, sizeof(m));
    choir_whisper_dims *D = &m.dims;
    /* One small decoder layer: only the encoder is timed. */
    *D = (choir_whisper_dims){.n_mels = (int)mels,
                              .n_audio_ctx = 1500,
                              .n_audio_layer = (int)L,
                              .n_text_ctx = 448,
                              .n_text_layer = 1,
                              .d_model = (int)d,
                              .n_head = (int)H,
                              .ffn_dim = (int)ffn,
                              .n_vocab = 51866};
    m.sp.eot = 50257, m.sp.sot = 50258;
    m.conv1_w = vec(d * mels * 3, 0.1f, 0), m.conv1_b = vec(d, 0.1f, 0);
    m.conv2_w = vec(d * d * 3, 0.02f, 0), m.conv2_b = vec(d, 0.1f, 0);
    m.enc_pos = vec(1500 * d, 0.5f, 0);
    m.enc_ln_g = vec(d, 0.2f, 1.0f), m.enc_ln_b = vec(d, 0.1f, 0);
    wh_block *enc = calloc((size_t)L, sizeof(wh_block)), dec;
    for (int l = 0; l < L; l++) block(&enc[l], d, ffn, false);
    block(&dec, d, ffn, true);
    m.enc = enc, m.dec = &dec;
    m.tok_emb = mat(D->n_vocab, d, 1.0f);
    m.dec_pos = vec(448 * d, 0.3f, 0);
    m.dec_ln_g = vec(d, 0.2f, 1.0f), m.dec_ln_b = vec(d, 0.1f, 0);
    choir_err err = {0};
    if (wh_net_init_cpu(&m, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    choir_whisper_gpu_opts o;
    choir_whisper_default_gpu_opts(&o);
    o.bf16 = true;
    o.tf32 = true;
    o.max_windows = nb;
    if (choir_whisper_gpu_attach(&m, &o, &err)) {
        fprintf(stderr, "bench: attach: %s\n", err.msg);
        return 1;
    }
    wh_net *w = (wh_net *)wh_active_net(&m);
    choir_cuda *cu = choir_backend_cuda_context(w->be);
    double tflops = 0, gbs = 0;
    if (ceiling > 0)
        tflops = ceiling;
    else if (choir_cuda_measure_ceilings(cu, &tflops, &gbs, &err)) {
        fprintf(stderr, "bench: ceilings: %s\n", err.msg);
        return 1;
    }
    double A = 1500, F = 3000;
    double flops = 2.0 * d * F * mels * 3 + 2.0 * d * A * d * 3 +
                   L * (2.0 * A * (4.0 * d * d + 2.0 * d * ffn) + 4.0 * A * A * d);
    double ideal_ms = flops / (tflops * 1e12) * 1e3;
    printf("device %s; ceiling bf16 matmul %.1f TFLOP/s, copy %.0f GB/s\n",
           choir_cuda_get_props(cu)->name, tflops, gbs);
    printf("whisper %s encoder: %.3f TFLOP per window, ideal %.3f ms per window at the ceiling\n",
           dims, flops / 1e12, ideal_ms);

    size_t mel_n = (size_t)nb * mels * 3000, out_n = (size_t)nb * 1500 * d;
    float *mel = vec((int64_t)mel_n, 1.0f, -0.2f);
    size_t work = wh_enc_work_bytes(D, nb) + (mel_n + out_n) * sizeof(float) + 512;
    choir_stream *s = wh_stream_open(&m, work, wh_enc_scratch_bytes(w, D, nb), &err);
    if (!s) {
        fprintf(stderr, "bench: stream: %s\n", err.msg);
        return 1;
    }
    float *dmel = choir_stream_floats(s, (int64_t)mel_n, "mel");
    float *dx = choir_stream_floats(s, (int64_t)out_n, "encoder output");
    choir_op_upload(s, dmel, mel, mel_n * sizeof(float));
    /* The paths: rows f32 or bf16; cublasLt or GemmEx + a bias pass; the
     * bf16 attention's kernel (0: its default); GELU in cublasLt's epilogue. */
    static const struct {
        const char *name;
        bool f32, lt;
        int kernel;
        bool gelu_epi, ln_warp;
    } P[] = {{"f32 rows", true, true, 0, false, false},
             {"bf16 rows, GemmEx + bias pass", false, false, 0, false, false},
             {"bf16 rows, cublasLt bias epilogue (the defaults, or the flags)", false, true, 0, true, true},
             {"bf16 rows, cublasLt, attention kernel 1", false, true, 1, false, false},
             {"bf16 rows, cublasLt, attention kernel 2 (4 warps x 32 rows)", false, true, 2, false, false},
             {"bf16 rows, cublasLt, attention kernel 3 (8 warps x 32 rows)", false, true, 3, false, false},
             {"bf16 rows, cublasLt, attention kernel 4 (8 warps x 16 rows)", false, true, 4, false, false},
             {"bf16 rows, cublasLt, attention kernel 1, warp layer norm", false, true, 1, false, true},
             {"bf16 rows, cublasLt, attention kernel 1, GELU in the epilogue", false, true, 1, true, false},
             {"bf16 rows, cublasLt, attention kernel 3, warp layer norm, GELU epilogue", false, true, 3, true, true}};
    enum { NP = sizeof P / sizeof P[0] };
    float *out[NP] = {NULL};
    double med[NP] = {0};
    for (int path = first; path <= last; path++) {
        w->enc_f32_rows = P[path].f32;
        choir_cuda_linear_bf16_set_lt(P[path].lt);
        choir_cuda_attention_bf16_set_kernel(path == 2 ? flash : P[path].kernel);
        choir_cuda_linear_bf16_set_gelu_epilogue(path == 2 ? gelu_epi : P[path].gelu_epi);
        choir_cuda_layer_norm_bf16_set_warp(path == 2 ? ln_warp : P[path].ln_warp);
        double t[100];
        for (int r = -2; r < reps; r++) {
            double t0 = now_ms();
            wh_encode_windows(s, w, D, dmel, nb, dx);
            if (choir_stream_sync(s, &err)) {
                fprintf(stderr, "bench: encode: %s\n", err.msg);
                return 1;
            }
            if (r >= 0) t[r] = (now_ms() - t0) / nb;
        }
        qsort(t, (size_t)reps, sizeof(double), cmp_d);
        med[path] = t[reps / 2];
        out[path] = choir_alloc(CHOIR_MEM_OTHER, out_n * sizeof(float));
        choir_op_download(s, out[path], dx, out_n * sizeof(float));
        printf("encoder, %s: %.3f ms per window (median of %d, min %.3f max %.3f), %.0f TFLOP/s, "
               "%.1f%% of the bf16 ceiling\n",
               P[path].name, med[path], reps, t[0], t[reps - 1],
               flops / (med[path] * 1e-3) / 1e12, 100.0 * ideal_ms / med[path]);
    }
    for (int path = 1; path < NP; path++) {
        if (!out[0] || !out[path]) continue;
        double num = 0, den = 0;
        for (size_t i = 0; i < out_n; i++) {
            double e = (double)out[path][i] - out[0][i];
            num += e * e;
            den += (double)out[0][i] * out[0][i];
        }
        printf("%s vs f32 rows, encoder output: rel_l2 %.3e; %.2fx faster\n", P[path].name,
               sqrt(num / (den > 0 ? den : 1)), med[0] / med[path]);
    }
    choir_cuda_linear_bf16_set_lt(true);
    choir_cuda_attention_bf16_set_kernel(0);
    choir_cuda_linear_bf16_set_gelu_epilogue(true);
    choir_cuda_layer_norm_bf16_set_warp(true);
    w->enc_f32_rows = false;
    wh_stream_done(&m, s, 0, &err);
    choir_whisper_gpu_detach(&m);
    return 0;
}
