/* Whisper's encoder on the GPU (whisper_cuda.c) against the CPU encoder
 * (choir_whisper_encode) on a small random model: 80 mel bins, d_model 64,
 * 4 heads, 2 layers, MLP 256, the real 1500-position window. Three windows
 * in passes of two exercise the batching. f32 weights must agree to 1e-5
 * (relative L2 over all outputs); bf16 weights (tensor-core products, bf16
 * activations) to 1e-2. Exits 77 (skipped) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/whisper.h"
#include "models/whisper/whisper_internal.h"

/* whisper_cuda.c's API (not yet in choir/whisper.h). */
typedef struct choir_whisper_gpu choir_whisper_gpu;
choir_whisper_gpu *choir_whisper_gpu_create(const choir_whisper *m, choir_cuda *cu,
                                            int max_windows, choir_err *err);
int choir_whisper_gpu_encode(choir_whisper_gpu *g, const float *mel, int n, float *out,
                             choir_err *err);
void choir_whisper_gpu_free(choir_whisper_gpu *g);

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rnd(float amp) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return amp * ((float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f);
}

/* Every array of the test model, freed together. */
#define MAX_ARRAYS 128
static void *g_arrays[MAX_ARRAYS];
static int g_narrays;
static float *arr(int64_t n, float amp, float base) {
    float *p = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = base + rnd(amp);
    g_arrays[g_narrays++] = p;
    return p;
}

/* W [rows, cols] in f32, or rounded to bf16 storage. */
static choir_weight weight(int64_t rows, int64_t cols, int bf16) {
    float amp = 1.0f / sqrtf((float)cols);
    float *w = arr(rows * cols, amp, 0.0f);
    if (!bf16) return choir_weight_f32(w, rows, cols);
    uint16_t *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)(rows * cols) * 2);
    choir_f32_to_bf16_n(w, h, rows * cols);
    g_arrays[g_narrays++] = h;
    choir_weight W = {.kind = CHOIR_WEIGHT_BF16, .rows = rows, .cols = cols, .data = h};
    return W;
}

static void build(choir_whisper *m, wh_block *blocks, int bf16) {
    memset(m, 0, sizeof(*m));
    choir_whisper_dims *D = &m->dims;
    D->n_mels = 80, D->n_audio_ctx = 1500, D->n_audio_layer = 2, D->d_model = 64, D->n_head = 4;
    D->ffn_dim = 256;
    int64_t d = D->d_model, ffn = D->ffn_dim;
    m->conv1_w = arr(d * D->n_mels * 3, 0.1f, 0), m->conv1_b = arr(d, 0.1f, 0);
    m->conv2_w = arr(d * d * 3, 0.07f, 0), m->conv2_b = arr(d, 0.1f, 0);
    m->enc_pos = arr(D->n_audio_ctx * d, 0.5f, 0);
    m->enc_ln_g = arr(d, 0.2f, 1.0f), m->enc_ln_b = arr(d, 0.1f, 0);
    for (int l = 0; l < D->n_audio_layer; l++) {
        wh_block *b = &blocks[l];
        memset(b, 0, sizeof(*b));
        b->attn_ln_g = arr(d, 0.2f, 1.0f), b->attn_ln_b = arr(d, 0.1f, 0);
        b->mlp_ln_g = arr(d, 0.2f, 1.0f), b->mlp_ln_b = arr(d, 0.1f, 0);
        b->attn.q = weight(d, d, bf16), b->attn.k = weight(d, d, bf16);
        b->attn.v = weight(d, d, bf16), b->attn.o = weight(d, d, bf16);
        b->attn.bq = arr(d, 0.1f, 0), b->attn.bv = arr(d, 0.1f, 0), b->attn.bo = arr(d, 0.1f, 0);
        b->fc1 = weight(ffn, d, bf16), b->fc1_b = arr(ffn, 0.1f, 0);
        b->fc2 = weight(d, ffn, bf16), b->fc2_b = arr(d, 0.1f, 0);
    }
    m->enc = blocks;
}

static int run_case(choir_cuda *cu, int bf16, double tol) {
    choir_whisper m;
    wh_block blocks[2];
    build(&m, blocks, bf16);
    const int n = 3;
    int64_t mel_n = (int64_t)n * m.dims.n_mels * CHOIR_WHISPER_N_FRAMES;
    int64_t out_n = (int64_t)n * m.dims.n_audio_ctx * m.dims.d_model;
    float *mel = arr(mel_n, 1.0f, -0.2f);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, (size_t)out_n * 4);
    float *got = choir_alloc(CHOIR_MEM_OTHER, (size_t)out_n * 4);
    choir_err err = {0};
    int ok = 0;
    choir_whisper_gpu *g = NULL;
    if (choir_whisper_encode(&m, mel, n, ref, &err)) {
        fprintf(stderr, "cpu encode: %s\n", err.msg);
        goto done;
    }
    g = choir_whisper_gpu_create(&m, cu, 2, &err);
    if (!g || choir_whisper_gpu_encode(g, mel, n, got, &err)) {
        fprintf(stderr, "gpu encode: %s\n", err.msg);
        goto done;
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < out_n; i++) {
        double e = (double)got[i] - ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    double rel = sqrt(num / den);
    ok = rel <= tol;
    printf("%s whisper encoder %s weights, 3 windows in passes of 2: rel_l2 %.3e (tol %.0e)\n",
           ok ? "PASS" : "FAIL", bf16 ? "bf16" : "f32", rel, tol);
done:
    choir_whisper_gpu_free(g);
    choir_free(ref), choir_free(got);
    for (int i = 0; i < g_narrays; i++) choir_free(g_arrays[i]);
    g_narrays = 0;
    return ok;
}

int main(void) {
    if (choir_cuda_device_count() == 0) {
        printf("SKIP no CUDA device visible\n");
        return 77;
    }
    choir_err err = {0};
    choir_cuda *cu = choir_cuda_init(0, &err);
    if (!cu) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int64_t base = choir_cuda_mem_current(cu);
    int ok = run_case(cu, 0, 1e-5);
    ok &= run_case(cu, 1, 1e-2);
    /* Freeing the GPU model returns every device byte but the context scratch. */
    printf("device bytes after free: %lld over the start (context scratch)\n",
           (long long)(choir_cuda_mem_current(cu) - base));
    choir_cuda_free(cu);
    return ok ? 0 : 1;
}
