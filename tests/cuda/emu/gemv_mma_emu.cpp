// Host emulation of the mma GEMV of src/tensor/cuda/cuda_gemv_mma.cu (gemv_mma_bf16,
// gemv_mma_q8 and the norm before them): the lanes' 16-byte weight chunks as A fragments, the
// permuted k of both operands, x split into bf16 halves, the 8-bit codes as bf16 and their
// groups' scales folded per 64-column step, the warps' split of K and their sums in warp
// order, the stacked layers with their epilogues and rows' stores, on warp_emu.h's threads
// under AddressSanitizer. Each case against a double reference, and against the existing
// SIMT kernels' formula (gemv_dense's per-lane chunk sums, q8_gemv's s (q.x) + b sum(x) per 16
// codes) in f32; then the batch invariance: the same kernel over the first 1, 8, M and 32 rows
// of the same x gives each row the same floats bit for bit. The kernel source is cut out of
// the .cu by run_gemv_mma_emu.sh (the asm load replaced by a plain one).
#include "gemv_emu.h"

#include <algorithm>
#include <random>

static inline uint4 mg_ld(const void *p) { return *(const uint4 *)p; }
#include "gemv_mma_kern.inc"

// The host side's choice (mma_launch_nt, mma_launch, choir_cuda_gemv_mma_norm_linear): (MT,
// NT, U) for M rows, the grid, the RMS norm fused up to GEMV_MMA_RMS_ROWS rows (one step fewer
// in flight for bf16) and through gemv_mma_rms_prep above. gamma: the fused RMS norm's (NULL:
// none); rms_gamma_null: the norm without a gamma.
static std::vector<float> g_prep;
template <int MT, int NT, int U, bool Q>
static void run_nt(const float *x, int M, int64_t K, const norm_linear_args &a, const mg_quant &qa, int epi,
                   bool rms, const float *gamma, float eps) {
    int64_t blocks = (a.start[a.n] + MT * 16 - 1) / (MT * 16);
    const int th = 32 * GEMV_MMA_WARPS;
    constexpr int UR = U > 1 ? U - 1 : 1, URQ = U > 2 ? 2 : U;
    if (rms && M > GEMV_MMA_RMS_ROWS) {
        g_prep.assign((size_t)(M * K + GEMV_MMA_MAX_ROWS), NAN);
        float *xg = g_prep.data(), *inv = xg + M * K;
        blockDim = {th, 1, 1};
        launch({M, 1, 1}, th, [&] { gemv_mma_rms_prep<GEMV_MMA_WARPS>(x, K, gamma, eps, xg, inv); });
        blockDim = {th, 1, 1};
        launch({(int)blocks, 1, 1}, th, [&] {
            if constexpr (Q) gemv_mma_q8<MT, NT, U, GEMV_MMA_WARPS, false>(xg, M, K, a, qa, epi, nullptr, 0, inv);
            else gemv_mma_bf16<MT, NT, U, GEMV_MMA_WARPS, false>(xg, M, K, a, epi, nullptr, 0, inv);
        });
        return;
    }
    blockDim = {th, 1, 1};
    launch({(int)blocks, 1, 1}, th, [&] {
        if constexpr (NT < 4) {
            if (rms) {
                if constexpr (Q) gemv_mma_q8<MT, NT, URQ, GEMV_MMA_WARPS, true>(x, M, K, a, qa, epi, gamma, eps, nullptr);
                else gemv_mma_bf16<MT, NT, UR, GEMV_MMA_WARPS, true>(x, M, K, a, epi, gamma, eps, nullptr);
                return;
            }
        }
        if constexpr (Q) gemv_mma_q8<MT, NT, U, GEMV_MMA_WARPS, false>(x, M, K, a, qa, epi, nullptr, 0, nullptr);
        else gemv_mma_bf16<MT, NT, U, GEMV_MMA_WARPS, false>(x, M, K, a, epi, nullptr, 0, nullptr);
    });
}
static void run_mma(bool q, const float *x, int M, int64_t K, const norm_linear_args &a, const mg_quant &qa, int epi,
                    bool rms, const float *gamma, float eps) {
    if (q) {
        // choir_cuda_gemv_mma_q8_shape: CHOIR_GEMV_MMA_Q8_SHAPE as the library reads it.
        const char *e = getenv("CHOIR_GEMV_MMA_Q8_SHAPE");
        const int sh = e ? atoi(e) : 2;
        if (M <= 8 && sh == 1) run_nt<1, 1, 2, true>(x, M, K, a, qa, epi, rms, gamma, eps);
        else if (M <= 8 && sh == 2) run_nt<1, 1, 3, true>(x, M, K, a, qa, epi, rms, gamma, eps);
        else if (M <= 8) run_nt<2, 1, 1, true>(x, M, K, a, qa, epi, rms, gamma, eps);
        else if (M <= 16) run_nt<1, 2, 1, true>(x, M, K, a, qa, epi, rms, gamma, eps);
        else if (M <= 24) run_nt<1, 3, 1, true>(x, M, K, a, qa, epi, rms, gamma, eps);
        else run_nt<1, 4, 1, true>(x, M, K, a, qa, epi, rms, gamma, eps);
    } else {
        if (M <= 8) run_nt<2, 1, 3, false>(x, M, K, a, qa, epi, rms, gamma, eps);
        else if (M <= 16) run_nt<2, 2, 2, false>(x, M, K, a, qa, epi, rms, gamma, eps);
        else if (M <= 24) run_nt<2, 3, 1, false>(x, M, K, a, qa, epi, rms, gamma, eps);
        else run_nt<2, 4, 1, false>(x, M, K, a, qa, epi, rms, gamma, eps);
    }
}

// args: KIND(bf16|q8) M K G SB(bf16|f16|f32) NORM(0|rms|ln) EPILOGUE(0|1|2) ROWS...
int main(int argc, char **argv) {
    if (argc < 9) return 2;
    const bool q = !strcmp(argv[1], "q8");
    const int M = atoi(argv[2]), G = atoi(argv[4]), epi = atoi(argv[7]), n = argc - 8;
    const int64_t K = atoll(argv[3]);
    const int norm = !strcmp(argv[6], "rms") ? 1 : !strcmp(argv[6], "ln") ? 2 : 0;
    const int sb = !strcmp(argv[5], "f16") ? CHOIR_DTYPE_F16 : !strcmp(argv[5], "f32") ? CHOIR_DTYPE_F32 : CHOIR_DTYPE_BF16;
    const int MX = GEMV_MMA_MAX_ROWS; // x holds 32 rows; a case uses the first M
    std::mt19937 rng(4242 + M * 131 + (int)K + 7 * n);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    std::vector<float> x((size_t)(MX * K)), gamma(K), beta(K), xn((size_t)(MX * K));
    for (auto &v : x) v = 3 * U(rng) + 0.5f;
    for (auto &v : gamma) v = 1 + 0.5f * U(rng);
    for (auto &v : beta) v = 0.3f * U(rng);
    // The norm on the emulated device (the kernel under test), and in double for the reference.
    std::vector<double> xr((size_t)(MX * K));
    if (norm == 2) {
        blockDim = {GEMV_MMA_NORM_THREADS, 1, 1};
        launch({MX, 1, 1}, GEMV_MMA_NORM_THREADS,
               [&] { gemv_mma_norm(x.data(), K, gamma.data(), beta.data(), 1e-5f, false, xn.data()); });
    } else {
        xn = x;
    }
    for (int m = 0; m < MX; m++) {
        double mean = 0, ss = 0;
        for (int64_t i = 0; i < K; i++) mean += x[m * K + i];
        mean = norm == 2 ? mean / K : 0;
        for (int64_t i = 0; i < K; i++) ss += (x[m * K + i] - mean) * (x[m * K + i] - mean);
        double inv = 1 / sqrt(ss / K + 1e-5);
        for (int64_t i = 0; i < K; i++)
            xr[m * K + i] = !norm ? x[m * K + i] : (x[m * K + i] - mean) * inv * gamma[i] + (norm == 2 ? beta[i] : 0);
    }
    double norm_err = 0, norm_den = 0;
    if (norm == 1) // the RMS norm runs inside the product: xn here only for the SIMT figure
        for (size_t i = 0; i < xr.size(); i++) xn[i] = (float)xr[i];
    for (size_t i = 0; i < xr.size(); i++) norm_err += (xn[i] - xr[i]) * (xn[i] - xr[i]), norm_den += xr[i] * xr[i];

    norm_linear_args a;
    mg_quant qa;
    memset(&a, 0, sizeof a);
    memset(&qa, 0, sizeof qa);
    a.n = n;
    qa.sb_dtype = sb;
    qa.group_shift = G == 128 ? 1 : 0;
    std::vector<std::vector<uint16_t>> Wb(n), S16(n), B16(n);
    std::vector<std::vector<uint8_t>> Wq(n);
    std::vector<std::vector<float>> S32(n), B32(n), bias(n), y0(n), y(n), wf(n), cache(n);
    std::vector<std::vector<double>> want(n);
    std::vector<int64_t> rows(n);
    enum { SLOTS = 3, POS = 40 };
    std::vector<int32_t> slot(MX), pos(MX);
    for (int m = 0; m < MX; m++) slot[m] = (2 * m + 1) % SLOTS, pos[m] = m + 3;
    double num = 0, den = 0, onum = 0;
    for (int i = 0; i < n; i++) {
        const int64_t N = rows[i] = atoll(argv[8 + i]), ng = N * (K / G);
        wf[i].resize((size_t)(N * K));
        if (q) {
            Wq[i].resize((size_t)(N * K));
            for (auto &c : Wq[i]) c = (uint8_t)rng();
            S16[i].resize(ng), B16[i].resize(ng), S32[i].resize(ng), B32[i].resize(ng);
            for (int64_t g = 0; g < ng; g++) {
                float s = (0.2f + 0.4f * (U(rng) + 1)) / 255, b = -0.4f + 0.2f * U(rng);
                S16[i][g] = f2bf(s), B16[i][g] = f2bf(b);
                if (sb == CHOIR_DTYPE_F16) S16[i][g] = 0x1c00 + (rng() & 1023), B16[i][g] = 0xb400 + (rng() & 1023);
                S32[i][g] = sb == CHOIR_DTYPE_F32 ? s : sb == CHOIR_DTYPE_F16 ? h2f(S16[i][g]) : bf2f(S16[i][g]);
                B32[i][g] = sb == CHOIR_DTYPE_F32 ? b : sb == CHOIR_DTYPE_F16 ? h2f(B16[i][g]) : bf2f(B16[i][g]);
            }
            for (int64_t r = 0; r < N; r++)
                for (int64_t c = 0; c < K; c++) {
                    int64_t g = r * (K / G) + c / G;
                    wf[i][r * K + c] = (float)((double)S32[i][g] * Wq[i][r * K + c] + B32[i][g]);
                }
            a.W[i] = Wq[i].data();
            qa.scales[i] = sb == CHOIR_DTYPE_F32 ? (const void *)S32[i].data() : (const void *)S16[i].data();
            qa.biases[i] = sb == CHOIR_DTYPE_F32 ? (const void *)B32[i].data() : (const void *)B16[i].data();
        } else {
            Wb[i].resize((size_t)(N * K));
            for (size_t j = 0; j < Wb[i].size(); j++) Wb[i][j] = f2bf(0.5f * U(rng)), wf[i][j] = bf2f(Wb[i][j]);
            a.W[i] = Wb[i].data();
        }
        bias[i].resize(N);
        for (auto &v : bias[i]) v = U(rng);
        y0[i].resize((size_t)(MX * N));
        for (auto &v : y0[i]) v = U(rng);
        a.bias[i] = i == 0 ? bias[i].data() : nullptr;
        a.start[i + 1] = a.start[i] + N;
        if (i == n - 1 && n > 1) {
            cache[i].assign((size_t)(SLOTS * POS * N), 0.0f);
            a.store[i] = {cache[i].data(), false, POS * N, N, slot.data(), pos.data()};
        }
        // The reference in double, and the SIMT kernels' f32 formula (no epilogue).
        want[i].resize((size_t)(M * N));
        for (int m = 0; m < M; m++)
            for (int64_t r = 0; r < N; r++) {
                double s = 0;
                for (int64_t c = 0; c < K; c++) s += (double)wf[i][r * K + c] * xn[m * K + c];
                double ref = s;
                s += i == 0 ? bias[i][r] : 0.0;
                if (epi == 1) s += y0[i][m * N + r];
                if (epi == 2) s = 0.5 * s * (1.0 + erf(s * 0.70710678118654752));
                want[i][m * N + r] = s;
                float lane[32] = {0};
                if (q) {
                    for (int64_t ch = 0; ch < K / 16; ch++) {
                        const float *xv = &xn[m * K + ch * 16];
                        const uint8_t *cv = &Wq[i][r * K + ch * 16];
                        float d[4], xs = 0;
                        for (int k = 0; k < 4; k++) {
                            d[k] = cv[4 * k] * xv[4 * k] + cv[4 * k + 1] * xv[4 * k + 1] + cv[4 * k + 2] * xv[4 * k + 2] +
                                   cv[4 * k + 3] * xv[4 * k + 3];
                            xs += (xv[4 * k] + xv[4 * k + 1]) + (xv[4 * k + 2] + xv[4 * k + 3]);
                        }
                        int64_t g = r * (K / G) + ch * 16 / G;
                        lane[ch % 32] += S32[i][g] * ((d[0] + d[1]) + (d[2] + d[3])) + B32[i][g] * xs;
                    }
                } else {
                    for (int64_t ch = 0; ch < K / 8; ch++)
                        for (int h = 0; h < 2; h++) {
                            const float *w = &wf[i][r * K + ch * 8 + 4 * h], *xv = &xn[m * K + ch * 8 + 4 * h];
                            lane[ch % 32] += w[0] * xv[0] + w[1] * xv[1] + w[2] * xv[2] + w[3] * xv[3];
                        }
                }
                for (int o = 16; o > 0; o >>= 1) {
                    float t[32];
                    for (int l = 0; l < 32; l++) t[l] = lane[l] + lane[l ^ o];
                    memcpy(lane, t, sizeof t);
                }
                onum += (lane[0] - ref) * (lane[0] - ref);
            }
    }
    // One run over the first Mi rows: fresh outputs (y0 where accumulating, NaN otherwise).
    auto run_rows = [&](int Mi) {
        for (int i = 0; i < n; i++) {
            y[i] = epi == 1 ? y0[i] : std::vector<float>(y0[i].size(), NAN);
            a.y[i] = y[i].data();
            if (!cache[i].empty()) std::fill(cache[i].begin(), cache[i].end(), NAN);
        }
        if (norm == 1) run_mma(q, x.data(), Mi, K, a, qa, epi, true, gamma.data(), 1e-5f);
        else run_mma(q, xn.data(), Mi, K, a, qa, epi, false, nullptr, 0);
    };
    run_rows(M);
    long unwritten = 0, store_bad = 0;
    double pnum = 0, pden = 0;
    for (int i = 0; i < n; i++) {
        for (int m = 0; m < M; m++)
            for (int64_t r = 0; r < rows[i]; r++) {
                const float v = y[i][m * rows[i] + r];
                const double w = want[i][m * rows[i] + r];
                if (std::isnan(v)) unwritten++;
                else num += (v - w) * (v - w);
                den += w * w;
                if (!cache[i].empty())
                    store_bad += memcmp(&cache[i][(size_t)(slot[m] * POS * rows[i] + pos[m] * rows[i] + r)], &v, 4) != 0;
            }
        // rows of y past M untouched
        for (size_t j = (size_t)(M * rows[i]); j < y[i].size(); j++)
            unwritten += epi == 1 ? memcmp(&y[i][j], &y0[i][j], 4) != 0 : !std::isnan(y[i][j]);
    }
    (void)pnum, (void)pden;
    // Batch invariance: rows 0 .. min - 1 of the runs over 1, 8, M and 32 rows equal bit for bit.
    std::vector<std::vector<float>> y_m = y;
    long differ = 0;
    const int Ms[3] = {1, 8, MX};
    for (int k = 0; k < 3; k++) {
        const int Mi = Ms[k];
        if (Mi == M) continue;
        run_rows(Mi);
        for (int i = 0; i < n; i++)
            for (int m = 0; m < std::min(M, Mi); m++)
                differ += memcmp(&y[i][(size_t)m * rows[i]], &y_m[i][(size_t)m * rows[i]], 4 * rows[i]) != 0;
    }
    double rel = sqrt(num / den), old_rel = 0;
    double oden = 0;
    for (int i = 0; i < n; i++)
        for (int m = 0; m < M; m++)
            for (int64_t r = 0; r < rows[i]; r++) {
                double s = 0;
                for (int64_t c = 0; c < K; c++) s += (double)wf[i][r * K + c] * xn[m * K + c];
                oden += s * s;
            }
    old_rel = sqrt(onum / oden);
    printf("mma %s M=%d K=%lld G=%d %s norm=%s epilogue=%d layers=%d rel_l2 %.3e simt_rel_l2 %.3e norm_rel %.3e "
           "store_mismatch %ld invariance_rows_differ %ld unwritten %ld\n",
           argv[1], M, (long long)K, G, argv[5], argv[6], epi, n, rel, old_rel, sqrt(norm_err / norm_den), store_bad,
           differ, unwritten);
    return 0;
}
