/* choir-dev: entry point of the developer tools (see dev.h). Its arguments
 * are those of `choir bench ...` / `choir dev ...` with "bench" or "dev" first. */
#include <stdio.h>
#include <string.h>

#include "cli/dev/dev.h"

static int usage(FILE *f)
{
    fprintf(f, "usage: choir bench TARGET [ARGS...]          (choir bench --help lists the targets)\n"
               "       choir dev weights --manifest M --config C --out DIR\n"
               "       choir dev parity whisper|kokoro|mossformer2|vibevoice|sam-audio ...\n"
               "(this program, choir-dev, is what those commands run)\n");
    return f == stdout ? 0 : 2;
}

static int dev_main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } parity[] = {
        {"whisper", choir_cmd_parity_whisper},         {"kokoro", choir_cmd_parity_kokoro},
        {"mossformer2", choir_cmd_parity_mossformer2}, {"sam-audio", choir_cmd_parity_sam_audio},
        {"vibevoice", choir_cmd_parity_vibevoice},
    };
    if (argc >= 2 && strcmp(argv[1], "weights") == 0)
        return choir_cmd_dev_weights(argc - 1, argv + 1);
    if (argc >= 3 && strcmp(argv[1], "parity") == 0)
        for (size_t i = 0; i < sizeof parity / sizeof parity[0]; i++)
            if (strcmp(argv[2], parity[i].name) == 0)
                return parity[i].fn(argc - 2, argv + 2);
    return usage(stderr);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "bench") == 0)
        return choir_cmd_bench(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "dev") == 0)
        return dev_main(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return usage(stdout);
    return usage(stderr);
}
