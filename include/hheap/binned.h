/* hheap/binned.h -- binned small-block allocator (non-relocatable region).
 *
 * A process-wide, thread-safe malloc replacement in the manner of Unreal's
 * FMallocBinned2, tuned for game engines:
 *   - 40 size classes: 16-byte steps to 128 B, then four per power of two up
 *     to 32 KiB (HH_BINNED_SMALL_MAX); an O(1) size-to-class table;
 *   - 64 KiB pages, one class each, carved from 4 MiB spans; the metadata of a
 *     block's page is found from the pointer by masking (O(1), no search);
 *   - per-thread caches with batched refill/flush to per-class global lists
 *     under per-class locks (no global lock on any path that serves a block);
 *     a thread holds at most hh_binned_thread_cache_limit() bytes in its cache
 *     (default 2 MiB: up to 256 blocks of each class to 1 KiB, 8 of each
 *     to 8 KiB, 4 above; a bin that only frees, as a consumer of another
 *     thread's blocks, 32); a thread's cache is flushed when it exits;
 *   - blocks above 32 KiB (or with an alignment no class can give) are mapped
 *     straight from the OS with a header, found again in O(1);
 *   - every free is validated in O(1) in every build: a pointer that is not a
 *     live block of ours is reported (HH_E_DOUBLE_FREE or HH_E_FOREIGN_POINTER)
 *     and ignored; the allocator stays intact. A small block's state is in
 *     the block: a free writes a tag into its second 8 bytes (as it writes
 *     its link into the first), a value with the top bit set made from the
 *     block's address and a random per-process key -- no pointer, and no
 *     fixed pattern, equals it. A second free finds the tag and is reported;
 *     of two threads freeing one block at once, exactly one succeeds.
 *
 * Alignment: every block is 16-byte aligned. hh_bmemalign serves alignments up
 * to 32 KiB from the bins (it picks the smallest class whose size is a multiple
 * of the alignment; pages are 64 KiB aligned), larger ones -- any power of
 * two up to HH_BINNED_MAX_ALIGN (1 GiB) -- from the OS (an alignment of 4 MiB
 * or more reserves, untouched, about the alignment in address space).
 *
 * Error contract (hheap/common.h): a failing call returns NULL (or 0), sets
 * hh_last_error() and sends exactly one message to the error handler:
 *   HH_E_NO_MEMORY       the OS refused memory, or the size cannot be served
 *                        (sizes near SIZE_MAX fail this way, cleanly);
 *   HH_E_INVALID_ARG     calloc count*size overflows; alignment not a power of
 *                        two or above HH_BINNED_MAX_ALIGN; NULL out-pointer;
 *   HH_E_DOUBLE_FREE     hh_bfree/hh_brealloc of a block already freed;
 *   HH_E_FOREIGN_POINTER hh_bfree/hh_brealloc/hh_busable of a pointer this
 *                        allocator never handed out (or an interior pointer).
 *
 * The LD_PRELOAD shim build/libhheap_malloc.so exports malloc, free, calloc,
 * realloc, reallocarray, posix_memalign, aligned_alloc, memalign, valloc,
 * pvalloc and malloc_usable_size on top of these functions; there foreign
 * pointers are ignored silently and out-of-memory sets errno instead of
 * calling the error handler.
 */
#ifndef HHEAP_BINNED_H
#define HHEAP_BINNED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    HH_BINNED_CLASS_COUNT = 40,        /* size classes */
    HH_BINNED_SMALL_MAX   = 32768,     /* largest size served from the bins */
    HH_BINNED_PAGE_SIZE   = 65536,     /* one page holds blocks of one class */
    HH_BINNED_MAX_ALIGN   = 1 << 30,   /* largest alignment hh_bmemalign serves */
};

/* ---------------------------------------------------------------------------
   Allocation (all thread-safe)
--------------------------------------------------------------------------- */
/* A block of at least `size` bytes, 16-byte aligned, contents unspecified.
   size 0 gives a unique minimum-size block (as malloc does). NULL on failure. */
HH_API void  *hh_bmalloc(size_t size);
/* count*size zeroed bytes. count*size overflowing fails with HH_E_INVALID_ARG. */
HH_API void  *hh_bcalloc(size_t count, size_t size);
/* Resizes p keeping min(old, new) bytes. p NULL: hh_bmalloc(size). size 0:
   frees p and returns NULL. On failure (or a bad p) returns NULL and leaves p
   allocated and unchanged. The result may be p itself. */
HH_API void  *hh_brealloc(void *p, size_t size);
/* A block of at least `size` bytes aligned to `align` (a power of two <= HH_BINNED_MAX_ALIGN). */
HH_API void  *hh_bmemalign(size_t align, size_t size);
/* Frees p. NULL is a no-op. A bad p is reported and ignored (never fatal). */
HH_API void   hh_bfree(void *p);
/* Usable bytes of the live block p (>= the size asked for); 0 for NULL, and
   0 + HH_E_FOREIGN_POINTER for a pointer that is not a live block of ours. */
HH_API size_t hh_busable(const void *p);

/* ---------------------------------------------------------------------------
   Size classes
--------------------------------------------------------------------------- */
/* Block size of class cls (0 <= cls < HH_BINNED_CLASS_COUNT), 0 if out of range. */
HH_API size_t hh_binned_class_size(int cls);
/* Class serving a request of `size` bytes, -1 if it is served by the OS. */
HH_API int    hh_binned_class_of(size_t size);

/* ---------------------------------------------------------------------------
   Thread caches
--------------------------------------------------------------------------- */
/* Returns every block cached by the calling thread to the global lists (the
   same happens automatically when a thread exits). */
HH_API void   hh_binned_thread_flush(void);
/* Bytes one thread may hold in its cache (default 2097152; classes to 1 KiB
   get limit/64 bytes each, larger ones 8 blocks to 8 KiB and 4 above, the
   largest cut first when the limit is lower). Caches adapt at
   their next refill/flush. bytes 0 disables caching; above 64 MiB fails with
   HH_E_INVALID_ARG. */
HH_API hh_status hh_binned_set_thread_cache_limit(size_t bytes);
HH_API size_t    hh_binned_thread_cache_limit(void);

/* ---------------------------------------------------------------------------
   Statistics
   Counters are summed over all threads (live ones read without stopping
   them, so a concurrent snapshot is approximate).
--------------------------------------------------------------------------- */
typedef struct hh_binned_class_stats {
    size_t   block_size;      /* bytes per block of this class */
    uint64_t live_blocks;     /* allocated and not yet freed */
    uint64_t live_bytes;      /* live_blocks * block_size */
    uint32_t pages;           /* 64 KiB pages owned by the class */
    uint32_t empty_pages;     /* of those, pages with no block handed out (kept as spare) */
    uint64_t allocs;          /* allocations served: cache hits + misses + those made without a cache */
    uint64_t cache_hits;      /* allocations served from a thread cache without a refill */
    double   cache_hit_rate;  /* cache_hits / allocs, 0 when allocs == 0 */
} hh_binned_class_stats;

typedef struct hh_binned_stats {
    hh_binned_class_stats classes[HH_BINNED_CLASS_COUNT];
    uint64_t small_live_blocks, small_live_bytes;   /* sums over the classes */
    uint64_t large_live_blocks, large_live_bytes;   /* OS-mapped blocks (usable bytes) */
    size_t   large_mapped_bytes;                     /* bytes mapped for live large blocks, their
                                                        tails included (idle slack decay unmaps) */
    size_t   large_cached_bytes;                     /* freed large mappings kept for reuse */
    uint32_t spans;               /* 4 MiB spans mapped */
    uint32_t pages_in_classes;    /* pages owned by a class */
    uint32_t pages_free;          /* pages in the pool, not owned by a class */
    uint32_t pages_decommitted;   /* of those, pages given back to the OS */
    uint32_t thread_caches;       /* live thread caches */
    size_t   mapped_bytes;        /* spans + large mappings (live and cached) */
} hh_binned_stats;

/* Fills *out. out NULL: HH_E_INVALID_ARG. */
HH_API void hh_binned_stats_get(hh_binned_stats *out);

/* ---------------------------------------------------------------------------
   Maintenance
--------------------------------------------------------------------------- */
/* Gives empty pages back to the OS (decommit), retires spans that became
   wholly free (decommitted, address range kept for the next span) and unmaps
   the freed large mappings kept for reuse. Spends at most about max_ns nanoseconds (0: no limit), so a
   game can call it once a frame. Does not touch thread caches (call
   hh_binned_thread_flush first to include the caller's). Other threads'
   allocations wait for it at most one OS call at a time (it holds no lock
   they need across an madvise or munmap), as they do for decay. Returns the
   bytes given back. */
HH_API size_t hh_binned_trim(uint64_t max_ns);

/* Time-based decay: with a period of ms > 0, freed memory that stayed unused
   for one to two periods (empty pool pages, cached large mappings) goes back
   to the OS without a call from the program: while the purge thread below
   runs, it alone does that work (malloc and free then make no madvise or
   munmap call for it); without it the allocator's own slow paths (refills,
   flushes, large blocks) notice the time and do a bounded trim of what is
   old enough (at most about 1 ms each). A new period reaches a sleeping
   purge thread at once. 0 (the library's default: a game calls
   hh_binned_trim itself) turns it off. The LD_PRELOAD shim turns it on with
   250 ms. HH_E_INVALID_ARG above 60000 ms. */
HH_API hh_status hh_binned_set_decay_ms(uint32_t ms);

/* Background purge thread: with on, one thread sleeps until the decay pass
   is due (once a period) and runs it, so memory freed by a program that
   then goes quiet (no more slow paths) still goes back -- one to two
   periods after the free -- and the program's own calls do no decay work
   while it runs. With nothing for decay to give back it sleeps until
   something is (the first free into a cache after that wakes it); with
   decay off (ms 0) it sleeps until a new period or a stop, whatever is
   freed.
   Started lazily, by the first slow path that sees decay on once what
   decay holds to give back (empty pool pages, cached large mappings, the
   unused tails of large blocks) reaches 1 MiB: a program that never frees
   that much never gets it, and stays single-threaded to glibc (which
   counts a process as multithreaded for good from its first thread on:
   __libc_single_threaded, which libstdc++'s shared_ptr reads). Its
   creation allocates one block inside glibc (the thread's TLS vector),
   which a leak report at exit lists. It touches only what a decay pass
   touches (empty pages, pool pages, cached large mappings, under the
   allocator's locks), never a thread cache or a live block, and runs with
   every signal blocked. A fork child starts its own on its first slow path
   after a free, once decay holds 1 MiB there; at exit (or with on ==
   false) it is stopped and joined. Default: off in the library (a game
   calls hh_binned_trim from its frame loop); the LD_PRELOAD shim turns it
   on (HHEAP_PURGE_THREAD=0 keeps it off). If the
   thread cannot be created, decay stays with the slow paths. Returns HH_OK. */
HH_API hh_status hh_binned_set_purge_thread(bool on);
/* Whether the purge thread is asked for (running or to be started). */
HH_API bool      hh_binned_purge_thread(void);

/* Transparent huge pages for large blocks: with on, every mapping made
   afterwards for a block mapped on its own (above HH_BINNED_SMALL_MAX, or
   aligned beyond what a class gives; and its growth by realloc) is advised
   MADV_HUGEPAGE, so the kernel may back it with 2 MiB pages: one fault per
   2 MiB instead of per 4 KiB, fewer TLB misses. A program that writes its
   big blocks densely can gain (the bench_binned `large` workload ran about
   twice as fast when huge pages were at hand, but slower when the kernel
   had to compact memory to make them); one that touches them sparsely pays
   up to 2 MiB resident per touched spot, so it is off by default. A hint: where the kernel has no THP (or it is set to "never")
   nothing changes. Mappings already made (live or cached for reuse) keep
   what they had. The LD_PRELOAD shim turns it on with
   HHEAP_LARGE_HUGEPAGES=1. Returns HH_OK. */
HH_API hh_status hh_binned_set_large_hugepages(bool on);
/* Whether large mappings are advised to use huge pages. */
HH_API bool      hh_binned_large_hugepages(void);

/* Transparent huge pages for small blocks: with on, every 4 MiB span the
   bins take afterwards (a fresh mapping, or one trim had retired) is
   advised MADV_HUGEPAGE, so its blocks share two 2 MiB translations
   instead of 1024 4 KiB ones. Programs whose small blocks are many and
   touched at random -- a free reads its block and its page's metadata in
   the span header, far apart -- spend much of their time in TLB misses, above all under
   virtualisation; see the README for the figures measured. The price is
   memory: the kernel faults in 2 MiB at a time (peak resident size rises
   by a few MB), and a page decommitted inside a huge page splits it. A
   retired span (trim found it wholly free) drops the advice, so its
   metadata link keeps 4 KiB resident, not 2 MiB. Off by default. A hint:
   without THP (or set to "never") nothing changes; spans advised while it
   was on keep the advice until they retire. The LD_PRELOAD shim turns it
   on with HHEAP_SMALL_HUGEPAGES=1. Returns HH_OK. */
HH_API hh_status hh_binned_set_small_hugepages(bool on);
/* Whether the spans of small blocks are advised to use huge pages. */
HH_API bool      hh_binned_small_hugepages(void);

/* Full walk of every invariant of the global structures (spans, pages, class
   lists, the page pool, large blocks) and of the calling thread's cache.
   HH_OK, or HH_E_CORRUPT with one message naming the first broken invariant. */
HH_API hh_status hh_binned_check(void);

/* ---------------------------------------------------------------------------
   Leak report
--------------------------------------------------------------------------- */
typedef void (*hh_binned_leak_fn)(const void *block, size_t usable_size, void *user);
/* Calls fn (may be NULL: count only) for every block that is allocated and not
   freed -- at shutdown, the leaks. Blocks in thread caches are free, not leaks.
   Returns the number of such blocks; *bytes (if not NULL) gets their usable
   bytes. fn runs with no class lock held and may allocate and free, but the
   walk holds the trim lock: fn must not call hh_binned_trim, hh_binned_check,
   hh_binned_walk, hh_binned_leak_report or fork(). */
HH_API size_t hh_binned_leak_report(hh_binned_leak_fn fn, void *user, size_t *bytes);

/* ---------------------------------------------------------------------------
   Heap-map walker (used by the .hhmap writer)
   One call per 64 KiB page of every span (address order within a span, spans
   newest first), then one per large block. fn runs with no class lock held
   (it may allocate and free); the walk holds the trim lock, so fn must not call
   hh_binned_trim, hh_binned_check, hh_binned_walk, hh_binned_leak_report or fork().
--------------------------------------------------------------------------- */
enum {
    HH_BINNED_REGION_META = 0,    /* page 0 of a span: the span's metadata */
    HH_BINNED_REGION_FREE,        /* page in the pool, owned by no class */
    HH_BINNED_REGION_CLASS,       /* page serving one size class */
    HH_BINNED_REGION_LARGE,       /* one OS-mapped large block */
};
typedef struct hh_binned_region {
    uintptr_t address;            /* first byte of the page or mapping */
    size_t    size;               /* HH_BINNED_PAGE_SIZE, or the mapping's bytes (a large
                                     block's idle tail included, as in large_mapped_bytes) */
    int       kind;               /* HH_BINNED_REGION_* */
    int       size_class;         /* class index, -1 unless kind == CLASS */
    uint32_t  block_size;         /* class block size; usable bytes of a large block */
    uint32_t  capacity;           /* blocks the page holds (1 for a large block) */
    uint32_t  live;               /* blocks allocated and not freed */
    uint32_t  cached;             /* blocks handed to thread caches, not live */
    bool      committed;          /* false: memory given back to the OS */
} hh_binned_region;
typedef void (*hh_binned_walk_fn)(const hh_binned_region *r, void *user);
/* Walks the binned region. fn NULL: HH_E_INVALID_ARG. */
HH_API void hh_binned_walk(hh_binned_walk_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_BINNED_H */
