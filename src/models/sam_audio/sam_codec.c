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
 * Activations are channels-first [C, T]; every call allocates one workspace
 * sized for its largest stage and frees it before returning. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/kernels_ext.h"
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

int64_t sam_conv_out_len(const sam_conv *c, int64_t T) {
    int64_t l, r;
    conv_pads(c, T, &l, &r);
    return choir_conv1d_out_len(T + l + r, c->k, c->stride, 0, c->dilation);
}

void sam_conv_run(const sam_conv *c, const float *x, int64_t T, float *y, float *scratch) {
    int64_t l, r;
    conv_pads(c, T, &l, &r);
    if (!c->causal) {
        choir_conv1d(x, c->cin, T, c->w, c->b, c->cout, c->k, c->stride, (int)l, c->dilation, 1, y);
        return;
    }
    int64_t Tp = T + l + r;
    for (int64_t ch = 0; ch < c->cin; ch++) {
        float *row = scratch + ch * Tp;
        memset(row, 0, (size_t)l * sizeof *row);
        memcpy(row + l, x + ch * T, (size_t)T * sizeof *row);
        memset(row + l + T, 0, (size_t)r * sizeof *row);
    }
    choir_conv1d(scratch, c->cin, Tp, c->w, c->b, c->cout, c->k, c->stride, 0, c->dilation, 1, y);
}

/* y[cout, T*stride] = ConvT(x[cin, T]); scratch holds cout * (T+1) * stride floats (causal). */
static void convt_run(const sam_convt *c, const float *x, int64_t T, float *y, float *scratch) {
    int s = c->stride;
    if (!c->causal) {
        choir_conv_transpose1d(x, c->cin, T, c->w, c->b, c->cout, c->k, s, (s + 1) / 2, s % 2, 1, 1, y);
        return;
    }
    int64_t full = (T - 1) * s + c->k;
    choir_conv_transpose1d(x, c->cin, T, c->w, c->b, c->cout, c->k, s, 0, 0, 1, 1, scratch);
    for (int64_t ch = 0; ch < c->cout; ch++) memcpy(y + ch * T * s, scratch + ch * full, (size_t)(T * s) * sizeof *y);
}

/* x[dim, T] += ResidualUnit(x), with t1 [dim, T], t2 [dim, T] and pad scratch. */
static void ru_run(const sam_ru *r, float *x, int64_t T, float *t1, float *t2, float *scratch) {
    int64_t dim = r->c1.cin;
    memcpy(t1, x, (size_t)(dim * T) * sizeof *t1);
    if (r->alpha1) choir_snake_eps(t1, dim, T, r->alpha1);
    else choir_elu(t1, dim * T);
    sam_conv_run(&r->c1, t1, T, t2, scratch);
    if (r->alpha2) choir_snake_eps(t2, r->c1.cout, T, r->alpha2);
    else choir_elu(t2, r->c1.cout * T);
    sam_conv_run(&r->c2, t2, T, t1, scratch);
    choir_add(x, t1, x, dim * T);
}

static void transpose(const float *x, int64_t rows, int64_t cols, float *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
}

/* --- encoder ------------------------------------------------------------ */

int choir_sam_encode(const choir_sam *m, const float *x, int64_t n, float *latent, choir_err *err) {
    const sam_codec *c = &m->codec;
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty input");
    int64_t T = (n + c->hop - 1) / c->hop, L = T * c->hop;
    /* Largest stage: each block's input width at its rate, and the pads. */
    int64_t maxe = L + 64, len = L, d = c->enc_in.cout;
    if (d * len > maxe) maxe = d * len;
    for (int i = 0; i < c->n_enc; i++) {
        if (d * (len + 64) > maxe) maxe = d * (len + 64);
        len /= c->enc_rates[i];
        d *= 2;
        if (d * len > maxe) maxe = d * len;
    }
    if (2 * c->cb * T > maxe) maxe = 2 * c->cb * T;
    float *ws = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(3 * maxe) * sizeof(float));
    if (!ws) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory in the codec encoder");
    float *a = ws, *b = ws + maxe, *t = ws + 2 * maxe;
    /* Reflect padding to a whole number of hops, as the reference pads;
     * an input shorter than its pad is zero-extended first (audiocraft). */
    int64_t pad = L - n;
    if (pad == 0) {
        memcpy(a, x, (size_t)n * sizeof *a);
    } else if (pad < n) {
        choir_pad_reflect(x, 1, n, 0, pad, a);
    } else {
        memcpy(a, x, (size_t)n * sizeof *a);
        memset(a + n, 0, (size_t)pad * sizeof *a);
    }
    sam_conv_run(&c->enc_in, a, L, b, NULL);
    len = L;
    d = c->enc_in.cout;
    float *cur = b, *o1 = a;
    for (int i = 0; i < c->n_enc; i++) {
        const sam_enc_block *e = &c->enc[i];
        for (int r = 0; r < 3; r++) ru_run(&e->ru[r], cur, len, o1, t, NULL);
        choir_snake_eps(cur, d, len, e->alpha);
        sam_conv_run(&e->down, cur, len, o1, NULL);
        len = sam_conv_out_len(&e->down, len);
        d *= 2;
        float *sw = cur;
        cur = o1;
        o1 = sw;
    }
    choir_snake_eps(cur, d, len, c->enc_alpha);
    sam_conv_run(&c->enc_out, cur, len, o1, NULL);
    sam_conv_run(&c->in_proj, o1, len, cur, NULL);
    if (len != T) {
        choir_free(ws);
        return choir_err_set(err, CHOIR_EINTERNAL, "sam-audio: encoder gave %lld frames, expected %lld", (long long)len,
                             (long long)T);
    }
    transpose(cur, c->cb, T, latent); /* the mean: first C of the 2C rows */
    choir_free(ws);
    return 0;
}

/* --- decoder ------------------------------------------------------------ */

/* LSTMBlock: x[H, T] -> x + LSTM2(x), through time-major buffers. */
static void lstm_block(const sam_lstm *l, float *x, int64_t T, float *tm, float *o0, float *o1, float *scratch) {
    int64_t H = l->H;
    transpose(x, H, T, tm);
    choir_lstm(tm, T, H, H, l->w_ih[0], l->w_hh[0], l->b_ih[0], l->b_hh[0], NULL, NULL, false, o0, H, scratch);
    choir_lstm(o0, T, H, H, l->w_ih[1], l->w_hh[1], l->b_ih[1], l->b_hh[1], NULL, NULL, false, o1, H, scratch);
    choir_add(o1, tm, o1, T * H);
    transpose(o1, T, H, x);
}

int choir_sam_decode(const choir_sam *m, const float *latent, int64_t T, const uint8_t *message, float *y,
                     choir_err *err) {
    const sam_codec *c = &m->codec;
    if (T < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: nothing to decode");
    if (!message) message = choir_sam_default_message;
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
        if (4 * 512 * (Tw + 1) > scr) scr = 4 * 512 * (Tw + 1);
        if (32 * (L + 64) > maxe) maxe = 32 * (L + 64);
    }
    float *ws = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(3 * maxe + scr + 4 * 512 * (Tw + 1)) * sizeof(float));
    if (!ws) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory in the codec decoder");
    float *a = ws, *b = a + maxe, *t = b + maxe, *scratch = t + maxe, *extra = scratch + scr;
    transpose(latent, T, c->cb, b);               /* [C, T] */
    sam_conv_run(&c->out_proj, b, T, a, NULL);    /* [latent, T] */
    sam_conv_run(&c->dec_in, a, T, b, NULL);      /* [1536, T] */
    float *cur = b, *o1 = a;
    len = T;
    for (int i = 0; i < c->n_dec; i++) {
        const sam_dec_block *d = &c->dec[i];
        choir_snake_eps(cur, d->up.cin, len, d->alpha);
        convt_run(&d->up, cur, len, o1, NULL);
        len *= d->up.stride;
        for (int r = 0; r < 3; r++) ru_run(&d->ru[r], o1, len, cur, t, scratch);
        float *sw = cur;
        cur = o1;
        o1 = sw;
    }
    /* cur: [96, L]. The base output tanh(conv(snake(x))) into y. */
    int64_t last = c->wm_pre1.cin;
    choir_snake_eps(cur, last, L, c->wm_alpha);
    sam_conv_run(&c->wm_pre1, cur, L, y, NULL);
    choir_tanh(y, L);
    if (!c->has_wm) {
        choir_free(ws);
        return 0;
    }
    /* Watermark: 1 -> 32 channels at 48 kHz, down through blocks 4..1. */
    float *h = o1, *h2 = cur;
    sam_conv_run(&c->wm_pre3, y, L, h, scratch);
    int64_t wl = L;
    for (int i = c->n_dec - 1; i >= 0; i--) {
        const sam_dec_block *d = &c->dec[i];
        ru_run(&d->wm_ru7, h, wl, h2, t, scratch);
        choir_elu(h, d->wm_down.cin * wl);
        sam_conv_run(&d->wm_down, h, wl, h2, scratch);
        wl = sam_conv_out_len(&d->wm_down, wl);
        float *sw = h;
        h = h2;
        h2 = sw;
    }
    /* h: [512, wl]. */
    float *tm = extra, *o0 = extra + 512 * (wl + 1), *oo = o0 + 512 * (wl + 1);
    lstm_block(&c->wm_enc_lstm, h, wl, tm, o0, oo, scratch);
    choir_elu(h, 512 * wl);
    sam_conv_run(&c->wm_post2, h, wl, h2, scratch); /* [128, wl] */
    for (int64_t ch = 0; ch < 128; ch++) {
        float add = 0;
        for (int k = 0; k < CHOIR_SAM_WM_BITS; k++) add += c->msg_emb[(2 * k + (message[k] ? 1 : 0)) * 128 + ch];
        for (int64_t i = 0; i < wl; i++) h2[ch * wl + i] += add;
    }
    sam_conv_run(&c->wm_dec_pre0, h2, wl, h, scratch); /* [512, wl] */
    lstm_block(&c->wm_dec_lstm, h, wl, tm, o0, oo, scratch);
    for (int i = 0; i < c->n_dec; i++) {
        const sam_dec_block *d = &c->dec[i];
        choir_elu(h, d->wm_up.cin * wl);
        convt_run(&d->wm_up, h, wl, h2, scratch);
        wl *= d->wm_up.stride;
        ru_run(&d->wm_ru6, h2, wl, h, t, scratch);
        float *sw = h;
        h = h2;
        h2 = sw;
    }
    choir_elu(h, 32 * wl);
    sam_conv_run(&c->wm_post1, h, wl, h2, scratch); /* [1, L] */
    if (wl != L) {
        choir_free(ws);
        return choir_err_set(err, CHOIR_EINTERNAL, "sam-audio: watermark length %lld != %lld", (long long)wl, (long long)L);
    }
    for (int64_t i = 0; i < L; i++) y[i] += 0.25f * h2[i];
    choir_free(ws);
    return 0;
}
