/* The kernel list shown by `choir info`. Each kernel family with a SIMD twin
 * reports the ISA in use; the matrix products themselves are OpenBLAS's. */
#include "choir/kernels.h"

typedef struct kernel_info {
    const char *name;
    int has_simd;
} kernel_info;

static const kernel_info g_kernels[] = {
    {"gemm_f32", 0},
    {"linear f32", 1},
    {"linear f16", 1},
    {"linear bf16", 1},
    {"linear quantized", 1},
    {"f16/bf16 conversion", 1},
    {"add, mul, scale", 1},
    {"gelu erf/tanh", 1},
    {"silu, sigmoid, tanh", 1},
    {"relu, leaky relu", 1},
    {"snake", 1},
    {"layer norm", 1},
    {"instance norm", 1},
    {"softmax", 1},
    {"conv1d", 1},
    {"conv_transpose1d", 1},
    {"lstm", 1},
    {"attention", 1},
};

int choir_kernels_describe(const char **names, const char **isas, int max) {
    int n = 0;
    const char *active = choir_isa_name(choir_kernels_isa());
    for (unsigned i = 0; i < sizeof g_kernels / sizeof g_kernels[0] && n < max; i++, n++) {
        names[n] = g_kernels[i].name;
        isas[n] = g_kernels[i].has_simd ? active : "openblas";
    }
    return n;
}
