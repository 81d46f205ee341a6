/* `choir vad`: speech segments (or per-chunk probabilities) of an audio file
 * with Silero VAD, printed as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/silero.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: choir vad [--model PATH] [--probs] [--threshold T] [--min-speech MS]\n"
            "                 [--min-silence MS] [--pad MS] [--max-speech S] FILE\n"
            "\n"
            "Finds the speech in FILE (any format choir decodes; resampled to 16 kHz mono;\n"
            "- reads standard input)\n"
            "with Silero VAD v6.2 and prints JSON: by default the segments\n"
            "[{\"start\": s, \"end\": s}, ...] in seconds; with --probs, the speech\n"
            "probability of every 512-sample chunk (32 ms; a last partial chunk is not scored).\n"
            "\n"
            "  --model PATH      model directory (config.json + model.safetensors), a\n"
            "                    .safetensors file or Silero's .onnx; default\n"
            "                    $CHOIR_MODELS/silero-vad, then ~/.cache/choir/models/silero-vad\n"
            "  --threshold T     speech probability that starts speech (0.5); speech ends\n"
            "                    below T - 0.15\n"
            "  --min-speech MS   drop shorter segments (250)\n"
            "  --min-silence MS  pause that ends a segment (100)\n"
            "  --pad MS          padding on each side of a segment (30)\n"
            "  --max-speech S    split segments longer than S seconds at their longest\n"
            "                    pause (default: no limit; Whisper wants 30)\n");
}

static int parse_number(const char *flag, const char *text, double lo, double hi, double *out) {
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0;
    if (!text || end == text || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "choir vad: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi, text ? text : "");
        return -1;
    }
    *out = v;
    return 0;
}

int choir_cmd_vad(int argc, char **argv) {
    const char *model_arg = NULL, *file = NULL;
    int want_probs = 0;
    choir_vad_params params = choir_vad_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        double v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--probs") == 0) {
            want_probs = 1;
        } else if (strcmp(a, "--model") == 0 && val) {
            model_arg = val;
            i++;
        } else if (strcmp(a, "--threshold") == 0) {
            if (parse_number(a, val, 0.01, 1.0, &v)) return 2;
            params.threshold = (float)v;
            i++;
        } else if (strcmp(a, "--min-speech") == 0) {
            if (parse_number(a, val, 0, 3600000, &v)) return 2;
            params.min_speech_ms = (int)v;
            i++;
        } else if (strcmp(a, "--min-silence") == 0) {
            if (parse_number(a, val, 0, 3600000, &v)) return 2;
            params.min_silence_ms = (int)v;
            i++;
        } else if (strcmp(a, "--pad") == 0) {
            if (parse_number(a, val, 0, 3600000, &v)) return 2;
            params.speech_pad_ms = (int)v;
            i++;
        } else if (strcmp(a, "--max-speech") == 0) {
            if (parse_number(a, val, 0, 1e6, &v)) return 2;
            params.max_speech_s = (float)v;
            i++;
        } else if (a[0] == '-' && a[1]) { /* "-" alone is standard input */
            fprintf(stderr, "choir vad: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!file) {
            file = a;
        } else {
            fprintf(stderr, "choir vad: one input file only ('%s' and '%s')\n", file, a);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "choir vad: no audio file given (a path, or - for standard input)\n");
        usage(stderr);
        return 2;
    }

    choir_err err = {0};
    char model_path[4096];
    choir_silero *model = NULL;
    choir_audio audio = {0};
    float *probs = NULL;
    choir_vad_segment *segs = NULL;
    int64_t n_probs = 0, n_segs = 0;
    int status = 1;
    if (choir_silero_find(model_arg, model_path, sizeof model_path, &err)) goto fail;
    model = choir_silero_load(model_path, &err);
    if (!model) goto fail;
    choir_decode_opts opts = {.target_rate = CHOIR_SILERO_RATE, .mono = 1, .max_frames = 0};
    if (choir_cli_decode(file, &opts, &audio, &err)) goto fail;

    if (want_probs) {
        if (choir_silero_file_probs(model, audio.samples, audio.frames, false, &probs, &n_probs, &err)) goto fail;
        fputc('[', stdout);
        for (int64_t i = 0; i < n_probs; i++) printf("%s%.6f", i ? "," : "", (double)probs[i]);
        fputs("]\n", stdout);
    } else {
        if (choir_silero_detect(model, audio.samples, audio.frames, &params, &segs, &n_segs, &err)) goto fail;
        fputc('[', stdout);
        for (int64_t i = 0; i < n_segs; i++)
            printf("%s{\"start\": %.3f, \"end\": %.3f}", i ? ", " : "", segs[i].start / (double)CHOIR_SILERO_RATE,
                   segs[i].end / (double)CHOIR_SILERO_RATE);
        fputs("]\n", stdout);
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "choir vad: %s\n", err.msg[0] ? err.msg : choir_strerror(err.code));
done:
    choir_free(segs);
    choir_free(probs);
    choir_audio_clear(&audio);
    choir_silero_free(model);
    return status;
}
