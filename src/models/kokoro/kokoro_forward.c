/* Kokoro-82M forward pass (KModel.forward_with_tokens, spec §5), one piece:
 *
 *   ids [T] --ALBERT--> bert_out [T,768] --bert_encoder--> d_en [T,512]
 *   d_en + s_pro --duration encoder--> d [T,640] --LSTM, proj--> durations [T]
 *   alignment (token t repeated pred_dur[t] times): L frames
 *   en = d aligned [L,640] --shared LSTM, F0 / N blocks--> F0, N [2L]
 *   ids --text encoder--> t_en [512,T]; asr = t_en aligned [512,L]
 *   asr, F0, N, s_dec --decoder--> [512,2L] --generator--> audio [600 L]
 *
 * Each block is one function below, in that order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_front_net.h"

#define TRACE(p, name, data, nd, ...)                                       \
    do {                                                                    \
        if ((p)->trace) {                                                   \
            const int64_t shp_[] = {__VA_ARGS__};                           \
            (p)->trace((p)->trace_user, name, data, nd, shp_);              \
        }                                                                   \
    } while (0)

/* ALBERT's embeddings: ids[T] -> e[T, 128] (word + type 0 + position, then
 * LayerNorm). type0 and row: scratch of 128 floats each. */
void kk_albert_embed(const choir_kokoro *m, const int32_t *ids, int64_t T, float *e,
                     float *type0, float *row) {
    choir_weight_row_f32(&m->type_emb.w, 0, type0);
    for (int64_t t = 0; t < T; t++) {
        float *et = e + t * KK_BERT_EMB;
        choir_weight_row_f32(&m->word_emb.w, ids[t], et);
        choir_weight_row_f32(&m->pos_emb.w, t, row);
        for (int i = 0; i < KK_BERT_EMB; i++) et[i] = (et[i] + type0[i]) + row[i];
    }
    choir_layer_norm(e, e, T, KK_BERT_EMB, m->emb_ln_w, m->emb_ln_b, 1e-12f);
}

/* ALBERT (one shared layer, applied 12 times): ids[T] -> h[T, 768] and
 * d_en[T, 512] = bert_encoder(h): the embeddings here, the layers through
 * the front's backend forward (kokoro_front_net.c), on the GPU when one is
 * attached, else on the CPU backend with working memory from ws. */
int kk_albert(const choir_kokoro *m, const int32_t *ids, int64_t T, float *h, float *d_en,
              kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *e = kk_ws_floats(ws, T * KK_BERT_EMB);          /* [T,128] */
    float *type0 = kk_ws_floats(ws, KK_BERT_EMB), *row = kk_ws_floats(ws, KK_BERT_EMB);
    if (!e || !type0 || !row) return CHOIR_ENOMEM;
    kk_albert_embed(m, ids, T, e, type0, row);
    const float *e1 = e;
    choir_err err = {0};
    int rc = 1;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) rc = kk_gpu_albert(m->gpu, 1, &e1, &T, &h, &d_en, &err);
#endif
    if (rc > 0) {
        choir_backend *be = choir_backend_cpu(&err);
        kk_fnet *f = be ? kk_fnet_create(m, be, &err) : NULL;
        choir_stream *s = f ? kk_ws_stream(ws, be, 0, &err) : NULL;
        rc = s ? kk_fnet_albert(f, s, 1, &e1, &T, &h, &d_en, &err) : CHOIR_ENOMEM;
        choir_stream_free(s);
        kk_fnet_free(f);
        choir_backend_free(be);
    }
    if (rc) CHOIR_LOGE("kokoro: ALBERT: %s", err.msg);
    kk_ws_release(ws, mark);
    return rc;
}

/* kk_bilstm, on the GPU when one is attached and holds this LSTM's weights
 * (kokoro_cuda_front.c); the CPU path is untouched otherwise. A device
 * failure is an error (logged: the front's functions return codes only). */
static int front_bilstm(const choir_kokoro *m, const kk_lstm *l, const float *x, int64_t T,
                        float *y, kk_ws *ws) {
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) {
        choir_err err = {0};
        int rc = kk_gpu_bilstm(m->gpu, l, 1, &x, &T, &y, &err);
        if (rc <= 0) {
            if (rc) CHOIR_LOGE("kokoro: LSTM on the GPU: %s", err.msg);
            return rc;
        }
    }
#endif
    return kk_bilstm(l, x, T, y, ws);
}

/* x[T, 640] = [y[t] (512) ; style (128)] per time step */
void kk_concat_style(const float *y, int64_t T, const float *style, float *x) {
    for (int64_t t = 0; t < T; t++) {
        memcpy(x + t * (KK_HIDDEN + KK_STYLE), y + t * KK_HIDDEN, KK_HIDDEN * sizeof(float));
        memcpy(x + t * (KK_HIDDEN + KK_STYLE) + KK_HIDDEN, style, KK_STYLE * sizeof(float));
    }
}

/* Duration encoder: d_en[T, 512], s_pro -> d[T, 640] (3 x BiLSTM + AdaLayerNorm) */
static int duration_encoder(const choir_kokoro *m, const float *d_en, int64_t T,
                            const float *s_pro, float *d, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *y = kk_ws_floats(ws, T * KK_HIDDEN); /* [T,512] */
    if (!y) return CHOIR_ENOMEM;
    kk_concat_style(d_en, T, s_pro, d);
    for (int l = 0; l < 3; l++) {
        int rc = front_bilstm(m, &m->dur_lstm[l], d, T, y, ws);
        if (!rc) rc = kk_ada_layer_norm(&m->dur_norm[l], y, T, s_pro, ws);
        if (rc) return rc;
        kk_concat_style(y, T, s_pro, d);
    }
    kk_ws_release(ws, mark);
    return 0;
}

/* Durations: d[T, 640] -> dur[T] (frames, real) and pred_dur[T] (>= 1).
 * torch.round is half-to-even, which rintf gives in the default rounding mode. */
static int durations(const choir_kokoro *m, const float *d, int64_t T, float speed, float *dur,
                     int32_t *pred_dur, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *h = kk_ws_floats(ws, T * KK_HIDDEN);      /* [T,512] */
    if (!h) return CHOIR_ENOMEM;
    int rc = front_bilstm(m, &m->pred_lstm, d, T, h, ws);
    if (!rc) rc = kk_durations_from(m, h, T, speed, dur, pred_dur, ws);
    if (rc) return rc;
    kk_ws_release(ws, mark);
    return 0;
}

int kk_durations_from(const choir_kokoro *m, const float *h, int64_t T, float speed, float *dur,
                      int32_t *pred_dur, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *logits = kk_ws_floats(ws, T * KK_MAX_DUR); /* [T,50] */
    if (!logits) return CHOIR_ENOMEM;
    choir_linear(h, T, &m->dur_proj.w, m->dur_proj.b, logits);
    choir_sigmoid(logits, T * KK_MAX_DUR);
    for (int64_t t = 0; t < T; t++) {
        float s = 0;
        for (int i = 0; i < KK_MAX_DUR; i++) s += logits[t * KK_MAX_DUR + i];
        dur[t] = s / speed;
        float r = isfinite(dur[t]) ? rintf(dur[t]) : 1.0f;
        pred_dur[t] = r < 1.0f ? 1 : (int32_t)fminf(r, 1e6f);
    }
    kk_ws_release(ws, mark);
    return 0;
}

/* F0 and N curves: en[L, 640], s_pro -> F0[2L], N[2L] */
int kk_f0_n(const choir_kokoro *m, const float *en, int64_t L, const float *s_pro, float *f0,
            float *n, double *t_lstm, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *h = kk_ws_floats(ws, L * KK_HIDDEN);        /* [L,512] */
    float *x = kk_ws_floats(ws, KK_HIDDEN * L);        /* [512,L] */
    if (!h || !x) return CHOIR_ENOMEM;
    double t0 = choir_now_s();
    int rc = front_bilstm(m, &m->shared, en, L, h, ws);
    if (rc) return rc;
    if (t_lstm) *t_lstm = choir_now_s() - t0;
    kk_transpose(h, L, KK_HIDDEN, x);
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) {
        choir_err err = {0};
        const float *x1 = x;
        rc = kk_gpu_f0n_blocks(m->gpu, 1, &x1, &L, &s_pro, &f0, &n, &err);
        if (rc <= 0) {
            if (rc) CHOIR_LOGE("kokoro: F0 / N blocks on the GPU: %s", err.msg);
            kk_ws_release(ws, mark);
            return rc;
        }
    }
#endif
    choir_err err = {0};
    rc = kk_f0_n_blocks(m, x, L, s_pro, f0, n, &err);
    if (rc) {
        CHOIR_LOGE("kokoro: F0 / N blocks: %s", err.msg);
        return rc;
    }
    kk_ws_release(ws, mark);
    return 0;
}

/* Text encoder: ids[T] -> t_en[512, T] (embedding, 3 x (conv, LayerNorm,
 * LeakyReLU), BiLSTM) */
static int text_encoder(const choir_kokoro *m, const int32_t *ids, int64_t T, float *t_en,
                        kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *tc = kk_ws_floats(ws, T * KK_HIDDEN); /* [T,512] */
    float *y = kk_ws_floats(ws, KK_HIDDEN * T);  /* [T,512] */
    if (!tc || !y) return CHOIR_ENOMEM;
    int rc = kk_text_encoder_convs(m, ids, T, tc, ws);
    if (!rc) rc = front_bilstm(m, &m->te_lstm, tc, T, y, ws);
    if (rc) return rc;
    kk_transpose(y, T, KK_HIDDEN, t_en);
    kk_ws_release(ws, mark);
    return 0;
}

int kk_text_encoder_convs(const choir_kokoro *m, const int32_t *ids, int64_t T, float *tc,
                          kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *x = kk_ws_floats(ws, KK_HIDDEN * T);  /* [512,T] */
    float *y = kk_ws_floats(ws, KK_HIDDEN * T);
    if (!x || !y) return CHOIR_ENOMEM;
    for (int64_t t = 0; t < T; t++) choir_weight_row_f32(&m->te_emb.w, ids[t], tc + t * KK_HIDDEN);
    kk_transpose(tc, T, KK_HIDDEN, x);
    for (int i = 0; i < 3; i++) {
        kk_conv1d(&m->te_cnn[i], x, T, 1, 2, 1, y);
        /* LayerNorm over channels: per time step, so in [T, C] */
        kk_transpose(y, KK_HIDDEN, T, tc);
        choir_layer_norm(tc, tc, T, KK_HIDDEN, m->te_ln_g[i], m->te_ln_b[i], 1e-5f);
        choir_leaky_relu(tc, T * KK_HIDDEN, 0.2f);
        kk_transpose(tc, T, KK_HIDDEN, x);
    }
    /* tc is [T, 512] after the last block */
    kk_ws_release(ws, mark);
    return 0;
}

int64_t choir_kokoro_estimate_bytes(int n_ids, int64_t frames) {
    /* Floats alive at the deepest point, per id and per frame. The generator's
     * last stage sets the peak: 5 buffers of [128, 120 L] (~77k floats per
     * frame) over the decoder's ~10k and the seeded noise's 5.4k; measured
     * 0.38 MB per frame with noise (hello, 64 frames), estimated 0.46 MB. */
    int64_t T = n_ids, L = frames;
    int64_t floats = 28 * 1024 * T + 112 * 1024 * L + (1 << 20);
    return floats * (int64_t)sizeof(float);
}

choir_kokoro_params choir_kokoro_default_params(void) {
    choir_kokoro_params p = {.speed = 1.0f, .noise = CHOIR_KOKORO_NOISE_SEEDED, .seed = 0};
    return p;
}

int64_t kk_noise_floats(int64_t L) { return L * CHOIR_KOKORO_SAMPLES_PER_FRAME * KK_HARMONICS; }

void kk_piece_free(kk_piece *pc) {
    if (!pc) return;
    choir_free(pc->asr);
    choir_free(pc->f0);
    choir_free(pc->n);
    choir_free(pc->noise);
    memset(pc, 0, sizeof *pc);
}

/* The seeded noise, in parallel chunks on the default pool (inline when the
 * pool is busy, as under a batch). Bit-identical to one kk_gaussian_fill:
 * its splitmix64 state after k draws is seed + k * 0x9E3779B97F4A7C15 and
 * every pair of values takes two draws, so a chunk starting at an even
 * offset o is kk_gaussian_fill with seed + o * that constant. */
typedef struct noise_job {
    float *x;
    int64_t n;
    uint64_t seed;
} noise_job;

#define KK_NOISE_CHUNK ((int64_t)1 << 18) /* even */

static void noise_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const noise_job *j = ctx;
    for (int64_t c = begin; c < end; c++) {
        int64_t o = c * KK_NOISE_CHUNK, len = j->n - o < KK_NOISE_CHUNK ? j->n - o : KK_NOISE_CHUNK;
        kk_gaussian_fill(j->x + o, len, j->seed + (uint64_t)o * 0x9E3779B97F4A7C15ULL);
    }
}

void kk_noise_fill(float *x, int64_t n, uint64_t seed) {
    noise_job j = {x, n, seed};
    int64_t chunks = (n + KK_NOISE_CHUNK - 1) / KK_NOISE_CHUNK;
    if (chunks <= 1)
        kk_gaussian_fill(x, n, seed);
    else
        choir_pool_parallel_for(choir_pool_default(), chunks, 1, noise_range, &j);
}

/* One line per piece: milliseconds per front stage (clk: the clocks after
 * start, ALBERT, duration encoder, durations, alignment, text encoder,
 * en gather, F0 / N; t_shared: the shared LSTM inside F0 / N). */
static void log_front_profile(int n_ids, int64_t L, const double *clk, double t_shared,
                              double t_end) {
    const char *env = getenv("CHOIR_KOKORO_PROFILE");
    bool loud = env && env[0] && strcmp(env, "0") != 0;
    char line[320];
    snprintf(line, sizeof line,
             "kokoro front: %d ids, %lld frames: albert %.1f, duration lstms %.1f, durations "
             "%.1f, text encoder %.1f, f0/n %.1f (shared lstm %.1f, blocks %.1f), align + noise "
             "%.1f ms; total %.1f ms",
             n_ids, (long long)L, 1e3 * (clk[1] - clk[0]), 1e3 * (clk[2] - clk[1]),
             1e3 * (clk[3] - clk[2]), 1e3 * (clk[5] - clk[4]), 1e3 * (clk[7] - clk[6]),
             1e3 * t_shared, 1e3 * (clk[7] - clk[6] - t_shared),
             1e3 * ((clk[4] - clk[3]) + (clk[6] - clk[5]) + (t_end - clk[7])),
             1e3 * (t_end - clk[0]));
    if (loud)
        fprintf(stderr, "%s\n", line);
    else
        CHOIR_LOGD("%s", line);
}

int kk_front(const choir_kokoro *m, const int32_t *ids, int n_ids, const float *style,
             const choir_kokoro_params *params, kk_piece *out, choir_err *err) {
    choir_kokoro_params defaults = choir_kokoro_default_params();
    const choir_kokoro_params *p = params ? params : &defaults;
    kk_ws *ws = NULL;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!m || !ids || !style)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: missing model, ids, style or output");
    if (n_ids < 3 || n_ids > CHOIR_KOKORO_MAX_PHONEMES + 2)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: %d ids; a piece has 3..%d with boundaries",
                             n_ids, CHOIR_KOKORO_MAX_PHONEMES + 2);
    if (!(p->speed > 0.0f) || !isfinite(p->speed))
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: speed %g is not > 0", (double)p->speed);
    for (int i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= KK_NTOKEN)
            return choir_err_set(err, CHOIR_EINVAL, "kokoro: id %d at %d is outside 0..%d",
                                 (int)ids[i], i, KK_NTOKEN - 1);
    const int64_t T = n_ids;
    const float *s_pro = style + KK_STYLE;
    /* Stage clocks, logged at debug level or on stderr under
     * CHOIR_KOKORO_PROFILE=1 (the profile behind docs/kokoro.md "GPU"). */
    double clk[8] = {choir_now_s()}, t_shared = 0;

    /* text side: everything that depends on T only */
    ws = kk_ws_create(choir_kokoro_estimate_bytes(n_ids, 0), err);
    if (!ws) return err ? err->code : CHOIR_ENOMEM;
    float *bert = kk_ws_floats(ws, T * KK_BERT);                 /* [T,768] */
    float *d_en = kk_ws_floats(ws, T * KK_HIDDEN);               /* [T,512] */
    float *d = kk_ws_floats(ws, T * (KK_HIDDEN + KK_STYLE));     /* [T,640] */
    float *dur = kk_ws_floats(ws, T);
    float *t_en = kk_ws_floats(ws, KK_HIDDEN * T);               /* [512,T] */
    int32_t *pred_dur = (int32_t *)kk_ws_floats(ws, T);
    if (!bert || !d_en || !d || !dur || !t_en || !pred_dur) goto nomem;

    if ((rc = kk_albert(m, ids, T, bert, d_en, ws))) goto fail;
    clk[1] = choir_now_s();
    TRACE(p, "bert_out", bert, 2, T, KK_BERT);
    if (p->trace) {
        kk_transpose(d_en, T, KK_HIDDEN, t_en); /* t_en is free scratch until the text encoder */
        TRACE(p, "d_en", t_en, 2, KK_HIDDEN, T);
    }
    if ((rc = duration_encoder(m, d_en, T, s_pro, d, ws))) goto fail;
    clk[2] = choir_now_s();
    TRACE(p, "duration_encoder_out", d, 2, T, KK_HIDDEN + KK_STYLE);
    if ((rc = durations(m, d, T, p->speed, dur, pred_dur, ws))) goto fail;
    clk[3] = choir_now_s();
    TRACE(p, "duration", dur, 1, T);
    if (p->trace) {
        for (int64_t t = 0; t < T; t++) dur[t] = (float)pred_dur[t]; /* dur is not needed again */
        TRACE(p, "pred_dur", dur, 1, T);
    }
    if (p->durations) {
        for (int64_t t = 0; t < T; t++) {
            if (p->durations[t] < 1 || p->durations[t] > 1000) {
                rc = choir_err_set(err, CHOIR_EINVAL, "kokoro: forced duration %d at %lld is not in 1..1000",
                                   (int)p->durations[t], (long long)t);
                goto fail;
            }
            pred_dur[t] = p->durations[t];
        }
    }
    int64_t L = 0;
    for (int64_t t = 0; t < T; t++) L += pred_dur[t];
    clk[4] = choir_now_s();
    if ((rc = text_encoder(m, ids, T, t_en, ws))) goto fail;
    clk[5] = choir_now_s();
    TRACE(p, "text_encoder_out", t_en, 2, KK_HIDDEN, T);

    /* acoustic side up to the decoder: L frames */
    kk_ws *ws2 = kk_ws_create(choir_kokoro_estimate_bytes(n_ids, L), err);
    if (!ws2) {
        rc = err ? err->code : CHOIR_ENOMEM;
        goto fail;
    }
    const int64_t C_d = KK_HIDDEN + KK_STYLE;
    float *en = kk_ws_floats(ws2, L * C_d);          /* [L,640] */
    out->L = L;
    out->asr = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(KK_HIDDEN * L) * sizeof(float));
    out->f0 = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(2 * L) * sizeof(float));
    out->n = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(2 * L) * sizeof(float));
    if (p->noise == CHOIR_KOKORO_NOISE_SEEDED)
        out->noise = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)kk_noise_floats(L) * sizeof(float));
    if (!en || !out->asr || !out->f0 || !out->n ||
        (p->noise == CHOIR_KOKORO_NOISE_SEEDED && !out->noise)) {
        kk_ws_free(ws2);
        goto nomem;
    }
    float *asr = out->asr;
    /* alignment: frame j belongs to token t for pred_dur[t] consecutive frames */
    for (int64_t t = 0, j = 0; t < T; t++)
        for (int32_t r = 0; r < pred_dur[t]; r++, j++) {
            memcpy(en + j * C_d, d + t * C_d, (size_t)C_d * sizeof(float));
            for (int64_t c = 0; c < KK_HIDDEN; c++) asr[c * L + j] = t_en[c * T + t];
        }
    clk[6] = choir_now_s();
    rc = kk_f0_n(m, en, L, s_pro, out->f0, out->n, &t_shared, ws2);
    kk_ws_free(ws2);
    if (rc) goto fail;
    TRACE(p, "F0_pred", out->f0, 1, 2 * L);
    TRACE(p, "N_pred", out->n, 1, 2 * L);
    TRACE(p, "asr", asr, 2, KK_HIDDEN, L);
    clk[7] = choir_now_s();
    if (out->noise)
        kk_noise_fill(out->noise, kk_noise_floats(L), p->seed);
    kk_ws_free(ws);
    log_front_profile(n_ids, L, clk, t_shared, choir_now_s());
    return 0;
nomem:
    rc = CHOIR_ENOMEM;
fail:
    if (rc == CHOIR_ENOMEM)
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory (%d ids)", n_ids);
    else if (err && !err->code)
        choir_err_set(err, rc, "kokoro: the front failed (code %d; the log says where)", rc);
    kk_piece_free(out);
    kk_ws_free(ws);
    return rc;
}

int choir_kokoro_synthesize_ids(const choir_kokoro *m, const int32_t *ids, int n_ids,
                                const float *style, const choir_kokoro_params *params,
                                float **audio_out, int64_t *n_samples, choir_err *err) {
    choir_kokoro_params defaults = choir_kokoro_default_params();
    const choir_kokoro_params *p = params ? params : &defaults;
    kk_piece pc = {0};
    float *audio = NULL;
    if (audio_out) *audio_out = NULL;
    if (n_samples) *n_samples = 0;
    if (!m || !ids || !style || !audio_out)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: missing model, ids, style or output");
    int rc = kk_front(m, ids, n_ids, style, p, &pc, err);
    if (rc) return rc;
    const int64_t L = pc.L, n_out = L * CHOIR_KOKORO_SAMPLES_PER_FRAME;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu) {
        choir_kokoro_decode_input in = {.asr = pc.asr, .f0 = pc.f0, .n = pc.n, .noise = pc.noise,
                                        .style = style, .frames = L};
        rc = choir_kokoro_gpu_decode(m->gpu, &in, 1, &audio, err);
        kk_piece_free(&pc);
        if (rc) return rc;
        goto done;
    }
#endif
    audio = choir_alloc(CHOIR_MEM_IO, (size_t)n_out * sizeof(float));
    if (!audio) {
        kk_piece_free(&pc);
        return choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory (%d ids)", n_ids);
    }
    rc = kk_decoder(m, pc.asr, L, pc.f0, pc.n, style, pc.noise, audio, err);
    kk_piece_free(&pc);
    if (rc) {
        choir_free(audio);
        return rc;
    }
#ifdef CHOIR_HAVE_CUDA
done:
#endif
    TRACE(p, "audio", audio, 1, n_out);
    *audio_out = audio;
    if (n_samples) *n_samples = n_out;
    return 0;
}
