/* `choir info`: what this build and this machine offer, and which models a
 * models folder holds (recognised by the same rule `choir serve` uses). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "choir/alloc.h"
#include "choir/kernels.h"
#include "choir/model.h"
#include "choir/pool.h"
#include "cli/cli.h"
#include "cli/opt.h"

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Prints one line for `dir` if it is a model; returns 1 if it was. */
static int describe_model(const char *dir, const char *id) {
    char config[4096];
    snprintf(config, sizeof config, "%s/config.json", dir);
    if (access(config, R_OK) != 0) return 0;
    choir_err err = {0};
    const choir_model_ops *ops = choir_model_detect(dir, NULL, 0, &err);
    if (!ops) {
        printf("  %-24s (not recognised: %s)\n", id, err.msg);
        return 1;
    }
    char tasks[64] = "";
    for (int t = 0; t < CHOIR_TASK_COUNT; t++) {
        if (!(ops->tasks & CHOIR_TASK_BIT(t))) continue;
        if (tasks[0]) strcat(tasks, ",");
        strcat(tasks, choir_task_name((choir_task)t));
    }
    int64_t bytes = choir_model_dir_bytes(dir);
    printf("  %-24s %-12s %-8s %8.1f MB  %s\n", id, ops->kind, tasks, bytes > 0 ? (double)bytes / 1e6 : 0.0,
           dir);
    return 1;
}

/* A models folder is a model directory itself, or holds model directories. */
static void list_models(const char *root) {
    const char *slash = strrchr(root, '/');
    if (describe_model(root, slash && slash[1] ? slash + 1 : root)) return;
    DIR *d = opendir(root);
    if (!d) {
        printf("  %s: cannot be read\n", root);
        return;
    }
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        if (is_dir(path)) found += describe_model(path, e->d_name);
    }
    closedir(d);
    if (!found) printf("  (no models in %s)\n", root);
}

int choir_cmd_info(int argc, char **argv) {
    const char *roots[16];
    cli_list dirs = {roots, 16, 0};
    const cli_opt flags[] = {
        {"--models", CLI_LIST, &dirs, 0, 0, "DIR", "a folder of models to describe (repeatable, up to 16)"},
    };
    const cli_spec spec = {
        .cmd = "info",
        .synopsis = "usage: choir info [--models DIR]...\n\n"
                    "Prints the build, compute backends, kernels, memory, and the models in each\n"
                    "DIR (default: $CHOIR_MODELS, else ~/.cache/choir/models).\n\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    int n_roots = dirs.n;
    char fallback[4096];
    if (n_roots == 0) {
        const char *env = getenv("CHOIR_MODELS"), *home = getenv("HOME");
        if (env && *env) {
            roots[n_roots++] = env;
        } else if (home) {
            snprintf(fallback, sizeof fallback, "%s/.cache/choir/models", home);
            roots[n_roots++] = fallback;
        }
    }

    printf("choir %s\n", CHOIR_VERSION);
    printf("\nbackends:\n");
    printf("  cpu    %s (best on this CPU: %s), %d threads\n", choir_isa_name(choir_kernels_isa()),
           choir_isa_name(choir_kernels_best_isa()), choir_pool_threads(choir_pool_default()));
#ifdef CHOIR_HAVE_CUDA
    printf("  cuda   built (sm_90)\n");
#else
    printf("  cuda   not built (configure with -DCHOIR_CUDA=ON on a machine with nvcc)\n");
#endif
    const char *names[64], *isas[64];
    int n = choir_kernels_describe(names, isas, 64);
    printf("\nkernels:\n");
    for (int i = 0; i < n; i++) printf("  %-22s %s\n", names[i], isas[i]);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    printf("\nmemory:\n  physical %.1f GiB\n", (double)pages * (double)page / (1024.0 * 1024 * 1024));
    printf("\nmodels:\n");
    for (int i = 0; i < n_roots; i++) {
        if (is_dir(roots[i]))
            list_models(roots[i]);
        else
            printf("  (no models folder at %s)\n", roots[i]);
    }
    return 0;
}
