/* Kokoro in the mlx-audio layout (spec §9.2) converted to the native one:
 * each tensor gets its native name, and convolution weights stored
 * [d0, k, in] are re-ordered to [d0, in, k]. The rules themselves live with
 * the Kokoro loader (choir/kokoro_mlx.h), which reads the same files. */
#include <stdio.h>
#include <string.h>

#include "choir/tensor.h"
#include "models/convert/convert_internal.h"
#include "choir/kokoro_mlx.h"

bool convert_kokoro_is_mlx(const choir_st_tensor *const *tensors, int n) {
    for (int i = 0; i < n; i++)
        if (choir_kokoro_mlx_marks_layout(tensors[i]->name)) return true;
    return false;
}

int convert_kokoro_native(const choir_st_tensor *t, choir_st_tensor *out, char *name, size_t cap,
                          bool *reorder, choir_err *err) {
    *out = *t;
    *reorder = false;
    if (!choir_kokoro_native_name_of(t->name, name, cap))
        return choir_err_set(err, CHOIR_EINVAL, "%s: tensor name too long", t->name);
    out->name = name;
    int k = choir_kokoro_conv_kernel(name);
    if (k == 0 || t->ndim != 3) return 0;
    /* [d0, k, in] is mlx-audio's layout and is assumed when in == k too;
     * [d0, in, k] is a weight that mlx-audio left in torch's layout. */
    if (t->shape[1] == k) {
        int64_t in = t->shape[2];
        out->shape[1] = in;
        out->shape[2] = k;
        *reorder = k > 1 && in > 1;
        return 0;
    }
    if (t->shape[2] == k) return 0;
    return choir_err_set(err, CHOIR_ESHAPE,
                         "%s: a kernel-%d convolution weight of shape [%lld, %lld, %lld] "
                         "(expected [out, %d, in] or [out, in, %d])",
                         t->name, k, (long long)t->shape[0], (long long)t->shape[1],
                         (long long)t->shape[2], k, k);
}

void convert_kokoro_reorder(const choir_st_tensor *t, void *dst) {
    choir_kokoro_swap_last_axes(t->data, t->shape[0], t->shape[1], t->shape[2], choir_dtype_size(t->dtype),
                      dst);
}
