/* PyTorch checkpoint reader: zip archive -> restricted unpickler -> tensors.
 *
 * torch.save writes `<prefix>/data.pkl` (the pickled object) and one entry
 * `<prefix>/data/<key>` per storage. Tensors are views (offset, size, stride)
 * of storages; each is checked to stay inside its storage before it is
 * exposed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/pth.h"
#include "io/pickle.h"
#include "io/zipread.h"

#define PTH_MAX_DEPTH 64
#define PTH_MAX_TENSORS (1 << 20)
#define PTH_NAME_MAX 1024
/* A pickle is small; one this large is not a weights file. */
#define PTH_PICKLE_MAX ((uint64_t)256 << 20)
/* Views are materialized (copied) only when non-contiguous or compressed. A
 * hostile pickle could ask for the same huge storage a million times over, so
 * copies may total at most a few times the archive itself. */
#define PTH_COPY_FACTOR 4
#define PTH_COPY_SLACK ((uint64_t)64 << 20)
/* A tree walk visits each value once; a pickle that shares containers (a dict
 * holding the same dict twice, sixty levels deep) would make it exponential. */
#define PTH_MAX_VISITS ((uint64_t)1 << 22)

struct choir_pth {
    char *label;
    const uint8_t *base;
    size_t len;
    int mapped;
    zr_archive zip;
    char prefix[PTH_NAME_MAX];   /* "<prefix>/" of data.pkl */
    choir_st_tensor *tensors;
    int ntensors, tensors_cap;
    int *by_name;                /* tensor indices sorted by name */
    void **owned;                /* materialized tensors, inflated storages */
    int nowned, owned_cap;
    uint64_t copied_bytes;
    uint8_t **inflated;          /* per zip entry: its inflated bytes, once each */
    uint64_t visits;             /* containers and leaves walked */
    unsigned flags;
};

static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return CHOIR_OK;
    int ncap = *cap ? *cap * 2 : 64;
    while (ncap < need) ncap *= 2;
    void *p = choir_realloc(*arr, (size_t)ncap * elem);
    if (!p) return CHOIR_ENOMEM;
    *arr = p;
    *cap = ncap;
    return CHOIR_OK;
}

static int keep(choir_pth *p, void *block) {
    if (grow((void **)&p->owned, &p->owned_cap, p->nowned + 1, sizeof(void *)) < 0) {
        choir_free(block);
        return CHOIR_ENOMEM;
    }
    p->owned[p->nowned++] = block;
    return CHOIR_OK;
}

/* Counts `bytes` about to be copied against the archive's copy budget. */
static int charge(choir_pth *p, uint64_t bytes) {
    uint64_t budget = (uint64_t)p->len * PTH_COPY_FACTOR + PTH_COPY_SLACK;
    if (bytes > budget || p->copied_bytes > budget - bytes) return 0;
    p->copied_bytes += bytes;
    return 1;
}

/* The bytes of a storage: in place for stored entries, else inflated once. */
static int storage_bytes(choir_pth *p, const pk_value *s, const uint8_t **out, choir_err *err) {
    char name[PTH_NAME_MAX + 64];
    snprintf(name, sizeof name, "%sdata/%s", p->prefix, s->str);
    const zr_entry *e = zr_find(&p->zip, name);
    if (!e) return choir_err_set(err, CHOIR_EFORMAT, "%s: storage '%s' is missing from the archive", p->label, s->str);
    uint64_t need;
    if (__builtin_mul_overflow((uint64_t)s->numel, (uint64_t)choir_dtype_size(s->dtype), &need) || need > e->size)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: storage '%s' claims %lld elements but holds %llu bytes",
                             p->label, s->str, (long long)s->numel, (unsigned long long)e->size);
    if (e->method == 0) {
        *out = e->data;
        return CHOIR_OK;
    }
    size_t ei = (size_t)(e - p->zip.entries);
    if (!p->inflated && !(p->inflated = choir_calloc(CHOIR_MEM_OTHER, (size_t)p->zip.count, sizeof(uint8_t *))))
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
    if (p->inflated[ei]) {
        *out = p->inflated[ei];
        return CHOIR_OK;
    }
    /* Inflating counts against the same budget as copies: a small deflated
     * entry may claim an enormous size. */
    if (!charge(p, e->size))
        return choir_err_set(err, CHOIR_ETOOBIG, "%s: storage '%s' would inflate to %llu bytes, far more than the archive",
                             p->label, s->str, (unsigned long long)e->size);
    uint8_t *buf;
    int rc = zr_extract(&p->zip, e, (uint64_t)SIZE_MAX / 2, &buf, p->label, err);
    if (rc < 0) return rc;
    if (keep(p, buf) < 0) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
    p->inflated[ei] = buf;
    *out = buf;
    return CHOIR_OK;
}

/* Turns a view into a tensor: checks bounds, points into the storage when the
 * view is contiguous and aligned, otherwise gathers it row-major. */
static int add_tensor(choir_pth *p, const pk_value *v, const char *name, choir_err *err) {
    const pk_value *s = v->storage;
    size_t esz = choir_dtype_size(s->dtype);
    uint64_t numel = 1, last = (uint64_t)v->offset;
    int overflow = 0;
    for (int d = 0; d < v->ndim; d++) overflow |= __builtin_mul_overflow(numel, (uint64_t)v->shape[d], &numel);
    if (numel) {
        for (int d = 0; d < v->ndim; d++) {
            uint64_t reach;
            overflow |= __builtin_mul_overflow((uint64_t)(v->shape[d] - 1), (uint64_t)v->stride[d], &reach);
            overflow |= __builtin_add_overflow(last, reach, &last);
        }
    }
    uint64_t nbytes;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)esz, &nbytes);
    if (overflow || numel > INT64_MAX || nbytes > SIZE_MAX / 2)
        return choir_err_set(err, CHOIR_ETOOBIG, "%s: tensor '%s': absurd size", p->label, name);
    if (numel && last >= (uint64_t)s->numel)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s' reaches element %llu of a storage of %lld",
                             p->label, name, (unsigned long long)last, (long long)s->numel);
    const uint8_t *src = NULL;
    int rc = storage_bytes(p, s, &src, err);
    if (rc < 0) return rc;
    if (grow((void **)&p->tensors, &p->tensors_cap, p->ntensors + 1, sizeof *p->tensors) < 0)
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
    choir_st_tensor *t = &p->tensors[p->ntensors];
    memset(t, 0, sizeof *t);
    t->dtype = s->dtype;
    t->ndim = v->ndim;
    memcpy(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    t->numel = (int64_t)numel;
    t->nbytes = (size_t)nbytes;
    int contiguous = 1;
    int64_t expect = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->stride[d] != expect) contiguous = 0;
        expect *= v->shape[d];
    }
    /* An empty view may carry any offset; only form the pointer for a real one. */
    const uint8_t *at = numel ? src + (size_t)v->offset * esz : NULL;
    if (numel && contiguous && (uintptr_t)at % esz == 0) {
        t->data = at;
    } else {
        if (!charge(p, nbytes))
            return choir_err_set(err, CHOIR_ETOOBIG, "%s: tensor '%s': views would copy far more than the archive holds",
                                 p->label, name);
        uint8_t *dst = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)nbytes);
        if (!dst || keep(p, dst) < 0) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
        int64_t idx[CHOIR_ST_MAX_DIMS] = {0};
        for (uint64_t k = 0; k < numel; k++) {
            int64_t off = v->offset;
            for (int d = 0; d < v->ndim; d++) off += idx[d] * v->stride[d];
            memcpy(dst + k * esz, src + (size_t)off * esz, esz);
            for (int d = v->ndim - 1; d >= 0; d--) {
                if (++idx[d] < v->shape[d]) break;
                idx[d] = 0;
            }
        }
        t->data = dst;
    }
    if (!(t->name = choir_strdup(name))) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
    p->ntensors++;
    return CHOIR_OK;
}

/* Walks dicts, lists and tuples depth first, naming tensors by their key path.
 * The depth bound also stops a pickle whose dict contains itself. */
static int walk(choir_pth *p, const pk_value *v, char *path, size_t plen, int depth, choir_err *err) {
    if (depth > PTH_MAX_DEPTH)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: containers nested deeper than %d (or a cycle)", p->label,
                             PTH_MAX_DEPTH);
    if (++p->visits > PTH_MAX_VISITS)
        return choir_err_set(err, CHOIR_ETOOBIG, "%s: the pickle shares containers too often to walk", p->label);
    if (v->kind == PK_TENSOR) {
        if (p->ntensors >= PTH_MAX_TENSORS)
            return choir_err_set(err, CHOIR_ETOOBIG, "%s: more than %d tensors", p->label, PTH_MAX_TENSORS);
        return add_tensor(p, v, path, err);
    }
    int is_dict = v->kind == PK_DICT;
    if (!is_dict && v->kind != PK_LIST && v->kind != PK_TUPLE) return CHOIR_OK; /* numbers, strings, None */
    for (int i = 0; i < v->n; i++) {
        const pk_value *child = is_dict ? v->vals[i] : v->items[i];
        char key[64];
        const char *k = key;
        if (is_dict && v->items[i]->kind == PK_STR) {
            k = v->items[i]->str;
            while ((p->flags & CHOIR_PTH_NORMALIZE) && strncmp(k, "module.", 7) == 0) k += 7;
        } else {
            snprintf(key, sizeof key, "%lld", (long long)(is_dict ? v->items[i]->i : i));
        }
        size_t klen = strlen(k);
        if (plen + 1 + klen >= PTH_NAME_MAX)
            return choir_err_set(err, CHOIR_ETOOBIG, "%s: a tensor name is longer than %d bytes", p->label,
                                 PTH_NAME_MAX);
        size_t at = plen;
        if (plen) path[at++] = '.';
        memcpy(path + at, k, klen + 1);
        int rc = walk(p, child, path, at + klen, depth + 1, err);
        path[plen] = '\0';
        if (rc < 0) return rc;
    }
    return CHOIR_OK;
}

/* With CHOIR_PTH_NORMALIZE, a training checkpoint's "state_dict" or "model"
 * dict is the model; the rest (optimizer state, epoch) is not weights. */
static const pk_value *model_root(const choir_pth *p, const pk_value *root) {
    if (!(p->flags & CHOIR_PTH_NORMALIZE) || root->kind != PK_DICT) return root;
    static const char *const wrappers[] = {"state_dict", "model"};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < root->n; i++)
            if (root->items[i]->kind == PK_STR && strcmp(root->items[i]->str, wrappers[w]) == 0 &&
                root->vals[i]->kind == PK_DICT)
                return root->vals[i];
    return root;
}

typedef struct name_ref { const char *name; int index; } name_ref;

static int name_ref_cmp(const void *a, const void *b) {
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

static int index_names(choir_pth *p, choir_err *err) {
    name_ref *refs = choir_alloc(CHOIR_MEM_OTHER, (size_t)p->ntensors * sizeof *refs + 1);
    p->by_name = choir_alloc(CHOIR_MEM_OTHER, (size_t)p->ntensors * sizeof(int) + 1);
    int rc = CHOIR_OK;
    if (!refs || !p->by_name) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
        goto done;
    }
    for (int i = 0; i < p->ntensors; i++) refs[i] = (name_ref){p->tensors[i].name, i};
    qsort(refs, (size_t)p->ntensors, sizeof *refs, name_ref_cmp);
    for (int i = 0; i < p->ntensors; i++) {
        p->by_name[i] = refs[i].index;
        if (i && strcmp(refs[i - 1].name, refs[i].name) == 0) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: two tensors are both named '%s'", p->label, refs[i].name);
            goto done;
        }
    }
done:
    choir_free(refs);
    return rc;
}

static int load(choir_pth *p, choir_err *err) {
    if (p->len >= 2 && p->base[0] == 0x80)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "%s: a legacy (pre-1.6, non-zip) torch file; re-save it with a current torch",
                             p->label);
    int rc = zr_open(&p->zip, p->base, p->len, p->label, err);
    if (rc < 0) return rc;
    /* The pickle is `<prefix>/data.pkl`, the one such entry at the top level. */
    const zr_entry *pkl = NULL;
    for (int i = 0; i < p->zip.count; i++) {
        const zr_entry *e = &p->zip.entries[i];
        if (e->name_len < 9 || memcmp(e->name + e->name_len - 9, "/data.pkl", 9) != 0) continue;
        if (memchr(e->name, '/', e->name_len - 9)) continue;
        if (pkl) return choir_err_set(err, CHOIR_EFORMAT, "%s: more than one data.pkl", p->label);
        pkl = e;
    }
    if (!pkl) return choir_err_set(err, CHOIR_EFORMAT, "%s: zip archive without <name>/data.pkl: not a torch.save file",
                                   p->label);
    if (pkl->name_len - 8 >= sizeof p->prefix)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: archive prefix too long", p->label);
    memcpy(p->prefix, pkl->name, pkl->name_len - 8);
    p->prefix[pkl->name_len - 8] = '\0';
    const uint8_t *bytes = pkl->data;
    if (pkl->method != 0) {
        uint8_t *buf;
        if ((rc = zr_extract(&p->zip, pkl, PTH_PICKLE_MAX, &buf, p->label, err)) < 0) return rc;
        if (keep(p, buf) < 0) return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
        bytes = buf;
    }
    pk_value *root;
    pk_unpickler *u = pk_load(bytes, (size_t)pkl->size, p->label, &root, err);
    if (!u) return err ? err->code : CHOIR_EFORMAT;
    char *path = choir_alloc(CHOIR_MEM_OTHER, PTH_NAME_MAX);
    if (!path) {
        pk_free(u);
        return choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory", p->label);
    }
    path[0] = '\0';
    rc = walk(p, model_root(p, root), path, 0, 0, err);
    choir_free(path);
    pk_free(u);
    if (rc < 0) return rc;
    return index_names(p, err);
}

static choir_pth *pth_new(const char *label, unsigned flags, choir_err *err) {
    choir_pth *p = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *p);
    if (p && !(p->label = choir_strdup(label))) {
        choir_free(p);
        p = NULL;
    }
    if (!p) choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    else p->flags = flags;
    return p;
}

choir_pth *choir_pth_open_memory(const void *data, size_t len, unsigned flags, const char *label,
                                 choir_err *err) {
    if (!data && len) {
        choir_err_set(err, CHOIR_EINVAL, "choir_pth_open_memory: NULL data");
        return NULL;
    }
    static const uint8_t empty[1];
    choir_pth *p = pth_new(label ? label : "<memory>", flags, err);
    if (!p) return NULL;
    p->base = data ? data : empty;
    p->len = len;
    if (load(p, err) < 0) {
        choir_pth_close(p);
        return NULL;
    }
    return p;
}

choir_pth *choir_pth_open_flags(const char *path, unsigned flags, choir_err *err) {
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "choir_pth_open: NULL path");
        return NULL;
    }
    choir_pth *p = pth_new(path, flags, err);
    if (!p) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) {
        choir_err_set(err, errno == ENOENT ? CHOIR_ENOTFOUND : CHOIR_EIO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 22) {
        choir_err_set(err, CHOIR_EFORMAT, "%s: not a regular file large enough to be a torch archive", path);
        close(fd);
        goto fail;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        choir_err_set(err, CHOIR_EIO, "%s: cannot map: %s", path, strerror(errno));
        goto fail;
    }
    p->base = m;
    p->len = (size_t)sb.st_size;
    p->mapped = 1;
    choir_mem_account(CHOIR_MEM_WEIGHTS, (int64_t)p->len);
    if (load(p, err) < 0) goto fail;
    return p;
fail:
    choir_pth_close(p);
    return NULL;
}

choir_pth *choir_pth_open(const char *path, choir_err *err) { return choir_pth_open_flags(path, 0, err); }

void choir_pth_close(choir_pth *p) {
    if (!p) return;
    if (p->mapped) {
        munmap((void *)p->base, p->len);
        choir_mem_account(CHOIR_MEM_WEIGHTS, -(int64_t)p->len);
    }
    zr_close(&p->zip);
    for (int i = 0; i < p->ntensors; i++) choir_free((void *)p->tensors[i].name);
    for (int i = 0; i < p->nowned; i++) choir_free(p->owned[i]);
    choir_free(p->owned);
    choir_free(p->inflated);
    choir_free(p->by_name);
    choir_free(p->tensors);
    choir_free(p->label);
    choir_free(p);
}

int choir_pth_count(const choir_pth *p) { return p ? p->ntensors : 0; }

const choir_st_tensor *choir_pth_at(const choir_pth *p, int i) {
    if (!p || i < 0 || i >= p->ntensors) return NULL;
    return &p->tensors[i];
}

const choir_st_tensor *choir_pth_find(const choir_pth *p, const char *name) {
    if (!p || !name || !p->by_name) return NULL;
    int lo = 0, hi = p->ntensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(p->tensors[p->by_name[mid]].name, name);
        if (c == 0) return &p->tensors[p->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}
