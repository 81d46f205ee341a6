/* Elementwise activations, normalisation and softmax. Each public kernel picks
 * the twin table for the ISA in use; long arrays are split over the default
 * pool (transcendental activations are compute-bound, so threads pay off). */
#include <math.h>

#include "choir/kernels.h"
#include "choir/pool.h"
#include "tensor/cpu/cpu_kernels.h"

/* Below this many elements a parallel loop costs more than it saves. */
#define PAR_MIN_ELEMS 32768

typedef enum unary_op {
    UNARY_GELU_ERF,
    UNARY_GELU_TANH,
    UNARY_LEAKY_RELU,
    UNARY_SIGMOID,
    UNARY_TANH,
    UNARY_SILU,
} unary_op;

typedef struct unary_job {
    const choir_cpu_ops *ops;
    unary_op op;
    float *x;
    float slope;
} unary_job;

static void unary_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const unary_job *j = ctx;
    float *x = j->x + begin;
    int64_t n = end - begin;
    switch (j->op) {
    case UNARY_GELU_ERF: j->ops->gelu_erf(x, n); break;
    case UNARY_GELU_TANH: j->ops->gelu_tanh(x, n); break;
    case UNARY_LEAKY_RELU: j->ops->leaky_relu(x, n, j->slope); break;
    case UNARY_SIGMOID: j->ops->sigmoid(x, n); break;
    case UNARY_TANH: j->ops->tanh(x, n); break;
    case UNARY_SILU: j->ops->silu(x, n); break;
    }
}

static void run_unary(unary_op op, float *x, int64_t n, float slope) {
    unary_job j = {choir_cpu_ops_now(), op, x, slope};
    if (n < PAR_MIN_ELEMS) {
        unary_range(&j, 0, n, 0);
        return;
    }
    choir_pool_parallel_for(choir_pool_default(), n, PAR_MIN_ELEMS / 4, unary_range, &j);
}

void choir_gelu_erf(float *x, int64_t n) { run_unary(UNARY_GELU_ERF, x, n, 0); }
void choir_gelu_tanh(float *x, int64_t n) { run_unary(UNARY_GELU_TANH, x, n, 0); }
void choir_leaky_relu(float *x, int64_t n, float slope) {
    run_unary(UNARY_LEAKY_RELU, x, n, slope);
}
void choir_sigmoid(float *x, int64_t n) { run_unary(UNARY_SIGMOID, x, n, 0); }
void choir_tanh(float *x, int64_t n) { run_unary(UNARY_TANH, x, n, 0); }
void choir_silu(float *x, int64_t n) { run_unary(UNARY_SILU, x, n, 0); }
void choir_relu(float *x, int64_t n) { run_unary(UNARY_LEAKY_RELU, x, n, 0.0f); }

typedef struct snake_job {
    const choir_cpu_ops *ops;
    float *x;
    int64_t T;
    const float *alpha;
} snake_job;

static void snake_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const snake_job *j = ctx;
    for (int64_t c = begin; c < end; c++)
        j->ops->snake(j->x + c * j->T, j->T, j->alpha[c], 1.0f / j->alpha[c]);
}

void choir_snake(float *x, int64_t C, int64_t T, const float *alpha) {
    snake_job j = {choir_cpu_ops_now(), x, T, alpha};
    int64_t grain = T > 0 ? (PAR_MIN_ELEMS / 4 + T - 1) / T : C;
    if (C * T < PAR_MIN_ELEMS)
        snake_range(&j, 0, C, 0);
    else
        choir_pool_parallel_for(choir_pool_default(), C, grain, snake_range, &j);
}

/* Memory-bound: one thread already saturates most of the bandwidth. */
void choir_add(const float *a, const float *b, float *y, int64_t n) {
    choir_cpu_ops_now()->add(a, b, y, n);
}
void choir_mul(const float *a, const float *b, float *y, int64_t n) {
    choir_cpu_ops_now()->mul(a, b, y, n);
}
void choir_scale(float *x, float s, int64_t n) { choir_cpu_ops_now()->scale(x, s, n); }

void choir_add_bias_rows(float *x, const float *bias, int64_t rows, int64_t cols) {
    const choir_cpu_ops *ops = choir_cpu_ops_now();
    for (int64_t r = 0; r < rows; r++)
        ops->add(x + r * cols, bias, x + r * cols, cols);
}

/* --- normalisation --------------------------------------------------------- */

typedef struct norm_job {
    const choir_cpu_ops *ops;
    const float *x;
    float *y;
    int64_t dim;
    const float *gamma, *beta;
    float eps;
} norm_job;

static void layer_norm_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const norm_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        float mean, var;
        j->ops->mean_var(j->x + r * j->dim, j->dim, &mean, &var);
        float inv = 1.0f / sqrtf(var + j->eps);
        j->ops->normalize(j->x + r * j->dim, j->y + r * j->dim, j->dim, mean, inv, j->gamma,
                          j->beta);
    }
}

void choir_layer_norm(const float *x, float *y, int64_t rows, int64_t dim, const float *gamma,
                      const float *beta, float eps) {
    norm_job j = {choir_cpu_ops_now(), x, y, dim, gamma, beta, eps};
    int64_t grain = dim > 0 ? (PAR_MIN_ELEMS + dim - 1) / dim : rows;
    if (rows * dim < PAR_MIN_ELEMS)
        layer_norm_range(&j, 0, rows, 0);
    else
        choir_pool_parallel_for(choir_pool_default(), rows, grain, layer_norm_range, &j);
}

static void instance_norm_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const norm_job *j = ctx;
    for (int64_t c = begin; c < end; c++) {
        float mean, var;
        j->ops->mean_var(j->x + c * j->dim, j->dim, &mean, &var);
        float a = 1.0f / sqrtf(var + j->eps);
        float b = 0.0f;
        if (j->gamma) a *= j->gamma[c];
        if (j->beta) b = j->beta[c];
        j->ops->affine(j->x + c * j->dim, j->y + c * j->dim, j->dim, mean, a, b);
    }
}

void choir_instance_norm(const float *x, float *y, int64_t C, int64_t T, const float *gamma,
                         const float *beta, float eps) {
    norm_job j = {choir_cpu_ops_now(), x, y, T, gamma, beta, eps};
    int64_t grain = T > 0 ? (PAR_MIN_ELEMS + T - 1) / T : C;
    if (C * T < PAR_MIN_ELEMS)
        instance_norm_range(&j, 0, C, 0);
    else
        choir_pool_parallel_for(choir_pool_default(), C, grain, instance_norm_range, &j);
}

typedef struct softmax_job {
    const choir_cpu_ops *ops;
    float *x;
    int64_t dim;
} softmax_job;

static void softmax_range(void *ctx, int64_t begin, int64_t end, int worker) {
    const softmax_job *j = ctx;
    for (int64_t r = begin; r < end; r++)
        j->ops->softmax_row(j->x + r * j->dim, j->dim);
}

int64_t choir_argmax_f32(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void choir_softmax(float *x, int64_t rows, int64_t dim) {
    softmax_job j = {choir_cpu_ops_now(), x, dim};
    int64_t grain = dim > 0 ? (PAR_MIN_ELEMS / 4 + dim - 1) / dim : rows;
    if (rows * dim < PAR_MIN_ELEMS)
        softmax_range(&j, 0, rows, 0);
    else
        choir_pool_parallel_for(choir_pool_default(), rows, grain, softmax_range, &j);
}
