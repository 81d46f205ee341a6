/* Decoding windows as openai/whisper's DecodingTask does: start sequence,
 * logit filters, greedy / sampled (best_of) / beam search, ranking, and the
 * temperature fallback; many windows at once, every hypothesis of every
 * window in one decoder batch per step.
 *
 * A window owns a group of G hypotheses (1 for greedy, beam_size for beam
 * search, best_of for sampling). Groups never look at each other, so a
 * window's result does not depend on what else is in the batch. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/pool.h"
#include "choir/tokenizer.h"
#include "models/whisper/whisper_internal.h"

typedef struct wd_hyp {
    choir_whisper_seq *kv;
    int32_t *tokens; /* initial + sampled, capacity n_text_ctx + 2 */
    int n;
    double sum_logprob;
    bool done;       /* greedy / sampling: produced eot */
    uint64_t rng;
    /* This step's next-token logits [V]: the group's own row after the start
     * sequence, else the hypothesis' row of the decoder batch (not copied). */
    float *logits;
    /* The step's rules, filled by wd_rules_one before the serial update: the
     * pick (argmax replaced by the sample when sampling) and, for beam
     * search, the G + 1 best ids. */
    wr_pick pick;
    int top[CHOIR_WHISPER_MAX_BEAM + 1], n_top;
} wd_hyp;

typedef struct wd_cand {
    int32_t *tokens; /* sampled tokens, no eot */
    int n;
    double sum_logprob;
} wd_cand;

typedef struct wd_group {
    const choir_whisper_window *w;
    int G;
    wd_hyp *hyp, *spare;      /* spare: beam search reordering targets */
    float *logits;            /* [G][V] next-token logits after the start sequence */
    int n_init, sot_index, language;
    float no_speech_prob;
    bool completed;
    wd_cand *finished;        /* beam search: up to max_cand (cap_finished slots) */
    int n_finished, max_cand, cap_finished;
    int n_live;               /* beam search: hyp[0 .. n_live) are current beams */
} wd_group;

typedef struct wd_ctx {
    const choir_whisper *m;
    const choir_whisper_params *p;
    float temperature;
    bool beam;
    int V, C;
    choir_whisper_filter filt;
    int32_t suppress[128];
    /* batch buffers for one decoder call */
    choir_whisper_seq **batch_seq;
    int32_t *batch_tok;
    int *batch_n;
    float *batch_logits;
    /* The hypotheses whose rules run in this step, with their groups. */
    struct wd_task *tasks;
    int n_tasks;
    double *exp_scratch; /* [V]: one row's exponentials, when rows are fewer than threads */
    /* The windows' batch stream (whisper_internal.h): all of the pass's
     * state is carved from it and given back at its end; NULL: the counted
     * allocator. */
    choir_stream *bs;
} wd_ctx;

/* The pass's memory: from the batch stream when there is one (zeroed when
 * asked; a full arena is the stream's error, CHOIR_ENOMEM), else counted. */
static void *wd_take(const wd_ctx *c, choir_mem_category cat, size_t bytes, bool zero) {
    void *p = c->bs ? choir_stream_alloc(c->bs, bytes, "whisper decoding state") : choir_alloc(cat, bytes);
    if (p && zero) memset(p, 0, bytes);
    return p;
}

typedef struct wd_task {
    wd_group *g;
    wd_hyp *h;
} wd_task;

/* --- small helpers --------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}


typedef int (*wd_compress2_fn)(unsigned char *, unsigned long *, const unsigned char *,
                               unsigned long, int);
static wd_compress2_fn g_compress2;
static pthread_once_t g_zlib_once = PTHREAD_ONCE_INIT;

/* zlib is loaded at run time: it is always installed (Debian's zlib1g is
 * essential) but not among the libraries the build links, and Python's
 * zlib.compress is what the threshold of 2.4 was tuned against. */
static void wd_zlib_init(void) {
    void *h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libz.so", RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&g_compress2 = dlsym(h, "compress2");
}

float choir_whisper_compression_ratio(const char *text, size_t len) {
    pthread_once(&g_zlib_once, wd_zlib_init);
    if (!g_compress2 || len == 0) return 0.0f;
    unsigned long cap = (unsigned long)(len + len / 100 + 64);
    unsigned char *out = choir_alloc(CHOIR_MEM_OTHER, cap);
    if (!out) return 0.0f;
    float r = 0.0f;
    if (g_compress2(out, &cap, (const unsigned char *)text, (unsigned long)len, 6) == 0 && cap > 0)
        r = (float)((double)len / (double)cap);
    choir_free(out);
    return r;
}

void choir_whisper_default_params(choir_whisper_params *p) {
    memset(p, 0, sizeof *p);
    p->task = CHOIR_WHISPER_TRANSCRIBE;
    p->language = -1;
    p->timestamps = true;
    p->beam_size = 1;
    p->patience = 1.0f;
    p->best_of = 5;
    p->length_penalty = 0.0f;
    p->sample_len = 224;
    p->suppress_blank = true;
    p->max_initial_timestamp_index = 50;
    for (int i = 0; i < 6; i++) p->temperatures[i] = 0.2f * (float)i;
    p->n_temperatures = 6;
    p->compression_ratio_threshold = 2.4f;
    p->logprob_threshold = -1.0f;
    p->no_speech_threshold = 0.6f;
    p->seed = 0;
}

void choir_whisper_result_clear(choir_whisper_result *r) {
    if (!r) return;
    choir_free(r->tokens);
    choir_free(r->text);
    memset(r, 0, sizeof *r);
}

/* Pinned through the attached GPU when there is one (each step's download
 * then goes straight in), else ordinary counted memory. */
float *choir_whisper_logits_alloc(const choir_whisper *m, int64_t rows) {
    size_t bytes = (size_t)(rows > 0 ? rows : 1) * (size_t)m->dims.n_vocab * sizeof(float);
#ifdef CHOIR_HAVE_CUDA
    float *p = m->gpu ? wg_logits_alloc(m->gpu, bytes) : NULL;
    if (p) return p;
#endif
    return choir_alloc(CHOIR_MEM_ACTIVATIONS, bytes);
}

void choir_whisper_logits_free(const choir_whisper *m, float *p) {
    if (!p) return;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu && wg_logits_free(m->gpu, p)) return;
#endif
    choir_free(p);
}

/* --- batched decoder calls --------------------------------------------------- */

/* Feeds one token (the last of its tokens) to every hypothesis in `hs`. */
static int wd_feed(wd_ctx *c, wd_hyp **hs, int n, choir_err *err) {
    for (int i = 0; i < n; i++) {
        c->batch_seq[i] = hs[i]->kv;
        c->batch_tok[i] = hs[i]->tokens[hs[i]->n - 1];
        c->batch_n[i] = 1;
    }
    return choir_whisper_decode(c->m, c->batch_seq, n, c->batch_tok, c->batch_n, false,
                                c->batch_logits, err);
}

/* Language detection for n windows at once, each on its own sequence. */
static int wd_detect(const choir_whisper *m, choir_whisper_seq **seqs,
                     const choir_whisper_cross *const *cross, int n, float *logits, int *langs,
                     float *probs, choir_err *err) {
    const choir_whisper_specials *sp = &m->sp;
    int V = m->dims.n_vocab;
    int32_t tok[64];
    int ones[64];
    for (int i0 = 0; i0 < n; i0 += 64) {
        int k = n - i0 < 64 ? n - i0 : 64;
        for (int i = 0; i < k; i++) {
            choir_whisper_seq_reset(seqs[i0 + i], cross[i0 + i]);
            tok[i] = sp->sot;
            ones[i] = 1;
        }
        int rc = choir_whisper_decode(m, seqs + i0, k, tok, ones, false, logits, err);
        if (rc) return rc;
        for (int i = 0; i < k; i++) {
            const float *l = logits + (size_t)i * (size_t)V + sp->lang0;
            int best = wh_argmax(l, sp->num_languages);
            langs[i0 + i] = best;
            if (probs && n == 1) {
                double z = wh_lse(l, sp->num_languages);
                for (int j = 0; j < sp->num_languages; j++) probs[j] = (float)exp((double)l[j] - z);
            }
        }
    }
    return 0;
}

int choir_whisper_detect_language(const choir_whisper *m, const choir_whisper_cross *cross,
                                  int *lang, float *probs, choir_err *err) {
    *lang = 0;
    if (!m->sp.multilingual) return 0;
    /* A window of a batch stream: the sequence and its logits from there. */
    wd_ctx c = {.bs = cross->bs};
    size_t mark = c.bs ? choir_stream_mark(c.bs) : 0;
    choir_whisper_seq *s = wh_seq_new(m, 1, c.bs, err);
    float *logits = c.bs ? wd_take(&c, CHOIR_MEM_ACTIVATIONS, (size_t)m->dims.n_vocab * sizeof(float), false)
                         : choir_whisper_logits_alloc(m, 1);
    int rc = (!s || !logits) ? choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory")
                             : wd_detect(m, &s, &cross, 1, logits, lang, probs, err);
    if (c.bs) {
        choir_stream_clear(c.bs);
        choir_stream_release(c.bs, mark);
        return rc;
    }
    choir_whisper_logits_free(m, logits);
    choir_whisper_seq_free(s);
    return rc;
}

/* --- one decoding step per group ------------------------------------------- */

static int wd_sample(wd_hyp *h, const float *logits, int V, float T) {
    /* Categorical(logits / T) by inversion of the cumulative distribution. */
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = fmaxf(mx, logits[i]);
    double total = 0;
    for (int i = 0; i < V; i++) total += exp(((double)logits[i] - mx) / T);
    double u = (double)(splitmix(&h->rng) >> 11) * (1.0 / 9007199254740992.0) * total, acc = 0;
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] == -INFINITY) continue;
        acc += exp(((double)logits[i] - mx) / T);
        last = i;
        if (acc > u) return i;
    }
    return last;
}

/* The rules of one hypothesis for this step: filters, pick, and the beam
 * candidates; touches only h (and its logits row), so hypotheses run in
 * parallel. */
static void wd_rules_one(const wd_ctx *c, const wd_group *g, wd_hyp *h, choir_pool *split) {
    choir_whisper_filter f = c->filt;
    /* sample_begin differs per window (prompt lengths differ). */
    f.sample_begin = g->n_init;
    wr_rules_pool(&f, h->tokens, h->n, h->logits, &h->pick, split, c->exp_scratch);
    if (c->beam) h->n_top = wr_topk(h->logits, c->V, g->G + 1, h->top);
    else if (c->temperature > 0) h->pick.argmax = wd_sample(h, h->logits, c->V, c->temperature);
}

static void wd_rules_range(void *ctx, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const wd_ctx *c = ctx;
    for (int64_t i = begin; i < end; i++) wd_rules_one(c, c->tasks[i].g, c->tasks[i].h, NULL);
}

static void wd_update_greedy(wd_ctx *c, wd_group *g) {
    int eot = c->m->sp.eot;
    bool all_done = true;
    for (int j = 0; j < g->G; j++) {
        wd_hyp *h = &g->hyp[j];
        if (h->done) continue;
        int next = h->pick.argmax;
        h->sum_logprob += (double)h->logits[next] - h->pick.lse;
        h->tokens[h->n++] = next;
        if (next == eot) h->done = true;
        else all_done = false;
    }
    if (all_done) g->completed = true;
}

typedef struct wd_beam_cand {
    int src, token;
    double score;
    int order;
} wd_beam_cand;

static int wd_cand_cmp(const void *a, const void *b) {
    const wd_beam_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->order - y->order; /* Python's sort is stable: keep insertion order */
}

static bool wd_same_seq(const wd_group *g, const wd_beam_cand *a, const wd_beam_cand *b) {
    const wd_hyp *x = &g->hyp[a->src], *y = &g->hyp[b->src];
    return a->token == b->token && x->n == y->n &&
           memcmp(x->tokens, y->tokens, (size_t)x->n * sizeof(int32_t)) == 0;
}

/* Records h's sampled tokens (h->n - n_init of them) as a finished candidate,
 * while fewer than `limit` are recorded. */
static int wd_add_finished(const wd_ctx *c, wd_group *g, const wd_hyp *h, int limit, double score,
                           int n_init) {
    if (g->n_finished >= limit || g->n_finished >= g->cap_finished) return 0;
    wd_cand *f = &g->finished[g->n_finished];
    int n = h->n - n_init;
    f->tokens = wd_take(c, CHOIR_MEM_OTHER, (size_t)(n > 0 ? n : 1) * sizeof(int32_t), false);
    if (!f->tokens) return CHOIR_ENOMEM;
    memcpy(f->tokens, h->tokens + n_init, (size_t)n * sizeof(int32_t));
    f->n = n;
    f->sum_logprob = score;
    g->n_finished++;
    return 0;
}

/* openai's BeamSearchDecoder.update for one window. */
static int wd_update_beam(wd_ctx *c, wd_group *g, wd_beam_cand *cands) {
    int G = g->G, nc = 0, eot = c->m->sp.eot;
    for (int j = 0; j < G; j++) {
        wd_hyp *h = &g->hyp[j];
        const float *l = h->logits;
        double z = h->pick.lse;
        int first = nc;
        /* top K of this beam (ties: lower id first), from wd_rules_one. */
        for (int k = 0; k < h->n_top; k++) {
            int best = h->top[k];
            wd_beam_cand cand = {j, best, h->sum_logprob + ((double)l[best] - z), nc};
            /* Identical sequences (all beams are equal at the first step) count once. */
            bool dup = false;
            for (int q = 0; q < first && !dup; q++) dup = wd_same_seq(g, &cands[q], &cand);
            /* A duplicate keeps its slot (topk still skips its token) but is
             * marked dead with a negative token. */
            if (dup) cand.score = -INFINITY, cand.token = -1 - best;
            cands[nc++] = cand;
        }
    }
    qsort(cands, (size_t)nc, sizeof *cands, wd_cand_cmp);
    int saved = 0;
    /* New finished sequences are offered in score order, as openai does after
     * the loop; they are collected first so that max_cand is respected. */
    for (int q = 0; q < nc && saved < G; q++) {
        if (cands[q].token < 0) continue;
        const wd_hyp *src = &g->hyp[cands[q].src];
        if (cands[q].token == eot) {
            int rc = wd_add_finished(c, g, src, g->max_cand, cands[q].score, g->n_init);
            if (rc) return rc;
            continue;
        }
        wd_hyp *dst = &g->spare[saved++];
        choir_whisper_seq_copy(dst->kv, src->kv, choir_whisper_seq_len(src->kv));
        memcpy(dst->tokens, src->tokens, (size_t)src->n * sizeof(int32_t));
        dst->n = src->n;
        dst->tokens[dst->n++] = cands[q].token;
        dst->sum_logprob = cands[q].score;
    }
    for (int j = 0; j < G; j++) {
        wd_hyp t = g->hyp[j];
        g->hyp[j] = g->spare[j];
        g->spare[j] = t;
    }
    g->n_live = saved;
    if (g->n_finished >= g->max_cand || saved < G) g->completed = true;
    return 0;
}

/* --- the pass --------------------------------------------------------------- */

static void wd_group_free(const wd_ctx *c, wd_group *g) {
    if (c->bs) return; /* released with the pass's scope */
    for (int j = 0; g->hyp && j < g->G; j++) {
        choir_whisper_seq_free(g->hyp[j].kv);
        choir_free(g->hyp[j].tokens);
    }
    for (int j = 0; g->spare && j < g->G; j++) {
        choir_whisper_seq_free(g->spare[j].kv);
        choir_free(g->spare[j].tokens);
    }
    for (int j = 0; j < g->n_finished; j++) choir_free(g->finished[j].tokens);
    choir_free(g->finished);
    choir_free(g->hyp);
    choir_free(g->spare);
    choir_free(g->logits);
}

static int wd_group_init(wd_ctx *c, wd_group *g, const choir_whisper_window *w, int G,
                         choir_err *err) {
    memset(g, 0, sizeof *g);
    g->w = w;
    g->G = G;
    g->n_live = G;
    g->hyp = wd_take(c, CHOIR_MEM_CACHE, (size_t)G * sizeof *g->hyp, true);
    g->logits = wd_take(c, CHOIR_MEM_ACTIVATIONS, (size_t)G * (size_t)c->V * sizeof(float), false);
    if (c->beam) {
        g->spare = wd_take(c, CHOIR_MEM_CACHE, (size_t)G * sizeof *g->spare, true);
        g->max_cand = (int)lround((double)G * (c->p->patience > 0 ? c->p->patience : 1.0));
        if (g->max_cand < 1) g->max_cand = 1;
        g->cap_finished = g->max_cand > G ? g->max_cand : G;
        g->finished = wd_take(c, CHOIR_MEM_OTHER, (size_t)g->cap_finished * sizeof *g->finished, true);
    }
    if (!g->hyp || !g->logits || (c->beam && (!g->spare || !g->finished))) goto oom;
    /* Positions this window can reach: its start sequence (prompt included)
     * and sample_len tokens; the loop never feeds more. */
    int np = w->prompt && w->n_prompt > 0 ? 1 + (w->n_prompt < c->C / 2 - 1 ? w->n_prompt : c->C / 2 - 1) : 0;
    int sample_len = c->p->sample_len > 0 ? c->p->sample_len : c->C / 2;
    int cap = np + 4 + sample_len + 1;
    for (int j = 0; j < G; j++) {
        wd_hyp *hs[2] = {&g->hyp[j], c->beam ? &g->spare[j] : NULL};
        for (int k = 0; k < 2 && hs[k]; k++) {
            hs[k]->kv = wh_seq_new(c->m, cap, c->bs, err);
            hs[k]->tokens = wd_take(c, CHOIR_MEM_OTHER, (size_t)(c->C + 2) * sizeof(int32_t), false);
            if (!hs[k]->kv || !hs[k]->tokens) goto oom;
            choir_whisper_seq_reset(hs[k]->kv, w->cross);
        }
        uint32_t tbits;
        memcpy(&tbits, &c->temperature, sizeof tbits);
        g->hyp[j].rng = c->p->seed ^ (w->seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)tbits << 32) ^
                        (uint64_t)j;
    }
    return 0;
oom:
    return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for decoding state");
}

/* The initial tokens of a window: [startofprev, prompt...] sot [lang task] [notimestamps]. */
static void wd_initial_tokens(wd_ctx *c, wd_group *g) {
    const choir_whisper_specials *sp = &c->m->sp;
    wd_hyp *h = &g->hyp[0];
    int n = 0, max_prompt = c->C / 2 - 1;
    if (g->w->prompt && g->w->n_prompt > 0) {
        int np = g->w->n_prompt < max_prompt ? g->w->n_prompt : max_prompt;
        h->tokens[n++] = sp->sot_prev;
        memcpy(h->tokens + n, g->w->prompt + g->w->n_prompt - np, (size_t)np * sizeof(int32_t));
        n += np;
    }
    g->sot_index = n;
    h->tokens[n++] = sp->sot;
    if (sp->multilingual) {
        h->tokens[n++] = sp->lang0 + g->language;
        h->tokens[n++] = c->p->task == CHOIR_WHISPER_TRANSLATE ? sp->translate : sp->transcribe;
    }
    if (!c->p->timestamps) h->tokens[n++] = sp->no_timestamps;
    h->n = n;
    g->n_init = n;
}

/* Runs the start sequence of every group through the decoder (in two batched
 * calls: up to sot, whose logits give the no-speech probability, then the
 * rest), and copies the state to the group's other hypotheses. */
static int wd_prefill(wd_ctx *c, wd_group *gs, int n, choir_err *err) {
    int V = c->V, no_speech = c->m->sp.no_speech;
    for (int phase = 0; phase < 2; phase++) {
        int k = 0, off = 0;
        for (int i = 0; i < n; i++) {
            wd_group *g = &gs[i];
            int from = phase ? g->sot_index + 1 : 0, to = phase ? g->n_init : g->sot_index + 1;
            if (to <= from) continue;
            c->batch_seq[k] = g->hyp[0].kv;
            memcpy(c->batch_tok + off, g->hyp[0].tokens + from, (size_t)(to - from) * sizeof(int32_t));
            c->batch_n[k++] = to - from;
            off += to - from;
        }
        if (k == 0) continue;
        int rc = choir_whisper_decode(c->m, c->batch_seq, k, c->batch_tok, c->batch_n, false,
                                      c->batch_logits, err);
        if (rc) return rc;
        k = 0;
        for (int i = 0; i < n; i++) {
            wd_group *g = &gs[i];
            int from = phase ? g->sot_index + 1 : 0, to = phase ? g->n_init : g->sot_index + 1;
            if (to <= from) continue;
            const float *l = c->batch_logits + (size_t)k++ * (size_t)V;
            if (phase == 0) g->no_speech_prob = (float)exp((double)l[no_speech] - wh_lse(l, V));
            memcpy(g->logits, l, (size_t)V * sizeof(float));
        }
    }
    for (int i = 0; i < n; i++) {
        wd_group *g = &gs[i];
        for (int j = 1; j < g->G; j++) {
            choir_whisper_seq_copy(g->hyp[j].kv, g->hyp[0].kv, g->n_init);
            memcpy(g->hyp[j].tokens, g->hyp[0].tokens, (size_t)g->n_init * sizeof(int32_t));
            g->hyp[j].n = g->n_init;
            memcpy(g->logits + (size_t)j * (size_t)V, g->logits, (size_t)V * sizeof(float));
        }
        for (int j = 0; j < g->G; j++) g->hyp[j].logits = g->logits + (size_t)j * (size_t)V;
    }
    return 0;
}

#ifdef CHOIR_HAVE_CUDA
/* Greedy decoding of every window (one hypothesis each) with the rules on
 * the device (wh_greedy_run): the host loop's picks, updates and stops,
 * with the host woken every few steps instead of every token. */
static int wd_greedy_device(wd_ctx *c, wd_group *gs, int n, int sample_len, choir_err *err) {
    int rc = 0;
    int32_t **tokens = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *tokens);
    const float **logits = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *logits);
    int *ints = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * 3 * sizeof *ints);
    double *sums = choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *sums);
    if (!tokens || !logits || !ints || !sums) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for decoding");
        goto done;
    }
    int *nt = ints, *sb = ints + n, *limit = ints + 2 * n;
    for (int i = 0; i < n; i++) {
        wd_hyp *h = &gs[i].hyp[0];
        c->batch_seq[i] = h->kv;
        tokens[i] = h->tokens;
        logits[i] = h->logits;
        nt[i] = h->n;
        sb[i] = gs[i].n_init;
        /* The host loop's stops: sample_len picks, or more than n_text_ctx tokens. */
        limit[i] = gs[i].n_init + sample_len < c->C + 1 ? gs[i].n_init + sample_len : c->C + 1;
        sums[i] = h->sum_logprob;
    }
    wh_greedy_req q = {.f = &c->filt, .tokens = tokens, .ld = c->C + 2, .n = nt,
                       .sum_logprob = sums, .sample_begin = sb, .limit = limit,
                       .logits = logits, .steps = wg_greedy_steps(c->m->gpu)};
    wh_dec_rt *rt = wg_dec_rt(c->m->gpu, n, n, 0, err);
    rc = rt ? wh_greedy_run(rt, wg_net(c->m->gpu), &c->m->dims, c->batch_seq, n, &q, err)
            : (err && err->code ? err->code : CHOIR_ENOMEM);
    if (rc) goto done;
    for (int i = 0; i < n; i++) {
        wd_hyp *h = &gs[i].hyp[0];
        h->n = nt[i];
        h->sum_logprob = sums[i];
        h->done = h->tokens[h->n - 1] == c->m->sp.eot;
        gs[i].completed = true;
    }
done:
    choir_free(tokens);
    choir_free(logits);
    choir_free(ints);
    choir_free(sums);
    return rc;
}
#endif

static double wd_rank_score(const wd_ctx *c, double sum, int len) {
    double pen = c->p->length_penalty > 0 ? pow((5.0 + len) / 6.0, c->p->length_penalty) : len;
    return sum / (pen > 0 ? pen : 1.0);
}

/* Picks the best hypothesis of a finished group and fills its result. */
static int wd_finish(wd_ctx *c, wd_group *g, const choir_tokenizer *tok, choir_whisper_result *r,
                     choir_err *err) {
    int eot = c->m->sp.eot;
    const int32_t *best = NULL;
    int best_n = 0;
    double best_sum = 0, best_score = -INFINITY;
    if (c->beam) {
        /* Not enough finished: the live beams, best first, count as finished. */
        for (int round = 0; g->n_finished < g->G && round < g->n_live; round++) {
            int pick = -1;
            for (int j = 0; j < g->n_live; j++)
                if (g->hyp[j].n >= 0 && (pick < 0 || g->hyp[j].sum_logprob > g->hyp[pick].sum_logprob))
                    pick = j;
            if (pick < 0) break;
            if (wd_add_finished(c, g, &g->hyp[pick], g->G, g->hyp[pick].sum_logprob, g->n_init))
                return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
            g->hyp[pick].n = -1; /* taken */
        }
        for (int j = 0; j < g->n_finished; j++) {
            double s = wd_rank_score(c, g->finished[j].sum_logprob, g->finished[j].n);
            if (s > best_score || !best) {
                best_score = s;
                best = g->finished[j].tokens;
                best_n = g->finished[j].n;
                best_sum = g->finished[j].sum_logprob;
            }
        }
    } else {
        for (int j = 0; j < g->G; j++) {
            const wd_hyp *h = &g->hyp[j];
            int n = 0;
            while (g->n_init + n < h->n && h->tokens[g->n_init + n] != eot) n++;
            double s = wd_rank_score(c, h->sum_logprob, n);
            if (s > best_score || !best) {
                best_score = s;
                best = h->tokens + g->n_init;
                best_n = n;
                best_sum = h->sum_logprob;
            }
        }
    }
    memset(r, 0, sizeof *r);
    r->tokens = choir_alloc(CHOIR_MEM_OTHER, (size_t)(best_n > 0 ? best_n : 1) * sizeof(int32_t));
    if (!r->tokens) return choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
    memcpy(r->tokens, best, (size_t)best_n * sizeof(int32_t));
    r->n_tokens = best_n;
    r->language = g->language;
    r->temperature = c->temperature;
    r->sum_logprob = (float)best_sum;
    r->avg_logprob = (float)(best_sum / (best_n + 1));
    r->no_speech_prob = g->no_speech_prob;
    if (tok) {
        size_t len;
        char *text;
        int rc = choir_tokenizer_decode(tok, r->tokens, r->n_tokens, &text, &len, err);
        if (rc) return rc;
        /* .strip(): the text keeps no leading or trailing whitespace. */
        size_t a = 0;
        while (a < len && (text[a] == ' ' || (text[a] >= '\t' && text[a] <= '\r'))) a++;
        while (len > a && (text[len - 1] == ' ' || (text[len - 1] >= '\t' && text[len - 1] <= '\r'))) len--;
        memmove(text, text + a, len - a);
        text[len - a] = '\0';
        r->text = text;
        r->compression_ratio = choir_whisper_compression_ratio(text, len - a);
    }
    return 0;
}

int choir_whisper_decode_windows(const choir_whisper *m, const choir_tokenizer *tok,
                                 const choir_whisper_window *windows, int n,
                                 const choir_whisper_params *p, float temperature,
                                 choir_whisper_result *results, choir_err *err) {
    wd_ctx c = {.m = m, .p = p, .temperature = temperature, .V = m->dims.n_vocab,
                .C = m->dims.n_text_ctx};
    c.beam = temperature <= 0 && p->beam_size > 1;
    if (p->beam_size > CHOIR_WHISPER_MAX_BEAM || p->best_of > CHOIR_WHISPER_MAX_BEAM)
        return choir_err_set(err, CHOIR_EINVAL, "whisper: beam_size and best_of are at most %d",
                             CHOIR_WHISPER_MAX_BEAM);
    int G = c.beam ? p->beam_size : (temperature > 0 && p->best_of > 1 ? p->best_of : 1);
    int rc = 0, total = n * G;
    /* Windows of a batch stream (all of a call's share one): the pass's
     * state is carved there, after a mark given back at the end. */
    c.bs = n > 0 && windows[0].cross && !m->gpu ? windows[0].cross->bs : NULL;
    size_t mark = c.bs ? choir_stream_mark(c.bs) : 0;
    wd_group *gs = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(n > 0 ? n : 1) * sizeof *gs, true);
    wd_hyp **active = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(total + 1) * sizeof *active, false);
    wd_beam_cand *cands = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(G * (G + 1) + 1) * sizeof *cands, false);
    c.tasks = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(total + 1) * sizeof *c.tasks, false);
    c.exp_scratch = wd_take(&c, CHOIR_MEM_ACTIVATIONS, (size_t)c.V * sizeof(double), false);
    c.batch_seq = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(total + 1) * sizeof *c.batch_seq, false);
    c.batch_n = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(total + 1) * sizeof *c.batch_n, false);
    c.batch_tok = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(n * (c.C + 1) + total + 1) * sizeof(int32_t), false);
    c.batch_logits = c.bs ? wd_take(&c, CHOIR_MEM_ACTIVATIONS,
                                    (size_t)(total + 1) * (size_t)c.V * sizeof(float), false)
                          : choir_whisper_logits_alloc(m, total + 1);
    int *langs = wd_take(&c, CHOIR_MEM_OTHER, (size_t)(n + 1) * sizeof(int), false);
    if (!gs || !active || !cands || !c.tasks || !c.exp_scratch || !c.batch_seq || !c.batch_n || !c.batch_tok || !c.batch_logits || !langs) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory for decoding");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if ((rc = wd_group_init(&c, &gs[i], &windows[i], G, err))) goto done;

    /* Languages: given per window, else by the parameters, else detected. */
    int n_detect = 0;
    for (int i = 0; i < n; i++) {
        int lang = windows[i].language >= 0 ? windows[i].language : p->language;
        if (!m->sp.multilingual) lang = 0;
        if (lang >= m->sp.num_languages) {
            rc = choir_err_set(err, CHOIR_EINVAL, "whisper: language index %d not in this model", lang);
            goto done;
        }
        gs[i].language = lang;
        if (lang < 0) {
            c.batch_seq[n_detect] = gs[i].hyp[0].kv;
            active[n_detect++] = &gs[i].hyp[0];
        }
    }
    if (n_detect) {
        const choir_whisper_cross *crs[64];
        for (int i0 = 0; i0 < n_detect; i0 += 64) {
            int k = n_detect - i0 < 64 ? n_detect - i0 : 64;
            for (int i = 0; i < k; i++) crs[i] = active[i0 + i]->kv->cross;
            if ((rc = wd_detect(m, c.batch_seq + i0, crs, k, c.batch_logits, langs + i0, NULL, err)))
                goto done;
        }
        for (int i = 0, d = 0; i < n; i++)
            if (gs[i].language < 0) {
                gs[i].language = langs[d++];
                choir_whisper_seq_reset(gs[i].hyp[0].kv, windows[i].cross);
            }
    }

    c.filt.sp = &m->sp;
    c.filt.n_vocab = c.V;
    c.filt.timestamps = p->timestamps;
    c.filt.suppress_blank = p->suppress_blank;
    c.filt.n_suppress = choir_whisper_default_suppress(&m->sp, c.suppress, 128);
    c.filt.suppress = c.suppress;
    c.filt.max_initial_timestamp_index = p->max_initial_timestamp_index;
    for (int i = 0; i < n; i++) wd_initial_tokens(&c, &gs[i]);
    if ((rc = wd_prefill(&c, gs, n, err))) goto done;

    int sample_len = p->sample_len > 0 ? p->sample_len : c.C / 2;
#ifdef CHOIR_HAVE_CUDA
    if (m->gpu && !c.beam && c.temperature <= 0 && G == 1 && wg_greedy_steps(m->gpu) > 0) {
        if ((rc = wd_greedy_device(&c, gs, n, sample_len, err))) goto done;
        sample_len = 0; /* every window is done */
    }
#endif
    for (int step = 0; step < sample_len; step++) {
        /* The rules of every live hypothesis (the step's host work: a pass
         * or two over the vocabulary each) run in parallel; the updates,
         * which move hypotheses and caches, then run in order. */
        c.n_tasks = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; !gs[i].completed && j < gs[i].G; j++)
                if (!gs[i].hyp[j].done) c.tasks[c.n_tasks++] = (wd_task){&gs[i], &gs[i].hyp[j]};
        choir_pool *pool = choir_pool_default();
        if (c.n_tasks * 2 <= choir_pool_threads(pool))
            for (int t = 0; t < c.n_tasks; t++) wd_rules_one(&c, c.tasks[t].g, c.tasks[t].h, pool);
        else
            choir_pool_parallel_for(pool, c.n_tasks, 1, wd_rules_range, &c);
        int na = 0;
        for (int i = 0; i < n; i++) {
            wd_group *g = &gs[i];
            if (g->completed) continue;
            if (c.beam) {
                if ((rc = wd_update_beam(&c, g, cands))) {
                    rc = choir_err_set(err, rc, "whisper: out of memory in beam search");
                    goto done;
                }
            } else {
                wd_update_greedy(&c, g);
            }
            for (int j = 0; j < g->G && !g->completed; j++)
                if (g->hyp[j].n > c.C) g->completed = true;
            if (g->completed) continue;
            for (int j = 0; j < g->G; j++)
                if (!g->hyp[j].done) active[na++] = &g->hyp[j];
        }
        if (na == 0 || step == sample_len - 1) break;
        if ((rc = wd_feed(&c, active, na, err))) goto done;
        /* Each hypothesis reads its row of the batch in place. */
        for (int a = 0; a < na; a++) active[a]->logits = c.batch_logits + (size_t)a * (size_t)c.V;
    }
    for (int i = 0; i < n; i++)
        if ((rc = wd_finish(&c, &gs[i], tok, &results[i], err))) {
            for (int k = 0; k < i; k++) choir_whisper_result_clear(&results[k]);
            goto done;
        }
done:
    if (c.bs) {
        /* A full arena reads as CHOIR_ENOMEM (the engine retries the batch
         * with more room); the stream is cleared for the caller's next use. */
        if (!rc && choir_stream_status(c.bs, NULL)) rc = choir_stream_status(c.bs, err);
        choir_stream_clear(c.bs);
        choir_stream_release(c.bs, mark);
        return rc;
    }
    for (int i = 0; gs && i < n; i++) wd_group_free(&c, &gs[i]);
    choir_free(gs);
    choir_free(active);
    choir_free(cands);
    choir_free(c.tasks);
    choir_free(c.exp_scratch);
    choir_free(c.batch_seq);
    choir_free(c.batch_n);
    choir_free(c.batch_tok);
    choir_whisper_logits_free(m, c.batch_logits);
    choir_free(langs);
    return rc;
}

static bool wd_needs_fallback(const choir_whisper_params *p, const choir_whisper_result *r) {
    bool fb = false;
    if (p->compression_ratio_threshold > 0 && r->compression_ratio > p->compression_ratio_threshold)
        fb = true;
    if (r->avg_logprob < p->logprob_threshold) fb = true;
    /* A window that is probably silence is accepted as it is. */
    if (r->no_speech_prob > p->no_speech_threshold && r->avg_logprob < p->logprob_threshold)
        fb = false;
    return fb;
}

int choir_whisper_decode_fallback(const choir_whisper *m, const choir_tokenizer *tok,
                                  const choir_whisper_window *windows, int n,
                                  const choir_whisper_params *p, choir_whisper_result *results,
                                  choir_err *err) {
    int nt = p->n_temperatures > 0 ? p->n_temperatures : 1;
    choir_whisper_window *pend = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n + 1) * sizeof *pend);
    int *idx = choir_alloc(CHOIR_MEM_OTHER, (size_t)(n + 1) * sizeof *idx);
    choir_whisper_result *tmp = choir_calloc(CHOIR_MEM_OTHER, (size_t)(n + 1), sizeof *tmp);
    int rc = 0, np = n;
    if (!pend || !idx || !tmp) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "whisper: out of memory");
        goto done;
    }
    memset(results, 0, (size_t)n * sizeof *results);
    for (int i = 0; i < n; i++) pend[i] = windows[i], idx[i] = i;
    for (int t = 0; t < nt && np > 0; t++) {
        float T = p->n_temperatures > 0 ? p->temperatures[t] : 0.0f;
        if ((rc = choir_whisper_decode_windows(m, tok, pend, np, p, T, tmp, err))) goto done;
        int keep = 0;
        for (int k = 0; k < np; k++) {
            choir_whisper_result_clear(&results[idx[k]]);
            results[idx[k]] = tmp[k];
            memset(&tmp[k], 0, sizeof tmp[k]);
            /* The language found at the first temperature is kept for the rest. */
            if (t + 1 < nt && wd_needs_fallback(p, &results[idx[k]])) {
                pend[keep] = pend[k];
                pend[keep].language = results[idx[k]].language;
                idx[keep++] = idx[k];
            }
        }
        np = keep;
    }
done:
    if (rc)
        for (int i = 0; i < n; i++) choir_whisper_result_clear(&results[i]);
    choir_free(pend);
    choir_free(idx);
    choir_free(tmp);
    return rc;
}
