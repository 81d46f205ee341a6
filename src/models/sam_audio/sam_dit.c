/* One network evaluation of SAM-Audio: the input projection and its constant
 * terms, the DiT (patcher, L blocks of adaLN self-attention, text
 * cross-attention and SwiGLU FFN, the final modulated projection), written
 * once over the backend operations (choir/backend.h, choir/backend_sam.h).
 *
 * A batch is ragged: item i has its own frames; row-wise layers (linears,
 * norms, rotary embeddings) run once over all items' rows concatenated, so
 * the weights are read once per batch; per-item work (GroupNorm over the
 * whole item, the k3 convs, attention, modulation with the item's own t)
 * loops over items. Batched results therefore equal each item alone.
 *
 * What depends only on the request (the anchor term, the text memory) is
 * computed once by sam_batch_prepare; each evaluation then builds the input
 * from x_t as the reference does (proj(cat[x_t, 0, A, A]) + video + anchor).
 * All buffers come from the stream's working memory, planned by
 * sam_batch_bytes; the only host work per evaluation is the two t-sinusoids
 * (a few hundred floats), uploaded. */
#include <math.h>
#include <string.h>

#include "choir/backend_sam.h"
#include "choir/kernels.h"
#include "sam_dit.h"

#define ALIGN_SLACK 256

static void batch_dims(const choir_sam_item *items, int n, int64_t *N, int64_t *Tmax, int64_t *Lmax,
                       int64_t *Lsum) {
    *N = *Tmax = *Lmax = *Lsum = 0;
    for (int i = 0; i < n; i++) {
        *N += items[i].frames;
        *Lsum += items[i].text_len;
        if (items[i].frames > *Tmax) *Tmax = items[i].frames;
        if (items[i].text_len > *Lmax) *Lmax = items[i].text_len;
    }
}

/* Floats of one evaluation's buffers (each item's text memory and its
 * input back to back, so a batch takes no more than its items alone). */
static int64_t eval_floats(const sam_dit *d, int n, int64_t N, int64_t Tmax, int64_t Lmax, int64_t Lsum) {
    int64_t D = d->D, F = d->F;
    int64_t rows = N * (7 * D + 2 * F + d->in_channels);
    int64_t patch = 2 * D * Tmax;
    int64_t text = 2 * Lsum * D + 3 * Lmax * D;
    int64_t small = n * (18 * D + d->freq_dim);
    return rows + patch + text + small;
}

size_t sam_dit_scratch_bytes(const choir_sam *m, const choir_sam_item *items, int n) {
    const sam_dit *d = &m->dit;
    int64_t N, Tmax, Lmax, Lsum;
    batch_dims(items, n, &N, &Tmax, &Lmax, &Lsum);
    /* Linears run over at most max(N, Lmax) rows (their scratch grows with
     * the rows); attention over one item at a time. */
    int64_t M = N > Lmax ? N : Lmax;
    size_t most = choir_attention_scratch_bytes(Tmax, Tmax), b;
    if ((b = choir_attention_scratch_bytes(Tmax, Lmax)) > most) most = b;
    if ((b = choir_conv1d_scratch_bytes(d->D, Tmax, 3, 1, 1, 1, 1)) > most) most = b;
    const choir_weight *top[] = {&d->output, &d->y_w1, &d->y_w2, &d->y_w3, &d->t_w1, &d->t_w2, &d->t_w3,
                                 &d->t_block, &d->proj, &d->memory_proj, &d->anchor_proj};
    for (size_t k = 0; k < sizeof top / sizeof top[0]; k++)
        if ((b = choir_linear_scratch_bytes(M, top[k])) > most) most = b;
    for (int64_t li = 0; li < d->L; li++) {
        const sam_dit_layer *l = &d->layers[li];
        const choir_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->cq, &l->ck, &l->cv, &l->co, &l->w1, &l->w2, &l->w3};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
            if ((b = choir_linear_scratch_bytes(M, ws[k])) > most) most = b;
    }
    return most;
}

/* On CUDA the largest kernel scratch is the context's, grown to the most one
 * call asks: attention's scores [H, T, Tk] in f32 (the GEMM path of long
 * query blocks), the patcher's im2col taps [3 D, T]; f32 linears are cuBLAS
 * products (no choir scratch). */
size_t sam_dit_device_scratch_bytes(const choir_sam *m, const choir_sam_item *items, int n) {
    const sam_dit *d = &m->dit;
    int64_t N, Tmax, Lmax, Lsum;
    batch_dims(items, n, &N, &Tmax, &Lmax, &Lsum);
    int64_t most = d->H * Tmax * (Tmax > Lmax ? Tmax : Lmax);
    if (3 * d->D * Tmax > most) most = 3 * d->D * Tmax;
    return (size_t)most * sizeof(float);
}

size_t sam_batch_bytes(const choir_sam *m, const choir_sam_item *items, int n) {
    const sam_dit *d = &m->dit;
    int64_t N, Tmax, Lmax, Lsum;
    batch_dims(items, n, &N, &Tmax, &Lmax, &Lsum);
    int64_t floats = eval_floats(d, n, N, Tmax, Lmax, Lsum);
    for (int i = 0; i < n; i++) {
        int64_t T = items[i].frames, L = items[i].text_len;
        floats += T * (m->codec.cb + d->D + d->anchor_dim) + L * (d->text_dim + d->D);
    }
    return (size_t)floats * sizeof(float) + (size_t)N * sizeof(int32_t) + (size_t)(4 * n + 2) * ALIGN_SLACK;
}

int64_t sam_batch_host_floats(const choir_sam *m, const choir_sam_item *items, int n) {
    int64_t N, Tmax, Lmax, Lsum;
    batch_dims(items, n, &N, &Tmax, &Lmax, &Lsum);
    int64_t a = n * (m->dit.freq_dim + m->dit.D), b = Tmax * m->dit.anchor_dim;
    int64_t c = N * (int64_t)(sizeof(int32_t) / sizeof(float));
    int64_t w = a > b ? a : b;
    return w > c ? w : c;
}

int sam_batch_prepare(const choir_sam *m, choir_stream *s, const choir_sam_item *items, int n,
                      sam_batch *b, sam_prep *preps, float *host_t, choir_err *err) {
    const sam_dit *d = &m->dit;
    memset(b, 0, sizeof *b);
    b->n = n;
    b->p = preps;
    b->host_t = host_t;
    batch_dims(items, n, &b->N, &b->Tmax, &b->Lmax, &b->Lsum);
    int64_t D = d->D, C = m->codec.cb;
    for (int i = 0; i < n; i++) {
        const choir_sam_item *it = &items[i];
        sam_prep *p = &preps[i];
        int64_t T = it->frames, L = it->text_len;
        memset(p, 0, sizeof *p);
        if (T < 1 || it->valid_frames < 1 || it->valid_frames > T || T > d->max_pos)
            return choir_err_set(err, CHOIR_EINVAL, "sam-audio: %lld frames (valid %lld) outside 1..%lld", (long long)T,
                                 (long long)it->valid_frames, (long long)d->max_pos);
        if (L < 1 || !it->text || !it->features)
            return choir_err_set(err, CHOIR_EINVAL, "sam-audio: item without text or features");
        /* The anchor ids of every frame, checked on the host. */
        for (int64_t t = 0; t < T; t++) {
            int32_t slot = it->anchor_alignment ? it->anchor_alignment[t] : (t < it->valid_frames ? 0 : 1), id;
            if (it->anchor_ids) {
                if (slot < 0 || slot >= it->n_anchor_ids)
                    return choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchor slot %d out of range", (int)slot);
                id = it->anchor_ids[slot];
            } else {
                id = slot == 0 ? 0 : 3; /* <null>, <pad> */
            }
            if (id < 0 || id >= d->n_anchor_rows)
                return choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchor id %d out of range", (int)id);
            memcpy(host_t + t * d->anchor_dim, d->anchor_embed_host + id * d->anchor_dim,
                   (size_t)d->anchor_dim * sizeof *host_t);
        }
        p->item = *it;
        p->features = choir_stream_floats(s, T * C, "sam features");
        p->text = choir_stream_floats(s, L * d->text_dim, "sam text");
        p->anchor = choir_stream_floats(s, T * D + L * D, "sam anchor and memory");
        float *e = choir_stream_floats(s, T * d->anchor_dim, "sam anchor rows");
        if (!e) return choir_stream_status(s, err);
        p->memory = p->anchor + T * D;
        choir_op_upload(s, p->features, it->features, (size_t)(T * C) * sizeof(float));
        choir_op_upload(s, p->text, it->text, (size_t)(L * d->text_dim) * sizeof(float));
        /* Anchor term: tanh(gate) * proj(embed[ids[alignment[t]]]). */
        choir_op_upload(s, e, host_t, (size_t)(T * d->anchor_dim) * sizeof(float));
        choir_op_linear(s, e, T, &d->anchor_proj, NULL, p->anchor);
        choir_op_scale(s, p->anchor, d->anchor_gate, T * D);
        choir_op_linear(s, p->text, L, &d->memory_proj, d->memory_proj_b, p->memory);
    }
    /* Each item's rows are at positions 0..T-1. */
    b->pos = choir_stream_alloc(s, (size_t)b->N * sizeof(int32_t), "sam positions");
    b->ws = choir_stream_floats(s, eval_floats(d, n, b->N, b->Tmax, b->Lmax, b->Lsum), "sam dit workspace");
    if (!b->pos || !b->ws) return choir_stream_status(s, err);
    int32_t *pos = (int32_t *)host_t;
    for (int i = 0, r = 0; i < n; i++)
        for (int64_t t = 0; t < items[i].frames; t++) pos[r++] = (int32_t)t;
    choir_op_upload(s, b->pos, pos, (size_t)b->N * sizeof(int32_t));
    return choir_stream_status(s, err);
}

/* y = w2(silu(w1 x) * w3 x) over `rows`, with temps a, b. */
static void swiglu(choir_stream *s, const choir_weight *w1, const choir_weight *w3, const choir_weight *w2,
                   const float *x, int64_t rows, float *a, float *b, float *y) {
    choir_op_linear(s, x, rows, w1, NULL, a);
    choir_op_linear(s, x, rows, w3, NULL, b);
    int64_t n = rows * w1->rows;
    choir_op_act(s, CHOIR_ACT_SILU, a, n, 0);
    choir_op_mul(s, a, b, a, n);
    choir_op_linear(s, a, rows, w2, NULL, y);
}

int sam_dit_eval(const choir_sam *m, choir_stream *s, const sam_batch *bt, const float *t,
                 const float *const *x_t, float *const *v) {
    const sam_dit *d = &m->dit;
    const sam_prep *p = bt->p;
    int n = bt->n;
    int64_t D = d->D, F = d->F, H = d->H, hd = d->hd, C2 = d->out_ch, IN = d->in_channels, FQ = d->freq_dim;
    int64_t N = bt->N, Tmax = bt->Tmax, Lmax = bt->Lmax, Lsum = bt->Lsum;
    float *x = bt->ws, *h = x + N * D, *q = h + N * D, *k = q + N * D, *vv = k + N * D, *att = vv + N * D,
          *o = att + N * D, *f1 = o + N * D, *f3 = f1 + N * F, *in = f3 + N * F;
    float *pa = in + N * IN, *pb = pa + D * Tmax;
    float *y = pb + D * Tmax, *mem = y + Lsum * D; /* text memory per item, and its input */
    float *ck = mem + Lsum * D, *cv = ck + Lmax * D, *ctmp = cv + Lmax * D;
    float *te = ctmp + Lmax * D, *t6 = te + n * D, *tf = t6 + n * 6 * D, *ta = tf + n * FQ, *tb = ta + n * D;
    float *mod = tb + n * D, *fin = mod + n * 6 * D, *sinD = fin + n * 2 * D;
    const choir_attn self = {(int)H, (int)H, hd, 1.0f / sqrtf((float)hd), false, CHOIR_DTYPE_F32};

    /* The t-sinusoids on the host: the 256-d cat(cos, sin) of the timestep
     * embedder and the D-wide one added to the text memory. */
    float *ht = bt->host_t;
    for (int i = 0; i < n; i++) {
        float *f = ht + i * FQ, *sd = ht + n * FQ + i * D;
        int64_t half = FQ / 2;
        for (int64_t j = 0; j < half; j++) {
            float w = expf(-logf(10000.0f) * (float)j / (float)half);
            f[j] = cosf(t[i] * w);
            f[half + j] = sinf(t[i] * w);
        }
        half = D / 2;
        for (int64_t c = 0; c < half; c++) {
            float w = expf(-logf(10000.0f) * (float)c / (float)half) * t[i];
            sd[c] = cosf(w);
            sd[half + c] = sinf(w);
        }
    }
    choir_op_upload(s, tf, ht, (size_t)(n * FQ) * sizeof(float));
    choir_op_upload(s, sinD, ht + n * FQ, (size_t)(n * D) * sizeof(float));

    /* Timestep embeddings te = SwiGLU(sinusoid) and adaLN inputs
     * t6 = t_block(silu(te)), all items at once. */
    swiglu(s, &d->t_w1, &d->t_w3, &d->t_w2, tf, n, ta, tb, te);
    choir_op_copy(s, ta, te, (size_t)(n * D) * sizeof(float));
    choir_op_act(s, CHOIR_ACT_SILU, ta, n * D, 0);
    choir_op_linear(s, ta, n, &d->t_block, d->t_block_b, t6);
    /* Text memory: y = SwiGLU(memory_proj(text) + sinusoid_D(t)). */
    for (int i = 0, l0 = 0; i < n; l0 += p[i].item.text_len, i++) {
        int64_t L = p[i].item.text_len;
        float *mi = mem + l0 * D;
        choir_op_copy(s, mi, p[i].memory, (size_t)(L * D) * sizeof(float));
        choir_op_add_bias_rows(s, mi, sinD + i * D, L, D);
        swiglu(s, &d->y_w1, &d->y_w3, &d->y_w2, mi, L, ck, cv, y + l0 * D);
    }
    /* Input projection and constant terms, then the patcher, per item. */
    int64_t C = C2 / 2;
    choir_op_zero(s, in, (size_t)(N * IN) * sizeof(float));
    for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++) {
        int64_t T = p[i].item.frames;
        float *xi = x + r0 * D, *ini = in + r0 * IN;
        choir_op_copy_rows(s, ini, IN, x_t[i], C2, T, C2);
        choir_op_copy_rows(s, ini + 2 * C2, IN, p[i].features, C, T, C);
        choir_op_copy_rows(s, ini + 2 * C2 + C, IN, p[i].features, C, T, C);
        choir_op_linear(s, ini, T, &d->proj, d->proj_b, xi);
        choir_op_add_bias_rows(s, xi, d->video_const_dev, T, D);
        choir_op_add(s, xi, p[i].anchor, xi, T * D);
        choir_op_transpose(s, xi, T, D, NULL, pa); /* [D, T] */
        choir_op_group_norm(s, pa, pb, 1, D, T, 1, d->gn1_w, d->gn1_b, 1e-5f);
        choir_op_act(s, CHOIR_ACT_SILU, pb, D * T, 0);
        choir_op_conv1d(s, pb, 1, D, T, d->pconv1_w, d->pconv1_b, D, 3, 1, 1, 1, 1, o);
        choir_op_group_norm(s, o, pb, 1, D, T, 1, d->gn2_w, d->gn2_b, 1e-5f);
        choir_op_act(s, CHOIR_ACT_SILU, pb, D * T, 0);
        choir_op_conv1d(s, pb, 1, D, T, d->pconv2_w, d->pconv2_b, D, 3, 1, 1, 1, 1, o);
        choir_op_add(s, o, pa, o, D * T);
        choir_op_transpose(s, o, D, T, NULL, xi);
    }
    for (int64_t li = 0; li < d->L; li++) {
        const sam_dit_layer *l = &d->layers[li];
        /* mod[i] = scale_shift_table + t6[i]: shift, scale, gate (msa), then (mlp). */
        choir_op_copy(s, mod, t6, (size_t)(n * 6 * D) * sizeof(float));
        choir_op_add_bias_rows(s, mod, l->table, n, 6 * D);
        /* Self-attention with adaLN. */
        choir_op_rms_norm(s, x, h, N, D, l->attn_norm, d->eps);
        for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++)
            choir_op_sam_modulate(s, h + r0 * D, p[i].item.frames, D, mod + i * 6 * D, mod + i * 6 * D + D);
        choir_op_linear(s, h, N, &l->wq, NULL, q);
        choir_op_linear(s, h, N, &l->wk, NULL, k);
        choir_op_linear(s, h, N, &l->wv, NULL, vv);
        choir_op_rms_norm(s, q, q, N * H, hd, l->q_norm, d->eps);
        choir_op_rms_norm(s, k, k, N * H, hd, l->k_norm, d->eps);
        choir_op_rope(s, q, N, D, (int)H, hd, hd, bt->pos, d->rope_theta, true);
        choir_op_rope(s, k, N, D, (int)H, hd, hd, bt->pos, d->rope_theta, true);
        for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++)
            choir_op_attention(s, q + r0 * D, D, k + r0 * D, D, vv + r0 * D, D, att + r0 * D, D, p[i].item.frames,
                               p[i].item.valid_frames, &self, NULL);
        choir_op_linear(s, att, N, &l->wo, NULL, o);
        for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++)
            choir_op_sam_gated_add(s, x + r0 * D, o + r0 * D, p[i].item.frames, D, mod + i * 6 * D + 2 * D);
        /* Cross-attention to the text, no norm or modulation before it. */
        choir_op_linear(s, x, N, &l->cq, NULL, q);
        choir_op_rms_norm(s, q, q, N * H, hd, l->cq_norm, d->eps);
        for (int i = 0, r0 = 0, l0 = 0; i < n; r0 += (int)p[i].item.frames, l0 += p[i].item.text_len, i++) {
            int64_t L = p[i].item.text_len;
            const float *yi = y + l0 * D;
            choir_op_linear(s, yi, L, &l->ck, NULL, ck);
            choir_op_linear(s, yi, L, &l->cv, NULL, cv);
            choir_op_rms_norm(s, ck, ck, L * H, hd, l->ck_norm, d->eps);
            choir_op_attention(s, q + r0 * D, D, ck, D, cv, D, att + r0 * D, D, p[i].item.frames, L, &self, NULL);
        }
        choir_op_linear(s, att, N, &l->co, NULL, o);
        choir_op_add(s, x, o, x, N * D);
        /* SwiGLU FFN with adaLN. */
        choir_op_rms_norm(s, x, h, N, D, l->ffn_norm, d->eps);
        for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++)
            choir_op_sam_modulate(s, h + r0 * D, p[i].item.frames, D, mod + i * 6 * D + 3 * D,
                                  mod + i * 6 * D + 4 * D);
        swiglu(s, &l->w1, &l->w3, &l->w2, h, N, f1, f3, o);
        for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++)
            choir_op_sam_gated_add(s, x + r0 * D, o + r0 * D, p[i].item.frames, D, mod + i * 6 * D + 5 * D);
    }
    /* Final: RMSNorm, modulation by final_table + te (not t6), projection. */
    for (int i = 0; i < n; i++) {
        choir_op_copy(s, fin + i * 2 * D, te + i * D, (size_t)D * sizeof(float));
        choir_op_copy(s, fin + i * 2 * D + D, te + i * D, (size_t)D * sizeof(float));
    }
    choir_op_add_bias_rows(s, fin, d->final_table, n, 2 * D);
    choir_op_rms_norm(s, x, h, N, D, d->norm, d->eps);
    for (int i = 0, r0 = 0; i < n; r0 += (int)p[i].item.frames, i++) {
        choir_op_sam_modulate(s, h + r0 * D, p[i].item.frames, D, fin + i * 2 * D, fin + i * 2 * D + D);
        choir_op_linear(s, h + r0 * D, p[i].item.frames, &d->output, NULL, v[i]);
    }
    return choir_stream_status(s, NULL);
}
