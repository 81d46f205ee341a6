/* `choir bench vibevoice`: VibeVoice-ASR speed and memory at a published size
 * (--dims 1.5b | 7b), on weights generated in memory (speed does not depend
 * on the values; nothing is downloaded). One request of --audio-min minutes
 * of noise: the encoders over the audio, the prefill of its prompt (the audio
 * tokens plus 64 text tokens), then --steps greedy decoding steps with the KV
 * cache. Prints load time (binding and converting the generated tensors),
 * encoder time, prefill and decode tokens per second, and peak memory
 * (counted by category, and the process's peak RSS). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "choir/alloc.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "choir/tensor.h"
#include "choir/vibevoice.h"
#include "cli/dev/dev.h"

typedef struct bv_weights {
    choir_st_tensor *t;
    char **names;
    int n, cap;
    choir_dtype dt; /* matrices */
    int bits;       /* > 0: the language model's linears MLX-quantized */
    uint64_t rng;
} bv_weights;

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
    w->n++;
    return t;
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
    void *d = (void *)t->data;
    for (int64_t i = 0; i < t->numel; i++) {
        float v = offset + scale * bv_uniform(w);
        if (dt == CHOIR_DTYPE_F32) ((float *)d)[i] = v;
        else if (dt == CHOIR_DTYPE_F16) ((uint16_t *)d)[i] = choir_f32_to_f16(v);
        else ((uint16_t *)d)[i] = choir_f32_to_bf16(v);
    }
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
    uint32_t *p = (uint32_t *)t->data;
    for (int64_t i = 0; i < t->numel; i++) p[i] = (uint32_t)(bv_uniform(w) * 2147483647.0f) ^ (uint32_t)w->rng;
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

static const choir_st_tensor *bv_find(void *ctx, const char *name) {
    bv_weights *w = ctx;
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return &w->t[i];
    return NULL;
}

static void bv_free(bv_weights *w) {
    for (int i = 0; i < w->n; i++) {
        choir_free((void *)w->t[i].data);
        choir_free(w->names[i]);
    }
    choir_free(w->t);
    choir_free(w->names);
}

static void bv_usage(FILE *f) {
    fprintf(f, "usage: choir bench vibevoice [--dims 1.5b|7b] [--audio-min M] [--steps N] [--dtype bf16|f32]\n"
               "                             [--q-bits 4|8] [--layers N] [--threads N] [--prefill-chunk N]\n\n"
               "VibeVoice-ASR on random weights at a published size (default 1.5b, 1 minute, 32 steps,\n"
               "bf16 matrices): load, encoder, prefill and decode speed and peak memory. --q-bits\n"
               "quantizes the language model as mlx-community does; --layers runs fewer LM layers\n"
               "(the printed figures then are for that depth).\n");
}

int choir_bench_vibevoice(int argc, char **argv) {
    const char *dims_name = "1.5b";
    double minutes = 1.0;
    int steps = 32, layers = 0, bits = 0, prefill_chunk = 0;
    choir_dtype dt = CHOIR_DTYPE_BF16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bv_usage(stdout);
            return 0;
        }
        if (!v) {
            bv_usage(stderr);
            return 2;
        }
        if (strcmp(a, "--dims") == 0) dims_name = v;
        else if (strcmp(a, "--audio-min") == 0) minutes = atof(v);
        else if (strcmp(a, "--steps") == 0) steps = atoi(v);
        else if (strcmp(a, "--layers") == 0) layers = atoi(v);
        else if (strcmp(a, "--q-bits") == 0) bits = atoi(v);
        else if (strcmp(a, "--prefill-chunk") == 0) prefill_chunk = atoi(v);
        else if (strcmp(a, "--threads") == 0) choir_pool_set_default_threads(atoi(v));
        else if (strcmp(a, "--dtype") == 0) {
            if (strcmp(v, "f32") == 0) dt = CHOIR_DTYPE_F32;
            else if (strcmp(v, "bf16") != 0) {
                bv_usage(stderr);
                return 2;
            }
        } else {
            bv_usage(stderr);
            return 2;
        }
        i++;
    }
    choir_err err = {0};
    choir_vibevoice_dims D;
    if (choir_vibevoice_dims_named(dims_name, &D, &err) || !(minutes > 0) || minutes > 90 || steps < 1 ||
        (bits && bits != 4 && bits != 8) || layers < 0) {
        fprintf(stderr, "choir bench vibevoice: %s\n", err.msg[0] ? err.msg : "bad option value");
        return 2;
    }
    if (layers > 0 && layers < D.lm.n_layers) D.lm.n_layers = layers;
    printf("VibeVoice-ASR %s: LM %d layers x %d (%d heads, %d kv), vocab %d, %s%s; encoders %d stages, "
           "%d filters\n", dims_name, D.lm.n_layers, D.lm.hidden, D.lm.n_heads, D.lm.n_kv_heads, D.lm.vocab,
           bits ? (bits == 8 ? "8-bit LM" : "4-bit LM") : dt == CHOIR_DTYPE_F32 ? "f32" : "bf16",
           D.lm.tied ? ", tied embedding" : "", D.acoustic.n_stages, D.acoustic.n_filters);
    printf("threads        %d\n", choir_pool_threads(choir_pool_default()));
    bv_weights w = {.dt = dt, .bits = bits, .rng = 0x243F6A8885A308D3ull};
    double t0 = choir_now_s();
    if (bv_generate(&w, &D)) {
        fprintf(stderr, "choir bench vibevoice: out of memory generating the weights\n");
        bv_free(&w);
        return 1;
    }
    double t1 = choir_now_s();
    choir_vibevoice *m = choir_vibevoice_from_tensors(bv_find, &w, &D, &err);
    double t2 = choir_now_s();
    int status = 0;
    float *x = NULL;
    int32_t *ids = NULL;
    choir_vibevoice_state *s = NULL;
    if (!m) goto fail;
    size_t wb = 0;
    for (int i = 0; i < w.n; i++) wb += w.t[i].nbytes;
    printf("weights        %.2f GB generated in %.1f s (%d tensors); load %.2f s (binding them, re-laying the "
           "convolution kernels; the model holds %.2f GB)\n", wb / 1e9, t1 - t0, w.n, t2 - t1,
           choir_vibevoice_weight_bytes(m) / 1e9);
    int64_t n = (int64_t)(minutes * 60.0 * CHOIR_VIBEVOICE_SAMPLE_RATE), np = choir_vibevoice_padded_len(n, D.hop);
    int T = (int)(np / D.hop), n_ids = T + 2 + 64;
    if (!(x = choir_alloc(CHOIR_MEM_IO, (size_t)np * sizeof *x)) ||
        !(ids = choir_alloc(CHOIR_MEM_IO, (size_t)n_ids * sizeof *ids))) {
        choir_err_set(&err, CHOIR_ENOMEM, "out of memory for the audio");
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) x[i] = 0.05f * bv_uniform(&w);
    choir_vibevoice_normalize(x, n, D.hop, x);
    /* The prompt's shape: 32 text tokens, the audio span, 32 text tokens. */
    for (int i = 0; i < n_ids; i++) ids[i] = 1000 + (i * 7919) % 100000;
    ids[32] = D.audio_bos;
    for (int i = 0; i < T; i++) ids[33 + i] = D.audio_token;
    ids[33 + T] = D.audio_eos;
    choir_vibevoice_plan plan = {.max_samples = np, .max_context = n_ids + steps + 1, .prefill_chunk = prefill_chunk};
    int64_t state_bytes = choir_vibevoice_plan_bytes(&D, &plan);
    if (!(s = choir_vibevoice_state_create(m, &plan, NULL, &err))) goto fail;
    double e0 = choir_now_s();
    if (choir_vibevoice_encode(m, s, x, np, 0, NULL, NULL, &err)) goto fail;
    double e1 = choir_now_s();
    printf("encoders       %.1f s of audio (%d frames) in %.2f s: %.1fx real time\n", minutes * 60, T, e1 - e0,
           minutes * 60 / (e1 - e0));
    if (choir_vibevoice_prefill(m, s, ids, n_ids, NULL, NULL, NULL, &err)) goto fail;
    double p1 = choir_now_s();
    printf("prefill        %d tokens in %.2f s: %.1f tokens/s (chunks of %d)\n", n_ids, p1 - e1, n_ids / (p1 - e1),
           prefill_chunk ? prefill_chunk : 256);
    const float *logits = choir_vibevoice_logits(s);
    for (int i = 0; i < steps; i++) {
        int best = 0;
        for (int v = 1; v < D.lm.vocab; v++)
            if (logits[v] > logits[best]) best = v;
        if (choir_vibevoice_step(m, s, best, NULL, &err)) goto fail;
    }
    double d1 = choir_now_s();
    printf("decode         %d steps at context %d..%d in %.2f s: %.2f tokens/s (%.1f ms/token)\n", steps, n_ids,
           n_ids + steps, d1 - p1, steps / (d1 - p1), 1000.0 * (d1 - p1) / steps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak memory    %.0f MB counted (%.0f MB weights, %.0f MB state planned, %.0f MB activations), "
           "%.0f MB RSS\n", (double)choir_mem_peak(CHOIR_MEM_COUNT) / 1e6, (double)choir_mem_peak(CHOIR_MEM_WEIGHTS) / 1e6,
           state_bytes / 1e6, (double)choir_mem_peak(CHOIR_MEM_ACTIVATIONS) / 1e6, (double)ru.ru_maxrss / 1024.0);
    goto done;
fail:
    fprintf(stderr, "choir bench vibevoice: %s\n", err.msg);
    status = 1;
done:
    choir_vibevoice_state_free(s);
    choir_free(ids);
    choir_free(x);
    choir_vibevoice_free(m);
    bv_free(&w);
    return status;
}
