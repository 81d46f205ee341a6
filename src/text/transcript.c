/* Transcripts in OpenAI's response formats (choir/transcript.h): json, text,
 * srt, vtt and verbose_json, for the server, `choir stt` and the job worker. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/transcript.h"

int choir_transcript_format_parse(const char *name, choir_transcript_format *out)
{
    static const struct {
        const char *name;
        choir_transcript_format f;
    } names[] = {{"json", CHOIR_TRANSCRIPT_JSON}, {"text", CHOIR_TRANSCRIPT_TEXT}, {"txt", CHOIR_TRANSCRIPT_TEXT},
                 {"srt", CHOIR_TRANSCRIPT_SRT},   {"vtt", CHOIR_TRANSCRIPT_VTT},   {"verbose_json", CHOIR_TRANSCRIPT_VERBOSE_JSON}};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].f;
            return 0;
        }
    return CHOIR_EINVAL;
}

const char *choir_transcript_format_mime(choir_transcript_format f)
{
    switch (f) {
    case CHOIR_TRANSCRIPT_TEXT:
    case CHOIR_TRANSCRIPT_SRT: return "text/plain; charset=utf-8";
    case CHOIR_TRANSCRIPT_VTT: return "text/vtt; charset=utf-8";
    default: return "application/json";
    }
}

/* Whisper's languages, in its code order, under the names OpenAI's API
 * reports in verbose_json. */
static const char *const LANGUAGES[][2] = {
    {"en", "english"},    {"zh", "chinese"},      {"de", "german"},        {"es", "spanish"},
    {"ru", "russian"},    {"ko", "korean"},       {"fr", "french"},        {"ja", "japanese"},
    {"pt", "portuguese"}, {"tr", "turkish"},      {"pl", "polish"},        {"ca", "catalan"},
    {"nl", "dutch"},      {"ar", "arabic"},       {"sv", "swedish"},       {"it", "italian"},
    {"id", "indonesian"}, {"hi", "hindi"},        {"fi", "finnish"},       {"vi", "vietnamese"},
    {"he", "hebrew"},     {"uk", "ukrainian"},    {"el", "greek"},         {"ms", "malay"},
    {"cs", "czech"},      {"ro", "romanian"},     {"da", "danish"},        {"hu", "hungarian"},
    {"ta", "tamil"},      {"no", "norwegian"},    {"th", "thai"},          {"ur", "urdu"},
    {"hr", "croatian"},   {"bg", "bulgarian"},    {"lt", "lithuanian"},    {"la", "latin"},
    {"mi", "maori"},      {"ml", "malayalam"},    {"cy", "welsh"},         {"sk", "slovak"},
    {"te", "telugu"},     {"fa", "persian"},      {"lv", "latvian"},       {"bn", "bengali"},
    {"sr", "serbian"},    {"az", "azerbaijani"},  {"sl", "slovenian"},     {"kn", "kannada"},
    {"et", "estonian"},   {"mk", "macedonian"},   {"br", "breton"},        {"eu", "basque"},
    {"is", "icelandic"},  {"hy", "armenian"},     {"ne", "nepali"},        {"mn", "mongolian"},
    {"bs", "bosnian"},    {"kk", "kazakh"},       {"sq", "albanian"},      {"sw", "swahili"},
    {"gl", "galician"},   {"mr", "marathi"},      {"pa", "punjabi"},       {"si", "sinhala"},
    {"km", "khmer"},      {"sn", "shona"},        {"yo", "yoruba"},        {"so", "somali"},
    {"af", "afrikaans"},  {"oc", "occitan"},      {"ka", "georgian"},      {"be", "belarusian"},
    {"tg", "tajik"},      {"sd", "sindhi"},       {"gu", "gujarati"},      {"am", "amharic"},
    {"yi", "yiddish"},    {"lo", "lao"},          {"uz", "uzbek"},         {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},   {"tk", "turkmen"},       {"nn", "nynorsk"},
    {"mt", "maltese"},    {"sa", "sanskrit"},     {"lb", "luxembourgish"}, {"my", "myanmar"},
    {"bo", "tibetan"},    {"tl", "tagalog"},      {"mg", "malagasy"},      {"as", "assamese"},
    {"tt", "tatar"},      {"haw", "hawaiian"},    {"ln", "lingala"},       {"ha", "hausa"},
    {"ba", "bashkir"},    {"jw", "javanese"},     {"su", "sundanese"},     {"yue", "cantonese"},
};

const char *choir_language_name(const char *code)
{
    for (size_t i = 0; code && i < sizeof LANGUAGES / sizeof LANGUAGES[0]; i++)
        if (strcmp(LANGUAGES[i][0], code) == 0)
            return LANGUAGES[i][1];
    return NULL;
}

/* Leading and trailing white space of a text: pointer and length within. */
static const char *trimmed(const char *t, int *len)
{
    if (!t)
        t = "";
    while (*t == ' ' || *t == '\n' || *t == '\t')
        t++;
    size_t n = strlen(t);
    while (n > 0 && (t[n - 1] == ' ' || t[n - 1] == '\n' || t[n - 1] == '\t'))
        n--;
    *len = (int)n;
    return t;
}

/* Segment i's times, in order and inside the audio. */
static void times(const choir_transcript *t, int i, double prev_end, double *start, double *end)
{
    double a = t->segments[i].start_s, b = t->segments[i].end_s;
    if (!(a >= prev_end))
        a = prev_end;
    if (t->duration_s > 0 && a > t->duration_s)
        a = t->duration_s;
    if (t->duration_s > 0 && b > t->duration_s)
        b = t->duration_s;
    if (!(b >= a))
        b = a;
    *start = a;
    *end = b;
}

/* "HH:MM:SS,mmm" (srt) or "HH:MM:SS.mmm" (vtt). */
static void put_time(choir_buf *o, double s, char sep)
{
    long long ms = llround(s * 1000.0);
    if (ms < 0)
        ms = 0;
    choir_buf_printf(o, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, sep, ms % 1000);
}

/* The caller's cues (laid out by words), in order and inside the audio. */
static void write_given_cues(const choir_transcript *t, int vtt, choir_buf *o)
{
    double prev = 0;
    for (int i = 0; i < t->n_cues; i++) {
        const choir_transcript_cue *c = &t->cues[i];
        double a = c->start_s, b = c->end_s;
        if (!(a >= prev))
            a = prev;
        if (t->duration_s > 0 && a > t->duration_s)
            a = t->duration_s;
        if (t->duration_s > 0 && b > t->duration_s)
            b = t->duration_s;
        if (!(b >= a))
            b = a;
        prev = b;
        if (!vtt)
            choir_buf_printf(o, "%d\n", i + 1);
        put_time(o, a, vtt ? '.' : ',');
        choir_buf_printf(o, " --> ");
        put_time(o, b, vtt ? '.' : ',');
        choir_buf_printf(o, "\n%s\n\n", c->text ? c->text : "");
    }
}

static void write_cues(const choir_transcript *t, int vtt, choir_buf *o)
{
    if (vtt)
        choir_buf_printf(o, "WEBVTT\n\n");
    if (t->n_cues > 0) {
        write_given_cues(t, vtt, o);
        return;
    }
    choir_segment whole = {.start_s = 0, .end_s = t->duration_s, .text = t->text};
    choir_transcript one = *t;
    if (t->n_segments == 0) {
        one.segments = &whole;
        one.n_segments = 1;
    }
    double prev = 0;
    for (int i = 0; i < one.n_segments; i++) {
        const choir_segment *g = &one.segments[i];
        double a, b;
        times(&one, i, prev, &a, &b);
        prev = b;
        int n;
        const char *text = trimmed(g->text, &n);
        if (!vtt)
            choir_buf_printf(o, "%d\n", i + 1);
        put_time(o, a, vtt ? '.' : ',');
        choir_buf_printf(o, " --> ");
        put_time(o, b, vtt ? '.' : ',');
        if (g->has_speaker && vtt)
            choir_buf_printf(o, "\n<v Speaker %d>%.*s\n\n", g->speaker, n, text);
        else if (g->has_speaker)
            choir_buf_printf(o, "\n[Speaker %d] %.*s\n\n", g->speaker, n, text);
        else
            choir_buf_printf(o, "\n%.*s\n\n", n, text);
    }
}

/* Seconds rounded to the millisecond, as the API reports them. */
static double ms_round(double s)
{
    return round(s * 1000.0) / 1000.0;
}

/* "words": every segment's words, their spaces trimmed, each start after
 * the previous word's end and both times inside the audio. 0 or -1. */
static int add_words(const choir_transcript *t, cJSON *root)
{
    cJSON *arr = cJSON_AddArrayToObject(root, "words");
    if (!arr)
        return -1;
    double prev = 0;
    for (int i = 0; i < t->n_segments; i++)
        for (int k = 0; k < t->segments[i].n_words; k++) {
            const choir_word *w = &t->segments[i].words[k];
            double a = w->start_s, b = w->end_s;
            if (!(a >= prev))
                a = prev;
            if (t->duration_s > 0 && a > t->duration_s)
                a = t->duration_s;
            if (t->duration_s > 0 && b > t->duration_s)
                b = t->duration_s;
            if (!(b >= a))
                b = a;
            prev = b;
            int n;
            const char *text = trimmed(w->text, &n);
            char *word = choir_alloc(CHOIR_MEM_IO, (size_t)n + 1);
            cJSON *e = word ? cJSON_CreateObject() : NULL;
            if (e && !cJSON_AddItemToArray(arr, e)) {
                cJSON_Delete(e);
                e = NULL;
            }
            if (word) {
                memcpy(word, text, (size_t)n);
                word[n] = 0;
            }
            int ok = e && cJSON_AddStringToObject(e, "word", word) && cJSON_AddNumberToObject(e, "start", ms_round(a)) &&
                     cJSON_AddNumberToObject(e, "end", ms_round(b));
            choir_free(word);
            if (!ok)
                return -1;
        }
    return 0;
}

static cJSON *verbose_json(const choir_transcript *t, const char *text)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    const char *name = choir_language_name(t->language);
    int ok = cJSON_AddStringToObject(root, "task", t->translate ? "translate" : "transcribe") &&
             cJSON_AddStringToObject(root, "language", name ? name : t->language ? t->language : "unknown") &&
             cJSON_AddNumberToObject(root, "duration", ms_round(t->duration_s)) &&
             cJSON_AddStringToObject(root, "text", text);
    cJSON *segs = ok ? cJSON_AddArrayToObject(root, "segments") : NULL;
    double prev = 0;
    for (int i = 0; segs && i < t->n_segments; i++) {
        const choir_segment *g = &t->segments[i];
        double a, b;
        times(t, i, prev, &a, &b);
        prev = b;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(segs, e)) {
            cJSON_Delete(e);
            segs = NULL;
            break;
        }
        cJSON *toks = NULL;
        ok = cJSON_AddNumberToObject(e, "id", i) && cJSON_AddNumberToObject(e, "seek", (double)g->seek) &&
             cJSON_AddNumberToObject(e, "start", ms_round(a)) && cJSON_AddNumberToObject(e, "end", ms_round(b)) &&
             cJSON_AddStringToObject(e, "text", g->text ? g->text : "") &&
             (!g->has_speaker || cJSON_AddNumberToObject(e, "speaker", g->speaker)) &&
             (toks = cJSON_AddArrayToObject(e, "tokens")) != NULL;
        for (int k = 0; ok && k < g->n_tokens; k++) {
            cJSON *v = cJSON_CreateNumber(g->tokens[k]);
            ok = v && cJSON_AddItemToArray(toks, v);
        }
        double avg = g->has_decoding ? g->avg_logprob : g->probability > 0 ? log(g->probability) : 0;
        ok = ok && cJSON_AddNumberToObject(e, "temperature", g->temperature) &&
             cJSON_AddNumberToObject(e, "avg_logprob", avg) &&
             cJSON_AddNumberToObject(e, "compression_ratio", g->compression_ratio) &&
             cJSON_AddNumberToObject(e, "no_speech_prob", g->no_speech_prob);
        if (!ok)
            segs = NULL;
    }
    if (segs && t->no_segments)
        cJSON_DeleteItemFromObjectCaseSensitive(root, "segments");
    if (!segs || (t->words && add_words(t, root) < 0)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

char *choir_transcript_write(const choir_transcript *t, choir_transcript_format f, const choir_transcript_opts *opts,
                             size_t *len, choir_err *err)
{
    if (!t) {
        choir_err_set(err, CHOIR_EINVAL, "transcript: nothing to write");
        return NULL;
    }
    choir_transcript_opts d = {0};
    const choir_transcript_opts *o = opts ? opts : &d;
    choir_buf out = CHOIR_BUF_INIT(CHOIR_MEM_IO);
    int n;
    const char *text = trimmed(t->text, &n);
    char *flat = choir_alloc(CHOIR_MEM_IO, (size_t)n + 1);
    if (!flat) {
        choir_err_set(err, CHOIR_ENOMEM, "transcript: out of memory");
        return NULL;
    }
    memcpy(flat, text, (size_t)n);
    flat[n] = 0;
    if (f == CHOIR_TRANSCRIPT_TEXT) {
        choir_buf_printf(&out, "%s\n", flat);
    } else if (f == CHOIR_TRANSCRIPT_SRT || f == CHOIR_TRANSCRIPT_VTT) {
        write_cues(t, f == CHOIR_TRANSCRIPT_VTT, &out);
    } else {
        cJSON *root = NULL;
        if (f == CHOIR_TRANSCRIPT_VERBOSE_JSON) {
            root = verbose_json(t, flat);
        } else if ((root = cJSON_CreateObject()) && !cJSON_AddStringToObject(root, "text", flat)) {
            cJSON_Delete(root);
            root = NULL;
        }
        char *js = root ? (o->pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root)) : NULL;
        cJSON_Delete(root);
        if (js)
            choir_buf_printf(&out, "%s%s", js, o->pretty ? "\n" : "");
        else
            out.oom = 1; /* cJSON ran out of memory: the buffer reports it */
        cJSON_free(js);
    }
    choir_free(flat);
    char *written = choir_buf_take(&out, len);
    if (!written)
        choir_err_set(err, CHOIR_ENOMEM, "transcript: out of memory");
    return written;
}
