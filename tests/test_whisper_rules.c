/* The fused per-step rules of Whisper decoding (whisper_rules.c) against
 * their plain twins: on random logits and random token histories, with and
 * without timestamps, wr_rules and wr_rules_pool (exponentials over 3
 * threads) must leave the same filtered row and the same
 * bits of argmax and log-sum-exp as wr_rules_ref (filters, argmax,
 * log-sum-exp one after the other), on both sides of the timestamp mass rule;
 * wr_topk must give wr_topk_ref's ids, ties and masked ids included. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/backend_whisper.h"
#include "models/whisper/whisper_internal.h"
#include "testutil.h"

#define V 51866
#define N_INIT 4

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static double uni(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

static float gauss(void) {
    double u = uni() + 1e-12, v = uni();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Text logits N(0, 3); timestamps shifted by a random offset so that the
 * mass rule goes both ways; sometimes rounded to halves to make ties. */
static void fill_logits(float *l, int tb) {
    float shift = (float)(uni() * 16.0 - 10.0);
    bool ties = uni() < 0.3;
    for (int i = 0; i < V; i++) {
        float x = 3.0f * gauss() + (i >= tb ? shift : 0.0f);
        l[i] = ties ? roundf(2.0f * x) * 0.5f : x;
    }
}

/* A history: N_INIT initial tokens, then text and non-decreasing timestamps. */
static int fill_tokens(int32_t *t, const choir_whisper_specials *sp) {
    int n = N_INIT + (int)(uni() * 24.0);
    if (uni() < 0.2) n = N_INIT; /* at the first sampled token */
    int ts = sp->timestamp_begin;
    for (int i = 0; i < N_INIT; i++) t[i] = sp->sot + i;
    for (int i = N_INIT; i < n; i++) {
        if (uni() < 0.3 && ts < V - 1) {
            ts += (int)(uni() * 40.0);
            if (ts >= V) ts = V - 1;
            t[i] = ts;
        } else {
            t[i] = (int32_t)(uni() * (double)sp->eot);
        }
    }
    return n;
}

static void test_rules_match_reference(void **state) {
    (void)state;
    choir_whisper_specials sp;
    choir_whisper_specials_from_vocab(V, &sp);
    int32_t sup[128];
    int n_sup = choir_whisper_default_suppress(&sp, sup, 128);
    float *a = malloc(V * sizeof(float)), *b = malloc(V * sizeof(float)),
          *c = malloc(V * sizeof(float));
    double *scratch = malloc(V * sizeof(double));
    assert_true(a && b && c && scratch);
    /* The pooled sum: several threads whatever the machine has. */
    choir_pool *pool = choir_pool_create(3, NULL);
    assert_non_null(pool);
    int32_t tokens[64];
    int fired = 0, not_fired = 0;
    for (int it = 0; it < 160; it++) {
        choir_whisper_filter f = {.sp = &sp, .n_vocab = V, .sample_begin = N_INIT,
                                  .timestamps = it % 4 != 3, .suppress_blank = it % 2 == 0,
                                  .suppress = sup, .n_suppress = n_sup,
                                  .max_initial_timestamp_index = it % 5 == 0 ? -1 : 50};
        int n = fill_tokens(tokens, &sp);
        fill_logits(a, sp.timestamp_begin);
        memcpy(b, a, V * sizeof(float));
        memcpy(c, a, V * sizeof(float));
        wr_pick pa, pb, pc;
        wr_rules_ref(&f, tokens, n, a, &pa);
        wr_rules(&f, tokens, n, b, &pb);
        wr_rules_pool(&f, tokens, n, c, &pc, pool, scratch);
        assert_memory_equal(a, b, V * sizeof(float));
        assert_memory_equal(a, c, V * sizeof(float));
        assert_int_equal(pa.argmax, pb.argmax);
        assert_int_equal(pa.argmax, pc.argmax);
        assert_memory_equal(&pa.lse, &pb.lse, sizeof pa.lse);
        assert_memory_equal(&pa.lse, &pc.lse, sizeof pa.lse);
        assert_true(isfinite(pb.lse));
        /* The mass rule fired when every text id ended masked. */
        bool text_live = false;
        for (int i = 0; i < sp.timestamp_begin && !text_live; i++) text_live = b[i] != -INFINITY;
        if (f.timestamps) text_live ? not_fired++ : fired++;
    }
    assert_true(fired >= 10);
    assert_true(not_fired >= 10);
    /* Everything masked: argmax 0 and -INFINITY from both. */
    for (int i = 0; i < V; i++) a[i] = b[i] = -INFINITY;
    choir_whisper_filter f = {.sp = &sp, .n_vocab = V, .sample_begin = N_INIT, .timestamps = true,
                              .max_initial_timestamp_index = 50};
    wr_pick pa, pb;
    wr_rules_ref(&f, tokens, N_INIT + 1, a, &pa);
    wr_rules(&f, tokens, N_INIT + 1, b, &pb);
    assert_int_equal(pa.argmax, 0);
    assert_int_equal(pb.argmax, 0);
    assert_true(pa.lse == -INFINITY && pb.lse == -INFINITY);
    choir_pool_free(pool);
    free(a);
    free(b);
    free(c);
    free(scratch);
}

static void test_topk_matches_reference(void **state) {
    (void)state;
    enum { N = 3000 };
    float *l = malloc(N * sizeof(float));
    assert_non_null(l);
    int ia[CHOIR_WHISPER_MAX_BEAM + 1], ib[CHOIR_WHISPER_MAX_BEAM + 1];
    for (int it = 0; it < 200; it++) {
        int mode = it % 4;
        for (int i = 0; i < N; i++) {
            /* Few distinct values (ties), masked ids, or only a handful live. */
            float x = mode == 0 ? gauss() : mode == 1 ? (float)(int)(uni() * 4.0) : gauss();
            if (mode == 2 && uni() < 0.5) x = -INFINITY;
            if (mode == 3 && uni() < 0.998) x = -INFINITY;
            l[i] = x;
        }
        int K = 1 + it % (CHOIR_WHISPER_MAX_BEAM + 1);
        int na = wr_topk_ref(l, N, K, ia), nb = wr_topk(l, N, K, ib);
        assert_int_equal(na, nb);
        assert_memory_equal(ia, ib, (size_t)na * sizeof(int));
    }
    for (int i = 0; i < N; i++) l[i] = -INFINITY;
    assert_int_equal(wr_topk(l, N, 6, ib), 0);
    free(l);
}

/* The greedy step as a backend operation (choir/backend_whisper.h) on the CPU
 * backend: for B rows at once it must do what the host decoder does per row
 * (wr_rules_ref, then wd_update_greedy's update): the same filtered row, the
 * pick appended, the log-probability added in the same bits, the row done at
 * eot or at its limit, the next step's inputs written only for live rows,
 * and rows already done left alone. */
static void test_greedy_op_matches_host_step(void **state) {
    (void)state;
    enum { B = 5, LD = 64 };
    choir_whisper_specials sp;
    choir_whisper_specials_from_vocab(V, &sp);
    int32_t sup[128];
    int n_sup = choir_whisper_default_suppress(&sp, sup, 128);
    float *lg = malloc((size_t)B * V * sizeof(float)), *ref = malloc(V * sizeof(float));
    assert_true(lg && ref);
    choir_err err = {0};
    choir_backend *be = choir_backend_cpu(&err);
    assert_non_null(be);
    choir_stream *s = choir_stream_create(be, &err);
    assert_non_null(s);
    int32_t tokens[B][LD], n[B], done[B], sb[B], limit[B], ids[B], pos[B], keys[B];
    double sum[B];
    int eots = 0, limits = 0, picks = 0;
    for (int it = 0; it < 24; it++) {
        choir_whisper_filter f = {.sp = &sp, .n_vocab = V, .timestamps = it % 3 != 2,
                                  .suppress_blank = it % 2 == 0, .suppress = sup,
                                  .n_suppress = n_sup, .max_initial_timestamp_index = 50};
        int32_t before[B][LD];
        for (int r = 0; r < B; r++) {
            n[r] = fill_tokens(tokens[r], &sp);
            sb[r] = N_INIT;
            done[r] = r == 4; /* one row already finished */
            limit[r] = r == 3 ? n[r] + 1 : LD; /* one row at its last token */
            sum[r] = -1.5 * r;
            ids[r] = pos[r] = keys[r] = -7;
            fill_logits(lg + (size_t)r * V, sp.timestamp_begin);
            /* Sometimes eot is the clear favourite (and allowed). */
            if (r == 2 && it % 4 == 0) lg[(size_t)r * V + sp.eot] = 100.0f;
            memcpy(before[r], tokens[r], sizeof before[r]);
        }
        float *orig = malloc((size_t)B * V * sizeof(float));
        assert_non_null(orig);
        memcpy(orig, lg, (size_t)B * V * sizeof(float));
        choir_whisper_greedy g = {.B = B, .tokens = &tokens[0][0], .ld = LD, .n = n,
                                  .done = done, .sum_logprob = sum, .sample_begin = sb,
                                  .limit = limit, .ids = ids, .pos = pos, .keys = keys};
        int32_t n0[B];
        memcpy(n0, n, sizeof n0);
        assert_int_equal(choir_op_whisper_greedy(s, lg, &f, &g), 0);
        assert_int_equal(choir_stream_sync(s, &err), 0);
        for (int r = 0; r < B; r++) {
            if (r == 4) {
                assert_int_equal(n[r], n0[r]);
                assert_int_equal(ids[r], -7);
                assert_memory_equal(lg + (size_t)r * V, orig + (size_t)r * V, V * sizeof(float));
                continue;
            }
            memcpy(ref, orig + (size_t)r * V, V * sizeof(float));
            choir_whisper_filter fr = f;
            fr.sample_begin = sb[r];
            wr_pick p;
            wr_rules_ref(&fr, before[r], n0[r], ref, &p);
            assert_memory_equal(lg + (size_t)r * V, ref, V * sizeof(float));
            double want = -1.5 * r + ((double)ref[p.argmax] - p.lse);
            assert_memory_equal(&sum[r], &want, sizeof want);
            assert_int_equal(n[r], n0[r] + 1);
            assert_int_equal(tokens[r][n0[r]], p.argmax);
            assert_memory_equal(tokens[r], before[r], (size_t)n0[r] * sizeof(int32_t));
            bool fin = p.argmax == sp.eot || n[r] >= limit[r];
            assert_int_equal(done[r], fin);
            eots += p.argmax == sp.eot;
            limits += r == 3;
            picks++;
            if (fin) {
                assert_int_equal(ids[r], -7);
            } else {
                assert_int_equal(ids[r], p.argmax);
                assert_int_equal(pos[r], n[r] - 1);
                assert_int_equal(keys[r], n[r]);
            }
        }
        free(orig);
    }
    assert_true(eots >= 1 && limits >= 1 && picks > 50);
    choir_stream_free(s);
    choir_backend_free(be);
    free(lg);
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_match_reference),
        cmocka_unit_test(test_topk_matches_reference),
        cmocka_unit_test(test_greedy_op_matches_host_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
