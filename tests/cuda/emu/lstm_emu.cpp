// The persistent BiLSTM kernel of src/tensor/cuda/cuda_audio.cu (k_lstm_persist, the recurrence
// of choir_cuda_bilstm under CHOIR_KOKORO_LSTM_PERSIST=1) run on the host, for a machine without
// a GPU: every CUDA thread of every block is a host thread, all blocks at once (the kernel's
// grid-wide barrier needs them resident together, as the cooperative launch guarantees);
// __syncthreads is a per-block barrier, shfl_xor a per-warp exchange, grid.sync() a barrier over
// all threads, __ldcg a plain load. It checks the indexing (directions, packed lengths, chunks of
// 32 pieces, the shared-memory layout) against a double reference, not timing or the hardware's
// memory ordering. The kernel's source is included as kern.inc, cut out of cuda_audio.cu by
// run_lstm_emu.sh.
//
//   lstm_emu B T H SEED     (prints the largest error and the unwritten count; H 32 or 64:
//   16 or 32 blocks of 512 threads)
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct dim3v { int x, y, z; };
thread_local dim3v threadIdx, blockIdx;
static dim3v blockDim;
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }

static int g_blocks, g_warps; // blocks, warps a block
static std::vector<std::barrier<> *> g_block_bar, g_warp_bar;
static std::barrier<> *g_grid_bar;
static std::vector<std::vector<float>> g_smem;
static std::vector<float> g_slot; // [block][warp][lane]

static inline float sigmoid_f(float v) { return 1.0f / (1.0f + expf(-v)); }
static inline float4 __ldcg(const float4 *p) { return *p; }
static inline void __syncthreads() { g_block_bar[blockIdx.x]->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int w = blockIdx.x * g_warps + (threadIdx.x >> 5), l = threadIdx.x & 31;
    g_slot[w * 32 + l] = v;
    g_warp_bar[w]->arrive_and_wait();
    float r = g_slot[w * 32 + (l ^ o)];
    g_warp_bar[w]->arrive_and_wait();
    return r;
}
static inline float *emu_smem() { return g_smem[blockIdx.x].data(); }
namespace cg {
struct grid_group {
    void sync() { g_grid_bar->arrive_and_wait(); }
};
static inline grid_group this_grid() { return {}; }
} // namespace cg

#include "kern.inc"

struct job {
    int b, t;
    const float *gates, *w_hh;
    float *cstate, *y;
    const int32_t *lens;
    int B, T, H;
};

static void *run_thread(void *p) {
    job *j = (job *)p;
    blockIdx = {j->b, 0, 0};
    threadIdx = {j->t, 0, 0};
    k_lstm_persist(j->gates, j->w_hh, j->cstate, j->y, j->lens, j->B, j->T, j->H);
    return nullptr;
}

static uint64_t rng = 88172645463325252ull;
static float rnd() {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    const int B = atoi(argv[1]), T = atoi(argv[2]), H = atoi(argv[3]);
    rng += (uint64_t)atoi(argv[4]) * 7919;
    const int G = 4 * H;
    std::vector<float> gates((size_t)B * T * 2 * G), whh((size_t)2 * G * H), cstate((size_t)2 * B * H, 0.0f);
    std::vector<float> y((size_t)B * T * 2 * H, 0.0f);
    std::vector<int32_t> lens(B);
    for (auto &v : gates) v = 1.5f * rnd();
    for (auto &v : whh) v = 0.3f * rnd();
    for (int b = 0; b < B; b++) lens[b] = b == 0 ? T : 1 + (int)((rnd() + 1) * 0.5f * (T - 1) + 0.5f);
    // a poison value where nothing may be written: zeros must stay past each length
    g_blocks = 2 * H / LP_UNITS, g_warps = LP_THREADS / 32;
    blockDim = {LP_THREADS, 1, 1};
    const int threads = g_blocks * LP_THREADS;
    g_grid_bar = new std::barrier<>(threads);
    for (int i = 0; i < g_blocks; i++) {
        g_block_bar.push_back(new std::barrier<>(LP_THREADS));
        g_smem.emplace_back(lstm_persist_smem_floats(H), NAN);
    }
    for (int i = 0; i < g_blocks * LP_THREADS / 32; i++) g_warp_bar.push_back(new std::barrier<>(32));
    g_slot.assign((size_t)g_blocks * LP_THREADS, 0.0f);
    std::vector<job> jobs(threads);
    std::vector<pthread_t> tid(threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 16);
    for (int i = 0; i < threads; i++) {
        jobs[i] = {i / LP_THREADS, i % LP_THREADS, gates.data(), whh.data(), cstate.data(), y.data(),
                   lens.data(), B, T, H};
        if (pthread_create(&tid[i], &attr, run_thread, &jobs[i])) {
            fprintf(stderr, "lstm_emu: cannot start thread %d\n", i);
            return 2;
        }
    }
    for (int i = 0; i < threads; i++) pthread_join(tid[i], nullptr);
    // the double reference: each piece and direction alone
    double maxerr = 0;
    long unwritten = 0;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < 2; d++) {
            std::vector<double> h(H, 0.0), c(H, 0.0), hn(H);
            for (int s = 0; s < lens[b]; s++) {
                const int t = d ? lens[b] - 1 - s : s;
                const float *gr = &gates[((size_t)b * T + t) * 2 * G + (size_t)d * G];
                for (int jj = 0; jj < H; jj++) {
                    double a[4];
                    for (int g = 0; g < 4; g++) {
                        a[g] = gr[g * H + jj];
                        for (int k = 0; k < H; k++) a[g] += (double)whh[((size_t)d * G + g * H + jj) * H + k] * h[k];
                    }
                    double gi = 1 / (1 + exp(-a[0])), gf = 1 / (1 + exp(-a[1])), gg = tanh(a[2]),
                           go = 1 / (1 + exp(-a[3]));
                    c[jj] = gf * c[jj] + gi * gg;
                    hn[jj] = go * tanh(c[jj]);
                }
                h = hn;
                for (int jj = 0; jj < H; jj++) {
                    double e = fabs(y[((size_t)b * T + t) * 2 * H + (size_t)d * H + jj] - h[jj]);
                    if (!(e <= maxerr)) maxerr = std::isnan(e) ? INFINITY : e;
                }
            }
            for (int t = lens[b]; t < T; t++)
                for (int jj = 0; jj < H; jj++)
                    if (y[((size_t)b * T + t) * 2 * H + (size_t)d * H + jj] != 0.0f) unwritten++;
        }
    printf("lstm_emu B %d T %d H %d blocks %d: max error %.3g, written past a length %ld\n", B, T, H,
           g_blocks, maxerr, unwritten);
    return maxerr <= 1e-5 && unwritten == 0 ? 0 : 1;
}
