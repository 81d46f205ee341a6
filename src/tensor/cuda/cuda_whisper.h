/* The CUDA kernel behind choir/backend_whisper.h (cuda_whisper.cu), with the
 * semantics of its CPU form, choir_whisper_greedy_row (whisper_rules.c). */
#ifndef CHOIR_CUDA_WHISPER_H
#define CHOIR_CUDA_WHISPER_H

#include <stdbool.h>
#include <stdint.h>

#include "choir/backend_whisper.h"
#include "choir/cuda.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The filter's scalars, read on the host when the step is enqueued (a
 * captured graph keeps them); suppress is device memory. */
typedef struct choir_cuda_whisper_rules {
    int n_vocab, timestamp_begin, eot, no_timestamps;
    bool timestamps, suppress_blank;
    int max_initial_timestamp_index;
    const int32_t *suppress;
    int n_suppress;
} choir_cuda_whisper_rules;

int choir_cuda_whisper_greedy(choir_cuda *cu, float *logits, const choir_cuda_whisper_rules *r,
                              const choir_whisper_greedy *g, choir_err *err);

#ifdef __cplusplus
}
#endif
#endif
