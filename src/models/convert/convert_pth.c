/* The .pth source of the converter, through the io layer's reader
 * (choir/pth.h). Names are normalized as published checkpoints spell them
 * (a top-level state_dict/model dict is the root, "module." prefixes are
 * dropped), which is also the naming of MLX's Kokoro safetensors. */
#include "choir/alloc.h"
#include "choir/pth.h"
#include "models/convert/convert_internal.h"

struct convert_pth {
    choir_pth *pth;
    const choir_st_tensor **tensors;
};

int convert_pth_open(const char *path, convert_pth **out, const choir_st_tensor ***tensors, int *n,
                     choir_err *err) {
    *out = NULL;
    *tensors = NULL;
    *n = 0;
    convert_pth *h = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *h);
    if (!h) return choir_err_set(err, CHOIR_ENOMEM, "out of memory");
    h->pth = choir_pth_open_flags(path, CHOIR_PTH_NORMALIZE, err);
    if (!h->pth) goto fail;
    int count = choir_pth_count(h->pth);
    h->tensors = choir_alloc(CHOIR_MEM_OTHER, (size_t)(count > 0 ? count : 1) * sizeof *h->tensors);
    if (!h->tensors) {
        choir_err_set(err, CHOIR_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < count; i++) h->tensors[i] = choir_pth_at(h->pth, i);
    *out = h;
    *tensors = h->tensors;
    *n = count;
    return 0;
fail:
    convert_pth_close(h);
    return err ? err->code : CHOIR_EFORMAT;
}

void convert_pth_close(convert_pth *h) {
    if (!h) return;
    choir_free(h->tensors);
    choir_pth_close(h->pth);
    choir_free(h);
}
