/* `choir tts`: text to speech with Kokoro-82M. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/encode.h"
#include "choir/kokoro.h"
#include "choir/log.h"
#include "choir/phonemizer.h"
#include "choir/pool.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: choir tts --model DIR --voice V [--speed S] [--stream] [--format FMT]\n"
            "                 [--lang a|b] [--batch N] [--seed N] [--zero-noise] -o OUT [TEXT]\n\n"
            "Speaks TEXT (or standard input) with Kokoro-82M at 24 kHz.\n"
            "  --voice V    a voice in DIR/voices (.bin, .pt, .safetensors), a path, or a\n"
            "               weighted mix such as af_heart(2)+am_adam(1)\n"
            "  --format     wav, wav_f32, pcm, flac, mp3, opus, aac (default: from OUT's extension,\n"
            "               .mp3 .flac .opus/.ogg .aac .pcm/.raw, else wav)\n"
            "  --stream     write each piece as soon as it is ready (first clause first)\n"
            "  --lang       a: American English (default), b: British English\n"
            "  -o OUT       output file, or - for standard output\n");
}

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

static char *read_stdin(void) {
    size_t cap = 4096, n = 0;
    char *s = choir_alloc(CHOIR_MEM_IO, cap);
    while (s) {
        size_t got = fread(s + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0) break;
        if (n + 1 == cap) {
            char *p = choir_realloc(s, cap *= 2);
            if (!p) choir_free(s);
            s = p;
        }
    }
    if (s) s[n] = 0;
    return s;
}

int choir_cmd_tts(int argc, char **argv) {
    const char *model_dir = NULL, *voice_spec = NULL, *out = NULL, *fmt = NULL, *lang = "a";
    const char *text_arg = NULL;
    choir_kokoro_speak_params sp = choir_kokoro_default_speak_params();
    bool stream = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(stdout), 0;
        if (strcmp(a, "--stream") == 0) { stream = true; continue; }
        if (strcmp(a, "--zero-noise") == 0) { sp.synth.noise = CHOIR_KOKORO_NOISE_ZERO; continue; }
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (text_arg) return usage(stderr), 2;
            text_arg = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, "choir tts: %s needs a value\n", a);
            return usage(stderr), 2;
        }
        if (strcmp(a, "--model") == 0) model_dir = v;
        else if (strcmp(a, "--voice") == 0) voice_spec = v;
        else if (strcmp(a, "--speed") == 0) sp.synth.speed = (float)atof(v);
        else if (strcmp(a, "--format") == 0) fmt = v;
        else if (strcmp(a, "--lang") == 0) lang = v;
        else if (strcmp(a, "--batch") == 0) sp.batch = atoi(v);
        else if (strcmp(a, "--seed") == 0) sp.synth.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) out = v;
        else {
            fprintf(stderr, "choir tts: unknown option %s\n", a);
            return usage(stderr), 2;
        }
        i++;
    }
    if (!model_dir || !voice_spec || !out) {
        fprintf(stderr, "choir tts: %s is required\n", !model_dir ? "--model DIR" : !voice_spec ? "--voice V" : "-o OUT");
        return usage(stderr), 2;
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
    text = text_arg && strcmp(text_arg, "-") != 0 ? choir_strdup(text_arg) : read_stdin();
    if (!text) {
        choir_err_set(&err, CHOIR_EIO, "no text");
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
