/* Reading ONNX weights: a strict protobuf walk over ModelProto, GraphProto,
 * NodeProto, AttributeProto and TensorProto.
 *
 * Protobuf messages are sequences of (key, value) records; a key is a varint
 * holding field_number << 3 | wire_type. The reader works on byte spans of one
 * copy of the file and never reads past a span's end: every nested message is
 * a span inside its parent. Fields may come in any order and repeat, so a node
 * is walked twice: once for its name and outputs, once for its attributes
 * (whose tensors and subgraphs need the node's name to be named). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/onnx.h"

/* Field numbers of onnx.proto (stable since IR version 3). */
enum {
    MODEL_IR_VERSION = 1, MODEL_GRAPH = 7, MODEL_OPSET_IMPORT = 8,
    OPSET_DOMAIN = 1, OPSET_VERSION = 2,
    GRAPH_NODE = 1, GRAPH_INITIALIZER = 5,
    NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
    ATTR_NAME = 1, ATTR_T = 5, ATTR_G = 6, ATTR_TENSORS = 10, ATTR_GRAPHS = 11,
    TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_SEGMENT = 3, TENSOR_FLOAT_DATA = 4,
    TENSOR_INT32_DATA = 5, TENSOR_INT64_DATA = 7, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9,
    TENSOR_DOUBLE_DATA = 10, TENSOR_EXTERNAL_DATA = 13, TENSOR_DATA_LOCATION = 14
};

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

#define NAME_MAX_BYTES 4096

struct choir_onnx {
    uint8_t *file; /* the file's bytes; raw_data tensors point into it */
    size_t file_len;
    int64_t ir_version;
    int64_t opset;
    int64_t node_count;
    choir_onnx_tensor *tensors;
    void **decoded; /* per tensor: a buffer this model owns, or NULL */
    int count, cap;
};

typedef struct span {
    const uint8_t *p, *end;
} span;

/* One record of a message. For WIRE_LEN, `bytes` is the payload. */
typedef struct field {
    uint32_t number;
    int wire;
    uint64_t value;
    span bytes;
} field;

typedef struct reader {
    choir_onnx *m;
    choir_err *err;
} reader;

static size_t offset_of(const reader *r, const uint8_t *p) { return (size_t)(p - r->m->file); }

static int bad(const reader *r, const uint8_t *at, const char *what) {
    return choir_err_set(r->err, CHOIR_EFORMAT, "onnx: %s at byte %zu", what, offset_of(r, at));
}

static int read_varint(const reader *r, span *s, uint64_t *out) {
    uint64_t v = 0;
    const uint8_t *start = s->p;
    for (int shift = 0; shift < 64; shift += 7) {
        if (s->p >= s->end) return bad(r, start, "truncated varint");
        uint8_t b = *s->p++;
        /* The tenth byte may only carry the top bit of a 64-bit value. */
        if (shift == 63 && b > 1) return bad(r, start, "varint longer than 64 bits");
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return bad(r, start, "varint longer than 10 bytes");
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Reads the next record of `s` into `f`. Returns 1 when one was read, 0 at the
 * end of the span, negative on malformed input. */
static int next_field(const reader *r, span *s, field *f) {
    if (s->p >= s->end) return 0;
    const uint8_t *at = s->p;
    uint64_t key;
    int rc = read_varint(r, s, &key);
    if (rc) return rc;
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) return bad(r, at, "invalid field number");
    f->number = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    f->value = 0;
    f->bytes.p = f->bytes.end = NULL;
    switch (f->wire) {
    case WIRE_VARINT: return read_varint(r, s, &f->value) ? CHOIR_EFORMAT : 1;
    case WIRE_I64:
    case WIRE_I32: {
        int n = f->wire == WIRE_I64 ? 8 : 4;
        if (s->end - s->p < n) return bad(r, at, "truncated fixed-size field");
        f->value = load_le(s->p, n);
        s->p += n;
        return 1;
    }
    case WIRE_LEN: {
        uint64_t len;
        if (read_varint(r, s, &len)) return CHOIR_EFORMAT;
        if (len > (uint64_t)(s->end - s->p)) return bad(r, at, "length runs past the enclosing message");
        f->bytes.p = s->p;
        f->bytes.end = s->p + len;
        s->p += len;
        return 1;
    }
    default: return bad(r, at, "unsupported protobuf wire type (groups are not allowed)");
    }
}

/* Copies a string field into a NUL-terminated buffer of `cap` bytes. */
static int copy_string(const reader *r, const field *f, char *out, size_t cap) {
    size_t n = (size_t)(f->bytes.end - f->bytes.p);
    if (f->wire != WIRE_LEN) return bad(r, f->bytes.p ? f->bytes.p : r->m->file, "string field with wrong wire type");
    if (n >= cap) return bad(r, f->bytes.p, "name too long");
    if (memchr(f->bytes.p, 0, n)) return bad(r, f->bytes.p, "NUL byte inside a name");
    memcpy(out, f->bytes.p, n);
    out[n] = '\0';
    return 0;
}

static choir_dtype dtype_of(int32_t t) {
    switch (t) {
    case CHOIR_ONNX_FLOAT: return CHOIR_DTYPE_F32;
    case CHOIR_ONNX_UINT8: return CHOIR_DTYPE_U8;
    case CHOIR_ONNX_INT8: return CHOIR_DTYPE_I8;
    case CHOIR_ONNX_INT16: return CHOIR_DTYPE_I16;
    case CHOIR_ONNX_INT32: return CHOIR_DTYPE_I32;
    case CHOIR_ONNX_INT64: return CHOIR_DTYPE_I64;
    case CHOIR_ONNX_BOOL: return CHOIR_DTYPE_BOOL;
    case CHOIR_ONNX_FLOAT16: return CHOIR_DTYPE_F16;
    case CHOIR_ONNX_DOUBLE: return CHOIR_DTYPE_F64;
    case CHOIR_ONNX_UINT32: return CHOIR_DTYPE_U32;
    case CHOIR_ONNX_BFLOAT16: return CHOIR_DTYPE_BF16;
    default: return CHOIR_DTYPE_COUNT;
    }
}

const char *choir_onnx_type_name(int32_t t) {
    static const char *names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16",
                                  "INT32", "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE",
                                  "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    if (t < 0 || t >= (int32_t)(sizeof names / sizeof names[0])) return "?";
    return names[t];
}

/* Adds the number of values in one packed record of a repeated numeric field. */
static int count_packed(const reader *r, const field *f, int value_wire, int64_t *count) {
    if (value_wire == WIRE_I32 || value_wire == WIRE_I64) {
        size_t w = value_wire == WIRE_I32 ? 4 : 8;
        size_t n = (size_t)(f->bytes.end - f->bytes.p);
        if (n % w) return bad(r, f->bytes.p, "packed fixed-size array with a ragged length");
        *count += (int64_t)(n / w);
        return 0;
    }
    span s = f->bytes;
    while (s.p < s.end) {
        uint64_t v;
        if (read_varint(r, &s, &v)) return CHOIR_EFORMAT;
        (*count)++;
    }
    return 0;
}

/* Decodes a repeated numeric field (every record of `number` in the tensor's
 * span) into `out` as `out_size`-byte little-endian values. Varint values are
 * int32/int64 (two's complement); fixed values are copied. */
static void decode_repeated(const reader *r, span msg, uint32_t number, int value_wire,
                            uint8_t *out, size_t out_size) {
    field f;
    size_t k = 0;
    while (next_field(r, &msg, &f) == 1) {
        if (f.number != number) continue;
        if (f.wire == WIRE_LEN) {
            span s = f.bytes;
            while (s.p < s.end) {
                uint64_t v;
                if (value_wire == WIRE_VARINT) {
                    read_varint(r, &s, &v);
                } else {
                    int n = value_wire == WIRE_I32 ? 4 : 8;
                    v = load_le(s.p, n);
                    s.p += n;
                }
                for (size_t b = 0; b < out_size; b++) out[k * out_size + b] = (uint8_t)(v >> (8 * b));
                k++;
            }
        } else {
            for (size_t b = 0; b < out_size; b++) out[k * out_size + b] = (uint8_t)(f.value >> (8 * b));
            k++;
        }
    }
}

static int grow(reader *r) {
    choir_onnx *m = r->m;
    if (m->count < m->cap) return 0;
    int cap = m->cap ? m->cap * 2 : 32;
    if (cap > (1 << 24)) return choir_err_set(r->err, CHOIR_ETOOBIG, "onnx: too many tensors");
    choir_onnx_tensor *t = choir_realloc(m->tensors, (size_t)cap * sizeof *t);
    if (!t) return choir_err_set(r->err, CHOIR_ENOMEM, "onnx: out of memory");
    m->tensors = t;
    void **d = choir_realloc(m->decoded, (size_t)cap * sizeof *d);
    if (!d) return choir_err_set(r->err, CHOIR_ENOMEM, "onnx: out of memory");
    m->decoded = d;
    m->cap = cap;
    return 0;
}

/* Parses one TensorProto and appends it. `fallback_name` names tensors that
 * carry no name of their own (a Constant node's value). */
static int parse_tensor(reader *r, span msg, const char *graph, const char *fallback_name,
                        choir_onnx_source source) {
    char name[NAME_MAX_BYTES] = "";
    int64_t dims[CHOIR_ONNX_MAX_DIMS];
    int ndim = 0;
    int64_t data_type = 0;
    const uint8_t *at = msg.p;
    span raw = {NULL, NULL};
    int have_raw = 0;
    int64_t n_float = 0, n_i32 = 0, n_i64 = 0, n_double = 0;
    field f;
    span s = msg;
    int rc;
    while ((rc = next_field(r, &s, &f)) == 1) {
        switch (f.number) {
        case TENSOR_DIMS: {
            /* dims may be packed or one record per dim. */
            int64_t tmp[CHOIR_ONNX_MAX_DIMS + 1];
            int k = 0;
            if (f.wire == WIRE_VARINT) {
                tmp[k++] = (int64_t)f.value;
            } else if (f.wire == WIRE_LEN) {
                span d = f.bytes;
                while (d.p < d.end) {
                    uint64_t v;
                    if (read_varint(r, &d, &v)) return CHOIR_EFORMAT;
                    if (k > CHOIR_ONNX_MAX_DIMS) return bad(r, f.bytes.p, "too many tensor dims");
                    tmp[k++] = (int64_t)v;
                }
            } else {
                return bad(r, at, "tensor dims with wrong wire type");
            }
            for (int i = 0; i < k; i++) {
                if (ndim >= CHOIR_ONNX_MAX_DIMS) return bad(r, at, "too many tensor dims");
                if (tmp[i] < 0) return bad(r, at, "negative tensor dim");
                dims[ndim++] = tmp[i];
            }
            break;
        }
        case TENSOR_DATA_TYPE:
            if (f.wire != WIRE_VARINT) return bad(r, at, "data_type with wrong wire type");
            data_type = (int64_t)f.value;
            break;
        case TENSOR_NAME:
            if ((rc = copy_string(r, &f, name, sizeof name))) return rc;
            break;
        case TENSOR_RAW_DATA:
            if (f.wire != WIRE_LEN) return bad(r, at, "raw_data with wrong wire type");
            raw = f.bytes;
            have_raw = 1;
            break;
        case TENSOR_FLOAT_DATA:
        case TENSOR_INT32_DATA:
        case TENSOR_INT64_DATA:
        case TENSOR_DOUBLE_DATA: {
            int value_wire = f.number == TENSOR_FLOAT_DATA    ? WIRE_I32
                             : f.number == TENSOR_DOUBLE_DATA ? WIRE_I64
                                                              : WIRE_VARINT;
            int64_t *n = f.number == TENSOR_FLOAT_DATA   ? &n_float
                         : f.number == TENSOR_INT32_DATA ? &n_i32
                         : f.number == TENSOR_INT64_DATA ? &n_i64
                                                         : &n_double;
            if (f.wire == WIRE_LEN) {
                if ((rc = count_packed(r, &f, value_wire, n))) return rc;
            } else if (f.wire == value_wire) {
                (*n)++;
            } else {
                return bad(r, at, "typed tensor data with wrong wire type");
            }
            break;
        }
        case TENSOR_SEGMENT: return choir_err_set(r->err, CHOIR_EUNSUPPORTED, "onnx: segmented tensor '%s'", name);
        case TENSOR_EXTERNAL_DATA:
            return choir_err_set(r->err, CHOIR_EUNSUPPORTED,
                                 "onnx: tensor '%s' keeps its data in an external file", name);
        case TENSOR_DATA_LOCATION:
            if (f.wire == WIRE_VARINT && f.value != 0)
                return choir_err_set(r->err, CHOIR_EUNSUPPORTED,
                                     "onnx: tensor '%s' keeps its data in an external file", name);
            break;
        default: break;
        }
    }
    if (rc < 0) return rc;
    if (!name[0] && fallback_name) snprintf(name, sizeof name, "%s", fallback_name);
    if (data_type < 0 || data_type > INT32_MAX) return bad(r, at, "invalid tensor data_type");

    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] && numel > INT64_MAX / dims[i]) return bad(r, at, "tensor dims overflow");
        numel *= dims[i];
    }
    choir_dtype dt = dtype_of((int32_t)data_type);
    size_t esize = dt == CHOIR_DTYPE_COUNT ? 0 : choir_dtype_size(dt);
    if (esize && (uint64_t)numel > (uint64_t)SIZE_MAX / esize) return bad(r, at, "tensor too large");
    size_t nbytes = (size_t)numel * esize;

    if ((rc = grow(r))) return rc;
    choir_onnx *m = r->m;
    choir_onnx_tensor *t = &m->tensors[m->count];
    memset(t, 0, sizeof *t);
    m->decoded[m->count] = NULL;
    t->source = source;
    t->onnx_type = (int32_t)data_type;
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->dims, dims, (size_t)ndim * sizeof dims[0]);
    t->numel = numel;

    int64_t typed = n_float + n_i32 + n_i64 + n_double;
    if (dt == CHOIR_DTYPE_COUNT) {
        /* Kept for listing, without data (strings, complex, ...). */
    } else if (have_raw) {
        if (typed) return bad(r, at, "tensor has both raw_data and typed data");
        if ((size_t)(raw.end - raw.p) != nbytes) {
            return choir_err_set(r->err, CHOIR_EFORMAT,
                                 "onnx: tensor '%s': raw_data holds %zu bytes, its dims need %zu",
                                 name, (size_t)(raw.end - raw.p), nbytes);
        }
        t->data = raw.p;
        t->nbytes = nbytes;
    } else {
        /* Typed fields: which one holds a type is fixed by onnx.proto. */
        uint32_t number;
        int value_wire;
        int64_t have;
        switch (dt) {
        case CHOIR_DTYPE_F32: number = TENSOR_FLOAT_DATA; value_wire = WIRE_I32; have = n_float; break;
        case CHOIR_DTYPE_F64: number = TENSOR_DOUBLE_DATA; value_wire = WIRE_I64; have = n_double; break;
        case CHOIR_DTYPE_I64: number = TENSOR_INT64_DATA; value_wire = WIRE_VARINT; have = n_i64; break;
        case CHOIR_DTYPE_U32: /* uint64_data is not read; keep the rest in int32_data */
        default: number = TENSOR_INT32_DATA; value_wire = WIRE_VARINT; have = n_i32; break;
        }
        if (have != typed || have != numel) {
            return choir_err_set(r->err, CHOIR_EFORMAT,
                                 "onnx: tensor '%s': %lld stored values, its dims need %lld", name,
                                 (long long)typed, (long long)numel);
        }
        if (dt == CHOIR_DTYPE_U32) return choir_err_set(r->err, CHOIR_EUNSUPPORTED, "onnx: tensor '%s': UINT32 without raw_data", name);
        void *buf = choir_alloc(CHOIR_MEM_WEIGHTS, nbytes);
        if (!buf) return choir_err_set(r->err, CHOIR_ENOMEM, "onnx: out of memory for tensor '%s'", name);
        /* F16/BF16 keep their bits in the low half of int32_data; the integer
         * types narrower than 32 bits keep theirs in the low bytes. */
        decode_repeated(r, msg, number, value_wire, buf, esize);
        m->decoded[m->count] = buf;
        t->data = buf;
        t->nbytes = nbytes;
    }
    t->name = choir_strdup(name);
    t->graph = choir_strdup(graph);
    if (!t->name || !t->graph) {
        choir_free((void *)t->name);
        choir_free((void *)t->graph);
        choir_free(m->decoded[m->count]);
        return choir_err_set(r->err, CHOIR_ENOMEM, "onnx: out of memory");
    }
    m->count++;
    return 0;
}

static int parse_graph(reader *r, span msg, const char *path, int depth);

static int subgraph_path(const reader *r, char *out, size_t cap, const char *path, const char *node,
                         const char *attr, int index) {
    int n = index < 0 ? snprintf(out, cap, "%s%s%s.%s", path, path[0] ? "/" : "", node, attr)
                      : snprintf(out, cap, "%s%s%s.%s[%d]", path, path[0] ? "/" : "", node, attr, index);
    if (n < 0 || (size_t)n >= cap) return choir_err_set(r->err, CHOIR_EFORMAT, "onnx: subgraph path too long");
    return 0;
}

static int parse_node(reader *r, span msg, const char *path, int depth, int64_t index) {
    char node_name[NAME_MAX_BYTES] = "", op_type[256] = "", output0[NAME_MAX_BYTES] = "";
    field f;
    span s = msg;
    int rc;
    while ((rc = next_field(r, &s, &f)) == 1) {
        if (f.number == NODE_NAME && (rc = copy_string(r, &f, node_name, sizeof node_name))) return rc;
        if (f.number == NODE_OP_TYPE && (rc = copy_string(r, &f, op_type, sizeof op_type))) return rc;
        if (f.number == NODE_OUTPUT && !output0[0] && (rc = copy_string(r, &f, output0, sizeof output0)))
            return rc;
    }
    if (rc < 0) return rc;
    /* Unnamed nodes still need a unique, stable handle for their subgraphs. */
    if (!node_name[0]) snprintf(node_name, sizeof node_name, "%s_%lld", op_type[0] ? op_type : "node", (long long)index);
    r->m->node_count++;

    s = msg;
    while ((rc = next_field(r, &s, &f)) == 1) {
        if (f.number != NODE_ATTRIBUTE) continue;
        if (f.wire != WIRE_LEN) return bad(r, msg.p, "node attribute with wrong wire type");
        char attr[256] = "";
        field a;
        span as = f.bytes;
        while ((rc = next_field(r, &as, &a)) == 1)
            if (a.number == ATTR_NAME && (rc = copy_string(r, &a, attr, sizeof attr))) return rc;
        if (rc < 0) return rc;
        as = f.bytes;
        int graph_index = 0, tensor_index = 0;
        while ((rc = next_field(r, &as, &a)) == 1) {
            if (a.number != ATTR_T && a.number != ATTR_G && a.number != ATTR_TENSORS && a.number != ATTR_GRAPHS)
                continue;
            if (a.wire != WIRE_LEN) return bad(r, a.bytes.p ? a.bytes.p : f.bytes.p, "attribute value with wrong wire type");
            if (a.number == ATTR_G || a.number == ATTR_GRAPHS) {
                if (depth + 1 > CHOIR_ONNX_MAX_DEPTH) return bad(r, a.bytes.p, "subgraphs nested too deep");
                char sub[NAME_MAX_BYTES];
                if ((rc = subgraph_path(r, sub, sizeof sub, path, node_name, attr,
                                        a.number == ATTR_GRAPHS ? graph_index++ : -1)))
                    return rc;
                if ((rc = parse_graph(r, a.bytes, sub, depth + 1))) return rc;
            } else {
                /* A Constant's value is named by the node's output; other tensor
                 * attributes by node and attribute. */
                char tname[NAME_MAX_BYTES];
                int is_constant = strcmp(op_type, "Constant") == 0 && strcmp(attr, "value") == 0;
                if (is_constant && output0[0])
                    snprintf(tname, sizeof tname, "%s", output0);
                else if (a.number == ATTR_TENSORS)
                    snprintf(tname, sizeof tname, "%.2000s.%.200s[%d]", node_name, attr, tensor_index++);
                else
                    snprintf(tname, sizeof tname, "%.2000s.%.200s", node_name, attr);
                if ((rc = parse_tensor(r, a.bytes, path, tname, CHOIR_ONNX_CONSTANT))) return rc;
            }
        }
        if (rc < 0) return rc;
    }
    return rc < 0 ? rc : 0;
}

static int parse_graph(reader *r, span msg, const char *path, int depth) {
    field f;
    span s = msg;
    int rc;
    int64_t index = 0;
    while ((rc = next_field(r, &s, &f)) == 1) {
        if (f.number != GRAPH_NODE && f.number != GRAPH_INITIALIZER) continue;
        if (f.wire != WIRE_LEN) return bad(r, msg.p, "graph member with wrong wire type");
        rc = f.number == GRAPH_NODE ? parse_node(r, f.bytes, path, depth, index++)
                                    : parse_tensor(r, f.bytes, path, NULL, CHOIR_ONNX_INITIALIZER);
        if (rc) return rc;
    }
    return rc < 0 ? rc : 0;
}

static int parse_model(reader *r) {
    span s = {r->m->file, r->m->file + r->m->file_len};
    field f;
    int rc, graphs = 0;
    while ((rc = next_field(r, &s, &f)) == 1) {
        if (f.number == MODEL_IR_VERSION && f.wire == WIRE_VARINT) {
            r->m->ir_version = (int64_t)f.value;
        } else if (f.number == MODEL_OPSET_IMPORT && f.wire == WIRE_LEN) {
            char domain[256] = "";
            int64_t version = 0;
            field o;
            span os = f.bytes;
            while ((rc = next_field(r, &os, &o)) == 1) {
                if (o.number == OPSET_DOMAIN && (rc = copy_string(r, &o, domain, sizeof domain))) return rc;
                if (o.number == OPSET_VERSION && o.wire == WIRE_VARINT) version = (int64_t)o.value;
            }
            if (rc < 0) return rc;
            if (!domain[0] || strcmp(domain, "ai.onnx") == 0) r->m->opset = version;
        } else if (f.number == MODEL_GRAPH) {
            if (f.wire != WIRE_LEN) return bad(r, r->m->file, "graph with wrong wire type");
            if (graphs++) return bad(r, f.bytes.p, "more than one main graph");
            if ((rc = parse_graph(r, f.bytes, "", 0))) return rc;
        }
    }
    if (rc < 0) return rc;
    if (!graphs) return choir_err_set(r->err, CHOIR_EFORMAT, "onnx: no graph in the model (not an ONNX file?)");
    if (r->m->ir_version <= 0)
        return choir_err_set(r->err, CHOIR_EFORMAT, "onnx: missing ir_version (not an ONNX file?)");
    return 0;
}

void choir_onnx_free(choir_onnx *m) {
    if (!m) return;
    for (int i = 0; i < m->count; i++) {
        choir_free((void *)m->tensors[i].name);
        choir_free((void *)m->tensors[i].graph);
        choir_free(m->decoded[i]);
    }
    choir_free(m->tensors);
    choir_free(m->decoded);
    choir_free(m->file);
    choir_free(m);
}

/* Takes ownership of `file` (from choir_alloc). */
static choir_onnx *parse_owned(uint8_t *file, size_t len, choir_err *err) {
    choir_onnx *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_free(file);
        choir_err_set(err, CHOIR_ENOMEM, "onnx: out of memory");
        return NULL;
    }
    m->file = file;
    m->file_len = len;
    reader r = {m, err};
    if (parse_model(&r)) {
        choir_onnx_free(m);
        return NULL;
    }
    return m;
}

choir_onnx *choir_onnx_parse(const void *bytes, size_t len, choir_err *err) {
    if (!bytes && len) {
        choir_err_set(err, CHOIR_EINVAL, "onnx: NULL buffer");
        return NULL;
    }
    if (len > CHOIR_ONNX_MAX_FILE_BYTES) {
        choir_err_set(err, CHOIR_ETOOBIG, "onnx: %zu bytes is more than the 2 GiB protobuf limit", len);
        return NULL;
    }
    uint8_t *copy = choir_alloc(CHOIR_MEM_WEIGHTS, len);
    if (!copy) {
        choir_err_set(err, CHOIR_ENOMEM, "onnx: out of memory for %zu bytes", len);
        return NULL;
    }
    if (len) memcpy(copy, bytes, len);
    return parse_owned(copy, len, err);
}

choir_onnx *choir_onnx_open(const char *path, choir_err *err) {
    uint8_t *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        choir_err_set(err, errno == ENOENT ? CHOIR_ENOTFOUND : CHOIR_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        choir_err_set(err, CHOIR_EIO, "%s: cannot determine its size", path);
        goto fail;
    }
    if ((unsigned long)size > CHOIR_ONNX_MAX_FILE_BYTES) {
        choir_err_set(err, CHOIR_ETOOBIG, "%s: %ld bytes is more than the 2 GiB protobuf limit", path, size);
        goto fail;
    }
    buf = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)size);
    if (!buf) {
        choir_err_set(err, CHOIR_ENOMEM, "%s: out of memory for %ld bytes", path, size);
        goto fail;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        choir_err_set(err, CHOIR_EIO, "%s: read failed", path);
        goto fail;
    }
    fclose(f);
    choir_onnx *m = parse_owned(buf, (size_t)size, err);
    if (!m) choir_err_prefix(err, "%s", path);
    return m;
fail:
    choir_free(buf);
    fclose(f);
    return NULL;
}

int64_t choir_onnx_ir_version(const choir_onnx *m) { return m ? m->ir_version : 0; }
int64_t choir_onnx_opset(const choir_onnx *m) { return m ? m->opset : 0; }
int64_t choir_onnx_node_count(const choir_onnx *m) { return m ? m->node_count : 0; }
int choir_onnx_count(const choir_onnx *m) { return m ? m->count : 0; }

const choir_onnx_tensor *choir_onnx_at(const choir_onnx *m, int i) {
    if (!m || i < 0 || i >= m->count) return NULL;
    return &m->tensors[i];
}

const choir_onnx_tensor *choir_onnx_find(const choir_onnx *m, const char *graph, const char *name) {
    if (!m || !name) return NULL;
    for (int i = 0; i < m->count; i++) {
        const choir_onnx_tensor *t = &m->tensors[i];
        if (strcmp(t->name, name) == 0 && (!graph || strcmp(t->graph, graph) == 0)) return t;
    }
    return NULL;
}

/* Half-precision bits to float, subnormals included. */
static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13;
    } else if (exp) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (man) {
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
    } else {
        bits = sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int choir_onnx_tensor_f32(const choir_onnx_tensor *t, float *out, choir_err *err) {
    if (!t || !out) return choir_err_set(err, CHOIR_EINVAL, "onnx: NULL tensor or output");
    if (!t->data && t->numel)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "onnx: tensor '%s' of type %s has no numeric data",
                             t->name, choir_onnx_type_name(t->onnx_type));
    const uint8_t *p = t->data;
    size_t es = choir_dtype_size(t->dtype);
    for (int64_t i = 0; i < t->numel; i++, p += es) {
        uint64_t v = load_le(p, (int)es);
        float x;
        switch (t->dtype) {
        case CHOIR_DTYPE_F32: {
            uint32_t b = (uint32_t)v;
            memcpy(&x, &b, 4);
            break;
        }
        case CHOIR_DTYPE_F64: {
            double d;
            memcpy(&d, &v, 8);
            x = (float)d;
            break;
        }
        case CHOIR_DTYPE_F16: x = half_to_f32((uint16_t)v); break;
        case CHOIR_DTYPE_BF16: {
            uint32_t b = (uint32_t)v << 16;
            memcpy(&x, &b, 4);
            break;
        }
        case CHOIR_DTYPE_I8: x = (float)(int8_t)v; break;
        case CHOIR_DTYPE_I16: x = (float)(int16_t)v; break;
        case CHOIR_DTYPE_I32: x = (float)(int32_t)v; break;
        case CHOIR_DTYPE_I64: x = (float)(int64_t)v; break;
        default: x = (float)v; break; /* U8, U32, BOOL */
        }
        out[i] = x;
    }
    return 0;
}
