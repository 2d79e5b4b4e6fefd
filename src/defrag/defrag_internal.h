/* defrag_internal.h -- state of the incremental defragmentation service.
 *
 * The state hangs off the heap (heap->defrag), created on first use, so two
 * heaps never share a cursor. The mechanism (moving one block) is the heap's
 * (heap_internal.h); this module decides which block goes where and when.
 *
 * The cursor is `floor`: every hole that starts below it was found unclosable
 * (D1). It only ever moves up during a scan, so a step never revisits holes it
 * has passed; it drops back (to the lowest offset a mutation touched, or to 0)
 * when the heap changes below it. Because a move or a mutation above the floor
 * can make a stuck hole closable (a new block in the window may fit it),
 * `floor_dirty` records that, and a scan that reaches the top with the floor
 * dirty rescans from 0 before it may report `compact` (D2).
 *
 * Invariants
 *   D1  every free block starting below floor (other than the top region) was
 *       judged unclosable by a scan -- or passed over by AUTO's slide cap, and
 *       then floor_dirty is set -- and no mutation touched an offset <= floor
 *       since (heap->low_mark is folded in at the start of every step).
 *   D2  known_compact implies: the last scan reached the top region with the
 *       floor clean and moved nothing after, and heap->mutations has not changed
 *       since (known_mutations).
 *   D3  stuck_* describe exactly the holes below floor.
 */
#ifndef HH_DEFRAG_INTERNAL_H
#define HH_DEFRAG_INTERNAL_H

#include "hheap/defrag.h"
#include "../heap/heap_internal.h"

/* Defaults of hh_defrag_config (listed once in defrag.h). */
#define HHI_DEFRAG_START_FRAG   0.10
#define HHI_DEFRAG_STOP_FRAG    0.02
enum {
    HHI_DEFRAG_WINDOW       = 32,           /* highest movable blocks a fill considers for one hole (16
                                               measured clearly worse on repeated sizes: the small
                                               blocks run out); defrag.h's contract names the number */
    HHI_DEFRAG_START_WASTED = 64 << 10,     /* bytes */
    HHI_DEFRAG_RETAIN       = 256 << 10,    /* bytes */
    HHI_DEFRAG_DECOMMIT_MIN = 64 << 10,     /* bytes */
    HHI_DEFRAG_DECOMMIT_STEP = 64 << 10,    /* bytes */
    HHI_DEFRAG_ALLOC_MOVES  = 256,          /* bounded first try of allocation-time compaction */
    HHI_DEFRAG_RANGE_HOLES  = 8192,         /* holes its cheapest-range search looks at */
    HHI_DEFRAG_DEFAULT_N    = 16,           /* moves per frame assumed by the estimate before any step */
    HHI_DEFRAG_WORK_BASE    = 64,           /* work units of a bounded step, plus ... */
    HHI_DEFRAG_WORK_PER_MOVE = HHI_DEFRAG_WINDOW + 8,   /* ... this many per allowed move */
    HHI_DEFRAG_WORK_NO_MOVES = 4096,        /* moves assumed when a bounded step has no move limit */
    HHI_DEFRAG_ABSORB       = 48,           /* a fill leaving at most this many bytes of its hole closes
                                               it: the rest becomes the moved block's slack (a sliver
                                               that small would otherwise cost a chain of slides) */
    HHI_DEFRAG_SLIVER       = 64,           /* a hole this small that nothing in the window fills becomes
                                               the slack of the block below it (AUTO, FILL) */
    HHI_DEFRAG_COLD_STEPS   = 8,            /* a region no allocation landed in for this many steps is
                                               quiet: its holes are stranded, not about to be reused */
    HHI_DEFRAG_JOB_REGIONS  = 16,           /* most regions one evacuation job spans */
    HHI_DEFRAG_FIT_TRIES    = 8,            /* free lists an evacuated block's destination is sought in */
    HHI_DEFRAG_SPARSE_NUM   = 7,            /* a region at most 7/8 live is sparse enough to evacuate */
    HHI_DEFRAG_SPARSE_DEN   = 8,            /* (4/8 left most stranded holes alone; 7/8 measured best
                                               on bench_footprint's phases trace: 1.09 vs 1.29) */
    HHI_DEFRAG_FINISH_START = 8,            /* holes worth a hole-by-hole pass: >= 1/8 of the live bytes ... */
    HHI_DEFRAG_FINISH_STOP  = 32,           /* ... and it goes on until they are down to 1/32 */
    HHI_DEFRAG_SLIDE_CAP    = 2,            /* AUTO while the game allocates slides no block larger than twice
                                               its hole (a 64 KiB level chunk over a 1 KiB hole only lifts
                                               the hole; bench_footprint's demo trace moved 6x the bytes it
                                               freed without this cap, 1.6x with it) */
};

struct hhi_defrag {
    hh_defrag_config cfg;          /* resolved configuration */
    hh_defrag_policy policy;       /* hh_defrag_set_policy (AUTO until set) */

    /* cursor (D1..D3) */
    size_t   floor;                /* offset: holes starting below it are unclosable */
    bool     floor_dirty;          /* moves or mutations since those holes were judged */
    uint64_t seen_mutations;       /* heap->mutations when the cursor was last updated */
    size_t   stuck_bytes;          /* free bytes of the holes below floor */
    uint32_t stuck_holes;          /* their number */
    size_t   blocking_pinned;      /* whole bytes of pinned blocks right above them */
    bool     known_compact;        /* D2 */
    uint64_t known_mutations;      /* heap->mutations when known_compact was set */

    /* the window of the last step, reused while the heap is unchanged */
    hhi_block *win[HHI_DEFRAG_WINDOW];   /* highest movable blocks, descending (may have been pinned since) */
    unsigned win_n;
    bool     win_end;              /* that scan reached its lowest hole */
    bool     win_saved;            /* win[] is worth reusing (see win_mutations, win_max_bytes) */
    uint64_t win_mutations;        /* heap->mutations when saved: any mutation invalidates it */
    size_t   win_max_bytes;        /* the byte budget it was collected under (oversize blocks left out) */

    /* evacuation job (AUTO, evacuate()): a sparse, quiet range of regions whose
       live blocks slide together so that its free bytes become one block */
    bool     job;                  /* a job is under way */
    size_t   job_lo;               /* offset: the sliding front (the gap starts at or after it) */
    size_t   job_end;              /* offset: the job is done when the gap reaches it */
    size_t   job_base;             /* offset where the range starts: blocks evacuate below it */
    uint64_t jobs;                 /* jobs started (hh_defrag_metrics.evacuations) */
    bool     finishing;            /* AUTO's hole-by-hole hysteresis (finishing_pays) */
    uint32_t *done_used;           /* per heap region: its live bytes when a job last finished over it
                                      (UINT32_MAX: never); unchanged since means nothing to gain there */

    /* trigger and pages */
    bool     active;               /* hysteresis trigger state */
    uint64_t dc_mutations;         /* heap->mutations at the last decommit check */
    bool     dc_pending;           /* a capped decommit may have left pages to give back */
    bool     stress_down;          /* HH_HEAP_STRESS_MOVES: next stress step compacts (else moves blocks up) */

    /* statistics */
    uint32_t last_max_moves;       /* N of the last step (for the frames estimate) */
    bool     have_stepped;
    uint64_t steps, steps_compact, steps_idle;
    uint64_t moves, bytes_moved;   /* steps and full compactions */
    uint64_t absorbed_bytes;       /* sliver holes closed as slack (hhi_heap_absorb_hole) */
};

#endif
