/* The engine case of choir_vibevoice_gpu_check (included by
 * vibevoice_gpu_check.c in builds that have the engine, the tokenizer and
 * the checkpoint writer: not the standalone tests/cuda build).
 *
 * VibeVoice requests through a real engine whose adapter
 * (choir_model_vibevoice) the engine places on GPU 0: the fixture model
 * vv-fox-chunked (its config, the real vocabulary, random weights written
 * by choir_randw) with Qwen2.5's tokenizer from the shared fixtures. Two
 * requests like tests/test_vibevoice_join.c's: A decodes 48 tokens of the
 * whole audio, B 6 of its first third (end-of-text ignored, loop guard
 * off; untrained weights, so each fails as "not a JSON transcript" with its
 * decoded text, which is what is compared). Checked:
 *   - each request's outcome through the engine on the GPU equals the
 *     adapter's on the CPU, one request at a time (the same tokens);
 *   - with room for both in the replica's KV pool, B (queued while A
 *     decodes) joins A's running batch: one batch, one join; its encoding
 *     and prefill go on a piece at a time between A's steps (the replica's
 *     least prep slice), at least two of A's steps among them;
 *   - with a pool one page short of both, B waits in the queue while A
 *     decodes and starts once A's pages are back (it joins A's batch after
 *     A left it, choir_batch_join_member_done): never more than one request
 *     in the pool;
 *   - a request whose pages exceed the whole pool is refused as too large;
 *   - in every batch, the device memory the replica held beyond what it
 *     holds between batches (weights, pool, scratch, step buffers) stayed
 *     within the states the engine admitted (its device estimates less
 *     their pages), and at every report of the adapter to the engine (a
 *     take, a leave, a member done) within what the engine reserved for
 *     states then (a member's share goes back when it is done, not when
 *     its batch ends), the pages the adapter reserved never passed the pages
 *     the engine reserved in the pool, all of them went back, and the
 *     device never held more than the engine's device budget. */
#include "choir/engine.h"
#include "choir/model.h"
#include "choir/randw.h"
#include "choir/safetensors.h"
#include "models/vibevoice/vv_model.h"

#define ENG_CASE "vibevoice-asr/vv-fox-chunked"
enum { ENG_NREQ = 2 };
static const int ENG_MAX_NEW[ENG_NREQ] = {48, 6};

static void eng_verdict(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void eng_verdict(const char *name, int ok, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%s  engine: %s: %s\n", ok ? "PASS" : "FAIL", name, msg);
    if (ok) n_pass++;
    else n_fail++;
}

static const char *shared_dir(void) {
    const char *s = getenv("CHOIR_SHARED_DIR");
    return s && *s ? s : "../shared";
}

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int ok = in && out;
    char buf[1 << 16];
    size_t k;
    while (ok && (k = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, k, out) == k;
    if (in) fclose(in);
    if (out && fclose(out)) ok = 0;
    return ok ? 0 : -1;
}

/* --- the replica, measured ------------------------------------------------ */

static choir_engine *g_eng;   /* the engine running now (for its device accounts) */
static void *g_w;             /* the GPU replica it loaded */
static int64_t g_between;     /* device bytes the replica held when the running batch began */
static struct {
    int batches, joined;
    int64_t worst_over;       /* most device bytes held beyond the admitted states (> 0: over) */
    int64_t worst_pages_over; /* most pages the adapter held beyond the engine's pool reservation */
    int64_t worst_states_over; /* most device bytes beyond the replica's own that the engine's
                                  reservations of the states (dev.reserved) did not cover, at a report */
    int checks;               /* reports where that was looked at */
    int64_t peak;             /* the device's peak over all batches (weights included) */
    int pages_left;           /* pages still reserved after a batch */
} g_meas;

/* The device memory of the engine runs measured into g_meas: every batch
 * within the states the engine admitted, the pages within its reservation,
 * none left reserved at the end, the peak within the budget. */
static void memory_verdict(const char *name, int64_t budget) {
    eng_verdict(name, g_meas.batches >= 1 && g_meas.worst_over <= 0 && g_meas.worst_pages_over <= 0 &&
                g_meas.checks > 0 && g_meas.worst_states_over <= 0 && g_meas.pages_left == 0 &&
                g_meas.peak <= budget,
                "held %+.3f MB beyond the admitted states at worst, %+.3f MB beyond the engine's state "
                "reservation now (%d looks), pages %+lld bytes beyond the engine's reservation, %d left reserved, "
                "peak %.1f of %.1f MB", g_meas.worst_over / 1e6, g_meas.worst_states_over / 1e6, g_meas.checks,
                (long long)g_meas.worst_pages_over, g_meas.pages_left, g_meas.peak / 1e6, budget / 1e6);
}

static void *eng_load(const char *dir, const choir_model_options *o, choir_err *err) {
    void *w = choir_model_vibevoice.load(dir, o, err);
    /* The least slice: one encoder pass or prefill chunk of a waiting
     * request between two steps, whatever the device's speed. */
    if (w) vv_model_set_prep_slice(w, 1e-9);
    if (w && o && o->device >= 1) g_w = w;
    return w;
}

/* The states' part of a request's device estimate (the rest is its pages). */
static int64_t eng_state_est(void *w, const choir_request *r) {
    return choir_model_vibevoice.estimate_device(w, r) - choir_model_vibevoice.estimate_pool(w, r);
}

/* At a report of the adapter to the engine: the pages it holds against the
 * engine's pool reservation, and the device memory held beyond what the
 * replica held when the batch began against the engine's reservations of
 * the states now. A member's state is freed before it reports
 * (choir_batch_join_member_done) and its share of the batch's reservation
 * goes back then, so the second stays covered only when the adapter really
 * frees what the engine stops counting (a member reported before its state
 * is freed shows here as +15.5 MB in the first case). */
static void pages_check(void *w) {
    choir_vibevoice_kv_usage u;
    choir_vibevoice_kv_pool_usage(vv_model_pool(w), &u);
    choir_engine_device dev[2];
    if (choir_engine_devices(g_eng, dev, 2) < 2) return;
    int64_t over = (int64_t)u.reserved * u.page_bytes - dev[1].pool_reserved;
    if (over > g_meas.worst_pages_over) g_meas.worst_pages_over = over;
    choir_backend *be = vv_model_backend(w);
    if (!be) return;
    int64_t states_over = choir_backend_mem_current(be) - g_between - dev[1].reserved;
    if (g_meas.checks++ == 0 || states_over > g_meas.worst_states_over) g_meas.worst_states_over = states_over;
}

typedef struct spy_join {
    choir_batch_join pub;
    choir_batch_join *inner;
    void *w;
    int64_t states;
} spy_join;

static int spy_take(choir_batch_join *j, int live, choir_request **reqs, choir_arena **arenas) {
    spy_join *s = (spy_join *)j;
    int k = choir_batch_join_take(s->inner, live, reqs, arenas);
    for (int i = 0; i < k; i++) s->states += eng_state_est(s->w, reqs[i]);
    g_meas.joined += k;
    pages_check(s->w);
    return k;
}

static void spy_leave(choir_batch_join *j, choir_request *req, int overflow) {
    spy_join *s = (spy_join *)j;
    pages_check(s->w);
    choir_batch_join_leave(s->inner, req, overflow);
}

static void spy_member_done(choir_batch_join *j, choir_request *req) {
    spy_join *s = (spy_join *)j;
    pages_check(s->w);
    choir_batch_join_member_done(s->inner, req);
    pages_check(s->w);
}

/* The adapter's run_batch_join, measured: the device's peak during the
 * batch beyond the replica's own bytes, against the states of every request
 * that ran in it (members and joined). */
static int eng_run(void *w, choir_request *const *reqs, int n, choir_arena *arena, choir_batch_join *join,
                   choir_err *err) {
    choir_backend *be = vv_model_backend(w);
    int64_t fixed = choir_model_vibevoice.device_bytes(w);
    spy_join spy = {.pub = {.take = spy_take, .leave = spy_leave, .member_done = spy_member_done}, .inner = join,
                    .w = w};
    for (int i = 0; i < n; i++) spy.states += eng_state_est(w, reqs[i]);
    if (be) choir_backend_mem_reset_peak(be);
    g_between = be ? choir_backend_mem_current(be) : 0;
    int rc = choir_model_vibevoice.run_batch_join(w, reqs, n, arena, join ? &spy.pub : NULL, err);
    if (be) {
        int64_t peak = choir_backend_mem_peak(be), over = peak - fixed - spy.states;
        if (g_meas.batches == 0 || over > g_meas.worst_over) g_meas.worst_over = over;
        if (peak > g_meas.peak) g_meas.peak = peak;
        choir_vibevoice_kv_usage u;
        choir_vibevoice_kv_pool_usage(vv_model_pool(w), &u);
        g_meas.pages_left += u.reserved;
    }
    g_meas.batches++;
    return rc;
}

/* --- requests ------------------------------------------------------------- */

typedef struct eng_outcome {
    int finals, status;
    char error[CHOIR_ERR_MSG_MAX];
} eng_outcome;

static int eng_collect(void *user, const choir_output *out) {
    eng_outcome *o = user;
    if (out->final) {
        o->finals++;
        o->status = out->status;
        snprintf(o->error, sizeof o->error, "%s", out->error ? out->error : "");
    }
    return 0;
}

static const choir_st_tensor *g_audio;

/* Request i (max_new: its new tokens; 0: ENG_MAX_NEW[i]). */
static void eng_request(int i, int max_new, choir_vibevoice_opts *o, choir_request *r) {
    choir_vibevoice_default_opts(o);
    o->max_new_tokens = max_new > 0 ? max_new : ENG_MAX_NEW[i];
    o->ignore_eos = true;
    o->loop_max_period = 0;
    /* Prefill chunks of 16 rows: the fixture's heads have 16 values, and
     * CUDA's tiled prefill attention over a paged pool takes 64 or 128
     * (the split-keys kernel, used up to 16 rows, takes any multiple of 4). */
    o->prefill_chunk = 16;
    memset(r, 0, sizeof *r);
    r->task = CHOIR_TASK_STT;
    r->in.stt.samples = g_audio->data;
    r->in.stt.n_samples = i == 0 ? g_audio->numel : g_audio->numel / 3;
    r->in.stt.sample_rate = CHOIR_VIBEVOICE_SAMPLE_RATE;
    r->extra = o;
}

/* An engine of one worker serving the adapter on GPU 0 with `budget`
 * device bytes (f32 keys and values: compute_bf16 off). */
static choir_engine *eng_create(const char *dir, int64_t budget, choir_err *err) {
    choir_engine_params p = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    p.workers = 1;
    p.gpus = "0";
    p.gpu_memory_bytes = budget;
    p.model_options.compute_bf16 = -1;
    static choir_model_ops ops;
    ops = choir_model_vibevoice;
    ops.load = eng_load;
    ops.run_batch_join = eng_run;
    choir_engine *e = choir_engine_create(&p, err);
    if (e && choir_engine_add_model(e, "vv", dir, &ops, err)) {
        choir_engine_free(e);
        return NULL;
    }
    return e;
}

/* Submits requests 0..n-1 (max_new[i] new tokens, 0: the default), the
 * second right after the first, and waits for them. */
static int eng_submit_all(choir_engine *e, int n, const int *max_new, eng_outcome *got, choir_err *err) {
    choir_vibevoice_opts o[ENG_NREQ];
    choir_ticket *t[ENG_NREQ] = {0};
    int rc = 0;
    for (int i = 0; i < n; i++) {
        choir_job j;
        memset(&j, 0, sizeof j);
        eng_request(i, max_new ? max_new[i] : 0, &o[i], &j.req);
        j.model_id = "vv";
        j.priority = CHOIR_PRIORITY_NORMAL;
        j.on_output = eng_collect;
        j.user = &got[i];
        memset(&got[i], 0, sizeof got[i]);
        if (!(t[i] = choir_engine_submit(e, &j, NULL, err))) {
            got[i].status = err->code;
            snprintf(got[i].error, sizeof got[i].error, "%s", err->msg);
            rc = -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        choir_err werr = {0};
        choir_ticket_wait(t[i], 600, &werr);
        choir_ticket_free(t[i]);
    }
    return rc;
}

static void run_engine_case(void) {
    char man[1024], cfg[1024], tok[1024], ref[1024], dir[256], path[512];
    const char *sh = shared_dir();
    snprintf(man, sizeof man, "%s/fixtures/" ENG_CASE "/manifest.json", sh);
    snprintf(cfg, sizeof cfg, "%s/fixtures/" ENG_CASE "/config.json", sh);
    snprintf(ref, sizeof ref, "%s/fixtures/" ENG_CASE "/reference.safetensors", sh);
    snprintf(tok, sizeof tok, "%s/fixtures/real/tokenizer/qwen2.5/tokenizer.json", sh);
    FILE *probe = fopen(tok, "rb");
    if (!probe || !(probe = (fclose(probe), fopen(man, "rb")))) {
        printf("SKIP  engine: no fixtures under %s (set CHOIR_SHARED_DIR)\n", sh);
        return;
    }
    fclose(probe);
    snprintf(dir, sizeof dir, "/tmp/choir-vv-engine-%d", (int)getpid());
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    choir_err err = {0};
    choir_st *st = NULL;
    if (choir_randw_write_checkpoint(man, cfg, dir, &err) || copy_file(tok, path) ||
        !(st = choir_st_open(ref, &err)) || !(g_audio = choir_st_find(st, "input_values"))) {
        failed("engine: the fixture model", &err);
        choir_st_close(st);
        return;
    }

    /* Each request alone through the adapter on the CPU: what the engine
     * on the GPU must give. */
    char want[ENG_NREQ][CHOIR_ERR_MSG_MAX];
    const choir_model_ops *ops = &choir_model_vibevoice;
    void *cw = ops->load(dir, NULL, &err);
    if (!cw) {
        failed("engine: the CPU adapter", &err);
        choir_st_close(st);
        return;
    }
    for (int i = 0; i < ENG_NREQ; i++) {
        choir_vibevoice_opts o;
        choir_request r;
        eng_request(i, 0, &o, &r);
        choir_arena *arena = choir_arena_create((size_t)ops->estimate(cw, &r), CHOIR_MEM_ACTIVATIONS, &err);
        choir_request *rp = &r;
        if (!arena || ops->run_batch(cw, &rp, 1, arena, &err)) failed("engine: the CPU reference", &err);
        snprintf(want[i], sizeof want[i], "%s", r.error);
        choir_arena_free(arena);
    }
    /* Both as members of one batch (what the engine dispatches together):
     * each is encoded and prefilled before the batch's first step, so no
     * step runs while a member waits, the first step has both rows, and each
     * ends as it does alone. */
    {
        choir_vibevoice_opts o[2];
        choir_request r[2], *rp[2] = {&r[0], &r[1]};
        int64_t bytes = 0;
        for (int i = 0; i < 2; i++) {
            eng_request(i, 0, &o[i], &r[i]);
            bytes += ops->estimate(cw, &r[i]);
        }
        vv_model_stats s0, s1;
        vv_model_get_stats(cw, &s0);
        choir_arena *arena = choir_arena_create((size_t)bytes, CHOIR_MEM_ACTIVATIONS, &err);
        int rc = !arena || ops->run_batch(cw, rp, 2, arena, &err);
        choir_arena_free(arena);
        vv_model_get_stats(cw, &s1);
        eng_verdict("members prepared before the first step (CPU adapter)",
                    !rc && strcmp(r[0].error, want[0]) == 0 && strcmp(r[1].error, want[1]) == 0 &&
                        s1.prep_steps == s0.prep_steps && s1.most_rows == 2 && s1.steps > s0.steps,
                    "rc %d, %lld steps, %lld of them while a member waited, %d rows at most; outcomes %s alone",
                    rc, (long long)(s1.steps - s0.steps), (long long)(s1.prep_steps - s0.prep_steps), s1.most_rows,
                    strcmp(r[0].error, want[0]) == 0 && strcmp(r[1].error, want[1]) == 0 ? "as" : "differ from");
    }
    ops->free(cw);

    /* 1. A big enough budget: B joins A's running batch. */
    int64_t budget1 = (int64_t)1 << 30;
    eng_outcome got[ENG_NREQ];
    memset(&g_meas, 0, sizeof g_meas);
    g_w = NULL;
    choir_engine *e = g_eng = eng_create(dir, budget1, &err);
    int64_t pool1 = 0, page = 0, pages[ENG_NREQ] = {0};
    if (!e) {
        failed("engine: create", &err);
    } else {
        eng_submit_all(e, ENG_NREQ, NULL, got, &err);
        for (int i = 0; i < ENG_NREQ; i++) {
            char name[64];
            snprintf(name, sizeof name, "room for both, request %c", 'A' + i);
            eng_verdict(name, got[i].finals == 1 && strcmp(got[i].error, want[i]) == 0 && want[i][0],
                        "status %d, %s the CPU's outcome alone (%.80s)", got[i].status,
                        strcmp(got[i].error, want[i]) == 0 ? "equals" : "differs from", got[i].error);
        }
        choir_engine_stats s;
        choir_engine_get_stats(e, &s);
        choir_engine_device dev[2];
        choir_engine_devices(e, dev, 2);
        eng_verdict("room for both", s.batches == 1 && s.joined == 1 && g_meas.joined == 1 && dev[1].batches == 1,
                    "%llu batch(es) on %s, %llu joined, pool %.1f MB, %d requests in it at most",
                    (unsigned long long)s.batches, dev[1].name, (unsigned long long)s.joined, dev[1].pool / 1e6,
                    dev[1].pool_peak_reqs);
        /* B's encoding and prefill went on in slices between A's steps (and
         * each output above is still the CPU's alone). */
        vv_model_stats vs = {0};
        if (g_w) vv_model_get_stats(g_w, &vs);
        eng_verdict("room for both: B prepared between A's steps", vs.prep_steps >= 2,
                    "%lld of the batch's %lld steps ran while B waited for or was in its encoding and prefill",
                    (long long)vs.prep_steps, (long long)vs.steps);
        if (g_w) {
            pool1 = ops->pool_bytes(g_w);
            choir_vibevoice_kv_usage u;
            choir_vibevoice_kv_pool_usage(vv_model_pool(g_w), &u);
            page = u.page_bytes;
            for (int i = 0; i < ENG_NREQ; i++) {
                choir_vibevoice_opts o;
                choir_request r;
                eng_request(i, 0, &o, &r);
                pages[i] = ops->estimate_pool(g_w, &r) / page;
            }
        }
        choir_engine_shutdown(e, 5.0);
        choir_engine_free(e);
    }
    memory_verdict("room for both: device memory", budget1);

    /* 2. A pool one page short of both: B waits and runs after A. The pool
     * takes the budget less a fixed part, so that part is budget1 - pool1
     * (within a page). */
    if (pool1 > 0 && page > 0 && pages[0] > 0 && pages[1] > 0) {
        int64_t budget2 = budget1 - pool1 + (pages[0] + pages[1] - 1) * page;
        memset(&g_meas, 0, sizeof g_meas);
        e = g_eng = eng_create(dir, budget2, &err);
        if (!e) {
            failed("engine: create (small pool)", &err);
        } else {
            eng_submit_all(e, ENG_NREQ, NULL, got, &err);
            for (int i = 0; i < ENG_NREQ; i++) {
                char name[64];
                snprintf(name, sizeof name, "one page short, request %c", 'A' + i);
                eng_verdict(name, got[i].finals == 1 && strcmp(got[i].error, want[i]) == 0,
                            "status %d, %s the CPU's outcome alone", got[i].status,
                            strcmp(got[i].error, want[i]) == 0 ? "equals" : "differs from");
            }
            choir_engine_stats s;
            choir_engine_get_stats(e, &s);
            choir_engine_device dev[2];
            choir_engine_devices(e, dev, 2);
            /* B starts once A's pages are back: joining A's batch after A
             * left it (choir_batch_join_member_done), or as a batch of its own. */
            eng_verdict("one page short", s.batches + s.joined == 2 && dev[1].pool_peak_reqs == 1 &&
                        dev[1].pool == (pages[0] + pages[1] - 1) * page,
                        "pool of %lld pages (A %lld, B %lld): %llu batch(es), %llu joined, %d request(s) in the "
                        "pool at most", (long long)(dev[1].pool / page), (long long)pages[0], (long long)pages[1],
                        (unsigned long long)s.batches, (unsigned long long)s.joined, dev[1].pool_peak_reqs);
            /* 3. More pages than the whole pool: refused, not queued forever. */
            int big[ENG_NREQ] = {(int)((pages[0] + pages[1]) * CHOIR_VV_PAGE), 0};
            eng_submit_all(e, 1, big, got, &err);
            eng_verdict("larger than the pool", got[0].status == CHOIR_ETOOBIG, "status %d: %.160s", got[0].status,
                        got[0].error);
            choir_engine_shutdown(e, 5.0);
            choir_engine_free(e);
        }
        memory_verdict("one page short: device memory", budget2);
    }
    g_eng = NULL;
    choir_st_close(st);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path)) printf("      engine: could not remove %s\n", dir);
}

/* --- through the engine at a published size (--bench ... --engine B,..) --- */

static choir_vibevoice_randw *g_bench_w;
static choir_vibevoice_dims g_bench_d;
static char g_bench_tok[1024];
static double g_bench_prep_ms = -1; /* --prep-ms: the replica's prep slice (< 0: its default) */

static void *bench_load(const char *dir, const choir_model_options *o, choir_err *err) {
    (void)dir;
    choir_backend_cuda_opts co = {.device = o && o->device >= 1 ? CHOIR_DEVICE_GPU_INDEX(o->device) : 0,
                                  .bf16 = true};
    choir_backend *be = choir_backend_cuda(&co, err);
    choir_vibevoice *m = be ? choir_vibevoice_from_tensors_on(choir_vibevoice_randw_find, g_bench_w, &g_bench_d, be,
                                                              err)
                            : NULL;
    choir_tokenizer *tok = m ? choir_tokenizer_load(g_bench_tok, err) : NULL;
    if (!tok) {
        choir_vibevoice_free(m);
        choir_backend_free(be);
        return NULL;
    }
    void *w = vv_model_over(m, be, tok, o, err);
    if (w && g_bench_prep_ms >= 0) vv_model_set_prep_slice(w, g_bench_prep_ms / 1000);
    g_w = w;
    return w;
}

typedef struct bench_req {
    double t0, t1;
    int status, finals;
} bench_req;

static int bench_collect(void *user, const choir_output *out) {
    bench_req *b = user;
    if (out->final) {
        b->t1 = choir_now_s();
        b->status = out->status;
        b->finals++;
    }
    return 0;
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* B requests of `minutes` of audio at once (max_new new tokens each, 0: the
 * default; end-of-text ignored, loop guard off when max_new > 0). Returns
 * how many failed; fills lat[] (seconds from submit to the final output). */
static int bench_wave(choir_engine *e, const float *x, int64_t n, int B, int max_new, bench_req *br,
                      choir_ticket **t, choir_vibevoice_opts *o, int wait) {
    int failed_n = 0;
    for (int i = 0; i < B; i++) {
        choir_vibevoice_default_opts(&o[i]);
        if (max_new > 0) {
            o[i].max_new_tokens = max_new;
            o[i].ignore_eos = true;
            o[i].loop_max_period = 0;
        }
        choir_job j;
        memset(&j, 0, sizeof j);
        j.req.task = CHOIR_TASK_STT;
        j.req.in.stt.samples = x;
        j.req.in.stt.n_samples = n;
        j.req.in.stt.sample_rate = CHOIR_VIBEVOICE_SAMPLE_RATE;
        j.req.extra = &o[i];
        j.model_id = "vv";
        j.priority = CHOIR_PRIORITY_NORMAL;
        j.on_output = bench_collect;
        j.user = &br[i];
        memset(&br[i], 0, sizeof br[i]);
        br[i].t0 = choir_now_s();
        choir_err err = {0};
        if (!(t[i] = choir_engine_submit(e, &j, NULL, &err))) {
            printf("      engine bench: request %d refused at submit: %s\n", i, err.msg);
            br[i].status = err.code;
            failed_n++;
        }
    }
    for (int i = 0; wait && i < B; i++) {
        if (!t[i]) continue;
        choir_err err = {0};
        choir_ticket_wait(t[i], -1, &err);
        choir_ticket_free(t[i]);
        t[i] = NULL;
        /* Untrained weights: "not a JSON transcript" is the expected end. */
        if (br[i].finals != 1 || (br[i].status && br[i].status != CHOIR_EINTERNAL)) failed_n++;
    }
    return failed_n;
}

/* A request joining a running batch: A (`steps` x 8 new tokens) is
 * submitted alone; once it decodes, B (`steps` new tokens, the same audio)
 * is submitted and joins A's batch. Prints how long A waited at most
 * between two of its steps while B was encoded and prefilled, and both
 * latencies. Returns how many failed. */
static int bench_join(choir_engine *e, const float *x, int64_t n, double minutes, int steps, bool kv_bf16) {
    bench_req br[2];
    choir_ticket *t[2] = {0};
    choir_vibevoice_opts o[2];
    vv_model_stats s0 = {0}, s1;
    if (g_w) {
        vv_model_get_stats(g_w, &s0);
        vv_model_reset_gap(g_w);
    }
    int bad = bench_wave(e, x, n, 1, 8 * steps, &br[0], &t[0], &o[0], 0);
    /* Until A has taken its first step (or 120 s). */
    double ts = choir_now_s();
    for (;;) {
        struct timespec ns = {0, 2 * 1000 * 1000};
        nanosleep(&ns, NULL);
        if (g_w) {
            vv_model_get_stats(g_w, &s1);
            if (s1.steps > s0.steps) break;
        }
        if (choir_now_s() - ts > 120) break;
    }
    double tj = choir_now_s();
    bad += bench_wave(e, x, n, 1, steps, &br[1], &t[1], &o[1], 0);
    for (int i = 0; i < 2; i++) {
        if (!t[i]) continue;
        choir_err err = {0};
        choir_ticket_wait(t[i], -1, &err);
        choir_ticket_free(t[i]);
        if (br[i].finals != 1 || (br[i].status && br[i].status != CHOIR_EINTERNAL)) bad++;
    }
    if (!g_w) return bad + 1;
    vv_model_get_stats(g_w, &s1);
    printf("engine     join: B (%g min, %d tokens) submitted %.2f s after A (%d tokens) while A decodes: A's "
           "longest wait between two steps %.3f s; latency A %.2f s, B %.2f s; %lld batch(es); %d failed\n",
           minutes, steps, tj - br[0].t0, 8 * steps, s1.max_gap_s, br[0].t1 - br[0].t0, br[1].t1 - br[1].t0,
           (long long)(s1.batches - s0.batches), bad);
    printf("choir vibevoice engine join at %g min: kv=%s max_gap_s=%.4f lat_a_s=%.3f lat_b_s=%.3f failed=%d\n",
           minutes, kv_bf16 ? "bf16" : "f32", s1.max_gap_s, br[0].t1 - br[0].t0, br[1].t1 - br[1].t0, bad);
    fflush(stdout);
    return bad;
}

static int engine_bench(const char *size, int layers, const char *batches, double minutes, int steps,
                        bool kv_bf16, double burst_min, int join) {
    choir_err err = {0};
    if (choir_vibevoice_dims_named(size, &g_bench_d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    if (layers > 0 && layers < g_bench_d.lm.n_layers) g_bench_d.lm.n_layers = layers;
    snprintf(g_bench_tok, sizeof g_bench_tok, "%s/fixtures/real/tokenizer/qwen2.5/tokenizer.json", shared_dir());
    /* Before 16 GB of weights are made and uploaded: without the tokenizer
     * every load would fail after the upload (a pack made without
     * fixtures/real, 7 Dec 2026). */
    if (access(g_bench_tok, R_OK) != 0) {
        printf("FAIL  engine bench: %s: %s (pack the shared fixtures' real/tokenizer)\n", g_bench_tok,
               strerror(errno));
        return 2;
    }
    double t0 = choir_now_s();
    if (!(g_bench_w = choir_vibevoice_randw_create(&g_bench_d, CHOIR_DTYPE_BF16, g_bench_bits, 0, &err))) {
        printf("FAIL  engine bench: %s\n", err.msg);
        return 1;
    }
    for (const char *p = batches; p && *p;) {
        char *end;
        long b = strtol(p, &end, 10);
        if (end == p || b < 1 || b > 32) {
            printf("FAIL  engine bench: bad --engine list '%s' (1..32 each)\n", batches);
            choir_vibevoice_randw_free(g_bench_w);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
    }
    choir_engine_params ep = choir_engine_default_params(CHOIR_PROFILE_DEFAULT);
    ep.workers = 1;
    ep.gpus = "0";
    ep.max_batch = 32; /* batches of each wave's size: all its requests come at once */
    ep.model_options.compute_bf16 = kv_bf16 ? 1 : -1;
    static choir_model_ops ops;
    ops = choir_model_vibevoice;
    ops.probe = NULL;
    ops.load = bench_load;
    choir_engine *e = choir_engine_create(&ep, &err);
    if (!e || choir_engine_add_model(e, "vv", "/nonexistent/vibevoice-random", &ops, &err)) {
        printf("FAIL  engine bench: %s\n", err.msg);
        choir_engine_free(e);
        choir_vibevoice_randw_free(g_bench_w);
        return 1;
    }
    printf("engine bench %s, LM %d layers, keys and values %s, prep slice %s ms: weights generated in %.1f s\n",
           size, g_bench_d.lm.n_layers, kv_bf16 ? "bf16" : "f32", g_bench_prep_ms >= 0 ? "set" : "default",
           choir_now_s() - t0);
    if (g_bench_prep_ms >= 0) printf("engine     prep slice %.1f ms\n", g_bench_prep_ms);
    int64_t n = (int64_t)(minutes * 60 * CHOIR_VIBEVOICE_SAMPLE_RATE);
    float *x = malloc((size_t)n * sizeof *x);
    bench_req *br = calloc(64, sizeof *br);
    choir_ticket **t = calloc(64, sizeof *t);
    choir_vibevoice_opts *o = calloc(64, sizeof *o);
    double *lat = calloc(64, sizeof *lat);
    int status = 1;
    if (!x || !br || !t || !o || !lat) goto out;
    for (int64_t i = 0; i < n; i++) x[i] = 0.05f * frand();
    for (const char *p = batches; p && *p;) {
        char *end;
        int B = (int)strtol(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
        vv_model_stats s0 = {0}, s1;
        if (g_w) {
            vv_model_get_stats(g_w, &s0);
            vv_model_reset_gap(g_w);
        }
        if (g_w && vv_model_backend(g_w)) choir_backend_mem_reset_peak(vv_model_backend(g_w));
        double w0 = choir_now_s();
        int bad = bench_wave(e, x, n, B, steps, br, t, o, 1);
        double w1 = choir_now_s();
        if (!g_w) {
            printf("FAIL  engine bench: the model did not load\n");
            goto out;
        }
        vv_model_get_stats(g_w, &s1);
        for (int i = 0; i < B; i++) lat[i] = br[i].t1 - br[i].t0;
        qsort(lat, (size_t)B, sizeof *lat, dbl_cmp);
        double p50 = lat[(B - 1) / 2], p99 = lat[(int)ceil(0.99 * B) - 1];
        choir_engine_device dev[2];
        choir_engine_devices(e, dev, 2);
        double peak = choir_backend_mem_peak(vv_model_backend(g_w)) / 1e9;
        int64_t rows = s1.rows - s0.rows, steps_n = s1.steps - s0.steps;
        double step_s = s1.step_s - s0.step_s, wall_s = s1.decode_wall_s - s0.decode_wall_s;
        printf("engine     %d x %g min through the engine: %lld steps of up to %d rows, %.2f ms/step, decode "
               "%.0f tokens/s in the steps (%.0f over the decode's wall time); request latency p50 %.2f s, p99 "
               "%.2f s (wave %.2f s); longest wait between two steps %.3f s; device peak %.2f GB of a %.2f GB "
               "budget (pool %.2f GB); %d failed\n",
               B, minutes, (long long)steps_n, s1.most_rows, steps_n ? 1000 * step_s / steps_n : 0,
               step_s > 0 ? rows / step_s : 0, wall_s > 0 ? rows / wall_s : 0, p50, p99, w1 - w0, s1.max_gap_s,
               peak, dev[1].budget / 1e9, dev[1].pool / 1e9, bad);
        printf("choir vibevoice engine %d at %g min: kv=%s reqs=%d layers=%d step_ms=%.3f decode_tps=%.1f "
               "wall_tps=%.1f p50_s=%.3f p99_s=%.3f max_gap_s=%.4f peak_gb=%.3f budget_gb=%.3f pool_gb=%.3f "
               "failed=%d\n",
               B, minutes, kv_bf16 ? "bf16" : "f32", B, g_bench_d.lm.n_layers,
               steps_n ? 1000 * step_s / steps_n : 0, step_s > 0 ? rows / step_s : 0,
               wall_s > 0 ? rows / wall_s : 0, p50, p99, s1.max_gap_s, peak, dev[1].budget / 1e9,
               dev[1].pool / 1e9, bad);
        fflush(stdout);
        if (bad) goto out;
    }
    if (join && bench_join(e, x, n, minutes, steps, kv_bf16)) goto out;
    if (burst_min > 0 && g_w) {
        /* Admission of hour-long requests by their pages: how many the pool
         * of the default budget holds at once, and a burst of twice that
         * (the rest queue). Each one's encoding takes seconds, so once the
         * engine has admitted what fits, the bench cancels them all. */
        int64_t nh = (int64_t)(burst_min * 60 * CHOIR_VIBEVOICE_SAMPLE_RATE);
        float *xh = malloc((size_t)nh * sizeof *xh);
        if (!xh) goto out;
        for (int64_t i = 0; i < nh; i++) xh[i] = 0.05f * frand();
        choir_vibevoice_opts oh;
        choir_vibevoice_default_opts(&oh);
        choir_request rh;
        memset(&rh, 0, sizeof rh);
        rh.task = CHOIR_TASK_STT;
        rh.in.stt.samples = xh;
        rh.in.stt.n_samples = nh;
        rh.in.stt.sample_rate = CHOIR_VIBEVOICE_SAMPLE_RATE;
        rh.extra = &oh;
        int64_t pool = ops.pool_bytes(g_w), part = ops.estimate_pool(g_w, &rh);
        int fit = part > 0 ? (int)(pool / part) : 0;
        if (fit > 32) fit = 32;
        int burst = 2 * fit > 64 ? 64 : 2 * fit;
        printf("engine     %g-min requests: %.2f GB of pages each (%lld of %lld pool pages), device state %.2f GB "
               "each: %d fit the pool of the default budget at once; a burst of %d\n", burst_min, part / 1e9,
               (long long)(part / choir_vibevoice_kv_page_bytes_as(&g_bench_d, kv_bf16 ? CHOIR_DTYPE_BF16
                                                                                   : CHOIR_DTYPE_F32)),
               (long long)(pool / choir_vibevoice_kv_page_bytes_as(&g_bench_d, kv_bf16 ? CHOIR_DTYPE_BF16
                                                                                   : CHOIR_DTYPE_F32)),
               (ops.estimate_device(g_w, &rh) - part) / 1e9, fit, burst);
        fflush(stdout);
        choir_backend_mem_reset_peak(vv_model_backend(g_w));
        int bad = burst > 0 ? bench_wave(e, xh, nh, burst, 0, br, t, o, 0) : 0;
        /* Until the engine dispatched what fits (or 60 s). */
        choir_engine_device dev[2];
        double ts = choir_now_s();
        do {
            struct timespec ns = {0, 50 * 1000 * 1000};
            nanosleep(&ns, NULL);
            choir_engine_devices(e, dev, 2);
        } while (dev[1].pool_reqs < fit && choir_now_s() - ts < 60);
        choir_engine_queue_info qi;
        choir_engine_get_queue_info(e, "vv", &qi);
        choir_engine_devices(e, dev, 2);
        int admitted = dev[1].pool_reqs;
        double pool_res = dev[1].pool_reserved / 1e9;
        for (int i = 0; i < burst; i++)
            if (t[i]) choir_ticket_cancel(t[i]);
        int failed_n = bad;
        for (int i = 0; i < burst; i++) {
            if (!t[i]) continue;
            choir_err werr = {0};
            choir_ticket_wait(t[i], -1, &werr);
            choir_ticket_free(t[i]);
            if (br[i].status && br[i].status != CHOIR_ECANCELED && br[i].status != CHOIR_EINTERNAL) failed_n++;
        }
        double peak = choir_backend_mem_peak(vv_model_backend(g_w)) / 1e9;
        choir_engine_devices(e, dev, 2);
        printf("engine     burst of %d x %g min: %d admitted at once (%.2f GB of pages reserved), %d queued, %d "
               "running; then cancelled: %d failed otherwise; device peak %.2f GB of a %.2f GB budget\n", burst,
               burst_min, admitted, pool_res, qi.queued, qi.running, failed_n, peak, dev[1].budget / 1e9);
        printf("choir vibevoice engine burst at %g min: kv=%s fit=%d burst=%d admitted=%d queued=%d failed=%d "
               "peak_gb=%.3f budget_gb=%.3f page_gb=%.4f\n", burst_min, kv_bf16 ? "bf16" : "f32", fit, burst,
               admitted, qi.queued, failed_n, peak, dev[1].budget / 1e9, part / 1e9);
        free(xh);
        if (failed_n || admitted != fit || peak > dev[1].budget / 1e9) goto out;
    }
    status = 0;
out:
    choir_engine_shutdown(e, 30.0);
    choir_engine_free(e);
    choir_vibevoice_randw_free(g_bench_w);
    g_bench_w = NULL;
    g_w = NULL;
    free(x), free(br), free(t), free(o), free(lat);
    return status;
}
