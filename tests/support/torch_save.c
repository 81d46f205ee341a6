/* The torch.save writer of torch_save.h. */
#include "torch_save.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

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


void put(tsw_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
void put_u8(tsw_buf *b, unsigned v) { unsigned char c = (unsigned char)v; put(b, &c, 1); }
void put_u16(tsw_buf *b, unsigned v) { put_u8(b, v & 0xFF); put_u8(b, (v >> 8) & 0xFF); }
void put_u32(tsw_buf *b, uint32_t v) { put_u16(b, v & 0xFFFF); put_u16(b, v >> 16); }
void pk_str(tsw_buf *b, const char *s) { put_u8(b, 'X'); put_u32(b, (uint32_t)strlen(s)); put(b, s, strlen(s)); }
void pk_int(tsw_buf *b, int64_t v) { put_u8(b, 'J'); put_u32(b, (uint32_t)v); }
void pk_global(tsw_buf *b, const char *mod, const char *name) {
    put_u8(b, 'c');
    put(b, mod, strlen(mod));
    put_u8(b, '\n');
    put(b, name, strlen(name));
    put_u8(b, '\n');
}

/* torch._utils._rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict()) */
void pk_tensor(tsw_buf *b, int key, int ndim, const int64_t *shape, int64_t numel) {
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


/* One stored entry; data 64-byte aligned (as torch writes them) through an extra field. */
void zip_add(zipw *z, const char *name, const void *data, size_t n) {
    long off = ftell(z->f);
    uint32_t crc = crc32_update(0, data, n);
    size_t nl = strlen(name);
    size_t pad = (64 - (size_t)(off + 30 + (long)nl) % 64) % 64;
    if (pad && pad < 4) pad += 64;
    tsw_buf h = {0};
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
    tsw_buf *c = &z->central;
    put_u32(c, 0x02014b50);
    put_u16(c, 20), put_u16(c, 20), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0);
    put_u32(c, crc), put_u32(c, (uint32_t)n), put_u32(c, (uint32_t)n);
    put_u16(c, (unsigned)nl), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0), put_u16(c, 0);
    put_u32(c, 0), put_u32(c, (uint32_t)off);
    put(c, name, nl);
    z->entries++;
}

void zip_finish(zipw *z) {
    long cd = ftell(z->f);
    assert_int_equal(fwrite(z->central.p, 1, z->central.n, z->f), z->central.n);
    tsw_buf e = {0};
    put_u32(&e, 0x06054b50);
    put_u16(&e, 0), put_u16(&e, 0), put_u16(&e, (unsigned)z->entries), put_u16(&e, (unsigned)z->entries);
    put_u32(&e, (uint32_t)z->central.n), put_u32(&e, (uint32_t)cd), put_u16(&e, 0);
    assert_int_equal(fwrite(e.p, 1, e.n, z->f), e.n);
    free(e.p);
    free(z->central.p);
    fclose(z->f);
}


void tsw_add_manifest_tensor(zipw *z, tsw_buf *pk, const cJSON *t, const char *archive,
                             const char *key_name, int key) {
    const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
    const cJSON *shp = cJSON_GetObjectItem(t, "shape");
    int64_t shape[8], numel = 1;
    int nd = cJSON_GetArraySize(shp);
    assert_true(nd <= 8);
    for (int i = 0; i < nd; i++) numel *= shape[i] = (int64_t)cJSON_GetArrayItem(shp, i)->valuedouble;
    float *data = malloc((size_t)numel * sizeof(float));
    assert_non_null(data);
    choir_randw_fill(name, cJSON_GetObjectItem(t, "offset")->valuedouble,
                     cJSON_GetObjectItem(t, "scale")->valuedouble, 0, numel, data);
    char entry[600];
    snprintf(entry, sizeof entry, "%s/data/%d", archive, key);
    zip_add(z, entry, data, (size_t)numel * sizeof(float));
    free(data);
    pk_str(pk, key_name);
    pk_tensor(pk, key, nd, shape, numel);
}
