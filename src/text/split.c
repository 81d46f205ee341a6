/* Packing phonemized clauses into pieces the model accepts (<= 510 phonemes).
 *
 * Pieces end where speech pauses anyway: at the last sentence end that fits,
 * else at the last clause end, else (one clause longer than a piece) at a
 * word boundary. Each piece is synthesised on its own, so a cut inside a
 * sentence costs prosody; that is why sentence ends are preferred. */
#include <string.h>

#include "choir/alloc.h"
#include "choir/phonemizer.h"

typedef struct pieces {
    choir_piece_list *out;
    int cap;
} pieces;

static int push(pieces *ps, const char *text, size_t len) {
    choir_piece_list *l = ps->out;
    if (l->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 8;
        choir_piece *items = choir_realloc(l->items, (size_t)cap * sizeof *items);
        if (!items) return CHOIR_ENOMEM;
        l->items = items;
        ps->cap = cap;
    }
    char *s = choir_alloc(CHOIR_MEM_OTHER, len + 1);
    if (!s) return CHOIR_ENOMEM;
    memcpy(s, text, len);
    s[len] = 0;
    l->items[l->n].phonemes = s;
    l->items[l->n].n_phonemes = choir_utf8_count(s);
    l->n++;
    return 0;
}

/* Byte length of the first `n` code points of s (or all of s). */
static size_t prefix_bytes(const char *s, int n) {
    size_t i = 0;
    for (int k = 0; s[i] && k < n; k++) {
        i++;
        while ((s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

/* A clause longer than a piece: cut at spaces, a word longer than a piece
 * wherever the limit falls. */
static int push_long(pieces *ps, const char *s, int max) {
    while (*s) {
        while (*s == ' ') s++;
        if (!*s) break;
        if (choir_utf8_count(s) <= max) return push(ps, s, strlen(s));
        size_t limit = prefix_bytes(s, max), cut = limit;
        /* the last space within the limit (a space right at the limit counts) */
        while (cut > 0 && s[cut] != ' ') cut--;
        if (cut == 0) cut = limit;
        int rc = push(ps, s, cut);
        if (rc) return rc;
        s += cut;
    }
    return 0;
}

int choir_split_pieces(const choir_clause_list *clauses, int max_phonemes,
                       bool first_clause_alone, choir_piece_list *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    if (!clauses || max_phonemes < 1)
        return choir_err_set(err, CHOIR_EINVAL, "split: no clauses or a limit below 1");
    pieces ps = {.out = out};
    int rc = 0;
    char *joined = NULL;
    int i = 0;
    while (i < clauses->n && !rc) {
        const choir_clause *c = clauses->items;
        if (c[i].n_phonemes > max_phonemes) {
            rc = push_long(&ps, c[i].phonemes, max_phonemes);
            i++;
            continue;
        }
        /* the clauses that fit, and the last sentence end among them */
        int j = i, total = 0, last_sentence = -1;
        while (j < clauses->n) {
            int add = c[j].n_phonemes + (j > i ? 1 : 0);
            if (total + add > max_phonemes) break;
            total += add;
            if (c[j].sentence_end) last_sentence = j;
            j++;
            if (first_clause_alone && out->n == 0) break;
        }
        int end = j; /* exclusive */
        if (j < clauses->n && last_sentence >= i && !(first_clause_alone && out->n == 0))
            end = last_sentence + 1;
        size_t bytes = 0;
        for (int k = i; k < end; k++) bytes += strlen(c[k].phonemes) + 1;
        joined = choir_alloc(CHOIR_MEM_OTHER, bytes + 1);
        if (!joined) {
            rc = CHOIR_ENOMEM;
            break;
        }
        size_t at = 0;
        for (int k = i; k < end; k++) {
            if (k > i) joined[at++] = ' ';
            size_t l = strlen(c[k].phonemes);
            memcpy(joined + at, c[k].phonemes, l);
            at += l;
        }
        rc = push(&ps, joined, at);
        choir_free(joined);
        joined = NULL;
        i = end;
    }
    if (rc) {
        choir_piece_list_free(out);
        return choir_err_set(err, rc, "split: out of memory");
    }
    return 0;
}

void choir_piece_list_free(choir_piece_list *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++) choir_free(l->items[i].phonemes);
    choir_free(l->items);
    memset(l, 0, sizeof *l);
}
