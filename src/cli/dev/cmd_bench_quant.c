/* `choir bench quant`: throughput of the linear layer per weight storage
 * (f32, bf16, MLX-quantized 8/6/4/3 bits) on decoder-sized matrices, with the
 * machine's memcpy bandwidth measured in the same run for scale. At M = 1 a
 * decoder step is bound by streaming the weights, so GB/s of weights read is
 * the figure that matters; for M > 1 GFLOP/s is shown too. Each weight is
 * replicated until the set exceeds --rotate-mb (default 256 MiB; set it above
 * the last-level cache), and calls rotate through the copies, so the figures
 * are memory-bound, not cache-bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

#define ROTATE_BYTES_DEFAULT (256ll << 20)

typedef struct bench_opts {
    double min_time_s;
    int ms[8], n_ms;
    int64_t shapes[8][2], n_shapes; /* {rows N, cols K} */
    int group_size;
    int64_t rotate_bytes; /* weights cycled through per variant */
} bench_opts;

typedef struct copy_job {
    char *dst;
    const char *src;
} copy_job;

static void copy_range(void *ctx, int64_t b0, int64_t b1, int worker) {
    (void)worker;
    const copy_job *j = ctx;
    memcpy(j->dst + (b0 << 20), j->src + (b0 << 20), (size_t)(b1 - b0) << 20);
}

/* Best-of-5 memcpy of 256 MiB, on one thread or split over the pool (the
 * same threads the kernels use). Returns bytes read per second. */
static double memcpy_gbs(int parallel) {
    const int64_t mib = 256;
    size_t n = (size_t)mib << 20;
    char *a = choir_alloc(CHOIR_MEM_OTHER, n), *b = choir_alloc(CHOIR_MEM_OTHER, n);
    if (!a || !b) {
        choir_free(a);
        choir_free(b);
        return 0.0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        copy_job j = {i & 1 ? a : b, i & 1 ? b : a};
        double t0 = choir_now_s();
        if (parallel)
            choir_pool_parallel_for(choir_pool_default(), mib, 4, copy_range, &j);
        else
            copy_range(&j, 0, mib, 0);
        double dt = choir_now_s() - t0;
        if (dt < best) best = dt;
    }
    choir_free(a);
    choir_free(b);
    return (double)n / best / 1e9;
}

typedef struct variant {
    const char *name;
    choir_weight_kind kind;
    int bits;
} variant;

static const variant k_variants[] = {
    {"f32", CHOIR_WEIGHT_F32, 0}, {"bf16", CHOIR_WEIGHT_BF16, 0}, {"q8", CHOIR_WEIGHT_QUANT, 8},
    {"q6", CHOIR_WEIGHT_QUANT, 6}, {"q4", CHOIR_WEIGHT_QUANT, 4}, {"q3", CHOIR_WEIGHT_QUANT, 3},
};

/* Builds `copies` weights of one storage kind from the f32 matrix w. */
static int make_weights(const variant *v, const float *w, int64_t N, int64_t K, int G, int copies,
                        choir_weight *out, void **bufs) {
    for (int c = 0; c < copies; c++) {
        choir_weight *W = &out[c];
        memset(W, 0, sizeof *W);
        W->rows = N;
        W->cols = K;
        W->kind = v->kind;
        if (v->kind == CHOIR_WEIGHT_F32) {
            float *d = bufs[3 * c] = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(N * K) * 4);
            if (!d) return -1;
            memcpy(d, w, (size_t)(N * K) * 4);
            W->data = d;
        } else if (v->kind == CHOIR_WEIGHT_BF16) {
            uint16_t *d = bufs[3 * c] = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(N * K) * 2);
            if (!d) return -1;
            choir_f32_to_bf16_n(w, d, N * K);
            W->data = d;
        } else {
            int64_t groups = K / G;
            uint32_t *p = bufs[3 * c] =
                choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(N * choir_quant_packed_cols(K, v->bits)) * 4);
            void *s = bufs[3 * c + 1] = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(N * groups) * 2);
            void *b = bufs[3 * c + 2] = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(N * groups) * 2);
            if (!p || !s || !b) return -1;
            if (choir_quantize(w, N, K, v->bits, G, CHOIR_DTYPE_BF16, p, s, b, NULL) < 0) return -1;
            W->data = p;
            W->scales = s;
            W->biases = b;
            W->sb_dtype = CHOIR_DTYPE_BF16;
            W->bits = v->bits;
            W->group_size = G;
        }
    }
    return 0;
}

static void run_shape(const bench_opts *o, int64_t N, int64_t K) {
    int64_t maxM = 1;
    for (int i = 0; i < o->n_ms; i++)
        if (o->ms[i] > maxM) maxM = o->ms[i];
    float *w = choir_alloc(CHOIR_MEM_OTHER, (size_t)(N * K) * 4);
    float *x = choir_alloc(CHOIR_MEM_OTHER, (size_t)(maxM * K) * 4);
    float *y = choir_alloc(CHOIR_MEM_OTHER, (size_t)(maxM * N) * 4);
    if (!w || !x || !y) goto done;
    uint64_t s = 42;
    for (int64_t i = 0; i < N * K; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    for (int64_t i = 0; i < maxM * K; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    double base_ms[8] = {0};
    for (size_t vi = 0; vi < sizeof k_variants / sizeof *k_variants; vi++) {
        const variant *v = &k_variants[vi];
        choir_weight probe = {.kind = v->kind, .rows = N, .cols = K, .bits = v->bits,
                              .group_size = o->group_size, .sb_dtype = CHOIR_DTYPE_BF16};
        size_t wbytes = choir_weight_bytes(&probe);
        int copies = (int)(o->rotate_bytes / (int64_t)wbytes) + 1;
        if (copies > 256) copies = 256;
        choir_weight *Ws = calloc((size_t)copies, sizeof *Ws);
        void **bufs = calloc((size_t)copies * 3, sizeof *bufs);
        if (!Ws || !bufs || make_weights(v, w, N, K, o->group_size, copies, Ws, bufs) < 0) {
            fprintf(stderr, "choir bench quant: out of memory for %s\n", v->name);
        } else {
            for (int mi = 0; mi < o->n_ms; mi++) {
                int64_t M = o->ms[mi];
                choir_linear(x, M, &Ws[0], NULL, y); /* warm-up */
                int64_t calls = 0;
                double t0 = choir_now_s(), dt;
                do {
                    choir_linear(x, M, &Ws[calls % copies], NULL, y);
                    calls++;
                    dt = choir_now_s() - t0;
                } while (dt < o->min_time_s);
                double ms = dt / (double)calls * 1e3;
                if (vi == 0) base_ms[mi] = ms;
                printf("%6lldx%-6lld %5lld  %-5s %9.3f ms  %7.2f GB/s  %8.1f GFLOP/s  x%.2f vs f32\n",
                       (long long)N, (long long)K, (long long)M, v->name, ms,
                       (double)wbytes / (ms * 1e-3) / 1e9,
                       2.0 * (double)M * (double)N * (double)K / (ms * 1e-3) / 1e9,
                       base_ms[mi] / ms);
            }
        }
        for (int c = 0; bufs && c < copies * 3; c++) choir_free(bufs[c]);
        free(bufs);
        free(Ws);
    }
done:
    choir_free(w);
    choir_free(x);
    choir_free(y);
}

int choir_bench_quant(int argc, char **argv) {
    bench_opts o = {.min_time_s = 0.3, .ms = {1, 8, 64}, .n_ms = 3, .group_size = 64,
                   .rotate_bytes = ROTATE_BYTES_DEFAULT};
    /* Whisper large-v3 decoder: attention 1280x1280, MLP 5120x1280 and 1280x5120. */
    static const int64_t def_shapes[][2] = {{1280, 1280}, {5120, 1280}, {1280, 5120}};
    memcpy(o.shapes, def_shapes, sizeof def_shapes);
    o.n_shapes = 3;
    const char *m_list = NULL, *shape = NULL;
    int threads = 0, rotate_mb = (int)(ROTATE_BYTES_DEFAULT >> 20), isa_ref = -1;
    const cli_opt flags[] = {
        {"--m", CLI_STRING, &m_list, 0, 0, "1,8,64", "rows of the activations, up to 8 values (default 1,8,64)"},
        {"--shape", CLI_STRING, &shape, 0, 0, "NxK", "one weight shape, K a multiple of 128\n(default: Whisper large-v3's "
                                                   "1280x1280, 5120x1280, 1280x5120)"},
        {"--time", CLI_DOUBLE, &o.min_time_s, 0.001, 3600, "S", "least time per measurement (default 0.3)"},
        {"--threads", CLI_INT, &threads, 1, 1024, "T", "compute threads"},
        {"--group", CLI_INT, &o.group_size, 1, 1 << 20, "G", "quantization group size (default 64)"},
        {"--isa", CLI_CHOICE, &isa_ref, 0, 0, "ref", "the plain C kernels instead of the machine's SIMD ones"},
        {"--rotate-mb", CLI_INT, &rotate_mb, 0, 1 << 20, "MB",
         "weight bytes cycled through per kind (default 256, 0: one copy;\nmake it larger than the last-level cache so that weights "
         "stream from memory)"},
    };
    const cli_spec spec = {.cmd = "bench quant",
                           .synopsis = "usage: choir bench quant [--m 1,8,64] [--shape NxK] [--time S] [--threads T]\n"
                                       "                         [--group G] [--isa ref] [--rotate-mb MB]\n\n",
                           .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (m_list && (o.n_ms = cli_parse_ints(m_list, 1, 1 << 20, o.ms, 8)) <= 0) {
        fprintf(stderr, "choir bench quant: --m needs up to 8 whole numbers > 0 separated by commas, got '%s'\n",
                m_list);
        return 2;
    }
    if (shape) {
        long long n, k;
        char end;
        if (sscanf(shape, "%lldx%lld%c", &n, &k, &end) != 2 || n <= 0 || k <= 0 || k % 128) {
            fprintf(stderr, "choir bench quant: --shape NxK with K a multiple of 128\n");
            return 2;
        }
        o.shapes[0][0] = n;
        o.shapes[0][1] = k;
        o.n_shapes = 1;
    }
    if (!choir_quant_supported(4, o.group_size)) {
        fprintf(stderr, "choir bench quant: --group %d is not a supported group size\n", o.group_size);
        return 2;
    }
    if (threads) choir_pool_set_default_threads(threads);
    if (isa_ref == 0) choir_kernels_set_isa(CHOIR_ISA_REF);
    o.rotate_bytes = (int64_t)rotate_mb << 20;
    printf("isa %s, %d threads, group size %d, bf16 scales\n", choir_isa_name(choir_kernels_isa()),
           choir_pool_threads(choir_pool_default()), o.group_size);
    printf("memcpy: %.2f GB/s on 1 thread, %.2f GB/s on the pool (bytes read; as many written)\n",
           memcpy_gbs(0), memcpy_gbs(1));
    printf("%-13s %5s  %-5s %12s  %12s  %16s\n", "N x K", "M", "kind", "time/call", "weights",
           "compute");
    for (int s = 0; s < o.n_shapes; s++) run_shape(&o, o.shapes[s][0], o.shapes[s][1]);
    return 0;
}
