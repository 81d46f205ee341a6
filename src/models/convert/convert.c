/* choir convert: any supported checkpoint in, MLX layout out, optionally
 * (re)quantized. One pass over the source tensors decides each tensor's fate
 * (copy, cast, quantize, dequantize), queues it on a safetensors writer by
 * reference, and the buffers it made live until the file is written. */
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/convert.h"
#include "choir/json.h"
#include "choir/quant.h"
#include "choir/safetensors.h"
#include "choir/silero.h"
#include "choir/tensor.h"
#include "models/convert/convert_internal.h"

void choir_convert_default_params(choir_convert_params *p) {
    memset(p, 0, sizeof(*p));
    p->q_group_size = 64;
    p->dtype = -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool is_float(choir_dtype dt) {
    return dt == CHOIR_DTYPE_F32 || dt == CHOIR_DTYPE_F16 || dt == CHOIR_DTYPE_BF16 ||
           dt == CHOIR_DTYPE_F64;
}

/* The opened source: tensors from a safetensors checkpoint or a .pth. */
typedef struct source {
    choir_st *st;
    convert_pth *pth;
    const choir_st_tensor **tensors; /* pth: owned by pth; st: our array */
    int n;
    cJSON *config;          /* NULL when the source has none */
    char dir[PATH_MAX];     /* directory holding the source (config, side files) */
    bool from_dir;          /* src named a directory: copy its side files */
} source;

/* A conversion in progress. */
typedef struct job {
    const choir_convert_params *p;
    source src;
    choir_quant_config *src_qc;
    choir_convert_model model;
    choir_st_writer *writer;
    void **owned;           /* buffers queued by reference */
    int n_owned, cap_owned;
    const void *last_ref;   /* data of the last tensor queued by reference */
    cJSON *layers;          /* per-layer quantization entries that differ from global */
    int g_bits, g_group;    /* global parameters written to config.json (0: none) */
    int n_layers;           /* for the mixed recipes */
    bool kokoro_mlx;        /* Kokoro in mlx-audio's layout: renamed to the native one */
    choir_convert_stats stats;
} job;

static void *own(job *j, size_t bytes, choir_err *err) {
    if (j->n_owned == j->cap_owned) {
        int ncap = j->cap_owned ? 2 * j->cap_owned : 64;
        void **p = choir_realloc(j->owned, (size_t)ncap * sizeof *p);
        if (!p) {
            choir_err_set(err, CHOIR_ENOMEM, "out of memory");
            return NULL;
        }
        j->owned = p;
        j->cap_owned = ncap;
    }
    void *b = choir_alloc(CHOIR_MEM_WEIGHTS, bytes ? bytes : 1);
    if (!b) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory (%zu bytes)", bytes);
        return NULL;
    }
    j->owned[j->n_owned++] = b;
    return b;
}

/* Frees a temporary from own() that no queued tensor refers to, so that
 * the f32 copies made on the way to quantized or half-precision output do
 * not accumulate: peak memory stays near the output size. */
static void release(job *j, const void *p) {
    if (!p || p == j->last_ref) return;
    for (int i = j->n_owned - 1; i >= 0; i--)
        if (j->owned[i] == p) {
            choir_free(j->owned[i]);
            j->owned[i] = j->owned[--j->n_owned];
            return;
        }
}

static const choir_st_tensor *src_find(const source *s, const char *name) {
    if (s->st) return choir_st_find(s->st, name);
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->tensors[i]->name, name) == 0) return s->tensors[i];
    return NULL;
}

static const choir_st_tensor *src_find2(const source *s, const char *prefix, size_t plen,
                                        const char *suffix) {
    char name[1024];
    if (plen + strlen(suffix) + 1 > sizeof name) return NULL;
    memcpy(name, prefix, plen);
    strcpy(name + plen, suffix);
    return src_find(s, name);
}

static void shape_str(const choir_st_tensor *t, char *buf, size_t cap) {
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && off < cap; d++)
        off += (size_t)snprintf(buf + off, cap - off, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (off < cap) snprintf(buf + off, cap - off, "]");
}

static int add_ref(job *j, const char *name, choir_dtype dt, int ndim, const int64_t *shape,
                   const void *data, choir_err *err) {
    int rc = choir_st_writer_add_ref(j->writer, name, dt, ndim, shape, data, err);
    if (rc == 0) {
        j->last_ref = data;
        int64_t n = 1;
        for (int d = 0; d < ndim; d++) n *= shape[d];
        j->stats.bytes_out += (uint64_t)n * choir_dtype_size(dt);
    }
    return rc;
}

/* Records a quantized layer for config.json: an entry when it differs from
 * the global parameters. */
static int note_layer(job *j, const char *prefix, int bits, int group, choir_err *err) {
    j->stats.quantized++;
    if (bits == j->g_bits && group == j->g_group) return 0;
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddNumberToObject(e, "group_size", group) ||
        !cJSON_AddNumberToObject(e, "bits", bits) || !cJSON_AddStringToObject(e, "mode", "affine")) {
        cJSON_Delete(e);
        return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    }
    cJSON_AddItemToObject(j->layers, prefix, e);
    return 0;
}

/* f32 values of tensor t, rounded through `through` (F16/BF16) the way MLX
 * casts a weight to the target dtype before quantizing it. */
static float *as_f32(job *j, const choir_st_tensor *t, choir_dtype through, choir_err *err) {
    float *v = own(j, (size_t)t->numel * sizeof(float), err);
    if (!v) return NULL;
    if (t->dtype == CHOIR_DTYPE_F64) {
        for (int64_t i = 0; i < t->numel; i++) v[i] = (float)((const double *)t->data)[i];
    } else if (choir_to_f32_n(t->dtype, t->data, v, t->numel) < 0) {
        choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: cannot read dtype %s as float", t->name,
                      choir_dtype_name(t->dtype));
        return NULL;
    }
    for (int64_t i = 0; i < t->numel; i++) {
        if (through == CHOIR_DTYPE_BF16) v[i] = choir_bf16_to_f32(choir_f32_to_bf16(v[i]));
        if (through == CHOIR_DTYPE_F16) v[i] = choir_f16_to_f32(choir_f32_to_f16(v[i]));
    }
    return v;
}

/* Writes f32 values in dtype `dt` under `name`. */
static int add_float(job *j, const char *name, int ndim, const int64_t *shape, const float *v,
                     int64_t n, choir_dtype dt, choir_err *err) {
    void *out = (void *)v;
    if (dt == CHOIR_DTYPE_F16 || dt == CHOIR_DTYPE_BF16) {
        out = own(j, (size_t)n * 2, err);
        if (!out) return err ? err->code : CHOIR_ENOMEM;
        if (dt == CHOIR_DTYPE_F16)
            choir_f32_to_f16_n(v, out, n);
        else
            choir_f32_to_bf16_n(v, out, n);
    } else {
        dt = CHOIR_DTYPE_F32;
    }
    return add_ref(j, name, dt, ndim, shape, out, err);
}

static int add_quantized(job *j, const char *prefix, const float *v, int64_t rows, int64_t cols,
                         int bits, int group, choir_dtype sb_dt, choir_err *err) {
    int64_t words = choir_quant_packed_cols(cols, bits), groups = cols / group;
    size_t sb_size = choir_dtype_size(sb_dt);
    uint32_t *packed = own(j, (size_t)(rows * words) * 4, err);
    void *sc = packed ? own(j, (size_t)(rows * groups) * sb_size, err) : NULL;
    void *bi = sc ? own(j, (size_t)(rows * groups) * sb_size, err) : NULL;
    if (!bi) return CHOIR_ENOMEM;
    int rc = j->p->mlx_exact
                 ? choir_quantize_mlx(v, rows, cols, bits, group, sb_dt, packed, sc, bi, err)
                 : choir_quantize(v, rows, cols, bits, group, sb_dt, packed, sc, bi, err);
    if (rc < 0) return choir_err_prefix(err, "%s", prefix);
    char name[1024];
    int64_t wshape[2] = {rows, words}, sshape[2] = {rows, groups};
    snprintf(name, sizeof name, "%s.weight", prefix);
    if ((rc = add_ref(j, name, CHOIR_DTYPE_U32, 2, wshape, packed, err)) < 0) return rc;
    snprintf(name, sizeof name, "%s.scales", prefix);
    if ((rc = add_ref(j, name, sb_dt, 2, sshape, sc, err)) < 0) return rc;
    snprintf(name, sizeof name, "%s.biases", prefix);
    if ((rc = add_ref(j, name, sb_dt, 2, sshape, bi, err)) < 0) return rc;
    return note_layer(j, prefix, bits, group, err);
}

/* A float tensor (or the dequantized values `deq` of a quantized one). */
static int convert_float(job *j, const choir_st_tensor *t, const float *deq, choir_dtype src_dt,
                         choir_err *err) {
    const choir_convert_params *p = j->p;
    FILE *rep = p->report;
    choir_dtype out_dt = p->dtype >= 0 ? (choir_dtype)p->dtype : src_dt;
    if (out_dt == CHOIR_DTYPE_F64 && deq) out_dt = CHOIR_DTYPE_F32;
    char shp[96];
    shape_str(t, shp, sizeof shp);
    const char *why = "no quantization asked";
    bool quantize = false;
    int bits = p->q_bits;
    if (j->g_bits > 0 && (p->q_bits > 0 || p->quant_predicate)) {
        quantize = choir_convert_should_quantize(j->model, t->name, t->ndim, t->shape,
                                                 p->q_group_size, &why);
        if (quantize && p->quant_predicate) {
            size_t plen = strlen(t->name) - strlen(".weight");
            char path[1024];
            snprintf(path, sizeof path, "%.*s", (int)plen, t->name);
            bits = choir_convert_mixed_bits(p->quant_predicate, path, j->n_layers);
        }
    }
    if (quantize) {
        choir_dtype sb_dt = (out_dt == CHOIR_DTYPE_F16 || out_dt == CHOIR_DTYPE_BF16)
                                ? out_dt : CHOIR_DTYPE_F32;
        const float *v = deq;
        if (!v && !(v = as_f32(j, t, sb_dt, err))) return err ? err->code : CHOIR_ENOMEM;
        char prefix[1024];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(t->name) - strlen(".weight")), t->name);
        if (rep)
            fprintf(rep, "  quantize  %s %s %s -> %d-bit g%d (%s scales)\n", t->name, shp,
                    choir_dtype_name(src_dt), bits, p->q_group_size, choir_dtype_name(sb_dt));
        int rc = add_quantized(j, prefix, v, t->shape[0], t->shape[1], bits, p->q_group_size,
                               sb_dt, err);
        if (v != deq) release(j, v);
        return rc;
    }
    if (rep)
        fprintf(rep, "  %-9s %s %s %s%s%s (%s)\n",
                deq ? "dequant" : (out_dt == src_dt ? "keep" : "cast"), t->name, shp,
                choir_dtype_name(src_dt), out_dt == src_dt && !deq ? "" : " -> ",
                out_dt == src_dt && !deq ? "" : choir_dtype_name(out_dt),
                deq ? "expanded to float" : why);
    if (!deq && out_dt == t->dtype)
        return add_ref(j, t->name, t->dtype, t->ndim, t->shape, t->data, err);
    const float *v = deq ? deq : as_f32(j, t, CHOIR_DTYPE_F32, err);
    if (!v) return err ? err->code : CHOIR_ENOMEM;
    int rc = add_float(j, t->name, t->ndim, t->shape, v, t->numel, out_dt, err);
    if (v != deq) release(j, v);
    return rc;
}

/* The weight of a quantized input layer at `prefix`: copied as it is, or
 * expanded to float (then cast, or requantized with the new parameters). */
static int convert_quantized(job *j, const choir_st_tensor *w, const char *prefix,
                             choir_err *err) {
    const choir_convert_params *p = j->p;
    choir_weight W;
    int rc = choir_weight_from_st(j->src.st, prefix, j->src_qc, &W, err);
    if (rc < 0) return rc;
    const choir_st_tensor *sc = src_find2(&j->src, prefix, strlen(prefix), ".scales");
    const choir_st_tensor *bi = src_find2(&j->src, prefix, strlen(prefix), ".biases");
    if (!p->dequantize && p->q_bits == 0 && !p->quant_predicate) {
        /* Codes are kept; only the scales and biases follow --dtype. */
        choir_dtype sb_dt = p->dtype >= 0 ? (choir_dtype)p->dtype : W.sb_dtype;
        if (p->report)
            fprintf(p->report, "  keep      %s [%lld, %lld] %d-bit g%d %s scales (already quantized)\n",
                    prefix, (long long)W.rows, (long long)W.cols, W.bits, W.group_size,
                    choir_dtype_name(sb_dt));
        if ((rc = add_ref(j, w->name, w->dtype, w->ndim, w->shape, w->data, err)) < 0) return rc;
        if (sb_dt == sc->dtype) {
            if ((rc = add_ref(j, sc->name, sc->dtype, sc->ndim, sc->shape, sc->data, err)) < 0 ||
                (rc = add_ref(j, bi->name, bi->dtype, bi->ndim, bi->shape, bi->data, err)) < 0)
                return rc;
        } else {
            const float *s32 = as_f32(j, sc, CHOIR_DTYPE_F32, err);
            const float *b32 = s32 ? as_f32(j, bi, CHOIR_DTYPE_F32, err) : NULL;
            if (!b32) return err ? err->code : CHOIR_ENOMEM;
            if ((rc = add_float(j, sc->name, sc->ndim, sc->shape, s32, sc->numel, sb_dt, err)) < 0)
                return rc;
            release(j, s32);
            if ((rc = add_float(j, bi->name, bi->ndim, bi->shape, b32, bi->numel, sb_dt, err)) < 0)
                return rc;
            release(j, b32);
        }
        return note_layer(j, prefix, W.bits, W.group_size, err);
    }
    float *v = own(j, (size_t)(W.rows * W.cols) * sizeof(float), err);
    if (!v) return CHOIR_ENOMEM;
    choir_quant_dequant(&W, v);
    /* The logical tensor, as if the input had been float. */
    choir_st_tensor logical = *w;
    logical.dtype = W.sb_dtype;
    logical.shape[1] = W.cols;
    logical.numel = W.rows * W.cols;
    logical.data = NULL;
    rc = convert_float(j, &logical, v, W.sb_dtype, err);
    if (rc == 0) release(j, v); /* kept when written as f32 by reference */
    return rc;
}

static int convert_tensor(job *j, const choir_st_tensor *t, choir_err *err) {
    size_t len = strlen(t->name);
    /* scales/biases travel with their weight */
    if (ends_with(t->name, ".scales") || ends_with(t->name, ".biases")) {
        const choir_st_tensor *w = src_find2(&j->src, t->name, len - 7, ".weight");
        if (w && w->dtype == CHOIR_DTYPE_U32) return 0;
    }
    j->stats.tensors++;
    if (ends_with(t->name, ".weight") && t->dtype == CHOIR_DTYPE_U32 &&
        src_find2(&j->src, t->name, len - 7, ".scales")) {
        char prefix[1024];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 7), t->name);
        return convert_quantized(j, t, prefix, err);
    }
    if (is_float(t->dtype)) return convert_float(j, t, NULL, t->dtype, err);
    if (j->p->report)
        fprintf(j->p->report, "  keep      %s (%s)\n", t->name, choir_dtype_name(t->dtype));
    return add_ref(j, t->name, t->dtype, t->ndim, t->shape, t->data, err);
}

/* A Kokoro tensor of the mlx-audio layout in its native name and layout
 * (spec §9.2), then converted as any other. */
static int convert_kokoro_tensor(job *j, const choir_st_tensor *t, choir_err *err) {
    char name[1024];
    choir_st_tensor native;
    bool reorder;
    int rc = convert_kokoro_native(t, &native, name, sizeof name, &reorder, err);
    if (rc < 0) return rc;
    if (reorder) {
        void *values = own(j, t->nbytes, err);
        if (!values) return CHOIR_ENOMEM;
        convert_kokoro_reorder(t, values);
        native.data = values;
    }
    if (j->p->report && strcmp(t->name, name) != 0)
        fprintf(j->p->report, "  rename    %s -> %s\n", t->name, name);
    if (j->p->report && reorder)
        fprintf(j->p->report, "  reorder   %s [out, k, in] -> [out, in, k]\n", name);
    rc = convert_tensor(j, &native, err);
    if (reorder && rc == 0) release(j, native.data); /* unless written as it is */
    return rc;
}

/* --- source -------------------------------------------------------------- */

static int path_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int path_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The one checkpoint file with extension `ext` in dir (not a tokenizer), 0
 * when none, CHOIR_EUNSUPPORTED when several. */
static int find_single(const char *dir, const char *ext, char *out, size_t cap, choir_err *err) {
    DIR *d = opendir(dir);
    if (!d) return choir_err_set(err, CHOIR_EIO, "%s: cannot list the directory", dir);
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ext) || strstr(e->d_name, "tokenizer"))
            continue;
        if (found++ == 0) snprintf(out, cap, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (found > 1)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "%s: several *%s files and no model.safetensors.index.json; "
                             "name the file to convert",
                             dir, ext);
    return found;
}

static int open_st(source *s, const char *path, choir_err *err) {
    s->st = choir_st_open(path, err);
    if (!s->st) return err ? err->code : CHOIR_EFORMAT;
    s->n = choir_st_count(s->st);
    s->tensors = choir_alloc(CHOIR_MEM_OTHER, (size_t)(s->n ? s->n : 1) * sizeof *s->tensors);
    if (!s->tensors) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    for (int i = 0; i < s->n; i++) s->tensors[i] = choir_st_at(s->st, i);
    return 0;
}

static int open_source(source *s, const char *src, choir_err *err) {
    char file[PATH_MAX + 300];
    int rc;
    if (path_is_dir(src)) {
        s->from_dir = true;
        snprintf(s->dir, sizeof s->dir, "%s", src);
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/model.safetensors", src);
        int std = path_exists(probe);
        snprintf(probe, sizeof probe, "%s/model.safetensors.index.json", src);
        if (std || path_exists(probe)) {
            rc = open_st(s, src, err);
        } else if ((rc = find_single(src, ".safetensors", file, sizeof file, err)) != 0) {
            rc = rc < 0 ? rc : open_st(s, file, err);
        } else if ((rc = find_single(src, ".pth", file, sizeof file, err)) != 0) {
            rc = rc < 0 ? rc : convert_pth_open(file, &s->pth, &s->tensors, &s->n, err);
        } else if (snprintf(file, sizeof file, "%s/pytorch_model.bin", src), path_exists(file)) {
            /* transformers' torch.save archive */
            rc = convert_pth_open(file, &s->pth, &s->tensors, &s->n, err);
        } else {
            return choir_err_set(err, CHOIR_ENOTFOUND,
                                 "%s: no checkpoint found (looked for *.safetensors, *.pth and "
                                 "pytorch_model.bin)",
                                 src);
        }
        if (rc < 0) return rc;
    } else {
        if (!path_exists(src)) return choir_err_set(err, CHOIR_ENOTFOUND, "%s: no such file", src);
        const char *slash = strrchr(src, '/');
        if (slash)
            snprintf(s->dir, sizeof s->dir, "%.*s", (int)(slash - src), src);
        else
            snprintf(s->dir, sizeof s->dir, ".");
        if (ends_with(src, ".pth") || ends_with(src, ".pt") || ends_with(src, ".bin"))
            rc = convert_pth_open(src, &s->pth, &s->tensors, &s->n, err);
        else if (ends_with(src, ".safetensors") || ends_with(src, ".json"))
            rc = open_st(s, src, err);
        else
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "%s: unknown input type (expected a directory, .safetensors, "
                                 ".pth, pytorch_model.bin or .onnx)",
                                 src);
        if (rc < 0) return rc;
    }
    snprintf(file, sizeof file, "%s/config.json", s->dir);
    if (path_exists(file)) {
        s->config = choir_json_load(file, err);
        if (!s->config) return err ? err->code : CHOIR_EFORMAT;
    }
    return 0;
}

static void close_source(source *s) {
    if (s->st) choir_free((void *)s->tensors);
    choir_st_close(s->st);
    convert_pth_close(s->pth);
    cJSON_Delete(s->config);
}

/* --- parameters ---------------------------------------------------------- */

static int check_params(const choir_convert_params *p, choir_err *err) {
    if (p->dtype != -1 && p->dtype != CHOIR_DTYPE_F32 && p->dtype != CHOIR_DTYPE_F16 &&
        p->dtype != CHOIR_DTYPE_BF16)
        return choir_err_set(err, CHOIR_EINVAL, "--dtype must be f32, f16 or bf16");
    if (p->dequantize && (p->q_bits || p->quant_predicate))
        return choir_err_set(err, CHOIR_EINVAL,
                             "--dequantize expands to float; it cannot be combined with "
                             "--q-bits or --quant-predicate");
    if (p->quant_predicate) {
        int low = choir_convert_mixed_bits(p->quant_predicate, "x", 1);
        if (low == 0)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "unknown --quant-predicate \"%s\" (mixed_3_6 or mixed_4_6)",
                                 p->quant_predicate);
        if (p->q_bits && p->q_bits != low)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "--quant-predicate %s quantizes most layers to %d bits; "
                                 "--q-bits %d contradicts it",
                                 p->quant_predicate, low, p->q_bits);
    }
    int bits = p->q_bits ? p->q_bits : (p->quant_predicate ? 3 : 4);
    if ((p->q_bits || p->quant_predicate) && !choir_quant_supported(bits, p->q_group_size))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "%d-bit quantization with group size %d is not supported "
                             "(bits 2,3,4,5,6,8; group sizes 32,64,128)",
                             bits, p->q_group_size);
    return 0;
}

/* Layers in the deepest numbered stack, for the mixed recipes. */
static int count_layers(const source *s) {
    int max = -1;
    for (int i = 0; i < s->n; i++) {
        const char *p = s->tensors[i]->name;
        while ((p = strchr(p, '.')) != NULL) {
            p++;
            char *end;
            long v = strtol(p, &end, 10);
            if (end != p && (*end == '.' || *end == '\0') && v > max && v < 100000) {
                max = (int)v;
                break;
            }
        }
    }
    return max + 1;
}

/* --- config.json --------------------------------------------------------- */

static int write_config(job *j, const char *dst, choir_err *err) {
    cJSON *cfg = j->src.config ? cJSON_Duplicate(j->src.config, 1) : cJSON_CreateObject();
    if (!cfg) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization");
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
    int rc = 0;
    if (j->stats.quantized > 0) {
        /* MLX writers duplicate the block under both keys. */
        for (int k = 0; k < 2 && rc == 0; k++) {
            cJSON *q = cJSON_Duplicate(j->layers, 1);
            if (!q || !cJSON_AddNumberToObject(q, "group_size", j->g_group) ||
                !cJSON_AddNumberToObject(q, "bits", j->g_bits) ||
                !cJSON_AddStringToObject(q, "mode", "affine")) {
                cJSON_Delete(q);
                rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
                break;
            }
            cJSON_AddItemToObject(cfg, k == 0 ? "quantization" : "quantization_config", q);
        }
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", dst);
    if (rc == 0) rc = choir_json_save(cfg, path, err);
    cJSON_Delete(cfg);
    return rc;
}

/* model.safetensors.index.json, as current mlx-audio writes it even for one shard. */
static int write_index(job *j, const char *dst, choir_err *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "metadata") : NULL;
    cJSON *map = meta ? cJSON_AddObjectToObject(root, "weight_map") : NULL;
    int rc = 0;
    if (!map || !cJSON_AddNumberToObject(meta, "total_size", (double)j->stats.bytes_out)) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    } else {
        choir_st *st = NULL;
        char path[PATH_MAX + 40];
        snprintf(path, sizeof path, "%s/model.safetensors", dst);
        st = choir_st_open(path, err);
        if (!st) rc = err ? err->code : CHOIR_EFORMAT;
        for (int i = 0; st && i < choir_st_count(st); i++)
            cJSON_AddStringToObject(map, choir_st_at(st, i)->name, "model.safetensors");
        choir_st_close(st);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dst);
        if (rc == 0) rc = choir_json_save(root, path, err);
    }
    cJSON_Delete(root);
    return rc;
}

/* --- the conversion ------------------------------------------------------ */

static int same_path(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

int choir_convert(const char *src, const char *dst, const choir_convert_params *p,
                  choir_convert_stats *stats, choir_err *err) {
    if (!src || !dst || !p) return choir_err_set(err, CHOIR_EINVAL, "choir_convert: NULL argument");
    int rc = check_params(p, err);
    if (rc < 0) return rc;
    if (ends_with(src, ".onnx")) {
        if (p->q_bits || p->quant_predicate || p->dtype >= 0 || p->dequantize)
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "%s: ONNX inputs (Silero VAD) are converted as they are; "
                                 "--q-bits, --quant-predicate, --dtype and --dequantize do "
                                 "not apply",
                                 src);
        if (p->report) fprintf(p->report, "onnx input: Silero VAD converter\n");
        return choir_silero_convert_onnx(src, dst, err);
    }
    if (path_exists(dst) && same_path(src, dst))
        return choir_err_set(err, CHOIR_EINVAL, "%s: output must differ from the input", dst);

    job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    if ((rc = open_source(&j.src, src, err)) < 0) goto done;
    if (j.src.config) {
        j.src_qc = choir_quant_config_from_json(j.src.config, err);
        if (!j.src_qc) {
            rc = choir_err_prefix(err, "%s/config.json", j.src.dir);
            goto done;
        }
    }
    j.model = choir_convert_detect_model(j.src.config);
    j.n_layers = count_layers(&j.src);
    j.kokoro_mlx = j.model == CHOIR_CONVERT_MODEL_KOKORO &&
                   convert_kokoro_is_mlx(j.src.tensors, j.src.n);
    if (p->q_bits || p->quant_predicate) {
        j.g_bits = p->q_bits ? p->q_bits : choir_convert_mixed_bits(p->quant_predicate, "x", 1);
        j.g_group = p->q_group_size;
    } else if (!p->dequantize && !choir_quant_config_global(j.src_qc, &j.g_bits, &j.g_group)) {
        j.g_bits = 0;
    }
    j.layers = cJSON_CreateObject();
    j.writer = choir_st_writer_create(err);
    if (!j.layers || !j.writer) {
        rc = j.writer ? choir_err_set(err, CHOIR_ENOMEM, "out of memory") : err->code;
        goto done;
    }
    if ((rc = choir_st_writer_set_metadata(j.writer, "format", "mlx", err)) < 0) goto done;
    if (p->report)
        fprintf(p->report, "converting %s (%s%s, %d tensors) -> %s\n", src,
                choir_convert_model_name(j.model), j.kokoro_mlx ? ", mlx-audio layout" : "",
                j.src.n, dst);
    for (int i = 0; i < j.src.n; i++) {
        j.stats.bytes_in += j.src.tensors[i]->nbytes;
        rc = j.kokoro_mlx ? convert_kokoro_tensor(&j, j.src.tensors[i], err)
                          : convert_tensor(&j, j.src.tensors[i], err);
        if (rc < 0) goto done;
    }
    if ((p->q_bits || p->quant_predicate) && j.stats.quantized == 0 && p->report)
        fprintf(p->report, "warning: no layer of this model qualifies for quantization\n");
    if ((rc = convert_make_dir(dst, err)) < 0) goto done;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    if ((rc = choir_st_writer_save(j.writer, path, err)) < 0) goto done;
    if ((rc = write_index(&j, dst, err)) < 0) goto done;
    if ((rc = write_config(&j, dst, err)) < 0) goto done;
    if (j.src.from_dir && (rc = convert_copy_side_files(j.src.dir, dst, p->report, err)) < 0)
        goto done;
    rc = 0;
    if (p->report)
        fprintf(p->report, "size: %.2f MB -> %.2f MB (%.1f%%), %d tensors, %d quantized layers\n",
                (double)j.stats.bytes_in / 1e6, (double)j.stats.bytes_out / 1e6,
                j.stats.bytes_in ? 100.0 * (double)j.stats.bytes_out / (double)j.stats.bytes_in
                                 : 0.0,
                j.stats.tensors, j.stats.quantized);
done:
    if (stats) *stats = j.stats;
    choir_st_writer_free(j.writer);
    for (int i = 0; i < j.n_owned; i++) choir_free(j.owned[i]);
    choir_free(j.owned);
    cJSON_Delete(j.layers);
    choir_quant_config_free(j.src_qc);
    close_source(&j.src);
    return rc;
}
