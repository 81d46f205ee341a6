/* The model interface's own code: task names, output delivery and failure,
 * chunking defaults, a directory's weight bytes. (Detection and the built-in
 * list, which need the JSON parser and every adapter, are in
 * model_detect.c, so an engine can be linked with one adapter alone: the
 * standalone CUDA build's SAM-Audio check.) */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
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

void choir_batch_join_member_done(choir_batch_join *j, choir_request *req)
{
    if (j && j->member_done)
        j->member_done(j, req);
}
