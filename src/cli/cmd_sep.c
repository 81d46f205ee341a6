/* `choir sep`: text-prompted source separation with SAM-Audio.
 *
 * The input is decoded to mono 48 kHz, then separated with separate_long's
 * plan (chunks, per-chunk seeds, crossfade); each chunk's final target and
 * residual samples are encoded to their files as soon as they exist, so the
 * output files grow while the rest is computed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "choir/pool.h"
#include "choir/sam_audio.h"
#include "cli/cli.h"

static int sep_usage(FILE *f) {
    fprintf(f, "usage: choir sep --model DIR --prompt TEXT IN [-o TARGET] [--residual RESIDUAL] [options]\n\n"
               "Separates what TEXT describes (\"man speaking\", \"a dog barking\") from IN with SAM-Audio.\n"
               "Output is mono 48 kHz.\n\n"
               "  -o TARGET             target file (default: IN's name + _target.wav)\n"
               "  --residual FILE       also write the residual (everything else)\n"
               "  --t5 DIR              the T5 encoder folder (default DIR/t5)\n"
               "  --anchors SPEC        span prompts: \"+:0.5:1.2,-:3:4\" (seconds; + target, - not)\n"
               "  --steps N             ODE steps (default 16)\n"
               "  --method M            midpoint (default) or euler (half the network evaluations)\n"
               "  --chunk-seconds S     chunk length (default 10)\n"
               "  --overlap-seconds O   crossfade between chunks (default 3, at most chunk/2)\n"
               "  --seed N              noise seed (chunk i uses N + i; default 42)\n"
               "  --format F            wav (16-bit, default), wav_f32, flac, mp3, opus, aac, pcm\n"
               "  --threads N           compute threads\n"
               "  --quiet               no progress\n");
    return f == stdout ? 0 : 2;
}

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
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return sep_usage(stdout);
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (a[0] != '-') {
            if (in) return sep_usage(stderr);
            in = a;
            continue;
        }
        if (i + 1 >= argc) return sep_usage(stderr);
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--prompt") || !strcmp(a, "--description")) prompt = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--residual")) res = v;
        else if (!strcmp(a, "--t5")) t5 = v;
        else if (!strcmp(a, "--anchors")) anchors = v;
        else if (!strcmp(a, "--steps")) p.steps = atoi(v);
        else if (!strcmp(a, "--method")) {
            if (!strcmp(v, "euler")) p.method = CHOIR_SAM_EULER;
            else if (!strcmp(v, "midpoint")) p.method = CHOIR_SAM_MIDPOINT;
            else return sep_usage(stderr);
        } else if (!strcmp(a, "--chunk-seconds")) p.chunk_seconds = atof(v);
        else if (!strcmp(a, "--overlap-seconds")) p.overlap_seconds = atof(v);
        else if (!strcmp(a, "--seed")) p.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--format")) fmt = v;
        else if (!strcmp(a, "--threads")) choir_pool_set_default_threads(atoi(v));
        else return sep_usage(stderr);
    }
    if (!model || !prompt || !in) return sep_usage(stderr);
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
