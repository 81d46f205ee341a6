/* The flow-matching ODE of SAM-Audio, its parameters and its noise.
 *
 * The ODE is torchdiffeq's fixed grid as the reference calls it: t_k = k / N
 * (N = steps, the last point 1); midpoint y += dt f(t + dt/2, y + dt/2 f(t, y))
 * or Euler y += dt f(t, y). All items of a batch step in lockstep, so one DiT
 * evaluation serves them all; the states stay on the model's backend from
 * the first evaluation to the last. */
#include <math.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/backend_sam.h"
#include "sam_dit.h"

const choir_chunk_limits choir_sam_chunk_limits = {"sam-audio", 0.2, 400, 0.5};

void choir_sam_default_params(choir_sam_params *p) {
    memset(p, 0, sizeof *p);
    p->method = CHOIR_SAM_MIDPOINT;
    p->steps = 16;
    p->chunk_seconds = 10.0;
    p->overlap_seconds = 3.0;
    p->seed = 42;
}

int choir_sam_check_params(const choir_sam_params *p, choir_err *err) {
    if (p->method != CHOIR_SAM_MIDPOINT && p->method != CHOIR_SAM_EULER)
        return choir_err_set(err, CHOIR_EINVAL, "sam-audio: method must be midpoint or euler");
    if (p->steps < 1 || p->steps > 1024) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: steps must be 1..1024");
    return choir_chunk_check(&choir_sam_chunk_limits, p->chunk_seconds, p->overlap_seconds, err);
}

/* --- noise -------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void choir_sam_noise(const choir_sam *m, uint64_t seed, int64_t frames, float *out) {
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 1;
    int64_t n = frames * m->dit.out_ch;
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = ((splitmix(&s) >> 11) + 1.0) / 9007199254740993.0, u2 = (splitmix(&s) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) out[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

/* --- the ODE ------------------------------------------------------------ */

/* One batch on the model's backend: a stage holding the prepared items,
 * the states (x, and f0 / f1 for the velocities) of all items back to back,
 * and, in the call's arena, the host staging of the evaluations, the preps
 * and the state pointers. */
typedef struct ode_run {
    sam_stage st;
    sam_batch b;
    sam_prep *preps;
    float *host_t, *tv;
    float **ptr;       /* [3n]: x, f0, f1 of each item (backend memory) */
    float *X, *F0, *F1;
    int64_t total;
} ode_run;

sam_need sam_ode_need(const choir_sam *m, const choir_sam_item *items, int n) {
    sam_need need = {0};
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += items[i].frames * m->dit.out_ch;
    need.host = sam_up((size_t)n * sizeof(sam_prep)) + sam_up((size_t)sam_batch_host_floats(m, items, n) * sizeof(float)) +
                sam_up((size_t)n * sizeof(float)) + sam_up((size_t)(3 * n) * sizeof(float *));
    need.work = sam_batch_bytes(m, items, n) + (size_t)(3 * total) * sizeof(float) + 3 * 256;
    need.scratch = choir_backend_is_host(m->be) ? sam_dit_scratch_bytes(m, items, n)
                                                : sam_dit_device_scratch_bytes(m, items, n);
    return need;
}

static void ode_close(const choir_sam *m, ode_run *r) {
    sam_stage_end(m, &r->st);
    memset(r, 0, sizeof *r);
}

/* Opens the run in the call's memory and uploads the items and their
 * states x[i]. */
static int ode_open(const choir_sam *m, const sam_mem *mem, const choir_sam_item *items, int n, const float *const *x,
                    ode_run *r, choir_err *err) {
    memset(r, 0, sizeof *r);
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty batch");
    int64_t C2 = m->dit.out_ch;
    for (int i = 0; i < n; i++) r->total += items[i].frames * C2;
    sam_need need = sam_ode_need(m, items, n);
    int rc = sam_stage_begin(m, mem, &need, &r->st, err);
    if (rc) return rc;
    r->preps = sam_host_alloc(mem, (size_t)n * sizeof *r->preps, err);
    r->host_t = r->preps ? sam_host_alloc(mem, (size_t)sam_batch_host_floats(m, items, n) * sizeof(float), err) : NULL;
    r->tv = r->host_t ? sam_host_alloc(mem, (size_t)n * sizeof(float), err) : NULL;
    r->ptr = r->tv ? sam_host_alloc(mem, (size_t)(3 * n) * sizeof *r->ptr, err) : NULL;
    if (!r->ptr) {
        ode_close(m, r);
        return CHOIR_ENOMEM;
    }
    choir_stream *s = r->st.s;
    rc = sam_batch_prepare(m, s, items, n, &r->b, r->preps, r->host_t, err);
    if (!rc) {
        r->X = choir_stream_floats(s, r->total, "sam ode state");
        r->F0 = choir_stream_floats(s, r->total, "sam ode velocity");
        r->F1 = choir_stream_floats(s, r->total, "sam ode midpoint");
        rc = choir_stream_status(s, err);
    }
    for (int i = 0, off = 0; i < n && !rc; off += (int)(items[i].frames * C2), i++) {
        r->ptr[i] = r->X + off, r->ptr[n + i] = r->F0 + off, r->ptr[2 * n + i] = r->F1 + off;
        choir_op_upload(s, r->ptr[i], x[i], (size_t)(items[i].frames * C2) * sizeof(float));
    }
    if (rc) ode_close(m, r);
    return rc;
}

/* Downloads `which` (0: x, 1: f0) of every item into out[i]. */
static int ode_download(const choir_sam *m, ode_run *r, const choir_sam_item *items, int n, int which,
                        float *const *out, choir_err *err) {
    for (int i = 0; i < n; i++)
        choir_op_download(r->st.s, out[i], r->ptr[which * n + i],
                          (size_t)(items[i].frames * m->dit.out_ch) * sizeof(float));
    return choir_stream_sync(r->st.s, err);
}

int choir_sam_velocity(const choir_sam *m, const choir_sam_item *items, int n, const float *t,
                       const float *const *x, float *const *v, choir_err *err) {
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty batch");
    sam_need need = sam_ode_need(m, items, n);
    sam_mem mem;
    int rc = sam_mem_open(m, NULL, sam_need_arena(m, &need), &mem, err);
    if (rc) return rc;
    ode_run r;
    rc = ode_open(m, &mem, items, n, x, &r, err);
    if (!rc) {
        sam_dit_eval(m, r.st.s, &r.b, t, (const float *const *)r.ptr, r.ptr + n);
        rc = ode_download(m, &r, items, n, 1, v, err);
        ode_close(m, &r);
    }
    sam_mem_close(&mem);
    return rc;
}

int choir_sam_ode(const choir_sam *m, const choir_sam_item *items, int n, float *const *x, const choir_sam_params *p,
                  choir_err *err) {
    if (n < 1) return choir_err_set(err, CHOIR_EINVAL, "sam-audio: empty batch");
    sam_need need = sam_ode_need(m, items, n);
    sam_mem mem;
    int rc = sam_mem_open(m, NULL, sam_need_arena(m, &need), &mem, err);
    if (rc) return rc;
    rc = sam_ode_in(m, &mem, items, n, x, p, err);
    sam_mem_close(&mem);
    return rc;
}

int sam_ode_in(const choir_sam *m, const sam_mem *mem, const choir_sam_item *items, int n, float *const *x,
               const choir_sam_params *p, choir_err *err) {
    int rc = choir_sam_check_params(p, err);
    if (rc) return rc;
    ode_run r;
    rc = ode_open(m, mem, items, n, (const float *const *)x, &r, err);
    if (rc) return rc;
    choir_stream *s = r.st.s;
    float *tv = r.tv;
    const float *const *xs = (const float *const *)r.ptr, *const *mid = (const float *const *)(r.ptr + 2 * n);
    float *const *f0 = r.ptr + n;
    float dt = 1.0f / (float)p->steps;
    for (int k = 0; k < p->steps; k++) {
        /* torchdiffeq's grid: arange * step, the last point clamped to 1. */
        float t0 = (float)k * dt, t1 = k + 1 == p->steps ? 1.0f : (float)(k + 1) * dt;
        float h = t1 - t0;
        for (int i = 0; i < n; i++) tv[i] = t0;
        sam_dit_eval(m, s, &r.b, tv, xs, f0);
        if (p->method == CHOIR_SAM_MIDPOINT) {
            /* The items' states lie back to back: one axpy for all. */
            choir_op_sam_axpy(s, r.F1, r.X, 0.5f * h, r.F0, r.total);
            for (int i = 0; i < n; i++) tv[i] = t0 + 0.5f * h;
            sam_dit_eval(m, s, &r.b, tv, mid, f0);
        }
        choir_op_sam_axpy(s, r.X, r.X, h, r.F0, r.total);
    }
    rc = ode_download(m, &r, items, n, 0, x, err);
    ode_close(m, &r);
    return rc;
}
