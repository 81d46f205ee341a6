/* choir/pool.h: a thread pool with parallel-for, and the monotonic clock.
 *
 * Kernels split their work over the default pool (choir_pool_default()), whose
 * size comes from choir_pool_set_default_threads(), else the CHOIR_THREADS
 * environment variable, else the number of online CPUs. A parallel_for issued
 * while the pool is busy (from a worker, or from a second thread) runs inline on
 * the calling thread, so nesting and concurrent callers are safe. */
#ifndef CHOIR_POOL_H
#define CHOIR_POOL_H

#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_pool choir_pool;

/* Runs items [begin, end) of a parallel loop; `worker` is 0..threads-1. */
typedef void (*choir_range_fn)(void *ctx, int64_t begin, int64_t end, int worker);

/* A pool of `threads` workers in total, the caller counted as one (so 1 makes
 * no extra threads). NULL (and err) on failure. */
choir_pool *choir_pool_create(int threads, choir_err *err);
/* Joins the workers. NULL is a no-op. */
void choir_pool_free(choir_pool *pool);
int choir_pool_threads(const choir_pool *pool);

/* Calls fn over [0, n) in ranges of at least `grain` items, spread over the
 * pool, and returns when all are done. pool NULL runs inline. */
void choir_pool_parallel_for(choir_pool *pool, int64_t n, int64_t grain, choir_range_fn fn, void *ctx);

/* The process-wide compute pool, created on first use. Never NULL (falls back to
 * inline execution if threads cannot be started). */
choir_pool *choir_pool_default(void);
/* Sets the default pool's size; takes effect if called before its first use,
 * otherwise the pool is rebuilt (call only while no kernel is running). */
void choir_pool_set_default_threads(int threads);

/* A function run on a thread of its own while the caller goes on (host work
 * to overlap with a device's, such as the next batch's features). Returns NULL
 * after running fn inline when no thread can be started; choir_async_join
 * waits for fn to return and frees the task (NULL is a no-op). */
typedef struct choir_async choir_async;
choir_async *choir_async_start(void (*fn)(void *ctx), void *ctx);
void choir_async_join(choir_async *task);

/* Monotonic time in nanoseconds / seconds, from an arbitrary origin. */
uint64_t choir_now_ns(void);
double choir_now_s(void);

#ifdef __cplusplus
}
#endif
#endif
