// ctest: labels=audio timeout=300
/* Decoding what an attacker uploads.
 * - 10,000 malformed Ogg Vorbis uploads (bytes changed anywhere, page CRCs
 *   then fixed so that the damage reaches the codec) each fail cleanly or
 *   decode, and together grow the resident set by less than 5 MB (libsndfile
 *   leaked ~5.7 kB on each one whose headers libvorbis refused).
 * - A decode's output is allocated through the caller's allocator: once, at
 *   the exact size, when the header states the length (WAV, FLAC, Vorbis),
 *   so a budget can refuse a 4-hour bomb before one sample is decoded;
 *   growth by growth otherwise; the allocator's refusal ends the decode with
 *   its code and leaks nothing.
 * - A header claiming 1 Hz is refused, not resampled to 16 kHz (16000x).
 * - A cancel flag stops a long decode. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bombs.h"
#include "choir/alloc.h"
#include "choir/audio.h"
#include "testutil.h"

static long rss_kb(void)
{
    /* freed heap held by malloc is not a leak: give it back before looking */
    malloc_trim(0);
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f && fscanf(f, "%ld %ld", &pages, &res) != 2)
        res = 0;
    if (f)
        fclose(f);
    return res * 4;
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Offsets of the three header packets of a stream made by bomb_vorbis_tone:
 * the identification header alone on the first page, the comment and setup
 * headers starting on the second. */
static void header_offsets(const unsigned char *d, size_t n, size_t off[3])
{
    off[0] = 27 + (size_t)d[26];
    size_t page2 = off[0] + d[27];
    assert_true(page2 + 27 < n && memcmp(d + page2, "OggS", 4) == 0);
    unsigned segs = d[page2 + 26];
    off[1] = page2 + 27 + segs;
    size_t first = 0;
    for (unsigned s = 0; s < segs; s++) {
        first += d[page2 + 27 + s];
        if (d[page2 + 27 + s] < 255)
            break;
    }
    off[2] = off[1] + first;
    assert_int_equal(d[off[0]], 1);
    assert_int_equal(d[off[1]], 3);
    assert_int_equal(d[off[2]], 5);
}

/* One malformed upload: damage that keeps the Ogg framing intact (the CRCs
 * are fixed afterwards) so that it reaches the Vorbis decoder. Most classes
 * break a header field libvorbis checks; damage to the identification header
 * is what made libsndfile leak. */
static size_t mutate(unsigned char *m, size_t n, const size_t off[3], uint64_t *seed)
{
    size_t len = n;
    switch (rng(seed) % 10) {
    case 6:
    case 7:
    case 8:
    case 9:
    case 0: { /* identification header: version, channels, rate, block sizes or framing bit
               * (half of all uploads: each of these leaked in libsndfile) */
        static const int field[] = {7, 11, 12, 28, 29};
        int f = field[rng(seed) % 5];
        m[off[0] + f] = f == 7 ? (unsigned char)(1 + rng(seed) % 255) : f == 28 ? (unsigned char)(rng(seed) % 0x66) : 0;
        break;
    }
    case 1: /* comment header: a vendor length past the packet */
        m[off[1] + 7 + rng(seed) % 4] = 0xFF;
        break;
    case 2: /* setup header: a codebook's sync pattern or its first bytes */
        m[off[2] + 8 + rng(seed) % 12] ^= (unsigned char)(1 + rng(seed) % 255);
        break;
    case 3: /* the setup header cut short inside its page */
        memset(m + off[2] + 7 + rng(seed) % 64, 0, 64);
        break;
    case 4: /* anywhere */
        for (int k = 0; k < 8; k++)
            m[rng(seed) % n] = (unsigned char)rng(seed);
        break;
    default: /* truncated, then damaged */
        len = 60 + rng(seed) % (n - 60);
        m[rng(seed) % len] ^= 0x55;
        break;
    }
    bomb_ogg_fix_crcs(m, len);
    return len;
}

static void test_malformed_vorbis_does_not_leak(void **state)
{
    (void)state;
    size_t n, off[3];
    unsigned char *good = bomb_vorbis_tone(16000, &n);
    assert_non_null(good);
    header_offsets(good, n, off);
    unsigned char *m = malloc(n);
#ifdef CHOIR_SANITIZE
    const int uploads = 1500; /* LeakSanitizer checks every allocation at exit */
#else
    const int uploads = 10000;
#endif
    choir_decode_opts o = {.target_rate = 16000, .mono = 1};
    uint64_t seed = 0x5EED;
    int64_t mem0 = choir_mem_current(CHOIR_MEM_COUNT);
    long before = 0;
    int failed = 0;
    /* The first uploads raise malloc's high-water mark (a damaged setup
     * header may make libvorbis build large tables once); after those, a
     * leak would grow the resident set in proportion to the count. */
    for (int i = -200; i < uploads; i++) {
        if (i == 0)
            before = rss_kb();
        memcpy(m, good, n);
        size_t len = mutate(m, n, off, &seed);
        choir_audio a;
        choir_err err = {0};
        int rc = choir_audio_decode_memory(m, len, &o, &a, &err);
        if (rc < 0) {
            failed += i >= 0;
            assert_true(err.msg[0] != 0);
            assert_null(a.samples);
        } else {
            choir_audio_clear(&a);
        }
    }
    long grew = rss_kb() - before;
    print_message("%d malformed Vorbis uploads (%d refused): resident set %+ld kB\n", uploads, failed, grew);
    assert_true(failed > uploads / 2);
#ifndef CHOIR_SANITIZE
    /* (under ASan, freed memory sits in its quarantine; LeakSanitizer checks instead) */
    assert_true(grew < 5 * 1024);
#endif
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), mem0);
    free(m);
    free(good);
}

typedef struct ledger {
    int calls;
    size_t first, last, total;
    size_t refuse_over; /* refuse any block larger than this (0: never) */
} ledger;

static void *counting_alloc(void *user, size_t bytes, choir_err *err)
{
    ledger *l = user;
    l->calls++;
    if (!l->first)
        l->first = bytes;
    l->last = bytes;
    l->total += bytes;
    if (l->refuse_over && bytes > l->refuse_over) {
        choir_err_set(err, CHOIR_EBUSY, "%zu bytes do not fit now", bytes);
        return NULL;
    }
    return choir_alloc(CHOIR_MEM_IO, bytes);
}

static void test_output_allocated_through_the_caller(void **state)
{
    (void)state;
    /* A WAV with its length in the header: one block of exactly the output. */
    size_t n;
    unsigned char *wav = bomb_wav(8000, 40000, &n);
    ledger l = {0};
    choir_decode_opts o = {.target_rate = 16000, .mono = 1, .alloc = counting_alloc, .alloc_user = &l};
    choir_audio a;
    choir_err err = {0};
    assert_int_equal(choir_audio_decode_memory(wav, n, &o, &a, &err), 0);
    assert_int_equal(a.frames, 80000);
    assert_int_equal(l.calls, 1);
    assert_true(l.first >= 80000 * sizeof(float) && l.first <= 80004 * sizeof(float));
    choir_audio_clear(&a);

    /* The same file with a streaming writer's "unknown" data size grows in
     * steps, each through the allocator. */
    uint32_t unknown = 0xFFFFFFFFu;
    memcpy(wav + 40, &unknown, 4);
    memcpy(wav + 4, &unknown, 4);
    l = (ledger){0};
    assert_int_equal(choir_audio_decode_memory(wav, n, &o, &a, &err), 0);
    assert_int_equal(a.frames, 80000);
    assert_true(l.calls >= 1);
    choir_audio_clear(&a);
    free(wav);

    /* Four hours of Vorbis silence in a few MB: the allocator is asked for
     * the whole 0.9 GB at once, before decoding, and its refusal is final. */
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    unsigned char *bomb = bomb_vorbis_silence(4 * 3600.0, 16000, &n);
    assert_non_null(bomb);
    print_message("4-hour Vorbis bomb: %zu bytes, made in %.2f s\n", n, (double)clock() / CLOCKS_PER_SEC - t0);
    assert_true(n < 25u << 20);
    l = (ledger){.refuse_over = 64u << 20};
    int64_t mem0 = choir_mem_current(CHOIR_MEM_COUNT);
    t0 = (double)clock() / CLOCKS_PER_SEC;
    err = (choir_err){0};
    assert_int_equal(choir_audio_decode_memory(bomb, n, &o, &a, &err), CHOIR_EBUSY);
    print_message("refused in %.3f s: %s\n", (double)clock() / CLOCKS_PER_SEC - t0, err.msg);
    assert_int_equal(l.calls, 1);
    assert_true(l.first >= (size_t)4 * 3600 * 16000 * sizeof(float));
    assert_non_null(strstr(err.msg, "do not fit now"));
    assert_null(a.samples);
    assert_int_equal(choir_mem_current(CHOIR_MEM_COUNT), mem0);

    /* The length cap refuses it from the header alone, without asking. */
    l = (ledger){0};
    o.max_frames = (int64_t)3600 * 16000;
    assert_int_equal(choir_audio_decode_memory(bomb, n, &o, &a, &err), CHOIR_ETOOBIG);
    assert_int_equal(l.calls, 0);
    assert_non_null(strstr(err.msg, "14400.0 s long"));
    free(bomb);

    /* A short real stream decodes through the allocator in one block. */
    bomb = bomb_vorbis_silence(3.0, 16000, &n);
    l = (ledger){0};
    o.max_frames = 0;
    assert_int_equal(choir_audio_decode_memory(bomb, n, &o, &a, &err), 0);
    assert_true(fabs((double)a.frames - 48000) < 2048);
    assert_int_equal(l.calls, 1);
    for (int64_t i = 0; i < a.frames; i++)
        assert_true(fabsf(a.samples[i]) < 1e-3f);
    choir_audio_clear(&a);
    free(bomb);
}

static void test_absurd_rates_refused(void **state)
{
    (void)state;
    /* 20 kB claiming 1 Hz: 10,000 s of audio, 160 M frames at 16 kHz. */
    size_t n;
    unsigned char *wav = bomb_wav(1, 10000, &n);
    ledger l = {0};
    choir_decode_opts o = {.target_rate = 16000, .mono = 1, .alloc = counting_alloc, .alloc_user = &l};
    choir_audio a;
    choir_err err = {0};
    assert_int_equal(choir_audio_decode_memory(wav, n, &o, &a, &err), CHOIR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "1 Hz"));
    assert_int_equal(l.calls, 0);
    free(wav);
    /* the lowest accepted rate, upsampled 16x: memory stays one block */
    wav = bomb_wav(1000, 2000, &n);
    int64_t peak0 = (choir_mem_reset_peaks(), choir_mem_peak(CHOIR_MEM_COUNT));
    assert_int_equal(choir_audio_decode_memory(wav, n, &o, &a, &err), 0);
    assert_int_equal(a.frames, 32000);
    /* output + input block + resampler scratch, not 16 x 4096 frames of it */
    int64_t used = choir_mem_peak(CHOIR_MEM_COUNT) - peak0;
    print_message("1 kHz -> 16 kHz: %lld bytes at the peak for %lld output bytes\n", (long long)used,
                  (long long)(a.frames * 4));
    assert_true(used < a.frames * 4 + (1 << 20));
    choir_audio_clear(&a);
    free(wav);
}

static void test_cancel(void **state)
{
    (void)state;
    size_t n;
    unsigned char *bomb = bomb_vorbis_silence(600.0, 16000, &n);
    int stop = 1;
    choir_decode_opts o = {.target_rate = 16000, .mono = 1, .cancel = &stop};
    choir_audio a;
    choir_err err = {0};
    assert_int_equal(choir_audio_decode_memory(bomb, n, &o, &a, &err), CHOIR_ECANCELED);
    assert_null(a.samples);
    stop = 0;
    assert_int_equal(choir_audio_decode_memory(bomb, n, &o, &a, &err), 0);
    assert_true(a.frames > 599 * 16000);
    choir_audio_clear(&a);
    free(bomb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_vorbis_does_not_leak),
        cmocka_unit_test(test_output_allocated_through_the_caller),
        cmocka_unit_test(test_absurd_rates_refused),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
