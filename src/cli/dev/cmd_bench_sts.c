/* `choir bench sts`: MossFormer2_SE_48K enhancement speed and memory on a
 * long recording at the default chunking.
 *
 * The recording (default 10 min at 48 kHz) is generated one second at a time
 * and pushed through the crossfaded chunk stream, and the output is dropped
 * as it is emitted, exactly as `choir sts` does with a file, so the figures
 * include the chunker and the front end. The signal is --audio looped, or a
 * deterministic synthetic voiced signal in noise (the cost does not depend
 * on what the model hears). Reported: real-time factor (compute time / audio
 * time; 0.1 = 10x faster than real time), the counted peak of activations
 * and buffers beyond the weights, and the process's max RSS. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/mossformer2.h"
#include "choir/pool.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static double max_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0 / 1e6; /* KiB on Linux; MB = 1e6 bytes, as the other figures */
}

typedef struct bench_sink {
    int64_t frames;
    double energy;
    double t0, total_s;
    int progress;
} bench_sink;

static int bench_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)offset;
    (void)err;
    bench_sink *s = user;
    for (int64_t i = 0; i < frames; i++) s->energy += (double)out[i] * out[i];
    s->frames += frames;
    if (s->progress) {
        double done = (double)s->frames / CHOIR_MF2_RATE, el = bench_now() - s->t0;
        fprintf(stderr, "\r  %.0f / %.0f s enhanced, RTF so far %.3f", done, s->total_s, done > 0 ? el / done : 0.0);
        fflush(stderr);
    }
    return 0;
}

/* A voiced, slowly varying signal in light noise: 120-220 Hz harmonics with
 * a syllable-rate envelope, deterministic for sample index i. */
static float synth(int64_t i, uint64_t *rng) {
    double t = (double)i / CHOIR_MF2_RATE;
    double f0 = 170.0 + 50.0 * sin(2 * M_PI * 0.3 * t);
    double env = 0.5 + 0.5 * sin(2 * M_PI * 4.0 * t);
    double v = 0;
    for (int h = 1; h <= 8; h++) v += sin(2 * M_PI * f0 * h * t) / h;
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    double noise = ((double)(*rng >> 11) / 9007199254740992.0 - 0.5) * 0.02;
    return (float)(0.15 * env * v + noise);
}

static const char sts_synopsis[] =
    "usage: choir bench sts --model DIR [--seconds S] [--chunk-seconds C] [--overlap-seconds O]\n"
    "                       [--audio FILE] [--threads N] [--quiet]\n"
    "Model weights: `choir dev weights` output or a converted MossFormer2_SE_48K directory.\n\n";

int choir_bench_sts(int argc, char **argv) {
    const char *model = NULL, *audio = NULL;
    double seconds = 600.0;
    int threads = 0, quiet = 0;
    choir_mf2_params p;
    choir_mf2_default_params(&p);
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model, 0, 0, "DIR", "MossFormer2 model directory (required)"},
        {"--seconds", CLI_DOUBLE, &seconds, 0.001, 1e6, "S", "length of the recording (default 600 = 10 min, 48 kHz mono)"},
        {"--chunk-seconds", CLI_DOUBLE, &p.chunk_seconds, -INFINITY, INFINITY, "C",
         "chunk length (the model's default; the model checks it)"},
        {"--overlap-seconds", CLI_DOUBLE, &p.overlap_seconds, -INFINITY, INFINITY, "O", "overlap of chunks (likewise)"},
        {"--audio", CLI_STRING, &audio, 0, 0, "FILE", "loop this recording (mono mix at 48 kHz) instead of a synthetic signal"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--quiet", CLI_FLAG, &quiet, 0, 0, NULL, "no progress line on stderr"},
    };
    const cli_spec spec = {.cmd = "bench sts", .synopsis = sts_synopsis, .opts = flags,
                           .n_opts = (int)(sizeof flags / sizeof flags[0])};
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model) {
        fprintf(stderr, "choir bench sts: --model DIR is required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
    if (threads > 0) choir_pool_set_default_threads(threads);
    choir_err err = {0};
    choir_audio loop = {0};
    if (audio) {
        choir_decode_opts o = {.target_rate = CHOIR_MF2_RATE, .mono = 1};
        if (choir_audio_decode_file(audio, &o, &loop, &err) != 0 || loop.frames < 1) {
            fprintf(stderr, "choir bench sts: %s\n", err.msg[0] ? err.msg : "empty audio");
            return 1;
        }
    }
    double t = bench_now();
    choir_mf2 *m = choir_mf2_load(model, &err);
    if (!m) {
        fprintf(stderr, "choir bench sts: %s\n", err.msg);
        choir_audio_clear(&loop);
        return 1;
    }
    double load_s = bench_now() - t;
    const int64_t total = (int64_t)(seconds * CHOIR_MF2_RATE + 0.5), block = CHOIR_MF2_RATE;
    float *buf = choir_alloc(CHOIR_MEM_IO, (size_t)block * sizeof(float));
    bench_sink sink = {.total_s = seconds, .progress = !quiet};
    int rc = 1;
    choir_mem_reset_peaks();
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    choir_mf2_stream *s = choir_mf2_stream_create(m, 1, &p, bench_emit, &sink, &err);
    if (!s || !buf) goto done;
    printf("sts bench: %.0f s of 48 kHz mono, chunk %.1f s, overlap %.1f s, %d threads\n", seconds,
           p.chunk_seconds, p.overlap_seconds, choir_pool_threads(choir_pool_default()));
    uint64_t rng = 0x5eed;
    double cpu0 = cpu_seconds();
    sink.t0 = t = bench_now();
    for (int64_t at = 0; at < total; at += block) {
        int64_t n = total - at < block ? total - at : block;
        for (int64_t i = 0; i < n; i++)
            buf[i] = loop.frames ? loop.samples[(at + i) % loop.frames] : synth(at + i, &rng);
        if (choir_mf2_stream_push(s, buf, n, &err) != 0) goto done;
    }
    if (choir_mf2_stream_finish(s, &err) != 0) goto done;
    double wall = bench_now() - t, cpu = cpu_seconds() - cpu0;
    if (!quiet) fprintf(stderr, "\n");
    int64_t peak = choir_mem_peak(CHOIR_MEM_COUNT) - base;
    printf("  audio            %.1f s (%lld chunks)\n", (double)sink.frames / CHOIR_MF2_RATE,
           (long long)choir_mf2_stream_chunks(s));
    printf("  wall time        %.2f s (model load %.2f s, not included)\n", wall, load_s);
    printf("  real-time factor %.4f (speed %.2fx real time)\n", wall / seconds, seconds / wall);
    printf("  cpu time         %.2f s (%.2f cores busy)\n", cpu, cpu / wall);
    printf("  weights          %.1f MB\n", (double)choir_mf2_weight_bytes(m) / 1e6);
    printf("  peak memory      %.1f MB counted beyond the weights (estimate %.1f MB); max RSS %.1f MB\n",
           (double)peak / 1e6, (double)choir_mf2_stream_bytes(1, &p) / 1e6, max_rss_mb());
    printf("  output rms       %.4f\n", sqrt(sink.energy / (double)(sink.frames ? sink.frames : 1)));
    rc = 0;
done:
    if (rc) fprintf(stderr, "choir bench sts: %s\n", err.msg);
    choir_mf2_stream_free(s);
    choir_free(buf);
    choir_mf2_free(m);
    choir_audio_clear(&loop);
    return rc;
}
