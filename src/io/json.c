/* Config files through cJSON: loading with errors that name the file and the
 * byte where parsing stopped, tolerant member lookups, and atomic saving. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/io.h"

#define JSON_MAX_BYTES ((size_t)64 << 20)

cJSON *choir_json_parse(const char *text, size_t len, choir_err *err) {
    if (!text) {
        choir_err_set(err, CHOIR_EINVAL, "no JSON text given");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        /* cJSON reports where it stopped; an offset is what a person needs to find
         * the mistake in a config they edited by hand. */
        size_t at = (end && end >= text && end <= text + len) ? (size_t)(end - text) : 0;
        choir_err_set(err, CHOIR_EFORMAT, "malformed JSON near byte %zu", at);
        return NULL;
    }
    return root;
}

cJSON *choir_json_load(const char *path, choir_err *err) {
    size_t len = 0;
    char *text = NULL;
    int rc = choir_io_read_file(path, JSON_MAX_BYTES, &text, &len, err);
    if (rc < 0) return NULL;
    cJSON *root = choir_json_parse(text, len, err);
    choir_free(text);
    if (!root) choir_err_prefix(err, "%s", path);
    return root;
}

int64_t choir_json_int(const cJSON *obj, const char *key, int64_t def) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(it)) return def;
    double v = it->valuedouble;
    /* A double outside int64's range (or NaN) would make the cast undefined. */
    if (!(v >= -9.2233720368547e18 && v <= 9.2233720368547e18)) return def;
    return (int64_t)v;
}

double choir_json_num(const cJSON *obj, const char *key, double def) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(it) ? it->valuedouble : def;
}

const char *choir_json_str(const cJSON *obj, const char *key, const char *def) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(it) && it->valuestring ? it->valuestring : def;
}

int choir_json_bool(const cJSON *obj, const char *key, int def) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsTrue(it)) return 1;
    if (cJSON_IsFalse(it)) return 0;
    return def;
}

int choir_json_save(const cJSON *root, const char *path, choir_err *err) {
    if (!root || !path) return choir_err_set(err, CHOIR_EINVAL, "choir_json_save: NULL argument");
    char *text = cJSON_Print(root);
    if (!text) return choir_err_set(err, CHOIR_ENOMEM, "%s: cannot format JSON", path);
    size_t len = strlen(text);
    /* cJSON_Print leaves no trailing newline; text files end with one. */
    int rc = choir_io_write_atomic(path, text, len, "\n", 1, err);
    cJSON_free(text);
    return rc;
}
