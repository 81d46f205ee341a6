/* `choir sep`: text-prompted source separation with SAM-Audio.
 *
 * The input is decoded to mono 48 kHz, then separated with separate_long's
 * plan (chunks, per-chunk seeds, crossfade); each chunk's final target and
 * residual samples are encoded to their files as soon as they exist, so the
 * output files grow while the rest is computed. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "choir/pool.h"
#include "choir/sam_audio.h"
#include "cli/cli.h"
#include "cli/opt.h"

typedef struct sep_run {
    choir_encoder *t, *r;
    int quiet;
    int64_t total;
    double t0;
} sep_run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int sep_emit(void *user, const float *t, const float *r, int64_t n, int64_t offset, choir_err *err) {
    sep_run *s = user;
    int rc = choir_encoder_write(s->t, t, n, err);
    if (!rc && s->r) rc = choir_encoder_write(s->r, r, n, err);
    if (!s->quiet)
        fprintf(stderr, "\rsep: %.1f / %.1f s of audio out after %.1f s", (double)(offset + n) / CHOIR_SAM_RATE,
                (double)s->total / CHOIR_SAM_RATE, now_s() - s->t0);
    return rc;
}

int choir_cmd_sep(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *in = NULL, *out = NULL, *res = NULL, *t5 = NULL, *anchors = NULL;
    const char *fmt = "wav";
    choir_sam_params p;
    choir_sam_default_params(&p);
    int quiet = 0, threads = 0, n_in = 0;
    const char *method = NULL;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model, 0, 0, "DIR", "SAM-Audio model folder (required)"},
        {"--prompt", CLI_STRING, &prompt, 0, 0, "TEXT", "what to separate (required)"},
        {"--description", CLI_STRING, &prompt, 0, 0, "TEXT", "the same as --prompt"},
        {"-o", CLI_STRING, &out, 0, 0, "TARGET", "target file (default: IN's name + _target.wav)"},
        {"--output", CLI_STRING, &out, 0, 0, "TARGET", "the same as -o"},
        {"--residual", CLI_STRING, &res, 0, 0, "FILE", "also write the residual (everything else)"},
        {"--t5", CLI_STRING, &t5, 0, 0, "DIR", "the T5 encoder folder (default DIR/t5)"},
        {"--anchors", CLI_STRING, &anchors, 0, 0, "SPEC",
         "span prompts: \"+:0.5:1.2,-:3:4\" (seconds; + target, - not)"},
        {"--steps", CLI_INT, &p.steps, 1, 1024, "N", "ODE steps (default 16)"},
        {"--method", CLI_STRING, &method, 0, 0, "M", "midpoint (default) or euler (half the network evaluations)"},
        /* bounded by the model (choir_sam_check_params below), as for a request */
        {"--chunk-seconds", CLI_DOUBLE, &p.chunk_seconds, -INFINITY, INFINITY, "S",
         "chunk length (default 10; 0.2..400)"},
        {"--overlap-seconds", CLI_DOUBLE, &p.overlap_seconds, -INFINITY, INFINITY, "O",
         "crossfade between chunks (default 3, at most chunk/2)"},
        {"--seed", CLI_U64, &p.seed, 0, 0, "N", "noise seed (chunk i uses N + i; default 42)"},
        {"--format", CLI_STRING, &fmt, 0, 0, "F", "wav (16-bit, default), wav_f32, flac, mp3, opus, aac, pcm"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--quiet", CLI_FLAG, &quiet, 0, 0, NULL, "no progress"},
    };
    const cli_spec spec = {
        .cmd = "sep",
        .synopsis = "usage: choir sep --model DIR --prompt TEXT IN [-o TARGET] [--residual RESIDUAL] [options]\n\n"
                    "Separates what TEXT describes (\"man speaking\", \"a dog barking\") from IN with SAM-Audio.\n"
                    "Output is mono 48 kHz.\n\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = &in,
        .max_positional = 1,
        .n_positional = &n_in,
        .positional_what = "input file",
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (method && !strcmp(method, "euler")) p.method = CHOIR_SAM_EULER;
    else if (method && strcmp(method, "midpoint")) {
        fprintf(stderr, "choir sep: --method is midpoint or euler, got '%s'\n", method);
        return 2;
    }
    if (!model || !prompt || !in) {
        fprintf(stderr, "choir sep: %s is required\n", !model ? "--model DIR" : !prompt ? "--prompt TEXT" : "an input file");
        cli_usage(&spec, stderr);
        return 2;
    }
    if (threads) choir_pool_set_default_threads(threads);
    choir_err err = {0};
    choir_audio_format format;
    choir_sam_anchor an[CHOIR_SAM_MAX_ANCHORS];
    int n_an = 0;
    if (choir_audio_format_parse(fmt, &format, &err) != 0 || choir_sam_check_params(&p, &err) != 0 ||
        choir_sam_parse_anchors(anchors, an, CHOIR_SAM_MAX_ANCHORS, &n_an, &err) != 0) {
        fprintf(stderr, "choir sep: %s\n", err.msg);
        return 2;
    }
    char def_out[4096];
    if (!out) {
        const char *dot = strrchr(in, '.');
        int len = dot ? (int)(dot - in) : (int)strlen(in);
        snprintf(def_out, sizeof def_out, "%.*s_target.%s", len, in, format == CHOIR_FORMAT_WAVF32 ? "wav" : fmt);
        out = def_out;
    }
    choir_decode_opts dopt = {.target_rate = CHOIR_SAM_RATE, .mono = 1};
    choir_audio audio = {0};
    if (choir_audio_decode_file(in, &dopt, &audio, &err) != 0) {
        fprintf(stderr, "choir sep: %s: %s\n", in, err.msg);
        return 1;
    }
    int rc = 1;
    sep_run s = {.quiet = quiet, .total = audio.frames, .t0 = now_s()};
    choir_sam_job *job = NULL;
    choir_sam *m = choir_sam_load(model, t5, &err);
    if (!m) goto done;
    s.t = choir_encoder_create_file(format, CHOIR_SAM_RATE, 1, out, &err);
    if (!s.t || (res && !(s.r = choir_encoder_create_file(format, CHOIR_SAM_RATE, 1, res, &err)))) goto done;
    job = choir_sam_job_create(m, audio.samples, audio.frames, prompt, an, n_an, &p, sep_emit, &s, &err);
    if (!job) goto done;
    while (!choir_sam_job_done(job))
        if (choir_sam_run_round(m, &job, 1, &err) != 0) goto done;
    if (choir_encoder_finish(s.t, &err) != 0 || (s.r && choir_encoder_finish(s.r, &err) != 0)) goto done;
    if (!quiet) {
        double secs = now_s() - s.t0, dur = (double)audio.frames / CHOIR_SAM_RATE;
        fprintf(stderr, "\nsep: %.1f s of audio in %.1f s (RTF %.3f), %d chunk(s) -> %s%s%s\n", dur, secs, secs / dur,
                choir_sam_job_chunks(job), out, res ? " + " : "", res ? res : "");
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "%schoir sep: %s\n", quiet ? "" : "\n", err.msg);
    choir_sam_job_free(job);
    choir_encoder_free(s.t);
    choir_encoder_free(s.r);
    choir_sam_free(m);
    choir_audio_clear(&audio);
    return rc;
}
