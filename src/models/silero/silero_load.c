/* Silero VAD: loading the weights (native directory, bare .safetensors, or the
 * official ONNX file), finding the model on disk, and converting ONNX to the
 * native layout.
 *
 * The weights are copied into one aligned block even when they come from a
 * mapped safetensors file: they are only 1.2 MB, the three sources then share
 * one code path, and the compute loops get 64-byte-aligned rows whatever the
 * file's header length did to the mapping's alignment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/onnx.h"
#include "choir/safetensors.h"
#include "models/silero/silero_internal.h"

/* The ONNX names were read from silero_vad_16k_op15.onnx (v6.2) with
 * choir_onnx_open; each pair was checked to hold identical values in the
 * reference safetensors extraction. The encoder's convolutions are exported
 * as their re-parameterised ("reparam_conv") single-kernel form. */
const silero_tensor_spec silero_tensor_specs[SILERO_N_TENSORS] = {
    {"stft_conv.weight", "model.stft.forward_basis_buffer", 3, {258, 1, 256}},
    {"conv1.weight", "model.encoder.0.reparam_conv.weight", 3, {128, 129, 3}},
    {"conv1.bias", "model.encoder.0.reparam_conv.bias", 1, {128}},
    {"conv2.weight", "model.encoder.1.reparam_conv.weight", 3, {64, 128, 3}},
    {"conv2.bias", "model.encoder.1.reparam_conv.bias", 1, {64}},
    {"conv3.weight", "model.encoder.2.reparam_conv.weight", 3, {64, 64, 3}},
    {"conv3.bias", "model.encoder.2.reparam_conv.bias", 1, {64}},
    {"conv4.weight", "model.encoder.3.reparam_conv.weight", 3, {128, 64, 3}},
    {"conv4.bias", "model.encoder.3.reparam_conv.bias", 1, {128}},
    {"lstm_cell.weight_ih", "model.decoder.rnn.weight_ih", 2, {512, 128}},
    {"lstm_cell.weight_hh", "model.decoder.rnn.weight_hh", 2, {512, 128}},
    {"lstm_cell.bias_ih", "model.decoder.rnn.bias_ih", 1, {512}},
    {"lstm_cell.bias_hh", "model.decoder.rnn.bias_hh", 1, {512}},
    {"final_conv.weight", "model.decoder.decoder.2.weight", 3, {1, 128, 1}},
    {"final_conv.bias", "model.decoder.decoder.2.bias", 1, {1}},
};

static int64_t spec_numel(const silero_tensor_spec *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    return n;
}

/* Each tensor starts on a 16-float (64-byte) boundary inside the block. */
static int64_t padded(int64_t n) { return (n + 15) & ~(int64_t)15; }

choir_silero *silero_alloc(choir_err *err) {
    choir_silero *m = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *m);
    if (!m) goto fail;
    int64_t total = 0;
    for (int i = 0; i < SILERO_N_TENSORS; i++) total += padded(spec_numel(&silero_tensor_specs[i]));
    m->block = choir_calloc(CHOIR_MEM_WEIGHTS, (size_t)total, sizeof(float));
    if (!m->block) goto fail;
    m->block_floats = (size_t)total;
    float *p = m->block;
    for (int i = 0; i < SILERO_N_TENSORS; i++) {
        m->tensor[i] = p;
        p += padded(spec_numel(&silero_tensor_specs[i]));
    }
    m->stft_basis = m->tensor[0];
    m->conv1_w = m->tensor[1];
    m->conv1_b = m->tensor[2];
    m->conv2_w = m->tensor[3];
    m->conv2_b = m->tensor[4];
    m->conv3_w = m->tensor[5];
    m->conv3_b = m->tensor[6];
    m->conv4_w = m->tensor[7];
    m->conv4_b = m->tensor[8];
    m->w_ih = m->tensor[9];
    m->w_hh = m->tensor[10];
    m->b_ih = m->tensor[11];
    m->b_hh = m->tensor[12];
    m->final_w = m->tensor[13];
    m->final_b = m->tensor[14];
    return m;
fail:
    choir_silero_free(m);
    choir_err_set(err, CHOIR_ENOMEM, "silero: out of memory for the weights");
    return NULL;
}

void choir_silero_free(choir_silero *m) {
    if (!m) return;
    choir_free(m->block);
    choir_free(m);
}

size_t choir_silero_weight_bytes(const choir_silero *m) { return m ? m->block_floats * sizeof(float) : 0; }

static int load_from_st(choir_silero *m, const char *path, choir_err *err) {
    choir_st *st = choir_st_open(path, err);
    if (!st) return err ? err->code : CHOIR_EIO;
    int rc = 0;
    for (int i = 0; i < SILERO_N_TENSORS; i++) {
        const silero_tensor_spec *s = &silero_tensor_specs[i];
        const choir_st_tensor *t = choir_st_expect(st, s->name, CHOIR_DTYPE_F32, s->ndim, s->shape, err);
        if (!t) {
            rc = choir_err_prefix(err, "silero: %s", path);
            goto done;
        }
        memcpy((void *)m->tensor[i], t->data, (size_t)spec_numel(s) * sizeof(float));
    }
done:
    choir_st_close(st);
    return rc;
}

static int load_from_onnx(choir_silero *m, const char *path, choir_err *err) {
    choir_onnx *onnx = choir_onnx_open(path, err);
    if (!onnx) return err ? err->code : CHOIR_EIO;
    int rc = 0;
    for (int i = 0; i < SILERO_N_TENSORS; i++) {
        const silero_tensor_spec *s = &silero_tensor_specs[i];
        /* Some exports keep the 16 kHz weights inside an If node's branch, so
         * the name is looked up in every graph. */
        const choir_onnx_tensor *t = choir_onnx_find(onnx, NULL, s->onnx_name);
        /* A file holding several variants (the combined 8 + 16 kHz export keeps
         * one per If branch) could hold the name twice; refuse rather than guess. */
        for (int k = 0; t && k < choir_onnx_count(onnx); k++) {
            const choir_onnx_tensor *o = choir_onnx_at(onnx, k);
            if (o != t && strcmp(o->name, t->name) == 0 && strcmp(o->graph, t->graph) != 0) {
                rc = choir_err_set(err, CHOIR_EUNSUPPORTED,
                                   "silero: %s holds '%s' in more than one subgraph (several model "
                                   "variants?); use silero_vad_16k_op15.onnx",
                                   path, s->onnx_name);
                goto done;
            }
        }
        if (!t) {
            rc = choir_err_set(err, CHOIR_ENOTFOUND,
                               "silero: %s has no tensor '%s' (is it Silero VAD v6 for 16 kHz?)", path,
                               s->onnx_name);
            goto done;
        }
        int same = t->ndim == s->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = t->dims[d] == s->shape[d];
        if (!same || t->onnx_type != CHOIR_ONNX_FLOAT) {
            rc = choir_err_set(err, CHOIR_ESHAPE,
                               "silero: %s: tensor '%s' is %s with %d dims (%lld, ...), expected FLOAT "
                               "[%lld, ...] with %d dims",
                               path, s->onnx_name, choir_onnx_type_name(t->onnx_type), t->ndim,
                               (long long)(t->ndim ? t->dims[0] : 0), (long long)s->shape[0], s->ndim);
            goto done;
        }
        if ((rc = choir_onnx_tensor_f32(t, (float *)m->tensor[i], err))) goto done;
    }
done:
    choir_onnx_free(onnx);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A config.json is optional; when present it must describe this model. */
static int check_config(const char *dir, choir_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return choir_err_set(err, CHOIR_EINVAL, "silero: model path too long");
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    cJSON *cfg = choir_json_load(path, err);
    if (!cfg) return err ? err->code : CHOIR_EFORMAT;
    int rc = 0;
    const char *type = choir_json_str(cfg, "model_type", NULL);
    int64_t rate = choir_json_int(cfg, "sample_rate", CHOIR_SILERO_RATE);
    if (!type || strcmp(type, "silero_vad") != 0)
        rc = choir_err_set(err, CHOIR_EUNSUPPORTED, "silero: %s: model_type is '%s', not 'silero_vad'", path,
                           type ? type : "(missing)");
    else if (rate != CHOIR_SILERO_RATE)
        rc = choir_err_set(err, CHOIR_EUNSUPPORTED,
                           "silero: %s: sample_rate %lld is not supported (only 16000)", path, (long long)rate);
    cJSON_Delete(cfg);
    return rc;
}

choir_silero *choir_silero_load(const char *path, choir_err *err) {
    if (!path || !*path) {
        choir_err_set(err, CHOIR_EINVAL, "silero: no model path given");
        return NULL;
    }
    choir_silero *m = silero_alloc(err);
    if (!m) return NULL;
    int rc;
    if (ends_with(path, ".onnx")) {
        rc = load_from_onnx(m, path, err);
    } else if (is_dir(path)) {
        rc = check_config(path, err);
        if (!rc) rc = load_from_st(m, path, err);
    } else {
        rc = load_from_st(m, path, err);
    }
    if (rc) goto fail;
    return m;
fail:
    choir_silero_free(m);
    return NULL;
}

int choir_silero_find(const char *explicit_path, char *out, size_t cap, choir_err *err) {
    struct stat sb;
    if (explicit_path) {
        if (stat(explicit_path, &sb) != 0)
            return choir_err_set(err, CHOIR_ENOTFOUND, "silero: model '%s' not found: %s", explicit_path,
                                 strerror(errno));
        if ((size_t)snprintf(out, cap, "%s", explicit_path) >= cap)
            return choir_err_set(err, CHOIR_EINVAL, "silero: model path too long");
        return 0;
    }
    char tried[2][4096] = {"", ""};
    const char *models = getenv("CHOIR_MODELS");
    const char *home = getenv("HOME");
    if (models && *models) snprintf(tried[0], sizeof tried[0], "%s/silero-vad", models);
    if (home && *home) snprintf(tried[1], sizeof tried[1], "%s/.cache/choir/models/silero-vad", home);
    for (int i = 0; i < 2; i++) {
        if (!tried[i][0] || stat(tried[i], &sb) != 0) continue;
        if ((size_t)snprintf(out, cap, "%s", tried[i]) >= cap)
            return choir_err_set(err, CHOIR_EINVAL, "silero: model path too long");
        return 0;
    }
    return choir_err_set(err, CHOIR_ENOTFOUND,
                         "silero: no model found (looked in %s and %s); pass --model DIR or set "
                         "CHOIR_MODELS; make one with `choir convert --in silero_vad_16k_op15.onnx "
                         "--out DIR`",
                         tried[0][0] ? tried[0] : "$CHOIR_MODELS/silero-vad (unset)",
                         tried[1][0] ? tried[1] : "~/.cache/choir/models/silero-vad");
}

/* mkdir -p: creates `dir` and any missing parents. */
static int make_dirs(const char *dir, choir_err *err) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return choir_err_set(err, CHOIR_EINVAL, "silero: bad output directory");
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return choir_err_set(err, CHOIR_EIO, "silero: cannot create %s: %s", path, strerror(errno));
        path[i] = saved;
    }
    if (!is_dir(dir)) return choir_err_set(err, CHOIR_EIO, "silero: %s is not a directory", dir);
    return 0;
}

static int write_config(const char *dir, choir_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return choir_err_set(err, CHOIR_EINVAL, "silero: output path too long");
    cJSON *cfg = cJSON_CreateObject();
    int ok = cfg && cJSON_AddStringToObject(cfg, "model_type", "silero_vad") &&
             cJSON_AddStringToObject(cfg, "version", "6.2") &&
             cJSON_AddNumberToObject(cfg, "sample_rate", CHOIR_SILERO_RATE) &&
             cJSON_AddNumberToObject(cfg, "chunk_samples", CHOIR_SILERO_CHUNK) &&
             cJSON_AddNumberToObject(cfg, "context_samples", CHOIR_SILERO_CONTEXT) &&
             cJSON_AddNumberToObject(cfg, "hidden_size", CHOIR_SILERO_HIDDEN);
    int rc = ok ? choir_json_save(cfg, path, err)
                : choir_err_set(err, CHOIR_ENOMEM, "silero: out of memory building config.json");
    cJSON_Delete(cfg);
    return rc;
}

int choir_silero_convert_onnx(const char *onnx_path, const char *out_dir, choir_err *err) {
    if (!onnx_path || !out_dir) return choir_err_set(err, CHOIR_EINVAL, "silero: convert needs an input and an output");
    choir_st_writer *w = NULL;
    choir_silero *m = silero_alloc(err);
    int rc;
    if (!m) return err ? err->code : CHOIR_ENOMEM;
    if ((rc = load_from_onnx(m, onnx_path, err))) goto done;
    if ((rc = make_dirs(out_dir, err))) goto done;
    w = choir_st_writer_create(err);
    if (!w) {
        rc = err ? err->code : CHOIR_ENOMEM;
        goto done;
    }
    for (int i = 0; i < SILERO_N_TENSORS; i++) {
        const silero_tensor_spec *s = &silero_tensor_specs[i];
        if ((rc = choir_st_writer_add_ref(w, s->name, CHOIR_DTYPE_F32, s->ndim, s->shape, m->tensor[i], err)))
            goto done;
    }
    if ((rc = choir_st_writer_set_metadata(w, "format", "pt", err))) goto done;
    if ((rc = choir_st_writer_set_metadata(w, "source", "silero_vad_16k_op15.onnx (Silero VAD v6.2)", err)))
        goto done;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/model.safetensors", out_dir) >= (int)sizeof path) {
        rc = choir_err_set(err, CHOIR_EINVAL, "silero: output path too long");
        goto done;
    }
    if ((rc = choir_st_writer_save(w, path, err))) goto done;
    rc = write_config(out_dir, err);
done:
    choir_st_writer_free(w);
    choir_silero_free(m);
    return rc;
}
