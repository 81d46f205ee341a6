/* `choir vad`: speech segments (or per-chunk probabilities) of an audio file
 * with Silero VAD, printed as JSON. */
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/silero.h"
#include "cli/cli.h"
#include "cli/opt.h"

int choir_cmd_vad(int argc, char **argv) {
    const char *model_arg = NULL, *file = NULL;
    int want_probs = 0, n_files = 0;
    choir_vad_params params = choir_vad_default_params();
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_arg, 0, 0, "PATH",
         "model directory (config.json + model.safetensors), a\n.safetensors file or Silero's .onnx; default\n"
         "$CHOIR_MODELS/silero-vad, then ~/.cache/choir/models/silero-vad"},
        {"--probs", CLI_FLAG, &want_probs, 0, 0, NULL, "print per-chunk speech probabilities instead of segments"},
        {"--threshold", CLI_FLOAT, &params.threshold, 0.01, 1.0, "T",
         "speech probability that starts speech (0.5); speech ends\nbelow T - 0.15"},
        {"--min-speech", CLI_INT, &params.min_speech_ms, 0, CHOIR_VAD_MAX_MS, "MS", "drop shorter segments (250)"},
        {"--min-silence", CLI_INT, &params.min_silence_ms, 0, CHOIR_VAD_MAX_MS, "MS", "pause that ends a segment (100)"},
        {"--pad", CLI_INT, &params.speech_pad_ms, 0, CHOIR_VAD_MAX_MS, "MS", "padding on each side of a segment (30)"},
        {"--max-speech", CLI_FLOAT, &params.max_speech_s, 0, 1e6, "S",
         "split segments longer than S seconds at their longest\npause (default: no limit; Whisper wants 30)"},
    };
    const cli_spec spec = {
        .cmd = "vad",
        .synopsis = "usage: choir vad [--model PATH] [--probs] [--threshold T] [--min-speech MS]\n"
                    "                 [--min-silence MS] [--pad MS] [--max-speech S] FILE\n"
                    "\n"
                    "Finds the speech in FILE (any format choir decodes; resampled to 16 kHz mono;\n"
                    "- reads standard input)\n"
                    "with Silero VAD v6.2 and prints JSON: by default the segments\n"
                    "[{\"start\": s, \"end\": s}, ...] in seconds; with --probs, the speech\n"
                    "probability of every 512-sample chunk (32 ms; a last partial chunk is not scored).\n"
                    "\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = &file,
        .max_positional = 1,
        .n_positional = &n_files,
        .positional_what = "input file",
    };
    int rc = cli_parse(&spec, argc, argv);
    if (rc >= 0) return rc;
    if (!file) {
        fprintf(stderr, "choir vad: no audio file given (a path, or - for standard input)\n");
        cli_usage(&spec, stderr);
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
