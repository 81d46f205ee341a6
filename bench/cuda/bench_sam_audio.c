/* SAM-Audio on a GPU at the published sizes, random weights built in memory
 * (sam_random.c: the published codec with its watermark path, the DiT at
 * small 1536x12, base 2048x16, large 2816x22), so it runs where choir's file
 * and JSON libraries are not installed (the standalone CUDA build).
 *
 * One separation pass of --seconds of audio, as `choir sep` runs a chunk:
 * codec encode, the full ODE (midpoint, 16 steps = 32 DiT evaluations by
 * default) on one item with 8 text rows, then two decodes (target and
 * residual). Each stage is run once to warm up, then timed (the evaluation
 * as the median of --evals single evaluations; encode, ODE and decode once
 * more). Prints one line per size in the format bench/peers/sam_audio_torch.py
 * prints, so the two can be read side by side:
 *   impl size | encode_s eval_ms ode_s decode_s total_s rtf peak_gb
 * f32 weights and activations, no TF32 (--bf16: matrices stored as bf16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/pool.h"
#include "choir/sam_audio.h"
#include "models/sam_audio/sam_random.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run_size(const char *size, double seconds, int evals, int steps, int device, int bf16) {
    int64_t D, H, L;
    if (!strcmp(size, "small")) D = 1536, H = 12, L = 12;
    else if (!strcmp(size, "base")) D = 2048, H = 16, L = 16;
    else if (!strcmp(size, "large")) D = 2816, H = 22, L = 22;
    else return fprintf(stderr, "bench_sam_audio_gpu: unknown size %s\n", size), 2;
    sam_random_dims d;
    sam_random_published(&d, D, H, L);
    choir_err err = {0};
    double t0 = choir_now_s();
    choir_sam *m = sam_random_model(&d, 42, device, bf16, &err);
    if (!m) return fprintf(stderr, "bench_sam_audio_gpu: %s\n", err.msg), 1;
    double t_build = choir_now_s() - t0;
    int64_t n = (int64_t)(seconds * CHOIR_SAM_RATE), hop = m->codec.hop, T = (n + hop - 1) / hop, C = m->codec.cb;
    int Lt = 8;
    float *x = malloc((size_t)n * 4), *lat = malloc((size_t)(T * C) * 4), *noise = malloc((size_t)(T * 2 * C) * 4);
    float *xs = malloc((size_t)(T * 2 * C) * 4), *v = malloc((size_t)(T * 2 * C) * 4);
    float *text = malloc((size_t)(Lt * d.text_dim) * 4), *y = malloc((size_t)(T * hop) * 4), *half = malloc((size_t)(T * C) * 4);
    for (int64_t i = 0; i < n; i++) x[i] = 0.3f * (float)((i * 7919 % 2003) / 1001.5 - 1.0);
    for (int64_t i = 0; i < Lt * d.text_dim; i++) text[i] = (float)((i * 131 % 97) / 48.5 - 1.0);
    choir_sam_noise(m, 42, T, noise);
    choir_sam_params p;
    choir_sam_default_params(&p);
    p.steps = steps;
    int rc = 0;
    /* encode: warm-up, then timed */
    double t_enc = 0, t_ode = 0, t_dec = 0, t_eval = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        t0 = choir_now_s();
        rc = choir_sam_encode(m, x, n, lat, &err);
        t_enc = choir_now_s() - t0;
    }
    choir_sam_item it = {.frames = T, .valid_frames = T, .features = lat, .text = text, .text_len = Lt};
    double *ev = calloc((size_t)(evals + 1), sizeof *ev);
    for (int k = 0; k <= evals && !rc; k++) {
        float tv = 0.5f;
        const float *xc = noise;
        t0 = choir_now_s();
        rc = choir_sam_velocity(m, &it, 1, &tv, &xc, &v, &err);
        if (k) ev[k - 1] = choir_now_s() - t0;
    }
    if (!rc) {
        qsort(ev, (size_t)evals, sizeof *ev, cmp_d);
        t_eval = ev[evals / 2];
    }
    for (int k = 0; k < 2 && !rc; k++) {
        memcpy(xs, noise, (size_t)(T * 2 * C) * 4);
        float *xp = xs;
        t0 = choir_now_s();
        rc = choir_sam_ode(m, &it, 1, &xp, &p, &err);
        t_ode = choir_now_s() - t0;
    }
    for (int k = 0; k < 2 && !rc; k++) {
        t0 = choir_now_s();
        for (int part = 0; part < 2 && !rc; part++) {
            for (int64_t t = 0; t < T; t++) memcpy(half + t * C, xs + t * 2 * C + part * C, (size_t)C * 4);
            rc = choir_sam_decode(m, half, T, NULL, y, &err);
        }
        t_dec = choir_now_s() - t0;
    }
    if (rc) {
        fprintf(stderr, "bench_sam_audio_gpu %s: %s\n", size, err.msg);
    } else {
        double total = t_enc + t_ode + t_dec;
        double peak = (double)choir_backend_mem_peak(m->be) / (1 << 30);
        printf("choir-%s%s %-5s | %7.3f %8.2f %7.3f %8.3f %7.3f %6.3f %7.2f   (%lld frames, %d evals, built in %.1f s)\n",
               choir_sam_backend_name(m), bf16 ? "-bf16" : "", size, t_enc, 1e3 * t_eval, t_ode, t_dec, total,
               total / seconds, peak, (long long)T, p.method == CHOIR_SAM_MIDPOINT ? 2 * steps : steps, t_build);
        fflush(stdout);
    }
    free(x), free(lat), free(noise), free(xs), free(v), free(text), free(y), free(half), free(ev);
    sam_random_free(m);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *size = "all";
    double seconds = 10;
    int evals = 5, steps = 16, device = 1, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) size = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--evals") && i + 1 < argc) evals = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu")) device = 0;
        else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else {
            fprintf(stderr, "usage: bench_sam_audio_gpu [--size small|base|large|all] [--seconds 10] [--evals 5]\n"
                            "         [--steps 16] [--bf16] [--cpu]\n");
            return 2;
        }
    }
    if (evals < 1 || steps < 1 || !(seconds > 0)) return 2;
    printf("impl size  | encode_s  eval_ms   ode_s decode_s total_s    rtf peak_gb   (%.1f s of audio, midpoint %d steps)\n",
           seconds, steps);
    const char *all[] = {"small", "base", "large"};
    int rc = 0;
    if (!strcmp(size, "all"))
        for (int i = 0; i < 3; i++) rc |= run_size(all[i], seconds, evals, steps, device, bf16);
    else
        rc = run_size(size, seconds, evals, steps, device, bf16);
    return rc;
}
