/* Loading Kokoro-82M weights from a safetensors file or an official .pth.
 *
 * Every tensor is looked up by its name in the `choir dev weights` naming
 * (group + key without `module.`); for a .pth the group's `module.` prefix is
 * tried too, and a safetensors file in the mlx-audio layout (spec §9.2,
 * kokoro_mlx.h) is read through its names and its [d0, k, in] convolution
 * weights. The loader keeps the first error it meets and carries on as a
 * no-op afterwards, so that the long list of tensors below reads as a plain
 * table; the result is checked once at the end. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/log.h"
#include "choir/pth.h"
#include "choir/quant.h"
#include "models/kokoro/kokoro_internal.h"
#include "choir/kokoro_mlx.h"


typedef struct loader {
    choir_kokoro *m;
    choir_err *err;
    int status;
    bool mlx;                       /* names and conv layout of mlx-audio (spec §9.2) */
    const choir_quant_config *qc;   /* config.json's "quantization" block, or NULL */
} loader;

static const choir_st_tensor *find(loader *ld, const char *name) {
    const choir_kokoro *m = ld->m;
    if (m->st && ld->mlx) {
        /* mlx-audio's name first; a tensor it left under the native name
         * (a partly sanitized file) is found as well */
        char alt[512];
        const choir_st_tensor *t = NULL;
        if (choir_kokoro_mlx_name_of(name, alt, sizeof alt)) t = choir_st_find(m->st, alt);
        return t ? t : choir_st_find(m->st, name);
    }
    if (m->st) return choir_st_find(m->st, name);
    if (m->pth) {
        const choir_st_tensor *t = choir_pth_find(m->pth, name);
        if (t) return t;
        /* kokoro-v1_0.pth nests each group's DataParallel state dict: group.module.key */
        const char *dot = strchr(name, '.');
        if (!dot) return NULL;
        char alt[512];
        snprintf(alt, sizeof alt, "%.*s.module.%s", (int)(dot - name), name, dot + 1);
        return choir_pth_find(m->pth, alt);
    }
    return NULL;
}

/* Makes the model own p (bytes long, from choir_alloc); frees it and returns
 * NULL when the list cannot grow. */
static void *adopt(loader *ld, void *p, size_t bytes) {
    choir_kokoro *m = ld->m;
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 256;
        void **list = choir_realloc(m->owned, (size_t)cap * sizeof *list);
        if (!list) {
            choir_free(p);
            return NULL;
        }
        m->owned = list;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    m->weight_bytes += (int64_t)bytes;
    return p;
}

static void *own(loader *ld, size_t bytes) {
    return adopt(ld, choir_alloc(CHOIR_MEM_WEIGHTS, bytes), bytes);
}

static int fail(loader *ld, int code, const char *fmt, const char *name) {
    if (ld->status == 0) {
        ld->status = code;
        choir_err_set(ld->err, code, fmt, name);
    }
    return code;
}

/* The tensor `name` with `numel` elements, or NULL (error recorded) */
static const choir_st_tensor *need(loader *ld, const char *name, int64_t numel) {
    if (ld->status) return NULL;
    const choir_st_tensor *t = find(ld, name);
    if (!t) {
        char mlx_name[512], both[1100];
        if (ld->mlx && choir_kokoro_mlx_name_of(name, mlx_name, sizeof mlx_name) && strcmp(mlx_name, name)) {
            snprintf(both, sizeof both, "%s (native name %s)", mlx_name, name);
            name = both;
        }
        fail(ld, CHOIR_ENOTFOUND, "kokoro: tensor %s is missing", name);
        return NULL;
    }
    if (numel >= 0 && t->numel != numel) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s has %lld elements, expected %lld", name,
                 (long long)t->numel, (long long)numel);
        fail(ld, CHOIR_ESHAPE, "kokoro: %s", msg);
        return NULL;
    }
    return t;
}

/* A tensor as f32: pointed into when stored as aligned f32, else converted. */
static const float *f32_of(loader *ld, const choir_st_tensor *t) {
    if (!t) return NULL;
    if (t->dtype == CHOIR_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        ld->m->weight_bytes += (int64_t)t->nbytes;
        return t->data;
    }
    float *dst = own(ld, (size_t)t->numel * sizeof(float));
    if (!dst) {
        fail(ld, CHOIR_ENOMEM, "kokoro: out of memory converting %s", t->name);
        return NULL;
    }
    if (t->dtype == CHOIR_DTYPE_F32) {
        memcpy(dst, t->data, (size_t)t->numel * sizeof(float));
    } else if (choir_to_f32_n(t->dtype, t->data, dst, t->numel) != 0) {
        fail(ld, CHOIR_EUNSUPPORTED, "kokoro: tensor %s has a dtype that is not a float", t->name);
        return NULL;
    }
    return dst;
}

static const float *get_f32(loader *ld, const char *name, int64_t numel) {
    return f32_of(ld, need(ld, name, numel));
}

static const float *opt_f32(loader *ld, const char *name, int64_t numel) {
    if (ld->status || !find(ld, name)) return NULL;
    return get_f32(ld, name, numel);
}

/* The stored weight `name` of a convolution whose native layout is
 * [d0, inner, k]. An mlx-audio file stores it [d0, k, inner]; *swap is set
 * when the values must be re-ordered (not for k or inner of 1, where both
 * layouts are the same bytes). When inner == k the two layouts cannot be
 * told apart and the file's layout is assumed. */
static const choir_st_tensor *need_conv(loader *ld, const char *name, int64_t d0, int64_t inner,
                                        int k, bool *swap) {
    *swap = false;
    const choir_st_tensor *t = need(ld, name, d0 * inner * k);
    if (!t || !ld->mlx || t->ndim != 3) return t;
    if (t->shape[0] == d0 && t->shape[1] == k && t->shape[2] == inner) {
        *swap = k > 1 && inner > 1;
        return t;
    }
    if (t->shape[0] == d0 && t->shape[1] == inner && t->shape[2] == k) return t;
    char msg[700];
    snprintf(msg, sizeof msg, "%s has shape [%lld, %lld, %lld], expected [%lld, %lld, %d] or "
             "mlx-audio's [%lld, %d, %lld]", name, (long long)t->shape[0], (long long)t->shape[1],
             (long long)t->shape[2], (long long)d0, (long long)inner, k, (long long)d0, k,
             (long long)inner);
    fail(ld, CHOIR_ESHAPE, "kokoro: %s", msg);
    return NULL;
}

/* The values of t as f32 for reading once: a pointer into the mapping when t
 * is aligned f32 and needs no re-ordering (*tmp = NULL), else a buffer the
 * caller frees (*tmp). swap: t is [d0, k, inner], returned as [d0, inner, k]. */
static const float *read_f32(loader *ld, const choir_st_tensor *t, bool swap, int64_t d0,
                             int64_t inner, int k, float **tmp) {
    *tmp = NULL;
    if (!t) return NULL;
    if (!swap && t->dtype == CHOIR_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0)
        return t->data;
    size_t bytes = (size_t)t->numel * sizeof(float);
    float *v = choir_alloc(CHOIR_MEM_WEIGHTS, bytes);
    if (!v) {
        fail(ld, CHOIR_ENOMEM, "kokoro: out of memory converting %s", t->name);
        return NULL;
    }
    if (t->dtype == CHOIR_DTYPE_F32) {
        memcpy(v, t->data, bytes);
    } else if (choir_to_f32_n(t->dtype, t->data, v, t->numel) != 0) {
        choir_free(v);
        fail(ld, CHOIR_EUNSUPPORTED, "kokoro: tensor %s has a dtype that is not a float", t->name);
        return NULL;
    }
    if (swap) {
        float *native = choir_alloc(CHOIR_MEM_WEIGHTS, bytes);
        if (!native) {
            choir_free(v);
            fail(ld, CHOIR_ENOMEM, "kokoro: out of memory converting %s", t->name);
            return NULL;
        }
        choir_kokoro_swap_last_axes(v, d0, k, inner, sizeof(float), native);
        choir_free(v);
        v = native;
    }
    *tmp = v;
    return v;
}

/* A convolution weight kept for the model's lifetime, native layout. */
static const float *get_conv_weight(loader *ld, const char *name, int64_t d0, int64_t inner, int k) {
    bool swap;
    const choir_st_tensor *t = need_conv(ld, name, d0, inner, k, &swap);
    if (!swap) return f32_of(ld, t);
    float *tmp;
    const float *v = read_f32(ld, t, true, d0, inner, k, &tmp);
    if (v && !adopt(ld, tmp, (size_t)t->numel * sizeof(float))) {
        fail(ld, CHOIR_ENOMEM, "kokoro: out of memory converting %s", t->name);
        return NULL;
    }
    return v;
}

/* A weight-normalised layer: w = v * g / ||v|| with the norm over all axes but
 * axis 0 and no epsilon (torch's _weight_norm, dim 0). A file that already
 * holds the folded `weight` is taken as it is. The native layout of v and w
 * is [d0, inner, k]. */
static const float *get_weight_norm(loader *ld, const char *prefix, int64_t d0, int64_t inner,
                                    int k) {
    char name[512];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (ld->status) return NULL;
    if (find(ld, name)) return get_conv_weight(ld, name, d0, inner, k);
    /* g and v are read once here; only the folded weight stays */
    bool swap;
    float *g_tmp = NULL, *v_tmp = NULL;
    snprintf(name, sizeof name, "%s.weight_g", prefix);
    const float *g = read_f32(ld, need(ld, name, d0), false, 0, 0, 0, &g_tmp);
    snprintf(name, sizeof name, "%s.weight_v", prefix);
    const choir_st_tensor *vt = need_conv(ld, name, d0, inner, k, &swap);
    const float *v = g ? read_f32(ld, vt, swap, d0, inner, k, &v_tmp) : NULL;
    int64_t rest = inner * k;
    float *w = v ? own(ld, (size_t)(d0 * rest) * sizeof(float)) : NULL;
    if (v && !w) fail(ld, CHOIR_ENOMEM, "kokoro: out of memory folding %s", prefix);
    for (int64_t i = 0; w && i < d0; i++) {
        const float *vi = v + i * rest;
        double ss = 0;
        for (int64_t j = 0; j < rest; j++) ss += (double)vi[j] * vi[j];
        float scale = g[i] / (float)sqrt(ss);
        for (int64_t j = 0; j < rest; j++) w[i * rest + j] = vi[j] * scale;
    }
    choir_free(g_tmp);
    choir_free(v_tmp);
    return w;
}

static void get_conv_wn(loader *ld, kk_conv *c, const char *prefix, int cin, int cout, int k,
                        bool bias) {
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    c->w = get_weight_norm(ld, prefix, cout, cin, k);
    c->b = NULL;
    if (bias) {
        char name[512];
        snprintf(name, sizeof name, "%s.bias", prefix);
        c->b = get_f32(ld, name, cout);
    }
}

/* ConvTranspose1d: weight [cin, cout/groups, k], weight norm over axis 0 = cin */
static void get_convt_wn(loader *ld, kk_conv *c, const char *prefix, int cin, int cout_per_group,
                         int cout, int k) {
    char name[512];
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    c->w = get_weight_norm(ld, prefix, cin, cout_per_group, k);
    snprintf(name, sizeof name, "%s.bias", prefix);
    c->b = get_f32(ld, name, cout);
}

static void get_conv_plain(loader *ld, kk_conv *c, const char *prefix, int cin, int cout, int k) {
    char name[512];
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    snprintf(name, sizeof name, "%s.weight", prefix);
    c->w = get_conv_weight(ld, name, cout, cin, k);
    snprintf(name, sizeof name, "%s.bias", prefix);
    c->b = get_f32(ld, name, cout);
}

/* A matrix [rows, cols] in its stored form: float dtypes as they are, MLX
 * quantized (`weight` uint32 + `scales` + `biases`) when scales are present. */
static void get_matrix(loader *ld, choir_weight *w, const char *prefix, int64_t rows,
                       int64_t cols) {
    char name[512];
    memset(w, 0, sizeof *w);
    if (ld->status) return;
    snprintf(name, sizeof name, "%s.scales", prefix);
    const choir_st_tensor *scales = find(ld, name);
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (scales) {
        snprintf(name, sizeof name, "%s.biases", prefix);
        const choir_st_tensor *biases = need(ld, name, scales->numel);
        snprintf(name, sizeof name, "%s.weight", prefix);
        const choir_st_tensor *q = need(ld, name, -1);
        if (!q || !biases) return;
        int64_t groups = scales->numel / rows;
        int group = groups > 0 ? (int)(cols / groups) : 0;
        int bits = (int)(q->numel * 32 / (rows * cols));
        if (q->dtype != CHOIR_DTYPE_U32 || groups * rows != scales->numel ||
            !choir_quant_supported(bits, group) || (int64_t)group * groups != cols) {
            fail(ld, CHOIR_EFORMAT, "kokoro: quantized layer %s has inconsistent shapes", prefix);
            return;
        }
        /* The shapes say what the layer is; config.json must not say otherwise. */
        int cfg_bits, cfg_group;
        if (ld->qc && choir_quant_config_layer(ld->qc, prefix, &cfg_bits, &cfg_group) &&
            (cfg_bits != bits || cfg_group != group)) {
            char msg[700];
            snprintf(msg, sizeof msg, "layer %s is stored %d-bit with group size %d, but "
                     "config.json's quantization says %d-bit, group size %d", prefix, bits,
                     group, cfg_bits, cfg_group);
            fail(ld, CHOIR_EFORMAT, "kokoro: %s", msg);
            return;
        }
        w->kind = CHOIR_WEIGHT_QUANT;
        w->rows = rows;
        w->cols = cols;
        w->data = q->data;
        w->scales = scales->data;
        w->biases = biases->data;
        w->sb_dtype = scales->dtype;
        w->bits = bits;
        w->group_size = group;
        ld->m->weight_bytes += (int64_t)(q->nbytes + scales->nbytes + biases->nbytes);
        return;
    }
    const choir_st_tensor *t = need(ld, name, rows * cols);
    if (!t) return;
    w->rows = rows;
    w->cols = cols;
    size_t align = choir_dtype_size(t->dtype);
    if ((t->dtype == CHOIR_DTYPE_F32 || t->dtype == CHOIR_DTYPE_F16 ||
         t->dtype == CHOIR_DTYPE_BF16) && ((uintptr_t)t->data % align) == 0) {
        w->kind = t->dtype == CHOIR_DTYPE_F32   ? CHOIR_WEIGHT_F32
                  : t->dtype == CHOIR_DTYPE_F16 ? CHOIR_WEIGHT_F16
                                                : CHOIR_WEIGHT_BF16;
        w->data = t->data;
        ld->m->weight_bytes += (int64_t)t->nbytes;
        return;
    }
    w->kind = CHOIR_WEIGHT_F32;
    w->data = f32_of(ld, t);
}

static void get_linear(loader *ld, kk_linear *l, const char *prefix, int64_t out, int64_t in) {
    char name[512];
    get_matrix(ld, &l->w, prefix, out, in);
    snprintf(name, sizeof name, "%s.bias", prefix);
    l->b = get_f32(ld, name, out);
}

static void get_lstm(loader *ld, kk_lstm *l, const char *prefix, int in, int h) {
    static const char *const sfx[2] = {"", "_reverse"};
    char name[512];
    l->in = in;
    l->h = h;
    for (int d = 0; d < 2; d++) {
        snprintf(name, sizeof name, "%s.weight_ih_l0%s", prefix, sfx[d]);
        l->w_ih[d] = get_f32(ld, name, 4LL * h * in);
        snprintf(name, sizeof name, "%s.weight_hh_l0%s", prefix, sfx[d]);
        l->w_hh[d] = get_f32(ld, name, 4LL * h * h);
        snprintf(name, sizeof name, "%s.bias_ih_l0%s", prefix, sfx[d]);
        l->b_ih[d] = get_f32(ld, name, 4LL * h);
        snprintf(name, sizeof name, "%s.bias_hh_l0%s", prefix, sfx[d]);
        l->b_hh[d] = get_f32(ld, name, 4LL * h);
    }
}

/* AdaIN1d / AdaLayerNorm; the instance norm's affine is applied only when the
 * file holds it (the trained checkpoint may not). */
static void get_adain(loader *ld, kk_adain *a, const char *prefix, int C) {
    char name[512];
    a->C = C;
    snprintf(name, sizeof name, "%s.fc", prefix);
    get_linear(ld, &a->fc, name, 2LL * C, KK_STYLE);
    snprintf(name, sizeof name, "%s.norm.weight", prefix);
    a->norm_w = opt_f32(ld, name, C);
    snprintf(name, sizeof name, "%s.norm.bias", prefix);
    a->norm_b = opt_f32(ld, name, C);
}

static void get_resblk(loader *ld, kk_resblk *b, const char *prefix, int cin, int cout,
                       bool upsample) {
    char name[512];
    b->cin = cin;
    b->cout = cout;
    b->upsample = upsample;
    snprintf(name, sizeof name, "%s.norm1", prefix);
    get_adain(ld, &b->norm1, name, cin);
    snprintf(name, sizeof name, "%s.norm2", prefix);
    get_adain(ld, &b->norm2, name, cout);
    snprintf(name, sizeof name, "%s.conv1", prefix);
    get_conv_wn(ld, &b->conv1, name, cin, cout, 3, true);
    snprintf(name, sizeof name, "%s.conv2", prefix);
    get_conv_wn(ld, &b->conv2, name, cout, cout, 3, true);
    memset(&b->conv1x1, 0, sizeof b->conv1x1);
    if (cin != cout) {
        snprintf(name, sizeof name, "%s.conv1x1", prefix);
        get_conv_wn(ld, &b->conv1x1, name, cin, cout, 1, false);
    }
    memset(&b->pool, 0, sizeof b->pool);
    if (upsample) {
        snprintf(name, sizeof name, "%s.pool", prefix);
        get_convt_wn(ld, &b->pool, name, cin, 1, cin, 3);
    }
}

static void get_snakeblock(loader *ld, kk_snakeblock *b, const char *prefix, int C, int k) {
    static const int dil[3] = {1, 3, 5};
    char name[512];
    (void)dil;
    b->C = C;
    b->k = k;
    for (int j = 0; j < 3; j++) {
        snprintf(name, sizeof name, "%s.convs1.%d", prefix, j);
        get_conv_wn(ld, &b->convs1[j], name, C, C, k, true);
        snprintf(name, sizeof name, "%s.convs2.%d", prefix, j);
        get_conv_wn(ld, &b->convs2[j], name, C, C, k, true);
        snprintf(name, sizeof name, "%s.adain1.%d", prefix, j);
        get_adain(ld, &b->adain1[j], name, C);
        snprintf(name, sizeof name, "%s.adain2.%d", prefix, j);
        get_adain(ld, &b->adain2[j], name, C);
        snprintf(name, sizeof name, "%s.alpha1.%d", prefix, j);
        b->alpha1[j] = get_f32(ld, name, C);
        snprintf(name, sizeof name, "%s.alpha2.%d", prefix, j);
        b->alpha2[j] = get_f32(ld, name, C);
    }
}

static void get_embedding(loader *ld, kk_embedding *e, const char *prefix, int64_t rows,
                          int64_t dim) {
    get_matrix(ld, &e->w, prefix, rows, dim);
}

static void load_bert(loader *ld, choir_kokoro *m) {
    const char *L = "bert.encoder.albert_layer_groups.0.albert_layers.0";
    char name[512];
    get_embedding(ld, &m->word_emb, "bert.embeddings.word_embeddings", KK_NTOKEN, KK_BERT_EMB);
    get_embedding(ld, &m->pos_emb, "bert.embeddings.position_embeddings", 512, KK_BERT_EMB);
    get_embedding(ld, &m->type_emb, "bert.embeddings.token_type_embeddings", 2, KK_BERT_EMB);
    m->emb_ln_w = get_f32(ld, "bert.embeddings.LayerNorm.weight", KK_BERT_EMB);
    m->emb_ln_b = get_f32(ld, "bert.embeddings.LayerNorm.bias", KK_BERT_EMB);
    get_linear(ld, &m->map_in, "bert.encoder.embedding_hidden_mapping_in", KK_BERT, KK_BERT_EMB);
    snprintf(name, sizeof name, "%s.attention.query", L);
    get_linear(ld, &m->q, name, KK_BERT, KK_BERT);
    snprintf(name, sizeof name, "%s.attention.key", L);
    get_linear(ld, &m->k, name, KK_BERT, KK_BERT);
    snprintf(name, sizeof name, "%s.attention.value", L);
    get_linear(ld, &m->v, name, KK_BERT, KK_BERT);
    snprintf(name, sizeof name, "%s.attention.dense", L);
    get_linear(ld, &m->dense, name, KK_BERT, KK_BERT);
    snprintf(name, sizeof name, "%s.attention.LayerNorm.weight", L);
    m->att_ln_w = get_f32(ld, name, KK_BERT);
    snprintf(name, sizeof name, "%s.attention.LayerNorm.bias", L);
    m->att_ln_b = get_f32(ld, name, KK_BERT);
    snprintf(name, sizeof name, "%s.ffn", L);
    get_linear(ld, &m->ffn, name, KK_BERT_FF, KK_BERT);
    snprintf(name, sizeof name, "%s.ffn_output", L);
    get_linear(ld, &m->ffn_out, name, KK_BERT, KK_BERT_FF);
    snprintf(name, sizeof name, "%s.full_layer_layer_norm.weight", L);
    m->full_ln_w = get_f32(ld, name, KK_BERT);
    snprintf(name, sizeof name, "%s.full_layer_layer_norm.bias", L);
    m->full_ln_b = get_f32(ld, name, KK_BERT);
    get_linear(ld, &m->bert_encoder, "bert_encoder", KK_HIDDEN, KK_BERT);
}

static void load_predictor(loader *ld, choir_kokoro *m) {
    char name[512];
    for (int l = 0; l < 3; l++) {
        snprintf(name, sizeof name, "predictor.text_encoder.lstms.%d", 2 * l);
        get_lstm(ld, &m->dur_lstm[l], name, KK_HIDDEN + KK_STYLE, KK_HIDDEN / 2);
        snprintf(name, sizeof name, "predictor.text_encoder.lstms.%d", 2 * l + 1);
        get_adain(ld, &m->dur_norm[l], name, KK_HIDDEN);
    }
    get_lstm(ld, &m->pred_lstm, "predictor.lstm", KK_HIDDEN + KK_STYLE, KK_HIDDEN / 2);
    get_linear(ld, &m->dur_proj, "predictor.duration_proj.linear_layer", KK_MAX_DUR, KK_HIDDEN);
    get_lstm(ld, &m->shared, "predictor.shared", KK_HIDDEN + KK_STYLE, KK_HIDDEN / 2);
    static const int cin[3] = {512, 512, 256}, cout[3] = {512, 256, 256};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "predictor.F0.%d", i);
        get_resblk(ld, &m->f0_blk[i], name, cin[i], cout[i], i == 1);
        snprintf(name, sizeof name, "predictor.N.%d", i);
        get_resblk(ld, &m->n_blk[i], name, cin[i], cout[i], i == 1);
    }
    get_conv_plain(ld, &m->f0_proj, "predictor.F0_proj", 256, 1, 1);
    get_conv_plain(ld, &m->n_proj, "predictor.N_proj", 256, 1, 1);
}

static void load_text_encoder(loader *ld, choir_kokoro *m) {
    char name[512];
    get_embedding(ld, &m->te_emb, "text_encoder.embedding", KK_NTOKEN, KK_HIDDEN);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "text_encoder.cnn.%d.0", i);
        get_conv_wn(ld, &m->te_cnn[i], name, KK_HIDDEN, KK_HIDDEN, 5, true);
        snprintf(name, sizeof name, "text_encoder.cnn.%d.1.gamma", i);
        m->te_ln_g[i] = get_f32(ld, name, KK_HIDDEN);
        snprintf(name, sizeof name, "text_encoder.cnn.%d.1.beta", i);
        m->te_ln_b[i] = get_f32(ld, name, KK_HIDDEN);
    }
    get_lstm(ld, &m->te_lstm, "text_encoder.lstm", KK_HIDDEN, KK_HIDDEN / 2);
}

static void load_decoder(loader *ld, choir_kokoro *m) {
    char name[512];
    get_conv_wn(ld, &m->f0_conv, "decoder.F0_conv", 1, 1, 3, true);
    get_conv_wn(ld, &m->n_conv, "decoder.N_conv", 1, 1, 3, true);
    get_conv_wn(ld, &m->asr_res, "decoder.asr_res.0", KK_HIDDEN, 64, 1, true);
    get_resblk(ld, &m->encode, "decoder.encode", KK_HIDDEN + 2, 1024, false);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "decoder.decode.%d", i);
        get_resblk(ld, &m->decode[i], name, 1024 + 64 + 2, i < 3 ? 1024 : 512, i == 3);
    }
    const char *G = "decoder.generator";
    snprintf(name, sizeof name, "%s.m_source.l_linear", G);
    get_linear(ld, &m->l_linear, name, 1, KK_HARMONICS);
    snprintf(name, sizeof name, "%s.noise_convs.0", G);
    get_conv_plain(ld, &m->noise_convs[0], name, 2 * KK_NBINS, 256, 12);
    snprintf(name, sizeof name, "%s.noise_convs.1", G);
    get_conv_plain(ld, &m->noise_convs[1], name, 2 * KK_NBINS, 128, 1);
    snprintf(name, sizeof name, "%s.noise_res.0", G);
    get_snakeblock(ld, &m->noise_res[0], name, 256, 7);
    snprintf(name, sizeof name, "%s.noise_res.1", G);
    get_snakeblock(ld, &m->noise_res[1], name, 128, 11);
    snprintf(name, sizeof name, "%s.ups.0", G);
    get_convt_wn(ld, &m->ups[0], name, 512, 256, 256, 20);
    snprintf(name, sizeof name, "%s.ups.1", G);
    get_convt_wn(ld, &m->ups[1], name, 256, 128, 128, 12);
    static const int ks[3] = {3, 7, 11};
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "%s.resblocks.%d", G, i);
        get_snakeblock(ld, &m->resblocks[i], name, i < 3 ? 256 : 128, ks[i % 3]);
    }
    snprintf(name, sizeof name, "%s.conv_post", G);
    get_conv_wn(ld, &m->conv_post, name, 128, 2 * KK_NBINS, 7, true);
}

/* config.json's vocab: one code point per symbol -> id */
int kk_load_vocab(choir_kokoro *m, const char *config_path, choir_err *err) {
    cJSON *cfg = choir_json_load(config_path, err);
    if (!cfg) return err ? err->code : CHOIR_EIO;
    int rc = 0;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cfg, "vocab");
    if (!cJSON_IsObject(vocab)) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: no \"vocab\" object", config_path);
        goto done;
    }
    m->vocab = choir_calloc(CHOIR_MEM_WEIGHTS, 65536, 1);
    if (!m->vocab) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the vocabulary");
        goto done;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        const unsigned char *s = (const unsigned char *)it->string;
        uint32_t cp;
        int len;
        if (s[0] < 0x80) cp = s[0], len = 1;
        else if ((s[0] & 0xE0) == 0xC0) cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F), len = 2;
        else if ((s[0] & 0xF0) == 0xE0)
            cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F), len = 3;
        else continue;
        int id = it->valueint;
        if (s[len] != 0 || id <= 0 || id >= KK_NTOKEN) {
            CHOIR_LOGW("%s: vocab entry \"%s\" -> %d ignored", config_path, it->string, id);
            continue;
        }
        m->vocab[cp] = (uint8_t)id;
    }
done:
    cJSON_Delete(cfg);
    return rc;
}

static bool is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Picks the weights file and config.json for `path` (a directory or a file). */
static int locate(const char *path, char *weights, char *config, size_t cap, choir_err *err) {
    struct stat s;
    if (stat(path, &s) != 0) return choir_err_set(err, CHOIR_ENOTFOUND, "kokoro: %s not found", path);
    if (S_ISDIR(s.st_mode)) {
        static const char *const names[] = {"model.safetensors", "model.safetensors.index.json",
                                            "kokoro-v1_0.safetensors", "kokoro-v1_0.pth"};
        weights[0] = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !weights[0]; i++) {
            snprintf(weights, cap, "%s/%s", path, names[i]);
            if (!is_file(weights)) weights[0] = 0;
        }
        if (!weights[0])
            return choir_err_set(err, CHOIR_ENOTFOUND,
                                 "kokoro: %s holds no model.safetensors, kokoro-v1_0.safetensors "
                                 "or kokoro-v1_0.pth", path);
        snprintf(config, cap, "%s/config.json", path);
    } else {
        snprintf(weights, cap, "%s", path);
        const char *slash = strrchr(path, '/');
        if (slash) snprintf(config, cap, "%.*s/config.json", (int)(slash - path), path);
        else snprintf(config, cap, "config.json");
    }
    if (!is_file(config))
        return choir_err_set(err, CHOIR_ENOTFOUND, "kokoro: %s not found (it holds the vocabulary)",
                             config);
    return 0;
}

choir_kokoro *choir_kokoro_load(const char *path, choir_err *err) {
    char weights[1024], config[1024];
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "kokoro: no model path");
        return NULL;
    }
    if (locate(path, weights, config, sizeof weights, err) != 0) return NULL;
    cJSON *cfg = NULL;
    choir_quant_config *qc = NULL;
    choir_kokoro *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory");
        return NULL;
    }
    if (kk_load_vocab(m, config, err) != 0) goto fail;
    loader ld = {.m = m, .err = err};
    if (ends_with(weights, ".pth") || ends_with(weights, ".pt")) {
        m->pth = choir_pth_open(weights, err);
        if (!m->pth) goto fail;
    } else {
        m->st = choir_st_open(weights, err);
        if (!m->st) goto fail;
        for (int i = 0; i < choir_st_count(m->st) && !ld.mlx; i++)
            ld.mlx = choir_kokoro_mlx_marks_layout(choir_st_at(m->st, i)->name);
        if (ld.mlx) CHOIR_LOGI("kokoro: %s is in the mlx-audio layout", weights);
        if (!(cfg = choir_json_load(config, err))) goto fail;
        if (!(qc = choir_quant_config_from_json(cfg, err))) {
            choir_err_prefix(err, "%s", config);
            goto fail;
        }
        ld.qc = qc;
    }
    load_bert(&ld, m);
    load_predictor(&ld, m);
    load_text_encoder(&ld, m);
    load_decoder(&ld, m);
    if (ld.status) {
        choir_err_prefix(err, "%s", weights);
        goto fail;
    }
    choir_backend *be = choir_backend_cpu(err);
    if (!be || !(m->host = kk_exec_create(m, be, true, err))) goto fail;
    choir_quant_config_free(qc);
    cJSON_Delete(cfg);
    return m;
fail:
    choir_quant_config_free(qc);
    cJSON_Delete(cfg);
    choir_kokoro_free(m);
    return NULL;
}

void choir_kokoro_free(choir_kokoro *m) {
    if (!m) return;
    kk_exec_free(m->host);
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    choir_free(m->vocab);
    choir_st_close(m->st);
    choir_pth_close(m->pth);
    choir_free(m);
}

int64_t choir_kokoro_weight_bytes(const choir_kokoro *m) { return m ? m->weight_bytes : 0; }
