// VibeVoice's decode attention v2 (k_vv_att_dec and k_vv_att_dec_combine, src/tensor/cuda/
// cuda_vibevoice.cu, CHOIR_VV_ATT_V2=1) run on the host through warp_emu.h against a double
// reference over the same keys and values: a few query rows at positions pos0 + i or read from
// memory (scattered, one past the cache: clamped), f32 or bf16 K/V, contiguous or paged (each
// row its own shuffled table), grouped heads, D 64 and 128, the splits combined by the last block
// (counters) or by the combine launch. Pool rows no row may see hold NaN. The kernels' source is
// included as dec_kern.inc, cut out of cuda_vibevoice.cu by run_vv_dec_emu.sh.
//
// With DEEP 1 it also runs CHOIR_VV_ATT_V2_DEEP's ring (the kernel's NB and U as att_dec picks them)
// and counts the outputs that differ from v2's in any bit (v2_differ; 0 expected: the same sums).
// With DEEP 2 it runs the tensor-core kernel (k_vv_att_dec_tc, CHOIR_VV_ATT_TC: bf16, D 128) instead;
// its rel_l2 is its own (q and the probabilities in bf16), v2_differ is not counted.
//
//   vv_dec_emu T POS0 HEADS KV_HEADS D BF16 PAGED SPLIT FOLD SCATTERED Q_AMPLITUDE [DEEP]
#include "warp_emu.h"
#include <algorithm>
#include <type_traits>
#define VV_SPLIT 128
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
static inline void __syncwarp() { wsync(); }
static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v) { static std::mutex mu; std::lock_guard<std::mutex> g(mu); int o = *p; *p += v; return o; }
static inline float __shfl_sync(unsigned, float v, int src) { return xch(v, src & 31); }
static inline float vv_warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
    unsigned r = 0;
    for (int b = 0; b < 4; b++) r |= (unsigned)((v >> (8 * ((s >> (4 * b)) & 7))) & 0xff) << (8 * b);
    return r;
}
static inline float vv_warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
#include "dec_kern.inc"

static uint64_t rng = 88172645463325252ull;
static float rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }

template <typename KV, int NB, int U>
static void run(int D, int G, dim3v g1, dim3v g2, const float *q, const KV *k, const KV *v, int64_t pos0, const int32_t *pos,
                const int32_t *tab, int64_t stride, int64_t max_keys, int nh, int nkv, float scale, int S, int nsplit,
                float *part, int *done, float *out) {
#define DEC(DD, GG)                                                                                                   \
    do {                                                                                                              \
        launch(g1, VV_DEC_THREADS, [&] { k_vv_att_dec<DD, KV, GG, NB, U>(q, k, v, pos0, pos, tab, stride, max_keys, nh, nkv, \
                                                                scale, S, nsplit, part, done, out); });              \
        if (!done)                                                                                                    \
            launch(g2, VV_DEC_THREADS, [&] { k_vv_att_dec_combine<DD, GG>(part, pos0, pos, max_keys, nh, nkv, S,       \
                                                                         nsplit, out); });                           \
    } while (0)
    if (D == 128 && G == 7) DEC(128, 7);
    else if (D == 128) DEC(128, 8);
    else DEC(64, 8);
#undef DEC
}

int main(int argc, char **argv) {
    if (argc < 12) return 2;
    int T = atoi(argv[1]), pos0 = atoi(argv[2]), nh = atoi(argv[3]), nkv = atoi(argv[4]), D = atoi(argv[5]);
    int bf16 = atoi(argv[6]), paged = atoi(argv[7]), S = atoi(argv[8]), fold = atoi(argv[9]), scattered = atoi(argv[10]);
    float qamp = atof(argv[11]);
    int deep = argc > 12 ? atoi(argv[12]) : 0;
    int G = nh / nkv, P = VV_SPLIT;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    // Positions: pos0 + i, or scattered over the cache of pos0 + T rows with one past it.
    int64_t max_keys = pos0 + T;
    std::vector<int32_t> pos(T);
    for (int i = 0; i < T; i++) pos[i] = pos0 + i;
    if (scattered)
        for (int i = 0; i < T; i++) pos[i] = i == T - 1 && T > 1 ? (int32_t)max_keys + 5 : (int32_t)((i * 7919 + 13) % max_keys);
    int pages = (int)((max_keys + P - 1) / P), pool_pages = paged ? pages + 3 : pages;
    // Each row's table a permutation of the pool's pages ((r * 5 + 3 + 7 i) mod pool when coprime).
    std::vector<int32_t> table((size_t)T * pages);
    for (int i = 0; i < T; i++) {
        std::vector<int> perm(pool_pages);
        for (int r = 0; r < pool_pages; r++) perm[r] = r;
        if (paged) { uint64_t s = 1234 + i; for (int r = pool_pages - 1; r > 0; r--) { s = s * 6364136223846793005ull + 1; std::swap(perm[r], perm[(s >> 33) % (r + 1)]); } }
        for (int r = 0; r < pages; r++) table[(size_t)i * pages + r] = perm[r];
    }
    auto row_of = [&](int i, int64_t key) { return (int64_t)table[(size_t)(paged ? i : 0) * pages + key / P] * P + key % P; };
    // The pool: NaN everywhere, then each row's visible keys written (rows that share pool rows get the
    // same values: a key's value depends on its pool row).
    size_t n = (size_t)pool_pages * P * ldk;
    std::vector<float> kf(n, NAN), vf(n, NAN);
    std::vector<char> set((size_t)pool_pages * P, 0);
    for (int i = 0; i < T; i++) {
        int64_t nk = std::min<int64_t>(pos[i] + 1, max_keys);
        for (int64_t key = 0; key < nk; key++) {
            int64_t r = row_of(i, key);
            if (set[r]++) continue;
            for (int64_t e = 0; e < ldk; e++) kf[r * ldk + e] = rnd(), vf[r * ldk + e] = rnd();
        }
    }
    std::vector<uint16_t> kb(n), vb(n);
    for (size_t e = 0; e < n; e++) {
        kb[e] = f2bf(kf[e]), vb[e] = f2bf(vf[e]);
        if (bf16) kf[e] = bf2f(kb[e]), vf[e] = bf2f(vb[e]);
    }
    std::vector<float> q((size_t)T * ldq), o((size_t)T * ldq, NAN);
    for (auto &x : q) x = qamp * rnd();
    int nsplit = (int)((max_keys + S - 1) / S);
    std::vector<float> part((size_t)T * nh * nsplit * (D + 2), NAN);
    std::vector<int> done((size_t)T * nkv, 0);
    dim3v g1 = {nsplit, nkv, T}, g2 = {nkv, T, 1};
    float scale = 1.0f / sqrtf((float)D);
    const int32_t *tp = paged ? table.data() : nullptr;
    const int32_t *pp = scattered ? pos.data() : nullptr;
    int *dn = fold ? done.data() : nullptr;
    // v2's ring (2 tiles, 1 a step) into o2; with DEEP, CHOIR_VV_ATT_V2_DEEP's (bf16: 4 tiles, 2 a step;
    // f32: 3 tiles, 1 a step, as att_dec launches them) into o, from fresh partials.
    std::vector<float> o2((size_t)T * ldq, NAN);
    if (bf16)
        run<__nv_bfloat16, 2, 1>(D, G, g1, g2, q.data(), (const __nv_bfloat16 *)kb.data(), (const __nv_bfloat16 *)vb.data(), pos0,
                                 pp, tp, pages, max_keys, nh, nkv, scale, S, nsplit, part.data(), dn, o2.data());
    else
        run<float, 2, 1>(D, G, g1, g2, q.data(), kf.data(), vf.data(), pos0, pp, tp, pages, max_keys, nh, nkv, scale, S, nsplit,
                         part.data(), dn, o2.data());
    if (deep == 2) {
        std::fill(part.begin(), part.end(), NAN);
        if (!bf16 || D != 128) { fprintf(stderr, "the tensor-core kernel takes bf16 and D 128\n"); return 2; }
        const __nv_bfloat16 *kp = (const __nv_bfloat16 *)kb.data(), *vp = (const __nv_bfloat16 *)vb.data();
        float *pt = part.data(), *op = o.data();
        auto tc = [&](auto gm) {
            constexpr int GG = decltype(gm)::value;
            launch(g1, VV_DEC_THREADS, [&] { k_vv_att_dec_tc<GG>(q.data(), kp, vp, pos0, pp, tp, pages, max_keys, nh, nkv,
                                                                 scale, S, nsplit, pt, dn, op); });
            if (!dn) launch(g2, VV_DEC_THREADS, [&] { k_vv_att_dec_combine<128, GG>(pt, pos0, pp, max_keys, nh, nkv, S, nsplit, op); });
        };
        if (G == 7) tc(std::integral_constant<int, 7>{});
        else tc(std::integral_constant<int, 8>{});
    } else if (deep) {
        std::fill(part.begin(), part.end(), NAN);
        if (bf16)
            run<__nv_bfloat16, 4, 2>(D, G, g1, g2, q.data(), (const __nv_bfloat16 *)kb.data(), (const __nv_bfloat16 *)vb.data(),
                                     pos0, pp, tp, pages, max_keys, nh, nkv, scale, S, nsplit, part.data(), dn, o.data());
        else
            run<float, 3, 1>(D, G, g1, g2, q.data(), kf.data(), vf.data(), pos0, pp, tp, pages, max_keys, nh, nkv, scale, S,
                             nsplit, part.data(), dn, o.data());
    } else {
        o = o2;
    }
    long v2_differ = 0;
    for (size_t e = 0; deep != 2 && e < o.size(); e++) v2_differ += memcmp(&o[e], &o2[e], 4) != 0;
    double num = 0, den = 0, num2 = 0;
    long bad = 0;
    for (int i = 0; i < T; i++)
        for (int h = 0; h < nh; h++) {
            int64_t lim = std::min<int64_t>(pos[i] + 1, max_keys);
            int kh = h / G;
            std::vector<double> p(lim);
            double mx = -1e300, sum = 0;
            for (int64_t j = 0; j < lim; j++) {
                double s = 0;
                for (int d = 0; d < D; d++) s += (double)q[i * ldq + h * D + d] * kf[row_of(i, j) * ldk + kh * D + d];
                p[j] = s / sqrt((double)D);
                mx = std::max(mx, p[j]);
            }
            for (int64_t j = 0; j < lim; j++) sum += p[j] = exp(p[j] - mx);
            for (int d = 0; d < D; d++) {
                double r = 0;
                for (int64_t j = 0; j < lim; j++) r += p[j] * vf[row_of(i, j) * ldk + kh * D + d];
                r /= sum;
                double g = o[i * ldq + h * D + d], g2 = o2[i * ldq + h * D + d];
                if (!std::isfinite(g) || !std::isfinite(g2)) { bad++; continue; }
                num += (g - r) * (g - r), den += r * r, num2 += (g2 - r) * (g2 - r);
            }
        }
    long counters = 0;
    for (int c : done) counters += c != 0;
    printf("vv dec T=%d pos0=%d heads=%d/%d D=%d bf16=%d paged=%d S=%d splits=%d fold=%d scattered=%d qamp=%g deep=%d: v2_rel_l2 %.3e "
           "rel_l2 %.3e v2_differ %ld counters_left %ld unwritten %ld\n", T, pos0, nh, nkv, D, bf16, paged, S, nsplit, fold,
           scattered, qamp, deep, sqrt(num2 / (den > 0 ? den : 1)), sqrt(num / (den > 0 ? den : 1)), v2_differ, counters, bad);
    return 0;
}
