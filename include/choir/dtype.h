/* choir/dtype.h: element types of tensors on disk and in memory. */
#ifndef CHOIR_DTYPE_H
#define CHOIR_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum choir_dtype {
    CHOIR_DTYPE_F32 = 0,
    CHOIR_DTYPE_F16,
    CHOIR_DTYPE_BF16,
    CHOIR_DTYPE_F64,
    CHOIR_DTYPE_I8,
    CHOIR_DTYPE_U8,
    CHOIR_DTYPE_I16,
    CHOIR_DTYPE_I32,
    CHOIR_DTYPE_U32,
    CHOIR_DTYPE_I64,
    CHOIR_DTYPE_BOOL,
    CHOIR_DTYPE_COUNT
} choir_dtype;

/* Bytes per element (BOOL is 1). 0 for an invalid dtype. */
size_t choir_dtype_size(choir_dtype dt);
/* The safetensors spelling: "F32", "F16", "BF16", "F64", "I8", "U8", "I16",
 * "I32", "U32", "I64", "BOOL". "?" for an invalid dtype. */
const char *choir_dtype_name(choir_dtype dt);
/* Parses the safetensors spelling; returns 0 and sets *out, or CHOIR_ENOTFOUND. */
int choir_dtype_parse(const char *name, choir_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
