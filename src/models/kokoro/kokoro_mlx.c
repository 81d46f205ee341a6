/* Name and layout rules of the mlx-audio Kokoro layout (kokoro_mlx.h).
 *
 * The rules are those of mlx-audio's Kokoro `sanitize` (spec §9.1, §9.2),
 * written as two inverse string maps and a table of kernel sizes; the loader
 * and the converter decide from the shapes whether a convolution weight is
 * stored [d0, k, in] or [d0, in, k], so a file that kept some weights in the
 * torch layout (mlx-audio's own shape heuristic skips the transpose for
 * weights that already look like MLX ones) still reads correctly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/kokoro_mlx.h"

/* LSTM parameter names, native -> mlx-audio. The `_reverse` entries come
 * first so that a suffix match cannot stop at the shorter forward name. */
static const char *const lstm_names[][2] = {
    {"weight_ih_l0_reverse", "Wx_backward"},    {"weight_hh_l0_reverse", "Wh_backward"},
    {"bias_ih_l0_reverse", "bias_ih_backward"}, {"bias_hh_l0_reverse", "bias_hh_backward"},
    {"weight_ih_l0", "Wx_forward"},             {"weight_hh_l0", "Wh_forward"},
    {"bias_ih_l0", "bias_ih_forward"},          {"bias_hh_l0", "bias_hh_forward"},
};
#define N_LSTM_NAMES (sizeof lstm_names / sizeof lstm_names[0])

/* The last dotted component of `name` (all of it when there is no dot). */
static const char *last_component(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Skips a run of decimal digits; NULL when there is none. */
static const char *skip_index(const char *p) {
    const char *q = p;
    while (*q >= '0' && *q <= '9') q++;
    return q == p ? NULL : q;
}

/* True for "text_encoder.cnn.<i>.1.<last>": a channel LayerNorm parameter. */
static bool is_text_encoder_norm(const char *name, const char *last) {
    if (!starts_with(name, "text_encoder.cnn.")) return false;
    const char *p = skip_index(name + strlen("text_encoder.cnn."));
    return p && strncmp(p, ".1.", 3) == 0 && strcmp(p + 3, last) == 0;
}

bool choir_kokoro_mlx_marks_layout(const char *name) {
    const char *last = last_component(name);
    for (size_t i = 0; i < N_LSTM_NAMES; i++)
        if (strcmp(last, lstm_names[i][1]) == 0) return true;
    return false;
}

/* out = name with its last component replaced by `last`. */
static const char *replace_last(const char *name, const char *last, char *out, size_t cap) {
    size_t stem = (size_t)(last_component(name) - name);
    int n = snprintf(out, cap, "%.*s%s", (int)stem, name, last);
    return n >= 0 && (size_t)n < cap ? out : NULL;
}

const char *choir_kokoro_mlx_name_of(const char *native, char *out, size_t cap) {
    const char *last = last_component(native);
    for (size_t i = 0; i < N_LSTM_NAMES; i++)
        if (strcmp(last, lstm_names[i][0]) == 0) return replace_last(native, lstm_names[i][1], out, cap);
    if (is_text_encoder_norm(native, "gamma")) return replace_last(native, "weight", out, cap);
    if (is_text_encoder_norm(native, "beta")) return replace_last(native, "bias", out, cap);
    int n = snprintf(out, cap, "%s", native);
    return n >= 0 && (size_t)n < cap ? out : NULL;
}

const char *choir_kokoro_native_name_of(const char *mlx, char *out, size_t cap) {
    const char *last = last_component(mlx);
    for (size_t i = 0; i < N_LSTM_NAMES; i++)
        if (strcmp(last, lstm_names[i][1]) == 0) return replace_last(mlx, lstm_names[i][0], out, cap);
    if (is_text_encoder_norm(mlx, "weight")) return replace_last(mlx, "gamma", out, cap);
    if (is_text_encoder_norm(mlx, "bias")) return replace_last(mlx, "beta", out, cap);
    int n = snprintf(out, cap, "%s", mlx);
    return n >= 0 && (size_t)n < cap ? out : NULL;
}

/* Kernel of a generator AdaINResBlock1 conv: "<i>.convs1.<j>" or
 * "<i>.convs2.<j>" after the block list's prefix; 0 when it is not one. */
static int snake_kernel(const char *p, const int *by_block, int n_blocks) {
    const char *q = skip_index(p);
    if (!q) return 0;
    int block = atoi(p);
    if (block >= n_blocks || (strncmp(q, ".convs1.", 8) != 0 && strncmp(q, ".convs2.", 8) != 0))
        return 0;
    q = skip_index(q + 8);
    return q && *q == '\0' ? by_block[block] : 0;
}

int choir_kokoro_conv_kernel(const char *native) {
    char layer[512];
    bool wn = ends_with(native, ".weight_v");
    if (!wn && !ends_with(native, ".weight")) return 0;
    size_t len = strlen(native) - (wn ? strlen(".weight_v") : strlen(".weight"));
    if (len >= sizeof layer) return 0;
    memcpy(layer, native, len);
    layer[len] = '\0';

    /* plain (not weight-normalised) convolutions */
    if (!wn) {
        if (strcmp(layer, "decoder.generator.noise_convs.0") == 0) return 12;
        if (strcmp(layer, "decoder.generator.noise_convs.1") == 0) return 1;
        if (strcmp(layer, "predictor.F0_proj") == 0 || strcmp(layer, "predictor.N_proj") == 0) return 1;
        return 0;
    }
    /* AdainResBlk1d (predictor.F0/N.<i>, decoder.encode, decoder.decode.<i>) */
    if (ends_with(layer, ".conv1") || ends_with(layer, ".conv2") || ends_with(layer, ".pool")) return 3;
    if (ends_with(layer, ".conv1x1")) return 1;
    if (starts_with(layer, "text_encoder.cnn.")) {
        const char *p = skip_index(layer + strlen("text_encoder.cnn."));
        return p && strcmp(p, ".0") == 0 ? 5 : 0;
    }
    if (strcmp(layer, "decoder.F0_conv") == 0 || strcmp(layer, "decoder.N_conv") == 0) return 3;
    if (strcmp(layer, "decoder.asr_res.0") == 0) return 1;
    static const char G[] = "decoder.generator.";
    if (!starts_with(layer, G)) return 0;
    const char *g = layer + strlen(G);
    if (strcmp(g, "ups.0") == 0) return 20;
    if (strcmp(g, "ups.1") == 0) return 12;
    if (strcmp(g, "conv_post") == 0) return 7;
    static const int res_k[6] = {3, 7, 11, 3, 7, 11}, noise_k[2] = {7, 11};
    if (starts_with(g, "resblocks.")) return snake_kernel(g + strlen("resblocks."), res_k, 6);
    if (starts_with(g, "noise_res.")) return snake_kernel(g + strlen("noise_res."), noise_k, 2);
    return 0;
}

/* One typed loop per element size, so that the copy is a plain load/store. */
#define SWAP_LAST_AXES(T)                                                               \
    do {                                                                                \
        const T *s = src;                                                               \
        T *d = dst;                                                                     \
        for (int64_t i = 0; i < d0; i++, s += a * b, d += a * b)                        \
            for (int64_t x = 0; x < a; x++)                                             \
                for (int64_t y = 0; y < b; y++) d[y * a + x] = s[x * b + y];            \
    } while (0)

void choir_kokoro_swap_last_axes(const void *src, int64_t d0, int64_t a, int64_t b, size_t esize, void *dst) {
    switch (esize) {
    case 1: SWAP_LAST_AXES(uint8_t); break;
    case 2: SWAP_LAST_AXES(uint16_t); break;
    case 4: SWAP_LAST_AXES(uint32_t); break;
    case 8: SWAP_LAST_AXES(uint64_t); break;
    default: break;
    }
}
