/* Sizes and bounded numbers from text (choir/parse.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/error.h"
#include "choir/parse.h"

int choir_parse_size(const char *s, int64_t *out)
{
    /* strtod alone would also take " 8", "+8", "inf" and "0x10" */
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.') || (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
        return CHOIR_EINVAL;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || isinf(v))
        return CHOIR_EINVAL;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; break;
    case 'm': case 'M': mul = 1024.0 * 1024; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
    }
    if (mul > 1) {
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    /* 2^63 is the first double above INT64_MAX */
    if (*end || v * mul >= 9223372036854775808.0)
        return CHOIR_EINVAL;
    *out = (int64_t)llround(v * mul);
    return CHOIR_OK;
}

int choir_parse_number(const char *s, double lo, double hi, int whole, double *out)
{
    if (!s || !*s)
        return CHOIR_EINVAL;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi) || (whole && v != floor(v)))
        return CHOIR_EINVAL;
    *out = v;
    return CHOIR_OK;
}

int choir_parse_u64(const char *s, uint64_t *out)
{
    /* strtoull alone would take a sign ("-1" is 2^64 - 1) and leading spaces */
    if (!s || *s < '0' || *s > '9')
        return CHOIR_EINVAL;
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    if (hex && !isxdigit((unsigned char)s[2]))
        return CHOIR_EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long u = strtoull(s, &end, hex ? 16 : 10);
    if (!end || *end || errno)
        return CHOIR_EINVAL;
    *out = (uint64_t)u;
    return CHOIR_OK;
}
