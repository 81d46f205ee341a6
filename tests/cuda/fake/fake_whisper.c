/* The host version of Whisper's greedy-step kernel (src/tensor/cuda/
 * cuda_whisper.h) for the fake CUDA build (fake_cuda.c): the CPU form itself,
 * choir_whisper_greedy_row, recorded into graphs like the other emulated
 * kernels, so that tests/cuda/whisper_gpu_check.c runs the device greedy
 * loop (state in "device" memory, several steps per captured graph, the
 * host woken between them) on a machine without a GPU. */
#include <string.h>

#include "tensor/cuda/cuda_whisper.h"

int fake_cuda_run_or_record(int (*fn)(const void *args), const void *args, size_t size);

typedef struct greedy_args {
    float *logits;
    choir_cuda_whisper_rules r;
    choir_whisper_greedy g;
} greedy_args;

static int greedy_op(const void *p) {
    const greedy_args *a = p;
    choir_whisper_specials sp;
    memset(&sp, 0, sizeof sp);
    sp.timestamp_begin = a->r.timestamp_begin;
    sp.eot = a->r.eot;
    sp.no_timestamps = a->r.no_timestamps;
    for (int64_t r = 0; r < a->g.B; r++) {
        choir_whisper_filter f = {.sp = &sp,
                                  .n_vocab = a->r.n_vocab,
                                  .sample_begin = a->g.sample_begin[r],
                                  .timestamps = a->r.timestamps,
                                  .suppress_blank = a->r.suppress_blank,
                                  .suppress = a->r.suppress,
                                  .n_suppress = a->r.n_suppress,
                                  .max_initial_timestamp_index = a->r.max_initial_timestamp_index};
        choir_whisper_greedy_row(&f, &a->g, r, a->logits + r * (int64_t)a->r.n_vocab);
    }
    return 0;
}

int choir_cuda_whisper_greedy(choir_cuda *cu, float *logits, const choir_cuda_whisper_rules *r,
                              const choir_whisper_greedy *g, choir_err *err) {
    (void)cu, (void)err;
    greedy_args a = {logits, *r, *g};
    return fake_cuda_run_or_record(greedy_op, &a, sizeof a);
}
