/* Kokoro's front (KModel.forward_with_tokens up to the decoder, spec §5)
 * for one piece or a batch: the stages in order, each run for every piece
 * before the next starts, so that each network stage is one call on the
 * model's executor (kokoro_exec.c) for all pieces:
 *
 *   per piece (pool)   validate, workspace, ALBERT embeddings
 *   executor           ALBERT + bert_encoder, all pieces' rows stacked
 *   3 x  per piece     [x ; s_pro]            executor  duration-encoder BiLSTM
 *        per piece     AdaLayerNorm
 *   per piece          [x ; s_pro]            executor  duration BiLSTM
 *   per piece          durations
 *   executor           text encoder: embedding, convolutions (per piece), BiLSTM
 *   per piece          alignment (en, asr)
 *   executor           shared BiLSTM over frames
 *   executor           F0 / N blocks, all pieces padded to the longest
 *                      (on a device with CHOIR_KOKORO_SHARED_F0N=1 these two
 *                      are one call, the LSTM's output kept there)
 *   per piece          the traces up to "asr" (the seeded noise is drawn
 *                      where the decoder makes the harmonic source)
 *
 * With the front on the device (on a device unless CHOIR_KOKORO_FRONT_DEVICE=0;
 * kk_net_front_on_device) the three duration-encoder layers and the
 * duration LSTM are one executor call (the norms' affine computed per piece
 * first, FB_NORM_AFFINE), ALBERT's bert comes down only for a traced piece,
 * and with the shared LSTM and the blocks in one call the frames' input is
 * gathered there from d's rows (the alignment then builds asr only).
 *
 * On a device a piece's durations and curves equal what it gets alone on
 * the same device up to the order cuBLAS sums a product in (ALBERT's
 * products see more rows); on the CPU the executor runs pieces one by one
 * and the result is the single piece's bit for bit (which the CPU test of
 * this file checks). A piece with a trace (params.trace) sees every stage:
 * "bert_out", "d_en", "duration_encoder_out", "duration", "pred_dur",
 * "text_encoder_out", "F0_pred", "N_pred", "asr". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/log.h"
#include "choir/pool.h"
#include "models/kokoro/kokoro_internal.h"

/* One piece's state between stages. The text side lives in `ws` (sized
 * for exactly the buffers below and the per-piece steps' temporaries), the
 * frame side in `ws2`: arenas of their own, or views of the call's batch
 * arena (ws_view, ws2_view: the text side, then the piece's kk_piece
 * arrays, then the frame side, so that the frame side goes first). */
typedef struct fb_piece {
    const int32_t *ids;
    int64_t T, L;
    const float *s_pro;       /* [128] */
    choir_kokoro_params p;
    kk_ws *ws, *ws2;
    kk_ws ws_view, ws2_view;
    bool rows_on_device;      /* the shared LSTM gathers its input there: no en */
    const kk_ws *call;        /* the call's memory, or NULL */
    float *e;                 /* [T, 128] ALBERT embeddings */
    float *bert;              /* [T, 768] */
    float *d_en;              /* [T, 512] */
    float *d;                 /* [T, 640] duration encoder in and out */
    float *y;                 /* [T, 512] an LSTM's output */
    float *t_en;              /* [512, T] */
    float *dur;               /* [T] */
    float *norm_gb;           /* [3, 1024] the duration norms' affine (front on the device) */
    int32_t *pred_dur;        /* [T] */
    float *en;                /* [L, 640] aligned duration features */
    float *h;                 /* [L, 512] shared LSTM output */
    float *x;                 /* [512, L] the same, channels first */
    kk_piece *out;
    int rc;
    choir_err err;
} fb_piece;

static void trace(const fb_piece *q, const char *name, const float *data, int nd, int64_t d0,
                  int64_t d1) {
    if (!q->p.trace) return;
    const int64_t shape[2] = {d0, d1};
    q->p.trace(q->p.trace_user, name, data, nd, shape);
}

enum fb_stage {
    FB_PREPARE,     /* validate, workspace, embeddings */
    FB_STYLE_D_EN,  /* d = [d_en ; s_pro] */
    FB_NORM_AFFINE, /* the three duration norms' (1 + gamma, beta) of s_pro */
    FB_DUR_DONE,    /* the duration encoder's output traced (front on the device) */
    FB_NORM,        /* AdaLayerNorm of dur_norm[layer] on y, d = [y ; s_pro] */
    FB_DURATIONS,   /* durations from y */
    FB_ALIGN,       /* t_en from y, frame workspace, en and asr */
    FB_TRANSPOSE,   /* x = h^T */
    FB_FINISH,      /* traces, text workspace freed */
};

typedef struct fb_job {
    const choir_kokoro *m;
    fb_piece *pc;
    enum fb_stage stage;
    int layer;
} fb_job;

static int prepare(const choir_kokoro *m, fb_piece *q) {
    const int64_t T = q->T;
    if (T < 3 || T > CHOIR_KOKORO_MAX_PHONEMES + 2)
        return choir_err_set(&q->err, CHOIR_EINVAL, "kokoro: %lld ids; a piece has 3..%d with boundaries",
                             (long long)T, CHOIR_KOKORO_MAX_PHONEMES + 2);
    if (!(q->p.speed > 0.0f) || !isfinite(q->p.speed))
        return choir_err_set(&q->err, CHOIR_EINVAL, "kokoro: speed %g is not > 0", (double)q->p.speed);
    for (int64_t i = 0; i < T; i++)
        if (q->ids[i] < 0 || q->ids[i] >= KK_NTOKEN)
            return choir_err_set(&q->err, CHOIR_EINVAL, "kokoro: id %d at %lld is outside 0..%d",
                                 (int)q->ids[i], (long long)i, KK_NTOKEN - 1);
    /* e, bert, d_en, d, y, t_en, dur, pred_dur, the two 128-float rows,
     * then the steps' temporaries (1024 T of slack, the
     * duration logits 50 T, an AdaLayerNorm's 1024), with margin for the
     * arena's alignment */
    const int64_t floats = (128 + 768 + 512 + 640 + 512 + 512 + 2) * T + 1024 * T +
                           64 * T + 16384 + 3 * 2 * KK_HIDDEN;
    if (q->call) {
        kk_ws_over(&q->ws_view, q->call);
        q->ws = &q->ws_view;
    } else if (!(q->ws = kk_ws_create(floats * (int64_t)sizeof(float), &q->err))) {
        return q->err.code ? q->err.code : CHOIR_ENOMEM;
    }
    q->e = kk_ws_floats(q->ws, T * KK_BERT_EMB);
    q->bert = kk_ws_floats(q->ws, T * KK_BERT);
    q->d_en = kk_ws_floats(q->ws, T * KK_HIDDEN);
    q->d = kk_ws_floats(q->ws, T * (KK_HIDDEN + KK_STYLE));
    q->y = kk_ws_floats(q->ws, T * KK_HIDDEN);
    q->t_en = kk_ws_floats(q->ws, KK_HIDDEN * T);
    q->dur = kk_ws_floats(q->ws, T);
    q->pred_dur = (int32_t *)kk_ws_floats(q->ws, T);
    q->norm_gb = kk_ws_floats(q->ws, 3 * 2 * KK_HIDDEN);
    size_t mark = kk_ws_mark(q->ws);
    float *type0 = kk_ws_floats(q->ws, KK_BERT_EMB), *row = kk_ws_floats(q->ws, KK_BERT_EMB);
    if (!q->e || !q->bert || !q->d_en || !q->d || !q->y || !q->t_en || !q->dur ||
        !q->pred_dur || !q->norm_gb || !type0 || !row)
        return CHOIR_ENOMEM;
    kk_albert_embed(m, q->ids, T, q->e, type0, row);
    kk_ws_release(q->ws, mark);
    return 0;
}

static int durations_and_convs(const choir_kokoro *m, fb_piece *q) {
    const int64_t T = q->T;
    int rc = kk_durations_from(m, q->y, T, q->p.speed, q->dur, q->pred_dur, q->ws);
    if (rc) return rc;
    trace(q, "duration", q->dur, 1, T, 0);
    if (q->p.trace) {
        for (int64_t t = 0; t < T; t++) q->dur[t] = (float)q->pred_dur[t]; /* dur is done */
        trace(q, "pred_dur", q->dur, 1, T, 0);
    }
    if (q->p.durations)
        for (int64_t t = 0; t < T; t++) {
            if (q->p.durations[t] < 1 || q->p.durations[t] > 1000)
                return choir_err_set(&q->err, CHOIR_EINVAL,
                                     "kokoro: forced duration %d at %lld is not in 1..1000",
                                     (int)q->p.durations[t], (long long)t);
            q->pred_dur[t] = q->p.durations[t];
        }
    q->L = 0;
    for (int64_t t = 0; t < T; t++) q->L += q->pred_dur[t];
    return 0;
}

static int align(fb_piece *q) {
    const int64_t T = q->T, L = q->L, C_d = KK_HIDDEN + KK_STYLE;
    kk_piece *out = q->out;
    kk_transpose(q->y, T, KK_HIDDEN, q->t_en);
    trace(q, "text_encoder_out", q->t_en, 2, KK_HIDDEN, T);
    out->L = L;
    out->seeded = q->p.noise == CHOIR_KOKORO_NOISE_SEEDED;
    out->seed = q->p.seed;
    if (q->call) {
        /* below the frame side, which is given back before the decoder */
        out->in_arena = true;
        out->asr = kk_ws_floats(q->ws, KK_HIDDEN * L);
        out->f0 = kk_ws_floats(q->ws, 2 * L);
        out->n = kk_ws_floats(q->ws, 2 * L);
        kk_ws_over(&q->ws2_view, q->call);
        q->ws2 = &q->ws2_view;
    } else {
        out->asr = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(KK_HIDDEN * L) * sizeof(float));
        out->f0 = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(2 * L) * sizeof(float));
        out->n = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(2 * L) * sizeof(float));
        q->ws2 = kk_ws_create((C_d + 2 * KK_HIDDEN) * L * (int64_t)sizeof(float) + 65536, &q->err);
        if (!q->ws2) return q->err.code ? q->err.code : CHOIR_ENOMEM;
    }
    q->en = kk_ws_floats(q->ws2, L * C_d);
    q->h = kk_ws_floats(q->ws2, L * KK_HIDDEN);
    q->x = kk_ws_floats(q->ws2, KK_HIDDEN * L);
    if (!q->en || !q->h || !q->x || !out->asr || !out->f0 || !out->n) return CHOIR_ENOMEM;
    for (int64_t t = 0, j = 0; t < T; t++)
        for (int32_t r = 0; r < q->pred_dur[t]; r++, j++) {
            if (!q->rows_on_device) memcpy(q->en + j * C_d, q->d + t * C_d, (size_t)C_d * sizeof(float));
            for (int64_t c = 0; c < KK_HIDDEN; c++) out->asr[c * L + j] = q->t_en[c * T + t];
        }
    return 0;
}

static int run_stage(const fb_job *job, fb_piece *q) {
    const choir_kokoro *m = job->m;
    switch (job->stage) {
    case FB_PREPARE:
        return prepare(m, q);
    case FB_STYLE_D_EN:
        trace(q, "bert_out", q->bert, 2, q->T, KK_BERT);
        if (q->p.trace) { /* t_en is free scratch until the alignment */
            kk_transpose(q->d_en, q->T, KK_HIDDEN, q->t_en);
            trace(q, "d_en", q->t_en, 2, KK_HIDDEN, q->T);
        }
        kk_concat_style(q->d_en, q->T, q->s_pro, q->d);
        return 0;
    case FB_NORM_AFFINE:
        for (int l = 0; l < 3; l++)
            kk_ada_layer_norm_affine(&m->dur_norm[l], q->s_pro, q->norm_gb + l * 2 * KK_HIDDEN);
        return 0;
    case FB_DUR_DONE:
        trace(q, "duration_encoder_out", q->d, 2, q->T, KK_HIDDEN + KK_STYLE);
        return 0;
    case FB_NORM: {
        int rc = kk_ada_layer_norm(&m->dur_norm[job->layer], q->y, q->T, q->s_pro, q->ws);
        if (!rc) kk_concat_style(q->y, q->T, q->s_pro, q->d);
        if (!rc && job->layer == 2)
            trace(q, "duration_encoder_out", q->d, 2, q->T, KK_HIDDEN + KK_STYLE);
        return rc;
    }
    case FB_DURATIONS:
        return durations_and_convs(m, q);
    case FB_ALIGN:
        return align(q);
    case FB_TRANSPOSE:
        kk_transpose(q->h, q->L, KK_HIDDEN, q->x);
        return 0;
    case FB_FINISH:
        trace(q, "F0_pred", q->out->f0, 1, 2 * q->L, 0);
        trace(q, "N_pred", q->out->n, 1, 2 * q->L, 0);
        trace(q, "asr", q->out->asr, 2, KK_HIDDEN, q->L);
        kk_ws_free(q->ws2);
        /* a view's text side lies below the piece's arrays: the caller's
         * release gives it back with them */
        if (!q->call) kk_ws_free(q->ws);
        q->ws = q->ws2 = NULL;
        return 0;
    }
    return CHOIR_EINVAL;
}

static void stage_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const fb_job *job = ctx;
    for (int64_t i = begin; i < end; i++) {
        fb_piece *q = &job->pc[i];
        if (!q->rc) q->rc = run_stage(job, q);
    }
}

/* Runs one CPU stage for every piece on the default pool; the first failing
 * piece's code, err naming it. */
static int cpu_stage(const choir_kokoro *m, fb_piece *pc, int n, enum fb_stage stage, int layer,
                     choir_err *err) {
    fb_job job = {.m = m, .pc = pc, .stage = stage, .layer = layer};
    if (n == 1) stage_range(&job, 0, 1, 0);
    else choir_pool_parallel_for(choir_pool_default(), n, 1, stage_range, &job);
    for (int i = 0; i < n; i++)
        if (pc[i].rc) {
            if (pc[i].rc == CHOIR_ENOMEM && !pc[i].err.code)
                choir_err_set(&pc[i].err, CHOIR_ENOMEM, "kokoro: out of memory (%lld ids)",
                              (long long)pc[i].T);
            else if (!pc[i].err.code)
                choir_err_set(&pc[i].err, pc[i].rc, "kokoro: the front failed (code %d)", pc[i].rc);
            if (err) *err = pc[i].err;
            if (n > 1) choir_err_prefix(err, "batch item %d", i);
            return pc[i].rc;
        }
    return 0;
}

/* ALBERT over every piece on the executor (with the front on the device,
 * bert only where it is traced). */
static int batch_albert(const choir_kokoro *m, fb_piece *pc, int n, const float **e, int64_t *T,
                        float **bert, float **d_en, choir_err *err) {
    const bool all = !kk_net_front_on_device(m);
    for (int b = 0; b < n; b++)
        e[b] = pc[b].e, T[b] = pc[b].T, bert[b] = all || pc[b].p.trace ? pc[b].bert : NULL,
        d_en[b] = pc[b].d_en;
    return kk_net_albert(m, pc[0].call, n, e, T, bert, d_en, err);
}

/* The F0 / N blocks over every piece on the executor. */
static int batch_f0n(const choir_kokoro *m, fb_piece *pc, int n, const float **x, int64_t *L,
                     const float **s_pro, float **f0, float **nc, choir_err *err) {
    for (int b = 0; b < n; b++)
        x[b] = pc[b].x, L[b] = pc[b].L, s_pro[b] = pc[b].s_pro, f0[b] = pc[b].out->f0,
        nc[b] = pc[b].out->n;
    return kk_net_f0n(m, pc[0].call, n, x, L, s_pro, f0, nc, err);
}

/* One line per batch (stderr under CHOIR_KOKORO_PROFILE=1, else debug
 * log): milliseconds per stage, each over all n pieces. */
static void log_profile(int n, const double *clk) {
    const char *env = getenv("CHOIR_KOKORO_PROFILE");
    bool loud = env && env[0] && strcmp(env, "0") != 0;
    char line[400];
    snprintf(line, sizeof line,
             "kokoro batched front: %d pieces: embeddings %.1f, albert %.1f, duration encoder "
             "%.1f, duration lstm %.1f, durations %.1f, text encoder %.1f, align "
             "%.1f, shared lstm %.1f, f0/n blocks %.1f, finish %.1f ms; total %.1f ms",
             n, 1e3 * (clk[1] - clk[0]), 1e3 * (clk[2] - clk[1]), 1e3 * (clk[3] - clk[2]),
             1e3 * (clk[4] - clk[3]), 1e3 * (clk[5] - clk[4]), 1e3 * (clk[6] - clk[5]),
             1e3 * (clk[7] - clk[6]), 1e3 * (clk[8] - clk[7]), 1e3 * (clk[9] - clk[8]),
             1e3 * (clk[10] - clk[9]), 1e3 * (clk[10] - clk[0]));
    if (loud)
        fprintf(stderr, "%s\n", line);
    else
        CHOIR_LOGD("%s", line);
}

int kk_front_batch(const choir_kokoro *m, int n, const int32_t *const *ids, const int *n_ids,
                   const float *const *style, const choir_kokoro_params *params, kk_piece *out,
                   choir_err *err) {
    return kk_front_batch_in(m, NULL, n, ids, n_ids, style, params, out, err);
}

int kk_front_batch_in(const choir_kokoro *m, const kk_ws *call, int n, const int32_t *const *ids,
                      const int *n_ids, const float *const *style,
                      const choir_kokoro_params *params, kk_piece *out, choir_err *err) {
    if (call && !call->arena) call = NULL;
    if (!m || n < 1 || !ids || !n_ids || !style || !params || !out)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad arguments to the batched front");
    for (int b = 0; b < n; b++) {
        memset(&out[b], 0, sizeof out[b]);
        if (!ids[b] || !style[b])
            return choir_err_set(err, CHOIR_EINVAL, "batch item %d: kokoro: missing ids or style", b);
    }
    if (call && n > 1) {
        /* One arena has one user at a time: the pieces one after another,
         * each as alone (which is what the host executor does with a batch
         * anyway), piece b's text side and arrays below piece b + 1's. */
        int rc = 0;
        for (int b = 0; b < n && !rc; b++)
            if ((rc = kk_front_batch_in(m, call, 1, ids + b, n_ids + b, style + b, params + b,
                                        out + b, err)))
                choir_err_prefix(err, "batch item %d", b);
        for (int b = 0; rc && b < n; b++) kk_piece_free(&out[b]);
        return rc;
    }
    fb_piece *pc = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *pc);
    /* argument arrays of the executor's calls: x, y (or the ALBERT / F0 / N
     * arrays, which reuse them) and the lengths */
    const float **xs = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *xs);
    const float **ss = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *ss);
    float **ys = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *ys);
    float **zs = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *zs);
    int64_t *lens = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *lens);
    int64_t *ids_n = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *ids_n);
    const int32_t **durs = choir_calloc(CHOIR_MEM_OTHER, (size_t)n, sizeof *durs);
    int rc = 0;
    if (!pc || !xs || !ss || !ys || !zs || !lens || !ids_n || !durs) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for a batch of %d", n);
        goto done;
    }
    for (int b = 0; b < n; b++) {
        pc[b].ids = ids[b];
        pc[b].T = n_ids[b];
        pc[b].s_pro = style[b] + KK_STYLE;
        pc[b].p = params[b];
        pc[b].out = &out[b];
        pc[b].call = call;
        pc[b].rows_on_device = kk_net_front_on_device(m) && kk_net_keeps_frames(m);
    }
    double t0 = choir_now_s();
#define FB_CPU(stage, layer)                                                                       \
    do {                                                                                           \
        if ((rc = cpu_stage(m, pc, n, stage, layer, err))) goto done;                              \
    } while (0)
#define FB_LSTM(lstm, xfield, yfield, lfield)                                                      \
    do {                                                                                           \
        for (int b_ = 0; b_ < n; b_++)                                                             \
            xs[b_] = pc[b_].xfield, ys[b_] = pc[b_].yfield, lens[b_] = pc[b_].lfield;              \
        if ((rc = kk_net_bilstm(m, call, lstm, n, xs, lens, ys, err))) goto net_fail;              \
    } while (0)

    /* clk: after embeddings, ALBERT, duration encoder, duration LSTM,
     * durations + convolutions, text-encoder LSTM, alignment, shared LSTM,
     * F0 / N blocks, finish */
    double clk[11] = {t0};
    FB_CPU(FB_PREPARE, 0);
    clk[1] = choir_now_s();
    if ((rc = batch_albert(m, pc, n, xs, lens, ys, zs, err))) goto net_fail;
    clk[2] = choir_now_s();
    FB_CPU(FB_STYLE_D_EN, 0);
    if (kk_net_front_on_device(m)) {
        /* one device call; the profile counts it as the duration encoder */
        FB_CPU(FB_NORM_AFFINE, 0);
        for (int b = 0; b < n; b++)
            ys[b] = pc[b].d, zs[b] = pc[b].y, lens[b] = pc[b].T, xs[b] = pc[b].norm_gb;
        if ((rc = kk_net_duration(m, n, ys, lens, xs, zs, err))) goto net_fail;
        FB_CPU(FB_DUR_DONE, 0);
        clk[3] = clk[4] = choir_now_s();
    } else {
        for (int l = 0; l < 3; l++) {
            FB_LSTM(&m->dur_lstm[l], d, y, T);
            FB_CPU(FB_NORM, l);
        }
        clk[3] = choir_now_s();
        FB_LSTM(&m->pred_lstm, d, y, T);
        clk[4] = choir_now_s();
    }
    FB_CPU(FB_DURATIONS, 0);
    clk[5] = choir_now_s();
    for (int b = 0; b < n; b++) ys[b] = pc[b].y, lens[b] = pc[b].T;
    if ((rc = kk_net_text(m, call, n, ids, lens, ys, err))) goto net_fail;
    clk[6] = choir_now_s();
    FB_CPU(FB_ALIGN, 0);
    clk[7] = choir_now_s();
    if (kk_net_keeps_frames(m)) {
        /* one device call: the LSTM's output stays there for the blocks
         * (the profile counts both as the F0 / N blocks) */
        for (int b = 0; b < n; b++)
            xs[b] = pc[b].en, lens[b] = pc[b].L, ss[b] = pc[b].s_pro, ys[b] = pc[b].out->f0,
            zs[b] = pc[b].out->n;
        clk[8] = choir_now_s();
        if (pc[0].rows_on_device) {
            /* the LSTM's input gathered on the device from the rows of d */
            for (int b = 0; b < n; b++) xs[b] = pc[b].d, ids_n[b] = pc[b].T, durs[b] = pc[b].pred_dur;
            rc = kk_net_shared_f0n_rows(m, n, xs, ids_n, durs, lens, ss, ys, zs, err);
        } else {
            rc = kk_net_shared_f0n(m, n, xs, lens, ss, ys, zs, err);
        }
        if (rc) goto net_fail;
    } else {
        FB_LSTM(&m->shared, en, h, L);
        FB_CPU(FB_TRANSPOSE, 0);
        clk[8] = choir_now_s();
        if ((rc = batch_f0n(m, pc, n, xs, lens, ss, ys, zs, err))) goto net_fail;
    }
    clk[9] = choir_now_s();
    FB_CPU(FB_FINISH, 0);
    clk[10] = choir_now_s();
#undef FB_CPU
#undef FB_LSTM
    log_profile(n, clk);
    goto done;
net_fail:
    if (n > 1) choir_err_prefix(err, "kokoro: the front");
done:
    for (int b = 0; pc && b < n; b++) {
        kk_ws_free(pc[b].ws2);
        kk_ws_free(pc[b].ws);
        if (rc) kk_piece_free(&out[b]);
    }
    choir_free(pc);
    choir_free(xs);
    choir_free(ss);
    choir_free(ys);
    choir_free(zs);
    choir_free(lens);
    choir_free(ids_n);
    choir_free(durs);
    return rc;
}
