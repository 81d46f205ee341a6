/* PyTorch .pth reader: fixture archives written by torch.save (views, dtypes,
 * the Kokoro layout, a voice pack), the hostile archive, hand-made pickles that
 * break the rules, deflated archives, truncation and allocation failures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/pth.h"
#include "choir/randw.h"
#include "testutil.h"

static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}

static float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* views.pth against views.json: offsets, shared storages, a transpose, f16,
 * bf16, int64 and a 0-d tensor. */
static void test_views(void **state) {
    (void)state;
    choir_err err = {0};
    choir_pth *p = choir_pth_open(tu_fixture("kokoro/pth/views.pth"), &err);
    if (!p) fail_msg("%s", err.msg);
    cJSON *want = choir_json_load(tu_fixture("kokoro/pth/views.json"), &err);
    assert_non_null(want);
    assert_int_equal(choir_pth_count(p), cJSON_GetArraySize(want));
    const cJSON *e;
    cJSON_ArrayForEach(e, want) {
        const choir_st_tensor *t = choir_pth_find(p, e->string);
        assert_non_null(t);
        const cJSON *shape = cJSON_GetObjectItem(e, "shape");
        assert_int_equal(t->ndim, cJSON_GetArraySize(shape));
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], cJSON_GetArrayItem(shape, d)->valueint);
        /* Flatten the expected values (nested lists, or one number for 0-d). */
        double vals[64];
        int n = 0;
        const cJSON *v = cJSON_GetObjectItem(e, "values");
        if (cJSON_IsNumber(v)) vals[n++] = v->valuedouble;
        const cJSON *row, *x;
        cJSON_ArrayForEach(row, v) {
            if (cJSON_IsNumber(row)) vals[n++] = row->valuedouble;
            else cJSON_ArrayForEach(x, row) vals[n++] = x->valuedouble;
        }
        assert_int_equal(n, t->numel);
        const char *dt = cJSON_GetObjectItem(e, "dtype")->valuestring;
        for (int i = 0; i < n; i++) {
            double got;
            if (strcmp(dt, "float32") == 0) got = ((const float *)t->data)[i];
            else if (strcmp(dt, "float16") == 0) got = half_to_float(((const uint16_t *)t->data)[i]);
            else if (strcmp(dt, "bfloat16") == 0) got = bf16_to_float(((const uint16_t *)t->data)[i]);
            else got = (double)((const int64_t *)t->data)[i];
            if (got != vals[i]) fail_msg("%s[%d]: %.9g, want %.9g", e->string, i, got, vals[i]);
        }
    }
    assert_int_equal(choir_pth_find(p, "half")->dtype, CHOIR_DTYPE_F16);
    assert_int_equal(choir_pth_find(p, "bf16")->dtype, CHOIR_DTYPE_BF16);
    assert_int_equal(choir_pth_find(p, "int64")->dtype, CHOIR_DTYPE_I64);
    assert_int_equal(choir_pth_find(p, "scalar")->ndim, 0);
    /* Two views of one storage point into the same mapped bytes. */
    const float *a = choir_pth_find(p, "shared_a")->data, *b = choir_pth_find(p, "shared_b")->data;
    assert_ptr_equal(a + 6, b);
    cJSON_Delete(want);
    choir_pth_close(p);
    choir_pth_close(NULL);
}

static void test_voice_pack(void **state) {
    (void)state;
    choir_err err = {0};
    choir_pth *p = choir_pth_open(tu_fixture("kokoro/pth/af_heart.pt"), &err);
    if (!p) fail_msg("%s", err.msg);
    assert_int_equal(choir_pth_count(p), 1);
    const choir_st_tensor *t = choir_pth_find(p, "");
    assert_non_null(t);
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[0], 510);
    assert_int_equal(t->shape[1], 1);
    assert_int_equal(t->shape[2], 256);
    size_t len;
    void *bin = tu_read_file(tu_fixture("kokoro/voices/af_heart.bin"), &len);
    assert_int_equal(len, t->nbytes);
    assert_memory_equal(t->data, bin, len);
    free(bin);
    choir_pth_close(p);
}

/* kokoro_subset.pth holds randw-v1 tensors in the kokoro-v1_0.pth layout. */
static void test_kokoro_subset(void **state) {
    (void)state;
    choir_err err = {0};
    choir_pth *raw = choir_pth_open(tu_fixture("kokoro/pth/kokoro_subset.pth"), &err);
    choir_pth *norm = choir_pth_open_flags(tu_fixture("kokoro/pth/kokoro_subset.pth"), CHOIR_PTH_NORMALIZE, &err);
    assert_non_null(raw);
    assert_non_null(norm);
    assert_non_null(choir_pth_find(raw, "bert.module.embeddings.word_embeddings.weight"));
    assert_null(choir_pth_find(raw, "bert.embeddings.word_embeddings.weight"));
    cJSON *subset = choir_json_load(tu_fixture("kokoro/pth/subset.json"), &err);
    assert_non_null(subset);
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(subset, "tensors")) {
        const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
        const choir_st_tensor *t = choir_pth_find(norm, name);
        if (!t) fail_msg("missing %s", name);
        assert_int_equal(t->dtype, CHOIR_DTYPE_F32);
        const cJSON *shape = cJSON_GetObjectItem(e, "shape");
        assert_int_equal(t->ndim, cJSON_GetArraySize(shape));
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], cJSON_GetArrayItem(shape, d)->valueint);
        float *ref = malloc((size_t)t->numel * sizeof *ref);
        choir_randw_fill(name, cJSON_GetObjectItem(e, "offset")->valuedouble,
                         cJSON_GetObjectItem(e, "scale")->valuedouble, 0, t->numel, ref);
        assert_memory_equal(t->data, ref, t->nbytes);
        free(ref);
        n++;
    }
    assert_int_equal(n, choir_pth_count(norm));
    assert_int_equal(choir_pth_count(raw), choir_pth_count(norm));
    cJSON_Delete(subset);
    choir_pth_close(raw);
    choir_pth_close(norm);
}

static void test_evil_refused(void **state) {
    (void)state;
    choir_err err = {0};
    assert_null(choir_pth_open(tu_fixture("kokoro/pth/evil.pth"), &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "evil.pth"));
    assert_non_null(strstr(err.msg, "posix.system"));
}

/* ---- hand-made archives ---- */

typedef struct buf { uint8_t *p; size_t n; } buf;

static void put(buf *b, const void *s, size_t n) {
    b->p = realloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void put_le(buf *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}
static void put_s(buf *b, const char *s) { put(b, s, strlen(s)); }
/* For literals holding NUL bytes. */
#define PUT_LIT(b, lit) put((b), (lit), sizeof(lit) - 1)
/* BINUNICODE */
static void pk_str(buf *b, const char *s) {
    put_s(b, "X");
    put_le(b, strlen(s), 4);
    put_s(b, s);
}
/* A float32 tensor of `storage_numel` elements in storage `key`, viewed as 1-D
 * (size, stride 1, offset). */
static void pk_tensor(buf *b, const char *key, int storage_numel, int offset, int size) {
    put_s(b, "ctorch._utils\n_rebuild_tensor_v2\n((");
    pk_str(b, "storage");
    put_s(b, "ctorch\nFloatStorage\n");
    pk_str(b, key);
    pk_str(b, "cpu");
    put_s(b, "J");
    put_le(b, (uint64_t)storage_numel, 4);
    put_s(b, "tQJ");
    put_le(b, (uint64_t)offset, 4);
    put_s(b, "J");
    put_le(b, (uint64_t)size, 4);
    put_s(b, "\x85K\x01\x85\x89" "ccollections\nOrderedDict\n)RtR");
}

/* A stored zip of `n` entries (CRC left 0: the reader does not need it). */
static buf make_zip(int n, const char *const *names, const buf *datas) {
    buf z = {0}, cd = {0};
    for (int i = 0; i < n; i++) {
        size_t off = z.n, nl = strlen(names[i]);
        put_le(&z, 0x04034b50, 4);
        put_le(&z, 20, 2); put_le(&z, 0, 2); put_le(&z, 0, 2); put_le(&z, 0, 4); put_le(&z, 0, 4);
        put_le(&z, datas[i].n, 4); put_le(&z, datas[i].n, 4); put_le(&z, nl, 2); put_le(&z, 0, 2);
        put_s(&z, names[i]);
        put(&z, datas[i].p, datas[i].n);
        put_le(&cd, 0x02014b50, 4);
        put_le(&cd, 20, 2); put_le(&cd, 20, 2); put_le(&cd, 0, 2); put_le(&cd, 0, 2); put_le(&cd, 0, 4);
        put_le(&cd, 0, 4); put_le(&cd, datas[i].n, 4); put_le(&cd, datas[i].n, 4);
        put_le(&cd, nl, 2); put_le(&cd, 0, 2); put_le(&cd, 0, 2); put_le(&cd, 0, 2); put_le(&cd, 0, 2);
        put_le(&cd, 0, 4); put_le(&cd, off, 4);
        put_s(&cd, names[i]);
    }
    size_t cd_off = z.n;
    put(&z, cd.p, cd.n);
    put_le(&z, 0x06054b50, 4);
    put_le(&z, 0, 2); put_le(&z, 0, 2); put_le(&z, (uint64_t)n, 2); put_le(&z, (uint64_t)n, 2);
    put_le(&z, cd.n, 4); put_le(&z, cd_off, 4); put_le(&z, 0, 2);
    free(cd.p);
    return z;
}

/* Opens an archive of `pickle` plus one 16-float storage "0". */
static choir_pth *open_pickle(buf *pickle, unsigned flags, choir_err *err, buf *zip_out) {
    buf storage = {0};
    for (int i = 0; i < 16; i++) {
        float f = (float)i;
        put(&storage, &f, 4);
    }
    const char *names[2] = {"arc/data.pkl", "arc/data/0"};
    buf datas[2] = {*pickle, storage};
    *zip_out = make_zip(2, names, datas);
    free(storage.p);
    return choir_pth_open_memory(zip_out->p, zip_out->n, flags, "handmade.pth", err);
}

static void expect_refused(buf *pickle, int code, const char *needle) {
    choir_err err = {0};
    buf z;
    choir_pth *p = open_pickle(pickle, 0, &err, &z);
    if (p || err.code != code || !strstr(err.msg, needle) || !strstr(err.msg, "handmade.pth"))
        fail_msg("got %d '%s', wanted %d with '%s'", err.code, err.msg, code, needle);
    free(z.p);
    free(pickle->p);
}

static void test_handmade_good(void **state) {
    (void)state;
    /* {"model": {"module.a": T(offset 2, size 3)}, "optimizer": {"x": T}, "epoch": 3} */
    buf b = {0};
    put_s(&b, "\x80\x02}(");
    pk_str(&b, "model");
    put_s(&b, "}(");
    pk_str(&b, "module.a");
    pk_tensor(&b, "0", 16, 2, 3);
    put_s(&b, "u");
    pk_str(&b, "optimizer");
    put_s(&b, "}(");
    pk_str(&b, "x");
    pk_tensor(&b, "0", 16, 0, 16);
    put_s(&b, "u");
    pk_str(&b, "epoch");
    put_s(&b, "K\x03u.");
    choir_err err = {0};
    buf z;
    choir_pth *p = open_pickle(&b, 0, &err, &z);
    if (!p) fail_msg("%s", err.msg);
    assert_int_equal(choir_pth_count(p), 2);
    assert_non_null(choir_pth_find(p, "model.module.a"));
    assert_non_null(choir_pth_find(p, "optimizer.x"));
    choir_pth_close(p);
    p = choir_pth_open_memory(z.p, z.n, CHOIR_PTH_NORMALIZE, "handmade.pth", &err);
    assert_non_null(p);
    assert_int_equal(choir_pth_count(p), 1);
    const choir_st_tensor *t = choir_pth_find(p, "a");
    assert_non_null(t);
    assert_int_equal(t->numel, 3);
    assert_float_equal(((const float *)t->data)[0], 2.0f, 0);
    assert_float_equal(((const float *)t->data)[2], 4.0f, 0);
    choir_pth_close(p);
    free(z.p);
    free(b.p);
}

static void test_handmade_bad(void **state) {
    (void)state;
    buf b = {0};
    /* A view past the end of its storage. */
    put_s(&b, "\x80\x02");
    pk_tensor(&b, "0", 16, 10, 8);
    put_s(&b, ".");
    expect_refused(&b, CHOIR_EFORMAT, "reaches element 17");
    /* A storage claiming more elements than its entry holds. */
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02");
    pk_tensor(&b, "0", 1000, 0, 4);
    put_s(&b, ".");
    expect_refused(&b, CHOIR_EFORMAT, "claims 1000 elements");
    /* A storage that is not in the archive. */
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02");
    pk_tensor(&b, "9", 4, 0, 4);
    put_s(&b, ".");
    expect_refused(&b, CHOIR_EFORMAT, "storage '9' is missing");
    /* A dict that contains itself. */
    memset(&b, 0, sizeof b);
    PUT_LIT(&b, "\x80\x02}q\x00");
    pk_str(&b, "a");
    PUT_LIT(&b, "h\x00s.");
    expect_refused(&b, CHOIR_EFORMAT, "cycle");
    /* Forty levels of a dict holding the previous level twice: 2^40 paths. */
    memset(&b, 0, sizeof b);
    PUT_LIT(&b, "\x80\x02}q\x00" "0");
    for (int k = 1; k <= 40; k++) {
        uint8_t prev = (uint8_t)(k - 1), cur = (uint8_t)k;
        put_s(&b, "}");
        pk_str(&b, "a");
        put_s(&b, "h");
        put(&b, &prev, 1);
        put_s(&b, "s");
        pk_str(&b, "b");
        put_s(&b, "h");
        put(&b, &prev, 1);
        put_s(&b, "sq");
        put(&b, &cur, 1);
        if (k < 40) put_s(&b, "0"); /* only the last level stays on the stack */
    }
    put_s(&b, ".");
    expect_refused(&b, CHOIR_ETOOBIG, "shares containers");
    /* Any other global, and an opcode torch.save never writes (INST). */
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02" "cbuiltins\neval\n.");
    expect_refused(&b, CHOIR_EUNSUPPORTED, "builtins.eval");
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02(ios\nsystem\n.");
    expect_refused(&b, CHOIR_EUNSUPPORTED, "opcode 0x69");
    /* REDUCE on an allowed storage class, memo misuse, no STOP. */
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02" "ctorch\nFloatStorage\n)R.");
    expect_refused(&b, CHOIR_EUNSUPPORTED, "REDUCE");
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02h\x05.");
    expect_refused(&b, CHOIR_EFORMAT, "memo");
    memset(&b, 0, sizeof b);
    put_s(&b, "\x80\x02}");
    expect_refused(&b, CHOIR_EFORMAT, "without STOP");
    memset(&b, 0, sizeof b);
    PUT_LIT(&b, "\x80\x02" "ccollections\nOrderedDict\n)Rq\x00" "0.");
    expect_refused(&b, CHOIR_EFORMAT, "exactly one value");
}

static void test_not_archives(void **state) {
    (void)state;
    choir_err err = {0};
    const uint8_t legacy[32] = {0x80, 0x02, 0x8a, 0x0a};
    assert_null(choir_pth_open_memory(legacy, sizeof legacy, 0, "old.pt", &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "legacy"));
    assert_null(choir_pth_open_memory("hello", 5, 0, "text", &err));
    assert_int_equal(err.code, CHOIR_EFORMAT);
    assert_null(choir_pth_open(tu_fixture("kokoro/voices/af_heart.bin"), &err));
    assert_non_null(strstr(err.msg, "af_heart.bin"));
    assert_null(choir_pth_open(tu_tmpfile("absent.pth"), &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
}

/* The same archive with every entry deflated reads back identically. */
static void test_deflated(void **state) {
    (void)state;
    size_t len;
    uint8_t *orig = tu_read_file(tu_fixture("kokoro/pth/views.pth"), &len);
    zip_error_t zerr;
    zip_error_init(&zerr);
    zip_t *src = zip_open_from_source(zip_source_buffer_create(orig, len, 0, &zerr), ZIP_RDONLY, &zerr);
    assert_non_null(src);
    const char *path = tu_tmpfile("deflated.pth");
    int zrc;
    zip_t *dst = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zrc);
    assert_non_null(dst);
    for (zip_int64_t i = 0; i < zip_get_num_entries(src, 0); i++) {
        zip_source_t *s = zip_source_zip(dst, src, (zip_uint64_t)i, 0, 0, -1);
        zip_int64_t at = zip_file_add(dst, zip_get_name(src, (zip_uint64_t)i, 0), s, 0);
        assert_true(at >= 0);
        zip_set_file_compression(dst, (zip_uint64_t)at, ZIP_CM_DEFLATE, 9);
    }
    assert_int_equal(zip_close(dst), 0);
    zip_discard(src);
    choir_err err = {0};
    choir_pth *a = choir_pth_open(tu_fixture("kokoro/pth/views.pth"), &err);
    choir_pth *b = choir_pth_open(path, &err);
    if (!b) fail_msg("%s", err.msg);
    assert_int_equal(choir_pth_count(a), choir_pth_count(b));
    for (int i = 0; i < choir_pth_count(a); i++) {
        const choir_st_tensor *x = choir_pth_at(a, i), *y = choir_pth_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
    choir_pth_close(a);
    choir_pth_close(b);
    free(orig);
}

/* Every prefix and every single-byte corruption of a real archive is survived. */
static void test_truncated_and_corrupt(void **state) {
    (void)state;
    size_t len;
    uint8_t *orig = tu_read_file(tu_fixture("kokoro/pth/views.pth"), &len);
    choir_err err = {0};
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n + 1);
        memcpy(cut, orig, n);
        assert_null(choir_pth_open_memory(cut, n, 0, "cut", &err));
        free(cut);
    }
    for (size_t i = 0; i < len; i++) {
        uint8_t saved = orig[i];
        orig[i] ^= 0xa5;
        choir_pth_close(choir_pth_open_memory(orig, len, 0, "flipped", &err));
        orig[i] = saved;
    }
    free(orig);
}

static void test_alloc_failures(void **state) {
    (void)state;
    size_t len;
    uint8_t *orig = tu_read_file(tu_fixture("kokoro/pth/views.pth"), &len);
    int opened = 0;
    for (int64_t n = 1; n < 2000 && !opened; n++) {
        choir_err err = {0};
        choir_alloc_fail_after(n);
        choir_pth *p = choir_pth_open_memory(orig, len, 0, "inject", &err);
        choir_alloc_fail_after(0);
        if (p) opened = 1;
        else assert_int_equal(err.code, CHOIR_ENOMEM);
        choir_pth_close(p);
    }
    assert_true(opened);
    free(orig);
}

/* choir_ckpt picks the reader by content. */
static void test_ckpt_either_kind(void **state) {
    (void)state;
    choir_err err = {0};
    choir_ckpt *ck = choir_ckpt_open(tu_fixture("kokoro/pth/kokoro_subset.pth"), &err);
    assert_non_null(ck);
    assert_true(choir_ckpt_is_pth(ck));
    assert_non_null(choir_ckpt_find(ck, "bert.embeddings.word_embeddings.weight"));
    assert_int_equal(choir_ckpt_count(ck), 17);
    assert_ptr_equal(choir_ckpt_at(ck, 0), choir_ckpt_find(ck, choir_ckpt_at(ck, 0)->name));
    choir_ckpt_close(ck);
    ck = choir_ckpt_open(tu_fixture("whisper/whisper-ml80/reference.safetensors"), &err);
    assert_non_null(ck);
    assert_false(choir_ckpt_is_pth(ck));
    assert_non_null(choir_ckpt_find(ck, "a0.mel"));
    choir_ckpt_close(ck);
    choir_ckpt_close(NULL);
    assert_null(choir_ckpt_open(tu_fixture("kokoro/pth/evil.pth"), &err));
    assert_int_equal(err.code, CHOIR_EUNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),          cmocka_unit_test(test_voice_pack),
        cmocka_unit_test(test_kokoro_subset),  cmocka_unit_test(test_evil_refused),
        cmocka_unit_test(test_handmade_good),  cmocka_unit_test(test_handmade_bad),
        cmocka_unit_test(test_not_archives),   cmocka_unit_test(test_deflated),
        cmocka_unit_test(test_truncated_and_corrupt), cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_ckpt_either_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
