/* Unicode properties for the tokenizers (src/text/unicode*.c): general
 * categories, canonical combining classes and NFC / NFD normalisation, from
 * the generated tables (tools/gen_unicode_tables.py, Unicode 14.0.0).
 *
 * Text is handled as arrays of code points. A byte that is not part of valid
 * UTF-8 is carried as UNI_RAW_BYTE(b), a value above U+10FFFF that has
 * category Cn, combining class 0, never decomposes or composes, and turns back
 * into the byte itself when re-encoded: broken input survives unchanged. */
#ifndef CHOIR_UNICODE_INTERNAL_H
#define CHOIR_UNICODE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define UNI_RAW_BYTE(b) (0x110000u + (uint32_t)(b))
#define UNI_IS_RAW(cp) ((cp) >= 0x110000u && (cp) < 0x110100u)

/* General categories, in the order of the generator's CATS list. */
typedef enum uni_cat {
    UNI_CN = 0, UNI_LU, UNI_LL, UNI_LT, UNI_LM, UNI_LO, UNI_MN, UNI_MC, UNI_ME, UNI_ND, UNI_NL,
    UNI_NO, UNI_PC, UNI_PD, UNI_PS, UNI_PE, UNI_PI, UNI_PF, UNI_PO, UNI_SM, UNI_SC, UNI_SK,
    UNI_SO, UNI_ZS, UNI_ZL, UNI_ZP, UNI_CC, UNI_CF, UNI_CS, UNI_CO, UNI_CAT_COUNT
} uni_cat;

/* Bit masks of category groups (1u << cat), as \p{L}, \p{N} ... use them. */
#define UNI_MASK(c) (1u << (unsigned)(c))
#define UNI_GROUP_L (UNI_MASK(UNI_LU) | UNI_MASK(UNI_LL) | UNI_MASK(UNI_LT) | UNI_MASK(UNI_LM) | UNI_MASK(UNI_LO))
#define UNI_GROUP_M (UNI_MASK(UNI_MN) | UNI_MASK(UNI_MC) | UNI_MASK(UNI_ME))
#define UNI_GROUP_N (UNI_MASK(UNI_ND) | UNI_MASK(UNI_NL) | UNI_MASK(UNI_NO))
#define UNI_GROUP_P                                                                              \
    (UNI_MASK(UNI_PC) | UNI_MASK(UNI_PD) | UNI_MASK(UNI_PS) | UNI_MASK(UNI_PE) | UNI_MASK(UNI_PI) | \
     UNI_MASK(UNI_PF) | UNI_MASK(UNI_PO))
#define UNI_GROUP_S (UNI_MASK(UNI_SM) | UNI_MASK(UNI_SC) | UNI_MASK(UNI_SK) | UNI_MASK(UNI_SO))
#define UNI_GROUP_Z (UNI_MASK(UNI_ZS) | UNI_MASK(UNI_ZL) | UNI_MASK(UNI_ZP))
#define UNI_GROUP_C                                                                              \
    (UNI_MASK(UNI_CC) | UNI_MASK(UNI_CF) | UNI_MASK(UNI_CS) | UNI_MASK(UNI_CO) | UNI_MASK(UNI_CN))

/* Generated tables. Category runs: (first << 5) | category, one per maximal
 * run of equal category from U+0000. Combining-class runs: (first << 8) | ccc.
 * Decompositions: {cp, first, second or 0}, sorted by cp. Compositions:
 * {first, second, composite}, sorted by (first, second). */
extern const uint32_t uni_category_runs[];
extern const int uni_category_runs_count;
extern const uint32_t uni_ccc_runs[];
extern const int uni_ccc_runs_count;
extern const uint32_t uni_decomp[][3];
extern const int uni_decomp_count;
extern const uint32_t uni_comp[][3];
extern const int uni_comp_count;

uni_cat uni_category(uint32_t cp);
int uni_ccc(uint32_t cp);
/* Unicode White_Space, which is what \s means in the tokenizers' patterns. */
int uni_is_space(uint32_t cp);

/* Decodes len bytes of UTF-8 into out[] (room for len code points), invalid
 * bytes as UNI_RAW_BYTE; returns the count. `offs`, when not NULL, receives
 * the byte offset of each code point (room for len). */
size_t uni_decode_utf8(const uint8_t *s, size_t len, uint32_t *out, uint32_t *offs);
/* Encodes one code point (or raw byte) into out[0..4); returns its length. */
int uni_encode_utf8(uint32_t cp, uint8_t out[4]);

/* Canonical normalisation of cp[0..n) into out, which has room for `cap`
 * code points (NFD can grow text: 4 * n is always enough; NFC never needs
 * more than NFD). Returns the length, or -1 when cap is too small. */
int64_t uni_nfd(const uint32_t *cp, size_t n, uint32_t *out, size_t cap);
int64_t uni_nfc(const uint32_t *cp, size_t n, uint32_t *out, size_t cap);
/* 1 when NFC would leave cp[0..n) as it is, decided cheaply (no code point
 * that could decompose, reorder or compose); 0 means "maybe not". */
int uni_nfc_quick(const uint32_t *cp, size_t n);

#endif
