/* Every backend operation (choir/backend.h) on a CUDA backend against the
 * same operation on the CPU backend, on random inputs: one line per case
 * with its relative L2 error and bound. Exits 0 when all pass, 1 on any
 * failure, 77 (skipped) when no CUDA device is visible.
 *
 * Bounds: f32 paths agree to rounding (1e-5; 1e-4 for the LSTM, whose
 * recurrence compounds it; the vocoder convolutions' three-TF32-product
 * path too); f16 tensor-core products 2e-3, TF32 ones 2e-3, bf16 ones 1e-2
 * (their inputs are rounded to the narrower type); copies, gathers, scatters and
 * transposes are exact. Also: graph capture and replay equal to the direct
 * calls bit for bit after the device-side lengths change, sticky errors,
 * refused operations named, working memory refused with a named error, and
 * device memory back to where it started once everything is freed.
 *
 * Built beside choir_cuda_check (src/tensor/cuda/CMakeLists.txt); under the
 * host emulation (tests/cuda/fake) the operations it does not emulate report
 * SKIP. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/backend.h"
#include "choir/backend_vocoder.h"
#include "choir/cuda.h"
#include "choir/cuda_q8.h"
#include "choir/cuda_audio.h"
#include "choir/kernels.h"
#include "choir/tensor.h"

#define TOL_F32 1e-5
#define TOL_F16 2e-3
#define TOL_BF16 1e-2
/* TF32 operands (10-bit mantissas, rounded to nearest), f32 accumulation */
#define TOL_TF32 2e-3

static int g_failures, g_cases, g_skips;
static choir_backend *g_cpu, *g_gpu;
static choir_stream *g_cs, *g_gs;

/* --- random inputs ------------------------------------------------------------ */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd(float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f;
}

/* Host memory of a case, freed together by case_end. */
#define MAX_HOST 128 /* the 8-bit GEMV's norm-fused case: 8 shapes x 5 comparisons */
static void *g_host[MAX_HOST];
static int g_nhost;
static void *hmem(size_t bytes) {
    if (g_nhost == MAX_HOST) {
        fprintf(stderr, "FATAL too many host blocks in one case\n");
        exit(1);
    }
    void *p = calloc(1, bytes ? bytes : 4);
    if (!p) {
        fprintf(stderr, "FATAL out of host memory\n");
        exit(1);
    }
    return g_host[g_nhost++] = p;
}
static float *hvec(int64_t n, float lo, float hi) {
    float *v = hmem((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = rnd(lo, hi);
    return v;
}
static float *hdup(const float *x, int64_t n) {
    float *y = hmem((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* Device memory of a case: the GPU stream's working memory, released by
 * case_end. */
static size_t g_mark;
static void case_begin(void) { g_mark = choir_stream_mark(g_gs); }
static void case_end(void) {
    choir_stream_release(g_gs, g_mark);
    for (int i = 0; i < g_nhost; i++) free(g_host[i]);
    g_nhost = 0;
}
static void *dput(const void *host, size_t bytes) {
    void *d = choir_stream_alloc(g_gs, bytes, "check input");
    if (d && host) choir_op_upload(g_gs, d, host, bytes);
    return d;
}
static float *dvec(const float *host, int64_t n) {
    return dput(host, (size_t)n * sizeof(float));
}
static float *dzero(int64_t n) {
    float *d = dput(NULL, (size_t)n * sizeof(float));
    if (d) choir_op_zero(g_gs, d, (size_t)n * sizeof(float));
    return d;
}

/* --- reporting -------------------------------------------------------------------- */

static double rel_l2(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(ref[i]) || isinf(a[i]) != isinf(ref[i])) return INFINITY;
        if (isnan(a[i])) continue;
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The GPU stream's error, if any, fails (or, under the host emulation,
 * skips) the case; returns true when the case can be compared. */
static bool streams_ok(const char *name) {
    choir_err e = {0};
    if (choir_stream_status(g_cs, &e)) {
        g_cases++, g_failures++;
        printf("FAIL %-52s cpu: %s\n", name, e.msg);
        choir_stream_clear(g_cs);
        choir_stream_clear(g_gs);
        return false;
    }
    if (choir_stream_sync(g_gs, &e)) {
        choir_stream_clear(g_gs);
        if (strstr(e.msg, "fake cuda") && strstr(e.msg, "not emulated")) {
            g_skips++;
            printf("SKIP %-52s %s\n", name, e.msg);
            return false;
        }
        g_cases++, g_failures++;
        printf("FAIL %-52s %s\n", name, e.msg);
        return false;
    }
    return true;
}

static void report(const char *name, double err, double tol) {
    bool ok = err <= tol;
    g_cases++;
    if (!ok) g_failures++;
    printf("%s %-52s rel_l2 %.3e  (bound %.0e)\n", ok ? "PASS" : "FAIL", name, err, tol);
}

static void expect(const char *name, bool cond) {
    g_cases++;
    if (!cond) g_failures++;
    printf("%s %s\n", cond ? "PASS" : "FAIL", name);
}

/* Downloads n floats of `dev` and compares them with the CPU's `ref`. */
static void cmp(const char *name, const float *dev, const float *ref, int64_t n, double tol) {
    float *got = hmem((size_t)n * sizeof(float));
    choir_op_download(g_gs, got, dev, (size_t)n * sizeof(float));
    if (!streams_ok(name)) return;
    report(name, rel_l2(got, ref, n), tol);
}

/* --- transfers and copies ------------------------------------------------------------ */

static void check_transfers(void) {
    case_begin();
    int64_t rows = 37, cols = 129, ld = 160, n = rows * ld;
    float *x = hvec(n, -3, 3);
    float *dx = dvec(x, n), *dy = dzero(n);
    choir_op_copy(g_gs, dy, dx, (size_t)n * 4);
    cmp("copy", dy, x, n, 0);
    /* Strided rows into a packed block, and back into a zeroed strided one. */
    float *ref = hmem((size_t)(rows * cols) * 4);
    for (int64_t r = 0; r < rows; r++) memcpy(ref + r * cols, x + r * ld, (size_t)cols * 4);
    float *dp = dzero(rows * cols);
    choir_op_copy_rows(g_gs, dp, cols, dx, ld, rows, cols);
    cmp("copy_rows strided -> packed", dp, ref, rows * cols, 0);
    float *ref2 = hmem((size_t)n * 4);
    for (int64_t r = 0; r < rows; r++) memcpy(ref2 + r * ld, ref + r * cols, (size_t)cols * 4);
    float *ds = dzero(n);
    choir_op_copy_rows(g_gs, ds, ld, dp, cols, rows, cols);
    cmp("copy_rows packed -> strided, zero", ds, ref2, n, 0);
    /* Asynchronous transfers through the backend's transfer memory. */
    float *pin = choir_backend_host_alloc(g_gpu, (size_t)n * 4);
    float *pout = choir_backend_host_alloc(g_gpu, (size_t)n * 4);
    expect("host_alloc gives transfer memory", pin && pout);
    if (pin && pout) {
        memcpy(pin, x, (size_t)n * 4);
        float *da = dzero(n);
        choir_op_upload_async(g_gs, da, pin, (size_t)n * 4);
        choir_op_scale(g_gs, da, 2.0f, n);
        choir_op_download_async(g_gs, pout, da, (size_t)n * 4);
        choir_err e = {0};
        choir_stream_sync(g_gs, &e);
        float *want = hdup(x, n);
        for (int64_t i = 0; i < n; i++) want[i] *= 2.0f;
        if (streams_ok("upload_async, scale, download_async"))
            report("upload_async, scale, download_async", rel_l2(pout, want, n), 0);
    }
    choir_backend_host_free(g_gpu, pin);
    choir_backend_host_free(g_gpu, pout);
    case_end();
}

/* --- matrix products ------------------------------------------------------------------ */

static void store_as(choir_dtype dt, void *p, int64_t i, float v) {
    if (dt == CHOIR_DTYPE_F16) ((uint16_t *)p)[i] = choir_f32_to_f16(v);
    else if (dt == CHOIR_DTYPE_BF16) ((uint16_t *)p)[i] = choir_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* A random host weight in hmem memory (MLX layout when quantized). */
static choir_weight make_weight(choir_weight_kind kind, int64_t rows, int64_t cols, int bits,
                                int group, choir_dtype sb) {
    choir_weight w = {.kind = kind, .rows = rows, .cols = cols};
    if (kind == CHOIR_WEIGHT_QUANT) {
        int64_t words = rows * (cols / 32) * bits, ng = rows * (cols / group);
        uint32_t *q = hmem((size_t)words * 4);
        for (int64_t i = 0; i < words; i++) q[i] = rnd_u32() ^ (rnd_u32() << 16);
        void *sc = hmem((size_t)ng * 4), *bi = hmem((size_t)ng * 4);
        float qmax = (float)((1 << bits) - 1);
        for (int64_t g = 0; g < ng; g++) {
            store_as(sb, sc, g, rnd(0.2f, 1.0f) / qmax);
            store_as(sb, bi, g, rnd(-0.6f, -0.2f));
        }
        w.data = q, w.scales = sc, w.biases = bi, w.sb_dtype = sb;
        w.bits = bits, w.group_size = group;
    } else {
        size_t es = kind == CHOIR_WEIGHT_F32 ? 4 : 2;
        void *d = hmem((size_t)(rows * cols) * es);
        choir_dtype dt = kind == CHOIR_WEIGHT_F32   ? CHOIR_DTYPE_F32
                         : kind == CHOIR_WEIGHT_F16 ? CHOIR_DTYPE_F16
                                                    : CHOIR_DTYPE_BF16;
        for (int64_t i = 0; i < rows * cols; i++) store_as(dt, d, i, rnd(-0.5f, 0.5f));
        w.data = d;
    }
    return w;
}

/* y = x W^T + b on both backends for M in {1, 3, 8, 9, 40, 300}: where
 * CUDA runs its GEMV (f32 accumulation over the stored values) the f32
 * bound, otherwise (cuBLAS or the skinny kernel: half-precision operands)
 * the dtype's bound. */
static void check_linear_case(const char *label, choir_weight host, double tol_gemm,
                              choir_backend *be) {
    static const int64_t Ms[] = {1, 3, 8, 9, 40, 300};
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(be, &err);
    choir_weight dw;
    choir_backend_weight(ws, &host, &dw);
    float *bias = hvec(host.rows, -1, 1);
    const float *dbias = choir_backend_vec(ws, bias, host.rows);
    if (choir_backend_weights_status(ws, &err)) {
        g_cases++, g_failures++;
        printf("FAIL linear %-45s weight upload: %s\n", label, err.msg);
        choir_backend_weights_free(ws);
        return;
    }
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        int64_t M = Ms[mi], K = host.cols, N = host.rows;
        float *x = hvec(M * K, -1, 1), *ref = hmem((size_t)(M * N) * 4);
        float *dx = dvec(x, M * K), *dy = dzero(M * N);
        bool with_bias = mi % 2 == 0;
        choir_op_linear(g_cs, x, M, &host, with_bias ? bias : NULL, ref);
        choir_op_linear(g_gs, dx, M, &dw, with_bias ? dbias : NULL, dy);
        char name[96];
        snprintf(name, sizeof name, "linear %s M=%lld%s", label, (long long)M,
                 with_bias ? " +bias" : "");
        choir_cuda_weight shape = {.kind = host.kind, .rows = N, .cols = K};
        bool gemv = choir_cuda_linear_path_for(M, &shape) == CHOIR_CUDA_LINEAR_GEMV;
        cmp(name, dy, ref, M * N, gemv ? TOL_F32 : tol_gemm);
    }
    choir_backend_weights_free(ws);
}

/* The skinny tensor-core path (f16/bf16 weights, 1..32 rows) forced at every
 * row count, then what AUTO picks at each, against the CPU: shapes with a K
 * tail (K % 32 != 0), ragged column tiles (N % 16 != 0), two column tiles a
 * block (N >= 4096), K = 8, and K long enough for the unconditional main
 * loop (several rounds of U steps a warp) before a tail step, with one and
 * with two column tiles a block. The outputs are poisoned with NaN before
 * each call, so one left unwritten fails. x is rounded to the weight's type
 * on the device: that dtype's bound. */
static void check_linear_skinny(void) {
    static const struct { int64_t N, K; } shapes[] = {{262, 768}, {37, 200}, {4111, 264}, {19, 8},
                                                      {300, 3592}, {4100, 1032}};
    static const choir_weight_kind kinds[] = {CHOIR_WEIGHT_BF16, CHOIR_WEIGHT_F16};
    const int64_t MM = CHOIR_CUDA_SKINNY_MAX_ROWS;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ki = 0; ki < 2; ki++) {
            case_begin();
            int64_t N = shapes[si].N, K = shapes[si].K;
            choir_err err = {0};
            choir_weight host = make_weight(kinds[ki], N, K, 0, 0, 0);
            choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
            choir_weight dw;
            choir_backend_weight(ws, &host, &dw);
            float *bias = hvec(N, -1, 1);
            const float *dbias = choir_backend_vec(ws, bias, N);
            float *x = hvec(MM * K, -1, 1), *ref = hmem((size_t)(MM * N) * 4);
            float *got = hmem((size_t)(MM * N) * 4), *poison = hmem((size_t)(MM * N) * 4);
            for (int64_t i = 0; i < MM * N; i++) poison[i] = NAN;
            float *dx = dvec(x, MM * K), *dy = dvec(poison, MM * N);
            const char *kn = kinds[ki] == CHOIR_WEIGHT_BF16 ? "bf16" : "f16";
            double tol = kinds[ki] == CHOIR_WEIGHT_BF16 ? TOL_BF16 : TOL_F16;
            for (int pass = 0; pass < 2; pass++) {
                choir_cuda_linear_force(pass ? CHOIR_CUDA_LINEAR_AUTO : CHOIR_CUDA_LINEAR_SKINNY);
                char name[96];
                snprintf(name, sizeof name, "linear %s %lldx%lld %s M=1..%lld", kn, (long long)N,
                         (long long)K, pass ? "auto" : "skinny", (long long)MM);
                double worst = -1;
                int64_t worst_m = 0;
                bool ok = true;
                for (int64_t M = 1; M <= MM && ok; M++) {
                    bool with_bias = M % 2 == 1;
                    choir_op_upload(g_gs, dy, poison, (size_t)(M * N) * 4);
                    choir_op_linear(g_cs, x, M, &host, with_bias ? bias : NULL, ref);
                    choir_op_linear(g_gs, dx, M, &dw, with_bias ? dbias : NULL, dy);
                    choir_op_download(g_gs, got, dy, (size_t)(M * N) * 4);
                    if (!(ok = streams_ok(name))) break;
                    double e = rel_l2(got, ref, M * N);
                    if (!(e <= worst)) worst = e, worst_m = M;
                }
                if (!ok) continue;
                char full[128];
                snprintf(full, sizeof full, "%s (worst M=%lld)", name, (long long)worst_m);
                report(full, worst, tol);
            }
            choir_cuda_linear_force(CHOIR_CUDA_LINEAR_AUTO);
            choir_backend_weights_free(ws);
            case_end();
        }
    /* The switch as documented in choir/cuda.h: bf16 takes the skinny kernel
     * from CHOIR_CUDA_SKINNY_FROM to _TO rows where it applies (not with K
     * % 8 != 0), else the GEMV up to CHOIR_CUDA_GEMV_HALF_ROWS and cuBLAS
     * above; f32 (and quantized) weights the GEMV up to 8 rows; forcing GEMV
     * gives that older choice for bf16 too. */
    choir_cuda_weight bf = {.kind = CHOIR_WEIGHT_BF16, .rows = 3584, .cols = 3584};
    choir_cuda_weight odd = {.kind = CHOIR_WEIGHT_BF16, .rows = 3584, .cols = 3586};
    choir_cuda_weight f32 = {.kind = CHOIR_WEIGHT_F32, .rows = 3584, .cols = 3584};
    bool ok = true;
    for (int64_t M = 1; M <= 40; M++) {
        choir_cuda_linear_path half = M <= CHOIR_CUDA_GEMV_HALF_ROWS ? CHOIR_CUDA_LINEAR_GEMV
                                                                      : CHOIR_CUDA_LINEAR_BLAS;
        choir_cuda_linear_path want =
            M >= CHOIR_CUDA_SKINNY_FROM && M <= CHOIR_CUDA_SKINNY_TO ? CHOIR_CUDA_LINEAR_SKINNY : half;
        choir_cuda_linear_path plain = M <= 8 ? CHOIR_CUDA_LINEAR_GEMV : CHOIR_CUDA_LINEAR_BLAS;
        ok = ok && choir_cuda_linear_path_for(M, &bf) == want &&
             choir_cuda_linear_path_for(M, &odd) == half && choir_cuda_linear_path_for(M, &f32) == plain;
        choir_cuda_linear_force(CHOIR_CUDA_LINEAR_GEMV);
        ok = ok && choir_cuda_linear_path_for(M, &bf) == plain;
        choir_cuda_linear_force(CHOIR_CUDA_LINEAR_SKINNY);
        ok = ok && choir_cuda_linear_path_for(M, &bf) ==
                       (M <= CHOIR_CUDA_SKINNY_MAX_ROWS ? CHOIR_CUDA_LINEAR_SKINNY : plain);
        choir_cuda_linear_force(CHOIR_CUDA_LINEAR_AUTO);
    }
    expect("linear path by rows: gemv, skinny (bf16, K % 8 == 0), cuBLAS; forced paths", ok);
}

/* An accumulating linear on the skinny path (a batched decode step's o and
 * down projections: y += x W^T + bias in the kernel's epilogue) against the
 * product into a buffer and choir_op_add after it, bit for bit, and the
 * path asserted. */
static void check_linear_skinny_acc(void) {
    static const struct { int64_t N, K; } shapes[] = {{3584, 3584}, {262, 768}, {4111, 264}};
    choir_cuda_skinny_acc_set(1);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        case_begin();
        int64_t N = shapes[si].N, K = shapes[si].K, MM = CHOIR_CUDA_SKINNY_TO;
        choir_err err = {0};
        choir_weight host = make_weight(CHOIR_WEIGHT_BF16, N, K, 0, 0, 0);
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight dw;
        choir_backend_weight(ws, &host, &dw);
        float *bias = hvec(N, -1, 1), *y0 = hvec(MM * N, -2, 2), *x = hvec(MM * K, -1, 1);
        const float *dbias = choir_backend_vec(ws, bias, N);
        float *got = hmem((size_t)(MM * N) * 4), *want = hmem((size_t)(MM * N) * 4);
        float *dx = dvec(x, MM * K), *dy = dvec(y0, MM * N), *dt = dzero(MM * N), *dw2 = dvec(y0, MM * N);
        choir_cuda_weight shape = {.kind = CHOIR_WEIGHT_BF16, .rows = N, .cols = K, .data = {.ptr = (void *)dw.data}};
        bool path = true, same = true;
        for (int64_t M = CHOIR_CUDA_SKINNY_FROM; M <= MM; M += 3) {
            path = path && choir_cuda_linear_skinny_acc_ok(M, dx, &shape);
            const float *b = M % 2 ? dbias : NULL;
            choir_op_upload(g_gs, dy, y0, (size_t)(M * N) * 4);
            choir_op_upload(g_gs, dw2, y0, (size_t)(M * N) * 4);
            choir_op_linear_ex(g_gs, dx, M, &dw, b, dy, CHOIR_LINEAR_ACCUMULATE, dt);
            choir_op_linear(g_gs, dx, M, &dw, b, dt);
            choir_op_add(g_gs, dw2, dt, dw2, M * N);
            choir_op_download(g_gs, got, dy, (size_t)(M * N) * 4);
            choir_op_download(g_gs, want, dw2, (size_t)(M * N) * 4);
            if (!streams_ok("skinny accumulate")) break;
            same = same && memcmp(got, want, (size_t)(M * N) * 4) == 0;
        }
        char name[96];
        snprintf(name, sizeof name, "linear bf16 %lldx%lld accumulate on the skinny path = product + add",
                 (long long)N, (long long)K);
        expect(name, path && same);
        choir_backend_weights_free(ws);
        case_end();
    }
    choir_cuda_skinny_acc_set(-1);
}

/* bf16 rows in and out (the encoder's layers): bias, bias + GELU, and the
 * f32 residual add; the same bf16 rows on both backends, the CPU product in
 * f32 then rounded, CUDA's rounded before bias and GELU: the bf16 bound. */
static uint16_t *h16(const float *x, int64_t n);
static void cmp_bf16(const char *name, const uint16_t *dev, const uint16_t *ref, int64_t n,
                     double tol) {
    uint16_t *got = hmem((size_t)n * 2);
    choir_op_download(g_gs, got, dev, (size_t)n * 2);
    if (!streams_ok(name)) return;
    float *gf = hmem((size_t)n * 4), *rf = hmem((size_t)n * 4);
    choir_bf16_to_f32_n(got, gf, n);
    choir_bf16_to_f32_n(ref, rf, n);
    report(name, rel_l2(gf, rf, n), tol);
}

static void check_linear_bf16(void) {
    case_begin();
    int64_t M = 333, K = 320, N = 264;
    choir_err err = {0};
    choir_weight host = make_weight(CHOIR_WEIGHT_BF16, N, K, 0, 0, 0);
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight dw;
    choir_backend_weight(ws, &host, &dw);
    float *bias = hvec(N, -1, 1);
    const float *dbias = choir_backend_vec(ws, bias, N);
    uint16_t *x = h16(hvec(M * K, -1, 1), M * K), *dx = dput(x, (size_t)(M * K) * 2);
    /* Both device paths: biases in cublasLt's epilogue, and GemmEx + a pass. */
    for (int lt = 1; lt >= 0; lt--) {
        choir_cuda_linear_bf16_set_lt(lt != 0);
        const char *how = lt ? "epilogue" : "plain";
        char name[96];
        /* mode 2: GELU in cublasLt's epilogue (its tanh form), then off again. */
        for (int mode = 0; mode < (lt ? 3 : 2); mode++) {
            uint16_t *ref = hmem((size_t)(M * N) * 2), *dy = dput(NULL, (size_t)(M * N) * 2);
            unsigned fl = mode ? CHOIR_LINEAR_GELU : 0;
            choir_cuda_linear_bf16_set_gelu_epilogue(mode == 2);
            choir_op_linear_bf16(g_cs, x, M, &host, bias, ref, CHOIR_DTYPE_BF16, fl);
            choir_op_linear_bf16(g_gs, dx, M, &dw, dbias, dy, CHOIR_DTYPE_BF16, fl);
            snprintf(name, sizeof name, "linear_bf16 M=333 bf16 rows +bias%s (%s)",
                     mode == 2 ? " +GELU tanh" : mode ? " +GELU" : "", how);
            cmp_bf16(name, dy, ref, M * N, TOL_BF16);
        }
        choir_cuda_linear_bf16_set_gelu_epilogue(true); /* the default */
        float *res = hvec(M * N, -2, 2), *dres = dvec(res, M * N);
        choir_op_linear_bf16(g_cs, x, M, &host, bias, res, CHOIR_DTYPE_F32, CHOIR_LINEAR_ACCUMULATE);
        choir_op_linear_bf16(g_gs, dx, M, &dw, dbias, dres, CHOIR_DTYPE_F32,
                             CHOIR_LINEAR_ACCUMULATE);
        snprintf(name, sizeof name, "linear_bf16 M=333 added into f32 rows +bias (%s)", how);
        cmp(name, dres, res, M * N, TOL_F32 * 100);
    }
    choir_cuda_linear_bf16_set_lt(true);
    float *y32 = hmem((size_t)(M * N) * 4), *dy32 = dzero(M * N);
    choir_op_linear_bf16(g_cs, x, M, &host, NULL, y32, CHOIR_DTYPE_F32, 0);
    choir_op_linear_bf16(g_gs, dx, M, &dw, NULL, dy32, CHOIR_DTYPE_F32, 0);
    cmp("linear_bf16 M=333 into f32 rows", dy32, y32, M * N, TOL_F32 * 100);
    /* Layer norm from f32 rows into bf16 rows: a block per row, and a warp. */
    static const int64_t dims[] = {1280, 384};
    for (int wi = 0; wi < 2; wi++)
        for (size_t di = 0; di < 2; di++) {
            int64_t rows = 53, dim = dims[di];
            float *ln = hvec(rows * dim, -3, 3), *g = hvec(dim, 0.5f, 1.5f),
                  *be = hvec(dim, -0.5f, 0.5f);
            uint16_t *lref = hmem((size_t)(rows * dim) * 2),
                     *dl = dput(NULL, (size_t)(rows * dim) * 2);
            float *dln = dvec(ln, rows * dim), *dg = dvec(g, dim), *dbe = dvec(be, dim);
            choir_cuda_layer_norm_bf16_set_warp(wi == 1);
            choir_op_layer_norm_bf16(g_cs, ln, lref, rows, dim, g, be, 1e-5f);
            choir_op_layer_norm_bf16(g_gs, dln, dl, rows, dim, dg, dbe, 1e-5f);
            char lname[80];
            snprintf(lname, sizeof lname, "layer_norm into bf16 rows, dim %lld (%s)",
                     (long long)dim, wi ? "warp per row" : "block per row");
            cmp_bf16(lname, dl, lref, rows * dim, 4e-3);
        }
    choir_cuda_layer_norm_bf16_set_warp(true); /* the default */
    choir_backend_weights_free(ws);
    case_end();
}

/* choir_op_norm_linear on both backends: q/k/v-shaped layers (biases on
 * two, keys into an f32 cache and values into a bf16 one at slots and
 * positions), then one layer with GELU, in every dense storage at 1, 3 and
 * 8 rows. Where CUDA runs it on its GEMV path (one kernel) or the GEMV after
 * a layer norm, the f32 bound; where 16-bit weights take the skinny kernel
 * (x rounded), the dtype's bound; the bf16 cache holds rounded values, so a
 * value near a rounding boundary may round the other way: 4e-3. */
static void check_norm_linear(void) {
    static const choir_weight_kind kinds[] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16, CHOIR_WEIGHT_BF16};
    static const char *names[] = {"f32", "f16", "bf16"};
    static const double tols[] = {TOL_F32, TOL_F16, TOL_BF16};
    static const int64_t Ms[] = {1, 3, 8};
    enum { SLOTS = 3, POS = 10 };
    const int64_t K = 768, rows[3] = {262, 262, 130}, wide = 1030;
    for (int k = 0; k < 3; k++)
        for (int mi = 0; mi < 3; mi++) {
            case_begin();
            int64_t M = Ms[mi];
            choir_err err = {0};
            choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
            choir_weight hw[4], dw[4];
            float *bias[4] = {0};
            const float *dbias[4] = {0};
            for (int i = 0; i < 4; i++) {
                hw[i] = make_weight(kinds[k], i < 3 ? rows[i] : wide, K, 0, 0, 0);
                choir_backend_weight(ws, &hw[i], &dw[i]);
                if (i != 1) {
                    bias[i] = hvec(hw[i].rows, -1, 1);
                    dbias[i] = choir_backend_vec(ws, bias[i], hw[i].rows);
                }
            }
            float *x = hvec(M * K, -3, 5), *g = hvec(K, 0.5f, 1.5f), *be = hvec(K, -1, 1);
            int32_t slot[8], pos[8];
            for (int m = 0; m < 8; m++) slot[m] = (2 * m + 1) % SLOTS, pos[m] = m + 1;
            float *kc = hmem((size_t)(SLOTS * POS * rows[1]) * 4);
            uint16_t *vc = hmem((size_t)(SLOTS * POS * rows[2]) * 2);
            float *y[4], *dy[4], *h = hmem((size_t)(M * K) * 4);
            for (int i = 0; i < 4; i++) {
                y[i] = hmem((size_t)(M * hw[i].rows) * 4);
                dy[i] = dzero(M * hw[i].rows);
            }
            float *dx = dvec(x, M * K), *dg = dvec(g, K), *dbe = dvec(be, K), *dh = dzero(M * K);
            float *dkc = dzero(SLOTS * POS * rows[1]);
            uint16_t *dvc = dput(NULL, (size_t)(SLOTS * POS * rows[2]) * 2);
            if (dvc) choir_op_zero(g_gs, dvc, (size_t)(SLOTS * POS * rows[2]) * 2);
            int32_t *dslot = dput(slot, sizeof slot), *dpos = dput(pos, sizeof pos);
            choir_norm_linear hp = {.ln_g = g, .ln_b = be, .eps = 1e-5f, .n = 3,
                                    .W = {&hw[0], &hw[1], &hw[2]},
                                    .bias = {bias[0], NULL, bias[2]},
                                    .y = {y[0], y[1], y[2]}};
            hp.store[1] = (choir_rows_out){.dst = kc, .dtype = CHOIR_DTYPE_F32,
                                           .slot_stride = POS * rows[1], .ld = rows[1],
                                           .slot = slot, .pos = pos};
            hp.store[2] = (choir_rows_out){.dst = vc, .dtype = CHOIR_DTYPE_BF16,
                                           .slot_stride = POS * rows[2], .ld = rows[2],
                                           .slot = slot, .pos = pos};
            choir_norm_linear dp = hp;
            dp.ln_g = dg, dp.ln_b = dbe;
            for (int i = 0; i < 3; i++) dp.W[i] = &dw[i], dp.bias[i] = dbias[i], dp.y[i] = dy[i];
            dp.store[1].dst = dkc, dp.store[2].dst = dvc;
            dp.store[1].slot = dp.store[2].slot = dslot;
            dp.store[1].pos = dp.store[2].pos = dpos;
            choir_op_norm_linear(g_cs, x, M, &hp, h);
            choir_op_norm_linear(g_gs, dx, M, &dp, dh);
            choir_cuda_weight shape = {.kind = kinds[k], .rows = rows[0], .cols = K};
            bool gemv = choir_cuda_linear_path_for(M, &shape) == CHOIR_CUDA_LINEAR_GEMV;
            double tol = gemv ? TOL_F32 : tols[k];
            char name[112];
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "norm_linear %s M=%lld q/k/v: layer %d", names[k],
                         (long long)M, i);
                cmp(name, dy[i], y[i], M * rows[i], tol);
            }
            snprintf(name, sizeof name, "norm_linear %s M=%lld keys into an f32 cache", names[k],
                     (long long)M);
            cmp(name, dkc, kc, SLOTS * POS * rows[1], tol);
            snprintf(name, sizeof name, "norm_linear %s M=%lld values into a bf16 cache", names[k],
                     (long long)M);
            cmp_bf16(name, dvc, vc, SLOTS * POS * rows[2], gemv ? 4e-3 : tols[k]);
            /* One wide layer with GELU, no affine. */
            choir_norm_linear hg = {.eps = 1e-5f, .n = 1, .W = {&hw[3]}, .bias = {bias[3]},
                                    .y = {y[3]}, .flags = CHOIR_LINEAR_GELU};
            choir_norm_linear dg1 = hg;
            dg1.W[0] = &dw[3], dg1.bias[0] = dbias[3], dg1.y[0] = dy[3];
            choir_op_norm_linear(g_cs, x, M, &hg, h);
            choir_op_norm_linear(g_gs, dx, M, &dg1, dh);
            snprintf(name, sizeof name, "norm_linear %s M=%lld 1030 rows + GELU", names[k],
                     (long long)M);
            cmp(name, dy[3], y[3], M * wide, tol);
            /* The RMS norm (VibeVoice's pre-norms): against the CPU, and on the
             * GPU against choir_op_rms_norm then choir_op_linear, which it
             * equals bit for bit (the same reduction, the same products). */
            choir_norm_linear hr = {.ln_g = g, .eps = 1e-6f, .rms = true, .n = 1, .W = {&hw[3]},
                                    .bias = {bias[3]}, .y = {y[3]}};
            choir_norm_linear dr = hr;
            dr.ln_g = dg, dr.W[0] = &dw[3], dr.bias[0] = dbias[3], dr.y[0] = dy[3];
            choir_op_norm_linear(g_cs, x, M, &hr, h);
            choir_op_norm_linear(g_gs, dx, M, &dr, dh);
            snprintf(name, sizeof name, "norm_linear %s M=%lld 1030 rows, RMS norm", names[k], (long long)M);
            cmp(name, dy[3], y[3], M * wide, tol);
            float *ry = hmem((size_t)(M * wide) * 4), *dry = dzero(M * wide), *drn = dzero(M * K);
            choir_op_rms_norm(g_gs, dx, drn, M, K, dg, 1e-6f);
            choir_op_linear(g_gs, drn, M, &dw[3], dbias[3], dry);
            choir_op_download(g_gs, ry, dry, (size_t)(M * wide) * 4);
            snprintf(name, sizeof name, "norm_linear %s M=%lld RMS norm: one kernel = the two ops", names[k],
                     (long long)M);
            if (streams_ok(name)) cmp(name, dy[3], ry, M * wide, 0);
            choir_backend_weights_free(ws);
            case_end();
        }
    /* Refusals: no layers, and layers of different widths. */
    case_begin();
    choir_weight a = make_weight(CHOIR_WEIGHT_F32, 8, 16, 0, 0, 0);
    choir_weight b = make_weight(CHOIR_WEIGHT_F32, 8, 24, 0, 0, 0);
    float *x = hvec(16, -1, 1), *h = hmem(64), *y0 = hmem(64), *y1 = hmem(64);
    choir_norm_linear none = {.n = 0};
    choir_norm_linear mixed = {.n = 2, .W = {&a, &b}, .y = {y0, y1}};
    int r0 = choir_op_norm_linear(g_cs, x, 1, &none, h);
    choir_stream_clear(g_cs);
    int r1 = choir_op_norm_linear(g_cs, x, 1, &mixed, h);
    choir_stream_clear(g_cs);
    expect("norm_linear refuses no layers and layers of different widths (CHOIR_EINVAL)",
           r0 == CHOIR_EINVAL && r1 == CHOIR_EINVAL);
    case_end();
}

/* choir_op_swiglu: on the GPU the floats of act(SiLU) then mul there, and
 * within the f32 bound of the CPU's. */
static void check_swiglu(void) {
    case_begin();
    const int64_t n = 18944 * 3 + 5;
    float *g = hvec(n, -8, 8), *u = hvec(n, -2, 2), *ref = hmem((size_t)n * 4);
    float *dg = dvec(g, n), *du = dvec(u, n), *dg2 = dvec(g, n);
    choir_op_swiglu(g_gs, dg, du, n);
    choir_op_act(g_gs, CHOIR_ACT_SILU, dg2, n, 0.0f);
    choir_op_mul(g_gs, dg2, du, dg2, n);
    choir_op_download(g_gs, ref, dg2, (size_t)n * 4);
    if (streams_ok("swiglu")) cmp("swiglu: one kernel = act(SiLU) then mul", dg, ref, n, 0);
    choir_op_swiglu(g_cs, g, u, n);
    cmp("swiglu, CUDA vs CPU", dg, g, n, TOL_F32);
    case_end();
}

static float *download(const float *dev, int64_t n) {
    float *h = hmem((size_t)n * sizeof(float));
    choir_op_download(g_gs, h, dev, (size_t)n * sizeof(float));
    return h;
}

/* Fused rows (choir_cuda_fused_rows, off by default): bf16 weights at
 * cuBLAS's row counts through the three operations that take them, each
 * with the switch off then on. On: the RMS norm_linear (q/k/v-shaped, two
 * biases, values stored into a bf16 cache) and the swiglu_linear that writes
 * its product are the off path's floats bit for bit (the same rounding of
 * the product's input, the same cuBLAS calls); accumulating products (o and
 * down projections) within 1e-6 of it (the add is cuBLAS's epilogue: the
 * same one rounding unless cuBLAS sums in another order for beta 1); all
 * against the CPU within the bf16 bound. swiglu_linear on the CPU is
 * choir_op_swiglu then choir_op_linear_ex bit for bit, and on the GPU's GEMV
 * path (one row) too. K = 770 (not a multiple of 4) takes the SwiGLU's
 * scalar tail. */
static void check_fused_norm(int64_t K) {
    case_begin();
    const int64_t M = 333, rows[3] = {264, 136, 136};
    bool was = choir_cuda_fused_rows_on();
    char name[112];
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight hw[3], dw[3];
    float *bias[2], *dbias[2];
    for (int i = 0; i < 3; i++) {
        hw[i] = make_weight(CHOIR_WEIGHT_BF16, rows[i], K, 0, 0, 0);
        choir_backend_weight(ws, &hw[i], &dw[i]);
    }
    for (int i = 0; i < 2; i++) {
        bias[i] = hvec(rows[2 * i], -1, 1);
        dbias[i] = (float *)choir_backend_vec(ws, bias[i], rows[2 * i]);
    }
    float *x = hvec(M * K, -3, 5), *g = hvec(K, 0.5f, 1.5f);
    float *dx = dvec(x, M * K), *dg = dvec(g, K), *dh = dzero(M * K);
    int32_t pos[333], slot[333] = {0};
    for (int m = 0; m < M; m++) pos[m] = m;
    int32_t *dpos = dput(pos, sizeof pos), *dslot = dput(slot, sizeof slot);
    float *y[2][3], *ycpu[3], *hh = hmem((size_t)(M * K) * 4);
    uint16_t *dvc[2], *vc = hmem((size_t)(M * rows[2]) * 2);
    for (int on = 0; on < 2; on++) {
        choir_cuda_fused_rows(on != 0);
        for (int i = 0; i < 3; i++) y[on][i] = dzero(M * rows[i]);
        dvc[on] = dput(NULL, (size_t)(M * rows[2]) * 2);
        choir_norm_linear p = {.ln_g = dg, .eps = 1e-6f, .rms = true, .n = 3, .W = {&dw[0], &dw[1], &dw[2]},
                               .bias = {dbias[0], NULL, dbias[1]}, .y = {y[on][0], y[on][1], y[on][2]}};
        p.store[2] = (choir_rows_out){.dst = dvc[on], .dtype = CHOIR_DTYPE_BF16, .ld = rows[2], .slot = dslot,
                                      .pos = dpos};
        choir_op_norm_linear(g_gs, dx, M, &p, dh);
    }
    choir_cuda_fused_rows(was);
    for (int i = 0; i < 3; i++) ycpu[i] = hmem((size_t)(M * rows[i]) * 4);
    choir_norm_linear hp = {.ln_g = g, .eps = 1e-6f, .rms = true, .n = 3, .W = {&hw[0], &hw[1], &hw[2]},
                            .bias = {bias[0], NULL, bias[1]}, .y = {ycpu[0], ycpu[1], ycpu[2]}};
    hp.store[2] = (choir_rows_out){.dst = vc, .dtype = CHOIR_DTYPE_BF16, .ld = rows[2], .slot = slot,
                                  .pos = pos};
    choir_op_norm_linear(g_cs, x, M, &hp, hh);
    for (int i = 0; i < 3; i++) {
        float *off = download(y[0][i], M * rows[i]);
        snprintf(name, sizeof name, "fused rows K=%lld RMS norm_linear layer %d: on = off", (long long)K, i);
        if (streams_ok(name)) cmp(name, y[1][i], off, M * rows[i], 0);
        snprintf(name, sizeof name, "fused rows K=%lld RMS norm_linear layer %d vs CPU", (long long)K, i);
        cmp(name, y[1][i], ycpu[i], M * rows[i], TOL_BF16);
    }
    uint16_t *voff = hmem((size_t)(M * rows[2]) * 2);
    choir_op_download(g_gs, voff, dvc[0], (size_t)(M * rows[2]) * 2);
    snprintf(name, sizeof name, "fused rows K=%lld values into a bf16 cache: on = off", (long long)K);
    if (streams_ok(name)) cmp_bf16(name, dvc[1], voff, M * rows[2], 0);
    snprintf(name, sizeof name, "fused rows K=%lld values into a bf16 cache vs CPU", (long long)K);
    cmp_bf16(name, dvc[1], vc, M * rows[2], TOL_BF16);
    choir_backend_weights_free(ws);
    case_end();
}

static void check_fused_mlp(int64_t K) {
    case_begin();
    const int64_t M = 333, I = 520;
    bool was = choir_cuda_fused_rows_on();
    char name[112];
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight hdown = make_weight(CHOIR_WEIGHT_BF16, K, I, 0, 0, 0), ddown;
    choir_backend_weight(ws, &hdown, &ddown);
    float *bd = hvec(K, -1, 1);
    const float *dbd = choir_backend_vec(ws, bd, K);
    float *gate = hvec(M * I, -6, 6), *up = hvec(M * I, -2, 2), *res = hvec(M * K, -2, 2);
    float *dup = dvec(up, M * I), *tmp = dzero(M * K);
    float *acc[2], *sw[2], *swa[2];
    for (int on = 0; on < 2; on++) {
        choir_cuda_fused_rows(on != 0);
        /* An o / down projection: res += gate W^T. */
        float *dgate = dvec(gate, M * I);
        acc[on] = dvec(res, M * K);
        choir_op_linear_ex(g_gs, dgate, M, &ddown, NULL, acc[on], CHOIR_LINEAR_ACCUMULATE, tmp);
        sw[on] = dzero(M * K);
        choir_op_swiglu_linear(g_gs, dgate, dup, M, &ddown, dbd, sw[on], 0, NULL);
        dgate = dvec(gate, M * I);
        swa[on] = dvec(res, M * K);
        choir_op_swiglu_linear(g_gs, dgate, dup, M, &ddown, NULL, swa[on], CHOIR_LINEAR_ACCUMULATE, tmp);
    }
    choir_cuda_fused_rows(was);
    /* The CPU's, and its swiglu_linear against the two operations. */
    float *cacc = hdup(res, M * K), *ctmp = hmem((size_t)(M * K) * 4), *cg = hdup(gate, M * I);
    choir_op_linear_ex(g_cs, cg, M, &hdown, NULL, cacc, CHOIR_LINEAR_ACCUMULATE, ctmp);
    float *csw = hmem((size_t)(M * K) * 4), *csw2 = hmem((size_t)(M * K) * 4);
    choir_op_swiglu_linear(g_cs, cg, up, M, &hdown, bd, csw, 0, NULL);
    float *cg2 = hdup(gate, M * I);
    choir_op_swiglu(g_cs, cg2, up, M * I);
    choir_op_linear_ex(g_cs, cg2, M, &hdown, bd, csw2, 0, NULL);
    snprintf(name, sizeof name, "swiglu_linear K=%lld on the CPU = swiglu then linear_ex", (long long)K);
    report(name, rel_l2(csw, csw2, M * K), 0);
    float *cswa = hdup(res, M * K);
    cg = hdup(gate, M * I);
    choir_op_swiglu_linear(g_cs, cg, up, M, &hdown, NULL, cswa, CHOIR_LINEAR_ACCUMULATE, ctmp);
    struct {
        const char *what;
        float **dev;
        const float *cpu;
        double tol;
    } outs[3] = {{"linear_ex accumulate", acc, cacc, 1e-6},
                 {"swiglu_linear +bias", sw, csw, 0},
                 {"swiglu_linear accumulate", swa, cswa, 1e-6}};
    for (int o = 0; o < 3; o++) {
        float *off = download(outs[o].dev[0], M * K);
        snprintf(name, sizeof name, "fused rows K=%lld %s: on vs off", (long long)K, outs[o].what);
        if (streams_ok(name)) cmp(name, outs[o].dev[1], off, M * K, outs[o].tol);
        snprintf(name, sizeof name, "fused rows K=%lld %s vs CPU", (long long)K, outs[o].what);
        cmp(name, outs[o].dev[1], outs[o].cpu, M * K, TOL_BF16);
    }
    choir_backend_weights_free(ws);
    case_end();
}

/* One row (the GEMV path, the switch on): swiglu_linear = swiglu then
 * linear_ex there, bit for bit. */
static void check_fused_one_row(void) {
    case_begin();
    const int64_t K = 768, I = 520;
    bool was = choir_cuda_fused_rows_on();
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight hdown = make_weight(CHOIR_WEIGHT_BF16, K, I, 0, 0, 0), ddown;
    choir_backend_weight(ws, &hdown, &ddown);
    float *gate = hvec(I, -6, 6), *up = hvec(I, -2, 2), *res = hvec(K, -2, 2);
    float *dg1 = dvec(gate, I), *dg2 = dvec(gate, I), *dup = dvec(up, I), *tmp = dzero(K);
    float *y1 = dvec(res, K), *y2 = dvec(res, K);
    choir_cuda_fused_rows(true);
    choir_op_swiglu_linear(g_gs, dg1, dup, 1, &ddown, NULL, y1, CHOIR_LINEAR_ACCUMULATE, tmp);
    choir_op_swiglu(g_gs, dg2, dup, I);
    choir_op_linear_ex(g_gs, dg2, 1, &ddown, NULL, y2, CHOIR_LINEAR_ACCUMULATE, tmp);
    choir_cuda_fused_rows(was);
    const char *name = "fused rows: swiglu_linear one row = swiglu then linear_ex";
    float *ref = download(y2, K);
    if (streams_ok(name)) cmp(name, y1, ref, K, 0);
    choir_backend_weights_free(ws);
    case_end();
}

/* The gated MLP (choir_op_gated_mlp): off (norm_linear then
 * swiglu_linear), with fused rows (within 1e-6 of off: the accumulation in
 * cuBLAS's epilogue), and with gate and up in bf16 (choir_cuda_mlp_bf16:
 * their rounding, 1e-2 of off); each against the CPU within the bf16
 * bound. The prefill's one gate/up product is held off: gate and up,
 * uploaded one after the other, may lie back to back in device memory,
 * where it would take them as one product in bf16 (its own case is
 * check_prefill_fused_mlp). */
static void check_gated_mlp(void) {
    case_begin();
    const int64_t M = 333, H = 768, I = 520;
    bool rows_was = choir_cuda_fused_rows_on(), mlp_was = choir_cuda_mlp_bf16_on();
    bool pf_was = choir_cuda_prefill_fused_on();
    choir_cuda_prefill_fused(false);
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight hg = make_weight(CHOIR_WEIGHT_BF16, I, H, 0, 0, 0), hu = make_weight(CHOIR_WEIGHT_BF16, I, H, 0, 0, 0);
    choir_weight hd = make_weight(CHOIR_WEIGHT_BF16, H, I, 0, 0, 0), dg, du, dd;
    choir_backend_weight(ws, &hg, &dg);
    choir_backend_weight(ws, &hu, &du);
    choir_backend_weight(ws, &hd, &dd);
    float *x = hvec(M * H, -3, 5), *g = hvec(H, 0.5f, 1.5f);
    float *dgm = dvec(g, H), *gate = dzero(M * I), *up = dzero(M * I), *h = dzero(M * H), *tmp = dzero(M * H);
    float *y[3];
    static const char *modes[3] = {"off", "fused rows", "fused rows + bf16 gate/up"};
    for (int md = 0; md < 3; md++) {
        choir_cuda_fused_rows(md >= 1);
        choir_cuda_mlp_bf16(md == 2);
        y[md] = dvec(x, M * H);
        choir_op_gated_mlp(g_gs, y[md], M, dgm, 1e-6f, &dg, &du, &dd, gate, up, h, tmp);
    }
    choir_cuda_fused_rows(rows_was);
    choir_cuda_mlp_bf16(mlp_was);
    choir_cuda_prefill_fused(pf_was);
    float *cx = hdup(x, M * H), *cgate = hmem((size_t)(M * I) * 4), *cup = hmem((size_t)(M * I) * 4);
    float *ch = hmem((size_t)(M * H) * 4), *ctmp = hmem((size_t)(M * H) * 4);
    choir_op_gated_mlp(g_cs, cx, M, g, 1e-6f, &hg, &hu, &hd, cgate, cup, ch, ctmp);
    float *off = download(y[0], M * H);
    char name[112];
    for (int md = 0; md < 3; md++) {
        if (md) {
            snprintf(name, sizeof name, "gated_mlp %s vs off", modes[md]);
            if (streams_ok(name)) cmp(name, y[md], off, M * H, md == 1 ? 1e-6 : TOL_BF16);
        }
        snprintf(name, sizeof name, "gated_mlp %s vs CPU", modes[md]);
        cmp(name, y[md], cx, M * H, TOL_BF16);
    }
    choir_backend_weights_free(ws);
    case_end();
}

/* Prefill products in one (choir_cuda_prefill_fused): weights grouped in
 * one device buffer (choir_backend_weight_group). choir_op_norm_qkv_rope
 * with the switch on (one product, then the biases and rotations in one
 * pass) within 1e-5 of off (the separate products and ropes: the same
 * floats up to cuBLAS's order) and within the bf16 bound of the CPU; the
 * gated MLP over gate and up as one product within 1e-3 of the separate
 * bf16 gate/up path (the same roundings up to cuBLAS's order, which may
 * move a bf16 value by one step) and the bf16 bound of the CPU. */
static void check_prefill_fused_qkv(int64_t M, int64_t K, int nh, int nkv, int64_t D) {
    case_begin();
    bool rows_was = choir_cuda_fused_rows_on(), pf_was = choir_cuda_prefill_fused_on();
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    int64_t qd = nh * D, kvd = nkv * D;
    choir_weight hw[3] = {make_weight(CHOIR_WEIGHT_BF16, qd, K, 0, 0, 0), make_weight(CHOIR_WEIGHT_BF16, kvd, K, 0, 0, 0),
                          make_weight(CHOIR_WEIGHT_BF16, kvd, K, 0, 0, 0)};
    choir_weight dw[3];
    const choir_weight *hp[3] = {&hw[0], &hw[1], &hw[2]};
    choir_weight *dp[3] = {&dw[0], &dw[1], &dw[2]};
    choir_backend_weight_group(ws, 3, hp, dp);
    expect("weight_group: q, k, v one after another",
           (const char *)dw[1].data == (const char *)dw[0].data + qd * K * 2 &&
               (const char *)dw[2].data == (const char *)dw[1].data + kvd * K * 2);
    float *x = hvec(M * K, -3, 5), *g = hvec(K, 0.5f, 1.5f);
    float *b[3] = {hvec(qd, -1, 1), hvec(kvd, -1, 1), hvec(kvd, -1, 1)};
    int32_t *pos = hmem((size_t)M * sizeof(int32_t));
    for (int64_t r = 0; r < M; r++) pos[r] = (int32_t)(r * 7 % 4096 + 100);
    float *dx = dvec(x, M * K), *dg = dvec(g, K), *dh = dzero(M * K);
    float *db[3] = {dvec(b[0], qd), dvec(b[1], kvd), dvec(b[2], kvd)};
    int32_t *dpos = dput(pos, (size_t)M * sizeof(int32_t));
    float *y[2][3];
    for (int md = 0; md < 2; md++) {
        choir_cuda_fused_rows(true);
        choir_cuda_prefill_fused(md == 1);
        for (int i = 0; i < 3; i++) y[md][i] = dzero(M * (i ? kvd : qd));
        choir_norm_linear p = {.ln_g = dg, .eps = 1e-6f, .rms = true, .n = 3, .W = {&dw[0], &dw[1], &dw[2]},
                               .bias = {db[0], db[1], db[2]}, .y = {y[md][0], y[md][1], y[md][2]}};
        choir_op_norm_qkv_rope(g_gs, dx, M, &p, dh, nh, nkv, D, dpos, 1e6f);
    }
    choir_cuda_fused_rows(rows_was);
    choir_cuda_prefill_fused(pf_was);
    float *c[3] = {hmem((size_t)(M * qd) * 4), hmem((size_t)(M * kvd) * 4), hmem((size_t)(M * kvd) * 4)};
    float *ch = hmem((size_t)(M * K) * 4);
    choir_norm_linear cp = {.ln_g = g, .eps = 1e-6f, .rms = true, .n = 3, .W = {&hw[0], &hw[1], &hw[2]},
                            .bias = {b[0], b[1], b[2]}, .y = {c[0], c[1], c[2]}};
    choir_op_norm_qkv_rope(g_cs, x, M, &cp, ch, nh, nkv, D, pos, 1e6f);
    static const char *what[3] = {"q", "k", "v"};
    char name[112];
    for (int i = 0; i < 3; i++) {
        int64_t n = M * (i ? kvd : qd);
        float *off = download(y[0][i], n);
        snprintf(name, sizeof name, "norm_qkv_rope %s, %lld rows, heads %d/%d of %lld: one product vs off", what[i],
                 (long long)M, nh, nkv, (long long)D);
        if (streams_ok(name)) cmp(name, y[1][i], off, n, 1e-5);
        snprintf(name, sizeof name, "norm_qkv_rope %s, %lld rows, heads %d/%d of %lld: one product vs CPU", what[i],
                 (long long)M, nh, nkv, (long long)D);
        cmp(name, y[1][i], c[i], n, TOL_BF16);
    }
    choir_backend_weights_free(ws);
    case_end();
}

static void check_prefill_fused_mlp(void) {
    case_begin();
    const int64_t M = 333, H = 768, I = 512;
    bool rows_was = choir_cuda_fused_rows_on(), mlp_was = choir_cuda_mlp_bf16_on();
    bool pf_was = choir_cuda_prefill_fused_on();
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight hg = make_weight(CHOIR_WEIGHT_BF16, I, H, 0, 0, 0), hu = make_weight(CHOIR_WEIGHT_BF16, I, H, 0, 0, 0);
    choir_weight hd = make_weight(CHOIR_WEIGHT_BF16, H, I, 0, 0, 0), dg, du, dd;
    const choir_weight *hp[2] = {&hg, &hu};
    choir_weight *dp[2] = {&dg, &du};
    choir_backend_weight_group(ws, 2, hp, dp);
    choir_backend_weight(ws, &hd, &dd);
    expect("weight_group: gate, up one after another", (const char *)du.data == (const char *)dg.data + I * H * 2);
    float *x = hvec(M * H, -3, 5), *g = hvec(H, 0.5f, 1.5f);
    float *dgm = dvec(g, H), *gate = dzero(M * I), *up = dzero(M * I), *h = dzero(M * H), *tmp = dzero(M * H);
    float *y[2];
    for (int md = 0; md < 2; md++) {
        choir_cuda_fused_rows(true);
        choir_cuda_mlp_bf16(md == 0);
        choir_cuda_prefill_fused(md == 1);
        y[md] = dvec(x, M * H);
        choir_op_gated_mlp(g_gs, y[md], M, dgm, 1e-6f, &dg, &du, &dd, gate, up, h, tmp);
    }
    choir_cuda_fused_rows(rows_was);
    choir_cuda_mlp_bf16(mlp_was);
    choir_cuda_prefill_fused(pf_was);
    float *cx = hdup(x, M * H), *cgate = hmem((size_t)(M * I) * 4), *cup = hmem((size_t)(M * I) * 4);
    float *ch = hmem((size_t)(M * H) * 4), *ctmp = hmem((size_t)(M * H) * 4);
    choir_op_gated_mlp(g_cs, cx, M, g, 1e-6f, &hg, &hu, &hd, cgate, cup, ch, ctmp);
    float *sep = download(y[0], M * H);
    if (streams_ok("gated_mlp gate/up one product vs separate bf16"))
        cmp("gated_mlp gate/up one product vs separate bf16", y[1], sep, M * H, 1e-3);
    cmp("gated_mlp gate/up one product vs CPU", y[1], cx, M * H, TOL_BF16);
    choir_backend_weights_free(ws);
    case_end();
}

static void check_fused_rows(void) {
    check_gated_mlp();
    check_prefill_fused_qkv(333, 768, 12, 2, 64);
    check_prefill_fused_qkv(100, 1024, 8, 2, 128);
    check_prefill_fused_mlp();
    check_fused_norm(768);
    check_fused_norm(770);
    check_fused_mlp(768);
    check_fused_mlp(770);
    check_fused_one_row();
}

/* The one-row bf16 GEMV's shapes (choir_cuda_gemv_set_variant: rows a warp,
 * loads a batch, a load hint): each gives shape 0's floats bit for bit, for
 * a linear with an odd row count and column counts off the load batch (770:
 * not a multiple of 8, the scalar loop), one accumulating into y, and a
 * three-layer RMS norm_linear whose layers end mid-pair. */
static void check_gemv_shapes(void) {
    static const int64_t Ks[] = {768, 3000, 770};
    const int64_t N = 263;
    const int V = choir_cuda_gemv_variants();
    char name[112];
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        case_begin();
        int64_t K = Ks[ki];
        choir_err err = {0};
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight hw = make_weight(CHOIR_WEIGHT_BF16, N, K, 0, 0, 0), dw;
        choir_backend_weight(ws, &hw, &dw);
        float *bias = hvec(N, -1, 1), *x = hvec(K, -3, 5), *y0 = hvec(N, -1, 1);
        const float *dbias = choir_backend_vec(ws, bias, N);
        float *dx = dvec(x, K), *ref = hmem((size_t)N * 4), *refa = hmem((size_t)N * 4);
        float *dy = dzero(N), *dya = dvec(y0, N), *dt = dzero(N);
        choir_cuda_gemv_set_variant(0);
        choir_op_linear(g_gs, dx, 1, &dw, dbias, dy);
        choir_op_linear_ex(g_gs, dx, 1, &dw, dbias, dya, CHOIR_LINEAR_ACCUMULATE, dt);
        choir_op_download(g_gs, ref, dy, (size_t)N * 4);
        choir_op_download(g_gs, refa, dya, (size_t)N * 4);
        for (int v = 1; v < V; v++) {
            float *dyv = dzero(N), *dyav = dvec(y0, N);
            choir_cuda_gemv_set_variant(v);
            choir_op_linear(g_gs, dx, 1, &dw, dbias, dyv);
            choir_op_linear_ex(g_gs, dx, 1, &dw, dbias, dyav, CHOIR_LINEAR_ACCUMULATE, dt);
            choir_cuda_gemv_set_variant(0);
            snprintf(name, sizeof name, "gemv shape %d = shape 0: bf16 %lld x %lld", v, (long long)N,
                     (long long)K);
            if (streams_ok(name)) cmp(name, dyv, ref, N, 0);
            snprintf(name, sizeof name, "gemv shape %d = shape 0: bf16 %lld x %lld, accumulating", v,
                     (long long)N, (long long)K);
            if (streams_ok(name)) cmp(name, dyav, refa, N, 0);
        }
        choir_backend_weights_free(ws);
        case_end();
    }
    case_begin();
    const int64_t K = 1024, rows[3] = {263, 130, 131}, total = 524;
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight hw[3], dw[3];
    for (int i = 0; i < 3; i++) {
        hw[i] = make_weight(CHOIR_WEIGHT_BF16, rows[i], K, 0, 0, 0);
        choir_backend_weight(ws, &hw[i], &dw[i]);
    }
    float *x = hvec(K, -3, 5), *g = hvec(K, 0.5f, 1.5f), *bias = hvec(rows[0], -1, 1);
    float *dx = dvec(x, K), *dg = dvec(g, K), *dh = dzero(K), *ref = hmem((size_t)total * 4);
    const float *dbias = choir_backend_vec(ws, bias, rows[0]);
    float *dy = dzero(total);
    choir_norm_linear p = {.ln_g = dg, .eps = 1e-6f, .rms = true, .n = 3, .W = {&dw[0], &dw[1], &dw[2]},
                           .bias = {dbias, NULL, NULL}, .y = {dy, dy + rows[0], dy + rows[0] + rows[1]}};
    choir_cuda_gemv_set_variant(0);
    choir_op_norm_linear(g_gs, dx, 1, &p, dh);
    choir_op_download(g_gs, ref, dy, (size_t)total * 4);
    for (int v = 1; v < V; v++) {
        float *dyv = dzero(total);
        choir_norm_linear pv = p;
        pv.y[0] = dyv, pv.y[1] = dyv + rows[0], pv.y[2] = dyv + rows[0] + rows[1];
        choir_cuda_gemv_set_variant(v);
        choir_op_norm_linear(g_gs, dx, 1, &pv, dh);
        choir_cuda_gemv_set_variant(0);
        snprintf(name, sizeof name, "gemv shape %d = shape 0: RMS norm_linear bf16, layers of 263/130/131", v);
        if (streams_ok(name)) cmp(name, dyv, ref, total, 0);
    }
    choir_cuda_gemv_set_variant(-1); /* the default shape for the cases after */
    choir_backend_weights_free(ws);
    case_end();
}

/* The one-row GEMVs launched to overlap the kernel before them
 * (choir_cuda_pdl 1 and 2: their blocks start while that kernel drains,
 * issue their first weight loads, then wait for it) against the same
 * operations without (bit for bit: the floats do not change), over bf16
 * and over 8-bit weights (shape 7, the 8-bit one-row default). A chain of
 * six decoder-like layers over one residual row, so that every dependency
 * a step has is crossed: the fused RMS norm reads the row the product
 * before it added into, the accumulating products add into the row the
 * norm before them read, one product reads what the one before it wrote,
 * and the down product reads SwiGLU's output. Run directly and as a
 * recorded graph replayed three times (the graph keeps the launches'
 * programmatic edges); the same over 8 rows, bf16 (a decode batch's
 * skinny tensor-core products). Then, 8-bit, one product over a row too long for
 * one piece of x (13,312 columns: two launches, the second adding into
 * y) right after the operation that writes that row. */
static void pdl_chain(int64_t M, float *dx, float *dq, float *dg, float *du, float *dh, const float *dgam,
                      const choir_weight *dw, float *dt, int64_t I) {
    for (int l = 0; l < 6; l++) {
        choir_norm_linear pq = {.ln_g = dgam, .eps = 1e-6f, .rms = true, .n = 1, .W = {&dw[0]}, .y = {dq}};
        choir_op_norm_linear(g_gs, dx, M, &pq, dh);
        choir_op_linear_ex(g_gs, dq, M, &dw[1], NULL, dx, CHOIR_LINEAR_ACCUMULATE, dt);
        choir_norm_linear pm = {.ln_g = dgam, .eps = 1e-6f, .rms = true, .n = 2, .W = {&dw[2], &dw[3]},
                                .y = {dg, du}};
        choir_op_norm_linear(g_gs, dx, M, &pm, dh);
        choir_op_swiglu(g_gs, dg, du, M * I);
        choir_op_linear_ex(g_gs, dg, M, &dw[4], NULL, dx, CHOIR_LINEAR_ACCUMULATE, dt);
    }
}
/* M = 1: the one-row GEMVs (bf16, or 8-bit shape 7); bf16 at M = 8: the
 * skinny tensor-core kernel of a decode batch. */
static void check_gemv_pdl_kind(bool q8, int64_t M) {
    const int64_t H = 1024, I = 2816;
    const char *kind = q8 ? "8-bit" : M > 1 ? "bf16 (8 rows)" : "bf16";
    case_begin();
    choir_err err = {0};
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    const int64_t shp[5][2] = {{H, H}, {H, H}, {I, H}, {I, H}, {H, I}};
    choir_weight dw[5];
    for (int i = 0; i < 5; i++) {
        choir_weight hw = q8 ? make_weight(CHOIR_WEIGHT_QUANT, shp[i][0], shp[i][1], 8, 64, CHOIR_DTYPE_BF16)
                             : make_weight(CHOIR_WEIGHT_BF16, shp[i][0], shp[i][1], 0, 0, 0);
        choir_backend_weight(ws, &hw, &dw[i]);
    }
    const int64_t n = M * H;
    float *x = hvec(n, -1, 1), *gam = hvec(H, 0.5f, 1.5f);
    const float *dgam = choir_backend_vec(ws, gam, H);
    float *dq = dzero(n), *dg = dzero(M * I), *du = dzero(M * I), *dh = dzero(n), *dt = dzero(n);
    float *dref = dvec(x, n), *ref = hmem((size_t)n * 4);
    char name[112];
    choir_cuda_pdl_set(0);
    pdl_chain(M, dref, dq, dg, du, dh, dgam, dw, dt, I);
    choir_op_download(g_gs, ref, dref, (size_t)n * 4);
    snprintf(name, sizeof name, "gemv pdl, %s: the chain without it", kind);
    if (streams_ok(name)) {
        double top = 0;
        bool finite = true;
        for (int64_t i = 0; i < n; i++) {
            finite = finite && isfinite(ref[i]);
            top = fmax(top, fabs(ref[i] - x[i]));
        }
        printf("     the chain moved the row by up to %.3g\n", top);
        snprintf(name, sizeof name, "gemv pdl, %s: the chain's row finite and moved", kind);
        expect(name, finite && top > 1e-3);
    }
    for (int mode = 1; mode <= 2; mode++) {
        float *dx = dvec(x, n);
        choir_cuda_pdl_set(mode);
        pdl_chain(M, dx, dq, dg, du, dh, dgam, dw, dt, I);
        snprintf(name, sizeof name, "gemv pdl %d = off: 6 layers of %s GEMVs over the rows", mode, kind);
        if (streams_ok(name)) cmp(name, dx, ref, n, 0);
        if (!choir_backend_has_graphs(g_gpu)) continue;
        /* The graph: the chain recorded once on a row that is then reset
         * and replayed; the third replay equals three direct chains. */
        float *dgx = dvec(x, n), *dd = dvec(x, n), *want = hmem((size_t)n * 4);
        choir_graph *gr = NULL;
        if (choir_stream_graph_begin(g_gs, &err) == 0) {
            pdl_chain(M, dgx, dq, dg, du, dh, dgam, dw, dt, I);
            gr = choir_stream_graph_end(g_gs, &err);
        }
        snprintf(name, sizeof name, "gemv pdl %d, %s: the chain recorded as a graph", mode, kind);
        expect(name, gr != NULL);
        if (!gr) {
            printf("     %s\n", err.msg);
            choir_stream_clear(g_gs);
            continue;
        }
        choir_op_upload(g_gs, dgx, x, (size_t)n * 4);
        choir_cuda_pdl_set(0);
        for (int r = 0; r < 3; r++) {
            choir_stream_graph_launch(g_gs, gr);
            pdl_chain(M, dd, dq, dg, du, dh, dgam, dw, dt, I);
        }
        choir_op_download(g_gs, want, dd, (size_t)n * 4);
        snprintf(name, sizeof name, "gemv pdl %d, %s: 3 graph replays = 3 direct chains without it", mode, kind);
        if (streams_ok(name)) cmp(name, dgx, want, n, 0);
        choir_graph_free(gr);
    }
    if (q8) {
        /* One product in two pieces of x, right after x is written. */
        const int64_t N = 263, K = 13312;
        choir_weight hw = make_weight(CHOIR_WEIGHT_QUANT, N, K, 8, 64, CHOIR_DTYPE_BF16), dl;
        choir_backend_weight(ws, &hw, &dl);
        float *a = hvec(K, -1, 1), *b = hvec(K, -1, 1), *y0 = hvec(N, -1, 1);
        float *da = dvec(a, K), *db = dvec(b, K), *dxs = dzero(K), *dyl = dzero(N), *dtl = dzero(N);
        float *got[3];
        for (int mode = 0; mode <= 2; mode++) {
            choir_cuda_pdl_set(mode);
            choir_op_upload(g_gs, dyl, y0, (size_t)N * 4);
            choir_op_zero(g_gs, dxs, (size_t)K * 4);
            choir_op_add(g_gs, da, db, dxs, K);
            choir_op_linear_ex(g_gs, dxs, 1, &dl, NULL, dyl, CHOIR_LINEAR_ACCUMULATE, dtl);
            got[mode] = hmem((size_t)N * 4);
            choir_op_download(g_gs, got[mode], dyl, (size_t)N * 4);
        }
        for (int mode = 1; mode <= 2; mode++) {
            snprintf(name, sizeof name, "gemv pdl %d = off: 8-bit 263 x 13312, x in two pieces, after its add", mode);
            if (streams_ok(name)) expect(name, !memcmp(got[mode], got[0], (size_t)N * 4));
        }
    }
    choir_backend_weights_free(ws);
    case_end();
}
static void check_gemv_pdl(void) {
    const int was = choir_cuda_pdl();
    check_gemv_pdl_kind(false, 1);
    check_gemv_pdl_kind(true, 1);
    check_gemv_pdl_kind(false, 8);
    choir_cuda_pdl_set(was);
}

/* The 8-bit GEMV of cuda_linear_q8.cu (choir_cuda_q8_gemv shapes 1, 2, 3:
 * rows a warp and steps a batch; 4, 5, 6: q8_stream's resident warps with
 * 4 or 8 chunks in flight; 7: shape 4 within 64 registers at one row of x,
 * in pieces of 48 KB; 8: 7 with x staged in one pass) against the CPU and against the old kernel
 * (shape 0). Both dequantize exactly and sum in f32, in different orders:
 * the f32 bound against either. Shapes 4-8 also against shape 1: the same
 * sums in the same order where x is staged in one piece (bound 1e-6, 0
 * expected), else within the f32 bound. K = 320 leaves lanes idle (20
 * chunks of 16 codes for 32 lanes), 1152 ends mid-step (two steps of 512
 * codes and 128 more), 4608 at 8 rows is x too long for the shared memory
 * (read from global memory by shapes 1-3, two pieces for 4-6), 18944 the 7B
 * MLP's down projection (M = 8: four to eight pieces); 263 rows end
 * mid-pair and mid-block, 20011 give every resident warp of shapes 4-6
 * several rows; M = 1, 2, 8; plain, accumulating (linear_ex), then the RMS
 * norm fused before three layers (263/130/131 rows, a bias on the first,
 * the second into an f32 cache and the third into a bf16 one by slot and
 * position), and scales in f16 (groups of 32) and f32 (groups of 128). */
#define Q8_CHECK_SHAPES 9
static void check_q8_gemv(void) {
    static const int64_t Ks[] = {320, 1152, 4608, 18944, 1152}, Ms[] = {1, 2, 8};
    static const struct {
        int group;
        choir_dtype sb;
        const char *what;
    } fmt[] = {{64, CHOIR_DTYPE_BF16, "g64 bf16"}, {32, CHOIR_DTYPE_F16, "g32 f16"}, {128, CHOIR_DTYPE_F32, "g128 f32"}};
    const int prev = choir_cuda_q8_gemv_shape(); /* CHOIR_Q8_GEMV's, for the cases after */
    char name[160];
    for (size_t fi = 0; fi < 3; fi++)
        for (size_t ki = 0; ki < 5; ki++)
            for (size_t mi = 0; mi < 3; mi++) {
                if (fi && (ki != 1 || mi == 2)) continue; /* the other scales: K = 1152, M = 1, 2 */
                if (ki == 3 && mi == 1) continue;         /* K = 18944: M = 1, 8 */
                case_begin();
                /* ki = 4: K = 1152 again over 20011 rows */
                int64_t K = Ks[ki], M = Ms[mi], N = ki == 4 ? 20011 : 263;
                choir_err err = {0};
                choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
                choir_weight hw = make_weight(CHOIR_WEIGHT_QUANT, N, K, 8, fmt[fi].group, fmt[fi].sb), dw;
                choir_backend_weight(ws, &hw, &dw);
                float *bias = hvec(N, -1, 1), *x = hvec(M * K, -1, 1), *y0 = hvec(M * N, -1, 1);
                const float *dbias = choir_backend_vec(ws, bias, N);
                float *ref = hmem((size_t)(M * N) * 4), *refa = hmem((size_t)(M * N) * 4);
                choir_op_linear(g_cs, x, M, &hw, bias, ref);
                for (int64_t i = 0; i < M * N; i++) refa[i] = y0[i] + ref[i];
                float *dx = dvec(x, M * K), *dt = dzero(M * N), *old = hmem((size_t)(M * N) * 4);
                float *dy = dzero(M * N);
                choir_cuda_q8_gemv(0);
                choir_op_linear(g_gs, dx, M, &dw, dbias, dy);
                choir_op_download(g_gs, old, dy, (size_t)(M * N) * 4);
                float *one = hmem((size_t)(M * N) * 4), *onea = hmem((size_t)(M * N) * 4);
                /* x and its 16-column sums in one piece of shared memory
                 * (q8s_piece; shapes 7 and 8 at one row: q8s_piece_for). */
                const double staged = (double)M * (double)((K + 511) / 512 * 512) * 4.25;
                for (int v = 1; v < Q8_CHECK_SHAPES; v++) {
                    const bool whole = staged <= ((v == 7 || v == 8) && M == 1 ? 48.0 : 136.0) * 1024;
                    float *dyv = dzero(M * N), *dya = dvec(y0, M * N);
                    choir_cuda_q8_gemv(v);
                    choir_op_linear(g_gs, dx, M, &dw, dbias, dyv);
                    choir_op_linear_ex(g_gs, dx, M, &dw, dbias, dya, CHOIR_LINEAR_ACCUMULATE, dt);
                    choir_cuda_q8_gemv(0);
                    if (v == 1) {
                        choir_op_download(g_gs, one, dyv, (size_t)(M * N) * 4);
                        choir_op_download(g_gs, onea, dya, (size_t)(M * N) * 4);
                    } else if (v >= 4) {
                        snprintf(name, sizeof name, "q8 gemv shape %d = shape 1 (%s): %s %lld x %lld M=%lld", v,
                                 whole ? "one piece" : "pieces", fmt[fi].what, (long long)N, (long long)K,
                                 (long long)M);
                        if (streams_ok(name)) cmp(name, dyv, one, M * N, whole ? 1e-6 : TOL_F32);
                        snprintf(name, sizeof name, "q8 gemv shape %d = shape 1 (%s): %s %lld x %lld M=%lld accumulating",
                                 v, whole ? "one piece" : "pieces", fmt[fi].what, (long long)N, (long long)K,
                                 (long long)M);
                        if (streams_ok(name)) cmp(name, dya, onea, M * N, whole ? 1e-6 : TOL_F32);
                    }
                    snprintf(name, sizeof name, "q8 gemv shape %d: %s %lld x %lld M=%lld", v, fmt[fi].what,
                             (long long)N, (long long)K, (long long)M);
                    if (streams_ok(name)) cmp(name, dyv, ref, M * N, TOL_F32);
                    snprintf(name, sizeof name, "q8 gemv shape %d = old kernel: %s %lld x %lld M=%lld", v,
                             fmt[fi].what, (long long)N, (long long)K, (long long)M);
                    if (streams_ok(name)) cmp(name, dyv, old, M * N, TOL_F32);
                    snprintf(name, sizeof name, "q8 gemv shape %d: %s %lld x %lld M=%lld accumulating", v,
                             fmt[fi].what, (long long)N, (long long)K, (long long)M);
                    if (streams_ok(name)) cmp(name, dya, refa, M * N, TOL_F32);
                }
                choir_backend_weights_free(ws);
                case_end();
            }
    enum { SLOTS = 3, POS = 10 };
    const int64_t K = 1152, rows[3] = {263, 130, 131};
    for (size_t mi = 0; mi < 2; mi++) {
        case_begin();
        int64_t M = mi ? 3 : 1;
        choir_err err = {0};
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight hw[3], dw[3];
        for (int i = 0; i < 3; i++) {
            hw[i] = make_weight(CHOIR_WEIGHT_QUANT, rows[i], K, 8, 64, CHOIR_DTYPE_BF16);
            choir_backend_weight(ws, &hw[i], &dw[i]);
        }
        float *bias = hvec(rows[0], -1, 1), *x = hvec(M * K, -3, 5), *g = hvec(K, 0.5f, 1.5f);
        const float *dbias = choir_backend_vec(ws, bias, rows[0]);
        int32_t slot[8], pos[8];
        for (int m = 0; m < 8; m++) slot[m] = (2 * m + 1) % SLOTS, pos[m] = m + 1;
        float *kc = hmem((size_t)(SLOTS * POS * rows[1]) * 4), *h = hmem((size_t)(M * K) * 4), *y[3];
        uint16_t *vc = hmem((size_t)(SLOTS * POS * rows[2]) * 2);
        memset(kc, 0, (size_t)(SLOTS * POS * rows[1]) * 4);
        memset(vc, 0, (size_t)(SLOTS * POS * rows[2]) * 2);
        for (int i = 0; i < 3; i++) y[i] = hmem((size_t)(M * rows[i]) * 4);
        choir_norm_linear hp = {.ln_g = g, .eps = 1e-6f, .rms = true, .n = 3, .W = {&hw[0], &hw[1], &hw[2]},
                                .bias = {bias, NULL, NULL}, .y = {y[0], y[1], y[2]}};
        hp.store[1] = (choir_rows_out){.dst = kc, .dtype = CHOIR_DTYPE_F32, .slot_stride = POS * rows[1],
                                       .ld = rows[1], .slot = slot, .pos = pos};
        hp.store[2] = (choir_rows_out){.dst = vc, .dtype = CHOIR_DTYPE_BF16, .slot_stride = POS * rows[2],
                                       .ld = rows[2], .slot = slot, .pos = pos};
        choir_op_norm_linear(g_cs, x, M, &hp, h);
        float *dx = dvec(x, M * K), *dg = dvec(g, K), *dh = dzero(M * K);
        int32_t *dslot = dput(slot, sizeof slot), *dpos = dput(pos, sizeof pos);
        for (int v = 1; v < Q8_CHECK_SHAPES; v++) {
            float *dy[3], *dkc = dzero(SLOTS * POS * rows[1]);
            uint16_t *dvc = dput(NULL, (size_t)(SLOTS * POS * rows[2]) * 2);
            if (dvc) choir_op_zero(g_gs, dvc, (size_t)(SLOTS * POS * rows[2]) * 2);
            for (int i = 0; i < 3; i++) dy[i] = dzero(M * rows[i]);
            choir_norm_linear dp = hp;
            dp.ln_g = dg;
            for (int i = 0; i < 3; i++) dp.W[i] = &dw[i], dp.y[i] = dy[i];
            dp.bias[0] = dbias;
            dp.store[1].dst = dkc, dp.store[2].dst = dvc;
            dp.store[1].slot = dp.store[2].slot = dslot;
            dp.store[1].pos = dp.store[2].pos = dpos;
            choir_cuda_q8_gemv(v);
            choir_op_norm_linear(g_gs, dx, M, &dp, dh);
            choir_cuda_q8_gemv(0);
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "q8 gemv shape %d: RMS norm_linear M=%lld layer %d of 263/130/131", v,
                         (long long)M, i);
                if (streams_ok(name)) cmp(name, dy[i], y[i], M * rows[i], TOL_F32);
            }
            snprintf(name, sizeof name, "q8 gemv shape %d: RMS norm_linear M=%lld keys into an f32 cache", v,
                     (long long)M);
            if (streams_ok(name)) cmp(name, dkc, kc, SLOTS * POS * rows[1], TOL_F32);
            snprintf(name, sizeof name, "q8 gemv shape %d: RMS norm_linear M=%lld values into a bf16 cache", v,
                     (long long)M);
            if (streams_ok(name)) cmp_bf16(name, dvc, vc, SLOTS * POS * rows[2], 4e-3);
        }
        choir_backend_weights_free(ws);
        case_end();
    }
    choir_cuda_q8_gemv(prev);
}

/* The mma GEMV (cuda_gemv_mma.cu, CHOIR_GEMV_MMA, switched on here with
 * choir_cuda_gemv_mma_set) over bf16 and 8-bit weights (groups of 64 with
 * bf16 scales, 128 with f32), 1, 2, 8, 9 and 32 rows of x, 263 rows of W
 * (odd, mid-block), K = 3584 (VibeVoice 7B's width), 640 and, for bf16, 72
 * (one step a warp at most, ending mid-step): every entry point that takes
 * it (linear, linear_ex accumulating and with GELU, an RMS norm_linear of
 * three stacked layers with a bias on the first and the last two stored
 * into f32 and bf16 caches by slot and position, a layer-norm norm_linear
 * with GELU, the gated MLP of 512 inner rows at K = 640) against the CPU within GEMV_MMA_TOL (x carried
 * as two bf16 halves, about 2^-16 a value; the sums in f32 on the tensor
 * cores) and against the same call with the switch off: within
 * GEMV_MMA_TOL where that path sums x in f32 (the GEMVs: bf16 at one row,
 * 8-bit up to 8 rows), within TOL_BF16 where it rounds x to bf16 (the
 * skinny kernel and cuBLAS). Then the batch invariance: linear and the
 * three-layer norm_linear over the first 1, 8 and 32 rows of the same x give
 * each row the same floats bit for bit (bound 0). */
#define GEMV_MMA_TOL 2e-5
static void check_gemv_mma(void) {
    static const int64_t Ks[] = {3584, 640, 72}, Ms[] = {1, 2, 8, 9, 32};
    static const struct {
        choir_weight_kind kind;
        int group;
        choir_dtype sb;
        const char *what;
    } fmt[] = {{CHOIR_WEIGHT_BF16, 0, 0, "bf16"},
               {CHOIR_WEIGHT_QUANT, 64, CHOIR_DTYPE_BF16, "q8 g64 bf16"},
               {CHOIR_WEIGHT_QUANT, 128, CHOIR_DTYPE_F32, "q8 g128 f32"}};
    enum { SLOTS = 3, POS = 40 };
    const int64_t N = 263, rows[3] = {263, 130, 131}, I = 512;
    /* The fake CUDA of tests/cuda/fake has no such kernel (its products are
     * the CPU's, whose floats may depend on M): nothing to check there. */
    choir_cuda_gemv_mma_set(1);
    const bool have = choir_cuda_gemv_mma_on();
    choir_cuda_gemv_mma_set(-1);
    if (!have) {
        g_skips++;
        printf("SKIP gemv mma: not in this build\n");
        return;
    }
    char name[160];
    for (size_t fi = 0; fi < 3; fi++)
        for (size_t ki = 0; ki < 3; ki++)
            for (size_t mi = 0; mi < 5; mi++) {
                const int64_t K = Ks[ki], M = Ms[mi];
                const bool q = fmt[fi].kind == CHOIR_WEIGHT_QUANT;
                if (q && K % 128) continue;
                if (fi == 2 && K != 640) continue; /* f32 scales: one width */
                case_begin();
                choir_err err = {0};
                choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
                choir_weight hw[3], dw[3];
                for (int i = 0; i < 3; i++) {
                    hw[i] = make_weight(fmt[fi].kind, rows[i], K, 8, fmt[fi].group, fmt[fi].sb);
                    choir_backend_weight(ws, &hw[i], &dw[i]);
                }
                float *bias = hvec(N, -1, 1), *x = hvec(M * K, -3, 5), *y0 = hvec(M * N, -1, 1);
                float *g = hvec(K, 0.5f, 1.5f), *be = hvec(K, -0.5f, 0.5f);
                const float *dbias = choir_backend_vec(ws, bias, N);
                /* The CPU: plain, accumulating, GELU. */
                float *ref = hmem((size_t)(M * N) * 4), *refa = hmem((size_t)(M * N) * 4);
                float *refg = hmem((size_t)(M * N) * 4), *ct = hmem((size_t)(M * N) * 4);
                choir_op_linear(g_cs, x, M, &hw[0], bias, ref);
                memcpy(refa, y0, (size_t)(M * N) * 4);
                choir_op_linear_ex(g_cs, x, M, &hw[0], bias, refa, CHOIR_LINEAR_ACCUMULATE, ct);
                choir_op_linear_ex(g_cs, x, M, &hw[0], bias, refg, CHOIR_LINEAR_GELU, NULL);
                /* The CPU's RMS norm_linear of three layers with two stores, and LN + GELU. */
                int32_t slot[32], pos[32];
                for (int m = 0; m < 32; m++) slot[m] = (2 * m + 1) % SLOTS, pos[m] = m + 3;
                float *kc = hmem((size_t)(SLOTS * POS * rows[1]) * 4), *h = hmem((size_t)(M * K) * 4), *yn[3];
                uint16_t *vc = hmem((size_t)(SLOTS * POS * rows[2]) * 2);
                memset(kc, 0, (size_t)(SLOTS * POS * rows[1]) * 4);
                memset(vc, 0, (size_t)(SLOTS * POS * rows[2]) * 2);
                for (int i = 0; i < 3; i++) yn[i] = hmem((size_t)(M * rows[i]) * 4);
                choir_norm_linear hp = {.ln_g = g, .eps = 1e-6f, .rms = true, .n = 3, .W = {&hw[0], &hw[1], &hw[2]},
                                        .bias = {bias, NULL, NULL}, .y = {yn[0], yn[1], yn[2]}};
                hp.store[1] = (choir_rows_out){.dst = kc, .dtype = CHOIR_DTYPE_F32, .slot_stride = POS * rows[1],
                                               .ld = rows[1], .slot = slot, .pos = pos};
                hp.store[2] = (choir_rows_out){.dst = vc, .dtype = CHOIR_DTYPE_BF16, .slot_stride = POS * rows[2],
                                               .ld = rows[2], .slot = slot, .pos = pos};
                choir_op_norm_linear(g_cs, x, M, &hp, h);
                float *yl = hmem((size_t)(M * N) * 4);
                choir_norm_linear hl = {.ln_g = g, .ln_b = be, .eps = 1e-5f, .n = 1, .W = {&hw[0]}, .bias = {bias},
                                        .y = {yl}, .flags = CHOIR_LINEAR_GELU};
                choir_op_norm_linear(g_cs, x, M, &hl, h);
                float *dx = dvec(x, M * K), *dg = dvec(g, K), *dbe = dvec(be, K), *dh = dzero(M * K);
                float *dt = dzero(M * N);
                int32_t *dslot = dput(slot, sizeof slot), *dpos = dput(pos, sizeof pos);
                /* The device twice: switch off (md 0), then on (md 1). */
                float *dy[2], *dya[2], *dyg[2], *dyn[2][3], *dkc[2], *dyl[2];
                uint16_t *dvc[2];
                for (int md = 0; md < 2; md++) {
                    choir_cuda_gemv_mma_set(md);
                    dy[md] = dzero(M * N), dya[md] = dvec(y0, M * N), dyg[md] = dzero(M * N), dyl[md] = dzero(M * N);
                    choir_op_linear(g_gs, dx, M, &dw[0], dbias, dy[md]);
                    choir_op_linear_ex(g_gs, dx, M, &dw[0], dbias, dya[md], CHOIR_LINEAR_ACCUMULATE, dt);
                    choir_op_linear_ex(g_gs, dx, M, &dw[0], dbias, dyg[md], CHOIR_LINEAR_GELU, dt);
                    dkc[md] = dzero(SLOTS * POS * rows[1]);
                    dvc[md] = dput(NULL, (size_t)(SLOTS * POS * rows[2]) * 2);
                    if (dvc[md]) choir_op_zero(g_gs, dvc[md], (size_t)(SLOTS * POS * rows[2]) * 2);
                    for (int i = 0; i < 3; i++) dyn[md][i] = dzero(M * rows[i]);
                    choir_norm_linear dp = hp;
                    dp.ln_g = dg;
                    for (int i = 0; i < 3; i++) dp.W[i] = &dw[i], dp.y[i] = dyn[md][i];
                    dp.bias[0] = dbias;
                    dp.store[1].dst = dkc[md], dp.store[2].dst = dvc[md];
                    dp.store[1].slot = dp.store[2].slot = dslot;
                    dp.store[1].pos = dp.store[2].pos = dpos;
                    choir_op_norm_linear(g_gs, dx, M, &dp, dh);
                    choir_norm_linear dl = hl;
                    dl.ln_g = dg, dl.ln_b = dbe, dl.W[0] = &dw[0], dl.bias[0] = dbias, dl.y[0] = dyl[md];
                    choir_op_norm_linear(g_gs, dx, M, &dl, dh);
                }
                choir_cuda_gemv_mma_set(-1);
                /* The switch-off path sums x in f32 in the GEMVs, rounds it to bf16 in the skinny kernel and cuBLAS. */
                const choir_cuda_weight shape = {.kind = fmt[fi].kind, .rows = N, .cols = K};
                const bool f32_off = q ? M <= 8 : choir_cuda_linear_path_for(M, &shape) == CHOIR_CUDA_LINEAR_GEMV;
                const double tol_off = f32_off ? GEMV_MMA_TOL : TOL_BF16;
                const char *what = fmt[fi].what;
#define MMA_CASE(label, dev, want, count, tol)                                                                  \
    do {                                                                                                        \
        snprintf(name, sizeof name, "gemv mma %s: %s %lld x %lld M=%lld", label, what, (long long)N, (long long)K, \
                 (long long)M);                                                                                 \
        if (streams_ok(name)) cmp(name, dev, want, count, tol);                                                 \
    } while (0)
                MMA_CASE("linear vs cpu", dy[1], ref, M * N, GEMV_MMA_TOL);
                MMA_CASE("linear_ex accumulating vs cpu", dya[1], refa, M * N, GEMV_MMA_TOL);
                MMA_CASE("linear_ex gelu vs cpu", dyg[1], refg, M * N, GEMV_MMA_TOL);
                for (int i = 0; i < 3; i++) {
                    char label[64];
                    snprintf(label, sizeof label, "RMS norm_linear layer %d of 263/130/131 vs cpu", i);
                    MMA_CASE(label, dyn[1][i], yn[i], M * rows[i], GEMV_MMA_TOL);
                }
                MMA_CASE("RMS norm_linear keys into an f32 cache vs cpu", dkc[1], kc, SLOTS * POS * rows[1], GEMV_MMA_TOL);
                snprintf(name, sizeof name, "gemv mma RMS norm_linear values into a bf16 cache vs cpu: %s %lld x %lld M=%lld",
                         what, (long long)N, (long long)K, (long long)M);
                if (streams_ok(name)) cmp_bf16(name, dvc[1], vc, SLOTS * POS * rows[2], 4e-3);
                MMA_CASE("LN norm_linear gelu vs cpu", dyl[1], yl, M * N, GEMV_MMA_TOL);
                float *off = download(dy[0], M * N), *offa = download(dya[0], M * N);
                float *offg = download(dyg[0], M * N), *offn = download(dyn[0][0], M * N);
                MMA_CASE("linear vs switch off", dy[1], off, M * N, tol_off);
                MMA_CASE("linear_ex accumulating vs switch off", dya[1], offa, M * N, tol_off);
                MMA_CASE("linear_ex gelu vs switch off", dyg[1], offg, M * N, tol_off);
                MMA_CASE("RMS norm_linear layer 0 vs switch off", dyn[1][0], offn, M * N, tol_off);
                /* The gated MLP (gate and up stacked into one launch, then the down product accumulating). */
                if (ki == 1) {
                    choir_weight hg = make_weight(fmt[fi].kind, I, K, 8, fmt[fi].group, fmt[fi].sb);
                    choir_weight hu = make_weight(fmt[fi].kind, I, K, 8, fmt[fi].group, fmt[fi].sb);
                    choir_weight hd = make_weight(fmt[fi].kind, K, I, 8, fmt[fi].group, fmt[fi].sb);
                    choir_weight dgw, duw, ddw;
                    choir_backend_weight(ws, &hg, &dgw);
                    choir_backend_weight(ws, &hu, &duw);
                    choir_backend_weight(ws, &hd, &ddw);
                    float *cx = hdup(x, M * K), *cgate = hmem((size_t)(M * I) * 4), *cup = hmem((size_t)(M * I) * 4);
                    float *ch = hmem((size_t)(M * K) * 4), *ctmp = hmem((size_t)(M * K) * 4);
                    choir_op_gated_mlp(g_cs, cx, M, g, 1e-6f, &hg, &hu, &hd, cgate, cup, ch, ctmp);
                    float *gx = dvec(x, M * K), *gg = dzero(M * I), *gu = dzero(M * I), *gt = dzero(M * K);
                    choir_cuda_gemv_mma_set(1);
                    choir_op_gated_mlp(g_gs, gx, M, dg, 1e-6f, &dgw, &duw, &ddw, gg, gu, dh, gt);
                    choir_cuda_gemv_mma_set(-1);
                    MMA_CASE("gated_mlp vs cpu", gx, cx, M * K, GEMV_MMA_TOL);
                }
#undef MMA_CASE
                choir_backend_weights_free(ws);
                case_end();
            }
    /* Batch invariance: the first 1, 8 and 32 rows of the same x. */
    for (size_t fi = 0; fi < 2; fi++) {
        case_begin();
        const int64_t K = 3584;
        choir_err err = {0};
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight hw[3], dw[3];
        for (int i = 0; i < 3; i++) {
            hw[i] = make_weight(fmt[fi].kind, rows[i], K, 8, fmt[fi].group, fmt[fi].sb);
            choir_backend_weight(ws, &hw[i], &dw[i]);
        }
        float *x = hvec(32 * K, -3, 5), *g = hvec(K, 0.5f, 1.5f), *bias = hvec(N, -1, 1);
        const float *dbias = choir_backend_vec(ws, bias, N);
        float *dx = dvec(x, 32 * K), *dg = dvec(g, K), *dh = dzero(32 * K);
        static const int64_t Mi[3] = {1, 8, 32};
        float *yl[3], *yq[3];
        choir_cuda_gemv_mma_set(1);
        for (int k = 0; k < 3; k++) {
            yl[k] = dzero(Mi[k] * N), yq[k] = dzero(Mi[k] * (rows[0] + rows[1] + rows[2]));
            choir_op_linear(g_gs, dx, Mi[k], &dw[0], dbias, yl[k]);
            const int64_t M = Mi[k];
            choir_norm_linear dp = {.ln_g = dg, .eps = 1e-6f, .rms = true, .n = 3, .W = {&dw[0], &dw[1], &dw[2]},
                                    .bias = {dbias, NULL, NULL},
                                    .y = {yq[k], yq[k] + M * rows[0], yq[k] + M * (rows[0] + rows[1])}};
            choir_op_norm_linear(g_gs, dx, M, &dp, dh);
        }
        choir_cuda_gemv_mma_set(-1);
        float *l32 = download(yl[2], 32 * N), *q32 = download(yq[2], 32 * (rows[0] + rows[1] + rows[2]));
        for (int k = 0; k < 2; k++) {
            const int64_t M = Mi[k];
            snprintf(name, sizeof name, "gemv mma batch invariance: %s linear rows 0..%lld of M=%lld = of M=32",
                     fmt[fi].what, (long long)M - 1, (long long)M);
            if (streams_ok(name)) cmp(name, yl[k], l32, M * N, 0);
            /* layer i of M rows at yq[k] + M * start_i; of 32 rows at q32 + 32 * start_i */
            float *sel = hmem((size_t)(M * (rows[0] + rows[1] + rows[2])) * 4);
            int64_t at = 0, st = 0;
            for (int i = 0; i < 3; i++) {
                memcpy(sel + at, q32 + 32 * st, (size_t)(M * rows[i]) * 4);
                at += M * rows[i], st += rows[i];
            }
            snprintf(name, sizeof name, "gemv mma batch invariance: %s RMS norm_linear rows 0..%lld of M=%lld = of M=32",
                     fmt[fi].what, (long long)M - 1, (long long)M);
            if (streams_ok(name)) cmp(name, yq[k], sel, M * (rows[0] + rows[1] + rows[2]), 0);
        }
        choir_backend_weights_free(ws);
        case_end();
    }
}

/* The cuBLAS path's 8-bit dequantize (choir_cuda_q8_dequant: 16-byte
 * loads and stores) against the old one (dequant_bf16) and the CPU: 300
 * and 37 rows of x over 8-bit weights of 263 x 1152 (groups of 64, bf16
 * scales), 100 x 4608 (128, f32) and 70 x 640 (32, f16). The same bf16
 * weights go to the same cuBLAS call, so the two paths agree exactly
 * (bound 1e-6, 0 expected); against the CPU the bf16 bound. */
static void check_q8_dequant(void) {
    static const struct {
        int64_t N, K, M;
        int group;
        choir_dtype sb;
        const char *what;
    } cs[] = {{263, 1152, 300, 64, CHOIR_DTYPE_BF16, "g64 bf16"},
              {100, 4608, 37, 128, CHOIR_DTYPE_F32, "g128 f32"},
              {70, 640, 300, 32, CHOIR_DTYPE_F16, "g32 f16"}};
    const bool prev = choir_cuda_q8_dequant_on();
    char name[128];
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        case_begin();
        int64_t N = cs[i].N, K = cs[i].K, M = cs[i].M;
        choir_err err = {0};
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight hw = make_weight(CHOIR_WEIGHT_QUANT, N, K, 8, cs[i].group, cs[i].sb), dw;
        choir_backend_weight(ws, &hw, &dw);
        float *bias = hvec(N, -1, 1), *x = hvec(M * K, -1, 1), *ref = hmem((size_t)(M * N) * 4);
        float *old = hmem((size_t)(M * N) * 4);
        const float *dbias = choir_backend_vec(ws, bias, N);
        choir_op_linear(g_cs, x, M, &hw, bias, ref);
        float *dx = dvec(x, M * K), *dy0 = dzero(M * N), *dy1 = dzero(M * N);
        choir_cuda_q8_dequant(0);
        choir_op_linear(g_gs, dx, M, &dw, dbias, dy0);
        choir_cuda_q8_dequant(1);
        choir_op_linear(g_gs, dx, M, &dw, dbias, dy1);
        choir_cuda_q8_dequant(0);
        choir_op_download(g_gs, old, dy0, (size_t)(M * N) * 4);
        snprintf(name, sizeof name, "q8 dequant on: %s %lld x %lld M=%lld", cs[i].what, (long long)N, (long long)K,
                 (long long)M);
        if (streams_ok(name)) cmp(name, dy1, ref, M * N, TOL_BF16);
        snprintf(name, sizeof name, "q8 dequant on = off: %s %lld x %lld M=%lld", cs[i].what, (long long)N,
                 (long long)K, (long long)M);
        if (streams_ok(name)) cmp(name, dy1, old, M * N, 1e-6);
        choir_backend_weights_free(ws);
        case_end();
    }
    choir_cuda_q8_dequant(prev);
}

static void check_linear(void) {
    int64_t N = 262, K = 768;
    case_begin();
    choir_cuda_linear_set_bias_epilogue(false); /* the bias as a pass */
    check_linear_case("f32", make_weight(CHOIR_WEIGHT_F32, N, K, 0, 0, 0), TOL_F32, g_gpu);
    check_linear_case("f16", make_weight(CHOIR_WEIGHT_F16, N, K, 0, 0, 0), TOL_F16, g_gpu);
    check_linear_case("bf16", make_weight(CHOIR_WEIGHT_BF16, N, K, 0, 0, 0), TOL_BF16, g_gpu);
    case_end();
    /* the bias in cublasLt's epilogue (the default; M = 40 takes it) */
    case_begin();
    choir_cuda_linear_set_bias_epilogue(true);
    check_linear_case("bf16, bias epilogue", make_weight(CHOIR_WEIGHT_BF16, N, K, 0, 0, 0), TOL_BF16, g_gpu);
    case_end();
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
        case_begin();
        char label[48];
        snprintf(label, sizeof label, "q%d g64 bf16-scales", bits[i]);
        check_linear_case(label, make_weight(CHOIR_WEIGHT_QUANT, N, K, bits[i], 64, CHOIR_DTYPE_BF16),
                          TOL_BF16, g_gpu);
        case_end();
    }
    case_begin();
    check_linear_case("q4 g32 f16-scales",
                      make_weight(CHOIR_WEIGHT_QUANT, N, K, 4, 32, CHOIR_DTYPE_F16), TOL_BF16,
                      g_gpu);
    check_linear_case("q8 g128 f32-scales",
                      make_weight(CHOIR_WEIGHT_QUANT, N, K, 8, 128, CHOIR_DTYPE_F32), TOL_BF16,
                      g_gpu);
    case_end();

    /* A backend opened with bf16 stores f32 matrices as bf16 (half the
     * bytes; against the CPU's f32: the bf16 bound), and keeps them f32 when
     * asked for exactly (the f32 bound). */
    case_begin();
    choir_err err = {0};
    choir_backend_cuda_opts o = {.device = 0, .bf16 = true};
    choir_backend *bb = choir_backend_cuda(&o, &err);
    expect("bf16 CUDA backend opens", bb != NULL);
    if (bb) {
        choir_weight w = make_weight(CHOIR_WEIGHT_F32, 130, 256, 0, 0, 0);
        choir_backend_weights *ws = choir_backend_weights_create(bb, &err);
        choir_weight dw, dx;
        choir_backend_weight(ws, &w, &dw);
        int64_t half = choir_backend_weights_bytes(ws);
        choir_backend_weight_exact(ws, &w, &dx);
        expect("bf16 backend: f32 matrix stored in half the bytes, exact one in full",
               choir_backend_weights_status(ws, &err) == 0 && dw.kind == CHOIR_WEIGHT_BF16 &&
                   half == 130 * 256 * 2 && dx.kind == CHOIR_WEIGHT_F32 &&
                   choir_backend_weights_bytes(ws) == half + 130 * 256 * 4);
        choir_stream *bs = choir_stream_create(bb, &err);
        choir_stream_reserve(bs, 4 << 20, 0, &err);
        for (int exact = 0; exact < 2; exact++)
            for (int64_t M = 2; M <= 40; M += 38) {
                float *x = hvec(M * 256, -1, 1), *ref = hmem((size_t)(M * 130) * 4);
                float *got = hmem((size_t)(M * 130) * 4);
                choir_op_linear(g_cs, x, M, &w, NULL, ref);
                float *d_x = choir_stream_floats(bs, M * 256, "x");
                float *d_y = choir_stream_floats(bs, M * 130, "y");
                choir_op_upload(bs, d_x, x, (size_t)(M * 256) * 4);
                choir_op_linear(bs, d_x, M, exact ? &dx : &dw, NULL, d_y);
                choir_op_download(bs, got, d_y, (size_t)(M * 130) * 4);
                char name[96];
                snprintf(name, sizeof name, "linear f32 on a bf16 backend%s M=%lld",
                         exact ? " (exact)" : "", (long long)M);
                if (choir_stream_status(bs, &err)) {
                    g_cases++, g_failures++;
                    printf("FAIL %-52s %s\n", name, err.msg);
                    choir_stream_clear(bs);
                } else
                    report(name, rel_l2(got, ref, M * 130), exact ? TOL_F32 : TOL_BF16);
                choir_stream_release(bs, 0);
            }
        choir_stream_free(bs);
        choir_backend_weights_free(ws);
        choir_backend_free(bb);
    }
    case_end();
}

static void check_gemm(void) {
    case_begin();
    int64_t M = 67, N = 45, K = 131;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
            float *A = hvec((ta ? K : M) * lda, -1, 1), *B = hvec((tb ? N : K) * ldb, -1, 1);
            float *C = hvec(M * ldc, -1, 1), *Cg = dvec(C, M * ldc);
            float *dA = dvec(A, (ta ? K : M) * lda), *dB = dvec(B, (tb ? N : K) * ldb);
            choir_op_gemm(g_cs, ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.3f, C, ldc);
            choir_op_gemm(g_gs, ta, tb, M, N, K, 0.7f, dA, lda, dB, ldb, 0.3f, Cg, ldc);
            char name[64];
            snprintf(name, sizeof name, "gemm %c%c alpha 0.7 beta 0.3, strided", ta ? 'T' : 'N',
                     tb ? 'T' : 'N');
            cmp(name, Cg, C, M * ldc, TOL_F32);
        }
    case_end();
}

/* --- attention --------------------------------------------------------------------------- */

/* One sequence: q inside wider rows (a fused QKV layout), optional mask,
 * causal, grouped-query heads. Below 32 query rows CUDA runs one block per
 * row, from 32 two batched products around a softmax. */
static void check_attention_case(int64_t Tq, int64_t Tk, int H, int Hkv, bool mask, bool causal) {
    case_begin();
    int64_t Dh = 64, d = H * Dh, dkv = (Hkv ? Hkv : H) * Dh, ldq = d + 16;
    float *q = hvec(Tq * ldq, -1, 1), *k = hvec(Tk * dkv, -1, 1), *v = hvec(Tk * dkv, -1, 1);
    float *m = NULL, *dm = NULL;
    if (mask) {
        m = hvec(Tq * Tk, -2, 0);
        for (int64_t i = 0; i < Tq; i++) m[i * Tk + (i * 7) % Tk] = -INFINITY;
        dm = dvec(m, Tq * Tk);
    }
    float *ref = hmem((size_t)(Tq * d) * 4);
    float *dq = dvec(q, Tq * ldq), *dk = dvec(k, Tk * dkv), *dv = dvec(v, Tk * dkv);
    float *dout = dzero(Tq * d);
    choir_attn a = {H, Hkv, Dh, 1.0f / sqrtf((float)Dh), causal, CHOIR_DTYPE_F32};
    choir_op_attention(g_cs, q, ldq, k, dkv, v, dkv, ref, d, Tq, Tk, &a, m);
    choir_op_attention(g_gs, dq, ldq, dk, dkv, dv, dkv, dout, d, Tq, Tk, &a, dm);
    char name[96];
    snprintf(name, sizeof name, "attention Tq=%lld Tk=%lld %d/%d heads%s%s", (long long)Tq,
             (long long)Tk, H, Hkv ? Hkv : H, mask ? " mask" : "", causal ? " causal" : "");
    cmp(name, dout, ref, Tq * d, TOL_F32);
    case_end();
}

/* B sequences against a pool of caches (slots 3, 0, 3, 1 with their own
 * lengths), then the same after appending a row to each with rows_scatter,
 * as a decoder step does. */
static void check_attention_slots_case(int64_t Tq, int H, int Hkv, bool causal) {
    case_begin();
    int64_t Dh = 64, d = H * Dh, dkv = (Hkv ? Hkv : H) * Dh, C = 448, slots = 5, B = 4;
    int64_t stride = C * dkv;
    float *pk = hvec(slots * stride, -1, 1), *pv = hvec(slots * stride, -1, 1);
    float *q = hvec(B * Tq * d, -1, 1), *ref = hmem((size_t)(B * Tq * d) * 4);
    int32_t meta[12] = {3, 0, 3, 1, 7, 448, 3, 100};
    for (int b = 0; b < 4; b++) meta[8 + b] = meta[4 + b] - 1;
    float *dpk = dvec(pk, slots * stride), *dpv = dvec(pv, slots * stride);
    float *dq = dvec(q, B * Tq * d), *dout = dzero(B * Tq * d);
    int32_t *dmeta = dput(meta, sizeof meta);
    choir_attn a = {H, Hkv, Dh, 1.0f / sqrtf((float)Dh), causal, CHOIR_DTYPE_F32};
    choir_op_attention_slots(g_cs, B, q, d, Tq * d, pk, dkv, pv, dkv, stride, meta, meta + 4, ref,
                             d, Tq * d, Tq, C, &a);
    choir_op_attention_slots(g_gs, B, dq, d, Tq * d, dpk, dkv, dpv, dkv, stride, dmeta, dmeta + 4,
                             dout, d, Tq * d, Tq, C, &a);
    char name[96];
    snprintf(name, sizeof name, "attention_slots B=4 Tq=%lld %d/%d heads%s", (long long)Tq, H,
             Hkv ? Hkv : H, causal ? " causal" : "");
    cmp(name, dout, ref, B * Tq * d, TOL_F32);
    /* Appending rows: sequences 0 and 2 share slot 3 at different positions. */
    float *rows = hvec(B * dkv, -1, 1), *drows = dvec(rows, B * dkv);
    choir_op_rows_scatter(g_cs, rows, B, dkv, pk, CHOIR_DTYPE_F32, stride, dkv, meta, meta + 8);
    choir_op_rows_scatter(g_gs, drows, B, dkv, dpk, CHOIR_DTYPE_F32, stride, dkv, dmeta, dmeta + 8);
    snprintf(name, sizeof name, "rows_scatter into slots (%d/%d heads)", H, Hkv ? Hkv : H);
    cmp(name, dpk, pk, slots * stride, 0);
    case_end();
}

/* Ragged attention (Kokoro's ALBERT over a batch, 12 heads of 64): pieces
 * of 1 to 130 rows stacked without padding, CUDA's gathered batched
 * products against the CPU's per-piece attention; transpose_lens with
 * zeros past each length (exact). */
static void check_attention_ragged_case(int n) {
    case_begin();
    int H = 12;
    int64_t Dh = 64, ld = H * Dh, R = 0, Tm = 0;
    int32_t meta[2 * 40];
    for (int b = 0; b < n; b++) {
        meta[n + b] = b == 0 ? 1 : 1 + (b * 47) % 130;
        meta[b] = (int32_t)R, R += meta[n + b], Tm = meta[n + b] > Tm ? meta[n + b] : Tm;
    }
    float *q = hvec(R * ld, -1, 1), *k = hvec(R * ld, -1, 1), *v = hvec(R * ld, -1, 1);
    float *ref = hmem((size_t)(R * ld) * 4);
    float *dq = dvec(q, R * ld), *dk = dvec(k, R * ld), *dv = dvec(v, R * ld), *dout = dzero(R * ld);
    int32_t *dmeta = dput(meta, 2 * (size_t)n * sizeof(int32_t));
    choir_attn a = {H, 0, Dh, 1.0f / sqrtf((float)Dh), false, CHOIR_DTYPE_F32};
    choir_op_attention_ragged(g_cs, n, q, k, v, ld, meta, meta + n, Tm, ref, &a);
    choir_op_attention_ragged(g_gs, n, dq, dk, dv, ld, dmeta, dmeta + n, Tm, dout, &a);
    char name[96];
    snprintf(name, sizeof name, "attention_ragged %d pieces of 1-%lld rows, 12 heads", n,
             (long long)Tm);
    cmp(name, dout, ref, R * ld, TOL_F32);
    int64_t C = 70;
    float *src = hvec(n * Tm * C, -1, 1), *dst = hmem((size_t)(n * Tm * C) * 4);
    float *dsrc = dvec(src, n * Tm * C), *ddst = dzero(n * Tm * C);
    choir_op_transpose_lens(g_cs, src, n, Tm, C, meta + n, dst);
    choir_op_transpose_lens(g_gs, dsrc, n, Tm, C, dmeta + n, ddst);
    snprintf(name, sizeof name, "transpose_lens %d items of [%lld, 70]", n, (long long)Tm);
    cmp(name, ddst, dst, n * Tm * C, 0);
    case_end();
}

/* Keys and values as bf16 (a cache in a bf16 model's dtype): host copies
 * rounded to bf16, the same bits on both backends; the CPU widens the rows
 * first, CUDA as it reads them (one block per query row at any Tq). */
static uint16_t *h16(const float *x, int64_t n) {
    uint16_t *y = hmem((size_t)n * 2);
    choir_f32_to_bf16_n(x, y, n);
    return y;
}

static void check_attention_bf16_case(int64_t Tq, int64_t Tk, int H, int Hkv, bool causal) {
    case_begin();
    int64_t Dh = 64, d = H * Dh, dkv = (Hkv ? Hkv : H) * Dh;
    float *q = hvec(Tq * d, -1, 1), *k = hvec(Tk * dkv, -1, 1), *v = hvec(Tk * dkv, -1, 1);
    uint16_t *k16 = h16(k, Tk * dkv), *v16 = h16(v, Tk * dkv);
    void *dk = dput(k16, (size_t)(Tk * dkv) * 2), *dv = dput(v16, (size_t)(Tk * dkv) * 2);
    float *ref = hmem((size_t)(Tq * d) * 4), *dq = dvec(q, Tq * d), *dout = dzero(Tq * d);
    choir_attn a = {H, Hkv, Dh, 1.0f / sqrtf((float)Dh), causal, CHOIR_DTYPE_BF16};
    choir_op_attention(g_cs, q, d, k16, dkv, v16, dkv, ref, d, Tq, Tk, &a, NULL);
    choir_op_attention(g_gs, dq, d, dk, dkv, dv, dkv, dout, d, Tq, Tk, &a, NULL);
    char name[96];
    snprintf(name, sizeof name, "attention bf16 K/V Tq=%lld Tk=%lld %d/%d heads%s", (long long)Tq,
             (long long)Tk, H, Hkv ? Hkv : H, causal ? " causal" : "");
    cmp(name, dout, ref, Tq * d, TOL_F32);
    case_end();
}

/* A pool of bf16 caches: rows appended by rows_scatter (rounded to bf16, the
 * same bits as the CPU), then a step's attention over the slots; and
 * convert's rounding. */
static void check_attention_slots_bf16(void) {
    case_begin();
    int64_t H = 6, Dh = 64, d = H * Dh, C = 448, slots = 5, B = 4, stride = C * d;
    float *pk = hvec(slots * stride, -1, 1), *pv = hvec(slots * stride, -1, 1);
    uint16_t *k16 = h16(pk, slots * stride), *v16 = h16(pv, slots * stride);
    uint16_t *dk = dput(k16, (size_t)(slots * stride) * 2);
    uint16_t *dv = dput(v16, (size_t)(slots * stride) * 2);
    int32_t meta[12] = {3, 0, 3, 1, 7, 448, 3, 100};
    for (int b = 0; b < 4; b++) meta[8 + b] = meta[4 + b] - 1;
    int32_t *dmeta = dput(meta, sizeof meta);
    float *rows = hvec(B * d, -1, 1), *drows = dvec(rows, B * d);
    choir_op_rows_scatter(g_cs, rows, B, d, k16, CHOIR_DTYPE_BF16, stride, d, meta, meta + 8);
    choir_op_rows_scatter(g_gs, drows, B, d, dk, CHOIR_DTYPE_BF16, stride, d, dmeta, dmeta + 8);
    uint16_t *got16 = hmem((size_t)(slots * stride) * 2);
    choir_op_download(g_gs, got16, dk, (size_t)(slots * stride) * 2);
    if (streams_ok("rows_scatter into bf16 slots"))
        expect("rows_scatter into bf16 slots: the CPU's bits",
               memcmp(got16, k16, (size_t)(slots * stride) * 2) == 0);
    float *q = hvec(B * d, -1, 1), *dq = dvec(q, B * d);
    float *ref = hmem((size_t)(B * d) * 4), *dout = dzero(B * d);
    choir_attn a = {(int)H, 0, Dh, 1.0f / sqrtf((float)Dh), false, CHOIR_DTYPE_BF16};
    choir_op_attention_slots(g_cs, B, q, d, d, k16, d, v16, d, stride, meta, meta + 4, ref, d, d,
                             1, C, &a);
    choir_op_attention_slots(g_gs, B, dq, d, d, dk, d, dv, d, stride, dmeta, dmeta + 4, dout, d, d,
                             1, C, &a);
    cmp("attention_slots bf16 K/V B=4 Tq=1", dout, ref, B * d, TOL_F32);
    uint16_t *c16 = hmem((size_t)(B * d) * 2), *gc = hmem((size_t)(B * d) * 2);
    void *dc = dzero(B * d / 2 + 1);
    choir_op_convert(g_cs, rows, c16, CHOIR_DTYPE_BF16, B * d);
    choir_op_convert(g_gs, drows, dc, CHOIR_DTYPE_BF16, B * d);
    choir_op_download(g_gs, gc, dc, (size_t)(B * d) * 2);
    if (streams_ok("convert f32 -> bf16"))
        expect("convert f32 -> bf16: the CPU's bits", memcmp(gc, c16, (size_t)(B * d) * 2) == 0);
    case_end();
}

/* Everything bf16 (the encoder's fused attention): B sequences with row
 * and batch strides wider than the rows; the output poisoned with NaN first,
 * so an unwritten element fails. The CPU widens, runs the f32 kernel and
 * rounds; the device also rounds the probabilities: the bf16 bound. */
static void check_attention_all_bf16_case(int64_t B, int64_t Tq, int64_t Tk, int H, int Hkv,
                                          bool causal, int64_t pad, float qamp) {
    case_begin();
    int64_t Dh = 64, d = H * Dh, dkv = (Hkv ? Hkv : H) * Dh;
    int64_t ldq = d + pad, ldk = dkv + pad, qb = Tq * ldq + pad, kb = Tk * ldk + pad;
    uint16_t *q16 = h16(hvec(B * qb, -qamp, qamp), B * qb);
    uint16_t *k16 = h16(hvec(B * kb, -1, 1), B * kb), *v16 = h16(hvec(B * kb, -1, 1), B * kb);
    uint16_t *ref = hmem((size_t)(B * qb) * 2), *got = hmem((size_t)(B * qb) * 2);
    uint16_t *poison = hmem((size_t)(B * qb) * 2);
    memset(ref, 0xFF, (size_t)(B * qb) * 2);
    memset(poison, 0xFF, (size_t)(B * qb) * 2);
    uint16_t *dq = dput(q16, (size_t)(B * qb) * 2), *dk = dput(k16, (size_t)(B * kb) * 2);
    uint16_t *dv = dput(v16, (size_t)(B * kb) * 2), *dout = dput(ref, (size_t)(B * qb) * 2);
    choir_attn a = {H, Hkv, Dh, 1.0f / sqrtf((float)Dh), causal, CHOIR_DTYPE_BF16};
    choir_op_attention_bf16(g_cs, B, q16, ldq, qb, k16, ldk, v16, ldk, kb, ref, ldq, qb, Tq, Tk,
                            &a);
    /* Every kernel of the device's (choir_cuda_attention_bf16_set_kernel), the
     * default last (the host emulation has one). */
    int nk = choir_cuda_attention_bf16_kernels();
    for (int kern = nk > 1 ? 1 : nk + 1; kern <= nk + 1; kern++) {
        choir_cuda_attention_bf16_set_kernel(kern <= nk ? kern : 0);
        choir_op_upload(g_gs, dout, poison, (size_t)(B * qb) * 2);
        choir_op_attention_bf16(g_gs, B, dq, ldq, qb, dk, ldk, dv, ldk, kb, dout, ldq, qb, Tq,
                                Tk, &a);
        char name[112], kname[16];
        snprintf(kname, sizeof kname, kern <= nk ? "%d" : "default", kern);
        snprintf(name, sizeof name,
                 "attention all-bf16 B=%lld Tq=%lld Tk=%lld %d/%d heads%s q x%g, kernel %s",
                 (long long)B, (long long)Tq, (long long)Tk, H, Hkv ? Hkv : H,
                 causal ? " causal" : "", (double)qamp, kname);
        choir_op_download(g_gs, got, dout, (size_t)(B * qb) * 2);
        if (streams_ok(name)) {
            /* Compare the rows' values only (the padding keeps its poison on both). */
            int64_t n = B * Tq * d;
            float *gf = hmem((size_t)n * 4), *rf = hmem((size_t)n * 4);
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < Tq; i++) {
                    choir_bf16_to_f32_n(got + b * qb + i * ldq, gf + (b * Tq + i) * d, d);
                    choir_bf16_to_f32_n(ref + b * qb + i * ldq, rf + (b * Tq + i) * d, d);
                }
            report(name, rel_l2(gf, rf, n), TOL_BF16);
        }
    }
    case_end();
}

/* 1 on tests/cuda/fake's host emulation of the device (by its name). */
static bool on_host_emulation(void) {
    choir_cuda_props pr;
    return choir_cuda_device_props(0, &pr, NULL) == 0 && strstr(pr.name, "host emulation") != NULL;
}

static void check_attention(void) {
    /* Whisper's encoder window (1500 x 1500) on a GPU; on the host
     * emulation (one attention in double, under ASan, 30 s for these three)
     * 300 x 300, the same code paths there. */
    const int64_t W = on_host_emulation() ? 300 : 1500;
    check_attention_case(1, 7, 6, 0, false, false);
    check_attention_case(5, 448, 6, 0, false, true);
    check_attention_case(12, 40, 6, 0, true, false);
    check_attention_case(31, 200, 6, 2, false, true);
    check_attention_case(40, 40, 6, 0, false, true);
    check_attention_case(64, 300, 6, 0, true, false);
    check_attention_case(100, 100, 6, 3, true, true);
    check_attention_case(W, W, 6, 0, false, false);
    check_attention_slots_case(1, 6, 0, false);
    check_attention_ragged_case(1);
    check_attention_ragged_case(5);
    check_attention_ragged_case(33);
    check_attention_slots_case(1, 6, 2, false);
    check_attention_slots_case(3, 6, 0, true);
    check_attention_bf16_case(1, 1500, 6, 0, false);
    check_attention_bf16_case(5, 229, 6, 0, true);
    check_attention_bf16_case(40, 1500, 6, 2, false);
    check_attention_slots_bf16();
    check_attention_all_bf16_case(1, W, W, 20, 0, false, 0, 1.0f);
    check_attention_all_bf16_case(2, W, W, 6, 0, false, 8, 1.0f);
    check_attention_all_bf16_case(3, 130, 65, 6, 0, false, 8, 1.0f);
    check_attention_all_bf16_case(1, 37, 100, 4, 2, true, 0, 1.0f);
    check_attention_all_bf16_case(2, 200, 129, 6, 3, true, 16, 1.0f);
    /* Peaked scores: rows whose maximum grows by more than 2^8 over the tiles
     * (the second kernel's rescale), and by less (its stale reference). */
    check_attention_all_bf16_case(2, 300, 1500, 4, 0, false, 0, 32.0f);
    check_attention_all_bf16_case(1, 200, 200, 4, 2, true, 8, 32.0f);
    check_attention_all_bf16_case(1, 1, 1, 2, 0, false, 0, 1.0f);
}

static void check_gather(void) {
    case_begin();
    int64_t V = 500, d = 96;
    int32_t ids[7] = {0, 499, 7, 7, 250, 1, 13};
    int32_t *dids = dput(ids, sizeof ids);
    static const choir_weight_kind kinds[3] = {CHOIR_WEIGHT_F32, CHOIR_WEIGHT_F16,
                                               CHOIR_WEIGHT_BF16};
    static const char *names[3] = {"rows_gather f32", "rows_gather f16", "rows_gather bf16"};
    choir_err err = {0};
    for (int i = 0; i < 3; i++) {
        choir_weight w = make_weight(kinds[i], V, d, 0, 0, 0);
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight dw;
        choir_backend_weight_exact(ws, &w, &dw);
        float *ref = hmem(7 * (size_t)d * 4), *dout = dzero(7 * d);
        choir_op_rows_gather(g_cs, &w, ids, 7, ref);
        choir_op_rows_gather(g_gs, &dw, dids, 7, dout);
        cmp(names[i], dout, ref, 7 * d, 0);
        choir_backend_weights_free(ws);
    }
    /* MLX-quantized tables (a quantized model's token embedding): the same
     * dequantization, up to the rounding of s q + b. */
    static const int qbits[3] = {4, 8, 3}, qgroup[3] = {64, 32, 128};
    static const choir_dtype qsb[3] = {CHOIR_DTYPE_BF16, CHOIR_DTYPE_F16, CHOIR_DTYPE_F32};
    static const char *qnames[3] = {"rows_gather q4 g64", "rows_gather q8 g32",
                                    "rows_gather q3 g128"};
    for (int i = 0; i < 3; i++) {
        int64_t qd = 128;
        choir_weight w = make_weight(CHOIR_WEIGHT_QUANT, V, qd, qbits[i], qgroup[i], qsb[i]);
        choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
        choir_weight dw;
        choir_backend_weight_exact(ws, &w, &dw);
        float *ref = hmem(7 * (size_t)qd * 4), *dout = dzero(7 * qd);
        choir_op_rows_gather(g_cs, &w, ids, 7, ref);
        choir_op_rows_gather(g_gs, &dw, dids, 7, dout);
        cmp(qnames[i], dout, ref, 7 * qd, TOL_F32);
        choir_backend_weights_free(ws);
    }
    case_end();
}

/* --- elementwise, activations, norms ----------------------------------------------------- */

static void check_elementwise(void) {
    case_begin();
    int64_t rows = 97, cols = 1031, n = rows * cols;
    float *a = hvec(n, -4, 4), *b = hvec(n, -4, 4), *bias = hvec(cols, -1, 1);
    float *da = dvec(a, n), *db = dvec(b, n), *dbias = dvec(bias, cols), *dy = dzero(n);
    float *ref = hmem((size_t)n * 4);
    choir_op_add(g_cs, a, b, ref, n);
    choir_op_add(g_gs, da, db, dy, n);
    cmp("add", dy, ref, n, TOL_F32);
    choir_op_mul(g_cs, a, b, ref, n);
    choir_op_mul(g_gs, da, db, dy, n);
    cmp("mul", dy, ref, n, TOL_F32);
    float *h = hdup(a, n), *dh = dvec(a, n);
    choir_op_scale(g_cs, h, -0.37f, n);
    choir_op_scale(g_gs, dh, -0.37f, n);
    cmp("scale", dh, h, n, TOL_F32);
    h = hdup(a, n), dh = dvec(a, n);
    choir_op_add_bias_rows(g_cs, h, bias, rows, cols);
    choir_op_add_bias_rows(g_gs, dh, dbias, rows, cols);
    cmp("add_bias_rows", dh, h, n, TOL_F32);
    static const char *acts[] = {"gelu (erf)", "gelu (tanh)", "silu",      "relu",
                                 "sigmoid",    "tanh",        "leaky relu 0.2"};
    for (int act = CHOIR_ACT_GELU_ERF; act <= CHOIR_ACT_LEAKY_RELU; act++) {
        h = hdup(a, n), dh = dvec(a, n);
        choir_op_act(g_cs, (choir_act)act, h, n, 0.2f);
        choir_op_act(g_gs, (choir_act)act, dh, n, 0.2f);
        char name[64];
        snprintf(name, sizeof name, "act %s", acts[act]);
        cmp(name, dh, h, n, TOL_F32);
    }
    /* Snake over 3 items of 7 channels by 400 samples. */
    float *alpha = hvec(7, 0.3f, 3.0f), *dalpha = dvec(alpha, 7);
    h = hdup(a, 3 * 7 * 400), dh = dvec(a, 3 * 7 * 400);
    choir_op_snake(g_cs, h, 3, 7, 400, alpha);
    choir_op_snake(g_gs, dh, 3, 7, 400, dalpha);
    cmp("snake", dh, h, 3 * 7 * 400, TOL_F32);
    /* Transposes: exact. */
    int64_t R = 70, C = 45;
    float *t = hmem((size_t)(R * C) * 4), *dt = dzero(R * C);
    choir_op_transpose(g_cs, a, R, C, NULL, t);
    choir_op_transpose(g_gs, da, R, C, NULL, dt);
    cmp("transpose", dt, t, R * C, 0);
    choir_op_transpose(g_cs, a, R, C, b, t);
    choir_op_transpose(g_gs, da, R, C, db, dt);
    cmp("transpose + addend", dt, t, R * C, 0);
    case_end();
}

static void check_norms(void) {
    case_begin();
    int64_t rows = 53, dim = 1280, n = rows * dim;
    float *x = hvec(n, -3, 3), *g = hvec(dim, 0.5f, 1.5f), *be = hvec(dim, -0.5f, 0.5f);
    float *dx = dvec(x, n), *dg = dvec(g, dim), *dbe = dvec(be, dim), *dy = dzero(n);
    float *ref = hmem((size_t)n * 4);
    choir_op_layer_norm(g_cs, x, ref, rows, dim, g, be, 1e-5f);
    choir_op_layer_norm(g_gs, dx, dy, rows, dim, dg, dbe, 1e-5f);
    cmp("layer_norm", dy, ref, n, TOL_F32);
    choir_op_layer_norm(g_cs, x, ref, rows, dim, NULL, NULL, 1e-5f);
    choir_op_layer_norm(g_gs, dx, dy, rows, dim, NULL, NULL, 1e-5f);
    cmp("layer_norm without affine", dy, ref, n, TOL_F32);
    choir_op_rms_norm(g_cs, x, ref, rows, dim, g, 1e-6f);
    choir_op_rms_norm(g_gs, dx, dy, rows, dim, dg, 1e-6f);
    cmp("rms_norm", dy, ref, n, TOL_F32);
    float *h = hdup(x, n), *dh = dvec(x, n);
    choir_op_rms_norm(g_cs, h, h, rows, dim, NULL, 1e-6f);
    choir_op_rms_norm(g_gs, dh, dh, rows, dim, NULL, 1e-6f);
    cmp("rms_norm in place, no gamma", dh, h, n, TOL_F32);
    /* Short rows (a warp each on CUDA, up to 2048 values) as VibeVoice's
     * encoders have them, many rows of 32 and 17 odd ones of 2048 / 3000. */
    static const int64_t shapes[][2] = {{100003, 32}, {17, 2048}, {17, 3000}, {9, 7}};
    for (int i = 0; i < 4; i++) {
        int64_t r = shapes[i][0], c = shapes[i][1];
        float *xs = hvec(r * c, -3, 3), *gs = hvec(c, 0.5f, 1.5f), *rs = hmem((size_t)(r * c) * 4);
        float *dxs = dvec(xs, r * c), *dgs = dvec(gs, c), *dys = dzero(r * c);
        choir_op_rms_norm(g_cs, xs, rs, r, c, gs, 1e-5f);
        choir_op_rms_norm(g_gs, dxs, dys, r, c, dgs, 1e-5f);
        char nm[64];
        snprintf(nm, sizeof nm, "rms_norm %lld rows of %lld", (long long)r, (long long)c);
        cmp(nm, dys, rs, r * c, TOL_F32);
    }
    /* Rows of one block each (longer than a warp's 2048), with the block
     * kernel's register-cached rows (CHOIR_CUDA_RMS_CACHE) on and off: the
     * same floats bit for bit, and the CPU's within the f32 bound. 4096 is
     * the longest row the cache holds (16 values a thread), 4097 the first
     * that loops. */
    static const int64_t blk[] = {3584, 3000, 4096, 4097, 5000};
    for (int i = 0; i < 5; i++) {
        int64_t r = 8, c = blk[i];
        float *xs = hvec(r * c, -3, 3), *gs = hvec(c, 0.5f, 1.5f), *rs = hmem((size_t)(r * c) * 4);
        float *got[2], *dxs = dvec(xs, r * c), *dgs = dvec(gs, c);
        choir_op_rms_norm(g_cs, xs, rs, r, c, gs, 1e-6f);
        for (int on = 0; on < 2; on++) {
            float *dys = dzero(r * c);
            got[on] = hmem((size_t)(r * c) * 4);
            choir_cuda_rms_cache_set(on);
            choir_op_rms_norm(g_gs, dxs, dys, r, c, dgs, 1e-6f);
            choir_op_download(g_gs, got[on], dys, (size_t)(r * c) * 4);
        }
        choir_cuda_rms_cache_set(-1);
        char nm[80];
        snprintf(nm, sizeof nm, "rms_norm 8 rows of %lld, cached rows = loop", (long long)c);
        if (streams_ok(nm)) {
            expect(nm, memcmp(got[0], got[1], (size_t)(r * c) * 4) == 0);
            snprintf(nm, sizeof nm, "rms_norm 8 rows of %lld, cached rows vs CPU", (long long)c);
            report(nm, rel_l2(got[1], rs, r * c), TOL_F32);
        }
    }
    h = hdup(x, n), dh = dvec(x, n);
    choir_op_softmax(g_cs, h, rows, dim);
    choir_op_softmax(g_gs, dh, rows, dim);
    cmp("softmax", dh, h, n, TOL_F32);
    /* Group norm: 4 groups of 3 channels, and instance norm (12 groups). */
    int64_t B = 3, C = 12, T = 333;
    for (int inst = 0; inst < 2; inst++) {
        int64_t groups = inst ? C : 4;
        choir_op_group_norm(g_cs, x, ref, B, C, T, groups, g, be, 1e-5f);
        choir_op_group_norm(g_gs, dx, dy, B, C, T, groups, dg, dbe, 1e-5f);
        cmp(inst ? "group_norm as instance norm (12 groups)" : "group_norm (4 groups)", dy, ref,
            B * C * T, TOL_F32);
    }
    /* AdaIN with item lengths, the norm's affine and a style per item. */
    int32_t lens[3] = {333, 17, 200};
    int32_t *dlens = dput(lens, sizeof lens);
    float *gb = hvec(B * 2 * C, -0.5f, 0.5f), *dgb = dvec(gb, B * 2 * C);
    choir_op_adain(g_cs, x, ref, B, C, T, lens, g, be, gb, 2 * C, 1e-5f);
    choir_op_adain(g_gs, dx, dy, B, C, T, dlens, dg, dbe, dgb, 2 * C, 1e-5f);
    cmp("adain with lengths", dy, ref, B * C * T, TOL_F32);
    choir_op_adain(g_cs, x, ref, B, C, T, NULL, NULL, NULL, gb, 2 * C, 1e-5f);
    choir_op_adain(g_gs, dx, dy, B, C, T, NULL, NULL, NULL, dgb, 2 * C, 1e-5f);
    cmp("adain, no lengths, no affine", dy, ref, B * C * T, TOL_F32);
    case_end();
}

/* Both kernels (choir_cuda_rope_rows off, then on): against the CPU, and
 * the block-per-row one against the thread-per-pair one bit for bit; 33
 * rows of 5 heads, and one row of VibeVoice's 28 heads of 128 (a decode
 * step's q). */
static void check_rope(void) {
    static const int shapes[2][3] = {{33, 5, 64}, {1, 28, 128}}; /* rows, heads, Dh */
    for (int sh = 0; sh < 2; sh++) {
        case_begin();
        int H = shapes[sh][1];
        int64_t Dh = shapes[sh][2], rows = shapes[sh][0], ld = H * Dh + 8;
        int32_t pos[33];
        for (int i = 0; i < 33; i++) pos[i] = i * 131 % 4096 + (sh ? 4565 : 0);
        int32_t *dpos = dput(pos, sizeof pos);
        float *x = hvec(rows * ld, -1, 1);
        for (int inter = 0; inter < 2; inter++)
            for (int64_t rot = 32; rot <= Dh; rot += 32) {
                float *h = hdup(x, rows * ld), *dh = dvec(x, rows * ld), *dh2 = dvec(x, rows * ld);
                float *ref = hmem((size_t)(rows * ld) * 4);
                choir_op_rope(g_cs, h, rows, ld, H, Dh, rot, pos, 10000.0f, inter);
                choir_cuda_rope_rows(false);
                choir_op_rope(g_gs, dh, rows, ld, H, Dh, rot, dpos, 10000.0f, inter);
                choir_cuda_rope_rows(true);
                choir_op_rope(g_gs, dh2, rows, ld, H, Dh, rot, dpos, 10000.0f, inter); /* on: the default */
                choir_op_download(g_gs, ref, dh, (size_t)(rows * ld) * 4);
                char name[96];
                snprintf(name, sizeof name, "rope %s, %lld of %lld dims, %lld rows x %d heads",
                         inter ? "interleaved" : "rotate-half", (long long)rot, (long long)Dh, (long long)rows, H);
                cmp(name, dh, h, rows * ld, TOL_F32);
                snprintf(name, sizeof name, "rope a block a row = a thread a pair: %s, %lld of %lld, %lld x %d",
                         inter ? "interleaved" : "rotate-half", (long long)rot, (long long)Dh, (long long)rows, H);
                if (streams_ok(name)) cmp(name, dh2, ref, rows * ld, 0);
            }
        case_end();
    }
}

/* --- convolutions, LSTM, iSTFT ------------------------------------------------------------ */

static void check_conv_case(const char *name, int64_t B, int64_t Cin, int64_t T, int64_t Cout,
                            int64_t K, int stride, int pad, int dil, int groups) {
    case_begin();
    int64_t Tout = choir_conv1d_out_len(T, K, stride, pad, dil);
    float *x = hvec(B * Cin * T, -1, 1), *w = hvec(Cout * (Cin / groups) * K, -0.5f, 0.5f);
    float *bias = hvec(Cout, -1, 1), *ref = hmem((size_t)(B * Cout * Tout) * 4);
    float *dx = dvec(x, B * Cin * T), *dw = dvec(w, Cout * (Cin / groups) * K);
    float *db = dvec(bias, Cout), *dy = dzero(B * Cout * Tout);
    choir_op_conv1d(g_cs, x, B, Cin, T, w, bias, Cout, K, stride, pad, dil, groups, ref);
    choir_op_conv1d(g_gs, dx, B, Cin, T, dw, db, Cout, K, stride, pad, dil, groups, dy);
    cmp(name, dy, ref, B * Cout * Tout, TOL_F32);
    case_end();
}

/* conv1d on bf16 operands: the same rounded operands on both sides, f32
 * accumulation in a different order: near the f32 bound. */
static void check_conv_bf16_case(const char *name, int64_t B, int64_t Cin, int64_t T,
                                 int64_t Cout, int stride) {
    case_begin();
    int64_t Tout = choir_conv1d_out_len(T, 3, stride, 1, 1);
    float *x = hvec(B * Cin * T, -1, 1), *w = hvec(Cout * Cin * 3, -0.5f, 0.5f);
    float *bias = hvec(Cout, -1, 1), *ref = hmem((size_t)(B * Cout * Tout) * 4);
    float *dx = dvec(x, B * Cin * T), *dw = dvec(w, Cout * Cin * 3);
    float *db = dvec(bias, Cout), *dy = dzero(B * Cout * Tout);
    choir_op_conv1d_bf16(g_cs, x, B, Cin, T, w, bias, Cout, 3, stride, 1, 1, ref);
    choir_op_conv1d_bf16(g_gs, dx, B, Cin, T, dw, db, Cout, 3, stride, 1, 1, dy);
    cmp(name, dy, ref, B * Cout * Tout, 1e-4);
    case_end();
}

static void check_convt_case(const char *name, int64_t B, int64_t Cin, int64_t T, int64_t Cout,
                             int64_t K, int stride, int pad, int opad, int groups) {
    case_begin();
    int64_t Tout = choir_conv_transpose1d_out_len(T, K, stride, pad, opad, 1);
    float *x = hvec(B * Cin * T, -1, 1), *w = hvec(Cin * (Cout / groups) * K, -0.5f, 0.5f);
    float *bias = hvec(Cout, -1, 1), *ref = hmem((size_t)(B * Cout * Tout) * 4);
    float *dx = dvec(x, B * Cin * T), *dw = dvec(w, Cin * (Cout / groups) * K);
    float *db = dvec(bias, Cout), *dy = dzero(B * Cout * Tout);
    choir_op_conv_transpose1d(g_cs, x, B, Cin, T, w, bias, Cout, K, stride, pad, opad, 1, groups,
                              ref);
    choir_op_conv_transpose1d(g_gs, dx, B, Cin, T, dw, db, Cout, K, stride, pad, opad, 1, groups,
                              dy);
    cmp(name, dy, ref, B * Cout * Tout, TOL_F32);
    case_end();
}

static void check_conv(void) {
    check_conv_case("conv1d k3 s1 p1 (Whisper conv1, 80 mels)", 2, 80, 600, 128, 3, 1, 1, 1, 1);
    check_conv_case("conv1d k3 s2 p1 (Whisper conv2)", 2, 128, 600, 128, 3, 2, 1, 1, 1);
    check_conv_case("conv1d k7 dilation 3 p9", 2, 32, 300, 48, 7, 1, 9, 3, 1);
    check_conv_case("conv1d grouped (4 groups)", 2, 32, 300, 64, 5, 1, 2, 1, 4);
    check_conv_case("conv1d depthwise k7", 3, 64, 257, 64, 7, 1, 3, 1, 64);
    check_conv_bf16_case("conv1d_bf16 k3 s1 p1 (Whisper conv1, 128 mels)", 2, 128, 3000, 256, 1);
    check_conv_bf16_case("conv1d_bf16 k3 s2 p1 (Whisper conv2)", 2, 256, 3000, 320, 2);
    check_convt_case("conv_transpose1d k10 s5 p3 op1", 2, 64, 100, 32, 10, 5, 3, 1, 1);
    check_convt_case("conv_transpose1d depthwise k3 s2 p1 op1", 2, 48, 111, 48, 3, 2, 1, 1, 48);

    /* Grouped but not depthwise: refused on CUDA with the operation named. */
    case_begin();
    float *dx = dzero(2 * 8 * 20), *dw = dzero(8 * 4 * 3), *dy = dzero(2 * 8 * 40);
    int rc = choir_op_conv_transpose1d(g_gs, dx, 2, 8, 20, dw, NULL, 8, 3, 2, 1, 1, 1, 2, dy);
    choir_err e = {0};
    choir_stream_status(g_gs, &e);
    expect("conv_transpose1d grouped (not depthwise) refused as unsupported, named",
           rc == CHOIR_EUNSUPPORTED && strstr(e.msg, "conv_transpose1d") != NULL);
    choir_stream_clear(g_gs);
    case_end();
}

/* --- vocoder convolutions (choir/backend_vocoder.h) -------------------------------------------- */

/* Kokoro's generator convolutions at their channel counts, kernels and
 * dilations (shortened in time), with items of different lengths and zero
 * tails: conv1d_lens and the fused AdaIN + Snake convolution, CPU against
 * CUDA. Precision: f32 weights (CUDA: three TF32 products per pair, about
 * f32), the context in TF32 mode (one TF32 product), bf16 weights (bf16
 * operands; the CPU runs the rounded weight in f32). */
enum { VC_F32, VC_TF32, VC_BF16 };
static const char *vc_mode_name[] = {"f32", "tf32", "bf16"};
static const double vc_tol[] = {TOL_F32, TOL_TF32, TOL_BF16};

typedef struct vc_io {
    int32_t *lens, *dlens;
    float *x, *dx;     /* [B, Cin, T], zero past each item's length */
    float *bias, *dbias;
    choir_weight hw;   /* f32 host weight (bf16-rounded values in bf16 mode) */
    choir_weight dw;   /* on the GPU backend */
    choir_backend_weights *ws;
} vc_io;

static void vc_make(vc_io *io, int mode, int64_t B, int64_t Cin, int64_t Cout, int64_t T, int64_t K) {
    io->lens = hmem((size_t)B * 4);
    for (int64_t b = 0; b < B; b++) io->lens[b] = (int32_t)(b == 0 ? T : b == 1 ? T / 2 + 1 : 3);
    io->x = hvec(B * Cin * T, -1, 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < Cin; c++)
            for (int64_t t = io->lens[b]; t < T; t++) io->x[(b * Cin + c) * T + t] = 0.0f;
    int64_t nw = Cout * Cin * K;
    float *w = hvec(nw, -1.0f / sqrtf((float)(Cin * K)), 1.0f / sqrtf((float)(Cin * K)));
    choir_err err = {0};
    io->ws = choir_backend_weights_create(g_gpu, &err);
    if (mode == VC_BF16) {
        uint16_t *w16 = hmem((size_t)nw * 2);
        for (int64_t i = 0; i < nw; i++) {
            w16[i] = choir_f32_to_bf16(w[i]);
            w[i] = choir_bf16_to_f32(w16[i]);
        }
        choir_weight h16w = {.kind = CHOIR_WEIGHT_BF16, .data = w16, .rows = Cout, .cols = Cin * K};
        choir_backend_weight(io->ws, &h16w, &io->dw);
    } else {
        choir_weight h32 = choir_weight_f32(w, Cout, Cin * K);
        choir_backend_weight(io->ws, &h32, &io->dw);
    }
    io->hw = choir_weight_f32(w, Cout, Cin * K);
    io->bias = hvec(Cout, -0.5f, 0.5f);
    io->dbias = dvec(io->bias, Cout);
    io->dx = dvec(io->x, B * Cin * T);
    io->dlens = dput(io->lens, (size_t)B * 4);
}

/* n floats of backend memory filled with NaN: a value left unwritten shows. */
static float *dnan(int64_t n) {
    float *h = hmem((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = NAN;
    return dvec(h, n);
}

static void cuda_ctx_path(choir_cuda_conv_path p) {
    choir_cuda_conv_set_path(choir_backend_cuda_context(g_gpu), p);
}

static void vc_tf32(bool on) {
    choir_err err = {0};
    choir_cuda_set_tf32(choir_backend_cuda_context(g_gpu), on, &err);
}

static void check_vconv_lens(int mode, int64_t B, int64_t Cin, int64_t Cout, int64_t T, int64_t K,
                             int dil) {
    case_begin();
    const int pad = (int)((K - 1) * dil / 2);
    const int64_t Tout = choir_conv1d_out_len(T, K, 1, pad, dil);
    vc_io io;
    vc_make(&io, mode, B, Cin, Cout, T, K);
    float *ref = hmem((size_t)(B * Cout * Tout) * 4), *dy = dnan(B * Cout * Tout);
    choir_op_conv1d_lens(g_cs, io.x, B, Cin, T, &io.hw, io.bias, Cout, K, 1, pad, dil, io.lens, ref);
    if (mode == VC_TF32) vc_tf32(true);
    choir_op_conv1d_lens(g_gs, io.dx, B, Cin, T, &io.dw, io.dbias, Cout, K, 1, pad, dil, io.dlens,
                         dy);
    char name[128];
    snprintf(name, sizeof name, "vocoder conv1d_lens %s %lld->%lld k%lld d%d, %lld items of %lld",
             vc_mode_name[mode], (long long)Cin, (long long)Cout, (long long)K, dil, (long long)B,
             (long long)T);
    cmp(name, dy, ref, B * Cout * Tout, vc_tol[mode]);
    if (mode == VC_TF32) vc_tf32(false);
    choir_backend_weights_free(io.ws);
    case_end();
}

/* The fused AdaIN + Snake convolution; with `residual` the product is added
 * into y in place, as the model's second convolution of a unit does.
 * `im2col`: the CUDA side forced onto the unfused operations. */
static void check_vconv_snake(int mode, int64_t B, int64_t C, int64_t T, int64_t K, int dil,
                              bool residual, bool im2col) {
    case_begin();
    const int pad = (int)((K - 1) * dil / 2);
    vc_io io;
    vc_make(&io, mode, B, C, C, T, K);
    float *nw = hvec(C, 0.5f, 1.5f), *nb = hvec(C, -0.3f, 0.3f), *alpha = hvec(C, 0.3f, 3.0f);
    float *gb = hvec(B * 2 * C, -0.5f, 0.5f);
    choir_adain_snake hp = {io.lens, nw, nb, gb, 2 * C, 1e-5f, alpha, NULL};
    choir_adain_snake dp = {io.dlens, dvec(nw, C), dvec(nb, C), dvec(gb, B * 2 * C), 2 * C, 1e-5f,
                            dvec(alpha, C), NULL};
    const int64_t n = B * C * T;
    float *ref = hvec(n, -1, 1), *dy;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = io.lens[b]; t < T; t++) ref[(b * C + c) * T + t] = 0.0f;
    dy = residual ? dvec(ref, n) : dnan(n);
    choir_op_conv1d_adain_snake(g_cs, io.x, B, C, T, &hp, &io.hw, io.bias, C, K, pad, dil, io.lens,
                                residual ? ref : NULL, ref);
    cuda_ctx_path(im2col ? CHOIR_CUDA_CONV_IM2COL : CHOIR_CUDA_CONV_AUTO);
    if (mode == VC_TF32) vc_tf32(true);
    choir_op_conv1d_adain_snake(g_gs, io.dx, B, C, T, &dp, &io.dw, io.dbias, C, K, pad, dil,
                                io.dlens, residual ? dy : NULL, dy);
    char name[128];
    snprintf(name, sizeof name, "conv1d_adain_snake %s %lld ch k%lld d%d%s%s, %lld items of %lld",
             vc_mode_name[mode], (long long)C, (long long)K, dil, residual ? " +res" : "",
             im2col ? " (unfused)" : "", (long long)B, (long long)T);
    cmp(name, dy, ref, n, vc_tol[mode]);
    if (mode == VC_TF32) vc_tf32(false);
    cuda_ctx_path(CHOIR_CUDA_CONV_AUTO);
    choir_backend_weights_free(io.ws);
    case_end();
}

/* Back to the context's options after a case that switched them (the
 * environment's CHOIR_CONV_PREPASS, CHOIR_CONV_WIDE, CHOIR_CONV_FAST_SIN run
 * every other convolution case with those on). */
static unsigned g_conv_opts_env;
static void cuda_ctx_opts_default(void) {
    choir_cuda *cu = choir_backend_cuda_context(g_gpu);
    choir_cuda_conv_set_options(cu, g_conv_opts_env);
    choir_cuda_conv_set_prepass_bytes(cu, 0);
}

/* The implicit GEMM's options (choir_cuda_conv_set_options; cuda_conv.cu)
 * against the default kernel and the CPU: the fused AdaIN + Snake
 * convolution (with or without the residual added in place) or the plain
 * conv1d_lens (Cin may differ from C there: `cin`). The wide shape and the
 * prepass (its stages picked by K and dilation; once more with one item a
 * group) sum the same products in the same order, so they should give the
 * default's floats bit for bit (the number that differ is in the case's
 * name): bound 1e-6 against it; Snake's sin by the SFU moves a rounding of
 * a staged operand here and there: bound 1e-3. Against the CPU, all: the
 * precision's bound. */
enum { VO_N = 7 };
static const struct {
    const char *name;
    unsigned opts;
    bool one_item; /* the prepass in groups of one item */
} vo_conf[VO_N] = {
    {"default", 0, false},
    {"wide", CHOIR_CUDA_CONV_WIDE, false},
    {"prepass", CHOIR_CUDA_CONV_PREPASS, false},
    {"prepass, one item a group", CHOIR_CUDA_CONV_PREPASS, true},
    {"prepass + wide", CHOIR_CUDA_CONV_PREPASS | CHOIR_CUDA_CONV_WIDE, false},
    {"fast sin", CHOIR_CUDA_CONV_FAST_SIN, false},
    {"prepass + fast sin", CHOIR_CUDA_CONV_PREPASS | CHOIR_CUDA_CONV_FAST_SIN, false},
};

static void check_vconv_opts(int mode, int64_t B, int64_t cin, int64_t C, int64_t T, int64_t K,
                             int dil, bool residual, bool fused) {
    case_begin();
    const int pad = (int)((K - 1) * dil / 2);
    const int64_t Tout = choir_conv1d_out_len(T, K, 1, pad, dil), n = B * C * Tout;
    vc_io io;
    vc_make(&io, mode, B, cin, C, T, K);
    float *nw = hvec(cin, 0.5f, 1.5f), *nb = hvec(cin, -0.3f, 0.3f), *alpha = hvec(cin, 0.3f, 3.0f);
    float *gb = hvec(B * 2 * cin, -0.5f, 0.5f);
    choir_adain_snake hp = {io.lens, nw, nb, gb, 2 * cin, 1e-5f, alpha, NULL};
    choir_adain_snake dp = {io.dlens, dvec(nw, cin), dvec(nb, cin), dvec(gb, B * 2 * cin), 2 * cin,
                            1e-5f, dvec(alpha, cin), NULL};
    residual = residual && fused;
    float *ref = hvec(n, -1, 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = io.lens[b]; t < Tout; t++) ref[(b * C + c) * Tout + t] = 0.0f;
    float *dy[VO_N];
    for (int v = 0; v < VO_N; v++) dy[v] = residual ? dvec(ref, n) : dnan(n);
    if (fused)
        choir_op_conv1d_adain_snake(g_cs, io.x, B, cin, T, &hp, &io.hw, io.bias, C, K, pad, dil,
                                    io.lens, residual ? ref : NULL, ref);
    else
        choir_op_conv1d_lens(g_cs, io.x, B, cin, T, &io.hw, io.bias, C, K, 1, pad, dil, io.lens, ref);
    if (mode == VC_TF32) vc_tf32(true);
    choir_cuda *cu = choir_backend_cuda_context(g_gpu);
    for (int v = 0; v < VO_N; v++) {
        choir_cuda_conv_set_options(cu, vo_conf[v].opts);
        choir_cuda_conv_set_prepass_bytes(cu, vo_conf[v].one_item ? 1 : 0);
        if (fused)
            choir_op_conv1d_adain_snake(g_gs, io.dx, B, cin, T, &dp, &io.dw, io.dbias, C, K, pad, dil,
                                        io.dlens, residual ? dy[v] : NULL, dy[v]);
        else
            choir_op_conv1d_lens(g_gs, io.dx, B, cin, T, &io.dw, io.dbias, C, K, 1, pad, dil,
                                 io.dlens, dy[v]);
    }
    cuda_ctx_opts_default();
    if (mode == VC_TF32) vc_tf32(false);
    float *got[VO_N];
    for (int v = 0; v < VO_N; v++) {
        got[v] = hmem((size_t)n * 4);
        choir_op_download(g_gs, got[v], dy[v], (size_t)n * 4);
    }
    char name[160];
    snprintf(name, sizeof name, "conv options %s %s %lld->%lld k%lld d%d%s, %lld items of %lld",
             fused ? "adain_snake" : "conv1d_lens", vc_mode_name[mode], (long long)cin,
             (long long)C, (long long)K, dil, residual ? " +res" : "", (long long)B, (long long)T);
    if (streams_ok(name)) {
        char nv[240];
        snprintf(nv, sizeof nv, "%s, default, vs CPU", name);
        report(nv, rel_l2(got[0], ref, n), vc_tol[mode]);
        for (int v = 1; v < VO_N; v++) {
            /* the prepass and the SFU's sin apply to the fused convolution only */
            if (!fused && vo_conf[v].opts != CHOIR_CUDA_CONV_WIDE) continue;
            const bool fast = (vo_conf[v].opts & CHOIR_CUDA_CONV_FAST_SIN) != 0;
            int64_t differ = 0;
            for (int64_t i = 0; i < n; i++) differ += memcmp(&got[0][i], &got[v][i], 4) != 0;
            snprintf(nv, sizeof nv, "%s, %s, vs CPU", name, vo_conf[v].name);
            report(nv, rel_l2(got[v], ref, n), vc_tol[mode]);
            snprintf(nv, sizeof nv, "  ... %s vs the default: %lld of %lld values differ",
                     vo_conf[v].name, (long long)differ, (long long)n);
            report(nv, rel_l2(got[v], got[0], n), fast ? 1e-3 : 1e-6);
        }
    }
    choir_backend_weights_free(io.ws);
    case_end();
}

static void check_vocoder_conv(void) {
    check_vconv_lens(VC_F32, 3, 128, 128, 1001, 3, 1);
    check_vconv_lens(VC_F32, 2, 256, 256, 777, 7, 3);
    check_vconv_lens(VC_F32, 1, 128, 128, 2053, 11, 5);
    check_vconv_lens(VC_F32, 2, 1090, 1024, 37, 3, 1); /* the decoder's blocks */
    check_vconv_lens(VC_F32, 2, 514, 1024, 45, 1, 1);  /* a shortcut */
    check_vconv_lens(VC_F32, 2, 128, 22, 1201, 7, 1);  /* conv_post */
    check_vconv_lens(VC_F32, 2, 22, 128, 1201, 1, 1);  /* the noise branch */
    check_vconv_lens(VC_TF32, 3, 128, 128, 1001, 3, 1);
    check_vconv_lens(VC_TF32, 1, 128, 128, 2053, 11, 5);
    check_vconv_lens(VC_BF16, 3, 128, 128, 1001, 3, 1);
    check_vconv_lens(VC_BF16, 1, 256, 256, 2053, 11, 5);
    check_vconv_lens(VC_BF16, 2, 1090, 1024, 37, 3, 1);
    check_vconv_snake(VC_F32, 3, 128, 1001, 3, 1, false, false);
    check_vconv_snake(VC_F32, 2, 256, 777, 7, 3, true, false);
    check_vconv_snake(VC_F32, 1, 128, 2053, 11, 5, true, false);
    check_vconv_snake(VC_F32, 2, 100, 333, 3, 1, true, false); /* channels not a multiple of 16 */
    check_vconv_snake(VC_TF32, 2, 128, 1001, 11, 5, true, false);
    check_vconv_snake(VC_BF16, 2, 128, 1001, 11, 5, true, false);
    check_vconv_snake(VC_BF16, 3, 256, 777, 7, 3, false, false);
    check_vconv_snake(VC_F32, 2, 128, 1001, 7, 3, true, true);
    /* the options: every mode, fused or plain, K 3/7/11 at dilations 1/3/5,
     * with and without the residual, ragged lengths (vc_make), Cin past one
     * chunk multiple, Cout past one tile, frames over several 256-frame
     * tiles */
    check_vconv_opts(VC_F32, 2, 128, 128, 1001, 11, 5, true, true);
    check_vconv_opts(VC_F32, 3, 128, 128, 1001, 3, 1, false, true);
    check_vconv_opts(VC_F32, 2, 256, 256, 777, 7, 3, true, true);
    check_vconv_opts(VC_F32, 2, 256, 256, 777, 7, 3, false, false);
    check_vconv_opts(VC_F32, 3, 100, 100, 333, 3, 1, true, true); /* channels not a multiple of 16 */
    check_vconv_opts(VC_TF32, 3, 128, 128, 1001, 3, 1, true, true);
    check_vconv_opts(VC_TF32, 2, 128, 128, 1001, 7, 3, false, true);
    check_vconv_opts(VC_TF32, 2, 256, 256, 777, 11, 5, false, true);
    check_vconv_opts(VC_TF32, 2, 256, 256, 777, 11, 5, true, true);
    check_vconv_opts(VC_TF32, 2, 128, 22, 1201, 7, 1, false, false); /* conv_post */
    check_vconv_opts(VC_BF16, 2, 128, 128, 1001, 7, 3, true, true);
    check_vconv_opts(VC_BF16, 3, 128, 128, 1001, 3, 1, false, true);
    check_vconv_opts(VC_BF16, 2, 128, 128, 1001, 11, 5, true, true);
    check_vconv_opts(VC_BF16, 3, 100, 100, 333, 3, 1, true, true);
    check_vconv_opts(VC_BF16, 2, 256, 256, 777, 11, 5, false, true);
    check_vconv_opts(VC_BF16, 2, 1090, 1024, 37, 3, 1, false, false); /* the decoder's blocks */
}

/* The harmonic source and its STFT (Kokoro's generator): two items of 400
 * and 57 F0 values (a voiced stretch, an unvoiced one), both with seeded
 * draws. The device rounds every float32 operation as the CPU twin; they
 * differ only where CUDA's double functions and libm differ in the last
 * ulp (a phase near +-pi may flip sign there, which rel L2 barely sees). */
static void check_nsf_source(void) {
    case_begin();
    const int64_t B = 2, T = 400, F = 300 * T / 5 + 1, n = B * 22 * F;
    int32_t lens[2] = {400, 57};
    float *f0 = hvec(B * T, 60.0f, 320.0f);
    for (int64_t j = 150; j < 190; j++) f0[j] = 0.0f;
    choir_nsf_source p = {.harmonics = 9, .upsample = 300, .sample_rate = 24000.0f,
                          .sine_amp = 0.1f, .voiced_noise = 0.003f,
                          .unvoiced_noise = (float)(0.1 / 3.0), .voiced_threshold = 10.0f,
                          .lin_b = 0.01f, .n_fft = 20, .hop = 5};
    for (int h = 0; h < 9; h++) p.lin_w[h] = 0.4f - 0.09f * (float)h;
    const uint64_t seeds[2] = {3, 99};
    float *ref = hmem((size_t)n * sizeof(float)), *dS = dzero(n), *df0 = dvec(f0, B * T);
    int32_t *dlens = dput(lens, sizeof lens);
    choir_op_nsf_source_stft(g_cs, f0, B, T, lens, &p, seeds, NULL, ref);
    choir_op_nsf_source_stft(g_gs, df0, B, T, dlens, &p, seeds, NULL, dS);
    cmp("nsf_source_stft, 2 items with seeded draws", dS, ref, n, 1e-5);
    case_end();
}

/* persist: the recurrence as one cooperative kernel (choir_cuda_lstm_set_persist,
 * CHOIR_KOKORO_LSTM_PERSIST=1); B 34 takes two of its staged chunks of 32 pieces. */
static void check_bilstm_at(int64_t B, int64_t T, int64_t In, int64_t H, bool persist) {
    case_begin();
    const int64_t G = 4 * H;
    float *x = hvec(B * T * In, -1, 1), *wih = hvec(2 * G * In, -0.3f, 0.3f);
    float *whh = hvec(2 * G * H, -0.3f, 0.3f), *bias = hvec(2 * G, -0.2f, 0.2f);
    int32_t *lens = hmem((size_t)B * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) lens[b] = b == 0 ? (int32_t)T : (int32_t)(1 + (b * 37) % T);
    if (B == 3) lens[1] = 3, lens[2] = 41;
    float *ref = hmem((size_t)(B * T * 2 * H) * 4), *dy = dzero(B * T * 2 * H);
    float *dx = dvec(x, B * T * In), *dwih = dvec(wih, 2 * G * In), *dwhh = dvec(whh, 2 * G * H);
    float *dbias = dvec(bias, 2 * G);
    int32_t *dlens = dput(lens, (size_t)B * sizeof(int32_t));
    choir_op_bilstm(g_cs, x, B, T, In, H, wih, whh, bias, lens, ref);
    choir_cuda_lstm_set_persist(choir_backend_cuda_context(g_gpu), persist);
    choir_op_bilstm(g_gs, dx, B, T, In, H, dwih, dwhh, dbias, dlens, dy);
    choir_stream_sync(g_gs, NULL);
    choir_cuda_lstm_set_persist(choir_backend_cuda_context(g_gpu), false);
    char name[96];
    snprintf(name, sizeof name, "bilstm with lengths, B %lld T %lld H %lld%s", (long long)B,
             (long long)T, (long long)H, persist ? ", persistent" : "");
    cmp(name, dy, ref, B * T * 2 * H, 1e-4);
    case_end();
}

static void check_bilstm(void) {
    check_bilstm_at(3, 60, 40, 32, false);
    check_bilstm_at(3, 60, 40, 32, true);
    check_bilstm_at(34, 50, 64, 256, true);
}

static void check_istft(void) {
    case_begin();
    int n_fft = 20, hop = 5, nb = n_fft / 2 + 1;
    int64_t B = 3, F = 90, n_out = (int64_t)hop * (F - 1);
    float *P = hvec(B * 2 * nb * F, -1, 1), *ref = hmem((size_t)(B * n_out) * 4);
    float *dP = dvec(P, B * 2 * nb * F), *dout = dzero(B * n_out);
    int32_t frames[3] = {90, 12, 57};
    int32_t *dframes = dput(frames, sizeof frames);
    choir_op_istft_magphase(g_cs, P, B, F, frames, n_fft, hop, ref);
    choir_op_istft_magphase(g_gs, dP, B, F, dframes, n_fft, hop, dout);
    cmp("istft_magphase n_fft 20 hop 5, frames per item", dout, ref, B * n_out, TOL_F32);
    case_end();
}

/* --- graphs and the stream's contracts ------------------------------------------------------ */

/* A decoder-like step (layer norm, linear, append to the cache, attention
 * over the slots) recorded once and replayed after the device-side lengths
 * and positions change, against the same operations run directly. */
static void check_graph(void) {
    case_begin();
    choir_err err = {0};
    int H = 4;
    int64_t Dh = 64, d = H * Dh, C = 64, B = 3, stride = C * d;
    float *x = hvec(B * d, -1, 1), *g = hvec(d, 0.5f, 1.5f);
    choir_weight w = make_weight(CHOIR_WEIGHT_F32, d, d, 0, 0, 0);
    choir_backend_weights *ws = choir_backend_weights_create(g_gpu, &err);
    choir_weight dw;
    choir_backend_weight(ws, &w, &dw);
    const float *dg = choir_backend_vec(ws, g, d);
    float *pool = hvec(B * stride, -1, 1);
    float *dx = dvec(x, B * d), *dn = dzero(B * d), *dk = dzero(B * d);
    float *dpool_g = dvec(pool, B * stride), *dpool_d = dvec(pool, B * stride);
    float *dout_g = dzero(B * d), *dout_d = dzero(B * d);
    int32_t meta[9] = {2, 0, 1, 5, 9, 1, 4, 8, 0}; /* slots, lengths, positions */
    int32_t *dmeta = dput(meta, sizeof meta);
    choir_attn a = {H, 0, Dh, 1.0f / sqrtf((float)Dh), false, CHOIR_DTYPE_F32};
    bool begun = choir_stream_graph_begin(g_gs, &err) == 0;
    choir_graph *gr = NULL;
    if (begun) {
        choir_op_layer_norm(g_gs, dx, dn, B, d, dg, NULL, 1e-5f);
        choir_op_linear(g_gs, dn, B, &dw, NULL, dk);
        choir_op_rows_scatter(g_gs, dk, B, d, dpool_g, CHOIR_DTYPE_F32, stride, d, dmeta, dmeta + 6);
        choir_op_attention_slots(g_gs, B, dn, d, d, dpool_g, d, dpool_g, d, stride, dmeta,
                                 dmeta + 3, dout_g, d, d, 1, C, &a);
        gr = choir_stream_graph_end(g_gs, &err);
    }
    expect("graph recorded", gr != NULL);
    if (!gr) {
        printf("     %s\n", err.msg);
        choir_stream_clear(g_gs);
        choir_backend_weights_free(ws);
        case_end();
        return;
    }
    float *got = hmem((size_t)(B * stride) * 4), *want = hmem((size_t)(B * stride) * 4);
    float *go = hmem((size_t)(B * d) * 4), *wo = hmem((size_t)(B * d) * 4);
    bool same = true;
    for (int step = 0; step < 5; step++) {
        for (int b = 0; b < 3; b++) {
            meta[3 + b] += 1;
            meta[6 + b] += 1;
        }
        choir_op_upload(g_gs, dmeta, meta, sizeof meta);
        choir_stream_graph_launch(g_gs, gr);
        choir_op_layer_norm(g_gs, dx, dn, B, d, dg, NULL, 1e-5f);
        choir_op_linear(g_gs, dn, B, &dw, NULL, dk);
        choir_op_rows_scatter(g_gs, dk, B, d, dpool_d, CHOIR_DTYPE_F32, stride, d, dmeta, dmeta + 6);
        choir_op_attention_slots(g_gs, B, dn, d, d, dpool_d, d, dpool_d, d, stride, dmeta,
                                 dmeta + 3, dout_d, d, d, 1, C, &a);
        choir_op_download(g_gs, got, dpool_g, (size_t)(B * stride) * 4);
        choir_op_download(g_gs, want, dpool_d, (size_t)(B * stride) * 4);
        choir_op_download(g_gs, go, dout_g, (size_t)(B * d) * 4);
        choir_op_download(g_gs, wo, dout_d, (size_t)(B * d) * 4);
        if (choir_stream_status(g_gs, NULL)) break;
        same = same && !memcmp(got, want, (size_t)(B * stride) * 4) &&
               !memcmp(go, wo, (size_t)(B * d) * 4);
    }
    if (streams_ok("graph replay"))
        expect("graph replayed 5 steps with new lengths equals direct calls bit for bit", same);
    /* While a graph lives the stream's memory cannot move. */
    expect("reserve refused while a graph lives",
           choir_stream_reserve(g_gs, (size_t)4 << 30, 0, &err) == CHOIR_EBUSY);
    choir_graph_free(gr);
    choir_backend_weights_free(ws);
    case_end();
}

static void check_contracts(void) {
    case_begin();
    choir_err e = {0};
    float *dx = dzero(64), *dy = dzero(64);
    expect("bad shape is EINVAL", choir_op_layer_norm(g_gs, dx, dy, 2, 0, NULL, NULL, 1e-5f) ==
                                      CHOIR_EINVAL);
    expect("later operations return the first error and do nothing",
           choir_op_add(g_gs, dx, dx, dy, 64) == CHOIR_EINVAL);
    choir_stream_status(g_gs, &e);
    expect("the error names the operation and the backend",
           strstr(e.msg, "layer_norm") && strstr(e.msg, "cuda:0"));
    choir_stream_clear(g_gs);
    expect("cleared stream runs again", choir_op_add(g_gs, dx, dx, dy, 64) == 0);
    void *big = choir_stream_alloc(g_gs, (size_t)1 << 40, "one terabyte of rows");
    choir_stream_status(g_gs, &e);
    expect("working memory refused with the request named",
           !big && e.code == CHOIR_ENOMEM && strstr(e.msg, "one terabyte of rows"));
    choir_stream_clear(g_gs);
    expect("use_arena refused on a device backend",
           choir_stream_use_arena(g_gs, NULL, 0, &e) == CHOIR_EUNSUPPORTED);
    expect("backend kind and name", choir_backend_get_kind(g_gpu) == CHOIR_BACKEND_CUDA &&
                                        !choir_backend_is_host(g_gpu) &&
                                        choir_backend_has_graphs(g_gpu) &&
                                        choir_backend_cuda_context(g_gpu) != NULL);
    /* The device query the engine lists GPUs with: what the open context
     * reports, without opening one; one past the last is not found. */
    choir_backend_device dev;
    const choir_cuda_props *props = choir_cuda_get_props(choir_backend_cuda_context(g_gpu));
    int n_dev = choir_backend_device_count();
    expect("device query: the count, and device 0's name and memory as its context has them",
           n_dev >= 1 && choir_backend_device_query(0, &dev, &e) == 0 &&
               strcmp(dev.name, props->name) == 0 && dev.total_bytes == props->total_bytes &&
               dev.total_bytes > 0);
    expect("device query: no device past the last",
           choir_backend_device_query(n_dev, &dev, &e) == CHOIR_ENOTFOUND && strstr(e.msg, "not found"));
    case_end();
}

int main(void) {
    if (choir_cuda_device_count() == 0) {
        printf("SKIP no CUDA device visible\n");
        return 77;
    }
    choir_err err = {0};
    g_cpu = choir_backend_cpu(&err);
    choir_backend_cuda_opts o = {.device = 0};
    g_gpu = g_cpu ? choir_backend_cuda(&o, &err) : NULL;
    if (!g_gpu) {
        fprintf(stderr, "FATAL %s\n", err.msg);
        return 1;
    }
    g_conv_opts_env = choir_cuda_conv_get_options(choir_backend_cuda_context(g_gpu));
    g_cs = choir_stream_create(g_cpu, &err);
    g_gs = choir_stream_create(g_gpu, &err);
    /* The CPU's working memory serves the operations that carve
     * temporaries (conv1d_adain_snake; inputs are host arrays); its kernel
     * scratch is planned so the CPU path allocates as in a model. */
    if (!g_cs || !g_gs || choir_stream_reserve(g_cs, 64 << 20, 64 << 20, &err) ||
        choir_stream_reserve(g_gs, (size_t)768 << 20, 0, &err)) {
        fprintf(stderr, "FATAL %s\n", err.msg);
        return 1;
    }
    int64_t base = choir_backend_mem_current(g_gpu);
    printf("backend %s, working memory %lld MiB\n", choir_backend_name(g_gpu),
           (long long)(base >> 20));
    check_transfers();
    check_linear();
    check_gemv_shapes();
    check_gemv_pdl();
    check_q8_gemv();
    check_gemv_mma();
    check_q8_dequant();
    check_linear_skinny();
    check_linear_skinny_acc();
    check_linear_bf16();
    check_norm_linear();
    check_swiglu();
    check_fused_rows();
    check_gemm();
    check_attention();
    check_gather();
    check_elementwise();
    check_norms();
    check_rope();
    check_conv();
    check_vocoder_conv();
    check_bilstm();
    check_istft();
    check_graph();
    check_contracts();
    check_nsf_source(); /* last: its random F0 leaves the other cases' inputs as they were */
    choir_stream_free(g_gs);
    choir_stream_free(g_cs);
    int64_t held = choir_backend_mem_current(g_gpu);
    printf("device bytes held after the stream is freed (context scratch): %lld, peak %lld\n",
           (long long)held, (long long)choir_backend_mem_peak(g_gpu));
    expect("the stream's working memory returned to the device", held < base);
    choir_backend_free(g_gpu);
    choir_backend_free(g_cpu);
    printf("%d of %d cases passed, %d skipped\n", g_cases - g_failures, g_cases, g_skips);
    return g_failures ? 1 : 0;
}
