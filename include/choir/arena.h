/* choir/arena.h: bump allocation for one batch.
 *
 * An arena reserves its capacity once (from the counted allocator) and hands out
 * aligned pieces until it is reset; the hot path never calls malloc. It records
 * its high-water mark so that estimates can be calibrated from measured peaks.
 * Not thread-safe: one arena belongs to one batch at a time. */
#ifndef CHOIR_ARENA_H
#define CHOIR_ARENA_H

#include <stddef.h>

#include "choir/alloc.h"
#include "choir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct choir_arena choir_arena;

/* Reserves `capacity` bytes in category `cat`. NULL (and err) on failure. */
choir_arena *choir_arena_create(size_t capacity, choir_mem_category cat, choir_err *err);
/* An arena over `capacity` bytes at `base` that the caller owns and keeps
 * alive (device memory of a backend, or a piece of another arena). The arena
 * never reads or writes that memory, so choir_arena_floats, which zero-fills,
 * is for host memory only. base should be aligned to CHOIR_ALIGN. NULL (and
 * err) when out of memory. */
choir_arena *choir_arena_create_over(void *base, size_t capacity, choir_err *err);
/* Frees the arena and everything handed out by it (not the memory of an
 * arena made with choir_arena_create_over). NULL is a no-op. */
void choir_arena_free(choir_arena *a);

/* Returns `size` bytes aligned to CHOIR_ALIGN, valid until the next reset or
 * free, or NULL when the arena has no room (the arena stays usable). */
void *choir_arena_alloc(choir_arena *a, size_t size);
/* As choir_arena_alloc, for n floats, zero-filled. */
float *choir_arena_floats(choir_arena *a, size_t n);

/* A mark is the arena's fill level; releasing to it frees everything handed out
 * after it was taken (scoped scratch inside a forward pass). */
size_t choir_arena_mark(const choir_arena *a);
void choir_arena_release(choir_arena *a, size_t mark);

/* Empties the arena (the high-water mark is kept). */
void choir_arena_reset(choir_arena *a);

size_t choir_arena_used(const choir_arena *a);
size_t choir_arena_capacity(const choir_arena *a);
/* The most bytes ever in use at once since creation or the last reset_peak. */
size_t choir_arena_high_water(const choir_arena *a);
/* The capacity this arena's use so far would have needed: the high-water mark,
 * or, when an allocation found no room, the fill level the largest such
 * allocation would have reached (the bytes in use before it, aligned, plus its
 * size; SIZE_MAX when that does not fit a size_t). A lower bound on what a run
 * cut short by the refusal needs: what it would have asked for later is unknown. */
size_t choir_arena_need(const choir_arena *a);
/* 1 when an allocation found no room since creation or the last reset_peak. */
int choir_arena_overflowed(const choir_arena *a);
/* Restarts the high-water mark at the current fill level and forgets refused
 * allocations. */
void choir_arena_reset_peak(choir_arena *a);

#ifdef __cplusplus
}
#endif
#endif
