/* Kokoro from an official-layout kokoro-v1_0.pth: the test writes one itself
 * (a torch.save zip archive whose pickle is {group: {"module." + key: tensor}},
 * every tensor randw-v1 as in the parity fixture), loads it through the real
 * loader and checks it gives bit for bit the audio of the same weights loaded
 * from safetensors, with the fixture's durations. */
// ctest: labels=slow;nosan timeout=600
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/kokoro.h"
#include "choir/randw.h"
#include "testutil.h"

/* --- a minimal torch.save writer: stored zip entries + protocol-2 pickle --- */

static uint32_t crc_table[256];

static uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    if (!crc_table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u8(buf *b, unsigned v) { unsigned char c = (unsigned char)v; put(b, &c, 1); }
static void put_u16(buf *b, unsigned v) { put_u8(b, v & 0xFF); put_u8(b, (v >> 8) & 0xFF); }
static void put_u32(buf *b, uint32_t v) { put_u16(b, v & 0xFFFF); put_u16(b, v >> 16); }
static void pk_str(buf *b, const char *s) { put_u8(b, 'X'); put_u32(b, (uint32_t)strlen(s)); put(b, s, strlen(s)); }
static void pk_int(buf *b, int64_t v) { put_u8(b, 'J'); put_u32(b, (uint32_t)v); }
static void pk_global(buf *b, const char *mod, const char *name) {
    put_u8(b, 'c');
    put(b, mod, strlen(mod));
    put_u8(b, '\n');
    put(b, name, strlen(name));
    put_u8(b, '\n');
}

/* torch._utils._rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict()) */
static void pk_tensor(buf *b, int key, int ndim, const int64_t *shape, int64_t numel) {
    char k[16];
    snprintf(k, sizeof k, "%d", key);
    pk_global(b, "torch._utils", "_rebuild_tensor_v2");
    put_u8(b, '(');
    put_u8(b, '(');
    pk_str(b, "storage");
    pk_global(b, "torch", "FloatStorage");
    pk_str(b, k);
    pk_str(b, "cpu");
    pk_int(b, numel);
    put_u8(b, 't');
    put_u8(b, 'Q'); /* BINPERSID */
    pk_int(b, 0);
    put_u8(b, '(');
    for (int i = 0; i < ndim; i++) pk_int(b, shape[i]);
    put_u8(b, 't');
    put_u8(b, '(');
    int64_t stride = 1;
    int64_t strides[8];
    for (int i = ndim - 1; i >= 0; i--) strides[i] = stride, stride *= shape[i];
    for (int i = 0; i < ndim; i++) pk_int(b, strides[i]);
    put_u8(b, 't');
    put_u8(b, 0x89); /* NEWFALSE */
    pk_global(b, "collections", "OrderedDict");
    put_u8(b, ')');
    put_u8(b, 'R');
    put_u8(b, 't');
    put_u8(b, 'R');
}

typedef struct zipw {
    FILE *f;
    buf central;
    int entries;
} zipw;

/* One stored entry; data 64-byte aligned (as torch writes them) through an extra field. */
static void zip_add(zipw *z, const char *name, const void *data, size_t n) {
    long off = ftell(z->f);
    uint32_t crc = crc32_update(0, data, n);
    size_t nl = strlen(name);
    size_t pad = (64 - (size_t)(off + 30 + (long)nl) % 64) % 64;
    if (pad && pad < 4) pad += 64;
    buf h = {0};
    put_u32(&h, 0x04034b50);
    put_u16(&h, 20), put_u16(&h, 0), put_u16(&h, 0), put_u16(&h, 0), put_u16(&h, 0);
    put_u32(&h, crc), put_u32(&h, (uint32_t)n), put_u32(&h, (uint32_t)n);
    put_u16(&h, (unsigned)nl), put_u16(&h, (unsigned)pad);
    put(&h, name, nl);
    if (pad) {
        put_u16(&h, 0x4246), put_u16(&h, (unsigned)(pad - 4));
        for (size_t i = 4; i < pad; i++) put_u8(&h, 'Z');
    }
    assert_int_equal(fwrite(h.p, 1, h.n, z->f), h.n);
    assert_int_equal(fwrite(data, 1, n, z->f), n);
    free(h.p);
    buf *c = &z->central;
    put_u32(c, 0x02014b50);
    put_u16(c, 20), put_u16(c, 20), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0);
    put_u32(c, crc), put_u32(c, (uint32_t)n), put_u32(c, (uint32_t)n);
    put_u16(c, (unsigned)nl), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0);
    put_u32(c, 0), put_u32(c, (uint32_t)off);
    put(c, name, nl);
    z->entries++;
}

static void zip_finish(zipw *z) {
    long cd = ftell(z->f);
    assert_int_equal(fwrite(z->central.p, 1, z->central.n, z->f), z->central.n);
    buf e = {0};
    put_u32(&e, 0x06054b50);
    put_u16(&e, 0), put_u16(&e, 0), put_u16(&e, (unsigned)z->entries), put_u16(&e, (unsigned)z->entries);
    put_u32(&e, (uint32_t)z->central.n), put_u32(&e, (uint32_t)cd), put_u16(&e, 0);
    assert_int_equal(fwrite(e.p, 1, e.n, z->f), e.n);
    free(e.p);
    free(z->central.p);
    fclose(z->f);
}

/* Writes dir/kokoro-v1_0.pth from the fixture manifest, grouped as the
 * official checkpoint: top-level group -> {"module." + rest: tensor}. */
static void write_official_pth(const char *path) {
    size_t len = 0;
    char *text = tu_read_file(tu_fixture("kokoro/kokoro-v1/manifest.json"), &len);
    assert_non_null(text);
    cJSON *man = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(man);
    const cJSON *tensors = cJSON_GetObjectItem(man, "tensors");
    static const char *const groups[] = {"bert", "bert_encoder", "predictor", "text_encoder", "decoder"};
    zipw z = {.f = fopen(path, "wb")};
    assert_non_null(z.f);
    buf pk = {0};
    put_u8(&pk, 0x80), put_u8(&pk, 2), put_u8(&pk, '}'), put_u8(&pk, '(');
    int key = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        size_t gl = strlen(groups[g]);
        pk_str(&pk, groups[g]);
        put_u8(&pk, '}'), put_u8(&pk, '(');
        const cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
            if (strncmp(name, groups[g], gl) != 0 || name[gl] != '.') continue;
            const cJSON *shp = cJSON_GetObjectItem(t, "shape");
            int64_t shape[8], numel = 1;
            int nd = cJSON_GetArraySize(shp);
            for (int i = 0; i < nd; i++) numel *= shape[i] = (int64_t)cJSON_GetArrayItem(shp, i)->valuedouble;
            float *data = malloc((size_t)numel * sizeof(float));
            assert_non_null(data);
            choir_randw_fill(name, cJSON_GetObjectItem(t, "offset")->valuedouble,
                             cJSON_GetObjectItem(t, "scale")->valuedouble, 0, numel, data);
            char entry[64], keyname[600];
            snprintf(entry, sizeof entry, "kokoro-v1_0/data/%d", key);
            zip_add(&z, entry, data, (size_t)numel * sizeof(float));
            free(data);
            snprintf(keyname, sizeof keyname, "module.%s", name + gl + 1);
            pk_str(&pk, keyname);
            pk_tensor(&pk, key++, nd, shape, numel);
        }
        put_u8(&pk, 'u');
    }
    put_u8(&pk, 'u'), put_u8(&pk, '.');
    zip_add(&z, "kokoro-v1_0/data.pkl", pk.p, pk.n);
    zip_add(&z, "kokoro-v1_0/byteorder", "little", 6);
    zip_add(&z, "kokoro-v1_0/version", "3\n", 2);
    zip_finish(&z);
    free(pk.p);
    cJSON_Delete(man);
}

static const int32_t hello_ids[16] = {0, 50, 83, 54, 156, 57, 135, 16, 65, 156, 87, 158, 54, 46, 4, 0};

typedef struct durs {
    float pred[16];
    int seen;
} durs;

static void keep_durations(void *user, const char *stage, const float *data, int ndim,
                           const int64_t *shape) {
    durs *d = user;
    if (strcmp(stage, "pred_dur") == 0 && ndim == 1 && shape[0] == 16) {
        memcpy(d->pred, data, sizeof d->pred);
        d->seen = 1;
    }
}

static void test_pth_equals_safetensors(void **state) {
    (void)state;
    choir_err err = {0};
    char dir_st[600], dir_pth[600], path[700];
    snprintf(dir_st, sizeof dir_st, "%s", tu_tmpfile("st"));
    snprintf(dir_pth, sizeof dir_pth, "%s", tu_tmpfile("pth"));
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir_st, &err), 0);
    /* the .pth directory: config.json and kokoro-v1_0.pth, nothing else */
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir_pth, &err), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir_pth);
    assert_int_equal(remove(path), 0);
    snprintf(path, sizeof path, "%s/kokoro-v1_0.pth", dir_pth);
    write_official_pth(path);

    choir_kokoro *m_st = choir_kokoro_load(dir_st, &err);
    if (!m_st) fail_msg("%s", err.msg);
    choir_kokoro *m_pth = choir_kokoro_load(dir_pth, &err);
    if (!m_pth) fail_msg("%s", err.msg);
    choir_kokoro_voice *v = choir_kokoro_voice_load("af_heart", tu_fixture("kokoro/voices"), &err);
    assert_non_null(v);

    /* phonemes -> ids with the config's vocabulary, as in the fixture's meta.json */
    int32_t ids[64];
    int dropped = -1;
    assert_int_equal(choir_kokoro_phonemes_to_ids(m_pth, "həlˈoʊ wˈɜːld.", ids, 64, &dropped, &err), 16);
    assert_int_equal(dropped, 0);
    assert_memory_equal(ids, hello_ids, sizeof hello_ids);
    assert_int_equal(choir_kokoro_phonemes_to_ids(m_pth, "hə<l", ids, 64, &dropped, &err), 5);
    assert_int_equal(dropped, 1);

    choir_kokoro_params p = choir_kokoro_default_params();
    p.noise = CHOIR_KOKORO_NOISE_ZERO;
    durs d = {0};
    p.trace = keep_durations;
    p.trace_user = &d;
    const float *style = choir_kokoro_voice_style(v, 14);
    float *a_st = NULL, *a_pth = NULL;
    int64_t n_st = 0, n_pth = 0;
    assert_int_equal(choir_kokoro_synthesize_ids(m_st, hello_ids, 16, style, &p, &a_st, &n_st, &err), 0);
    assert_int_equal(choir_kokoro_synthesize_ids(m_pth, hello_ids, 16, style, &p, &a_pth, &n_pth, &err), 0);
    assert_int_equal(n_st, 38400);
    assert_int_equal(n_pth, n_st);
    assert_memory_equal(a_st, a_pth, (size_t)n_st * sizeof(float));
    assert_true(d.seen);
    for (int i = 0; i < 16; i++) assert_true(d.pred[i] == 4.0f); /* the fixture's pred_dur */
    choir_free(a_st);
    choir_free(a_pth);
    choir_kokoro_voice_free(v);
    choir_kokoro_free(m_st);
    choir_kokoro_free(m_pth);
}

static void test_subset_pth_names_missing_tensor(void **state) {
    (void)state;
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("subset"));
    choir_err err = {0};
    assert_int_equal(choir_randw_write_checkpoint(tu_fixture("kokoro/kokoro-v1/manifest.json"),
                                                  tu_fixture("kokoro/kokoro-v1/config.json"), dir, &err), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(remove(path), 0);
    size_t len = 0;
    void *sub = tu_read_file(tu_fixture("kokoro/pth/kokoro_subset.pth"), &len);
    assert_non_null(sub);
    snprintf(path, sizeof path, "%s/kokoro-v1_0.pth", dir);
    assert_int_equal(tu_write_file(path, sub, len), 0);
    free(sub);
    assert_null(choir_kokoro_load(dir, &err));
    assert_int_equal(err.code, CHOIR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "is missing"));
    assert_non_null(strstr(err.msg, "kokoro-v1_0.pth"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pth_equals_safetensors),
        cmocka_unit_test(test_subset_pth_names_missing_tensor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
