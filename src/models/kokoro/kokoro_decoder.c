/* Kokoro's decoder and iSTFTNet generator, written once over backend
 * operations (choir/backend.h, choir/backend_vocoder.h) for B pieces at once
 * (spec §5: decoder, then generator):
 *
 *   asr [512, L], F0 / N [2L] --stride-2 convs--> [1, L] each
 *   [asr ; F0 ; N] --encode--> [1024, L] --4 x decode ([x ; asr_res ; F0 ; N])--> [512, 2L]
 *   --ups.0 + noise branch, 3 Snake blocks--> [256, 20L]
 *   --ups.1, reflect pad + noise branch, 3 Snake blocks--> [128, 120L + 1]
 *   --conv_post--> [22, 120L + 1] --iSTFT--> audio [600 L]
 *
 * Every tensor is [B, C, T] with each piece padded to the longest; the
 * operations given output lengths keep the padding at zero, so a piece's
 * convolutions read zeros past its end as its own zero padding would. The
 * lengths per stage (L, 2L, 20L, 120L, 120L + 1) are int32 backend memory.
 *
 * On the host, per piece: the harmonic source and its 20-point STFT (the
 * source integrates F0 into a phase of ~1e5 rad where one float32 ulp moves
 * the audio by tens of percent on random weights, docs/kokoro.md, so it is
 * computed exactly as the reference rounds it; only its spectrum
 * [22, 120L + 1] goes to the backend).
 *
 * On the CPU backend a batch of one is bit for bit the single-piece CPU
 * computation this replaced (the operations' CPU versions are the kernels.h
 * calls it made, in the same order). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_vocoder.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_decoder.h"

typedef struct kd_conv {
    choir_weight w; /* conv1d [cout, cin k]; conv_transpose1d [cin, cout k]; backend memory */
    const float *b; /* [cout] or NULL */
    int cin, cout, k;
} kd_conv;

typedef struct kd_adain {
    choir_weight fc_w;            /* [2C, 128]; not put on the backend under one product */
    const float *fc_b;            /* [2C] */
    const float *norm_w, *norm_b; /* [C] or NULL */
    const kk_linear *fc;          /* the model's fc (host), for the stacked product */
    int C;
    int64_t off; /* this layer's projections: [B, 2C] at gb + B off, or piece b's at
                    gb + b gb_floats + off under one product (kd_style) */
} kd_adain;

typedef struct kd_resblk {
    int cin, cout;
    bool upsample;
    kd_adain norm1, norm2;
    kd_conv conv1, conv2, conv1x1;  /* conv1x1.w.data NULL when cin == cout */
    const float *pool_w, *pool_b;   /* depthwise [cin, 1, 3], [cin] */
} kd_resblk;

typedef struct kd_snake {
    int C, k;
    kd_conv convs1[3], convs2[3];
    kd_adain adain1[3], adain2[3];
    const float *alpha1[3], *alpha2[3]; /* [C] */
} kd_snake;

/* The decoder's page-locked block on a device (CHOIR_KOKORO_PINNED=1): the
 * inputs are staged and the audio comes back through it, kept from call to
 * call (grown when a call needs more, never past KD_PIN_MAX). A device
 * serves one call at a time (kk_exec's lock), so one block. */
typedef struct kd_pin {
    void *p;
    size_t bytes;
} kd_pin;
#define KD_PIN_MAX ((size_t)512 << 20)

struct kk_dec {
    const choir_kokoro *m;
    choir_backend *be;
    kd_pin *pin; /* on a device */
    choir_backend_weights *ws;
    kd_conv f0_conv, n_conv, asr_res;
    kd_resblk encode, decode[4];
    kd_conv noise_convs[2], ups[2], conv_post;
    kd_snake noise_res[2], resblocks[6];
    choir_nsf_source nsf; /* the harmonic source's parameters (l_linear's merge) */
    kd_adain *adains[64]; /* every AdaIN layer, for the style projections */
    int n_adains;
    int64_t gb_floats; /* projections of one piece, all layers */

    /* The prosody predictor's F0 / N residual blocks and projections, when
     * the model has them (always f32: F0 feeds the phase-sensitive source),
     * with their own AdaIN list (projections of s_pro, not of the decoder's
     * style). put_adain files layers there while `putting_f0n`. */
    bool has_f0n, putting_f0n;
    kd_resblk f0_blk[3], n_blk[3];
    kd_conv f0_proj, n_proj;
    kd_adain *f0n_adains[16];
    int n_f0n_adains;
    int64_t f0n_gb_floats;

    /* On a device (unless CHOIR_KOKORO_STYLE_PRODUCT=0): every AdaIN layer's fc(style)
     * for all pieces as one product over the layers' fc weights stacked by
     * rows ([gb_floats, 128] and [f0n_gb_floats, 128], f32, dequantized),
     * instead of one small product per layer (58 in the decoder, 12 in the
     * F0 / N blocks); its output is piece-major ([B, gb_floats]). On by
     * default since it passed the GPU check (H100, 6 Dec 2026: equal to the
     * per-layer products); the host keeps the per-layer products (bit for
     * bit what it computed before). */
    bool one_style;
    choir_weight style_w, f0n_style_w;
    const float *style_b, *f0n_style_b;

    /* On a device (unless CHOIR_KOKORO_CONV_STATS=0; on by default since
     * its H100 run of 7 Dec 2026: 32 pieces at once 0.77 -> 0.71 s): a
     * Snake unit's AdaIN statistics come from the convolution that produced its input (its epilogue's per-128-frame
     * partials, choir_op_conv1d_adain_snake_stats) instead of a pass over
     * that input, and a residual block mean's shared input has its
     * statistics taken once for its three blocks (choir_op_adain_stats): 22
     * of a generator stage's 24 passes gone. The host never takes it. */
    bool conv_stats;
};

/* --- weights on the backend ------------------------------------------------ */

static void put_conv(kk_dec *d, const kk_conv *c, bool transposed, bool exact, kd_conv *out) {
    memset(out, 0, sizeof *out);
    out->cin = c->cin, out->cout = c->cout, out->k = c->k;
    if (!c->w) return;
    choir_weight hw = transposed ? choir_weight_f32(c->w, c->cin, (int64_t)c->cout * c->k)
                                 : choir_weight_f32(c->w, c->cout, (int64_t)c->cin * c->k);
    if (exact)
        choir_backend_weight_exact(d->ws, &hw, &out->w);
    else
        choir_backend_weight(d->ws, &hw, &out->w);
    out->b = choir_backend_vec(d->ws, c->b, c->cout);
}

static void put_adain(kk_dec *d, const kk_adain *a, kd_adain *out) {
    memset(out, 0, sizeof *out);
    out->C = a->C;
    out->fc = &a->fc;
    /* the projections stay f32 (they scale every normalised sample) */
    if (!d->one_style) {
        choir_backend_weight_exact(d->ws, &a->fc.w, &out->fc_w);
        out->fc_b = choir_backend_vec(d->ws, a->fc.b, 2LL * a->C);
    }
    out->norm_w = choir_backend_vec(d->ws, a->norm_w, a->C);
    out->norm_b = choir_backend_vec(d->ws, a->norm_b, a->C);
    if (d->putting_f0n) {
        out->off = d->f0n_gb_floats;
        d->f0n_gb_floats += 2LL * a->C;
        if (d->n_f0n_adains < (int)(sizeof d->f0n_adains / sizeof d->f0n_adains[0]))
            d->f0n_adains[d->n_f0n_adains] = out;
        d->n_f0n_adains++;
        return;
    }
    out->off = d->gb_floats;
    d->gb_floats += 2LL * a->C;
    if (d->n_adains < (int)(sizeof d->adains / sizeof d->adains[0])) d->adains[d->n_adains] = out;
    d->n_adains++;
}

static void put_resblk(kk_dec *d, const kk_resblk *b, kd_resblk *out) {
    memset(out, 0, sizeof *out);
    out->cin = b->cin, out->cout = b->cout, out->upsample = b->upsample;
    put_adain(d, &b->norm1, &out->norm1);
    put_adain(d, &b->norm2, &out->norm2);
    put_conv(d, &b->conv1, false, d->putting_f0n, &out->conv1);
    put_conv(d, &b->conv2, false, d->putting_f0n, &out->conv2);
    put_conv(d, &b->conv1x1, false, d->putting_f0n, &out->conv1x1);
    if (b->upsample) {
        out->pool_w = choir_backend_vec(d->ws, b->pool.w, (int64_t)b->cin * 3);
        out->pool_b = choir_backend_vec(d->ws, b->pool.b, b->cin);
    }
}

static void put_snake(kk_dec *d, const kk_snakeblock *b, kd_snake *out) {
    memset(out, 0, sizeof *out);
    out->C = b->C, out->k = b->k;
    for (int j = 0; j < 3; j++) {
        put_conv(d, &b->convs1[j], false, false, &out->convs1[j]);
        put_conv(d, &b->convs2[j], false, false, &out->convs2[j]);
        put_adain(d, &b->adain1[j], &out->adain1[j]);
        put_adain(d, &b->adain2[j], &out->adain2[j]);
        out->alpha1[j] = choir_backend_vec(d->ws, b->alpha1[j], b->C);
        out->alpha2[j] = choir_backend_vec(d->ws, b->alpha2[j], b->C);
    }
}

/* The fc weights of n AdaIN layers stacked by rows into one f32 weight on the
 * backend ([rows, 128], layer a's rows from its offset), their biases beside
 * (absent ones as zeros). Host memory only for the copy's duration; 0 or
 * CHOIR_ENOMEM (a failed upload is the store's error). */
/* fc(style) of `n` AdaIN layers for B pieces' style rows x into gb (layer
 * a's block from its offset): the stacked weight's one product (one_w, built
 * by put_style_stack when d->one_style), or a small product per layer. */
static void style_products(const kk_dec *d, choir_stream *s, const float *x, int64_t B,
                           kd_adain *const *layers, int n, const choir_weight *one_w, const float *one_b,
                           float *gb) {
    if (d->one_style) {
        choir_op_linear(s, x, B, one_w, one_b, gb);
        return;
    }
    for (int a = 0; a < n; a++)
        choir_op_linear(s, x, B, &layers[a]->fc_w, layers[a]->fc_b, gb + B * layers[a]->off);
}

static int put_style_stack(kk_dec *d, kd_adain *const *layers, int n, int64_t rows,
                           choir_weight *w, const float **bias) {
    float *hw = choir_alloc(CHOIR_MEM_OTHER, (size_t)(rows * KK_STYLE) * sizeof(float));
    float *hb = choir_calloc(CHOIR_MEM_OTHER, (size_t)rows, sizeof(float));
    int rc = hw && hb ? 0 : CHOIR_ENOMEM;
    for (int a = 0; a < n && !rc; a++) {
        const kd_adain *l = layers[a];
        for (int64_t r = 0; r < 2LL * l->C; r++)
            choir_weight_row_f32(&l->fc->w, r, hw + (l->off + r) * KK_STYLE);
        if (l->fc->b) memcpy(hb + l->off, l->fc->b, (size_t)(2 * l->C) * sizeof(float));
    }
    if (!rc) {
        choir_weight hwt = choir_weight_f32(hw, rows, KK_STYLE);
        choir_backend_weight_exact(d->ws, &hwt, w);
        *bias = choir_backend_vec(d->ws, hb, rows);
    }
    choir_free(hw);
    choir_free(hb);
    return rc;
}

kk_dec *kk_dec_create(const choir_kokoro *m, choir_backend *be, choir_err *err) {
    kk_dec *d = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *d);
    if (!d) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the decoder");
        return NULL;
    }
    d->m = m, d->be = be;
    if (!choir_backend_is_host(be) && !(d->pin = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *d->pin))) {
        choir_free(d);
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the decoder");
        return NULL;
    }
    d->one_style = !choir_backend_is_host(be) && kk_switch_on("CHOIR_KOKORO_STYLE_PRODUCT");
    d->conv_stats = !choir_backend_is_host(be) && kk_switch_on("CHOIR_KOKORO_CONV_STATS");
    kk_nsf_params(m, &d->nsf);
    if (!(d->ws = choir_backend_weights_create(be, err))) {
        choir_free(d->pin);
        choir_free(d);
        return NULL;
    }
    /* F0 and N feed the phase-sensitive source side: always f32 */
    put_conv(d, &m->f0_conv, false, true, &d->f0_conv);
    put_conv(d, &m->n_conv, false, true, &d->n_conv);
    put_conv(d, &m->asr_res, false, false, &d->asr_res);
    put_resblk(d, &m->encode, &d->encode);
    for (int i = 0; i < 4; i++) put_resblk(d, &m->decode[i], &d->decode[i]);
    for (int i = 0; i < 2; i++) {
        put_conv(d, &m->noise_convs[i], false, false, &d->noise_convs[i]);
        put_conv(d, &m->ups[i], true, false, &d->ups[i]);
        put_snake(d, &m->noise_res[i], &d->noise_res[i]);
    }
    for (int i = 0; i < 6; i++) put_snake(d, &m->resblocks[i], &d->resblocks[i]);
    put_conv(d, &m->conv_post, false, false, &d->conv_post);
    d->has_f0n = m->f0_blk[0].conv1.w && m->n_blk[0].conv1.w && m->f0_proj.w && m->n_proj.w;
    if (d->has_f0n) {
        d->putting_f0n = true;
        for (int i = 0; i < 3; i++) {
            put_resblk(d, &m->f0_blk[i], &d->f0_blk[i]);
            put_resblk(d, &m->n_blk[i], &d->n_blk[i]);
        }
        put_conv(d, &m->f0_proj, false, true, &d->f0_proj);
        put_conv(d, &m->n_proj, false, true, &d->n_proj);
        d->putting_f0n = false;
    }
    int rc = choir_backend_weights_status(d->ws, err);
    if (!rc && (d->n_adains > (int)(sizeof d->adains / sizeof d->adains[0]) ||
                d->n_f0n_adains > (int)(sizeof d->f0n_adains / sizeof d->f0n_adains[0])))
        rc = choir_err_set(err, CHOIR_EINTERNAL, "kokoro: %d + %d AdaIN layers", d->n_adains,
                           d->n_f0n_adains);
    if (!rc && d->one_style) {
        if (put_style_stack(d, d->adains, d->n_adains, d->gb_floats, &d->style_w, &d->style_b) ||
            (d->has_f0n && put_style_stack(d, d->f0n_adains, d->n_f0n_adains, d->f0n_gb_floats,
                                           &d->f0n_style_w, &d->f0n_style_b)))
            rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the style projections");
        else
            rc = choir_backend_weights_status(d->ws, err);
    }
    if (rc) {
        choir_err_prefix(err, "kokoro: decoder weights on %s", choir_backend_name(be));
        kk_dec_free(d);
        return NULL;
    }
    return d;
}

void kk_dec_free(kk_dec *d) {
    if (!d) return;
    if (d->pin && d->pin->p) choir_backend_host_free(d->be, d->pin->p);
    choir_free(d->pin);
    choir_backend_weights_free(d->ws);
    choir_free(d);
}

/* The page-locked block of at least `bytes` (NULL: off, too large or
 * refused; the caller stages in ordinary memory). */
static void *kd_pin_get(const kk_dec *d, size_t bytes) {
    const char *v = getenv("CHOIR_KOKORO_PINNED");
    if (!d->pin || !v || strcmp(v, "1") != 0 || bytes > KD_PIN_MAX) return NULL;
    if (d->pin->p && d->pin->bytes >= bytes) return d->pin->p;
    if (d->pin->p) choir_backend_host_free(d->be, d->pin->p);
    d->pin->p = choir_backend_host_alloc(d->be, bytes);
    d->pin->bytes = d->pin->p ? bytes : 0;
    return d->pin->p;
}

int64_t kk_dec_weight_bytes(const kk_dec *d) { return d ? choir_backend_weights_bytes(d->ws) : 0; }

/* --- memory plan ----------------------------------------------------------- */

/* Working floats per padded frame and piece at the deepest point: the last
 * generator stage's five [128, 120 L + 1] tensors, the stage-0 output
 * [256, 20 L], the spectrum [22, 120 L + 1], the audio [600 L] and the
 * inputs (~86k counted). */
/* (104k: on the CPU a Snake unit's fused convolution holds its activation and
 * its product beside the block's one temporary, one [128, 120 L] more than
 * the five. A device's fused convolution holds neither; there the AdaIN
 * statistics of CHOIR_KOKORO_CONV_STATS, three [128, ceil(120 L / 128), 2]
 * double buffers, ~1.4k floats a frame, fit in what the CPU alone needs.) */
#define KD_FLOATS_PER_FRAME 104000
/* per piece: the style projections (~37k floats) and alignment slack of the
 * ~60 blocks carved per call */
#define KD_FLOATS_PER_PIECE 48000

int64_t kk_dec_work_bytes(int n, int64_t frames) {
    if (n < 1) n = 1;
    return (int64_t)n * ((frames + 1) * KD_FLOATS_PER_FRAME + KD_FLOATS_PER_PIECE) *
               (int64_t)sizeof(float) +
           ((int64_t)1 << 16);
}

int64_t kk_dec_host_bytes(int n, int64_t frames) {
    /* the harmonic source of each piece: [600 L] samples, [2L, 9] phases */
    return (int64_t)n * (618 * frames + 64) * (int64_t)sizeof(float);
}

/* --- blocks ------------------------------------------------------------------ */

/* One batch's state: the stream, the pieces, lengths per stage. */
typedef struct kd_run {
    const kk_dec *d;
    choir_stream *s;
    int64_t B, L;
    const int32_t *len_L, *len_2L, *len_20L, *len_120L, *len_F; /* backend [B] each */
    const float *gb;                                            /* style projections */
    int64_t gb_piece; /* 0: layer-major [B, 2C] blocks; else piece-major, floats per piece */
    const choir_kokoro_decode_input *in;
    kk_dec_trace_fn trace;
    void *trace_user;
    kk_dec_stats *st; /* the convolutions' work, counted */
    double *clk;      /* CHOIR_KOKORO_PROFILE: the clock at each stage's end, else NULL */
} kd_run;

/* The end of profiled stage i: waits for the backend, then reads the clock. */
static void tick(const kd_run *r, int i) {
    if (!r->clk) return;
    choir_stream_sync(r->s, NULL);
    r->clk[i] = choir_now_s();
}

/* Padding included: what the device really computes. */
static int conv(const kd_run *r, const kd_conv *c, const float *x, int64_t T, int stride, int pad,
                int dil, const int32_t *out_lens, float *y) {
    const int64_t Tout = (T + 2 * pad - (int64_t)dil * (c->k - 1) - 1) / stride + 1, B = r->B;
    const double rows = (double)c->cin * c->k, esz = c->w.kind == CHOIR_WEIGHT_BF16 ? 2 : 4;
    r->st->flops += 2.0 * B * c->cout * rows * Tout;
    /* stride 1 takes the implicit GEMM on CUDA: x read, y written; a strided
     * one the tap matrix (written and read) and a pass adding the bias */
    r->st->bytes += 4.0 * B * c->cin * T + esz * c->cout * rows +
                    (stride == 1 ? 4.0 * B * c->cout * Tout
                                 : 2 * esz * B * rows * Tout + 2 * 4.0 * B * c->cout * Tout);
    return choir_op_conv1d_lens(r->s, x, r->B, c->cin, T, &c->w, c->b, c->cout, c->k, stride, pad,
                                dil, out_lens, y);
}

static int conv_t(const kd_run *r, const kd_conv *c, const float *x, int64_t T, int stride,
                  int pad, const int32_t *out_lens, float *y) {
    const int64_t Tout = (T - 1) * stride - 2 * pad + c->k, B = r->B;
    const double esz = c->w.kind == CHOIR_WEIGHT_BF16 ? 2 : 4;
    r->st->flops += 2.0 * B * c->cin * c->cout * c->k * T;
    r->st->bytes += 4.0 * B * c->cin * T + esz * c->cin * c->cout * c->k +
                    2 * 4.0 * B * c->cout * c->k * T + 4.0 * B * c->cout * Tout;
    return choir_op_conv_transpose1d_lens(r->s, x, r->B, c->cin, T, &c->w, c->b, c->cout, c->k,
                                          stride, pad, 0, out_lens, y);
}

/* Layer a's gamma, beta of piece 0, and the stride to the next piece's. */
static const float *style_of(const kd_run *r, const kd_adain *a, int64_t *stride) {
    if (r->gb_piece) {
        *stride = r->gb_piece;
        return r->gb + a->off;
    }
    *stride = 2LL * a->C;
    return r->gb + r->B * a->off;
}

static int adain(const kd_run *r, const kd_adain *a, const float *x, float *y, int64_t T,
                 const int32_t *lens) {
    int64_t stride;
    const float *gb = style_of(r, a, &stride);
    return choir_op_adain(r->s, x, y, r->B, a->C, T, lens, a->norm_w, a->norm_b, gb, stride,
                          1e-5f);
}

static int leaky(const kd_run *r, float *x, int64_t n, float slope) {
    return choir_op_act(r->s, CHOIR_ACT_LEAKY_RELU, x, n, slope);
}

/* AdainResBlk1d (spec §4.5) over [B, cin, T] -> y [B, cout, T2]:
 *   res = conv2(lrelu(AdaIN2(conv1(pool?(lrelu(AdaIN1(x)))))))
 *   sc  = conv1x1?(upsample_nearest?(x))
 *   y   = (res + sc) / sqrt(2) */
static int resblk(const kd_run *r, const kd_resblk *b, const float *x, int64_t T,
                  const int32_t *lens, const int32_t *lens2, float *y) {
    choir_stream *s = r->s;
    const int64_t B = r->B, T2 = b->upsample ? 2 * T : T;
    size_t mark = choir_stream_mark(s);
    float *a = choir_stream_floats(s, B * b->cin * T2, "kokoro resblock");  /* [B, cin, T2] */
    float *h = choir_stream_floats(s, B * b->cout * T2, "kokoro resblock"); /* [B, cout, T2] */
    float *sc = choir_stream_floats(s, B * b->cin * T2, "kokoro resblock"); /* [B, cin, T2] */
    if (!a || !h || !sc) return choir_stream_status(s, NULL);
    adain(r, &b->norm1, x, a, T, lens);
    leaky(r, a, B * b->cin * T, 0.2f);
    if (b->upsample) {
        choir_op_conv_transpose1d_depthwise_lens(s, a, B, b->cin, T, b->pool_w, b->pool_b, 3, 2,
                                                 1, 1, lens2, sc);
        float *t = a;
        a = sc, sc = t;
    }
    conv(r, &b->conv1, a, T2, 1, 1, 1, lens2, h);
    adain(r, &b->norm2, h, h, T2, lens2);
    leaky(r, h, B * b->cout * T2, 0.2f);
    conv(r, &b->conv2, h, T2, 1, 1, 1, lens2, y);
    const float *sk = x;
    if (b->upsample) {
        choir_op_upsample2_nearest(s, x, B, b->cin, T, sc);
        sk = sc;
    }
    if (b->conv1x1.w.data) {
        conv(r, &b->conv1x1, sk, T2, 1, 0, 1, lens2, h);
        sk = h;
    }
    /* torch.rsqrt(torch.tensor(2)) in float32 */
    choir_op_add_scale(s, y, sk, y, B * b->cout * T2, 0.70710677f);
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

/* The work of one Snake unit's convolution, counted as the fused operation
 * moves it: x read once for the statistics and once for the product, the
 * weight, y written (and the residual read). */
static void count_unit(const kd_run *r, const kd_conv *c, int64_t T, bool residual) {
    const double esz = c->w.kind == CHOIR_WEIGHT_BF16 ? 2 : 4, B = (double)r->B;
    r->st->flops += 2.0 * B * c->cout * (double)c->cin * c->k * T;
    r->st->bytes += 2 * 4.0 * B * c->cin * T + esz * c->cout * (double)c->cin * c->k +
                    (residual ? 2 : 1) * 4.0 * B * c->cout * T;
}

/* AdaINResBlock1 (spec §4.6): three dilated (1, 3, 5) Snake residual units
 * over [B, C, T]; y may equal x. Each unit is two fused operations:
 *   t = conv1(snake1(adain1(y)));  y = y + conv2(snake2(adain2(t)))
 * With the decoder's conv_stats, each convolution's epilogue also leaves the
 * AdaIN statistics of what it wrote for the next operation (t's for conv2,
 * y's for the next unit's conv1), and the first unit takes x's from x_part
 * when given (NULL: its own pass over x). */
static int snakeblock(const kd_run *r, const kd_snake *b, const float *x, int64_t T,
                      const int32_t *lens, const double *x_part, float *y) {
    static const int dil[3] = {1, 3, 5};
    choir_stream *s = r->s;
    const int64_t B = r->B, n = B * b->C * T;
    const bool stats = r->d->conv_stats;
    const size_t part_bytes = (size_t)(B * b->C * ((T + 127) / 128) * 2) * sizeof(double);
    size_t mark = choir_stream_mark(s);
    float *t = choir_stream_floats(s, n, "kokoro snake block");
    /* [B, C, ceil(T / 128), 2] each: t's, and y's for the next unit */
    double *pt = stats ? choir_stream_alloc(s, part_bytes, "kokoro AdaIN statistics") : NULL;
    double *py = stats ? choir_stream_alloc(s, part_bytes, "kokoro AdaIN statistics") : NULL;
    if (!t || (stats && (!pt || !py))) return choir_stream_status(s, NULL);
    for (int j = 0; j < 3; j++) {
        /* the first unit reads x and writes y: y = x + unit(x) */
        const float *in = j ? y : x;
        int64_t st1, st2;
        const float *g1 = style_of(r, &b->adain1[j], &st1), *g2 = style_of(r, &b->adain2[j], &st2);
        choir_adain_snake p1 = {lens, b->adain1[j].norm_w, b->adain1[j].norm_b, g1, st1, 1e-5f,
                                b->alpha1[j], stats ? (j ? py : x_part) : NULL};
        choir_adain_snake p2 = {lens, b->adain2[j].norm_w, b->adain2[j].norm_b, g2, st2, 1e-5f,
                                b->alpha2[j], pt};
        const kd_conv *c1 = &b->convs1[j], *c2 = &b->convs2[j];
        count_unit(r, c1, T, false);
        choir_op_conv1d_adain_snake_stats(s, in, B, b->C, T, &p1, &c1->w, c1->b, c1->cout, c1->k,
                                          (b->k * dil[j] - dil[j]) / 2, dil[j], lens, NULL, t, pt,
                                          lens);
        count_unit(r, c2, T, true);
        choir_op_conv1d_adain_snake_stats(s, t, B, b->C, T, &p2, &c2->w, c2->b, c2->cout, c2->k,
                                          (b->k - 1) / 2, 1, lens, in, y, j < 2 ? py : NULL, lens);
    }
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

/* (rb0(x) + rb1(x) + rb2(x)) / 3 over [B, C, T]; with conv_stats x's AdaIN
 * statistics taken once for the three blocks' first units */
static int resblock_mean(const kd_run *r, int first, const float *x, int64_t C, int64_t T,
                         const int32_t *lens, float *y) {
    choir_stream *s = r->s;
    size_t mark = choir_stream_mark(s);
    const int64_t n = r->B * C * T;
    float *t = choir_stream_floats(s, n, "kokoro resblock mean");
    double *px = r->d->conv_stats
                     ? choir_stream_alloc(s, (size_t)(r->B * C * ((T + 127) / 128) * 2) *
                                                 sizeof(double),
                                          "kokoro AdaIN statistics")
                     : NULL;
    if (!t || (r->d->conv_stats && !px)) return choir_stream_status(s, NULL);
    if (px) choir_op_adain_stats(s, x, r->B, C, T, lens, px);
    for (int j = 0; j < 3; j++) {
        snakeblock(r, &r->d->resblocks[first + j], x, T, lens, px, j ? t : y);
        if (j == 1) choir_op_add_scale(s, y, t, y, n, 1.0f);
        if (j == 2) choir_op_add_div(s, y, t, y, n, 3.0f);
    }
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

/* Hands each piece's [C, frames * per_frame + extra] slice of a padded
 * [B, C, T] tensor to the trace (a host copy; waits for the backend). */
static int probe(const kd_run *r, const char *stage, const float *x, int64_t C, int64_t T,
                 int64_t per_frame, int64_t extra) {
    if (!r->trace) return 0;
    const int64_t B = r->B;
    float *h = choir_alloc(CHOIR_MEM_OTHER, (size_t)(B * C * T) * sizeof(float));
    float *piece = choir_alloc(CHOIR_MEM_OTHER, (size_t)(C * T) * sizeof(float));
    int rc = h && piece ? choir_op_download(r->s, h, x, (size_t)(B * C * T) * sizeof(float))
                        : choir_stream_fail(r->s, CHOIR_ENOMEM, "kokoro: out of memory for a trace");
    for (int64_t b = 0; b < B && !rc; b++) {
        int64_t Tb = r->in[b].frames * per_frame + extra;
        for (int64_t c = 0; c < C; c++)
            memcpy(piece + c * Tb, h + (b * C + c) * T, (size_t)Tb * sizeof(float));
        r->trace(r->trace_user, (int)b, stage, piece, C, Tb);
    }
    choir_free(h);
    choir_free(piece);
    return rc;
}

/* The decoder and generator on the backend: asr [B, 512, L], f0, nn
 * [B, 1, 2L], S [B, 22, F] (the source spectrum) -> audio [B, 600 L]. */
static int decode_backend(const kd_run *r, const float *asr, const float *f0, const float *nn,
                          const float *S, float *audio) {
    const kk_dec *d = r->d;
    choir_stream *s = r->s;
    const int64_t B = r->B, L = r->L, F = 120 * L + 1, T0 = 20 * L, T1 = 120 * L;
    size_t mark = choir_stream_mark(s);
    float *f0d = choir_stream_floats(s, B * L, "kokoro F0");   /* [B, 1, L] */
    float *nd = choir_stream_floats(s, B * L, "kokoro N");     /* [B, 1, L] */
    float *up = choir_stream_floats(s, B * 512 * 2 * L, "kokoro decoder output"); /* [B, 512, 2L] */
    if (!f0d || !nd || !up) return choir_stream_status(s, NULL);

    /* decoder */
    size_t scope = choir_stream_mark(s);
    float *cat = choir_stream_floats(s, B * 1090 * L, "kokoro decoder"); /* [B, 514 or 1090, L] */
    float *x = choir_stream_floats(s, B * 1024 * L, "kokoro decoder");   /* [B, 1024, L] */
    float *ar = choir_stream_floats(s, B * 64 * L, "kokoro decoder");    /* [B, 64, L] */
    if (!cat || !x || !ar) return choir_stream_status(s, NULL);
    conv(r, &d->f0_conv, f0, 2 * L, 2, 1, 1, r->len_L, f0d);
    conv(r, &d->n_conv, nn, 2 * L, 2, 1, 1, r->len_L, nd);
    choir_op_copy_channels(s, asr, B, 512, L, cat, 514, 0);
    choir_op_copy_channels(s, f0d, B, 1, L, cat, 514, 512);
    choir_op_copy_channels(s, nd, B, 1, L, cat, 514, 513);
    resblk(r, &d->encode, cat, L, r->len_L, r->len_L, x);
    conv(r, &d->asr_res, asr, L, 1, 0, 1, r->len_L, ar);
    for (int i = 0; i < 4; i++) {
        /* every block, the upsampling one included, sees [x ; asr_res ; F0 ; N] */
        choir_op_copy_channels(s, x, B, 1024, L, cat, 1090, 0);
        choir_op_copy_channels(s, ar, B, 64, L, cat, 1090, 1024);
        choir_op_copy_channels(s, f0d, B, 1, L, cat, 1090, 1088);
        choir_op_copy_channels(s, nd, B, 1, L, cat, 1090, 1089);
        resblk(r, &d->decode[i], cat, L, r->len_L, i < 3 ? r->len_L : r->len_2L, i < 3 ? x : up);
    }
    choir_stream_release(s, scope);
    tick(r, 3);
    if (probe(r, "decoder_out", up, 512, 2 * L, 2, 0)) return choir_stream_status(s, NULL);

    /* generator stage 0: [B, 512, 2L] -> [B, 256, 20L] */
    float *x1 = choir_stream_floats(s, B * 256 * T0, "kokoro generator");
    if (!x1) return choir_stream_status(s, NULL);
    scope = choir_stream_mark(s);
    float *src0 = choir_stream_floats(s, B * 256 * T0, "kokoro generator");
    float *u0 = choir_stream_floats(s, B * 256 * T0, "kokoro generator");
    if (!src0 || !u0) return choir_stream_status(s, NULL);
    leaky(r, up, B * 512 * 2 * L, 0.1f);
    conv(r, &d->noise_convs[0], S, F, 6, 3, 1, r->len_20L, src0);
    snakeblock(r, &d->noise_res[0], src0, T0, r->len_20L, NULL, src0);
    conv_t(r, &d->ups[0], up, 2 * L, 10, 5, r->len_20L, u0);
    choir_op_add_scale(s, u0, src0, u0, B * 256 * T0, 1.0f);
    resblock_mean(r, 0, u0, 256, T0, r->len_20L, x1);
    choir_stream_release(s, scope);
    tick(r, 4);
    if (probe(r, "stage0", x1, 256, T0, 20, 0)) return choir_stream_status(s, NULL);

    /* stage 1: [B, 256, 20L] -> [B, 128, 120L + 1] */
    float *u1 = choir_stream_floats(s, B * 128 * F, "kokoro generator");
    float *x2 = choir_stream_floats(s, B * 128 * F, "kokoro generator");
    if (!u1 || !x2) return choir_stream_status(s, NULL);
    leaky(r, x1, B * 256 * T0, 0.1f);
    float *u1raw = x2; /* [B, 128, 120L]: x2 is free until the residual blocks */
    conv_t(r, &d->ups[1], x1, T0, 6, 3, r->len_120L, u1raw);
    choir_op_reflect_pad(s, u1raw, B, 128, T1, r->len_120L, 1, 0, u1); /* ReflectionPad1d((1, 0)) */
    scope = choir_stream_mark(s);
    float *src1 = choir_stream_floats(s, B * 128 * F, "kokoro generator");
    if (!src1) return choir_stream_status(s, NULL);
    conv(r, &d->noise_convs[1], S, F, 1, 0, 1, r->len_F, src1);
    snakeblock(r, &d->noise_res[1], src1, F, r->len_F, NULL, src1);
    choir_op_add_scale(s, u1, src1, u1, B * 128 * F, 1.0f);
    choir_stream_release(s, scope);
    resblock_mean(r, 3, u1, 128, F, r->len_F, x2);
    tick(r, 5);

    /* conv_post and the inverse STFT */
    float *post = choir_stream_floats(s, B * 22 * F, "kokoro generator");
    if (!post) return choir_stream_status(s, NULL);
    leaky(r, x2, B * 128 * F, 0.01f);
    conv(r, &d->conv_post, x2, F, 1, 3, 1, r->len_F, post);
    if (probe(r, "post", post, 22, F, 120, 1)) return choir_stream_status(s, NULL);
    choir_op_istft_magphase(s, post, B, F, r->len_F, KK_NFFT, KK_HOP, audio);
    tick(r, 6);
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

/* --- host side ----------------------------------------------------------------- */

typedef struct kd_prep {
    const kk_dec *d;
    const choir_kokoro_decode_input *in;
    int64_t L;                      /* padded frames */
    float *asr, *f0, *nn, *sty, *S; /* host staging [B, ...] */
    float *work;                    /* [B, 618 L + 64]: each piece's harmonic source */
    bool source;                    /* the sources are made here (else by the backend) */
} kd_prep;

/* Piece b's host share: its inputs padded, and its source spectrum unless
 * the backend makes it. */
static void prep_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    kd_prep *j = ctx;
    const int64_t L = j->L, F = 120 * L + 1;
    for (int64_t b = begin; b < end; b++) {
        const choir_kokoro_decode_input *in = &j->in[b];
        const int64_t Lb = in->frames, Fb = 120 * Lb + 1;
        for (int64_t c = 0; c < 512; c++) {
            float *row = j->asr + (b * 512 + c) * L;
            memcpy(row, in->asr + c * Lb, (size_t)Lb * sizeof(float));
            memset(row + Lb, 0, (size_t)(L - Lb) * sizeof(float));
        }
        float *f0 = j->f0 + b * 2 * L, *nn = j->nn + b * 2 * L;
        memcpy(f0, in->f0, 2 * (size_t)Lb * sizeof(float));
        memcpy(nn, in->n, 2 * (size_t)Lb * sizeof(float));
        memset(f0 + 2 * Lb, 0, 2 * (size_t)(L - Lb) * sizeof(float));
        memset(nn + 2 * Lb, 0, 2 * (size_t)(L - Lb) * sizeof(float));
        memcpy(j->sty + b * KK_STYLE, in->style, KK_STYLE * sizeof(float));
        if (!j->source) continue;
        /* the spectrum at the piece's own length in the padded rows */
        float *S = j->S + b * 22 * F;
        kk_source_spectrum_buf(j->d->m, in->f0, Lb, in->noise,
                               in->noise_seeded ? &in->noise_seed : NULL, S, F,
                               j->work + b * (618 * L + 64));
        for (int64_t k = 0; k < 22 && Fb < F; k++)
            memset(S + k * F + Fb, 0, (size_t)(F - Fb) * sizeof(float));
    }
}

/* The pieces' audio buffers, written once on the host: a device's download
 * into pages nothing has touched yet takes a page fault a page inside the
 * copy (32 pieces' 123 MB came down at 1.8 GB/s on an H100 host, 7 Dec
 * 2026). Run while the device still works through the generator. */
typedef struct kd_touch {
    float *const *audio;
    const choir_kokoro_decode_input *in;
} kd_touch;

static void touch_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const kd_touch *j = ctx;
    for (int64_t b = begin; b < end; b++)
        memset(j->audio[b], 0, (size_t)j->in[b].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME * sizeof(float));
}

/* The pieces' audio out of the page-locked block (piece b at 600 L b). */
typedef struct kd_unpin {
    float *const *audio;
    const choir_kokoro_decode_input *in;
    const float *pin;
    int64_t L;
} kd_unpin;

static void unpin_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const kd_unpin *j = ctx;
    for (int64_t b = begin; b < end; b++)
        memcpy(j->audio[b], j->pin + b * 600 * j->L,
               (size_t)j->in[b].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME * sizeof(float));
}

int kk_dec_run(const kk_dec *d, choir_stream *s, const choir_kokoro_decode_input *in, int n,
               float *const *audio, kk_dec_trace_fn trace, void *trace_user, kk_dec_stats *stats,
               choir_err *err) {
    kk_dec_stats counted = {0};
    if (!d || !s || !in || !audio || n < 1)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad decode arguments");
    int64_t L = 0;
    for (int i = 0; i < n; i++) {
        if (!in[i].asr || !in[i].f0 || !in[i].n || !in[i].style || in[i].frames < 1 ||
            in[i].frames > 100000)
            return choir_err_set(err, CHOIR_EINVAL,
                                 "kokoro: piece %d: missing input or %lld frames (1..100000)", i,
                                 (long long)in[i].frames);
        L = in[i].frames > L ? in[i].frames : L;
    }
    const int64_t B = n, F = 120 * L + 1;
    const bool host = choir_backend_is_host(choir_stream_backend(s));
    /* On a device the harmonic sources are made there (choir_op_nsf_source_stft,
     * the same floats as the host's: choir_kokoro_gpu_check, H100 6 Dec 2026)
     * unless a piece brings its own draws (noise arrays stay on the host
     * path); CHOIR_KOKORO_DEVICE_SOURCE=0 keeps every piece on the host path. */
    bool dev_source = !host && kk_switch_on("CHOIR_KOKORO_DEVICE_SOURCE");
    for (int i = 0; i < n; i++) dev_source = dev_source && !in[i].noise;
    size_t mark = choir_stream_mark(s);
    /* CHOIR_KOKORO_PROFILE=1: one line per call on stderr, milliseconds per
     * stage (the backend waited for at each stage's end) */
    const char *prof_env = getenv("CHOIR_KOKORO_PROFILE");
    double clk[8] = {0};
    const bool prof = prof_env && prof_env[0] && strcmp(prof_env, "0") != 0;
    clk[0] = choir_now_s();

    /* Backend memory: lengths per stage, the inputs, the style projections,
     * the audio. On the CPU the host work is staged there directly. */
    const size_t n_in = (size_t)B * (512 * L + 4 * L + KK_STYLE + 22 * F);
    int32_t *lens = choir_stream_alloc(s, 5 * (size_t)B * sizeof(int32_t), "kokoro lengths");
    float *dev_in = choir_stream_floats(s, (int64_t)n_in, "kokoro decoder inputs");
    float *gb = choir_stream_floats(s, B * d->gb_floats, "kokoro style projections");
    float *dev_audio = choir_stream_floats(s, B * 600 * L, "kokoro audio");
    /* the harmonic sources are only needed while the inputs are staged */
    size_t staged = choir_stream_mark(s);
    float *work = host ? choir_stream_floats(s, B * (618 * L + 64), "kokoro harmonic source")
                       : NULL;
    float *stage = NULL, *pin = NULL;
    int32_t *lens_host = NULL;
    int rc = choir_stream_status(s, NULL);
    if (!rc && !host) {
        /* CHOIR_KOKORO_PINNED=1 (NOT RUN ON A GPU: off unless 1): the inputs
         * prepared straight into the decoder's page-locked block and the
         * audio brought back into it (one copy each at the link's speed; a
         * download into ordinary pages goes through the driver's bounce
         * buffer), then copied out by the pool's threads. */
        size_t stage_n = dev_source ? n_in - (size_t)B * 22 * F : n_in, audio_n = (size_t)(B * 600 * L);
        pin = kd_pin_get(d, (stage_n > audio_n ? stage_n : audio_n) * sizeof(float));
        stage = pin ? pin : choir_alloc(CHOIR_MEM_ACTIVATIONS, n_in * sizeof(float));
        work = dev_source ? NULL : choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)kk_dec_host_bytes(n, L));
        lens_host = choir_alloc(CHOIR_MEM_OTHER, 5 * (size_t)B * sizeof(int32_t));
        if (!stage || (!work && !dev_source) || !lens_host)
            rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory for %d pieces", n);
    }
    if (rc) goto done;
    float *st = host ? dev_in : stage;
    int32_t *lh = host ? lens : lens_host;
    kd_prep job = {.d = d, .in = in, .L = L, .asr = st, .f0 = st + B * 512 * L,
                   .nn = st + B * 514 * L, .sty = st + B * 516 * L,
                   .S = st + B * (516 * L + KK_STYLE), .work = work, .source = !dev_source};
    if (n == 1)
        prep_range(&job, 0, 1, 0);
    else
        choir_pool_parallel_for(choir_pool_default(), B, 1, prep_range, &job);
    clk[1] = choir_now_s();
    for (int i = 0; i < n; i++) {
        int64_t Lb = in[i].frames;
        lh[0 * B + i] = (int32_t)Lb;
        lh[1 * B + i] = (int32_t)(2 * Lb);
        lh[2 * B + i] = (int32_t)(20 * Lb);
        lh[3 * B + i] = (int32_t)(120 * Lb);
        lh[4 * B + i] = (int32_t)(120 * Lb + 1);
    }
    if (host) choir_stream_release(s, staged);
    if (!host) {
        choir_op_upload(s, lens, lens_host, 5 * (size_t)B * sizeof(int32_t));
        /* the spectra (the last 22 F floats a piece) are made on the device */
        size_t n_up = dev_source ? n_in - (size_t)B * 22 * F : n_in;
        choir_op_upload(s, dev_in, stage, n_up * sizeof(float));
    }
    if (dev_source) {
        uint64_t *seeds = choir_alloc(CHOIR_MEM_OTHER, (size_t)B * (sizeof(uint64_t) + sizeof(bool)));
        if (!seeds) {
            rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory for %d pieces", n);
            goto done;
        }
        bool *noisy = (bool *)(seeds + B);
        for (int i = 0; i < n; i++) seeds[i] = in[i].noise_seed, noisy[i] = in[i].noise_seeded;
        choir_op_nsf_source_stft(s, dev_in + B * 512 * L, B, 2 * L, lens + B, &d->nsf, seeds,
                                 noisy, dev_in + B * (516 * L + KK_STYLE));
        choir_free(seeds); /* read when the kernels are queued */
    }
    /* every AdaIN layer's gamma, beta = fc(style) for all pieces */
    const float *sty = dev_in + B * 516 * L;
    style_products(d, s, sty, B, d->adains, d->n_adains, &d->style_w, d->style_b, gb);
    kd_run r = {.d = d, .s = s, .B = B, .L = L, .len_L = lens, .len_2L = lens + B,
                .len_20L = lens + 2 * B, .len_120L = lens + 3 * B, .len_F = lens + 4 * B,
                .gb = gb, .gb_piece = d->one_style ? d->gb_floats : 0, .in = in, .trace = trace, .trace_user = trace_user, .st = &counted,
                .clk = prof ? clk : NULL};
    tick(&r, 2);
    rc = decode_backend(&r, dev_in, dev_in + B * 512 * L, dev_in + B * 514 * L,
                        dev_in + B * (516 * L + KK_STYLE), dev_audio);
    if (!rc && !host && kk_switch_on("CHOIR_KOKORO_TOUCH_AUDIO")) {
        kd_touch tj = {.audio = audio, .in = in};
        if (n == 1)
            touch_range(&tj, 0, 1, 0);
        else
            choir_pool_parallel_for(choir_pool_default(), B, 1, touch_range, &tj);
    }
    if (pin && !rc)
        rc = choir_op_download_async(s, pin, dev_audio, (size_t)(B * 600 * L) * sizeof(float));
    for (int i = 0; i < n && !rc && !pin; i++)
        rc = choir_op_download(s, audio[i], dev_audio + (int64_t)i * 600 * L,
                               (size_t)in[i].frames * CHOIR_KOKORO_SAMPLES_PER_FRAME *
                                   sizeof(float));
done:
    rc = choir_stream_sync(s, err);
    if (!rc && pin) {
        kd_unpin uj = {.audio = audio, .in = in, .pin = pin, .L = L};
        if (n == 1)
            unpin_range(&uj, 0, 1, 0);
        else
            choir_pool_parallel_for(choir_pool_default(), B, 1, unpin_range, &uj);
    }
    if (!rc && prof) {
        clk[7] = choir_now_s();
        fprintf(stderr,
                "kokoro decode: %d pieces of up to %lld frames: host prep %.1f, upload + source + style "
                "%.1f, decoder %.1f, generator stage 0 %.1f, stage 1 %.1f, post + istft %.1f, "
                "download %.1f ms; total %.1f ms\n",
                n, (long long)L, 1e3 * (clk[1] - clk[0]), 1e3 * (clk[2] - clk[1]),
                1e3 * (clk[3] - clk[2]), 1e3 * (clk[4] - clk[3]), 1e3 * (clk[5] - clk[4]),
                1e3 * (clk[6] - clk[5]), 1e3 * (clk[7] - clk[6]), 1e3 * (clk[7] - clk[0]));
    }
    if (!rc && stats) stats->flops += counted.flops, stats->bytes += counted.bytes;
    choir_stream_clear(s);
    choir_stream_release(s, mark);
    if (!pin) choir_free(stage);
    if (!host) choir_free(work);
    choir_free(lens_host);
    return rc;
}

int kk_decoder(const choir_kokoro *m, const float *asr, int64_t L, const float *f0,
               const float *n, const float *s_dec, const float *noise, float *audio,
               choir_err *err) {
    choir_kokoro_decode_input in = {.asr = asr, .f0 = f0, .n = n, .noise = noise, .style = s_dec,
                                    .frames = L};
    choir_backend *be = choir_backend_cpu(err);
    kk_dec *d = be ? kk_dec_create(m, be, err) : NULL;
    choir_stream *s = d ? choir_stream_create(be, err) : NULL;
    int rc = s ? choir_stream_reserve(s, (size_t)kk_dec_work_bytes(1, L), 0, err)
               : (err && err->code ? err->code : CHOIR_ENOMEM);
    if (!rc) {
        rc = kk_dec_run(d, s, &in, 1, &audio, NULL, NULL, NULL, err);
        CHOIR_LOGD("kokoro: %lld frames: decoder working memory high water %zu of %lld bytes",
                   (long long)L, choir_stream_high_water(s), (long long)kk_dec_work_bytes(1, L));
    }
    choir_stream_free(s);
    kk_dec_free(d);
    choir_backend_free(be);
    return rc;
}

/* --- the prosody predictor's F0 / N blocks ------------------------------------ */

int64_t kk_dec_f0n_work_bytes(int n, int64_t frames) {
    /* x [512, L], a and b [256, 2L] (as [512, L] for the first block), the
     * resblock's three temporaries of up to [512, 2L] + [256, 2L], the
     * curves [2, 2L]: ~5.2k floats per frame; the projections ~9k per piece */
    if (n < 1) n = 1;
    return (int64_t)n * ((frames + 1) * 5400 + 16000) * (int64_t)sizeof(float) +
           ((int64_t)1 << 16);
}

bool kk_dec_has_f0n(const kk_dec *d) { return d && d->has_f0n; }

/* The blocks over host x[b] [512, L[b]], or over x_dev [n, 512, x_Lm] in
 * backend memory (zeros past each piece's length) when x is NULL. */
static int f0n_run(const kk_dec *d, choir_stream *s, int n, const float *const *x,
                   const float *x_dev, int64_t x_Lm, const int64_t *L, const float *const *s_pro,
                   float *const *f0, float *const *n_out, choir_err *err) {
    if (!d || !d->has_f0n)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: the model has no F0 / N blocks");
    if (n < 1 || (!x && !x_dev) || !L || !s_pro || !f0 || !n_out)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad F0 / N arguments");
    int64_t Lm = 0;
    for (int b = 0; b < n; b++) {
        if (L[b] < 1 || L[b] > INT32_MAX / 2 || (x && !x[b]) || !s_pro[b] || !f0[b] || !n_out[b])
            return choir_err_set(err, CHOIR_EINVAL, "kokoro: F0 / N piece %d: %lld frames or no data",
                                 b, (long long)L[b]);
        Lm = L[b] > Lm ? L[b] : Lm;
    }
    if (!x && x_Lm < Lm)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: F0 / N input of %lld frames in %lld",
                             (long long)Lm, (long long)x_Lm);
    if (!x) Lm = x_Lm;
    const int64_t B = n;
    const bool host = choir_backend_is_host(choir_stream_backend(s));
    size_t mark = choir_stream_mark(s);
    /* inputs: lengths L, 2L | s_pro [B, 128] | x [B, 512, Lm] unless given */
    const size_t n_in = (size_t)B * (KK_STYLE + (x ? 512 * Lm : 0));
    int32_t *lens = choir_stream_alloc(s, 2 * (size_t)B * sizeof(int32_t), "kokoro F0 / N lengths");
    float *dev_in = choir_stream_floats(s, (int64_t)n_in, "kokoro F0 / N inputs");
    float *gb = choir_stream_floats(s, B * d->f0n_gb_floats, "kokoro F0 / N style projections");
    float *a = choir_stream_floats(s, B * 1024 * Lm, "kokoro F0 / N");
    float *bb = choir_stream_floats(s, B * 1024 * Lm, "kokoro F0 / N");
    float *curves = choir_stream_floats(s, B * 4 * Lm, "kokoro F0 / N"); /* F0 [B, 2Lm], N */
    float *stage = NULL;
    int32_t *lens_host = NULL;
    int rc = choir_stream_status(s, NULL);
    if (!rc && !host) {
        stage = choir_alloc(CHOIR_MEM_ACTIVATIONS, n_in * sizeof(float));
        lens_host = choir_alloc(CHOIR_MEM_OTHER, 2 * (size_t)B * sizeof(int32_t));
        if (!stage || !lens_host)
            rc = choir_stream_fail(s, CHOIR_ENOMEM, "kokoro: out of host memory for F0 / N");
    }
    if (rc) goto done;
    float *st = host ? dev_in : stage;
    int32_t *lh = host ? lens : lens_host;
    for (int64_t b = 0; b < B; b++) {
        lh[b] = (int32_t)L[b];
        lh[B + b] = (int32_t)(2 * L[b]);
        memcpy(st + b * KK_STYLE, s_pro[b], KK_STYLE * sizeof(float));
        for (int64_t c = 0; c < 512 && x; c++) {
            float *row = st + B * KK_STYLE + (b * 512 + c) * Lm;
            memcpy(row, x[b] + c * L[b], (size_t)L[b] * sizeof(float));
            memset(row + L[b], 0, (size_t)(Lm - L[b]) * sizeof(float));
        }
    }
    if (!host) {
        choir_op_upload(s, lens, lens_host, 2 * (size_t)B * sizeof(int32_t));
        choir_op_upload(s, dev_in, stage, n_in * sizeof(float));
    }
    style_products(d, s, dev_in, B, d->f0n_adains, d->n_f0n_adains, &d->f0n_style_w, d->f0n_style_b, gb);
    kk_dec_stats counted = {0};
    kd_run r = {.d = d, .s = s, .B = B, .L = Lm, .gb = gb,
                .gb_piece = d->one_style ? d->f0n_gb_floats : 0, .st = &counted};
    const int32_t *len_L = lens, *len_2L = lens + B;
    const float *xd = x ? dev_in + B * KK_STYLE : x_dev;
    for (int which = 0; which < 2; which++) {
        const kd_resblk *blk = which ? d->n_blk : d->f0_blk;
        resblk(&r, &blk[0], xd, Lm, len_L, len_L, a);        /* [512, L] */
        resblk(&r, &blk[1], a, Lm, len_L, len_2L, bb);       /* [256, 2L] */
        resblk(&r, &blk[2], bb, 2 * Lm, len_2L, len_2L, a);  /* [256, 2L] */
        conv(&r, which ? &d->n_proj : &d->f0_proj, a, 2 * Lm, 1, 0, 1, len_2L,
             curves + which * B * 2 * Lm);
    }
    for (int64_t b = 0; b < B; b++) {
        choir_op_download(s, f0[b], curves + b * 2 * Lm, 2 * (size_t)L[b] * sizeof(float));
        choir_op_download(s, n_out[b], curves + (B + b) * 2 * Lm, 2 * (size_t)L[b] * sizeof(float));
    }
done:
    rc = choir_stream_sync(s, err);
    choir_stream_clear(s);
    choir_stream_release(s, mark);
    choir_free(stage);
    choir_free(lens_host);
    return rc;
}

int kk_dec_f0n_run(const kk_dec *d, choir_stream *s, int n, const float *const *x,
                   const int64_t *L, const float *const *s_pro, float *const *f0,
                   float *const *n_out, choir_err *err) {
    if (!x) return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad F0 / N arguments");
    return f0n_run(d, s, n, x, NULL, 0, L, s_pro, f0, n_out, err);
}

int kk_dec_f0n_run_dev(const kk_dec *d, choir_stream *s, int n, const float *x, int64_t Lm,
                       const int64_t *L, const float *const *s_pro, float *const *f0,
                       float *const *n_out, choir_err *err) {
    if (!x) return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad F0 / N arguments");
    return f0n_run(d, s, n, NULL, x, Lm, L, s_pro, f0, n_out, err);
}
