/* whisper_to_ggml: writes a choir Whisper model folder (Hugging Face
 * safetensors layout, any float dtype) as a whisper.cpp model file, so both
 * engines can run the same weights side by side (bench/peers/whisper_cpp.sh).
 *
 *     whisper_to_ggml MODEL_DIR OUT.bin [f16|f32]
 *
 * The file layout, as whisper.cpp's loader reads it (src/whisper.cpp,
 * whisper_model_load), all little-endian:
 *   u32 magic 0x67676d6c ("ggml");
 *   i32 n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
 *       n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
 *       (0 = f32, 1 = f16);
 *   i32 n_mel, n_fft (201), then f32 mel filters [n_mel][n_fft];
 *   i32 n_words, then per word u32 length + bytes (the tokenizer's byte
 *       strings in id order; the loader names the special tokens itself);
 *   per tensor: i32 n_dims, i32 name length, i32 type (0 f32, 1 f16), i32
 *       ne[n_dims] (fastest dimension first, i.e. the row-major shape
 *       reversed), the name (openai's names: encoder.blocks.N.attn.query...),
 *       then the data, row-major.
 * Matrices and convolution kernels go in `ftype`; vectors, the conv biases
 * (written as [n_state, 1]) and both positional embeddings stay f32, as the
 * loader expects. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/mel.h"
#include "choir/safetensors.h"
#include "choir/tensor.h"

typedef struct out_file {
    FILE *f;
    int failed;
} out_file;

static void put(out_file *o, const void *p, size_t n) {
    if (!o->failed && fwrite(p, 1, n, o->f) != n) o->failed = 1;
}
static void put_i32(out_file *o, int32_t v) { put(o, &v, 4); }

/* One HF tensor name and the openai name whisper.cpp knows it by. */
typedef struct name_map {
    const char *hf, *ggml;
} name_map;

static const name_map BLOCK_NAMES[] = {
    {"self_attn.q_proj.weight", "attn.query.weight"},
    {"self_attn.q_proj.bias", "attn.query.bias"},
    {"self_attn.k_proj.weight", "attn.key.weight"},
    {"self_attn.v_proj.weight", "attn.value.weight"},
    {"self_attn.v_proj.bias", "attn.value.bias"},
    {"self_attn.out_proj.weight", "attn.out.weight"},
    {"self_attn.out_proj.bias", "attn.out.bias"},
    {"self_attn_layer_norm.weight", "attn_ln.weight"},
    {"self_attn_layer_norm.bias", "attn_ln.bias"},
    {"encoder_attn.q_proj.weight", "cross_attn.query.weight"},
    {"encoder_attn.q_proj.bias", "cross_attn.query.bias"},
    {"encoder_attn.k_proj.weight", "cross_attn.key.weight"},
    {"encoder_attn.v_proj.weight", "cross_attn.value.weight"},
    {"encoder_attn.v_proj.bias", "cross_attn.value.bias"},
    {"encoder_attn.out_proj.weight", "cross_attn.out.weight"},
    {"encoder_attn.out_proj.bias", "cross_attn.out.bias"},
    {"encoder_attn_layer_norm.weight", "cross_attn_ln.weight"},
    {"encoder_attn_layer_norm.bias", "cross_attn_ln.bias"},
    {"fc1.weight", "mlp.0.weight"},
    {"fc1.bias", "mlp.0.bias"},
    {"fc2.weight", "mlp.2.weight"},
    {"fc2.bias", "mlp.2.bias"},
    {"final_layer_norm.weight", "mlp_ln.weight"},
    {"final_layer_norm.bias", "mlp_ln.bias"},
};

static const name_map TOP_NAMES[] = {
    {"model.encoder.conv1.weight", "encoder.conv1.weight"},
    {"model.encoder.conv1.bias", "encoder.conv1.bias"},
    {"model.encoder.conv2.weight", "encoder.conv2.weight"},
    {"model.encoder.conv2.bias", "encoder.conv2.bias"},
    {"model.encoder.embed_positions.weight", "encoder.positional_embedding"},
    {"model.encoder.layer_norm.weight", "encoder.ln_post.weight"},
    {"model.encoder.layer_norm.bias", "encoder.ln_post.bias"},
    {"model.decoder.embed_tokens.weight", "decoder.token_embedding.weight"},
    {"model.decoder.embed_positions.weight", "decoder.positional_embedding"},
    {"model.decoder.layer_norm.weight", "decoder.ln.weight"},
    {"model.decoder.layer_norm.bias", "decoder.ln.bias"},
};

/* The openai name of an HF tensor into out; 0 when it has none. */
static int ggml_name(const char *hf, char *out, size_t cap) {
    for (size_t i = 0; i < sizeof TOP_NAMES / sizeof TOP_NAMES[0]; i++)
        if (strcmp(hf, TOP_NAMES[i].hf) == 0) {
            snprintf(out, cap, "%s", TOP_NAMES[i].ggml);
            return 1;
        }
    const char *stacks[2][2] = {{"model.encoder.layers.", "encoder"}, {"model.decoder.layers.", "decoder"}};
    for (int s = 0; s < 2; s++) {
        size_t n = strlen(stacks[s][0]);
        if (strncmp(hf, stacks[s][0], n) != 0) continue;
        char *end;
        long layer = strtol(hf + n, &end, 10);
        if (end == hf + n || *end != '.') return 0;
        for (size_t i = 0; i < sizeof BLOCK_NAMES / sizeof BLOCK_NAMES[0]; i++)
            if (strcmp(end + 1, BLOCK_NAMES[i].hf) == 0) {
                snprintf(out, cap, "%s.blocks.%ld.%s", stacks[s][1], layer, BLOCK_NAMES[i].ggml);
                return 1;
            }
    }
    return 0;
}

static int b64_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Writes the words of a .tiktoken file ("base64 rank" per line, ranks 0..n-1
 * in order). Returns the count, or -1. */
static int put_vocab(out_file *o, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) n++;
    rewind(f);
    put_i32(o, n);
    for (int i = 0; i < n && fgets(line, sizeof line, f); i++) {
        unsigned char word[768];
        uint32_t len = 0, acc = 0;
        int bits = 0;
        for (char *p = line; *p && *p != ' '; p++) {
            int v = b64_value((unsigned char)*p);
            if (v < 0) continue; /* '=' padding */
            acc = acc << 6 | (uint32_t)v;
            bits += 6;
            if (bits >= 8 && len < sizeof word) {
                bits -= 8;
                word[len++] = (unsigned char)(acc >> bits);
            }
        }
        put(o, &len, 4);
        put(o, word, len);
    }
    fclose(f);
    return n;
}

static int json_int(const char *json, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    p = strchr(p + strlen(pat), ':');
    return p ? atoi(p + 1) : -1;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: whisper_to_ggml MODEL_DIR OUT.bin [f16|f32]\n");
        return 2;
    }
    int f16 = argc < 4 || strcmp(argv[3], "f32") != 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", argv[1]);
    FILE *cf = fopen(path, "r");
    if (!cf) {
        fprintf(stderr, "whisper_to_ggml: cannot open %s\n", path);
        return 1;
    }
    static char cfg[1 << 16];
    size_t cn = fread(cfg, 1, sizeof cfg - 1, cf);
    cfg[cn] = 0;
    fclose(cf);
    choir_err err = {0};
    choir_st *st = choir_st_open(argv[1], &err);
    if (!st) {
        fprintf(stderr, "whisper_to_ggml: %s\n", err.msg);
        return 1;
    }
    const choir_st_tensor *emb = choir_st_find(st, "model.decoder.embed_tokens.weight");
    if (!emb || emb->ndim != 2) {
        fprintf(stderr, "whisper_to_ggml: %s is not a Hugging Face Whisper checkpoint "
                        "(no model.decoder.embed_tokens.weight)\n", argv[1]);
        choir_st_close(st);
        return 1;
    }
    int d = json_int(cfg, "d_model"), n_mels = json_int(cfg, "num_mel_bins");
    int32_t hp[11] = {(int32_t)emb->shape[0], json_int(cfg, "max_source_positions"), d,
                      json_int(cfg, "encoder_attention_heads"), json_int(cfg, "encoder_layers"),
                      json_int(cfg, "max_target_positions"), d,
                      json_int(cfg, "decoder_attention_heads"), json_int(cfg, "decoder_layers"),
                      n_mels, f16};
    for (int i = 0; i < 11; i++)
        if (hp[i] < 0) {
            fprintf(stderr, "whisper_to_ggml: config.json lacks a dimension (field %d)\n", i);
            choir_st_close(st);
            return 1;
        }
    out_file o = {fopen(argv[2], "wb"), 0};
    if (!o.f) {
        fprintf(stderr, "whisper_to_ggml: cannot write %s\n", argv[2]);
        choir_st_close(st);
        return 1;
    }
    put_i32(&o, 0x67676d6c);
    for (int i = 0; i < 11; i++) put_i32(&o, hp[i]);
    float *filters = malloc((size_t)n_mels * 201 * sizeof(float));
    if (!filters || choir_whisper_mel_filters(n_mels, filters, &err)) {
        fprintf(stderr, "whisper_to_ggml: mel filters: %s\n", filters ? err.msg : "out of memory");
        return 1;
    }
    put_i32(&o, n_mels);
    put_i32(&o, 201);
    put(&o, filters, (size_t)n_mels * 201 * sizeof(float));
    free(filters);
    snprintf(path, sizeof path, "%s/multilingual.tiktoken", argv[1]);
    int words = put_vocab(&o, path);
    if (words < 0) {
        snprintf(path, sizeof path, "%s/gpt2.tiktoken", argv[1]);
        words = put_vocab(&o, path);
    }
    if (words < 0) {
        fprintf(stderr, "whisper_to_ggml: no multilingual.tiktoken or gpt2.tiktoken in %s\n", argv[1]);
        return 1;
    }
    int written = 0;
    for (int i = 0; i < choir_st_count(st); i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        char name[256];
        if (!ggml_name(t->name, name, sizeof name)) {
            fprintf(stderr, "whisper_to_ggml: skipping %s (no whisper.cpp name)\n", t->name);
            continue;
        }
        float *v = malloc((size_t)t->numel * sizeof(float));
        if (!v || choir_to_f32_n(t->dtype, t->data, v, t->numel)) {
            fprintf(stderr, "whisper_to_ggml: cannot read %s\n", t->name);
            return 1;
        }
        int conv_bias = strstr(name, "conv") && strstr(name, ".bias");
        int keep_f32 = !f16 || t->ndim < 2 || conv_bias || strstr(name, "positional_embedding");
        int ndim = conv_bias ? 2 : t->ndim;
        int64_t shape[4] = {t->shape[0], conv_bias ? 1 : t->shape[1], t->shape[2], t->shape[3]};
        put_i32(&o, ndim);
        put_i32(&o, (int32_t)strlen(name));
        put_i32(&o, keep_f32 ? 0 : 1);
        for (int k = ndim - 1; k >= 0; k--) put_i32(&o, (int32_t)shape[k]);
        put(&o, name, strlen(name));
        if (keep_f32) {
            put(&o, v, (size_t)t->numel * sizeof(float));
        } else {
            uint16_t *h = malloc((size_t)t->numel * sizeof(uint16_t));
            if (!h) return 1;
            choir_f32_to_f16_n(v, h, t->numel);
            put(&o, h, (size_t)t->numel * sizeof(uint16_t));
            free(h);
        }
        free(v);
        written++;
    }
    choir_st_close(st);
    if (fclose(o.f) != 0 || o.failed) {
        fprintf(stderr, "whisper_to_ggml: write to %s failed\n", argv[2]);
        return 1;
    }
    printf("whisper_to_ggml: %s: %d tensors, %d words, ftype %s\n", argv[2], written, words,
           f16 ? "f16" : "f32");
    return 0;
}
