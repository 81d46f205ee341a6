/* Helpers shared by the tests (cmocka). */
#ifndef CHOIR_TESTUTIL_H
#define CHOIR_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "choir/error.h"

/* Absolute path of ../shared/fixtures/<rel> (static buffer per call slot). */
const char *tu_fixture(const char *rel);
/* Path of a fresh, empty temporary directory for this test (removed at exit
 * unless CHOIR_KEEP_TMP is set). */
const char *tu_tmpdir(void);
/* Path `name` inside tu_tmpdir(). */
const char *tu_tmpfile(const char *name);
/* Deterministic pseudo-random floats in [lo, hi). */
void tu_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
/* ||a - b|| / max(||b||, tiny) */
double tu_rel_l2(const float *a, const float *b, size_t n);
double tu_max_abs_diff(const float *a, const float *b, size_t n);
/* Reads a whole file into memory (free with free()); NULL on failure. */
void *tu_read_file(const char *path, size_t *len);
int tu_write_file(const char *path, const void *data, size_t len);
/* Copies the file `from` to `to` byte for byte; fails the test on an error. */
void tu_copy_file(const char *from, const char *to);
/* Makes DIR/voices/af_heart.bin from the fixture's real Kokoro voice pack, as a
 * Kokoro model directory holds it; 0 on success. */
int tu_kokoro_voice_dir(const char *dir);
/* Writes the sam-tiny fixture's deterministic SAM-Audio checkpoint into DIR
 * and its t5-base stand-in (weights and tokenizer.json) into DIR/t5, as a
 * user's model directory holds them; 0 on success (else err says why). */
int tu_sam_tiny_dir(const char *dir, choir_err *err);
/* Runs a shell command, captures stdout into *out (free()), returns exit code. */
int tu_run(const char *cmd, char **out);

#endif
