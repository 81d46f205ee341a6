/* Element types. */
#include <string.h>

#include "choir/dtype.h"
#include "choir/error.h"

static const struct {
    const char *name;
    size_t size;
} g_dtypes[CHOIR_DTYPE_COUNT] = {
    [CHOIR_DTYPE_F32] = {"F32", 4},  [CHOIR_DTYPE_F16] = {"F16", 2}, [CHOIR_DTYPE_BF16] = {"BF16", 2},
    [CHOIR_DTYPE_F64] = {"F64", 8},  [CHOIR_DTYPE_I8] = {"I8", 1},   [CHOIR_DTYPE_U8] = {"U8", 1},
    [CHOIR_DTYPE_I16] = {"I16", 2},  [CHOIR_DTYPE_I32] = {"I32", 4}, [CHOIR_DTYPE_U32] = {"U32", 4},
    [CHOIR_DTYPE_I64] = {"I64", 8},  [CHOIR_DTYPE_BOOL] = {"BOOL", 1},
};

size_t choir_dtype_size(choir_dtype dt) {
    return (unsigned)dt < CHOIR_DTYPE_COUNT ? g_dtypes[dt].size : 0;
}

const char *choir_dtype_name(choir_dtype dt) {
    return (unsigned)dt < CHOIR_DTYPE_COUNT ? g_dtypes[dt].name : "?";
}

int choir_dtype_parse(const char *name, choir_dtype *out) {
    for (int i = 0; i < CHOIR_DTYPE_COUNT; i++) {
        if (strcmp(name, g_dtypes[i].name) == 0) {
            *out = (choir_dtype)i;
            return CHOIR_OK;
        }
    }
    return CHOIR_ENOTFOUND;
}
