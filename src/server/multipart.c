/* multipart/form-data parsing (see multipart.h). The body is scanned once:
 * each delimiter is found with a plain search, part headers are parsed line by
 * line, and NULs are written over bytes already consumed (a closing quote, a
 * header line's CR, the CR that starts the next delimiter). */
#include <stdlib.h>
#include <string.h>

#include "choir/parse.h"
#include "server/multipart.h"

static int ieq_prefix(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++) {
        char a = *s, b = *prefix;
        if (a >= 'A' && a <= 'Z')
            a = (char)(a - 'A' + 'a');
        if (b >= 'A' && b <= 'Z')
            b = (char)(b - 'A' + 'a');
        if (a != b)
            return 0;
    }
    return 1;
}

static const char *find_bytes(const char *hay, size_t hay_len, const char *needle, size_t n)
{
    if (n == 0 || hay_len < n)
        return NULL;
    const char *end = hay + hay_len - n;
    for (const char *p = hay; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p)
            return NULL;
        if (memcmp(p, needle, n) == 0)
            return p;
    }
    return NULL;
}

/* RFC 2046 bchars: DIGIT / ALPHA / "'()+_,-./:=?" and space (not last). */
static int is_bchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || strchr("'()+_,-./:=? ", c);
}

int choir_multipart_boundary(const char *content_type, char *out, size_t cap, choir_err *err)
{
    if (!content_type || !ieq_prefix(content_type, "multipart/form-data"))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "Content-Type must be multipart/form-data");
    const char *p = content_type + strlen("multipart/form-data");
    const char *b = NULL;
    while ((p = strchr(p, ';')) != NULL) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (ieq_prefix(p, "boundary=")) {
            b = p + strlen("boundary=");
            break;
        }
    }
    if (!b)
        return choir_err_set(err, CHOIR_EINVAL, "multipart/form-data without a boundary parameter");
    size_t n = 0;
    if (*b == '"') {
        b++;
        const char *q = strchr(b, '"');
        if (!q)
            return choir_err_set(err, CHOIR_EINVAL, "unterminated quoted boundary");
        n = (size_t)(q - b);
    } else {
        while (b[n] && b[n] != ';' && b[n] != ' ' && b[n] != '\t')
            n++;
    }
    if (n == 0 || n > CHOIR_MULTIPART_MAX_BOUNDARY || n + 1 > cap)
        return choir_err_set(err, CHOIR_EINVAL, "multipart boundary is empty or longer than %d bytes",
                             CHOIR_MULTIPART_MAX_BOUNDARY);
    for (size_t i = 0; i < n; i++)
        if (!is_bchar(b[i]) || (i + 1 == n && b[i] == ' '))
            return choir_err_set(err, CHOIR_EINVAL, "multipart boundary holds a character RFC 2046 forbids");
    memcpy(out, b, n);
    out[n] = 0;
    return 0;
}

/* Reads the parameter `key` ("name", "filename") of a Content-Disposition
 * value `v` (NUL-terminated, writable). Quoted values end at the next quote,
 * which is overwritten with NUL; token values end at ';' or whitespace. */
static int disposition_param(char *v, const char *key, const char **out)
{
    size_t klen = strlen(key);
    char *p = v;
    while ((p = strchr(p, ';')) != NULL) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!ieq_prefix(p, key) || p[klen] != '=')
            continue;
        p += klen + 1;
        if (*p == '"') {
            char *q = strchr(p + 1, '"');
            if (!q)
                return -1;
            *q = 0;
            *out = p + 1;
            /* the parameters after it are still read: skip past the NUL */
            return 0;
        }
        char *e = p;
        while (*e && *e != ';' && *e != ' ' && *e != '\t')
            e++;
        if (e == p)
            return -1;
        if (*e)
            *e = 0;
        *out = p;
        return 0;
    }
    return 1;
}

/* Parses the header block [p, end) of one part (end points at the blank
 * line's CRLF, exclusive). */
static int parse_part_headers(char *p, char *end, choir_multipart_part *part, int index, choir_err *err)
{
    char *disposition = NULL;
    while (p < end) {
        char *eol = (char *)find_bytes(p, (size_t)(end - p) + 2, "\r\n", 2);
        if (!eol || eol > end)
            return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: header line without CRLF", index);
        if (eol - p > CHOIR_MULTIPART_MAX_HEADER)
            return choir_err_set(err, CHOIR_ETOOBIG, "multipart part %d: header line over %d bytes", index,
                                 CHOIR_MULTIPART_MAX_HEADER);
        for (char *c = p; c < eol; c++)
            if ((unsigned char)*c < 0x20 && *c != '\t')
                return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: control byte in a header", index);
        *eol = 0;
        char *colon = strchr(p, ':');
        if (!colon || colon == p)
            return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: header line without a name", index);
        char *value = colon + 1;
        while (*value == ' ' || *value == '\t')
            value++;
        if ((size_t)(colon - p) == strlen("content-disposition") && ieq_prefix(p, "content-disposition"))
            disposition = value;
        else if ((size_t)(colon - p) == strlen("content-type") && ieq_prefix(p, "content-type"))
            part->content_type = value;
        p = eol + 2;
    }
    if (!disposition || !ieq_prefix(disposition, "form-data"))
        return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: no Content-Disposition: form-data", index);
    /* filename first: reading name writes a NUL that would hide what follows */
    const char *name = NULL, *filename = NULL;
    char *copy_end = disposition + strlen(disposition);
    int rf = disposition_param(disposition, "filename", &filename);
    /* the NUL written for filename may cut the value short, so name is
     * searched in both halves: the text before filename's value ends in '"'
     * or ';' and still holds name when it came first */
    int rn = disposition_param(disposition, "name", &name);
    if (rn == 1 && filename) {
        const char *after = filename + strlen(filename) + 1;
        if (after < copy_end)
            rn = disposition_param((char *)after, "name", &name);
    }
    if (rf < 0 || rn < 0)
        return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: malformed Content-Disposition", index);
    if (rn != 0 || !name || !*name)
        return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: Content-Disposition without a name", index);
    part->name = name;
    part->filename = rf == 0 ? filename : NULL;
    return 0;
}

int choir_multipart_parse(char *body, size_t len, const char *boundary, choir_multipart *out, choir_err *err)
{
    memset(out, 0, sizeof *out);
    char delim[CHOIR_MULTIPART_MAX_BOUNDARY + 5];
    size_t blen = boundary ? strlen(boundary) : 0;
    if (blen == 0 || blen > CHOIR_MULTIPART_MAX_BOUNDARY)
        return choir_err_set(err, CHOIR_EINVAL, "bad multipart boundary");
    /* delim is CRLF "--" boundary; the first delimiter may also start the body */
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, boundary, blen);
    size_t dlen = blen + 4;
    const char *end = body + len;
    char *p;
    if (len >= dlen - 2 && memcmp(body, delim + 2, dlen - 2) == 0) {
        p = body + dlen - 2;
    } else {
        const char *d = find_bytes(body, len, delim, dlen);
        if (!d)
            return choir_err_set(err, CHOIR_EFORMAT, "multipart body has no opening boundary");
        p = (char *)d + dlen;
    }
    for (;;) {
        /* after a delimiter: "--" closes the body, else padding and CRLF */
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return choir_err_set(err, CHOIR_EFORMAT, "multipart boundary not followed by CRLF");
        p += 2;
        if (out->n_parts == CHOIR_MULTIPART_MAX_PARTS)
            return choir_err_set(err, CHOIR_ETOOBIG, "multipart body has more than %d parts",
                                 CHOIR_MULTIPART_MAX_PARTS);
        choir_multipart_part *part = &out->parts[out->n_parts];
        int index = out->n_parts;
        char *hdr_end;
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            hdr_end = p; /* a part with no headers: refused below for lack of a name */
        } else {
            hdr_end = (char *)find_bytes(p, (size_t)(end - p), "\r\n\r\n", 4);
            if (!hdr_end)
                return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: headers not ended by a blank line",
                                     index);
            hdr_end += 2;
        }
        char *data = hdr_end + 2;
        const char *next = find_bytes(data, (size_t)(end - data), delim, dlen);
        if (!next)
            return choir_err_set(err, CHOIR_EFORMAT, "multipart part %d: no closing boundary", index);
        int rc = parse_part_headers(p, hdr_end, part, index, err);
        if (rc < 0)
            return rc;
        part->data = data;
        part->len = (size_t)(next - data);
        data[part->len] = 0; /* over the CR of the delimiter, already found */
        out->n_parts++;
        p = (char *)next + dlen;
    }
}

const choir_multipart_part *choir_multipart_find(const choir_multipart *m, const char *name)
{
    for (int i = 0; i < m->n_parts; i++)
        if (strcmp(m->parts[i].name, name) == 0)
            return &m->parts[i];
    return NULL;
}

int choir_multipart_number(const choir_multipart *m, const char *name, double lo, double hi, int whole, double *v)
{
    const choir_multipart_part *p = choir_multipart_find(m, name);
    if (!p || p->len == 0)
        return 0;
    /* a NUL inside the part would end the number early */
    if (strlen(p->data) != p->len || choir_parse_number(p->data, lo, hi, whole, v) < 0)
        return CHOIR_EINVAL;
    return 1;
}
