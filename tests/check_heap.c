/* check_heap.c -- relocatable heap (include/hheap/heap.h): life cycle, every
 * edge case of DESIGN.md, resize, pins, alignment, accounting, debug guards,
 * fault injection and a threaded smoke test. */
#include "hheap/heap.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hheap/defrag.h"
#include "hheap/testing.h"
#include "test_util.h"
#include "../src/common/hh_platform.h"
#include "../src/common/hh_track.h"
#include "../src/heap/heap_internal.h"    /* BLK_CACHED, BLK_QUARANTINE */

/* Test hook of the heap's slots (src/heap/heap_internal.h): free slot idx
   will be issued `left` more times before it retires. */
void hhi_heap_slot_age(hh_heap *h, uint32_t idx, uint32_t left);

static hh_heap *heap;

static void setup(void) {
    hh_test_capture_errors();
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &heap), HH_OK);
}
static void teardown(void) {
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_heap_destroy(heap);
    hh_set_error_handler(NULL, NULL);
}

typedef struct walk_sum { size_t bytes, live, free_blocks, pinned; size_t next_off; bool ordered; } walk_sum;
static void sum_block(const hh_block_info *b, void *user) {
    walk_sum *w = user;
    if (b->offset != w->next_off) w->ordered = false;
    w->next_off = b->offset + b->size;
    w->bytes += b->size;
    if (b->state == HH_BLOCK_FREE) w->free_blocks++;
    else w->live++;
    if (b->state == HH_BLOCK_PINNED) w->pinned++;
}

/* ---------------------------------------------------------------------------
   Life cycle and bad input
--------------------------------------------------------------------------- */
START_TEST(create_rejects_bad_desc) {
    hh_heap *h = (hh_heap *)1;
    ck_assert_int_eq(hh_heap_create(NULL, &h), HH_E_INVALID_ARG);
    ck_assert_ptr_null(h);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 100 }, &h), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = 1u << 30 }, &h), HH_E_INVALID_ARG);
    char buf[64];
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .memory = buf + 1 }, &h), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_ptr_null(h);
}
END_TEST

START_TEST(caller_memory_is_used_and_given_back) {
    size_t cap = 256u << 10;
    unsigned char *mem = aligned_alloc(16, cap);
    hh_heap *h;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = cap, .memory = mem }, &h), HH_OK);
    unsigned char *base = hh_heap_base(h);
    ck_assert(base >= mem && base < mem + 4096);
    ck_assert(base + hh_heap_managed_bytes(h) <= mem + cap);
    hh_handle x = hh_alloc_ex(h, 100, 4096, 3);
    unsigned char *p = hh_deref(h, x);
    ck_assert(p >= mem && p + 100 <= mem + cap);
    ck_assert_uint_eq((uintptr_t)p % 4096, 0);
    ck_assert_int_eq(hh_heap_check(h), HH_OK);
    hh_heap_destroy(h);
    memset(mem, 0, cap);      /* the buffer is the caller's again */
    free(mem);
}
END_TEST

START_TEST(desc_defaults_resolved) {
    hh_heap_desc d;
    hh_heap_desc_get(heap, &d);
    ck_assert_uint_eq(d.max_handles, (1u << 20) / 64);
    ck_assert_uint_eq(d.capacity, 1u << 20);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.capacity, 1u << 20);
    ck_assert_uint_eq(st.free_bytes, st.capacity);
    ck_assert_uint_eq(st.free_blocks, 1);
    ck_assert(st.fragmentation == 0.0);
}
END_TEST

START_TEST(alloc_zero_is_invalid) {
    ck_assert(hh_is_null(hh_alloc(heap, 0)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_last_error(), HH_E_INVALID_ARG);
    ck_assert(hh_is_null(hh_alloc(NULL, 16)));
    ck_assert(hh_is_null(hh_alloc_ex(heap, 16, 3, 0)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert(hh_is_null(hh_alloc_ex(heap, 16, 8192, 0)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
}
END_TEST

START_TEST(huge_sizes_fail_cleanly) {
    /* above HH_HEAP_MAX_ALLOC: no block can hold it (the header's size field) */
    size_t sizes[] = { SIZE_MAX, SIZE_MAX - 15, SIZE_MAX / 2 + 1, (size_t)HH_HEAP_MAX_ALLOC + 1, (1u << 20) + 1 };
    for (size_t i = 0; i < HH_ARRAY_LEN_T(sizes); i++) {
        hh_test_reset_captured();
        ck_assert(hh_is_null(hh_alloc(heap, sizes[i])));
        ck_assert(hh_is_null(hh_alloc_ex(heap, sizes[i], 64, 7)));
        ck_assert_int_eq(hh_test_last_captured(), sizes[i] > HH_HEAP_MAX_ALLOC ? HH_E_INVALID_ARG : HH_E_NO_MEMORY);
        ck_assert_uint_eq(hh_test_captured_count(), 2);
    }
    hh_handle h = hh_alloc(heap, 64);
    ck_assert_int_eq(hh_resize(heap, h, SIZE_MAX), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_resize(heap, h, (size_t)HH_HEAP_MAX_ALLOC + 1), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_resize(heap, h, (1u << 20) + 1), HH_E_NO_MEMORY);
    ck_assert_uint_ge(hh_size(heap, h), 64);
}
END_TEST

START_TEST(free_null_is_noop) {
    ck_assert_int_eq(hh_free(heap, HH_NULL), HH_OK);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
}
END_TEST

START_TEST(double_free_is_stale_and_harmless) {
    hh_handle a = hh_alloc(heap, 40), b = hh_alloc(heap, 40);
    hh_test_fill(hh_deref(heap, b), 40, 7);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    ck_assert_int_eq(hh_free(heap, a), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_test_verify(hh_deref(heap, b), 40, 7), -1);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

START_TEST(stale_deref_is_null_with_error) {
    hh_handle a = hh_alloc(heap, 40);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    hh_test_reset_captured();
    ck_assert_ptr_null(hh_deref(heap, a));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
    ck_assert_ptr_null((hh_deref)(heap, a));
    ck_assert_uint_eq(hh_size(heap, a), 0);
    ck_assert_ptr_null(hh_pin(heap, a));
    ck_assert_int_eq(hh_unpin(heap, a), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_resize(heap, a, 10), HH_E_STALE_HANDLE);
    hh_test_reset_captured();
    ck_assert_ptr_null(hh_deref(heap, HH_NULL));           /* null is not an error */
    ck_assert_uint_eq(hh_test_captured_count(), 0);
}
END_TEST

/* hh_deref_many answers as hh_deref does, handle by handle -- live, stale,
   null, forged, another heap's -- over a run long enough to use its
   prefetch distance, reports each stale handle once, and reports bad
   arguments once with every out cleared. */
START_TEST(deref_many_answers_as_deref_does) {
    enum { N = 300 };
    hh_heap *other;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &other), HH_OK);
    hh_handle hs[N];
    void *want[N], *got[N];
    hh_rng r = hh_rng_make(hh_test_seed(0xDE4E));
    for (int i = 0; i < N; i++) hs[i] = hh_alloc(heap, 16 + hh_rng_below(&r, 200));
    unsigned stale = 0;
    for (int i = 0; i < N; i++) {
        switch (hh_rng_below(&r, 8)) {
        case 0: hh_free(heap, hs[i]); stale++; break;                    /* stale */
        case 1: hs[i] = HH_NULL; break;                                   /* null: not an error */
        case 2: hs[i] = hh_alloc(other, 32); stale++; break;              /* another heap's: stale here */
        case 3: hs[i].id ^= (uint64_t)1 << 40; stale++; break;             /* forged generation */
        default: break;
        }
    }
    hh_defrag_full(heap);                                                 /* payloads moved since allocation */
    hh_test_reset_captured();
    size_t live = 0;
    for (int i = 0; i < N; i++) live += (want[i] = hh_deref(heap, hs[i])) != NULL;
    ck_assert_uint_eq(hh_test_captured_count(), stale);
    hh_test_reset_captured();
    for (int i = 0; i < N; i++) got[i] = (void *)&got;
    ck_assert_uint_eq(hh_deref_many(heap, hs, N, got), live);
    ck_assert_uint_eq(hh_test_captured_count(), stale);
    for (int i = 0; i < N; i++) ck_assert_ptr_eq(got[i], want[i]);
    for (size_t n = 0; n < 40; n++) {                                     /* every short length too */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += want[i] != NULL;
        hh_test_reset_captured();
        ck_assert_uint_eq(hh_deref_many(heap, hs, n, got), k);
        for (size_t i = 0; i < n; i++) ck_assert_ptr_eq(got[i], want[i]);
    }
    hh_test_reset_captured();
    ck_assert_uint_eq(hh_deref_many(NULL, hs, 4, got), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_deref_many");
    for (int i = 0; i < 4; i++) ck_assert_ptr_null(got[i]);
    got[0] = (void *)&got;
    ck_assert_uint_eq(hh_deref_many(heap, NULL, 1, got), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_deref_many");
    ck_assert_ptr_null(got[0]);
    ck_assert_uint_eq(hh_deref_many(heap, hs, 1, NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_deref_many");
    ck_assert_uint_eq(hh_deref_many(heap, NULL, 0, NULL), 0);             /* nothing asked: nothing wrong */
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_heap_destroy(other);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

START_TEST(forged_handle_touches_nothing) {
    hh_handle a = hh_alloc(heap, 48);
    hh_test_fill(hh_deref(heap, a), 48, 1);
    hh_handle forged[] = { { a.id ^ ((uint64_t)1 << 40) }, { a.id + 1 }, { a.id | 0xFFFFFF }, { 0xFFFFFFFFFFFFFFFFull } };
    for (size_t i = 0; i < HH_ARRAY_LEN_T(forged); i++) {
        ck_assert_int_eq(hh_free(heap, forged[i]), HH_E_STALE_HANDLE);
        ck_assert_ptr_null(hh_deref(heap, forged[i]));
    }
    ck_assert_int_eq(hh_test_verify(hh_deref(heap, a), 48, 1), -1);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.live_blocks, 1);
}
END_TEST

START_TEST(handle_of_another_heap_rejected) {
    hh_heap *other;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &other), HH_OK);
    hh_handle mine = hh_alloc(heap, 32), theirs = hh_alloc(other, 32);
    ck_assert_uint_eq(hh_handle_index(mine), hh_handle_index(theirs));
    ck_assert_ptr_null(hh_deref(heap, theirs));
    ck_assert_int_eq(hh_free(heap, theirs), HH_E_STALE_HANDLE);
    ck_assert_ptr_nonnull(hh_deref(other, theirs));
    ck_assert_ptr_nonnull(hh_deref(heap, mine));
    ck_assert_int_eq(hh_heap_check(other), HH_OK);
    hh_heap_destroy(other);
}
END_TEST

START_TEST(exhaustion_reports_no_memory) {
    hh_handle hs[1024];
    size_t n = 0;
    for (; n < HH_ARRAY_LEN_T(hs); n++) {
        hs[n] = hh_alloc(heap, 4000);
        if (hh_is_null(hs[n])) break;
    }
    ck_assert_uint_gt(n, 200);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(hh_free(heap, hs[i]), HH_OK);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.free_blocks, 1);
    ck_assert_uint_eq(st.free_bytes, st.capacity);
}
END_TEST

START_TEST(full_handle_table_reports_no_memory) {
    hh_heap *h;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .max_handles = 8 }, &h), HH_OK);
    for (int i = 0; i < 8; i++) ck_assert(!hh_is_null(hh_alloc(h, 16)));
    ck_assert(hh_is_null(hh_alloc(h, 16)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "handle table full"));
    ck_assert_int_eq(hh_heap_check(h), HH_OK);
    hh_heap_destroy(h);
}
END_TEST

/* ---------------------------------------------------------------------------
   Alignment, tags, sizes
--------------------------------------------------------------------------- */
START_TEST(alignment_up_to_4096) {
    hh_handle hs[26];
    int n = 0;
    for (size_t a = 1; a <= 4096; a *= 2) {
        hs[n] = hh_alloc_ex(heap, 24 + a % 7, a, (uint32_t)a);
        ck_assert(!hh_is_null(hs[n]));
        ck_assert_uint_eq((uintptr_t)hh_deref(heap, hs[n]) % (a < 16 ? 16 : a), 0);
        ck_assert_uint_eq(hh_tag(heap, hs[n]), a);
        hh_alloc(heap, 48);                                       /* interleave odd blocks */
        n++;
    }
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

START_TEST(size_is_usable_and_rounded) {
    for (size_t s = 1; s < 300; s += 7) {
        hh_handle h = hh_alloc(heap, s);
        size_t u = hh_size(heap, h);
        ck_assert_uint_ge(u, s);
        /* the header and the payload round up to a granule together; the
           smallest block (HHI_MIN_BLOCK, 32) gives tiny sizes more */
        ck_assert_uint_eq(u, (s + HH_HEAP_HEADER_BYTES + 15) / 16 * 16 - HH_HEAP_HEADER_BYTES > 24
                                 ? (s + HH_HEAP_HEADER_BYTES + 15) / 16 * 16 - HH_HEAP_HEADER_BYTES : 24);
        memset(hh_deref(heap, h), 0x5A, u);                     /* every usable byte is writable */
    }
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

START_TEST(accounting_matches_walk) {
    hh_rng r = hh_rng_make(5);
    hh_handle hs[300];
    for (int i = 0; i < 300; i++) hs[i] = hh_alloc(heap, 1 + hh_rng_below(&r, 700));
    for (int i = 0; i < 300; i += 3) hh_free(heap, hs[i]);
    hh_pin(heap, hs[1]);
    hh_pin(heap, hs[1]);
    hh_pin(heap, hs[4]);
    walk_sum w = { .ordered = true };
    hh_heap_walk(heap, sum_block, &w);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert(w.ordered);
    ck_assert_uint_eq(w.bytes, st.capacity);
    ck_assert_uint_eq(st.used_bytes + st.free_bytes, st.capacity);
    ck_assert_uint_eq(w.live, st.live_blocks);
    ck_assert_uint_eq(w.free_blocks, st.free_blocks);
    ck_assert_uint_eq(w.pinned, 2);
    ck_assert_uint_eq(st.pinned_blocks, 2);
    ck_assert(st.fragmentation > 0.0 && st.fragmentation < 1.0);
    ck_assert_uint_le(st.largest_free, st.free_bytes);
    hh_unpin(heap, hs[1]);
    hh_unpin(heap, hs[1]);
    hh_unpin(heap, hs[4]);
}
END_TEST

/* Issue 13, bug 10: hh_heap_stats_get and hh_defrag_metrics_get walked the
   highest free list whole for the largest hole (1-2.4 ms with 100k equal
   holes). Counted, not timed: with hundreds of equal holes on that list
   (blocks above the free-block cache's sizes, so freeing lists them), each
   call looks at exactly HHI_LARGEST_WALK of them -- the list is longer, and
   it is the one looked at -- and still reports one. With the loop's bound
   removed it fails (260 looks). */
START_TEST(stats_look_at_a_bounded_number_of_holes) {
    enum { SIZE = 2000 };
    _Static_assert((int)SIZE > (int)HHI_CACHE_MAX_BLOCK, "freed blocks go onto the free lists, not the cache");
    hh_handle hs[1024];
    size_t n = 0;
    for (; n < HH_ARRAY_LEN_T(hs); n++) {   /* fill the heap: the rest of the top is smaller than a hole */
        hs[n] = hh_alloc(heap, SIZE);
        if (hh_is_null(hs[n])) break;
    }
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    hh_test_reset_captured();
    /* Holes between live blocks; the last block stays, so no hole merges
       with the rest of the top, which is smaller than a hole: the holes'
       list is the highest. */
    size_t holes = 0;
    for (size_t i = 0; i + 1 < n; i += 2, holes++) ck_assert_int_eq(hh_free(heap, hs[i]), HH_OK);
    ck_assert_uint_gt(holes, 8 * HHI_LARGEST_WALK);
    hh_heap_stats st;
    hhi_test_largest_looks_here = 0;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(hhi_test_largest_looks_here, HHI_LARGEST_WALK);
    ck_assert_uint_ge(st.largest_free, SIZE);
    ck_assert_uint_ge(st.free_blocks, holes);
    hh_defrag_metrics m;
    hhi_test_largest_looks_here = 0;
    ck_assert_int_eq(hh_defrag_metrics_get(heap, &m), HH_OK);
    ck_assert_uint_eq(hhi_test_largest_looks_here, HHI_LARGEST_WALK);
    ck_assert_uint_eq(m.largest_free, st.largest_free);
    ck_assert_int_eq(hh_test_captured_count(), 0);
    for (size_t i = 1; i < n; i += 2) ck_assert_int_eq(hh_free(heap, hs[i]), HH_OK);
    if (n % 2) ck_assert_int_eq(hh_free(heap, hs[n - 1]), HH_OK);
}
END_TEST

/* ---------------------------------------------------------------------------
   Resize
--------------------------------------------------------------------------- */
START_TEST(resize_grows_in_place_into_free_neighbour) {
    hh_handle a = hh_alloc(heap, 100), b = hh_alloc(heap, 400), c = hh_alloc(heap, 100);
    hh_test_fill(hh_deref(heap, a), 100, 11);
    void *pa = hh_deref(heap, a);
    hh_free(heap, b);
    ck_assert_int_eq(hh_resize(heap, a, 450), HH_OK);
    ck_assert_ptr_eq(hh_deref(heap, a), pa);                  /* in place */
    ck_assert_uint_ge(hh_size(heap, a), 450);
    ck_assert_int_eq(hh_test_verify(pa, 100, 11), -1);
    ck_assert_int_eq(hh_resize(heap, a, 20), HH_OK);          /* shrink in place */
    ck_assert_ptr_eq(hh_deref(heap, a), pa);
    ck_assert_uint_lt(hh_size(heap, a), 40);
    ck_assert_int_eq(hh_test_verify(pa, 20, 11), -1);
    ck_assert_ptr_nonnull(hh_deref(heap, c));
}
END_TEST

START_TEST(resize_moves_keeping_handle_and_contents) {
    hh_handle a = hh_alloc_ex(heap, 100, 256, 9), b = hh_alloc(heap, 100);
    hh_test_fill(hh_deref(heap, a), 100, 21);
    void *pa = hh_deref(heap, a);
    ck_assert_int_eq(hh_resize(heap, a, 5000), HH_OK);
    void *na = hh_deref(heap, a);
    ck_assert_ptr_ne(na, pa);
    ck_assert_uint_eq((uintptr_t)na % 256, 0);
    ck_assert_uint_eq(hh_tag(heap, a), 9);
    ck_assert_int_eq(hh_test_verify(na, 100, 21), -1);
    ck_assert_ptr_nonnull(hh_deref(heap, b));
    const hh_move_record *rec;
    ck_assert_uint_eq(hh_defrag_journal(heap, &rec), 1);
    ck_assert(hh_handle_eq(rec[0].handle, a));
}
END_TEST

START_TEST(failed_resize_leaves_block_as_it_was) {
    hh_handle a = hh_alloc(heap, 100);
    hh_handle big = hh_alloc(heap, 900u << 10);
    ck_assert(!hh_is_null(big));
    hh_test_fill(hh_deref(heap, a), 100, 31);
    void *pa = hh_deref(heap, a);
    size_t before = hh_size(heap, a);
    ck_assert_int_eq(hh_resize(heap, a, 200u << 10), HH_E_NO_MEMORY);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_ptr_eq(hh_deref(heap, a), pa);
    ck_assert_uint_eq(hh_size(heap, a), before);
    ck_assert_int_eq(hh_test_verify(pa, 100, 31), -1);
    ck_assert_int_eq(hh_resize(heap, a, 0), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_test_verify(pa, 100, 31), -1);
}
END_TEST

START_TEST(pinned_resize_only_in_place) {
    hh_handle a = hh_alloc(heap, 64), b = hh_alloc(heap, 64);
    void *pa = hh_pin(heap, a);
    ck_assert_int_eq(hh_resize(heap, a, 4000), HH_E_PINNED);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_PINNED);
    ck_assert_ptr_eq(hh_deref(heap, a), pa);
    ck_assert_int_eq(hh_resize(heap, a, 32), HH_OK);           /* shrinking never moves */
    ck_assert_ptr_eq(hh_deref(heap, a), pa);
    hh_free(heap, b);
    ck_assert_int_eq(hh_resize(heap, a, 120), HH_OK);          /* grows into the freed neighbour */
    ck_assert_ptr_eq(hh_deref(heap, a), pa);
    ck_assert_int_eq(hh_unpin(heap, a), HH_OK);
}
END_TEST

/* ---------------------------------------------------------------------------
   Pins
--------------------------------------------------------------------------- */
START_TEST(pins_are_counted) {
    hh_handle a = hh_alloc(heap, 64);
    void *p1 = hh_pin(heap, a), *p2 = hh_pin(heap, a);
    ck_assert_ptr_eq(p1, p2);
    ck_assert_int_eq(hh_free(heap, a), HH_E_PINNED);
    ck_assert_int_eq(hh_unpin(heap, a), HH_OK);
    ck_assert_int_eq(hh_free(heap, a), HH_E_PINNED);
    ck_assert_int_eq(hh_unpin(heap, a), HH_OK);
    ck_assert_int_eq(hh_unpin(heap, a), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
}
END_TEST

START_TEST(pin_count_overflow_is_refused) {
    hh_handle a = hh_alloc(heap, 64);
    int n = 0;
    while (hh_pin(heap, a) != NULL) n++;
    ck_assert_int_eq(n, 255);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    while (n--) ck_assert_int_eq(hh_unpin(heap, a), HH_OK);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
}
END_TEST


/* ---------------------------------------------------------------------------
   The 8-byte header and the per-slot side arrays (heap_internal.h's model)
--------------------------------------------------------------------------- */
/* The free-start index counts the free blocks of each 1 KiB span (I5): the
   most a span can hold is 16 (32-byte blocks, no two free ones adjacent).
   hh_heap_check verifies each count; the top region is found through the
   index (the metrics' top_free_bytes), and a full compaction, which finds
   the holes through it, closes them all. A debug heap:
   no free-block cache, so every free is a hole at once. */
START_TEST(free_index_counts_a_full_span) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_DEBUG }, &hp), HH_OK);
    enum { N = 96 };                                      /* three spans of 32-byte blocks */
    hh_handle hs[N];
    for (int i = 0; i < N; i++) {
        hs[i] = hh_alloc(hp, 8);                          /* 8 + 8 + 16 (guard) = a 32-byte block */
        ck_assert(!hh_is_null(hs[i]));
    }
    char *base = hh_heap_base(hp);
    ck_assert_ptr_eq(hh_deref(hp, hs[N - 1]), base + (N - 1) * 32 + HH_HEAP_HEADER_BYTES);
    for (int i = 0; i < N; i += 2) ck_assert_int_eq(hh_free(hp, hs[i]), HH_OK);   /* 16 holes a span */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_defrag_metrics m;
    ck_assert_int_eq(hh_defrag_metrics_get(hp, &m), HH_OK);
    ck_assert_uint_eq(m.hole_count, N / 2);
    ck_assert_uint_eq(m.top_free_bytes, hh_heap_managed_bytes(hp) - N * 32);
    for (int i = 1; i < N; i += 4) ck_assert_int_eq(hh_free(hp, hs[i]), HH_OK);   /* holes merge: counts fall */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    ck_assert_int_eq(hh_free(hp, hs[31]), HH_OK);          /* holes 30..34 merge across spans 0 and 1 */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    ck_assert_int_eq(hh_defrag_metrics_get(hp, &m), HH_OK);
    ck_assert_uint_eq(m.hole_count, N / 4 - 1);
    hh_defrag_full(hp);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    ck_assert_int_eq(hh_defrag_metrics_get(hp, &m), HH_OK);
    ck_assert_uint_eq(m.hole_count, 0);
    hh_heap_stats st;                                     /* (tools on: per-block moves, slivers may */
    hh_heap_stats_get(hp, &st);                           /* become slack instead: no exact top) */
    ck_assert_uint_eq(m.top_free_bytes, st.free_bytes);   /* no hole: every free byte is the top region's */
    for (int i = 3; i < N; i += 4)
        if (i != 31) ck_assert_int_eq(hh_free(hp, hs[i]), HH_OK);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* Decommitting the top region keeps the page of its free-list links, which
   lie after the 8-byte header: on a page of their own when the region starts
   at a 4096-multiple offset (base + 8 is page-aligned). Called with no
   retained bytes, as the service never does (its retain is >= 1 byte). */
size_t hhi_heap_decommit_top(hh_heap *h, size_t retain, size_t min_bytes, size_t max_bytes);
START_TEST(decommit_keeps_the_top_regions_links) {
    hh_handle hs[64];
    for (int i = 0; i < 64; i++) hs[i] = hh_alloc(heap, 64 - HH_HEAP_HEADER_BYTES);   /* 64 blocks of 64 B */
    hh_handle big = hh_alloc(heap, 64u << 10);                 /* written pages above offset 4096 */
    memset(hh_deref(heap, big), 1, 64u << 10);
    ck_assert_int_eq(hh_free(heap, big), HH_OK);               /* the top region starts at offset 4096 */
    ck_assert_uint_gt(hhi_heap_decommit_top(heap, 0, 0, 0), 0);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_handle again = hh_alloc(heap, 64u << 10);
    ck_assert(!hh_is_null(again));
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    ck_assert_int_eq(hh_free(heap, again), HH_OK);
    for (int i = 0; i < 64; i++) ck_assert_int_eq(hh_free(heap, hs[i]), HH_OK);
}
END_TEST

/* The largest block: HH_HEAP_MAX_ALLOC fits the header's 27-bit size field
   (with its rounding, guard and slack), one byte more is refused with
   HH_E_INVALID_ARG and one message, on a heap large enough to hold it. */
START_TEST(largest_block_fits_its_header) {
    hh_heap *hp;
    size_t cap = (size_t)HH_HEAP_MAX_ALLOC + (64u << 20);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = cap, .commit = 1u << 20, .max_handles = 1024,
                                                     .flags = HH_HEAP_GROWABLE }, &hp), HH_OK);
    hh_handle small = hh_alloc_ex(hp, 100, 4096, 3);          /* an aligned neighbour: a lead, then the big block */
    ck_assert(!hh_is_null(small));
    hh_test_reset_captured();
    ck_assert(hh_is_null(hh_alloc(hp, (size_t)HH_HEAP_MAX_ALLOC + 1)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert(hh_is_null(hh_alloc_ex(hp, (size_t)HH_HEAP_MAX_ALLOC + 1, 16, 0)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 2);
    ck_assert_int_eq(hh_resize(hp, small, (size_t)HH_HEAP_MAX_ALLOC + 1), HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 3);
    ck_assert_uint_eq(hh_size(hp, small), 104);               /* unchanged: 8 + 100 -> 112, less the header */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    if (!hh_test_under_valgrind()) {                  /* 2 GiB of range: only the ends are touched */
        hh_handle big = hh_alloc_ex(hp, HH_HEAP_MAX_ALLOC, 4096, 9);
        ck_assert(!hh_is_null(big));
        ck_assert_uint_ge(hh_size(hp, big), (size_t)HH_HEAP_MAX_ALLOC);
        ck_assert_uint_lt(hh_size(hp, big), (size_t)HH_HEAP_MAX_ALLOC + 16);
        ck_assert_uint_eq(hh_tag(hp, big), 9);
        unsigned char *p = hh_deref(hp, big);
        ck_assert_uint_eq((uintptr_t)p % 4096, 0);
        p[0] = 1;
        p[HH_HEAP_MAX_ALLOC - 1] = 2;
        ck_assert_int_eq(hh_heap_check(hp), HH_OK);
        /* (Not moved: a slide would copy, so make resident, all 2 GiB.) */
        ck_assert_int_eq(hh_free(hp, big), HH_OK);
    }
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* A slot keeps its payload's offset in 8-byte units in 32 bits: a heap of
   HH_HEAP_MAX_CAPACITY bytes serves, moves and frees a block at its very top
   (offset past 2^35 - 2^16: a granule unit, or a 16-byte shift left where 8
   was meant, or 32 bits too few, would name another place), and a granule
   more is refused with one message. */
START_TEST(a_block_at_the_top_of_the_largest_heap_derefs) {
    hh_heap *hp = NULL;
    hh_test_reset_captured();
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = HH_HEAP_MAX_CAPACITY + HH_HEAP_GRANULE }, &hp),
                     HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_null(hp);
    /* 32 GiB of address space, touched sparsely -- but the library's own
       ASan poisoning (HH_TRACK_ASAN) writes the shadow of every byte. */
    if (hh_test_under_valgrind() || HH_TRACK_ASAN) return;
    /* A machine that will not give 32 GiB of address space (a low ulimit -v,
       strict overcommit) refuses with HH_E_NO_MEMORY: nothing to test there. */
    hh_status st = hh_heap_create(&(hh_heap_desc){ .capacity = HH_HEAP_MAX_CAPACITY, .commit = 1u << 20,
                                                    .max_handles = 64, .flags = HH_HEAP_GROWABLE }, &hp);
    if (st == HH_E_NO_MEMORY) {
        fputs("a_block_at_the_top_of_the_largest_heap_derefs: skipped, 32 GiB of address space refused\n", stderr);
        return;
    }
    ck_assert_int_eq(st, HH_OK);
    enum { BIG = 16 };
    hh_handle big[BIG], top[2];
    for (int i = 0; i < BIG; i++) {
        big[i] = hh_alloc(hp, HH_HEAP_MAX_ALLOC);             /* 2 GiB - 4 KiB each, never touched */
        if (hh_is_null(big[i]) && hh_test_last_captured() == HH_E_NO_MEMORY && i == 0) {   /* commit refused */
            fputs("a_block_at_the_top_of_the_largest_heap_derefs: skipped, the commit was refused\n", stderr);
            hh_heap_destroy(hp);
            return;
        }
        ck_assert(!hh_is_null(big[i]));
    }
    for (int i = 0; i < 2; i++) {
        top[i] = hh_alloc(hp, 1000);
        ck_assert(!hh_is_null(top[i]));
        hh_test_fill(hh_deref(hp, top[i]), 1000, 40 + (uint64_t)i);
    }
    char *base = hh_deref(hp, big[0]);
    size_t off0 = (size_t)((char *)hh_deref(hp, top[0]) - base), off = (size_t)((char *)hh_deref(hp, top[1]) - base);
    ck_assert_uint_gt(off, ((size_t)1 << 35) - ((size_t)1 << 16));
    ck_assert_uint_lt(off, HH_HEAP_MAX_CAPACITY);
    ck_assert_ptr_eq((hh_deref)(hp, top[1]), hh_deref(hp, top[1]));   /* the function and the inline agree */
    /* A free below it and a full compaction: top[1] slides down into top[0]'s place. */
    ck_assert_int_eq(hh_free(hp, top[0]), HH_OK);
    hh_defrag_report rep = hh_defrag_full(hp);
    ck_assert(rep.compact);
    ck_assert_uint_eq(rep.moves, 1);
    ck_assert_uint_eq((size_t)((char *)hh_deref(hp, top[1]) - base), off0);
    ck_assert_int_eq(hh_test_verify(hh_deref(hp, top[1]), 1000, 41), -1);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    for (int i = 0; i < BIG; i++) ck_assert_int_eq(hh_free(hp, big[i]), HH_OK);
    ck_assert_int_eq(hh_free(hp, top[1]), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* Pin counts and tags are not in the header: a heap makes their arrays on
   its first pin and its first non-zero tag (hh_heap_overhead_bytes grows by
   1 and 4 bytes a used slot then, not before); a failure to make one is
   HH_E_NO_MEMORY with one message and changes nothing. */
START_TEST(pin_and_tag_arrays_made_on_first_use) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &hp), HH_OK);
    hh_handle hs[64];
    for (int i = 0; i < 64; i++) hs[i] = hh_alloc_ex(hp, 40, 16, 0);   /* tag 0: no tag array */
    size_t base_meta = hh_heap_overhead_bytes(hp);
    ck_assert_uint_eq(hh_tag(hp, hs[5]), 0);
    hh_test_reset_captured();
    hh_test_fail_after(0);                                    /* the pin array's mapping fails */
    ck_assert_ptr_null(hh_pin(hp, hs[5]));
    hh_test_fail_after(-1);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_uint_eq(hh_heap_overhead_bytes(hp), base_meta);
    ck_assert_int_eq(hh_free(hp, hs[5]), HH_OK);              /* not pinned: the failure changed nothing */
    hs[5] = hh_alloc(hp, 40);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    void *at = hh_pin(hp, hs[5]);
    ck_assert_ptr_nonnull(at);
    size_t pin_meta = hh_heap_overhead_bytes(hp);
    ck_assert_uint_gt(pin_meta, base_meta);
    ck_assert_uint_ge(pin_meta - base_meta, 65);              /* one byte per slot used so far (64 + slot 0, */
    ck_assert_uint_le(pin_meta - base_meta, 2 * 65);          /* and the few the released-slot FIFO rests) */
    ck_assert_int_eq(hh_free(hp, hs[5]), HH_E_PINNED);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_test_reset_captured();
    hh_test_fail_after(0);                                    /* the tag array's mapping fails */
    ck_assert(hh_is_null(hh_alloc_ex(hp, 40, 16, 77)));
    hh_test_fail_after(-1);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_uint_eq(hh_heap_overhead_bytes(hp), pin_meta);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_handle t = hh_alloc_ex(hp, 40, 16, 77);
    ck_assert_uint_eq(hh_tag(hp, t), 77);
    ck_assert_uint_gt(hh_heap_overhead_bytes(hp), pin_meta);
    for (int i = 0; i < 64; i++) ck_assert_uint_eq(hh_tag(hp, hs[i]), 0);   /* made zeroed */
    ck_assert_int_eq(hh_free(hp, t), HH_OK);
    hh_handle u = HH_NULL;                                    /* t's slot again (after the released-slot */
    for (int i = 0; i < 4096 && hh_handle_index(u) != hh_handle_index(t); i++) {   /* FIFO has rested it) */
        if (!hh_is_null(u)) ck_assert_int_eq(hh_free(hp, u), HH_OK);
        u = hh_alloc(hp, 40);
    }
    ck_assert_uint_eq(hh_handle_index(u), hh_handle_index(t));
    ck_assert_uint_eq(hh_tag(hp, u), 0);                      /* untagged: not t's 77 */
    ck_assert_int_eq(hh_unpin(hp, hs[5]), HH_OK);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* Tags and pins belong to the slot, so they follow a block through every
   move: a full compaction over tagged, pinned and plain blocks keeps every
   tag, moves no pinned block, and every byte stays (shadow). */
START_TEST(tags_and_pins_survive_full_compaction) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 4u << 20 }, &hp), HH_OK);
    enum { N = 2000 };
    hh_shadow sh;
    hh_shadow_init(&sh);
    hh_rng r = hh_rng_make(21);
    uint32_t tags[N];
    for (unsigned i = 0; i < N; i++) {
        size_t size = 1 + hh_rng_below(&r, 700), align = (size_t)16 << hh_rng_below(&r, 3);
        tags[i] = i % 3 == 0 ? 0 : 1000 + i;
        hh_handle h = hh_alloc_ex(hp, size, align, tags[i]);
        ck_assert(!hh_is_null(h));
        hh_shadow_add(&sh, hp, h, size, align, i + 1);
    }
    hh_handle pinned[8];
    void *at[8];
    for (unsigned k = 0; k < 8; k++) {                         /* pin blocks spread over the heap */
        pinned[k] = sh.objs[(k * 7 + 3) * (N / 64)].h;
        at[k] = hh_pin(hp, pinned[k]);
        ck_assert_ptr_nonnull(at[k]);
    }
    for (size_t i = 0; i < sh.count;) {                        /* free a third, pins aside */
        bool is_pinned = false;
        for (unsigned k = 0; k < 8; k++) is_pinned |= hh_handle_eq(sh.objs[i].h, pinned[k]);
        if (!is_pinned && hh_rng_below(&r, 3) == 0) {
            ck_assert_int_eq(hh_free(hp, sh.objs[i].h), HH_OK);
            hh_shadow_remove(&sh, i);
        } else {
            i++;
        }
    }
    hh_defrag_full(hp);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_shadow_verify(&sh, hp);
    for (unsigned k = 0; k < 8; k++) ck_assert_ptr_eq(hh_deref(hp, pinned[k]), at[k]);
    for (size_t i = 0; i < sh.count; i++) {
        uint32_t want = tags[sh.objs[i].key - 1];
        ck_assert_uint_eq(hh_tag(hp, sh.objs[i].h), want);
    }
    for (unsigned k = 0; k < 8; k++) ck_assert_int_eq(hh_unpin(hp, pinned[k]), HH_OK);
    hh_defrag_full(hp);                                        /* unpinned: now they may move too */
    hh_heap_stats st;
    hh_heap_stats_get(hp, &st);
    ck_assert_uint_eq(st.pinned_blocks, 0);
    ck_assert_uint_eq(st.free_blocks, 1);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_shadow_verify(&sh, hp);
    for (size_t i = 0; i < sh.count; i++) ck_assert_uint_eq(hh_tag(hp, sh.objs[i].h), tags[sh.objs[i].key - 1]);
    hh_shadow_fini(&sh);
    hh_heap_destroy(hp);
}
END_TEST

/* hh_heap_check reads every field of the 8-byte header: a flipped bit in a
   live block's slot, a pinned flag without pins, slack on a free block and
   a size field off by a granule are each reported (HH_E_CORRUPT, one
   message); put back, the heap checks clean. */
START_TEST(check_catches_corrupt_8_byte_header) {
    hh_handle a = hh_alloc(heap, 40), b = hh_alloc(heap, 2000), c = hh_alloc(heap, 24);
    ck_assert_int_eq(hh_free(heap, b), HH_OK);                 /* too large for the cache: a free block now */
    uint64_t *ha = (uint64_t *)(void *)((char *)hh_deref(heap, a) - HH_HEAP_HEADER_BYTES);
    uint64_t *hb = (uint64_t *)(void *)((char *)hh_deref(heap, a) - HH_HEAP_HEADER_BYTES + 48);   /* a's block is 48 B */
    ck_assert((*hb & 1) != 0);                                 /* BLK_FREE */
    const uint64_t keep_a = *ha;
    const uint64_t bad[] = { keep_a ^ (uint64_t)1 << 41,       /* a's slot */
                             keep_a | (uint64_t)1 << 4,        /* BLK_PINNED, no pins */
                             keep_a + ((uint64_t)1 << 13) };   /* a's size, one granule more: over b's start */
    for (unsigned i = 0; i < HH_ARRAY_LEN_T(bad); i++) {
        uint64_t keep = *ha;
        *ha = bad[i];
        hh_test_reset_captured();
        ck_assert_int_eq(hh_heap_check(heap), HH_E_CORRUPT);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
        *ha = keep;
        ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    }
    uint64_t keep = *hb;
    *hb |= (uint64_t)1 << 9;                                   /* slack on a free block */
    hh_test_reset_captured();
    ck_assert_int_eq(hh_heap_check(heap), HH_E_CORRUPT);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    *hb = keep;
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    ck_assert_int_eq(hh_free(heap, c), HH_OK);
}
END_TEST

/* hh_free of a live handle whose block header has been damaged to say
   "cached" or "quarantine" (flag bits 3 and 2; the slot bits still match)
   frees nothing: that block would be in a free list and in the cache or the
   quarantine at once. Debug builds trap (HH_NEVER), release builds return
   HH_E_CORRUPT; before the fix hh_free returned HH_OK and freed it. Each
   attempt runs in a child so that the trap ends only the child. */
static void abort_to_exit_41(int sig) { (void)sig; hh_test_child_exit(41); }

START_TEST(free_refuses_a_live_block_marked_cached_or_quarantine) {
    hh_handle a = hh_alloc(heap, 40);
    hh_test_fill(hh_deref(heap, a), 40, 5);
    uint64_t *ha = (uint64_t *)(void *)((char *)hh_deref(heap, a) - HH_HEAP_HEADER_BYTES);
    const uint64_t flags[] = { BLK_CACHED, BLK_QUARANTINE };
    for (unsigned i = 0; i < HH_ARRAY_LEN_T(flags); i++) {
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            int fd = open("/dev/null", O_WRONLY);              /* the trap's one line is expected */
            if (fd >= 0) dup2(fd, 2);
            /* The debug build traps (abort). The child ends through exec either
               way, so that under memcheck it leaves no leak report of the
               parent's heap behind: the trap is exit 41, the release status 40. */
            signal(SIGABRT, abort_to_exit_41);
            *ha |= flags[i];
            hh_status st = hh_free(heap, a);
            hh_test_child_exit(st == HH_E_CORRUPT ? 40 : 50 + (int)st);
        }
        int ws = 0;
        ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
        bool refused = WIFEXITED(ws) && (WEXITSTATUS(ws) == 40 || WEXITSTATUS(ws) == 41);
        ck_assert_msg(refused, "flag %#llx: child %s %d", (unsigned long long)flags[i],
                      WIFEXITED(ws) ? "exited" : "signalled", WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
    }
    ck_assert_int_eq(hh_test_verify(hh_deref(heap, a), 40, 5), -1);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

/* The inline hh_deref finds the slot table HH_HEAP_SLOT_TABLE_BYTES below
   the heap object without reading the head's pointer: hh_heap_check says
   so (I7, one message) if the two ever part. */
START_TEST(check_catches_a_slot_table_away_from_the_heap) {
    hh_heap_head *head = (hh_heap_head *)(void *)heap;
    ck_assert_ptr_eq((void *)head->slots, (void *)((char *)heap - HH_HEAP_SLOT_TABLE_BYTES));
    uint64_t *keep = head->slots;
    head->slots = keep + 1;
    hh_test_reset_captured();
    ck_assert_int_eq(hh_heap_check(heap), HH_E_CORRUPT);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    head->slots = keep;
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

/* ---------------------------------------------------------------------------
   Debug heap: fills and guards
--------------------------------------------------------------------------- */
START_TEST(debug_fills_and_catches_overrun) {
    hh_heap *h;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_DEBUG }, &h), HH_OK);
    hh_handle a = hh_alloc(h, 40);
    unsigned char *p = hh_deref(h, a);
    ck_assert_uint_eq(p[0], 0xA5);
    ck_assert_uint_eq(p[39], 0xA5);                            /* usable is 40: 8 + 40 + 16 (guard) = 64 */
    size_t u = hh_size(h, a);
    ck_assert_uint_eq(u, 40);
    if (hh_test_under_valgrind()) {                    /* memcheck reports the overrun itself */
        ck_assert_int_eq(hh_free(h, a), HH_OK);
        hh_heap_destroy(h);
        return;
    }
    p[u] = 0;                                                  /* one byte past the end */
    ck_assert_int_eq(hh_heap_check(h), HH_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "I9"));
    ck_assert_int_eq(hh_free(h, a), HH_E_CORRUPT);             /* reported, and the block is still freed */
    ck_assert_int_eq(hh_heap_check(h), HH_OK);
    hh_heap_destroy(h);
}
END_TEST

/* ---------------------------------------------------------------------------
   Fault injection: creation fails cleanly at every metadata/OS call.
--------------------------------------------------------------------------- */
/* Creates a heap from desc with the n-th metadata/OS call failing, for n = 0,
   1, ... until creation succeeds; every failure must be a clean
   HH_E_NO_MEMORY with nothing made, the successful heap must work. Returns the
   failures seen. */
static unsigned create_under_every_fault(const hh_heap_desc *desc) {
    unsigned failures = 0;
    for (long n = 0;; n++) {
        hh_heap *h = NULL;
        hh_test_fail_after(n);
        hh_status s = hh_heap_create(desc, &h);
        unsigned fired = hh_test_fail_count();
        hh_test_fail_after(-1);
        if (s == HH_OK) {
            ck_assert_uint_eq(fired, 0);
            ck_assert(!hh_is_null(hh_alloc(h, 100)));
            ck_assert_int_eq(hh_heap_check(h), HH_OK);
            hh_heap_destroy(h);
            return failures;
        }
        failures++;
        ck_assert_int_eq(s, HH_E_NO_MEMORY);
        ck_assert_ptr_null(h);
        ck_assert_int_lt(n, 20);
    }
}

START_TEST(create_survives_every_injected_fault) {
    /* mapping, object, slots, two bitmaps, regions */
    ck_assert_uint_ge(create_under_every_fault(&(hh_heap_desc){ .capacity = 1u << 20 }), 4);
    /* A growable heap: reservation, first commit, object, slot reservation and
       commit, two mapped bitmaps, regions -- each failure clean. */
    ck_assert_uint_ge(create_under_every_fault(&(hh_heap_desc){ .capacity = 4u << 20, .flags = HH_HEAP_GROWABLE }), 7);
}
END_TEST

START_TEST(journal_fault_loses_record_not_block) {
    hh_handle hs[40];
    for (int i = 0; i < 40; i++) {
        hs[i] = hh_alloc(heap, 100);
        hh_test_fill(hh_deref(heap, hs[i]), 100, (uint64_t)i);
    }
    for (int i = 0; i < 40; i += 2) hh_free(heap, hs[i]);
    hh_test_fail_after(0);                                    /* the journal cannot grow */
    hh_defrag_report r = hh_defrag_full(heap);
    hh_test_fail_after(-1);
    ck_assert_uint_gt(r.moves, 0);
    for (int i = 1; i < 40; i += 2) ck_assert_int_eq(hh_test_verify(hh_deref(heap, hs[i]), 100, (uint64_t)i), -1);
}
END_TEST

/* ---------------------------------------------------------------------------
   Thread-safe heap: concurrent alloc/free/deref from several threads.
--------------------------------------------------------------------------- */
enum { MT_THREADS = 4 };
static void *mt_worker(void *arg) {
    hh_heap *h = arg;
    hh_rng r = hh_rng_make((uint64_t)(uintptr_t)&r);
    hh_handle own[64] = {0};
    size_t sz[64] = {0};
    unsigned ops = hh_test_scaled(20000, 2000);
    for (unsigned i = 0; i < ops; i++) {
        unsigned k = hh_rng_below(&r, 64);
        if (hh_is_null(own[k])) {
            sz[k] = 1 + hh_rng_below(&r, 300);
            own[k] = hh_alloc(h, sz[k]);
            if (!hh_is_null(own[k])) memset(hh_deref(h, own[k]), (int)k, sz[k]);
        } else {
            unsigned char *p = hh_deref(h, own[k]);
            if (p == NULL || p[0] != k || p[sz[k] - 1] != k) return (void *)1;
            if (hh_free(h, own[k]) != HH_OK) return (void *)1;
            own[k] = HH_NULL;
        }
    }
    for (int k = 0; k < 64; k++) hh_free(h, own[k]);
    return NULL;
}


/* Issue 12: heaps created and destroyed by several threads at once never
   share a table tag while both live (the tag allocator is lock-free). */
static atomic_int tag_owner[256];
static void *tag_churn(void *arg) {
    (void)arg;
    for (int i = 0; i < 150; i++) {
        hh_heap *hp;
        if (hh_heap_create(&(hh_heap_desc){ .capacity = HH_HEAP_MIN_CAPACITY }, &hp) != HH_OK) return (void *)1;
        hh_handle h = hh_alloc(hp, 16);
        unsigned tag = (unsigned)((h.id >> HH_HANDLE_INDEX_BITS) & 0xFF);
        if (tag == 0 || atomic_exchange(&tag_owner[tag], 1) != 0) return (void *)2;   /* a live heap has it */
        atomic_store(&tag_owner[tag], 0);
        hh_heap_destroy(hp);
    }
    return NULL;
}

START_TEST(concurrent_heaps_never_share_a_tag) {
    pthread_t th[4];
    for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, tag_churn, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        ck_assert_ptr_null(r);
    }
}
END_TEST

START_TEST(threadsafe_heap_concurrent_use) {
    hh_heap *h;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 8u << 20, .flags = HH_HEAP_THREADSAFE }, &h), HH_OK);
    pthread_t t[MT_THREADS];
    for (int i = 0; i < MT_THREADS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, mt_worker, h), 0);
    for (int i = 0; i < MT_THREADS; i++) {
        void *res;
        pthread_join(t[i], &res);
        ck_assert_ptr_null(res);
    }
    hh_heap_stats st;
    hh_heap_stats_get(h, &st);
    ck_assert_uint_eq(st.live_blocks, 0);
    ck_assert_int_eq(hh_heap_check(h), HH_OK);
    hh_heap_destroy(h);
}
END_TEST


/* A hole left by an object is reused by the next object of the same size
   (best fit from the hole's own list), not passed over for the top region. */
START_TEST(same_size_reuses_its_hole) {
    hh_handle a = hh_alloc(heap, 1000), b = hh_alloc(heap, 64), c = hh_alloc(heap, 1000);
    ck_assert(!hh_is_null(a) && !hh_is_null(b) && !hh_is_null(c));
    char *at = hh_deref(heap, a);
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    hh_handle d = hh_alloc(heap, 1000);
    ck_assert_ptr_eq(hh_deref(heap, d), at);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.free_blocks, 1);                     /* only the top region */
}
END_TEST


/* ---------------------------------------------------------------------------
   The free-block cache (I13 in src/heap/heap_internal.h): freed blocks of at
   most 1 KiB wait uncoalesced for the next allocation of their size; every
   observer and the defrag service see them as the holes they are.
--------------------------------------------------------------------------- */
static size_t walk_free_blocks(const hh_heap *h) {
    walk_sum w = { .ordered = true };
    hh_heap_walk(h, sum_block, &w);
    return w.free_blocks;
}

/* The newest freed block of a size is the next one of that size handed out,
   also when a larger free block lies lower; other sizes do not take it. */
START_TEST(cache_hands_back_newest_block_of_its_size) {
    hh_handle h[8];
    char *at[8];
    for (int i = 0; i < 8; i++) {
        h[i] = hh_alloc(heap, 64);
        at[i] = hh_deref(heap, h[i]);
    }
    ck_assert_int_eq(hh_free(heap, h[1]), HH_OK);
    ck_assert_int_eq(hh_free(heap, h[2]), HH_OK);             /* [1] and [2] would coalesce into 160 B */
    ck_assert_int_eq(hh_free(heap, h[5]), HH_OK);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_handle a = hh_alloc(heap, 64), b = hh_alloc(heap, 64), c = hh_alloc(heap, 64);
    ck_assert_ptr_eq(hh_deref(heap, a), at[5]);                /* LIFO */
    ck_assert_ptr_eq(hh_deref(heap, b), at[2]);
    ck_assert_ptr_eq(hh_deref(heap, c), at[1]);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);

    /* A few cached holes before the top (far below the flush share: an eighth
       of the used bytes, at least 64 KiB, at most half the cache limit): a size
       the cache does not hold is carved from the top region
       and the holes stay cached for their own sizes. */
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    ck_assert_int_eq(hh_free(heap, h[4]), HH_OK);              /* [4] and [5]: 160 bytes once merged */
    hh_handle other = hh_alloc(heap, 100);                     /* a 128-byte block */
    ck_assert((char *)hh_deref(heap, other) > at[7]);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_handle again = hh_alloc(heap, 64);                      /* still cached: the newest */
    ck_assert_ptr_eq(hh_deref(heap, again), at[4]);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

/* A size the cache does not hold, which would be carved from the top region,
   takes a cached block at most two granules larger instead, the extra bytes
   as slack (not usable); a cached block further up is left alone. Freed, the
   block is cached again at its whole size. */
START_TEST(cache_near_size_before_the_top_grows) {
    hh_handle h = hh_alloc(heap, 200), wide = hh_alloc(heap, 600);   /* 208- and 608-byte blocks */
    hh_handle fence = hh_alloc(heap, 16);
    char *at = hh_deref(heap, h), *wide_at = hh_deref(heap, wide);
    ck_assert_int_eq(hh_free(heap, h), HH_OK);
    ck_assert_int_eq(hh_free(heap, wide), HH_OK);
    hh_heap_stats before, after;
    hh_heap_stats_get(heap, &before);
    hh_handle n = hh_alloc(heap, 170);                         /* a 192-byte block: the 208-byte one, a granule up */
    ck_assert_ptr_eq(hh_deref(heap, n), at);
    ck_assert_uint_eq(hh_size(heap, n), 184);                  /* as a 192-byte block's */
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_heap_stats_get(heap, &after);
    ck_assert_uint_eq(after.capacity - after.largest_free, before.capacity - before.largest_free);   /* no top carved */
    ck_assert_uint_eq(after.used_bytes, before.used_bytes + 208);
    hh_handle m = hh_alloc(heap, 550);                         /* 560 bytes: the 608-byte block is 3 granules up */
    ck_assert((char *)hh_deref(heap, m) > (char *)hh_deref(heap, fence));
    hh_handle m2 = hh_alloc(heap, 560);                        /* 576 bytes: 2 granules up, taken */
    ck_assert_ptr_eq(hh_deref(heap, m2), wide_at);
    ck_assert_uint_eq(hh_size(heap, m2), 568);
    ck_assert_int_eq(hh_free(heap, n), HH_OK);
    hh_handle again = hh_alloc(heap, 200);                     /* cached at its whole 208 bytes */
    ck_assert_ptr_eq(hh_deref(heap, again), at);
    ck_assert_uint_eq(hh_size(heap, again), 200);
    ck_assert_int_eq(hh_free(heap, m2), HH_OK);
    hh_handle w2 = hh_alloc(heap, 600);
    ck_assert_ptr_eq(hh_deref(heap, w2), wide_at);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

/* The near-size take comes before the free lists: a free hole that would
   hold the request stays whole (for sizes the cache does not serve) while a
   cached block a granule larger waits. */
START_TEST(cache_near_size_before_a_hole) {
    hh_handle big = hh_alloc(heap, 2000), f1 = hh_alloc(heap, 16);     /* too large for the cache */
    hh_handle c = hh_alloc(heap, 200), f2 = hh_alloc(heap, 16);         /* a 208-byte block */
    char *big_at = hh_deref(heap, big), *c_at = hh_deref(heap, c);
    ck_assert_int_eq(hh_free(heap, big), HH_OK);                        /* a 2016-byte hole */
    ck_assert_int_eq(hh_free(heap, c), HH_OK);                          /* cached */
    hh_handle n = hh_alloc(heap, 170);                                  /* a 192-byte block */
    ck_assert_ptr_eq(hh_deref(heap, n), c_at);
    hh_handle b2 = hh_alloc(heap, 2000);                                /* the hole is whole */
    ck_assert_ptr_eq(hh_deref(heap, b2), big_at);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    (void)f1;
    (void)f2;
}
END_TEST

/* Cached holes of half the cache limit or more (32 KiB on this 1 MiB heap):
   a size the cache does not hold, which would be carved from the top region,
   takes the merged cached holes instead (the footprint stays). */
START_TEST(cache_merged_before_the_top_grows) {
    enum { N = 60 };                                           /* 1040-byte blocks */
    hh_handle h[N];
    char *at[N];
    for (int i = 0; i < N; i++) {
        h[i] = hh_alloc(heap, 1024);
        at[i] = hh_deref(heap, h[i]);
    }
    hh_handle fence = hh_alloc(heap, 16);
    ck_assert_int_eq(hh_free(heap, h[0]), HH_OK);              /* a pair: 2080 B once merged */
    ck_assert_int_eq(hh_free(heap, h[1]), HH_OK);
    hh_handle small = hh_alloc(heap, 1500);                    /* 2080 cached bytes: from the top */
    ck_assert((char *)hh_deref(heap, small) > (char *)hh_deref(heap, fence));
    unsigned pairs = 0;
    for (int i = 4; i + 1 < N; i += 3, pairs++) {              /* 19 more pairs: 41600 B cached */
        ck_assert_int_eq(hh_free(heap, h[i]), HH_OK);
        ck_assert_int_eq(hh_free(heap, h[i + 1]), HH_OK);
    }
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_handle big = hh_alloc(heap, 1500);                      /* merged first: the lowest pair */
    ck_assert_ptr_eq(hh_deref(heap, big), at[0]);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.free_blocks, walk_free_blocks(heap));
    ck_assert_uint_eq(st.free_blocks, pairs + 2);              /* the merged pairs, [0]'s 560-byte rest, the top */
}
END_TEST

/* The share of cached bytes from which carving the top flushes the cache
   follows the live data, not the capacity: on a roomy 64 MiB heap (a 4 MiB
   cache limit) holding about 1 MiB, an eighth of the used bytes cached
   (130 KiB) is enough; less, and the top is carved. */
START_TEST(cache_merged_before_the_top_grows_by_live_bytes) {
    enum { N = 1000 };                                         /* 1040-byte blocks: 1.04 MB */
    hh_heap *hp = NULL;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 64u << 20 }, &hp), HH_OK);
    hh_handle *h = malloc(N * sizeof *h);
    char **at = malloc(N * sizeof *at);
    ck_assert(h != NULL && at != NULL);
    for (int i = 0; i < N; i++) {
        h[i] = hh_alloc(hp, 1024);
        at[i] = hh_deref(hp, h[i]);
    }
    hh_handle fence = hh_alloc(hp, 16);
    for (int i = 0; i < 40; i++) ck_assert_int_eq(hh_free(hp, h[i]), HH_OK);   /* 41600 B: under an eighth of 1 MB */
    hh_handle small = hh_alloc(hp, 1500);
    ck_assert((char *)hh_deref(hp, small) > (char *)hh_deref(hp, fence));
    for (int i = 100; i < 300; i++) ck_assert_int_eq(hh_free(hp, h[i]), HH_OK);   /* 249600 B cached in all */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_handle big = hh_alloc(hp, 1500);                        /* merged first: the lowest run */
    ck_assert_ptr_eq(hh_deref(hp, big), at[0]);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    free(at);
    free(h);
    hh_heap_destroy(hp);
}
END_TEST

/* Stats, walk and the defrag metrics count cached blocks as free bytes and
   as holes of their own, without changing the heap (looking must not change
   where later blocks go: a trace replays without the lookers); the counters
   add up, and the next step merges them. */
START_TEST(cache_is_holes_to_every_observer) {
    hh_handle h[64];
    for (int i = 0; i < 64; i++) h[i] = hh_alloc(heap, 48);   /* 64-byte blocks */
    hh_heap_stats before;
    hh_heap_stats_get(heap, &before);
    for (int i = 0; i < 64; i += 4) {                          /* 16 holes of two cached blocks each */
        ck_assert_int_eq(hh_free(heap, h[i]), HH_OK);
        ck_assert_int_eq(hh_free(heap, h[i + 1]), HH_OK);
    }
    hh_defrag_metrics m;
    ck_assert_int_eq(hh_defrag_metrics_get(heap, &m), HH_OK);
    ck_assert_uint_eq(m.hole_count, 32);
    ck_assert_uint_eq(m.free_bytes, before.free_bytes + 32 * 64);
    ck_assert_uint_eq(m.debt_bytes, 32 * 64);                  /* the live blocks above the first hole */
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    ck_assert_uint_eq(st.free_blocks, 33);                     /* the cached blocks and the top region */
    ck_assert_uint_eq(st.live_blocks, 32);
    ck_assert_uint_eq(st.used_bytes, before.used_bytes / 2);
    ck_assert_uint_eq(st.free_bytes + st.used_bytes, st.capacity);
    ck_assert_uint_eq(st.largest_free, before.free_bytes);     /* the top region */
    walk_sum w = { .ordered = true };
    hh_heap_walk(heap, sum_block, &w);
    ck_assert(w.ordered);
    ck_assert_uint_eq(w.free_blocks, 33);
    ck_assert_uint_eq(w.live, 32);
    ck_assert_uint_eq(w.bytes, st.capacity);
    hh_heap_stats again;                                       /* looking changed nothing */
    hh_heap_stats_get(heap, &again);
    ck_assert_uint_eq(again.free_blocks, 33);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_defrag_step(heap, HH_DEFRAG_UNLIMITED);                 /* the step merges them, then compacts */
    ck_assert_uint_eq(walk_free_blocks(heap), 1);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

/* Looking changes nothing: the same operations on two heaps, one of them
   looked at (stats, walk, defrag metrics) after every operation, end with
   the same blocks in the same places. (hh-replay reproduces a recording
   without the recorder's looks; observers that merged the cache broke it.) */
typedef struct layout_hash { uint64_t h; } layout_hash;
static void hash_block(const hh_block_info *b, void *user) {
    layout_hash *x = user;
    x->h = (x->h ^ (b->offset * 31 + b->size * 7 + (uint64_t)b->state)) * 0x100000001B3ull;
}
START_TEST(observers_change_no_placement) {
    hh_heap *hp[2];
    uint64_t hash[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &hp[k]), HH_OK);
        hh_rng rng = hh_rng_make(77);
        hh_handle live[256] = {{0}};
        for (int op = 0; op < 4000; op++) {
            uint32_t i = hh_rng_below(&rng, 256);
            if (hh_is_null(live[i])) live[i] = hh_alloc(hp[k], 1 + hh_rng_below(&rng, 600));
            else {
                ck_assert_int_eq(hh_free(hp[k], live[i]), HH_OK);
                live[i] = HH_NULL;
            }
            if (k == 1) {                                      /* the looked-at heap */
                hh_heap_stats st;
                hh_defrag_metrics m;
                layout_hash ignore = { 0 };
                hh_heap_stats_get(hp[k], &st);
                hh_heap_walk(hp[k], hash_block, &ignore);
                ck_assert_int_eq(hh_defrag_metrics_get(hp[k], &m), HH_OK);
            }
        }
        layout_hash x = { 0xcbf29ce484222325ull };
        hh_heap_walk(hp[k], hash_block, &x);
        hash[k] = x.h;
        ck_assert_int_eq(hh_heap_check(hp[k]), HH_OK);
        hh_heap_destroy(hp[k]);
    }
    ck_assert_uint_eq(hash[0], hash[1]);
}
END_TEST

/* A defrag step sees cached blocks as holes: it closes them. */
START_TEST(defrag_step_closes_cached_holes) {
    hh_handle h[100];
    for (int i = 0; i < 100; i++) {
        h[i] = hh_alloc(heap, 64);
        hh_test_fill(hh_deref(heap, h[i]), 64, (uint64_t)i);
    }
    for (int i = 0; i < 100; i += 2) ck_assert_int_eq(hh_free(heap, h[i]), HH_OK);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_defrag_report r = hh_defrag_step(heap, HH_DEFRAG_UNLIMITED);
    ck_assert_uint_gt(r.moves, 0);
    ck_assert(r.compact);
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    for (int i = 1; i < 100; i += 2) ck_assert_int_eq(hh_test_verify(hh_deref(heap, h[i]), 64, (uint64_t)i), -1);
    ck_assert_uint_eq(walk_free_blocks(heap), 1);
}
END_TEST

/* A request that only the coalesced cached blocks can hold is served from
   them: a fixed heap does not report "no room", a growable one does not grow. */
START_TEST(cached_bytes_serve_a_large_request) {
    enum { N = 3000 };
    static hh_handle h[N];
    hh_heap *g;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 16u << 20, .commit = 256u << 10,
                                                     .flags = HH_HEAP_GROWABLE | HH_HEAP_NO_AUTO_COMPACT }, &g), HH_OK);
    size_t managed = hh_heap_managed_bytes(g);
    int n = 0;
    for (; n < N; n++) {                                       /* fill what is committed, not more */
        hh_handle x = hh_alloc(g, 64);
        if (hh_heap_managed_bytes(g) != managed) {
            ck_assert_int_eq(hh_free(g, x), HH_OK);
            break;
        }
        h[n] = x;
    }
    ck_assert_int_gt(n, 1000);
    for (int i = 0; i < n; i++) ck_assert_int_eq(hh_free(g, h[i]), HH_OK);
    ck_assert_int_eq(hh_heap_check(g), HH_OK);
    managed = hh_heap_managed_bytes(g);
    hh_handle big = hh_alloc(g, managed - 4096);               /* only the whole range holds it */
    ck_assert(!hh_is_null(big));
    ck_assert_uint_eq(hh_heap_managed_bytes(g), managed);
    ck_assert_int_eq(hh_heap_check(g), HH_OK);
    hh_heap_destroy(g);

    hh_heap *f;                                                /* a fixed heap that may not compact */
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 256u << 10, .flags = HH_HEAP_NO_AUTO_COMPACT }, &f), HH_OK);
    for (n = 0; n < N; n++) {
        h[n] = hh_alloc(f, 32);
        if (hh_is_null(h[n])) break;
    }
    for (int i = 0; i < n; i++) ck_assert_int_eq(hh_free(f, h[i]), HH_OK);
    big = hh_alloc(f, hh_heap_managed_bytes(f) - 4096);
    ck_assert(!hh_is_null(big));
    ck_assert_int_eq(hh_heap_check(f), HH_OK);
    hh_heap_destroy(f);
}
END_TEST

/* Randomised against the shadow model: sizes on both sides of the cache's
   1 KiB limit, aligned requests (whose lead gap must not become slack of a
   cached block), resizes, pins, observers and defrag steps, on a fixed and a
   growable heap; every byte of every live block and every invariant checked. */
static void cache_random_run(uint32_t flags, uint64_t seed) {
    hh_heap *r;
    hh_heap_desc d = { .capacity = 4u << 20, .flags = flags };
    if (flags & HH_HEAP_GROWABLE) d.commit = 512u << 10;
    ck_assert_int_eq(hh_heap_create(&d, &r), HH_OK);
    hh_shadow sh;
    hh_shadow_init(&sh);
    hh_rng rng = hh_rng_make(seed);
    unsigned ops = hh_test_scaled(20000, 2000);
    for (unsigned op = 0; op < ops; op++) {
        uint32_t k = hh_rng_below(&rng, 100);
        if (k < 45 || sh.count == 0) {
            size_t size = 1 + hh_rng_below(&rng, hh_rng_below(&rng, 8) ? 1100 : 5000);
            size_t align = hh_rng_below(&rng, 10) ? 16 : (size_t)16 << hh_rng_below(&rng, 6);
            hh_handle h = align == 16 ? hh_alloc(r, size) : hh_alloc_ex(r, size, align, op);
            if (!hh_is_null(h)) hh_shadow_add(&sh, r, h, size, align, hh_rng_next(&rng));
        } else if (k < 85) {
            size_t i = hh_rng_below(&rng, (uint32_t)sh.count);
            hh_shadow_obj *o = &sh.objs[i];
            while (o->pins) {
                ck_assert_int_eq(hh_unpin(r, o->h), HH_OK);
                o->pins--;
            }
            ck_assert_int_eq(hh_free(r, o->h), HH_OK);
            hh_shadow_remove(&sh, i);
        } else if (k < 92) {
            hh_shadow_obj *o = &sh.objs[hh_rng_below(&rng, (uint32_t)sh.count)];
            size_t ns = 1 + hh_rng_below(&rng, 1500);
            if (!o->pins && hh_resize(r, o->h, ns) == HH_OK) {
                size_t keep = ns < o->size ? ns : o->size;
                ck_assert_int_eq(hh_test_verify(hh_deref(r, o->h), keep, o->key), -1);
                o->size = ns;
                hh_test_fill(hh_deref(r, o->h), ns, o->key);
            }
        } else if (k < 94) {
            hh_shadow_obj *o = &sh.objs[hh_rng_below(&rng, (uint32_t)sh.count)];
            if (o->pins == 0) {
                o->pinned_at = hh_pin(r, o->h);
                o->pins = 1;
            } else {
                ck_assert_int_eq(hh_unpin(r, o->h), HH_OK);
                o->pins = 0;
            }
        } else if (k < 96) {
            hh_defrag_step(r, 1 + hh_rng_below(&rng, 16));
        } else if (k < 98) {
            hh_heap_stats st;
            hh_heap_stats_get(r, &st);
            ck_assert_uint_eq(st.used_bytes + st.free_bytes, st.capacity);
        } else {
            ck_assert_int_eq(hh_heap_check(r), HH_OK);
        }
        if (op % 257 == 0) {
            ck_assert_int_eq(hh_heap_check(r), HH_OK);
            hh_shadow_verify(&sh, r);
        }
    }
    ck_assert_int_eq(hh_heap_check(r), HH_OK);
    hh_shadow_verify(&sh, r);
    hh_shadow_fini(&sh);
    hh_heap_destroy(r);
}

START_TEST(cache_random_against_shadow) {
    uint64_t seed = hh_test_seed(12) + (uint64_t)_i;
    cache_random_run(_i % 2 ? HH_HEAP_GROWABLE : 0u, seed);
}
END_TEST

/* hh_alloc on a plain heap takes shortcuts (the cache pop; the top region
   carved directly while it is the one free block); a thread-safe heap takes
   the general path. Both must place every block at the same offset, whether
   the top region is alone or holes wait, fits or is too small (fill to
   exhaustion, then churn), with every byte of every live block intact. */
START_TEST(plain_shortcuts_place_as_the_general_path) {
    hh_heap *hp[2];
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 64u << 10 }, &hp[0]), HH_OK);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 64u << 10, .flags = HH_HEAP_THREADSAFE }, &hp[1]),
                     HH_OK);
    enum { N = 512 };
    static hh_handle hs[2][N];
    static size_t sizes[N];
    memset(hs, 0, sizeof hs);
    hh_rng rng = hh_rng_make(hh_test_seed(41));
    hh_test_capture_errors();                        /* exhaustion: one report a heap a failed allocation */
    hh_test_reset_captured();
    unsigned failed = 0, ops = hh_test_scaled(20000, 3000);
    for (unsigned op = 0; op < ops; op++) {
        uint32_t i = hh_rng_below(&rng, N);
        if (hh_is_null(hs[0][i])) {
            size_t size = hh_rng_chance(&rng, 0.8) ? 1 + hh_rng_below(&rng, 200) : 1 + hh_rng_below(&rng, 3000);
            for (int k = 0; k < 2; k++) hs[k][i] = hh_alloc(hp[k], size);
            ck_assert_int_eq(hh_is_null(hs[0][i]), hh_is_null(hs[1][i]));
            if (hh_is_null(hs[0][i])) {
                failed++;
                continue;
            }
            sizes[i] = size;
            for (int k = 0; k < 2; k++) {
                unsigned char *p = hh_deref(hp[k], hs[k][i]);
                memset(p, (int)(i & 0xFF), size);
            }
            ck_assert_uint_eq((size_t)((char *)hh_deref(hp[0], hs[0][i]) - (char *)hh_heap_base(hp[0])),
                              (size_t)((char *)hh_deref(hp[1], hs[1][i]) - (char *)hh_heap_base(hp[1])));
        } else {
            for (int k = 0; k < 2; k++) {
                const unsigned char *p = hh_deref(hp[k], hs[k][i]);
                for (size_t b = 0; b < sizes[i]; b++) ck_assert_uint_eq(p[b], i & 0xFF);
                ck_assert_int_eq(hh_free(hp[k], hs[k][i]), HH_OK);
                hs[k][i] = HH_NULL;
            }
        }
    }
    ck_assert_uint_gt(failed, 0);                     /* the run did reach a too-small top region */
    ck_assert_uint_eq(hh_test_captured_count(), 2 * failed);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(hh_heap_check(hp[k]), HH_OK);
        hh_heap_destroy(hp[k]);
    }
}
END_TEST

/* The out-of-line lookup (hhi_slot_lookup, behind (hh_deref), hh_free ...)
   takes (uint32_t)id - the heap's tag << 24 as the index, below capacity
   only for the heap's own tag; the inline hh_deref clamps and tests the tag.
   Either way a live slot's index and generation under every other tag (0
   included) never match, nor the heap's tag with an index at or past
   capacity, at the last reserved slot (never used) or at the sentinel 0. */
START_TEST(tag_folded_index_rejects_other_tags_and_ranges) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .max_handles = 100 }, &hp), HH_OK);
    hh_handle keep = hh_alloc(hp, 40);
    ck_assert(!hh_is_null(keep));
    *(uint64_t *)hh_deref(hp, keep) = 0x1234;
    uint64_t idx = hh_handle_index(keep), tag = (keep.id >> 24) & 0xFF, gen = keep.id >> 32;
    hh_handle forged[256 + 5];
    size_t n = 0;
    for (uint64_t t = 0; t < 256; t++)
        if (t != tag) forged[n++] = (hh_handle){ idx | (t << 24) | (gen << 32) };
    uint64_t own[] = { 0, 100, 101, 102, 0xFFFFFF };   /* sentinel, last reserved (never used), past capacity */
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) forged[n++] = (hh_handle){ own[i] | (tag << 24) | (gen << 32) };
    for (size_t i = 0; i < n; i++) {
        for (int how = 0; how < 2; how++) {
            hh_test_reset_captured();
            void *p = how ? (hh_deref)(hp, forged[i]) : hh_deref(hp, forged[i]);
            ck_assert_ptr_null(p);
            ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
            ck_assert_uint_eq(hh_test_captured_count(), 1);
        }
    }
    ck_assert_uint_eq(*(uint64_t *)hh_deref(hp, keep), 0x1234);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* The heap's 8-byte slots (src/heap/heap_slots.c): a slot that is not live
   has tag 0 in its key, so no handle matches it -- not one forged with the
   next generation of a freed slot (tag 0 or the heap's), not one naming a
   never-used slot (which reads 0), not one with generation bits above 24. */
START_TEST(forged_keys_never_match_a_dead_slot) {
    hh_handle a = hh_alloc(heap, 64), keep = hh_alloc(heap, 64);
    uint64_t idx = hh_handle_index(a), tag = (a.id >> 24) & 0xFF, gen = a.id >> 32;
    ck_assert_int_eq(hh_free(heap, a), HH_OK);
    hh_handle forged[] = {
        { idx | ((gen + 1) << 32) },                    /* the slot's next generation, tag 0 */
        { idx | (tag << 24) | ((gen + 1) << 32) },      /* the same with the heap's tag */
        { idx | (tag << 24) | (gen << 32) },            /* the freed handle itself */
        { 1000 },                                       /* a never-used slot: key 0 */
        { 1000 | (tag << 24) },
        { hh_handle_index(keep) | (keep.id & ~(uint64_t)0xFFFFFF) | ((uint64_t)1 << 56) },   /* generation >= 2^24 */
    };
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        hh_test_reset_captured();
        ck_assert_ptr_null(hh_deref(heap, forged[i]));
        ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
        ck_assert_int_eq(hh_free(heap, forged[i]), HH_E_STALE_HANDLE);
        ck_assert_uint_eq(hh_size(heap, forged[i]), 0);
    }
    ck_assert_ptr_nonnull(hh_deref(heap, keep));
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
}
END_TEST

/* Takes and gives back one table tag without making a heap: a generic
   table (small slot array). Under memcheck the tag-cycling tests advance the
   round-robin this way between heaps: a heap maps 128 MiB of slot
   reservation, which memcheck with --track-origins pays for by the byte. */
static void tag_cycle_cheaply(void) {
    hh_handle_table t;
    ck_assert_int_eq(hh_handle_table_init(&t, &(hh_handle_table_desc){ .capacity = 16 }), HH_OK);
    hh_handle_table_fini(&t);
}

/* hh_deref (the inline macro and the function) of h on hp: NULL and exactly
   one HH_E_STALE_HANDLE report each. */
static void expect_stale_deref(hh_heap *hp, hh_handle h) {
    for (int how = 0; how < 2; how++) {
        hh_test_reset_captured();
        void *p = how ? (hh_deref)(hp, h) : hh_deref(hp, h);
        ck_assert_msg(p == NULL, "handle %#llx dereferenced (%s)", (unsigned long long)h.id, how ? "function" : "inline");
        ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
    }
}

/* The inline hh_deref has no range test: it loads the slot of whatever index
   a handle carries, from the table just below the heap object (heap.h). Every
   index, 0 .. 2^24 - 1, must therefore have a readable slot that matches no
   handle: below capacity a committed one, above it a zero page. One index of
   every page of the table (and the edges: the sentinel, the last issuable
   slot, the first past capacity, the top index), with the heap's tag and the
   generation of a live handle, with tag 0 (a zero slot's key is 0: only the
   tag test rejects those) and tag 0 with the live handle's generation. */
START_TEST(deref_reads_a_slot_for_every_index) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .max_handles = 100 }, &hp), HH_OK);
    hh_handle keep = hh_alloc(hp, 40);
    ck_assert(!hh_is_null(keep));
    *(uint64_t *)hh_deref(hp, keep) = 0x5151;
    uint64_t tag = (keep.id >> 24) & 0xFF, gen = keep.id >> 32, kidx = hh_handle_index(keep);
    /* one slot of every 4 KiB page (under memcheck, of every 64th: each stale
       deref formats a report, and the plain run covers every page) */
    const uint64_t step = 4096 / sizeof(uint64_t) * (hh_test_scale() < 1 ? 64 : 1);
    uint64_t edges[] = { 0, 2, 100, 101, 102, 511, 512, 0xFFFFFE, 0xFFFFFF };
    size_t checked = 0;
    for (uint64_t i = 0, e = 0; i <= 0xFFFFFF; ) {
        if (i != kidx) {
            expect_stale_deref(hp, (hh_handle){ i | (tag << 24) | (gen << 32) });
            if (i != 0) expect_stale_deref(hp, (hh_handle){ i });   /* (HH_NULL itself: NULL, no report) */
            expect_stale_deref(hp, (hh_handle){ i | (gen << 32) });
            checked++;
        }
        uint64_t next = i + step;                           /* the next page, or an edge before it */
        while (e < sizeof edges / sizeof edges[0] && edges[e] <= i) e++;
        i = e < sizeof edges / sizeof edges[0] && edges[e] < next ? edges[e] : next;
    }
    ck_assert_uint_ge(checked, (1u << 24) / step);
    ck_assert_uint_eq(*(uint64_t *)hh_deref(hp, keep), 0x5151);     /* nothing was touched */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* A slot freed and issued again: the old handle (and tag-0 copies of the old
   and the new one) are stale to the inline and the function alike, the new
   one names the new block. */
START_TEST(deref_of_a_freed_and_reused_slot) {
    hh_heap *hp;
    enum { N = 8 };
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .max_handles = N }, &hp), HH_OK);
    hh_handle old[N], now[N];
    for (int i = 0; i < N; i++) ck_assert(!hh_is_null(old[i] = hh_alloc(hp, 32)));
    for (int i = 0; i < N; i++) ck_assert_int_eq(hh_free(hp, old[i]), HH_OK);
    for (int i = 0; i < N; i++) {
        ck_assert(!hh_is_null(now[i] = hh_alloc(hp, 32)));
        *(uint64_t *)hh_deref(hp, now[i]) = 1000u + (unsigned)i;
    }
    for (int i = 0; i < N; i++) {
        bool reused = false;
        for (int j = 0; j < N; j++) reused |= hh_handle_index(now[j]) == hh_handle_index(old[i]);
        ck_assert(reused);                                    /* a table of N slots: every slot again */
        expect_stale_deref(hp, old[i]);
        expect_stale_deref(hp, (hh_handle){ old[i].id & ~((uint64_t)0xFF << 24) });
        expect_stale_deref(hp, (hh_handle){ now[i].id & ~((uint64_t)0xFF << 24) });
    }
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(*(uint64_t *)hh_deref(hp, now[i]), 1000u + (unsigned)i);
        ck_assert_ptr_eq((hh_deref)(hp, now[i]), hh_deref(hp, now[i]));
    }
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST

/* A growable heap's table past its first commit (HH_HANDLE_COMMIT_SLOTS):
   every handle, below and above the first commit, derefs to its own block by
   the inline and the function; the first slots not yet issued, the first not
   yet committed and the first past capacity are stale. */
START_TEST(deref_of_a_growable_table_past_its_first_commit) {
    hh_heap *hp;
    const uint32_t maxh = 3u * HH_HANDLE_COMMIT_SLOTS, n = 2u * HH_HANDLE_COMMIT_SLOTS + 5;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 8u << 20, .max_handles = maxh,
                                                     .flags = HH_HEAP_GROWABLE }, &hp), HH_OK);
    hh_handle *hs = calloc(n, sizeof *hs);
    ck_assert_ptr_nonnull(hs);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert(!hh_is_null(hs[i] = hh_alloc(hp, 24)));
        *(uint32_t *)hh_deref(hp, hs[i]) = i;
    }
    ck_assert_uint_gt(hh_handle_index(hs[n - 1]), HH_HANDLE_COMMIT_SLOTS);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_eq(*(uint32_t *)hh_deref(hp, hs[i]), i);
        ck_assert_ptr_eq((hh_deref)(hp, hs[i]), hh_deref(hp, hs[i]));
    }
    uint64_t key = hs[n - 1].id & ~HH_HANDLE_INDEX_MASK;      /* tag and first generation */
    uint64_t idx[] = { n + 1, n + 2, 3u * HH_HANDLE_COMMIT_SLOTS, maxh, maxh + 1, maxh + 2, 0xFFFFFF };
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) expect_stale_deref(hp, (hh_handle){ key | idx[i] });
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    free(hs);
    hh_heap_destroy(hp);
}
END_TEST

/* A handle of a destroyed heap, dereferenced on a later heap that holds the
   same table tag (a later epoch of it) and a live block in the same slot: stale
   to the inline and the function; the later heap's own handle is not. */
START_TEST(deref_after_destroy_of_a_heap_with_the_same_tag) {
    hh_heap *dead;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &dead), HH_OK);
    hh_handle hd = hh_alloc(dead, 64);
    ck_assert(!hh_is_null(hd));
    uint64_t tag = (hd.id >> 24) & 0xFF;
    hh_heap_destroy(dead);
    bool met = false;
    for (unsigned i = 0; i < 600 && !met; i++) {             /* tags are handed out round-robin */
        if (hh_test_scale() < 1 && i < 240) {                  /* memcheck: most of the round by tables */
            tag_cycle_cheaply();
            continue;
        }
        hh_heap *c;
        ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &c), HH_OK);
        hh_handle hc = hh_alloc(c, 64);
        ck_assert(!hh_is_null(hc));
        if (((hc.id >> 24) & 0xFF) == tag) {
            met = true;
            ck_assert_uint_eq(hh_handle_index(hc), hh_handle_index(hd));
            ck_assert_uint_ne(hc.id >> 32, hd.id >> 32);       /* another epoch: another generation */
            memset(hh_deref(c, hc), 0xC5, 64);
            expect_stale_deref(c, hd);
            unsigned char *p = hh_deref(c, hc);
            ck_assert_ptr_nonnull(p);
            ck_assert_uint_eq(p[63], 0xC5);
        }
        ck_assert_int_eq(hh_heap_check(c), HH_OK);
        hh_heap_destroy(c);
    }
    ck_assert(met);
}
END_TEST

/* A slot issued 2^24 times retires: its generations are never issued twice,
   and a table whose only slot retired is full. */
START_TEST(slot_retires_after_every_generation) {
    hh_heap *h1;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16, .max_handles = 1 }, &h1), HH_OK);
    hh_handle a = hh_alloc(h1, 32);
    ck_assert_int_eq(hh_free(h1, a), HH_OK);
    hhi_heap_slot_age(h1, hh_handle_index(a), 1);        /* one issue left */
    hh_handle b = hh_alloc(h1, 32);
    ck_assert(!hh_is_null(b));
    ck_assert_uint_eq(hh_handle_index(b), hh_handle_index(a));
    ck_assert_int_eq(hh_free(h1, b), HH_OK);              /* retires */
    hh_test_reset_captured();
    ck_assert(hh_is_null(hh_alloc(h1, 32)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "handle table full"));
    ck_assert_ptr_null(hh_deref(h1, b));
    ck_assert_ptr_null(hh_deref(h1, a));
    ck_assert_int_eq(hh_heap_check(h1), HH_OK);
    hh_heap_destroy(h1);
}
END_TEST

/* Heaps of desc d made (and destroyed) until one takes table tag `tag`
   back (round-robin: within 255); its first handle, a 32-byte block, out. */
static hh_heap *heap_with_tag(const hh_heap_desc *d, unsigned tag, hh_handle *first) {
    for (int i = 0; i < 300; i++) {
        hh_heap *x;
        ck_assert_int_eq(hh_heap_create(d, &x), HH_OK);
        hh_handle t = hh_alloc(x, 32);
        if (((t.id >> HH_HANDLE_INDEX_BITS) & 0xFF) == tag) {
            *first = t;
            return x;
        }
        hh_heap_destroy(x);
    }
    ck_abort_msg("no heap took tag %u back", tag);
    return NULL;
}

/* A handle of a destroyed heap whose slot had been reused 2^16 times named
   -- and freed -- the first block of the next heap of its tag: successive
   heaps of a tag started their generations 2^16 apart, and the slot's had
   run into the next heap's (found by an adversarial pass). A heap now starts
   past every generation its tag's last heap issued. */
START_TEST(handle_of_a_destroyed_heap_with_a_busy_slot_is_rejected) {
    hh_heap_desc d = { .capacity = 1u << 16, .max_handles = 16 };
    hh_heap *a;
    ck_assert_int_eq(hh_heap_create(&d, &a), HH_OK);
    hh_handle first = hh_alloc(a, 32);
    ck_assert_int_eq(hh_free(a, first), HH_OK);
    /* Slot 1 as after 2^16 issues (the hook sets its next generation). */
    hhi_heap_slot_age(a, hh_handle_index(first), (1u << 24) - (1u << 16));
    hh_handle old = HH_NULL;
    for (int i = 0; i < 64 && hh_is_null(old); i++) {
        hh_handle h = hh_alloc(a, 32);
        ck_assert(!hh_is_null(h));
        if (hh_handle_index(h) == hh_handle_index(first)) old = h;
        else ck_assert_int_eq(hh_free(a, h), HH_OK);
    }
    ck_assert(!hh_is_null(old) && hh_handle_generation(old) == hh_handle_generation(first) + (1u << 16));
    unsigned tag = (unsigned)((old.id >> HH_HANDLE_INDEX_BITS) & 0xFF);
    hh_heap_destroy(a);
    hh_handle t;
    hh_heap *b = heap_with_tag(&d, tag, &t);
    memset(hh_deref(b, t), 0x6B, 32);
    hh_test_reset_captured();
    ck_assert_ptr_null(hh_deref(b, old));
    ck_assert_int_eq(hh_free(b, old), HH_E_STALE_HANDLE);
    ck_assert_uint_eq(hh_test_captured_count(), 2);
    hh_heap_stats st;
    hh_heap_stats_get(b, &st);
    ck_assert_uint_eq(st.live_blocks, 1);                 /* b's own block stays */
    ck_assert_int_eq(hh_heap_check(b), HH_OK);
    hh_heap_destroy(b);
}
END_TEST

/* The same with a slot that went all the way round: counted, it read as the
   furthest advance of all (2^24 - 1), and the tag's next heap started where
   the destroyed one had -- every first handle of it named a block of the new
   heap (found by a review of the fix above). */
START_TEST(handle_of_a_destroyed_heap_with_a_retired_slot_is_rejected) {
    hh_heap_desc d = { .capacity = 1u << 16, .max_handles = 2 };
    hh_heap *a;
    ck_assert_int_eq(hh_heap_create(&d, &a), HH_OK);
    hh_handle keep = hh_alloc(a, 32), last = hh_alloc(a, 32);
    ck_assert(!hh_is_null(keep) && !hh_is_null(last));
    ck_assert_int_eq(hh_free(a, last), HH_OK);
    hhi_heap_slot_age(a, hh_handle_index(last), 1);       /* one issue left */
    hh_handle again = hh_alloc(a, 32);
    ck_assert_uint_eq(hh_handle_index(again), hh_handle_index(last));
    ck_assert_int_eq(hh_free(a, again), HH_OK);            /* the slot retires */
    unsigned tag = (unsigned)((keep.id >> HH_HANDLE_INDEX_BITS) & 0xFF);
    hh_heap_destroy(a);
    hh_handle mine;
    hh_heap *b = heap_with_tag(&d, tag, &mine);
    ck_assert_uint_eq(hh_handle_index(mine), hh_handle_index(keep));
    hh_test_reset_captured();
    ck_assert_ptr_null(hh_deref(b, keep));
    ck_assert_int_eq(hh_free(b, keep), HH_E_STALE_HANDLE);
    ck_assert_ptr_nonnull(hh_deref(b, mine));
    hh_heap_destroy(b);
}
END_TEST

/* Issue 12: table tags are never shared by two live heaps. Heap A keeps a
   live handle while 600 heaps (more than two rounds of the 8-bit tag) are
   created and destroyed; each of them, holding a live block in the same slot,
   rejects A's handle with HH_E_STALE_HANDLE and keeps its own block. A handle
   of a destroyed heap is rejected the same way by every later heap. */
START_TEST(handle_of_another_heap_rejected_across_tag_cycles) {
    hh_heap *a, *dead;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &a), HH_OK);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &dead), HH_OK);
    hh_handle ha = hh_alloc(a, 64), hd = hh_alloc(dead, 64);
    ck_assert(!hh_is_null(ha) && !hh_is_null(hd));
    memset(hh_deref(a, ha), 0xA1, 64);
    hh_heap_destroy(dead);
    bool cheap = hh_test_scale() < 1;                          /* memcheck: every 8th round a heap */
    for (unsigned i = 0; i < 600; i++) {
        if (cheap && i % 8 != 7) {
            tag_cycle_cheaply();
            continue;
        }
        hh_heap *c;
        ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &c), HH_OK);
        hh_handle hc = hh_alloc(c, 64);
        ck_assert_uint_eq(hh_handle_index(hc), hh_handle_index(ha));   /* the same slot, generation 1 */
        memset(hh_deref(c, hc), 0xC3, 64);
        hh_test_reset_captured();
        ck_assert_ptr_null(hh_deref(c, ha));
        ck_assert_int_eq(hh_free(c, ha), HH_E_STALE_HANDLE);
        ck_assert_int_eq(hh_free(c, hd), HH_E_STALE_HANDLE);
        ck_assert_uint_eq(hh_size(c, ha), 0);
        ck_assert_ptr_null(hh_pin(c, ha));
        ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
        unsigned char *p = hh_deref(c, hc);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(p[0], 0xC3);
        hh_heap_stats st;
        hh_heap_stats_get(c, &st);
        ck_assert_uint_eq(st.live_blocks, 1);
        hh_heap_destroy(c);
    }
    unsigned char *pa = hh_deref(a, ha);
    ck_assert_ptr_nonnull(pa);
    ck_assert_uint_eq(pa[63], 0xA1);
    ck_assert_int_eq(hh_free(a, ha), HH_OK);
    hh_heap_destroy(a);
}
END_TEST


/* Issue 12: decommitted_bytes means resident bytes given back. A 64 MiB heap
   of its own mapping touches only its first 8 MiB; 3/4 of the blocks are freed
   and bounded steps run until nothing more is given back. Every step's pages
   must be resident ones (RSS falls by about what is reported, step by step and
   in total), and the total can never exceed what was touched. */
START_TEST(bounded_decommit_gives_back_resident_pages) {
    const size_t cap = 64u << 20, touched = 8u << 20, bsz = 1024 - HH_HEAP_HEADER_BYTES;
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = cap, .max_handles = 1u << 14 }, &hp), HH_OK);
    unsigned n = (unsigned)(touched / 1024);
    hh_handle *hs = calloc(n, sizeof *hs);
    ck_assert_ptr_nonnull(hs);
    for (unsigned i = 0; i < n; i++) {
        hs[i] = hh_alloc(hp, bsz);
        ck_assert(!hh_is_null(hs[i]));
        memset(hh_deref(hp, hs[i]), (int)(i & 0x7F) + 1, bsz);   /* every page resident */
    }
    for (unsigned i = 0; i < n; i++)
        if (i % 4) ck_assert_int_eq(hh_free(hp, hs[i]), HH_OK);
    bool rss_ok = hhi_os_rss_bytes() != 0 && !hh_test_under_valgrind();   /* memcheck blurs RSS */
    size_t rss_start = hhi_os_rss_bytes(), prev = 0, early_rss = 0, early_dc = 0;
    hh_defrag_metrics m;
    unsigned steps = 0, quiet = 0;
    for (; quiet < 4; steps++) {
        ck_assert_uint_lt(steps, 5000);
        hh_defrag_report rep = hh_defrag_step(hp, 64);
        hh_defrag_metrics_get(hp, &m);
        ck_assert_uint_le(m.decommitted_bytes, touched);
        quiet = rep.compact && m.decommitted_bytes == prev ? quiet + 1 : 0;
        if (m.decommitted_bytes > prev && early_dc == 0 && m.decommitted_bytes >= (1u << 20)) {
            early_dc = m.decommitted_bytes;           /* the first MiB given back ... */
            early_rss = hhi_os_rss_bytes();           /* ... shows in RSS right away */
        }
        prev = m.decommitted_bytes;
    }
    if (getenv("HH_TEST_VERBOSE")) fprintf(stderr, "decommit: %u steps, %zu reported, RSS %zu -> %zu\n", steps, m.decommitted_bytes, rss_start, hhi_os_rss_bytes());
    ck_assert_uint_gt(m.decommitted_bytes, touched / 2);      /* 3/4 freed, less what is retained */
    if (rss_ok) {
        size_t fall = rss_start > hhi_os_rss_bytes() ? rss_start - hhi_os_rss_bytes() : 0;
        ck_assert_msg(fall + (1u << 20) >= m.decommitted_bytes && fall <= m.decommitted_bytes + (1u << 20),
                      "RSS fell by %zu bytes, %zu reported", fall, m.decommitted_bytes);
        size_t efall = rss_start > early_rss ? rss_start - early_rss : 0;
        ck_assert_msg(efall + (512u << 10) >= early_dc, "after the first %zu bytes reported RSS fell by %zu", early_dc,
                      efall);
    }
    for (unsigned i = 0; i < n; i += 4) {
        unsigned char *p = hh_deref(hp, hs[i]);
        ck_assert_uint_eq(p[0], (i & 0x7F) + 1);
        ck_assert_uint_eq(p[bsz - 1], (i & 0x7F) + 1);
    }
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    free(hs);
    hh_heap_destroy(hp);
}
END_TEST



/* A quarantine block may take a sliver of the hole below it as slack (an
   aligned allocation's lead, an absorbed remainder): hh_heap_check must
   accept it (it once reported such a valid heap as corrupt, I12). */
START_TEST(debug_moves_quarantine_with_slack_is_valid) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_DEBUG_MOVES }, &hp), HH_OK);
    hh_handle a = hh_alloc(hp, 132), hole = hh_alloc(hp, 200), x = hh_alloc(hp, 200);
    ck_assert(!hh_is_null(a) && !hh_is_null(hole) && !hh_is_null(x));
    memset(hh_deref(hp, x), 0x3C, 200);
    ck_assert_int_eq(hh_free(hp, hole), HH_OK);
    hh_defrag_step(hp, 4);                                    /* x moves down; its old place is quarantine */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_handle y = hh_alloc_ex(hp, 16, 64, 0);                 /* its 16-byte lead joins the quarantine block */
    ck_assert(!hh_is_null(y));
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    const unsigned char *p = hh_deref(hp, x);
    for (int i = 0; i < 200; i++) ck_assert_uint_eq(p[i], 0x3C);
    hh_defrag_step(hp, 4);                                    /* the quarantine is released */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_heap_destroy(hp);
}
END_TEST
/* Issue 12: HH_HEAP_DEBUG_MOVES. Over a run of normal steps on a fragmented
   heap, no move lands where a block moved from in the same step (its own old
   place included), every old payload reads HH_FILL_MOVED after the step,
   allocations made after the step stay out of those places, the shadow model
   holds, and the heap still ends compact. */
START_TEST(debug_moves_never_reuse_a_vacated_place) {
    hh_heap *hp;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_DEBUG_MOVES }, &hp), HH_OK);
    hh_shadow sh;
    hh_shadow_init(&sh);
    hh_rng r = hh_rng_make(12);
    for (unsigned i = 0; i < 600; i++) {
        size_t size = 16 + hh_rng_below(&r, 600);
        hh_handle h = hh_alloc(hp, size);
        ck_assert(!hh_is_null(h));
        hh_shadow_add(&sh, hp, h, size, 16, i + 1);
    }
    for (size_t i = 0; i < sh.count;) {
        if (hh_rng_below(&r, 3) == 0) {
            ck_assert_int_eq(hh_free(hp, sh.objs[i].h), HH_OK);
            hh_shadow_remove(&sh, i);
        } else {
            i++;
        }
    }
    char *base = hh_heap_base(hp);
    unsigned steps = 0, total_moves = 0;
    for (bool compact = false; !compact; steps++) {
        ck_assert_uint_lt(steps, 2000);
        hh_defrag_report rep = hh_defrag_step(hp, 8 + steps % 24);
        compact = rep.compact;
        const hh_move_record *rec;
        size_t n = hh_defrag_journal(hp, &rec);
        ck_assert_uint_eq(n, rep.moves);
        total_moves += rep.moves;
        for (size_t i = 0; i < n; i++) {
            size_t usable = hh_size(hp, rec[i].handle), src_end = rec[i].src_offset + HH_HEAP_HEADER_BYTES + usable;
            for (size_t j = i; j < n; j++)               /* no later destination on an old place, its own included */
                ck_assert_msg(rec[j].dst_offset + rec[j].size <= rec[i].src_offset || rec[j].dst_offset >= src_end,
                              "step %u: move %zu lands on the old place of move %zu", steps, j, i);
            unsigned char *old = (unsigned char *)base + rec[i].src_offset + HH_HEAP_HEADER_BYTES;
            hh_track_defined(old, usable);                 /* no-access to memcheck/ASan: open, read, close */
            for (size_t k = 0; k < usable; k++)
                if (old[k] != 0xDB) ck_abort_msg("step %u: byte %zu of an old place reads %#x", steps, k, old[k]);
            hh_track_noaccess(old, usable);
        }
        if (n && steps % 4 == 0) {                         /* a new block keeps out of the old places too */
            hh_handle h = hh_alloc(hp, 64);
            ck_assert(!hh_is_null(h));
            size_t off = (size_t)((char *)hh_deref(hp, h) - base) - HH_HEAP_HEADER_BYTES;
            for (size_t i = 0; i < n; i++)
                ck_assert(off + 80 <= rec[i].src_offset || off >= rec[i].src_offset + HH_HEAP_HEADER_BYTES + hh_size(hp, rec[i].handle));
            hh_shadow_add(&sh, hp, h, 64, 16, 10000 + steps);
        }
        ck_assert_int_eq(hh_heap_check(hp), HH_OK);
        hh_shadow_verify(&sh, hp);
    }
    ck_assert_uint_gt(total_moves, 50);
    hh_defrag_report rep = hh_defrag_full(hp);             /* block by block, one step's worth at a time */
    for (unsigned k = 0; !rep.compact && k < 100; k++) rep = hh_defrag_full(hp);
    ck_assert(rep.compact);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_shadow_verify(&sh, hp);
    for (size_t i = 0; i < sh.count; i++) ck_assert_int_eq(hh_free(hp, sh.objs[i].h), HH_OK);
    hh_shadow_fini(&sh);
    hh_heap_destroy(hp);
}
END_TEST


/* Issue 12: a growable heap reserves capacity / max_handles and commits as it
   is used. Filled far past its initial commit (256 KiB of 16 MiB, handle slots
   beyond the first commit), every object keeps its bytes and its handle, the
   heap grows only at its top (no block moves), and at the limit allocation
   fails with HH_E_NO_MEMORY without losing anything. */
START_TEST(growable_heap_fills_past_its_initial_commit) {
    hh_heap *hp;
    const size_t cap = 16u << 20, commit = 256u << 10;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = cap, .max_handles = 1u << 16, .commit = commit,
                                                     .flags = HH_HEAP_GROWABLE }, &hp), HH_OK);
    ck_assert_uint_le(hh_heap_managed_bytes(hp), commit);
    hh_heap_desc d;
    hh_heap_desc_get(hp, &d);
    ck_assert_uint_eq(d.capacity, cap);
    ck_assert_uint_eq(d.commit, commit);
    hh_shadow sh;
    hh_shadow_init(&sh);
    hh_rng r = hh_rng_make(7);
    unsigned n = hh_test_scaled(12000, 6000);          /* > HH_HANDLE_COMMIT_SLOTS handles, > 1 MiB */
    uint64_t moves0 = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t size = 16 + hh_rng_below(&r, 240);
        hh_handle h = hh_alloc(hp, size);
        ck_assert_msg(!hh_is_null(h), "allocation %u failed: %s", i, hh_test_last_message());
        hh_shadow_add(&sh, hp, h, size, 16, i + 1);
        if (i % 7 == 3) {                              /* some churn: holes for the allocator to reuse */
            size_t k = hh_rng_below(&r, (uint32_t)sh.count);
            ck_assert_int_eq(hh_free(hp, sh.objs[k].h), HH_OK);
            hh_shadow_remove(&sh, k);
        }
    }
    hh_heap_stats st;
    hh_heap_stats_get(hp, &st);
    ck_assert_uint_gt(st.capacity, commit * 3);        /* grew */
    ck_assert_uint_eq(st.capacity, hh_heap_managed_bytes(hp));
    ck_assert_uint_le(st.capacity, cap);
    ck_assert_uint_eq(st.total_moves, moves0);         /* growing moved nothing */
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_shadow_verify(&sh, hp);
    /* Up to the limit: large blocks until the reservation is used up. */
    hh_test_reset_captured();
    for (unsigned i = 0;; i++) {
        ck_assert_uint_lt(i, 200);
        hh_handle h = hh_alloc(hp, 256u << 10);
        if (hh_is_null(h)) break;
        hh_shadow_add(&sh, hp, h, 256u << 10, 16, 50000 + i);
    }
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_uint_gt(hh_heap_managed_bytes(hp), cap - (512u << 10));
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    hh_shadow_verify(&sh, hp);
    for (size_t i = 0; i < sh.count; i++) ck_assert_int_eq(hh_free(hp, sh.objs[i].h), HH_OK);
    hh_shadow_fini(&sh);
    hh_heap_destroy(hp);
}
END_TEST

/* A commit the OS refuses (injected fault in the OS seam) fails the
   allocation with HH_E_NO_MEMORY and a message, and loses nothing: neither
   the range nor the handle table grows, and the next try succeeds. */
START_TEST(growable_heap_failed_commit_loses_nothing) {
    hh_heap *hp;
    static char buf[1u << 16];
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = sizeof buf, .memory = buf, .flags = HH_HEAP_GROWABLE },
                                    &hp), HH_E_INVALID_ARG);                      /* the caller's buffer cannot grow */
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .commit = 1u << 16 }, &hp),
                     HH_E_INVALID_ARG);                                           /* commit without the flag */
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 4u << 20, .commit = 64u << 10,
                                                     .flags = HH_HEAP_GROWABLE }, &hp), HH_OK);
    hh_shadow sh;
    hh_shadow_init(&sh);
    unsigned range_faults = 0, slot_faults = 0;
    for (unsigned i = 0; i < 2 * (unsigned)HH_HANDLE_COMMIT_SLOTS + 100; i++) {
        size_t managed = hh_heap_managed_bytes(hp);
        hh_heap_stats before;
        hh_heap_stats_get(hp, &before);
        hh_test_fail_after(0);                             /* the next seam call fails */
        hh_handle h = hh_alloc(hp, 64);
        unsigned fired = hh_test_fail_count();
        hh_test_fail_after(-1);
        if (fired) {                                       /* a commit was needed and refused */
            ck_assert(hh_is_null(h));
            ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
            ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "cannot commit"));
            if (strstr(hh_test_last_message(), "handle slots")) slot_faults++;
            else range_faults++;
            hh_heap_stats after;
            hh_heap_stats_get(hp, &after);
            ck_assert_uint_eq(hh_heap_managed_bytes(hp), managed);
            ck_assert_uint_eq(after.live_blocks, before.live_blocks);
            ck_assert_uint_eq(after.used_bytes, before.used_bytes);
            ck_assert_int_eq(hh_heap_check(hp), HH_OK);
            h = hh_alloc(hp, 64);                          /* no fault now: it commits and succeeds */
        }
        ck_assert(!hh_is_null(h));
        hh_shadow_add(&sh, hp, h, 64, 16, i + 1);
    }
    ck_assert_uint_gt(range_faults, 0);
    ck_assert_uint_gt(slot_faults, 0);
    hh_shadow_verify(&sh, hp);
    ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    for (size_t i = 0; i < sh.count; i++) ck_assert_int_eq(hh_free(hp, sh.objs[i].h), HH_OK);
    hh_shadow_fini(&sh);
    hh_heap_destroy(hp);
}
END_TEST


/* HH_HEAP_HUGE_PAGES is a hint: the heap (fixed or growable) works the same. */
START_TEST(huge_pages_flag_is_a_hint) {
    const uint32_t flags[] = { HH_HEAP_HUGE_PAGES, HH_HEAP_HUGE_PAGES | HH_HEAP_GROWABLE };
    for (size_t k = 0; k < HH_ARRAY_LEN_T(flags); k++) {
        hh_heap *hp;
        ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 8u << 20, .flags = flags[k] }, &hp), HH_OK);
        ck_assert_uint_eq((uintptr_t)hh_heap_base(hp) % 4096, 4096 - HH_HEAP_HEADER_BYTES);
        hh_shadow sh;
        hh_shadow_init(&sh);
        for (unsigned i = 0; i < 2000; i++) {
            hh_handle h = hh_alloc(hp, 100 + i % 300);
            ck_assert(!hh_is_null(h));
            hh_shadow_add(&sh, hp, h, 100 + i % 300, 16, i + 1);
        }
        hh_shadow_verify(&sh, hp);
        ck_assert_int_eq(hh_heap_check(hp), HH_OK);
        for (size_t i = 0; i < sh.count; i++) ck_assert_int_eq(hh_free(hp, sh.objs[i].h), HH_OK);
        hh_shadow_fini(&sh);
        hh_heap_destroy(hp);
    }
}
END_TEST

Suite *hh_test_heap_suite(void) {
    Suite *s = suite_create("heap");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, create_rejects_bad_desc);
    tcase_add_test(tc, caller_memory_is_used_and_given_back);
    tcase_add_test(tc, desc_defaults_resolved);
    tcase_add_test(tc, alloc_zero_is_invalid);
    tcase_add_test(tc, huge_sizes_fail_cleanly);
    tcase_add_test(tc, free_null_is_noop);
    tcase_add_test(tc, double_free_is_stale_and_harmless);
    tcase_add_test(tc, stale_deref_is_null_with_error);
    tcase_add_test(tc, deref_many_answers_as_deref_does);
    tcase_add_test(tc, forged_handle_touches_nothing);
    tcase_add_test(tc, forged_keys_never_match_a_dead_slot);
    tcase_add_test(tc, plain_shortcuts_place_as_the_general_path);
    tcase_add_test(tc, tag_folded_index_rejects_other_tags_and_ranges);
    tcase_add_test(tc, slot_retires_after_every_generation);
    tcase_add_test(tc, handle_of_another_heap_rejected);
    tcase_add_test(tc, handle_of_another_heap_rejected_across_tag_cycles);
    tcase_add_test(tc, handle_of_a_destroyed_heap_with_a_busy_slot_is_rejected);
    tcase_add_test(tc, handle_of_a_destroyed_heap_with_a_retired_slot_is_rejected);
    tcase_add_test(tc, deref_reads_a_slot_for_every_index);
    tcase_add_test(tc, deref_of_a_freed_and_reused_slot);
    tcase_add_test(tc, deref_of_a_growable_table_past_its_first_commit);
    tcase_add_test(tc, deref_after_destroy_of_a_heap_with_the_same_tag);
    tcase_add_test(tc, exhaustion_reports_no_memory);
    tcase_add_test(tc, full_handle_table_reports_no_memory);
    suite_add_tcase(s, tc);

    tc = tcase_create("blocks");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, alignment_up_to_4096);
    tcase_add_test(tc, size_is_usable_and_rounded);
    tcase_add_test(tc, accounting_matches_walk);
    tcase_add_test(tc, stats_look_at_a_bounded_number_of_holes);
    tcase_add_test(tc, same_size_reuses_its_hole);
    tcase_add_test(tc, cache_hands_back_newest_block_of_its_size);
    tcase_add_test(tc, cache_near_size_before_the_top_grows);
    tcase_add_test(tc, cache_near_size_before_a_hole);
    tcase_add_test(tc, cache_merged_before_the_top_grows);
    tcase_add_test(tc, cache_merged_before_the_top_grows_by_live_bytes);
    tcase_add_test(tc, cache_is_holes_to_every_observer);
    tcase_add_test(tc, observers_change_no_placement);
    tcase_add_test(tc, defrag_step_closes_cached_holes);
    tcase_add_test(tc, cached_bytes_serve_a_large_request);
    tcase_add_loop_test(tc, cache_random_against_shadow, 0, 4);
    tcase_add_test(tc, resize_grows_in_place_into_free_neighbour);
    tcase_add_test(tc, resize_moves_keeping_handle_and_contents);
    tcase_add_test(tc, failed_resize_leaves_block_as_it_was);
    tcase_add_test(tc, pinned_resize_only_in_place);
    tcase_add_test(tc, pins_are_counted);
    tcase_add_test(tc, pin_count_overflow_is_refused);
    tcase_add_test(tc, largest_block_fits_its_header);
    tcase_add_test(tc, a_block_at_the_top_of_the_largest_heap_derefs);
    tcase_add_test(tc, decommit_keeps_the_top_regions_links);
    tcase_add_test(tc, free_index_counts_a_full_span);
    tcase_add_test(tc, pin_and_tag_arrays_made_on_first_use);
    tcase_add_test(tc, tags_and_pins_survive_full_compaction);
    tcase_add_test(tc, check_catches_corrupt_8_byte_header);
    tcase_add_test(tc, free_refuses_a_live_block_marked_cached_or_quarantine);
    tcase_add_test(tc, check_catches_a_slot_table_away_from_the_heap);
    tcase_add_test(tc, debug_fills_and_catches_overrun);
    suite_add_tcase(s, tc);

    tc = tcase_create("memory");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, bounded_decommit_gives_back_resident_pages);
    tcase_add_test(tc, debug_moves_never_reuse_a_vacated_place);
    tcase_add_test(tc, debug_moves_quarantine_with_slack_is_valid);
    tcase_add_test(tc, growable_heap_fills_past_its_initial_commit);
    tcase_add_test(tc, growable_heap_failed_commit_loses_nothing);
    tcase_add_test(tc, huge_pages_flag_is_a_hint);
    suite_add_tcase(s, tc);

    tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, create_survives_every_injected_fault);
    tcase_add_test(tc, journal_fault_loses_record_not_block);
    tcase_add_test(tc, threadsafe_heap_concurrent_use);
    tcase_add_test(tc, concurrent_heaps_never_share_a_tag);
    suite_add_tcase(s, tc);
    return s;
}
