/* The Whisper encoder and the cross-attention K/V, written once over the
 * backend operations (choir/backend.h): the CPU runs them through the CPU
 * backend on the model's own weights.
 *
 * Shapes follow the spec (../shared/specs/whisper.md §3): d = d_model,
 * H = heads, Dh = d / H, A = n_audio_ctx (1500), F = 3000 mel frames.
 * Every block is pre-LN: x += f(LN(x)). Windows are independent; a pass
 * runs nb of them at once (every linear layer over all nb A rows, attention
 * per window). */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "models/whisper/whisper_internal.h"

#define WH_LN_EPS 1e-5f

int wh_net_init_cpu(choir_whisper *m, choir_err *err) {
    if (!m->cpu && !(m->cpu = choir_backend_cpu(err))) return CHOIR_ENOMEM;
    wh_net *w = &m->net;
    *w = (wh_net){.be = m->cpu,
                  /* One window per pass: the memory of one, and each window's
                   * products over exactly its own 1500 rows. */
                  .enc_windows = 1,
                  .conv1_w = m->conv1_w,
                  .conv1_b = m->conv1_b,
                  .conv2_w = m->conv2_w,
                  .conv2_b = m->conv2_b,
                  .enc_pos = m->enc_pos,
                  .enc = m->enc,
                  .enc_ln_g = m->enc_ln_g,
                  .enc_ln_b = m->enc_ln_b,
                  .tok_emb = m->tok_emb,
                  .dec_pos = m->dec_pos,
                  .dec = m->dec,
                  .dec_ln_g = m->dec_ln_g,
                  .dec_ln_b = m->dec_ln_b};
    m->cache_kv = wh_cpu_cache_dtype(m);
    return 0;
}

choir_dtype wh_cpu_cache_dtype(const choir_whisper *m) {
    if (m->dims.n_text_layer < 1 || !m->dec) return CHOIR_DTYPE_F32;
    switch (m->dec[0].fc1.kind) {
    case CHOIR_WEIGHT_F16:
    case CHOIR_WEIGHT_QUANT: return CHOIR_DTYPE_F16;
    case CHOIR_WEIGHT_BF16: return CHOIR_DTYPE_BF16;
    default: return CHOIR_DTYPE_F32;
    }
}

/* --- the encoder --------------------------------------------------------------- */

/* Each choir_stream_alloc rounds up to 256 bytes. */
#define WH_ALIGN_SLACK (16 * 256)

size_t wh_enc_work_bytes(const choir_whisper_dims *D, int64_t nb) {
    int64_t d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES;
    /* The conv stem's maps [nb, d, F] and [nb, d, A], released before the
     * blocks take h, q, k, v, att [nb A, d] and the MLP hidden [nb A, ffn]. */
    int64_t conv = nb * d * (F + A), blk = nb * A * (5 * d + D->ffn_dim);
    return (size_t)(conv > blk ? conv : blk) * sizeof(float) + WH_ALIGN_SLACK;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

size_t wh_enc_scratch_bytes(const wh_net *w, const choir_whisper_dims *D, int64_t nb) {
    int64_t d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES, rows = nb * A;
    size_t s = choir_conv1d_scratch_bytes(D->n_mels, F, 3, 1, 1, 1, 1);
    s = max_sz(s, choir_conv1d_scratch_bytes(d, F, 3, 2, 1, 1, 1));
    s = max_sz(s, choir_attention_scratch_bytes(A, A));
    for (int l = 0; l < D->n_audio_layer; l++) {
        const wh_block *b = &w->enc[l];
        const choir_weight *ws[] = {&b->attn.q, &b->attn.k, &b->attn.v, &b->attn.o,
                                    &b->fc1,    &b->fc2};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            s = max_sz(s, choir_linear_scratch_bytes(rows, ws[i]));
    }
    return s;
}

/* One encoder block on the residual stream x [nb A, d]. */
static void enc_block(choir_stream *s, const wh_block *blk, const choir_whisper_dims *D,
                      int64_t nb, float *x, float *h, float *q, float *k, float *v, float *att,
                      float *hid) {
    int64_t d = D->d_model, A = D->n_audio_ctx, rows = nb * A;
    choir_attn a = {.n_head = D->n_head,
                    .Dh = d / D->n_head,
                    .scale = 1.0f / sqrtf((float)(d / D->n_head))};
    /* Self-attention within each window. */
    choir_op_layer_norm(s, x, h, rows, d, blk->attn_ln_g, blk->attn_ln_b, WH_LN_EPS);
    choir_op_linear(s, h, rows, &blk->attn.q, blk->attn.bq, q);
    choir_op_linear(s, h, rows, &blk->attn.k, NULL, k);
    choir_op_linear(s, h, rows, &blk->attn.v, blk->attn.bv, v);
    for (int64_t b = 0; b < nb; b++)
        choir_op_attention(s, q + b * A * d, d, k + b * A * d, d, v + b * A * d, d,
                           att + b * A * d, d, A, A, &a, NULL);
    choir_op_linear(s, att, rows, &blk->attn.o, blk->attn.bo, q);
    choir_op_add(s, x, q, x, rows * d);
    /* MLP. */
    choir_op_layer_norm(s, x, h, rows, d, blk->mlp_ln_g, blk->mlp_ln_b, WH_LN_EPS);
    choir_op_linear(s, h, rows, &blk->fc1, blk->fc1_b, hid);
    choir_op_act(s, CHOIR_ACT_GELU_ERF, hid, rows * D->ffn_dim, 0.0f);
    choir_op_linear(s, hid, rows, &blk->fc2, blk->fc2_b, h);
    choir_op_add(s, x, h, x, rows * d);
}

/* On a device with bf16 weights the two convolutions run on bf16 operands
 * and the blocks keep their rows in bf16 between operations (the residual
 * stream stays f32): layer norm into bf16 rows,
 * bf16 products with f32 accumulation writing bf16 q, k, v and MLP hidden
 * rows (bias and GELU in one pass), the fused bf16 attention, and the output
 * and second MLP products added straight into the f32 stream. The CPU keeps
 * f32 rows (its parity with the reference). */
static bool enc_bf16_rows(const wh_net *w, const choir_whisper_dims *D) {
    int64_t Dh = D->d_model / D->n_head;
    if (choir_backend_is_host(w->be) || w->enc_f32_rows || (Dh != 16 && Dh != 32 && Dh != 64) ||
        D->d_model % 8 || D->ffn_dim % 8)
        return false;
    for (int l = 0; l < D->n_audio_layer; l++) {
        const wh_block *b = &w->enc[l];
        const choir_weight *ws[] = {&b->attn.q, &b->attn.k, &b->attn.v, &b->attn.o, &b->fc1, &b->fc2};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->kind != CHOIR_WEIGHT_BF16) return false;
    }
    return true;
}

/* enc_block with bf16 rows: h, q, k, v, att [nb A, d] and hid [nb A, ffn]. */
static void enc_block_bf16(choir_stream *s, const wh_block *blk, const choir_whisper_dims *D,
                           int64_t nb, float *x, uint16_t *h, uint16_t *q, uint16_t *k,
                           uint16_t *v, uint16_t *att, uint16_t *hid) {
    int64_t d = D->d_model, A = D->n_audio_ctx, rows = nb * A;
    choir_attn a = {.n_head = D->n_head,
                    .Dh = d / D->n_head,
                    .scale = 1.0f / sqrtf((float)(d / D->n_head))};
    const choir_dtype bf = CHOIR_DTYPE_BF16;
    choir_op_layer_norm_bf16(s, x, h, rows, d, blk->attn_ln_g, blk->attn_ln_b, WH_LN_EPS);
    choir_op_linear_bf16(s, h, rows, &blk->attn.q, blk->attn.bq, q, bf, 0);
    choir_op_linear_bf16(s, h, rows, &blk->attn.k, NULL, k, bf, 0);
    choir_op_linear_bf16(s, h, rows, &blk->attn.v, blk->attn.bv, v, bf, 0);
    choir_op_attention_bf16(s, nb, q, d, A * d, k, d, v, d, A * d, att, d, A * d, A, A, &a);
    choir_op_linear_bf16(s, att, rows, &blk->attn.o, blk->attn.bo, x, CHOIR_DTYPE_F32,
                         CHOIR_LINEAR_ACCUMULATE);
    choir_op_layer_norm_bf16(s, x, h, rows, d, blk->mlp_ln_g, blk->mlp_ln_b, WH_LN_EPS);
    choir_op_linear_bf16(s, h, rows, &blk->fc1, blk->fc1_b, hid, bf, CHOIR_LINEAR_GELU);
    choir_op_linear_bf16(s, hid, rows, &blk->fc2, blk->fc2_b, x, CHOIR_DTYPE_F32,
                         CHOIR_LINEAR_ACCUMULATE);
}

int wh_encode_windows(choir_stream *s, const wh_net *w, const choir_whisper_dims *D,
                      const float *mel, int64_t nb, float *x) {
    int64_t d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES, rows = nb * A;
    size_t mark = choir_stream_mark(s);

    /* Conv stem: [n_mels, F] -> GELU(conv1) [d, F] -> GELU(conv2, stride 2)
     * [d, A], then time-major with the positions added. */
    float *c1 = choir_stream_floats(s, nb * d * F, "whisper encoder conv1 output");
    float *c2 = choir_stream_floats(s, nb * d * A, "whisper encoder conv2 output");
    bool bf16 = enc_bf16_rows(w, D);
    if (bf16) /* products on bf16 operands, f32 maps */
        choir_op_conv1d_bf16(s, mel, nb, D->n_mels, F, w->conv1_w, w->conv1_b, d, 3, 1, 1, 1, c1);
    else
        choir_op_conv1d(s, mel, nb, D->n_mels, F, w->conv1_w, w->conv1_b, d, 3, 1, 1, 1, 1, c1);
    choir_op_act(s, CHOIR_ACT_GELU_ERF, c1, nb * d * F, 0.0f);
    if (bf16)
        choir_op_conv1d_bf16(s, c1, nb, d, F, w->conv2_w, w->conv2_b, d, 3, 2, 1, 1, c2);
    else
        choir_op_conv1d(s, c1, nb, d, F, w->conv2_w, w->conv2_b, d, 3, 2, 1, 1, 1, c2);
    choir_op_act(s, CHOIR_ACT_GELU_ERF, c2, nb * d * A, 0.0f);
    for (int64_t b = 0; b < nb; b++)
        choir_op_transpose(s, c2 + b * d * A, d, A, w->enc_pos, x + b * A * d);
    choir_stream_release(s, mark);

    if (bf16) {
        size_t n = (size_t)(rows * d) * 2;
        uint16_t *h = choir_stream_alloc(s, n, "whisper encoder rows");
        uint16_t *q = choir_stream_alloc(s, n, "whisper encoder queries");
        uint16_t *k = choir_stream_alloc(s, n, "whisper encoder keys");
        uint16_t *v = choir_stream_alloc(s, n, "whisper encoder values");
        uint16_t *att = choir_stream_alloc(s, n, "whisper encoder attention");
        uint16_t *hid = choir_stream_alloc(s, (size_t)(rows * D->ffn_dim) * 2,
                                           "whisper encoder MLP hidden");
        for (int l = 0; l < D->n_audio_layer; l++)
            enc_block_bf16(s, &w->enc[l], D, nb, x, h, q, k, v, att, hid);
        choir_op_layer_norm(s, x, x, rows, d, w->enc_ln_g, w->enc_ln_b, WH_LN_EPS);
        choir_stream_release(s, mark);
        return choir_stream_status(s, NULL);
    }
    float *h = choir_stream_floats(s, rows * d, "whisper encoder rows");
    float *q = choir_stream_floats(s, rows * d, "whisper encoder queries");
    float *k = choir_stream_floats(s, rows * d, "whisper encoder keys");
    float *v = choir_stream_floats(s, rows * d, "whisper encoder values");
    float *att = choir_stream_floats(s, rows * d, "whisper encoder attention");
    float *hid = choir_stream_floats(s, rows * D->ffn_dim, "whisper encoder MLP hidden");
    for (int l = 0; l < D->n_audio_layer; l++) enc_block(s, &w->enc[l], D, nb, x, h, q, k, v, att, hid);
    choir_op_layer_norm(s, x, x, rows, d, w->enc_ln_g, w->enc_ln_b, WH_LN_EPS);
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

/* Host in, host out, whatever the backend: on the CPU the forward reads and
 * writes the caller's arrays; on a device each pass's windows go up and
 * their rows come back. */
int choir_whisper_encode(const choir_whisper *m, const float *mel, int n, float *out,
                         choir_err *err) {
    if (n < 0) return choir_err_set(err, CHOIR_EINVAL, "whisper: negative window count");
    const wh_net *w = wh_active_net(m);
    const choir_whisper_dims *D = &m->dims;
    int64_t nb = n < w->enc_windows ? n : w->enc_windows;
    if (nb <= 0) return 0;
    bool host = choir_backend_is_host(w->be);
    size_t mel_one = (size_t)D->n_mels * CHOIR_WHISPER_N_FRAMES,
           enc_one = (size_t)D->n_audio_ctx * (size_t)D->d_model;
    size_t io = host ? 0 : (size_t)nb * (mel_one + enc_one) * sizeof(float) + 512;
    choir_stream *s = wh_stream_open(m, wh_enc_work_bytes(D, nb) + io,
                                     wh_enc_scratch_bytes(w, D, nb), err);
    if (!s) return err && err->code ? err->code : CHOIR_ENOMEM;
    float *dmel = host ? NULL : choir_stream_floats(s, nb * (int64_t)mel_one, "whisper mel");
    float *dx = host ? NULL : choir_stream_floats(s, nb * (int64_t)enc_one, "whisper encoder output");
    for (int b0 = 0; b0 < n && !choir_stream_status(s, NULL); b0 += (int)nb) {
        int64_t k = n - b0 < nb ? n - b0 : nb;
        const float *m_in = mel + (size_t)b0 * mel_one;
        float *x_out = out + (size_t)b0 * enc_one;
        if (host) {
            wh_encode_windows(s, w, D, m_in, k, x_out);
            continue;
        }
        choir_op_upload(s, dmel, m_in, (size_t)k * mel_one * sizeof(float));
        wh_encode_windows(s, w, D, dmel, k, dx);
        choir_op_download(s, x_out, dx, (size_t)k * enc_one * sizeof(float));
    }
    return wh_stream_done(m, s, 0, err);
}

/* --- cross-attention K/V ---------------------------------------------------- */

size_t wh_cross_scratch_bytes(const wh_net *w, const choir_whisper_dims *D) {
    size_t s = 0;
    for (int l = 0; l < D->n_text_layer; l++) {
        s = max_sz(s, choir_linear_scratch_bytes(D->n_audio_ctx, &w->dec[l].cross.k));
        s = max_sz(s, choir_linear_scratch_bytes(D->n_audio_ctx, &w->dec[l].cross.v));
    }
    return s;
}

size_t wh_cross_work_bytes(const choir_whisper_dims *D) {
    return (size_t)D->n_audio_ctx * (size_t)D->d_model * sizeof(float) + 256;
}

int wh_cross_kv(choir_stream *s, const wh_net *w, const choir_whisper_dims *D, const float *enc,
                choir_whisper_cross *c) {
    int64_t per = (int64_t)D->n_audio_ctx * D->d_model;
    bool f32 = c->kv == CHOIR_DTYPE_F32;
    size_t mark = choir_stream_mark(s);
    float *tmp = f32 ? NULL : choir_stream_floats(s, per, "whisper cross K/V rows");
    for (int l = 0; l < D->n_text_layer; l++) {
        const wh_attn *a = &w->dec[l].cross;
        void *k = wh_kv_at(c->k, c->kv, l * per), *v = wh_kv_at(c->v, c->kv, l * per);
        /* A bf16 or f16 cache: the f32 product, then rounded into the cache. */
        choir_op_linear(s, enc, D->n_audio_ctx, &a->k, NULL, f32 ? k : tmp);
        if (!f32) choir_op_convert(s, tmp, k, c->kv, per);
        choir_op_linear(s, enc, D->n_audio_ctx, &a->v, a->bv, f32 ? v : tmp);
        if (!f32) choir_op_convert(s, tmp, v, c->kv, per);
    }
    choir_stream_release(s, mark);
    return choir_stream_status(s, NULL);
}

choir_whisper_cross *choir_whisper_cross_create(const choir_whisper *m, const float *enc_out,
                                                choir_err *err) {
    const wh_net *w = wh_active_net(m);
    const choir_whisper_dims *D = &m->dims;
    bool host = choir_backend_is_host(w->be);
    size_t bytes = (size_t)D->n_audio_ctx * (size_t)D->d_model * sizeof(float);
    choir_whisper_cross *c = wh_cross_new(m, NULL, err);
    if (!c) return NULL;
    choir_stream *s = wh_stream_open(m, (host ? 0 : bytes + 256) + wh_cross_work_bytes(D),
                                     wh_cross_scratch_bytes(w, D), err);
    if (!s) {
        choir_whisper_cross_free(c);
        return NULL;
    }
    const float *x = enc_out;
    if (!host) {
        float *dx = choir_stream_alloc(s, bytes, "whisper encoder rows");
        choir_op_upload(s, dx, enc_out, bytes);
        x = dx;
    }
    wh_cross_kv(s, w, D, x, c);
    if (wh_stream_done(m, s, 0, err)) {
        choir_whisper_cross_free(c);
        return NULL;
    }
    return c;
}

int choir_whisper_encode_cross(const choir_whisper *m, const float *mel, int n, float *enc,
                               choir_whisper_cross **cross, choir_err *err) {
    return wh_encode_cross(m, NULL, mel, n, enc, cross, err);
}

int wh_encode_cross(const choir_whisper *m, choir_stream *bs, const float *mel, int n, float *enc,
                    choir_whisper_cross **cross, choir_err *err) {
    if (n < 0) return choir_err_set(err, CHOIR_EINVAL, "whisper: negative window count");
    for (int i = 0; i < n; i++) cross[i] = NULL;
    const wh_net *w = wh_active_net(m);
    const choir_whisper_dims *D = &m->dims;
    int64_t nb = n < w->enc_windows ? n : w->enc_windows;
    if (nb <= 0) return 0;
    bool host = choir_backend_is_host(w->be);
    if (!host) bs = NULL;
    size_t mel_one = (size_t)D->n_mels * CHOIR_WHISPER_N_FRAMES,
           enc_one = (size_t)D->n_audio_ctx * (size_t)D->d_model;
    /* The caches first: on a batch stream they outlive the encoder's
     * activations, which are carved after them and given back below. */
    for (int i = 0; i < n; i++)
        if (!(cross[i] = wh_cross_new(m, bs, err))) return err && err->code ? err->code : CHOIR_ENOMEM;
    /* The encoder rows of a pass: the caller's host scratch on the CPU (or
     * a block of this call's), backend memory on a device, where the cross
     * K/V are computed from them. */
    size_t mark = bs ? choir_stream_mark(bs) : 0;
    float *own = NULL;
    if (host && !enc && !bs &&
        !(own = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)nb * enc_one * sizeof(float))))
        return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for encoder output");
    if (host && !enc && bs) own = choir_stream_floats(bs, nb * (int64_t)enc_one, "whisper encoder output");
    size_t io = host ? 0 : (size_t)nb * (mel_one + enc_one) * sizeof(float) + 512;
    size_t scratch = max_sz(wh_enc_scratch_bytes(w, D, nb), wh_cross_scratch_bytes(w, D));
    choir_stream *s =
        bs ? bs : wh_stream_open(m, wh_enc_work_bytes(D, nb) + io + wh_cross_work_bytes(D), scratch, err);
    if (!s) {
        choir_free(own);
        return err && err->code ? err->code : CHOIR_ENOMEM;
    }
    float *dmel = host ? NULL : choir_stream_floats(s, nb * (int64_t)mel_one, "whisper mel");
    float *dx = host ? NULL : choir_stream_floats(s, nb * (int64_t)enc_one, "whisper encoder output");
    for (int b0 = 0; b0 < n && !choir_stream_status(s, NULL); b0 += (int)nb) {
        int64_t k = n - b0 < nb ? n - b0 : nb;
        const float *m_in = mel + (size_t)b0 * mel_one;
        float *x = host ? (enc ? enc + (size_t)b0 * enc_one : own) : dx;
        if (!host) {
            choir_op_upload(s, dmel, m_in, (size_t)k * mel_one * sizeof(float));
            m_in = dmel;
        }
        wh_encode_windows(s, w, D, m_in, k, x);
        for (int64_t b = 0; b < k; b++) wh_cross_kv(s, w, D, x + (size_t)b * enc_one, cross[b0 + b]);
    }
    if (bs) {
        /* the encoder output block (when this call carved it) goes too */
        choir_stream_release(bs, mark);
        int rc = choir_stream_status(bs, err);
        if (rc) choir_stream_clear(bs);
        return rc;
    }
    int rc = wh_stream_done(m, s, 0, err);
    choir_free(own);
    return rc;
}
