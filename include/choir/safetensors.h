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
/* Parses a safetensors image held in memory (`len` bytes at `data`) with the same
 * checks as choir_st_open. Nothing is copied: `data` must stay valid and unchanged
 * until choir_st_close. `label` names the buffer in error messages (NULL gives
 * "<memory>"). NULL (and err) on failure. */
choir_st *choir_st_open_memory(const void *data, size_t len, const char *label, choir_err *err);
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

/* Writes "[d0, d1, ...]" into buf (always NUL-terminated when cap > 0). */
int choir_st_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape);

/* Writer: collects tensors, then writes one file. Data is copied at add time
 * unless added with choir_st_writer_add_ref (then it must live until save) or
 * choir_st_writer_add_fill (then it is produced during save). Adding fails with
 * CHOIR_EINVAL for an empty name, "__metadata__", a bad dtype, rank or shape;
 * a name added twice fails at save. */
typedef struct choir_st_writer choir_st_writer;

choir_st_writer *choir_st_writer_create(choir_err *err);
void choir_st_writer_free(choir_st_writer *w);
int choir_st_writer_add(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                        const int64_t *shape, const void *data, choir_err *err);
int choir_st_writer_add_ref(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                            const int64_t *shape, const void *data, choir_err *err);
/* Produces one tensor's bytes during save: fill `nbytes` bytes at `dst` (a
 * scratch buffer the size of the largest such tensor, reused for each) and return
 * 0, or a negative CHOIR_E* code (and err) to abort the save. This keeps writing a
 * large generated checkpoint down to one tensor in memory. */
typedef int (*choir_st_fill_fn)(void *ctx, const char *name, void *dst, size_t nbytes, choir_err *err);
int choir_st_writer_add_fill(choir_st_writer *w, const char *name, choir_dtype dtype, int ndim,
                             const int64_t *shape, choir_st_fill_fn fill, void *ctx, choir_err *err);
/* Adds or replaces a "__metadata__" string (copied). */
int choir_st_writer_set_metadata(choir_st_writer *w, const char *key, const char *value,
                                 choir_err *err);
/* Writes the file via a temporary file renamed into place. Tensors are laid out
 * as the reference writer does: largest element size first, then by name, with
 * the header padded to a multiple of 8, so every tensor is aligned to its element
 * size and the data area has no holes. The writer may be saved again or freed. */
int choir_st_writer_save(choir_st_writer *w, const char *path, choir_err *err);

/* A checkpoint of either kind behind one handle, for loaders that accept both:
 * a path that is a zip archive (torch.save .pth/.pt) opens through
 * choir/pth.h with CHOIR_PTH_NORMALIZE (a "model"/"state_dict" wrapper and
 * "module." prefixes removed); anything else through choir_st_open. Tensors and
 * their lifetime are as for the underlying reader. NULL (and err) on failure. */
typedef struct choir_ckpt choir_ckpt;

choir_ckpt *choir_ckpt_open(const char *path, choir_err *err);
/* NULL is a no-op. */
void choir_ckpt_close(choir_ckpt *ck);
int choir_ckpt_count(const choir_ckpt *ck);
const choir_st_tensor *choir_ckpt_at(const choir_ckpt *ck, int i);
const choir_st_tensor *choir_ckpt_find(const choir_ckpt *ck, const char *name);
/* 1 when the checkpoint came from a PyTorch archive, 0 for safetensors. */
int choir_ckpt_is_pth(const choir_ckpt *ck);

#ifdef __cplusplus
}
#endif
#endif
