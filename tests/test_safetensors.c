/* safetensors reader and writer: exact bytes written, round trips, files made
 * by the Python writer, sharded checkpoints, and every kind of bad header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/safetensors.h"
#include "testutil.h"

/* A safetensors image: 8-byte length, `header`, then `data_len` bytes 0..255. */
static uint8_t *make_image(const char *header, size_t data_len, size_t *len) {
    size_t hlen = strlen(header);
    *len = 8 + hlen + data_len;
    uint8_t *img = malloc(*len);
    for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(img + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) img[8 + hlen + i] = (uint8_t)i;
    return img;
}

/* Opens `header` + data from memory expecting failure `code` with `needle` in the message. */
static void expect_bad(const char *header, size_t data_len, int code, const char *needle) {
    size_t len;
    uint8_t *img = make_image(header, data_len, &len);
    choir_err err = {0};
    choir_st *st = choir_st_open_memory(img, len, "bad.safetensors", &err);
    if (st || err.code != code || !strstr(err.msg, needle) || !strstr(err.msg, "bad.safetensors")) {
        print_error("header %s: got code %d, message '%s'; wanted %d with '%s'\n", header, err.code, err.msg, code,
                    needle);
        fail();
    }
    free(img);
}

static void test_writer_exact_bytes(void **state) {
    (void)state;
    choir_err err = {0};
    choir_st_writer *w = choir_st_writer_create(&err);
    const float a[2] = {1.0f, -2.0f};
    const int64_t shape[1] = {2};
    assert_int_equal(choir_st_writer_add(w, "a", CHOIR_DTYPE_F32, 1, shape, a, &err), 0);
    const char *path = tu_tmpfile("exact.safetensors");
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);
    size_t len;
    uint8_t *got = tu_read_file(path, &len);
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    assert_int_equal(len, 8 + padded + 8);
    assert_int_equal(got[0], padded);
    for (int i = 1; i < 8; i++) assert_int_equal(got[i], 0);
    assert_memory_equal(got + 8, hdr, hlen);
    for (size_t i = hlen; i < padded; i++) assert_int_equal(got[8 + i], ' ');
    assert_memory_equal(got + 8 + padded, a, sizeof a);
    free(got);
}

static void test_round_trip(void **state) {
    (void)state;
    choir_err err = {0};
    choir_st_writer *w = choir_st_writer_create(&err);
    float f32[6] = {0.5f, 1.5f, -3.0f, 4.0f, 1e-7f, 65504.0f};
    uint16_t f16[3] = {0x3c00, 0xc000, 0x7bff};
    int64_t i64[2] = {-1, (int64_t)1 << 40};
    uint8_t u8[5] = {1, 2, 3, 4, 5}, b1[1] = {1};
    float scalar = 7.0f;
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s5[1] = {5}, s0[2] = {0, 4}, s1[1] = {1};
    assert_int_equal(choir_st_writer_add(w, "w.f32", CHOIR_DTYPE_F32, 2, s23, f32, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "w.f16", CHOIR_DTYPE_F16, 1, s3, f16, &err), 0);
    assert_int_equal(choir_st_writer_add_ref(w, "w.i64", CHOIR_DTYPE_I64, 1, s2, i64, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "u8", CHOIR_DTYPE_U8, 1, s5, u8, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "flag", CHOIR_DTYPE_BOOL, 1, s1, b1, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "scalar", CHOIR_DTYPE_F32, 0, NULL, &scalar, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "empty", CHOIR_DTYPE_F32, 2, s0, NULL, &err), 0);
    assert_int_equal(choir_st_writer_set_metadata(w, "format", "pt", &err), 0);
    assert_int_equal(choir_st_writer_set_metadata(w, "note", "quote \" and \\ and \n", &err), 0);
    /* Bad additions are refused at once. */
    assert_int_equal(choir_st_writer_add(w, "__metadata__", CHOIR_DTYPE_F32, 1, s1, f32, &err), CHOIR_EINVAL);
    assert_int_equal(choir_st_writer_add(w, "x", CHOIR_DTYPE_COUNT, 1, s1, f32, &err), CHOIR_EINVAL);
    const char *path = tu_tmpfile("rt.safetensors");
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    f32[0] = 99.0f; /* a copy was taken at add time */
    choir_st_writer_free(w);

    choir_st *st = choir_st_open(path, &err);
    assert_non_null(st);
    assert_int_equal(choir_st_count(st), 7);
    /* Layout: largest element size first, then by name. */
    assert_string_equal(choir_st_at(st, 0)->name, "w.i64");
    assert_string_equal(choir_st_at(st, 1)->name, "empty");
    assert_string_equal(choir_st_at(st, 6)->name, "u8");
    for (int i = 0; i < 7; i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        assert_int_equal((uintptr_t)t->data % choir_dtype_size(t->dtype), 0);
    }
    const choir_st_tensor *t = choir_st_find(st, "w.f32");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->numel, 6);
    assert_float_equal(((const float *)t->data)[0], 0.5f, 0);
    assert_memory_equal((const float *)t->data + 1, f32 + 1, 5 * sizeof(float));
    t = choir_st_find(st, "w.f16");
    assert_int_equal(t->dtype, CHOIR_DTYPE_F16);
    assert_memory_equal(t->data, f16, sizeof f16);
    assert_memory_equal(choir_st_find(st, "w.i64")->data, i64, sizeof i64);
    t = choir_st_find(st, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_float_equal(*(const float *)t->data, 7.0f, 0);
    t = choir_st_find(st, "empty");
    assert_int_equal(t->numel, 0);
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(choir_st_find(st, "flag")->dtype, CHOIR_DTYPE_BOOL);
    assert_null(choir_st_find(st, "missing"));
    assert_null(choir_st_at(st, 7));
    assert_string_equal(choir_st_metadata(st, "format"), "pt");
    assert_string_equal(choir_st_metadata(st, "note"), "quote \" and \\ and \n");
    assert_int_equal(choir_st_data_bytes(st), 24 + 6 + 16 + 5 + 1 + 4);

    int64_t want[2] = {3, 2};
    assert_null(choir_st_expect(st, "w.f32", CHOIR_DTYPE_F32, 2, want, &err));
    assert_int_equal(err.code, CHOIR_ESHAPE);
    assert_non_null(strstr(err.msg, "w.f32"));
    assert_non_null(strstr(err.msg, "[3, 2]"));
    assert_non_null(strstr(err.msg, "[2, 3]"));
    assert_non_null(choir_st_expect(st, "w.f32", CHOIR_DTYPE_F32, 2, s23, &err));
    assert_null(choir_st_expect(st, "nope", CHOIR_DTYPE_F32, 2, s23, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    choir_st_close(st);
    choir_st_close(NULL);
}

static void test_writer_duplicate(void **state) {
    (void)state;
    choir_err err = {0};
    choir_st_writer *w = choir_st_writer_create(&err);
    float x = 1;
    int32_t y = 2;
    int64_t s1[1] = {1};
    assert_int_equal(choir_st_writer_add(w, "same", CHOIR_DTYPE_F32, 1, s1, &x, &err), 0);
    assert_int_equal(choir_st_writer_add(w, "same", CHOIR_DTYPE_I32, 1, s1, &y, &err), 0);
    assert_int_equal(choir_st_writer_save(w, tu_tmpfile("dup.safetensors"), &err), CHOIR_EINVAL);
    assert_non_null(strstr(err.msg, "same"));
    choir_st_writer_free(w);
    choir_st_writer_free(NULL);
}

/* A file written by the reference (Python) writer. */
static void test_reads_reference_file(void **state) {
    (void)state;
    choir_err err = {0};
    choir_st *st = choir_st_open(tu_fixture("whisper/whisper-ml80/reference.safetensors"), &err);
    assert_non_null(st);
    int64_t mel[2] = {80, 3000};
    const choir_st_tensor *t = choir_st_expect(st, "a0.mel", CHOIR_DTYPE_F32, 2, mel, &err);
    assert_non_null(t);
    t = choir_st_find(st, "a0.greedy");
    assert_non_null(t);
    assert_int_equal(t->dtype, CHOIR_DTYPE_I32);
    choir_st_close(st);
}

static void write_shard(const char *path, const char *name, float value) {
    choir_err err = {0};
    choir_st_writer *w = choir_st_writer_create(&err);
    float v[4] = {value, value + 1, value + 2, value + 3};
    int64_t s[2] = {2, 2};
    assert_int_equal(choir_st_writer_add(w, name, CHOIR_DTYPE_F32, 2, s, v, &err), 0);
    assert_int_equal(choir_st_writer_save(w, path, &err), 0);
    choir_st_writer_free(w);
}

static void test_sharded(void **state) {
    (void)state;
    const char *dir = tu_tmpfile("sharded");
    mkdir(dir, 0777);
    char p1[1100], p2[1100], idx[1100];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    write_shard(p1, "layer.0.weight", 10);
    write_shard(p2, "layer.1.weight", 20);
    const char *index = "{\"metadata\":{\"total_size\":32},\"weight_map\":{"
                        "\"layer.1.weight\":\"model-00002-of-00002.safetensors\","
                        "\"layer.0.weight\":\"model-00001-of-00002.safetensors\"}}";
    assert_int_equal(tu_write_file(idx, index, strlen(index)), 0);
    choir_err err = {0};
    for (int k = 0; k < 2; k++) {
        choir_st *st = choir_st_open(k ? idx : dir, &err);
        assert_non_null(st);
        assert_int_equal(choir_st_count(st), 2);
        /* Shards in order of first mention in the index. */
        assert_string_equal(choir_st_at(st, 0)->name, "layer.1.weight");
        assert_float_equal(((const float *)choir_st_find(st, "layer.0.weight")->data)[3], 13.0f, 0);
        assert_float_equal(((const float *)choir_st_find(st, "layer.1.weight")->data)[0], 20.0f, 0);
        assert_int_equal(choir_st_data_bytes(st), 32);
        choir_st_close(st);
    }
    /* The index names the wrong shard for a tensor. */
    const char *wrong = "{\"weight_map\":{\"layer.1.weight\":\"model-00001-of-00002.safetensors\"}}";
    assert_int_equal(tu_write_file(idx, wrong, strlen(wrong)), 0);
    assert_null(choir_st_open(dir, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "layer.1.weight"));
    /* A shard path that escapes the directory. */
    const char *escape = "{\"weight_map\":{\"x\":\"../evil.safetensors\"}}";
    assert_int_equal(tu_write_file(idx, escape, strlen(escape)), 0);
    assert_null(choir_st_open(idx, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    /* A directory with neither file. */
    const char *empty = tu_tmpfile("empty_dir");
    mkdir(empty, 0777);
    assert_null(choir_st_open(empty, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "empty_dir"));
}

static void test_misaligned_header(void **state) {
    (void)state;
    /* A header length of 61 leaves float data at an odd address: the reader copies it. */
    const char *hdr = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}     ";
    size_t len;
    uint8_t *img = make_image(hdr, 8, &len);
    assert_int_equal(strlen(hdr) % 4 != 0, 1);
    choir_err err = {0};
    choir_st *st = choir_st_open_memory(img, len, NULL, &err);
    assert_non_null(st);
    const choir_st_tensor *t = choir_st_find(st, "t");
    assert_int_equal((uintptr_t)t->data % 4, 0);
    assert_memory_equal(t->data, img + 8 + strlen(hdr), 8);
    choir_st_close(st);
    free(img);
}

static void test_bad_headers(void **state) {
    (void)state;
    const char *ok = "\"dtype\":\"F32\",\"shape\":[2]";
    char h[512];
    expect_bad("{\"a\":", 0, CHOIR_EFORMAT, "malformed JSON");
    expect_bad("[1,2]", 0, CHOIR_EFORMAT, "JSON object");
    expect_bad("{\"a\":1}", 0, CHOIR_EFORMAT, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8, CHOIR_EFORMAT, "after the JSON");
    snprintf(h, sizeof h, "{\"a\":{%s,\"data_offsets\":[0,16]}}", ok);
    expect_bad(h, 8, CHOIR_EFORMAT, "outside the data area");
    snprintf(h, sizeof h, "{\"a\":{%s,\"data_offsets\":[8,0]}}", ok);
    expect_bad(h, 8, CHOIR_EFORMAT, "outside the data area");
    snprintf(h, sizeof h, "{\"a\":{%s,\"data_offsets\":[0,8]},\"b\":{%s,\"data_offsets\":[4,12]}}", ok, ok);
    expect_bad(h, 16, CHOIR_EFORMAT, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, CHOIR_EUNSUPPORTED,
               "unknown dtype 'F8_E4M3'");
    snprintf(h, sizeof h, "{\"a\":{%s,\"data_offsets\":[0,12]}}", ok);
    expect_bad(h, 12, CHOIR_ESHAPE, "span 12");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
               CHOIR_ETOOBIG, "absurd");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8, CHOIR_EFORMAT, "shape[0]");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, CHOIR_EFORMAT, "shape[0]");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
               CHOIR_EUNSUPPORTED, "dimensions");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4, CHOIR_EFORMAT,
               "data_offsets");
    snprintf(h, sizeof h, "{\"a\":{%s,\"data_offsets\":[0,8]},\"a\":{%s,\"data_offsets\":[8,16]}}", ok, ok);
    expect_bad(h, 16, CHOIR_EFORMAT, "appears twice");
    snprintf(h, sizeof h, "{\"__metadata__\":{\"k\":1},\"a\":{%s,\"data_offsets\":[0,8]}}", ok);
    expect_bad(h, 8, CHOIR_EFORMAT, "__metadata__");
    /* a second __metadata__ used to replace the first one's copies, which
     * leaked (ASan's leak check fails this test then) */
    snprintf(h, sizeof h, "{\"__metadata__\":{\"k\":\"v\"},\"a\":{%s,\"data_offsets\":[0,8]},"
                          "\"__metadata__\":{\"format\":\"pt\"}}", ok);
    expect_bad(h, 8, CHOIR_EFORMAT, "__metadata__ appears twice");

    /* Lengths that do not fit the file. */
    choir_err err = {0};
    uint8_t tiny[5] = {1, 2, 3, 4, 5};
    assert_null(choir_st_open_memory(tiny, sizeof tiny, "tiny", &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    assert_null(choir_st_open_memory(NULL, 0, "nothing", &err));
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    assert_null(choir_st_open_memory(huge, sizeof huge, "huge", &err));
    assert_non_null(strstr(err.msg, "past the end"));
    /* A file on disk: the message names the path. */
    const char *path = tu_tmpfile("garbage.safetensors");
    assert_int_equal(tu_write_file(path, "not a checkpoint at all", 23), 0);
    assert_null(choir_st_open(path, &err));
    assert_non_null(strstr(err.msg, "garbage.safetensors"));
    assert_null(choir_st_open(tu_tmpfile("absent.safetensors"), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
}

/* Every prefix of a valid file is refused cleanly (or, for the full length, accepted). */
static void test_truncations(void **state) {
    (void)state;
    const char *hdr = "{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                      "\"y\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[12,20]}}";
    size_t len;
    uint8_t *img = make_image(hdr, 20, &len);
    for (size_t n = 0; n < len; n++) {
        choir_err err = {0};
        uint8_t *cut = malloc(n + 1);
        memcpy(cut, img, n);
        choir_st *st = choir_st_open_memory(cut, n, "cut", &err);
        assert_null(st);
        assert_true(err.code < 0);
        free(cut);
    }
    choir_err err = {0};
    choir_st *st = choir_st_open_memory(img, len, "whole", &err);
    assert_non_null(st);
    choir_st_close(st);
    /* Every single-byte corruption of the header is survived. */
    for (size_t i = 8; i < 8 + strlen(hdr); i++) {
        uint8_t saved = img[i];
        img[i] ^= 0x5a;
        choir_st_close(choir_st_open_memory(img, len, "flipped", &err));
        img[i] = saved;
    }
    free(img);
}

static void test_alloc_failures(void **state) {
    (void)state;
    const char *hdr = "{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                      "\"y\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[12,20]}}";
    size_t len;
    uint8_t *img = make_image(hdr, 20, &len);
    int opened = 0;
    for (int64_t n = 1; n < 200 && !opened; n++) {
        choir_err err = {0};
        choir_alloc_fail_after(n);
        choir_st *st = choir_st_open_memory(img, len, "inject", &err);
        choir_alloc_fail_after(0);
        if (st) opened = 1;
        else assert_int_equal(err.code, CHOIR_ENOMEM);
        choir_st_close(st);
    }
    assert_true(opened);
    free(img);
}

static void test_json_helpers(void **state) {
    (void)state;
    choir_err err = {0};
    const char *text = "{\"n\": 12, \"x\": 0.5, \"s\": \"hi\", \"b\": true}";
    cJSON *j = choir_json_parse(text, strlen(text), &err);
    assert_non_null(j);
    assert_int_equal(choir_json_int(j, "n", -1), 12);
    assert_int_equal(choir_json_int(j, "s", -1), -1);
    assert_float_equal(choir_json_num(j, "x", 0), 0.5, 0);
    assert_string_equal(choir_json_str(j, "s", "?"), "hi");
    assert_string_equal(choir_json_str(j, "missing", "?"), "?");
    assert_int_equal(choir_json_bool(j, "b", 0), 1);
    assert_int_equal(choir_json_bool(j, "n", 7), 7);
    const char *path = tu_tmpfile("cfg.json");
    assert_int_equal(choir_json_save(j, path, &err), 0);
    cJSON_Delete(j);
    j = choir_json_load(path, &err);
    assert_non_null(j);
    assert_int_equal(choir_json_int(j, "n", -1), 12);
    cJSON_Delete(j);
    assert_int_equal(tu_write_file(path, "{\"a\": [1, 2,, 3]}", 17), 0);
    assert_null(choir_json_load(path, &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    assert_non_null(strstr(err.msg, "cfg.json"));
    assert_non_null(strstr(err.msg, "byte 12"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_exact_bytes), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_writer_duplicate),   cmocka_unit_test(test_reads_reference_file),
        cmocka_unit_test(test_sharded),            cmocka_unit_test(test_misaligned_header),
        cmocka_unit_test(test_bad_headers),        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_alloc_failures),     cmocka_unit_test(test_json_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
