/* hheap/defrag.h -- incremental defragmentation of the relocatable heap.
 *
 * How to use
 *   hh_defrag_step(heap, 16);                      // once a frame, at a frame boundary
 *   ... re-deref every handle you use ...
 *   hh_defrag_configure(heap, &(hh_defrag_config){ .trigger = true });   // optional
 *   hh_defrag_metrics m; hh_defrag_metrics_get(heap, &m);               // O(log n)
 *
 * Call hh_defrag_step(heap, N) once a frame: it moves at most N blocks
 * downwards so that the holes left by freed objects rise to the top of the
 * heap and merge into one free region. Every pointer obtained from hh_deref
 * before the step is dead after it (pinned blocks excepted): deref again.
 *
 * Policies (hh_defrag_set_policy).
 *   HH_DEFRAG_AUTO   (default) moves what pays off. In a bounded step while the
 *                    game allocates (something was allocated in the last 8
 *                    steps) it
 *                    1. evacuates sparse, quiet ranges: a region of the heap
 *                       (1/1024 of it, at least 4 KiB) at most 7/8 live that no
 *                       allocation landed in for 8 steps holds stranded holes;
 *                       its blocks go into holes below it that fit them, or
 *                       slide together, so its free bytes become one block;
 *                    2. lowers the top: the highest block, if no allocation
 *                       landed in its region for 8 steps, into a hole below it;
 *                    3. closes holes one by one (the loop below) only while
 *                       they hold at least 1/8 of the live bytes, until 1/32,
 *                       sliding no block over a hole less than half its size.
 *                    What is left is the game's working space, which its own
 *                    allocations refill: the step stops with
 *                    HH_DEFRAG_STOP_BUSY and `compact` false. A block the game
 *                    allocated a few frames ago is left where it is: it will
 *                    probably die before a move pays off.
 *                    In a quiet heap, or in a step with no limit, AUTO fills
 *                    sparse holes (under 1/8 of the live bytes) with the
 *                    highest blocks that fit, and closes dense ones with the
 *                    loop until the heap is compact.
 * The loop looks at the lowest hole H (a free block below the top free
 * region) and at the 32 highest movable blocks above it (the "window"):
 *   HH_DEFRAG_SLIDE  Game Engine Architecture's algorithm: the block just above
 *                    H slides down into it; keeps address order. Moves every
 *                    live byte above the lowest hole once.
 *   HH_DEFRAG_FILL   the highest movable block moves into the lowest hole that
 *                    fits it (H if it fits, else the best-fitting hole below it
 *                    from the free lists); when it fits nowhere, H is closed as
 *                    AUTO would. Good when holes are larger than the blocks above.
 *   HH_DEFRAG_AUTO   the window block that fits H best fills it:
 *                    one that closes H (a rest of at most 48 bytes becomes the
 *                    moved block's slack), else one whose rest another window
 *                    block fills exactly, else the largest that fits. When none
 *                    fits, a sliver hole (<= 64 bytes) becomes the slack of the
 *                    block below it (nothing moves; see absorbed_bytes in the
 *                    metrics), any other hole is closed by sliding the block
 *                    above it down. Every moved block lands at the start of
 *                    the lowest hole, below every hole that remains, so (no
 *                    pins, no alignment above 16) no block moves twice in the
 *                    loop; when sizes repeat it moves about the lower bound
 *                    (live bytes above the final boundary), see
 *                    bench/bench_defrag.c.
 * Pinned blocks never move. A hole under a pinned block (or under a block whose
 * alignment leaves it no room to go down) is filled from the window, never slid
 * through; if nothing in the window fits, it stays.
 *
 * `compact` (hh_defrag_report) means, precisely: every free block below the top
 * free region is a hole this service cannot close -- the block right above it
 * cannot slide into it (pinned, or its alignment leaves no room), none of the
 * window's blocks above it fits into it, and (AUTO, FILL) it is no sliver the
 * block below it could take as slack. With no
 * pinned block and no alignment above 16 that is: at most one free block. A
 * bounded step that passed over a block larger than its max_bytes (see
 * oversize_bytes), and an AUTO step that stopped BUSY, never report compact.
 *
 * Cost: no step scans the heap. AUTO's choice of a range to evacuate reads
 * the heap's region summary (at most 1024 counters) when it starts a job. The
 * lowest hole, the next hole, the block before a block and the top region are
 * bitmap searches (O(log64 n)); a fitting hole is a TLSF list lookup (O(1));
 * the cursor (holes already found unclosable) lives in the heap object. The
 * window (W = 32 blocks) is collected once per step (W bitmap searches) and
 * then only topped up as its blocks move, so a step costs
 * O((W + moves) log n + moves * W); the holes and blocks
 * it looks at are charged to a work limit proportional to max_moves. A step on
 * a heap known to be compact, or with the trigger idle, costs O(1).
 */
#ifndef HHEAP_DEFRAG_H
#define HHEAP_DEFRAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"
#include "hheap/heap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hh_defrag_policy { HH_DEFRAG_AUTO = 0, HH_DEFRAG_SLIDE, HH_DEFRAG_FILL } hh_defrag_policy;

/* 0 = no limit. Each limit is checked before every move: a step never makes
   more than max_moves moves nor more than max_bytes payload bytes of moves, and
   starts no move once max_ns have passed since it began (ignored in
   deterministic mode, hh_defrag_config). A block whose payload exceeds max_bytes
   is never moved by a bounded step (only hh_defrag_full moves it). */
typedef struct hh_defrag_budget { uint32_t max_moves; size_t max_bytes; uint64_t max_ns; } hh_defrag_budget;

/* Why a step ended. */
typedef enum hh_defrag_stop {
    HH_DEFRAG_STOP_COMPACT = 0,  /* nothing left to do (see `compact`) */
    HH_DEFRAG_STOP_MOVES,        /* max_moves reached */
    HH_DEFRAG_STOP_BYTES,        /* the next move would exceed max_bytes */
    HH_DEFRAG_STOP_TIME,         /* max_ns passed */
    HH_DEFRAG_STOP_WORK,         /* the step's bookkeeping limit (blocks and holes looked at) was
                                    reached; also the up phase of an HH_HEAP_STRESS_MOVES step */
    HH_DEFRAG_STOP_IDLE,         /* the trigger is idle: the heap is tidy enough, nothing looked at */
    HH_DEFRAG_STOP_OVERSIZE,     /* only blocks larger than max_bytes were left to move */
    HH_DEFRAG_STOP_ERROR,        /* bad argument (reported) */
    HH_DEFRAG_STOP_BUSY,         /* AUTO, while the game allocates: holes were left on purpose --
                                    too few to be worth closing (the game's churn refills them), or
                                    closable only by sliding a block far larger than the hole; see
                                    the policy notes above */
} hh_defrag_stop;

typedef struct hh_defrag_report {
    uint32_t moves; size_t bytes_moved; uint64_t elapsed_ns;   /* bytes_moved: payload bytes */
    bool     compact;                  /* no hole left below the top free region, pinned blocks aside (exact
                                          meaning in the header comment) */
    hh_defrag_stop stop;               /* why the step ended */
    size_t   oversize_bytes;           /* payload of the largest block passed over because it exceeds
                                          max_bytes (0: none); move it with hh_defrag_full or a larger budget */
} hh_defrag_report;

/* ---------------------------------------------------------------------------
   Steps
--------------------------------------------------------------------------- */
/* "No limit" for hh_defrag_step's max_moves. */
#define HH_DEFRAG_UNLIMITED UINT32_MAX

/* The once-a-frame call: at most max_moves moves (HH_DEFRAG_UNLIMITED: no
   limit). 0 moves nothing and does nothing: no clock tick, no event, the
   journal stays (report: stop HH_DEFRAG_STOP_MOVES). NULL heap:
   HH_E_INVALID_ARG, empty report. With HH_HEAP_STRESS_MOVES every movable block
   moves (budget ignored; see heap.h). */
HH_API hh_defrag_report hh_defrag_step(hh_heap *heap, uint32_t max_moves);
/* A step under a full budget (NULL: no limit; a zero field: no limit on that). */
HH_API hh_defrag_report hh_defrag_step_ex(hh_heap *heap, const hh_defrag_budget *budget);
/* Compacts completely: no budget, no trigger, oversize blocks move too. One
   address-order sweep slides every run of movable blocks down with a single
   memmove each (SLIDE order, whatever the policy: it is the fastest way to move
   everything), then the policy closes what pinned or aligned blocks left.
   Under memcheck or ASan (whose view of guard and slack bytes a bulk memmove
   would upset) the policy does all of it, block by block. */
HH_API hh_defrag_report hh_defrag_full(hh_heap *heap);
/* Policy for later steps and for allocation-time compaction. Unknown policy:
   HH_E_INVALID_ARG, policy unchanged; HH_E_NO_MEMORY if the service state
   cannot be allocated (policy unchanged). NULL heap to the getter: reported,
   AUTO. */
HH_API void             hh_defrag_set_policy(hh_heap *heap, hh_defrag_policy policy);
HH_API hh_defrag_policy hh_defrag_get_policy(const hh_heap *heap);
/* Short name of a policy ("auto", "slide", "fill"). */
HH_API const char      *hh_defrag_policy_str(hh_defrag_policy policy);
/* Short name of a stop reason ("compact", "moves", ...). */
HH_API const char      *hh_defrag_stop_str(hh_defrag_stop stop);

/* ---------------------------------------------------------------------------
   Configuration. Zero-initialise; zero fields take the defaults below.
     deterministic                false  max_ns ignored: the moves of a step depend only on
                                         the heap and the budget (replays, tests)
     trigger                      false  hysteresis trigger off: every step works
     trigger_start_fragmentation  0.10   become active above this 1 - largest/free ...
     trigger_start_wasted_bytes   64 KiB ... and at least this many free bytes outside the largest block
     trigger_stop_fragmentation   0.02   become idle below this (or when compact)
     decommit_retain_bytes        256 KiB  bytes at the start of the top region kept resident
     decommit_min_bytes           64 KiB   smallest page range worth an madvise
     decommit_step_bytes          64 KiB   most a bounded step gives back (an madvise costs about
                                           1 us a page); the rest follows in later steps, and
                                           hh_defrag_full gives back everything at once
     no_decommit                  false  true: never give pages back
   Allocation-time compaction follows the policy and is unaffected by the trigger.
--------------------------------------------------------------------------- */
typedef struct hh_defrag_config {
    bool     deterministic;               /* ignore max_ns */
    bool     trigger;                     /* steps work only while the hysteresis trigger is active */
    double   trigger_start_fragmentation; /* 0..1 (1 - largest_free / free_bytes) */
    size_t   trigger_start_wasted_bytes;  /* free_bytes - largest_free, bytes */
    double   trigger_stop_fragmentation;  /* 0..1, below the start value */
    size_t   decommit_retain_bytes;       /* bytes */
    size_t   decommit_min_bytes;          /* bytes */
    size_t   decommit_step_bytes;         /* bytes */
    bool     no_decommit;
} hh_defrag_config;
/* Sets the configuration (NULL: all defaults). HH_E_INVALID_ARG (nothing
   changed) for a NULL heap, a fragmentation outside [0, 1] or a stop value above
   the start value; HH_E_NO_MEMORY if the service state cannot be allocated. */
HH_API hh_status hh_defrag_configure(hh_heap *heap, const hh_defrag_config *config);
/* Why hh_defrag_configure would refuse `config` (defaults applied; NULL: all
   defaults), as a static string; NULL if it would accept it. Reports nothing
   through the error handler: for loaders and tools that vet a configuration
   read from elsewhere before they use it. */
HH_API const char *hh_defrag_config_problem(const hh_defrag_config *config);
/* The resolved configuration (defaults applied). */
HH_API void      hh_defrag_config_get(const hh_heap *heap, hh_defrag_config *out);

/* ---------------------------------------------------------------------------
   Metrics: all O(1) or O(log n), cheap enough to read every frame.
--------------------------------------------------------------------------- */
typedef struct hh_defrag_metrics {
    size_t   free_bytes;               /* whole free blocks */
    size_t   largest_free;             /* largest free block */
    size_t   top_free_bytes;           /* the top free region (0 if the last block is live) */
    uint32_t hole_count;               /* free blocks below the top free region */
    double   fragmentation;            /* 1 - largest_free / free_bytes (as hh_heap_stats) */
    double   fragmentation_sq;         /* 1 - sum(f^2) / (sum f)^2 over free blocks f: 0 for one
                                          block, towards 1 for many equal small holes */
    size_t   debt_bytes;               /* compaction debt: bytes of live blocks, pinned ones included,
                                          above the lowest hole (as hh_mapdump_metrics.compaction_debt).
                                          Freed blocks the heap keeps for reuse count as holes; while it
                                          keeps some, the figure is exact unless the lowest one it took
                                          since the last step was reused (then an upper bound) */
    uint64_t frames_to_compact;        /* estimate: steps of N moves to close the holes, N = the
                                          last step's max_moves (16 before any step, 1 if unlimited) */
    size_t   pinned_bytes;             /* whole pinned blocks */
    size_t   blocking_pinned_bytes;    /* pinned blocks right above holes the last scan found unclosable */
    size_t   stuck_hole_bytes;         /* free bytes of those holes */
    uint32_t stuck_holes;
    size_t   decommitted_bytes;        /* top-region bytes currently given back to the OS */
    bool     trigger_active;           /* hysteresis state (false when the trigger is off) */
    uint64_t steps, compact_steps, idle_steps;   /* steps run, ended compact, skipped by the trigger */
    uint64_t moves, bytes_moved;       /* by steps and hh_defrag_full (not allocation-time compaction) */
    uint64_t absorbed_bytes;           /* sliver holes (<= 64 bytes) that AUTO/FILL closed by making them
                                          the slack of the block below instead of sliding (cumulative;
                                          those bytes count as used until that block moves or is freed) */
    uint64_t evacuations;              /* AUTO: sparse, quiet ranges it started to evacuate (cumulative) */
} hh_defrag_metrics;
/* Fills *out. HH_E_INVALID_ARG for NULL arguments. */
HH_API hh_status hh_defrag_metrics_get(const hh_heap *heap, hh_defrag_metrics *out);

/* ---------------------------------------------------------------------------
   Relocation journal: the moves of the last step, plus those made since by
   allocation-time compaction and by hh_resize; readable until the next call
   that can move a block (any hh_defrag_step/full, hh_resize, hh_alloc*): the
   array may be reallocated when a later move is recorded.
--------------------------------------------------------------------------- */
/* hh_move_record (one relocation) is declared in heap.h: the heap records the moves. */
/* Number of records; *out points at them (valid until the next call that can
   move a block, see above). If a
   record could not be stored (metadata allocation failed) the move still
   happened; the journal is then short. */
HH_API size_t hh_defrag_journal(const hh_heap *heap, const hh_move_record **out);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_DEFRAG_H */
