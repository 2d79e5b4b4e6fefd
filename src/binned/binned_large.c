/* binned_large.c -- blocks above 32 KiB (or with an alignment no class can
 * give) mapped straight from the OS.
 *
 * The mapping starts at a 4 MiB boundary with a hhi_blarge header; the user
 * pointer is base + offset (64, or the alignment). The registry byte of the
 * first 4 MiB chunk says LARGE, so free finds the header in O(1) from the
 * pointer by masking, and a pointer whose chunk says LARGE_FREED is a double
 * free -- while the freed mapping is cached; once it goes back to the OS its
 * chunk reads NONE again (anyone may map the range next: foreign).
 *
 * Freed mappings up to 64 MiB are kept in a cache (32 mappings, 256 MiB at
 * most) and reused for any request they hold: the smallest that fits is
 * taken, and a tail it has beyond a quarter to spare is unmapped first, so
 * the reused block keeps its faulted-in head and the rest goes back. Mapping
 * and faulting in fresh pages cost far more than the block's use in
 * frame-style code (and blocks of 5-25 MiB churned by a program cost one
 * mmap, one munmap and thousands of page faults each without the cache).
 * hh_binned_trim empties the cache; decay (hh_binned_set_decay_ms) unmaps
 * the mappings that stayed unused for a period. */
#include "binned_internal.h"

#include "../common/hh_error.h"

/* Unmaps [p, p + size) of a mapping no longer listed anywhere. The range is
   made accessible first: ASan keeps poison across munmap, and the range may
   come back as one of our spans. */
static void large_unmap_range(void *p, size_t size) {
    hh_track_undefined(p, size);
    hhi_os_unmap(p, size);
}
/* A mapping leaves the large cache (or, freed, is not kept) to go back to
   the OS: its registry bytes go from LARGE_FREED back to NONE, under
   g.large_lock, before it is unmapped. Once unmapped anyone may map the
   range, so a pointer there must read as foreign; and a free that finds
   LARGE_FREED under the lock knows the mapping is still there to look at. */
static void large_forget(hhi_blarge *h) {
    uintptr_t base = (uintptr_t)h;
    if (h->offset >= HHI_SPAN_SIZE)
        atomic_store_explicit(&hhi_bg.registry[(base + h->offset) >> HHI_SPAN_SHIFT], HHI_REG_NONE,
                              memory_order_release);
    atomic_store_explicit(&hhi_bg.registry[base >> HHI_SPAN_SHIFT], HHI_REG_NONE, memory_order_release);
}

/* Unmaps a whole mapping already forgotten (large_forget). */
static void large_unmap(hhi_blarge *h) { large_unmap_range(h, h->map_size); }

/* Links a fresh header at h (mapping of map_size bytes, user pointer h +
   offset) into g.large and registers it. */
static void large_register(hhi_blarge *h, size_t map_size, size_t offset, size_t size) {
    h->magic = HHI_LARGE_MAGIC;
    h->map_size = map_size;
    h->offset = offset;
    h->size = size;
    hhi_lock_acquire(&hhi_bg.large_lock);
    h->prev = NULL;
    h->next = hhi_bg.large;
    if (h->next) h->next->prev = h;
    hhi_bg.large = h;
    hhi_bg.large_count++;
    hhi_bg.large_bytes += map_size - offset;
    hhi_bg.large_mapped += map_size;
    uintptr_t base = (uintptr_t)h;
    if (offset >= HHI_SPAN_SIZE)
        atomic_store_explicit(&hhi_bg.registry[(base + offset) >> HHI_SPAN_SHIFT], HHI_REG_LARGE_FAR,
                              memory_order_release);
    atomic_store_explicit(&hhi_bg.registry[base >> HHI_SPAN_SHIFT], HHI_REG_LARGE, memory_order_release);
    hhi_lock_release(&hhi_bg.large_lock);
}

/* An alignment above 2 MiB: the user pointer p is a multiple of align (so of
   4 MiB too) and the header sits at p - 4 MiB, the chunk below, which free
   finds from p's LARGE_FAR registry byte. Over-maps by align and trims both
   ends; the header chunk is address space only (one page touched). Never
   cached for reuse. */
static void *large_alloc_far(size_t size, size_t align, unsigned flags) {
    size_t page = hhi_os_page_size();
    if (size > SIZE_MAX / 4 - align - HHI_SPAN_SIZE - page) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: request too large", NULL);
        return NULL;
    }
    if (size == 0) size = 1;
    size_t body = hh_align_up(size, page), map_size = HHI_SPAN_SIZE + body;
    size_t len = map_size + align;
    char *raw = hhi_os_map(len, HHI_SPAN_SIZE);
    if (raw == NULL) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: the OS refused a large block", NULL);
        return NULL;
    }
    char *p = (char *)hh_align_up_ptr((uintptr_t)raw + HHI_SPAN_SIZE, align);
    char *base = p - HHI_SPAN_SIZE;
    size_t lead = (size_t)(base - raw), tail = len - lead - map_size;
    if (lead) hhi_os_unmap(raw, lead);
    if (tail) hhi_os_unmap(base + map_size, tail);
    large_register((hhi_blarge *)(void *)base, map_size, HHI_SPAN_SIZE, size);
    if (flags & HHI_ZERO) {
        hh_track_alloc_defined(&hhi_bg, p, body);
    } else {
        hh_track_alloc(&hhi_bg, p, body);
        if (HH_DEBUG >= 2) memset(p, HH_FILL_ALLOC, size);
    }
    return p;
}

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
    char *base = NULL, *trim_from = NULL;
    size_t trim_bytes = 0;
    bool reused = false;
    hhi_decay_maybe(false);
    {
        hhi_lock_acquire(&hhi_bg.large_lock);
        /* The smallest mapping that holds the request, else the largest
           one (its pages move into a fresh, larger mapping below). */
        hhi_blarge *best = NULL, *grow = NULL;
        for (hhi_blarge *c = hhi_bg.lcache; c != NULL; c = c->next) {
            if (c->map_size >= map_size) {
                if (best == NULL || c->map_size < best->map_size) best = c;
            } else if (grow == NULL || c->map_size > grow->map_size) {
                grow = c;
            }
        }
        hhi_blarge *take = best ? best : grow;
        if (grow != NULL && best == NULL) large_forget(grow);   /* moved or unmapped below */
        if (take != NULL) {
            if (take->prev) take->prev->next = take->next;
            else hhi_bg.lcache = take->next;
            if (take->next) take->next->prev = take->prev;
            hhi_bg.n_lcache--;
            hhi_bg.lcache_bytes -= take->map_size;
        }
        if (best != NULL) {
            base = (char *)best;
            reused = true;
            if (best->map_size - map_size > map_size / 2) {
                trim_from = base + map_size;   /* unmapped below, outside the lock */
                trim_bytes = best->map_size - map_size;
            } else {
                map_size = best->map_size;
            }
        } else if (grow != NULL) {
            trim_from = (char *)grow;          /* moved (or unmapped) below */
            trim_bytes = grow->map_size;
        }
        hhi_lock_release(&hhi_bg.large_lock);
    }
    if (base != NULL) {
        if (trim_bytes) large_unmap_range(trim_from, trim_bytes);
    } else {
        base = hhi_os_map(map_size, HHI_SPAN_SIZE);
        /* A cached mapping too small: move its faulted-in pages to the head
           of the new one (mremap), so only the extra part faults. */
        if (trim_bytes) {
            hhi_blarge *old = (hhi_blarge *)(void *)trim_from;
            if (base != NULL) {
                if (hhi_os_move(old, trim_bytes, base)) reused = true;
                else large_unmap_range(old, trim_bytes);
            } else {
                large_unmap(old);
            }
        }
    }
    if (base == NULL) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: the OS refused a large block", NULL);
        return NULL;
    }
    large_register((hhi_blarge *)(void *)base, map_size, offset, size);
    void *p = base + offset;
    if (flags & HHI_ZERO) {
        hh_track_alloc_defined(&hhi_bg, p, map_size - offset);   /* fresh mappings read as zero */
        if (reused) memset(p, 0, size);
    } else {
        hh_track_alloc(&hhi_bg, p, map_size - offset);
        if (HH_DEBUG >= 2) memset(p, HH_FILL_ALLOC, size);
    }
    return p;
}



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
    if (h->prev) h->prev->next = h->next;
    else hhi_bg.large = h->next;
    if (h->next) h->next->prev = h->prev;
    hhi_bg.large_count--;
    hhi_bg.large_bytes -= h->map_size - h->offset;
    hhi_bg.large_mapped -= h->map_size;
    atomic_store_explicit(&hhi_bg.registry[a >> HHI_SPAN_SHIFT], HHI_REG_LARGE_FREED, memory_order_release);
    atomic_store_explicit(&hhi_bg.registry[(uintptr_t)h >> HHI_SPAN_SHIFT], HHI_REG_LARGE_FREED, memory_order_release);
    size_t map_size = h->map_size, offset = h->offset;
    hh_track_free(&hhi_bg, (void *)a, map_size - offset);
    /* Keep it for reuse, evicting the oldest cached mappings to make room. */
    hhi_blarge *evict[HHI_LCACHE_MAX + 1];
    unsigned ne = 0;
    if (map_size <= HHI_LCACHE_BLOCK && offset < HHI_SPAN_SIZE) {
        while (hhi_bg.n_lcache > 0 &&
               (hhi_bg.n_lcache >= HHI_LCACHE_MAX || hhi_bg.lcache_bytes + map_size > HHI_LCACHE_BYTES)) {
            hhi_blarge *old = hhi_bg.lcache;
            while (old->next) old = old->next;
            if (old->prev) old->prev->next = NULL;
            else hhi_bg.lcache = NULL;
            hhi_bg.n_lcache--;
            hhi_bg.lcache_bytes -= old->map_size;
            large_forget(old);
            evict[ne++] = old;
        }
        h->magic = HHI_LCACHE_MAGIC;
        h->freed_ns = hhi_now_ns();
        h->prev = NULL;
        h->next = hhi_bg.lcache;
        if (h->next) h->next->prev = h;
        hhi_bg.lcache = h;
        hhi_bg.n_lcache++;
        hhi_bg.lcache_bytes += map_size;
        hhi_decay_work_note();
    } else {
        large_forget(h);
        h->magic = 0;
        evict[ne++] = h;
    }
    hhi_lock_release(&hhi_bg.large_lock);
    for (unsigned i = 0; i < ne; i++) large_unmap(evict[i]);
    hhi_decay_maybe(false);
    return HH_OK;
}

/* Unmaps cached mappings, the oldest first, while the oldest was freed
   before freed_before_ns (UINT64_MAX: all), checking the deadline (0: none)
   before each: unmapping a populated 64 MiB mapping alone takes
   milliseconds. */
static size_t lcache_release(uint64_t freed_before_ns, uint64_t deadline_ns) {
    size_t bytes = 0;
    for (;;) {
        if (deadline_ns && hhi_now_ns() >= deadline_ns) break;
        hhi_lock_acquire(&hhi_bg.large_lock);
        hhi_blarge *old = hhi_bg.lcache;
        if (old != NULL) {
            while (old->next) old = old->next;
            if (old->freed_ns >= freed_before_ns) {
                old = NULL;
            } else {
                if (old->prev) old->prev->next = NULL;
                else hhi_bg.lcache = NULL;
                hhi_bg.n_lcache--;
                hhi_bg.lcache_bytes -= old->map_size;
                large_forget(old);
            }
        }
        hhi_lock_release(&hhi_bg.large_lock);
        if (old == NULL) break;
        bytes += old->map_size;
        large_unmap(old);
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
    /* Still LARGE_FREED under the lock: the mapping is cached, so mapped. A
       mapping may be far smaller than its 4 MiB chunk, whose rest is anyone's. */
    if (hhi_registry_get(a) == HHI_REG_LARGE_FREED) {
        hhi_blarge *h = (hhi_blarge *)(a & ~(uintptr_t)HHI_SPAN_MASK);
        if (h->magic == HHI_LCACHE_MAGIC && a >= (uintptr_t)h + HHI_LARGE_HDR && a < (uintptr_t)h + h->map_size)
            st = HH_E_DOUBLE_FREE;
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
