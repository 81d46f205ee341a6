/* Internal to the converter: the PyTorch .pth source (convert_pth.c) and
 * file helpers (convert_files.c). */
#ifndef CHOIR_CONVERT_INTERNAL_H
#define CHOIR_CONVERT_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>

#include "choir/error.h"
#include "choir/safetensors.h"

typedef struct convert_pth convert_pth;

/* Opens a torch.save archive; *tensors (owned by the handle) lists its
 * tensors with names as the converter writes them. CHOIR_EUNSUPPORTED when
 * this build has no .pth reader. */
int convert_pth_open(const char *path, convert_pth **out, const choir_st_tensor ***tensors, int *n,
                     choir_err *err);
void convert_pth_close(convert_pth *h);

/* Copies the regular files of src_dir that are not checkpoints or
 * config.json into dst_dir, and one level of subdirectories (voices/).
 * Files over 256 MiB and dot-files are skipped. Returns the number copied or
 * a negative status. */
int convert_copy_side_files(const char *src_dir, const char *dst_dir, FILE *report,
                            choir_err *err);
/* mkdir that accepts an existing directory. */
int convert_make_dir(const char *path, choir_err *err);

/* Kokoro in the mlx-audio layout (convert_kokoro.c). True when the tensors'
 * names are mlx-audio's (an LSTM parameter named *.Wx_forward, ...). */
bool convert_kokoro_is_mlx(const choir_st_tensor *const *tensors, int n);
/* *out = tensor t under its native name (written to name[cap]) with its
 * native shape; *reorder says that its values must be re-ordered with
 * convert_kokoro_reorder (a [d0, k, in] convolution weight), else out->data
 * is t's data as it is. Returns 0, or CHOIR_ESHAPE for a convolution weight
 * in neither layout. */
int convert_kokoro_native(const choir_st_tensor *t, choir_st_tensor *out, char *name, size_t cap,
                          bool *reorder, choir_err *err);
/* dst (t->nbytes) = t's [d0, k, in] values as [d0, in, k]. */
void convert_kokoro_reorder(const choir_st_tensor *t, void *dst);

#endif
