/* The pre-tokenisation regex engine (see regex_internal.h): a recursive
 * descent parser into a node array, and a backtracking matcher that carries
 * "what comes next" as a chain of continuations on the C stack, so
 * alternation, quantifiers and lookahead backtrack exactly as Perl-style
 * engines do. A repeated single character (the common `\p{L}+`, `\s*`) is
 * matched by counting the run and trying lengths from the longest, without
 * recursion per character. */
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "text/regex_internal.h"
#include "text/unicode_internal.h"

enum { N_EMPTY, N_CHAR, N_ANY, N_SET, N_GROUP, N_REPEAT, N_LOOK, N_BOL, N_EOL };
enum { I_RANGE, I_CAT, I_SPACE, I_WORD };

/* Recursion and work limits of one search: a tokenizer pattern on real text
 * stays far below both; a pathological one fails instead of running away. */
#define RX_MAX_DEPTH 2000
#define RX_MAX_STEPS (1L << 24)

typedef struct rx_item {
    uint8_t kind, neg;
    uint32_t lo, hi;   /* I_RANGE */
    uint32_t mask;     /* I_CAT: UNI_MASK bits */
} rx_item;

typedef struct rx_set {
    int first, count; /* items[first .. first + count) */
    uint8_t neg, icase;
} rx_set;

typedef struct rx_node {
    uint8_t type, icase, greedy, neg;
    uint32_t ch; /* N_CHAR */
    int set;     /* N_SET */
    int child;   /* N_GROUP: first alternative; N_REPEAT / N_LOOK: the operand */
    int alt;     /* the next alternative of the enclosing group, or -1 */
    int seq;     /* the next node of the sequence, or -1 */
    int min, max; /* N_REPEAT; max -1: unbounded */
} rx_node;

struct rx {
    rx_node *nodes;
    int n_nodes, cap_nodes;
    rx_item *items;
    int n_items, cap_items;
    rx_set *sets;
    int n_sets, cap_sets;
    int root;
};

/* --- parsing ------------------------------------------------------------ */

typedef struct rx_parser {
    rx *r;
    uint32_t *p;
    size_t n, i;
    char *msg;
    size_t cap;
    int icase, depth, failed;
} rx_parser;

static int fail(rx_parser *ps, const char *what) {
    if (!ps->failed) snprintf(ps->msg, ps->cap, "pattern: %s at character %zu", what, ps->i);
    ps->failed = 1;
    return -1;
}

static void *grow(void *p, int *cap, int need, size_t elem) {
    if (need <= *cap) return p;
    int c = *cap ? *cap * 2 : 32;
    while (c < need) c *= 2;
    void *q = choir_realloc(p, (size_t)c * elem);
    if (q) *cap = c;
    return q;
}

static int new_node(rx_parser *ps, int type) {
    rx *r = ps->r;
    rx_node *g = grow(r->nodes, &r->cap_nodes, r->n_nodes + 1, sizeof *g);
    if (!g) return fail(ps, "out of memory");
    r->nodes = g;
    rx_node *nd = &r->nodes[r->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->type = (uint8_t)type;
    nd->icase = (uint8_t)ps->icase;
    nd->set = nd->child = nd->alt = nd->seq = -1;
    return r->n_nodes++;
}

static int add_item(rx_parser *ps, rx_item it) {
    rx *r = ps->r;
    rx_item *g = grow(r->items, &r->cap_items, r->n_items + 1, sizeof *g);
    if (!g) return fail(ps, "out of memory");
    r->items = g;
    r->items[r->n_items++] = it;
    return 0;
}

static int peek(const rx_parser *ps) { return ps->i < ps->n ? (int)ps->p[ps->i] : -1; }

static int eat(rx_parser *ps, uint32_t c) {
    if (ps->i < ps->n && ps->p[ps->i] == c) {
        ps->i++;
        return 1;
    }
    return 0;
}

typedef struct cat_name {
    const char *name;
    uint32_t mask;
} cat_name;

static const cat_name CAT_NAMES[] = {
    {"L", UNI_GROUP_L}, {"Letter", UNI_GROUP_L}, {"Lu", UNI_MASK(UNI_LU)},
    {"Uppercase_Letter", UNI_MASK(UNI_LU)}, {"Ll", UNI_MASK(UNI_LL)},
    {"Lowercase_Letter", UNI_MASK(UNI_LL)}, {"Lt", UNI_MASK(UNI_LT)}, {"Lm", UNI_MASK(UNI_LM)},
    {"Lo", UNI_MASK(UNI_LO)}, {"LC", UNI_MASK(UNI_LU) | UNI_MASK(UNI_LL) | UNI_MASK(UNI_LT)},
    {"M", UNI_GROUP_M}, {"Mark", UNI_GROUP_M}, {"Mn", UNI_MASK(UNI_MN)}, {"Mc", UNI_MASK(UNI_MC)},
    {"Me", UNI_MASK(UNI_ME)}, {"N", UNI_GROUP_N}, {"Number", UNI_GROUP_N}, {"Nd", UNI_MASK(UNI_ND)},
    {"Nl", UNI_MASK(UNI_NL)}, {"No", UNI_MASK(UNI_NO)}, {"P", UNI_GROUP_P},
    {"Punctuation", UNI_GROUP_P}, {"Pc", UNI_MASK(UNI_PC)}, {"Pd", UNI_MASK(UNI_PD)},
    {"Ps", UNI_MASK(UNI_PS)}, {"Pe", UNI_MASK(UNI_PE)}, {"Pi", UNI_MASK(UNI_PI)},
    {"Pf", UNI_MASK(UNI_PF)}, {"Po", UNI_MASK(UNI_PO)}, {"S", UNI_GROUP_S}, {"Symbol", UNI_GROUP_S},
    {"Sm", UNI_MASK(UNI_SM)}, {"Sc", UNI_MASK(UNI_SC)}, {"Sk", UNI_MASK(UNI_SK)},
    {"So", UNI_MASK(UNI_SO)}, {"Z", UNI_GROUP_Z}, {"Separator", UNI_GROUP_Z},
    {"Zs", UNI_MASK(UNI_ZS)}, {"Zl", UNI_MASK(UNI_ZL)}, {"Zp", UNI_MASK(UNI_ZP)},
    {"C", UNI_GROUP_C}, {"Other", UNI_GROUP_C}, {"Cc", UNI_MASK(UNI_CC)}, {"Cf", UNI_MASK(UNI_CF)},
    {"Cs", UNI_MASK(UNI_CS)}, {"Co", UNI_MASK(UNI_CO)}, {"Cn", UNI_MASK(UNI_CN)},
};

/* \p / \P after the letter: a one-letter name or {Name}. */
static int parse_category(rx_parser *ps, int neg, rx_item *it) {
    char name[32];
    size_t k = 0;
    if (eat(ps, '{')) {
        while (peek(ps) >= 0 && peek(ps) != '}') {
            int c = peek(ps);
            if (c == '^') neg = !neg; /* \p{^L} */
            else if (k + 1 < sizeof name && c < 128) name[k++] = (char)c;
            else return fail(ps, "bad category name");
            ps->i++;
        }
        if (!eat(ps, '}')) return fail(ps, "unterminated \\p{");
    } else if (peek(ps) > 0 && peek(ps) < 128) {
        name[k++] = (char)peek(ps);
        ps->i++;
    }
    name[k] = '\0';
    for (size_t c = 0; c < sizeof CAT_NAMES / sizeof CAT_NAMES[0]; c++)
        if (strcmp(CAT_NAMES[c].name, name) == 0) {
            *it = (rx_item){.kind = I_CAT, .neg = (uint8_t)neg, .mask = CAT_NAMES[c].mask};
            return 0;
        }
    char what[64];
    snprintf(what, sizeof what, "unsupported property \\p{%s}", name);
    return fail(ps, what);
}

static int hex_digits(rx_parser *ps, int min, int max, uint32_t *v) {
    int k = 0;
    *v = 0;
    while (k < max) {
        int c = peek(ps);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) break;
        *v = *v * 16 + (uint32_t)d;
        ps->i++;
        k++;
    }
    return k >= min && *v <= 0x10FFFF ? 0 : fail(ps, "bad hex escape");
}

/* One escape after '\': either a literal (returns 1, *ch) or a set item
 * (returns 2, *it); -1 on error. */
static int parse_escape(rx_parser *ps, uint32_t *ch, rx_item *it) {
    int c = peek(ps);
    if (c < 0) return fail(ps, "trailing backslash");
    ps->i++;
    switch (c) {
    case 'n': *ch = '\n'; return 1;
    case 'r': *ch = '\r'; return 1;
    case 't': *ch = '\t'; return 1;
    case 'f': *ch = '\f'; return 1;
    case 'v': *ch = '\v'; return 1;
    case 'a': *ch = 7; return 1;
    case 'e': *ch = 27; return 1;
    case '0': *ch = 0; return 1;
    case 'x':
        if (eat(ps, '{')) {
            if (hex_digits(ps, 1, 6, ch) || !eat(ps, '}')) return fail(ps, "bad \\x{...}");
            return 1;
        }
        return hex_digits(ps, 2, 2, ch) ? -1 : 1;
    case 'u': return hex_digits(ps, 4, 4, ch) ? -1 : 1;
    case 's': case 'S': *it = (rx_item){.kind = I_SPACE, .neg = c == 'S'}; return 2;
    case 'w': case 'W': *it = (rx_item){.kind = I_WORD, .neg = c == 'W'}; return 2;
    case 'd': case 'D': *it = (rx_item){.kind = I_CAT, .neg = c == 'D', .mask = UNI_MASK(UNI_ND)}; return 2;
    case 'p': case 'P': return parse_category(ps, c == 'P', it) ? -1 : 2;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return fail(ps, "unsupported escape");
        *ch = (uint32_t)c;
        return 1;
    }
}

static int parse_class(rx_parser *ps) {
    rx *r = ps->r;
    rx_set s = {.first = r->n_items, .icase = (uint8_t)ps->icase};
    if (eat(ps, '^')) s.neg = 1;
    int first = 1;
    for (;;) {
        int c = peek(ps);
        if (c < 0) return fail(ps, "unterminated [");
        if (c == ']' && !first) {
            ps->i++;
            break;
        }
        first = 0;
        if (c == '[') return fail(ps, "nested classes are not supported");
        uint32_t lo;
        rx_item it;
        ps->i++;
        if (c == '\\') {
            int k = parse_escape(ps, &lo, &it);
            if (k < 0) return -1;
            if (k == 2) {
                if (add_item(ps, it)) return -1;
                continue;
            }
        } else {
            lo = (uint32_t)c;
        }
        uint32_t hi = lo;
        if (peek(ps) == '-' && ps->i + 1 < ps->n && ps->p[ps->i + 1] != ']') {
            ps->i++;
            int d = peek(ps);
            ps->i++;
            if (d == '\\') {
                if (parse_escape(ps, &hi, &it) != 1) return fail(ps, "bad range end");
            } else {
                hi = (uint32_t)d;
            }
            if (hi < lo) return fail(ps, "range out of order");
        }
        if (add_item(ps, (rx_item){.kind = I_RANGE, .lo = lo, .hi = hi})) return -1;
    }
    s.count = r->n_items - s.first;
    rx_set *g = grow(r->sets, &r->cap_sets, r->n_sets + 1, sizeof *g);
    if (!g) return fail(ps, "out of memory");
    r->sets = g;
    r->sets[r->n_sets] = s;
    int nd = new_node(ps, N_SET);
    if (nd >= 0) r->nodes[nd].set = r->n_sets++;
    return nd;
}

static int parse_alt(rx_parser *ps);

/* A one-item set node for a class escape outside brackets (\s, \p{L}). */
static int item_node(rx_parser *ps, rx_item it) {
    rx *r = ps->r;
    rx_set s = {.first = r->n_items, .count = 1, .icase = (uint8_t)ps->icase};
    if (add_item(ps, it)) return -1;
    rx_set *g = grow(r->sets, &r->cap_sets, r->n_sets + 1, sizeof *g);
    if (!g) return fail(ps, "out of memory");
    r->sets = g;
    r->sets[r->n_sets] = s;
    int nd = new_node(ps, N_SET);
    if (nd >= 0) r->nodes[nd].set = r->n_sets++;
    return nd;
}

/* '(' has been read. */
static int parse_group(rx_parser *ps) {
    int saved = ps->icase, look = 0, neg = 0;
    if (eat(ps, '?')) {
        int c = peek(ps);
        if (c == ':') ps->i++;
        else if (c == '=' || c == '!') {
            ps->i++;
            look = 1;
            neg = c == '!';
        } else if (c == '<' && ps->i + 1 < ps->n && (ps->p[ps->i + 1] == '=' || ps->p[ps->i + 1] == '!')) {
            return fail(ps, "lookbehind is not supported");
        } else if (c == 'P' || c == '<') {
            /* A named group: the name does not matter here. */
            if (c == 'P') ps->i++;
            if (!eat(ps, '<')) return fail(ps, "bad group");
            while (peek(ps) >= 0 && peek(ps) != '>') ps->i++;
            if (!eat(ps, '>')) return fail(ps, "bad group name");
        } else {
            int on = 1, any = 0;
            for (;;) {
                c = peek(ps);
                if (c == 'i') ps->icase = on, any = 1;
                else if (c == '-') on = 0;
                else break;
                ps->i++;
            }
            if (!any) return fail(ps, "unsupported group flags");
            if (eat(ps, ')')) {
                /* (?i) switches the rest of the enclosing group. */
                int nd = new_node(ps, N_EMPTY);
                return nd;
            }
            if (!eat(ps, ':')) return fail(ps, "unsupported group flags");
        }
    }
    int g = parse_alt(ps);
    if (g < 0) return -1;
    if (!eat(ps, ')')) return fail(ps, "missing )");
    if (!(ps->icase == saved)) ps->icase = saved;
    if (!look) return g;
    int nd = new_node(ps, N_LOOK);
    if (nd < 0) return -1;
    ps->r->nodes[nd].child = g;
    ps->r->nodes[nd].neg = (uint8_t)neg;
    return nd;
}

static int parse_atom(rx_parser *ps) {
    int c = peek(ps);
    ps->i++;
    switch (c) {
    case '(': {
        if (++ps->depth > 100) return fail(ps, "groups nested too deeply");
        int g = parse_group(ps);
        ps->depth--;
        return g;
    }
    case '[': return parse_class(ps);
    case '.': return new_node(ps, N_ANY);
    case '^': return new_node(ps, N_BOL);
    case '$': return new_node(ps, N_EOL);
    case '*': case '+': case '?': case '{': ps->i--; return fail(ps, "nothing to repeat");
    case '\\': {
        uint32_t ch;
        rx_item it;
        int k = parse_escape(ps, &ch, &it);
        if (k < 0) return -1;
        if (k == 2) return item_node(ps, it);
        int nd = new_node(ps, N_CHAR);
        if (nd >= 0) ps->r->nodes[nd].ch = ch;
        return nd;
    }
    default: {
        int nd = new_node(ps, N_CHAR);
        if (nd >= 0) ps->r->nodes[nd].ch = (uint32_t)c;
        return nd;
    }
    }
}

static int parse_number(rx_parser *ps, int *v) {
    int k = 0;
    *v = 0;
    while (peek(ps) >= '0' && peek(ps) <= '9' && k < 6) {
        *v = *v * 10 + (peek(ps) - '0');
        ps->i++;
        k++;
    }
    return k;
}

/* A quantifier after an atom, if any: wraps it in a repeat node. */
static int parse_quant(rx_parser *ps, int atom) {
    int c = peek(ps), min, max;
    if (c == '*') min = 0, max = -1;
    else if (c == '+') min = 1, max = -1;
    else if (c == '?') min = 0, max = 1;
    else if (c == '{') {
        size_t at = ps->i;
        ps->i++;
        if (!parse_number(ps, &min)) {
            ps->i = at;
            return fail(ps, "bad {n,m}");
        }
        max = min;
        if (eat(ps, ',')) {
            if (!parse_number(ps, &max)) max = -1;
        }
        if (!eat(ps, '}') || (max >= 0 && max < min)) return fail(ps, "bad {n,m}");
        ps->i--; /* re-read the '}' below */
    } else {
        return atom;
    }
    ps->i++;
    int greedy = 1;
    if (eat(ps, '?')) greedy = 0;
    else if (peek(ps) == '+') return fail(ps, "possessive quantifiers are not supported");
    int nd = new_node(ps, N_REPEAT);
    if (nd < 0) return -1;
    rx_node *n = &ps->r->nodes[nd];
    n->child = atom;
    n->min = min;
    n->max = max;
    n->greedy = (uint8_t)greedy;
    return parse_quant(ps, nd);
}

/* A sequence up to '|', ')' or the end; returns its first node. */
static int parse_seq(rx_parser *ps) {
    int head = -1, tail = -1;
    for (;;) {
        int c = peek(ps);
        if (c < 0 || c == '|' || c == ')') break;
        int a = parse_atom(ps);
        if (a < 0) return -1;
        a = parse_quant(ps, a);
        if (a < 0) return -1;
        if (tail >= 0) ps->r->nodes[tail].seq = a;
        else head = a;
        tail = a;
    }
    return head >= 0 ? head : new_node(ps, N_EMPTY);
}

static int parse_alt(rx_parser *ps) {
    int g = new_node(ps, N_GROUP), last = -1;
    if (g < 0) return -1;
    do {
        int h = parse_seq(ps);
        if (h < 0) return -1;
        if (last >= 0) ps->r->nodes[last].alt = h;
        else ps->r->nodes[g].child = h;
        last = h;
    } while (eat(ps, '|'));
    return g;
}

rx *rx_compile(const char *pattern, char *msg, size_t cap) {
    size_t len = strlen(pattern);
    rx *r = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *r);
    uint32_t *cp = choir_alloc(CHOIR_MEM_OTHER, (len + 1) * sizeof *cp);
    if (!r || !cp) {
        snprintf(msg, cap, "pattern: out of memory");
        choir_free(r);
        choir_free(cp);
        return NULL;
    }
    rx_parser ps = {.r = r, .p = cp, .msg = msg, .cap = cap};
    ps.n = uni_decode_utf8((const uint8_t *)pattern, len, cp, NULL);
    r->root = parse_alt(&ps);
    if (r->root >= 0 && ps.i < ps.n) r->root = fail(&ps, "unbalanced )");
    choir_free(cp);
    if (r->root < 0) {
        rx_free(r);
        return NULL;
    }
    return r;
}

void rx_free(rx *r) {
    if (!r) return;
    choir_free(r->nodes);
    choir_free(r->items);
    choir_free(r->sets);
    choir_free(r);
}

/* --- matching ----------------------------------------------------------- */

typedef struct rx_cont {
    int repeat;  /* 0: continue with sequence node `node`; 1: another iteration of repeat `node` */
    int node, count;
    size_t start;
    const struct rx_cont *next;
} rx_cont;

typedef struct rx_ctx {
    const rx *r;
    const uint32_t *cp;
    size_t n;
    int depth;
    long steps;
    int aborted;
} rx_ctx;

static uint32_t fold(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int item_match(const rx_item *it, uint32_t c) {
    int hit;
    switch (it->kind) {
    case I_RANGE: return c >= it->lo && c <= it->hi;
    case I_CAT: hit = (it->mask & UNI_MASK(uni_category(c))) != 0; break;
    case I_SPACE: hit = uni_is_space(c); break;
    default:
        hit = ((UNI_GROUP_L | UNI_GROUP_M | UNI_MASK(UNI_ND) | UNI_MASK(UNI_PC)) &
               UNI_MASK(uni_category(c))) != 0;
        break;
    }
    return hit != it->neg;
}

static int set_match(const rx *r, const rx_set *s, uint32_t c) {
    int hit = 0;
    for (int i = 0; i < s->count && !hit; i++) {
        const rx_item *it = &r->items[s->first + i];
        hit = item_match(it, c);
        if (!hit && s->icase && it->kind == I_RANGE) {
            uint32_t f = fold(c), u = (c >= 'a' && c <= 'z') ? c - 32 : c;
            hit = item_match(it, f) || item_match(it, u);
        }
    }
    return hit != s->neg;
}

static int atom_match(const rx *r, const rx_node *nd, uint32_t c) {
    switch (nd->type) {
    case N_CHAR: return nd->icase ? fold(c) == fold(nd->ch) : c == nd->ch;
    case N_ANY: return c != '\n';
    default: return set_match(r, &r->sets[nd->set], c);
    }
}

static int64_t m_node(rx_ctx *c, int ni, size_t pos, const rx_cont *k);

static int64_t m_repeat(rx_ctx *c, int ri, int count, size_t start, size_t pos, const rx_cont *k);

static int64_t m_cont(rx_ctx *c, size_t pos, const rx_cont *k) {
    if (!k) return (int64_t)pos;
    if (k->repeat) return m_repeat(c, k->node, k->count, k->start, pos, k->next);
    return m_node(c, k->node, pos, k->next);
}

/* Iteration `count` of a general repeat (its operand is not one character).
 * An iteration that consumed nothing ends the loop, as in Perl. */
static int64_t m_repeat(rx_ctx *c, int ri, int count, size_t start, size_t pos, const rx_cont *k) {
    const rx_node *rep = &c->r->nodes[ri];
    int more = (rep->max < 0 || count < rep->max) && !(count > 0 && pos == start);
    rx_cont it = {1, ri, count + 1, pos, k};
    if (rep->greedy) {
        if (more) {
            int64_t r = m_node(c, rep->child, pos, &it);
            if (r >= 0 || c->aborted) return r;
        }
        return count >= rep->min || !more ? m_cont(c, pos, k) : -1;
    }
    if (count >= rep->min || !more) {
        int64_t r = m_cont(c, pos, k);
        if (r >= 0 || c->aborted) return r;
    }
    return more ? m_node(c, rep->child, pos, &it) : -1;
}

static int64_t m_node(rx_ctx *c, int ni, size_t pos, const rx_cont *k) {
    if (++c->steps > RX_MAX_STEPS || c->depth >= RX_MAX_DEPTH) {
        c->aborted = 1;
        return -1;
    }
    const rx *r = c->r;
    const rx_node *nd = &r->nodes[ni];
    rx_cont seq = {0, nd->seq, 0, 0, k};
    const rx_cont *kk = nd->seq >= 0 ? &seq : k;
    int64_t res = -1;
    c->depth++;
    switch (nd->type) {
    case N_EMPTY: res = m_cont(c, pos, kk); break;
    case N_CHAR: case N_ANY: case N_SET:
        if (pos < c->n && atom_match(r, nd, c->cp[pos])) res = m_cont(c, pos + 1, kk);
        break;
    case N_BOL: if (pos == 0) res = m_cont(c, pos, kk); break;
    case N_EOL: if (pos == c->n) res = m_cont(c, pos, kk); break;
    case N_GROUP:
        for (int h = nd->child; h >= 0 && res < 0 && !c->aborted; h = r->nodes[h].alt)
            res = m_node(c, h, pos, kk);
        break;
    case N_LOOK: {
        int64_t in = m_node(c, nd->child, pos, NULL);
        if (!c->aborted && (in >= 0) != nd->neg) res = m_cont(c, pos, kk);
        break;
    }
    case N_REPEAT: {
        const rx_node *a = &r->nodes[nd->child];
        if (a->type == N_CHAR || a->type == N_ANY || a->type == N_SET) {
            /* One character repeated: count the run, then try the lengths. */
            size_t run = 0, lim = nd->max < 0 ? c->n - pos : (size_t)nd->max;
            while (run < lim && pos + run < c->n && atom_match(r, a, c->cp[pos + run])) run++;
            if (run < (size_t)nd->min) break;
            if (nd->greedy) {
                for (size_t l = run + 1; l-- > (size_t)nd->min && res < 0 && !c->aborted;)
                    res = m_cont(c, pos + l, kk);
            } else {
                for (size_t l = (size_t)nd->min; l <= run && res < 0 && !c->aborted; l++)
                    res = m_cont(c, pos + l, kk);
            }
        } else {
            res = m_repeat(c, ni, 0, pos, pos, kk);
        }
        break;
    }
    default: break;
    }
    c->depth--;
    return res;
}

int rx_search(const rx *r, const uint32_t *cp, size_t n, size_t from, size_t *start, size_t *end) {
    for (size_t s = from; s < n; s++) {
        rx_ctx c = {.r = r, .cp = cp, .n = n};
        int64_t e = m_node(&c, r->root, s, NULL);
        if (c.aborted) return -1;
        if (e > (int64_t)s) {
            *start = s;
            *end = (size_t)e;
            return 1;
        }
    }
    return 0;
}
