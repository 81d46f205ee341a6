/* The growable buffer (choir/buf.h): contents and terminator after appends of
 * every kind, long printf output, an empty take, memory counted in the
 * buffer's category and returned, and a failed growth that sticks, leaks
 * nothing and makes take return NULL, at every allocation point; a clear
 * that keeps the memory for the next appends; a file read to its end under
 * a bound (below, at and above the file's size). */
#include <stdint.h>
#include <stdio.h>
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

static void test_clear(void **state)
{
    (void)state;
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    choir_buf_clear(&b); /* nothing held yet */
    assert_null(b.data);
    for (int i = 0; i < 500; i++)
        choir_buf_printf(&b, "%04d;", i);
    char *data = b.data;
    size_t cap = b.cap;
    int64_t held = choir_mem_current(CHOIR_MEM_IO);
    choir_buf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_true(b.data == data && b.cap == cap);
    /* refilled to the same size, it allocates nothing */
    for (int i = 0; i < 500; i++)
        assert_int_equal(choir_buf_printf(&b, "%04d;", i), CHOIR_OK);
    assert_true(b.data == data);
    assert_int_equal(choir_mem_current(CHOIR_MEM_IO), held);
    assert_int_equal(b.len, 2500);
    assert_memory_equal(b.data, "0000;0001;", 10);
    /* a failed buffer stays failed */
    b.oom = 1;
    choir_buf_clear(&b);
    assert_int_equal(choir_buf_append(&b, "x", 1), CHOIR_ENOMEM);
    assert_null(choir_buf_take(&b, NULL));
}

/* A temporary file of `n` bytes, byte i being i % 251, rewound. */
static FILE *pattern_file(size_t n)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        fputc((int)(i % 251), f);
    rewind(f);
    return f;
}

static void test_read(void **state)
{
    (void)state;
    const size_t n = 200000; /* several reads of 64 KiB */
    const size_t bounds[] = {n + 1, n, n - 1, 0, SIZE_MAX};
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        FILE *f = pattern_file(n);
        choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_IO);
        choir_buf_puts(&b, "head:");
        int rc = choir_buf_read(&b, f, bounds[k]);
        size_t want = bounds[k] < n ? bounds[k] : n;
        assert_int_equal(rc, bounds[k] < n ? CHOIR_ETOOBIG : CHOIR_OK);
        assert_int_equal(b.len, 5 + want);
        assert_memory_equal(b.data, "head:", 5);
        for (size_t i = 0; i < want; i++)
            if ((unsigned char)b.data[5 + i] != i % 251)
                fail_msg("byte %zu of bound %zu", i, bounds[k]);
        assert_int_equal(b.data[b.len], 0);
        choir_buf_free(&b);
        fclose(f);
    }
    /* an empty file appends nothing and is not an error */
    FILE *f = pattern_file(0);
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    assert_int_equal(choir_buf_read(&b, f, 10), CHOIR_OK);
    assert_int_equal(b.len, 0);
    choir_buf_free(&b);
    fclose(f);
    /* a stream opened for writing only cannot be read */
    FILE *w = fopen("/dev/null", "w");
    assert_non_null(w);
    assert_int_equal(choir_buf_read(&b, w, 10), CHOIR_EIO);
    choir_buf_free(&b);
    fclose(w);
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
        cmocka_unit_test(test_clear),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
