/* The DiT evaluation behind choir_sam_velocity and the ODE (sam_dit.c),
 * written over the backend operations (choir/backend.h). */
#ifndef CHOIR_SAM_DIT_H
#define CHOIR_SAM_DIT_H

#include "choir/backend.h"
#include "sam_internal.h"

/* What an item's evaluations share, in backend memory from the stream: its
 * codec features [T, C] and text [L, text_dim] (uploaded), its anchor term
 * [T, D] and projected text memory [L, D]. */
typedef struct sam_prep {
    choir_sam_item item; /* frames, lengths; host pointers of the caller */
    float *features, *text;
    float *anchor, *memory;
} sam_prep;

/* A planned batch of n items: the preps, the rows' positions (int32 [N]) and
 * the evaluation's working memory, all carved from one stream. */
typedef struct sam_batch {
    int n;
    sam_prep *p;
    int64_t N, Tmax, Lmax, Lsum;
    int32_t *pos;
    float *ws;
    float *host_t; /* host staging for the t-dependent sinusoids */
} sam_batch;

/* Bytes of stream working memory a batch of these items needs (preps,
 * positions, one evaluation's buffers). */
size_t sam_batch_bytes(const choir_sam *m, const choir_sam_item *items, int n);
/* The most kernel scratch one kernel call of the batch's evaluation (or
 * its preparation) takes on the CPU. */
size_t sam_dit_scratch_bytes(const choir_sam *m, const choir_sam_item *items, int n);
/* The same on CUDA (the context's scratch; f32 weights). */
size_t sam_dit_device_scratch_bytes(const choir_sam *m, const choir_sam_item *items, int n);
/* Uploads and prepares the items on stream s (reserved with at least
 * sam_batch_bytes); b->p is caller storage for n preps. Returns 0 or the
 * error (also on the stream). */
int sam_batch_prepare(const choir_sam *m, choir_stream *s, const choir_sam_item *items, int n,
                      sam_batch *b, sam_prep *preps, float *host_t, choir_err *err);
/* Floats of host staging sam_batch_prepare needs for host_t. */
int64_t sam_batch_host_floats(const choir_sam *m, const choir_sam_item *items, int n);
/* v[i] [frames_i, 2C] at x_t[i] and t[i] (x_t, v backend memory; t host).
 * Enqueues the evaluation; errors are the stream's. */
int sam_dit_eval(const choir_sam *m, choir_stream *s, const sam_batch *b, const float *t,
                 const float *const *x_t, float *const *v);

#endif
