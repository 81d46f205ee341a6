/* A fake model for tests and benchmarks of the engine: declared memory costs
 * and latencies, deterministic outputs that depend only on each request's own
 * input (so batched results must equal sequential ones), streaming in pieces.
 *
 * It is a real adapter: a directory with config.json {"model_type":
 * "choir-fake", ...} and a model.safetensors file (any bytes; its size is the
 * weights figure) loads through choir_engine_add_model. A config with
 * "fail_load": 1 is claimed by the probe and fails every load (config only:
 * tests of a model that cannot load, fixed by rewriting the file). */
#ifndef CHOIR_MODELS_FAKE_MODEL_H
#define CHOIR_MODELS_FAKE_MODEL_H

#include <stdint.h>

#include "choir/model.h"

typedef struct choir_fake_params {
    uint32_t tasks;         /* CHOIR_TASK_BIT()s; 0 = TTS and STT */
    double fixed_ms;        /* per-batch latency */
    double per_unit_us;     /* per padded length unit (n * longest) */
    int64_t bytes_per_unit; /* declared activation estimate per length unit */
    double true_ratio;      /* real arena use / declared estimate (0 = 1) */
    int64_t weights_bytes;  /* size of the model.safetensors file written */
    double load_ms;         /* load latency */
    int pieces;             /* streamed pieces per request (0 = 4) */
    int segments;           /* 1: with timestamps, STT outputs carry one segment per piece (with
                               word timestamps, two words each: " piece", " N")
                               (config "segments"; not written by choir_fake_model_write) */
    int fail_on_length;     /* a request of exactly this length fails (0 = never) */
    /* on a GPU (choir_model_fake_gpu loaded with options.device >= 1) */
    int64_t device_weights_bytes;  /* device bytes its weights take (0 = weights_bytes) */
    int64_t device_bytes_per_unit; /* device estimate per length unit (0 = bytes_per_unit) */
} choir_fake_params;

/* choir_model_fake itself is declared in choir/model.h (a built-in adapter). */
/* The same model declaring ops->gpu = 1: it loads "on" any device number the
 * engine gives (real or simulated GPU; it computes on the CPU either way),
 * reports device_bytes / estimate_device from its config there, and runs one
 * batch at a time per GPU replica, as GPU weights do. */
extern const choir_model_ops choir_model_fake_gpu;

/* Writes a fake model directory at `dir` (created if missing). */
int choir_fake_model_write(const char *dir, const choir_fake_params *p, choir_err *err);

/* The sample a fake TTS emits at index i for `text` (tests compare with it). */
float choir_fake_tts_sample(const char *text, int64_t i);
/* Samples per character of fake TTS output, at 24 kHz. */
#define CHOIR_FAKE_TTS_SAMPLES_PER_CHAR 240

#endif
