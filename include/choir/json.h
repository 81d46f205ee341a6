/* choir/json.h: config files through cJSON (Debian's libcjson).
 *
 * Thin helpers around cJSON for reading model configs; callers use the cJSON API
 * directly for anything else. */
#ifndef CHOIR_JSON_H
#define CHOIR_JSON_H

#include <stdint.h>
#include <cjson/cJSON.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses the file at `path` (at most 64 MiB). Returns a tree the caller frees
 * with cJSON_Delete, or NULL (and err naming the file and the offset of the
 * error). */
cJSON *choir_json_load(const char *path, choir_err *err);
/* Parses `len` bytes of text. */
cJSON *choir_json_parse(const char *text, size_t len, choir_err *err);

/* Member lookups that tolerate a missing key or a wrong type by returning `def`. */
int64_t choir_json_int(const cJSON *obj, const char *key, int64_t def);
double choir_json_num(const cJSON *obj, const char *key, double def);
const char *choir_json_str(const cJSON *obj, const char *key, const char *def);
int choir_json_bool(const cJSON *obj, const char *key, int def);

/* Writes `root` to `path` formatted, via a temporary file renamed into place. */
int choir_json_save(const cJSON *root, const char *path, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
