/* SAM-Audio on CUDA against the CPU, stage by stage, on one random model
 * (sam_random.c) at small widths with the real structure: the codec's
 * encoder (8 wide, hop 320) and its full 1536-wide decoder with the
 * watermark path, a DiT 64 wide with 4 heads and 2 layers. The same host
 * weights are attached once to the CPU backend and once to CUDA device 0.
 *
 * Checked (relative L2, f32 on both sides, no TF32):
 *   - each of SAM-Audio's own operations (choir/backend_sam.h) on random data;
 *   - the codec encoder's latent of 2400 samples (reflect padding);
 *   - one DiT evaluation of a ragged batch of two items (8 and 5 frames,
 *     3 and 5 text rows) at t = 0.3 and 0.7;
 *   - the ODE (midpoint, 2 steps) of that batch;
 *   - the codec decoder's audio of 8 frames, watermark included.
 * Prints a table; exits 0 when every stage is within its tolerance, 1 when
 * one is not, 77 when no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/backend_sam.h"
#include "choir/cuda.h"
#include "choir/sam_audio.h"
#include "models/sam_audio/sam_random.h"

static int g_fail;

static double rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void report(const char *what, double e, double tol) {
    int ok = e <= tol;
    if (!ok) g_fail = 1;
    printf("  %-34s rel-L2 %.3e (tol %.0e) %s\n", what, e, tol, ok ? "ok" : "FAIL");
}

static void fill(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
}

/* --- the operations ----------------------------------------------------- */

typedef struct pair {
    choir_stream *s;
    choir_backend *be;
} pair;

static float *dev_copy(pair *p, const float *h, int64_t n) {
    float *d = choir_stream_floats(p->s, n, "check");
    choir_op_upload(p->s, d, h, (size_t)n * sizeof(float));
    return d;
}

static void dev_get(pair *p, float *h, const float *d, int64_t n) { choir_op_download(p->s, h, d, (size_t)n * sizeof(float)); }

static void check_ops(choir_backend *cpu, choir_backend *gpu) {
    choir_err err = {0};
    pair c = {choir_stream_create(cpu, &err), cpu}, g = {choir_stream_create(gpu, &err), gpu};
    choir_stream_reserve(c.s, 64 << 20, 0, &err);
    choir_stream_reserve(g.s, 64 << 20, 0, &err);
    int64_t C = 7, T = 301, n = C * T, H = 512, In = 512, TL = 37, D = 96, R = 11;
    float *x = malloc((size_t)n * 4), *a = malloc((size_t)C * 4), *yc = malloc((size_t)(4 * H * In) * 4);
    float *yg = malloc((size_t)(4 * H * In) * 4);
    fill(x, n, 1, -3, 3);
    fill(a, C, 2, 0.3f, 1.7f);
    /* snake, elu */
    float *xc = dev_copy(&c, x, n), *xg = dev_copy(&g, x, n), *ac = dev_copy(&c, a, C), *ag = dev_copy(&g, a, C);
    choir_op_sam_snake(c.s, xc, 1, C, T, ac), choir_op_sam_snake(g.s, xg, 1, C, T, ag);
    dev_get(&c, yc, xc, n), dev_get(&g, yg, xg, n);
    report("op sam_snake", rel(yg, yc, n), 1e-6);
    choir_op_sam_elu(c.s, xc, n), choir_op_sam_elu(g.s, xg, n);
    dev_get(&c, yc, xc, n), dev_get(&g, yg, xg, n);
    report("op sam_elu", rel(yg, yc, n), 1e-6);
    /* pads: a copy, so exact, from the same input on both sides (xc and xg
     * differ by now, by the rounding of snake and elu) */
    choir_op_upload(c.s, xc, x, (size_t)n * sizeof(float));
    choir_op_upload(g.s, xg, x, (size_t)n * sizeof(float));
    for (int reflect = 0; reflect < 2; reflect++) {
        int64_t l = 5, r = 9, To = (l + T + r) * C;
        float *pc = choir_stream_floats(c.s, To, "pad"), *pg = choir_stream_floats(g.s, To, "pad");
        choir_op_sam_pad(c.s, xc, C, T, l, r, reflect, pc), choir_op_sam_pad(g.s, xg, C, T, l, r, reflect, pg);
        dev_get(&c, yc, pc, To), dev_get(&g, yg, pg, To);
        report(reflect ? "op sam_pad (reflect)" : "op sam_pad (zeros)", rel(yg, yc, To), 0);
    }
    /* lstm at the watermark's width */
    float *w = malloc((size_t)(4 * H * In) * 4), *u = malloc((size_t)(4 * H * H) * 4), *b1 = malloc((size_t)(4 * H) * 4);
    float *xl = malloc((size_t)(TL * In) * 4);
    fill(w, 4 * H * In, 3, -0.05f, 0.05f), fill(u, 4 * H * H, 4, -0.05f, 0.05f), fill(b1, 4 * H, 5, -0.2f, 0.2f);
    fill(xl, TL * In, 6, -1, 1);
    const float *wc = dev_copy(&c, w, 4 * H * In), *wg = dev_copy(&g, w, 4 * H * In);
    const float *uc = dev_copy(&c, u, 4 * H * H), *ug = dev_copy(&g, u, 4 * H * H);
    const float *bc = dev_copy(&c, b1, 4 * H), *bg = dev_copy(&g, b1, 4 * H);
    const float *lc = dev_copy(&c, xl, TL * In), *lg = dev_copy(&g, xl, TL * In);
    float *oc = choir_stream_floats(c.s, TL * H, "lstm"), *og = choir_stream_floats(g.s, TL * H, "lstm");
    choir_op_sam_lstm(c.s, lc, TL, In, H, wc, uc, bc, bc, oc), choir_op_sam_lstm(g.s, lg, TL, In, H, wg, ug, bg, bg, og);
    dev_get(&c, yc, oc, TL * H), dev_get(&g, yg, og, TL * H);
    report("op sam_lstm (H 512, 37 steps)", rel(yg, yc, TL * H), 1e-5);
    /* modulate, gated add, axpy */
    float *hc = dev_copy(&c, xl, R * D), *hg = dev_copy(&g, xl, R * D);
    const float *sc = dev_copy(&c, w, D), *sg = dev_copy(&g, w, D), *kc = dev_copy(&c, u, D), *kg = dev_copy(&g, u, D);
    choir_op_sam_modulate(c.s, hc, R, D, sc, kc), choir_op_sam_modulate(g.s, hg, R, D, sg, kg);
    choir_op_sam_gated_add(c.s, hc, lc, R, D, kc), choir_op_sam_gated_add(g.s, hg, lg, R, D, kg);
    choir_op_sam_axpy(c.s, hc, hc, 0.3f, lc, R * D), choir_op_sam_axpy(g.s, hg, hg, 0.3f, lg, R * D);
    dev_get(&c, yc, hc, R * D), dev_get(&g, yg, hg, R * D);
    report("op modulate + gated_add + axpy", rel(yg, yc, R * D), 1e-6);
    if (choir_stream_sync(g.s, &err) || choir_stream_status(c.s, &err)) {
        printf("  ops: %s\n", err.msg);
        g_fail = 1;
    }
    choir_stream_free(c.s), choir_stream_free(g.s);
    free(x), free(a), free(yc), free(yg), free(w), free(u), free(b1), free(xl);
}

/* --- the model, stage by stage ------------------------------------------ */

static int run_model(choir_sam *cpu, choir_sam *gpu) {
    choir_err err = {0};
    int64_t hop = cpu->codec.hop, C = cpu->codec.cb, C2 = 2 * C, Dt = cpu->dit.text_dim;
    int64_t n = 2400, T = (n + hop - 1) / hop, T1 = T, T2 = 5, L = T * hop;
    int L1 = 3, L2 = 5, rc = 1;
    float *x = malloc((size_t)n * 4), *lc = malloc((size_t)(T * C) * 4), *lg = malloc((size_t)(T * C) * 4);
    float *text = malloc((size_t)((L1 + L2) * Dt) * 4), *xs = malloc((size_t)((T1 + T2) * C2) * 4);
    float *vc = malloc((size_t)((T1 + T2) * C2) * 4), *vg = malloc((size_t)((T1 + T2) * C2) * 4);
    float *yc = malloc((size_t)L * 4), *yg = malloc((size_t)L * 4);
    fill(x, n, 11, -0.6f, 0.6f);
    if (choir_sam_encode(cpu, x, n, lc, &err) || choir_sam_encode(gpu, x, n, lg, &err)) {
        printf("  encode: %s\n", err.msg);
        goto done;
    }
    report("codec encoder latent", rel(lg, lc, T * C), 1e-4);

    fill(text, (L1 + L2) * Dt, 12, -1, 1);
    fill(xs, (T1 + T2) * C2, 13, -2, 2);
    choir_sam_item it[2] = {{.frames = T1, .valid_frames = T1, .features = lc, .text = text, .text_len = L1},
                            {.frames = T2, .valid_frames = T2, .features = lc, .text = text + L1 * Dt, .text_len = L2}};
    float tv[2] = {0.3f, 0.7f};
    const float *xin[2] = {xs, xs + T1 * C2};
    float *oc[2] = {vc, vc + T1 * C2}, *og[2] = {vg, vg + T1 * C2};
    if (choir_sam_velocity(cpu, it, 2, tv, xin, oc, &err) || choir_sam_velocity(gpu, it, 2, tv, xin, og, &err)) {
        printf("  velocity: %s\n", err.msg);
        goto done;
    }
    report("DiT evaluation (batch 8 + 5 frames)", rel(vg, vc, (T1 + T2) * C2), 1e-4);

    choir_sam_params p;
    choir_sam_default_params(&p);
    p.steps = 2;
    memcpy(vc, xs, (size_t)((T1 + T2) * C2) * 4);
    memcpy(vg, xs, (size_t)((T1 + T2) * C2) * 4);
    if (choir_sam_ode(cpu, it, 2, oc, &p, &err) || choir_sam_ode(gpu, it, 2, og, &p, &err)) {
        printf("  ode: %s\n", err.msg);
        goto done;
    }
    report("ODE midpoint 2 steps (batch)", rel(vg, vc, (T1 + T2) * C2), 1e-4);

    if (choir_sam_decode(cpu, lc, T, NULL, yc, &err) || choir_sam_decode(gpu, lc, T, NULL, yg, &err)) {
        printf("  decode: %s\n", err.msg);
        goto done;
    }
    report("codec decoder audio (watermark on)", rel(yg, yc, L), 1e-4);
    rc = 0;
done:
    free(x), free(lc), free(lg), free(text), free(xs), free(vc), free(vg), free(yc), free(yg);
    return rc;
}

int main(void) {
    if (choir_cuda_device_count() < 1) {
        printf("sam_audio_gpu_check: no CUDA device, skipped\n");
        return 77;
    }
    choir_err err = {0};
    sam_random_dims d;
    memset(&d, 0, sizeof d);
    static const int enc[4] = {2, 4, 4, 10}, dec[4] = {10, 4, 4, 2};
    d.enc_dim = 8, d.n_enc = 4, d.latent = 32, d.cb = 8, d.dec_dim = 1536, d.n_dec = 4, d.watermark = 1;
    memcpy(d.enc_rates, enc, sizeof enc);
    memcpy(d.dec_rates, dec, sizeof dec);
    d.D = 64, d.H = 4, d.L = 2, d.text_dim = 16, d.freq_dim = 16, d.anchor_dim = 8, d.max_pos = 512;
    choir_sam *cpu = sam_random_model(&d, 5, 0, 0, &err);
    choir_sam *gpu = cpu ? sam_random_model(&d, 5, 1, 0, &err) : NULL;
    if (!cpu || !gpu) {
        printf("sam_audio_gpu_check: %s\n", err.msg);
        sam_random_free(cpu);
        return 1;
    }
    printf("sam_audio_gpu_check: %s vs %s\n", choir_sam_backend_name(gpu), choir_sam_backend_name(cpu));
    check_ops(cpu->be, gpu->be);
    if (run_model(cpu, gpu)) g_fail = 1;
    sam_random_free(gpu);
    sam_random_free(cpu);
    printf("sam_audio_gpu_check: %s\n", g_fail ? "FAIL" : "PASS");
    return g_fail;
}
