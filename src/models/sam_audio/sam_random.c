/* A SAM-Audio model with random weights, built in memory (sam_random.h).
 * It fills the same structs the loader fills, in the same shapes, from a
 * splitmix generator, then attaches them to the chosen backend. It needs
 * none of the loader's file or JSON code, so the standalone CUDA build can
 * link it. Free with sam_random_free (not choir_sam_free, which also closes
 * the loader's files). */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "sam_random.h"

typedef struct rnd {
    choir_sam *m;
    uint64_t state;
    int failed;
} rnd;

static float *own(rnd *r, int64_t n) {
    choir_sam *m = r->m;
    if (r->failed) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 256;
        void **grown = choir_realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown) {
            r->failed = 1;
            return NULL;
        }
        m->owned = grown;
        m->cap_owned = cap;
    }
    float *p = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) {
        r->failed = 1;
        return NULL;
    }
    m->owned[m->n_owned++] = p;
    m->bytes += (size_t)n * sizeof *p;
    return p;
}

static uint64_t next(rnd *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n values uniform in [lo, hi]. */
static float *uni(rnd *r, int64_t n, float lo, float hi) {
    float *p = own(r, n);
    if (!p) return NULL;
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)((next(r) >> 40) * (1.0 / 16777216.0));
    return p;
}

static float *fan(rnd *r, int64_t n, int64_t fan_in) {
    float s = 1.0f / sqrtf((float)(fan_in > 0 ? fan_in : 1));
    return uni(r, n, -s, s);
}

static void mat(rnd *r, choir_weight *w, int64_t rows, int64_t cols) {
    const float *p = fan(r, rows * cols, cols);
    *w = choir_weight_f32(p, rows, cols);
}

static void conv(rnd *r, sam_conv *c, int64_t cin, int64_t cout, int64_t k, int stride, int dilation, int causal) {
    c->cin = cin, c->cout = cout, c->k = k, c->stride = stride, c->dilation = dilation, c->causal = causal;
    c->w = fan(r, cout * cin * k, cin * k);
    c->b = uni(r, cout, -0.05f, 0.05f);
}

static void convt(rnd *r, sam_convt *c, int64_t cin, int64_t cout, int stride, int causal) {
    c->cin = cin, c->cout = cout, c->k = 2 * stride, c->stride = stride, c->causal = causal;
    c->w = fan(r, cin * cout * c->k, cin * 2);
    c->b = uni(r, cout, -0.05f, 0.05f);
}

static void ru(rnd *r, sam_ru *u, int64_t dim, int dilation, int elu) {
    if (!elu) {
        u->alpha1 = uni(r, dim, 0.5f, 1.5f);
        u->alpha2 = uni(r, dim, 0.5f, 1.5f);
    }
    int64_t hidden = elu ? dim / 2 : dim;
    conv(r, &u->c1, dim, hidden, elu ? 3 : 7, 1, elu ? 1 : dilation, elu);
    conv(r, &u->c2, hidden, dim, 1, 1, 1, elu);
}

static void lstm(rnd *r, sam_lstm *l, int64_t H) {
    l->H = H;
    for (int i = 0; i < 2; i++) {
        l->w_ih[i] = fan(r, 4 * H * H, H);
        l->w_hh[i] = fan(r, 4 * H * H, H);
        l->b_ih[i] = uni(r, 4 * H, -0.05f, 0.05f);
        l->b_hh[i] = uni(r, 4 * H, -0.05f, 0.05f);
    }
}

void sam_random_published(sam_random_dims *d, int64_t D, int64_t H, int64_t L) {
    static const int enc[4] = {2, 8, 10, 12}, dec[4] = {12, 10, 8, 2};
    memset(d, 0, sizeof *d);
    d->enc_dim = 64, d->n_enc = 4, d->latent = 1024, d->cb = 128, d->dec_dim = 1536, d->n_dec = 4;
    memcpy(d->enc_rates, enc, sizeof enc);
    memcpy(d->dec_rates, dec, sizeof dec);
    d->watermark = 1;
    d->D = D, d->H = H, d->L = L, d->text_dim = 768, d->freq_dim = 256, d->anchor_dim = 128, d->max_pos = 10000;
}

static const int WM_RATES[SAM_WM_BLOCKS] = {8, 5, 4, 2};

static void t5(rnd *r, const sam_random_dims *dm) {
    sam_t5 *t = &r->m->t5;
    t->d = dm->text_dim, t->d_kv = dm->t5_d_kv, t->n_heads = dm->t5_heads, t->n_layers = dm->t5_layers;
    t->d_ff = dm->t5_d_ff, t->vocab = dm->t5_vocab, t->buckets = 32, t->max_distance = 128, t->eps = 1e-6f;
    t->max_length = 512;
    int64_t d = t->d, inner = t->n_heads * t->d_kv;
    t->embed = uni(r, t->vocab * d, -1, 1);
    t->rel_bias = uni(r, (int64_t)t->buckets * t->n_heads, -0.5f, 0.5f);
    t->layers = (sam_t5_layer *)own(r, (int64_t)((t->n_layers * (int64_t)sizeof(sam_t5_layer) + 3) / 4));
    if (t->layers) memset(t->layers, 0, (size_t)t->n_layers * sizeof *t->layers);
    for (int64_t i = 0; i < t->n_layers && t->layers; i++) {
        sam_t5_layer *l = &t->layers[i];
        mat(r, &l->q, inner, d), mat(r, &l->k, inner, d), mat(r, &l->v, inner, d), mat(r, &l->o, d, inner);
        l->ln1 = uni(r, d, 0.8f, 1.2f), l->ln2 = uni(r, d, 0.8f, 1.2f);
        mat(r, &l->wi, t->d_ff, d), mat(r, &l->wo, d, t->d_ff);
    }
    t->final_ln = uni(r, d, 0.8f, 1.2f);
    r->m->has_t5 = !r->failed;
}

choir_sam *sam_random_model(const sam_random_dims *dm, uint64_t seed, int device, int bf16, choir_err *err) {
    if (dm->n_enc < 1 || dm->n_enc > SAM_MAX_RATES || dm->n_dec < 1 || dm->n_dec > SAM_MAX_RATES || dm->D % dm->H ||
        (dm->watermark && (dm->n_dec != SAM_WM_BLOCKS || dm->dec_dim != 1536))) {
        choir_err_set(err, CHOIR_EINVAL, "sam-audio random: bad dimensions");
        return NULL;
    }
    choir_sam *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_err_set(err, CHOIR_ENOMEM, "sam-audio random: out of memory");
        return NULL;
    }
    rnd r = {m, seed * 0x2545F4914F6CDD1Dull + 7, 0};
    m->sample_rate = CHOIR_SAM_RATE;
    sam_codec *c = &m->codec;
    c->n_enc = dm->n_enc, c->n_dec = dm->n_dec, c->latent = dm->latent, c->cb = dm->cb, c->has_wm = dm->watermark;
    c->hop = 1;
    for (int i = 0; i < c->n_enc; i++) c->enc_rates[i] = dm->enc_rates[i], c->hop *= dm->enc_rates[i];
    for (int i = 0; i < c->n_dec; i++) c->dec_rates[i] = dm->dec_rates[i];
    conv(&r, &c->enc_in, 1, dm->enc_dim, 7, 1, 1, 0);
    int64_t d = dm->enc_dim;
    for (int i = 0; i < c->n_enc; i++) {
        for (int k = 0; k < 3; k++) ru(&r, &c->enc[i].ru[k], d, k == 0 ? 1 : k == 1 ? 3 : 9, 0);
        c->enc[i].alpha = uni(&r, d, 0.5f, 1.5f);
        conv(&r, &c->enc[i].down, d, 2 * d, 2 * c->enc_rates[i], c->enc_rates[i], 1, 0);
        d *= 2;
    }
    c->enc_alpha = uni(&r, d, 0.5f, 1.5f);
    conv(&r, &c->enc_out, d, c->latent, 3, 1, 1, 0);
    conv(&r, &c->in_proj, c->latent, 2 * c->cb, 1, 1, 1, 0);
    conv(&r, &c->out_proj, c->cb, c->latent, 1, 1, 1, 0);
    conv(&r, &c->dec_in, c->latent, dm->dec_dim, 7, 1, 1, 0);
    for (int i = 0; i < c->n_dec; i++) {
        sam_dec_block *b = &c->dec[i];
        int64_t cin = dm->dec_dim >> i, cout = dm->dec_dim >> (i + 1);
        b->alpha = uni(&r, cin, 0.5f, 1.5f);
        convt(&r, &b->up, cin, cout, c->dec_rates[i], 0);
        static const int dil[3] = {1, 3, 9};
        for (int k = 0; k < 3; k++) ru(&r, &b->ru[k], cout, dil[k], 0);
        if (c->has_wm) {
            convt(&r, &b->wm_up, cin / 3, cout / 3, WM_RATES[i], 1);
            ru(&r, &b->wm_ru6, cout / 3, 1, 1);
            ru(&r, &b->wm_ru7, cout / 3, 1, 1);
            conv(&r, &b->wm_down, cout / 3, cin / 3, 2 * WM_RATES[i], WM_RATES[i], 1, 1);
        }
    }
    int64_t last = dm->dec_dim >> c->n_dec;
    c->wm_alpha = uni(&r, last, 0.5f, 1.5f);
    conv(&r, &c->wm_pre1, last, 1, 7, 1, 1, 0);
    if (c->has_wm) {
        conv(&r, &c->wm_pre3, 1, 32, 7, 1, 1, 1);
        lstm(&r, &c->wm_enc_lstm, 512);
        conv(&r, &c->wm_post2, 512, 128, 7, 1, 1, 1);
        c->msg_emb = uni(&r, 2 * CHOIR_SAM_WM_BITS * 128, -0.1f, 0.1f);
        conv(&r, &c->wm_dec_pre0, 128, 512, 7, 1, 1, 1);
        lstm(&r, &c->wm_dec_lstm, 512);
        conv(&r, &c->wm_post1, 32, 1, 7, 1, 1, 1);
    }

    sam_dit *t = &m->dit;
    int64_t D = dm->D;
    t->D = D, t->H = dm->H, t->hd = D / dm->H, t->L = dm->L, t->eps = 1e-5f, t->max_pos = dm->max_pos;
    t->freq_dim = dm->freq_dim, t->ctx_dim = D, t->out_ch = 2 * c->cb, t->in_channels = 6 * c->cb;
    t->text_dim = dm->text_dim, t->anchor_dim = dm->anchor_dim, t->n_anchor_rows = 4;
    t->rope_theta = (float)(2 * t->max_pos > 10000 ? 2 * t->max_pos : 10000);
    t->F = 64 * ((2 * 4 * D / 3 + 63) / 64);
    t->layers = (sam_dit_layer *)own(&r, (int64_t)((t->L * (int64_t)sizeof(sam_dit_layer) + 3) / 4));
    if (t->layers) memset(t->layers, 0, (size_t)t->L * sizeof *t->layers);
    for (int64_t i = 0; i < t->L && t->layers; i++) {
        sam_dit_layer *l = &t->layers[i];
        l->table = uni(&r, 6 * D, -0.2f, 0.2f);
        mat(&r, &l->wq, D, D), mat(&r, &l->wk, D, D), mat(&r, &l->wv, D, D), mat(&r, &l->wo, D, D);
        mat(&r, &l->cq, D, D), mat(&r, &l->ck, D, D), mat(&r, &l->cv, D, D), mat(&r, &l->co, D, D);
        mat(&r, &l->w1, t->F, D), mat(&r, &l->w3, t->F, D), mat(&r, &l->w2, D, t->F);
        l->q_norm = uni(&r, t->hd, 0.8f, 1.2f), l->k_norm = uni(&r, t->hd, 0.8f, 1.2f);
        l->cq_norm = uni(&r, t->hd, 0.8f, 1.2f), l->ck_norm = uni(&r, t->hd, 0.8f, 1.2f);
        l->attn_norm = uni(&r, D, 0.8f, 1.2f), l->ffn_norm = uni(&r, D, 0.8f, 1.2f);
    }
    t->final_table = uni(&r, 2 * D, -0.2f, 0.2f);
    t->norm = uni(&r, D, 0.8f, 1.2f);
    mat(&r, &t->output, t->out_ch, D);
    t->gn1_w = uni(&r, D, 0.8f, 1.2f), t->gn1_b = uni(&r, D, -0.1f, 0.1f);
    t->gn2_w = uni(&r, D, 0.8f, 1.2f), t->gn2_b = uni(&r, D, -0.1f, 0.1f);
    t->pconv1_w = fan(&r, D * D * 3, D * 3), t->pconv1_b = uni(&r, D, -0.05f, 0.05f);
    t->pconv2_w = fan(&r, D * D * 3, D * 3), t->pconv2_b = uni(&r, D, -0.05f, 0.05f);
    mat(&r, &t->y_w1, D, D), mat(&r, &t->y_w2, D, D), mat(&r, &t->y_w3, D, D);
    mat(&r, &t->t_w1, D, t->freq_dim), mat(&r, &t->t_w2, D, D), mat(&r, &t->t_w3, D, t->freq_dim);
    mat(&r, &t->t_block, 6 * D, D);
    t->t_block_b = uni(&r, 6 * D, -0.1f, 0.1f);
    mat(&r, &t->proj, D, t->in_channels);
    t->proj_b = uni(&r, D, -0.05f, 0.05f);
    mat(&r, &t->memory_proj, D, t->text_dim);
    t->memory_proj_b = uni(&r, D, -0.05f, 0.05f);
    t->anchor_embed_host = uni(&r, t->n_anchor_rows * t->anchor_dim, -1, 1);
    mat(&r, &t->anchor_proj, D, t->anchor_dim);
    t->anchor_gate = 0.66f;
    t->video_const = uni(&r, D, -0.5f, 0.5f);
    if (dm->t5_layers > 0) t5(&r, dm);
    if (r.failed) {
        choir_err_set(err, CHOIR_ENOMEM, "sam-audio random: out of memory for the weights");
        goto fail;
    }
    if (device > 0) {
        choir_backend_cuda_opts co = {.device = device - 1, .bf16 = bf16 != 0};
        m->be = choir_backend_cuda(&co, err);
    } else {
        m->be = choir_backend_cpu(err);
    }
    if (!m->be) goto fail;
    m->own_be = 1;
    if (sam_backend_attach(m, err) != 0) goto fail;
    return m;
fail:
    sam_random_free(m);
    return NULL;
}

void sam_random_free(choir_sam *m) {
    if (!m) return;
    sam_backend_detach(m);
    if (m->own_be) choir_backend_free(m->be);
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    choir_free(m);
}
