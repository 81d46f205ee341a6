/* Producing MLX-quantized weights, packing, the config.json quantization
 * block and the uniform linear-layer loader. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/quant.h"
#include "tensor/quant_internal.h"

int64_t choir_quant_packed_cols(int64_t cols, int bits) {
    return (cols * bits + 31) / 32;
}

void choir_quant_pack(const uint8_t *codes, int64_t n, int bits, uint32_t *packed) {
    memset(packed, 0, (size_t)choir_quant_packed_cols(n, bits) * sizeof(uint32_t));
    uint32_t mask = (1u << bits) - 1u;
    for (int64_t c = 0; c < n; c++) choir_quant_put_code(packed, c, bits, codes[c] & mask);
}

void choir_quant_unpack(const uint32_t *packed, int64_t n, int bits, uint8_t *codes) {
    for (int64_t c = 0; c < n; c++) codes[c] = (uint8_t)choir_quant_code(packed, c, bits);
}

static void store_sb(void *p, choir_dtype dt, int64_t i, float v) {
    if (dt == CHOIR_DTYPE_F16)
        ((uint16_t *)p)[i] = choir_f32_to_f16(v);
    else if (dt == CHOIR_DTYPE_BF16)
        ((uint16_t *)p)[i] = choir_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* One group, following MLX's affine quantizer (f32 arithmetic): the scale is
 * signed so that the larger-magnitude edge is the bias, then snapped so that
 * 0.0 decodes exactly. The snap can shrink the scale enough that the far edge
 * needs code 2^bits (clamped, an error of up to one step); for those groups
 * we keep the unsnapped min/max scale instead, so that every element stays
 * within half a step (unless mlx_exact). All other groups come out
 * bit-identical to MLX (checked against an f32 emulation of MLX's algorithm:
 * on uniform random weights about 60% of 4-bit groups take the guard). */
static void quantize_group(const float *x, int G, int bits, int mlx_exact, float *scale_out,
                           float *bias_out, uint32_t *row, int64_t c0) {
    const float n_bins = (float)((1 << bits) - 1);
    const float eps = 1e-7f;
    float mx = x[0], mn = x[0];
    for (int i = 1; i < G; i++) {
        if (x[i] > mx) mx = x[i];
        if (x[i] < mn) mn = x[i];
    }
    int neg_edge = fabsf(mn) > fabsf(mx);
    float s = fmaxf((mx - mn) / n_bins, eps);
    if (!neg_edge) s = -s;
    float edge = neg_edge ? mn : mx;
    float far = neg_edge ? mx : mn;
    float q0 = rintf(edge / s);
    float b = 0.0f;
    if (q0 != 0.0f) {
        float s_snap = edge / q0;
        if (mlx_exact || rintf((far - edge) / s_snap) <= n_bins) {
            s = s_snap;
            b = edge;
        } else {
            b = edge; /* unsnapped: edge maps to code 0, far edge to n_bins */
        }
    }
    for (int i = 0; i < G; i++) {
        float q = rintf((x[i] - b) / s);
        q = q < 0.0f ? 0.0f : (q > n_bins ? n_bins : q);
        choir_quant_put_code(row, c0 + i, bits, (uint32_t)q);
    }
    *scale_out = s;
    *bias_out = b;
}

static int quantize(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                    choir_dtype sb_dtype, uint32_t *packed, void *scales, void *biases,
                    int mlx_exact, choir_err *err) {
    if (!choir_quant_supported(bits, group_size))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "quantization with %d bits and group size %d is not supported "
                             "(bits 2,3,4,5,6,8; group size 32,64,128)",
                             bits, group_size);
    if (cols <= 0 || rows < 0 || cols % group_size != 0)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "cannot quantize a [%lld, %lld] matrix: the row length must be a "
                             "positive multiple of the group size %d",
                             (long long)rows, (long long)cols, group_size);
    if (sb_dtype != CHOIR_DTYPE_F32 && sb_dtype != CHOIR_DTYPE_F16 && sb_dtype != CHOIR_DTYPE_BF16)
        return choir_err_set(err, CHOIR_EINVAL, "scales must be F32, F16 or BF16, not %s",
                             choir_dtype_name(sb_dtype));
    const int64_t words = choir_quant_packed_cols(cols, bits);
    const int64_t groups = cols / group_size;
    for (int64_t r = 0; r < rows; r++) {
        uint32_t *row = packed + r * words;
        memset(row, 0, (size_t)words * sizeof(uint32_t));
        for (int64_t g = 0; g < groups; g++) {
            float s, b;
            quantize_group(w + r * cols + g * group_size, group_size, bits, mlx_exact, &s, &b, row,
                           g * group_size);
            store_sb(scales, sb_dtype, r * groups + g, s);
            store_sb(biases, sb_dtype, r * groups + g, b);
        }
    }
    return CHOIR_OK;
}

int choir_quantize(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                   choir_dtype sb_dtype, uint32_t *packed, void *scales, void *biases,
                   choir_err *err) {
    return quantize(w, rows, cols, bits, group_size, sb_dtype, packed, scales, biases, 0, err);
}

int choir_quantize_mlx(const float *w, int64_t rows, int64_t cols, int bits, int group_size,
                       choir_dtype sb_dtype, uint32_t *packed, void *scales, void *biases,
                       choir_err *err) {
    return quantize(w, rows, cols, bits, group_size, sb_dtype, packed, scales, biases, 1, err);
}

void choir_quant_dequant(const choir_weight *W, float *out) {
    for (int64_t r = 0; r < W->rows; r++) choir_quant_dequant_row(W, r, out + r * W->cols);
}

/* --- config.json ------------------------------------------------------- */

typedef struct layer_override {
    char *path;
    int bits, group_size; /* bits 0: kept in float */
} layer_override;

struct choir_quant_config {
    int present;
    int bits, group_size;
    layer_override *layers;
    int n_layers;
};

/* Direct cJSON look-ups keep this file independent of the config helpers. */
static const char *json_str(const cJSON *obj, const char *key, const char *def) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(it) ? it->valuestring : def;
}

static int json_int(const cJSON *obj, const char *key, int def) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(it) ? (int)it->valuedouble : def;
}

static int parse_params(const cJSON *obj, const char *where, int def_group, int *bits,
                        int *group_size, choir_err *err) {
    const char *mode = json_str(obj, "mode", "affine");
    if (strcmp(mode, "affine") != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "%s: quantization mode \"%s\" is not supported (only affine)", where,
                             mode);
    *bits = json_int(obj, "bits", 4);
    *group_size = json_int(obj, "group_size", def_group);
    if (!choir_quant_supported(*bits, *group_size))
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "%s: %d bits with group size %d is not supported", where, *bits,
                             *group_size);
    return CHOIR_OK;
}

void choir_quant_config_free(choir_quant_config *qc) {
    if (!qc) return;
    for (int i = 0; i < qc->n_layers; i++) choir_free(qc->layers[i].path);
    choir_free(qc->layers);
    choir_free(qc);
}

choir_quant_config *choir_quant_config_from_json(const cJSON *root, choir_err *err) {
    choir_quant_config *qc = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof(*qc));
    if (!qc) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory reading the quantization config");
        return NULL;
    }
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!cJSON_IsObject(q)) q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!cJSON_IsObject(q)) return qc;
    qc->present = 1;
    if (parse_params(q, "config.json quantization", 64, &qc->bits, &qc->group_size, err) < 0)
        goto fail;
    int n = 0;
    for (const cJSON *it = q->child; it; it = it->next)
        if (cJSON_IsObject(it) || cJSON_IsBool(it)) n++;
    if (n > 0) {
        qc->layers = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof(*qc->layers));
        if (!qc->layers) {
            choir_err_set(err, CHOIR_ENOMEM, "out of memory reading the quantization config");
            goto fail;
        }
    }
    for (const cJSON *it = q->child; it; it = it->next) {
        if (!cJSON_IsObject(it) && !cJSON_IsBool(it)) continue;
        layer_override *lo = &qc->layers[qc->n_layers];
        lo->path = choir_strdup(it->string);
        if (!lo->path) {
            choir_err_set(err, CHOIR_ENOMEM, "out of memory reading the quantization config");
            goto fail;
        }
        qc->n_layers++;
        if (cJSON_IsTrue(it)) {
            lo->bits = qc->bits;
            lo->group_size = qc->group_size;
        } else if (cJSON_IsObject(it)) {
            char where[300];
            snprintf(where, sizeof where, "config.json quantization entry \"%.200s\"", it->string);
            if (parse_params(it, where, qc->group_size, &lo->bits, &lo->group_size, err) < 0)
                goto fail;
        }
    }
    return qc;
fail:
    choir_quant_config_free(qc);
    return NULL;
}

int choir_quant_config_global(const choir_quant_config *qc, int *bits, int *group_size) {
    if (!qc || !qc->present) return 0;
    if (bits) *bits = qc->bits;
    if (group_size) *group_size = qc->group_size;
    return 1;
}

int choir_quant_config_layer(const choir_quant_config *qc, const char *path, int *bits,
                             int *group_size) {
    if (!qc || !qc->present) return 0;
    int b = qc->bits, g = qc->group_size;
    for (int i = 0; i < qc->n_layers; i++) {
        if (strcmp(qc->layers[i].path, path) == 0) {
            b = qc->layers[i].bits;
            g = qc->layers[i].group_size;
            break;
        }
    }
    if (b == 0) return 0;
    if (bits) *bits = b;
    if (group_size) *group_size = g;
    return 1;
}

/* --- loading ------------------------------------------------------------ */

static int is_float_dtype(choir_dtype dt) {
    return dt == CHOIR_DTYPE_F32 || dt == CHOIR_DTYPE_F16 || dt == CHOIR_DTYPE_BF16;
}

static const choir_st_tensor *find_key(const choir_st *st, const char *prefix, const char *suffix) {
    char name[512];
    if (snprintf(name, sizeof name, "%s.%s", prefix, suffix) >= (int)sizeof name) return NULL;
    return choir_st_find(st, name);
}

int choir_weight_from_st(const choir_st *st, const char *prefix, const choir_quant_config *qc,
                         choir_weight *out, choir_err *err) {
    memset(out, 0, sizeof(*out));
    const choir_st_tensor *w = find_key(st, prefix, "weight");
    if (!w) return choir_err_set(err, CHOIR_ENOTFOUND, "tensor %s.weight is missing", prefix);
    if (w->ndim != 2)
        return choir_err_set(err, CHOIR_ESHAPE, "%s: expected a 2-D matrix, found %d dimensions",
                             w->name, w->ndim);
    const choir_st_tensor *sc = find_key(st, prefix, "scales");
    if (!sc) {
        if (!is_float_dtype(w->dtype))
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "%s: dtype %s is not a float weight and there is no %s.scales",
                                 w->name, choir_dtype_name(w->dtype), prefix);
        out->kind = w->dtype == CHOIR_DTYPE_F32   ? CHOIR_WEIGHT_F32
                    : w->dtype == CHOIR_DTYPE_F16 ? CHOIR_WEIGHT_F16
                                                  : CHOIR_WEIGHT_BF16;
        out->rows = w->shape[0];
        out->cols = w->shape[1];
        out->data = w->data;
        return CHOIR_OK;
    }
    const choir_st_tensor *bi = find_key(st, prefix, "biases");
    if (!bi)
        return choir_err_set(err, CHOIR_ENOTFOUND, "%s.scales exists but %s.biases is missing",
                             prefix, prefix);
    if (w->dtype != CHOIR_DTYPE_U32)
        return choir_err_set(err, CHOIR_ESHAPE, "%s: quantized weight must be U32, found %s",
                             w->name, choir_dtype_name(w->dtype));
    if (!is_float_dtype(sc->dtype) || bi->dtype != sc->dtype)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "%s: scales (%s) and biases (%s) must share one float dtype", prefix,
                             choir_dtype_name(sc->dtype), choir_dtype_name(bi->dtype));
    if (sc->ndim != 2 || bi->ndim != 2 || sc->shape[0] != w->shape[0] ||
        bi->shape[0] != w->shape[0] || bi->shape[1] != sc->shape[1] || sc->shape[1] <= 0)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "%s: scales/biases must be [%lld, groups] like the packed weight",
                             prefix, (long long)w->shape[0]);
    int bits = 4, group = 64;
    if (qc && !choir_quant_config_layer(qc, prefix, &bits, &group) &&
        choir_quant_config_global(qc, NULL, NULL))
        return choir_err_set(err, CHOIR_EFORMAT,
                             "%s has scales but config.json marks it as not quantized", prefix);
    int64_t packed = w->shape[1];
    if ((packed * 32) % bits != 0)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "%s: %lld packed words per row do not hold whole %d-bit codes",
                             w->name, (long long)packed, bits);
    int64_t cols = packed * 32 / bits;
    if (cols != sc->shape[1] * group)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "%s: %d-bit codes give %lld columns but %lld groups of %d give "
                             "%lld; the quantization config does not match the tensors",
                             prefix, bits, (long long)cols, (long long)sc->shape[1], group,
                             (long long)(sc->shape[1] * group));
    out->kind = CHOIR_WEIGHT_QUANT;
    out->rows = w->shape[0];
    out->cols = cols;
    out->data = w->data;
    out->scales = sc->data;
    out->biases = bi->data;
    out->sb_dtype = sc->dtype;
    out->bits = bits;
    out->group_size = group;
    return CHOIR_OK;
}

int choir_weight_expect(const choir_weight *W, int64_t rows, int64_t cols, const char *what,
                        choir_err *err) {
    if (W->rows == rows && W->cols == cols) return CHOIR_OK;
    return choir_err_set(err, CHOIR_ESHAPE, "%s: expected a [%lld, %lld] weight, found [%lld, %lld]",
                         what, (long long)rows, (long long)cols, (long long)W->rows,
                         (long long)W->cols);
}
