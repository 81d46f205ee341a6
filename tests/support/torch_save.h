/* A minimal torch.save writer for tests: stored (uncompressed) zip entries and
 * a protocol-2 pickle, enough to write checkpoints laid out as the official
 * Kokoro and MossFormer2 files, so the .pth loaders are tested on files made
 * here rather than on downloads. */
#ifndef CHOIR_TEST_TORCH_SAVE_H
#define CHOIR_TEST_TORCH_SAVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tsw_buf {
    unsigned char *p;
    size_t n, cap;
} tsw_buf;

typedef struct zipw {
    FILE *f;
    tsw_buf central;
    int entries;
} zipw;

void put(tsw_buf *b, const void *d, size_t n);
void put_u8(tsw_buf *b, unsigned v);
void put_u16(tsw_buf *b, unsigned v);
void put_u32(tsw_buf *b, uint32_t v);
void pk_str(tsw_buf *b, const char *s);
void pk_int(tsw_buf *b, int64_t v);
void pk_global(tsw_buf *b, const char *mod, const char *name);
void pk_tensor(tsw_buf *b, int key, int ndim, const int64_t *shape, int64_t numel);
void zip_add(zipw *z, const char *name, const void *data, size_t n);
void zip_finish(zipw *z);

struct cJSON;
/* Writes one manifest tensor ({name, shape, offset, scale}, values from
 * randw-v1) as zip entry "<archive>/data/<key>" and appends its pickled
 * (key_name: tensor) pair to `pk`. */
void tsw_add_manifest_tensor(zipw *z, tsw_buf *pk, const struct cJSON *t, const char *archive,
                             const char *key_name, int key);

#endif
