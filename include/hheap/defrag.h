/* hheap/defrag.h -- incremental defragmentation of the relocatable heap.
 *
 * Call hh_defrag_step(heap, N) once a frame: it moves at most N blocks
 * downwards so that the holes left by freed objects rise to the top of the
 * heap and merge into one free region. Every pointer obtained from hh_deref
 * before the step is dead after it (pinned blocks excepted): deref again.
 *
 * Policies (hh_defrag_set_policy):
 *   HH_DEFRAG_SLIDE  Game Engine Architecture's algorithm: the block just above
 *                    the lowest hole slides down into it; keeps address order.
 *   HH_DEFRAG_FILL   the highest movable block moves into the lowest hole that
 *                    fits it (best fit); moves fewer bytes when sizes repeat.
 *   HH_DEFRAG_AUTO   (default) FILL where a fitting hole exists, SLIDE otherwise.
 * Pinned blocks never move; holes below them are filled, not slid through.
 * No step scans the whole heap: its cost is proportional to the moves it makes.
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

/* 0 = no limit. Each limit is checked before every move. */
typedef struct hh_defrag_budget { uint32_t max_moves; size_t max_bytes; uint64_t max_ns; } hh_defrag_budget;

typedef struct hh_defrag_report {
    uint32_t moves; size_t bytes_moved; uint64_t elapsed_ns;
    bool     compact;                  /* no hole left below the top free region, pinned blocks aside */
} hh_defrag_report;

/* The once-a-frame call: at most max_moves moves (0: no limit). */
HH_API hh_defrag_report hh_defrag_step(hh_heap *heap, uint32_t max_moves);
/* A step under a full budget (NULL: no limit). */
HH_API hh_defrag_report hh_defrag_step_ex(hh_heap *heap, const hh_defrag_budget *budget);
/* Compacts completely (no budget). */
HH_API hh_defrag_report hh_defrag_full(hh_heap *heap);
HH_API void             hh_defrag_set_policy(hh_heap *heap, hh_defrag_policy policy);
HH_API hh_defrag_policy hh_defrag_get_policy(const hh_heap *heap);
/* Short name of a policy ("auto", "slide", "fill"). */
HH_API const char      *hh_defrag_policy_str(hh_defrag_policy policy);

/* ---------------------------------------------------------------------------
   Relocation journal: the moves of the last step (and of any compaction an
   allocation ran since), readable until the next step begins.
--------------------------------------------------------------------------- */
typedef struct hh_move_record {
    hh_handle handle;
    size_t    src_offset, dst_offset;  /* block offsets from the managed start */
    size_t    size;                    /* whole block bytes */
} hh_move_record;
/* Number of records; *out points at them (valid until the next step). */
HH_API size_t hh_defrag_journal(const hh_heap *heap, const hh_move_record **out);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_DEFRAG_H */
