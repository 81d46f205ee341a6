// VibeVoice's tensor-core prefill attention (k_vv_flash_prefill, or with V2 1 the second kernel
// k_vv_flash2_prefill: 32 rows a warp, 128 a block; src/tensor/cuda/cuda_vv_flash.cu) run on the host through warp_emu.h, against a double reference over the same bf16 keys and
// values and the f32 queries: causal with an offset pos0, grouped heads, contiguous or paged
// (a shuffled page table) keys. The kernel's source is included as vv_kern.inc, cut out of
// cuda_vv_flash.cu by run_flash_emu.sh.
//
//   vv_flash_emu T POS0 HEADS KV_HEADS D PAGED WARPS Q_AMPLITUDE [V2]
#define CHOIR_VV_PAGE 128
#include "warp_emu.h"
#define VV_FA_SMEM(name) static unsigned char name[(128 + 4 * 64) * (128 + 8) * 2] __attribute__((aligned(16)))
#include "vv_kern.inc"

static uint64_t rng = 88172645463325252ull;
static float rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }

int main(int argc, char **argv) {
    if (argc < 9) return 2;
    int T = atoi(argv[1]), pos0 = atoi(argv[2]), nh = atoi(argv[3]), nkv = atoi(argv[4]), D = atoi(argv[5]);
    int paged = atoi(argv[6]), warps = atoi(argv[7]);
    float qamp = atof(argv[8]);
    int v2 = argc > 9 && atoi(argv[9]) != 0;
    int n_keys = pos0 + T, P = CHOIR_VV_PAGE, pages = (n_keys + P - 1) / P;
    int64_t ldq = (int64_t)nh * D, ldk = (int64_t)nkv * D;
    // The pool: two spare pages, the sequence's pages in a shuffled order; rows past the
    // sequence hold NaN (a page's unwritten rows), which the kernel must not let in.
    int pool_pages = paged ? pages + 2 : pages;
    std::vector<int32_t> table(pages);
    for (int i = 0; i < pages; i++) table[i] = paged ? (int32_t)((i * 5 + 3) % pool_pages) : i;
    if (paged) {  // (i * 5 + 3) mod pool_pages is a permutation when gcd(5, pool_pages) = 1
        std::vector<int> seen(pool_pages, 0);
        for (int i = 0; i < pages; i++) if (seen[table[i]]++) { printf("bad table\n"); return 2; }
    }
    std::vector<uint16_t> k((size_t)pool_pages * P * ldk, 0x7fc0), v((size_t)pool_pages * P * ldk, 0x7fc0);
    std::vector<float> q((size_t)T * ldq), o((size_t)T * ldq, NAN);
    auto row_of = [&](int key) { return (int64_t)table[key / P] * P + key % P; };
    for (int key = 0; key < n_keys; key++)
        for (int64_t e = 0; e < ldk; e++) k[row_of(key) * ldk + e] = f2bf(rnd()), v[row_of(key) * ldk + e] = f2bf(rnd());
    for (auto &x : q) x = qamp * rnd();
    auto K = (const __nv_bfloat16 *)k.data(), V = (const __nv_bfloat16 *)v.data();
    const int32_t *tab = paged ? table.data() : nullptr;
    float sl2 = 1.4426950408889634f / sqrtf((float)D);
    int BM = v2 ? 128 : 16 * warps;
    dim3v grid = {nh, (T + BM - 1) / BM, 1};
#define RUN(DD, WW) launch(grid, 32 * WW, [&] { k_vv_flash_prefill<DD, WW>(q.data(), T, K, V, pos0, tab, nh, nkv, sl2, o.data()); })
#define RUN2(DD) launch(grid, 128, [&] { k_vv_flash2_prefill<DD>(q.data(), T, K, V, pos0, tab, nh, nkv, sl2, o.data()); })
    if (v2 && D == 128) RUN2(128);
    else if (v2) RUN2(64);
    else if (D == 128 && warps == 8) RUN(128, 8);
    else if (D == 128) RUN(128, 4);
    else if (warps == 8) RUN(64, 8);
    else RUN(64, 4);
    double num = 0, den = 0;
    long bad = 0;
    int G = nh / nkv;
    for (int i = 0; i < T; i++)
        for (int h = 0; h < nh; h++) {
            int lim = pos0 + i + 1, kh = h / G;
            std::vector<double> p(lim);
            double mx = -1e300, sum = 0;
            for (int j = 0; j < lim; j++) {
                double s = 0;
                for (int d = 0; d < D; d++) s += (double)q[i * ldq + h * D + d] * bf2f(k[row_of(j) * ldk + kh * D + d]);
                p[j] = s / sqrt((double)D);
                if (p[j] > mx) mx = p[j];
            }
            for (int j = 0; j < lim; j++) sum += p[j] = exp(p[j] - mx);
            for (int d = 0; d < D; d++) {
                double r = 0;
                for (int j = 0; j < lim; j++) r += p[j] * bf2f(v[row_of(j) * ldk + kh * D + d]);
                r /= sum;
                double g = o[i * ldq + h * D + d];
                if (!std::isfinite(g)) { bad++; continue; }
                num += (g - r) * (g - r), den += r * r;
            }
        }
    printf("vv flash%s T=%d pos0=%d heads=%d/%d D=%d paged=%d warps=%d qamp=%g: rel_l2 %.3e unwritten %ld\n",
           v2 ? " v2" : "", T, pos0, nh, nkv, D, paged, v2 ? 4 : warps, qamp, sqrt(num / (den > 0 ? den : 1)), bad);
    return 0;
}
