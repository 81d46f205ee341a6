/* choir/backend_whisper.h: the backend operation of Whisper's greedy
 * decoding step. It applies the logit filters and the timestamp mass rule to
 * each row's next-token logits, takes the argmax and the token's
 * log-probability, appends the token, and writes the next decoder step's
 * inputs. A device then runs many decoder steps in a row, with no host
 * round trip per token (whisper_dec.c, wh_greedy_run).
 *
 * Conventions as in choir/backend.h: every pointer is backend memory of the
 * stream's backend, errors are sticky on the stream. The CPU form is
 * choir_whisper_greedy_row (whisper_rules.c), the same rules the host
 * decoder runs (wr_rules); the CUDA kernel (src/tensor/cuda/cuda_whisper.cu)
 * follows it rule by rule: the same ids, the same masks; the log-sum-exp is
 * summed in another order, so sums of log-probabilities agree to about
 * 1e-15 relative (tests/cuda/whisper_gpu_check.c). */
#ifndef CHOIR_BACKEND_WHISPER_H
#define CHOIR_BACKEND_WHISPER_H

#include <stdint.h>

#include "choir/backend.h"
#include "choir/whisper.h"

#ifdef __cplusplus
extern "C" {
#endif

/* B greedy hypotheses in backend memory. Rows with done set are left as they
 * are. */
typedef struct choir_whisper_greedy {
    int64_t B;
    int32_t *tokens;             /* [B][ld]: each row's tokens, initial + sampled */
    int64_t ld;
    int32_t *n;                  /* [B]: tokens held */
    int32_t *done;               /* [B]: nonzero once finished */
    double *sum_logprob;         /* [B]: sum of the sampled tokens' log-probabilities */
    const int32_t *sample_begin; /* [B]: initial tokens (prompt + start sequence) */
    const int32_t *limit;        /* [B]: a row finishes once it holds this many tokens */
    /* [B]: the next decoder step's inputs of each row still live: the new
     * token, its position (n - 1) and the keys it sees (n). */
    int32_t *ids, *pos, *keys;
} choir_whisper_greedy;

/* One greedy step of every live row r: the filters of `f` (f->suppress in
 * backend memory, f->sp read when enqueued, f->sample_begin replaced by
 * sample_begin[r]) applied in place to logits [B][f->n_vocab], then the pick
 * of wr_rules (whisper_rules.c); the token is appended, sum_logprob grows by
 * its log-probability, and the row is done when the token is eot or n
 * reaches limit[r]; otherwise ids/pos/keys are written. */
int choir_op_whisper_greedy(choir_stream *s, float *logits, const choir_whisper_filter *f,
                            const choir_whisper_greedy *g);

/* The step of row r on host memory (the CPU form, and the host emulation's):
 * f with f->sample_begin already the row's. */
void choir_whisper_greedy_row(const choir_whisper_filter *f, const choir_whisper_greedy *g,
                              int64_t r, float *logits_row);

#ifdef __cplusplus
}
#endif
#endif
