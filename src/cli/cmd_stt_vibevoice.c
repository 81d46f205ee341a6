/* `choir stt --model <VibeVoice-ASR folder>`: long-form transcription with
 * speakers, one pass per file (see choir/vibevoice.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/audio.h"
#include "choir/tokenizer.h"
#include "choir/transcript.h"
#include "choir/vibevoice.h"
#include "cli/cli.h"

/* The transcript in `fmt` through the formatter the server uses too. */
static int vt_write(FILE *f, const char *fmt, const choir_vibevoice_result *r) {
    choir_transcript_format tf;
    if (choir_transcript_format_parse(fmt, &tf) < 0) return -1;
    choir_segment *segs = choir_calloc(CHOIR_MEM_IO, (size_t)r->n_segments + 1, sizeof *segs);
    if (!segs) return -1;
    for (int i = 0; i < r->n_segments; i++) {
        const choir_vibevoice_segment *s = &r->segments[i];
        segs[i] = (choir_segment){.start_s = s->start, .end_s = s->end, .text = s->text,
                                  .has_speaker = s->speaker >= 0, .speaker = s->speaker};
    }
    choir_transcript t = {.text = r->text, .duration_s = r->duration, .segments = segs, .n_segments = r->n_segments};
    choir_transcript_opts o = {.pretty = 1};
    size_t len = 0;
    char *out = choir_transcript_write(&t, tf, &o, &len, NULL);
    choir_free(segs);
    if (!out) return -1;
    fwrite(out, 1, len, f);
    choir_free(out);
    return 0;
}

static int vt_stream(void *user, const char *text, size_t len) {
    (void)user;
    if (len) {
        fwrite(text, 1, len, stderr);
        fflush(stderr);
    }
    return 0;
}

static const char *STOPS[] = {"end of text", "max_new_tokens", "repetition loop", "cancelled"};

int choir_stt_vibevoice(const choir_stt_vibevoice_args *a) {
    choir_err err = {0};
    choir_vibevoice *m = choir_vibevoice_load(a->model_dir, &err);
    if (!m) {
        fprintf(stderr, "choir stt: %s\n", err.msg);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", a->model_dir);
    choir_tokenizer *tok = choir_tokenizer_load(a->tokenizer ? a->tokenizer : path, &err);
    if (!tok) {
        fprintf(stderr, "choir stt: %s (VibeVoice needs Qwen2.5's tokenizer.json; see --tokenizer)\n", err.msg);
        choir_vibevoice_free(m);
        return 1;
    }
    int status = 0;
    for (int i = 0; i < a->n_files; i++) {
        choir_audio au = {0};
        choir_decode_opts dop = {.target_rate = CHOIR_VIBEVOICE_SAMPLE_RATE, .mono = 1};
        choir_vibevoice_opts o;
        choir_vibevoice_default_opts(&o);
        o.context = a->context;
        o.max_new_tokens = a->max_new_tokens;
        if (a->max_audio_s > 0) o.max_audio_s = a->max_audio_s;
        if (a->stream) o.on_text = vt_stream;
        choir_vibevoice_result r;
        int rc = choir_cli_decode(a->files[i], &dop, &au, &err);
        if (!rc) rc = choir_vibevoice_transcribe(m, tok, au.samples, au.frames, CHOIR_VIBEVOICE_SAMPLE_RATE, &o, NULL,
                                                 &r, &err);
        if (a->stream) fprintf(stderr, "\n");
        choir_audio_clear(&au);
        if (rc) {
            fprintf(stderr, "choir stt: %s: %s\n", a->files[i], err.msg);
            status = 1;
            continue;
        }
        fprintf(stderr, "%s: %.1f s, %d audio tokens, prompt %d, generated %d (%s); encode %.2f s, prefill %.2f s, "
                "decode %.2f s\n", a->files[i], r.duration, r.n_audio_tokens, r.n_prompt, r.n_generated,
                STOPS[r.stop], r.t_encode, r.t_prefill, r.t_decode);
        if (r.stop == CHOIR_VIBEVOICE_STOP_LOOP)
            fprintf(stderr, "choir stt: %s: warning: a repetition loop (period %d tokens) stopped the decode; the "
                    "transcript ends there\n", a->files[i], r.loop_period);
        if (r.malformed) {
            fprintf(stderr, "choir stt: %s: the model's output is not a JSON transcript; writing it as it is\n",
                    a->files[i]);
            status = 1;
        }
        FILE *out = stdout;
        if (a->output_dir) {
            const char *base = strrchr(a->files[i], '/');
            base = base ? base + 1 : strcmp(a->files[i], "-") == 0 ? "stdin" : a->files[i];
            const char *dot = strrchr(base, '.');
            int bl = dot ? (int)(dot - base) : (int)strlen(base);
            snprintf(path, sizeof path, "%s/%.*s.%s", a->output_dir, bl, base,
                     strcmp(a->format, "verbose_json") == 0 ? "json" : a->format);
            if (!(out = fopen(path, "w"))) {
                fprintf(stderr, "choir stt: cannot write %s\n", path);
                status = 1;
            }
        }
        if (out) {
            if (vt_write(out, a->format, &r)) status = 1;
            if (out != stdout) fclose(out);
        }
        choir_vibevoice_result_clear(&r);
    }
    choir_tokenizer_free(tok);
    choir_vibevoice_free(m);
    return status;
}
