/* randw-v1 weights and the test checkpoints built from fixture manifests. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "choir/io.h"

#define MANIFEST_MAX_BYTES ((size_t)64 << 20)

uint64_t choir_randw_hash(const char *name) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001B3ull;
    return h;
}

void choir_randw_fill(const char *name, double offset, double scale, int64_t first, int64_t n,
                      float *out) {
    const uint64_t h = choir_randw_hash(name);
    for (int64_t k = 0; k < n; k++) {
        uint64_t z = h + (uint64_t)(first + k + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z = z ^ (z >> 31);
        double u = (double)(z >> 40) / 16777216.0;
        out[k] = (float)(offset + scale * (2.0 * u - 1.0));
    }
}

/* What save needs to produce one tensor. */
typedef struct gen_entry {
    double offset, scale;
    const cJSON *values;   /* a constant's given values, or NULL for randw */
    const char *gen_name;  /* the manifest name, which the values are a function of */
} gen_entry;

static int fill_randw(void *ctx, const char *name, void *dst, size_t nbytes, choir_err *err) {
    const gen_entry *g = ctx;
    (void)err;
    (void)name; /* the stored name may be a renaming */
    choir_randw_fill(g->gen_name, g->offset, g->scale, 0, (int64_t)(nbytes / sizeof(float)), dst);
    return CHOIR_OK;
}

/* Flattens (possibly nested) number arrays row-major into dst; returns the count
 * written, or -1 on a non-number or too many values. */
static int64_t flatten(const cJSON *v, float *dst, int64_t cap, int64_t at) {
    if (cJSON_IsNumber(v)) {
        if (at >= cap) return -1;
        dst[at] = (float)v->valuedouble;
        return at + 1;
    }
    if (!cJSON_IsArray(v)) return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        at = flatten(it, dst, cap, at);
        if (at < 0) return -1;
    }
    return at;
}

static int fill_constant(void *ctx, const char *name, void *dst, size_t nbytes, choir_err *err) {
    const gen_entry *g = ctx;
    int64_t n = (int64_t)(nbytes / sizeof(float));
    int64_t got = flatten(g->values, dst, n, 0);
    if (got != n)
        return choir_err_set(err, CHOIR_EFORMAT, "constant '%s' has %lld values, its shape needs %lld",
                             name, (long long)got, (long long)n);
    return CHOIR_OK;
}

/* Reads one manifest entry's name and shape. */
static int entry_shape(const cJSON *e, const char *manifest_path, const char **name, int *ndim,
                       int64_t *shape, choir_err *err) {
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsString(jn) || !cJSON_IsArray(js) || cJSON_GetArraySize(js) > CHOIR_ST_MAX_DIMS)
        return choir_err_set(err, CHOIR_EFORMAT, "%s: an entry lacks a name or a shape (at most %d dims)",
                             manifest_path, CHOIR_ST_MAX_DIMS);
    *name = jn->valuestring;
    *ndim = cJSON_GetArraySize(js);
    for (int d = 0; d < *ndim; d++) {
        const cJSON *jd = cJSON_GetArrayItem(js, d);
        if (!cJSON_IsNumber(jd) || jd->valuedouble < 0 || jd->valuedouble > 1e12 ||
            jd->valuedouble != floor(jd->valuedouble))
            return choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s': bad shape", manifest_path, *name);
        shape[d] = (int64_t)jd->valuedouble;
    }
    return CHOIR_OK;
}

/* The stored name of manifest tensor `name` under the renaming map. */
static const char *renamed(const cJSON *map, const char *name) {
    const cJSON *v = map ? cJSON_GetObjectItemCaseSensitive(map, name) : NULL;
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : name;
}

#define RANDW_MAX_SHARDS 64

/* Writes the shard files and the index naming, for every tensor, its file. */
static int save_shards(choir_st_writer **w, int shards, const char *const *names, const int *shard_of, int nt,
                       const char *out_dir, char *path, size_t cap, choir_err *err) {
    char file[64];
    cJSON *index = cJSON_CreateObject(), *map = cJSON_AddObjectToObject(index, "weight_map");
    cJSON_AddObjectToObject(index, "metadata");
    int rc = map ? CHOIR_OK : choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    for (int i = 0; i < nt && !rc; i++) {
        snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, shards);
        if (!cJSON_AddStringToObject(map, names[i], file)) rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    }
    for (int k = 0; k < shards && !rc; k++) {
        snprintf(path, cap, "%s/model-%05d-of-%05d.safetensors", out_dir, k + 1, shards);
        rc = choir_st_writer_save(w[k], path, err);
    }
    char *text = rc ? NULL : cJSON_Print(index);
    if (!rc && !text) rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    if (!rc) {
        snprintf(path, cap, "%s/model.safetensors.index.json", out_dir);
        rc = choir_io_write_atomic(path, text, strlen(text), NULL, 0, err);
    }
    free(text);
    cJSON_Delete(index);
    return rc;
}

int choir_randw_write_checkpoint(const char *manifest_path, const char *config_path, const char *out_dir,
                                 choir_err *err) {
    return choir_randw_write_checkpoint_ex(manifest_path, config_path, out_dir, NULL, err);
}

int choir_randw_write_checkpoint_ex(const char *manifest_path, const char *config_path,
                                    const char *out_dir, const choir_randw_opts *opts, choir_err *err) {
    if (!manifest_path || !out_dir) return choir_err_set(err, CHOIR_EINVAL, "randw: NULL path");
    int shards = opts && opts->shards > 1 ? opts->shards : 1;
    if (shards > RANDW_MAX_SHARDS)
        return choir_err_set(err, CHOIR_EINVAL, "randw: at most %d shards", RANDW_MAX_SHARDS);
    cJSON *man = NULL, *ren_root = NULL;
    const cJSON *ren = NULL;
    choir_st_writer *ws[RANDW_MAX_SHARDS] = {0};
    gen_entry *gens = NULL;
    const char **names = NULL;
    int *shard_of = NULL;
    char *config = NULL, *path = NULL;
    int rc = CHOIR_OK;
    size_t cap = strlen(out_dir) + 64;
    if (!(path = choir_alloc(CHOIR_MEM_OTHER, cap))) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    if (!(man = choir_json_load(manifest_path, err))) {
        rc = err ? err->code : CHOIR_EFORMAT;
        goto fail;
    }
    if (opts && opts->rename_path) {
        if (!(ren_root = choir_json_load(opts->rename_path, err))) {
            rc = err ? err->code : CHOIR_EFORMAT;
            goto fail;
        }
        const cJSON *inner = cJSON_GetObjectItemCaseSensitive(ren_root, "hf_to_original");
        ren = cJSON_IsObject(inner) ? inner : ren_root;
        if (!cJSON_IsObject(ren)) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: not a name map", opts->rename_path);
            goto fail;
        }
    }
    const char *gen = choir_json_str(man, "generator", "randw-v1");
    if (strcmp(gen, "randw-v1") != 0) {
        rc = choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: generator '%s' is not randw-v1", manifest_path, gen);
        goto fail;
    }
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(man, "tensors");
    const cJSON *constants = cJSON_GetObjectItemCaseSensitive(man, "constants");
    if (!cJSON_IsArray(tensors) || (constants && !cJSON_IsArray(constants))) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: no \"tensors\" array", manifest_path);
        goto fail;
    }
    int nt = cJSON_GetArraySize(tensors), nc = constants ? cJSON_GetArraySize(constants) : 0;
    gens = choir_calloc(CHOIR_MEM_OTHER, (size_t)(nt + nc) + 1, sizeof *gens);
    names = choir_calloc(CHOIR_MEM_OTHER, (size_t)(nt + nc) + 1, sizeof *names);
    shard_of = choir_calloc(CHOIR_MEM_OTHER, (size_t)(nt + nc) + 1, sizeof *shard_of);
    if (!gens || !names || !shard_of) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    for (int k = 0; k < shards; k++)
        if (!(ws[k] = choir_st_writer_create(err))) {
            rc = err ? err->code : CHOIR_ENOMEM;
            goto fail;
        }
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, tensors) {
        const char *name;
        int ndim;
        int64_t shape[CHOIR_ST_MAX_DIMS];
        if ((rc = entry_shape(e, manifest_path, &name, &ndim, shape, err)) < 0) goto fail;
        const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "offset");
        const cJSON *jsc = cJSON_GetObjectItemCaseSensitive(e, "scale");
        if (!cJSON_IsNumber(jo) || !cJSON_IsNumber(jsc)) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s: tensor '%s' lacks offset or scale", manifest_path, name);
            goto fail;
        }
        gens[k] = (gen_entry){jo->valuedouble, jsc->valuedouble, NULL, name};
        names[k] = renamed(ren, name);
        shard_of[k] = (int)((int64_t)k * shards / (nt + nc));
        if ((rc = choir_st_writer_add_fill(ws[shard_of[k]], names[k], CHOIR_DTYPE_F32, ndim, shape, fill_randw,
                                           &gens[k], err)) < 0)
            goto fail;
        k++;
    }
    if (constants) {
        cJSON_ArrayForEach(e, constants) {
            const char *name;
            int ndim;
            int64_t shape[CHOIR_ST_MAX_DIMS];
            if ((rc = entry_shape(e, manifest_path, &name, &ndim, shape, err)) < 0) goto fail;
            const char *dt = choir_json_str(e, "dtype", "float32");
            const cJSON *vals = cJSON_GetObjectItemCaseSensitive(e, "values");
            if (strcmp(dt, "float32") != 0 || !vals) {
                rc = choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: constant '%s': need float32 values",
                                   manifest_path, name);
                goto fail;
            }
            gens[k] = (gen_entry){0.0, 0.0, vals, name};
            names[k] = renamed(ren, name);
            shard_of[k] = (int)((int64_t)k * shards / (nt + nc));
            if ((rc = choir_st_writer_add_fill(ws[shard_of[k]], names[k], CHOIR_DTYPE_F32, ndim, shape,
                                               fill_constant, &gens[k], err)) < 0)
                goto fail;
            k++;
        }
    }
    for (int s = 0; s < shards; s++)
        if (choir_st_writer_set_metadata(ws[s], "format", "pt", err) < 0 ||
            choir_st_writer_set_metadata(ws[s], "generator", "randw-v1", err) < 0) {
            rc = err ? err->code : CHOIR_ENOMEM;
            goto fail;
        }
    if ((rc = choir_io_make_dirs(out_dir, err)) < 0) goto fail;
    if (config_path) {
        size_t len;
        if ((rc = choir_io_read_file(config_path, MANIFEST_MAX_BYTES, &config, &len, err)) < 0) goto fail;
        snprintf(path, cap, "%s/config.json", out_dir);
        if ((rc = choir_io_write_atomic(path, config, len, NULL, 0, err)) < 0) goto fail;
    }
    if (shards == 1) {
        snprintf(path, cap, "%s/model.safetensors", out_dir);
        rc = choir_st_writer_save(ws[0], path, err);
    } else {
        rc = save_shards(ws, shards, names, shard_of, k, out_dir, path, cap, err);
    }
fail:
    choir_free(config);
    choir_free(path);
    for (int s = 0; s < shards; s++) choir_st_writer_free(ws[s]);
    choir_free(gens);
    choir_free(names);
    choir_free(shard_of);
    cJSON_Delete(ren_root);
    cJSON_Delete(man);
    return rc;
}
