/* heap_internal.h -- the relocatable heap's data structures and mechanism.
 *
 * Model
 *   The managed range [base, base + managed) is tiled by blocks in address order.
 *   Every block starts with an 8-byte header; block sizes and offsets are
 *   multiples of 16 (a granule). base + 8 is 4096-aligned, so the payload of a
 *   block at offset o (at base + o + 8) is 16-byte aligned, and satisfies any
 *   alignment a <= HH_HEAP_MAX_ALIGN iff o % a == 0: a move keeps an alignment
 *   by landing on an offset that is a multiple of it.
 *
 *   live block  : [hdr][payload ... ][guard (HH_HEAP_DEBUG)]
 *   cached block: [hdr][next | -][unused ...]            (free-block cache, I13)
 *   free block  : [hdr][next | prev][unused ... ][footer: size]
 *
 *   hdr (one 64-bit word) of a live, cached or quarantine block:
 *             bits 0..4   flags (BLK_FREE, BLK_PREV_FREE, BLK_QUARANTINE,
 *                         BLK_CACHED, BLK_PINNED)
 *             bits 5..8   log2(alignment) - 4
 *             bits 9..12  slack granules: bytes beyond the block's minimal size
 *                         (absorbed split remainders); never visible to the user
 *             bits 13..39 block size in granules (27 bits: at most
 *                         HHI_MAX_LIVE_BLOCK bytes; hh_alloc refuses payloads
 *                         above HH_HEAP_MAX_ALLOC so slack always fits)
 *             bits 40..63 handle slot index (24 bits; handle indices are < 2^24)
 *   hdr of a free block: BLK_FREE and the size in granules in bits 13..63 (a
 *   free block has no slot, so its size may be as large as the range).
 *   Either way the size in bytes is (hdr >> 9) masked (blk_size).
 *   The rare per-block fields live beside the table of handle slots, indexed
 *   by slot and created on first use: the pin count (pins[], once anything is
 *   pinned; BLK_PINNED in the header says a block has pins, so the hot paths
 *   never read the array) and the user tag (tags[], once a non-zero tag is
 *   given). Slots do not change when blocks move, so neither do these.
 *   A free block keeps its free-list links (granule offsets) in the 8 bytes
 *   after its header and its size in its last 8 bytes, so the block after it
 *   can find it (O(1) coalescing; TLSF's boundary tag, folded into the free
 *   block itself); a cached block its cache link in the same place.
 *
 *   Free blocks sit in TLSF segregated lists (first level: power of two,
 *   second level: 16 linear steps) with bitmaps, so allocation never searches.
 *   A hierarchical bitmap over granules marks block starts; a coarser index
 *   over spans of 64 granules (1 KiB, one word of the start bitmap) counts the
 *   free-block starts in each span and marks the spans that have any. The
 *   lowest hole, the next hole and the block before a given one take
 *   O(log64 n) for the defrag service: the span index finds the span, the
 *   span's start-bitmap word and the headers of its blocks find the block --
 *   up to 32 headers of a span (64 granules of 32-byte blocks, at most 16 of
 *   them free: I2 and the 32-byte minimum), read when the span's holes lie
 *   below the place asked about, before the next span's first hole. Per
 *   granule that is 1 + 9/64 bits instead of two.
 *
 * Invariants (numbered; hh_heap_check verifies each and names it on failure)
 *   I1  blocks tile [0, managed): each size is a multiple of 16, >= HHI_MIN_BLOCK,
 *       and the sizes add up to managed.
 *   I2  no two free blocks are adjacent (free always coalesces).
 *   I3  BLK_PREV_FREE is set exactly on blocks whose predecessor is free; a
 *       free block's footer equals its size.
 *   I4  every free block is in exactly the TLSF list of its size, the lists are
 *       well linked, and the two-level bitmaps mark exactly the non-empty lists.
 *   I5  the start bitmap marks exactly the block starts; free_span[s] is the
 *       number of free blocks starting in span s (granules [64 s, 64 s + 64)),
 *       and the span bitmap marks exactly the spans where it is non-zero; each
 *       upper level marks exactly the non-zero words below.
 *   I6  a live block's slot is live and points at its payload; the payload is
 *       aligned to the block's alignment; slack <= size - minimal; its size is
 *       at most HHI_MAX_LIVE_BLOCK. BLK_PINNED is set exactly on the live
 *       blocks whose pins[] count is non-zero (and on quarantine blocks, I12);
 *       pins[] is zero for every slot that names no live block (tags[] of
 *       such a slot is stale: every allocation writes its slot's tag).
 *   I7  the slot table lies HH_HEAP_SLOT_TABLE_BYTES below the heap object
 *       (where the inline hh_deref looks); its live count equals the number of live blocks; each
 *       live block's slot (below hwm) has the heap's tag and the block's
 *       payload granule (I6 names it).
 *   I8  the counters (used/free bytes, live/free/pinned blocks, sum of squares)
 *       equal what a walk finds.
 *   I9  (HH_HEAP_DEBUG) every live block's guard bytes are intact.
 *   I10 the relocation journal's records lie inside the managed range.
 *   I11 regions[r].used is the number of bytes of live blocks that lie inside
 *       region r ([r << region_shift, (r + 1) << region_shift)); summed, used_bytes.
 *   I12 (HH_HEAP_DEBUG_MOVES) quarantine blocks -- BLK_QUARANTINE, slot 0,
 *       BLK_PINNED so that nothing moves them, slack allowed (a sliver of a
 *       hole below may join them) -- are exactly the ones
 *       listed in quar[]; they count as used bytes (I8, I11), not as live or
 *       pinned blocks, and no handle names them.
 *   I13 cached blocks -- BLK_CACHED, no pins, slack, alignment or slot bits, a size
 *       of at most HHI_CACHE_MAX_BLOCK -- are exactly the blocks of the cache
 *       lists, each in the list of its size; their bytes are
 *       cache_limit - cache_room (so at most cache_limit), the blocks of
 *       each list cache_count[]; low_mark and cache_low are at or below every
 *       one of them. To their neighbours
 *       (I2, I3) and the bitmaps (I5: start bit, no free count) they are
 *       occupied blocks; they count as used bytes (I8, I11), not as live
 *       blocks, and no handle names them.
 *
 * Free-block cache: hh_free puts a freed block of at most HHI_CACHE_MAX_BLOCK
 * bytes (not on a debug heap) at the head of a LIFO list of its exact size
 * instead of coalescing it, while the cache holds at most cache_limit bytes;
 * an allocation of that block size (alignment 16) takes the newest one back,
 * and one of a size whose list is empty takes, before it searches the free
 * lists, the newest of a size at most HHI_CACHE_NEAR_GRANULES larger, if any,
 * its extra granules as slack.
 * Neither touches the TLSF lists, bitmaps, footers, neighbours or the region
 * summary: that is what makes the churn of game objects cheap (the same sizes
 * come and go every frame). A cached block is a hole to everyone else, so
 * hhi_heap_cache_flush frees the whole cache for real before anything acts on
 * holes: at the start of every defrag step (hhi_heap_journal_reset), before
 * an allocation carves the top region while the cache holds an eighth of the
 * used bytes or more (holes first: the highest live byte is the footprint;
 * below that the cache is kept, see cache_top_flush_at in heap.c), before it
 * or a resize grows or compacts the heap, and when a resize could grow into a
 * cached neighbour. The defrag service and allocation-time
 * compaction therefore never meet a cached block. The observers (stats, walk,
 * defrag metrics) change nothing: they count each cached block as a free
 * block of its own (unmerged), so what they report -- and a trace's replay,
 * which must reproduce every placement -- never depends on when one looked.
 *
 * Debug moves (HH_HEAP_DEBUG_MOVES): while a defrag step moves blocks (not
 * during allocation-time compaction or a resize: h->compacting), a moved
 * block's old place becomes a quarantine block instead of free space, so no
 * later move or allocation can land there and its bytes (HH_FILL_MOVED,
 * no-access to memcheck/ASan) stay dead; a slide that would overlap the
 * block's own old place is refused (hhi_heap_can_slide) and the one-memmove
 * sweep is off. hhi_heap_journal_reset (the start of the next step) frees the
 * quarantine; an allocation that finds no room frees it first.
 *
 * Returning memory (own mapping only): the whole pages of the top free region
 * above a retained prefix are given back with MADV_DONTNEED by
 * hhi_heap_decommit_top (the defrag service decides when). [dc_lo, managed)
 * is the page range that is not resident: [dc_lo, dc_hi) was given back and
 * [dc_hi, managed) was never written (but for the top region's footer page).
 * Only carving from the top region writes into it (top_dirty moves dc_lo, and
 * dc_hi with it, up past what it wrote), so a decommit gives back the highest
 * pages below dc_lo -- resident ones, the pages the top region once held --
 * and `decommitted` (dc_hi - dc_lo) counts resident bytes given back. The same
 * pages are never given back twice while untouched, and the pages of the top
 * region's header and footer are never given back.
 *
 * Occupancy summary (heap_region.c): the range is cut into at most
 * HHI_REGION_MAX regions of a power-of-two size (at least 4 KiB); each keeps
 * the live bytes inside it (I11) and the epoch of the last allocation that
 * started in it. Every change of a live block goes through used_add/used_sub,
 * which keep used_bytes and the regions together (one add when the block lies
 * in one region). The defrag service reads them to find the sparse, quiet
 * ranges worth evacuating without walking blocks; the heap never reads them.
 *
 * Mechanism for the defrag service (policy in src/defrag): slide_down and
 * move_into move one block; sweep_compact slides every run of blocks in one
 * pass (hh_defrag_full); absorb_hole turns a sliver hole into slack; the
 * `mutations` counter and `low_mark` tell the service's cursor what changed;
 * `compact_hook` lets allocation-time compaction use the service's policy.
 */
#ifndef HH_HEAP_INTERNAL_H
#define HH_HEAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hheap/heap.h"
/* Include exception: the heap embeds a handle table and inlines its private
   issue/release fast paths (handles_internal.h), as hh_handle_alloc does. */
#include "../handles/handles_internal.h"
#include "../common/hh_assert.h"
#include "../common/hh_compiler.h"
#include "../common/hh_config.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   Layout constants
--------------------------------------------------------------------------- */
enum {
    HHI_GRANULE      = 16,
    HHI_HDR          = 8,                  /* header bytes */
    HHI_MIN_BLOCK    = 32,                 /* a free block: header, links, footer (8 each), granule-rounded */
    HHI_GUARD        = 16,                 /* guard bytes after the payload in HH_HEAP_DEBUG */
    HHI_BASE_ALIGN   = 4096,               /* base + HHI_HDR is aligned to this */
    HHI_MAX_PINS     = 255,                /* pins[] holds a byte per slot */
    HHI_MAX_SLACK    = 15,                 /* granules */
};
#define HHI_NONE UINT32_MAX                /* "no block" in granule links */
enum { HHI_FREE_HEAD = HHI_HDR + 8 };      /* a free block's header and links: what decommit keeps of the top region */
_Static_assert((int)HHI_HDR == (int)HH_HEAP_HEADER_BYTES && (int)HHI_GRANULE == (int)HH_HEAP_GRANULE, "public layout constants");
_Static_assert((int)HHI_BASE_ALIGN == (int)HH_HEAP_MAX_ALIGN, "offset 0 must satisfy every alignment");
_Static_assert(HHI_MIN_BLOCK >= HHI_HDR + 8 + 8, "a free block must hold its links and its footer");
_Static_assert(HHI_MIN_BLOCK % HHI_GRANULE == 0 && HHI_HDR + HHI_GRANULE <= HHI_MIN_BLOCK, "granule-sized blocks");

/* The managed range's limit: a live slot's 32-bit offset in 8-byte units
   (heap.h: HH_HEAP_MAX_CAPACITY); granule links (32-bit) reach further. */
enum { HHI_SLOT_UNIT_SHIFT = HH_HEAP_SLOT_UNIT_SHIFT };
#define HHI_MAX_MANAGED ((size_t)HH_HEAP_MAX_CAPACITY)
_Static_assert(HHI_MAX_MANAGED <= (size_t)HHI_NONE * HHI_GRANULE, "granule links reach the whole range");


/* Header word fields (see the model above). */
#define BLK_FREE       ((uint64_t)1)
#define BLK_PREV_FREE  ((uint64_t)2)
#define BLK_QUARANTINE ((uint64_t)4)   /* HH_HEAP_DEBUG_MOVES: a moved block's old place, held until the next step */
#define BLK_CACHED     ((uint64_t)8)   /* a freed block held in the free-block cache (I13); u.free.next links it */
#define BLK_PINNED     ((uint64_t)16)  /* pins[slot] > 0 (or a quarantine block): the block never moves */
#define BLK_FLAGS      ((uint64_t)0x1F)
#define BLK_ALIGN_SHIFT 5
#define BLK_SLACK_SHIFT 9
#define BLK_SIZE_SHIFT  9              /* size in bytes << 9 = granules at bit 13 */
#define BLK_SLOT_SHIFT  40
#define BLK_ALIGN_MASK ((uint64_t)0xF << BLK_ALIGN_SHIFT)
#define BLK_SLACK_MASK ((uint64_t)0xF << BLK_SLACK_SHIFT)
#define BLK_SIZE_MASK  ((uint64_t)0x7FFFFFF << 13)                 /* a live block's size field */
#define BLK_SLOT_MASK  ((uint64_t)0xFFFFFF << BLK_SLOT_SHIFT)
#define HHI_MAX_LIVE_BLOCK ((size_t)0x7FFFFFF0)                     /* 27 bits of granules */
_Static_assert(HH_HEAP_MAX_ALLOC + HHI_HDR + 2 * HHI_GUARD + (HHI_MAX_SLACK + 1) * HHI_GRANULE <= HHI_MAX_LIVE_BLOCK,
               "a largest request, rounded, with guard and all slack, fits the size field");
_Static_assert((BLK_FLAGS | BLK_ALIGN_MASK | BLK_SLACK_MASK | BLK_SIZE_MASK | BLK_SLOT_MASK) == UINT64_MAX &&
               (BLK_SIZE_MASK & BLK_SLOT_MASK) == 0 && (BLK_SLACK_MASK & BLK_SIZE_MASK) == 0, "header fields tile the word");

/* The header; u overlays the first 8 bytes after it, which hold the links of
   a free or cached block (always >= HHI_MIN_BLOCK) and are payload in a live
   one -- only free and cached blocks may touch u. */
typedef struct hhi_block {
    uint64_t word;                 /* flags | align | slack | size | slot (see above) */
    union {
        struct { uint32_t next, prev; } free;  /* free-list links, granule offsets (HHI_NONE: end) */
    } u;
} hhi_block;
_Static_assert(offsetof(hhi_block, u) == HHI_HDR, "links right after the 8-byte header");

/* ---------------------------------------------------------------------------
   TLSF free lists
--------------------------------------------------------------------------- */
enum {
    HHI_SL_LOG2   = 4,                                /* 16 second-level lists per power of two */
    HHI_SL_COUNT  = 1 << HHI_SL_LOG2,
    HHI_FL_SHIFT  = HHI_SL_LOG2 + 4,                  /* sizes < 256 use linear 16-byte classes */
    HHI_FL_MAX    = 36,                               /* up to 64 GiB blocks */
    HHI_FL_COUNT  = HHI_FL_MAX - HHI_FL_SHIFT + 1,
    HHI_SMALL_BLOCK = 1 << HHI_FL_SHIFT,
};
_Static_assert(HHI_FL_COUNT <= 32, "first-level bitmap is 32 bits");

/* Free-block cache (I13): whole block sizes up to HHI_CACHE_MAX_BLOCK (a
   1 KiB payload and its header), one LIFO list per 16-byte size. */
enum {
    HHI_CACHE_MAX_BLOCK = (1024 + HHI_HDR + HHI_GRANULE - 1) & ~(HHI_GRANULE - 1),
    HHI_CACHE_CLASSES   = HHI_CACHE_MAX_BLOCK / HHI_GRANULE + 1,   /* index: block size / 16 */
    HHI_CACHE_MIN_LIMIT = 64 << 10,                                /* bytes a cache may hold at least */
    HHI_CACHE_LIMIT_SHIFT = 4,                                     /* ... or 1/16 of the managed bytes */
    HHI_CACHE_TOP_USED_SHIFT = 3,                                  /* carving the top flushes the cache from 1/8 of */
    HHI_CACHE_TOP_MIN     = 64 << 10,                              /* the used bytes (at least this, at most half */
                                                                   /* the limit: cache_top_flush_at in heap.c) */
    HHI_CACHE_NEAR_GRANULES = 2,                                   /* a miss takes a cached block up to this much */
                                                                   /* larger first (cache_near in heap.c) */
};
_Static_assert(HHI_SL_COUNT <= 32, "second-level bitmaps are 32 bits");

typedef struct hhi_freelists {
    uint32_t fl_bitmap;                              /* bit f: some list in row f is non-empty */
    uint32_t sl_bitmap[HHI_FL_COUNT];                /* bit s of row f: list (f,s) non-empty */
    uint32_t head[HHI_FL_COUNT][HHI_SL_COUNT];       /* granule offset of the first block, HHI_NONE */
} hhi_freelists;

/* ---------------------------------------------------------------------------
   Hierarchical bitmap over granules: level 0 has one bit per granule, level
   k+1 one bit per non-zero word of level k; the top level is one word.
--------------------------------------------------------------------------- */
enum { HHI_BM_MAX_LEVELS = 6 };
typedef struct hhi_bitmap {
    uint64_t *level[HHI_BM_MAX_LEVELS];   /* level[0] = leaf bits */
    size_t    words[HHI_BM_MAX_LEVELS];   /* words per level */
    uint32_t  nlevels;
    size_t    nbits;                      /* leaf bits */
    size_t    bytes;                      /* total bytes of all levels (one allocation) */
    bool      mapped;                     /* levels in their own mapping (hhi_bitmap_init_mapped) */
} hhi_bitmap;
#define HHI_BM_NONE SIZE_MAX

HH_INTERNAL bool   hhi_bitmap_init(hhi_bitmap *bm, size_t nbits);
/* As hhi_bitmap_init, its levels in zero pages of their own mapping (large,
   mostly empty bitmaps of a growable heap: untouched pages cost nothing). */
HH_INTERNAL bool   hhi_bitmap_init_mapped(hhi_bitmap *bm, size_t nbits);
HH_INTERNAL void   hhi_bitmap_fini(hhi_bitmap *bm);
HH_INTERNAL void   hhi_bitmap_set(hhi_bitmap *bm, size_t i);
HH_INTERNAL void   hhi_bitmap_clear(hhi_bitmap *bm, size_t i);
HH_INTERNAL bool   hhi_bitmap_test(const hhi_bitmap *bm, size_t i);
/* Inline fast paths of set/clear for bulk loops: only level 0 changes unless
   its word goes from or to zero. */
static inline void hhi_bitmap_set_fast(hhi_bitmap *bm, size_t i) {
    uint64_t *w = &bm->level[0][i / 64];
    if (*w) *w |= (uint64_t)1 << (i % 64);
    else hhi_bitmap_set(bm, i);
}
static inline void hhi_bitmap_clear_fast(hhi_bitmap *bm, size_t i) {
    uint64_t *w = &bm->level[0][i / 64], nw = *w & ~((uint64_t)1 << (i % 64));
    if (nw) *w = nw;
    else hhi_bitmap_clear(bm, i);
}
/* true if every upper-level bit says exactly whether its word below is non-zero (checker, I5). */
HH_INTERNAL bool   hhi_bitmap_consistent(const hhi_bitmap *bm);
/* Smallest set index >= i, or HHI_BM_NONE. */
HH_INTERNAL size_t hhi_bitmap_next(const hhi_bitmap *bm, size_t i);
/* Largest set index <= i, or HHI_BM_NONE. */
HH_INTERNAL size_t hhi_bitmap_prev(const hhi_bitmap *bm, size_t i);

/* ---------------------------------------------------------------------------
   The heap's handle slots (heap_slots.c): 8 bytes each, one atomic word
     bits 63..32  live: payload offset from base in 8-byte units
                  (HHI_SLOT_UNIT_SHIFT);
                  free: the next slot of the free FIFO (0: end)
     bits 31..0   key: generation (24 bits) << 8 | tag; the heap's tag (1..255)
                  on a live slot, 0 on every other (free, retired, never used,
                  the sentinel slot 0)
   A handle is idx | key << 24 (hheap/handles.h's layout with a generation
   below 2^24), so hh_deref takes (uint32_t)id - tag << 24 as the index --
   below capacity only when the handle's tag is the heap's, never 0 -- and
   compares id >> 24 with the word's low half (one load, one compare): no
   handle, forged or not, matches a slot that is not live (tag 0) or never
   used (reads 0: zero pages), so lookups need only test the reserved
   capacity. hwm is the first never-used slot.
   The table and the heap object share one reservation (hhi_slots_map):
   HHI_SLOT_SPAN slots, then the object, so the table ends where the object
   begins. Every index a handle can carry has a readable slot -- committed up
   to `committed`, zero pages above -- so the inline hh_deref (heap.h) takes
   the table from the heap pointer, loads the slot of the handle's index
   unclamped and reads only `base` of the heap (each field it reads is a load
   per handle, reloaded after every possible call of the slow path).
   Policy as the generic table's (hheap/handles.h): a freed slot joins a FIFO
   and rests while at most min_free slots wait; its generation moves up by one
   (mod 2^24). A table's slots start at first_gen: one past the furthest
   generation the last heap of its tag issued (hhi_slots_fini leaves it with
   the tag; a slot of that heap that went all the way round is not counted),
   or for the tag's first heap epoch << 16 | 1. A slot whose
   generation would come back to first_gen -- it has been issued 2^24 times
   -- retires: no generation of a slot is issued twice.
--------------------------------------------------------------------------- */
enum { HHI_GEN_BITS = 24, HHI_GEN_EPOCH_SHIFT = 16 };
/* Slots reserved per heap: one for every index a handle can carry (2^24, so
   128 MiB of address space; only [0, committed) is writable and charged), so
   the inline hh_deref needs no range test (heap.h). Huge pages: the
   reservation starts on a 2 MiB boundary. */
#define HHI_SLOT_SPAN ((uint32_t)HH_HANDLE_INDEX_MASK + 1u)
enum { HHI_SLOT_HUGE_BYTES = 2u << 20 };
#define HHI_GEN_MASK (((uint32_t)1 << HHI_GEN_BITS) - 1)

typedef struct hhi_slots {
    hh_heap_head head;            /* MUST stay first: slots, base, capacity (max_handles + 1: slot 0 included) */
    uint32_t hwm;                 /* first never-used slot (1 at start) */
    uint32_t committed;           /* slots [0, committed) are writable (growable: committed as issued) */
    uint32_t free_head, free_tail;/* FIFO of released slots: oldest ... newest (0: empty) */
    uint32_t free_count, min_free;
    uint32_t live_count;
    uint32_t first_gen;           /* generation of a slot's first handle */
    uint32_t first_key;           /* first_gen << 8: a dead key that comes back to it retires the slot */
    uint8_t  tag;                 /* 1..255, held by no other live table (hhi_handle_tag_acquire) */
} hhi_slots;

/* Loaded from head.slots, not computed from t's address (the table lies
   HH_HEAP_SLOT_TABLE_BYTES below): computed, gcc rebuilt the address at each
   use and hh_free took two instructions more and a stack frame. */
static inline uint64_t *slot_word(const hhi_slots *t, uint32_t idx) { return &t->head.slots[idx]; }
/* The offset of the block a live slot word w names (its payload's from
   head.base is the same), and that payload. */
static inline size_t hhi_slot_offset(uint64_t w) { return (size_t)(w >> 32) << HHI_SLOT_UNIT_SHIFT; }
/* The high half of a live slot word for the payload at p. */
static inline uint64_t hhi_slot_where(const hhi_slots *t, const void *p) {
    return (uint64_t)((size_t)((const char *)p - t->head.base) >> HHI_SLOT_UNIT_SHIFT) << 32;
}
static inline char *hhi_slot_payload(const hhi_slots *t, uint64_t w) { return t->head.base + hhi_slot_offset(w); }
/* The handle issued in live slot idx, the payload it names. */
static inline hh_handle hhi_slot_handle(const hhi_slots *t, uint32_t idx) {
    return hh_handle_from_key(idx, (uint32_t)*slot_word(t, idx));
}
static inline void *hhi_slot_ptr(const hhi_slots *t, uint32_t idx) {
    return hhi_slot_payload(t, *slot_word(t, idx));
}
/* h's slot index: below capacity only if h carries this heap's tag (heap.h). */
static inline uint32_t hhi_slot_index(const hhi_slots *t, hh_handle h) { return (uint32_t)h.id - t->head.tag_bias; }
/* true if h is live: its slot index in *idx, the slot in *sp and its word in
   *w (lock-free). The index is the tag-biased one (hhi_slot_index), which
   equals hh_handle_index(h) whenever this returns true: a caller that has
   it need not mask h again (in hh_free that cost two instructions, and the
   slot's address a third). */
static inline bool hhi_slot_find(const hhi_slots *t, hh_handle h, uint32_t *idx, uint64_t **sp, uint64_t *w) {
    *idx = hhi_slot_index(t, h);
    if (*idx >= t->head.capacity) return false;
    *sp = slot_word(t, *idx);
    *w = HH_SLOT_LOAD(*sp);
    return (h.id >> HH_HANDLE_INDEX_BITS) == (uint32_t)*w;
}
/* The payload behind h if h is live, else NULL (nothing reported; lock-free). */
static inline void *hhi_slot_lookup(const hhi_slots *t, hh_handle h) {
    uint32_t idx;
    uint64_t *sp, w;
    return hhi_slot_find(t, h, &idx, &sp, &w) ? hhi_slot_payload(t, w) : NULL;
}
HH_INTERNAL bool hhi_slots_commit_more(hhi_slots *t);
/* The oldest slot of the FIFO (free_count > 0). */
static inline uint32_t hhi_slot_fifo_take(hhi_slots *t) {
    uint32_t idx = t->free_head;
    t->free_head = (uint32_t)(*slot_word(t, idx) >> 32);
    if (--t->free_count == 0) t->free_tail = 0;
    return idx;
}
/* A slot for a new handle (still free until hhi_slot_issue): a rested one,
   else a never-used one (committing more of a growable table), else any free
   one; 0 when none is left. */
static inline uint32_t hhi_slot_take(hhi_slots *t) {
    if (t->free_count > t->min_free) return hhi_slot_fifo_take(t);
    if (HH_UNLIKELY(t->hwm >= t->committed) && !hhi_slots_commit_more(t)) return t->free_count > 0 ? hhi_slot_fifo_take(t) : 0;
    uint32_t idx = t->hwm;
    HH_SLOT_STORE(slot_word(t, idx), (uint64_t)(t->first_gen << 8));   /* free (tag 0), first generation */
    HH_SLOT_STORE(&t->hwm, idx + 1);             /* read without the lock by hhi_slots_check */
    return idx;
}
/* Gives back a slot taken and not issued (the allocation failed), so that the
   table is as before the take: a never-used one below bound again (it is the
   last one and has the first generation, which a released slot never has), a
   FIFO one at the FIFO's head. */
static inline void hhi_slot_untake(hhi_slots *t, uint32_t idx) {
    uint64_t *w = slot_word(t, idx);
    if (idx + 1 == t->hwm && (((uint32_t)*w >> 8) & HHI_GEN_MASK) == t->first_gen) {
        HH_SLOT_STORE(w, (uint64_t)0);
        HH_SLOT_STORE(&t->hwm, idx);
        return;
    }
    HH_SLOT_STORE(w, ((uint64_t)t->free_head << 32) | (uint32_t)*w);
    t->free_head = idx;
    if (t->free_count++ == 0) t->free_tail = idx;
}
/* Issues taken slot idx for the payload at p: its handle. */
static inline hh_handle hhi_slot_issue(hhi_slots *t, uint32_t idx, const void *p) {
    uint64_t *w = slot_word(t, idx);
    uint32_t key = (uint32_t)*w | t->tag;
    HH_SLOT_STORE_REL(w, hhi_slot_where(t, p) | key);
    t->live_count++;
    return hh_handle_from_key(idx, key);
}
/* Re-points live slot idx at the payload p (a moved block). */
static inline void hhi_slot_repoint(hhi_slots *t, uint32_t idx, const void *p) {
    uint64_t *w = slot_word(t, idx);
    HH_SLOT_STORE(w, hhi_slot_where(t, p) | (uint32_t)*w);
}
/* Releases live slot idx (its word at w) whose key is `key`: the next generation, tag 0
   (dead), at the FIFO's tail; or retired (tag 0, never queued) when that
   generation would be the first again. */
static inline void hhi_slot_drop_at(hhi_slots *t, uint64_t *w, uint32_t idx, uint32_t key) {
    uint32_t nk = (key & ~(uint32_t)0xFF) + ((uint32_t)1 << 8);   /* generation + 1 mod 2^24, tag 0 */
    t->live_count--;
    if (HH_UNLIKELY(nk == t->first_key)) {
        HH_SLOT_STORE_REL(w, (uint64_t)(key & ~(uint32_t)0xFF));
        return;
    }
    HH_SLOT_STORE_REL(w, (uint64_t)nk);           /* dead first; the end of the FIFO */
    if (t->free_tail) {
        uint64_t *tw = slot_word(t, t->free_tail);
        HH_SLOT_STORE(tw, ((uint64_t)idx << 32) | (uint32_t)*tw);
    } else {
        t->free_head = idx;
    }
    t->free_tail = idx;
    t->free_count++;
}
/* The same by index. */
static inline void hhi_slot_drop(hhi_slots *t, uint32_t idx, uint32_t key) { hhi_slot_drop_at(t, slot_word(t, idx), idx, key); }
/* One reservation for a heap's slots and the heap object itself:
   [HHI_SLOT_SPAN slots][obj_bytes, page-rounded]. The slots of every index a
   handle can carry are readable (zero pages); [0, *committed) of them and the
   object are writable: all max_handles + 1 at once, or growable, the first
   HH_HANDLE_COMMIT_SLOTS. Returns the object (zeroed; the table lies just
   below it, which is what lets hh_deref_inline find it without a load); NULL
   if the OS refuses (nothing reported). */
HH_INTERNAL void     *hhi_slots_map(uint32_t max_handles, bool growable, bool huge, size_t obj_bytes,
                                    uint32_t *committed);
/* Bytes of that reservation; and its unmapping, given the object. */
HH_INTERNAL size_t    hhi_slots_reservation(size_t obj_bytes);
HH_INTERNAL void      hhi_slots_unmap(void *obj, size_t obj_bytes);
/* Sets up the slots of the heap object t heads (made by hhi_slots_map) for
   the range at base and takes a table tag; HH_E_NO_MEMORY reported if no tag is free. */
HH_INTERNAL hh_status hhi_slots_init(hhi_slots *t, char *base, uint32_t max_handles, uint32_t committed);
/* Gives the tag back (the reservation goes with the heap object: hhi_slots_unmap). */
HH_INTERNAL void      hhi_slots_fini(hhi_slots *t);
/* Test hook: free slot idx of heap h will be issued `left` more times before it
   retires (its next generation becomes first_gen - left, mod 2^24). */
HH_INTERNAL void hhi_heap_slot_age(hh_heap *h, uint32_t idx, uint32_t left);
/* HH_OK if h is live, else HH_E_STALE_HANDLE reported under `who` (why). Lock-free. */
HH_INTERNAL hh_status hhi_slots_check(const hhi_slots *t, hh_handle h, const char *who);

/* ---------------------------------------------------------------------------
   The heap object
--------------------------------------------------------------------------- */
struct hhi_defrag;   /* owned by src/defrag (defrag_internal.h) */

/* One region of the occupancy summary (heap_region.c); used and epoch share a
   line so an allocation touches one cache line for both. */
typedef struct hhi_region {
    uint32_t used;                /* live bytes inside the region (I11) */
    uint32_t epoch;               /* `epoch` when an allocation last started in it */
} hhi_region;

typedef struct hhi_journal {
    hh_move_record *rec;          /* moves since the last defrag step began */
    size_t          count, cap;   /* records used / allocated */
    bool            overflow;     /* a record could not be stored (metadata allocation failed) */
} hhi_journal;

struct hh_heap {
    hhi_slots   handles;          /* MUST stay first: hh_deref_inline reads its head through the heap pointer */
    char       *base;             /* managed start; base + HHI_HDR is HHI_BASE_ALIGN-aligned (handles.head.base) */
    size_t      managed;          /* managed bytes (multiple of 16); grows up to limit (HH_HEAP_GROWABLE) */
    size_t      limit;            /* most managed bytes ever: the reserved range (== managed unless growable);
                                     bitmaps, regions and sq_shift are sized for it; constant */
    size_t      commit_end;       /* growable: [base, base + commit_end) is committed (page-aligned end) */
    bool        grow_failed;      /* the last growth attempt was refused by the OS (for the message) */
    void       *mapping;          /* our own mapping (NULL when the caller gave memory) */
    size_t      mapping_bytes;
    hh_heap_desc desc;            /* resolved desc (defaults applied) */
    uint32_t    flags;            /* desc.flags */
    bool        debug;            /* HH_HEAP_DEBUG: fills and guards */
    size_t      guard;            /* HHI_GUARD in debug, else 0 */
    hhi_lock    lock;             /* taken when flags & HH_HEAP_THREADSAFE */

    hhi_freelists fl;             /* TLSF lists of free blocks */
    /* free-block cache (I13): freed small blocks wait here, uncoalesced, for
       the next allocation of their size; flushed (freed for real) before
       anything looks at holes -- see hhi_heap_cache_flush */
    uint32_t    cache[HHI_CACHE_CLASSES];   /* granule of the newest cached block of each size, HHI_NONE */
    size_t      cache_room;       /* cache_limit less the whole cached blocks' bytes (counted in used_bytes
                                     and the regions): one compare and one subtract on hh_free */
    size_t      cache_limit;      /* the cached bytes stay <= this: max(HHI_CACHE_MIN_LIMIT, managed / 16) */
    uint32_t    cache_count[HHI_CACHE_CLASSES];   /* blocks in each cache list (the observers' figures) */
    size_t      cache_low;        /* at or below the lowest cached block: the lowest offset cached since
                                     the last flush (SIZE_MAX: none), for the observers' lowest hole */
    uint8_t    *pins;             /* pin count per handle slot (I6), zero pages of their own mapping;
                                     NULL until the first pin */
    uint32_t   *tags;             /* user tag per handle slot, as pins; NULL until the first non-zero tag */
    hhi_bitmap  starts;           /* bit per granule: a block starts here */
    hhi_bitmap  frees;            /* bit per span of HHI_FSPAN granules: free_span[span] > 0 */
    uint8_t    *free_span;        /* free-block starts per span (<= 16), one byte per KiB of range */
    bool        free_span_mapped; /* free_span in its own mapping (growable heaps), else metadata */

    /* counters, always exact (I8) */
    size_t      used_bytes;       /* whole live + pinned blocks */
    size_t      free_bytes;       /* whole free blocks */
    uint32_t    live_blocks;      /* allocated blocks, pinned included */
    uint32_t    free_blocks;
    uint32_t    pinned_blocks;
    size_t      pinned_bytes;     /* whole pinned blocks */
    uint64_t    free_sumsq;       /* sum over free blocks of (size >> sq_shift)^2, exact */
    unsigned    sq_shift;         /* chosen so the sum cannot overflow */
    uint64_t    total_moves, total_bytes_moved;
    uint64_t    compactions;      /* allocations that had to compact */

    /* occupancy summary (I11; heap_region.c) */
    hhi_region *regions;          /* one per region, in address order */
    uint32_t    region_count;     /* regions: ceil(managed / region size) */
    unsigned    region_shift;     /* log2 of the region size in bytes */
    uint32_t    epoch;            /* advanced by every defrag step: the game's frame clock */
    uint32_t    alloc_epoch;      /* `epoch` of the last allocation anywhere */

    uint64_t    mutations;        /* public mutations (alloc, free, resize, unpin, alloc-time compaction) */
    size_t      low_mark;         /* lowest block offset a public mutation touched since the defrag
                                     service last looked (SIZE_MAX: none); lets its cursor survive */
    size_t      dc_lo;            /* [dc_lo, managed): pages not resident (given back or never written);
                                     see hhi_heap_decommit_top */
    size_t      dc_hi;            /* [dc_lo, dc_hi): the pages given back and not written since */
    size_t      decommitted;      /* resident bytes currently given back: dc_hi - dc_lo */
    uint64_t    decommit_calls;   /* madvise calls made */
    /* Compaction for a failed allocation, installed by the defrag service (NULL:
       the heap's own slide, hhi_heap_compact_for). Lock held; returns a free block
       that fits size/align, or NULL when no compaction can make one. */
    hhi_block *(*compact_hook)(hh_heap *h, size_t size, size_t align);

    bool        debug_moves;      /* HH_HEAP_DEBUG_MOVES */
    bool        compacting;       /* allocation-time compaction or a resize is moving blocks: no quarantine */
    size_t     *quar;             /* offsets of the quarantine blocks (I12) */
    size_t      quar_count, quar_cap;
    hhi_journal journal;          /* relocation journal */
    hh_heap_event_fn event_fn;    /* event hook (tracing), NULL: none */
    void       *event_user;
    struct hhi_defrag *defrag;    /* defrag module state, created on first use (may be NULL) */
    void      (*defrag_free)(struct hhi_defrag *d);   /* frees it at heap destroy */
};

/* ---------------------------------------------------------------------------
   Block accessors
--------------------------------------------------------------------------- */
/* Size in bytes: the size field of a live (cached, quarantine) block, the
   wider one of a free block (whose slot bits are size). */
static inline size_t   blk_size(const hhi_block *b) {
    uint64_t w = b->word;
    return (size_t)((w >> BLK_SIZE_SHIFT) & ((w & BLK_FREE) ? ~(uint64_t)(HHI_GRANULE - 1) : HHI_MAX_LIVE_BLOCK));
}
/* blk_size of a block known to be free, or known not to be. */
static inline size_t   blk_size_free(const hhi_block *b) {
    hh_assert_internal((b->word & BLK_FREE) != 0);
    return (size_t)(b->word >> BLK_SIZE_SHIFT);      /* a free word is size << 9 | BLK_FREE, nothing else (checked) */
}
/* The size and the slot of a live block's header word w. */
static inline size_t   word_size_live(uint64_t w) { return (size_t)(w >> BLK_SIZE_SHIFT) & HHI_MAX_LIVE_BLOCK; }
static inline uint32_t word_slot(uint64_t w) { return (uint32_t)(w >> BLK_SLOT_SHIFT); }
/* true if header word w is a live, unpinned block's (not free, cached or
   quarantined) whose slot is idx: one test for what hh_free must know of a
   block before it frees it. Rotated, the slot field lands in bits 0..23 and
   the flags in 24..28 (BLK_PREV_FREE masked off), so a single compare
   against idx checks them all. */
static inline bool word_live_unpinned(uint64_t w, uint32_t idx) {
    uint64_t r = (w >> BLK_SLOT_SHIFT) | (w << (64 - BLK_SLOT_SHIFT));
    return (r & (((BLK_FLAGS & ~BLK_PREV_FREE) << (64 - BLK_SLOT_SHIFT)) | HH_HANDLE_INDEX_MASK)) == idx;
}
static inline size_t   blk_size_live(const hhi_block *b) {
    hh_assert_internal((b->word & BLK_FREE) == 0);
    return word_size_live(b->word);
}
/* Header words: a free block of `size` bytes; a size field for a live one. */
static inline uint64_t free_word(size_t size) { return ((uint64_t)size << BLK_SIZE_SHIFT) | BLK_FREE; }
static inline uint64_t size_field(size_t size) { return (uint64_t)size << BLK_SIZE_SHIFT; }
/* The handle slot of a live block (0: a quarantine block). */
static inline uint32_t blk_slot(const hhi_block *b) { return word_slot(b->word); }
static inline bool     blk_pinned(const hhi_block *b) { return (b->word & BLK_PINNED) != 0; }
static inline bool     blk_is_free(const hhi_block *b) { return (b->word & BLK_FREE) != 0; }
static inline bool     blk_prev_free(const hhi_block *b) { return (b->word & BLK_PREV_FREE) != 0; }
static inline bool     blk_quarantined(const hhi_block *b) { return (b->word & BLK_QUARANTINE) != 0; }
static inline bool     blk_cached(const hhi_block *b) { return (b->word & BLK_CACHED) != 0; }
/* Bytes of the cached blocks, and whether there are any (I13). The largest
   cached block's size (observers; O(HHI_CACHE_CLASSES)). */
static inline size_t heap_cached_bytes(const hh_heap *h) { return h->cache_limit - h->cache_room; }
static inline bool   heap_cache_empty(const hh_heap *h) { return h->cache_room == h->cache_limit; }
static inline size_t heap_cached_largest(const hh_heap *h) {
    for (unsigned c = HHI_CACHE_CLASSES; c-- > 0;)
        if (h->cache_count[c]) return (size_t)c * HHI_GRANULE;
    return 0;
}
/* Cached blocks, and the sum of their squared sizes >> sq_shift (as free_sumsq). O(HHI_CACHE_CLASSES). */
static inline uint32_t heap_cached_blocks(const hh_heap *h) {
    uint32_t n = 0;
    for (unsigned c = 0; c < HHI_CACHE_CLASSES; c++) n += h->cache_count[c];
    return n;
}
static inline uint64_t heap_cached_sumsq(const hh_heap *h) {
    uint64_t sq = 0;
    for (unsigned c = 0; c < HHI_CACHE_CLASSES; c++) {
        uint64_t u = ((size_t)c * HHI_GRANULE) >> h->sq_shift;
        sq += (uint64_t)h->cache_count[c] * u * u;
    }
    return sq;
}
/* Offset at or below the lowest hole, cached blocks included (observers):
   the lowest free block's, or cache_low when it is lower and blocks are
   cached. Exact unless the lowest block cached since the last flush was taken
   back by an allocation. (low_mark, also at or below every cached block, is
   lowered by every allocation too: a far looser bound.) */
static inline size_t heap_lowest_hole_bound(const hh_heap *h, size_t lowest_free) {
    return !heap_cache_empty(h) && h->cache_low < lowest_free ? h->cache_low : lowest_free;
}
/* Pin count of live block b: pins[slot] when BLK_PINNED (the array exists then). */
static inline unsigned blk_pins(const hh_heap *h, const hhi_block *b) {
    hh_assert_internal(!blk_quarantined(b));
    return blk_pinned(b) ? h->pins[blk_slot(b)] : 0;
}
/* User tag of live block b (0 until a heap's first non-zero tag). */
static inline uint32_t blk_tag(const hh_heap *h, const hhi_block *b) { return h->tags ? h->tags[blk_slot(b)] : 0; }
static inline unsigned blk_slack(const hhi_block *b) { return (unsigned)((b->word >> BLK_SLACK_SHIFT) & 0xF); }
static inline size_t   blk_align(const hhi_block *b) { return (size_t)16 << ((b->word >> BLK_ALIGN_SHIFT) & 0xF); }
static inline void    *blk_payload(const hhi_block *b) { return (char *)b + HHI_HDR; }
static inline hhi_block *blk_from_payload(const void *p) { return (hhi_block *)(void *)((char *)p - HHI_HDR); }

static inline size_t blk_offset(const hh_heap *h, const hhi_block *b) { return (size_t)((const char *)b - h->base); }
static inline hhi_block *blk_at(const hh_heap *h, size_t off) { return (hhi_block *)(void *)(h->base + off); }
static inline uint32_t off_granule(size_t off) { return (uint32_t)(off / HHI_GRANULE); }
static inline size_t granule_off(uint32_t g) { return (size_t)g * HHI_GRANULE; }

/* The block after b, or NULL at the end of the range. */
static inline hhi_block *blk_next(const hh_heap *h, const hhi_block *b) {
    size_t end = blk_offset(h, b) + blk_size(b);
    return end < h->managed ? blk_at(h, end) : NULL;
}
/* The free block before b (valid only if blk_prev_free(b)). */
static inline hhi_block *blk_prev_free_block(const hhi_block *b) {
    uint64_t psize = ((const uint64_t *)(const void *)b)[-1];
    return (hhi_block *)(void *)((char *)b - psize);
}
/* Minimal whole-block size for n bytes after the header (n already
   validated): header and n rounded up to a granule, at least HHI_MIN_BLOCK
   -- a payload of 16k + 8 bytes or less pays no padding for the header.
   blk_min_size adds the heap's guard to the payload. */
static inline size_t blk_size_for(size_t n) {
    size_t s = hh_align_up(HHI_HDR + n, HHI_GRANULE);
    return s < HHI_MIN_BLOCK ? HHI_MIN_BLOCK : s;
}
static inline size_t blk_min_size(const hh_heap *h, size_t n) { return blk_size_for(n + h->guard); }
/* Usable payload bytes of a live block (constant across moves). */
static inline size_t blk_usable(const hh_heap *h, const hhi_block *b) {
    return blk_size_live(b) - (size_t)blk_slack(b) * HHI_GRANULE - HHI_HDR - h->guard;
}
/* base + HHI_HDR is 4096-aligned, so a block at offset o has an a-aligned payload iff o % a == 0. */
static inline bool off_aligned(size_t off, size_t align) { return (off & (align - 1)) == 0; }
static inline unsigned align_code(size_t align) { return align <= 16 ? 0u : hh_fls64(align) - 4u; }

/* ---------------------------------------------------------------------------
   Locking
--------------------------------------------------------------------------- */
static inline void heap_lock(const hh_heap *h) {
    if (h->flags & HH_HEAP_THREADSAFE) hhi_lock_acquire((hhi_lock *)&h->lock);
}
static inline void heap_unlock(const hh_heap *h) {
    if (h->flags & HH_HEAP_THREADSAFE) hhi_lock_release((hhi_lock *)&h->lock);
}

/* A public mutation touched the block at offset off (lock held): the defrag
   cursor below off stays valid, anything at or above it must be looked at again. */
static inline void heap_touch(hh_heap *h, size_t off) {
    h->mutations++;
    if (off < h->low_mark) h->low_mark = off;
}

/* ---------------------------------------------------------------------------
   Occupancy summary (heap_region.c). Caller holds the lock.
--------------------------------------------------------------------------- */
enum { HHI_REGION_MAX = 1024, HHI_REGION_MIN_SHIFT = 12 };
/* Allocates the region arrays for h->limit; false when metadata runs out. */
HH_INTERNAL bool hhi_region_init(hh_heap *h);
HH_INTERNAL void hhi_region_fini(hh_heap *h);
/* Adds (add) or removes live bytes [off, off + size) spanning several regions. */
HH_INTERNAL void hhi_region_span(hh_heap *h, size_t off, size_t size, bool add);

/* Live bytes [off, off + size) appear (a block is made, grows or lands) or go
   away: used_bytes and the regions move together (I8, I11). */
static inline void used_add(hh_heap *h, size_t off, size_t size) {
    h->used_bytes += size;
    size_t r = off >> h->region_shift;
    if (hh_likely(r == (off + size - 1) >> h->region_shift)) h->regions[r].used += (uint32_t)size;
    else hhi_region_span(h, off, size, true);
}
static inline void used_sub(hh_heap *h, size_t off, size_t size) {
    h->used_bytes -= size;
    size_t r = off >> h->region_shift;
    if (hh_likely(r == (off + size - 1) >> h->region_shift)) h->regions[r].used -= (uint32_t)size;
    else hhi_region_span(h, off, size, false);
}

/* Reports a completed operation to the event hook, if any (lock held). A macro
   so that the event is built only when a hook is set (hot paths pay one test).
   Use: heap_event(h, &(hh_heap_event){ ... }). */
#define heap_event(h, ...)                                                       \
    do {                                                                         \
        if (hh_unlikely((h)->event_fn != NULL)) (h)->event_fn(__VA_ARGS__, (h)->event_user); \
    } while (0)

/* ---------------------------------------------------------------------------
   Free lists (heap_freelist.c). Caller holds the lock.
--------------------------------------------------------------------------- */
/* Inline list primitives (heap_freelist.c wraps fl_find and the mapping for
   the other modules). fl_link/fl_unlink/fl_relink touch only the lists and
   their two-level bitmaps: the free-start index and the counters are the
   caller's (fl_insert/fl_remove do all of it). */
static inline void fl_mapping(size_t size, unsigned *fl, unsigned *sl) {
    if (size < HHI_SMALL_BLOCK) {
        *fl = 0;
        *sl = (unsigned)(size / HHI_GRANULE);
    } else {
        unsigned f = hh_fls64(size);
        *sl = (unsigned)(size >> (f - HHI_SL_LOG2)) ^ HHI_SL_COUNT;
        *fl = f - (HHI_FL_SHIFT - 1);
    }
}
/* true if free blocks of sizes big >= small (multiples of 16) share a list:
   below HHI_SMALL_BLOCK only equal sizes do; above, the lists are the top
   HHI_SL_LOG2 + 1 bits of the size, and a smaller power of two differs there. */
static inline bool fl_same_list(size_t big, size_t small) {
    unsigned k = big < HHI_SMALL_BLOCK ? 4u : hh_fls64(big) - HHI_SL_LOG2;
    return (big >> k) == (small >> k);
}
static inline uint64_t fl_sq(const hh_heap *h, size_t size) {
    uint64_t u = size >> h->sq_shift;
    return u * u;
}
/* Links free block b (granule g) into list (f, s): lowest address first, else
   right behind the head (see heap_freelist.c). */
static inline void fl_link(hh_heap *h, hhi_block *b, uint32_t g, unsigned f, unsigned s) {
    hh_assert_internal(f < HHI_FL_COUNT && blk_is_free(b));
    uint32_t head = h->fl.head[f][s];
    if (head == HHI_NONE || g < head) {          /* new head */
        b->u.free.prev = HHI_NONE;
        b->u.free.next = head;
        if (head != HHI_NONE) blk_at(h, granule_off(head))->u.free.prev = g;
        h->fl.head[f][s] = g;
        h->fl.fl_bitmap |= 1u << f;
        h->fl.sl_bitmap[f] |= 1u << s;
    } else {                                     /* right behind the head */
        hhi_block *hb = blk_at(h, granule_off(head));
        uint32_t nx = hb->u.free.next;
        b->u.free.prev = head;
        b->u.free.next = nx;
        if (nx != HHI_NONE) blk_at(h, granule_off(nx))->u.free.prev = g;
        hb->u.free.next = g;
    }
}
/* Unlinks free block b (granule g) from its list (f, s); its header is untouched. */
static inline void fl_unlink(hh_heap *h, const hhi_block *b, uint32_t g, unsigned f, unsigned s) {
    uint32_t next = b->u.free.next, prev = b->u.free.prev;
    (void)g;
    if (next != HHI_NONE) blk_at(h, granule_off(next))->u.free.prev = prev;
    if (prev != HHI_NONE) blk_at(h, granule_off(prev))->u.free.next = next;
    else {
        hh_assert_internal(h->fl.head[f][s] == g);
        h->fl.head[f][s] = next;
        if (next == HHI_NONE) {
            h->fl.sl_bitmap[f] &= ~(1u << s);
            if (h->fl.sl_bitmap[f] == 0) h->fl.fl_bitmap &= ~(1u << f);
        }
    }
}
/* Free block `to` (granule gto) takes the list place of free block `from`
   (size of `to` maps to the same list; from's header is read, not changed).
   The list stays well linked; only its address order may loosen, which is a
   preference of the search, not an invariant. */
static inline void fl_relink(hh_heap *h, const hhi_block *from, hhi_block *to, uint32_t gto, size_t to_size) {
    uint32_t next = from->u.free.next, prev = from->u.free.prev;
    to->u.free.next = next;
    to->u.free.prev = prev;
    if (next != HHI_NONE) blk_at(h, granule_off(next))->u.free.prev = gto;
    if (prev != HHI_NONE) blk_at(h, granule_off(prev))->u.free.next = gto;
    else {
        unsigned f, s;
        fl_mapping(to_size, &f, &s);
        h->fl.head[f][s] = gto;
    }
}
/* List for a search: round up so any block of that list is >= size. */
static inline void fl_mapping_search(size_t size, unsigned *fl, unsigned *sl) {
    if (size >= HHI_SMALL_BLOCK) size += ((size_t)1 << (hh_fls64(size) - HHI_SL_LOG2)) - 1;
    fl_mapping(size, fl, sl);
}
/* The first non-empty list at or after (*f, the lists left in *sl_map of row
   *f): moves *f to its row and returns that row's remaining map with the list
   in its lowest bit; 0 when no list is left. */
static inline uint32_t fl_next_nonempty(const hh_heap *h, unsigned *f, uint32_t sl_map) {
    if (sl_map == 0) {
        uint32_t fl_map = *f + 1 < 32 ? h->fl.fl_bitmap & (~0u << (*f + 1)) : 0;
        if (fl_map == 0) return 0;
        *f = hh_ctz64(fl_map);
        sl_map = h->fl.sl_bitmap[*f];
    }
    return sl_map;
}
/* The free block when the lists hold exactly one (free_blocks == 1). */
static inline hhi_block *fl_sole(const hh_heap *h) {
    unsigned f = hh_ctz64(h->fl.fl_bitmap);
    return blk_at(h, granule_off(h->fl.head[f][hh_ctz64(h->fl.sl_bitmap[f])]));
}
/* Good fit (hhi_freelist_find). */
static inline hhi_block *fl_find(const hh_heap *h, size_t size) {
    unsigned f, s;
    fl_mapping_search(size, &f, &s);
    if (hh_unlikely(f >= HHI_FL_COUNT)) return NULL;
    uint32_t sl_map = fl_next_nonempty(h, &f, h->fl.sl_bitmap[f] & (~0u << s));
    if (sl_map == 0) return NULL;
    return blk_at(h, granule_off(h->fl.head[f][hh_ctz64(sl_map)]));
}
/* The head of the list holding `size` itself if it is large enough (the
   good-fit search skips that list: its blocks may be smaller), else
   fl_find(size), mapping the size once (allocation). Lets a block freed by an
   object of a size be reused by the next object of that size instead of being
   split by smaller ones. When the exact list's head is too small, or the list
   is empty, the good-fit search starts at the next list, as fl_find's
   rounding would. */
static inline hhi_block *fl_exact_then_find(const hh_heap *h, size_t size) {
    if (size < HHI_SMALL_BLOCK) return fl_find(h, size);   /* linear classes: exact already */
    unsigned k = hh_fls64(size) - HHI_SL_LOG2;
    unsigned f = k + HHI_SL_LOG2 - (HHI_FL_SHIFT - 1), s = (unsigned)(size >> k) ^ HHI_SL_COUNT;
    if (hh_unlikely(f >= HHI_FL_COUNT)) return NULL;
    uint32_t g = h->fl.head[f][s];
    if (g != HHI_NONE) {
        hhi_block *b = blk_at(h, granule_off(g));
        if (blk_size_free(b) >= size) return b;
    }
    uint32_t sl_map = fl_next_nonempty(h, &f, h->fl.sl_bitmap[f] & (~0u << (s + 1)));   /* s + 1 <= 16 */
    if (sl_map == 0) return NULL;
    return blk_at(h, granule_off(h->fl.head[f][hh_ctz64(sl_map)]));
}

/* Free block nb (granule ng, nsize bytes) takes the list place of free block
   ob (granule og, osize bytes): a relink when both sizes map to one list. */
HH_INLINE void fl_replace(hh_heap *h, hhi_block *ob, uint32_t og, size_t osize, hhi_block *nb, uint32_t ng,
                              size_t nsize) {
    if (hh_likely(osize >= nsize ? fl_same_list(osize, nsize) : fl_same_list(nsize, osize))) {
        fl_relink(h, ob, nb, ng, nsize);
        return;
    }
    unsigned f1, s1, f2, s2;
    fl_mapping(osize, &f1, &s1);
    fl_mapping(nsize, &f2, &s2);
    fl_unlink(h, ob, og, f1, s1);
    fl_link(h, nb, ng, f2, s2);
}

/* The free-start index (I5): one more or one fewer free block starts at
   granule g; a start moving from granule g to granule ng. */
enum { HHI_FSPAN_SHIFT = 6, HHI_FSPAN = 1 << HHI_FSPAN_SHIFT };   /* granules per span: one start-bitmap word */
_Static_assert(HHI_FSPAN == 64, "a span is one word of the start bitmap");
static inline void free_start_add(hh_heap *h, uint32_t g) {
    if (h->free_span[g >> HHI_FSPAN_SHIFT]++ == 0) hhi_bitmap_set_fast(&h->frees, g >> HHI_FSPAN_SHIFT);
}
static inline void free_start_sub(hh_heap *h, uint32_t g) {
    if (--h->free_span[g >> HHI_FSPAN_SHIFT] == 0) hhi_bitmap_clear_fast(&h->frees, g >> HHI_FSPAN_SHIFT);
}
static inline void free_start_move(hh_heap *h, uint32_t g, uint32_t ng) {
    if ((g ^ ng) >> HHI_FSPAN_SHIFT) {               /* another span: else the count stays */
        free_start_add(h, ng);
        free_start_sub(h, g);
    }
}

/* Inserts free block b (header already says free + size): lists, free-start index, counters. */
static inline void fl_insert(hh_heap *h, hhi_block *b) {
    size_t size = blk_size_free(b);
    unsigned f, s;
    fl_mapping(size, &f, &s);
    uint32_t g = off_granule(blk_offset(h, b));
    fl_link(h, b, g, f, s);
    free_start_add(h, g);
    h->free_bytes += size;
    h->free_blocks++;
    h->free_sumsq += fl_sq(h, size);
}

/* Removes free block b from lists, free-start index, counters (header untouched). */
static inline void fl_remove(hh_heap *h, hhi_block *b) {
    size_t size = blk_size_free(b);
    unsigned f, s;
    fl_mapping(size, &f, &s);
    uint32_t g = off_granule(blk_offset(h, b));
    fl_unlink(h, b, g, f, s);
    free_start_sub(h, g);
    h->free_bytes -= size;
    h->free_blocks--;
    h->free_sumsq -= fl_sq(h, size);
}

HH_INTERNAL void hhi_freelist_init(hh_heap *h);
/* A free block of at least `size` bytes from a list that guarantees it (good fit), or NULL. */
HH_INTERNAL hhi_block *hhi_freelist_find(const hh_heap *h, size_t size);
/* The largest free block's size, O(1): the largest of the first
   HHI_LARGEST_WALK blocks of the highest non-empty list and the top region.
   Exact unless that list holds more blocks (say 100k equal holes), and then
   short by less than one list step (1/16 of the size) at most. */
enum { HHI_LARGEST_WALK = 16 };
HH_INTERNAL size_t hhi_freelist_largest(const hh_heap *h);
#if HH_TESTING
/* Free blocks hhi_freelist_largest looked at for the calling thread (a test
   bounds it without timing anything). */
HH_INTERNAL _Thread_local uint64_t hhi_test_largest_looks_here;
#endif
/* TLSF list index of a free block size (for the checker). */
HH_INTERNAL void hhi_freelist_mapping(size_t size, unsigned *fl, unsigned *sl);

/* ---------------------------------------------------------------------------
   Mechanism (heap.c), used by the defrag service. Caller holds the lock.
--------------------------------------------------------------------------- */
/* Lowest free block (a hole or the top region), or NULL if none. O(log n). */
HH_INTERNAL hhi_block *hhi_heap_lowest_free(const hh_heap *h);
/* Lowest free block at offset >= off, or NULL. O(log n). */
HH_INTERNAL hhi_block *hhi_heap_free_at_or_after(const hh_heap *h, size_t off);
/* Highest free block at offset <= off, or NULL. O(log n). */
HH_INTERNAL hhi_block *hhi_heap_free_at_or_before(const hh_heap *h, size_t off);
/* The block (any state) starting at offset >= off, or NULL. O(log n). */
HH_INTERNAL hhi_block *hhi_heap_block_at_or_after(const hh_heap *h, size_t off);
/* A free block lying wholly below offset `limit` that a block of bs bytes at
   alignment align fits in, or NULL: the request's own list first (equal sizes
   fill a hole exactly), then up to `tries` larger non-empty lists, smallest
   first; in each list the first HHI_FIT_BELOW_WALK blocks are looked at (lists
   keep low addresses near their head). Never the top region unless it ends
   below limit. O(tries); *looked grows by the free blocks looked at. */
enum { HHI_FIT_BELOW_WALK = 4 };
HH_INTERNAL hhi_block *hhi_heap_find_fit_below(const hh_heap *h, size_t bs, size_t align, size_t limit, unsigned tries,
                                               unsigned *looked);
/* The block that starts before b (any state), or NULL at offset 0. O(log n). */
HH_INTERNAL hhi_block *hhi_heap_block_before(const hh_heap *h, const hhi_block *b);
/* The top free region (free block ending at managed), or NULL. O(1). */
HH_INTERNAL hhi_block *hhi_heap_top_free(const hh_heap *h);
/* true if live block b (size bs, alignment a) could be placed in free block f
   (f not adjacent above b); *dst_off gets the offset it would take. */
HH_INTERNAL bool hhi_heap_fits(const hh_heap *h, const hhi_block *f, size_t bs, size_t align, size_t *dst_off);
/* A free block that a block of `size` bytes at alignment `align` fits in
   (good fit, then the top region, which the good-fit rounding may skip), or
   NULL; never compacts. O(log n). */
HH_INTERNAL hhi_block *hhi_heap_find_fit(const hh_heap *h, size_t size, size_t align);
/* true if hhi_heap_slide_down(h, f, b) would move b (f the free block right
   below live block b): its alignment leaves room to go down and, while moves
   are quarantined (HH_HEAP_DEBUG_MOVES), its new place does not overlap its old one. */
HH_INTERNAL bool hhi_heap_can_slide(const hh_heap *h, const hhi_block *f, const hhi_block *b);
/* true while a move's old place becomes a quarantine block (I12). */
static inline bool heap_quarantining(const hh_heap *h) { return h->debug_moves && !h->compacting; }
/* Frees every quarantine block (start of a step, or an allocation that found no room). */
HH_INTERNAL void hhi_heap_quarantine_release(hh_heap *h);
/* Slides live, unpinned block b down into the free block f directly below it.
   Returns the moved block. Records the move (journal, stats, on_move, tools). */
HH_INTERNAL hhi_block *hhi_heap_slide_down(hh_heap *h, hhi_block *f, hhi_block *b);
/* Moves live, unpinned block b into free block f (not adjacent below b; caller
   checked hhi_heap_fits). A remainder of f of at most `absorb` bytes (< 256)
   becomes the moved block's slack instead of a free block, closing f. Returns
   the moved block. Records the move. */
HH_INTERNAL hhi_block *hhi_heap_move_into(hh_heap *h, hhi_block *b, hhi_block *f, size_t absorb);
/* Full compaction in one address-order sweep from the lowest hole: free
   blocks met are taken out of the lists and add to a running gap; each run of
   movable blocks between them moves down by the gap with one memmove; a pinned
   block (or one the shift would misalign) stops the gap, which becomes one
   free block right below it. Each block's move is recorded (slot, journal,
   counters, on_move). O(blocks), at about memmove speed. Returns the blocks
   moved, *bytes their payload; 0 (nothing done) when memcheck/ASan track the
   heap -- guard and slack bytes are no-access to them -- so callers fall back
   to per-block moves. */
HH_INTERNAL size_t hhi_heap_sweep_compact(hh_heap *h, size_t *bytes);
/* Closes free block f (not the top region, at most HHI_MAX_SLACK granules) by
   making it slack of the block before it: nothing moves, the bytes count as
   used until that block moves (a move drops slack) or is freed. false (nothing
   changed) if f is at offset 0 or that block's slack would overflow. */
HH_INTERNAL bool hhi_heap_absorb_hole(hh_heap *h, hhi_block *f);
/* Frees every cached block for real (coalescing, into the TLSF lists), so
   that the holes they are become usable: called by hhi_heap_journal_reset
   (every defrag step and hh_defrag_full begin with it), and by allocation
   and resize before they grow or compact the heap. O(cached blocks). */
HH_INTERNAL void hhi_heap_cache_flush(hh_heap *h);
/* Clears the journal, flushes the free-block cache and frees the quarantine
   (start of a defrag step). */
HH_INTERNAL void hhi_heap_journal_reset(hh_heap *h);
/* Slides the blocks of [offset(f), end) down one by one, starting with the
   one right above free block f, until a free block inside the range fits
   `size` bytes at alignment `align` (returned) or the range is done (NULL).
   Pinned blocks and blocks whose alignment leaves no room stay; the sliding
   goes on above them. */
HH_INTERNAL hhi_block *hhi_heap_slide_range(hh_heap *h, hhi_block *f, size_t end, size_t size, size_t align);
/* Default compaction used by allocation: slides blocks down from the lowest
   hole until a free block of `size` bytes at alignment `align` exists or no
   block can move (hhi_heap_slide_range over the whole heap). Returns a fitting free block or NULL. */
HH_INTERNAL hhi_block *hhi_heap_compact_for(hh_heap *h, size_t size, size_t align);
/* Gives the whole pages of the top free region back to the OS (own mapping
   only), keeping the pages of its header and footer and the first `retain`
   bytes above its header; does nothing unless at least `min_bytes` of pages
   are newly decommittable, and gives back at most `max_bytes` (0: no limit;
   the highest resident pages first, so a later call continues below). Pages
   given back or never written (above h->dc_lo) are not touched. Returns the
   resident bytes newly decommitted. */
HH_INTERNAL size_t hhi_heap_decommit_top(hh_heap *h, size_t retain, size_t min_bytes, size_t max_bytes);
/* Walk-based validity check for hh_assert_expensive (no reporting). */
HH_INTERNAL bool hhi_heap_is_valid(const hh_heap *h);

#endif /* HH_HEAP_INTERNAL_H */
