/* Loading Whisper checkpoints: config, layout detection, weight binding.
 *
 * Two naming schemes reach us. Hugging Face transformers writes
 * `model.encoder.layers.E.self_attn.q_proj.weight` and leaves the output
 * projection tied (absent). openai / MLX-community checkpoints write
 * `encoder.blocks.E.attn.query.weight`, MLX stores Conv1d weights as
 * [out, kernel, in] and may omit the encoder's sinusoidal positions (they are
 * recomputed) and quantize linears as weight/scales/biases. Rather than
 * renaming tensors, each layout is a table of name parts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/quant.h"
#include "choir/whisper_words.h"
#include "models/whisper/whisper_internal.h"

typedef struct wh_layout {
    const char *enc, *dec, *layers;
    const char *self_attn, *cross_attn, *q, *k, *v, *o;
    const char *attn_ln, *cross_ln, *fc1, *fc1_alt, *fc2, *fc2_alt, *mlp_ln;
    const char *enc_ln, *dec_ln, *tok_emb, *dec_pos, *enc_pos;
} wh_layout;

static const wh_layout LAYOUT_HF = {
    "model.encoder", "model.decoder", "layers", "self_attn", "encoder_attn", "q_proj", "k_proj",
    "v_proj", "out_proj", "self_attn_layer_norm", "encoder_attn_layer_norm", "fc1", "fc1", "fc2",
    "fc2", "final_layer_norm", "layer_norm", "layer_norm", "embed_tokens.weight",
    "embed_positions.weight", "embed_positions.weight"};

static const wh_layout LAYOUT_OPENAI = {
    "encoder", "decoder", "blocks", "attn", "cross_attn", "query", "key", "value", "out",
    "attn_ln", "cross_attn_ln", "mlp1", "mlp.0", "mlp2", "mlp.2", "mlp_ln", "ln_post", "ln",
    "token_embedding.weight", "positional_embedding", "positional_embedding"};

static const char *const LANG_CODES[CHOIR_WHISPER_MAX_LANGS] = {
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
    "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
    "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
    "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
    "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
    "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"};

const char *choir_whisper_lang_code(int i) {
    return (i >= 0 && i < CHOIR_WHISPER_MAX_LANGS) ? LANG_CODES[i] : NULL;
}

int choir_whisper_lang_index(const char *code) {
    if (!code) return -1;
    for (int i = 0; i < CHOIR_WHISPER_MAX_LANGS; i++)
        if (strcmp(LANG_CODES[i], code) == 0) return i;
    return -1;
}

void choir_whisper_specials_from_vocab(int n_vocab, choir_whisper_specials *sp) {
    memset(sp, 0, sizeof *sp);
    sp->multilingual = n_vocab >= 51865;
    sp->num_languages = n_vocab - 51765 - sp->multilingual;
    sp->eot = 50256 + sp->multilingual;
    sp->sot = sp->eot + 1;
    sp->lang0 = sp->sot + 1;
    sp->translate = sp->sot + 1 + sp->num_languages;
    sp->transcribe = sp->translate + 1;
    sp->sot_lm = sp->translate + 2;
    sp->sot_prev = sp->translate + 3;
    sp->no_speech = sp->translate + 4;
    sp->no_timestamps = sp->translate + 5;
    sp->timestamp_begin = sp->translate + 6;
}

int choir_whisper_read_config(const char *config_path, choir_whisper_dims *d, choir_err *err) {
    cJSON *root = choir_json_load(config_path, err);
    if (!root) return err ? err->code : CHOIR_EIO;
    const cJSON *c = root;
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dims");
    if (cJSON_IsObject(dims)) c = dims;
    memset(d, 0, sizeof *d);
    if (cJSON_GetObjectItemCaseSensitive(c, "d_model")) {
        d->n_mels = (int)choir_json_int(c, "num_mel_bins", 80);
        d->d_model = (int)choir_json_int(c, "d_model", 0);
        d->n_audio_layer = (int)choir_json_int(c, "encoder_layers", 0);
        d->n_text_layer = (int)choir_json_int(c, "decoder_layers", 0);
        d->n_head = (int)choir_json_int(c, "encoder_attention_heads", 0);
        d->ffn_dim = (int)choir_json_int(c, "encoder_ffn_dim", 4 * d->d_model);
        d->n_vocab = (int)choir_json_int(c, "vocab_size", 0);
        d->n_audio_ctx = (int)choir_json_int(c, "max_source_positions", 1500);
        d->n_text_ctx = (int)choir_json_int(c, "max_target_positions", 448);
        if (choir_json_int(c, "decoder_attention_heads", d->n_head) != d->n_head ||
            choir_json_int(c, "decoder_ffn_dim", d->ffn_dim) != d->ffn_dim) {
            cJSON_Delete(root);
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "%s: encoder and decoder differ in heads or FFN width",
                                 config_path);
        }
    } else {
        d->n_mels = (int)choir_json_int(c, "n_mels", 80);
        d->d_model = (int)choir_json_int(c, "n_audio_state", 0);
        d->n_audio_layer = (int)choir_json_int(c, "n_audio_layer", 0);
        d->n_text_layer = (int)choir_json_int(c, "n_text_layer", 0);
        d->n_head = (int)choir_json_int(c, "n_audio_head", 0);
        d->ffn_dim = 4 * d->d_model;
        d->n_vocab = (int)choir_json_int(c, "n_vocab", 0);
        d->n_audio_ctx = (int)choir_json_int(c, "n_audio_ctx", 1500);
        d->n_text_ctx = (int)choir_json_int(c, "n_text_ctx", 448);
        if (choir_json_int(c, "n_text_state", d->d_model) != d->d_model) {
            cJSON_Delete(root);
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "%s: encoder and decoder widths differ", config_path);
        }
    }
    cJSON_Delete(root);
    if (d->d_model <= 0 || d->n_head <= 0 || d->d_model % d->n_head || d->n_audio_layer <= 0 ||
        d->n_text_layer <= 0 || d->n_vocab < 51864 || d->n_vocab > 51866 || d->n_mels <= 0 ||
        d->n_audio_ctx != 1500 || d->n_text_ctx <= 0 || d->ffn_dim <= 0)
        return choir_err_set(err, CHOIR_EFORMAT,
                             "%s: not a Whisper config (d_model %d, heads %d, layers %d/%d, "
                             "vocab %d, mels %d, audio ctx %d)",
                             config_path, d->d_model, d->n_head, d->n_audio_layer,
                             d->n_text_layer, d->n_vocab, d->n_mels, d->n_audio_ctx);
    return 0;
}

/* The alignment heads of a generation_config.json (choir/whisper_words.h;
 * here with the rest of the JSON the loader reads). */
int choir_whisper_parse_alignment_heads(const cJSON *list, const choir_whisper_dims *d, choir_whisper_head *out,
                                        choir_err *err) {
    if (!cJSON_IsArray(list) || !d)
        return choir_err_set(err, CHOIR_EFORMAT, "alignment_heads: not a list of [layer, head] pairs");
    int n = 0;
    const cJSON *pair;
    cJSON_ArrayForEach(pair, list) {
        const cJSON *l = cJSON_GetArrayItem(pair, 0), *h = cJSON_GetArrayItem(pair, 1);
        if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsNumber(l) || !cJSON_IsNumber(h))
            return choir_err_set(err, CHOIR_EFORMAT, "alignment_heads[%d]: not a [layer, head] pair", n);
        double lv = l->valuedouble, hv = h->valuedouble;
        if (lv != floor(lv) || hv != floor(hv) || lv < 0 || lv >= d->n_text_layer || hv < 0 || hv >= d->n_head)
            return choir_err_set(err, CHOIR_EFORMAT,
                                 "alignment_heads[%d]: [%g, %g] is outside the %d decoder layers of %d heads", n, lv,
                                 hv, d->n_text_layer, d->n_head);
        if (n == CHOIR_WHISPER_MAX_HEADS)
            return choir_err_set(err, CHOIR_EFORMAT, "alignment_heads: more than %d pairs", CHOIR_WHISPER_MAX_HEADS);
        out[n++] = (choir_whisper_head){(int)lv, (int)hv};
    }
    if (n == 0) return choir_err_set(err, CHOIR_EFORMAT, "alignment_heads: the list is empty");
    return n;
}

/* --- binding tensors ----------------------------------------------------- */

typedef struct wh_loader {
    choir_whisper *m;
    const wh_layout *L;
    choir_whisper_tensor_fn find;
    void *find_ctx;
    char name[256];
} wh_loader;

static const choir_st_tensor *wh_find(wh_loader *ld, const char *name) {
    return ld->find(ld->find_ctx, name);
}

static const choir_st_tensor *wh_st_find(void *ctx, const char *name) {
    return choir_st_find(ctx, name);
}

static void *wh_keep(choir_whisper *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **p = choir_realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *b = choir_alloc(CHOIR_MEM_WEIGHTS, bytes);
    if (b) {
        m->owned[m->n_owned++] = b;
        m->bytes += bytes;
    }
    return b;
}

/* A float vector of exactly n elements, used in place when it is aligned F32. */
static int wh_vec(wh_loader *ld, const char *name, int64_t n, const float **out, choir_err *err) {
    const choir_st_tensor *t = wh_find(ld, name);
    if (!t) return choir_err_set(err, CHOIR_ENOTFOUND, "whisper: tensor %s is missing", name);
    if (t->numel != n)
        return choir_err_set(err, CHOIR_ESHAPE, "whisper: tensor %s has %lld elements, expected %lld",
                             name, (long long)t->numel, (long long)n);
    if (t->dtype == CHOIR_DTYPE_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = t->data;
        ld->m->bytes += t->nbytes;
        return 0;
    }
    float *f = wh_keep(ld->m, (size_t)n * sizeof(float));
    if (!f) return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory converting %s", name);
    if (t->dtype == CHOIR_DTYPE_F32) {
        memcpy(f, t->data, (size_t)n * sizeof(float));
    } else if (choir_to_f32_n(t->dtype, t->data, f, n) != 0) {
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "whisper: tensor %s has dtype %s",
                             name, choir_dtype_name(t->dtype));
    }
    *out = f;
    return 0;
}

/* A matrix [rows, cols] named `base`.weight (and .scales/.biases if quantized). */
static int wh_mat(wh_loader *ld, const char *base, int64_t rows, int64_t cols, choir_weight *w,
                  choir_err *err) {
    char wn[300], sn[300], bn[300];
    snprintf(wn, sizeof wn, "%s.weight", base);
    snprintf(sn, sizeof sn, "%s.scales", base);
    snprintf(bn, sizeof bn, "%s.biases", base);
    const choir_st_tensor *t = wh_find(ld, wn);
    if (!t) return choir_err_set(err, CHOIR_ENOTFOUND, "whisper: tensor %s is missing", wn);
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    const choir_st_tensor *s = wh_find(ld, sn);
    if (s) {
        const choir_st_tensor *b = wh_find(ld, bn);
        if (!b || t->dtype != CHOIR_DTYPE_U32 || t->ndim != 2 || s->ndim != 2 ||
            t->shape[0] != rows || s->shape[0] != rows || s->shape[1] <= 0 ||
            cols % s->shape[1] != 0 || b->numel != s->numel || b->dtype != s->dtype)
            return choir_err_set(err, CHOIR_ESHAPE,
                                 "whisper: quantized tensor %s does not fit [%lld, %lld]", base,
                                 (long long)rows, (long long)cols);
        w->kind = CHOIR_WEIGHT_QUANT;
        w->group_size = (int)(cols / s->shape[1]);
        w->bits = (int)(t->shape[1] * 32 / cols);
        w->scales = s->data;
        w->biases = b->data;
        w->sb_dtype = s->dtype;
        if (t->shape[1] * 32 != cols * w->bits || !choir_quant_supported(w->bits, w->group_size))
            return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                 "whisper: %s: unsupported quantization (%d bits, group %d)",
                                 base, w->bits, w->group_size);
        ld->m->bytes += t->nbytes + s->nbytes + b->nbytes;
        return 0;
    }
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return choir_err_set(err, CHOIR_ESHAPE, "whisper: tensor %s is not [%lld, %lld]", wn,
                             (long long)rows, (long long)cols);
    switch (t->dtype) {
    case CHOIR_DTYPE_F32: w->kind = CHOIR_WEIGHT_F32; break;
    case CHOIR_DTYPE_F16: w->kind = CHOIR_WEIGHT_F16; break;
    case CHOIR_DTYPE_BF16: w->kind = CHOIR_WEIGHT_BF16; break;
    default:
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "whisper: tensor %s has dtype %s", wn,
                             choir_dtype_name(t->dtype));
    }
    ld->m->bytes += t->nbytes;
    return 0;
}

static const char *wh_name(wh_loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *wh_name(wh_loader *ld, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->name, sizeof ld->name, fmt, ap);
    va_end(ap);
    return ld->name;
}

static int wh_attn_bind(wh_loader *ld, const char *pfx, const char *mod, wh_attn *a, choir_err *err) {
    const wh_layout *L = ld->L;
    int64_t d = ld->m->dims.d_model;
    const char *proj[4] = {L->q, L->k, L->v, L->o};
    choir_weight *w[4] = {&a->q, &a->k, &a->v, &a->o};
    const float **b[4] = {&a->bq, NULL, &a->bv, &a->bo};
    for (int i = 0; i < 4; i++) {
        char base[256];
        snprintf(base, sizeof base, "%s.%s.%s", pfx, mod, proj[i]);
        int rc = wh_mat(ld, base, d, d, w[i], err);
        if (rc) return rc;
        if (b[i] && (rc = wh_vec(ld, wh_name(ld, "%s.bias", base), d, b[i], err))) return rc;
    }
    return 0;
}

static int wh_ln_bind(wh_loader *ld, const char *pfx, const char *mod, const float **g,
                      const float **b, choir_err *err) {
    int64_t d = ld->m->dims.d_model;
    int rc = wh_vec(ld, wh_name(ld, "%s.%s.weight", pfx, mod), d, g, err);
    if (!rc) rc = wh_vec(ld, wh_name(ld, "%s.%s.bias", pfx, mod), d, b, err);
    return rc;
}

static int wh_block_bind(wh_loader *ld, const char *stack, int i, bool decoder, wh_block *blk,
                         choir_err *err) {
    const wh_layout *L = ld->L;
    const choir_whisper_dims *D = &ld->m->dims;
    char pfx[128], base[256];
    snprintf(pfx, sizeof pfx, "%s.%s.%d", stack, L->layers, i);
    int rc = wh_ln_bind(ld, pfx, L->attn_ln, &blk->attn_ln_g, &blk->attn_ln_b, err);
    if (!rc) rc = wh_attn_bind(ld, pfx, L->self_attn, &blk->attn, err);
    if (!rc && decoder) rc = wh_ln_bind(ld, pfx, L->cross_ln, &blk->cross_ln_g, &blk->cross_ln_b, err);
    if (!rc && decoder) rc = wh_attn_bind(ld, pfx, L->cross_attn, &blk->cross, err);
    if (!rc) rc = wh_ln_bind(ld, pfx, L->mlp_ln, &blk->mlp_ln_g, &blk->mlp_ln_b, err);
    if (rc) return rc;
    /* openai's own checkpoints name the MLP mlp.0/mlp.2, MLX's mlp1/mlp2. */
    const char *fc1 = L->fc1, *fc2 = L->fc2;
    snprintf(base, sizeof base, "%s.%s.weight", pfx, fc1);
    if (!wh_find(ld, base)) {
        snprintf(base, sizeof base, "%s.%s.scales", pfx, fc1);
        if (!wh_find(ld, base)) fc1 = L->fc1_alt, fc2 = L->fc2_alt;
    }
    snprintf(base, sizeof base, "%s.%s", pfx, fc1);
    if ((rc = wh_mat(ld, base, D->ffn_dim, D->d_model, &blk->fc1, err))) return rc;
    if ((rc = wh_vec(ld, wh_name(ld, "%s.bias", base), D->ffn_dim, &blk->fc1_b, err))) return rc;
    snprintf(base, sizeof base, "%s.%s", pfx, fc2);
    if ((rc = wh_mat(ld, base, D->d_model, D->ffn_dim, &blk->fc2, err))) return rc;
    return wh_vec(ld, wh_name(ld, "%s.bias", base), D->d_model, &blk->fc2_b, err);
}

/* A convolution weight in torch layout [out, in, k]; MLX stores [out, k, in]. */
static int wh_conv(wh_loader *ld, const char *name, int64_t cout, int64_t cin, const float **out,
                   choir_err *err) {
    const choir_st_tensor *t = wh_find(ld, name);
    if (!t) return choir_err_set(err, CHOIR_ENOTFOUND, "whisper: tensor %s is missing", name);
    bool torch = t->ndim == 3 && t->shape[0] == cout && t->shape[1] == cin && t->shape[2] == 3;
    bool mlx = t->ndim == 3 && t->shape[0] == cout && t->shape[1] == 3 && t->shape[2] == cin;
    if (!torch && !mlx)
        return choir_err_set(err, CHOIR_ESHAPE, "whisper: tensor %s is neither [%lld, %lld, 3] "
                             "nor [%lld, 3, %lld]", name, (long long)cout, (long long)cin,
                             (long long)cout, (long long)cin);
    if (torch) return wh_vec(ld, name, cout * cin * 3, out, err);
    const float *src;
    int rc = wh_vec(ld, name, cout * cin * 3, &src, err);
    if (rc) return rc;
    float *dst = wh_keep(ld->m, (size_t)(cout * cin * 3) * sizeof(float));
    if (!dst) return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for %s", name);
    for (int64_t o = 0; o < cout; o++)
        for (int64_t k = 0; k < 3; k++)
            for (int64_t i = 0; i < cin; i++)
                dst[(o * cin + i) * 3 + k] = src[(o * 3 + k) * cin + i];
    *out = dst;
    return 0;
}

/* openai's sinusoids(): sin block then cos block, log timescale increment
 * ln(10000) / (d/2 - 1). */
static int wh_sinusoids(wh_loader *ld, const float **out, choir_err *err) {
    int64_t T = ld->m->dims.n_audio_ctx, d = ld->m->dims.d_model, half = d / 2;
    float *p = wh_keep(ld->m, (size_t)(T * d) * sizeof(float));
    if (!p) return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for positions");
    double inc = log(10000.0) / (double)(half - 1);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < half; c++) {
            float inv = (float)exp(-inc * (double)c);
            float a = (float)t * inv;
            p[t * d + c] = sinf(a);
            p[t * d + half + c] = cosf(a);
        }
    *out = p;
    return 0;
}

/* Binds every weight of m (whose st may be NULL) through `find`. */
static choir_whisper *wh_build(choir_whisper *m, choir_whisper_tensor_fn find, void *ctx,
                               const choir_whisper_dims *dims, choir_err *err) {
    m->dims = *dims;
    choir_whisper_specials_from_vocab(dims->n_vocab, &m->sp);
    wh_loader ld = {.m = m, .L = NULL, .find = find, .find_ctx = ctx};
    if (wh_find(&ld, "model.encoder.conv1.weight")) ld.L = &LAYOUT_HF;
    else if (wh_find(&ld, "encoder.conv1.weight")) ld.L = &LAYOUT_OPENAI;
    else {
        choir_err_set(err, CHOIR_EFORMAT, "whisper: checkpoint has neither "
                      "model.encoder.conv1.weight nor encoder.conv1.weight");
        goto fail;
    }
    const wh_layout *L = ld.L;
    const choir_whisper_dims *D = &m->dims;
    int64_t d = D->d_model;
    m->enc = choir_calloc(CHOIR_MEM_WEIGHTS, (size_t)D->n_audio_layer, sizeof *m->enc);
    m->dec = choir_calloc(CHOIR_MEM_WEIGHTS, (size_t)D->n_text_layer, sizeof *m->dec);
    if (!m->enc || !m->dec) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
        goto fail;
    }
    if (wh_conv(&ld, wh_name(&ld, "%s.conv1.weight", L->enc), d, D->n_mels, &m->conv1_w, err) ||
        wh_vec(&ld, wh_name(&ld, "%s.conv1.bias", L->enc), d, &m->conv1_b, err) ||
        wh_conv(&ld, wh_name(&ld, "%s.conv2.weight", L->enc), d, d, &m->conv2_w, err) ||
        wh_vec(&ld, wh_name(&ld, "%s.conv2.bias", L->enc), d, &m->conv2_b, err))
        goto fail;
    /* Use the positions stored in the checkpoint when present: they are what the
     * model was run with (and differ from the formula in synthetic fixtures). */
    const char *pos = wh_name(&ld, "%s.%s", L->enc, L->enc_pos);
    if (wh_find(&ld, pos) ? wh_vec(&ld, pos, D->n_audio_ctx * d, &m->enc_pos, err)
                               : wh_sinusoids(&ld, &m->enc_pos, err))
        goto fail;
    for (int i = 0; i < D->n_audio_layer; i++)
        if (wh_block_bind(&ld, L->enc, i, false, &m->enc[i], err)) goto fail;
    if (wh_ln_bind(&ld, L->enc, L->enc_ln, &m->enc_ln_g, &m->enc_ln_b, err)) goto fail;

    char base[256];
    snprintf(base, sizeof base, "%s.%s", L->dec, L->tok_emb);
    base[strlen(base) - strlen(".weight")] = '\0';
    if (wh_mat(&ld, base, D->n_vocab, d, &m->tok_emb, err)) goto fail;
    if (wh_vec(&ld, wh_name(&ld, "%s.%s", L->dec, L->dec_pos), (int64_t)D->n_text_ctx * d,
               &m->dec_pos, err))
        goto fail;
    for (int i = 0; i < D->n_text_layer; i++)
        if (wh_block_bind(&ld, L->dec, i, true, &m->dec[i], err)) goto fail;
    if (wh_ln_bind(&ld, L->dec, L->dec_ln, &m->dec_ln_g, &m->dec_ln_b, err)) goto fail;
    if (wh_net_init_cpu(m, err)) goto fail;
    return m;
fail:
    choir_whisper_free(m);
    return NULL;
}

choir_whisper *choir_whisper_from_st(choir_st *st, const choir_whisper_dims *dims, choir_err *err) {
    choir_whisper *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_st_close(st);
        choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
        return NULL;
    }
    m->st = st;
    return wh_build(m, wh_st_find, st, dims, err);
}

choir_whisper *choir_whisper_from_tensors(choir_whisper_tensor_fn find, void *ctx,
                                          const choir_whisper_dims *dims, choir_err *err) {
    choir_whisper *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
        return NULL;
    }
    return wh_build(m, find, ctx, dims, err);
}

choir_whisper *choir_whisper_load(const char *dir, choir_err *err) {
    char path[4096];
    choir_whisper_dims dims;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (choir_whisper_read_config(path, &dims, err)) return NULL;
    /* mlx-whisper names its file weights.safetensors; everything else is found
     * by choir_st_open from the directory. */
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    else snprintf(path, sizeof path, "%s", dir);
    choir_st *st = choir_st_open(path, err);
    if (!st) return NULL;
    choir_whisper *m = choir_whisper_from_st(st, &dims, err);
    if (!m) {
        choir_err_prefix(err, "%s: ", dir);
        return NULL;
    }
    /* Hugging Face's generation_config.json may name the alignment heads
     * (word timestamps); without it the size's table is used. */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if ((f = fopen(path, "rb"))) {
        fclose(f);
        cJSON *gc = choir_json_load(path, err);
        const cJSON *list = gc ? cJSON_GetObjectItemCaseSensitive(gc, "alignment_heads") : NULL;
        int rc = gc ? 0 : (err && err->code ? err->code : CHOIR_EIO);
        if (list && !cJSON_IsNull(list)) {
            choir_whisper_head *h =
                choir_alloc(CHOIR_MEM_WEIGHTS, CHOIR_WHISPER_MAX_HEADS * sizeof *h);
            int n = h ? choir_whisper_parse_alignment_heads(list, &m->dims, h, err)
                      : choir_err_set(err, CHOIR_ENOMEM, "out of memory");
            if (n > 0) {
                m->align = h;
                m->n_align = n;
            } else {
                choir_free(h);
                rc = n;
            }
        }
        cJSON_Delete(gc);
        if (rc) {
            choir_err_prefix(err, "%s/generation_config.json", dir);
            choir_whisper_free(m);
            return NULL;
        }
    }
    return m;
}

void choir_whisper_free(choir_whisper *m) {
    if (!m) return;
    choir_whisper_gpu_detach(m);
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    choir_free(m->align);
    choir_free(m->enc);
    choir_free(m->dec);
    choir_st_close(m->st);
    choir_backend_free(m->cpu);
    choir_free(m);
}

const choir_whisper_dims *choir_whisper_get_dims(const choir_whisper *m) { return &m->dims; }
const choir_whisper_specials *choir_whisper_get_specials(const choir_whisper *m) { return &m->sp; }
size_t choir_whisper_weight_bytes(const choir_whisper *m) { return m->bytes; }
