/* heap_check.c -- hh_heap_check, hh_heap_walk, hh_heap_stats_get.
 *
 * None of them changes the heap: the walk and the stats show the blocks of
 * the free-block cache as free blocks of their own, as they are (I13).
 *
 * The checker walks every block once and verifies invariants I1..I12 of
 * heap_internal.h, naming the first one broken. It is public API (tools and
 * tests call it) and backs hh_assert_expensive through hhi_heap_is_valid.
 */
#include "heap_internal.h"

#include "../common/hh_error.h"
#include "../common/hh_frag.h"
#include "../common/hh_track.h"

/* ---------------------------------------------------------------------------
   Checker
--------------------------------------------------------------------------- */
#define FAIL(...) return (report ? hhi_error(HH_E_CORRUPT, __VA_ARGS__) : HH_E_CORRUPT)

/* Every free list well linked, in its own class, bitmaps exact (I4). Counts blocks. */
static hh_status check_lists(const hh_heap *h, bool report, uint32_t *listed) {
    *listed = 0;
    for (unsigned f = 0; f < HHI_FL_COUNT; f++) {
        bool row = false;
        for (unsigned s = 0; s < HHI_SL_COUNT; s++) {
            uint32_t g = h->fl.head[f][s], prev = HHI_NONE;
            bool marked = (h->fl.sl_bitmap[f] >> s) & 1;
            if ((g != HHI_NONE) != marked) FAIL("I4: list (%u,%u) and its bitmap bit disagree", f, s);
            row |= marked;
            while (g != HHI_NONE) {
                size_t off = granule_off(g);
                if (off >= h->managed) FAIL("I4: list (%u,%u) links outside the heap (offset %zu)", f, s, off);
                const hhi_block *b = blk_at(h, off);
                if (!blk_is_free(b)) FAIL("I4: live block at offset %zu is in free list (%u,%u)", off, f, s);
                unsigned bf, bsl;
                hhi_freelist_mapping(blk_size(b), &bf, &bsl);
                if (bf != f || bsl != s) FAIL("I4: free block at offset %zu (size %zu) is in the wrong list", off, blk_size(b));
                if (b->u.free.prev != prev) FAIL("I4: broken back link at offset %zu", off);
                if (++*listed > h->free_blocks + 1u) FAIL("I4: free list (%u,%u) has a cycle", f, s);
                prev = g;
                g = b->u.free.next;
            }
        }
        if (row != (bool)((h->fl.fl_bitmap >> f) & 1)) FAIL("I4: first-level bitmap bit %u is wrong", f);
    }
    return HH_OK;
}

typedef struct walk_count {
    size_t used, free_bytes, pinned_bytes;
    uint32_t live, free_blocks, pinned;
    uint64_t sumsq;
    size_t   quar;                                     /* quarantine blocks (I12) */
    size_t   cached_bytes;                             /* cached blocks (I13) */
    uint32_t cached;
} walk_count;

/* One block's own invariants (I1, I3, I5, I6, I9). */
static hh_status check_block(const hh_heap *h, const hhi_block *b, bool prev_free, bool report, walk_count *c) {
    size_t off = blk_offset(h, b), size = blk_size(b);
    if (size < HHI_MIN_BLOCK || size % HHI_GRANULE || size > h->managed - off)
        FAIL("I1: block at offset %zu has bad size %zu", off, size);
    if (blk_prev_free(b) != prev_free) FAIL("I3: PREV_FREE flag wrong on block at offset %zu", off);
    if (!hhi_bitmap_test(&h->starts, off / HHI_GRANULE)) FAIL("I5: start bit missing at offset %zu", off);
    if (hhi_bitmap_next(&h->starts, off / HHI_GRANULE + 1) < (off + size) / HHI_GRANULE)
        FAIL("I5: stray start bit inside block at offset %zu", off);
    if (blk_is_free(b)) {
        if (b->word & (BLK_FLAGS & ~BLK_FREE) || b->word & (BLK_ALIGN_MASK | BLK_SLACK_MASK))
            FAIL("I1: free block at offset %zu has flag, alignment or slack bits (header %#llx)", off,
                 (unsigned long long)b->word);
        if (prev_free) FAIL("I2: adjacent free blocks at offset %zu", off);
        const uint64_t *foot = (const uint64_t *)(const void *)((const char *)b + size - 8);
        if (*foot != size) FAIL("I3: footer of free block at offset %zu says %llu", off, (unsigned long long)*foot);
        c->free_bytes += size;
        c->free_blocks++;
        uint64_t u = size >> h->sq_shift;
        c->sumsq += u * u;
        return HH_OK;
    }
    if (blk_cached(b)) {                             /* I13: a freed block waiting in the cache */
        if ((b->word & ~(BLK_SIZE_MASK | BLK_PREV_FREE)) != BLK_CACHED || size > HHI_CACHE_MAX_BLOCK)
            FAIL("I13: cached block at offset %zu has pins, slack, alignment or a size (%zu) the cache does not take", off, size);
        c->used += size;
        c->cached++;
        c->cached_bytes += size;
        return HH_OK;
    }
    if (blk_quarantined(b)) {                        /* I12: a moved block's old place, bytes dead */
        /* slack allowed: a hole below it may be absorbed (hhi_heap_absorb_hole, lead_absorb) */
        if ((b->word & ~(BLK_SIZE_MASK | BLK_PREV_FREE | BLK_SLACK_MASK)) != (BLK_QUARANTINE | BLK_PINNED))
            FAIL("I12: quarantine block at offset %zu has a slot, alignment or flags other than pinned (header %#llx)",
                 off, (unsigned long long)b->word);
        c->used += size;
        c->quar++;
        return HH_OK;
    }
    uint32_t slot = blk_slot(b);
    if (slot == 0 || slot >= h->handles.hwm) FAIL("I6: block at offset %zu has slot %u out of range", off, slot);
    if ((uint8_t)*slot_word(&h->handles, slot) != h->handles.tag)
        FAIL("I6: block at offset %zu has a dead slot %u", off, slot);
    if (hhi_slot_ptr(&h->handles, slot) != blk_payload(b)) FAIL("I6: slot %u does not point at its block (offset %zu)", slot, off);
    if (!off_aligned(off, blk_align(b))) FAIL("I6: block at offset %zu breaks its alignment %zu", off, blk_align(b));
    if ((size_t)blk_slack(b) * HHI_GRANULE + blk_min_size(h, 1) > size)
        FAIL("I6: block at offset %zu has slack larger than its size allows", off);
    if (blk_align(b) > HHI_BASE_ALIGN) FAIL("I6: block at offset %zu has alignment code %zu", off, blk_align(b));
    unsigned pins = h->pins ? h->pins[slot] : 0;
    if (blk_pinned(b) != (pins != 0))
        FAIL("I6: block at offset %zu (slot %u) is %s but has %u pins", off, slot, blk_pinned(b) ? "flagged pinned" : "not flagged pinned",
             pins);
    if (h->debug) {
        const unsigned char *g = (const unsigned char *)blk_payload(b) + blk_usable(h, b);
        bool ok = true;
        hh_track_defined(g, HHI_GUARD);            /* guards are no-access to everyone else */
        for (unsigned i = 0; i < HHI_GUARD; i++) ok &= g[i] == HH_FILL_GUARD;
        hh_track_noaccess(g, HHI_GUARD);
        if (!ok) FAIL("I9: guard bytes of block at offset %zu (slot %u) overwritten", off, slot);
    }
    c->used += size;
    c->live++;
    if (blk_pinned(b)) {
        c->pinned++;
        c->pinned_bytes += size;
    }
    return HH_OK;
}

/* Every cache list holds cached blocks of its size only, without cycles, and
   the lists together hold exactly the cached blocks a walk finds (I13). */
static hh_status check_cache(const hh_heap *h, bool report, const walk_count *c) {
    uint32_t listed = 0;
    size_t bytes = 0;
    for (unsigned k = 0; k < HHI_CACHE_CLASSES; k++) {
        uint32_t in_list = 0;
        for (uint32_t g = h->cache[k]; g != HHI_NONE; in_list++) {
            size_t off = granule_off(g);
            if (off >= h->managed || !hhi_bitmap_test(&h->starts, g)) FAIL("I13: cache list %u links to offset %zu, no block starts there", k, off);
            const hhi_block *b = blk_at(h, off);
            if (!blk_cached(b) || blk_size(b) != (size_t)k * HHI_GRANULE)
                FAIL("I13: block at offset %zu (size %zu) is in cache list %u but is not a cached block of that size", off, blk_size(b), k);
            if (++listed > c->cached) FAIL("I13: the cache lists hold more blocks than the heap has cached blocks (or a cycle)");
            if (off < h->low_mark) FAIL("I13: cached block at offset %zu lies below low_mark %zu", off, h->low_mark);
            if (off < h->cache_low) FAIL("I13: cached block at offset %zu lies below cache_low %zu", off, h->cache_low);
            bytes += blk_size(b);
            g = b->u.free.next;
        }
        if (in_list != h->cache_count[k]) FAIL("I13: cache list %u holds %u blocks, its count says %u", k, in_list, h->cache_count[k]);
    }
    if (h->cache_room > h->cache_limit) FAIL("I13: cache room %zu exceeds the cache limit %zu", h->cache_room, h->cache_limit);
    if (listed != c->cached || bytes != c->cached_bytes || bytes != heap_cached_bytes(h))
        FAIL("I13: %u cached blocks (%zu bytes) in the heap, %u (%zu bytes) in the lists, the cache room says %zu bytes",
             c->cached, c->cached_bytes, listed, bytes, heap_cached_bytes(h));
    return HH_OK;
}

/* The occupancy summary equals the live bytes a walk finds in each region (I11). */
static hh_status check_regions(const hh_heap *h, bool report) {
    size_t rsize = (size_t)1 << h->region_shift, r = 0, sum = 0, total = 0;
    for (size_t off = 0; off < h->managed;) {
        const hhi_block *b = blk_at(h, off);
        size_t end = off + blk_size(b);
        for (; !blk_is_free(b) && off < end;) {        /* split the live block at region ends */
            size_t rend = (off / rsize + 1) * rsize, n = (rend < end ? rend : end) - off;
            while (r < off / rsize) {
                if (h->regions[r].used != sum) FAIL("I11: region %zu says %u live bytes, the blocks hold %zu", r, h->regions[r].used, sum);
                total += sum;
                sum = 0;
                r++;
            }
            sum += n;
            off += n;
        }
        off = end;
    }
    for (; r < h->region_count; r++, sum = 0) {
        if (h->regions[r].used != sum) FAIL("I11: region %zu says %u live bytes, the blocks hold %zu", r, h->regions[r].used, sum);
        total += sum;
    }
    if (total != h->used_bytes) FAIL("I11: regions hold %zu live bytes, used_bytes is %zu", total, h->used_bytes);
    return HH_OK;
}

static hh_status check_impl(const hh_heap *h, bool report) {
    walk_count c = {0};
    size_t off = 0;
    bool prev_free = false;
    while (off < h->managed) {
        const hhi_block *b = blk_at(h, off);
        hh_status s = check_block(h, b, prev_free, report, &c);
        if (s != HH_OK) return s;
        prev_free = blk_is_free(b);
        off += blk_size(b);
    }
    if (off != h->managed) FAIL("I1: blocks end at %zu, not at %zu", off, h->managed);
    if (!hhi_bitmap_consistent(&h->starts) || !hhi_bitmap_consistent(&h->frees))
        FAIL("I5: an upper level of the address bitmaps disagrees with the level below");
    for (size_t sp = 0; sp < h->frees.nbits; sp++) {  /* the free-start index counts each span's free starts */
        unsigned n = 0;
        for (uint64_t w = h->starts.level[0][sp]; w; w &= w - 1) {
            size_t o = granule_off((uint32_t)(sp * HHI_FSPAN + hh_ctz64(w)));
            n += o < h->managed && blk_is_free(blk_at(h, o));
        }
        if (h->free_span[sp] != n || hhi_bitmap_test(&h->frees, sp) != (n != 0))
            FAIL("I5: span %zu (offset %zu) has %u free-block starts, its index says %u (bit %d)", sp,
                 sp * HHI_FSPAN * HHI_GRANULE, n, (unsigned)h->free_span[sp], (int)hhi_bitmap_test(&h->frees, sp));
    }
    uint32_t listed;
    hh_status s = check_lists(h, report, &listed);
    if (s != HH_OK) return s;
    if (listed != c.free_blocks) FAIL("I4: %u blocks in free lists, %u free blocks in the heap", listed, c.free_blocks);
    if (h->handles.live_count != c.live) FAIL("I7: %u live handles, %u live blocks", h->handles.live_count, c.live);
    if ((const char *)h->handles.head.slots != (const char *)h - HH_HEAP_SLOT_TABLE_BYTES)   /* where the inline looks */
        FAIL("I7: the slot table is at %p, not %zu bytes below the heap object", (void *)h->handles.head.slots,
             (size_t)HH_HEAP_SLOT_TABLE_BYTES);
    if (c.used != h->used_bytes || c.free_bytes != h->free_bytes || c.live != h->live_blocks ||
        c.free_blocks != h->free_blocks || c.pinned != h->pinned_blocks || c.pinned_bytes != h->pinned_bytes ||
        c.sumsq != h->free_sumsq)
        FAIL("I8: counters drifted (used %zu/%zu free %zu/%zu live %u/%u holes %u/%u pinned %u/%u)", h->used_bytes, c.used,
             h->free_bytes, c.free_bytes, h->live_blocks, c.live, h->free_blocks, c.free_blocks, h->pinned_blocks, c.pinned);
    if (h->pins)                                     /* I6: no pins on a slot without a live block */
        for (uint32_t i = 1; i < h->handles.hwm; i++)
            if (h->pins[i] && (uint8_t)*slot_word(&h->handles, i) != h->handles.tag)
                FAIL("I6: dead slot %u has %u pins", i, (unsigned)h->pins[i]);
    if (c.quar != h->quar_count) FAIL("I12: %zu quarantine blocks in the heap, %zu listed", c.quar, h->quar_count);
    for (size_t i = 0; i < h->quar_count; i++)
        if (h->quar[i] >= h->managed || !hhi_bitmap_test(&h->starts, h->quar[i] / HHI_GRANULE) ||
            !blk_quarantined(blk_at(h, h->quar[i])))
            FAIL("I12: listed quarantine offset %zu is not a quarantine block", h->quar[i]);
    s = check_cache(h, report, &c);
    if (s != HH_OK) return s;
    s = check_regions(h, report);
    if (s != HH_OK) return s;
    for (size_t i = 0; i < h->journal.count; i++) {
        const hh_move_record *r = &h->journal.rec[i];
        if (r->src_offset >= h->managed || r->dst_offset >= h->managed || r->size > h->managed)
            FAIL("I10: journal record %zu lies outside the heap", i);
    }
    return HH_OK;
}

bool hhi_heap_is_valid(const hh_heap *h) { return check_impl(h, false) == HH_OK; }

hh_status hh_heap_check(const hh_heap *heap) {
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_heap_check: heap is NULL");
    heap_lock(heap);
    hh_status s = check_impl(heap, true);
    heap_unlock(heap);
    return s;
}

/* ---------------------------------------------------------------------------
   Walk
--------------------------------------------------------------------------- */
void hh_heap_walk(const hh_heap *heap, hh_walk_fn fn, void *user) {
    if (heap == NULL || fn == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_walk: NULL %s", heap == NULL ? "heap" : "callback");
        return;
    }
    heap_lock(heap);
    for (size_t off = 0; off < heap->managed;) {
        const hhi_block *b = blk_at(heap, off);
        hh_block_info info = { .offset = off, .size = blk_size(b), .handle = HH_NULL, .tag = 0, .state = HH_BLOCK_FREE };
        if (blk_cached(b)) {
            /* a hole waiting in the free-block cache: free space, shown as
               it is (merging it would change the heap: I13) */
        } else if (blk_quarantined(b)) {
            info.state = HH_BLOCK_PINNED;                 /* debug moves: held, owned by nobody (handle null) */
        } else if (!blk_is_free(b)) {
            info.handle = hhi_slot_handle(&heap->handles, blk_slot(b));
            info.tag = blk_tag(heap, b);
            info.state = blk_pinned(b) ? HH_BLOCK_PINNED : HH_BLOCK_LIVE;
        }
        fn(&info, user);
        if (info.size == 0) break;   /* corrupt header: never loop forever */
        off += info.size;
    }
    heap_unlock(heap);
}

/* ---------------------------------------------------------------------------
   Statistics
--------------------------------------------------------------------------- */
void hh_heap_stats_get(const hh_heap *heap, hh_heap_stats *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_stats_get: out is NULL");
        return;
    }
    *out = (hh_heap_stats){0};
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_stats_get: heap is NULL");
        return;
    }
    heap_lock(heap);
    /* cached blocks are free bytes and holes of their own (I13), unmerged:
       looking changes nothing */
    size_t cached = heap_cached_bytes(heap), largest = hhi_freelist_largest(heap), lc = heap_cached_largest(heap);
    out->capacity = heap->managed;
    out->used_bytes = heap->used_bytes - cached;
    out->free_bytes = heap->free_bytes + cached;
    out->largest_free = largest > lc ? largest : lc;
    out->live_blocks = heap->live_blocks;
    out->free_blocks = heap->free_blocks + heap_cached_blocks(heap);
    out->pinned_blocks = heap->pinned_blocks;
    out->fragmentation = hhi_fragmentation(out->largest_free, out->free_bytes);
    out->total_moves = heap->total_moves;
    out->total_bytes_moved = heap->total_bytes_moved;
    heap_unlock(heap);
}
