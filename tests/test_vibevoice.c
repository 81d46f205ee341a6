/* VibeVoice-ASR loaders and network: every published layout gives the same
 * network as transformers' (flat names; the original names in shards with
 * its nested config and an acoustic decoder that must never be read;
 * mlx-community's transposed convolutions with an 8- or 4-bit language
 * model), bad and partial checkpoints fail with a message, the encoders give
 * the same latents whatever the chunk and pass sizes, prefill in chunks equals
 * prefill at once, and a transcription fits the memory its plan promises.
 * Weights are the vv-fox-chunked fixture's (randw-v1); its reference holds
 * the input values and prompt ids. */
// ctest: timeout=300
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/model.h"
#include "choir/arena.h"
#include "choir/quant.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "choir/tokenizer.h"
#include "choir/vibevoice.h"
#include "calib.h"
#include "testutil.h"

#define CASE "vibevoice-asr/vv-fox-chunked"

static char g_hf[1024];       /* the checkpoint in transformers' names */
static choir_st *g_ref;       /* the fixture's reference tensors */
static choir_tokenizer *g_tok;

/* What a run of the network gives: both latents and the last logits. */
typedef struct run_out {
    float *lat;    /* [T][va + vs] */
    float *logits; /* [vocab] */
    int64_t n_lat;
    int vocab;
} run_out;

static void run_free(run_out *r) {
    free(r->lat);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

static const choir_st_tensor *ref(const char *name) {
    const choir_st_tensor *t = choir_st_find(g_ref, name);
    assert_non_null(t);
    return t;
}

/* Encodes the reference input values (chunk / piece as given, 0: defaults)
 * and prefills the reference prompt (prefill chunk as given). */
static void run(const choir_vibevoice *m, int64_t chunk, int64_t piece, int prefill_chunk, run_out *out) {
    const choir_vibevoice_dims *D = choir_vibevoice_get_dims(m);
    const choir_st_tensor *iv = ref("input_values"), *ids = ref("input_ids");
    int64_t n = iv->numel, T = n / D->hop;
    int va = D->acoustic.vae_dim, vs = D->semantic.vae_dim;
    choir_vibevoice_plan p = {.max_samples = n, .max_context = (int)ids->numel + 4, .enc_piece = piece,
                              .prefill_chunk = prefill_chunk};
    choir_err err;
    choir_vibevoice_state *s = choir_vibevoice_state_create(m, &p, NULL, &err);
    assert_non_null(s);
    out->n_lat = T * (va + vs);
    out->vocab = D->lm.vocab;
    out->lat = malloc((size_t)out->n_lat * sizeof(float));
    out->logits = malloc((size_t)D->lm.vocab * sizeof(float));
    assert_int_equal(choir_vibevoice_encode(m, s, iv->data, n, chunk, out->lat, out->lat + T * va, &err), 0);
    assert_int_equal(choir_vibevoice_prefill(m, s, ids->data, (int)ids->numel, out->logits, NULL, NULL, &err), 0);
    choir_vibevoice_state_free(s);
}

static double rel(const float *a, const float *b, int64_t n) { return tu_rel_l2(a, b, (size_t)n); }

static int setup(void **state) {
    (void)state;
    choir_err err;
    snprintf(g_hf, sizeof g_hf, "%s", tu_tmpfile("hf"));
    char man[1024], cfg[1024];
    snprintf(man, sizeof man, "%s", tu_fixture(CASE "/manifest.json"));
    snprintf(cfg, sizeof cfg, "%s", tu_fixture(CASE "/config.json"));
    if (choir_randw_write_checkpoint(man, cfg, g_hf, &err)) return -1;
    g_ref = choir_st_open(tu_fixture(CASE "/reference.safetensors"), &err);
    g_tok = choir_tokenizer_load(tu_fixture("real/tokenizer/qwen2.5/tokenizer.json"), &err);
    return g_ref && g_tok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    choir_st_close(g_ref);
    choir_tokenizer_free(g_tok);
    return 0;
}

/* --- writing other layouts ------------------------------------------------ */

typedef enum { L_FLAT, L_ORIGINAL, L_MLX } layout;

static void replace(char *s, size_t cap, const char *from, const char *to) {
    char *p = strstr(s, from);
    if (!p) return;
    char tail[512];
    snprintf(tail, sizeof tail, "%s", p + strlen(from));
    snprintf(p, cap - (size_t)(p - s), "%s%s", to, tail);
}

/* The name of a transformers tensor in another layout. */
static void rename_to(layout L, const cJSON *orig, const char *hf, char *out, size_t cap) {
    snprintf(out, cap, "%s", hf);
    if (L == L_FLAT) {
        replace(out, cap, "model.language_model.", "language_model.model.");
        if (strncmp(out, "lm_head.", 8) == 0) replace(out, cap, "lm_head.", "language_model.lm_head.");
        else if (strncmp(out, "model.", 6) == 0) memmove(out, out + 6, strlen(out + 6) + 1);
        return;
    }
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(orig, hf);
    assert_true(cJSON_IsString(o));
    snprintf(out, cap, "%s", o->valuestring);
    if (L == L_ORIGINAL) return;
    /* mlx-audio's sanitize() of the original names. */
    if (strncmp(out, "model.", 6) == 0) memmove(out, out + 6, strlen(out + 6) + 1);
    for (int n = 0; n < 8; n++) {
        char from[64], to[64];
        snprintf(from, sizeof from, "downsample_layers.%d.0.conv.conv.", n);
        snprintf(to, sizeof to, "downsample_layers.%d.conv.", n);
        replace(out, cap, from, to);
    }
    replace(out, cap, "head.conv.conv.", "head.conv.");
    replace(out, cap, "mixer.conv.conv.conv.", "mixer.conv.conv.");
    if (strncmp(out, "language_model.", 15) == 0) replace(out, cap, "language_model.", "language_model.model.");
    if (strncmp(out, "lm_head.", 8) == 0) replace(out, cap, "lm_head.", "language_model.lm_head.");
}

static void add_f32(choir_st_writer *w, const char *name, int ndim, const int64_t *shape, const float *data) {
    choir_err err;
    assert_int_equal(choir_st_writer_add(w, name, CHOIR_DTYPE_F32, ndim, shape, data, &err), 0);
}

/* An MLX-quantized copy of a [rows, cols] f32 matrix under `base`. */
static void add_quant(choir_st_writer *w, const char *base, const choir_st_tensor *t, int bits) {
    int64_t rows = t->shape[0], cols = t->shape[1], g = 32;
    int64_t pc = choir_quant_packed_cols(cols, bits);
    uint32_t *packed = malloc((size_t)(rows * pc) * 4);
    uint16_t *sc = malloc((size_t)(rows * cols / g) * 2), *bi = malloc((size_t)(rows * cols / g) * 2);
    choir_err err;
    assert_int_equal(choir_quantize(t->data, rows, cols, bits, (int)g, CHOIR_DTYPE_BF16, packed, sc, bi, &err), 0);
    char n[400];
    int64_t ws[2] = {rows, pc}, ss[2] = {rows, cols / g};
    snprintf(n, sizeof n, "%s.weight", base);
    assert_int_equal(choir_st_writer_add(w, n, CHOIR_DTYPE_U32, 2, ws, packed, &err), 0);
    snprintf(n, sizeof n, "%s.scales", base);
    assert_int_equal(choir_st_writer_add(w, n, CHOIR_DTYPE_BF16, 2, ss, sc, &err), 0);
    snprintf(n, sizeof n, "%s.biases", base);
    assert_int_equal(choir_st_writer_add(w, n, CHOIR_DTYPE_BF16, 2, ss, bi, &err), 0);
    free(packed);
    free(sc);
    free(bi);
}

/* The original config.json of the fixture's transformers config. */
static void write_original_config(const char *dir) {
    choir_err err;
    cJSON *hf = choir_json_load(tu_fixture(CASE "/config.json"), &err);
    assert_non_null(hf);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", "vibevoice");
    const char *enc[2] = {"acoustic", "semantic"};
    for (int e = 0; e < 2; e++) {
        char key[64];
        snprintf(key, sizeof key, "%s_tokenizer_encoder_config", enc[e]);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(hf, key);
        cJSON *n = cJSON_CreateObject();
        cJSON_AddNumberToObject(n, "vae_dim", choir_json_int(c, "hidden_size", 0));
        cJSON_AddNumberToObject(n, "encoder_n_filters", choir_json_int(c, "num_filters", 0));
        cJSON_AddNumberToObject(n, "layernorm_eps", 1e-5);
        cJSON_AddStringToObject(n, "std_dist_type", e ? "none" : "gaussian");
        /* Ratios from the latent side, depths as "a-b-c". */
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "downsampling_ratios");
        cJSON *rev = cJSON_AddArrayToObject(n, "encoder_ratios");
        for (int i = cJSON_GetArraySize(r) - 1; i >= 0; i--)
            cJSON_AddItemToArray(rev, cJSON_CreateNumber(cJSON_GetArrayItem(r, i)->valueint));
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c, "depths");
        char depths[64] = "";
        for (int i = 0; i < cJSON_GetArraySize(d); i++)
            snprintf(depths + strlen(depths), sizeof depths - strlen(depths), "%s%d", i ? "-" : "",
                     cJSON_GetArrayItem(d, i)->valueint);
        cJSON_AddStringToObject(n, "encoder_depths", depths);
        snprintf(key, sizeof key, "%s_tokenizer_config", enc[e]);
        cJSON_AddItemToObject(o, key, n);
    }
    cJSON_AddItemToObject(o, "decoder_config",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(hf, "text_config"), 1));
    /* The original has no chunk size; the fixture's test case sets one. */
    cJSON_AddNumberToObject(o, "acoustic_tokenizer_chunk_size",
                            choir_json_int(hf, "acoustic_tokenizer_chunk_size", 0));
    char *txt = cJSON_Print(o);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(tu_write_file(path, txt, strlen(txt)), 0);
    free(txt);
    cJSON_Delete(o);
    cJSON_Delete(hf);
}

/* Writes the HF checkpoint's weights in layout L to dir (bits: the mlx
 * language model's quantization, 0 for float). */
static void write_layout(layout L, int bits, const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    choir_err err;
    choir_st *st = choir_st_open(g_hf, &err);
    assert_non_null(st);
    cJSON *names = choir_json_load(tu_fixture(CASE "/original_names.json"), &err);
    assert_non_null(names);
    const cJSON *orig = cJSON_GetObjectItemCaseSensitive(names, "hf_to_original");
    int shards = L == L_ORIGINAL ? 2 : 1;
    choir_st_writer *w[2] = {choir_st_writer_create(&err), choir_st_writer_create(&err)};
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    int n = choir_st_count(st);
    for (int i = 0; i < n; i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        char name[400];
        rename_to(L, orig, t->name, name, sizeof name);
        int k = shards > 1 && i >= n / 2;
        if (shards > 1) cJSON_AddStringToObject(map, name, k ? "model-00002-of-00002.safetensors"
                                                               : "model-00001-of-00002.safetensors");
        int lm_linear = strstr(name, "language_model.") && t->ndim == 2;
        if (L == L_MLX && bits && lm_linear) {
            char base[400];
            snprintf(base, sizeof base, "%s", name);
            base[strlen(base) - strlen(".weight")] = '\0';
            add_quant(w[k], base, t, bits);
        } else if (L == L_MLX && t->ndim == 3) {
            /* MLX convolutions are [out, kernel, in]. */
            int64_t O = t->shape[0], I = t->shape[1], K = t->shape[2], shape[3] = {O, K, I};
            float *x = malloc((size_t)t->numel * sizeof *x);
            const float *src = t->data;
            for (int64_t o = 0; o < O; o++)
                for (int64_t c = 0; c < I; c++)
                    for (int64_t j = 0; j < K; j++) x[(o * K + j) * I + c] = src[(o * I + c) * K + j];
            add_f32(w[k], name, 3, shape, x);
            free(x);
        } else {
            add_f32(w[k], name, t->ndim, t->shape, t->data);
        }
    }
    if (L == L_ORIGINAL) {
        /* The acoustic decoder ships with the original checkpoint; it must not
         * be read (a bad dtype and shape would fail any use). */
        int32_t junk[3] = {1, 2, 3};
        int64_t js[1] = {3};
        assert_int_equal(choir_st_writer_add(w[1], "model.acoustic_tokenizer.decoder.head.conv.conv.weight",
                                             CHOIR_DTYPE_I32, 1, js, junk, &err), 0);
        cJSON_AddStringToObject(map, "model.acoustic_tokenizer.decoder.head.conv.conv.weight",
                                "model-00002-of-00002.safetensors");
    }
    char path[1200];
    if (shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        assert_int_equal(choir_st_writer_save(w[0], path, &err), 0);
    } else {
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/model-%05d-of-00002.safetensors", dir, k + 1);
            assert_int_equal(choir_st_writer_save(w[k], path, &err), 0);
        }
        char *txt = cJSON_Print(index);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        assert_int_equal(tu_write_file(path, txt, strlen(txt)), 0);
        free(txt);
    }
    if (L == L_ORIGINAL) write_original_config(dir);
    else {
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/config.json'", tu_fixture(CASE "/config.json"), dir);
        assert_int_equal(tu_run(cmd, NULL), 0);
    }
    cJSON_Delete(index);
    cJSON_Delete(names);
    choir_st_writer_free(w[0]);
    choir_st_writer_free(w[1]);
    choir_st_close(st);
}

static void test_layouts(void **state) {
    (void)state;
    choir_err err;
    choir_vibevoice *hf = choir_vibevoice_load(g_hf, &err);
    assert_non_null(hf);
    assert_int_equal(choir_vibevoice_get_layout(hf), CHOIR_VIBEVOICE_LAYOUT_HF);
    run_out base;
    run(hf, 0, 0, 0, &base);
    assert_true(rel(base.logits, ref("logits_last")->data, base.vocab) < 1e-4);
    struct {
        layout L;
        int bits;
        const char *dir;
        choir_vibevoice_layout want;
        double logits_bound;
    } cases[] = {
        {L_FLAT, 0, "flat", CHOIR_VIBEVOICE_LAYOUT_HF_FLAT, 1e-6},
        {L_ORIGINAL, 0, "original", CHOIR_VIBEVOICE_LAYOUT_ORIGINAL, 1e-6},
        {L_MLX, 0, "mlx", CHOIR_VIBEVOICE_LAYOUT_MLX, 1e-6},
        {L_MLX, 8, "mlx8", CHOIR_VIBEVOICE_LAYOUT_MLX, 3e-2},
        {L_MLX, 4, "mlx4", CHOIR_VIBEVOICE_LAYOUT_MLX, 0.3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", tu_tmpfile(cases[c].dir));
        write_layout(cases[c].L, cases[c].bits, dir);
        choir_vibevoice *m = choir_vibevoice_load(dir, &err);
        if (!m) fprintf(stderr, "%s: %s\n", cases[c].dir, err.msg);
        assert_non_null(m);
        assert_int_equal(choir_vibevoice_get_layout(m), cases[c].want);
        assert_int_equal(choir_vibevoice_lm_bits(m), cases[c].bits);
        run_out r;
        run(m, 0, 0, 0, &r);
        /* The encoders are never quantized: same latents in every layout. */
        double dl = rel(r.lat, base.lat, r.n_lat), dg = rel(r.logits, base.logits, r.vocab);
        printf("%-8s latents %.3g, logits %.3g (bound %.1g)\n", cases[c].dir, dl, dg, cases[c].logits_bound);
        assert_true(dl <= 1e-7);
        assert_true(dg <= cases[c].logits_bound);
        run_free(&r);
        choir_vibevoice_free(m);
    }
    run_free(&base);
    choir_vibevoice_free(hf);
}

/* Chunk and pass sizes change memory, not results; prefill chunks likewise. */
static void test_chunking(void **state) {
    (void)state;
    choir_err err;
    choir_vibevoice *m = choir_vibevoice_load(g_hf, &err);
    assert_non_null(m);
    run_out a, b, c, d;
    run(m, 0, 0, 0, &a);             /* the config's 38,400-sample chunks, default passes */
    run(m, 3200, 3200, 0, &b);       /* one hop at a time */
    run(m, 1 << 30, 1 << 30, 0, &c); /* the whole signal at once */
    run(m, 0, 0, 7, &d);             /* prefill 7 tokens at a time */
    printf("hop passes %.3g, whole %.3g, prefill chunks %.3g\n", rel(b.lat, a.lat, a.n_lat), rel(c.lat, a.lat, a.n_lat),
           rel(d.logits, a.logits, a.vocab));
    assert_true(rel(b.lat, a.lat, a.n_lat) < 1e-6);
    assert_true(rel(c.lat, a.lat, a.n_lat) < 1e-6);
    assert_true(rel(d.logits, a.logits, a.vocab) < 1e-6);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    run_free(&d);
    choir_vibevoice_free(m);
}

/* Copies the HF checkpoint with tensor `drop` left out or `reshape` given a
 * wrong shape. */
static void write_broken(const char *dir, const char *drop, const char *reshape) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/'", dir, g_hf, dir);
    assert_int_equal(tu_run(cmd, NULL), 0);
    choir_err err;
    choir_st *st = choir_st_open(g_hf, &err);
    choir_st_writer *w = choir_st_writer_create(&err);
    for (int i = 0; i < choir_st_count(st); i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        if (reshape && strcmp(t->name, reshape) == 0) {
            int64_t s[2] = {t->numel / 2, 2};
            add_f32(w, t->name, 2, s, t->data);
        } else {
            add_f32(w, t->name, t->ndim, t->shape, t->data);
        }
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);
    choir_st_close(st);
}

static void test_bad_checkpoints(void **state) {
    (void)state;
    choir_err err;
    const char *gone = "model.language_model.layers.1.mlp.down_proj.weight";
    write_broken(tu_tmpfile("drop"), gone, NULL);
    assert_null(choir_vibevoice_load(tu_tmpfile("drop"), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, gone));
    const char *bad = "model.semantic_tokenizer_encoder.conv_layers.2.conv.conv.weight";
    write_broken(tu_tmpfile("shape"), NULL, bad);
    assert_null(choir_vibevoice_load(tu_tmpfile("shape"), &err));
    assert_int_equal(err.code, CHOIR_ESHAPE);
    assert_non_null(strstr(err.msg, bad));
    /* A truncated file, a shard missing from a sharded checkpoint. */
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/' && head -c 1000000 '%s/model.safetensors' > "
             "'%s/model.safetensors'", tu_tmpfile("trunc"), g_hf, tu_tmpfile("trunc"), g_hf, tu_tmpfile("trunc"));
    assert_int_equal(tu_run(cmd, NULL), 0);
    assert_null(choir_vibevoice_load(tu_tmpfile("trunc"), &err));
    assert_true(strlen(err.msg) > 0);
    write_layout(L_ORIGINAL, 0, tu_tmpfile("shards"));
    snprintf(cmd, sizeof cmd, "rm '%s/model-00002-of-00002.safetensors'", tu_tmpfile("shards"));
    assert_int_equal(tu_run(cmd, NULL), 0);
    assert_null(choir_vibevoice_load(tu_tmpfile("shards"), &err));
    assert_non_null(strstr(err.msg, "model-00002-of-00002"));
    /* Configs: not VibeVoice, missing the language model. */
    const char *p = tu_tmpfile("cfg.json");
    choir_vibevoice_dims d;
    assert_int_equal(tu_write_file(p, "{\"model_type\": \"whisper\"}", 25), 0);
    assert_int_equal(choir_vibevoice_read_config(p, &d, &err), CHOIR_EFORMAT);
    const char *no_lm = "{\"acoustic_tokenizer_encoder_config\": {}, \"semantic_tokenizer_encoder_config\": {}}";
    assert_int_equal(tu_write_file(p, no_lm, strlen(no_lm)), 0);
    assert_int_equal(choir_vibevoice_read_config(p, &d, &err), CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "text_config"));
}

/* Every allocation of loading may fail: never a crash or a leak. */
static void test_load_alloc_failures(void **state) {
    (void)state;
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    for (int64_t k = 1; k < 400; k += 7) {
        choir_err err;
        choir_alloc_fail_after(k);
        choir_vibevoice *m = choir_vibevoice_load(g_hf, &err);
        choir_alloc_fail_after(0);
        choir_vibevoice_free(m);
    }
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
}

/* A transcription in exactly the memory it plans for, as the engine's arena
 * gives it, equals one from the allocator; max_new_tokens and the maximum
 * duration hold. */
static void test_transcribe_memory(void **state) {
    (void)state;
    choir_err err;
    choir_vibevoice *m = choir_vibevoice_load(g_hf, &err);
    assert_non_null(m);
    const choir_st_tensor *iv = ref("input_values");
    choir_vibevoice_opts o;
    choir_vibevoice_default_opts(&o);
    o.max_new_tokens = 12;
    o.context = "Speakers: Ada, Linus. Terms: choir";
    int64_t bytes = choir_vibevoice_transcribe_bytes(choir_vibevoice_get_dims(m), iv->numel, 24000, &o);
    void *mem = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)bytes);
    choir_vibevoice_result a, b;
    assert_int_equal(choir_vibevoice_transcribe(m, g_tok, iv->data, iv->numel, 24000, &o, mem, &a, &err), 0);
    assert_int_equal(choir_vibevoice_transcribe(m, g_tok, iv->data, iv->numel, 24000, &o, NULL, &b, &err), 0);
    assert_string_equal(a.raw, b.raw);
    assert_true(a.n_generated <= 12);
    assert_true(a.stop == CHOIR_VIBEVOICE_STOP_LENGTH || a.stop == CHOIR_VIBEVOICE_STOP_EOS ||
                a.stop == CHOIR_VIBEVOICE_STOP_LOOP);
    assert_int_equal(a.n_prompt, (int)ref("input_ids")->numel);
    choir_vibevoice_result_clear(&a);
    choir_vibevoice_result_clear(&b);
    choir_free(mem);
    /* 16 kHz input is resampled. */
    o.max_new_tokens = 2;
    assert_int_equal(choir_vibevoice_transcribe(m, g_tok, iv->data, 16000, 16000, &o, NULL, &a, &err), 0);
    assert_int_equal(a.n_audio_tokens, 8); /* 1 s at 24 kHz = 24,000 samples -> 8 hops */
    choir_vibevoice_result_clear(&a);
    o.max_audio_s = 2.0;
    assert_int_equal(choir_vibevoice_transcribe(m, g_tok, iv->data, iv->numel, 24000, &o, NULL, &a, &err),
                     CHOIR_ETOOBIG);
    assert_non_null(strstr(err.msg, "at most 2 s"));
    choir_vibevoice_free(m);
}

/* The engine adapter: a request runs in the engine's batch arena within the
 * estimate it was admitted by, its state and kernel scratch carved from the
 * arena through a backend stream: exactly what its options plan
 * (the HTTP `prompt` field is the prompt's context: it changes the plan by
 * its length), and the untrained weights' output is reported as malformed
 * (an error naming it), never as a transcript. */
typedef struct adapter_out {
    int finals, partials;
} adapter_out;

static int adapter_collect(void *user, const choir_output *out) {
    adapter_out *a = user;
    if (out->final) a->finals++;
    else a->partials++;
    return 0;
}

static void test_adapter_arena(void **state) {
    (void)state;
    const choir_model_ops *ops = &choir_model_vibevoice;
    char tok[1200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", g_hf);
    tu_copy_file(tu_fixture("real/tokenizer/qwen2.5/tokenizer.json"), tok);
    choir_err err = {0};
    void *w = ops->load(g_hf, NULL, &err);
    assert_non_null(w);
    const choir_st_tensor *iv = ref("input_values");
    choir_vibevoice_opts o;
    choir_vibevoice_default_opts(&o);
    o.max_new_tokens = 6;
    const char *prompts[2] = {NULL, "Speakers: Ada, Linus. Terms: choir, vibevoice, arena"};
    size_t used[2];
    for (int i = 0; i < 2; i++) {
        adapter_out got = {0};
        choir_request r;
        memset(&r, 0, sizeof r);
        r.task = CHOIR_TASK_STT;
        r.in.stt.samples = iv->data;
        r.in.stt.n_samples = iv->numel;
        r.in.stt.sample_rate = 24000;
        r.in.stt.prompt = prompts[i];
        r.extra = &o;
        r.stream = 1;
        r.on_output = adapter_collect;
        r.on_output_user = &got;
        choir_request *rp = &r;
        int64_t estimate = ops->estimate(w, &r);
        choir_arena *arena = choir_arena_create((size_t)estimate, CHOIR_MEM_ACTIVATIONS, &err);
        assert_non_null(arena);
        assert_int_equal(ops->run_batch(w, &rp, 1, arena, &err), 0);
        used[i] = choir_arena_high_water(arena);
        choir_vibevoice_opts oc = o;
        oc.context = prompts[i];
        char cfg[1200];
        snprintf(cfg, sizeof cfg, "%s/config.json", g_hf);
        choir_vibevoice_dims D;
        assert_int_equal(choir_vibevoice_read_config(cfg, &D, &err), 0);
        int64_t planned = choir_vibevoice_transcribe_state_bytes(&D, iv->numel, 24000, &oc, NULL);
        printf("adapter: %zu bytes of arena used, %lld planned, %lld estimated\n", used[i], (long long)planned,
               (long long)estimate);
        assert_true((int64_t)used[i] <= estimate);
        /* The state and the kernels' scratch, less alignment slack. */
        assert_true((int64_t)used[i] >= planned - 1024 && (int64_t)used[i] <= planned);
        /* Random weights write no JSON transcript: a failed request naming why. */
        assert_int_equal(r.status, CHOIR_EINTERNAL);
        assert_non_null(strstr(r.error, "not a JSON transcript"));
        choir_arena_free(arena);
    }
    assert_true(used[1] > used[0]);
    /* An arena too small is reported as such, not overrun. */
    choir_arena *tiny = choir_arena_create(1 << 16, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(tiny);
    choir_request r;
    memset(&r, 0, sizeof r);
    r.task = CHOIR_TASK_STT;
    r.in.stt.samples = iv->data;
    r.in.stt.n_samples = iv->numel;
    r.in.stt.sample_rate = 24000;
    r.extra = &o;
    choir_request *rp = &r;
    assert_int_equal(ops->run_batch(w, &rp, 1, tiny, &err), CHOIR_ENOMEM);
    assert_non_null(strstr(err.msg, "batch arena"));
    choir_arena_free(tiny);
    ops->free(w);
    remove(tok);
}

/* Requests decoded together in one batch (shared steps) give what each
 * gives alone (the untrained output's text is in the error), within the sum
 * of their estimates. */
static void test_adapter_batch(void **state) {
    (void)state;
    const choir_model_ops *ops = &choir_model_vibevoice;
    char tok[1200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", g_hf);
    tu_copy_file(tu_fixture("real/tokenizer/qwen2.5/tokenizer.json"), tok);
    choir_err err = {0};
    void *w = ops->load(g_hf, NULL, &err);
    assert_non_null(w);
    const choir_st_tensor *iv = ref("input_values");
    enum { N = 3 };
    choir_vibevoice_opts o[N];
    const char *prompts[N] = {NULL, "Speakers: Ada, Linus.", NULL};
    int64_t lens[N] = {iv->numel, iv->numel, iv->numel / 2};
    int max_new[N] = {5, 9, 7};
    choir_request r[N], alone[N];
    choir_request *rp[N];
    int64_t estimate = 0;
    for (int i = 0; i < N; i++) {
        choir_vibevoice_default_opts(&o[i]);
        o[i].max_new_tokens = max_new[i];
        o[i].ignore_eos = true;
        memset(&r[i], 0, sizeof r[i]);
        r[i].task = CHOIR_TASK_STT;
        r[i].in.stt.samples = iv->data;
        r[i].in.stt.n_samples = lens[i];
        r[i].in.stt.sample_rate = 24000;
        r[i].in.stt.prompt = prompts[i];
        r[i].extra = &o[i];
        alone[i] = r[i];
        rp[i] = &r[i];
        estimate += ops->estimate(w, &r[i]);
    }
    choir_arena *arena = choir_arena_create((size_t)estimate, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(arena);
    assert_int_equal(ops->run_batch(w, rp, N, arena, &err), 0);
    size_t used = choir_arena_high_water(arena);
    printf("adapter batch of %d: %zu bytes of arena used, %lld estimated\n", N, used, (long long)estimate);
    assert_true((int64_t)used <= estimate);
    for (int i = 0; i < N; i++) {
        choir_request *ap = &alone[i];
        choir_arena_reset(arena);
        assert_int_equal(ops->run_batch(w, &ap, 1, arena, &err), 0);
        assert_int_equal(r[i].status, CHOIR_EINTERNAL);
        assert_int_equal(alone[i].status, CHOIR_EINTERNAL);
        /* The error carries the token count and the output's text. */
        assert_string_equal(r[i].error, alone[i].error);
        char want[32];
        snprintf(want, sizeof want, "(%d tokens", max_new[i]);
        assert_non_null(strstr(r[i].error, want));
    }
    choir_arena_free(arena);
    ops->free(w);
    remove(tok);
}

/* Through the engine: every batch's peak is within the arena it was admitted
 * with and a wrong estimate is corrected (tests/support/calib.h). The
 * untrained weights' requests fail as malformed, after the whole pass. */
static void test_engine_calibrates(void **state) {
    (void)state;
    char tok[1200];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", g_hf);
    tu_copy_file(tu_fixture("real/tokenizer/qwen2.5/tokenizer.json"), tok);
    const choir_st_tensor *iv = ref("input_values");
    choir_vibevoice_opts o;
    choir_vibevoice_default_opts(&o);
    o.max_new_tokens = 2; /* twelve batches: keep each short */
    choir_job j = {0};
    j.req.task = CHOIR_TASK_STT;
    j.req.in.stt.samples = iv->data;
    j.req.in.stt.n_samples = iv->numel;
    j.req.in.stt.sample_rate = 24000;
    j.req.extra = &o;
    j.priority = CHOIR_PRIORITY_NORMAL;
    tu_cal_check("vibevoice", &choir_model_vibevoice, g_hf, &j);
    remove(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),        cmocka_unit_test(test_chunking),
        cmocka_unit_test(test_bad_checkpoints), cmocka_unit_test(test_load_alloc_failures),
        cmocka_unit_test(test_transcribe_memory), cmocka_unit_test(test_adapter_arena),
        cmocka_unit_test(test_adapter_batch), cmocka_unit_test(test_engine_calibrates),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
