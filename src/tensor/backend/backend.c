/* Backends (the CPU, a CUDA device) and the weights a model keeps on one. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "tensor/backend/backend_internal.h"

static choir_backend *backend_new(choir_backend_kind kind, choir_err *err) {
    choir_backend *be = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *be);
    if (!be) {
        choir_err_set(err, CHOIR_ENOMEM, "backend: out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&be->lock, NULL)) {
        choir_free(be);
        choir_err_set(err, CHOIR_EINTERNAL, "backend: cannot create its lock");
        return NULL;
    }
    be->kind = kind;
    return be;
}

choir_backend *choir_backend_cpu(choir_err *err) {
    choir_backend *be = backend_new(CHOIR_BACKEND_CPU, err);
    if (be) snprintf(be->name, sizeof be->name, "cpu");
    return be;
}

choir_backend *choir_backend_cuda(const choir_backend_cuda_opts *o, choir_err *err) {
    choir_backend_cuda_opts def = {0};
    if (!o) o = &def;
#ifdef CHOIR_HAVE_CUDA
    choir_backend *be = backend_new(CHOIR_BACKEND_CUDA, err);
    if (!be) return NULL;
    snprintf(be->name, sizeof be->name, "cuda:%d", o->device);
    be->bf16 = o->bf16;
    be->owns_cu = true;
    if (!(be->cu = choir_cuda_init(o->device, err)) ||
        (o->tf32 && choir_cuda_set_tf32(be->cu, true, err))) {
        choir_backend_free(be);
        return NULL;
    }
    return be;
#else
    choir_err_set(err, CHOIR_EUNSUPPORTED,
                  "backend: this build has no CUDA backend (configure with -DCHOIR_CUDA=ON); "
                  "device %d not opened",
                  o->device);
    return NULL;
#endif
}

choir_backend *choir_backend_cuda_over(struct choir_cuda *cu, bool bf16, choir_err *err) {
#ifdef CHOIR_HAVE_CUDA
    if (!cu) {
        choir_err_set(err, CHOIR_EINVAL, "backend: no CUDA context");
        return NULL;
    }
    choir_backend *be = backend_new(CHOIR_BACKEND_CUDA, err);
    if (!be) return NULL;
    snprintf(be->name, sizeof be->name, "cuda:%d", choir_cuda_get_props(cu)->device);
    be->bf16 = bf16;
    be->cu = cu;
    return be;
#else
    (void)cu, (void)bf16;
    choir_err_set(err, CHOIR_EUNSUPPORTED,
                  "backend: this build has no CUDA backend (configure with -DCHOIR_CUDA=ON)");
    return NULL;
#endif
}

int choir_backend_device_count(void) {
#ifdef CHOIR_HAVE_CUDA
    return choir_cuda_device_count();
#else
    return CHOIR_EUNSUPPORTED;
#endif
}

int choir_backend_device_query(int index, choir_backend_device *out, choir_err *err) {
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_props p;
    int rc = choir_cuda_device_props(index, &p, err);
    if (rc < 0) return rc;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_bytes = p.total_bytes;
    return 0;
#else
    (void)out;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "GPU %d: choir was built without CUDA", index);
#endif
}

void choir_backend_free(choir_backend *be) {
    if (!be) return;
#ifdef CHOIR_HAVE_CUDA
    if (be->cu && be->owns_cu) choir_cuda_free(be->cu);
#endif
    pthread_mutex_destroy(&be->lock);
    choir_free(be);
}

choir_backend_kind choir_backend_get_kind(const choir_backend *be) { return be->kind; }
bool choir_backend_is_host(const choir_backend *be) { return be->kind == CHOIR_BACKEND_CPU; }
const char *choir_backend_name(const choir_backend *be) { return be->name; }
struct choir_cuda *choir_backend_cuda_context(const choir_backend *be) { return be->cu; }
bool choir_backend_has_graphs(const choir_backend *be) { return be->kind == CHOIR_BACKEND_CUDA; }

int64_t choir_backend_mem_current(const choir_backend *be) {
#ifdef CHOIR_HAVE_CUDA
    if (be->cu) return choir_cuda_mem_current(be->cu);
#endif
    (void)be;
    return 0;
}

int64_t choir_backend_mem_peak(const choir_backend *be) {
#ifdef CHOIR_HAVE_CUDA
    if (be->cu) return choir_cuda_mem_peak(be->cu);
#endif
    (void)be;
    return 0;
}

void choir_backend_mem_reset_peak(choir_backend *be) {
#ifdef CHOIR_HAVE_CUDA
    if (be->cu) choir_cuda_mem_reset_peak(be->cu);
#endif
    (void)be;
}

void choir_backend_lock(choir_backend *be) {
    if (be->kind != CHOIR_BACKEND_CPU) pthread_mutex_lock(&be->lock);
}

void choir_backend_unlock(choir_backend *be) {
    if (be->kind != CHOIR_BACKEND_CPU) pthread_mutex_unlock(&be->lock);
}

void *choir_backend_host_alloc(choir_backend *be, size_t bytes) {
#ifdef CHOIR_HAVE_CUDA
    if (be->cu) return choir_cuda_host_alloc(be->cu, bytes, NULL);
#endif
    (void)be;
    return choir_alloc(CHOIR_MEM_ACTIVATIONS, bytes);
}

void choir_backend_host_free(choir_backend *be, void *p) {
#ifdef CHOIR_HAVE_CUDA
    if (be->cu) {
        choir_cuda_host_free(be->cu, p);
        return;
    }
#endif
    (void)be;
    choir_free(p);
}

/* --- weights --------------------------------------------------------------- */

struct choir_backend_weights {
    choir_backend *be;
    choir_err err;
    int64_t bytes;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf *bufs; /* everything uploaded, freed together */
    int n_bufs, cap_bufs;
#endif
};

choir_backend_weights *choir_backend_weights_create(choir_backend *be, choir_err *err) {
    choir_backend_weights *ws = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *ws);
    if (!ws) {
        choir_err_set(err, CHOIR_ENOMEM, "backend: out of memory for a weight store");
        return NULL;
    }
    ws->be = be;
    return ws;
}

void choir_backend_weights_free(choir_backend_weights *ws) {
    if (!ws) return;
#ifdef CHOIR_HAVE_CUDA
    for (int i = 0; i < ws->n_bufs; i++) choir_cuda_buf_free(ws->be->cu, &ws->bufs[i]);
    choir_free(ws->bufs);
#endif
    choir_free(ws);
}

int choir_backend_weights_status(const choir_backend_weights *ws, choir_err *err) {
    if (ws->err.code && err) *err = ws->err;
    return ws->err.code;
}

int64_t choir_backend_weights_bytes(const choir_backend_weights *ws) { return ws->bytes; }

#ifdef CHOIR_HAVE_CUDA
static int keep_buf(choir_backend_weights *ws, choir_cuda_buf *b) {
    if (!b->ptr) return 0;
    if (ws->n_bufs == ws->cap_bufs) {
        int cap = ws->cap_bufs ? 2 * ws->cap_bufs : 64;
        choir_cuda_buf *nb = choir_realloc(ws->bufs, (size_t)cap * sizeof *nb);
        if (!nb) {
            choir_cuda_buf_free(ws->be->cu, b);
            return choir_err_set(&ws->err, CHOIR_ENOMEM, "backend: out of host memory");
        }
        ws->bufs = nb;
        ws->cap_bufs = cap;
    }
    ws->bytes += (int64_t)b->bytes;
    ws->bufs[ws->n_bufs++] = *b;
    return 0;
}

choir_cuda_weight be_cuda_weight(const choir_weight *w) {
    choir_cuda_weight c;
    memset(&c, 0, sizeof c);
    c.kind = w->kind;
    c.rows = w->rows;
    c.cols = w->cols;
    c.sb_dtype = w->sb_dtype;
    c.bits = w->bits;
    c.group_size = w->group_size;
    c.data.ptr = (void *)w->data;
    c.data.bytes = choir_weight_bytes(w);
    c.scales.ptr = (void *)w->scales;
    c.biases.ptr = (void *)w->biases;
    return c;
}
#endif

static int weight_to(choir_backend_weights *ws, const choir_weight *host, choir_weight *out,
                     bool exact) {
    if (ws->err.code) {
        memset(out, 0, sizeof *out);
        return ws->err.code;
    }
    if (ws->be->kind == CHOIR_BACKEND_CPU) {
        *out = *host;
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_weight cw;
    int rc = ws->be->bf16 && !exact && host->kind == CHOIR_WEIGHT_F32
                 ? choir_cuda_weight_upload_as(ws->be->cu, host, CHOIR_WEIGHT_BF16, &cw, &ws->err)
                 : choir_cuda_weight_upload(ws->be->cu, host, &cw, &ws->err);
    if (rc) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    *out = (choir_weight){.kind = cw.kind,
                          .rows = cw.rows,
                          .cols = cw.cols,
                          .data = cw.data.ptr,
                          .scales = cw.scales.ptr,
                          .biases = cw.biases.ptr,
                          .sb_dtype = cw.sb_dtype,
                          .bits = cw.bits,
                          .group_size = cw.group_size};
    if ((rc = keep_buf(ws, &cw.data)) || (rc = keep_buf(ws, &cw.scales)) ||
        (rc = keep_buf(ws, &cw.biases)))
        return rc;
    return 0;
#else
    (void)exact;
    return choir_err_set(&ws->err, CHOIR_EUNSUPPORTED, "backend %s: no weights", ws->be->name);
#endif
}

int choir_backend_weight(choir_backend_weights *ws, const choir_weight *host, choir_weight *out) {
    return weight_to(ws, host, out, false);
}

int choir_backend_weight_exact(choir_backend_weights *ws, const choir_weight *host,
                               choir_weight *out) {
    return weight_to(ws, host, out, true);
}

#ifdef CHOIR_HAVE_CUDA
/* The n weights in one device buffer, each piece's bf16 values at the sum of
 * the bytes before it; 1 when they do not qualify (left to weight_to). */
static int group_to(choir_backend_weights *ws, int n, const choir_weight *const *host, choir_weight *const *out) {
    size_t total = 0, max_n = 0;
    for (int i = 0; i < n; i++) {
        const choir_weight *h = host[i];
        bool bf16 = h->kind == CHOIR_WEIGHT_BF16 || (h->kind == CHOIR_WEIGHT_F32 && ws->be->bf16);
        size_t bytes = (size_t)(h->rows * h->cols) * 2;
        if (!bf16 || h->rows <= 0 || h->cols != host[0]->cols || !h->data || bytes % 256) return 1;
        total += bytes;
        if ((size_t)(h->rows * h->cols) > max_n) max_n = (size_t)(h->rows * h->cols);
    }
    choir_cuda_buf b = {0};
    uint16_t *conv = NULL;
    if (choir_cuda_buf_alloc(ws->be->cu, total, &b, &ws->err)) return ws->err.code;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const choir_weight *h = host[i];
        int64_t cnt = h->rows * h->cols;
        const void *src = h->data;
        if (h->kind == CHOIR_WEIGHT_F32) {
            if (!conv && !(conv = choir_alloc(CHOIR_MEM_OTHER, max_n * 2))) {
                choir_cuda_buf_free(ws->be->cu, &b);
                return choir_err_set(&ws->err, CHOIR_ENOMEM, "backend: out of host memory");
            }
            choir_f32_to_bf16_n(h->data, conv, cnt);
            src = conv;
        }
        if (choir_cuda_upload(ws->be->cu, &b, off, src, (size_t)cnt * 2, &ws->err)) {
            choir_free(conv);
            choir_cuda_buf_free(ws->be->cu, &b);
            return ws->err.code;
        }
        *out[i] = (choir_weight){.kind = CHOIR_WEIGHT_BF16, .rows = h->rows, .cols = h->cols,
                                 .data = (char *)b.ptr + off};
        off += (size_t)cnt * 2;
    }
    choir_free(conv);
    return keep_buf(ws, &b);
}
#endif

int choir_backend_weight_group(choir_backend_weights *ws, int n, const choir_weight *const *host,
                               choir_weight *const *out) {
#ifdef CHOIR_HAVE_CUDA
    if (!ws->err.code && ws->be->kind != CHOIR_BACKEND_CPU && n > 0) {
        int rc = group_to(ws, n, host, out);
        if (rc != 1) return rc;
    }
#endif
    for (int i = 0; i < n; i++) weight_to(ws, host[i], out[i], false);
    return ws->err.code;
}

const float *choir_backend_vec(choir_backend_weights *ws, const float *host, int64_t n) {
    if (!host || ws->err.code) return NULL;
    if (ws->be->kind == CHOIR_BACKEND_CPU) return host;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_buf b = {0};
    size_t bytes = (size_t)(n > 0 ? n : 0) * sizeof(float);
    if (choir_cuda_buf_alloc(ws->be->cu, bytes, &b, &ws->err) ||
        choir_cuda_upload(ws->be->cu, &b, 0, host, bytes, &ws->err)) {
        choir_cuda_buf_free(ws->be->cu, &b);
        return NULL;
    }
    if (keep_buf(ws, &b)) return NULL;
    return b.ptr;
#else
    (void)n;
    choir_err_set(&ws->err, CHOIR_EUNSUPPORTED, "backend %s: no weights", ws->be->name);
    return NULL;
#endif
}
