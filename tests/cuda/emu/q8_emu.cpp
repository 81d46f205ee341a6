// Host emulation of the 8-bit GEMVs of src/tensor/cuda/cuda_linear_q8.cu (q8_gemv and q8_stream: the
// permuted staging of x, the lanes' 16-code chunks, the groups' scales and biases, the
// batches, the rows a warp across stacked layers, the epilogues and the rows' stores), on
// warp_emu.h's threads, under AddressSanitizer (a read past a weight row, its scales or x
// fails). Each case against a double reference over the exactly dequantized weights; prints
// rel_l2 and the outputs left unwritten. The kernel source is cut out of the .cu by
// run_q8_emu.sh (the asm load left out, replaced here by a plain one).
#include "gemv_emu.h"

#include <algorithm>
#include <cassert>
#include <random>
#include <type_traits>

template <typename T> static T cuda_block_reduce(T v, T *red) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    T r = lane < nwarps ? red[lane] : T(0);
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;
}
static inline double cuda_block_sum_d(double v, double *red) { return cuda_block_reduce(v, red); }
static inline uint4 q8_ld(const uint4 *p) { return *p; }
static std::vector<float4> g_dyn;
#define Q8_THREADS 256
#define Q8_WARPS (Q8_THREADS / 32)
#include "q8_kern.inc"

template <int R, int NR, int U, bool XS, bool NORM>
static void run(const float *x, int M, int64_t K, const float *gamma, float eps, const q8_args &a) {
    int64_t total = a.start[a.n], groups = (total + NR - 1) / NR, blocks = (groups + Q8_WARPS - 1) / Q8_WARPS;
    int64_t Kp = (K + 511) / 512 * 512;
    g_dyn.assign(XS ? (size_t)(M * Kp / 4) : 0, float4{NAN, NAN, NAN, NAN});
    blockDim = {Q8_THREADS, 1, 1};
    launch({(int)blocks, 1, 1}, Q8_THREADS, [&] { q8_gemv<R, NR, U, XS, NORM>(x, M, K, gamma, eps, a); });
}
// Shapes 4-7 (q8_stream): a grid of Q8S_BLOCKS blocks (default 1, so that each warp takes
// several rows and its ring of loads runs across them) and pieces of Q8S_PIECE columns
// (default all of K), one launch a piece as q8s_launch_r does.
template <int R, int NR, int U, bool NORM, bool FX = false>
static void run_stream(const float *x, int M, int64_t K, const float *gamma, float eps, const q8_args &a) {
    const char *eb = getenv("Q8S_BLOCKS"), *ep = getenv("Q8S_PIECE");
    int blocks = eb ? atoi(eb) : 1;
    int64_t piece = ep ? atoll(ep) : K;
    blockDim = {Q8_THREADS, 1, 1};
    for (int64_t k0 = 0; k0 < K; k0 += piece) {
        int64_t kc = K - k0 < piece ? K - k0 : piece, kcp = (kc + 511) / 512 * 512;
        g_dyn.assign((size_t)(M * kcp / 4 + M * (kcp / 16) / 4), float4{NAN, NAN, NAN, NAN});
        launch({blocks, 1, 1}, Q8_THREADS,
               [&] { q8_stream<R, NR, U, NORM, 1, FX>(x, M, K, k0, kc, gamma, eps, a, k0 > 0); });
    }
}
template <int R, bool XS, bool NORM>
static void run_shape(int shape, const float *x, int M, int64_t K, const float *gamma, float eps, const q8_args &a) {
    if (shape >= 4) {
        if constexpr (XS || !NORM) {
            // Shape 7 is shape 4's kernel within 64 registers: the same code here;
            // shape 8 is 7 with x staged in one pass (q8_stage_fast).
            if (shape == 4 || shape == 7) run_stream<R, 1, 4, NORM>(x, M, K, gamma, eps, a);
            else if (shape == 8) run_stream<R, 1, 4, NORM, true>(x, M, K, gamma, eps, a);
            else if (shape == 6) run_stream<R, 2, 4, NORM>(x, M, K, gamma, eps, a);
            else run_stream<R, 1, 8, NORM>(x, M, K, gamma, eps, a);
        }
    } else if (shape == 2) run<R, 1, 4, XS, NORM>(x, M, K, gamma, eps, a);
    else if (shape == 3) run<R, 4, 2, XS, NORM>(x, M, K, gamma, eps, a);
    else run<R, 2, 2, XS, NORM>(x, M, K, gamma, eps, a);
}

// dq ROWS K G SB BLOCKS: q8_dequant_bf16 (grid-stride over BLOCKS blocks) against
// bf16(fma(s, q, b)) of every code, computed here; prints the values that differ.
static int dequant_case(int argc, char **argv) {
    if (argc < 7) return 2;
    int64_t rows = atoll(argv[2]), K = atoll(argv[3]);
    int G = atoi(argv[4]), blocks = atoi(argv[6]);
    int sb = !strcmp(argv[5], "f16") ? CHOIR_DTYPE_F16 : !strcmp(argv[5], "f32") ? CHOIR_DTYPE_F32 : CHOIR_DTYPE_BF16;
    std::mt19937 rng(777 + (int)K);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    int64_t ng = rows * (K / G), chunks = rows * K / 16;
    std::vector<uint32_t> W((size_t)(rows * K / 4));
    for (auto &w : W) w = rng();
    std::vector<uint16_t> S16(ng), B16(ng);
    std::vector<float> S32(ng), B32(ng);
    for (int64_t g = 0; g < ng; g++) {
        float s = (0.2f + 0.4f * (U(rng) + 1)) / 255, b = -0.4f + 0.2f * U(rng);
        S16[g] = f2bf(s), B16[g] = f2bf(b);
        if (sb == CHOIR_DTYPE_F16) S16[g] = 0x1c00 + (rng() & 1023), B16[g] = 0xb400 + (rng() & 1023);
        S32[g] = sb == CHOIR_DTYPE_F32 ? s : sb == CHOIR_DTYPE_F16 ? h2f(S16[g]) : bf2f(S16[g]);
        B32[g] = sb == CHOIR_DTYPE_F32 ? b : sb == CHOIR_DTYPE_F16 ? h2f(B16[g]) : bf2f(B16[g]);
    }
    const void *sc = sb == CHOIR_DTYPE_F32 ? (const void *)S32.data() : (const void *)S16.data();
    const void *bi = sb == CHOIR_DTYPE_F32 ? (const void *)B32.data() : (const void *)B16.data();
    std::vector<uint4> out((size_t)(2 * chunks), uint4{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu});
    blockDim = {256, 1, 1};
    launch({blocks, 1, 1}, 256, [&] {
        q8_dequant_bf16((const uint4 *)W.data(), sc, bi, sb, G == 32 ? 1 : G == 64 ? 2 : 3, chunks, out.data());
    });
    const uint16_t *o = (const uint16_t *)out.data();
    long bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < K; c++) {
            uint32_t code = (W[(r * K + c) / 4] >> (8 * (c % 4))) & 255;
            int64_t g = r * (K / G) + c / G;
            bad += o[r * K + c] != f2bf(fmaf(S32[g], (float)code, B32[g]));
        }
    printf("q8 dequant rows=%lld K=%lld G=%d %s blocks=%d differ %ld\n", (long long)rows, (long long)K, G, argv[5],
           blocks, bad);
    return bad != 0;
}

// args: SHAPE M K G SB(bf16|f16|f32) XS NORM EPILOGUE ROWS...  (one layer per ROWS value)
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "dq")) return dequant_case(argc, argv);
    if (argc < 10) return 2;
    int shape = atoi(argv[1]), M = atoi(argv[2]), G = atoi(argv[4]), xs = atoi(argv[6]), norm = atoi(argv[7]);
    int64_t K = atoll(argv[3]);
    int sb = !strcmp(argv[5], "f16") ? CHOIR_DTYPE_F16 : !strcmp(argv[5], "f32") ? CHOIR_DTYPE_F32 : CHOIR_DTYPE_BF16;
    int epi = atoi(argv[8]), n = argc - 9;
    std::mt19937 rng(12345 + shape * 7 + M * 131 + (int)K);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    q8_args a;
    memset(&a, 0, sizeof a);
    a.n = n, a.sb_dtype = sb, a.group_shift = G == 32 ? 1 : G == 64 ? 2 : 3, a.epilogue = epi;
    std::vector<std::vector<uint32_t>> W(n);
    std::vector<std::vector<uint16_t>> S16(n), B16(n);
    std::vector<std::vector<float>> S32(n), B32(n), bias(n), y(n), y0(n), want(n);
    std::vector<int64_t> rows(n);
    enum { SLOTS = 3, POS = 10 };
    std::vector<int32_t> slot(M), pos(M);
    for (int m = 0; m < M; m++) slot[m] = (2 * m + 1) % SLOTS, pos[m] = m + 1;
    std::vector<std::vector<float>> cache(n);
    std::vector<float> x((size_t)(M * K)), gamma(K), xn((size_t)(M * K));
    for (auto &v : x) v = 3 * U(rng) + 1;
    for (auto &v : gamma) v = 1 + 0.5f * U(rng);
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int64_t i = 0; i < K; i++) ss += (double)x[m * K + i] * x[m * K + i];
        float inv = norm ? (float)(1.0 / sqrt(ss / (double)K + 1e-6)) : 1.0f;
        for (int64_t i = 0; i < K; i++) xn[m * K + i] = norm ? x[m * K + i] * inv * gamma[i] : x[m * K + i];
    }
    for (int i = 0; i < n; i++) {
        rows[i] = atoll(argv[9 + i]);
        int64_t N = rows[i], ng = N * (K / G);
        W[i].resize((size_t)(N * K / 4));
        for (auto &w : W[i]) w = rng();
        S16[i].resize(ng), B16[i].resize(ng), S32[i].resize(ng), B32[i].resize(ng);
        for (int64_t g = 0; g < ng; g++) {
            float s = (0.2f + 0.4f * (U(rng) + 1)) / 255, b = -0.4f + 0.2f * U(rng);
            S16[i][g] = sb == CHOIR_DTYPE_F16 ? 0 : f2bf(s), B16[i][g] = f2bf(b);
            if (sb == CHOIR_DTYPE_F16) {
                // an f16 that is exact: take the bf16's value rounded to 10 mantissa bits
                float sv = bf2f(f2bf(s)), bv = bf2f(f2bf(b));
                auto f2h = [](float f) {
                    uint32_t u;
                    memcpy(&u, &f, 4);
                    uint32_t s = (u >> 16) & 0x8000, e = ((u >> 23) & 255) - 112, m = (u >> 13) & 1023;
                    return (uint16_t)(s | (e << 10) | m);
                };
                S16[i][g] = f2h(sv), B16[i][g] = f2h(bv);
            }
            S32[i][g] = sb == CHOIR_DTYPE_F32 ? s : sb == CHOIR_DTYPE_F16 ? h2f(S16[i][g]) : bf2f(S16[i][g]);
            B32[i][g] = sb == CHOIR_DTYPE_F32 ? b : sb == CHOIR_DTYPE_F16 ? h2f(B16[i][g]) : bf2f(B16[i][g]);
        }
        bias[i].resize(N);
        for (auto &v : bias[i]) v = U(rng);
        y0[i].resize((size_t)(M * N));
        for (auto &v : y0[i]) v = U(rng);
        y[i] = epi == 1 ? y0[i] : std::vector<float>((size_t)(M * N), NAN);
        want[i].resize((size_t)(M * N));
        for (int m = 0; m < M; m++)
            for (int64_t r = 0; r < N; r++) {
                double s = 0;
                for (int64_t c = 0; c < K; c++) {
                    uint32_t code = (W[i][(r * K + c) / 4] >> (8 * (c % 4))) & 255;
                    int64_t g = r * (K / G) + c / G;
                    s += ((double)S32[i][g] * code + B32[i][g]) * xn[m * K + c];
                }
                s += (i == 0 ? bias[i][r] : 0.0);
                if (epi == 1) s += y0[i][m * N + r];
                if (epi == 2) s = 0.5 * s * (1.0 + erf(s * 0.70710678118654752));
                want[i][m * N + r] = (float)s;
            }
        a.W[i] = W[i].data();
        a.scales[i] = sb == CHOIR_DTYPE_F32 ? (const void *)S32[i].data() : (const void *)S16[i].data();
        a.biases[i] = sb == CHOIR_DTYPE_F32 ? (const void *)B32[i].data() : (const void *)B16[i].data();
        a.bias[i] = i == 0 ? bias[i].data() : nullptr;
        a.y[i] = y[i].data();
        a.start[i + 1] = a.start[i] + N;
        if (i == 1) {
            cache[i].assign((size_t)(SLOTS * POS * N), 0.0f);
            a.store[i] = {cache[i].data(), false, POS * N, N, slot.data(), pos.data()};
        }
    }
    auto run_as = [&](int sh) {
        if (norm) {
            if (M == 1) run_shape<1, true, true>(sh, x.data(), M, K, gamma.data(), 1e-6f, a);
            else run_shape<8, true, true>(sh, x.data(), M, K, gamma.data(), 1e-6f, a);
        } else if (xs) {
            if (M == 1) run_shape<1, true, false>(sh, x.data(), M, K, nullptr, 0, a);
            else run_shape<8, true, false>(sh, x.data(), M, K, nullptr, 0, a);
        } else {
            if (M == 1) run_shape<1, false, false>(sh, x.data(), M, K, nullptr, 0, a);
            else run_shape<8, false, false>(sh, x.data(), M, K, nullptr, 0, a);
        }
    };
    // Shapes 4-6 also against shape 1 on the same data: the largest difference and how many
    // outputs differ at all (none expected for one piece of staged x).
    long vs1_differ = 0;
    double vs1_max = 0;
    if (shape >= 4) {
        run_as(1);
        std::vector<std::vector<float>> y1 = y;
        for (int i = 0; i < n; i++) {
            for (size_t j = 0; j < y[i].size(); j++) y[i][j] = epi == 1 ? y0[i][j] : NAN;
            if (!cache[i].empty()) std::fill(cache[i].begin(), cache[i].end(), 0.0f);
        }
        run_as(shape);
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < y[i].size(); j++) {
                vs1_differ += memcmp(&y[i][j], &y1[i][j], 4) != 0;
                vs1_max = std::max(vs1_max, (double)fabsf(y[i][j] - y1[i][j]));
            }
    } else {
        run_as(shape);
    }
    double num = 0, den = 0;
    long unwritten = 0, store_bad = 0;
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < y[i].size(); j++) {
            if (std::isnan(y[i][j])) unwritten++;
            else num += (double)(y[i][j] - want[i][j]) * (y[i][j] - want[i][j]);
            den += (double)want[i][j] * want[i][j];
        }
        if (i == 1)
            for (int m = 0; m < M; m++)
                for (int64_t r = 0; r < rows[i]; r++)
                    store_bad += cache[i][(size_t)(slot[m] * POS * rows[i] + pos[m] * rows[i] + r)] !=
                                 y[i][(size_t)(m * rows[i] + r)];
    }
    if (shape >= 4)
        printf("q8 shape %d M=%d K=%lld G=%d %s xs=%d norm=%d epilogue=%d layers=%d blocks=%s piece=%s vs_shape1 "
               "max %.3e differ %ld rel_l2 %.3e store_mismatch %ld unwritten %ld\n",
               shape, M, (long long)K, G, argv[5], xs, norm, epi, n, getenv("Q8S_BLOCKS") ? getenv("Q8S_BLOCKS") : "1",
               getenv("Q8S_PIECE") ? getenv("Q8S_PIECE") : "K", vs1_max, vs1_differ, sqrt(num / den), store_bad,
               unwritten);
    else
        printf("q8 shape %d M=%d K=%lld G=%d %s xs=%d norm=%d epilogue=%d layers=%d rel_l2 %.3e store_mismatch %ld "
               "unwritten %ld\n",
               shape, M, (long long)K, G, argv[5], xs, norm, epi, n, sqrt(num / den), store_bad, unwritten);
    return 0;
}
