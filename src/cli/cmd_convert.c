/* `choir convert`: checkpoint conversion and quantization (src/io/convert.c
 * does the work). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choir/convert.h"
#include "choir/dtype.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: choir convert --in SRC --out DST [--q-bits B] [--q-group-size G]\n"
            "                     [--dtype f32|f16|bf16] [--quant-predicate mixed_3_6|mixed_4_6]\n"
            "                     [--quantize] [--dequantize] [--mlx-exact] [--quiet]\n"
            "  SRC: a Hugging Face or MLX model directory, a .safetensors file, a PyTorch .pth,\n"
            "       or Silero VAD's .onnx. DST: a directory (config.json + model.safetensors).\n"
            "  --quantize        quantize with the defaults (4 bits, group size 64)\n"
            "  --q-bits B        quantize linear/embedding layers to B bits (2,3,4,5,6,8)\n"
            "  --q-group-size G  32, 64 (default) or 128\n"
            "  --dtype           float type of unquantized tensors and of scales/biases\n"
            "  --quant-predicate per-layer mixed precision (3 or 4 bits, 6 for sensitive layers)\n"
            "  --dequantize      expand a quantized input to float\n"
            "  --mlx-exact       MLX's rounding in every group (bit-identical to mlx-community\n"
            "                    files; up to one step of error in some groups instead of half)\n");
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 1024) return -1;
    *out = (int)v;
    return 0;
}

int choir_cmd_convert(int argc, char **argv) {
    choir_convert_params p;
    choir_convert_default_params(&p);
    p.report = stdout;
    const char *in = NULL, *out = NULL;
    int quantize = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--dequantize") == 0) {
            p.dequantize = true;
        } else if (strcmp(a, "--quantize") == 0 || strcmp(a, "-q") == 0) {
            quantize = 1;
        } else if (strcmp(a, "--mlx-exact") == 0) {
            p.mlx_exact = true;
        } else if (strcmp(a, "--quiet") == 0) {
            p.report = NULL;
        } else if (!v) {
            fprintf(stderr, "choir convert: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--in") == 0) {
            in = argv[++i];
        } else if (strcmp(a, "--out") == 0) {
            out = argv[++i];
        } else if (strcmp(a, "--q-bits") == 0) {
            if (parse_int(argv[++i], &p.q_bits) < 0 || p.q_bits == 0) {
                fprintf(stderr, "choir convert: --q-bits takes 2, 3, 4, 5, 6 or 8\n");
                return 2;
            }
        } else if (strcmp(a, "--q-group-size") == 0) {
            if (parse_int(argv[++i], &p.q_group_size) < 0) {
                fprintf(stderr, "choir convert: --q-group-size takes 32, 64 or 128\n");
                return 2;
            }
        } else if (strcmp(a, "--dtype") == 0) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") == 0 || strcmp(d, "float32") == 0)
                p.dtype = CHOIR_DTYPE_F32;
            else if (strcmp(d, "f16") == 0 || strcmp(d, "float16") == 0)
                p.dtype = CHOIR_DTYPE_F16;
            else if (strcmp(d, "bf16") == 0 || strcmp(d, "bfloat16") == 0)
                p.dtype = CHOIR_DTYPE_BF16;
            else {
                fprintf(stderr, "choir convert: --dtype takes f32, f16 or bf16, not \"%s\"\n", d);
                return 2;
            }
        } else if (strcmp(a, "--quant-predicate") == 0) {
            p.quant_predicate = argv[++i];
        } else {
            fprintf(stderr, "choir convert: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!in || !out) {
        usage(stderr);
        return 2;
    }
    if (quantize && p.q_bits == 0 && !p.quant_predicate) p.q_bits = 4;
    choir_err err;
    choir_err_clear(&err);
    choir_convert_stats st;
    int rc = choir_convert(in, out, &p, &st, &err);
    if (rc < 0) {
        fprintf(stderr, "choir convert: %s\n", err.msg[0] ? err.msg : choir_strerror(rc));
        return rc == CHOIR_EINVAL ? 2 : 1;
    }
    return 0;
}
