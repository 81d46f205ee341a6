/* Thread pool with parallel-for, and the monotonic clock.
 *
 * One job runs at a time. The submitting thread takes `submit_lock` with a
 * trylock; if another job is running (or the caller is itself a worker), the
 * loop runs inline instead of waiting, which keeps nested and concurrent use
 * deadlock-free. Work is handed out in chunks through an atomic counter.
 *
 * Small jobs (a decoder step's GEMVs take tens of microseconds, and a step
 * is some hundred of them) must not pay for a system call or a lock per job.
 * A job is published by bumping `generation` (release); a worker that
 * finished the last job watches it (POOL_SPIN_NS) before it sleeps on the
 * condition variable, and the caller signals only when a worker sleeps. A
 * worker joins a job by one compare-and-swap on `state` (the job's
 * generation, a closed bit and the count of workers inside), and leaves it
 * by an atomic decrement. The caller, once the chunks are all taken, closes
 * the job in the same word and spins until the workers that joined have
 * left: a worker that wakes late (or is descheduled by other processes on a
 * busy machine) finds the job closed, or another generation, and is never
 * waited for. The generation in `state` keeps a late compare-and-swap from
 * joining the next job by mistake. */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
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

/* state: generation (low 32 bits of it) << 32 | POOL_CLOSED | workers inside. */
#define POOL_CLOSED (1ull << 31)
#define POOL_COUNT_MASK (POOL_CLOSED - 1)

struct choir_pool {
    int threads;
    pthread_t *workers;          /* threads - 1 of them */
    pthread_mutex_t submit_lock; /* held by the thread whose job is running */
    pthread_mutex_t lock;        /* with `wake`: for sleeping workers only */
    pthread_cond_t wake;
    atomic_ullong generation;    /* bumped per job; workers wait for a change */
    atomic_ullong state;
    atomic_int sleepers;         /* workers in (or entering) pthread_cond_wait */
    atomic_int stopping;
    /* The current job, written before its generation is published. */
    choir_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_llong next;
};

static _Thread_local int t_in_worker = 0;

/* How long a worker watches for the next job before it sleeps. */
#define POOL_SPIN_NS 100000
/* How long the caller spins for joined workers before it also yields. */
#define POOL_WAIT_SPINS 4096

/* Spins until the generation differs from `seen` or POOL_SPIN_NS pass; the
 * generation then seen. */
static uint64_t spin_for_job(choir_pool *p, uint64_t seen) {
    uint64_t t0 = choir_now_ns();
    for (int i = 0;; i++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stopping, memory_order_relaxed)) return g;
        POOL_PAUSE();
        if ((i & 255) == 255 && choir_now_ns() - t0 > POOL_SPIN_NS) return g;
    }
}

static void run_chunks(choir_pool *p, int worker) {
    for (;;) {
        int64_t begin = atomic_fetch_add_explicit(&p->next, p->chunk, memory_order_relaxed);
        if (begin >= p->n) break;
        int64_t end = begin + p->chunk < p->n ? begin + p->chunk : p->n;
        p->fn(p->ctx, begin, end, worker);
    }
}

/* Joins job `gen` unless it is closed or already another; true if joined. */
static bool join_job(choir_pool *p, uint64_t gen) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((s >> 32) != (gen & 0xffffffffull) || (s & POOL_CLOSED)) return false;
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
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
    for (;;) {
        uint64_t g = spin_for_job(p, seen);
        if (g == seen && !atomic_load(&p->stopping)) {
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (!atomic_load(&p->stopping) && (g = atomic_load(&p->generation)) == seen)
                pthread_cond_wait(&p->wake, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stopping)) break;
        seen = g;
        if (!join_job(p, g)) continue; /* woke after the caller finished it alone */
        run_chunks(p, wa.index);
        atomic_fetch_sub_explicit(&p->state, 1, memory_order_release);
    }
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->state, POOL_CLOSED);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stopping, 0);
    atomic_init(&p->next, 0);
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
    atomic_store(&p->stopping, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->threads - 1; i++) pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->submit_lock);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
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
    /* No worker is inside the last job (the caller waited for them) and none
     * can join it (closed), so the job's fields are the caller's to write. */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    uint64_t gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->state, (gen & 0xffffffffull) << 32, memory_order_relaxed);
    atomic_store(&p->generation, gen); /* seq_cst: ordered before the sleepers read below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }

    t_in_worker = 1; /* nested loops from the caller's own chunks run inline */
    run_chunks(p, 0);
    t_in_worker = 0;

    /* Close the job; then wait only for the workers that joined it. */
    uint64_t s = atomic_fetch_or_explicit(&p->state, POOL_CLOSED, memory_order_acq_rel);
    for (int i = 0; (s & POOL_COUNT_MASK) != 0; i++) {
        if (i < POOL_WAIT_SPINS)
            POOL_PAUSE();
        else
            sched_yield();
        s = atomic_load_explicit(&p->state, memory_order_acquire);
    }
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

struct choir_async {
    pthread_t thread;
    void (*fn)(void *ctx);
    void *ctx;
};

static void *task_main(void *arg) {
    choir_async *t = arg;
    t->fn(t->ctx);
    return NULL;
}

choir_async *choir_async_start(void (*fn)(void *ctx), void *ctx) {
    choir_async *t = choir_alloc(CHOIR_MEM_OTHER, sizeof *t);
    if (t) {
        *t = (choir_async){.fn = fn, .ctx = ctx};
        if (pthread_create(&t->thread, NULL, task_main, t) == 0) return t;
        choir_free(t);
    }
    fn(ctx);
    return NULL;
}

void choir_async_join(choir_async *task) {
    if (!task) return;
    pthread_join(task->thread, NULL);
    choir_free(task);
}

uint64_t choir_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double choir_now_s(void) { return (double)choir_now_ns() * 1e-9; }
