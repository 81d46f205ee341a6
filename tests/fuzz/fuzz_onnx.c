/* libFuzzer harness: the ONNX weight reader on arbitrary bytes. A rejected
 * input must come with a negative code and a message; every tensor of an
 * accepted one must be readable in full and convertible to float, and its
 * byte count must match its dims. Seed with the official model
 * (../shared/fixtures/real/vad/silero_vad_16k_op15.onnx) and small hand-made
 * models; -max_len=65536 keeps iterations fast. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "choir/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    choir_err err = {0};
    choir_onnx *m = choir_onnx_parse(data, size, &err);
    if (!m) {
        if (err.code >= 0 || !err.msg[0]) __builtin_trap();
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < choir_onnx_count(m); i++) {
        const choir_onnx_tensor *t = choir_onnx_at(m, i);
        if (!t || !t->name || !t->graph) __builtin_trap();
        if (!t->data) continue;
        if (t->nbytes != (size_t)t->numel * choir_dtype_size(t->dtype)) __builtin_trap();
        const uint8_t *b = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sink ^= b[k];
        if (t->numel <= (1 << 16)) {
            float *f = malloc((size_t)t->numel * sizeof *f + 1);
            if (f && choir_onnx_tensor_f32(t, f, &err) != 0) __builtin_trap();
            free(f);
        }
    }
    (void)sink;
    choir_onnx_free(m);
    return 0;
}
