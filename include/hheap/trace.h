/* hheap/trace.h -- recording a relocatable heap's operations and replaying them.
 *
 * How to use
 *   hh_trace *tr;
 *   hh_trace_open(heap, "game.hhtrace", &tr);   // heap must be empty; installs its event hook
 *   ... the game runs: every successful alloc, free, resize, pin, unpin and
 *       defrag step is appended to the file (buffered) ...
 *   hh_trace_close(tr);                          // before hh_heap_destroy(heap)
 *
 *   hh_trace_log *log;                           // later, elsewhere (build/hh-replay)
 *   hh_trace_load("game.hhtrace", &log);
 *   hh_heap_desc d; hh_trace_desc(&log->info, &d);
 *   hh_heap_create(&d, &fresh);
 *   hh_trace_replay(log, fresh, NULL, NULL);     // HH_OK: same final heap state
 *
 * The recorder uses the heap's event hook (hh_heap_set_event_hook), so it
 * replaces any hook already installed, and sees operations in the order the
 * heap lock serialised them. Replay maps each recorded handle to the handle the
 * fresh heap gives back. Block placement is deterministic, so replaying the
 * same operations on a heap of the same size, handle count, flags and defrag
 * policy reproduces the same blocks at the same offsets; the trace ends with a
 * summary of the final hh_heap_walk (block count and a hash of every block's
 * offset, size, state and tag) and of the statistics, and hh_trace_replay checks
 * the replayed heap against it. A defrag step that stopped on its time budget
 * (max_ns) is replayed as a step of exactly the moves it made.
 *
 * What a replay cannot see: the hook reports successful operations only, so
 * a call that fails after changing something (an hh_alloc or hh_resize that
 * compacted and still found no room, or that merged the heap's cache of freed
 * blocks before finding none; an hh_resize that touched the defrag cursor
 * before failing) and hh_defrag_configure after the open are not in the
 * trace; replaying such a trace reports HH_E_CORRUPT at the first divergence.
 * A policy change is recorded (as an HH_TRACE_EV_POLICY record) just before the
 * next event. For guaranteed replays of time-budgeted steps, record with
 * hh_defrag_config.deterministic set.
 *
 * File format (version 1; integers little-endian; "v" = LEB128 varint):
 *   header   "HHTRACE\0", u32 version, u64 capacity, u64 managed bytes,
 *            u32 max_handles, u32 flags, u32 policy, u32 base address mod 4096,
 *            u32 caller-owned memory (0/1), defrag config: u32 bits
 *            (1 deterministic, 2 trigger, 4 no_decommit), f64 start fragmentation,
 *            u64 start wasted bytes, f64 stop fragmentation, u64 retain bytes,
 *            u64 decommit min bytes, u32 0                             (96 bytes)
 *   events   u8 kind (hh_heap_event_kind or HH_TRACE_EV_POLICY), then
 *              ALLOC  v handle, v size, v align, v tag
 *              FREE / PIN / UNPIN  v handle
 *              RESIZE v handle, v size
 *              DEFRAG_STEP  v policy, v max_moves, v moves, v max_bytes, v max_ns
 *              DEFRAG_FULL  v policy, v moves   (hh_defrag_full, replayed as itself)
 *              POLICY v policy
 *   end      u8 0xFF, v event count, v blocks, u64 walk hash, v used_bytes,
 *            v free_bytes, v largest_free, v live, v free, v pinned blocks,
 *            v moves, v bytes moved (both counted from the open)
 *   checksum u64 FNV-1a of every byte before it
 * A file that was not closed (no end record), cut short or altered fails to
 * load with HH_E_CORRUPT.
 */
#ifndef HHEAP_TRACE_H
#define HHEAP_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"
#include "hheap/heap.h"
#include "hheap/defrag.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    HH_TRACE_VERSION   = 1,
    HH_TRACE_EV_POLICY = 64,       /* trace-only event kind: the defrag policy changed (`policy`) */
};

/* ---------------------------------------------------------------------------
   Recording
--------------------------------------------------------------------------- */
typedef struct hh_trace hh_trace;

/* Starts recording heap's operations into a new file at path (truncated if it
   exists). HH_E_INVALID_ARG (NULL argument, heap not empty: live or pinned blocks),
   HH_E_IO (the file cannot be created), HH_E_NO_MEMORY. On failure *out is NULL
   and the heap is untouched. */
HH_API hh_status hh_trace_open(hh_heap *heap, const char *path, hh_trace **out);
/* Removes the hook, appends the summary of the heap's final state and closes
   the file. Call it while the heap is alive and no other thread uses it.
   HH_E_IO if any write failed (the file is then incomplete); NULL: no-op, HH_OK. */
HH_API hh_status hh_trace_close(hh_trace *t);
/* Events recorded so far; 0 and HH_E_INVALID_ARG reported for NULL. Lock-free:
   any thread may ask while others record. */
HH_API uint64_t  hh_trace_event_count(const hh_trace *t);

/* ---------------------------------------------------------------------------
   Reading
--------------------------------------------------------------------------- */
typedef struct hh_trace_info {     /* the recorded heap, from the header */
    uint32_t version;
    size_t   capacity;             /* resolved desc capacity, bytes */
    size_t   managed_bytes;        /* hh_heap_managed_bytes at open */
    uint32_t max_handles;          /* resolved desc max_handles */
    uint32_t flags;                /* desc flags (HH_HEAP_*) */
    hh_defrag_policy policy;       /* policy at open */
    uint32_t base_misalign;        /* hh_heap_base mod 4096: alignments above 16 depend on it */
    bool     caller_memory;        /* the heap ran on a caller-owned buffer */
    hh_defrag_config defrag;       /* defrag configuration at open (resolved) */
} hh_trace_info;

typedef struct hh_trace_event {
    hh_heap_event    ev;           /* as the hook saw it; ev.handle is the recorded handle;
                                      ev.kind may also be HH_TRACE_EV_POLICY */
    hh_defrag_policy policy;       /* DEFRAG_STEP: policy the step ran with; POLICY: the new policy */
} hh_trace_event;

typedef struct hh_trace_summary {
    uint64_t events;               /* events recorded (not compared) */
    uint64_t blocks;               /* blocks of the final walk */
    uint64_t walk_hash;            /* FNV-1a over (offset, size, state, tag) of every block, address order */
    size_t   used_bytes, free_bytes, largest_free;
    uint32_t live_blocks, free_blocks, pinned_blocks;
    uint64_t moves, bytes_moved;   /* relocations since the trace was opened */
} hh_trace_summary;

typedef struct hh_trace_log {      /* a whole trace in memory */
    hh_trace_info    info;
    hh_trace_event  *events;       /* event_count events in recorded order */
    size_t           event_count;
    hh_trace_summary summary;      /* the recording's final state */
} hh_trace_log;

/* Reads and checks a whole trace. HH_E_IO (cannot open or read), HH_E_CORRUPT
   (not a trace, unknown version, truncated, checksum or record invalid; the
   message says which), HH_E_NO_MEMORY, HH_E_INVALID_ARG. *out NULL on failure. */
HH_API hh_status hh_trace_load(const char *path, hh_trace_log **out);
/* Frees a loaded trace; NULL is a no-op. */
HH_API void      hh_trace_log_free(hh_trace_log *log);

/* ---------------------------------------------------------------------------
   Replaying
--------------------------------------------------------------------------- */
/* The desc of a heap like the recorded one (capacity, max_handles, flags, and for
   an HH_HEAP_GROWABLE heap commit: the managed bytes at open); memory,
   on_move and user are left NULL. With info->base_misalign != 0 the caller must
   give a buffer whose address has that remainder mod 4096 for an exact replay. */
HH_API void      hh_trace_desc(const hh_trace_info *info, hh_heap_desc *out);
/* The summary of heap's current state (walk + stats); moves and bytes_moved are
   the heap's totals, events is 0. */
HH_API void      hh_trace_summarise(const hh_heap *heap, hh_trace_summary *out);
/* true if a and b describe the same heap state (events not compared); false
   and HH_E_INVALID_ARG reported if either is NULL. */
HH_API bool      hh_trace_summary_equal(const hh_trace_summary *a, const hh_trace_summary *b);

/* Called after each replayed event (index i) -- for measurements. */
typedef void (*hh_trace_replay_fn)(hh_heap *heap, size_t i, void *user);
/* Replays every event of log on heap, a fresh heap made from hh_trace_desc, after
   setting the recorded policy and defrag configuration, then compares the final state with log->summary.
   HH_OK: identical. HH_E_CORRUPT: an operation failed or referred to an unknown
   handle, or the final state differs (the message names the event or the field).
   HH_E_INVALID_ARG (NULL argument, heap not empty), HH_E_NO_MEMORY. */
HH_API hh_status hh_trace_replay(const hh_trace_log *log, hh_heap *heap, hh_trace_replay_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_TRACE_H */
