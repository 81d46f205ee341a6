/* Running one queued job on the engine and writing its result durably. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/buf.h"
#include "choir/encode.h"
#include "choir/jobqueue.h"
#include "choir/json.h"
#include "choir/transcript.h"

/* Largest text file a tts job reads: far beyond any sensible job, small
 * enough that a wrong path (a disk image) fails fast. */
#define TTS_TEXT_MAX (4 << 20)

int choir_jobqueue_write_file(const char *path, const void *data, size_t len, choir_err *err) {
    size_t n = strlen(path);
    char *tmp = choir_alloc(CHOIR_MEM_IO, n + 32);
    char *dir = choir_alloc(CHOIR_MEM_IO, n + 1);
    int fd = -1, rc = CHOIR_EIO;
    if (!tmp || !dir) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto done;
    }
    /* The temporary name is unique per process so that two workers running
     * the same job never write into each other's file. */
    snprintf(tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        choir_err_set(err, CHOIR_EIO, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            choir_err_set(err, CHOIR_EIO, "cannot write %s: %s", tmp, strerror(errno));
            goto done;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        choir_err_set(err, CHOIR_EIO, "cannot sync %s: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        choir_err_set(err, CHOIR_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto done;
    }
    /* The rename itself is durable only once the directory is synced. */
    memcpy(dir, path, n + 1);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    rc = 0;
done:
    if (fd >= 0) close(fd);
    if (rc != 0 && tmp) unlink(tmp);
    choir_free(tmp);
    choir_free(dir);
    return rc;
}

/* What the engine delivered for one job, gathered across its outputs. */
typedef struct job_result {
    cJSON *segments; /* array of {start, end} (VAD) */
    float *samples; /* choir_alloc'd, grows */
    int64_t n_samples, cap_samples;
    int sample_rate;
    int oom;
    /* stt: the final output written in `stt_format` (choir/transcript.h) */
    int stt;
    choir_transcript_format stt_format;
    double duration_s;
    char *formatted;
    size_t formatted_len;
} job_result;

static int collect_output(void *user, const choir_output *out) {
    job_result *r = user;
    if (r->stt && out->final && out->status == 0) {
        /* the output's pointers live only during this call: format now */
        choir_transcript t = {.text = out->text, .language = out->language, .duration_s = r->duration_s,
                              .segments = out->segments, .n_segments = out->n_segments};
        choir_transcript_opts o = {.pretty = 0};
        choir_free(r->formatted);
        r->formatted = choir_transcript_write(&t, r->stt_format, &o, &r->formatted_len, NULL);
        if (!r->formatted) {
            r->oom = 1;
            return 1;
        }
    }
    if (r->stt)
        return 0; /* the final output's transcript is the whole result */
    for (int i = 0; i < out->n_segments; i++) {
        cJSON *s = cJSON_CreateObject();
        if (!s) {
            r->oom = 1;
            return 1;
        }
        cJSON_AddNumberToObject(s, "start", out->segments[i].start_s);
        cJSON_AddNumberToObject(s, "end", out->segments[i].end_s);
        cJSON_AddItemToArray(r->segments, s);
    }
    if (out->n_samples > 0) {
        if (r->n_samples + out->n_samples > r->cap_samples) {
            int64_t cap = (r->n_samples + out->n_samples) * 2;
            float *s = choir_realloc(r->samples, (size_t)cap * sizeof *s);
            if (!s) {
                r->oom = 1;
                return 1;
            }
            r->samples = s;
            r->cap_samples = cap;
        }
        memcpy(r->samples + r->n_samples, out->samples, (size_t)out->n_samples * sizeof *out->samples);
        r->n_samples += out->n_samples;
        r->sample_rate = out->sample_rate;
    }
    return 0;
}

static int read_text(const char *path, char **out, choir_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return choir_err_set(err, CHOIR_ENOTFOUND, "cannot open %s: %s", path, strerror(errno));
    choir_buf text = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    int rc = choir_buf_read(&text, f, TTS_TEXT_MAX);
    fclose(f);
    if (rc == 0 && !(*out = choir_buf_take(&text, NULL)))
        rc = CHOIR_ENOMEM;
    choir_buf_free(&text);
    if (rc < 0)
        return choir_err_set(err, rc, "%s: %s", path,
                             rc == CHOIR_EIO ? "read error" : rc == CHOIR_ETOOBIG ? "text over 4 MiB" : "out of memory");
    return 0;
}

/* The output's extension names the audio format ("out.flac" -> flac). */
static int format_of(const char *path, choir_audio_format *fmt, choir_err *err) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return choir_err_set(err, CHOIR_EINVAL, "%s: no extension to name the audio format", path);
    return choir_audio_format_parse(dot + 1, fmt, err);
}

static int write_json_result(const choir_jobspec *spec, job_result *r, choir_err *err) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    cJSON_AddStringToObject(root, "task", spec->task);
    cJSON_AddStringToObject(root, "input", spec->input);
    cJSON_AddItemToObject(root, "segments", r->segments);
    r->segments = NULL;
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    size_t n = strlen(json);
    json[n] = '\n'; /* replaces the NUL: the file ends with a newline */
    int rc = choir_jobqueue_write_file(spec->output, json, n + 1, err);
    cJSON_free(json);
    return rc;
}

int choir_jobqueue_execute(choir_engine *engine, const choir_jobspec *spec, const choir_jobqueue_heartbeat *heartbeat,
                           choir_err *err) {
    cJSON *opt = NULL;
    choir_audio audio = {0};
    char *text = NULL;
    void *encoded = NULL;
    size_t encoded_len = 0;
    choir_ticket *ticket = NULL;
    job_result res = {0};
    choir_job job = {0};
    int rc = 0;
    choir_audio_format fmt = CHOIR_FORMAT_WAV16;

    if (spec->options[0] && !(opt = choir_json_parse(spec->options, strlen(spec->options), err))) {
        rc = err->code;
        goto done;
    }
    if (!(res.segments = cJSON_CreateArray())) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto done;
    }
    job.model_id = spec->model[0] ? spec->model : NULL;
    /* Batch jobs yield to interactive traffic when the engine is under pressure. */
    job.priority = CHOIR_PRIORITY_LOW;
    job.on_output = collect_output;
    job.user = &res;
    if (strcmp(spec->task, "tts") == 0) {
        if ((rc = format_of(spec->output, &fmt, err))) goto done;
        if ((rc = read_text(spec->input, &text, err))) goto done;
        job.req.task = CHOIR_TASK_TTS;
        job.req.in.tts.text = text;
        job.req.in.tts.voice = choir_json_str(opt, "voice", NULL);
        job.req.in.tts.language = choir_json_str(opt, "language", NULL);
        job.req.in.tts.speed = (float)choir_json_num(opt, "speed", 1.0);
    } else {
        int is_sts = strcmp(spec->task, "sts") == 0;
        if (is_sts && (rc = format_of(spec->output, &fmt, err))) goto done;
        choir_decode_opts dopts = {.target_rate = is_sts ? 0 : CHOIR_RATE_STT, .mono = 1, .max_frames = 0};
        if ((rc = choir_audio_decode_file(spec->input, &dopts, &audio, err))) goto done;
        if (strcmp(spec->task, "vad") == 0) {
            job.req.task = CHOIR_TASK_VAD;
            job.req.in.vad.samples = audio.samples;
            job.req.in.vad.n_samples = audio.frames;
            job.req.in.vad.threshold = (float)choir_json_num(opt, "threshold", 0);
            job.req.in.vad.min_speech_ms = (int)choir_json_int(opt, "min_speech_ms", 0);
            job.req.in.vad.min_silence_ms = (int)choir_json_int(opt, "min_silence_ms", 0);
        } else if (strcmp(spec->task, "stt") == 0) {
            /* The transcript is written as the server answers it: in the
             * format the option names, else the one the output's extension
             * names (.srt, .vtt, .txt), else verbose_json. */
            const char *named = choir_json_str(opt, "response_format", NULL);
            const char *dot = strrchr(spec->output, '.');
            res.stt = 1;
            res.stt_format = CHOIR_TRANSCRIPT_VERBOSE_JSON;
            res.duration_s = (double)audio.frames / CHOIR_RATE_STT;
            if (named && choir_transcript_format_parse(named, &res.stt_format) < 0) {
                rc = choir_err_set(err, CHOIR_EINVAL, "unknown response_format '%s'", named);
                goto done;
            }
            if (!named && dot && (strcmp(dot, ".srt") == 0 || strcmp(dot, ".vtt") == 0 || strcmp(dot, ".txt") == 0))
                choir_transcript_format_parse(dot + 1, &res.stt_format);
            job.req.task = CHOIR_TASK_STT;
            job.req.in.stt.samples = audio.samples;
            job.req.in.stt.n_samples = audio.frames;
            job.req.in.stt.language = choir_json_str(opt, "language", NULL);
            job.req.in.stt.timestamps = choir_json_bool(opt, "timestamps", 1);
            /* A given temperature is the only one decoded (0 included: no
             * fallback); max_tokens is the model's to bound. */
            job.req.in.stt.max_tokens = (int)choir_json_int(opt, "max_tokens", 0);
            if (cJSON_GetObjectItemCaseSensitive(opt, "temperature")) {
                job.req.in.stt.temperature = (float)choir_json_num(opt, "temperature", 0);
                job.req.in.stt.fixed_temperature = 1;
            }
        } else if (is_sts) {
            job.req.task = CHOIR_TASK_STS;
            job.req.in.sts.samples = audio.samples;
            job.req.in.sts.n_samples = audio.frames;
            job.req.in.sts.sample_rate = audio.rate;
        } else {
            rc = choir_err_set(err, CHOIR_EINVAL, "unknown task '%s'", spec->task);
            goto done;
        }
    }

    ticket = choir_engine_submit(engine, &job, NULL, err);
    if (!ticket) {
        rc = err->code;
        goto done;
    }
    double beat_s = heartbeat && heartbeat->fn && heartbeat->interval_s > 0 ? heartbeat->interval_s : -1;
    /* A request can itself fail with CHOIR_ETIMEDOUT: `running` tells a
     * timed-out wait from that. */
    int running;
    while ((rc = choir_ticket_poll(ticket, beat_s, &running, err)), running)
        heartbeat->fn(heartbeat->user);
    if (rc) goto done;
    if (res.oom) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory gathering the result");
        goto done;
    }
    if (job.req.task == CHOIR_TASK_STT) {
        if (!res.formatted) {
            rc = choir_err_set(err, CHOIR_EINTERNAL, "the model produced no transcript");
            goto done;
        }
        if (res.stt_format == CHOIR_TRANSCRIPT_VERBOSE_JSON || res.stt_format == CHOIR_TRANSCRIPT_JSON) {
            /* JSON results also name their input, as every job result does */
            cJSON *root = cJSON_ParseWithLength(res.formatted, res.formatted_len);
            char *json = root && cJSON_AddStringToObject(root, "input", spec->input) ? cJSON_PrintUnformatted(root)
                                                                                   : NULL;
            cJSON_Delete(root);
            if (!json) {
                rc = choir_err_set(err, CHOIR_ENOMEM, "out of memory");
                goto done;
            }
            size_t n = strlen(json);
            json[n] = '\n'; /* replaces the NUL: the file ends with a newline */
            rc = choir_jobqueue_write_file(spec->output, json, n + 1, err);
            cJSON_free(json);
        } else {
            rc = choir_jobqueue_write_file(spec->output, res.formatted, res.formatted_len, err);
        }
    } else if (job.req.task == CHOIR_TASK_VAD) {
        rc = write_json_result(spec, &res, err);
    } else {
        if (res.n_samples == 0 || res.sample_rate <= 0) {
            rc = choir_err_set(err, CHOIR_EINTERNAL, "the model produced no audio");
            goto done;
        }
        if ((rc = choir_audio_encode_memory(fmt, res.samples, res.n_samples, res.sample_rate, 1, &encoded,
                                            &encoded_len, err)))
            goto done;
        rc = choir_jobqueue_write_file(spec->output, encoded, encoded_len, err);
    }
done:
    choir_ticket_free(ticket);
    choir_free(encoded);
    choir_free(text);
    choir_free(res.samples);
    choir_free(res.formatted);
    cJSON_Delete(res.segments);
    cJSON_Delete(opt);
    choir_audio_clear(&audio);
    return rc;
}
