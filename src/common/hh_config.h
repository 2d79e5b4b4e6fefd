/* hh_config.h -- every compile-time knob of hheap, in one place.
 *
 *   HH_DEBUG            0 release (default): no assertions.
 *                       1 hh_assert: cheap preconditions on our own invariants.
 *                       2 + hh_assert_internal: internal state.
 *                       3 + hh_assert_expensive: whole-structure checks (heap walk
 *                         at the start and end of every mutation).
 *   HH_TRACK_VALGRIND   1: memcheck mempool client requests (needs valgrind headers).
 *   HH_TRACK_ASAN       1: AddressSanitizer manual poisoning (build with -fsanitize=address).
 *   HH_TESTING          1: test seam (fault injection countdown, test-only hooks).
 */
#ifndef HH_CONFIG_H
#define HH_CONFIG_H

#ifndef HH_DEBUG
#  define HH_DEBUG 0
#endif
#ifndef HH_TRACK_VALGRIND
#  define HH_TRACK_VALGRIND 0
#endif
#ifndef HH_TRACK_ASAN
#  define HH_TRACK_ASAN 0
#endif
#ifndef HH_TESTING
#  define HH_TESTING 0
#endif
/* Counts an event in a test-only counter (an _Atomic uint64_t that exists
   under HH_TESTING only; the caller includes <stdatomic.h>). _HERE: the same
   for a _Thread_local counter, what the calling thread did. */
#if HH_TESTING
#  define HHI_TEST_COUNT(c) atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)
#  define HHI_TEST_COUNT_HERE(c) ((void)(c)++)
#else
#  define HHI_TEST_COUNT(c) ((void)0)
#  define HHI_TEST_COUNT_HERE(c) ((void)0)
#endif

#if HH_DEBUG < 0 || HH_DEBUG > 3
#  error "HH_DEBUG must be 0..3"
#endif
#if HH_TRACK_VALGRIND && HH_TRACK_ASAN
#  error "HH_TRACK_VALGRIND and HH_TRACK_ASAN exclude each other: memcheck cannot run an ASan binary"
#endif

/* Debug fill bytes: allocated-uninitialised, freed, moved-from, guard. */
#ifndef HH_FILL_ALLOC
#  define HH_FILL_ALLOC 0xA5
#endif
#ifndef HH_FILL_FREED
#  define HH_FILL_FREED 0xDF
#endif
#ifndef HH_FILL_MOVED
#  define HH_FILL_MOVED 0xDB
#endif
#ifndef HH_FILL_GUARD
#  define HH_FILL_GUARD 0xBD
#endif

#endif /* HH_CONFIG_H */
