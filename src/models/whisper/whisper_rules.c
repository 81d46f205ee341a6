/* What a decoding step needs of one hypothesis' next-token logits: the
 * filters (whisper_filters.c) applied in place, then the first id of the
 * largest filtered logit and the log-sum-exp of the filtered row (for the
 * token's log-probability), and for beam search the K best ids.
 *
 * Two versions that give bit-identical results. The reference composes the
 * plain passes: the filters (whose timestamp mass rule already computes a
 * log-sum-exp over the whole vocabulary), then argmax, then a second
 * log-sum-exp. wr_rules fuses them: one pass finds the text and timestamp
 * maxima and their first ids, one pass sums the exponentials, and the
 * log-sum-exp of the filtered row is taken from what the mass rule computed
 * (it is the same number, summed in the same order), so a step costs one
 * exp per live token instead of two. Ids already at -INFINITY are skipped:
 * their exp is exactly 0, and adding 0 to a non-negative sum leaves it
 * unchanged, so skipping them changes no bit.
 *
 * Logits holding NaN are outside the contract (the two versions may then
 * pick different ids). */
#include <math.h>

#include "choir/pool.h"
#include "choir/backend_whisper.h"
#include "models/whisper/whisper_internal.h"

/* --- reference ---------------------------------------------------------------- */

int wh_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

double wh_lse(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    if (mx == -INFINITY) return -INFINITY;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

void wr_rules_ref(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens,
                  float *logits, wr_pick *out) {
    choir_whisper_filter_logits(f, tokens, n_tokens, logits);
    out->argmax = wh_argmax(logits, f->n_vocab);
    out->lse = wh_lse(logits, f->n_vocab);
}

int wr_topk_ref(const float *l, int V, int K, int *ids) {
    int n = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            if (l[i] == -INFINITY) continue;
            bool taken = false;
            for (int q = 0; q < k; q++) taken |= ids[q] == i;
            if (!taken && (best < 0 || l[i] > l[best])) best = i;
        }
        if (best < 0) break;
        ids[n++] = best;
    }
    return n;
}

/* --- fused -------------------------------------------------------------------- */

/* Maximum of x[from..to) (-INFINITY when empty or all masked) and the first
 * id holding it (-1 when none). The reference folds with fmaxf, a library
 * call per id; a comparison gives the same value up to the sign of a zero
 * maximum, which no result depends on (x - mx and mx + log(s), s >= 1, come
 * out the same for either zero). */
static float max_first(const float *x, int from, int to, int *arg) {
    float best = -INFINITY;
    int a = -1;
    for (int i = from; i < to; i++)
        if (x[i] > best) best = x[i], a = i;
    *arg = a;
    return best;
}

/* sum of exp(x[i] - mx) over [from, to) in id order, masked ids skipped. */
static double sum_exp(const float *x, int from, int to, float mx, double s) {
    for (int i = from; i < to; i++)
        if (x[i] != -INFINITY) s += exp((double)x[i] - mx);
    return s;
}

/* The same sum with the exponentials computed over a pool into scratch
 * (masked ids give exactly 0) and added in id order on the calling thread:
 * the same bits, in a fraction of the time when one row is all there is. */
typedef struct wr_exp_job {
    const float *x;
    double *e;
    float mx;
} wr_exp_job;

static void exp_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const wr_exp_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        j->e[i] = j->x[i] != -INFINITY ? exp((double)j->x[i] - j->mx) : 0.0;
}

static double sum_exp_pool(const float *x, int n, float mx, choir_pool *pool, double *scratch) {
    wr_exp_job j = {x, scratch, mx};
    choir_pool_parallel_for(pool, n, 4096, exp_range, &j);
    double s = 0;
    for (int i = 0; i < n; i++) s += scratch[i];
    return s;
}

static void mask_text(float *x, int tb) {
    for (int i = 0; i < tb; i++) x[i] = -INFINITY;
}

void wr_rules(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens, float *logits,
              wr_pick *out) {
    wr_rules_pool(f, tokens, n_tokens, logits, out, NULL, NULL);
}

void wr_rules_pool(const choir_whisper_filter *f, const int32_t *tokens, int n_tokens,
                   float *logits, wr_pick *out, choir_pool *pool, double *scratch) {
    int V = f->n_vocab;
    /* Without the timestamp rules the timestamp ids are ordinary tokens:
     * one region [0, V). */
    int tb = f->timestamps ? f->sp->timestamp_begin : V;
    wf_masks(f, tokens, n_tokens, logits);
    int text_arg, ts_arg;
    float text_max = max_first(logits, 0, tb, &text_arg);
    float ts_max = max_first(logits, tb, V, &ts_arg);
    float mx = text_max >= ts_max ? text_max : ts_max;
    if (mx == -INFINITY) {
        out->argmax = 0;
        out->lse = -INFINITY;
        return;
    }
    double s = pool && scratch ? sum_exp_pool(logits, V, mx, pool, scratch)
                               : sum_exp(logits, tb, V, mx, sum_exp(logits, 0, tb, mx, 0.0));
    double lse = mx + log(s);
    out->argmax = text_max >= ts_max ? text_arg : ts_arg;
    out->lse = lse;
    if (!f->timestamps || ts_max == -INFINITY) return;
    /* The mass rule: timestamps together likelier than any text token. When
     * it fires, the filtered row is the timestamps alone, whose log-sum-exp
     * is the one just computed for the rule. */
    double ts_sum = sum_exp(logits, tb, V, ts_max, 0.0);
    double ts_logprob = ts_max + log(ts_sum) - lse;
    double text_logprob = (double)text_max - lse;
    if (ts_logprob > text_logprob) {
        mask_text(logits, tb);
        out->argmax = ts_arg;
        out->lse = ts_max + log(ts_sum);
    }
}

int wr_topk(const float *l, int V, int K, int *ids) {
    /* Kept sorted by value, descending; a later id equal to a kept value
     * goes after it, which is the reference's lower-id-first order. */
    float vals[CHOIR_WHISPER_MAX_BEAM + 1];
    int n = 0;
    if (K > CHOIR_WHISPER_MAX_BEAM + 1) K = CHOIR_WHISPER_MAX_BEAM + 1;
    if (K < 1) return 0;
    for (int i = 0; i < V; i++) {
        float v = l[i];
        if (v == -INFINITY || (n == K && !(v > vals[K - 1]))) continue;
        int p = n < K ? n++ : K - 1;
        while (p > 0 && vals[p - 1] < v) {
            vals[p] = vals[p - 1];
            ids[p] = ids[p - 1];
            p--;
        }
        vals[p] = v;
        ids[p] = i;
    }
    return n;
}

/* --- the greedy step as a backend operation (choir/backend_whisper.h) -------- */

void choir_whisper_greedy_row(const choir_whisper_filter *f, const choir_whisper_greedy *g,
                              int64_t r, float *logits_row) {
    if (g->done[r]) return;
    int32_t *tokens = g->tokens + r * g->ld;
    int n = g->n[r];
    wr_pick pick;
    wr_rules(f, tokens, n, logits_row, &pick);
    /* As the host decoder's update (whisper_decode.c, wd_update_greedy). */
    int next = pick.argmax;
    g->sum_logprob[r] += (double)logits_row[next] - pick.lse;
    tokens[n++] = next;
    g->n[r] = n;
    bool done = next == f->sp->eot || n >= g->limit[r];
    g->done[r] = done;
    if (!done) {
        g->ids[r] = next;
        g->pos[r] = n - 1;
        g->keys[r] = n;
    }
}
