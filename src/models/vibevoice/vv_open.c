/* Loading a VibeVoice-ASR model folder: config.json and the safetensors
 * file(s), memory-mapped and bound by vv_load.c (the model owns the mapping
 * and closes it when freed). Apart from vv_load.c so that code without the
 * checkpoint readers (the standalone GPU check) can build models from
 * tensors. */
#include <stdio.h>

#include "choir/alloc.h"
#include "choir/safetensors.h"
#include "models/vibevoice/vv_internal.h"

static const choir_st_tensor *st_find(void *ctx, const char *name) { return choir_st_find(ctx, name); }

static void close_st(void *st) { choir_st_close(st); }

choir_vibevoice *choir_vibevoice_load(const char *dir, choir_err *err) {
    return choir_vibevoice_load_on(dir, NULL, err);
}

choir_vibevoice *choir_vibevoice_load_on(const char *dir, choir_backend *be, choir_err *err) {
    char path[4096];
    choir_vibevoice_dims dims;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (choir_vibevoice_read_config(path, &dims, err)) return NULL;
    choir_st *st = choir_st_open(dir, err);
    if (!st) return NULL;
    choir_vibevoice *m = vv_model_new(err);
    if (!m) {
        choir_st_close(st);
        choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        return NULL;
    }
    m->release = close_st;
    m->release_ctx = st;
    if (!(m = vv_build(m, st_find, st, &dims, be, err))) {
        choir_err_prefix(err, "%s: ", dir);
        return NULL;
    }
    return m;
}

