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
};

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
    choir_sam_job *j = choir_calloc(CHOIR_MEM_ACTIVATIONS, 1, sizeof *j);
    if (!j) {
        choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
        return NULL;
    }
    j->m = m, j->x = x, j->n = n, j->p = *p, j->anchors = anchors, j->n_anchors = n_anchors, j->emit = emit, j->user = user;
    j->chunk = (int64_t)(p->chunk_seconds * CHOIR_SAM_RATE);
    j->overlap = (int64_t)(p->overlap_seconds * CHOIR_SAM_RATE);
    j->hop = j->chunk - j->overlap;
    /* A chunk longer than the model's position table (400 s for the
     * published models) is cut to it; the overlap stays at most half. */
    if (j->chunk > m->dit.max_pos * m->codec.hop) {
        j->chunk = m->dit.max_pos * m->codec.hop;
        if (j->overlap > j->chunk / 2) j->overlap = j->chunk / 2;
        j->hop = j->chunk - j->overlap;
    }
    j->n_chunks = n <= j->chunk ? 1 : (int)((n - j->overlap + j->hop - 1) / j->hop);
    int32_t *ids = NULL;
    if (choir_sam_tokenize(m, text, &ids, &j->text_len, err) != 0) goto fail;
    j->text = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(j->text_len * m->dit.text_dim) * sizeof(float));
    j->tail_t = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(2 * j->overlap + 1) * sizeof(float));
    j->tail_r = j->tail_t ? j->tail_t + j->overlap : NULL;
    int rc = j->text && j->tail_t ? choir_sam_text_features(m, ids, j->text_len, j->text, err)
                                  : choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
    choir_free(ids);
    if (rc) goto fail;
    return j;
fail:
    choir_sam_job_free(j);
    return NULL;
}

void choir_sam_job_free(choir_sam_job *j) {
    if (!j) return;
    choir_free(j->text);
    choir_free(j->tail_t);
    choir_free(j);
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
    int32_t *ids, *align;
} chunk_work;

/* Decodes the chunk's result and emits what is final. */
static int finish_chunk(chunk_work *w, float *buf_t, float *buf_r, choir_err *err) {
    choir_sam_job *j = w->j;
    const choir_sam *m = j->m;
    int64_t T = w->T, C = m->codec.cb, hop = m->codec.hop;
    float *lt = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(T * C) * sizeof *lt);
    if (!lt) return choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
    int rc = 0;
    for (int part = 0; part < 2 && !rc; part++) {
        for (int64_t t = 0; t < T; t++) memcpy(lt + t * C, w->x + t * 2 * C + part * C, (size_t)C * sizeof *lt);
        rc = choir_sam_decode(m, lt, T, j->p.message, part ? buf_r : buf_t, err);
    }
    choir_free(lt);
    if (rc) return rc;
    (void)hop;
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

int choir_sam_run_round(const choir_sam *m, choir_sam_job *const *jobs, int n, choir_err *err) {
    chunk_work *w = choir_calloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n ? n : 1), sizeof *w);
    choir_sam_item *items = choir_calloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n ? n : 1), sizeof *items);
    float **xs = choir_calloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n ? n : 1), sizeof *xs);
    int *used = choir_calloc(CHOIR_MEM_ACTIVATIONS, (size_t)(n ? n : 1), sizeof *used);
    int rc = 0, nw = 0;
    if (!w || !items || !xs || !used) {
        rc = choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
        goto done;
    }
    int64_t C = m->codec.cb, hop = m->codec.hop;
    /* Encode every job's next chunk. */
    for (int i = 0; i < n && !rc; i++) {
        choir_sam_job *j = jobs[i];
        if (choir_sam_job_done(j)) continue;
        chunk_work *c = &w[nw];
        c->j = j;
        c->start = (int64_t)j->next * j->hop;
        c->len = j->n_chunks == 1 ? j->n : (c->start + j->chunk < j->n ? j->chunk : j->n - c->start);
        c->T = (c->len + hop - 1) / hop;
        c->lat = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(c->T * 3 * C) * sizeof(float));
        c->ids = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(CHOIR_SAM_MAX_ANCHORS + 2 + c->T) * sizeof(int32_t));
        nw++;
        if (!c->lat || !c->ids) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
            break;
        }
        c->x = c->lat + c->T * C;
        c->align = c->ids + CHOIR_SAM_MAX_ANCHORS + 2;
        rc = choir_sam_encode(m, j->x + c->start, c->len, c->lat, err);
        choir_sam_noise(m, j->p.seed + (uint64_t)j->next, c->T, c->x);
        /* Anchors shifted into the chunk's time. */
        choir_sam_anchor local[CHOIR_SAM_MAX_ANCHORS];
        int nl = 0;
        double s0 = (double)c->start / CHOIR_SAM_RATE, s1 = (double)(c->start + c->len) / CHOIR_SAM_RATE;
        for (int a = 0; a < j->n_anchors; a++) {
            if (j->anchors[a].end_s <= s0 || j->anchors[a].start_s >= s1) continue;
            local[nl] = j->anchors[a];
            local[nl].start_s = local[nl].start_s > s0 ? local[nl].start_s - s0 : 0;
            local[nl].end_s -= s0;
            nl++;
        }
        choir_sam_anchor_tables(m, local, nl, c->T, c->T, c->ids, c->align);
        items[nw - 1] = (choir_sam_item){.frames = c->T, .valid_frames = c->T, .features = c->lat, .text = j->text,
                                         .text_len = j->text_len, .anchor_ids = c->ids, .n_anchor_ids = nl + 2,
                                         .anchor_alignment = c->align};
        xs[nw - 1] = c->x;
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
        rc = choir_sam_ode(m, gi, g, gx, &w[a].j->p, err);
    }
    /* Decode and emit, one chunk at a time. */
    for (int a = 0; a < nw && !rc; a++) {
        int64_t L = w[a].T * hop;
        float *bt = choir_alloc(CHOIR_MEM_ACTIVATIONS, (size_t)(2 * L) * sizeof(float));
        if (!bt) {
            rc = choir_err_set(err, CHOIR_ENOMEM, "sam-audio: out of memory");
            break;
        }
        rc = finish_chunk(&w[a], bt, bt + L, err);
        choir_free(bt);
    }
done:
    if (rc)
        for (int a = 0; a < nw; a++) w[a].j->failed = 1;
    for (int a = 0; a < nw; a++) choir_free(w[a].lat), choir_free(w[a].ids);
    choir_free(w), choir_free(items), choir_free(xs), choir_free(used);
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

/* --- memory estimates --------------------------------------------------- */

int64_t choir_sam_chunk_bytes(const choir_sam *m, int64_t frames) {
    /* Published base sizes when no model is at hand. */
    int64_t D = m ? m->dit.D : 2048, F = m ? m->dit.F : 5504, hop = m ? m->codec.hop : 1920;
    int64_t C = m ? m->codec.cb : 128, dec = m ? m->codec.dec_in.cout : 1536, enc = m ? m->codec.enc_in.cout : 64;
    int64_t L = frames * hop;
    /* Decoder: three buffers of its widest stage (cout x length grows to
     * about dec/8 x L) plus scratch; the encoder's widest is enc x L. */
    int64_t dec_floats = 3 * (dec / 8 > 192 ? dec / 8 : 192) * L + 64 * L + 3 * dec * frames;
    int64_t enc_floats = 3 * enc * L + 3 * L;
    int64_t dit_floats = frames * (7 * D + 2 * F + 6 * C + 2 * D) + 2 * D * frames + 64 * 5 * D + frames * 3 * C * 3;
    int64_t attn = 128 * frames * 4; /* attention scratch per pool thread, a few threads */
    int64_t w = dec_floats > enc_floats ? dec_floats : enc_floats;
    if (dit_floats + attn > w) w = dit_floats + attn;
    return (w + 2 * L + frames * 3 * C) * (int64_t)sizeof(float);
}

int64_t choir_sam_job_bytes(const choir_sam *m, int64_t n_samples, const choir_sam_params *p) {
    choir_sam_params dp;
    if (!p) {
        choir_sam_default_params(&dp);
        p = &dp;
    }
    int64_t hop = m ? m->codec.hop : 1920;
    int64_t chunk = (int64_t)(p->chunk_seconds * CHOIR_SAM_RATE);
    if (n_samples < chunk) chunk = n_samples;
    int64_t frames = (chunk + hop - 1) / hop;
    int64_t text = 512 * (m ? m->dit.text_dim : 768) * 4 * 4;
    return choir_sam_chunk_bytes(m, frames) + (int64_t)(2 * p->overlap_seconds * CHOIR_SAM_RATE) * 4 + text;
}
