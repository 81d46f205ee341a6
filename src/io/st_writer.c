/* safetensors writer: collects tensors (copied, referenced, or produced by a
 * callback at save time) and writes one file through a temporary file.
 *
 * Tensors are ordered by element size, largest first, then by name, as the
 * reference writer does: with the header padded to a multiple of 8 bytes that
 * keeps every tensor aligned to its element size without leaving holes, which
 * strict readers refuse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/safetensors.h"
#include "choir/io.h"

typedef struct wtensor {
    char *name;
    choir_dtype dtype;
    int ndim;
    int64_t shape[CHOIR_ST_MAX_DIMS];
    size_t nbytes;
    const void *data;   /* caller's or `owned` */
    void *owned;
    choir_st_fill_fn fill;
    void *fill_ctx;
} wtensor;

struct choir_st_writer {
    wtensor *tensors;
    int n, cap;
    char **meta_keys, **meta_vals;
    int nmeta, meta_cap;
};

/* A JSON string literal: quotes, backslashes and control bytes escaped; other
 * bytes (UTF-8) pass through. */
static void sb_json_str(choir_buf *b, const char *s) {
    choir_buf_append(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            choir_buf_append(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            choir_buf_append(b, esc, 6);
        } else {
            choir_buf_append(b, (const char *)&c, 1);
        }
    }
    choir_buf_append(b, "\"", 1);
}

choir_st_writer *choir_st_writer_create(choir_err *err) {
    choir_st_writer *w = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *w);
    if (!w) choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    return w;
}

void choir_st_writer_free(choir_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        choir_free(w->tensors[i].name);
        choir_free(w->tensors[i].owned);
    }
    for (int i = 0; i < w->nmeta; i++) {
        choir_free(w->meta_keys[i]);
        choir_free(w->meta_vals[i]);
    }
    choir_free(w->meta_keys);
    choir_free(w->meta_vals);
    choir_free(w->tensors);
    choir_free(w);
}

/* Validates and appends an entry; the caller sets its data source. */
static wtensor *add_entry(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                          const int64_t *shape, choir_err *err) {
    if (!w || !name || !name[0] || strcmp(name, "__metadata__") == 0) {
        choir_err_set(err, CHOIR_EINVAL, "safetensors writer: bad tensor name '%s'", name ? name : "(null)");
        return NULL;
    }
    size_t esz = choir_dtype_size(dtype);
    if (!esz || ndim < 0 || ndim > CHOIR_ST_MAX_DIMS || (ndim && !shape)) {
        choir_err_set(err, CHOIR_EINVAL, "safetensors writer: tensor '%s': bad dtype or rank", name);
        return NULL;
    }
    uint64_t nbytes = esz;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(nbytes, (uint64_t)shape[d], &nbytes) ||
            nbytes > (uint64_t)SIZE_MAX / 2) {
            choir_err_set(err, CHOIR_EINVAL, "safetensors writer: tensor '%s': bad shape", name);
            return NULL;
        }
    }
    if (w->n == w->cap) {
        int ncap = w->cap ? w->cap * 2 : 64;
        wtensor *p = choir_realloc(w->tensors, (size_t)ncap * sizeof *p);
        if (!p) {
            choir_err_set(err, CHOIR_ENOMEM, "out of memory");
            return NULL;
        }
        w->tensors = p;
        w->cap = ncap;
    }
    wtensor *t = &w->tensors[w->n];
    memset(t, 0, sizeof *t);
    t->name = choir_strdup(name);
    if (!t->name) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        return NULL;
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->nbytes = (size_t)nbytes;
    w->n++;
    return t;
}

int choir_st_writer_add(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                        const int64_t *shape, const void *data, choir_err *err) {
    wtensor *t = add_entry(w, name, dtype, ndim, shape, err);
    if (!t) return err ? err->code : CHOIR_EINVAL;
    t->owned = choir_alloc(CHOIR_MEM_IO, t->nbytes);
    if (!t->owned) {
        choir_free(t->name);
        w->n--;
        return choir_err_set(err, CHOIR_ENOMEM, "out of memory copying tensor '%s'", name);
    }
    if (t->nbytes) memcpy(t->owned, data, t->nbytes);
    t->data = t->owned;
    return CHOIR_OK;
}

int choir_st_writer_add_ref(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                            const int64_t *shape, const void *data, choir_err *err) {
    wtensor *t = add_entry(w, name, dtype, ndim, shape, err);
    if (!t) return err ? err->code : CHOIR_EINVAL;
    t->data = data;
    return CHOIR_OK;
}

int choir_st_writer_add_fill(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                             const int64_t *shape, choir_st_fill_fn fill, void *ctx, choir_err *err) {
    if (!fill) return choir_err_set(err, CHOIR_EINVAL, "safetensors writer: NULL fill function");
    wtensor *t = add_entry(w, name, dtype, ndim, shape, err);
    if (!t) return err ? err->code : CHOIR_EINVAL;
    t->fill = fill;
    t->fill_ctx = ctx;
    return CHOIR_OK;
}

int choir_st_writer_set_metadata(choir_st_writer *w, const char *key, const char *value,
                                 choir_err *err) {
    if (!w || !key || !value) return choir_err_set(err, CHOIR_EINVAL, "safetensors writer: NULL metadata");
    for (int i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta_keys[i], key) == 0) {
            char *v = choir_strdup(value);
            if (!v) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
            choir_free(w->meta_vals[i]);
            w->meta_vals[i] = v;
            return CHOIR_OK;
        }
    }
    if (w->nmeta == w->meta_cap) {
        int ncap = w->meta_cap ? w->meta_cap * 2 : 8;
        char **k = choir_realloc(w->meta_keys, (size_t)ncap * sizeof *k);
        if (!k) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        w->meta_keys = k;
        char **v = choir_realloc(w->meta_vals, (size_t)ncap * sizeof *v);
        if (!v) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        w->meta_vals = v;
        w->meta_cap = ncap;
    }
    char *k = choir_strdup(key), *v = choir_strdup(value);
    if (!k || !v) {
        choir_free(k);
        choir_free(v);
        return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    }
    w->meta_keys[w->nmeta] = k;
    w->meta_vals[w->nmeta] = v;
    w->nmeta++;
    return CHOIR_OK;
}

static int name_cmp(const void *a, const void *b) {
    const wtensor *x = *(const wtensor *const *)a, *y = *(const wtensor *const *)b;
    return strcmp(x->name, y->name);
}

static int order_cmp(const void *a, const void *b) {
    const wtensor *x = *(const wtensor *const *)a, *y = *(const wtensor *const *)b;
    size_t sx = choir_dtype_size(x->dtype), sy = choir_dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

int choir_st_writer_save(choir_st_writer *w, const char *path, choir_err *err) {
    if (!w || !path) return choir_err_set(err, CHOIR_EINVAL, "safetensors writer: NULL argument");
    wtensor **order = choir_alloc(CHOIR_MEM_OTHER, (size_t)w->n * sizeof *order + 1);
    choir_buf hdr = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    void *scratch = NULL;
    FILE *f = NULL;
    char tmp[4096];
    int rc = CHOIR_OK;
    if (!order) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    size_t scratch_bytes = 0;
    for (int i = 0; i < w->n; i++) {
        order[i] = &w->tensors[i];
        if (w->tensors[i].fill && w->tensors[i].nbytes > scratch_bytes) scratch_bytes = w->tensors[i].nbytes;
    }
    /* Names must be unique: sort by name alone first, where twins sit side by side. */
    qsort(order, (size_t)w->n, sizeof *order, name_cmp);
    for (int i = 1; i < w->n; i++) {
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            rc = choir_err_set(err, CHOIR_EINVAL, "%s: tensor '%s' added twice", path, order[i]->name);
            goto fail;
        }
    }
    qsort(order, (size_t)w->n, sizeof *order, order_cmp);

    choir_buf_puts(&hdr, "{");
    if (w->nmeta) {
        choir_buf_puts(&hdr, "\"__metadata__\":{");
        for (int i = 0; i < w->nmeta; i++) {
            if (i) choir_buf_puts(&hdr, ",");
            sb_json_str(&hdr, w->meta_keys[i]);
            choir_buf_puts(&hdr, ":");
            sb_json_str(&hdr, w->meta_vals[i]);
        }
        choir_buf_puts(&hdr, "}");
    }
    uint64_t at = 0;
    for (int i = 0; i < w->n; i++) {
        const wtensor *t = order[i];
        char num[64];
        if (i || w->nmeta) choir_buf_puts(&hdr, ",");
        sb_json_str(&hdr, t->name);
        choir_buf_puts(&hdr, ":{\"dtype\":\"");
        choir_buf_puts(&hdr, choir_dtype_name(t->dtype));
        choir_buf_puts(&hdr, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            choir_buf_puts(&hdr, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + t->nbytes));
        choir_buf_puts(&hdr, num);
        at += t->nbytes;
    }
    choir_buf_puts(&hdr, "}");
    while ((8 + hdr.len) % 8) choir_buf_puts(&hdr, " ");
    if (hdr.oom) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory building the header", path);
        goto fail;
    }
    if (scratch_bytes && !(scratch = choir_alloc(CHOIR_MEM_IO, scratch_bytes))) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory (%zu bytes for one tensor)", path,
                           scratch_bytes);
        goto fail;
    }
    f = choir_io_tmp_open(path, tmp, sizeof tmp, err);
    if (!f) {
        rc = err ? err->code : CHOIR_EIO;
        goto fail;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hdr.len >> (8 * i));
    int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(hdr.data, 1, hdr.len, f) != hdr.len;
    for (int i = 0; i < w->n && !bad; i++) {
        const wtensor *t = order[i];
        const void *src = t->data;
        if (t->fill) {
            if ((rc = t->fill(t->fill_ctx, t->name, scratch, t->nbytes, err)) < 0) {
                choir_err_prefix(err, "%s: tensor '%s'", path, t->name);
                goto fail;
            }
            src = scratch;
        }
        if (t->nbytes && fwrite(src, 1, t->nbytes, f) != t->nbytes) bad = 1;
    }
    if (bad) {
        rc = choir_err_set(err, CHOIR_EIO, "%s: write failed (disk full?)", path);
        goto fail;
    }
    rc = choir_io_tmp_commit(f, tmp, path, err);
    f = NULL;
fail:
    if (f) choir_io_tmp_abort(f, tmp);
    choir_free(scratch);
    choir_buf_free(&hdr);
    choir_free(order);
    return rc;
}
