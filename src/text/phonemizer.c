/* English G2P through libespeak-ng, mapped to Kokoro's phoneme inventory.
 *
 * The text is cut into clauses here, at clause punctuation, because espeak's
 * own phoneme output drops punctuation: each clause's words go to espeak, and
 * the punctuation is put back after its phonemes, as Kokoro's front ends do.
 * espeak-ng keeps one global state (voice, buffers), so initialisation, voice
 * selection and translation all happen under one process-wide mutex. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <espeak-ng/speak_lib.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/log.h"
#include "choir/phonemizer.h"

struct choir_phonemizer {
    choir_phonemizer_lang lang;
};

static pthread_mutex_t g_espeak_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_espeak_state; /* 0 untried, 1 ready, -1 failed; under the lock */

int choir_utf8_count(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Python's str.replace: every non-overlapping occurrence, left to right. */
static char *replace_all(char *s, const char *from, const char *to) {
    if (!s || !strstr(s, from)) return s;
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    size_t fl = strlen(from);
    const char *p = s, *hit;
    while ((hit = strstr(p, from))) {
        choir_buf_append(&b, p, (size_t)(hit - p));
        choir_buf_puts(&b, to);
        p = hit + fl;
    }
    choir_buf_puts(&b, p);
    choir_free(s);
    return choir_buf_take(&b, NULL);
}

/* (X)U+0329 -> ᵊX: a syllabic consonant becomes schwa + consonant */
static char *syllabic_to_schwa(char *s) {
    static const char mark[] = "\xCC\xA9"; /* U+0329 */
    if (!s || !strstr(s, mark)) return s;
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    const char *p = s;
    while (*p) {
        size_t len = 1;
        while ((p[len] & 0xC0) == 0x80) len++;
        if (strncmp(p + len, mark, 2) == 0 && *p != ' ') {
            choir_buf_puts(&b, "ᵊ");
            choir_buf_append(&b, p, len);
            p += len + 2;
        } else {
            choir_buf_append(&b, p, len);
            p += len;
        }
    }
    choir_free(s);
    return choir_buf_take(&b, NULL);
}

char *choir_phonemizer_map_ipa(const char *ipa, choir_phonemizer_lang lang) {
    /* longest keys first; equal lengths in the order Kokoro's fallback lists them */
    static const char *const e2m[][2] = {
        {"ʔˌn\xCC\xA9", "ʔn"}, {"ʔn\xCC\xA9", "ʔn"},
        {"a^ɪ", "I"}, {"a^ʊ", "W"}, {"d^ʒ", "ʤ"}, {"e^ɪ", "A"}, {"t^ʃ", "ʧ"}, {"ɔ^ɪ", "Y"},
        {"ə^l", "ᵊl"},
        {"ʲo", "jo"}, {"ʲə", "jə"},
        {"e", "A"}, {"ʲ", ""}, {"ɚ", "əɹ"}, {"r", "ɹ"}, {"x", "k"}, {"ç", "k"}, {"ɐ", "ə"},
        {"ɬ", "l"}, {"\xCC\x83", ""},
    };
    static const char *const us[][2] = {
        {"o^ʊ", "O"}, {"ɜːɹ", "ɜɹ"}, {"ɜː", "ɜɹ"}, {"ɪə", "iə"}, {"ː", ""},
    };
    static const char *const gb[][2] = {{"e^ə", "ɛː"}, {"iə", "ɪə"}, {"ə^ʊ", "Q"}};
    static const char *const tail[][2] = {{"o", "ɔ"}, {"ɾ", "T"}, {"ʔ", "t"}, {"^", ""}};
    char *s = choir_strdup(ipa ? ipa : "");
    for (size_t i = 0; i < sizeof e2m / sizeof e2m[0]; i++) s = replace_all(s, e2m[i][0], e2m[i][1]);
    s = syllabic_to_schwa(s);
    s = replace_all(s, "\xCC\xA9", "");
    if (lang == CHOIR_PHONEMIZER_EN_GB)
        for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) s = replace_all(s, gb[i][0], gb[i][1]);
    else
        for (size_t i = 0; i < sizeof us / sizeof us[0]; i++) s = replace_all(s, us[i][0], us[i][1]);
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) s = replace_all(s, tail[i][0], tail[i][1]);
    return s;
}

int choir_phonemizer_lang_parse(const char *name, choir_phonemizer_lang *out) {
    static const char *const us[] = {"en-us", "en_us", "en", "a", "american", "us"};
    static const char *const gb[] = {"en-gb", "en_gb", "b", "british", "gb", "uk"};
    for (size_t i = 0; name && i < sizeof us / sizeof us[0]; i++)
        if (strcmp(name, us[i]) == 0) return *out = CHOIR_PHONEMIZER_EN_US, 0;
    for (size_t i = 0; name && i < sizeof gb / sizeof gb[0]; i++)
        if (strcmp(name, gb[i]) == 0) return *out = CHOIR_PHONEMIZER_EN_GB, 0;
    return CHOIR_EINVAL;
}

static const char *voice_name(choir_phonemizer_lang lang) {
    /* espeak-ng names voices by file: "en" is British (gmw/en), "en-us" American */
    return lang == CHOIR_PHONEMIZER_EN_GB ? "en" : "en-us";
}

choir_phonemizer *choir_phonemizer_create(choir_phonemizer_lang lang, choir_err *err) {
    if (lang != CHOIR_PHONEMIZER_EN_US && lang != CHOIR_PHONEMIZER_EN_GB) {
        choir_err_set(err, CHOIR_EINVAL, "phonemizer: unknown language %d", (int)lang);
        return NULL;
    }
    pthread_mutex_lock(&g_espeak_lock);
    if (g_espeak_state == 0) {
        int rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL, espeakINITIALIZE_DONT_EXIT);
        g_espeak_state = rate > 0 ? 1 : -1;
    }
    int state = g_espeak_state;
    int voice_ok = state == 1 && espeak_SetVoiceByName(voice_name(lang)) == EE_OK;
    pthread_mutex_unlock(&g_espeak_lock);
    if (state != 1) {
        choir_err_set(err, CHOIR_ENOTFOUND, "phonemizer: espeak-ng could not start (is espeak-ng-data installed?)");
        return NULL;
    }
    if (!voice_ok) {
        choir_err_set(err, CHOIR_ENOTFOUND, "phonemizer: espeak-ng has no voice %s", voice_name(lang));
        return NULL;
    }
    choir_phonemizer *p = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *p);
    if (!p) {
        choir_err_set(err, CHOIR_ENOMEM, "phonemizer: out of memory");
        return NULL;
    }
    p->lang = lang;
    return p;
}

void choir_phonemizer_free(choir_phonemizer *p) { choir_free(p); }

/* espeak IPA of `words` (no clause punctuation), multi-letter phonemes tied with '^' */
static char *espeak_ipa(const choir_phonemizer *p, const char *words) {
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    choir_buf_puts(&b, "");
    pthread_mutex_lock(&g_espeak_lock);
    if (espeak_SetVoiceByName(voice_name(p->lang)) == EE_OK) {
        const void *ptr = words;
        const int mode = espeakPHONEMES_IPA | espeakPHONEMES_TIE | ('^' << 8);
        while (ptr && *(const char *)ptr) {
            const char *ph = espeak_TextToPhonemes(&ptr, espeakCHARS_UTF8, mode);
            if (!ph) break;
            if (*ph) {
                if (b.len) choir_buf_puts(&b, " ");
                choir_buf_puts(&b, ph);
            }
        }
    }
    pthread_mutex_unlock(&g_espeak_lock);
    return choir_buf_take(&b, NULL);
}

/* Clause punctuation kept in the phonemes; `strong` ones end a sentence. */
static int punct_at(const char *s, bool *strong) {
    static const char *const multi[] = {"—", "…"};
    for (int i = 0; i < 2; i++)
        if (strncmp(s, multi[i], strlen(multi[i])) == 0) {
            *strong = i == 1;
            return (int)strlen(multi[i]);
        }
    if (strchr(",;:.!?", *s) && *s) {
        /* "3.5", "1,000" and "e.g." mid-word are not clause ends */
        char next = s[1];
        if (next && !strchr(" \t\r\n\"')]”’", next) && !strchr(",;:.!?", next) &&
            (unsigned char)next < 0x80)
            return 0;
        *strong = strchr(".!?", *s) != NULL;
        return 1;
    }
    return 0;
}

static int add_clause(choir_clause_list *out, int *cap, char *phonemes, bool sentence_end) {
    if (out->n == *cap) {
        int ncap = *cap ? *cap * 2 : 16;
        choir_clause *items = choir_realloc(out->items, (size_t)ncap * sizeof *items);
        if (!items) return CHOIR_ENOMEM;
        out->items = items;
        *cap = ncap;
    }
    out->items[out->n].phonemes = phonemes;
    out->items[out->n].n_phonemes = choir_utf8_count(phonemes);
    out->items[out->n].sentence_end = sentence_end;
    out->n++;
    return 0;
}

/* Phonemizes one clause's words and appends its punctuation. */
static int emit(choir_phonemizer *p, const char *words, size_t wlen, const char *punct, size_t plen,
                bool sentence_end, choir_clause_list *out, int *cap) {
    char *text = choir_alloc(CHOIR_MEM_OTHER, wlen + 1);
    if (!text) return CHOIR_ENOMEM;
    memcpy(text, words, wlen);
    text[wlen] = 0;
    char *ipa = espeak_ipa(p, text);
    choir_free(text);
    char *ph = ipa ? choir_phonemizer_map_ipa(ipa, p->lang) : NULL;
    choir_free(ipa);
    if (!ph) return CHOIR_ENOMEM;
    size_t n = strlen(ph);
    while (n && ph[n - 1] == ' ') ph[--n] = 0;
    if (n == 0 && out->n > 0 && plen) {
        /* punctuation alone joins the previous clause */
        choir_clause *prev = &out->items[out->n - 1];
        size_t pl = strlen(prev->phonemes);
        char *joined = choir_realloc(prev->phonemes, pl + plen + 1);
        choir_free(ph);
        if (!joined) return CHOIR_ENOMEM;
        memcpy(joined + pl, punct, plen);
        joined[pl + plen] = 0;
        prev->phonemes = joined;
        prev->n_phonemes = choir_utf8_count(joined);
        prev->sentence_end = prev->sentence_end || sentence_end;
        return 0;
    }
    if (n == 0) {
        choir_free(ph);
        return 0;
    }
    char *full = choir_realloc(ph, n + plen + 1);
    if (!full) {
        choir_free(ph);
        return CHOIR_ENOMEM;
    }
    memcpy(full + n, punct, plen);
    full[n + plen] = 0;
    int rc = add_clause(out, cap, full, sentence_end);
    if (rc) choir_free(full);
    return rc;
}

int choir_phonemize_clauses(choir_phonemizer *p, const char *text, choir_clause_list *out,
                            choir_err *err) {
    memset(out, 0, sizeof *out);
    if (!p || !text) return choir_err_set(err, CHOIR_EINVAL, "phonemizer: no text");
    int cap = 0, rc = 0;
    const char *start = text, *s = text;
    while (*s) {
        bool strong = false;
        int plen = 0;
        if (*s == '\n') {
            plen = 1;
            strong = true;
        } else {
            plen = punct_at(s, &strong);
        }
        if (!plen) {
            s++;
            continue;
        }
        /* a run of punctuation ("?!", "...") stays together */
        const char *pend = s + plen;
        bool more = true;
        while (more && *pend && *pend != '\n') {
            bool st2 = false;
            int l2 = punct_at(pend, &st2);
            if (!l2) l2 = (strchr(".!?,;:", *pend) && *pend) ? 1 : 0;
            more = l2 > 0;
            if (more) strong = strong || st2 || strchr(".!?", *pend), pend += l2;
        }
        const char *punct = *s == '\n' ? "" : s;
        size_t punct_len = *s == '\n' ? 0 : (size_t)(pend - s);
        if ((rc = emit(p, start, (size_t)(s - start), punct, punct_len, strong, out, &cap))) break;
        start = s = pend;
    }
    if (!rc && s > start) rc = emit(p, start, (size_t)(s - start), "", 0, true, out, &cap);
    if (rc) {
        choir_clause_list_free(out);
        return choir_err_set(err, rc, "phonemizer: out of memory");
    }
    return 0;
}

void choir_clause_list_free(choir_clause_list *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++) choir_free(l->items[i].phonemes);
    choir_free(l->items);
    memset(l, 0, sizeof *l);
}

char *choir_phonemize(choir_phonemizer *p, const char *text, choir_err *err) {
    choir_clause_list l;
    if (choir_phonemize_clauses(p, text, &l, err) != 0) return NULL;
    choir_buf b = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    choir_buf_puts(&b, "");
    for (int i = 0; i < l.n; i++) {
        if (i) choir_buf_puts(&b, " ");
        choir_buf_puts(&b, l.items[i].phonemes);
    }
    choir_clause_list_free(&l);
    char *joined = choir_buf_take(&b, NULL);
    if (!joined) choir_err_set(err, CHOIR_ENOMEM, "phonemizer: out of memory");
    return joined;
}
