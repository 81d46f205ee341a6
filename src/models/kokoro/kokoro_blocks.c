/* Kokoro's building blocks: the per-call workspace, BiLSTM, AdaIN / AdaLayerNorm,
 * the AdainResBlk1d of the predictor and decoder, and the Snake residual block
 * (AdaINResBlock1) of the generator. Numerics follow ../shared/specs/kokoro.md §4. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/arena.h"
#include "choir/kernels.h"
#include "models/kokoro/kokoro_internal.h"

/* --- workspace -----------------------------------------------------------
 * One forward pass asks for a few dozen buffers whose sizes depend on the
 * number of frames. They come from one arena reserved up front from the
 * estimate (choir_kokoro_estimate_bytes), so the pass does not call malloc;
 * marks scope each block's temporaries. */
struct kk_ws {
    choir_arena *arena;
};

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
    return ws;
}

void kk_ws_free(kk_ws *ws) {
    if (!ws) return;
    choir_arena_free(ws->arena);
    choir_free(ws);
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

int kk_bilstm(const kk_lstm *l, const float *x, int64_t T, float *y, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    int64_t H = l->h;
    float *scratch = kk_ws_floats(ws, 4 * H * (T + 1) + 2 * H);
    if (!scratch) return CHOIR_ENOMEM;
    float *h = scratch + 4 * H * (T + 1), *c = h + H;
    for (int d = 0; d < 2; d++) {
        memset(h, 0, 2 * (size_t)H * sizeof(float));
        choir_lstm(x, T, l->in, H, l->w_ih[d], l->w_hh[d], l->b_ih[d], l->b_hh[d], h, c, d == 1,
                   y + d * H, 2 * H, scratch);
    }
    kk_ws_release(ws, mark);
    return 0;
}

/* gamma, beta = fc(style) split in halves: h[0:C], h[C:2C] */
static float *style_affine(const kk_adain *a, const float *style, kk_ws *ws) {
    float *h = kk_ws_floats(ws, 2LL * a->C);
    if (h) choir_linear(style, 1, &a->fc.w, a->fc.b, h);
    return h;
}

int kk_adain1d(const kk_adain *a, float *x, int64_t T, const float *style, kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    const float *h = style_affine(a, style, ws);
    if (!h) return CHOIR_ENOMEM;
    choir_instance_norm(x, x, a->C, T, a->norm_w, a->norm_b, 1e-5f);
    for (int64_t c = 0; c < a->C; c++) {
        float g = 1.0f + h[c], b = h[a->C + c];
        float *row = x + c * T;
        for (int64_t t = 0; t < T; t++) row[t] = g * row[t] + b;
    }
    kk_ws_release(ws, mark);
    return 0;
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

/* AdainResBlk1d (spec §4.5):
 *   res = conv2(lrelu(AdaIN2(conv1(pool?(lrelu(AdaIN1(x)))))))
 *   sc  = conv1x1?(upsample_nearest?(x))
 *   y   = (res + sc) / sqrt(2) */
int kk_resblk_forward(const kk_resblk *b, const float *x, int64_t T, const float *style, float *y,
                      kk_ws *ws) {
    size_t mark = kk_ws_mark(ws);
    int64_t T2 = b->upsample ? 2 * T : T;
    float *r = kk_ws_floats(ws, (int64_t)b->cin * T2);   /* [cin, T2] */
    float *h = kk_ws_floats(ws, (int64_t)b->cout * T2);  /* [cout, T2] */
    float *sc = kk_ws_floats(ws, (int64_t)b->cin * T2);  /* [cin, T2] */
    if (!r || !h || !sc) return CHOIR_ENOMEM;

    memcpy(r, x, (size_t)b->cin * (size_t)T * sizeof(float));
    if (kk_adain1d(&b->norm1, r, T, style, ws)) return CHOIR_ENOMEM;
    choir_leaky_relu(r, (int64_t)b->cin * T, 0.2f);
    if (b->upsample) {
        /* the depthwise transposed conv doubles the length; sc is free scratch here */
        choir_conv_transpose1d(r, b->cin, T, b->pool.w, b->pool.b, b->cin, 3, 2, 1, 1, 1, b->cin,
                               sc);
        memcpy(r, sc, (size_t)b->cin * (size_t)T2 * sizeof(float));
    }
    kk_conv1d(&b->conv1, r, T2, 1, 1, 1, h);
    if (kk_adain1d(&b->norm2, h, T2, style, ws)) return CHOIR_ENOMEM;
    choir_leaky_relu(h, (int64_t)b->cout * T2, 0.2f);
    kk_conv1d(&b->conv2, h, T2, 1, 1, 1, y);

    const float *s = x;
    if (b->upsample) {
        for (int64_t c = 0; c < b->cin; c++)
            for (int64_t t = 0; t < T; t++) sc[c * T2 + 2 * t] = sc[c * T2 + 2 * t + 1] = x[c * T + t];
        s = sc;
    }
    if (b->conv1x1.w) {
        kk_conv1d(&b->conv1x1, s, T2, 1, 0, 1, h);
        s = h;
    }
    /* torch.rsqrt(torch.tensor(2)) in float32 */
    const float inv_sqrt2 = 0.70710677f;
    int64_t n = (int64_t)b->cout * T2;
    for (int64_t i = 0; i < n; i++) y[i] = (y[i] + s[i]) * inv_sqrt2;
    kk_ws_release(ws, mark);
    return 0;
}

/* AdaINResBlock1 (spec §4.6): three dilated (1, 3, 5) Snake residual units. */
int kk_snakeblock_forward(const kk_snakeblock *b, const float *x, int64_t T, const float *style,
                          float *y, kk_ws *ws) {
    static const int dil[3] = {1, 3, 5};
    size_t mark = kk_ws_mark(ws);
    int64_t n = (int64_t)b->C * T;
    float *t1 = kk_ws_floats(ws, n), *t2 = kk_ws_floats(ws, n);
    if (!t1 || !t2) return CHOIR_ENOMEM;
    if (y != x) memcpy(y, x, (size_t)n * sizeof(float));
    for (int j = 0; j < 3; j++) {
        memcpy(t1, y, (size_t)n * sizeof(float));
        if (kk_adain1d(&b->adain1[j], t1, T, style, ws)) return CHOIR_ENOMEM;
        choir_snake(t1, b->C, T, b->alpha1[j]);
        kk_conv1d(&b->convs1[j], t1, T, 1, (b->k * dil[j] - dil[j]) / 2, dil[j], t2);
        if (kk_adain1d(&b->adain2[j], t2, T, style, ws)) return CHOIR_ENOMEM;
        choir_snake(t2, b->C, T, b->alpha2[j]);
        kk_conv1d(&b->convs2[j], t2, T, 1, (b->k - 1) / 2, 1, t1);
        for (int64_t i = 0; i < n; i++) y[i] += t1[i];
    }
    kk_ws_release(ws, mark);
    return 0;
}
