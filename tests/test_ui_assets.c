/* The embedded web page: every file under web/ is served byte for byte at
 * /ui/NAME with its type, "/" is index.html, and nothing else resolves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "choir/error.h"
#include "server/ui_assets.h"

static unsigned char *read_source_file(const char *rel, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", CHOIR_SOURCE_DIR, rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void assert_serves_file(const char *url, const char *rel, const char *mime_prefix)
{
    const unsigned char *data = NULL;
    size_t len = 0;
    const char *mime = NULL;
    assert_int_equal(choir_ui_asset(url, &data, &len, &mime), 0);
    size_t want_len = 0;
    unsigned char *want = read_source_file(rel, &want_len);
    assert_non_null(want);
    assert_int_equal(len, want_len);
    assert_memory_equal(data, want, len);
    assert_int_equal(data[len], 0);
    assert_non_null(mime);
    assert_int_equal(strncmp(mime, mime_prefix, strlen(mime_prefix)), 0);
    free(want);
}

static void test_files_byte_for_byte(void **state)
{
    (void)state;
    assert_serves_file("/ui/index.html", "web/index.html", "text/html");
    assert_serves_file("/ui/app.js", "web/app.js", "text/javascript");
    assert_serves_file("/ui/style.css", "web/style.css", "text/css");
}

static void test_root_is_index(void **state)
{
    (void)state;
    assert_serves_file("/", "web/index.html", "text/html");
    assert_serves_file("/ui", "web/index.html", "text/html");
    assert_serves_file("/ui/", "web/index.html", "text/html");
}

static void test_other_paths_not_found(void **state)
{
    (void)state;
    static const char *paths[] = {"",          "/index.html", "/app.js",         "/ui/nope.js", "/ui/../CMakeLists.txt",
                                  "/ui//app.js", "/ui/app.js/", "/ui/APP.JS", "/v1/models",  "/uix/app.js"};
    const unsigned char *data = (const unsigned char *)"sentinel";
    size_t len = 7;
    const char *mime = "sentinel";
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        assert_int_equal(choir_ui_asset(paths[i], &data, &len, &mime), CHOIR_ENOTFOUND);
        assert_int_equal(len, 7); /* outputs untouched on failure */
        assert_string_equal(mime, "sentinel");
    }
}

static void test_null_arguments(void **state)
{
    (void)state;
    const unsigned char *data;
    size_t len;
    const char *mime;
    assert_int_equal(choir_ui_asset(NULL, &data, &len, &mime), CHOIR_EINVAL);
    assert_int_equal(choir_ui_asset("/", NULL, &len, &mime), CHOIR_EINVAL);
    assert_int_equal(choir_ui_asset("/", &data, NULL, &mime), CHOIR_EINVAL);
    assert_int_equal(choir_ui_asset("/", &data, &len, NULL), CHOIR_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_byte_for_byte),
        cmocka_unit_test(test_root_is_index),
        cmocka_unit_test(test_other_paths_not_found),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
