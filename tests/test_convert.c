/* Tests of the converter: what gets quantized per model family, the bytes it
 * writes (identical to choir_quantize on the same input), round trips
 * (quantized -> copy, quantized -> float), config.json records, side files,
 * and the combinations it refuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/convert.h"
#include "choir/json.h"
#include "choir/quant.h"
#include "choir/safetensors.h"
#include "testutil.h"

enum { D = 128, FF = 256, L = 3, POS = 40, VOCAB = 50 };

/* A small whisper-shaped float checkpoint at dir (F32), with side files. */
static void make_source(const char *dir) {
    mkdir(dir, 0755);
    choir_err err;
    choir_st_writer *w = choir_st_writer_create(&err);
    assert_non_null(w);
    char name[128];
    uint64_t seed = 1;
    float *buf = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * FF * FF);
    static const char *const mats[] = {"q_proj", "k_proj", "v_proj", "fc1", "fc2"};
    for (int l = 0; l < L; l++)
        for (int m = 0; m < 5; m++) {
            int64_t shape[2] = {m == 3 ? FF : D, m == 4 ? FF : D};
            snprintf(name, sizeof name, "model.decoder.layers.%d.%s.weight", l, mats[m]);
            tu_fill_uniform(buf, (size_t)(shape[0] * shape[1]), seed++, -0.1f, 0.1f);
            assert_int_equal(choir_st_writer_add(w, name, CHOIR_DTYPE_F32, 2, shape, buf, &err), 0);
        }
    int64_t emb[2] = {VOCAB, D}, pos[2] = {POS, D}, ln[1] = {D}, conv[3] = {D, 80, 3},
            odd[2] = {4, 9}, ids[1] = {3};
    tu_fill_uniform(buf, VOCAB * D, seed++, -1, 1);
    assert_int_equal(choir_st_writer_add(w, "model.decoder.embed_tokens.weight", CHOIR_DTYPE_F32, 2, emb, buf, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "model.decoder.embed_positions.weight", CHOIR_DTYPE_F32, 2, pos, buf, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "model.decoder.layer_norm.weight", CHOIR_DTYPE_F32, 1, ln, buf, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "model.encoder.conv1.weight", CHOIR_DTYPE_F32, 3, conv, buf, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "model.odd.weight", CHOIR_DTYPE_F32, 2, odd, buf, &err), 0);
    int32_t idv[3] = {7, 8, 9};
    assert_int_equal(choir_st_writer_add(w, "model.ids", CHOIR_DTYPE_I32, 1, ids, idv, &err), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);
    choir_free(buf);
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg = "{\"model_type\": \"whisper\", \"d_model\": 128}\n";
    assert_int_equal(tu_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(tu_write_file(path, "{\"v\":1}", 7), 0);
    snprintf(path, sizeof path, "%s/voices", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/voices/a.bin", dir);
    assert_int_equal(tu_write_file(path, "\x01\x02\x03", 3), 0);
}

static cJSON *load_config(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *c = choir_json_load(path, NULL);
    assert_non_null(c);
    return c;
}

static choir_convert_params quiet_params(void) {
    choir_convert_params p;
    choir_convert_default_params(&p);
    return p;
}

static void test_rules(void **state) {
    (void)state;
    int64_t s_ok[2] = {256, 128}, s_odd[2] = {1, 9}, s_96[2] = {8, 96};
    const char *why;
    choir_convert_model W = CHOIR_CONVERT_MODEL_WHISPER;
    assert_true(choir_convert_should_quantize(W, "model.decoder.layers.0.fc1.weight", 2, s_ok, 64, &why));
    assert_true(choir_convert_should_quantize(W, "model.decoder.embed_tokens.weight", 2, s_ok, 64, &why));
    assert_false(choir_convert_should_quantize(W, "model.decoder.embed_positions.weight", 2, s_ok, 64, &why));
    assert_false(choir_convert_should_quantize(W, "decoder.positional_embedding", 2, s_ok, 64, &why));
    assert_false(choir_convert_should_quantize(W, "model.decoder.layers.0.fc1.bias", 1, s_ok, 64, &why));
    assert_false(choir_convert_should_quantize(W, "model.encoder.conv1.weight", 3, s_ok, 64, &why));
    /* 96 divides by 32 but not by 64, which mlx-audio's converter requires */
    assert_false(choir_convert_should_quantize(W, "a.weight", 2, s_96, 32, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_KOKORO,
                                               "decoder.generator.m_source.l_linear.weight", 2,
                                               s_odd, 64, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_KOKORO,
                                               "text_encoder.lstm.weight_ih_l0", 2, s_ok, 64, &why));
    assert_true(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_KOKORO,
                                              "predictor.F0.0.norm1.fc.weight", 2, s_ok, 64, &why));
    assert_false(choir_convert_should_quantize(CHOIR_CONVERT_MODEL_SILERO, "x.weight", 2, s_ok, 64, &why));

    /* families from the fixtures' real configs */
    static const struct { const char *cfg; choir_convert_model m; } fams[] = {
        {"whisper/whisper-ml80/config.json", CHOIR_CONVERT_MODEL_WHISPER},
        {"kokoro/kokoro-v1/config.json", CHOIR_CONVERT_MODEL_KOKORO},
        {"mossformer2/mossformer2-se-48k/config.json", CHOIR_CONVERT_MODEL_MOSSFORMER2},
    };
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        cJSON *c = choir_json_load(tu_fixture(fams[i].cfg), NULL);
        assert_non_null(c);
        assert_int_equal(choir_convert_detect_model(c), fams[i].m);
        cJSON_Delete(c);
    }
    assert_int_equal(choir_convert_detect_model(NULL), CHOIR_CONVERT_MODEL_GENERIC);

    /* mixed recipes: 24 layers, high bits in layers 0-2, 21-23 and every third */
    assert_int_equal(choir_convert_mixed_bits("mixed_3_6", "model.layers.0.self_attn.v_proj", 24), 6);
    assert_int_equal(choir_convert_mixed_bits("mixed_3_6", "model.layers.4.self_attn.v_proj", 24), 3);
    assert_int_equal(choir_convert_mixed_bits("mixed_3_6", "model.layers.5.self_attn.v_proj", 24), 6);
    assert_int_equal(choir_convert_mixed_bits("mixed_3_6", "model.layers.5.self_attn.q_proj", 24), 3);
    assert_int_equal(choir_convert_mixed_bits("mixed_4_6", "model.layers.22.mlp.down_proj", 24), 6);
    assert_int_equal(choir_convert_mixed_bits("mixed_4_6", "lm_head", 24), 6);
    assert_int_equal(choir_convert_mixed_bits("mixed_2_9", "lm_head", 24), 0);
}

static void test_quantize_and_load_back(void **state) {
    (void)state;
    char src[512], dst[512], dst2[512], path[600];
    snprintf(src, sizeof src, "%s", tu_tmpfile("src"));
    snprintf(dst, sizeof dst, "%s", tu_tmpfile("q4"));
    snprintf(dst2, sizeof dst2, "%s", tu_tmpfile("q4copy"));
    make_source(src);
    choir_convert_params p = quiet_params();
    p.q_bits = 4;
    p.q_group_size = 64;
    choir_err err;
    choir_convert_stats stats;
    int64_t held = choir_mem_current(CHOIR_MEM_WEIGHTS);
    choir_mem_reset_peaks();
    assert_int_equal(choir_convert(src, dst, &p, &stats, &err), 0);
    assert_int_equal(stats.quantized, L * 5 + 1);
    assert_true(stats.bytes_out < stats.bytes_in / 4);
    int64_t peak = choir_mem_peak(CHOIR_MEM_WEIGHTS) - held;
    /* f32 temporaries are freed as it goes: the peak is the mapped input,
     * the output buffers (and the output mapped again for its index), and one
     * tensor's f32 copy; holding every temporary would add ~bytes_in. */
    assert_true(peak <= (int64_t)stats.bytes_in + 2 * (int64_t)stats.bytes_out +
                             (int64_t)FF * D * 4 + 65536);

    choir_st *in = choir_st_open(src, &err), *out = choir_st_open(dst, &err);
    assert_non_null(in);
    assert_non_null(out);
    assert_string_equal(choir_st_metadata(out, "format"), "mlx");
    cJSON *cfg = load_config(dst);
    assert_string_equal(choir_json_str(cfg, "model_type", ""), "whisper");
    choir_quant_config *qc = choir_quant_config_from_json(cfg, &err);
    int bits, group;
    assert_int_equal(choir_quant_config_global(qc, &bits, &group), 1);
    assert_int_equal(bits, 4);
    assert_int_equal(group, 64);
    assert_non_null(cJSON_GetObjectItem(cfg, "quantization_config"));

    /* the packed bytes are exactly choir_quantize's on the same values */
    const choir_st_tensor *fc1 = choir_st_find(in, "model.decoder.layers.1.fc1.weight");
    choir_weight W;
    assert_int_equal(choir_weight_from_st(out, "model.decoder.layers.1.fc1", qc, &W, &err), 0);
    assert_int_equal(W.kind, CHOIR_WEIGHT_QUANT);
    assert_int_equal(choir_weight_expect(&W, FF, D, "fc1", &err), 0);
    uint32_t *packed = choir_alloc(CHOIR_MEM_OTHER, FF * D / 8 * 4);
    float *sc = choir_alloc(CHOIR_MEM_OTHER, FF * 2 * 4), *bi = choir_alloc(CHOIR_MEM_OTHER, FF * 2 * 4);
    assert_int_equal(choir_quantize(fc1->data, FF, D, 4, 64, CHOIR_DTYPE_F32, packed, sc, bi, NULL), 0);
    assert_memory_equal(W.data, packed, FF * D / 8 * 4);
    assert_memory_equal(W.scales, sc, FF * 2 * 4);
    assert_memory_equal(W.biases, bi, FF * 2 * 4);
    choir_free(packed);
    choir_free(sc);
    choir_free(bi);

    /* exclusions stay float and byte-identical; non-float tensors copied */
    static const char *const kept[] = {"model.decoder.embed_positions.weight",
                                       "model.decoder.layer_norm.weight",
                                       "model.encoder.conv1.weight", "model.odd.weight",
                                       "model.ids"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        const choir_st_tensor *a = choir_st_find(in, kept[i]), *b = choir_st_find(out, kept[i]);
        assert_non_null(b);
        assert_int_equal(a->dtype, b->dtype);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    assert_null(choir_st_find(out, "model.decoder.embed_positions.scales"));
    assert_non_null(choir_st_find(out, "model.decoder.embed_tokens.scales"));

    /* side files */
    size_t len;
    snprintf(path, sizeof path, "%s/voices/a.bin", dst);
    char *data = tu_read_file(path, &len);
    assert_non_null(data);
    assert_int_equal(len, 3);
    assert_memory_equal(data, "\x01\x02\x03", 3);
    free(data);
    snprintf(path, sizeof path, "%s/tokenizer.json", dst);
    data = tu_read_file(path, &len);
    assert_non_null(data);
    free(data);

    /* converting the quantized output again without options copies it */
    assert_int_equal(choir_convert(dst, dst2, &p, &stats, &err), CHOIR_OK);
    choir_convert_params keep = quiet_params();
    assert_int_equal(choir_convert(dst, dst2, &keep, &stats, &err), 0);
    choir_st *again = choir_st_open(dst2, &err);
    assert_non_null(again);
    assert_int_equal(choir_st_count(again), choir_st_count(out));
    for (int i = 0; i < choir_st_count(out); i++) {
        const choir_st_tensor *a = choir_st_at(out, i), *b = choir_st_find(again, a->name);
        assert_non_null(b);
        assert_int_equal(a->dtype, b->dtype);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    choir_st_close(again);

    /* --dtype on a quantized input keeps the codes and casts scales/biases */
    char dst3[512];
    snprintf(dst3, sizeof dst3, "%s", tu_tmpfile("q4f16"));
    keep.dtype = CHOIR_DTYPE_F16;
    assert_int_equal(choir_convert(dst, dst3, &keep, &stats, &err), 0);
    assert_int_equal(stats.quantized, L * 5 + 1);
    choir_st *f16 = choir_st_open(dst3, &err);
    assert_non_null(f16);
    const choir_st_tensor *a = choir_st_find(out, "model.decoder.layers.0.fc2.weight");
    const choir_st_tensor *b = choir_st_find(f16, "model.decoder.layers.0.fc2.weight");
    assert_memory_equal(a->data, b->data, a->nbytes);
    a = choir_st_find(out, "model.decoder.layers.0.fc2.scales");
    b = choir_st_find(f16, "model.decoder.layers.0.fc2.scales");
    assert_int_equal(b->dtype, CHOIR_DTYPE_F16);
    for (int64_t i = 0; i < a->numel; i++)
        assert_int_equal(((const uint16_t *)b->data)[i], choir_f32_to_f16(((const float *)a->data)[i]));
    choir_st_close(f16);
    cJSON_Delete(cfg);
    choir_quant_config_free(qc);
    choir_st_close(in);
    choir_st_close(out);
}

static void test_dequantize_and_mixed(void **state) {
    (void)state;
    char src[512], q[512], deq[512], mixed[512];
    snprintf(src, sizeof src, "%s", tu_tmpfile("src2"));
    snprintf(q, sizeof q, "%s", tu_tmpfile("q6"));
    snprintf(deq, sizeof deq, "%s", tu_tmpfile("deq"));
    snprintf(mixed, sizeof mixed, "%s", tu_tmpfile("mixed"));
    make_source(src);
    choir_err err;
    choir_convert_params p = quiet_params();
    p.q_bits = 6;
    p.q_group_size = 32;
    p.dtype = CHOIR_DTYPE_BF16;
    assert_int_equal(choir_convert(src, q, &p, NULL, &err), 0);
    p = quiet_params();
    p.dequantize = true;
    assert_int_equal(choir_convert(q, deq, &p, NULL, &err), 0);

    choir_st *qs = choir_st_open(q, &err), *ds = choir_st_open(deq, &err);
    assert_non_null(qs);
    assert_non_null(ds);
    cJSON *cfg = load_config(q);
    choir_quant_config *qc = choir_quant_config_from_json(cfg, &err);
    choir_weight W;
    assert_int_equal(choir_weight_from_st(qs, "model.decoder.layers.2.v_proj", qc, &W, &err), 0);
    assert_int_equal(W.bits, 6);
    assert_int_equal(W.sb_dtype, CHOIR_DTYPE_BF16);
    const choir_st_tensor *f = choir_st_find(ds, "model.decoder.layers.2.v_proj.weight");
    assert_non_null(f);
    assert_int_equal(f->dtype, CHOIR_DTYPE_BF16);
    assert_int_equal(f->shape[1], D);
    float row[D];
    for (int r = 0; r < D; r++) {
        choir_quant_dequant_row(&W, r, row);
        for (int c = 0; c < D; c++)
            assert_int_equal(((const uint16_t *)f->data)[r * D + c], choir_f32_to_bf16(row[c]));
    }
    cJSON *dcfg = load_config(deq);
    assert_null(cJSON_GetObjectItem(dcfg, "quantization"));
    cJSON_Delete(dcfg);
    cJSON_Delete(cfg);
    choir_quant_config_free(qc);
    choir_st_close(qs);
    choir_st_close(ds);

    /* mixed_4_6 over 3 layers: n/8 = 0, so only the last layer (2 >= 7n/8)
     * gets 6-bit v_proj and fc2; the tied token embedding (head) too */
    p = quiet_params();
    p.quant_predicate = "mixed_4_6";
    assert_int_equal(choir_convert(src, mixed, &p, NULL, &err), 0);
    cfg = load_config(mixed);
    qc = choir_quant_config_from_json(cfg, &err);
    choir_st *ms = choir_st_open(mixed, &err);
    int bits, group;
    assert_int_equal(choir_quant_config_layer(qc, "model.decoder.layers.2.v_proj", &bits, &group), 1);
    assert_int_equal(bits, 6);
    assert_int_equal(choir_quant_config_layer(qc, "model.decoder.layers.0.v_proj", &bits, &group), 1);
    assert_int_equal(bits, 4);
    assert_int_equal(choir_quant_config_layer(qc, "model.decoder.layers.1.v_proj", &bits, &group), 1);
    assert_int_equal(bits, 4);
    assert_int_equal(choir_weight_from_st(ms, "model.decoder.layers.2.fc2", qc, &W, &err), 0);
    assert_int_equal(W.bits, 6);
    assert_int_equal(choir_weight_from_st(ms, "model.decoder.embed_tokens", qc, &W, &err), 0);
    assert_int_equal(W.bits, 6);
    assert_int_equal(choir_weight_from_st(ms, "model.decoder.layers.1.fc1", qc, &W, &err), 0);
    assert_int_equal(W.bits, 4);
    choir_st_close(ms);
    cJSON_Delete(cfg);
    choir_quant_config_free(qc);
}

static void test_mlx_exact(void **state) {
    (void)state;
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s", tu_tmpfile("src4"));
    snprintf(dst, sizeof dst, "%s", tu_tmpfile("exact"));
    make_source(src);
    choir_err err;
    choir_convert_params p = quiet_params();
    p.q_bits = 3;
    p.mlx_exact = true;
    assert_int_equal(choir_convert(src, dst, &p, NULL, &err), 0);
    choir_st *in = choir_st_open(src, &err), *out = choir_st_open(dst, &err);
    assert_non_null(out);
    const choir_st_tensor *w = choir_st_find(in, "model.decoder.layers.2.fc2.weight");
    uint32_t *packed = choir_alloc(CHOIR_MEM_OTHER, (size_t)D * FF * 3 / 8);
    float *sc = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * D * FF / 64);
    float *bi = choir_alloc(CHOIR_MEM_OTHER, sizeof(float) * D * FF / 64);
    assert_int_equal(choir_quantize_mlx(w->data, D, FF, 3, 64, CHOIR_DTYPE_F32, packed, sc, bi, NULL), 0);
    assert_memory_equal(choir_st_find(out, "model.decoder.layers.2.fc2.weight")->data, packed,
                        (size_t)D * FF * 3 / 8);
    assert_memory_equal(choir_st_find(out, "model.decoder.layers.2.fc2.scales")->data, sc,
                        sizeof(float) * D * FF / 64);
    choir_free(packed);
    choir_free(sc);
    choir_free(bi);
    choir_st_close(in);
    choir_st_close(out);
}

static void test_refusals(void **state) {
    (void)state;
    char src[512];
    snprintf(src, sizeof src, "%s", tu_tmpfile("src3"));
    make_source(src);
    const char *dst = tu_tmpfile("never");
    choir_err err;
    choir_convert_params p = quiet_params();
    p.q_bits = 7;
    assert_int_equal(choir_convert(src, dst, &p, NULL, &err), CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "7-bit"));
    p = quiet_params();
    p.q_bits = 4;
    p.q_group_size = 16;
    assert_int_equal(choir_convert(src, dst, &p, NULL, &err), CHOIR_EUNSUPPORTED);
    p = quiet_params();
    p.q_bits = 4;
    p.dequantize = true;
    assert_int_equal(choir_convert(src, dst, &p, NULL, &err), CHOIR_EINVAL);
    p = quiet_params();
    p.q_bits = 4;
    p.quant_predicate = "mixed_3_6";
    assert_int_equal(choir_convert(src, dst, &p, NULL, &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "mixed_3_6"));
    p = quiet_params();
    p.dtype = CHOIR_DTYPE_I32;
    assert_int_equal(choir_convert(src, dst, &p, NULL, &err), CHOIR_EINVAL);
    p = quiet_params();
    assert_int_equal(choir_convert(src, src, &p, NULL, &err), CHOIR_EINVAL);
    assert_int_equal(choir_convert(tu_tmpfile("nothing-here"), dst, &p, NULL, &err),
                     CHOIR_ENOTFOUND);
    p.q_bits = 4;
    assert_int_equal(choir_convert("model.onnx", dst, &p, NULL, &err), CHOIR_EUNSUPPORTED);
    struct stat sb;
    assert_int_not_equal(stat(dst, &sb), 0); /* nothing was written */
}

/* Kokoro from PyTorch: names normalized ("module." dropped), embeddings and
 * linears quantized, LSTMs and weight-norm parts kept; a hostile pickle is
 * refused; Silero's ONNX goes to the VAD converter. */
static void test_pth_and_onnx(void **state) {
    (void)state;
    char src[512], dst[512], path[700];
    snprintf(src, sizeof src, "%s", tu_tmpfile("kpth"));
    snprintf(dst, sizeof dst, "%s", tu_tmpfile("k4"));
    mkdir(src, 0755);
    size_t len;
    void *data = tu_read_file(tu_fixture("kokoro/pth/kokoro_subset.pth"), &len);
    assert_non_null(data);
    snprintf(path, sizeof path, "%s/kokoro-v1_0.pth", src);
    assert_int_equal(tu_write_file(path, data, len), 0);
    free(data);
    data = tu_read_file(tu_fixture("kokoro/kokoro-v1/config.json"), &len);
    assert_non_null(data);
    snprintf(path, sizeof path, "%s/config.json", src);
    assert_int_equal(tu_write_file(path, data, len), 0);
    free(data);

    choir_err err;
    choir_convert_params p = quiet_params();
    p.q_bits = 8;
    p.q_group_size = 32;
    choir_convert_stats stats;
    assert_int_equal(choir_convert(src, dst, &p, &stats, &err), 0);
    assert_int_equal(stats.quantized, 4);
    choir_st *out = choir_st_open(dst, &err);
    assert_non_null(out);
    assert_non_null(choir_st_find(out, "text_encoder.embedding.scales"));
    assert_non_null(choir_st_find(out, "predictor.text_encoder.lstms.0.weight_hh_l0"));
    assert_null(choir_st_find(out, "predictor.text_encoder.lstms.0.weight_hh_l0.scales"));
    cJSON *cfg = load_config(dst);
    assert_int_equal(choir_convert_detect_model(cfg), CHOIR_CONVERT_MODEL_KOKORO);
    choir_quant_config *qc = choir_quant_config_from_json(cfg, &err);
    choir_weight W;
    assert_int_equal(choir_weight_from_st(out, "bert.embeddings.word_embeddings", qc, &W, &err), 0);
    assert_int_equal(W.bits, 8);
    assert_int_equal(choir_weight_expect(&W, 178, 128, "word_embeddings", &err), 0);
    choir_quant_config_free(qc);
    cJSON_Delete(cfg);
    choir_st_close(out);

    p = quiet_params();
    assert_int_not_equal(choir_convert(tu_fixture("kokoro/pth/evil.pth"), tu_tmpfile("evil"), &p,
                                       NULL, &err), 0);
    assert_non_null(strstr(err.msg, "system"));

    const char *vad = tu_tmpfile("vad");
    assert_int_equal(choir_convert(tu_fixture("real/vad/silero_vad_16k_op15.onnx"), vad, &p, NULL,
                                   &err), 0);
    choir_st *st = choir_st_open(vad, &err);
    assert_non_null(st);
    assert_true(choir_st_count(st) > 0);
    choir_st_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_quantize_and_load_back),
        cmocka_unit_test(test_dequantize_and_mixed),
        cmocka_unit_test(test_mlx_exact),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pth_and_onnx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
