/* The Qwen2 language model over the state's KV cache: chunked prefill (audio
 * positions take the connector outputs of the encoded audio, in order) and
 * one-token steps. Each layer:
 *   h = x + o_proj(attention(rope(q(n)), rope(k(n)), v(n)))   n = rmsnorm(x)
 *   x = h + down(silu(gate(n')) * up(n'))                      n' = rmsnorm(h)
 * with grouped-query attention (n_heads / n_kv_heads queries share a key
 * and value head), causal over everything cached so far. */
#include <string.h>

#include "choir/backend_vibevoice.h"
#include "models/vibevoice/vv_state.h"

/* Positions n_past .. n_past + rows - 1 into s->pos (backend memory). */
static void put_positions(choir_vibevoice_state *s, int64_t rows) {
    int32_t *p = s->host ? s->pos : s->pos_host;
    for (int64_t r = 0; r < rows; r++) p[r] = (int32_t)(s->n_past + r);
    if (!s->host) choir_op_upload(s->stream, s->pos, p, (size_t)rows * sizeof *p);
}

/* n = RMSNorm(x), q, k, v = n W^T + bias: one operation. */
static void layer_norm_qkv(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, const float *x, float *xn,
                           int64_t rows, float *q, float *k, float *v) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_norm_linear p = {.ln_g = w->attn_norm, .eps = L->eps, .rms = true, .n = 3,
                           .W = {&w->q, &w->k, &w->v}, .bias = {w->q_bias, w->k_bias, w->v_bias},
                           .y = {q, k, v}};
    choir_op_norm_linear(st, x, rows, &p, xn);
}

void vv_layer_qkv(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, const float *x, float *xn,
                  int64_t rows, const int32_t *pos, float *q, float *k, float *v) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    int64_t D = L->head_dim;
    layer_norm_qkv(m, w, st, x, xn, rows, q, k, v);
    choir_op_rope(st, q, rows, (int64_t)L->n_heads * D, L->n_heads, D, 0, pos, (float)L->rope_theta, false);
    choir_op_rope(st, k, rows, (int64_t)L->n_kv_heads * D, L->n_kv_heads, D, 0, pos, (float)L->rope_theta, false);
}

void vv_layer_qkv_store(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, const float *x, float *xn,
                        int64_t rows, const int32_t *pos, float *q, float *k, float *v, const choir_rows_out *kout,
                        const choir_rows_out *vout) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    int64_t D = L->head_dim, kvd = (int64_t)L->n_kv_heads * D;
    if (choir_vv_rope_kv_on()) {
        /* The rotations and the two scatters in one operation (one kernel
         * on CUDA instead of four a layer), the same floats. */
        layer_norm_qkv(m, w, st, x, xn, rows, q, k, v);
        choir_op_rope_kv_rows(st, q, k, v, rows, L->n_heads, L->n_kv_heads, D, pos, (float)L->rope_theta, kout,
                              vout);
        return;
    }
    vv_layer_qkv(m, w, st, x, xn, rows, pos, q, k, v);
    choir_op_rows_scatter(st, k, rows, kvd, kout->dst, kout->dtype, kout->slot_stride, kout->ld, kout->slot,
                          kout->pos);
    choir_op_rows_scatter(st, v, rows, kvd, vout->dst, vout->dtype, vout->slot_stride, vout->ld, vout->slot,
                          vout->pos);
}

void vv_layer_mlp(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, float *x, float *xn,
                  const float *att, int64_t rows, float *gate, float *up, float *tmp) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_op_linear_ex(st, att, rows, &w->o, NULL, x, CHOIR_LINEAR_ACCUMULATE, tmp);
    choir_op_gated_mlp(st, x, rows, w->mlp_norm, L->eps, &w->gate, &w->up, &w->down, gate, up, xn, tmp);
}

void vv_lm_head(const choir_vibevoice *m, choir_stream *st, const float *x, float *xn, int64_t rows,
                float *logits) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_norm_linear p = {.ln_g = m->final_norm, .eps = L->eps, .rms = true, .n = 1, .W = {&m->lm_head},
                           .y = {logits}};
    choir_op_norm_linear(st, x, rows, &p, xn);
}

/* vv_layer_qkv for a prefill chunk, through choir_op_norm_qkv_rope: the
 * same operations, or on CUDA with CHOIR_VV_PREFILL_FUSED=1 (weights bound
 * grouped, vv_bind_backend) q, k and v as one product with the biases and
 * rotations in one pass after it. The decode steps keep vv_layer_qkv. */
static void layer_qkv_rows(const choir_vibevoice *m, const vv_layer *w, choir_stream *st, const float *x,
                           float *xn, int64_t rows, const int32_t *pos, float *q, float *k, float *v) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_norm_linear p = {.ln_g = w->attn_norm, .eps = L->eps, .rms = true, .n = 3,
                           .W = {&w->q, &w->k, &w->v}, .bias = {w->q_bias, w->k_bias, w->v_bias},
                           .y = {q, k, v}};
    choir_op_norm_qkv_rope(st, x, rows, &p, xn, L->n_heads, L->n_kv_heads, L->head_dim, pos, (float)L->rope_theta);
}

/* Runs `rows` embedded positions (in s->x) at positions n_past ... through
 * every layer and appends their keys and values to the cache. */
static void forward_rows(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t rows) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_stream *st = s->stream;
    int64_t D = L->head_dim, kvd = (int64_t)L->n_kv_heads * D;
    int64_t pos0 = s->n_past;
    put_positions(s, rows);
    if (s->pool) {
        vv_paged_hold(s, pos0 + rows);
        vv_paged_slots(s, rows);
    }
    for (int l = 0; l < L->n_layers; l++) {
        const vv_layer *w = &m->layers[l];
        float *kl = NULL, *vl = NULL, *kc, *vc;
        void *kp = NULL, *vp = NULL;
        if (s->pool) {
            /* The new rows in s->gate (free until the MLP), then into their pages. */
            kp = vv_pool_k(s, l), vp = vv_pool_v(s, l), kc = s->gate, vc = s->gate + rows * kvd;
        } else {
            kl = s->k_cache + (int64_t)l * s->ctx * kvd, vl = s->v_cache + (int64_t)l * s->ctx * kvd;
            kc = kl + pos0 * kvd, vc = vl + pos0 * kvd;
        }
        layer_qkv_rows(m, w, st, s->x, s->xn, rows, s->pos, s->q, kc, vc);
        if (s->pool) {
            choir_op_rows_scatter(st, kc, rows, kvd, kp, s->pool->kv, 0, kvd, s->zeros, s->slots);
            choir_op_rows_scatter(st, vc, rows, kvd, vp, s->pool->kv, 0, kvd, s->zeros, s->slots);
            choir_op_attention_paged_kv(st, s->q, rows, kp, vp, s->pool->kv, s->table, pos0, L->n_heads,
                                        L->n_kv_heads, (int)D, s->att);
        } else {
            choir_op_attention_cached(st, s->q, rows, kl, vl, pos0, L->n_heads, L->n_kv_heads, (int)D, s->att);
        }
        vv_layer_mlp(m, w, st, s->x, s->xn, s->att, rows, s->gate, s->up, s->tmp);
    }
    s->n_past += (int)rows;
}

/* Embeds ids[0..rows) (host) into s->x: audio positions take the next
 * latent frames through the connectors, others the token embedding. */
static void embed_rows(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int64_t rows,
                       int audio) {
    int64_t H = m->dims.lm.hidden;
    choir_op_upload(s->stream, s->ids, ids, (size_t)rows * sizeof *ids);
    for (int64_t r = 0; r < rows;) {
        int64_t run = 1;
        if (audio && ids[r] == m->dims.audio_token) {
            while (r + run < rows && ids[r + run] == m->dims.audio_token) run++;
            vv_connect_rows(m, s, s->audio_used, run, s->x + r * H);
            s->audio_used += run;
        } else {
            while (r + run < rows && !(audio && ids[r + run] == m->dims.audio_token)) run++;
            choir_op_rows_gather(s->stream, &m->embed, s->ids + r, run, s->x + r * H);
        }
        r += run;
    }
}

/* Final norm of the last row and the output projection into s->logits,
 * then to the caller's copy. */
static void last_logits(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t rows) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    vv_lm_head(m, s->stream, s->x + (rows - 1) * L->hidden, s->xn, 1, s->logits);
    if (!s->host)
        choir_op_download(s->stream, s->logits_host, s->logits, (size_t)L->vocab * sizeof(float));
}

static int check_ids(const choir_vibevoice *m, const choir_vibevoice_state *s, const int32_t *ids, int n,
                     choir_err *err) {
    if (n <= 0) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: no tokens");
    if ((int64_t)s->n_past + n > s->ctx)
        return choir_err_set(err, CHOIR_ETOOBIG, "vibevoice: %d + %d tokens pass the planned context of %d",
                             s->n_past, n, s->ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->dims.lm.vocab)
            return choir_err_set(err, CHOIR_EINVAL, "vibevoice: token %d outside the vocabulary of %d",
                                 (int)ids[i], m->dims.lm.vocab);
    return 0;
}

/* The prompt's checks before its first chunk: the ids, and as many audio
 * positions as encoded frames not yet used, when any appear. */
static int check_prompt(const choir_vibevoice *m, const choir_vibevoice_state *s, const int32_t *ids, int n,
                        choir_err *err) {
    int rc = check_ids(m, s, ids, n, err);
    if (rc) return rc;
    int64_t audio = 0;
    for (int i = 0; i < n; i++) audio += ids[i] == m->dims.audio_token;
    if (audio && audio != s->n_frames - s->audio_used)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: the prompt has %lld audio positions for %lld "
                             "encoded frames", (long long)audio, (long long)(s->n_frames - s->audio_used));
    return 0;
}

/* Rows c0 .. c0 + rows - 1 of the prompt ids[n] (one chunk) through the
 * model; the last position's logits after the last chunk. */
static int prefill_chunk(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int n, int c0,
                         float *inputs_embeds, float *hidden_final, choir_err *err) {
    int64_t H = m->dims.lm.hidden;
    int64_t rows = n - c0 < s->prefill_chunk ? n - c0 : s->prefill_chunk;
    embed_rows(m, s, ids + c0, rows, 1);
    if (inputs_embeds)
        choir_op_download(s->stream, inputs_embeds + (int64_t)c0 * H, s->x, (size_t)(rows * H) * sizeof(float));
    forward_rows(m, s, rows);
    if (hidden_final) {
        choir_op_rms_norm(s->stream, s->x, s->xn, rows, H, m->final_norm, m->dims.lm.eps);
        choir_op_download(s->stream, hidden_final + (int64_t)c0 * H, s->xn, (size_t)(rows * H) * sizeof(float));
    }
    if (c0 + rows == n) last_logits(m, s, rows);
    return vv_status(s, err);
}

int vv_prefill_next(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int n, int *done,
                    choir_err *err) {
    int rc = *done == 0 ? check_prompt(m, s, ids, n, err) : 0;
    if (rc) return rc;
    if ((rc = prefill_chunk(m, s, ids, n, *done, NULL, NULL, err))) return rc;
    *done += n - *done < s->prefill_chunk ? n - *done : s->prefill_chunk;
    return *done < n;
}

int choir_vibevoice_prefill(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int n,
                            float *logits, float *inputs_embeds, float *hidden_final, choir_err *err) {
    int rc = check_prompt(m, s, ids, n, err);
    if (rc) return rc;
    for (int c0 = 0; c0 < n; c0 += s->prefill_chunk)
        if ((rc = prefill_chunk(m, s, ids, n, c0, inputs_embeds, hidden_final, err))) return rc;
    if (logits && logits != s->logits_host)
        memcpy(logits, s->logits_host, (size_t)m->dims.lm.vocab * sizeof(float));
    return 0;
}

/* One decoding step with nothing taken from the host: the token is ids[0],
 * its position pos[0] (backend memory, uploaded before), which also places
 * the new key and value rows in the cache (rows_scatter) and bounds the
 * attention (attention_cached_at over the planned context), so the same
 * operations serve every step and can be recorded once as a graph. A paged
 * state reads the pool row of its new keys from slots[0] and its pages from
 * its table (both uploaded before, so a replay sees new pages too). The new
 * rows pass through s->gate before they join the cache. Ends with the
 * logits in s->logits. */
static void step_ops(const choir_vibevoice *m, choir_vibevoice_state *s) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    choir_stream *st = s->stream;
    int64_t D = L->head_dim, kvd = (int64_t)L->n_kv_heads * D;
    float *kn = s->gate, *vn = s->gate + kvd;
    choir_op_rows_gather(st, &m->embed, s->ids, 1, s->x);
    for (int l = 0; l < L->n_layers; l++) {
        const vv_layer *w = &m->layers[l];
        void *kp = s->pool ? vv_pool_k(s, l) : NULL, *vp = s->pool ? vv_pool_v(s, l) : NULL;
        float *kl = s->pool ? NULL : s->k_cache + (int64_t)l * s->ctx * kvd;
        float *vl = s->pool ? NULL : s->v_cache + (int64_t)l * s->ctx * kvd;
        /* The new rows to pool row slots[0], or to row pos[0] of the layer's cache. */
        choir_rows_out ko = {s->pool ? kp : (void *)kl, s->pool ? s->pool->kv : CHOIR_DTYPE_F32, 0, kvd, s->zeros,
                             s->pool ? s->slots : s->pos};
        choir_rows_out vo = ko;
        vo.dst = s->pool ? vp : (void *)vl;
        vv_layer_qkv_store(m, w, st, s->x, s->xn, 1, s->pos, s->q, kn, vn, &ko, &vo);
        if (s->pool)
            choir_op_attention_paged_at_kv(st, s->q, 1, kp, vp, s->pool->kv, s->table, 0, s->pos, s->ctx,
                                           L->n_heads, L->n_kv_heads, (int)D, s->att);
        else
            choir_op_attention_cached_at(st, s->q, 1, kl, vl, s->pos, s->ctx, L->n_heads, L->n_kv_heads, (int)D,
                                         s->att);
        vv_layer_mlp(m, w, st, s->x, s->xn, s->att, 1, s->gate, s->up, s->tmp);
    }
    vv_lm_head(m, st, s->x, s->xn, 1, s->logits);
}

int choir_vibevoice_step(const choir_vibevoice *m, choir_vibevoice_state *s, int32_t token, float *logits,
                         choir_err *err) {
    int rc = check_ids(m, s, &token, 1, err);
    if (rc) return rc;
    choir_stream *st = s->stream;
    int32_t pos = s->n_past;
    choir_op_upload(st, s->ids, &token, sizeof token);
    choir_op_upload(st, s->pos, &pos, sizeof pos);
    if (s->pool) {
        vv_paged_hold(s, s->n_past + 1);
        vv_paged_slots(s, 1);
    }
    s->step_graph_last = 0;
    if (s->step_graph) {
        choir_stream_graph_launch(st, s->step_graph);
        s->step_graph_last = 1;
    } else if (s->step_graph_on && !s->host && s->owns_stream && !s->step_graph_failed && s->step_direct > 0) {
        /* The second step records (the first sized the kernels' scratch). */
        choir_err gerr = {0};
        if (choir_stream_graph_begin(st, &gerr) == 0) {
            step_ops(m, s);
            s->step_graph = choir_stream_graph_end(st, &gerr);
        }
        if (s->step_graph) {
            choir_stream_graph_launch(st, s->step_graph);
            s->step_graph_last = 1;
        } else {
            s->step_graph_failed = 1;
            step_ops(m, s);
            s->step_direct++;
        }
    } else {
        step_ops(m, s);
        s->step_direct++;
    }
    if (!s->host) choir_op_download(st, s->logits_host, s->logits, (size_t)m->dims.lm.vocab * sizeof(float));
    if ((rc = vv_status(s, err))) return rc;
    s->n_past++;
    if (logits && logits != s->logits_host)
        memcpy(logits, s->logits_host, (size_t)m->dims.lm.vocab * sizeof(float));
    return 0;
}

void choir_vibevoice_set_step_graph(choir_vibevoice_state *s, bool on) {
    if (!on) {
        choir_graph_free(s->step_graph);
        s->step_graph = NULL;
    }
    s->step_graph_on = on;
    s->step_graph_failed = 0;
}

bool choir_vibevoice_step_graphed(const choir_vibevoice_state *s) { return s->step_graph_last; }
