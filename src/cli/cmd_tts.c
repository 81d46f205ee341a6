/* `choir tts`: text to speech with Kokoro-82M. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/encode.h"
#include "choir/kokoro.h"
#include "choir/log.h"
#include "choir/phonemizer.h"
#include "choir/pool.h"
#include "cli/cli.h"
#include "cli/opt.h"

typedef struct sink {
    choir_encoder *enc;
    float *all;          /* whole signal when not streaming */
    int64_t n, cap;
    bool stream;
    double t0, first_audio_s;
    choir_err *err;
} sink;

static int on_audio(void *user, const float *pcm, int64_t n, int piece, int n_pieces) {
    sink *s = user;
    (void)n_pieces;
    if (piece == 0) s->first_audio_s = choir_now_s() - s->t0;
    if (s->stream) return choir_encoder_write(s->enc, pcm, n, s->err) != 0;
    if (s->n + n > s->cap) {
        int64_t cap = (s->n + n) * 2;
        float *p = choir_realloc(s->all, (size_t)cap * sizeof(float));
        if (!p) return 1;
        s->all = p;
        s->cap = cap;
    }
    memcpy(s->all + s->n, pcm, (size_t)n * sizeof(float));
    s->n += n;
    return 0;
}

static int write_stdout(const void *data, size_t len, void *user) {
    (void)user;
    return fwrite(data, 1, len, stdout) != len;
}

/* The text on standard input, or NULL with `err` set. */
static char *read_stdin(choir_err *err) {
    choir_buf in = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    int rc = choir_buf_read(&in, stdin, SIZE_MAX);
    const char *why = rc == CHOIR_EIO ? strerror(errno) : "out of memory";
    char *text = rc == 0 ? choir_buf_take(&in, NULL) : NULL;
    choir_buf_free(&in);
    if (!text) choir_err_set(err, rc == CHOIR_EIO ? rc : CHOIR_ENOMEM, "standard input: %s", why);
    return text;
}

int choir_cmd_tts(int argc, char **argv) {
    const char *model_dir = NULL, *voice_spec = NULL, *out = NULL, *fmt = NULL, *lang = "a";
    const char *text_arg = NULL;
    choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
    int stream_flag = 0, zero_noise = 0, n_text = 0;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_dir, 0, 0, "DIR", "Kokoro-82M model directory (required)"},
        {"--voice", CLI_STRING, &voice_spec, 0, 0, "V",
         "a voice in DIR/voices (.bin, .pt, .safetensors), a path, or a\nweighted mix such as af_heart(2)+am_adam(1)"},
        {"--speed", CLI_FLOAT, &sp.synth.speed, CHOIR_KOKORO_MIN_SPEED, CHOIR_KOKORO_MAX_SPEED, "S", "speaking rate (default 1)"},
        {"--format", CLI_STRING, &fmt, 0, 0, "FMT",
         "wav, wav_f32, pcm, flac, mp3, opus, aac (default: from OUT's extension,\n.mp3 .flac .opus/.ogg .aac "
         ".pcm/.raw, else wav)"},
        {"--stream", CLI_FLAG, &stream_flag, 0, 0, NULL, "write each piece as soon as it is ready (first clause first)"},
        {"--lang", CLI_STRING, &lang, 0, 0, "L", "a: American English (default), b: British English"},
        {"--batch", CLI_INT, &sp.batch, 1, 1024, "N", "pieces synthesised together (default 1)"},
        {"--seed", CLI_U64, &sp.synth.seed, 0, 0, "N", "noise seed (piece i uses N + i)"},
        {"--zero-noise", CLI_FLAG, &zero_noise, 0, 0, NULL, "all noise 0 (reproduces the reference fixtures)"},
        {"-o", CLI_STRING, &out, 0, 0, "OUT", "output file, or - for standard output (required)"},
        {"--output", CLI_STRING, &out, 0, 0, "OUT", "the same as -o"},
    };
    const cli_spec spec = {
        .cmd = "tts",
        .synopsis = "usage: choir tts --model DIR --voice V [--speed S] [--stream] [--format FMT]\n"
                    "                 [--lang a|b] [--batch N] [--seed N] [--zero-noise] -o OUT [TEXT]\n\n"
                    "Speaks TEXT (or standard input) with Kokoro-82M at 24 kHz.\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = &text_arg,
        .max_positional = 1,
        .n_positional = &n_text,
        .positional_what = "TEXT",
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    bool stream = stream_flag != 0;
    if (zero_noise) sp.synth.noise = CHOIR_KOKORO_NOISE_ZERO;
    if (!model_dir || !voice_spec || !out) {
        fprintf(stderr, "choir tts: %s is required\n", !model_dir ? "--model DIR" : !voice_spec ? "--voice V" : "-o OUT");
        cli_usage(&spec, stderr);
        return 2;
    }
    /* The file name says the format unless --format does: -o x.mp3 is MP3. */
    if (!fmt) {
        const char *by_name = strcmp(out, "-") != 0 ? choir_cli_format_from_path(out) : NULL;
        fmt = by_name ? by_name : "wav";
    }
    if (!(sp.synth.speed > 0)) {
        fprintf(stderr, "choir tts: --speed must be > 0\n");
        return 2;
    }

    choir_err err = {0};
    int rc = 1;
    choir_audio_format format;
    choir_phonemizer_lang plang;
    choir_kokoro *m = NULL;
    choir_kokoro_voice *voice = NULL;
    choir_phonemizer *ph = NULL;
    char *text = NULL;
    sink s = {.stream = stream, .err = &err};
    if (choir_audio_format_parse(fmt, &format, &err) != 0) goto done;
    if (choir_phonemizer_lang_parse(lang, &plang) != 0) {
        choir_err_set(&err, CHOIR_EINVAL, "unknown --lang %s (a or b)", lang);
        goto done;
    }
    if (text_arg && strcmp(text_arg, "-") != 0) {
        if (!(text = choir_strdup(text_arg))) {
            choir_err_set(&err, CHOIR_ENOMEM, "out of memory");
            goto done;
        }
    } else if (!(text = read_stdin(&err))) {
        goto done;
    }
    char voices_dir[2048];
    snprintf(voices_dir, sizeof voices_dir, "%s/voices", model_dir);
    if (!(m = choir_kokoro_load(model_dir, &err))) goto done;
    if (!(voice = choir_kokoro_voice_load(voice_spec, voices_dir, &err))) goto done;
    if (!(ph = choir_phonemizer_create(plang, &err))) goto done;
    bool to_stdout = strcmp(out, "-") == 0;
    if (stream) {
        s.enc = to_stdout ? choir_encoder_create(format, CHOIR_KOKORO_SAMPLE_RATE, 1, write_stdout, NULL, &err)
                          : choir_encoder_create_file(format, CHOIR_KOKORO_SAMPLE_RATE, 1, out, &err);
        if (!s.enc) goto done;
    }
    s.t0 = choir_now_s();
    if (choir_kokoro_speak(m, ph, voice, text, &sp, on_audio, &s, &err) != 0) goto done;
    if (stream) {
        if (choir_encoder_finish(s.enc, &err) != 0) goto done;
    } else if (to_stdout) {
        void *bytes = NULL;
        size_t len = 0;
        if (choir_audio_encode_memory(format, s.all, s.n, CHOIR_KOKORO_SAMPLE_RATE, 1, &bytes, &len, &err)) goto done;
        size_t wrote = fwrite(bytes, 1, len, stdout);
        choir_free(bytes);
        if (wrote != len) {
            choir_err_set(&err, CHOIR_EIO, "writing standard output failed");
            goto done;
        }
    } else if (choir_audio_encode_file(out, format, s.all, s.n, CHOIR_KOKORO_SAMPLE_RATE, 1, &err)) {
        goto done;
    }
    fflush(stdout);
    CHOIR_LOGI("tts: first audio after %.2f s, total %.2f s", s.first_audio_s, choir_now_s() - s.t0);
    rc = 0;
done:
    if (rc) fprintf(stderr, "choir tts: %s\n", err.msg[0] ? err.msg : "failed");
    choir_encoder_free(s.enc);
    choir_free(s.all);
    choir_free(text);
    choir_phonemizer_free(ph);
    choir_kokoro_voice_free(voice);
    choir_kokoro_free(m);
    return rc;
}
