/* MossFormer2 from ClearerVoice's published layout: a folder holding
 * `last_best_checkpoint` (a text file naming the checkpoint) and
 * `last_best_checkpoint.pt`, a torch.save archive whose pickle is
 * {"model": {"module." + key: tensor}} (the DataParallel form the spec
 * expects). The test writes one from the fixture manifest with a minimal
 * torch.save writer (the one tests/test_kokoro_pth.c uses) and checks that the
 * model loads from it and enhances bit for bit as it does from safetensors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/mossformer2.h"
#include "choir/randw.h"
#include "testutil.h"

#define FIX "mossformer2/mossformer2-se-48k"

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

/* Writes `path` from the fixture manifest (learnable tensors only: the
 * constants are left out, as the loader computes them). */
static void write_published_pt(const char *path) {
    size_t len = 0;
    char *text = tu_read_file(tu_fixture(FIX "/manifest.json"), &len);
    assert_non_null(text);
    cJSON *man = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(man);
    const cJSON *tensors = cJSON_GetObjectItem(man, "tensors");
    zipw z = {.f = fopen(path, "wb")};
    assert_non_null(z.f);
    buf pk = {0};
    put_u8(&pk, 0x80), put_u8(&pk, 2), put_u8(&pk, '}'), put_u8(&pk, '(');
    pk_str(&pk, "model");
    put_u8(&pk, '}'), put_u8(&pk, '(');
    int key = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
        const cJSON *shp = cJSON_GetObjectItem(t, "shape");
        int64_t shape[8], numel = 1;
        int nd = cJSON_GetArraySize(shp);
        for (int i = 0; i < nd; i++) numel *= shape[i] = (int64_t)cJSON_GetArrayItem(shp, i)->valuedouble;
        float *data = malloc((size_t)numel * sizeof(float));
        assert_non_null(data);
        choir_randw_fill(name, cJSON_GetObjectItem(t, "offset")->valuedouble,
                         cJSON_GetObjectItem(t, "scale")->valuedouble, 0, numel, data);
        char entry[64], keyname[600];
        snprintf(entry, sizeof entry, "last_best_checkpoint/data/%d", key);
        zip_add(&z, entry, data, (size_t)numel * sizeof(float));
        free(data);
        snprintf(keyname, sizeof keyname, "module.%s", name);
        pk_str(&pk, keyname);
        pk_tensor(&pk, key++, nd, shape, numel);
    }
    put_u8(&pk, 'u');
    put_u8(&pk, 'u'), put_u8(&pk, '.');
    zip_add(&z, "last_best_checkpoint/data.pkl", pk.p, pk.n);
    zip_add(&z, "last_best_checkpoint/byteorder", "little", 6);
    zip_add(&z, "last_best_checkpoint/version", "3\n", 2);
    zip_finish(&z);
    free(pk.p);
    cJSON_Delete(man);
}

static void test_published_layout(void **state) {
    (void)state;
    choir_err err = {0};
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s", tu_tmpfile("published"));
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    assert_int_equal(system(path), 0);
    snprintf(path, sizeof path, "%s/last_best_checkpoint.pt", dir);
    write_published_pt(path);
    snprintf(path, sizeof path, "%s/last_best_checkpoint", dir);
    assert_int_equal(tu_write_file(path, "last_best_checkpoint.pt\n", 24), 0);
    choir_mf2 *pt = choir_mf2_load(dir, &err);
    if (!pt) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(pt);

    const char *st_dir = tu_tmpfile("st");
    char manifest[1024];
    snprintf(manifest, sizeof manifest, "%s", tu_fixture(FIX "/manifest.json"));
    assert_int_equal(choir_randw_write_checkpoint(manifest, NULL, st_dir, &err), 0);
    choir_mf2 *st = choir_mf2_load(st_dir, &err);
    assert_non_null(st);

    enum { N = 9600 };
    static float x[N], a[N], b[N];
    tu_fill_uniform(x, N, 9, -0.4f, 0.4f);
    assert_int_equal(choir_mf2_enhance(pt, x, N, a, NULL, &err), 0);
    assert_int_equal(choir_mf2_enhance(st, x, N, b, NULL, &err), 0);
    assert_memory_equal(a, b, sizeof a);
    double e = 0;
    for (int i = 0; i < N; i++) e += (double)a[i] * a[i];
    assert_true(e > 0);
    choir_mf2_free(pt);
    choir_mf2_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
