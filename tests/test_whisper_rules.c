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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_match_reference),
        cmocka_unit_test(test_topk_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
