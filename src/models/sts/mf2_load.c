/* Loading MossFormer2_SE_48K weights from safetensors or a PyTorch file.
 *
 * Names are the published checkpoint's (spec §7), with or without a
 * "module." prefix. Matrices stay in the mapping in their stored dtype (or
 * MLX-quantized form); the small vectors and depthwise kernels the forward
 * pass reads element by element are converted to f32 once when they are not
 * f32 already, and the kernels are transposed to time-major. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "mf2_internal.h"

typedef struct loader {
    choir_mf2 *m;
    choir_err *err;
    int status;
} loader;

static int ld_fail(loader *ld, int code, const char *fmt, const char *a, const char *b) {
    if (ld->status == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, fmt, a, b);
        ld->status = choir_err_set(ld->err, code, "mossformer2: %s", msg);
    }
    return ld->status;
}

static void *ld_own(loader *ld, size_t bytes) {
    choir_mf2 *m = ld->m;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **grown = choir_realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        m->owned = grown;
        m->cap_owned = cap;
    }
    void *p = choir_alloc(CHOIR_MEM_WEIGHTS, bytes);
    if (!p) return NULL;
    m->owned[m->n_owned++] = p;
    m->bytes += bytes;
    return p;
}

static const choir_st_tensor *ld_find_raw(const choir_mf2 *m, const char *name) {
    return m->st ? choir_st_find(m->st, name) : choir_ckpt_find(m->ck, name);
}

/* The tensor `name` (or "module." + name), checked against `numel` elements. */
static const choir_st_tensor *ld_find(loader *ld, const char *name, int64_t numel) {
    if (ld->status) return NULL;
    const choir_st_tensor *t = ld_find_raw(ld->m, name);
    if (!t) {
        char alt[300];
        snprintf(alt, sizeof alt, "module.%s", name);
        t = ld_find_raw(ld->m, alt);
    }
    if (!t) {
        ld_fail(ld, CHOIR_ENOTFOUND, "tensor %s%s is missing", name, "");
        return NULL;
    }
    if (t->numel != numel) {
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)numel);
        ld_fail(ld, CHOIR_ESHAPE, "tensor %s: expected %s elements", name, want);
        return NULL;
    }
    return t;
}

/* A float vector: into the mapping when stored f32, else converted once. */
static const float *ld_floats(loader *ld, const char *name, int64_t numel) {
    const choir_st_tensor *t = ld_find(ld, name, numel);
    if (!t) return NULL;
    if (t->dtype == CHOIR_DTYPE_F32) {
        ld->m->bytes += t->nbytes;
        return t->data;
    }
    float *f = ld_own(ld, (size_t)numel * sizeof *f);
    if (!f) {
        ld_fail(ld, CHOIR_ENOMEM, "out of memory converting %s%s", name, "");
        return NULL;
    }
    if (choir_to_f32_n(t->dtype, t->data, f, numel) != 0) {
        ld_fail(ld, CHOIR_EUNSUPPORTED, "tensor %s: dtype %s is not a float type", name,
                choir_dtype_name(t->dtype));
        return NULL;
    }
    return f;
}

static float ld_scalar(loader *ld, const char *name) {
    const float *v = ld_floats(ld, name, 1);
    return v ? v[0] : 0.0f;
}

/* Depthwise kernel [C, 1, K] (or [C, 1, K, 1]) as time-major [K, C]. */
static float *ld_kernel_t(loader *ld, const char *name, int64_t C, int64_t K) {
    const float *w = ld_floats(ld, name, C * K);
    if (!w) return NULL;
    float *t = ld_own(ld, (size_t)(C * K) * sizeof *t);
    if (!t) {
        ld_fail(ld, CHOIR_ENOMEM, "out of memory for %s%s", name, "");
        return NULL;
    }
    for (int64_t c = 0; c < C; c++)
        for (int64_t k = 0; k < K; k++) t[k * C + c] = w[c * K + k];
    return t;
}

/* A linear (or kernel-1 conv) weight [rows, cols] at module path `prefix`. */
static void ld_matrix(loader *ld, const char *prefix, int64_t rows, int64_t cols, choir_weight *W) {
    if (ld->status) return;
    char name[300], module[300];
    /* Quantized (safetensors only): "<prefix>.scales", or the same with the
     * "module." prefix a converted DataParallel checkpoint keeps. */
    snprintf(module, sizeof module, "module.%s", prefix);
    for (int k = 0; k < 2 && ld->m->st; k++) {
        const char *q = k ? module : prefix;
        snprintf(name, sizeof name, "%s.scales", q);
        if (!choir_st_find(ld->m->st, name)) continue;
        if (choir_weight_from_st(ld->m->st, q, ld->m->qc, W, ld->err) != 0) {
            ld->status = ld->err && ld->err->code ? ld->err->code : CHOIR_EFORMAT;
            return;
        }
        if (choir_weight_expect(W, rows, cols, prefix, ld->err) != 0) ld->status = CHOIR_ESHAPE;
        ld->m->bytes += choir_weight_bytes(W);
        return;
    }
    snprintf(name, sizeof name, "%s.weight", prefix);
    const choir_st_tensor *t = ld_find(ld, name, rows * cols);
    if (!t) return;
    memset(W, 0, sizeof *W);
    W->rows = rows;
    W->cols = cols;
    W->data = t->data;
    switch (t->dtype) {
    case CHOIR_DTYPE_F32: W->kind = CHOIR_WEIGHT_F32; break;
    case CHOIR_DTYPE_F16: W->kind = CHOIR_WEIGHT_F16; break;
    case CHOIR_DTYPE_BF16: W->kind = CHOIR_WEIGHT_BF16; break;
    default:
        ld_fail(ld, CHOIR_EUNSUPPORTED, "tensor %s: dtype %s is not supported for a matrix", name,
                choir_dtype_name(t->dtype));
        return;
    }
    ld->m->bytes += t->nbytes;
}

static void ld_ffconvm(loader *ld, const char *p, int64_t din, int64_t dout, int layer_norm,
                       mf2_ffconvm *f) {
    char n[300], q[300];
    if (layer_norm) {
        snprintf(n, sizeof n, "%s.mdl.0.weight", p);
        f->ln_w = ld_floats(ld, n, din);
        snprintf(n, sizeof n, "%s.mdl.0.bias", p);
        f->ln_b = ld_floats(ld, n, din);
    } else {
        snprintf(n, sizeof n, "%s.mdl.0.g", p);
        f->scale_g = ld_scalar(ld, n);
    }
    snprintf(q, sizeof q, "%s.mdl.1", p);
    ld_matrix(ld, q, dout, din, &f->lin);
    snprintf(n, sizeof n, "%s.mdl.1.bias", p);
    f->lin_b = ld_floats(ld, n, dout);
    snprintf(n, sizeof n, "%s.mdl.3.sequential.1.conv.weight", p);
    f->dw = ld_kernel_t(ld, n, dout, MF2_CONVK);
}

static void ld_layer(loader *ld, int i) {
    choir_mf2 *m = ld->m;
    char p[200], n[300];
    snprintf(p, sizeof p, "mossformer.mdl.intra_mdl.mossformerM.layers.%d", i);
    mf2_flash *fl = &m->flash[i];
    snprintf(n, sizeof n, "%s.to_hidden", p);
    ld_ffconvm(ld, n, CHOIR_MF2_DIM, MF2_HIDDEN, 0, &fl->to_hidden);
    snprintf(n, sizeof n, "%s.to_qk", p);
    ld_ffconvm(ld, n, CHOIR_MF2_DIM, MF2_QK, 0, &fl->to_qk);
    snprintf(n, sizeof n, "%s.to_out", p);
    ld_ffconvm(ld, n, MF2_VU, CHOIR_MF2_DIM, 0, &fl->to_out);
    snprintf(n, sizeof n, "%s.qk_offset_scale.gamma", p);
    fl->gamma = ld_floats(ld, n, 4 * MF2_QK);
    snprintf(n, sizeof n, "%s.qk_offset_scale.beta", p);
    fl->beta = ld_floats(ld, n, 4 * MF2_QK);

    snprintf(p, sizeof p, "mossformer.mdl.intra_mdl.mossformerM.fsmn.%d", i);
    mf2_fsmn *fs = &m->fsmn[i];
    snprintf(n, sizeof n, "%s.conv1.0", p);
    ld_matrix(ld, n, MF2_INNER, CHOIR_MF2_DIM, &fs->conv1);
    snprintf(n, sizeof n, "%s.conv1.0.bias", p);
    fs->conv1_b = ld_floats(ld, n, MF2_INNER);
    snprintf(n, sizeof n, "%s.conv1.1.weight", p);
    fs->prelu = ld_scalar(ld, n);
    snprintf(n, sizeof n, "%s.norm1.weight", p);
    fs->norm1_w = ld_floats(ld, n, MF2_INNER);
    snprintf(n, sizeof n, "%s.norm1.bias", p);
    fs->norm1_b = ld_floats(ld, n, MF2_INNER);
    snprintf(n, sizeof n, "%s.gated_fsmn.to_u", p);
    ld_ffconvm(ld, n, MF2_INNER, MF2_INNER, 1, &fs->to_u);
    snprintf(n, sizeof n, "%s.gated_fsmn.to_v", p);
    ld_ffconvm(ld, n, MF2_INNER, MF2_INNER, 1, &fs->to_v);
    snprintf(n, sizeof n, "%s.gated_fsmn.fsmn.linear", p);
    ld_matrix(ld, n, MF2_INNER, MF2_INNER, &fs->linear);
    snprintf(n, sizeof n, "%s.gated_fsmn.fsmn.linear.bias", p);
    fs->linear_b = ld_floats(ld, n, MF2_INNER);
    snprintf(n, sizeof n, "%s.gated_fsmn.fsmn.project", p);
    ld_matrix(ld, n, MF2_INNER, MF2_INNER, &fs->project);
    snprintf(n, sizeof n, "%s.gated_fsmn.fsmn.conv1.weight", p);
    fs->mem = ld_kernel_t(ld, n, MF2_INNER, MF2_FSMNK);
    snprintf(n, sizeof n, "%s.norm2.weight", p);
    fs->norm2_w = ld_floats(ld, n, MF2_INNER);
    snprintf(n, sizeof n, "%s.norm2.bias", p);
    fs->norm2_b = ld_floats(ld, n, MF2_INNER);
    snprintf(n, sizeof n, "%s.conv2", p);
    ld_matrix(ld, n, CHOIR_MF2_DIM, MF2_INNER, &fs->conv2);
    snprintf(n, sizeof n, "%s.conv2.bias", p);
    fs->conv2_b = ld_floats(ld, n, CHOIR_MF2_DIM);
}

static void ld_all(loader *ld) {
    choir_mf2 *m = ld->m;
    const int64_t D = CHOIR_MF2_DIM;
    m->norm_w = ld_floats(ld, "mossformer.norm.weight", CHOIR_MF2_FEATS);
    m->norm_b = ld_floats(ld, "mossformer.norm.bias", CHOIR_MF2_FEATS);
    ld_matrix(ld, "mossformer.conv1d_encoder", D, CHOIR_MF2_FEATS, &m->enc);
    m->pos_scale = ld_scalar(ld, "mossformer.pos_enc.scale");
    for (int i = 0; i < MF2_LAYERS && !ld->status; i++) ld_layer(ld, i);
    m->ln_w = ld_floats(ld, "mossformer.mdl.intra_mdl.norm.weight", D);
    m->ln_b = ld_floats(ld, "mossformer.mdl.intra_mdl.norm.bias", D);
    m->gn_w = ld_floats(ld, "mossformer.mdl.intra_norm.weight", D);
    m->gn_b = ld_floats(ld, "mossformer.mdl.intra_norm.bias", D);
    m->prelu = ld_scalar(ld, "mossformer.prelu.weight");
    /* Only speaker 0 (rows 0..511) of the 2-speaker head is ever used. */
    ld_matrix(ld, "mossformer.conv1d_out", 2 * D, D, &m->out);
    m->out.rows = D;
    m->out_b = ld_floats(ld, "mossformer.conv1d_out.bias", 2 * D);
    ld_matrix(ld, "mossformer.output.0", D, D, &m->output);
    m->output_b = ld_floats(ld, "mossformer.output.0.bias", D);
    ld_matrix(ld, "mossformer.output_gate.0", D, D, &m->output_gate);
    m->output_gate_b = ld_floats(ld, "mossformer.output_gate.0.bias", D);
    ld_matrix(ld, "mossformer.conv1_decoder", CHOIR_MF2_BINS, D, &m->dec);

    /* Constants are computed as the reference computes them (float32), so a
     * checkpoint without the buffers loads the same. */
    for (int j = 0; j < (int)D / 2; j++) m->pos_freq[j] = (float)(1.0 / pow(10000.0, 2.0 * j / (double)D));
    for (int i = 0; i < MF2_ROT / 2; i++) m->rot_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / MF2_ROT));
}

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Finds the weights file: safetensors first, then ClearerVoice's layout. */
static int locate(const char *path, char *weights, size_t cap, char *config, choir_err *err) {
    config[0] = 0;
    if (is_file(path)) {
        snprintf(weights, cap, "%s", path);
        return 0;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", path);
    if (is_file(p)) snprintf(config, cap, "%s", p);
    const char *st_names[] = {"model.safetensors", "model.safetensors.index.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", path, st_names[i]);
        if (is_file(p)) {
            snprintf(weights, cap, "%s", path);
            return 0;
        }
    }
    /* `last_best_checkpoint` is a text file whose first line names the file. */
    snprintf(p, sizeof p, "%s/last_best_checkpoint", path);
    FILE *f = fopen(p, "r");
    if (f) {
        char line[512] = {0};
        char *got = fgets(line, sizeof line, f);
        fclose(f);
        line[strcspn(line, "\r\n")] = 0;
        if (got && line[0] && !strchr(line, '/')) {
            snprintf(p, sizeof p, "%s/%s", path, line);
            if (is_file(p)) {
                snprintf(weights, cap, "%s", p);
                return 0;
            }
        }
    }
    const char *pt_names[] = {"last_best_checkpoint.pt", "model.pt", "model.pth"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", path, pt_names[i]);
        if (is_file(p)) {
            snprintf(weights, cap, "%s", p);
            return 0;
        }
    }
    return choir_err_set(err, CHOIR_ENOTFOUND,
                         "mossformer2: no model.safetensors or last_best_checkpoint(.pt) in %s", path);
}

choir_mf2 *choir_mf2_load(const char *path, choir_err *err) {
    char weights[4096], config[4096];
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "mossformer2: no model path");
        return NULL;
    }
    if (locate(path, weights, sizeof weights, config, err) != 0) return NULL;
    choir_mf2 *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) {
        choir_err_set(err, CHOIR_ENOMEM, "mossformer2: out of memory");
        return NULL;
    }
    if (config[0]) {
        cJSON *root = choir_json_load(config, err);
        if (!root) goto fail;
        m->qc = choir_quant_config_from_json(root, err);
        cJSON_Delete(root);
        if (!m->qc) goto fail;
    }
    /* A single non-safetensors file is a PyTorch archive (choir_ckpt also
     * tells safetensors by its bytes); directories and .safetensors/.json go
     * through the safetensors reader, which also gives quantized layers. */
    if (is_file(weights) && !ends_with(weights, ".safetensors") && !ends_with(weights, ".json")) {
        m->ck = choir_ckpt_open(weights, err);
        if (!m->ck) goto fail;
    } else {
        m->st = choir_st_open(weights, err);
        if (!m->st) goto fail;
    }
    loader ld = {.m = m, .err = err};
    ld_all(&ld);
    if (ld.status) {
        choir_err_prefix(err, "%s: ", weights);
        goto fail;
    }
    if (mf2_frontend_init(m, err) != 0) goto fail;
    return m;
fail:
    choir_mf2_free(m);
    return NULL;
}

void choir_mf2_free(choir_mf2 *m) {
    if (!m) return;
    mf2_frontend_free(m);
    for (int i = 0; i < m->n_owned; i++) choir_free(m->owned[i]);
    choir_free(m->owned);
    choir_quant_config_free(m->qc);
    choir_st_close(m->st);
    choir_ckpt_close(m->ck);
    choir_free(m);
}

size_t choir_mf2_weight_bytes(const choir_mf2 *m) { return m ? m->bytes : 0; }
