/* The Qwen2 language model over the state's KV cache: chunked prefill (audio
 * positions take the connector outputs of the encoded audio, in order) and
 * one-token steps. Each layer:
 *   h = x + o_proj(attention(rope(q(n)), rope(k(n)), v(n)))   n = rmsnorm(x)
 *   x = h + down(silu(gate(n')) * up(n'))                      n' = rmsnorm(h)
 * with grouped-query attention (n_heads / n_kv_heads queries share a key
 * and value head), causal over everything cached so far. */
#include <string.h>

#include "models/vibevoice/vv_state.h"

/* Runs `rows` embedded positions (in s->x) at positions n_past ... through
 * every layer and appends their keys and values to the cache. */
static void forward_rows(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t rows) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    int64_t H = L->hidden, D = L->head_dim, kvd = (int64_t)L->n_kv_heads * D, pos0 = s->n_past;
    for (int l = 0; l < L->n_layers; l++) {
        const vv_layer *w = &m->layers[l];
        float *kl = s->k_cache + (int64_t)l * s->ctx * kvd, *vl = s->v_cache + (int64_t)l * s->ctx * kvd;
        float *kc = kl + pos0 * kvd, *vc = vl + pos0 * kvd;
        vv_rmsnorm(s->x, s->xn, rows, H, w->attn_norm, L->eps);
        vv_linear(s->xn, rows, &w->q, w->q_bias, s->q);
        vv_linear(s->xn, rows, &w->k, w->k_bias, kc);
        vv_linear(s->xn, rows, &w->v, w->v_bias, vc);
        vv_rope(s->q, rows, L->n_heads, (int)D, pos0, m->inv_freq);
        vv_rope(kc, rows, L->n_kv_heads, (int)D, pos0, m->inv_freq);
        vv_attention(s->q, rows, kl, vl, pos0, L->n_heads, L->n_kv_heads, (int)D, s->att);
        vv_linear(s->att, rows, &w->o, NULL, s->tmp);
        vv_add_scaled(s->x, s->tmp, NULL, rows, H);
        vv_rmsnorm(s->x, s->xn, rows, H, w->mlp_norm, L->eps);
        vv_linear(s->xn, rows, &w->gate, NULL, s->gate);
        vv_linear(s->xn, rows, &w->up, NULL, s->up);
        vv_swiglu(s->gate, s->up, rows * L->intermediate);
        vv_linear(s->gate, rows, &w->down, NULL, s->tmp);
        vv_add_scaled(s->x, s->tmp, NULL, rows, H);
    }
    s->n_past += (int)rows;
}

/* Embeds ids[0..rows) into s->x: audio positions take the next latent
 * frames through the connectors, others the token embedding. */
static void embed_rows(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int64_t rows,
                       int audio) {
    int64_t H = m->dims.lm.hidden;
    for (int64_t r = 0; r < rows;) {
        int64_t run = 1;
        if (audio && ids[r] == m->dims.audio_token) {
            while (r + run < rows && ids[r + run] == m->dims.audio_token) run++;
            vv_connect_rows(m, s, s->audio_used, run, s->x + r * H);
            s->audio_used += run;
        } else {
            while (r + run < rows && !(audio && ids[r + run] == m->dims.audio_token)) run++;
            vv_embed(&m->embed, ids + r, (int)run, s->x + r * H);
        }
        r += run;
    }
}

/* Final norm of the last row and the output projection into s->logits. */
static void last_logits(const choir_vibevoice *m, choir_vibevoice_state *s, int64_t rows) {
    const choir_vibevoice_lm_dims *L = &m->dims.lm;
    vv_rmsnorm(s->x + (rows - 1) * L->hidden, s->xn, 1, L->hidden, m->final_norm, L->eps);
    vv_linear(s->xn, 1, &m->lm_head, NULL, s->logits);
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

int choir_vibevoice_prefill(const choir_vibevoice *m, choir_vibevoice_state *s, const int32_t *ids, int n,
                            float *logits, float *inputs_embeds, float *hidden_final, choir_err *err) {
    int rc = check_ids(m, s, ids, n, err);
    if (rc) return rc;
    int64_t audio = 0, H = m->dims.lm.hidden;
    for (int i = 0; i < n; i++) audio += ids[i] == m->dims.audio_token;
    if (audio && audio != s->n_frames - s->audio_used)
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: the prompt has %lld audio positions for %lld "
                             "encoded frames", (long long)audio, (long long)(s->n_frames - s->audio_used));
    for (int c0 = 0; c0 < n; c0 += s->prefill_chunk) {
        int64_t rows = n - c0 < s->prefill_chunk ? n - c0 : s->prefill_chunk;
        embed_rows(m, s, ids + c0, rows, 1);
        if (inputs_embeds) memcpy(inputs_embeds + (int64_t)c0 * H, s->x, (size_t)(rows * H) * sizeof(float));
        forward_rows(m, s, rows);
        if (hidden_final) {
            vv_rmsnorm(s->x, s->xn, rows, H, m->final_norm, m->dims.lm.eps);
            memcpy(hidden_final + (int64_t)c0 * H, s->xn, (size_t)(rows * H) * sizeof(float));
        }
        if (c0 + rows == n) last_logits(m, s, rows);
    }
    if (logits && logits != s->logits) memcpy(logits, s->logits, (size_t)m->dims.lm.vocab * sizeof(float));
    return 0;
}

int choir_vibevoice_step(const choir_vibevoice *m, choir_vibevoice_state *s, int32_t token, float *logits,
                         choir_err *err) {
    int rc = check_ids(m, s, &token, 1, err);
    if (rc) return rc;
    embed_rows(m, s, &token, 1, 0);
    forward_rows(m, s, 1);
    last_logits(m, s, 1);
    if (logits && logits != s->logits) memcpy(logits, s->logits, (size_t)m->dims.lm.vocab * sizeof(float));
    return 0;
}
