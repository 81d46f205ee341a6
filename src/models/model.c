/* Model registry helpers: task names, output delivery, adapter detection. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/model.h"
#include "choir/pool.h"

const char *choir_task_name(choir_task task)
{
    switch (task) {
    case CHOIR_TASK_TTS: return "tts";
    case CHOIR_TASK_STT: return "stt";
    case CHOIR_TASK_VAD: return "vad";
    case CHOIR_TASK_STS: return "sts";
    default: return "unknown";
    }
}

int choir_request_cancelled(const choir_request *req)
{
    return req ? __atomic_load_n(&req->cancelled, __ATOMIC_ACQUIRE) : 1;
}

int choir_request_emit(choir_request *req, const choir_output *out)
{
    if (!req || !out || req->done)
        return CHOIR_ECANCELED;
    if (choir_request_cancelled(req) && !out->final)
        return CHOIR_ECANCELED;
    if (!req->first_output_ns)
        req->first_output_ns = choir_now_ns();
    if (out->final)
        req->done = 1;
    if (req->on_output) {
        int stop = req->on_output(req->on_output_user, out);
        if (stop && !out->final)
            __atomic_store_n(&req->cancelled, 1, __ATOMIC_RELEASE);
    }
    return choir_request_cancelled(req) ? CHOIR_ECANCELED : CHOIR_OK;
}

void choir_sts_chunking(const choir_sts_input *in, double default_chunk_s, double default_overlap_s,
                        double *chunk_s, double *overlap_s)
{
    *chunk_s = in->has_chunk || in->chunk_seconds != 0 ? in->chunk_seconds : default_chunk_s;
    *overlap_s = in->has_overlap || in->overlap_seconds != 0 ? in->overlap_seconds : default_overlap_s;
}

int choir_request_fail(choir_request *req, int code, const char *fmt, ...)
{
    if (!req)
        return code;
    if (req->status == 0) {
        req->status = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(req->error, sizeof req->error, fmt, ap);
        va_end(ap);
    }
    return code;
}

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

int64_t choir_model_dir_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return CHOIR_ENOTFOUND;
    int64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 12 || strcmp(de->d_name + len - 12, ".safetensors") != 0)
            continue;
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &st) == 0)
            total += (int64_t)st.st_size;
    }
    closedir(d);
    return total;
}

int choir_batch_join_take(choir_batch_join *j, int live, choir_request **reqs, choir_arena **arenas)
{
    return j && j->take ? j->take(j, live, reqs, arenas) : 0;
}

void choir_batch_join_leave(choir_batch_join *j, choir_request *req, int overflow)
{
    if (j && j->leave)
        j->leave(j, req, overflow);
}
