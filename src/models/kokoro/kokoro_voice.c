/* Kokoro voice packs (.bin, .pt, .safetensors), weighted mixes, and the
 * phoneme-to-id mapping. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/log.h"
#include "choir/pth.h"
#include "choir/safetensors.h"
#include "choir/tensor.h"
#include "models/kokoro/kokoro_internal.h"


#define PACK_FLOATS (CHOIR_KOKORO_VOICE_ROWS * CHOIR_KOKORO_STYLE_DIM)

struct choir_kokoro_voice {
    float rows[CHOIR_KOKORO_VOICE_ROWS][CHOIR_KOKORO_STYLE_DIM];
};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int pack_from_tensor(const choir_st_tensor *t, const char *path, float *dst,
                            choir_err *err) {
    if (!t) return choir_err_set(err, CHOIR_ENOTFOUND, "%s: no voice tensor", path);
    if (t->numel != PACK_FLOATS)
        return choir_err_set(err, CHOIR_ESHAPE,
                             "%s: voice tensor %s has %lld values, expected 510 x 256", path,
                             t->name, (long long)t->numel);
    if (choir_to_f32_n(t->dtype, t->data, dst, PACK_FLOATS) != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: voice tensor is not a float tensor", path);
    return 0;
}

/* Reads one pack file into dst[510 * 256]. */
static int read_pack(const char *path, float *dst, choir_err *err) {
    if (ends_with(path, ".safetensors")) {
        choir_st *st = choir_st_open(path, err);
        if (!st) return err ? err->code : CHOIR_EIO;
        const choir_st_tensor *t = choir_st_find(st, "voice");
        if (!t && choir_st_count(st) == 1) t = choir_st_at(st, 0);
        int rc = pack_from_tensor(t, path, dst, err);
        choir_st_close(st);
        return rc;
    }
    if (ends_with(path, ".pt") || ends_with(path, ".pth")) {
        choir_pth *p = choir_pth_open(path, err);
        if (!p) return err ? err->code : CHOIR_EIO;
        const choir_st_tensor *t = choir_pth_count(p) >= 1 ? choir_pth_at(p, 0) : NULL;
        int rc = pack_from_tensor(t, path, dst, err);
        choir_pth_close(p);
        return rc;
    }
    FILE *f = fopen(path, "rb");
    if (!f) return choir_err_set(err, CHOIR_ENOTFOUND, "%s: cannot open voice", path);
    unsigned char raw[4];
    size_t got = fread(dst, sizeof(float), PACK_FLOATS, f);
    size_t extra = fread(raw, 1, 1, f);
    fclose(f);
    if (got != PACK_FLOATS || extra != 0)
        return choir_err_set(err, CHOIR_EFORMAT,
                             "%s: a .bin voice is 522240 bytes (510 x 256 float32)", path);
    return 0;
}

static bool is_file(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

/* A voice name or path -> an existing file path */
static int resolve(const char *name, const char *dir, char *out, size_t cap, choir_err *err) {
    if (is_file(name)) {
        snprintf(out, cap, "%s", name);
        return 0;
    }
    static const char *const ext[] = {".bin", ".pt", ".safetensors"};
    for (size_t i = 0; dir && i < sizeof ext / sizeof ext[0]; i++) {
        snprintf(out, cap, "%s/%s%s", dir, name, ext[i]);
        if (is_file(out)) return 0;
    }
    if (dir) {
        snprintf(out, cap, "%s/%s", dir, name);
        if (is_file(out)) return 0;
    }
    return choir_err_set(err, CHOIR_ENOTFOUND, "voice \"%s\" not found%s%s", name,
                         dir ? " in " : "", dir ? dir : "");
}

/* A voice name is letters, digits, '_', '-' and '.', not starting with '.':
 * it cannot leave the folder it is looked up in. */
static bool is_voice_name(const char *name) {
    if (!*name || *name == '.') return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') return false;
    return true;
}

/* A voice name -> dir/NAME.{bin,pt,safetensors}, the only files a named
 * lookup reads. Messages name the voice, never a path. */
static int resolve_named(const char *name, const char *dir, char *out, size_t cap, choir_err *err) {
    if (!is_voice_name(name))
        return choir_err_set(err, CHOIR_EINVAL,
                             "kokoro: a voice is one of this model's voice names (letters, digits, '_', "
                             "'-', '.'), not a path");
    static const char *const ext[] = {".bin", ".pt", ".safetensors"};
    for (size_t i = 0; dir && i < sizeof ext / sizeof ext[0]; i++) {
        int w = snprintf(out, cap, "%s/%s%s", dir, name, ext[i]);
        if (w > 0 && (size_t)w < cap && is_file(out)) return 0;
    }
    return choir_err_set(err, CHOIR_ENOTFOUND, "kokoro: voice \"%s\" is not one of this model's voices", name);
}

static choir_kokoro_voice *load_spec(const char *spec, const char *voices_dir, bool named,
                                     choir_err *err) {
    choir_kokoro_voice *v = NULL;
    float *part = NULL;
    if (!spec || !*spec) {
        choir_err_set(err, CHOIR_EINVAL, "kokoro: empty voice");
        return NULL;
    }
    v = choir_calloc(CHOIR_MEM_WEIGHTS, 1, sizeof *v);
    part = choir_alloc(CHOIR_MEM_OTHER, PACK_FLOATS * sizeof(float));
    if (!v || !part) {
        choir_err_set(err, CHOIR_ENOMEM, "kokoro: out of memory for a voice");
        goto fail;
    }
    /* A mix is terms separated by '+' or ',', each NAME or NAME(WEIGHT). A
     * plain path containing neither is one term. */
    double total = 0;
    const char *s = spec;
    while (*s) {
        const char *end = s + strcspn(s, "+,");
        char term[512], path[1024];
        size_t len = (size_t)(end - s);
        if (len == 0 || len >= sizeof term) {
            choir_err_set(err, CHOIR_EINVAL, "kokoro: bad voice mix \"%s\"", spec);
            goto fail;
        }
        memcpy(term, s, len);
        term[len] = 0;
        double weight = 1.0;
        char *paren = strrchr(term, '(');
        if (paren && term[len - 1] == ')' && (named || !is_file(term))) {
            char *stop;
            weight = strtod(paren + 1, &stop);
            if (stop != term + len - 1 || !(weight > 0)) {
                choir_err_set(err, CHOIR_EINVAL, "kokoro: bad voice weight in \"%s\"", term);
                goto fail;
            }
            *paren = 0;
        }
        if (named) {
            if (resolve_named(term, voices_dir, path, sizeof path, err) != 0) goto fail;
            choir_err why = {0};
            if (read_pack(path, part, &why) != 0) {
                /* the reason names the file: it goes to the log, not to the caller */
                choir_log(CHOIR_LOG_WARN, "kokoro: voice %s: %s", term, why.msg);
                choir_err_set(err, why.code, "kokoro: voice \"%s\" cannot be read", term);
                goto fail;
            }
        } else {
            if (resolve(term, voices_dir, path, sizeof path, err) != 0) goto fail;
            if (read_pack(path, part, err) != 0) goto fail;
        }
        float *acc = &v->rows[0][0];
        for (int i = 0; i < PACK_FLOATS; i++) acc[i] += (float)weight * part[i];
        total += weight;
        if (*end && !end[1]) {
            choir_err_set(err, CHOIR_EINVAL, "kokoro: bad voice mix \"%s\"", spec);
            goto fail;
        }
        s = *end ? end + 1 : end;
    }
    if (total != 1.0) {
        float *acc = &v->rows[0][0];
        for (int i = 0; i < PACK_FLOATS; i++) acc[i] = (float)(acc[i] / total);
    }
    choir_free(part);
    return v;
fail:
    choir_free(part);
    choir_free(v);
    return NULL;
}

choir_kokoro_voice *choir_kokoro_voice_load(const char *spec, const char *voices_dir,
                                            choir_err *err) {
    return load_spec(spec, voices_dir, false, err);
}

choir_kokoro_voice *choir_kokoro_voice_load_named(const char *spec, const char *voices_dir,
                                                  choir_err *err) {
    if (!voices_dir) {
        choir_err_set(err, CHOIR_EINVAL, "kokoro: named voices need a voices folder");
        return NULL;
    }
    return load_spec(spec, voices_dir, true, err);
}

void choir_kokoro_voice_free(choir_kokoro_voice *v) { choir_free(v); }

const float *choir_kokoro_voice_style(const choir_kokoro_voice *v, int n_phonemes) {
    int row = n_phonemes - 1;
    if (row < 0) row = 0;
    if (row >= CHOIR_KOKORO_VOICE_ROWS) row = CHOIR_KOKORO_VOICE_ROWS - 1;
    return v->rows[row];
}

/* Decodes one UTF-8 code point; returns its length, 0 for invalid input. */
static int utf8_next(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) return *cp = s[0], 1;
    if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
        *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if ((s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return 3;
    }
    if ((s[0] & 0xF8) == 0xF0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 &&
        (s[3] & 0xC0) == 0x80) {
        *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
              (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

int choir_kokoro_phonemes_to_ids(const choir_kokoro *m, const char *phonemes, int32_t *ids,
                                 int max_ids, int *n_dropped, choir_err *err) {
    if (n_dropped) *n_dropped = 0;
    if (!m || !phonemes || !ids || max_ids < 2)
        return choir_err_set(err, CHOIR_EINVAL, "kokoro: bad arguments to phonemes_to_ids");
    int n = 0, dropped = 0;
    ids[n++] = 0;
    const unsigned char *s = (const unsigned char *)phonemes;
    while (*s) {
        uint32_t cp;
        int len = utf8_next(s, &cp);
        if (!len) return choir_err_set(err, CHOIR_EINVAL, "kokoro: phonemes are not valid UTF-8");
        s += len;
        int id = cp < 65536 ? m->vocab[cp] : 0;
        if (!id) {
            dropped++;
            continue;
        }
        if (n - 1 >= CHOIR_KOKORO_MAX_PHONEMES || n + 1 >= max_ids)
            return choir_err_set(err, CHOIR_ETOOBIG, "kokoro: more than %d phonemes in one piece",
                                 n + 1 >= max_ids ? max_ids - 2 : CHOIR_KOKORO_MAX_PHONEMES);
        ids[n++] = id;
    }
    ids[n++] = 0;
    if (n_dropped) *n_dropped = dropped;
    return n;
}
