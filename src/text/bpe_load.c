/* Loading byte-level BPE vocabularies: tiktoken files, HF tokenizer.json,
 * GPT-2 vocab.json / encoder.json. All become one table id -> bytes plus a hash
 * index bytes -> id (see bpe_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "text/bpe_internal.h"

static uint64_t bpe_hash(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

int32_t bpe_rank(const choir_tokenizer *t, const uint8_t *s, size_t n) {
    uint64_t mask = (uint64_t)t->n_slots - 1;
    for (uint64_t i = bpe_hash(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->bytes + t->off[id], s, n) == 0) return id;
    }
}

/* Sets token `id` to bytes s[0..n). Ids may arrive in any order. */
static int bpe_set(choir_tokenizer *t, int32_t id, const uint8_t *s, size_t n, choir_err *err) {
    if (id < 0 || id >= BPE_MAX_TOKENS)
        return choir_err_set(err, CHOIR_EFORMAT, "tokenizer: token id %d out of range", (int)id);
    if (id >= t->cap_tokens) {
        int cap = t->cap_tokens ? t->cap_tokens : 1024;
        while (cap <= id) cap *= 2;
        uint32_t *off = choir_realloc(t->off, (size_t)cap * sizeof *off);
        if (off) t->off = off;
        uint32_t *len = off ? choir_realloc(t->len, (size_t)cap * sizeof *len) : NULL;
        if (len) t->len = len;
        if (!off || !len) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        for (int i = t->cap_tokens; i < cap; i++) t->len[i] = BPE_NO_TOKEN;
        t->cap_tokens = cap;
    }
    if (t->n_bytes + n > t->cap_bytes) {
        size_t cap = t->cap_bytes ? t->cap_bytes : 65536;
        while (cap < t->n_bytes + n) cap *= 2;
        uint8_t *b = choir_realloc(t->bytes, cap);
        if (!b) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        t->bytes = b;
        t->cap_bytes = cap;
    }
    memcpy(t->bytes + t->n_bytes, s, n);
    t->off[id] = (uint32_t)t->n_bytes;
    t->len[id] = (uint32_t)n;
    t->n_bytes += n;
    if (id >= t->n_base) t->n_base = id + 1;
    return 0;
}

/* Builds the hash index once all tokens are in; every id below n_base must be
 * set (a hole would make ids shift). Duplicate byte strings keep the lowest id
 * (multilingual.tiktoken's empty rank 50256 is the only one in practice). */
static int bpe_index(choir_tokenizer *t, const char *src, choir_err *err) {
    for (int i = 0; i < t->n_base; i++)
        if (t->len[i] == BPE_NO_TOKEN)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: token id %d is missing", src, i);
    int slots = 1;
    while (slots < 2 * t->n_base) slots *= 2;
    t->slots = choir_alloc(CHOIR_MEM_OTHER, (size_t)slots * sizeof(int32_t));
    if (!t->slots) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    t->n_slots = slots;
    for (int i = 0; i < slots; i++) t->slots[i] = -1;
    uint64_t mask = (uint64_t)slots - 1;
    for (int32_t id = 0; id < t->n_base; id++) {
        const uint8_t *s = t->bytes + t->off[id];
        if (t->len[id] == 0 || bpe_rank(t, s, t->len[id]) >= 0) continue;
        uint64_t i = bpe_hash(s, t->len[id]) & mask;
        while (t->slots[i] >= 0) i = (i + 1) & mask;
        t->slots[i] = id;
    }
    return 0;
}

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static int load_tiktoken(choir_tokenizer *t, const char *path, choir_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return choir_err_set(err, CHOIR_ENOTFOUND, "%s: cannot open", path);
    char line[1024];
    uint8_t buf[768];
    int rc = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *sp = strchr(line, ' ');
        if (!sp) {
            if (line[0] == '\n' || line[0] == '\0') continue;
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s:%d: expected '<base64> <rank>'", path, lineno);
            break;
        }
        size_t n = 0;
        unsigned acc = 0;
        int bits = 0, bad = 0;
        for (char *p = line; p < sp; p++) {
            if (*p == '=') break;
            int v = b64_val((unsigned char)*p);
            if (v < 0 || n >= sizeof buf) {
                bad = 1;
                break;
            }
            acc = (acc << 6) | (unsigned)v;
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                buf[n++] = (uint8_t)(acc >> bits);
            }
        }
        char *end;
        long rank = strtol(sp + 1, &end, 10);
        if (bad || end == sp + 1) {
            rc = choir_err_set(err, CHOIR_EFORMAT, "%s:%d: malformed line", path, lineno);
            break;
        }
        if ((rc = bpe_set(t, (int32_t)rank, buf, n, err))) break;
    }
    fclose(f);
    return rc ? rc : bpe_index(t, path, err);
}

/* GPT-2 maps each byte to a printable code point so that vocab strings are
 * text: printable Latin-1 bytes map to themselves, the other 68 bytes (0-32,
 * 127-160, 173) to U+0100 upwards in byte order. The byte of code point cp,
 * or -1. */
static int byte_of_unicode(uint32_t cp) {
    if (cp < 256) {
        int printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF);
        return printable ? (int)cp : -1;
    }
    uint32_t k = cp - 256;
    return k <= 32 ? (int)k : k <= 66 ? (int)(127 + k - 33) : k == 67 ? 173 : -1;
}

/* Decodes one UTF-8 code point at s; returns its length or 0 when invalid. */
static int utf8_decode1(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n >= 1 && s[0] < 0x80) { *cp = s[0]; return 1; }
    if (n >= 2 && (s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return *cp >= 0x80 ? 2 : 0;
    }
    if (n >= 3 && (s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return *cp >= 0x800 && (*cp < 0xD800 || *cp > 0xDFFF) ? 3 : 0;
    }
    return 0;
}

int64_t bpe_unicode_to_bytes(const char *str, uint8_t *out, size_t cap) {
    const unsigned char *s = (const unsigned char *)str;
    size_t sl = strlen(str), n = 0;
    for (size_t i = 0; i < sl;) {
        uint32_t cp;
        int k = utf8_decode1(s + i, sl - i, &cp);
        int b = k ? byte_of_unicode(cp) : -1;
        if (b < 0 || n >= cap) return -1;
        out[n++] = (uint8_t)b;
        i += (size_t)k;
    }
    return (int64_t)n;
}

static int add_named(choir_tokenizer *t, const char *name, int32_t id, const cJSON *flags,
                     choir_err *err) {
    if (t->n_added == t->cap_added) {
        int cap = t->cap_added ? 2 * t->cap_added : 64;
        bpe_added *a = choir_realloc(t->added, (size_t)cap * sizeof *a);
        if (!a) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        t->added = a;
        t->cap_added = cap;
    }
    char *s = choir_strdup(name);
    if (!s) return choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
    bpe_added *a = &t->added[t->n_added++];
    memset(a, 0, sizeof *a);
    a->name = s;
    a->len = strlen(s);
    a->id = id;
    /* GPT-2's <|endoftext|> in encoder.json, and tokenizer.json entries
     * that do not say, count as special. */
    const cJSON *sp = flags ? cJSON_GetObjectItemCaseSensitive(flags, "special") : NULL;
    a->special = (uint8_t)(!sp || cJSON_IsTrue(sp));
    if (flags) {
        a->lstrip = (uint8_t)cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(flags, "lstrip"));
        a->rstrip = (uint8_t)cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(flags, "rstrip"));
        a->single_word = (uint8_t)cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(flags, "single_word"));
    }
    if (id > t->max_added_id) t->max_added_id = id;
    return 0;
}

static int is_added(const choir_tokenizer *t, const char *name) {
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].name, name) == 0) return 1;
    return 0;
}

static int load_vocab_map(choir_tokenizer *t, const cJSON *vocab, const char *src, choir_err *err) {
    uint8_t buf[768];
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || !e->string)
            return choir_err_set(err, CHOIR_EFORMAT, "%s: vocab entry is not \"token\": id", src);
        size_t sl = strlen(e->string);
        /* Added tokens are kept by name and out of the byte table. */
        if (e->string[0] == '<' && is_added(t, e->string)) continue;
        /* GPT-2's encoder.json lists <|endoftext|> among the byte strings. */
        if (sl > 4 && strncmp(e->string, "<|", 2) == 0 && strcmp(e->string + sl - 2, "|>") == 0) {
            int rc = add_named(t, e->string, (int32_t)e->valueint, NULL, err);
            if (rc) return rc;
            continue;
        }
        int64_t n = bpe_unicode_to_bytes(e->string, buf, sizeof buf);
        if (n < 0)
            return choir_err_set(err, CHOIR_EFORMAT,
                                 "%s: vocab entry \"%.40s\" is not byte-level BPE", src, e->string);
        int rc = bpe_set(t, (int32_t)e->valueint, buf, (size_t)n, err);
        if (rc) return rc;
    }
    return 0;
}

static int load_json_vocab(choir_tokenizer *t, const char *path, choir_err *err) {
    cJSON *root = choir_json_load(path, err);
    if (!root) return err ? err->code : CHOIR_EFORMAT;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    /* A plain vocab.json has a token named "model" too; only an object counts. */
    int hf = cJSON_IsObject(model);
    const cJSON *vocab = hf ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : root;
    int rc = 0;
    if (!cJSON_IsObject(vocab)) {
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: no vocabulary object", path);
        goto done;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *a;
    cJSON_ArrayForEach(a, added) {
        const char *content = choir_json_str(a, "content", NULL);
        int64_t id = choir_json_int(a, "id", -1);
        if (!content || id < 0 || id >= BPE_MAX_TOKENS) continue;
        if ((rc = add_named(t, content, (int32_t)id, a, err))) goto done;
    }
    rc = load_vocab_map(t, vocab, path, err);
    if (!rc) rc = bpe_index(t, path, err);
    if (!rc && hf) rc = bpe_json_pipeline(t, root, path, err);
done:
    cJSON_Delete(root);
    return rc;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static choir_tokenizer *load_file(const char *path, choir_err *err) {
    choir_tokenizer *t = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *t);
    if (!t) {
        choir_err_set(err, CHOIR_ENOMEM, "tokenizer: out of memory");
        return NULL;
    }
    t->max_added_id = -1;
    /* The default pipeline, which tiktoken and vocab.json files imply. */
    t->pre[0].kind = BPE_PRE_GPT2;
    t->n_pre = 1;
    int rc = ends_with(path, ".tiktoken") ? load_tiktoken(t, path, err)
                                          : load_json_vocab(t, path, err);
    if (!rc && t->n_base < 256)
        rc = choir_err_set(err, CHOIR_EFORMAT, "%s: only %d tokens (not byte-level BPE)", path,
                           t->n_base);
    for (int b = 0; !rc && b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = bpe_rank(t, &c, 1);
    }
    if (rc) {
        choir_tokenizer_free(t);
        return NULL;
    }
    return t;
}

choir_tokenizer *choir_tokenizer_load_for_vocab(const char *path, int n_vocab, choir_err *err) {
    if (is_file(path)) return load_file(path, err);
    const char *multi[] = {"tokenizer.json", "vocab.json", "encoder.json", "multilingual.tiktoken",
                           "gpt2.tiktoken"};
    const char *english[] = {"tokenizer.json", "vocab.json", "encoder.json", "gpt2.tiktoken",
                             "multilingual.tiktoken"};
    const char **names = n_vocab > 0 && n_vocab < 51865 ? english : multi;
    char p[4096];
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (is_file(p)) return load_file(p, err);
    }
    choir_err_set(err, CHOIR_ENOTFOUND,
                  "%s: no tokenizer (tokenizer.json, vocab.json, encoder.json or *.tiktoken)", path);
    return NULL;
}

choir_tokenizer *choir_tokenizer_load(const char *path, choir_err *err) {
    return choir_tokenizer_load_for_vocab(path, 0, err);
}

void choir_tokenizer_free(choir_tokenizer *t) {
    if (!t) return;
    bpe_pipeline_free(t);
    for (int i = 0; i < t->n_added; i++) choir_free(t->added[i].name);
    choir_free(t->added);
    choir_free(t->bytes);
    choir_free(t->off);
    choir_free(t->len);
    choir_free(t->slots);
    choir_free(t);
}
