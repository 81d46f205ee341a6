/* The one layout helper of src/tensor/quantize.c that the CPU quantized
 * kernels use, for the standalone build that leaves quantize.c out. */
#include "choir/quant.h"

int64_t choir_quant_packed_cols(int64_t cols, int bits) { return (cols * bits + 31) / 32; }
