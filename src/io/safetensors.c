/* safetensors reader: memory-maps each file, validates its header strictly and
 * exposes tensors as pointers into the mapping.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON, then the
 * data area. Every check happens before a tensor is exposed, so a loader can
 * trust shape, dtype and byte span of whatever it gets back. Nothing is copied
 * except the tensors of a file whose data would sit at an address not aligned to
 * the element size (a foreign writer's odd header length); those are copied once
 * at open so that model code may read them as typed arrays. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/safetensors.h"
#include "choir/io.h"

/* The reference implementation refuses headers above 100 MB; so do we, before
 * handing anything that large to the JSON parser. */
#define ST_HEADER_MAX ((uint64_t)100 << 20)
/* JSON numbers are doubles: integers above 2^53 are not exact any more. */
#define ST_INT_MAX 9007199254740992.0

typedef struct st_file {
    char *path;            /* for messages, and to open shards beside an index */
    const uint8_t *base;   /* the mapping, or the caller's buffer */
    size_t len;
    int mapped;
} st_file;

struct choir_st {
    st_file *files;
    int nfiles, files_cap;
    choir_st_tensor *tensors;
    int *file_of;          /* which file each tensor came from */
    int ntensors, tensors_cap;
    int *slots;            /* open-addressing name index: tensor index + 1, 0 empty */
    int nslots;
    char **meta_keys, **meta_vals;
    int nmeta;
    void **copies;         /* aligned copies of misaligned tensors */
    int ncopies, copies_cap;
    size_t data_bytes;
};

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static int index_find(const choir_st *st, const char *name) {
    if (!st->nslots) return -1;
    size_t mask = (size_t)st->nslots - 1;
    for (size_t j = (size_t)name_hash(name) & mask;; j = (j + 1) & mask) {
        int v = st->slots[j];
        if (!v) return -1;
        if (strcmp(st->tensors[v - 1].name, name) == 0) return v - 1;
    }
}

static int index_rebuild(choir_st *st, int nslots) {
    int *slots = choir_calloc(CHOIR_MEM_OTHER, (size_t)nslots, sizeof *slots);
    if (!slots) return CHOIR_ENOMEM;
    size_t mask = (size_t)nslots - 1;
    for (int i = 0; i < st->ntensors; i++) {
        size_t j = (size_t)name_hash(st->tensors[i].name) & mask;
        while (slots[j]) j = (j + 1) & mask;
        slots[j] = i + 1;
    }
    choir_free(st->slots);
    st->slots = slots;
    st->nslots = nslots;
    return CHOIR_OK;
}

/* Grows a typed array of `*cap` elements to hold at least `need`. */
static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return CHOIR_OK;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > INT32_MAX / 2) return CHOIR_ETOOBIG;
        ncap *= 2;
    }
    void *p = choir_realloc(*arr, (size_t)ncap * elem);
    if (!p) return CHOIR_ENOMEM;
    *arr = p;
    *cap = ncap;
    return CHOIR_OK;
}

/* A JSON number that is a non-negative integer a double holds exactly. */
static int json_count(const cJSON *it, uint64_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double v = it->valuedouble;
    if (!(v >= 0.0 && v <= ST_INT_MAX) || v != (double)(uint64_t)v) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int add_meta(choir_st *st, const cJSON *meta, const char *path, choir_err *err) {
    if (!cJSON_IsObject(meta))
        return choir_err_set(err, CHOIR_EFORMAT, "%s: __metadata__ is not an object", path);
    int n = cJSON_GetArraySize(meta);
    st->meta_keys = choir_calloc(CHOIR_MEM_OTHER, (size_t)n + 1, sizeof(char *));
    st->meta_vals = choir_calloc(CHOIR_MEM_OTHER, (size_t)n + 1, sizeof(char *));
    if (!st->meta_keys || !st->meta_vals) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
    const cJSON *it;
    cJSON_ArrayForEach(it, meta) {
        if (!cJSON_IsString(it) || !it->string)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: __metadata__ value of '%s' is not a string",
                                 path, it->string ? it->string : "?");
        st->meta_keys[st->nmeta] = choir_strdup(it->string);
        st->meta_vals[st->nmeta] = choir_strdup(it->valuestring);
        if (!st->meta_keys[st->nmeta] || !st->meta_vals[st->nmeta]) {
            st->nmeta++;
            return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
        }
        st->nmeta++;
    }
    return CHOIR_OK;
}

typedef struct span { uint64_t begin, end; int tensor; } span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Fills one tensor from its header entry. `data_len` is the size of the data area. */
static int parse_entry(choir_st_tensor *t, const cJSON *e, uint64_t data_len, const char *path,
                       uint64_t *begin, uint64_t *end, choir_err *err) {
    const char *name = t->name;
    if (!cJSON_IsObject(e))
        return choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s': entry is not an object", path, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo))
        return choir_err_set(err, CHOIR_EFORMAT,
                             "%s: tensor '%s': needs string dtype, array shape and array data_offsets",
                             path, name);
    if (choir_dtype_parse(jd->valuestring, &t->dtype) != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: tensor '%s': unknown dtype '%.32s'", path,
                             name, jd->valuestring);
    int nd = cJSON_GetArraySize(js);
    if (nd > CHOIR_ST_MAX_DIMS)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: tensor '%s': %d dimensions, at most %d",
                             path, name, nd, CHOIR_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < nd; d++) {
        uint64_t dim;
        if (!json_count(cJSON_GetArrayItem(js, d), &dim))
            return choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s': shape[%d] is not a size", path,
                                 name, d);
        t->shape[d] = (int64_t)dim;
        if (__builtin_mul_overflow(numel, dim, &numel)) overflow = 1;
    }
    uint64_t nbytes;
    if (overflow || numel > INT64_MAX ||
        __builtin_mul_overflow(numel, (uint64_t)choir_dtype_size(t->dtype), &nbytes))
        return choir_err_set(err, CHOIR_ETOOBIG, "%s: tensor '%s': absurd shape (size overflows)", path,
                             name);
    t->numel = (int64_t)numel;
    if (cJSON_GetArraySize(jo) != 2 || !json_count(cJSON_GetArrayItem(jo, 0), begin) ||
        !json_count(cJSON_GetArrayItem(jo, 1), end))
        return choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s': data_offsets must be [begin, end]",
                             path, name);
    if (*begin > *end || *end > data_len)
        return choir_err_set(err, CHOIR_EFORMAT,
                             "%s: tensor '%s': data_offsets [%llu, %llu] outside the data area of %llu bytes",
                             path, name, (unsigned long long)*begin, (unsigned long long)*end,
                             (unsigned long long)data_len);
    if (*end - *begin != nbytes)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "%s: tensor '%s': shape x %s size is %llu bytes but data_offsets span %llu",
                             path, name, choir_dtype_name(t->dtype), (unsigned long long)nbytes,
                             (unsigned long long)(*end - *begin));
    t->nbytes = (size_t)nbytes;
    return CHOIR_OK;
}

/* Validates file `fi` and appends its tensors. */
static int parse_file(choir_st *st, int fi, int want_meta, choir_err *err) {
    st_file *f = &st->files[fi];
    const char *path = f->path;
    cJSON *root = NULL;
    span *spans = NULL;
    int first = st->ntensors, rc = CHOIR_OK;
    if (f->len < 8) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: %zu bytes, too short for a safetensors header", path,
                           f->len);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->base[i];
    if (hlen > f->len - 8) {
        rc = choir_err_set(err, CHOIR_EFORMAT,
                           "%s: header length %llu runs past the end of the file (%zu bytes): truncated or not safetensors",
                           path, (unsigned long long)hlen, f->len);
        goto fail;
    }
    if (hlen > ST_HEADER_MAX) {
        rc = choir_err_set(err, CHOIR_ETOOBIG, "%s: header of %llu bytes, more than the %llu allowed", path,
                           (unsigned long long)hlen, (unsigned long long)ST_HEADER_MAX);
        goto fail;
    }
    const char *hdr = (const char *)f->base + 8;
    if (hlen < 2 || hdr[0] != '{') {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: header does not start with a JSON object", path);
        goto fail;
    }
    const char *stop = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &stop, 0);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = stop && stop >= hdr && stop <= hdr + hlen ? (size_t)(stop - hdr) : 0;
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: malformed JSON header near byte %zu", path, at + 8);
        goto fail;
    }
    /* Only padding may follow the object. */
    for (const char *p = stop; p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: unexpected bytes after the JSON header at byte %zu",
                               path, (size_t)(p - hdr) + 8);
            goto fail;
        }
    }
    uint64_t data_len = f->len - 8 - hlen;
    const uint8_t *data = f->base + 8 + hlen;
    int n = cJSON_GetArraySize(root);
    if ((rc = grow((void **)&st->tensors, &st->tensors_cap, first + n, sizeof *st->tensors)) < 0) {
        rc = choir_err_set(err, rc, "%s: too many tensors", path);
        goto fail;
    }
    int *fo = choir_realloc(st->file_of, (size_t)st->tensors_cap * sizeof *fo);
    spans = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *spans + 1);
    if (!fo || !spans) {
        if (fo) st->file_of = fo;
        rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    st->file_of = fo;
    int nspans = 0, seen_meta = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (!e->string) continue;
        if (strcmp(e->string, "__metadata__") == 0) {
            /* JSON allows a repeated key; which copy a reader keeps is up to
             * it, so a file that says two things is refused. */
            if (seen_meta++) {
                rc = choir_err_set(err, CHOIR_EFORMAT, "%s: __metadata__ appears twice", path);
                goto fail;
            }
            if (want_meta && (rc = add_meta(st, e, path, err)) < 0) goto fail;
            continue;
        }
        choir_st_tensor *t = &st->tensors[st->ntensors];
        memset(t, 0, sizeof *t);
        if (index_find(st, e->string) >= 0) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: tensor name '%s' appears twice", path, e->string);
            goto fail;
        }
        t->name = choir_strdup(e->string);
        if (!t->name) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        st->file_of[st->ntensors] = fi;
        st->ntensors++;
        uint64_t b = 0, en = 0;
        if ((rc = parse_entry(t, e, data_len, path, &b, &en, err)) < 0) goto fail;
        t->data = data + b;
        spans[nspans++] = (span){b, en, st->ntensors - 1};
        if ((size_t)st->ntensors * 2 > (size_t)st->nslots &&
            index_rebuild(st, st->nslots ? st->nslots * 2 : 64) < 0) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        /* The rebuild above covers the new tensor; otherwise insert it. */
        if (index_find(st, t->name) < 0) {
            size_t mask = (size_t)st->nslots - 1, j = (size_t)name_hash(t->name) & mask;
            while (st->slots[j]) j = (j + 1) & mask;
            st->slots[j] = st->ntensors;
        }
    }
    /* Empty tensors occupy no bytes, so they cannot overlap anything. */
    qsort(spans, (size_t)nspans, sizeof *spans, span_cmp);
    uint64_t reach = 0;
    int reach_t = -1;
    for (int i = 0; i < nspans; i++) {
        if (spans[i].begin == spans[i].end) continue;
        if (spans[i].begin < reach) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: tensors '%s' and '%s' overlap in the data area",
                               path, st->tensors[reach_t].name, st->tensors[spans[i].tensor].name);
            goto fail;
        }
        reach = spans[i].end;
        reach_t = spans[i].tensor;
    }
    for (int i = first; i < st->ntensors; i++) {
        choir_st_tensor *t = &st->tensors[i];
        size_t esz = choir_dtype_size(t->dtype);
        st->data_bytes += t->nbytes;
        if (t->nbytes == 0 || (uintptr_t)t->data % esz == 0) continue;
        if ((rc = grow((void **)&st->copies, &st->copies_cap, st->ncopies + 1, sizeof(void *))) < 0) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        void *copy = choir_alloc(CHOIR_MEM_WEIGHTS, t->nbytes);
        if (!copy) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory copying misaligned '%s'", path, t->name);
            goto fail;
        }
        memcpy(copy, t->data, t->nbytes);
        st->copies[st->ncopies++] = copy;
        t->data = copy;
    }
fail:
    choir_free(spans);
    cJSON_Delete(root);
    return rc;
}

static int add_file(choir_st *st, const char *path, const void *base, size_t len, int mapped,
                    choir_err *err) {
    if (grow((void **)&st->files, &st->files_cap, st->nfiles + 1, sizeof *st->files) < 0)
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
    st_file *f = &st->files[st->nfiles];
    memset(f, 0, sizeof *f);
    f->path = choir_strdup(path);
    if (!f->path) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", path);
    f->base = base;
    f->len = len;
    f->mapped = mapped;
    st->nfiles++;
    if (mapped) choir_mem_account(CHOIR_MEM_WEIGHTS, (int64_t)len);
    return CHOIR_OK;
}

static int map_file(choir_st *st, const char *path, choir_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int code = errno == ENOENT ? CHOIR_ENOTFOUND : CHOIR_EIO;
        return choir_err_set(err, code, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return choir_err_set(err, CHOIR_EIO, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    void *base = NULL;
    if (len >= 8) {
        base = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (base == MAP_FAILED) {
            int e = errno;
            close(fd);
            return choir_err_set(err, CHOIR_EIO, "%s: cannot map: %s", path, strerror(e));
        }
    }
    close(fd);
    if (!base) return choir_err_set(err, CHOIR_EFORMAT, "%s: %zu bytes, too short for a safetensors header",
                                    path, len);
    int rc = add_file(st, path, base, len, 1, err);
    if (rc < 0) {
        munmap(base, len);
        return rc;
    }
    return parse_file(st, st->nfiles - 1, st->nfiles == 1, err);
}

static choir_st *st_new(choir_err *err) {
    choir_st *st = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *st);
    if (!st) choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    return st;
}

/* Opens every shard named by an index's weight_map, in order of first mention,
 * then checks that each listed tensor is in the shard the index names. */
static int open_index(choir_st *st, const char *index_path, choir_err *err) {
    cJSON *root = choir_json_load(index_path, err);
    char *dir = NULL, *shard = NULL;
    int rc = CHOIR_OK;
    if (!root) return err ? err->code : CHOIR_EFORMAT;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: no \"weight_map\" object", index_path);
        goto fail;
    }
    dir = choir_strdup(index_path);
    if (!dir) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else dir[0] = '\0';
    size_t cap = strlen(dir) + 4096;
    shard = choir_alloc(CHOIR_MEM_OTHER, cap);
    if (!shard) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || e->valuestring[0] == '/' ||
            strstr(e->valuestring, "..") || strlen(e->valuestring) >= 4000) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s' maps to a bad shard file name",
                               index_path, e->string ? e->string : "?");
            goto fail;
        }
        snprintf(shard, cap, "%s%s", dir, e->valuestring);
        int seen = 0;
        for (int i = 0; i < st->nfiles && !seen; i++) seen = strcmp(st->files[i].path, shard) == 0;
        if (!seen && (rc = map_file(st, shard, err)) < 0) goto fail;
    }
    if (st->nfiles == 0) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: weight_map is empty", index_path);
        goto fail;
    }
    cJSON_ArrayForEach(e, map) {
        snprintf(shard, cap, "%s%s", dir, e->valuestring);
        int ti = index_find(st, e->string);
        if (ti < 0 || strcmp(st->files[st->file_of[ti]].path, shard) != 0) {
            rc = choir_err_set(err, CHOIR_ENOTFOUND, "%s: tensor '%s' is not in %s as the index says",
                               index_path, e->string, e->valuestring);
            goto fail;
        }
    }
fail:
    choir_free(shard);
    choir_free(dir);
    cJSON_Delete(root);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

choir_st *choir_st_open(const char *path, choir_err *err) {
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "choir_st_open: NULL path");
        return NULL;
    }
    choir_st *st = st_new(err);
    char *joined = NULL;
    if (!st) return NULL;
    struct stat sb;
    int rc;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t cap = strlen(path) + 64;
        joined = choir_alloc(CHOIR_MEM_OTHER, cap);
        if (!joined) {
            choir_err_set(err, CHOIR_ENOMEM, "out of memory");
            goto fail;
        }
        snprintf(joined, cap, "%s/model.safetensors", path);
        if (stat(joined, &sb) == 0) {
            rc = map_file(st, joined, err);
        } else {
            snprintf(joined, cap, "%s/model.safetensors.index.json", path);
            if (stat(joined, &sb) != 0) {
                choir_err_set(err, CHOIR_ENOTFOUND,
                              "%s: no model.safetensors or model.safetensors.index.json in this directory", path);
                goto fail;
            }
            rc = open_index(st, joined, err);
        }
    } else if (ends_with(path, ".json")) {
        rc = open_index(st, path, err);
    } else {
        rc = map_file(st, path, err);
    }
    if (rc < 0) goto fail;
    choir_free(joined);
    return st;
fail:
    choir_free(joined);
    choir_st_close(st);
    return NULL;
}

choir_st *choir_st_open_memory(const void *data, size_t len, const char *label, choir_err *err) {
    if (!data && len) {
        choir_err_set(err, CHOIR_EINVAL, "choir_st_open_memory: NULL data");
        return NULL;
    }
    static const uint8_t empty[1];
    choir_st *st = st_new(err);
    if (!st) return NULL;
    if (add_file(st, label ? label : "<memory>", data ? data : empty, len, 0, err) < 0 ||
        parse_file(st, 0, 1, err) < 0) {
        choir_st_close(st);
        return NULL;
    }
    return st;
}

void choir_st_close(choir_st *st) {
    if (!st) return;
    for (int i = 0; i < st->nfiles; i++) {
        st_file *f = &st->files[i];
        if (f->mapped) {
            munmap((void *)f->base, f->len);
            choir_mem_account(CHOIR_MEM_WEIGHTS, -(int64_t)f->len);
        }
        choir_free(f->path);
    }
    for (int i = 0; i < st->ntensors; i++) choir_free((void *)st->tensors[i].name);
    for (int i = 0; i < st->nmeta; i++) {
        choir_free(st->meta_keys[i]);
        choir_free(st->meta_vals[i]);
    }
    for (int i = 0; i < st->ncopies; i++) choir_free(st->copies[i]);
    choir_free(st->copies);
    choir_free(st->meta_keys);
    choir_free(st->meta_vals);
    choir_free(st->slots);
    choir_free(st->file_of);
    choir_free(st->tensors);
    choir_free(st->files);
    choir_free(st);
}

int choir_st_count(const choir_st *st) { return st ? st->ntensors : 0; }

const choir_st_tensor *choir_st_at(const choir_st *st, int i) {
    if (!st || i < 0 || i >= st->ntensors) return NULL;
    return &st->tensors[i];
}

const choir_st_tensor *choir_st_find(const choir_st *st, const char *name) {
    if (!st || !name) return NULL;
    int i = index_find(st, name);
    return i < 0 ? NULL : &st->tensors[i];
}

const char *choir_st_metadata(const choir_st *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_vals[i];
    return NULL;
}

size_t choir_st_data_bytes(const choir_st *st) { return st ? st->data_bytes : 0; }

int choir_st_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t at = 0;
    int n = snprintf(buf, cap, "[");
    at = n > 0 ? (size_t)n : 0;
    for (int d = 0; d < ndim && at < cap; d++) {
        n = snprintf(buf + at, cap - at, d ? ", %lld" : "%lld", (long long)shape[d]);
        if (n < 0) break;
        at += (size_t)n;
    }
    if (at < cap) snprintf(buf + at, cap - at, "]");
    return CHOIR_OK;
}

const choir_st_tensor *choir_st_expect(const choir_st *st, const char *name, choir_dtype dtype,
                                       int ndim, const int64_t *shape, choir_err *err) {
    const choir_st_tensor *t = choir_st_find(st, name);
    if (!t) {
        choir_err_set(err, CHOIR_ENOTFOUND, "tensor '%s' is missing from the checkpoint", name ? name : "?");
        return NULL;
    }
    int same = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (same) return t;
    char want[160], got[160];
    choir_st_format_shape(want, sizeof want, ndim, shape);
    choir_st_format_shape(got, sizeof got, t->ndim, t->shape);
    choir_err_set(err, CHOIR_ESHAPE, "tensor '%s': expected %s %s, found %s %s", name,
                  choir_dtype_name(dtype), want, choir_dtype_name(t->dtype), got);
    return NULL;
}
