/* `choir info`: what this build and this machine offer. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/pool.h"
#include "cli/cli.h"

int choir_cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: choir info\n\nPrints the build, compute backends, kernels and memory.\n");
            return 0;
        }
    }
    printf("choir %s\n", CHOIR_VERSION);
    printf("\nbackends:\n");
    printf("  cpu    %s (best on this CPU: %s), %d threads\n", choir_isa_name(choir_kernels_isa()),
           choir_isa_name(choir_kernels_best_isa()), choir_pool_threads(choir_pool_default()));
#ifdef CHOIR_HAVE_CUDA
    printf("  cuda   built\n");
#else
    printf("  cuda   not built (configure on a machine with nvcc)\n");
#endif
    const char *names[64], *isas[64];
    int n = choir_kernels_describe(names, isas, 64);
    printf("\nkernels:\n");
    for (int i = 0; i < n; i++) printf("  %-22s %s\n", names[i], isas[i]);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    printf("\nmemory:\n  physical %.1f GiB\n", (double)pages * (double)page / (1024.0 * 1024 * 1024));
    return 0;
}
