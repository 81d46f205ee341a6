/* choir/metrics.h: counters, gauges and histograms, with quantiles and a
 * Prometheus text renderer.
 *
 * A registry holds series. Each series has a metric name (Prometheus rules:
 * [a-zA-Z_:][a-zA-Z0-9_:]*), an optional label set written as Prometheus label
 * pairs without braces (`model="kokoro",reason="queue_full"`), a help line and a
 * type. Series with the same name form one family and must share the type.
 * Histograms keep fine log-spaced buckets (8 per octave, 1e-6 .. 1e7) for
 * quantiles within about 5% relative error, plus the coarse `le` bounds given at
 * creation for rendering. All functions are thread-safe. */
#ifndef CHOIR_METRICS_H
#define CHOIR_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_metrics choir_metrics;

typedef enum choir_metric_type {
    CHOIR_METRIC_COUNTER = 0, /* only grows */
    CHOIR_METRIC_GAUGE = 1,   /* set to the current value */
    CHOIR_METRIC_HISTOGRAM = 2
} choir_metric_type;

/* An empty registry, or NULL and err. */
choir_metrics *choir_metrics_create(choir_err *err);
/* NULL is a no-op. */
void choir_metrics_free(choir_metrics *m);

/* Adds a series and returns its id (>= 0), or a negative code: CHOIR_EINVAL for
 * a bad name or a type that clashes with the family's, CHOIR_ENOMEM.
 * Adding an existing (name, labels) pair returns the existing id. `labels` and
 * `help` may be NULL; all strings are copied. For histograms `bounds` are the
 * rendered `le` upper bounds, ascending (NULL: latency bounds in seconds from
 * 1 ms to 120 s); at most 32. */
int choir_metrics_add(choir_metrics *m, choir_metric_type type, const char *name, const char *labels,
                      const char *help);
int choir_metrics_add_histogram(choir_metrics *m, const char *name, const char *labels, const char *help,
                                const double *bounds, int n_bounds);

/* Updates a series; an invalid id is ignored. inc: counters and gauges; set:
 * gauges (and counters, for mirroring an external count); observe: histograms
 * (values <= 0 count in the lowest bucket). */
void choir_metrics_inc(choir_metrics *m, int id, double delta);
void choir_metrics_set(choir_metrics *m, int id, double value);
void choir_metrics_observe(choir_metrics *m, int id, double value);

/* A counter's or gauge's value (a histogram's sum); 0 for an invalid id. */
double choir_metrics_value(choir_metrics *m, int id);
/* A histogram's observation count (0 otherwise). */
uint64_t choir_metrics_count(choir_metrics *m, int id);
/* The q-quantile (0 <= q <= 1) of a histogram's observations, interpolated
 * within a fine bucket; 0 when it has none. */
double choir_metrics_quantile(choir_metrics *m, int id, double q);

/* Renders every series in the Prometheus text format 0.0.4: HELP and TYPE once
 * per family, histograms as _bucket{le=...}/_sum/_count, plus a
 * `<name>_quantile{quantile="0.5|0.95|0.99"}` gauge family per histogram.
 * Returns a string to free with choir_free, or NULL on allocation failure. */
char *choir_metrics_render(choir_metrics *m);

#ifdef __cplusplus
}
#endif
#endif
