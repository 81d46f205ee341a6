/* choir/randw.h: randw-v1, the deterministic pseudo-random weights that the
 * parity fixtures were made with (shared/fixtures/README.md).
 *
 * Element i (row-major, 0-based) of a tensor named NAME is
 *   z = splitmix64_mix(FNV-1a-64(NAME) + (i + 1) * 0x9E3779B97F4A7C15)
 *   value = (float)(offset + scale * (2 * (z >> 40) / 2^24 - 1))   (in double)
 * so any slice of any tensor can be generated on its own, bit for bit equal to
 * the numpy reference. */
#ifndef CHOIR_RANDW_H
#define CHOIR_RANDW_H

#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FNV-1a-64 of the NUL-terminated UTF-8 bytes of `name`. */
uint64_t choir_randw_hash(const char *name);

/* Writes elements [first, first + n) of tensor `name` to out[0..n). */
void choir_randw_fill(const char *name, double offset, double scale, int64_t first, int64_t n,
                      float *out);

/* Builds a test checkpoint from a fixture manifest: writes `out_dir`/config.json
 * (a byte copy of `config_path`) and `out_dir`/model.safetensors holding every
 * manifest tensor as float32 randw-v1 data (names and shapes exactly as listed)
 * plus the manifest's "constants" (buffers with given values). `out_dir` is
 * created if missing (its parent must exist). Memory use stays at one tensor.
 * config_path may be NULL to skip config.json. Returns 0 or a negative CHOIR_E*
 * code with err naming the file and the problem. */
int choir_randw_write_checkpoint(const char *manifest_path, const char *config_path,
                                 const char *out_dir, choir_err *err);

/* Options of choir_randw_write_checkpoint_ex. Zero-initialised: as above. */
typedef struct choir_randw_opts {
    /* A JSON file mapping manifest names to the names to store them under:
     * an object {"name": "stored name"}, or such an object under the key
     * "hf_to_original" (the VibeVoice fixtures' original_names.json). Values
     * are still generated from the manifest name, so the checkpoint holds
     * the same weights under another naming. Names not in the map keep
     * theirs. NULL: no renaming. */
    const char *rename_path;
    /* > 1: split the tensors over this many files model-0000K-of-0000N
     * .safetensors plus model.safetensors.index.json, as sharded Hugging
     * Face checkpoints are laid out. */
    int shards;
} choir_randw_opts;

int choir_randw_write_checkpoint_ex(const char *manifest_path, const char *config_path,
                                    const char *out_dir, const choir_randw_opts *opts,
                                    choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
