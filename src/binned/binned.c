/* binned.c -- public API of the binned allocator: the fast paths (inline, in
 * binned_internal.h) and their slow paths, realloc/memalign/calloc, stats,
 * check, trim, leak report and the heap-map walker. */
#include "binned_internal.h"

#include "../common/hh_error.h"

#include <stdarg.h>
#include <stdio.h>

hh_status hhi_binned_fail(hh_status s, unsigned flags, const char *msg, const void *p) {
    bool quiet = (s == HH_E_FOREIGN_POINTER && (flags & HHI_QUIET_FOREIGN)) ||
                 ((s == HH_E_NO_MEMORY || s == HH_E_INVALID_ARG) && (flags & HHI_QUIET_OOM));
    if (quiet) {
        hhi_set_last_error(s);
        return s;
    }
    return hhi_error(s, msg, p);
}

/* ---------------------------------------------------------------------------
   Small blocks: slow paths
--------------------------------------------------------------------------- */
/* One block of class c without a thread cache (before TLS is ready, while a
   thread exits, or when caching is off). */
static void *small_alloc_direct(unsigned c) {
    hhi_bblock *b = NULL;
    if (hhi_class_take(c, &b, 1) == 0) return NULL;
    atomic_fetch_add_explicit(&hhi_bg.classes[c].direct_allocs, 1, memory_order_relaxed);
    return b;
}

/* Marks b live and hands it out. */
static void *small_hand_out(void *b, unsigned c) {
    hhi_block_untag(b);
    hhi_on_alloc(b, hhi_class_size[c]);
    return b;
}

static void *small_alloc_slow(unsigned c, unsigned flags) {
    hhi_tcache *tc = hhi_tcache_get();
    void *b = NULL;
    if (tc != NULL) {
        /* Before the bin is read: the pass may start the purge thread, and
           pthread_create may allocate (into this very bin). */
        if (tc->head[c] == NULL) hhi_decay_maybe(true);
        /* The current limit -- and, the thread allocating in this class, a
           bin cut for frees alone (see hhi_binned_free_claimed) gets its
           full cap back. */
        tc->limit_cap[c] = atomic_load_explicit(&hhi_bg.cap[c], memory_order_relaxed);
        hhi_tcache_cap_set(tc, c, tc->limit_cap[c]);
        uint32_t cap = hhi_bin_cap(tc, c);
        if (tc->head[c] == NULL && cap > 0) {
            /* A batch a full bin pushed (its older half, or all of a bin
               that only frees; this thread's or another's), in O(1); else up to
               half a bin from the pages: freed blocks first, fresh ones at
               most HHI_CARVE_BYTES' worth (hhi_class_take). */
            hhi_bblock *list = NULL;
            uint32_t got = hhi_class_refill(c, &list, cap, (cap + 1) / 2);   /* one lock, not two */
            if (got > 0) {
                hhi_owner_add(&tc->misses[c], 1);
                b = list;
                tc->head[c] = hhi_block_next(list);
                hhi_bin_count_set(tc, c, got - 1);
            }
        } else if (tc->head[c] != NULL) {
            b = tc->head[c];
            tc->head[c] = hhi_block_next(b);
            hhi_bin_pop_note(tc, c);
        } else {
            b = small_alloc_direct(c);
        }
    } else if (hhi_binned_init()) {
        b = small_alloc_direct(c);
    }
    if (b == NULL) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: out of memory (OS refused a span)", NULL);
        return NULL;
    }
    return small_hand_out(b, c);
}

void *hhi_binned_malloc_slow(size_t size, unsigned flags) {
    if (size <= HHI_SMALL_MAX) return small_alloc_slow(hhi_size_class(size), flags);
    return hhi_large_alloc(size, 0, flags);
}

/* Validates a pointer into one of our spans: the page and block index of a
   live block, or the status it deserves. */
static hh_status small_lookup(uintptr_t a, hhi_bpage **out_pg, uint32_t *out_i, uint64_t *out_cc) {
    hhi_bpage *pg = hhi_page_of(a);
    uint64_t cc = hhi_page_word(pg);   /* once: class and carved as one; first (hhi_page_geometry) */
    uint32_t i = hhi_block_index(pg, a), cap = hhi_page_geometry(&pg->capacity);
    /* capacity 0: never served a class (or a retired span's zeroed header). */
    uint32_t bs = hhi_page_geometry(&pg->block_size), last = hhi_page_carved_last(pg);
    hhi_page_geometry_seen();
    if (cap == 0 || i >= cap || i * bs != (a & HHI_PAGE_MASK)) return HH_E_FOREIGN_POINTER;
    /* A pooled page keeps its last class's geometry and how far it was
       carved (invariant 2): a block start there was handed out and came
       back before the page left the class, whatever its bytes say now (a
       decommit zeroed them). Nothing carved: a pooled page (carved_last
       says how far it was), or one that has served its class nothing yet
       (carved_last 0). */
    if (cc == 0) return i < last ? HH_E_DOUBLE_FREE : HH_E_FOREIGN_POINTER;
    if (i >= hhi_word_carved(cc)) return HH_E_FOREIGN_POINTER;   /* never handed out, or being carved */
    if (hhi_block_is_free((hhi_bblock *)a, hhi_bg.tag_key)) return HH_E_DOUBLE_FREE;
    *out_pg = pg;
    *out_i = i;
    *out_cc = cc;
    return HH_OK;
}

#if HH_TESTING
_Atomic(hhi_test_hook) hhi_binned_test_lookup_hook;
_Atomic(hhi_test_free_hook) hhi_binned_test_free_hook;
#endif

/* Classifies p: HH_OK for a live small block (page and index out) or a
   pointer into a large chunk (*large set; hhi_large_free validates it under
   the large lock); otherwise the status a free of p deserves:
   HH_E_DOUBLE_FREE or HH_E_FOREIGN_POINTER. */
static hh_status classify(uintptr_t a, hhi_bpage **pg, uint32_t *i, uint64_t *cc, bool *large) {
    *large = false;
    if (!atomic_load_explicit(&hhi_bg.ready, memory_order_acquire) || (a >> HHI_ADDR_BITS) != 0)
        return HH_E_FOREIGN_POINTER;
    unsigned reg = hhi_registry_get(a);
#if HH_TESTING
    hhi_test_hook hook = atomic_load_explicit(&hhi_binned_test_lookup_hook, memory_order_relaxed);
    if (hook) hook();
#endif
    switch (reg) {
    case HHI_REG_SPAN: {
        hh_status st = small_lookup(a, pg, i, cc);
        /* A trim retired the span since the registry read: its metadata now
           reads as zero (no block), and the pointer was ours -- freed. */
        if (st == HH_E_FOREIGN_POINTER && hhi_registry_get(a) == HHI_REG_SPAN_FREED) st = HH_E_DOUBLE_FREE;
        return st;
    }
    case HHI_REG_LARGE:
    case HHI_REG_LARGE_FAR: *large = true; return HH_OK;
    case HHI_REG_LARGE_FREED: return hhi_large_freed_status(a);
    case HHI_REG_SPAN_FREED: return HH_E_DOUBLE_FREE;
    default: return HH_E_FOREIGN_POINTER;
    }
}

void hhi_binned_free_slow(void *p, unsigned flags) {
    if (p == NULL) return;
    uintptr_t a = (uintptr_t)p;
    hhi_bpage *pg = NULL;
    uint32_t i = 0;
    uint64_t cc = 0;
    bool large;
    hh_status st = classify(a, &pg, &i, &cc, &large);
    if (st != HH_OK) {
        hhi_binned_fail(st, flags,
                        st == HH_E_DOUBLE_FREE ? "hh_bfree: %p was already freed"
                                               : "hh_bfree: %p is not a block of the binned allocator",
                        p);
        return;
    }
    if (large) {
        hhi_large_free(a, flags);
        return;
    }
    /* The lookup saw p live; another thread may have freed it since. */
    if (hhi_block_free_claim(p, pg, cc, hhi_bg.tag_key, flags)) hhi_binned_free_claimed(p);
}

void hhi_binned_free_recheck(void *p, uint64_t seen, uint64_t cc, unsigned flags) {
    hhi_bpage *pg = hhi_page_of((uintptr_t)p);
    /* The same tenure of the same class with p still carved (carved only
       grows within a tenure). */
    if (hhi_word_same_tenure_on(hhi_page_word(pg), cc)) hhi_binned_free_claimed(p);
    else hhi_binned_free_raced(p, seen, flags);
}

void hhi_binned_free_unclaimed(void *p, unsigned flags) {
    hh_track_noaccess(&((hhi_bblock *)p)->tag, sizeof(uint64_t));   /* a freed block's: the claim opened it */
    hhi_binned_fail(HH_E_DOUBLE_FREE, flags, "hh_bfree: %p was already freed", p);
}

void hhi_binned_free_raced(void *p, uint64_t seen, unsigned flags) {
    hhi_bblock *b = p;
    uint64_t tag = hhi_block_tag(hhi_bg.tag_key, p);
    atomic_compare_exchange_strong_explicit(&b->tag, &tag, seen, memory_order_relaxed, memory_order_relaxed);
    hhi_binned_fail(HH_E_DOUBLE_FREE, flags, "hh_bfree: %p was already freed", p);
}

void hhi_binned_free_claimed(void *p) {
    hhi_bpage *pg = hhi_page_of((uintptr_t)p);
    unsigned c = pg->cls;
    hhi_on_free(p, pg->block_size);
    hhi_tcache *tc = hhi_tcache_get();
    if (tc != NULL) {
        hhi_tcache_cap_refresh(tc, c);
        uint32_t cap = hhi_bin_cap(tc, c);
        if (cap > 0) {
            /* Full bin: its older half (the whole bin if it only frees)
               goes to the class's transfer stack as one batch (O(1) under
               the lock: no block goes back to its page), for a thread
               whose bin runs dry to pop. */
            /* cap_refresh flushed down to the cap: room never exceeds it. */
            hh_assert_internal(hhi_bin_room(tc, c) <= cap);
            bool pushed = false;
            if (hhi_bin_room(tc, c) == 0) {
                /* A bin that served no allocation since its last push only
                   frees (a consumer of another thread's blocks): it fills
                   again up to HHI_BIN_FREE_ONLY blocks only, so that the
                   blocks reach the allocating thread in small batches
                   instead of sitting here by the bin-full (up to 32 KiB per
                   class). A hit since restores the full cap at the next
                   push; a refill at once. */
                uint64_t hits = hhi_bin_hits(tc, c);
                bool free_only = hits == tc->hits_mark[c];
                tc->hits_mark[c] = hits;
                /* A bin that also allocates keeps its newer half and pushes
                   the older one: pushing it whole left one block, the next
                   few allocations emptied it, the refill popped a batch
                   (often the one just pushed) and a few frees filled it
                   again -- a class lock every few calls for a thread whose
                   allocations and frees merely alternate in runs (16
                   threads on 2 cores then slept on those locks: thousands
                   of futex waits a second). Half a bin each way, a thread
                   now drifts by half a bin before it locks again. A bin
                   that only frees pushes whole: nothing here would use the
                   half it kept. The walk to the middle reads the bin's own
                   links, with no lock held: a refill's batch became this
                   thread's under the class lock. */
                uint32_t keep = free_only ? 0 : cap / 2;
                hhi_bblock *batch = hhi_bin_detach_older(tc, c, keep);
                /* Off the bin before it is on the stack: a fork in between
                   must not find the blocks in both (the child flushes this
                   thread's bins). */
                hhi_bin_count_set(tc, c, keep);
                hhi_class_xfer_put(c, batch, cap - keep);
                pushed = true;
                cap = free_only ? HH_MIN(tc->limit_cap[c], HHI_BIN_FREE_ONLY) : tc->limit_cap[c];
                hhi_tcache_cap_set(tc, c, cap);
            }
            hhi_block_set_next((hhi_bblock *)p, tc->head[c]);   /* the claim wrote the tag */
            tc->head[c] = (hhi_bblock *)p;
            hhi_bin_count_set(tc, c, hhi_bin_count(tc, c) + 1);
            /* Only now, with the bin whole again: a decay pass may start the
               purge thread, whose creation allocates and frees (into this
               very bin, perhaps); a count taken before it would be stale. */
            if (pushed) hhi_decay_maybe(true);
            return;
        }
        /* cap 0: cap_refresh has emptied the bin already. */
    }
    hhi_block_set_next((hhi_bblock *)p, NULL);
    hhi_class_put(c, (hhi_bblock *)p, 1);
}

/* ---------------------------------------------------------------------------
   memalign, calloc, realloc, usable
--------------------------------------------------------------------------- */
void *hhi_binned_memalign(size_t align, size_t size, unsigned flags) {
    if (!hh_is_pow2(align) || align > HHI_MAX_ALIGN) {
        hhi_binned_fail(HH_E_INVALID_ARG, flags,
                        "hh_bmemalign: alignment %p must be a power of two <= 1 GiB", (void *)(uintptr_t)align);
        return NULL;
    }
    if (align <= 16) return hhi_bmalloc_fast(size, flags);
    if (size <= HHI_SMALL_MAX && align <= HHI_SMALL_MAX) {
        /* Pages are 64 KiB aligned and block i starts at i * size: a class
           whose size is a multiple of align gives aligned blocks. */
        for (unsigned c = hhi_size_class(size); c < HHI_CLASS_COUNT; c++)
            if ((hhi_class_size[c] & (align - 1)) == 0) return hhi_bmalloc_fast(hhi_class_size[c], flags);
    }
    return hhi_large_alloc(size, align, flags);
}

void *hhi_binned_calloc(size_t count, size_t size, unsigned flags) {
    if (size != 0 && count > SIZE_MAX / size) {
        hhi_binned_fail(HH_E_INVALID_ARG, flags, "hh_bcalloc: count * size overflows (%p)", (void *)(uintptr_t)count);
        return NULL;
    }
    size_t total = count * size;
    if (total > HHI_SMALL_MAX) return hhi_large_alloc(total, 0, flags | HHI_ZERO);   /* fresh pages are zero */
    void *p = hhi_bmalloc_fast(total, flags);
    if (p != NULL) memset(p, 0, total);
    return p;
}

size_t hhi_binned_usable(const void *p, hh_status *st) {
    hhi_bpage *pg = NULL;
    uint32_t i = 0;
    uint64_t cc = 0;
    bool large;
    *st = classify((uintptr_t)p, &pg, &i, &cc, &large);
    if (*st != HH_OK) return 0;
    if (large) {
        size_t n = hhi_large_usable((uintptr_t)p);
        if (n == 0) *st = HH_E_FOREIGN_POINTER;
        return n;
    }
    return pg->block_size;
}

void *hhi_binned_realloc(void *p, size_t size, unsigned flags) {
    if (p == NULL) return hhi_bmalloc_fast(size, flags);
    hh_status st;
    size_t old = hhi_binned_usable(p, &st);
    if (st != HH_OK) {
        hhi_binned_fail(st, flags,
                        st == HH_E_DOUBLE_FREE ? "hh_brealloc: %p was already freed"
                                               : "hh_brealloc: %p is not a block of the binned allocator",
                        p);
        return NULL;
    }
    if (size == 0) {
        hhi_bfree_fast(p, flags);
        return NULL;
    }
    /* Keep the block when the new size maps to the same class, or for a large
       block when it still fits and wastes less than half; a large block that
       grows moves its pages when it can. */
    if (old <= HHI_SMALL_MAX) {
        if (size <= HHI_SMALL_MAX && hhi_size_class(size) == hhi_size_class(old)) return p;
    } else if (size <= old && size > old / 2 && size > HHI_SMALL_MAX) {
        return p;
    } else if (size > old) {
        void *q = hhi_large_grow((uintptr_t)p, size);   /* its pages move: no copy */
        if (q != NULL) return q;
    }
    void *q = hhi_bmalloc_fast(size, flags);
    if (q == NULL) return NULL;
    memcpy(q, p, HH_MIN(old, size));
    hhi_bfree_fast(p, flags);
    return q;
}

/* ---------------------------------------------------------------------------
   Public allocation API
--------------------------------------------------------------------------- */
void *hh_bmalloc(size_t size) { return hhi_bmalloc_fast(size, 0); }
void  hh_bfree(void *p) { hhi_bfree_fast(p, 0); }
void *hh_bcalloc(size_t count, size_t size) { return hhi_binned_calloc(count, size, 0); }
void *hh_brealloc(void *p, size_t size) { return hhi_binned_realloc(p, size, 0); }
void *hh_bmemalign(size_t align, size_t size) { return hhi_binned_memalign(align, size, 0); }

size_t hh_busable(const void *p) {
    if (p == NULL) return 0;
    hh_status st;
    size_t n = hhi_binned_usable(p, &st);
    if (st != HH_OK) hhi_error(HH_E_FOREIGN_POINTER, "hh_busable: %p is not a live block of the binned allocator", p);
    return n;
}

/* ---------------------------------------------------------------------------
   Stats
--------------------------------------------------------------------------- */
void hh_binned_stats_get(hh_binned_stats *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_binned_stats_get: out is NULL");
        return;
    }
    memset(out, 0, sizeof *out);
    if (!atomic_load_explicit(&hhi_bg.ready, memory_order_acquire)) {
        for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) out->classes[c].block_size = hhi_class_size[c];
        return;
    }
    uint64_t hits[HHI_CLASS_COUNT], misses[HHI_CLASS_COUNT], cached[HHI_CLASS_COUNT];
    hhi_lock_acquire(&hhi_bg.tc_lock);
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        hits[c] = atomic_load(&hhi_bg.retired_hits[c]);
        misses[c] = atomic_load(&hhi_bg.retired_misses[c]);
        cached[c] = 0;
    }
    for (hhi_tcache *tc = hhi_bg.tcaches; tc != NULL; tc = tc->next) {
        out->thread_caches++;
        for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
            hits[c] += hhi_bin_hits(tc, c);
            misses[c] += atomic_load_explicit(&tc->misses[c], memory_order_relaxed);
            cached[c] += hhi_bin_count(tc, c);
        }
    }
    hhi_lock_release(&hhi_bg.tc_lock);
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        hhi_bclass *k = &hhi_bg.classes[c];
        hh_binned_class_stats *cs = &out->classes[c];
        cs->block_size = hhi_class_size[c];
        cs->allocs = hits[c] + misses[c] + atomic_load(&k->direct_allocs);
        cs->cache_hits = hits[c];
        cs->cache_hit_rate = cs->allocs ? (double)cs->cache_hits / (double)cs->allocs : 0.0;
        hhi_lock_acquire(&k->lock);
        cs->pages = k->pages;
        cs->empty_pages = k->empty;
        uint64_t used = k->used;
        cached[c] += k->xfer_blocks;   /* transfer batches: out of the pages, not live */
        hhi_lock_release(&k->lock);
        /* Blocks out of the pages, less those waiting in caches and
           transfer batches. While other threads run this is a snapshot, not
           exact: their bins are read before the class, so a bin pushed or
           popped in between is counted twice or not at all (off by up to a
           bin's cap per thread and class), and a bin whose cap just changed
           may read cap and room from two moments. Exact when they rest. */
        cs->live_blocks = used > cached[c] ? used - cached[c] : 0;
        cs->live_bytes = cs->live_blocks * cs->block_size;
        out->small_live_blocks += cs->live_blocks;
        out->small_live_bytes += cs->live_bytes;
        out->pages_in_classes += cs->pages;
    }
    hhi_lock_acquire(&hhi_bg.pool_lock);
    out->spans = hhi_bg.n_spans;
    out->pages_free = hhi_bg.n_dirty + hhi_bg.n_clean + hhi_bg.n_decommitting;
    out->pages_decommitted = hhi_bg.n_decommitted;
    hhi_lock_release(&hhi_bg.pool_lock);
    hhi_lock_acquire(&hhi_bg.large_lock);
    out->large_live_blocks = hhi_bg.large_count;
    out->large_live_bytes = hhi_bg.large_bytes;
    out->large_mapped_bytes = hhi_bg.large_mapped;
    out->large_cached_bytes = hhi_bg.lcache_bytes;
    hhi_lock_release(&hhi_bg.large_lock);
    out->mapped_bytes = (size_t)out->spans * HHI_SPAN_SIZE + out->large_mapped_bytes + out->large_cached_bytes;
}

/* ---------------------------------------------------------------------------
   Trim
--------------------------------------------------------------------------- */
size_t hh_binned_trim(uint64_t max_ns) {
    if (!atomic_load_explicit(&hhi_bg.ready, memory_order_acquire)) return 0;
    uint64_t deadline = max_ns ? hhi_now_ns() + max_ns : 0;
    hhi_lock_acquire(&hhi_bg.trim_lock);
    size_t n = hhi_large_trim(deadline);
    n += hhi_pool_trim(deadline);
    hhi_lock_release(&hhi_bg.trim_lock);
    return n;
}

hh_status hhi_binned_set_decay(uint32_t ms, bool start_now) {
    if (ms > 60000) return hhi_error(HH_E_INVALID_ARG, "hh_binned_set_decay_ms: %u ms is above 60000", ms);
    uint64_t ns = (uint64_t)ms * 1000000u;
    if (ns != 0) atomic_store_explicit(&hhi_bg.decay_next_ns, start_now ? hhi_now_ns() + ns : 0, memory_order_relaxed);
    atomic_store_explicit(&hhi_bg.decay_ns, ns, memory_order_relaxed);
    hhi_purge_nudge();   /* a running purge thread sleeps by the old period; the slow paths leave the passes to it */
    return HH_OK;
}

hh_status hh_binned_set_decay_ms(uint32_t ms) { return hhi_binned_set_decay(ms, true); }

hh_status hh_binned_set_small_hugepages(bool on) {
    atomic_store_explicit(&hhi_bg.small_huge, on, memory_order_relaxed);   /* span_new reads it */
    return HH_OK;
}

bool hh_binned_small_hugepages(void) { return atomic_load_explicit(&hhi_bg.small_huge, memory_order_relaxed); }

/* ---------------------------------------------------------------------------
   Check: one function per numbered invariant of binned_internal.h, each run
   with every lock held, each naming its invariant in the message of the
   first violation it finds. Invariant 8 (lock order) is a rule for the code,
   not a property of the data: nothing here can check it.
--------------------------------------------------------------------------- */
/* What the checks share: the first failure's message (formatted under the
   locks, reported after they are released: the error handler may
   allocate), and per-class tallies that invariant 3's walk gathers for 4. */
typedef struct check_ctx {
    char msg[256];
    uint32_t class_pages[HHI_CLASS_COUNT];   /* pages found owned by each class */
    uint32_t class_empty[HHI_CLASS_COUNT];   /* of those, with used == 0 */
    uint64_t class_used[HHI_CLASS_COUNT];    /* sum of their used counts */
    uint64_t class_live[HHI_CLASS_COUNT];    /* untagged (live) blocks in them */
} check_ctx;

static bool check_fail(check_ctx *cx, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool check_fail(check_ctx *cx, const char *what, const char *fmt, ...) {
    int n = snprintf(cx->msg, sizeof cx->msg, "binned check: invariant %s: ", what);
    if (n < 0 || (size_t)n >= sizeof cx->msg) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cx->msg + n, sizeof cx->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}
/* In a check function whose `what` names its invariant: fail unless cond. */
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) return check_fail(cx, what, __VA_ARGS__);        \
    } while (0)

/* 1: every span on g.spans is aligned, has its magic and is registered SPAN;
   the list is well linked and as long as g.n_spans. */
static bool check_inv1_spans_registered(check_ctx *cx) {
    static const char what[] = "1 (spans registered)";
    uint32_t n = 0;
    for (hhi_bspan *s = hhi_bg.spans; s != NULL; s = s->next) {
        CHECK(++n <= (1u << 25), "span list cycles");
        CHECK(((uintptr_t)s & HHI_SPAN_MASK) == 0 && s->magic == HHI_SPAN_MAGIC, "span %p bad", (void *)s);
        CHECK(hhi_registry_get((uintptr_t)s) == HHI_REG_SPAN, "span %p not registered", (void *)s);
        CHECK(s->next == NULL || s->next->prev == s, "span list broken at %p", (void *)s);
        CHECK(s->pages[0].capacity == 0, "metadata page of %p serves blocks", (void *)s);
    }
    CHECK(n == hhi_bg.n_spans, "%u spans listed, %u counted", n, hhi_bg.n_spans);
    return true;
}

/* 2: each page is pooled (no class, on a pool list, nothing used or carved,
   its last class's carved count within its geometry) or owned by one class
   with that class's geometry. */
static bool check_inv2_page_owner(check_ctx *cx) {
    static const char what[] = "2 (one owner per page)";
    for (hhi_bspan *s = hhi_bg.spans; s != NULL; s = s->next)
        for (unsigned pi = 1; pi < HHI_PAGES_PER_SPAN; pi++) {
            hhi_bpage *pg = &s->pages[pi];
            void *base = (void *)hhi_page_base(pg);
            CHECK(pg->index == pi, "page %u of span %p has index %u", pi, (void *)s, pg->index);
            if (pg->cls == HHI_NO_CLASS) {
                CHECK(pg->pool != HHI_POOL_NONE && pg->used == 0 && pg->free == NULL && hhi_page_carved(pg) == 0 &&
                          pg->reserved == 0,
                      "page %p owned by no class but not pooled", base);
                CHECK(pg->carved_last <= pg->capacity, "pooled page %p carved %u of %u", base, pg->carved_last,
                      pg->capacity);
                continue;
            }
            unsigned c = pg->cls;
            /* The word read once: a take publishing its run stores it without
               the class lock (fresh_link), as inv3 below notes. */
            uint64_t w = hhi_page_word(pg);
            CHECK(c < HHI_CLASS_COUNT && pg->pool == HHI_POOL_NONE && pg->block_size == hhi_class_size[c] &&
                      pg->capacity == hhi_class_capacity(c) && pg->carved_last == 0 &&
                      w == hhi_word_make(hhi_word_carved(w), c, pg->gen),
                  "page %p has bad class fields", base);
        }
    return true;
}

/* The live blocks (not tagged) among the first `carved` of a class page's.
   With other threads running, a snapshot: a cache may hand one out or take
   one back meanwhile. */
static uint32_t page_live_count(const hhi_bpage *pg, uint32_t carved) {
    uintptr_t base = hhi_page_base(pg);
    uint32_t live = 0;
    for (uint32_t i = 0; i < carved; i++)
        live += !hhi_block_is_free((hhi_bblock *)(base + (uintptr_t)i * pg->block_size), hhi_bg.tag_key);
    return live;
}

/* 3: in every class page, used + free-list length == reserved, carved <=
   reserved <= capacity; free blocks are carved block starts of the page,
   tagged; no more untagged (live) carved blocks than used. Tallies per
   class for 4. (carved is read once: a take publishing its fresh run moves
   it without the class lock.) */
static bool check_inv3_block_accounting(check_ctx *cx) {
    static const char what[] = "3 (block accounting)";
    for (hhi_bspan *s = hhi_bg.spans; s != NULL; s = s->next)
        for (unsigned pi = 1; pi < HHI_PAGES_PER_SPAN; pi++) {
            hhi_bpage *pg = &s->pages[pi];
            if (pg->cls == HHI_NO_CLASS) continue;
            uintptr_t base = hhi_page_base(pg);
            uint32_t carved = hhi_page_carved(pg);
            CHECK(carved <= pg->reserved && pg->reserved <= pg->capacity && pg->used <= pg->reserved,
                  "page %p counts %u/%u/%u/%u", (void *)base, pg->used, carved, pg->reserved, pg->capacity);
            uint32_t nfree = 0;
            for (hhi_bblock *b = pg->free; b != NULL; b = hhi_block_next(b)) {
                uintptr_t a = (uintptr_t)b;
                CHECK(nfree < pg->capacity, "page %p free list too long or cyclic", (void *)base);
                CHECK(a >= base && a < base + HHI_PAGE_SIZE, "free block %p outside page %p", (void *)b,
                      (void *)base);
                uint32_t i = hhi_block_index(pg, a);
                CHECK(i < carved && i * pg->block_size == (a & HHI_PAGE_MASK), "free block %p misplaced", (void *)b);
                CHECK(hhi_block_is_free(b, hhi_bg.tag_key), "free block %p not tagged", (void *)b);
                nfree++;
            }
            CHECK(pg->used + nfree == pg->reserved, "page %p used %u + free %u != reserved %u", (void *)base, pg->used,
                  nfree, pg->reserved);
            uint32_t live = page_live_count(pg, carved);
            CHECK(live <= pg->used, "page %p has %u live > %u used", (void *)base, live, pg->used);
            cx->class_pages[pg->cls]++;
            if (pg->used == 0) cx->class_empty[pg->cls]++;
            cx->class_used[pg->cls] += pg->used;
            cx->class_live[pg->cls] += live;
        }
    return true;
}

/* 4: a page is on its class's partial list iff it has a free or unreserved
   block; empty pages sit at the tail, at most HHI_KEEP_EMPTY of them; the
   class counters match the pages (tallied by 3). */
static bool check_inv4_partial_lists(check_ctx *cx) {
    static const char what[] = "4 (partial lists)";
    for (hhi_bspan *s = hhi_bg.spans; s != NULL; s = s->next)
        for (unsigned pi = 1; pi < HHI_PAGES_PER_SPAN; pi++) {
            hhi_bpage *pg = &s->pages[pi];
            if (pg->cls == HHI_NO_CLASS) continue;
            bool has_room = pg->free != NULL || pg->reserved < pg->capacity;
            CHECK(has_room == (pg->in_partial != 0), "page %p partial-list membership wrong",
                  (void *)hhi_page_base(pg));
        }
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        hhi_bclass *k = &hhi_bg.classes[c];
        uint32_t n = 0;
        bool seen_empty = false;
        for (hhi_bpage *pg = k->head; pg != NULL; pg = pg->next) {
            CHECK(n++ < cx->class_pages[c] && pg->cls == c && pg->in_partial, "class %u partial list holds a wrong page",
                  c);
            CHECK(pg->next != NULL || k->tail == pg, "class %u tail wrong", c);
            if (pg->used == 0) seen_empty = true;
            else CHECK(!seen_empty, "class %u has a used page after an empty one", c);
        }
        CHECK(k->pages == cx->class_pages[c] && k->empty == cx->class_empty[c] && k->empty <= HHI_KEEP_EMPTY &&
                  k->used == cx->class_used[c],
              "class %u counts pages %u/%u empty %u/%u", c, k->pages, cx->class_pages[c], k->empty,
              cx->class_empty[c]);
    }
    return true;
}

/* A cached block of class c (in a bin or a transfer batch): in a span, a
   carved block start of a class-c page, tagged. */
static bool check_cached_block(check_ctx *cx, const char *what, hhi_bblock *b, unsigned c) {
    uintptr_t a = (uintptr_t)b;
    CHECK(hhi_registry_get(a) == HHI_REG_SPAN, "cached block %p not in a span", (void *)b);
    hhi_bpage *pg = hhi_page_of(a);
    uint32_t i = hhi_block_index(pg, a);
    CHECK(pg->cls == c && i < hhi_page_carved(pg) && i * pg->block_size == (a & HHI_PAGE_MASK),
          "cached block %p of class %u is wrong", (void *)b, c);
    CHECK(hhi_block_is_free(b, hhi_bg.tag_key), "cached block %p not tagged", (void *)b);
    return true;
}

/* 5: the bin caps fit the cache limit; the calling thread's bins hold at
   most their cap of carved, tagged blocks of their class, and so does
   every class's transfer stack (batch counts and the total right). */
static bool check_inv5_thread_cache(check_ctx *cx) {
    static const char what[] = "5 (thread caches)";
    size_t sum = 0;
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) sum += (size_t)hhi_bg.cap[c] * hhi_class_size[c];
    CHECK(sum <= hhi_bg.cache_limit, "cache caps sum %zu > limit %zu", sum, (size_t)hhi_bg.cache_limit);
    /* The shared empty cache is never written: a write there would hand
       blocks or room to every thread without a cache. */
    CHECK(hhi_tc_empty.registry_len == 0, "the empty thread cache has a registry");
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++)
        CHECK(hhi_tc_empty.head[c] == NULL && hhi_bin_ops(&hhi_tc_empty, c) == 0 && hhi_bin_cap(&hhi_tc_empty, c) == 0,
              "the empty thread cache's bin %u is not empty", c);
    hhi_tcache *tc = hhi_tc_self;
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        uint32_t n = 0;
        CHECK(hhi_bin_room(tc, c) <= hhi_bin_cap(tc, c), "cache bin %u room %u above its cap %u", c,
              hhi_bin_room(tc, c), hhi_bin_cap(tc, c));
        CHECK(tc == &hhi_tc_empty || (tc->limit_cap[c] <= HHI_BIN_MAX &&
                                      (hhi_bin_cap(tc, c) == tc->limit_cap[c] ||
                                       hhi_bin_cap(tc, c) == HH_MIN(tc->limit_cap[c], HHI_BIN_FREE_ONLY))),
              "cache bin %u cap %u is neither its limit %u nor the free-only cap", c, hhi_bin_cap(tc, c),
              tc->limit_cap[c]);
        for (hhi_bblock *b = tc->head[c]; b != NULL; b = hhi_block_next(b)) {
            CHECK(n++ < hhi_bin_count(tc, c), "cache bin %u longer than its count", c);
            if (!check_cached_block(cx, what, b, c)) return false;
        }
        CHECK(n == hhi_bin_count(tc, c), "cache bin %u count %u != %u", c, hhi_bin_count(tc, c), n);
    }
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        const hhi_bclass *k = &hhi_bg.classes[c];
        CHECK(k->xfer_n <= HHI_XFER_MAX, "class %u transfer stack holds %u batches", c, k->xfer_n);
        uint32_t total = 0;
        for (uint32_t j = 0; j < k->xfer_n; j++) {
            uint32_t n = 0;
            CHECK(k->xfer[j].count > 0 && k->xfer[j].count <= HHI_BIN_MAX, "class %u transfer batch %u holds %u blocks",
                  c, j, k->xfer[j].count);
            for (hhi_bblock *b = k->xfer[j].head; b != NULL; b = hhi_block_next(b)) {
                CHECK(n++ < k->xfer[j].count, "class %u transfer batch %u longer than its count", c, j);
                if (!check_cached_block(cx, what, b, c)) return false;
            }
            CHECK(n == k->xfer[j].count, "class %u transfer batch %u holds %u blocks, not %u", c, j, n,
                  k->xfer[j].count);
            total += n;
        }
        CHECK(total == k->xfer_blocks, "class %u transfer stack holds %u blocks, not %u", c, total, k->xfer_blocks);
        /* Out of the pages' free lists are the live blocks and every cached
           one, each counted once in used: a block on a stack twice, or on a
           stack and in this thread's bin, shows as more than used. */
        CHECK(cx->class_live[c] + k->xfer_blocks + hhi_bin_count(tc, c) <= cx->class_used[c],
              "class %u has %llu live + %u on its transfer stack + %u in this thread's bin > %llu used", c,
              (unsigned long long)cx->class_live[c], k->xfer_blocks, hhi_bin_count(tc, c),
              (unsigned long long)cx->class_used[c]);
    }
    return true;
}

/* 6: live large blocks have a good header, registry byte(s) and count (those
   with a tail are exactly g.tails); the
   large cache holds LCACHE-marked extents within its limits, every chunk they
   touch LARGE_FREED, no two touching (a free merges them). */
static bool check_inv6_large_blocks(check_ctx *cx) {
    static const char what[] = "6 (large blocks)";
    uint64_t nlarge = 0;
    uint32_t ntails = 0;
    for (hhi_blarge *h = hhi_bg.large; h != NULL; h = h->next) {
        CHECK(nlarge++ < hhi_bg.large_count, "large list longer than its count");
        if (h->tail != 0) {
            bool listed = false;
            for (uint32_t i = 0; i < hhi_bg.n_tails; i++) listed |= hhi_bg.tails[i] == h;
            CHECK(listed && h->offset < HHI_SPAN_SIZE && h->tail % hhi_os_page_size() == 0,
                  "large block %p: tail of %zu bytes not listed", (void *)h, h->tail);
            ntails++;
        }
        CHECK(((uintptr_t)h & HHI_SPAN_MASK) == 0 && h->magic == HHI_LARGE_MAGIC && h->offset <= HHI_SPAN_SIZE &&
                  h->offset + h->size <= h->map_size && hhi_registry_get((uintptr_t)h) == HHI_REG_LARGE &&
                  (h->offset < HHI_SPAN_SIZE || hhi_registry_get((uintptr_t)h + h->offset) == HHI_REG_LARGE_FAR),
              "large block %p bad", (void *)h);
    }
    CHECK(nlarge == hhi_bg.large_count, "large count %llu != %llu", (unsigned long long)nlarge,
          (unsigned long long)hhi_bg.large_count);
    CHECK(ntails == hhi_bg.n_tails, "%u live large blocks have a tail, g.tails lists %u", ntails, hhi_bg.n_tails);
    uint32_t ncached = 0;
    size_t cached_bytes = 0;
    for (hhi_blarge *h = hhi_bg.lcache; h != NULL; h = h->next) {
        CHECK(ncached++ < hhi_bg.n_lcache, "large cache longer than its count");
        CHECK(((uintptr_t)h & HHI_SPAN_MASK) == 0 && h->magic == HHI_LCACHE_MAGIC &&
                  hhi_registry_get((uintptr_t)h) == HHI_REG_LARGE_FREED && (h->next == NULL || h->next->prev == h),
              "cached large mapping %p bad", (void *)h);
        uintptr_t end = (uintptr_t)h + h->map_size;
        for (uintptr_t a = (uintptr_t)h; a < end; a += HHI_SPAN_SIZE)
            CHECK(hhi_registry_get(a) == HHI_REG_LARGE_FREED, "cached large extent %p: chunk %p not registered",
                  (void *)h, (void *)a);
        for (hhi_blarge *o = hhi_bg.lcache; o != NULL; o = o->next)
            CHECK((uintptr_t)o != (uintptr_t)h + h->map_size, "cached large extents %p and %p touch: not merged",
                  (void *)h, (void *)o);
        cached_bytes += h->map_size;
    }
    CHECK(ncached == hhi_bg.n_lcache && cached_bytes == hhi_bg.lcache_bytes && ncached <= HHI_LCACHE_MAX &&
              cached_bytes <= HHI_LCACHE_BYTES,
          "large cache counters disagree");
    return true;
}

/* 7: each span's free_pages counts its pooled pages; the pool counters
   match the pages. */
static bool check_inv7_pool_counts(check_ctx *cx) {
    static const char what[] = "7 (pool counts)";
    uint32_t n_pool = 0, n_decommitted = 0;
    for (hhi_bspan *s = hhi_bg.spans; s != NULL; s = s->next) {
        uint32_t free_pages = 0;
        for (unsigned pi = 1; pi < HHI_PAGES_PER_SPAN; pi++) {
            const hhi_bpage *pg = &s->pages[pi];
            if (pg->cls != HHI_NO_CLASS) continue;
            free_pages++;
            if (pg->pool == HHI_POOL_DECOMMITTED) n_decommitted++;
        }
        CHECK(free_pages == s->free_pages, "span %p free_pages %u != %u", (void *)s, s->free_pages, free_pages);
        n_pool += free_pages;
    }
    CHECK(n_pool == hhi_bg.n_dirty + hhi_bg.n_clean && n_decommitted == hhi_bg.n_decommitted &&
              hhi_bg.n_decommitting == 0,
          "pool counters disagree with the spans");
    return true;
}
#undef CHECK

hh_status hh_binned_check(void) {
    if (!atomic_load_explicit(&hhi_bg.ready, memory_order_acquire)) return HH_OK;
    /* In order: 1 makes the span list safe to walk for the others, 3
       tallies the classes for 4. */
    static bool (*const checks[])(check_ctx *) = {
        check_inv1_spans_registered, check_inv2_page_owner,   check_inv3_block_accounting, check_inv4_partial_lists,
        check_inv5_thread_cache,     check_inv6_large_blocks, check_inv7_pool_counts,
    };
    check_ctx cx;
    memset(&cx, 0, sizeof cx);
    bool ok = true;
    hhi_lock_acquire(&hhi_bg.trim_lock);
    hhi_lock_all();
    for (size_t i = 0; ok && i < HH_ARRAY_LEN(checks); i++) ok = checks[i](&cx);
    hhi_unlock_all();
    hhi_lock_release(&hhi_bg.trim_lock);
    if (ok) return HH_OK;
    return hhi_error(HH_E_CORRUPT, "%s", cx.msg);
}

/* ---------------------------------------------------------------------------
   Walker and leak report: snapshot under the locks, call back without them.
--------------------------------------------------------------------------- */
static void page_info(const hhi_bpage *pg, hh_binned_region *r) {
    memset(r, 0, sizeof *r);
    r->address = hhi_page_base(pg);
    r->size = HHI_PAGE_SIZE;
    r->size_class = -1;
    r->committed = true;
    if (pg->index == 0) {
        r->kind = HH_BINNED_REGION_META;
    } else if (pg->cls == HHI_NO_CLASS) {
        r->kind = HH_BINNED_REGION_FREE;
        r->committed = pg->pool != HHI_POOL_DECOMMITTED;
    } else {
        r->kind = HH_BINNED_REGION_CLASS;
        r->size_class = pg->cls;
        r->block_size = pg->block_size;
        r->capacity = pg->capacity;
        uint32_t live = page_live_count(pg, hhi_page_carved(pg));
        r->live = live;
        r->cached = pg->used > live ? pg->used - live : 0;
    }
}

/* Takes g.trim_lock (spans stay mapped until spans_end) and returns the span
   list head. New spans join at the head, so the list from here on is stable. */
static hhi_bspan *spans_begin(void) {
    hhi_lock_acquire(&hhi_bg.trim_lock);
    hhi_lock_acquire(&hhi_bg.pool_lock);
    hhi_bspan *s = hhi_bg.spans;
    hhi_lock_release(&hhi_bg.pool_lock);
    return s;
}

static void spans_end(void) { hhi_lock_release(&hhi_bg.trim_lock); }

/* One large block as copied under g.large_lock. */
typedef struct large_snap {
    const hhi_blarge *header;      /* mapping base (the header itself) */
    size_t map_size;               /* bytes of the block's mapping, its tail aside */
    size_t offset;                 /* user pointer - header */
    size_t tail;                   /* idle bytes mapped past map_size (invariant 6) */
} large_snap;

/* Copies up to max large blocks, skipping the first `skip` on g.large, under
   g.large_lock; returns how many. Blocks freed between batches may be missed. */
static unsigned large_batch(size_t skip, large_snap *out, unsigned max) {
    unsigned n = 0;
    hhi_lock_acquire(&hhi_bg.large_lock);
    hhi_blarge *h = hhi_bg.large;
    for (size_t k = 0; h != NULL && k < skip; k++) h = h->next;
    for (; h != NULL && n < max; h = h->next, n++) out[n] = (large_snap){ h, h->map_size, h->offset, h->tail };
    hhi_lock_release(&hhi_bg.large_lock);
    return n;
}

void hh_binned_walk(hh_binned_walk_fn fn, void *user) {
    if (fn == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_binned_walk: fn is NULL");
        return;
    }
    if (!atomic_load_explicit(&hhi_bg.ready, memory_order_acquire)) return;
    hh_binned_region snap[HHI_PAGES_PER_SPAN];
    for (hhi_bspan *s = spans_begin(); s != NULL; s = s->next) {
        hhi_lock_all();
        for (unsigned i = 0; i < HHI_PAGES_PER_SPAN; i++) page_info(&s->pages[i], &snap[i]);
        hhi_unlock_all();
        for (unsigned i = 0; i < HHI_PAGES_PER_SPAN; i++) fn(&snap[i], user);
    }
    spans_end();
    large_snap big[HHI_PAGES_PER_SPAN];
    for (size_t skip = 0;; skip += HHI_PAGES_PER_SPAN) {
        unsigned n = large_batch(skip, big, HHI_PAGES_PER_SPAN);
        for (unsigned i = 0; i < n; i++) {
            hh_binned_region *r = &snap[i];
            memset(r, 0, sizeof *r);
            r->address = (uintptr_t)big[i].header;
            r->size = big[i].map_size + big[i].tail;   /* the regions sum to large_mapped_bytes */
            r->kind = HH_BINNED_REGION_LARGE;
            r->size_class = -1;
            r->block_size = (uint32_t)HH_MIN(big[i].map_size - big[i].offset, (size_t)UINT32_MAX);
            r->capacity = r->live = 1;
            r->committed = true;
            fn(r, user);
        }
        if (n < HHI_PAGES_PER_SPAN) break;
    }
}

size_t hh_binned_leak_report(hh_binned_leak_fn fn, void *user, size_t *bytes) {
    size_t count = 0, total = 0;
    if (atomic_load_explicit(&hhi_bg.ready, memory_order_acquire)) {
        enum { BATCH = 256 };
        const void *blocks[BATCH];
        size_t sizes[BATCH];
        for (hhi_bspan *s = spans_begin(); s != NULL; s = s->next) {
            for (unsigned pi = 1; pi < HHI_PAGES_PER_SPAN; pi++) {
                hhi_bpage *pg = &s->pages[pi];
                uint32_t i = 0;
                for (;;) {
                    unsigned n = 0;
                    /* Every lock: a page changes class under its old and new
                       class locks and the pool lock. A shutdown tool. */
                    hhi_lock_all();
                    unsigned c = pg->cls;
                    if (c != HHI_NO_CLASS) {
                        uintptr_t base = hhi_page_base(pg);
                        for (; i < hhi_page_carved(pg) && n < BATCH; i++)
                            if (!hhi_block_is_free((hhi_bblock *)(base + (uintptr_t)i * pg->block_size),
                                                   hhi_bg.tag_key)) {
                                blocks[n] = (const void *)(base + (uintptr_t)i * pg->block_size);
                                sizes[n++] = pg->block_size;
                            }
                    }
                    bool more = c != HHI_NO_CLASS && i < hhi_page_carved(pg);
                    hhi_unlock_all();
                    for (unsigned j = 0; j < n; j++) {
                        count++;
                        total += sizes[j];
                        if (fn) fn(blocks[j], sizes[j], user);
                    }
                    if (!more) break;
                }
            }
        }
        spans_end();
        large_snap big[HHI_PAGES_PER_SPAN];
        for (size_t skip = 0;; skip += HHI_PAGES_PER_SPAN) {
            unsigned n = large_batch(skip, big, HHI_PAGES_PER_SPAN);
            for (unsigned j = 0; j < n; j++) {
                size_t size = big[j].map_size - big[j].offset;
                count++;
                total += size;
                if (fn) fn((const char *)big[j].header + big[j].offset, size, user);
            }
            if (n < HHI_PAGES_PER_SPAN) break;
        }
    }
    if (bytes) *bytes = total;
    return count;
}
