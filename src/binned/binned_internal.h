/* binned_internal.h -- internals of the binned allocator: layout, structs and
 * the inline fast paths shared by binned.c and the LD_PRELOAD shim.
 *
 * Layout. Memory comes from the OS in 4 MiB spans aligned to 4 MiB. Page 0 of
 * a span holds the span header, the metadata of all 64 pages (its first OS
 * page; the rest is never touched); pages 1..63 (64 KiB each, 64 KiB
 * aligned) serve blocks of one class each. From a pointer a: span = a &
 * ~(4 MiB - 1), page meta = span->pages[(a >> 16) & 63], block index =
 * ((a & 0xFFFF) * recip) >> 32 -- no search, no division.
 * Ownership: a byte per 4 MiB of address space (the registry, one flat array
 * mapped once, 32 MiB of address space, touched sparsely) says whether a chunk
 * is one of our spans, the first chunk of a large mapping, or a large mapping
 * freed earlier. Block state lives in the block itself: a free block's second
 * word holds its free tag (hhi_block_tag: its address XOR a per-process key
 * with the top bit set, a value no pointer has); a live block holds anything
 * else there (malloc writes 0; the user may overwrite it). A free claims a
 * block by exchanging the tag in: of two threads freeing one block, exactly
 * one sees another value. The tag shares the block's cache line, which the
 * freeing thread touches anyway: a byte per block in the span header shared
 * lines between threads whose blocks sat side by side, and every free waited
 * for its line to come back from the other core (half the time of a
 * four-thread churn, make bench-binned).
 *
 * Invariants (hh_binned_check verifies 1-7):
 *  1. registry[chunk] == HHI_REG_SPAN iff a live span starts at chunk; the span
 *     is on g.spans; HHI_REG_LARGE iff a live large mapping starts there.
 *  2. A page is either in the pool (cls == HHI_NO_CLASS, on the dirty or
 *     clean pool list -- or on neither while a trim or decay pass, which
 *     holds the trim lock, decommits it without the pool lock) or owned by
 *     exactly one class. A pooled page keeps the
 *     geometry of its last class and how far it was carved (carved_last; no
 *     block is live), so a late second free of one of its blocks is still
 *     reported as a double free (carved is 0 there, so every free takes the
 *     slow path, which reads the page's owner: the blocks' tags may be gone
 *     with a decommit); capacity 0 when it never served a class.
 *  3. Every block of a class page is exactly one of: unreserved (index >=
 *     reserved); reserved by a take and being linked outside the class lock
 *     (index in [carved, reserved): at most one such run per page, and a
 *     free of one reads as foreign until the take publishes it);
 *     on the page free list (tagged); held by a thread cache or a batch of
 *     its class's transfer stack (tagged); live with the user (not tagged).
 *     page->used counts the blocks reserved, held by caches, batches or
 *     users, so used + free-list length == reserved, and carved <=
 *     reserved <= capacity.
 *  4. A class's partial list holds exactly its pages with a free-list or
 *     unreserved block; empty pages (used == 0) sit at its tail; at most
 *     HHI_KEEP_EMPTY of them stay with a class, the rest go to the pool.
 *  5. A thread cache bin holds at most its cap blocks of its class (tagged);
 *     its room is cap - count;
 *     sum over classes of g.cap[c] * size[c] <= g.cache_limit. A class's
 *     transfer stack holds at most HHI_XFER_MAX non-empty batches of such
 *     blocks, xfer_blocks in all (and after each push at most HHI_XFER_BINS
 *     times g.cap[c], unless that one batch is larger); a class's live blocks, its transfer
 *     blocks and the checking thread's bin together are at most its used
 *     blocks (a block in two places would exceed it). hhi_tc_empty is all
 *     zero, always.
 *  6. A large block's mapping starts at a 4 MiB boundary with a hhi_blarge
 *     header (magic HHI_LARGE_MAGIC); the user pointer is base + offset,
 *     offset < 4 MiB -- or, for an alignment above 2 MiB, offset == 4 MiB and
 *     the user pointer's chunk is registered LARGE_FAR; it is on g.large. Freed
 *     mappings kept for reuse are the large cache's extents (binned_large.c):
 *     each starts at a 4 MiB boundary with magic HHI_LCACHE_MAGIC, every chunk
 *     it touches reads LARGE_FREED, it is on g.lcache (at most HHI_LCACHE_MAX
 *     of them, HHI_LCACHE_BYTES in all), and no two of them touch (a free
 *     merges a mapping with the extents beside it). A live block whose
 *     mapping runs past map_size (a reused extent's slack: tail > 0) is on
 *     g.tails (n_tails of them); its mapping is map_size + tail bytes.
 *  7. span->free_pages == number of its pages in the pool.
 *     A retired span (trim found it wholly free) is never unmapped: it is
 *     decommitted whole, header included, its registry byte says SPAN_FREED,
 *     and it sits on g.retired until span_new reuses the range (its header
 *     then holds only the link and gen_base, where the range's generations
 *     go on). A free that read the registry just before the trim thus reads
 *     zeroed metadata (capacity 0: no block), never an unmapped page. The
 *     address space of spans stays at its peak; the memory goes back.
 *  8. Lock order: g.trim_lock -> g.tc_lock -> class locks (ascending) ->
 *     g.pool_lock -> g.large_lock -> the purge thread's lock (binned_purge.c,
 *     taken last: a note wakes the thread under any allocator lock). No lock
 *     is held while user code runs.
 */
#ifndef HH_BINNED_INTERNAL_H
#define HH_BINNED_INTERNAL_H

#include "hheap/binned.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../common/hh_assert.h"
#include "../common/hh_compiler.h"
#include "../common/hh_config.h"
#include "../common/hh_platform.h"
#include "../common/hh_track.h"

/* ---------------------------------------------------------------------------
   Geometry
--------------------------------------------------------------------------- */
#define HHI_CLASS_COUNT     HH_BINNED_CLASS_COUNT
#define HHI_SMALL_MAX       ((size_t)HH_BINNED_SMALL_MAX)
#define HHI_PAGE_SHIFT      16u
#define HHI_PAGE_SIZE       ((size_t)1 << HHI_PAGE_SHIFT)
#define HHI_PAGE_MASK       (HHI_PAGE_SIZE - 1)
#define HHI_SPAN_SHIFT      22u
#define HHI_SPAN_SIZE       ((size_t)1 << HHI_SPAN_SHIFT)
#define HHI_SPAN_MASK       (HHI_SPAN_SIZE - 1)
#define HHI_PAGES_PER_SPAN  (1u << (HHI_SPAN_SHIFT - HHI_PAGE_SHIFT))
#define HHI_ADDR_BITS       47u                 /* Linux x86-64/arm64 user space */
#define HHI_REGISTRY_LEN    ((size_t)1 << (HHI_ADDR_BITS - HHI_SPAN_SHIFT))
#define HHI_MAX_ALIGN       ((size_t)HH_BINNED_MAX_ALIGN) /* largest alignment hh_bmemalign serves */
#define HHI_FAR_ALIGN       (HHI_SPAN_SIZE / 2) /* larger alignments: the header sits a chunk below */
#define HHI_LARGE_HDR       64u                 /* bytes before a large block's user pointer */
#define HHI_LARGE_MAGIC     0x6868426c61726765ull
#define HHI_LCACHE_MAGIC    0x6868426c63616368ull   /* a freed mapping in the large cache */
#define HHI_LCACHE_MAX      32u                 /* extents kept for reuse */
#define HHI_LCACHE_BYTES    ((size_t)256 << 20) /* bytes kept for reuse (decay or trim give them back) */
#define HHI_LCACHE_BLOCK    ((size_t)64 << 20)  /* a freed block's mapping above this is never kept */
#define HHI_TAILS_MAX       32u                 /* live large blocks with a tail left for decay */
#define HHI_DECAY_BUDGET_NS ((uint64_t)1000000) /* one decay pass: about 1 ms at most */
#define HHI_PURGE_START_BYTES ((size_t)1 << 20) /* what decay holds before a purge thread is worth starting */
#define HHI_CARVE_BYTES     4096u               /* fresh memory one take carves at most (but one block) */
#define HHI_KEEP_EMPTY      1u                  /* empty pages a class keeps as spare */
#define HHI_NO_CLASS        0xFFu
#define HHI_DEFAULT_CACHE_LIMIT ((size_t)2 << 20)   /* per thread: 0.75 MiB small classes, ~1 MiB above 1 KiB */
#define HHI_MAX_CACHE_LIMIT     ((size_t)64 << 20)
#define HHI_BIN_MAX         256u                /* blocks per thread-cache bin at most */
#define HHI_BIN_FREE_ONLY   32u                 /* cap of a bin that only frees (its batches go to another thread) */
#define HHI_BIN_DEEP        8u                  /* blocks per bin of the classes 1..8 KiB (half above) */

_Static_assert(HHI_PAGES_PER_SPAN == 64, "span geometry");
_Static_assert(HHI_SMALL_MAX * 2 <= HHI_PAGE_SIZE, "two blocks of the largest class fit in a page");
_Static_assert(HHI_CLASS_COUNT < HHI_NO_CLASS, "class index fits a byte");

/* Registry values (one byte per 4 MiB chunk). */
/* *_FREED: the range was ours and given back to the OS; a free there is
   reported as a double free until the address is reused. */
/* LARGE_FAR: the chunk where a large block aligned to 4 MiB or more starts;
   its header is the chunk below (registered LARGE), offset == 4 MiB. */
enum {
    HHI_REG_NONE = 0, HHI_REG_SPAN = 1, HHI_REG_LARGE = 2, HHI_REG_LARGE_FREED = 3, HHI_REG_SPAN_FREED = 4,
    HHI_REG_LARGE_FAR = 5,
};
/* Page pool membership. */
/* CLEAN pages were never touched, DECOMMITTED ones were given back to the OS;
   both sit on the clean list. */
enum { HHI_POOL_NONE = 0, HHI_POOL_DIRTY = 1, HHI_POOL_CLEAN = 2, HHI_POOL_DECOMMITTED = 3 };

/* Flags of the internal entry points. */
enum {
    HHI_QUIET_FOREIGN = 1u,   /* foreign pointer: set last error, no message (shim) */
    HHI_QUIET_OOM     = 2u,   /* out of memory / bad argument: no message (shim) */
    HHI_ZERO          = 4u,   /* zero the block */
};

/* ---------------------------------------------------------------------------
   Structures
--------------------------------------------------------------------------- */
/* A free block's first two words: its link and its free tag (see the
   layout note; hhi_block_tag). Every class is at least 16 B, so both fit. */
typedef struct hhi_bblock {
    struct hhi_bblock *next;
    /* Atomic: the claim exchanges it, and a racing second free may read it. */
    _Atomic uint64_t tag;
} hhi_bblock;
_Static_assert(sizeof(hhi_bblock) == 16, "free-block link: two words, the smallest class");

typedef struct hhi_bpage {
    /* The free fast path reads the first 24 bytes. The geometry (block_size,
       capacity, recip, and carved_last below) is read by frees without a
       lock -- after the page word, see hhi_page_geometry -- and written with
       relaxed atomics (hhi_page_setup_class, pool_put); locked code reads it
       plainly. */
    uint32_t block_size;        /* 0 when it never served a class */
    uint32_t capacity;          /* 0 when it never served a class */
    uint32_t recip;             /* floor(2^32 / block_size) + 1 */
    uint8_t  cls;               /* HHI_NO_CLASS when in the pool */
    uint8_t  pool;              /* HHI_POOL_* */
    uint8_t  in_partial;
    uint8_t  index;             /* page index within its span */
    /* carved (blocks [0, carved) were ever handed out or are tagged in a
       cache), the class and the page's generation, one word (hhi_page_word):
       0 when carved is 0 (always in the pool), else (carved - 1) << 32 |
       0xFF000000 | gen << 8 | cls. Written under the class lock, or by the
       take publishing a run (fresh_link); read by frees without it: one load
       gives a free all three, consistent; the encoding makes "block index <
       carved" one compare of the free's multiply (hhi_word_covers), and the
       generation makes the word of a page that left its class and came back
       to it differ from the word before. */
    _Atomic uint64_t carved_cls;
    hhi_bblock *free;           /* page free list (class lock) */
    uint32_t used;              /* blocks reserved by a take, held by caches or users (class lock) */
    uint32_t dirty_tick;        /* dirty pool page: g.decay_tick when it joined the pool */
    struct hhi_bpage *next, *prev;  /* class partial list or pool list */
    /* Fresh blocks go out in two steps (hhi_class_take): reserved under the
       class lock, then linked, tagged and published -- carved covers them --
       by the taker without it. Until then a free of one takes the slow path
       and reads as foreign: it cannot claim a block whose taker is about to
       link it. One run at a time is in flight on a page (take_page), so
       [carved, reserved) is that run and carved stays a prefix. */
    uint32_t reserved;          /* blocks [0, reserved) carved or being linked (class lock) */
    uint16_t carved_last;       /* pooled: carved when it left its last class (a free at a block
                                   start below it is a double free); else 0 */
    uint16_t gen;               /* class tenures so far (mod 2^16): hhi_page_setup_class counts */
} hhi_bpage;
_Static_assert(sizeof(hhi_bpage) == 64, "page meta is 64 bytes");

/* Span header = the 64 page metas, 4 KiB. Page 0 serves no blocks, so its
   meta's line carries the span's own fields: page 0 is never pooled nor
   given a class, every walk of the metas starts at page 1, and a free of a
   pointer into page 0 reads its capacity and page word -- 0, left alone by
   the fields below -- and is refused as foreign before it reads more. The
   fields used to precede the metas (4160 bytes: two OS pages resident per
   span with 4 KiB pages, one now). A store to a field leaves the other
   metas' bytes as they are: GCC and Clang define type punning through a
   union (C11 alone would call those bytes unspecified). */
typedef struct hhi_bspan {
    union {
        hhi_bpage pages[HHI_PAGES_PER_SPAN];   /* a line each; pages[0]'s carries the fields below */
        struct {
            /* pages[0] up to and with its page word: a meta's own */
            unsigned char page0_meta[offsetof(hhi_bpage, carved_cls) + sizeof(uint64_t)];
            uint64_t magic;
            uint32_t free_pages;        /* pages of this span in the pool (pool lock) */
            uint32_t huge;              /* advised MADV_HUGEPAGE by span_new (hh_binned_set_small_hugepages) */
            struct hhi_bspan *next, *prev;  /* g.spans (pool lock) */
            uint16_t gen_base;          /* the generation its pages started at (span_new); retired:
                                           where they start when the range comes back (spans_retire);
                                           the last field */
        };
    };
} hhi_bspan;
_Static_assert(sizeof(hhi_bspan) == 4096, "the span header is 4 KiB");
_Static_assert(offsetof(hhi_bspan, gen_base) + sizeof(uint16_t) <= offsetof(hhi_bpage, carved_last),
               "the span's fields end before pages[0]'s carved_last and generation");
#define HHI_SPAN_MAGIC 0x6868427370616e21ull

typedef struct hhi_blarge {
    uint64_t magic;
    size_t   map_size;          /* bytes mapped (page multiple) */
    size_t   offset;            /* user pointer - base */
    size_t   size;              /* bytes asked for */
    struct hhi_blarge *next, *prev;
    uint64_t freed_ns;          /* in the large cache: when it was freed (merged: the parts'
                                   times weighted by bytes), for decay; a live block with a
                                   tail: when the tail's bytes were last freed */
    size_t   tail;              /* live block: bytes mapped past map_size that are not the
                                   block's (a reused extent's slack, left for decay), or 0 */
} hhi_blarge;
_Static_assert(sizeof(hhi_blarge) <= HHI_LARGE_HDR, "large header size");

/* Thread caches. Only the owner writes a cache; the counters are relaxed
   atomics so hh_binned_stats_get may read them from another thread (plain
   loads and stores). The cache is a struct of arrays indexed by class: a
   class index then scales by 8 inside one addressing mode (no shift, no
   lea on the fast paths, as an array of 32-byte bin structs needed).
   ops[c] packs the room left in bin c (cap - blocks on head, low
   HHI_BIN_COUNT_BITS) and the hits (allocations served from head, above):
   a hit is one add of HHI_BIN_POP to one word (one hit more, room + 1), a
   cached free one subtract (room - 1), and the free's "bin full" test is a
   test of the low bits against zero, with no load of the cap. Hits wrap
   after 2^52 in one bin of one thread (decades at 10^6/s). */
#define HHI_BIN_COUNT_BITS  12u
#define HHI_BIN_COUNT_MASK  (((uint64_t)1 << HHI_BIN_COUNT_BITS) - 1)
/* ops += HHI_BIN_POP on a hit: the room and the hit count in one add (the
   free-only rule, hhi_binned_free_claimed, needs the hits as well as the
   statistics). */
#define HHI_BIN_POP  (((uint64_t)1 << HHI_BIN_COUNT_BITS) + 1)
_Static_assert(HHI_BIN_MAX <= HHI_BIN_COUNT_MASK, "a bin's room fits its bits");

typedef struct hhi_tcache {
    /* First, at offset 0: gcc addresses tc->head[c] as (tc, c, 8) then; at
       another offset it adds the offset to c in a separate instruction. */
    hhi_bblock *head[HHI_CLASS_COUNT];        /* cached blocks per class, newest first */
    _Atomic uint8_t *registry;        /* copy of hhi_bg.registry: one load less in free */
    uint64_t tag_key;                 /* copy of hhi_bg.tag_key (hhi_block_tag) */
    size_t registry_len;              /* HHI_REGISTRY_LEN; 0 in hhi_tc_empty, so that every free
                                         there takes the slow path before reading the registry */
    _Atomic uint64_t ops[HHI_CLASS_COUNT];    /* hits << HHI_BIN_COUNT_BITS | room */
    _Atomic uint32_t cap[HHI_CLASS_COUNT];    /* most blocks head[c] may hold (copy of g.cap) */
    /* Frees are not counted: live blocks are derived from the pages (class
       used counts) less the blocks sitting in caches. */
    _Atomic uint64_t misses[HHI_CLASS_COUNT]; /* refills from the class */
    /* Owner only, slow paths: */
    uint32_t limit_cap[HHI_CLASS_COUNT];      /* g.cap[c] as this bin last adopted it; cap[c] is it,
                                                 or min(it, HHI_BIN_FREE_ONLY) for a bin that only frees */
    uint64_t hits_mark[HHI_CLASS_COUNT];      /* hits at the bin's last push (free-only test) */
    struct hhi_tcache *next, *prev;   /* g.tcaches (tc_lock) */
} hhi_tcache;

/* The cache of every thread that has none (yet, or any more): no block, no
   room, never written. hhi_tc_self points here instead of being NULL, so the
   fast paths need no NULL test: its bins always miss and are always full. */
HH_INTERNAL hhi_tcache hhi_tc_empty;

HH_INLINE uint64_t hhi_bin_ops(const hhi_tcache *tc, unsigned c) {
    return atomic_load_explicit(&tc->ops[c], memory_order_relaxed);
}
HH_INLINE uint32_t hhi_bin_cap(const hhi_tcache *tc, unsigned c) {
    return atomic_load_explicit(&tc->cap[c], memory_order_relaxed);
}
HH_INLINE uint32_t hhi_bin_room(const hhi_tcache *tc, unsigned c) {
    return (uint32_t)(hhi_bin_ops(tc, c) & HHI_BIN_COUNT_MASK);
}
/* Blocks on head[c] (a reader on another thread may see cap and room from
   two different moments: hhi_tcache_cap_set's order makes that a count too
   low, never too high nor negative). */
HH_INLINE uint32_t hhi_bin_count(const hhi_tcache *tc, unsigned c) {
    uint32_t cap = hhi_bin_cap(tc, c), room = hhi_bin_room(tc, c);
    return cap > room ? cap - room : 0;
}
HH_INLINE uint64_t hhi_bin_hits(const hhi_tcache *tc, unsigned c) { return hhi_bin_ops(tc, c) >> HHI_BIN_COUNT_BITS; }
/* Owner only: bin c now holds n blocks (n <= its cap). */
HH_INLINE void hhi_bin_count_set(hhi_tcache *tc, unsigned c, uint32_t n) {
    hh_assert_internal(n <= hhi_bin_cap(tc, c) && "a bin's room would wrap into its hits");
    uint64_t ops = hhi_bin_ops(tc, c);
    atomic_store_explicit(&tc->ops[c], (ops & ~HHI_BIN_COUNT_MASK) | (hhi_bin_cap(tc, c) - n), memory_order_relaxed);
}
/* Adds d to a counter only the calling thread writes (others may read it
   with relaxed loads). On x86-64 one unlocked add to memory: its store is
   one aligned 8-byte write, so a reader sees the old or the new value, and
   with a single writer no update is lost; for a relaxed atomic the compiler
   makes a load, an add and a store (and computes the address apart).
   Elsewhere, and under ThreadSanitizer (which cannot see into asm), the
   portable load and store. In C11's terms the asm store beside other
   threads' relaxed atomic loads is outside the memory model (it rests on
   x86's single-copy atomicity of aligned 8-byte stores), and TSan checks
   only the portable form: the shipped x86 path is argued, not race-checked. */
#if defined(__SANITIZE_THREAD__)
#  define HHI_OWNER_ADD_ASM 0
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define HHI_OWNER_ADD_ASM 0
#  endif
#endif
#if !defined(HHI_OWNER_ADD_ASM)
#  if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    define HHI_OWNER_ADD_ASM 1
#  else
#    define HHI_OWNER_ADD_ASM 0
#  endif
#endif
HH_INLINE void hhi_owner_add(_Atomic uint64_t *w, uint64_t d) {
#if HHI_OWNER_ADD_ASM
    __asm__("addq %1, %0" : "+m"(*w) : "er"(d));
#else
    atomic_store_explicit(w, atomic_load_explicit(w, memory_order_relaxed) + d, memory_order_relaxed);
#endif
}
/* Reads a counter the calling thread alone writes. On the asm path a plain
   load: no other thread writes it, so the read races with nothing, and the
   compiler may fold it into the instruction that tests it (it never folds
   an atomic load). */
HH_INLINE uint64_t hhi_owner_read(const _Atomic uint64_t *w) {
#if HHI_OWNER_ADD_ASM
    return *(const uint64_t *)(const void *)w;
#else
    return atomic_load_explicit(w, memory_order_relaxed);
#endif
}
/* Owner only: a hit, head's first block left (room + 1, hits + 1). */
HH_INLINE void hhi_bin_pop_note(hhi_tcache *tc, size_t c) { hhi_owner_add(&tc->ops[c], HHI_BIN_POP); }

/* A class's transfer stack: thread-cache bins moved between threads as one
   pre-linked batch in O(1) under the class lock (a thread whose bin is full
   pushes its older half -- all of it if the bin only frees --, one whose bin
   is empty pops one, hhi_class_refill), instead of walking
   every block back to its page and out again. Blocks in a batch keep their
   tags, so a popped batch is a ready bin. Every decay pass and trim give all batches back. */
#define HHI_XFER_MAX 16u              /* batches per class; a push onto a full stack walks the oldest to its pages */
#define HHI_XFER_BINS 8u              /* ... and at most this many full bins' worth of blocks */
/* One batch: its head and block count side by side, so a push or pop
   touches one 16-byte slot rather than two arrays. */
typedef struct hhi_xfer_batch {
    hhi_bblock *head;                     /* NULL-terminated list */
    uint32_t count;                       /* blocks in it */
} hhi_xfer_batch;
typedef struct hhi_bclass {
    _Alignas(64) hhi_lock lock;
    hhi_bpage *head, *tail;       /* partial pages; empty ones at the tail */
    uint32_t pages;               /* pages owned */
    uint32_t empty;               /* of those, with used == 0 */
    uint64_t used;                /* sum of page->used over the class's pages */
    _Atomic uint64_t direct_allocs;   /* cacheless path */
    uint32_t xfer_n;                      /* batches on the transfer stack (class lock) */
    uint32_t xfer_blocks;                 /* blocks in them, all counted in their pages' used */
    hhi_xfer_batch xfer[HHI_XFER_MAX];    /* batches, oldest first */
} hhi_bclass;

typedef struct hhi_bglobal {
    _Atomic uint8_t *registry;      /* HHI_REGISTRY_LEN bytes; NULL before init */
    uint64_t tag_key;               /* free tags' key (hhi_block_tag): random, top bit set; set at init */
    atomic_int ready;
    _Atomic uint32_t cap[HHI_CLASS_COUNT];  /* thread-cache bin caps (bins copy them at refill/flush) */
    _Atomic size_t cache_limit;
    hhi_bclass classes[HHI_CLASS_COUNT];
    /* page pool */
    hhi_lock pool_lock;
    hhi_bpage *dirty, *clean;       /* free pages: used before / never used or decommitted */
    hhi_bpage *dirty_tail;          /* the dirty list's oldest page (decay starts there) */
    uint32_t n_dirty, n_clean, n_decommitted;
    uint32_t n_decommitting;        /* pool pages on no list while their decommit runs (0 or 1) */
    hhi_bspan *spans;
    uint32_t n_spans;
    hhi_bspan *retired;             /* decommitted spans kept for reuse, linked through next */
    uint32_t n_retired;
    uint16_t spans_made;            /* ranges span_new mapped (mod 2^16): where their pages' generations start */
    /* large blocks */
    hhi_lock large_lock;
    hhi_blarge *large;
    uint64_t large_count, large_bytes;
    size_t large_mapped;            /* live large mappings */
    hhi_blarge *lcache;             /* large cache: extents kept for reuse, newest (or last merged) first */
    uint32_t n_lcache;
    size_t lcache_bytes;
    hhi_blarge *tails[HHI_TAILS_MAX];   /* live large blocks whose tail decay or trim gives back */
    uint32_t n_tails;
    _Atomic bool large_huge;        /* hh_binned_set_large_hugepages: advise fresh large mappings */
    _Atomic bool small_huge;        /* hh_binned_set_small_hugepages: advise the spans span_new takes */
    /* thread caches */
    hhi_lock tc_lock;
    hhi_tcache *tcaches, *tc_free;
    char *tc_slab;
    size_t tc_slab_left;
    uint32_t n_tcaches;
    _Atomic uint64_t retired_hits[HHI_CLASS_COUNT], retired_misses[HHI_CLASS_COUNT];
    hhi_lock trim_lock;
    /* decay (hh_binned_set_decay_ms) */
    _Atomic uint64_t decay_ns;      /* period, 0: off */
    _Atomic uint64_t decay_next_ns; /* when the next pass is due; 0: at decay's first look
                                       (hhi_binned_set_decay without a clock) */
    _Atomic uint32_t decay_tick;    /* passes so far: dirty pages older than one pass are purged */
    _Atomic int purge_state;        /* HHI_PURGE_* (binned_purge.c): here, so that
                                       the notes read it inline */
    /* A pass that ran out of its budget leaves the rest here; the purge
       thread finishes it in further bounded slices (slow paths do not: they
       keep their 1 ms bound and the rest waits for the next period). */
    _Atomic bool decay_work;        /* something went where decay gives it back (the dirty pool,
                                       the large cache, a tail; a spare page or a transfer batch
                                       while the thread runs) since the purge thread last looked */
    /* While the purge thread is wanted but not started (hhi_decay_maybe):
       what decay held at the last count, and the bytes noted since. Decay
       comes to hold more only through a noted place, so it holds at most
       their sum: the next count waits until that reaches the mark. One
       count at a time (purge_counting): two, storing their figures in the
       other order, could leave purge_seen below what decay holds. */
    _Atomic size_t purge_seen;
    _Atomic size_t decay_noted;
    atomic_bool purge_counting;
    _Atomic bool decay_more;        /* the last pass stopped at its deadline */
    _Atomic uint32_t decay_more_tick;     /* its tick: pool pages dirty before it go */
    _Atomic uint64_t decay_more_cutoff;   /* its cutoff: cached mappings freed before it go */
} hhi_bglobal;

HH_INTERNAL hhi_bglobal hhi_bg;

/* Calling thread's cache; &hhi_tc_empty if it has none (yet, or any more). */
#if defined(__GNUC__) || defined(__clang__)
#  define HHI_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#  define HHI_TLS_MODEL
#endif
HH_INTERNAL _Thread_local hhi_tcache *hhi_tc_self HHI_TLS_MODEL;

/* Size classes (binned_classes.c). */
HH_INTERNAL const uint32_t hhi_class_size[HHI_CLASS_COUNT];
HH_INTERNAL const uint8_t hhi_class_of16[HH_BINNED_SMALL_MAX / 16 + 1];   /* by (size + 15) >> 4 */

/* Class of size (size <= HHI_SMALL_MAX): one table load, no branch. */
HH_INLINE unsigned hhi_size_class(size_t size) { return hhi_class_of16[(size + 15) >> 4]; }
/* Blocks per page of class c. */
HH_INTERNAL uint32_t hhi_class_capacity(unsigned c);

/* ---------------------------------------------------------------------------
   Pointer -> metadata, O(1)
--------------------------------------------------------------------------- */
HH_INLINE unsigned hhi_registry_get(uintptr_t a) {
    return atomic_load_explicit(&hhi_bg.registry[a >> HHI_SPAN_SHIFT], memory_order_relaxed);
}
HH_INLINE hhi_bspan *hhi_span_of(uintptr_t a) { return (hhi_bspan *)(a & ~(uintptr_t)HHI_SPAN_MASK); }
HH_INLINE hhi_bpage *hhi_page_of(uintptr_t a) {
    /* As &span->pages[(a >> 16) & 63], written as one shift and one mask of
       a (64-byte metas): gcc otherwise shifts the index twice on the free
       fast path. */
    uintptr_t meta = (a >> (HHI_PAGE_SHIFT - 6)) & ((uintptr_t)(HHI_PAGES_PER_SPAN - 1) << 6);
    return (hhi_bpage *)((a & ~(uintptr_t)HHI_SPAN_MASK) + meta);
}
_Static_assert(sizeof(hhi_bpage) == 64, "hhi_page_of scales the index by 64");
HH_INLINE uintptr_t hhi_page_base(const hhi_bpage *pg) {
    return ((uintptr_t)pg & ~(uintptr_t)HHI_SPAN_MASK) + ((uintptr_t)pg->index << HHI_PAGE_SHIFT);
}
/* The page word (carved_cls). Acquire: a free that sees a block carved then
   sees its tag (written before the release in hhi_page_carved_set) in its
   claim. */
HH_INLINE uint64_t hhi_page_word(const hhi_bpage *pg) {
    return atomic_load_explicit(&pg->carved_cls, memory_order_acquire);
}
HH_INLINE uint64_t hhi_word_make(uint32_t carved, unsigned cls, unsigned gen) {
    return carved == 0 ? 0 : (uint64_t)(carved - 1) << 32 | 0xFF000000u | (uint32_t)(gen & 0xFFFF) << 8 | cls;
}
HH_INLINE uint32_t hhi_word_carved(uint64_t w) { return w == 0 ? 0 : (uint32_t)(w >> 32) + 1; }
/* The class and the generation; meaningful only when carved > 0 (w != 0). */
HH_INLINE unsigned hhi_word_cls(uint64_t w) { return (unsigned)(w & 0xFF); }
HH_INLINE unsigned hhi_word_gen(uint64_t w) { return (unsigned)(w >> 8 & 0xFFFF); }
HH_INLINE uint32_t hhi_page_carved(const hhi_bpage *pg) { return hhi_word_carved(hhi_page_word(pg)); }
/* Whether word `now` is of the same class tenure as word `was` (was != 0),
   carved at least as far: the low halves (class, generation) equal -- never
   so for now == 0, whose low half lacks the marker bits --, and so the higher
   word the further carved. */
HH_INLINE bool hhi_word_same_tenure_on(uint64_t now, uint64_t was) {
    return (uint32_t)now == (uint32_t)was && now >= was;
}
/* Class lock held, pg->cls already set (pool_put, hhi_page_setup_class) --
   or a take publishing its fresh run (fresh_link), the word's one writer then. */
HH_INLINE void hhi_page_carved_set(hhi_bpage *pg, uint32_t n) {
    atomic_store_explicit(&pg->carved_cls, hhi_word_make(n, pg->cls, pg->gen), memory_order_release);
}
/* floor(2^32 / block size) + 1: see hhi_block_mul. */
HH_INLINE uint32_t hhi_recip_of(uint32_t block_size) { return (uint32_t)((((uint64_t)1) << 32) / block_size + 1); }
/* A geometry field of a page as a free without a lock reads it (relaxed),
   and as hhi_page_setup_class and pool_put write it. The free reads the page
   word first (acquire), the geometry after it: geometry as old as the word
   would pass a block start of the page's last class against a word of its
   new class, and the claim's second look at the word -- unchanged since the
   free read it -- would not catch it (a stale free writing into a live block
   of the new class). Read after the word, the geometry is the word's or
   newer, and newer means the word changed -- which the second look sees
   because an acquire fence follows the geometry reads (hhi_page_geometry_seen)
   and a release fence precedes the geometry writes (hhi_page_setup_class):
   a free that read the new geometry then reads a word no older than the
   pool's 0. (On x86-64 both fences are compiler barriers only.) */
HH_INLINE uint32_t hhi_page_geometry(const uint32_t *field) { return __atomic_load_n(field, __ATOMIC_RELAXED); }
HH_INLINE void hhi_page_geometry_set(uint32_t *field, uint32_t v) { __atomic_store_n(field, v, __ATOMIC_RELAXED); }
/* After a free's geometry reads, before its claim and second look (above). */
HH_INLINE void hhi_page_geometry_seen(void) { atomic_thread_fence(memory_order_acquire); }
HH_INLINE uint32_t hhi_page_carved_last(const hhi_bpage *pg) { return __atomic_load_n(&pg->carved_last, __ATOMIC_RELAXED); }
HH_INLINE void hhi_page_carved_last_set(hhi_bpage *pg, uint32_t n) {
    __atomic_store_n(&pg->carved_last, (uint16_t)n, __ATOMIC_RELAXED);
}
_Static_assert(HHI_PAGE_SIZE / 16 <= UINT16_MAX, "carved_last fits 16 bits");
HH_INLINE uint32_t hhi_block_index(const hhi_bpage *pg, uintptr_t a) {
    return (uint32_t)(((uint64_t)(a & HHI_PAGE_MASK) * hhi_page_geometry(&pg->recip)) >> 32);
}
/* offset * recip in one multiply gives both the block index (high half) and
   whether offset is a block start (low half): with recip = floor(2^32/bs)+1
   = (2^32 + e)/bs, 0 < e <= bs, offset = i*bs + j (0 <= j < bs) gives
   offset*recip = i*2^32 + i*e + j*recip. A block start (j = 0) leaves
   i*e <= i*bs < 64 KiB in the low half; any other offset leaves at least
   recip > 2^32/32 KiB = 128 KiB there. So "low half < 64 KiB" tests the
   block start without a second multiply (checked for every class and offset
   by the test block_start_test_is_exact). */
HH_INLINE uint64_t hhi_block_mul(const hhi_bpage *pg, uintptr_t a) {
    return (uint64_t)(a & HHI_PAGE_MASK) * hhi_page_geometry(&pg->recip);
}
HH_INLINE bool hhi_block_mul_is_start(uint64_t m) { return (uint32_t)m < HHI_PAGE_SIZE; }
/* Whether the block of a block start's m (above) lies below the carved
   count of page word w: its index (m >> 32) is below carved iff m <=
   (carved - 1) << 32 | 0xFFFF for a start (low half below the page size), so
   the word's low 32 bits may carry the class and the generation as long as
   they stay above 0xFFFF (0xFF000000 | ...); a word of 0 (nothing carved)
   covers nothing. No shift: m against the word, one compare. */
HH_INLINE bool hhi_word_covers(uint64_t w, uint64_t m) { return m < w; }
_Static_assert(HHI_PAGE_SIZE <= 0xFF000000u, "a start's low half stays below the word's");
_Static_assert(HHI_SMALL_MAX <= HHI_PAGE_SIZE / 2, "block-start test: recip > 2 * page size");
/* The free tag of block b (see the layout note): its address XOR the key,
   whose top bit no user-space pointer has, so that a live block holding a
   pointer to itself in its second word (an empty list head) never reads as
   free; the key's other bits are random, so no fixed pattern does either. */
HH_INLINE uint64_t hhi_block_tag(uint64_t key, const void *b) { return (uint64_t)(uintptr_t)b ^ key; }

/* The one transition a free makes: the tag goes in, atomically, so that of
   two threads freeing one block at once exactly one sees another value and
   the other a double free (a load then a store let both pass). Relaxed: the
   block's bytes are published by the locks and caches it moves through, not
   by its tag. Returns the word's old value: this call claimed the block
   unless it is the tag. The word is opened for the
   tools first: a user may never have written it (memcheck), and a second
   free finds it no-access -- hhi_binned_free_unclaimed closes it again. */
/* The exchange alone. Under the tools, a second free racing the first
   opens the word while the first closes its block: ASan does not check this
   access and memcheck reports nothing around it (hhi_block_claim), as the
   state byte, outside the block, needed neither. */
static inline HH_TRACK_UNCHECKED uint64_t hhi_tag_exchange(_Atomic uint64_t *w, uint64_t v) {
    /* Acquire: the caller's second look at the page comes after it. */
    return atomic_exchange_explicit(w, v, memory_order_acquire);
}
HH_INLINE uint64_t hhi_block_claim(hhi_bblock *b, uint64_t tag) {
    hh_track_quiet_begin();
    hh_track_defined(&b->tag, sizeof b->tag);
    uint64_t seen = hhi_tag_exchange(&b->tag, tag);
    hh_track_quiet_end();
    return seen;
}
/* A block leaves a bin for the user: it is live from now on (not tagged). */
HH_INLINE void hhi_block_untag(hhi_bblock *b) {
    hh_track_undefined(&b->tag, sizeof b->tag);
    atomic_store_explicit(&b->tag, 0, memory_order_relaxed);
}
/* Whether a carved block of a class page is free (tagged), for the walks
   and a bad free's diagnosis: reads a word that is a user's while the block
   is live -- its owner may be handing it out and writing it meanwhile -- so
   the tools neither see the read nor change what they know of the word. */
HH_INLINE bool hhi_block_is_free(hhi_bblock *b, uint64_t key) {
    return hh_track_peek_u64(&b->tag) == hhi_block_tag(key, b);
}

/* Free-list links live in the first word of a free block, which memcheck sees
   as no-access: open it for the one access. */
HH_INLINE hhi_bblock *hhi_block_next(hhi_bblock *b) {
    hh_track_defined(b, sizeof b->next);
    hhi_bblock *n = b->next;
    hh_track_noaccess(b, sizeof b->next);
    return n;
}
HH_INLINE void hhi_block_set_next(hhi_bblock *b, hhi_bblock *n) {
    hh_track_undefined(b, sizeof b->next);
    b->next = n;
    hh_track_noaccess(b, sizeof b->next);
}
/* A fresh block goes onto a thread-cache bin in front of n, tagged free
   (key: hhi_bg.tag_key). */
HH_INLINE void hhi_block_set_cached(hhi_bblock *b, hhi_bblock *n, uint64_t key) {
    hh_track_undefined(b, sizeof *b);
    b->next = n;
    atomic_store_explicit(&b->tag, hhi_block_tag(key, b), memory_order_relaxed);
    hh_track_noaccess(b, sizeof *b);
}

/* A block leaves the allocator (memcheck chunk + debug fill). */
HH_INLINE void hhi_on_alloc(void *p, size_t usable) {
    hh_track_alloc(&hhi_bg, p, usable);
    if (HH_DEBUG >= 2) memset(p, HH_FILL_ALLOC, usable);
}
/* A block comes back (debug fill past its link and tag, then memcheck
   no-access). */
HH_INLINE void hhi_on_free(void *p, size_t usable) {
    if (HH_DEBUG >= 2) memset((char *)p + sizeof(hhi_bblock), HH_FILL_FREED, usable - sizeof(hhi_bblock));
    hh_track_free(&hhi_bg, p, usable);
}

/* ---------------------------------------------------------------------------
   Slow paths and internals
--------------------------------------------------------------------------- */
/* binned.c */
HH_INTERNAL HH_NOINLINE void *hhi_binned_malloc_slow(size_t size, unsigned flags);
HH_INTERNAL HH_NOINLINE void  hhi_binned_free_slow(void *p, unsigned flags);
/* A free of a block of a class page whose claim found it tagged: a double free. */
HH_INTERNAL HH_NOINLINE void  hhi_binned_free_unclaimed(void *p, unsigned flags);
/* A free whose claim tagged p (its old second word: seen) while p's page
   left its class (pooled, perhaps taken by another): only a bad free gets
   there. Puts the word back if nothing wrote it since, and reports. */
HH_INTERNAL HH_NOINLINE void  hhi_binned_free_raced(void *p, uint64_t seen, unsigned flags);
/* A free whose claim succeeded but whose page's word changed since it read
   cc: the same class in the same tenure (generation) with p still carved (a
   take published more of the page in between) goes on as a claimed free;
   anything else is hhi_binned_free_raced. */
HH_INTERNAL HH_NOINLINE void  hhi_binned_free_recheck(void *p, uint64_t seen, uint64_t cc, unsigned flags);
/* The claim of a free of p, a carved block start of page pg, whose word
   read cc before: true when the free is the caller's to finish (the claim
   tagged p and the page is unchanged); false when it ended here -- a double
   free reported, or a changed page word passed to hhi_binned_free_recheck,
   which finishes the free or reports it. The fast and the slow free share
   it. */
HH_INLINE bool hhi_block_free_claim(void *p, const hhi_bpage *pg, uint64_t cc, uint64_t key, unsigned flags) {
    uint64_t tag = hhi_block_tag(key, p);
    uint64_t seen = hhi_block_claim((hhi_bblock *)p, tag);
    if (hh_unlikely(seen == tag)) {
        /* Report what the claim saw: looking again could find the block
           handed out anew in between and free it. */
        hhi_binned_free_unclaimed(p, flags);
        return false;
    }
    /* The page's word again: unchanged, the page still serves its class
       with p carved. A bad free racing the page's way back to the pool
       (after the caller's test) fails here -- a legitimate free cannot race
       it, its block keeps the page in use -- and so, now and then, does a
       free racing the publication of more of its page, which
       hhi_binned_free_recheck tells apart. */
    if (hh_unlikely(hhi_page_word(pg) != cc)) {
        hhi_binned_free_recheck(p, seen, cc, flags);
        return false;
    }
    return true;
}
/* The rest of a free whose claim succeeded (it wrote the tag). It finds p's page
   again itself: passing it kept two more registers live across the fast
   path (a push and a pop on every free). */
HH_INTERNAL HH_NOINLINE void  hhi_binned_free_claimed(void *p);
HH_INTERNAL void  *hhi_binned_memalign(size_t align, size_t size, unsigned flags);
HH_INTERNAL void  *hhi_binned_realloc(void *p, size_t size, unsigned flags);
HH_INTERNAL void  *hhi_binned_calloc(size_t count, size_t size, unsigned flags);
/* Usable size of p; 0 with *st set when p is not a live block. */
HH_INTERNAL size_t hhi_binned_usable(const void *p, hh_status *st);
/* Reports s (message unless quiet per flags) and returns s. */
HH_INTERNAL hh_status hhi_binned_fail(hh_status s, unsigned flags, const char *msg, const void *p);
/* hh_binned_set_decay_ms; start_now false: the first period starts at
   decay's first look instead of now (decay_next_ns 0), so the caller reads
   no clock -- the shim at load, which would otherwise fault a window of
   libc's text into every process (hh_platform.h: hhi_os_entropy). */
HH_INTERNAL hh_status hhi_binned_set_decay(uint32_t ms, bool start_now);

#if HH_TESTING
/* Test hooks, set by a test while other threads (the purge thread, a
   test's workers) may call through them: atomic, read relaxed. */
typedef void (*hhi_test_hook)(void);
typedef void (*hhi_test_class_hook)(unsigned c);
/* A free calls it between reading the registry and reading the page
   metadata (the window in which a trim on another thread may retire the
   span). Null: none. */
HH_INTERNAL _Atomic(hhi_test_hook) hhi_binned_test_lookup_hook;
/* A take calls it (class c) just before it writes the fresh blocks it
   reserved (binned_page.c, fresh_link). Null: none. */
HH_INTERNAL _Atomic(hhi_test_class_hook) hhi_binned_test_carve_hook;
/* The free fast path calls it with p (a preemption there): at 0 between
   its read of the page word and its read of the page's geometry, at 1 after
   that, before its claim. Null: none. */
typedef void (*hhi_test_free_hook)(void *p, int at);
HH_INTERNAL _Atomic(hhi_test_free_hook) hhi_binned_test_free_hook;
HH_INLINE void hhi_test_free_hook_call(void *p, int at) {
    hhi_test_free_hook hook = atomic_load_explicit(&hhi_binned_test_free_hook, memory_order_relaxed);
    if (hook) hook(p, at);
}
#endif

/* binned_page.c (class and pool layer) */
HH_INTERNAL bool     hhi_binned_init(void);        /* idempotent; false if the OS refused */
HH_INTERNAL void     hhi_page_setup_class(hhi_bpage *pg, unsigned c);
/* Takes up to `want` blocks of class c (class lock taken inside), links them
   and returns the count (0: out of memory). Each is tagged, ready for a
   thread-cache bin. Freed blocks
   come first; fresh (uncarved) ones at most HHI_CARVE_BYTES' worth (one OS
   page, at least one block), after which it returns what it has. */
HH_INTERNAL uint32_t hhi_class_take(unsigned c, hhi_bblock **head, uint32_t want);
/* A thread-cache refill of class c under one lock acquisition: the newest
   transfer batch if it holds at most max blocks, else up to want blocks
   from the pages (hhi_class_take; want 0: none). The count (0: out of
   memory, or no batch and want 0). */
HH_INTERNAL uint32_t hhi_class_refill(unsigned c, hhi_bblock **head, uint32_t max, uint32_t want);
/* Returns a linked list of n blocks of class c to their pages. */
HH_INTERNAL void     hhi_class_put(unsigned c, hhi_bblock *head, uint32_t n);
/* Pushes a batch from a full thread-cache bin (its older half, or all of
   it; n >= 1 blocks of class c, NULL-terminated, tagged) onto
   the class's transfer stack: O(1), but for a full stack, whose oldest
   batch then goes back to its pages. */
HH_INTERNAL void     hhi_class_xfer_put(unsigned c, hhi_bblock *head, uint32_t n);
HH_INTERNAL void     hhi_lock_all(void);     /* classes, pool, large (fork, check) */
HH_INTERNAL void     hhi_unlock_all(void);
/* Trim lock held (both drop and retake the pool lock around each madvise).
   trim: every dirty pool page; decay: those that joined the pool before
   tick `older_than`; then wholly free spans retire; until the deadline. */
HH_INTERNAL size_t   hhi_pool_trim(uint64_t deadline_ns);
HH_INTERNAL size_t   hhi_pool_decay(uint32_t older_than, uint64_t deadline_ns);
/* Decay: a pass if one is due and no purge thread runs (that one does the
   passes; cheap check otherwise; sampled: the clock is read on every 32nd
   call only -- small-block refills and flushes). Holds
   no lock on entry, and no thread-cache bin is half updated: it may start
   the purge thread, and pthread_create may allocate. */
HH_INTERNAL void     hhi_decay_maybe(bool sampled);
#if HH_TESTING
HH_INTERNAL _Atomic uint64_t hhi_test_large_moves;   /* grows of a cached extent by moving its pages */
/* pool_get finds no page (as when the OS refuses a new span). */
HH_INTERNAL _Atomic bool hhi_test_pool_dry;
/* Takes that found room only on pages being carved, and no page in the
   pool, and waited for a publication. */
HH_INTERNAL _Atomic uint64_t hhi_test_take_waits;
/* Called first in every hhi_decay_maybe: a test allocates and frees there,
   as the purge thread's creation may. */
HH_INTERNAL _Atomic(hhi_test_hook) hhi_binned_test_decay_hook;
/* Decay passes run by the program's own slow paths (hhi_decay_maybe). */
HH_INTERNAL _Atomic uint64_t hhi_test_decay_passes_program;
/* Counts of what decay holds made to decide the purge thread's start. */
HH_INTERNAL _Atomic uint64_t hhi_test_purge_counts;
#endif
/* The pass alone, without starting the purge thread (the thread's own);
   true if this call ran one. */
HH_INTERNAL bool     hhi_decay_pass(bool sampled);
/* One more bounded slice of a pass that ran out of budget; false when
   nothing is left (or a trim holds the trim lock: it does the work). */
HH_INTERNAL bool     hhi_decay_continue(void);

/* binned_purge.c: the background purge thread (hh_binned_set_purge_thread). */
enum { HHI_PURGE_OFF = 0, HHI_PURGE_WANTED, HHI_PURGE_STARTING, HHI_PURGE_RUNNING };
/* HHI_PURGE_*: one relaxed load. */
HH_INLINE int hhi_purge_state(void) { return atomic_load_explicit(&hhi_bg.purge_state, memory_order_relaxed); }
/* Sets g.decay_work and wakes the purge thread if it sleeps with nothing
   to do (then one futex wake: once per idle spell). Any lock but the purge
   thread's own may be held (it is the innermost, rule 8). */
HH_INTERNAL HH_NOINLINE void hhi_decay_work_noted(void);
/* Notes that decay has something to give back (class, pool or large lock
   held): one load; the rest only the first time after the purge thread
   cleared the flag (hhi_decay_work_noted). */
HH_INLINE void hhi_decay_work_note(void) {
    if (!atomic_load_explicit(&hhi_bg.decay_work, memory_order_relaxed)) hhi_decay_work_noted();
}
/* The same, for `bytes` more that decay now holds (a dirty pool page, a
   cached mapping, a tail): while the thread is wanted and not yet started
   they are counted towards starting it (hhi_decay_maybe). */
HH_INLINE void hhi_decay_work_note_bytes(size_t bytes) {
    if (hh_unlikely(hhi_purge_state() == HHI_PURGE_WANTED))
        atomic_fetch_add_explicit(&hhi_bg.decay_noted, bytes, memory_order_relaxed);
    hhi_decay_work_note();
}
/* The same for what a pass tidies but that gives the OS nothing by itself
   (a transfer batch, a class's spare page): it wakes a running thread's
   idle spell -- a pass walks the batch back and pools the page -- but never
   lets a slow path start the thread (hhi_decay_maybe starts it at
   HHI_PURGE_START_BYTES held, which these do not count).
   Without a thread the slow paths' passes tidy them; a thread that
   starts later finds them in hhi_decay_has_work. */
HH_INLINE void hhi_decay_work_note_running(void) {
    if (hhi_purge_state() == HHI_PURGE_RUNNING) hhi_decay_work_note();
}
/* Whether decay holds anything it may give back later (a dirty pool page, a
   spare page or transfer batch of a class, a cached extent or a tail, an
   unfinished pass). Takes the class, pool and large locks one at a time. */
HH_INTERNAL bool     hhi_decay_has_work(void);
/* The bytes decay would give the OS if it ran now, at most: dirty pool
   pages, cached large mappings and the tails of live large blocks. Takes
   the pool and the large lock one after the other. */
HH_INTERNAL size_t   hhi_decay_held_bytes(void);

/* binned_purge.c, the rest of the thread's interface. Wakes a running
   thread so that it plans its sleep by the new decay period (it slept by
   the old one, up to 60 s). */
HH_INTERNAL void     hhi_purge_nudge(void);
HH_INTERNAL void     hhi_purge_start(void);      /* starts it if still wanted (no lock held) */
HH_INTERNAL void     hhi_purge_fork_prepare(void);
HH_INTERNAL void     hhi_purge_fork_parent(void);
HH_INTERNAL void     hhi_purge_fork_child(void);
#if HH_TESTING
HH_INTERNAL bool     hhi_purge_running(void);
/* Wakes the thread until it has ended a pass begun after the call; returns
   its pass count (unchanged when no thread runs). */
HH_INTERNAL uint64_t hhi_purge_kick_and_wait(void);
/* Times the purge thread woke (a timeout, a kick or a note). */
HH_INTERNAL _Atomic uint64_t hhi_test_purge_wakeups;
/* Whether it sleeps with nothing to do (no timeout). */
HH_INTERNAL bool     hhi_purge_idle(void);
#endif

/* binned_tcache.c */
HH_INTERNAL hhi_tcache *hhi_tcache_get(void);      /* NULL (never &hhi_tc_empty): use the cacheless path */
/* Cuts bin c after its `keep` newest blocks (keep < the bin's length) and
   returns the older rest, NULL-terminated; the count is the caller's to set. */
HH_INTERNAL hhi_bblock *hhi_bin_detach_older(hhi_tcache *tc, unsigned c, uint32_t keep);
/* Owner: bin c adopts g.cap[c] if it changed since the bin last did
   (flushing what is above it), keeping its blocks and hits. */
HH_INTERNAL void     hhi_tcache_cap_refresh(hhi_tcache *tc, unsigned c);
/* Owner: bin c's cap becomes cap (<= its limit_cap), flushing the blocks
   above it, keeping the rest and its hits. */
HH_INTERNAL void     hhi_tcache_cap_set(hhi_tcache *tc, unsigned c, uint32_t cap);
HH_INTERNAL void     hhi_tcache_compute_caps(size_t limit);
HH_INTERNAL void     hhi_tcache_fork_child(void);   /* drops the caches of threads the child lacks */

/* binned_large.c */
HH_INTERNAL void    *hhi_large_alloc(size_t size, size_t align, unsigned flags);
HH_INTERNAL hh_status hhi_large_free(uintptr_t a, unsigned flags);
HH_INTERNAL size_t   hhi_large_usable(uintptr_t a);   /* 0 if not a live large block */
/* Grows the live large block at a in place of a copy (its pages move to a
   larger mapping); the new user pointer, or NULL with nothing changed. */
HH_INTERNAL void    *hhi_large_grow(uintptr_t a, size_t size);
/* A pointer whose chunk reads LARGE_FREED: HH_E_DOUBLE_FREE if it lies in
   the cached mapping there, else HH_E_FOREIGN_POINTER. */
HH_INTERNAL hh_status hhi_large_freed_status(uintptr_t a);
HH_INTERNAL size_t   hhi_large_trim(uint64_t deadline_ns);   /* unmaps the large cache until the deadline
                                                                (0: none); bytes */
/* Unmaps cached mappings freed before freed_before_ns, until the deadline. */
HH_INTERNAL size_t   hhi_large_decay(uint64_t freed_before_ns, uint64_t deadline_ns);

/* ---------------------------------------------------------------------------
   Fast paths
--------------------------------------------------------------------------- */
/* malloc with the slow path given (a constant: the shim's sets errno, so
   malloc stays a leaf without a stack frame). hhi_tc_self is never NULL
   (hhi_tc_empty's bins always miss). */
HH_INLINE void *hhi_bmalloc_fast_with(size_t size, unsigned flags, void *(*slow)(size_t, unsigned)) {
    hhi_tcache *tc = hhi_tc_self;
    if (hh_likely(size <= HHI_SMALL_MAX)) {
        size_t c = hhi_size_class(size);   /* size_t: gcc then folds the arrays' offsets into the addressing */
        hhi_bblock *b = tc->head[c];
        if (hh_likely(b != NULL)) {
            tc->head[c] = hhi_block_next(b);
            hhi_bin_pop_note(tc, c);
            hhi_block_untag(b);
            hhi_on_alloc(b, hhi_class_size[c]);
            return b;
        }
    }
    return slow(size, flags);
}
HH_INLINE void *hhi_bmalloc_fast(size_t size, unsigned flags) {
    return hhi_bmalloc_fast_with(size, flags, hhi_binned_malloc_slow);
}

/* free: registry, page, carved block start, the claim (the tag goes in),
   the page's second look, then a push onto the bin if it has room. hhi_tc_empty's registry_len is 0 and its bins
   have no room: a thread without a cache goes to the slow path at once. */
HH_INLINE void hhi_bfree_fast(void *p, unsigned flags) {
    hhi_tcache *tc = hhi_tc_self;
    uintptr_t a = (uintptr_t)p;
    uintptr_t chunk = a >> HHI_SPAN_SHIFT;   /* one shift for the range check and the registry index */
    /* The claim below is a locked instruction on the block's first line,
       which waits for the line and lets nothing after it start: asked for
       now, the line (of a long-lived block, cold) arrives while the
       registry and the page are read. A hint: it never faults, whatever p
       is. */
    HH_PREFETCH_W(p);
    if (hh_likely(chunk < tc->registry_len &&
                  atomic_load_explicit(&tc->registry[chunk], memory_order_relaxed) == HHI_REG_SPAN)) {
        hhi_bpage *pg = hhi_page_of(a);
        /* carved is 0 on a pooled page: its frees take the slow path. The
           word first, then the geometry (hhi_page_geometry). */
        uint64_t cc = hhi_page_word(pg);
#if HH_TESTING
        hhi_test_free_hook_call(p, 0);
#endif
        uint64_t m = hhi_block_mul(pg, a);
        hhi_page_geometry_seen();
#if HH_TESTING
        hhi_test_free_hook_call(p, 1);
#endif
        if (hh_likely(hhi_word_covers(cc, m) && hhi_block_mul_is_start(m))) {
            size_t c = hhi_word_cls(cc);   /* a class: carved > 0 */
            if (hh_unlikely(!hhi_block_free_claim(p, pg, cc, tc->tag_key, flags))) return;
            if (hh_likely((hhi_owner_read(&tc->ops[c]) & HHI_BIN_COUNT_MASK) != 0)) {   /* room left */
                hhi_on_free(p, pg->block_size);
                hhi_block_set_next((hhi_bblock *)p, tc->head[c]);   /* the claim wrote the tag */
                tc->head[c] = (hhi_bblock *)p;
                hhi_owner_add(&tc->ops[c], (uint64_t)-1);   /* room - 1 */
                return;
            }
            hhi_binned_free_claimed(p);
            return;
        }
    }
    hhi_binned_free_slow(p, flags);
}

#endif /* HH_BINNED_INTERNAL_H */
