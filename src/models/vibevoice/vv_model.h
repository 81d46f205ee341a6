/* The VibeVoice engine adapter's internals for checks and benchmarks
 * (vv_model.c; the adapter itself is choir_model_vibevoice, choir/model.h). */
#ifndef CHOIR_VV_MODEL_H
#define CHOIR_VV_MODEL_H

#include <stdint.h>

#include "choir/backend.h"
#include "choir/model.h"
#include "choir/tokenizer.h"
#include "choir/vibevoice.h"

/* The adapter's weights object over a model already built (a benchmark's
 * random weights): takes `m`, `be` (its backend, owned from now on; NULL
 * for a model on its own CPU backend) and `tok`, freed with the object or
 * here on failure. On a CUDA backend it sets the replica up as its load
 * does (pool, scratch, step), from opt->device_free_bytes (0: 90% of the
 * card of opt->device). NULL and err on failure. */
void *vv_model_over(choir_vibevoice *m, choir_backend *be, choir_tokenizer *tok, const choir_model_options *opt,
                    choir_err *err);

/* What the replica's batches did so far. */
typedef struct vv_model_stats {
    int64_t batches;      /* run_batch calls */
    int64_t steps, rows;  /* decoding steps, and sequences summed over them */
    int64_t prep_steps;   /* steps taken while a request of the batch waited for or was in its
                             encoding and prefill */
    int most_rows;        /* the most sequences one step decoded */
    double step_s;        /* seconds inside the steps (each to its ids on the host) */
    double decode_wall_s; /* seconds from each batch's first step to its end, summed */
    double max_gap_s;     /* the longest time between two steps of a batch (end of one to the
                             start of the next): what a decoding member waited at most */
} vv_model_stats;
/* Seconds of a waiting request's encoding and prefill between two steps
 * of a batch (default VV_PREP_SLICE_S, 0.05; 0: a whole request at a
 * time). Set before the replica's first batch. */
void vv_model_set_prep_slice(void *weights, double seconds);
/* Clears max_gap_s (a benchmark's next wave measures its own). */
void vv_model_reset_gap(void *weights);
void vv_model_get_stats(const void *weights, vv_model_stats *out);

/* A GPU replica's backend and pool (NULL on the CPU). */
choir_backend *vv_model_backend(const void *weights);
const choir_vibevoice_kv_pool *vv_model_pool(const void *weights);

#endif
