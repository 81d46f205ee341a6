/* Whisper's encoder on the CUDA backend (built only with CHOIR_HAVE_CUDA).
 *
 * The same computation as choir_whisper_encode (whisper_net.c), block by
 * block, with the weights copied once to device memory in their own storage.
 * Windows are batched: every linear layer multiplies all windows' rows at
 * once (n * 1500 rows), attention runs per window.
 *
 * API (to be declared in choir/whisper.h under #ifdef CHOIR_HAVE_CUDA; until
 * then callers declare these three prototypes themselves):
 *
 *   choir_whisper_gpu *choir_whisper_gpu_create(const choir_whisper *m,
 *           choir_cuda *cu, int max_windows, choir_err *err);
 *     Uploads the encoder weights and plans activations for up to
 *     max_windows windows per pass (device memory counted on `cu`). The model
 *     and the context must outlive the result. NULL and err on failure.
 *   int choir_whisper_gpu_encode(choir_whisper_gpu *g, const float *mel,
 *           int n, float *out, choir_err *err);
 *     As choir_whisper_encode: host mel [n][n_mels][3000] -> host out
 *     [n][n_audio_ctx][d_model]; any n (passes of max_windows).
 *   void choir_whisper_gpu_free(choir_whisper_gpu *g);   NULL is a no-op. */
#include "choir/whisper.h"

#ifdef CHOIR_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/cuda.h"
#include "models/whisper/whisper_internal.h"

#define WG_LN_EPS 1e-5f /* as whisper_net.c */

typedef struct choir_whisper_gpu choir_whisper_gpu;
choir_whisper_gpu *choir_whisper_gpu_create(const choir_whisper *m, choir_cuda *cu,
                                            int max_windows, choir_err *err);
int choir_whisper_gpu_encode(choir_whisper_gpu *g, const float *mel, int n, float *out,
                             choir_err *err);
void choir_whisper_gpu_free(choir_whisper_gpu *g);

/* One encoder block on the device; vectors are f32, absent ones empty. */
typedef struct wg_block {
    choir_cuda_buf attn_ln_g, attn_ln_b, mlp_ln_g, mlp_ln_b; /* [d] */
    choir_cuda_weight q, k, v, o;                           /* [d, d] */
    choir_cuda_buf bq, bv, bo;                              /* [d] */
    choir_cuda_weight fc1, fc2;                             /* [ffn, d], [d, ffn] */
    choir_cuda_buf fc1_b, fc2_b;                            /* [ffn], [d] */
} wg_block;

struct choir_whisper_gpu {
    const choir_whisper *m;
    choir_cuda *cu;
    int max_windows;
    choir_cuda_buf conv1_w, conv1_b; /* [d, n_mels, 3], [d] */
    choir_cuda_buf conv2_w, conv2_b; /* [d, d, 3], [d] */
    choir_cuda_buf enc_pos;          /* [A, d] */
    choir_cuda_buf enc_ln_g, enc_ln_b;
    wg_block *enc;                   /* [n_audio_layer] */
    /* Activations for max_windows windows (W): mel [W, n_mels, F]; conv
     * scratch c1 [d, F], c2 [d, A] (one window at a time); the residual
     * stream x and h, q, k, v, att [W*A, d]; the MLP hidden [W*A, ffn]. */
    choir_cuda_buf act;
};

static int vec_up(choir_cuda *cu, const float *host, int64_t n, choir_cuda_buf *out,
                  choir_err *err) {
    memset(out, 0, sizeof(*out));
    if (!host) return 0;
    int rc = choir_cuda_buf_alloc(cu, (size_t)n * sizeof(float), out, err);
    if (rc) return rc;
    return choir_cuda_upload(cu, out, 0, host, (size_t)n * sizeof(float), err);
}

static const float *dptr(const choir_cuda_buf *b) { return (const float *)b->ptr; }

static void block_free(choir_cuda *cu, wg_block *b) {
    choir_cuda_buf *vecs[] = {&b->attn_ln_g, &b->attn_ln_b, &b->mlp_ln_g, &b->mlp_ln_b, &b->bq,
                              &b->bv,        &b->bo,        &b->fc1_b,    &b->fc2_b};
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) choir_cuda_buf_free(cu, vecs[i]);
    choir_cuda_weight *ws[] = {&b->q, &b->k, &b->v, &b->o, &b->fc1, &b->fc2};
    for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) choir_cuda_weight_free(cu, ws[i]);
}

static int block_up(choir_cuda *cu, const wh_block *h, int64_t d, int64_t ffn, wg_block *b,
                    choir_err *err) {
    int rc;
    if ((rc = vec_up(cu, h->attn_ln_g, d, &b->attn_ln_g, err)) ||
        (rc = vec_up(cu, h->attn_ln_b, d, &b->attn_ln_b, err)) ||
        (rc = vec_up(cu, h->mlp_ln_g, d, &b->mlp_ln_g, err)) ||
        (rc = vec_up(cu, h->mlp_ln_b, d, &b->mlp_ln_b, err)) ||
        (rc = vec_up(cu, h->attn.bq, d, &b->bq, err)) ||
        (rc = vec_up(cu, h->attn.bv, d, &b->bv, err)) ||
        (rc = vec_up(cu, h->attn.bo, d, &b->bo, err)) ||
        (rc = vec_up(cu, h->fc1_b, ffn, &b->fc1_b, err)) ||
        (rc = vec_up(cu, h->fc2_b, d, &b->fc2_b, err)) ||
        (rc = choir_cuda_weight_upload(cu, &h->attn.q, &b->q, err)) ||
        (rc = choir_cuda_weight_upload(cu, &h->attn.k, &b->k, err)) ||
        (rc = choir_cuda_weight_upload(cu, &h->attn.v, &b->v, err)) ||
        (rc = choir_cuda_weight_upload(cu, &h->attn.o, &b->o, err)) ||
        (rc = choir_cuda_weight_upload(cu, &h->fc1, &b->fc1, err)) ||
        (rc = choir_cuda_weight_upload(cu, &h->fc2, &b->fc2, err)))
        return rc;
    return 0;
}

void choir_whisper_gpu_free(choir_whisper_gpu *g) {
    if (!g) return;
    choir_cuda *cu = g->cu;
    if (g->enc)
        for (int l = 0; l < g->m->dims.n_audio_layer; l++) block_free(cu, &g->enc[l]);
    choir_free(g->enc);
    choir_cuda_buf *bufs[] = {&g->conv1_w, &g->conv1_b, &g->conv2_w,  &g->conv2_b,
                              &g->enc_pos, &g->enc_ln_g, &g->enc_ln_b, &g->act};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) choir_cuda_buf_free(cu, bufs[i]);
    choir_free(g);
}

static size_t act_floats(const choir_whisper_dims *D, int W) {
    size_t d = (size_t)D->d_model, A = (size_t)D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES;
    return (size_t)W * (size_t)D->n_mels * F + d * F + d * A +
           (size_t)W * A * (6 * d + (size_t)D->ffn_dim);
}

choir_whisper_gpu *choir_whisper_gpu_create(const choir_whisper *m, choir_cuda *cu,
                                            int max_windows, choir_err *err) {
    const choir_whisper_dims *D = &m->dims;
    int64_t d = D->d_model, ffn = D->ffn_dim;
    if (max_windows < 1) max_windows = 1;
    if (D->n_audio_ctx * 2 != CHOIR_WHISPER_N_FRAMES) {
        choir_err_set(err, CHOIR_EUNSUPPORTED, "whisper gpu: n_audio_ctx %d (expected %d)",
                      D->n_audio_ctx, CHOIR_WHISPER_N_FRAMES / 2);
        return NULL;
    }
    choir_whisper_gpu *g = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof(*g));
    if (!g) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper gpu: out of host memory");
        return NULL;
    }
    g->m = m;
    g->cu = cu;
    g->max_windows = max_windows;
    g->enc = choir_calloc(CHOIR_MEM_OTHER, (size_t)D->n_audio_layer, sizeof(wg_block));
    if (!g->enc) {
        choir_err_set(err, CHOIR_ENOMEM, "whisper gpu: out of host memory");
        goto fail;
    }
    if (vec_up(cu, m->conv1_w, d * D->n_mels * 3, &g->conv1_w, err) ||
        vec_up(cu, m->conv1_b, d, &g->conv1_b, err) ||
        vec_up(cu, m->conv2_w, d * d * 3, &g->conv2_w, err) ||
        vec_up(cu, m->conv2_b, d, &g->conv2_b, err) ||
        vec_up(cu, m->enc_pos, (int64_t)D->n_audio_ctx * d, &g->enc_pos, err) ||
        vec_up(cu, m->enc_ln_g, d, &g->enc_ln_g, err) ||
        vec_up(cu, m->enc_ln_b, d, &g->enc_ln_b, err))
        goto fail;
    for (int l = 0; l < D->n_audio_layer; l++)
        if (block_up(cu, &m->enc[l], d, ffn, &g->enc[l], err)) goto fail;
    if (choir_cuda_buf_alloc(cu, act_floats(D, max_windows) * sizeof(float), &g->act, err))
        goto fail;
    return g;
fail:
    choir_err_prefix(err, "whisper gpu: ");
    choir_whisper_gpu_free(g);
    return NULL;
}

/* One pass over W <= max_windows windows already uploaded to the mel area. */
static int encode_pass(choir_whisper_gpu *g, int W, choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    choir_cuda *cu = g->cu;
    int64_t d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES, ffn = D->ffn_dim;
    int64_t rows = (int64_t)W * A, Dh = d / D->n_head;
    float scale = 1.0f / sqrtf((float)Dh);
    float *mel = (float *)g->act.ptr, *c1 = mel + (int64_t)W * D->n_mels * F, *c2 = c1 + d * F;
    float *x = c2 + d * A, *h = x + rows * d, *q = h + rows * d, *k = q + rows * d;
    float *v = k + rows * d, *att = v + rows * d, *hid = att + rows * d;
    int rc = 0;

    /* Conv stem per window: GELU(conv1) [d, F], GELU(conv2, stride 2) [d, A],
     * then time-major into the residual stream with positions added. */
    for (int b = 0; b < W && !rc; b++) {
        const float *X = mel + (int64_t)b * D->n_mels * F;
        if ((rc = choir_cuda_conv1d(cu, X, D->n_mels, F, dptr(&g->conv1_w), dptr(&g->conv1_b), d, 3,
                                    1, 1, 1, 1, c1, err)) ||
            (rc = choir_cuda_gelu_erf(cu, c1, d * F, err)) ||
            (rc = choir_cuda_conv1d(cu, c1, d, F, dptr(&g->conv2_w), dptr(&g->conv2_b), d, 3, 2, 1,
                                    1, 1, c2, err)) ||
            (rc = choir_cuda_gelu_erf(cu, c2, d * A, err)) ||
            (rc = choir_cuda_transpose_add(cu, c2, d, A, dptr(&g->enc_pos), x + (int64_t)b * A * d,
                                           err)))
            return rc;
    }
    for (int l = 0; l < D->n_audio_layer; l++) {
        const wg_block *B = &g->enc[l];
        if ((rc = choir_cuda_layer_norm(cu, x, h, rows, d, dptr(&B->attn_ln_g), dptr(&B->attn_ln_b),
                                        WG_LN_EPS, err)) ||
            (rc = choir_cuda_linear(cu, h, rows, &B->q, dptr(&B->bq), q, err)) ||
            (rc = choir_cuda_linear(cu, h, rows, &B->k, NULL, k, err)) ||
            (rc = choir_cuda_linear(cu, h, rows, &B->v, dptr(&B->bv), v, err)))
            return rc;
        for (int b = 0; b < W; b++) {
            int64_t off = (int64_t)b * A * d;
            rc = choir_cuda_attention(cu, q + off, d, k + off, d, v + off, d, att + off, d, A, A,
                                      D->n_head, Dh, scale, NULL, false, err);
            if (rc) return rc;
        }
        if ((rc = choir_cuda_linear(cu, att, rows, &B->o, dptr(&B->bo), q, err)) ||
            (rc = choir_cuda_add(cu, x, q, x, rows * d, err)) ||
            (rc = choir_cuda_layer_norm(cu, x, h, rows, d, dptr(&B->mlp_ln_g), dptr(&B->mlp_ln_b),
                                        WG_LN_EPS, err)) ||
            (rc = choir_cuda_linear(cu, h, rows, &B->fc1, dptr(&B->fc1_b), hid, err)) ||
            (rc = choir_cuda_gelu_erf(cu, hid, rows * ffn, err)) ||
            (rc = choir_cuda_linear(cu, hid, rows, &B->fc2, dptr(&B->fc2_b), h, err)) ||
            (rc = choir_cuda_add(cu, x, h, x, rows * d, err)))
            return rc;
    }
    return choir_cuda_layer_norm(cu, x, x, rows, d, dptr(&g->enc_ln_g), dptr(&g->enc_ln_b),
                                 WG_LN_EPS, err);
}

int choir_whisper_gpu_encode(choir_whisper_gpu *g, const float *mel, int n, float *out,
                             choir_err *err) {
    const choir_whisper_dims *D = &g->m->dims;
    int64_t d = D->d_model, A = D->n_audio_ctx, F = CHOIR_WHISPER_N_FRAMES;
    if (n < 0) return choir_err_set(err, CHOIR_EINVAL, "whisper gpu: negative window count");
    size_t mel_win = (size_t)D->n_mels * (size_t)F * sizeof(float);
    size_t out_win = (size_t)(A * d) * sizeof(float);
    for (int b0 = 0; b0 < n; b0 += g->max_windows) {
        int W = n - b0 < g->max_windows ? n - b0 : g->max_windows;
        /* The residual stream x follows the mel and conv areas (encode_pass). */
        size_t x_off = (size_t)W * mel_win + (size_t)(d * F + d * A) * sizeof(float);
        int rc = choir_cuda_upload(g->cu, &g->act, 0, mel + (size_t)b0 * (mel_win / sizeof(float)),
                                   (size_t)W * mel_win, err);
        if (!rc) rc = encode_pass(g, W, err);
        if (!rc)
            rc = choir_cuda_download(g->cu, out + (size_t)b0 * (out_win / sizeof(float)), &g->act,
                                     x_off, (size_t)W * out_win, err);
        if (rc) {
            choir_err_prefix(err, "whisper gpu: ");
            return rc;
        }
    }
    return 0;
}

#else
/* Keeps the translation unit non-empty in CPU-only builds. */
typedef int choir_whisper_cuda_unused;
#endif
