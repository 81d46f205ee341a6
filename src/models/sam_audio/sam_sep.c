/* Separation: prompts and separate_long's chunk plan.
 *
 * (The ODE, its parameters and the noise are in sam_ode.c.)
 *
 * A job is one recording: chunk i covers samples [i*hop, min(i*hop + chunk,
 * n)) with hop = chunk - overlap, n_chunks = ceil((n - overlap) / hop) (one
 * pass when n <= chunk), noise from seed + i, the text encoded once. Each
 * chunk's output is cut to its input length; consecutive chunks are joined
 * over `overlap` samples by out = prev * (1 - w) + next * w with
 * w = 0.5 (1 - cos(pi t)), t = linspace(0, 1, overlap), as mlx-audio joins
 * them. Anchors are given in the recording's time and shifted into each
 * chunk. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "sam_dit.h"

/* --- prompts ------------------------------------------------------------ */

int choir_sam_parse_anchors(const char *text, choir_sam_anchor *out, int cap, int *n, choir_err *err) {
    *n = 0;
    if (!text) return 0;
    while (*text == ' ') text++;
    if (!*text) return 0;
    if (*text == '[') {
        cJSON *root = choir_json_parse(text, strlen(text), err);
        if (!root) return CHOIR_EINVAL;
        const cJSON *e;
        int rc = 0;
        cJSON_ArrayForEach(e, root) {
            const cJSON *k = cJSON_GetArrayItem(e, 0), *s = cJSON_GetArrayItem(e, 1), *f = cJSON_GetArrayItem(e, 2);
            if (!cJSON_IsString(k) || !cJSON_IsNumber(s) || !cJSON_IsNumber(f) || cJSON_GetArraySize(e) != 3 ||
                (strcmp(k->valuestring, "+") && strcmp(k->valuestring, "-"))) {
                rc = choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchor %d must be [\"+\"|\"-\", start, end]", *n);
                break;
            }
            if (*n == cap) {
                rc = choir_err_set(err, CHOIR_EINVAL, "sam-audio: more than %d anchors", cap);
                break;
            }
            out[*n] = (choir_sam_anchor){k->valuestring[0] == '+', s->valuedouble, f->valuedouble};
            if (!(out[*n].start_s >= 0) || !(out[*n].end_s > out[*n].start_s)) {
                rc = choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchor %d needs 0 <= start < end", *n);
                break;
            }
            (*n)++;
        }
        if (!cJSON_IsArray(root)) rc = choir_err_set(err, CHOIR_EINVAL, "sam-audio: anchors must be a list");
        cJSON_Delete(root);
        if (rc) *n = 0;
        return rc;
    }
    const char *s = text;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == ';') s++;
        if (!*s) break;
        char sign = *s;
        double a, b;
        int used = 0;
        if ((sign != '+' && sign != '-') || sscanf(s + 1, " :%lf :%lf%n", &a, &b, &used) < 2 || !(a >= 0) || !(b > a)) {
            *n = 0;
            return choir_err_set(err, CHOIR_EINVAL, "sam-audio: bad anchor \"%.40s\" (want +:start:end or -:start:end)", s);
        }
        if (*n == cap) {
            *n = 0;
            return choir_err_set(err, CHOIR_EINVAL, "sam-audio: more than %d anchors", cap);
        }
        out[(*n)++] = (choir_sam_anchor){sign == '+', a, b};
        s += 1 + used;
    }
    return 0;
}

void choir_sam_anchor_tables(const choir_sam *m, const choir_sam_anchor *a, int n, int64_t T, int64_t valid,
                             int32_t *ids, int32_t *alignment) {
    int hop = m->codec.hop;
    ids[0] = 0; /* <null> */
    ids[1] = 3; /* <pad> */
    for (int64_t t = 0; t < T; t++) alignment[t] = t < valid ? 0 : 1;
    for (int i = 0; i < n; i++) {
        ids[i + 2] = a[i].positive ? 1 : 2;
        int64_t s = (int64_t)ceil(a[i].start_s * CHOIR_SAM_RATE / hop), e = (int64_t)ceil(a[i].end_s * CHOIR_SAM_RATE / hop);
        if (s < 0) s = 0;
        if (e > T) e = T;
        for (int64_t t = s; t < e; t++) alignment[t] = i + 2;
    }
}

/* --- jobs --------------------------------------------------------------- */

struct choir_sam_job {
    const choir_sam *m;
    const float *x;
    int64_t n;
    choir_sam_params p;
    const choir_sam_anchor *anchors;
    int n_anchors;
    choir_sam_emit_fn emit;
    void *user;
    float *text;          /* [text_len, text_dim] */
    int text_len;
    int64_t chunk, overlap, hop;
    int n_chunks, next;
    float *tail_t, *tail_r; /* previous chunk's last `overlap` samples */
    int64_t emitted;
    int failed;
    choir_arena *own;     /* the job's own memory, without p.arena */
};

size_t sam_job_state_bytes(const choir_sam *m, int64_t overlap, int text_len) {
    return sam_up(sizeof(struct choir_sam_job)) + sam_up((size_t)(text_len * m->dit.text_dim) * sizeof(float)) +
           sam_up((size_t)(2 * overlap + 1) * sizeof(float));
}

choir_sam_job *choir_sam_job_create(const choir_sam *m, const float *x, int64_t n, const char *text,
                                    const choir_sam_anchor *anchors, int n_anchors, const choir_sam_params *p,
                                    choir_sam_emit_fn emit, void *user, choir_err *err) {
    choir_sam_params dp;
    if (!p) {
        choir_sam_default_params(&dp);
        p = &dp;
    }
    if (choir_sam_check_params(p, err) != 0) return NULL;
    if (n < 1 || !x) {
        choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty input");
        return NULL;
    }
    if (n_anchors < 0 || n_anchors > CHOIR_SAM_MAX_ANCHORS) {
        choir_err_set(err, CHOIR_EINVAL, "sam-audio: at most %d anchors", CHOIR_SAM_MAX_ANCHORS);
        return NULL;
    }
    int32_t *ids = NULL;
    int text_len = 0;
    if (choir_sam_tokenize(m, text, &ids, &text_len, err) != 0) return NULL;
    sam_geometry g;
    sam_job_geometry(m, n, p, &g);
    /* The job's state lives until it is freed: in the caller's arena (given
     * back when the caller releases it), or in an arena of its own. T5's
     * working memory goes above it and is given back at once. */
    choir_arena *a = p->arena, *own = NULL;
    if (!a && !(a = own = choir_arena_create(sam_job_state_bytes(m, g.overlap, text_len), CHOIR_MEM_ACTIVATIONS, err))) {
        choir_free(ids);
        return NULL;
    }
    sam_mem mem = {.a = a};
    size_t mark = choir_arena_mark(a);
    choir_sam_job *j = sam_host_alloc(&mem, sizeof *j, err);
    float *tf = j ? sam_host_alloc(&mem, (size_t)(text_len * m->dit.text_dim) * sizeof(float), err) : NULL;
    float *tails = tf ? sam_host_alloc(&mem, (size_t)(2 * g.overlap + 1) * sizeof(float), err) : NULL;
    int rc = tails ? 0 : CHOIR_ENOMEM;
    if (!rc && own) {
        /* T5 in counted memory of its own (the job's arena holds the state only) */
        rc = choir_sam_text_features(m, ids, text_len, tf, err);
    } else if (!rc) {
        rc = sam_t5_in(m, a, ids, text_len, tf, err);
    }
    choir_free(ids);
    if (rc) {
        choir_arena_release(a, mark);
        choir_arena_free(own);
        return NULL;
    }
    memset(j, 0, sizeof *j);
    j->m = m, j->x = x, j->n = n, j->p = *p, j->anchors = anchors, j->n_anchors = n_anchors, j->emit = emit, j->user = user;
    j->chunk = g.chunk, j->overlap = g.overlap, j->hop = g.hop, j->n_chunks = g.n_chunks;
    j->text = tf, j->text_len = text_len;
    j->tail_t = tails, j->tail_r = tails + g.overlap;
    j->own = own;
    return j;
}

void choir_sam_job_free(choir_sam_job *j) {
    if (!j) return;
    choir_arena_free(j->own); /* the job itself lies in it */
}

int choir_sam_job_done(const choir_sam_job *j) { return j->failed || j->next >= j->n_chunks; }
int choir_sam_job_chunks(const choir_sam_job *j) { return j->n_chunks; }
int choir_sam_job_chunks_done(const choir_sam_job *j) { return j->next; }

/* One chunk of a job in flight. */
typedef struct chunk_work {
    choir_sam_job *j;
    int64_t start, len, T;
    float *lat;     /* [T, C] */
    float *x;       /* [T, 2C] noise -> result */
    float *audio;   /* [2 T hop]: decoded target, then residual */
    int32_t *ids, *align;
} chunk_work;

/* Decodes the chunk's result, target and residual, into its audio. */
static int decode_chunk(const sam_mem *mem, chunk_work *w, choir_err *err) {
    const choir_sam *m = w->j->m;
    int64_t T = w->T, C = m->codec.cb, L = T * m->codec.hop;
    size_t mark = choir_arena_mark(mem->a);
    float *lt = sam_host_alloc(mem, (size_t)(T * C) * sizeof *lt, err);
    int rc = lt ? 0 : CHOIR_ENOMEM;
    for (int part = 0; part < 2 && !rc; part++) {
        for (int64_t t = 0; t < T; t++) memcpy(lt + t * C, w->x + t * 2 * C + part * C, (size_t)C * sizeof *lt);
        rc = sam_decode_in(m, mem, lt, T, w->j->p.message, w->audio + part * L, err);
    }
    choir_arena_release(mem->a, mark);
    return rc;
}

/* Emits what of the decoded chunk is final. */
static int finish_chunk(chunk_work *w, choir_err *err) {
    choir_sam_job *j = w->j;
    int64_t L = w->T * j->m->codec.hop;
    float *buf_t = w->audio, *buf_r = w->audio + L;
    int rc = 0;
    int first = j->next == 0, last = j->next + 1 == j->n_chunks;
    int64_t ov = j->n_chunks > 1 ? j->overlap : 0, head = 0;
    if (!first && ov > 0) {
        /* Crossfade the previous tail with this head, in place in the head. */
        for (int64_t i = 0; i < ov; i++) {
            double tt = ov > 1 ? (double)i / (double)(ov - 1) : 1.0;
            float win = (float)(0.5 * (1.0 - cos(M_PI * tt)));
            buf_t[i] = j->tail_t[i] * (1 - win) + buf_t[i] * win;
            buf_r[i] = j->tail_r[i] * (1 - win) + buf_r[i] * win;
        }
    }
    int64_t end = last ? w->len : w->len - ov;
    if (end > head && j->emit) rc = j->emit(j->user, buf_t + head, buf_r + head, end - head, j->emitted, err);
    j->emitted += end - head;
    if (!last && ov > 0) {
        memcpy(j->tail_t, buf_t + w->len - ov, (size_t)ov * sizeof(float));
        memcpy(j->tail_r, buf_r + w->len - ov, (size_t)ov * sizeof(float));
    }
    j->next++;
    return rc;
}

static size_t chunk_held_bytes(const choir_sam *m, int64_t T) {
    int64_t C = m->codec.cb;
    return sam_up((size_t)(T * 3 * C) * sizeof(float)) +
           sam_up((size_t)(CHOIR_SAM_MAX_ANCHORS + 2 + T) * sizeof(int32_t)) +
           sam_up((size_t)(2 * T * m->codec.hop) * sizeof(float));
}

static size_t round_arrays_bytes(int n) {
    return sam_up((size_t)n * sizeof(chunk_work)) + sam_up((size_t)n * sizeof(choir_sam_item)) +
           sam_up((size_t)n * sizeof(float *)) + sam_up((size_t)n * sizeof(int));
}

size_t sam_round_bytes(const choir_sam *m, const sam_chunk_dims *c, int n) {
    int64_t hop = m->codec.hop, C = m->codec.cb;
    size_t held = round_arrays_bytes(n), most = 0, b;
    int grouped[64] = {0};
    for (int i = 0; i < n; i++) {
        int64_t T = (c[i].len + hop - 1) / hop;
        held += chunk_held_bytes(m, T);
        sam_need ne = sam_encode_need(m, c[i].len), nd = sam_decode_need(m, T);
        if ((b = sam_need_arena(m, &ne)) > most) most = b;
        if ((b = sam_up((size_t)(T * C) * sizeof(float)) + sam_need_arena(m, &nd)) > most) most = b;
    }
    /* The ODE groups of run_round, one after another. */
    for (int a = 0; a < n; a++) {
        if (a < 64 && grouped[a]) continue;
        choir_sam_item gi[64];
        int g = 0;
        for (int k = a; k < n && g < 64; k++) {
            if ((k < 64 && grouped[k]) || c[k].method != c[a].method || c[k].steps != c[a].steps) continue;
            if (k < 64) grouped[k] = 1;
            int64_t T = (c[k].len + hop - 1) / hop;
            gi[g++] = (choir_sam_item){.frames = T, .valid_frames = T, .text_len = c[k].text_len};
        }
        sam_need no = sam_ode_need(m, gi, g);
        if ((b = sam_need_arena(m, &no)) > most) most = b;
    }
    return held + most;
}

/* The round's chunks: every unfinished job's next one. */
static int round_dims(choir_sam_job *const *jobs, int n, sam_chunk_dims *c) {
    int nw = 0;
    for (int i = 0; i < n; i++) {
        const choir_sam_job *j = jobs[i];
        if (choir_sam_job_done(j)) continue;
        int64_t start = (int64_t)j->next * j->hop;
        c[nw++] = (sam_chunk_dims){.len = j->n_chunks == 1 ? j->n : (start + j->chunk < j->n ? j->chunk : j->n - start),
                                   .text_len = j->text_len, .method = j->p.method, .steps = j->p.steps};
    }
    return nw;
}

/* The round in the call's memory. Every chunk is encoded, integrated and
 * decoded before the first of them is emitted, so a round that runs out of
 * room fails before any of its audio is out. */
static int run_round_in(const choir_sam *m, const sam_mem *mem, choir_sam_job *const *jobs, int n, choir_err *err) {
    size_t mark = choir_arena_mark(mem->a);
    int nn = n ? n : 1;
    chunk_work *w = sam_host_alloc(mem, (size_t)nn * sizeof *w, err);
    choir_sam_item *items = w ? sam_host_alloc(mem, (size_t)nn * sizeof *items, err) : NULL;
    float **xs = items ? sam_host_alloc(mem, (size_t)nn * sizeof *xs, err) : NULL;
    int *used = xs ? sam_host_alloc(mem, (size_t)nn * sizeof *used, err) : NULL;
    int rc = used ? 0 : CHOIR_ENOMEM, nw = 0;
    if (rc) goto done;
    memset(w, 0, (size_t)nn * sizeof *w);
    memset(used, 0, (size_t)nn * sizeof *used);
    int64_t C = m->codec.cb, hop = m->codec.hop;
    /* Every chunk's buffers first: they live through the round. */
    for (int i = 0; i < n && !rc; i++) {
        choir_sam_job *j = jobs[i];
        if (choir_sam_job_done(j)) continue;
        chunk_work *c = &w[nw++];
        c->j = j;
        c->start = (int64_t)j->next * j->hop;
        c->len = j->n_chunks == 1 ? j->n : (c->start + j->chunk < j->n ? j->chunk : j->n - c->start);
        c->T = (c->len + hop - 1) / hop;
        c->lat = sam_host_alloc(mem, (size_t)(c->T * 3 * C) * sizeof(float), err);
        c->ids = c->lat ? sam_host_alloc(mem, (size_t)(CHOIR_SAM_MAX_ANCHORS + 2 + c->T) * sizeof(int32_t), err) : NULL;
        c->audio = c->ids ? sam_host_alloc(mem, (size_t)(2 * c->T * hop) * sizeof(float), err) : NULL;
        if (!c->audio) rc = CHOIR_ENOMEM;
    }
    /* Encode every job's next chunk. */
    for (int a = 0; a < nw && !rc; a++) {
        chunk_work *c = &w[a];
        choir_sam_job *j = c->j;
        c->x = c->lat + c->T * C;
        c->align = c->ids + CHOIR_SAM_MAX_ANCHORS + 2;
        rc = sam_encode_in(m, mem, j->x + c->start, c->len, c->lat, err);
        choir_sam_noise(m, j->p.seed + (uint64_t)j->next, c->T, c->x);
        /* Anchors shifted into the chunk's time. */
        choir_sam_anchor local[CHOIR_SAM_MAX_ANCHORS];
        int nl = 0;
        double s0 = (double)c->start / CHOIR_SAM_RATE, s1 = (double)(c->start + c->len) / CHOIR_SAM_RATE;
        for (int k = 0; k < j->n_anchors; k++) {
            if (j->anchors[k].end_s <= s0 || j->anchors[k].start_s >= s1) continue;
            local[nl] = j->anchors[k];
            local[nl].start_s = local[nl].start_s > s0 ? local[nl].start_s - s0 : 0;
            local[nl].end_s -= s0;
            nl++;
        }
        choir_sam_anchor_tables(m, local, nl, c->T, c->T, c->ids, c->align);
        items[a] = (choir_sam_item){.frames = c->T, .valid_frames = c->T, .features = c->lat, .text = j->text,
                                    .text_len = j->text_len, .anchor_ids = c->ids, .n_anchor_ids = nl + 2,
                                    .anchor_alignment = c->align};
        xs[a] = c->x;
    }
    /* One ODE per (method, steps) group: their evaluations share batches. */
    for (int a = 0; a < nw && !rc; a++) {
        if (used[a]) continue;
        choir_sam_item gi[64];
        float *gx[64];
        int g = 0;
        for (int b = a; b < nw && g < 64; b++)
            if (!used[b] && w[b].j->p.method == w[a].j->p.method && w[b].j->p.steps == w[a].j->p.steps) {
                used[b] = 1;
                gi[g] = items[b];
                gx[g++] = xs[b];
            }
        rc = sam_ode_in(m, mem, gi, g, gx, &w[a].j->p, err);
    }
    /* Decode every chunk, then emit. */
    for (int a = 0; a < nw && !rc; a++) rc = decode_chunk(mem, &w[a], err);
    for (int a = 0; a < nw && !rc; a++) rc = finish_chunk(&w[a], err);
done:
    if (rc)
        for (int a = 0; a < nw; a++) w[a].j->failed = 1;
    choir_arena_release(mem->a, mark);
    return rc;
}

int choir_sam_run_round(const choir_sam *m, choir_sam_job *const *jobs, int n, choir_err *err) {
    if (n < 1) return 0;
    choir_arena *arena = jobs[0]->p.arena;
    for (int i = 1; i < n; i++)
        if (jobs[i]->p.arena != arena)
            return choir_err_set(err, CHOIR_EINVAL, "sam-audio: the jobs of a round must share one arena");
    sam_chunk_dims c[64];
    size_t plan = 0;
    if (!arena) {
        /* without the caller's arena: one of the round's planned size */
        sam_chunk_dims *dims = n <= 64 ? c : choir_alloc(CHOIR_MEM_OTHER, (size_t)n * sizeof *dims);
        if (!dims) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
        plan = sam_round_bytes(m, dims, round_dims(jobs, n, dims));
        if (dims != c) choir_free(dims);
    }
    sam_mem mem;
    int rc = sam_mem_open(m, arena, plan, &mem, err);
    if (rc) return rc;
    rc = run_round_in(m, &mem, jobs, n, err);
    sam_mem_close(&mem);
    return rc;
}

typedef struct whole_out {
    float *t, *r;
    int64_t n;
} whole_out;

static int whole_emit(void *user, const float *t, const float *r, int64_t n, int64_t offset, choir_err *err) {
    whole_out *o = user;
    if (offset + n > o->n) return choir_err_set(err, CHOIR_EINTERNAL, "sam-audio: emitted past the end");
    memcpy(o->t + offset, t, (size_t)n * sizeof *t);
    memcpy(o->r + offset, r, (size_t)n * sizeof *r);
    return 0;
}

int choir_sam_separate(const choir_sam *m, const float *x, int64_t n, const char *text, const choir_sam_anchor *anchors,
                       int n_anchors, const choir_sam_params *p, float *target, float *residual, choir_err *err) {
    whole_out o = {target, residual, n};
    choir_sam_job *j = choir_sam_job_create(m, x, n, text, anchors, n_anchors, p, whole_emit, &o, err);
    if (!j) return err && err->code ? err->code : CHOIR_EINVAL;
    int rc = 0;
    while (!rc && !choir_sam_job_done(j)) rc = choir_sam_run_round(m, &j, 1, err);
    choir_sam_job_free(j);
    return rc;
}

/* --- estimates (the plan of sam_plan.c's header) ------------------------ */

int choir_sam_count_tokens(const choir_sam *m, const char *text) {
    int32_t *ids = NULL;
    int n = 0;
    if (!m || !m->has_t5 || choir_sam_tokenize(m, text, &ids, &n, NULL) != 0) return m && m->has_t5 ? m->t5.max_length : 512;
    choir_free(ids);
    return n;
}

static int64_t job_bytes_without_model(int64_t n_samples, int text_tokens, const choir_sam_params *p);

/* The estimates' arguments: p NULL means the defaults; a token count outside
 * 1..max_length means the longest text. */
static const choir_sam_params *est_params(const choir_sam_params *p, choir_sam_params *dp) {
    if (p) return p;
    choir_sam_default_params(dp);
    return dp;
}
static int est_tokens(const choir_sam *m, int text_tokens) {
    return text_tokens < 1 || text_tokens > m->t5.max_length ? m->t5.max_length : text_tokens;
}

int64_t choir_sam_job_bytes(const choir_sam *m, int64_t n_samples, int text_tokens, const choir_sam_params *p) {
    choir_sam_params dp;
    p = est_params(p, &dp);
    if (n_samples < 1) n_samples = 1;
    if (!m) return job_bytes_without_model(n_samples, text_tokens, p);
    text_tokens = est_tokens(m, text_tokens);
    sam_geometry g;
    sam_job_geometry(m, n_samples, p, &g);
    sam_chunk_dims c = {.len = g.first_len, .text_len = text_tokens, .method = p->method, .steps = p->steps};
    size_t t5 = m->has_t5 ? sam_t5_bytes(m, text_tokens) : 0, round = sam_round_bytes(m, &c, 1);
    return (int64_t)(sam_job_state_bytes(m, g.overlap, text_tokens) + (t5 > round ? t5 : round));
}

int64_t choir_sam_chunk_bytes(const choir_sam *m, int64_t frames, int text_tokens) {
    if (!m) {
        choir_sam_params p;
        choir_sam_default_params(&p);
        p.chunk_seconds = (double)(frames * 1920) / CHOIR_SAM_RATE;
        p.overlap_seconds = 0;
        return job_bytes_without_model(frames * 1920, text_tokens, &p);
    }
    text_tokens = est_tokens(m, text_tokens);
    sam_chunk_dims c = {.len = frames * m->codec.hop, .text_len = text_tokens, .method = CHOIR_SAM_MIDPOINT, .steps = 1};
    return (int64_t)sam_round_bytes(m, &c, 1);
}

/* Without a model (before the engine has loaded it): a bound at the
 * published base sizes (codec 64 / 1536 wide, hop 1920, C 128; DiT D 2048,
 * FFN 5504; T5-base), with a generous margin over the stages' shapes. The
 * engine estimates again with the model once it is loaded. */
static int64_t job_bytes_without_model(int64_t n_samples, int text_tokens, const choir_sam_params *p) {
    int64_t D = 2048, F = 5504, hop = 1920, C = 128, dec = 1536, enc = 64, Lt = text_tokens > 0 ? text_tokens : 512;
    int64_t chunk = (int64_t)(p->chunk_seconds * CHOIR_SAM_RATE);
    if (n_samples < chunk) chunk = n_samples;
    int64_t frames = (chunk + hop - 1) / hop, L = frames * hop;
    int64_t dec_floats = 4 * (dec / 8 > 192 ? dec / 8 : 192) * L + 64 * L + 4 * dec * frames;
    int64_t enc_floats = 3 * enc * L + 3 * L;
    int64_t dit_floats = frames * (7 * D + 2 * F + 12 * C + 4 * D) + 2 * D * frames + 64 * 5 * D + 5 * Lt * D;
    int64_t t5_floats = Lt * (768 + 4 * 768 + 2 * 3072) + 12 * Lt * Lt;
    int64_t w = dec_floats > enc_floats ? dec_floats : enc_floats;
    if (dit_floats > w) w = dit_floats;
    if (t5_floats > w) w = t5_floats;
    int64_t held = 2 * L + frames * 4 * C + Lt * 768 + (int64_t)(2 * p->overlap_seconds * CHOIR_SAM_RATE);
    return (w + held) * (int64_t)sizeof(float) * 5 / 4 + (64 << 20);
}

int64_t choir_sam_job_device_bytes(const choir_sam *m, int64_t n_samples, int text_tokens, const choir_sam_params *p) {
    choir_sam_params dp;
    p = est_params(p, &dp);
    if (n_samples < 1) n_samples = 1;
    if (!m) return job_bytes_without_model(n_samples, text_tokens, p);
    if (choir_backend_is_host(m->be)) return 0;
    text_tokens = est_tokens(m, text_tokens);
    sam_geometry g;
    sam_job_geometry(m, n_samples, p, &g);
    int64_t T = (g.first_len + m->codec.hop - 1) / m->codec.hop;
    choir_sam_item it = {.frames = T, .valid_frames = T, .text_len = text_tokens};
    sam_need ne = sam_encode_need(m, g.first_len), nd = sam_decode_need(m, T), no = sam_ode_need(m, &it, 1);
    /* One stage's stream at a time, beside the context's kernel scratch,
     * which keeps the size of the largest call so far. */
    size_t work = ne.work > nd.work ? ne.work : nd.work, scratch = ne.scratch > nd.scratch ? ne.scratch : nd.scratch;
    if (no.work > work) work = no.work;
    if (no.scratch > scratch) scratch = no.scratch;
    /* the context's scratch is never smaller than 1 MiB (cuda_context.cu) */
    if (scratch > 0 && scratch < ((size_t)1 << 20)) scratch = (size_t)1 << 20;
    return (int64_t)(work + scratch);
}
