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
    int64_t grain = 65536 / (Tk * Dh + 1) + 1;
    /* A decoder step (few query rows) takes the stack path; the online
     * softmax is for when a larger call's scratch could not be had. */
    bool step = Tq < ATTN_GEMM_MIN_ROWS && Tk <= ATTN_STEP_MAX_KEYS;
    choir_pool_parallel_for(pool, Tq * n_head, grain, step ? attn_step_range : attn_rows_range,
                            &j);
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
        int64_t grain = 65536 / (Tk * Dh + 1) + 1;
        choir_pool_parallel_for(choir_pool_default(), Tq * n_head, grain, attn_step_range, &j);
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
