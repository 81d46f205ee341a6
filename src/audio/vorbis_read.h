/* Internal to src/audio: Ogg Vorbis through libvorbisfile.
 *
 * libsndfile 1.2 leaks its vorbis_info (about 6 kB) whenever Vorbis headers
 * fail to parse, and an attacker can make intact-looking headers (right
 * packet types, right CRCs) that do. libvorbisfile clears everything it made
 * on every failure path, and it tells the exact length of a seekable stream
 * (from the last page's granule position), so Vorbis goes through it. */
#ifndef CHOIR_AUDIO_VORBIS_READ_H
#define CHOIR_AUDIO_VORBIS_READ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "choir/error.h"

typedef struct vorbis_reader vorbis_reader;

/* 1 when the bytes start an Ogg stream whose first packet is a Vorbis
 * identification header. */
int vorbis_reader_detect(const unsigned char *data, size_t len);

/* Opens a stream held in memory (borrowed until close) or an open file
 * (borrowed, read from its start). NULL and err (CHOIR_EFORMAT for a stream
 * libvorbisfile refuses, CHOIR_EUNSUPPORTED for chained streams whose links
 * differ in rate or channels, CHOIR_ENOMEM) on failure. */
vorbis_reader *vorbis_reader_open_memory(const void *data, size_t len, choir_err *err);
vorbis_reader *vorbis_reader_open_file(FILE *f, choir_err *err);

int vorbis_reader_rate(const vorbis_reader *r);
int vorbis_reader_channels(const vorbis_reader *r);
/* The stream's length in frames, or -1 when libvorbisfile cannot tell. */
int64_t vorbis_reader_frames(const vorbis_reader *r);

/* Reads up to `max` frames, interleaved, into `out`. Returns the frames read
 * (0 at the end of the stream) or a negative code with err (CHOIR_EFORMAT
 * for corrupt audio packets). */
int64_t vorbis_reader_read(vorbis_reader *r, float *out, int64_t max, choir_err *err);

/* NULL is a no-op. */
void vorbis_reader_close(vorbis_reader *r);

#endif
