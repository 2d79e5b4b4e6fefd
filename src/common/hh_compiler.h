/* hh_compiler.h -- compiler attributes and small helpers used everywhere. */
#ifndef HH_COMPILER_H
#define HH_COMPILER_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#  define hh_likely(x)    __builtin_expect(!!(x), 1)
#  define hh_unlikely(x)  __builtin_expect(!!(x), 0)
#  define HH_NOINLINE     __attribute__((noinline))
#  define HH_INLINE       static inline __attribute__((always_inline))
#  define HH_COLD         __attribute__((cold))
#  define HH_NORETURN     __attribute__((noreturn))
#  define HH_INTERNAL     __attribute__((visibility("hidden"))) extern
#  define HH_PRINTF(f, a) __attribute__((format(printf, f, a)))
#  define HH_UNUSED       __attribute__((unused))
/* Prefetch hints (no fault, whatever the address): for reading, with little
   reuse expected; for writing, to be kept. */
#  define HH_PREFETCH(p)   __builtin_prefetch((p), 0, 1)
#  define HH_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#else
#  define hh_likely(x)    (x)
#  define hh_unlikely(x)  (x)
#  define HH_NOINLINE
#  define HH_INLINE       static inline
#  define HH_COLD
#  define HH_NORETURN     _Noreturn
#  define HH_INTERNAL     extern
#  define HH_PRINTF(f, a)
#  define HH_UNUSED
#  define HH_PREFETCH(p)   ((void)(p))
#  define HH_PREFETCH_W(p) ((void)(p))
#endif

#define HH_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define HH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HH_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline int hh_is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }
/* Rounds x up to a multiple of a (a power of two). Caller checks overflow. */
static inline size_t hh_align_up(size_t x, size_t a) { return (x + (a - 1)) & ~(a - 1); }
static inline uintptr_t hh_align_up_ptr(uintptr_t x, uintptr_t a) { return (x + (a - 1)) & ~(a - 1); }
/* Index of the lowest / highest set bit; x must be non-zero. */
static inline unsigned hh_ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }
static inline unsigned hh_clz64(uint64_t x) { return (unsigned)__builtin_clzll(x); }
static inline unsigned hh_fls64(uint64_t x) { return 63u - hh_clz64(x); }

#endif /* HH_COMPILER_H */
