/* choir/safetensors.h: reading and writing safetensors checkpoints.
 *
 * A checkpoint is opened from a .safetensors file, a sharded index
 * (model.safetensors.index.json) or a model directory holding either. Files are
 * memory-mapped read-only; tensor data is pointed into, never copied, so pages
 * are read from disk only when a tensor is used. The header is validated
 * strictly before anything is exposed: header length within the file, JSON well
 * formed, known dtypes, offsets inside the data area, no two tensors
 * overlapping, shape x dtype size equal to the byte span, unique names. Any
 * failure names the file and the problem. */
#ifndef CHOIR_SAFETENSORS_H
#define CHOIR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "choir/dtype.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_ST_MAX_DIMS 8

typedef struct choir_st_tensor {
    const char *name;                 /* owned by the checkpoint */
    choir_dtype dtype;
    int ndim;                         /* 0 for a scalar */
    int64_t shape[CHOIR_ST_MAX_DIMS];
    int64_t numel;                    /* product of shape (1 for a scalar) */
    const void *data;                 /* into the mapping; little-endian, row-major */
    size_t nbytes;
} choir_st_tensor;

typedef struct choir_st choir_st;

/* Opens `path`: a .safetensors file, a *.index.json, or a directory holding
 * model.safetensors or model.safetensors.index.json. NULL (and err) on failure. */
choir_st *choir_st_open(const char *path, choir_err *err);
/* Unmaps everything; pointers from this checkpoint become invalid. NULL is a no-op. */
void choir_st_close(choir_st *st);

int choir_st_count(const choir_st *st);
/* The i-th tensor (0 <= i < count), in file order (shards in index order).
 * Valid until choir_st_close. */
const choir_st_tensor *choir_st_at(const choir_st *st, int i);
/* The tensor named `name`, or NULL. */
const choir_st_tensor *choir_st_find(const choir_st *st, const char *name);
/* A value from the "__metadata__" map of the (first) file, or NULL. */
const char *choir_st_metadata(const choir_st *st, const char *key);
/* Total bytes of tensor data across all files. */
size_t choir_st_data_bytes(const choir_st *st);

/* Checks that `name` exists with `dtype` and the given shape; fills err naming
 * the tensor and both shapes on a mismatch. Returns the tensor or NULL. */
const choir_st_tensor *choir_st_expect(const choir_st *st, const char *name, choir_dtype dtype,
                                       int ndim, const int64_t *shape, choir_err *err);

/* Writer: collects tensors, then writes one file. Data is copied at add time
 * unless added with choir_st_writer_add_ref (then it must live until save). */
typedef struct choir_st_writer choir_st_writer;

choir_st_writer *choir_st_writer_create(choir_err *err);
void choir_st_writer_free(choir_st_writer *w);
int choir_st_writer_add(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                        const int64_t *shape, const void *data, choir_err *err);
int choir_st_writer_add_ref(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                            const int64_t *shape, const void *data, choir_err *err);
int choir_st_writer_set_metadata(choir_st_writer *w, const char *key, const char *value,
                                 choir_err *err);
/* Writes the file (tensors sorted by name, as the reference writer does), via a
 * temporary file renamed into place. */
int choir_st_writer_save(choir_st_writer *w, const char *path, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
