// The ragged operations of src/tensor/cuda/cuda_ragged.cu (Kokoro's batched front,
// CHOIR_KOKORO_FRONT_BATCH=1) run on the host, for a machine without a GPU: the whole file, its
// host functions included, with each launch's blocks run one after another (every CUDA thread a
// host thread: warp_emu.h) and cublasSgemmStridedBatched a literal column-major loop. It checks
// the gather / softmax / scatter indexing, the groups and the products' arguments against plain
// per-piece attention in double, and the batched transpose's zeros; not timing or rounding.
//
//   ragged_emu   (cases built in; prints the largest errors; exit 1 on a failure)
#include "warp_emu.h"

#include <algorithm>

typedef int cudaError_t;
typedef int cublasStatus_t;
typedef void *cublasHandle_t;
#define CUBLAS_STATUS_SUCCESS 0
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct choir_err { int code; char msg[256]; };
struct choir_cuda { cublasHandle_t blas; void *stream; };
enum { CHOIR_EINVAL = 1, CHOIR_ENOMEM = 2, CHOIR_ETOOBIG = 3 };
static int choir_err_set(choir_err *e, int code, const char *fmt, ...) {
    if (e) e->code = code, snprintf(e->msg, sizeof e->msg, "%s", fmt);
    return code;
}
static int choir_cuda_check_launch(choir_err *, const char *) { return 0; }
static int choir_cuda_blas_fail(choir_err *e, cublasStatus_t, const char *w) { return choir_err_set(e, 9, w); }
static std::vector<float> g_scratch;
static void *choir_cuda_scratch(choir_cuda *, size_t bytes, choir_err *) {
    g_scratch.assign(bytes / sizeof(float) + 1, NAN); // garbage: NaN
    return g_scratch.data();
}
static dim3v blockDim;
// One block at a time, its threads host threads (blockDim x, y as given).
template <class F> static void run_grid(dim3 grid, dim3 block, F f) {
    int threads = (int)(block.x * block.y);
    blockDim = {(int)block.x, (int)block.y, 1};
    gridDim = {(int)grid.x, (int)grid.y, (int)grid.z};
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                std::barrier<> bb(threads);
                g_block_bar = &bb;
                for (int w = 0; w < (threads + 31) / 32; w++) g_warp_bar[w] = new std::barrier<>(32);
                std::vector<std::thread> th;
                for (int i = 0; i < threads; i++)
                    th.emplace_back([=] {
                        threadIdx = {i % (int)block.x, i / (int)block.x, 0};
                        blockIdx = {(int)x, (int)y, (int)z};
                        f();
                    });
                for (auto &t : th) t.join();
                for (int w = 0; w < (threads + 31) / 32; w++) delete g_warp_bar[w];
            }
}
#define LAUNCH(grid, block, call) run_grid(dim3(grid), dim3(block), [&] { call; })
// Column-major C_i = alpha op(A_i) op(B_i) + beta C_i, as cuBLAS.
static cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, int ta, int tb, int m, int n, int k,
                                                const float *alpha, const float *A, int lda,
                                                long long sa, const float *B, int ldb, long long sb,
                                                const float *beta, float *C, int ldc, long long sc,
                                                int batch) {
    for (int i = 0; i < batch; i++)
        for (int c = 0; c < n; c++)
            for (int r = 0; r < m; r++) {
                double acc = 0;
                for (int p = 0; p < k; p++) {
                    float a = ta ? A[i * sa + r * lda + p] : A[i * sa + p * lda + r];
                    float b = tb ? B[i * sb + p * ldb + c] : B[i * sb + c * ldb + p];
                    acc += (double)a * b;
                }
                float *cp = &C[i * sc + c * ldc + r];
                *cp = (float)(*alpha * acc + (*beta != 0 ? *beta * *cp : 0.0f));
            }
    return 0;
}
#include "kern.inc"

static uint64_t rng = 88172645463325252ull;
static float rnd() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

// n pieces of the given lengths, nh heads of Dh; the scratch budget forced to `group` pieces.
static bool attention_case(std::vector<int> len, int nh, int Dh, int pad_cols) {
    int n = (int)len.size(), R = 0, Tm = 0;
    std::vector<int32_t> off(n);
    for (int b = 0; b < n; b++) off[b] = R, R += len[b], Tm = std::max(Tm, len[b]);
    int ld = nh * Dh + pad_cols;
    std::vector<float> q(R * ld), k(R * ld), v(R * ld), out(R * ld, -7.0f);
    for (auto *x : {&q, &k, &v})
        for (auto &f : *x) f = rnd();
    choir_cuda cu{};
    choir_err err{};
    float scale = 1.0f / sqrtf((float)Dh);
    int rc = choir_cuda_attention_ragged(&cu, n, q.data(), k.data(), v.data(), ld, off.data(),
                                         len.data(), Tm, nh, Dh, scale, out.data(), &err);
    double worst = 0;
    bool pad_ok = true;
    for (int b = 0; b < n; b++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < len[b]; i++) {
                const float *qr = &q[(off[b] + i) * ld + h * Dh];
                std::vector<double> s(len[b]);
                double mx = -1e300, sum = 0;
                for (int j = 0; j < len[b]; j++) {
                    double a = 0;
                    for (int d = 0; d < Dh; d++) a += (double)qr[d] * k[(off[b] + j) * ld + h * Dh + d];
                    s[j] = a * scale, mx = std::max(mx, s[j]);
                }
                for (auto &x : s) x = exp(x - mx), sum += x;
                for (int d = 0; d < Dh; d++) {
                    double o = 0;
                    for (int j = 0; j < len[b]; j++) o += s[j] / sum * v[(off[b] + j) * ld + h * Dh + d];
                    worst = std::max(worst, fabs(o - out[(off[b] + i) * ld + h * Dh + d]));
                }
            }
    for (int r = 0; r < R; r++)
        for (int c = nh * Dh; c < ld; c++) pad_ok = pad_ok && out[r * ld + c] == -7.0f;
    bool ok = rc == 0 && worst < 1e-5 && pad_ok;
    printf("%s  ragged attention: %d pieces (Tm %d), %d heads of %d, row stride %d: max error %.2e%s\n",
           ok ? "PASS" : "FAIL", n, Tm, nh, Dh, ld, worst, pad_ok ? "" : ", columns past the heads written");
    return ok;
}

static bool transpose_case(int B, int R, int C, bool with_lens) {
    std::vector<float> src(B * R * C), dst(B * R * C, NAN);
    std::vector<int32_t> lens(B);
    for (auto &f : src) f = rnd();
    for (int b = 0; b < B; b++) lens[b] = (b * 7) % (R + 1);
    choir_cuda cu{};
    choir_err err{};
    int rc = choir_cuda_transpose_lens(&cu, src.data(), B, R, C, with_lens ? lens.data() : nullptr,
                                       dst.data(), &err);
    long bad = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++) {
                float want = (!with_lens || r < lens[b]) ? src[(b * R + r) * C + c] : 0.0f;
                if (!(dst[(b * R + c * 0) * C + c * R + r] == want)) bad++;
            }
    bool ok = rc == 0 && bad == 0;
    printf("%s  transpose_lens: %d items of [%d, %d]%s: %ld wrong\n", ok ? "PASS" : "FAIL", B, R, C,
           with_lens ? " with lengths" : "", bad);
    return ok;
}

int main() {
    bool ok = true;
    ok &= attention_case({1}, 2, 8, 0);
    ok &= attention_case({5, 1, 17, 9}, 3, 8, 0);
    ok &= attention_case({33, 2, 40, 1, 12}, 2, 16, 4);
    // more pieces than one group: per piece 2 heads x 40 x (4 x 16 + 40) floats; AR_SCRATCH
    // is cut to 3 pieces' worth by run_ragged_emu.sh
    std::vector<int> many;
    for (int i = 0; i < 10; i++) many.push_back(1 + (i * 13) % 40);
    ok &= attention_case(many, 2, 16, 0);
    ok &= transpose_case(3, 37, 45, true);
    ok &= transpose_case(2, 64, 33, false);
    ok &= transpose_case(33, 5, 40, true);
    printf("%s\n", ok ? "ragged emulation: all cases pass" : "ragged emulation: FAIL");
    return ok ? 0 : 1;
}
