/* Multi-head scaled dot-product attention for one sequence.
 *
 * The fast path splits (head, block of query rows) over the pool: scores for
 * the block are one sgemm into per-worker scratch, then mask, causal limit,
 * softmax and one sgemm with V. The reference path, taken when that scratch
 * cannot be allocated, walks each query row once with an online softmax and
 * needs no memory at all; tests reach it by injecting the allocation failure. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/error.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "tensor/cpu/cpu_kernels.h"

#define ATTN_QUERY_BLOCK 128

typedef struct attn_job {
    const choir_cpu_ops *ops;
    const float *q, *k, *v, *mask;
    const uint16_t *k16, *v16; /* 16-bit keys and values (a step over a 16-bit cache), else NULL */
    bool bf16;                 /* k16, v16 are bf16 (else f16) */
    int64_t ldq, ldk, ldv, ldo, Tq, Tk, Dh;
    int n_head;
    float scale;
    bool causal;
    float *out;
    float *scratch; /* scratch_rows * Tk floats per worker */
    int64_t scratch_rows;
} attn_job;

/* Keys [0, visible) that query row i may see. */
static int64_t visible_keys(const attn_job *j, int64_t i) {
    if (!j->causal) return j->Tk;
    int64_t n = i + (j->Tk - j->Tq) + 1;
    return n < 0 ? 0 : (n > j->Tk ? j->Tk : n);
}

/* One query row of one head; out_row doubles as the running accumulator. */
static void attend_row(const attn_job *j, int64_t head, int64_t i) {
    const float *qr = j->q + i * j->ldq + head * j->Dh;
    float *acc = j->out + i * j->ldo + head * j->Dh;
    memset(acc, 0, (size_t)j->Dh * sizeof(float));
    float run_max = -INFINITY, run_sum = 0.0f;
    int64_t nk = visible_keys(j, i);
    for (int64_t key = 0; key < nk; key++) {
        float s = j->ops->dot(qr, j->k + key * j->ldk + head * j->Dh, j->Dh) * j->scale;
        if (j->mask) s += j->mask[i * j->Tk + key];
        if (s == -INFINITY) continue;
        if (s > run_max) {
            /* A new maximum: rescale what was summed so far to the new reference. */
            float r = expf(run_max - s);
            j->ops->scale(acc, r, j->Dh);
            run_sum *= r;
            run_max = s;
        }
        float p = expf(s - run_max);
        run_sum += p;
        j->ops->axpy(p, j->v + key * j->ldv + head * j->Dh, acc, j->Dh);
    }
    if (run_sum > 0.0f) j->ops->scale(acc, 1.0f / run_sum, j->Dh);
}

static void attn_rows_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const attn_job *j = ctx;
    for (int64_t item = begin; item < end; item++)
        attend_row(j, item % j->n_head, item / j->n_head);
}

/* Keys a decode-path row keeps its scores for on the stack (16 KiB). */
#define ATTN_STEP_MAX_KEYS 4096

/* One query row of one head for a decoder step: all scores at once (four
 * keys per pass over q), one vector softmax, one weighted sum of V with the
 * output in registers. No memory beyond the stack. */
static void attend_row_step(const attn_job *j, int64_t head, int64_t i) {
    float scores[ATTN_STEP_MAX_KEYS];
    const float *qr = j->q + i * j->ldq + head * j->Dh;
    float *out = j->out + i * j->ldo + head * j->Dh;
    int64_t nk = visible_keys(j, i);
    if (nk <= 0) {
        memset(out, 0, (size_t)j->Dh * sizeof(float));
        return;
    }
    if (j->k16 && j->bf16)
        j->ops->attn_scores_bf16(qr, j->k16 + head * j->Dh, j->ldk, nk, j->Dh, j->scale, scores);
    else if (j->k16)
        j->ops->attn_scores_f16(qr, j->k16 + head * j->Dh, j->ldk, nk, j->Dh, j->scale, scores);
    else
        j->ops->attn_scores(qr, j->k + head * j->Dh, j->ldk, nk, j->Dh, j->scale, scores);
    if (j->mask) j->ops->add(scores, j->mask + i * j->Tk, scores, nk);
    j->ops->softmax_row(scores, nk); /* all masked: zeros, so the output is zeros */
    if (j->v16 && j->bf16)
        j->ops->attn_wsum_bf16(scores, j->v16 + head * j->Dh, j->ldv, nk, j->Dh, out);
    else if (j->v16)
        j->ops->attn_wsum_f16(scores, j->v16 + head * j->Dh, j->ldv, nk, j->Dh, out);
    else
        j->ops->attn_wsum(scores, j->v + head * j->Dh, j->ldv, nk, j->Dh, out);
}

static void attn_step_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const attn_job *j = ctx;
    for (int64_t item = begin; item < end; item++)
        attend_row_step(j, item % j->n_head, item / j->n_head);
}

/* A decoder step over a 16-bit cache with Dh a multiple of 16 takes every
 * head at once: the heads kernels read each cached row whole before the
 * next (cpu_kernels.h says why), so the pool splits the keys, not the
 * heads. Each item is a chunk of one query row's keys: its scores for every
 * head, each head's exp(s - chunk max) and their sum, and the unnormalised
 * weighted sum of the chunk's values; the chunks are then merged exactly
 * (rescaled to the row's maximum), so the result is the softmax over all
 * keys up to the order of the additions. The scores live on the worker's
 * stack, the chunks' partial results on the caller's. */
#define ATTN_GROUP_MAX_SCORES 12288 /* floats: 48 KiB of a worker's stack */
#define ATTN_GROUP_MAX_PARTS 16384  /* floats: 64 KiB of the caller's */

typedef struct attn_group_job {
    const attn_job *j;
    int64_t chunks; /* per query row */
    int64_t rows;   /* keys per chunk (the last may have fewer) */
    float *part;    /* per item: n_head maxima, n_head sums, n_head * Dh sums */
} attn_group_job;

static int64_t group_part_floats(const attn_job *j) { return j->n_head * (j->Dh + 2); }

static void attend_chunk(const attn_group_job *g, int64_t item) {
    const attn_job *j = g->j;
    float scores[ATTN_GROUP_MAX_SCORES];
    int64_t i = item / g->chunks, r0 = (item % g->chunks) * g->rows, H = j->n_head, Dh = j->Dh;
    int64_t nk = visible_keys(j, i) - r0;
    if (nk > g->rows) nk = g->rows;
    float *mx = g->part + item * group_part_floats(j), *sum = mx + H, *o = sum + H;
    if (nk <= 0) {
        for (int64_t h = 0; h < H; h++)
            mx[h] = -INFINITY, sum[h] = 0.0f;
        return;
    }
    const float *q = j->q + i * j->ldq;
    if (j->bf16)
        j->ops->attn_scores_heads_bf16(q, j->k16 + r0 * j->ldk, j->ldk, nk, Dh, H, j->scale,
                                       scores, nk);
    else
        j->ops->attn_scores_heads_f16(q, j->k16 + r0 * j->ldk, j->ldk, nk, Dh, H, j->scale,
                                      scores, nk);
    for (int64_t h = 0; h < H; h++) {
        float *row = scores + h * nk;
        if (j->mask) j->ops->add(row, j->mask + i * j->Tk + r0, row, nk);
        sum[h] = j->ops->exp_row(row, nk, &mx[h]);
    }
    if (j->bf16)
        j->ops->attn_wsum_heads_bf16(scores, nk, j->v16 + r0 * j->ldv, j->ldv, nk, Dh, H, o);
    else
        j->ops->attn_wsum_heads_f16(scores, nk, j->v16 + r0 * j->ldv, j->ldv, nk, Dh, H, o);
}

static void attn_chunk_range(void *ctx, int64_t begin, int64_t end, int worker) {
    for (int64_t item = begin; item < end; item++)
        attend_chunk(ctx, item);
}

/* Query row i's output from its chunks. */
static void merge_chunks(const attn_group_job *g, int64_t i) {
    const attn_job *j = g->j;
    int64_t H = j->n_head, Dh = j->Dh, pf = group_part_floats(j);
    const float *part = g->part + i * g->chunks * pf;
    for (int64_t h = 0; h < H; h++) {
        float *out = j->out + i * j->ldo + h * Dh;
        float m = -INFINITY, total = 0.0f;
        for (int64_t c = 0; c < g->chunks; c++)
            m = part[c * pf + h] > m ? part[c * pf + h] : m;
        memset(out, 0, (size_t)Dh * sizeof(float));
        if (m == -INFINITY) continue; /* every key masked: zeros */
        for (int64_t c = 0; c < g->chunks; c++) {
            const float *pc = part + c * pf;
            if (pc[H + h] == 0.0f) continue;
            float w = expf(pc[h] - m);
            total += w * pc[H + h];
            j->ops->axpy(w, pc + 2 * H + h * Dh, out, Dh);
        }
        j->ops->scale(out, 1.0f / total, Dh);
    }
}

/* A step's rows over the pool: by chunks of keys where the heads kernels
 * apply (false: the caller takes the per-head path). */
static bool attention_step_chunked(const attn_job *j) {
    if (!j->k16 || j->Dh % 16 != 0) return false;
    choir_pool *pool = choir_pool_default();
    int64_t nk = visible_keys(j, j->Tq - 1), cap = ATTN_GROUP_MAX_SCORES / j->n_head;
    if (nk <= 0 || cap < 1) return false;
    int64_t threads = choir_pool_threads(pool);
    int64_t chunks = (threads + j->Tq - 1) / j->Tq;
    if ((nk + cap - 1) / cap > chunks) chunks = (nk + cap - 1) / cap;
    int64_t rows = (nk + chunks - 1) / chunks;
    chunks = (nk + rows - 1) / rows;
    float part[ATTN_GROUP_MAX_PARTS];
    if (j->Tq * chunks * group_part_floats(j) > ATTN_GROUP_MAX_PARTS) return false;
    attn_group_job g = {j, chunks, rows, part};
    choir_pool_parallel_for(pool, j->Tq * chunks, 1, attn_chunk_range, &g);
    for (int64_t i = 0; i < j->Tq; i++)
        merge_chunks(&g, i);
    return true;
}

/* A step's rows over the pool: chunked where it applies, else one head per item. */
static void attention_step(const attn_job *j) {
    if (attention_step_chunked(j)) return;
    int64_t grain = 65536 / (j->Tk * j->Dh + 1) + 1;
    choir_pool_parallel_for(choir_pool_default(), j->Tq * j->n_head, grain, attn_step_range,
                            (void *)j);
}

static void attn_block_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const attn_job *j = ctx;
    int64_t blocks = (j->Tq + ATTN_QUERY_BLOCK - 1) / ATTN_QUERY_BLOCK;
    float *scores = j->scratch + (int64_t)worker * j->scratch_rows * j->Tk;
    for (int64_t item = begin; item < end; item++) {
        int64_t head = item / blocks;
        int64_t i0 = (item % blocks) * ATTN_QUERY_BLOCK;
        int64_t nq = j->Tq - i0 < ATTN_QUERY_BLOCK ? j->Tq - i0 : ATTN_QUERY_BLOCK;
        /* Keys past the last row's causal limit are masked for every row: skip them. */
        int64_t nk = visible_keys(j, i0 + nq - 1);
        if (nk <= 0) {
            for (int64_t r = 0; r < nq; r++)
                memset(j->out + (i0 + r) * j->ldo + head * j->Dh, 0, (size_t)j->Dh * sizeof(float));
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nq, (blasint)nk,
                    (blasint)j->Dh, j->scale, j->q + i0 * j->ldq + head * j->Dh, (blasint)j->ldq,
                    j->k + head * j->Dh, (blasint)j->ldk, 0.0f, scores, (blasint)nk);
        for (int64_t r = 0; r < nq; r++) {
            float *row = scores + r * nk;
            if (j->mask) j->ops->add(row, j->mask + (i0 + r) * j->Tk, row, nk);
            int64_t vis = visible_keys(j, i0 + r);
            for (int64_t key = vis; key < nk; key++)
                row[key] = -INFINITY;
            j->ops->softmax_row(row, nk);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nq, (blasint)j->Dh,
                    (blasint)nk, 1.0f, scores, (blasint)nk, j->v + head * j->Dh, (blasint)j->ldv,
                    0.0f, j->out + i0 * j->ldo + head * j->Dh, (blasint)j->ldo);
    }
}

#define ATTN_GEMM_MIN_ROWS 8

void choir_attention(const float *q, int64_t ldq, const float *k, int64_t ldk, const float *v,
                     int64_t ldv, float *out, int64_t ldo, int64_t Tq, int64_t Tk, int n_head,
                     int64_t Dh, float scale, const float *mask, bool causal) {
    if (Tq <= 0 || n_head <= 0 || Dh <= 0) return;
    attn_job j = {choir_cpu_ops_now(),
                  q,
                  k,
                  v,
                  mask,
                  NULL,
                  NULL,
                  false,
                  ldq,
                  ldk,
                  ldv,
                  ldo,
                  Tq,
                  Tk,
                  Dh,
                  n_head,
                  scale,
                  causal,
                  out,
                  NULL,
                  0};
    choir_pool *pool = choir_pool_default();
    /* A few query rows (a decoder step) gain nothing from sgemm, whose packing of
     * all Tk keys then dominates; they take the dot-product row path. */
    if (Tk > 0 && Tq >= ATTN_GEMM_MIN_ROWS) {
        choir_blas_init();
        int threads = choir_pool_threads(pool);
        int64_t rows = Tq < ATTN_QUERY_BLOCK ? Tq : ATTN_QUERY_BLOCK;
        j.scratch_rows = rows;
        j.scratch = choir_kscratch_get((size_t)threads * (size_t)rows * (size_t)Tk * sizeof(float));
    }
    if (j.scratch) {
        int64_t blocks = (Tq + ATTN_QUERY_BLOCK - 1) / ATTN_QUERY_BLOCK;
        choir_pool_parallel_for(pool, blocks * n_head, 1, attn_block_range, &j);
        choir_kscratch_put(j.scratch);
        return;
    }
    /* A decoder step (few query rows) takes the stack path; the online
     * softmax is for when a larger call's scratch could not be had. */
    if (Tq < ATTN_GEMM_MIN_ROWS && Tk > 0 && Tk <= ATTN_STEP_MAX_KEYS) {
        attention_step(&j);
        return;
    }
    int64_t grain = 65536 / (Tk * Dh + 1) + 1;
    choir_pool_parallel_for(pool, Tq * n_head, grain, attn_rows_range, &j);
}

/* 16-bit rows [rows, cols] (stride ld) widened into dst [rows, cols]. */
static void widen_half(const choir_cpu_ops *ops, bool bf16, const uint16_t *x, int64_t rows,
                       int64_t cols, int64_t ld, float *dst) {
    for (int64_t r = 0; r < rows; r++)
        (bf16 ? ops->bf16_to_f32 : ops->f16_to_f32)(x + r * ld, dst + r * cols, cols);
}

/* choir_attention_f16 and _bf16: a step reads the keys and values where
 * they lie, a larger call widens them first. */
static int attention_half(bool bf16, const float *q, int64_t ldq, const uint16_t *k, int64_t ldk,
                          const uint16_t *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                          int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                          bool causal) {
    if (Tq <= 0 || n_head <= 0 || Dh <= 0) return 0;
    const choir_cpu_ops *ops = choir_cpu_ops_now();
    if (Tq < ATTN_GEMM_MIN_ROWS && Tk <= ATTN_STEP_MAX_KEYS) {
        attn_job j = {.ops = ops, .q = q, .mask = mask, .k16 = k, .v16 = v, .bf16 = bf16,
                      .ldq = ldq, .ldk = ldk, .ldv = ldv, .ldo = ldo, .Tq = Tq, .Tk = Tk,
                      .Dh = Dh, .n_head = n_head, .scale = scale, .causal = causal, .out = out};
        if (Tk <= 0) {
            for (int64_t i = 0; i < Tq; i++)
                memset(out + i * ldo, 0, (size_t)(n_head * Dh) * sizeof(float));
            return 0;
        }
        attention_step(&j);
        return 0;
    }
    /* Larger calls (prompts, teacher forcing) widen the keys and values
     * once and take the f32 kernel. */
    int64_t cols = (int64_t)n_head * Dh, n = Tk > 0 ? Tk * cols : 1;
    float *kf = choir_kscratch_get((size_t)n * sizeof(float));
    float *vf = choir_kscratch_get((size_t)n * sizeof(float));
    if (!kf || !vf) {
        choir_kscratch_put(kf);
        choir_kscratch_put(vf);
        return CHOIR_ENOMEM;
    }
    widen_half(ops, bf16, k, Tk, cols, ldk, kf);
    widen_half(ops, bf16, v, Tk, cols, ldv, vf);
    choir_attention(q, ldq, kf, cols, vf, cols, out, ldo, Tq, Tk, n_head, Dh, scale, mask, causal);
    choir_kscratch_put(vf);
    choir_kscratch_put(kf);
    return 0;
}

int choir_attention_f16(const float *q, int64_t ldq, const uint16_t *k, int64_t ldk,
                        const uint16_t *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                        int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                        bool causal) {
    return attention_half(false, q, ldq, k, ldk, v, ldv, out, ldo, Tq, Tk, n_head, Dh, scale,
                          mask, causal);
}

int choir_attention_bf16(const float *q, int64_t ldq, const uint16_t *k, int64_t ldk,
                         const uint16_t *v, int64_t ldv, float *out, int64_t ldo, int64_t Tq,
                         int64_t Tk, int n_head, int64_t Dh, float scale, const float *mask,
                         bool causal) {
    return attention_half(true, q, ldq, k, ldk, v, ldv, out, ldo, Tq, Tk, n_head, Dh, scale,
                          mask, causal);
}

size_t choir_attention_half_scratch_bytes(int64_t Tq, int64_t Tk, int64_t cols) {
    if (Tk <= 0 || (Tq < ATTN_GEMM_MIN_ROWS && Tk <= ATTN_STEP_MAX_KEYS)) return 0;
    /* Two blocks, each taken whole from the scratch (rounded up there). */
    return 2 * ((size_t)Tk * (size_t)cols * sizeof(float) + CHOIR_ALIGN) +
           choir_attention_scratch_bytes(Tq, Tk);
}

size_t choir_attention_scratch_bytes(int64_t Tq, int64_t Tk) {
    if (Tk <= 0 || Tq < ATTN_GEMM_MIN_ROWS) return 0;
    int64_t rows = Tq < ATTN_QUERY_BLOCK ? Tq : ATTN_QUERY_BLOCK;
    return (size_t)choir_pool_threads(choir_pool_default()) * (size_t)rows * (size_t)Tk *
           sizeof(float);
}
