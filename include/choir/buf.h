/* choir/buf.h: the growable byte buffer (text being built, encoded audio,
 * a response body). Memory comes from the counted allocator in the buffer's
 * category.
 *
 * Failure is sticky: when an append cannot grow the buffer, it sets `oom`,
 * returns CHOIR_ENOMEM, and every later append does nothing, so a writer
 * appends freely and checks once (choir_buf_take, or `oom`). The contents
 * are always NUL-terminated after `len` bytes once anything was appended,
 * so a text buffer's `data` is a C string. */
#ifndef CHOIR_BUF_H
#define CHOIR_BUF_H

#include <stddef.h>
#include <stdio.h>

#include "choir/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_buf {
    char *data;   /* NULL until the first append; owned by the buffer */
    size_t len;   /* bytes held, not counting the terminating NUL */
    size_t cap;   /* bytes allocated */
    int oom;      /* 1 once an append failed */
    choir_mem_category category;
} choir_buf;

/* An empty buffer whose memory is counted in `category`; needs no free until
 * something is appended (choir_buf_free is always safe). */
#define CHOIR_BUF_INIT(cat) {NULL, 0, 0, 0, (cat)}

/* Makes room for `n` more bytes (and the NUL). Returns 0, or CHOIR_ENOMEM
 * (also when already failed). */
int choir_buf_reserve(choir_buf *b, size_t n);
/* Appends `n` bytes (data may be NULL only when n is 0). Returns 0 or CHOIR_ENOMEM. */
int choir_buf_append(choir_buf *b, const void *data, size_t n);
/* Appends a C string. */
int choir_buf_puts(choir_buf *b, const char *s);
/* Appends printf-formatted text. Returns 0 or CHOIR_ENOMEM. */
int choir_buf_printf(choir_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends what `f` gives until its end, at most `max` bytes (SIZE_MAX: no
 * bound). Returns 0; CHOIR_ETOOBIG when `f` has more than `max` bytes (the
 * buffer then holds the first `max`); CHOIR_EIO on a read error (errno says
 * which); CHOIR_ENOMEM. */
int choir_buf_read(choir_buf *b, FILE *f, size_t max);
/* Hands the contents to the caller, who frees them with choir_free, and
 * empties the buffer. An empty buffer gives an allocated "" (len 0). After a
 * failed append, or when that allocation fails, frees everything and returns
 * NULL. `len` (may be NULL) receives the length. */
char *choir_buf_take(choir_buf *b, size_t *len);
/* Empties the buffer and keeps its memory for the next appends, so a
 * buffer refilled again and again (a response drained as it is produced)
 * stops allocating once it is large enough. A failed buffer stays failed. */
void choir_buf_clear(choir_buf *b);
/* Frees the contents and empties the buffer (its category stays). NULL is a no-op. */
void choir_buf_free(choir_buf *b);

#ifdef __cplusplus
}
#endif
#endif
