/* Batched decoding (choir_vibevoice_step_batch) equals decoding one sequence
 * at a time: three sequences with prompts of different lengths (one with
 * audio) are prefilled twice; one copy steps alone, the other in batches
 * whose members change between steps (a sequence joins late, one leaves
 * early), fed the same tokens. Every step's logits agree (rel L2 <= 1e-5:
 * a product over more rows may sum in another order), so do the greedy
 * tokens; bad batches are refused without advancing anyone. The same with
 * the batched copies' KV caches in one paged pool (choir_vibevoice_kv_pool):
 * admission by pages, pages taken as tokens reach them and given back.
 * A third copy of each sequence steps in its own batch with the greedy pick
 * made by the backend (choir_vibevoice_step_batch_greedy): its ids are the
 * host's argmax of the batched copies' logits at every step.
 * Random weights at reduced dimensions (choir_vibevoice_randw), f32 and
 * bf16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/backend.h"
#include "choir/vibevoice.h"

static void small_dims(choir_vibevoice_dims *d) {
    memset(d, 0, sizeof *d);
    choir_vibevoice_enc_dims e = {.vae_dim = 8, .n_filters = 4, .n_stages = 7, .ffn_mult = 2, .eps = 1e-5f};
    const int ratios[6] = {2, 2, 4, 5, 5, 8}, depths[7] = {1, 1, 1, 1, 1, 1, 1};
    memcpy(e.ratios, ratios, sizeof ratios);
    memcpy(e.depths, depths, sizeof depths);
    d->acoustic = e;
    d->semantic = e;
    d->semantic.vae_dim = 16;
    d->lm = (choir_vibevoice_lm_dims){.hidden = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
                                      .intermediate = 256, .vocab = 600, .rope_theta = 1e6, .eps = 1e-6f,
                                      .max_positions = 4096};
    d->hop = 3200;
    d->chunk_samples = 3200 * 4;
    d->connector_eps = 1e-6f;
    d->audio_token = 590;
    d->audio_bos = 591;
    d->audio_eos = 592;
    d->eos_token = 593;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

#define NSEQ 3
#define STEPS 8

/* paged: the batched copies live in one KV pool sized to their contexts
 * exactly (admission refuses a fourth), step through a paged batch (one
 * attention for all rows), and sequence 0 takes one more step alone.
 * paged 2: the pool holds bf16 keys and values (half the bytes), whose
 * rounding the bound below allows for (greedy tokens may then differ and
 * are counted, not asserted). */
static void run_case(choir_dtype dt, int paged) {
    choir_dtype kv = paged == 2 ? CHOIR_DTYPE_BF16 : CHOIR_DTYPE_F32;
    double bound = paged == 2 ? 1e-2 : 1e-5;
    int agree = 0, compared = 0;
    choir_vibevoice_dims d;
    small_dims(&d);
    choir_err err = {0};
    choir_vibevoice_randw *w = choir_vibevoice_randw_create(&d, dt, 0, 11, &err);
    assert_non_null(w);
    choir_vibevoice *m = choir_vibevoice_from_tensors(choir_vibevoice_randw_find, w, &d, &err);
    assert_non_null(m);
    int V = d.lm.vocab;
    /* Prompts of 125, 250 and 11 + 4 audio tokens (the last has 4 hops of
     * audio): pages of 128 positions are crossed in prefill and in steps. */
    int lens[NSEQ] = {125, 250, 15};
    choir_vibevoice_kv_pool *pool = NULL, *gpool = NULL;
    if (paged) {
        int pages = 0;
        for (int q = 0; q < NSEQ; q++) pages += choir_vibevoice_kv_pages_for(lens[q] + STEPS);
        assert_int_equal(pages, 6);
        pool = choir_vibevoice_kv_pool_create_as(m, pages * choir_vibevoice_kv_page_bytes_as(&d, kv), kv, &err);
        assert_non_null(pool);
        gpool = choir_vibevoice_kv_pool_create_as(m, pages * choir_vibevoice_kv_page_bytes_as(&d, kv), kv, &err);
        assert_non_null(gpool);
    }
    int64_t n_audio = 4 * 3200;
    float *audio = malloc((size_t)n_audio * sizeof *audio);
    for (int64_t i = 0; i < n_audio; i++) audio[i] = 0.1f * sinf(0.01f * (float)i) + 0.01f * (float)((i * 7) % 13);
    choir_vibevoice_normalize(audio, n_audio, d.hop, audio);
    choir_vibevoice_state *alone[NSEQ], *batched[NSEQ], *greedy[NSEQ];
    for (int q = 0; q < NSEQ; q++) {
        int32_t ids[256];
        for (int i = 0; i < lens[q]; i++) ids[i] = (int32_t)(3 + (i * 37 + q * 101) % 500);
        if (q == 2) {
            ids[4] = d.audio_bos;
            for (int i = 0; i < 4; i++) ids[5 + i] = d.audio_token;
            ids[9] = d.audio_eos;
        }
        choir_vibevoice_plan p = {.max_samples = q == 2 ? n_audio : 0, .max_context = lens[q] + STEPS,
                                  .prefill_chunk = 8};
        for (int c = 0; c < 3; c++) {
            choir_vibevoice_state *s = c && paged ? choir_vibevoice_state_create_paged(m, &p, c == 1 ? pool : gpool, &err)
                                                  : choir_vibevoice_state_create(m, &p, NULL, &err);
            assert_non_null(s);
            if (q == 2) assert_int_equal(choir_vibevoice_encode(m, s, audio, n_audio, 0, NULL, NULL, &err), 0);
            assert_int_equal(choir_vibevoice_prefill(m, s, ids, lens[q], NULL, NULL, NULL, &err), 0);
            (c == 2 ? greedy : c ? batched : alone)[q] = s;
        }
    }
    choir_vibevoice_kv_usage u;
    if (paged) {
        /* Every page is reserved: a fourth request is not admitted. */
        choir_vibevoice_kv_pool_usage(pool, &u);
        assert_int_equal(u.pages, 6);
        assert_int_equal(u.reserved, 6);
        assert_int_equal(u.in_use, 1 + 2 + 1);
        assert_false(choir_vibevoice_kv_pool_fits(pool, 1));
        choir_vibevoice_plan p = {.max_context = 1, .prefill_chunk = 8};
        assert_null(choir_vibevoice_state_create_paged(m, &p, pool, &err));
        assert_int_equal(err.code, CHOIR_EBUSY);
        assert_null(choir_vibevoice_state_create(m, &(choir_vibevoice_plan){.max_context = 8, .kv_paged = 1}, NULL,
                                                 &err));
        assert_int_equal(err.code, CHOIR_EINVAL);
    }
    choir_stream *st = choir_stream_create(choir_vibevoice_backend(m), &err);
    assert_non_null(st);
    int64_t bb = paged ? choir_vibevoice_batch_bytes_paged(&d, NSEQ, pool) : choir_vibevoice_batch_bytes(&d, NSEQ);
    assert_int_equal(choir_stream_reserve(st, (size_t)bb, 1 << 20, &err), 0);
    choir_vibevoice_batch *b = paged ? choir_vibevoice_batch_create_paged(m, NSEQ, pool, st, &err)
                                     : choir_vibevoice_batch_create(m, NSEQ, st, &err);
    assert_non_null(b);
    choir_stream *gst = choir_stream_create(choir_vibevoice_backend(m), &err);
    assert_non_null(gst);
    assert_int_equal(choir_stream_reserve(gst, (size_t)bb, 1 << 20, &err), 0);
    choir_vibevoice_batch *gb = paged ? choir_vibevoice_batch_create_paged(m, NSEQ, gpool, gst, &err)
                                      : choir_vibevoice_batch_create(m, NSEQ, gst, &err);
    assert_non_null(gb);
    int picked = 0;
    /* Sequence 0 decodes steps 0..5, sequence 1 all, sequence 2 joins at step 2. */
    int first[NSEQ] = {0, 0, 2}, last[NSEQ] = {5, STEPS - 1, STEPS - 1};
    int32_t next[NSEQ];
    for (int q = 0; q < NSEQ; q++) next[q] = argmax(choir_vibevoice_logits(alone[q]), V);
    double worst = 0;
    for (int t = 0; t < STEPS; t++) {
        choir_vibevoice_state *members[NSEQ], *gmembers[NSEQ];
        int32_t toks[NSEQ], picks[NSEQ];
        int idx[NSEQ], n = 0;
        for (int q = NSEQ - 1; q >= 0; q--) /* a different order from the states' */
            if (t >= first[q] && t <= last[q]) {
                gmembers[n] = greedy[q];
                members[n] = batched[q];
                toks[n] = next[q];
                idx[n++] = q;
            }
        assert_int_equal(choir_vibevoice_step_batch(m, b, members, toks, n, &err), 0);
        assert_int_equal(choir_vibevoice_step_batch_greedy(m, gb, gmembers, toks, n, picks, &err), 0);
        for (int k = 0; k < n; k++) {
            int q = idx[k];
            /* The backend's pick is the host's argmax of the same step's logits. */
            assert_int_equal(picks[k], argmax(choir_vibevoice_logits(batched[q]), V));
            assert_int_equal(choir_vibevoice_seq_len(greedy[q]), choir_vibevoice_seq_len(batched[q]));
            picked++;
            assert_int_equal(choir_vibevoice_step(m, alone[q], next[q], NULL, &err), 0);
            const float *la = choir_vibevoice_logits(alone[q]), *lb = choir_vibevoice_logits(batched[q]);
            double e = tu_rel_l2(lb, la, (size_t)V);
            if (e > worst) worst = e;
            if (kv == CHOIR_DTYPE_F32) assert_int_equal(argmax(lb, V), argmax(la, V));
            agree += argmax(lb, V) == argmax(la, V);
            compared++;
            assert_int_equal(choir_vibevoice_seq_len(batched[q]), choir_vibevoice_seq_len(alone[q]));
            next[q] = argmax(la, V);
        }
    }
    if (paged) {
        /* Sequence 0 (left the batch) steps alone on its pages. */
        assert_int_equal(choir_vibevoice_step(m, alone[0], next[0], NULL, &err), 0);
        assert_int_equal(choir_vibevoice_step(m, batched[0], next[0], NULL, &err), 0);
        double e = tu_rel_l2(choir_vibevoice_logits(batched[0]), choir_vibevoice_logits(alone[0]), (size_t)V);
        if (e > worst) worst = e;
        choir_vibevoice_kv_pool_usage(pool, &u);
        assert_int_equal(u.in_use, 2 + 3 + 1);
        /* A state of another pool (none) in a paged batch is refused. */
        choir_vibevoice_state *mixed[2] = {batched[2], alone[2]};
        int32_t two[2] = {1, 2};
        assert_int_equal(choir_vibevoice_step_batch(m, b, mixed, two, 2, &err), CHOIR_EINVAL);
    }
    printf("%s%s: worst step logits rel L2 %.3g (batched vs alone, bound %.0e); greedy tokens agree in %d of %d\n",
           dt == CHOIR_DTYPE_F32 ? "f32" : "bf16", paged == 2 ? " paged, bf16 K/V" : paged ? " paged" : "", worst,
           bound, agree, compared);
    assert_true(worst <= bound);
    /* Refusals leave every sequence where it was. */
    int before0 = choir_vibevoice_seq_len(batched[0]), before1 = choir_vibevoice_seq_len(batched[1]);
    choir_vibevoice_state *twice[2] = {batched[0], batched[0]};
    int32_t toks[2] = {1, 2};
    assert_int_equal(choir_vibevoice_step_batch(m, b, twice, toks, 2, &err), CHOIR_EINVAL);
    choir_vibevoice_state *pair[2] = {batched[0], batched[1]};
    toks[0] = V;
    assert_int_equal(choir_vibevoice_step_batch(m, b, pair, toks, 2, &err), CHOIR_EINVAL);
    toks[0] = 1;
    /* batched[1] has used all of its planned context. */
    assert_int_equal(choir_vibevoice_step_batch(m, b, pair, toks, 2, &err), CHOIR_ETOOBIG);
    assert_int_equal(choir_vibevoice_step_batch(m, b, pair, toks, NSEQ + 1, &err), CHOIR_EINVAL);
    assert_int_equal(choir_vibevoice_seq_len(batched[0]), before0);
    assert_int_equal(choir_vibevoice_seq_len(batched[1]), before1);
    assert_int_equal(picked, 6 + 8 + 6);
    int32_t picks[2];
    assert_int_equal(choir_vibevoice_step_batch_greedy(m, gb, greedy, toks, 2, NULL, &err), CHOIR_EINVAL);
    assert_int_equal(choir_vibevoice_step_batch_greedy(m, gb, (choir_vibevoice_state *[]){greedy[0], greedy[0]},
                                                       toks, 2, picks, &err), CHOIR_EINVAL);
    choir_vibevoice_batch_free(gb);
    choir_stream_free(gst);
    for (int q = 0; q < NSEQ; q++) choir_vibevoice_state_free(greedy[q]);
    choir_vibevoice_kv_pool_free(gpool);
    choir_vibevoice_batch_free(b);
    choir_stream_free(st);
    for (int q = 0; q < NSEQ; q++) {
        choir_vibevoice_state_free(alone[q]);
        choir_vibevoice_state_free(batched[q]);
        if (paged && q == 0) {
            /* Its two pages are back: a request of up to 256 tokens fits, not more. */
            choir_vibevoice_kv_pool_usage(pool, &u);
            assert_int_equal(u.reserved, 4);
            assert_int_equal(u.in_use, 4);
            assert_true(choir_vibevoice_kv_pool_fits(pool, 256));
            assert_false(choir_vibevoice_kv_pool_fits(pool, 257));
        }
    }
    if (paged) {
        choir_vibevoice_kv_pool_usage(pool, &u);
        assert_int_equal(u.reserved, 0);
        assert_int_equal(u.in_use, 0);
    }
    choir_vibevoice_kv_pool_free(pool);
    free(audio);
    choir_vibevoice_free(m);
    choir_vibevoice_randw_free(w);
}

static void test_batched_equals_alone_f32(void **state) {
    (void)state;
    run_case(CHOIR_DTYPE_F32, 0);
}

static void test_paged_batched_equals_alone_f32(void **state) {
    (void)state;
    run_case(CHOIR_DTYPE_F32, 1);
}

static void test_paged_batched_equals_alone_bf16(void **state) {
    (void)state;
    run_case(CHOIR_DTYPE_BF16, 1);
}

static void test_paged_bf16_kv_f32(void **state) {
    (void)state;
    run_case(CHOIR_DTYPE_F32, 2);
}

static void test_batched_equals_alone_bf16(void **state) {
    (void)state;
    run_case(CHOIR_DTYPE_BF16, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone_f32),
        cmocka_unit_test(test_batched_equals_alone_bf16),
        cmocka_unit_test(test_paged_batched_equals_alone_f32),
        cmocka_unit_test(test_paged_batched_equals_alone_bf16),
        cmocka_unit_test(test_paged_bf16_kv_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
