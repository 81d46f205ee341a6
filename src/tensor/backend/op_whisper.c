/* Whisper's greedy step (choir/backend_whisper.h): on the CPU the host
 * decoder's own rules, row by row (choir_whisper_greedy_row in
 * whisper_rules.c); on CUDA through cuda_whisper.cu. */
#include "choir/backend_whisper.h"
#include "choir/pool.h"
#include "tensor/backend/backend_internal.h"

#ifdef CHOIR_HAVE_CUDA
#include "tensor/cuda/cuda_whisper.h"
#endif

typedef struct greedy_job {
    float *logits;
    const choir_whisper_filter *f;
    const choir_whisper_greedy *g;
} greedy_job;

static void greedy_rows(void *ctx, int64_t a, int64_t b, int worker) {
    (void)worker;
    const greedy_job *j = ctx;
    for (int64_t r = a; r < b; r++) {
        choir_whisper_filter f = *j->f;
        f.sample_begin = j->g->sample_begin[r];
        choir_whisper_greedy_row(&f, j->g, r, j->logits + r * (int64_t)f.n_vocab);
    }
}

int choir_op_whisper_greedy(choir_stream *s, float *logits, const choir_whisper_filter *f,
                            const choir_whisper_greedy *g) {
    if (!choir_stream_ok(s)) return s->err.code;
    if (!f || !f->sp || !g || g->B < 0 || f->n_vocab <= 0 || g->ld <= 0 ||
        (f->n_suppress > 0 && !f->suppress))
        return be_invalid(s, "whisper_greedy: bad arguments");
    if (f->timestamps && (f->sp->timestamp_begin <= f->sp->eot ||
                          f->sp->timestamp_begin > f->n_vocab))
        return be_invalid(s, "whisper_greedy: timestamp_begin %d outside (eot, n_vocab]",
                          f->sp->timestamp_begin);
    if (g->B == 0) return 0;
    if (be_host(s)) {
        greedy_job j = {logits, f, g};
        choir_pool_parallel_for(choir_pool_default(), g->B, 1, greedy_rows, &j);
        return 0;
    }
#ifdef CHOIR_HAVE_CUDA
    choir_cuda_whisper_rules r = {.n_vocab = f->n_vocab,
                                  .timestamp_begin = f->sp->timestamp_begin,
                                  .eot = f->sp->eot,
                                  .no_timestamps = f->sp->no_timestamps,
                                  .timestamps = f->timestamps,
                                  .suppress_blank = f->suppress_blank,
                                  .max_initial_timestamp_index = f->max_initial_timestamp_index,
                                  .suppress = f->suppress,
                                  .n_suppress = f->n_suppress};
    BE_CUDA(s, "whisper_greedy", choir_cuda_whisper_greedy(s->be->cu, logits, &r, g, BE_ERR));
#endif
    return be_unsupported(s, "whisper_greedy");
}
