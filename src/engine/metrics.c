/* Metric registry: series in one array under one mutex. Updates are a few
 * nanoseconds of work under the lock, far below a request's cost, so a single
 * lock is simpler than per-series atomics and as fast where it matters. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "choir/alloc.h"
#include "choir/buf.h"
#include "choir/metrics.h"

#define FINE_PER_OCTAVE 8
#define FINE_MIN 1e-6
#define FINE_OCTAVES 44 /* 1e-6 * 2^44 ~ 1.7e7 */
#define FINE_N (FINE_PER_OCTAVE * FINE_OCTAVES + 1)
#define MAX_BOUNDS 32

static const double default_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0, 120.0};

typedef struct series {
    char *name, *labels, *help;
    choir_metric_type type;
    double value; /* counter / gauge value, histogram sum */
    uint64_t count;
    int n_bounds;
    double bounds[MAX_BOUNDS];
    uint64_t coarse[MAX_BOUNDS + 1]; /* per-bound counts (not cumulative); last: +Inf */
    uint64_t *fine;                  /* FINE_N counts */
} series;

struct choir_metrics {
    pthread_mutex_t lock;
    series *s;
    int n, cap;
};

choir_metrics *choir_metrics_create(choir_err *err)
{
    choir_metrics *m = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *m);
    if (!m) {
        choir_err_set(err, CHOIR_ENOMEM, "metrics: out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void choir_metrics_free(choir_metrics *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++) {
        choir_free(m->s[i].name);
        choir_free(m->s[i].labels);
        choir_free(m->s[i].help);
        choir_free(m->s[i].fine);
    }
    choir_free(m->s);
    pthread_mutex_destroy(&m->lock);
    choir_free(m);
}

static int valid_name(const char *name)
{
    if (!name || !*name)
        return 0;
    for (const char *p = name; *p; p++) {
        int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == ':';
        if (!alpha && !(p != name && *p >= '0' && *p <= '9'))
            return 0;
    }
    return 1;
}

static int add_locked(choir_metrics *m, choir_metric_type type, const char *name, const char *labels,
                      const char *help, const double *bounds, int n_bounds)
{
    if (!valid_name(name))
        return CHOIR_EINVAL;
    const char *lab = labels ? labels : "";
    for (int i = 0; i < m->n; i++) {
        if (strcmp(m->s[i].name, name) != 0)
            continue;
        if (m->s[i].type != type)
            return CHOIR_EINVAL;
        if (strcmp(m->s[i].labels, lab) == 0)
            return i;
    }
    if (type == CHOIR_METRIC_HISTOGRAM) {
        if (!bounds) {
            bounds = default_bounds;
            n_bounds = (int)(sizeof default_bounds / sizeof default_bounds[0]);
        }
        if (n_bounds < 0 || n_bounds > MAX_BOUNDS)
            return CHOIR_EINVAL;
        for (int i = 1; i < n_bounds; i++)
            if (!(bounds[i] > bounds[i - 1]))
                return CHOIR_EINVAL;
    }
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 32;
        series *s = choir_realloc(m->s, (size_t)cap * sizeof *s);
        if (!s)
            return CHOIR_ENOMEM;
        m->s = s;
        m->cap = cap;
    }
    series *s = &m->s[m->n];
    memset(s, 0, sizeof *s);
    s->type = type;
    s->name = choir_strdup(name);
    s->labels = choir_strdup(lab);
    s->help = choir_strdup(help ? help : "");
    if (type == CHOIR_METRIC_HISTOGRAM) {
        s->fine = choir_calloc(CHOIR_MEM_OTHER, FINE_N, sizeof *s->fine);
        s->n_bounds = n_bounds;
        memcpy(s->bounds, bounds, (size_t)n_bounds * sizeof *bounds);
    }
    if (!s->name || !s->labels || !s->help || (type == CHOIR_METRIC_HISTOGRAM && !s->fine)) {
        choir_free(s->name);
        choir_free(s->labels);
        choir_free(s->help);
        choir_free(s->fine);
        return CHOIR_ENOMEM;
    }
    return m->n++;
}

int choir_metrics_add(choir_metrics *m, choir_metric_type type, const char *name, const char *labels,
                      const char *help)
{
    if (!m)
        return CHOIR_EINVAL;
    pthread_mutex_lock(&m->lock);
    int id = add_locked(m, type, name, labels, help, NULL, 0);
    pthread_mutex_unlock(&m->lock);
    return id;
}

int choir_metrics_add_histogram(choir_metrics *m, const char *name, const char *labels, const char *help,
                                const double *bounds, int n_bounds)
{
    if (!m)
        return CHOIR_EINVAL;
    pthread_mutex_lock(&m->lock);
    int id = add_locked(m, CHOIR_METRIC_HISTOGRAM, name, labels, help, bounds, n_bounds);
    pthread_mutex_unlock(&m->lock);
    return id;
}

static series *get(choir_metrics *m, int id)
{
    return (m && id >= 0 && id < m->n) ? &m->s[id] : NULL;
}

void choir_metrics_inc(choir_metrics *m, int id, double delta)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    series *s = get(m, id);
    if (s && s->type != CHOIR_METRIC_HISTOGRAM)
        s->value += delta;
    pthread_mutex_unlock(&m->lock);
}

void choir_metrics_set(choir_metrics *m, int id, double value)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    series *s = get(m, id);
    if (s && s->type != CHOIR_METRIC_HISTOGRAM)
        s->value = value;
    pthread_mutex_unlock(&m->lock);
}

static int fine_index(double v)
{
    if (!(v > FINE_MIN))
        return 0;
    double i = floor(log2(v / FINE_MIN) * FINE_PER_OCTAVE) + 1;
    return i >= FINE_N ? FINE_N - 1 : (int)i;
}

/* Bucket i > 0 holds (FINE_MIN * 2^((i-1)/8), FINE_MIN * 2^(i/8)]. */
static double fine_lower(int i)
{
    return i <= 0 ? 0.0 : FINE_MIN * exp2((double)(i - 1) / FINE_PER_OCTAVE);
}

void choir_metrics_observe(choir_metrics *m, int id, double value)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    series *s = get(m, id);
    if (s && s->type == CHOIR_METRIC_HISTOGRAM && !isnan(value)) {
        s->value += value;
        s->count++;
        s->fine[fine_index(value)]++;
        int b = 0;
        while (b < s->n_bounds && value > s->bounds[b])
            b++;
        s->coarse[b]++;
    }
    pthread_mutex_unlock(&m->lock);
}

double choir_metrics_value(choir_metrics *m, int id)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&m->lock);
    series *s = get(m, id);
    double v = s ? s->value : 0;
    pthread_mutex_unlock(&m->lock);
    return v;
}

uint64_t choir_metrics_count(choir_metrics *m, int id)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&m->lock);
    series *s = get(m, id);
    uint64_t c = s ? s->count : 0;
    pthread_mutex_unlock(&m->lock);
    return c;
}

static double quantile_locked(const series *s, double q)
{
    if (s->type != CHOIR_METRIC_HISTOGRAM || s->count == 0)
        return 0;
    q = q < 0 ? 0 : q > 1 ? 1 : q;
    /* rank in [1, count]: the observation whose value we want */
    double rank = q * (double)(s->count - 1) + 1;
    uint64_t seen = 0;
    for (int i = 0; i < FINE_N; i++) {
        if (!s->fine[i])
            continue;
        if ((double)(seen + s->fine[i]) >= rank) {
            if (i == 0)
                return FINE_MIN;
            /* geometric interpolation: values inside a log bucket spread evenly in log space */
            double lo = fine_lower(i), hi = fine_lower(i + 1);
            double frac = (rank - (double)seen) / (double)s->fine[i];
            return lo * pow(hi / lo, frac);
        }
        seen += s->fine[i];
    }
    return fine_lower(FINE_N);
}

double choir_metrics_quantile(choir_metrics *m, int id, double q)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&m->lock);
    series *s = get(m, id);
    double v = s ? quantile_locked(s, q) : 0;
    pthread_mutex_unlock(&m->lock);
    return v;
}

/* `{labels,extra}` with either part possibly empty. */
static void put_labels(choir_buf *t, const char *labels, const char *extra)
{
    int a = labels && *labels, b = extra && *extra;
    if (!a && !b)
        return;
    choir_buf_printf(t, "{%s%s%s}", a ? labels : "", a && b ? "," : "", b ? extra : "");
}

static void put_value(choir_buf *t, double v)
{
    if (isinf(v))
        choir_buf_printf(t, v > 0 ? " +Inf\n" : " -Inf\n");
    else if (v == floor(v) && fabs(v) < 1e15)
        choir_buf_printf(t, " %.0f\n", v);
    else
        choir_buf_printf(t, " %.9g\n", v);
}

static void render_family(choir_buf *t, const choir_metrics *m, int first)
{
    const series *f = &m->s[first];
    static const char *type_names[] = {"counter", "gauge", "histogram"};
    choir_buf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, type_names[f->type]);
    for (int i = first; i < m->n; i++) {
        const series *s = &m->s[i];
        if (strcmp(s->name, f->name) != 0)
            continue;
        if (s->type != CHOIR_METRIC_HISTOGRAM) {
            choir_buf_printf(t, "%s", s->name);
            put_labels(t, s->labels, NULL);
            put_value(t, s->value);
            continue;
        }
        uint64_t cum = 0;
        char le[64];
        for (int b = 0; b <= s->n_bounds; b++) {
            cum += s->coarse[b];
            if (b < s->n_bounds)
                snprintf(le, sizeof le, "le=\"%.9g\"", s->bounds[b]);
            else
                snprintf(le, sizeof le, "le=\"+Inf\"");
            choir_buf_printf(t, "%s_bucket", s->name);
            put_labels(t, s->labels, le);
            put_value(t, (double)cum);
        }
        choir_buf_printf(t, "%s_sum", s->name);
        put_labels(t, s->labels, NULL);
        put_value(t, s->value);
        choir_buf_printf(t, "%s_count", s->name);
        put_labels(t, s->labels, NULL);
        put_value(t, (double)s->count);
    }
    if (f->type != CHOIR_METRIC_HISTOGRAM)
        return;
    choir_buf_printf(t, "# HELP %s_quantile %s (quantiles)\n# TYPE %s_quantile gauge\n", f->name, f->help, f->name);
    static const double qs[] = {0.5, 0.95, 0.99};
    static const char *qn[] = {"quantile=\"0.5\"", "quantile=\"0.95\"", "quantile=\"0.99\""};
    for (int i = first; i < m->n; i++) {
        const series *s = &m->s[i];
        if (strcmp(s->name, f->name) != 0)
            continue;
        for (int k = 0; k < 3; k++) {
            choir_buf_printf(t, "%s_quantile", s->name);
            put_labels(t, s->labels, qn[k]);
            put_value(t, quantile_locked(s, qs[k]));
        }
    }
}

char *choir_metrics_render(choir_metrics *m)
{
    if (!m)
        return NULL;
    choir_buf t = CHOIR_BUF_INIT(CHOIR_MEM_OTHER);
    choir_buf_printf(&t, "%s", "");
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(m->s[j].name, m->s[i].name) == 0;
        if (!seen)
            render_family(&t, m, i);
    }
    pthread_mutex_unlock(&m->lock);
    return choir_buf_take(&t, NULL);
}
