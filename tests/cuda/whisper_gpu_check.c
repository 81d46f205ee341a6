/* Whisper on the GPU (the forward over backend operations on the CUDA backend, whisper_cuda.c placing it) against the CPU
 * network on a small random model: 80 mel bins, d_model 64, 4 heads, 2
 * encoder and 2 decoder layers, MLP 256, the real 1500-position window, 448
 * text positions and the multilingual vocabulary (51865, so that the special
 * tokens and decoding rules are the real ones).
 *
 * Cases, each printing one PASS/FAIL line with its measured error:
 *  - encoder, 3 windows in passes of 2: f32 weights rel L2 <= 1e-5, bf16 <= 1e-2
 *    (bf16 cases also run their f32 products in TF32);
 *  - decoder logits, GPU vs CPU, at batch 1 and 4: a prompt of a different
 *    length per sequence (the kernel-by-kernel path), then 6 one-token steps
 *    (the graph path) fed the CPU's argmax tokens; f32 rel L2 <= 1e-4 on every
 *    call and the same argmax everywhere; bf16 weights <= 2e-2;
 *  - teacher forcing with all positions' logits (the parity command's call);
 *  - graph replay vs the same step run kernel by kernel: bit-identical logits,
 *    every step replayed, no failed capture;
 *  - full decoding through choir_whisper_decode_windows on 2 windows: greedy
 *    with timestamp rules and beam search (beam 3: cache copies on the
 *    device, pool growth) give the CPU's tokens; the GPU encoder feeding the
 *    device cross K/V directly (no round trip) gives them too;
 *  - greedy with the rules on the device, 1/3/8/16 steps per host wake-up,
 *    with and without timestamp rules: the CPU's tokens, sums of
 *    log-probabilities within 1e-5 (H200: 6.1e-7, the same with the host's
 *    rules: the decoder's f32 rounding); the rules on the host
 *    (greedy_steps 0) give them too;
 *  - a bf16 model's caches are bf16 on the device: greedy and beam 3 give
 *    the CPU's (f32 caches) first tokens;
 *  - word timestamps (standalone build, whose tokenizer stand-in gives
 *    every token bytes): the alignment heads' cross-attention logits of a
 *    teacher-forced pass computed on the device and downloaded
 *    (choir_whisper_cross_qk) against the CPU's, f32 rel L2 <= 1e-4, then
 *    choir_whisper_window_words on 2 segments: the same words (text and
 *    tokens) with times within one 20 ms alignment frame and probabilities
 *    within 1e-3 relative; a bf16 model (bf16 cross keys on the device,
 *    widened for the product) rel L2 <= 2e-2 and the same words within 2
 *    frames, probabilities within 5e-2;
 *  - (INFO) device bytes held, graph and direct step counts.
 * Exits 0 when all pass, 1 otherwise, 77 (skipped) without a GPU. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/whisper.h"
#include "choir/whisper_words.h"
#include "models/whisper/whisper_internal.h"

static int g_failures, g_cases;

static void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    g_cases++;
    if (!ok) g_failures++;
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float rnd(float amp) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return amp * ((float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f);
}

/* Every array of the test model, freed together. */
#define MAX_ARRAYS 256
static void *g_arrays[MAX_ARRAYS];
static int g_narrays;
static float *arr(int64_t n, float amp, float base) {
    float *p = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = base + rnd(amp);
    g_arrays[g_narrays++] = p;
    return p;
}
static void arrays_free(void) {
    for (int i = 0; i < g_narrays; i++) choir_free(g_arrays[i]);
    g_narrays = 0;
}

/* W [rows, cols] in f32, or rounded to bf16 storage. */
static choir_weight weight(int64_t rows, int64_t cols, int bf16, float amp) {
    float *w = arr(rows * cols, amp, 0.0f);
    if (!bf16) return choir_weight_f32(w, rows, cols);
    uint16_t *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)(rows * cols) * 2);
    choir_f32_to_bf16_n(w, h, rows * cols);
    g_arrays[g_narrays++] = h;
    choir_weight W = {.kind = CHOIR_WEIGHT_BF16, .rows = rows, .cols = cols, .data = h};
    return W;
}

static void block(wh_block *b, int64_t d, int64_t ffn, bool dec, int bf16) {
    float s = 1.0f / sqrtf((float)d);
    memset(b, 0, sizeof(*b));
    b->attn_ln_g = arr(d, 0.2f, 1.0f), b->attn_ln_b = arr(d, 0.1f, 0);
    b->mlp_ln_g = arr(d, 0.2f, 1.0f), b->mlp_ln_b = arr(d, 0.1f, 0);
    wh_attn *as[2] = {&b->attn, &b->cross};
    for (int a = 0; a < (dec ? 2 : 1); a++) {
        as[a]->q = weight(d, d, bf16, s), as[a]->k = weight(d, d, bf16, s);
        as[a]->v = weight(d, d, bf16, s), as[a]->o = weight(d, d, bf16, s);
        as[a]->bq = arr(d, 0.1f, 0), as[a]->bv = arr(d, 0.1f, 0), as[a]->bo = arr(d, 0.1f, 0);
    }
    if (dec) b->cross_ln_g = arr(d, 0.2f, 1.0f), b->cross_ln_b = arr(d, 0.1f, 0);
    b->fc1 = weight(ffn, d, bf16, s), b->fc1_b = arr(ffn, 0.1f, 0);
    b->fc2 = weight(d, ffn, bf16, 0.5f * s), b->fc2_b = arr(d, 0.1f, 0);
}

/* As choir_whisper_specials_from_vocab (whisper_load.c, not in the
 * standalone build). */
static void specials(int V, choir_whisper_specials *sp) {
    memset(sp, 0, sizeof(*sp));
    sp->multilingual = V >= 51865;
    sp->num_languages = V - 51765 - sp->multilingual;
    sp->eot = 50256 + sp->multilingual;
    sp->sot = sp->eot + 1;
    sp->lang0 = sp->sot + 1;
    sp->translate = sp->sot + 1 + sp->num_languages;
    sp->transcribe = sp->translate + 1;
    sp->sot_lm = sp->translate + 2;
    sp->sot_prev = sp->translate + 3;
    sp->no_speech = sp->translate + 4;
    sp->no_timestamps = sp->translate + 5;
    sp->timestamp_begin = sp->translate + 6;
}

#define N_LAYER 2
static wh_block g_enc_blocks[N_LAYER], g_dec_blocks[N_LAYER];
/* The CPU backend every built model's CPU forward runs on (freed by main). */
static choir_backend *g_cpu_backend;

static void build(choir_whisper *m, int bf16) {
    memset(m, 0, sizeof(*m));
    choir_whisper_dims *D = &m->dims;
    *D = (choir_whisper_dims){.n_mels = 80,
                              .n_audio_ctx = 1500,
                              .n_audio_layer = N_LAYER,
                              .n_text_ctx = 448,
                              .n_text_layer = N_LAYER,
                              .d_model = 64,
                              .n_head = 4,
                              .ffn_dim = 256,
                              .n_vocab = 51865};
    specials(D->n_vocab, &m->sp);
    int64_t d = D->d_model, ffn = D->ffn_dim;
    m->conv1_w = arr(d * D->n_mels * 3, 0.1f, 0), m->conv1_b = arr(d, 0.1f, 0);
    m->conv2_w = arr(d * d * 3, 0.07f, 0), m->conv2_b = arr(d, 0.1f, 0);
    m->enc_pos = arr(D->n_audio_ctx * d, 0.5f, 0);
    m->enc_ln_g = arr(d, 0.2f, 1.0f), m->enc_ln_b = arr(d, 0.1f, 0);
    for (int l = 0; l < N_LAYER; l++) block(&g_enc_blocks[l], d, ffn, false, bf16);
    m->enc = g_enc_blocks;
    m->tok_emb = weight(D->n_vocab, d, bf16, 1.0f);
    m->dec_pos = arr((int64_t)D->n_text_ctx * d, 0.3f, 0);
    for (int l = 0; l < N_LAYER; l++) block(&g_dec_blocks[l], d, ffn, true, bf16);
    m->dec = g_dec_blocks;
    m->dec_ln_g = arr(d, 0.2f, 1.0f), m->dec_ln_b = arr(d, 0.1f, 0);
    choir_err err = {0};
    m->cpu = g_cpu_backend;
    if (wh_net_init_cpu(m, &err)) {
        fprintf(stderr, "FATAL %s\n", err.msg);
        exit(1);
    }
    g_cpu_backend = m->cpu;
}

static double rel_l2(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-30));
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* choir_whisper_gpu_opts.greedy_steps for the next attach (-1: the default). */
static int g_greedy_steps = -1;

static int attach(choir_whisper *m, int bf16, bool graphs, int max_windows) {
    choir_whisper_gpu_opts o;
    choir_whisper_default_gpu_opts(&o);
    if (g_greedy_steps >= 0) o.greedy_steps = g_greedy_steps;
    o.bf16 = bf16;
    o.tf32 = bf16; /* bf16 bounds also cover TF32 attention and convolutions */
    o.graphs = graphs;
    o.max_windows = max_windows;
    choir_err err = {0};
    if (choir_whisper_gpu_attach(m, &o, &err)) {
        printf("FAIL attach: %s\n", err.msg);
        g_failures++, g_cases++;
        return -1;
    }
    return 0;
}

/* --- encoder --------------------------------------------------------------- */

/* Which of the device's other kernels encoder_case runs with, for its line. */
static const char *g_variant = "";

static void encoder_case(const float *mel, const float *ref, int n, int bf16, double tol) {
    choir_whisper m;
    build(&m, bf16);
    size_t out_n = (size_t)n * 1500 * 64;
    float *got = choir_alloc(CHOIR_MEM_OTHER, out_n * sizeof(float));
    float *cpu = choir_alloc(CHOIR_MEM_OTHER, out_n * sizeof(float));
    choir_err err = {0};
    /* bf16 model: its own CPU reference (the weights differ from f32's). */
    if (bf16 && choir_whisper_encode(&m, mel, n, cpu, &err)) printf("cpu encode: %s\n", err.msg);
    if (!attach(&m, bf16, true, 2)) {
        if (choir_whisper_encode(&m, mel, n, got, &err)) {
            report(false, "whisper encoder %s weights: %s", bf16 ? "bf16" : "f32", err.msg);
        } else {
            double e = rel_l2(got, bf16 ? cpu : ref, out_n);
            report(e <= tol,
                   "whisper encoder %s weights, %d windows in passes of 2%s: rel_l2 %.3e "
                   "(tol %.0e)",
                   bf16 ? "bf16" : "f32", n, g_variant, e, tol);
        }
        choir_whisper_gpu_detach(&m);
    }
    choir_free(got);
    choir_free(cpu);
    arrays_free();
}

/* --- decoder calls ------------------------------------------------------------ */

#define STEPS 6
#define MAX_B 4

/* The calls of one run: B sequences over 2 windows (sequence b on window
 * b % 2), prompt lengths 4 + b, then STEPS one-token steps. tokens[STEPS][B]
 * are chosen by argmax when `choose` (the CPU run) and replayed otherwise.
 * logits receives (1 + STEPS) * B * V floats. */
static int run_calls(const choir_whisper *m, const float *enc, int B, bool choose, int32_t *tokens,
                     float *logits, choir_err *err) {
    const choir_whisper_specials *sp = &m->sp;
    int V = m->dims.n_vocab, rc = 0;
    size_t enc_one = (size_t)m->dims.n_audio_ctx * (size_t)m->dims.d_model;
    choir_whisper_cross *cross[2] = {NULL, NULL};
    choir_whisper_seq *seqs[MAX_B] = {NULL};
    int32_t prompt[MAX_B * 8];
    int n[MAX_B], np = 0;
    for (int w = 0; w < 2 && !rc; w++)
        if (!(cross[w] = choir_whisper_cross_create(m, enc + (size_t)w * enc_one, err))) rc = -1;
    for (int b = 0; b < B && !rc; b++) {
        if (!(seqs[b] = choir_whisper_seq_create(m, 0, err))) {
            rc = -1;
            break;
        }
        choir_whisper_seq_reset(seqs[b], cross[b % 2]);
        n[b] = 4 + b;
        int32_t start[8] = {sp->sot, sp->lang0 + b, sp->transcribe, sp->no_timestamps,
                            440 + b, 1000 + 3 * b,  2000,           3000};
        memcpy(prompt + np, start, (size_t)n[b] * sizeof(int32_t));
        np += n[b];
    }
    if (!rc) rc = choir_whisper_decode(m, seqs, B, prompt, n, false, logits, err);
    for (int s = 0; s < STEPS && !rc; s++) {
        const float *prev = logits + (size_t)s * B * V;
        for (int b = 0; b < B; b++) {
            if (choose) tokens[s * B + b] = argmax(prev + (size_t)b * V, V);
            n[b] = 1;
        }
        rc = choir_whisper_decode(m, seqs, B, tokens + s * B, n, false,
                                  logits + (size_t)(s + 1) * B * V, err);
    }
    for (int b = 0; b < B; b++) choir_whisper_seq_free(seqs[b]);
    for (int w = 0; w < 2; w++) choir_whisper_cross_free(cross[w]);
    return rc ? (err->code ? err->code : -1) : 0;
}

/* GPU logits of every call against the CPU's; returns the worst rel L2 and
 * counts argmax disagreements. */
static double compare_calls(const float *got, const float *ref, int B, int V, int *argmax_diff) {
    double worst = 0;
    *argmax_diff = 0;
    for (int c = 0; c <= STEPS; c++)
        for (int b = 0; b < B; b++) {
            size_t off = ((size_t)c * B + b) * V;
            double e = rel_l2(got + off, ref + off, (size_t)V);
            if (e > worst || e != e) worst = e;
            *argmax_diff += argmax(got + off, V) != argmax(ref + off, V);
        }
    return worst;
}

static void decoder_case(int B, int bf16, double tol) {
    choir_whisper m;
    build(&m, bf16);
    int V = m.dims.n_vocab;
    size_t enc_n = 2 * 1500 * 64, calls = (size_t)(1 + STEPS) * B * V;
    float *mel = arr(2 * 80 * 3000, 1.0f, -0.2f), *enc = arr((int64_t)enc_n, 0, 0);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, calls * sizeof(float));
    float *got = choir_alloc(CHOIR_MEM_OTHER, calls * sizeof(float));
    float *direct = choir_alloc(CHOIR_MEM_OTHER, calls * sizeof(float));
    int32_t tokens[STEPS * MAX_B];
    choir_err err = {0};
    const char *wt = bf16 ? "bf16" : "f32";
    if (choir_whisper_encode(&m, mel, 2, enc, &err) ||
        run_calls(&m, enc, B, true, tokens, ref, &err)) {
        report(false, "decoder CPU reference B=%d: %s", B, err.msg);
        goto done;
    }
    /* Graph replay first, then the same steps kernel by kernel. */
    for (int pass = 0; pass < (bf16 ? 1 : 2); pass++) {
        bool graphs = pass == 0;
        if (attach(&m, bf16, graphs, 2)) goto done;
        int rc = run_calls(&m, enc, B, false, tokens, graphs ? got : direct, &err);
        choir_whisper_gpu_stats st;
        choir_whisper_gpu_get_stats(&m, &st, NULL);
        choir_whisper_gpu_detach(&m);
        if (rc) {
            report(false, "decoder %s weights B=%d (%s): %s", wt, B, graphs ? "graphs" : "direct",
                   err.msg);
            goto done;
        }
        if (graphs) {
            int diff;
            double e = compare_calls(got, ref, B, V, &diff);
            bool ok = e <= tol && (bf16 || diff == 0);
            report(ok,
                   "decoder logits %s weights B=%d, prompt + %d steps vs CPU: worst rel_l2 "
                   "%.3e (tol %.0e), argmax differs at %d of %d",
                   wt, B, STEPS, e, tol, diff, (1 + STEPS) * B);
            report(st.steps_graph == STEPS && st.graph_failures == 0,
                   "decoder %s B=%d: %lld of %d steps replayed from a CUDA graph, %d failed "
                   "captures",
                   wt, B, (long long)st.steps_graph, STEPS, st.graph_failures);
        } else {
            /* The prompt call runs kernel by kernel in both passes. */
            bool same = memcmp(got, direct, calls * sizeof(float)) == 0;
            report(same && st.steps_graph == 0,
                   "decoder B=%d: graph replay bit-identical to the step run kernel by kernel "
                   "(%lld direct calls)",
                   B, (long long)st.steps_direct);
        }
    }
done:
    choir_free(ref), choir_free(got), choir_free(direct);
    arrays_free();
}

/* Teacher forcing: all positions' logits of one sequence in one call. */
static void all_positions_case(void) {
    choir_whisper m;
    build(&m, 0);
    int V = m.dims.n_vocab, P = 12;
    float *mel = arr(80 * 3000, 1.0f, -0.2f), *enc = arr(1500 * 64, 0, 0);
    float *ref = arr((int64_t)P * V, 0, 0), *got = arr((int64_t)P * V, 0, 0);
    int32_t toks[12] = {
        m.sp.sot, m.sp.lang0, m.sp.transcribe, m.sp.no_timestamps, 400, 401, 402, 1403, 2404, 3405,
        4406,     5407};
    choir_err err = {0};
    int rc = choir_whisper_encode(&m, mel, 1, enc, &err);
    for (int pass = 0; pass < 2 && !rc; pass++) {
        if (pass == 1 && attach(&m, 0, true, 1)) break;
        choir_whisper_cross *c = choir_whisper_cross_create(&m, enc, &err);
        choir_whisper_seq *s = c ? choir_whisper_seq_create(&m, 0, &err) : NULL;
        if (s) choir_whisper_seq_reset(s, c);
        rc = s ? choir_whisper_decode(&m, &s, 1, toks, &P, true, pass ? got : ref, &err) : -1;
        choir_whisper_seq_free(s);
        choir_whisper_cross_free(c);
        if (pass == 1) choir_whisper_gpu_detach(&m);
    }
    if (rc)
        report(false, "all-positions logits: %s", err.msg);
    else {
        double e = rel_l2(got, ref, (size_t)P * V);
        report(e <= 1e-4,
               "all-positions logits (teacher forcing, %d rows) vs CPU: rel_l2 %.3e "
               "(tol 1e-04)",
               P, e);
    }
    arrays_free();
}

/* --- full decoding -------------------------------------------------------------- */

/* Decodes 2 windows with the given parameters; crosses from host encoder
 * rows, or (device_encoder) straight from the GPU encoder. */
static int decode2(choir_whisper *m, const float *mel, const float *enc, bool device_encoder,
                   const choir_whisper_params *p, choir_whisper_result *res, choir_err *err) {
    choir_whisper_cross *cross[2] = {NULL, NULL};
    size_t enc_one = (size_t)m->dims.n_audio_ctx * (size_t)m->dims.d_model;
    int rc = 0;
    if (device_encoder)
        rc = choir_whisper_encode_cross(m, mel, 2, NULL, cross, err);
    else
        for (int w = 0; w < 2 && !rc; w++)
            if (!(cross[w] = choir_whisper_cross_create(m, enc + (size_t)w * enc_one, err)))
                rc = err->code ? err->code : -1;
    choir_whisper_window win[2] = {{.cross = cross[0], .language = -1, .seed = 1},
                                   {.cross = cross[1], .language = -1, .seed = 2}};
    if (!rc) rc = choir_whisper_decode_windows(m, NULL, win, 2, p, 0.0f, res, err);
    for (int w = 0; w < 2; w++) choir_whisper_cross_free(cross[w]);
    return rc;
}

static bool same_tokens(const choir_whisper_result *a, const choir_whisper_result *b) {
    return a->n_tokens == b->n_tokens && a->language == b->language &&
           memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t)) == 0;
}

static void full_decode_case(void) {
    choir_whisper m;
    build(&m, 0);
    float *mel = arr(2 * 80 * 3000, 1.0f, -0.2f), *enc = arr(2 * 1500 * 64, 0, 0);
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.sample_len = 32;
    choir_err err = {0};
    choir_whisper_result cpu[2][2], gpu[2][2], dev[2];
    memset(cpu, 0, sizeof(cpu)), memset(gpu, 0, sizeof(gpu)), memset(dev, 0, sizeof(dev));
    const char *what[2] = {"greedy (language detection, timestamp rules)", "beam search 3"};
    int rc = choir_whisper_encode(&m, mel, 2, enc, &err);
    for (int k = 0; k < 2 && !rc; k++) {
        p.beam_size = k ? 3 : 1;
        rc = decode2(&m, mel, enc, false, &p, cpu[k], &err);
    }
    if (rc) {
        report(false, "full decode CPU reference: %s", err.msg);
        goto done;
    }
    if (attach(&m, 0, true, 2)) goto done;
    int64_t held = choir_cuda_mem_current(choir_whisper_gpu_context(&m));
    for (int k = 0; k < 2; k++) {
        p.beam_size = k ? 3 : 1;
        if ((rc = decode2(&m, mel, enc, false, &p, gpu[k], &err))) {
            report(false, "full decode %s on the GPU: %s", what[k], err.msg);
            continue;
        }
        bool ok = same_tokens(&gpu[k][0], &cpu[k][0]) && same_tokens(&gpu[k][1], &cpu[k][1]);
        report(ok,
               "full decode %s, 2 windows: GPU tokens identical to CPU (%d and %d tokens; "
               "sum logprob %.4f vs %.4f)",
               what[k], gpu[k][0].n_tokens, gpu[k][1].n_tokens, gpu[k][0].sum_logprob,
               cpu[k][0].sum_logprob);
    }
    p.beam_size = 1;
    if ((rc = decode2(&m, mel, NULL, true, &p, dev, &err))) {
        report(false, "full decode from the GPU encoder: %s", err.msg);
    } else {
        bool ok = same_tokens(&dev[0], &cpu[0][0]) && same_tokens(&dev[1], &cpu[0][1]);
        report(ok, "GPU encoder -> device cross K/V -> greedy decode: tokens identical to CPU");
    }
    /* Every cache and sequence is freed: the pools keep their slots, so the
     * device holds what it held after the first run. */
    int64_t now = choir_cuda_mem_current(choir_whisper_gpu_context(&m));
    choir_whisper_gpu_stats st;
    choir_whisper_gpu_get_stats(&m, &st, NULL);
    printf("INFO device bytes: %.1f MB held (%.1f MB weights), %.1f MB after the first attach; "
           "%lld graph steps, %lld direct calls, %d graphs\n",
           now / 1e6, st.weight_bytes / 1e6, held / 1e6, (long long)st.steps_graph,
           (long long)st.steps_direct, st.graphs);
    choir_whisper_gpu_detach(&m);
done:
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 2; w++)
            choir_whisper_result_clear(&cpu[k][w]), choir_whisper_result_clear(&gpu[k][w]);
    for (int w = 0; w < 2; w++) choir_whisper_result_clear(&dev[w]);
    arrays_free();
}

/* A bf16 model: its caches on the device hold bf16 (half the bytes) while
 * the CPU's are f32, so the two decodes differ by rounding only: greedy and
 * beam 3 (cache copies of bf16 rows, pool growth) must agree with the CPU
 * on the first tokens of each window, and the caches must be bf16. */
static void bf16_cache_case(void) {
    choir_whisper m;
    build(&m, 1);
    float *mel = arr(2 * 80 * 3000, 1.0f, -0.2f), *enc = arr(2 * 1500 * 64, 0, 0);
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.sample_len = 8;
    choir_err err = {0};
    choir_whisper_result cpu[2][2], gpu[2][2];
    memset(cpu, 0, sizeof(cpu)), memset(gpu, 0, sizeof(gpu));
    int rc = choir_whisper_encode(&m, mel, 2, enc, &err);
    for (int k = 0; k < 2 && !rc; k++) {
        p.beam_size = k ? 3 : 1;
        rc = decode2(&m, mel, enc, false, &p, cpu[k], &err);
    }
    if (rc) {
        report(false, "bf16 caches: CPU reference: %s", err.msg);
        goto done;
    }
    if (attach(&m, 1, true, 2)) goto done;
    choir_whisper_gpu_stats st;
    choir_whisper_gpu_get_stats(&m, &st, NULL);
    for (int k = 0; k < 2; k++) {
        p.beam_size = k ? 3 : 1;
        if ((rc = decode2(&m, mel, enc, false, &p, gpu[k], &err))) {
            report(false, "bf16 caches: decode on the GPU: %s", err.msg);
            continue;
        }
        int first = 8, same = 0, n = 0;
        for (int w = 0; w < 2; w++)
            for (int t = 0; t < first && t < cpu[k][w].n_tokens; t++, n++)
                same += t < gpu[k][w].n_tokens && gpu[k][w].tokens[t] == cpu[k][w].tokens[t];
        if (same != n)
            for (int w = 0; w < 2; w++) {
                printf("INFO window %d CPU:", w);
                for (int t = 0; t < cpu[k][w].n_tokens; t++) printf(" %d", cpu[k][w].tokens[t]);
                printf("\nINFO window %d GPU:", w);
                for (int t = 0; t < gpu[k][w].n_tokens; t++) printf(" %d", gpu[k][w].tokens[t]);
                printf("\n");
            }
        report(st.kv_elem_bytes == 2 && n > 0 && same == n,
               "bf16 caches (%d bytes per element), %s: first %d tokens of 2 windows as the CPU's "
               "(f32 caches): %d of %d",
               st.kv_elem_bytes, k ? "beam search 3" : "greedy", first, same, n);
    }
    choir_whisper_gpu_detach(&m);
done:
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 2; w++)
            choir_whisper_result_clear(&cpu[k][w]), choir_whisper_result_clear(&gpu[k][w]);
    arrays_free();
}

/* --- word timestamps ----------------------------------------------------------- */

#ifdef CHOIR_TOKENIZER_STUB
#define WORDS_TEXT 14

/* The alignment pass of one window on this side (CPU, or the device when m
 * is attached): qk of the heads, then the words of 2 segments over 2400 mel
 * frames. */
static int words_run(const choir_whisper *m, const float *enc, const choir_whisper_head *heads, int H,
                     const int32_t *toks, int T, float *qk, choir_whisper_word_segment *segs,
                     choir_err *err) {
    static int tok_dummy;
    const choir_tokenizer *tok = (const choir_tokenizer *)&tok_dummy;
    choir_whisper_cross *c = choir_whisper_cross_create(m, enc, err);
    if (!c) return err->code ? err->code : -1;
    int rc = choir_whisper_cross_qk(m, c, toks, T, heads, H, qk, NULL, err);
    double last = 0.0;
    if (!rc)
        rc = choir_whisper_window_words(m, tok, c, 0, CHOIR_WHISPER_TRANSCRIBE, 2400, 1.5, &last, segs, 2,
                                        NULL, err);
    choir_whisper_cross_free(c);
    return rc;
}

static void words_case(int bf16) {
    choir_whisper m;
    build(&m, bf16);
    const choir_whisper_specials *sp = &m.sp;
    float *mel = arr(80 * 3000, 1.0f, -0.2f), *enc = arr(1500 * 64, 0, 0);
    /* Segment 0: 0-8 s with 8 text tokens; segment 1: 8-19 s with 6. */
    int32_t seg_tok[2][10], text[WORDS_TEXT];
    for (int k = 0; k < WORDS_TEXT; k++) text[k] = 440 + 37 * k;
    seg_tok[0][0] = sp->timestamp_begin, seg_tok[0][9] = sp->timestamp_begin + 400;
    seg_tok[1][0] = sp->timestamp_begin + 400, seg_tok[1][7] = sp->timestamp_begin + 950;
    memcpy(&seg_tok[0][1], text, 8 * sizeof(int32_t));
    memcpy(&seg_tok[1][1], text + 8, 6 * sizeof(int32_t));
    choir_whisper_word_segment cpu[2], gpu[2];
    for (int k = 0; k < 2; k++) {
        cpu[k] = (choir_whisper_word_segment){.start = 1.5 + 8.0 * k, .end = k ? 20.5 : 9.5,
                                             .tokens = seg_tok[k], .n_tokens = k ? 8 : 10};
        gpu[k] = cpu[k];
    }
    /* The pass choir_whisper_window_words makes: start sequence,
     * <|notimestamps|>, the text, <|endoftext|>. */
    int32_t toks[4 + WORDS_TEXT + 1] = {sp->sot, sp->lang0, sp->transcribe, sp->no_timestamps};
    memcpy(toks + 4, text, sizeof text);
    toks[4 + WORDS_TEXT] = sp->eot;
    int T = 4 + WORDS_TEXT + 1, A = m.dims.n_audio_ctx;
    choir_whisper_head heads[CHOIR_WHISPER_MAX_HEADS];
    int H = choir_whisper_alignment_heads(&m.dims, false, heads);
    float *qk_cpu = arr((int64_t)H * T * A, 0, 0), *qk_gpu = arr((int64_t)H * T * A, 0, 0);
    const char *wt = bf16 ? "bf16" : "f32";
    choir_err err = {0};
    int rc = choir_whisper_encode(&m, mel, 1, enc, &err);
    if (!rc) rc = words_run(&m, enc, heads, H, toks, T, qk_cpu, cpu, &err);
    if (rc) {
        report(false, "word timestamps %s: CPU reference: %s", wt, err.msg);
        goto done;
    }
    if (attach(&m, bf16, true, 1)) goto done;
    choir_whisper_gpu_stats st;
    choir_whisper_gpu_get_stats(&m, &st, NULL);
    rc = words_run(&m, enc, heads, H, toks, T, qk_gpu, gpu, &err);
    choir_whisper_gpu_detach(&m);
    if (rc) {
        report(false, "word timestamps %s on the GPU: %s", wt, err.msg);
        goto done;
    }
    double e = rel_l2(qk_gpu, qk_cpu, (size_t)H * T * A), tol = bf16 ? 2e-2 : 1e-4;
    report(e <= tol,
           "word timestamps %s: cross-attention logits of %d alignment heads x %d positions from the "
           "device (%d-byte cross keys) vs CPU: rel_l2 %.3e (tol %.0e)",
           wt, H, T, st.kv_elem_bytes, e, tol);
    int n = 0, same = 0;
    double dt = 0, dp = 0, frame = 0.02 * (bf16 ? 2 : 1) + 1e-9;
    for (int k = 0; k < 2; k++) {
        n += cpu[k].n_words;
        if (gpu[k].n_words != cpu[k].n_words) continue;
        for (int j = 0; j < cpu[k].n_words; j++) {
            const choir_whisper_word *a = &cpu[k].words[j], *b = &gpu[k].words[j];
            same += strcmp(a->text, b->text) == 0 && a->n_tokens == b->n_tokens &&
                    memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t)) == 0;
            dt = fmax(dt, fmax(fabs(a->start - b->start), fabs(a->end - b->end)));
            /* Relative: a random model's token probabilities are near 1 / V. */
            dp = fmax(dp, fabs((double)a->probability - b->probability) /
                              fmax((double)a->probability, 1e-30));
        }
        dt = fmax(dt, fmax(fabs(cpu[k].start - gpu[k].start), fabs(cpu[k].end - gpu[k].end)));
    }
    report(n >= 4 && same == n && dt <= frame && dp <= (bf16 ? 5e-2 : 1e-3),
           "word timestamps %s on the GPU == on the CPU: %d of %d words the same (first \"%s\" "
           "%.2f-%.2f s), times within %.3f s (tol %.2f), probabilities within %.1e relative",
           wt, same, n, n ? cpu[0].words[0].text : "", n ? cpu[0].words[0].start : 0.0,
           n ? cpu[0].words[0].end : 0.0, dt, frame, dp);
done:
    for (int k = 0; k < 2; k++) {
        choir_whisper_words_free(cpu[k].words, cpu[k].n_words);
        choir_whisper_words_free(gpu[k].words, gpu[k].n_words);
    }
    arrays_free();
}
#endif

/* Greedy decoding with the rules on the device (choir/backend_whisper.h:
 * filters, mass rule, argmax, bookkeeping; several steps per graph, the host
 * woken between them) against the CPU decoder and against the GPU with the
 * rules on the host (greedy_steps 0): the same tokens for 1, 3, 8 and 16
 * steps per wake-up, with timestamp rules and without (the bench's
 * settings), and the sums of log-probabilities within 1e-5 relative of the
 * CPU's (the logits differ by rounding; the device sums in another order). */
static void greedy_device_case(void) {
    choir_whisper m;
    build(&m, 0);
    float *mel = arr(2 * 80 * 3000, 1.0f, -0.2f), *enc = arr(2 * 1500 * 64, 0, 0);
    choir_err err = {0};
    int rc = choir_whisper_encode(&m, mel, 2, enc, &err);
    const int steps[5] = {0, 1, 3, 8, 16};
    for (int ts = 0; ts < 2 && !rc; ts++) {
        choir_whisper_params p;
        choir_whisper_default_params(&p);
        p.sample_len = 24;
        p.timestamps = ts == 0;
        p.suppress_blank = ts == 0;
        choir_whisper_result cpu[2] = {{0}}, gpu[2] = {{0}};
        if ((rc = decode2(&m, mel, enc, false, &p, cpu, &err))) {
            report(false, "greedy on the device: CPU reference: %s", err.msg);
            break;
        }
        for (int k = 0; k < 5; k++) {
            g_greedy_steps = steps[k];
            int a = attach(&m, 0, true, 2);
            g_greedy_steps = -1;
            if (a) break;
            if ((rc = decode2(&m, mel, enc, false, &p, gpu, &err))) {
                report(false, "greedy, rules on the %s: %s", steps[k] ? "device" : "host",
                       err.msg);
                choir_whisper_gpu_detach(&m);
                break;
            }
            choir_whisper_gpu_stats st;
            choir_whisper_gpu_get_stats(&m, &st, NULL);
            double de = 0;
            for (int w = 0; w < 2; w++) {
                double d = fabs((double)gpu[w].sum_logprob - cpu[w].sum_logprob) /
                           fmax(1.0, fabs((double)cpu[w].sum_logprob));
                if (d > de) de = d;
            }
            bool ok = same_tokens(&gpu[0], &cpu[0]) && same_tokens(&gpu[1], &cpu[1]) &&
                      de <= 1e-5 && st.graph_failures == 0;
            report(ok,
                   "greedy %s, rules on the %s (%d steps per wake-up): tokens as the CPU's "
                   "(%d and %d), sum logprob rel diff %.2e (tol 1e-05); %lld graph steps, "
                   "%lld direct",
                   ts ? "no timestamps" : "timestamp rules", steps[k] ? "device" : "host",
                   steps[k], gpu[0].n_tokens, gpu[1].n_tokens, de, (long long)st.steps_graph,
                   (long long)st.steps_direct);
            for (int w = 0; w < 2; w++) choir_whisper_result_clear(&gpu[w]);
            choir_whisper_gpu_detach(&m);
        }
        for (int w = 0; w < 2; w++) choir_whisper_result_clear(&cpu[w]);
    }
    if (rc && !err.msg[0]) report(false, "greedy on the device: encoder failed");
    arrays_free();
}

int main(void) {
    if (choir_cuda_device_count() == 0) {
        printf("SKIP no CUDA device visible\n");
        return 77;
    }
    /* Encoder reference once (f32 weights; the builder is deterministic). */
    {
        choir_whisper m;
        build(&m, 0);
        size_t out_n = 3 * 1500 * 64;
        float *mel = choir_alloc(CHOIR_MEM_OTHER, 3 * 80 * 3000 * sizeof(float));
        float *ref = choir_alloc(CHOIR_MEM_OTHER, out_n * sizeof(float));
        for (int i = 0; i < 3 * 80 * 3000; i++) mel[i] = rnd(1.0f) - 0.2f;
        choir_err err = {0};
        if (choir_whisper_encode(&m, mel, 3, ref, &err)) printf("cpu encode: %s\n", err.msg);
        arrays_free();
        g_rng = 0x2545F4914F6CDD1Dull;
        encoder_case(mel, ref, 3, 0, 1e-5);
        g_rng = 0x2545F4914F6CDD1Dull;
        encoder_case(mel, ref, 3, 1, 1e-2);
        /* The bf16 encoder above ran the defaults (attention kernel 3, GELU in
         * cublasLt's epilogue, warp-per-row layer norm); then each other kernel
         * of the bf16 attention, the first with the GELU pass (erf) and the
         * block-per-row layer norm, the former defaults. */
        static const char *names[] = {"", ", attention kernel 1, GELU erf pass, block layer norm",
                                      ", attention kernel 2", "", ", attention kernel 4"};
        for (int k = 1; k <= choir_cuda_attention_bf16_kernels() && k <= 4; k++) {
            if (k == 3) continue;
            choir_cuda_attention_bf16_set_kernel(k);
            choir_cuda_linear_bf16_set_gelu_epilogue(k != 1);
            choir_cuda_layer_norm_bf16_set_warp(k != 1);
            g_variant = names[k];
            g_rng = 0x2545F4914F6CDD1Dull;
            encoder_case(mel, ref, 3, 1, 1e-2);
        }
        g_variant = "";
        choir_cuda_attention_bf16_set_kernel(0);
        choir_cuda_linear_bf16_set_gelu_epilogue(true);
        choir_cuda_layer_norm_bf16_set_warp(true);
        choir_free(mel), choir_free(ref);
    }
    decoder_case(1, 0, 1e-4);
    decoder_case(4, 0, 1e-4);
    decoder_case(4, 1, 2e-2);
    all_positions_case();
    full_decode_case();
    bf16_cache_case();
    /* Last: its inputs come from the shared generator, and the bf16 case's
     * first tokens are near ties between timestamps on other inputs. */
    greedy_device_case();
#ifdef CHOIR_TOKENIZER_STUB
    words_case(0);
    words_case(1);
#endif
    choir_backend_free(g_cpu_backend);
    printf("%d of %d checks passed\n", g_cases - g_failures, g_cases);
    return g_failures ? 1 : 0;
}
