/* `choir dev parity vibevoice`: the VibeVoice-ASR port against a fixture case
 * (shared/fixtures/vibevoice-asr/<case>): the whole pipeline from the WAV,
 * one line per stage, then `parity: PASS` or `parity: FAIL`.
 *
 * Stages: the feature extractor's input values (max abs), the prompt ids
 * (identical, both built from the template and encoded from the stored
 * prompt text), the acoustic and semantic latents (rel L2), the chunked
 * encoder against one whole-signal pass, the audio embeddings, the spliced
 * input embeddings, the final hidden states, the last logits (rel L2) and
 * greedy tokens with the KV cache (identical). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/json.h"
#include "choir/safetensors.h"
#include "choir/tokenizer.h"
#include "choir/vibevoice.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

static const char pv_synopsis[] =
    "usage: choir dev parity vibevoice --model DIR --case CASE_DIR --audio-dir DIR\n"
    "         [--tokenizer PATH] [--tol-input 1e-5] [--tol 1e-4]\n\n"
    "Runs the VibeVoice-ASR pipeline from the case's 24 kHz audio file and compares every\n"
    "stage with CASE_DIR/reference.safetensors. The tokenizer is DIR/tokenizer.json unless\n"
    "--tokenizer is given. Ends with 'parity: PASS' (exit 0) or 'parity: FAIL' (exit 1).\n\n";

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i];
        num += e * e;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* rel L2 of latents [T][vae] against channel-major reference data; tmp holds T * vae. */
static double lat_diff(const float *lat, const float *ref, int64_t T, int vae, float *tmp) {
    for (int64_t t = 0; t < T; t++)
        for (int c = 0; c < vae; c++) tmp[(int64_t)c * T + t] = lat[t * vae + c];
    return rel_l2(tmp, ref, (size_t)(T * vae));
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static const choir_st_tensor *ref_t(const choir_st *ref, const char *key, int64_t n, int *ok) {
    const choir_st_tensor *t = choir_st_find(ref, key);
    if (!t || t->numel != n) {
        printf("  reference tensor %s missing or not %lld elements\n", key, (long long)n);
        *ok = 0;
        return NULL;
    }
    return t;
}

static int stage(const char *what, double v, double bound) {
    int pass = v <= bound;
    printf("%-18s rel L2 %.3g (bound %.1g) %s\n", what, v, bound, pass ? "ok" : "FAIL");
    return pass;
}

int choir_cmd_parity_vibevoice(int argc, char **argv) {
    const char *model_dir = NULL, *case_dir = NULL, *audio_dir = NULL, *tok_path = NULL;
    double tol_in = 1e-5, tol = 1e-4;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_dir, 0, 0, "DIR", "VibeVoice-ASR model directory (required)"},
        {"--case", CLI_STRING, &case_dir, 0, 0, "CASE_DIR", "meta.json and reference.safetensors (required)"},
        {"--audio-dir", CLI_STRING, &audio_dir, 0, 0, "DIR", "the fixtures' audio (required)"},
        {"--tokenizer", CLI_STRING, &tok_path, 0, 0, "PATH", "tokenizer.json (default: DIR/tokenizer.json)"},
        {"--tol-input", CLI_DOUBLE, &tol_in, 0, 1e9, "T", "bound of the prepared input audio (default 1e-5)"},
        {"--tol", CLI_DOUBLE, &tol, 0, 1e9, "T", "bound of every later stage (default 1e-4)"},
    };
    const cli_spec spec = {.cmd = "dev parity vibevoice", .synopsis = pv_synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model_dir || !case_dir || !audio_dir) {
        fprintf(stderr, "choir dev parity vibevoice: --model, --case and --audio-dir are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    choir_err err = {0};
    char path[4096];
    int ok = 1;
    choir_vibevoice *m = NULL;
    choir_tokenizer *tok = NULL;
    choir_st *ref = NULL;
    cJSON *meta = NULL;
    choir_audio audio = {0};
    choir_vibevoice_state *s = NULL, *whole = NULL;
    float *x = NULL, *lat = NULL, *lat_w = NULL, *emb = NULL, *in_emb = NULL, *hid = NULL;
    int32_t *ids = NULL, *ids2 = NULL;
    if (!(m = choir_vibevoice_load(model_dir, &err))) goto fail;
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(m);
    static const char *const LAYOUTS[] = {"transformers", "transformers (flat)", "original", "mlx-community"};
    printf("model: %s layout, LM %d layers x %d, vocab %d%s\n", LAYOUTS[choir_vibevoice_get_layout(m)],
           D->lm.n_layers, D->lm.hidden, D->lm.vocab, choir_vibevoice_lm_bits(m) ? " (quantized)" : "");
    if (!tok_path) snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    if (!(tok = choir_tokenizer_load(tok_path ? tok_path : path, &err))) goto fail;
    snprintf(path, sizeof path, "%s/reference.safetensors", case_dir);
    if (!(ref = choir_st_open(path, &err))) goto fail;
    snprintf(path, sizeof path, "%s/meta.json", case_dir);
    if (!(meta = choir_json_load(path, &err))) goto fail;

    /* Audio: the case's file as it is (24 kHz), normalised and padded. */
    snprintf(path, sizeof path, "%s/%s", audio_dir, choir_json_str(meta, "audio", ""));
    choir_decode_opts dop = {.target_rate = CHOIR_VIBEVOICE_SAMPLE_RATE, .mono = 1};
    if (choir_audio_decode_file(path, &dop, &audio, &err)) goto fail;
    int64_t n = audio.frames, np = choir_vibevoice_padded_len(n, D->hop), T = np / D->hop;
    const choir_st_tensor *rt = ref_t(ref, "input_values", np, &ok);
    if (!rt) goto done;
    if (!(x = choir_alloc(CHOIR_MEM_IO, (size_t)(np + 1) * sizeof *x))) goto oom;
    choir_vibevoice_normalize(audio.samples, n, D->hop, x);
    double d_in = max_abs(x, rt->data, (size_t)np);
    int pass = d_in <= tol_in;
    printf("%-18s %lld samples -> %lld padded, max abs %.3g (bound %.1g) %s\n", "input values", (long long)n,
           (long long)np, d_in, tol_in, pass ? "ok" : "FAIL");
    ok &= pass;

    /* Prompt: from the template, and from the stored text. */
    const char *context = choir_json_str(meta, "context", NULL);
    int n_ids = 0, n_ids2 = 0;
    if (choir_vibevoice_prompt(tok, D, (int)T, (double)n / CHOIR_VIBEVOICE_SAMPLE_RATE, context, &ids, &n_ids, &err))
        goto fail;
    const char *ptext = choir_json_str(meta, "prompt_text", "");
    if (choir_tokenizer_encode_special(tok, ptext, strlen(ptext), &ids2, &n_ids2, &err)) goto fail;
    const choir_st_tensor *rids = choir_st_find(ref, "input_ids");
    int same = rids && rids->numel == n_ids && n_ids2 == n_ids;
    for (int i = 0; same && i < n_ids; i++)
        same = ids[i] == ((const int32_t *)rids->data)[i] && ids2[i] == ids[i];
    printf("%-18s %d ids (%lld audio), template and text encodings %s\n", "prompt", n_ids, (long long)T,
           same ? "identical ok" : "DIFFER FAIL");
    ok &= same;
    if (!same) goto done;

    /* Encoders, as configured (chunks with carried caches), then in one pass. */
    int steps = (int)choir_json_int(meta, "greedy_steps", 16);
    choir_vibevoice_plan plan = {.max_samples = np, .max_context = n_ids + steps + 1};
    if (!(s = choir_vibevoice_state_create(m, &plan, NULL, &err))) goto fail;
    int va = D->acoustic.vae_dim, vs = D->semantic.vae_dim;
    lat = choir_alloc(CHOIR_MEM_IO, (size_t)(T * (va + vs)) * sizeof *lat);
    lat_w = choir_alloc(CHOIR_MEM_IO, (size_t)(T * (va + vs)) * sizeof *lat_w);
    emb = choir_alloc(CHOIR_MEM_IO, (size_t)(T * D->lm.hidden) * sizeof *emb);
    in_emb = choir_alloc(CHOIR_MEM_IO, (size_t)n_ids * D->lm.hidden * sizeof *in_emb);
    hid = choir_alloc(CHOIR_MEM_IO, (size_t)n_ids * D->lm.hidden * sizeof *hid);
    if (!lat || !lat_w || !emb || !in_emb || !hid) goto oom;
    if (choir_vibevoice_encode(m, s, x, np, 0, lat, lat + T * va, &err)) goto fail;
    const choir_st_tensor *ra = ref_t(ref, "acoustic_latents", T * va, &ok);
    const choir_st_tensor *rs = ref_t(ref, "semantic_latents", T * vs, &ok);
    if (!ra || !rs) goto done;
    /* The fixtures store the latents channel-major ([vae][T] data under a
     * [T, vae] shape: the reference's tensor before its transpose). */
    ok &= stage("acoustic latents", lat_diff(lat, ra->data, T, va, lat_w), tol);
    ok &= stage("semantic latents", lat_diff(lat + T * va, rs->data, T, vs, lat_w), tol);
    choir_vibevoice_plan wp = plan;
    wp.enc_piece = np;
    if (!(whole = choir_vibevoice_state_create(m, &wp, NULL, &err))) goto fail;
    if (choir_vibevoice_encode(m, whole, x, np, np, lat_w, lat_w + T * va, &err)) goto fail;
    double dw = rel_l2(lat, lat_w, (size_t)(T * (va + vs))), dwa = max_abs(lat, lat_w, (size_t)(T * (va + vs)));
    int64_t chunk = D->chunk_samples;
    printf("%-18s %lld chunk(s) of %lld samples, passes of at most %lld, vs one pass: rel L2 %.3g, max abs %.3g "
           "(bound 1e-5) %s\n", "chunked encoder", (long long)((np + chunk - 1) / chunk), (long long)chunk,
           (long long)(32LL * D->hop), dw, dwa, dw <= 1e-5 ? "ok" : "FAIL");
    ok &= dw <= 1e-5;

    if (choir_vibevoice_audio_embeds(m, s, emb, &err)) goto fail;
    const choir_st_tensor *re = ref_t(ref, "audio_embeds", T * D->lm.hidden, &ok);
    if (!re) goto done;
    ok &= stage("audio embeds", rel_l2(emb, re->data, (size_t)(T * D->lm.hidden)), tol);

    float *logits = choir_vibevoice_logits(s);
    if (choir_vibevoice_prefill(m, s, ids, n_ids, NULL, in_emb, hid, &err)) goto fail;
    size_t nh = (size_t)n_ids * D->lm.hidden;
    const choir_st_tensor *rie = ref_t(ref, "inputs_embeds", (int64_t)nh, &ok);
    const choir_st_tensor *rh = ref_t(ref, "hidden_final", (int64_t)nh, &ok);
    const choir_st_tensor *rl = ref_t(ref, "logits_last", D->lm.vocab, &ok);
    const choir_st_tensor *rg = ref_t(ref, "greedy", steps, &ok);
    if (!rie || !rh || !rl || !rg) goto done;
    ok &= stage("inputs embeds", rel_l2(in_emb, rie->data, nh), tol);
    ok &= stage("hidden final", rel_l2(hid, rh->data, nh), tol);
    int am = argmax(logits, D->lm.vocab), ram = argmax(rl->data, D->lm.vocab);
    double dl = rel_l2(logits, rl->data, (size_t)D->lm.vocab);
    printf("%-18s rel L2 %.3g (bound %.1g), argmax %d vs %d %s\n", "logits (last)", dl, tol, am, ram,
           dl <= tol && am == ram ? "ok" : "FAIL");
    ok &= dl <= tol && am == ram;

    /* Plain argmax with the KV cache, end-of-text not honoured. */
    int agree = 0;
    int32_t got[256];
    if (steps > 256) steps = 256;
    for (int i = 0; i < steps; i++) {
        got[i] = argmax(logits, D->lm.vocab);
        agree += got[i] == ((const int32_t *)rg->data)[i];
        if (i + 1 < steps && choir_vibevoice_step(m, s, got[i], NULL, &err)) goto fail;
    }
    printf("%-18s %d/%d tokens identical %s\n", "greedy", agree, steps, agree == steps ? "ok" : "FAIL");
    if (agree != steps) {
        ok = 0;
        printf("  got:");
        for (int i = 0; i < steps; i++) printf(" %d", got[i]);
        printf("\n  ref:");
        for (int i = 0; i < steps; i++) printf(" %d", ((const int32_t *)rg->data)[i]);
        printf("\n");
    }
    goto done;
oom:
    choir_err_set(&err, CHOIR_ENOMEM, "out of memory");
fail:
    printf("error: %s\n", err.msg);
    ok = 0;
done:
    choir_free(ids);
    choir_free(ids2);
    choir_free(x);
    choir_free(lat);
    choir_free(lat_w);
    choir_free(emb);
    choir_free(in_emb);
    choir_free(hid);
    choir_vibevoice_state_free(s);
    choir_vibevoice_state_free(whole);
    choir_audio_clear(&audio);
    cJSON_Delete(meta);
    choir_st_close(ref);
    choir_tokenizer_free(tok);
    choir_vibevoice_free(m);
    printf("parity: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
