// The bf16 flash attention kernels of src/tensor/cuda/cuda_flash.cu run on the host, for a
// machine without a GPU: each CUDA thread is a host thread, one block at a time; the warp
// collectives (shfl_xor, any, ldmatrix with and without .trans, mma.m16n8k16 bf16 -> f32) go
// through a per-warp barrier and the PTX fragment layouts; cp.async is a plain copy; ex2.approx
// is exp2f. It checks fragment layouts, masking and the online softmax against a double
// reference, not timing, the hardware's rounding or memory ordering. The kernels' source is
// included as kern.inc, cut out of cuda_flash.cu by run_flash_emu.sh (the asm helpers removed
// and replaced by the definitions here).
//
//   flash_emu TQ TK KV_HEADS CAUSAL Q_AMPLITUDE KERNEL      (2 heads of 64; KERNEL 1 to 4 as
//   choir_cuda_attention_bf16_set_kernel)
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0; u += 0x7fff + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static inline float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {{f2bf(lo)}, {f2bf(hi)}}; }
struct dim3v { int x, y, z; };
thread_local dim3v threadIdx, blockIdx;
static int g_threads;
static std::barrier<> *g_block_bar;
static std::barrier<> *g_warp_bar[8];
static uint64_t g_slot[8][32][8];
static inline int W() { return threadIdx.x >> 5; }
static inline int Ln() { return threadIdx.x & 31; }
static inline void wsync() { g_warp_bar[W()]->arrive_and_wait(); }
static inline void __syncthreads() { g_block_bar->arrive_and_wait(); }
template <class T> static T xch(T v, int src) {
    uint64_t u = 0; memcpy(&u, &v, sizeof(T)); g_slot[W()][Ln()][0] = u; wsync();
    uint64_t r = g_slot[W()][src][0]; wsync(); T o; memcpy(&o, &r, sizeof(T)); return o;
}
static inline float __shfl_xor_sync(unsigned, float v, int o) { return xch(v, Ln() ^ o); }
static inline bool __any_sync(unsigned, bool p) {
    g_slot[W()][Ln()][0] = p; wsync(); bool r = false; for (int l = 0; l < 32; l++) r |= g_slot[W()][l][0] != 0; wsync(); return r;
}
static inline float ex2_ftz(float x) { return exp2f(x); }
static inline void cp_async16(void *s, const void *g, int n) { if (n == 16) memcpy(s, g, 16); else memset(s, 0, 16); }
static inline void cp_async_commit() {}
template <int N> static inline void cp_async_wait() {}
static void ldm(uint32_t r[4], const void *smem, bool trans) {
    g_slot[W()][Ln()][1] = (uint64_t)(uintptr_t)smem; wsync();
    int l = Ln();
    for (int i = 0; i < 4; i++) {
        uint16_t e0, e1;
        if (!trans) {
            const uint16_t *row = (const uint16_t *)(uintptr_t)g_slot[W()][i * 8 + l / 4][1];
            e0 = row[2 * (l % 4)], e1 = row[2 * (l % 4) + 1];
        } else {
            const uint16_t *r0 = (const uint16_t *)(uintptr_t)g_slot[W()][i * 8 + 2 * (l % 4)][1];
            const uint16_t *r1 = (const uint16_t *)(uintptr_t)g_slot[W()][i * 8 + 2 * (l % 4) + 1][1];
            e0 = r0[l / 4], e1 = r1[l / 4];
        }
        r[i] = (uint32_t)e0 | ((uint32_t)e1 << 16);
    }
    wsync();
}
static inline void ldmatrix_x4(uint32_t r[4], const void *s) { ldm(r, s, false); }
static inline void ldmatrix_x4_trans(uint32_t r[4], const void *s) { ldm(r, s, true); }
static inline void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    uint64_t *me = g_slot[W()][Ln()];
    for (int i = 0; i < 4; i++) me[2 + i] = a[i];
    me[6] = b0, me[7] = b1;
    wsync();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        uint64_t *s = g_slot[W()][l];
        auto lo = [](uint64_t v) { return bf2f((uint16_t)(v & 0xffff)); };
        auto hi = [](uint64_t v) { return bf2f((uint16_t)((v >> 16) & 0xffff)); };
        A[g][2 * t] = lo(s[2]), A[g][2 * t + 1] = hi(s[2]);
        A[g + 8][2 * t] = lo(s[3]), A[g + 8][2 * t + 1] = hi(s[3]);
        A[g][2 * t + 8] = lo(s[4]), A[g][2 * t + 9] = hi(s[4]);
        A[g + 8][2 * t + 8] = lo(s[5]), A[g + 8][2 * t + 9] = hi(s[5]);
        B[2 * t][g] = lo(s[6]), B[2 * t + 1][g] = hi(s[6]);
        B[2 * t + 8][g] = lo(s[7]), B[2 * t + 9][g] = hi(s[7]);
    }
    wsync();
    int g = Ln() / 4, t = Ln() % 4;
    int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; i++) {
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += A[rr[i]][k] * B[k][cc[i]];
        c[i] = acc;
    }
}
#include "kern.inc"

template <class F> static void launch(dim3v grid, int threads, F f) {
    g_threads = threads;
    for (int z = 0; z < grid.z; z++)
        for (int y = 0; y < grid.y; y++)
            for (int x = 0; x < grid.x; x++) {
                std::barrier<> bb(threads);
                g_block_bar = &bb;
                for (int w = 0; w < threads / 32; w++) g_warp_bar[w] = new std::barrier<>(32);
                std::vector<std::thread> th;
                for (int i = 0; i < threads; i++)
                    th.emplace_back([=] { threadIdx = {i, 0, 0}; blockIdx = {x, y, z}; f(); });
                for (auto &t : th) t.join();
                for (int w = 0; w < threads / 32; w++) delete g_warp_bar[w];
            }
}

static uint64_t rng = 88172645463325252ull;
static float rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }

int main(int argc, char **argv) {
    int B = 2, Tq = atoi(argv[1]), Tk = atoi(argv[2]), H = 2, Hkv = atoi(argv[3]), causal = atoi(argv[4]);
    float qamp = atof(argv[5]);
    int kern = atoi(argv[6]);
    const int D = 64;
    int64_t ldq = H * D, ldk = Hkv * D, qb = Tq * ldq, kb = Tk * ldk;
    std::vector<uint16_t> q(B * qb), k(B * kb), v(B * kb), o(B * qb, 0xFFFF);
    for (auto &x : q) x = f2bf(qamp * rnd());
    for (auto &x : k) x = f2bf(rnd());
    for (auto &x : v) x = f2bf(rnd());
    float scale = 0.125f, sl2 = scale * 1.4426950408889634f;
    int rep = H / Hkv;
    auto Q = (const __nv_bfloat16 *)q.data(); auto K = (const __nv_bfloat16 *)k.data(); auto V = (const __nv_bfloat16 *)v.data();
    auto O = (__nv_bfloat16 *)o.data();
    if (kern == 1) {
        constexpr int BM = 16 * 2 * 4;
        launch({(Tq + BM - 1) / BM, H, B}, 128, [&] { k_flash_bf16<64, 2>(Q, ldq, qb, K, ldk, V, ldk, kb, O, ldq, qb, Tq, Tk, rep, sl2, causal); });
    } else if (kern == 2) {
        constexpr int BM = 16 * 2 * 4;
        launch({(Tq + BM - 1) / BM, H, B}, 128, [&] { k_flash2_bf16<64, 2, 4>(Q, ldq, qb, K, ldk, V, ldk, kb, O, ldq, qb, Tq, Tk, rep, sl2, causal); });
    } else if (kern == 3) {
        constexpr int BM = 16 * 2 * 8;
        launch({(Tq + BM - 1) / BM, H, B}, 256, [&] { k_flash2_bf16<64, 2, 8>(Q, ldq, qb, K, ldk, V, ldk, kb, O, ldq, qb, Tq, Tk, rep, sl2, causal); });
    } else {
        constexpr int BM = 16 * 1 * 8;
        launch({(Tq + BM - 1) / BM, H, B}, 256, [&] { k_flash2_bf16<64, 1, 8>(Q, ldq, qb, K, ldk, V, ldk, kb, O, ldq, qb, Tq, Tk, rep, sl2, causal); });
    }
    // reference in double
    double num = 0, den = 0; long bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                int lim = causal ? i + (Tk - Tq) + 1 : Tk;
                if (lim > Tk) lim = Tk;
                std::vector<double> p(Tk > 0 ? Tk : 1); double mx = -1e300, sum = 0;
                for (int j = 0; j < lim; j++) {
                    double s = 0;
                    for (int d = 0; d < D; d++) s += (double)bf2f(q[b * qb + i * ldq + h * D + d]) * bf2f(k[b * kb + j * ldk + (h / rep) * D + d]);
                    p[j] = s * scale; if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j < lim; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int d = 0; d < D; d++) {
                    double r = 0;
                    for (int j = 0; j < lim; j++) r += p[j] * bf2f(v[b * kb + j * ldk + (h / rep) * D + d]);
                    r = sum > 0 ? r / sum : 0;
                    uint16_t gv = o[b * qb + i * ldq + h * D + d];
                    if (gv == 0xFFFF) bad++;
                    double g = bf2f(gv);
                    num += (g - r) * (g - r); den += r * r;
                }
            }
    printf("kernel %d Tq=%d Tk=%d Hkv=%d causal=%d qamp=%g: rel_l2 %.3e unwritten %ld\n", kern, Tq, Tk, Hkv, causal, qamp, sqrt(num / (den > 0 ? den : 1)), bad);
    return 0;
}
