/* Streams: working memory, kernel scratch, the sticky error and graphs. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "tensor/backend/backend_internal.h"

#define BE_WORK_ALIGN 256

choir_stream *choir_stream_create(choir_backend *be, choir_err *err) {
    choir_stream *s = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *s);
    if (!s) {
        choir_err_set(err, CHOIR_ENOMEM, "backend: out of memory for a stream");
        return NULL;
    }
    s->be = be;
    return s;
}

static void free_own_work(choir_stream *s) {
    if (s->work == s->own) s->work = NULL;
    choir_arena_free(s->own);
    s->own = NULL;
#ifdef CHOIR_HAVE_CUDA
    if (s->be->cu && s->own_block) {
        choir_cuda_buf b = {s->own_block, s->own_bytes};
        choir_cuda_buf_free(s->be->cu, &b);
    } else
#endif
        choir_free(s->own_block);
    s->own_block = NULL;
    s->own_bytes = 0;
}

void choir_stream_free(choir_stream *s) {
    if (!s) return;
    free_own_work(s);
    choir_free(s->scratch_block);
    choir_free(s);
}

choir_backend *choir_stream_backend(const choir_stream *s) { return s->be; }

int choir_stream_reserve(choir_stream *s, size_t work_bytes, size_t scratch_bytes,
                         choir_err *err) {
    if (s->live_graphs)
        return choir_err_set(err, CHOIR_EBUSY,
                             "backend: the stream's memory cannot move while %d graph(s) of it "
                             "live",
                             s->live_graphs);
    bool own_in_use = s->work == s->own;
    if (work_bytes > s->own_bytes) {
        free_own_work(s);
        void *block = NULL;
#ifdef CHOIR_HAVE_CUDA
        if (s->be->cu) {
            choir_cuda_buf b = {0};
            if (choir_cuda_buf_alloc(s->be->cu, work_bytes, &b, err))
                return choir_err_prefix(err, "backend: working memory of %zu bytes", work_bytes);
            block = b.ptr;
        } else
#endif
            if (!(block = choir_alloc(CHOIR_MEM_ACTIVATIONS, work_bytes)))
            return choir_err_set(err, CHOIR_ENOMEM,
                                 "backend: cannot reserve %zu bytes of working memory", work_bytes);
        s->own_block = block;
        s->own_bytes = work_bytes;
        if (!(s->own = choir_arena_create_over(block, work_bytes, err))) {
            free_own_work(s);
            return CHOIR_ENOMEM;
        }
    }
    if (own_in_use || !s->work) s->work = s->own;
    if (scratch_bytes > s->scratch_reserved) {
#ifdef CHOIR_HAVE_CUDA
        if (s->be->cu) {
            if (choir_cuda_scratch_reserve(s->be->cu, scratch_bytes, err))
                return choir_err_prefix(err, "backend: kernel scratch");
            s->scratch_reserved = scratch_bytes;
            return 0;
        }
#endif
        void *block = choir_alloc(CHOIR_MEM_ACTIVATIONS, scratch_bytes);
        if (!block)
            return choir_err_set(err, CHOIR_ENOMEM,
                                 "backend: cannot reserve %zu bytes of kernel scratch",
                                 scratch_bytes);
        bool bound_own = !s->ks.base || s->ks.base == s->scratch_block;
        choir_free(s->scratch_block);
        s->scratch_block = block;
        s->scratch_reserved = scratch_bytes;
        if (bound_own) {
            s->ks.base = block;
            s->ks.bytes = scratch_bytes;
        }
    }
    return 0;
}

int choir_stream_use_arena(choir_stream *s, choir_arena *a, size_t scratch_bytes,
                           choir_err *err) {
    if (s->be->kind != CHOIR_BACKEND_CPU)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "backend %s: working memory must be the device's own, not a host "
                             "arena",
                             s->be->name);
    if (!a) {
        s->work = s->own;
        s->ks.base = s->scratch_block;
        s->ks.bytes = s->scratch_reserved;
        return 0;
    }
    if (scratch_bytes > 0) {
        void *p = choir_arena_alloc(a, scratch_bytes);
        if (!p)
            return choir_err_set(err, CHOIR_ENOMEM,
                                 "backend: the arena has no room for %zu bytes of kernel scratch "
                                 "(%zu of %zu used)",
                                 scratch_bytes, choir_arena_used(a), choir_arena_capacity(a));
        s->ks.base = p;
        s->ks.bytes = scratch_bytes;
    }
    s->work = a;
    return 0;
}

void *choir_stream_alloc(choir_stream *s, size_t bytes, const char *what) {
    size_t want = (bytes + BE_WORK_ALIGN - 1) / BE_WORK_ALIGN * BE_WORK_ALIGN;
    void *p = s->work ? choir_arena_alloc(s->work, want ? want : BE_WORK_ALIGN) : NULL;
    if (!p)
        choir_stream_fail(s, CHOIR_ENOMEM,
                          "backend: no room for %zu bytes of %s (%zu of %zu bytes of working "
                          "memory in use)",
                          bytes, what ? what : "working memory",
                          s->work ? choir_arena_used(s->work) : 0,
                          s->work ? choir_arena_capacity(s->work) : 0);
    return p;
}

size_t choir_stream_mark(const choir_stream *s) { return s->work ? choir_arena_mark(s->work) : 0; }
void choir_stream_release(choir_stream *s, size_t mark) {
    if (s->work) choir_arena_release(s->work, mark);
}
size_t choir_stream_used(const choir_stream *s) { return s->work ? choir_arena_used(s->work) : 0; }
size_t choir_stream_high_water(const choir_stream *s) {
    return s->work ? choir_arena_high_water(s->work) : 0;
}
void choir_stream_reset_peak(choir_stream *s) {
    if (s->work) choir_arena_reset_peak(s->work);
}

/* --- errors -------------------------------------------------------------------- */

int choir_stream_fail(choir_stream *s, int code, const char *fmt, ...) {
    if (s->err.code) return code;
    va_list ap;
    va_start(ap, fmt);
    s->err.code = code;
    vsnprintf(s->err.msg, sizeof s->err.msg, fmt, ap);
    va_end(ap);
    return code;
}

int be_invalid(choir_stream *s, const char *fmt, ...) {
    if (s->err.code) return s->err.code;
    va_list ap;
    va_start(ap, fmt);
    s->err.code = CHOIR_EINVAL;
    int n = snprintf(s->err.msg, sizeof s->err.msg, "backend %s: ", s->be->name);
    if (n > 0 && (size_t)n < sizeof s->err.msg)
        vsnprintf(s->err.msg + n, sizeof s->err.msg - (size_t)n, fmt, ap);
    va_end(ap);
    return CHOIR_EINVAL;
}

int be_unsupported(choir_stream *s, const char *op) {
    return choir_stream_fail(s, CHOIR_EUNSUPPORTED,
                             "backend %s: operation %s is not implemented on this backend",
                             s->be->name, op);
}

int be_done(choir_stream *s, int rc, const choir_err *e, const char *op) {
    if (!rc) return 0;
    choir_stream_fail(s, rc, "backend %s: %s: %s", s->be->name, op,
                      e && e->msg[0] ? e->msg : choir_strerror(rc));
    return rc;
}

int choir_stream_status(const choir_stream *s, choir_err *err) {
    if (s->err.code && err) *err = s->err;
    return s->err.code;
}

void choir_stream_clear(choir_stream *s) { choir_err_clear(&s->err); }

int choir_stream_sync(choir_stream *s, choir_err *err) {
#ifdef CHOIR_HAVE_CUDA
    if (s->be->cu && !s->err.code) {
        choir_err e = {0};
        int rc = choir_cuda_sync(s->be->cu, &e);
        be_done(s, rc, &e, "sync");
    }
#endif
    return choir_stream_status(s, err);
}

void choir_stream_get_stats(const choir_stream *s, choir_stream_stats *st) {
    st->ops = s->ops;
    st->scratch_bytes = (int64_t)(s->be->kind == CHOIR_BACKEND_CPU ? s->ks.bytes
                                                                    : s->scratch_reserved);
    st->scratch_need = (int64_t)s->ks.need;
    st->scratch_misses = s->ks.misses;
}

/* --- graphs ---------------------------------------------------------------------- */

struct choir_graph {
    choir_stream *s;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_graph *g;
#endif
};

int choir_stream_graph_begin(choir_stream *s, choir_err *err) {
    if (s->be->kind == CHOIR_BACKEND_CPU)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "backend cpu: streams do not record graphs");
    if (s->err.code) return choir_stream_status(s, err);
    if (s->capturing) return choir_err_set(err, CHOIR_EINVAL, "backend: already recording");
#ifdef CHOIR_HAVE_CUDA
    int rc = choir_cuda_graph_begin(s->be->cu, err);
    if (!rc) s->capturing = 1;
    return rc;
#else
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "backend: no graphs in this build");
#endif
}

choir_graph *choir_stream_graph_end(choir_stream *s, choir_err *err) {
    if (!s->capturing) {
        choir_err_set(err, CHOIR_EINVAL, "backend: not recording");
        return NULL;
    }
    s->capturing = 0;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_graph *g = choir_cuda_graph_end(s->be->cu, s->err.code ? NULL : err);
    if (s->err.code) {
        /* An operation failed while recording: the graph is incomplete. */
        choir_cuda_graph_free(g);
        if (err) *err = s->err;
        choir_stream_clear(s);
        return NULL;
    }
    if (!g) return NULL;
    choir_graph *gr = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *gr);
    if (!gr) {
        choir_cuda_graph_free(g);
        choir_err_set(err, CHOIR_ENOMEM, "backend: out of memory for a graph");
        return NULL;
    }
    gr->s = s;
    gr->g = g;
    s->live_graphs++;
    return gr;
#else
    choir_err_set(err, CHOIR_EUNSUPPORTED, "backend: no graphs in this build");
    return NULL;
#endif
}

int choir_stream_graph_launch(choir_stream *s, choir_graph *g) {
    if (!choir_stream_ok(s)) return s->err.code;
#ifdef CHOIR_HAVE_CUDA
    BE_CUDA(s, "graph launch", choir_cuda_graph_launch(s->be->cu, g->g, BE_ERR));
#else
    (void)g;
    return be_unsupported(s, "graph launch");
#endif
}

void choir_graph_free(choir_graph *g) {
    if (!g) return;
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_graph_free(g->g);
#endif
    g->s->live_graphs--;
    choir_free(g);
}
