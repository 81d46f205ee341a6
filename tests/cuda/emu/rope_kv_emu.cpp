// VibeVoice's decode-step rope and cache rows in one launch (k_vv_rope_kv, src/tensor/cuda/
// cuda_vibevoice.cu, CHOIR_VV_ROPE_KV=1) run on the host through warp_emu.h against the
// operations it replaces written as plain loops (k_rope_rows' rotation on q and on k, then
// k_rows_scatter(_bf16) of k and of v) with the same angles and the same arithmetic, so every
// value must match bit for bit: it checks the kernel's index math (parts of heads a block, v's
// shares, slots and positions, f32 and bf16 destinations), not the device's rounding. The
// kernel's source is cut out of cuda_vibevoice.cu by run_rope_kv_emu.sh (rkv_defs.inc,
// rkv_kern.inc), cuda_rope_angles out of cuda_internal.h (rkv_angles.inc).
//
//   rope_kv_emu T HEADS KV_HEADS D BF16 PAGED SLOTS NULL_SLOT
#include "warp_emu.h"
#include "tensor/cuda/cuda_vibevoice.h"
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {f2bf(f)}; }
static dim3v blockDim;
#include "rkv_angles.inc"
#include "rkv_defs.inc"
// The pair rotation with k_rope_rows' arithmetic (the .cu writes it as PTX).
static inline void vv_rkv_rotate(float a, float b, float c, float s, float &x0, float &x1) {
    x0 = a * c - b * s;
    x1 = fmaf(a, s, b * c);
}
#include "rkv_kern.inc"

static uint64_t rng = 88172645463325252ull;
static float rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1; }

int main(int argc, char **argv) {
    if (argc < 9) return 2;
    int T = atoi(argv[1]), nh = atoi(argv[2]), nkv = atoi(argv[3]), D = atoi(argv[4]);
    int bf16 = atoi(argv[5]), paged = atoi(argv[6]), slots = atoi(argv[7]), null_slot = atoi(argv[8]);
    int64_t half = D / 2, qd = (int64_t)nh * D, kvd = (int64_t)nkv * D, esz = bf16 ? 2 : 4;
    const float theta = 1e6f;
    int rows_c = paged ? 40 * 128 : slots ? 300 : 1200;
    int64_t slot_stride = slots ? (int64_t)rows_c * kvd : 0, n_cache = (slots ? (int64_t)T : 1) * rows_c * kvd;
    std::vector<int32_t> pos(T), rowp(T), slot(T);
    for (int i = 0; i < T; i++) {
        pos[i] = paged ? (27000 - i * 1693) % 27001 : ((rows_c - 1 - i * 83) % rows_c + rows_c) % rows_c;
        rowp[i] = paged ? (i * 2731 + 77) % rows_c : pos[i];
        slot[i] = slots ? i : 0;
    }
    std::vector<float> q(T * qd), k(T * kvd), v(T * kvd);
    for (auto &x : q) x = 2 * rnd();
    for (auto &x : k) x = 2 * rnd();
    for (auto &x : v) x = 2 * rnd();
    std::vector<uint8_t> c0(2 * n_cache * esz);
    for (int64_t e = 0; e < 2 * n_cache; e++) {
        float x = rnd();
        if (bf16) ((uint16_t *)c0.data())[e] = f2bf(x);
        else ((float *)c0.data())[e] = x;
    }
    // Reference: the rotation of q's and k's heads, then each row to (slot, pos).
    std::vector<float> rq = q, rk = k;
    std::vector<uint8_t> rc = c0;
    for (int r = 0; r < T; r++) {
        for (int64_t i = 0; i < half; i++) {
            float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)(2 * half)));
            float ang = (float)pos[r] * inv_freq, cs = cosf(ang), sn = sinf(ang);
            for (int h = 0; h < nh + nkv; h++) {
                float *xh = h < nh ? &rq[r * qd + h * D] : &rk[r * kvd + (h - nh) * D];
                vv_rkv_rotate(xh[i], xh[i + half], cs, sn, xh[i], xh[i + half]);
            }
        }
        for (int w = 0; w < 2; w++) {
            const float *src = w ? &v[r * kvd] : &rk[r * kvd];
            int64_t at = (int64_t)slot[r] * slot_stride + (int64_t)rowp[r] * kvd + w * n_cache;
            for (int64_t e = 0; e < kvd; e++) {
                if (bf16) ((uint16_t *)rc.data())[at + e] = f2bf(src[e]);
                else ((float *)rc.data())[at + e] = src[e];
            }
        }
    }
    // The kernel, launched as choir_cuda_vv_rope_kv launches it.
    std::vector<float> gq = q, gk = k;
    std::vector<uint8_t> gc = c0;
    choir_cuda_vv_rows_dst kd = {gc.data(), bf16 != 0, slot_stride, kvd, null_slot ? nullptr : slot.data(), rowp.data()};
    choir_cuda_vv_rows_dst vd = kd;
    vd.dst = gc.data() + n_cache * esz;
    int parts = (nh + nkv + VV_RKV_HEADS - 1) / VV_RKV_HEADS;
    blockDim = {VV_RKV_THREADS, 1, 1};
    launch({T, parts, 1}, VV_RKV_THREADS, [&] {
        k_vv_rope_kv(gq.data(), gk.data(), v.data(), T, nh, nkv, D, pos.data(), theta, kd, vd);
    });
    int64_t dq = 0, dk = 0, dc = 0, written = 0;
    for (int64_t e = 0; e < T * qd; e++) dq += memcmp(&gq[e], &rq[e], 4) != 0;
    for (int64_t e = 0; e < T * kvd; e++) dk += memcmp(&gk[e], &rk[e], 4) != 0;
    for (int64_t e = 0; e < 2 * n_cache; e++) {
        dc += memcmp(&gc[e * esz], &rc[e * esz], esz) != 0;
        written += memcmp(&rc[e * esz], &c0[e * esz], esz) != 0;
    }
    printf("T %d heads %d/%d D %d %s %s%s%s: %lld q, %lld k, %lld cache values differ (%lld written) %s\n", T, nh, nkv,
           D, bf16 ? "bf16" : "f32", paged ? "paged" : "contiguous", slots ? " slots" : "", null_slot ? " slot NULL" : "",
           (long long)dq, (long long)dk, (long long)dc, (long long)written, dq || dk || dc ? "FAIL" : "ok");
    return dq || dk || dc ? 1 : 0;
}
