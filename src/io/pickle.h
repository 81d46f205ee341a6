/* A restricted unpickler for torch.save archives (not public API).
 *
 * It understands only the opcodes torch.save emits for tensors inside nested
 * dicts, lists and tuples, and only the globals that rebuild tensors, storages
 * and OrderedDicts. Any other global or opcode is refused with an error naming
 * it; nothing is ever called or imported, so a hostile pickle can at worst be
 * refused. The result is a tree of values that pth.c turns into tensors. */
#ifndef CHOIR_IO_PICKLE_H
#define CHOIR_IO_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "choir/dtype.h"
#include "choir/error.h"
#include "choir/safetensors.h"

typedef enum pk_kind {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_TUPLE, PK_LIST, PK_DICT,
    PK_GLOBAL, PK_STORAGE, PK_TENSOR, PK_MARK
} pk_kind;

/* The globals a weights pickle may name. */
typedef enum pk_global {
    PK_G_REBUILD_TENSOR_V2, PK_G_REBUILD_PARAMETER, PK_G_ORDERED_DICT, PK_G_STORAGE
} pk_global;

typedef struct pk_value pk_value;
struct pk_value {
    pk_kind kind;
    int64_t i;                 /* PK_BOOL, PK_INT; PK_GLOBAL: pk_global */
    double f;                  /* PK_FLOAT */
    char *str;                 /* PK_STR (NUL-terminated UTF-8); PK_STORAGE: its key */
    size_t len;                /* PK_STR byte length */
    pk_value **items;          /* PK_TUPLE, PK_LIST; PK_DICT: keys */
    pk_value **vals;           /* PK_DICT values */
    int n, cap;
    choir_dtype dtype;         /* PK_GLOBAL storage class, PK_STORAGE */
    int64_t numel;             /* PK_STORAGE elements */
    /* PK_TENSOR: a view of `storage` */
    pk_value *storage;
    int64_t offset;
    int ndim;
    int64_t shape[CHOIR_ST_MAX_DIMS], stride[CHOIR_ST_MAX_DIMS];
};

typedef struct pk_unpickler pk_unpickler;

/* Runs the pickle in `data` (len bytes). On success *root is the unpickled
 * value, owned by the unpickler, valid until pk_free. `label` names the source
 * in errors. */
pk_unpickler *pk_load(const uint8_t *data, size_t len, const char *label, pk_value **root,
                      choir_err *err);
void pk_free(pk_unpickler *u);

#endif
