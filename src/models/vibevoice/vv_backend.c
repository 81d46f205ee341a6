/* Putting a built VibeVoice-ASR model's weights on its backend: every
 * matrix through choir_backend_weight and every vector through
 * choir_backend_vec, in place in the model's structs. On the CPU these
 * return the host tensors themselves; on CUDA the structs then point at the
 * device copies (the mapped checkpoint stays open behind them). */
#include <stdlib.h>

#include "models/vibevoice/vv_internal.h"

static void bind_w(choir_backend_weights *ws, choir_weight *w) {
    if (w->rows > 0) choir_backend_weight(ws, w, w);
}

static void bind_v(choir_backend_weights *ws, const float **v, int64_t n) {
    if (*v) *v = choir_backend_vec(ws, *v, n);
}

static void bind_conv(choir_backend_weights *ws, vv_conv *c) {
    if (c->taps1) bind_v(ws, &c->taps1, (int64_t)c->kernel * c->cout);
    else
        for (int g = 0; g < c->n_blocks; g++) bind_w(ws, &c->blk[g]);
    bind_v(ws, &c->bias, c->cout);
}

int vv_bind_backend(choir_vibevoice *m, choir_err *err) {
    if (!(m->ws = choir_backend_weights_create(m->be, err))) return err ? err->code : CHOIR_ENOMEM;
    choir_backend_weights *ws = m->ws;
    for (int e = 0; e < 2; e++) {
        vv_encoder *en = &m->enc[e];
        for (int s = 0; s < en->d.n_stages; s++) {
            int64_t C = en->channels[s];
            bind_conv(ws, &en->down[s]);
            for (int b = 0; b < en->d.depths[s]; b++) {
                vv_block *k = &en->blocks[s][b];
                int64_t F = C * en->d.ffn_mult;
                bind_v(ws, &k->norm, C);
                bind_v(ws, &k->ffn_norm, C);
                bind_v(ws, &k->gamma, C);
                bind_v(ws, &k->ffn_gamma, C);
                bind_v(ws, &k->dw, (int64_t)k->dw_kernel * C);
                bind_v(ws, &k->dw_bias, C);
                bind_w(ws, &k->fc1);
                bind_w(ws, &k->fc2);
                bind_v(ws, &k->fc1_bias, F);
                bind_v(ws, &k->fc2_bias, C);
            }
        }
        bind_conv(ws, &en->head);
        vv_connector *c = &m->conn[e];
        int64_t H = m->dims.lm.hidden;
        bind_w(ws, &c->fc1);
        bind_w(ws, &c->fc2);
        bind_v(ws, &c->fc1_bias, H);
        bind_v(ws, &c->fc2_bias, H);
        bind_v(ws, &c->norm, H);
    }
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    int64_t H = L->hidden, qd = (int64_t)L->n_heads * L->head_dim, kvd = (int64_t)L->n_kv_heads * L->head_dim;
    /* A tied head is the embedding: bound once, then shared. */
    int tied = m->lm_head.data == m->embed.data;
    bind_w(ws, &m->embed);
    if (tied) m->lm_head = m->embed;
    else bind_w(ws, &m->lm_head);
    /* q, k, v in one device buffer and gate, up in another
     * (choir_backend_weight_group), so that the prefill's products over them
     * run as one each (choir_op_norm_qkv_rope, choir_op_gated_mlp); the same
     * bytes either way. On unless CHOIR_VV_PREFILL_FUSED=0 (H100, 7 Dec 2026:
     * 10 minutes of prefill 36,939 -> 38,115 tokens/s). */
    const char *fused = getenv("CHOIR_VV_PREFILL_FUSED");
    bool group = !(fused && fused[0] == '0');
    for (int i = 0; i < L->n_layers; i++) {
        vv_layer *l = &m->layers[i];
        if (group && l->q.rows > 0 && l->k.rows > 0 && l->v.rows > 0 && l->gate.rows > 0 && l->up.rows > 0) {
            choir_weight *qkv[3] = {&l->q, &l->k, &l->v}, *gu[2] = {&l->gate, &l->up};
            choir_backend_weight_group(ws, 3, (const choir_weight *const *)qkv, qkv);
            choir_backend_weight_group(ws, 2, (const choir_weight *const *)gu, gu);
            bind_w(ws, &l->o);
            bind_w(ws, &l->down);
        } else {
            choir_weight *w[7] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
            for (int k = 0; k < 7; k++) bind_w(ws, w[k]);
        }
        bind_v(ws, &l->q_bias, qd);
        bind_v(ws, &l->k_bias, kvd);
        bind_v(ws, &l->v_bias, kvd);
        bind_v(ws, &l->attn_norm, H);
        bind_v(ws, &l->mlp_norm, H);
    }
    bind_v(ws, &m->final_norm, H);
    return choir_backend_weights_status(ws, err);
}
