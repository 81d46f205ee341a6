/* Kokoro's building blocks: the per-call workspace, BiLSTM, AdaIN / AdaLayerNorm,
 * the AdainResBlk1d of the predictor and decoder, and the Snake residual block
 * (AdaINResBlock1) of the generator. Numerics follow ../shared/specs/kokoro.md §4. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/backend_vocoder.h"
#include "choir/kernels.h"
#include "models/kokoro/kokoro_internal.h"

/* --- workspace -----------------------------------------------------------
 * One forward pass asks for a few dozen buffers whose sizes depend on the
 * number of frames. They come from one arena, reserved up front from the
 * estimate or the call's batch arena, so the pass does not call malloc;
 * marks scope each block's temporaries. */

kk_ws *kk_ws_create(int64_t capacity_bytes, choir_err *err) {
    kk_ws *ws = choir_calloc(CHOIR_MEM_ACTIVATIONS, 1, sizeof *ws);
    if (!ws) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for the workspace");
        return NULL;
    }
    ws->arena = choir_arena_create((size_t)capacity_bytes, CHOIR_MEM_ACTIVATIONS, err);
    if (!ws->arena) {
        choir_free(ws);
        return NULL;
    }
    ws->owned = true;
    return ws;
}

void kk_ws_free(kk_ws *ws) {
    if (!ws) return;
    if (!ws->owned) {
        choir_arena_release(ws->arena, ws->base);
        return;
    }
    choir_arena_free(ws->arena);
    choir_free(ws);
}

void kk_ws_over(kk_ws *view, const kk_ws *call) {
    *view = (kk_ws){.arena = call->arena, .s = call->s, .base = choir_arena_mark(call->arena)};
}

float *kk_ws_floats(kk_ws *ws, int64_t n) {
    return choir_arena_alloc(ws->arena, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

size_t kk_ws_mark(const kk_ws *ws) { return choir_arena_mark(ws->arena); }
void kk_ws_release(kk_ws *ws, size_t mark) { choir_arena_release(ws->arena, mark); }
size_t kk_ws_high_water(const kk_ws *ws) { return choir_arena_high_water(ws->arena); }

/* --- small helpers ------------------------------------------------------- */

void kk_transpose(const float *x, int64_t rows, int64_t cols, float *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
}

void kk_conv1d(const kk_conv *c, const float *x, int64_t T, int stride, int pad, int dil,
               float *y) {
    choir_conv1d(x, c->cin, T, c->w, c->b, c->cout, c->k, stride, pad, dil, 1, y);
}

choir_stream *kk_ws_stream(kk_ws *ws, choir_backend *be, size_t scratch_bytes, choir_err *err) {
    choir_stream *s = choir_stream_create(be, err);
    if (s && choir_stream_use_arena(s, ws->arena, scratch_bytes, err)) {
        choir_stream_free(s);
        return NULL;
    }
    return s;
}

/* The backend operation on the CPU backend, the host arrays as they are;
 * the kernel's gates and cell state from ws. */
int kk_bilstm(const kk_lstm *l, const float *x, int64_t T, float *y, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    const int64_t H = l->h;
    choir_bilstm_weights w = {.w_ih = {l->w_ih[0], l->w_ih[1]}, .w_hh = {l->w_hh[0], l->w_hh[1]},
                              .b_ih = {l->b_ih[0], l->b_ih[1]}, .b_hh = {l->b_hh[0], l->b_hh[1]},
                              .In = l->in, .H = H};
    choir_backend *be = choir_backend_cpu(NULL);
    choir_stream *s =
        be ? kk_ws_stream(ws, be, (size_t)(4 * H * (T + 1) + 2 * H) * sizeof(float) + 256, NULL)
           : NULL;
    int rc = s ? choir_op_bilstm_w(s, x, 1, T, &w, NULL, y) : CHOIR_ENOMEM;
    choir_stream_free(s);
    choir_backend_free(be);
    kk_ws_release(ws, mark);
    return rc;
}

/* gamma, beta = fc(style) split in halves: h[0:C], h[C:2C] */
static float *style_affine(const kk_adain *a, const float *style, kk_ws *ws) {
    float *h = kk_ws_floats(ws, 2LL * a->C);
    if (h) choir_linear(style, 1, &a->fc.w, a->fc.b, h);
    return h;
}

void kk_ada_layer_norm_affine(const kk_adain *a, const float *style, float *gb) {
    choir_linear(style, 1, &a->fc.w, a->fc.b, gb);
    for (int64_t c = 0; c < a->C; c++) gb[c] = 1.0f + gb[c];
}

int kk_ada_layer_norm(const kk_adain *a, float *x, int64_t T, const float *style, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    const float *h = style_affine(a, style, ws);
    if (!h) return CHOIR_ENOMEM;
    choir_layer_norm(x, x, T, a->C, NULL, NULL, 1e-5f);
    for (int64_t t = 0; t < T; t++) {
        float *row = x + t * a->C;
        for (int64_t c = 0; c < a->C; c++) row[c] = (1.0f + h[c]) * row[c] + h[a->C + c];
    }
    kk_ws_release(ws, mark);
    return 0;
}
