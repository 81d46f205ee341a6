/* Zip central directory reader. torch.save writes stored (uncompressed) entries
 * aligned to 64 bytes, so tensors can be used in place; everything here is
 * bounds-checked because the archive may be hostile. */
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "choir/alloc.h"
#include "io/zipread.h"

#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_EOCD64_LOC 0x07064b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_LOCAL 0x04034b50u

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int name_cmp(const zr_entry *a, const char *name, size_t len) {
    int c = memcmp(a->name, name, a->name_len < len ? a->name_len : len);
    if (c) return c;
    return a->name_len < len ? -1 : a->name_len > len;
}

/* qsort has no context pointer, so entry pairs carry the entry itself. */
typedef struct entry_ref { const zr_entry *e; int index; } entry_ref;

static int entry_ref_cmp(const void *a, const void *b) {
    const zr_entry *y = ((const entry_ref *)b)->e;
    return name_cmp(((const entry_ref *)a)->e, y->name, y->name_len);
}

static int bad(const char *label, const char *what, choir_err *err) {
    return choir_err_set(err, CHOIR_EFORMAT, "%s: not a valid zip archive: %s", label, what);
}

/* Applies the ZIP64 extended-information field to the values that overflowed. */
static int zip64_extra(const uint8_t *x, size_t xlen, uint64_t *size, uint64_t *csize, uint64_t *off) {
    while (xlen >= 4) {
        unsigned id = (unsigned)le(x, 2), n = (unsigned)le(x + 2, 2);
        if (n > xlen - 4) return -1;
        if (id == 1) {
            const uint8_t *q = x + 4, *qe = x + 4 + n;
            uint64_t *fields[3] = {size, csize, off};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xFFFFFFFFu) continue;
                if (qe - q < 8) return -1;
                *fields[i] = le(q, 8);
                q += 8;
            }
            return 0;
        }
        x += 4 + n;
        xlen -= 4 + n;
    }
    return 0;
}

int zr_open(zr_archive *z, const uint8_t *base, size_t len, const char *label, choir_err *err) {
    memset(z, 0, sizeof *z);
    z->base = base;
    z->len = len;
    if (len < 22) return bad(label, "too short", err);
    /* The end record sits in the last 22 + 65535 (comment) bytes. */
    size_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0, eocd = (size_t)-1;
    for (size_t i = len - 22 + 1; i-- > lo;) {
        if (le(base + i, 4) == SIG_EOCD) {
            eocd = i;
            break;
        }
    }
    if (eocd == (size_t)-1) return bad(label, "no end-of-central-directory record", err);
    uint64_t count = le(base + eocd + 10, 2), cd_size = le(base + eocd + 12, 4), cd_off = le(base + eocd + 16, 4);
    if ((count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) && eocd >= 20 &&
        le(base + eocd - 20, 4) == SIG_EOCD64_LOC) {
        uint64_t rec = le(base + eocd - 20 + 8, 8);
        if (rec > len || len - rec < 56 || le(base + rec, 4) != SIG_EOCD64)
            return bad(label, "bad ZIP64 end record", err);
        count = le(base + rec + 32, 8);
        cd_size = le(base + rec + 40, 8);
        cd_off = le(base + rec + 48, 8);
    }
    if (cd_off > len || cd_size > len - cd_off) return bad(label, "central directory outside the file", err);
    /* Each central entry takes at least 46 bytes, which bounds the count. */
    if (count > cd_size / 46) return bad(label, "entry count larger than the directory", err);
    z->entries = choir_calloc(CHOIR_MEM_OTHER, (size_t)count + 1, sizeof *z->entries);
    if (!z->entries) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", label);
    const uint8_t *p = base + cd_off, *end = base + cd_off + cd_size;
    for (uint64_t i = 0; i < count; i++) {
        if (end - p < 46 || le(p, 4) != SIG_CENTRAL) return bad(label, "bad central directory entry", err);
        zr_entry *e = &z->entries[z->count];
        e->method = (int)le(p + 10, 2);
        uint64_t csize = le(p + 20, 4), size = le(p + 24, 4), off = le(p + 42, 4);
        size_t nlen = (size_t)le(p + 28, 2), xlen = (size_t)le(p + 30, 2), clen = (size_t)le(p + 32, 2);
        if ((size_t)(end - p) - 46 < nlen + xlen + clen) return bad(label, "central entry runs past the directory", err);
        e->name = (const char *)p + 46;
        e->name_len = nlen;
        if (zip64_extra(p + 46 + nlen, xlen, &size, &csize, &off) < 0) return bad(label, "bad ZIP64 field", err);
        if (le(p + 8, 2) & 1) return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: encrypted zip entries", label);
        if (off > len || len - off < 30 || le(base + off, 4) != SIG_LOCAL)
            return bad(label, "local header outside the file", err);
        uint64_t data_off = off + 30 + le(base + off + 26, 2) + le(base + off + 28, 2);
        if (data_off > len || csize > len - data_off) return bad(label, "entry data outside the file", err);
        if (e->method == 0 && csize != size) return bad(label, "stored entry with two sizes", err);
        e->size = size;
        e->comp_size = csize;
        e->data = base + data_off;
        z->count++;
        p += 46 + nlen + xlen + clen;
    }
    /* Storages are looked up by name once per tensor: sort once, search in log time. */
    entry_ref *refs = choir_alloc(CHOIR_MEM_OTHER, (size_t)z->count * sizeof *refs + 1);
    z->by_name = choir_alloc(CHOIR_MEM_OTHER, (size_t)z->count * sizeof(int) + 1);
    if (!refs || !z->by_name) {
        choir_free(refs);
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", label);
    }
    for (int i = 0; i < z->count; i++) refs[i] = (entry_ref){&z->entries[i], i};
    qsort(refs, (size_t)z->count, sizeof *refs, entry_ref_cmp);
    for (int i = 0; i < z->count; i++) z->by_name[i] = refs[i].index;
    choir_free(refs);
    return CHOIR_OK;
}

void zr_close(zr_archive *z) {
    if (!z) return;
    choir_free(z->entries);
    choir_free(z->by_name);
    memset(z, 0, sizeof *z);
}

const zr_entry *zr_find(const zr_archive *z, const char *name) {
    if (!z->by_name) return NULL;
    size_t len = strlen(name);
    int lo = 0, hi = z->count - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const zr_entry *e = &z->entries[z->by_name[mid]];
        int c = name_cmp(e, name, len);
        if (c == 0) return e;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int zr_extract(const zr_archive *z, const zr_entry *e, uint64_t max_bytes, uint8_t **out,
               const char *label, choir_err *err) {
    *out = NULL;
    if (e->size > max_bytes)
        return choir_err_set(err, CHOIR_ETOOBIG, "%s: entry '%.*s' of %llu bytes is too large", label,
                             (int)e->name_len, e->name, (unsigned long long)e->size);
    uint8_t *buf = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)e->size + 1);
    if (!buf) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", label);
    if (e->method == 0) {
        memcpy(buf, e->data, (size_t)e->size);
        *out = buf;
        return CHOIR_OK;
    }
    if (e->method != 8) {
        choir_free(buf);
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: entry '%.*s' uses zip method %d", label,
                             (int)e->name_len, e->name, e->method);
    }
    /* Deflate goes through libzip, opened over the same bytes; it finds the
     * entry by its index in the central directory. */
    int rc = CHOIR_OK;
    zip_error_t zerr;
    zip_error_init(&zerr);
    zip_source_t *src = zip_source_buffer_create(z->base, z->len, 0, &zerr);
    zip_t *za = src ? zip_open_from_source(src, ZIP_RDONLY, &zerr) : NULL;
    zip_file_t *zf = za ? zip_fopen_index(za, (zip_uint64_t)(e - z->entries), 0) : NULL;
    if (!zf) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: cannot inflate '%.*s': %s", label, (int)e->name_len, e->name,
                           zip_error_strerror(za ? zip_get_error(za) : &zerr));
        goto done;
    }
    zip_int64_t got = zip_fread(zf, buf, e->size);
    if (got < 0 || (uint64_t)got != e->size)
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: entry '%.*s' inflates to the wrong size", label,
                           (int)e->name_len, e->name);
    zip_fclose(zf);
done:
    if (za) zip_discard(za);
    else if (src) zip_source_free(src);
    zip_error_fini(&zerr);
    if (rc < 0) choir_free(buf);
    else *out = buf;
    return rc;
}
