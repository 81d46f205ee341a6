/* Internal to src/audio: a structural check of an Ogg Vorbis stream's three
 * header packets, run before a decoder sees the bytes.
 *
 * Streams whose header pages are missing, cut short or fail their CRC are
 * refused here with a message that says so (libvorbisfile would report only
 * "not Vorbis data"). Headers that are intact but semantically bad go on to
 * libvorbisfile, which refuses them cleanly (libsndfile leaked ~6 kB on each;
 * see vorbis_read.h). */
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
