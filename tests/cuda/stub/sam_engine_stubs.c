/* Stand-ins for what the GPU machine lacks, so the SAM-Audio check's engine
 * case links the engine, the model interface and SAM-Audio's adapter and job
 * code without choir's Debian libraries: cJSON (nothing is parsed: the
 * adapter's probe finds no config, JSON anchors are refused), the Unigram
 * tokenizer (the model built in memory has none: choir_sam_tokenize takes
 * ids from the text's bytes), soxr's resampler (inputs are at 48 kHz),
 * adapter detection (the check passes its adapter) and the file loader
 * (every model here comes from sam_random.c). Each refuses with a message
 * if it is ever reached. */
#include <stddef.h>

#include <cjson/cJSON.h>

#include "choir/audio.h"
#include "choir/json.h"
#include "choir/model.h"
#include "choir/sam_audio.h"
#include "choir/unigram.h"

static const char *const WHY = "not part of the standalone CUDA build";

cJSON *cJSON_GetObjectItemCaseSensitive(const cJSON *object, const char *key) {
    (void)object, (void)key;
    return NULL;
}
cJSON *cJSON_GetArrayItem(const cJSON *array, int index) {
    (void)array, (void)index;
    return NULL;
}
int cJSON_GetArraySize(const cJSON *array) { return (void)array, 0; }
int cJSON_IsString(const cJSON *item) { return (void)item, 0; }
int cJSON_IsNumber(const cJSON *item) { return (void)item, 0; }
int cJSON_IsArray(const cJSON *item) { return (void)item, 0; }
void cJSON_Delete(cJSON *item) { (void)item; }

cJSON *choir_json_parse(const char *text, size_t len, choir_err *err) {
    (void)text, (void)len;
    choir_err_set(err, CHOIR_EUNSUPPORTED, "JSON: %s", WHY);
    return NULL;
}

int choir_unigram_encode(const choir_unigram *t, const char *text, size_t len, int32_t **ids, int *n_ids,
                         choir_err *err) {
    (void)t, (void)text, (void)len;
    *ids = NULL;
    *n_ids = 0;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "the Unigram tokenizer: %s", WHY);
}
int32_t choir_unigram_eos_id(const choir_unigram *t) { return (void)t, -1; }
void choir_unigram_free(choir_unigram *t) { (void)t; }

int choir_resample(const float *in, int64_t in_frames, int channels, int in_rate, int out_rate, float **out,
                   int64_t *out_frames, choir_err *err) {
    (void)in, (void)in_frames, (void)channels, (void)in_rate, (void)out_rate;
    *out = NULL;
    *out_frames = 0;
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "resampling: %s (give 48 kHz input)", WHY);
}

const choir_model_ops *choir_model_detect(const char *dir, const choir_model_ops *const *extra, int n_extra,
                                          choir_err *err) {
    (void)extra, (void)n_extra;
    choir_err_set(err, CHOIR_EUNSUPPORTED, "detecting the model in %s: %s (pass the adapter)", dir, WHY);
    return NULL;
}

choir_sam *choir_sam_load_ex(const char *dir, const choir_sam_load_opts *opts, choir_err *err) {
    (void)opts;
    choir_err_set(err, CHOIR_EUNSUPPORTED, "loading %s: %s (build the model with sam_random.c)", dir, WHY);
    return NULL;
}
/* No model of this build comes from choir_sam_load_ex; those of sam_random.c
 * are freed with sam_random_free. */
void choir_sam_free(choir_sam *m) { (void)m; }
