/* `choir sts`: speech enhancement of recordings of any length with
 * MossFormer2_SE_48K.
 *
 * The file is read block by block (libsndfile), resampled to 48 kHz when it
 * is not, pushed through the crossfaded chunk stream and each final region is
 * resampled back and encoded as soon as it is handed out: memory is bounded
 * by the chunk, not by the recording. --reference runs ClearerVoice's own
 * window plan on the whole file instead (needs the whole file in memory). */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/encode.h"
#include "choir/mossformer2.h"
#include "choir/pool.h"
#include "cli/cli.h"
#include "cli/opt.h"

typedef struct sts_run {
    choir_encoder *enc;
    choir_resampler *back;   /* 48 kHz -> file rate, or NULL */
    float *back_buf;
    int64_t back_cap;
    int channels;
    int64_t total_frames;    /* at 48 kHz, estimated from the file */
    int64_t done_frames;
    int quiet;
    double t0;
} sts_run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sts_progress(sts_run *r) {
    if (r->quiet) return;
    const int width = 30;
    double total = (double)r->total_frames / CHOIR_MF2_RATE, done = (double)r->done_frames / CHOIR_MF2_RATE;
    int fill = total > 0 ? (int)(width * done / total) : width;
    if (fill > width) fill = width;
    double el = now_s() - r->t0;
    fprintf(stderr, "\rsts [");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : ' ', stderr);
    fprintf(stderr, "] %7.1f / %.1f s  %.2fx real time", done, total, el > 0 ? done / el : 0.0);
    fflush(stderr);
}

static int sts_write(sts_run *r, const float *x, int64_t frames, choir_err *err) {
    if (!r->back) return choir_encoder_write(r->enc, x, frames, err);
    int64_t need = choir_resampler_max_out(r->back, frames);
    if (need > r->back_cap) {
        float *grown = choir_realloc(r->back_buf, (size_t)(need * r->channels) * sizeof(float));
        if (!grown) return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
        r->back_buf = grown;
        r->back_cap = need;
    }
    int64_t got = 0;
    int rc = choir_resampler_process(r->back, x, frames, r->back_buf, r->back_cap, &got, err);
    if (rc == 0 && got > 0) rc = choir_encoder_write(r->enc, r->back_buf, got, err);
    return rc;
}

static int sts_emit(void *user, const float *out, int64_t frames, int64_t offset, choir_err *err) {
    (void)offset;
    sts_run *r = user;
    int rc = sts_write(r, out, frames, err);
    r->done_frames += frames;
    sts_progress(r);
    return rc;
}

static int sts_finish_back(sts_run *r, choir_err *err) {
    if (!r->back) return 0;
    int64_t need = choir_resampler_max_out(r->back, 0);
    if (need > r->back_cap) {
        float *grown = choir_realloc(r->back_buf, (size_t)(need * r->channels) * sizeof(float));
        if (!grown) return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
        r->back_buf = grown;
        r->back_cap = need;
    }
    for (;;) {
        int64_t got = 0;
        int rc = choir_resampler_flush(r->back, r->back_buf, r->back_cap, &got, err);
        if (rc) return rc;
        if (got == 0) return 0;
        if ((rc = choir_encoder_write(r->enc, r->back_buf, got, err))) return rc;
    }
}

static int stdout_write(const void *data, size_t len, void *user) {
    (void)user;
    if (fwrite(data, 1, len, stdout) != len) return 1;
    return fflush(stdout) != 0;
}

static choir_audio_format format_from_name(const char *path, const char *fmt) {
    choir_audio_format f = CHOIR_FORMAT_WAV16;
    if (fmt) {
        if (choir_audio_format_parse(fmt, &f, NULL) == 0) return f;
        return (choir_audio_format)-1;
    }
    const char *dot = path ? strrchr(path, '.') : NULL;
    if (dot && choir_audio_format_parse(dot + 1, &f, NULL) == 0) return f;
    return CHOIR_FORMAT_WAV16;
}

/* Streams the file at `in` through the chunked enhancer. */
static int sts_stream_file(const choir_mf2 *m, SNDFILE *sf, const SF_INFO *info, sts_run *r,
                           const choir_mf2_params *p, choir_err *err) {
    const int C = info->channels;
    const int64_t block = 48000;
    choir_resampler *to48 = NULL;
    float *buf = choir_alloc(CHOIR_MEM_IO, (size_t)(block * C) * sizeof(float));
    float *rs = NULL;
    int64_t rs_cap = 0;
    int rc = 0;
    choir_mf2_stream *s = choir_mf2_stream_create(m, C, p, sts_emit, r, err);
    if (!s || !buf) {
        rc = s ? choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory") : (err->code ? err->code : CHOIR_EINVAL);
        goto done;
    }
    if (info->samplerate != CHOIR_MF2_RATE) {
        to48 = choir_resampler_create(info->samplerate, CHOIR_MF2_RATE, C, err);
        if (!to48) {
            rc = err->code;
            goto done;
        }
        rs_cap = choir_resampler_max_out(to48, block);
        int64_t flush_cap = choir_resampler_max_out(to48, 0);
        if (flush_cap > rs_cap) rs_cap = flush_cap;
        rs = choir_alloc(CHOIR_MEM_IO, (size_t)(rs_cap * C) * sizeof(float));
        if (!rs) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory");
            goto done;
        }
    }
    for (;;) {
        sf_count_t got = sf_readf_float(sf, buf, block);
        if (got <= 0) break;
        if (to48) {
            int64_t out = 0;
            if ((rc = choir_resampler_process(to48, buf, got, rs, rs_cap, &out, err))) goto done;
            if ((rc = choir_mf2_stream_push(s, rs, out, err))) goto done;
        } else if ((rc = choir_mf2_stream_push(s, buf, got, err))) {
            goto done;
        }
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "sts: reading the input failed: %s", sf_strerror(sf));
        goto done;
    }
    for (int64_t out = 1; to48 && out > 0;) {
        if ((rc = choir_resampler_flush(to48, rs, rs_cap, &out, err))) goto done;
        if (out > 0 && (rc = choir_mf2_stream_push(s, rs, out, err))) goto done;
    }
    rc = choir_mf2_stream_finish(s, err);
done:
    choir_mf2_stream_free(s);
    choir_resampler_free(to48);
    choir_free(buf);
    choir_free(rs);
    return rc;
}

/* --reference: the whole file, each channel through ClearerVoice's plan. */
static int sts_reference_file(const choir_mf2 *m, const char *in, sts_run *r, const choir_mf2_params *p,
                              choir_err *err) {
    choir_decode_opts o = {.target_rate = CHOIR_MF2_RATE};
    choir_audio a = {0};
    int rc = choir_audio_decode_file(in, &o, &a, err);
    if (rc) return rc;
    float *plane = choir_alloc(CHOIR_MEM_IO, (size_t)a.frames * sizeof(float));
    if (!plane) {
        choir_audio_clear(&a);
        return choir_err_set(err, CHOIR_ENOMEM, "sts: out of memory for %lld frames", (long long)a.frames);
    }
    for (int c = 0; c < a.channels && rc == 0; c++) {
        for (int64_t i = 0; i < a.frames; i++) plane[i] = a.samples[i * a.channels + c];
        rc = choir_mf2_enhance_reference(m, plane, a.frames, plane, p, NULL, NULL, err);
        for (int64_t i = 0; i < a.frames; i++) a.samples[i * a.channels + c] = plane[i];
    }
    if (rc == 0) rc = sts_emit(r, a.samples, a.frames, 0, err);
    choir_free(plane);
    choir_audio_clear(&a);
    return rc;
}

/* The command; a temporary copy of standard input is named in `spool` (the
 * caller removes it). */
static int sts_command(int argc, char **argv, char *spool, size_t spool_cap) {
    const char *model = NULL, *in = NULL, *out = NULL, *fmt = NULL;
    int reference = 0, quiet = 0, threads = 0;
    choir_mf2_params p;
    choir_mf2_default_params(&p);
    int streamed = 0, n_in = 0;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model, 0, 0, "DIR", "MossFormer2_SE_48K model directory (required)"},
        {"-o", CLI_STRING, &out, 0, 0, "OUT", "output file (default: IN's name + _enhanced.wav); '-' = stdout"},
        {"--output", CLI_STRING, &out, 0, 0, "OUT", "the same as -o"},
        {"--format", CLI_STRING, &fmt, 0, 0, "F", "wav (16-bit, default), wav_f32, flac, mp3, opus, aac, pcm"},
        /* bounded by the model (choir_mf2_check_params below), as for a request */
        {"--chunk-seconds", CLI_DOUBLE, &p.chunk_seconds, -INFINITY, INFINITY, "S",
         "chunk length (default 12, 0.1..60; 10-15 s suits enhancement)"},
        {"--overlap-seconds", CLI_DOUBLE, &p.overlap_seconds, -INFINITY, INFINITY, "O",
         "raised-cosine crossfade between chunks (default 1; shorter than the chunk)"},
        {"--stream", CLI_FLAG, &streamed, 0, 0, NULL,
         "write each region to OUT as soon as it is final (default for\nfiles too; with -o - the audio goes to "
         "stdout while it runs)"},
        {"--reference", CLI_FLAG, &reference, 0, 0, NULL,
         "ClearerVoice's own plan: one pass up to 20 s, else 4-s windows\nwith hard cuts (whole file in memory; "
         "for comparison)"},
        {"--dither", CLI_FLOAT, &p.dither, 0, 1e6, "D",
         "fbank dither (int16 scale). Default 0: output is deterministic;\nthe reference uses 1.0 with an "
         "unseeded generator"},
        {"--seed", CLI_U64, &p.seed, 0, 0, "N", "seed of the dither generator (default fixed)"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--quiet", CLI_FLAG, &quiet, 0, 0, NULL, "no progress bar or summary"},
    };
    const cli_spec spec = {
        .cmd = "sts",
        .synopsis = "usage: choir sts --model DIR IN [-o OUT] [options]\n\n"
                    "Enhances speech in IN (any length, mono or stereo; each channel on its own) with\n"
                    "MossFormer2_SE_48K and writes OUT at IN's sample rate. IN '-' reads standard input\n"
                    "(then -o is required). The chunk and overlap lengths are checked by the model\n"
                    "(chunk 0.1..60 s, overlap shorter than it).\n\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = &in,
        .max_positional = 1,
        .n_positional = &n_in,
        .positional_what = "input file",
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!model || !in) {
        fprintf(stderr, "choir sts: %s\n",
                !model ? "--model DIR is required" : "no input file given (a path, or - for standard input)");
        cli_usage(&spec, stderr);
        return 2;
    }
    choir_err perr = {0};
    if (choir_mf2_check_params(&p, &perr) < 0) {
        fprintf(stderr, "choir sts: %s\n", perr.msg);
        return 2;
    }
    int from_stdin = strcmp(in, "-") == 0;
    if (from_stdin && !out) {
        fprintf(stderr, "choir sts: reading standard input needs -o OUT (or -o - for standard output)\n");
        return 2;
    }
    char out_buf[4096];
    if (!out) {
        const char *dot = strrchr(in, '.'), *slash = strrchr(in, '/');
        int stem = (int)(dot && (!slash || dot > slash) ? dot - in : (long)strlen(in));
        snprintf(out_buf, sizeof out_buf, "%.*s_enhanced.wav", stem, in);
        out = out_buf;
    }
    int to_stdout = strcmp(out, "-") == 0;
    choir_audio_format format = format_from_name(to_stdout ? NULL : out, fmt);
    if ((int)format < 0) {
        fprintf(stderr, "choir sts: unknown format %s\n", fmt);
        return 2;
    }
    if (threads > 0) choir_pool_set_default_threads(threads);
    if (to_stdout) quiet = quiet || isatty(STDOUT_FILENO);

    choir_err err = {0};
    int rc = 1;
    /* Standard input goes to a temporary file first: the enhancer streams
     * from a seekable file, and a recording may be longer than memory. */
    if (from_stdin) {
        if (choir_cli_spool_stdin(spool, spool_cap, &err) < 0) {
            fprintf(stderr, "choir sts: %s\n", err.msg);
            return 1;
        }
        in = spool;
    }
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open(in, SFM_READ, &info);
    if (!sf) {
        fprintf(stderr, "choir sts: %s: %s\n", from_stdin ? "standard input" : in, sf_strerror(NULL));
        return 1;
    }
    if (info.channels < 1 || info.samplerate < 1000) {
        fprintf(stderr, "choir sts: %s: unsupported channels/rate (%d, %d Hz)\n", in, info.channels, info.samplerate);
        sf_close(sf);
        return 1;
    }
    double t_load = now_s();
    choir_mf2 *m = choir_mf2_load(model, &err);
    if (!m) {
        fprintf(stderr, "choir sts: %s\n", err.msg);
        sf_close(sf);
        return 1;
    }
    t_load = now_s() - t_load;
    sts_run r = {.channels = info.channels, .quiet = quiet, .t0 = now_s()};
    r.total_frames = (int64_t)((double)info.frames * CHOIR_MF2_RATE / info.samplerate + 0.5);
    r.enc = to_stdout ? choir_encoder_create(format, info.samplerate, info.channels, stdout_write, NULL, &err)
                      : choir_encoder_create_file(format, info.samplerate, info.channels, out, &err);
    if (!r.enc) goto done;
    if (info.samplerate != CHOIR_MF2_RATE) {
        r.back = choir_resampler_create(CHOIR_MF2_RATE, info.samplerate, info.channels, &err);
        if (!r.back) goto done;
    }
    choir_mem_reset_peaks();
    int64_t base = choir_mem_current(CHOIR_MEM_COUNT);
    int st;
    if (reference) {
        sf_close(sf);
        sf = NULL;
        st = sts_reference_file(m, in, &r, &p, &err);
    } else {
        st = sts_stream_file(m, sf, &info, &r, &p, &err);
    }
    if (st == 0) st = sts_finish_back(&r, &err);
    if (st == 0) st = choir_encoder_finish(r.enc, &err);
    if (st != 0) goto done;
    rc = 0;
    if (!quiet) {
        double el = now_s() - r.t0, secs = (double)r.done_frames / CHOIR_MF2_RATE;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr,
                "\n%s: %.1f s of audio in %.1f s (RTF %.3f), model load %.2f s\n"
                "memory: weights %.1f MB, peak beyond them %.1f MB (counted), max RSS %.1f MB\n",
                to_stdout ? "stdout" : out, secs, el, secs > 0 ? el / secs : 0.0, t_load,
                (double)choir_mf2_weight_bytes(m) / 1e6,
                (double)(choir_mem_peak(CHOIR_MEM_COUNT) - base) / 1e6,
                (double)ru.ru_maxrss * 1024.0 / 1e6 /* KiB on Linux; MB = 1e6 bytes throughout */);
    }
done:
    if (rc) fprintf(stderr, "%schoir sts: %s\n", quiet ? "" : "\n", err.msg);
    if (sf) sf_close(sf);
    choir_encoder_free(r.enc);
    choir_resampler_free(r.back);
    choir_free(r.back_buf);
    choir_mf2_free(m);
    return rc;
}

int choir_cmd_sts(int argc, char **argv) {
    char spool[4096] = "";
    int rc = sts_command(argc, argv, spool, sizeof spool);
    if (spool[0]) unlink(spool);
    return rc;
}
