/* Audio "bombs" made on the spot: small uploads that decode to a great deal
 * of audio, as an attacker would send them. Nothing is committed; every test
 * makes what it needs in memory. */
#ifndef CHOIR_TEST_BOMBS_H
#define CHOIR_TEST_BOMBS_H

#include <stddef.h>
#include <stdint.h>

/* An Ogg Vorbis stream of `seconds` of silence at `rate` Hz, mono: the
 * encoder's steady-state packet for silence repeated with consistent granule
 * positions, so libvorbis decodes every frame (a 4-hour stream at 16 kHz is
 * a few MB). malloc'd; NULL on failure. */
unsigned char *bomb_vorbis_silence(double seconds, int rate, size_t *len);

/* A 16-bit mono WAV whose header claims `rate` Hz (1 for the 1-Hz bomb),
 * holding `frames` samples of a ramp. malloc'd. */
unsigned char *bomb_wav(int rate, int64_t frames, size_t *len);

/* A short real Ogg Vorbis file (a 1-s tone at `rate`), for mutating. malloc'd. */
unsigned char *bomb_vorbis_tone(int rate, size_t *len);

/* Recomputes every Ogg page CRC in place, so that mutations pass the page
 * checks and reach the codec. */
void bomb_ogg_fix_crcs(unsigned char *data, size_t len);

#endif
