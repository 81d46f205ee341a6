/* Tests of src/base: errors, counted allocation, arenas, the thread pool. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/error.h"
#include "choir/pool.h"
#include "testutil.h"

static void test_errors(void **state) {
    (void)state;
    choir_err err;
    choir_err_clear(&err);
    assert_int_equal(choir_err_set(&err, CHOIR_EFORMAT, "bad %s", "header"), CHOIR_EFORMAT);
    assert_string_equal(err.msg, "bad header");
    choir_err_prefix(&err, "%s", "model.safetensors");
    assert_string_equal(err.msg, "model.safetensors: bad header");
    assert_string_equal(choir_strerror(CHOIR_ENOMEM), "out of memory");
    assert_string_equal(choir_strerror(12345), "unknown error");
    assert_int_equal(choir_err_set(NULL, CHOIR_EIO, "dropped"), CHOIR_EIO);
}

static void test_alloc_counts(void **state) {
    (void)state;
    int64_t before = choir_mem_current(CHOIR_MEM_CACHE);
    char *p = choir_alloc(CHOIR_MEM_CACHE, 1000);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % CHOIR_ALIGN, 0);
    assert_int_equal(choir_mem_current(CHOIR_MEM_CACHE), before + 1000);
    assert_true(choir_mem_peak(CHOIR_MEM_CACHE) >= before + 1000);
    p = choir_realloc(p, 3000);
    assert_non_null(p);
    assert_int_equal(choir_mem_current(CHOIR_MEM_CACHE), before + 3000);
    choir_free(p);
    assert_int_equal(choir_mem_current(CHOIR_MEM_CACHE), before);
    choir_free(NULL);
    assert_null(choir_calloc(CHOIR_MEM_OTHER, SIZE_MAX / 2, 4));
}

static void test_alloc_injection(void **state) {
    (void)state;
    choir_alloc_fail_after(2);
    void *a = choir_alloc(CHOIR_MEM_OTHER, 8);
    void *b = choir_alloc(CHOIR_MEM_OTHER, 8);
    void *c = choir_alloc(CHOIR_MEM_OTHER, 8);
    assert_non_null(a);
    assert_null(b);
    assert_non_null(c);
    choir_free(a);
    choir_free(c);
    choir_alloc_fail_after(0);
}

static void test_arena(void **state) {
    (void)state;
    choir_err err;
    choir_arena *a = choir_arena_create(1024, CHOIR_MEM_ACTIVATIONS, &err);
    assert_non_null(a);
    void *x = choir_arena_alloc(a, 100);
    assert_non_null(x);
    assert_int_equal((uintptr_t)x % CHOIR_ALIGN, 0);
    size_t mark = choir_arena_mark(a);
    assert_non_null(choir_arena_alloc(a, 500));
    assert_int_equal(choir_arena_need(a), choir_arena_high_water(a));
    assert_false(choir_arena_overflowed(a));
    assert_null(choir_arena_alloc(a, 1000)); /* no room; arena stays usable */
    /* what the refused piece would have needed: 100 -> 128, + 500 = 628 ->
     * 640, + 1000 */
    assert_true(choir_arena_overflowed(a));
    assert_int_equal(choir_arena_need(a), 1640);
    assert_int_equal(choir_arena_used(a), 628);
    assert_null(choir_arena_alloc(a, 400)); /* a smaller refusal keeps the larger want */
    assert_int_equal(choir_arena_need(a), 1640);
    choir_arena_release(a, mark);
    assert_int_equal(choir_arena_used(a), 100);
    assert_true(choir_arena_high_water(a) >= 600);
    choir_arena_reset(a);
    assert_int_equal(choir_arena_used(a), 0);
    assert_true(choir_arena_high_water(a) >= 600);
    assert_non_null(choir_arena_alloc(a, 100));
    assert_null(choir_arena_alloc(a, SIZE_MAX - 10)); /* 128 + that saturates instead of wrapping */
    assert_int_equal(choir_arena_need(a), SIZE_MAX);
    choir_arena_reset_peak(a);
    assert_false(choir_arena_overflowed(a));
    assert_int_equal(choir_arena_need(a), 100);
    choir_arena_reset(a);
    float *f = choir_arena_floats(a, 16);
    assert_non_null(f);
    assert_true(f[15] == 0.0f);
    choir_arena_free(a);
    choir_alloc_fail_after(1);
    assert_null(choir_arena_create(64, CHOIR_MEM_ACTIVATIONS, &err));
    assert_int_equal(err.code, CHOIR_ENOMEM);
    choir_alloc_fail_after(0);
}

typedef struct sum_ctx {
    atomic_llong sum;
    atomic_int calls;
    choir_pool *pool;
} sum_ctx;

static void sum_range(void *ctx, int64_t b, int64_t e, int worker) {
    sum_ctx *s = ctx;
    (void)worker;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&s->sum, i);
    atomic_fetch_add(&s->calls, 1);
}

static void nested_range(void *ctx, int64_t b, int64_t e, int worker) {
    sum_ctx *s = ctx;
    (void)worker;
    for (int64_t i = b; i < e; i++) {
        sum_ctx inner = {0};
        choir_pool_parallel_for(s->pool, 10, 1, sum_range, &inner);
        atomic_fetch_add(&s->sum, atomic_load(&inner.sum));
    }
}

static void test_pool(void **state) {
    (void)state;
    choir_pool *pool = choir_pool_create(4, NULL);
    assert_non_null(pool);
    assert_int_equal(choir_pool_threads(pool), 4);
    for (int rep = 0; rep < 50; rep++) {
        sum_ctx s = {0};
        choir_pool_parallel_for(pool, 10000, 16, sum_range, &s);
        assert_int_equal(atomic_load(&s.sum), 10000LL * 9999 / 2);
    }
    sum_ctx n = {.pool = pool};
    choir_pool_parallel_for(pool, 100, 1, nested_range, &n);
    assert_int_equal(atomic_load(&n.sum), 100LL * 45);
    choir_pool_free(pool);
    choir_pool_free(NULL);
    assert_true(choir_now_ns() > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),     cmocka_unit_test(test_alloc_counts),
        cmocka_unit_test(test_alloc_injection), cmocka_unit_test(test_arena),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
