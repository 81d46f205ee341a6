/* The tensor type, IEEE half/bfloat conversions and linear-layer weights. */
#include <math.h>
#include <string.h>

#include "choir/quant.h"
#include "choir/tensor.h"
#include "tensor/cpu/cpu_kernels.h"

static int check_shape(choir_dtype dtype, int ndim, const int64_t *shape, int64_t *numel,
                       choir_err *err) {
    if (choir_dtype_size(dtype) == 0)
        return choir_err_set(err, CHOIR_EINVAL, "tensor: invalid dtype %d", (int)dtype);
    if (ndim < 0 || ndim > CHOIR_MAX_DIMS)
        return choir_err_set(err, CHOIR_EINVAL, "tensor: %d dims (at most %d)", ndim,
                             CHOIR_MAX_DIMS);
    if (ndim > 0 && !shape) return choir_err_set(err, CHOIR_EINVAL, "tensor: no shape");
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return choir_err_set(err, CHOIR_EINVAL, "tensor: negative size %lld in dim %d",
                                 (long long)shape[i], i);
        if (shape[i] > 0 && n > (INT64_MAX / 16) / shape[i])
            return choir_err_set(err, CHOIR_EINVAL, "tensor: shape too large");
        n *= shape[i];
    }
    *numel = n;
    return 0;
}

static void set_contiguous(choir_tensor *t, choir_dtype dtype, int ndim, const int64_t *shape) {
    t->dtype = dtype;
    t->ndim = ndim;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->stride[i] = s;
        s *= shape[i];
    }
}

choir_tensor *choir_tensor_new(choir_dtype dtype, int ndim, const int64_t *shape,
                               choir_mem_category cat, choir_err *err) {
    int64_t n = 0;
    if (check_shape(dtype, ndim, shape, &n, err) < 0) return NULL;
    choir_tensor *t = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *t);
    if (!t) goto fail;
    set_contiguous(t, dtype, ndim, shape);
    t->data = choir_calloc(cat, (size_t)n, choir_dtype_size(dtype));
    if (!t->data) goto fail;
    t->owns_data = true;
    return t;
fail:
    choir_free(t);
    choir_err_set(err, CHOIR_ENOMEM, "tensor: out of memory for %lld elements", (long long)n);
    return NULL;
}

choir_tensor *choir_tensor_view(choir_dtype dtype, int ndim, const int64_t *shape, void *data,
                                choir_err *err) {
    int64_t n = 0;
    if (check_shape(dtype, ndim, shape, &n, err) < 0) return NULL;
    if (!data && n > 0) {
        choir_err_set(err, CHOIR_EINVAL, "tensor: view of NULL data");
        return NULL;
    }
    choir_tensor *t = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *t);
    if (!t) {
        choir_err_set(err, CHOIR_ENOMEM, "tensor: out of memory");
        return NULL;
    }
    set_contiguous(t, dtype, ndim, shape);
    t->data = data;
    t->owns_data = false;
    return t;
}

void choir_tensor_free(choir_tensor *t) {
    if (!t) return;
    if (t->owns_data) choir_free(t->data);
    choir_free(t);
}

int64_t choir_tensor_numel(const choir_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

bool choir_tensor_is_contiguous(const choir_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        /* A dimension of size 1 can have any stride without changing the layout. */
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

/* --- conversions --------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t choir_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf, or NaN kept quiet with the top payload bits */
        if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    /* 65520 is halfway between the largest half (65504) and 2^16; it rounds to even: inf. */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* Half subnormals: adding 0.5 lines the half's last mantissa bit up with
         * the float's, so the FPU's own round-to-nearest-even does the rounding. */
        float v = bits_f32(ax) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(f32_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax += 0xc8000000u + 0xfffu + odd; /* rebias exponent 127 -> 15, round to nearest even */
    return (uint16_t)(sign | (uint16_t)(ax >> 13));
}

float choir_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-08f; /* exact: mant * 2^-24 */
        return bits_f32(sign | f32_bits(v));
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t choir_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float choir_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

void choir_f32_to_f16_n(const float *src, uint16_t *dst, int64_t n) {
    choir_cpu_ops_now()->f32_to_f16(src, dst, n);
}
void choir_f16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
    choir_cpu_ops_now()->f16_to_f32(src, dst, n);
}
void choir_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n) {
    choir_cpu_ops_now()->f32_to_bf16(src, dst, n);
}
void choir_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n) {
    choir_cpu_ops_now()->bf16_to_f32(src, dst, n);
}

int choir_to_f32_n(choir_dtype src_dtype, const void *src, float *dst, int64_t n) {
    switch (src_dtype) {
    case CHOIR_DTYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); return 0;
    case CHOIR_DTYPE_F16: choir_f16_to_f32_n(src, dst, n); return 0;
    case CHOIR_DTYPE_BF16: choir_bf16_to_f32_n(src, dst, n); return 0;
    case CHOIR_DTYPE_F64: {
        const double *d = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)d[i];
        return 0;
    }
    default: return CHOIR_EUNSUPPORTED;
    }
}

/* --- weights ------------------------------------------------------------- */

choir_weight choir_weight_f32(const float *data, int64_t rows, int64_t cols) {
    choir_weight w;
    memset(&w, 0, sizeof w);
    w.kind = CHOIR_WEIGHT_F32;
    w.rows = rows;
    w.cols = cols;
    w.data = data;
    w.sb_dtype = CHOIR_DTYPE_F32;
    return w;
}

void choir_weight_row_f32(const choir_weight *w, int64_t r, float *out) {
    int64_t c = w->cols;
    switch (w->kind) {
    case CHOIR_WEIGHT_F32:
        memcpy(out, (const float *)w->data + r * c, (size_t)c * sizeof(float));
        break;
    case CHOIR_WEIGHT_F16: choir_f16_to_f32_n((const uint16_t *)w->data + r * c, out, c); break;
    case CHOIR_WEIGHT_BF16: choir_bf16_to_f32_n((const uint16_t *)w->data + r * c, out, c); break;
    case CHOIR_WEIGHT_QUANT: choir_quant_dequant_row(w, r, out); break;
    }
}

size_t choir_weight_bytes(const choir_weight *w) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    switch (w->kind) {
    case CHOIR_WEIGHT_F32: return n * 4;
    case CHOIR_WEIGHT_F16:
    case CHOIR_WEIGHT_BF16: return n * 2;
    case CHOIR_WEIGHT_QUANT: {
        size_t packed = (size_t)w->rows * ((size_t)w->cols * (size_t)w->bits / 32) * 4;
        size_t groups =
            w->group_size > 0 ? (size_t)w->rows * ((size_t)w->cols / (size_t)w->group_size) : 0;
        return packed + 2 * groups * choir_dtype_size(w->sb_dtype);
    }
    }
    return 0;
}
