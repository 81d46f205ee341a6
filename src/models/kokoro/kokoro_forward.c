/* Kokoro-82M forward pass (KModel.forward_with_tokens, spec §5), one piece:
 *
 *   ids [T] --ALBERT--> bert_out [T,768] --bert_encoder--> d_en [T,512]
 *   d_en + s_pro --duration encoder--> d [T,640] --LSTM, proj--> durations [T]
 *   alignment (token t repeated pred_dur[t] times): L frames
 *   en = d aligned [L,640] --shared LSTM, F0 / N blocks--> F0, N [2L]
 *   ids --text encoder--> t_en [512,T]; asr = t_en aligned [512,L]
 *   asr, F0, N, s_dec --decoder--> [512,2L] --generator--> audio [600 L]
 *
 * The stages run in kokoro_front_batch.c (for one piece or many) and on the
 * model's executor (kokoro_exec.c); this file holds the host steps they
 * share and the single-piece entry points. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_decoder.h"
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
 * d_en[T, 512] = bert_encoder(h): the embeddings here, the layers on m's
 * executor (kokoro_front_net.c). */
int kk_albert(const choir_kokoro *m, const int32_t *ids, int64_t T, float *h, float *d_en,
              kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    float *e = kk_ws_floats(ws, T * KK_BERT_EMB);          /* [T,128] */
    float *type0 = kk_ws_floats(ws, KK_BERT_EMB), *row = kk_ws_floats(ws, KK_BERT_EMB);
    if (!e || !type0 || !row) return CHOIR_ENOMEM;
    kk_albert_embed(m, ids, T, e, type0, row);
    const float *e1 = e;
    choir_err err = {0};
    int rc = kk_net_albert(m, ws, 1, &e1, &T, &h, &d_en, &err);
    if (rc) CHOIR_LOGE("kokoro: ALBERT: %s", err.msg);
    kk_ws_release(ws, mark);
    return rc;
}

/* x[T, 640] = [y[t] (512) ; style (128)] per time step */
void kk_concat_style(const float *y, int64_t T, const float *style, float *x) {
    for (int64_t t = 0; t < T; t++) {
        memcpy(x + t * (KK_HIDDEN + KK_STYLE), y + t * KK_HIDDEN, KK_HIDDEN * sizeof(float));
        memcpy(x + t * (KK_HIDDEN + KK_STYLE) + KK_HIDDEN, style, KK_STYLE * sizeof(float));
    }
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
    choir_err err = {0};
    double t0 = choir_now_s();
    int rc = kk_net_bilstm(m, ws, &m->shared, 1, &en, &L, &h, &err);
    if (t_lstm) *t_lstm = choir_now_s() - t0;
    if (!rc) {
        kk_transpose(h, L, KK_HIDDEN, x);
        const float *x1 = x;
        rc = kk_net_f0n(m, ws, 1, &x1, &L, &s_pro, &f0, &n, &err);
    }
    if (rc) CHOIR_LOGE("kokoro: F0 / N: %s", err.msg);
    kk_ws_release(ws, mark);
    return rc;
}

int64_t choir_kokoro_estimate_bytes(int n_ids, int64_t frames) {
    /* The plan of one piece in the call's arena (kk_front_batch_in, then the
     * decoder), each block rounded up to the arena's alignment: the text
     * side (the front's T-sized buffers and its steps' temporaries) stays
     * throughout; from the alignment on, the piece's arrays (asr, F0, N)
     * stay too, and the frame side (en, h, x) until the
     * F0 / N blocks are done; each network stage adds its working memory
     * and its kernel scratch on top and gives them back. The generator's
     * last stage sets the peak for any real piece (kk_dec_work_bytes: ~104k
     * floats a frame). */
    const int64_t T = n_ids > 0 ? n_ids : 1, L = frames > 0 ? frames : 1, F = sizeof(float),
                  A = 2 * CHOIR_ALIGN;
    const int64_t text = (128 + 768 + 512 + 640 + 512 + 512 + 2) * T * F + 8 * A +
                         (50 * T + 2 * 128 + 1024) * F + 2 * A;
    int64_t stage = kk_fnet_albert_work_bytes(T), w;
    w = kk_fnet_bilstm_work_bytes(1, T, KK_HIDDEN + KK_STYLE, KK_HIDDEN / 2, true);
    stage = w > stage ? w : stage;
    w = kk_fnet_text_work_bytes(1, T);
    stage = w > stage ? w : stage;
    stage += (int64_t)kk_host_scratch_bytes(T, 0) + A;
    const int64_t piece = (KK_HIDDEN * L + 4 * L) * F + 3 * A,
                  frame = (KK_HIDDEN + KK_STYLE + 2 * KK_HIDDEN) * L * F + 3 * A;
    int64_t frame_stage = kk_fnet_bilstm_work_bytes(1, L, KK_HIDDEN + KK_STYLE, KK_HIDDEN / 2, true);
    w = kk_dec_f0n_work_bytes(1, L);
    frame_stage = w > frame_stage ? w : frame_stage;
    const int64_t scratch = (int64_t)kk_host_scratch_bytes(0, L) + A;
    int64_t top = stage;
    w = piece + frame + frame_stage + scratch;
    top = w > top ? w : top;
    w = piece + kk_dec_work_bytes(1, L) + scratch;
    top = w > top ? w : top;
    return text + top;
}

choir_kokoro_params choir_kokoro_default_params(void) {
    choir_kokoro_params p = {.speed = 1.0f, .noise = CHOIR_KOKORO_NOISE_SEEDED, .seed = 0};
    return p;
}

void kk_piece_free(kk_piece *pc) {
    if (!pc) return;
    if (pc->in_arena) { /* given back with the call's arena */
        memset(pc, 0, sizeof *pc);
        return;
    }
    choir_free(pc->asr);
    choir_free(pc->f0);
    choir_free(pc->n);
    memset(pc, 0, sizeof *pc);
}

int kk_front(const choir_kokoro *m, const int32_t *ids, int n_ids, const float *style,
             const choir_kokoro_params *params, kk_piece *out, choir_err *err) {
    choir_kokoro_params p = params ? *params : choir_kokoro_default_params();
    memset(out, 0, sizeof *out);
    if (!m || !ids || !style)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: missing model, ids, style or output");
    return kk_front_batch(m, 1, &ids, &n_ids, &style, &p, out, err);
}

int kk_synthesize_in(const choir_kokoro *m, const kk_ws *call, const int32_t *ids, int n_ids,
                     const float *style, const choir_kokoro_params *p, float **audio_out,
                     int64_t *n_samples, choir_err *err) {
    kk_piece pc = {0};
    float *audio = NULL;
    const size_t mark = call ? choir_arena_mark(call->arena) : 0;
    int rc = kk_front_batch_in(m, call, 1, &ids, &n_ids, &style, p, &pc, err);
    if (rc) return rc;
    const int64_t L = pc.L, n_out = L * CHOIR_KOKORO_SAMPLES_PER_FRAME;
    choir_kokoro_decode_input in = {.asr = pc.asr, .f0 = pc.f0, .n = pc.n, .style = style,
                                    .frames = L, .noise_seeded = pc.seeded, .noise_seed = pc.seed};
    rc = kk_net_decode(m, call, &in, 1, &audio, err);
    kk_piece_free(&pc);
    if (call) choir_arena_release(call->arena, mark);
    if (rc) return rc;
    TRACE(p, "audio", audio, 1, n_out);
    *audio_out = audio;
    if (n_samples) *n_samples = n_out;
    return 0;
}

int choir_kokoro_synthesize_ids(const choir_kokoro *m, const int32_t *ids, int n_ids,
                                const float *style, const choir_kokoro_params *params,
                                float **audio_out, int64_t *n_samples, choir_err *err) {
    choir_kokoro_params defaults = choir_kokoro_default_params();
    const choir_kokoro_params *p = params ? params : &defaults;
    if (audio_out) *audio_out = NULL;
    if (n_samples) *n_samples = 0;
    if (!m || !ids || !style || !audio_out)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: missing model, ids, style or output");
    kk_ws call;
    int rc = kk_call_open(m, p->arena, &call, err);
    if (!rc)
        rc = kk_synthesize_in(m, call.arena ? &call : NULL, ids, n_ids, style, p, audio_out,
                              n_samples, err);
    kk_call_close(&call);
    return rc;
}
