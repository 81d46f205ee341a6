/* Whisper network and batched decoding on the whisper-ml80 fixture weights:
 * encoder parity through the real loader (HF and MLX layouts), KV-cache
 * consistency, batch invariance of greedy / beam / sampled decoding, errors,
 * allocation failures. (Full parity of both fixtures: sh_whisper_parity.sh.) */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/convert.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "choir/tokenizer.h"
#include "choir/whisper.h"
#include "models/whisper/whisper_internal.h"
#include "testutil.h"

#define FX "whisper/whisper-ml80"

static char g_hf_dir[1024], g_mlx_dir[1024];
static choir_whisper *g_model;
static choir_st *g_ref;
static float *g_enc[2];                 /* encoder outputs of a0, a1 [1500][64] */
static choir_whisper_cross *g_cross[2];

/* HF name -> openai/MLX name (conv weights are transposed by the caller). */
static void mlx_name(const char *hf, char *out, size_t cap) {
    static const char *const rules[][2] = {
        {"model.encoder.embed_positions.weight", "encoder.positional_embedding"},
        {"model.decoder.embed_positions.weight", "decoder.positional_embedding"},
        {"model.encoder.layer_norm.", "encoder.ln_post."}, {"model.decoder.layer_norm.", "decoder.ln."},
        {"model.encoder.", "encoder."}, {"model.decoder.", "decoder."}, {".layers.", ".blocks."},
        {"self_attn_layer_norm", "attn_ln"}, {"encoder_attn_layer_norm", "cross_attn_ln"},
        {"final_layer_norm", "mlp_ln"}, {".self_attn.", ".attn."}, {".encoder_attn.", ".cross_attn."},
        {"q_proj", "query"}, {"k_proj", "key"}, {"v_proj", "value"}, {"out_proj", "out"},
        {".fc1.", ".mlp1."}, {".fc2.", ".mlp2."}, {"embed_tokens", "token_embedding"}};
    char buf[512];
    snprintf(buf, sizeof buf, "%s", hf);
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        char *p = strstr(buf, rules[r][0]);
        if (!p) continue;
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)(p - buf), buf, rules[r][1], p + strlen(rules[r][0]));
        snprintf(buf, sizeof buf, "%s", tmp);
    }
    snprintf(out, cap, "%s", buf);
}

/* Rewrites the HF checkpoint in MLX layout: openai names, convs [out, k, in],
 * MLX-style config.json. */
static void write_mlx_copy(const char *src, const char *dst) {
    choir_err err;
    char path[1200];
    choir_st *st = choir_st_open(src, &err);
    assert_non_null(st);
    mkdir(dst, 0755);
    choir_st_writer *w = choir_st_writer_create(&err);
    assert_non_null(w);
    float *tbuf[2] = {NULL, NULL};
    int nt = 0;
    for (int i = 0; i < choir_st_count(st); i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        char name[512];
        mlx_name(t->name, name, sizeof name);
        if (strstr(t->name, ".conv") && t->ndim == 3) {
            int64_t O = t->shape[0], I = t->shape[1], K = t->shape[2];
            float *c = choir_alloc(CHOIR_MEM_OTHER, (size_t)(O * I * K) * sizeof(float));
            const float *s = t->data;
            for (int64_t o = 0; o < O; o++)
                for (int64_t k = 0; k < K; k++)
                    for (int64_t in = 0; in < I; in++) c[(o * K + k) * I + in] = s[(o * I + in) * K + k];
            int64_t shape[3] = {O, K, I};
            assert_int_equal(choir_st_writer_add(w, name, CHOIR_DTYPE_F32, 3, shape, c, &err), 0);
            tbuf[nt++] = c;
        } else {
            assert_int_equal(choir_st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data, &err), 0);
        }
    }
    snprintf(path, sizeof path, "%s/weights.safetensors", dst);
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);
    for (int i = 0; i < nt; i++) choir_free(tbuf[i]);
    choir_st_close(st);
    snprintf(path, sizeof path, "%s/config.json", dst);
    const char *cfg = "{\"model_type\": \"whisper\", \"n_mels\": 80, \"n_audio_ctx\": 1500, "
                      "\"n_audio_state\": 64, \"n_audio_head\": 4, \"n_audio_layer\": 2, "
                      "\"n_vocab\": 51865, \"n_text_ctx\": 448, \"n_text_state\": 64, "
                      "\"n_text_head\": 4, \"n_text_layer\": 2}";
    assert_int_equal(tu_write_file(path, cfg, strlen(cfg)), 0);
}

static const float *ref(const char *key, int64_t n) {
    const choir_st_tensor *t = choir_st_find(g_ref, key);
    assert_non_null(t);
    assert_int_equal(t->numel, n);
    return t->data;
}

static int setup(void **state) {
    (void)state;
    choir_err err;
    snprintf(g_hf_dir, sizeof g_hf_dir, "%s", tu_tmpfile("hf"));
    snprintf(g_mlx_dir, sizeof g_mlx_dir, "%s", tu_tmpfile("mlx"));
    if (choir_randw_write_checkpoint(tu_fixture(FX "/manifest.json"), tu_fixture(FX "/config.json"),
                                     g_hf_dir, &err))
        return -1;
    g_model = choir_whisper_load(g_hf_dir, &err);
    g_ref = choir_st_open(tu_fixture(FX "/reference.safetensors"), &err);
    if (!g_model || !g_ref) return -1;
    for (int a = 0; a < 2; a++) {
        char key[32];
        snprintf(key, sizeof key, "a%d.mel", a);
        g_enc[a] = choir_alloc(CHOIR_MEM_OTHER, 1500 * 64 * sizeof(float));
        if (choir_whisper_encode(g_model, ref(key, 80 * 3000), 1, g_enc[a], &err)) return -1;
        g_cross[a] = choir_whisper_cross_create(g_model, g_enc[a], &err);
        if (!g_cross[a]) return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++) {
        choir_whisper_cross_free(g_cross[a]);
        choir_free(g_enc[a]);
    }
    choir_whisper_free(g_model);
    choir_st_close(g_ref);
    return 0;
}

static void test_encoder_parity_and_batch(void **state) {
    (void)state;
    assert_true(tu_rel_l2(g_enc[0], ref("a0.encoder_out", 1500 * 64), 1500 * 64) < 1e-4);
    assert_true(tu_rel_l2(g_enc[1], ref("a1.encoder_out", 1500 * 64), 1500 * 64) < 1e-4);
    /* Two windows in one call give what each gives alone. */
    float *mel = choir_alloc(CHOIR_MEM_OTHER, 2 * 80 * 3000 * sizeof(float));
    float *out = choir_alloc(CHOIR_MEM_OTHER, 2 * 1500 * 64 * sizeof(float));
    memcpy(mel, ref("a0.mel", 80 * 3000), 80 * 3000 * sizeof(float));
    memcpy(mel + 80 * 3000, ref("a1.mel", 80 * 3000), 80 * 3000 * sizeof(float));
    choir_err err;
    assert_int_equal(choir_whisper_encode(g_model, mel, 2, out, &err), 0);
    assert_true(tu_max_abs_diff(out, g_enc[0], 1500 * 64) == 0.0);
    assert_true(tu_max_abs_diff(out + 1500 * 64, g_enc[1], 1500 * 64) == 0.0);
    choir_free(mel);
    choir_free(out);
}

static void test_mlx_layout(void **state) {
    (void)state;
    choir_err err;
    write_mlx_copy(g_hf_dir, g_mlx_dir);
    choir_whisper *m = choir_whisper_load(g_mlx_dir, &err);
    assert_non_null(m);
    float *out = choir_alloc(CHOIR_MEM_OTHER, 1500 * 64 * sizeof(float));
    assert_int_equal(choir_whisper_encode(m, ref("a0.mel", 80 * 3000), 1, out, &err), 0);
    assert_true(tu_max_abs_diff(out, g_enc[0], 1500 * 64) == 0.0);
    choir_free(out);
    choir_whisper_free(m);
}

static void test_kv_cache_matches_full_pass(void **state) {
    (void)state;
    choir_err err;
    const int V = 51865, P = 11;
    int32_t toks[11] = {50258, 50259, 50359, 50363, 1, 2, 3, 464, 2068, 7586, 21831};
    float *all = choir_alloc(CHOIR_MEM_OTHER, (size_t)P * V * sizeof(float));
    float *step = choir_alloc(CHOIR_MEM_OTHER, (size_t)V * sizeof(float));
    choir_whisper_seq *s = choir_whisper_seq_create(g_model, 0, &err);
    choir_whisper_seq_reset(s, g_cross[0]);
    int n = P;
    assert_int_equal(choir_whisper_decode(g_model, &s, 1, toks, &n, true, all, &err), 0);
    assert_true(tu_rel_l2(all, ref("a0.logits", (int64_t)P * V), (size_t)P * V) < 1e-4);
    /* The same logits one token at a time through the cache, after a rewind. */
    choir_whisper_seq_truncate(s, 0);
    n = 1;
    for (int i = 0; i < P; i++) {
        assert_int_equal(choir_whisper_decode(g_model, &s, 1, toks + i, &n, false, step, &err), 0);
        assert_true(tu_rel_l2(step, all + (size_t)i * V, V) < 1e-5);
    }
    assert_int_equal(choir_whisper_seq_len(s), P);
    /* Errors: a token outside the vocabulary, a sequence past the context. */
    int32_t bad = 60000;
    assert_int_equal(choir_whisper_decode(g_model, &s, 1, &bad, &n, false, step, &err), CHOIR_EINVAL);
    int big = 440;
    int32_t *many = choir_calloc(CHOIR_MEM_OTHER, 440, sizeof(int32_t));
    assert_int_equal(choir_whisper_decode(g_model, &s, 1, many, &big, false, step, &err), CHOIR_ETOOBIG);
    choir_free(many);
    choir_whisper_seq_free(s);
    choir_free(all);
    choir_free(step);
}

/* Logits of a 11-token teacher-forced pass over window a0 of m (all
 * positions, [11][V]) and of the same tokens one step at a time ([11][V]),
 * with caches of dtype kv. */
static void half_cache_logits(choir_whisper *m, choir_dtype kv, float *all, float *steps) {
    choir_err err;
    const int V = 51865, P = 11;
    int32_t toks[11] = {50258, 50259, 50359, 50363, 1, 2, 3, 464, 2068, 7586, 21831};
    choir_dtype keep = m->cache_kv;
    m->cache_kv = kv;
    float *enc = choir_alloc(CHOIR_MEM_OTHER, 1500 * 64 * sizeof(float));
    assert_int_equal(choir_whisper_encode(m, ref("a0.mel", 80 * 3000), 1, enc, &err), 0);
    choir_whisper_cross *cr = choir_whisper_cross_create(m, enc, &err);
    choir_whisper_seq *s = choir_whisper_seq_create(m, 0, &err);
    assert_non_null(cr);
    assert_non_null(s);
    assert_int_equal(cr->kv, kv);
    assert_int_equal(s->kv, kv);
    choir_whisper_seq_reset(s, cr);
    int n = P;
    assert_int_equal(choir_whisper_decode(m, &s, 1, toks, &n, true, all, &err), 0);
    choir_whisper_seq_truncate(s, 0);
    n = 1;
    for (int i = 0; i < P; i++)
        assert_int_equal(choir_whisper_decode(m, &s, 1, toks + i, &n, false, steps + (size_t)i * V, &err), 0);
    choir_whisper_seq_free(s);
    choir_whisper_cross_free(cr);
    choir_free(enc);
    m->cache_kv = keep;
}

/* A 16-bit model keeps its caches on the CPU in its own dtype (cross K/V
 * and self-attention), read by the 16-bit attention kernels: a prompt's
 * pass (11 rows: keys widened into scratch) and single steps (read where
 * they lie) against the same model with f32 caches. Measured on this
 * fixture: rel L2 of the logits 1.2e-4 (f16) and 1.1e-3 (bf16), prompt
 * and steps alike, on each ISA; the bounds are about 5x that. Greedy decoding (24 tokens,
 * timestamps) picks the same tokens, and an arena-carved transcription
 * of the 16-bit model gives the transcript of one without an arena. */
static void test_half_caches(void **state) {
    (void)state;
    choir_err err;
    const int V = 51865, P = 11;
    const choir_dtype dts[2] = {CHOIR_DTYPE_F16, CHOIR_DTYPE_BF16};
    const double bound[2] = {6e-4, 5e-3};
    float *all16 = choir_alloc(CHOIR_MEM_OTHER, (size_t)P * V * sizeof(float));
    float *steps16 = choir_alloc(CHOIR_MEM_OTHER, (size_t)P * V * sizeof(float));
    float *all32 = choir_alloc(CHOIR_MEM_OTHER, (size_t)P * V * sizeof(float));
    float *steps32 = choir_alloc(CHOIR_MEM_OTHER, (size_t)P * V * sizeof(float));
    for (int t = 0; t < 2; t++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s", tu_tmpfile(t ? "hf-bf16" : "hf-f16"));
        choir_convert_params cp;
        choir_convert_default_params(&cp);
        cp.dtype = dts[t];
        assert_int_equal(choir_convert(g_hf_dir, dir, &cp, NULL, &err), 0);
        choir_whisper *m = choir_whisper_load(dir, &err);
        assert_non_null(m);
        assert_int_equal(m->cache_kv, dts[t]);
        half_cache_logits(m, dts[t], all16, steps16);
        half_cache_logits(m, CHOIR_DTYPE_F32, all32, steps32);
        double ea = tu_rel_l2(all16, all32, (size_t)P * V), es = tu_rel_l2(steps16, steps32, (size_t)P * V);
        printf("%s caches: logits rel L2 %.3g (prompt) %.3g (steps)\n", t ? "bf16" : "f16", ea, es);
        assert_true(ea < bound[t]);
        assert_true(es < bound[t]);
        /* Greedy with timestamps over 16-bit and f32 caches. */
        float *enc = choir_alloc(CHOIR_MEM_OTHER, 1500 * 64 * sizeof(float));
        assert_int_equal(choir_whisper_encode(m, ref("a0.mel", 80 * 3000), 1, enc, &err), 0);
        choir_whisper_params p;
        choir_whisper_default_params(&p);
        p.sample_len = 24;
        choir_whisper_result r[2];
        for (int k = 0; k < 2; k++) {
            m->cache_kv = k ? CHOIR_DTYPE_F32 : dts[t];
            choir_whisper_cross *cr = choir_whisper_cross_create(m, enc, &err);
            assert_non_null(cr);
            choir_whisper_window w = {.cross = cr, .language = -1, .seed = 1};
            assert_int_equal(choir_whisper_decode_windows(m, NULL, &w, 1, &p, 0.0f, &r[k], &err), 0);
            choir_whisper_cross_free(cr);
        }
        m->cache_kv = dts[t];
        assert_int_equal(r[0].n_tokens, r[1].n_tokens);
        for (int i = 0; i < r[0].n_tokens; i++) assert_int_equal(r[0].tokens[i], r[1].tokens[i]);
        for (int k = 0; k < 2; k++) choir_whisper_result_clear(&r[k]);
        choir_free(enc);
        /* The caches carved from an arena are 16-bit too. */
        float *pcm = choir_alloc(CHOIR_MEM_OTHER, 3 * 16000 * sizeof(float));
        tu_fill_uniform(pcm, 3 * 16000, 7, -0.1f, 0.1f);
        choir_whisper_transcribe_opts o;
        choir_whisper_default_transcribe_opts(&o);
        o.params.sample_len = 16;
        choir_whisper_transcript tr[2];
        choir_tokenizer *tok = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
        choir_arena *arena = choir_arena_create(256u << 20, CHOIR_MEM_ACTIVATIONS, &err);
        assert_non_null(tok);
        assert_non_null(arena);
        for (int k = 0; k < 2; k++) {
            o.arena = k ? arena : NULL;
            assert_int_equal(choir_whisper_transcribe(m, tok, pcm, 3 * 16000, &o, &tr[k], &err), 0);
        }
        assert_int_equal(tr[0].n_segments, tr[1].n_segments);
        assert_string_equal(tr[0].text, tr[1].text);
        for (int i = 0; i < tr[0].n_segments; i++)
            assert_true(tr[0].segments[i].avg_logprob == tr[1].segments[i].avg_logprob);
        for (int k = 0; k < 2; k++) choir_whisper_transcript_clear(&tr[k]);
        choir_arena_free(arena);
        choir_tokenizer_free(tok);
        choir_free(pcm);
        choir_whisper_free(m);
    }
    choir_free(all16);
    choir_free(steps16);
    choir_free(all32);
    choir_free(steps32);
}

static void check_same(const choir_whisper_result *a, const choir_whisper_result *b) {
    assert_int_equal(a->n_tokens, b->n_tokens);
    for (int i = 0; i < a->n_tokens; i++) assert_int_equal(a->tokens[i], b->tokens[i]);
    assert_true(fabsf(a->avg_logprob - b->avg_logprob) < 1e-4f);
    assert_true(fabsf(a->no_speech_prob - b->no_speech_prob) < 1e-5f);
    assert_int_equal(a->language, b->language);
}

/* Windows decoded together give what each gives alone (greedy, beam, sampling,
 * with different prompts so that the windows differ in length). */
static void check_batch_invariance(const choir_whisper_params *p, float T) {
    choir_err err;
    int32_t prompt[3] = {400, 370, 452};
    choir_whisper_window w[3] = {
        {.cross = g_cross[0], .language = -1, .seed = 1},
        {.cross = g_cross[1], .prompt = prompt, .n_prompt = 3, .language = -1, .seed = 2},
        {.cross = g_cross[0], .prompt = prompt, .n_prompt = 1, .language = 2, .seed = 3}};
    choir_whisper_result together[3], alone;
    assert_int_equal(choir_whisper_decode_windows(g_model, NULL, w, 3, p, T, together, &err), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(choir_whisper_decode_windows(g_model, NULL, &w[i], 1, p, T, &alone, &err), 0);
        check_same(&together[i], &alone);
        assert_true(together[i].n_tokens <= p->sample_len);
        choir_whisper_result_clear(&alone);
    }
    assert_int_equal(together[2].language, 2);
    for (int i = 0; i < 3; i++) choir_whisper_result_clear(&together[i]);
}

static void test_batch_invariance(void **state) {
    (void)state;
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.sample_len = 24;
    check_batch_invariance(&p, 0.0f); /* greedy with timestamps */
    p.timestamps = false;
    check_batch_invariance(&p, 0.0f);
    p.beam_size = 3;
    check_batch_invariance(&p, 0.0f);
    p.best_of = 3;
    check_batch_invariance(&p, 0.6f);
}

static void test_greedy_follows_rules(void **state) {
    (void)state;
    /* With timestamps on, the first token is a timestamp within 1 s and
     * timestamps never go backwards. */
    choir_err err;
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.sample_len = 40;
    p.language = 0;
    choir_whisper_window w = {.cross = g_cross[1], .language = -1};
    choir_whisper_result r;
    assert_int_equal(choir_whisper_decode_windows(g_model, NULL, &w, 1, &p, 0.0f, &r, &err), 0);
    const choir_whisper_specials *sp = choir_whisper_get_specials(g_model);
    assert_true(r.n_tokens >= 1);
    assert_true(r.tokens[0] >= sp->timestamp_begin && r.tokens[0] <= sp->timestamp_begin + 50);
    int32_t last = -1;
    for (int i = 0; i < r.n_tokens; i++) {
        assert_true(r.tokens[i] != sp->eot && r.tokens[i] != sp->no_timestamps);
        if (r.tokens[i] >= sp->timestamp_begin) {
            assert_true(r.tokens[i] >= last);
            last = r.tokens[i];
        }
    }
    assert_true(r.avg_logprob < 0.0f);
    assert_true(r.no_speech_prob >= 0.0f && r.no_speech_prob <= 1.0f);
    choir_whisper_result_clear(&r);
}

static void test_language_detection(void **state) {
    (void)state;
    choir_err err;
    float probs[CHOIR_WHISPER_MAX_LANGS];
    int lang = -1;
    assert_int_equal(choir_whisper_detect_language(g_model, g_cross[0], &lang, probs, &err), 0);
    const choir_whisper_specials *sp = choir_whisper_get_specials(g_model);
    assert_true(lang >= 0 && lang < sp->num_languages);
    double sum = 0;
    int best = 0;
    for (int i = 0; i < sp->num_languages; i++) {
        sum += probs[i];
        if (probs[i] > probs[best]) best = i;
    }
    assert_true(fabs(sum - 1.0) < 1e-4);
    assert_int_equal(best, lang);
    /* Decoding with the language left open uses the detected one. */
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.sample_len = 2;
    choir_whisper_window w = {.cross = g_cross[0], .language = -1};
    choir_whisper_result r;
    assert_int_equal(choir_whisper_decode_windows(g_model, NULL, &w, 1, &p, 0.0f, &r, &err), 0);
    assert_int_equal(r.language, lang);
    choir_whisper_result_clear(&r);
}

/* The fallback gates, on a model whose (random) output is very unlikely:
 * avg_logprob is far below -1, and no-speech probability is tiny. */
static void test_temperature_fallback(void **state) {
    (void)state;
    choir_err err;
    choir_tokenizer *tok = choir_tokenizer_load(tu_fixture("real/tokenizer/multilingual.tiktoken"), &err);
    assert_non_null(tok);
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.language = 0;
    p.sample_len = 6;
    p.best_of = 2;
    p.n_temperatures = 3;
    p.temperatures[0] = 0.0f, p.temperatures[1] = 0.5f, p.temperatures[2] = 1.0f;
    choir_whisper_window w[2] = {{.cross = g_cross[0], .language = -1, .seed = 1},
                                 {.cross = g_cross[1], .language = -1, .seed = 2}};
    choir_whisper_result r[2];
    /* Too unlikely at every temperature: the last one's result is kept. */
    assert_int_equal(choir_whisper_decode_fallback(g_model, tok, w, 2, &p, r, &err), 0);
    for (int i = 0; i < 2; i++) {
        assert_true(r[i].avg_logprob < -1.0f);
        assert_float_equal(r[i].temperature, 1.0f, 0);
        assert_non_null(r[i].text);
        assert_true(r[i].compression_ratio > 0.0f);
        choir_whisper_result_clear(&r[i]);
    }
    /* Likelihood gate off: accepted at temperature 0. */
    p.logprob_threshold = -1000.0f;
    assert_int_equal(choir_whisper_decode_fallback(g_model, tok, w, 2, &p, r, &err), 0);
    for (int i = 0; i < 2; i++) {
        assert_float_equal(r[i].temperature, 0.0f, 0);
        choir_whisper_result_clear(&r[i]);
    }
    /* Compression gate alone: any text compresses worse than ratio 0.01. */
    p.compression_ratio_threshold = 0.01f;
    assert_int_equal(choir_whisper_decode_fallback(g_model, tok, w, 2, &p, r, &err), 0);
    for (int i = 0; i < 2; i++) {
        assert_float_equal(r[i].temperature, 1.0f, 0);
        choir_whisper_result_clear(&r[i]);
    }
    /* Silence: no-speech above its threshold and unlikely text is accepted as is. */
    p.compression_ratio_threshold = 2.4f;
    p.logprob_threshold = -1.0f;
    p.no_speech_threshold = 0.0f;
    assert_int_equal(choir_whisper_decode_fallback(g_model, tok, w, 2, &p, r, &err), 0);
    for (int i = 0; i < 2; i++) {
        assert_float_equal(r[i].temperature, 0.0f, 0);
        choir_whisper_result_clear(&r[i]);
    }
    choir_tokenizer_free(tok);
}

static void test_beam_search(void **state) {
    (void)state;
    choir_err err;
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.language = 0;
    p.timestamps = false;
    p.sample_len = 10;
    choir_whisper_window w = {.cross = g_cross[1], .language = -1};
    choir_whisper_result g, b;
    assert_int_equal(choir_whisper_decode_windows(g_model, NULL, &w, 1, &p, 0.0f, &g, &err), 0);
    p.beam_size = 5;
    assert_int_equal(choir_whisper_decode_windows(g_model, NULL, &w, 1, &p, 0.0f, &b, &err), 0);
    /* Neither finishes within 10 tokens here, so both rank by the sum of
     * log-probabilities; beam search keeps the five likeliest prefixes at every
     * step, and on these weights its best beats (or equals) the greedy path. */
    assert_int_equal(g.n_tokens, 10);
    assert_int_equal(b.n_tokens, 10);
    assert_true(b.sum_logprob >= g.sum_logprob - 1e-4f);
    choir_whisper_result_clear(&g);
    choir_whisper_result_clear(&b);
}

static void test_load_errors(void **state) {
    (void)state;
    choir_err err;
    assert_null(choir_whisper_load(tu_tmpfile("nowhere"), &err));
    assert_true(err.code < 0);
    /* Every allocation of a load may fail without a crash or a leak. */
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    for (int64_t k = 1; k < 400; k += 7) {
        choir_alloc_fail_after(k);
        choir_whisper *m = choir_whisper_load(g_hf_dir, &err);
        choir_alloc_fail_after(0);
        choir_whisper_free(m);
    }
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder_parity_and_batch),
        cmocka_unit_test(test_mlx_layout),
        cmocka_unit_test(test_kv_cache_matches_full_pass),
        cmocka_unit_test(test_half_caches),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_greedy_follows_rules),
        cmocka_unit_test(test_language_detection),
        cmocka_unit_test(test_temperature_fallback),
        cmocka_unit_test(test_beam_search),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
