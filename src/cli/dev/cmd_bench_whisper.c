/* `choir bench whisper`: Whisper speed at the real model sizes, on weights
 * generated in memory (no download; speed does not depend on the values).
 *
 * --backend cuda attaches the model to a GPU and prints the same figures,
 * plus, from the same run, the card's measured ceilings (a large bf16 matmul
 * and a device-to-device copy, choir_cuda_measure_ceilings) and what the
 * encoder and decoder achieve against them: TFLOP/s from the matmul FLOPs of
 * the encoder (convolutions, projections, attention, MLP) and GB/s from the
 * weight bytes one decoder step reads. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/mel.h"
#include "choir/pool.h"
#include "choir/quant.h"
#include "choir/tensor.h"
#include "choir/whisper.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"
#include "models/whisper/whisper_internal.h"
#ifdef CHOIR_HAVE_CUDA
#include "choir/cuda.h"
#endif

#define BW_MAX_BATCH 64

typedef struct bw_size {
    const char *name;
    int n_mels, d, enc_layers, dec_layers, heads, vocab;
} bw_size;

static const bw_size SIZES[] = {
    {"tiny", 80, 384, 4, 4, 6, 51865},         {"base", 80, 512, 6, 6, 8, 51865},
    {"small", 80, 768, 12, 12, 12, 51865},     {"medium", 80, 1024, 24, 24, 16, 51865},
    {"large-v3", 128, 1280, 32, 32, 20, 51866}, {"large-v3-turbo", 128, 1280, 32, 4, 20, 51866},
};

/* The generated checkpoint: HF names, matrices in `dtype`, vectors in f32. */
typedef struct bw_weights {
    choir_st_tensor *t;
    char **names;
    int n, cap;
} bw_weights;

static uint64_t g_rng = 0x243F6A8885A308D3ull;

static float bw_uniform(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static int bw_add(bw_weights *w, choir_dtype dt, float scale, float offset, int ndim, int64_t d0,
                  int64_t d1, int64_t d2, const char *fmt, ...) __attribute__((format(printf, 9, 10)));
static int bw_add(bw_weights *w, choir_dtype dt, float scale, float offset, int ndim, int64_t d0,
                  int64_t d1, int64_t d2, const char *fmt, ...) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 256;
        choir_st_tensor *t = choir_realloc(w->t, (size_t)cap * sizeof *t);
        if (t) w->t = t;
        char **nm = t ? choir_realloc(w->names, (size_t)cap * sizeof *nm) : NULL;
        if (!nm) return -1;
        w->names = nm;
        w->cap = cap;
    }
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    choir_st_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->numel = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
    t->nbytes = (size_t)t->numel * choir_dtype_size(dt);
    void *data = choir_alloc(CHOIR_MEM_WEIGHTS, t->nbytes);
    w->names[w->n] = choir_strdup(name);
    if (!data || !w->names[w->n]) return -1;
    t->name = w->names[w->n];
    t->data = data;
    for (int64_t i = 0; i < t->numel; i++) {
        float v = offset + scale * bw_uniform();
        if (dt == CHOIR_DTYPE_F32) ((float *)data)[i] = v;
        else if (dt == CHOIR_DTYPE_F16) ((uint16_t *)data)[i] = choir_f32_to_f16(v);
        else ((uint16_t *)data)[i] = choir_f32_to_bf16(v);
    }
    w->n++;
    return 0;
}

static const choir_st_tensor *bw_find(void *ctx, const char *name) {
    bw_weights *w = ctx;
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return &w->t[i];
    return NULL;
}

static void bw_free(bw_weights *w) {
    for (int i = 0; i < w->n; i++) {
        choir_free((void *)w->t[i].data);
        choir_free(w->names[i]);
    }
    choir_free(w->t);
    choir_free(w->names);
}

static int bw_block(bw_weights *w, choir_dtype dt, const char *stack, int i, int d, bool dec) {
    float s = 1.0f / sqrtf((float)d);
    const char *mods[2] = {"self_attn", "encoder_attn"};
    const char *lns[3] = {"self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"};
    int rc = 0;
    for (int a = 0; a < (dec ? 2 : 1); a++) {
        const char *proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int p = 0; p < 4; p++) {
            rc |= bw_add(w, dt, s, 0, 2, d, d, 0, "%s.layers.%d.%s.%s.weight", stack, i, mods[a], proj[p]);
            if (p != 1)
                rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "%s.layers.%d.%s.%s.bias",
                             stack, i, mods[a], proj[p]);
        }
    }
    for (int l = 0; l < 3; l++) {
        if (l == 1 && !dec) continue;
        rc |= bw_add(w, CHOIR_DTYPE_F32, 0.1f, 1.0f, 1, d, 0, 0, "%s.layers.%d.%s.weight", stack, i, lns[l]);
        rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "%s.layers.%d.%s.bias", stack, i, lns[l]);
    }
    rc |= bw_add(w, dt, s, 0, 2, 4 * d, d, 0, "%s.layers.%d.fc1.weight", stack, i);
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, 4 * d, 0, 0, "%s.layers.%d.fc1.bias", stack, i);
    rc |= bw_add(w, dt, 0.5f * s, 0, 2, d, 4 * d, 0, "%s.layers.%d.fc2.weight", stack, i);
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "%s.layers.%d.fc2.bias", stack, i);
    return rc;
}

static int bw_generate(bw_weights *w, const bw_size *z, choir_dtype dt) {
    int d = z->d, rc = 0;
    float s = 1.0f / sqrtf((float)d);
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.1f, 0, 3, d, z->n_mels, 3, "model.encoder.conv1.weight");
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "model.encoder.conv1.bias");
    rc |= bw_add(w, CHOIR_DTYPE_F32, s, 0, 3, d, d, 3, "model.encoder.conv2.weight");
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "model.encoder.conv2.bias");
    rc |= bw_add(w, CHOIR_DTYPE_F32, 1.0f, 0, 2, 1500, d, 0, "model.encoder.embed_positions.weight");
    for (int i = 0; i < z->enc_layers && !rc; i++) rc |= bw_block(w, dt, "model.encoder", i, d, false);
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.1f, 1.0f, 1, d, 0, 0, "model.encoder.layer_norm.weight");
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "model.encoder.layer_norm.bias");
    rc |= bw_add(w, dt, 0.5f, 0, 2, z->vocab, d, 0, "model.decoder.embed_tokens.weight");
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.1f, 0, 2, 448, d, 0, "model.decoder.embed_positions.weight");
    for (int i = 0; i < z->dec_layers && !rc; i++) rc |= bw_block(w, dt, "model.decoder", i, d, true);
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.1f, 1.0f, 1, d, 0, 0, "model.decoder.layer_norm.weight");
    rc |= bw_add(w, CHOIR_DTYPE_F32, 0.02f, 0, 1, d, 0, 0, "model.decoder.layer_norm.bias");
    return rc;
}

/* --quant BITS: every matrix the loader reads as a linear layer (attention
 * projections, fc1/fc2, the token embedding that is also the output
 * projection) becomes MLX's affine layout in place: packed uint32 codes under
 * the same name plus `.scales` / `.biases` in `sb` (the 16-bit dtype of the
 * weights, f16 for f32), as `choir convert --q-bits` writes them. */
static bool bw_is_linear(const char *name) {
    static const char *ends[] = {"_proj.weight", "fc1.weight", "fc2.weight", "embed_tokens.weight"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        size_t k = strlen(ends[i]);
        if (n >= k && strcmp(name + n - k, ends[i]) == 0) return true;
    }
    return false;
}

static int bw_quantize(bw_weights *w, int bits, int group, choir_dtype sb, choir_err *err) {
    int n0 = w->n;
    for (int i = 0; i < n0; i++) {
        if (w->t[i].ndim != 2 || !bw_is_linear(w->t[i].name)) continue;
        choir_st_tensor t = w->t[i];
        int64_t rows = t.shape[0], cols = t.shape[1], pc = choir_quant_packed_cols(cols, bits);
        float *f = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)t.numel * sizeof(float));
        uint32_t *packed = choir_alloc(CHOIR_MEM_WEIGHTS, (size_t)(rows * pc) * sizeof(uint32_t));
        if (!f || !packed) {
            choir_free(f);
            choir_free(packed);
            return choir_err_set(err, CHOIR_ENOMEM, "out of memory quantizing %s", t.name);
        }
        for (int64_t j = 0; j < t.numel; j++) {
            const void *d = t.data;
            f[j] = t.dtype == CHOIR_DTYPE_F32   ? ((const float *)d)[j]
                   : t.dtype == CHOIR_DTYPE_F16 ? choir_f16_to_f32(((const uint16_t *)d)[j])
                                                : choir_bf16_to_f32(((const uint16_t *)d)[j]);
        }
        /* scales and biases: [rows, cols / group], filled by the quantizer */
        int rc = bw_add(w, sb, 0, 0, 2, rows, cols / group, 0, "%.*s.scales",
                        (int)(strlen(t.name) - strlen(".weight")), t.name);
        rc = rc ? rc
                : bw_add(w, sb, 0, 0, 2, rows, cols / group, 0, "%.*s.biases",
                         (int)(strlen(t.name) - strlen(".weight")), t.name);
        if (rc) {
            choir_free(f);
            choir_free(packed);
            return choir_err_set(err, CHOIR_ENOMEM, "out of memory quantizing %s", t.name);
        }
        choir_st_tensor *sc = &w->t[w->n - 2], *bi = &w->t[w->n - 1], *q = &w->t[i];
        rc = choir_quantize(f, rows, cols, bits, group, sb, packed, (void *)sc->data,
                            (void *)bi->data, err);
        choir_free(f);
        if (rc) {
            choir_free(packed);
            return rc;
        }
        choir_free((void *)q->data);
        q->data = packed;
        q->dtype = CHOIR_DTYPE_U32;
        q->shape[1] = pc;
        q->numel = rows * pc;
        q->nbytes = (size_t)q->numel * sizeof(uint32_t);
    }
    return 0;
}

/* Decoder speed: `batch` sequences on one window, `steps` tokens each. */
/* Logits in choir_whisper_logits_alloc's memory (pinned on a GPU) or, with
 * `pageable`, in ordinary memory (the download then goes through the
 * runtime's staging). */
/* The log-mels of n windows of pcm (the long form's next batch, computed on
 * a thread of its own while the device works, as the pipeline does). */
typedef struct {
    const float *pcm;
    int n, n_mels, rc;
    float *mel;
    choir_err err;
} bw_mels;

static void bw_mels_main(void *arg) {
    bw_mels *j = arg;
    j->rc = 0;
    for (int i = 0; i < j->n && !j->rc; i++)
        j->rc = choir_whisper_log_mel(j->pcm, CHOIR_WHISPER_N_SAMPLES, j->n_mels,
                                      j->mel + (size_t)i * j->n_mels * CHOIR_WHISPER_N_FRAMES,
                                      CHOIR_WHISPER_N_FRAMES, &j->err);
}

static int bw_decoder(const choir_whisper *m, const choir_whisper_cross *cross, int batch, int steps,
                      bool pageable, double *ms_per_step) {
    choir_err err;
    const choir_whisper_specials *sp = choir_whisper_get_specials(m);
    int V = choir_whisper_get_dims(m)->n_vocab, rc = 0;
    choir_whisper_seq *seqs[BW_MAX_BATCH] = {0};
    int32_t tok[BW_MAX_BATCH * 4];
    int n[BW_MAX_BATCH];
    float *logits = pageable
                        ? choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)batch * (size_t)V * sizeof(float))
                        : choir_whisper_logits_alloc(m, batch);
    if (!logits) return -1;
    for (int b = 0; b < batch; b++) {
        if (!(seqs[b] = choir_whisper_seq_create(m, 0, &err))) rc = -1;
        else choir_whisper_seq_reset(seqs[b], cross);
        int32_t start[4] = {sp->sot, sp->lang0, sp->transcribe, sp->no_timestamps};
        memcpy(tok + 4 * b, start, sizeof start);
        n[b] = 4;
    }
    if (!rc) rc = choir_whisper_decode(m, seqs, batch, tok, n, false, logits, &err);
    double t0 = choir_now_s();
    for (int s = 0; s < steps && !rc; s++) {
        for (int b = 0; b < batch; b++) {
            tok[b] = 1000 + (s * 7 + b * 13) % 20000;
            n[b] = 1;
        }
        rc = choir_whisper_decode(m, seqs, batch, tok, n, false, logits, &err);
    }
    *ms_per_step = (choir_now_s() - t0) * 1000.0 / steps;
    for (int b = 0; b < batch; b++) choir_whisper_seq_free(seqs[b]);
    if (pageable) choir_free(logits);
    else choir_whisper_logits_free(m, logits);
    if (rc) fprintf(stderr, "choir bench whisper: %s\n", err.msg);
    return rc;
}

/* Matmul FLOPs of one encoder window: the two convolutions, then per layer
 * the four projections, attention's two products and the MLP. */
static double bw_encoder_flops(const choir_whisper_dims *D) {
    double d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES, ffn = D->ffn_dim;
    double conv = 2.0 * d * D->n_mels * 3 * F + 2.0 * d * d * 3 * A;
    double layer = 4 * 2.0 * A * d * d + 2 * 2.0 * A * A * d + 2 * 2.0 * A * d * ffn;
    return conv + D->n_audio_layer * layer;
}

/* Matmul FLOPs of one decoder token at position `pos`: per layer six d x d
 * projections (self q, k, v, o; cross q, o), the MLP and attention over pos
 * cached and A cross keys; then the output projection. */
static double bw_token_flops(const choir_whisper_dims *D, int pos) {
    double d = D->d_model, A = D->n_audio_ctx, ffn = D->ffn_dim;
    double layer = 6 * 2.0 * d * d + 2 * 2.0 * d * ffn + 2 * 2.0 * (pos + 1) * d + 2 * 2.0 * A * d;
    return D->n_text_layer * layer + 2.0 * d * D->n_vocab;
}

/* Bytes one batch-1 decoder step at position `pos` must read from memory:
 * every decoder matrix and the tied token embedding (the output
 * projection) in their storage, the cross-attention K/V of the window (in
 * the cache's dtype, cross_kv) and the self-attention cache as the model
 * holds them (the same dtype on the CPU: m->cache_kv), plus the small
 * vectors (biases, norms, one positional row). What lies in the caches
 * between steps is not subtracted: this is the streaming bound. */
static double bw_step_bytes(const choir_whisper *m, choir_dtype cross_kv, int pos,
                            double *weights, double *kv) {
    const choir_whisper_dims *D = choir_whisper_get_dims(m);
    double d = D->d_model, w = (double)choir_weight_bytes(&m->tok_emb), vec = 0;
    for (int l = 0; l < D->n_text_layer; l++) {
        const wh_block *b = &m->dec[l];
        const choir_weight *mats[8] = {&b->attn.q, &b->attn.k, &b->attn.v, &b->attn.o,
                                       &b->cross.q, &b->cross.o, &b->fc1, &b->fc2};
        for (int i = 0; i < 8; i++) w += (double)choir_weight_bytes(mats[i]);
        vec += (4 * 2 + 3 * 2) * d + D->ffn_dim + d; /* attention biases, norms, fc biases */
    }
    double cross = D->n_text_layer * 2.0 * D->n_audio_ctx * d * (double)wh_kv_size(cross_kv);
    double self = D->n_text_layer * 2.0 * (pos + 1) * d * (double)wh_kv_size(cross_kv);
    vec = (vec + 3 * d) * sizeof(float);
    if (weights) *weights = w;
    if (kv) *kv = cross + self;
    return w + cross + self + vec;
}

/* --rules-only: the host's share of a decoder step, the decoding rules on
 * random logits [rows, V] (no network). Per step every row gets fresh logits
 * (untimed: on a GPU the download writes them), then the rules run: the old
 * way (the row copied to its hypothesis, filters, argmax and log-sum-exp in
 * separate passes, beam top-K in K passes), the new way one row after the
 * other, and the new way over the compute pool. Each row's history grows by
 * its pick (greedy: argmax; beam: the best of its top K) and restarts after
 * 48 tokens or at eot, so the timestamp rules see pairs, runs and the first
 * token; all three ways see the same histories and must pick the same. */
typedef struct bw_rules_run {
    choir_whisper_filter f;
    int V, rows, K; /* K: beam candidates per row, 0 for greedy */
    float *src;     /* [64, V] random logits */
    float *batch;   /* [rows, V] this step's logits */
    float *own;     /* [rows, V] the old per-hypothesis copies */
    int32_t *tok;   /* [rows, 64] histories */
    int *n_tok;
    wr_pick *pick;
    int *top;       /* [rows, K] */
    double *scratch; /* [V] */
} bw_rules_run;

static void bw_rules_row(bw_rules_run *r, int64_t i, int way) {
    float *l = r->batch + i * r->V;
    int32_t *t = r->tok + i * 64;
    if (way == 0) {
        /* The old loop copied each row to its hypothesis' own buffer. */
        float *o = r->own + i * r->V;
        memcpy(o, l, (size_t)r->V * sizeof(float));
        wr_rules_ref(&r->f, t, r->n_tok[i], o, &r->pick[i]);
        if (r->K) wr_topk_ref(o, r->V, r->K, r->top + i * r->K);
    } else {
        wr_rules(&r->f, t, r->n_tok[i], l, &r->pick[i]);
        if (r->K) wr_topk(l, r->V, r->K, r->top + i * r->K);
    }
}

static void bw_rules_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    for (int64_t i = begin; i < end; i++) bw_rules_row(ctx, i, 1);
}

/* Milliseconds per step of `steps` steps the given way; *sig sums the picks. */
static double bw_rules_time(bw_rules_run *r, int steps, int way, uint64_t *sig) {
    const choir_whisper_specials *sp = r->f.sp;
    double total = 0;
    *sig = 0;
    for (int i = 0; i < r->rows; i++) {
        r->n_tok[i] = r->f.sample_begin;
        for (int k = 0; k < r->f.sample_begin; k++) r->tok[i * 64 + k] = sp->sot + k;
    }
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < r->rows; i++)
            memcpy(r->batch + (size_t)i * r->V, r->src + (size_t)((s * 7 + i) % 64) * r->V,
                   (size_t)r->V * sizeof(float));
        double t0 = choir_now_s();
        /* As the decoding loop: rows over the pool, or with fewer rows than
         * half the threads each row's exponentials over the pool. */
        choir_pool *pool = choir_pool_default();
        if (way == 2 && r->rows * 2 <= choir_pool_threads(pool))
            for (int i = 0; i < r->rows; i++) {
                float *l = r->batch + (size_t)i * r->V;
                wr_rules_pool(&r->f, r->tok + i * 64, r->n_tok[i], l, &r->pick[i], pool, r->scratch);
                if (r->K) wr_topk(l, r->V, r->K, r->top + i * r->K);
            }
        else if (way == 2) choir_pool_parallel_for(pool, r->rows, 1, bw_rules_range, r);
        else
            for (int i = 0; i < r->rows; i++) bw_rules_row(r, i, way);
        total += choir_now_s() - t0;
        for (int i = 0; i < r->rows; i++) {
            int next = r->K ? r->top[i * r->K] : r->pick[i].argmax;
            *sig = *sig * 31 + (uint64_t)next + (uint64_t)(int64_t)(r->pick[i].lse * 1e6);
            int32_t *t = r->tok + i * 64;
            if (next == sp->eot || r->n_tok[i] >= r->f.sample_begin + 48) r->n_tok[i] = r->f.sample_begin;
            else t[r->n_tok[i]++] = next;
        }
    }
    return total * 1000.0 / steps;
}

static int bw_rules_only(int V, int steps) {
    choir_whisper_specials sp;
    choir_whisper_specials_from_vocab(V, &sp);
    int32_t sup[128];
    int n_sup = choir_whisper_default_suppress(&sp, sup, 128);
    static const int windows[3] = {1, 8, 32};
    int max_rows = 32 * 5, rc = 0;
    bw_rules_run r = {.V = V};
    r.src = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)64 * V * sizeof(float));
    r.batch = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)max_rows * V * sizeof(float));
    r.own = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)max_rows * V * sizeof(float));
    r.tok = choir_alloc(CHOIR_MEM_OTHER, (size_t)max_rows * 64 * sizeof(int32_t));
    r.n_tok = choir_alloc(CHOIR_MEM_OTHER, (size_t)max_rows * sizeof(int));
    r.pick = choir_alloc(CHOIR_MEM_OTHER, (size_t)max_rows * sizeof(wr_pick));
    r.top = choir_alloc(CHOIR_MEM_OTHER, (size_t)max_rows * 6 * sizeof(int));
    r.scratch = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)V * sizeof(double));
    if (!r.src || !r.batch || !r.own || !r.tok || !r.n_tok || !r.pick || !r.top || !r.scratch) {
        fprintf(stderr, "choir bench whisper: out of memory\n");
        rc = 1;
        goto done;
    }
    /* Text logits N(0, 3) with a few likely ids; timestamps 2 lower, so that
     * the mass rule sometimes fires. */
    for (int64_t i = 0; i < (int64_t)64 * V; i++) {
        int id = (int)(i % V);
        float g = bw_uniform() + bw_uniform() + bw_uniform() + bw_uniform() - 2.0f;
        float x = 3.0f * g * 1.22f + (id >= sp.timestamp_begin ? -2.0f : 0.0f);
        if (bw_uniform() > 0.9995f) x += 12.0f;
        r.src[i] = x;
    }
    printf("decoding rules on random logits, vocab %d, %d steps; pool of %d threads\n"
           "%-22s %6s %12s %12s %12s  (ms per step)\n",
           V, steps, choir_pool_threads(choir_pool_default()), "mode", "rows", "old", "new",
           "new+pool");
    static const char *modes[3] = {"greedy, timestamps", "greedy, no timestamps", "beam 5, timestamps"};
    for (int mode = 0; mode < 3; mode++)
        for (int w = 0; w < 3; w++) {
            r.rows = windows[w] * (mode == 2 ? 5 : 1);
            r.K = mode == 2 ? 6 : 0;
            r.f = (choir_whisper_filter){.sp = &sp, .n_vocab = V, .sample_begin = 3,
                                         .timestamps = mode != 1, .suppress_blank = true,
                                         .suppress = sup, .n_suppress = n_sup,
                                         .max_initial_timestamp_index = 50};
            uint64_t sig[3];
            double ms[3];
            for (int way = 0; way < 3; way++) ms[way] = bw_rules_time(&r, steps, way, &sig[way]);
            printf("%-22s %6d %12.3f %12.3f %12.3f%s\n", modes[mode], r.rows, ms[0], ms[1], ms[2],
                   sig[0] == sig[1] && sig[1] == sig[2] ? "" : "  PICKS DIFFER");
            if (sig[0] != sig[1] || sig[1] != sig[2]) rc = 1;
        }
done:
    choir_free(r.src);
    choir_free(r.batch);
    choir_free(r.own);
    choir_free(r.tok);
    choir_free(r.n_tok);
    choir_free(r.pick);
    choir_free(r.top);
    choir_free(r.scratch);
    return rc;
}

int choir_bench_whisper(int argc, char **argv) {
    const char *dims = "tiny";
    choir_dtype dt = CHOIR_DTYPE_F16;
    int steps = 16, audio_s = 0, win_tokens = 48, batches[8] = {8}, n_batches = 1, device = 0;
    bool cuda = false, gpu_bf16 = false, dtype_set = false, batch_set = false, rules_only = false;
    bool decoder_only = false;
    int rules_only_arg = 0, decoder_only_arg = 0;
    int tf32 = -1; /* -1: on when the device weights are not f32 */
    int greedy_steps = -1; /* -1: the attach default */
    int enc_windows = 0;   /* 0: the attach default */
    int threads = 0, backend = 0, gpu_dtype = 0, tf32_arg = -1, dtype_arg = -1;
    int split_arg = -1; /* -1: the default (on) */
    int fuse_norm_arg = -1; /* -1: the default (on) */
    int qbits = 0, qgroup = 64;
    const char *batch_list = NULL;
    const cli_opt flags[] = {
        {"--dims", CLI_STRING, &dims, 0, 0, "SIZE", "tiny (default), base, small, medium, large-v3, large-v3-turbo"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--dtype", CLI_CHOICE, &dtype_arg, 0, 0, "f32|f16|bf16", "stored weights (default f16; cuda bf16)"},
        {"--quant", CLI_INT, &qbits, 2, 8, "BITS", "linear layers MLX-quantized to BITS (2-6, 8) bits"},
        {"--group", CLI_INT, &qgroup, 32, 128, "N", "quantization group size: 32, 64 (default) or 128"},
        {"--steps", CLI_INT, &steps, 1, 1 << 20, "N", "decoder steps timed (default 16)"},
        {"--audio-s", CLI_INT, &audio_s, 0, 1 << 20, "S", "long-form audio, seconds (default 0: 60; cuda 1920)"},
        {"--window-tokens", CLI_INT, &win_tokens, 1, 224, "N", "greedy tokens per 30-s window (default 48)"},
        {"--batch", CLI_STRING, &batch_list, 0, 0, "N[,N...]", "windows at a time, one run each (default 8; cuda 1,8,32)"},
        {"--backend", CLI_CHOICE, &backend, 0, 0, "cpu|cuda", "where the model runs (default cpu)"},
        {"--device", CLI_INT, &device, 0, 255, "N", "CUDA device (default 0)"},
        {"--gpu-dtype", CLI_CHOICE, &gpu_dtype, 0, 0, "f32|bf16", "f32 matrices as stored, or as bf16 on the device"},
        {"--tf32", CLI_CHOICE, &tf32_arg, 0, 0, "on|off", "f32 products on TF32 tensor cores"},
        {"--split-attention", CLI_CHOICE, &split_arg, 0, 0, "on|off", "decoder attention over key chunks (cuda; default on)"},
        {"--fuse-norm", CLI_CHOICE, &fuse_norm_arg, 0, 0, "on|off", "layer norms inside the few-row products (cuda; default on)"},
        {"--greedy-steps", CLI_INT, &greedy_steps, 0, 1 << 20, "N", "decoder steps per host wake-up (cuda; default 8)"},
        {"--enc-windows", CLI_INT, &enc_windows, 1, 256, "N", "encoder windows per batched pass (cuda; default 8)"},
        {"--rules-only", CLI_FLAG, &rules_only_arg, 0, 0, NULL, "time only the host's decoding rules"},
        {"--decoder-only", CLI_FLAG, &decoder_only_arg, 0, 0, NULL, "skip the encoder and long-form runs"},
    };
    const cli_spec spec = {.cmd = "bench whisper",
                           .synopsis =
    "usage: choir bench whisper [--dims tiny|base|small|medium|large-v3|large-v3-turbo]\n"
    "       [--threads N] [--dtype f32|f16|bf16] [--steps N] [--audio-s S]\n"
    "       [--window-tokens N] [--batch N[,N...]]\n"
    "       [--backend cpu|cuda] [--device N] [--gpu-dtype f32|bf16] [--tf32 on|off]\n"
    "       [--greedy-steps N] [--split-attention on|off] [--fuse-norm on|off]\n"
    "       [--rules-only] [--decoder-only]\n"
    "       [--quant BITS [--group N]]\n\n"
    "Encoder ms per 30-s window, decoder ms per step at batch 1, 5, 8 (GPU: 1, 8,\n"
    "32), the real-time factor of batched long-form decoding (--audio-s of audio\n"
    "in 30-s windows, --window-tokens greedy tokens each, --batch windows at a\n"
    "time, one run per listed batch), and peak memory. Weights are random,\n"
    "generated in memory. Defaults: CPU --batch 8 --audio-s 60; cuda --batch\n"
    "1,8,32 --audio-s 1920 --dtype bf16. With --backend cuda the model runs on\n"
    "CUDA device N; --gpu-dtype bf16 stores f32 matrices as bf16 there; the run\n"
    "also measures the card's bf16 matmul and copy ceilings and reports the\n"
    "encoder's TFLOP/s and the decoder's weight GB/s against them. --tf32 (default:\n"
    "on unless the device weights are f32) runs f32 products (attention scores,\n"
    "convolutions) on TF32 tensor cores. --greedy-steps N (cuda): long-form greedy\n"
    "decoding with the rules on the device, up to N decoder steps per host\n"
    "wake-up (default 8); 0 runs the rules on the host, a round trip per token.\n"
    "--fuse-norm off (cuda) runs each layer norm of a decoder step as a kernel of\n"
    "its own instead of inside the products that read it (for comparison).\n"
    "--rules-only times only the host's\n"
    "decoding rules per step (filters, timestamp rules, log-softmax, greedy pick,\n"
    "beam top-K) on random logits of the --dims vocabulary at 1, 8 and 32 windows\n"
    "(beam 5: 5 rows each), before and after their fusion, --steps steps.\n"
    "On the CPU the run first measures the streaming read bandwidth and prints the\n"
    "batch-1 step against the bound it sets (bytes one step reads / bandwidth).\n"
    "--decoder-only skips the encoder and long-form runs (the cross K/V then come\n"
    "from a random encoder output) and --batch lists the decoder batches.\n"
    "--quant BITS quantizes the generated linear layers (attention projections,\n"
    "MLP, token embedding / output projection) to MLX's affine layout, scales and\n"
    "biases in the weights' 16-bit dtype (f16 for f32), as choir convert does.\n\n",
                           .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    rules_only = rules_only_arg != 0;
    decoder_only = decoder_only_arg != 0;
    if (threads) choir_pool_set_default_threads(threads);
    cuda = backend == 1;
    gpu_bf16 = gpu_dtype == 1;
    if (tf32_arg >= 0) tf32 = tf32_arg == 0; /* "on" is the first word */
    if (dtype_arg >= 0) {
        static const choir_dtype dtypes[3] = {CHOIR_DTYPE_F32, CHOIR_DTYPE_F16, CHOIR_DTYPE_BF16};
        dt = dtypes[dtype_arg];
        dtype_set = true;
    }
    if (batch_list) {
        n_batches = cli_parse_ints(batch_list, 1, BW_MAX_BATCH, batches, 8);
        batch_set = true;
        if (n_batches < 1) {
            fprintf(stderr, "choir bench whisper: --batch is a list of 1..%d (at most 8)\n", BW_MAX_BATCH);
            return 2;
        }
    }
    const bw_size *z = NULL;
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++)
        if (strcmp(SIZES[i].name, dims) == 0) z = &SIZES[i];
#ifndef CHOIR_HAVE_CUDA
    (void)device;
    (void)gpu_bf16;
    (void)tf32;
    (void)greedy_steps, (void)enc_windows;
    (void)split_arg;
    (void)fuse_norm_arg;
    if (cuda) {
        fprintf(stderr, "choir bench whisper: --backend cuda: this build has no CUDA backend "
                        "(configure with -DCHOIR_CUDA=ON)\n");
        return 1;
    }
#endif
    if (cuda && !dtype_set) dt = CHOIR_DTYPE_BF16;
    if (cuda && !batch_set) {
        static const int gpu_batches[3] = {1, 8, 32};
        memcpy(batches, gpu_batches, sizeof gpu_batches);
        n_batches = 3;
    }
    if (audio_s == 0) audio_s = cuda ? 1920 : 60;
    if (!z) {
        fprintf(stderr, "choir bench whisper: --dims is tiny, base, small, medium, large-v3 or large-v3-turbo, "
                        "got '%s'\n", dims);
        return 2;
    }
    if (rules_only) return bw_rules_only(z->vocab, steps);
    int batch = 1;
    for (int i = 0; i < n_batches; i++)
        if (batches[i] > batch) batch = batches[i];
    choir_err err = {0};
    bw_weights w = {0};
    int status = 1;
    choir_whisper *m = NULL;
    choir_whisper_cross *cross = NULL;
    float *mel = NULL, *mel2 = NULL, *enc = NULL;
    double t0 = choir_now_s();
    if (bw_generate(&w, z, dt)) {
        fprintf(stderr, "choir bench whisper: out of memory generating weights\n");
        goto done;
    }
    if (qbits && bw_quantize(&w, qbits, qgroup, dt == CHOIR_DTYPE_BF16 ? CHOIR_DTYPE_BF16 : CHOIR_DTYPE_F16,
                             &err)) {
        fprintf(stderr, "choir bench whisper: --quant %d --group %d: %s\n", qbits, qgroup, err.msg);
        goto done;
    }
    choir_whisper_dims D = {z->n_mels, 1500, z->enc_layers, 448, z->dec_layers, z->d, z->heads, 4 * z->d, z->vocab};
    if (!(m = choir_whisper_from_tensors(bw_find, &w, &D, &err))) {
        fprintf(stderr, "choir bench whisper: %s\n", err.msg);
        goto done;
    }
    char wdesc[48];
    if (qbits) snprintf(wdesc, sizeof wdesc, "q%d g%d %s", qbits, qgroup, choir_dtype_name(dt));
    else snprintf(wdesc, sizeof wdesc, "%s", choir_dtype_name(dt));
    printf("whisper %s (%s weights, %.0f MB), %d threads; weights generated in %.1f s\n", z->name,
           wdesc, (double)choir_whisper_weight_bytes(m) / 1e6,
           choir_pool_threads(choir_pool_default()), choir_now_s() - t0);

    double ceil_tf = 0, ceil_gbs = 0, step_bytes = 0, read_gbs = 0;
    if (!cuda) {
        /* 256 MB: several times any last-level cache, so each pass is DRAM. */
        read_gbs = choir_mem_read_gbs((size_t)256 << 20, 5);
        printf("memory         streaming read %.1f GB/s (best of 5 passes over 256 MiB, %d threads)\n",
               read_gbs, choir_pool_threads(choir_pool_default()));
    }
#ifdef CHOIR_HAVE_CUDA
    if (cuda) {
        choir_whisper_gpu_opts go;
        choir_whisper_default_gpu_opts(&go);
        go.device = device;
        go.bf16 = gpu_bf16;
        go.tf32 = tf32 >= 0 ? tf32 != 0 : (dt != CHOIR_DTYPE_F32 || gpu_bf16);
        if (greedy_steps >= 0) go.greedy_steps = greedy_steps;
        if (enc_windows > 0) go.max_windows = enc_windows;
        if (split_arg >= 0) choir_cuda_attention_set_split(split_arg == 0);
        if (fuse_norm_arg >= 0) choir_cuda_norm_linear_set(fuse_norm_arg == 0);
        t0 = choir_now_s();
        if (choir_whisper_gpu_attach(m, &go, &err)) goto fail;
        choir_cuda *cu = choir_whisper_gpu_context(m);
        choir_whisper_gpu_stats st;
        choir_whisper_gpu_get_stats(m, &st, NULL);
        step_bytes = (double)st.step_weight_bytes;
        printf("gpu            %s (device %d): %.0f MB of weights on the device (%s), f32 "
               "products in %s, KV caches %s, greedy rules on the %s, uploaded in %.1f s\n",
               choir_cuda_get_props(cu)->name, device, st.weight_bytes / 1e6,
               gpu_bf16 ? "f32 stored as bf16" : "as stored", go.tf32 ? "TF32" : "f32",
               st.kv_elem_bytes == 2 ? "bf16" : "f32",
               go.greedy_steps > 0 ? "device" : "host (a round trip per token)",
               choir_now_s() - t0);
        if (choir_cuda_measure_ceilings(cu, &ceil_tf, &ceil_gbs, &err)) goto fail;
        printf("ceilings       bf16 matmul 8192^3 %.1f TFLOP/s; device-to-device copy %.0f GB/s "
               "(read + written)\n",
               ceil_tf, ceil_gbs);
    }
#endif
    const choir_whisper_dims *dm = choir_whisper_get_dims(m);
    double enc_flops = bw_encoder_flops(dm);
    size_t mel_n = (size_t)batch * (size_t)z->n_mels * CHOIR_WHISPER_N_FRAMES;
    mel = choir_alloc(CHOIR_MEM_ACTIVATIONS, mel_n * sizeof(float));
    enc = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)batch * 1500 * (size_t)z->d * sizeof(float));
    if (!mel || !enc) goto done;
    if (cuda) mel2 = choir_alloc(CHOIR_MEM_ACTIVATIONS, mel_n * sizeof(float)); /* NULL: no prefetch */
    for (size_t i = 0; i < mel_n; i++) mel[i] = 0.5f * bw_uniform();
    /* One window, then (GPU) a batched pass of up to 8 (--enc-windows) windows; host mel in,
     * host encoder output out. */
    int enc_max = enc_windows > 0 ? enc_windows : 8;
    int enc_ns[2] = {1, cuda ? (batch < enc_max ? batch : enc_max) : 1};
    if (decoder_only)
        for (size_t i = 0; i < (size_t)1500 * (size_t)z->d; i++) enc[i] = bw_uniform();
    for (int k = 0; k < (decoder_only ? 0 : enc_ns[1] > 1 ? 2 : 1); k++) {
        int nw = enc_ns[k];
        choir_whisper_encode(m, mel, nw, enc, &err); /* warm-up: page in, threads, kernels */
        t0 = choir_now_s();
        if (choir_whisper_encode(m, mel, nw, enc, &err)) goto fail;
        double ms = (choir_now_s() - t0) * 1000.0 / nw;
        printf("encoder        %9.1f ms per 30-s window", ms);
        if (nw > 1) printf(" (%d windows per pass)", nw);
        if (cuda) {
            double tf = enc_flops / (ms * 1e-3) / 1e12;
            printf(", %.1f TFLOP/s = %.1f%% of the bf16 ceiling", tf, 100.0 * tf / ceil_tf);
        }
        printf("\n");
    }
    if (!(cross = choir_whisper_cross_create(m, enc, &err))) goto fail;
    int dec_batches[8] = {1, 5, 8}, n_dec = 3;
    if (cuda) dec_batches[1] = 8, dec_batches[2] = 32;
    if (decoder_only && batch_set) {
        memcpy(dec_batches, batches, sizeof dec_batches);
        n_dec = n_batches;
    }
    for (int b = 0; b < n_dec; b++) {
        double ms, ms_pageable = 0;
        if (bw_decoder(m, cross, dec_batches[b], steps, false, &ms)) goto done;
        if (cuda && bw_decoder(m, cross, dec_batches[b], steps, true, &ms_pageable)) goto done;
        printf("decoder b=%-2d   %9.2f ms per step (%.3f ms per token)", dec_batches[b], ms,
               ms / dec_batches[b]);
        if (cuda) printf(" [logits to pageable memory: %.2f ms]", ms_pageable);
        if (cuda) {
            double gbs = step_bytes / (ms * 1e-3) / 1e9;
            printf(", weights read at %.0f GB/s = %.1f%% of the copy ceiling", gbs,
                   100.0 * gbs / ceil_gbs);
        }
        printf("\n");
        if (!cuda && dec_batches[b] == 1 && read_gbs > 0) {
            double wb, kvb, tot = bw_step_bytes(m, cross->kv, 4 + steps / 2, &wb, &kvb);
            double bound = tot / (read_gbs * 1e9) * 1e3;
            printf("bound b=1      %9.2f ms per step: %.1f MB read (%.1f MB weights, %.1f MB K/V) "
                   "at %.1f GB/s; step / bound = %.2f\n",
                   bound, tot / 1e6, wb / 1e6, kvb / 1e6, read_gbs, ms / bound);
        }
    }
    if (decoder_only) {
        status = 0;
        goto done;
    }

    /* Batched long form: the pipeline's work per window (mel, encoder, cross
     * K/V, greedy decoding of win_tokens tokens) over audio_s seconds. */
    int n_win = (audio_s + 29) / 30;
    float *pcm = choir_calloc(CHOIR_MEM_IO, CHOIR_WHISPER_N_SAMPLES, sizeof(float));
    choir_whisper_cross **crs = choir_calloc(CHOIR_MEM_OTHER, (size_t)batch, sizeof *crs);
    choir_whisper_window *wins = choir_calloc(CHOIR_MEM_OTHER, (size_t)batch, sizeof *wins);
    choir_whisper_result *res = choir_calloc(CHOIR_MEM_OTHER, (size_t)batch, sizeof *res);
    int rc = (!pcm || !crs || !wins || !res) ? CHOIR_ENOMEM : 0;
    for (int i = 0; pcm && i < CHOIR_WHISPER_N_SAMPLES; i++)
        pcm[i] = 0.3f * sinf(0.05f * (float)i) + 0.05f * bw_uniform();
    choir_whisper_params p;
    choir_whisper_default_params(&p);
    p.language = 0;
    p.timestamps = false;
    p.suppress_blank = false;
    p.sample_len = win_tokens;
    /* FLOPs of one window: encoder, cross K/V, 4 start tokens and win_tokens
     * steps (attention at their mean position). */
    double win_flops = enc_flops +
                       dm->n_text_layer * 2 * 2.0 * dm->n_audio_ctx * dm->d_model * dm->d_model +
                       (4 + win_tokens) * bw_token_flops(dm, 4 + win_tokens / 2);
    for (int k = 0; k < n_batches && !rc; k++) {
        int B = batches[k];
        /* Where the time goes, phase by phase (each call returns with its
         * device work done): host log-mel, encoder + cross K/V, decoding,
         * freeing the windows' caches. */
        double ph[4] = {0, 0, 0, 0}, tp;
        /* On a GPU the next batch's mels are computed while the device works
         * on this one (the pipeline's prefetch); ph[0] is the time spent
         * waiting for mels. */
        bw_mels next = {.pcm = pcm, .n_mels = z->n_mels};
        float *bufs[2] = {mel, mel2};
        int which = 0;
        bool ready = false;
        t0 = choir_now_s();
        for (int w0 = 0; w0 < n_win && !rc; w0 += B) {
            int nb = n_win - w0 < B ? n_win - w0 : B;
            float *cur = bufs[which];
            tp = choir_now_s();
            for (int i = 0; i < nb && !rc && !ready; i++)
                rc = choir_whisper_log_mel(pcm, CHOIR_WHISPER_N_SAMPLES, z->n_mels,
                                           cur + (size_t)i * z->n_mels * CHOIR_WHISPER_N_FRAMES,
                                           CHOIR_WHISPER_N_FRAMES, &err);
            ph[0] += choir_now_s() - tp;
            choir_async *task = NULL;
            next.n = n_win - (w0 + nb) < B ? n_win - (w0 + nb) : B;
            next.mel = bufs[which ^ 1];
            if (cuda && mel2 && !rc && next.n > 0) task = choir_async_start(bw_mels_main, &next);
            tp = choir_now_s();
            /* As the pipeline does it: on a GPU the encoder output stays there. */
            if (!rc) rc = choir_whisper_encode_cross(m, cur, nb, enc, crs, &err);
            ph[1] += choir_now_s() - tp, tp = choir_now_s();
            for (int i = 0; i < nb && !rc; i++)
                wins[i] = (choir_whisper_window){.cross = crs[i], .language = 0};
            /* Random weights rarely sample eot: every window decodes win_tokens tokens. */
            if (!rc) rc = choir_whisper_decode_windows(m, NULL, wins, nb, &p, 0.0f, res, &err);
            ph[2] += choir_now_s() - tp, tp = choir_now_s();
            for (int i = 0; i < nb; i++) {
                choir_whisper_result_clear(&res[i]);
                choir_whisper_cross_free(crs[i]);
                crs[i] = NULL;
            }
            ph[3] += choir_now_s() - tp, tp = choir_now_s();
            choir_async_join(task);
            ph[0] += choir_now_s() - tp;
            ready = task && next.rc == 0;
            if (ready) which ^= 1;
        }
        double el = choir_now_s() - t0;
        if (rc) break;
        printf("long form      RTF %.4f (%d s of audio in %.2f s: %d windows, batch %d, %d tokens "
               "each)",
               el / (n_win * 30.0), n_win * 30, el, n_win, B, win_tokens);
        if (cuda) {
            double tf = n_win * win_flops / el / 1e12;
            printf(", %.1f TFLOP/s = %.1f%% of the bf16 ceiling", tf, 100.0 * tf / ceil_tf);
        }
        printf("\n");
        printf("long form      batch %d phases: waiting for log-mels %.3f s, encoder + cross K/V %.3f s, decoding "
               "%.3f s, freeing %.3f s\n",
               B, ph[0], ph[1], ph[2], ph[3]);
    }
    choir_free(pcm);
    choir_free(crs);
    choir_free(wins);
    choir_free(res);
    if (rc) goto fail;
#ifdef CHOIR_HAVE_CUDA
    if (cuda) {
        choir_whisper_gpu_stats st;
        choir_whisper_gpu_get_stats(m, &st, NULL);
        printf("device memory  %.0f MB held now, peak %.0f MB; %lld decoder steps from CUDA graphs "
               "(%d graphs), %lld kernel by kernel, %d failed captures\n",
               st.device_bytes / 1e6, choir_cuda_mem_peak(choir_whisper_gpu_context(m)) / 1e6,
               (long long)st.steps_graph, st.graphs, (long long)st.steps_direct,
               st.graph_failures);
    }
#endif
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak memory    %.0f MB counted (%.0f MB weights, %.0f MB activations, %.0f MB caches), "
           "%.0f MB resident\n",
           (double)choir_mem_peak(CHOIR_MEM_COUNT) / 1e6, (double)choir_mem_peak(CHOIR_MEM_WEIGHTS) / 1e6,
           (double)choir_mem_peak(CHOIR_MEM_ACTIVATIONS) / 1e6, (double)choir_mem_peak(CHOIR_MEM_CACHE) / 1e6,
           (double)ru.ru_maxrss / 1024.0);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "choir bench whisper: %s\n", err.msg);
done:
    choir_free(mel);
    choir_free(mel2);
    choir_free(enc);
    choir_whisper_cross_free(cross);
    choir_whisper_free(m);
    bw_free(&w);
    return status;
}
