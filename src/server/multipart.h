/* multipart/form-data (RFC 7578) parsing for uploads.
 *
 * The parser works in place on a body the caller owns and may modify: it
 * writes NUL terminators into the body so that part names and text values can
 * be used as C strings without copying. It is strict (a body that does not
 * follow the grammar is refused, never guessed at) and bounded (at most
 * CHOIR_MULTIPART_MAX_PARTS parts, header lines of at most
 * CHOIR_MULTIPART_MAX_HEADER bytes), so malformed or hostile input costs at
 * most one linear pass over the body. */
#ifndef CHOIR_SERVER_MULTIPART_H
#define CHOIR_SERVER_MULTIPART_H

#include <stddef.h>

#include "choir/error.h"

#define CHOIR_MULTIPART_MAX_PARTS 64
#define CHOIR_MULTIPART_MAX_HEADER 1024
#define CHOIR_MULTIPART_MAX_BOUNDARY 70 /* RFC 2046's limit */

typedef struct choir_multipart_part {
    const char *name;         /* the form field's name (never NULL) */
    const char *filename;     /* the uploaded file's name, or NULL for a plain field */
    const char *content_type; /* the part's Content-Type, or NULL */
    const char *data;         /* the part's bytes; data[len] is a NUL the parser wrote */
    size_t len;
} choir_multipart_part;

typedef struct choir_multipart {
    choir_multipart_part parts[CHOIR_MULTIPART_MAX_PARTS];
    int n_parts;
} choir_multipart;

/* Copies the boundary parameter of a `multipart/form-data; boundary=...`
 * Content-Type header value (quoted or not) into `out` (cap bytes, NUL
 * included). Returns 0, CHOIR_EUNSUPPORTED when the type is not
 * multipart/form-data, CHOIR_EINVAL when the boundary is missing, empty, too
 * long or holds characters RFC 2046 does not allow. */
int choir_multipart_boundary(const char *content_type, char *out, size_t cap, choir_err *err);

/* Parses `body` (`len` bytes, modified in place) delimited by `boundary`.
 * Every pointer in `out` points into `body` and stays valid as long as it
 * does. Returns 0, or CHOIR_EFORMAT with a message naming the first problem
 * (missing delimiter, bad part header, no Content-Disposition name, missing
 * close delimiter), CHOIR_ETOOBIG for too many parts or too long a header. */
int choir_multipart_parse(char *body, size_t len, const char *boundary, choir_multipart *out, choir_err *err);

/* The first part named `name`, or NULL. */
const choir_multipart_part *choir_multipart_find(const choir_multipart *m, const char *name);
/* The number in the part named `name`, read as every flag's number is
 * (choir_parse_number: all of the part, within [lo, hi], a whole number when
 * `whole` is set, never NaN): 1 and *v when it holds one, 0 with *v untouched
 * when the part is absent or empty, CHOIR_EINVAL (*v untouched) otherwise. */
int choir_multipart_number(const choir_multipart *m, const char *name, double lo, double hi, int whole, double *v);

#endif
