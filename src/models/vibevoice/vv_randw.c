/* Random VibeVoice-ASR weights at any dimensions, in memory, under
 * transformers' names (choir/vibevoice.h: choir_vibevoice_randw_*): what
 * `choir bench vibevoice` and the GPU check build models from. Uniform
 * values scaled like an initialised network (matrices 1/sqrt(fan-in), norms
 * near 1, layer scales near 0.05) so activations stay finite through every
 * layer; MLX codes with plausible scales when the LM is quantized. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "choir/vibevoice.h"

struct choir_vibevoice_randw {
    choir_st_tensor *t;
    char **names;
    int n, cap;
    choir_dtype dt; /* matrices */
    int bits;       /* > 0: the language model's linears MLX-quantized */
    uint64_t rng;
    size_t bytes;
};
typedef struct choir_vibevoice_randw bv_weights;

static float bv_uniform(bv_weights *w) {
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return (float)((w->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static choir_st_tensor *bv_new(bv_weights *w, choir_dtype dt, int ndim, const int64_t *shape, const char *name) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 512;
        choir_st_tensor *t = choir_realloc(w->t, (size_t)cap * sizeof *t);
        if (t) w->t = t;
        char **nm = t ? choir_realloc(w->names, (size_t)cap * sizeof *nm) : NULL;
        if (!nm) return NULL;
        w->names = nm;
        w->cap = cap;
    }
    choir_st_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i], t->numel *= shape[i];
    t->nbytes = (size_t)t->numel * choir_dtype_size(dt);
    void *data = choir_alloc(CHOIR_MEM_WEIGHTS, t->nbytes);
    w->names[w->n] = choir_strdup(name);
    if (!data || !w->names[w->n]) return NULL;
    t->name = w->names[w->n];
    t->data = data;
    w->bytes += t->nbytes;
    w->n++;
    return t;
}

/* A tensor's values come in blocks of BV_BLOCK elements, each block from
 * its own generator seeded from the tensor's seed and the block's index, so
 * the blocks fill in parallel on the default pool and the values do not
 * depend on the number of threads. */
#define BV_BLOCK ((int64_t)1 << 16)

typedef struct bv_fill {
    void *data;
    int64_t numel;
    uint64_t seed;
    choir_dtype dt; /* F32/F16/BF16: offset + scale * uniform; U32: random codes */
    float scale, offset;
} bv_fill;

static uint64_t bv_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) | 1;
}

static void bv_fill_blocks(void *ctx, int64_t b0, int64_t b1, int worker) {
    (void)worker;
    const bv_fill *f = ctx;
    for (int64_t b = b0; b < b1; b++) {
        bv_weights g = {.rng = bv_mix(f->seed ^ ((uint64_t)b * 0xD1B54A32D192ED03ull))};
        int64_t i1 = (b + 1) * BV_BLOCK < f->numel ? (b + 1) * BV_BLOCK : f->numel;
        for (int64_t i = b * BV_BLOCK; i < i1; i++) {
            float u = bv_uniform(&g), v = f->offset + f->scale * u;
            if (f->dt == CHOIR_DTYPE_U32) ((uint32_t *)f->data)[i] = (uint32_t)(g.rng >> 32);
            else if (f->dt == CHOIR_DTYPE_F32) ((float *)f->data)[i] = v;
            else if (f->dt == CHOIR_DTYPE_F16) ((uint16_t *)f->data)[i] = choir_f32_to_f16(v);
            else ((uint16_t *)f->data)[i] = choir_f32_to_bf16(v);
        }
    }
}

/* Fills tensor t (its dtype) from the next seed of w's generator. */
static void bv_fill_tensor(bv_weights *w, choir_st_tensor *t, float scale, float offset) {
    bv_uniform(w);
    bv_fill f = {(void *)t->data, t->numel, w->rng, t->dtype, scale, offset};
    choir_pool_parallel_for(choir_pool_default(), (t->numel + BV_BLOCK - 1) / BV_BLOCK, 4, bv_fill_blocks, &f);
}

/* A float tensor: offset + scale * uniform, in dt. */
static int bv_add(bv_weights *w, choir_dtype dt, float scale, float offset, int ndim, const int64_t *shape,
                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int bv_add(bv_weights *w, choir_dtype dt, float scale, float offset, int ndim, const int64_t *shape,
                  const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    choir_st_tensor *t = bv_new(w, dt, ndim, shape, name);
    if (!t) return -1;
    bv_fill_tensor(w, t, scale, offset);
    return 0;
}

static int bv_vec(bv_weights *w, int64_t n, float scale, float offset, const char *name) {
    int64_t s[1] = {n};
    return bv_add(w, CHOIR_DTYPE_F32, scale, offset, 1, s, "%s", name);
}

/* A linear layer `base`.weight [rows, cols]: in w->dt, or random MLX codes
 * (group 64) when quant. */
static int bv_mat(bv_weights *w, int64_t rows, int64_t cols, int quant, const char *base) {
    char n[300];
    int64_t s[2] = {rows, cols};
    snprintf(n, sizeof n, "%s.weight", base);
    if (!quant) return bv_add(w, w->dt, 1.0f / sqrtf((float)cols), 0.0f, 2, s, "%s", n);
    int64_t g = 64, ps[2] = {rows, choir_quant_packed_cols(cols, w->bits)}, ss[2] = {rows, cols / g};
    choir_st_tensor *t = bv_new(w, CHOIR_DTYPE_U32, 2, ps, n);
    if (!t) return -1;
    bv_fill_tensor(w, t, 0.0f, 0.0f);
    float step = 2.0f / sqrtf((float)cols) / (float)(1 << w->bits);
    snprintf(n, sizeof n, "%s.scales", base);
    if (bv_add(w, CHOIR_DTYPE_BF16, 0.1f * step, step, 2, ss, "%s", n)) return -1;
    snprintf(n, sizeof n, "%s.biases", base);
    return bv_add(w, CHOIR_DTYPE_BF16, 0.1f * step, -step * (float)(1 << (w->bits - 1)), 2, ss, "%s", n);
}

static int bv_encoder(bv_weights *w, const choir_vibevoice_enc_dims *d, const char *e) {
    char p[200], b[300];
    int rc = 0;
    for (int s = 0; s < d->n_stages && !rc; s++) {
        int64_t C = (int64_t)d->n_filters << s, cin = s ? C / 2 : 1, k = s ? 2 * d->ratios[s - 1] : 7;
        int64_t cs[3] = {C, cin, k};
        if (s) snprintf(p, sizeof p, "model.%s_tokenizer_encoder.conv_layers.%d", e, s - 1);
        else snprintf(p, sizeof p, "model.%s_tokenizer_encoder.stem", e);
        rc |= bv_add(w, w->dt, 1.0f / sqrtf((float)(cin * k)), 0.0f, 3, cs, "%s.conv.conv.weight", p);
        snprintf(b, sizeof b, "%s.conv.conv.bias", p);
        rc |= bv_vec(w, C, 0.02f, 0.0f, b);
        for (int i = 0; i < d->depths[s] && !rc; i++) {
            char q[300];
            snprintf(q, sizeof q, "%s.stage.%d", p, i);
            int64_t F = C * d->ffn_mult, ms[3] = {C, 1, 7};
            const char *v1[4] = {"gamma", "ffn_gamma", "norm.weight", "ffn_norm.weight"};
            float off[4] = {0.05f, 0.05f, 1.0f, 1.0f};
            for (int j = 0; j < 4; j++) {
                snprintf(b, sizeof b, "%s.%s", q, v1[j]);
                rc |= bv_vec(w, C, 0.01f, off[j], b);
            }
            rc |= bv_add(w, w->dt, 0.3f, 0.0f, 3, ms, "%s.mixer.conv.weight", q);
            snprintf(b, sizeof b, "%s.mixer.conv.bias", q);
            rc |= bv_vec(w, C, 0.02f, 0.0f, b);
            snprintf(b, sizeof b, "%s.ffn.linear1", q);
            rc |= bv_mat(w, F, C, 0, b);
            snprintf(b, sizeof b, "%s.ffn.linear1.bias", q);
            rc |= bv_vec(w, F, 0.02f, 0.0f, b);
            snprintf(b, sizeof b, "%s.ffn.linear2", q);
            rc |= bv_mat(w, C, F, 0, b);
            snprintf(b, sizeof b, "%s.ffn.linear2.bias", q);
            rc |= bv_vec(w, C, 0.02f, 0.0f, b);
        }
    }
    int64_t Cl = (int64_t)d->n_filters << (d->n_stages - 1), hs[3] = {d->vae_dim, Cl, 7};
    rc |= bv_add(w, w->dt, 1.0f / sqrtf((float)(Cl * 7)), 0.0f, 3, hs, "model.%s_tokenizer_encoder.head.conv.weight", e);
    snprintf(b, sizeof b, "model.%s_tokenizer_encoder.head.conv.bias", e);
    return rc | bv_vec(w, d->vae_dim, 0.02f, 0.0f, b);
}

static int bv_generate(bv_weights *w, const choir_vibevoice_dims *D) {
    const choir_vibevoice_lm_dims *L = &D->lm;
    int rc = bv_encoder(w, &D->acoustic, "acoustic") | bv_encoder(w, &D->semantic, "semantic");
    const char *enc[2] = {"acoustic", "semantic"};
    int vae[2] = {D->acoustic.vae_dim, D->semantic.vae_dim};
    char b[300];
    for (int e = 0; e < 2 && !rc; e++) {
        snprintf(b, sizeof b, "model.multi_modal_projector.%s_linear_1", enc[e]);
        rc |= bv_mat(w, L->hidden, vae[e], 0, b);
        snprintf(b, sizeof b, "model.multi_modal_projector.%s_linear_1.bias", enc[e]);
        rc |= bv_vec(w, L->hidden, 0.02f, 0.0f, b);
        snprintf(b, sizeof b, "model.multi_modal_projector.%s_norm.weight", enc[e]);
        rc |= bv_vec(w, L->hidden, 0.1f, 1.0f, b);
        snprintf(b, sizeof b, "model.multi_modal_projector.%s_linear_2", enc[e]);
        rc |= bv_mat(w, L->hidden, L->hidden, 0, b);
        snprintf(b, sizeof b, "model.multi_modal_projector.%s_linear_2.bias", enc[e]);
        rc |= bv_vec(w, L->hidden, 0.02f, 0.0f, b);
    }
    int q = w->bits > 0;
    int64_t H = L->hidden, qd = (int64_t)L->n_heads * L->head_dim, kvd = (int64_t)L->n_kv_heads * L->head_dim;
    rc |= bv_mat(w, L->vocab, H, q, "model.language_model.embed_tokens");
    for (int i = 0; i < L->n_layers && !rc; i++) {
        char p[200];
        snprintf(p, sizeof p, "model.language_model.layers.%d", i);
        const char *proj[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        int64_t rows[7] = {qd, kvd, kvd, H, L->intermediate, L->intermediate, H};
        int64_t cols[7] = {H, H, H, qd, H, H, L->intermediate};
        for (int k = 0; k < 7; k++) {
            snprintf(b, sizeof b, "%s.%s", p, proj[k]);
            rc |= bv_mat(w, rows[k], cols[k], q, b);
            if (k < 3) {
                snprintf(b, sizeof b, "%s.%s.bias", p, proj[k]);
                rc |= bv_vec(w, rows[k], 0.02f, 0.0f, b);
            }
        }
        snprintf(b, sizeof b, "%s.input_layernorm.weight", p);
        rc |= bv_vec(w, H, 0.1f, 1.0f, b);
        snprintf(b, sizeof b, "%s.post_attention_layernorm.weight", p);
        rc |= bv_vec(w, H, 0.1f, 1.0f, b);
    }
    rc |= bv_vec(w, H, 0.1f, 1.0f, "model.language_model.norm.weight");
    if (!L->tied) rc |= bv_mat(w, L->vocab, H, q, "lm_head");
    return rc;
}

const choir_st_tensor *choir_vibevoice_randw_find(void *ctx, const char *name) {
    bv_weights *w = ctx;
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return &w->t[i];
    return NULL;
}

void choir_vibevoice_randw_free(choir_vibevoice_randw *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        choir_free((void *)w->t[i].data);
        choir_free(w->names[i]);
    }
    choir_free(w->t);
    choir_free(w->names);
    choir_free(w);
}


choir_vibevoice_randw *choir_vibevoice_randw_create(const choir_vibevoice_dims *dims, choir_dtype dtype, int q_bits,
                                                    uint64_t seed, choir_err *err) {
    if (dtype != CHOIR_DTYPE_F32 && dtype != CHOIR_DTYPE_F16 && dtype != CHOIR_DTYPE_BF16) {
        choir_err_set(err, CHOIR_EINVAL, "vibevoice randw: matrices in f32, f16 or bf16");
        return NULL;
    }
    if (q_bits && q_bits != 4 && q_bits != 8) {
        choir_err_set(err, CHOIR_EINVAL, "vibevoice randw: %d-bit codes (4 or 8)", q_bits);
        return NULL;
    }
    bv_weights *w = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *w);
    if (!w) {
        choir_err_set(err, CHOIR_ENOMEM, "vibevoice randw: out of memory");
        return NULL;
    }
    w->dt = dtype;
    w->bits = q_bits;
    w->rng = seed ? seed : 0x243F6A8885A308D3ull;
    if (bv_generate(w, dims)) {
        choir_vibevoice_randw_free(w);
        choir_err_set(err, CHOIR_ENOMEM, "vibevoice randw: out of memory generating the weights");
        return NULL;
    }
    return w;
}

size_t choir_vibevoice_randw_bytes(const choir_vibevoice_randw *w) { return w->bytes; }
int choir_vibevoice_randw_count(const choir_vibevoice_randw *w) { return w->n; }
float choir_vibevoice_randw_uniform(choir_vibevoice_randw *w) { return bv_uniform(w); }
