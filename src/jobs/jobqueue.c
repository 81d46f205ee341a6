/* The Redis side of the job queue: connection, submit, take (claim or read),
 * acknowledge, dead-letter and progress. See include/choir/jobqueue.h for the
 * protocol; the keys used next to the stream are
 *   <stream>:counts                    hash: submitted, done, dead counters
 *   <stream>:attempts                  hash: entry id -> deliveries so far
 *   <stream>:errors                    hash: entry id -> last attempt's error
 *   <stream>:dead                      the dead-letter stream */
#include "choir/jobqueue.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/json.h"
#include "choir/log.h"

#define KEY_MAX 512

struct choir_jobqueue {
    redisContext *redis; /* NULL after a connection error, until reconnected */
    char host[256];
    int port;
    int db;
    char password[256];
    char stream[KEY_MAX];
    char group[128];
    char consumer[128];
    double claim_idle_s;
    int max_attempts;
    double timeout_s;
    char claim_cursor[64]; /* XAUTOCLAIM resumes its scan of the pending list here */
};

/* Acknowledges ARGV[2] in group ARGV[1] and, only when that acknowledgement
 * took it off the pending list, counts it (field ARGV[3] of hash KEYS[2]) and forgets its
 * bookkeeping: so two workers finishing the same job count it once. */
static const char ACK_SCRIPT[] =
    "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "if n == 1 then\n"
    "  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)\n"
    "  redis.call('HDEL', KEYS[3], ARGV[2])\n"
    "  redis.call('HDEL', KEYS[4], ARGV[2])\n"
    "end\n"
    "return n\n";

choir_jobqueue_params choir_jobqueue_default_params(void) {
    choir_jobqueue_params p = {0};
    p.url = "redis://127.0.0.1:6379";
    p.group = "choir";
    p.claim_idle_s = 60;
    p.max_attempts = 3;
    p.timeout_s = 5;
    return p;
}

static int parse_url(choir_jobqueue *q, const char *url, choir_err *err) {
    const char *s = url;
    if (strncmp(s, "redis://", 8) == 0) s += 8;
    const char *at = strrchr(s, '@');
    if (at) {
        /* "[user]:password@": only the password is used (Redis AUTH before ACLs). */
        const char *colon = memchr(s, ':', (size_t)(at - s));
        const char *pw = colon ? colon + 1 : s;
        size_t n = (size_t)(at - pw);
        if (n >= sizeof q->password) return choir_err_set(err, CHOIR_EINVAL, "redis url: password too long");
        memcpy(q->password, pw, n);
        q->password[n] = 0;
        s = at + 1;
    }
    size_t hn = strcspn(s, ":/");
    if (hn == 0 || hn >= sizeof q->host) return choir_err_set(err, CHOIR_EINVAL, "redis url '%s': no host", url);
    memcpy(q->host, s, hn);
    q->host[hn] = 0;
    s += hn;
    q->port = 6379;
    if (*s == ':') {
        char *end = NULL;
        long port = strtol(s + 1, &end, 10);
        if (end == s + 1 || port <= 0 || port > 65535 || (*end && *end != '/'))
            return choir_err_set(err, CHOIR_EINVAL, "redis url '%s': bad port", url);
        q->port = (int)port;
        s = end;
    }
    if (*s == '/' && s[1]) {
        char *end = NULL;
        long db = strtol(s + 1, &end, 10);
        if (*end || db < 0 || db > 1000000) return choir_err_set(err, CHOIR_EINVAL, "redis url '%s': bad db", url);
        q->db = (int)db;
    }
    return 0;
}

static struct timeval seconds_tv(double s) {
    struct timeval tv;
    tv.tv_sec = (time_t)s;
    tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
    return tv;
}

static void drop_connection(choir_jobqueue *q) {
    if (q->redis) redisFree(q->redis);
    q->redis = NULL;
}

/* Runs one command; returns the reply (caller frees) or NULL with err. A
 * Redis error reply is turned into NULL + CHOIR_EIO too. */
static redisReply *command_argv(choir_jobqueue *q, int argc, const char **argv, choir_err *err);

static int reconnect(choir_jobqueue *q, choir_err *err) {
    if (q->redis) return 0;
    redisContext *c = redisConnectWithTimeout(q->host, q->port, seconds_tv(q->timeout_s));
    if (!c) return choir_err_set(err, CHOIR_ENOMEM, "redis: out of memory");
    if (c->err) {
        choir_err_set(err, CHOIR_EIO, "redis %s:%d: %s", q->host, q->port, c->errstr);
        redisFree(c);
        return CHOIR_EIO;
    }
    redisSetTimeout(c, seconds_tv(q->timeout_s));
    q->redis = c;
    char db[16];
    snprintf(db, sizeof db, "%d", q->db);
    const char *auth[] = {"AUTH", q->password};
    const char *sel[] = {"SELECT", db};
    redisReply *r = NULL;
    if (q->password[0] && !(r = command_argv(q, 2, auth, err))) goto fail;
    freeReplyObject(r);
    r = NULL;
    if (q->db && !(r = command_argv(q, 2, sel, err))) goto fail;
    freeReplyObject(r);
    return 0;
fail:
    /* Never keep a connection that is not authenticated or on the wrong db. */
    drop_connection(q);
    return err->code;
}

static redisReply *command_argv(choir_jobqueue *q, int argc, const char **argv, choir_err *err) {
    if (reconnect(q, err)) return NULL;
    redisReply *r = redisCommandArgv(q->redis, argc, argv, NULL);
    if (!r) {
        choir_err_set(err, CHOIR_EIO, "redis %s: %s", argv[0], q->redis->errstr[0] ? q->redis->errstr : "no reply");
        drop_connection(q);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        choir_err_set(err, CHOIR_EIO, "redis %s: %s", argv[0], r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static void key_of(const choir_jobqueue *q, const char *suffix, char out[KEY_MAX]) {
    snprintf(out, KEY_MAX, "%s:%s", q->stream, suffix);
}

static int ensure_group(choir_jobqueue *q, choir_err *err) {
    const char *argv[] = {"XGROUP", "CREATE", q->stream, q->group, "0", "MKSTREAM"};
    choir_err e2 = {0};
    redisReply *r = command_argv(q, 6, argv, &e2);
    if (r) {
        freeReplyObject(r);
        return 0;
    }
    if (strstr(e2.msg, "BUSYGROUP")) return 0; /* the group exists: keep its position */
    *err = e2;
    return e2.code;
}

choir_jobqueue *choir_jobqueue_connect(const choir_jobqueue_params *params, choir_err *err) {
    choir_jobqueue_params d = choir_jobqueue_default_params();
    const choir_jobqueue_params *p = params ? params : &d;
    if (!p->stream || !p->stream[0] || strlen(p->stream) > KEY_MAX - 16) {
        choir_err_set(err, CHOIR_EINVAL, "jobqueue: a stream name (1..%d bytes) is required", KEY_MAX - 16);
        return NULL;
    }
    choir_jobqueue *q = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *q);
    if (!q) {
        choir_err_set(err, CHOIR_ENOMEM, "jobqueue: out of memory");
        return NULL;
    }
    if (parse_url(q, p->url ? p->url : d.url, err)) goto fail;
    snprintf(q->stream, sizeof q->stream, "%s", p->stream);
    snprintf(q->group, sizeof q->group, "%s", p->group && p->group[0] ? p->group : d.group);
    if (p->consumer && p->consumer[0]) {
        snprintf(q->consumer, sizeof q->consumer, "%s", p->consumer);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(q->consumer, sizeof q->consumer, "%s-%ld", host, (long)getpid());
    }
    q->claim_idle_s = p->claim_idle_s > 0 ? p->claim_idle_s : d.claim_idle_s;
    q->max_attempts = p->max_attempts > 0 ? p->max_attempts : d.max_attempts;
    q->timeout_s = p->timeout_s > 0 ? p->timeout_s : d.timeout_s;
    snprintf(q->claim_cursor, sizeof q->claim_cursor, "0-0");
    if (reconnect(q, err)) goto fail;
    if (ensure_group(q, err)) goto fail;
    return q;
fail:
    choir_jobqueue_free(q);
    return NULL;
}

void choir_jobqueue_free(choir_jobqueue *q) {
    if (!q) return;
    drop_connection(q);
    choir_free(q);
}

static int valid_spec(const choir_jobspec *s, choir_err *err) {
    static const char *const tasks[] = {"vad", "stt", "tts", "sts"};
    int known = 0;
    for (size_t i = 0; i < sizeof tasks / sizeof *tasks; i++) known |= strcmp(s->task, tasks[i]) == 0;
    if (!known) return choir_err_set(err, CHOIR_EINVAL, "job: unknown task '%s' (vad, stt, tts, sts)", s->task);
    if (!s->input[0] || !s->output[0]) return choir_err_set(err, CHOIR_EINVAL, "job: input and output are required");
    if (s->options[0]) {
        cJSON *o = choir_json_parse(s->options, strlen(s->options), err);
        int ok = o && cJSON_IsObject(o);
        cJSON_Delete(o);
        if (!ok) return choir_err_set(err, CHOIR_EINVAL, "job: options must be a JSON object: %s", s->options);
    }
    return 0;
}

int choir_jobqueue_submit(choir_jobqueue *q, const choir_jobspec *spec, char *id, size_t id_cap, choir_err *err) {
    if (valid_spec(spec, err)) return err->code;
    char counts[KEY_MAX];
    key_of(q, "counts", counts);
    /* The entry and its count go in one transaction so progress never shows
     * more jobs than the stream holds. */
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
    const char *add[] = {"XADD", q->stream, "*", "task", spec->task, "input", spec->input, "output", spec->output,
                         "model", spec->model, "options", spec->options};
    const char *incr[] = {"HINCRBY", counts, "submitted", "1"};
    redisReply *r = command_argv(q, 1, multi, err);
    if (!r) return err->code;
    freeReplyObject(r);
    if (!(r = command_argv(q, 13, add, err))) goto fail;
    freeReplyObject(r);
    if (!(r = command_argv(q, 4, incr, err))) goto fail;
    freeReplyObject(r);
    if (!(r = command_argv(q, 1, exec, err))) goto fail;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return choir_err_set(err, CHOIR_EIO, "redis: XADD transaction failed");
    }
    if (id && id_cap) snprintf(id, id_cap, "%s", r->element[0]->str);
    freeReplyObject(r);
    return 0;
fail:
    drop_connection(q); /* discards the open transaction */
    return err->code;
}

static void copy_field(char *dst, size_t cap, const redisReply *v) {
    dst[0] = 0;
    if (v && v->type == REDIS_REPLY_STRING) snprintf(dst, cap, "%.*s", (int)v->len, v->str);
}

/* Fills spec from a flat [field, value, ...] array. */
static void spec_from_fields(choir_jobspec *spec, const redisReply *fields) {
    memset(spec, 0, sizeof *spec);
    for (size_t i = 0; i + 1 < fields->elements; i += 2) {
        const redisReply *k = fields->element[i], *v = fields->element[i + 1];
        if (k->type != REDIS_REPLY_STRING) continue;
        if (strcmp(k->str, "task") == 0) copy_field(spec->task, sizeof spec->task, v);
        else if (strcmp(k->str, "input") == 0) copy_field(spec->input, sizeof spec->input, v);
        else if (strcmp(k->str, "output") == 0) copy_field(spec->output, sizeof spec->output, v);
        else if (strcmp(k->str, "model") == 0) copy_field(spec->model, sizeof spec->model, v);
        else if (strcmp(k->str, "options") == 0) copy_field(spec->options, sizeof spec->options, v);
    }
}

static int run_ack_script(choir_jobqueue *q, const char *id, const char *counter, choir_err *err) {
    char counts[KEY_MAX], attempts[KEY_MAX], errors[KEY_MAX];
    key_of(q, "counts", counts);
    key_of(q, "attempts", attempts);
    key_of(q, "errors", errors);
    const char *argv[] = {"EVAL", ACK_SCRIPT, "4", q->stream, counts, attempts, errors, q->group, id, counter};
    redisReply *r = command_argv(q, 10, argv, err);
    if (!r) return err->code;
    int n = r->type == REDIS_REPLY_INTEGER ? (int)r->integer : 0;
    freeReplyObject(r);
    return n;
}

static int dead_letter(choir_jobqueue *q, const char *id, const choir_jobspec *s, const char *error, int attempts,
                       choir_err *err) {
    char dead[KEY_MAX], n[16];
    key_of(q, "dead", dead);
    snprintf(n, sizeof n, "%d", attempts);
    const char *add[] = {"XADD", dead, "*", "task", s->task, "input", s->input, "output", s->output, "model",
                         s->model, "options", s->options, "error", error, "attempts", n, "job_id", id};
    redisReply *r = command_argv(q, 19, add, err);
    if (!r) return err->code;
    freeReplyObject(r);
    CHOIR_LOGW("jobqueue: job %s (%s) dead-lettered after %d attempts: %s", id, s->input, attempts, error);
    return run_ack_script(q, id, "dead", err);
}

/* Counts this delivery and reads the previous attempt's error. Returns the
 * attempt number or a negative code. */
static int count_delivery(choir_jobqueue *q, const char *id, char *last_error, size_t cap, choir_err *err) {
    char attempts[KEY_MAX], errors[KEY_MAX];
    key_of(q, "attempts", attempts);
    key_of(q, "errors", errors);
    const char *incr[] = {"HINCRBY", attempts, id, "1"};
    const char *get[] = {"HGET", errors, id};
    redisReply *r = command_argv(q, 4, incr, err);
    if (!r) return err->code;
    int attempt = (int)r->integer;
    freeReplyObject(r);
    if (!(r = command_argv(q, 3, get, err))) return err->code;
    copy_field(last_error, cap, r);
    freeReplyObject(r);
    return attempt;
}

/* Accepts entry `e` ([id, fields]) as a delivery to this consumer. Returns 1
 * with *job filled, 0 when the entry was skipped (deleted, or dead-lettered),
 * or a negative code. */
static int accept_entry(choir_jobqueue *q, const redisReply *e, int reclaimed, choir_jobqueue_job *job,
                        choir_err *err) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 || e->element[0]->type != REDIS_REPLY_STRING)
        return choir_err_set(err, CHOIR_EIO, "redis: unexpected stream entry shape");
    memset(job, 0, sizeof *job);
    copy_field(job->id, sizeof job->id, e->element[0]);
    job->reclaimed = reclaimed;
    if (e->element[1]->type != REDIS_REPLY_ARRAY) {
        /* Trimmed from the stream while pending (Redis 6.2 reports it so):
         * nothing left to run. */
        int rc = run_ack_script(q, job->id, "dead", err);
        return rc < 0 ? rc : 0;
    }
    spec_from_fields(&job->spec, e->element[1]);
    int attempt = count_delivery(q, job->id, job->last_error, sizeof job->last_error, err);
    if (attempt < 0) return attempt;
    job->attempt = attempt;
    if (attempt > q->max_attempts) {
        const char *why = job->last_error[0] ? job->last_error : "its workers stopped while running it";
        int rc = dead_letter(q, job->id, &job->spec, why, attempt - 1, err);
        return rc < 0 ? rc : 0;
    }
    return 1;
}

static int claim_one(choir_jobqueue *q, choir_jobqueue_job *job, choir_err *err) {
    char idle_ms[32];
    snprintf(idle_ms, sizeof idle_ms, "%lld", (long long)(q->claim_idle_s * 1000));
    const char *argv[] = {"XAUTOCLAIM", q->stream, q->group, q->consumer, idle_ms, q->claim_cursor, "COUNT", "1"};
    for (;;) {
        redisReply *r = command_argv(q, 8, argv, err);
        if (!r) return err->code;
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            return choir_err_set(err, CHOIR_EIO, "redis: unexpected XAUTOCLAIM reply");
        }
        snprintf(q->claim_cursor, sizeof q->claim_cursor, "%s", r->element[0]->str);
        int got = 0;
        if (r->element[1]->elements > 0) got = accept_entry(q, r->element[1]->element[0], 1, job, err);
        int more = strcmp(q->claim_cursor, "0-0") != 0;
        freeReplyObject(r);
        if (got != 0 || !more) return got;
    }
}

static int read_new(choir_jobqueue *q, double block_s, choir_jobqueue_job *job, choir_err *err) {
    char block_ms[32];
    long long ms = (long long)(block_s * 1000);
    snprintf(block_ms, sizeof block_ms, "%lld", ms > 0 ? ms : 1);
    const char *argv[] = {"XREADGROUP", "GROUP", q->group, q->consumer, "COUNT", "1",
                          "BLOCK",      block_ms, "STREAMS", q->stream, ">"};
    if (reconnect(q, err)) return err->code;
    /* The socket must wait longer than the server blocks. */
    redisSetTimeout(q->redis, seconds_tv(block_s + q->timeout_s));
    redisReply *r = command_argv(q, 11, argv, err);
    if (q->redis) redisSetTimeout(q->redis, seconds_tv(q->timeout_s));
    if (!r) return err->code;
    int got = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        const redisReply *s = r->element[0];
        if (s->type == REDIS_REPLY_ARRAY && s->elements == 2 && s->element[1]->type == REDIS_REPLY_ARRAY &&
            s->element[1]->elements > 0)
            got = accept_entry(q, s->element[1]->element[0], 0, job, err);
    }
    freeReplyObject(r);
    return got;
}

int choir_jobqueue_take(choir_jobqueue *q, double block_s, choir_jobqueue_job *job, choir_err *err) {
    /* Reclaiming first means a dead worker's jobs are not starved by a stream
     * that keeps receiving new ones. */
    int got = claim_one(q, job, err);
    if (got == 0) got = read_new(q, block_s, job, err);
    if (got < 0 && strstr(err->msg, "NOGROUP")) {
        /* Redis lost the stream or group (restarted without persistence, or
         * the key was deleted): recreate them so this worker picks up new
         * submissions; the caller retries. */
        choir_err e2 = {0};
        ensure_group(q, &e2);
    }
    /* A skipped (dead-lettered) entry is not a job: report "nothing yet". */
    return got;
}

int choir_jobqueue_complete(choir_jobqueue *q, const choir_jobqueue_job *job, choir_err *err) {
    return run_ack_script(q, job->id, "done", err);
}

int choir_jobqueue_fail(choir_jobqueue *q, const choir_jobqueue_job *job, const char *error, choir_err *err) {
    if (job->attempt >= q->max_attempts) {
        int rc = dead_letter(q, job->id, &job->spec, error, job->attempt, err);
        return rc < 0 ? rc : 1;
    }
    char errors[KEY_MAX];
    key_of(q, "errors", errors);
    const char *set[] = {"HSET", errors, job->id, error};
    redisReply *r = command_argv(q, 4, set, err);
    if (!r) return err->code;
    freeReplyObject(r);
    return 0;
}

int choir_jobqueue_touch(choir_jobqueue *q, const choir_jobqueue_job *job, choir_err *err) {
    const char *argv[] = {"XCLAIM", q->stream, q->group, q->consumer, "0", job->id, "JUSTID"};
    redisReply *r = command_argv(q, 7, argv, err);
    if (!r) return err->code;
    int pending = r->type == REDIS_REPLY_ARRAY && r->elements == 1;
    freeReplyObject(r);
    return pending;
}

static int64_t get_counter(choir_jobqueue *q, const char *field, choir_err *err) {
    char key[KEY_MAX];
    key_of(q, "counts", key);
    const char *argv[] = {"HGET", key, field};
    redisReply *r = command_argv(q, 3, argv, err);
    if (!r) return err->code;
    int64_t v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

int choir_jobqueue_get_progress(choir_jobqueue *q, choir_jobqueue_progress *out, choir_err *err) {
    memset(out, 0, sizeof *out);
    if ((out->submitted = get_counter(q, "submitted", err)) < 0) return err->code;
    if ((out->done = get_counter(q, "done", err)) < 0) return err->code;
    if ((out->dead = get_counter(q, "dead", err)) < 0) return err->code;
    const char *pend[] = {"XPENDING", q->stream, q->group};
    redisReply *r = command_argv(q, 3, pend, err);
    if (!r) return err->code;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_INTEGER)
        out->pending = r->element[0]->integer;
    freeReplyObject(r);
    const char *info[] = {"XINFO", "GROUPS", q->stream};
    if (!(r = command_argv(q, 3, info, err))) return err->code;
    for (size_t g = 0; r->type == REDIS_REPLY_ARRAY && g < r->elements; g++) {
        const redisReply *kv = r->element[g];
        int mine = 0;
        int64_t consumers = 0;
        for (size_t i = 0; kv->type == REDIS_REPLY_ARRAY && i + 1 < kv->elements; i += 2) {
            const redisReply *k = kv->element[i], *v = kv->element[i + 1];
            if (k->type != REDIS_REPLY_STRING) continue;
            if (strcmp(k->str, "name") == 0 && v->type == REDIS_REPLY_STRING) mine = strcmp(v->str, q->group) == 0;
            if (strcmp(k->str, "consumers") == 0 && v->type == REDIS_REPLY_INTEGER) consumers = v->integer;
        }
        if (mine) out->consumers = consumers;
    }
    freeReplyObject(r);
    int64_t queued = out->submitted - out->done - out->dead - out->pending;
    out->queued = queued > 0 ? queued : 0;
    return 0;
}

int choir_jobqueue_list_dead(choir_jobqueue *q, int max, choir_jobqueue_dead_fn fn, void *user, choir_err *err) {
    char dead[KEY_MAX], count[16];
    key_of(q, "dead", dead);
    snprintf(count, sizeof count, "%d", max > 0 ? max : 1);
    const char *argv[] = {"XRANGE", dead, "-", "+", "COUNT", count};
    redisReply *r = command_argv(q, 6, argv, err);
    if (!r) return err->code;
    int n = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 || e->element[1]->type != REDIS_REPLY_ARRAY) continue;
        choir_jobspec spec;
        spec_from_fields(&spec, e->element[1]);
        char error[CHOIR_ERR_MSG_MAX] = "", job_id[64] = "";
        int attempts = 0;
        const redisReply *f = e->element[1];
        for (size_t k = 0; k + 1 < f->elements; k += 2) {
            if (f->element[k]->type != REDIS_REPLY_STRING) continue;
            if (strcmp(f->element[k]->str, "error") == 0) copy_field(error, sizeof error, f->element[k + 1]);
            if (strcmp(f->element[k]->str, "job_id") == 0) copy_field(job_id, sizeof job_id, f->element[k + 1]);
            if (strcmp(f->element[k]->str, "attempts") == 0 && f->element[k + 1]->type == REDIS_REPLY_STRING)
                attempts = atoi(f->element[k + 1]->str);
        }
        if (fn) fn(user, job_id, &spec, error, attempts);
        n++;
    }
    freeReplyObject(r);
    return n;
}
