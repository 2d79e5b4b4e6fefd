/* heap_freelist.c -- TLSF two-level segregated free lists (see heap_internal.h).
 *
 * Mapping: sizes below 256 bytes use 16 linear classes of 16 bytes (row 0);
 * above, row f covers [2^(f+7), 2^(f+8)) split into 16 equal steps. Insertion
 * maps a size to the list that contains it; search rounds the request up to the
 * next step first, so every block in the found list is large enough: no list is
 * ever walked (good fit, O(1)).
 *
 * Allocation looks at one more list first (fl_exact_then_find): the head of
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
 * the free-start index and the sum of squares used by the fragmentation metric.
 *
 * The bodies are static inline in heap_internal.h (fl_*): heap.c's alloc/free
 * paths use them directly, and when a split or a merge leaves a free block in
 * the same list, the new block takes the old one's list place (fl_relink) and
 * its free-start count moves -- no unlink, no link. The new block lies inside
 * the range the old one and its merged neighbour covered, so it keeps the
 * old block's address order relative to the rest of the list.
 */
#include "heap_internal.h"

void hhi_freelist_mapping(size_t size, unsigned *fl, unsigned *sl) { fl_mapping(size, fl, sl); }

void hhi_freelist_init(hh_heap *h) {
    h->fl.fl_bitmap = 0;
    for (unsigned f = 0; f < HHI_FL_COUNT; f++) {
        h->fl.sl_bitmap[f] = 0;
        for (unsigned s = 0; s < HHI_SL_COUNT; s++) h->fl.head[f][s] = HHI_NONE;
    }
}

hhi_block *hhi_freelist_find(const hh_heap *h, size_t size) { return fl_find(h, size); }

#if HH_TESTING
_Thread_local uint64_t hhi_test_largest_looks_here;
#endif

size_t hhi_freelist_largest(const hh_heap *h) {
    if (h->fl.fl_bitmap == 0) return 0;
    unsigned f = hh_fls64(h->fl.fl_bitmap);
    unsigned s = hh_fls64(h->fl.sl_bitmap[f]);
    size_t best = 0;
    uint32_t g = h->fl.head[f][s];
    for (unsigned k = 0; g != HHI_NONE && k < HHI_LARGEST_WALK; k++) {   /* one size step: usually one block */
        const hhi_block *b = blk_at(h, granule_off(g));
        HHI_TEST_COUNT_HERE(hhi_test_largest_looks_here);
        if (blk_size_free(b) > best) best = blk_size_free(b);
        g = b->u.free.next;
    }
    if (g != HHI_NONE) {                              /* a long list: the top region may be its largest */
        const hhi_block *t = hhi_heap_top_free(h);
        if (t && blk_size_free(t) > best) best = blk_size_free(t);
    }
    return best;
}
