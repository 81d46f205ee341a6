/* SAM-Audio's weights on its backend, and the streams its calls run on.
 *
 * The loader builds every weight in host memory (mapped or owned); attach
 * then replaces each pointer of the codec and the DiT by its backend copy
 * (choir_backend_weight / choir_backend_vec). On the CPU those return the
 * host pointers themselves, so nothing is copied. Two small tables stay on
 * the host because the host reads them: the anchor embedding (rows gathered
 * per request) and the watermark's message embedding (summed per message). */
#include "choir/alloc.h"
#include "sam_internal.h"

static void vec(choir_backend_weights *bw, const float **p, int64_t n) {
    if (*p) *p = choir_backend_vec(bw, *p, n);
}

static void mat(choir_backend_weights *bw, choir_weight *w) {
    choir_weight host = *w;
    if (host.rows > 0) choir_backend_weight(bw, &host, w);
}

static void conv(choir_backend_weights *bw, sam_conv *c) {
    vec(bw, &c->w, c->cout * c->cin * c->k);
    vec(bw, &c->b, c->cout);
}

static void convt(choir_backend_weights *bw, sam_convt *c) {
    vec(bw, &c->w, c->cin * c->cout * c->k);
    vec(bw, &c->b, c->cout);
}

static void ru(choir_backend_weights *bw, sam_ru *r) {
    vec(bw, &r->alpha1, r->c1.cin);
    vec(bw, &r->alpha2, r->c1.cout);
    conv(bw, &r->c1);
    conv(bw, &r->c2);
}

static void lstm(choir_backend_weights *bw, sam_lstm *l, int64_t in) {
    for (int i = 0; i < 2; i++) {
        vec(bw, &l->w_ih[i], 4 * l->H * in);
        vec(bw, &l->w_hh[i], 4 * l->H * l->H);
        vec(bw, &l->b_ih[i], 4 * l->H);
        vec(bw, &l->b_hh[i], 4 * l->H);
    }
}

int sam_backend_attach(choir_sam *m, choir_err *err) {
    m->bw = choir_backend_weights_create(m->be, err);
    if (!m->bw) return err ? err->code : CHOIR_ENOMEM;
    choir_backend_weights *bw = m->bw;
    sam_codec *c = &m->codec;
    conv(bw, &c->enc_in);
    int64_t d = c->enc_in.cout;
    for (int i = 0; i < c->n_enc; i++) {
        for (int r = 0; r < 3; r++) ru(bw, &c->enc[i].ru[r]);
        vec(bw, &c->enc[i].alpha, d);
        conv(bw, &c->enc[i].down);
        d *= 2;
    }
    vec(bw, &c->enc_alpha, d);
    conv(bw, &c->enc_out);
    conv(bw, &c->in_proj);
    conv(bw, &c->out_proj);
    conv(bw, &c->dec_in);
    for (int i = 0; i < c->n_dec; i++) {
        sam_dec_block *b = &c->dec[i];
        vec(bw, &b->alpha, b->up.cin);
        convt(bw, &b->up);
        for (int r = 0; r < 3; r++) ru(bw, &b->ru[r]);
        if (c->has_wm) {
            convt(bw, &b->wm_up);
            ru(bw, &b->wm_ru6);
            ru(bw, &b->wm_ru7);
            conv(bw, &b->wm_down);
        }
    }
    vec(bw, &c->wm_alpha, c->wm_pre1.cin);
    conv(bw, &c->wm_pre1);
    if (c->has_wm) {
        conv(bw, &c->wm_pre3);
        lstm(bw, &c->wm_enc_lstm, c->wm_enc_lstm.H);
        conv(bw, &c->wm_post2);
        conv(bw, &c->wm_dec_pre0);
        lstm(bw, &c->wm_dec_lstm, c->wm_dec_lstm.H);
        conv(bw, &c->wm_post1);
    }

    sam_dit *t = &m->dit;
    int64_t D = t->D;
    for (int64_t i = 0; i < t->L; i++) {
        sam_dit_layer *l = &t->layers[i];
        vec(bw, &l->table, 6 * D);
        choir_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->cq, &l->ck, &l->cv, &l->co, &l->w1, &l->w2, &l->w3};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) mat(bw, ws[k]);
        vec(bw, &l->q_norm, t->hd);
        vec(bw, &l->k_norm, t->hd);
        vec(bw, &l->cq_norm, t->hd);
        vec(bw, &l->ck_norm, t->hd);
        vec(bw, &l->attn_norm, D);
        vec(bw, &l->ffn_norm, D);
    }
    vec(bw, &t->final_table, 2 * D);
    vec(bw, &t->norm, D);
    choir_weight *tw[] = {&t->output, &t->y_w1, &t->y_w2, &t->y_w3, &t->t_w1, &t->t_w2, &t->t_w3,
                          &t->t_block, &t->proj, &t->memory_proj, &t->anchor_proj};
    for (size_t k = 0; k < sizeof tw / sizeof tw[0]; k++) mat(bw, tw[k]);
    vec(bw, &t->gn1_w, D);
    vec(bw, &t->gn1_b, D);
    vec(bw, &t->gn2_w, D);
    vec(bw, &t->gn2_b, D);
    vec(bw, &t->pconv1_w, D * D * 3);
    vec(bw, &t->pconv1_b, D);
    vec(bw, &t->pconv2_w, D * D * 3);
    vec(bw, &t->pconv2_b, D);
    vec(bw, &t->t_block_b, 6 * D);
    vec(bw, &t->proj_b, D);
    vec(bw, &t->memory_proj_b, D);
    const float *vc = t->video_const;
    vec(bw, &vc, D);
    t->video_const_dev = vc;
    return choir_backend_weights_status(bw, err);
}

void sam_backend_detach(choir_sam *m) {
    choir_backend_weights_free(m->bw);
    m->bw = NULL;
}

choir_stream *sam_stream_open(const choir_sam *m, size_t work_bytes, choir_err *err) {
    choir_stream *s = choir_stream_create(m->be, err);
    if (!s) return NULL;
    if (choir_stream_reserve(s, work_bytes, 0, err) != 0) {
        choir_stream_free(s);
        return NULL;
    }
    return s;
}

const char *choir_sam_backend_name(const choir_sam *m) { return m && m->be ? choir_backend_name(m->be) : "cpu"; }

size_t choir_sam_weight_bytes(const choir_sam *m) { return m ? m->bytes : 0; }

int64_t choir_sam_device_bytes(const choir_sam *m, int64_t *peak) {
    if (peak) *peak = m && m->be ? choir_backend_mem_peak(m->be) : 0;
    return m && m->be ? choir_backend_mem_current(m->be) : 0;
}
