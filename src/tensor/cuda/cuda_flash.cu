/* Fused attention over bf16 rows on the tensor cores (flash-style): each
 * block takes 16 MT query rows per warp of one head and walks the keys in
 * tiles of 64, keeping the running maximum, the running sum and the output
 * accumulators in registers, so the scores never reach device memory.
 *
 * Per key tile: S = Q K^T with mma.m16n8k16 (bf16 in, f32 accumulation),
 * the online softmax in f32 (exp2 of scores pre-scaled by scale log2 e),
 * P rounded to bf16 and O += P V with the same instruction. K and V tiles are
 * copied into shared memory with cp.async, two tiles deep, rows padded by 16
 * bytes so that the fragment reads hit 32 distinct banks. The result is
 * O / l rounded to bf16 (a row that sees no key gets zeros). */
#include <cuda_bf16.h>

#include <stdint.h>

#include "tensor/cuda/cuda_internal.h"

#define FA_KT 64                 /* keys per tile */
#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *smem) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* 16 bytes global -> shared; src_bytes 0 fills zeros (rows past the end). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int D, int MT>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_bf16(const __nv_bfloat16 *__restrict__ q, int64_t ldq, int64_t q_batch,
                 const __nv_bfloat16 *__restrict__ k, int64_t ldk,
                 const __nv_bfloat16 *__restrict__ v, int64_t ldv, int64_t kv_batch,
                 __nv_bfloat16 *__restrict__ out, int64_t ldo, int64_t out_batch, int Tq, int Tk,
                 int rep, float scale_log2, bool causal) {
    constexpr int LD = D + 8;        /* padded shared row, elements */
    constexpr int KS = D / 16;       /* k-steps over the head for S */
    constexpr int NS = FA_KT / 8;    /* n-tiles of keys in S */
    constexpr int ND = D / 8;        /* n-tiles of values in O */
    constexpr int CH = D / 8;        /* 16-byte chunks per row */
    constexpr int BM = 16 * MT * FA_WARPS;
    __shared__ __align__(16) __nv_bfloat16 Ks[2][FA_KT * LD];
    __shared__ __align__(16) __nv_bfloat16 Vs[2][FA_KT * LD];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BM;
    const __nv_bfloat16 *qb = q + b * q_batch + (int64_t)h * D;
    const __nv_bfloat16 *kb = k + b * kv_batch + (int64_t)(h / rep) * D;
    const __nv_bfloat16 *vb = v + b * kv_batch + (int64_t)(h / rep) * D;

    /* The last key any row of this block sees, plus one. */
    int kend = Tk;
    if (causal) {
        int last = q0 + BM - 1 < Tq - 1 ? q0 + BM - 1 : Tq - 1;
        kend = last + (Tk - Tq) + 1;
        kend = kend < 0 ? 0 : (kend > Tk ? Tk : kend);
    }
    const int ntiles = (kend + FA_KT - 1) / FA_KT;

    auto load_tile = [&](int tile, int buf) {
        int key0 = tile * FA_KT;
        for (int c = threadIdx.x; c < FA_KT * CH; c += FA_THREADS) {
            int r = c / CH, col = (c % CH) * 8, key = key0 + r;
            bool in = key < Tk;
            int64_t kk = in ? key : 0;
            cp_async16(&Ks[buf][r * LD + col], kb + kk * ldk + col, in ? 16 : 0);
            cp_async16(&Vs[buf][r * LD + col], vb + kk * ldv + col, in ? 16 : 0);
        }
        cp_async_commit();
    };
    if (ntiles > 0) load_tile(0, 0);

    /* Q fragments straight from global memory (read once per block). */
    uint32_t qf[MT][KS][4];
    int row[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        row[m][0] = q0 + (warp * MT + m) * 16 + g;
        row[m][1] = row[m][0] + 8;
#pragma unroll
        for (int s = 0; s < KS; s++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = row[m][i & 1], col = s * 16 + 2 * t + (i >> 1) * 8;
                qf[m][s][i] = r < Tq ? *(const uint32_t *)(qb + (int64_t)r * ldq + col) : 0u;
            }
        }
    }

    float o[MT][ND][4];
    float mx[MT][2], sum[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int j = 0; j < ND; j++) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;
        mx[m][0] = mx[m][1] = -INFINITY;
        sum[m][0] = sum[m][1] = 0.0f;
    }
    /* Rows i see keys < lim: i + (Tk - Tq) + 1 when causal. */
    int lim[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int r = 0; r < 2; r++) lim[m][r] = causal ? row[m][r] + (Tk - Tq) + 1 : Tk;

    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) {
            load_tile(tile + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __nv_bfloat16 *Kt = Ks[buf], *Vt = Vs[buf];
        const int key0 = tile * FA_KT;

        float sc[MT][NS][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < NS; j++) sc[m][j][0] = sc[m][j][1] = sc[m][j][2] = sc[m][j][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < NS; j++) {
            const __nv_bfloat16 *kr = Kt + (j * 8 + g) * LD + 2 * t;
#pragma unroll
            for (int s = 0; s < KS; s++) {
                uint32_t b0 = *(const uint32_t *)(kr + s * 16);
                uint32_t b1 = *(const uint32_t *)(kr + s * 16 + 8);
#pragma unroll
                for (int m = 0; m < MT; m++) mma_bf16(sc[m][j], qf[m][s], b0, b1);
            }
        }

        const bool edge = key0 + FA_KT > Tk || causal;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int j = 0; j < NS; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float x = sc[m][j][i] * scale_log2;
                    if (edge) {
                        int key = key0 + j * 8 + 2 * t + (i & 1);
                        if (key >= lim[m][i >> 1] || key >= Tk) x = -INFINITY;
                    }
                    sc[m][j][i] = x;
                    tmax[i >> 1] = fmaxf(tmax[i >> 1], x);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
                float mnew = fmaxf(mx[m][r], tmax[r]);
                /* No key seen yet: keep everything at zero. */
                float base = mnew == -INFINITY ? 0.0f : mnew;
                float alpha = exp2f(mx[m][r] - base);
                mx[m][r] = mnew;
                sum[m][r] *= alpha;
#pragma unroll
                for (int j = 0; j < ND; j++) {
                    o[m][j][2 * r] *= alpha;
                    o[m][j][2 * r + 1] *= alpha;
                }
#pragma unroll
                for (int j = 0; j < NS; j++) {
                    float p0 = exp2f(sc[m][j][2 * r] - base), p1 = exp2f(sc[m][j][2 * r + 1] - base);
                    sc[m][j][2 * r] = p0;
                    sc[m][j][2 * r + 1] = p1;
                    sum[m][r] += p0 + p1;
                }
            }
        }

        /* O += P V: P's accumulator layout is the A fragment of the next
         * product; V's B fragments come transposed out of shared memory. */
#pragma unroll
        for (int s = 0; s < FA_KT / 16; s++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                pa[m][0] = pack_bf16(sc[m][2 * s][0], sc[m][2 * s][1]);
                pa[m][1] = pack_bf16(sc[m][2 * s][2], sc[m][2 * s][3]);
                pa[m][2] = pack_bf16(sc[m][2 * s + 1][0], sc[m][2 * s + 1][1]);
                pa[m][3] = pack_bf16(sc[m][2 * s + 1][2], sc[m][2 * s + 1][3]);
            }
            const int mat = lane >> 3, r = lane & 7;
            const __nv_bfloat16 *vr = Vt + (s * 16 + (mat & 1) * 8 + r) * LD + (mat >> 1) * 8;
#pragma unroll
            for (int j = 0; j < ND; j += 2) {
                uint32_t bf[4];
                ldmatrix_x4_trans(bf, vr + j * 8);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma_bf16(o[m][j], pa[m], bf[0], bf[1]);
                    mma_bf16(o[m][j + 1], pa[m], bf[2], bf[3]);
                }
            }
        }
        __syncthreads(); /* the buffer is refilled next iteration */
    }

    __nv_bfloat16 *ob = out + b * out_batch + (int64_t)h * D;
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = sum[m][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            int i = row[m][r];
            if (i >= Tq) continue;
            __nv_bfloat16 *orow = ob + (int64_t)i * ldo;
#pragma unroll
            for (int j = 0; j < ND; j++)
                *(uint32_t *)(orow + j * 8 + 2 * t) =
                    pack_bf16(o[m][j][2 * r] * inv, o[m][j][2 * r + 1] * inv);
        }
    }
}

template <int D, int MT>
static int flash_launch(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                        int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                        int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                        int64_t out_batch, int64_t Tq, int64_t Tk, int n_head, int rep,
                        float scale, bool causal, choir_err *err) {
    constexpr int BM = 16 * MT * FA_WARPS;
    dim3 grid((unsigned)((Tq + BM - 1) / BM), (unsigned)n_head, (unsigned)B);
    k_flash_bf16<D, MT><<<grid, FA_THREADS, 0, cu->stream>>>(
        (const __nv_bfloat16 *)q, ldq, q_batch, (const __nv_bfloat16 *)k, ldk,
        (const __nv_bfloat16 *)v, ldv, kv_batch, (__nv_bfloat16 *)out, ldo, out_batch, (int)Tq,
        (int)Tk, rep, scale * 1.4426950408889634f, causal);
    return choir_cuda_check_launch(err, "bf16 flash attention");
}

static int flash_mt = 2;

void choir_cuda_attention_bf16_set_rows(int rows_per_warp) {
    flash_mt = rows_per_warp == 16 ? 1 : 2;
}

int choir_cuda_attention_bf16(choir_cuda *cu, int64_t B, const uint16_t *q, int64_t ldq,
                              int64_t q_batch, const uint16_t *k, int64_t ldk, const uint16_t *v,
                              int64_t ldv, int64_t kv_batch, uint16_t *out, int64_t ldo,
                              int64_t out_batch, int64_t Tq, int64_t Tk, int n_head,
                              int n_kv_head, int64_t Dh, float scale, bool causal,
                              choir_err *err) {
    if (B <= 0 || Tq <= 0) return 0;
    int kvh = n_kv_head > 0 ? n_kv_head : n_head;
    if (n_head <= 0 || kvh > n_head || n_head % kvh || Tk < 0)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: bf16 attention: %d heads over %d", n_head,
                             kvh);
    if (Dh != 16 && Dh != 32 && Dh != 64)
        return choir_err_set(err, CHOIR_EUNSUPPORTED,
                             "cuda: bf16 attention over heads of %lld values (16, 32 or 64)",
                             (long long)Dh);
    if (Tq > INT32_MAX || Tk > INT32_MAX || n_head > 65535 || B > 65535)
        return choir_err_set(err, CHOIR_ETOOBIG, "cuda: bf16 attention of %lld x %lld", (long long)Tq,
                             (long long)Tk);
    /* 16-byte rows for cp.async and the 4-byte fragment reads. */
    uintptr_t al = (uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out;
    if ((al & 15) || (ldq | ldk | ldv | ldo | q_batch | kv_batch | out_batch) & 7)
        return choir_err_set(err, CHOIR_EINVAL,
                             "cuda: bf16 attention needs 16-byte aligned rows and strides");
    int rep = n_head / kvh;
#define CHOIR_FLASH(D, MT)                                                                     \
    flash_launch<D, MT>(cu, B, q, ldq, q_batch, k, ldk, v, ldv, kv_batch, out, ldo, out_batch, Tq, \
                        Tk, n_head, rep, scale, causal, err)
    if (Dh == 16) return CHOIR_FLASH(16, 2);
    if (Dh == 32) return CHOIR_FLASH(32, 2);
    return flash_mt == 1 ? CHOIR_FLASH(64, 1) : CHOIR_FLASH(64, 2);
#undef CHOIR_FLASH
}
