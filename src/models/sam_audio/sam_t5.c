/* The T5 text encoder (transformers' T5EncoderModel) and its Unigram
 * tokenizer (loaded by sam_t5_load.c from the folder a user brings beside
 * the SAM checkpoint: config.json, model.safetensors, tokenizer.json).
 *
 * Encoder layer: x += o(attn(RMS(x))) with unscaled scores plus a learned
 * relative-position bias (layer 0's table, shared by all layers); then
 * x += wo(relu(wi(RMS(x)))) (v1.1's gated-gelu also read). RMS is T5's
 * LayerNorm: no mean, no bias, eps from the config. The text of a request is
 * encoded once, unpadded (padding would not change the valid rows). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/kernels.h"
#include "choir/kernels_ext.h"
#include "sam_internal.h"

void sam_t5_free(sam_t5 *t5) {
    choir_unigram_free(t5->tok);
    t5->tok = NULL;
}

/* A T5 built in memory (sam_random.c) comes without a tokenizer.json: each
 * byte of the text is a token, 2 + byte % (vocab - 2), and </s> (1) closes
 * it, truncated to max_length as the real tokenizer's output is. */
static int byte_tokens(const choir_sam *m, const char *text, int32_t **ids, int *n_ids, choir_err *err) {
    size_t len = strlen(text);
    int n = (int)(len + 1 < (size_t)m->t5.max_length ? len + 1 : (size_t)m->t5.max_length);
    int64_t span = m->t5.vocab > 2 ? m->t5.vocab - 2 : 1;
    if (!(*ids = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof **ids)))
        return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory for %d token ids", n);
    for (int i = 0; i < n - 1; i++) (*ids)[i] = (int32_t)(2 + (unsigned char)text[i] % span);
    (*ids)[n - 1] = 1;
    *n_ids = n;
    return 0;
}

int choir_sam_tokenize(const choir_sam *m, const char *text, int32_t **ids, int *n_ids, choir_err *err) {
    if (!m->has_t5) return choir_err_set(err, CHOIR_ENOTFOUND, "sam-audio: no T5 text encoder loaded (put it in DIR/t5)");
    if (!text) text = "";
    if (!m->t5.tok) return byte_tokens(m, text, ids, n_ids, err);
    int rc = choir_unigram_encode(m->t5.tok, text, strlen(text), ids, n_ids, err);
    if (rc) return rc;
    /* truncation=True, max_length: keep the head, then the closing token. */
    if (*n_ids > m->t5.max_length) {
        int32_t eos = choir_unigram_eos_id(m->t5.tok);
        *n_ids = m->t5.max_length;
        if (eos >= 0) (*ids)[*n_ids - 1] = eos;
    }
    for (int i = 0; i < *n_ids; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= m->t5.vocab) {
            int32_t bad = (*ids)[i];
            choir_free(*ids);
            *ids = NULL;
            return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: token id %d is outside T5's vocabulary", bad);
        }
    return 0;
}

/* transformers' bidirectional bucket of relative position j - i, computed in
 * float32 as torch does, so the log-spaced boundaries fall the same way. */
static int t5_bucket(int rel, int buckets, int max_distance) {
    int nb = buckets / 2;
    int ret = rel > 0 ? nb : 0;
    int n = rel < 0 ? -rel : rel;
    int max_exact = nb / 2;
    if (n < max_exact) return ret + n;
    float v = logf((float)n / (float)max_exact) / (float)log((double)max_distance / max_exact) * (float)(nb - max_exact);
    int large = max_exact + (int)v;
    if (large > nb - 1) large = nb - 1;
    return ret + large;
}

/* Floats of T5's working memory for n tokens: the normed input, q, k, v,
 * the heads' output, the FFN's two halves, the position bias [H, n, n]. */
static size_t t5_floats(const sam_t5 *t, int n) {
    int64_t inner = t->n_heads * t->d_kv;
    return (size_t)n * (size_t)(t->d + 4 * inner + 2 * t->d_ff) + (size_t)(t->n_heads * n * n);
}

/* The most kernel scratch one of T5's kernel calls over n tokens takes: a
 * head's attention scores, a linear of a stored (not f32) dtype. */
static size_t t5_scratch(const sam_t5 *t, int n) {
    size_t most = choir_attention_scratch_bytes(n, n);
    for (int64_t L = 0; L < t->n_layers; L++) {
        const sam_t5_layer *l = &t->layers[L];
        const choir_weight *ws[] = {&l->q, &l->k, &l->v, &l->o, &l->wi, &l->wi1, &l->wo};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            size_t b = ws[i]->rows > 0 ? choir_linear_scratch_bytes(n, ws[i]) : 0;
            if (b > most) most = b;
        }
    }
    return most;
}

size_t sam_t5_bytes(const choir_sam *m, int n) {
    if (!m->has_t5 || n < 1) return 0;
    return sam_up(t5_floats(&m->t5, n) * sizeof(float)) + sam_up(t5_scratch(&m->t5, n));
}

int choir_sam_text_features(const choir_sam *m, const int32_t *ids, int n, float *out, choir_err *err) {
    if (!m->has_t5) return choir_err_set(err, CHOIR_ENOTFOUND, "sam-audio: no T5 text encoder loaded");
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty token list");
    choir_arena *a = choir_arena_create(sam_t5_bytes(m, n), CHOIR_MEM_ACTIVATIONS, err);
    if (!a) return choir_err_prefix(err, "sam-audio: T5");
    int rc = sam_t5_in(m, a, ids, n, out, err);
    choir_arena_free(a);
    return rc;
}

/* T5 runs on the host with the kernels directly (a few tokens, once per
 * request); their scratch is a block of the arena bound to this thread for
 * the call. */
int sam_t5_in(const choir_sam *m, choir_arena *arena, const int32_t *ids, int n, float *out, choir_err *err) {
    if (!m->has_t5) return choir_err_set(err, CHOIR_ENOTFOUND, "sam-audio: no T5 text encoder loaded");
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty token list");
    const sam_t5 *t = &m->t5;
    int64_t d = t->d, H = t->n_heads, dk = t->d_kv, inner = H * dk, ff = t->d_ff;
    size_t mark = choir_arena_mark(arena), sb = t5_scratch(t, n);
    float *buf = choir_arena_alloc(arena, t5_floats(t, n) * sizeof(float));
    choir_kernel_scratch ks = {.base = sb ? choir_arena_alloc(arena, sb) : NULL, .bytes = sb};
    if (!buf || (sb && !ks.base)) {
        choir_arena_release(arena, mark);
        return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: the arena has no room for T5 over %d tokens (%zu of %zu used)",
                             n, choir_arena_used(arena), choir_arena_capacity(arena));
    }
    choir_kernel_scratch *prev = choir_kernels_bind_scratch(&ks);
    float *h = buf, *q = h + n * d, *k = q + n * inner, *v = k + n * inner, *att = v + n * inner;
    float *f1 = att + n * inner, *f2 = f1 + n * ff, *bias = f2 + n * ff;
    for (int i = 0; i < n; i++) memcpy(out + i * d, t->embed + (int64_t)ids[i] * d, (size_t)d * sizeof *out);
    /* Position bias [H, n, n], shared by all layers. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int b = t5_bucket(j - i, t->buckets, t->max_distance);
            for (int64_t hh = 0; hh < H; hh++) bias[(hh * n + i) * n + j] = t->rel_bias[b * H + hh];
        }
    for (int64_t L = 0; L < t->n_layers; L++) {
        const sam_t5_layer *l = &t->layers[L];
        choir_rms_norm(out, d, h, d, n, d, l->ln1, t->eps);
        choir_linear(h, n, &l->q, NULL, q);
        choir_linear(h, n, &l->k, NULL, k);
        choir_linear(h, n, &l->v, NULL, v);
        for (int64_t hh = 0; hh < H; hh++)
            choir_attention(q + hh * dk, inner, k + hh * dk, inner, v + hh * dk, inner, att + hh * dk, inner, n, n, 1, dk,
                            1.0f, bias + hh * n * n, false);
        choir_linear(att, n, &l->o, NULL, h);
        choir_add(out, h, out, n * d);
        choir_rms_norm(out, d, h, d, n, d, l->ln2, t->eps);
        choir_linear(h, n, &l->wi, NULL, f1);
        if (t->gated) {
            choir_gelu_tanh(f1, n * ff);
            choir_linear(h, n, &l->wi1, NULL, f2);
            choir_mul(f1, f2, f1, n * ff);
        } else {
            choir_relu(f1, n * ff);
        }
        choir_linear(f1, n, &l->wo, NULL, h);
        choir_add(out, h, out, n * d);
    }
    choir_rms_norm(out, d, out, d, n, d, t->final_ln, t->eps);
    choir_kernels_bind_scratch(prev);
    choir_arena_release(arena, mark);
    return 0;
}
