/* hheap/heap.h -- the relocatable heap: game objects by handle.
 *
 * How to use
 *   hh_heap *heap;
 *   hh_heap_create(&(hh_heap_desc){ .capacity = 64u << 20 }, &heap);
 *   hh_handle h = hh_alloc(heap, sizeof(enemy));
 *   enemy *e = hh_deref(heap, h);        // valid until the next defrag step, resize or free of h
 *   ...
 *   hh_defrag_step(heap, 16);            // once a frame (defrag.h); re-deref afterwards
 *   hh_free(heap, h);
 *   hh_heap_destroy(heap);
 *
 * Blocks live back to back in one contiguous range; each has an 8-byte header
 * (size, flags, alignment, handle slot); a block's size is its header plus
 * its payload rounded up to 16 bytes, at least 32 (plus guard bytes in
 * HH_HEAP_DEBUG, and slack: a sliver of a hole too small to stay one). Pin counts and user tags live in
 * arrays indexed by handle slot that a heap makes on its first pin (1 byte a
 * slot) and its first non-zero tag (4 bytes a slot), in zero pages of their
 * own mapping: a heap that never pins or tags pays nothing for them. A
 * block holds at most HH_HEAP_MAX_ALLOC bytes. The handle slots are
 * a separate array that never moves, 8 bytes a slot (key and the payload's
 * place in one word); hh_deref is a load and a compare. The array lies just
 * below the heap object, in one reservation with a readable slot for every
 * index a handle can carry, so the inline hh_deref finds it without a load
 * and needs no range test. That is 128 MiB of address space per heap:
 * never-used slots read as zero pages; a heap commits its max_handles + 1
 * slots at creation, a growable one as they are issued, and only committed
 * slots count against memory. The reservation does count against RLIMIT_AS
 * (ulimit -v) and valgrind's address-space limit: 30 heaps take about 4 GiB
 * of it. A heap's handles have
 * the layout of hheap/handles.h with a generation below 2^24: a slot issued
 * 2^24 times retires (never reused), so a stale handle never names a new block.
 * A handle of a destroyed heap is rejected by the later heaps too: a heap that
 * takes a table tag freed by a destroyed heap starts its generations past every
 * one that heap issued, so only after the later heaps of the tag have come
 * all the way round (2^24 generations on one slot, between them) could one
 * match it -- or, on a slot the destroyed heap itself issued (nearly) 2^24
 * times, any later heap's handle of that slot.
 *
 * Free-block cache: hh_free keeps a freed block of at most 1 KiB (not on an
 * HH_HEAP_DEBUG heap) for the next allocation of its size instead of merging
 * it with its neighbours at once, up to 1/16 of the managed bytes (at least
 * 64 KiB); that is what makes the churn of game objects cost about what
 * malloc/free costs. Each defrag step, an allocation that would carve the
 * top free region (so the heap fills its holes before it grows upwards), and
 * an allocation or resize that finds no room (before it grows or compacts)
 * first merge the cached blocks into the free lists; nothing moves for it and no pointer changes validity.
 * Until then hh_heap_stats_get, hh_heap_walk and hh_defrag_metrics_get count
 * each cached block as a free block of its own (two adjacent ones are two
 * holes): looking never changes the heap, so a trace replays exactly.
 *
 * hh_heap_desc defaults (zero fields):
 *   capacity      required, >= HH_HEAP_MIN_CAPACITY, <= HH_HEAP_MAX_CAPACITY (32 GiB);
 *                 rounded down to 16 bytes
 *   memory        NULL: the heap maps its own range and gives free pages back
 *   max_handles   capacity / 64 (at least 16, at most HH_HANDLE_MAX_SLOTS)
 *   flags         0
 *   on_move       NULL
 *   commit        HH_HEAP_GROWABLE only: capacity / 8, at least HH_HEAP_MIN_CAPACITY, at most capacity
 *
 * Growable heaps (HH_HEAP_GROWABLE; engines that size heaps by guess): the
 * heap reserves address space for `capacity` bytes (its slots have their
 * reservation whatever the kind of heap, above) and commits both as they
 * are used -- the managed range starts at `commit` bytes
 * and grows at its top (by at least a quarter, at most to capacity) when an
 * allocation or resize finds no free block that fits -- before it would
 * compact: committing is cheap, compacting may move much, and the defrag
 * steps compact later (at the limit, allocation compacts as on any heap);
 * the handle table commits its slot pages as slots are first
 * issued. Nothing moves when either grows (hh_deref stays a load and a
 * compare); hh_heap_managed_bytes and hh_heap_stats.capacity report the
 * managed size so far. A commit the OS refuses fails the allocation with
 * HH_E_NO_MEMORY ("cannot commit ...") and changes nothing.
 *
 * Allocation-time compaction: hh_alloc / hh_alloc_ex / hh_resize that find no
 * hole large enough while enough bytes are free compact and retry; they report
 * HH_E_NO_MEMORY only when no compaction can make room (the free bytes are not
 * there, or pinned blocks split them). Once the defrag service has state on
 * the heap (any hh_defrag_* call but the getters) that compaction is the
 * service's: a bounded run of its policy, then the cheapest range of holes
 * that holds the request slid together, and only if neither makes room a full
 * compaction; its moves join the journal (defrag.h). Before, it is a plain
 * slide from the lowest hole.
 * Memory: a heap that maps its own range gives the whole pages of its top free
 * region back to the OS at defrag steps (hh_defrag_config, defrag.h).
 *
 * Pointer validity (the frame contract): a pointer from hh_deref is valid until
 * the next hh_defrag_step / hh_defrag_full, the next hh_resize or hh_free of the
 * same handle, or an hh_alloc / hh_alloc_ex / hh_resize of any handle that
 * compacted the heap -- which it does only when no free block fits while enough
 * bytes are free, and which may happen even if the call then fails (pins can
 * keep the bytes apart); the moves are in the journal (defrag.h) and no
 * contents change. On a heap with HH_HEAP_NO_AUTO_COMPACT only defrag steps
 * and the resize/free of the handle itself move a block. hh_pin gives a pointer
 * that stays valid until the matching hh_unpin.
 * Debug moves (HH_HEAP_DEBUG_MOVES): finding raw pointers kept across a step.
 * In a normal step a neighbour often slides into the place a block moved
 * from, so a stale pointer reads live bytes of another object and nothing
 * notices. With this flag, the old place of every block a step moves is held
 * (a quarantine block: counted in used_bytes, walked as HH_BLOCK_PINNED with
 * a null handle) until the next step begins, filled with HH_FILL_MOVED (0xDB)
 * and, in tool builds (HH_TRACK_VALGRIND / HH_TRACK_ASAN), made no-access, so
 * a stale read after the step returns 0xDB bytes or is reported by memcheck /
 * ASan. A block never slides onto part of its own old place (SLIDE then
 * fills the hole instead, so address order is not kept), and hh_defrag_full
 * moves block by block. Compaction therefore takes more steps
 * (hh_defrag_full may end with compact == false: call it again); a report's
 * `compact` counts the held places like pinned blocks, so the next step,
 * which frees them, may find holes again (loop until a step moves nothing).
 * The held bytes are not free until the next step -- an allocation that
 * finds no room frees them first. Allocation-time compaction and hh_resize moves
 * are not held (their old bytes are still filled and made no-access).
 * With HH_HEAP_THREADSAFE every call takes the heap lock except hh_deref,
 * which stays lock-free: a thread may deref and use its own handles while
 * another thread frees others, or allocates on a heap created with
 * HH_HEAP_NO_AUTO_COMPACT (on other heaps an allocation may compact and move
 * any unpinned block: pin what other threads use). Defrag steps must not
 * overlap the use of unpinned pointers by other threads (run them at a frame
 * boundary). on_move runs with the heap lock held: it may call hh_deref only.
 */
#ifndef HHEAP_HEAP_H
#define HHEAP_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"
#include "hheap/handles.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hh_heap hh_heap;

enum {
    HH_HEAP_THREADSAFE      = 1u << 0,  /* a lock around every mutation; hh_deref stays lock-free */
    HH_HEAP_DEBUG           = 1u << 1,  /* fill new/freed/moved-from bytes, guard bytes after blocks */
    HH_HEAP_STRESS_MOVES    = 1u << 2,  /* debug: every defrag step moves every movable block, whatever its
                                           budget -- alternately up into the top free region (old bytes
                                           become no-access) and back down by a full compaction -- so raw
                                           pointers kept across a step fail fast under memcheck/ASan. In
                                           the up phase a block the top region cannot take stays put
                                           (heap more than half full). */
    HH_HEAP_NO_AUTO_COMPACT = 1u << 3,  /* hh_alloc never compacts to satisfy a request */
    HH_HEAP_GROWABLE        = 1u << 5,  /* capacity and max_handles are limits of a reserved range that is
                                           committed as it is used (own mapping only; see below) */
    HH_HEAP_HUGE_PAGES      = 1u << 6,  /* ask for transparent huge pages for the range and the handle slots
                                           (own mapping; a hint): fewer TLB misses for scattered hh_deref over
                                           many objects, at the price of resident memory in 2 MiB steps */
    HH_HEAP_DEBUG_MOVES     = 1u << 4,  /* debug (run-time, release library): a defrag step never places a
                                           block where a block moved from in the same step, so every raw
                                           pointer kept across the step points at dead bytes -- see below */
};

enum {
    HH_HEAP_MIN_CAPACITY = 16384,       /* bytes */
    HH_HEAP_MAX_ALIGN    = 4096,        /* largest alignment hh_alloc_ex accepts */
    HH_HEAP_HEADER_BYTES = 8,           /* per-block header (pin counts and tags sit in per-slot side
                                           arrays made on first use: 1 B / 4 B per handle slot) */
    HH_HEAP_MAX_ALLOC    = 0x7FFFF000,  /* largest size hh_alloc/hh_alloc_ex/hh_resize accept (2 GiB - 4 KiB):
                                           a block's size field has 27 bits of granules */
    HH_HEAP_GRANULE      = 16,          /* block sizes and offsets are multiples of this */
};

/* A handle slot holds its payload's offset in 8-byte units in 32 bits: in
   8-byte units, not granules, so that hh_deref's address is one load with a
   scaled index (x86-64 scales by at most 8; * 16 took a shift of its own, on
   the path that waits for the slot). Hence the largest capacity, 32 GiB
   less a granule. */
#define HH_HEAP_SLOT_UNIT_SHIFT 3
#define HH_HEAP_MAX_CAPACITY (((size_t)0xFFFFFFFFu << HH_HEAP_SLOT_UNIT_SHIFT) & ~(size_t)(HH_HEAP_GRANULE - 1))

typedef void (*hh_move_fn)(hh_handle h, void *old_addr, void *new_addr, size_t size, void *user);

typedef struct hh_heap_desc {      /* zero-initialise; zero fields take defaults */
    size_t      capacity;          /* bytes of relocatable space (required) */
    void       *memory;            /* caller-owned buffer of capacity bytes (16-byte aligned); NULL: the heap maps its own */
    uint32_t    max_handles;       /* 0: capacity / 64 */
    uint32_t    flags;             /* HH_HEAP_THREADSAFE, HH_HEAP_DEBUG (fill + poison), ... */
    hh_move_fn  on_move;           /* called after every relocation, NULL: none */
    void       *user;              /* passed to on_move */
    size_t      commit;            /* HH_HEAP_GROWABLE: bytes managed from the start (0: capacity / 8) */
} hh_heap_desc;

/* ---------------------------------------------------------------------------
   Life cycle
--------------------------------------------------------------------------- */
/* Creates a heap. HH_E_INVALID_ARG for a bad desc (out left NULL), HH_E_NO_MEMORY
   if the range or the handle table cannot be mapped. */
HH_API hh_status hh_heap_create(const hh_heap_desc *desc, hh_heap **out);
/* Destroys the heap; every handle becomes invalid. NULL is a no-op. The heap
   pointer must not be used after it: its memory is unmapped, and a later
   heap may get the same address (tools do not flag that reuse). */
HH_API void      hh_heap_destroy(hh_heap *heap);
/* The resolved desc the heap runs with (defaults applied). */
HH_API void      hh_heap_desc_get(const hh_heap *heap, hh_heap_desc *out);

/* ---------------------------------------------------------------------------
   Blocks
--------------------------------------------------------------------------- */
/* A 16-byte aligned block of at least size bytes, tag 0. HH_NULL + last error:
   HH_E_INVALID_ARG (size 0, or above HH_HEAP_MAX_ALLOC), HH_E_NO_MEMORY (larger
   than the heap, not enough free bytes even after compaction, or handle table full). */
HH_API hh_handle hh_alloc(hh_heap *heap, size_t size);
/* As hh_alloc with an alignment (power of two, 1..4096) and a user tag. The
   heap's first non-zero tag makes its tag array: HH_E_NO_MEMORY if it cannot. */
HH_API hh_handle hh_alloc_ex(hh_heap *heap, size_t size, size_t align, uint32_t tag);
/* Frees h. HH_NULL: no-op, HH_OK. Stale, forged or foreign: HH_E_STALE_HANDLE,
   nothing touched. Pinned: HH_E_PINNED, nothing touched. */
HH_API hh_status hh_free(hh_heap *heap, hh_handle h);
/* Changes the usable size, keeping the handle and the first min(old, new) bytes.
   Grows in place when the next block is free, else moves (not if pinned: HH_E_PINNED).
   On failure the block and its contents are as they were (HH_E_INVALID_ARG for
   0 or above HH_HEAP_MAX_ALLOC). */
HH_API hh_status hh_resize(hh_heap *heap, hh_handle h, size_t new_size);
/* Usable bytes of h (at least what was asked for); 0 if stale. */
HH_API size_t    hh_size(const hh_heap *heap, hh_handle h);
/* Tag given at allocation; 0 if stale. */
HH_API uint32_t  hh_tag(const hh_heap *heap, hh_handle h);
/* Counted pin: a pinned block never moves. Returns its address; NULL if stale
   (HH_E_STALE_HANDLE), if the pin count would overflow (HH_E_INVALID_ARG), or if
   the heap's first pin cannot make its pin array (HH_E_NO_MEMORY). */
HH_API void     *hh_pin(hh_heap *heap, hh_handle h);
/* Drops one pin. HH_E_STALE_HANDLE; HH_E_INVALID_ARG if h is not pinned. */
HH_API hh_status hh_unpin(hh_heap *heap, hh_handle h);

/* ---------------------------------------------------------------------------
   hh_deref: the hot path. The real function exists (call it, or take its
   address, as (hh_deref)); the macro below inlines its fast path -- one
   load of the slot, one compare, one load of base -- and calls the function
   for everything else.
--------------------------------------------------------------------------- */
/* The address of h's payload; NULL if h is null, or stale (HH_E_STALE_HANDLE
   reported), or heap is NULL (HH_E_INVALID_ARG). Valid until the next defrag
   step, resize or free of h. */
HH_API void *hh_deref(const hh_heap *heap, hh_handle h);

/* The first bytes of struct hh_heap. Public only so that hh_deref inlines;
   treat every field as private. A heap's handle slot is 8 bytes, read with
   one atomic load: the low 32 bits are the key (generation << 8 | the heap's
   tag; tag 0: not live), the high 32 bits the payload's offset from base in
   8-byte units (HH_HEAP_SLOT_UNIT_SHIFT). */
typedef struct hh_heap_head {
    uint64_t *slots;    /* the slot table: HH_HEAP_SLOT_TABLE_BYTES just below the heap object, never moves */
    char     *base;     /* payload base: a block at offset o of the range has its payload at base + o */
    uint32_t  capacity; /* slots that can be issued, the sentinel slot 0 (matches no handle) included; <= 2^24 */
    uint32_t  tag_bias; /* the heap's tag << 24: the low half of a handle of this heap, less it, is its index
                           (below capacity for no other tag; the out-of-line lookup's one range test) */
} hh_heap_head;

/* A heap object sits just above its slot table, in one reservation that has
   a readable slot for every index a handle can carry (2^24 slots, 128 MiB of
   address space; slots never committed read as zero pages, key 0, which no
   handle matches). So the inline finds the table from
   the heap pointer itself and needs no range test. */
#define HH_HEAP_SLOT_TABLE_BYTES ((size_t)8 << 24)

/* The macro's body: the live-handle fast path -- the slot at the heap pointer
   less HH_HEAP_SLOT_TABLE_BYTES plus the index (no clamp: every index has a
   readable slot), one 8-byte load, one compare that also covers the handle's
   top byte (and a test of its tag, off the load's path), and base, the only
   field of the heap it reads -- else
   the function above, which looks again and reports. Every field read here is
   read again after each possible call of the function (a compiler must assume
   the call wrote it), and in a loop over handles that misses the cache each
   extra load per handle holds a load-queue entry until the misses before it
   return, so fewer handles are in flight: that is why the table is found by
   address, not through a field. The load is relaxed: key and place come in
   one word, and the moves that change a place are not concurrent with the use
   of its pointers (the frame contract above). It relies on two layout facts
   (static-asserted in src/heap/heap.c): struct hh_heap begins with an
   hh_heap_head, and its slot table ends where the object begins. */
static inline void *hh_deref_inline(const hh_heap *heap, hh_handle h) {
    if (HH_UNLIKELY(heap == NULL)) return (hh_deref)(heap, h);
    const uint64_t *slots = (const uint64_t *)((uintptr_t)heap - HH_HEAP_SLOT_TABLE_BYTES);
    uint64_t w = HH_SLOT_LOAD(&slots[h.id & HH_HANDLE_INDEX_MASK]);   /* atomic: other threads free (handles.h) */
    uint64_t key = h.id >> HH_HANDLE_INDEX_BITS;
    /* A tag of 1..255, on the handle alone, then the handle's 40 bits above
       the index against the slot's 32-bit key zero-extended: equal only if
       the keys match and the handle's top byte is 0 (a heap's key is 32
       bits). One compare covers both: in a loop whose lookups miss the
       cache, every operation per lookup costs lookups in flight
       (docs/architecture.md has the measurements). */
    if (HH_LIKELY((key & 0xFF) != 0 && key == (uint32_t)w))
        return ((const hh_heap_head *)(const void *)heap)->base + ((w >> 32) << HH_HEAP_SLOT_UNIT_SHIFT);
    return (hh_deref)(heap, h);
}
#define hh_deref(heap, h) hh_deref_inline((heap), (h))

/* hh_deref of n handles at once: out[i] = the payload of hs[i], or NULL for a
   null or stale handle (each stale one reported, as hh_deref does). Returns
   how many are non-NULL. For walking many handles in one go (a system's
   component list): a loop of hh_deref waits on the slot, then the payload,
   of one handle after another; this call loads the slots some handles ahead
   and starts loading each payload it returns, so the misses overlap. Best in
   chunks of about 16..256 handles whose payloads are used right after. A NULL
   heap, or a NULL hs or out with n > 0: HH_E_INVALID_ARG, out (if any) all
   NULL, 0. Lock-free, like hh_deref; the same pointer validity. */
HH_API size_t hh_deref_many(const hh_heap *heap, const hh_handle *hs, size_t n, void **out);

/* ---------------------------------------------------------------------------
   Statistics, walk, check
--------------------------------------------------------------------------- */
typedef struct hh_heap_stats {
    size_t   capacity, used_bytes, free_bytes, largest_free;
    uint32_t live_blocks, free_blocks, pinned_blocks;
    double   fragmentation;            /* 1 - largest_free / free_bytes; 0 when free_bytes == 0 */
    uint64_t total_moves, total_bytes_moved;
} hh_heap_stats;
/* O(1): every figure is kept up to date by the mutations. `capacity` is the
   managed size (used_bytes + free_bytes). `largest_free` is exact unless the
   free list of the largest sizes holds more than 16 blocks (say 100k equal
   holes and no larger free block); it is then at most 1/16 short, which keeps
   this call O(1). */
HH_API void      hh_heap_stats_get(const hh_heap *heap, hh_heap_stats *out);

/* Walks every block and checks every invariant (I1..I12 in heap_internal.h);
   HH_OK, or HH_E_CORRUPT with a message naming the first violation. O(n). */
HH_API hh_status hh_heap_check(const hh_heap *heap);

enum { HH_BLOCK_FREE, HH_BLOCK_LIVE, HH_BLOCK_PINNED };
typedef struct hh_block_info {
    size_t    offset, size;            /* whole block, header and padding included, from the managed start */
    hh_handle handle;                  /* HH_NULL for free blocks */
    uint32_t  tag;
    int       state;                   /* HH_BLOCK_* */
} hh_block_info;
typedef void (*hh_walk_fn)(const hh_block_info *b, void *user);
/* Calls fn for every block in address order. fn must not mutate the heap. */
HH_API void      hh_heap_walk(const hh_heap *heap, hh_walk_fn fn, void *user);

/* ---------------------------------------------------------------------------
   Event hook: one callback per completed heap operation, and one per block a
   relocation moved (HH_EV_MOVE), for tracers and replay tools (see hh_trace in
   hheap/trace.h). Called with the heap lock held, after the operation (a move:
   as it happens); it must not call back into the heap.
--------------------------------------------------------------------------- */
/* One relocation, as the heap records it for the defrag service's journal
   (hh_defrag_journal in defrag.h). */
typedef struct hh_move_record {
    hh_handle handle;
    size_t    src_offset, dst_offset;  /* block offsets from the managed start */
    size_t    size;                    /* whole block bytes */
} hh_move_record;

typedef enum hh_heap_event_kind {
    HH_EV_ALLOC = 1,       /* handle, size (requested), align, tag */
    HH_EV_FREE,            /* handle */
    HH_EV_RESIZE,          /* handle, size (new requested size) */
    HH_EV_PIN,             /* handle */
    HH_EV_UNPIN,           /* handle */
    HH_EV_DEFRAG_STEP,     /* max_moves, max_bytes, max_ns of the budget; moves made in `moves` */
    HH_EV_DEFRAG_FULL,     /* hh_defrag_full; moves made in `moves` */
    HH_EV_MOVE,            /* handle, size (whole block), src_offset, dst_offset: one relocation,
                              reported as it happens -- inside a step, a full compaction, an
                              allocation that compacted or a resize, before that operation's own
                              event. The journal (hh_defrag_journal) and on_move see the same moves,
                              in the same order */
} hh_heap_event_kind;
typedef struct hh_heap_event {
    hh_heap_event_kind kind;
    hh_handle handle;
    size_t    size, align;
    uint32_t  tag;
    uint32_t  max_moves, moves;
    size_t    max_bytes;
    uint64_t  max_ns;
    size_t    src_offset, dst_offset;  /* HH_EV_MOVE: block offsets from the managed start */
} hh_heap_event;
typedef void (*hh_heap_event_fn)(const hh_heap_event *e, void *user);
/* Installs (or with NULL removes) the event hook. Successful operations only.
   Installing one first merges the blocks the heap keeps cached for reuse, so a
   heap that holds no live block then places the next allocations as a fresh
   heap would (a trace recorded from there replays on a fresh heap). */
HH_API void hh_heap_set_event_hook(hh_heap *heap, hh_heap_event_fn fn, void *user);

/* Start of the managed range (block offsets are relative to it) and its size
   (the lock is taken: a growable heap's range grows). For a NULL heap: NULL / 0
   and HH_E_INVALID_ARG reported, as by the two below. */
HH_API void     *hh_heap_base(const hh_heap *heap);
HH_API size_t    hh_heap_managed_bytes(const hh_heap *heap);
/* Bytes the heap's metadata takes outside the managed range (heap object,
   address bitmap, handle slots actually issued). */
HH_API size_t    hh_heap_overhead_bytes(const hh_heap *heap);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_HEAP_H */
