/* heap.c -- the relocatable heap: life cycle, allocation, free, resize, pin,
 * and the move mechanism the defrag service drives (model and invariants in
 * heap_internal.h).
 *
 * Every public function validates its arguments, takes the heap lock when the
 * heap is HH_HEAP_THREADSAFE, and reports failures through hhi_error() without
 * touching any block. Moving a block is one function pair (slide_down /
 * move_into) that ends in move_record(): slot update, counters, debug poison
 * and the memcheck mempool notification, then the one stream of move events
 * (move_emit) that the journal, the event hook and on_move consume.
 */
#include "heap_internal.h"

#include <stddef.h>

#include "../common/hh_error.h"
#include "../common/hh_meta.h"
#include "../common/hh_track.h"

_Static_assert(offsetof(struct hh_heap, handles) == 0 && offsetof(hhi_slots, head) == 0,
               "hh_deref_inline reads the hh_heap_head at the heap's address");
_Static_assert((size_t)HH_HEAP_SLOT_TABLE_BYTES == (size_t)HHI_SLOT_SPAN * sizeof(uint64_t),
               "hh_deref_inline finds the slot table HH_HEAP_SLOT_TABLE_BYTES below the heap object");

#define hhi_def(v, d) ((v) == 0 ? (d) : (v))

enum {
    HEAP_KNOWN_FLAGS = HH_HEAP_THREADSAFE | HH_HEAP_DEBUG | HH_HEAP_STRESS_MOVES | HH_HEAP_NO_AUTO_COMPACT |
                       HH_HEAP_DEBUG_MOVES | HH_HEAP_GROWABLE | HH_HEAP_HUGE_PAGES
};
enum { HEAP_HUGE_BYTES = 2u << 20 };                   /* the usual transparent huge page */

/* ---------------------------------------------------------------------------
   Forward declarations
--------------------------------------------------------------------------- */
static hhi_block *free_block_make(hh_heap *h, size_t off, size_t size);
static hhi_block *region_release(hh_heap *h, size_t off, size_t size, bool prev_is_free);
static void       lead_absorb(hh_heap *h, size_t foff, size_t lead);

/* ---------------------------------------------------------------------------
   Small helpers
--------------------------------------------------------------------------- */
static inline void hdr_write(hhi_block *b, uint64_t word) {
    hh_track_defined(b, HHI_HDR);
    b->word = word;
}
/* A free block's header, and its links after it (defined to the tools: they
   lie where a payload was). */
static inline void hdr_write_free(hhi_block *b, size_t size) {
    hh_track_defined(b, HHI_FREE_HEAD);
    b->word = free_word(size);
}

/* A live block's header word without its slot (slot 0, not pinned). */
static inline uint64_t live_word(size_t size, size_t align, unsigned slack, bool prev_free) {
    hh_assert_internal(size <= HHI_MAX_LIVE_BLOCK && slack <= HHI_MAX_SLACK);
    return size_field(size) | ((uint64_t)align_code(align) << BLK_ALIGN_SHIFT) | ((uint64_t)slack << BLK_SLACK_SHIFT) |
           (prev_free ? BLK_PREV_FREE : 0);
}
static inline uint64_t slot_field(uint32_t slot) { return (uint64_t)slot << BLK_SLOT_SHIFT; }

static inline hh_handle slot_handle(const hh_heap *h, uint32_t slot) { return hhi_slot_handle(&h->handles, slot); }

/* The live block behind h, or NULL (nothing reported). */
static hhi_block *block_of(const hh_heap *heap, hh_handle hd) {
    void *p = hhi_slot_lookup(&heap->handles, hd);
    return p ? blk_from_payload(p) : NULL;
}

/* Guard bytes stay no-access for memcheck (so it reports an overrun at the
   faulting instruction); the library opens them only to write or check them. */
static void guard_fill(const hh_heap *h, hhi_block *b) {
    if (!h->debug) return;
    char *g = (char *)blk_payload(b) + blk_usable(h, b);
    hh_track_undefined(g, HHI_GUARD);
    memset(g, HH_FILL_GUARD, HHI_GUARD);
    hh_track_noaccess(g, HHI_GUARD);
}

static bool guard_intact(const hh_heap *h, const hhi_block *b) {
    if (!h->debug) return true;
    const unsigned char *g = (const unsigned char *)blk_payload(b) + blk_usable(h, b);
    hh_track_defined(g, HHI_GUARD);
    bool ok = true;
    for (unsigned i = 0; i < HHI_GUARD; i++) ok &= g[i] == HH_FILL_GUARD;
    hh_track_noaccess(g, HHI_GUARD);
    return ok;
}

/* The free-block cache's byte limit for the current managed size: small
   enough that the uncoalesced holes cannot starve a large request for long
   (a failing one flushes first anyway), large enough to hold a frame's churn. */
static void heap_cache_limit_set(hh_heap *h) {
    size_t l = h->managed >> HHI_CACHE_LIMIT_SHIFT, cached = heap_cached_bytes(h);
    h->cache_limit = l < HHI_CACHE_MIN_LIMIT ? HHI_CACHE_MIN_LIMIT : l;   /* only grows: managed only grows */
    h->cache_room = h->cache_limit - cached;
}

/* ---------------------------------------------------------------------------
   Free blocks
--------------------------------------------------------------------------- */
/* Makes [off, off+size) one free block (no coalescing: the caller guarantees
   both neighbours are live or absent), inserts it and flags the next block. */
static hhi_block *free_block_make(hh_heap *h, size_t off, size_t size) {
    hhi_block *b = blk_at(h, off);
    hdr_write_free(b, size);
    uint64_t *foot = (uint64_t *)(void *)(h->base + off + size - 8);
    hh_track_defined(foot, 8);
    *foot = size;
    hhi_bitmap_set(&h->starts, off_granule(off));
    fl_insert(h, b);
    hhi_block *n = blk_next(h, b);
    if (n) n->word |= BLK_PREV_FREE;
    return b;
}

/* [off, off+size) stops being a live block: coalesce with free neighbours and
   insert. The caller guarantees a block starts at off (start bit set) and
   passes whether the block before it is free. A free neighbour whose list
   does not change keeps its list place (the merged block takes it over): the
   common frees -- next to a large hole or the top region -- touch no list head. */
HH_INLINE hhi_block *region_release_inline(hh_heap *h, size_t off, size_t size, bool prev_is_free) {
    size_t end = off + size, nsize = 0;
    hhi_block *n = end < h->managed ? blk_at(h, end) : NULL;
    if (n && blk_is_free(n)) nsize = blk_size_free(n);
    else if (n) n->word |= BLK_PREV_FREE;
    size_t total = size + nsize;
    uint64_t *foot = (uint64_t *)(void *)(h->base + end + nsize - 8);
    if (prev_is_free) {                              /* p grows over [off, end + nsize) */
        hhi_block *p = blk_prev_free_block(blk_at(h, off));
        size_t poff = blk_offset(h, p), psize = blk_size_free(p), nps = psize + total;
        uint32_t pg = off_granule(poff);
        hhi_bitmap_clear_fast(&h->starts, off_granule(off));
        if (nsize && !fl_same_list(nps, psize) && fl_same_list(nps, nsize)) {
            /* A small hole, this block and a large free block (often the top
               region) merge: p leaves its list and takes n's place in n's. */
            unsigned f1, s1;
            uint32_t ng = off_granule(end);
            fl_mapping(psize, &f1, &s1);
            fl_unlink(h, p, pg, f1, s1);
            fl_relink(h, n, p, pg, nps);
            free_start_sub(h, ng);
            hhi_bitmap_clear_fast(&h->starts, ng);
            p->word = free_word(nps);
            hh_track_defined(foot, 8);
            *foot = nps;
            h->free_bytes += size;
            h->free_blocks--;
            h->free_sumsq = h->free_sumsq - fl_sq(h, psize) - fl_sq(h, nsize) + fl_sq(h, nps);
            return p;
        }
        if (nsize) {
            unsigned nf, ns;
            fl_mapping(nsize, &nf, &ns);
            uint32_t ng = off_granule(end);
            fl_unlink(h, n, ng, nf, ns);
            free_start_sub(h, ng);
            hhi_bitmap_clear_fast(&h->starts, ng);
            h->free_blocks--;
            h->free_sumsq -= fl_sq(h, nsize);
        }
        if (fl_same_list(nps, psize)) {
            p->word = free_word(nps);
        } else {
            unsigned f1, s1, f2, s2;
            fl_mapping(psize, &f1, &s1);
            fl_mapping(nps, &f2, &s2);
            fl_unlink(h, p, pg, f1, s1);
            p->word = free_word(nps);
            fl_link(h, p, pg, f2, s2);
        }
        hh_track_defined(foot, 8);
        *foot = nps;
        h->free_bytes += size;
        h->free_sumsq = h->free_sumsq - fl_sq(h, psize) + fl_sq(h, nps);
        return p;
    }
    hhi_block *b = blk_at(h, off);
    uint32_t g = off_granule(off);
    hdr_write_free(b, total);                        /* the block before is live: no PREV_FREE */
    hh_track_defined(foot, 8);
    *foot = total;
    if (nsize) {                                     /* b takes n's place (or n's list changes) */
        uint32_t ng = off_granule(end);
        fl_replace(h, n, ng, nsize, b, g, total);
        free_start_move(h, ng, g);
        hhi_bitmap_clear_fast(&h->starts, ng);
        h->free_bytes += size;
        h->free_sumsq = h->free_sumsq - fl_sq(h, nsize) + fl_sq(h, total);
        return b;
    }
    unsigned f, s;
    fl_mapping(total, &f, &s);
    fl_link(h, b, g, f, s);
    free_start_add(h, g);
    h->free_bytes += size;
    h->free_blocks++;
    h->free_sumsq += fl_sq(h, total);
    return b;
}

static hhi_block *region_release(hh_heap *h, size_t off, size_t size, bool prev_is_free) {
    return region_release_inline(h, off, size, prev_is_free);
}

/* A lead gap of `lead` (< HHI_MIN_BLOCK) bytes at foff joins the block before it
   as slack (checked possible by hhi_heap_fits). */
static void lead_absorb(hh_heap *h, size_t foff, size_t lead) {
    hhi_block *p = hhi_heap_block_before(h, blk_at(h, foff));
    hh_assert(p != NULL && !blk_is_free(p) && !blk_cached(p));
    unsigned slack = blk_slack(p) + (unsigned)(lead / HHI_GRANULE);
    hh_assert(slack <= HHI_MAX_SLACK);
    p->word = (p->word & ~(BLK_SLACK_MASK | BLK_SIZE_MASK)) | size_field(blk_size_live(p) + lead) |
              ((uint64_t)slack << BLK_SLACK_SHIFT);
    used_add(h, foff, lead);
    if (blk_pinned(p) && !blk_quarantined(p)) h->pinned_bytes += lead;
    hhi_bitmap_clear(&h->starts, off_granule(foff));
}

/* Bytes below offset `upto` of the top free region are about to be written (a
   block carved from its start, or its new header): the non-resident range
   [dc_lo, managed) no longer reaches below the page boundary above `upto`, and
   whatever of [dc_lo, dc_hi) (pages given back) it passes is resident again. */
HH_NOINLINE static void top_dirty_slow(hh_heap *h, size_t upto) {
    uintptr_t page = hhi_os_page_size(), a = hh_align_up((uintptr_t)(h->base + upto), page);
    size_t lo = a - (uintptr_t)h->base;
    if (lo > h->managed) lo = h->managed;
    h->dc_lo = lo;
    if (h->dc_hi < lo) h->dc_hi = lo;
    h->decommitted = h->dc_hi - h->dc_lo;
}
static inline void top_dirty(hh_heap *h, size_t upto) {
    if (hh_unlikely(upto > h->dc_lo)) top_dirty_slow(h, upto);   /* once per page the top region's start passes */
}
/* ---------------------------------------------------------------------------
   Placement
--------------------------------------------------------------------------- */
/* The offset a block at alignment `align` takes in free block f: the first
   aligned one, unless the lead gap below it is a sliver (< HHI_MIN_BLOCK) that
   the block before f cannot take as slack -- then one alignment further, so the
   lead can stand as a free block. *lead gets dst - offset(f). */
static size_t place_dst(const hh_heap *h, const hhi_block *f, size_t align, size_t *lead) {
    size_t foff = blk_offset(h, f), dst = hh_align_up(foff, align);
    if (dst - foff > 0 && dst - foff < HHI_MIN_BLOCK) {
        const hhi_block *p = foff ? hhi_heap_block_before(h, f) : NULL;
        /* a cached block keeps its exact size (I13): it takes no slack */
        if (p == NULL || blk_cached(p) || blk_slack(p) + (dst - foff) / HHI_GRANULE > HHI_MAX_SLACK) dst += align;
    }
    *lead = dst - foff;
    return dst;
}

bool hhi_heap_fits(const hh_heap *h, const hhi_block *f, size_t bs, size_t align, size_t *dst_off) {
    size_t fsize = blk_size_free(f), lead, dst = place_dst(h, f, align, &lead);
    if (dst_off) *dst_off = dst;
    return lead <= fsize && bs <= fsize - lead;
}

hhi_block *hhi_heap_find_fit(const hh_heap *h, size_t size, size_t align) {
    hhi_block *f = fl_find(h, align <= HHI_GRANULE ? size : size + align);
    if (f && hhi_heap_fits(h, f, size, align, NULL)) return f;
    f = hhi_heap_top_free(h);                         /* the good-fit rounding skips the request's own list */
    return f && hhi_heap_fits(h, f, size, align, NULL) ? f : NULL;
}

/* Takes a block of bs bytes at alignment align out of free block f (which must
   fit it). The new block's header has size, alignment and slack set, no pins;
   slot and tag are the caller's. Split remainders >= HHI_MIN_BLOCK stay free
   unless they are at most `absorb` bytes (< 16 granules); smaller ones become
   slack (tail) or join the previous block (lead). */
static hhi_block *carve(hh_heap *h, hhi_block *f, size_t bs, size_t align, size_t absorb, uint32_t slot) {
    size_t foff = blk_offset(h, f), fsize = blk_size_free(f), dst = 0;
    bool ok = hhi_heap_fits(h, f, bs, align, &dst);
    hh_assert(ok);
    (void)ok;
    size_t lead = dst - foff, tail = fsize - lead - bs;
    unsigned slack = 0;
    if (tail < HHI_MIN_BLOCK || tail <= absorb) {
        bs += tail;
        slack = (unsigned)(tail / HHI_GRANULE);
        tail = 0;
    }
    if (foff + fsize == h->managed) top_dirty(h, tail ? dst + bs + HHI_FREE_HEAD : h->managed);
    fl_remove(h, f);
    if (lead > 0) hhi_bitmap_clear(&h->starts, off_granule(foff));

    hhi_block *b = blk_at(h, dst);
    hdr_write(b, live_word(bs, align, slack, lead >= HHI_MIN_BLOCK) | slot_field(slot));
    hhi_bitmap_set(&h->starts, off_granule(dst));
    if (lead >= HHI_MIN_BLOCK) free_block_make(h, foff, lead);
    else if (lead > 0) lead_absorb(h, foff, lead);
    if (tail) free_block_make(h, dst + bs, tail);
    else {
        hhi_block *n = blk_next(h, b);
        if (n) n->word &= ~BLK_PREV_FREE;
    }
    return b;
}

/* carve() for the common case: alignment 16 (no lead) and no absorb, so the
   block takes the start of f. When the tail stays free and in f's list (a
   large hole or the top region) it takes f's place in the list and f's
   free-start count moves to it (only when the tail starts in another span):
   no list search, one bitmap word in most cases. */
HH_INLINE hhi_block *carve16(hh_heap *h, hhi_block *f, size_t bs, uint32_t slot) {
    size_t foff = blk_offset(h, f), fsize = blk_size_free(f), tail = fsize - bs;
    hh_assert(blk_is_free(f) && fsize >= bs && !blk_prev_free(f));
    if (foff + fsize == h->managed)                  /* carving the top region: its pages become resident */
        top_dirty(h, tail >= HHI_MIN_BLOCK ? foff + bs + HHI_FREE_HEAD : h->managed);
    uint32_t g = off_granule(foff);
    if (hh_likely(tail >= HHI_MIN_BLOCK)) {
        size_t toff = foff + bs;
        uint32_t tg = off_granule(toff);
        hhi_block *t = blk_at(h, toff);
        hdr_write_free(t, tail);
        uint64_t *foot = (uint64_t *)(void *)(h->base + foff + fsize - 8);   /* f's footer is the tail's */
        *foot = tail;
        fl_replace(h, f, g, fsize, t, tg, tail);
        free_start_move(h, g, tg);
        hhi_bitmap_set_fast(&h->starts, tg);
        h->free_bytes -= bs;
        h->free_sumsq = h->free_sumsq - fl_sq(h, fsize) + fl_sq(h, tail);
        hdr_write(f, live_word(bs, HHI_GRANULE, 0, false) | slot_field(slot));   /* the block after the tail keeps PREV_FREE */
        return f;
    }
    fl_remove(h, f);                                 /* a sliver tail becomes slack */
    hdr_write(f, live_word(fsize, HHI_GRANULE, (unsigned)(tail / HHI_GRANULE), false) | slot_field(slot));
    hhi_block *n = blk_next(h, f);
    if (n) n->word &= ~BLK_PREV_FREE;
    return f;
}

/* ---------------------------------------------------------------------------
   Moving blocks (mechanism; policy lives in src/defrag)
--------------------------------------------------------------------------- */
/* Grows the journal to hold `more` further records in one allocation (bulk
   moves); on failure it stays as it is and journal_push grows it as it goes. */
static void journal_reserve(hh_heap *h, size_t more) {
    hhi_journal *j = &h->journal;
    if (j->cap - j->count >= more) return;
    size_t cap = j->count + more;
    hh_move_record *r = hhi_meta_alloc(cap * sizeof *r);
    if (r == NULL) return;
    if (j->count) memcpy(r, j->rec, j->count * sizeof *r);
    hhi_meta_free(j->rec);
    j->rec = r;
    j->cap = cap;
}

/* Slow path of journal_push: grows the journal, then stores. */
HH_NOINLINE static void journal_push_slow(hh_heap *h, const hh_move_record *rec) {
    hhi_journal *j = &h->journal;
    size_t cap = j->cap ? j->cap * 2 : 64;
    hh_move_record *r = hhi_meta_alloc(cap * sizeof *r);
    if (r == NULL) {                /* the move itself stands; only its record is lost */
        j->overflow = true;
        return;
    }
    if (j->count) memcpy(r, j->rec, j->count * sizeof *r);
    hhi_meta_free(j->rec);
    j->rec = r;
    j->cap = cap;
    j->rec[j->count++] = *rec;
}

static inline void journal_push(hh_heap *h, const hh_move_record *rec) {
    hhi_journal *j = &h->journal;
    if (hh_likely(j->count < j->cap)) j->rec[j->count++] = *rec;
    else journal_push_slow(h, rec);
}

/* HH_EV_MOVE for the event hook, apart: only tracers and tools install one. */
HH_NOINLINE HH_COLD static void move_event(hh_heap *h, const hh_move_record *r) {
    h->event_fn(&(hh_heap_event){ .kind = HH_EV_MOVE, .handle = r->handle, .size = r->size,
                                  .src_offset = r->src_offset, .dst_offset = r->dst_offset },
                h->event_user);
}

/* The one stream of move events. Every relocation -- a step's, hh_defrag_full's,
   allocation-time compaction's, a resize's -- ends here once the block's slot
   points at its new place, and its consumers read the same record in this
   order: the journal (hh_defrag_journal: the moves since the step began), the
   event hook (HH_EV_MOVE, for tracers and tools) and desc.on_move. `op`/`np`
   are the old and new payloads, `moved` the payload bytes copied. */
static inline void move_emit(hh_heap *h, const hh_move_record *r, void *op, void *np, size_t moved) {
    journal_push(h, r);
    if (hh_unlikely(h->event_fn != NULL)) move_event(h, r);
    if (h->desc.on_move) h->desc.on_move(r->handle, op, np, moved, h->desc.user);
}

/* The bookkeeping of a relocation of the block in `slot` from old payload `op`
   (block offset src) to `nb` (already written, `moved` payload bytes copied;
   `usable` is nb's payload size, equal to `moved` except for a resize): the
   slot, the tools, the counters. Its record, for move_emit. */
static inline hh_move_record move_note(hh_heap *h, hhi_block *nb, uint32_t slot, void *op, size_t src, size_t usable,
                                       size_t moved) {
    void *np = blk_payload(nb);
    hhi_slot_repoint(&h->handles, slot, np);
    hh_track_move(h, op, np, usable);
    h->total_moves++;
    h->total_bytes_moved += moved;
    return (hh_move_record){ slot_handle(h, slot), src, blk_offset(h, nb), blk_size_live(nb) };
}

/* move_note + move_emit (single-block moves: every slot is current when the
   consumers run). */
static inline void move_record(hh_heap *h, hhi_block *nb, uint32_t slot, void *op, size_t src, size_t usable,
                               size_t moved) {
    hh_move_record r = move_note(h, nb, slot, op, src, usable, moved);
    move_emit(h, &r, op, blk_payload(nb), moved);
}

/* Debug poison + no-access for the bytes of [op, op+len) that the new payload
   [np, np+len) does not cover. */
static void vacate(const hh_heap *h, char *op, char *np, size_t len) {
    char *lo = op, *hi = op + len;
    if (np <= op && np + len > op) lo = np + len;          /* moved down, overlapping */
    else if (np > op && np < op + len) hi = np;            /* moved up, overlapping */
    if (hi <= lo) return;
    if (h->debug || h->debug_moves) {
        hh_track_undefined(lo, (size_t)(hi - lo));
        memset(lo, HH_FILL_MOVED, (size_t)(hi - lo));
    }
    hh_track_noaccess(lo, (size_t)(hi - lo));
}

/* Makes [off, off + size), the old place of a block that just moved (its
   bytes still counted as used, its start bit set, the block after it not
   PREV_FREE), a quarantine block (I12). false when the list cannot grow:
   the caller then frees the range as usual (the move stands). */
static bool quarantine_make(hh_heap *h, size_t off, size_t size, bool prev_free) {
    if (h->quar_count == h->quar_cap) {
        size_t cap = h->quar_cap ? h->quar_cap * 2 : 64;
        size_t *q = hhi_meta_alloc(cap * sizeof *q);
        if (q == NULL) return false;
        if (h->quar_count) memcpy(q, h->quar, h->quar_count * sizeof *q);
        hhi_meta_free(h->quar);
        h->quar = q;
        h->quar_cap = cap;
    }
    hhi_block *b = blk_at(h, off);
    /* slot 0: no handle names it; BLK_PINNED: nothing moves it */
    hdr_write(b, size_field(size) | BLK_QUARANTINE | BLK_PINNED | (prev_free ? BLK_PREV_FREE : 0));
    h->quar[h->quar_count++] = off;
    return true;
}

void hhi_heap_quarantine_release(hh_heap *h) {
    for (size_t i = 0; i < h->quar_count; i++) {
        size_t off = h->quar[i];
        hhi_block *b = blk_at(h, off);
        hh_assert(blk_quarantined(b));
        size_t size = blk_size_live(b);
        used_sub(h, off, size);
        heap_touch(h, blk_prev_free(b) ? blk_offset(h, blk_prev_free_block(b)) : off);
        region_release(h, off, size, blk_prev_free(b));
    }
    h->quar_count = 0;
}

bool hhi_heap_can_slide(const hh_heap *h, const hhi_block *f, const hhi_block *b) {
    size_t lead, dst = place_dst(h, f, blk_align(b), &lead), boff = blk_offset(h, b);
    if (dst >= boff) return false;                    /* alignment leaves no room to go down */
    return !heap_quarantining(h) || dst + blk_size_live(b) - (size_t)blk_slack(b) * HHI_GRANULE <= boff;
}

hhi_block *hhi_heap_slide_down(hh_heap *h, hhi_block *f, hhi_block *b) {
    size_t foff = blk_offset(h, f), fsize = blk_size_free(f), boff = foff + fsize;
    hh_assert(blk_is_free(f) && (char *)b == (char *)f + fsize && !blk_is_free(b) && !blk_pinned(b));
    size_t bfull = blk_size_live(b), align = blk_align(b), usable = blk_usable(h, b);
    size_t bs = bfull - (size_t)blk_slack(b) * HHI_GRANULE;
    uint32_t slot = blk_slot(b);
    size_t lead, dst = place_dst(h, f, align, &lead);
    if (dst >= boff) return NULL;               /* alignment leaves no room to go down */
    bool quar = heap_quarantining(h);
    if (quar && dst + bs > boff) return NULL;    /* would land on its own old place */

    /* Quarantined, the old place stays apart: only the hole's rest is the tail. */
    size_t end = quar ? boff : boff + bfull, tail = end - dst - bs;
    unsigned slack = 0;
    if (tail < HHI_MIN_BLOCK) {
        bs += tail;
        slack = (unsigned)(tail / HHI_GRANULE);
        tail = 0;
    }
    void *op = blk_payload(b);
    fl_remove(h, f);
    if (!quar) hhi_bitmap_clear(&h->starts, off_granule(boff));
    if (lead > 0) hhi_bitmap_clear(&h->starts, off_granule(foff));
    if (!quar) used_sub(h, boff, bfull);
    used_add(h, dst, bs);

    hh_track_undefined(h->base + dst, boff - dst);    /* the hole becomes the destination */
    hhi_block *nb = blk_at(h, dst);
    char *np = (char *)blk_payload(nb);
    memmove(np, op, usable);                          /* overlapping: payload goes down */
    hdr_write(nb, live_word(bs, align, slack, lead >= HHI_MIN_BLOCK) | slot_field(slot));
    hhi_bitmap_set(&h->starts, off_granule(dst));
    guard_fill(h, nb);
    vacate(h, op, np, usable + h->guard);

    if (lead >= HHI_MIN_BLOCK) free_block_make(h, foff, lead);
    else if (lead > 0) lead_absorb(h, foff, lead);
    if (tail) {
        hhi_bitmap_set(&h->starts, off_granule(dst + bs));
        region_release(h, dst + bs, tail, false);
    } else {
        hhi_block *n = blk_next(h, nb);
        if (n) n->word &= ~BLK_PREV_FREE;
    }
    if (quar && !quarantine_make(h, boff, bfull, tail > 0)) {   /* no room to list it: free it as usual */
        used_sub(h, boff, bfull);
        region_release(h, boff, bfull, tail > 0);
    }
    move_record(h, nb, slot, op, boff, usable, usable);
    return nb;
}

hhi_block *hhi_heap_move_into(hh_heap *h, hhi_block *b, hhi_block *f, size_t absorb) {
    hh_assert(absorb < (HHI_MAX_SLACK + 1) * HHI_GRANULE);
    hh_assert(blk_is_free(f) && !blk_is_free(b) && !blk_pinned(b));
    size_t boff = blk_offset(h, b), align = blk_align(b), usable = blk_usable(h, b);
    size_t bs = blk_size_live(b) - (size_t)blk_slack(b) * HHI_GRANULE;
    uint32_t slot = blk_slot(b);
    void *op = blk_payload(b);
    hhi_block *nb = carve(h, f, bs, align, absorb, slot);   /* may flip b's PREV_FREE or grow its slack */
    size_t bfull = blk_size_live(b);
    used_add(h, blk_offset(h, nb), blk_size_live(nb));
    char *np = (char *)blk_payload(nb);
    hh_track_undefined(np, usable);
    memcpy(np, op, usable);                           /* disjoint: nb lies inside the old hole */
    guard_fill(h, nb);
    vacate(h, op, np, usable + h->guard);
    bool prev_free = blk_prev_free(b);
    if (!heap_quarantining(h) || !quarantine_make(h, boff, bfull, prev_free)) {
        used_sub(h, boff, bfull);
        region_release(h, boff, bfull, prev_free);
    }
    move_record(h, nb, slot, op, boff, usable, usable);
    return nb;
}

/* Moves the run of blocks [run, end) down by gap with one memmove and records
   each block's move (its old start bit is already cleared). Every slot of the
   run is updated before the first move event, so a consumer that derefs
   another block of the run sees its new address. */
static void sweep_move_run(hh_heap *h, size_t run, size_t end, size_t gap, size_t *bytes, size_t *count) {
    if (gap == 0 || end <= run) return;
    memmove(h->base + run - gap, h->base + run, end - run);
    used_sub(h, run, end - run);                       /* the run is all live: it lands gap lower */
    used_add(h, run - gap, end - run);
    for (size_t o = run - gap; o < end - gap;) {
        hhi_block *nb = blk_at(h, o);
        size_t size = blk_size_live(nb), usable = blk_usable(h, nb);
        hhi_bitmap_set_fast(&h->starts, off_granule(o));
        if (o == run - gap) nb->word &= ~BLK_PREV_FREE;        /* a live block (or nothing) is below it now */
        move_note(h, nb, blk_slot(nb), h->base + o + gap + HHI_HDR, o + gap, usable, usable);
        *bytes += usable;
        (*count)++;
        o += size;
    }
    for (size_t o = run - gap; o < end - gap;) {        /* then the events, in address order */
        hhi_block *nb = blk_at(h, o);
        size_t usable = blk_usable(h, nb);
        hh_move_record r = { slot_handle(h, blk_slot(nb)), o + gap, o, blk_size_live(nb) };
        move_emit(h, &r, h->base + o + gap + HHI_HDR, blk_payload(nb), usable);
        o += r.size;
    }
}

/* Ends a sweep segment at `end`: the pending run moves down and the gap
   becomes one free block right below `end`. */
static void sweep_flush(hh_heap *h, size_t run, size_t end, size_t gap, size_t *bytes, size_t *count) {
    if (gap == 0) return;
    sweep_move_run(h, run, end, gap, bytes, count);
    hhi_bitmap_set(&h->starts, off_granule(end - gap));
    free_block_make(h, end - gap, gap);               /* its neighbours are live or absent */
}

enum { HHI_SWEEP_AHEAD = 4096 };                        /* bytes ahead of the sweep to prefetch */

size_t hhi_heap_sweep_compact(hh_heap *h, size_t *bytes) {
    size_t count = 0;
    *bytes = 0;
    if (hh_track_running()) return 0;                 /* guards and slack are no-access to the tools */
    if (heap_quarantining(h)) return 0;               /* runs land on their own old places */
    hhi_block *f = hhi_heap_lowest_free(h);
    if (f == NULL) return 0;
    journal_reserve(h, h->live_blocks);               /* at most every block moves: one allocation */
    size_t off = blk_offset(h, f), gap = 0, run = off, pf = off;
    while (off < h->managed) {
        hhi_block *b = blk_at(h, off);
        /* The walk chases headers through memory: stream the lines ahead
           (the memmoves read them all anyway) so the loads below do not wait
           on DRAM one block at a time. */
        for (size_t end = HH_MIN(off + HHI_SWEEP_AHEAD, h->managed); pf < end; pf += 64) HH_PREFETCH(h->base + pf);
        size_t size = blk_size(b);
        if (blk_is_free(b)) {                          /* the run so far moves; the gap grows */
            sweep_move_run(h, run, off, gap, bytes, &count);
            fl_remove(h, b);
            hhi_bitmap_clear(&h->starts, off_granule(off));
            gap += size;
        } else if (blk_pinned(b) || !off_aligned(off - gap, blk_align(b))) {   /* cannot go: the gap ends here */
            sweep_flush(h, run, off, gap, bytes, &count);
            gap = 0;
        } else {
            if (gap) hhi_bitmap_clear_fast(&h->starts, off_granule(off));    /* set again at its new place */
            off += size;
            continue;
        }
        off += size;
        run = off;
    }
    sweep_flush(h, run, h->managed, gap, bytes, &count);
    return count;
}

bool hhi_heap_absorb_hole(hh_heap *h, hhi_block *f) {
    size_t foff = blk_offset(h, f), fsize = blk_size_free(f);
    hh_assert(blk_is_free(f) && foff + fsize < h->managed);
    hhi_block *p = hhi_heap_block_before(h, f);
    if (p == NULL || blk_slack(p) + fsize / HHI_GRANULE > HHI_MAX_SLACK) return false;
    fl_remove(h, f);
    unsigned slack = blk_slack(p) + (unsigned)(fsize / HHI_GRANULE);
    p->word = (p->word & ~(BLK_SLACK_MASK | BLK_SIZE_MASK)) | size_field(blk_size_live(p) + fsize) |
              ((uint64_t)slack << BLK_SLACK_SHIFT);
    used_add(h, foff, fsize);
    if (blk_pinned(p) && !blk_quarantined(p)) h->pinned_bytes += fsize;
    hhi_bitmap_clear(&h->starts, off_granule(foff));
    blk_at(h, foff + fsize)->word &= ~BLK_PREV_FREE;
    hh_track_noaccess(h->base + foff, fsize);         /* slack: nobody's bytes */
    return true;
}

/* Cache flush: each cached block is released as hh_free's slow path would
   have (its bytes leave used_bytes and the regions, then it coalesces). The
   PREV_FREE bit of a cached block is kept exact while it waits (a neighbour
   freed below it sets it), and is read right before each release, so blocks
   cached side by side merge as they are released. */
HH_NOINLINE HH_COLD void hhi_heap_cache_flush(hh_heap *h) {
    if (heap_cache_empty(h)) return;
    size_t low = SIZE_MAX;
    for (unsigned c = 0; c < HHI_CACHE_CLASSES; c++) {
        uint32_t g = h->cache[c];
        h->cache[c] = HHI_NONE;
        while (g != HHI_NONE) {
            size_t off = granule_off(g);
            hhi_block *b = blk_at(h, off);
            size_t size = blk_size_live(b);
            bool prev_free = blk_prev_free(b);
            g = b->u.free.next;
            size_t touched = prev_free ? blk_offset(h, blk_prev_free_block(b)) : off;
            if (touched < low) low = touched;
            used_sub(h, off, size);
            region_release(h, off, size, prev_free);
        }
    }
    h->cache_room = h->cache_limit;
    h->cache_low = SIZE_MAX;
    memset(h->cache_count, 0, sizeof h->cache_count);
    heap_touch(h, low);
}

void hhi_heap_journal_reset(hh_heap *h) {
    hhi_heap_cache_flush(h);
    if (h->quar_count) hhi_heap_quarantine_release(h);
    h->journal.count = 0;
    h->journal.overflow = false;
}

/* true if free block f ends at or below limit and a block of bs bytes at
   alignment align fits in it. */
static bool fits_below(const hh_heap *h, const hhi_block *f, size_t bs, size_t align, size_t limit) {
    return blk_offset(h, f) + blk_size_free(f) <= limit && hhi_heap_fits(h, f, bs, align, NULL);
}

hhi_block *hhi_heap_find_fit_below(const hh_heap *h, size_t bs, size_t align, size_t limit, unsigned tries,
                                   unsigned *looked) {
    size_t want = align <= HHI_GRANULE ? bs : bs + align;
    unsigned f, s;
    fl_mapping(want, &f, &s);                         /* the request's own list: equal sizes fit exactly */
    if (f >= HHI_FL_COUNT) return NULL;
    uint32_t g = h->fl.head[f][s];
    for (unsigned k = 0; g != HHI_NONE && k < HHI_FIT_BELOW_WALK; k++) {
        hhi_block *b = blk_at(h, granule_off(g));
        ++*looked;
        if (blk_size_free(b) >= want && fits_below(h, b, bs, align, limit)) return b;
        g = b->u.free.next;
    }
    uint32_t sl_map = h->fl.sl_bitmap[f] & (s + 1 < 32 ? ~0u << (s + 1) : 0);
    while (tries--) {                                 /* then larger lists, smallest first */
        if ((sl_map = fl_next_nonempty(h, &f, sl_map)) == 0) return NULL;
        s = hh_ctz64(sl_map);
        sl_map &= sl_map - 1;
        g = h->fl.head[f][s];
        for (unsigned k = 0; g != HHI_NONE && k < HHI_FIT_BELOW_WALK; k++) {
            hhi_block *b = blk_at(h, granule_off(g));
            ++*looked;
            if (fits_below(h, b, bs, align, limit)) return b;
            g = b->u.free.next;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------------------
   Address-ordered queries (bitmaps)
--------------------------------------------------------------------------- */
hhi_block *hhi_heap_lowest_free(const hh_heap *h) { return hhi_heap_free_at_or_after(h, 0); }

/* The lowest free block starting in span s at a granule whose bit is in
   `mask`, or NULL: the span's block starts, lowest first, until a free header. */
static hhi_block *span_free_lowest(const hh_heap *h, size_t s, uint64_t mask) {
    for (uint64_t w = h->starts.level[0][s] & mask; w; w &= w - 1) {
        hhi_block *b = blk_at(h, granule_off((uint32_t)(s * HHI_FSPAN + hh_ctz64(w))));
        if (blk_is_free(b)) return b;
    }
    return NULL;
}
/* As span_free_lowest, the highest. */
static hhi_block *span_free_highest(const hh_heap *h, size_t s, uint64_t mask) {
    for (uint64_t w = h->starts.level[0][s] & mask; w;) {
        unsigned i = hh_fls64(w);
        hhi_block *b = blk_at(h, granule_off((uint32_t)(s * HHI_FSPAN + i)));
        if (blk_is_free(b)) return b;
        w &= ~((uint64_t)1 << i);
    }
    return NULL;
}

hhi_block *hhi_heap_free_at_or_after(const hh_heap *h, size_t off) {
    size_t g = off / HHI_GRANULE, s = g >> HHI_FSPAN_SHIFT;
    if (g >= h->managed / HHI_GRANULE) return NULL;
    if (h->free_span[s]) {                            /* its own span, from g up */
        hhi_block *b = span_free_lowest(h, s, ~(uint64_t)0 << (g % HHI_FSPAN));
        if (b) return b;
    }
    s = hhi_bitmap_next(&h->frees, s + 1);            /* then the next span that has one */
    return s == HHI_BM_NONE ? NULL : span_free_lowest(h, s, ~(uint64_t)0);
}

hhi_block *hhi_heap_free_at_or_before(const hh_heap *h, size_t off) {
    size_t g = off / HHI_GRANULE;
    if (g >= h->managed / HHI_GRANULE) g = h->managed / HHI_GRANULE - 1;
    size_t s = g >> HHI_FSPAN_SHIFT;
    unsigned b = (unsigned)(g % HHI_FSPAN);
    if (h->free_span[s]) {                            /* its own span, from g down */
        hhi_block *f = span_free_highest(h, s, b == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (b + 1)) - 1));
        if (f) return f;
    }
    if (s == 0) return NULL;
    s = hhi_bitmap_prev(&h->frees, s - 1);            /* then the previous span that has one */
    return s == HHI_BM_NONE ? NULL : span_free_highest(h, s, ~(uint64_t)0);
}

hhi_block *hhi_heap_block_at_or_after(const hh_heap *h, size_t off) {
    size_t g = hhi_bitmap_next(&h->starts, off / HHI_GRANULE);
    return g == HHI_BM_NONE ? NULL : blk_at(h, granule_off((uint32_t)g));
}

hhi_block *hhi_heap_block_before(const hh_heap *h, const hhi_block *b) {
    size_t off = blk_offset(h, b);
    if (off == 0) return NULL;
    if (blk_prev_free(b)) return blk_prev_free_block(b);
    size_t g = hhi_bitmap_prev(&h->starts, off / HHI_GRANULE - 1);
    return g == HHI_BM_NONE ? NULL : blk_at(h, granule_off((uint32_t)g));
}

hhi_block *hhi_heap_top_free(const hh_heap *h) {
    hhi_block *f = hhi_heap_free_at_or_before(h, h->managed - HHI_GRANULE);
    return f && blk_offset(h, f) + blk_size_free(f) == h->managed ? f : NULL;
}

/* ---------------------------------------------------------------------------
   Returning memory: the top free region's whole pages go back to the OS
--------------------------------------------------------------------------- */
size_t hhi_heap_decommit_top(hh_heap *h, size_t retain, size_t min_bytes, size_t max_bytes) {
    if (h->mapping == NULL) return 0;                 /* the caller's buffer is the caller's */
    hhi_block *t = hhi_heap_top_free(h);
    if (t == NULL) return 0;
    uintptr_t page = hhi_os_page_size(), base = (uintptr_t)h->base;
    size_t toff = blk_offset(h, t);
    if (retain > h->managed) return 0;
    uintptr_t lo = hh_align_up(base + toff + HHI_FREE_HEAD + retain, page);   /* its links lie past the header */
    uintptr_t hi = (base + h->managed - 8) & ~(page - 1);   /* the footer's page stays */
    /* Only [.., dc_lo) can be resident: above it the pages were given back
       or never written. Give back the highest resident pages first. */
    uintptr_t top = (base + h->dc_lo) & ~(page - 1);
    if (top > hi) top = hi;
    if (top <= lo) return 0;
    size_t n = (size_t)(top - lo);
    if (n < min_bytes) return 0;
    if (max_bytes && n > max_bytes) {                 /* the highest part first: [dc_lo, dc_hi) stays one range */
        n = max_bytes & ~(page - 1);
        if (n == 0) n = page;
        lo = top - n;
    }
    h->decommit_calls++;
    if (!hhi_os_decommit((void *)lo, n)) return 0;    /* nothing lost: the pages simply stay */
    if (base + h->dc_lo > top) h->dc_hi = (size_t)(top - base);   /* dc_lo was past the footer's page */
    h->dc_lo = (size_t)(lo - base);
    h->decommitted = h->dc_hi - h->dc_lo;
    return n;
}

/* ---------------------------------------------------------------------------
   Compaction for a failed allocation
--------------------------------------------------------------------------- */
hhi_block *hhi_heap_slide_range(hh_heap *h, hhi_block *f, size_t end, size_t size, size_t align) {
    while (f && blk_offset(h, f) < end) {
        if (hhi_heap_fits(h, f, size, align, NULL)) return f;
        hhi_block *n = blk_next(h, f);
        if (n == NULL || blk_offset(h, n) >= end) return NULL;   /* f ends the range and is still too small */
        hhi_block *moved = blk_pinned(n) ? NULL : hhi_heap_slide_down(h, f, n);
        if (moved == NULL) {                          /* pinned or stuck: continue above it */
            f = hhi_heap_free_at_or_after(h, blk_offset(h, n) + blk_size_live(n));
            continue;
        }
        hhi_block *after = blk_next(h, moved);
        f = (after && blk_is_free(after)) ? after : hhi_heap_free_at_or_after(h, blk_offset(h, moved));
    }
    return NULL;
}

hhi_block *hhi_heap_compact_for(hh_heap *h, size_t size, size_t align) {
    return hhi_heap_slide_range(h, hhi_heap_lowest_free(h), h->managed, size, align);
}

/* ---------------------------------------------------------------------------
   Life cycle
--------------------------------------------------------------------------- */
/* Resolves defaults into out; HH_OK or the reason the desc is bad (reported). */
static hh_status heap_desc_defaults(const hh_heap_desc *desc, hh_heap_desc *out) {
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: desc is NULL");
    if (desc->capacity < HH_HEAP_MIN_CAPACITY)
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: capacity %zu below the minimum %u", desc->capacity,
                         (unsigned)HH_HEAP_MIN_CAPACITY);
    if (desc->capacity > HHI_MAX_MANAGED)
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: capacity %zu above the maximum %zu", desc->capacity,
                         (size_t)HHI_MAX_MANAGED);
    if (desc->memory && ((uintptr_t)desc->memory & (HHI_GRANULE - 1)))
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: memory %p is not 16-byte aligned", desc->memory);
    if (desc->flags & ~(uint32_t)HEAP_KNOWN_FLAGS)
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: unknown flags %#x", desc->flags & ~(unsigned)HEAP_KNOWN_FLAGS);
    if (desc->max_handles > HH_HANDLE_MAX_SLOTS)
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: max_handles %u above %u", desc->max_handles,
                         (unsigned)HH_HANDLE_MAX_SLOTS);
    bool grow = (desc->flags & HH_HEAP_GROWABLE) != 0;
    if (grow && desc->memory)
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: HH_HEAP_GROWABLE needs the heap's own mapping (memory is set)");
    if (!grow && desc->commit)
        return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: commit %zu given without HH_HEAP_GROWABLE", desc->commit);
    *out = *desc;
    if (grow) {
        size_t c = hhi_def(desc->commit, desc->capacity / 8);
        if (c < HH_HEAP_MIN_CAPACITY) c = HH_HEAP_MIN_CAPACITY;
        out->commit = c < desc->capacity ? c : desc->capacity;
    }
    size_t dflt = desc->capacity / 64;
    if (dflt < 16) dflt = 16;
    if (dflt > HH_HANDLE_MAX_SLOTS) dflt = HH_HANDLE_MAX_SLOTS;
    out->max_handles = hhi_def(desc->max_handles, (uint32_t)dflt);
    return HH_OK;
}

/* Bytes (= spans) of the free-start index of a range of `limit` bytes (I5). */
static size_t free_span_bytes(size_t limit) { return (limit / HHI_GRANULE + HHI_FSPAN - 1) / HHI_FSPAN; }

/* Bytes of a per-slot side array of elements of `elem` bytes (I6). */
static size_t side_array_bytes(const hh_heap *h, size_t elem) { return (size_t)h->handles.head.capacity * elem; }

static void heap_release(hh_heap *h) {
    if (h->defrag && h->defrag_free) h->defrag_free(h->defrag);
    if (h->pins) hhi_os_unmap(h->pins, side_array_bytes(h, sizeof *h->pins));
    if (h->tags) hhi_os_unmap(h->tags, side_array_bytes(h, sizeof *h->tags));
    hhi_meta_free(h->quar);
    hhi_meta_free(h->journal.rec);
    hhi_region_fini(h);
    hhi_bitmap_fini(&h->starts);
    hhi_bitmap_fini(&h->frees);
    if (h->free_span && h->free_span_mapped) hhi_os_unmap(h->free_span, free_span_bytes(h->limit));
    else hhi_meta_free(h->free_span);
    hhi_slots_fini(&h->handles);
    if (h->mapping) hhi_os_unmap(h->mapping, h->mapping_bytes);
    hhi_slots_unmap(h, sizeof *h);                     /* the object lives in the slots' reservation: last */
}

hh_status hh_heap_create(const hh_heap_desc *desc, hh_heap **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: out is NULL");
    *out = NULL;
    hh_heap_desc d;
    hh_status s = heap_desc_defaults(desc, &d);
    if (s != HH_OK) return s;

    char *base;
    size_t managed, limit, commit_end;
    void *mapping = NULL;
    size_t mapping_bytes = 0;
    bool grow = (d.flags & HH_HEAP_GROWABLE) != 0, huge = (d.flags & HH_HEAP_HUGE_PAGES) && !d.memory;
    size_t map_align = huge ? HEAP_HUGE_BYTES : HHI_BASE_ALIGN;
    if (grow) {                                      /* reserve the limit, commit the start */
        limit = d.capacity & ~(size_t)(HHI_GRANULE - 1);
        managed = d.commit & ~(size_t)(HHI_GRANULE - 1);
        mapping_bytes = limit + HHI_BASE_ALIGN;
        mapping = hhi_os_reserve(mapping_bytes, map_align, false);
        if (mapping == NULL)
            return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: cannot reserve %zu bytes", mapping_bytes);
        base = (char *)mapping + HHI_BASE_ALIGN - HHI_HDR;
        commit_end = (size_t)(hh_align_up((uintptr_t)base + managed, hhi_os_page_size()) - (uintptr_t)base);
        if (!hhi_os_commit(mapping, (size_t)(base + commit_end - (char *)mapping))) {
            hhi_os_unmap(mapping, mapping_bytes);
            return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: cannot commit the first %zu bytes", managed);
        }
    } else if (d.memory) {
        uintptr_t m = (uintptr_t)d.memory;
        base = (char *)(hh_align_up_ptr(m + HHI_HDR, HHI_BASE_ALIGN) - HHI_HDR);
        size_t skip = (size_t)((uintptr_t)base - m);
        managed = skip < d.capacity ? (d.capacity - skip) & ~(size_t)(HHI_GRANULE - 1) : 0;
        if (managed < HH_HEAP_MIN_CAPACITY / 2)
            return hhi_error(HH_E_INVALID_ARG, "hh_heap_create: %zu-byte buffer leaves %zu bytes after alignment",
                             d.capacity, managed);
        limit = commit_end = managed;
    } else {
        managed = d.capacity & ~(size_t)(HHI_GRANULE - 1);
        mapping_bytes = managed + HHI_BASE_ALIGN;
        mapping = hhi_os_map(mapping_bytes, map_align);
        if (mapping == NULL)
            return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: cannot map %zu bytes", mapping_bytes);
        base = (char *)mapping + HHI_BASE_ALIGN - HHI_HDR;
        limit = commit_end = managed;
    }

    uint32_t committed;
    hh_heap *h = hhi_slots_map(d.max_handles, grow, huge, sizeof *h, &committed);
    if (h == NULL) {
        if (mapping) hhi_os_unmap(mapping, mapping_bytes);
        size_t obj = hhi_slots_reservation(sizeof *h) - HH_HEAP_SLOT_TABLE_BYTES;
        return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: cannot reserve %zu bytes for the handle slots and the heap "
                         "object (or commit %zu of them)", hhi_slots_reservation(sizeof *h),
                         hh_align_up((size_t)committed * sizeof(uint64_t), hhi_os_page_size()) + obj);
    }
    h->mapping = mapping;
    h->mapping_bytes = mapping_bytes;
    if (huge) hhi_os_hugepages(mapping, mapping_bytes, true);
    s = hhi_slots_init(&h->handles, base + HHI_HDR, d.max_handles, committed);   /* slots hold payload offsets */
    if (s != HH_OK) {
        heap_release(h);
        return s;
    }
    /* A growable heap's bitmaps cover the whole reservation, in zero pages. */
    bool (*bm_init)(hhi_bitmap *, size_t) = grow ? hhi_bitmap_init_mapped : hhi_bitmap_init;
    size_t spans = free_span_bytes(limit);
    h->free_span_mapped = grow;
    h->free_span = grow ? hhi_os_map(spans, 0) : hhi_meta_alloc(spans);   /* zeroed */
    h->limit = limit;                                 /* heap_release sizes free_span by it */
    if (h->free_span == NULL || !bm_init(&h->starts, limit / HHI_GRANULE) || !bm_init(&h->frees, spans)) {
        heap_release(h);
        return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: cannot allocate the address bitmaps");
    }
    h->base = base;
    h->managed = managed;
    h->commit_end = commit_end;
    if (!hhi_region_init(h)) {
        heap_release(h);
        return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: cannot allocate the region summary");
    }
    h->desc = d;
    h->flags = d.flags;
    h->debug = (d.flags & HH_HEAP_DEBUG) != 0;
    h->debug_moves = (d.flags & HH_HEAP_DEBUG_MOVES) != 0;
    h->guard = h->debug ? HHI_GUARD : 0;
    h->low_mark = SIZE_MAX;
    /* Nothing of the range is resident but the first header and the last
       footer (written below): [dc_lo, managed) is "never written". */
    h->dc_lo = h->dc_hi = HH_MIN(managed, (size_t)(hh_align_up((uintptr_t)base + HHI_FREE_HEAD, hhi_os_page_size()) -
                                                   (uintptr_t)base));
    while ((limit >> h->sq_shift) >= ((size_t)1 << 31)) h->sq_shift++;   /* keeps the sum of squares < 2^63 */
    hhi_lock_init(&h->lock);
    hhi_freelist_init(h);
    for (unsigned c = 0; c < HHI_CACHE_CLASSES; c++) h->cache[c] = HHI_NONE;
    h->cache_low = SIZE_MAX;
    heap_cache_limit_set(h);
    hh_track_pool_create(h, base);
    hh_track_noaccess(base, managed);
    free_block_make(h, 0, managed);
    *out = h;
    return HH_OK;
}

void hh_heap_destroy(hh_heap *h) {
    if (h == NULL) return;
    hh_track_pool_destroy(h);
    if (h->mapping == NULL) hh_track_undefined(h->base, h->managed);   /* hand the caller's buffer back usable */
    hhi_lock_destroy(&h->lock);
    heap_release(h);
}

void hh_heap_desc_get(const hh_heap *h, hh_heap_desc *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_desc_get: out is NULL");
        return;
    }
    if (h == NULL) {
        *out = (hh_heap_desc){0};
        hhi_error(HH_E_INVALID_ARG, "hh_heap_desc_get: heap is NULL");
        return;
    }
    *out = h->desc;
}

/* A per-slot side array (pins or tags) for its first use: one element per
   handle slot the table can ever hold, in zero pages of its own mapping, so
   only the pages of slots in use become resident. NULL (and HH_E_NO_MEMORY
   reported under `who`) if it cannot be mapped. Lock held: the caller
   stores it. */
HH_NOINLINE HH_COLD static void *side_array_make(hh_heap *h, size_t elem, const char *who, const char *what) {
    size_t bytes = side_array_bytes(h, elem);
    void *p = hhi_os_map(bytes, 0);
    if (p == NULL) hhi_error(HH_E_NO_MEMORY, "%s: cannot map the heap's %s array (%zu bytes)", who, what, bytes);
    return p;
}

/* ---------------------------------------------------------------------------
   Event hook for the fast paths: the event is built in a cold function, so
   hh_alloc / hh_free keep no event struct (and no stack frame for it).
--------------------------------------------------------------------------- */
HH_NOINLINE HH_COLD static void event_alloc(hh_heap *h, hh_handle hd, size_t size, size_t align, uint32_t tag) {
    h->event_fn(&(hh_heap_event){ .kind = HH_EV_ALLOC, .handle = hd, .size = size, .align = align, .tag = tag },
                h->event_user);
}
HH_NOINLINE HH_COLD static void event_free(hh_heap *h, hh_handle hd) {
    h->event_fn(&(hh_heap_event){ .kind = HH_EV_FREE, .handle = hd }, h->event_user);
}

/* ---------------------------------------------------------------------------
   Allocation
--------------------------------------------------------------------------- */
/* Validates size/align; HH_OK or the reported reason. */
static hh_status alloc_args(const hh_heap *h, size_t size, size_t align, const char *who) {
    if (hh_unlikely(h == NULL)) return hhi_error(HH_E_INVALID_ARG, "%s: heap is NULL", who);
    if (hh_unlikely(size == 0)) return hhi_error(HH_E_INVALID_ARG, "%s: size 0", who);
    if (hh_unlikely(!hh_is_pow2(align) || align > HH_HEAP_MAX_ALIGN))
        return hhi_error(HH_E_INVALID_ARG, "%s: align %zu is not a power of two in 1..%u", who, align,
                         (unsigned)HH_HEAP_MAX_ALIGN);
    if (hh_unlikely(size > HH_HEAP_MAX_ALLOC))
        return hhi_error(HH_E_INVALID_ARG, "%s: %zu bytes exceed the largest block (%zu bytes, HH_HEAP_MAX_ALLOC)", who,
                         size, (size_t)HH_HEAP_MAX_ALLOC);
    if (hh_unlikely(size > h->limit))
        return hhi_error(HH_E_NO_MEMORY, "%s: %zu bytes exceed the heap's %zu managed bytes", who, size, h->limit);
    return HH_OK;
}

/* Growable heaps: grows the managed range at its top (committing pages of the
   reservation) by at least a quarter, and so that the top region can take a
   block of bs bytes at alignment align; returns a free block that fits, or
   NULL (at the limit, or the OS refused the commit: h->grow_failed, nothing
   changed). Nothing moves. Lock held. */
HH_NOINLINE HH_COLD static hhi_block *heap_grow(hh_heap *h, size_t bs, size_t align) {
    h->grow_failed = false;
    if (h->managed >= h->limit) return NULL;
    hhi_block *t = hhi_heap_top_free(h);
    size_t have = t ? blk_size_free(t) : 0, need = bs + align + HHI_MIN_BLOCK, old = h->managed;
    size_t step = need > have ? need - have : HHI_MIN_BLOCK;
    if (step < old / 4) step = old / 4;
    step = hh_align_up(step, HHI_GRANULE);
    size_t nm = h->limit - old < step ? h->limit : old + step, delta = nm - old;
    uintptr_t page = hhi_os_page_size(), base = (uintptr_t)h->base;
    size_t ce = (size_t)(hh_align_up(base + nm, page) - base);
    if (ce > h->commit_end) {
        if (!hhi_os_commit(h->base + h->commit_end, ce - h->commit_end)) {
            h->grow_failed = true;
            return NULL;
        }
        h->commit_end = ce;
    }
    hh_track_noaccess(h->base + old, delta);
    h->managed = nm;
    if (t) {                                          /* the top region takes the new bytes */
        fl_remove(h, t);
        t->word = free_word(have + delta);
        uint64_t *foot = (uint64_t *)(void *)(h->base + nm - 8);
        hh_track_defined(foot, 8);
        *foot = have + delta;
        fl_insert(h, t);
    } else {                                          /* the last block is live: a new top region */
        free_block_make(h, old, delta);
    }
    if (h->dc_lo >= old) {                            /* the new pages were never written */
        size_t lo = (size_t)(hh_align_up(base + old + HHI_FREE_HEAD, page) - base);   /* a new top region's links */
        h->dc_lo = lo < nm ? lo : nm;
        if (h->dc_hi < h->dc_lo) h->dc_hi = h->dc_lo;
        h->decommitted = h->dc_hi - h->dc_lo;
    }
    heap_touch(h, old);
    heap_cache_limit_set(h);
    t = hhi_heap_top_free(h);
    return t && hhi_heap_fits(h, t, bs, align, NULL) ? t : NULL;
}

/* The slow path of allocation: no free block fits. Compacts when enough free
   bytes exist (unless the heap forbids it). NULL when the bytes are not there. */
static inline hhi_block *alloc_find(hh_heap *h, size_t bs, size_t align);
HH_NOINLINE HH_COLD static hhi_block *alloc_find_slow(hh_heap *h, size_t bs, size_t align) {
    if (!heap_cache_empty(h)) {                         /* the cached holes first: they may coalesce into room */
        hhi_heap_cache_flush(h);
        return alloc_find(h, bs, align);                /* the search again; back here with the cache empty */
    }
    hhi_block *f = fl_find(h, bs + 2 * align);     /* worst-case lead for aligned blocks */
    if (f && hhi_heap_fits(h, f, bs, align, NULL)) return f;
    f = hhi_heap_top_free(h);                       /* good fit skips the request's own list: try the top */
    if (f && hhi_heap_fits(h, f, bs, align, NULL)) return f;
    if (h->quar_count) {                            /* debug moves: the last step's old places go first */
        hhi_heap_quarantine_release(h);
        return alloc_find_slow(h, bs, align);
    }
    /* A growable heap grows before it compacts: committing pages is O(1),
       compacting may move much; the defrag steps compact it later. */
    if (h->managed < h->limit && (f = heap_grow(h, bs, align)) != NULL) return f;
    if (h->free_bytes < bs || (h->flags & HH_HEAP_NO_AUTO_COMPACT)) return NULL;   /* compaction cannot help */
    heap_touch(h, 0);                                          /* blocks anywhere may move */
    h->compacting = true;
    f = h->compact_hook ? h->compact_hook(h, bs, align) : hhi_heap_compact_for(h, bs, align);
    h->compacting = false;
    if (f) h->compactions++;
    return f;
}

/* The free block a new block of bs bytes goes into: first the head of the
   list holding bs itself when it is large enough (best fit: a hole left by an
   object of this size takes the next one of this size instead of being split
   by smaller ones -- in a game's churn this alone keeps fragmentation several
   times lower, see bench/bench_defrag.c), then TLSF good fit. Both O(1). */
static inline hhi_block *alloc_find(hh_heap *h, size_t bs, size_t align) {
    if (align <= HHI_GRANULE) {
        hhi_block *f = fl_exact_then_find(h, bs);
        return hh_likely(f != NULL) ? f : alloc_find_slow(h, bs, align);
    }
    hhi_block *f = fl_find(h, bs + align);
    if (hh_likely(f != NULL) && hhi_heap_fits(h, f, bs, align, NULL)) return f;
    return alloc_find_slow(h, bs, align);
}

/* Reports a failed allocation (lock held; releases it). Always HH_NULL. */
HH_NOINLINE HH_COLD static hh_handle alloc_fail(hh_heap *h, size_t size, size_t align, const char *who, bool table) {
    if (table) {
        uint32_t live = h->handles.live_count, committed = h->handles.committed, cap = h->handles.head.capacity;
        heap_unlock(h);
        if (committed < cap)
            hhi_error(HH_E_NO_MEMORY, "%s: cannot commit more handle slots (%u of %u committed, %u handles live)", who,
                      committed - 1u, cap - 1u, live);
        else
            hhi_error(HH_E_NO_MEMORY, "%s: handle table full (%u handles live)", who, live);
        return HH_NULL;
    }
    size_t free_bytes = h->free_bytes, largest = hhi_freelist_largest(h), managed = h->managed, limit = h->limit;
    bool refused = h->grow_failed;
    heap_unlock(h);
    if (refused) {
        hhi_error(HH_E_NO_MEMORY, "%s: no room for %zu bytes (align %zu) and cannot commit more of the reserved range "
                  "(%zu of %zu bytes managed)", who, size, align, managed, limit);
        return HH_NULL;
    }
    hhi_error(HH_E_NO_MEMORY, "%s: no room for %zu bytes (align %zu): %zu bytes free, largest hole %zu", who, size, align,
              free_bytes, largest);
    return HH_NULL;
}

/* Takes back the newest cached block of block size bs (cg, the head of its
   list): it is counted as used already (I13), so only the cache and its
   header change. The one pop of hh_alloc, alloc_plain_miss, heap_alloc and
   (with slack: a larger block for a smaller request, cache_near) alloc_carve. */
static inline hhi_block *cache_pop_slack(hh_heap *h, uint32_t cg, size_t bs, unsigned slack, uint32_t slot) {
    hhi_block *b = blk_at(h, granule_off(cg));
    h->cache[bs / HHI_GRANULE] = b->u.free.next;
    h->cache_room += bs;
    h->cache_count[bs / HHI_GRANULE]--;
    b->word = (b->word & BLK_PREV_FREE) | live_word(bs, HHI_GRANULE, slack, false) | slot_field(slot);
    h->mutations++;                                  /* no low_mark: a block taken back raises no hole */
    return b;
}
static inline hhi_block *cache_pop(hh_heap *h, uint32_t cg, size_t bs, uint32_t slot) {
    return cache_pop_slack(h, cg, bs, 0, slot);
}

/* The size of the smallest cached block a little larger than bs (at most
   HHI_CACHE_NEAR_GRANULES granules more), 0 when there is none. An
   allocation the cache cannot serve exactly takes it before it searches the
   free lists (alloc_carve): under a random size mix each size's list runs dry
   now and then while its neighbours hold blocks, and every such miss split a
   hole or carved fresh top bytes while the neighbours' blocks waited for a
   flush. bench_heap's churns, 1M ops (a page fault costs ~15 us on the
   benchmark machine's VM): 16..1024 B, top 12.3 -> 11.5 MiB and 382 -> 199
   faults; the game mix, whose blocks above 1 KiB now find the holes whole,
   top 6.2 -> 5.4 MiB (glibc 5.9) and 533 -> 354 faults (glibc 445); the
   same instructions per pair. Taken after the list search, only instead of
   a top carve, it saved the 16..1024 B faults alone and cost 2.3 more
   instructions per pair. Four granules cut the faults a little further (151)
   but cost 7 instructions per pair, fifteen 24: each larger block taken
   empties its own list sooner, so misses chain. */
static size_t cache_near(const hh_heap *h, size_t bs) {
    unsigned c = (unsigned)(bs / HHI_GRANULE), end = c + HHI_CACHE_NEAR_GRANULES;
    if (end >= HHI_CACHE_CLASSES) end = HHI_CACHE_CLASSES - 1;
    while (++c <= end)
        if (h->cache[c] != HHI_NONE) return (size_t)c * HHI_GRANULE;
    return 0;
}

/* The common end of an allocation: block b (header written with its slot, at offset boff,
   its bytes counted as used) gets its handle, slot, tag and the allocation
   epoch; then tools, debug fills, the event (not looked for when no_hook: the
   caller has seen event_fn NULL). Lock held; released here. */
HH_INLINE hh_handle alloc_finish(hh_heap *h, hhi_block *b, size_t boff, size_t size, size_t align, uint32_t tag,
                                 uint32_t slot, bool plain, bool no_hook) {
    void *p = blk_payload(b);
    hh_handle hd = hhi_slot_issue(&h->handles, slot, p);
    if (h->tags) h->tags[slot] = tag;                /* once any tag was given (else tag is 0) */
    h->regions[boff >> h->region_shift].epoch = h->alloc_epoch = h->epoch;
    h->live_blocks++;
    hh_track_alloc(h, p, blk_usable(h, b));
    if (!plain && hh_unlikely(h->debug)) {
        memset(p, HH_FILL_ALLOC, blk_usable(h, b));
        guard_fill(h, b);
    }
    if (!no_hook && hh_unlikely(h->event_fn != NULL)) event_alloc(h, hd, size, align, tag);
    hh_assert_expensive(hhi_heap_is_valid(h));
    if (!plain) heap_unlock(h);
    return hd;
}

/* A block just carved from a free block: its bytes become used; then the
   common end. */
HH_INLINE hh_handle alloc_carved(hh_heap *h, hhi_block *b, size_t size, size_t align, uint32_t tag, uint32_t slot,
                                 bool plain, bool no_hook) {
    size_t boff = blk_offset(h, b);
    used_add(h, boff, blk_size_live(b));
    heap_touch(h, boff);
    return alloc_finish(h, b, boff, size, align, tag, slot, plain, no_hook);
}

/* The cached bytes from which carving the top region flushes the cache
   first (alloc_carve): an eighth of the used bytes (at least
   HHI_CACHE_TOP_MIN), at most half the cache limit. Below it the top is
   carved and the cache kept. Flushing the holes on every top carve emptied
   the cache again and again under a random size mix -- a burst of cold
   merges, then every allocation of a drained size splitting TLSF holes --
   which made the 16..1024 B churn 1.5x slower; there the cache stays below
   an eighth of the live bytes (a sixteenth cost 7% more). The footprint this
   costs is at most these cached bytes: bounded by the live data, not by the
   capacity (bench_footprint without steps: the demo 1.06x -> 1.10x peak
   live; half the limit alone gave 1.14x; with steps unchanged). */
static inline size_t cache_top_flush_at(const hh_heap *h) {
    size_t at = h->used_bytes >> HHI_CACHE_TOP_USED_SHIFT, most = h->cache_limit >> 1;
    if (at < HHI_CACHE_TOP_MIN) at = HHI_CACHE_TOP_MIN;
    return at < most ? at : most;
}

/* An allocation the cache cannot serve exactly: a cached block a little
   larger, else a free block from the lists (or the slow path: grow,
   compact), carved. Apart from heap_alloc so that the cache
   path keeps a small frame. Lock held, `slot` taken; released here. */
HH_INLINE hh_handle alloc_carve(hh_heap *h, size_t size, size_t bs, size_t align, uint32_t tag, uint32_t slot,
                                const char *who, bool plain, bool no_hook) {
    /* A cached block a little larger first (cache_near), if any: its bytes
       are used already, and the holes stay whole for sizes the cache does
       not serve. */
    size_t near = align <= HHI_GRANULE && bs < HHI_CACHE_MAX_BLOCK ? cache_near(h, bs) : 0;
    if (near) {
        uint32_t cg = h->cache[near / HHI_GRANULE];
        hhi_block *b = cache_pop_slack(h, cg, near, (unsigned)((near - bs) / HHI_GRANULE), slot);
        return alloc_finish(h, b, granule_off(cg), size, align, tag, slot, plain, no_hook);
    }
    hhi_block *f;
    for (;;) {
        f = alloc_find(h, bs, align);
        if (hh_likely(f == NULL || heap_cached_bytes(h) < cache_top_flush_at(h) ||
                      blk_offset(h, f) + blk_size_free(f) != h->managed))
            break;
        /* About to carve the top region while cache_top_flush_at or more
           bytes wait in cached holes: merge them first, so that the heap
           fills its holes before it grows upwards (the highest live byte is
           the footprint). Each cached block is merged once, so this costs
           what its free would have. */
        hhi_heap_cache_flush(h);
    }
    if (hh_unlikely(f == NULL)) {
        hhi_slot_untake(&h->handles, slot);
        return alloc_fail(h, size, align, who, false);
    }
    hhi_block *b = align <= HHI_GRANULE ? carve16(h, f, bs, slot) : carve(h, f, bs, align, 0, slot);
    return alloc_carved(h, b, size, align, tag, slot, plain, no_hook);
}

/* Allocation once the arguments are valid (size in 1..managed, align a power
   of two <= HH_HEAP_MAX_ALIGN). Inlined into hh_alloc, where align is the
   constant 16: the fast path is then the cache pop and the handle. `plain`
   (a constant) compiles the instance for a heap that is neither thread-safe
   nor a debug heap: no lock and no debug tests on its path. */
HH_INLINE hh_handle heap_alloc(hh_heap *h, size_t size, size_t align, uint32_t tag, const char *who, bool plain) {
    if (align < HHI_GRANULE) align = HHI_GRANULE;
    size_t bs = blk_min_size(h, size);
    if (!plain) heap_lock(h);
    if (hh_unlikely(tag != 0 && h->tags == NULL)) {   /* the heap's first tag, under the lock like */
        if ((h->tags = side_array_make(h, sizeof *h->tags, who, "tag")) == NULL) {   /* every use of h->tags */
            heap_unlock(h);
            return HH_NULL;
        }
    }
    uint32_t slot = hhi_slot_take(&h->handles);      /* first: a full table fails before anything changes */
    if (hh_unlikely(slot == 0)) return alloc_fail(h, size, align, who, true);
    uint32_t cg = align <= HHI_GRANULE && bs <= HHI_CACHE_MAX_BLOCK ? h->cache[bs / HHI_GRANULE] : HHI_NONE;
    if (hh_likely(cg != HHI_NONE))                   /* a cached block of this size: already counted as used */
        return alloc_finish(h, cache_pop(h, cg, bs, slot), granule_off(cg), size, align, tag, slot, plain, false);
    return alloc_carve(h, size, bs, align, tag, slot, who, plain, false);
}

/* hh_alloc past its call-free path on a plain heap (no lock, no debug, no
   event hook) for a size the cache serves, whose block size bs hh_alloc has
   computed, and the cache's head cg for it: no cached block of that size (carve one: a fresh heap's every
   allocation), or no rested handle slot. Nothing is checked twice: hh_alloc
   has validated the arguments and the heap's kind, so this is heap_alloc's
   plain instance less its argument work, in a frame of its own. */
HH_NOINLINE static hh_handle alloc_plain_miss(hh_heap *heap, size_t size, size_t bs, uint32_t cg) {
    uint32_t slot = hhi_slot_take(&heap->handles);   /* first: a full table fails before anything changes */
    if (hh_unlikely(slot == 0)) return alloc_fail(heap, size, HHI_GRANULE, "hh_alloc", true);
    if (cg != HHI_NONE)                              /* cached block, no rested slot: as heap_alloc */
        return alloc_finish(heap, cache_pop(heap, cg, bs, slot), granule_off(cg), size, HHI_GRANULE, 0, slot, true, true);
    if (heap_cache_empty(heap) && heap->free_blocks == 1) {
        /* The lists hold one free block (a fresh heap's top region): when it
           is large enough, alloc_carve's search ends at it -- a block in a
           higher list than bs's is found by the good-fit search, one in bs's
           own list by the exact-list look (size >= bs) -- and with no cached
           block nothing is flushed first; so take it directly. */
        hhi_block *f = fl_sole(heap);
        if (hh_likely(blk_size_free(f) >= bs))
            return alloc_carved(heap, carve16(heap, f, bs, slot), size, HHI_GRANULE, 0, slot, true, true);
    }
    return alloc_carve(heap, size, bs, HHI_GRANULE, 0, slot, "hh_alloc", true, true);
}

/* hh_alloc with a bad argument: reports it. */
HH_NOINLINE HH_COLD static hh_handle alloc_bad_args(hh_heap *heap, size_t size) {
    (void)alloc_args(heap, size, HHI_GRANULE, "hh_alloc");
    return HH_NULL;
}

/* hh_alloc past its fast path: bad arguments, thread-safe or debug heaps,
   an event hook, no cached block of the size, no rested handle slot. */
HH_NOINLINE static hh_handle alloc_slow(hh_heap *heap, size_t size) {
    if (hh_unlikely(heap == NULL || size - 1 >= heap->limit || size > HH_HEAP_MAX_ALLOC)) return alloc_bad_args(heap, size);
    if (heap->flags & (HH_HEAP_THREADSAFE | HH_HEAP_DEBUG)) return heap_alloc(heap, size, HHI_GRANULE, 0, "hh_alloc", false);
    return heap_alloc(heap, size, HHI_GRANULE, 0, "hh_alloc", true);
}

/* The fast path is the churn of game objects: a plain heap (no lock, no
   debug, no event hook), a cached block of the size and a rested slot. It
   makes no call, so it needs no stack frame; everything else is alloc_slow. */
hh_handle hh_alloc(hh_heap *heap, size_t size) {
    if (hh_likely(heap != NULL && size - 1 < HHI_CACHE_MAX_BLOCK - HHI_HDR &&
                  !(heap->flags & (HH_HEAP_THREADSAFE | HH_HEAP_DEBUG)) && heap->event_fn == NULL)) {
        size_t bs = blk_size_for(size);              /* no guard on a plain heap */
        hhi_slots *t = &heap->handles;
        uint32_t cg = heap->cache[bs / HHI_GRANULE];
        if (hh_likely(cg != HHI_NONE && t->free_count > t->min_free))
        {
            uint32_t slot = hhi_slot_fifo_take(t);
            return alloc_finish(heap, cache_pop(heap, cg, bs, slot), granule_off(cg), size, HHI_GRANULE, 0, slot, true,
                                true);
        }
        return alloc_plain_miss(heap, size, bs, cg);     /* a tail call: hh_alloc keeps no frame */
    }
    return alloc_slow(heap, size);
}

hh_handle hh_alloc_ex(hh_heap *heap, size_t size, size_t align, uint32_t tag) {
    if (alloc_args(heap, size, align, "hh_alloc_ex") != HH_OK) return HH_NULL;
    return heap_alloc(heap, size, align, tag, "hh_alloc_ex", false);
}

/* ---------------------------------------------------------------------------
   Free
--------------------------------------------------------------------------- */
/* Live, consistent block of h or NULL after reporting (lock held). */
static hhi_block *block_checked(const hh_heap *heap, hh_handle hd, const char *who) {
    hhi_block *b = block_of(heap, hd);
    if (hh_unlikely(b == NULL)) {
        if (hhi_slots_check(&heap->handles, hd, who) == HH_OK)   /* cannot happen: the lookup failed */
            hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx does not name a live block", who, (unsigned long long)hd.id);
        return NULL;
    }
    /* A cached or quarantine block is no live block even when its slot bits
       match (they are zero there; only a damaged header gets here): freeing
       it would put it in a free list while the cache or quar[] still holds it. */
    if (HH_NEVER(blk_is_free(b) || blk_cached(b) || blk_quarantined(b) || blk_slot(b) != hh_handle_index(hd))) {
        hhi_error(HH_E_CORRUPT, "%s: block of handle %#llx has a broken header", who, (unsigned long long)hd.id);
        return NULL;
    }
    return b;
}

/* Takes the lock and returns the live block behind h (public queries and
   pin/unpin). On a NULL heap or a bad handle: reported under `who`, lock not
   held, NULL (hh_last_error() has the status). */
static hhi_block *block_locked(const hh_heap *heap, hh_handle hd, const char *who) {
    if (hh_unlikely(heap == NULL)) {
        hhi_error(HH_E_INVALID_ARG, "%s: heap is NULL", who);
        return NULL;
    }
    heap_lock(heap);
    hhi_block *b = block_checked(heap, hd, who);
    if (b == NULL) heap_unlock(heap);
    return b;
}

/* hh_free past the fast path's test (lock held; releases it): a null, stale or
   forged handle, a pinned or corrupt block, a debug heap (guards, fills). */
HH_NOINLINE HH_COLD static hh_status free_generic(hh_heap *heap, hh_handle hd) {
    if (hh_is_null(hd)) {
        heap_unlock(heap);
        return HH_OK;
    }
    hhi_block *b = block_checked(heap, hd, "hh_free");
    if (b == NULL) {
        heap_unlock(heap);
        return hh_last_error();
    }
    if (blk_pinned(b)) {
        unsigned pins = blk_pins(heap, b);
        heap_unlock(heap);
        return hhi_error(HH_E_PINNED, "hh_free: handle %#llx is pinned (%u pins)", (unsigned long long)hd.id, pins);
    }
    bool guard_ok = guard_intact(heap, b);
    size_t off = blk_offset(heap, b), size = blk_size_live(b), usable = blk_usable(heap, b);
    void *p = blk_payload(b);
    hhi_slot_drop(&heap->handles, hh_handle_index(hd), (uint32_t)(hd.id >> HH_HANDLE_INDEX_BITS));   /* live: checked */
    heap_touch(heap, blk_prev_free(b) ? blk_offset(heap, blk_prev_free_block(b)) : off);
    used_sub(heap, off, size);
    heap->live_blocks--;
    if (heap->debug) memset(p, HH_FILL_FREED, usable);
    hh_track_free(heap, p, usable);
    region_release(heap, off, size, blk_prev_free(b));
    heap_event(heap, &(hh_heap_event){ .kind = HH_EV_FREE, .handle = hd });
    hh_assert_expensive(hhi_heap_is_valid(heap));
    heap_unlock(heap);
    if (!guard_ok)
        return hhi_error(HH_E_CORRUPT, "hh_free: guard bytes after handle %#llx (%zu usable bytes) were overwritten; block freed",
                         (unsigned long long)hd.id, usable);
    return HH_OK;
}

/* hh_free of a block the cache does not take (larger than HHI_CACHE_MAX_BLOCK,
   or the cache is full): coalesced now. Apart from hh_free so that the cache
   path keeps a small frame. hd names b (checked); lock held, released here. */
HH_NOINLINE static hh_status free_release(hh_heap *heap, hh_handle hd, hhi_block *b, uint64_t w) {
    hhi_slot_drop(&heap->handles, hh_handle_index(hd), (uint32_t)(hd.id >> HH_HANDLE_INDEX_BITS));
    size_t off = blk_offset(heap, b), size = word_size_live(w);
    bool prev_free = (w & BLK_PREV_FREE) != 0;
    heap_touch(heap, prev_free ? blk_offset(heap, blk_prev_free_block(b)) : off);
    used_sub(heap, off, size);
    heap->live_blocks--;
    hh_track_free(heap, blk_payload(b), blk_usable(heap, b));
    region_release_inline(heap, off, size, prev_free);
    if (hh_unlikely(heap->event_fn != NULL)) event_free(heap, hd);
    hh_assert_expensive(hhi_heap_is_valid(heap));
    heap_unlock(heap);
    return HH_OK;
}

/* Puts the block b (at offset off, header word w, `size` bytes, payload p)
   of a handle just dropped into the cache: it stays as it is to its
   neighbours (I13). The one body of hh_free's (free_body). */
static inline void cache_push(hh_heap *heap, hhi_block *b, size_t off, uint64_t w, size_t size, char *p) {
    heap_touch(heap, off);                           /* low_mark: no cached block lies below it (I13) */
    heap->live_blocks--;
    hh_track_free(heap, p, blk_usable(heap, b));
    b->word = (w & (BLK_SIZE_MASK | BLK_PREV_FREE)) | BLK_CACHED;
    hh_track_defined(&b->u, sizeof b->u);             /* the link lies in the freed payload */
    b->u.free.next = heap->cache[size / HHI_GRANULE];
    heap->cache[size / HHI_GRANULE] = off_granule(off);
    heap->cache_room -= size;
    heap->cache_count[size / HHI_GRANULE]++;
    if (off < heap->cache_low) heap->cache_low = off;
}

/* hh_free's body; `plain` as for heap_alloc, `no_hook` as for alloc_finish
   (the caller saw no event hook: no lock, so none can appear meanwhile). */
HH_INLINE hh_status free_body(hh_heap *heap, hh_handle hd, bool plain, bool no_hook) {
    if (!plain) heap_lock(heap);
    hhi_slots *t = &heap->handles;
    uint32_t idx;
    uint64_t *sp, sw;                                /* the slot word: tested here, not a payload against NULL */
    if (hh_unlikely(!hhi_slot_find(t, hd, &idx, &sp, &sw) || (!plain && heap->debug))) return free_generic(heap, hd);
    size_t off = hhi_slot_offset(sw);                /* from the slot: the block need not be kept for it */
    char *p = t->head.base + off;
    hhi_block *b = blk_from_payload(p);
    uint64_t w = b->word;
    if (hh_unlikely(!word_live_unpinned(w, idx))) return free_generic(heap, hd);
    size_t size = word_size_live(w);
    if (hh_unlikely(size > HHI_CACHE_MAX_BLOCK || size > heap->cache_room)) return free_release(heap, hd, b, w);
    hhi_slot_drop_at(t, sp, idx, (uint32_t)(hd.id >> HH_HANDLE_INDEX_BITS));
    cache_push(heap, b, off, w, size, p);
    if (!no_hook && hh_unlikely(heap->event_fn != NULL)) event_free(heap, hd);
    hh_assert_expensive(hhi_heap_is_valid(heap));
    if (!plain) heap_unlock(heap);
    return HH_OK;
}

/* hh_free past its fast path: a NULL heap, a thread-safe or debug heap, an
   event hook, a block the cache does not take, any bad handle. */
HH_NOINLINE static hh_status free_slow(hh_heap *heap, hh_handle hd) {
    if (hh_unlikely(heap == NULL)) return hhi_error(HH_E_INVALID_ARG, "hh_free: heap is NULL");
    if (heap->flags & (HH_HEAP_THREADSAFE | HH_HEAP_DEBUG)) return free_body(heap, hd, false, false);
    return free_body(heap, hd, true, false);
}

/* The fast path: a plain heap (no lock, no debug, no event hook) frees
   through the inlined body, whose every exit but the cache push is a tail
   call (no stack frame); everything else is free_slow. */
hh_status hh_free(hh_heap *heap, hh_handle hd) {
    if (hh_likely(heap != NULL && !(heap->flags & (HH_HEAP_THREADSAFE | HH_HEAP_DEBUG)) && heap->event_fn == NULL))
        return free_body(heap, hd, true, true);
    return free_slow(heap, hd);
}

/* ---------------------------------------------------------------------------
   Resize
--------------------------------------------------------------------------- */
/* Shrinks or grows b in place to minimal size nbs when possible; true on success. */
static bool resize_in_place(hh_heap *h, hhi_block *b, size_t nbs) {
    size_t off = blk_offset(h, b), cur = blk_size_live(b);
    hhi_block *n = blk_next(h, b);
    size_t avail = cur + ((n && blk_is_free(n)) ? blk_size_free(n) : 0);
    if (nbs > avail) return false;
    size_t old_usable = blk_usable(h, b);
    if (n && blk_is_free(n)) {                        /* take the free neighbour in whole, give back the rest */
        if (blk_offset(h, n) + blk_size_free(n) == h->managed)     /* growing into the top region */
            top_dirty(h, avail - nbs < HHI_MIN_BLOCK ? h->managed : off + nbs + 2 * HHI_MIN_BLOCK);
        fl_remove(h, n);
        hhi_bitmap_clear(&h->starts, off_granule(off + cur));
    }
    size_t rest = avail - nbs, size = nbs;
    unsigned slack = 0;
    if (rest < HHI_MIN_BLOCK) {
        size += rest;
        slack = (unsigned)(rest / HHI_GRANULE);
        rest = 0;
    }
    bool pinned = blk_pinned(b);
    b->word = live_word(size, blk_align(b), slack, blk_prev_free(b)) | (b->word & (BLK_SLOT_MASK | BLK_PINNED));
    if (size > cur) used_add(h, off + cur, size - cur);
    else if (size < cur) used_sub(h, off + size, cur - size);
    if (pinned) h->pinned_bytes = h->pinned_bytes - cur + size;
    size_t usable = blk_usable(h, b);
    if (usable > old_usable) {
        hh_track_undefined((char *)blk_payload(b) + old_usable, usable - old_usable);
        hh_track_move(h, blk_payload(b), blk_payload(b), usable);
        if (h->debug) memset((char *)blk_payload(b) + old_usable, HH_FILL_ALLOC, usable - old_usable);
    } else if (usable < old_usable) {
        hh_track_move(h, blk_payload(b), blk_payload(b), usable);
    }
    guard_fill(h, b);
    if (rest) {
        char *r = h->base + off + size;
        if (h->debug) {
            hh_track_undefined(r, rest);
            memset(r, HH_FILL_FREED, rest);
        }
        hh_track_noaccess(r, rest);
        hhi_bitmap_set(&h->starts, off_granule(off + size));
        region_release(h, off + size, rest, false);
    } else if ((n = blk_next(h, b)) != NULL) {
        n->word &= ~BLK_PREV_FREE;
    }
    return true;
}

/* Moves b to a new place of minimal size nbs (any free block, compacting if
   needed), copying min(old, new) usable bytes. NULL if there is no room. */
static hhi_block *resize_move(hh_heap *h, hhi_block *b, size_t nbs) {
    size_t align = blk_align(b);
    uint32_t slot = blk_slot(b);
    hhi_block *f = hhi_heap_find_fit(h, nbs, align);
    if (f == NULL && h->quar_count) {                 /* debug moves: the last step's old places go first */
        hhi_heap_quarantine_release(h);
        f = hhi_heap_find_fit(h, nbs, align);
    }
    if (f == NULL && !heap_cache_empty(h)) {              /* the cached holes may coalesce into room */
        hhi_heap_cache_flush(h);
        f = hhi_heap_find_fit(h, nbs, align);
    }
    if (f == NULL && h->managed < h->limit) f = heap_grow(h, nbs, align);   /* nothing moves */
    if (f == NULL && h->free_bytes >= nbs && !(h->flags & HH_HEAP_NO_AUTO_COMPACT)) {
        heap_touch(h, 0);
        h->compacting = true;
        f = h->compact_hook ? h->compact_hook(h, nbs, align)  /* may move b itself: find it again through its slot */
                            : hhi_heap_compact_for(h, nbs, align);
        h->compacting = false;
        if (f) h->compactions++;
        b = blk_from_payload(hhi_slot_ptr(&h->handles, slot));
    }
    if (f == NULL) return NULL;
    size_t boff = blk_offset(h, b), old_usable = blk_usable(h, b);
    void *op = blk_payload(b);
    hhi_block *nb = carve(h, f, nbs, align, 0, slot);     /* tag and pins are the slot's: they follow */
    size_t bfull = blk_size_live(b);                       /* after carve: it may have grown b's slack */
    used_add(h, blk_offset(h, nb), blk_size_live(nb));
    size_t usable = blk_usable(h, nb), keep = HH_MIN(usable, old_usable);
    char *np = blk_payload(nb);
    hh_track_undefined(np, usable);
    memcpy(np, op, keep);
    if (h->debug && usable > keep) memset(np + keep, HH_FILL_ALLOC, usable - keep);
    guard_fill(h, nb);
    vacate(h, op, np, old_usable + h->guard);
    bool prev_free = blk_prev_free(b);
    used_sub(h, boff, bfull);
    region_release(h, boff, bfull, prev_free);
    move_record(h, nb, slot, op, boff, usable, keep);
    return nb;
}

hh_status hh_resize(hh_heap *heap, hh_handle hd, size_t new_size) {
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_resize: heap is NULL");
    if (new_size == 0) return hhi_error(HH_E_INVALID_ARG, "hh_resize: size 0 (use hh_free)");
    if (new_size > HH_HEAP_MAX_ALLOC)
        return hhi_error(HH_E_INVALID_ARG, "hh_resize: %zu bytes exceed the largest block (%zu bytes, HH_HEAP_MAX_ALLOC)",
                         new_size, (size_t)HH_HEAP_MAX_ALLOC);
    if (new_size > heap->limit)
        return hhi_error(HH_E_NO_MEMORY, "hh_resize: %zu bytes exceed the heap's %zu managed bytes", new_size, heap->limit);
    hhi_block *b = block_locked(heap, hd, "hh_resize");
    if (b == NULL) return hh_last_error();
    size_t nbs = blk_min_size(heap, new_size);
    heap_touch(heap, blk_offset(heap, b));
    if (nbs > blk_size_live(b) && !heap_cache_empty(heap)) {   /* growing: a cached neighbour (past a free one) is room */
        hhi_block *n = blk_next(heap, b);
        if (n && blk_is_free(n)) n = blk_next(heap, n);
        if (n && blk_cached(n)) hhi_heap_cache_flush(heap);
    }
    if (resize_in_place(heap, b, nbs)) {
        heap_event(heap, &(hh_heap_event){ .kind = HH_EV_RESIZE, .handle = hd, .size = new_size });
        heap_unlock(heap);
        return HH_OK;
    }
    if (blk_pinned(b)) {
        heap_unlock(heap);
        return hhi_error(HH_E_PINNED, "hh_resize: handle %#llx is pinned and cannot grow in place to %zu bytes",
                         (unsigned long long)hd.id, new_size);
    }
    hhi_block *nb = resize_move(heap, b, nbs);
    if (nb == NULL) {
        size_t free_bytes = heap->free_bytes;
        heap_unlock(heap);
        return hhi_error(HH_E_NO_MEMORY, "hh_resize: no room for %zu bytes (%zu bytes free); block unchanged", new_size,
                         free_bytes);
    }
    heap_event(heap, &(hh_heap_event){ .kind = HH_EV_RESIZE, .handle = hd, .size = new_size });
    heap_unlock(heap);
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Queries, pins
--------------------------------------------------------------------------- */
/* hh_deref past its fast path: reports why h names nothing. */
HH_NOINLINE HH_COLD static void *deref_fail(const hh_heap *heap, hh_handle hd, const char *who) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "%s: heap is NULL", who);
        return NULL;
    }
    if (hh_is_null(hd)) return NULL;
    if (hhi_slots_check(&heap->handles, hd, who) == HH_OK)   /* cannot happen: the lookup failed */
        hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx does not name a live block", who, (unsigned long long)hd.id);
    return NULL;
}

/* The function behind the macro (heap.h): the same fast path, then the report.
   hh_deref_inline calls it for everything but a live handle. */
void *(hh_deref)(const hh_heap *heap, hh_handle hd) {
    if (hh_likely(heap != NULL)) {
        void *p = hhi_slot_lookup(&heap->handles, hd);
        if (hh_likely(p != NULL)) return p;
    }
    return deref_fail(heap, hd, "hh_deref");
}

/* Starts loading h's slot if h carries this heap's tag (no load otherwise). */
static inline void slot_prefetch(const hhi_slots *t, hh_handle h) {
    uint32_t idx = hhi_slot_index(t, h);
    if (idx < t->head.capacity) HH_PREFETCH(slot_word(t, idx));
}

/* Software pipelining over the handles: the slot of handle i + AHEAD is
   prefetched while handle i is resolved (from a slot that has arrived by
   then), and each payload found is prefetched for the caller. A loop of
   hh_deref keeps fewer handles in flight: each iteration's slot load waits
   behind the previous one's checks. */
size_t hh_deref_many(const hh_heap *heap, const hh_handle *hs, size_t n, void **out) {
    if (heap == NULL || (n > 0 && (hs == NULL || out == NULL))) {
        if (out != NULL)
            for (size_t i = 0; i < n; i++) out[i] = NULL;
        hhi_error(HH_E_INVALID_ARG, "hh_deref_many: %s is NULL", heap == NULL ? "heap" : hs == NULL ? "hs" : "out");
        return 0;
    }
    enum { AHEAD = 16 };   /* about the misses a core keeps in flight */
    const hhi_slots *t = &heap->handles;
    for (size_t i = 0; i < n && i < AHEAD; i++) slot_prefetch(t, hs[i]);
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + AHEAD < n) slot_prefetch(t, hs[i + AHEAD]);
        void *p = hhi_slot_lookup(t, hs[i]);
        if (hh_likely(p != NULL)) {
            HH_PREFETCH(p);
            live++;
        } else {
            deref_fail(heap, hs[i], "hh_deref_many");
        }
        out[i] = p;
    }
    return live;
}

size_t hh_size(const hh_heap *heap, hh_handle hd) {
    hhi_block *b = block_locked(heap, hd, "hh_size");
    if (b == NULL) return 0;
    size_t n = blk_usable(heap, b);
    heap_unlock(heap);
    return n;
}

uint32_t hh_tag(const hh_heap *heap, hh_handle hd) {
    hhi_block *b = block_locked(heap, hd, "hh_tag");
    if (b == NULL) return 0;
    uint32_t t = blk_tag(heap, b);
    heap_unlock(heap);
    return t;
}

void *hh_pin(hh_heap *heap, hh_handle hd) {
    hhi_block *b = block_locked(heap, hd, "hh_pin");
    if (b == NULL) return NULL;
    if (hh_unlikely(heap->pins == NULL) && (heap->pins = side_array_make(heap, sizeof *heap->pins, "hh_pin", "pin")) == NULL) {
        heap_unlock(heap);
        return NULL;
    }
    unsigned pins = blk_pins(heap, b);
    if (pins == HHI_MAX_PINS) {
        heap_unlock(heap);
        hhi_error(HH_E_INVALID_ARG, "hh_pin: handle %#llx already has the maximum of %u pins", (unsigned long long)hd.id,
                  (unsigned)HHI_MAX_PINS);
        return NULL;
    }
    heap->pins[blk_slot(b)] = (uint8_t)(pins + 1);
    if (pins == 0) {
        b->word |= BLK_PINNED;
        heap->pinned_blocks++;
        heap->pinned_bytes += blk_size_live(b);
    }
    void *p = blk_payload(b);
    heap_event(heap, &(hh_heap_event){ .kind = HH_EV_PIN, .handle = hd });
    heap_unlock(heap);
    return p;
}

hh_status hh_unpin(hh_heap *heap, hh_handle hd) {
    hhi_block *b = block_locked(heap, hd, "hh_unpin");
    if (b == NULL) return hh_last_error();
    unsigned pins = blk_pins(heap, b);
    if (pins == 0) {
        heap_unlock(heap);
        return hhi_error(HH_E_INVALID_ARG, "hh_unpin: handle %#llx is not pinned", (unsigned long long)hd.id);
    }
    heap->pins[blk_slot(b)] = (uint8_t)(pins - 1);   /* back to 0 with the last pin: I6 */
    heap_touch(heap, blk_prev_free(b) ? blk_offset(heap, blk_prev_free_block(b)) : blk_offset(heap, b));
    if (pins == 1) {
        b->word &= ~BLK_PINNED;
        heap->pinned_blocks--;
        heap->pinned_bytes -= blk_size_live(b);
    }
    heap_event(heap, &(hh_heap_event){ .kind = HH_EV_UNPIN, .handle = hd });
    heap_unlock(heap);
    return HH_OK;
}

void hh_heap_set_event_hook(hh_heap *heap, hh_heap_event_fn fn, void *user) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_set_event_hook: heap is NULL");
        return;
    }
    heap_lock(heap);
    /* A hook starts from the heap's canonical state: cached blocks (I13) would
       steer the next allocations to places a replay on a fresh heap, which
       starts with none, does not know. */
    if (fn) hhi_heap_cache_flush(heap);
    heap->event_fn = fn;
    heap->event_user = user;
    heap_unlock(heap);
}

/* The base never moves (the range is reserved at create time): no lock. */
void *hh_heap_base(const hh_heap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_base: heap is NULL");
        return NULL;
    }
    return heap->base;
}

/* Under the lock, as every getter: a growable heap's range grows. */
size_t hh_heap_managed_bytes(const hh_heap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_managed_bytes: heap is NULL");
        return 0;
    }
    heap_lock(heap);
    size_t n = heap->managed;
    heap_unlock(heap);
    return n;
}

size_t hh_heap_overhead_bytes(const hh_heap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_heap_overhead_bytes: heap is NULL");
        return 0;
    }
    heap_lock(heap);
    size_t slot_meta = sizeof(uint64_t) + (heap->pins ? sizeof *heap->pins : 0) + (heap->tags ? sizeof *heap->tags : 0);
    size_t n = sizeof *heap + heap->starts.bytes + heap->frees.bytes + free_span_bytes(heap->limit) +
               (size_t)heap->handles.hwm * slot_meta +
               heap->journal.cap * sizeof(hh_move_record) + (size_t)heap->region_count * sizeof(hhi_region);
    heap_unlock(heap);
    return n;
}
