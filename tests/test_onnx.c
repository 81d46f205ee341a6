/* The ONNX weight reader and the Silero ONNX converter: the official model's
 * initializers, hand-built protobufs for every storage form and every kind of
 * damage, truncations and random mutations (a fast in-suite fuzz), and
 * conversion that reproduces the reference safetensors tensor for tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/json.h"
#include "choir/onnx.h"
#include "choir/safetensors.h"
#include "choir/silero.h"
#include "testutil.h"

#define ONNX_PATH "real/vad/silero_vad_16k_op15.onnx"
#define REF_ST "real/vad/silero_vad_16k.safetensors"

/* --- a tiny protobuf writer for hand-built models ------------------------ */

typedef struct buf {
    uint8_t d[8192];
    size_t n;
} buf;

static void put_byte(buf *b, uint8_t v) {
    assert_true(b->n < sizeof b->d);
    b->d[b->n++] = v;
}
static void put_varint(buf *b, uint64_t v) {
    while (v >= 0x80) {
        put_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(b, (uint8_t)v);
}
static void put_key(buf *b, uint32_t field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }
static void put_uint(buf *b, uint32_t field, uint64_t v) {
    put_key(b, field, 0);
    put_varint(b, v);
}
static void put_bytes(buf *b, uint32_t field, const void *p, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    assert_true(b->n + n <= sizeof b->d);
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void put_str(buf *b, uint32_t field, const char *s) { put_bytes(b, field, s, strlen(s)); }
static void put_msg(buf *b, uint32_t field, const buf *m) { put_bytes(b, field, m->d, m->n); }

/* A model: ir_version 8, opset 15, and `graph`. */
static void wrap_model(buf *out, const buf *graph) {
    memset(out, 0, sizeof *out);
    put_uint(out, 1, 8);
    buf opset = {0};
    put_str(&opset, 1, "");
    put_uint(&opset, 2, 15);
    put_msg(out, 8, &opset);
    put_msg(out, 7, graph);
}

/* Graph: an initializer "w" [2, 3] as packed float_data; an initializer "r"
 * [3] as raw_data; a "If" node whose then_branch holds a Constant "k" (INT64,
 * unpacked int64_data) and an initializer "deep" [2] (unpacked float_data). */
static void build_graph(buf *g) {
    memset(g, 0, sizeof *g);
    buf t = {0};
    put_uint(&t, 1, 2);
    put_uint(&t, 1, 3);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    const float w[6] = {1, -2, 3.5f, 4, 5, -6.25f};
    put_bytes(&t, 4, w, sizeof w);
    put_str(&t, 8, "w");
    put_msg(g, 5, &t);

    memset(&t, 0, sizeof t);
    buf dims = {0};
    put_varint(&dims, 3);
    put_msg(&t, 1, &dims); /* packed dims */
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    put_str(&t, 8, "r");
    const float r[3] = {0.25f, 0.5f, 0.75f};
    put_bytes(&t, 9, r, sizeof r);
    put_msg(g, 5, &t);

    buf sub = {0}, node = {0}, attr = {0}, value = {0};
    put_uint(&value, 1, 2);
    put_uint(&value, 2, CHOIR_ONNX_INT64);
    put_uint(&value, 7, 7);
    put_uint(&value, 7, (uint64_t)-3); /* negative int64 as a 10-byte varint */
    put_str(&attr, 1, "value");
    put_uint(&attr, 20, 4);
    put_msg(&attr, 5, &value);
    put_str(&node, 2, "k");
    put_str(&node, 4, "Constant");
    put_msg(&node, 5, &attr);
    put_msg(&sub, 1, &node);
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, 2);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    put_str(&t, 8, "deep");
    const float d0 = 9.0f, d1 = -1.5f;
    put_key(&t, 4, 5);
    uint32_t bits;
    memcpy(&bits, &d0, 4);
    for (int i = 0; i < 4; i++) put_byte(&t, (uint8_t)(bits >> (8 * i)));
    put_key(&t, 4, 5);
    memcpy(&bits, &d1, 4);
    for (int i = 0; i < 4; i++) put_byte(&t, (uint8_t)(bits >> (8 * i)));
    put_msg(&sub, 5, &t);

    buf ifnode = {0}, gattr = {0};
    put_str(&gattr, 1, "then_branch");
    put_uint(&gattr, 20, 5);
    put_msg(&gattr, 6, &sub);
    put_str(&ifnode, 3, "If_0");
    put_str(&ifnode, 4, "If");
    put_msg(&ifnode, 5, &gattr);
    put_msg(g, 1, &ifnode);
}

static void test_hand_built_model(void **state) {
    (void)state;
    buf g, model;
    build_graph(&g);
    wrap_model(&model, &g);
    choir_err err = {0};
    choir_onnx *m = choir_onnx_parse(model.d, model.n, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(m);
    assert_int_equal(choir_onnx_ir_version(m), 8);
    assert_int_equal(choir_onnx_opset(m), 15);
    assert_int_equal(choir_onnx_count(m), 4);
    assert_int_equal(choir_onnx_node_count(m), 2);

    const choir_onnx_tensor *w = choir_onnx_find(m, "", "w");
    assert_non_null(w);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->dims[1], 3);
    assert_int_equal(w->source, CHOIR_ONNX_INITIALIZER);
    float f[6];
    assert_int_equal(choir_onnx_tensor_f32(w, f, &err), 0);
    assert_true(f[2] == 3.5f && f[5] == -6.25f);

    const choir_onnx_tensor *r = choir_onnx_find(m, NULL, "r");
    assert_non_null(r);
    assert_int_equal(r->nbytes, 12);
    assert_int_equal(choir_onnx_tensor_f32(r, f, &err), 0);
    assert_true(f[0] == 0.25f && f[2] == 0.75f);

    const choir_onnx_tensor *k = choir_onnx_find(m, "If_0.then_branch", "k");
    assert_non_null(k);
    assert_int_equal(k->source, CHOIR_ONNX_CONSTANT);
    assert_int_equal(k->dtype, CHOIR_DTYPE_I64);
    int64_t kv[2];
    memcpy(kv, k->data, sizeof kv);
    assert_int_equal(kv[0], 7);
    assert_int_equal(kv[1], -3);
    assert_null(choir_onnx_find(m, "", "k"));

    const choir_onnx_tensor *deep = choir_onnx_find(m, NULL, "deep");
    assert_non_null(deep);
    assert_string_equal(deep->graph, "If_0.then_branch");
    assert_int_equal(choir_onnx_tensor_f32(deep, f, &err), 0);
    assert_true(f[0] == 9.0f && f[1] == -1.5f);
    assert_null(choir_onnx_at(m, 4));
    assert_null(choir_onnx_at(m, -1));
    choir_onnx_free(m);
    choir_onnx_free(NULL);
}

/* Builds a one-initializer model from the tensor message `t`. */
static choir_onnx *parse_one_tensor(const buf *t, choir_err *err) {
    buf g = {0}, model;
    put_msg(&g, 5, t);
    wrap_model(&model, &g);
    return choir_onnx_parse(model.d, model.n, err);
}

static void test_damaged_tensors(void **state) {
    (void)state;
    choir_err err = {0};
    const float v[4] = {1, 2, 3, 4};
    buf t;

    /* raw_data shorter than the dims say. */
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, 5);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    put_str(&t, 8, "short");
    put_bytes(&t, 9, v, sizeof v);
    assert_null(parse_one_tensor(&t, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "short"));

    /* float_data count different from the dims. */
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, 3);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    put_bytes(&t, 4, v, sizeof v);
    assert_null(parse_one_tensor(&t, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);

    /* Data kept in an external file. */
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, 4);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    put_uint(&t, 14, 1);
    assert_null(parse_one_tensor(&t, &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);

    /* Dims whose product overflows int64. */
    memset(&t, 0, sizeof t);
    for (int i = 0; i < 3; i++) put_uint(&t, 1, (uint64_t)1 << 40);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    assert_null(parse_one_tensor(&t, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);

    /* A negative dim. */
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, (uint64_t)-1);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    assert_null(parse_one_tensor(&t, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);

    /* Nine dims. */
    memset(&t, 0, sizeof t);
    for (int i = 0; i < 9; i++) put_uint(&t, 1, 1);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT);
    assert_null(parse_one_tensor(&t, &err));

    /* A string tensor is listed without data. */
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, 1);
    put_uint(&t, 2, CHOIR_ONNX_STRING);
    put_str(&t, 6, "hello");
    put_str(&t, 8, "s");
    choir_onnx *m = parse_one_tensor(&t, &err);
    assert_non_null(m);
    const choir_onnx_tensor *s = choir_onnx_find(m, "", "s");
    assert_non_null(s);
    assert_null(s->data);
    float out[1];
    assert_int_equal(choir_onnx_tensor_f32(s, out, &err), CHOIR_EUNSUPPORTED);
    choir_onnx_free(m);

    /* A float16 tensor in int32_data. */
    memset(&t, 0, sizeof t);
    put_uint(&t, 1, 2);
    put_uint(&t, 2, CHOIR_ONNX_FLOAT16);
    put_uint(&t, 5, 0x3c00); /* 1.0 */
    put_uint(&t, 5, 0xc500); /* -5.0 */
    put_str(&t, 8, "h");
    m = parse_one_tensor(&t, &err);
    assert_non_null(m);
    float h[2];
    assert_int_equal(choir_onnx_tensor_f32(choir_onnx_find(m, "", "h"), h, &err), 0);
    assert_true(h[0] == 1.0f && h[1] == -5.0f);
    choir_onnx_free(m);
}

static void test_damaged_protobuf(void **state) {
    (void)state;
    choir_err err = {0};
    /* Empty input, a group wire type, a length past the end, an 11-byte varint. */
    assert_null(choir_onnx_parse("", 0, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    const uint8_t group[] = {0x0b, 0x0c};
    assert_null(choir_onnx_parse(group, sizeof group, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    const uint8_t overrun[] = {0x3a, 0x10, 0x0a};
    assert_null(choir_onnx_parse(overrun, sizeof overrun, &err));
    assert_non_null(strstr(err.msg, "byte 0"));
    const uint8_t long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_null(choir_onnx_parse(long_varint, sizeof long_varint, &err));
    const uint8_t field_zero[] = {0x00, 0x01};
    assert_null(choir_onnx_parse(field_zero, sizeof field_zero, &err));
    /* A model without a graph is not an ONNX file. */
    const uint8_t no_graph[] = {0x08, 0x08};
    assert_null(choir_onnx_parse(no_graph, sizeof no_graph, &err));
    assert_non_null(strstr(err.msg, "no graph"));

    /* Subgraphs nested deeper than the limit. */
    buf inner = {0};
    put_str(&inner, 2, "leaf");
    for (int depth = 0; depth <= CHOIR_ONNX_MAX_DEPTH; depth++) {
        buf attr = {0}, node = {0}, g = {0};
        put_str(&attr, 1, "body");
        put_msg(&attr, 6, &inner);
        put_str(&node, 4, "Loop");
        put_msg(&node, 5, &attr);
        put_msg(&g, 1, &node);
        inner = g;
    }
    buf model;
    wrap_model(&model, &inner);
    assert_null(choir_onnx_parse(model.d, model.n, &err));
    assert_non_null(strstr(err.msg, "too deep"));

    assert_null(choir_onnx_open(tu_fixture("real/vad/missing.onnx"), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
}

/* Every prefix of a valid model and many random corruptions of it parse or
 * fail cleanly (the sanitizer build checks that nothing is read out of bounds). */
static void test_truncations_and_mutations(void **state) {
    (void)state;
    buf g, model;
    build_graph(&g);
    wrap_model(&model, &g);
    choir_err err = {0};
    int parsed = 0;
    for (size_t len = 0; len < model.n; len++) {
        uint8_t *copy = malloc(len ? len : 1); /* exact size, so ASan sees overreads */
        memcpy(copy, model.d, len);
        choir_onnx *m = choir_onnx_parse(copy, len, &err);
        if (m) parsed++;
        else assert_true(err.msg[0] != '\0');
        choir_onnx_free(m);
        free(copy);
    }
    assert_true(parsed < (int)model.n / 2);
    uint64_t s = 12345;
    uint8_t mutated[sizeof model.d];
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(mutated, model.d, model.n);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            mutated[(s >> 33) % model.n] = (uint8_t)(s >> 20);
        }
        choir_onnx *m = choir_onnx_parse(mutated, model.n, &err);
        if (m) {
            for (int i = 0; i < choir_onnx_count(m); i++) {
                const choir_onnx_tensor *t = choir_onnx_at(m, i);
                if (t->data && t->numel <= 64) {
                    float tmp[64];
                    choir_onnx_tensor_f32(t, tmp, &err);
                }
            }
        }
        choir_onnx_free(m);
    }
}

static void test_official_model(void **state) {
    (void)state;
    choir_err err = {0};
    choir_onnx *m = choir_onnx_open(tu_fixture(ONNX_PATH), &err);
    assert_non_null(m);
    assert_int_equal(choir_onnx_ir_version(m), 8);
    assert_int_equal(choir_onnx_opset(m), 15);
    assert_true(choir_onnx_node_count(m) > 100);
    const choir_onnx_tensor *basis = choir_onnx_find(m, "", "model.stft.forward_basis_buffer");
    assert_non_null(basis);
    assert_int_equal(basis->ndim, 3);
    assert_int_equal(basis->dims[0], 258);
    assert_int_equal(basis->dims[2], 256);
    /* The LSTM branch's constants sit in If subgraphs, which are walked too. */
    int in_subgraphs = 0;
    for (int i = 0; i < choir_onnx_count(m); i++)
        if (choir_onnx_at(m, i)->graph[0]) in_subgraphs++;
    assert_true(in_subgraphs > 50);
    choir_onnx_free(m);

    /* Allocation failures while reading fail cleanly. */
    for (int64_t k = 1;; k++) {
        choir_alloc_fail_after(k);
        m = choir_onnx_open(tu_fixture(ONNX_PATH), &err);
        int64_t used = choir_alloc_fail_after(0);
        if (m) {
            choir_onnx_free(m);
            assert_true(used < k);
            break;
        }
        assert_int_equal(err.code, CHOIR_ENOMEM);
        assert_true(k < 5000);
    }
}

static void test_convert_matches_reference(void **state) {
    (void)state;
    choir_err err = {0};
    const char *dir = tu_tmpfile("silero-converted/nested");
    int rc = choir_silero_convert_onnx(tu_fixture(ONNX_PATH), dir, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);

    choir_st *got = choir_st_open(dir, &err);
    choir_st *ref = choir_st_open(tu_fixture(REF_ST), &err);
    assert_non_null(got);
    assert_non_null(ref);
    assert_int_equal(choir_st_count(got), choir_st_count(ref));
    for (int i = 0; i < choir_st_count(ref); i++) {
        const choir_st_tensor *r = choir_st_at(ref, i);
        const choir_st_tensor *t = choir_st_find(got, r->name);
        assert_non_null(t);
        assert_int_equal(t->dtype, r->dtype);
        assert_int_equal(t->ndim, r->ndim);
        assert_memory_equal(t->shape, r->shape, (size_t)r->ndim * sizeof r->shape[0]);
        assert_int_equal(t->nbytes, r->nbytes);
        assert_memory_equal(t->data, r->data, r->nbytes);
    }
    choir_st_close(got);
    choir_st_close(ref);

    char cfg_path[1100];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    cJSON *cfg = choir_json_load(cfg_path, &err);
    assert_non_null(cfg);
    assert_string_equal(choir_json_str(cfg, "model_type", ""), "silero_vad");
    assert_int_equal(choir_json_int(cfg, "sample_rate", 0), 16000);
    cJSON_Delete(cfg);

    /* The converted model and the .onnx loaded directly score jfk.wav like
     * onnxruntime did. */
    size_t len = 0;
    char *text = tu_read_file(tu_fixture("real/vad/reference_probs.json"), &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *ref_probs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "probs"), "jfk.wav");
    assert_non_null(ref_probs);
    choir_audio a = {0};
    choir_decode_opts opts = {.target_rate = 16000, .mono = 1, .max_frames = 0};
    assert_int_equal(choir_audio_decode_file(tu_fixture("real/speech/jfk.wav"), &opts, &a, &err), 0);
    const char *sources[] = {dir, tu_fixture(ONNX_PATH)};
    for (int s = 0; s < 2; s++) {
        choir_silero *vad = choir_silero_load(sources[s], &err);
        assert_non_null(vad);
        float *probs = NULL;
        int64_t n = 0;
        assert_int_equal(choir_silero_file_probs(vad, a.samples, a.frames, false, &probs, &n, &err), 0);
        assert_int_equal(n, cJSON_GetArraySize(ref_probs));
        int64_t i = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, ref_probs) assert_true(fabs(probs[i++] - p->valuedouble) <= 1e-3);
        choir_free(probs);
        choir_silero_free(vad);
    }
    choir_audio_clear(&a);
    cJSON_Delete(root);

    /* A file that is not Silero's model is refused with the missing name. */
    buf g, model;
    build_graph(&g);
    wrap_model(&model, &g);
    const char *other = tu_tmpfile("other.onnx");
    assert_int_equal(tu_write_file(other, model.d, model.n), 0);
    assert_int_equal(choir_silero_convert_onnx(other, tu_tmpfile("nope"), &err), CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "model.stft.forward_basis_buffer"));

    /* A weight present in two branches (a multi-variant export) is refused,
     * not guessed. */
    buf g2 = {0};
    for (int branch = 0; branch < 2; branch++) {
        buf t = {0}, sub = {0}, attr = {0}, node = {0};
        put_uint(&t, 1, 1);
        put_uint(&t, 2, CHOIR_ONNX_FLOAT);
        put_str(&t, 8, "model.stft.forward_basis_buffer");
        const float one = 1.0f;
        put_bytes(&t, 9, &one, sizeof one);
        put_msg(&sub, 5, &t);
        put_str(&attr, 1, branch ? "else_branch" : "then_branch");
        put_msg(&attr, 6, &sub);
        put_str(&node, 3, "If_sr");
        put_str(&node, 4, "If");
        put_msg(&node, 5, &attr);
        put_msg(&g2, 1, &node);
    }
    wrap_model(&model, &g2);
    assert_int_equal(tu_write_file(other, model.d, model.n), 0);
    assert_int_equal(choir_silero_convert_onnx(other, tu_tmpfile("nope2"), &err), CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "more than one subgraph"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_built_model),
        cmocka_unit_test(test_damaged_tensors),
        cmocka_unit_test(test_damaged_protobuf),
        cmocka_unit_test(test_truncations_and_mutations),
        cmocka_unit_test(test_official_model),
        cmocka_unit_test(test_convert_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
