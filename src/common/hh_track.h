/* hh_track.h -- every Valgrind and ASan annotation goes through here.
 *
 * Use each as a statement. With HH_TRACK_VALGRIND=1 these are memcheck mempool client requests (cheap
 * no-ops when not running under Valgrind); with HH_TRACK_ASAN=1 they poison /
 * unpoison shadow memory; otherwise they compile to nothing.
 *
 *   hh_track_pool_create(pool, base)   a new pool; `pool` is any stable address
 *   hh_track_pool_destroy(pool)
 *   hh_track_alloc(pool, p, size)      chunk [p, p+size) handed out (undefined)
 *   hh_track_alloc_defined(pool,p,size) chunk handed out with defined contents
 *   hh_track_free(pool, p, size)       chunk [p, p+size) returned (no access)
 *   hh_track_move(pool, old, new, size) chunk moved and/or resized
 *   hh_track_trim(pool, p, size)       all chunks outside [p, p+size) freed (LIFO mass free)
 *   hh_track_defined(p, size)          bytes become readable+defined (our metadata)
 *   hh_track_undefined(p, size)        bytes become accessible but undefined
 *   hh_track_noaccess(p, size)         bytes become inaccessible
 *   hh_track_peek_u64(p)               the aligned 8-byte word at p, which
 *                                      the tools may see as undefined or
 *                                      no-access and another thread may be
 *                                      writing (a word of a user's block,
 *                                      for a walk): no tool sees the read or
 *                                      changes what it knows of the word;
 *                                      the value is the old or the new one
 *   hh_track_quiet_begin() / hh_track_quiet_end()
 *                                      memcheck reports nothing on this thread
 *                                      between the two (a lock-free word that
 *                                      another thread may close meanwhile)
 *   HH_TRACK_UNCHECKED                 on a small function whose accesses ASan
 *                                      must not check (the same words)
 */
#ifndef HH_TRACK_H
#define HH_TRACK_H

#include "hh_config.h"
#include <stdint.h>

#if HH_TRACK_VALGRIND
#  include <valgrind/memcheck.h>
/* Client requests are statements (do/while), so every macro here is one too. */
#  define hh_track_pool_create(pool, base)  do { (void)(base); VALGRIND_CREATE_MEMPOOL((pool), 0, 0); } while (0)
#  define hh_track_pool_destroy(pool)       do { VALGRIND_DESTROY_MEMPOOL((pool)); } while (0)
#  define hh_track_alloc(pool, p, size)     do { VALGRIND_MEMPOOL_ALLOC((pool), (p), (size)); } while (0)
#  define hh_track_alloc_defined(pool, p, size) \
      do { VALGRIND_MEMPOOL_ALLOC((pool), (p), (size)); VALGRIND_MAKE_MEM_DEFINED((p), (size)); } while (0)
#  define hh_track_free(pool, p, size)      do { (void)(size); VALGRIND_MEMPOOL_FREE((pool), (p)); } while (0)
#  define hh_track_move(pool, old, new_, size) do { VALGRIND_MEMPOOL_CHANGE((pool), (old), (new_), (size)); } while (0)
#  define hh_track_trim(pool, p, size)      do { VALGRIND_MEMPOOL_TRIM((pool), (p), (size)); } while (0)
#  define hh_track_defined(p, size)         do { (void)VALGRIND_MAKE_MEM_DEFINED((p), (size)); } while (0)
#  define hh_track_undefined(p, size)       do { (void)VALGRIND_MAKE_MEM_UNDEFINED((p), (size)); } while (0)
#  define hh_track_noaccess(p, size)        do { (void)VALGRIND_MAKE_MEM_NOACCESS((p), (size)); } while (0)
#  define hh_track_running()                (RUNNING_ON_VALGRIND != 0)
/* GET_VBITS: 1 read, 3 some byte unaddressable (no-access), 0 not under Valgrind. */
#  define hh_track_quiet_begin()            do { VALGRIND_DISABLE_ERROR_REPORTING; } while (0)
#  define hh_track_quiet_end()              do { VALGRIND_ENABLE_ERROR_REPORTING; } while (0)
#  define HH_TRACK_UNCHECKED
#elif HH_TRACK_ASAN
#  include <sanitizer/asan_interface.h>
#  define hh_track_pool_create(pool, base)  ((void)(pool), (void)(base))
#  define hh_track_pool_destroy(pool)       ((void)(pool))
#  define hh_track_alloc(pool, p, size)     ((void)(pool), ASAN_UNPOISON_MEMORY_REGION((p), (size)))
#  define hh_track_alloc_defined(pool, p, size) hh_track_alloc(pool, p, size)
#  define hh_track_free(pool, p, size)      ((void)(pool), ASAN_POISON_MEMORY_REGION((p), (size)))
#  define hh_track_move(pool, old, new_, size) ((void)(pool), (void)(old), ASAN_UNPOISON_MEMORY_REGION((new_), (size)))
#  define hh_track_trim(pool, p, size)      ((void)(pool), (void)(p), (void)(size))
#  define hh_track_defined(p, size)         ASAN_UNPOISON_MEMORY_REGION((p), (size))
#  define hh_track_undefined(p, size)       ASAN_UNPOISON_MEMORY_REGION((p), (size))
#  define hh_track_noaccess(p, size)        ASAN_POISON_MEMORY_REGION((p), (size))
#  define hh_track_running()                1
#  define hh_track_quiet_begin()            ((void)0)
#  define hh_track_quiet_end()              ((void)0)
#  define HH_TRACK_UNCHECKED                __attribute__((no_sanitize_address, noinline))
#else
#  define hh_track_pool_create(pool, base)  ((void)(pool), (void)(base))
#  define hh_track_pool_destroy(pool)       ((void)(pool))
#  define hh_track_alloc(pool, p, size)     ((void)(pool), (void)(p), (void)(size))
#  define hh_track_alloc_defined(pool, p, size) ((void)(pool), (void)(p), (void)(size))
#  define hh_track_free(pool, p, size)      ((void)(pool), (void)(p), (void)(size))
#  define hh_track_move(pool, old, new_, size) ((void)(pool), (void)(old), (void)(new_), (void)(size))
#  define hh_track_trim(pool, p, size)      ((void)(pool), (void)(p), (void)(size))
#  define hh_track_defined(p, size)         ((void)(p), (void)(size))
#  define hh_track_undefined(p, size)       ((void)(p), (void)(size))
#  define hh_track_noaccess(p, size)        ((void)(p), (void)(size))
#  define hh_track_running()                0
#  define hh_track_quiet_begin()            ((void)0)
#  define hh_track_quiet_end()              ((void)0)
#  define HH_TRACK_UNCHECKED
#endif

/* hh_track_peek_u64 reads in place, unseen: a walk that opened the word for
   the tools and closed it again after (saving and restoring memcheck's V
   bits, ASan's poison) could close it over a block another thread had
   handed out in between, and TSan saw its load race with the user's
   writes. A plain volatile load of an aligned word, which x86-64 and
   AArch64 perform whole; memcheck's report of a no-access or undefined
   read is silenced on this thread for the load, and the copy is marked
   defined so that comparing it reports nothing either. */
#if defined(__SANITIZE_THREAD__)
#  define HH_TRACK_TSAN_ 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define HH_TRACK_TSAN_ 1
#  endif
#endif
#if defined(HH_TRACK_TSAN_)
#  define HH_TRACK_PEEK_ATTR_ __attribute__((no_sanitize("thread"), noinline))
#elif HH_TRACK_ASAN
#  define HH_TRACK_PEEK_ATTR_ __attribute__((no_sanitize_address, noinline))
#else
#  define HH_TRACK_PEEK_ATTR_
#endif
static inline HH_TRACK_PEEK_ATTR_ uint64_t hh_track_peek_u64(const void *p) {
    hh_track_quiet_begin();
    uint64_t v = *(const volatile uint64_t *)p;
    hh_track_quiet_end();
    hh_track_defined(&v, sizeof v);
    return v;
}

#endif /* HH_TRACK_H */
