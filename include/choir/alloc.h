/* choir/alloc.h: the one counted allocator.
 *
 * Every allocation in choir goes through here, tagged with a category, so the
 * memory governor can see current and peak bytes per category. Memory-mapped
 * weights are not allocated here; their owners report them with
 * choir_mem_account(). Blocks are aligned to CHOIR_ALIGN bytes. The counters
 * are atomic; all functions are thread-safe. */
#ifndef CHOIR_ALLOC_H
#define CHOIR_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHOIR_ALIGN 64

typedef enum choir_mem_category {
    CHOIR_MEM_OTHER = 0,
    CHOIR_MEM_WEIGHTS = 1,     /* model weights (allocated, or mapped and accounted) */
    CHOIR_MEM_ACTIVATIONS = 2, /* per-batch arenas and scratch */
    CHOIR_MEM_IO = 3,          /* decoded audio, request and response buffers */
    CHOIR_MEM_CACHE = 4,       /* KV caches, plans, look-up tables */
    CHOIR_MEM_COUNT = 5
} choir_mem_category;

/* Allocates `size` bytes aligned to CHOIR_ALIGN. Returns NULL on failure (or when
 * a test's injected failure fires). size 0 returns a valid unique pointer. */
void *choir_alloc(choir_mem_category cat, size_t size);
/* As choir_alloc, zero-filled; NULL when n * size overflows. */
void *choir_calloc(choir_mem_category cat, size_t n, size_t size);
/* Resizes a block from choir_alloc keeping its category; p NULL allocates.
 * On failure returns NULL and leaves p valid. */
void *choir_realloc(void *p, size_t size);
/* Duplicates a string (CHOIR_MEM_OTHER). NULL in, NULL out. */
char *choir_strdup(const char *s);
/* Frees a block from choir_alloc/calloc/realloc/strdup. NULL is a no-op. */
void choir_free(void *p);

/* Adds `delta` bytes (may be negative) to a category without allocating, for
 * memory that choir holds by other means (mapped weight pages made resident). */
void choir_mem_account(choir_mem_category cat, int64_t delta);

/* Bytes currently held / the most ever held at once, per category or in total
 * (cat = CHOIR_MEM_COUNT). */
int64_t choir_mem_current(choir_mem_category cat);
int64_t choir_mem_peak(choir_mem_category cat);
/* Sets every category's peak to its current value. */
void choir_mem_reset_peaks(void);
/* A static name for the category ("weights", ...). */
const char *choir_mem_category_name(choir_mem_category cat);

/* Testing: make the n-th allocation from now fail (n = 1 is the next one);
 * n = 0 turns injection off. Returns the number of allocations since the last
 * call, so a test can loop over every failure point. */
int64_t choir_alloc_fail_after(int64_t n);

#ifdef __cplusplus
}
#endif
#endif
