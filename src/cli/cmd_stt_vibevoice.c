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
#include "choir/vibevoice.h"
#include "cli/cli.h"

static void vt_time(FILE *f, double t, char sep) {
    if (t < 0) t = 0;
    long ms = lround(t * 1000.0);
    fprintf(f, "%02ld:%02ld:%02ld%c%03ld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, sep, ms % 1000);
}

static int vt_write(FILE *f, const char *fmt, const choir_vibevoice_result *r) {
    if (strcmp(fmt, "txt") == 0) {
        fprintf(f, "%s\n", r->text);
        return 0;
    }
    if (strcmp(fmt, "srt") == 0 || strcmp(fmt, "vtt") == 0) {
        int vtt = fmt[0] == 'v';
        if (vtt) fprintf(f, "WEBVTT\n\n");
        for (int i = 0; i < r->n_segments; i++) {
            const choir_vibevoice_segment *s = &r->segments[i];
            if (!vtt) fprintf(f, "%d\n", i + 1);
            vt_time(f, s->start, vtt ? '.' : ',');
            fprintf(f, " --> ");
            vt_time(f, s->end, vtt ? '.' : ',');
            if (s->speaker < 0) fprintf(f, "\n%s\n\n", s->text);
            else if (vtt) fprintf(f, "\n<v Speaker %d>%s\n\n", s->speaker, s->text);
            else fprintf(f, "\n[Speaker %d] %s\n\n", s->speaker, s->text);
        }
        return 0;
    }
    cJSON *root = cJSON_CreateObject();
    if (!root) return -1;
    if (strcmp(fmt, "verbose_json") == 0) {
        cJSON_AddStringToObject(root, "task", "transcribe");
        cJSON_AddNumberToObject(root, "duration", r->duration);
        cJSON_AddStringToObject(root, "text", r->text);
        cJSON *segs = cJSON_AddArrayToObject(root, "segments");
        for (int i = 0; segs && i < r->n_segments; i++) {
            const choir_vibevoice_segment *s = &r->segments[i];
            cJSON *o = cJSON_CreateObject();
            if (!o) break;
            cJSON_AddNumberToObject(o, "id", i);
            cJSON_AddNumberToObject(o, "start", s->start);
            cJSON_AddNumberToObject(o, "end", s->end);
            if (s->speaker >= 0) cJSON_AddNumberToObject(o, "speaker", s->speaker);
            cJSON_AddStringToObject(o, "text", s->text);
            cJSON_AddItemToArray(segs, o);
        }
    } else {
        cJSON_AddStringToObject(root, "text", r->text);
    }
    char *js = cJSON_Print(root);
    if (js) fprintf(f, "%s\n", js);
    free(js);
    cJSON_Delete(root);
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
