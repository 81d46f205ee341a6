/* `choir dev parity mossformer2`: compares the MossFormer2_SE_48K port with
 * the fixture's reference data (../shared/fixtures/mossformer2).
 *
 * Cases short and short-odd (one pass): fbank, features, mask and enhanced
 * audio, plus the stored intermediate activations of short; case long (the
 * 4-s window plan): features, mask and iSTFT output of windows 0 and 6 and
 * the stitched audio. Errors are max|ours - ref| / max(max|ref|, floor), so
 * the mask's ReLU zeros that flip to tiny values do not count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/mossformer2.h"
#include "choir/safetensors.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

typedef struct pm_tol {
    double fbank, features, net, mask, audio;
} pm_tol;

static const char pm_synopsis[] =
    "usage: choir dev parity mossformer2 --model MODEL_DIR --fixture FIXTURE_DIR --audio-dir AUDIO_DIR\n"
    "         [--case short|short-odd|long] [--tol-mask 2e-4] [--tol-audio 1e-4]\n"
    "         [--tol-net 2e-4] [--tol-features 5e-4]\n\n"
    "Runs the fixture's cases and compares every stored tensor. fbank/features are\n"
    "absolute errors; net.*, mask and audio are max|diff| relative to the reference's\n"
    "largest value (with an absolute floor). Ends with 'parity: PASS' (exit 0) or\n"
    "'parity: FAIL' (exit 1).\n\n";

/* Prints one comparison and returns 1 when it passes. rel != 0: relative to max|ref|. */
static int pm_check(const char *what, const float *ours, const float *ref, int64_t n, double tol, int rel) {
    double maxd = 0, maxr = 0, num = 0, den = 0;
    int finite = 1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ours[i])) finite = 0;
        double d = fabs((double)ours[i] - ref[i]);
        if (d > maxd) maxd = d;
        if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    double floor_ = 1e-6;
    double err = rel ? maxd / (maxr > floor_ ? maxr : floor_) : maxd;
    int ok = finite && err <= tol;
    printf("  %-22s %s %.3e (tol %.0e, rel-L2 %.2e) %s\n", what, rel ? "max/ref" : "max abs", err, tol,
           den > 0 ? sqrt(num / den) : sqrt(num), ok ? "ok" : "FAIL");
    return ok;
}

static const float *pm_ref(const choir_st *ref, const char *key, int64_t n) {
    const choir_st_tensor *t = choir_st_find(ref, key);
    if (!t || t->numel != n || t->dtype != CHOIR_DTYPE_F32) {
        printf("  reference tensor %s missing or not %lld float32 values\n", key, (long long)n);
        return NULL;
    }
    return t->data;
}

/* The case's input: audio_i16 / 32768 (exact), cross-checked against the
 * decoded source file for the cases cut from it. */
static float *pm_input(const choir_st *ref, const char *audio_dir, int from_file, int64_t *n) {
    const choir_st_tensor *t = choir_st_find(ref, "audio_i16");
    if (!t || t->dtype != CHOIR_DTYPE_I16 || t->ndim != 1) {
        printf("  reference tensor audio_i16 missing\n");
        return NULL;
    }
    *n = t->numel;
    float *x = choir_alloc(CHOIR_MEM_IO, (size_t)*n * sizeof(float));
    if (!x) return NULL;
    const int16_t *s = t->data;
    for (int64_t i = 0; i < *n; i++) x[i] = (float)s[i] / 32768.0f;
    if (from_file) {
        char path[4096];
        snprintf(path, sizeof path, "%s/jfk48k_3s.wav", audio_dir);
        choir_audio a = {0};
        choir_err err = {0};
        if (choir_audio_decode_file(path, NULL, &a, &err) != 0) {
            printf("  %s\n", err.msg);
            choir_free(x);
            return NULL;
        }
        int same = a.channels == 1 && a.rate == CHOIR_MF2_RATE && a.frames >= *n;
        for (int64_t i = 0; same && i < *n; i++) same = a.samples[i] == x[i];
        choir_audio_clear(&a);
        printf("  input: %lld samples, decoded %s %s\n", (long long)*n, path, same ? "matches" : "DIFFERS");
        if (!same) {
            choir_free(x);
            return NULL;
        }
    }
    return x;
}

static int pm_one_pass(const choir_mf2 *m, const choir_st *ref, const float *x, int64_t n, int traced,
                       const pm_tol *tol) {
    const int64_t T = choir_mf2_frames(n), D = CHOIR_MF2_DIM;
    float *fb = choir_alloc(CHOIR_MEM_IO, (size_t)(T * CHOIR_MF2_MELS) * sizeof(float));
    float *feat = choir_alloc(CHOIR_MEM_IO, (size_t)(T * CHOIR_MF2_FEATS) * sizeof(float));
    float *mask = choir_alloc(CHOIR_MEM_IO, (size_t)(T * CHOIR_MF2_BINS) * sizeof(float));
    float *y = choir_alloc(CHOIR_MEM_IO, (size_t)n * sizeof(float));
    float *tr = choir_alloc(CHOIR_MEM_IO, (size_t)(5 * T * D) * sizeof(float));
    int ok = 0;
    choir_err err = {0};
    if (!fb || !feat || !mask || !y || !tr) goto done;
    choir_mf2_trace trace = {tr, tr + T * D, tr + 2 * T * D, tr + 3 * T * D, tr + 4 * T * D};
    const float *r;
    ok = 1;
    if (choir_mf2_features(m, x, n, 0.0f, 0, fb, feat, &err) < 0 ||
        choir_mf2_mask(m, feat, T, mask, &trace, &err) < 0 ||
        choir_mf2_apply_mask(m, x, n, mask, T, y, &err) < 0) {
        printf("  %s\n", err.msg);
        ok = 0;
        goto done;
    }
    ok &= (r = pm_ref(ref, "fbank", T * CHOIR_MF2_MELS)) && pm_check("fbank", fb, r, T * CHOIR_MF2_MELS, tol->fbank, 0);
    ok &= (r = pm_ref(ref, "features", T * CHOIR_MF2_FEATS)) &&
          pm_check("features", feat, r, T * CHOIR_MF2_FEATS, tol->features, 0);
    if (traced) {
        static const char *names[5] = {"net.enc", "net.layer0_flash", "net.layer0_fsmn", "net.mdl_out",
                                       "net.gate_out"};
        for (int i = 0; i < 5; i++)
            ok &= (r = pm_ref(ref, names[i], T * D)) && pm_check(names[i], tr + i * T * D, r, T * D, tol->net, 1);
    }
    ok &= (r = pm_ref(ref, "mask", T * CHOIR_MF2_BINS)) && pm_check("mask", mask, r, T * CHOIR_MF2_BINS, tol->mask, 1);
    ok &= (r = pm_ref(ref, "enhanced", n)) && pm_check("enhanced", y, r, n, tol->audio, 1);
    /* The whole-segment entry point must give the same audio as the stages. */
    if (choir_mf2_enhance_reference(m, x, n, tr, NULL, NULL, NULL, &err) < 0) {
        printf("  %s\n", err.msg);
        ok = 0;
    } else if (r) {
        ok &= pm_check("enhanced (entry point)", tr, r, n, tol->audio, 1);
    }
done:
    choir_free(fb);
    choir_free(feat);
    choir_free(mask);
    choir_free(y);
    choir_free(tr);
    return ok;
}

typedef struct pm_windows {
    const choir_st *ref;
    const pm_tol *tol;
    int ok, seen;
} pm_windows;

static void pm_on_window(void *user, int k, const float *features, const float *mask, int64_t T,
                         const float *out, int64_t W) {
    pm_windows *pw = user;
    if (k != 0 && k != 6) return;
    char key[64], what[64];
    const float *r;
    pw->seen++;
    snprintf(key, sizeof key, "win%d.features", k);
    snprintf(what, sizeof what, "win%d features", k);
    pw->ok &= (r = pm_ref(pw->ref, key, T * CHOIR_MF2_FEATS)) &&
              pm_check(what, features, r, T * CHOIR_MF2_FEATS, pw->tol->features, 0);
    snprintf(key, sizeof key, "win%d.mask", k);
    snprintf(what, sizeof what, "win%d mask", k);
    pw->ok &= (r = pm_ref(pw->ref, key, T * CHOIR_MF2_BINS)) &&
              pm_check(what, mask, r, T * CHOIR_MF2_BINS, pw->tol->mask, 1);
    snprintf(key, sizeof key, "win%d.out", k);
    snprintf(what, sizeof what, "win%d out", k);
    pw->ok &= (r = pm_ref(pw->ref, key, W)) && pm_check(what, out, r, W, pw->tol->audio, 1);
}

static int pm_case(const choir_mf2 *m, const char *fixture, const char *audio_dir, const char *name,
                   const pm_tol *tol) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/reference.safetensors", fixture, name);
    choir_err err = {0};
    choir_st *ref = choir_st_open(path, &err);
    printf("case %s\n", name);
    if (!ref) {
        printf("  %s\n", err.msg);
        return 0;
    }
    int ok = 0, is_long = strcmp(name, "long") == 0;
    int64_t n = 0;
    float *x = pm_input(ref, audio_dir, !is_long, &n);
    if (!x) goto done;
    if (!is_long) {
        ok = pm_one_pass(m, ref, x, n, strcmp(name, "short") == 0, tol);
    } else {
        float *y = choir_alloc(CHOIR_MEM_IO, (size_t)n * sizeof(float));
        pm_windows pw = {.ref = ref, .tol = tol, .ok = 1};
        const float *r;
        if (!y) goto done;
        if (choir_mf2_enhance_reference(m, x, n, y, NULL, pm_on_window, &pw, &err) < 0) {
            printf("  %s\n", err.msg);
        } else {
            ok = pw.ok && pw.seen == 2;
            ok &= (r = pm_ref(ref, "enhanced", n)) && pm_check("enhanced", y, r, n, tol->audio, 1);
        }
        choir_free(y);
    }
done:
    choir_free(x);
    choir_st_close(ref);
    return ok;
}

int choir_cmd_parity_mossformer2(int argc, char **argv) {
    const char *model = NULL, *fixture = NULL, *audio_dir = NULL, *only = NULL;
    pm_tol tol = {.fbank = 5e-4, .features = 5e-4, .net = 2e-4, .mask = 2e-4, .audio = 1e-4};
    double tol_features = -1; /* -1: not given */
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model, 0, 0, "MODEL_DIR", "MossFormer2 model directory (required)"},
        {"--fixture", CLI_STRING, &fixture, 0, 0, "FIXTURE_DIR", "the reference's fixture directory (required)"},
        {"--audio-dir", CLI_STRING, &audio_dir, 0, 0, "AUDIO_DIR", "the fixtures' audio (required)"},
        {"--case", CLI_STRING, &only, 0, 0, "NAME", "only this case: short, short-odd or long"},
        {"--tol-mask", CLI_DOUBLE, &tol.mask, 0, 1e9, "T", "mask bound (default 2e-4)"},
        {"--tol-audio", CLI_DOUBLE, &tol.audio, 0, 1e9, "T", "enhanced audio bound (default 1e-4)"},
        {"--tol-net", CLI_DOUBLE, &tol.net, 0, 1e9, "T", "network stages' bound (default 2e-4)"},
        {"--tol-features", CLI_DOUBLE, &tol_features, 0, 1e9, "T", "fbank and features bound (default 5e-4)"},
    };
    const cli_spec spec = {.cmd = "dev parity mossformer2", .synopsis = pm_synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model || !fixture || !audio_dir) {
        fprintf(stderr, "choir dev parity mossformer2: --model, --fixture and --audio-dir are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    if (tol_features >= 0) tol.features = tol.fbank = tol_features;
    choir_err err = {0};
    choir_mf2 *m = choir_mf2_load(model, &err);
    if (!m) {
        fprintf(stderr, "choir dev parity mossformer2: %s\n", err.msg);
        printf("parity: FAIL\n");
        return 1;
    }
    static const char *cases[] = {"short", "short-odd", "long"};
    int ok = 1, ran = 0;
    for (int i = 0; i < 3; i++) {
        if (only && strcmp(only, cases[i]) != 0) continue;
        ran++;
        ok &= pm_case(m, fixture, audio_dir, cases[i], &tol);
    }
    choir_mf2_free(m);
    if (!ran) {
        fprintf(stderr, "choir dev parity mossformer2: unknown case %s\n", only);
        ok = 0;
    }
    printf("parity: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
