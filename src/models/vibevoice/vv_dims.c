/* VibeVoice-ASR's published sizes and the checks every set of dimensions
 * passes (the hop from the ratios, the chunk size, the special token ids),
 * apart from the config.json reader (vv_config.c) so that code without a
 * JSON library (the standalone GPU check) can use them. */
#include <string.h>

#include "models/vibevoice/vv_internal.h"

const int VV_DEFAULT_RATIOS[6] = {2, 2, 4, 5, 5, 8};
const int VV_DEFAULT_DEPTHS[7] = {3, 3, 3, 3, 3, 3, 8};

int vv_dims_finish(choir_vibevoice_dims *d, const char *src, choir_err *err) {
    int64_t hop_a = 1, hop_s = 1;
    for (int i = 0; i + 1 < d->acoustic.n_stages; i++) hop_a *= d->acoustic.ratios[i];
    for (int i = 0; i + 1 < d->semantic.n_stages; i++) hop_s *= d->semantic.ratios[i];
    if (hop_a != hop_s || hop_a > (1 << 20))
        return choir_err_set(err, CHOIR_EFORMAT, "%s: the encoders' hops differ (%lld, %lld)", src,
                             (long long)hop_a, (long long)hop_s);
    d->hop = (int)hop_a;
    if (d->chunk_samples <= 0 || d->chunk_samples % d->hop)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: acoustic_tokenizer_chunk_size %lld is not a positive "
                             "multiple of the hop %d", src, (long long)d->chunk_samples, d->hop);
    int32_t ids[4] = {d->audio_token, d->audio_bos, d->audio_eos, d->eos_token};
    for (int i = 0; i < 4; i++)
        if (ids[i] < 0 || ids[i] >= d->lm.vocab)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: special token id %d outside the vocabulary", src,
                                 (int)ids[i]);
    return 0;
}

int choir_vibevoice_dims_named(const char *name, choir_vibevoice_dims *d, choir_err *err) {
    memset(d, 0, sizeof *d);
    choir_vibevoice_enc_dims e = {.vae_dim = 64, .n_filters = 32, .n_stages = 7, .ffn_mult = 4, .eps = 1e-5f};
    memcpy(e.ratios, VV_DEFAULT_RATIOS, sizeof VV_DEFAULT_RATIOS);
    memcpy(e.depths, VV_DEFAULT_DEPTHS, sizeof VV_DEFAULT_DEPTHS);
    d->acoustic = e;
    d->semantic = e;
    d->semantic.vae_dim = 128;
    if (strcmp(name, "7b") == 0) {
        d->lm = (choir_vibevoice_lm_dims){.hidden = 3584, .n_layers = 28, .n_heads = 28, .n_kv_heads = 4,
                                          .head_dim = 128, .intermediate = 18944, .vocab = 152064,
                                          .rope_theta = 1e6, .eps = 1e-6f, .max_positions = 131072};
    } else if (strcmp(name, "1.5b") == 0) {
        /* Qwen2.5-1.5B ties its output projection to the embedding. */
        d->lm = (choir_vibevoice_lm_dims){.hidden = 1536, .n_layers = 28, .n_heads = 12, .n_kv_heads = 2,
                                          .head_dim = 128, .intermediate = 8960, .vocab = 151936,
                                          .rope_theta = 1e6, .eps = 1e-6f, .max_positions = 131072,
                                          .tied = 1};
    } else {
        return choir_err_set(err, CHOIR_EINVAL, "vibevoice: unknown size \"%s\" (1.5b or 7b)", name);
    }
    d->chunk_samples = 1440000;
    d->audio_token = 151648;
    d->audio_bos = 151646;
    d->audio_eos = 151647;
    d->eos_token = 151643;
    d->connector_eps = 1e-6f;
    return vv_dims_finish(d, name, err);
}
