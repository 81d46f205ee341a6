/* The restricted unpickler: a small stack machine over the opcodes torch.save
 * uses. Every read is bounds-checked against the pickle's length, memo indices
 * are bounded by it, and values are only built, never executed. */
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "io/pickle.h"

/* A pickle cannot legitimately nest deeper than this many MARKs. */
#define PK_MAX_MARKS 4096

struct pk_unpickler {
    const uint8_t *p, *end, *start;
    const char *label;
    pk_value **all;            /* every value made, for freeing */
    int nall, all_cap;
    pk_value **stack;
    int nstack, stack_cap;
    int *marks;                /* stack depths at each MARK */
    int nmarks, marks_cap;
    pk_value **memo;
    size_t nmemo, nmemo_set;
    choir_err *err;
};

static int fail(pk_unpickler *u, int code, const char *what) {
    return choir_err_set(u->err, code, "%s: pickle at byte %zu: %s", u->label,
                         (size_t)(u->p - u->start), what);
}

static int grow_ptrs(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return CHOIR_OK;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need) ncap *= 2;
    void *q = choir_realloc(*arr, (size_t)ncap * elem);
    if (!q) return CHOIR_ENOMEM;
    *arr = q;
    *cap = ncap;
    return CHOIR_OK;
}

static pk_value *new_value(pk_unpickler *u, pk_kind kind) {
    if (grow_ptrs((void **)&u->all, &u->all_cap, u->nall + 1, sizeof(pk_value *)) < 0) return NULL;
    pk_value *v = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *v);
    if (!v) return NULL;
    v->kind = kind;
    u->all[u->nall++] = v;
    return v;
}

static int push(pk_unpickler *u, pk_value *v) {
    if (!v) return fail(u, CHOIR_ENOMEM, "out of memory");
    if (grow_ptrs((void **)&u->stack, &u->stack_cap, u->nstack + 1, sizeof(pk_value *)) < 0)
        return fail(u, CHOIR_ENOMEM, "out of memory");
    u->stack[u->nstack++] = v;
    return CHOIR_OK;
}

/* The stack floor: values below the innermost MARK may not be popped. */
static int floor_depth(const pk_unpickler *u) { return u->nmarks ? u->marks[u->nmarks - 1] : 0; }

static pk_value *pop(pk_unpickler *u) {
    if (u->nstack <= floor_depth(u)) return NULL;
    return u->stack[--u->nstack];
}

static pk_value *top(pk_unpickler *u) {
    if (u->nstack <= floor_depth(u)) return NULL;
    return u->stack[u->nstack - 1];
}

static int need(pk_unpickler *u, size_t n) { return (size_t)(u->end - u->p) >= n; }

static uint64_t read_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int append_item(pk_unpickler *u, pk_value *seq, pk_value *item) {
    if (grow_ptrs((void **)&seq->items, &seq->cap, seq->n + 1, sizeof(pk_value *)) < 0)
        return fail(u, CHOIR_ENOMEM, "out of memory");
    seq->items[seq->n++] = item;
    return CHOIR_OK;
}

static int set_item(pk_unpickler *u, pk_value *dict, pk_value *key, pk_value *val) {
    if (!dict || dict->kind != PK_DICT) return fail(u, CHOIR_EFORMAT, "SETITEM on something that is not a dict");
    if (key->kind != PK_STR && key->kind != PK_INT)
        return fail(u, CHOIR_EUNSUPPORTED, "dict key is neither a string nor an integer");
    /* Keys are appended without looking for an earlier equal key: torch.save
     * never repeats one, and searching would make a hostile dict quadratic. A
     * repeated tensor name is refused once names are built (pth.c). */
    int cap = dict->cap;
    if (grow_ptrs((void **)&dict->items, &cap, dict->n + 1, sizeof(pk_value *)) < 0)
        return fail(u, CHOIR_ENOMEM, "out of memory");
    int vcap = dict->cap;
    if (grow_ptrs((void **)&dict->vals, &vcap, dict->n + 1, sizeof(pk_value *)) < 0)
        return fail(u, CHOIR_ENOMEM, "out of memory");
    dict->cap = cap;
    dict->items[dict->n] = key;
    dict->vals[dict->n] = val;
    dict->n++;
    return CHOIR_OK;
}

/* Pops everything above the innermost MARK into a fresh tuple (or list). */
static int pop_mark(pk_unpickler *u, pk_value ***out_items, int *count) {
    if (!u->nmarks) return fail(u, CHOIR_EFORMAT, "no MARK to pop to");
    int base = u->marks[--u->nmarks];
    *count = u->nstack - base;
    *out_items = NULL;
    if (*count) {
        /* Callers copy from here before pushing anything. */
        *out_items = &u->stack[base];
    }
    u->nstack = base;
    return CHOIR_OK;
}

static pk_value *make_tuple(pk_unpickler *u, pk_value **items, int n) {
    pk_value *t = new_value(u, PK_TUPLE);
    if (!t) return NULL;
    if (n) {
        t->items = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof(pk_value *));
        if (!t->items) return NULL;
        memcpy(t->items, items, (size_t)n * sizeof(pk_value *));
    }
    t->n = t->cap = n;
    return t;
}

static const struct { const char *module, *name; pk_global g; choir_dtype dt; } ALLOWED[] = {
    {"torch._utils", "_rebuild_tensor_v2", PK_G_REBUILD_TENSOR_V2, CHOIR_DTYPE_F32},
    {"torch._utils", "_rebuild_parameter", PK_G_REBUILD_PARAMETER, CHOIR_DTYPE_F32},
    {"collections", "OrderedDict", PK_G_ORDERED_DICT, CHOIR_DTYPE_F32},
    {"torch", "FloatStorage", PK_G_STORAGE, CHOIR_DTYPE_F32},
    {"torch", "HalfStorage", PK_G_STORAGE, CHOIR_DTYPE_F16},
    {"torch", "BFloat16Storage", PK_G_STORAGE, CHOIR_DTYPE_BF16},
    {"torch", "DoubleStorage", PK_G_STORAGE, CHOIR_DTYPE_F64},
    {"torch", "LongStorage", PK_G_STORAGE, CHOIR_DTYPE_I64},
    {"torch", "IntStorage", PK_G_STORAGE, CHOIR_DTYPE_I32},
    {"torch", "ShortStorage", PK_G_STORAGE, CHOIR_DTYPE_I16},
    {"torch", "CharStorage", PK_G_STORAGE, CHOIR_DTYPE_I8},
    {"torch", "ByteStorage", PK_G_STORAGE, CHOIR_DTYPE_U8},
    {"torch", "BoolStorage", PK_G_STORAGE, CHOIR_DTYPE_BOOL},
};

static int op_global(pk_unpickler *u) {
    /* "module\nname\n" */
    const uint8_t *nl1 = memchr(u->p, '\n', (size_t)(u->end - u->p));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(u->end - nl1 - 1)) : NULL;
    if (!nl2) return fail(u, CHOIR_EFORMAT, "GLOBAL runs past the end");
    size_t mlen = (size_t)(nl1 - u->p), nlen = (size_t)(nl2 - nl1 - 1);
    for (size_t i = 0; i < sizeof ALLOWED / sizeof ALLOWED[0]; i++) {
        if (strlen(ALLOWED[i].module) == mlen && memcmp(ALLOWED[i].module, u->p, mlen) == 0 &&
            strlen(ALLOWED[i].name) == nlen && memcmp(ALLOWED[i].name, nl1 + 1, nlen) == 0) {
            pk_value *g = new_value(u, PK_GLOBAL);
            if (g) {
                g->i = ALLOWED[i].g;
                g->dtype = ALLOWED[i].dt;
            }
            u->p = nl2 + 1;
            return push(u, g);
        }
    }
    char what[200];
    snprintf(what, sizeof what,
             "refusing global '%.*s.%.*s': a weights file only needs tensors and dicts, so this pickle "
             "may run code and is not loaded",
             (int)(mlen > 60 ? 60 : mlen), (const char *)u->p, (int)(nlen > 60 ? 60 : nlen),
             (const char *)nl1 + 1);
    return fail(u, CHOIR_EUNSUPPORTED, what);
}

/* A tuple of non-negative ints (a size or a stride) into out[]. */
static int int_tuple(pk_unpickler *u, const pk_value *t, int64_t *out, int *n, const char *what) {
    if (!t || t->kind != PK_TUPLE || t->n > CHOIR_ST_MAX_DIMS) return fail(u, CHOIR_EFORMAT, what);
    for (int i = 0; i < t->n; i++) {
        if (t->items[i]->kind != PK_INT || t->items[i]->i < 0) return fail(u, CHOIR_EFORMAT, what);
        out[i] = t->items[i]->i;
    }
    *n = t->n;
    return CHOIR_OK;
}

static int op_reduce(pk_unpickler *u) {
    pk_value *args = pop(u), *fn = pop(u);
    if (!args || !fn) return fail(u, CHOIR_EFORMAT, "REDUCE on a short stack");
    if (fn->kind != PK_GLOBAL || args->kind != PK_TUPLE)
        return fail(u, CHOIR_EUNSUPPORTED, "REDUCE of something other than an allowed global");
    switch ((pk_global)fn->i) {
    case PK_G_ORDERED_DICT:
        if (args->n != 0) return fail(u, CHOIR_EUNSUPPORTED, "OrderedDict with constructor arguments");
        return push(u, new_value(u, PK_DICT));
    case PK_G_REBUILD_PARAMETER:
        /* (tensor, requires_grad, backward_hooks): a Parameter is its tensor. */
        if (args->n < 1 || args->items[0]->kind != PK_TENSOR)
            return fail(u, CHOIR_EFORMAT, "_rebuild_parameter without a tensor");
        return push(u, args->items[0]);
    case PK_G_REBUILD_TENSOR_V2: {
        /* (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
        if (args->n < 4 || args->items[0]->kind != PK_STORAGE || args->items[1]->kind != PK_INT ||
            args->items[1]->i < 0)
            return fail(u, CHOIR_EFORMAT, "_rebuild_tensor_v2 with bad arguments");
        pk_value *t = new_value(u, PK_TENSOR);
        if (!t) return fail(u, CHOIR_ENOMEM, "out of memory");
        t->storage = args->items[0];
        t->offset = args->items[1]->i;
        int nstride = 0;
        if (int_tuple(u, args->items[2], t->shape, &t->ndim, "tensor size is not a tuple of sizes") < 0 ||
            int_tuple(u, args->items[3], t->stride, &nstride, "tensor stride is not a tuple of strides") < 0)
            return u->err ? u->err->code : CHOIR_EFORMAT;
        if (nstride != t->ndim) return fail(u, CHOIR_EFORMAT, "tensor size and stride differ in length");
        return push(u, t);
    }
    case PK_G_STORAGE:
    default:
        return fail(u, CHOIR_EUNSUPPORTED, "REDUCE of a storage class");
    }
}

static int op_persid(pk_unpickler *u) {
    /* ('storage', storage_class, key, location, numel) */
    pk_value *pid = pop(u);
    if (!pid || pid->kind != PK_TUPLE || pid->n < 5 || pid->items[0]->kind != PK_STR ||
        strcmp(pid->items[0]->str, "storage") != 0 || pid->items[1]->kind != PK_GLOBAL ||
        pid->items[1]->i != PK_G_STORAGE || pid->items[2]->kind != PK_STR || pid->items[4]->kind != PK_INT ||
        pid->items[4]->i < 0)
        return fail(u, CHOIR_EUNSUPPORTED, "persistent id is not a torch storage reference");
    pk_value *s = new_value(u, PK_STORAGE);
    if (!s) return fail(u, CHOIR_ENOMEM, "out of memory");
    s->dtype = pid->items[1]->dtype;
    s->str = pid->items[2]->str;   /* shares the key string's storage */
    s->numel = pid->items[4]->i;
    return push(u, s);
}

static int memo_put(pk_unpickler *u, size_t idx) {
    pk_value *v = top(u);
    if (!v) return fail(u, CHOIR_EFORMAT, "memo put on an empty stack");
    if (idx >= u->nmemo) return fail(u, CHOIR_EFORMAT, "memo index out of range");
    if (!u->memo[idx]) u->nmemo_set++;
    u->memo[idx] = v;
    return CHOIR_OK;
}

static int memo_get(pk_unpickler *u, size_t idx) {
    if (idx >= u->nmemo || !u->memo[idx]) return fail(u, CHOIR_EFORMAT, "memo get of an unset index");
    return push(u, u->memo[idx]);
}

static int push_int(pk_unpickler *u, int64_t v) {
    pk_value *x = new_value(u, PK_INT);
    if (x) x->i = v;
    return push(u, x);
}

static int push_str(pk_unpickler *u, size_t n) {
    if (!need(u, n)) return fail(u, CHOIR_EFORMAT, "string runs past the end");
    pk_value *s = new_value(u, PK_STR);
    if (!s || !(s->str = choir_alloc(CHOIR_MEM_OTHER, n + 1))) return fail(u, CHOIR_ENOMEM, "out of memory");
    memcpy(s->str, u->p, n);
    s->str[n] = '\0';
    s->len = n;
    u->p += n;
    return push(u, s);
}

/* Runs one opcode; returns 1 at STOP, 0 to continue, negative on error. */
static int step(pk_unpickler *u) {
    if (!need(u, 1)) return fail(u, CHOIR_EFORMAT, "ends without STOP");
    uint8_t op = *u->p++;
    pk_value *a, *b, *c;
    pk_value **items;
    int n, rc;
    switch (op) {
    case 0x80: /* PROTO */
        if (!need(u, 1)) return fail(u, CHOIR_EFORMAT, "truncated PROTO");
        if (*u->p > 5) return fail(u, CHOIR_EUNSUPPORTED, "pickle protocol above 5");
        u->p++;
        return 0;
    case 0x95: /* FRAME: a length hint only */
        if (!need(u, 8)) return fail(u, CHOIR_EFORMAT, "truncated FRAME");
        u->p += 8;
        return 0;
    case '.': return 1;
    case '}': return push(u, new_value(u, PK_DICT));
    case ']': return push(u, new_value(u, PK_LIST));
    case ')': return push(u, make_tuple(u, NULL, 0));
    case 'N': return push(u, new_value(u, PK_NONE));
    case 0x88: case 0x89:
        a = new_value(u, PK_BOOL);
        if (a) a->i = op == 0x88;
        return push(u, a);
    case '(':
        if (u->nmarks >= PK_MAX_MARKS) return fail(u, CHOIR_ETOOBIG, "MARKs nested too deep");
        if (grow_ptrs((void **)&u->marks, &u->marks_cap, u->nmarks + 1, sizeof(int)) < 0)
            return fail(u, CHOIR_ENOMEM, "out of memory");
        u->marks[u->nmarks++] = u->nstack;
        return 0;
    case 'K':
        if (!need(u, 1)) return fail(u, CHOIR_EFORMAT, "truncated BININT1");
        return push_int(u, *u->p++);
    case 'M':
        if (!need(u, 2)) return fail(u, CHOIR_EFORMAT, "truncated BININT2");
        u->p += 2;
        return push_int(u, (int64_t)read_le(u->p - 2, 2));
    case 'J':
        if (!need(u, 4)) return fail(u, CHOIR_EFORMAT, "truncated BININT");
        u->p += 4;
        return push_int(u, (int32_t)(uint32_t)read_le(u->p - 4, 4));
    case 0x8a: { /* LONG1: little-endian two's complement of n bytes */
        if (!need(u, 1) || !need(u, 1 + (size_t)u->p[0])) return fail(u, CHOIR_EFORMAT, "truncated LONG1");
        int nb = *u->p++;
        if (nb > 8) return fail(u, CHOIR_EUNSUPPORTED, "integer wider than 64 bits");
        uint64_t v = nb ? read_le(u->p, nb) : 0;
        if (nb && nb < 8 && (u->p[nb - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * nb);
        u->p += nb;
        return push_int(u, (int64_t)v);
    }
    case 'G': { /* BINFLOAT: big-endian double */
        if (!need(u, 8)) return fail(u, CHOIR_EFORMAT, "truncated BINFLOAT");
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = bits << 8 | u->p[i];
        u->p += 8;
        a = new_value(u, PK_FLOAT);
        if (a) memcpy(&a->f, &bits, sizeof a->f);
        return push(u, a);
    }
    case 'X':
        if (!need(u, 4)) return fail(u, CHOIR_EFORMAT, "truncated BINUNICODE");
        u->p += 4;
        return push_str(u, (size_t)read_le(u->p - 4, 4));
    case 0x8c: /* SHORT_BINUNICODE */
        if (!need(u, 1)) return fail(u, CHOIR_EFORMAT, "truncated SHORT_BINUNICODE");
        return push_str(u, *u->p++);
    case 'q':
        if (!need(u, 1)) return fail(u, CHOIR_EFORMAT, "truncated BINPUT");
        return memo_put(u, *u->p++);
    case 'r':
        if (!need(u, 4)) return fail(u, CHOIR_EFORMAT, "truncated LONG_BINPUT");
        u->p += 4;
        return memo_put(u, (size_t)read_le(u->p - 4, 4));
    case 0x94: /* MEMOIZE: index = number of memo entries so far */
        return memo_put(u, u->nmemo_set);
    case 'h':
        if (!need(u, 1)) return fail(u, CHOIR_EFORMAT, "truncated BINGET");
        return memo_get(u, *u->p++);
    case 'j':
        if (!need(u, 4)) return fail(u, CHOIR_EFORMAT, "truncated LONG_BINGET");
        u->p += 4;
        return memo_get(u, (size_t)read_le(u->p - 4, 4));
    case 'c': return op_global(u);
    case 'Q': return op_persid(u);
    case 'R': return op_reduce(u);
    case 't':
        if ((rc = pop_mark(u, &items, &n)) < 0) return rc;
        return push(u, make_tuple(u, items, n));
    case 0x85: case 0x86: case 0x87: {
        int k = op - 0x84;
        if (u->nstack - floor_depth(u) < k) return fail(u, CHOIR_EFORMAT, "TUPLEn on a short stack");
        u->nstack -= k;
        return push(u, make_tuple(u, &u->stack[u->nstack], k));
    }
    case 's':
        b = pop(u);
        a = pop(u);
        c = top(u);
        if (!a || !b) return fail(u, CHOIR_EFORMAT, "SETITEM on a short stack");
        return set_item(u, c, a, b);
    case 'u': {
        if ((rc = pop_mark(u, &items, &n)) < 0) return rc;
        if (n % 2) return fail(u, CHOIR_EFORMAT, "SETITEMS with an odd number of values");
        pk_value **kv = items;
        c = top(u);
        for (int i = 0; i < n; i += 2)
            if ((rc = set_item(u, c, kv[i], kv[i + 1])) < 0) return rc;
        return 0;
    }
    case 'a':
        b = pop(u);
        c = top(u);
        if (!b || !c || c->kind != PK_LIST) return fail(u, CHOIR_EFORMAT, "APPEND to something that is not a list");
        return append_item(u, c, b);
    case 'e': {
        if ((rc = pop_mark(u, &items, &n)) < 0) return rc;
        pk_value **vs = items;
        c = top(u);
        if (!c || c->kind != PK_LIST) return fail(u, CHOIR_EFORMAT, "APPENDS to something that is not a list");
        for (int i = 0; i < n; i++)
            if ((rc = append_item(u, c, vs[i])) < 0) return rc;
        return 0;
    }
    case 'b':
        /* BUILD sets an object's state; a state_dict's OrderedDict carries
         * `_metadata` (module versions) that weights do not need. */
        a = pop(u);
        c = top(u);
        if (!a || !c || (c->kind != PK_DICT && c->kind != PK_TENSOR))
            return fail(u, CHOIR_EUNSUPPORTED, "BUILD of something other than a dict or tensor");
        return 0;
    case '0':
        if (!pop(u)) return fail(u, CHOIR_EFORMAT, "POP on an empty stack");
        return 0;
    default: {
        char what[96];
        snprintf(what, sizeof what, "refusing opcode 0x%02x, which torch.save does not emit for weights", op);
        return fail(u, CHOIR_EUNSUPPORTED, what);
    }
    }
}

void pk_free(pk_unpickler *u) {
    if (!u) return;
    for (int i = 0; i < u->nall; i++) {
        pk_value *v = u->all[i];
        if (v->kind == PK_STR) choir_free(v->str);
        choir_free(v->items);
        choir_free(v->vals);
        choir_free(v);
    }
    choir_free(u->all);
    choir_free(u->stack);
    choir_free(u->marks);
    choir_free(u->memo);
    choir_free(u);
}

pk_unpickler *pk_load(const uint8_t *data, size_t len, const char *label, pk_value **root,
                      choir_err *err) {
    *root = NULL;
    pk_unpickler *u = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *u);
    if (!u) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        return NULL;
    }
    u->p = u->start = data;
    u->end = data + len;
    u->label = label;
    u->err = err;
    /* Each memo put takes at least two bytes, so no valid index reaches len. */
    u->nmemo = len / 2 + 1;
    u->memo = choir_calloc(CHOIR_MEM_OTHER, u->nmemo, sizeof(pk_value *));
    if (!u->memo) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    for (;;) {
        int rc = step(u);
        if (rc < 0) goto fail;
        if (rc == 1) break;
    }
    if (u->nstack != 1 || u->nmarks) {
        fail(u, CHOIR_EFORMAT, "STOP does not leave exactly one value on the stack");
        goto fail;
    }
    *root = u->stack[0];
    return u;
fail:
    pk_free(u);
    return NULL;
}
