/* The DiT evaluation behind choir_sam_velocity and the ODE (sam_dit.c). */
#ifndef CHOIR_SAM_DIT_H
#define CHOIR_SAM_DIT_H

#include "sam_internal.h"

/* What an item's evaluations share: the item, its anchor term [T, D] and
 * its projected text memory [L, D] (one allocation). */
typedef struct sam_prep {
    choir_sam_item item;
    float *anchor;
    float *memory;
} sam_prep;

int sam_dit_prepare(const choir_sam *m, const choir_sam_item *it, sam_prep *p, choir_err *err);
void sam_dit_release(sam_prep *p);
/* Floats of workspace one evaluation of these n items needs. */
int64_t sam_dit_workspace(const choir_sam *m, const sam_prep *p, int n);
/* v[i] [frames_i, 2C] at x_t[i] and t[i]; ws from sam_dit_workspace. */
int sam_dit_eval(const choir_sam *m, const sam_prep *p, int n, const float *t, const float *const *x_t, float *const *v,
                 float *ws);

#endif
