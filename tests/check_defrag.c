/* check_defrag.c -- hh_defrag_step and friends (include/hheap/defrag.h):
 * holes rise and merge, at most N moves, pinned blocks stay, alignment
 * survives moves, on_move and the journal agree, and a seeded randomised
 * shadow-model test of alloc/free/resize/pin/unpin/step that verifies every
 * byte of every live block after every step. */
#include "hheap/defrag.h"

#include <stdlib.h>
#include <string.h>

#include "test_util.h"

typedef struct move_log {
    unsigned calls;
    size_t bytes;
    bool bad;                 /* a callback saw inconsistent arguments */
    const hh_heap *heap;
} move_log;

static void on_move(hh_handle h, void *old_addr, void *new_addr, size_t size, void *user) {
    move_log *m = user;
    m->calls++;
    m->bytes += size;
    if (old_addr == new_addr || size == 0 || hh_is_null(h)) m->bad = true;
    if (m->heap && hh_handle_lookup((const hh_handle_table *)(const void *)m->heap, h) != new_addr) m->bad = true;
}

static hh_heap *heap;
static move_log mlog;

static void setup(void) {
    hh_test_capture_errors();
    mlog = (move_log){0};
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .on_move = on_move, .user = &mlog }, &heap),
                     HH_OK);
    mlog.heap = heap;
}
static void teardown(void) {
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_heap_destroy(heap);
    hh_set_error_handler(NULL, NULL);
}

/* Frees objects 0, 2, 4 ... of the shadow (allocation order = address order
   on a fresh heap) and keeps the others. */
static void free_every_other(hh_shadow *sh) {
    size_t kept = 0;
    for (size_t i = 0; i < sh->count; i++) {
        if (i % 2 == 0) ck_assert_int_eq(hh_free(heap, sh->objs[i].h), HH_OK);
        else sh->objs[kept++] = sh->objs[i];
    }
    sh->count = kept;
}

/* Every free block below the top one must sit under a block that cannot go
   down: pinned, or aligned so that the hole is too small to take it. */
typedef struct stuck_walk { hh_block_info prev; bool have_prev, ok; const hh_heap *heap; } stuck_walk;
static void stuck_visit(const hh_block_info *b, void *user) {
    stuck_walk *w = user;
    if (w->have_prev && w->prev.state == HH_BLOCK_FREE) {
        bool pinned = b->state == HH_BLOCK_PINNED;
        size_t align = 16;
        if (b->state != HH_BLOCK_FREE) {
            uintptr_t p = (uintptr_t)hh_deref(w->heap, b->handle);
            while (align < 4096 && (p & (align * 2 - 1)) == 0) align *= 2;   /* at least its alignment */
        }
        size_t dst = (w->prev.offset + align - 1) / align * align;
        if (!pinned && dst < b->offset) w->ok = false;
    }
    w->prev = *b;
    w->have_prev = true;
}
static bool only_stuck_holes(const hh_heap *h) {
    stuck_walk w = { .ok = true, .heap = h };
    hh_heap_walk(h, stuck_visit, &w);
    return w.ok;
}

/* Allocates n blocks of `size`, fills them, frees every other one. */
static void checkerboard(hh_shadow *sh, unsigned n, size_t size) {
    for (unsigned i = 0; i < n; i++) hh_shadow_add(sh, heap, hh_alloc(heap, size), size, 16, i);
    free_every_other(sh);
}

START_TEST(holes_rise_and_merge) {
    hh_shadow sh;
    hh_shadow_init(&sh);
    checkerboard(&sh, 200, 200);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_gt(st.free_blocks, 90);
    ck_assert(st.fragmentation > 0.0);
    unsigned steps = 0;
    hh_defrag_report r;
    do {
        r = hh_defrag_step(heap, 8);
        ck_assert_uint_le(r.moves, 8);
        ck_assert_int_eq(hh_heap_check(heap), HH_OK);
        hh_shadow_verify(&sh, heap);
        steps++;
        ck_assert_uint_lt(steps, 1000);
    } while (!r.compact);
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.free_blocks, 1);
    ck_assert(st.fragmentation == 0.0);
    ck_assert_uint_eq(st.largest_free, st.free_bytes);
    ck_assert(!mlog.bad);
    ck_assert_uint_eq(mlog.calls, st.total_moves);
    r = hh_defrag_step(heap, 8);                      /* nothing left to do */
    ck_assert_uint_eq(r.moves, 0);
    ck_assert(r.compact);
    hh_shadow_fini(&sh);
}
END_TEST

START_TEST(slide_keeps_address_order) {
    hh_handle hs[50];
    for (int i = 0; i < 50; i++) hs[i] = hh_alloc(heap, 64 + 16 * (unsigned)(i % 5));
    for (int i = 0; i < 50; i += 3) hh_free(heap, hs[i]);
    hh_defrag_set_policy(heap, HH_DEFRAG_SLIDE);
    ck_assert_int_eq(hh_defrag_get_policy(heap), HH_DEFRAG_SLIDE);
    hh_defrag_report r = hh_defrag_full(heap);
    ck_assert(r.compact);
    char *prev = NULL;
    for (int i = 1; i < 50; i++) {
        if (i % 3 == 0) continue;
        char *p = hh_deref(heap, hs[i]);
        ck_assert(p > prev);
        prev = p;
    }
}
END_TEST

START_TEST(journal_matches_on_move) {
    hh_handle hs[40];
    for (int i = 0; i < 40; i++) hs[i] = hh_alloc(heap, 96);
    for (int i = 0; i < 40; i += 2) hh_free(heap, hs[i]);
    hh_defrag_report r = hh_defrag_step(heap, 5);
    ck_assert_uint_eq(r.moves, 5);
    const hh_move_record *rec;
    size_t n = hh_defrag_journal(heap, &rec);
    ck_assert_uint_eq(n, 5);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_lt(rec[i].dst_offset, rec[i].src_offset);
        char *p = hh_deref(heap, rec[i].handle);
        ck_assert_ptr_eq(p - 16, (char *)hh_heap_base(heap) + rec[i].dst_offset);
    }
    ck_assert_uint_eq(r.bytes_moved, mlog.bytes);
    hh_defrag_step(heap, 0);                         /* a new step clears the journal */
    ck_assert_uint_eq(hh_defrag_journal(heap, &rec), hh_defrag_journal(heap, &rec));
}
END_TEST

START_TEST(pinned_blocks_never_move) {
    hh_handle hs[100];
    for (int i = 0; i < 100; i++) hs[i] = hh_alloc(heap, 128);
    void *pinned[3];
    int pin_idx[3] = { 10, 51, 90 };
    for (int k = 0; k < 3; k++) pinned[k] = hh_pin(heap, hs[pin_idx[k]]);
    for (int i = 0; i < 100; i += 2) hh_free(heap, hs[i]);
    unsigned steps = hh_test_scaled(3000, 300);
    for (unsigned s = 0; s < steps; s++) {
        hh_defrag_step(heap, 4);
        if (s % 100 == 0) {
            hh_handle extra = hh_alloc(heap, 64 + s % 200);        /* churn between steps */
            hh_free(heap, extra);
        }
        for (int k = 0; k < 3; k++) ck_assert_ptr_eq(hh_deref(heap, hs[pin_idx[k]]), pinned[k]);
    }
    ck_assert(hh_defrag_step(heap, 4).compact);
    for (int k = 0; k < 3; k++) ck_assert_int_eq(hh_unpin(heap, hs[pin_idx[k]]), HH_OK);
    ck_assert(hh_defrag_full(heap).compact);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.free_blocks, 1);
}
END_TEST

START_TEST(alignment_survives_moves) {
    hh_shadow sh;
    hh_shadow_init(&sh);
    hh_rng r = hh_rng_make(77);
    hh_handle junk[64];
    for (int i = 0; i < 64; i++) {
        junk[i] = hh_alloc(heap, 16 + hh_rng_below(&r, 300));
        size_t a = (size_t)1 << hh_rng_below(&r, 13);
        hh_handle h = hh_alloc_ex(heap, 8 + hh_rng_below(&r, 200), a, (uint32_t)a);
        hh_shadow_add(&sh, heap, h, 8, a < 16 ? 16 : a, (uint64_t)i);
    }
    for (int i = 0; i < 64; i++) hh_free(heap, junk[i]);
    hh_defrag_report rep = hh_defrag_full(heap);
    ck_assert(rep.compact);
    ck_assert_uint_gt(rep.moves, 0);
    hh_shadow_verify(&sh, heap);
    for (size_t i = 0; i < sh.count; i++) ck_assert_uint_eq(hh_tag(heap, sh.objs[i].h), sh.objs[i].align == 16 ? hh_tag(heap, sh.objs[i].h) : sh.objs[i].align);
    hh_shadow_fini(&sh);
}
END_TEST

START_TEST(alloc_compacts_when_bytes_exist) {
    hh_shadow sh;
    hh_shadow_init(&sh);
    /* Fill the heap with 1 KiB blocks, free every other one: half the bytes are
       free, yet no hole holds more than one block. */
    for (;;) {
        hh_handle h = hh_alloc(heap, 1000);
        if (hh_is_null(h)) break;
        hh_shadow_add(&sh, heap, h, 1000, 16, sh.count);
    }
    free_every_other(&sh);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_lt(st.largest_free, st.free_bytes / 4);
    hh_handle big = hh_alloc(heap, st.free_bytes / 2);
    ck_assert(!hh_is_null(big));
    hh_shadow_verify(&sh, heap);
    ck_assert_uint_gt(mlog.calls, 0);
    hh_shadow_fini(&sh);
}
END_TEST

START_TEST(null_heap_is_reported) {
    hh_defrag_report r = hh_defrag_step(NULL, 4);
    ck_assert_uint_eq(r.moves, 0);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    hh_defrag_set_policy(heap, (hh_defrag_policy)42);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_defrag_get_policy(heap), HH_DEFRAG_AUTO);
}
END_TEST

/* ---------------------------------------------------------------------------
   Randomised shadow-model test
--------------------------------------------------------------------------- */
enum { BUDGET_MOVES, BUDGET_BYTES, BUDGET_TIME, BUDGET_ALL, BUDGET_KINDS };

/* One bounded step of the given kind; asserts the report keeps to the budget. */
static hh_defrag_report budget_step(hh_rng *r, int kind) {
    hh_defrag_budget b = {0};
    if (kind == BUDGET_MOVES || kind == BUDGET_ALL) b.max_moves = 1 + hh_rng_below(r, 16);
    if (kind == BUDGET_BYTES || kind == BUDGET_ALL) b.max_bytes = 64 + hh_rng_below(r, 8192);
    if (kind == BUDGET_TIME || kind == BUDGET_ALL) b.max_ns = 1000 + hh_rng_below(r, 200000);
    hh_defrag_report rep = hh_defrag_step_ex(heap, &b);
    if (b.max_moves) ck_assert_uint_le(rep.moves, b.max_moves);
    if (b.max_bytes) ck_assert_uint_le(rep.bytes_moved, b.max_bytes);
    if (b.max_bytes && rep.oversize_bytes) ck_assert_uint_gt(rep.oversize_bytes, b.max_bytes);
    if (rep.compact) ck_assert_uint_eq(rep.oversize_bytes, 0);
    return rep;
}

static void random_ops(uint64_t seed, unsigned ops, bool aligned, int budget_kind) {
    hh_shadow sh;
    hh_shadow_init(&sh);
    hh_rng r = hh_rng_make(seed);
    unsigned pins = 0;
    for (unsigned i = 0; i < ops; i++) {
        unsigned op = hh_rng_below(&r, 100);
        if (op < 45 || sh.count == 0) {                               /* alloc */
            size_t size = hh_rng_below(&r, 4) ? 1 + hh_rng_below(&r, 256) : 1 + hh_rng_below(&r, 8192);
            size_t align = (!aligned || hh_rng_below(&r, 8)) ? 16 : (size_t)1 << hh_rng_below(&r, 13);
            hh_handle h = hh_alloc_ex(heap, size, align, op);
            if (hh_is_null(h)) {
                ck_assert_int_eq(hh_last_error(), HH_E_NO_MEMORY);
                continue;
            }
            hh_shadow_add(&sh, heap, h, size, align < 16 ? 16 : align, hh_rng_next(&r));
        } else if (op < 75) {                                         /* free */
            size_t k = hh_rng_below(&r, (uint32_t)sh.count);
            hh_shadow_obj *o = &sh.objs[k];
            if (o->pins) {
                ck_assert_int_eq(hh_free(heap, o->h), HH_E_PINNED);
                continue;
            }
            ck_assert_int_eq(hh_free(heap, o->h), HH_OK);
            ck_assert_ptr_null(hh_deref(heap, o->h));
            hh_shadow_remove(&sh, k);
        } else if (op < 85) {                                         /* resize */
            hh_shadow_obj *o = &sh.objs[hh_rng_below(&r, (uint32_t)sh.count)];
            size_t ns = 1 + hh_rng_below(&r, 2048);
            hh_status s = hh_resize(heap, o->h, ns);
            if (s == HH_OK) {
                if (o->pins) ck_assert_ptr_eq(hh_deref(heap, o->h), o->pinned_at);
                size_t keep = ns < o->size ? ns : o->size;
                ck_assert_int_eq(hh_test_verify(hh_deref(heap, o->h), keep, o->key), -1);
                o->size = ns;
                hh_test_fill(hh_deref(heap, o->h), ns, o->key);
            } else {
                ck_assert(s == HH_E_NO_MEMORY || (s == HH_E_PINNED && o->pins));
            }
        } else if (op < 90) {                                         /* pin */
            hh_shadow_obj *o = &sh.objs[hh_rng_below(&r, (uint32_t)sh.count)];
            if (pins < 8 || o->pins) {
                void *p = hh_pin(heap, o->h);
                ck_assert_ptr_nonnull(p);
                if (o->pins == 0) pins++;
                o->pins++;
                o->pinned_at = p;
            }
        } else if (op < 95) {                                         /* unpin */
            hh_shadow_obj *o = &sh.objs[hh_rng_below(&r, (uint32_t)sh.count)];
            if (o->pins) {
                ck_assert_int_eq(hh_unpin(heap, o->h), HH_OK);
                if (--o->pins == 0) pins--;
            } else {
                ck_assert_int_eq(hh_unpin(heap, o->h), HH_E_INVALID_ARG);
            }
        } else {                                                      /* defrag step */
            uint32_t n = 1 + hh_rng_below(&r, 16);
            unsigned before = mlog.calls;
            size_t bytes_before = mlog.bytes;
            hh_defrag_report rep = budget_kind < 0 ? hh_defrag_step(heap, n) : budget_step(&r, budget_kind);
            if (budget_kind < 0) ck_assert_uint_le(rep.moves, n);
            ck_assert_uint_eq(mlog.calls - before, rep.moves);
            ck_assert_uint_eq(mlog.bytes - bytes_before, rep.bytes_moved);
            const hh_move_record *rec;
            ck_assert_uint_eq(hh_defrag_journal(heap, &rec), rep.moves);
            hh_shadow_verify(&sh, heap);
        }
        ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    }
    hh_shadow_verify(&sh, heap);
    for (size_t i = 0; i < sh.count; i++)
        while (sh.objs[i].pins) {
            ck_assert_int_eq(hh_unpin(heap, sh.objs[i].h), HH_OK);
            sh.objs[i].pins--;
        }
    unsigned steps = 0;
    while (!hh_defrag_step(heap, 16).compact) {
        hh_shadow_verify(&sh, heap);
        ck_assert_uint_lt(++steps, 100000);
    }
    /* Compact: every hole left sits under a block whose alignment stops it. */
    ck_assert(only_stuck_holes(heap));
    if (!aligned) {
        hh_heap_stats st;
        hh_heap_stats_get(heap, &st);
        ck_assert_uint_le(st.free_blocks, 1);
        ck_assert(st.fragmentation == 0.0);
    }
    hh_shadow_verify(&sh, heap);
    ck_assert(!mlog.bad);
    hh_shadow_fini(&sh);
}

START_TEST(random_shadow_model) {
    uint64_t seed = hh_test_seed(0x5EED0000u + (uint64_t)_i);
    random_ops(seed, hh_test_scaled(6000, 600), _i % 2 == 1, -1);
}
END_TEST

/* Every policy under every budget kind: 3 x 4 runs, aligned blocks in half. */
START_TEST(random_policy_budget) {
    hh_defrag_policy pol = (hh_defrag_policy)(_i % 3);
    int kind = (_i / 3) % BUDGET_KINDS;
    hh_defrag_set_policy(heap, pol);
    uint64_t seed = hh_test_seed(0xB0D6E700u + (uint64_t)_i);
    random_ops(seed, hh_test_scaled(3000, 400), _i % 2 == 0, kind);
}
END_TEST

Suite *hh_test_defrag_suite(void) {
    Suite *s = suite_create("defrag");
    TCase *tc = tcase_create("step");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, holes_rise_and_merge);
    tcase_add_test(tc, slide_keeps_address_order);
    tcase_add_test(tc, journal_matches_on_move);
    tcase_add_test(tc, pinned_blocks_never_move);
    tcase_add_test(tc, alignment_survives_moves);
    tcase_add_test(tc, alloc_compacts_when_bytes_exist);
    tcase_add_test(tc, null_heap_is_reported);
    suite_add_tcase(s, tc);
    tc = tcase_create("random");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, random_shadow_model, 0, 4);
    tcase_add_loop_test(tc, random_policy_budget, 0, 3 * BUDGET_KINDS);
    suite_add_tcase(s, tc);
    return s;
}
