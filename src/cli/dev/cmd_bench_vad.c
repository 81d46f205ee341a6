/* `choir bench vad`: Silero VAD throughput at batch 1 and batch 16 streams.
 *
 * Each stream is fed 512-sample chunks of one signal, looped and out of phase
 * between streams: a recording given with --audio, or else 10 s of a
 * deterministic synthetic signal (the model's cost does not depend on what
 * it hears). Reported per batch size: stream
 * chunks per second, the latency of one process call, and the real-time
 * factor (compute time / audio time, so 0.01 means 100x faster than real time). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/silero.h"
#include "choir/parse.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

#define MAX_BATCH 256

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static int run_batch(const choir_silero *m, const float *audio, int64_t n_chunks, int batch, double seconds) {
    choir_err err = {0};
    choir_silero_state *states[MAX_BATCH] = {0};
    const float *chunks[MAX_BATCH];
    float probs[MAX_BATCH];
    int rc = 1;
    void *scratch = choir_alloc(CHOIR_MEM_ACTIVATIONS, choir_silero_scratch_bytes(batch));
    if (!scratch) goto done;
    for (int b = 0; b < batch; b++)
        if (!(states[b] = choir_silero_state_create(&err))) goto done;
    /* Warm up caches and the BLAS library's first-call setup. */
    int64_t steps = 0;
    double t0 = 0, cpu0 = 0, elapsed = 0;
    for (int64_t i = -20;; i++) {
        if (i == 0) {
            t0 = now_s();
            cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        }
        for (int b = 0; b < batch; b++)
            chunks[b] = audio + ((i + 20 + 7 * b) % n_chunks) * CHOIR_SILERO_CHUNK; /* streams out of phase */
        if (choir_silero_process(m, states, chunks, batch, probs, scratch, &err)) goto done;
        if (i >= 0) {
            steps++;
            if ((steps & 15) == 0 && (elapsed = now_s() - t0) >= seconds) break;
        }
    }
    double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    double stream_chunks = (double)steps * batch;
    double audio_s = stream_chunks * CHOIR_SILERO_CHUNK / CHOIR_SILERO_RATE;
    /* CPU time is reported beside wall time: on a shared machine it is the
     * steadier figure (all threads' CPU time, so it also shows threading cost). */
    printf("batch %3d: %9.0f chunks/s  %8.1f us/call  RTF %.5f  (%.0fx real time)  cpu %.1f us/chunk\n",
           batch, stream_chunks / elapsed, 1e6 * elapsed / (double)steps, elapsed / audio_s, audio_s / elapsed,
           1e6 * cpu / stream_chunks);
    rc = 0;
done:
    if (rc) fprintf(stderr, "choir bench vad: %s\n", err.msg[0] ? err.msg : "out of memory");
    for (int b = 0; b < batch; b++) choir_silero_state_free(states[b]);
    choir_free(scratch);
    return rc;
}

int choir_bench_vad(int argc, char **argv) {
    const char *model_arg = NULL, *audio_path = NULL;
    double seconds = 2.0;
    int batches[8] = {1, 16}, n_batches = 2;
    const char *batch_items[8];
    cli_list batch_lists = {batch_items, 8, 0};
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_arg, 0, 0, "PATH", "Silero VAD model (default: $CHOIR_MODELS/silero-vad)"},
        {"--audio", CLI_STRING, &audio_path, 0, 0, "FILE", "audio looped (default: 10 s synthetic)"},
        {"--seconds", CLI_DOUBLE, &seconds, 0.001, 3600, "S", "time per batch size (default 2)"},
        {"--batch", CLI_LIST, &batch_lists, 0, 0, "N[,N...]", "batch sizes 1..256, at most 8 in all (repeatable; default 1,16)"},
    };
    const cli_spec spec = {.cmd = "bench vad",
                           .synopsis = "usage: choir bench vad [--model PATH] [--audio FILE] [--seconds S] [--batch N]...\n"
                                       "  Silero VAD chunks per second and real-time factor at batch 1 and 16\n"
                                       "  (or the given --batch sizes).\n\n",
                           .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (batch_lists.n) {
        /* each --batch a list, the lists one after another */
        n_batches = 0;
        for (int i = 0; i < batch_lists.n; i++) {
            int got = cli_parse_ints(batch_lists.items[i], 1, MAX_BATCH, batches + n_batches, 8 - n_batches);
            if (got < 0) {
                fprintf(stderr, "choir bench vad: --batch must be 1..%d (at most 8 of them)\n", MAX_BATCH);
                return 2;
            }
            n_batches += got;
        }
    }

    choir_err err = {0};
    char model_path[4096];
    choir_silero *m = NULL;
    choir_audio audio = {0};
    int rc = 1;
    if (choir_silero_find(model_arg, model_path, sizeof model_path, &err)) goto fail;
    if (!(m = choir_silero_load(model_path, &err))) goto fail;
    if (audio_path) {
        choir_decode_opts opts = {.target_rate = CHOIR_SILERO_RATE, .mono = 1, .max_frames = 0};
        if (choir_audio_decode_file(audio_path, &opts, &audio, &err)) goto fail;
    } else {
        audio_path = "synthetic";
        audio.frames = 10 * CHOIR_SILERO_RATE;
        audio.channels = 1;
        audio.rate = CHOIR_SILERO_RATE;
        audio.samples = choir_alloc(CHOIR_MEM_IO, (size_t)audio.frames * sizeof(float));
        if (!audio.samples) {
            choir_err_set(&err, CHOIR_ENOMEM, "out of memory");
            goto fail;
        }
        uint32_t s = 1;
        for (int64_t i = 0; i < audio.frames; i++) {
            s = s * 1664525u + 1013904223u;
            float noise = (float)(s >> 8) / 16777216.0f - 0.5f;
            audio.samples[i] = 0.2f * sinf(0.07f * (float)i) * sinf(0.0003f * (float)i) + 0.05f * noise;
        }
    }
    int64_t n_chunks = audio.frames / CHOIR_SILERO_CHUNK;
    if (n_chunks < 1) {
        choir_err_set(&err, CHOIR_EINVAL, "%s is shorter than one chunk", audio_path);
        goto fail;
    }
    printf("Silero VAD v6.2 (%s), %s audio of %.1f s looped, %.1f s per batch size\n", model_path, audio_path,
           (double)audio.frames / CHOIR_SILERO_RATE, seconds);
    for (int i = 0; i < n_batches; i++)
        if (run_batch(m, audio.samples, n_chunks, batches[i], seconds)) goto done;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "choir bench vad: %s\n", err.msg);
done:
    choir_audio_clear(&audio);
    choir_silero_free(m);
    return rc;
}
