/* One network evaluation of SAM-Audio: the input projection and its constant
 * terms, the DiT (patcher, L blocks of adaLN self-attention, text
 * cross-attention and SwiGLU FFN, the final modulated projection).
 *
 * A batch is ragged: item i has its own frames; row-wise layers (linears,
 * norms) run once over all items' rows concatenated, so the weights are read
 * once per batch; per-item work (GroupNorm over the whole item, the k3 convs,
 * attention, modulation with the item's own t) loops over items. Batched
 * results therefore equal each item alone.
 *
 * What depends only on the request (the anchor term, the text memory) is
 * computed once by sam_dit_prepare; each evaluation then builds the input
 * from x_t as the reference does (proj(cat[x_t, 0, A, A]) + video + anchor).
 * All buffers of an evaluation come from one workspace planned by
 * sam_dit_workspace, allocated once per ODE. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/kernels_ext.h"
#include "sam_dit.h"

int sam_dit_prepare(const choir_sam *m, const choir_sam_item *it, sam_prep *p, choir_err *err) {
    const sam_dit *d = &m->dit;
    int64_t D = d->D, T = it->frames, L = it->text_len;
    memset(p, 0, sizeof *p);
    if (T < 1 || it->valid_frames < 1 || it->valid_frames > T || T > d->max_pos)
        return choir_err_set(err, CHOIR_EINVAL, "sam-audio: %lld frames (valid %lld) outside 1..%lld", (long long)T,
                             (long long)it->valid_frames, (long long)d->max_pos);
    if (L < 1 || !it->text || !it->features) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: item without text or features");
    p->item = *it;
    p->anchor = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(T * D + L * D) * sizeof(float));
    if (!p->anchor) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
    p->memory = p->anchor + T * D;
    /* Anchor term: tanh(gate) * proj(embed[ids[alignment[t]]]). */
    float *e = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(T * d->anchor_dim) * sizeof(float));
    if (!e) {
        sam_dit_release(p);
        return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
    }
    for (int64_t t = 0; t < T; t++) {
        int32_t slot = it->anchor_alignment ? it->anchor_alignment[t] : (t < it->valid_frames ? 0 : 1);
        int32_t id;
        if (it->anchor_ids) {
            if (slot < 0 || slot >= it->n_anchor_ids) {
                choir_free(e);
                sam_dit_release(p);
                return choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchor slot %d out of range", (int)slot);
            }
            id = it->anchor_ids[slot];
        } else {
            id = slot == 0 ? 0 : 3; /* <null>, <pad> */
        }
        if (id < 0 || id >= d->n_anchor_rows) {
            choir_free(e);
            sam_dit_release(p);
            return choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchor id %d out of range", (int)id);
        }
        memcpy(e + t * d->anchor_dim, d->anchor_embed + id * d->anchor_dim, (size_t)d->anchor_dim * sizeof *e);
    }
    choir_linear(e, T, &d->anchor_proj, NULL, p->anchor);
    choir_scale(p->anchor, d->anchor_gate, T * D);
    choir_free(e);
    choir_linear(it->text, L, &d->memory_proj, d->memory_proj_b, p->memory);
    return 0;
}

void sam_dit_release(sam_prep *p) {
    choir_free(p->anchor);
    p->anchor = p->memory = NULL;
}

/* Floats of the workspace for a batch of n items. */
int64_t sam_dit_workspace(const choir_sam *m, const sam_prep *p, int n) {
    const sam_dit *d = &m->dit;
    int64_t N = 0, Tmax = 0, Lmax = 0;
    for (int i = 0; i < n; i++) {
        N += p[i].item.frames;
        if (p[i].item.frames > Tmax) Tmax = p[i].item.frames;
        if (p[i].item.text_len > Lmax) Lmax = p[i].item.text_len;
    }
    int64_t D = d->D, F = d->F;
    int64_t rows = N * (7 * D + 2 * F + d->in_channels);
    int64_t patch = 2 * D * Tmax;
    int64_t text = Lmax * 5 * D * n;
    int64_t small = n * (8 * D + d->freq_dim) + 2 * D;
    return rows + patch + text + small + 64;
}

/* 256-d (freq_dim) timestep sinusoid: cat(cos(t f), sin(t f)), f = 10000^(-i/half). */
static void timestep_freqs(float t, int64_t dim, float *out) {
    int64_t half = dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float f = expf(-logf(10000.0f) * (float)i / (float)half);
        out[i] = cosf(t * f);
        out[half + i] = sinf(t * f);
    }
}

static void swiglu(const choir_weight *w1, const choir_weight *w3, const choir_weight *w2, const float *x, int64_t rows,
                   float *a, float *b, float *y) {
    choir_linear(x, rows, w1, NULL, a);
    choir_linear(x, rows, w3, NULL, b);
    int64_t n = rows * w1->rows;
    choir_silu(a, n);
    choir_mul(a, b, a, n);
    choir_linear(a, rows, w2, NULL, y);
}

/* h[t,:] = x[t,:] * (1 + scale) + shift, in place. */
static void modulate(float *h, int64_t T, int64_t D, const float *shift, const float *scale) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < D; c++) h[t * D + c] = h[t * D + c] * (1.0f + scale[c]) + shift[c];
}

static void gated_add(float *x, const float *o, int64_t T, int64_t D, const float *gate) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < D; c++) x[t * D + c] += o[t * D + c] * gate[c];
}

static void transpose(const float *x, int64_t rows, int64_t cols, float *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
}

int sam_dit_eval(const choir_sam *m, const sam_prep *p, int n, const float *t, const float *const *x_t, float *const *v,
                 float *ws) {
    const sam_dit *d = &m->dit;
    int64_t D = d->D, F = d->F, H = d->H, hd = d->hd, C2 = d->out_ch, IN = d->in_channels;
    int64_t N = 0, Tmax = 0, Lmax = 0;
    for (int i = 0; i < n; i++) {
        N += p[i].item.frames;
        if (p[i].item.frames > Tmax) Tmax = p[i].item.frames;
        if (p[i].item.text_len > Lmax) Lmax = p[i].item.text_len;
    }
    float *x = ws, *h = x + N * D, *q = h + N * D, *k = q + N * D, *vv = k + N * D, *att = vv + N * D,
          *o = att + N * D, *f1 = o + N * D, *f3 = f1 + N * F, *in = f3 + N * F;
    float *pa = in + N * IN, *pb = pa + D * Tmax;
    float *y = pb + D * Tmax, *cy = y + n * Lmax * D;        /* text memory per item, and its temps */
    float *ck = cy + n * Lmax * D, *cv = ck + n * Lmax * D, *ca = cv + n * Lmax * D;
    float *te = ca + n * Lmax * D, *t6 = te + n * D, *tf = t6 + n * 6 * D, *tt = tf + n * d->freq_dim;
    const float qk_scale = 1.0f / sqrtf((float)hd);

    /* Timestep embeddings and adaLN inputs, per item. */
    for (int i = 0; i < n; i++) {
        timestep_freqs(t[i], d->freq_dim, tf + i * d->freq_dim);
        float *a = tt, *b = tt + D;
        choir_linear(tf + i * d->freq_dim, 1, &d->t_w1, NULL, a);
        choir_linear(tf + i * d->freq_dim, 1, &d->t_w3, NULL, b);
        choir_silu(a, D);
        choir_mul(a, b, a, D);
        choir_linear(a, 1, &d->t_w2, NULL, te + i * D);
        memcpy(a, te + i * D, (size_t)D * sizeof *a);
        choir_silu(a, D);
        choir_linear(a, 1, &d->t_block, d->t_block_b, t6 + i * 6 * D);
    }
    /* Text memory: y = SwiGLU(memory_proj(text) + sinusoid_D(t)). */
    for (int i = 0; i < n; i++) {
        int64_t L = p[i].item.text_len, half = D / 2;
        float *mem = cy + i * Lmax * D;
        for (int64_t j = 0; j < L; j++)
            for (int64_t c = 0; c < half; c++) {
                float f = expf(-logf(10000.0f) * (float)c / (float)half) * t[i];
                mem[j * D + c] = p[i].memory[j * D + c] + cosf(f);
                mem[j * D + half + c] = p[i].memory[j * D + half + c] + sinf(f);
            }
        swiglu(&d->y_w1, &d->y_w3, &d->y_w2, mem, L, ck, cv, y + i * Lmax * D);
    }
    /* Input projection and constant terms, then the patcher, per item. */
    int64_t C = C2 / 2;
    for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
        int64_t T = p[i].item.frames;
        float *xi = x + r0 * D, *ini = in + r0 * IN;
        for (int64_t tt2 = 0; tt2 < T; tt2++) {
            float *row = ini + tt2 * IN;
            memcpy(row, x_t[i] + tt2 * C2, (size_t)C2 * sizeof *row);
            memset(row + C2, 0, (size_t)C2 * sizeof *row);
            memcpy(row + 2 * C2, p[i].item.features + tt2 * C, (size_t)C * sizeof *row);
            memcpy(row + 2 * C2 + C, p[i].item.features + tt2 * C, (size_t)C * sizeof *row);
        }
        choir_linear(ini, T, &d->proj, d->proj_b, xi);
        choir_add_bias_rows(xi, d->video_const, T, D);
        choir_add(xi, p[i].anchor, xi, T * D);
        transpose(xi, T, D, pa); /* [D, T] */
        choir_group_norm(pa, pb, D, T, 1, d->gn1_w, d->gn1_b, 1e-5f);
        choir_silu(pb, D * T);
        choir_conv1d(pb, D, T, d->pconv1_w, d->pconv1_b, D, 3, 1, 1, 1, 1, o);
        choir_group_norm(o, pb, D, T, 1, d->gn2_w, d->gn2_b, 1e-5f);
        choir_silu(pb, D * T);
        choir_conv1d(pb, D, T, d->pconv2_w, d->pconv2_b, D, 3, 1, 1, 1, 1, o);
        choir_add(o, pa, o, D * T);
        transpose(o, D, T, xi);
    }
    for (int64_t li = 0; li < d->L; li++) {
        const sam_dit_layer *l = &d->layers[li];
        /* Self-attention with adaLN. */
        choir_rms_norm(x, D, h, D, N, D, l->attn_norm, d->eps);
        for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
            const float *m6 = t6 + i * 6 * D;
            float *shift = tt, *scale = tt + D;
            for (int64_t c = 0; c < D; c++) shift[c] = l->table[c] + m6[c], scale[c] = l->table[D + c] + m6[D + c];
            modulate(h + r0 * D, p[i].item.frames, D, shift, scale);
        }
        choir_linear(h, N, &l->wq, NULL, q);
        choir_linear(h, N, &l->wk, NULL, k);
        choir_linear(h, N, &l->wv, NULL, vv);
        choir_rms_norm(q, hd, q, hd, N * H, hd, l->q_norm, d->eps);
        choir_rms_norm(k, hd, k, hd, N * H, hd, l->k_norm, d->eps);
        for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
            int64_t T = p[i].item.frames;
            choir_rope_interleaved(q + r0 * D, D, T, (int)H, hd, d->rope_cos, d->rope_sin, 0);
            choir_rope_interleaved(k + r0 * D, D, T, (int)H, hd, d->rope_cos, d->rope_sin, 0);
            choir_attention(q + r0 * D, D, k + r0 * D, D, vv + r0 * D, D, att + r0 * D, D, T, p[i].item.valid_frames,
                            (int)H, hd, qk_scale, NULL, false);
        }
        choir_linear(att, N, &l->wo, NULL, o);
        for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
            const float *m6 = t6 + i * 6 * D;
            float *g = tt;
            for (int64_t c = 0; c < D; c++) g[c] = l->table[2 * D + c] + m6[2 * D + c];
            gated_add(x + r0 * D, o + r0 * D, p[i].item.frames, D, g);
        }
        /* Cross-attention to the text, no norm or modulation before it. */
        choir_linear(x, N, &l->cq, NULL, q);
        choir_rms_norm(q, hd, q, hd, N * H, hd, l->cq_norm, d->eps);
        for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
            int64_t L = p[i].item.text_len;
            const float *yi = y + i * Lmax * D;
            choir_linear(yi, L, &l->ck, NULL, ck);
            choir_linear(yi, L, &l->cv, NULL, cv);
            choir_rms_norm(ck, hd, ck, hd, L * H, hd, l->ck_norm, d->eps);
            choir_attention(q + r0 * D, D, ck, D, cv, D, att + r0 * D, D, p[i].item.frames, L, (int)H, hd, qk_scale, NULL,
                            false);
        }
        choir_linear(att, N, &l->co, NULL, o);
        choir_add(x, o, x, N * D);
        /* SwiGLU FFN with adaLN. */
        choir_rms_norm(x, D, h, D, N, D, l->ffn_norm, d->eps);
        for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
            const float *m6 = t6 + i * 6 * D;
            float *shift = tt, *scale = tt + D;
            for (int64_t c = 0; c < D; c++)
                shift[c] = l->table[3 * D + c] + m6[3 * D + c], scale[c] = l->table[4 * D + c] + m6[4 * D + c];
            modulate(h + r0 * D, p[i].item.frames, D, shift, scale);
        }
        swiglu(&l->w1, &l->w3, &l->w2, h, N, f1, f3, o);
        for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
            const float *m6 = t6 + i * 6 * D;
            float *g = tt;
            for (int64_t c = 0; c < D; c++) g[c] = l->table[5 * D + c] + m6[5 * D + c];
            gated_add(x + r0 * D, o + r0 * D, p[i].item.frames, D, g);
        }
    }
    /* Final: RMSNorm, modulation by final_table + te (not t6), projection. */
    choir_rms_norm(x, D, h, D, N, D, d->norm, d->eps);
    for (int i = 0, r0 = 0; i < n; r0 += p[i].item.frames, i++) {
        float *shift = tt, *scale = tt + D;
        for (int64_t c = 0; c < D; c++)
            shift[c] = d->final_table[c] + te[i * D + c], scale[c] = d->final_table[D + c] + te[i * D + c];
        modulate(h + r0 * D, p[i].item.frames, D, shift, scale);
        choir_linear(h + r0 * D, p[i].item.frames, &d->output, NULL, v[i]);
    }
    return 0;
}

int choir_sam_velocity(const choir_sam *m, const choir_sam_item *items, int n, const float *t,
                       const float *const *x, float *const *v, choir_err *err) {
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty batch");
    sam_prep *p = choir_calloc(CHOIR_MEM_ACTIVATIONS, (size_t)n, sizeof *p);
    if (!p) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) rc = sam_dit_prepare(m, &items[i], &p[i], err);
    float *ws = NULL;
    if (!rc) {
        ws = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)sam_dit_workspace(m, p, n) * sizeof(float));
        if (!ws) rc = choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory for the DiT workspace");
    }
    if (!rc) rc = sam_dit_eval(m, p, n, t, x, v, ws);
    choir_free(ws);
    for (int i = 0; i < n; i++) sam_dit_release(&p[i]);
    choir_free(p);
    return rc;
}
