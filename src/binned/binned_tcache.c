/* binned_tcache.c -- per-thread caches: creation on a thread's first slow
 * path, batched refill/flush against the class lists (a full bin's older
 * half moves to its class's transfer stack, in binned.c's free slow path), flush at
 * thread exit (pthread key destructor), and the fork handlers. A thread
 * without a cache points at hhi_tc_empty, never NULL.
 *
 * Cache structs come from 64 KiB slabs mapped from the OS and are recycled
 * through g.tc_free; nothing here calls malloc, so the shim may run it from
 * inside malloc. pthread_setspecific may allocate (for high key numbers): the
 * thread is marked CREATING meanwhile so such a nested malloc takes the
 * cacheless path instead of recursing. The fork handlers live with the init
 * code in binned_page.c. */
#include "binned_internal.h"

#include <pthread.h>

#include "../common/hh_error.h"

/* Zero: no registry (registry_len 0), no block, no room, cap 0. */
hhi_tcache hhi_tc_empty;
_Thread_local hhi_tcache *hhi_tc_self HHI_TLS_MODEL = &hhi_tc_empty;

enum { TC_NONE = 0, TC_ACTIVE, TC_CREATING, TC_DEAD };
static _Thread_local unsigned char tc_state HHI_TLS_MODEL = TC_NONE;

static pthread_key_t tc_key;
static atomic_int tc_key_state = 0;     /* 0 none, 1 creating, 2 made, 3 failed */
#define TC_SLAB_SIZE ((size_t)65536)

/* Thread-cache bin caps from a byte limit (invariant 5). Classes up to 1 KiB,
   where most allocations are, get limit/64 bytes each (2..HHI_BIN_MAX
   blocks: 256 blocks of 16..128 B, 32 of 1 KiB at the default 2 MiB).
   Larger classes get a block count instead -- HHI_BIN_DEEP (8) up to 8 KiB,
   HHI_BIN_DEEP / 2 above -- since a byte share gave them two blocks, and a
   loop that holds three 8 KiB buffers then missed on every third
   allocation. Smallest classes first; whatever does not fit the limit is
   cut from the largest classes (never more than the limit in total). */
void hhi_tcache_compute_caps(size_t limit) {
    size_t left = limit;
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        size_t size = hhi_class_size[c];
        size_t cap = size <= 1024 ? limit / 64 / size : size <= 8192 ? HHI_BIN_DEEP : HHI_BIN_DEEP / 2;
        if (cap < 2) cap = 2;
        if (cap > HHI_BIN_MAX) cap = HHI_BIN_MAX;
        if (cap * size > left) cap = left / size;
        left -= cap * size;
        atomic_store_explicit(&hhi_bg.cap[c], (uint32_t)cap, memory_order_relaxed);
    }
    atomic_store(&hhi_bg.cache_limit, limit);
}

hhi_bblock *hhi_bin_detach_older(hhi_tcache *tc, unsigned c, uint32_t keep) {
    hhi_bblock *rest;
    if (keep == 0) {
        rest = tc->head[c];
        tc->head[c] = NULL;
    } else {
        hhi_bblock *b = tc->head[c];
        for (uint32_t i = 1; i < keep; i++) b = hhi_block_next(b);
        rest = hhi_block_next(b);
        hhi_block_set_next(b, NULL);
    }
    return rest;
}

/* Moves all but `keep` blocks of bin c (the older ones, at the list's end)
   back to the class. */
static void tcache_flush_bin(hhi_tcache *tc, unsigned c, uint32_t keep) {
    uint32_t count = hhi_bin_count(tc, c);
    if (count <= keep) return;
    hhi_bblock *rest = hhi_bin_detach_older(tc, c, keep);
    hhi_bin_count_set(tc, c, keep);
    hhi_class_put(c, rest, count - keep);
}

void hhi_tcache_cap_set(hhi_tcache *tc, unsigned c, uint32_t cap) {
    uint32_t old = hhi_bin_cap(tc, c);
    if (cap == old) return;
    tcache_flush_bin(tc, c, cap);
    uint32_t count = hhi_bin_count(tc, c);
    uint64_t ops = (hhi_bin_ops(tc, c) & ~HHI_BIN_COUNT_MASK) | (cap - count);
    /* A reader on another thread (stats) may pair the cap of one moment
       with the room of another: the order makes it count too few cached
       blocks, never too many (growing: the room first; shrinking: the cap). */
    if (cap > old) {
        atomic_store_explicit(&tc->ops[c], ops, memory_order_relaxed);
        atomic_store_explicit(&tc->cap[c], cap, memory_order_relaxed);
    } else {
        atomic_store_explicit(&tc->cap[c], cap, memory_order_relaxed);
        atomic_store_explicit(&tc->ops[c], ops, memory_order_relaxed);
    }
}

void hhi_tcache_cap_refresh(hhi_tcache *tc, unsigned c) {
    uint32_t cap = atomic_load_explicit(&hhi_bg.cap[c], memory_order_relaxed);
    if (cap == tc->limit_cap[c]) return;
    tc->limit_cap[c] = cap;
    hhi_tcache_cap_set(tc, c, cap);
}

/* Every bin back to the class, walked to its end rather than by its count:
   the same for a live thread's cache, and right for a fork child's copy of
   a dead thread's, which may have died between linking a block and counting
   it, or between a cap and its room. At most a full bin and one more (a
   list in a sane state is never longer). */
static void tcache_flush_all(hhi_tcache *tc) {
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        hhi_bblock *b = tc->head[c];
        tc->head[c] = NULL;
        hhi_bin_count_set(tc, c, 0);
        if (b != NULL) hhi_class_put(c, b, HHI_BIN_MAX + 1);
    }
}

/* Folds a cache's hit and miss counts into the retired totals (tc_lock). */
static void retire_counters(const hhi_tcache *tc) {
    for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
        atomic_fetch_add(&hhi_bg.retired_hits[c], hhi_bin_hits(tc, c));
        atomic_fetch_add(&hhi_bg.retired_misses[c], atomic_load(&tc->misses[c]));
    }
}

/* Thread exit: flush, fold the counters into the retired totals, recycle. */
static void tcache_destructor(void *arg) {
    hhi_tcache *tc = arg;
    if (tc == NULL) return;
    tcache_flush_all(tc);
    hhi_tc_self = &hhi_tc_empty;
    tc_state = TC_DEAD;
    hhi_lock_acquire(&hhi_bg.tc_lock);
    retire_counters(tc);
    if (tc->prev) tc->prev->next = tc->next;
    else hhi_bg.tcaches = tc->next;
    if (tc->next) tc->next->prev = tc->prev;
    hhi_bg.n_tcaches--;
    tc->next = hhi_bg.tc_free;
    hhi_bg.tc_free = tc;
    hhi_lock_release(&hhi_bg.tc_lock);
}

/* Fork child, locks released, one thread: every cache but the caller's
   belongs to a thread that does not exist here. Their blocks go back to
   their pages and their counters to the retired totals, so the child neither
   strands the memory nor reports caches that can never run. A block a dead
   thread was moving at the instant of the fork (between its bin and a
   class) is lost to the child: nothing records where it was. */
void hhi_tcache_fork_child(void) {
    hhi_tcache *self = hhi_tc_self, *dead = NULL;
    hhi_lock_acquire(&hhi_bg.tc_lock);
    for (hhi_tcache *tc = hhi_bg.tcaches, *next; tc != NULL; tc = next) {
        next = tc->next;
        if (tc == self) continue;
        if (tc->prev) tc->prev->next = tc->next;
        else hhi_bg.tcaches = tc->next;
        if (tc->next) tc->next->prev = tc->prev;
        hhi_bg.n_tcaches--;
        tc->next = dead;
        dead = tc;
    }
    hhi_lock_release(&hhi_bg.tc_lock);
    while (dead != NULL) {
        hhi_tcache *tc = dead;
        dead = tc->next;
        tcache_flush_all(tc);
        hhi_lock_acquire(&hhi_bg.tc_lock);
        retire_counters(tc);
        tc->next = hhi_bg.tc_free;
        hhi_bg.tc_free = tc;
        hhi_lock_release(&hhi_bg.tc_lock);
    }
}

static bool key_ready(void) {
    int st = atomic_load_explicit(&tc_key_state, memory_order_acquire);
    if (hh_likely(st == 2)) return true;
    if (st == 0) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&tc_key_state, &expect, 1)) {
            int ok = pthread_key_create(&tc_key, tcache_destructor) == 0;
            atomic_store_explicit(&tc_key_state, ok ? 2 : 3, memory_order_release);
            return ok;
        }
    }
    return false;   /* another thread is creating it: stay cacheless meanwhile */
}

static hhi_tcache *tcache_new(void) {
    hhi_lock_acquire(&hhi_bg.tc_lock);
    hhi_tcache *tc = hhi_bg.tc_free;
    if (tc != NULL) {
        hhi_bg.tc_free = tc->next;
    } else {
        if (hhi_bg.tc_slab_left < sizeof *tc) {
            char *slab = hhi_os_map(TC_SLAB_SIZE, 0);
            if (slab != NULL) {
                hhi_bg.tc_slab = slab;
                hhi_bg.tc_slab_left = TC_SLAB_SIZE;
            }
        }
        if (hhi_bg.tc_slab_left >= sizeof *tc) {
            tc = (hhi_tcache *)(void *)hhi_bg.tc_slab;
            hhi_bg.tc_slab += hh_align_up(sizeof *tc, 64);
            hhi_bg.tc_slab_left -= HH_MIN(hhi_bg.tc_slab_left, hh_align_up(sizeof *tc, 64));
        }
    }
    if (tc != NULL) {
        memset(tc, 0, sizeof *tc);
        tc->registry = hhi_bg.registry;
        tc->tag_key = hhi_bg.tag_key;
        tc->registry_len = HHI_REGISTRY_LEN;
        for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) {
            uint32_t cap = atomic_load_explicit(&hhi_bg.cap[c], memory_order_relaxed);
            atomic_store_explicit(&tc->cap[c], cap, memory_order_relaxed);
            atomic_store_explicit(&tc->ops[c], cap, memory_order_relaxed);   /* empty: room == cap */
            tc->limit_cap[c] = cap;
        }
        tc->next = hhi_bg.tcaches;
        if (tc->next) tc->next->prev = tc;
        hhi_bg.tcaches = tc;
        hhi_bg.n_tcaches++;
    }
    hhi_lock_release(&hhi_bg.tc_lock);
    return tc;
}

hhi_tcache *hhi_tcache_get(void) {
    if (hhi_tc_self != &hhi_tc_empty) return hhi_tc_self;
    if (tc_state != TC_NONE) return NULL;   /* creating (nested call) or thread exiting */
    if (!hhi_binned_init() || !key_ready()) return NULL;
    /* pthread_atfork/pthread_key_create may have allocated, and that nested
       call may have made this thread's cache already. */
    if (hhi_tc_self != &hhi_tc_empty) return hhi_tc_self;
    if (tc_state != TC_NONE) return NULL;
    tc_state = TC_CREATING;
    hhi_tcache *tc = tcache_new();
    if (tc == NULL) {
        tc_state = TC_NONE;    /* out of memory: try again on a later slow path */
        return NULL;
    }
    if (pthread_setspecific(tc_key, tc) != 0) {
        tc_state = TC_NONE;
        tcache_destructor(tc);
        tc_state = TC_NONE;
        return NULL;
    }
    hhi_tc_self = tc;
    tc_state = TC_ACTIVE;
    return tc;
}

void hh_binned_thread_flush(void) {
    hhi_tcache *tc = hhi_tc_self;
    if (tc != &hhi_tc_empty) tcache_flush_all(tc);
}

hh_status hh_binned_set_thread_cache_limit(size_t bytes) {
    if (bytes > HHI_MAX_CACHE_LIMIT)
        return hhi_error(HH_E_INVALID_ARG, "hh_binned_set_thread_cache_limit: %zu bytes is above the 64 MiB maximum",
                         bytes);
    if (!hhi_binned_init()) return hhi_error(HH_E_NO_MEMORY, "hh_binned_set_thread_cache_limit: init failed");
    hhi_lock_acquire(&hhi_bg.tc_lock);
    hhi_tcache_compute_caps(bytes);
    hhi_lock_release(&hhi_bg.tc_lock);
    /* The caller's own bins adapt now; other threads' at their next refill or
       full-bin free (each thread writes only its own cache). */
    hhi_tcache *self = hhi_tc_self;
    if (self != &hhi_tc_empty)
        for (unsigned c = 0; c < HHI_CLASS_COUNT; c++) hhi_tcache_cap_refresh(self, c);
    return HH_OK;
}

size_t hh_binned_thread_cache_limit(void) {
    hhi_binned_init();
    return atomic_load(&hhi_bg.cache_limit);
}
