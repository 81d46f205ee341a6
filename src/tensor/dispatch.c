/* Run-time choice of kernel instruction set. The chosen ISA is process-wide
 * state (the CPU dispatch table), set once at first use or by tests. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "choir/kernels.h"

static atomic_int g_isa = -1;

choir_isa choir_kernels_best_isa(void) {
#if defined(CHOIR_X86) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            return CHOIR_ISA_AVX512;
        return CHOIR_ISA_AVX2;
    }
#endif
    return CHOIR_ISA_REF;
}

/* What the CPU can run: the best ISA, AVX2 under AVX-512, and the reference. */
static choir_isa supported(choir_isa isa) {
    choir_isa best = choir_kernels_best_isa();
    if (isa == CHOIR_ISA_REF || isa == best) return isa;
    if (isa == CHOIR_ISA_AVX2 && best == CHOIR_ISA_AVX512) return isa;
    return CHOIR_ISA_REF;
}

/* The first choice: CHOIR_ISA when set to a name of choir_isa_name's (or
 * its short form ref/avx2/avx512), else the best. */
static choir_isa first_choice(void) {
    const char *env = getenv("CHOIR_ISA");
    if (env && *env) {
        if (!strcmp(env, "ref") || !strcmp(env, "c-reference")) return CHOIR_ISA_REF;
        if (!strncmp(env, "avx2", 4)) return supported(CHOIR_ISA_AVX2);
        if (!strncmp(env, "avx512", 6)) return supported(CHOIR_ISA_AVX512);
        if (!strcmp(env, "neon")) return supported(CHOIR_ISA_NEON);
    }
    return choir_kernels_best_isa();
}

choir_isa choir_kernels_isa(void) {
    int isa = atomic_load(&g_isa);
    if (isa < 0) {
        isa = (int)first_choice();
        atomic_store(&g_isa, isa);
    }
    return (choir_isa)isa;
}

choir_isa choir_kernels_set_isa(choir_isa isa) {
    isa = supported(isa);
    atomic_store(&g_isa, (int)isa);
    return isa;
}

const char *choir_isa_name(choir_isa isa) {
    switch (isa) {
    case CHOIR_ISA_REF: return "c-reference";
    case CHOIR_ISA_AVX2: return "avx2+fma";
    case CHOIR_ISA_NEON: return "neon";
    case CHOIR_ISA_AVX512: return "avx512f+bw+vl";
    }
    return "?";
}
