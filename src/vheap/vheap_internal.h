/* vheap_internal.h -- the virtual heap's data structures (include/hheap/vheap.h).
 *
 * Model
 *   The range [0, size) is tiled by blocks in address order. A block is a
 *   32-byte record in a pool array (rec[], index 0 is the null record), never
 *   a header in the range: the range is the caller's (a GPU buffer ...).
 *
 *   record: off  u64          offset of the block
 *           word u64          bits 0..47 size (bytes, multiple of 16)
 *                             bits 48..50 state (VB_*)
 *                             bits 51..63 aux: free -> the largest size class in
 *                             its subtree of the free tree; live -> pin count
 *                             (bits 51..57) and log2(alignment) (bits 58..62)
 *           prev, next u32    address-order neighbours (0: none)
 *           free: left, right u32   children in the free tree
 *           live: slot, tag   u32   handle-table slot, user tag
 *
 *   Free blocks sit in one address-ordered treap (key: offset; priority: a
 *   hash of the record index, so none is stored). Each node carries the
 *   largest size class of its subtree (TLSF-like classes: 64 linear steps per
 *   power of two), so "the lowest free block that can hold n bytes aligned to
 *   a" is a pruned descent: O(log n) expected, no walk. This index replaces
 *   the relocatable heap's TLSF lists, whose links live inside free blocks and
 *   which therefore cannot serve a range the library never touches.
 *
 *   A planned move (open pass) holds two records: the source, state VB_SRC
 *   (still the handle's block) or VB_ZOMBIE (its handle was freed during the
 *   pass), and the destination, VB_DST, carved out of a free block. Neither is
 *   in the free tree until the pass ends, which is what keeps them reserved.
 *
 * Invariants (hh_vheap_check verifies each and names it on failure)
 *   V1  the records in address order tile [0, size): the first starts at 0,
 *       each starts where the previous ends, the last ends at size; offsets and
 *       sizes are multiples of the granule, sizes are > 0; prev/next agree.
 *   V2  no two free blocks are adjacent (free always coalesces).
 *   V3  the free tree holds exactly the free blocks: in-order offsets
 *       increase, every parent's priority is >= its children's, every node's
 *       aux is the largest size class of its subtree.
 *   V4  a live or source block's slot is live in the handle table and names
 *       the block; its offset is a multiple of its alignment; the handle
 *       table's live count equals the number of live and source blocks.
 *   V5  the per-state byte and block counters and the pinned count equal what
 *       the records say.
 *   V6  source, zombie and destination blocks exist only while a pass is
 *       open, and each belongs to exactly one planned move: same size, the
 *       two are distinct blocks (so disjoint), the move's handle the source's.
 *   V7  the pool's unused records are chained, in state VB_UNUSED, and used +
 *       unused = capacity - 1.
 *   V8  the journal (done moves of the last pass) fits its capacity; the
 *       sweep cursor is 0 or a block in the address list.
 */
#ifndef HH_VHEAP_INTERNAL_H
#define HH_VHEAP_INTERNAL_H

#include "hheap/vheap.h"
#include "hheap/handles.h"
/* Include exception: the virtual heap embeds a handle table and inlines its
   private issue/re-point fast paths (handles_internal.h). */
#include "../handles/handles_internal.h"

#include "../common/hh_compiler.h"

enum {
    VB_FREE = 0,     /* in the free tree */
    VB_LIVE = 1,     /* a handle's block (pinned or not) */
    VB_SRC = 2,      /* a handle's block that the open pass moves */
    VB_DST = 3,      /* reserved destination of a planned move */
    VB_ZOMBIE = 4,   /* source of a move whose handle was freed during the pass */
    VB_UNUSED = 5,   /* record in the pool's free chain */
    VB_NSTATES = 6,
};

#define VB_SIZE_MASK   (((uint64_t)1 << 48) - 1)
#define VB_STATE_SHIFT 48
#define VB_AUX_SHIFT   51
#define VB_PIN_MASK    0x7Fu      /* aux bits 0..6 */
#define VB_ALIGN_SHIFT 7          /* aux bits 7..11 */

typedef struct hhi_vblk {
    uint64_t off;
    uint64_t word;
    uint32_t prev, next;
    union {
        struct { uint32_t left, right; } t;   /* VB_FREE: tree children; VB_UNUSED: left chains the pool */
        struct { uint32_t slot, tag; } l;     /* VB_LIVE, VB_SRC */
    } u;
} hhi_vblk;
HH_STATIC_ASSERT(sizeof(hhi_vblk) == HH_VHEAP_RECORD_BYTES, "a block record is 32 bytes");

struct hh_vheap {
    hh_handle_table handles;     /* slot ptr = record index */
    hhi_vblk *rec;               /* record pool, rec[0] unused */
    uint32_t  rec_cap;           /* records allocated (index 0 included) */
    uint32_t  rec_unused;        /* head of the unused chain */
    uint32_t  rec_unused_count;
    uint32_t  head, tail;        /* lowest and highest block */
    uint32_t  root;              /* free tree */
    uint64_t  size;
    uint64_t  bytes[VB_NSTATES];
    uint32_t  count[VB_NSTATES];
    uint32_t  pinned;
    uint64_t  total_moves, total_bytes_moved;
    /* the pass: one buffer holds moves, journal, src and dst record indices */
    void     *pass_buf;
    uint32_t  pass_cap;
    hh_vmove *moves;
    hh_vmove *journal;
    uint32_t *mv_src, *mv_dst;
    uint32_t  move_count, journal_count;
    bool      pass_open;
    uint32_t  cursor;            /* the sweep goes on from this block (0: from the top) */
    uint64_t  sweep_moves;       /* moves planned since the sweep began at the top */
    bool      sweep_partial;     /* the sweep passed over a block too large for the budget */
    hh_vheap_desc desc;          /* resolved */
};

/* Record accessors. */
static inline uint64_t vb_size(const hhi_vblk *b) { return b->word & VB_SIZE_MASK; }
static inline unsigned vb_state(const hhi_vblk *b) { return (unsigned)((b->word >> VB_STATE_SHIFT) & 7u); }
static inline unsigned vb_aux(const hhi_vblk *b) { return (unsigned)(b->word >> VB_AUX_SHIFT); }
static inline void vb_set_size(hhi_vblk *b, uint64_t s) { b->word = (b->word & ~VB_SIZE_MASK) | s; }
static inline void vb_set_aux(hhi_vblk *b, unsigned a) {
    b->word = (b->word & (((uint64_t)1 << VB_AUX_SHIFT) - 1)) | ((uint64_t)a << VB_AUX_SHIFT);
}
static inline unsigned vb_pins(const hhi_vblk *b) { return vb_aux(b) & VB_PIN_MASK; }
static inline unsigned vb_align_log2(const hhi_vblk *b) { return (vb_aux(b) >> VB_ALIGN_SHIFT) & 31u; }
static inline uint64_t vb_end(const hhi_vblk *b) { return b->off + vb_size(b); }

/* Size class of n bytes (a multiple of the granule): 64 linear classes per
   power of two above 64 granules, exact below. Monotone in n. */
static inline unsigned hhi_vclass(uint64_t n) {
    uint64_t g = n / HH_VHEAP_GRANULE;
    if (g < 64) return (unsigned)g;
    unsigned fl = hh_fls64(g);
    return (fl - 5u) * 64u + (unsigned)((g >> (fl - 6u)) & 63u);
}
/* The smallest class whose every member holds n bytes. */
static inline unsigned hhi_vclass_up(uint64_t n) {
    uint64_t g = n / HH_VHEAP_GRANULE;
    if (g < 64) return (unsigned)g;
    unsigned fl = hh_fls64(g);
    return hhi_vclass(n) + ((g & (((uint64_t)1 << (fl - 6u)) - 1)) ? 1u : 0u);
}

/* Mechanism shared by vheap.c and vheap_defrag.c. */
HH_INTERNAL void     hhi_vset_state(hh_vheap *h, uint32_t r, unsigned state);
HH_INTERNAL bool     hhi_vreserve_records(hh_vheap *h, uint32_t n);
/* The lowest free block that holds size bytes at an offset aligned to align
   and starts below limit; 0 if none. *dst gets the aligned offset. */
HH_INTERNAL uint32_t hhi_vfind(const hh_vheap *h, uint64_t size, uint64_t align, uint64_t limit, uint64_t *dst);
/* Takes [start, start+len) out of free block r (removed from the tree; the
   parts before and after stay free). Needs 2 spare records. Returns r, now
   covering exactly the range, in state `state`. */
HH_INTERNAL uint32_t hhi_vcarve(hh_vheap *h, uint32_t r, uint64_t start, uint64_t len, unsigned state);
/* Makes record r (not in the tree) free, coalescing with free neighbours. */
HH_INTERNAL void     hhi_vrelease(hh_vheap *h, uint32_t r);
/* The lowest free block (0 if none). */
HH_INTERNAL uint32_t hhi_vtree_min(const hh_vheap *h);

#endif /* HH_VHEAP_INTERNAL_H */
