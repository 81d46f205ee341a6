/* choir/cuda_vocoder.h: CUDA kernels behind choir/backend_vocoder.h beyond
 * those of choir/cuda_audio.h. Asynchronous on the context's stream; return
 * CHOIR_E* codes (a launch error named in err). */
#ifndef CHOIR_CUDA_VOCODER_H
#define CHOIR_CUDA_VOCODER_H

#include "choir/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = (a + b) / divisor over n values; y may alias a or b. */
int choir_cuda_add_div(choir_cuda *cu, const float *a, const float *b, float *y, int64_t n,
                       float divisor, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
