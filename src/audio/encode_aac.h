/* AAC-LC in an ADTS stream through libavcodec's native encoder (encode.c's
 * CHOIR_FORMAT_AAC). ADTS frames are self-delimiting, as MP3's are, so a
 * stream can be played from its first frame and cut anywhere between frames. */
#ifndef CHOIR_ENCODE_AAC_H
#define CHOIR_ENCODE_AAC_H

#include <stdint.h>

#include "choir/encode.h"

typedef struct choir_aac choir_aac;

/* rate: one of ADTS's 13 sampling rates (7350..96000 Hz); channels 1..6.
 * Bytes go to write(data, len, user); a non-zero return there makes the call
 * that triggered it fail with CHOIR_EIO. NULL and err on a bad rate or channel
 * count (CHOIR_EUNSUPPORTED), codec set-up failure or out of memory. */
choir_aac *choir_aac_create(int rate, int channels, choir_write_fn write, void *user, choir_err *err);
/* Encodes `frames` interleaved frames (any number: whole codec frames of 1024
 * go out as they fill). 0 or a negative code. */
int choir_aac_write(choir_aac *a, const float *interleaved, int64_t frames, choir_err *err);
/* Encodes what is buffered (zero-padded) and drains the codec. */
int choir_aac_finish(choir_aac *a, choir_err *err);
void choir_aac_free(choir_aac *a);

#endif
