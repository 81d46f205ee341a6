/* Alignment heads, the alignment matrix and dynamic time warping for word
 * timestamps (choir/whisper_words.h), following openai/whisper's timing.py
 * step by step so that the same cross-attention gives the same path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/whisper_words.h"

/* openai's per-size tables (whisper/__init__.py _ALIGNMENT_HEADS, there as
 * base85-packed boolean masks), unpacked into (layer, head) pairs. */
typedef struct head_table {
    int n_text_layer, d_model, n_head, n_vocab, n_mels; /* 0: any */
    int large_v1;
    int n;
    const signed char *pairs; /* n pairs */
} head_table;

static const signed char TINY_EN[] = {1, 0, 2, 0, 2, 5, 3, 0, 3, 1, 3, 2, 3, 3, 3, 4};
static const signed char TINY[] = {2, 2, 3, 0, 3, 2, 3, 3, 3, 4, 3, 5};
static const signed char BASE_EN[] = {3, 3, 4, 7, 5, 1, 5, 5, 5, 7};
static const signed char BASE[] = {3, 1, 4, 2, 4, 3, 4, 7, 5, 1, 5, 2, 5, 4, 5, 6};
static const signed char SMALL_EN[] = {6, 6, 7, 0, 7, 3, 7, 8, 8, 2, 8,  5, 8,  7, 9,  0,  9, 4, 9, 8,
                                       9, 10, 10, 0, 10, 1, 10, 2, 10, 3, 10, 6, 10, 11, 11, 2, 11, 4};
static const signed char SMALL[] = {5, 3, 5, 9, 8, 0, 8, 4, 8, 7, 8, 8, 9, 0, 9, 7, 9, 9, 10, 5};
static const signed char MEDIUM_EN[] = {11, 4,  14, 1,  14, 12, 14, 14, 15, 4,  16, 0,  16, 4,  16, 9, 17, 12,
                                        17, 14, 18, 7,  18, 10, 18, 15, 20, 0,  20, 3,  20, 9,  20, 14, 21, 12};
static const signed char MEDIUM[] = {13, 15, 15, 4, 15, 15, 16, 1, 20, 0, 23, 4};
static const signed char LARGE_V1[] = {9, 19, 11, 2, 11, 4, 11, 17, 22, 7, 22, 11, 22, 17, 23, 2, 23, 15};
static const signed char LARGE_V2[] = {10, 12, 13, 17, 16, 11, 16, 12, 16, 13, 17, 15, 17, 16, 18, 4,  18, 11, 18, 19,
                                       19, 11, 21, 2,  21, 3,  22, 3,  22, 9,  22, 12, 23, 5,  23, 7, 23, 13, 25, 5,
                                       26, 1,  26, 12, 27, 15};
static const signed char LARGE_V3[] = {7, 0, 10, 17, 12, 18, 13, 12, 16, 1, 17, 14, 19, 11, 21, 4, 24, 1, 25, 6};
static const signed char TURBO[] = {2, 4, 2, 11, 3, 3, 3, 6, 3, 11, 3, 14};

#define T(L, D, H, V, M, V1, arr) {L, D, H, V, M, V1, (int)(sizeof arr / 2), arr}
static const head_table TABLES[] = {
    T(4, 384, 6, 51864, 80, 0, TINY_EN),       T(4, 384, 6, 51865, 80, 0, TINY),
    T(6, 512, 8, 51864, 80, 0, BASE_EN),       T(6, 512, 8, 51865, 80, 0, BASE),
    T(12, 768, 12, 51864, 80, 0, SMALL_EN),    T(12, 768, 12, 51865, 80, 0, SMALL),
    T(24, 1024, 16, 51864, 80, 0, MEDIUM_EN),  T(24, 1024, 16, 51865, 80, 0, MEDIUM),
    T(32, 1280, 20, 51865, 80, 1, LARGE_V1),   T(32, 1280, 20, 51865, 80, 0, LARGE_V2),
    T(32, 1280, 20, 51866, 128, 0, LARGE_V3),  T(4, 1280, 20, 51866, 128, 0, TURBO),
};
#undef T

int choir_whisper_alignment_heads(const choir_whisper_dims *d, bool large_v1, choir_whisper_head *out) {
    if (!d || d->n_text_layer < 1 || d->n_head < 1) return 0;
    for (size_t t = 0; t < sizeof TABLES / sizeof TABLES[0]; t++) {
        const head_table *h = &TABLES[t];
        if (h->n_text_layer != d->n_text_layer || h->d_model != d->d_model || h->n_head != d->n_head ||
            h->n_vocab != d->n_vocab || h->n_mels != d->n_mels)
            continue;
        if (h->n_vocab == 51865 && h->n_text_layer == 32 && h->large_v1 != (int)large_v1) continue;
        for (int i = 0; i < h->n; i++) out[i] = (choir_whisper_head){h->pairs[2 * i], h->pairs[2 * i + 1]};
        return h->n;
    }
    /* openai's Whisper.__init__: without a table, the last half of the
     * decoder layers, every head. */
    int n = 0;
    for (int l = d->n_text_layer / 2; l < d->n_text_layer; l++)
        for (int h = 0; h < d->n_head && n < CHOIR_WHISPER_MAX_HEADS; h++) out[n++] = (choir_whisper_head){l, h};
    return n;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* torch's F.pad(mode="reflect"): the edge value is not repeated. */
static int reflect(int i, int n) {
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
}

int choir_whisper_alignment_matrix(const float *qk, int n_heads, int n_tok, int qk_stride, int n_frames,
                                   float qk_scale, int medfilt_width, float *out, choir_err *err) {
    if (!qk || !out || n_heads < 1 || n_tok < 1 || n_frames < 1 || qk_stride < n_frames)
        return choir_err_set(err, CHOIR_EINVAL, "alignment matrix: bad sizes (%d heads, %d positions, %d frames)",
                             n_heads, n_tok, n_frames);
    if (medfilt_width < 1 || medfilt_width % 2 == 0)
        return choir_err_set(err, CHOIR_EINVAL, "alignment matrix: the median filter width must be odd");
    size_t plane = (size_t)n_tok * (size_t)n_frames;
    float *w = choir_alloc(CHOIR_MEM_ACTIVATIONS, plane * sizeof(float));
    float *row = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)n_frames * sizeof(float));
    float *win = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)medfilt_width * sizeof(float));
    if (!w || !row || !win) {
        choir_free(w);
        choir_free(row);
        choir_free(win);
        return choir_err_set(err, CHOIR_ENOMEM, "alignment matrix: out of memory");
    }
    memset(out, 0, plane * sizeof(float));
    int pad = medfilt_width / 2;
    for (int h = 0; h < n_heads; h++) {
        /* softmax over the window's frames */
        for (int t = 0; t < n_tok; t++) {
            const float *src = qk + ((size_t)h * n_tok + t) * (size_t)qk_stride;
            float *dst = w + (size_t)t * n_frames, mx = -INFINITY, sum = 0;
            for (int f = 0; f < n_frames; f++) {
                dst[f] = src[f] * qk_scale;
                if (dst[f] > mx) mx = dst[f];
            }
            for (int f = 0; f < n_frames; f++) sum += dst[f] = expf(dst[f] - mx);
            for (int f = 0; f < n_frames; f++) dst[f] /= sum;
        }
        /* standardise each frame over the positions (torch.std_mean,
         * unbiased=False), accumulating in double as a careful float
         * reduction would */
        for (int f = 0; f < n_frames; f++) {
            double mean = 0, var = 0;
            for (int t = 0; t < n_tok; t++) mean += w[(size_t)t * n_frames + f];
            mean /= n_tok;
            for (int t = 0; t < n_tok; t++) {
                double dv = w[(size_t)t * n_frames + f] - mean;
                var += dv * dv;
            }
            float sd = (float)sqrt(var / n_tok), mf = (float)mean;
            for (int t = 0; t < n_tok; t++) {
                float *v = &w[(size_t)t * n_frames + f];
                *v = (*v - mf) / sd;
            }
        }
        /* median filter along the frames, then the mean over heads */
        for (int t = 0; t < n_tok; t++) {
            float *r = w + (size_t)t * n_frames, *o = out + (size_t)t * n_frames;
            if (n_frames <= pad) {
                for (int f = 0; f < n_frames; f++) o[f] += r[f];
                continue;
            }
            for (int f = 0; f < n_frames; f++) {
                for (int k = 0; k < medfilt_width; k++) win[k] = r[reflect(f + k - pad, n_frames)];
                qsort(win, (size_t)medfilt_width, sizeof(float), cmp_float);
                row[f] = win[pad];
            }
            for (int f = 0; f < n_frames; f++) o[f] += row[f];
        }
    }
    for (size_t i = 0; i < plane; i++) out[i] /= (float)n_heads;
    choir_free(w);
    choir_free(row);
    choir_free(win);
    return 0;
}

int choir_whisper_dtw(const float *x, int n, int m, int32_t *rows, int32_t *cols, choir_err *err) {
    if (!x || !rows || !cols || n < 1 || m < 1)
        return choir_err_set(err, CHOIR_EINVAL, "dtw: bad sizes %d x %d", n, m);
    size_t w = (size_t)m + 1, cells = ((size_t)n + 1) * w;
    float *cost = choir_alloc(CHOIR_MEM_ACTIVATIONS, cells * sizeof(float));
    signed char *trace = choir_alloc(CHOIR_MEM_ACTIVATIONS, cells);
    if (!cost || !trace) {
        choir_free(cost);
        choir_free(trace);
        return choir_err_set(err, CHOIR_ENOMEM, "dtw: out of memory for %d x %d", n, m);
    }
    for (size_t i = 0; i < cells; i++) {
        cost[i] = INFINITY;
        trace[i] = -1;
    }
    cost[0] = 0;
    /* Column by column as openai's loop runs; the comparisons are strict, so
     * NaNs and ties fall through to the horizontal move. */
    for (int j = 1; j <= m; j++) {
        for (int i = 1; i <= n; i++) {
            float c0 = cost[(size_t)(i - 1) * w + j - 1], c1 = cost[(size_t)(i - 1) * w + j],
                  c2 = cost[(size_t)i * w + j - 1], c;
            signed char t;
            if (c0 < c1 && c0 < c2) {
                c = c0;
                t = 0;
            } else if (c1 < c0 && c1 < c2) {
                c = c1;
                t = 1;
            } else {
                c = c2;
                t = 2;
            }
            cost[(size_t)i * w + j] = x[(size_t)(i - 1) * m + j - 1] + c;
            trace[(size_t)i * w + j] = t;
        }
    }
    for (int j = 0; j <= m; j++) trace[j] = 2;
    for (int i = 0; i <= n; i++) trace[(size_t)i * w] = 1;
    /* backtrace from the far corner, then reverse */
    int i = n, j = m, len = 0;
    while (i > 0 || j > 0) {
        rows[len] = i - 1;
        cols[len] = j - 1;
        len++;
        signed char t = trace[(size_t)i * w + j];
        if (t == 0) {
            i--;
            j--;
        } else if (t == 1) {
            i--;
        } else {
            j--;
        }
    }
    for (int a = 0, b = len - 1; a < b; a++, b--) {
        int32_t r = rows[a], c = cols[a];
        rows[a] = rows[b];
        cols[a] = cols[b];
        rows[b] = r;
        cols[b] = c;
    }
    choir_free(cost);
    choir_free(trace);
    return len;
}
