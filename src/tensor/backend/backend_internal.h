/* Internals of choir/backend.h shared by the files of src/tensor/backend/:
 * the backend and stream structs and the helpers every operation uses.
 *
 * An operation file follows one pattern:
 *
 *     int choir_op_foo(choir_stream *s, ...) {
 *         if (!choir_stream_ok(s)) return s->err.code;   // sticky error: do nothing
 *         if (bad shape) return be_invalid(s, "foo: ...");
 *         if (be_host(s)) { ...kernels.h calls, inside be_kernel_begin/end...; return 0; }
 *     #ifdef CHOIR_HAVE_CUDA
 *         BE_CUDA(s, "foo", choir_cuda_foo(s->be->cu, ..., BE_ERR));
 *     #endif
 *         return be_unsupported(s, "foo");
 *     }
 */
#ifndef CHOIR_BACKEND_INTERNAL_H
#define CHOIR_BACKEND_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "choir/backend.h"
#include "choir/kernels.h"
#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda.h"
#endif

struct choir_backend {
    choir_backend_kind kind;
    char name[24];
    struct choir_cuda *cu; /* CUDA only */
    bool owns_cu;          /* false for choir_backend_cuda_over */
    bool bf16;             /* weights: f32 matrices stored as bf16 */
    pthread_mutex_t lock;
};

struct choir_stream {
    choir_backend *be;
    /* Working memory: `work` is the arena allocations come from, either
     * `own` (over own_block) or an arena the caller gave. */
    choir_arena *work, *own;
    void *own_block; /* host (choir_alloc) or device memory */
    size_t own_bytes;
    /* Kernel scratch: CPU kernels get `ks` bound around each call; on CUDA
     * the context's scratch is reserved instead. */
    choir_kernel_scratch ks;
    void *scratch_block; /* own scratch memory (CPU), NULL when carved from an arena */
    size_t scratch_reserved;
    choir_err err; /* the sticky error */
    int64_t ops;
    int capturing;
    int live_graphs;
};

/* False once the stream has an error (the operation must do nothing and
 * return s->err.code); counts the operation otherwise. */
static inline bool choir_stream_ok(choir_stream *s) {
    if (s->err.code) return false;
    s->ops++;
    return true;
}

static inline bool be_host(const choir_stream *s) { return s->be->kind == CHOIR_BACKEND_CPU; }

/* Record an error on the stream (the first wins) and return its code. */
int be_invalid(choir_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int be_unsupported(choir_stream *s, const char *op);
/* For a backend call that filled `e`: records it prefixed with the
 * operation's name when rc != 0; returns rc. */
int be_done(choir_stream *s, int rc, const choir_err *e, const char *op);

/* Kernel scratch around CPU kernel calls. */
static inline choir_kernel_scratch *be_kernel_begin(choir_stream *s) {
    return choir_kernels_bind_scratch(&s->ks);
}
static inline void be_kernel_end(choir_kernel_scratch *prev) { choir_kernels_bind_scratch(prev); }

#ifdef CHOIR_HAVE_CUDA
/* Runs a choir_cuda_* call that takes BE_ERR as its error argument and
 * returns from the operation with its status recorded on the stream. */
#define BE_CUDA(s, what, call)                                                                   \
    do {                                                                                         \
        choir_err be_err_ = {0};                                                                 \
        int be_rc_ = (call);                                                                     \
        return be_done((s), be_rc_, &be_err_, (what));                                           \
    } while (0)
#define BE_ERR (&be_err_)
/* A device weight as the CUDA calls take it (views, nothing owned). */
choir_cuda_weight be_cuda_weight(const choir_weight *w);
/* A buffer view over backend memory. */
static inline choir_cuda_buf be_buf(const void *p, size_t bytes) {
    choir_cuda_buf b = {(void *)p, bytes};
    return b;
}
#endif

#endif
