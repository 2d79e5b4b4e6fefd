/* hh_frag.h -- the fragmentation figures and the compaction debt, defined once.
 *
 * hh_heap_stats, hh_defrag_metrics, hh_vheap_stats and the map dump's metrics
 * all report them. Each module gathers the inputs its own way (the heap from
 * its counters, the dump from a walk) and hands them to these, so the four
 * reports agree on one heap.
 */
#ifndef HH_FRAG_H
#define HH_FRAG_H

#include <stdbool.h>
#include <stdint.h>

/* 1 - largest_free / free_bytes: 0 when every free byte is in one block (or
   there is none), near 1 when the largest free block is a small share. */
static inline double hhi_fragmentation(uint64_t largest_free, uint64_t free_bytes) {
    return free_bytes ? 1.0 - (double)largest_free / (double)free_bytes : 0.0;
}

/* 1 - sum(f^2) / (sum f)^2 over the free blocks f: 0 for one free block, near
   1 for many equal small ones. Clamped at 0 (rounding of a sum kept scaled). */
static inline double hhi_fragmentation_sq(double sum_sq, uint64_t free_bytes) {
    if (free_bytes == 0) return 0.0;
    double f = 1.0 - sum_sq / ((double)free_bytes * (double)free_bytes);
    return f < 0.0 ? 0.0 : f;
}

/* Compaction debt: the bytes of the live blocks above the lowest hole (a free
   block other than the top region), pinned ones included -- a pinned block
   above a hole is debt the service pays once it is unpinned. Everything below
   the lowest hole is live, so the debt is the live bytes less that hole's
   offset. 0 when there is no hole. */
static inline uint64_t hhi_compaction_debt(uint64_t used_bytes, uint64_t lowest_hole_offset, bool have_hole) {
    return have_hole ? used_bytes - lowest_hole_offset : 0;
}

#endif /* HH_FRAG_H */
