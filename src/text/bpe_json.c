/* The pipeline of a Hugging Face tokenizer.json: normaliser, pre-tokeniser
 * steps and the BPE model's merges. Only what choir implements exactly is
 * accepted; anything else is refused by name, so a file never silently
 * encodes differently from the library it came from. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "text/bpe_internal.h"
#include "text/unicode_internal.h"

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) && t->valuestring ? t->valuestring : "";
}

static int add_norm(choir_tokenizer *t, const cJSON *n, const char *src, choir_err *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = type_of(n);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) {
            int rc = add_norm(t, e, src, err);
            if (rc) return rc;
        }
        return 0;
    }
    bpe_norm k;
    if (strcmp(type, "NFC") == 0) k = BPE_NORM_NFC;
    else if (strcmp(type, "NFD") == 0) k = BPE_NORM_NFD;
    else
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: normalizer \"%s\" is not supported", src, type);
    if (t->n_norm == BPE_MAX_NORM)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: too many normalizers", src);
    t->norm[t->n_norm++] = k;
    return 0;
}

static bpe_pre *new_pre(choir_tokenizer *t, bpe_pre_kind kind, const char *src, choir_err *err) {
    if (t->n_pre == BPE_MAX_PRE) {
        choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: too many pre-tokenizer steps", src);
        return NULL;
    }
    bpe_pre *p = &t->pre[t->n_pre++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    return p;
}

static int split_behavior(const char *b, bpe_split_behavior *out) {
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                        "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (strcmp(b, names[i]) == 0) {
            *out = (bpe_split_behavior)i;
            return 0;
        }
    return -1;
}

static int add_split(choir_tokenizer *t, const cJSON *p, const char *src, choir_err *err) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
    const char *re = choir_json_str(pat, "Regex", NULL), *lit = choir_json_str(pat, "String", NULL);
    if (!re && !lit) return choir_err_set(err, CHOIR_EFORMAT, "%s: Split without a pattern", src);
    bpe_pre *s = new_pre(t, BPE_PRE_SPLIT, src, err);
    if (!s) return err ? err->code : CHOIR_EUNSUPPORTED;
    if (split_behavior(choir_json_str(p, "behavior", "Isolated"), &s->behavior))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: Split behavior \"%s\" is not supported", src,
                             choir_json_str(p, "behavior", ""));
    s->invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "invert"));
    if (re) {
        char msg[160];
        if (!(s->re = rx_compile(re, msg, sizeof msg)))
            return choir_err_set(err, strstr(msg, "memory") ? CHOIR_ENOMEM : CHOIR_EUNSUPPORTED, "%s: %s",
                                 src, msg);
        return 0;
    }
    size_t n = strlen(lit);
    if (!(s->lit = choir_alloc(CHOIR_MEM_OTHER, (n + 1) * sizeof *s->lit)))
        return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    s->n_lit = uni_decode_utf8((const uint8_t *)lit, n, s->lit, NULL);
    return 0;
}

static int add_pre(choir_tokenizer *t, const cJSON *p, int first, const char *src, choir_err *err) {
    const char *type = type_of(p);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) {
            int rc = add_pre(t, e, first && t->n_pre == 0, src, err);
            if (rc) return rc;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space"))) {
            /* HF adds the space to every piece present at this step; choir
             * does it at the front of a segment, which is the same when
             * ByteLevel comes first. */
            if (!first)
                return choir_err_set(err, CHOIR_EUNSUPPORTED,
                                     "%s: ByteLevel add_prefix_space after another pre-tokenizer "
                                     "is not supported", src);
            if (!new_pre(t, BPE_PRE_PREFIX, src, err)) return err ? err->code : CHOIR_EUNSUPPORTED;
        }
        if ((!ur || cJSON_IsTrue(ur)) && !new_pre(t, BPE_PRE_GPT2, src, err))
            return err ? err->code : CHOIR_EUNSUPPORTED;
        return 0;
    }
    if (strcmp(type, "Split") == 0) return add_split(t, p, src, err);
    if (strcmp(type, "Digits") == 0) {
        bpe_pre *d = new_pre(t, BPE_PRE_DIGITS, src, err);
        if (!d) return err ? err->code : CHOIR_EUNSUPPORTED;
        d->individual = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "individual_digits"));
        d->behavior = d->individual ? BPE_SPLIT_ISOLATED : BPE_SPLIT_CONTIGUOUS;
        return 0;
    }
    return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: pre_tokenizer \"%s\" is not supported", src, type);
}

static uint64_t pair_hash(int32_t a, int32_t b) {
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

const bpe_merge *bpe_merge_find(const choir_tokenizer *t, int32_t left, int32_t right) {
    if (!t->n_merges) return NULL;
    uint64_t mask = (uint64_t)t->n_merge_slots - 1;
    for (uint64_t i = pair_hash(left, right) & mask;; i = (i + 1) & mask) {
        int32_t k = t->merge_slots[i];
        if (k < 0) return NULL;
        if (t->merges[k].left == left && t->merges[k].right == right) return &t->merges[k];
    }
}

/* One side of a merge as its token id. */
static int32_t side_id(const choir_tokenizer *t, const char *s, uint8_t *buf, size_t cap, size_t *n) {
    int64_t k = bpe_unicode_to_bytes(s, buf, cap);
    if (k <= 0) return -1;
    *n = (size_t)k;
    return bpe_rank(t, buf, (size_t)k);
}

static int load_merges(choir_tokenizer *t, const cJSON *merges, const char *src, choir_err *err) {
    int n = cJSON_GetArraySize(merges);
    if (n <= 0) return 0; /* no list: the tiktoken rule */
    int slots = 1;
    while (slots < 2 * n) slots *= 2;
    t->merges = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *t->merges);
    t->merge_slots = choir_alloc(CHOIR_MEM_OTHER, (size_t)slots * sizeof *t->merge_slots);
    if (!t->merges || !t->merge_slots) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    for (int i = 0; i < slots; i++) t->merge_slots[i] = -1;
    t->n_merge_slots = slots;
    uint64_t mask = (uint64_t)slots - 1;
    uint8_t buf[1536];
    int rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        /* Older files write "a b", newer ones ["a", "b"]. */
        char pair[2][512];
        if (cJSON_IsString(m) && m->valuestring) {
            const char *sp = strchr(m->valuestring, ' ');
            size_t la = sp ? (size_t)(sp - m->valuestring) : 0;
            if (!sp || la >= sizeof pair[0] || strlen(sp + 1) >= sizeof pair[1] || strchr(sp + 1, ' '))
                return choir_err_set(err, CHOIR_EFORMAT, "%s: merge %d is not \"a b\"", src, rank);
            memcpy(pair[0], m->valuestring, la);
            pair[0][la] = '\0';
            snprintf(pair[1], sizeof pair[1], "%s", sp + 1);
        } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1)) &&
                   strlen(cJSON_GetArrayItem(m, 0)->valuestring) < sizeof pair[0] &&
                   strlen(cJSON_GetArrayItem(m, 1)->valuestring) < sizeof pair[1]) {
            snprintf(pair[0], sizeof pair[0], "%s", cJSON_GetArrayItem(m, 0)->valuestring);
            snprintf(pair[1], sizeof pair[1], "%s", cJSON_GetArrayItem(m, 1)->valuestring);
        } else {
            return choir_err_set(err, CHOIR_EFORMAT, "%s: merge %d is malformed", src, rank);
        }
        size_t na = 0, nb = 0;
        int32_t a = side_id(t, pair[0], buf, 768, &na);
        int32_t b = side_id(t, pair[1], buf + na, 768, &nb);
        int32_t ab = a >= 0 && b >= 0 ? bpe_rank(t, buf, na + nb) : -1;
        if (a < 0 || b < 0 || ab < 0)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: merge %d (\"%.40s\" \"%.40s\") names a token "
                                 "outside the vocabulary", src, rank, pair[0], pair[1]);
        if (!bpe_merge_find(t, a, b)) {
            int k = t->n_merges++;
            t->merges[k] = (bpe_merge){a, b, ab, rank};
            uint64_t i = pair_hash(a, b) & mask;
            while (t->merge_slots[i] >= 0) i = (i + 1) & mask;
            t->merge_slots[i] = k;
        }
        rank++;
    }
    return 0;
}

int bpe_json_pipeline(choir_tokenizer *t, const cJSON *root, const char *src, choir_err *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *type = choir_json_str(model, "type", "BPE");
    if (strcmp(type, "BPE") != 0)
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: model type \"%s\" is not BPE", src, type);
    const char *csp = choir_json_str(model, "continuing_subword_prefix", "");
    const char *ews = choir_json_str(model, "end_of_word_suffix", "");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if ((csp && *csp) || (ews && *ews) || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
        (cJSON_IsNumber(drop) && drop->valuedouble > 0))
        return choir_err_set(err, CHOIR_EUNSUPPORTED, "%s: BPE options (subword prefix/suffix, byte "
                             "fallback, dropout) are not supported", src);
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    int rc = add_norm(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), src, err);
    if (rc) return rc;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    /* A file without a pre-tokenizer keeps the GPT-2 default. */
    if (pre && !cJSON_IsNull(pre)) {
        t->n_pre = 0;
        if ((rc = add_pre(t, pre, 1, src, err))) return rc;
    }
    return load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), src, err);
}

void bpe_pipeline_free(choir_tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++) {
        rx_free(t->pre[i].re);
        choir_free(t->pre[i].lit);
        t->pre[i].re = NULL;
        t->pre[i].lit = NULL;
    }
    choir_free(t->merges);
    choir_free(t->merge_slots);
    t->merges = NULL;
    t->merge_slots = NULL;
    t->n_merges = 0;
}
