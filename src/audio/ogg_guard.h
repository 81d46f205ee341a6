/* Internal to src/audio: a structural check of an Ogg Vorbis stream's three
 * header packets, run before libsndfile sees the bytes.
 *
 * libsndfile 1.2 leaks its vorbis_info (about 6 kB) whenever it fails to read
 * Vorbis headers, so a server fed truncated or damaged uploads would leak on
 * every request. Refusing such streams up front (missing header packets, a
 * page whose CRC does not match) keeps those bytes away from it. Headers that
 * are intact but semantically bad still reach libsndfile. */
#ifndef CHOIR_AUDIO_OGG_GUARD_H
#define CHOIR_AUDIO_OGG_GUARD_H

#include <stddef.h>

typedef enum ogg_guard_verdict {
    OGG_GUARD_PASS = 0,   /* not Ogg Vorbis, or its headers are whole */
    OGG_GUARD_BROKEN = 1, /* Ogg Vorbis whose headers are truncated or damaged */
    OGG_GUARD_UNSURE = 2  /* the prefix ended before the headers did */
} ogg_guard_verdict;

/* Looks at the first `len` bytes of a stream; `complete` says whether they
 * are the whole stream (so running out means truncation). */
ogg_guard_verdict choir_ogg_vorbis_guard(const unsigned char *data, size_t len, int complete);

#endif
