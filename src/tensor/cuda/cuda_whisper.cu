/* Whisper's greedy step on the device (choir/backend_whisper.h): one block
 * per hypothesis, the rules of choir_whisper_greedy_row (whisper_rules.c) in
 * the same order. Thread 0 reads the row's history (the timestamp masks
 * depend on its last tokens), every thread masks its share of the row, two
 * block reductions give the text and timestamp maxima with their first ids
 * and the sums of exponentials (in double, as on the host; only the order of
 * the additions differs), and thread 0 picks, appends and writes the next
 * step's inputs. The row is read three times: about 0.6 MB per row for
 * Whisper's 51,866 ids, a few microseconds. */
#include <math.h>

#include "tensor/cuda/cuda_internal.h"
#include "tensor/cuda/cuda_whisper.h"

#define WG_THREADS 512
#define WG_WARPS (WG_THREADS / 32)
#define WG_RANGES 6

struct wg_args {
    float *logits;
    choir_cuda_whisper_rules r;
    choir_whisper_greedy g;
};

/* (value, first id) pairs: the larger value, on a tie the lower id; an id of
 * -1 means "none" (its value is -INFINITY). */
__device__ __forceinline__ void wg_max_merge(float &v, int &a, float v2, int a2) {
    if (v2 > v || (v2 == v && a2 >= 0 && (a < 0 || a2 < a))) v = v2, a = a2;
}

__device__ void wg_block_max(float &v, int &a, float *sv, int *sa) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_down_sync(0xffffffffu, v, o);
        int a2 = __shfl_down_sync(0xffffffffu, a, o);
        wg_max_merge(v, a, v2, a2);
    }
    __syncthreads();
    if (lane == 0) sv[w] = v, sa[w] = a;
    __syncthreads();
    if (w == 0) {
        v = lane < WG_WARPS ? sv[lane] : -INFINITY;
        a = lane < WG_WARPS ? sa[lane] : -1;
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_down_sync(0xffffffffu, v, o);
            int a2 = __shfl_down_sync(0xffffffffu, a, o);
            wg_max_merge(v, a, v2, a2);
        }
        if (lane == 0) sv[0] = v, sa[0] = a;
    }
    __syncthreads();
    v = sv[0];
    a = sa[0];
}

__device__ double wg_block_sum(double x, double *sd) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
    __syncthreads();
    if (lane == 0) sd[w] = x;
    __syncthreads();
    if (w == 0) {
        x = lane < WG_WARPS ? sd[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
        if (lane == 0) sd[0] = x;
    }
    __syncthreads();
    return sd[0];
}

__global__ void __launch_bounds__(WG_THREADS) k_whisper_greedy(wg_args a) {
    const int r = blockIdx.x;
    const choir_cuda_whisper_rules &R = a.r;
    const choir_whisper_greedy &G = a.g;
    if (G.done[r]) return;
    const int V = R.n_vocab, TB = R.timestamp_begin;
    float *x = a.logits + (int64_t)r * V;
    int32_t *tok = G.tokens + (int64_t)r * G.ld;
    const int nt = G.n[r], sb = G.sample_begin[r];
    __shared__ int s_lo[WG_RANGES], s_hi[WG_RANGES], s_nr;
    __shared__ float s_v[WG_WARPS];
    __shared__ int s_a[WG_WARPS];
    __shared__ double s_d[WG_WARPS];
    __shared__ int s_fire;

    /* The masks of wf_masks (whisper_filters.c), as id ranges. */
    if (threadIdx.x == 0) {
        int nr = 0;
        bool at_begin = nt == sb;
        if (R.suppress_blank && at_begin) {
            s_lo[nr] = 220, s_hi[nr++] = 221; /* encode(" ") */
            s_lo[nr] = R.eot, s_hi[nr++] = R.eot + 1;
        }
        if (R.timestamps) {
            s_lo[nr] = R.no_timestamps, s_hi[nr++] = R.no_timestamps + 1;
            const int32_t *seq = tok + sb;
            int m = nt - sb;
            bool last_ts = m >= 1 && seq[m - 1] >= TB;
            bool penult_ts = m < 2 || seq[m - 2] >= TB;
            int lo = 0, hi = 0; /* one of the two, or neither */
            if (last_ts) {
                if (penult_ts) lo = TB, hi = V;
                else lo = 0, hi = R.eot;
            }
            int t_last = -1;
            for (int i = m - 1; i >= 0; i--)
                if (seq[i] >= TB) {
                    t_last = seq[i];
                    break;
                }
            if (t_last >= 0) {
                int upto = (last_ts && !penult_ts) ? t_last : t_last + 1;
                /* [TB, upto) merged with [TB, V) or kept apart from [0, eot). */
                if (lo == TB) hi = hi > upto ? hi : upto;
                else s_lo[nr] = TB, s_hi[nr++] = upto;
            }
            if (hi > lo) s_lo[nr] = lo, s_hi[nr++] = hi;
            if (at_begin) {
                /* [0, TB) and the late initial timestamps: nr stays <= 6. */
                if (R.max_initial_timestamp_index >= 0)
                    s_lo[nr] = TB + R.max_initial_timestamp_index + 1, s_hi[nr++] = V;
                s_lo[nr] = 0, s_hi[nr++] = TB;
            }
        }
        s_nr = nr;
    }
    __syncthreads();
    const int nr = s_nr;
    for (int i = threadIdx.x; i < V; i += WG_THREADS) {
        bool masked = false;
        for (int k = 0; k < nr; k++) masked |= i >= s_lo[k] && i < s_hi[k];
        if (masked) x[i] = -INFINITY;
    }
    for (int k = threadIdx.x; k < R.n_suppress; k += WG_THREADS) {
        int id = R.suppress[k];
        if (id >= 0 && id < V) x[id] = -INFINITY;
    }
    __syncthreads();

    /* The maxima of the text ids [0, tb) and the timestamps [tb, V) (tb = V
     * without the timestamp rules) and their first ids. */
    const int tb = R.timestamps ? TB : V;
    float tv = -INFINITY, sv = -INFINITY;
    int ta = -1, sa = -1;
    for (int i = threadIdx.x; i < V; i += WG_THREADS) {
        float v = x[i];
        if (i < tb) {
            if (v > tv) tv = v, ta = i;
        } else if (v > sv) {
            sv = v, sa = i;
        }
    }
    wg_block_max(tv, ta, s_v, s_a);
    wg_block_max(sv, sa, s_v, s_a);
    const float mx = tv >= sv ? tv : sv;
    if (mx == -INFINITY) {
        if (threadIdx.x == 0) {
            /* wr_rules' pick of an all-masked row: id 0, lse -inf. */
            G.sum_logprob[r] += (double)x[0] - (double)-INFINITY;
            tok[nt] = 0;
            G.n[r] = nt + 1;
            bool done = 0 == R.eot || nt + 1 >= G.limit[r];
            G.done[r] = done;
            if (!done) G.ids[r] = 0, G.pos[r] = nt, G.keys[r] = nt + 1;
        }
        return;
    }
    const bool mass = R.timestamps && sv != -INFINITY;
    double s = 0.0, ss = 0.0;
    for (int i = threadIdx.x; i < V; i += WG_THREADS) {
        float v = x[i];
        if (v == -INFINITY) continue;
        s += exp((double)v - mx);
        if (mass && i >= tb) ss += exp((double)v - sv);
    }
    s = wg_block_sum(s, s_d);
    if (mass) ss = wg_block_sum(ss, s_d);
    double lse = mx + log(s);
    int next = tv >= sv ? ta : sa;
    if (threadIdx.x == 0) s_fire = 0;
    if (mass) {
        /* The mass rule: the timestamps together likelier than any text token. */
        double ts_logprob = sv + log(ss) - lse;
        double text_logprob = (double)tv - lse;
        if (ts_logprob > text_logprob) {
            next = sa;
            lse = sv + log(ss);
            if (threadIdx.x == 0) s_fire = 1;
        }
    }
    __syncthreads();
    if (s_fire)
        for (int i = threadIdx.x; i < tb; i += WG_THREADS) x[i] = -INFINITY;
    if (threadIdx.x == 0) {
        G.sum_logprob[r] += (double)x[next] - lse;
        tok[nt] = next;
        int n = nt + 1;
        G.n[r] = n;
        bool done = next == R.eot || n >= G.limit[r];
        G.done[r] = done;
        if (!done) G.ids[r] = next, G.pos[r] = n - 1, G.keys[r] = n;
    }
}

extern "C" int choir_cuda_whisper_greedy(choir_cuda *cu, float *logits,
                                         const choir_cuda_whisper_rules *r,
                                         const choir_whisper_greedy *g, choir_err *err) {
    if (g->B <= 0) return 0;
    if (g->B > INT32_MAX || r->n_vocab <= 0)
        return choir_err_set(err, CHOIR_EINVAL, "cuda: whisper greedy step of %lld rows",
                             (long long)g->B);
    wg_args a = {logits, *r, *g};
    k_whisper_greedy<<<(unsigned)g->B, WG_THREADS, 0, cu->stream>>>(a);
    return choir_cuda_check_launch(err, "whisper greedy step");
}
