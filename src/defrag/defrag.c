/* defrag.c -- hh_defrag_step and friends: the policy side of compaction
 * (contract in include/hheap/defrag.h, cursor invariants D1..D3 in
 * defrag_internal.h).
 *
 * What the service is for: under a game's churn the heap's highest live byte
 * stays near its live bytes at a per-frame cost a game accepts. Holes the
 * game's own allocations refill are not a problem; stranded ones are -- the
 * small holes a phase of small objects leaves behind when a phase of large
 * ones begins, which nothing allocates into again. Moving blocks pays off only
 * where it turns stranded bytes into room the game will use, or brings the top
 * of the live data down; a block allocated a few frames ago will probably die
 * before a move pays off. So AUTO, in a bounded step while the game allocates
 * (auto_moves):
 *   1. evacuates sparse, quiet ranges (evacuate): the heap keeps the live bytes
 *      of each region (at most 1024 of them, heap_region.c) and the step when an
 *      allocation last landed in it; a region at most 7/8 live that received
 *      nothing for HHI_DEFRAG_COLD_STEPS steps is sparse and quiet. A job takes
 *      the sparsest, extended over the sparse regions after it, and walks its
 *      blocks in address order: each goes into a hole below the range that fits
 *      it (filling stranded space there), else slides into the gap below it.
 *      The range's free bytes gather into one block;
 *   2. lowers the top (lower_top): the highest block, if quiet, into a hole
 *      below it that fits;
 *   3. runs the hole-by-hole loop below only while the holes hold a good share
 *      of the live bytes (finishing_pays: from 1/8 down to 1/32), and slides no
 *      block over a hole less than half its size; otherwise it stops BUSY:
 *      what is left is the game's working space.
 * In a quiet heap (or an unlimited step) AUTO fills sparse holes from the top
 * (lower_top) and closes dense ones with the loop, which then moves about the
 * lower bound. bench/bench_footprint.c measures all of it against glibc,
 * mimalloc, jemalloc and tcmalloc on the same traces.
 *
 * The hole-by-hole loop (run_moves_inner) goes over holes, lowest first,
 * starting at the cursor (floor). For the lowest hole H it picks one move,
 * according to the policy:
 *   FILL   the highest movable block B, into H if it fits, else into the
 *          best-fitting free block below B (TLSF lookup);
 *   AUTO   the block of the window (the HHI_DEFRAG_WINDOW highest movable blocks
 *          above H) that fills H best, i.e. the largest that fits;
 *   SLIDE  the block right above H, slid down into it;
 * and falls back in the order fill-window -> slide (AUTO, FILL) or slide ->
 * fill-window (SLIDE, for holes under pinned blocks). A hole for which none of
 * these exists is stuck: the floor rises above it and the scan goes on. The
 * budget is charged before every move; each block examined or hole passed over
 * costs one unit of `work`, capped for bounded steps, so a step's cost is
 * proportional to the moves it may make, never to the heap (a job's choice
 * reads the region summary once: at most 1024 counters).
 *
 * Why the loop never moves a block twice under AUTO: every move places a
 * block at the start of the lowest hole, i.e. below every hole that remains,
 * and the only blocks that ever move are above the lowest hole. So the loop's
 * bytes are a subset of SLIDE's (every live byte above the first hole), and
 * when sizes repeat almost every move is a top block going straight into a
 * hole below the final boundary: the lower bound.
 *
 * hh_defrag_full first sweeps the heap once in address order, sliding each run
 * of movable blocks down with one memmove (hhi_heap_sweep_compact: O(blocks),
 * about memmove speed), then runs the loop above for what pins and alignment
 * left. Under memcheck/ASan the sweep declines and the loop does it all.
 *
 * Allocation-time compaction runs the same loop (bounded, no journal reset)
 * and stops as soon as a free block fits the request; if that is not enough it
 * slides together the cheapest range of holes that holds the request (the
 * fewest live bytes between them), and only then compacts fully, so a request
 * costs about the live bytes of one range, not those of the heap. The heap
 * calls it through heap->compact_hook, installed when this service's state is
 * created.
 */
#include "defrag_internal.h"

#include <math.h>

#include "../common/hh_error.h"
#include "../common/hh_frag.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
typedef struct step_ctx {
    hh_heap           *h;
    struct hhi_defrag *d;             /* may be NULL (state allocation failed) */
    hh_defrag_policy   policy;
    size_t             max_moves;     /* 0: none */
    size_t             max_bytes;     /* 0: none; blocks with more payload are oversize */
    uint64_t           max_ns;        /* 0: none (always 0 in deterministic mode) */
    uint64_t           t0;
    uint64_t           work, work_max;
    size_t             need_size, need_align;   /* allocation-time: stop once this fits (0: never) */
    bool               rescanned;     /* this step already restarted from floor 0 */
    size_t             slide_cap;     /* AUTO while the game allocates: no slide of a block more than
                                         this many times its hole's size (0: any) */
    bool               capped;        /* a hole was passed over for slide_cap this step */
    /* The window: the highest movable blocks, in descending address order. It
       stays valid for the whole step (nothing is allocated during a step and
       only the blocks we move change place), so it is scanned once and then
       only extended at its bottom as blocks leave it. */
    hhi_block         *win[HHI_DEFRAG_WINDOW];
    unsigned           win_n;
    bool               win_end;       /* the scan reached the lowest hole: nothing more below */
    hh_defrag_report   r;
} step_ctx;

typedef struct move_plan {
    hhi_block *b;                     /* block to move (NULL: H is stuck) */
    hhi_block *dst;                   /* free block to move it into */
    bool       slide;                 /* b is right above dst: slide it down */
    bool       absorb;                /* no move: dst, a sliver, becomes its lower neighbour's slack */
    bool       capped;                /* no move: the only one was a slide too dear (step_ctx.slide_cap) */
} move_plan;

/* ---------------------------------------------------------------------------
   Forward declarations
--------------------------------------------------------------------------- */
static hhi_block *defrag_compact_for(hh_heap *h, size_t size, size_t align);

/* ---------------------------------------------------------------------------
   State
--------------------------------------------------------------------------- */
static void defrag_state_free(struct hhi_defrag *d) { hhi_meta_free(d); }   /* done_used shares its allocation */

/* Applies the defaults of hh_defrag_config (the table in defrag.h). */
static hh_defrag_config config_defaults(const hh_defrag_config *c) {
    hh_defrag_config r = c ? *c : (hh_defrag_config){0};
    if (r.trigger_start_fragmentation == 0.0) r.trigger_start_fragmentation = HHI_DEFRAG_START_FRAG;
    if (r.trigger_start_wasted_bytes == 0) r.trigger_start_wasted_bytes = HHI_DEFRAG_START_WASTED;
    if (r.trigger_stop_fragmentation == 0.0) r.trigger_stop_fragmentation = HHI_DEFRAG_STOP_FRAG;
    if (r.decommit_retain_bytes == 0) r.decommit_retain_bytes = HHI_DEFRAG_RETAIN;
    if (r.decommit_min_bytes == 0) r.decommit_min_bytes = HHI_DEFRAG_DECOMMIT_MIN;
    if (r.decommit_step_bytes == 0) r.decommit_step_bytes = HHI_DEFRAG_DECOMMIT_STEP;
    return r;
}

/* The heap's defrag state, created on first use (lock held); NULL if that
   allocation fails (a step then still runs, it only keeps no cursor). Creating
   it installs the allocation-time compaction hook. */
static struct hhi_defrag *defrag_state(hh_heap *h) {
    if (h->defrag == NULL) {
        struct hhi_defrag *d = hhi_meta_alloc(sizeof *d + (size_t)h->region_count * sizeof(uint32_t));
        if (d == NULL) return NULL;
        *d = (struct hhi_defrag){0};
        d->done_used = (uint32_t *)(void *)(d + 1);
        memset(d->done_used, 0xFF, (size_t)h->region_count * sizeof(uint32_t));
        d->cfg = config_defaults(NULL);
        d->seen_mutations = h->mutations;
        __atomic_store_n(&h->defrag, d, __ATOMIC_RELEASE);   /* read lock-free by hh_defrag_get_policy */
        h->defrag_free = defrag_state_free;
        h->compact_hook = defrag_compact_for;
    }
    return h->defrag;
}

/* ---------------------------------------------------------------------------
   Small queries
--------------------------------------------------------------------------- */
static inline bool is_top(const hh_heap *h, const hhi_block *f) { return blk_offset(h, f) + blk_size_free(f) == h->managed; }

/* true if no allocation started in region r for HHI_DEFRAG_COLD_STEPS steps:
   the game's churn is not reusing that region's holes. */
static inline bool region_quiet(const hh_heap *h, size_t r) {
    return h->epoch - h->regions[r].epoch >= HHI_DEFRAG_COLD_STEPS;
}

/* Minimal whole size of live block b (its slack can be dropped by a move). */
static inline size_t blk_need(const hhi_block *b) { return blk_size_live(b) - (size_t)blk_slack(b) * HHI_GRANULE; }

/* The highest block of the heap below the top free region (any state), or NULL. */
static hhi_block *highest_block(const hh_heap *h) {
    hhi_block *t = hhi_heap_top_free(h);
    if (t) return hhi_heap_block_before(h, t);
    size_t g = hhi_bitmap_prev(&h->starts, h->managed / HHI_GRANULE - 1);
    return g == HHI_BM_NONE ? NULL : blk_at(h, granule_off((uint32_t)g));
}

/* true if b (live) may move in this step; notes blocks passed over as oversize. */
static bool movable(step_ctx *c, const hhi_block *b) {
    if (blk_pinned(b)) return false;
    if (c->max_bytes) {
        size_t u = blk_usable(c->h, b);
        if (u > c->max_bytes) {
            if (u > c->r.oversize_bytes) c->r.oversize_bytes = u;
            return false;
        }
    }
    return true;
}

/* true if b's payload exceeds the step's byte budget. No side effect: the
   passes before the loop note an oversize block (movable) only once they know
   it had somewhere to go. */
static bool oversize(const step_ctx *c, const hhi_block *b) { return c->max_bytes && blk_usable(c->h, b) > c->max_bytes; }

/* true if the block right above hole H could slide into it as far as its
   alignment (and, under HH_HEAP_DEBUG_MOVES, the step's vacated places) allow;
   no budget check. */
static bool slide_room(const hh_heap *h, hhi_block *H, const hhi_block *Y) { return hhi_heap_can_slide(h, H, Y); }

/* ---------------------------------------------------------------------------
   Choosing a move for the lowest hole
--------------------------------------------------------------------------- */
/* Fills the window up to HHI_DEFRAG_WINDOW blocks above offset hoff. */
static void window_fill(step_ctx *c, size_t hoff) {
    hh_heap *h = c->h;
    if (c->win_end || c->win_n == HHI_DEFRAG_WINDOW) return;
    hhi_block *b;
    if (c->win_n) b = hhi_heap_block_before(h, c->win[c->win_n - 1]);
    else b = highest_block(h);                         /* first scan, or every entry has moved */
    while (c->win_n < HHI_DEFRAG_WINDOW) {
        if (b == NULL || blk_offset(h, b) <= hoff) {
            c->win_end = true;
            return;
        }
        if (++c->work > c->work_max) return;
        if (!blk_is_free(b) && movable(c, b)) c->win[c->win_n++] = b;
        b = hhi_heap_block_before(h, b);
    }
}

/* Drops b from the window (it moved). */
static void window_remove(step_ctx *c, const hhi_block *b) {
    for (unsigned i = 0; i < c->win_n; i++)
        if (c->win[i] == b) {
            memmove(&c->win[i], &c->win[i + 1], (c->win_n - i - 1) * sizeof c->win[0]);
            c->win_n--;
            return;
        }
}

enum { FIT_SET_GRANULES = 1024 };                      /* needs below 16 KiB go in the presence set */

/* true if some candidate other than `self` fills `rest` bytes to within
   HHI_DEFRAG_ABSORB: a look at <= 4 bits of the presence set of needs (in
   granules), a scan of the candidates only for needs beyond the set or when
   the only match is self's own size. */
static bool rest_fillable(const uint64_t *set, const size_t *needs, unsigned n, unsigned self, size_t rest) {
    size_t lo = (rest > HHI_DEFRAG_ABSORB ? rest - HHI_DEFRAG_ABSORB : 0) / HHI_GRANULE, hi = rest / HHI_GRANULE;
    if (hi < FIT_SET_GRANULES) {
        bool self_only = false;
        for (size_t g = lo; g <= hi; g++)
            if ((set[g / 64] >> (g % 64)) & 1) {
                if (g != needs[self] / HHI_GRANULE) return true;
                self_only = true;
            }
        if (!self_only) return false;
    }
    for (unsigned j = 0; j < n; j++)
        if (j != self && needs[j] <= rest && rest - needs[j] <= HHI_DEFRAG_ABSORB) return true;
    return false;
}

/* The window block (Y excluded) that fills H best. A block that closes H
   outright (rest <= HHI_DEFRAG_ABSORB) is taken at once, the highest such;
   else the largest whose rest another window block fills exactly; else the
   largest whose rest can still take the smallest window block; else the
   largest that fits; ties go to the higher block. NULL if none fits. O(n). */
static hhi_block *window_best(step_ctx *c, hhi_block *H, const hhi_block *Y) {
    hh_heap *h = c->h;
    size_t hoff = blk_offset(h, H), hsize = blk_size_free(H), min_need = SIZE_MAX;
    window_fill(c, hoff);
    hhi_block *cand[HHI_DEFRAG_WINDOW];
    size_t needs[HHI_DEFRAG_WINDOW];
    uint64_t set[FIT_SET_GRANULES / 64] = {0};
    unsigned n = 0;
    for (unsigned i = 0; i < c->win_n; i++) {
        hhi_block *b = c->win[i];
        if (blk_offset(h, b) <= hoff) break;           /* descending: the rest lie below H */
        if (b == Y || blk_pinned(b)) continue;           /* Y slides, it does not fill; pinned since saved */
        size_t need = blk_need(b);
        if (need < min_need) min_need = need;
        size_t align = blk_align(b);                   /* 16: no lead, fits iff it is not larger */
        if (need > hsize || (align > HHI_GRANULE && !hhi_heap_fits(h, H, need, align, NULL))) continue;
        if (hsize - need <= HHI_DEFRAG_ABSORB) return b;   /* closes the hole */
        size_t g = need / HHI_GRANULE;
        if (g < FIT_SET_GRANULES) set[g / 64] |= (uint64_t)1 << (g % 64);
        cand[n] = b;
        needs[n++] = need;
    }
    hhi_block *best = NULL;
    int best_class = -1;
    size_t best_need = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t rest = hsize - needs[i];
        int k = rest_fillable(set, needs, n, i, rest) ? 2 : rest >= min_need ? 1 : 0;
        if (k > best_class || (k == best_class && needs[i] > best_need)) {
            best = cand[i];
            best_class = k;
            best_need = needs[i];
        }
    }
    return best;
}

/* FILL's own choice: the highest movable block into H if it fits, else into
   the best-fitting free block below it. false if neither exists. */
static bool fill_highest(step_ctx *c, hhi_block *H, const hhi_block *Y, move_plan *mv) {
    hh_heap *h = c->h;
    window_fill(c, blk_offset(h, H));
    if (c->win_n == 0 || blk_offset(h, c->win[0]) <= blk_offset(h, H)) return false;
    hhi_block *b = c->win[0];
    if (b == Y || blk_pinned(b)) return false;           /* only the slide candidate is left; pinned since saved */
    size_t need = blk_need(b), align = blk_align(b);
    if (hhi_heap_fits(h, H, need, align, NULL)) {
        *mv = (move_plan){ .b = b, .dst = H };
        return true;
    }
    hhi_block *f = hhi_freelist_find(h, align <= HHI_GRANULE ? need : need + align);
    if (f && !is_top(h, f) && blk_offset(h, f) + blk_size_free(f) <= blk_offset(h, b) &&
        hhi_heap_fits(h, f, need, align, NULL)) {
        *mv = (move_plan){ .b = b, .dst = f };
        return true;
    }
    return false;                                      /* the highest block fits nowhere below */
}

/* true if the block right above hole H may slide down into it: movable,
   and its alignment leaves it room to go down (the offset hhi_heap_fits would
   give it, the one hhi_heap_slide_down uses, lies below its own). */
static bool slide_possible(step_ctx *c, hhi_block *H, const hhi_block *Y) {
    return Y != NULL && movable(c, Y) && slide_room(c->h, H, Y);
}

/* The move that closes (part of) hole H, or mv->b == NULL if H is stuck. */
static void choose(step_ctx *c, hhi_block *H, move_plan *mv) {
    hh_heap *h = c->h;
    hhi_block *Y = blk_next(h, H);                     /* live: free blocks never touch */
    *mv = (move_plan){0};
    bool can_slide = slide_possible(c, H, Y);
    if (c->policy == HH_DEFRAG_SLIDE && can_slide) {
        *mv = (move_plan){ .b = Y, .dst = H, .slide = true };
        return;
    }
    if (c->policy == HH_DEFRAG_FILL && fill_highest(c, H, Y, mv)) return;
    hhi_block *b = window_best(c, H, Y);
    if (b) *mv = (move_plan){ .b = b, .dst = H };
    else if (c->policy != HH_DEFRAG_SLIDE && blk_size_free(H) <= HHI_DEFRAG_SLIVER && blk_offset(h, H) > 0)
        *mv = (move_plan){ .dst = H, .absorb = true };   /* cheaper than the chain of slides it would take */
    else if (can_slide && c->slide_cap && blk_size_live(Y) > c->slide_cap * blk_size_free(H))
        *mv = (move_plan){ .capped = true };          /* not worth it now: passed over, not stuck */
    else if (can_slide) *mv = (move_plan){ .b = Y, .dst = H, .slide = true };
}

/* ---------------------------------------------------------------------------
   The step loop
--------------------------------------------------------------------------- */
/* Forgets every hole judged stuck: the next scan starts at offset 0. */
static void cursor_reset(struct hhi_defrag *d) {
    d->floor = 0;
    d->stuck_bytes = 0;
    d->stuck_holes = 0;
    d->blocking_pinned = 0;
    d->floor_dirty = false;
}

/* Folds the heap's mutations since the last look into the cursor (D1): one
   at or below the floor invalidates it, one above only makes it dirty. */
static void cursor_sync(hh_heap *h, struct hhi_defrag *d) {
    if (h->mutations == d->seen_mutations) return;
    if (h->low_mark <= d->floor) cursor_reset(d);
    else if (d->floor > 0) d->floor_dirty = true;
    h->low_mark = SIZE_MAX;
    d->seen_mutations = h->mutations;
}

/* true if the budget allows moving `bytes` more payload bytes now; else sets the stop reason. */
static bool budget_allows(step_ctx *c, size_t bytes) {
    if (c->max_bytes && c->r.bytes_moved + bytes > c->max_bytes) {
        c->r.stop = HH_DEFRAG_STOP_BYTES;
        return false;
    }
    if (c->max_ns && hhi_now_ns() - c->t0 >= c->max_ns) {
        c->r.stop = HH_DEFRAG_STOP_TIME;
        return false;
    }
    return true;
}

/* The loop is a small state machine (as Lua's singlestep): each state does
   one bounded slice of work and names the next. Every exit is the STOP state,
   reached with c->r.stop set -- or, for allocation-time compaction, with the
   request fitting. */
typedef enum loop_state {
    LOOP_CHECK,    /* the move and work limits, and an allocation that now fits */
    LOOP_LOOK,     /* the lowest hole at or above the floor */
    LOOP_END,      /* no hole left above the floor: rescan once, or report */
    LOOP_PLAN,     /* one move for that hole (choose) */
    LOOP_ABSORB,   /* the plan: the hole, a sliver, becomes slack (or a slide) */
    LOOP_PASS,     /* the plan: no move; the floor rises above the hole */
    LOOP_MOVE,     /* the plan: a move, charged to the budget */
    LOOP_STOP,
} loop_state;

typedef struct loop {
    struct hhi_defrag *d;          /* the cursor (a scratch one when the heap has no state) */
    hhi_block *H;                  /* the hole being closed */
    move_plan  mv;
    size_t     oversize_before;    /* c->r.oversize_bytes before the plan */
} loop;

static loop_state loop_stop(step_ctx *c, hh_defrag_stop why) {
    c->r.stop = why;
    return LOOP_STOP;
}

static loop_state loop_check(step_ctx *c) {
    if (c->max_moves && c->r.moves >= c->max_moves) return loop_stop(c, HH_DEFRAG_STOP_MOVES);
    if (c->need_size && hhi_heap_find_fit(c->h, c->need_size, c->need_align)) return LOOP_STOP;
    if (c->work >= c->work_max) return loop_stop(c, HH_DEFRAG_STOP_WORK);
    return LOOP_LOOK;
}

static loop_state loop_look(step_ctx *c, loop *l) {
    l->H = hhi_heap_free_at_or_after(c->h, l->d->floor);
    if (l->H == NULL || is_top(c->h, l->H)) return LOOP_END;
    c->work++;
    return LOOP_PLAN;
}

/* Every hole above the floor is closed. Holes below it were judged stuck; if
   something changed since (floor_dirty), they are looked at once more (D2)
   before the heap may be called compact. */
static loop_state loop_end(step_ctx *c, loop *l) {
    struct hhi_defrag *d = l->d;
    if (d->floor > 0 && d->floor_dirty && !c->rescanned) {
        cursor_reset(d);
        c->rescanned = true;
        c->win_n = 0;                                  /* the window stopped at the old lowest hole */
        c->win_end = false;
        return LOOP_CHECK;
    }
    if (c->capped) {                                   /* holes passed over: not compact */
        d->floor_dirty = true;
        return loop_stop(c, HH_DEFRAG_STOP_BUSY);
    }
    if (c->r.oversize_bytes) {
        d->floor_dirty = true;                         /* those holes are not stuck for a larger budget */
        return loop_stop(c, HH_DEFRAG_STOP_OVERSIZE);
    }
    c->r.compact = true;
    d->known_compact = true;
    d->known_mutations = c->h->mutations;
    return loop_stop(c, HH_DEFRAG_STOP_COMPACT);
}

static loop_state loop_plan(step_ctx *c, loop *l) {
    l->oversize_before = c->r.oversize_bytes;
    choose(c, l->H, &l->mv);
    if (c->work > c->work_max) return loop_stop(c, HH_DEFRAG_STOP_WORK);
    if (l->mv.absorb) return LOOP_ABSORB;
    return l->mv.b ? LOOP_MOVE : LOOP_PASS;
}

static loop_state loop_absorb(step_ctx *c, loop *l) {
    size_t sliver = blk_size_free(l->H);
    if (hhi_heap_absorb_hole(c->h, l->H)) {
        if (c->d) c->d->absorbed_bytes += sliver;
        return LOOP_CHECK;
    }
    hhi_block *Y = blk_next(c->h, l->H);               /* the block below has no slack room left: slide */
    l->mv = slide_possible(c, l->H, Y) ? (move_plan){ .b = Y, .dst = l->H, .slide = true } : (move_plan){0};
    return l->mv.b ? LOOP_MOVE : LOOP_PASS;
}

/* No move for H: it was passed over for the slide cap (not stuck, D1's
   exception) or it is stuck. Either way the cursor rises above it. */
static loop_state loop_pass(step_ctx *c, loop *l) {
    struct hhi_defrag *d = l->d;
    d->floor = blk_offset(c->h, l->H) + blk_size_free(l->H);
    if (l->mv.capped) {
        d->floor_dirty = true;                         /* D1: it is not unclosable; rescan before compact */
        c->capped = true;
        return LOOP_CHECK;
    }
    hhi_block *Y = blk_next(c->h, l->H);
    d->stuck_bytes += blk_size_free(l->H);
    d->stuck_holes++;
    if (Y && blk_pinned(Y)) d->blocking_pinned += blk_size_live(Y);
    if (c->r.oversize_bytes != l->oversize_before) d->floor_dirty = true;
    return LOOP_CHECK;
}

static loop_state loop_move(step_ctx *c, loop *l) {
    size_t bytes = blk_usable(c->h, l->mv.b);
    if (!budget_allows(c, bytes)) return LOOP_STOP;    /* the stop reason is set */
    window_remove(c, l->mv.b);
    hhi_block *nb = l->mv.slide ? hhi_heap_slide_down(c->h, l->mv.dst, l->mv.b)
                                : hhi_heap_move_into(c->h, l->mv.b, l->mv.dst, HHI_DEFRAG_ABSORB);
    if (HH_NEVER(nb == NULL)) return loop_stop(c, HH_DEFRAG_STOP_WORK);   /* choose() checked the slide can go down */
    c->r.moves++;
    c->r.bytes_moved += bytes;
    if (l->d->floor > 0) l->d->floor_dirty = true;
    return LOOP_CHECK;
}

/* Runs moves until the budget, the work limit or compactness stops it (lock held). */
static void run_moves_inner(step_ctx *c) {
    struct hhi_defrag scratch = {0};
    loop l = { .d = c->d ? c->d : &scratch };          /* no state: a cursor for this call only */
    if (c->d) cursor_sync(c->h, c->d);
    if (l.d->known_compact && l.d->known_mutations == c->h->mutations) {
        if (c->r.oversize_bytes) {                     /* a pass before the loop passed a block over */
            c->r.stop = HH_DEFRAG_STOP_OVERSIZE;
            return;
        }
        c->r.compact = true;
        c->r.stop = HH_DEFRAG_STOP_COMPACT;
        return;
    }
    l.d->known_compact = false;
    loop_state st = LOOP_CHECK;
    while (st != LOOP_STOP) {
        switch (st) {
        case LOOP_CHECK:  st = loop_check(c); break;
        case LOOP_LOOK:   st = loop_look(c, &l); break;
        case LOOP_END:    st = loop_end(c, &l); break;
        case LOOP_PLAN:   st = loop_plan(c, &l); break;
        case LOOP_ABSORB: st = loop_absorb(c, &l); break;
        case LOOP_PASS:   st = loop_pass(c, &l); break;
        case LOOP_MOVE:   st = loop_move(c, &l); break;
        case LOOP_STOP:   break;
        }
    }
}

/* ---------------------------------------------------------------------------
   Evacuation (AUTO): sparse, quiet ranges first
--------------------------------------------------------------------------- */
/* true (stop reason set) if the step may make no further move or do no
   further work: the move and work limits, checked before each look. */
static bool budget_spent(step_ctx *c) {
    if (c->max_moves && c->r.moves >= c->max_moves) {
        c->r.stop = HH_DEFRAG_STOP_MOVES;
        return true;
    }
    if (c->work >= c->work_max) {
        c->r.stop = HH_DEFRAG_STOP_WORK;
        return true;
    }
    return false;
}

/* Blocks moved outside the hole-by-hole loop: the cursor, the known-compact
   mark and the window (saved and current) no longer describe the heap. */
static void forget_layout(step_ctx *c) {
    if (c->d) {
        cursor_reset(c->d);
        c->d->known_compact = false;
        c->d->win_saved = false;
    }
    c->win_n = 0;
    c->win_end = false;
}

/* true if region r (its first `span` bytes lie below the top free region) is
   worth evacuating: some of it live but at most HHI_DEFRAG_SPARSE_NUM /
   HHI_DEFRAG_SPARSE_DEN, changed since a job last finished over it, and quiet
   -- no allocation landed in it for HHI_DEFRAG_COLD_STEPS steps, so its holes
   are not being reused by the game's own churn. */
static bool region_sparse(const hh_heap *h, const struct hhi_defrag *d, size_t r, size_t span) {
    uint32_t used = h->regions[r].used;
    if (used == d->done_used[r]) return false;         /* evacuated since its last change */
    return used > 0 && (size_t)used * HHI_DEFRAG_SPARSE_DEN <= span * HHI_DEFRAG_SPARSE_NUM && region_quiet(h, r);
}

/* Picks the next job: the sparse region with the fewest live bytes (the most
   free bytes gained per byte moved), extended over the sparse regions that
   follow it so that their free bytes join one gap. One pass over the region
   summary (at most HHI_REGION_MAX counters), charged to the work limit.
   false if no region qualifies. */
static bool job_pick(step_ctx *c) {
    hh_heap *h = c->h;
    struct hhi_defrag *d = c->d;
    hhi_block *t = hhi_heap_top_free(h);
    size_t top = t ? blk_offset(h, t) : h->managed, rsize = (size_t)1 << h->region_shift;
    size_t nreg = (top + rsize - 1) >> h->region_shift, best = SIZE_MAX;
    uint32_t best_used = UINT32_MAX;
    c->work += 1 + nreg / 64;
    for (size_t r = 0; r < nreg; r++) {
        size_t lo = r * rsize, span = HH_MIN(lo + rsize, top) - lo;
        if (h->regions[r].used < best_used && region_sparse(h, d, r, span)) {
            best = r;
            best_used = h->regions[r].used;
        }
    }
    if (best == SIZE_MAX) return false;
    size_t e = best + 1;
    while (e < nreg && e - best < HHI_DEFRAG_JOB_REGIONS && region_sparse(h, d, e, HH_MIN((e + 1) * rsize, top) - e * rsize))
        e++;
    size_t lo = best * rsize;
    hhi_block *f = lo ? hhi_heap_free_at_or_before(h, lo) : NULL;   /* a gap reaching into the region starts it */
    d->job_lo = (f && blk_offset(h, f) + blk_size_free(f) > lo) ? blk_offset(h, f) : lo;
    d->job_base = d->job_lo;
    d->job_end = HH_MIN(e * rsize, top);
    d->job = true;
    d->jobs++;
    return true;
}

/* Ends the job: its regions are not picked again until their live bytes
   change -- the region where its gap began included: that region's tail was
   the start of the gap, and picking it next would only slide its blocks toward
   a gap that is already there (marking it too measured better: hh-demo's final
   fragmentation over 8 seeds, median 2.9% against 4.7%). */
static void job_done(const hh_heap *h, struct hhi_defrag *d) {
    for (size_t r = d->job_base >> h->region_shift; r < h->region_count && (r << h->region_shift) < d->job_end; r++)
        d->done_used[r] = h->regions[r].used;
    d->job = false;
}

/* AUTO's first duty, before any hole-by-hole work: evacuate sparse, quiet
   ranges. The job walks the range's blocks in address order; each live block
   goes into a hole below the range that fits it (it fills a stranded hole
   there, and its old place joins the gap), else it slides down into the gap
   right below it (every block moves at most once). Either way the range's
   free bytes gather into one block, where the game's next large objects fit.
   A pinned block, or one that can go nowhere, ends the gap; the job goes on
   above it. Runs until the budget is spent or no region qualifies. Returns
   true if the step's budget is used up. */
static bool evacuate(step_ctx *c) {
    hh_heap *h = c->h;
    struct hhi_defrag *d = c->d;
    bool moved = false, spent = false;
    for (;;) {
        if (budget_spent(c)) {
            spent = true;
            break;
        }
        if (!d->job && !job_pick(c)) break;
        c->work++;
        hhi_block *Y = hhi_heap_block_at_or_after(h, d->job_lo);
        if (Y == NULL || blk_offset(h, Y) >= d->job_end || (blk_is_free(Y) && is_top(h, Y))) {
            job_done(h, d);                            /* the range is done */
            continue;
        }
        size_t yend = blk_offset(h, Y) + blk_size(Y);
        if (blk_is_free(Y) || blk_pinned(Y)) {           /* a hole, or a block that stays */
            d->job_lo = yend;
            continue;
        }
        size_t bytes = blk_usable(h, Y);
        unsigned looked = 0;
        hhi_block *f = hhi_heap_find_fit_below(h, blk_need(Y), blk_align(Y), d->job_base, HHI_DEFRAG_FIT_TRIES, &looked);
        c->work += looked;
        hhi_block *H = blk_prev_free(Y) ? blk_prev_free_block(Y) : NULL;
        if (f == NULL && (H == NULL || blk_offset(h, H) < d->job_base || !slide_room(h, H, Y))) {
            d->job_lo = yend;                          /* can go nowhere: the gap restarts above it */
            continue;
        }
        if (oversize(c, Y)) {                          /* it could go, but not under this budget */
            (void)movable(c, Y);                       /* notes oversize_bytes */
            d->job_lo = yend;
            continue;
        }
        if (!budget_allows(c, bytes)) {
            spent = true;
            break;
        }
        hhi_block *nb = f ? hhi_heap_move_into(h, Y, f, HHI_DEFRAG_ABSORB) : hhi_heap_slide_down(h, H, Y);
        if (HH_NEVER(nb == NULL)) {                    /* fits / slide_possible said it goes */
            d->job = false;
            break;
        }
        c->r.moves++;
        c->r.bytes_moved += bytes;
        d->job_lo = f ? yend : blk_offset(h, nb) + blk_size_live(nb);
        moved = true;
    }
    if (moved) forget_layout(c);
    return spent;
}

/* AUTO's second duty: bring the top of the live data down. The highest
   block goes into a hole below it that fits (the top free region then grows
   by its place), as long as it sits in a quiet region -- a block the game
   allocated a few steps ago is likely to die before the move pays off -- and
   the hole is not the one right below it (sliding into that lowers nothing
   for good: the hole just rises above it). Stops at the first highest block
   that stays. Returns true if the step's budget is used up. */
static bool lower_top(step_ctx *c) {
    hh_heap *h = c->h;
    bool moved = false, spent = false;
    for (;;) {
        if (budget_spent(c)) {
            spent = true;
            break;
        }
        c->work++;
        hhi_block *b = highest_block(h);
        if (b == NULL || blk_is_free(b) || blk_pinned(b) || !region_quiet(h, blk_offset(h, b) >> h->region_shift)) break;
        unsigned looked = 0;
        hhi_block *f = hhi_heap_find_fit_below(h, blk_need(b), blk_align(b), blk_offset(h, b), HHI_DEFRAG_FIT_TRIES, &looked);
        c->work += looked;
        if (f == NULL || blk_offset(h, f) + blk_size_free(f) == blk_offset(h, b)) break;
        if (!movable(c, b)) break;                     /* oversize for this budget (noted) */
        size_t bytes = blk_usable(h, b);
        if (!budget_allows(c, bytes)) {
            spent = true;
            break;
        }
        if (HH_NEVER(hhi_heap_move_into(h, b, f, HHI_DEFRAG_ABSORB) == NULL)) break;
        c->r.moves++;
        c->r.bytes_moved += bytes;
        moved = true;
    }
    if (moved) forget_layout(c);
    return spent;
}

/* true if the game allocated nothing for HHI_DEFRAG_COLD_STEPS steps. */
static bool heap_quiet(const hh_heap *h) { return h->epoch - h->alloc_epoch >= HHI_DEFRAG_COLD_STEPS; }

/* Bytes of the free blocks below the top free region. */
static size_t hole_bytes(const hh_heap *h) {
    hhi_block *t = hhi_heap_top_free(h);
    return h->free_bytes - (t ? blk_size_free(t) : 0);
}

/* true if the holes hold less than 1/HHI_DEFRAG_FINISH_START of the live
   bytes: few holes among many blocks. Then moving the highest blocks straight
   into holes that fit them (lower_top) costs about the lower bound, while the
   hole-by-hole loop, which fills the lowest hole from the few highest blocks,
   often finds no block of the right size and slides (bench_defrag's sparse
   heap: 1.12x the lower bound against 3.7x). With many holes the loop is the
   cheaper one (1.00x against 1.31x on the game mix). */
static bool holes_sparse(const hh_heap *h) { return hole_bytes(h) < h->used_bytes / HHI_DEFRAG_FINISH_START; }

/* true if AUTO's bounded step in a heap the game allocates in should go on
   to the hole-by-hole loop, which closes every hole it can. A hysteresis on
   the bytes of the holes below the top region: it starts when they reach
   1/HHI_DEFRAG_FINISH_START of the live bytes (worth closing for footprint)
   and goes on until they are down to 1/HHI_DEFRAG_FINISH_STOP. Below the
   start, in a heap that churns, the holes are the game's own working space:
   it refills them itself, and closing them moves blocks that die soon after
   (bench_footprint's streaming trace moved 13x the bytes it freed when this
   loop always ran; 0.5x with the hysteresis). */
static bool finishing_pays(const hh_heap *h, struct hhi_defrag *d) {
    size_t holes = hole_bytes(h);
    if (holes >= h->used_bytes / HHI_DEFRAG_FINISH_START) d->finishing = true;
    else if (holes <= h->used_bytes / HHI_DEFRAG_FINISH_STOP) d->finishing = false;
    return d->finishing;
}

/* run_moves_inner with the window carried over from the last step when the
   heap has not changed since (same mutation count, same byte budget): a
   fresh window costs HHI_DEFRAG_WINDOW cold header reads. */
static void run_moves(step_ctx *c) {
    struct hhi_defrag *d = c->d;
    if (d && d->win_saved && d->win_mutations == c->h->mutations && d->win_max_bytes == c->max_bytes) {
        memcpy(c->win, d->win, d->win_n * sizeof c->win[0]);
        c->win_n = d->win_n;
        c->win_end = d->win_end;
    }
    run_moves_inner(c);
    if (d) {
        memcpy(d->win, c->win, c->win_n * sizeof c->win[0]);
        d->win_n = c->win_n;
        d->win_end = c->win_end;
        d->win_saved = true;
        d->win_mutations = c->h->mutations;
        d->win_max_bytes = c->max_bytes;
    }
}

/* AUTO's step (hh_defrag_full runs the loop alone). Two modes:
   - a bounded step while the game allocates (something landed within
     HHI_DEFRAG_COLD_STEPS steps):
     evacuate sparse, quiet ranges; lower the top; then the hole-by-hole loop
     only while finishing_pays, sliding no block over a hole much smaller
     than itself. What is left is the game's working space: stop BUSY.
   - the heap is quiet, or the step has no limit: sparse holes are filled
     from the top (lower_top) unless the loop is already under way; dense
     holes go to the loop, latched until the heap is compact (the loop then
     moves about the lower bound). */
static void auto_moves(step_ctx *c) {
    hh_heap *h = c->h;
    struct hhi_defrag *d = c->d;
    bool bounded = c->work_max != UINT64_MAX;          /* some limit was set (ctx_make) */
    if (bounded && !heap_quiet(h)) {
        if (evacuate(c) || lower_top(c)) return;      /* the budget is spent */
        c->slide_cap = HHI_DEFRAG_SLIDE_CAP;
        if (finishing_pays(h, d) || hole_bytes(h) == 0) run_moves(c);   /* no hole: the loop says compact, O(1) */
        else c->r.stop = HH_DEFRAG_STOP_BUSY;
        return;
    }
    if (!d->finishing && holes_sparse(h)) {
        if (lower_top(c)) return;
    } else {
        d->finishing = true;
    }
    run_moves(c);
}

static step_ctx ctx_make(hh_heap *h, struct hhi_defrag *d, const hh_defrag_budget *b, bool full) {
    step_ctx c = { .h = h, .d = d, .policy = d ? d->policy : HH_DEFRAG_AUTO, .t0 = hhi_now_ns(), .work_max = UINT64_MAX };
    if (!full) {
        c.max_moves = b->max_moves;
        c.max_bytes = b->max_bytes;
        c.max_ns = (d && d->cfg.deterministic) ? 0 : b->max_ns;
        if (b->max_moves || b->max_bytes || b->max_ns)
            c.work_max = HHI_DEFRAG_WORK_BASE +
                         (uint64_t)HHI_DEFRAG_WORK_PER_MOVE * (b->max_moves ? b->max_moves : HHI_DEFRAG_WORK_NO_MOVES);
    }
    return c;
}

/* hh_defrag_full's bulk pass: one address-order sweep that slides every run
   of movable blocks down at about memmove speed (hhi_heap_sweep_compact).
   Holes under pinned or alignment-stuck blocks are left to the policy loop
   that follows. O(blocks), as a full compaction may be. */
static void full_bulk_slide(step_ctx *c) {
    size_t bytes = 0, n = hhi_heap_sweep_compact(c->h, &bytes);
    c->r.moves += (uint32_t)n;
    c->r.bytes_moved += bytes;
    if (n && c->d) {                                   /* the layout changed under the cursor */
        cursor_reset(c->d);
        c->d->known_compact = false;
        c->d->win_saved = false;
    }
}

/* HH_HEAP_STRESS_MOVES: alternately moves every movable block up into the top
   free region (so each one's old bytes become no-access) and compacts fully
   (so each one comes back down). Blocks that do not fit the top region in the
   up phase stay (a heap more than half full). */
static void stress_up(step_ctx *c) {
    hh_heap *h = c->h;
    hhi_block *t = hhi_heap_top_free(h);
    size_t end = t ? blk_offset(h, t) : h->managed;
    for (size_t off = 0; off < end;) {
        size_t g = hhi_bitmap_next(&h->starts, off / HHI_GRANULE);
        if (g == HHI_BM_NONE || granule_off((uint32_t)g) >= end) break;
        hhi_block *b = blk_at(h, granule_off((uint32_t)g));
        off = blk_offset(h, b) + blk_size(b);
        if (blk_is_free(b) || blk_pinned(b)) continue;
        t = hhi_heap_top_free(h);
        if (t == NULL || !hhi_heap_fits(h, t, blk_need(b), blk_align(b), NULL)) continue;
        size_t bytes = blk_usable(h, b);
        hhi_heap_move_into(h, b, t, 0);
        c->r.moves++;
        c->r.bytes_moved += bytes;
    }
    if (c->d) {                                        /* the layout changed under the cursor */
        cursor_reset(c->d);
        c->d->known_compact = false;
        c->d->win_saved = false;
    }
    c->r.compact = false;
    c->r.stop = HH_DEFRAG_STOP_WORK;
}

static void stress_moves(step_ctx *c) {
    struct hhi_defrag *d = c->d;
    bool up = d == NULL || !d->stress_down;
    if (d) d->stress_down = !d->stress_down;
    if (up) stress_up(c);
    else run_moves(c);
}

/* Trigger hysteresis: true if the step should work (lock held). */
static bool trigger_wants_work(hh_heap *h, struct hhi_defrag *d) {
    if (d == NULL || !d->cfg.trigger) return true;
    size_t fb = h->free_bytes, largest = hhi_freelist_largest(h);
    double frag = hhi_fragmentation(largest, fb);
    if (!d->active) {
        if (frag > d->cfg.trigger_start_fragmentation && fb - largest >= d->cfg.trigger_start_wasted_bytes)
            d->active = true;
    } else if (frag < d->cfg.trigger_stop_fragmentation) {
        d->active = false;
    }
    return d->active;
}

/* Gives the top region's pages back when it may have grown (lock held). A
   bounded step gives back at most decommit_step_bytes (an madvise costs about
   a microsecond a page: unbounded, it would be the slowest part of a step) and
   leaves the rest pending for the next steps; hh_defrag_full gives back all. */
static void maybe_decommit(hh_heap *h, struct hhi_defrag *d, bool moved, bool bounded) {
    if (d == NULL || d->cfg.no_decommit) return;
    if (!moved && !d->dc_pending && d->dc_mutations == h->mutations) return;
    d->dc_mutations = h->mutations;
    size_t cap = bounded ? d->cfg.decommit_step_bytes : 0;
    size_t n = hhi_heap_decommit_top(h, d->cfg.decommit_retain_bytes, d->cfg.decommit_min_bytes, cap);
    d->dc_pending = cap && n > 0;                      /* more may be left: look again next step */
}

static hh_defrag_report defrag_run(hh_heap *h, const hh_defrag_budget *budget, bool full) {
    heap_lock(h);
    hh_assert_expensive(hhi_heap_is_valid(h));
    struct hhi_defrag *d = defrag_state(h);
    bool stress = (h->flags & HH_HEAP_STRESS_MOVES) != 0;
    if (!full) h->epoch++;                             /* the frame clock of the quiet-region test */
    step_ctx c = ctx_make(h, d, budget, full || stress);   /* stress: the budget does not hold it back */
    hhi_heap_journal_reset(h);
    if (stress && full) {                              /* every block up, then a real full compaction */
        stress_up(&c);
        full_bulk_slide(&c);
        run_moves(&c);
    } else if (stress) {
        stress_moves(&c);
    } else if (!full && !trigger_wants_work(h, d)) {
        c.r.stop = HH_DEFRAG_STOP_IDLE;
        hhi_block *t = hhi_heap_top_free(h);
        c.r.compact = (d->known_compact && d->known_mutations == h->mutations) || h->free_blocks <= (t ? 1u : 0u);
        d->steps_idle++;
    } else {
        if (full) full_bulk_slide(&c);
        if (!full && c.policy == HH_DEFRAG_AUTO && d) auto_moves(&c);
        else run_moves(&c);
        if (d && c.r.compact) d->active = d->finishing = false;
    }
    maybe_decommit(h, d, c.r.moves > 0, !full && (budget->max_moves || budget->max_bytes || budget->max_ns));
    if (d) {
        d->steps++;
        d->steps_compact += c.r.compact;
        d->moves += c.r.moves;
        d->bytes_moved += c.r.bytes_moved;
        if (!full) {
            d->last_max_moves = budget->max_moves;
            d->have_stepped = true;
        }
    }
    heap_event(h, &(hh_heap_event){ .kind = full ? HH_EV_DEFRAG_FULL : HH_EV_DEFRAG_STEP, .max_moves = budget->max_moves, .moves = c.r.moves,
                                   .max_bytes = budget->max_bytes, .max_ns = budget->max_ns });
    hh_assert_expensive(hhi_heap_is_valid(h));
    heap_unlock(h);
    c.r.elapsed_ns = hhi_now_ns() - c.t0;
    return c.r;
}

/* The cheapest room for a request the bounded run could not make: the run
   of consecutive free blocks [first, last] (the top region may end it) whose
   free bytes hold size + align with the fewest live bytes between them, found
   in one pass over the holes in address order (two cursors; at most
   HHI_DEFRAG_RANGE_HOLES holes looked at, the best so far wins, and a range
   whose live bytes are no more than the request ends the search). Sliding the
   live blocks of that range down, each into the free block below it, leaves
   its free bytes as one block at its end: the request then costs the live
   bytes of one range, not a compaction of the heap. With pinned blocks (the
   range could hold one) it is not tried. NULL when no such range exists or
   alignment kept the range from closing; the caller falls back to the full
   compaction. */
static hhi_block *compact_cheapest_range(hh_heap *h, size_t size, size_t align) {
    if (h->pinned_blocks) return NULL;
    size_t need = size + (align > HHI_GRANULE ? align : 0);
    hhi_block *lo = hhi_heap_lowest_free(h), *best = NULL;
    size_t best_live = SIZE_MAX, best_end = 0, free_sum = 0;
    unsigned looked = 0;
    for (hhi_block *hi = lo; hi && looked < HHI_DEFRAG_RANGE_HOLES; looked++) {
        size_t hend = blk_offset(h, hi) + blk_size_free(hi);
        free_sum += blk_size_free(hi);
        while (lo != hi && free_sum - blk_size_free(lo) >= need) {   /* drop holes from the left while enough stays */
            free_sum -= blk_size_free(lo);
            lo = hhi_heap_free_at_or_after(h, blk_offset(h, lo) + blk_size_free(lo));
        }
        if (free_sum >= need) {
            size_t live = hend - blk_offset(h, lo) - free_sum;
            if (live < best_live) {
                best_live = live;
                best = lo;
                best_end = hend;
                if (live <= need) break;               /* costs no more than the request: good enough */
            }
        }
        hi = hend < h->managed ? hhi_heap_free_at_or_after(h, hend) : NULL;
    }
    return best ? hhi_heap_slide_range(h, best, best_end, size, align) : NULL;
}

/* Allocation-time compaction (heap->compact_hook; lock held): first a bounded
   run of the policy (HHI_DEFRAG_ALLOC_MOVES moves) that stops as soon as a
   free block fits size/align -- enough when a few holes need merging; then the
   cheapest range (compact_cheapest_range); if neither does it, the full
   compaction (one sweep at memmove speed, then the policy for what pins
   left). The moves join the journal of the last step.
   NULL if no compaction can make room. */
static hhi_block *defrag_compact_for(hh_heap *h, size_t size, size_t align) {
    struct hhi_defrag *d = h->defrag;
    step_ctx c = ctx_make(h, d, &(hh_defrag_budget){ .max_moves = HHI_DEFRAG_ALLOC_MOVES }, false);
    c.need_size = size;
    c.need_align = align;
    run_moves(&c);
    hhi_block *f = hhi_heap_find_fit(h, size, align);
    if (!f) f = compact_cheapest_range(h, size, align);
    if (!f && !c.r.compact) {
        step_ctx full = ctx_make(h, d, &(hh_defrag_budget){0}, true);
        full.need_size = size;
        full.need_align = align;
        full_bulk_slide(&full);
        run_moves(&full);
        f = hhi_heap_find_fit(h, size, align);
    }
    if (d) d->win_saved = false;                       /* the caller carves and moves next: no reuse */
    return f;
}

/* ---------------------------------------------------------------------------
   Public API
--------------------------------------------------------------------------- */
hh_defrag_report hh_defrag_step(hh_heap *heap, uint32_t max_moves) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_step: heap is NULL");
        return (hh_defrag_report){ .stop = HH_DEFRAG_STOP_ERROR };
    }
    if (max_moves == 0) {                              /* zero means zero: nothing to do */
        heap_lock(heap);
        bool compact = heap->defrag && heap->defrag->known_compact && heap->defrag->known_mutations == heap->mutations;
        heap_unlock(heap);
        return (hh_defrag_report){ .stop = HH_DEFRAG_STOP_MOVES, .compact = compact };
    }
    return defrag_run(heap, &(hh_defrag_budget){ .max_moves = max_moves == HH_DEFRAG_UNLIMITED ? 0 : max_moves }, false);
}

hh_defrag_report hh_defrag_step_ex(hh_heap *heap, const hh_defrag_budget *budget) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_step_ex: heap is NULL");
        return (hh_defrag_report){ .stop = HH_DEFRAG_STOP_ERROR };
    }
    return defrag_run(heap, budget ? budget : &(hh_defrag_budget){0}, false);
}

hh_defrag_report hh_defrag_full(hh_heap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_full: heap is NULL");
        return (hh_defrag_report){ .stop = HH_DEFRAG_STOP_ERROR };
    }
    return defrag_run(heap, &(hh_defrag_budget){0}, true);
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
    struct hhi_defrag *d = defrag_state(heap);        /* installs allocation-time compaction too */
    if (d) __atomic_store_n(&d->policy, policy, __ATOMIC_RELAXED);   /* read lock-free by hh_defrag_get_policy */
    heap_unlock(heap);
    if (d == NULL) hhi_error(HH_E_NO_MEMORY, "hh_defrag_set_policy: cannot allocate the defrag state; policy unchanged");
}

/* Lock-free, the one getter that is: the trace recorder calls it from inside
   the event hook, where the heap lock is already held. The state pointer is
   published with release once built and the policy stored atomically, so a
   reader on another thread sees either AUTO or a policy that was set. */
hh_defrag_policy hh_defrag_get_policy(const hh_heap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_get_policy: heap is NULL");
        return HH_DEFRAG_AUTO;
    }
    const struct hhi_defrag *d = __atomic_load_n(&heap->defrag, __ATOMIC_ACQUIRE);
    return d ? __atomic_load_n(&d->policy, __ATOMIC_RELAXED) : HH_DEFRAG_AUTO;
}

const char *hh_defrag_policy_str(hh_defrag_policy policy) {
    switch (policy) {
    case HH_DEFRAG_AUTO: return "auto";
    case HH_DEFRAG_SLIDE: return "slide";
    case HH_DEFRAG_FILL: return "fill";
    }
    return "unknown";
}

const char *hh_defrag_stop_str(hh_defrag_stop stop) {
    static const char *const names[] = {
        [HH_DEFRAG_STOP_COMPACT] = "compact", [HH_DEFRAG_STOP_MOVES] = "moves",   [HH_DEFRAG_STOP_BYTES] = "bytes",
        [HH_DEFRAG_STOP_TIME] = "time",       [HH_DEFRAG_STOP_WORK] = "work",     [HH_DEFRAG_STOP_IDLE] = "idle",
        [HH_DEFRAG_STOP_OVERSIZE] = "oversize", [HH_DEFRAG_STOP_ERROR] = "error",   [HH_DEFRAG_STOP_BUSY] = "busy",
    };
    _Static_assert(HH_ARRAY_LEN(names) == HH_DEFRAG_STOP_BUSY + 1, "stop names out of sync");
    return (unsigned)stop < HH_ARRAY_LEN(names) ? names[stop] : "unknown";
}

/* The rules, on a configuration with its defaults applied. */
static const char *config_problem(const hh_defrag_config *c) {
    if (!(c->trigger_start_fragmentation >= 0.0 && c->trigger_start_fragmentation <= 1.0) ||
        !(c->trigger_stop_fragmentation >= 0.0 && c->trigger_stop_fragmentation <= 1.0))
        return "fragmentation thresholds must lie in [0, 1]";
    if (c->trigger_stop_fragmentation > c->trigger_start_fragmentation)
        return "stop fragmentation above start fragmentation (after defaults)";
    return NULL;
}

const char *hh_defrag_config_problem(const hh_defrag_config *config) {
    hh_defrag_config c = config_defaults(config);
    return config_problem(&c);
}

hh_status hh_defrag_configure(hh_heap *heap, const hh_defrag_config *config) {
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_defrag_configure: heap is NULL");
    hh_defrag_config c = config_defaults(config);
    const char *why = config_problem(&c);
    if (why != NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_defrag_configure: %s (start %g, stop %g)", why,
                         c.trigger_start_fragmentation, c.trigger_stop_fragmentation);
    heap_lock(heap);
    struct hhi_defrag *d = defrag_state(heap);
    if (d == NULL) {
        heap_unlock(heap);
        return hhi_error(HH_E_NO_MEMORY, "hh_defrag_configure: cannot allocate the defrag state");
    }
    d->cfg = c;
    if (!c.trigger) d->active = false;
    heap_unlock(heap);
    return HH_OK;
}

void hh_defrag_config_get(const hh_heap *heap, hh_defrag_config *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_config_get: out is NULL");
        return;
    }
    if (heap == NULL) {
        *out = (hh_defrag_config){0};
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_config_get: heap is NULL");
        return;
    }
    heap_lock(heap);
    *out = heap->defrag ? heap->defrag->cfg : config_defaults(NULL);
    heap_unlock(heap);
}

hh_status hh_defrag_metrics_get(const hh_heap *heap, hh_defrag_metrics *out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_defrag_metrics_get: out is NULL");
    *out = (hh_defrag_metrics){0};
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_defrag_metrics_get: heap is NULL");
    const hh_heap *h = heap;
    heap_lock(h);
    const struct hhi_defrag *d = h->defrag;
    hhi_block *t = hhi_heap_top_free(h), *lo = hhi_heap_lowest_free(h);
    /* the heap's cached blocks are holes of their own (heap_internal.h, I13) */
    size_t fb = h->free_bytes + heap_cached_bytes(h), largest = hhi_freelist_largest(h), top = t ? blk_size_free(t) : 0;
    size_t cached_largest = heap_cached_largest(h), live_bytes = h->used_bytes - heap_cached_bytes(h);
    if (cached_largest > largest) largest = cached_largest;
    out->free_bytes = fb;
    out->largest_free = largest;
    out->top_free_bytes = top;
    out->hole_count = h->free_blocks + heap_cached_blocks(h) - (t ? 1u : 0u);
    out->fragmentation = hhi_fragmentation(largest, fb);
    out->fragmentation_sq = hhi_fragmentation_sq(ldexp((double)(h->free_sumsq + heap_cached_sumsq(h)), 2 * (int)h->sq_shift),
                                                 fb);                  /* undo the overflow shift */
    /* Everything below the lowest free block is live (hhi_compaction_debt).
       With cached blocks (holes too) the lowest hole is bounded by the heap's
       low_mark: an upper bound of the debt, exact while the lowest block
       cached since the last step stays. */
    size_t low = heap_lowest_hole_bound(h, lo && lo != t ? blk_offset(h, lo) : SIZE_MAX);
    out->debt_bytes = hhi_compaction_debt(live_bytes, low,
                                          low < (t ? blk_offset(h, t) : h->managed));
    if (out->debt_bytes && h->live_blocks) {
        size_t holes = fb - top, need = out->debt_bytes < holes ? out->debt_bytes : holes;
        double avg = (double)live_bytes / (double)h->live_blocks;
        uint64_t moves = (uint64_t)ceil((double)need / avg);
        uint32_t n = d && d->have_stepped ? d->last_max_moves : HHI_DEFRAG_DEFAULT_N;
        out->frames_to_compact = n ? (moves + n - 1) / n : 1;
        if (out->frames_to_compact == 0) out->frames_to_compact = 1;
    }
    out->pinned_bytes = h->pinned_bytes;
    out->decommitted_bytes = h->decommitted;
    if (d) {
        out->blocking_pinned_bytes = d->blocking_pinned;
        out->stuck_hole_bytes = d->stuck_bytes;
        out->stuck_holes = d->stuck_holes;
        out->trigger_active = d->cfg.trigger && d->active;
        out->steps = d->steps;
        out->compact_steps = d->steps_compact;
        out->idle_steps = d->steps_idle;
        out->moves = d->moves;
        out->bytes_moved = d->bytes_moved;
        out->absorbed_bytes = d->absorbed_bytes;
        out->evacuations = d->jobs;
    }
    heap_unlock(h);
    return HH_OK;
}

size_t hh_defrag_journal(const hh_heap *heap, const hh_move_record **out) {
    if (heap == NULL || out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_defrag_journal: NULL argument");
        if (out) *out = NULL;
        return 0;
    }
    heap_lock(heap);                                   /* as every other getter */
    *out = heap->journal.rec;
    size_t n = heap->journal.count;
    heap_unlock(heap);
    return n;
}
