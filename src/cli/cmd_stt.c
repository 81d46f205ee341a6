/* `choir stt`: transcribe (or translate) audio files with Whisper, or with
 * VibeVoice-ASR when the model folder holds one (cmd_stt_vibevoice.c). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/model.h"
#include "choir/pool.h"
#include "choir/silero.h"
#include "choir/tokenizer.h"
#include "choir/transcript.h"
#include "choir/whisper.h"
#include "choir/whisper_words.h"
#include "cli/cli.h"
#include "cli/opt.h"

typedef struct stt_progress {
    const char *name;
    int shown;
} stt_progress;

static void stt_on_progress(void *user, double done, double total) {
    stt_progress *p = user;
    int width = 30, fill = total > 0 ? (int)(width * done / total) : width;
    if (fill > width) fill = width;
    fprintf(stderr, "\r%s [", p->name);
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : ' ', stderr);
    fprintf(stderr, "] %5.1f / %.1f s", done, total);
    fflush(stderr);
    p->shown = 1;
}

/* The transcript in `fmt` through the formatter the server uses too. With
 * word timestamps (`sub` not NULL), verbose_json lists the words and srt /
 * vtt cues are laid out by words as openai's SubtitlesWriter lays them out. */
static int stt_write(FILE *f, const char *fmt, const choir_whisper_transcript *t, bool translate,
                     const choir_whisper_subtitle_opts *sub) {
    choir_transcript_format tf;
    if (choir_transcript_format_parse(fmt, &tf) < 0) return -1;
    choir_segment *segs = choir_calloc(CHOIR_MEM_IO, (size_t)t->n_segments + 1, sizeof *segs);
    if (!segs) return -1;
    choir_whisper_segment_views(t, segs);
    choir_transcript tr = {.text = t->text, .language = choir_whisper_lang_code(t->language),
                           .duration_s = t->duration, .translate = translate, .segments = segs,
                           .n_segments = t->n_segments, .words = sub != NULL};
    choir_whisper_cue *cues = NULL;
    choir_transcript_cue *tcues = NULL;
    int n_cues = 0;
    if (sub && (tf == CHOIR_TRANSCRIPT_SRT || tf == CHOIR_TRANSCRIPT_VTT)) {
        if (choir_whisper_transcript_cues(t, sub, &cues, &n_cues, NULL) ||
            !(tcues = choir_calloc(CHOIR_MEM_IO, (size_t)n_cues + 1, sizeof *tcues))) {
            choir_whisper_cues_free(cues, n_cues);
            choir_free(segs);
            return -1;
        }
        for (int i = 0; i < n_cues; i++) tcues[i] = (choir_transcript_cue){cues[i].start, cues[i].end, cues[i].text};
        tr.cues = tcues;
        tr.n_cues = n_cues;
    }
    choir_transcript_opts o = {.pretty = 1};
    size_t len = 0;
    char *out = choir_transcript_write(&tr, tf, &o, &len, NULL);
    choir_free(tcues);
    choir_whisper_cues_free(cues, n_cues);
    choir_free(segs);
    if (!out) return -1;
    fwrite(out, 1, len, f);
    choir_free(out);
    return 0;
}

/* Speech spans from Silero VAD, at most 30 s each. */
static int stt_vad_spans(const char *vad_path, const float *pcm, int64_t n, choir_whisper_span **spans,
                         int *n_spans, choir_err *err) {
    char path[4096];
    int rc = choir_silero_find(vad_path, path, sizeof path, err);
    if (rc) return rc;
    choir_silero *vad = choir_silero_load(path, err);
    if (!vad) return err->code;
    choir_vad_params vp = choir_vad_default_params();
    vp.max_speech_s = 30.0f;
    choir_vad_segment *segs = NULL;
    int64_t ns = 0;
    rc = choir_silero_detect(vad, pcm, n, &vp, &segs, &ns, err);
    choir_silero_free(vad);
    if (rc) return rc;
    *spans = choir_alloc(CHOIR_MEM_IO, (size_t)(ns + 1) * sizeof **spans);
    if (!*spans) {
        choir_free(segs);
        return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < ns; i++) (*spans)[i] = (choir_whisper_span){segs[i].start, segs[i].end};
    *n_spans = (int)ns;
    choir_free(segs);
    return 0;
}

int choir_cmd_stt(int argc, char **argv) {
    const char *model_dir = NULL, *lang = NULL, *fmt = "txt", *outdir = NULL, *tok_path = NULL;
    const char *vad_path = NULL;
    const char *files[256];
    int n_files = 0, use_vad = 0, stream = 0, max_new = 0;
    const char *context = NULL;
    double max_audio_s = 0;
    choir_whisper_transcribe_opts o;
    choir_whisper_default_transcribe_opts(&o);
    int no_timestamps = 0, no_condition = 0, threads = 0, batch_size = -1;
    int word_timestamps = 0, highlight = 0, max_width = 0, max_count = 0, max_words = 0;
    double temperature = -1;
    const char *task = NULL;
    const cli_opt flags[] = {
        {"--model", CLI_STRING, &model_dir, 0, 0, "DIR", "a Whisper or VibeVoice-ASR model folder (required)"},
        {"--language", CLI_STRING, &lang, 0, 0, "L", "language code (en, de, ...); default: detect"},
        {"--task", CLI_STRING, &task, 0, 0, "T", "transcribe (default) or translate (to English)"},
        {"--beam", CLI_INT, &o.params.beam_size, 1, CHOIR_WHISPER_MAX_BEAM, "N", "beam search with N beams (default 1: greedy)"},
        {"--best-of", CLI_INT, &o.params.best_of, 1, CHOIR_WHISPER_MAX_BEAM, "N", "samples per window when falling back (default 5)"},
        {"--temperature", CLI_DOUBLE, &temperature, 0, CHOIR_WHISPER_MAX_TEMPERATURE, "T", "a single temperature (no fallback)"},
        {"--batch-size", CLI_INT, &batch_size, 1, 64, "N",
         "batched pipeline: independent 30-s windows (or VAD spans),\nN at a time (default: openai's sequential seek "
         "loop)"},
        {"--vad", CLI_FLAG, &use_vad, 0, 0, NULL, "split at speech (Silero VAD) and decode in batches"},
        {"--vad-model", CLI_STRING, &vad_path, 0, 0, "PATH", "Silero VAD model (default: $CHOIR_MODELS/silero-vad)"},
        {"--no-timestamps", CLI_FLAG, &no_timestamps, 0, 0, NULL, "do not sample timestamp tokens"},
        {"--word-timestamps", CLI_FLAG, &word_timestamps, 0, 0, NULL,
         "times of each word (cross-attention alignment, as openai's);\nverbose_json lists them, srt/vtt are laid out "
         "by words"},
        {"--max-line-width", CLI_INT, &max_width, 1, 100000, "N", "with --word-timestamps: characters per subtitle line"},
        {"--max-line-count", CLI_INT, &max_count, 1, 100000, "N",
         "with --word-timestamps and --max-line-width: lines per cue"},
        {"--max-words-per-line", CLI_INT, &max_words, 1, 100000, "N",
         "with --word-timestamps, without --max-line-width: words per cue"},
        {"--highlight-words", CLI_FLAG, &highlight, 0, 0, NULL, "with --word-timestamps: underline each word in srt/vtt"},
        {"--max-tokens", CLI_INT, &o.params.sample_len, 1, 224, "N", "most tokens sampled per 30-s window (default 224)"},
        {"--initial-prompt", CLI_STRING, &o.initial_prompt, 0, 0, "S", "text to condition the first window on"},
        {"--no-condition", CLI_FLAG, &no_condition, 0, 0, NULL, "do not prompt a window with the previous text"},
        {"--tokenizer", CLI_STRING, &tok_path, 0, 0, "PATH", "tokenizer file or folder (default: the model folder)"},
        {"--format", CLI_STRING, &fmt, 0, 0, "F", "txt (default), json, verbose_json, srt, vtt"},
        {"--output-dir", CLI_STRING, &outdir, 0, 0, "D",
         "write D/<name>.<format> per file instead of stdout (D is created;\nstandard input is named stdin)"},
        {"--threads", CLI_INT, &threads, 1, 1024, "N", "compute threads"},
        {"--context", CLI_STRING, &context, 0, 0, "S", "VibeVoice: context / hotwords for the prompt (speaker names, terms)"},
        {"--max-new-tokens", CLI_INT, &max_new, 0, 1000000, "N",
         "VibeVoice: most tokens generated (default 256 + 20 per second of audio)"},
        {"--max-audio-seconds", CLI_DOUBLE, &max_audio_s, 0, 1e6, "S", "VibeVoice: longest input accepted (default 3660)"},
        {"--stream", CLI_FLAG, &stream, 0, 0, NULL, "VibeVoice: print the text to stderr as it is decoded"},
    };
    const cli_spec spec = {
        .cmd = "stt",
        .synopsis = "usage: choir stt --model DIR FILE... [options]\n\n"
                    "DIR is a Whisper or a VibeVoice-ASR model folder. A FILE of - reads standard input.\n"
                    "VibeVoice-ASR makes one pass over the whole file (segments with speakers; srt/vtt\n"
                    "label them); --format, --output-dir, --tokenizer and --threads apply to both.\n\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
        .positional = files,
        .max_positional = 256,
        .n_positional = &n_files,
        .positional_what = "of 256 files",
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (task && strcmp(task, "translate") == 0) o.params.task = CHOIR_WHISPER_TRANSLATE;
    else if (task && strcmp(task, "transcribe") != 0) {
        fprintf(stderr, "choir stt: --task is transcribe or translate\n");
        return 2;
    }
    if (temperature >= 0) {
        o.params.temperatures[0] = (float)temperature;
        o.params.n_temperatures = 1;
    }
    if (batch_size >= 0) {
        o.batch_size = batch_size;
        o.batched = true;
    }
    if (no_timestamps) o.params.timestamps = false;
    if (!word_timestamps && (max_width || max_count || max_words || highlight)) {
        fprintf(stderr, "choir stt: --max-line-width, --max-line-count, --max-words-per-line and --highlight-words "
                        "need --word-timestamps\n");
        return 2;
    }
    if (word_timestamps && no_timestamps) {
        fprintf(stderr, "choir stt: --word-timestamps needs timestamps (drop --no-timestamps)\n");
        return 2;
    }
    o.word_timestamps = word_timestamps != 0;
    choir_whisper_subtitle_opts sub = {.max_line_width = max_width, .max_line_count = max_count,
                                       .max_words_per_line = max_words, .highlight_words = highlight != 0};
    if (no_condition) o.condition_on_previous_text = false;
    if (threads) choir_pool_set_default_threads(threads);
    if (!model_dir || n_files == 0) {
        fprintf(stderr, "choir stt: %s\n",
                !model_dir ? "--model DIR is required" : "no audio file given (a path, or - for standard input)");
        cli_usage(&spec, stderr);
        return 2;
    }
    int from_stdin = 0;
    for (int f = 0; f < n_files; f++) from_stdin += strcmp(files[f], "-") == 0;
    if (from_stdin > 1) {
        fprintf(stderr, "choir stt: - (standard input) can be given once\n");
        return 2;
    }
    if (outdir) {
        choir_err derr = {0};
        if (choir_cli_make_dirs(outdir, &derr) < 0) {
            fprintf(stderr, "choir stt: --output-dir: %s\n", derr.msg);
            return 1;
        }
    }
    if (strcmp(fmt, "txt") && strcmp(fmt, "json") && strcmp(fmt, "verbose_json") && strcmp(fmt, "srt") &&
        strcmp(fmt, "vtt")) {
        fprintf(stderr, "choir stt: unknown format %s\n", fmt);
        return 2;
    }
    const choir_model_ops *kind = choir_model_detect(model_dir, NULL, 0, NULL);
    if (kind && strcmp(kind->kind, "vibevoice") == 0) {
        if (word_timestamps) {
            fprintf(stderr, "choir stt: --word-timestamps is for Whisper models (VibeVoice-ASR gives segments)\n");
            return 2;
        }
        choir_stt_vibevoice_args va = {model_dir, tok_path, fmt, outdir, context ? context : o.initial_prompt,
                                       files, n_files, max_new, max_audio_s, stream};
        return choir_stt_vibevoice(&va);
    }
    if (lang && (o.params.language = choir_whisper_lang_index(lang)) < 0) {
        fprintf(stderr, "choir stt: unknown language %s\n", lang);
        return 2;
    }
    o.batched = o.batched || use_vad;
    choir_err err = {0};
    choir_whisper *m = choir_whisper_load(model_dir, &err);
    if (!m) {
        fprintf(stderr, "choir stt: %s\n", err.msg);
        return 1;
    }
    choir_tokenizer *tok = choir_tokenizer_load_for_vocab(tok_path ? tok_path : model_dir,
                                                          choir_whisper_get_dims(m)->n_vocab, &err);
    if (!tok) {
        fprintf(stderr, "choir stt: %s\n", err.msg);
        choir_whisper_free(m);
        return 1;
    }
    int status = 0;
    for (int f = 0; f < n_files; f++) {
        choir_audio a = {0};
        choir_decode_opts dopts = {.target_rate = CHOIR_WHISPER_SAMPLE_RATE, .mono = 1};
        choir_whisper_transcript t = {0};
        choir_whisper_span *spans = NULL;
        stt_progress prog = {files[f], 0};
        choir_whisper_transcribe_opts fo = o;
        if (isatty(2)) {
            fo.progress = stt_on_progress;
            fo.progress_user = &prog;
        }
        int rc = choir_cli_decode(files[f], &dopts, &a, &err);
        if (!rc && use_vad) rc = stt_vad_spans(vad_path, a.samples, a.frames, &spans, &fo.n_spans, &err);
        fo.spans = spans;
        if (!rc && use_vad && fo.n_spans == 0) {
            /* No speech at all: an empty transcript, not an error. */
            t.duration = (double)a.frames / CHOIR_WHISPER_SAMPLE_RATE;
        } else if (!rc) {
            rc = choir_whisper_transcribe(m, tok, a.samples, a.frames, &fo, &t, &err);
        }
        if (prog.shown) fprintf(stderr, "\n");
        if (rc) {
            fprintf(stderr, "choir stt: %s: %s\n", files[f], err.msg);
            status = 1;
        } else {
            FILE *out = stdout;
            char path[4096];
            if (outdir) {
                const char *base = strrchr(files[f], '/');
                base = base ? base + 1 : strcmp(files[f], "-") == 0 ? "stdin" : files[f];
                const char *dot = strrchr(base, '.');
                int bl = dot ? (int)(dot - base) : (int)strlen(base);
                snprintf(path, sizeof path, "%s/%.*s.%s", outdir, bl, base,
                         strcmp(fmt, "verbose_json") == 0 ? "json" : fmt);
                out = fopen(path, "w");
                if (!out) {
                    fprintf(stderr, "choir stt: cannot write %s\n", path);
                    status = 1;
                }
            }
            if (out) {
                if (stt_write(out, fmt, &t, o.params.task == CHOIR_WHISPER_TRANSLATE, word_timestamps ? &sub : NULL))
                    status = 1;
                if (out != stdout) fclose(out);
            }
        }
        choir_whisper_transcript_clear(&t);
        choir_free(spans);
        choir_audio_clear(&a);
    }
    choir_tokenizer_free(tok);
    choir_whisper_free(m);
    return status;
}
