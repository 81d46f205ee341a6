/* Adapter detection from a model directory's config.json, and the list of
 * built-in adapters. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "choir/json.h"
#include "choir/model.h"

int choir_model_builtin(const choir_model_ops **out, int cap)
{
    const choir_model_ops *all[] = {&choir_model_whisper, &choir_model_kokoro, &choir_model_silero_vad,
                                    &choir_model_mossformer2, &choir_model_vibevoice, &choir_model_sam_audio,
                                    &choir_model_fake};
    int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n && out && i < cap; i++)
        out[i] = all[i];
    return n;
}

int choir_model_kind_input_rate(const char *kind)
{
    const choir_model_ops *all[8];
    int n = choir_model_builtin(all, 8);
    for (int i = 0; kind && i < n && i < 8; i++)
        if (strcmp(all[i]->kind, kind) == 0 && all[i]->input_rate > 0)
            return all[i]->input_rate;
    return 16000;
}

static cJSON *read_config(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return choir_json_load(path, NULL);
}

const choir_model_ops *choir_model_detect(const char *dir, const choir_model_ops *const *extra,
                                          int n_extra, choir_err *err)
{
    struct stat st;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        choir_err_set(err, CHOIR_ENOTFOUND, "model directory '%s' does not exist", dir ? dir : "(null)");
        return NULL;
    }
    const choir_model_ops *builtin[8];
    int n_builtin = choir_model_builtin(builtin, 8);
    cJSON *config = read_config(dir);
    const choir_model_ops *best = NULL;
    int best_score = 0;
    for (int i = 0; i < n_extra + n_builtin; i++) {
        const choir_model_ops *ops = i < n_extra ? extra[i] : builtin[i - n_extra];
        if (!ops || !ops->probe)
            continue;
        int score = ops->probe(dir, config);
        if (score > best_score) {
            best_score = score;
            best = ops;
        }
    }
    cJSON_Delete(config);
    if (!best)
        choir_err_set(err, CHOIR_ENOTFOUND, "no model adapter recognises '%s' (%d adapters tried)", dir,
                      n_extra + n_builtin);
    return best;
}
