/* vheap_defrag.c -- two-phase passes over the virtual heap: hh_vdefrag_begin
 * plans moves the caller performs, hh_vdefrag_end applies their results.
 *
 * Policies (the relocatable heap's FILL and AUTO -- FILL where a block fits,
 * SLIDE otherwise -- made safe for copies that cannot overlap). FILL: walk the
 * blocks from the top down; each movable block goes into the lowest free range below it
 * that holds it at its alignment. Taking the
 * highest blocks first moves the bytes that lie above the final compact
 * boundary, and only those while such a range exists, which is the lower
 * bound of bytes to move when sizes repeat (as meshes and textures do). A
 * destination is always a free range and a source always a used block, so
 * within one pass no copy overlaps another or itself. AUTO: a slide of a
 * block into a hole smaller than itself would overlap, so when a whole sweep fills
 * nothing while holes remain, the slide is made of two copies in two passes
 * (plan_slide): the block right above the lowest hole moves up to the lowest
 * range that holds it, and the next sweep fills the merged hole (with that
 * block, if nothing higher fits). It costs twice the block's bytes and runs
 * only when filling is stuck; holes under pinned blocks are skipped. FILL is
 * the default: the bench (bench/bench_vheap.c) shows the slides' price --
 * closing the last percent of holes can cost more than all the fills.
 *
 * Cost: each examined block costs one O(log n) tree search; the walk stops
 * after 4 * max_moves + 64 examined blocks (or the budget's moves/bytes), so a
 * pass costs what its budget allows, not what the heap holds. The walk is a
 * sweep that spans passes: a pass cut short leaves a cursor at the next block
 * to examine and the next pass goes on from there, so blocks that fit no hole
 * are passed over once per sweep, not once per pass. A sweep ends at the
 * lowest hole; the next one starts at the top again. `compact` is reported
 * when a whole sweep planned nothing and no slide was possible. The cursor names a record; a record
 * that is released back to the pool resets it (rec_put), so it never dangles.
 */
#include "vheap_internal.h"

#include <string.h>

#include "../common/hh_assert.h"
#include "../common/hh_error.h"
#include "../common/hh_meta.h"

/* Grows the pass arrays to hold n moves (moves, journal, src, dst share one
   buffer, so one allocation can fail). Only between passes or while planning,
   before the move is recorded. */
static bool pass_reserve(hh_vheap *h, uint32_t n) {
    if (n <= h->pass_cap) return true;
    uint64_t cap = (uint64_t)h->pass_cap * 2u;
    if (cap < 16) cap = 16;
    if (cap < n) cap = n;
    if (cap > ((uint64_t)1 << 30)) return false;
    size_t per = 2u * sizeof(hh_vmove) + 2u * sizeof(uint32_t);
    uint8_t *buf = hhi_meta_alloc((size_t)cap * per);
    if (buf == NULL) return false;
    hh_vmove *mv = (hh_vmove *)(void *)buf;
    hh_vmove *jr = mv + cap;
    uint32_t *src = (uint32_t *)(void *)(jr + cap);
    uint32_t *dst = src + cap;
    if (h->move_count) {
        memcpy(mv, h->moves, h->move_count * sizeof *mv);
        memcpy(src, h->mv_src, h->move_count * sizeof *src);
        memcpy(dst, h->mv_dst, h->move_count * sizeof *dst);
    }
    if (h->journal_count) memcpy(jr, h->journal, h->journal_count * sizeof *jr);
    hhi_meta_free(h->pass_buf);
    h->pass_buf = buf;
    h->pass_cap = (uint32_t)cap;
    h->moves = mv;
    h->journal = jr;
    h->mv_src = src;
    h->mv_dst = dst;
    return true;
}

/* Records the move of live block x into [dst, dst + size of x), carved out of
   free block f. Room for the move and 2 records is reserved. */
static void plan_move(hh_vheap *heap, uint32_t x, uint32_t f, uint64_t dst) {
    uint64_t size = vb_size(&heap->rec[x]);
    uint32_t d = hhi_vcarve(heap, f, dst, size, VB_DST);
    hhi_vset_state(heap, x, VB_SRC);
    uint32_t i = heap->move_count++;
    heap->mv_src[i] = x;
    heap->mv_dst[i] = d;
    heap->moves[i] = (hh_vmove){ .handle = hh_handle_at(&heap->handles, heap->rec[x].u.l.slot),
                                 .src_offset = heap->rec[x].off, .dst_offset = dst, .size = size };
}

/* The slide step, for a sweep that could fill nothing: the first movable
   block right above a hole (lowest hole first) goes to the lowest free range
   that holds it -- above it, since no hole below it does -- so that the hole
   and its old range merge and the next sweep can fill the union (with the
   block itself, if nothing higher fits). A slide done as two copies that never
   overlap. Examines at most *budget blocks. true if a move was planned. */
static bool plan_slide(hh_vheap *heap, uint64_t max_bytes, uint64_t *budget, bool *partial) {
    uint32_t hole = hhi_vtree_min(heap);
    while (hole && *budget > 0) {
        uint32_t y = heap->rec[hole].next;
        if (y == 0) return false;                                  /* the lowest free block is the top: compact */
        (*budget)--;
        hhi_vblk *b = &heap->rec[y];
        if (vb_state(b) == VB_LIVE && vb_pins(b) == 0) {
            if (vb_size(b) > max_bytes) *partial = true;
            else {
                uint64_t dst;
                uint32_t f = hhi_vfind(heap, vb_size(b), (uint64_t)1 << vb_align_log2(b), UINT64_MAX, &dst);
                if (f && heap->rec[f].off > b->off) {
                    plan_move(heap, y, f, dst);
                    return true;
                }
            }
        }
        /* y stays (pinned, reserved, or nowhere to go): the next hole above it */
        hole = heap->rec[y].next;
        while (hole && vb_state(&heap->rec[hole]) != VB_FREE && *budget > 0) {
            (*budget)--;
            hole = heap->rec[hole].next;
        }
        if (hole && heap->rec[hole].next == 0) return false;       /* only the top region is left */
    }
    return false;
}

hh_status hh_vdefrag_begin(hh_vheap *heap, const hh_vdefrag_budget *budget, hh_vdefrag_pass *out) {
    if (out) memset(out, 0, sizeof *out);
    if (heap == NULL || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_begin: %s is NULL", heap == NULL ? "heap" : "out");
    if (heap->pass_open) return hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_begin: a pass is already open; end it first");
    hh_vdefrag_policy policy = budget ? budget->policy : HH_VDEFRAG_FILL;
    if ((unsigned)policy > HH_VDEFRAG_AUTO)
        return hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_begin: unknown policy %d", (int)policy);
    uint32_t max_moves = budget && budget->max_moves ? budget->max_moves : UINT32_MAX;
    uint64_t max_bytes = budget && budget->max_bytes ? budget->max_bytes : UINT64_MAX;
    uint64_t max_examined = max_moves == UINT32_MAX ? UINT64_MAX : 4u * (uint64_t)max_moves + 64u;
    /* room for the first move before anything changes: a pass that cannot plan
       a single move for want of metadata is an error, not an empty pass */
    if (!pass_reserve(heap, max_moves < 16 ? max_moves : 16) || !hhi_vreserve_records(heap, 2))
        return hhi_error(HH_E_NO_MEMORY, "hh_vdefrag_begin: no memory for the pass");
    heap->journal_count = 0;
    heap->move_count = 0;

    uint64_t bytes = 0, examined = 0;
    bool stopped = false;
    uint32_t x = heap->cursor;
    if (x == 0) {                              /* a new sweep from the top */
        x = heap->tail;
        heap->sweep_moves = 0;
        heap->sweep_partial = false;
    }
    while (x) {
        uint32_t lowest = hhi_vtree_min(heap);
        if (lowest == 0 || heap->rec[lowest].off > heap->rec[x].off) break;   /* no hole below x: sweep done */
        if (examined++ >= max_examined) { stopped = true; break; }
        hhi_vblk *b = &heap->rec[x];
        if (vb_state(b) == VB_LIVE && vb_pins(b) == 0) {
            uint64_t size = vb_size(b);
            if (heap->move_count >= max_moves) { stopped = true; break; }
            if (size > max_bytes - bytes) {
                if (heap->move_count) { stopped = true; break; }   /* the next pass starts with it */
                heap->sweep_partial = true;
                x = b->prev;                   /* larger than a whole pass may move: never under this budget */
                continue;
            }
            if (!pass_reserve(heap, heap->move_count + 1u) || !hhi_vreserve_records(heap, 2)) {
                stopped = true;                /* out of metadata: plan what we have */
                break;
            }
            b = &heap->rec[x];                 /* the pool may have moved */
            uint64_t dst;
            uint32_t f = hhi_vfind(heap, size, (uint64_t)1 << vb_align_log2(b), b->off, &dst);
            if (f) {
                plan_move(heap, x, f, dst);
                bytes += size;
            }
        }
        x = heap->rec[x].prev;
    }
    heap->cursor = stopped ? x : 0;
    if (policy == HH_VDEFRAG_AUTO && !stopped && heap->sweep_moves == 0 && heap->move_count == 0 &&
        !heap->sweep_partial) {
        /* a whole sweep filled nothing: slide one block out of the way */
        uint64_t left = max_examined > examined ? max_examined - examined : 0;
        if (plan_slide(heap, max_bytes, &left, &heap->sweep_partial)) bytes += heap->moves[0].size;
        else if (left == 0) stopped = true;    /* cut short: not known to be compact */
    }
    heap->sweep_moves += heap->move_count;
    heap->pass_open = true;
    out->move_count = heap->move_count;
    out->moves = heap->moves;
    out->bytes = bytes;
    /* a whole sweep found nothing to move, and passed over nothing for the budget */
    out->compact = !stopped && heap->sweep_moves == 0 && !heap->sweep_partial;
    return HH_OK;
}

hh_status hh_vdefrag_end(hh_vheap *heap, const hh_vmove_result *results, hh_vdefrag_report *report) {
    if (report) memset(report, 0, sizeof *report);
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_end: heap is NULL");
    if (!heap->pass_open) return hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_end: no pass is open");
    if (results)
        for (uint32_t i = 0; i < heap->move_count; i++)
            if ((unsigned)results[i] > HH_VMOVE_CANCELLED)
                return hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_end: result %d of move %u is not an hh_vmove_result; "
                                 "the pass stays open", (int)results[i], (unsigned)i);
    hh_vdefrag_report rep = {0};
    for (uint32_t i = 0; i < heap->move_count; i++) {
        uint32_t s = heap->mv_src[i], d = heap->mv_dst[i];
        hh_vmove_result res = results ? results[i] : HH_VMOVE_DONE;
        hhi_vblk *sb = &heap->rec[s];
        if (vb_state(sb) == VB_ZOMBIE) res = HH_VMOVE_CANCELLED;          /* freed during the pass */
        else if (vb_pins(sb) && res == HH_VMOVE_DONE) res = HH_VMOVE_SKIPPED;   /* pinned during the pass */
        switch (res) {
        case HH_VMOVE_DONE: {
            hhi_vblk *db = &heap->rec[d];
            hhi_vset_state(heap, d, VB_LIVE);
            db->u.l = sb->u.l;
            vb_set_aux(db, vb_aux(sb));
            hh_handle_repoint_fast(&heap->handles, sb->u.l.slot, (void *)(uintptr_t)d);
            vb_set_aux(sb, 0);
            hhi_vrelease(heap, s);
            heap->journal[rep.done] = heap->moves[i];
            rep.done++;
            rep.bytes_moved += heap->moves[i].size;
            break;
        }
        case HH_VMOVE_SKIPPED:
            hhi_vset_state(heap, s, VB_LIVE);
            hhi_vrelease(heap, d);
            rep.skipped++;
            break;
        case HH_VMOVE_CANCELLED:
            if (vb_state(sb) == VB_SRC) {
                if (vb_pins(sb)) {             /* a pinned block cannot be dropped: keep it */
                    hhi_vset_state(heap, s, VB_LIVE);
                    hhi_vrelease(heap, d);
                    rep.skipped++;
                    break;
                }
                hh_handle_release(&heap->handles, heap->moves[i].handle);
                vb_set_aux(&heap->rec[s], 0);
            }
            hhi_vrelease(heap, d);
            hhi_vrelease(heap, s);
            rep.cancelled++;
            break;
        }
    }
    heap->journal_count = rep.done;
    heap->total_moves += rep.done;
    heap->total_bytes_moved += rep.bytes_moved;
    heap->move_count = 0;
    heap->pass_open = false;
    if (report) *report = rep;
    return HH_OK;
}

bool hh_vdefrag_active(const hh_vheap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_active: heap is NULL");
        return false;
    }
    return heap->pass_open;
}

/* As hh_defrag_journal: a NULL heap or out is reported, *out cleared first. */
size_t hh_vdefrag_journal(const hh_vheap *heap, const hh_vmove **out) {
    if (out) *out = NULL;
    if (heap == NULL || out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_vdefrag_journal: %s is NULL", heap == NULL ? "heap" : "out");
        return 0;
    }
    *out = heap->journal;
    return heap->journal_count;
}
