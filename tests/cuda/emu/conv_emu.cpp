// The implicit-GEMM convolution (k_ig_conv of src/tensor/cuda/cuda_conv.cu, and its prepass
// k_ig_prepass of cuda_conv_adain.cu) run on the host through warp_emu.h: every configuration the
// options pick (choir_cuda_conv_set_options) on the same inputs, in the three precision modes, with
// and without the fused AdaIN + Snake pre-activation, a residual, pieces of different lengths,
// channel counts that are not multiples of a chunk and Cout past one 128-row tile. Prints, per
// case, how many outputs of the configurations that should equal the default's bit for bit (wide,
// and the prepass in its stages and shapes) differ from it (bit patterns; the emulation sums each
// mma in a fixed order, so the same products in the same order give the same floats), each
// configuration's relative L2 against a double reference over the same rounded operands (only the
// f32 accumulation differs there), and how many outputs were left unwritten (y starts as NaN). The
// kernel sources are included whole with CHOIR_IG_EMU (their host halves and PTX pieces left out);
// twins of the PTX pieces are here.
//
//   conv_emu MODE(0 bf16, 1 tf32, 2 tf32x3) PRO B CIN COUT T K DIL RESIDUAL
#define CHOIR_IG_EMU 1
#include <algorithm>

#include "warp_emu.h"

alignas(16) static unsigned char g_emu_smem[232448];
#define IG_DYN_SMEM(name) unsigned char *name = g_emu_smem
static dim3v blockDim = {1, 1, 1};

static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
template <class T> static inline T __ldg(const T *p) { return *p; }
#define __sinf(x) sinf(x) // glibc declares __sinf but does not export it
// cvt.rna.tf32.f32: nearest, ties away from zero, 10 mantissa bits kept
static inline uint32_t to_tf32(float v) {
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7f800000) == 0x7f800000) return u;
    return (u + 0x1000u) & 0xffffe000u;
}
static inline uint32_t smem_addr(const void *p) { return (uint32_t)((const unsigned char *)p - g_emu_smem); }
static inline void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    uint32_t r[4];
    ldmatrix_x4(r, g_emu_smem + addr);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
static inline void ig_cp_async16(uint32_t dst, const void *src) { memcpy(g_emu_smem + dst, src, 16); }
static inline void ig_cp_async16_zfill(uint32_t dst, const void *src, bool in) {
    if (in) memcpy(g_emu_smem + dst, src, 16);
    else memset(g_emu_smem + dst, 0, 16);
}
static inline void ig_st_frame(void *dst, const uint32_t *w) { memcpy(dst, w, 32); }
static inline void ig_cp_commit() {}
template <int N> static inline void ig_cp_wait() {}
static inline void ig_prefetch_l2(const void *) {}

// mma.m16n8k8 tf32 -> f32: A a0 (g, t) a1 (g + 8, t) a2 (g, t + 4) a3 (g + 8, t + 4); B b0 (k t,
// n g) b1 (k t + 4, n g); C as m16n8k16. The operands' low 13 bits are ignored as the hardware's.
static void mma_tf32(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    uint64_t *me = g_slot[W()][Ln()];
    for (int i = 0; i < 4; i++) me[2 + i] = a[i];
    me[6] = b[0], me[7] = b[1];
    wsync();
    float A[16][8], B[8][8];
    auto f = [](uint64_t v) { return __uint_as_float((uint32_t)v & 0xffffe000u); };
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        uint64_t *s = g_slot[W()][l];
        A[g][t] = f(s[2]), A[g + 8][t] = f(s[3]), A[g][t + 4] = f(s[4]), A[g + 8][t + 4] = f(s[5]);
        B[t][g] = f(s[6]), B[t + 4][g] = f(s[7]);
    }
    wsync();
    int g = Ln() / 4, t = Ln() % 4;
    int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; i++) {
        float acc = c[i];
        for (int k = 0; k < 8; k++) acc += A[rr[i]][k] * B[k][cc[i]];
        c[i] = acc;
    }
}
template <int MODE> static inline void mma(float *c, const uint32_t *a, const uint32_t *b) {
    if constexpr (MODE == 0) mma_bf16(c, a, b[0], b[1]);
    else mma_tf32(c, a, b);
}

// the epilogue's AdaIN statistics shuffle doubles
static inline double __shfl_xor_sync(unsigned, double v, int o) { return xch(v, Ln() ^ o); }

#include "tensor/cuda/cuda_conv.cu"
#include "tensor/cuda/cuda_conv_adain.cu"

static uint64_t rng = 88172645463325252ull;
static float rnd(float lo, float hi) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

// The configurations, as ig_plan_for picks them (cuda_conv.cu): 0 the default; 1 wide (128 x 256,
// three weight stages, x two chunks ahead); 2 wide with the SFU's sin; 3 the default with it; 4-7
// the prepass, then the convolution from its frames in the default shape with two stages, three,
// the wide shape with three, and the default with three after a prepass with the SFU's sin.
enum { NCONF = 8 };
static const char *conf_name[NCONF] = {"v1", "wide", "wide-fs", "fs", "pre2", "pre3", "pre-wide", "pre-fs"};
static bool conf_fast(int v) { return v == 2 || v == 3 || v == 7; }
static bool conf_applies(int mode, bool pro, int v) {
    if (v >= 2 && !pro) return false;
    if (mode == IG_TF32X3 && (v == 1 || v == 2 || v == 3 || v == 6 || v == 7)) return false;
    return true;
}

template <int MODE, int XSRC, int SHAPE, int STAGES, bool FAST> static void conv(const ig_args &a, int B) {
    const int64_t tt = (a.Tout + IG_BN(SHAPE) - 1) / IG_BN(SHAPE);
    if (a.stats)
        launch({(int)(tt * a.mtiles), 1, B}, IG_THREADS(MODE, SHAPE), [&] { k_ig_conv<MODE, XSRC, SHAPE, STAGES, FAST, true>(a); });
    else
        launch({(int)(tt * a.mtiles), 1, B}, IG_THREADS(MODE, SHAPE),
               [&] { k_ig_conv<MODE, XSRC, SHAPE, STAGES, FAST, false>(static_cast<const ig_base &>(a)); });
}

template <int MODE, bool FAST> static void prepass(const ig_args &a, int B, void *xp) {
    blockDim = {64, 1, 1};
    launch({(int)((a.T + 255) / 256), B * a.nchunk, 1}, 64,
           [&] { k_ig_prepass<MODE, FAST>(a.x, a.coef, a.in_lens, a.Cin, a.T, a.nchunk, xp); });
    blockDim = {1, 1, 1};
}

template <int MODE, bool PRO> static void run(ig_args a, int B, int v, std::vector<uint32_t> &xp) {
    constexpr int D = IG_SHAPE_DEFAULT, W = IG_SHAPE_WIDE;
    constexpr int X = PRO ? IG_X_PRO : IG_X_PLAIN;
    if (v == 0) return conv<MODE, X, D, 2, false>(a, B);
    if constexpr (MODE != IG_TF32X3) {
        if (v == 1) return conv<MODE, X, W, 3, false>(a, B);
    }
    if constexpr (PRO && MODE != IG_TF32X3) {
        if (v == 2) return conv<MODE, X, W, 3, true>(a, B);
        if (v == 3) return conv<MODE, X, D, 2, true>(a, B);
        if (v == 7) {
            prepass<MODE, true>(a, B, xp.data());
            a.xp = xp.data(), a.x = nullptr, a.coef = nullptr, a.in_lens = nullptr;
            return conv<MODE, IG_X_PRE, D, 3, false>(a, B);
        }
    }
    if constexpr (PRO) {
        prepass<MODE, false>(a, B, xp.data());
        a.xp = xp.data(), a.x = nullptr, a.coef = nullptr, a.in_lens = nullptr;
        if (v == 4) return conv<MODE, IG_X_PRE, D, 2, false>(a, B);
        if (v == 5) return conv<MODE, IG_X_PRE, D, 3, false>(a, B);
        if constexpr (MODE != IG_TF32X3)
            if (v == 6) return conv<MODE, IG_X_PRE, W, 3, false>(a, B);
    }
}

static float round_mode(int mode, float v) {
    if (mode == IG_BF16) return bf2f(f2bf(v));
    if (mode == IG_TF32) return __uint_as_float(to_tf32(v));
    return v;
}

int main(int argc, char **argv) {
    if (argc < 10) return 2;
    const int mode = atoi(argv[1]);
    const bool pro = atoi(argv[2]) != 0;
    const int B = atoi(argv[3]), Cin = atoi(argv[4]), Cout = atoi(argv[5]), T = atoi(argv[6]);
    const int K = atoi(argv[7]), dil = atoi(argv[8]);
    const bool has_res = atoi(argv[9]) != 0;
    const int pad = (K - 1) * dil / 2, Tout = T + 2 * pad - dil * (K - 1);
    const int CK = mode == IG_BF16 ? 16 : 8, nchunk = (Cin + CK - 1) / CK;
    const int mtiles = (Cout + IG_BM - 1) / IG_BM;
    std::vector<float> x((size_t)B * Cin * T), w((size_t)Cout * Cin * K), bias(Cout);
    std::vector<float> coef((size_t)B * Cin * IG_COEF), res((size_t)B * Cout * Tout);
    std::vector<int32_t> in_lens(B), out_lens(B);
    for (auto &v : x) v = rnd(-1, 1);
    const float wb = 1.0f / sqrtf((float)(Cin * K));
    for (auto &v : w) v = rnd(-wb, wb);
    for (auto &v : bias) v = rnd(-0.5f, 0.5f);
    for (auto &v : res) v = rnd(-1, 1);
    for (int b = 0; b < B; b++) {
        in_lens[b] = T - 37 * b > 1 ? T - 37 * b : 1;
        out_lens[b] = in_lens[b] < Tout ? in_lens[b] : Tout;
        for (int c = 0; c < Cin; c++) {
            float *cf = &coef[((size_t)b * Cin + c) * IG_COEF];
            cf[0] = rnd(-0.1f, 0.1f), cf[1] = rnd(0.5f, 1.5f), cf[2] = rnd(-0.3f, 0.3f);
            cf[3] = rnd(0.5f, 1.5f), cf[4] = rnd(-0.5f, 0.5f), cf[5] = rnd(0.3f, 3.0f);
            cf[6] = 1.0f / cf[5], cf[7] = 0.0f;
        }
    }
    // the packed weight, through the kernel that packs it on the device
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); i++) w16[i] = f2bf(w[i]);
    const int64_t npack = (int64_t)mtiles * IG_BM * nchunk * K * CK;
    std::vector<uint32_t> wp((size_t)npack);
    gridDim = {1, 1, 1};
    if (mode == IG_BF16) k_ig_pack<IG_BF16>(w16.data(), Cout, Cin, K, nchunk, npack, wp.data());
    else if (mode == IG_TF32) k_ig_pack<IG_TF32>(w.data(), Cout, Cin, K, nchunk, npack, wp.data());
    else k_ig_pack<IG_TF32X3>(w.data(), Cout, Cin, K, nchunk, npack, wp.data());

    // y[v]: configuration v (those that apply), each with the pre-activation also writing the
    // epilogue's AdaIN statistics st[v] over stats_lens (past Tout for item 0: clamped; shorter
    // than out_lens for the others), slots starting as NaN
    std::vector<float> y[NCONF];
    const int64_t stiles = IG_STAT_TILES(Tout);
    std::vector<double> st[NCONF];
    std::vector<int32_t> stats_lens(B);
    for (int b = 0; b < B; b++) stats_lens[b] = b == 0 ? Tout + 7 : (out_lens[b] > 5 ? out_lens[b] - 5 : 0);
    std::vector<uint32_t> xp((size_t)B * nchunk * T * IG_XP_FRAME / 4, 0xdeadbeefu);
    for (int v = 0; v < NCONF; v++) {
        if (!conf_applies(mode, pro, v)) continue;
        y[v] = has_res ? res : std::vector<float>(res.size(), NAN);
        ig_args a = {};
        static_cast<ig_base &>(a) = {x.data(), nullptr, wp.data(), bias.data(), out_lens.data(),
                                     pro ? in_lens.data() : nullptr, pro ? coef.data() : nullptr,
                                     has_res ? y[v].data() : nullptr, y[v].data(),
                                     Cin, T, Cout, Tout, K, dil, pad, nchunk, mtiles};
        // the statistics where the fused operation asks for them (its input has AdaIN)
        st[v].assign((size_t)B * Cout * stiles * 2, NAN);
        if (pro) a.stats = st[v].data(), a.stats_lens = stats_lens.data();
        if (mode == IG_BF16) pro ? run<IG_BF16, true>(a, B, v, xp) : run<IG_BF16, false>(a, B, v, xp);
        else if (mode == IG_TF32) pro ? run<IG_TF32, true>(a, B, v, xp) : run<IG_TF32, false>(a, B, v, xp);
        else pro ? run<IG_TF32X3, true>(a, B, v, xp) : run<IG_TF32X3, false>(a, B, v, xp);
    }
    // the default configuration without the statistics (the kernel as before them): the same
    // bits as with them
    long nostats_differ = 0;
    if (pro) {
        std::vector<float> y0 = has_res ? res : std::vector<float>(res.size(), NAN);
        ig_args a = {};
        static_cast<ig_base &>(a) = {x.data(), nullptr, wp.data(), bias.data(), out_lens.data(),
                                     in_lens.data(), coef.data(), has_res ? y0.data() : nullptr,
                                     y0.data(), Cin, T, Cout, Tout, K, dil, pad, nchunk, mtiles};
        if (mode == IG_BF16) run<IG_BF16, true>(a, B, 0, xp);
        else if (mode == IG_TF32) run<IG_TF32, true>(a, B, 0, xp);
        else run<IG_TF32X3, true>(a, B, 0, xp);
        for (size_t i = 0; i < y0.size(); i++) nostats_differ += __float_as_uint(y0[i]) != __float_as_uint(y[0][i]);
    }
    // the reference: the kernels' staged operands (pre-activation as adain_snake, the mode's
    // rounding; tf32x3 exact), summed in double
    std::vector<double> xq(x.size());
    for (int b = 0; b < B; b++)
        for (int c = 0; c < Cin; c++)
            for (int t = 0; t < T; t++) {
                size_t i = ((size_t)b * Cin + c) * T + t;
                float v = x[i];
                if (pro) v = t < in_lens[b] ? adain_snake(v, &coef[((size_t)b * Cin + c) * IG_COEF]) : 0.0f;
                xq[i] = round_mode(mode, v);
            }
    std::vector<double> wq(w.size());
    for (size_t i = 0; i < w.size(); i++) wq[i] = mode == IG_BF16 ? bf2f(w16[i]) : round_mode(mode, w[i]);
    double num[NCONF] = {}, den = 0;
    long differ = 0, same_total = 0, unwritten = 0;
    for (int v = 1; v < NCONF; v++)
        if (conf_applies(mode, pro, v) && !conf_fast(v)) same_total += (long)res.size();
    for (int b = 0; b < B; b++)
        for (int co = 0; co < Cout; co++)
            for (int t = 0; t < Tout; t++) {
                double r = 0;
                if (t < out_lens[b]) {
                    r = bias[co];
                    for (int c = 0; c < Cin; c++)
                        for (int k = 0; k < K; k++) {
                            int ts = t + k * dil - pad;
                            if (ts < 0 || ts >= T) continue;
                            r += wq[((size_t)co * Cin + c) * K + k] * xq[((size_t)b * Cin + c) * T + ts];
                        }
                }
                size_t i = ((size_t)b * Cout + co) * Tout + t;
                if (has_res) r += res[i];
                den += r * r;
                for (int v = 0; v < NCONF; v++) {
                    if (!conf_applies(mode, pro, v)) continue;
                    if (!std::isfinite(y[v][i])) { unwritten++; continue; }
                    num[v] += (y[v][i] - r) * (y[v][i] - r);
                    if (v && !conf_fast(v) && __float_as_uint(y[0][i]) != __float_as_uint(y[v][i])) differ++;
                }
            }
    // the statistics against double sums of the values each configuration stored (the same
    // doubles in another order: relative 1e-12 at most)
    double st_err = 0;
    long st_unset = 0;
    for (int v = 0; v < NCONF && pro; v++) {
        if (!conf_applies(mode, pro, v)) continue;
        for (int b = 0; b < B; b++) {
            const int64_t n = std::min<int64_t>(std::max<int64_t>(stats_lens[b], 0), Tout);
            for (int co = 0; co < Cout; co++)
                for (int64_t i = 0; i < stiles; i++) {
                    double rs = 0, rq = 0, as = 0, aq = 0;
                    for (int64_t t = i * IG_STAT_FRAMES; t < (i + 1) * IG_STAT_FRAMES && t < n; t++) {
                        const double e = y[v][((size_t)b * Cout + co) * Tout + t];
                        rs += e, rq += e * e, as += fabs(e), aq += e * e;
                    }
                    const double *g = &st[v][(((size_t)b * Cout + co) * stiles + i) * 2];
                    if (!std::isfinite(g[0]) || !std::isfinite(g[1])) { st_unset++; continue; }
                    st_err = std::max(st_err, fabs(g[0] - rs) / (as > 0 ? as : 1));
                    st_err = std::max(st_err, fabs(g[1] - rq) / (aq > 0 ? aq : 1));
                }
        }
    }
    static const char *names[] = {"bf16", "tf32", "tf32x3"};
    double d = den > 0 ? den : 1;
    printf("conv %-6s pro=%d B=%d %d->%d T=%d k%d d%d res=%d: differ from v1 in %ld of %ld; rel_l2",
           names[mode], pro, B, Cin, Cout, T, K, dil, has_res, differ, same_total);
    for (int v = 0; v < NCONF; v++)
        if (conf_applies(mode, pro, v)) printf(" %s%s %.3e", conf_name[v], conf_fast(v) ? "(fast)" : "", sqrt(num[v] / d));
    printf(" stats_err %.3e stats_unset %ld nostats_differ %ld unwritten %ld\n", st_err, st_unset,
           nostats_differ, unwritten);
    return 0;
}
