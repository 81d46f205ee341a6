/* `choir dev parity kokoro`: runs a fixture case in zero-noise mode and
 * compares every stage with the reference implementation's tensors.
 *
 * --backend cuda runs the decoder and generator on GPU 0 (the stages before
 * them stay on the CPU and are compared as there); the audio checks then
 * judge the GPU's audio, the GPU floor is measured on the GPU, and the GPU
 * decoder is also compared with the CPU one on the reference's inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/kokoro.h"
#include "choir/pool.h"
#include "choir/safetensors.h"
#include "choir/tensor.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"
#include "models/kokoro/kokoro_internal.h"

typedef struct parity {
    const choir_st *ref;
    double stage_tol, audio_tol;
    int n_checked, n_failed;
    double audio_err;          /* end-to-end audio rel L2, -1 until seen */
    int dur_tol;               /* pred_dur values allowed to differ (each by one frame) */
} parity;

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

static void compare(void *user, const char *stage, const float *data, int ndim,
                    const int64_t *shape) {
    parity *p = user;
    const choir_st_tensor *t = choir_st_find(p->ref, stage);
    if (!t) return;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    p->n_checked++;
    if (t->numel != n) {
        printf("  %-22s FAIL shape: %lld values, reference %lld\n", stage, (long long)n,
               (long long)t->numel);
        p->n_failed++;
        return;
    }
    bool is_audio = strcmp(stage, "audio") == 0;
    float *want = choir_alloc(CHOIR_MEM_IO, (size_t)n * sizeof(float));
    if (!want) {
        p->n_failed++;
        return;
    }
    bool ints = t->dtype == CHOIR_DTYPE_I32;
    if (ints) {
        const int32_t *iv = t->data;
        for (int64_t i = 0; i < n; i++) want[i] = (float)iv[i];
    } else if (choir_to_f32_n(t->dtype, t->data, want, n) != 0) {
        printf("  %-22s FAIL: reference dtype %s\n", stage, choir_dtype_name(t->dtype));
        p->n_failed++;
        choir_free(want);
        return;
    }
    if (ints) {
        int64_t diff = 0, far = 0;
        for (int64_t i = 0; i < n; i++) {
            diff += data[i] != want[i];
            far += fabsf(data[i] - want[i]) > 1.0f;
        }
        int allowed = strcmp(stage, "pred_dur") == 0 ? p->dur_tol : 0;
        bool ok = diff <= allowed && far == 0;
        printf("  %-22s %s  (%lld of %lld differ, %d allowed by one)\n", stage, ok ? "ok  " : "FAIL",
               (long long)diff, (long long)n, allowed);
        p->n_failed += !ok;
    } else {
        double err = rel_l2(data, want, n);
        if (is_audio) { /* judged after the float32 floor is known */
            p->audio_err = err;
            p->n_checked--;
            choir_free(want);
            return;
        }
        double tol = p->stage_tol;
        double maxabs = 0;
        for (int64_t i = 0; i < n; i++) maxabs = fmax(maxabs, fabs((double)data[i] - want[i]));
        bool ok = err <= tol && isfinite(err);
        printf("  %-22s %s  rel_l2 %.3e  max_abs %.3e  (tol %.2g)\n", stage, ok ? "ok  " : "FAIL",
               err, maxabs, tol);
        p->n_failed += !ok;
    }
    choir_free(want);
}

/* Magnitude-spectrogram distance (n_fft 512, hop 128, Hann): ||(|A| - |B|)|| / ||B||.
 * Insensitive to the phase noise that float32 leaves in the vocoder. */
static double spectral_distance(const float *a, const float *b, int64_t n) {
    enum { NFFT = 512, HOP = 128 };
    static double cs[NFFT], sn[NFFT], win[NFFT];
    for (int i = 0; i < NFFT; i++) {
        cs[i] = cos(2 * M_PI * i / NFFT);
        sn[i] = sin(2 * M_PI * i / NFFT);
        win[i] = 0.5 - 0.5 * cos(2 * M_PI * i / NFFT);
    }
    double num = 0, den = 0;
    for (int64_t s = 0; s + NFFT <= n; s += HOP) {
        for (int k = 0; k <= NFFT / 2; k++) {
            double ar = 0, ai = 0, br = 0, bi = 0;
            for (int i = 0; i < NFFT; i++) {
                int idx = (k * i) % NFFT;
                double wa = win[i] * a[s + i], wb = win[i] * b[s + i];
                ar += wa * cs[idx];
                ai += wa * sn[idx];
                br += wb * cs[idx];
                bi += wb * sn[idx];
            }
            double ma = hypot(ar, ai), mb = hypot(br, bi);
            num += (ma - mb) * (ma - mb);
            den += mb * mb;
        }
    }
    return den > 0 ? sqrt(num / den) : 0;
}

/* Runs the decoder alone on the reference's asr, F0 and N, and again with F0
 * moved by one ulp up and down. Returns 0 and fills the decoder's error
 * against the reference audio, its spectral distance, and the float32 floor
 * (the larger audio change the one-ulp moves cause). */
/* The decoder alone on the CPU, or on the model's GPU when one is attached. */
static int run_decoder(const choir_kokoro *m, const float *asr, int64_t L, const float *f0,
                       const float *nc, const float *style, float *audio, bool gpu,
                       choir_err *err) {
    if (gpu) {
        choir_kokoro_decode_input in = {.asr = asr, .f0 = f0, .n = nc, .style = style, .frames = L};
        float *out = NULL;
        int rc = kk_net_decode(m, NULL, &in, 1, &out, err);
        if (rc) return rc;
        memcpy(audio, out, (size_t)L * CHOIR_KOKORO_SAMPLES_PER_FRAME * sizeof(float));
        choir_free(out);
        return 0;
    }
    return kk_decoder(m, asr, L, f0, nc, style, NULL, audio, err);
}

static int decoder_check(const choir_kokoro *m, const choir_st *ref, const float *style, bool gpu,
                         double *err_out, double *spec_out, double *floor_out, double *vs_cpu,
                         choir_err *err) {
    const choir_st_tensor *asr = choir_st_find(ref, "asr"), *f0 = choir_st_find(ref, "F0_pred");
    const choir_st_tensor *nc = choir_st_find(ref, "N_pred"), *au = choir_st_find(ref, "audio");
    if (!asr || !f0 || !nc || !au || asr->ndim != 2 || asr->dtype != CHOIR_DTYPE_F32 ||
        f0->numel != 2 * asr->shape[1] || nc->numel != f0->numel ||
        au->numel != asr->shape[1] * CHOIR_KOKORO_SAMPLES_PER_FRAME)
        return choir_err_set(err, CHOIR_EFORMAT, "reference: asr, F0_pred, N_pred, audio missing "
                                                 "or inconsistent");
    int64_t L = asr->shape[1], n = au->numel;
    int rc = CHOIR_ENOMEM;
    float *a0 = choir_alloc(CHOIR_MEM_IO, (size_t)n * sizeof(float));
    float *a1 = choir_alloc(CHOIR_MEM_IO, (size_t)n * sizeof(float));
    float *f0n = choir_alloc(CHOIR_MEM_IO, (size_t)f0->numel * sizeof(float));
    if (!a0 || !a1 || !f0n) goto done;
    if ((rc = run_decoder(m, asr->data, L, f0->data, nc->data, style, a0, gpu, err))) goto done;
    *err_out = rel_l2(a0, au->data, n);
    *vs_cpu = -1;
    if (gpu) { /* the same inputs through the CPU decoder */
        if ((rc = kk_decoder(m, asr->data, L, f0->data, nc->data, style, NULL, a1, err))) goto done;
        *vs_cpu = rel_l2(a0, a1, n);
    }
    *spec_out = spectral_distance(a0, au->data, n);
    *floor_out = 0;
    for (int dir = 0; dir < 2; dir++) {
        const float *src = f0->data;
        for (int64_t i = 0; i < f0->numel; i++) f0n[i] = nextafterf(src[i], dir ? -INFINITY : INFINITY);
        if ((rc = run_decoder(m, asr->data, L, f0n, nc->data, style, a1, gpu, err))) goto done;
        *floor_out = fmax(*floor_out, rel_l2(a1, a0, n));
    }
done:
    if (rc == CHOIR_ENOMEM && err && !err->code) choir_err_set(err, rc, "decoder check: out of memory");
    choir_free(a0);
    choir_free(a1);
    choir_free(f0n);
    return rc;
}

static const char synopsis[] =
    "usage: choir dev parity kokoro --model MODEL --case CASE_DIR --voices VOICES_DIR\n"
    "           [--stage-tol 1e-4] [--audio-tol 1e-3] [--spectrum-tol 0.1]\n"
    "           [--dur-tol N] [--force-durations] [--backend cpu|cuda]\n"
    "           [--gpu-dtype f32|bf16]\n\n"
    "Runs CASE_DIR/meta.json's phonemes, voice and speed in zero-noise mode and\n"
    "compares every stage with CASE_DIR/reference.safetensors. Ends with\n"
    "`parity: PASS` (exit 0) or `parity: FAIL` (exit 1).\n"
    "For reduced-precision weights (bf16, quantized): --dur-tol N lets N durations\n"
    "differ by one frame, and --force-durations aligns with the reference's durations\n"
    "so that the later stages stay comparable.\n"
    "--backend cuda runs the decoder and generator on GPU 0 (CUDA builds). With\n"
    "--gpu-dtype f32 the bounds are the CPU's; with bf16 (tensor-core convolutions)\n"
    "the audio is judged by the magnitude spectrum alone (rel L2 is printed; the\n"
    "float32 floor already exceeds any useful bound on random weights).\n\n";

int choir_cmd_parity_kokoro(int argc, char **argv) {
    const char *model_path = NULL, *case_dir = NULL, *voices = NULL;
    double stage_tol = 1e-4, audio_tol = 1e-3, spectrum_tol = 0.1;
    int dur_tol = 0;
    int force_arg = 0, backend = 0, gpu_dtype = 0;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_path, 0, 0, "MODEL", "Kokoro model directory (required)"},
        {"--case", CLI_STRING, &case_dir, 0, 0, "CASE_DIR", "fixture case: meta.json, reference.safetensors (required)"},
        {"--voices", CLI_STRING, &voices, 0, 0, "VOICES_DIR", "the voice packs (required)"},
        {"--stage-tol", CLI_DOUBLE, &stage_tol, 0, 1e9, "T", "relative L2 bound of each stage (default 1e-4)"},
        {"--audio-tol", CLI_DOUBLE, &audio_tol, 0, 1e9, "T", "of the audio (default 1e-3)"},
        {"--spectrum-tol", CLI_DOUBLE, &spectrum_tol, 0, 1e9, "T", "of its magnitude spectrum (default 0.1)"},
        {"--dur-tol", CLI_INT, &dur_tol, 0, 1 << 20, "N", "durations that may differ by one frame (default 0)"},
        {"--force-durations", CLI_FLAG, &force_arg, 0, 0, NULL, "align with the reference's durations"},
        {"--backend", CLI_CHOICE, &backend, 0, 0, "cpu|cuda", "where the decoder and generator run (default cpu)"},
        {"--gpu-dtype", CLI_CHOICE, &gpu_dtype, 0, 0, "f32|bf16", "their products on the GPU (default f32)"},
    };
    const cli_spec spec = {.cmd = "dev parity kokoro", .synopsis = synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model_path || !case_dir || !voices) {
        fprintf(stderr, "choir dev parity kokoro: --model, --case and --voices are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    bool force_durations = force_arg != 0, use_gpu = backend == 1, gpu_bf16 = gpu_dtype == 1;
#ifdef CHOIR_HAVE_CUDA
    if (use_gpu && choir_cuda_device_count() < 1) {
        fprintf(stderr, "choir dev parity kokoro: --backend cuda: no CUDA device visible\n");
        return 1;
    }
#else
    if (use_gpu) {
        fprintf(stderr, "choir dev parity kokoro: --backend cuda: this build has no CUDA backend "
                        "(configure with -DCHOIR_CUDA=ON)\n");
        return 2;
    }
#endif

    int rc = 1;
    choir_err err = {0};
    char path[2048];
    choir_kokoro *m = NULL;
    choir_kokoro_voice *voice = NULL;
    choir_st *ref = NULL;
    cJSON *meta = NULL;
    float *audio = NULL;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda *cu = NULL;
    choir_kokoro_gpu *gpu = NULL;
#endif

    snprintf(path, sizeof path, "%s/meta.json", case_dir);
    if (!(meta = choir_json_load(path, &err))) goto done;
    snprintf(path, sizeof path, "%s/reference.safetensors", case_dir);
    if (!(ref = choir_st_open(path, &err))) goto done;
    const char *phonemes = choir_json_str(meta, "phonemes", NULL);
    const char *voice_name = choir_json_str(meta, "voice", NULL);
    float speed = (float)choir_json_num(meta, "speed", 1.0);
    if (!phonemes || !voice_name) {
        choir_err_set(&err, CHOIR_EFORMAT, "%s/meta.json: no phonemes or voice", case_dir);
        goto done;
    }
    double t0 = choir_now_s();
    if (!(m = choir_kokoro_load(model_path, &err))) goto done;
    double t_load = choir_now_s() - t0;
#ifdef CHOIR_HAVE_CUDA
    if (use_gpu) {
        if (choir_cuda_device_count() < 1) {
            choir_err_set(&err, CHOIR_EUNSUPPORTED, "--backend cuda: no CUDA device visible");
            goto done;
        }
        if (!(cu = choir_cuda_init(0, &err)) || !(gpu = choir_kokoro_gpu_create(m, cu, gpu_bf16, &err)))
            goto done;
        choir_kokoro_set_gpu(m, gpu);
        printf("  decoder on %s (%s convolutions)\n", choir_cuda_get_props(cu)->name,
               gpu_bf16 ? "bf16" : "f32");
    }
#endif
    if (!(voice = choir_kokoro_voice_load(voice_name, voices, &err))) goto done;

    int32_t ids[CHOIR_KOKORO_MAX_PHONEMES + 2];
    int dropped = 0;
    int n_ids = choir_kokoro_phonemes_to_ids(m, phonemes, ids, CHOIR_KOKORO_MAX_PHONEMES + 2,
                                             &dropped, &err);
    if (n_ids < 0) goto done;
    /* the style row counts code points of the phoneme string, dropped ones included */
    int n_cp = 0;
    for (const unsigned char *s = (const unsigned char *)phonemes; *s; s++) n_cp += (*s & 0xC0) != 0x80;

    parity p = {.ref = ref, .stage_tol = stage_tol, .audio_tol = audio_tol, .audio_err = -1,
                .dur_tol = dur_tol};
    printf("kokoro parity: %s (%d ids, voice %s row %d, speed %g)\n", case_dir, n_ids, voice_name,
           n_cp - 1, (double)speed);
    const float *style = choir_kokoro_voice_style(voice, n_cp);
    int64_t ids_shape[1] = {n_ids}, style_shape[1] = {CHOIR_KOKORO_STYLE_DIM};
    float ids_f[CHOIR_KOKORO_MAX_PHONEMES + 2];
    for (int i = 0; i < n_ids; i++) ids_f[i] = (float)ids[i];
    compare(&p, "input_ids", ids_f, 1, ids_shape);
    compare(&p, "ref_s", style, 1, style_shape);

    choir_kokoro_params params = choir_kokoro_default_params();
    params.speed = speed;
    params.noise = CHOIR_KOKORO_NOISE_ZERO;
    params.trace = compare;
    params.trace_user = &p;
    const choir_st_tensor *ref_dur = choir_st_find(ref, "pred_dur");
    if (force_durations) {
        if (!ref_dur || ref_dur->dtype != CHOIR_DTYPE_I32 || ref_dur->numel != n_ids) {
            choir_err_set(&err, CHOIR_EFORMAT, "reference has no usable pred_dur to force");
            goto done;
        }
        params.durations = ref_dur->data;
    }
    int64_t n_samples = 0;
    t0 = choir_now_s();
    if (choir_kokoro_synthesize_ids(m, ids, n_ids, style, &params, &audio, &n_samples, &err) != 0)
        goto done;
    double t_run = choir_now_s() - t0;
    printf("  load %.2f s, forward %.2f s for %.2f s of audio\n", t_load, t_run,
           (double)n_samples / CHOIR_KOKORO_SAMPLE_RATE);

    /* Audio. The harmonic source integrates F0 into a phase of ~1e4 rad, and
     * on random weights the vocoder amplifies its float32 noise: a one-ulp
     * move of F0 changes the audio by tens of percent. So audio is judged
     * against that measured floor, and the decoder is also run alone on the
     * reference's own F0 / N / asr, where the magnitude spectrum must agree. */
    double dec_err = 0, dec_spec = 0, floor = 0, vs_cpu = -1;
    if (decoder_check(m, ref, style, use_gpu, &dec_err, &dec_spec, &floor, &vs_cpu, &err) != 0)
        goto done;
    double audio_bound = fmax(audio_tol, 1.5 * floor);
    /* bf16 convolutions: the spectrum is the bound (rel L2 shown, not judged) */
    bool judge_l2 = !(use_gpu && gpu_bf16);
    bool ok_e2e = p.audio_err >= 0 && (!judge_l2 || p.audio_err <= audio_bound);
    bool ok_dec = !judge_l2 || dec_err <= audio_bound;
    bool ok_spec = dec_spec <= spectrum_tol;
    const char *l2_note = judge_l2 ? "" : "  (bf16: not judged)";
    printf("  float32 floor: a 1-ulp move of F0 changes the audio by rel_l2 %.3e%s\n", floor,
           use_gpu ? " (on the GPU)" : "");
    printf("  %-22s %s  rel_l2 %.3e  (tol max(%.2g, 1.5 x floor) = %.3e)%s\n", "audio",
           ok_e2e ? "ok  " : "FAIL", p.audio_err, audio_tol, audio_bound, l2_note);
    printf("  %-22s %s  rel_l2 %.3e  (same tol)%s\n", "audio from ref F0/N/asr",
           ok_dec ? "ok  " : "FAIL", dec_err, l2_note);
    printf("  %-22s %s  spectral %.3e  (tol %.2g)\n", "  magnitude spectrum", ok_spec ? "ok  " : "FAIL",
           dec_spec, spectrum_tol);
    p.n_checked += 3;
    p.n_failed += !ok_e2e + !ok_dec + !ok_spec;
    if (vs_cpu >= 0) {
        /* the GPU decoder against the CPU one on the same inputs: the same
         * float32 floor applies (the vocoder amplifies rounding differences) */
        bool ok_vs = !judge_l2 || vs_cpu <= audio_bound;
        printf("  %-22s %s  rel_l2 %.3e  (same tol)%s\n", "  GPU vs CPU decoder", ok_vs ? "ok  " : "FAIL",
               vs_cpu, l2_note);
        p.n_checked++;
        p.n_failed += !ok_vs;
    }
    printf("  %d checks, %d failed\n", p.n_checked, p.n_failed);
    rc = p.n_failed == 0 && p.n_checked >= 14 ? 0 : 1;
done:
    if (err.code) fprintf(stderr, "choir dev parity kokoro: %s\n", err.msg);
    printf("parity: %s\n", rc == 0 ? "PASS" : "FAIL");
    choir_free(audio);
    choir_kokoro_voice_free(voice);
#ifdef CHOIR_HAVE_CUDA
    choir_kokoro_gpu_free(gpu);
    choir_cuda_free(cu);
#endif
    choir_kokoro_free(m);
    choir_st_close(ref);
    cJSON_Delete(meta);
    return rc;
}
