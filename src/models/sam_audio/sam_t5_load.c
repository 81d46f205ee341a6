/* T5's weights and tokenizer from the folder a user brings beside the SAM
 * checkpoint (config.json, model.safetensors, tokenizer.json), through the
 * loader's helpers (sam_load.c). Apart from sam_t5.c, which runs the encoder,
 * so that a model built in memory (sam_random.c) can run T5 where no file or
 * JSON library is linked. */
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "sam_internal.h"

int sam_t5_load(choir_sam *m, const char *dir, choir_err *err) {
    sam_t5 *t = &m->t5;
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *root = choir_json_load(p, err);
    if (!root) return err ? err->code : CHOIR_EIO;
    t->d = choir_json_int(root, "d_model", 768);
    t->d_kv = choir_json_int(root, "d_kv", 64);
    t->n_heads = choir_json_int(root, "num_heads", 12);
    t->n_layers = choir_json_int(root, "num_layers", 12);
    t->d_ff = choir_json_int(root, "d_ff", 3072);
    t->vocab = choir_json_int(root, "vocab_size", 32128);
    t->buckets = (int)choir_json_int(root, "relative_attention_num_buckets", 32);
    t->max_distance = (int)choir_json_int(root, "relative_attention_max_distance", 128);
    t->eps = (float)choir_json_num(root, "layer_norm_epsilon", 1e-6);
    const char *ff = choir_json_str(root, "feed_forward_proj", "relu");
    t->gated = strncmp(ff, "gated", 5) == 0;
    int bad = strcmp(ff, "relu") != 0 && strcmp(ff, "gated-gelu") != 0;
    cJSON_Delete(root);
    if (bad || t->d < 1 || t->d_kv < 1 || t->n_heads < 1 || t->n_layers < 1 || t->buckets < 2 || t->vocab < 1)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: T5 config not supported (feed_forward_proj %s)", p, ff);
    t->max_length = 512;

    m->t5_st = choir_st_open(dir, err);
    if (!m->t5_st) return err ? err->code : CHOIR_EIO;
    sam_loader ld = {.m = m, .st = m->t5_st, .err = err};
    const char *emb = choir_st_find(m->t5_st, "shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
    t->embed = sam_floats(&ld, emb, t->vocab * t->d);
    t->rel_bias = sam_floats(&ld, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                             (int64_t)t->buckets * t->n_heads);
    int64_t inner = t->n_heads * t->d_kv;
    t->layers = sam_own(&ld, (size_t)t->n_layers * sizeof *t->layers);
    if (t->layers) memset(t->layers, 0, (size_t)t->n_layers * sizeof *t->layers);
    char n[320];
    for (int64_t i = 0; i < t->n_layers && !ld.status; i++) {
        sam_t5_layer *l = &t->layers[i];
        const char *qkvo[4] = {"q", "k", "v", "o"};
        choir_weight *w[4] = {&l->q, &l->k, &l->v, &l->o};
        for (int j = 0; j < 4; j++) {
            snprintf(n, sizeof n, "encoder.block.%lld.layer.0.SelfAttention.%s", (long long)i, qkvo[j]);
            sam_matrix(&ld, n, j == 3 ? t->d : inner, j == 3 ? inner : t->d, w[j]);
        }
        snprintf(n, sizeof n, "encoder.block.%lld.layer.0.layer_norm.weight", (long long)i);
        l->ln1 = sam_floats(&ld, n, t->d);
        snprintf(n, sizeof n, "encoder.block.%lld.layer.1.layer_norm.weight", (long long)i);
        l->ln2 = sam_floats(&ld, n, t->d);
        if (t->gated) {
            snprintf(n, sizeof n, "encoder.block.%lld.layer.1.DenseReluDense.wi_0", (long long)i);
            sam_matrix(&ld, n, t->d_ff, t->d, &l->wi);
            snprintf(n, sizeof n, "encoder.block.%lld.layer.1.DenseReluDense.wi_1", (long long)i);
            sam_matrix(&ld, n, t->d_ff, t->d, &l->wi1);
        } else {
            snprintf(n, sizeof n, "encoder.block.%lld.layer.1.DenseReluDense.wi", (long long)i);
            sam_matrix(&ld, n, t->d_ff, t->d, &l->wi);
        }
        snprintf(n, sizeof n, "encoder.block.%lld.layer.1.DenseReluDense.wo", (long long)i);
        sam_matrix(&ld, n, t->d, t->d_ff, &l->wo);
    }
    t->final_ln = sam_floats(&ld, "encoder.final_layer_norm.weight", t->d);
    if (ld.status) return choir_err_prefix(err, "%s", dir);
    t->tok = choir_unigram_load(dir, err);
    if (!t->tok) return err ? err->code : CHOIR_EFORMAT;
    return 0;
}
