/* handles.c -- generational handle table (see include/hheap/handles.h).
 *
 * Invariants (checked by hh_heap_check through the heap, and by the tests):
 *  H1  slots[0] = {NULL, 0}, never issued: HH_NULL looks up as NULL.
 *  H2  a live slot's key has HH_HANDLE_KEY_FREE clear and its tag is t->tag;
 *      every other slot (free, retired, never used) has HH_HANDLE_KEY_FREE set.
 *  H3  the free FIFO links exactly free_count slots, head oldest, tail newest.
 *  H4  live_count + free_count + retired_count == hwm - 1.
 *  H5  no two live tables have the same tag (tag_acquire / tag_release).
 * The slot array is one mapping reserved for `capacity` slots; untouched pages
 * cost nothing, and pointers into it never change (lock-free lookups).
 */
#include "handles_internal.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "../common/hh_error.h"
#include "../common/hh_meta.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   Table identity: tags 1..255, never two live tables with the same one
--------------------------------------------------------------------------- */
/* Bit t of tag_used: tag t belongs to a live table (bit 0 is never handed out).
   A tag is taken with one atomic fetch-or on its word (whoever turns the bit
   on owns it) and given back with a fetch-and: no lock, so a fork child can
   never find the allocator held. The search starts one past the previous
   start, so a tag freed by a destroyed table is the last one reused. */
static _Atomic uint64_t tag_used[4];
static atomic_uint      tag_cursor;
/* Times each tag has been taken (mod 256): the epoch of its current table,
   which puts it in the top bits of the table's first generation. Written only
   by the table that owns the tag. */
static _Atomic uint8_t  tag_epoch[256];

/* A tag no live table has, and its epoch; 0 when all 255 are in use. */
uint8_t hhi_handle_tag_acquire(uint8_t *epoch) {
    unsigned start = atomic_fetch_add(&tag_cursor, 1);
    for (unsigned k = 0; k < HH_HANDLE_TAG_COUNT; k++) {
        unsigned tag = (start + k) % HH_HANDLE_TAG_COUNT + 1u;   /* 1..255 */
        uint64_t bit = (uint64_t)1 << (tag % 64);
        if (atomic_load(&tag_used[tag / 64]) & bit) continue;
        if (atomic_fetch_or(&tag_used[tag / 64], bit) & bit) continue;   /* another thread won it */
        *epoch = atomic_fetch_add(&tag_epoch[tag], 1);
        return (uint8_t)tag;
    }
    return 0;
}

void hhi_handle_tag_release(uint8_t tag) {
    if (tag) atomic_fetch_and(&tag_used[tag / 64], ~((uint64_t)1 << (tag % 64)));
}

/* Per tag: the first generation of its next heap, with bit 31 set once a
   heap left one (a start of 0 is a generation like any other). Written by
   the holder before it frees the tag (the fetch-and above), read by the next
   holder after it took it (the fetch-or): relaxed is enough. */
static _Atomic uint32_t tag_heap_next[256];

bool hhi_handle_tag_heap_gen(uint8_t tag, uint32_t *first) {
    uint32_t v = atomic_load_explicit(&tag_heap_next[tag], memory_order_relaxed);
    *first = v & 0x7FFFFFFFu;
    return (v & 0x80000000u) != 0;
}

void hhi_handle_tag_heap_gen_set(uint8_t tag, uint32_t next) {
    atomic_store_explicit(&tag_heap_next[tag], next | 0x80000000u, memory_order_relaxed);
}

enum { HUGE_BYTES = 2u << 20 };                        /* the usual transparent huge page */

/* ---------------------------------------------------------------------------
   Slot arrays: the generic table's and the heap's (handles_internal.h)
--------------------------------------------------------------------------- */
/* Slots committed once `have` are: the next HH_HANDLE_COMMIT_SLOTS, at most cap. */
static uint32_t commit_target(uint32_t cap, uint32_t have) {
    return cap - have > (uint32_t)HH_HANDLE_COMMIT_SLOTS ? have + (uint32_t)HH_HANDLE_COMMIT_SLOTS : cap;
}
/* Bytes of whole pages holding the first n slots of `size` bytes, at most the reservation. */
static size_t commit_bytes(uint32_t n, size_t size, size_t reserved) {
    size_t b = hh_align_up((size_t)n * size, hhi_os_page_size());
    return b < reserved ? b : hh_align_up(reserved, hhi_os_page_size());
}

void *hhi_slot_array_map(uint32_t cap, size_t size, bool growable, bool huge, uint32_t *committed) {
    size_t bytes = (size_t)cap * size;
    size_t align = huge && bytes >= HUGE_BYTES ? HUGE_BYTES : 0;   /* whole huge pages from the start */
    /* zero pages: key 0 everywhere; a growable array's stay read-only until committed */
    void *slots = growable ? hhi_os_reserve(bytes, align, true) : hhi_os_map(bytes, align);
    if (slots == NULL) return NULL;
    *committed = cap;
    if (growable) {
        *committed = commit_target(cap, 0);
        if (!hhi_os_commit(slots, commit_bytes(*committed, size, bytes))) {
            hhi_os_unmap(slots, bytes);
            return NULL;
        }
    }
    if (huge) hhi_os_hugepages(slots, bytes, true);
    return slots;
}

uint32_t hhi_slot_array_grow(void *slots, size_t size, uint32_t cap, uint32_t have) {
    if (have >= cap) return have;
    uint32_t to = commit_target(cap, have);
    size_t reserved = (size_t)cap * size;
    size_t from_b = commit_bytes(have, size, reserved), to_b = commit_bytes(to, size, reserved);
    if (to_b > from_b && !hhi_os_commit((char *)slots + from_b, to_b - from_b)) return have;
    return to;
}

bool hh_handle_table_commit_more(hh_handle_table *t) {
    if (t == NULL || t->slots == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_handle_table_commit_more: table is NULL or not initialised");
        return false;
    }
    uint32_t to = hhi_slot_array_grow(t->slots, sizeof(hh_handle_slot), t->capacity, t->committed);
    if (to == t->committed) return false;
    t->committed = to;
    return true;
}

/* ---------------------------------------------------------------------------
   Life cycle
--------------------------------------------------------------------------- */
hh_status hh_handle_table_init(hh_handle_table *t, const hh_handle_table_desc *desc) {
    if (t == NULL || desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_handle_table_init: NULL argument");
    if (desc->capacity == 0 || desc->capacity > HH_HANDLE_MAX_SLOTS)
        return hhi_error(HH_E_INVALID_ARG, "hh_handle_table_init: capacity %u not in 1..%u", desc->capacity,
                         (unsigned)HH_HANDLE_MAX_SLOTS);
    if (desc->flags & ~(uint32_t)(HH_HANDLE_TABLE_GROWABLE | HH_HANDLE_TABLE_HUGE_PAGES))
        return hhi_error(HH_E_INVALID_ARG, "hh_handle_table_init: unknown flags %#x", desc->flags);
    uint32_t cap = desc->capacity + 1u;                       /* + sentinel slot 0 */
    size_t bytes = (size_t)cap * sizeof(hh_handle_slot);
    bool grow = (desc->flags & HH_HANDLE_TABLE_GROWABLE) != 0;
    uint32_t committed;
    hh_handle_slot *slots = hhi_slot_array_map(cap, sizeof(hh_handle_slot), grow,
                                               (desc->flags & HH_HANDLE_TABLE_HUGE_PAGES) != 0, &committed);
    if (slots == NULL)
        return hhi_error(HH_E_NO_MEMORY, "hh_handle_table_init: cannot %s %zu bytes for %u slots",
                         grow ? "reserve (and commit the first pages of)" : "map", bytes, cap);
    uint8_t epoch = 0, tag = hhi_handle_tag_acquire(&epoch);
    if (tag == 0) {
        hhi_os_unmap(slots, bytes);
        return hhi_error(HH_E_NO_MEMORY, "hh_handle_table_init: all %u table tags are held by live tables",
                         (unsigned)HH_HANDLE_TAG_COUNT);
    }
    uint32_t min_free = desc->min_free ? desc->min_free : HH_HANDLE_MIN_FREE_DEFAULT;
    if (min_free > desc->capacity / 4) min_free = desc->capacity / 4;
    *t = (hh_handle_table){
        .slots = slots, .capacity = cap, .hwm = 1, .min_free = min_free, .tag = tag, .reserved_bytes = bytes,
        .first_gen = ((uint32_t)epoch << HH_HANDLE_EPOCH_SHIFT) + 1u, .committed = committed,
    };
    return HH_OK;
}

void hh_handle_table_fini(hh_handle_table *t) {
    if (t == NULL || t->slots == NULL) return;
    hhi_os_unmap(t->slots, t->reserved_bytes);
    hhi_handle_tag_release(t->tag);
    t->tag = 0;
    t->slots = NULL;
    t->capacity = 0;
}

hh_status hh_handle_table_create(const hh_handle_table_desc *desc, hh_handle_table **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_handle_table_create: out is NULL");
    *out = NULL;
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_handle_table_create: desc is NULL");
    hh_handle_table *t = hhi_meta_alloc(sizeof *t);
    if (t == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_handle_table_create: cannot allocate the table");
    hh_status s = hh_handle_table_init(t, desc);
    if (s != HH_OK) {
        hhi_meta_free(t);
        return s;
    }
    *out = t;
    return HH_OK;
}

void hh_handle_table_destroy(hh_handle_table *t) {
    if (t == NULL) return;
    hh_handle_table_fini(t);
    hhi_meta_free(t);
}

/* ---------------------------------------------------------------------------
   Issue / release
--------------------------------------------------------------------------- */
hh_handle hh_handle_alloc(hh_handle_table *t, void *ptr) {
    if (hh_unlikely(t == NULL || t->slots == NULL)) {
        hhi_error(HH_E_INVALID_ARG, "hh_handle_alloc: NULL table");
        return HH_NULL;
    }
    hh_handle h = hh_handle_issue_fast(t, ptr);
    if (hh_unlikely(hh_is_null(h)))
        hhi_error(HH_E_NO_MEMORY, "handle table full: %u live, %u retired of %u slots", t->live_count,
                  t->retired_count, t->capacity - 1u);
    return h;
}

/* Slot of h if h is live, else NULL (nothing reported). */
static hh_handle_slot *slot_live(const hh_handle_table *t, hh_handle h) {
    uint32_t idx = hh_handle_index(h);
    /* A never-issued slot still reads key 0 (untouched zero page): an id whose
       key part is 0 (generation 0) was never issued by anyone. */
    if (idx == 0 || idx >= t->capacity || (h.id >> HH_HANDLE_INDEX_BITS) == 0) return NULL;
    hh_handle_slot *s = &t->slots[idx];
    return HH_SLOT_LOAD_ACQ(&s->key) == (h.id >> HH_HANDLE_INDEX_BITS) ? s : NULL;   /* lock-free callers */
}

hh_status hh_handle_release(hh_handle_table *t, hh_handle h) {
    if (t == NULL || t->slots == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_handle_release: NULL table");
    if (hh_is_null(h)) return HH_OK;
    hh_handle_slot *s = slot_live(t, h);
    if (s == NULL) return hh_handle_check(t, h, "hh_handle_release");
    hh_handle_drop_fast(t, s, hh_handle_index(h));
    return HH_OK;
}

hh_status hh_handle_set(hh_handle_table *t, hh_handle h, void *ptr) {
    if (t == NULL || t->slots == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_handle_set: NULL table");
    hh_handle_slot *s = slot_live(t, h);
    if (s == NULL) return hh_handle_check(t, h, "hh_handle_set");
    HH_SLOT_STORE(&s->ptr, ptr);
    return HH_OK;
}

void *hh_handle_get(const hh_handle_table *t, hh_handle h) {
    if (hh_unlikely(t == NULL || t->slots == NULL)) {
        hhi_error(HH_E_INVALID_ARG, "hh_handle_get: table is NULL or not initialised");
        return NULL;
    }
    return hh_handle_lookup(t, h);
}

hh_status hh_handle_check(const hh_handle_table *t, hh_handle h, const char *who) {
    if (t == NULL || t->slots == NULL) return hhi_error(HH_E_INVALID_ARG, "%s: NULL table", who);
    if (slot_live(t, h) != NULL) return HH_OK;
    if (hh_is_null(h)) return hhi_error(HH_E_STALE_HANDLE, "%s: null handle", who);
    uint32_t idx = hh_handle_index(h);
    unsigned tag = (unsigned)((h.id >> HH_HANDLE_INDEX_BITS) & 0xFF);
    if (tag != t->tag)
        return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx belongs to another table (tag %u, this table %u)", who,
                         (unsigned long long)h.id, tag, (unsigned)t->tag);
    if (idx >= HH_SLOT_LOAD(&t->hwm))   /* hh_deref's slow path reads it without the lock */
        return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx was never issued", who, (unsigned long long)h.id);
    return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx is stale (freed; slot generation now %u)", who,
                     (unsigned long long)h.id, hh_handle_key_gen(HH_SLOT_LOAD(&t->slots[idx].key)));
}

void hh_handle_table_stats_get(const hh_handle_table *t, hh_handle_table_stats *out) {
    if (out == NULL) {                                 /* as hh_heap_stats_get: bad input is reported */
        hhi_error(HH_E_INVALID_ARG, "hh_handle_table_stats_get: out is NULL");
        return;
    }
    *out = (hh_handle_table_stats){0};
    if (t == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_handle_table_stats_get: table is NULL");
        return;
    }
    if (t->slots == NULL) return;                      /* a finished table: nothing in it */
    out->capacity = t->capacity - 1u;
    out->live = t->live_count;
    out->free_queued = t->free_count;
    out->retired = t->retired_count;
    out->never_used = t->capacity - t->hwm;
}

/* ---------------------------------------------------------------------------
   Test hook
--------------------------------------------------------------------------- */
void hhi_handles_set_next_gen(hh_handle_table *t, uint32_t idx, uint32_t gen) {
    if (idx == 0 || idx >= t->hwm) return;
    hh_handle_slot *s = &t->slots[idx];
    if (!(s->key & HH_HANDLE_KEY_FREE)) return;
    HH_SLOT_STORE(&s->key, HH_HANDLE_KEY_FREE | hh_handle_key_make(gen, t->tag));
}
