/* heap_freelist.c -- TLSF two-level segregated free lists (see heap_internal.h).
 *
 * Mapping: sizes below 256 bytes use 16 linear classes of 16 bytes (row 0);
 * above, row f covers [2^(f+7), 2^(f+8)) split into 16 equal steps. Insertion
 * maps a size to the list that contains it; search rounds the request up to the
 * next step first, so every block in the found list is large enough: no list is
 * ever walked (good fit, O(1)).
 *
 * Allocation looks at one more list first (hhi_freelist_exact): the head of
 * the list that holds the request's own size, taken if it is large enough.
 * Good fit alone never reuses a hole of exactly an object's size for the next
 * object of that size (its list may hold smaller blocks, so the search skips
 * it) and splits it for smaller ones instead: under churn that doubled as
 * fragmentation. Still one look, O(1).
 *
 * Low addresses first: a block lower than the current head goes to the front,
 * others right behind the head. The head of each list therefore tends to be
 * its lowest block, which keeps allocations packed at the bottom of the heap
 * (and the top free region, in the largest class, is used last).
 *
 * The same functions keep the free counters exact: free bytes, free blocks,
 * the free-start bitmap and the sum of squares used by the fragmentation metric.
 */
#include "heap_internal.h"

void hhi_freelist_mapping(size_t size, unsigned *fl, unsigned *sl) {
    if (size < HHI_SMALL_BLOCK) {
        *fl = 0;
        *sl = (unsigned)(size / HHI_GRANULE);
    } else {
        unsigned f = hh_fls64(size);
        *sl = (unsigned)(size >> (f - HHI_SL_LOG2)) ^ HHI_SL_COUNT;
        *fl = f - (HHI_FL_SHIFT - 1);
    }
}

/* List for a search: round up so any block of that list is >= size. */
static void mapping_search(size_t size, unsigned *fl, unsigned *sl) {
    if (size >= HHI_SMALL_BLOCK) size += ((size_t)1 << (hh_fls64(size) - HHI_SL_LOG2)) - 1;
    hhi_freelist_mapping(size, fl, sl);
}

static inline uint64_t size_sq(const hh_heap *h, size_t size) {
    uint64_t u = size >> h->sq_shift;
    return u * u;
}

void hhi_freelist_init(hh_heap *h) {
    h->fl.fl_bitmap = 0;
    for (unsigned f = 0; f < HHI_FL_COUNT; f++) {
        h->fl.sl_bitmap[f] = 0;
        for (unsigned s = 0; s < HHI_SL_COUNT; s++) h->fl.head[f][s] = HHI_NONE;
    }
}

void hhi_freelist_insert(hh_heap *h, hhi_block *b) {
    size_t size = blk_size(b);
    unsigned f, s;
    hhi_freelist_mapping(size, &f, &s);
    hh_assert_internal(f < HHI_FL_COUNT && blk_is_free(b));
    uint32_t g = off_granule(blk_offset(h, b));
    uint32_t head = h->fl.head[f][s];
    if (head == HHI_NONE || g < head) {          /* new head */
        b->u.free.prev = HHI_NONE;
        b->u.free.next = head;
        if (head != HHI_NONE) blk_at(h, granule_off(head))->u.free.prev = g;
        h->fl.head[f][s] = g;
    } else {                                     /* right behind the head */
        hhi_block *hb = blk_at(h, granule_off(head));
        b->u.free.prev = head;
        b->u.free.next = hb->u.free.next;
        if (hb->u.free.next != HHI_NONE) blk_at(h, granule_off(hb->u.free.next))->u.free.prev = g;
        hb->u.free.next = g;
    }
    h->fl.fl_bitmap |= 1u << f;
    h->fl.sl_bitmap[f] |= 1u << s;
    hhi_bitmap_set(&h->frees, g);
    h->free_bytes += size;
    h->free_blocks++;
    h->free_sumsq += size_sq(h, size);
}

void hhi_freelist_remove(hh_heap *h, hhi_block *b) {
    size_t size = blk_size(b);
    unsigned f, s;
    hhi_freelist_mapping(size, &f, &s);
    uint32_t next = b->u.free.next, prev = b->u.free.prev;
    if (next != HHI_NONE) blk_at(h, granule_off(next))->u.free.prev = prev;
    if (prev != HHI_NONE) blk_at(h, granule_off(prev))->u.free.next = next;
    else {
        hh_assert_internal(h->fl.head[f][s] == off_granule(blk_offset(h, b)));
        h->fl.head[f][s] = next;
        if (next == HHI_NONE) {
            h->fl.sl_bitmap[f] &= ~(1u << s);
            if (h->fl.sl_bitmap[f] == 0) h->fl.fl_bitmap &= ~(1u << f);
        }
    }
    hhi_bitmap_clear(&h->frees, off_granule(blk_offset(h, b)));
    h->free_bytes -= size;
    h->free_blocks--;
    h->free_sumsq -= size_sq(h, size);
}

hhi_block *hhi_freelist_find(const hh_heap *h, size_t size) {
    unsigned f, s;
    mapping_search(size, &f, &s);
    if (f >= HHI_FL_COUNT) return NULL;
    uint32_t sl_map = h->fl.sl_bitmap[f] & (~0u << s);
    if (sl_map == 0) {
        uint32_t fl_map = f + 1 < 32 ? h->fl.fl_bitmap & (~0u << (f + 1)) : 0;
        if (fl_map == 0) return NULL;
        f = hh_ctz64(fl_map);
        sl_map = h->fl.sl_bitmap[f];
    }
    s = hh_ctz64(sl_map);
    return blk_at(h, granule_off(h->fl.head[f][s]));
}

size_t hhi_freelist_largest(const hh_heap *h) {
    if (h->fl.fl_bitmap == 0) return 0;
    unsigned f = hh_fls64(h->fl.fl_bitmap);
    unsigned s = hh_fls64(h->fl.sl_bitmap[f]);
    size_t best = 0;
    for (uint32_t g = h->fl.head[f][s]; g != HHI_NONE;) {   /* one size step: usually one block */
        const hhi_block *b = blk_at(h, granule_off(g));
        if (blk_size(b) > best) best = blk_size(b);
        g = b->u.free.next;
    }
    return best;
}

hhi_block *hhi_freelist_exact(const hh_heap *h, size_t size) {
    if (size < HHI_SMALL_BLOCK) return NULL;          /* linear classes: the search is exact already */
    unsigned f, s;
    hhi_freelist_mapping(size, &f, &s);
    if (f >= HHI_FL_COUNT) return NULL;
    uint32_t g = h->fl.head[f][s];
    if (g == HHI_NONE) return NULL;
    hhi_block *b = blk_at(h, granule_off(g));
    return blk_size(b) >= size ? b : NULL;
}
