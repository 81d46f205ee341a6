/* A small mutation driver for the libFuzzer harnesses of tests/fuzz, so that
 * each runs in CI without clang's libFuzzer: a ctest `fuzz_<name>` runs one
 * harness for a few seconds (under ASan + UBSan in the sanitizer build).
 *
 *   fuzz_<name> [-max_total_time=S] [-seed=N] [-runs=N] [FILE...]
 *
 * It starts from the harness's own seeds (fuzz_seeds, made on the spot) and
 * the files given, and feeds LLVMFuzzerTestOneInput mutants of them: bit
 * flips, random bytes, interesting values, insertions, deletions, block
 * copies, truncations, splices of two inputs. Inputs that reached a new
 * outcome (the harness's return value is ignored; coverage is libFuzzer's
 * job) are not tracked: this is a smoke run, the clang build does the
 * guided search. The run is deterministic for a given -seed and count. A
 * crash, a sanitizer report or a trap in the harness fails the test; with
 * CHOIR_FUZZ_SAVE=PATH each input is written to PATH before it runs, so the
 * one that failed is there afterwards. CHOIR_FUZZ_SECONDS overrides
 * -max_total_time (longer runs by hand). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A harness without seeds of its own starts from the empty input. */
__attribute__((weak)) int fuzz_seeds(fuzz_seed *out, int cap)
{
    (void)out;
    (void)cap;
    return 0;
}

#define MAX_INPUT (1 << 20)
#define MAX_POOL 64

static uint64_t g_rng;

static uint64_t next_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static size_t below(size_t n)
{
    return n ? (size_t)(next_u64() % n) : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One mutation of buf (len bytes, cap room) in place; returns the new length. */
static size_t mutate_once(uint8_t *buf, size_t len, size_t cap, const fuzz_seed *pool, int n_pool)
{
    static const uint8_t interesting[] = {0, 1, 0x7F, 0x80, 0xFF, 0xFE, 0x10, 0x20, '"', '{', '}', '[', ']',
                                          ':', ',', '\\', '\r', '\n', '-', '0', '9', 'e'};
    switch (below(9)) {
    case 0: /* flip a bit */
        if (len)
            buf[below(len)] ^= (uint8_t)(1u << below(8));
        return len;
    case 1: /* a random byte */
        if (len)
            buf[below(len)] = (uint8_t)next_u64();
        return len;
    case 2: /* an interesting byte */
        if (len)
            buf[below(len)] = interesting[below(sizeof interesting)];
        return len;
    case 3: { /* insert a few bytes */
        size_t n = 1 + below(8), at = below(len + 1);
        if (len + n > cap)
            return len;
        memmove(buf + at + n, buf + at, len - at);
        for (size_t i = 0; i < n; i++)
            buf[at + i] = below(2) ? interesting[below(sizeof interesting)] : (uint8_t)next_u64();
        return len + n;
    }
    case 4: { /* delete a run */
        if (!len)
            return len;
        size_t at = below(len), n = 1 + below(len - at < 16 ? len - at : 16);
        memmove(buf + at, buf + at + n, len - at - n);
        return len - n;
    }
    case 5: { /* copy a block over another place */
        if (len < 2)
            return len;
        size_t n = 1 + below(len / 2), from = below(len - n + 1), to = below(len - n + 1);
        memmove(buf + to, buf + from, n);
        return len;
    }
    case 6: /* truncate */
        return len ? below(len) : 0;
    case 7: { /* a 16/32-bit field set to an extreme */
        if (len < 4)
            return len;
        size_t at = below(len - 3);
        uint32_t v = below(2) ? 0xFFFFFFFFu : (uint32_t)below(2) << 31;
        memcpy(buf + at, &v, below(2) ? 2 : 4);
        return len;
    }
    default: { /* splice: our head, another input's tail */
        if (!n_pool)
            return len;
        const fuzz_seed *o = &pool[below((size_t)n_pool)];
        size_t head = below(len + 1), from = below(o->len + 1), n = o->len - from;
        if (head + n > cap)
            n = cap - head;
        memcpy(buf + head, o->data + from, n);
        return head + n;
    }
    }
}

int main(int argc, char **argv)
{
    double seconds = 3;
    long long runs = -1;
    g_rng = 0x9E3779B97F4A7C15ull;
    fuzz_seed pool[MAX_POOL];
    int n_pool = fuzz_seeds(pool, MAX_POOL);
    if (n_pool < 0)
        n_pool = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "-max_total_time=", 16) == 0) {
            seconds = atof(a + 16);
        } else if (strncmp(a, "-seed=", 6) == 0) {
            g_rng = strtoull(a + 6, NULL, 10) | 1;
        } else if (strncmp(a, "-runs=", 6) == 0) {
            runs = atoll(a + 6);
        } else if (a[0] == '-') {
            continue; /* another libFuzzer flag: ignored here */
        } else if (n_pool < MAX_POOL) {
            FILE *f = fopen(a, "rb");
            if (!f)
                continue;
            uint8_t *d = malloc(MAX_INPUT);
            size_t n = d ? fread(d, 1, MAX_INPUT, f) : 0;
            fclose(f);
            if (d)
                pool[n_pool++] = (fuzz_seed){d, n};
        }
    }
    if (getenv("CHOIR_FUZZ_SECONDS"))
        seconds = atof(getenv("CHOIR_FUZZ_SECONDS"));
    const char *save = getenv("CHOIR_FUZZ_SAVE");
    uint8_t *buf = malloc(MAX_INPUT);
    if (!buf)
        return 2;
    /* the seeds as they are, then mutants until the time is up */
    long long done = 0;
    for (int i = 0; i < n_pool; i++, done++)
        LLVMFuzzerTestOneInput(pool[i].data, pool[i].len);
    double end = now_s() + seconds;
    while (runs < 0 ? now_s() < end : done < runs) {
        size_t len = 0;
        if (n_pool) {
            const fuzz_seed *s = &pool[below((size_t)n_pool)];
            len = s->len < MAX_INPUT ? s->len : MAX_INPUT;
            memcpy(buf, s->data, len);
        }
        int k = 1 + (int)below(4);
        for (int m = 0; m < k; m++)
            len = mutate_once(buf, len, MAX_INPUT, pool, n_pool);
        if (save) {
            FILE *f = fopen(save, "wb");
            if (f) {
                fwrite(buf, 1, len, f);
                fclose(f);
            }
        }
        /* an exact-size copy, so that ASan sees a read past the end */
        uint8_t *exact = malloc(len ? len : 1);
        if (!exact)
            return 2;
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        done++;
    }
    printf("%s: %lld inputs in %.1f s from %d seeds, no crash\n", argv[0], done, seconds, n_pool);
    free(buf);
    for (int i = 0; i < n_pool; i++)
        free(pool[i].data);
    return 0;
}
