/* Streaming read bandwidth, the ceiling of memory-bound kernels (a decoder
 * step at batch 1 reads each weight once). The buffer is larger than any
 * last-level cache, so every pass comes from DRAM; it is split over the
 * default pool the way a GEMV splits a weight matrix. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"

typedef struct bw_job {
    const uint64_t *buf;
    int64_t words, part;
    uint64_t sums[64]; /* one per pool worker; stops the reads being optimised away */
} bw_job;

static void bw_range(void *ctx, int64_t begin, int64_t end, int worker) {
    bw_job *j = ctx;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t p = begin; p < end; p++) {
        int64_t lo = p * j->part, hi = lo + j->part < j->words ? lo + j->part : j->words;
        const uint64_t *w = j->buf + lo;
        int64_t n = hi - lo, i = 0;
        /* Four independent chains keep enough loads in flight; the compiler
         * vectorises the xors. */
        for (; i + 4 <= n; i += 4) {
            s0 ^= w[i];
            s1 ^= w[i + 1];
            s2 ^= w[i + 2];
            s3 ^= w[i + 3];
        }
        for (; i < n; i++) s0 ^= w[i];
    }
    j->sums[worker & 63] ^= s0 ^ s1 ^ s2 ^ s3;
}

double choir_mem_read_gbs(size_t bytes, int passes) {
    if (bytes < (1u << 20)) bytes = 1u << 20;
    if (passes < 1) passes = 1;
    uint64_t *buf = choir_alloc(CHOIR_MEM_ACTIVATIONS, bytes);
    if (!buf) return 0.0;
    bw_job j;
    memset(&j, 0, sizeof j);
    j.buf = buf;
    j.words = (int64_t)(bytes / sizeof(uint64_t));
    for (int64_t i = 0; i < j.words; i++) buf[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    choir_pool *pool = choir_pool_default();
    /* Parts of 1 MiB handed out in order: each thread streams long runs. */
    j.part = (1 << 20) / (int64_t)sizeof(uint64_t);
    int64_t parts = (j.words + j.part - 1) / j.part;
    double best = 0.0;
    for (int p = 0; p < passes; p++) {
        uint64_t t0 = choir_now_ns();
        choir_pool_parallel_for(pool, parts, 1, bw_range, &j);
        double s = (double)(choir_now_ns() - t0) * 1e-9;
        double gbs = s > 0 ? (double)bytes / s / 1e9 : 0.0;
        if (gbs > best) best = gbs;
    }
    choir_free(buf);
    return best;
}
