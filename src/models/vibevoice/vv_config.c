/* VibeVoice-ASR configuration: transformers' config.json (model_type
 * vibevoice_asr) and the original / mlx-community one (model_type vibevoice,
 * nested acoustic_tokenizer_config / semantic_tokenizer_config /
 * decoder_config), and the published sizes for benchmarks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/json.h"
#include "choir/vibevoice.h"
#include "models/vibevoice/vv_internal.h"

static const cJSON *obj(const cJSON *c, const char *key) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsObject(o) ? o : NULL;
}

static double num(const cJSON *c, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* An int list from a JSON array, or from "3-3-3-8" as the original writes
 * depths. Returns the count, or -1. */
static int int_list(const cJSON *v, int *out, int cap) {
    int n = 0;
    if (cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsNumber(e) || n >= cap) return -1;
            out[n++] = e->valueint;
        }
        return n;
    }
    if (cJSON_IsString(v) && v->valuestring) {
        const char *p = v->valuestring;
        while (*p) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p || n >= cap) return -1;
            out[n++] = (int)x;
            p = *end == '-' ? end + 1 : end;
            if (*end && *end != '-') return -1;
        }
        return n;
    }
    return -1;
}


/* One encoder from transformers' sub-config (hf = 1) or the original's. */
static int read_enc(const cJSON *c, int hf, int vae_default, choir_vibevoice_enc_dims *d, const char *what,
                    const char *src, choir_err *err) {
    memset(d, 0, sizeof *d);
    int ratios[CHOIR_VIBEVOICE_MAX_STAGES], depths[CHOIR_VIBEVOICE_MAX_STAGES + 1];
    int nr, nd;
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(c, hf ? "downsampling_ratios" : "encoder_ratios");
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(c, hf ? "depths" : "encoder_depths");
    if (jr && !cJSON_IsNull(jr)) nr = int_list(jr, ratios, CHOIR_VIBEVOICE_MAX_STAGES);
    else nr = 6, memcpy(ratios, VV_DEFAULT_RATIOS, sizeof VV_DEFAULT_RATIOS);
    if (jd && !cJSON_IsNull(jd)) nd = int_list(jd, depths, CHOIR_VIBEVOICE_MAX_STAGES + 1);
    else nd = 7, memcpy(depths, VV_DEFAULT_DEPTHS, sizeof VV_DEFAULT_DEPTHS);
    if (nr < 1 || nr >= CHOIR_VIBEVOICE_MAX_STAGES || nd != nr + 1)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: %s: %d ratios and %d depths (need n and n + 1, n < %d)",
                             src, what, nr, nd, CHOIR_VIBEVOICE_MAX_STAGES);
    d->n_stages = nd;
    for (int i = 0; i < nr; i++)
        /* The original lists the ratios from the latent side and reverses them. */
        d->ratios[i] = hf ? ratios[i] : ratios[nr - 1 - i];
    for (int i = 0; i < nd; i++) d->depths[i] = depths[i];
    d->vae_dim = (int)num(c, hf ? "hidden_size" : "vae_dim", vae_default);
    d->n_filters = (int)num(c, hf ? "num_filters" : "encoder_n_filters", 32);
    d->ffn_mult = (int)num(c, "ffn_expansion", 4);
    d->eps = (float)num(c, hf ? "rms_norm_eps" : "layernorm_eps", 1e-5);
    for (int i = 0; i < nr; i++)
        if (d->ratios[i] < 1 || d->ratios[i] > 64)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: %s: ratio %d out of range", src, what, d->ratios[i]);
    for (int i = 0; i < nd; i++)
        if (d->depths[i] < 0 || d->depths[i] > 64)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: %s: depth %d out of range", src, what, d->depths[i]);
    if (d->vae_dim <= 0 || d->n_filters <= 0 || d->ffn_mult <= 0 || !(d->eps > 0) ||
        ((int64_t)d->n_filters << (nd - 1)) > (1 << 16))
        return choir_err_set(err, CHOIR_EFORMAT, "%s: %s: latent %d, filters %d, ffn x%d, eps %g", src, what,
                             d->vae_dim, d->n_filters, d->ffn_mult, (double)d->eps);
    return 0;
}

static int read_lm(const cJSON *c, choir_vibevoice_lm_dims *d, const char *src, choir_err *err) {
    memset(d, 0, sizeof *d);
    d->hidden = (int)num(c, "hidden_size", 0);
    d->n_layers = (int)num(c, "num_hidden_layers", 0);
    d->n_heads = (int)num(c, "num_attention_heads", 0);
    d->n_kv_heads = (int)num(c, "num_key_value_heads", d->n_heads);
    d->head_dim = (int)num(c, "head_dim", d->n_heads > 0 ? d->hidden / d->n_heads : 0);
    d->intermediate = (int)num(c, "intermediate_size", 0);
    d->vocab = (int)num(c, "vocab_size", 0);
    d->eps = (float)num(c, "rms_norm_eps", 1e-6);
    d->max_positions = (int)num(c, "max_position_embeddings", 32768);
    d->tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings"));
    const cJSON *rp = obj(c, "rope_parameters");
    d->rope_theta = num(rp ? rp : c, "rope_theta", num(c, "rope_theta", 1e6));
    const char *act = choir_json_str(c, "hidden_act", "silu");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    const char *rtype = rp ? choir_json_str(rp, "rope_type", "default") : "default";
    if (d->hidden <= 0 || d->n_layers <= 0 || d->n_layers > 1024 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
        d->n_heads % d->n_kv_heads || d->head_dim <= 0 || d->head_dim % 2 || d->head_dim > 256 ||
        d->intermediate <= 0 || d->vocab <= 0 || !(d->eps > 0) || !(d->rope_theta > 0) || d->max_positions <= 0)
        return choir_err_set(err, CHOIR_EFORMAT,
                             "%s: not a Qwen2 language model config (hidden %d, layers %d, heads %d/%d, "
                             "head_dim %d, intermediate %d, vocab %d)",
                             src, d->hidden, d->n_layers, d->n_heads, d->n_kv_heads, d->head_dim,
                             d->intermediate, d->vocab);
    if (strcmp(act, "silu") != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: hidden_act %s (only silu)", src, act);
    if ((rs && !cJSON_IsNull(rs)) || strcmp(rtype, "default") != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: RoPE scaling is not supported", src);
    return 0;
}

int choir_vibevoice_read_config(const char *path, choir_vibevoice_dims *d, choir_err *err) {
    cJSON *root = choir_json_load(path, err);
    if (!root) return err ? err->code : CHOIR_EIO;
    memset(d, 0, sizeof *d);
    int rc;
    const cJSON *ha = obj(root, "acoustic_tokenizer_encoder_config");
    const cJSON *oa = obj(root, "acoustic_tokenizer_config");
    if (ha) {
        const cJSON *hs = obj(root, "semantic_tokenizer_encoder_config"), *tc = obj(root, "text_config");
        if (!hs || !tc) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: semantic_tokenizer_encoder_config or text_config missing",
                               path);
            goto done;
        }
        if ((rc = read_enc(ha, 1, 64, &d->acoustic, "acoustic encoder", path, err)) ||
            (rc = read_enc(hs, 1, 128, &d->semantic, "semantic encoder", path, err)) ||
            (rc = read_lm(tc, &d->lm, path, err)))
            goto done;
        d->eos_token = (int32_t)num(tc, "eos_token_id", 151643);
    } else if (oa) {
        const cJSON *os = obj(root, "semantic_tokenizer_config"), *dc = obj(root, "decoder_config");
        if (!os || !dc) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: semantic_tokenizer_config or decoder_config missing", path);
            goto done;
        }
        if ((rc = read_enc(oa, 0, (int)num(root, "acoustic_vae_dim", 64), &d->acoustic, "acoustic encoder",
                           path, err)) ||
            (rc = read_enc(os, 0, (int)num(root, "semantic_vae_dim", 128), &d->semantic, "semantic encoder",
                           path, err)) ||
            (rc = read_lm(dc, &d->lm, path, err)))
            goto done;
        d->eos_token = (int32_t)num(dc, "eos_token_id", 151643);
    } else {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: not a VibeVoice-ASR config (no acoustic tokenizer config)",
                           path);
        goto done;
    }
    d->chunk_samples = (int64_t)num(root, "acoustic_tokenizer_chunk_size", 1440000);
    d->audio_token = (int32_t)num(root, "audio_token_id", 151648);
    d->audio_bos = (int32_t)num(root, "audio_bos_token_id", 151646);
    d->audio_eos = (int32_t)num(root, "audio_eos_token_id", 151647);
    d->connector_eps = 1e-6f;
    rc = vv_dims_finish(d, path, err);
done:
    cJSON_Delete(root);
    return rc;
}
