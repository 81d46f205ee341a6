// The bf16 flash attention kernels of src/tensor/cuda/cuda_flash.cu run on the host, for a
// machine without a GPU: each CUDA thread is a host thread, one block at a time; the warp
// collectives (shfl_xor, any, ldmatrix with and without .trans, mma.m16n8k16 bf16 -> f32) go
// through a per-warp barrier and the PTX fragment layouts; cp.async is a plain copy; ex2.approx
// is exp2f. It checks fragment layouts, masking and the online softmax against a double
// reference, not timing, the hardware's rounding or memory ordering. The kernels' source is
// included as kern.inc, cut out of cuda_flash.cu by run_flash_emu.sh (the asm helpers removed
// and replaced by the definitions in warp_emu.h).
//
//   flash_emu TQ TK KV_HEADS CAUSAL Q_AMPLITUDE KERNEL      (2 heads of 64; KERNEL 1 to 4 as
//   choir_cuda_attention_bf16_set_kernel)
#include "warp_emu.h"
#include "kern.inc"

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
