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
 *   hh_track_peek_begin(p, size, save) / hh_track_peek_end(p, size, save)
 *                                      around a read of bytes the tools may
 *                                      see as undefined or no-access (a
 *                                      user's block, a freed one): they are
 *                                      readable between the two, and end as
 *                                      they began. save: unsigned char[size]
 *                                      (size <= 16) the pair shares.
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
#  define hh_track_peek_begin(p, size, save) \
      int hh_peek_got_ = VALGRIND_GET_VBITS((p), (save), (size)); (void)VALGRIND_MAKE_MEM_DEFINED((p), (size))
#  define hh_track_peek_end(p, size, save) \
      do { if (hh_peek_got_ == 1) (void)VALGRIND_SET_VBITS((p), (save), (size)); \
           else if (hh_peek_got_ == 3) (void)VALGRIND_MAKE_MEM_NOACCESS((p), (size)); } while (0)
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
#  define hh_track_peek_begin(p, size, save) \
      (void)(save); int hh_peek_got_ = __asan_region_is_poisoned((void *)(p), (size)) != NULL; \
      if (hh_peek_got_) ASAN_UNPOISON_MEMORY_REGION((p), (size))
#  define hh_track_peek_end(p, size, save) \
      do { if (hh_peek_got_) ASAN_POISON_MEMORY_REGION((p), (size)); } while (0)
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
#  define hh_track_peek_begin(p, size, save) ((void)(p), (void)(size), (void)(save))
#  define hh_track_peek_end(p, size, save)   ((void)(p), (void)(size), (void)(save))
#  define hh_track_quiet_begin()            ((void)0)
#  define hh_track_quiet_end()              ((void)0)
#  define HH_TRACK_UNCHECKED
#endif

#endif /* HH_TRACK_H */
