/* binned_large.c -- blocks above 32 KiB (or with an alignment no class can
 * give) mapped straight from the OS, and the cache of freed mappings.
 *
 * A block's mapping starts at a 4 MiB boundary with a hhi_blarge header; the
 * user pointer is base + offset (64, or the alignment). The registry byte of
 * the first 4 MiB chunk says LARGE, so free finds the header in O(1) from the
 * pointer by masking.
 *
 * The large cache. Freed mappings are not unmapped: they become extents of
 * address space, mapped and mostly resident, kept for reuse (at most
 * HHI_LCACHE_MAX extents, HHI_LCACHE_BYTES in all), because mapping and
 * faulting fresh pages costs far more than a big block's use in frame-style
 * code: blocks of 5-25 MiB churned by a program cost one mmap, one munmap and
 * thousands of page faults each without the cache. The cache works like a
 * page heap over whatever ranges it holds:
 *  - reuse by best fit: the smallest extent that holds the request serves it;
 *    an extent much larger is split at the first 4 MiB boundary past the
 *    request (headers need that boundary) and the tail stays cached, resident,
 *    as its own extent;
 *  - coalescing: a freed block that touches a cached extent (the tail split
 *    off it earlier, say) merges with it, so the next big request finds one
 *    extent again instead of two halves too small;
 *  - growth: a request no extent holds takes the largest cached extent and
 *    moves its pages (mremap, no copy, no fault) to the head of a fresh
 *    mapping, so only the part beyond it faults; a realloc that grows a
 *    block of 512 KiB or more moves the block's own pages the same way
 *    (hhi_large_grow);
 *  - the slack a reused block gets beyond its request (up to the 4 MiB
 *    boundary, or a remainder too small to keep) stays with the block when
 *    it is at most half the request; a larger slack becomes the block's
 *    tail: mapped with it, not part of it (not usable), and given back by
 *    decay or trim like a cached extent of the same age (a tail is unmapped
 *    whole, on whichever thread runs the pass: the purge thread when there
 *    is one), or with the block when it is freed (the whole mapping, tail
 *    included, goes back to the cache). Decommitting it in the malloc that
 *    reused the extent put an madvise on the program's thread; at most
 *    HHI_TAILS_MAX blocks hold a tail, and past that the slack is
 *    decommitted there as before. (Decommitting every slack over a quarter
 *    cost the bench_binned `large` workload a third more page faults for 1%
 *    of RSS.)
 * Memory goes back when the cache is over its caps (the oldest extent first),
 * through hh_binned_trim, and through decay: an extent left unused for a
 * period is unmapped, 4 MiB at a time from its top so a bounded pass keeps
 * its deadline however large extents grew by merging. A merged extent's age
 * is its parts' ages weighted by their bytes (a small fresh free beside a big
 * idle extent does not keep the whole resident for another period).
 *
 * Registry. Every chunk a cached extent touches reads LARGE_FREED (a free of
 * any pointer into it is a double free: the list is searched under the lock,
 * and a pointer in the part of a chunk the extent does not cover is foreign);
 * chunks a live block covers beyond its first read NONE. Before any range
 * goes back to the OS its chunks are set to NONE under g.large_lock (anyone
 * may map the range next: a pointer there must read as foreign). Extents and
 * blocks start at chunk boundaries, so no chunk is touched by two of them. */
#include "binned_internal.h"

#include "../common/hh_error.h"

/* A split leaves a tail extent only if it has at least this many bytes
   (smaller tails stay with the block as slack): a tail this small could serve
   few requests and would take one of the cache's HHI_LCACHE_MAX places. */
#define LCACHE_TAIL_MIN  ((size_t)256 << 10)
/* Trim and decay unmap at most this much between two deadline checks:
   unmapping a populated 4 MiB takes 0.1-0.5 ms, a merged extent can hold
   hundreds of MiB. */
#define LCACHE_PIECE     HHI_SPAN_SIZE
/* A request below this uses a cached extent only if its slack is small
   (at most a quarter): splitting a big extent to give a 64 KiB block a
   4 MiB chunk would decommit almost all of it. */
#define LCACHE_SMALL_REQ (HHI_SPAN_SIZE / 2)

/* hhi_large_grow moves blocks from this size up; below it a copy costs
   about what its two system calls (mmap, mremap) cost. */
#define LARGE_GROW_MIN   ((size_t)512 << 10)

/* A range to unmap once the large lock is let go. */
typedef struct lrange { char *p; size_t size; } lrange;

/* ---------------------------------------------------------------------------
   Registry and unmapping
--------------------------------------------------------------------------- */
/* Sets the registry byte of every chunk [base, base + size) touches to v
   (large lock held; size > 0). */
static void registry_mark(uintptr_t base, size_t size, unsigned v) {
    uintptr_t last = (base + size - 1) >> HHI_SPAN_SHIFT;
    for (uintptr_t c = base >> HHI_SPAN_SHIFT; c <= last; c++)
        atomic_store_explicit(&hhi_bg.registry[c], (uint8_t)v, memory_order_release);
}

/* Unmaps [p, p + size), a range no longer listed anywhere whose registry
   bytes read NONE. The range is made accessible first: ASan keeps poison
   across munmap, and the range may come back as one of our spans. */
static void large_unmap_range(void *p, size_t size) {
    hh_track_undefined(p, size);
    hhi_os_unmap(p, size);
}

/* Takes entry i off g.tails (large lock held); the last fills its place. */
static void tails_drop_at(uint32_t i) { hhi_bg.tails[i] = hhi_bg.tails[--hhi_bg.n_tails]; }

/* Takes live block h off g.tails (large lock held; h is on it). */
static void tails_remove(const hhi_blarge *h) {
    for (uint32_t i = 0; i < hhi_bg.n_tails; i++)
        if (hhi_bg.tails[i] == h) {
            tails_drop_at(i);
            return;
        }
    hh_assert_internal(!"a block with a tail is on g.tails");
}

/* The index in g.tails of the tail freed longest ago; -1: none. */
static int tails_oldest(void) {
    int old = -1;
    for (uint32_t i = 0; i < hhi_bg.n_tails; i++)
        if (old < 0 || hhi_bg.tails[i]->freed_ns < hhi_bg.tails[old]->freed_ns) old = (int)i;
    return old;
}

/* Takes live block h off g.large (and g.tails) and its counts (large lock
   held): the inverse of large_register's list half. h->tail stays, for the
   caller. */
static void large_unlink(hhi_blarge *h) {
    if (h->prev) h->prev->next = h->next;
    else hhi_bg.large = h->next;
    if (h->next) h->next->prev = h->prev;
    hhi_bg.large_count--;
    hhi_bg.large_bytes -= h->map_size - h->offset;
    hhi_bg.large_mapped -= h->map_size + h->tail;
    if (h->tail) tails_remove(h);
}

/* A live block's mapping goes back to the OS (not cached): its registry
   bytes become NONE under the large lock, before it is unmapped. */
static void large_forget(hhi_blarge *h) {
    uintptr_t base = (uintptr_t)h;
    if (h->offset >= HHI_SPAN_SIZE)
        atomic_store_explicit(&hhi_bg.registry[(base + h->offset) >> HHI_SPAN_SHIFT], HHI_REG_NONE,
                              memory_order_release);
    atomic_store_explicit(&hhi_bg.registry[base >> HHI_SPAN_SHIFT], HHI_REG_NONE, memory_order_release);
}

/* Links a fresh header at h (a block of map_size bytes, user pointer h +
   offset, then `tail` more bytes of its mapping idle since tail_ns) into
   g.large and registers it. The chunks it covers beyond the first read NONE
   already. Returns false if g.tails was full: the tail is then part of the
   block (map_size + tail), and the caller decides what to do with it. */
static bool large_register(hhi_blarge *h, size_t map_size, size_t offset, size_t size, size_t tail,
                           uint64_t tail_ns) {
    h->magic = HHI_LARGE_MAGIC;
    h->offset = offset;
    h->size = size;
    h->freed_ns = tail_ns;
    hhi_lock_acquire(&hhi_bg.large_lock);
    bool kept = tail == 0 || hhi_bg.n_tails < HHI_TAILS_MAX;
    if (!kept) {
        map_size += tail;
        tail = 0;
    }
    h->map_size = map_size;
    h->tail = tail;
    if (tail) {
        hhi_bg.tails[hhi_bg.n_tails++] = h;
        hhi_decay_work_note_bytes(tail);
    }
    h->prev = NULL;
    h->next = hhi_bg.large;
    if (h->next) h->next->prev = h;
    hhi_bg.large = h;
    hhi_bg.large_count++;
    hhi_bg.large_bytes += map_size - offset;
    hhi_bg.large_mapped += map_size + tail;
    uintptr_t base = (uintptr_t)h;
    if (offset >= HHI_SPAN_SIZE)
        atomic_store_explicit(&hhi_bg.registry[(base + offset) >> HHI_SPAN_SHIFT], HHI_REG_LARGE_FAR,
                              memory_order_release);
    atomic_store_explicit(&hhi_bg.registry[base >> HHI_SPAN_SHIFT], HHI_REG_LARGE, memory_order_release);
    hhi_lock_release(&hhi_bg.large_lock);
    return kept;
}

/* A fresh mapping for a large block (NULL: none) is advised to use huge
   pages when the program asked for it. The advice stays with the pages:
   cached for reuse, split, merged or moved by mremap, they keep it. */
static void large_advise(void *base, size_t size) {
    if (base != NULL && atomic_load_explicit(&hhi_bg.large_huge, memory_order_relaxed)) hhi_os_hugepages(base, size, true);
}

/* ---------------------------------------------------------------------------
   The cache's extents (all under g.large_lock)
--------------------------------------------------------------------------- */
static void lcache_unlink(hhi_blarge *e) {
    if (e->prev) e->prev->next = e->next;
    else hhi_bg.lcache = e->next;
    if (e->next) e->next->prev = e->prev;
    hhi_bg.n_lcache--;
    hhi_bg.lcache_bytes -= e->map_size;
}

/* Takes extent e off the cache whole: its chunks read NONE (a stale free
   there is foreign from now on) and its magic goes, for whoever maps or
   reuses the range next. Returns the range, for the caller to unmap after
   the lock or to reuse. */
static lrange lcache_evict(hhi_blarge *e) {
    size_t n = e->map_size;
    lcache_unlink(e);
    registry_mark((uintptr_t)e, n, HHI_REG_NONE);
    e->magic = 0;
    return (lrange){ (char *)e, n };
}

/* Makes [e, e + size) a cached extent freed at freed_ns: header, list,
   counts, registry. e is 4 MiB aligned, size a page multiple; the caller
   made room (lcache_make_room). */
static void lcache_link(hhi_blarge *e, size_t size, uint64_t freed_ns) {
    /* The header may sit where a freed block's bytes were (a split tail, a
       merge): memcheck/ASan hold those as no-access. */
    hh_track_undefined(e, sizeof *e);
    e->magic = HHI_LCACHE_MAGIC;
    e->map_size = size;
    e->offset = 0;
    e->size = 0;
    e->freed_ns = freed_ns;
    e->prev = NULL;
    e->next = hhi_bg.lcache;
    if (e->next) e->next->prev = e;
    hhi_bg.lcache = e;
    hhi_bg.n_lcache++;
    hhi_bg.lcache_bytes += size;
    registry_mark((uintptr_t)e, size, HHI_REG_LARGE_FREED);
}

/* The extent freed longest ago, NULL if the cache is empty. The list is
   short (HHI_LCACHE_MAX) and merges reorder ages, so it is scanned. */
static hhi_blarge *lcache_oldest(void) {
    hhi_blarge *old = NULL;
    for (hhi_blarge *e = hhi_bg.lcache; e != NULL; e = e->next)
        if (old == NULL || e->freed_ns < old->freed_ns) old = e;
    return old;
}

/* Evicts the oldest extents until one more extent of `bytes` fits both caps;
   their ranges go to drop[*nd...] (unmapped by the caller after the lock),
   their registry bytes to NONE now. */
static void lcache_make_room(size_t bytes, lrange *drop, unsigned *nd) {
    while (hhi_bg.n_lcache > 0 &&
           (hhi_bg.n_lcache >= HHI_LCACHE_MAX || hhi_bg.lcache_bytes + bytes > HHI_LCACHE_BYTES)) {
        drop[(*nd)++] = lcache_evict(lcache_oldest());
    }
}

/* The age of two merged extents: their free times weighted by their bytes
   (a double: the product of a time and a size overflows 64 bits). */
static uint64_t age_mix(uint64_t t1, size_t n1, uint64_t t2, size_t n2) {
    if (t1 > t2) {
        uint64_t t = t1; t1 = t2; t2 = t;
        size_t n = n1; n1 = n2; n2 = n;
    }
    return t1 + (uint64_t)((double)(t2 - t1) * ((double)n2 / ((double)n1 + (double)n2)));
}

/* A freed block's whole mapping [base, base + size) joins the cache, merged
   with the cached extents it touches; the oldest extents are evicted to make
   room (into drop). */
static void lcache_insert(char *base, size_t size, uint64_t now, lrange *drop, unsigned *nd) {
    uint64_t t = now;
    for (hhi_blarge *e = hhi_bg.lcache, *next; e != NULL; e = next) {
        next = e->next;
        char *ep = (char *)e;
        if (ep + e->map_size == base || ep == base + size) {
            t = age_mix(e->freed_ns, e->map_size, t, size);
            if (ep < base) base = ep;
            size += e->map_size;
            lcache_unlink(e);
            e->magic = 0;   /* it may be the inner header now */
        }
    }
    /* Merging can pass the byte cap (each part was within it): the top goes. */
    if (size > HHI_LCACHE_BYTES) {
        /* Only the chunks that leave go NONE (the cap is whole chunks and an
           extent starts on one): a stale free into the part that stays,
           racing this without the lock, must still read LARGE_FREED. */
        registry_mark((uintptr_t)base + HHI_LCACHE_BYTES, size - HHI_LCACHE_BYTES, HHI_REG_NONE);
        drop[(*nd)++] = (lrange){ base + HHI_LCACHE_BYTES, size - HHI_LCACHE_BYTES };
        size = HHI_LCACHE_BYTES;
    }
    lcache_make_room(size, drop, nd);
    lcache_link((hhi_blarge *)(void *)base, size, t);
}

/* ---------------------------------------------------------------------------
   Allocation
--------------------------------------------------------------------------- */
/* An alignment above 2 MiB: the user pointer p is a multiple of align (so of
   4 MiB too) and the header sits at p - 4 MiB, the chunk below, which free
   finds from p's LARGE_FAR registry byte. One mapping of exactly the header
   chunk and the body, skewed so that the body is aligned (usually one mmap;
   over-mapping by align and trimming both ends cost two munmaps more and up
   to twice the address space); the header chunk is address space only (one
   page touched). Never cached for reuse. */
static void *large_alloc_far(size_t size, size_t align, unsigned flags) {
    size_t page = hhi_os_page_size();
    if (size > SIZE_MAX / 4 - align - HHI_SPAN_SIZE - page) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: request too large", NULL);
        return NULL;
    }
    if (size == 0) size = 1;
    size_t body = hh_align_up(size, page), map_size = HHI_SPAN_SIZE + body;
    /* align >= 4 MiB: the header, a chunk below an aligned address, starts
       on a chunk. */
    char *base = hhi_os_map_skewed(map_size, align, HHI_SPAN_SIZE);
    if (base == NULL) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: the OS refused a large block", NULL);
        return NULL;
    }
    char *p = base + HHI_SPAN_SIZE;
    large_advise(p, body);   /* the block only: the header chunk stays one small page */
    (void)large_register((hhi_blarge *)(void *)base, map_size, HHI_SPAN_SIZE, size, 0, 0);
    if (flags & HHI_ZERO) {
        hh_track_alloc_defined(&hhi_bg, p, body);
    } else {
        hh_track_alloc(&hhi_bg, p, body);
        if (HH_DEBUG >= 2) memset(p, HH_FILL_ALLOC, size);
    }
    return p;
}


/* What the large lock decided for one request; carried out after it. */
typedef struct lplan {
    char *base;            /* a cached extent's start that serves the request; NULL: map fresh */
    size_t map_size;       /* bytes the block gets */
    size_t tail;           /* bytes of the extent past them left for decay (0: none) */
    uint64_t tail_ns;      /* the extent's free time: the tail's age */
    lrange grow;           /* a cached extent too small: its pages move to the head of the fresh mapping */
} lplan;

/* Takes what serves a request of map_size bytes (a page multiple) off the
   cache: the smallest extent that holds it, split if the rest is worth
   keeping; else the largest extent, to grow (large lock held). */
static lplan lcache_take(size_t map_size) {
    lplan pl = { NULL, map_size, 0, 0, { NULL, 0 } };
    hhi_blarge *best = NULL, *grow = NULL;
    for (hhi_blarge *e = hhi_bg.lcache; e != NULL; e = e->next) {
        if (e->map_size >= map_size) {
            if (best == NULL || e->map_size < best->map_size) best = e;
        } else if (grow == NULL || e->map_size > grow->map_size) {
            grow = e;
        }
    }
    size_t have = 0, keep = 0;
    if (best != NULL) {
        have = best->map_size;
        keep = hh_align_up(map_size, HHI_SPAN_SIZE);   /* the tail must start on a chunk */
        if (keep >= have || have - keep < LCACHE_TAIL_MIN) keep = have;
        if (keep - map_size > map_size / 4 && map_size < LCACHE_SMALL_REQ) best = NULL;
    }
    if (best != NULL) {
        uint64_t t = best->freed_ns;
        lcache_unlink(best);
        /* The head leaves the cache; the tail (from a chunk boundary) stays
           LARGE_FREED throughout, for a stale free racing this. */
        registry_mark((uintptr_t)best, keep, HHI_REG_NONE);
        best->magic = 0;
        /* The tail replaces best in the cache: fewer bytes, the same place,
           so it fits both caps without evicting anything. */
        if (keep < have) lcache_link((hhi_blarge *)(void *)((char *)best + keep), have - keep, t);
        pl.base = (char *)best;
        pl.map_size = keep;
        if (keep - map_size > map_size / 2) {
            pl.map_size = map_size;
            pl.tail = keep - map_size;
            pl.tail_ns = t;
        }
    } else if (grow != NULL) {
        pl.grow = lcache_evict(grow);
    }
    return pl;
}

#if HH_TESTING
_Atomic uint64_t hhi_test_large_moves;   /* extents whose pages moved into a larger block */
#endif

void *hhi_large_alloc(size_t size, size_t align, unsigned flags) {
    if (!hhi_binned_init()) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: initialisation failed (OS refused memory)", NULL);
        return NULL;
    }
    if (align > HHI_FAR_ALIGN) return large_alloc_far(size, align, flags);
    size_t page = hhi_os_page_size();
    size_t offset = align > HHI_LARGE_HDR ? align : HHI_LARGE_HDR;
    if (size > SIZE_MAX / 2 - offset - page) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: request too large", NULL);
        return NULL;
    }
    if (size == 0) size = 1;   /* hh_bmemalign(big, 0): still a real, unique block */
    size_t map_size = hh_align_up(offset + size, page);
    hhi_decay_maybe(false);
    hhi_lock_acquire(&hhi_bg.large_lock);
    lplan pl = lcache_take(map_size);
    hhi_lock_release(&hhi_bg.large_lock);
    char *base = pl.base;
    size_t dirty = 0;   /* bytes from the block's start that may hold old data */
    if (base != NULL) {
        dirty = map_size;
    } else {
        base = hhi_os_map(map_size, HHI_SPAN_SIZE);
        large_advise(base, map_size);
        /* A cached extent too small: move its faulted-in pages to the head
           of the new mapping (mremap), so only the rest faults. */
        if (pl.grow.p != NULL) {
            if (base != NULL && hhi_os_move(pl.grow.p, pl.grow.size, base)) {
                dirty = pl.grow.size;
                HHI_TEST_COUNT(hhi_test_large_moves);
            } else {
                large_unmap_range(pl.grow.p, pl.grow.size);
            }
        }
    }
    if (base == NULL) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: the OS refused a large block", NULL);
        return NULL;
    }
    size_t usable = pl.map_size - offset;
    if (!large_register((hhi_blarge *)(void *)base, pl.map_size, offset, size, pl.tail, pl.tail_ns)) {
        /* g.tails is full: the slack is the block's, decommitted here (the
           rare case). Failing, it stays resident: nothing is lost. */
        (void)hhi_os_decommit(base + pl.map_size, pl.tail);
        usable += pl.tail;
    }
    void *p = base + offset;
    if (flags & HHI_ZERO) {
        hh_track_alloc_defined(&hhi_bg, p, usable);   /* fresh pages read as zero */
        if (dirty > offset) memset(p, 0, HH_MIN(size, dirty - offset));
    } else {
        hh_track_alloc(&hhi_bg, p, usable);
        if (HH_DEBUG >= 2) memset(p, HH_FILL_ALLOC, size);
    }
    return p;
}

/* ---------------------------------------------------------------------------
   Free, lookups
--------------------------------------------------------------------------- */
/* The header of the live large block at a, or NULL (large lock held; a's
   chunk registered LARGE or LARGE_FAR). */
static hhi_blarge *large_header(uintptr_t a) {
    uintptr_t chunk = a & ~(uintptr_t)HHI_SPAN_MASK;
    if (hhi_registry_get(a) == HHI_REG_LARGE_FAR) chunk -= HHI_SPAN_SIZE;
    hhi_blarge *h = (hhi_blarge *)chunk;
    if (h->magic != HHI_LARGE_MAGIC || (uintptr_t)h + h->offset != a) return NULL;
    return h;
}

static bool large_registered(uintptr_t a) {
    unsigned r = hhi_registry_get(a);
    return r == HHI_REG_LARGE || r == HHI_REG_LARGE_FAR;
}

hh_status hhi_large_free(uintptr_t a, unsigned flags) {
    hhi_lock_acquire(&hhi_bg.large_lock);
    if (!large_registered(a)) {
        hhi_lock_release(&hhi_bg.large_lock);
        return hhi_binned_fail(HH_E_DOUBLE_FREE, flags, "hh_bfree: large block %p already freed", (void *)a);
    }
    hhi_blarge *h = large_header(a);
    if (h == NULL) {
        hhi_lock_release(&hhi_bg.large_lock);
        return hhi_binned_fail(HH_E_FOREIGN_POINTER, flags, "hh_bfree: %p is inside a large block, not its start",
                               (void *)a);
    }
    large_unlink(h);
    size_t offset = h->offset, tail = h->tail, map_size = h->map_size + tail;   /* the tail goes with it */
    hh_track_free(&hhi_bg, (void *)a, h->map_size - offset);
    lrange drop[HHI_LCACHE_MAX + 2];
    unsigned nd = 0;
    h->magic = 0;
    if (map_size <= HHI_LCACHE_BLOCK && offset < HHI_SPAN_SIZE) {
        uint64_t now = hhi_now_ns();
        /* The tail has been idle longer than the block: the extent's age
           mixes both, as a merge of two extents would. */
        lcache_insert((char *)h, map_size, tail ? age_mix(h->freed_ns, tail, now, map_size - tail) : now, drop, &nd);
        hhi_decay_work_note_bytes(map_size);
    } else {
        large_forget(h);
        drop[nd++] = (lrange){ (char *)h, map_size };
    }
    hhi_lock_release(&hhi_bg.large_lock);
    for (unsigned i = 0; i < nd; i++) large_unmap_range(drop[i].p, drop[i].size);
    hhi_decay_maybe(false);
    return HH_OK;
}

/* Grows the live large block at a to hold size bytes without copying a
   byte: a fresh mapping of the new size is made and the block's pages
   (faulted in, written) move to its head (mremap), so only the added part
   ever faults. Returns the new user pointer (the old one is dead), or NULL
   with nothing changed: a is not a live large block's start, the block is
   below LARGE_GROW_MIN or far-aligned, the size is not larger, or the OS
   refused -- the caller then allocates and copies. */
void *hhi_large_grow(uintptr_t a, size_t size) {
    size_t page = hhi_os_page_size();
    hhi_lock_acquire(&hhi_bg.large_lock);
    hhi_blarge *h = large_registered(a) ? large_header(a) : NULL;
    if (h == NULL || h->offset >= HHI_SPAN_SIZE || h->map_size < LARGE_GROW_MIN ||
        size > SIZE_MAX / 2 - h->offset - page || hh_align_up(h->offset + size, page) <= h->map_size) {
        hhi_lock_release(&hhi_bg.large_lock);
        return NULL;
    }
    size_t old_map = h->map_size, offset = h->offset, old_size = h->size, tail = h->tail;
    uint64_t tail_ns = h->freed_ns;
    size_t map_size = hh_align_up(offset + size, page);
    if (map_size <= old_map + tail) {
        /* The tail holds the growth: the block takes that much of it in
           place, no system call (its bytes are stale or zero: a realloc's
           new bytes are indeterminate). */
        h->map_size = map_size;
        h->tail = old_map + tail - map_size;
        h->size = size;
        hhi_bg.large_bytes += map_size - old_map;
        if (h->tail == 0) tails_remove(h);
        hhi_lock_release(&hhi_bg.large_lock);
        hh_track_undefined((char *)h + old_map, map_size - old_map);
        hh_track_move(&hhi_bg, (void *)a, (void *)a, map_size - offset);
        return (void *)a;
    }
    /* Off the live list while it moves; its registry byte reads NONE (a free
       racing its own realloc is the caller's bug: it reads as foreign). */
    large_unlink(h);
    large_forget(h);
    hhi_lock_release(&hhi_bg.large_lock);
    char *base = hhi_os_map(map_size, HHI_SPAN_SIZE);
    large_advise(base, map_size);
    /* A tail moves with the block (it is part of its mapping) and joins it. */
    if (base == NULL || !hhi_os_move(h, old_map + tail, base)) {
        if (base != NULL) hhi_os_unmap(base, map_size);
        /* hhi_os_move marked the range undefined before it tried: the block
           stayed, so its header and bytes read as they did (defined, as a
           successful move leaves them), and its tail is nobody's bytes
           again. Should g.tails have filled meanwhile, the tail becomes
           the block's (resident): its bytes stay undefined, as a grow's. */
        hh_track_defined(h, old_map);
        if (large_register(h, old_map, offset, old_size, tail, tail_ns))
            hh_track_noaccess((char *)h + old_map, tail);
        else
            hh_track_move(&hhi_bg, (void *)a, (void *)a, old_map + tail - offset);
        return NULL;
    }
    (void)large_register((hhi_blarge *)(void *)base, map_size, offset, size, 0, 0);
    void *p = base + offset;
    /* One chunk moved (never a free of the old range: that range is unmapped
       now, and ASan poison left on it would hit whoever maps it next). The
       moved bytes keep their values; hhi_os_move made them undefined. */
    hh_track_move(&hhi_bg, (void *)a, p, map_size - offset);
    hh_track_defined(p, old_map - offset);
    return p;
}

/* Unmaps cached memory, the oldest extent or live block's tail first, while
   the oldest was freed before freed_before_ns (UINT64_MAX: all): a tail
   whole, an extent at most LCACHE_PIECE bytes (cut from its top, its head
   staying cached) between two checks of the deadline (0: none). Returns
   the bytes unmapped. */
static size_t lcache_release(uint64_t freed_before_ns, uint64_t deadline_ns) {
    size_t bytes = 0;
    for (;;) {
        if (deadline_ns && hhi_now_ns() >= deadline_ns) break;
        lrange r = { NULL, 0 };
        hhi_lock_acquire(&hhi_bg.large_lock);
        hhi_blarge *old = lcache_oldest();
        int ti = tails_oldest();
        hhi_blarge *t = ti >= 0 ? hhi_bg.tails[ti] : NULL;
        if (t != NULL && t->freed_ns < freed_before_ns && (old == NULL || t->freed_ns <= old->freed_ns)) {
            /* A live block's tail (less than a chunk and a cache tail's
               minimum: about one piece): its chunks beyond the block's read
               NONE already. */
            r = (lrange){ (char *)t + t->map_size, t->tail };
            hhi_bg.large_mapped -= t->tail;
            t->tail = 0;
            tails_drop_at((uint32_t)ti);
        } else if (old != NULL && old->freed_ns < freed_before_ns) {
            size_t n = old->map_size;
            if (n > LCACHE_PIECE) {
                size_t keep = n - LCACHE_PIECE;
                r = (lrange){ (char *)old + keep, LCACHE_PIECE };
                /* Only chunks wholly in the piece go NONE: the head's stay
                   LARGE_FREED throughout, for a stale free racing this. */
                uintptr_t cut = hh_align_up((uintptr_t)old + keep, HHI_SPAN_SIZE);
                if (cut < (uintptr_t)old + n) registry_mark(cut, (uintptr_t)old + n - cut, HHI_REG_NONE);
                old->map_size = keep;
                hhi_bg.lcache_bytes -= LCACHE_PIECE;
            } else {
                r = lcache_evict(old);
            }
        }
        hhi_lock_release(&hhi_bg.large_lock);
        if (r.p == NULL) break;
        bytes += r.size;
        large_unmap_range(r.p, r.size);
    }
    return bytes;
}

size_t hhi_large_trim(uint64_t deadline_ns) { return lcache_release(UINT64_MAX, deadline_ns); }

size_t hhi_large_decay(uint64_t freed_before_ns, uint64_t deadline_ns) {
    return lcache_release(freed_before_ns, deadline_ns);
}

hh_status hhi_large_freed_status(uintptr_t a) {
    hh_status st = HH_E_FOREIGN_POINTER;
    hhi_lock_acquire(&hhi_bg.large_lock);
    /* Still LARGE_FREED under the lock: a cached extent touches the chunk,
       so it is mapped. An extent may cover only part of its last chunk,
       whose rest is anyone's. */
    if (hhi_registry_get(a) == HHI_REG_LARGE_FREED)
        for (hhi_blarge *e = hhi_bg.lcache; e != NULL; e = e->next)
            if (a >= (uintptr_t)e + HHI_LARGE_HDR && a < (uintptr_t)e + e->map_size) {
                st = HH_E_DOUBLE_FREE;
                break;
            }
    hhi_lock_release(&hhi_bg.large_lock);
    return st;
}

size_t hhi_large_usable(uintptr_t a) {
    hhi_lock_acquire(&hhi_bg.large_lock);
    size_t n = 0;
    if (large_registered(a)) {
        hhi_blarge *h = large_header(a);
        if (h != NULL) n = h->map_size - h->offset;
    }
    hhi_lock_release(&hhi_bg.large_lock);
    return n;
}

/* ---------------------------------------------------------------------------
   Public: huge pages for large blocks
--------------------------------------------------------------------------- */
hh_status hh_binned_set_large_hugepages(bool on) {
    atomic_store_explicit(&hhi_bg.large_huge, on, memory_order_relaxed);
    return HH_OK;
}

bool hh_binned_large_hugepages(void) { return atomic_load_explicit(&hhi_bg.large_huge, memory_order_relaxed); }
