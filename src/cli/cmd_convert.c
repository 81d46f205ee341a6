/* `choir convert`: checkpoint conversion and quantization (src/io/convert.c
 * does the work). */
#include <stdio.h>
#include <string.h>

#include "choir/convert.h"
#include "choir/dtype.h"
#include "cli/cli.h"
#include "cli/opt.h"

int choir_cmd_convert(int argc, char **argv) {
    choir_convert_params p;
    choir_convert_default_params(&p);
    p.report = stdout;
    const char *in = NULL, *out = NULL, *dtype = NULL;
    int quantize = 0, dequantize = 0, mlx_exact = 0, quiet = 0;
    const cli_opt flags[] = {
        {"--in", CLI_STRING, &in, 0, 0, "SRC", "the checkpoint to convert (required)"},
        {"--out", CLI_STRING, &out, 0, 0, "DST", "the directory to write (required)"},
        {"--quantize", CLI_FLAG, &quantize, 0, 0, NULL, "quantize with the defaults (4 bits, group size 64)"},
        {"-q", CLI_FLAG, &quantize, 0, 0, NULL, "the same as --quantize"},
        {"--q-bits", CLI_INT, &p.q_bits, 1, 1024, "B", "quantize linear/embedding layers to B bits (2,3,4,5,6,8)"},
        {"--q-group-size", CLI_INT, &p.q_group_size, 1, 1024, "G", "32, 64 (default) or 128"},
        {"--dtype", CLI_STRING, &dtype, 0, 0, "T", "f32, f16 or bf16: float type of unquantized tensors and of\nscales/biases"},
        {"--quant-predicate", CLI_STRING, &p.quant_predicate, 0, 0, "P",
         "per-layer mixed precision, mixed_3_6 or mixed_4_6 (3 or 4 bits,\n6 for sensitive layers)"},
        {"--dequantize", CLI_FLAG, &dequantize, 0, 0, NULL, "expand a quantized input to float"},
        {"--mlx-exact", CLI_FLAG, &mlx_exact, 0, 0, NULL,
         "MLX's rounding in every group (bit-identical to mlx-community\nfiles; up to one step of error in some "
         "groups instead of half)"},
        {"--quiet", CLI_FLAG, &quiet, 0, 0, NULL, "no per-tensor report"},
    };
    const cli_spec spec = {
        .cmd = "convert",
        .synopsis = "usage: choir convert --in SRC --out DST [--q-bits B] [--q-group-size G]\n"
                    "                     [--dtype f32|f16|bf16] [--quant-predicate mixed_3_6|mixed_4_6]\n"
                    "                     [--quantize] [--dequantize] [--mlx-exact] [--quiet]\n"
                    "  SRC: a Hugging Face or MLX model directory, a .safetensors file, a PyTorch .pth,\n"
                    "       or Silero VAD's .onnx. DST: a directory (config.json + model.safetensors).\n",
        .opts = flags,
        .n_opts = (int)(sizeof flags / sizeof flags[0]),
    };
    int parsed = cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    if (dtype) {
        if (strcmp(dtype, "f32") == 0 || strcmp(dtype, "float32") == 0)
            p.dtype = CHOIR_DTYPE_F32;
        else if (strcmp(dtype, "f16") == 0 || strcmp(dtype, "float16") == 0)
            p.dtype = CHOIR_DTYPE_F16;
        else if (strcmp(dtype, "bf16") == 0 || strcmp(dtype, "bfloat16") == 0)
            p.dtype = CHOIR_DTYPE_BF16;
        else {
            fprintf(stderr, "choir convert: --dtype takes f32, f16 or bf16, not \"%s\"\n", dtype);
            return 2;
        }
    }
    p.dequantize = dequantize != 0;
    p.mlx_exact = mlx_exact != 0;
    if (quiet) p.report = NULL;
    if (!in || !out) {
        fprintf(stderr, "choir convert: --in SRC and --out DST are required\n");
        cli_usage(&spec, stderr);
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
