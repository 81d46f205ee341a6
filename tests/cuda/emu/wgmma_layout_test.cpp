// The index math of the flash prefill's third kernel (k_vv_flash_wg_prefill,
// src/tensor/cuda/cuda_vv_flash_wg.cu; its pieces in cuda_wgmma.h) on the host, against
// the PTX ISA's documented wgmma layouts (section 9.7.15.5.1: register fragments of
// m64nNk16, shared memory matrix layouts, canonical layouts in CuTe terms, matrix
// descriptor format). No GPU: the tensor core is modelled from those documents, not run.
//
//  1. The 128-byte swizzle: every (row, chunk) of a tile half at a distinct 16-byte slot;
//     the 8 chunks of a row, and one chunk of 8 consecutive rows, in 8 distinct bank groups.
//  2. The loaders: the K/V tile loader's and the q stager's thread -> (row, chunk) maps
//     cover the tile exactly once; each quarter warp's 8 cp.async of 16 bytes hit 8 bank groups.
//  3. Descriptors: decoding each descriptor the kernel builds (start, LBO, SBO, base
//     offset, swizzle mode) and walking the ISA's canonical layout (K-major
//     ((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)),
//     T = 8 bf16, Swizzle<3,4,3> on the byte address) gives, for every element a wgmma
//     reads, the byte the loader wrote that element to (Q and K K-major, V MN-major).
//  4. Fragments: the accumulator map covers the m64n128 tile once, the A map the m64k16
//     slice once, both agree with the ISA figure at spot points; S's element for P's A
//     register (s, i, e) is the same thread's, at (row, 16 s + column).
//  5. Masking: the kernel's per-element test (lim0) is key >= pos0 + row + 1, its tile
//     skip (wend) skips only tiles no row of the warpgroup sees, its edge test (wlim) is
//     false only where every key of the tile is visible to every row.
//  6. One tile end to end: Q, K, V written by the loader maps into a byte array, S and
//     O += P V computed by a model wgmma that reads through the descriptors and
//     writes/reads registers through the fragment maps, against a direct double product.
//
//   bash tests/cuda/emu/run_wgmma_layout.sh
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tensor/cuda/cuda_wgmma.h"

static int fails = 0;
#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            if (fails++ < 20) {                           \
                printf("FAIL %s:%d: ", __FILE__, __LINE__); \
                printf(__VA_ARGS__);                      \
                printf("\n");                             \
            }                                             \
        }                                                 \
    } while (0)

static const uint32_t KT = 128, BM = 128, D = 128;

// Swizzle<3,4,3> on a byte address: bits 4-6 ^= bits 7-9.
static uint32_t swz128(uint32_t a) { return a ^ ((a >> 3) & 0x70u); }

struct desc_fields {
    uint32_t start, lbo, sbo, base_off, mode;
};
static desc_fields decode(uint64_t d) {
    desc_fields f;
    f.start = (uint32_t)(d & 0x3FFFu) << 4;
    f.lbo = (uint32_t)((d >> 16) & 0x3FFFu) << 4;
    f.sbo = (uint32_t)((d >> 32) & 0x3FFFu) << 4;
    f.base_off = (uint32_t)((d >> 49) & 7u);
    f.mode = (uint32_t)(d >> 62);
    return f;
}
// Byte the tensor core reads for element (mn, kk) (kk 0-15 of the k16 step) of a K-major
// 128B-swizzled bf16 operand: ((8,m),(8,2)):((64,SBO/2),(1,8)) elements.
static uint32_t kmajor_addr(uint64_t d, int mn, int kk) {
    desc_fields f = decode(d);
    uint32_t off = (uint32_t)(mn % 8) * 64u * 2u + (uint32_t)(mn / 8) * f.sbo + (uint32_t)(kk % 8) * 2u + (uint32_t)(kk / 8) * 16u;
    return swz128(f.start + off);
}
// MN-major: ((8,8,m),(8,k)):((1,8,LBO/2),(64,SBO/2)) elements; kk the reduction index.
static uint32_t mnmajor_addr(uint64_t d, int kk, int nn) {
    desc_fields f = decode(d);
    uint32_t off = (uint32_t)(nn % 8) * 2u + (uint32_t)((nn / 8) % 8) * 16u + (uint32_t)(nn / 64) * f.lbo +
                   (uint32_t)(kk % 8) * 128u + (uint32_t)(kk / 8) * f.sbo;
    return swz128(f.start + off);
}

static void test_swizzle() {
    for (uint32_t r0 = 0; r0 < KT; r0 += 8) {
        std::vector<int> seen(8 * 8, 0);
        for (uint32_t r = r0; r < r0 + 8; r++) {
            int banks_row = 0;
            for (uint32_t c = 0; c < 8; c++) {
                uint32_t o = vv_wg_swz(r, c);
                CHECK(o % 16 == 0 && o / 1024 == r0 / 8, "swz(%u,%u)=%u outside its atom", r, c, o);
                seen[(o % 1024) / 16]++;
                banks_row |= 1 << ((o / 16) % 8);
            }
            CHECK(banks_row == 0xff, "row %u: chunks share a bank group", r);
        }
        for (int i = 0; i < 64; i++) CHECK(seen[i] == 1, "atom at row %u: slot %d used %d times", r0, i, seen[i]);
        for (uint32_t c = 0; c < 8; c++) {
            int banks = 0;
            for (uint32_t r = r0; r < r0 + 8; r++) banks |= 1 << ((vv_wg_swz(r, c) / 16) % 8);
            CHECK(banks == 0xff, "chunk %u of rows %u..: shared bank group", c, r0);
        }
    }
}

static void test_loaders() {
    // K/V: c = tid + 256 k; r = c / 16, ch = c % 16 -> half ch / 8, chunk ch % 8.
    std::vector<int> hit(KT * D * 2 / 16, 0);
    for (uint32_t c0 = 0; c0 < KT * 16; c0 += 256)
        for (uint32_t tid = 0; tid < 256; tid++) {
            uint32_t c = c0 + tid, r = c / 16, ch = c % 16;
            uint32_t so = (ch >> 3) * KT * 128u + vv_wg_swz(r, ch & 7);
            CHECK(so == vv_wg_elem(KT, r, ch * 8), "loader and vv_wg_elem disagree at row %u chunk %u", r, ch);
            hit[so / 16]++;
        }
    for (size_t i = 0; i < hit.size(); i++) CHECK(hit[i] == 1, "K tile slot %zu written %d times", i, hit[i]);
    // Quarter warps (8 threads: one 128-byte phase of 16-byte stores) hit 8 bank groups.
    for (uint32_t c0 = 0; c0 < KT * 16; c0 += 8) {
        int banks = 0;
        for (uint32_t c = c0; c < c0 + 8; c++) {
            uint32_t r = c / 16, ch = c % 16;
            banks |= 1 << ((((ch >> 3) * KT * 128u + vv_wg_swz(r, ch & 7)) / 16) % 8);
        }
        CHECK(banks == 0xff, "quarter warp at %u: bank conflict", c0);
    }
    // q: c -> row c / 32, columns 4 (c % 32) .. + 3, one 8-byte store.
    std::vector<int> qhit(BM * D * 2 / 8, 0);
    for (uint32_t c = 0; c < BM * 32; c++) {
        uint32_t r = c / 32, col = (c % 32) * 4, o = vv_wg_elem(BM, r, col);
        CHECK(o % 8 == 0, "q store misaligned");
        for (uint32_t e = 1; e < 4; e++) CHECK(vv_wg_elem(BM, r, col + e) == o + 2 * e, "q columns not adjacent");
        qhit[o / 8]++;
    }
    for (size_t i = 0; i < qhit.size(); i++) CHECK(qhit[i] == 1, "Q slot %zu written %d times", i, qhit[i]);
}

static void test_descriptors() {
    const uint32_t bases[] = {0, 1024, 7 * 1024, 33 * 1024};
    for (uint32_t base : bases) {
        uint32_t sQ = base, sK = sQ + BM * D * 2, sV = sK + 2 * KT * D * 2;
        for (int s = 0; s < 8; s++) {
            for (int wg = 0; wg < 2; wg++) {
                uint64_t d = vv_wg_desc_kmajor(sQ + (uint32_t)wg * 64u * 128u, BM, s);
                desc_fields f = decode(d);
                CHECK(f.mode == 1 && f.base_off == 0 && f.sbo == 1024 && f.lbo == 16, "Q descriptor fields");
                for (int m = 0; m < 64; m++)
                    for (int kk = 0; kk < 16; kk++)
                        CHECK(kmajor_addr(d, m, kk) == sQ + vv_wg_elem(BM, 64 * wg + m, 16 * s + kk),
                              "Q wg %d k-step %d row %d k %d: read %u, written %u", wg, s, m, kk, kmajor_addr(d, m, kk),
                              sQ + vv_wg_elem(BM, 64 * wg + m, 16 * s + kk));
            }
            for (int buf = 0; buf < 2; buf++) {
                uint32_t kt = sK + buf * KT * D * 2, vt = sV + buf * KT * D * 2;
                uint64_t dk = vv_wg_desc_kmajor(kt, KT, s);
                for (int n = 0; n < 128; n++)
                    for (int kk = 0; kk < 16; kk++)
                        CHECK(kmajor_addr(dk, n, kk) == kt + vv_wg_elem(KT, n, 16 * s + kk), "K k-step %d key %d k %d", s,
                              n, kk);
                uint64_t dv = vv_wg_desc_mnmajor(vt, KT, s);
                desc_fields f = decode(dv);
                CHECK(f.mode == 1 && f.base_off == 0 && f.sbo == 1024 && f.lbo == KT * 128, "V descriptor fields");
                CHECK(f.start % 1024 == 0, "V k-step start off the swizzle period");
                for (int kk = 0; kk < 16; kk++)
                    for (int n = 0; n < 128; n++)
                        CHECK(mnmajor_addr(dv, kk, n) == vt + vv_wg_elem(KT, 16 * s + kk, n), "V k-step %d key %d col %d",
                              s, kk, n);
            }
        }
    }
}

static void test_fragments() {
    std::vector<int> acc(64 * 128, 0), a(64 * 16, 0);
    for (int tid = 0; tid < 128; tid++) {
        for (int i = 0; i < 64; i++) {
            int r, c;
            vv_wg_acc_rc(tid, i, &r, &c);
            CHECK(r >= 0 && r < 64 && c >= 0 && c < 128, "acc out of tile");
            acc[r * 128 + c]++;
        }
        for (int i = 0; i < 4; i++)
            for (int e = 0; e < 2; e++) {
                int r, c;
                vv_wg_a_rc(tid, i, e, &r, &c);
                CHECK(r >= 0 && r < 64 && c >= 0 && c < 16, "A out of slice");
                a[r * 16 + c]++;
            }
        // P's A register (s, i, e) is S's element at (row, 16 s + col) in the same thread.
        for (int s = 0; s < 8; s++)
            for (int i = 0; i < 4; i++)
                for (int e = 0; e < 2; e++) {
                    int ra, ca, rs, cs;
                    vv_wg_a_rc(tid, i, e, &ra, &ca);
                    vv_wg_acc_rc(tid, vv_wg_p_elem(s, i) + e, &rs, &cs);
                    CHECK(ra == rs && 16 * s + ca == cs, "P register (%d,%d,%d) of thread %d", s, i, e, tid);
                }
    }
    for (int i = 0; i < 64 * 128; i++) CHECK(acc[i] == 1, "acc element %d held %d times", i, acc[i]);
    for (int i = 0; i < 64 * 16; i++) CHECK(a[i] == 1, "A element %d held %d times", i, a[i]);
    // The kernel's packing: pa[j >> 1][(j & 1) 2 + r] = pack(sc[4 j + 2 r], sc[4 j + 2 r + 1]).
    for (int j = 0; j < 16; j++)
        for (int r = 0; r < 2; r++) CHECK(vv_wg_p_elem(j >> 1, (j & 1) * 2 + r) == 4 * j + 2 * r, "pa index j %d r %d", j, r);
    // Spot points of the ISA's figures (D: thread 0 d0..d4; thread 5; thread 32; thread 127's
    // last; A: thread 0's four registers; thread 37 (warp 1, g 1, t 1) register 3).
    struct { int tid, i, r, c; } dpts[] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {0, 2, 8, 0}, {0, 3, 8, 1}, {0, 4, 0, 8},
                                          {5, 0, 1, 2}, {32, 0, 16, 0}, {127, 63, 63, 127}};
    for (auto &p : dpts) {
        int r, c;
        vv_wg_acc_rc(p.tid, p.i, &r, &c);
        CHECK(r == p.r && c == p.c, "D spot thread %d d%d: (%d,%d) not (%d,%d)", p.tid, p.i, r, c, p.r, p.c);
    }
    struct { int tid, i, e, r, c; } apts[] = {{0, 0, 0, 0, 0}, {0, 0, 1, 0, 1}, {0, 1, 0, 8, 0},
                                             {0, 2, 0, 0, 8}, {0, 3, 1, 8, 9}, {37, 3, 0, 25, 10}};
    for (auto &p : apts) {
        int r, c;
        vv_wg_a_rc(p.tid, p.i, p.e, &r, &c);
        CHECK(r == p.r && c == p.c, "A spot thread %d a%d.%d: (%d,%d) not (%d,%d)", p.tid, p.i, p.e, r, c, p.r, p.c);
    }
}

static void test_masking() {
    const int Ts[] = {17, 64, 100, 127, 128, 129, 161, 300, 1024};
    const int pos0s[] = {0, 1, 45, 64, 127, 128, 700, 4096};
    for (int T : Ts)
        for (int pos0 : pos0s)
            for (int q0 = 0; q0 < T; q0 += (int)BM)
                for (int wg = 0; wg < 2; wg++) {
                    int kend = pos0 + (q0 + (int)BM < T ? q0 + (int)BM : T);
                    int ntiles = (kend + (int)KT - 1) / (int)KT;
                    int wrow = q0 + 64 * wg;
                    int wlim = wrow < T ? pos0 + wrow + 1 : 0;
                    int wend = wrow < T ? pos0 + (wrow + 64 < T ? wrow + 64 : T) : 0;
                    for (int tile = 0; tile < ntiles; tile++) {
                        int key0 = tile * (int)KT;
                        bool any = false, all = true;
                        for (int row = wrow; row < wrow + 64 && row < T; row++)
                            for (int key = key0; key < key0 + (int)KT; key++) {
                                bool vis = key <= pos0 + row;
                                any |= vis;
                                all &= vis;
                            }
                        if (wrow >= T) all = false;
                        CHECK((key0 < wend) == any, "T %d pos0 %d wg %d tile %d: skip test wrong", T, pos0, wg, tile);
                        if (key0 < wend) CHECK(!(key0 + (int)KT > wlim) <= all, "edge test claims a full tile");
                        for (int tid = 0; tid < 128; tid++) {
                            int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
                            int lim0 = pos0 + wrow + 16 * warp + g + 1;
                            for (int i = 0; i < 64; i++) {
                                int r, c;
                                vv_wg_acc_rc(tid, i, &r, &c);
                                int j = i >> 2, ii = i & 3;
                                bool kmask = key0 + 8 * j + 2 * t + (ii & 1) >= lim0 + 8 * (ii >> 1);
                                bool want = key0 + c >= pos0 + wrow + r + 1;
                                CHECK(kmask == want, "mask T %d pos0 %d tid %d i %d", T, pos0, tid, i);
                            }
                        }
                    }
                }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frnd() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
}
static uint16_t f2bf(float x) {  // round to nearest even (finite inputs)
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// One 128-key tile, one warpgroup (wg 1: rows 64..127 of the block's q), no mask: the
// model wgmma reads shared memory through the descriptors and the registers through the
// fragment maps; against a direct product over the same bf16 values.
static void test_tile() {
    const uint32_t base = 2048, sQ = base, sK = sQ + BM * D * 2, sV = sK + 2 * KT * D * 2;
    std::vector<uint8_t> smem(sV + 2 * KT * D * 2, 0xFF);
    std::vector<float> q(BM * D), k(KT * D), v(KT * D);
    for (auto &x : q) x = bf2f(f2bf(frnd()));
    for (auto &x : k) x = bf2f(f2bf(frnd()));
    for (auto &x : v) x = bf2f(f2bf(frnd()));
    const int buf = 1;
    auto put = [&](uint32_t at, float x) {
        uint16_t b = f2bf(x);
        memcpy(&smem[at], &b, 2);
    };
    auto get = [&](uint32_t at) {
        uint16_t b;
        memcpy(&b, &smem[at], 2);
        return bf2f(b);
    };
    for (uint32_t r = 0; r < BM; r++)
        for (uint32_t c = 0; c < D; c++) put(sQ + vv_wg_elem(BM, r, c), q[r * D + c]);
    for (uint32_t r = 0; r < KT; r++)
        for (uint32_t c = 0; c < D; c++) {
            put(sK + buf * KT * D * 2 + vv_wg_elem(KT, r, c), k[r * D + c]);
            put(sV + buf * KT * D * 2 + vv_wg_elem(KT, r, c), v[r * D + c]);
        }
    const int wg = 1;
    uint32_t kt = sK + buf * KT * D * 2, vt = sV + buf * KT * D * 2, sQw = sQ + wg * 64 * 128;
    // S: d[tid][i] = sum over k-steps and kk of A(m, kk) B(n, kk).
    std::vector<float> S(128 * 64, 0.0f);
    for (int s = 0; s < 8; s++) {
        uint64_t da = vv_wg_desc_kmajor(sQw, BM, s), db = vv_wg_desc_kmajor(kt, KT, s);
        for (int tid = 0; tid < 128; tid++)
            for (int i = 0; i < 64; i++) {
                int m, n;
                vv_wg_acc_rc(tid, i, &m, &n);
                float acc = s ? S[tid * 64 + i] : 0.0f;
                for (int kk = 0; kk < 16; kk++) acc += get(kmajor_addr(da, m, kk)) * get(kmajor_addr(db, n, kk));
                S[tid * 64 + i] = acc;
            }
    }
    double e2 = 0, n2 = 0;
    for (int tid = 0; tid < 128; tid++)
        for (int i = 0; i < 64; i++) {
            int m, n;
            vv_wg_acc_rc(tid, i, &m, &n);
            double want = 0;
            for (uint32_t c = 0; c < D; c++) want += (double)q[(64 * wg + m) * D + c] * k[n * D + c];
            e2 += (S[tid * 64 + i] - want) * (S[tid * 64 + i] - want), n2 += want * want;
        }
    CHECK(std::sqrt(e2 / n2) < 1e-5, "S tile rel L2 %.3e", std::sqrt(e2 / n2));
    // P = bf16(S / 8) in A registers (the kernel's packing), O = P V through the V descriptor.
    std::vector<float> P(128 * 64);
    for (int i = 0; i < 128 * 64; i++) P[i] = bf2f(f2bf(S[i] / 8));
    std::vector<float> O(128 * 64, 0.0f);
    for (int s = 0; s < 8; s++) {
        uint64_t dv = vv_wg_desc_mnmajor(vt, KT, s);
        // A operand of this k-step, gathered from every thread's registers by the A map.
        float A[64][16];
        for (int tid = 0; tid < 128; tid++)
            for (int j = 0; j < 16; j++)
                for (int r = 0; r < 2; r++) {
                    if ((j >> 1) != s) continue;
                    int i = (j & 1) * 2 + r;  // pa[s][i] = pack(sc[4 j + 2 r], sc[4 j + 2 r + 1])
                    for (int e = 0; e < 2; e++) {
                        int ra, ca;
                        vv_wg_a_rc(tid, i, e, &ra, &ca);
                        A[ra][ca] = P[tid * 64 + 4 * j + 2 * r + e];
                    }
                }
        for (int tid = 0; tid < 128; tid++)
            for (int i = 0; i < 64; i++) {
                int m, n;
                vv_wg_acc_rc(tid, i, &m, &n);
                float acc = O[tid * 64 + i];
                for (int kk = 0; kk < 16; kk++) acc += A[m][kk] * get(mnmajor_addr(dv, kk, n));
                O[tid * 64 + i] = acc;
            }
    }
    // Direct: O(m, n) = sum_key P(m, key) V(key, n), P taken from S's map.
    std::vector<float> Pm(64 * 128);
    for (int tid = 0; tid < 128; tid++)
        for (int i = 0; i < 64; i++) {
            int m, n;
            vv_wg_acc_rc(tid, i, &m, &n);
            Pm[m * 128 + n] = P[tid * 64 + i];
        }
    e2 = 0, n2 = 0;
    for (int tid = 0; tid < 128; tid++)
        for (int i = 0; i < 64; i++) {
            int m, n;
            vv_wg_acc_rc(tid, i, &m, &n);
            double want = 0;
            for (uint32_t key = 0; key < KT; key++) want += (double)Pm[m * 128 + key] * v[key * D + n];
            e2 += (O[tid * 64 + i] - want) * (O[tid * 64 + i] - want), n2 += want * want;
        }
    CHECK(std::sqrt(e2 / n2) < 1e-5, "O tile rel L2 %.3e", std::sqrt(e2 / n2));
}

int main() {
    test_swizzle();
    test_loaders();
    test_descriptors();
    test_fragments();
    test_masking();
    test_tile();
    if (fails) {
        printf("%d failures\n", fails);
        return 1;
    }
    printf("wgmma layouts: swizzle, loaders, descriptors, fragments, masking, one tile: all pass\n");
    return 0;
}
