/* `choir dev weights`: builds a randw-v1 test checkpoint from a fixture manifest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "choir/error.h"
#include "choir/randw.h"
#include "cli/dev/dev.h"

static int usage(FILE *to) {
    fprintf(to, "usage: choir dev weights --manifest FIXTURE/manifest.json [--config FIXTURE/config.json] --out DIR\n"
                "                         [--rename NAMES.json] [--shards N]\n"
                "\nWrites DIR/config.json (a copy of --config) and DIR/model.safetensors: every manifest\n"
                "tensor as float32 randw-v1 data, plus the manifest's constants.\n"
                "  --rename NAMES.json  store tensors under other names (a {name: new} map, or one under\n"
                "                       \"hf_to_original\"), with the same values\n"
                "  --shards N           write N shard files and model.safetensors.index.json\n");
    return to == stdout ? 0 : 2;
}

int choir_cmd_dev_weights(int argc, char **argv) {
    const char *manifest = NULL, *config = NULL, *out = NULL;
    choir_randw_opts opts = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return usage(stdout);
        if (i + 1 >= argc) return usage(stderr);
        if (strcmp(argv[i], "--manifest") == 0) manifest = argv[++i];
        else if (strcmp(argv[i], "--config") == 0) config = argv[++i];
        else if (strcmp(argv[i], "--out") == 0) out = argv[++i];
        else if (strcmp(argv[i], "--rename") == 0) opts.rename_path = argv[++i];
        else if (strcmp(argv[i], "--shards") == 0) {
            opts.shards = atoi(argv[++i]);
            if (opts.shards < 1) return usage(stderr);
        }
        else return usage(stderr);
    }
    if (!manifest || !out) return usage(stderr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    choir_err err = {0};
    if (choir_randw_write_checkpoint_ex(manifest, config, out, &opts, &err) < 0) {
        fprintf(stderr, "choir dev weights: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "wrote %s/%s in %.2f s\n", out,
            opts.shards > 1 ? "model-*.safetensors + index" : "model.safetensors",
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
