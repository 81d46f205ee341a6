/* Loading SAM-Audio: config.json, the codec (weight-norm folded), the DiT
 * (strided heads folded) and the projections around it, from Meta's
 * checkpoint.pt, safetensors in the same names, mlx-community's renamed and
 * transposed layout, or choir's native layout.
 *
 * Every tensor is asked for by its name in Meta's checkpoint; for an mlx
 * file the name is translated as mlx-audio's converter renames it and a
 * convolution stored [out, k, in] is transposed back. An mlx file (what
 * tools/sam_mlx_layout.py writes from a checkpoint, as mlx-audio's
 * converter does) holds one summed bias per LSTM layer, the watermark path,
 * no align_masked_video.* (so no zero-video term), and when quantized every
 * Linear and Embedding whose width divides by 64 (the two embedding tables
 * read on the host are dequantized at load). Each convolution must have its
 * layout's exact shape. Tensors the model never reads (vision_encoder.*,
 * span_predictor.*, *_ranker.*) are not touched, so their pages are never
 * read. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "sam_internal.h"

int sam_fail(sam_loader *ld, int code, const char *fmt, ...) {
    if (ld->status) return ld->status;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ld->status = choir_err_set(ld->err, code, "sam-audio: %s", msg);
    return ld->status;
}

void *sam_own(sam_loader *ld, size_t bytes) {
    choir_sam *m = ld->m;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 256;
        void **grown = choir_realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown) {
            sam_fail(ld, CHOIR_ENOMEM, "out of memory");
            return NULL;
        }
        m->owned = grown;
        m->cap_owned = cap;
    }
    void *p = choir_alloc(CHOIR_MEM_WEIGHTS, bytes ? bytes : 1);
    if (!p) {
        sam_fail(ld, CHOIR_ENOMEM, "out of memory (%zu bytes)", bytes);
        return NULL;
    }
    m->owned[m->n_owned++] = p;
    m->bytes += bytes;
    return p;
}

/* --- names -------------------------------------------------------------- */

static int replace_prefix(char *s, size_t cap, const char *from, const char *to) {
    size_t fl = strlen(from);
    if (strncmp(s, from, fl) != 0) return 0;
    char rest[300];
    snprintf(rest, sizeof rest, "%s", s + fl);
    snprintf(s, cap, "%s%s", to, rest);
    return 1;
}

static void replace_all(char *s, size_t cap, const char *from, const char *to) {
    char *p = strstr(s, from);
    if (!p) return;
    char head[300], rest[300];
    snprintf(head, sizeof head, "%.*s", (int)(p - s), s);
    snprintf(rest, sizeof rest, "%s", p + strlen(from));
    snprintf(s, cap, "%s%s%s", head, to, rest);
}

/* mlx-audio's renaming of a checkpoint name (its _convert_weight_name). */
static void mlx_name(const char *in, char *out, size_t cap) {
    snprintf(out, cap, "%s", in);
    char from[128], to[128];
    replace_prefix(out, cap, "audio_codec.encoder.block.0.", "audio_codec.encoder.conv_in.");
    static const char *ru_parts[4] = {"act1.", "conv1.", "act2.", "conv2."};
    for (int e = 1; e <= 4; e++) {
        for (int r = 0; r < 3; r++) {
            snprintf(from, sizeof from, "audio_codec.encoder.block.%d.block.%d.", e, r);
            snprintf(to, sizeof to, "audio_codec.encoder.blocks.%d.res%d.", e - 1, r + 1);
            if (replace_prefix(out, cap, from, to)) {
                for (int k = 0; k < 4; k++) {
                    char f2[160], t2[160];
                    snprintf(f2, sizeof f2, "%sblock.%d.", to, k);
                    snprintf(t2, sizeof t2, "%s%s", to, ru_parts[k]);
                    replace_prefix(out, cap, f2, t2);
                }
            }
        }
        snprintf(from, sizeof from, "audio_codec.encoder.block.%d.block.3.", e);
        snprintf(to, sizeof to, "audio_codec.encoder.blocks.%d.snake.", e - 1);
        replace_prefix(out, cap, from, to);
        snprintf(from, sizeof from, "audio_codec.encoder.block.%d.block.4.", e);
        snprintf(to, sizeof to, "audio_codec.encoder.blocks.%d.conv.", e - 1);
        replace_prefix(out, cap, from, to);
    }
    replace_prefix(out, cap, "audio_codec.encoder.block.5.", "audio_codec.encoder.snake_out.");
    replace_prefix(out, cap, "audio_codec.encoder.block.6.", "audio_codec.encoder.conv_out.");
    replace_prefix(out, cap, "audio_codec.decoder.model.0.", "audio_codec.decoder.conv_in.");
    static const int blocks[] = {0, 1, 3, 4, 5, 6, 7, 8, 11};
    for (int d = 1; d <= 4; d++)
        for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
            snprintf(from, sizeof from, "audio_codec.decoder.model.%d.block.%d.", d, blocks[b]);
            snprintf(to, sizeof to, "audio_codec.decoder.blocks.%d.block_%d.", d - 1, blocks[b]);
            if (replace_prefix(out, cap, from, to) && blocks[b] >= 4 && blocks[b] <= 8)
                for (int k = 0; k < 4; k++) {
                    char f2[160], t2[160];
                    snprintf(f2, sizeof f2, "%sblock.%d.", to, k);
                    snprintf(t2, sizeof t2, "%s%s", to, ru_parts[k]);
                    replace_prefix(out, cap, f2, t2);
                }
        }
    replace_prefix(out, cap, "audio_codec.decoder.wm_model.encoder_block.pre.0.", "audio_codec.decoder.snake_out.");
    replace_prefix(out, cap, "audio_codec.decoder.wm_model.encoder_block.pre.1.", "audio_codec.decoder.conv_out.");
    for (int i = 0; i < 4; i++) {
        const char *blk[2] = {"encoder_block", "decoder_block"}, *side[2] = {"pre", "post"};
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 2; c++) {
                snprintf(from, sizeof from, ".%s.%s.%d.", blk[a], side[c], i);
                snprintf(to, sizeof to, ".%s.%s_%d.", blk[a], side[c], i);
                replace_all(out, cap, from, to);
            }
    }
    for (int l = 0; l < 4; l++) {
        snprintf(from, sizeof from, ".lstm.weight_ih_l%d", l);
        snprintf(to, sizeof to, ".lstm.layers.%d.Wx", l);
        replace_all(out, cap, from, to);
        snprintf(from, sizeof from, ".lstm.weight_hh_l%d", l);
        snprintf(to, sizeof to, ".lstm.layers.%d.Wh", l);
        replace_all(out, cap, from, to);
        snprintf(from, sizeof from, ".lstm.bias_ih_l%d", l);
        snprintf(to, sizeof to, ".lstm.layers.%d.bias", l);
        replace_all(out, cap, from, to);
    }
    replace_prefix(out, cap, "audio_codec.quantizer.in_proj.", "audio_codec.quantizer_in_proj.");
    replace_prefix(out, cap, "audio_codec.quantizer.out_proj.", "audio_codec.quantizer_out_proj.");
}

static const choir_st_tensor *raw_find(const sam_loader *ld, const char *name) {
    if (ld->st) return choir_st_find(ld->st, name);
    return ld->m->ck ? choir_ckpt_find(ld->m->ck, name) : NULL;
}

static const choir_st_tensor *find_opt(const sam_loader *ld, const char *name) {
    const choir_st_tensor *t = raw_find(ld, name);
    if (!t && ld->m->mlx && ld->st == ld->m->st) {
        char alt[320];
        mlx_name(name, alt, sizeof alt);
        t = raw_find(ld, alt);
    }
    return t;
}

/* Whether names and layouts are mlx-community's (the model file, not T5's). */
static int mlx_file(const sam_loader *ld) { return ld->m->mlx && ld->st == ld->m->st; }

static const choir_st_tensor *find_req(sam_loader *ld, const char *name, int64_t numel) {
    if (ld->status) return NULL;
    const choir_st_tensor *t = find_opt(ld, name);
    if (!t) {
        if (mlx_file(ld)) {
            char alt[320];
            mlx_name(name, alt, sizeof alt);
            sam_fail(ld, CHOIR_ENOTFOUND, "tensor %s (checkpoint name %s) is missing", alt, name);
        } else {
            sam_fail(ld, CHOIR_ENOTFOUND, "tensor %s is missing", name);
        }
        return NULL;
    }
    if (numel >= 0 && t->numel != numel) {
        sam_fail(ld, CHOIR_ESHAPE, "tensor %s has %lld elements, expected %lld", t->name, (long long)t->numel,
                 (long long)numel);
        return NULL;
    }
    return t;
}

/* A tensor as f32: into the mapping when stored so, else converted once. */
static const float *as_floats(sam_loader *ld, const choir_st_tensor *t) {
    if (!t) return NULL;
    if (t->dtype == CHOIR_DTYPE_F32) {
        ld->m->bytes += t->nbytes;
        return t->data;
    }
    float *f = sam_own(ld, (size_t)t->numel * sizeof *f);
    if (!f) return NULL;
    if (choir_to_f32_n(t->dtype, t->data, f, t->numel) != 0) {
        sam_fail(ld, CHOIR_EUNSUPPORTED, "tensor %s: dtype %s is not a float type", t->name,
                 choir_dtype_name(t->dtype));
        return NULL;
    }
    return f;
}

const float *sam_floats(sam_loader *ld, const char *name, int64_t numel) {
    return as_floats(ld, find_req(ld, name, numel));
}

void sam_matrix(sam_loader *ld, const char *prefix, int64_t rows, int64_t cols, choir_weight *W) {
    if (ld->status) return;
    char name[320];
    snprintf(name, sizeof name, "%s.scales", prefix);
    if (ld->st && choir_st_find(ld->st, name)) {
        if (choir_weight_from_st(ld->st, prefix, ld->m->qc, W, ld->err) != 0) {
            ld->status = ld->err && ld->err->code ? ld->err->code : CHOIR_EFORMAT;
            return;
        }
        if (choir_weight_expect(W, rows, cols, prefix, ld->err) != 0) ld->status = CHOIR_ESHAPE;
        ld->m->bytes += choir_weight_bytes(W);
        return;
    }
    snprintf(name, sizeof name, "%s.weight", prefix);
    const choir_st_tensor *t = find_req(ld, name, rows * cols);
    if (!t) return;
    memset(W, 0, sizeof *W);
    W->rows = rows;
    W->cols = cols;
    W->data = t->data;
    if (t->ndim == 2 && t->shape[0] != rows) {
        /* A transposed store ([in, out]) is turned back once. */
        float *f = sam_own(ld, (size_t)(rows * cols) * sizeof *f);
        float *tmp = f ? choir_alloc(CHOIR_MEM_OTHER, (size_t)(rows * cols) * sizeof *tmp) : NULL;
        if (!tmp || choir_to_f32_n(t->dtype, t->data, tmp, rows * cols) != 0) {
            choir_free(tmp);
            sam_fail(ld, CHOIR_ESHAPE, "tensor %s: unexpected layout", name);
            return;
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) f[r * cols + c] = tmp[c * rows + r];
        choir_free(tmp);
        *W = choir_weight_f32(f, rows, cols);
        return;
    }
    switch (t->dtype) {
    case CHOIR_DTYPE_F32: W->kind = CHOIR_WEIGHT_F32; break;
    case CHOIR_DTYPE_F16: W->kind = CHOIR_WEIGHT_F16; break;
    case CHOIR_DTYPE_BF16: W->kind = CHOIR_WEIGHT_BF16; break;
    default:
        sam_fail(ld, CHOIR_EUNSUPPORTED, "tensor %s: dtype %s is not supported for a matrix", name,
                 choir_dtype_name(t->dtype));
        return;
    }
    ld->m->bytes += t->nbytes;
}

/* A conv weight [a, b, k] (PyTorch: Conv1d [out, in, k], ConvTranspose1d
 * [in, out, k]) as owned f32, from "<prefix>.weight" or a weight-norm pair
 * "<prefix>.weight_g" [a, 1, 1] / "<prefix>.weight_v" folded as
 * w = g * v / ||v|| (norm over all but dim 0). mlx stores [out, k, in]. */
static float *conv_weight(sam_loader *ld, const char *prefix, int64_t a, int64_t b, int64_t k, int transposed) {
    if (ld->status) return NULL;
    char gn[320], vn[320], wn[320];
    snprintf(gn, sizeof gn, "%s.weight_g", prefix);
    snprintf(vn, sizeof vn, "%s.weight_v", prefix);
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    const choir_st_tensor *g = find_opt(ld, gn), *v = g ? find_req(ld, vn, a * b * k) : find_req(ld, wn, a * b * k);
    if (!v) return NULL;
    if (g && g->numel != a) {
        sam_fail(ld, CHOIR_ESHAPE, "tensor %s has %lld elements, expected %lld", g->name, (long long)g->numel,
                 (long long)a);
        return NULL;
    }
    /* The shape is the layout's own: PyTorch [a, b, k]; mlx [a, k, b], or
     * [b, k, a] for a transposed conv (equal bytes when k is 1, so a
     * re-pack may give either there). One of the same size in any other
     * order would be read as garbage, so it is refused. */
    int mlx = mlx_file(ld);
    int64_t pt[3] = {a, b, k}, ml[3] = {transposed ? b : a, k, transposed ? a : b};
    const int64_t *want = mlx ? ml : pt;
    int ok = v->ndim == 3 && v->shape[0] == want[0] && v->shape[1] == want[1] && v->shape[2] == want[2];
    if (!ok && k == 1 && !transposed && v->ndim == 3) {
        const int64_t *other = mlx ? pt : ml;
        ok = v->shape[0] == other[0] && v->shape[1] == other[1] && v->shape[2] == other[2];
    }
    if (!ok) {
        char got[96], exp[96];
        choir_st_format_shape(got, sizeof got, v->ndim, v->shape);
        choir_st_format_shape(exp, sizeof exp, 3, want);
        sam_fail(ld, CHOIR_ESHAPE, "tensor %s is %s, expected %s (%s layout)", v->name, got, exp,
                 mlx ? "mlx-community" : "checkpoint");
        return NULL;
    }
    float *w = sam_own(ld, (size_t)(a * b * k) * sizeof *w);
    float *raw = w ? choir_alloc(CHOIR_MEM_OTHER, (size_t)(a * b * k) * sizeof *raw) : NULL;
    float *gv = raw && g ? choir_alloc(CHOIR_MEM_OTHER, (size_t)a * sizeof *gv) : NULL;
    if (!raw || (g && !gv)) {
        choir_free(raw);
        sam_fail(ld, CHOIR_ENOMEM, "out of memory for %s", prefix);
        return NULL;
    }
    if (choir_to_f32_n(v->dtype, v->data, raw, a * b * k) != 0 || (g && choir_to_f32_n(g->dtype, g->data, gv, a) != 0)) {
        choir_free(raw), choir_free(gv);
        sam_fail(ld, CHOIR_EUNSUPPORTED, "tensor %s: not a float type", prefix);
        return NULL;
    }
    /* Undo mlx's [out, k, in]. */
    int mlx_layout = mlx && (k > 1 || transposed);
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            for (int64_t q = 0; q < k; q++) {
                size_t src;
                if (!mlx_layout) src = (size_t)((i * b + j) * k + q);
                else if (transposed) src = (size_t)((j * k + q) * a + i); /* [out=b, k, in=a] */
                else src = (size_t)((i * k + q) * b + j);                 /* [out=a, k, in=b] */
                w[(i * b + j) * k + q] = raw[src];
            }
    if (g) {
        for (int64_t i = 0; i < a; i++) {
            double ss = 0;
            const float *row = w + i * b * k;
            for (int64_t j = 0; j < b * k; j++) ss += (double)row[j] * row[j];
            double s = gv[i] / sqrt(ss);
            for (int64_t j = 0; j < b * k; j++) w[i * b * k + j] = (float)(row[j] * s);
        }
    }
    choir_free(raw), choir_free(gv);
    return w;
}

/* An embedding table [rows, cols] read on the host, as f32: "<prefix>.weight",
 * or dequantized once when the file quantized it (mlx-audio's converter
 * quantizes every Embedding whose width divides by 64, as its Linears). */
static const float *ld_table(sam_loader *ld, const char *prefix, int64_t rows, int64_t cols) {
    char name[320];
    snprintf(name, sizeof name, "%s.scales", prefix);
    if (ld->status || !ld->st || !choir_st_find(ld->st, name)) {
        snprintf(name, sizeof name, "%s.weight", prefix);
        return sam_floats(ld, name, rows * cols);
    }
    choir_weight W;
    sam_matrix(ld, prefix, rows, cols, &W);
    if (ld->status) return NULL;
    float *f = sam_own(ld, (size_t)(rows * cols) * sizeof *f);
    if (!f) return NULL;
    choir_quant_dequant(&W, f);
    ld->m->bytes -= choir_weight_bytes(&W); /* only the f32 copy is kept */
    return f;
}

static const float *opt_bias(sam_loader *ld, const char *prefix, int64_t n) {
    char name[320];
    snprintf(name, sizeof name, "%s.bias", prefix);
    return sam_floats(ld, name, n);
}

static void ld_conv(sam_loader *ld, sam_conv *c, const char *prefix, int64_t cin, int64_t cout, int64_t k,
                    int stride, int dilation, int causal) {
    c->cin = cin, c->cout = cout, c->k = k, c->stride = stride, c->dilation = dilation, c->causal = causal;
    c->w = conv_weight(ld, prefix, cout, cin, k, 0);
    c->b = opt_bias(ld, prefix, cout);
}

static void ld_convt(sam_loader *ld, sam_convt *c, const char *prefix, int64_t cin, int64_t cout, int stride,
                     int causal) {
    c->cin = cin, c->cout = cout, c->k = 2 * stride, c->stride = stride, c->causal = causal;
    c->w = conv_weight(ld, prefix, cin, cout, c->k, 1);
    c->b = opt_bias(ld, prefix, cout);
}

static const float *ld_alpha(sam_loader *ld, const char *prefix, int64_t C) {
    char name[320];
    snprintf(name, sizeof name, "%s.alpha", prefix);
    return sam_floats(ld, name, C);
}

/* A ResidualUnit at `p` (block.0..3): Snake units (k7, dilation) or the
 * watermark's causal ELU units (k3, dim -> dim/2 -> dim). */
static void ld_ru(sam_loader *ld, sam_ru *r, const char *p, int64_t dim, int dilation, int elu) {
    char n[320];
    if (!elu) {
        snprintf(n, sizeof n, "%s.block.0", p);
        r->alpha1 = ld_alpha(ld, n, dim);
        snprintf(n, sizeof n, "%s.block.2", p);
        r->alpha2 = ld_alpha(ld, n, dim);
    }
    int64_t hidden = elu ? dim / 2 : dim;
    snprintf(n, sizeof n, "%s.block.1", p);
    ld_conv(ld, &r->c1, n, dim, hidden, elu ? 3 : 7, 1, elu ? 1 : dilation, elu);
    snprintf(n, sizeof n, "%s.block.3", p);
    ld_conv(ld, &r->c2, n, hidden, dim, 1, 1, 1, elu);
}

static void ld_lstm(sam_loader *ld, sam_lstm *l, const char *p, int64_t H) {
    char n[320];
    l->H = H;
    for (int i = 0; i < 2; i++) {
        snprintf(n, sizeof n, "%s.lstm.weight_ih_l%d", p, i);
        l->w_ih[i] = sam_floats(ld, n, 4 * H * H);
        snprintf(n, sizeof n, "%s.lstm.weight_hh_l%d", p, i);
        l->w_hh[i] = sam_floats(ld, n, 4 * H * H);
        snprintf(n, sizeof n, "%s.lstm.bias_ih_l%d", p, i);
        l->b_ih[i] = sam_floats(ld, n, 4 * H);
        snprintf(n, sizeof n, "%s.lstm.bias_hh_l%d", p, i);
        /* mlx keeps one summed bias (found above under bias_ih's new name). */
        l->b_hh[i] = ld->m->mlx ? NULL : sam_floats(ld, n, 4 * H);
    }
}

static const int WM_RATES[SAM_WM_BLOCKS] = {8, 5, 4, 2};

static void ld_codec(sam_loader *ld, sam_codec *c, int64_t enc_dim, int64_t dec_dim) {
    char p[320], n[320];
    ld_conv(ld, &c->enc_in, "audio_codec.encoder.block.0", 1, enc_dim, 7, 1, 1, 0);
    int64_t d = enc_dim;
    for (int i = 0; i < c->n_enc; i++) {
        sam_enc_block *b = &c->enc[i];
        for (int r = 0; r < 3; r++) {
            snprintf(p, sizeof p, "audio_codec.encoder.block.%d.block.%d", i + 1, r);
            ld_ru(ld, &b->ru[r], p, d, r == 0 ? 1 : r == 1 ? 3 : 9, 0);
        }
        snprintf(p, sizeof p, "audio_codec.encoder.block.%d.block.3", i + 1);
        b->alpha = ld_alpha(ld, p, d);
        snprintf(p, sizeof p, "audio_codec.encoder.block.%d.block.4", i + 1);
        ld_conv(ld, &b->down, p, d, 2 * d, 2 * c->enc_rates[i], c->enc_rates[i], 1, 0);
        d *= 2;
    }
    c->enc_alpha = ld_alpha(ld, "audio_codec.encoder.block.5", d);
    ld_conv(ld, &c->enc_out, "audio_codec.encoder.block.6", d, c->latent, 3, 1, 1, 0);
    ld_conv(ld, &c->in_proj, "audio_codec.quantizer.in_proj", c->latent, 2 * c->cb, 1, 1, 1, 0);
    ld_conv(ld, &c->out_proj, "audio_codec.quantizer.out_proj", c->cb, c->latent, 1, 1, 1, 0);
    ld_conv(ld, &c->dec_in, "audio_codec.decoder.model.0", c->latent, dec_dim, 7, 1, 1, 0);
    for (int i = 0; i < c->n_dec; i++) {
        sam_dec_block *b = &c->dec[i];
        int64_t cin = dec_dim >> i, cout = dec_dim >> (i + 1);
        int s = c->dec_rates[i], ws = WM_RATES[i];
        snprintf(p, sizeof p, "audio_codec.decoder.model.%d.block", i + 1);
        snprintf(n, sizeof n, "%s.0", p);
        b->alpha = ld_alpha(ld, n, cin);
        snprintf(n, sizeof n, "%s.1", p);
        ld_convt(ld, &b->up, n, cin, cout, s, 0);
        static const int ru_idx[3] = {4, 5, 8}, dil[3] = {1, 3, 9};
        for (int r = 0; r < 3; r++) {
            snprintf(n, sizeof n, "%s.%d", p, ru_idx[r]);
            ld_ru(ld, &b->ru[r], n, cout, dil[r], 0);
        }
        if (c->has_wm) {
            snprintf(n, sizeof n, "%s.3", p);
            ld_convt(ld, &b->wm_up, n, cin / 3, cout / 3, ws, 1);
            snprintf(n, sizeof n, "%s.6", p);
            ld_ru(ld, &b->wm_ru6, n, cout / 3, 1, 1);
            snprintf(n, sizeof n, "%s.7", p);
            ld_ru(ld, &b->wm_ru7, n, cout / 3, 1, 1);
            snprintf(n, sizeof n, "%s.11", p);
            ld_conv(ld, &b->wm_down, n, cout / 3, cin / 3, 2 * ws, ws, 1, 1);
        }
    }
    int64_t last = dec_dim >> c->n_dec;
    const char *wm = "audio_codec.decoder.wm_model";
    snprintf(n, sizeof n, "%s.encoder_block.pre.0", wm);
    c->wm_alpha = ld_alpha(ld, n, last);
    snprintf(n, sizeof n, "%s.encoder_block.pre.1", wm);
    ld_conv(ld, &c->wm_pre1, n, last, 1, 7, 1, 1, 0);
    if (!c->has_wm) return;
    snprintf(n, sizeof n, "%s.encoder_block.pre.3", wm);
    ld_conv(ld, &c->wm_pre3, n, 1, 32, 7, 1, 1, 1);
    snprintf(n, sizeof n, "%s.encoder_block.post.0", wm);
    ld_lstm(ld, &c->wm_enc_lstm, n, 512);
    snprintf(n, sizeof n, "%s.encoder_block.post.2", wm);
    ld_conv(ld, &c->wm_post2, n, 512, 128, 7, 1, 1, 1);
    snprintf(n, sizeof n, "%s.msg_processor.msg_processor", wm);
    c->msg_emb = ld_table(ld, n, 2 * CHOIR_SAM_WM_BITS, 128);
    snprintf(n, sizeof n, "%s.decoder_block.pre.0", wm);
    ld_conv(ld, &c->wm_dec_pre0, n, 128, 512, 7, 1, 1, 1);
    snprintf(n, sizeof n, "%s.decoder_block.pre.1", wm);
    ld_lstm(ld, &c->wm_dec_lstm, n, 512);
    snprintf(n, sizeof n, "%s.decoder_block.post.1", wm);
    ld_conv(ld, &c->wm_post1, n, 32, 1, 7, 1, 1, 1);
}

/* A [rows, cols] linear with rows permuted from the reference's strided
 * head split (row d*H + h holds head h, position d) to contiguous heads
 * (row h*hd + d): the same math with a standard attention layout. A file
 * written by `choir convert` already has it (heads_folded). */
static void ld_heads(sam_loader *ld, const char *prefix, int64_t D, int64_t H, choir_weight *W) {
    sam_matrix(ld, prefix, D, D, W);
    if (ld->status || ld->m->heads_folded) return;
    int64_t hd = D / H;
    if (W->kind == CHOIR_WEIGHT_QUANT) {
        /* A quantized row (packed words, its groups' scales and biases)
         * moves whole, so the same permutation applies to the three arrays. */
        size_t wrow = (size_t)(D * W->bits / 32) * 4, srow = (size_t)(D / W->group_size) * choir_dtype_size(W->sb_dtype);
        unsigned char *w = sam_own(ld, (size_t)D * wrow), *sc = sam_own(ld, (size_t)D * srow), *bi = sam_own(ld, (size_t)D * srow);
        if (!w || !sc || !bi) return;
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < hd; d++) {
                size_t to = (size_t)(h * hd + d), from = (size_t)(d * H + h);
                memcpy(w + to * wrow, (const unsigned char *)W->data + from * wrow, wrow);
                memcpy(sc + to * srow, (const unsigned char *)W->scales + from * srow, srow);
                memcpy(bi + to * srow, (const unsigned char *)W->biases + from * srow, srow);
            }
        W->data = w, W->scales = sc, W->biases = bi;
        return;
    }
    size_t es = W->kind == CHOIR_WEIGHT_F32 ? 4 : 2;
    unsigned char *dst = sam_own(ld, (size_t)(D * D) * es);
    if (!dst) return;
    const unsigned char *src = W->data;
    for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < hd; d++)
            memcpy(dst + (size_t)((h * hd + d) * D) * es, src + (size_t)((d * H + h) * D) * es, (size_t)D * es);
    W->data = dst;
}

static void ld_dit(sam_loader *ld, sam_dit *t, int64_t n_anchors) {
    char p[320], n[320];
    int64_t D = t->D;
    t->layers = sam_own(ld, (size_t)t->L * sizeof *t->layers);
    if (!t->layers) return;
    memset(t->layers, 0, (size_t)t->L * sizeof *t->layers);
    /* The FFN width comes from the file (config rounding rules vary). */
    const choir_st_tensor *w1 = find_opt(ld, "transformer.layers.0.feed_forward.w1.weight");
    const choir_st_tensor *w1s = ld->st ? choir_st_find(ld->st, "transformer.layers.0.feed_forward.w1.scales") : NULL;
    if (w1s) t->F = w1s->shape[0];
    else if (w1 && w1->ndim == 2) t->F = w1->shape[0] == D ? w1->shape[1] : w1->shape[0];
    else {
        sam_fail(ld, CHOIR_ENOTFOUND, "tensor transformer.layers.0.feed_forward.w1.weight is missing");
        return;
    }
    for (int64_t i = 0; i < t->L && !ld->status; i++) {
        sam_dit_layer *l = &t->layers[i];
        snprintf(p, sizeof p, "transformer.layers.%lld", (long long)i);
        snprintf(n, sizeof n, "%s.scale_shift_table", p);
        l->table = sam_floats(ld, n, 6 * D);
        const char *att[2] = {"attention", "cross_attention"};
        for (int a = 0; a < 2; a++) {
            choir_weight *q = a ? &l->cq : &l->wq, *k = a ? &l->ck : &l->wk, *v = a ? &l->cv : &l->wv,
                         *o = a ? &l->co : &l->wo;
            snprintf(n, sizeof n, "%s.%s.wq", p, att[a]);
            ld_heads(ld, n, D, t->H, q);
            snprintf(n, sizeof n, "%s.%s.wk", p, att[a]);
            ld_heads(ld, n, D, t->H, k);
            snprintf(n, sizeof n, "%s.%s.wv", p, att[a]);
            ld_heads(ld, n, D, t->H, v);
            snprintf(n, sizeof n, "%s.%s.wo", p, att[a]);
            sam_matrix(ld, n, D, D, o);
            snprintf(n, sizeof n, "%s.%s.q_norm.weight", p, att[a]);
            *(a ? &l->cq_norm : &l->q_norm) = sam_floats(ld, n, t->hd);
            snprintf(n, sizeof n, "%s.%s.k_norm.weight", p, att[a]);
            *(a ? &l->ck_norm : &l->k_norm) = sam_floats(ld, n, t->hd);
        }
        snprintf(n, sizeof n, "%s.feed_forward.w1", p);
        sam_matrix(ld, n, t->F, D, &l->w1);
        snprintf(n, sizeof n, "%s.feed_forward.w2", p);
        sam_matrix(ld, n, D, t->F, &l->w2);
        snprintf(n, sizeof n, "%s.feed_forward.w3", p);
        sam_matrix(ld, n, t->F, D, &l->w3);
        snprintf(n, sizeof n, "%s.attention_norm.weight", p);
        l->attn_norm = sam_floats(ld, n, D);
        snprintf(n, sizeof n, "%s.ffn_norm.weight", p);
        l->ffn_norm = sam_floats(ld, n, D);
    }
    t->final_table = sam_floats(ld, "transformer.final_layer_scale_shift_table", 2 * D);
    t->norm = sam_floats(ld, "transformer.norm.weight", D);
    sam_matrix(ld, "transformer.output", t->out_ch, D, &t->output);
    t->gn1_w = sam_floats(ld, "transformer.x_embedder.block.block1.groupnorm.weight", D);
    t->gn1_b = sam_floats(ld, "transformer.x_embedder.block.block1.groupnorm.bias", D);
    t->gn2_w = sam_floats(ld, "transformer.x_embedder.block.block2.groupnorm.weight", D);
    t->gn2_b = sam_floats(ld, "transformer.x_embedder.block.block2.groupnorm.bias", D);
    t->pconv1_w = conv_weight(ld, "transformer.x_embedder.block.block1.project", D, D, 3, 0);
    t->pconv1_b = opt_bias(ld, "transformer.x_embedder.block.block1.project", D);
    t->pconv2_w = conv_weight(ld, "transformer.x_embedder.block.block2.project", D, D, 3, 0);
    t->pconv2_b = opt_bias(ld, "transformer.x_embedder.block.block2.project", D);
    sam_matrix(ld, "transformer.y_embedder.projection.w1", D, t->ctx_dim, &t->y_w1);
    sam_matrix(ld, "transformer.y_embedder.projection.w2", D, D, &t->y_w2);
    sam_matrix(ld, "transformer.y_embedder.projection.w3", D, t->ctx_dim, &t->y_w3);
    sam_matrix(ld, "transformer.t_embedder.projection.w1", D, t->freq_dim, &t->t_w1);
    sam_matrix(ld, "transformer.t_embedder.projection.w2", D, D, &t->t_w2);
    sam_matrix(ld, "transformer.t_embedder.projection.w3", D, t->freq_dim, &t->t_w3);
    sam_matrix(ld, "transformer.t_block", 6 * D, D, &t->t_block);
    t->t_block_b = sam_floats(ld, "transformer.t_block.bias", 6 * D);
    sam_matrix(ld, "proj", D, t->in_channels, &t->proj);
    t->proj_b = sam_floats(ld, "proj.bias", D);
    sam_matrix(ld, "memory_proj", D, t->text_dim, &t->memory_proj);
    t->memory_proj_b = sam_floats(ld, "memory_proj.bias", D);
    t->n_anchor_rows = n_anchors + 1;
    t->anchor_embed_host = ld_table(ld, "embed_anchors.embed", t->n_anchor_rows, t->anchor_dim);
    sam_matrix(ld, "embed_anchors.proj", D, t->anchor_dim, &t->anchor_proj);
    const float *ag = sam_floats(ld, "embed_anchors.gate", 1);
    t->anchor_gate = ag ? tanhf(ag[0]) : 0;

    /* With no video the reference feeds zeros through align_masked_video:
     * conv(0) = its bias, then LayerNorm, then the gate. A constant. mlx's
     * layout drops these tensors (and the term). */
    t->video_const = sam_own(ld, (size_t)D * sizeof *t->video_const);
    if (!t->video_const) return;
    memset(t->video_const, 0, (size_t)D * sizeof *t->video_const);
    if (find_opt(ld, "align_masked_video.conv.bias") || !ld->m->mlx) {
        const float *cb = sam_floats(ld, "align_masked_video.conv.bias", D);
        const float *lw = sam_floats(ld, "align_masked_video.layer_norm.weight", D);
        const float *lb = sam_floats(ld, "align_masked_video.layer_norm.bias", D);
        const float *g = sam_floats(ld, "align_masked_video.gate", 1);
        if (!ld->status) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < D; i++) mean += cb[i];
            mean /= (double)D;
            for (int64_t i = 0; i < D; i++) var += (cb[i] - mean) * (cb[i] - mean);
            var /= (double)D;
            float gate = tanhf(g[0]);
            for (int64_t i = 0; i < D; i++)
                t->video_const[i] = gate * (float)(((cb[i] - mean) / sqrt(var + 1e-5)) * lw[i] + lb[i]);
        }
    }

    /* RoPE (theta = max(10000, 2 * max_positions), interleaved pairs) is
     * computed by the rope operation from positions; no tables. */
}

/* --- config and files --------------------------------------------------- */

static int read_rates(const cJSON *obj, const char *key, int *out, int *n, choir_err *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key), *e;
    *n = 0;
    cJSON_ArrayForEach(e, a) {
        if (*n == SAM_MAX_RATES || !cJSON_IsNumber(e) || e->valuedouble < 1)
            return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: config %s is not a list of up to %d rates", key, SAM_MAX_RATES);
        out[(*n)++] = (int)e->valuedouble;
    }
    if (*n == 0) return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: config has no %s", key);
    return 0;
}

static int parse_config(choir_sam *m, const cJSON *root, int64_t *enc_dim, int64_t *dec_dim, int64_t *n_anchors,
                        choir_err *err) {
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(root, "audio_codec");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "transformer");
    const cJSON *te = cJSON_GetObjectItemCaseSensitive(root, "text_encoder");
    sam_codec *c = &m->codec;
    sam_dit *t = &m->dit;
    if (!ac || !tr) return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: config.json has no audio_codec / transformer");
    int rc = read_rates(ac, "encoder_rates", c->enc_rates, &c->n_enc, err);
    if (rc) return rc;
    if ((rc = read_rates(ac, "decoder_rates", c->dec_rates, &c->n_dec, err))) return rc;
    *enc_dim = choir_json_int(ac, "encoder_dim", 64);
    *dec_dim = choir_json_int(ac, "decoder_dim", 1536);
    c->latent = choir_json_int(ac, "latent_dim", 1024);
    c->cb = choir_json_int(ac, "codebook_dim", 128);
    m->sample_rate = (int)choir_json_int(ac, "sample_rate", 48000);
    c->hop = 1;
    for (int i = 0; i < c->n_enc; i++) c->hop *= c->enc_rates[i];
    int dec_hop = 1;
    for (int i = 0; i < c->n_dec; i++) dec_hop *= c->dec_rates[i];
    if (m->sample_rate != CHOIR_SAM_RATE || dec_hop != c->hop || *enc_dim < 1 || c->latent < 1 || c->cb < 1 ||
        *dec_dim < 1 || (*dec_dim >> c->n_dec) < 1)
        return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: unsupported codec config (rate %d, hops %d/%d)",
                             m->sample_rate, c->hop, dec_hop);
    t->D = choir_json_int(tr, "dim", 2048);
    t->H = choir_json_int(tr, "n_heads", 16);
    t->L = choir_json_int(tr, "n_layers", 16);
    t->eps = (float)choir_json_num(tr, "norm_eps", 1e-5);
    t->max_pos = choir_json_int(tr, "max_positions", 10000);
    t->freq_dim = choir_json_int(tr, "frequency_embedding_dim", 256);
    t->ctx_dim = choir_json_int(tr, "context_dim", t->D);
    t->out_ch = choir_json_int(tr, "out_channels", 2 * c->cb);
    t->rope_theta = (float)(2 * t->max_pos > 10000 ? 2 * t->max_pos : 10000);
    if (t->D < 1 || t->H < 1 || t->D % t->H || (t->D / t->H) % 2 || t->L < 1 || t->freq_dim % 2 ||
        t->out_ch != 2 * c->cb || t->ctx_dim != t->D || t->max_pos < 1 || t->D % 2)
        return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: unsupported transformer config");
    if (!choir_json_bool(tr, "qk_norm", 1) || !choir_json_bool(tr, "use_rope", 1) || choir_json_bool(tr, "fc_bias", 0) ||
        choir_json_bool(tr, "context_norm", 0) ||
        strcmp(choir_json_str(tr, "non_linearity", "swiglu"), "swiglu") != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "sam-audio: transformer variant not supported (qk_norm, rope, swiglu, no biases)");
    t->hd = t->D / t->H;
    t->in_channels = choir_json_int(root, "in_channels", 6 * c->cb);
    if (t->in_channels != 6 * c->cb) return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: in_channels must be 6 x codebook_dim");
    t->text_dim = te ? choir_json_int(te, "dim", 768) : 768;
    t->anchor_dim = choir_json_int(root, "anchor_embedding_dim", 128);
    *n_anchors = choir_json_int(root, "num_anchors", 3);
    if (*n_anchors < 3) return choir_err_set(err, CHOIR_EFORMAT, "sam-audio: num_anchors must be at least 3");
    m->heads_folded = choir_json_bool(root, "choir_heads_contiguous", 0);
    return 0;
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

choir_sam *choir_sam_load(const char *dir, const char *t5_dir, choir_err *err) {
    choir_sam_load_opts o = {.t5_dir = t5_dir};
    return choir_sam_load_ex(dir, &o, err);
}

choir_sam *choir_sam_load_ex(const char *dir, const choir_sam_load_opts *opts, choir_err *err) {
    choir_sam_load_opts none = {0};
    if (!opts) opts = &none;
    const char *t5_dir = opts->t5_dir;
    if (!dir) {
        choir_err_set(err, CHOIR_EINVAL, "sam-audio: no model path");
        return NULL;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *root = choir_json_load(p, err);
    if (!root) return NULL;
    choir_sam *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        cJSON_Delete(root);
        choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
        return NULL;
    }
    int64_t enc_dim = 0, dec_dim = 0, n_anchors = 0;
    if (parse_config(m, root, &enc_dim, &dec_dim, &n_anchors, err) != 0) goto fail;
    m->qc = choir_quant_config_from_json(root, err);
    if (!m->qc) goto fail;
    cJSON_Delete(root);
    root = NULL;

    /* Weights: safetensors (or shards) first, then Meta's checkpoint.pt. */
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    char idx[4096];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    if (is_file(p) || is_file(idx)) {
        m->st = choir_st_open(dir, err);
        if (!m->st) goto fail;
        m->mlx = choir_st_find(m->st, "audio_codec.encoder.block.0.weight_v") == NULL &&
                 choir_st_find(m->st, "audio_codec.encoder.block.0.weight") == NULL;
    } else {
        const char *names[] = {"checkpoint.pt", "checkpoint.pth", "model.pt", "model.pth"};
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !m->ck; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            if (is_file(p) && !(m->ck = choir_ckpt_open(p, err))) goto fail;
        }
        if (!m->ck) {
            choir_err_set(err, CHOIR_ENOTFOUND, "sam-audio: no model.safetensors or checkpoint.pt in %s", dir);
            goto fail;
        }
    }
    sam_loader ld = {.m = m, .st = m->st, .err = err};
    /* The watermark path needs decoder_dim 1536 over 4 blocks; a file
     * without it decodes without the watermark (mlx-audio's converter keeps
     * it: its decoder module holds the path's parameters). */
    m->codec.has_wm = find_opt(&ld, "audio_codec.decoder.wm_model.msg_processor.msg_processor.weight") != NULL;
    if (m->codec.has_wm && (m->codec.n_dec != SAM_WM_BLOCKS || dec_dim != 1536)) {
        choir_err_set(err, CHOIR_EUNSUPPORTED, "sam-audio: the watermark path needs decoder_dim 1536 and 4 decoder blocks");
        goto fail;
    }
    ld_codec(&ld, &m->codec, enc_dim, dec_dim);
    ld_dit(&ld, &m->dit, n_anchors);
    if (ld.status) {
        choir_err_prefix(err, "%s", dir);
        goto fail;
    }

    /* The T5 encoder the user brings beside the checkpoint. */
    const char *cands[] = {"t5", "t5-base", "text_encoder"};
    if (t5_dir) {
        snprintf(p, sizeof p, "%s", t5_dir);
    } else {
        p[0] = 0;
        for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !p[0]; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, cands[i]);
            if (!is_dir(p)) p[0] = 0;
        }
    }
    if (p[0]) {
        if (sam_t5_load(m, p, err) != 0) goto fail;
        m->has_t5 = 1;
        if (m->t5.d != m->dit.text_dim) {
            choir_err_set(err, CHOIR_ESHAPE, "sam-audio: T5 in %s is %lld wide, the model expects %lld", p,
                          (long long)m->t5.d, (long long)m->dit.text_dim);
            goto fail;
        }
    }
    /* The codec and the DiT on their backend (the CPU: nothing moves). */
    if (opts->device > 0) {
        choir_backend_cuda_opts co = {.device = opts->device - 1, .bf16 = opts->bf16 != 0};
        m->be = choir_backend_cuda(&co, err);
    } else {
        m->be = choir_backend_cpu(err);
    }
    if (!m->be) goto fail;
    m->own_be = 1;
    if (sam_backend_attach(m, err) != 0) goto fail;
    return m;
fail:
    cJSON_Delete(root);
    choir_sam_free(m);
    return NULL;
}

void choir_sam_free(choir_sam *m) {
    if (!m) return;
    sam_backend_detach(m);
    if (m->own_be) choir_backend_free(m->be);
    sam_t5_free(&m->t5);
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    choir_quant_config_free(m->qc);
    choir_st_close(m->st);
    choir_st_close(m->t5_st);
    choir_ckpt_close(m->ck);
    choir_free(m);
}

int choir_sam_hop(const choir_sam *m) { return m->codec.hop; }
int choir_sam_channels(const choir_sam *m) { return (int)m->codec.cb; }
int choir_sam_has_text(const choir_sam *m) { return m && m->has_t5; }
int64_t choir_sam_text_dim(const choir_sam *m) { return m->dit.text_dim; }
int64_t choir_sam_frames(const choir_sam *m, int64_t samples) {
    return (samples + m->codec.hop - 1) / m->codec.hop;
}
int64_t choir_sam_max_frames(const choir_sam *m) { return m->dit.max_pos; }
