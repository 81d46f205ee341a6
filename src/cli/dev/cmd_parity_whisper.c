/* `choir dev parity whisper`: compares the Whisper port with reference data.
 *
 * For each audio of FIXTURE/meta.json: the log-mel of AUDIO_DIR/<file>, the
 * encoder output, the teacher-forced logits of prompt + forced_tail and
 * `greedy_steps` tokens of plain argmax decoding after the prompt, against
 * FIXTURE/reference.safetensors. Bounds default to the fp32 ones and can be
 * loosened for converted (bf16 / quantized) models.
 *
 * --backend cuda runs the same comparison with the model attached to a GPU
 * (encoder, cross K/V, decoder all on the device): with --gpu-dtype f32 the
 * bounds stay the CPU's (1e-4); with bf16 (f32 matrices stored as bf16,
 * tensor-core products) the encoder and logits bounds become 2e-2 unless
 * given, and greedy tokens must still all agree. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/safetensors.h"
#include "choir/whisper.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

#if defined(__has_include)
#if __has_include("choir/mel.h")
#include "choir/audio.h"
#include "choir/mel.h"
#define PW_HAVE_MEL 1
#endif
#endif

static const char pw_synopsis[] =
    "usage: choir dev parity whisper --model MODEL_DIR --fixture FIXTURE_DIR --audio-dir AUDIO_DIR\n"
    "         [--tol-mel 1e-4] [--tol-enc 1e-4] [--tol-logits 1e-4] [--greedy-min 1.0]\n"
    "         [--backend cpu|cuda] [--device N] [--gpu-dtype f32|bf16]\n\n"
    "Compares mel, encoder output, teacher-forced logits and greedy tokens with the\n"
    "fixture's reference. Ends with 'parity: PASS' (exit 0) or 'parity: FAIL' (exit 1).\n"
    "--greedy-min is the fraction of greedy tokens that must agree. --backend cuda\n"
    "runs encoder and decoder on CUDA device N (0); --gpu-dtype bf16 stores f32\n"
    "matrices as bf16 there and loosens the encoder and logits bounds to 2e-2.\n\n";

static double pw_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        num += e * e;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

static int pw_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static const float *pw_ref(const choir_st *ref, const char *key, int64_t n, const char *what) {
    const choir_st_tensor *t = choir_st_find(ref, key);
    if (!t || t->numel != n || (t->dtype != CHOIR_DTYPE_F32 && t->dtype != CHOIR_DTYPE_I32)) {
        printf("  %s: reference tensor %s missing or not %lld elements\n", what, key, (long long)n);
        return NULL;
    }
    return t->data;
}

/* Computes the mel of the audio file when this build has the front end; else
 * falls back to the stored reference mel (and says so). Returns a choir_alloc'd
 * [n_mels][3000] buffer or NULL. */
static float *pw_mel(const char *audio_path, const float *ref_mel, int n_mels, double tol,
                     int *ok) {
    size_t n = (size_t)n_mels * CHOIR_WHISPER_N_FRAMES;
    float *mel = choir_alloc(CHOIR_MEM_ACTIVATIONS, n * sizeof(float));
    if (!mel) return NULL;
#ifdef PW_HAVE_MEL
    choir_err err = {0};
    choir_audio a = {0};
    choir_decode_opts o = {.target_rate = CHOIR_WHISPER_SAMPLE_RATE, .mono = 1};
    if (choir_audio_decode_file(audio_path, &o, &a, &err)) {
        printf("  mel: cannot read %s: %s\n", audio_path, err.msg);
        choir_free(mel);
        *ok = 0;
        return NULL;
    }
    /* The reference pads the waveform with zeros to 30 s before the STFT. */
    float *pcm = choir_calloc(CHOIR_MEM_IO, CHOIR_WHISPER_N_SAMPLES, sizeof(float));
    int64_t take = a.frames < CHOIR_WHISPER_N_SAMPLES ? a.frames : CHOIR_WHISPER_N_SAMPLES;
    if (pcm) memcpy(pcm, a.samples, (size_t)take * sizeof(float));
    choir_audio_clear(&a);
    int rc = pcm ? choir_whisper_log_mel(pcm, CHOIR_WHISPER_N_SAMPLES, n_mels, mel,
                                         CHOIR_WHISPER_N_FRAMES, &err)
                 : CHOIR_ENOMEM;
    choir_free(pcm);
    if (rc) {
        printf("  mel: %s\n", err.msg);
        choir_free(mel);
        *ok = 0;
        return NULL;
    }
    double maxd = 0;
    for (size_t i = 0; i < n; i++) maxd = fmax(maxd, fabs((double)mel[i] - (double)ref_mel[i]));
    int pass = maxd <= tol;
    printf("  mel: max abs diff %.3g (bound %.1g) %s\n", maxd, tol, pass ? "ok" : "FAIL");
    if (!pass) *ok = 0;
#else
    (void)tol;
    (void)ok;
    printf("  mel: no mel front end in this build; using the reference mel of %s\n", audio_path);
    memcpy(mel, ref_mel, n * sizeof(float));
#endif
    return mel;
}

typedef struct pw_bounds {
    double mel, enc, logits, greedy_min;
} pw_bounds;

static int pw_one(const choir_whisper *m, const choir_st *ref, const cJSON *meta, int ai,
                  const cJSON *audio, const char *audio_dir, const pw_bounds *bd) {
    const choir_whisper_dims *D = choir_whisper_get_dims(m);
    int ok = 1, V = D->n_vocab;
    const char *file = choir_json_str(audio, "file", "");
    int steps = (int)choir_json_int(audio, "greedy_steps", 0);
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(meta, "prompt");
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(meta, "forced_tail");
    int np = cJSON_GetArraySize(jp), nt = cJSON_GetArraySize(jt), P = np + nt;
    printf("a%d (%s):\n", ai, file);
    char key[64], path[4096];
    snprintf(key, sizeof key, "a%d.mel", ai);
    const float *rmel = pw_ref(ref, key, (int64_t)D->n_mels * CHOIR_WHISPER_N_FRAMES, "mel");
    snprintf(key, sizeof key, "a%d.encoder_out", ai);
    const float *renc = pw_ref(ref, key, (int64_t)D->n_audio_ctx * D->d_model, "encoder");
    snprintf(key, sizeof key, "a%d.logits", ai);
    const float *rlog = pw_ref(ref, key, (int64_t)P * V, "logits");
    snprintf(key, sizeof key, "a%d.greedy", ai);
    const int32_t *rgreedy = (const int32_t *)pw_ref(ref, key, steps, "greedy");
    if (!rmel || !renc || !rlog || !rgreedy || np <= 0) return 0;

    choir_err err = {0};
    int32_t *toks = choir_alloc(CHOIR_MEM_OTHER, (size_t)(P + steps + 1) * sizeof(int32_t));
    float *enc = choir_alloc(CHOIR_MEM_ACTIVATIONS,
                             (size_t)D->n_audio_ctx * (size_t)D->d_model * sizeof(float));
    float *logits = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)P * (size_t)V * sizeof(float));
    choir_whisper_cross *cross = NULL;
    choir_whisper_seq *seq = NULL;
    snprintf(path, sizeof path, "%s/%s", audio_dir, file);
    float *mel = pw_mel(path, rmel, D->n_mels, bd->mel, &ok);
    if (!toks || !enc || !logits || !mel) {
        if (ok) printf("  out of memory\n");
        ok = 0;
        goto done;
    }
    for (int i = 0; i < np; i++) toks[i] = (int32_t)cJSON_GetArrayItem(jp, i)->valueint;
    for (int i = 0; i < nt; i++) toks[np + i] = (int32_t)cJSON_GetArrayItem(jt, i)->valueint;

    if (choir_whisper_encode(m, mel, 1, enc, &err)) goto fail;
    double e = pw_rel_l2(enc, renc, (size_t)D->n_audio_ctx * (size_t)D->d_model);
    printf("  encoder: rel L2 %.3g (bound %.1g) %s\n", e, bd->enc, e <= bd->enc ? "ok" : "FAIL");
    if (!(e <= bd->enc)) ok = 0;

    if (!(cross = choir_whisper_cross_create(m, enc, &err))) goto fail;
    if (!(seq = choir_whisper_seq_create(m, 0, &err))) goto fail;
    choir_whisper_seq_reset(seq, cross);
    if (choir_whisper_decode(m, &seq, 1, toks, &P, true, logits, &err)) goto fail;
    e = pw_rel_l2(logits, rlog, (size_t)P * (size_t)V);
    int agree = 0;
    for (int i = 0; i < P; i++)
        agree += pw_argmax(logits + (size_t)i * V, V) == pw_argmax(rlog + (size_t)i * V, V);
    printf("  logits: rel L2 %.3g (bound %.1g) %s; argmax agrees at %d/%d positions\n", e,
           bd->logits, e <= bd->logits ? "ok" : "FAIL", agree, P);
    if (!(e <= bd->logits)) ok = 0;

    /* Plain argmax decoding: the prompt in one step, then one token per step. */
    choir_whisper_seq_reset(seq, cross);
    int n = np, same = 0;
    for (int s = 0; s < steps; s++) {
        if (choir_whisper_decode(m, &seq, 1, toks + (s ? np + s - 1 : 0), &n, false, logits, &err))
            goto fail;
        toks[np + s] = pw_argmax(logits, V);
        same += toks[np + s] == rgreedy[s];
        n = 1;
    }
    int need = (int)ceil(bd->greedy_min * steps - 1e-9);
    printf("  greedy: %d/%d tokens identical (need %d) %s\n", same, steps, need,
           same >= need ? "ok" : "FAIL");
    if (same < need) {
        ok = 0;
        printf("    got:");
        for (int s = 0; s < steps; s++) printf(" %d", toks[np + s]);
        printf("\n    ref:");
        for (int s = 0; s < steps; s++) printf(" %d", rgreedy[s]);
        printf("\n");
    }
    goto done;
fail:
    printf("  error: %s\n", err.msg);
    ok = 0;
done:
    choir_whisper_seq_free(seq);
    choir_whisper_cross_free(cross);
    choir_free(mel);
    choir_free(logits);
    choir_free(enc);
    choir_free(toks);
    return ok;
}

int choir_cmd_parity_whisper(int argc, char **argv) {
    const char *model_dir = NULL, *fixture = NULL, *audio_dir = NULL;
    pw_bounds bd = {1e-4, 1e-4, 1e-4, 1.0};
    int backend = 0, gpu_dtype = 0;
    double tol_enc = -1, tol_logits = -1; /* -1: not given */
    int device = 0;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_dir, 0, 0, "DIR", "Whisper model directory (required)"},
        {"--fixture", CLI_STRING, &fixture, 0, 0, "DIR", "the reference's fixture directory (required)"},
        {"--audio-dir", CLI_STRING, &audio_dir, 0, 0, "DIR", "the fixtures' audio (required)"},
        {"--tol-mel", CLI_DOUBLE, &bd.mel, 0, 1e9, "T", "log-mel relative L2 bound (default 1e-4)"},
        {"--tol-enc", CLI_DOUBLE, &tol_enc, 0, 1e9, "T", "encoder output bound (default 1e-4; bf16 2e-2)"},
        {"--tol-logits", CLI_DOUBLE, &tol_logits, 0, 1e9, "T", "teacher-forced logits bound (default 1e-4; bf16 2e-2)"},
        {"--greedy-min", CLI_DOUBLE, &bd.greedy_min, 0, 1, "F", "fraction of greedy tokens that must agree (default 1)"},
        {"--backend", CLI_CHOICE, &backend, 0, 0, "cpu|cuda", "where the model runs (default cpu)"},
        {"--device", CLI_INT, &device, 0, 255, "N", "CUDA device (default 0)"},
        {"--gpu-dtype", CLI_CHOICE, &gpu_dtype, 0, 0, "f32|bf16", "f32 matrices as stored, or as bf16 on the device"},
    };
    const cli_spec spec = {.cmd = "dev parity whisper", .synopsis = pw_synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model_dir || !fixture || !audio_dir) {
        fprintf(stderr, "choir dev parity whisper: --model, --fixture and --audio-dir are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    bool cuda = backend == 1, bf16 = gpu_dtype == 1, tol_enc_set = tol_enc >= 0, tol_logits_set = tol_logits >= 0;
    if (tol_enc_set) bd.enc = tol_enc;
    if (tol_logits_set) bd.logits = tol_logits;
    char path[4096];
    choir_err err = {0};
    int ok = 1;
    choir_whisper *m = choir_whisper_load(model_dir, &err);
    choir_st *ref = NULL;
    cJSON *meta = NULL;
    if (!m) goto fail;
    if (cuda) {
        if (bf16 && !tol_enc_set) bd.enc = 2e-2;
        if (bf16 && !tol_logits_set) bd.logits = 2e-2;
        choir_whisper_gpu_opts go;
        choir_whisper_default_gpu_opts(&go);
        go.device = device;
        go.bf16 = bf16;
        go.tf32 = bf16; /* bf16 bounds: f32 products may use TF32 too */
        if (choir_whisper_gpu_attach(m, &go, &err)) goto fail;
        printf("backend: cuda device %d, %s matrices on the device%s; bounds encoder %.1g, logits "
               "%.1g, greedy %.0f%%\n",
               device, bf16 ? "bf16" : "stored (f32)", bf16 ? ", TF32 f32 products" : "", bd.enc,
               bd.logits, 100.0 * bd.greedy_min);
    }
    snprintf(path, sizeof path, "%s/reference.safetensors", fixture);
    if (!(ref = choir_st_open(path, &err))) goto fail;
    snprintf(path, sizeof path, "%s/meta.json", fixture);
    if (!(meta = choir_json_load(path, &err))) goto fail;
    const cJSON *audios = cJSON_GetObjectItemCaseSensitive(meta, "audio");
    if (!cJSON_IsArray(audios) || cJSON_GetArraySize(audios) == 0) {
        choir_err_set(&err, CHOIR_EFORMAT, "%s: no \"audio\" array", path);
        goto fail;
    }
    for (int i = 0; i < cJSON_GetArraySize(audios); i++)
        if (!pw_one(m, ref, meta, i, cJSON_GetArrayItem(audios, i), audio_dir, &bd)) ok = 0;
    if (cuda) {
        choir_whisper_gpu_stats st;
        if (!choir_whisper_gpu_get_stats(m, &st, NULL))
            printf("gpu: %.0f MB on the device (%.0f MB weights); %lld decoder steps from CUDA "
                   "graphs, %lld run kernel by kernel, %d failed captures\n",
                   st.device_bytes / 1e6, st.weight_bytes / 1e6, (long long)st.steps_graph,
                   (long long)st.steps_direct, st.graph_failures);
    }
    goto done;
fail:
    printf("error: %s\n", err.msg);
    ok = 0;
done:
    cJSON_Delete(meta);
    choir_st_close(ref);
    choir_whisper_free(m);
    printf("parity: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
