/* hh_platform.h -- the OS seam: virtual memory, clock, thread id, locks.
 * Every mmap/munmap/madvise of the library goes through here, so the test
 * fault injector (hh_meta.h) can make them fail. */
#ifndef HH_PLATFORM_H
#define HH_PLATFORM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hh_compiler.h"
#include "hh_config.h"

/* OS page size in bytes (cached after the first call). */
HH_INTERNAL size_t hhi_os_page_size(void);
/* 64 bits from the kernel's random source, or the clock if it has none
   (callers mix in what else they have). Neither reads the clock nor calls sysconf:
   the malloc shim calls both at load, and each libc function a process
   would not call otherwise faults in a 64 KiB window of libc's text. */
HH_INTERNAL uint64_t hhi_os_entropy(void);

/* Maps size bytes (rounded up to pages) of zeroed read/write memory aligned to
   `align` (a power of two >= page size, or 0 for page alignment). NULL on failure
   (OS refusal or injected fault); never reports through the error handler. */
HH_INTERNAL void *hhi_os_map(size_t size, size_t align);
/* As hhi_os_map, but the address `skew` bytes into the mapping is the one
   aligned to `align` (a power of two; skew counts modulo align): a block
   whose header sits below its aligned start gets one mapping of exactly its
   size, usually from one mmap, rather than an over-mapping trimmed at both
   ends. NULL on failure. */
HH_INTERNAL void *hhi_os_map_skewed(size_t size, size_t align, size_t skew);
/* Reserves size bytes of address space (rounded up to pages) aligned as for
   hhi_os_map, committing nothing: no access, or read-only zero pages when
   `readable`. NULL on failure (OS refusal or injected fault). Unmap with hhi_os_unmap. */
HH_INTERNAL void *hhi_os_reserve(size_t size, size_t align, bool readable);
/* Commits [p, p+size) of a reservation: read/write, zero until written. p and
   size page-aligned. false if the OS refuses (or an injected fault): nothing changed. */
HH_INTERNAL bool  hhi_os_commit(void *p, size_t size);
/* on: asks for transparent huge pages on [p, p+size) (p page-aligned);
   off: takes that back (the range's next faults map 4 KiB pages, not 2 MiB
   ones). A hint, silently ignored where the OS has none or refuses. */
HH_INTERNAL void  hhi_os_hugepages(void *p, size_t size, bool on);
/* Unmaps what hhi_os_map returned; size as passed to hhi_os_map. */
HH_INTERNAL void  hhi_os_unmap(void *p, size_t size);
/* munmap alone, for a mapping no tool annotation (hh_track_*) ever touched:
   hhi_os_unmap's un-poisoning first costs memcheck with --track-origins
   time in proportion to the size (the heap's 128 MiB slot reservation). */
HH_INTERNAL void  hhi_os_unmap_untracked(void *p, size_t size);
/* Moves the pages of the mapping [from, from+size) to [to, to+size), which
   must be part of another mapping (replaced): page tables move, no byte is
   copied and no page faults again. from is unmapped after. false if the OS
   refused (nothing changed). */
HH_INTERNAL bool  hhi_os_move(void *from, size_t size, void *to);
/* Gives [p, p+size) back to the OS (MADV_DONTNEED: it reads as zero later).
   p and size must be page-aligned. false if the call failed (nothing lost). */
HH_INTERNAL bool  hhi_os_decommit(void *p, size_t size);

/* Monotonic clock in nanoseconds. */
HH_INTERNAL uint64_t hhi_now_ns(void);
#if HH_TESTING
/* Test hook: when nonzero, hhi_now_ns is a virtual clock that advances by
   this many ns at every call, so a test can assert how much work a budgeted
   call did without timing anything. 0: the real clock. */
HH_INTERNAL void hhi_test_clock_step(uint64_t step_ns);
/* mmap calls made by hhi_os_map/hhi_os_reserve, and munmap calls of the
   platform layer, made by the calling thread so far (HHI_TEST_COUNT_HERE). */
HH_INTERNAL _Thread_local uint64_t hhi_test_os_maps_here, hhi_test_os_unmaps_here;
/* hhi_os_decommit calls (madvise) made by the calling thread so far. */
HH_INTERNAL _Thread_local uint64_t hhi_test_os_decommits_here;
/* Called first in every hhi_os_decommit (not when NULL): a test looks at
   what is locked while memory goes back. */
typedef void (*hhi_test_decommit_hook)(void *p, size_t size);
HH_INTERNAL _Atomic(hhi_test_decommit_hook) hhi_test_os_decommit_hook;
#endif

/* Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown. */
HH_INTERNAL size_t hhi_os_rss_bytes(void);

/* Mutex used for heap/global locks. Never fails after init on Linux. */
typedef struct hhi_lock { pthread_mutex_t m; } hhi_lock;
HH_INTERNAL void hhi_lock_init(hhi_lock *l);
HH_INTERNAL void hhi_lock_destroy(hhi_lock *l);
static inline void hhi_lock_acquire(hhi_lock *l) { pthread_mutex_lock(&l->m); }
static inline void hhi_lock_release(hhi_lock *l) { pthread_mutex_unlock(&l->m); }

#endif /* HH_PLATFORM_H */
