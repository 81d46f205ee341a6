/* The prompt VibeVoice-ASR was trained on, and parsing of what it writes. */
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/tokenizer.h"
#include "choir/vibevoice.h"

static const char SYSTEM_AND_USER[] =
    "<|im_start|>system\nYou are a helpful assistant that transcribes audio input into text output in JSON "
    "format.<|im_end|>\n<|im_start|>user\n<|object_ref_start|>";
static const char KEYS[] = "transcribe it with these keys: Start time, End time, Speaker ID, Content";

/* Appends src[n] to the growing id list. */
static int append(int32_t **ids, int *n, int *cap, const int32_t *src, int k) {
    if (*n + k > *cap) {
        int c = (*cap ? *cap * 2 : 256) + k;
        int32_t *g = choir_realloc(*ids, (size_t)c * sizeof *g);
        if (!g) return CHOIR_ENOMEM;
        *ids = g;
        *cap = c;
    }
    memcpy(*ids + *n, src, (size_t)k * sizeof *src);
    *n += k;
    return 0;
}

static int append_text(const choir_tokenizer *tok, int special, const char *text, int32_t **ids, int *n,
                       int *cap, choir_err *err) {
    int32_t *t = NULL;
    int k = 0;
    int rc = special ? choir_tokenizer_encode_special(tok, text, strlen(text), &t, &k, err)
                     : choir_tokenizer_encode(tok, text, strlen(text), &t, &k, err);
    if (!rc && append(ids, n, cap, t, k)) rc = choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
    choir_free(t);
    return rc;
}

int choir_vibevoice_prompt(const choir_tokenizer *tok, const choir_vibevoice_dims *dims, int n_audio,
                           double duration_s, const char *context, int32_t **ids, int *n_ids, choir_err *err) {
    *ids = NULL;
    *n_ids = 0;
    int32_t im_end = choir_tokenizer_lookup(tok, "<|im_end|>");
    if (im_end < 0 || choir_tokenizer_lookup(tok, "<|object_ref_start|>") != dims->audio_bos)
        return choir_err_set(err, CHOIR_EFORMAT, "vibevoice: the tokenizer lacks the chat and audio special "
                             "tokens (<|im_end|>, <|object_ref_start|> = %d)", (int)dims->audio_bos);
    if (n_audio < 0) return choir_err_set(err, CHOIR_EINVAL, "vibevoice: negative audio token count");
    /* The user turn's text between <|object_ref_end|> and <|im_end|> is one
     * segment: encoded in one piece (so BPE sees the context in place) and
     * as plain text (so the context cannot inject control tokens). */
    size_t cl = context ? strlen(context) : 0;
    char *suffix = choir_alloc(CHOIR_MEM_OTHER, cl + sizeof KEYS + 128);
    if (!suffix) return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
    if (cl) sprintf(suffix, "\nThis is a %.2f seconds audio, with extra info: %s\n\nPlease %s", duration_s, context, KEYS);
    else sprintf(suffix, "\nThis is a %.2f seconds audio, please %s", duration_s, KEYS);
    int cap = 0, rc = append_text(tok, 1, SYSTEM_AND_USER, ids, n_ids, &cap, err);
    for (int i = 0; !rc && i < n_audio; i++)
        if (append(ids, n_ids, &cap, &dims->audio_token, 1)) rc = CHOIR_ENOMEM;
    if (!rc && append(ids, n_ids, &cap, &dims->audio_eos, 1)) rc = CHOIR_ENOMEM;
    if (!rc) rc = append_text(tok, 0, suffix, ids, n_ids, &cap, err);
    if (!rc && append(ids, n_ids, &cap, &im_end, 1)) rc = CHOIR_ENOMEM;
    if (!rc) rc = append_text(tok, 0, "\n", ids, n_ids, &cap, err);
    choir_free(suffix);
    if (rc) {
        if (rc == CHOIR_ENOMEM) choir_err_set(err, rc, "vibevoice: out of memory");
        choir_free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    return rc;
}

/* --- output --------------------------------------------------------------- */

/* The value of the first key of `names` present in o, any case. */
static const cJSON *field(const cJSON *o, const char *const *names) {
    for (const char *const *n = names; *n; n++) {
        const cJSON *e;
        cJSON_ArrayForEach(e, o)
            if (e->string && strcasecmp(e->string, *n) == 0) return e;
    }
    return NULL;
}

static int number(const cJSON *v, double *out) {
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return 1;
    }
    if (cJSON_IsString(v) && v->valuestring) {
        char *end;
        *out = strtod(v->valuestring, &end);
        return end != v->valuestring;
    }
    return 0;
}

static const char *const K_START[] = {"Start", "Start time", "start_time", NULL};
static const char *const K_END[] = {"End", "End time", "end_time", NULL};
static const char *const K_SPEAKER[] = {"Speaker", "Speaker ID", "speaker_id", NULL};
static const char *const K_TEXT[] = {"Content", "Text", NULL};

/* Adds the segment of object o; 0 when o is not one. */
static int take(const cJSON *o, choir_vibevoice_segment **segs, int *n, int *cap) {
    const cJSON *t = field(o, K_TEXT);
    double start = 0, end = 0, spk = -1;
    if (!cJSON_IsObject(o) || !cJSON_IsString(t)) return 0;
    number(field(o, K_START), &start);
    number(field(o, K_END), &end);
    if (!number(field(o, K_SPEAKER), &spk)) spk = -1;
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 16;
        choir_vibevoice_segment *g = choir_realloc(*segs, (size_t)c * sizeof *g);
        if (!g) return -1;
        *segs = g;
        *cap = c;
    }
    char *text = choir_strdup(t->valuestring);
    if (!text) return -1;
    (*segs)[(*n)++] = (choir_vibevoice_segment){start, end, spk >= 0 && spk < 1e6 ? (int)spk : -1, text};
    return 1;
}

/* End of the JSON object starting at s[0] == '{' (one past its '}'), or
 * NULL when the text ends first. */
static const char *object_end(const char *s) {
    int depth = 0, in_str = 0;
    for (const char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
        } else if (*p == '"') in_str = 1;
        else if (*p == '{') depth++;
        else if (*p == '}' && --depth == 0) return p + 1;
    }
    return NULL;
}

int choir_vibevoice_parse(const char *text, choir_vibevoice_segment **segs, choir_err *err) {
    *segs = NULL;
    int n = 0, cap = 0;
    const char *lb = text ? strchr(text, '[') : NULL;
    if (!lb) return choir_err_set(err, CHOIR_EFORMAT, "vibevoice: the output has no JSON list");
    const char *end = NULL;
    cJSON *arr = cJSON_ParseWithOpts(lb, &end, 0);
    if (cJSON_IsArray(arr)) {
        const cJSON *o;
        cJSON_ArrayForEach(o, arr) {
            if (take(o, segs, &n, &cap) < 0) {
                cJSON_Delete(arr);
                choir_vibevoice_segments_free(*segs, n);
                *segs = NULL;
                return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
            }
        }
        int empty = cJSON_GetArraySize(arr) == 0;
        cJSON_Delete(arr);
        if (n > 0 || empty) return n;
        return choir_err_set(err, CHOIR_EFORMAT, "vibevoice: the output's JSON list holds no segment objects");
    }
    cJSON_Delete(arr);
    /* A list cut short (or with a broken element): keep its complete objects. */
    for (const char *p = strchr(lb, '{'); p; p = strchr(p, '{')) {
        const char *e = object_end(p);
        if (!e) break;
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(e - p));
        int r = o ? take(o, segs, &n, &cap) : 0;
        cJSON_Delete(o);
        if (r < 0) {
            choir_vibevoice_segments_free(*segs, n);
            *segs = NULL;
            return choir_err_set(err, CHOIR_ENOMEM, "vibevoice: out of memory");
        }
        p = r > 0 ? e : p + 1;
    }
    if (n > 0) return n;
    choir_free(*segs);
    *segs = NULL;
    return choir_err_set(err, CHOIR_EFORMAT, "vibevoice: the output is not a JSON list of segments");
}

void choir_vibevoice_segments_free(choir_vibevoice_segment *segs, int n) {
    if (!segs) return;
    for (int i = 0; i < n; i++) choir_free(segs[i].text);
    choir_free(segs);
}
