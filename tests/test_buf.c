/* The growable buffer (choir/buf.h): contents and terminator after appends of
 * every kind, long printf output, an empty take, memory counted in the
 * buffer's category and returned, and a failed growth that sticks, leaks
 * nothing and makes take return NULL, at every allocation point. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/error.h"
#include "testutil.h"

static void test_appends(void **state)
{
    (void)state;
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    assert_null(b.data);
    assert_int_equal(choir_buf_puts(&b, "speech"), CHOIR_OK);
    assert_int_equal(choir_buf_append(&b, " to ", 4), CHOIR_OK);
    assert_int_equal(choir_buf_printf(&b, "%s %d", "text", 42), CHOIR_OK);
    assert_int_equal(choir_buf_append(&b, NULL, 0), CHOIR_OK);
    assert_string_equal(b.data, "speech to text 42");
    assert_int_equal(b.len, strlen("speech to text 42"));
    /* printf output longer than its first try, and bytes with NULs inside */
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(choir_buf_printf(&b, "[%s]", big), CHOIR_OK);
    assert_int_equal(b.len, 17 + 1001);
    assert_int_equal(b.data[17], '[');
    assert_int_equal(b.data[b.len - 1], ']');
    assert_int_equal(b.data[b.len], 0);
    assert_int_equal(choir_buf_append(&b, "a\0b", 3), CHOIR_OK);
    assert_memory_equal(b.data + b.len - 3, "a\0b", 3);
    assert_true(b.cap > b.len);
    size_t len = 0;
    size_t want = b.len;
    char *s = choir_buf_take(&b, &len);
    assert_non_null(s);
    assert_int_equal(len, want);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    choir_free(s);
    /* empty: an allocated "" */
    s = choir_buf_take(&b, &len);
    assert_non_null(s);
    assert_string_equal(s, "");
    assert_int_equal(len, 0);
    choir_free(s);
    choir_buf_free(&b);
    choir_buf_free(NULL);
}

static void test_counted(void **state)
{
    (void)state;
    int64_t before = choir_mem_current(CHOIR_MEM_CACHE);
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_CACHE);
    assert_int_equal(choir_buf_reserve(&b, 100000), CHOIR_OK);
    assert_true(b.cap >= 100001);
    assert_true(choir_mem_current(CHOIR_MEM_CACHE) - before >= 100001);
    choir_buf_free(&b);
    assert_int_equal(choir_mem_current(CHOIR_MEM_CACHE), before);
}

static void test_failures(void **state)
{
    (void)state;
    int64_t before = choir_mem_current(CHOIR_MEM_COUNT);
    int failed = 0;
    for (int64_t k = 1; k < 64; k++) {
        choir_alloc_fail_after(k);
        choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
        for (int i = 0; i < 200; i++)
            choir_buf_printf(&b, "%04d;", i);
        int oom = b.oom;
        /* after a failure every append refuses, even a small one that would fit */
        if (oom)
            assert_int_equal(choir_buf_append(&b, "", 0), CHOIR_ENOMEM);
        char *s = choir_buf_take(&b, NULL);
        int64_t n = choir_alloc_fail_after(0);
        if (oom || !s) {
            failed++;
            assert_null(s);
        } else {
            assert_int_equal(strlen(s), 1000);
            assert_memory_equal(s + 995, "0199;", 5);
            choir_free(s);
            if (n < k)
                break; /* every allocation point has been tried */
        }
        assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), before);
    }
    assert_true(failed >= 5);
    /* a size that cannot exist */
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    assert_int_equal(choir_buf_reserve(&b, (size_t)-1), CHOIR_ENOMEM);
    assert_true(b.oom);
    assert_null(choir_buf_take(&b, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends),
        cmocka_unit_test(test_counted),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
