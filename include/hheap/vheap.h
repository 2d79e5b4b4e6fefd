/* hheap/vheap.h -- the virtual heap: a relocatable heap over memory the
 * library never touches (a GPU buffer, a file, a remote pool). It hands out
 * offsets, never pointers, and plans the moves that compact it; the caller
 * carries them out (GPU copy commands, file copies) in two phases.
 *
 * How to use
 *   hh_vheap *vh;
 *   hh_vheap_create(&(hh_vheap_desc){ .size = 256u << 20 }, &vh);
 *   hh_handle mesh = hh_valloc(vh, bytes, 256, TAG_MESH);
 *   upload(buffer + hh_voffset(vh, mesh), data, bytes);
 *   ...                                              // once a frame:
 *   hh_vdefrag_pass pass;
 *   hh_vdefrag_begin(vh, &(hh_vdefrag_budget){ .max_moves = 8, .max_bytes = 4u << 20 }, &pass);
 *   for (uint32_t i = 0; i < pass.move_count; i++)   // record the copies
 *       cmd_copy(buffer, pass.moves[i].src_offset, pass.moves[i].dst_offset, pass.moves[i].size);
 *   ...                                              // when the GPU has executed them:
 *   hh_vdefrag_end(vh, NULL, NULL);                  // NULL: every move done
 *   hh_vfree(vh, mesh);
 *   hh_vheap_destroy(vh);
 *
 * Model. The range [0, size) is tiled by blocks (offsets and sizes multiples
 * of HH_VHEAP_GRANULE). Nothing is stored in the range: every block is one
 * 32-byte record out of band (HH_VHEAP_RECORD_BYTES, sizeof of the record,
 * static-asserted; free and live blocks alike), plus, for a live block, its
 * 16-byte slot in the handle table (the generic table of handles.h, as in the
 * relocatable heap). hh_vheap_stats.meta_bytes gives the whole figure.
 * Allocation takes the lowest free range that fits (an address-ordered tree
 * of free blocks with per-subtree size classes: O(log n), no walk), so the
 * heap stays packed at the bottom.
 *
 * Two-phase moves. hh_vdefrag_begin plans at most budget.max_moves moves of
 * at most budget.max_bytes bytes in all: the highest movable blocks, each into
 * the lowest free range below it that fits (alignment kept); with
 * HH_VDEFRAG_AUTO also slides (two copies, in two passes) when nothing fits. Until
 * hh_vdefrag_end, the source and destination of every planned move stay
 * reserved: no allocation lands in a destination, and a source freed during
 * the pass is not reused. Sources and destinations of one pass never overlap
 * (neither within a move nor across moves), so the copies may run in any order
 * or in parallel. hh_voffset keeps returning the source offset until end.
 * At end every move has a result:
 *   HH_VMOVE_DONE       the copy was made: the handle's offset becomes dst,
 *                       the source range is freed.
 *   HH_VMOVE_SKIPPED    no copy (resource in use): the block stays at src,
 *                       the destination is freed.
 *   HH_VMOVE_CANCELLED  the caller drops the resource: the handle is freed
 *                       (it becomes stale at end) and both ranges are freed.
 * A handle freed by hh_vfree during the pass becomes stale at once (its source
 * range stays reserved until end); its move ends as cancelled whatever result
 * is given. A block pinned during the pass stays where it is: its move ends as
 * skipped whatever result is given. hh_vresize of a block in the pass fails
 * with HH_E_PINNED. Allocation, free, pin, grow and shrink are allowed while a
 * pass is open; one pass at a time.
 *
 * hh_vheap_desc defaults (zero fields):
 *   size          required, HH_VHEAP_GRANULE .. HH_VHEAP_MAX_SIZE; rounded down to the granule
 *   max_handles   size / 256 (at least 64, at most HH_HANDLE_MAX_SLOTS - 1)
 *
 * Errors: as the relocatable heap (heap.h): bad input returns a status (or
 * HH_NULL / HH_VOFFSET_NONE with hh_last_error set) and one message through
 * the error handler, and changes nothing. Stale, forged and foreign handles
 * give HH_E_STALE_HANDLE. Metadata memory comes from the library's metadata
 * seam; when it runs out the call fails with HH_E_NO_MEMORY and changes
 * nothing (hh_vdefrag_begin may then plan fewer moves).
 * NULL arguments, in every function: a NULL heap, out or callback is reported
 * once (HH_E_INVALID_ARG, the message led by the function's name) and changes
 * nothing; an out the call was given is cleared (NULL / 0 / all zero) before
 * any early return. Getters that return a value report a NULL heap and a
 * stale handle and return their neutral value (0, false, HH_VOFFSET_NONE).
 * Optional outs, documented as "may be NULL", are not errors when NULL;
 * hh_vheap_destroy(NULL) is a no-op (like free).
 * Not thread-safe: serialise all calls on one heap (so no getter takes a lock).
 */
#ifndef HHEAP_VHEAP_H
#define HHEAP_VHEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"
#include "hheap/heap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hh_vheap hh_vheap;

enum {
    HH_VHEAP_GRANULE      = 16,       /* block sizes and offsets are multiples of this */
    HH_VHEAP_MAX_ALIGN    = 65536,    /* largest alignment hh_valloc accepts */
    HH_VHEAP_MAX_PINS     = 127,      /* pin count limit per block */
    HH_VHEAP_RECORD_BYTES = 32,       /* out-of-band metadata per block (handle slot aside) */
    HH_VBLOCK_RESERVED    = 3,        /* walk state beside HH_BLOCK_*: a planned destination,
                                         or the source of a handle freed during the pass */
};
#define HH_VHEAP_MAX_SIZE ((uint64_t)1 << 47)   /* bytes */
#define HH_VOFFSET_NONE   UINT64_MAX             /* hh_voffset of a stale handle */

typedef struct hh_vheap_desc {        /* zero-initialise; zero fields take defaults */
    uint64_t size;                    /* bytes of the virtual range (required) */
    uint32_t max_handles;             /* 0: size / 256 */
    uint32_t flags;                   /* none yet: must be 0 */
} hh_vheap_desc;

/* ---------------------------------------------------------------------------
   Life cycle
--------------------------------------------------------------------------- */
/* Creates a virtual heap of desc.size bytes (no memory of that size is
   allocated: only metadata). HH_E_INVALID_ARG for a bad desc (out NULL),
   HH_E_NO_MEMORY for want of metadata. */
HH_API hh_status hh_vheap_create(const hh_vheap_desc *desc, hh_vheap **out);
/* Destroys the heap; every handle becomes invalid. NULL is a no-op. */
HH_API void      hh_vheap_destroy(hh_vheap *heap);
/* Current size of the range in bytes (0 + HH_E_INVALID_ARG for NULL). */
HH_API uint64_t  hh_vheap_size(const hh_vheap *heap);
/* Extends the range to new_size bytes (rounded down to the granule); the new
   space joins the top free region. HH_E_INVALID_ARG if new_size is below the
   current size or above HH_VHEAP_MAX_SIZE; HH_E_NO_MEMORY. */
HH_API hh_status hh_vheap_grow(hh_vheap *heap, uint64_t new_size);
/* Cuts the top free region off: the range then ends at the highest used byte
   (live, pinned or reserved; 0 for an empty heap -- an empty range accepts no
   allocation until it grows). *out_size (may be NULL) gets the new size (0
   when heap is NULL: HH_E_INVALID_ARG). Run passes to compactness first to
   shrink to the live bytes. */
HH_API hh_status hh_vheap_shrink(hh_vheap *heap, uint64_t *out_size);

/* ---------------------------------------------------------------------------
   Blocks
--------------------------------------------------------------------------- */
/* A block of at least size bytes at an offset that is a multiple of align
   (power of two, 1..HH_VHEAP_MAX_ALIGN; below the granule it is the granule).
   HH_NULL + last error: HH_E_INVALID_ARG (size 0 or too large, bad align),
   HH_E_NO_MEMORY (no free range fits: run passes or grow; or handle table
   full; or no metadata memory). */
HH_API hh_handle hh_valloc(hh_vheap *heap, uint64_t size, uint64_t align, uint32_t tag);
/* Frees h. HH_NULL: no-op, HH_OK. Stale, forged or foreign: HH_E_STALE_HANDLE,
   nothing touched. Pinned: HH_E_PINNED. During a pass see the header comment. */
HH_API hh_status hh_vfree(hh_vheap *heap, hh_handle h);
/* Changes the size of h's block in place, keeping its offset: shrinking always
   succeeds, growing succeeds when the free range right after the block holds
   the extra bytes (the library cannot copy: otherwise HH_E_NO_MEMORY and the
   block is unchanged -- allocate a new block and copy). HH_E_PINNED for a
   block that an open pass moves. */
HH_API hh_status hh_vresize(hh_vheap *heap, hh_handle h, uint64_t new_size);
/* Offset of h's block; HH_VOFFSET_NONE if h is null or stale (HH_E_STALE_HANDLE
   reported). Changes only at hh_vdefrag_end. */
HH_API uint64_t  hh_voffset(const hh_vheap *heap, hh_handle h);
/* Block bytes of h (at least what was asked for); 0 if h is null or stale
   (HH_E_STALE_HANDLE reported, as by hh_voffset). */
HH_API uint64_t  hh_vsize(const hh_vheap *heap, hh_handle h);
/* Tag given at allocation; 0 if h is null or stale (HH_E_STALE_HANDLE reported). */
HH_API uint32_t  hh_vtag(const hh_vheap *heap, hh_handle h);
/* Counted pin: a pinned block is never planned to move. HH_E_STALE_HANDLE;
   HH_E_INVALID_ARG when the count would pass HH_VHEAP_MAX_PINS. */
HH_API hh_status hh_vpin(hh_vheap *heap, hh_handle h);
/* Drops one pin. HH_E_STALE_HANDLE; HH_E_INVALID_ARG if h is not pinned. */
HH_API hh_status hh_vunpin(hh_vheap *heap, hh_handle h);

/* ---------------------------------------------------------------------------
   Two-phase defragmentation
--------------------------------------------------------------------------- */
typedef enum hh_vdefrag_policy {
    HH_VDEFRAG_FILL = 0,              /* highest blocks into the lowest holes below them that fit;
                                         a hole that no block above it fits stays */
    HH_VDEFRAG_AUTO = 1,              /* FILL, and when a whole sweep fills nothing while holes
                                         remain, a slide made of two non-overlapping copies: the
                                         block right above the lowest hole moves up, the next sweep
                                         fills the merged hole. Reaches full compaction (pinned
                                         blocks aside), at up to twice those blocks' bytes */
} hh_vdefrag_policy;
typedef struct hh_vdefrag_budget {    /* zero-initialise: no limits, FILL */
    uint32_t max_moves;               /* 0: no limit */
    uint64_t max_bytes;               /* bytes of all moves of the pass; 0: no limit */
    hh_vdefrag_policy policy;
} hh_vdefrag_budget;
typedef struct hh_vmove {
    hh_handle handle;
    uint64_t  src_offset, dst_offset, size;   /* whole block; [src, src+size) and [dst, dst+size) are disjoint;
                                                 dst < src except for the first copy of an AUTO slide */
} hh_vmove;
typedef struct hh_vdefrag_pass {
    uint32_t        move_count;
    const hh_vmove *moves;            /* valid until hh_vdefrag_end */
    uint64_t        bytes;            /* sum of the moves' sizes */
    bool            compact;          /* nothing left for the policy: a whole sweep planned nothing */
} hh_vdefrag_pass;
typedef enum hh_vmove_result {
    HH_VMOVE_DONE = 0, HH_VMOVE_SKIPPED = 1, HH_VMOVE_CANCELLED = 2,
} hh_vmove_result;
typedef struct hh_vdefrag_report {
    uint32_t done, skipped, cancelled;
    uint64_t bytes_moved;             /* bytes of the done moves */
} hh_vdefrag_report;

/* Plans a pass (see the header comment) and opens it; *out describes it. A
   pass with no moves is still open and must be ended. budget NULL: no limit.
   Cost: O((moves + blocks examined) log n); the blocks examined are bounded
   by the budget (a few per planned move), not by the heap's size.
   HH_E_INVALID_ARG (NULL heap or out, a pass already open, unknown policy), HH_E_NO_MEMORY
   (no metadata for a single move; no pass opened). *out is zeroed before any
   early return. */
HH_API hh_status hh_vdefrag_begin(hh_vheap *heap, const hh_vdefrag_budget *budget, hh_vdefrag_pass *out);
/* Closes the open pass. results[i] is the outcome of moves[i] (NULL: every
   move done). report may be NULL (else zeroed before any early return).
   HH_E_INVALID_ARG (heap NULL, no pass open, a result out of range: the pass
   stays open, nothing changed). Never fails for memory. */
HH_API hh_status hh_vdefrag_end(hh_vheap *heap, const hh_vmove_result *results, hh_vdefrag_report *report);
/* True while a pass is open (false + HH_E_INVALID_ARG for NULL). */
HH_API bool      hh_vdefrag_active(const hh_vheap *heap);
/* The done moves of the last ended pass (offsets as planned); *out valid until
   the next hh_vdefrag_begin. Returns their number. heap or out NULL: 0 +
   HH_E_INVALID_ARG (*out set to NULL when out is not), as hh_defrag_journal. */
HH_API size_t    hh_vdefrag_journal(const hh_vheap *heap, const hh_vmove **out);

/* ---------------------------------------------------------------------------
   Statistics, walk, check
--------------------------------------------------------------------------- */
typedef struct hh_vheap_stats {
    uint64_t size;                    /* bytes of the range = used + reserved + free */
    uint64_t used_bytes;              /* live and pinned blocks */
    uint64_t reserved_bytes;          /* destinations and freed sources of the open pass */
    uint64_t free_bytes, largest_free;
    uint64_t high_water;              /* end of the highest used or reserved block */
    uint32_t live_blocks, free_blocks, pinned_blocks;
    double   fragmentation;           /* 1 - largest_free / free_bytes; 0 when free_bytes == 0 */
    uint64_t total_moves, total_bytes_moved;   /* done moves since create */
    uint64_t meta_bytes;              /* metadata: heap object, record pool, issued handle slots */
    uint32_t records;                 /* block records in use (free + live + reserved blocks) */
} hh_vheap_stats;
/* Every figure but largest_free is kept by the mutations; largest_free is a
   search of the free tree's largest size class (O(log n) in practice).
   HH_E_INVALID_ARG reported for a NULL out, or a NULL heap (*out zeroed). */
HH_API void      hh_vheap_stats_get(const hh_vheap *heap, hh_vheap_stats *out);
/* Calls fn for every block in address order (hh_block_info of heap.h: state
   HH_BLOCK_FREE / LIVE / PINNED or HH_VBLOCK_RESERVED). fn must not mutate the heap.
   heap or fn NULL: HH_E_INVALID_ARG reported, nothing called. */
HH_API void      hh_vheap_walk(const hh_vheap *heap, hh_walk_fn fn, void *user);
/* Checks every invariant (V1..V8 in src/vheap/vheap_internal.h); HH_OK or
   HH_E_CORRUPT with a message naming the first violation. O(n). */
HH_API hh_status hh_vheap_check(const hh_vheap *heap);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_VHEAP_H */
