/* The kernel list shown by `choir info`. Each kernel family with a SIMD twin
 * reports the ISA in use; the others always run the C reference. */
#include "choir/kernels.h"

typedef struct kernel_info {
    const char *name;
    int has_simd;
} kernel_info;

static const kernel_info g_kernels[] = {
    {"gemm_f32 (openblas)", 0},
};

int choir_kernels_describe(const char **names, const char **isas, int max) {
    int n = 0;
    const char *active = choir_isa_name(choir_kernels_isa());
    for (unsigned i = 0; i < sizeof g_kernels / sizeof g_kernels[0] && n < max; i++, n++) {
        names[n] = g_kernels[i].name;
        isas[n] = g_kernels[i].has_simd ? active : "c-reference";
    }
    return n;
}
