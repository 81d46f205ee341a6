/* Shared by the harnesses of tests/fuzz and their CI driver (driver.c). */
#ifndef CHOIR_FUZZ_H
#define CHOIR_FUZZ_H

#include <stddef.h>
#include <stdint.h>

typedef struct fuzz_seed {
    uint8_t *data; /* malloc'd (the driver frees it) */
    size_t len;
} fuzz_seed;

/* Seeds a harness makes on the spot for the driver: fills out[0..cap) and
 * returns how many. Optional (the driver's weak default gives none); a
 * libFuzzer build ignores it and takes a corpus directory instead. */
int fuzz_seeds(fuzz_seed *out, int cap);

#endif
