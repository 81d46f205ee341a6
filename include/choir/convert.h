/* choir/convert.h: checkpoint conversion to the native (MLX) layout, with
 * optional quantization.
 *
 * Reads a Hugging Face transformers directory, an MLX directory, a single
 * .safetensors file or a PyTorch .pth, and writes DST/config.json +
 * DST/model.safetensors (+ model.safetensors.index.json) in MLX's layout,
 * copying the source directory's other small files (tokenizer, voices/)
 * alongside. Tensor names are kept as they are in the input, except that a
 * Kokoro checkpoint in mlx-audio's layout is renamed and its convolution
 * weights reordered to the native (torch) layout. A .onnx input is
 * handed to the Silero VAD converter. See docs/quantization.md. */
#ifndef CHOIR_CONVERT_H
#define CHOIR_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_convert_params {
    int q_bits;                  /* 0: no quantization; else 2,3,4,5,6,8 */
    int q_group_size;            /* 32, 64 (default), 128 */
    int dtype;                   /* -1 (default): keep each tensor's float dtype;
                                    else CHOIR_DTYPE_F32/F16/BF16 for all float tensors
                                    (and the scales/biases of quantized ones) */
    const char *quant_predicate; /* NULL, "mixed_3_6" or "mixed_4_6" (per-layer bits) */
    bool dequantize;             /* expand an already quantized input to float */
    bool mlx_exact;              /* MLX's rounding in every group (choir_quantize_mlx) */
    FILE *report;                /* the choice for each tensor and the sizes; NULL: silent */
} choir_convert_params;

void choir_convert_default_params(choir_convert_params *p);

typedef struct choir_convert_stats {
    uint64_t bytes_in;  /* tensor bytes read */
    uint64_t bytes_out; /* tensor bytes written */
    int tensors;        /* tensors read (a quantized triplet counts once) */
    int quantized;      /* layers stored quantized in the output */
} choir_convert_stats;

/* Converts `src` into the directory `dst` (created if missing; existing
 * config.json/model.safetensors there are replaced). stats may be NULL.
 * Returns 0, or CHOIR_EINVAL/CHOIR_EUNSUPPORTED for a refused combination of
 * parameters (the message says which and why), CHOIR_ENOTFOUND when no
 * checkpoint is found in src, or an I/O or format error naming the file. */
int choir_convert(const char *src, const char *dst, const choir_convert_params *p,
                  choir_convert_stats *stats, choir_err *err);

/* Model families with their own rules for what stays in float. */
typedef enum choir_convert_model {
    CHOIR_CONVERT_MODEL_GENERIC = 0,
    CHOIR_CONVERT_MODEL_WHISPER,
    CHOIR_CONVERT_MODEL_KOKORO,
    CHOIR_CONVERT_MODEL_MOSSFORMER2,
    CHOIR_CONVERT_MODEL_SILERO,
    CHOIR_CONVERT_MODEL_SAM_AUDIO
} choir_convert_model;

/* The family from a parsed config.json (NULL: generic). */
choir_convert_model choir_convert_detect_model(const cJSON *config);
const char *choir_convert_model_name(choir_convert_model m);

/* Whether the converter quantizes the float tensor `name` of shape
 * [shape[0], shape[1]] (ndim 2; for MossFormer2 also a kernel-1 Conv1d
 * [out, in, 1], written quantized as [out, in]) for model family `m` at `group_size`:
 * a Linear/Embedding ".weight" whose row length divides by the group size and
 * by 64 (as mlx-audio's converter requires), minus the family's exclusions.
 * Sets *why to a static reason when it says no (why may be NULL). */
bool choir_convert_should_quantize(choir_convert_model m, const char *name, int ndim,
                                   const int64_t *shape, int group_size, const char **why);

/* Bits for module `path` under a mixed recipe ("mixed_3_6", "mixed_4_6"):
 * the high width for v_proj/down_proj/fc2 (value and MLP-out projections) in
 * the first and last eighth of `n_layers` and every third layer between, and
 * for output heads (lm_head, Whisper's tied token embedding); the low width
 * otherwise. Returns 0 for an unknown recipe. */
int choir_convert_mixed_bits(const char *recipe, const char *path, int n_layers);

#ifdef __cplusplus
}
#endif
#endif
