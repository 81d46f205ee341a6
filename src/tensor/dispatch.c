/* Run-time choice of kernel instruction set. The chosen ISA is process-wide
 * state (the CPU dispatch table), set once at first use or by tests. */
#include <stdatomic.h>

#include "choir/kernels.h"

static atomic_int g_isa = -1;

choir_isa choir_kernels_best_isa(void) {
#if defined(CHOIR_X86) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CHOIR_ISA_AVX2;
#endif
    return CHOIR_ISA_REF;
}

choir_isa choir_kernels_isa(void) {
    int isa = atomic_load(&g_isa);
    if (isa < 0) {
        isa = (int)choir_kernels_best_isa();
        atomic_store(&g_isa, isa);
    }
    return (choir_isa)isa;
}

choir_isa choir_kernels_set_isa(choir_isa isa) {
    choir_isa best = choir_kernels_best_isa();
    if (isa != CHOIR_ISA_REF && isa != best) isa = CHOIR_ISA_REF;
    atomic_store(&g_isa, (int)isa);
    return isa;
}

const char *choir_isa_name(choir_isa isa) {
    switch (isa) {
    case CHOIR_ISA_REF: return "c-reference";
    case CHOIR_ISA_AVX2: return "avx2+fma";
    case CHOIR_ISA_NEON: return "neon";
    }
    return "?";
}
