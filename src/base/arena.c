/* Bump allocation over one reserved block. */
#include <stdint.h>
#include <string.h>

#include "choir/arena.h"

struct choir_arena {
    unsigned char *base;
    size_t capacity;
    size_t used;
    size_t high_water;
    size_t want; /* the fill level the largest refused allocation would have reached */
    int owns_base;
};

choir_arena *choir_arena_create(size_t capacity, choir_mem_category cat, choir_err *err) {
    choir_arena *a = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *a);
    if (!a) goto fail;
    a->base = choir_alloc(cat, capacity);
    if (!a->base) goto fail;
    a->capacity = capacity;
    a->owns_base = 1;
    return a;
fail:
    choir_free(a);
    choir_err_set(err, CHOIR_ENOMEM, "arena: cannot reserve %zu bytes", capacity);
    return NULL;
}

choir_arena *choir_arena_create_over(void *base, size_t capacity, choir_err *err) {
    choir_arena *a = choir_calloc(CHOIR_MEM_OTHER, 1, sizeof *a);
    if (!a) {
        choir_err_set(err, CHOIR_ENOMEM, "arena: out of memory");
        return NULL;
    }
    a->base = base;
    a->capacity = base ? capacity : 0;
    return a;
}

void choir_arena_free(choir_arena *a) {
    if (!a) return;
    if (a->owns_base) choir_free(a->base);
    choir_free(a);
}

void *choir_arena_alloc(choir_arena *a, size_t size) {
    size_t start = (a->used + CHOIR_ALIGN - 1) / CHOIR_ALIGN * CHOIR_ALIGN;
    if (start > a->capacity || size > a->capacity - start) {
        /* Kept so that whoever sizes the next arena knows how far this one
         * fell short (saturating: a size near SIZE_MAX is simply too large). */
        size_t would = size > SIZE_MAX - start ? SIZE_MAX : start + size;
        if (would > a->want) a->want = would;
        return NULL;
    }
    a->used = start + size;
    if (a->used > a->high_water) a->high_water = a->used;
    return a->base + start;
}

float *choir_arena_floats(choir_arena *a, size_t n) {
    if (n > SIZE_MAX / sizeof(float)) return NULL;
    float *p = choir_arena_alloc(a, n * sizeof(float));
    if (p) memset(p, 0, n * sizeof(float));
    return p;
}

size_t choir_arena_mark(const choir_arena *a) { return a->used; }

void choir_arena_release(choir_arena *a, size_t mark) {
    if (mark <= a->used) a->used = mark;
}

void choir_arena_reset(choir_arena *a) { a->used = 0; }
size_t choir_arena_used(const choir_arena *a) { return a->used; }
size_t choir_arena_capacity(const choir_arena *a) { return a->capacity; }
size_t choir_arena_high_water(const choir_arena *a) { return a->high_water; }
size_t choir_arena_need(const choir_arena *a) {
    return a->want > a->high_water ? a->want : a->high_water;
}
int choir_arena_overflowed(const choir_arena *a) { return a->want > 0; }
void choir_arena_reset_peak(choir_arena *a) {
    a->high_water = a->used;
    a->want = 0;
}
