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
 *   - the codec decoder's audio of 8 frames, watermark included;
 *   - through the engine, the adapter on the GPU: one separation request,
 *     then two at once (one batch), of 0.25 s in two chunks, each target and
 *     residual against choir_sam_separate on the CPU (the model has a random
 *     T5, token ids from the text's bytes); each batch's device memory
 *     beyond the weights (the backend's peak) within the device bytes the
 *     engine admitted it with (n x choir_sam_job_device_bytes), its host
 *     arena within the arena.
 * Prints a table; exits 0 when every stage is within its tolerance, 1 when
 * one is not, 77 when no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/arena.h"
#include "choir/backend_sam.h"
#include "choir/cuda.h"
#include "choir/engine.h"
#include "choir/model.h"
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

/* --- through the engine ------------------------------------------------- */

/* The adapter (choir_model_sam_audio) over a model built in memory: the
 * engine places it on the GPU (ops.gpu), admits each batch by the adapter's
 * host and device estimates (estimate_device: choir_sam_job_device_bytes)
 * and runs it there. The wrapper's run_batch records what each batch held on
 * the device beyond the weights (the backend's measured peak) against the
 * device bytes the engine reserved for it (n x the largest estimate), and
 * its host arena's peak against the arena. */
#define ENG_N 12000 /* two chunks of 0.2 s over 0.05 s */
#define ENG_MAX 4

static const sam_random_dims *g_dims;
static choir_sam *g_replica;
static int64_t g_replica_weights; /* its device bytes once built: the weights */
static struct {
    int n[ENG_MAX];
    int64_t dev_peak[ENG_MAX], dev_reserved[ENG_MAX];
    size_t arena_peak[ENG_MAX], arena_cap[ENG_MAX];
    int on_gpu[ENG_MAX], rc[ENG_MAX];
    int batches;
} g_runs;

static void *random_load(const char *dir, const choir_model_options *o, choir_err *err) {
    (void)dir;
    g_replica = sam_random_model(g_dims, 5, o ? o->device : 0, 0, err);
    g_replica_weights = g_replica ? choir_sam_device_bytes(g_replica, NULL) : 0;
    return g_replica;
}
static void random_free(void *w) {
    sam_random_free(w);
    g_replica = NULL;
}
static int64_t random_device_bytes(const void *w) { return choir_sam_device_bytes(w, NULL); }

static int measured_run(void *w, choir_request *const *reqs, int n, choir_arena *arena, choir_err *err) {
    choir_sam *m = w;
    int64_t est = 0;
    for (int i = 0; i < n; i++) {
        int64_t e = choir_model_sam_audio.estimate_device(w, reqs[i]);
        if (e > est) est = e;
    }
    /* Beyond the weights: the context's kernel scratch, grown by an earlier
     * batch and kept, counts against this one's estimate too. */
    int64_t held = g_replica_weights, peak = 0;
    choir_backend_mem_reset_peak(m->be);
    int rc = choir_model_sam_audio.run_batch(w, reqs, n, arena, err);
    choir_sam_device_bytes(m, &peak);
    int k = g_runs.batches++;
    if (k < ENG_MAX) {
        g_runs.n[k] = n;
        g_runs.dev_peak[k] = peak - held;
        g_runs.dev_reserved[k] = est * n;
        g_runs.arena_peak[k] = choir_arena_high_water(arena);
        g_runs.arena_cap[k] = choir_arena_capacity(arena);
        g_runs.on_gpu[k] = !choir_backend_is_host(m->be);
        g_runs.rc[k] = rc;
    }
    return rc;
}

typedef struct eng_out {
    float t[ENG_N], r[ENG_N];
    int64_t n_t, n_r;
    choir_sam_request x;
} eng_out;

static int take_target(void *user, const choir_output *o) {
    eng_out *g = user;
    if (o->n_samples > 0 && g->n_t + o->n_samples <= ENG_N) {
        memcpy(g->t + g->n_t, o->samples, (size_t)o->n_samples * sizeof(float));
        g->n_t += o->n_samples;
    }
    return 0;
}

static void take_residual(void *user, const float *r, int64_t n, int64_t offset) {
    eng_out *g = user;
    if (offset + n <= ENG_N) {
        memcpy(g->r + offset, r, (size_t)n * sizeof(float));
        if (offset + n > g->n_r) g->n_r = offset + n;
    }
}

/* One request, then two at once (one batch), through an engine serving the
 * adapter on the GPU; each output against choir_sam_separate of the same
 * weights on the CPU. */
static void run_engine(choir_sam *cpu) {
    static const char *const prompt[2] = {"man speaking", "a dog barking"};
    static eng_out out[2];
    static float x[2][ENG_N], want_t[ENG_N], want_r[ENG_N];
    choir_model_ops ops = choir_model_sam_audio;
    ops.probe = NULL;
    ops.load = random_load;
    ops.free = random_free;
    ops.device_bytes = random_device_bytes;
    ops.run_batch = measured_run;
    choir_err err = {0};
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.memory_budget = (int64_t)4 << 30;
    ep.max_batch = 2;
    ep.wait_short_ms = 300;
    choir_engine *e = choir_engine_create(&ep, &err);
    if (!e || choir_engine_add_model(e, "sam", "/nonexistent/sam-random", &ops, &err)) {
        printf("  engine: %s\n", err.msg);
        g_fail = 1;
        choir_engine_free(e);
        return;
    }
    fill(x[0], ENG_N, 21, -0.6f, 0.6f);
    fill(x[1], ENG_N, 22, -0.6f, 0.6f);
    for (int round = 0; round < 2; round++) {
        int n = round + 1;
        choir_ticket *t[2] = {NULL, NULL};
        for (int i = 0; i < n; i++) {
            memset(&out[i], 0, sizeof out[i]);
            out[i].x = (choir_sam_request){.description = prompt[i], .steps = 2, .on_residual = take_residual,
                                          .residual_user = &out[i]};
            choir_job j;
            memset(&j, 0, sizeof j);
            j.req.task = CHOIR_TASK_STS;
            j.req.in.sts = (choir_sts_input){.samples = x[i], .n_samples = ENG_N, .sample_rate = CHOIR_SAM_RATE,
                                             .chunk_seconds = 0.2, .overlap_seconds = 0.05, .has_chunk = 1,
                                             .has_overlap = 1};
            j.req.extra = &out[i].x;
            j.priority = CHOIR_PRIORITY_NORMAL;
            j.on_output = take_target;
            j.user = &out[i];
            if (!(t[i] = choir_engine_submit(e, &j, NULL, &err))) printf("  engine submit: %s\n", err.msg);
        }
        for (int i = 0; i < n; i++) {
            int st = t[i] ? choir_ticket_wait(t[i], 120, &err) : CHOIR_EINVAL;
            choir_ticket_free(t[i]);
            char what[64];
            snprintf(what, sizeof what, "engine, %s of %d: status", i ? "second" : "first", n);
            if (st || out[i].n_t != ENG_N || out[i].n_r != ENG_N) {
                printf("  %-34s %d (%s), %lld + %lld samples  FAIL\n", what, st, st ? err.msg : "",
                       (long long)out[i].n_t, (long long)out[i].n_r);
                g_fail = 1;
                continue;
            }
            choir_sam_params p;
            choir_sam_default_params(&p);
            p.steps = 2;
            p.chunk_seconds = 0.2;
            p.overlap_seconds = 0.05;
            if (choir_sam_separate(cpu, x[i], ENG_N, prompt[i], NULL, 0, &p, want_t, want_r, &err)) {
                printf("  cpu separate: %s\n", err.msg);
                g_fail = 1;
                continue;
            }
            snprintf(what, sizeof what, "engine batch of %d, #%d target", n, i + 1);
            report(what, rel(out[i].t, want_t, ENG_N), 1e-4);
            snprintf(what, sizeof what, "engine batch of %d, #%d residual", n, i + 1);
            report(what, rel(out[i].r, want_r, ENG_N), 1e-4);
        }
    }
    choir_engine_stats st;
    choir_engine_get_stats(e, &st);
    choir_engine_device dev[2];
    int nd = choir_engine_devices(e, dev, 2);
    /* A batch whose host arena overflowed (CHOIR_ENOMEM before any audio)
     * is retried by the engine; only the finished ones count. */
    int ok = st.batch_size[1] == 1 && st.batch_size[2] == 1 && nd == 2 && dev[1].batches == 2;
    printf("  %-34s sizes 1, 2: %llu, %llu; on %s: %llu  %s\n", "engine batches", (unsigned long long)st.batch_size[1],
           (unsigned long long)st.batch_size[2], nd > 1 ? dev[1].name : "-",
           nd > 1 ? (unsigned long long)dev[1].batches : 0ull, ok ? "ok" : "FAIL");
    if (!ok) g_fail = 1;
    for (int k = 0; k < g_runs.batches && k < ENG_MAX; k++) {
        if (g_runs.rc[k] == CHOIR_ENOMEM) {
            printf("  engine batch of %d: its host arena of %.3f MB overflowed (retried)\n", g_runs.n[k],
                   (double)g_runs.arena_cap[k] / 1e6);
            continue;
        }
        int fits = !g_runs.rc[k] && g_runs.on_gpu[k] && g_runs.dev_peak[k] > 0 &&
                   g_runs.dev_peak[k] <= g_runs.dev_reserved[k] && g_runs.arena_peak[k] <= g_runs.arena_cap[k];
        printf("  engine batch of %d: device %.3f MB held of %.3f MB estimated (%.0f%%), host arena %.3f of %.3f MB"
               "  %s\n",
               g_runs.n[k], (double)g_runs.dev_peak[k] / 1e6, (double)g_runs.dev_reserved[k] / 1e6,
               g_runs.dev_reserved[k] > 0 ? 100.0 * (double)g_runs.dev_peak[k] / (double)g_runs.dev_reserved[k] : 0.0,
               (double)g_runs.arena_peak[k] / 1e6, (double)g_runs.arena_cap[k] / 1e6, fits ? "ok" : "FAIL");
        if (!fits) g_fail = 1;
    }
    choir_engine_free(e);
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
    d.t5_layers = 2, d.t5_heads = 2, d.t5_d_kv = 8, d.t5_d_ff = 32, d.t5_vocab = 64;
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
    g_dims = &d;
    run_engine(cpu);
    sam_random_free(cpu);
    printf("sam_audio_gpu_check: %s\n", g_fail ? "FAIL" : "PASS");
    return g_fail;
}
