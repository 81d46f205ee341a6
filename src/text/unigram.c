/* SentencePiece-Unigram tokenization from tokenizer.json (see choir/unigram.h
 * for the pipeline). The vocabulary is one string pool with an open-addressing
 * hash index; Viterbi tries every vocabulary piece that starts at each
 * character (pieces are at most max_piece bytes long), which is what the
 * tokenizers library's trie walk visits, in the same order of length. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "text/unigram_internal.h"

#define UN_MAX_NORMS 16
#define UN_MAX_PRE 8
#define UN_MAX_AFFIX 8
#define UN_UNK_PENALTY 10.0

typedef enum { UP_METASPACE, UP_WHITESPACE_SPLIT } un_pre_kind;

typedef struct un_pre {
    un_pre_kind kind;
    char repl[8];      /* Metaspace replacement (UTF-8) */
    size_t repl_len;
    int prepend;       /* 0 never, 1 always, 2 first */
    int split;
} un_pre;

typedef struct un_added {
    char *content;
    size_t len;
    int32_t id;
} un_added;

struct choir_unigram {
    int n_vocab;
    char *pool;            /* NUL-terminated pieces */
    uint32_t *off;         /* [n_vocab] into pool */
    uint32_t *len;         /* [n_vocab] bytes */
    double *score;         /* [n_vocab] */
    int32_t *slots;        /* hash index, -1 = empty */
    uint32_t n_slots;
    size_t max_piece;
    int32_t unk_id;
    int byte_fallback;
    int32_t byte_ids[256]; /* <0xXX> pieces, or -1 */
    double unk_score;
    un_added *added;
    int n_added;
    un_norm norms[UN_MAX_NORMS];
    int n_norms;
    un_pre pres[UN_MAX_PRE];
    int n_pres;
    int32_t prefix[UN_MAX_AFFIX], suffix[UN_MAX_AFFIX];
    int n_prefix, n_suffix;
};

static uint64_t un_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static int32_t vocab_find(const choir_unigram *t, const char *s, size_t n) {
    uint32_t mask = t->n_slots - 1;
    for (uint32_t i = (uint32_t)un_hash(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->pool + t->off[id], s, n) == 0) return id;
    }
}

/* --- loading ------------------------------------------------------------ */

static int load_vocab(choir_unigram *t, const cJSON *model, choir_err *err) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsArray(vocab) || cJSON_GetArraySize(vocab) == 0)
        return choir_err_set(err, CHOIR_EFORMAT, "Unigram model without a vocab list");
    int n = cJSON_GetArraySize(vocab);
    size_t bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        const cJSON *p = cJSON_GetArrayItem(e, 0), *s = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(p) || !cJSON_IsNumber(s))
            return choir_err_set(err, CHOIR_EFORMAT, "Unigram vocab entries must be [piece, score]");
        bytes += strlen(p->valuestring) + 1;
    }
    t->n_vocab = n;
    t->pool = choir_alloc(CHOIR_MEM_OTHER, bytes);
    t->off = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *t->off);
    t->len = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *t->len);
    t->score = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *t->score);
    uint32_t slots = 1;
    while (slots < 2u * (uint32_t)n) slots *= 2;
    t->slots = choir_alloc(CHOIR_MEM_OTHER, (size_t)slots * sizeof *t->slots);
    if (!t->pool || !t->off || !t->len || !t->score || !t->slots)
        return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    t->n_slots = slots;
    for (uint32_t i = 0; i < slots; i++) t->slots[i] = -1;
    size_t at = 0;
    double min_score = INFINITY;
    int i = 0;
    cJSON_ArrayForEach(e, vocab) {
        const char *p = cJSON_GetArrayItem(e, 0)->valuestring;
        size_t l = strlen(p);
        memcpy(t->pool + at, p, l + 1);
        t->off[i] = (uint32_t)at;
        t->len[i] = (uint32_t)l;
        t->score[i] = cJSON_GetArrayItem(e, 1)->valuedouble;
        if (t->score[i] < min_score) min_score = t->score[i];
        if (l > t->max_piece) t->max_piece = l;
        at += l + 1;
        if (l && vocab_find(t, p, l) < 0) {
            uint32_t mask = slots - 1, h = (uint32_t)un_hash(p, l) & mask;
            while (t->slots[h] >= 0) h = (h + 1) & mask;
            t->slots[h] = i;
        }
        i++;
    }
    t->unk_score = min_score - UN_UNK_PENALTY;
    t->unk_id = (int32_t)choir_json_int(model, "unk_id", -1);
    if (t->unk_id >= n) return choir_err_set(err, CHOIR_EFORMAT, "unk_id %d out of range", (int)t->unk_id);
    t->byte_fallback = choir_json_bool(model, "byte_fallback", 0);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = vocab_find(t, name, 6);
    }
    return 0;
}

static int load_added(choir_unigram *t, const cJSON *root, choir_err *err) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsArray(list)) return 0;
    int n = cJSON_GetArraySize(list);
    t->added = choir_calloc(CHOIR_MEM_OTHER, (size_t)(n ? n : 1), sizeof *t->added);
    if (!t->added) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const char *c = choir_json_str(e, "content", NULL);
        int64_t id = choir_json_int(e, "id", -1);
        if (!c || !*c || id < 0) return choir_err_set(err, CHOIR_EFORMAT, "added token without content or id");
        un_added *a = &t->added[t->n_added++];
        a->len = strlen(c);
        a->content = choir_strdup(c);
        a->id = (int32_t)id;
        if (!a->content) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    }
    return 0;
}

static int add_norm(choir_unigram *t, const cJSON *obj, choir_err *err) {
    if (!obj || cJSON_IsNull(obj)) return 0;
    const char *type = choir_json_str(obj, "type", "");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "normalizers"), *e;
        cJSON_ArrayForEach(e, list) {
            int rc = add_norm(t, e, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (t->n_norms == UN_MAX_NORMS) return choir_err_set(err, CHOIR_EUNSUPPORTED, "more than %d normalizers", UN_MAX_NORMS);
    int rc = un_norm_parse(obj, &t->norms[t->n_norms], err);
    t->n_norms++; /* freed either way */
    return rc;
}

static int add_pre(choir_unigram *t, const cJSON *obj, choir_err *err) {
    if (!obj || cJSON_IsNull(obj)) return 0;
    const char *type = choir_json_str(obj, "type", "");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "pretokenizers"), *e;
        cJSON_ArrayForEach(e, list) {
            int rc = add_pre(t, e, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (t->n_pres == UN_MAX_PRE) return choir_err_set(err, CHOIR_EUNSUPPORTED, "more than %d pre-tokenizers", UN_MAX_PRE);
    un_pre *p = &t->pres[t->n_pres];
    memset(p, 0, sizeof *p);
    if (!strcmp(type, "WhitespaceSplit")) {
        p->kind = UP_WHITESPACE_SPLIT;
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = UP_METASPACE;
        const char *r = choir_json_str(obj, "replacement", "\xe2\x96\x81");
        p->repl_len = strlen(r);
        if (p->repl_len == 0 || p->repl_len > 4) return choir_err_set(err, CHOIR_EFORMAT, "Metaspace replacement must be one character");
        memcpy(p->repl, r, p->repl_len);
        p->prepend = choir_json_bool(obj, "add_prefix_space", 1);
        const char *scheme = choir_json_str(obj, "prepend_scheme", NULL);
        if (scheme) {
            if (!strcmp(scheme, "always")) p->prepend = 1;
            else if (!strcmp(scheme, "never")) p->prepend = 0;
            else if (!strcmp(scheme, "first")) p->prepend = 2;
            else return choir_err_set(err, CHOIR_EUNSUPPORTED, "Metaspace prepend_scheme \"%s\"", scheme);
        }
        p->split = choir_json_bool(obj, "split", 1);
    } else {
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "pre-tokenizer type \"%s\" is not supported", type);
    }
    t->n_pres++;
    return 0;
}

static int token_id(const choir_unigram *t, const cJSON *special, const char *name, int32_t *id,
                    choir_err *err) {
    const cJSON *e = special ? cJSON_GetObjectItemCaseSensitive(special, name) : NULL;
    const cJSON *ids = e ? cJSON_GetObjectItemCaseSensitive(e, "ids") : NULL;
    if (cJSON_GetArraySize(ids) == 1 && cJSON_IsNumber(cJSON_GetArrayItem(ids, 0))) {
        *id = (int32_t)cJSON_GetArrayItem(ids, 0)->valuedouble;
        return 0;
    }
    *id = choir_unigram_lookup(t, name);
    if (*id < 0) return choir_err_set(err, CHOIR_EFORMAT, "post-processor token \"%s\" is unknown", name);
    return 0;
}

static int load_post(choir_unigram *t, const cJSON *obj, choir_err *err) {
    if (!obj || cJSON_IsNull(obj)) return 0;
    const char *type = choir_json_str(obj, "type", "");
    if (strcmp(type, "TemplateProcessing") != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "post-processor type \"%s\" is not supported", type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(obj, "single"), *e;
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(obj, "special_tokens");
    int seen_seq = 0;
    cJSON_ArrayForEach(e, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *name = choir_json_str(sp, "id", NULL);
        if (!name) return choir_err_set(err, CHOIR_EFORMAT, "TemplateProcessing item is neither Sequence nor SpecialToken");
        int32_t id;
        int rc = token_id(t, special, name, &id, err);
        if (rc) return rc;
        int32_t *dst = seen_seq ? t->suffix : t->prefix;
        int *n = seen_seq ? &t->n_suffix : &t->n_prefix;
        if (*n == UN_MAX_AFFIX) return choir_err_set(err, CHOIR_EUNSUPPORTED, "template with too many special tokens");
        dst[(*n)++] = id;
    }
    return 0;
}

choir_unigram *choir_unigram_parse(const char *json, size_t len, const char *label, choir_err *err) {
    if (!label) label = "<memory>";
    cJSON *root = choir_json_parse(json, len, err);
    if (!root) {
        choir_err_prefix(err, "%s: ", label);
        return NULL;
    }
    choir_unigram *t = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *t);
    int rc = 0;
    if (!t) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        goto fail;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *type = choir_json_str(model, "type", "");
    if (strcmp(type, "Unigram") != 0) {
        rc = choir_err_set(err, CHOIR_EUNSUPPORTED, "model type \"%s\" is not Unigram", type);
        goto fail;
    }
    if ((rc = load_vocab(t, model, err)) || (rc = load_added(t, root, err)) ||
        (rc = add_norm(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err)) ||
        (rc = add_pre(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err)) ||
        (rc = load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err)))
        goto fail;
    cJSON_Delete(root);
    return t;
fail:
    choir_err_prefix(err, "%s: ", label);
    cJSON_Delete(root);
    choir_unigram_free(t);
    return NULL;
}

choir_unigram *choir_unigram_load(const char *path, choir_err *err) {
    char p[4096];
    struct stat sb;
    if (!path) {
        choir_err_set(err, CHOIR_EINVAL, "tokenizer: no path");
        return NULL;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(p, sizeof p, "%s/tokenizer.json", path);
    else snprintf(p, sizeof p, "%s", path);
    FILE *f = fopen(p, "rb");
    if (!f) {
        choir_err_set(err, CHOIR_ENOTFOUND, "%s: cannot open", p);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (64l << 20)) {
        fclose(f);
        choir_err_set(err, CHOIR_ETOOBIG, "%s: not a tokenizer.json (size)", p);
        return NULL;
    }
    char *text = choir_alloc(CHOIR_MEM_OTHER, (size_t)n + 1);
    if (!text) {
        fclose(f);
        choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        return NULL;
    }
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    choir_unigram *t = NULL;
    if (got != (size_t)n) choir_err_set(err, CHOIR_EIO, "%s: read failed", p);
    else t = choir_unigram_parse(text, (size_t)n, p, err);
    choir_free(text);
    return t;
}

void choir_unigram_free(choir_unigram *t) {
    if (!t) return;
    for (int i = 0; i < t->n_norms; i++) un_norm_free(&t->norms[i]);
    for (int i = 0; i < t->n_added; i++) choir_free(t->added[i].content);
    choir_free(t->added);
    choir_free(t->pool);
    choir_free(t->off);
    choir_free(t->len);
    choir_free(t->score);
    choir_free(t->slots);
    choir_free(t);
}

int choir_unigram_n_vocab(const choir_unigram *t) { return t ? t->n_vocab : 0; }

int32_t choir_unigram_lookup(const choir_unigram *t, const char *piece) {
    if (!t || !piece) return -1;
    for (int i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, piece)) return t->added[i].id;
    size_t n = strlen(piece);
    return n ? vocab_find(t, piece, n) : -1;
}

const char *choir_unigram_piece(const choir_unigram *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    return t->pool + t->off[id];
}

int32_t choir_unigram_eos_id(const choir_unigram *t) {
    return t && t->n_suffix ? t->suffix[t->n_suffix - 1] : -1;
}

/* --- encoding ----------------------------------------------------------- */

typedef struct ids_buf {
    int32_t *v;
    int n, cap;
    int oom;
} ids_buf;

static void ids_put(ids_buf *b, int32_t id) {
    if (b->oom) return;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 32;
        int32_t *v = choir_realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) {
            b->oom = 1;
            return;
        }
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = id;
}

static int normalize(const choir_unigram *t, const char *s, size_t n, choir_buf *out, choir_err *err) {
    choir_buf a = {0}, b = {0};
    un_utf8_sanitize(s, n, &a);
    int rc = a.oom ? choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory") : 0;
    for (int i = 0; i < t->n_norms && !rc; i++) {
        b.len = 0;
        rc = un_norm_apply(&t->norms[i], a.data, a.len, &b, err);
        choir_buf tmp = a;
        a = b;
        b = tmp;
    }
    choir_buf_free(&b);
    if (rc) {
        choir_buf_free(&a);
        return rc;
    }
    *out = a;
    return 0;
}

/* Viterbi over piece s[0..n) (valid UTF-8, non-empty). */
static int viterbi(const choir_unigram *t, const char *s, size_t n, ids_buf *ids) {
    double *best = choir_alloc(CHOIR_MEM_OTHER, (n + 1) * sizeof *best);
    int32_t *tok = choir_alloc(CHOIR_MEM_OTHER, (n + 1) * sizeof *tok);
    size_t *from = choir_alloc(CHOIR_MEM_OTHER, (n + 1) * sizeof *from);
    if (!best || !tok || !from) {
        choir_free(best), choir_free(tok), choir_free(from);
        return CHOIR_ENOMEM;
    }
    for (size_t i = 0; i <= n; i++) best[i] = -INFINITY, tok[i] = -2;
    best[0] = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = (size_t)un_utf8_len((unsigned char)s[i]);
        if (best[i] == -INFINITY) { /* unreachable: cannot happen, unk covers every char */
            i += cl;
            continue;
        }
        int single = 0;
        for (size_t e = i + cl; e <= n && e - i <= t->max_piece;) {
            int32_t id = vocab_find(t, s + i, e - i);
            if (id >= 0) {
                double cand = best[i] + t->score[id];
                if (tok[e] == -2 || cand > best[e]) best[e] = cand, tok[e] = id, from[e] = i;
                if (e == i + cl) single = 1;
            }
            if (e == n) break;
            e += (size_t)un_utf8_len((unsigned char)s[e]);
        }
        if (!single) {
            double cand = best[i] + t->unk_score;
            size_t e = i + cl;
            if (tok[e] == -2 || cand > best[e]) best[e] = cand, tok[e] = -1, from[e] = i;
        }
        i += cl;
    }
    /* Backtrack into a reversed list, fusing runs of unknown characters. */
    int cnt = 0;
    for (size_t e = n; e > 0; e = from[e]) cnt++;
    int32_t *rev = choir_alloc(CHOIR_MEM_OTHER, (size_t)cnt * sizeof *rev);
    size_t *start = choir_alloc(CHOIR_MEM_OTHER, ((size_t)cnt + 1) * sizeof *start);
    int rc = 0;
    if (!rev || !start) {
        rc = CHOIR_ENOMEM;
        goto done;
    }
    int k = cnt;
    for (size_t e = n; e > 0; e = from[e]) rev[--k] = tok[e], start[k] = from[e];
    start[cnt] = n;
    for (int j = 0; j < cnt; j++) {
        if (rev[j] >= 0) {
            ids_put(ids, rev[j]);
            continue;
        }
        int j2 = j;
        while (j2 + 1 < cnt && rev[j2 + 1] < 0) j2++;
        if (t->byte_fallback) {
            int ok = 1;
            for (size_t b = start[j]; b < start[j2 + 1]; b++) ok &= t->byte_ids[(unsigned char)s[b]] >= 0;
            if (ok) {
                for (size_t b = start[j]; b < start[j2 + 1]; b++) ids_put(ids, t->byte_ids[(unsigned char)s[b]]);
                j = j2;
                continue;
            }
        }
        ids_put(ids, t->unk_id);
        j = j2;
    }
done:
    choir_free(rev), choir_free(start);
    choir_free(best), choir_free(tok), choir_free(from);
    return rc ? rc : ids->oom ? CHOIR_ENOMEM : 0;
}

/* Runs pre-tokenizer stage `k` on s[0..n) and the model on what comes out. */
static int pre_and_model(const choir_unigram *t, int k, const char *s, size_t n, int first, ids_buf *ids) {
    if (n == 0) return 0;
    if (k == t->n_pres) return viterbi(t, s, n, ids);
    const un_pre *p = &t->pres[k];
    if (p->kind == UP_WHITESPACE_SPLIT) {
        size_t i = 0;
        while (i < n) {
            int cl;
            while (i < n && un_is_space(un_utf8_decode(s + i, &cl))) i += (size_t)cl;
            size_t a = i;
            while (i < n && !un_is_space(un_utf8_decode(s + i, &cl))) i += (size_t)cl;
            int rc = pre_and_model(t, k + 1, s + a, i - a, first && a == 0, ids);
            if (rc) return rc;
        }
        return 0;
    }
    /* Metaspace: spaces become the replacement, which is prepended when the
     * scheme asks, then the text splits before each replacement. */
    choir_buf m = {0};
    int starts = n >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0;
    if (!starts && (p->prepend == 1 || (p->prepend == 2 && first)) && s[0] != ' ') choir_buf_append(&m, p->repl, p->repl_len);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') choir_buf_append(&m, p->repl, p->repl_len);
        else choir_buf_append(&m, s + i, 1);
    }
    if (m.oom) {
        choir_buf_free(&m);
        return CHOIR_ENOMEM;
    }
    int rc = 0;
    if (!p->split) {
        rc = pre_and_model(t, k + 1, m.data, m.len, first, ids);
    } else {
        size_t a = 0;
        for (size_t i = 1; i <= m.len && !rc; i++) {
            if (i == m.len || (i + p->repl_len <= m.len && memcmp(m.data + i, p->repl, p->repl_len) == 0)) {
                rc = pre_and_model(t, k + 1, m.data + a, i - a, first && a == 0, ids);
                a = i;
            }
        }
    }
    choir_buf_free(&m);
    return rc;
}

/* The next added token at or after s[0..n): its index and position, or -1. */
static int next_added(const choir_unigram *t, const char *s, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++) {
        int best = -1;
        for (int a = 0; a < t->n_added; a++) {
            const un_added *ad = &t->added[a];
            if (ad->len <= n - i && memcmp(s + i, ad->content, ad->len) == 0 &&
                (best < 0 || ad->len > t->added[best].len))
                best = a;
        }
        if (best >= 0) {
            *at = i;
            return best;
        }
    }
    return -1;
}

int choir_unigram_normalize(const choir_unigram *t, const char *text, size_t len, char **out,
                            size_t *out_len, choir_err *err) {
    choir_buf b;
    int rc = normalize(t, text, len, &b, err);
    if (rc) return rc;
    *out = b.data;
    if (out_len) *out_len = b.len;
    return 0;
}

int choir_unigram_encode(const choir_unigram *t, const char *text, size_t len, int32_t **ids,
                         int *n_ids, choir_err *err) {
    if (!t || (!text && len) || !ids || !n_ids) return choir_err_set(err, CHOIR_EINVAL, "tokenizer: bad arguments");
    ids_buf out = {0};
    for (int i = 0; i < t->n_prefix; i++) ids_put(&out, t->prefix[i]);
    int rc = 0, first = 1;
    size_t pos = 0;
    while (pos < len && !rc) {
        size_t at = len - pos;
        int a = next_added(t, text + pos, len - pos, &at);
        size_t seg = a >= 0 ? at : len - pos;
        if (seg) {
            choir_buf norm;
            rc = normalize(t, text + pos, seg, &norm, err);
            if (!rc) {
                rc = pre_and_model(t, 0, norm.data, norm.len, first, &out);
                if (rc) choir_err_set(err, rc, "tokenizer: out of memory");
                choir_buf_free(&norm);
            }
            first = 0;
        }
        if (a >= 0) {
            ids_put(&out, t->added[a].id);
            pos += at + t->added[a].len;
            first = 0;
        } else {
            pos = len;
        }
    }
    for (int i = 0; i < t->n_suffix; i++) ids_put(&out, t->suffix[i]);
    if (!rc && out.oom) rc = choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    if (rc) {
        choir_free(out.v);
        return rc;
    }
    if (!out.v) out.v = choir_alloc(CHOIR_MEM_OTHER, sizeof *out.v);
    if (!out.v) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}
