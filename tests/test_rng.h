/* test_rng.h -- the one pseudo-random generator of the tests, the benchmarks
 * and hh-demo: xorshift64* (Marsaglia's xorshift, multiplied out; written here,
 * header-only, no Check). Small, fast and good enough to drive workloads; not
 * for anything that needs statistical quality or secrecy.
 *
 * The sequences matter: hh-demo's dump and pictures, the benchmarks' work and
 * the tests' expectations are all derived from them, so hh_rng_next and the
 * helpers below must not change. A zero state would stay zero forever:
 * hh_rng_make never returns one, and callers that set .s themselves keep it
 * non-zero.
 */
#ifndef HH_TEST_RNG_H
#define HH_TEST_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct hh_rng { uint64_t s; } hh_rng;   /* the state; never 0 */

/* The next 64 random bits. */
static inline uint64_t hh_rng_next(hh_rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* A generator for seed: seed 0 gets a fixed non-zero state of its own. */
static inline hh_rng hh_rng_make(uint64_t seed) { return (hh_rng){ seed ? seed * 0x9E3779B97F4A7C15ULL + 1 : 0x1234567 }; }

/* Uniform-ish in [0, n) (modulo bias is irrelevant at these n); n > 0. */
static inline uint32_t hh_rng_below(hh_rng *r, uint32_t n) { return (uint32_t)(hh_rng_next(r) % n); }

/* In [lo, hi], both included; lo <= hi < UINT32_MAX. */
static inline uint32_t hh_rng_range(hh_rng *r, uint32_t lo, uint32_t hi) { return lo + (uint32_t)(hh_rng_next(r) % (hi - lo + 1)); }

/* True with probability p (53 random bits against p). */
static inline bool hh_rng_chance(hh_rng *r, double p) { return (double)(hh_rng_next(r) >> 11) * (1.0 / 9007199254740992.0) < p; }

#endif /* HH_TEST_RNG_H */
