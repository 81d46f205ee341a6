/* The growable byte buffer (choir/buf.h). It grows by doubling from 64
 * bytes, so n appends cost O(n) copies in all. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/buf.h"
#include "choir/error.h"

int choir_buf_reserve(choir_buf *b, size_t n)
{
    if (b->oom)
        return CHOIR_ENOMEM;
    if (n > (size_t)-1 - b->len - 1) {
        b->oom = 1;
        return CHOIR_ENOMEM;
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return CHOIR_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > (size_t)-1 / 2 ? need : cap * 2;
    char *grown = b->data ? choir_realloc(b->data, cap) : choir_alloc(b->category, cap);
    if (!grown) {
        b->oom = 1;
        return CHOIR_ENOMEM;
    }
    b->data = grown;
    b->cap = cap;
    return CHOIR_OK;
}

int choir_buf_append(choir_buf *b, const void *data, size_t n)
{
    if (choir_buf_reserve(b, n) != CHOIR_OK)
        return CHOIR_ENOMEM;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
    return CHOIR_OK;
}

int choir_buf_puts(choir_buf *b, const char *s)
{
    return choir_buf_append(b, s, strlen(s));
}

int choir_buf_printf(choir_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return CHOIR_ENOMEM;
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return CHOIR_ENOMEM;
    }
    if ((size_t)n < sizeof small)
        return choir_buf_append(b, small, (size_t)n);
    if (choir_buf_reserve(b, (size_t)n) != CHOIR_OK)
        return CHOIR_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return CHOIR_OK;
}

int choir_buf_read(choir_buf *b, FILE *f, size_t max)
{
    size_t got = 0;
    for (;;) {
        if (choir_buf_reserve(b, (size_t)64 << 10) != CHOIR_OK)
            return CHOIR_ENOMEM;
        /* one byte past `max` is asked for, to tell "exactly max" from "more" */
        size_t want = b->cap - b->len - 1;
        if (max - got < want)
            want = max - got + 1;
        size_t n = fread(b->data + b->len, 1, want, f);
        got += n;
        b->len += n;
        if (got > max) {
            b->len -= got - max;
            b->data[b->len] = 0;
            return CHOIR_ETOOBIG;
        }
        b->data[b->len] = 0;
        if (n < want)
            return ferror(f) ? CHOIR_EIO : CHOIR_OK;
    }
}

char *choir_buf_take(choir_buf *b, size_t *len)
{
    if (!b->oom && !b->data)
        choir_buf_append(b, "", 0);
    char *out = b->oom ? NULL : b->data;
    if (len)
        *len = out ? b->len : 0;
    if (!out)
        choir_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    return out;
}

void choir_buf_clear(choir_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = 0;
}

void choir_buf_free(choir_buf *b)
{
    if (!b)
        return;
    choir_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
