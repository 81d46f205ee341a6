/* What the converter quantizes: model detection, per-family exclusions and
 * the mixed-precision recipes. Kept apart from the I/O so the rules can be
 * tested and documented on their own (docs/quantization.md). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "choir/convert.h"

choir_convert_model choir_convert_detect_model(const cJSON *config) {
    if (!cJSON_IsObject(config)) return CHOIR_CONVERT_MODEL_GENERIC;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (cJSON_IsString(mt)) {
        if (strcmp(mt->valuestring, "whisper") == 0) return CHOIR_CONVERT_MODEL_WHISPER;
        if (strcmp(mt->valuestring, "kokoro") == 0) return CHOIR_CONVERT_MODEL_KOKORO;
        if (strstr(mt->valuestring, "silero")) return CHOIR_CONVERT_MODEL_SILERO;
        if (strstr(mt->valuestring, "mossformer")) return CHOIR_CONVERT_MODEL_MOSSFORMER2;
    }
    if (cJSON_GetObjectItemCaseSensitive(config, "istftnet") ||
        cJSON_GetObjectItemCaseSensitive(config, "plbert"))
        return CHOIR_CONVERT_MODEL_KOKORO;
    /* SAMAudioConfig: a codec and a DiT side by side. */
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(config, "audio_codec")) &&
        cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(config, "transformer")))
        return CHOIR_CONVERT_MODEL_SAM_AUDIO;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(config, "model");
    if (cJSON_IsString(model) && strncmp(model->valuestring, "MossFormer2", 11) == 0)
        return CHOIR_CONVERT_MODEL_MOSSFORMER2;
    return CHOIR_CONVERT_MODEL_GENERIC;
}

const char *choir_convert_model_name(choir_convert_model m) {
    switch (m) {
    case CHOIR_CONVERT_MODEL_WHISPER: return "whisper";
    case CHOIR_CONVERT_MODEL_KOKORO: return "kokoro";
    case CHOIR_CONVERT_MODEL_MOSSFORMER2: return "mossformer2";
    case CHOIR_CONVERT_MODEL_SILERO: return "silero";
    case CHOIR_CONVERT_MODEL_SAM_AUDIO: return "sam-audio";
    default: return "generic";
    }
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

bool choir_convert_should_quantize(choir_convert_model m, const char *name, int ndim,
                                   const int64_t *shape, int group_size, const char **why) {
    const char *dummy;
    if (!why) why = &dummy;
    /* Only Linear and Embedding weights have a quantized form in MLX; their
     * parameter is "<module>.weight" and 2-D. Convolutions are 3-D, norms and
     * biases 1-D, LSTM matrices are named weight_ih_l0 / Wx_forward.
     * MossFormer2's kernel-1 Conv1d weights [out, in, 1] (FSMN conv1/conv2,
     * the output head and decoder: 14 % of the model; the encoder's 180-wide
     * rows fail the group test below) are matrices in all but shape: they are
     * written quantized as [out, in], which is how its loader reads any layer
     * that has "<prefix>.scales". */
    bool pointwise = m == CHOIR_CONVERT_MODEL_MOSSFORMER2 && ndim == 3 && shape[2] == 1;
    if (!ends_with(name, ".weight") || (ndim != 2 && !pointwise)) {
        *why = "not a linear or embedding weight";
        return false;
    }
    if (shape[1] % group_size != 0 || shape[1] % 64 != 0) {
        *why = "row length does not divide by the group size and 64";
        return false;
    }
    switch (m) {
    case CHOIR_CONVERT_MODEL_WHISPER:
        /* Positional tables are added, not multiplied: keep them exact. */
        if (strstr(name, "embed_positions") || strstr(name, "positional_embedding")) {
            *why = "whisper: positional embedding stays float";
            return false;
        }
        break;
    case CHOIR_CONVERT_MODEL_KOKORO:
        /* The harmonic source's 9-input linear is excluded by shape already;
         * everything else 2-D named .weight is a Linear/Embedding in Kokoro. */
        break;
    case CHOIR_CONVERT_MODEL_SILERO:
        *why = "silero: a 2 MB model, kept float";
        return false;
    case CHOIR_CONVERT_MODEL_SAM_AUDIO:
        /* The DiT's linears are 96 % of the weights; the codec (convs, the
         * watermark's embedding and LSTMs) and the anchor table stay float,
         * and the loader reads them as floats. The strided head split is
         * folded at load for quantized rows too (rows permute whole). */
        if (strncmp(name, "transformer.", 12) != 0) {
            *why = "sam-audio: only the DiT's linears are quantized";
            return false;
        }
        break;
    default: break;
    }
    *why = NULL;
    return true;
}

/* Index of the first purely numeric component of a dotted path, or -1. */
static int layer_index(const char *path) {
    const char *p = path;
    while (*p) {
        const char *end = strchr(p, '.');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        bool digits = len > 0;
        for (size_t i = 0; i < len; i++)
            if (!isdigit((unsigned char)p[i])) digits = false;
        if (digits && len < 9) return atoi(p);
        if (!end) break;
        p = end + 1;
    }
    return -1;
}

static bool has_component(const char *path, const char *comp) {
    size_t n = strlen(comp);
    for (const char *p = strstr(path, comp); p; p = strstr(p + 1, comp)) {
        bool start = p == path || p[-1] == '.';
        bool stop = p[n] == '\0' || p[n] == '.';
        if (start && stop) return true;
    }
    return false;
}

int choir_convert_mixed_bits(const char *recipe, const char *path, int n_layers) {
    int low, high;
    if (strcmp(recipe, "mixed_3_6") == 0) {
        low = 3;
        high = 6;
    } else if (strcmp(recipe, "mixed_4_6") == 0) {
        low = 4;
        high = 6;
    } else {
        return 0;
    }
    if (has_component(path, "lm_head") || has_component(path, "proj_out") ||
        has_component(path, "embed_tokens") || has_component(path, "token_embedding"))
        return high;
    bool sensitive = has_component(path, "v_proj") || has_component(path, "value") ||
                     has_component(path, "down_proj") || has_component(path, "fc2") ||
                     has_component(path, "mlp2");
    if (!sensitive) return low;
    int idx = layer_index(path);
    if (idx < 0 || n_layers <= 0) return low;
    int eighth = n_layers / 8;
    bool more = idx < eighth || idx >= 7 * n_layers / 8 || (idx - eighth) % 3 == 2;
    return more ? high : low;
}
