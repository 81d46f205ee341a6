/* choir/onnx.h: reading the weights out of an ONNX model file.
 *
 * A small, strict protobuf reader for the parts of ONNX that hold weights:
 * ModelProto -> GraphProto -> initializers (TensorProto), Constant nodes'
 * `value` tensors, and the same again inside subgraphs held in node attributes
 * (If's then_branch/else_branch, Loop's body, ...), because exporters such as
 * Silero's keep a whole branch's weights there. Everything else in the file
 * (the operators themselves) is walked for well-formedness and skipped.
 *
 * The whole file is read into memory and checked before anything is exposed:
 * every length inside its parent, varints at most 10 bytes, no protobuf groups,
 * subgraphs nested at most CHOIR_ONNX_MAX_DEPTH deep, dims non-negative with a
 * product that fits, and the payload (raw_data, or float_data / int32_data /
 * int64_data / double_data) exactly as long as the dims say. Tensors stored in
 * external files are refused. Any failure names the problem and its byte offset. */
#ifndef CHOIR_ONNX_H
#define CHOIR_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "choir/dtype.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_ONNX_MAX_DIMS 8
#define CHOIR_ONNX_MAX_DEPTH 8
/* Files larger than this are refused (ONNX itself caps protobufs at 2 GiB). */
#define CHOIR_ONNX_MAX_FILE_BYTES ((size_t)2 << 30)

/* ONNX TensorProto.DataType values that choir maps to its own dtypes. */
enum {
    CHOIR_ONNX_FLOAT = 1,
    CHOIR_ONNX_UINT8 = 2,
    CHOIR_ONNX_INT8 = 3,
    CHOIR_ONNX_INT16 = 5,
    CHOIR_ONNX_INT32 = 6,
    CHOIR_ONNX_INT64 = 7,
    CHOIR_ONNX_STRING = 8,
    CHOIR_ONNX_BOOL = 9,
    CHOIR_ONNX_FLOAT16 = 10,
    CHOIR_ONNX_DOUBLE = 11,
    CHOIR_ONNX_UINT32 = 12,
    CHOIR_ONNX_BFLOAT16 = 16
};

typedef enum choir_onnx_source {
    CHOIR_ONNX_INITIALIZER = 0, /* GraphProto.initializer */
    CHOIR_ONNX_CONSTANT = 1     /* the `value` attribute of a Constant node */
} choir_onnx_source;

typedef struct choir_onnx_tensor {
    /* The tensor's name; for a Constant node, the node's first output. Owned by
     * the model. Names are unique only within one graph: look at `graph` too. */
    const char *name;
    /* Where the tensor sits: "" for the main graph, "NODE.ATTR" for a subgraph
     * (e.g. "If_0.then_branch"), joined with "/" when nested. Owned by the model. */
    const char *graph;
    choir_onnx_source source;
    int32_t onnx_type;             /* TensorProto.DataType */
    /* choir's dtype for onnx_type, or CHOIR_DTYPE_COUNT when choir has none
     * (strings, complex, unsigned 16/64-bit); such tensors have data NULL. */
    choir_dtype dtype;
    int ndim;                      /* 0 for a scalar */
    int64_t dims[CHOIR_ONNX_MAX_DIMS];
    int64_t numel;                 /* product of dims (1 for a scalar) */
    /* numel elements in `dtype`, little-endian, row-major. Points into the
     * model's copy of the file (raw_data; may be unaligned: copy with memcpy
     * or use choir_onnx_tensor_f32) or into a decoded buffer the model owns.
     * Valid until choir_onnx_free. */
    const void *data;
    size_t nbytes;
} choir_onnx_tensor;

typedef struct choir_onnx choir_onnx;

/* Reads and checks the ONNX file at `path`. NULL (and err) on failure. */
choir_onnx *choir_onnx_open(const char *path, choir_err *err);
/* As choir_onnx_open, from `len` bytes in memory (copied). */
choir_onnx *choir_onnx_parse(const void *bytes, size_t len, choir_err *err);
/* Frees the model; its tensors' pointers become invalid. NULL is a no-op. */
void choir_onnx_free(choir_onnx *m);

int64_t choir_onnx_ir_version(const choir_onnx *m);
/* The default-domain opset the model imports (0 if none). */
int64_t choir_onnx_opset(const choir_onnx *m);
/* Number of nodes across all graphs, subgraphs included. */
int64_t choir_onnx_node_count(const choir_onnx *m);

/* Tensors in file order, subgraph tensors where their node appears. */
int choir_onnx_count(const choir_onnx *m);
/* The i-th tensor (0 <= i < count), or NULL when out of range. */
const choir_onnx_tensor *choir_onnx_at(const choir_onnx *m, int i);
/* The first tensor named `name` in graph `graph` (NULL graph: any graph), or NULL. */
const choir_onnx_tensor *choir_onnx_find(const choir_onnx *m, const char *graph, const char *name);

/* Converts the tensor's numel values to float32 into `out` (F32, F16, BF16,
 * F64 and the integer types are accepted). Returns 0, or CHOIR_EUNSUPPORTED
 * for a tensor without data. */
int choir_onnx_tensor_f32(const choir_onnx_tensor *t, float *out, choir_err *err);

/* A static name for an ONNX data type ("FLOAT", "INT64", ...; "?" if unknown). */
const char *choir_onnx_type_name(int32_t onnx_type);

#ifdef __cplusplus
}
#endif
#endif
