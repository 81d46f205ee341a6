/* Kokoro's decoder and iSTFTNet generator on the CUDA backend, batched
 * (include/choir/kokoro.h, "the CUDA backend").
 *
 * The same computation as kk_decoder (kokoro_forward.c) and kk_generator
 * (kokoro_generator.c), block by block, over B pieces at once: every tensor
 * is [B, C, T] with each piece padded to the longest, and the kernels of
 * choir/cuda_audio.h keep the padding at zero, so that convolutions read
 * zeros past a piece's end as its own zero padding would. Lengths per stage
 * (frames L, 2L, 20L, 120L, 120L + 1) live on the device, one int32 per piece.
 *
 * On the CPU, per piece (concurrently on the default pool): the two tiny
 * F0 / N stride-2 convolutions, the style projections of all AdaIN layers
 * (fc(style) -> gamma, beta, one small product per layer), and the harmonic
 * source with its 20-point STFT. The source integrates F0 into a phase of
 * ~1e5 rad where one float32 ulp moves the audio by tens of percent on random
 * weights (docs/kokoro.md), so it is computed exactly as the CPU path does and
 * only its spectrum [22, 120L + 1] is uploaded.
 *
 * Device memory: the weights (uploaded once), and one activation block kept
 * between calls and grown to the largest batch seen, handed out in order with
 * marks like the CPU workspace (kk_ws).
 *
 * The front's ALBERT and LSTMs live in kokoro_cuda_front.c; kk_gpu_albert and
 * kk_gpu_bilstm below run them under the same mutex (one stream, one cuBLAS
 * handle). */
#include "choir/kokoro.h"

#ifdef CHOIR_HAVE_CUDA

#include <math.h>
#include <pthread.h>
#include <string.h>

/* The one CUDA runtime call C code here needs: making the context's device
 * current on an engine worker's thread (the context does not switch). */
#include <cuda_runtime_api.h>

#include "choir/alloc.h"
#include "choir/cuda_audio.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_internal.h"

#define KG_ALIGN 256
/* Device floats per padded frame and piece at the deepest point (the last
 * generator stage: five [128, 120 L] tensors, the stage-0 output, the
 * spectrum and the decoder's output; ~87k counted, with margin). */
#define KG_FLOATS_PER_FRAME 92000
#define KG_FIXED_BYTES ((int64_t)4 << 20)
#define KG_FRONT_FLOATS_PER_FRAME 7600
#define KG_CONV_SCRATCH ((int64_t)512 << 20)

typedef struct kg_conv {
    choir_cuda_conv_weight w; /* device [cout, cin, k] or ConvTranspose [cin, cout, k] */
    const float *b;           /* device [cout] or NULL */
    int cin, cout, k;
} kg_conv;

typedef struct kg_adain {
    const kk_adain *host;         /* for fc(style) on the CPU */
    const float *norm_w, *norm_b; /* device [C] or NULL */
    int C;
    int64_t gb_off; /* gamma, beta offset in a piece's projection row */
} kg_adain;

typedef struct kg_resblk {
    int cin, cout;
    bool upsample;
    kg_adain norm1, norm2;
    kg_conv conv1, conv2, conv1x1; /* conv1x1.w.w NULL when cin == cout */
    const float *pool_w, *pool_b;  /* device depthwise [cin, 1, 3], [cin] */
} kg_resblk;

typedef struct kg_snake {
    int C, k;
    kg_conv convs1[3], convs2[3];
    kg_adain adain1[3], adain2[3];
    const float *alpha1[3], *alpha2[3]; /* device [C] */
} kg_snake;

struct choir_kokoro_gpu {
    const choir_kokoro *m;
    choir_cuda *cu;
    int bf16;
    pthread_mutex_t mu;

    kg_conv asr_res;
    kg_resblk encode, decode[4];
    kg_conv noise_convs[2], ups[2], conv_post;
    kg_snake noise_res[2], resblocks[6];

    /* every AdaIN layer in upload order, for the style projections */
    kg_adain *adains[64];
    int n_adains;
    int64_t gb_stride; /* floats of one piece's projections */

    kg_front *front;      /* the front's ALBERT and LSTMs (kokoro_cuda_front.c) */

    /* The prosody predictor's F0 / N residual blocks and projections (f32
     * always: F0 feeds the phase-sensitive source), with their own AdaIN
     * list (style projections of s_pro, not of the decoder's style).
     * front_upload routes up_adain and up_conv there while they upload. */
    bool has_f0n, front_upload;
    kg_resblk f0_blk[3], n_blk[3];
    kg_conv f0_proj, n_proj;
    kg_adain *f0n_adains[16];
    int n_f0n_adains;
    int64_t f0n_gb_stride;

    choir_cuda_buf *bufs; /* weight buffers */
    int n_bufs, cap_bufs;
    int64_t weight_bytes;

    /* activations: one block, bump-allocated per decode */
    choir_cuda_buf act;
    size_t act_used, act_high;
    bool act_exhausted;           /* set when a decode ran out of the block */

    /* per decode call: lengths per stage (device), counters */
    const int32_t *len_L, *len_2L, *len_20L, *len_120L, *len_F;
    choir_kokoro_gpu_stats stats;
    choir_err *err;
    const choir_kokoro_decode_input *in; /* this call's pieces */
    kk_gpu_trace_fn trace;               /* kk_gpu_decode_traced only */
    void *trace_user;
};

/* --- device memory helpers ----------------------------------------------- */

static int keep_buf(choir_kokoro_gpu *g, const void *host, size_t bytes, const void **dev,
                    choir_err *err) {
    if (g->n_bufs == g->cap_bufs) {
        int cap = g->cap_bufs ? 2 * g->cap_bufs : 256;
        choir_cuda_buf *nb = choir_realloc(g->bufs, (size_t)cap * sizeof *nb);
        if (!nb) return choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
        g->bufs = nb;
        g->cap_bufs = cap;
    }
    choir_cuda_buf *b = &g->bufs[g->n_bufs];
    memset(b, 0, sizeof *b);
    int rc = choir_cuda_buf_alloc(g->cu, bytes, b, err);
    if (!rc) rc = choir_cuda_upload(g->cu, b, 0, host, bytes, err);
    if (rc) {
        choir_cuda_buf_free(g->cu, b);
        return rc;
    }
    g->n_bufs++;
    g->weight_bytes += (int64_t)bytes;
    *dev = b->ptr;
    return 0;
}

static int up_f32(choir_kokoro_gpu *g, const float *host, int64_t n, const float **dev,
                  choir_err *err) {
    *dev = NULL;
    if (!host) return 0;
    return keep_buf(g, host, (size_t)n * sizeof(float), (const void **)dev, err);
}

static uint16_t to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int up_conv(choir_kokoro_gpu *g, const kk_conv *c, int64_t n_w, bool gemm, kg_conv *out,
                   choir_err *err) {
    memset(out, 0, sizeof *out);
    out->cin = c->cin, out->cout = c->cout, out->k = c->k;
    if (!c->w) return 0;
    int rc;
    if (g->bf16 && gemm && !g->front_upload) {
        uint16_t *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)n_w * sizeof *h);
        if (!h) return choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
        for (int64_t i = 0; i < n_w; i++) h[i] = to_bf16(c->w[i]);
        rc = keep_buf(g, h, (size_t)n_w * sizeof *h, &out->w.w, err);
        choir_free(h);
        out->w.bf16 = true;
    } else {
        rc = keep_buf(g, c->w, (size_t)n_w * sizeof(float), &out->w.w, err);
    }
    if (!rc) rc = up_f32(g, c->b, c->cout, &out->b, err);
    return rc;
}

static int up_adain(choir_kokoro_gpu *g, const kk_adain *a, kg_adain *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    out->host = a;
    out->C = a->C;
    kg_adain **list = g->front_upload ? g->f0n_adains : g->adains;
    int *n = g->front_upload ? &g->n_f0n_adains : &g->n_adains;
    int64_t *stride = g->front_upload ? &g->f0n_gb_stride : &g->gb_stride;
    int cap = g->front_upload ? (int)(sizeof g->f0n_adains / sizeof g->f0n_adains[0])
                              : (int)(sizeof g->adains / sizeof g->adains[0]);
    if (*n == cap) return choir_err_set(err, CHOIR_EINTERNAL, "kokoro gpu: too many AdaIN layers");
    out->gb_off = *stride;
    *stride += 2 * (int64_t)a->C;
    list[(*n)++] = out;
    int rc = up_f32(g, a->norm_w, a->C, &out->norm_w, err);
    if (!rc) rc = up_f32(g, a->norm_b, a->C, &out->norm_b, err);
    return rc;
}

static int up_resblk(choir_kokoro_gpu *g, const kk_resblk *b, kg_resblk *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    out->cin = b->cin, out->cout = b->cout, out->upsample = b->upsample;
    int rc = up_adain(g, &b->norm1, &out->norm1, err);
    if (!rc) rc = up_adain(g, &b->norm2, &out->norm2, err);
    if (!rc)
        rc = up_conv(g, &b->conv1, (int64_t)b->conv1.cout * b->conv1.cin * b->conv1.k, true,
                     &out->conv1, err);
    if (!rc)
        rc = up_conv(g, &b->conv2, (int64_t)b->conv2.cout * b->conv2.cin * b->conv2.k, true,
                     &out->conv2, err);
    if (!rc && b->conv1x1.w)
        rc = up_conv(g, &b->conv1x1, (int64_t)b->conv1x1.cout * b->conv1x1.cin * b->conv1x1.k, true,
                     &out->conv1x1, err);
    if (!rc && b->upsample) {
        rc = up_f32(g, b->pool.w, (int64_t)b->cin * 3, &out->pool_w, err);
        if (!rc) rc = up_f32(g, b->pool.b, b->cin, &out->pool_b, err);
    }
    return rc;
}

static int up_snake(choir_kokoro_gpu *g, const kk_snakeblock *b, kg_snake *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    out->C = b->C, out->k = b->k;
    int rc = 0;
    int64_t n_w = (int64_t)b->C * b->C * b->k;
    for (int j = 0; j < 3 && !rc; j++) {
        rc = up_conv(g, &b->convs1[j], n_w, true, &out->convs1[j], err);
        if (!rc) rc = up_conv(g, &b->convs2[j], n_w, true, &out->convs2[j], err);
        if (!rc) rc = up_adain(g, &b->adain1[j], &out->adain1[j], err);
        if (!rc) rc = up_adain(g, &b->adain2[j], &out->adain2[j], err);
        if (!rc) rc = up_f32(g, b->alpha1[j], b->C, &out->alpha1[j], err);
        if (!rc) rc = up_f32(g, b->alpha2[j], b->C, &out->alpha2[j], err);
    }
    return rc;
}

choir_kokoro_gpu *choir_kokoro_gpu_create(const choir_kokoro *m, choir_cuda *cu, int gpu_bf16,
                                          choir_err *err) {
    if (!m || !cu) {
        choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: missing model or CUDA context");
        return NULL;
    }
    choir_kokoro_gpu *g = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *g);
    if (!g) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
        return NULL;
    }
    g->m = m, g->cu = cu, g->bf16 = gpu_bf16 != 0;
    pthread_mutex_init(&g->mu, NULL);
    int rc = up_conv(g, &m->asr_res, 64LL * 512, true, &g->asr_res, err);
    if (!rc) rc = up_resblk(g, &m->encode, &g->encode, err);
    for (int i = 0; i < 4 && !rc; i++) rc = up_resblk(g, &m->decode[i], &g->decode[i], err);
    for (int i = 0; i < 2 && !rc; i++) {
        const kk_conv *c = &m->noise_convs[i], *u = &m->ups[i];
        rc = up_conv(g, c, (int64_t)c->cout * c->cin * c->k, true, &g->noise_convs[i], err);
        if (!rc) rc = up_conv(g, u, (int64_t)u->cin * u->cout * u->k, true, &g->ups[i], err);
        if (!rc) rc = up_snake(g, &m->noise_res[i], &g->noise_res[i], err);
    }
    for (int i = 0; i < 6 && !rc; i++) rc = up_snake(g, &m->resblocks[i], &g->resblocks[i], err);
    if (!rc)
        rc = up_conv(g, &m->conv_post,
                     (int64_t)m->conv_post.cout * m->conv_post.cin * m->conv_post.k, true,
                     &g->conv_post, err);
    if (!rc && !(g->front = kg_front_create(m, cu, err))) rc = err ? err->code : CHOIR_ENOMEM;
    /* the F0 / N blocks, when the model has a prosody predictor */
    g->has_f0n = m->f0_blk[0].conv1.w && m->n_blk[0].conv1.w && m->f0_proj.w && m->n_proj.w;
    if (!rc && g->has_f0n) {
        g->front_upload = true;
        for (int i = 0; i < 3 && !rc; i++) {
            rc = up_resblk(g, &m->f0_blk[i], &g->f0_blk[i], err);
            if (!rc) rc = up_resblk(g, &m->n_blk[i], &g->n_blk[i], err);
        }
        if (!rc) rc = up_conv(g, &m->f0_proj, 256, true, &g->f0_proj, err);
        if (!rc) rc = up_conv(g, &m->n_proj, 256, true, &g->n_proj, err);
        g->front_upload = false;
    }
    if (!rc) rc = choir_cuda_sync(cu, err);
    if (rc) {
        choir_err_prefix(err, "kokoro gpu: uploading the decoder");
        choir_kokoro_gpu_free(g);
        return NULL;
    }
    g->stats.weight_bytes = g->weight_bytes + kg_front_weight_bytes(g->front);
    CHOIR_LOGI("kokoro gpu: decoder weights %.1f MB on %s (%s convolutions), %d AdaIN layers; "
               "front LSTMs %.1f MB",
               (double)g->weight_bytes / 1e6, choir_cuda_get_props(cu)->name,
               g->bf16 ? "bf16" : "f32", g->n_adains, (double)kg_front_weight_bytes(g->front) / 1e6);
    return g;
}

void choir_kokoro_gpu_free(choir_kokoro_gpu *g) {
    if (!g) return;
    for (int i = 0; i < g->n_bufs; i++) choir_cuda_buf_free(g->cu, &g->bufs[i]);
    choir_cuda_buf_free(g->cu, &g->act);
    kg_front_free(g->front, g->cu);
    choir_free(g->bufs);
    pthread_mutex_destroy(&g->mu);
    choir_free(g);
}

void choir_kokoro_set_gpu(choir_kokoro *m, choir_kokoro_gpu *g) {
    if (m) m->gpu = g;
}

/* The activation block for n pieces padded to `frames`: the tensors, plus
 * each piece's inputs' style projections (~37k floats, all AdaIN layers). */
static int64_t act_bytes(int n, int64_t frames) {
    if (n < 1) n = 1;
    return (int64_t)n * ((frames + 1) * KG_FLOATS_PER_FRAME + 40000) * (int64_t)sizeof(float) +
           KG_FIXED_BYTES;
}

int64_t choir_kokoro_gpu_estimate_bytes(int n, int64_t frames) {
    if (n < 1) n = 1;
    /* convolution taps (context scratch): the widest im2col, 128 channels x 11
     * taps at 120 samples per frame, for as many pieces as fit the 512 MB
     * group cap, and always at least one piece */
    int64_t taps = (frames + 1) * 120 * 128 * 11 * (int64_t)sizeof(float);
    if (taps < KG_CONV_SCRATCH) {
        int64_t per_group = KG_CONV_SCRATCH / taps;
        taps *= per_group < n ? per_group : n;
    }
    /* the front's work buffer, grown to the batched front's largest call:
     * ALBERT ~7.3k floats per id over all pieces' ids (at most one id per
     * frame), the shared LSTM (In + 10 H) = 3.2k floats per frame */
    int64_t front = (int64_t)n * (frames + 1) * KG_FRONT_FLOATS_PER_FRAME * (int64_t)sizeof(float);
    return act_bytes(n, frames) + taps + front;
}

void choir_kokoro_gpu_get_stats(choir_kokoro_gpu *g, choir_kokoro_gpu_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->stats;
    pthread_mutex_unlock(&g->mu);
}

void choir_kokoro_gpu_reset_stats(choir_kokoro_gpu *g) {
    pthread_mutex_lock(&g->mu);
    const int64_t wb = g->stats.weight_bytes;
    memset(&g->stats, 0, sizeof g->stats);
    g->stats.weight_bytes = wb;
    pthread_mutex_unlock(&g->mu);
}

/* --- activation block -------------------------------------------------------- */

static float *act_floats(choir_kokoro_gpu *g, int64_t n) {
    size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + KG_ALIGN - 1) / KG_ALIGN * KG_ALIGN;
    if (g->act_used + bytes > g->act.bytes) {
        g->act_exhausted = true;
        choir_err_set(g->err, CHOIR_ENOMEM,
                      "kokoro gpu: activation block of %zu bytes exhausted (%zu more wanted)",
                      g->act.bytes, bytes);
        return NULL;
    }
    float *p = (float *)((char *)g->act.ptr + g->act_used);
    g->act_used += bytes;
    if (g->act_used > g->act_high) g->act_high = g->act_used;
    return p;
}

/* --- blocks --------------------------------------------------------------- */

#define CK(call)                                                                                   \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_) return rc_;                                                                       \
    } while (0)
#define NEED(ptr)                                                                                  \
    do {                                                                                           \
        if (!(ptr)) return CHOIR_ENOMEM;                                                           \
    } while (0)

static void count(choir_kokoro_gpu *g, double flops, double bytes) {
    g->stats.flops += flops;
    g->stats.bytes += bytes;
}

static int conv(choir_kokoro_gpu *g, const kg_conv *c, const float *x, int64_t B, int64_t T,
                int stride, int pad, int dil, const int32_t *out_lens, float *y) {
    int64_t Tout = (T + 2 * pad - (int64_t)dil * (c->k - 1) - 1) / stride + 1;
    double rows = (double)c->cin * c->k, esz = c->w.bf16 ? 2 : 4;
    count(g, 2.0 * B * c->cout * rows * Tout,
          4.0 * B * c->cin * T + 2 * esz * B * rows * Tout + esz * c->cout * rows +
              2 * 4.0 * B * c->cout * Tout);
    return choir_cuda_conv1d_batched(g->cu, x, B, c->cin, T, c->w, c->b, c->cout, c->k, stride, pad,
                                     dil, out_lens, y, g->err);
}

static int conv_t(choir_kokoro_gpu *g, const kg_conv *c, const float *x, int64_t B, int64_t T,
                  int stride, int pad, const int32_t *out_lens, float *y) {
    int64_t Tout = (T - 1) * stride - 2 * pad + c->k;
    double esz = c->w.bf16 ? 2 : 4;
    count(g, 2.0 * B * c->cin * c->cout * c->k * T,
          4.0 * B * c->cin * T + esz * c->cin * c->cout * c->k + 2 * 4.0 * B * c->cout * c->k * T +
              4.0 * B * c->cout * Tout);
    return choir_cuda_conv_transpose1d_batched(g->cu, x, B, c->cin, T, c->w, c->b, c->cout, c->k,
                                               stride, pad, 0, out_lens, y, g->err);
}

static int adain(choir_kokoro_gpu *g, const kg_adain *a, const float *x, float *y, int64_t B,
                 int64_t T, const int32_t *lens, const float *gb) {
    count(g, 0, 3 * 4.0 * B * a->C * T);
    return choir_cuda_adain(g->cu, x, y, B, a->C, T, lens, a->norm_w, a->norm_b, gb + a->gb_off,
                            g->gb_stride, 1e-5f, g->err);
}

static int leaky(choir_kokoro_gpu *g, float *x, int64_t n, float slope) {
    count(g, 0, 8.0 * n);
    return choir_cuda_leaky_relu(g->cu, x, n, slope, g->err);
}

static int add_scale(choir_kokoro_gpu *g, const float *a, const float *b, float *y, int64_t n,
                     float scale) {
    count(g, 0, 12.0 * n);
    return choir_cuda_add_scale(g->cu, a, b, y, n, scale, g->err);
}

/* AdainResBlk1d over [B, cin, T] -> y [B, cout, T2], as kk_resblk_forward. */
static int resblk(choir_kokoro_gpu *g, const kg_resblk *b, const float *x, int64_t B, int64_t T,
                  const int32_t *lens, const int32_t *lens2, const float *gb, float *y) {
    size_t mark = g->act_used;
    int64_t T2 = b->upsample ? 2 * T : T;
    float *r = act_floats(g, B * b->cin * T2);  /* [B, cin, T2] */
    float *h = act_floats(g, B * b->cout * T2); /* [B, cout, T2] */
    float *sc = act_floats(g, B * b->cin * T2); /* [B, cin, T2] */
    NEED(r && h && sc);
    CK(adain(g, &b->norm1, x, r, B, T, lens, gb));
    CK(leaky(g, r, B * b->cin * T, 0.2f));
    if (b->upsample) {
        count(g, 6.0 * B * b->cin * T2, 4.0 * B * b->cin * (T + T2));
        CK(choir_cuda_conv_transpose1d_depthwise(g->cu, r, B, b->cin, T, b->pool_w, b->pool_b, 3, 2,
                                                 1, 1, lens2, sc, g->err));
        float *t = r;
        r = sc, sc = t;
    }
    CK(conv(g, &b->conv1, r, B, T2, 1, 1, 1, lens2, h));
    CK(adain(g, &b->norm2, h, h, B, T2, lens2, gb));
    CK(leaky(g, h, B * b->cout * T2, 0.2f));
    CK(conv(g, &b->conv2, h, B, T2, 1, 1, 1, lens2, y));
    const float *s = x;
    if (b->upsample) {
        count(g, 0, 4.0 * B * b->cin * (T + T2));
        CK(choir_cuda_upsample2_nearest(g->cu, x, B, b->cin, T, sc, g->err));
        s = sc;
    }
    if (b->conv1x1.w.w) {
        CK(conv(g, &b->conv1x1, s, B, T2, 1, 0, 1, lens2, h));
        s = h;
    }
    /* torch.rsqrt(torch.tensor(2)) in float32 */
    CK(add_scale(g, y, s, y, B * b->cout * T2, 0.70710677f));
    g->act_used = mark;
    return 0;
}

/* AdaINResBlock1 (Snake) over [B, C, T]; y may equal x. */
static int snakeblock(choir_kokoro_gpu *g, const kg_snake *b, const float *x, int64_t B, int64_t T,
                      const int32_t *lens, const float *gb, float *y) {
    static const int dil[3] = {1, 3, 5};
    size_t mark = g->act_used;
    int64_t n = B * b->C * T;
    float *t1 = act_floats(g, n), *t2 = act_floats(g, n);
    NEED(t1 && t2);
    if (y != x) CK(choir_cuda_copy_channels(g->cu, x, B, b->C, T, y, b->C, 0, g->err));
    for (int j = 0; j < 3; j++) {
        CK(adain(g, &b->adain1[j], y, t1, B, T, lens, gb));
        count(g, 0, 8.0 * n);
        CK(choir_cuda_snake(g->cu, t1, B, b->C, T, b->alpha1[j], g->err));
        CK(conv(g, &b->convs1[j], t1, B, T, 1, (b->k * dil[j] - dil[j]) / 2, dil[j], lens, t2));
        CK(adain(g, &b->adain2[j], t2, t2, B, T, lens, gb));
        count(g, 0, 8.0 * n);
        CK(choir_cuda_snake(g->cu, t2, B, b->C, T, b->alpha2[j], g->err));
        CK(conv(g, &b->convs2[j], t2, B, T, 1, (b->k - 1) / 2, 1, lens, t1));
        CK(add_scale(g, y, t1, y, n, 1.0f));
    }
    g->act_used = mark;
    return 0;
}

/* (rb0(x) + rb1(x) + rb2(x)) / 3 over [B, C, T] */
static int resblock_mean(choir_kokoro_gpu *g, int first, const float *x, int64_t B, int64_t C,
                         int64_t T, const int32_t *lens, const float *gb, float *y) {
    size_t mark = g->act_used;
    float *t = act_floats(g, B * C * T);
    NEED(t);
    for (int j = 0; j < 3; j++) {
        CK(snakeblock(g, &g->resblocks[first + j], x, B, T, lens, gb, j ? t : y));
        if (j) CK(add_scale(g, y, t, y, B * C * T, j == 2 ? 1.0f / 3.0f : 1.0f));
    }
    g->act_used = mark;
    return 0;
}

/* Hands each piece's [C, frames * per_frame + extra] slice of a padded
 * [B, C, T] device tensor to the trace (waits for the device). */
static int probe(choir_kokoro_gpu *g, const char *stage, const float *d, int64_t B, int64_t C,
                 int64_t T, int64_t per_frame, int64_t extra) {
    if (!g->trace) return 0;
    float *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)(B * C * T) * sizeof(float));
    float *piece = choir_alloc(CHOIR_MEM_OTHER, (size_t)(C * T) * sizeof(float));
    if (!h || !piece) {
        choir_free(h);
        choir_free(piece);
        return choir_err_set(g->err, CHOIR_ENOMEM, "kokoro gpu: out of memory for a trace");
    }
    choir_cuda_buf whole = g->act;
    int rc = choir_cuda_download(g->cu, h, &whole, (size_t)((const char *)d - (char *)g->act.ptr),
                                 (size_t)(B * C * T) * sizeof(float), g->err);
    for (int64_t b = 0; b < B && !rc; b++) {
        int64_t Tb = g->in[b].frames * per_frame + extra;
        for (int64_t c = 0; c < C; c++)
            memcpy(piece + c * Tb, h + (b * C + c) * T, (size_t)Tb * sizeof(float));
        g->trace(g->trace_user, (int)b, stage, piece, C, Tb);
    }
    choir_free(h);
    choir_free(piece);
    return rc;
}

/* The device part: inputs already uploaded. asr [B, 512, L], f0n [B, 2, L]
 * (F0 and N after their stride-2 convolutions), S [B, 22, F], gb [B, stride]
 * -> audio [B, 600 L]. L, F: the padded lengths. */
static int decode_device(choir_kokoro_gpu *g, int64_t B, int64_t L, const float *asr,
                         const float *f0n, const float *S, const float *gb, float *audio) {
    const int64_t F = 120 * L + 1, T0 = 20 * L, T1 = 120 * L;
    size_t mark = g->act_used;
    float *up = act_floats(g, B * 512 * 2 * L); /* [B, 512, 2L] */
    NEED(up);

    /* decoder */
    size_t scope = g->act_used;
    float *cat = act_floats(g, B * 1090 * L); /* [B, 514 or 1090, L] */
    float *x = act_floats(g, B * 1024 * L);   /* [B, 1024, L] */
    float *ar = act_floats(g, B * 64 * L);    /* [B, 64, L] */
    NEED(cat && x && ar);
    CK(choir_cuda_copy_channels(g->cu, asr, B, 512, L, cat, 514, 0, g->err));
    CK(choir_cuda_copy_channels(g->cu, f0n, B, 2, L, cat, 514, 512, g->err));
    CK(resblk(g, &g->encode, cat, B, L, g->len_L, g->len_L, gb, x));
    CK(conv(g, &g->asr_res, asr, B, L, 1, 0, 1, g->len_L, ar));
    for (int i = 0; i < 4; i++) {
        CK(choir_cuda_copy_channels(g->cu, x, B, 1024, L, cat, 1090, 0, g->err));
        CK(choir_cuda_copy_channels(g->cu, ar, B, 64, L, cat, 1090, 1024, g->err));
        CK(choir_cuda_copy_channels(g->cu, f0n, B, 2, L, cat, 1090, 1088, g->err));
        count(g, 0, 8.0 * B * 1090 * L);
        CK(resblk(g, &g->decode[i], cat, B, L, g->len_L, i < 3 ? g->len_L : g->len_2L, gb,
                  i < 3 ? x : up));
    }
    g->act_used = scope;
    CK(probe(g, "decoder_out", up, B, 512, 2 * L, 2, 0));

    /* generator stage 0: [B, 512, 2L] -> [B, 256, 20L] */
    float *x1 = act_floats(g, B * 256 * T0);
    NEED(x1);
    scope = g->act_used;
    float *src0 = act_floats(g, B * 256 * T0), *u0 = act_floats(g, B * 256 * T0);
    NEED(src0 && u0);
    CK(leaky(g, up, B * 512 * 2 * L, 0.1f));
    CK(conv(g, &g->noise_convs[0], S, B, F, 6, 3, 1, g->len_20L, src0));
    CK(snakeblock(g, &g->noise_res[0], src0, B, T0, g->len_20L, gb, src0));
    CK(conv_t(g, &g->ups[0], up, B, 2 * L, 10, 5, g->len_20L, u0));
    CK(add_scale(g, u0, src0, u0, B * 256 * T0, 1.0f));
    CK(resblock_mean(g, 0, u0, B, 256, T0, g->len_20L, gb, x1));
    g->act_used = scope;
    CK(probe(g, "stage0", x1, B, 256, T0, 20, 0));

    /* stage 1: [B, 256, 20L] -> [B, 128, 120L + 1] */
    float *u1 = act_floats(g, B * 128 * F), *x2 = act_floats(g, B * 128 * F);
    NEED(u1 && x2);
    CK(leaky(g, x1, B * 256 * T0, 0.1f));
    float *u1raw = x2; /* [B, 128, 120L]: x2 is free until the residual blocks */
    CK(conv_t(g, &g->ups[1], x1, B, T0, 6, 3, g->len_120L, u1raw));
    count(g, 0, 8.0 * B * 128 * F);
    CK(choir_cuda_reflect_pad(g->cu, u1raw, B, 128, T1, g->len_120L, 1, 0, u1, g->err));
    scope = g->act_used;
    float *src1 = act_floats(g, B * 128 * F);
    NEED(src1);
    CK(conv(g, &g->noise_convs[1], S, B, F, 1, 0, 1, g->len_F, src1));
    CK(snakeblock(g, &g->noise_res[1], src1, B, F, g->len_F, gb, src1));
    CK(add_scale(g, u1, src1, u1, B * 128 * F, 1.0f));
    g->act_used = scope;
    CK(resblock_mean(g, 3, u1, B, 128, F, g->len_F, gb, x2));

    /* conv_post and the inverse STFT */
    float *post = act_floats(g, B * 22 * F);
    NEED(post);
    CK(leaky(g, x2, B * 128 * F, 0.01f));
    CK(conv(g, &g->conv_post, x2, B, F, 1, 3, 1, g->len_F, post));
    CK(probe(g, "post", post, B, 22, F, 120, 1));
    count(g, 0, 4.0 * B * (22 * F + 600 * L));
    CK(choir_cuda_istft_magphase(g->cu, post, B, F, g->len_F, KK_NFFT, KK_HOP, audio, g->err));
    g->act_used = mark;
    return 0;
}

/* --- host side ------------------------------------------------------------ */

typedef struct prep_job {
    choir_kokoro_gpu *g;
    const choir_kokoro_decode_input *in;
    int64_t L;                 /* padded frames */
    float *asr, *f0n, *S, *gb; /* host staging [B, ...] */
    int *status;
} prep_job;

/* Piece b's CPU share: F0 / N convolutions, style projections, source spectrum. */
static void prep_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    prep_job *j = ctx;
    const choir_kokoro *m = j->g->m;
    const int64_t L = j->L, F = 120 * L + 1;
    for (int64_t b = begin; b < end; b++) {
        const choir_kokoro_decode_input *in = &j->in[b];
        const int64_t Lb = in->frames, Fb = 120 * Lb + 1;
        for (int64_t c = 0; c < 512; c++) {
            float *row = j->asr + (b * 512 + c) * L;
            memcpy(row, in->asr + c * Lb, (size_t)Lb * sizeof(float));
            memset(row + Lb, 0, (size_t)(L - Lb) * sizeof(float));
        }
        float *f0d = j->f0n + b * 2 * L, *nd = f0d + L;
        memset(f0d, 0, 2 * (size_t)L * sizeof(float));
        kk_conv1d(&m->f0_conv, in->f0, 2 * Lb, 2, 1, 1, f0d);
        kk_conv1d(&m->n_conv, in->n, 2 * Lb, 2, 1, 1, nd);
        float *gb = j->gb + b * j->g->gb_stride;
        for (int a = 0; a < j->g->n_adains; a++) {
            const kk_adain *h = j->g->adains[a]->host;
            choir_linear(in->style, 1, &h->fc.w, h->fc.b, gb + j->g->adains[a]->gb_off);
        }
        /* the source spectrum of piece b, then its zero padding */
        /* har [600 Lb], phase frames [18 Lb], the spectrum [22, 120 Lb + 1] */
        kk_ws *ws = kk_ws_create((3300 * Lb + 2048) * (int64_t)sizeof(float), NULL);
        float *S = j->S + b * 22 * F;
        float *Sb = ws ? kk_ws_floats(ws, 22 * Fb) : NULL;
        int rc = Sb ? kk_source_spectrum(m, in->f0, Lb, in->noise, Sb, ws) : CHOIR_ENOMEM;
        if (!rc)
            for (int64_t k = 0; k < 22; k++) {
                memcpy(S + k * F, Sb + k * Fb, (size_t)Fb * sizeof(float));
                memset(S + k * F + Fb, 0, (size_t)(F - Fb) * sizeof(float));
            }
        kk_ws_free(ws);
        j->status[b] = rc;
    }
}

static int upload_to(choir_kokoro_gpu *g, float *dst, const void *src, size_t bytes) {
    choir_cuda_buf whole = g->act;
    return choir_cuda_upload(g->cu, &whole, (size_t)((char *)dst - (char *)g->act.ptr), src, bytes,
                             g->err);
}

static int decode_locked(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                         float **audio, choir_err *err) {
    int64_t L = 0;
    for (int i = 0; i < n; i++) L = in[i].frames > L ? in[i].frames : L;
    const int64_t B = n, F = 120 * L + 1;
    int rc = 0;
    float *host = NULL;
    int32_t *lens = NULL;
    int *status = NULL;
    g->err = err;
    g->in = in;
    cudaSetDevice(choir_cuda_get_props(g->cu)->device);

    /* CPU share, pieces in parallel */
    size_t n_host = (size_t)B * (512 * L + 2 * L + 22 * F + g->gb_stride);
    host = choir_alloc(CHOIR_MEM_ACTIVATIONS, n_host * sizeof(float));
    lens = choir_alloc(CHOIR_MEM_OTHER, 5 * (size_t)B * sizeof *lens);
    status = choir_calloc(CHOIR_MEM_OTHER, (size_t)B, sizeof *status);
    if (!host || !lens || !status) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory for %d pieces", n);
        goto done;
    }
    prep_job job = {.g = g,
                    .in = in,
                    .L = L,
                    .asr = host,
                    .f0n = host + B * 512 * L,
                    .S = host + B * 514 * L,
                    .gb = host + B * (514 * L + 22 * F),
                    .status = status};
    if (n == 1)
        prep_range(&job, 0, 1, 0);
    else
        choir_pool_parallel_for(choir_pool_default(), B, 1, prep_range, &job);
    for (int i = 0; i < n; i++)
        if (status[i]) {
            rc = choir_err_set(err, status[i],
                               "kokoro gpu: source spectrum of piece %d: out of memory", i);
            goto done;
        }
    for (int i = 0; i < n; i++) {
        int64_t Lb = in[i].frames;
        lens[0 * B + i] = (int32_t)Lb;
        lens[1 * B + i] = (int32_t)(2 * Lb);
        lens[2 * B + i] = (int32_t)(20 * Lb);
        lens[3 * B + i] = (int32_t)(120 * Lb);
        lens[4 * B + i] = (int32_t)(120 * Lb + 1);
    }

    /* The activation block: grown (never shrunk) to this batch's estimate.
     * Should the estimate fall short (it is counted, not measured), the
     * batch is run again once in a block twice the size. */
    double t0 = choir_now_s();
    size_t need = (size_t)act_bytes(n, L);
    float *d_audio = NULL;
    for (int attempt = 0;; attempt++) {
        if (g->act.bytes < need) {
            choir_cuda_buf_free(g->cu, &g->act);
            if ((rc = choir_cuda_buf_alloc(g->cu, need, &g->act, err))) goto done;
        }
        g->act_used = 0;
        g->act_exhausted = false;
        float *d_lens = act_floats(g, 5 * B);
        float *d_in = act_floats(g, (int64_t)n_host);
        d_audio = act_floats(g, B * 600 * L);
        if (!d_lens || !d_in || !d_audio) {
            rc = CHOIR_ENOMEM;
        } else if (!(rc = upload_to(g, d_lens, lens, 5 * (size_t)B * sizeof *lens)) &&
                   !(rc = upload_to(g, d_in, host, n_host * sizeof(float)))) {
            const int32_t *dl = (const int32_t *)d_lens;
            g->len_L = dl, g->len_2L = dl + B, g->len_20L = dl + 2 * B, g->len_120L = dl + 3 * B,
            g->len_F = dl + 4 * B;
            rc = decode_device(g, B, L, d_in, d_in + B * 512 * L, d_in + B * 514 * L,
                               d_in + B * (514 * L + 22 * F), d_audio);
        }
        if (rc && g->act_exhausted && attempt == 0) {
            CHOIR_LOGW("kokoro gpu: activation estimate of %zu bytes fell short for %d pieces of "
                       "%lld frames; retrying with twice that",
                       need, n, (long long)L);
            if (err) choir_err_clear(err);
            need *= 2;
            continue;
        }
        if (rc) goto done;
        break;
    }
    for (int i = 0; i < n; i++) {
        size_t ns = (size_t)in[i].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME;
        audio[i] = choir_alloc(CHOIR_MEM_IO, ns * sizeof(float));
        if (!audio[i]) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of memory for audio");
            goto done;
        }
        choir_cuda_buf whole = g->act;
        size_t off = (size_t)((char *)(d_audio + (int64_t)i * 600 * L) - (char *)g->act.ptr);
        if ((rc = choir_cuda_download(g->cu, audio[i], &whole, off, ns * sizeof(float), err)))
            goto done;
    }
    g->stats.seconds += choir_now_s() - t0;
    g->stats.calls++;
    g->stats.pieces += n;
    CHOIR_LOGD("kokoro gpu: %d pieces, %lld frames padded: activations %zu of %zu bytes", n,
               (long long)L, g->act_high, g->act.bytes);
done:
    if (rc)
        for (int i = 0; i < n; i++) {
            choir_free(audio[i]);
            audio[i] = NULL;
        }
    choir_free(host);
    choir_free(lens);
    choir_free(status);
    g->err = NULL;
    g->in = NULL;
    return rc;
}

int kk_gpu_decode_traced(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                         float **audio, kk_gpu_trace_fn trace, void *user, choir_err *err) {
    if (!g || (!in && n > 0) || !audio || n < 0)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: bad decode arguments");
    for (int i = 0; i < n; i++) audio[i] = NULL;
    for (int i = 0; i < n; i++)
        if (!in[i].asr || !in[i].f0 || !in[i].n || !in[i].style || in[i].frames < 1 ||
            in[i].frames > 100000)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "kokoro gpu: piece %d: missing input or %lld frames (1..100000)",
                                 i, (long long)in[i].frames);
    if (n == 0) return 0;
    pthread_mutex_lock(&g->mu);
    g->trace = trace, g->trace_user = user;
    int rc = decode_locked(g, in, n, audio, err);
    g->trace = NULL, g->trace_user = NULL;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int choir_kokoro_gpu_decode(choir_kokoro_gpu *g, const choir_kokoro_decode_input *in, int n,
                            float **audio, choir_err *err) {
    return kk_gpu_decode_traced(g, in, n, audio, NULL, NULL, err);
}

/* The F0 / N residual blocks on the device for n pieces at once: x[b]
 * [512, L[b]] (the shared LSTM's output, channels first), s_pro[b] ->
 * f0[b], n_out[b] [2 L[b]], as kk_f0_n after its LSTM. The pieces are padded
 * to the longest (zero tails, as the decoder's batch) and every block is one
 * batched call. Uses the activation block (grown here if needed; the caller
 * holds the mutex, so no decode is using it). */
static int f0n_locked(choir_kokoro_gpu *g, int nb, const float *const *x, const int64_t *L,
                      const float *const *s_pro, float *const *f0, float *const *n_out,
                      choir_err *err) {
    const double flops = g->stats.flops, bytes = g->stats.bytes; /* the decoder's figures */
    const int64_t G = g->f0n_gb_stride, saved_stride = g->gb_stride, B = nb;
    int64_t Lm = 0;
    for (int b = 0; b < nb; b++) {
        if (L[b] < 1 || L[b] > INT32_MAX / 2 || !x[b] || !s_pro[b] || !f0[b] || !n_out[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro gpu: F0 / N piece %d: %lld frames or no data",
                                 b, (long long)L[b]);
        Lm = L[b] > Lm ? L[b] : Lm;
    }
    /* host staging: lens L [B] | lens 2L [B] | style projections [B, G] |
     * x [B, 512, Lm], each part starting on a 256-byte boundary */
    const size_t o_l2 = ((size_t)B + 63) / 64 * 64, o_gb = o_l2 + ((size_t)B + 63) / 64 * 64;
    const size_t o_x = o_gb + ((size_t)(B * G) + 63) / 64 * 64;
    const size_t n_host = o_x + (size_t)(B * 512 * Lm);
    float *host = choir_calloc(CHOIR_MEM_ACTIVATIONS, n_host, sizeof(float));
    if (!host) return choir_err_set(err, CHOIR_ENOMEM, "kokoro gpu: out of host memory");
    for (int b = 0; b < nb; b++) {
        ((int32_t *)host)[b] = (int32_t)L[b];
        ((int32_t *)(host + o_l2))[b] = (int32_t)(2 * L[b]);
        float *gb = host + o_gb + b * G;
        for (int a = 0; a < g->n_f0n_adains; a++) {
            const kk_adain *h = g->f0n_adains[a]->host;
            choir_linear(s_pro[b], 1, &h->fc.w, h->fc.b, gb + g->f0n_adains[a]->gb_off);
        }
        for (int c = 0; c < 512; c++)
            memcpy(host + o_x + (size_t)(b * 512 + c) * Lm, x[b] + c * L[b],
                   (size_t)L[b] * sizeof(float));
    }

    /* device: the staging copy, then a, b [B, 512, 2Lm] and resblk's three
     * temporaries of up to [B, 512, 2Lm], the projections [B, 2, 2Lm]; with
     * margin */
    size_t need = (n_host + (size_t)B * (6 * 1024 * (size_t)(Lm + 1) + 4 * 4096)) * sizeof(float) +
                  KG_FIXED_BYTES;
    int rc = 0;
    g->err = err;
    g->gb_stride = G; /* adain() reads the stride of the projections it is given */
    if (g->act.bytes < need) {
        choir_cuda_buf_free(g->cu, &g->act);
        if ((rc = choir_cuda_buf_alloc(g->cu, need, &g->act, err))) goto done;
    }
    g->act_used = 0;
    g->act_exhausted = false;
    float *d_in = act_floats(g, (int64_t)n_host);
    float *a = act_floats(g, B * 1024 * Lm), *bb = act_floats(g, B * 1024 * Lm);
    float *fn = act_floats(g, B * 4 * Lm);
    if (!d_in || !a || !bb || !fn) {
        rc = CHOIR_ENOMEM;
        goto done;
    }
    if ((rc = upload_to(g, d_in, host, n_host * sizeof(float)))) goto done;
    const int32_t *len_L = (const int32_t *)d_in, *len_2L = (const int32_t *)(d_in + o_l2);
    const float *d_gb = d_in + o_gb, *d_x = d_in + o_x;
    /* fn: F0 of every piece [B, 1, 2Lm], then N [B, 1, 2Lm] */
    for (int which = 0; which < 2 && !rc; which++) {
        const kg_resblk *blk = which ? g->n_blk : g->f0_blk;
        if (!rc) rc = resblk(g, &blk[0], d_x, B, Lm, len_L, len_L, d_gb, a);        /* [512, L] */
        if (!rc) rc = resblk(g, &blk[1], a, B, Lm, len_L, len_2L, d_gb, bb);        /* [256, 2L] */
        if (!rc) rc = resblk(g, &blk[2], bb, B, 2 * Lm, len_2L, len_2L, d_gb, a);   /* [256, 2L] */
        if (!rc)
            rc = conv(g, which ? &g->n_proj : &g->f0_proj, a, B, 2 * Lm, 1, 0, 1, len_2L,
                      fn + which * B * 2 * Lm);
    }
    for (int b = 0; b < nb && !rc; b++) {
        choir_cuda_buf whole = g->act;
        size_t off = (size_t)((char *)fn - (char *)g->act.ptr);
        rc = choir_cuda_download(g->cu, f0[b], &whole, off + (size_t)(b * 2 * Lm) * sizeof(float),
                                 2 * (size_t)L[b] * sizeof(float), err);
        if (!rc)
            rc = choir_cuda_download(g->cu, n_out[b], &whole,
                                     off + (size_t)((B + b) * 2 * Lm) * sizeof(float),
                                     2 * (size_t)L[b] * sizeof(float), err);
    }
done:
    if (rc == CHOIR_ENOMEM && err && !err->code)
        choir_err_set(err, rc, "kokoro gpu: out of device memory for F0 / N (%d pieces, %lld frames)",
                      nb, (long long)Lm);
    g->stats.flops = flops, g->stats.bytes = bytes;
    g->gb_stride = saved_stride;
    g->err = NULL;
    choir_free(host);
    return rc;
}

int kk_gpu_f0n_blocks(choir_kokoro_gpu *g, int nb, const float *const *x, const int64_t *L,
                      const float *const *s_pro, float *const *f0, float *const *n,
                      choir_err *err) {
    if (!g || !g->has_f0n) return 1;
    if (nb < 1) return 0;
    pthread_mutex_lock(&g->mu);
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = f0n_locked(g, nb, x, L, s_pro, f0, n, err);
    g->stats.f0n_seconds += choir_now_s() - t0;
    g->stats.f0n_calls++;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int kk_gpu_albert(choir_kokoro_gpu *g, int n, const float *const *emb, const int64_t *T,
                  float *const *bert, float *const *d_en, choir_err *err) {
    if (!g || !kg_front_has_albert(g->front)) return 1;
    pthread_mutex_lock(&g->mu);
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = kg_front_albert(g->front, g->cu, n, emb, T, bert, d_en, err);
    g->stats.albert_seconds += choir_now_s() - t0;
    g->stats.albert_calls++;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int kk_gpu_bilstm(choir_kokoro_gpu *g, const kk_lstm *l, int n, const float *const *x,
                  const int64_t *T, float *const *y, choir_err *err) {
    if (!g || !kg_front_has(g->front, l)) return 1;
    pthread_mutex_lock(&g->mu);
    double t0 = choir_now_s();
    int rc = choir_cuda_make_current(g->cu, err);
    if (!rc) rc = kg_front_bilstm(g->front, g->cu, l, n, x, T, y, err);
    g->stats.lstm_seconds += choir_now_s() - t0;
    g->stats.lstm_calls++;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

#endif /* CHOIR_HAVE_CUDA */
