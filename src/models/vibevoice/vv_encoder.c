/* The audio front: loudness normalisation, the two σ-VAE encoders streamed
 * over the signal with causal-convolution caches, and the connectors.
 *
 * Every convolution is causal: output t sees inputs up to t only, with
 * (kernel - stride) rows of left context (zeros at the start, then the end
 * of the previous pass). Passing the signal through in pieces and carrying
 * those contexts gives the same result as one pass over the whole signal,
 * which is what bounds the memory of an hour of audio to one piece's
 * activations: acoustic_tokenizer_chunk_size pieces as the reference cuts
 * them, each run in passes of plan.enc_piece samples. */
#include <math.h>
#include <string.h>

#include "models/vibevoice/vv_state.h"

int64_t choir_vibevoice_padded_len(int64_t n, int hop) {
    if (n <= 0 || hop <= 0) return 0;
    return (n + hop - 1) / hop * hop;
}

/* In passes over ranges of at most `piece` samples, each one's arithmetic
 * in the order of a single loop over the whole signal: the sum of squares
 * (double, in order), the scaled samples and their peak, the limit, the
 * padding. */
int vv_norm_step(vv_norm *st, const float *x, int64_t n, int hop, float *out, int64_t piece) {
    if (piece <= 0) piece = n > 0 ? n : 1;
    int64_t end = st->pos + piece < n ? st->pos + piece : n;
    switch (st->pass) {
    case VV_NORM_SQUARES:
        for (int64_t i = st->pos; i < end; i++) st->ss += (double)x[i] * x[i];
        st->pos = end;
        if (end == n) {
            double rms = n > 0 ? sqrt(st->ss / (double)n) : 0.0;
            st->scale = pow(10.0, -25.0 / 20.0) / (rms + 1e-6);
            st->pass = VV_NORM_SCALE;
            st->pos = 0;
        }
        break;
    case VV_NORM_SCALE:
        for (int64_t i = st->pos; i < end; i++) {
            out[i] = (float)(x[i] * st->scale);
            double a = fabs((double)out[i]);
            if (a > st->peak) st->peak = a;
        }
        st->pos = end;
        if (end == n) {
            st->pass = st->peak > 1.0 ? VV_NORM_LIMIT : VV_NORM_PAD;
            st->pos = 0;
        }
        break;
    case VV_NORM_LIMIT:
        for (int64_t i = st->pos; i < end; i++) out[i] = (float)(out[i] / (st->peak + 1e-6));
        st->pos = end;
        if (end == n) st->pass = VV_NORM_PAD;
        break;
    case VV_NORM_PAD: {
        int64_t padded = choir_vibevoice_padded_len(n, hop);
        for (int64_t i = n; i < padded; i++) out[i] = 0.0f;
        st->pass = VV_NORM_DONE;
        break;
    }
    default: break;
    }
    return st->pass != VV_NORM_DONE;
}

void choir_vibevoice_normalize(const float *x, int64_t n, int hop, float *out) {
    vv_norm st = {0};
    while (vv_norm_step(&st, x, n, hop, out, n)) {}
}

/* A causal convolution over in [(kernel - stride) + T (+ slack)][cin] (its
 * left context first): T / stride output rows. A strided one is the sum of
 * its tap blocks' products over contiguous views of the input. */
static void conv_causal(choir_stream *st, const vv_conv *c, const float *in, int64_t t_out, float *out, float *tmp) {
    if (t_out <= 0) return;
    if (c->taps1) {
        choir_op_conv_stem_rows(st, in, t_out, c->taps1, c->bias, c->cout, c->kernel, out);
        return;
    }
    int64_t row = (int64_t)c->stride * c->cin;
    choir_op_linear(st, in, t_out, &c->blk[0], c->bias, out);
    for (int g = 1; g < c->n_blocks; g++) {
        choir_op_linear(st, in + (int64_t)g * row, t_out, &c->blk[g], NULL, tmp);
        choir_op_add(st, out, tmp, out, t_out * c->cout);
    }
}

/* One causal convolution over src [T][cin] (host memory when src_host: the
 * pass's samples) with its cache: builds the input with context in s->e_in,
 * moves the cache forward, writes out [T/stride][cout]. */
static void conv_pass(choir_vibevoice_state *s, const vv_conv *c, const float *src, int src_host, int64_t T,
                      float **cache, float *out) {
    choir_stream *st = s->stream;
    int64_t cin = c->cin, pad = c->kernel - c->stride;
    float *in = s->e_in;
    choir_op_copy(st, in, *cache, (size_t)(pad * cin) * sizeof *in);
    if (src_host) choir_op_upload(st, in + pad * cin, src, (size_t)(T * cin) * sizeof *in);
    else choir_op_copy(st, in + pad * cin, src, (size_t)(T * cin) * sizeof *in);
    /* The last tap block may reach past the kernel; its weights are zero
     * there, but the rows must not hold stale NaNs. */
    int64_t slack = c->taps1 ? 0 : (int64_t)c->n_blocks * c->stride - c->kernel;
    if (slack > 0) choir_op_zero(st, in + (pad + T) * cin, (size_t)(slack * cin) * sizeof *in);
    choir_op_copy(st, *cache, in + T * cin, (size_t)(pad * cin) * sizeof *in);
    *cache += pad * cin;
    conv_causal(st, c, in, T / c->stride, out, s->e_tmp);
}

/* Whether block b runs fused (s->enc_fused, on a device): its FFN over bf16
 * rows (the norm written in bf16, fc1's bias and GELU with its output's
 * rounding in the product's epilogue, fc2 reading those rows), which needs
 * bf16 products and a hidden width of a multiple of 8. */
static int block_fused(const choir_vibevoice_state *s, const vv_block *b, int64_t F) {
    return s->enc_fused && b->fc1.kind == CHOIR_WEIGHT_BF16 && b->fc2.kind == CHOIR_WEIGHT_BF16 && F % 8 == 0;
}

/* x += ffn_gamma * linear2(gelu(linear1(ffn_norm(x)))) over bf16 rows, a
 * tile of rows at a time: the f32 ops of the plain path each read and wrote
 * whole [rows][F] f32 rows (bias, GELU, the conversion for fc2); here the
 * hidden rows are written once, in bf16, by fc1's product (on CUDA: bias and
 * GELU in cublasLt's epilogue, the tanh form: docs/vibevoice.md). tile
 * holds to [rows][C] f32, then the normed [rows][C] and hidden [rows][F]
 * bf16 rows (within the f32 tile's floats). */
static void ffn_fused(choir_stream *st, const vv_block *b, float *x, int64_t T, int64_t C, float eps, int64_t tile,
                      float *tile_mem) {
    int64_t tr = tile < T ? tile : T;
    float *to = tile_mem;
    uint16_t *tn = (uint16_t *)(to + tr * C), *th = tn + tr * C;
    for (int64_t r0 = 0; r0 < T; r0 += tile) {
        int64_t rows = T - r0 < tile ? T - r0 : tile;
        choir_op_rms_norm_bf16(st, x + r0 * C, tn, rows, C, b->ffn_norm, eps);
        choir_op_linear_bf16(st, tn, rows, &b->fc1, b->fc1_bias, th, CHOIR_DTYPE_BF16, CHOIR_LINEAR_GELU);
        choir_op_linear_bf16(st, th, rows, &b->fc2, b->fc2_bias, to, CHOIR_DTYPE_F32, 0);
        choir_op_add_scaled_rows(st, x + r0 * C, to, b->ffn_gamma, rows, C);
    }
}

static void block_pass(choir_vibevoice_state *s, const vv_block *b, int64_t T, int64_t C, int km, float eps,
                       int ffn_mult, float **cache) {
    choir_stream *st = s->stream;
    float *x = s->e_x, *nb = s->e_norm;
    int64_t ctx = km - 1, F = C * ffn_mult, tile = vv_ffn_tile(C, ffn_mult);
    int fused = block_fused(s, b, F);
    /* x += gamma * mixer(norm(x)), the mixer seeing `ctx` normed rows of context. */
    choir_op_copy(st, nb, *cache, (size_t)(ctx * C) * sizeof *nb);
    choir_op_rms_norm(st, x, nb + ctx * C, T, C, b->norm, eps);
    choir_op_copy(st, *cache, nb + T * C, (size_t)(ctx * C) * sizeof *nb);
    *cache += ctx * C;
    const float *mix_in = nb + (int64_t)(km - b->dw_kernel) * C;
    if (fused) {
        choir_op_dwconv_residual_rows(st, mix_in, T, C, b->dw_kernel, b->dw, b->dw_bias, b->gamma, x);
        ffn_fused(st, b, x, T, C, eps, tile, s->e_tile);
        return;
    }
    choir_op_dwconv_rows(st, mix_in, T, C, b->dw_kernel, b->dw, b->dw_bias, s->e_tmp);
    choir_op_add_scaled_rows(st, x, s->e_tmp, b->gamma, T, C);
    /* x += ffn_gamma * linear2(gelu(linear1(ffn_norm(x)))), a tile of rows at a time. */
    float *tn = s->e_tile, *th = tn + (tile < T ? tile : T) * C, *to = th + (tile < T ? tile : T) * F;
    for (int64_t r0 = 0; r0 < T; r0 += tile) {
        int64_t rows = T - r0 < tile ? T - r0 : tile;
        choir_op_rms_norm(st, x + r0 * C, tn, rows, C, b->ffn_norm, eps);
        choir_op_linear(st, tn, rows, &b->fc1, b->fc1_bias, th);
        choir_op_act(st, CHOIR_ACT_GELU_ERF, th, rows * F, 0.0f);
        choir_op_linear(st, th, rows, &b->fc2, b->fc2_bias, to);
        choir_op_add_scaled_rows(st, x + r0 * C, to, b->ffn_gamma, rows, C);
    }
}

/* One pass of P samples (a multiple of the hop) through encoder e; writes
 * P / hop latent rows to lat. */
static void encoder_pass(choir_vibevoice_state *s, const vv_encoder *e, const vv_kernels *k, const float *x,
                         int64_t P, float *lat) {
    const choir_vibevoice_enc_dims *d = &e->d;
    float *cache = s->e_cache;
    const float *src = x;
    int64_t T = P;
    for (int st = 0; st < d->n_stages; st++) {
        /* e_x is both the stage's input and its output: conv_pass has copied
         * the input into e_in before the convolution writes e_x. */
        conv_pass(s, &e->down[st], src, st == 0, T, &cache, s->e_x);
        T /= e->down[st].stride;
        for (int b = 0; b < d->depths[st]; b++)
            block_pass(s, &e->blocks[st][b], T, e->channels[st], k->mixer, d->eps, d->ffn_mult, &cache);
        src = s->e_x;
    }
    conv_pass(s, &e->head, src, d->n_stages == 0, T, &cache, lat);
}

int vv_encode_start(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t n, int64_t chunk_samples,
                    vv_enc_cursor *c, choir_err *err) {
    const choir_vibevoice_dims *D = &m->dims;
    memset(c, 0, sizeof *c);
    if (n < 0 || n % D->hop)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: %lld samples is not a multiple of the hop %d",
                             (long long)n, D->hop);
    if (n / D->hop > s->max_frames)
        return choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: %lld audio frames, the state holds %lld",
                             (long long)(n / D->hop), (long long)s->max_frames);
    int64_t chunk = chunk_samples > 0 ? chunk_samples : D->chunk_samples;
    if (chunk % D->hop) chunk -= chunk % D->hop;
    if (chunk <= 0) chunk = D->hop;
    c->n = n;
    c->chunk = chunk;
    c->e = n > 0 ? 0 : 2;
    if (c->e == 0) choir_op_zero(s->stream, s->e_cache, (size_t)s->sizes.cache * sizeof(float));
    else s->n_frames = 0, s->audio_used = 0;
    return 0;
}

/* The passes in the order of the whole loop: for each encoder (its
 * convolution caches zeroed first), each streaming chunk, each piece of it. */
int vv_encode_pass(const choir_vibevoice *m, choir_vibevoice_state *s, const float *x, vv_enc_cursor *c) {
    const choir_vibevoice_dims *D = &m->dims;
    if (c->e >= 2) return 0;
    const vv_encoder *en = &m->enc[c->e];
    int64_t c1 = c->c0 + c->chunk < c->n ? c->c0 + c->chunk : c->n;
    int64_t P = c1 - c->p0 < s->piece ? c1 - c->p0 : s->piece;
    encoder_pass(s, en, &s->kernels[c->e], x + c->p0, P, s->lat[c->e] + c->p0 / D->hop * en->d.vae_dim);
    c->p0 += P;
    if (c->p0 < c1) return 1;
    c->c0 += c->chunk;
    c->p0 = c->c0;
    if (c->c0 < c->n) return 1;
    c->c0 = c->p0 = 0;
    if (++c->e < 2) {
        choir_op_zero(s->stream, s->e_cache, (size_t)s->sizes.cache * sizeof(float));
        return 1;
    }
    s->n_frames = c->n / D->hop;
    s->audio_used = 0;
    return 0;
}

int choir_vibevoice_encode(const choir_vibevoice *m, choir_vibevoice_state *s, const float *x, int64_t n,
                           int64_t chunk_samples, float *acoustic, float *semantic, choir_err *err) {
    vv_enc_cursor c;
    int rc = vv_encode_start(m, s, n, chunk_samples, &c, err);
    if (rc) return rc;
    while (vv_encode_pass(m, s, x, &c)) {
    }
    int64_t frames = n / m->dims.hop;
    for (int e = 0; e < 2; e++) {
        float *dst = e ? semantic : acoustic;
        int vae = m->enc[e].d.vae_dim;
        if (dst) choir_op_download(s->stream, dst, s->lat[e], (size_t)(frames * vae) * sizeof *dst);
    }
    /* Waits for the device, so that the encoders' time is theirs. */
    return choir_stream_sync(s->stream, err);
}

/* out[n][H] = acoustic connector + semantic connector of latent frames
 * f0 .. f0 + n - 1 (n at most the prefill chunk); uses s->tmp and s->cb. */
void vv_connect_rows(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t f0, int64_t n, float *out) {
    int64_t H = m->dims.lm.hidden;
    choir_stream *st = s->stream;
    for (int e = 0; e < 2; e++) {
        const vv_connector *c = &m->conn[e];
        int vae = m->enc[e].d.vae_dim;
        choir_op_linear(st, s->lat[e] + f0 * vae, n, &c->fc1, c->fc1_bias, s->tmp);
        choir_op_rms_norm(st, s->tmp, s->tmp, n, H, c->norm, m->dims.connector_eps);
        choir_op_linear(st, s->tmp, n, &c->fc2, c->fc2_bias, e ? s->cb : out);
    }
    choir_op_add(st, out, s->cb, out, n * H);
}

int choir_vibevoice_audio_embeds(const choir_vibevoice *m, choir_vibevoice_state *s, float *out, choir_err *err) {
    int64_t H = m->dims.lm.hidden;
    for (int64_t f0 = 0; f0 < s->n_frames; f0 += s->prefill_chunk) {
        int64_t n = s->n_frames - f0 < s->prefill_chunk ? s->n_frames - f0 : s->prefill_chunk;
        vv_connect_rows(m, s, f0, n, s->ca);
        choir_op_download(s->stream, out + f0 * H, s->ca, (size_t)(n * H) * sizeof *out);
    }
    return vv_status(s, err);
}
