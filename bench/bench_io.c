/* io speed: randw-v1 generation, writing the Kokoro test checkpoint, opening it
 * (header validation only: nothing is read), touching every tensor byte, and
 * opening a .pth archive. Usage:
 *   bench_io [SHARED_FIXTURES_DIR] [OUT_DIR]
 * (defaults: ../shared/fixtures and /tmp). Writes ~330 MB under OUT_DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "choir/alloc.h"
#include "choir/pth.h"
#include "choir/randw.h"
#include "choir/safetensors.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *fx = argc > 1 ? argv[1] : "../shared/fixtures";
    const char *tmp = argc > 2 ? argv[2] : "/tmp";
    char manifest[2048], config[2048], out[2048], pth[2048];
    snprintf(manifest, sizeof manifest, "%s/kokoro/kokoro-v1/manifest.json", fx);
    snprintf(config, sizeof config, "%s/kokoro/kokoro-v1/config.json", fx);
    snprintf(out, sizeof out, "%s/choir-bench-io", tmp);
    snprintf(pth, sizeof pth, "%s/kokoro/pth/kokoro_subset.pth", fx);

    enum { N = 1 << 24 };
    float *buf = malloc((size_t)N * sizeof *buf);
    double t0 = now_s();
    choir_randw_fill("bench.weight", 0.0, 0.1, 0, N, buf);
    double gen = now_s() - t0;
    printf("randw_fill           %8.1f M elements/s\n", N / gen / 1e6);
    free(buf);

    choir_err err = {0};
    t0 = now_s();
    if (choir_randw_write_checkpoint(manifest, config, out, &err) != 0) {
        fprintf(stderr, "bench_io: %s\n", err.msg);
        return 1;
    }
    double write = now_s() - t0;
    t0 = now_s();
    choir_st *st = choir_st_open(out, &err);
    if (!st) {
        fprintf(stderr, "bench_io: %s\n", err.msg);
        return 1;
    }
    double open = now_s() - t0;
    double mb = (double)choir_st_data_bytes(st) / 1e6;
    printf("write kokoro ckpt    %8.2f s  (%.0f MB, %.0f MB/s)\n", write, mb, mb / write);
    printf("st_open (%d tensors) %8.3f ms\n", choir_st_count(st), open * 1e3);
    t0 = now_s();
    volatile float sink = 0;
    for (int i = 0; i < choir_st_count(st); i++) {
        const choir_st_tensor *t = choir_st_at(st, i);
        const float *x = t->data;
        float s = 0;
        for (int64_t k = 0; k < t->numel; k += 1024) s += x[k]; /* one touch per 4 KiB page */
        sink += s;
    }
    double touch = now_s() - t0;
    printf("page in all tensors  %8.3f s  (%.0f MB/s, page cache warm after write)\n", touch, mb / touch);
    choir_st_close(st);

    t0 = now_s();
    choir_pth *p = choir_pth_open_flags(pth, CHOIR_PTH_NORMALIZE, &err);
    double popen = now_s() - t0;
    if (!p) {
        fprintf(stderr, "bench_io: %s\n", err.msg);
        return 1;
    }
    printf("pth_open (%d tensors) %7.3f ms\n", choir_pth_count(p), popen * 1e3);
    choir_pth_close(p);
    (void)sink;
    return 0;
}
