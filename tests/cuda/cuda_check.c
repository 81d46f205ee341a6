/* Checks every CUDA kernel against its CPU reference (choir/kernels.h) on
 * random inputs, with the tolerance stated next to each case, and the device
 * memory accounting. Prints one line per case; exits 0 when all pass, 1 on a
 * failure, 77 (skipped) when no CUDA device is visible.
 *
 * Tolerances are relative L2 errors over the whole output. f32 paths should
 * agree to rounding (1e-5); bf16 tensor-core paths round their inputs to 8
 * mantissa bits, so they get 1e-2; f16 paths (11 bits) 2e-3. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "choir/kernels.h"
#include "choir/quant.h"
#include "choir/tensor.h"

static int g_failures, g_cases;
static choir_cuda *g_cu;

#define TOL_F32 1e-5
#define TOL_BF16 1e-2
#define TOL_F16 2e-3

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f; }
static float *rnd_vec(int64_t n, float lo, float hi) {
    float *v = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = rnd(lo, hi);
    return v;
}

static double rel_l2(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        if (isnan(a[i]) != isnan(ref[i])) return INFINITY;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void report(const char *name, double err, double tol) {
    int ok = err <= tol;
    g_cases++;
    if (!ok) g_failures++;
    printf("%s %-46s rel_l2 %.3e  (tol %.0e)\n", ok ? "PASS" : "FAIL", name, err, tol);
}

static void expect(const char *name, int cond) {
    g_cases++;
    if (!cond) g_failures++;
    printf("%s %s\n", cond ? "PASS" : "FAIL", name);
}

static void die_on(int rc, choir_err *err, const char *what) {
    if (rc) {
        fprintf(stderr, "FATAL %s: %s\n", what, err->msg);
        exit(1);
    }
}

/* Device copy of host floats; the buffer list is freed at the end of each case. */
#define MAX_BUFS 32
static choir_cuda_buf g_bufs[MAX_BUFS];
static int g_nbufs;
static float *dev(const void *host, size_t bytes) {
    choir_err err = {0};
    choir_cuda_buf *b = &g_bufs[g_nbufs++];
    die_on(choir_cuda_buf_alloc(g_cu, bytes ? bytes : 4, b, &err), &err, "alloc");
    if (host) die_on(choir_cuda_upload(g_cu, b, 0, host, bytes, &err), &err, "upload");
    return b->ptr;
}
static choir_cuda_buf *buf_of(const void *d) {
    for (int i = 0; i < g_nbufs; i++)
        if (g_bufs[i].ptr == d) return &g_bufs[i];
    fprintf(stderr, "FATAL unknown device buffer\n");
    exit(1);
}
static void fetch(float *host, const float *d, size_t bytes) {
    choir_err err = {0};
    for (int i = 0; i < g_nbufs; i++)
        if (g_bufs[i].ptr == d) {
            die_on(choir_cuda_download(g_cu, host, &g_bufs[i], 0, bytes, &err), &err, "download");
            return;
        }
    fprintf(stderr, "FATAL fetch of an unknown buffer\n");
    exit(1);
}
static void free_bufs(void) {
    for (int i = 0; i < g_nbufs; i++) choir_cuda_buf_free(g_cu, &g_bufs[i]);
    g_nbufs = 0;
}

static void check_elementwise(void) {
    choir_err err = {0};
    int64_t rows = 97, cols = 1031, n = rows * cols;
    float *a = rnd_vec(n, -4, 4), *b = rnd_vec(n, -4, 4), *bias = rnd_vec(cols, -1, 1);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, n * 4), *got = choir_alloc(CHOIR_MEM_OTHER, n * 4);
    float *da = dev(a, n * 4), *db = dev(b, n * 4), *dy = dev(NULL, n * 4), *dbias = dev(bias, cols * 4);

    choir_add(a, b, ref, n);
    die_on(choir_cuda_add(g_cu, da, db, dy, n, &err), &err, "add");
    fetch(got, dy, n * 4);
    report("add", rel_l2(got, ref, n), TOL_F32);

    memcpy(ref, a, rows * cols * 4);
    choir_add_bias_rows(ref, bias, rows, cols);
    die_on(choir_cuda_add_bias_rows(g_cu, da, dbias, rows, cols, &err), &err, "bias");
    fetch(got, da, rows * cols * 4);
    report("add_bias_rows", rel_l2(got, ref, rows * cols), TOL_F32);

    memcpy(ref, b, n * 4);
    choir_gelu_erf(ref, n);
    die_on(choir_cuda_gelu_erf(g_cu, db, n, &err), &err, "gelu");
    fetch(got, db, n * 4);
    report("gelu_erf", rel_l2(got, ref, n), TOL_F32);

    da = dev(a, n * 4);
    memcpy(ref, a, n * 4);
    choir_gelu_tanh(ref, n);
    die_on(choir_cuda_gelu_tanh(g_cu, da, n, &err), &err, "gelu tanh");
    fetch(got, da, n * 4);
    report("gelu_tanh", rel_l2(got, ref, n), TOL_F32);

    /* Transpose with an addend: exact. */
    {
        int64_t R = 70, C = 45;
        float *t = choir_alloc(CHOIR_MEM_OTHER, R * C * 4);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) t[c * R + r] = a[r * C + c] + b[c * R + r];
        float *dt = dev(NULL, R * C * 4), *da2 = dev(a, R * C * 4), *db2 = dev(b, R * C * 4);
        die_on(choir_cuda_transpose_add(g_cu, da2, R, C, db2, dt, &err), &err, "transpose");
        fetch(got, dt, R * C * 4);
        report("transpose_add 70x45", rel_l2(got, t, R * C), 0.0);
        choir_free(t);
    }

    /* bf16 conversion must round exactly as the host does. */
    uint16_t *hb = choir_alloc(CHOIR_MEM_OTHER, n * 2), *gb = choir_alloc(CHOIR_MEM_OTHER, n * 2);
    choir_f32_to_bf16_n(b, hb, n);
    db = dev(b, n * 4);
    uint16_t *dbf = (uint16_t *)dev(NULL, n * 2);
    die_on(choir_cuda_f32_to_bf16(g_cu, db, dbf, n, &err), &err, "to bf16");
    fetch((float *)gb, (float *)dbf, n * 2);
    expect("f32_to_bf16 bit-exact with choir_f32_to_bf16", memcmp(hb, gb, n * 2) == 0);
    choir_free(hb), choir_free(gb);
    choir_free(a), choir_free(b), choir_free(bias), choir_free(ref), choir_free(got);
    free_bufs();
}

static void check_norms(void) {
    choir_err err = {0};
    int64_t rows = 37, dim = 1280, n = rows * dim;
    float *x = rnd_vec(n, -3, 5), *gamma = rnd_vec(dim, 0.5f, 1.5f), *beta = rnd_vec(dim, -1, 1);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, n * 4), *got = choir_alloc(CHOIR_MEM_OTHER, n * 4);
    float *dx = dev(x, n * 4), *dy = dev(NULL, n * 4), *dg = dev(gamma, dim * 4), *dbt = dev(beta, dim * 4);
    choir_layer_norm(x, ref, rows, dim, gamma, beta, 1e-5f);
    die_on(choir_cuda_layer_norm(g_cu, dx, dy, rows, dim, dg, dbt, 1e-5f, &err), &err, "ln");
    fetch(got, dy, n * 4);
    report("layer_norm 37x1280 gamma+beta", rel_l2(got, ref, n), TOL_F32);
    choir_layer_norm(x, ref, rows, dim, NULL, NULL, 1e-5f);
    die_on(choir_cuda_layer_norm(g_cu, dx, dx, rows, dim, NULL, NULL, 1e-5f, &err), &err, "ln");
    fetch(got, dx, n * 4);
    report("layer_norm in place, no affine", rel_l2(got, ref, n), TOL_F32);

    /* Softmax rows with masked (-inf) entries, and one row fully masked. */
    int64_t srows = 19, sdim = 1500, sn = srows * sdim;
    float *s = rnd_vec(sn, -8, 8);
    for (int64_t i = 0; i < sn; i += 7) s[i] = -INFINITY;
    for (int64_t j = 0; j < sdim; j++) s[5 * sdim + j] = -INFINITY;
    float *ds = dev(s, sn * 4);
    choir_softmax(s, srows, sdim);
    die_on(choir_cuda_softmax(g_cu, ds, srows, sdim, &err), &err, "softmax");
    fetch(got, ds, sn * 4);
    report("softmax 19x1500 with -inf and a masked row", rel_l2(got, s, sn), TOL_F32);
    int zeros = 1;
    for (int64_t j = 0; j < sdim; j++) zeros &= got[5 * sdim + j] == 0.0f;
    expect("softmax fully masked row is zeros", zeros);
    choir_free(x), choir_free(gamma), choir_free(beta), choir_free(ref), choir_free(got), choir_free(s);
    free_bufs();
}

static void check_conv1d_case(const char *name, int64_t Cin, int64_t T, int64_t Cout, int64_t K,
                              int stride, int pad, int dil, int groups) {
    choir_err err = {0};
    int64_t Tout = choir_conv1d_out_len(T, K, stride, pad, dil);
    int64_t wn = Cout * (Cin / groups) * K;
    float *x = rnd_vec(Cin * T, -1, 1), *w = rnd_vec(wn, -0.3f, 0.3f), *b = rnd_vec(Cout, -1, 1);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, Cout * Tout * 4), *got = choir_alloc(CHOIR_MEM_OTHER, Cout * Tout * 4);
    float *dx = dev(x, Cin * T * 4), *dw = dev(w, wn * 4), *db = dev(b, Cout * 4), *dy = dev(NULL, Cout * Tout * 4);
    choir_conv1d(x, Cin, T, w, b, Cout, K, stride, pad, dil, groups, ref);
    die_on(choir_cuda_conv1d(g_cu, dx, Cin, T, dw, db, Cout, K, stride, pad, dil, groups, dy, &err),
           &err, "conv1d");
    fetch(got, dy, Cout * Tout * 4);
    report(name, rel_l2(got, ref, Cout * Tout), TOL_F32);
    choir_free(x), choir_free(w), choir_free(b), choir_free(ref), choir_free(got);
    free_bufs();
}

static void check_conv1d(void) {
    check_conv1d_case("conv1d whisper conv1 128->384 k3 p1", 128, 300, 384, 3, 1, 1, 1, 1);
    check_conv1d_case("conv1d whisper conv2 384->384 k3 s2 p1", 384, 300, 384, 3, 2, 1, 1, 1);
    check_conv1d_case("conv1d grouped 64->32 k5 d2 p4 g4", 64, 257, 32, 5, 1, 4, 2, 4);
    check_conv1d_case("conv1d im2col k7 d3 s3 p5", 48, 301, 40, 7, 3, 5, 3, 1);
    check_conv1d_case("conv1d direct path Cin*K<32 (3->16 k5)", 3, 100, 16, 5, 1, 2, 1, 1);
}

/* A host weight of the given kind with random contents. Quantized weights get
 * random codes (every bit pattern is a valid code) and small scales. */
typedef struct host_weight {
    choir_weight w;
    void *data, *scales, *biases;
} host_weight;

static void store_as(choir_dtype dt, void *p, int64_t i, float v) {
    if (dt == CHOIR_DTYPE_F16) ((uint16_t *)p)[i] = choir_f32_to_f16(v);
    else if (dt == CHOIR_DTYPE_BF16) ((uint16_t *)p)[i] = choir_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

static host_weight make_weight(choir_weight_kind kind, int64_t rows, int64_t cols, int bits,
                               int group, choir_dtype sb) {
    host_weight h = {0};
    h.w.kind = kind, h.w.rows = rows, h.w.cols = cols;
    int64_t n = rows * cols;
    if (kind == CHOIR_WEIGHT_QUANT) {
        int64_t words = rows * (cols / 32) * bits, ng = rows * (cols / group);
        uint32_t *q = choir_alloc(CHOIR_MEM_OTHER, words * 4);
        for (int64_t i = 0; i < words; i++) q[i] = rnd_u32() ^ (rnd_u32() << 16);
        h.scales = choir_alloc(CHOIR_MEM_OTHER, ng * 4);
        h.biases = choir_alloc(CHOIR_MEM_OTHER, ng * 4);
        float qmax = (float)((1 << bits) - 1);
        for (int64_t g = 0; g < ng; g++) {
            store_as(sb, h.scales, g, rnd(0.2f, 1.0f) / qmax);
            store_as(sb, h.biases, g, rnd(-0.6f, -0.2f));
        }
        h.data = q;
        h.w.scales = h.scales, h.w.biases = h.biases, h.w.sb_dtype = sb;
        h.w.bits = bits, h.w.group_size = group;
    } else {
        size_t es = kind == CHOIR_WEIGHT_F32 ? 4 : 2;
        h.data = choir_alloc(CHOIR_MEM_OTHER, n * es);
        choir_dtype dt = kind == CHOIR_WEIGHT_F32 ? CHOIR_DTYPE_F32
                       : kind == CHOIR_WEIGHT_F16 ? CHOIR_DTYPE_F16 : CHOIR_DTYPE_BF16;
        for (int64_t i = 0; i < n; i++) store_as(dt, h.data, i, rnd(-0.5f, 0.5f));
    }
    h.w.data = h.data;
    return h;
}

static void free_weight(host_weight *h) {
    choir_free(h->data), choir_free(h->scales), choir_free(h->biases);
}

static void check_linear_case(const char *label, choir_weight_kind kind, int bits, int group,
                              choir_dtype sb, double tol_small, double tol_large) {
    static const int64_t Ms[] = {1, 3, 8, 40};
    int64_t rows = 262, cols = 768;
    host_weight h = make_weight(kind, rows, cols, bits, group, sb);
    choir_cuda_weight dw;
    choir_err err = {0};
    die_on(choir_cuda_weight_upload(g_cu, &h.w, &dw, &err), &err, "weight upload");
    float *bias = rnd_vec(rows, -1, 1), *dbias = dev(bias, rows * 4);
    for (size_t mi = 0; mi < sizeof(Ms) / sizeof(Ms[0]); mi++) {
        int64_t M = Ms[mi];
        float *x = rnd_vec(M * cols, -1, 1);
        float *ref = choir_alloc(CHOIR_MEM_OTHER, M * rows * 4), *got = choir_alloc(CHOIR_MEM_OTHER, M * rows * 4);
        float *dx = dev(x, M * cols * 4), *dy = dev(NULL, M * rows * 4);
        choir_linear(x, M, &h.w, bias, ref);
        die_on(choir_cuda_linear(g_cu, dx, M, &dw, dbias, dy, &err), &err, "linear");
        fetch(got, dy, M * rows * 4);
        /* The GEMV keeps x in f32 (the small bound); the skinny kernel and
         * cuBLAS round x to a 16-bit weight's type (the large one). */
        choir_cuda_linear_path path = choir_cuda_linear_path_for(M, &dw);
        char name[96];
        snprintf(name, sizeof(name), "linear %s M=%lld %s", label, (long long)M,
                 path == CHOIR_CUDA_LINEAR_GEMV     ? "(gemv)"
                 : path == CHOIR_CUDA_LINEAR_SKINNY ? "(skinny)"
                                                    : "(cublas)");
        report(name, rel_l2(got, ref, M * rows), path == CHOIR_CUDA_LINEAR_GEMV ? tol_small : tol_large);
        choir_free(x), choir_free(ref), choir_free(got);
    }
    expect("weight bytes on device equal host storage",
           choir_cuda_weight_bytes(&dw) == choir_weight_bytes(&h.w));
    choir_cuda_weight_free(g_cu, &dw);
    choir_free(bias);
    free_weight(&h);
    free_bufs();
}

/* choir_cuda_linear_ex on the GEMV path (1 and 8 rows, every dense
 * storage): the epilogue's add into y and GELU give the floats of the
 * product followed by the add and GELU kernels, bit for bit; off that path
 * (40 rows) it refuses with CHOIR_EUNSUPPORTED. */
static void check_linear_ex(void) {
    static const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    static const char *names[] = {"f32", "f16", "bf16"};
    static const int64_t Ms[] = {1, 8};
    int64_t rows = 262, cols = 768;
    choir_err err = {0};
    for (int k = 0; k < 3; k++) {
        host_weight h = make_weight(kinds[k], rows, cols, 0, 0, 0);
        choir_cuda_weight dw;
        die_on(choir_cuda_weight_upload(g_cu, &h.w, &dw, &err), &err, "weight upload");
        float *bias = rnd_vec(rows, -1, 1), *dbias = dev(bias, rows * 4);
        for (int mi = 0; mi < 2; mi++) {
            int64_t M = Ms[mi], n = M * rows;
            bool fused = choir_cuda_linear_fuses(M, &dw);
            float *x = rnd_vec(M * cols, -1, 1), *y0 = rnd_vec(n, -1, 1);
            float *a = choir_alloc(CHOIR_MEM_OTHER, n * 4), *b = choir_alloc(CHOIR_MEM_OTHER, n * 4);
            float *dx = dev(x, M * cols * 4), *dy = dev(y0, n * 4), *dref = dev(y0, n * 4);
            float *dt = dev(NULL, n * 4);
            /* accumulate */
            die_on(choir_cuda_linear(g_cu, dx, M, &dw, dbias, dt, &err), &err, "linear");
            die_on(choir_cuda_add(g_cu, dref, dt, dref, n, &err), &err, "add");
            int rc = choir_cuda_linear_ex(g_cu, dx, M, &dw, dbias, dy, true, false, &err);
            fetch(a, dref, n * 4);
            fetch(b, dy, n * 4);
            char name[112];
            snprintf(name, sizeof(name), "linear_ex %s M=%lld: accumulate fused in the GEMV %s",
                     names[k], (long long)M, fused ? "== product + add, bit for bit" : "(not on this path)");
            expect(name, fused ? rc == 0 && memcmp(a, b, n * 4) == 0 : rc == CHOIR_EUNSUPPORTED);
            /* GELU */
            die_on(choir_cuda_linear(g_cu, dx, M, &dw, dbias, dref, &err), &err, "linear");
            die_on(choir_cuda_gelu_erf(g_cu, dref, n, &err), &err, "gelu");
            rc = choir_cuda_linear_ex(g_cu, dx, M, &dw, dbias, dy, false, true, &err);
            fetch(a, dref, n * 4);
            fetch(b, dy, n * 4);
            snprintf(name, sizeof(name), "linear_ex %s M=%lld: GELU fused in the GEMV %s", names[k],
                     (long long)M, fused ? "== product + GELU, bit for bit" : "(not on this path)");
            expect(name, fused ? rc == 0 && memcmp(a, b, n * 4) == 0 : rc == CHOIR_EUNSUPPORTED);
            choir_free(x), choir_free(y0), choir_free(a), choir_free(b);
        }
        expect("linear_ex refuses 40 rows (cuBLAS path) with CHOIR_EUNSUPPORTED",
               !choir_cuda_linear_fuses(40, &dw) &&
                   choir_cuda_linear_ex(g_cu, NULL, 40, &dw, NULL, NULL, true, false, &err) ==
                       CHOIR_EUNSUPPORTED);
        choir_cuda_weight_free(g_cu, &dw);
        choir_free(bias);
        free_weight(&h);
        free_bufs();
    }
}

/* choir_cuda_norm_linear: x's rows normalised inside the GEMV kernel and
 * several layers in one launch, against the calls it replaces (layer norm
 * into a buffer, the product per layer, GELU, the rows scatter into f32 and
 * bf16 caches) bit for bit, and against the CPU (f32 bound). Sets: q/k/v
 * shaped (three layers, the last narrower, biases on two, keys and values
 * stored at slots and positions); one wide layer with GELU (5003 rows: past
 * the grid's cap, so warps take several rows); two small layers over K = 100
 * without the norm's affine (the 16-bit weights' scalar path). Each in f32,
 * f16 and bf16 storage at 1 and 8 rows: where the GEMV does not take 8 rows
 * (16-bit weights) it must refuse with CHOIR_EUNSUPPORTED. */
static void check_norm_linear_set(const char *set, choir_weight_kind kind, const char *kname,
                                  int64_t M, int n, const int64_t *rows, int64_t K, bool affine,
                                  bool gelu, bool store) {
    choir_err err = {0};
    enum { SLOTS = 3, POS = 10 };
    host_weight h[3];
    choir_cuda_norm_linear_params p = {.eps = 1e-5f, .n = n, .gelu = gelu};
    float *x = rnd_vec(M * K, -3, 5), *g = rnd_vec(K, 0.5f, 1.5f), *bt = rnd_vec(K, -1, 1);
    float *dx = dev(x, M * K * 4), *dh = dev(NULL, M * K * 4);
    if (affine) p.gamma = dev(g, K * 4), p.beta = dev(bt, K * 4);
    int32_t slot[8], pos[8];
    for (int m = 0; m < 8; m++) slot[m] = (2 * m + 1) % SLOTS, pos[m] = m + 1;
    const int32_t *dslot = (const int32_t *)dev(slot, sizeof slot), *dpos = (const int32_t *)dev(pos, sizeof pos);
    float *bias[3] = {0}, *yref[3] = {0};
    void *cref[3] = {0};
    for (int i = 0; i < n; i++) {
        h[i] = make_weight(kind, rows[i], K, 0, 0, 0);
        die_on(choir_cuda_weight_upload(g_cu, &h[i].w, &p.W[i], &err), &err, "weight upload");
        if (i != 1) {
            bias[i] = rnd_vec(rows[i], -1, 1);
            p.bias[i] = dev(bias[i], rows[i] * 4);
        }
        p.y[i] = dev(NULL, M * rows[i] * 4);
        yref[i] = dev(NULL, M * rows[i] * 4);
        if (store && i > 0) {
            size_t es = i == 2 ? 2 : 4, bytes = (size_t)(SLOTS * POS * rows[i]) * es;
            p.store[i] = (choir_cuda_rows_out){.dst = dev(NULL, bytes), .bf16 = i == 2,
                                               .slot_stride = POS * rows[i], .ld = rows[i],
                                               .slot = dslot, .pos = dpos};
            cref[i] = dev(NULL, bytes);
            die_on(choir_cuda_memset0(g_cu, buf_of(p.store[i].dst), 0, bytes, &err), &err, "clear");
            die_on(choir_cuda_memset0(g_cu, buf_of(cref[i]), 0, bytes, &err), &err, "clear");
        }
    }
    bool fuses = choir_cuda_norm_linear_fuses(M, &p);
    char name[96];
    snprintf(name, sizeof name, "norm_linear %s %s M=%lld%s", set, kname, (long long)M,
             fuses ? "" : ": refused off the GEMV path");
    int rc = choir_cuda_norm_linear(g_cu, dx, M, &p, &err);
    if (!fuses) {
        expect(name, rc == CHOIR_EUNSUPPORTED);
    } else {
        die_on(rc, &err, "norm_linear");
        /* The calls it replaces. */
        die_on(choir_cuda_layer_norm(g_cu, dx, dh, M, K, p.gamma, p.beta, p.eps, &err), &err, "ln");
        bool same = true;
        double worst = 0;
        float *hn = choir_alloc(CHOIR_MEM_OTHER, M * K * 4);
        choir_layer_norm(x, hn, M, K, affine ? g : NULL, affine ? bt : NULL, p.eps);
        for (int i = 0; i < n; i++) {
            int64_t N = rows[i], ny = M * N;
            die_on(choir_cuda_linear(g_cu, dh, M, &p.W[i], p.bias[i], yref[i], &err), &err, "linear");
            if (gelu) die_on(choir_cuda_gelu_erf(g_cu, yref[i], ny, &err), &err, "gelu");
            if (cref[i] && i == 2)
                die_on(choir_cuda_rows_scatter_bf16(g_cu, yref[i], M, N, cref[i], POS * N, N, dslot,
                                                    dpos, &err), &err, "scatter");
            else if (cref[i])
                die_on(choir_cuda_rows_scatter(g_cu, yref[i], M, N, cref[i], POS * N, N, dslot, dpos,
                                               &err), &err, "scatter");
            float *a = choir_alloc(CHOIR_MEM_OTHER, ny * 4), *b = choir_alloc(CHOIR_MEM_OTHER, ny * 4);
            fetch(a, p.y[i], ny * 4);
            fetch(b, yref[i], ny * 4);
            same = same && memcmp(a, b, ny * 4) == 0;
            choir_linear(hn, M, &h[i].w, bias[i], b);
            if (gelu) choir_gelu_erf(b, ny);
            double e = rel_l2(a, b, ny);
            if (e > worst) worst = e;
            if (cref[i]) {
                size_t bytes = (size_t)(SLOTS * POS * N) * (i == 2 ? 2 : 4);
                char *ca = choir_alloc(CHOIR_MEM_OTHER, bytes), *cb = choir_alloc(CHOIR_MEM_OTHER, bytes);
                fetch((float *)ca, p.store[i].dst, bytes);
                fetch((float *)cb, cref[i], bytes);
                same = same && memcmp(ca, cb, bytes) == 0;
                choir_free(ca), choir_free(cb);
            }
            choir_free(a), choir_free(b);
        }
        char nm[256];
        snprintf(nm, sizeof nm, "%s == layer norm + linear%s%s, bit for bit", name,
                 gelu ? " + GELU" : "", store ? " + scatters" : "");
        expect(nm, same);
        snprintf(nm, sizeof nm, "%s against the CPU", name);
        report(nm, worst, TOL_F32);
        choir_free(hn);
    }
    for (int i = 0; i < n; i++) {
        choir_cuda_weight_free(g_cu, &p.W[i]);
        free_weight(&h[i]);
        choir_free(bias[i]);
    }
    choir_free(x), choir_free(g), choir_free(bt);
    free_bufs();
}

static void check_norm_linear(void) {
    static const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    static const char *names[] = {"f32", "f16", "bf16"};
    static const int64_t qkv[] = {262, 262, 130}, wide[] = {5003}, small[] = {37, 19};
    for (int k = 0; k < 3; k++)
        for (int64_t M = 1; M <= 8; M += 7) {
            check_norm_linear_set("q/k/v 3x768", kinds[k], names[k], M, 3, qkv, 768, true, false, true);
            check_norm_linear_set("5003x264 GELU", kinds[k], names[k], M, 1, wide, 264, true, true, false);
            check_norm_linear_set("37+19 x100 plain", kinds[k], names[k], M, 2, small, 100, false, false, false);
        }
    /* Turned off (benches), nothing fuses; on again, it does. */
    choir_cuda_norm_linear_params p = {.n = 1};
    p.W[0] = (choir_cuda_weight){.kind = CHOIR_WEIGHT_BF16, .rows = 64, .cols = 64};
    choir_cuda_norm_linear_set(false);
    bool off = choir_cuda_norm_linear_fuses(1, &p);
    choir_cuda_norm_linear_set(true);
    expect("norm_linear turned off fuses nothing, on again fuses",
           !off && choir_cuda_norm_linear_fuses(1, &p));
}

static void check_linear(void) {
    check_linear_ex();
    check_norm_linear();
    check_linear_case("f32", CHOIR_WEIGHT_F32, 0, 0, 0, TOL_F32, TOL_F32);
    check_linear_case("f16", CHOIR_WEIGHT_F16, 0, 0, 0, TOL_F32, TOL_F16);
    check_linear_case("bf16", CHOIR_WEIGHT_BF16, 0, 0, 0, TOL_F32, TOL_BF16);
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
        char label[48];
        snprintf(label, sizeof(label), "q%d g64 bf16-scales", bits[i]);
        check_linear_case(label, CHOIR_WEIGHT_QUANT, bits[i], 64, CHOIR_DTYPE_BF16, TOL_F32, TOL_BF16);
    }
    check_linear_case("q4 g32 f16-scales", CHOIR_WEIGHT_QUANT, 4, 32, CHOIR_DTYPE_F16, TOL_F32, TOL_BF16);
    check_linear_case("q8 g128 f32-scales", CHOIR_WEIGHT_QUANT, 8, 128, CHOIR_DTYPE_F32, TOL_F32, TOL_BF16);

    /* f32 converted to bf16 on upload: compare with the CPU on the rounded weight. */
    choir_err err = {0};
    int64_t rows = 130, cols = 256, M = 2;
    host_weight h = make_weight(CHOIR_WEIGHT_F32, rows, cols, 0, 0, 0);
    choir_cuda_weight dw;
    die_on(choir_cuda_weight_upload_as(g_cu, &h.w, CHOIR_WEIGHT_BF16, &dw, &err), &err, "upload_as");
    uint16_t *hb = choir_alloc(CHOIR_MEM_OTHER, rows * cols * 2);
    choir_f32_to_bf16_n(h.data, hb, rows * cols);
    choir_weight wb = {.kind = CHOIR_WEIGHT_BF16, .rows = rows, .cols = cols, .data = hb};
    float *x = rnd_vec(M * cols, -1, 1), *ref = choir_alloc(CHOIR_MEM_OTHER, M * rows * 4);
    float *got = choir_alloc(CHOIR_MEM_OTHER, M * rows * 4);
    float *dx = dev(x, M * cols * 4), *dy = dev(NULL, M * rows * 4);
    choir_linear(x, M, &wb, NULL, ref);
    die_on(choir_cuda_linear(g_cu, dx, M, &dw, NULL, dy, &err), &err, "linear");
    fetch(got, dy, M * rows * 4);
    /* Two rows of a bf16 weight take the skinny kernel (x rounded to bf16). */
    report("linear f32 uploaded as bf16, M=2", rel_l2(got, ref, M * rows),
           choir_cuda_linear_path_for(M, &dw) == CHOIR_CUDA_LINEAR_GEMV ? TOL_F32 : TOL_BF16);
    expect("bf16 upload halves device bytes", choir_cuda_weight_bytes(&dw) == (size_t)(rows * cols * 2));
    choir_cuda_weight_free(g_cu, &dw);
    choir_free(hb), choir_free(x), choir_free(ref), choir_free(got);
    free_weight(&h);
    free_bufs();
}

static void check_gemm(void) {
    choir_err err = {0};
    int64_t M = 67, N = 45, K = 131;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = ta ? M : K, ldb = tb ? K : N;
            float *A = rnd_vec(M * K, -1, 1), *B = rnd_vec(K * N, -1, 1), *C = rnd_vec(M * N, -1, 1);
            float *got = choir_alloc(CHOIR_MEM_OTHER, M * N * 4);
            float *dA = dev(A, M * K * 4), *dB = dev(B, K * N * 4), *dC = dev(C, M * N * 4);
            choir_gemm_f32(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C, N);
            die_on(choir_cuda_gemm_f32(g_cu, ta, tb, M, N, K, 0.7f, dA, lda, dB, ldb, 0.3f, dC, N, &err),
                   &err, "gemm");
            fetch(got, dC, M * N * 4);
            char name[64];
            snprintf(name, sizeof(name), "gemm_f32 trans_a=%d trans_b=%d", ta, tb);
            report(name, rel_l2(got, C, M * N), TOL_F32);
            choir_free(A), choir_free(B), choir_free(C), choir_free(got);
            free_bufs();
        }
    /* bf16 inputs, f32 accumulation: exact inputs, so f32-level agreement. */
    M = 129, N = 77, K = 320;
    float *A = rnd_vec(M * K, -1, 1), *B = rnd_vec(N * K, -1, 1), *ref = choir_alloc(CHOIR_MEM_OTHER, M * N * 4);
    float *got = choir_alloc(CHOIR_MEM_OTHER, M * N * 4);
    uint16_t *Ab = choir_alloc(CHOIR_MEM_OTHER, M * K * 2), *Bb = choir_alloc(CHOIR_MEM_OTHER, N * K * 2);
    choir_f32_to_bf16_n(A, Ab, M * K), choir_f32_to_bf16_n(B, Bb, N * K);
    choir_bf16_to_f32_n(Ab, A, M * K), choir_bf16_to_f32_n(Bb, B, N * K);
    choir_gemm_f32(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, ref, N);
    float *dA = dev(Ab, M * K * 2), *dB = dev(Bb, N * K * 2), *dC = dev(NULL, M * N * 4);
    die_on(choir_cuda_gemm_bf16_nt(g_cu, M, N, K, (uint16_t *)dA, (uint16_t *)dB, dC, &err), &err, "bf16 gemm");
    fetch(got, dC, M * N * 4);
    report("gemm_bf16_nt (bf16 in, f32 accumulate)", rel_l2(got, ref, M * N), TOL_F32);
    choir_free(A), choir_free(B), choir_free(ref), choir_free(got), choir_free(Ab), choir_free(Bb);
    free_bufs();
}

/* Bound of the attention cases: f32, or TF32's while that is on. */
static double g_attn_tol = TOL_F32;

static void check_attention_case(const char *name, int64_t Tq, int64_t Tk, int heads, int64_t Dh,
                                 int with_mask, int causal, int fused) {
    choir_err err = {0};
    int64_t d = heads * Dh;
    /* fused: q, k, v interleaved in one [T, 3d] projection, as a QKV matmul writes them. */
    int64_t ld = fused ? 3 * d : d;
    int64_t T = Tq > Tk ? Tq : Tk;
    float *qkv = rnd_vec(T * ld * (fused ? 1 : 3), -1, 1);
    const float *q = qkv, *k = fused ? qkv + d : qkv + T * ld, *v = fused ? qkv + 2 * d : qkv + 2 * T * ld;
    float *mask = NULL, *dmask = NULL;
    if (with_mask) {
        mask = rnd_vec(Tq * Tk, -2, 2);
        for (int64_t i = 0; i < Tq * Tk; i += 5) mask[i] = -INFINITY;
        for (int64_t j = 0; j < Tk; j++) mask[(Tq / 2) * Tk + j] = -INFINITY;
        dmask = dev(mask, Tq * Tk * 4);
    }
    float *ref = choir_alloc(CHOIR_MEM_OTHER, Tq * d * 4), *got = choir_alloc(CHOIR_MEM_OTHER, Tq * d * 4);
    size_t qkv_bytes = (size_t)T * ld * (fused ? 1 : 3) * 4;
    float *dqkv = dev(qkv, qkv_bytes), *dout = dev(NULL, Tq * d * 4);
    const float *dq = dqkv + (q - qkv), *dk = dqkv + (k - qkv), *dv = dqkv + (v - qkv);
    float scale = 1.0f / sqrtf((float)Dh);
    choir_attention(q, ld, k, ld, v, ld, ref, d, Tq, Tk, heads, Dh, scale, mask, causal);
    die_on(choir_cuda_attention(g_cu, dq, ld, dk, ld, dv, ld, dout, d, Tq, Tk, heads, Dh, scale,
                                dmask, causal, &err), &err, "attention");
    fetch(got, dout, Tq * d * 4);
    report(name, rel_l2(got, ref, Tq * d), g_attn_tol);
    choir_free(qkv), choir_free(mask), choir_free(ref), choir_free(got);
    free_bufs();
}

/* Batched decoder step: B caches of different fill, one query each (and a
 * 3-token prompt case), against the CPU on each sequence's own prefix. */
static void check_attention_batched(int64_t Tq) {
    choir_err err = {0};
    enum { B = 4 };
    int heads = 6, Dh = 64, d = heads * Dh;
    int64_t Tk = 448;
    int32_t kv_len[B] = {3, 17, 200, 448};
    int64_t qb = Tq * d, kvb = Tk * d;
    float *q = rnd_vec(B * qb, -1, 1), *k = rnd_vec(B * kvb, -1, 1), *v = rnd_vec(B * kvb, -1, 1);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, B * qb * 4), *got = choir_alloc(CHOIR_MEM_OTHER, B * qb * 4);
    float *dq = dev(q, B * qb * 4), *dk = dev(k, B * kvb * 4), *dv = dev(v, B * kvb * 4);
    float *dout = dev(NULL, B * qb * 4), *dlen = dev(kv_len, sizeof(kv_len));
    float scale = 0.125f;
    for (int b = 0; b < B; b++)
        choir_attention(q + b * qb, d, k + b * kvb, d, v + b * kvb, d, ref + b * qb, d, Tq, kv_len[b],
                        heads, Dh, scale, NULL, true);
    die_on(choir_cuda_attention_batched(g_cu, B, dq, d, qb, dk, d, dv, d, kvb, (const int32_t *)dlen,
                                        dout, d, qb, Tq, Tk, heads, Dh, scale, true, &err),
           &err, "batched attention");
    fetch(got, dout, B * qb * 4);
    char name[80];
    snprintf(name, sizeof(name), "attention batched B=4 Tq=%lld causal kv_len 3..448", (long long)Tq);
    report(name, rel_l2(got, ref, B * qb), TOL_F32);
    choir_free(q), choir_free(k), choir_free(v), choir_free(ref), choir_free(got);
    free_bufs();
}

/* A pool of 5 caches of 448 positions; 4 sequences name slots 3, 0, 3, 1
 * (a repeat, out of order) with their own key counts; one query each. Also
 * the row scatter that appends each sequence's new row at its position, and
 * a device copy. */
static void check_attention_slots(void) {
    choir_err err = {0};
    enum { B = 4, SLOTS = 5 };
    int heads = 4, Dh = 64, d = heads * Dh;
    int64_t Tk = 448, sb = Tk * d;
    int32_t slot[B] = {3, 0, 3, 1}, kv_len[B] = {7, 448, 200, 1}, pos[B] = {6, 447, 199, 0};
    float *q = rnd_vec(B * d, -1, 1), *k = rnd_vec(SLOTS * sb, -1, 1), *v = rnd_vec(SLOTS * sb, -1, 1);
    float *krow = rnd_vec(B * d, -1, 1);
    /* The scatter writes sequence b's row at (slot[b], pos[b]); slot 3 is named twice, at
     * positions 6 and 199, so both rows land. The reference does the same on the host. */
    for (int b = 0; b < B; b++) memcpy(k + slot[b] * sb + pos[b] * d, krow + b * d, d * 4);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, B * d * 4), *got = choir_alloc(CHOIR_MEM_OTHER, B * d * 4);
    float *kgot = choir_alloc(CHOIR_MEM_OTHER, SLOTS * sb * 4);
    float *dq = dev(q, B * d * 4), *dk0 = dev(NULL, SLOTS * sb * 4), *dk = dev(NULL, SLOTS * sb * 4);
    float *dv = dev(v, SLOTS * sb * 4), *dout = dev(NULL, B * d * 4), *drow = dev(krow, B * d * 4);
    float *dslot = dev(slot, sizeof(slot)), *dlen = dev(kv_len, sizeof(kv_len)), *dpos = dev(pos, sizeof(pos));
    /* The pool before the new rows, copied device to device. */
    float *k_before = choir_alloc(CHOIR_MEM_OTHER, SLOTS * sb * 4);
    memcpy(k_before, k, SLOTS * sb * 4);
    for (int b = 0; b < B; b++) memset(k_before + slot[b] * sb + pos[b] * d, 0, d * 4);
    die_on(choir_cuda_upload(g_cu, buf_of(dk0), 0, k_before, SLOTS * sb * 4, &err), &err, "upload");
    die_on(choir_cuda_copy(g_cu, dk, dk0, SLOTS * sb * 4, &err), &err, "copy");
    die_on(choir_cuda_rows_scatter(g_cu, drow, B, d, dk, sb, d, (const int32_t *)dslot,
                                   (const int32_t *)dpos, &err), &err, "scatter");
    fetch(kgot, dk, SLOTS * sb * 4);
    expect("rows_scatter + device copy give the host's cache pool bit for bit",
           memcmp(kgot, k, SLOTS * sb * 4) == 0);
    float scale = 0.125f;
    for (int b = 0; b < B; b++)
        choir_attention(q + b * d, d, k + slot[b] * sb, d, v + slot[b] * sb, d, ref + b * d, d, 1,
                        kv_len[b], heads, Dh, scale, NULL, false);
    die_on(choir_cuda_attention_slots(g_cu, B, dq, d, d, dk, d, dv, d, sb, (const int32_t *)dslot,
                                      (const int32_t *)dlen, dout, d, d, 1, Tk, heads, Dh, scale,
                                      false, &err), &err, "slot attention");
    fetch(got, dout, B * d * 4);
    report("attention over pool slots 3,0,3,1 with kv_len 7,448,200,1", rel_l2(got, ref, B * d), TOL_F32);
    choir_free(q), choir_free(k), choir_free(v), choir_free(krow), choir_free(ref), choir_free(got);
    choir_free(kgot), choir_free(k_before);
    free_bufs();
}

/* The decoder's cross-attention shape on bf16 caches (a bf16 model's, on
 * the device): 3 rows over pool slots 2, 0, 2 of 1500 positions, 20 heads of
 * 64, all keys (kv_len NULL) and then the key counts 1500, 129, 1; the
 * reference attends over the same bf16 values widened. Also the heads of 128
 * values. These take the split-keys kernels. */
static void check_attention_slots_kv16(int heads, int64_t Dh) {
    choir_err err = {0};
    enum { B = 3, SLOTS = 3 };
    int64_t d = heads * Dh, Tk = 1500, sb = Tk * d;
    int32_t slot[B] = {2, 0, 2}, kv_len[B] = {1500, 129, 1};
    float *q = rnd_vec(B * d, -1, 1), *k = rnd_vec(SLOTS * sb, -1, 1), *v = rnd_vec(SLOTS * sb, -1, 1);
    uint16_t *k16 = choir_alloc(CHOIR_MEM_OTHER, SLOTS * sb * 2), *v16 = choir_alloc(CHOIR_MEM_OTHER, SLOTS * sb * 2);
    choir_f32_to_bf16_n(k, k16, SLOTS * sb);
    choir_f32_to_bf16_n(v, v16, SLOTS * sb);
    choir_bf16_to_f32_n(k16, k, SLOTS * sb);
    choir_bf16_to_f32_n(v16, v, SLOTS * sb);
    float *ref = choir_alloc(CHOIR_MEM_OTHER, B * d * 4), *got = choir_alloc(CHOIR_MEM_OTHER, B * d * 4);
    float *dq = dev(q, B * d * 4), *dk = dev(k16, SLOTS * sb * 2), *dv = dev(v16, SLOTS * sb * 2);
    float *dout = dev(NULL, B * d * 4), *dslot = dev(slot, sizeof(slot)), *dlen = dev(kv_len, sizeof(kv_len));
    float scale = 1.0f / sqrtf((float)Dh);
    for (int with_len = 0; with_len < 2; with_len++) {
        for (int b = 0; b < B; b++)
            choir_attention(q + b * d, d, k + slot[b] * sb, d, v + slot[b] * sb, d, ref + b * d, d, 1,
                            with_len ? kv_len[b] : Tk, heads, Dh, scale, NULL, false);
        die_on(choir_cuda_attention_slots_kv16(g_cu, B, dq, d, d, (const uint16_t *)dk, d,
                                               (const uint16_t *)dv, d, sb, (const int32_t *)dslot,
                                               with_len ? (const int32_t *)dlen : NULL, dout, d, d, 1,
                                               Tk, heads, Dh, scale, false, &err),
               &err, "bf16 slot attention");
        fetch(got, dout, B * d * 4);
        char name[120];
        snprintf(name, sizeof(name), "attention bf16 cache slots 2,0,2 Tk=1500 h%d Dh%lld%s", heads,
                 (long long)Dh, with_len ? " kv_len 1500,129,1" : "");
        report(name, rel_l2(got, ref, B * d), TOL_F32);
    }
    choir_free(q), choir_free(k), choir_free(v), choir_free(k16), choir_free(v16);
    choir_free(ref), choir_free(got);
    free_bufs();
}

/* The ceilings are positive and below what an H200 could possibly do; a
 * timer over a memset measures something. */
static void check_ceilings(void) {
    choir_err err = {0};
    double tf = 0, gbs = 0;
    int64_t before = choir_cuda_mem_current(g_cu);
    int rc = choir_cuda_measure_ceilings(g_cu, &tf, &gbs, &err);
    printf("ceilings: bf16 matmul %.1f TFLOP/s, device copy %.0f GB/s%s%s\n", tf, gbs,
           rc ? ": " : "", rc ? err.msg : "");
    expect("measured ceilings are plausible (0 < TFLOP/s < 5000, 0 < GB/s < 20000)",
           rc == 0 && tf > 0 && tf < 5000 && gbs > 0 && gbs < 20000);
    expect("ceiling buffers are freed", choir_cuda_mem_current(g_cu) == before);
    float *buf = dev(NULL, 64 << 20);
    choir_cuda_timer *t = choir_cuda_timer_begin(g_cu, &err);
    die_on(choir_cuda_memset0(g_cu, buf_of(buf), 0, 64 << 20, &err), &err, "memset");
    double ms = t ? choir_cuda_timer_end_ms(t, &err) : -1;
    expect("event timer measures a 64 MiB memset (0 < ms < 1000)", ms > 0 && ms < 1000);
    expect("make_current on the context's device", choir_cuda_make_current(g_cu, &err) == 0);
    free_bufs();
}

static void check_attention(void) {
    check_attention_case("attention decoder step Tq=1 Tk=33 h4 Dh64", 1, 33, 4, 64, 0, 1, 0);
    check_attention_case("attention masked Tq=7 Tk=33 h4 Dh64", 7, 33, 4, 64, 1, 0, 0);
    check_attention_case("attention causal fused-qkv Tq=Tk=150 h6 Dh64", 150, 150, 6, 64, 0, 1, 1);
    check_attention_case("attention encoder Tq=Tk=1500 h2 Dh64", 1500, 1500, 2, 64, 0, 0, 0);
    check_attention_case("attention Dh=80 mask+causal Tq=5 Tk=40", 5, 40, 3, 80, 1, 1, 0);
    /* Long queries take the cuBLAS path: masked, causal with Tq < Tk, fused strides. */
    check_attention_case("attention gemm path mask Tq=100 Tk=130 h5 Dh64", 100, 130, 5, 64, 1, 0, 0);
    check_attention_case("attention gemm path causal+mask fused Tq=64 Tk=96", 64, 96, 3, 64, 1, 1, 1);
    check_attention_case("attention Dh=320 Tq=3 Tk=20", 3, 20, 1, 320, 0, 0, 0);
    check_attention_batched(1);
    check_attention_batched(3);
    check_attention_slots();
    /* Few rows over many keys take the split-keys kernels (64- and 128-value
     * heads); the same shapes with them off take one block per row. */
    check_attention_case("attention cross step Tq=1 Tk=1500 h20 Dh64 (split keys)", 1, 1500, 20, 64, 0, 0, 0);
    check_attention_case("attention Tq=4 Tk=700 h3 Dh128 causal (split keys)", 4, 700, 3, 128, 0, 1, 0);
    check_attention_case("attention fused-qkv Tq=2 Tk=300 h4 Dh64 causal (split keys)", 2, 300, 4, 64, 0, 1, 1);
    /* Short caches (from 64 keys) take the split when its chunks combine
     * themselves (up to 4 query rows): one chunk, and two. */
    check_attention_case("attention step Tq=1 Tk=100 h20 Dh64 causal (split, 1 chunk)", 1, 100, 20, 64, 0, 1, 0);
    check_attention_case("attention Tq=3 Tk=229 h20 Dh64 causal (split, 2 chunks)", 3, 229, 20, 64, 0, 1, 0);
    check_attention_slots_kv16(20, 64);
    check_attention_slots_kv16(4, 128);
    choir_cuda_attention_set_split(false);
    check_attention_case("attention cross step Tq=1 Tk=1500 h20 Dh64 (split off)", 1, 1500, 20, 64, 0, 0, 0);
    check_attention_slots_kv16(20, 64);
    choir_cuda_attention_set_split(true);
    /* TF32 products (the bf16 models' setting): the cuBLAS path within 1e-2, then f32 again. */
    choir_err err = {0};
    expect("TF32 math mode on", choir_cuda_set_tf32(g_cu, true, &err) == 0);
    g_attn_tol = TOL_BF16;
    check_attention_case("attention gemm path in TF32 Tq=Tk=1500 h2 Dh64", 1500, 1500, 2, 64, 0, 0, 0);
    g_attn_tol = TOL_F32;
    expect("TF32 math mode off", choir_cuda_set_tf32(g_cu, false, &err) == 0);
}

/* A decoder-like step (GEMV on a quantized weight, then batched attention
 * over caches of growing fill) captured once into a CUDA graph and replayed
 * after kv_len changes on the device must equal the same calls run directly. */
static void check_graph(void) {
    choir_err err = {0};
    enum { B = 3 };
    int heads = 4, Dh = 64, d = heads * Dh;
    int64_t Tk = 64;
    host_weight h = make_weight(CHOIR_WEIGHT_QUANT, d, d, 4, 64, CHOIR_DTYPE_BF16);
    choir_cuda_weight dw;
    die_on(choir_cuda_weight_upload(g_cu, &h.w, &dw, &err), &err, "upload");
    float *x = rnd_vec(B * d, -1, 1), *k = rnd_vec(B * Tk * d, -1, 1), *v = rnd_vec(B * Tk * d, -1, 1);
    float *dx = dev(x, B * d * 4), *dq = dev(NULL, B * d * 4), *dk = dev(k, B * Tk * d * 4);
    float *dv = dev(v, B * Tk * d * 4), *dout = dev(NULL, B * d * 4);
    int32_t lens[2][B] = {{5, 9, 30}, {6, 10, 64}};
    float *dlen = dev(lens[0], sizeof(lens[0]));
    float *want = choir_alloc(CHOIR_MEM_OTHER, B * d * 4), *got = choir_alloc(CHOIR_MEM_OTHER, B * d * 4);
#define STEP()                                                                                    \
    (choir_cuda_linear(g_cu, dx, B, &dw, NULL, dq, &err) ||                                       \
     choir_cuda_attention_batched(g_cu, B, dq, d, d, dk, d, dv, d, Tk * d, (const int32_t *)dlen, \
                                  dout, d, d, 1, Tk, heads, Dh, 0.125f, true, &err))
    die_on(STEP(), &err, "direct step"); /* also sizes anything lazily set up */
    die_on(choir_cuda_graph_begin(g_cu, &err), &err, "begin");
    int rc = STEP();
    choir_cuda_graph *g = choir_cuda_graph_end(g_cu, rc ? NULL : &err);
    expect("decoder step captures into a CUDA graph", rc == 0 && g != NULL);
    if (g) {
        for (int round = 0; round < 2; round++) {
            die_on(choir_cuda_upload(g_cu, buf_of(dlen), 0, lens[round], sizeof(lens[round]), &err), &err, "len");
            die_on(STEP(), &err, "direct step");
            fetch(want, dout, B * d * 4);
            /* Cleared so that the replay has to write every output. */
            die_on(choir_cuda_memset0(g_cu, buf_of(dout), 0, B * d * 4, &err), &err, "clear");
            die_on(choir_cuda_graph_launch(g_cu, g, &err), &err, "launch");
            fetch(got, dout, B * d * 4);
            char name[64];
            snprintf(name, sizeof(name), "graph replay equals direct step (round %d)", round);
            report(name, rel_l2(got, want, B * d), 0.0);
        }
    }
#undef STEP
    if (g) {
        /* The graph holds the scratch's address: growing it now must be refused. */
        int64_t held = choir_cuda_mem_current(g_cu);
        rc = choir_cuda_scratch_reserve(g_cu, (size_t)1 << 34, &err);
        expect("scratch cannot grow while a graph is alive (CHOIR_EBUSY)",
               rc == CHOIR_EBUSY && choir_cuda_mem_current(g_cu) == held);
    }
    choir_cuda_graph_free(g);
    rc = choir_cuda_scratch_reserve(g_cu, (size_t)64 << 20, &err);
    expect("scratch grows again once the graph is freed", rc == 0);
    choir_cuda_weight_free(g_cu, &dw);
    free_weight(&h);
    choir_free(x), choir_free(k), choir_free(v), choir_free(want), choir_free(got);
    free_bufs();
}

static void check_memory(void) {
    choir_err err = {0};
    int64_t base = choir_cuda_mem_current(g_cu);
    choir_cuda_buf a = {0}, b = {0};
    die_on(choir_cuda_buf_alloc(g_cu, 1 << 20, &a, &err), &err, "alloc");
    expect("device current counts a 1 MiB buffer", choir_cuda_mem_current(g_cu) == base + (1 << 20));
    expect("device peak at least current", choir_cuda_mem_peak(g_cu) >= base + (1 << 20));
    expect("host counters untouched by device buffers", choir_mem_current(CHOIR_MEM_WEIGHTS) == 0);
    choir_cuda_set_budget(g_cu, base + (3 << 19));
    int rc = choir_cuda_buf_alloc(g_cu, 1 << 20, &b, &err);
    expect("allocation past the device budget is CHOIR_EBUSY", rc == CHOIR_EBUSY && b.ptr == NULL);
    expect("refused allocation leaves the counter unchanged", choir_cuda_mem_current(g_cu) == base + (1 << 20));
    choir_cuda_set_budget(g_cu, 0);
    char host[16] = {0};
    rc = choir_cuda_upload(g_cu, &a, (1 << 20) - 8, host, 16, &err);
    expect("upload past the end of a buffer is CHOIR_EINVAL", rc == CHOIR_EINVAL);
    choir_cuda_buf_free(g_cu, &a);
    choir_cuda_buf_free(g_cu, &a); /* second free of the zeroed struct: no-op */
    expect("freeing returns the counter to its base", choir_cuda_mem_current(g_cu) == base);
    host_weight h = make_weight(CHOIR_WEIGHT_QUANT, 64, 96, 4, 64, CHOIR_DTYPE_BF16);
    choir_cuda_weight dw;
    rc = choir_cuda_weight_upload(g_cu, &h.w, &dw, &err);
    expect("quantized weight with cols not a multiple of the group is refused", rc == CHOIR_EUNSUPPORTED);
    free_weight(&h);
    choir_cuda *none = choir_cuda_init(999, &err);
    expect("init of a missing device is NULL with CHOIR_ENOTFOUND", none == NULL && err.code == CHOIR_ENOTFOUND);
}

int main(void) {
    if (choir_cuda_device_count() == 0) {
        printf("SKIP no CUDA device visible\n");
        return 77;
    }
    choir_err err = {0};
    g_cu = choir_cuda_init(0, &err);
    if (!g_cu) {
        fprintf(stderr, "FATAL %s\n", err.msg);
        return 1;
    }
    const choir_cuda_props *p = choir_cuda_get_props(g_cu);
    printf("device %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB, smem/block %lld KiB\n", p->name,
           p->cc_major, p->cc_minor, p->sm_count, p->total_bytes / 1073741824.0,
           p->l2_bytes / 1048576.0, (long long)p->smem_per_block_optin / 1024);
    check_memory();
    check_elementwise();
    check_norms();
    check_conv1d();
    check_gemm();
    check_linear();
    check_attention();
    check_graph();
    check_ceilings();
    int64_t leak = choir_cuda_mem_current(g_cu) - (int64_t)0;
    printf("device bytes held at the end (context scratch): %lld, peak %lld\n", (long long)leak,
           (long long)choir_cuda_mem_peak(g_cu));
    choir_cuda_free(g_cu);
    printf("%d of %d cases passed\n", g_cases - g_failures, g_cases);
    return g_failures ? 1 : 0;
}
