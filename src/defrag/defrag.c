/* defrag.c -- hh_defrag_step and friends: the policy side of compaction.
 *
 * A step is a loop of single moves, each charged to the budget before it is
 * made. SLIDE takes the lowest hole whose upper neighbour can move and slides
 * that neighbour down (Game Engine Architecture's algorithm): the hole rises
 * and merges with the next one. Holes under pinned blocks (or under a block
 * whose alignment leaves no room to go down) are stepped over; finding the next
 * hole is a bitmap search, so a step costs O((moves + holes skipped) log n) and
 * never walks the heap.
 *
 * `compact` in the report: no free block below the top free region could still
 * be closed by a slide (holes under pinned or alignment-stuck blocks aside).
 */
#include "defrag_internal.h"

#include "../common/hh_error.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   State
--------------------------------------------------------------------------- */
static void defrag_state_free(struct hhi_defrag *d) { hhi_meta_free(d); }

/* The heap's defrag state, created on first use; NULL if that allocation fails
   (a step then still runs, it only keeps no history). */
static struct hhi_defrag *defrag_state(hh_heap *h) {
    if (h->defrag == NULL) {
        h->defrag = hhi_meta_alloc(sizeof *h->defrag);
        h->defrag_free = defrag_state_free;
    }
    return h->defrag;
}

/* ---------------------------------------------------------------------------
   SLIDE
--------------------------------------------------------------------------- */
/* The lowest free block at or after f whose upper neighbour can slide into it;
   NULL if none is left below the top free region. */
static hhi_block *slidable_hole(const hh_heap *h, hhi_block *f) {
    while (f) {
        hhi_block *n = blk_next(h, f);
        if (n == NULL) return NULL;                          /* f is the top free region */
        if (blk_pins(n) == 0) {
            size_t foff = blk_offset(h, f), dst = hh_align_up(foff, blk_align(n));
            if (dst < blk_offset(h, n)) return f;            /* hh_heap_slide_down can make progress */
        }
        f = hhi_heap_free_at_or_after(h, blk_offset(h, n) + blk_size(n));
    }
    return NULL;
}

/* true if the budget allows one more move of `bytes` payload bytes. */
static bool budget_allows(const hh_defrag_budget *b, const hh_defrag_report *r, size_t bytes, uint64_t t0) {
    if (b->max_moves && r->moves >= b->max_moves) return false;
    if (b->max_bytes && r->bytes_moved + bytes > b->max_bytes) return false;
    if (b->max_ns && hhi_now_ns() - t0 >= b->max_ns) return false;
    return true;
}

static hh_defrag_report defrag_run(hh_heap *h, const hh_defrag_budget *budget) {
    hh_defrag_report r = {0};
    uint64_t t0 = hhi_now_ns();
    heap_lock(h);
    struct hhi_defrag *d = defrag_state(h);
    hhi_heap_journal_reset(h);
    hhi_block *f = slidable_hole(h, hhi_heap_lowest_free(h));
    while (f) {
        hhi_block *n = blk_next(h, f);
        size_t bytes = blk_usable(h, n);
        if (!budget_allows(budget, &r, bytes, t0)) break;
        hhi_block *moved = hhi_heap_slide_down(h, f, n);
        hh_assert(moved != NULL);
        if (moved == NULL) break;
        r.moves++;
        r.bytes_moved += bytes;
        hhi_block *after = blk_next(h, moved);
        f = slidable_hole(h, (after && blk_is_free(after)) ? after : hhi_heap_free_at_or_after(h, blk_offset(h, moved)));
    }
    r.compact = f == NULL;
    if (d) {
        d->steps++;
        d->steps_compact += r.compact;
    }
    heap_unlock(h);
    r.elapsed_ns = hhi_now_ns() - t0;
    return r;
}

/* ---------------------------------------------------------------------------
   Public API
--------------------------------------------------------------------------- */
hh_defrag_report hh_defrag_step(hh_heap *heap, uint32_t max_moves) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_step: heap is NULL");
        return (hh_defrag_report){0};
    }
    return defrag_run(heap, &(hh_defrag_budget){ .max_moves = max_moves });
}

hh_defrag_report hh_defrag_step_ex(hh_heap *heap, const hh_defrag_budget *budget) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_step_ex: heap is NULL");
        return (hh_defrag_report){0};
    }
    return defrag_run(heap, budget ? budget : &(hh_defrag_budget){0});
}

hh_defrag_report hh_defrag_full(hh_heap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_full: heap is NULL");
        return (hh_defrag_report){0};
    }
    return defrag_run(heap, &(hh_defrag_budget){0});
}

void hh_defrag_set_policy(hh_heap *heap, hh_defrag_policy policy) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_set_policy: heap is NULL");
        return;
    }
    if ((unsigned)policy > HH_DEFRAG_FILL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_set_policy: unknown policy %d", (int)policy);
        return;
    }
    heap_lock(heap);
    heap->policy = policy;
    heap_unlock(heap);
}

hh_defrag_policy hh_defrag_get_policy(const hh_heap *heap) { return heap ? heap->policy : HH_DEFRAG_AUTO; }

const char *hh_defrag_policy_str(hh_defrag_policy policy) {
    switch (policy) {
    case HH_DEFRAG_AUTO: return "auto";
    case HH_DEFRAG_SLIDE: return "slide";
    case HH_DEFRAG_FILL: return "fill";
    }
    return "unknown";
}

size_t hh_defrag_journal(const hh_heap *heap, const hh_move_record **out) {
    if (heap == NULL || out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_journal: NULL argument");
        if (out) *out = NULL;
        return 0;
    }
    *out = heap->journal.rec;
    return heap->journal.count;
}
