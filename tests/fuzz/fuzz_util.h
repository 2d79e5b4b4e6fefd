/* fuzz_util.h -- shared pieces of the libFuzzer harnesses (tests/fuzz/fuzz_*.c):
 * a byte reader that decodes an operation stream from the input, a failure
 * macro that works without Check (abort, so libFuzzer saves the input), an
 * error handler that counts instead of printing, and the byte patterns of the
 * shadow models. Every harness is also compiled without libFuzzer into a replay
 * program (tests/fuzz/replay.c) that `make check` runs over the committed corpora. */
#ifndef HH_FUZZ_UTIL_H
#define HH_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/testing.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hheap/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A failed expectation is a finding: say what and where, then abort so that
   libFuzzer records the input (and the replay program fails). */
#define FZ_CHECK(cond, ...)                                                          \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: FUZZ CHECK FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* Known bugs (listed in tests/fuzz/README.md, with reproducers): a harness that
   meets one fails like any other check -- all of them are fixed in the tree.
   While an owner works on a newly found one, FUZZ_STRICT=0 in the environment
   makes the harness print it once and go on, so fuzzing can look for others. */
static inline bool fz_strict(void) {
    const char *e = getenv("FUZZ_STRICT");
    return e == NULL || *e != '0';
}
#define FZ_KNOWN_BUG(name, ...)                                                      \
    do {                                                                             \
        static bool told_;                                                           \
        FZ_CHECK(!fz_strict(), "known bug %s (FUZZ_STRICT=0 tolerates it)", name);  \
        if (!told_) {                                                                \
            told_ = true;                                                            \
            fprintf(stderr, "%s:%d: KNOWN BUG %s: ", __FILE__, __LINE__, name);      \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
        }                                                                            \
    } while (0)

/* Input cursor: reads past the end give zeros, so every input decodes. */
typedef struct fz_in { const uint8_t *p; size_t n, i; } fz_in;
static inline bool     fz_more(const fz_in *in) { return in->i < in->n; }
static inline uint8_t  fz_u8(fz_in *in) { return in->i < in->n ? in->p[in->i++] : 0; }
static inline uint16_t fz_u16(fz_in *in) { uint16_t a = fz_u8(in); return (uint16_t)(a | (uint16_t)(fz_u8(in) << 8)); }
static inline uint32_t fz_u32(fz_in *in) { uint32_t a = fz_u16(in); return a | ((uint32_t)fz_u16(in) << 16); }

/* Errors are expected (bad handles, bad frees ...): count them, remember the
   last one; the harness asserts the exact status where it knows it. */
typedef struct fz_errors { unsigned count; hh_status last; } fz_errors;
static fz_errors fz_err;
static inline void fz_on_error(hh_status s, const char *message, void *user) {
    (void)message; (void)user;
    fz_err.count++;
    fz_err.last = s;
}
static inline void fz_errors_reset(void) { fz_err.count = 0; fz_err.last = HH_OK; hh_clear_last_error(); }

/* Byte pattern of (key, i): byte i%8 of the word w(i/8) = mix(key, i/8). It is
   position-dependent, so a shifted or partially copied block is caught; fill and
   verify work a word at a time (the harnesses check every live byte after every
   operation, so this loop is their hot path). */
static inline uint64_t fz_word(uint64_t key, size_t w) {
    uint64_t x = (key ^ (uint64_t)w * 0x9E3779B97F4A7C15ULL) * 0xBF58476D1CE4E5B9ULL;
    return x ^ (x >> 29);
}
static inline uint8_t fz_pat(uint64_t key, size_t i) { return (uint8_t)(fz_word(key, i / 8) >> (8 * (i % 8))); }
static inline void fz_fill(void *p, size_t n, uint64_t key) {
    uint8_t *b = p;
    size_t w = 0;
    for (; (w + 1) * 8 <= n; w++) {
        uint64_t v = fz_word(key, w);
        for (int k = 0; k < 8; k++) b[w * 8 + (size_t)k] = (uint8_t)(v >> (8 * k));
    }
    for (size_t i = w * 8; i < n; i++) b[i] = fz_pat(key, i);
}
/* Index of the first wrong byte, or -1. */
static inline long fz_verify(const void *p, size_t n, uint64_t key) {
    const uint8_t *b = p;
    size_t w = 0;
    for (; (w + 1) * 8 <= n; w++) {
        uint64_t v = fz_word(key, w), got;
        memcpy(&got, b + w * 8, 8);                 /* one (possibly unaligned) load */
        if (got != v) break;                        /* little-endian; elsewhere the byte loop decides */
    }
    for (size_t i = w * 8; i < n; i++)
        if (b[i] != fz_pat(key, i)) return (long)i;
    return -1;
}

#endif /* HH_FUZZ_UTIL_H */
