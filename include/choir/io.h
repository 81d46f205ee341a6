/* choir/io.h: small file helpers: bounded whole-file reads, atomic writes
 * through a temporary file renamed into place, mkdir -p. */
#ifndef CHOIR_IO_H
#define CHOIR_IO_H

#include <stddef.h>
#include <stdio.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#ifdef __cplusplus
}
#endif
#endif

/* Reads the whole file at `path` (at most `max_bytes`) into a block from
 * choir_alloc that the caller frees; a NUL is appended after `*len` bytes. */
int choir_io_read_file(const char *path, size_t max_bytes, char **out, size_t *len, choir_err *err);

/* Writes `a` then `b` (either may be empty) to `path` through a temporary file in
 * the same directory that is renamed into place, so readers never see half a file. */
int choir_io_write_atomic(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                          choir_err *err);

/* Opens a temporary file beside `path` for writing; its name goes to tmp_path
 * (at least `cap` bytes). Returns NULL and fills err on failure. */
FILE *choir_io_tmp_open(const char *path, char *tmp_path, size_t cap, choir_err *err);
/* Flushes and closes `f` and renames tmp_path over path; removes tmp_path on failure. */
int choir_io_tmp_commit(FILE *f, const char *tmp_path, const char *path, choir_err *err);
/* Closes `f` and removes tmp_path (error path). */
void choir_io_tmp_abort(FILE *f, const char *tmp_path);

/* Creates directory `path` and any missing parents (as `mkdir -p`). An
 * existing directory is fine; an existing non-directory is an error. */
int choir_io_make_dirs(const char *path, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
