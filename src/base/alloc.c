/* The counted allocator. Each block carries a small header (size, category)
 * in front of the aligned pointer handed out, so frees can be counted without
 * a lookup. Counters are atomics; peaks are raised with a CAS loop. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "choir/alloc.h"

typedef struct block_header {
    size_t size;
    uint32_t category;
    uint32_t magic;
} block_header;

#define BLOCK_MAGIC 0xC401A11Cu
/* The header sits in the last bytes of a CHOIR_ALIGN-sized prefix. */
#define PREFIX CHOIR_ALIGN

static atomic_llong g_current[CHOIR_MEM_COUNT];
static atomic_llong g_peak[CHOIR_MEM_COUNT];
static atomic_llong g_total_current;
static atomic_llong g_total_peak;
static atomic_llong g_fail_countdown; /* 0: off; n: the n-th allocation fails */
static atomic_llong g_alloc_count;

static void raise_peak(atomic_llong *peak, long long now) {
    long long old = atomic_load_explicit(peak, memory_order_relaxed);
    while (now > old && !atomic_compare_exchange_weak(peak, &old, now)) {
    }
}

void choir_mem_account(choir_mem_category cat, int64_t delta) {
    if ((unsigned)cat >= CHOIR_MEM_COUNT) cat = CHOIR_MEM_OTHER;
    long long now = atomic_fetch_add(&g_current[cat], delta) + delta;
    long long total = atomic_fetch_add(&g_total_current, delta) + delta;
    if (delta > 0) {
        raise_peak(&g_peak[cat], now);
        raise_peak(&g_total_peak, total);
    }
}

static int injected_failure(void) {
    atomic_fetch_add(&g_alloc_count, 1);
    long long n = atomic_load(&g_fail_countdown);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&g_fail_countdown, &n, n - 1)) return n == 1;
    }
    return 0;
}

/* Large blocks (arenas, folded weights) ask for transparent huge pages: a
 * fresh arena is otherwise faulted in 4 KiB at a time, which cost ~10% of a
 * Kokoro synthesis on the CPU (page faults + clearing, perf). Only the 2 MiB
 * aligned interior is advised; the kernel may ignore it (THP "never"). */
#define HUGE_MIN ((size_t)8 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)
static void huge_pages(unsigned char *base, size_t total) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (total < HUGE_MIN) return;
    uintptr_t lo = ((uintptr_t)base + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)base + total) & ~(HUGE_PAGE - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)base;
    (void)total;
#endif
}

void *choir_alloc(choir_mem_category cat, size_t size) {
    if ((unsigned)cat >= CHOIR_MEM_COUNT) cat = CHOIR_MEM_OTHER;
    if (size > SIZE_MAX - 2 * PREFIX) return NULL;
    if (injected_failure()) return NULL;
    size_t total = (size + PREFIX + CHOIR_ALIGN - 1) / CHOIR_ALIGN * CHOIR_ALIGN;
    unsigned char *base = aligned_alloc(CHOIR_ALIGN, total);
    if (!base) return NULL;
    huge_pages(base, total);
    block_header *h = (block_header *)(base + PREFIX - sizeof(block_header));
    h->size = size;
    h->category = (uint32_t)cat;
    h->magic = BLOCK_MAGIC;
    choir_mem_account(cat, (int64_t)size);
    return base + PREFIX;
}

void *choir_calloc(choir_mem_category cat, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = choir_alloc(cat, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

static block_header *header_of(void *p) {
    return (block_header *)((unsigned char *)p - sizeof(block_header));
}

void *choir_realloc(void *p, size_t size) {
    if (!p) return choir_alloc(CHOIR_MEM_OTHER, size);
    block_header *h = header_of(p);
    void *q = choir_alloc((choir_mem_category)h->category, size);
    if (!q) return NULL;
    memcpy(q, p, h->size < size ? h->size : size);
    choir_free(p);
    return q;
}

char *choir_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = choir_alloc(CHOIR_MEM_OTHER, n);
    if (d) memcpy(d, s, n);
    return d;
}

void choir_free(void *p) {
    if (!p) return;
    block_header *h = header_of(p);
    if (h->magic != BLOCK_MAGIC) abort(); /* not ours, or freed twice: a bug */
    h->magic = 0;
    choir_mem_account((choir_mem_category)h->category, -(int64_t)h->size);
    free((unsigned char *)p - PREFIX);
}

int64_t choir_mem_current(choir_mem_category cat) {
    if (cat == CHOIR_MEM_COUNT) return atomic_load(&g_total_current);
    if ((unsigned)cat > CHOIR_MEM_COUNT) return 0;
    return atomic_load(&g_current[cat]);
}

int64_t choir_mem_peak(choir_mem_category cat) {
    if (cat == CHOIR_MEM_COUNT) return atomic_load(&g_total_peak);
    if ((unsigned)cat > CHOIR_MEM_COUNT) return 0;
    return atomic_load(&g_peak[cat]);
}

void choir_mem_reset_peaks(void) {
    for (int i = 0; i < CHOIR_MEM_COUNT; i++) atomic_store(&g_peak[i], atomic_load(&g_current[i]));
    atomic_store(&g_total_peak, atomic_load(&g_total_current));
}

const char *choir_mem_category_name(choir_mem_category cat) {
    static const char *names[] = {"other", "weights", "activations", "io", "cache", "total"};
    return (unsigned)cat <= CHOIR_MEM_COUNT ? names[cat] : "?";
}

int64_t choir_alloc_fail_after(int64_t n) {
    atomic_store(&g_fail_countdown, n > 0 ? n : 0);
    return atomic_exchange(&g_alloc_count, 0);
}
