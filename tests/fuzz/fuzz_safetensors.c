/* libFuzzer harness: the safetensors header parser on arbitrary bytes. Every
 * tensor it accepts must lie inside the input, and reading all of it must be
 * safe (ASan checks that). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "choir/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    choir_err err = {0};
    choir_st *st = choir_st_open_memory(data, size, "fuzz", &err);
    if (!st) {
        /* A refusal must always say why. */
        if (err.code >= 0 || !err.msg[0]) __builtin_trap();
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < choir_st_count(st); i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        if (choir_st_find(st, t->name) != t) __builtin_trap();
        if (t->nbytes != (size_t)t->numel * choir_dtype_size(t->dtype)) __builtin_trap();
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sink ^= p[k];
    }
    (void)sink;
    choir_st_metadata(st, "format");
    choir_st_close(st);
    return 0;
}
