/* Reading the central directory of a zip archive held in memory (not public
 * API). Stored entries are pointed into; deflated ones are inflated on request
 * through libzip. ZIP64 archives (over 4 GiB) are understood. */
#ifndef CHOIR_IO_ZIPREAD_H
#define CHOIR_IO_ZIPREAD_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

typedef struct zr_entry {
    const char *name;       /* not NUL-terminated: name_len bytes in the archive */
    size_t name_len;
    int method;             /* 0 stored, 8 deflated */
    uint64_t size;          /* uncompressed bytes */
    uint64_t comp_size;
    const uint8_t *data;    /* the stored (possibly compressed) bytes, inside the archive */
} zr_entry;

typedef struct zr_archive {
    const uint8_t *base;
    size_t len;
    zr_entry *entries;
    int count;
    int *by_name;           /* entry indices sorted by name, for zr_find */
} zr_archive;

/* Parses the directory of `len` bytes at `base`; every entry's bytes are checked
 * to lie inside the archive. `label` names the archive in errors. */
int zr_open(zr_archive *z, const uint8_t *base, size_t len, const char *label, choir_err *err);
void zr_close(zr_archive *z);
/* The entry named exactly `name`, or NULL. */
const zr_entry *zr_find(const zr_archive *z, const char *name);
/* Copies an entry's uncompressed bytes into a new choir_alloc block (caller frees).
 * At most `max_bytes`. */
int zr_extract(const zr_archive *z, const zr_entry *e, uint64_t max_bytes, uint8_t **out,
               const char *label, choir_err *err);

#endif
