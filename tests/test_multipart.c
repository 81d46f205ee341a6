/* The multipart/form-data parser: well-formed bodies give exact fields and
 * bytes; every malformed body in a sweep (truncations at every length, byte
 * flips, hostile headers) is refused or parsed without reading outside the
 * body (ASan checks the latter, since each body is an exact-size copy). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "choir/parse.h"
#include "server/multipart.h"

static const char BODY[] = "--XyZ\r\n"
                           "Content-Disposition: form-data; name=\"model\"\r\n"
                           "\r\n"
                           "whisper-tiny\r\n"
                           "--XyZ\r\n"
                           "Content-Disposition: form-data; filename=\"a.wav\"; name=\"file\"\r\n"
                           "Content-Type: audio/wav\r\n"
                           "\r\n"
                           "RIFF\0\r\n--X\r\nbin\r\n"
                           "--XyZ\r\n"
                           "content-disposition: form-data; name=timestamp_granularities[]\r\n"
                           "\r\n"
                           "\r\n"
                           "--XyZ--\r\n";

/* An exact-size heap copy, so that ASan catches any read past the end. */
static char *dup_exact(const char *s, size_t n)
{
    char *p = malloc(n ? n : 1);
    assert_non_null(p);
    memcpy(p, s, n);
    return p;
}

static void test_boundary_header(void **state)
{
    (void)state;
    char b[80];
    assert_int_equal(choir_multipart_boundary("multipart/form-data; boundary=abc", b, sizeof b, NULL), 0);
    assert_string_equal(b, "abc");
    assert_int_equal(choir_multipart_boundary("Multipart/Form-Data; charset=x; boundary=\"a b:c\"", b, sizeof b, NULL), 0);
    assert_string_equal(b, "a b:c");
    assert_int_equal(choir_multipart_boundary("application/json", b, sizeof b, NULL), CHOIR_EUNSUPPORTED);
    assert_int_equal(choir_multipart_boundary("multipart/form-data", b, sizeof b, NULL), CHOIR_EINVAL);
    assert_int_equal(choir_multipart_boundary("multipart/form-data; boundary=", b, sizeof b, NULL), CHOIR_EINVAL);
    assert_int_equal(choir_multipart_boundary("multipart/form-data; boundary=\"abc", b, sizeof b, NULL), CHOIR_EINVAL);
    assert_int_equal(choir_multipart_boundary("multipart/form-data; boundary=a{b", b, sizeof b, NULL), CHOIR_EINVAL);
    char long_ct[200];
    snprintf(long_ct, sizeof long_ct, "multipart/form-data; boundary=%0*d", 71, 0);
    assert_int_equal(choir_multipart_boundary(long_ct, b, sizeof b, NULL), CHOIR_EINVAL);
    assert_int_equal(choir_multipart_boundary(NULL, b, sizeof b, NULL), CHOIR_EUNSUPPORTED);
}

static void test_parse_fields(void **state)
{
    (void)state;
    size_t n = sizeof BODY - 1;
    char *body = dup_exact(BODY, n);
    choir_multipart m;
    choir_err err = {0};
    assert_int_equal(choir_multipart_parse(body, n, "XyZ", &m, &err), 0);
    assert_int_equal(m.n_parts, 3);
    const choir_multipart_part *model = choir_multipart_find(&m, "model");
    assert_non_null(model);
    assert_string_equal(model->data, "whisper-tiny");
    assert_null(model->filename);
    const choir_multipart_part *file = choir_multipart_find(&m, "file");
    assert_non_null(file);
    assert_string_equal(file->filename, "a.wav");
    assert_string_equal(file->content_type, "audio/wav");
    /* binary data holding NUL, CRLF and a prefix of the delimiter survives */
    assert_int_equal(file->len, 15);
    assert_memory_equal(file->data, "RIFF\0\r\n--X\r\nbin", 15);
    const choir_multipart_part *g = choir_multipart_find(&m, "timestamp_granularities[]");
    assert_non_null(g);
    assert_int_equal(g->len, 0);
    assert_null(choir_multipart_find(&m, "nope"));
    free(body);
}

/* Numbers from form fields are read as the flags' are: all of the part,
 * bounded, whole when asked, never NaN. */
static void test_numbers(void **state)
{
    (void)state;
    static const char body[] = "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n2.5\r\n"
                               "--b\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\nnan\r\n"
                               "--b\r\nContent-Disposition: form-data; name=\"z\"\r\n\r\n7\0x\r\n"
                               "--b\r\nContent-Disposition: form-data; name=\"e\"\r\n\r\n\r\n"
                               "--b--\r\n";
    char *copy = dup_exact(body, sizeof body - 1);
    choir_multipart m;
    assert_int_equal(choir_multipart_parse(copy, sizeof body - 1, "b", &m, NULL), 0);
    double v = -7;
    assert_int_equal(choir_multipart_number(&m, "a", 0, 10, 0, &v), 1);
    assert_true(v == 2.5);
    v = -7;
    assert_int_equal(choir_multipart_number(&m, "a", 0, 10, 1, &v), CHOIR_EINVAL); /* not whole */
    assert_int_equal(choir_multipart_number(&m, "a", 0, 2, 0, &v), CHOIR_EINVAL);  /* above hi */
    assert_int_equal(choir_multipart_number(&m, "n", -INFINITY, INFINITY, 0, &v), CHOIR_EINVAL);
    assert_int_equal(choir_multipart_number(&m, "z", 0, 10, 0, &v), CHOIR_EINVAL); /* a NUL inside */
    assert_int_equal(choir_multipart_number(&m, "e", 0, 10, 0, &v), 0);           /* empty: absent */
    assert_int_equal(choir_multipart_number(&m, "none", 0, 10, 0, &v), 0);
    assert_true(v == -7);
    /* seeds: any 64-bit value exactly, nothing else */
    uint64_t u = 3;
    assert_int_equal(choir_parse_u64("18446744073709551615", &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(choir_parse_u64("0x10", &u), 0);
    assert_true(u == 16);
    static const char *const not_u64[] = {"18446744073709551616", "-1", " 1", "+1", "1.5", "0x", "1e3", "", "nan"};
    for (size_t i = 0; i < sizeof not_u64 / sizeof not_u64[0]; i++)
        assert_int_equal(choir_parse_u64(not_u64[i], &u), CHOIR_EINVAL);
    assert_true(u == 16);
    free(copy);
}

static void test_preamble_and_padding(void **state)
{
    (void)state;
    const char *s = "ignored preamble\r\n--b  \r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--b--";
    char *body = dup_exact(s, strlen(s));
    choir_multipart m;
    assert_int_equal(choir_multipart_parse(body, strlen(s), "b", &m, NULL), 0);
    assert_int_equal(m.n_parts, 1);
    assert_string_equal(m.parts[0].data, "v");
    free(body);
}

static void expect_refused(const char *s, int code)
{
    char *body = dup_exact(s, strlen(s));
    choir_multipart m;
    choir_err err = {0};
    int rc = choir_multipart_parse(body, strlen(s), "b", &m, &err);
    if (rc != code)
        fail_msg("body %s: expected %d, got %d (%s)", s, code, rc, err.msg);
    assert_true(err.msg[0] != 0);
    free(body);
}

static void test_malformed(void **state)
{
    (void)state;
    expect_refused("", CHOIR_EFORMAT);
    expect_refused("no boundary at all", CHOIR_EFORMAT);
    expect_refused("--b", CHOIR_EFORMAT);
    expect_refused("--bX\r\n", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: form-data; name=a\r\n\r\nv", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: form-data; name=a\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Type: text/plain\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: attachment; name=a\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: form-data; name=\"a\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: form-data; name=\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nno colon here\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: form-data; name=a\x01\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\n\r\nv\r\n--b--", CHOIR_EFORMAT);
    expect_refused("--b\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--bjunk", CHOIR_EFORMAT);
    /* limits */
    size_t big = CHOIR_MULTIPART_MAX_HEADER + 200;
    char *s = malloc(big + 100);
    assert_non_null(s);
    int k = snprintf(s, big + 100, "--b\r\nContent-Disposition: form-data; name=a; x=");
    memset(s + k, 'x', big - (size_t)k);
    strcpy(s + big, "\r\n\r\nv\r\n--b--");
    expect_refused(s, CHOIR_ETOOBIG);
    free(s);
    size_t cap = (CHOIR_MULTIPART_MAX_PARTS + 2) * 64;
    s = malloc(cap);
    assert_non_null(s);
    size_t len = 0;
    for (int i = 0; i < CHOIR_MULTIPART_MAX_PARTS + 1; i++)
        len += (size_t)snprintf(s + len, cap - len, "--b\r\nContent-Disposition: form-data; name=f%d\r\n\r\nv\r\n", i);
    snprintf(s + len, cap - len, "--b--");
    expect_refused(s, CHOIR_ETOOBIG);
    free(s);
}

/* Every truncation and every single-byte corruption of a valid body either
 * parses (with parts inside the body) or is refused with a message. */
static void test_sweep(void **state)
{
    (void)state;
    size_t n = sizeof BODY - 1;
    const char flips[] = {'\r', '\n', '-', '"', ';', ':', 0, 'Z'};
    for (size_t cut = 0; cut <= n; cut++) {
        char *body = dup_exact(BODY, cut);
        choir_multipart m;
        choir_err err = {0};
        int rc = choir_multipart_parse(body, cut, "XyZ", &m, &err);
        assert_true(rc == 0 || err.msg[0]);
        /* the close delimiter is the last thing the parser needs */
        if (cut < n - 2)
            assert_true(rc < 0);
        free(body);
    }
    for (size_t i = 0; i < n; i++)
        for (size_t f = 0; f < sizeof flips; f++) {
            char *body = dup_exact(BODY, n);
            body[i] = flips[f];
            choir_multipart m;
            choir_err err = {0};
            int rc = choir_multipart_parse(body, n, "XyZ", &m, &err);
            if (rc == 0) {
                for (int p = 0; p < m.n_parts; p++)
                    assert_true(m.parts[p].data >= body && m.parts[p].data + m.parts[p].len < body + n);
            } else {
                assert_true(err.msg[0]);
            }
            free(body);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boundary_header),
        cmocka_unit_test(test_parse_fields),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_preamble_and_padding),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
