/* `choir dev weights`: builds a randw-v1 test checkpoint from a fixture manifest. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "choir/error.h"
#include "choir/randw.h"
#include "cli/dev/dev.h"
#include "cli/opt.h"

int choir_cmd_dev_weights(int argc, char **argv) {
    const char *manifest = NULL, *config = NULL, *out = NULL;
    choir_randw_opts opts = {0};
    const cli_opt flags[] = {
        {"--manifest", CLI_STRING, &manifest, 0, 0, "FILE", "the tensors to write (required)"},
        {"--config", CLI_STRING, &config, 0, 0, "FILE", "copied to DIR/config.json"},
        {"--out", CLI_STRING, &out, 0, 0, "DIR", "the model directory written (required)"},
        {"--rename", CLI_STRING, &opts.rename_path, 0, 0, "NAMES.json",
         "store tensors under other names (a {name: new} map, or one\nunder \"hf_to_original\"), with the same values"},
        {"--shards", CLI_INT, &opts.shards, 1, 100000, "N", "write N shard files and model.safetensors.index.json"},
    };
    const cli_spec spec = {
        .cmd = "dev weights",
        .synopsis = "usage: choir dev weights --manifest FIXTURE/manifest.json [--config FIXTURE/config.json] --out DIR\n"
                    "                         [--rename NAMES.json] [--shards N]\n"
                    "\nWrites DIR/config.json (a copy of --config) and DIR/model.safetensors: every manifest\n"
                    "tensor as float32 randw-v1 data, plus the manifest's constants.\n\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (!manifest || !out) {
        fprintf(stderr, "choir dev weights: --manifest and --out are required\n");
        cli_usage(&spec, stderr);
        return 2;
    }
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
