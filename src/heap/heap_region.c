/* heap_region.c -- the occupancy summary: live bytes and the last allocation
 * epoch per region of the managed range (invariant I11, heap_internal.h).
 *
 * The defrag service needs to know where free space is stranded -- sparse
 * ranges the allocator no longer uses -- without walking blocks. Regions make
 * that an array look-up: at most HHI_REGION_MAX of them, each a power of two of
 * at least 4 KiB, so the summary costs at most 8 KiB and a scan of it about a
 * microsecond. Keeping it exact costs one add per allocation, free and move
 * (used_add / used_sub); a block that straddles regions takes the loop below.
 */
#include "heap_internal.h"

#include "../common/hh_meta.h"

bool hhi_region_init(hh_heap *h) {
    unsigned shift = HHI_REGION_MIN_SHIFT;
    while ((h->limit >> shift) >= HHI_REGION_MAX) shift++;   /* the whole reservation of a growable heap */
    h->region_shift = shift;
    h->region_count = (uint32_t)((h->limit + ((size_t)1 << shift) - 1) >> shift);
    h->regions = hhi_meta_alloc((size_t)h->region_count * sizeof *h->regions);   /* zeroed */
    return h->regions != NULL;
}

void hhi_region_fini(hh_heap *h) {
    hhi_meta_free(h->regions);
    h->regions = NULL;
}

void hhi_region_span(hh_heap *h, size_t off, size_t size, bool add) {
    size_t end = off + size, rsize = (size_t)1 << h->region_shift;
    while (off < end) {
        size_t r = off >> h->region_shift, rend = (r + 1) * rsize, n = (rend < end ? rend : end) - off;
        if (add) h->regions[r].used += (uint32_t)n;
        else h->regions[r].used -= (uint32_t)n;
        off += n;
    }
}
