/* Loading Kokoro-82M weights from a safetensors file or an official .pth.
 *
 * Every tensor is looked up by its name in the `choir dev weights` naming
 * (group + key without `module.`); for a .pth the group's `module.` prefix is
 * tried too. The loader keeps the first error it meets and carries on as a
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


typedef struct loader {
    choir_kokoro *m;
    choir_err *err;
    int status;
    int q_bits, q_group;         /* from config.json "quantization", 0 when absent */
    const cJSON *q_config;       /* per-layer overrides, or NULL */
} loader;

static const choir_st_tensor *find(loader *ld, const char *name) {
    const choir_kokoro *m = ld->m;
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

static void *own(loader *ld, size_t bytes) {
    choir_kokoro *m = ld->m;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 256;
        void **p = choir_realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *p = choir_alloc(CHOIR_MEM_WEIGHTS, bytes);
    if (p) {
        m->owned[m->n_owned++] = p;
        m->weight_bytes += (int64_t)bytes;
    }
    return p;
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

static const char *prefix_name(char *buf, size_t cap, const char *prefix, const char *key) {
    snprintf(buf, cap, "%s.%s", prefix, key);
    return buf;
}

/* A weight-normalised layer: w = v * g / ||v|| with the norm over all axes but
 * axis 0 and no epsilon (torch's _weight_norm, dim 0). A file that already
 * holds the folded `weight` is taken as it is. */
static const float *get_weight_norm(loader *ld, const char *prefix, int64_t d0, int64_t rest) {
    char name[512];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (ld->status) return NULL;
    if (find(ld, name)) return get_f32(ld, name, d0 * rest);
    /* g and v are read once here; only the folded weight stays in use */
    int64_t counted = ld->m->weight_bytes;
    snprintf(name, sizeof name, "%s.weight_g", prefix);
    const float *g = get_f32(ld, name, d0);
    snprintf(name, sizeof name, "%s.weight_v", prefix);
    const float *v = get_f32(ld, name, d0 * rest);
    if (!g || !v) return NULL;
    int64_t copies = 0; /* g or v converted from another dtype: owned, keep them counted */
    if ((const void *)g != find(ld, prefix_name(name, sizeof name, prefix, "weight_g"))->data) copies += d0 * 4;
    if ((const void *)v != find(ld, prefix_name(name, sizeof name, prefix, "weight_v"))->data) copies += d0 * rest * 4;
    ld->m->weight_bytes = counted + copies;
    float *w = own(ld, (size_t)(d0 * rest) * sizeof(float));
    if (!w) {
        fail(ld, CHOIR_ENOMEM, "kokoro: out of memory folding %s", prefix);
        return NULL;
    }
    for (int64_t i = 0; i < d0; i++) {
        const float *vi = v + i * rest;
        double ss = 0;
        for (int64_t j = 0; j < rest; j++) ss += (double)vi[j] * vi[j];
        float scale = g[i] / (float)sqrt(ss);
        for (int64_t j = 0; j < rest; j++) w[i * rest + j] = vi[j] * scale;
    }
    return w;
}

static void get_conv_wn(loader *ld, kk_conv *c, const char *prefix, int cin, int cout, int k,
                        bool bias) {
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    c->w = get_weight_norm(ld, prefix, cout, (int64_t)cin * k);
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
    c->w = get_weight_norm(ld, prefix, cin, (int64_t)cout_per_group * k);
    snprintf(name, sizeof name, "%s.bias", prefix);
    c->b = get_f32(ld, name, cout);
}

static void get_conv_plain(loader *ld, kk_conv *c, const char *prefix, int cin, int cout, int k) {
    char name[512];
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    snprintf(name, sizeof name, "%s.weight", prefix);
    c->w = get_f32(ld, name, (int64_t)cout * cin * k);
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
    choir_kokoro *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory");
        return NULL;
    }
    if (kk_load_vocab(m, config, err) != 0) goto fail;
    if (ends_with(weights, ".pth") || ends_with(weights, ".pt")) {
        m->pth = choir_pth_open(weights, err);
        if (!m->pth) goto fail;
    } else {
        m->st = choir_st_open(weights, err);
        if (!m->st) goto fail;
    }
    loader ld = {.m = m, .err = err};
    load_bert(&ld, m);
    load_predictor(&ld, m);
    load_text_encoder(&ld, m);
    load_decoder(&ld, m);
    if (ld.status) {
        choir_err_prefix(err, "%s", weights);
        goto fail;
    }
    return m;
fail:
    choir_kokoro_free(m);
    return NULL;
}

void choir_kokoro_free(choir_kokoro *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    choir_free(m->vocab);
    choir_st_close(m->st);
    choir_pth_close(m->pth);
    choir_free(m);
}

int64_t choir_kokoro_weight_bytes(const choir_kokoro *m) { return m ? m->weight_bytes : 0; }
