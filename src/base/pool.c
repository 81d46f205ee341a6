/* Thread pool with parallel-for, and the monotonic clock.
 *
 * One job runs at a time. The submitting thread takes `submit_lock` with a
 * trylock; if another job is running (or the caller is itself a worker), the
 * loop runs inline instead of waiting, which keeps nested and concurrent use
 * deadlock-free. Work is handed out in chunks through an atomic counter.
 *
 * Small jobs (a decoder step's GEMVs take tens of microseconds) must not pay
 * for a sleeping worker: a worker that finishes a job watches for the next
 * one for a short while (POOL_SPIN_NS) before it sleeps, and the caller, once
 * the chunks are all taken, closes the job, so a worker that wakes late (or
 * is descheduled by other processes on a busy machine) finds the job closed
 * and is never waited for. The caller only waits for workers that joined. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#else
#define POOL_PAUSE() ((void)0)
#endif

#include "choir/alloc.h"
#include "choir/pool.h"

struct choir_pool {
    int threads;
    pthread_t *workers;          /* threads - 1 of them */
    pthread_mutex_t submit_lock; /* held by the thread whose job is running */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    atomic_ullong generation;    /* bumped per job; workers wait for a change */
    int stopping;
    int active;                  /* workers that joined the current job and are still in it */
    int closed;                  /* the current job takes no more workers */
    /* The current job. */
    choir_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_llong next;
};

static _Thread_local int t_in_worker = 0;

/* How long a worker watches for the next job before it sleeps. */
#define POOL_SPIN_NS 50000

/* Spins until the generation differs from `seen` or POOL_SPIN_NS pass. */
static void spin_for_job(choir_pool *p, uint64_t seen) {
    uint64_t t0 = choir_now_ns();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen) return;
        POOL_PAUSE();
        if ((i & 255) == 255 && choir_now_ns() - t0 > POOL_SPIN_NS) return;
    }
}

static void run_chunks(choir_pool *p, int worker) {
    for (;;) {
        int64_t begin = atomic_fetch_add(&p->next, p->chunk);
        if (begin >= p->n) break;
        int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
        p->fn(p->ctx, begin, end, worker);
    }
}

typedef struct worker_arg {
    choir_pool *pool;
    int index;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    choir_pool *p = wa.pool;
    t_in_worker = 1;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && atomic_load(&p->generation) == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping) break;
        seen = atomic_load(&p->generation);
        if (p->closed) continue; /* woke after the caller finished it alone */
        p->active++;
        pthread_mutex_unlock(&p->lock);
        run_chunks(p, wa.index);
        pthread_mutex_lock(&p->lock);
        if (--p->active == 0) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->lock);
        spin_for_job(p, seen);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

choir_pool *choir_pool_create(int threads, choir_err *err) {
    if (threads < 1) threads = 1;
    choir_pool *p = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *p);
    if (!p) goto fail;
    p->threads = 1;
    pthread_mutex_init(&p->submit_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (threads > 1) {
        p->workers = choir_calloc(CHOIR_MEM_OTHER, (size_t)threads - 1, sizeof(pthread_t));
        if (!p->workers) goto fail;
        for (int i = 1; i < threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) break;
            wa->pool = p;
            wa->index = i;
            if (pthread_create(&p->workers[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                break;
            }
            p->threads++;
        }
    }
    return p;
fail:
    if (p) choir_free(p->workers);
    choir_free(p);
    choir_err_set(err, CHOIR_ENOMEM, "thread pool: out of memory");
    return NULL;
}

void choir_pool_free(choir_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->threads - 1; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->submit_lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    choir_free(p->workers);
    choir_free(p);
}

int choir_pool_threads(const choir_pool *p) { return p ? p->threads : 1; }

void choir_pool_parallel_for(choir_pool *p, int64_t n, int64_t grain, choir_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->threads == 1 || n <= grain || t_in_worker ||
        pthread_mutex_trylock(&p->submit_lock) != 0) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* About four chunks per thread balances uneven rows without much overhead. */
    int64_t chunk = (n + (int64_t)p->threads * 4 - 1) / ((int64_t)p->threads * 4);
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->active = 0;
    p->closed = 0;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    t_in_worker = 1; /* nested loops from the caller's own chunks run inline */
    run_chunks(p, 0);
    t_in_worker = 0;

    pthread_mutex_lock(&p->lock);
    p->closed = 1;
    while (p->active > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->submit_lock);
}

/* The default pool is process-wide state, like the kernel dispatch table. */
static pthread_mutex_t g_default_lock = PTHREAD_MUTEX_INITIALIZER;
static choir_pool *_Atomic g_default_pool = NULL;
static int g_default_threads = 0;

static int default_thread_count(void) {
    if (g_default_threads > 0) return g_default_threads;
    const char *env = getenv("CHOIR_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

choir_pool *choir_pool_default(void) {
    choir_pool *p = atomic_load(&g_default_pool);
    if (p) return p;
    pthread_mutex_lock(&g_default_lock);
    p = atomic_load(&g_default_pool);
    if (!p) {
        p = choir_pool_create(default_thread_count(), NULL);
        atomic_store(&g_default_pool, p);
    }
    pthread_mutex_unlock(&g_default_lock);
    return p;
}

void choir_pool_set_default_threads(int threads) {
    pthread_mutex_lock(&g_default_lock);
    g_default_threads = threads;
    choir_pool *old = atomic_exchange(&g_default_pool, NULL);
    pthread_mutex_unlock(&g_default_lock);
    choir_pool_free(old);
}

uint64_t choir_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double choir_now_s(void) { return (double)choir_now_ns() * 1e-9; }
