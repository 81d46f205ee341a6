/* libFuzzer harness: the torch.save reader (zip directory, restricted
 * unpickler, tensor views) on arbitrary bytes, with and without name
 * normalization. Every tensor it accepts must be readable in full. */
#include <stddef.h>
#include <stdint.h>

#include "choir/pth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (unsigned flags = 0; flags <= CHOIR_PTH_NORMALIZE; flags++) {
        choir_err err = {0};
        choir_pth *p = choir_pth_open_memory(data, size, flags, "fuzz", &err);
        if (!p) {
            if (err.code >= 0 || !err.msg[0]) __builtin_trap();
            continue;
        }
        volatile uint8_t sink = 0;
        for (int i = 0; i < choir_pth_count(p); i++) {
            const choir_st_tensor *t = choir_pth_at(p, i);
            if (choir_pth_find(p, t->name) != t) __builtin_trap();
            const uint8_t *b = t->data;
            for (size_t k = 0; k < t->nbytes; k++) sink ^= b[k];
        }
        (void)sink;
        choir_pth_close(p);
    }
    return 0;
}
