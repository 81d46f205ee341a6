/* The DAC-VAE codec of SAM-Audio: encoder to the VAE mean latent, decoder
 * with the watermark path (dacvae's Decoder.watermark), Snake in f32.
 *
 * Decoder block i holds, in its 12 modules, the main path (Snake, ConvT, 3
 * Snake residual units) and two halves of the watermark network: block.7,
 * ELU, block.11 (strided convs taking the 32-channel watermark signal from
 * 48 kHz down, run for blocks 4..1) and ELU, block.3, block.6 (the causal
 * transposed convs back up, run for blocks 1..4). Between them two 2-layer
 * LSTMs with skips at 150 Hz and the message embedding. The output is
 * tanh(conv(snake(x))) + 0.25 * watermark.
 *
 * Written over the backend operations (choir/backend.h, choir/backend_sam.h).
 * Activations are channels-first [C, T]; every call takes one stream whose
 * working memory holds its buffers, each sized for its largest stage. */
#include <math.h>
#include <string.h>

#include "choir/backend_sam.h"
#include "choir/kernels.h"
#include "sam_internal.h"

const uint8_t choir_sam_default_message[CHOIR_SAM_WM_BITS] = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1};

static void conv_pads(const sam_conv *c, int64_t T, int64_t *left, int64_t *right) {
    int64_t eff = (c->k - 1) * c->dilation + 1;
    if (!c->causal) {
        *left = *right = (c->k - c->stride) * c->dilation / 2;
        return;
    }
    /* "auto" causal padding: all of kernel - stride on the left, plus what a
     * last partial window needs on the right (audiocraft's rule). */
    int64_t total = eff - c->stride;
    double frames = (double)(T - eff + total) / c->stride + 1;
    int64_t ideal = ((int64_t)ceil(frames) - 1) * c->stride + (c->k - total);
    *left = total;
    *right = ideal - T > 0 ? ideal - T : 0;
}

static int64_t conv_out_len(const sam_conv *c, int64_t T) {
    int64_t l, r;
    conv_pads(c, T, &l, &r);
    return choir_conv1d_out_len(T + l + r, c->k, c->stride, 0, c->dilation);
}

/* Kernel scratch of conv_bias on T frames (a causal conv runs unpadded
 * over its padded copy, which has the same output length): the CPU kernel's,
 * or with `dev` the CUDA one's, its taps [cin * k, Tout] in f32 for the
 * im2col product (cuda_kernels.cu, taken when cin * k >= 32). */
static size_t conv_scratch(const sam_conv *c, int64_t T, int dev) {
    int64_t l, r;
    conv_pads(c, T, &l, &r);
    if (dev) return c->cin * c->k >= 32 ? (size_t)(c->cin * c->k * conv_out_len(c, T)) * sizeof(float) : 0;
    if (!c->causal) return choir_conv1d_scratch_bytes(c->cin, T, c->k, c->stride, (int)l, c->dilation, 1);
    return choir_conv1d_scratch_bytes(c->cin, T + l + r, c->k, c->stride, 0, c->dilation, 1);
}

/* CUDA: the product [cout * k, T] in f32 (cuda_audio.cu), aligned. */
static size_t convt_scratch(const sam_convt *c, int64_t T, int dev) {
    if (dev) return (size_t)(c->cout * c->k * T) * sizeof(float) + 256;
    return choir_conv_transpose1d_scratch_bytes(c->cin, T, c->cout, c->k, 1);
}

static size_t ru_scratch(const sam_ru *r, int64_t T, int dev) {
    size_t a = conv_scratch(&r->c1, T, dev), b = conv_scratch(&r->c2, T, dev);
    return a > b ? a : b;
}

#define MAXZ(m, v)                   \
    do {                             \
        size_t v_ = (v);             \
        if (v_ > (m)) (m) = v_;      \
    } while (0)

/* y[cout, Tout] = conv(x[cin, T]) with bias `bias` (normally c->b); causal
 * convs pad into `pad` (cin * (T + k * dilation) floats) first. */
static void conv_bias(choir_stream *s, const sam_conv *c, const float *bias, const float *x, int64_t T, float *y,
                      float *pad) {
    int64_t l, r;
    conv_pads(c, T, &l, &r);
    if (!c->causal) {
        choir_op_conv1d(s, x, 1, c->cin, T, c->w, bias, c->cout, c->k, c->stride, (int)l, c->dilation, 1, y);
        return;
    }
    choir_op_sam_pad(s, x, c->cin, T, l, r, false, pad);
    choir_op_conv1d(s, pad, 1, c->cin, T + l + r, c->w, bias, c->cout, c->k, c->stride, 0, c->dilation, 1, y);
}

static void conv(choir_stream *s, const sam_conv *c, const float *x, int64_t T, float *y, float *pad) {
    conv_bias(s, c, c->b, x, T, y, pad);
}

/* y[cout, T*stride] = ConvT(x[cin, T]); causal ones go through `pad`
 * (cout * (T+1) * stride floats) and are cut to T * stride. */
static void convt(choir_stream *s, const sam_convt *c, const float *x, int64_t T, float *y, float *pad) {
    int st = c->stride;
    if (!c->causal) {
        choir_op_conv_transpose1d(s, x, 1, c->cin, T, c->w, c->b, c->cout, c->k, st, (st + 1) / 2, st % 2, 1, 1, y);
        return;
    }
    int64_t full = (T - 1) * st + c->k;
    choir_op_conv_transpose1d(s, x, 1, c->cin, T, c->w, c->b, c->cout, c->k, st, 0, 0, 1, 1, pad);
    choir_op_copy_rows(s, y, T * st, pad, full, c->cout, T * st);
}

/* x[dim, T] += ResidualUnit(x), with t1 [dim, T], t2 [dim, T] and pad. */
static void ru_run(choir_stream *s, const sam_ru *r, float *x, int64_t T, float *t1, float *t2, float *pad) {
    int64_t dim = r->c1.cin;
    choir_op_copy(s, t1, x, (size_t)(dim * T) * sizeof *t1);
    if (r->alpha1) choir_op_sam_snake(s, t1, 1, dim, T, r->alpha1);
    else choir_op_sam_elu(s, t1, dim * T);
    conv(s, &r->c1, t1, T, t2, pad);
    if (r->alpha2) choir_op_sam_snake(s, t2, 1, r->c1.cout, T, r->alpha2);
    else choir_op_sam_elu(s, t2, r->c1.cout * T);
    conv(s, &r->c2, t2, T, t1, pad);
    choir_op_add(s, x, t1, x, dim * T);
}

/* --- encoder ------------------------------------------------------------ */

/* Floats of the encoder's three buffers (each its widest stage) for L samples. */
static int64_t enc_floats(const sam_codec *c, int64_t L, int64_t T) {
    int64_t maxe = L + 64, len = L, d = c->enc_in.cout;
    if (d * len > maxe) maxe = d * len;
    for (int i = 0; i < c->n_enc; i++) {
        if (d * (len + 64) > maxe) maxe = d * (len + 64);
        len /= c->enc_rates[i];
        d *= 2;
        if (d * len > maxe) maxe = d * len;
    }
    if (2 * c->cb * T > maxe) maxe = 2 * c->cb * T;
    return maxe;
}

/* The most kernel scratch one of the encoder's calls takes for L samples
 * (the order of choir_sam_encode's convolutions), on the CPU or (dev) CUDA. */
static size_t enc_scratch(const sam_codec *c, int64_t L, int dev) {
    size_t most = conv_scratch(&c->enc_in, L, dev);
    int64_t len = L;
    for (int i = 0; i < c->n_enc; i++) {
        const sam_enc_block *e = &c->enc[i];
        for (int r = 0; r < 3; r++) MAXZ(most, ru_scratch(&e->ru[r], len, dev));
        MAXZ(most, conv_scratch(&e->down, len, dev));
        len = conv_out_len(&e->down, len);
    }
    MAXZ(most, conv_scratch(&c->enc_out, len, dev));
    MAXZ(most, conv_scratch(&c->in_proj, len, dev));
    return most;
}

sam_need sam_encode_need(const choir_sam *m, int64_t n) {
    const sam_codec *c = &m->codec;
    int64_t T = (n + c->hop - 1) / c->hop, L = T * c->hop;
    sam_need need = {0};
    need.work = (size_t)(3 * enc_floats(c, L, T) + n + T * c->cb) * sizeof(float) + 5 * 256;
    need.scratch = enc_scratch(c, L, !choir_backend_is_host(m->be));
    return need;
}

int choir_sam_encode(const choir_sam *m, const float *x, int64_t n, float *latent, choir_err *err) {
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty input");
    sam_need need = sam_encode_need(m, n);
    sam_mem mem;
    int rc = sam_mem_open(m, NULL, sam_need_arena(m, &need), &mem, err);
    if (rc) return rc;
    rc = sam_encode_in(m, &mem, x, n, latent, err);
    sam_mem_close(&mem);
    return rc;
}

int sam_encode_in(const choir_sam *m, const sam_mem *mem, const float *x, int64_t n, float *latent,
                  choir_err *err) {
    const sam_codec *c = &m->codec;
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty input");
    int64_t T = (n + c->hop - 1) / c->hop, L = T * c->hop;
    int64_t maxe = enc_floats(c, L, T);
    sam_need need = sam_encode_need(m, n);
    sam_stage st;
    int rc = sam_stage_begin(m, mem, &need, &st, err);
    if (rc) return rc;
    choir_stream *s = st.s;
    float *a = choir_stream_floats(s, maxe, "sam encoder"), *b = choir_stream_floats(s, maxe, "sam encoder");
    float *t = choir_stream_floats(s, maxe, "sam encoder"), *in = choir_stream_floats(s, n, "sam encoder input");
    float *lat = choir_stream_floats(s, T * c->cb, "sam latent");
    int64_t len = L;
    if (lat) {
        choir_op_upload(s, in, x, (size_t)n * sizeof *x);
        /* Reflect padding to a whole number of hops, as the reference pads;
         * an input shorter than its pad is zero-extended (audiocraft). */
        int64_t pad = L - n;
        choir_op_sam_pad(s, in, 1, n, 0, pad, pad > 0 && pad < n, a);
        conv(s, &c->enc_in, a, L, b, t);
        int64_t d = c->enc_in.cout;
        float *cur = b, *o1 = a;
        for (int i = 0; i < c->n_enc; i++) {
            const sam_enc_block *e = &c->enc[i];
            for (int r = 0; r < 3; r++) ru_run(s, &e->ru[r], cur, len, o1, t, NULL);
            choir_op_sam_snake(s, cur, 1, d, len, e->alpha);
            conv(s, &e->down, cur, len, o1, NULL);
            len = conv_out_len(&e->down, len);
            d *= 2;
            float *sw = cur;
            cur = o1;
            o1 = sw;
        }
        choir_op_sam_snake(s, cur, 1, d, len, c->enc_alpha);
        conv(s, &c->enc_out, cur, len, o1, NULL);
        conv(s, &c->in_proj, o1, len, cur, NULL);
        /* The mean: the first C of the 2C rows, made time-major. */
        if (len == T) choir_op_transpose(s, cur, c->cb, T, NULL, lat);
        choir_op_download(s, latent, lat, (size_t)(T * c->cb) * sizeof *latent);
    }
    rc = choir_stream_sync(s, err);
    sam_stage_end(m, &st);
    if (!rc && len != T)
        rc = choir_err_set(err, CHOIR_EINTERNAL, "sam-audio: encoder gave %lld frames, expected %lld", (long long)len,
                           (long long)T);
    return rc;
}

/* --- decoder ------------------------------------------------------------ */

/* LSTMBlock: x[H, T] -> x + LSTM2(x), through time-major buffers. */
static void lstm_block(choir_stream *s, const sam_lstm *l, float *x, int64_t T, float *tm, float *o0, float *o1) {
    int64_t H = l->H;
    choir_op_transpose(s, x, H, T, NULL, tm);
    choir_op_sam_lstm(s, tm, T, H, H, l->w_ih[0], l->w_hh[0], l->b_ih[0], l->b_hh[0], o0);
    choir_op_sam_lstm(s, o0, T, H, H, l->w_ih[1], l->w_hh[1], l->b_ih[1], l->b_hh[1], o1);
    choir_op_add(s, o1, tm, o1, T * H);
    choir_op_transpose(s, o1, T, H, NULL, x);
}

/* Floats of the decoder's buffers for T frames: three of its widest stage
 * (maxe) and one of the padding scratch (scr). */
static void dec_floats(const sam_codec *c, int64_t T, int64_t *maxe_out, int64_t *scr_out) {
    int64_t L = T * c->hop, cin0 = c->dec_in.cout;
    int64_t maxe = c->latent * T + 64;
    if (cin0 * T > maxe) maxe = cin0 * T;
    int64_t len = T, scr = c->latent * (T + 16);
    for (int i = 0; i < c->n_dec; i++) {
        const sam_dec_block *b = &c->dec[i];
        int64_t out = len * b->up.stride;
        if (b->up.cout * out > maxe) maxe = b->up.cout * out;
        if (b->up.cin * len > maxe) maxe = b->up.cin * len;
        len = out;
    }
    /* The watermark path at 48 kHz is 32 wide; its LSTMs run at L / 320. */
    int64_t Tw = L / 320 > 0 ? L / 320 : 1;
    if (c->has_wm) {
        if (64 * (L + 64) > scr) scr = 64 * (L + 64);
        if (512 * (Tw + 16) > scr) scr = 512 * (Tw + 16);
        if (32 * (L + 64) > maxe) maxe = 32 * (L + 64);
        if (3 * 512 * (Tw + 1) > maxe) maxe = 3 * 512 * (Tw + 1);
    }
    *maxe_out = maxe;
    *scr_out = scr;
}

/* The most kernel scratch one of the decoder's calls takes for T frames
 * (the order of sam_decode_in's convolutions and LSTMs). */
static size_t dec_scratch(const sam_codec *c, int64_t T, int dev) {
    int64_t L = T * c->hop, len = T;
    size_t most = conv_scratch(&c->out_proj, T, dev);
    MAXZ(most, conv_scratch(&c->dec_in, T, dev));
    for (int i = 0; i < c->n_dec; i++) {
        const sam_dec_block *d = &c->dec[i];
        MAXZ(most, convt_scratch(&d->up, len, dev));
        len *= d->up.stride;
        for (int r = 0; r < 3; r++) MAXZ(most, ru_scratch(&d->ru[r], len, dev));
    }
    MAXZ(most, conv_scratch(&c->wm_pre1, L, dev));
    if (!c->has_wm) return most;
    int64_t wl = L;
    MAXZ(most, conv_scratch(&c->wm_pre3, L, dev));
    for (int i = c->n_dec - 1; i >= 0; i--) {
        const sam_dec_block *d = &c->dec[i];
        MAXZ(most, ru_scratch(&d->wm_ru7, wl, dev));
        MAXZ(most, conv_scratch(&d->wm_down, wl, dev));
        wl = conv_out_len(&d->wm_down, wl);
    }
    /* the LSTMs' gates: 4H (T + 1) floats (working memory on CUDA) */
    if (!dev) MAXZ(most, (size_t)(4 * c->wm_enc_lstm.H * (wl + 1)) * sizeof(float));
    if (!dev) MAXZ(most, (size_t)(4 * c->wm_dec_lstm.H * (wl + 1)) * sizeof(float));
    MAXZ(most, conv_scratch(&c->wm_post2, wl, dev));
    MAXZ(most, conv_scratch(&c->wm_dec_pre0, wl, dev));
    for (int i = 0; i < c->n_dec; i++) {
        const sam_dec_block *d = &c->dec[i];
        MAXZ(most, convt_scratch(&d->wm_up, wl, dev));
        wl *= d->wm_up.stride;
        MAXZ(most, ru_scratch(&d->wm_ru6, wl, dev));
    }
    MAXZ(most, conv_scratch(&c->wm_post1, wl, dev));
    return most;
}

sam_need sam_decode_need(const choir_sam *m, int64_t T) {
    const sam_codec *c = &m->codec;
    int64_t L = T * c->hop, maxe, scr;
    dec_floats(c, T, &maxe, &scr);
    /* The LSTMs' gates: 4H (T + 1) floats of working memory on CUDA (kernel
     * scratch on the CPU). */
    int64_t Tw = L / 320 > 0 ? L / 320 : 1;
    int64_t gates = c->has_wm && !choir_backend_is_host(m->be) ? 4 * 512 * (Tw + 2) : 0;
    sam_need need = {0};
    need.work = (size_t)(4 * maxe + scr + gates + L + T * c->cb + 128) * sizeof(float) + 8 * 256;
    need.scratch = dec_scratch(c, T, !choir_backend_is_host(m->be));
    return need;
}

int choir_sam_decode(const choir_sam *m, const float *latent, int64_t T, const uint8_t *message, float *y_out,
                     choir_err *err) {
    if (T < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: nothing to decode");
    sam_need need = sam_decode_need(m, T);
    sam_mem mem;
    int rc = sam_mem_open(m, NULL, sam_need_arena(m, &need), &mem, err);
    if (rc) return rc;
    rc = sam_decode_in(m, &mem, latent, T, message, y_out, err);
    sam_mem_close(&mem);
    return rc;
}

int sam_decode_in(const choir_sam *m, const sam_mem *mem, const float *latent, int64_t T, const uint8_t *message,
                  float *y_out, choir_err *err) {
    const sam_codec *c = &m->codec;
    if (T < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: nothing to decode");
    if (!message) message = choir_sam_default_message;
    int64_t L = T * c->hop, maxe, scr;
    dec_floats(c, T, &maxe, &scr);
    sam_need need = sam_decode_need(m, T);
    sam_stage st;
    int rc = sam_stage_begin(m, mem, &need, &st, err);
    if (rc) return rc;
    choir_stream *s = st.s;
    float *a = choir_stream_floats(s, maxe, "sam decoder"), *b = choir_stream_floats(s, maxe, "sam decoder");
    float *t = choir_stream_floats(s, maxe, "sam decoder"), *extra = choir_stream_floats(s, maxe, "sam decoder");
    float *scratch = choir_stream_floats(s, scr, "sam decoder padding");
    float *y = choir_stream_floats(s, L, "sam decoder output"), *lat = choir_stream_floats(s, T * c->cb, "sam latent");
    float *msg_bias = choir_stream_floats(s, 128, "sam watermark message");
    int64_t wl = L;
    if (msg_bias) {
        choir_op_upload(s, lat, latent, (size_t)(T * c->cb) * sizeof *lat);
        choir_op_transpose(s, lat, T, c->cb, NULL, b); /* [C, T] */
        conv(s, &c->out_proj, b, T, a, NULL);          /* [latent, T] */
        conv(s, &c->dec_in, a, T, b, NULL);            /* [1536, T] */
        float *cur = b, *o1 = a;
        int64_t len = T;
        for (int i = 0; i < c->n_dec; i++) {
            const sam_dec_block *d = &c->dec[i];
            choir_op_sam_snake(s, cur, 1, d->up.cin, len, d->alpha);
            convt(s, &d->up, cur, len, o1, NULL);
            len *= d->up.stride;
            for (int r = 0; r < 3; r++) ru_run(s, &d->ru[r], o1, len, cur, t, scratch);
            float *sw = cur;
            cur = o1;
            o1 = sw;
        }
        /* cur: [96, L]. The base output tanh(conv(snake(x))) into y. */
        choir_op_sam_snake(s, cur, 1, c->wm_pre1.cin, L, c->wm_alpha);
        conv(s, &c->wm_pre1, cur, L, y, NULL);
        choir_op_act(s, CHOIR_ACT_TANH, y, L, 0);
        if (c->has_wm) {
            /* Watermark: 1 -> 32 channels at 48 kHz, down through blocks 4..1. */
            float *h = o1, *h2 = cur;
            conv(s, &c->wm_pre3, y, L, h, scratch);
            for (int i = c->n_dec - 1; i >= 0; i--) {
                const sam_dec_block *d = &c->dec[i];
                ru_run(s, &d->wm_ru7, h, wl, h2, t, scratch);
                choir_op_sam_elu(s, h, d->wm_down.cin * wl);
                conv(s, &d->wm_down, h, wl, h2, scratch);
                wl = conv_out_len(&d->wm_down, wl);
                float *sw = h;
                h = h2;
                h2 = sw;
            }
            /* h: [512, wl]. */
            float *tm = extra, *o0 = extra + 512 * (wl + 1), *oo = o0 + 512 * (wl + 1);
            lstm_block(s, &c->wm_enc_lstm, h, wl, tm, o0, oo);
            choir_op_sam_elu(s, h, 512 * wl);
            /* The message's embeddings, summed, are a constant per channel
             * added to post.2's output: added to its bias here. */
            float add[128];
            for (int64_t ch = 0; ch < 128; ch++) {
                float v = 0;
                for (int k = 0; k < CHOIR_SAM_WM_BITS; k++) v += c->msg_emb[(2 * k + (message[k] ? 1 : 0)) * 128 + ch];
                add[ch] = v;
            }
            choir_op_upload(s, msg_bias, add, sizeof add);
            if (c->wm_post2.b) choir_op_add(s, msg_bias, c->wm_post2.b, msg_bias, 128);
            conv_bias(s, &c->wm_post2, msg_bias, h, wl, h2, scratch); /* [128, wl] */
            conv(s, &c->wm_dec_pre0, h2, wl, h, scratch);               /* [512, wl] */
            lstm_block(s, &c->wm_dec_lstm, h, wl, tm, o0, oo);
            for (int i = 0; i < c->n_dec; i++) {
                const sam_dec_block *d = &c->dec[i];
                choir_op_sam_elu(s, h, d->wm_up.cin * wl);
                convt(s, &d->wm_up, h, wl, h2, scratch);
                wl *= d->wm_up.stride;
                ru_run(s, &d->wm_ru6, h2, wl, h, t, scratch);
                float *sw = h;
                h = h2;
                h2 = sw;
            }
            choir_op_sam_elu(s, h, 32 * wl);
            conv(s, &c->wm_post1, h, wl, h2, scratch); /* [1, L] */
            if (wl == L) choir_op_sam_axpy(s, y, y, 0.25f, h2, L);
        }
        choir_op_download(s, y_out, y, (size_t)L * sizeof *y_out);
    }
    rc = choir_stream_sync(s, err);
    sam_stage_end(m, &st);
    if (!rc && wl != L)
        rc = choir_err_set(err, CHOIR_EINTERNAL, "sam-audio: watermark length %lld != %lld", (long long)wl, (long long)L);
    return rc;
}
