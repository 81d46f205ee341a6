/* Loading VibeVoice-ASR checkpoints: layout detection and weight binding.
 *
 * Four namings reach us (spec section 2 and the fixtures' original_names.json):
 *   transformers 5.x  model.acoustic_tokenizer_encoder.{stem.conv.conv, conv_layers.N.conv.conv,
 *                     stem.stage.B, conv_layers.N.stage.B, head.conv}, mixer.conv,
 *                     model.multi_modal_projector.acoustic_linear_1, model.language_model.*, lm_head
 *   earlier transformers  the same without the leading model. on the encoders and the projector,
 *                     language_model.model.*, language_model.lm_head
 *   original          model.acoustic_tokenizer.encoder.{downsample_layers.N.0.conv.conv,
 *                     stages.S.B, head.conv.conv}, mixer.conv.conv.conv,
 *                     model.acoustic_connector.fc1, model.language_model.*, lm_head
 *                     (plus model.acoustic_tokenizer.decoder.*, which is never read)
 *   mlx-community     acoustic_tokenizer.encoder.{downsample_layers.N.conv, stages.S.B, head.conv},
 *                     mixer.conv.conv, acoustic_connector.fc1, language_model.model.*,
 *                     language_model.lm_head; convolutions stored [out, kernel, in]; the
 *                     language model's linears and embedding possibly MLX-quantized.
 * Rather than renaming tensors, each layout is a set of name patterns. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/quant.h"
#include "models/vibevoice/vv_internal.h"

typedef struct vv_loader {
    choir_vibevoice *m;
    choir_vibevoice_tensor_fn find;
    void *ctx;
    char name[320];
} vv_loader;

static const char *const ENC_NAMES[2] = {"acoustic", "semantic"};

static const char *nm(vv_loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *nm(vv_loader *ld, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->name, sizeof ld->name, fmt, ap);
    va_end(ap);
    return ld->name;
}

static void *keep(choir_vibevoice *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 256;
        void **p = choir_realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *b = choir_alloc(CHOIR_MEM_WEIGHTS, bytes ? bytes : 1);
    if (b) {
        m->owned[m->n_owned++] = b;
        m->bytes += bytes;
    }
    return b;
}

static const choir_st_tensor *get(vv_loader *ld, const char *name, choir_err *err) {
    const choir_st_tensor *t = ld->find(ld->ctx, name);
    if (!t) choir_err_set(err, CHOIR_ENOTFOUND, "vibevoice: tensor %s is missing", name);
    return t;
}

/* A float vector of n elements: used in place when aligned F32, else
 * converted once. */
static int vec(vv_loader *ld, const char *name, int64_t n, const float **out, choir_err *err) {
    const choir_st_tensor *t = get(ld, name, err);
    if (!t) return CHOIR_ENOTFOUND;
    if (t->numel != n)
        return choir_err_set(err, CHOIR_ESHAPE, "vibevoice: tensor %s has %lld elements, expected %lld", name,
                             (long long)t->numel, (long long)n);
    if (t->dtype == CHOIR_DTYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        *out = t->data;
        ld->m->bytes += t->nbytes;
        return 0;
    }
    float *f = keep(ld->m, (size_t)n * sizeof(float));
    if (!f) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory converting %s", name);
    if (choir_to_f32_n(t->dtype, t->data, f, n))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "vibevoice: tensor %s has dtype %s", name,
                             choir_dtype_name(t->dtype));
    *out = f;
    return 0;
}

static int kind_of(choir_dtype dt, choir_weight_kind *k) {
    switch (dt) {
    case CHOIR_DTYPE_F32: *k = CHOIR_WEIGHT_F32; return 0;
    case CHOIR_DTYPE_F16: *k = CHOIR_WEIGHT_F16; return 0;
    case CHOIR_DTYPE_BF16: *k = CHOIR_WEIGHT_BF16; return 0;
    default: return -1;
    }
}

/* A linear layer `base`.weight [rows, cols] (or MLX-quantized with
 * .scales / .biases), used in place. */
static int mat(vv_loader *ld, const char *base, int64_t rows, int64_t cols, choir_weight *w, choir_err *err) {
    char wn[340], sn[340], bn[340];
    snprintf(wn, sizeof wn, "%s.weight", base);
    snprintf(sn, sizeof sn, "%s.scales", base);
    snprintf(bn, sizeof bn, "%s.biases", base);
    const choir_st_tensor *t = get(ld, wn, err);
    if (!t) return CHOIR_ENOTFOUND;
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    const choir_st_tensor *s = ld->find(ld->ctx, sn);
    if (s) {
        const choir_st_tensor *b = ld->find(ld->ctx, bn);
        if (!b || t->dtype != CHOIR_DTYPE_U32 || t->ndim != 2 || s->ndim != 2 || t->shape[0] != rows ||
            s->shape[0] != rows || s->shape[1] <= 0 || cols % s->shape[1] || b->numel != s->numel ||
            b->dtype != s->dtype)
            return choir_err_set(err, CHOIR_ESHAPE, "vibevoice: quantized tensor %s does not fit [%lld, %lld]",
                                 base, (long long)rows, (long long)cols);
        w->kind = CHOIR_WEIGHT_QUANT;
        w->group_size = (int)(cols / s->shape[1]);
        w->bits = (int)(t->shape[1] * 32 / cols);
        w->scales = s->data;
        w->biases = b->data;
        w->sb_dtype = s->dtype;
        if (t->shape[1] * 32 != cols * w->bits || !choir_quant_supported(w->bits, w->group_size))
            return choir_err_set(err, CHOIR_EUNSUPPORTED, "vibevoice: %s: unsupported quantization (%d bits, "
                                 "group %d)", base, w->bits, w->group_size);
        ld->m->bytes += t->nbytes + s->nbytes + b->nbytes;
        if (w->bits > ld->m->lm_bits) ld->m->lm_bits = w->bits;
        return 0;
    }
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return choir_err_set(err, CHOIR_ESHAPE, "vibevoice: tensor %s is not [%lld, %lld]", wn, (long long)rows,
                             (long long)cols);
    if (kind_of(t->dtype, &w->kind))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "vibevoice: tensor %s has dtype %s", wn,
                             choir_dtype_name(t->dtype));
    ld->m->bytes += t->nbytes;
    return 0;
}

/* Element k of a conv weight in the checkpoint's layout, as f32. */
static float conv_at(const choir_st_tensor *t, int mlx, int64_t o, int64_t i, int64_t k, int64_t cin, int64_t K) {
    int64_t idx = mlx ? (o * K + k) * cin + i : (o * cin + i) * K + k;
    switch (t->dtype) {
    case CHOIR_DTYPE_F32: return ((const float *)t->data)[idx];
    case CHOIR_DTYPE_F16: return choir_f16_to_f32(((const uint16_t *)t->data)[idx]);
    default: return choir_bf16_to_f32(((const uint16_t *)t->data)[idx]);
    }
}

/* A causal convolution `base`.weight / .bias [cout, cin, K] (MLX: [cout, K,
 * cin]) with the given stride, re-laid out into tap blocks (vv_conv). The
 * blocks keep the checkpoint's float dtype (bf16 stays bf16). */
static int conv(vv_loader *ld, const char *base, int64_t cin, int64_t cout, int stride, vv_conv *c,
                choir_err *err) {
    char wn[340], bn[340];
    snprintf(wn, sizeof wn, "%s.weight", base);
    snprintf(bn, sizeof bn, "%s.bias", base);
    const choir_st_tensor *t = get(ld, wn, err);
    if (!t) return CHOIR_ENOTFOUND;
    int mlx = ld->m->layout == CHOIR_VIBEVOICE_LAYOUT_MLX;
    choir_weight_kind kind;
    int64_t K = t->ndim == 3 ? (mlx ? t->shape[1] : t->shape[2]) : 0;
    if (t->ndim != 3 || t->shape[0] != cout || (mlx ? t->shape[2] : t->shape[1]) != cin || K < stride ||
        K > (int64_t)stride * VV_MAX_TAP_BLOCKS)
        return choir_err_set(err, CHOIR_ESHAPE, "vibevoice: convolution %s is not [%lld, %lld, k] (%s layout) "
                             "with stride %d", wn, (long long)cout, (long long)cin, mlx ? "MLX" : "torch", stride);
    if (kind_of(t->dtype, &kind))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "vibevoice: tensor %s has dtype %s", wn,
                             choir_dtype_name(t->dtype));
    memset(c, 0, sizeof *c);
    c->cin = (int)cin;
    c->cout = (int)cout;
    c->kernel = (int)K;
    c->stride = stride;
    int rc = vec(ld, bn, cout, &c->bias, err);
    if (rc) return rc;
    if (cin == 1 && stride == 1) {
        float *taps = keep(ld->m, (size_t)(K * cout) * sizeof(float));
        if (!taps) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory for %s", wn);
        for (int64_t k = 0; k < K; k++)
            for (int64_t o = 0; o < cout; o++) taps[k * cout + o] = conv_at(t, mlx, o, 0, k, cin, K);
        c->taps1 = taps;
        return 0;
    }
    c->n_blocks = (int)((K + stride - 1) / stride);
    int64_t cols = (int64_t)stride * cin;
    size_t esz = kind == CHOIR_WEIGHT_F32 ? 4 : 2;
    for (int g = 0; g < c->n_blocks; g++) {
        uint8_t *blk = keep(ld->m, (size_t)(cout * cols) * esz);
        if (!blk) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory for %s", wn);
        for (int64_t o = 0; o < cout; o++)
            for (int64_t r = 0; r < stride; r++) {
                int64_t k = (int64_t)g * stride + r;
                for (int64_t i = 0; i < cin; i++) {
                    float v = k < K ? conv_at(t, mlx, o, i, k, cin, K) : 0.0f;
                    int64_t at = o * cols + r * cin + i;
                    if (kind == CHOIR_WEIGHT_F32) ((float *)blk)[at] = v;
                    else if (kind == CHOIR_WEIGHT_F16) ((uint16_t *)blk)[at] = choir_f32_to_f16(v);
                    else ((uint16_t *)blk)[at] = choir_f32_to_bf16(v); /* exact: v came from bf16 */
                }
            }
        c->blk[g] = (choir_weight){.kind = kind, .rows = cout, .cols = cols, .data = blk};
    }
    return 0;
}

/* The depthwise mixer `base`.weight [C, 1, K] (MLX [C, K, 1]) as f32 [K][C]. */
static int dwconv(vv_loader *ld, const char *base, int64_t C, vv_block *b, choir_err *err) {
    char wn[340], bn[340];
    snprintf(wn, sizeof wn, "%s.weight", base);
    snprintf(bn, sizeof bn, "%s.bias", base);
    const choir_st_tensor *t = get(ld, wn, err);
    if (!t) return CHOIR_ENOTFOUND;
    int mlx = ld->m->layout == CHOIR_VIBEVOICE_LAYOUT_MLX;
    int64_t K = t->ndim == 3 ? (mlx ? t->shape[1] : t->shape[2]) : 0;
    choir_weight_kind kind;
    if (t->ndim != 3 || t->shape[0] != C || (mlx ? t->shape[2] : t->shape[1]) != 1 || K < 1 || K > 64)
        return choir_err_set(err, CHOIR_ESHAPE, "vibevoice: depthwise convolution %s is not [%lld, 1, k]", wn,
                             (long long)C);
    if (kind_of(t->dtype, &kind))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "vibevoice: tensor %s has dtype %s", wn,
                             choir_dtype_name(t->dtype));
    float *w = keep(ld->m, (size_t)(K * C) * sizeof(float));
    if (!w) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory for %s", wn);
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++) w[k * C + c] = conv_at(t, mlx, c, 0, k, 1, K);
    b->dw = w;
    b->dw_kernel = (int)K;
    return vec(ld, bn, C, &b->dw_bias, err);
}

/* Name prefixes of one encoder's parts in the model's layout. */
static void enc_prefix(vv_loader *ld, int e, char *out, size_t cap) {
    switch (ld->m->layout) {
    case CHOIR_VIBEVOICE_LAYOUT_HF: snprintf(out, cap, "model.%s_tokenizer_encoder", ENC_NAMES[e]); break;
    case CHOIR_VIBEVOICE_LAYOUT_HF_FLAT: snprintf(out, cap, "%s_tokenizer_encoder", ENC_NAMES[e]); break;
    case CHOIR_VIBEVOICE_LAYOUT_ORIGINAL: snprintf(out, cap, "model.%s_tokenizer.encoder", ENC_NAMES[e]); break;
    default: snprintf(out, cap, "%s_tokenizer.encoder", ENC_NAMES[e]); break;
    }
}

static int hf_names(const choir_vibevoice *m) {
    return m->layout == CHOIR_VIBEVOICE_LAYOUT_HF || m->layout == CHOIR_VIBEVOICE_LAYOUT_HF_FLAT;
}

static int bind_encoder(vv_loader *ld, int e, choir_err *err) {
    choir_vibevoice *m = ld->m;
    vv_encoder *en = &m->enc[e];
    en->d = e ? m->dims.semantic : m->dims.acoustic;
    const choir_vibevoice_enc_dims *d = &en->d;
    char pfx[96], base[256];
    enc_prefix(ld, e, pfx, sizeof pfx);
    int hf = hf_names(m), orig = m->layout == CHOIR_VIBEVOICE_LAYOUT_ORIGINAL;
    const char *mixer = hf ? "mixer.conv" : orig ? "mixer.conv.conv.conv" : "mixer.conv.conv";
    int rc;
    for (int s = 0; s < d->n_stages; s++) {
        int64_t C = (int64_t)d->n_filters << s, cin = s ? C / 2 : 1;
        int stride = s ? d->ratios[s - 1] : 1;
        en->channels[s] = (int)C;
        if (hf) snprintf(base, sizeof base, s ? "%s.conv_layers.%d.conv.conv" : "%s.stem.conv.conv", pfx, s - 1);
        else snprintf(base, sizeof base, orig ? "%s.downsample_layers.%d.0.conv.conv" : "%s.downsample_layers.%d.conv",
                      pfx, s);
        if ((rc = conv(ld, base, cin, C, stride, &en->down[s], err))) return rc;
        en->blocks[s] = keep(m, (size_t)(d->depths[s] + 1) * sizeof(vv_block));
        if (!en->blocks[s]) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        for (int b = 0; b < d->depths[s]; b++) {
            vv_block *bk = &en->blocks[s][b];
            char bp[256];
            if (!hf) snprintf(bp, sizeof bp, "%s.stages.%d.%d", pfx, s, b);
            else if (s == 0) snprintf(bp, sizeof bp, "%s.stem.stage.%d", pfx, b);
            else snprintf(bp, sizeof bp, "%s.conv_layers.%d.stage.%d", pfx, s - 1, b);
            int64_t F = C * d->ffn_mult;
            if ((rc = vec(ld, nm(ld, "%s.norm.weight", bp), C, &bk->norm, err)) ||
                (rc = vec(ld, nm(ld, "%s.ffn_norm.weight", bp), C, &bk->ffn_norm, err)) ||
                (rc = vec(ld, nm(ld, "%s.gamma", bp), C, &bk->gamma, err)) ||
                (rc = vec(ld, nm(ld, "%s.ffn_gamma", bp), C, &bk->ffn_gamma, err)) ||
                (rc = dwconv(ld, nm(ld, "%s.%s", bp, mixer), C, bk, err)))
                return rc;
            snprintf(base, sizeof base, "%s.ffn.linear1", bp);
            if ((rc = mat(ld, base, F, C, &bk->fc1, err)) ||
                (rc = vec(ld, nm(ld, "%s.bias", base), F, &bk->fc1_bias, err)))
                return rc;
            snprintf(base, sizeof base, "%s.ffn.linear2", bp);
            if ((rc = mat(ld, base, C, F, &bk->fc2, err)) ||
                (rc = vec(ld, nm(ld, "%s.bias", base), C, &bk->fc2_bias, err)))
                return rc;
        }
    }
    snprintf(base, sizeof base, orig ? "%s.head.conv.conv" : "%s.head.conv", pfx);
    return conv(ld, base, en->channels[d->n_stages - 1], d->vae_dim, 1, &en->head, err);
}

static int bind_connector(vv_loader *ld, int e, choir_err *err) {
    choir_vibevoice *m = ld->m;
    vv_connector *c = &m->conn[e];
    int64_t H = m->dims.lm.hidden, V = e ? m->dims.semantic.vae_dim : m->dims.acoustic.vae_dim;
    char fc1[160], fc2[160], norm[160];
    if (hf_names(m)) {
        const char *p = m->layout == CHOIR_VIBEVOICE_LAYOUT_HF ? "model." : "";
        snprintf(fc1, sizeof fc1, "%smulti_modal_projector.%s_linear_1", p, ENC_NAMES[e]);
        snprintf(fc2, sizeof fc2, "%smulti_modal_projector.%s_linear_2", p, ENC_NAMES[e]);
        snprintf(norm, sizeof norm, "%smulti_modal_projector.%s_norm.weight", p, ENC_NAMES[e]);
    } else {
        const char *p = m->layout == CHOIR_VIBEVOICE_LAYOUT_ORIGINAL ? "model." : "";
        snprintf(fc1, sizeof fc1, "%s%s_connector.fc1", p, ENC_NAMES[e]);
        snprintf(fc2, sizeof fc2, "%s%s_connector.fc2", p, ENC_NAMES[e]);
        snprintf(norm, sizeof norm, "%s%s_connector.norm.weight", p, ENC_NAMES[e]);
    }
    int rc;
    if ((rc = mat(ld, fc1, H, V, &c->fc1, err)) || (rc = vec(ld, nm(ld, "%s.bias", fc1), H, &c->fc1_bias, err)) ||
        (rc = mat(ld, fc2, H, H, &c->fc2, err)) || (rc = vec(ld, nm(ld, "%s.bias", fc2), H, &c->fc2_bias, err)))
        return rc;
    return vec(ld, norm, H, &c->norm, err);
}

static int bind_lm(vv_loader *ld, choir_err *err) {
    choir_vibevoice *m = ld->m;
    const choir_vibevoice_lm_dims *d = &m->dims.lm;
    int nested = m->layout == CHOIR_VIBEVOICE_LAYOUT_HF || m->layout == CHOIR_VIBEVOICE_LAYOUT_ORIGINAL;
    const char *lm = nested ? "model.language_model" : "language_model.model";
    const char *head = nested ? "lm_head" : "language_model.lm_head";
    int64_t H = d->hidden, q = (int64_t)d->n_heads * d->head_dim, kv = (int64_t)d->n_kv_heads * d->head_dim;
    char base[256];
    int rc;
    snprintf(base, sizeof base, "%s.embed_tokens", lm);
    if ((rc = mat(ld, base, d->vocab, H, &m->embed, err))) return rc;
    m->layers = keep(m, (size_t)d->n_layers * sizeof *m->layers);
    if (!m->layers) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
    for (int i = 0; i < d->n_layers; i++) {
        vv_layer *L = &m->layers[i];
        char p[200];
        snprintf(p, sizeof p, "%s.layers.%d", lm, i);
        const char *proj[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        choir_weight *w[7] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        int64_t rows[7] = {q, kv, kv, H, d->intermediate, d->intermediate, H};
        int64_t cols[7] = {H, H, H, q, H, H, d->intermediate};
        for (int k = 0; k < 7; k++) {
            snprintf(base, sizeof base, "%s.%s", p, proj[k]);
            if ((rc = mat(ld, base, rows[k], cols[k], w[k], err))) return rc;
        }
        if ((rc = vec(ld, nm(ld, "%s.self_attn.q_proj.bias", p), q, &L->q_bias, err)) ||
            (rc = vec(ld, nm(ld, "%s.self_attn.k_proj.bias", p), kv, &L->k_bias, err)) ||
            (rc = vec(ld, nm(ld, "%s.self_attn.v_proj.bias", p), kv, &L->v_bias, err)) ||
            (rc = vec(ld, nm(ld, "%s.input_layernorm.weight", p), H, &L->attn_norm, err)) ||
            (rc = vec(ld, nm(ld, "%s.post_attention_layernorm.weight", p), H, &L->mlp_norm, err)))
            return rc;
    }
    if ((rc = vec(ld, nm(ld, "%s.norm.weight", lm), H, &m->final_norm, err))) return rc;
    /* A tied model has no output projection of its own; a checkpoint may
     * still carry one, which then wins (it is what was trained). */
    snprintf(base, sizeof base, "%s.weight", head);
    if (d->tied && !ld->find(ld->ctx, base)) {
        m->lm_head = m->embed;
        return 0;
    }
    return mat(ld, head, d->vocab, H, &m->lm_head, err);
}

static int detect(vv_loader *ld, choir_err *err) {
    static const struct {
        const char *probe;
        choir_vibevoice_layout layout;
    } probes[] = {
        {"model.acoustic_tokenizer_encoder.stem.conv.conv.weight", CHOIR_VIBEVOICE_LAYOUT_HF},
        {"acoustic_tokenizer_encoder.stem.conv.conv.weight", CHOIR_VIBEVOICE_LAYOUT_HF_FLAT},
        {"model.acoustic_tokenizer.encoder.downsample_layers.0.0.conv.conv.weight", CHOIR_VIBEVOICE_LAYOUT_ORIGINAL},
        {"acoustic_tokenizer.encoder.downsample_layers.0.conv.weight", CHOIR_VIBEVOICE_LAYOUT_MLX},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        if (ld->find(ld->ctx, probes[i].probe)) {
            ld->m->layout = probes[i].layout;
            return 0;
        }
    return choir_err_set(err, CHOIR_EFORMAT, "vibevoice: no acoustic encoder stem in the checkpoint (looked for "
                         "transformers', the original and mlx-community's names, e.g. %s)", probes[0].probe);
}

choir_vibevoice *vv_model_new(choir_err *err) {
    choir_vibevoice *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
    return m;
}

/* Binds every tensor (host views and converted copies), then puts them on
 * the backend: `be`, or a CPU backend of the model's own. */
choir_vibevoice *vv_build(choir_vibevoice *m, choir_vibevoice_tensor_fn find, void *ctx,
                              const choir_vibevoice_dims *dims, choir_backend *be, choir_err *err) {
    m->dims = *dims;
    m->be = be;
    if (!m->be) {
        if (!(m->be = choir_backend_cpu(err))) {
            choir_vibevoice_free(m);
            return NULL;
        }
        m->owns_be = 1;
    }
    vv_loader ld = {.m = m, .find = find, .ctx = ctx};
    if (detect(&ld, err) || bind_encoder(&ld, 0, err) || bind_encoder(&ld, 1, err) || bind_connector(&ld, 0, err) ||
        bind_connector(&ld, 1, err) || bind_lm(&ld, err) || vv_bind_backend(m, err)) {
        choir_vibevoice_free(m);
        return NULL;
    }
    return m;
}

choir_vibevoice *choir_vibevoice_from_tensors_on(choir_vibevoice_tensor_fn find, void *ctx,
                                                 const choir_vibevoice_dims *dims, choir_backend *be,
                                                 choir_err *err) {
    choir_vibevoice *m = vv_model_new(err);
    return m ? vv_build(m, find, ctx, dims, be, err) : NULL;
}

choir_vibevoice *choir_vibevoice_from_tensors(choir_vibevoice_tensor_fn find, void *ctx,
                                              const choir_vibevoice_dims *dims, choir_err *err) {
    return choir_vibevoice_from_tensors_on(find, ctx, dims, NULL, err);
}

void choir_vibevoice_free(choir_vibevoice *m) {
    if (!m) return;
    choir_backend_weights_free(m->ws);
    if (m->owns_be) choir_backend_free(m->be);
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    if (m->release) m->release(m->release_ctx);
    choir_free(m);
}

const choir_vibevoice_dims *choir_vibevoice_get_dims(const choir_vibevoice *m) { return &m->dims; }
choir_vibevoice_layout choir_vibevoice_get_layout(const choir_vibevoice *m) { return m->layout; }
size_t choir_vibevoice_weight_bytes(const choir_vibevoice *m) { return m->bytes; }
choir_backend *choir_vibevoice_backend(const choir_vibevoice *m) { return m->be; }
int64_t choir_vibevoice_device_bytes(const choir_vibevoice *m) {
    return m->ws ? choir_backend_weights_bytes(m->ws) : 0;
}
int choir_vibevoice_lm_bits(const choir_vibevoice *m) { return m->lm_bits; }
