/* choir/parse.h: the one parser of sizes and bounded numbers that every
 * command-line flag and engine option goes through, so that "8G" means the same
 * bytes and "--max-batch 65" the same refusal wherever it is typed. */
#ifndef CHOIR_PARSE_H
#define CHOIR_PARSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a byte size: a non-negative decimal number, optionally followed by a
 * binary unit K, M, G or T (any case, powers of 1024), optionally followed by
 * "i" and then by "B" or "b". So "8G", "8Gi", "8GiB", "8gb", "1.5G", "512MiB",
 * "1000000" and "100B" are sizes; "8 G", "-1", "8X", "8iB", "" are not.
 * Fractions are rounded to the nearest byte. Returns 0 and sets *out, or
 * CHOIR_EINVAL for a malformed size or one above INT64_MAX (*out untouched). */
int choir_parse_size(const char *s, int64_t *out);

/* Parses a decimal number (strtod syntax, nothing after it) within [lo, hi];
 * with `whole` set it must also be an integer. Returns 0 and sets *out, or
 * CHOIR_EINVAL (*out untouched). NaN is never accepted. */
int choir_parse_number(const char *s, double lo, double hi, int whole, double *out);

/* Parses a whole number 0..2^64-1 exactly (seeds): decimal, or hex after
 * "0x"; no sign, no spaces, nothing after it. Returns 0 and sets *out, or
 * CHOIR_EINVAL (*out untouched). */
int choir_parse_u64(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
