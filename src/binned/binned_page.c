/* binned_page.c -- spans, the page pool, the span registry and the per-class
 * global lists (batched take/put under the class lock). See the invariants in
 * binned_internal.h. */
#include "binned_internal.h"

#include <pthread.h>
#include <sched.h>

#include "../common/hh_error.h"

hhi_bglobal hhi_bg = {
    .pool_lock = { PTHREAD_MUTEX_INITIALIZER },
    .large_lock = { PTHREAD_MUTEX_INITIALIZER },
    .tc_lock = { PTHREAD_MUTEX_INITIALIZER },
    .trim_lock = { PTHREAD_MUTEX_INITIALIZER },
};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int atfork_done = 0;

static void class_put_locked(unsigned c, hhi_bblock *b, uint32_t n);

static void fork_child_drop_runs(void);

/* fork: hold every lock across the fork so the child never inherits one
   taken by a thread that does not exist there. */
static void fork_prepare(void) {
    pthread_mutex_lock(&init_lock);
    hhi_lock_acquire(&hhi_bg.trim_lock);
    hhi_lock_acquire(&hhi_bg.tc_lock);
    hhi_lock_all();
    hhi_purge_fork_prepare();
}
static void fork_unlock(void) {
    hhi_unlock_all();
    hhi_lock_release(&hhi_bg.tc_lock);
    hhi_lock_release(&hhi_bg.trim_lock);
    pthread_mutex_unlock(&init_lock);
}
static void fork_parent(void) {
    hhi_purge_fork_parent();
    fork_unlock();
}
static void fork_child(void) {
    hhi_purge_fork_child();
    fork_unlock();
    if (atomic_load_explicit(&hhi_bg.ready, memory_order_acquire)) {
        fork_child_drop_runs();
        hhi_tcache_fork_child();
    }
}

/* Registers the fork handlers before main runs, so no thread can take an
   allocator lock before they exist (registering lazily in hhi_binned_init
   left a window in which a second thread initialised and locked while the
   first was still inside pthread_atfork). hhi_binned_init keeps the lazy path
   for toolchains without constructors. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor)) static void binned_register_atfork(void) {
    if (atomic_exchange(&atfork_done, 1) == 0) pthread_atfork(fork_prepare, fork_parent, fork_child);
}
#endif

/* The free tags' key (hhi_block_tag): the kernel's random bits and two
   addresses (the stack's and the library's, both placed by ASLR) mixed
   (splitmix64's finaliser), the top bit set. Not a secret against an
   attacker who can read memory; enough that no data a program stores by
   chance matches. */
static uint64_t tag_key_make(void) {
    int local = 0;
    uint64_t x = hhi_os_entropy() ^ ((uint64_t)(uintptr_t)&local << 16) ^ (uint64_t)(uintptr_t)&hhi_bg;
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x | ((uint64_t)1 << 63);
}

/* Maps the registry and sets up the classes, once. Nothing here allocates
   through malloc, so the shim can call it from inside malloc -- except
   pthread_atfork, which is called first, holding no lock: a malloc nested in
   it finds atfork_done set and initialises normally. Class locks are set up
   before `ready` is published, so the fork handlers are in place before any
   allocator lock can be taken. */
bool hhi_binned_init(void) {
    if (hh_likely(atomic_load_explicit(&hhi_bg.ready, memory_order_acquire))) return true;
    if (atomic_exchange(&atfork_done, 1) == 0) pthread_atfork(fork_prepare, fork_parent, fork_child);
    pthread_mutex_lock(&init_lock);
    bool ok = atomic_load_explicit(&hhi_bg.ready, memory_order_relaxed) != 0;
    if (!ok) {
        void *reg = hhi_os_map(HHI_REGISTRY_LEN, 0);
        if (reg != NULL) {
            hhi_bg.registry = reg;
            hhi_bg.tag_key = tag_key_make();
            for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) hhi_lock_init(&hhi_bg.classes[c].lock);
            hhi_tcache_compute_caps(HHI_DEFAULT_CACHE_LIMIT);
            hh_track_pool_create(&hhi_bg, NULL);
            atomic_store_explicit(&hhi_bg.ready, 1, memory_order_release);
            ok = true;
        }
    }
    pthread_mutex_unlock(&init_lock);
    return ok;
}

/* ---------------------------------------------------------------------------
   Page lists (doubly linked through next/prev)
--------------------------------------------------------------------------- */
static void list_push_front(hhi_bpage **head, hhi_bpage **tail, hhi_bpage *pg) {
    pg->prev = NULL;
    pg->next = *head;
    if (*head) (*head)->prev = pg;
    else if (tail) *tail = pg;
    *head = pg;
}

static void list_push_back(hhi_bpage **head, hhi_bpage **tail, hhi_bpage *pg) {
    pg->next = NULL;
    pg->prev = *tail;
    if (*tail) (*tail)->next = pg;
    else *head = pg;
    *tail = pg;
}

static void list_remove(hhi_bpage **head, hhi_bpage **tail, hhi_bpage *pg) {
    if (pg->prev) pg->prev->next = pg->next;
    else *head = pg->next;
    if (pg->next) pg->next->prev = pg->prev;
    else if (tail) *tail = pg->prev;
    pg->next = pg->prev = NULL;
}

/* ---------------------------------------------------------------------------
   Page pool (pool lock)
--------------------------------------------------------------------------- */
static void pool_insert(hhi_bpage *pg, unsigned which) {
    pg->pool = (uint8_t)which;
    if (which == HHI_POOL_DIRTY) {
        pg->dirty_tick = atomic_load_explicit(&hhi_bg.decay_tick, memory_order_relaxed);
        hhi_decay_work_note_bytes(HHI_PAGE_SIZE);
        list_push_front(&hhi_bg.dirty, &hhi_bg.dirty_tail, pg);
        hhi_bg.n_dirty++;
    } else {
        list_push_front(&hhi_bg.clean, NULL, pg);
        hhi_bg.n_clean++;
        if (which == HHI_POOL_DECOMMITTED) hhi_bg.n_decommitted++;
    }
    hhi_span_of((uintptr_t)pg)->free_pages++;
}

static void pool_remove(hhi_bpage *pg) {
    if (pg->pool == HHI_POOL_DIRTY) {
        list_remove(&hhi_bg.dirty, &hhi_bg.dirty_tail, pg);
        hhi_bg.n_dirty--;
    } else {
        list_remove(&hhi_bg.clean, NULL, pg);
        hhi_bg.n_clean--;
        if (pg->pool == HHI_POOL_DECOMMITTED) hhi_bg.n_decommitted--;
    }
    pg->pool = HHI_POOL_NONE;
    hhi_span_of((uintptr_t)pg)->free_pages--;
}

/* Maps (or takes back a retired range) and registers a new span; its pages
   join the clean list. */
static bool span_new(void) {
    hhi_bspan *s = hhi_bg.retired;
    uint16_t gen0;
    if (s != NULL) {
        /* Decommitted whole: reads as zero except what spans_retire wrote
           after the decommit (the link and the generation floor). */
        hhi_bg.retired = s->next;
        hhi_bg.n_retired--;
        gen0 = s->gen_base;
        memset(s, 0, sizeof *s);
    } else {
        s = hhi_os_map(HHI_SPAN_SIZE, HHI_SPAN_SIZE);
        if (s == NULL) return false;
        /* Never a span before (spans are never unmapped): no free can have
           read a word of its pages. */
        gen0 = (uint16_t)(++hhi_bg.spans_made * 4099u);
    }
    /* A retired range too: it may have been mapped while the option was
       off, and its retirement took the advice back. Spans are 2 MiB-aligned,
       so each half can be one huge page. */
    if (atomic_load_explicit(&hhi_bg.small_huge, memory_order_relaxed)) {
        hhi_os_hugepages(s, HHI_SPAN_SIZE, true);
        s->huge = 1;
    }
    s->magic = HHI_SPAN_MAGIC;
    s->gen_base = gen0;
    /* Highest first onto the clean list, whose head is taken first: pages
       go out from page 1 up. */
    for (unsigned i = HHI_PAGES_PER_SPAN; i-- > 0;) {
        hhi_bpage *pg = &s->pages[i];
        pg->index = (uint8_t)i;
        pg->cls = HHI_NO_CLASS;
        pg->gen = gen0;
        if (i > 0) pool_insert(pg, HHI_POOL_CLEAN);
    }
    s->next = hhi_bg.spans;
    if (s->next) s->next->prev = s;
    hhi_bg.spans = s;
    hhi_bg.n_spans++;
    atomic_store_explicit(&hhi_bg.registry[(uintptr_t)s >> HHI_SPAN_SHIFT], HHI_REG_SPAN, memory_order_release);
    return true;
}

/* A page for class c, set up; NULL if the OS refused a new span. */
#if HH_TESTING
_Atomic bool hhi_test_pool_dry;
_Atomic uint64_t hhi_test_take_waits;
#endif

static hhi_bpage *pool_get(unsigned c) {
#if HH_TESTING
    if (atomic_load_explicit(&hhi_test_pool_dry, memory_order_relaxed)) return NULL;
#endif
    hhi_lock_acquire(&hhi_bg.pool_lock);
    hhi_bpage *pg = hhi_bg.dirty ? hhi_bg.dirty : hhi_bg.clean;
    if (pg == NULL && span_new()) pg = hhi_bg.clean;
    if (pg != NULL) pool_remove(pg);
    hhi_lock_release(&hhi_bg.pool_lock);
    if (pg != NULL) hhi_page_setup_class(pg, c);
    return pg;
}

/* Gives an empty page back to the pool (class lock held). Its geometry
   stays, and how far it was carved (invariant 2): every block is free. */
static void pool_put(hhi_bpage *pg) {
    pg->cls = HHI_NO_CLASS;
    pg->free = NULL;
    hhi_page_carved_last_set(pg, hhi_page_carved(pg));   /* == reserved: no take in flight, nothing used */
    pg->used = 0;
    pg->reserved = 0;
    hhi_page_carved_set(pg, 0);
    hhi_lock_acquire(&hhi_bg.pool_lock);
    pool_insert(pg, HHI_POOL_DIRTY);
    hhi_lock_release(&hhi_bg.pool_lock);
}

void hhi_page_setup_class(hhi_bpage *pg, unsigned c) {
    uintptr_t base = hhi_page_base(pg);
    uint32_t size = hhi_class_size[c], cap = hhi_class_capacity(c);
    /* Whatever memcheck remembers of an earlier class is void now. */
    hh_track_undefined((void *)base, HHI_PAGE_SIZE);
    atomic_thread_fence(memory_order_release);   /* the geometry after the pool's word 0 (hhi_page_geometry) */
    hhi_page_geometry_set(&pg->block_size, size);
    hhi_page_geometry_set(&pg->capacity, cap);
    hhi_page_carved_last_set(pg, 0);
    pg->gen++;                                   /* a new tenure: its words differ from the last one's */
    hhi_page_geometry_set(&pg->recip, hhi_recip_of(size));
    pg->cls = (uint8_t)c;
    pg->free = NULL;
    pg->used = 0;
    pg->reserved = 0;
    hhi_page_carved_set(pg, 0);
    pg->in_partial = 0;
}

/* ---------------------------------------------------------------------------
   Class lists
--------------------------------------------------------------------------- */
/* Fresh blocks a take reserved under the class lock (pg->reserved covers
   them) and links after releasing it: their first write faults the memory
   in, and a page fault -- microseconds, more in a VM -- under the class
   lock stalled every thread of the class behind it (16 threads filling
   their arrays at once slept on the locks thousands of times a run). Once
   they are linked and tagged, the taker publishes them (carved covers them)
   before it hands any out. Until then they are outside carved: a free of
   one (a pointer never handed out) takes the slow path and reads as
   foreign, where a claim would have taken a block its taker was about to
   link, and the block would have been handed out twice. One take at a time
   is in flight on a page (take_page), so carved stays a prefix: a second
   take that overtook the first could not publish its blocks before the
   first did, and could not hand them out until then. */
typedef struct fresh_run {
    hhi_bpage *page;            /* NULL: none */
    uint32_t first;             /* index of the first block */
    uint32_t count;             /* blocks */
} fresh_run;

static uint32_t class_take_locked(unsigned c, hhi_bblock **out, hhi_bblock **out_tail, uint32_t want,
                                  fresh_run *fresh);
static uint32_t xfer_pop_locked(hhi_bclass *k, hhi_bblock **head);

#if HH_TESTING
_Atomic(hhi_test_class_hook) hhi_binned_test_carve_hook;
#endif

/* Links a fresh run behind *tail (or as the list when *head is NULL), no
   lock held: each block gets its link and tag, as a bin needs; then
   publishes the run. The page's class and carved count cannot change
   meanwhile: its run counts as used (no pool_put) and no other take carves
   it (take_page), so this store is the word's only writer. */
static void fresh_link(unsigned c, hhi_bblock **head, hhi_bblock *tail, const fresh_run *fr) {
    if (fr->count == 0) return;
#if HH_TESTING
    hhi_test_class_hook hook = atomic_load_explicit(&hhi_binned_test_carve_hook, memory_order_relaxed);
    if (hook) hook(c);
#else
    (void)c;
#endif
    hhi_bpage *pg = fr->page;
    uint32_t bs = pg->block_size;
    uintptr_t at = hhi_page_base(pg) + (uintptr_t)fr->first * bs;
    uint64_t key = hhi_bg.tag_key;
    for (uint32_t i = 0; i < fr->count; i++) {
        hhi_bblock *b = (hhi_bblock *)(at + (uintptr_t)i * bs);
        hhi_bblock *next = i + 1 < fr->count ? (hhi_bblock *)((uintptr_t)b + bs) : NULL;
        hhi_block_set_cached(b, next, key);
    }
    hh_assert_internal(hhi_page_carved(pg) == fr->first);
    hhi_page_carved_set(pg, fr->first + fr->count);   /* release: after the tags */
    if (tail != NULL) hhi_block_set_next(tail, (hhi_bblock *)at);
    else *head = (hhi_bblock *)at;
}

uint32_t hhi_class_take(unsigned c, hhi_bblock **out, uint32_t want) {
    hhi_bclass *k = &hhi_bg.classes[c];
    hhi_bblock *tail;
    fresh_run fresh;
    hhi_lock_acquire(&k->lock);
    uint32_t got = class_take_locked(c, out, &tail, want, &fresh);
    hhi_lock_release(&k->lock);
    fresh_link(c, out, tail, &fresh);
    return got;
}

uint32_t hhi_class_refill(unsigned c, hhi_bblock **out, uint32_t max, uint32_t want) {
    hhi_bclass *k = &hhi_bg.classes[c];
    hhi_bblock *tail = NULL;
    fresh_run fresh = { NULL, 0, 0 };
    hhi_lock_acquire(&k->lock);
    uint32_t got = k->xfer_n > 0 && k->xfer[k->xfer_n - 1].count <= max
                       ? xfer_pop_locked(k, out)
                       : class_take_locked(c, out, &tail, want, &fresh);
    hhi_lock_release(&k->lock);
    fresh_link(c, out, tail, &fresh);
    return got;
}

/* The page a take serves from (class lock held): the first partial page
   with a free-list block or one to carve -- but no page with another
   take's fresh run in flight (carved short of reserved) for carving; NULL
   when none, *busy then telling whether it passed such a page. The walk
   passes only pages being carved right now, at most one per thread
   taking. */
static hhi_bpage *take_page(const hhi_bclass *k, bool *busy) {
    *busy = false;
    for (hhi_bpage *pg = k->head; pg != NULL; pg = pg->next) {
        if (pg->free != NULL || hhi_page_carved(pg) == pg->reserved) return pg;
        *busy = true;
    }
    return NULL;
}

/* hhi_class_take with the class lock held: the blocks of page free lists
   linked (*out, its last block *out_tail), and fresh blocks reserved in
   *fresh, for the caller to link once the lock is released (fresh_link).
   Returns the count of both. */
static uint32_t class_take_locked(unsigned c, hhi_bblock **out, hhi_bblock **out_tail, uint32_t want,
                                  fresh_run *fresh) {
    hhi_bclass *k = &hhi_bg.classes[c];
    hhi_bblock *head = NULL, *tail = NULL;
    uint32_t got = 0;
    *fresh = (fresh_run){ NULL, 0, 0 };
    while (got < want) {
        bool busy;
        hhi_bpage *pg = take_page(k, &busy);
        if (pg == NULL) {
            /* The pages left with room are being carved by other takes:
               what this take has is enough, or it needs a page of its own
               -- or, with none to be had, waits for those takes to publish
               (they need no lock to), rather than failing with room left. */
            if (busy && got > 0) break;
            pg = pool_get(c);
            if (pg == NULL && busy) {
                HHI_TEST_COUNT(hhi_test_take_waits);
                hhi_lock_release(&k->lock);
                sched_yield();
                hhi_lock_acquire(&k->lock);
                continue;
            }
            if (pg == NULL) break;
            k->pages++;
            k->empty++;
            pg->in_partial = 1;
            list_push_front(&k->head, &k->tail, pg);
        }
        if (pg->used == 0) k->empty--;
        uint32_t n = 0;
        while (got + n < want && pg->free != NULL) {
            hhi_bblock *b = pg->free;
            pg->free = hhi_block_next(b);
            hhi_block_set_next(b, NULL);   /* tagged since its free */
            if (tail) hhi_block_set_next(tail, b);
            else head = b;
            tail = b;
            n++;
        }
        /* Fresh blocks: up to the end of the OS page the first one starts
           in (at least one block), then the take stops. Carving writes
           every block's link, so it faults its memory in: a refill of half
           a bin of 16 KiB touched four OS pages per class when one block
           was used (a program's first malloc of each size). Reserved here,
           written and published by fresh_link without the lock. */
        bool carved_fresh = false;
        if (got + n < want && pg->reserved < pg->capacity && hhi_page_carved(pg) == pg->reserved) {
            uintptr_t at = hhi_page_base(pg) + (uintptr_t)pg->reserved * pg->block_size;
            uintptr_t carve_end = (at & ~(uintptr_t)(HHI_CARVE_BYTES - 1)) + HHI_CARVE_BYTES;
            uint32_t fit = (uint32_t)((carve_end - at + pg->block_size - 1) / pg->block_size);   /* >= 1 */
            uint32_t m = HH_MIN(HH_MIN(want - got - n, pg->capacity - pg->reserved), fit);
            *fresh = (fresh_run){ pg, pg->reserved, m };
            pg->reserved += m;
            n += m;
            carved_fresh = true;
        }
        pg->used += n;
        k->used += n;
        got += n;
        if (pg->free == NULL && pg->reserved == pg->capacity) {
            list_remove(&k->head, &k->tail, pg);
            pg->in_partial = 0;
        }
        if (carved_fresh) break;   /* one OS page of fresh memory per take */
    }
    *out = head;
    *out_tail = tail;
    return got;
}

void hhi_class_put(unsigned c, hhi_bblock *b, uint32_t n) {
    hhi_bclass *k = &hhi_bg.classes[c];
    hhi_lock_acquire(&k->lock);
    class_put_locked(c, b, n);
    hhi_lock_release(&k->lock);
}

/* A page of class k that has just become empty (used 0), on the partial
   list (class lock held): HHI_KEEP_EMPTY such pages stay as spares at the
   list's tail, the rest go to the pool. */
static void page_emptied(hhi_bclass *k, hhi_bpage *pg) {
    list_remove(&k->head, &k->tail, pg);
    if (k->empty >= HHI_KEEP_EMPTY) {
        pg->in_partial = 0;
        k->pages--;
        pool_put(pg);
    } else {
        k->empty++;
        list_push_back(&k->head, &k->tail, pg);
        hhi_decay_work_note_running();   /* a spare: the next pass pools it */
    }
}

/* In a fork child: a take that was linking a fresh run outside the locks
   when another thread forked never publishes it -- that thread is gone.
   The run's blocks go back to their page unreserved, or the page could
   never be carved again (a take passes over a page with a run in flight)
   and its blocks would count as used for good. The child has one thread. */
static void fork_child_drop_runs(void) {
    for (hhi_bspan *s = hhi_bg.spans; s != NULL; s = s->next)
        for (unsigned pi = 1; pi < HHI_PAGES_PER_SPAN; pi++) {
            hhi_bpage *pg = &s->pages[pi];
            if (pg->cls == HHI_NO_CLASS || hhi_page_carved(pg) == pg->reserved) continue;
            hhi_bclass *k = &hhi_bg.classes[pg->cls];
            hhi_lock_acquire(&k->lock);
            uint32_t n = pg->reserved - hhi_page_carved(pg);
            pg->reserved -= n;
            pg->used -= n;
            k->used -= n;
            if (!pg->in_partial) {
                pg->in_partial = 1;
                list_push_front(&k->head, &k->tail, pg);
            }
            if (pg->used == 0) page_emptied(k, pg);
            hhi_lock_release(&k->lock);
        }
}

/* hhi_class_put with the class lock held. */
static void class_put_locked(unsigned c, hhi_bblock *b, uint32_t n) {
    hhi_bclass *k = &hhi_bg.classes[c];
    while (n-- > 0 && b != NULL) {
        hhi_bblock *next = hhi_block_next(b);
        hhi_bpage *pg = hhi_page_of((uintptr_t)b);
        hh_assert_internal(pg->cls == c && pg->used > 0);
        hhi_block_set_next(b, pg->free);
        pg->free = b;
        pg->used--;
        k->used--;
        if (!pg->in_partial) {
            pg->in_partial = 1;
            list_push_front(&k->head, &k->tail, pg);
        }
        if (pg->used == 0) page_emptied(k, pg);
        b = next;
    }
}

/* Transfer stacks (class lock) */

void hhi_class_xfer_put(unsigned c, hhi_bblock *head, uint32_t n) {
    hhi_bclass *k = &hhi_bg.classes[c];
    /* Blocks the stack may hold: as many as HHI_XFER_BINS full bins. The
       usual batch is half a bin (a bin that also allocates keeps the other
       half), so HHI_XFER_MAX of them hold about as many blocks and both
       limits tend to bind together; small batches (bins that only free)
       meet the count limit first. */
    uint32_t max_blocks = HHI_XFER_BINS * atomic_load_explicit(&hhi_bg.cap[c], memory_order_relaxed);
    hhi_lock_acquire(&k->lock);
    while (k->xfer_n == HHI_XFER_MAX || (k->xfer_n > 0 && k->xfer_blocks + n > max_blocks)) {
        /* Full: the oldest batch goes back to its pages (nobody took it
           while newer ones arrived), the rest move down one. */
        hhi_bblock *old = k->xfer[0].head;
        uint32_t old_n = k->xfer[0].count;
        memmove(&k->xfer[0], &k->xfer[1], (HHI_XFER_MAX - 1) * sizeof k->xfer[0]);
        k->xfer_n--;
        k->xfer_blocks -= old_n;
        class_put_locked(c, old, old_n);
    }
    k->xfer[k->xfer_n] = (hhi_xfer_batch){ head, n };
    k->xfer_n++;
    k->xfer_blocks += n;
    hhi_decay_work_note_running();   /* every pass walks batches back to their pages */
    hhi_lock_release(&k->lock);
}

/* Takes the newest batch off class k's stack (lock held, xfer_n > 0). */
static uint32_t xfer_pop_locked(hhi_bclass *k, hhi_bblock **head) {
    k->xfer_n--;
    *head = k->xfer[k->xfer_n].head;
    k->xfer_blocks -= k->xfer[k->xfer_n].count;
    return k->xfer[k->xfer_n].count;
}

/* Walks every batch of class c's transfer stack back to its pages (class
   lock held), until the deadline (0: none). */
static void class_xfer_drain(unsigned c, uint64_t deadline_ns) {
    hhi_bclass *k = &hhi_bg.classes[c];
    while (k->xfer_n > 0) {
        if (deadline_ns && hhi_now_ns() >= deadline_ns) return;
        hhi_bblock *b;
        uint32_t n = xfer_pop_locked(k, &b);
        class_put_locked(c, b, n);
    }
}

/* Gives every class's transfer batches back to their pages and its spare
   empty pages to the pool (trim, and every decay pass). A pass takes every
   batch, a fresh one too: batches carry no age, and one pass (each period)
   walking a batch back costs far less than the memory it would keep --
   the idle program of the `release` workload keeps 3 MB more resident a
   second after its frees when the last period's batches wait a pass. */
static void classes_release_empty(uint64_t deadline_ns) {
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        hhi_bclass *k = &hhi_bg.classes[c];
        hhi_lock_acquire(&k->lock);
        class_xfer_drain(c, deadline_ns);
        while (k->empty > 0 && k->tail != NULL && k->tail->used == 0) {
            hhi_bpage *pg = k->tail;
            list_remove(&k->head, &k->tail, pg);
            pg->in_partial = 0;
            k->empty--;
            k->pages--;
            pool_put(pg);
        }
        hhi_lock_release(&k->lock);
    }
}

/* Decommits one dirty page; false if the OS refused (the page stays dirty).
   Pool lock held on entry and on return, but not across the madvise: with
   it held, a thread that needed a page waited for a whole pass (up to its
   1 ms budget). The page is on no list meanwhile, so no take finds it; the
   caller's trim lock keeps the walks, the check and fork out of that window,
   and a stale free of one of its blocks reads carved_last, as for any
   pooled page. */
static bool page_decommit(hhi_bpage *pg) {
    void *base = (void *)hhi_page_base(pg);
    pool_remove(pg);
    hhi_bg.n_decommitting++;   /* still a free page for the stats */
    hhi_lock_release(&hhi_bg.pool_lock);
    bool ok = hhi_os_decommit(base, HHI_PAGE_SIZE);
    if (ok) hh_track_undefined(base, HHI_PAGE_SIZE);
    hhi_lock_acquire(&hhi_bg.pool_lock);
    hhi_bg.n_decommitting--;
    pool_insert(pg, ok ? HHI_POOL_DECOMMITTED : HHI_POOL_DIRTY);   /* refused: dirty anew, its age restarted */
    return ok;
}

static size_t spans_retire(uint64_t deadline_ns);

/* Decommits dirty pool pages -- every one (all), or those that joined the
   pool before tick older_than -- and retires wholly free spans, until the
   deadline (0: none); trim lock held (hhi_pool_decay, hhi_pool_trim).
   Returns the bytes given back (pages never touched count as given back
   when their span retires: an upper bound of the RSS returned). */
static size_t pool_release(bool all, uint32_t older_than, uint64_t deadline_ns) {
    size_t given = 0;
    hhi_lock_acquire(&hhi_bg.pool_lock);
    /* The dirty list is newest first (pages join at the head with the tick
       of their day, and takes use the head, the likeliest to be reused
       soon): from its tail, the oldest page, the old ones end at the first
       young one. The tail is read afresh after each decommit, which drops
       the lock; and no more pages than were dirty at the start, or pages
       that other threads pool meanwhile could keep the list from emptying. */
    for (uint32_t left = hhi_bg.n_dirty; left > 0; left--) {
        hhi_bpage *pg = hhi_bg.dirty_tail;
        if (pg == NULL || (!all && (int32_t)(pg->dirty_tick - older_than) >= 0)) break;
        /* The clock before every madvise: each costs far more than a reading. */
        if (deadline_ns && hhi_now_ns() >= deadline_ns) break;
        if (!page_decommit(pg)) break;
        given += HHI_PAGE_SIZE;
    }
    given += spans_retire(deadline_ns);
    hhi_lock_release(&hhi_bg.pool_lock);
    return given;
}

size_t hhi_pool_decay(uint32_t older_than, uint64_t deadline_ns) {
    return pool_release(false, older_than, deadline_ns);
}

size_t hhi_pool_trim(uint64_t deadline_ns) {
    classes_release_empty(deadline_ns);
    return pool_release(true, 0, deadline_ns);
}

/* Retires every wholly free span until the deadline (trim lock and pool
   lock held; the pool lock is dropped around each span's decommit). */
static size_t spans_retire(uint64_t deadline_ns) {
    size_t given = 0;
    hhi_bspan *s = hhi_bg.spans;
    while (s != NULL) {
        hhi_bspan *next = s->next;
        if (deadline_ns && hhi_now_ns() >= deadline_ns) break;
        if (s->free_pages == HHI_PAGES_PER_SPAN - 1) {
            uint16_t tenures = 0;
            for (unsigned i = 1; i < HHI_PAGES_PER_SPAN; i++) {
                hhi_bpage *pg = &s->pages[i];
                if (pg->pool != HHI_POOL_DECOMMITTED) given += HHI_PAGE_SIZE;
                pool_remove(pg);
                uint16_t t = (uint16_t)(pg->gen - s->gen_base);
                if (t > tenures) tenures = t;
            }
            /* The decommit zeroes the pages' generations. When the range
               comes back its pages start past every generation they have
               had since span_new (all started at gen_base, each counts up),
               so a word a racing free read before this retirement does not
               come back for 2^16 - tenures more tenures: as on a live page. */
            uint16_t gen_next = (uint16_t)(s->gen_base + tenures + 1u);
            if (s->prev) s->prev->next = s->next;
            else hhi_bg.spans = s->next;
            if (s->next) s->next->prev = s->prev;
            hhi_bg.n_spans--;
            atomic_store_explicit(&hhi_bg.registry[(uintptr_t)s >> HHI_SPAN_SHIFT], HHI_REG_SPAN_FREED,
                                  memory_order_release);
            /* Retire, never unmap (invariant 7): a free racing this trim may
               still read the header. If the decommit fails the range is
               kept all the same; only the memory stays. An advised span
               drops the advice first: the link written below would fault a
               whole 2 MiB page back in (a retired span held 2 MiB resident
               instead of 4 KiB: `release` with huge pages kept 152 MB, not
               12). span_new advises it again. */
            /* Off every list now: the OS calls go without the pool lock, as
               a page's decommit does. `next` stays valid meanwhile: new
               spans join at the head, and only a trim-lock holder retires. */
            hhi_lock_release(&hhi_bg.pool_lock);
            if (s->huge) hhi_os_hugepages(s, HHI_SPAN_SIZE, false);
            hh_track_undefined(s, HHI_SPAN_SIZE);
            if (hhi_os_decommit(s, HHI_SPAN_SIZE)) given += HHI_PAGE_SIZE;   /* the metadata page */
            hh_track_defined(s, HHI_SPAN_SIZE);   /* such a racing free reads zeros: legal */
            hhi_lock_acquire(&hhi_bg.pool_lock);
            s->next = hhi_bg.retired;
            s->gen_base = gen_next;   /* on the page the link faulted in, in pages[0]'s line: a racing
                                         free reads pages[0] only up to its page word */
            hhi_bg.retired = s;
            hhi_bg.n_retired++;
        }
        s = next;
    }
    return given;
}

/* ---------------------------------------------------------------------------
   Decay: one bounded pass per period, run by whichever thread notices it is
   due (the CAS on decay_next_ns elects one): the purge thread
   (binned_purge.c) while it runs, else a slow path (refill, flush, large
   block). A pass unmaps large
   mappings cached for at least a period and decommits pool pages that were
   dirty at the previous pass already (so one to two periods old).
--------------------------------------------------------------------------- */
/* The work of a pass (trim lock held): large mappings freed before cutoff,
   spare empty pages, pool pages dirty before tick, until the deadline.
   Records whether it stopped at the deadline with work maybe left. */
static void decay_work(uint32_t tick, uint64_t cutoff_ns, uint64_t deadline_ns) {
    hhi_large_decay(cutoff_ns, deadline_ns);
    classes_release_empty(deadline_ns);
    hhi_pool_decay(tick, deadline_ns);
    bool more = hhi_now_ns() >= deadline_ns;
    if (more) {
        atomic_store_explicit(&hhi_bg.decay_more_tick, tick, memory_order_relaxed);
        atomic_store_explicit(&hhi_bg.decay_more_cutoff, cutoff_ns, memory_order_relaxed);
    }
    atomic_store_explicit(&hhi_bg.decay_more, more, memory_order_release);
}

bool hhi_decay_pass(bool sampled) {
    uint64_t period = atomic_load_explicit(&hhi_bg.decay_ns, memory_order_relaxed);
    if (period == 0) return false;
    /* Refills and flushes look at the clock only every 32nd time: a clock
       read costs as much as the rest of a refill of a small class. */
    static _Thread_local uint32_t calls HHI_TLS_MODEL;
    if (sampled && (++calls & 31u) != 0) return false;
    uint64_t now = hhi_now_ns(), due = atomic_load_explicit(&hhi_bg.decay_next_ns, memory_order_relaxed);
    if (due == 0) {   /* set without a clock (hhi_binned_set_decay): the first period starts now */
        atomic_compare_exchange_strong(&hhi_bg.decay_next_ns, &due, now + period);
        return false;
    }
    if (now < due) return false;
    if (!atomic_compare_exchange_strong(&hhi_bg.decay_next_ns, &due, now + period)) return false;   /* another thread */
    if (pthread_mutex_trylock(&hhi_bg.trim_lock.m) != 0) return false;   /* a trim is running: it does the work */
    uint32_t tick = atomic_fetch_add(&hhi_bg.decay_tick, 1);       /* pages of this tick or later stay */
    decay_work(tick, now - period, now + HHI_DECAY_BUDGET_NS);
    hhi_lock_release(&hhi_bg.trim_lock);
    return true;
}

bool hhi_decay_continue(void) {
    if (!atomic_load_explicit(&hhi_bg.decay_more, memory_order_acquire)) return false;
    if (pthread_mutex_trylock(&hhi_bg.trim_lock.m) != 0) return false;
    if (atomic_load_explicit(&hhi_bg.decay_more, memory_order_relaxed))
        decay_work(atomic_load_explicit(&hhi_bg.decay_more_tick, memory_order_relaxed),
                   atomic_load_explicit(&hhi_bg.decay_more_cutoff, memory_order_relaxed),
                   hhi_now_ns() + HHI_DECAY_BUDGET_NS);
    bool more = atomic_load_explicit(&hhi_bg.decay_more, memory_order_relaxed);
    hhi_lock_release(&hhi_bg.trim_lock);
    return more;
}

size_t hhi_decay_held_bytes(void) {
    hhi_lock_acquire(&hhi_bg.pool_lock);
    size_t held = (size_t)hhi_bg.n_dirty * HHI_PAGE_SIZE;
    hhi_lock_release(&hhi_bg.pool_lock);
    hhi_lock_acquire(&hhi_bg.large_lock);
    held += hhi_bg.lcache_bytes;
    for (uint32_t i = 0; i < hhi_bg.n_tails; i++) held += hhi_bg.tails[i]->tail;
    hhi_lock_release(&hhi_bg.large_lock);
    return held;
}

bool hhi_decay_has_work(void) {
    if (atomic_load_explicit(&hhi_bg.decay_more, memory_order_acquire)) return true;
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        hhi_bclass *k = &hhi_bg.classes[c];
        hhi_lock_acquire(&k->lock);
        bool work = k->empty > 0 || k->xfer_n > 0;
        hhi_lock_release(&k->lock);
        if (work) return true;
    }
    /* A cached extent or a kept tail is never empty (a tail that reaches 0
       leaves the list), so held bytes say whether there is any. */
    return hhi_decay_held_bytes() > 0;
}

#if HH_TESTING
_Atomic(hhi_test_hook) hhi_binned_test_decay_hook;
_Atomic uint64_t hhi_test_decay_passes_program;
_Atomic uint64_t hhi_test_purge_counts;
#endif

/* While the thread is wanted: whether decay now holds enough for it. It
   counts (two lock round trips) only once the bytes noted since the last
   count could have brought what decay held then to the mark -- a program
   that reuses one cached 100 KB mapping, holding little else, counts once
   in ten frees, not at every one; one holding 900 KiB counts at every
   free of it -- and one caller at a time counts (another leaves its notes
   to the next). */
static bool purge_worth_starting(void) {
    size_t noted = atomic_load_explicit(&hhi_bg.decay_noted, memory_order_relaxed);
    size_t seen = atomic_load_explicit(&hhi_bg.purge_seen, memory_order_relaxed);
    if (noted == 0 || seen + noted < HHI_PURGE_START_BYTES) return false;
    if (atomic_exchange_explicit(&hhi_bg.purge_counting, true, memory_order_acquire)) return false;
    /* Acquire: a note that reads the state after a switch to WANTED made
       its bytes visible before purge_count_soon's release, which this
       pairs with. A note from here on is counted below or stays noted. */
    (void)atomic_exchange_explicit(&hhi_bg.decay_noted, 0, memory_order_acquire);
    size_t held = hhi_decay_held_bytes();
    HHI_TEST_COUNT(hhi_test_purge_counts);
    atomic_store_explicit(&hhi_bg.purge_seen, held, memory_order_relaxed);
    atomic_store_explicit(&hhi_bg.purge_counting, false, memory_order_release);
    return held >= HHI_PURGE_START_BYTES;
}

void hhi_decay_maybe(bool sampled) {
#if HH_TESTING
    hhi_test_hook hook = atomic_load_explicit(&hhi_binned_test_decay_hook, memory_order_relaxed);
    if (hook) hook();   /* stands for the purge thread's creation */
#endif
    if (hh_likely(atomic_load_explicit(&hhi_bg.decay_ns, memory_order_relaxed) == 0)) return;
    /* With the purge thread running the passes are its alone: their
       madvise/munmap calls (up to 1 ms) stay off the program's threads --
       a frame thread must not pay for them inside malloc or free. The
       thread sleeps until the next pass is due, so nothing needs to tell
       it that one is (telling it would be a futex call here); with nothing
       to give back it sleeps until hhi_decay_work_noted wakes it. */
    int st = hhi_purge_state();
    if (hh_likely(st == HHI_PURGE_RUNNING)) return;
    /* The thread starts once decay holds HHI_PURGE_START_BYTES: a program
       that only ever gives it a directory buffer or a few pages never gets
       one. A thread is not free: besides its stack, glibc counts the
       process as multithreaded from its creation on, for good
       (__libc_single_threaded; libstdc++'s shared_ptr then counts with
       locked instructions), and a short tool (a compiler pass, `git log`)
       that freed 32 KiB got one. Below the mark, what decay holds is not
       worth a clock reading on every large block's call either: the passes
       are sampled as a refill's are. */
    if (hh_unlikely(st == HHI_PURGE_WANTED)) {
        if (purge_worth_starting()) hhi_purge_start();
        else sampled = true;
    }
    if (hhi_decay_pass(sampled)) HHI_TEST_COUNT(hhi_test_decay_passes_program);
}

/* ---------------------------------------------------------------------------
   Locking everything (fork, check, walk)
--------------------------------------------------------------------------- */
void hhi_lock_all(void) {
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) hhi_lock_acquire(&hhi_bg.classes[c].lock);
    hhi_lock_acquire(&hhi_bg.pool_lock);
    hhi_lock_acquire(&hhi_bg.large_lock);
}

void hhi_unlock_all(void) {
    hhi_lock_release(&hhi_bg.large_lock);
    hhi_lock_release(&hhi_bg.pool_lock);
    for (unsigned c = HHI_CLASS_COUNT; c-- > 0;) hhi_lock_release(&hhi_bg.classes[c].lock);
}
