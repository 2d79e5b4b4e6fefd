/* check_linear.c -- linear allocators (include/hheap/linear.h): page pool, mark
 * stack and marks, stack vector, GEA stack / double-ended stack, frame
 * allocators, pool, scratch buffer; fault injection and a randomised
 * shadow-model test of the mark stack. */
#include "hheap/linear.h"

#include <pthread.h>
#include <string.h>

#include "../src/linear/linear_internal.h"
#include "test_util.h"

/* ---------------------------------------------------------------------------
   Helpers
--------------------------------------------------------------------------- */
static hh_pagepool_stats pool_base;   /* page pool stats at setup */

static hh_pagepool_stats pool_now(void) {
    hh_pagepool_stats st;
    ck_assert_int_eq(hh_pagepool_stats_get(&st), HH_OK);
    return st;
}

/* Nothing handed out by the page pool is still out since setup. */
static void assert_pool_back_to_base(void) {
    hh_pagepool_stats st = pool_now();
    ck_assert_uint_eq(st.pages_used, pool_base.pages_used);
    ck_assert_uint_eq(st.small_pages_used, pool_base.small_pages_used);
    ck_assert_uint_eq(st.oversize_count, pool_base.oversize_count);
    ck_assert_uint_eq(st.oversize_bytes, pool_base.oversize_bytes);
}

static void setup(void) {
    hh_test_capture_errors();
    hh_test_reset_captured();
    hh_clear_last_error();
    pool_base = pool_now();
}

static void teardown(void) {
    hh_test_fail_after(-1);
    hh_memstack_thread_release();
    assert_pool_back_to_base();
    hh_set_error_handler(NULL, NULL);
}

static hh_memstack *stack_new(uint32_t flags) {
    hh_memstack *ms = NULL;
    ck_assert_int_eq(hh_memstack_create(&(hh_memstack_desc){ .flags = flags, .name = "test" }, &ms), HH_OK);
    ck_assert_ptr_nonnull(ms);
    return ms;
}

static hh_memstack_info stack_info(const hh_memstack *ms) {
    hh_memstack_info info;
    ck_assert_int_eq(hh_memstack_info_get(ms, &info), HH_OK);
    ck_assert_uint_eq(info.reserved_bytes, info.used_bytes + info.wasted_bytes + info.free_bytes);
    return info;
}

static void *alloc_filled(hh_memstack *ms, size_t size, size_t align, uint64_t key) {
    void *p = hh_memstack_alloc(ms, size, align);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % (align ? align : 16), 0);
    hh_test_fill(p, size, key);
    return p;
}

/* ---------------------------------------------------------------------------
   Mark stack: basics and argument checks
--------------------------------------------------------------------------- */
START_TEST(memstack_alignment_up_to_4096) {
    hh_memstack *ms = stack_new(0);
    void *ps[13 * 3];
    size_t n = 0;
    for (size_t align = 1; align <= 4096; align *= 2)
        for (size_t size = 1; size <= 300; size += 149, n++) {
            ps[n] = alloc_filled(ms, size, align, n);
            ck_assert_uint_eq((uintptr_t)ps[n] % 8, 0);  /* block starts stay 8-byte aligned */
        }
    n = 0;
    for (size_t align = 1; align <= 4096; align *= 2)
        for (size_t size = 1; size <= 300; size += 149, n++) ck_assert_int_eq(hh_test_verify(ps[n], size, n), -1);
    void *huge_align = alloc_filled(ms, 10, 65536, 77);  /* beyond a page: an oversize chunk */
    ck_assert_int_eq(hh_test_verify(huge_align, 10, 77), -1);
    n++;
    void *d = hh_memstack_alloc(ms, 24, 0);  /* align 0: the default, 16 */
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq((uintptr_t)d % 16, 0);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    ck_assert_uint_eq(stack_info(ms).alloc_count, n + 1);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(memstack_bad_arguments_are_reported_once) {
    hh_memstack *ms = stack_new(0);
    ck_assert_ptr_null(hh_memstack_alloc(ms, 0, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_null(hh_memstack_alloc(ms, 16, 24));
    ck_assert_int_eq(hh_last_error(), HH_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "power of two"));
    ck_assert_uint_eq(hh_test_captured_count(), 2);
    ck_assert_ptr_null(hh_memstack_alloc(NULL, 16, 8));
    ck_assert_ptr_null(hh_memstack_alloc_zeroed(NULL, 16, 8));
    ck_assert_ptr_null(hh_memstack_alloc(ms, SIZE_MAX - 8, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_uint_eq(hh_test_captured_count(), 5);
    ck_assert_int_eq(hh_memstack_create(NULL, NULL), HH_E_INVALID_ARG);
    hh_memstack *bad = NULL;
    ck_assert_int_eq(hh_memstack_create(&(hh_memstack_desc){ .flags = 0x80 }, &bad), HH_E_INVALID_ARG);
    ck_assert_ptr_null(bad);
    ck_assert_int_eq(hh_mark_pop(NULL), HH_E_INVALID_ARG);
    hh_mark m;
    hh_mark_push(NULL, &m);  /* reported; the mark stays closed */
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mark_pop(&m), HH_E_MARK_ORDER);
    ck_assert_int_eq(hh_memstack_info_get(ms, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    ck_assert_uint_eq(stack_info(ms).chunk_count, 0);  /* failures took no chunk */
    hh_memstack_destroy(ms);
    hh_memstack_destroy(NULL);
}
END_TEST

/* ---------------------------------------------------------------------------
   Marks
--------------------------------------------------------------------------- */
START_TEST(marks_across_chunk_boundaries) {
    hh_memstack *ms = stack_new(0);
    void *keep = alloc_filled(ms, 100, 16, 1);
    hh_memstack_info before = stack_info(ms);
    ck_assert_uint_eq(before.chunk_count, 1);
    hh_mark m;
    hh_mark_push(ms, &m);
    void *first = alloc_filled(ms, 1000, 16, 2);
    for (unsigned i = 0; i < 400; i++) alloc_filled(ms, 1000, 16, 100 + i);  /* ~400 KB: several 64 KiB chunks */
    hh_memstack_info mid = stack_info(ms);
    ck_assert_uint_ge(mid.chunk_count, 6);
    ck_assert_uint_eq(mid.open_marks, 1);
    ck_assert_uint_ge(pool_now().pages_used, pool_base.pages_used + mid.chunk_count - 1);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    hh_memstack_info after = stack_info(ms);
    ck_assert_uint_eq(after.chunk_count, 1);
    ck_assert_uint_eq(after.used_bytes, before.used_bytes);
    ck_assert_uint_eq(after.reserved_bytes, before.reserved_bytes);
    ck_assert_uint_eq(after.open_marks, 0);
    ck_assert_uint_eq(pool_now().pages_used, pool_base.pages_used + 1);  /* one kept as the spare */
    ck_assert_int_eq(hh_memstack_trim(ms), HH_OK);  /* the spare goes; the live bottom chunk stays */
    ck_assert_uint_eq(pool_now().pages_used, pool_base.pages_used);
    ck_assert_uint_eq(stack_info(ms).chunk_count, 1);
    ck_assert_int_eq(hh_test_verify(keep, 100, 1), -1);
    /* the top was restored exactly: the same request lands at the same address */
    ck_assert_ptr_eq(hh_memstack_alloc(ms, 1000, 16), first);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(marks_nest_and_keep_outer_blocks) {
    enum { DEPTH = 64 };
    hh_memstack *ms = stack_new(0);
    hh_mark marks[DEPTH];
    void *blocks[DEPTH];
    size_t sizes[DEPTH];
    hh_rng r = hh_rng_make(hh_test_seed(7));
    for (unsigned d = 0; d < DEPTH; d++) {
        hh_mark_push(ms, &marks[d]);
        sizes[d] = 1 + hh_rng_below(&r, 9000);
        blocks[d] = alloc_filled(ms, sizes[d], 8, d);
        ck_assert_uint_eq(stack_info(ms).open_marks, d + 1);
    }
    for (unsigned d = DEPTH; d-- > 0;) {
        ck_assert_int_eq(hh_mark_pop(&marks[d]), HH_OK);
        for (unsigned e = 0; e < d; e++) ck_assert_int_eq(hh_test_verify(blocks[e], sizes[e], e), -1);
        ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    }
    ck_assert_uint_eq(stack_info(ms).chunk_count, 1);  /* the bottom chunk stays, empty */
    ck_assert_uint_eq(stack_info(ms).used_bytes, 0);
    ck_assert_uint_gt(stack_info(ms).spare_bytes, 0);
    ck_assert_int_eq(hh_memstack_trim(ms), HH_OK);  /* now both go back */
    ck_assert_uint_eq(stack_info(ms).chunk_count, 0);
    ck_assert_uint_eq(stack_info(ms).spare_bytes, 0);
    assert_pool_back_to_base();
    ck_assert_int_eq(hh_memstack_trim(NULL), HH_E_INVALID_ARG);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(mark_pop_out_of_order_changes_nothing) {
    hh_memstack *ms = stack_new(0);
    hh_mark a, b;
    hh_mark_push(ms, &a);
    void *pa = alloc_filled(ms, 5000, 16, 1);
    hh_mark_push(ms, &b);
    void *pb = alloc_filled(ms, 70000, 16, 2);  /* b owns a new chunk */
    hh_memstack_info before = stack_info(ms);
    ck_assert_int_eq(hh_mark_pop(&a), HH_E_MARK_ORDER);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_MARK_ORDER);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "LIFO"));
    hh_memstack_info after = stack_info(ms);
    ck_assert_uint_eq(before.chunk_count, after.chunk_count);
    ck_assert_uint_eq(before.open_marks, after.open_marks);
    ck_assert_uint_eq(before.used_bytes, after.used_bytes);
    ck_assert_uint_eq(before.reserved_bytes, after.reserved_bytes);
    ck_assert_uint_eq(before.free_bytes, after.free_bytes);
    ck_assert_int_eq(hh_test_verify(pa, 5000, 1), -1);
    ck_assert_int_eq(hh_test_verify(pb, 70000, 2), -1);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&b), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&b), HH_E_MARK_ORDER);  /* second pop fails */
    ck_assert_int_eq(hh_test_verify(pa, 5000, 1), -1);
    ck_assert_int_eq(hh_mark_pop(&a), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&a), HH_E_MARK_ORDER);
    ck_assert_uint_eq(hh_test_captured_count(), 3);
    ck_assert_uint_eq(stack_info(ms).chunk_count, 1);  /* the bottom chunk stays, empty */
    ck_assert_uint_eq(stack_info(ms).used_bytes, 0);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(enforce_marks_refuses_unmarked_allocation) {
    hh_memstack *ms = stack_new(HH_MEMSTACK_ENFORCE_MARKS);
    ck_assert_ptr_null(hh_memstack_alloc(ms, 16, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MARK);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "enforces marks"));
    {
        HH_MARK_SCOPE(m, ms);
        ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 16, 8));
        ck_assert_ptr_nonnull(hh_memstack_alloc_zeroed(ms, 100000, 64));  /* oversize path too */
    }
    ck_assert_ptr_null(hh_memstack_alloc_ones(ms, 16, 8));
    ck_assert_int_eq(hh_last_error(), HH_E_NO_MARK);
    ck_assert_uint_eq(hh_test_captured_count(), 2);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(mark_scope_pops_at_scope_exit) {
    hh_memstack *ms = stack_new(0);
    alloc_filled(ms, 64, 16, 1);
    size_t used0 = stack_info(ms).used_bytes;
    for (int i = 0; i < 3; i++) {
        HH_MARK_SCOPE(outer, ms);
        alloc_filled(ms, 3000, 16, 2);
        {
            HH_MARK_SCOPE(inner, ms);
            alloc_filled(ms, 200000, 16, 3);
            ck_assert_uint_eq(stack_info(ms).open_marks, 2);
        }
        ck_assert_uint_eq(stack_info(ms).open_marks, 1);
        {
            HH_MARK_SCOPE(popped_by_hand, ms);
            ck_assert_int_eq(hh_mark_pop(&popped_by_hand), HH_OK);  /* scope end then does nothing */
        }
    }
    ck_assert_uint_eq(stack_info(ms).open_marks, 0);
    ck_assert_uint_eq(stack_info(ms).used_bytes, used0);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(destroy_with_open_marks_is_reported) {
    hh_memstack *ms = stack_new(0);
    hh_mark a, b;
    hh_mark_push(ms, &a);
    alloc_filled(ms, 100, 16, 1);
    hh_mark_push(ms, &b);
    hh_memstack_destroy(ms);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_MARK_ORDER);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "2 open marks"));
    ck_assert_uint_eq(hh_test_captured_count(), 1);
}
END_TEST

/* ---------------------------------------------------------------------------
   Memory-checker view (only meaningful under memcheck or in an ASan build;
   `make check` runs this suite under memcheck)
--------------------------------------------------------------------------- */

START_TEST(popped_memory_is_no_access_and_reuse_undefined) {
    hh_memstack *ms = stack_new(0);
    alloc_filled(ms, 40, 16, 1);
    hh_mark m;
    hh_mark_push(ms, &m);
    uint8_t *p = alloc_filled(ms, 64, 16, 2);
    uint8_t *q = alloc_filled(ms, 100000, 16, 3);  /* in an oversize chunk, unmapped at pop */
    (void)q;
    int live = hh_test_checker_state(p, 64);
    ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    int popped = hh_test_checker_state(p, 64);
    uint8_t *again = hh_memstack_alloc(ms, 64, 16);
    ck_assert_ptr_eq(again, p);
    int reused = hh_test_checker_state(again, 64);
    if (live >= 0) {
        ck_assert_int_eq(live, 0);
        ck_assert_int_eq(popped, 2);
#if HH_TRACK_VALGRIND
        ck_assert_int_eq(reused, 1);  /* the old pattern is there, but memcheck calls it undefined */
#else
        ck_assert_int_eq(reused, 0);
#endif
    }
    hh_pool *pool = NULL;
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 48, .capacity = 4 }, &pool), HH_OK);
    uint8_t *e = hh_pool_alloc(pool);
    memset(e, 1, 48);
    ck_assert_int_eq(hh_pool_free(pool, e), HH_OK);
    if (live >= 0) ck_assert_int_eq(hh_test_checker_state(e + 8, 40), 2);  /* freed element (past its link) */
    hh_pool_destroy(pool);
    hh_scratch *sc = NULL;
    ck_assert_int_eq(hh_scratch_create(NULL, &sc), HH_OK);
    uint8_t *b = hh_scratch_alloc(sc, 128, 16);
    memset(b, 1, 128);
    hh_scratch_reset(sc);
    if (live >= 0) ck_assert_int_eq(hh_test_checker_state(b, 128), 2);
    hh_scratch_destroy(sc);
    hh_memstack_destroy(ms);
}
END_TEST

/* ---------------------------------------------------------------------------
   Oversize, fills, walker
--------------------------------------------------------------------------- */
static void count_kinds(const hh_memstack_chunk_info *c, void *user) {
    unsigned *k = user;
    k[c->kind]++;
    k[3] += c->index == k[4];  /* indices arrive oldest first, 0, 1, 2 ... */
    k[4]++;
}

START_TEST(oversize_gets_its_own_chunk) {
    hh_memstack *ms = stack_new(0);
    hh_mark m;
    hh_mark_push(ms, &m);
    void *small = alloc_filled(ms, 100, 16, 1);
    void *big = alloc_filled(ms, 3u << 20, 4096, 2);
    hh_pagepool_stats st = pool_now();
    ck_assert_uint_eq(st.oversize_count, pool_base.oversize_count + 1);
    ck_assert_uint_ge(st.oversize_bytes, pool_base.oversize_bytes + (3u << 20));
    void *after = alloc_filled(ms, 70000, 16, 3);  /* does not fit the oversize tail: a fresh chunk */
    unsigned kinds[5] = { 0 };
    ck_assert_int_eq(hh_memstack_walk(ms, count_kinds, kinds), HH_OK);
    ck_assert_uint_eq(kinds[HH_LCHUNK_SMALL], 1);
    ck_assert_uint_eq(kinds[HH_LCHUNK_OVERSIZE], 2);  /* 70000 > a page payload: oversize too */
    ck_assert_uint_eq(kinds[3], 3);
    ck_assert_int_eq(hh_test_verify(small, 100, 1), -1);
    ck_assert_int_eq(hh_test_verify(big, 3u << 20, 2), -1);
    ck_assert_int_eq(hh_test_verify(after, 70000, 3), -1);
    ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    ck_assert_uint_eq(pool_now().oversize_count, pool_base.oversize_count);  /* oversize never cached */
    hh_memstack_destroy(ms);
    ms = stack_new(0);  /* an oversize first chunk is not kept as the bottom chunk */
    hh_mark_push(ms, &m);
    alloc_filled(ms, 1u << 20, 16, 4);
    ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    ck_assert_uint_eq(stack_info(ms).chunk_count, 0);
    ck_assert_uint_eq(pool_now().oversize_count, pool_base.oversize_count);
    hh_memstack_destroy(ms);
}
END_TEST

START_TEST(zeroed_and_ones_after_dirty_reuse) {
    hh_memstack *ms = stack_new(0);
    for (int round = 0; round < 3; round++) {
        hh_mark m;
        hh_mark_push(ms, &m);
        uint8_t *d = hh_memstack_alloc(ms, 20000, 64);
        ck_assert_ptr_nonnull(d);
        memset(d, 0xAB, 20000);
        ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
        hh_mark_push(ms, &m);
        uint8_t *z = hh_memstack_alloc_zeroed(ms, 20000, 64);
        ck_assert_ptr_eq(z, d);  /* really the dirty bytes */
        for (size_t i = 0; i < 20000; i++) ck_assert_uint_eq(z[i], 0);
        memset(z, 0x5C, 20000);
        ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
        hh_mark_push(ms, &m);
        uint8_t *o = hh_memstack_alloc_ones(ms, 20000, 64);
        ck_assert_ptr_eq(o, d);
        for (size_t i = 0; i < 20000; i++) ck_assert_uint_eq(o[i], 0xFF);
        ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    }
    hh_memstack_destroy(ms);
}
END_TEST

typedef struct walk_log { hh_memstack_chunk_info c[16]; unsigned n; hh_memstack_mark_info m[8]; unsigned nm; } walk_log;
static void log_chunk(const hh_memstack_chunk_info *c, void *user) {
    walk_log *w = user;
    if (w->n < 16) w->c[w->n++] = *c;
}
static void log_mark(const hh_memstack_mark_info *m, void *user) {
    walk_log *w = user;
    if (w->nm < 8) w->m[w->nm++] = *m;
}

START_TEST(walker_reports_chunks_top_and_marks) {
    hh_memstack *ms = stack_new(0);
    hh_mark m1, m2;
    hh_mark_push(ms, &m1);  /* empty stack */
    alloc_filled(ms, 1000, 16, 1);
    hh_mark_push(ms, &m2);
    alloc_filled(ms, 60000, 16, 2);
    alloc_filled(ms, 500, 16, 3);
    walk_log w = { .n = 0 };
    ck_assert_int_eq(hh_memstack_walk(ms, log_chunk, &w), HH_OK);
    ck_assert_int_eq(hh_memstack_walk_marks(ms, log_mark, &w), HH_OK);
    ck_assert_uint_eq(w.n, 2);
    ck_assert_int_eq(w.c[0].kind, HH_LCHUNK_SMALL);
    ck_assert_int_eq(w.c[1].kind, HH_LCHUNK_PAGE);
    ck_assert(!w.c[0].is_top && w.c[1].is_top);
    ck_assert_uint_eq(w.c[0].used_bytes, 1000);
    ck_assert_uint_ge(w.c[1].used_bytes, 60500);
    ck_assert_uint_eq(w.c[1].size, HH_PAGEPOOL_PAGE_SIZE);
    hh_memstack_info info = stack_info(ms);
    ck_assert_uint_eq(info.used_bytes, w.c[0].used_bytes + w.c[1].used_bytes);
    ck_assert_uint_eq(info.reserved_bytes, w.c[0].size + w.c[1].size);
    ck_assert_uint_eq(info.free_bytes, w.c[1].size - w.c[1].header_bytes - w.c[1].used_bytes);
    ck_assert_uint_eq(w.nm, 2);
    ck_assert_uint_eq(w.m[0].depth, 2);  /* innermost first */
    ck_assert_uint_eq(w.m[0].chunk_index, 0);
    ck_assert_uint_eq(w.m[0].offset, w.c[0].header_bytes + 1000);
    ck_assert_uint_eq(w.m[1].depth, 1);
    ck_assert_uint_eq(w.m[1].chunk_index, UINT32_MAX);
    ck_assert_str_eq(info.name, "test");
    ck_assert_int_eq(hh_memstack_walk(NULL, log_chunk, &w), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mark_pop(&m2), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&m1), HH_OK);
    hh_memstack_destroy(ms);
}
END_TEST

/* ---------------------------------------------------------------------------
   Thread-local stacks
--------------------------------------------------------------------------- */
enum { THREADS = 4 };
static pthread_barrier_t thread_barrier;

static void *thread_body(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg;
    hh_memstack *ms = hh_memstack_thread();
    if (ms == NULL || hh_memstack_thread() != ms) return NULL;
    hh_rng r = hh_rng_make(id + 1);
    bool ok = true;
    unsigned rounds = hh_test_scaled(200, 10);
    for (unsigned round = 0; round < rounds && ok; round++) {
        HH_MARK_SCOPE(m, ms);
        void *p[16];
        size_t s[16];
        for (unsigned i = 0; i < 16; i++) {
            s[i] = 1 + hh_rng_below(&r, 20000);
            p[i] = hh_memstack_alloc(ms, s[i], 16);
            if (p[i] == NULL) return NULL;
            hh_test_fill(p[i], s[i], id * 1000 + i);
        }
        for (unsigned i = 0; i < 16; i++) ok = ok && hh_test_verify(p[i], s[i], id * 1000 + i) == -1;
    }
    pthread_barrier_wait(&thread_barrier);  /* all stacks alive at once */
    return ok ? ms : NULL;                  /* freed by the thread-exit destructor */
}

START_TEST(thread_stacks_are_private_and_freed_at_exit) {
    pthread_t t[THREADS];
    void *res[THREADS];
    ck_assert_int_eq(pthread_barrier_init(&thread_barrier, NULL, THREADS), 0);
    for (uintptr_t i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, thread_body, (void *)i), 0);
    for (int i = 0; i < 50; i++) {  /* the shared page pool is trimmed and read while the threads run */
        hh_pagepool_trim(i % 2 ? 0 : HH_PAGEPOOL_PAGE_SIZE);
        hh_pagepool_stats st = pool_now();
        ck_assert_uint_le(st.cached_bytes, st.cache_limit_bytes);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], &res[i]);
    pthread_barrier_destroy(&thread_barrier);
    for (int i = 0; i < THREADS; i++) {
        ck_assert_ptr_nonnull(res[i]);
        for (int j = 0; j < i; j++) ck_assert_ptr_ne(res[i], res[j]);
    }
    assert_pool_back_to_base();  /* every thread's chunks came back at its exit */
    ck_assert_uint_eq(hh_test_captured_count(), 0);
}
END_TEST

START_TEST(thread_stack_of_main_thread) {
    hh_memstack *ms = hh_memstack_thread();
    ck_assert_ptr_nonnull(ms);
    ck_assert_ptr_eq(hh_memstack_thread(), ms);
    ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 100, 16));
    hh_memstack_destroy(ms);  /* refused: it belongs to the thread */
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    hh_memstack_thread_release();
    ck_assert_uint_eq(pool_now().small_pages_used, pool_base.small_pages_used);
    hh_memstack *again = hh_memstack_thread();
    ck_assert_ptr_nonnull(again);
    ck_assert_uint_eq(stack_info(again).chunk_count, 0);
}
END_TEST

/* ---------------------------------------------------------------------------
   Stack vector
--------------------------------------------------------------------------- */
START_TEST(stackvec_grows_in_place_when_on_top) {
    hh_memstack *ms = stack_new(0);
    HH_MARK_SCOPE(m, ms);
    hh_stackvec v;
    ck_assert_int_eq(hh_stackvec_init(&v, ms, sizeof(uint32_t), 0), HH_OK);
    unsigned n = 12000;  /* 48 KB: crosses from the small first chunk into a page */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t *e = hh_stackvec_push(&v);
        ck_assert_ptr_nonnull(e);
        *e = i * 2654435761u;
    }
    ck_assert_uint_eq(v.count, n);
    ck_assert_uint_le(v.grow_copy, 2);   /* only when the chunk ran out */
    ck_assert_uint_ge(v.grow_in_place, 5);
    for (uint32_t i = 0; i < n; i++) ck_assert_uint_eq(*(uint32_t *)hh_stackvec_at(&v, i), i * 2654435761u);
    ck_assert_ptr_null(hh_stackvec_at(&v, n));

    /* an allocation on top forces a copy; so does a mark pushed after the buffer */
    uint64_t copies = v.grow_copy;
    hh_stackvec_reserve(&v, v.capacity);
    alloc_filled(ms, 8, 8, 9);
    while (v.count < v.capacity) hh_stackvec_push(&v);
    ck_assert_ptr_nonnull(hh_stackvec_push(&v));
    ck_assert_uint_eq(v.grow_copy, copies + 1);
    hh_mark inner;
    hh_mark_push(ms, &inner);
    while (v.count < v.capacity) hh_stackvec_push(&v);
    ck_assert_ptr_nonnull(hh_stackvec_push(&v));
    ck_assert_uint_eq(v.grow_copy, copies + 2);
    uint32_t more[3] = { 1, 2, 3 };
    ck_assert_int_eq(hh_stackvec_append(&v, more, 3), HH_OK);
    for (uint32_t i = 0; i < n; i++) ck_assert_uint_eq(*(uint32_t *)hh_stackvec_at(&v, i), i * 2654435761u);
    ck_assert_uint_eq(*(uint32_t *)hh_stackvec_at(&v, v.count - 1), 3);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&inner), HH_OK);  /* the copied buffer belonged to inner: v is dead now */
    ck_assert_int_eq(hh_stackvec_init(&v, ms, 0, 8), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    hh_mark_scope_end(&m);
    hh_memstack_destroy(ms);
}
END_TEST

/* ---------------------------------------------------------------------------
   Fault injection: every page acquisition fails once, in turn
--------------------------------------------------------------------------- */
START_TEST(memstack_fault_injection) {
    static const size_t sizes[] = { 100, 3000, 40000, 200000, 60000, 64, 70000 };
    enum { N = sizeof sizes / sizeof sizes[0] };
    bool done = false;
    long n;
    for (n = 0; !done && n < 200; n++) {
        hh_test_reset_captured();
        hh_test_fail_after(n);
        hh_memstack *ms = NULL;
        hh_status s = hh_memstack_create(NULL, &ms);
        if (s != HH_OK) {
            ck_assert_int_eq(s, HH_E_NO_MEMORY);
            ck_assert_ptr_null(ms);
            continue;
        }
        void *p[N];
        hh_mark m;
        unsigned got = 0;
        for (; got < N; got++) {
            if (got == 3) hh_mark_push(ms, &m);
            p[got] = hh_memstack_alloc(ms, sizes[got], 16);
            if (p[got] == NULL) break;
            hh_test_fill(p[got], sizes[got], got);
        }
        hh_test_fail_after(-1);
        if (got < N) {
            ck_assert_int_eq(hh_last_error(), HH_E_NO_MEMORY);
            ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
            ck_assert_uint_eq(hh_test_captured_count(), 1);
        } else {
            done = true;
        }
        for (unsigned i = 0; i < got; i++) ck_assert_int_eq(hh_test_verify(p[i], sizes[i], i), -1);
        ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
        if (got >= 3) ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
        /* the stack still works after the failure */
        ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 128, 16));
        hh_memstack_destroy(ms);
        assert_pool_back_to_base();
    }
    ck_assert(done);
    ck_assert_int_ge(n, 5);  /* create + at least 4 chunk acquisitions were failed in turn */
}
END_TEST

/* One scenario per allocator kind; returns its status. Everything it made is
   destroyed before it returns. */
static hh_status other_scenario(int kind) {
    hh_status s = HH_OK;
    /* create, a failed create leaves *out NULL, destroy (NULL is a no-op) */
#define CREATE_DESTROY(T, desc)                      \
    {                                                \
        T *o = NULL;                                 \
        s = T##_create(desc, &o);                    \
        if (s != HH_OK) ck_assert_ptr_null(o);       \
        T##_destroy(o);                              \
        break;                                       \
    }
    switch (kind) {
    case 0: CREATE_DESTROY(hh_stack, &(hh_stack_desc){ .capacity = 8192 })
    case 1: CREATE_DESTROY(hh_dstack, &(hh_stack_desc){ .capacity = 8192 })
    case 2: CREATE_DESTROY(hh_frame, &(hh_frame_desc){ .capacity = 8192 })
    case 3: CREATE_DESTROY(hh_dframe, &(hh_frame_desc){ .capacity = 8192 })
    case 4: CREATE_DESTROY(hh_pool, (&(hh_pool_desc){ .elem_size = 32, .capacity = 100 }))
#undef CREATE_DESTROY
    default: {
        hh_scratch *o = NULL;
        s = hh_scratch_create(NULL, &o);
        if (s != HH_OK) {
            ck_assert_ptr_null(o);
            break;
        }
        void *a = hh_scratch_alloc(o, 100, 16);
        if (a == NULL) {
            s = hh_last_error();
        } else {
            hh_test_fill(a, 100, 42);
            if (hh_scratch_alloc(o, 100000, 16) == NULL) s = hh_last_error();  /* needs a second buffer */
            ck_assert_int_eq(hh_test_verify(a, 100, 42), -1);                   /* intact either way */
        }
        hh_scratch_destroy(o);
        break;
    }
    }
    return s;
}

/* Every other allocator fails cleanly at each seam call of its scenario. */
START_TEST(other_allocators_fault_injection) {
    for (int kind = 0; kind < 6; kind++) {
        long n = 0;
        for (;; n++) {
            ck_assert_int_lt(n, 20);
            hh_test_reset_captured();
            hh_test_fail_after(n);
            hh_status s = other_scenario(kind);
            bool fired = hh_test_fail_count() > 0;
            hh_test_fail_after(-1);
            if (s == HH_OK) {
                ck_assert(!fired);
                break;
            }
            ck_assert_int_eq(s, HH_E_NO_MEMORY);
            ck_assert_uint_eq(hh_test_captured_count(), 1);
        }
        ck_assert_int_ge(n, kind == 3 || kind == 5 ? 3 : 2);  /* object + buffer(s) each failed in turn */
    }
}
END_TEST

/* ---------------------------------------------------------------------------
   Randomised shadow model of the mark stack
--------------------------------------------------------------------------- */
typedef struct shadow_block { uint8_t *p; size_t size; uint64_t key; unsigned depth; } shadow_block;

static void shadow_verify_all(const shadow_block *b, unsigned n) {
    for (unsigned i = 0; i < n; i++) ck_assert_int_eq(hh_test_verify(b[i].p, b[i].size, b[i].key), -1);
}

START_TEST(memstack_random_shadow_model) {
    enum { MAX_BLOCKS = 4096, MAX_DEPTH = 24 };
    static shadow_block blocks[MAX_BLOCKS];
    hh_mark marks[MAX_DEPTH];
    unsigned nb = 0, depth = 0;
    hh_rng r = hh_rng_make(hh_test_seed(0x5eed));
    hh_memstack *ms = stack_new(0);
    unsigned ops = hh_test_scaled(20000, 1500);
    for (unsigned op = 0; op < ops; op++) {
        unsigned what = hh_rng_below(&r, 100);
        if (what < 8 && depth < MAX_DEPTH) {
            hh_mark_push(ms, &marks[depth++]);
        } else if (what < 15 && depth > 0) {
            if (depth >= 2 && hh_rng_below(&r, 4) == 0) {  /* an out-of-order pop changes nothing */
                ck_assert_int_eq(hh_mark_pop(&marks[hh_rng_below(&r, depth - 1)]), HH_E_MARK_ORDER);
            }
            ck_assert_int_eq(hh_mark_pop(&marks[--depth]), HH_OK);
            while (nb > 0 && blocks[nb - 1].depth > depth) nb--;
            shadow_verify_all(blocks, nb);
        } else if (nb < MAX_BLOCKS) {
            size_t size = hh_rng_below(&r, 50) == 0 ? 60000 + hh_rng_below(&r, 150000) : 1 + hh_rng_below(&r, 2000);
            size_t align = (size_t)1 << hh_rng_below(&r, 13);
            unsigned fill = hh_rng_below(&r, 3);
            uint8_t *p = fill == 0 ? hh_memstack_alloc(ms, size, align)
                         : fill == 1 ? hh_memstack_alloc_zeroed(ms, size, align)
                                     : hh_memstack_alloc_ones(ms, size, align);
            ck_assert_ptr_nonnull(p);
            ck_assert_uint_eq((uintptr_t)p % align, 0);
            if (fill != 0) ck_assert_uint_eq(p[size - 1], fill == 1 ? 0 : 0xFF);
            blocks[nb] = (shadow_block){ p, size, hh_rng_next(&r), depth };
            hh_test_fill(p, size, blocks[nb].key);
            nb++;
        }
        if (op % 64 == 0) {
            ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
            ck_assert_uint_eq(stack_info(ms).open_marks, depth);
            shadow_verify_all(blocks, nb);
        }
    }
    shadow_verify_all(blocks, nb);
    while (depth > 0) ck_assert_int_eq(hh_mark_pop(&marks[--depth]), HH_OK);
    ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
    hh_memstack_destroy(ms);
}
END_TEST

/* ---------------------------------------------------------------------------
   GEA stack, double-ended stack, frames
--------------------------------------------------------------------------- */
START_TEST(stack_markers_and_exhaustion) {
    hh_stack *s = NULL;
    ck_assert_int_eq(hh_stack_create(&(hh_stack_desc){ .capacity = 4096 }, &s), HH_OK);
    void *a = hh_stack_alloc(s, 100, 16);
    ck_assert_ptr_nonnull(a);
    hh_test_fill(a, 100, 1);
    hh_stack_marker m = hh_stack_get_marker(s);
    ck_assert_uint_eq(m.offset, 100);
    void *b = hh_stack_alloc(s, 1000, 256);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq((uintptr_t)b % 256, 0);
    ck_assert_ptr_null(hh_stack_alloc(s, 4000, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    size_t used = hh_stack_used(s);
    ck_assert_int_eq(hh_stack_free_to_marker(s, m), HH_OK);
    ck_assert_uint_eq(hh_stack_used(s), 100);
    ck_assert_int_eq(hh_stack_free_to_marker(s, (hh_stack_marker){ used }), HH_E_INVALID_ARG);  /* stale */
    ck_assert_int_eq(hh_test_verify(a, 100, 1), -1);
    ck_assert_ptr_eq(hh_stack_alloc(s, 1000, 256), b);
    hh_stack_clear(s);
    ck_assert_uint_eq(hh_stack_used(s), 0);
    ck_assert_ptr_nonnull(hh_stack_alloc(s, 4096, 1));  /* the whole buffer */
    ck_assert_ptr_null(hh_stack_alloc(s, 1, 1));
    ck_assert_ptr_null(hh_stack_alloc(s, 0, 1));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    hh_stack_destroy(s);

    static uint64_t buf[128];  /* caller-owned memory */
    ck_assert_int_eq(hh_stack_create(&(hh_stack_desc){ .capacity = sizeof buf, .memory = buf }, &s), HH_OK);
    uint8_t *c = hh_stack_alloc(s, 64, 8);
    ck_assert_ptr_eq(c, (uint8_t *)buf);
    hh_stack_destroy(s);
    buf[0] = 1;  /* the caller's buffer is plain memory again */
    ck_assert_int_eq(hh_stack_create(&(hh_stack_desc){ .capacity = 0 }, &s), HH_E_INVALID_ARG);
}
END_TEST

START_TEST(dstack_ends_collide_cleanly) {
    hh_dstack *ds = NULL;
    ck_assert_int_eq(hh_dstack_create(&(hh_stack_desc){ .capacity = 10000 }, &ds), HH_OK);
    uint8_t *lo[64], *hi[64];
    unsigned nl = 0, nh = 0;
    for (;;) {
        uint8_t *l = hh_dstack_alloc(ds, HH_DSTACK_LOW, 300, 8);
        if (l == NULL) break;
        hh_test_fill(l, 300, 100 + nl);
        lo[nl++] = l;
        uint8_t *h = hh_dstack_alloc(ds, HH_DSTACK_HIGH, 200, 64);
        if (h == NULL) break;
        ck_assert_uint_eq((uintptr_t)h % 64, 0);
        hh_test_fill(h, 200, 200 + nh);
        hi[nh++] = h;
    }
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "cross"));
    ck_assert_uint_ge(nl + nh, 30);
    ck_assert_uint_le(hh_dstack_used(ds, HH_DSTACK_LOW) + hh_dstack_used(ds, HH_DSTACK_HIGH), 10000);
    size_t free_bytes = hh_dstack_free_bytes(ds);
    ck_assert_ptr_null(hh_dstack_alloc(ds, HH_DSTACK_HIGH, free_bytes + 1, 8));  /* fails, changes nothing */
    ck_assert_uint_eq(hh_dstack_free_bytes(ds), free_bytes);
    for (unsigned i = 0; i < nl; i++) ck_assert_int_eq(hh_test_verify(lo[i], 300, 100 + i), -1);
    for (unsigned i = 0; i < nh; i++) ck_assert_int_eq(hh_test_verify(hi[i], 200, 200 + i), -1);
    hh_stack_marker mh = { hh_dstack_used(ds, HH_DSTACK_HIGH) - 200 };
    ck_assert_int_eq(hh_dstack_free_to_marker(ds, HH_DSTACK_HIGH, mh), HH_OK);
    ck_assert_ptr_nonnull(hh_dstack_alloc(ds, HH_DSTACK_LOW, 150, 8));  /* room the high end gave back */
    hh_stack_marker ml = hh_dstack_get_marker(ds, HH_DSTACK_LOW);
    ck_assert_int_eq(hh_dstack_free_to_marker(ds, HH_DSTACK_LOW, (hh_stack_marker){ ml.offset + 1 }), HH_E_INVALID_ARG);
    hh_dstack_clear(ds, HH_DSTACK_LOW);
    ck_assert_uint_eq(hh_dstack_used(ds, HH_DSTACK_LOW), 0);
    for (unsigned i = 0; i + 1 < nh; i++) ck_assert_int_eq(hh_test_verify(hi[i], 200, 200 + i), -1);
    hh_dstack_clear(ds, HH_DSTACK_HIGH);
    ck_assert_uint_eq(hh_dstack_free_bytes(ds), 10000);
    ck_assert_ptr_nonnull(hh_dstack_alloc(ds, HH_DSTACK_HIGH, 10000, 1));
    ck_assert_ptr_null(hh_dstack_alloc(ds, (hh_dstack_end)7, 8, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    hh_dstack_destroy(ds);
}
END_TEST

START_TEST(frame_allocator_lifetimes) {
    hh_frame *f = NULL;
    ck_assert_int_eq(hh_frame_create(&(hh_frame_desc){ .capacity = 65536 }, &f), HH_OK);
    void *first = NULL;
    for (int frame = 0; frame < 5; frame++) {
        void *a = hh_frame_alloc(f, 1000, 32);
        ck_assert_ptr_nonnull(a);
        if (frame == 0) first = a;
        ck_assert_ptr_eq(a, first);  /* reset gives the whole buffer back */
        hh_test_fill(a, 1000, (uint64_t)frame);
        ck_assert_ptr_nonnull(hh_frame_alloc(f, 20000, 16));
        ck_assert_int_eq(hh_test_verify(a, 1000, (uint64_t)frame), -1);
        hh_frame_reset(f);
        ck_assert_uint_eq(hh_frame_used(f), 0);
    }
    ck_assert_ptr_null(hh_frame_alloc(f, 65537, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    hh_frame_destroy(f);

    hh_dframe *df = NULL;
    ck_assert_int_eq(hh_dframe_create(&(hh_frame_desc){ .capacity = 8192 }, &df), HH_OK);
    uint8_t *prev = NULL;
    for (uint64_t frame = 0; frame < 6; frame++) {
        ck_assert_uint_eq(hh_dframe_frame(df), frame);
        uint8_t *cur = hh_dframe_alloc(df, 4000, 16);
        ck_assert_ptr_nonnull(cur);
        hh_test_fill(cur, 4000, frame);
        if (prev != NULL) {
            ck_assert_int_eq(hh_test_verify(prev, 4000, frame - 1), -1);  /* frame i-1 still valid in frame i */
            ck_assert(cur + 4000 <= prev || prev + 4000 <= cur);
        }
        prev = cur;
        hh_dframe_swap(df);
        ck_assert_uint_eq(hh_dframe_used(df), 0);
    }
    hh_dframe_destroy(df);
    ck_assert_int_eq(hh_dframe_create(&(hh_frame_desc){ .capacity = 0 }, &df), HH_E_INVALID_ARG);
}
END_TEST

/* ---------------------------------------------------------------------------
   Pool
--------------------------------------------------------------------------- */
START_TEST(pool_exhaustion_reuse_and_bad_frees) {
    hh_pool *p = NULL;
    enum { CAP = 100 };
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 24, .capacity = CAP }, &p), HH_OK);
    void *e[CAP];
    for (unsigned i = 0; i < CAP; i++) {
        e[i] = hh_pool_alloc(p);
        ck_assert_ptr_nonnull(e[i]);
        ck_assert_uint_eq((uintptr_t)e[i] % 8, 0);
        hh_test_fill(e[i], 24, i);
    }
    ck_assert_ptr_null(hh_pool_alloc(p));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    for (unsigned i = 0; i < CAP; i++) ck_assert_int_eq(hh_test_verify(e[i], 24, i), -1);
    ck_assert_int_eq(hh_pool_free(p, e[10]), HH_OK);
    ck_assert_int_eq(hh_pool_free(p, e[20]), HH_OK);
    ck_assert_int_eq(hh_pool_free(p, e[20]), HH_E_DOUBLE_FREE);
    ck_assert_int_eq(hh_pool_free(p, (uint8_t *)e[30] + 4), HH_E_FOREIGN_POINTER);
    int local;
    ck_assert_int_eq(hh_pool_free(p, &local), HH_E_FOREIGN_POINTER);
    ck_assert_int_eq(hh_pool_free(p, NULL), HH_OK);
    ck_assert_ptr_eq(hh_pool_alloc(p), e[20]);  /* LIFO reuse through the in-element free list */
    ck_assert_ptr_eq(hh_pool_alloc(p), e[10]);
    ck_assert_ptr_null(hh_pool_alloc(p));
    for (unsigned i = 0; i < CAP; i++)
        if (i != 10 && i != 20) ck_assert_int_eq(hh_test_verify(e[i], 24, i), -1);
    hh_pool_info info;
    ck_assert_int_eq(hh_pool_info_get(p, &info), HH_OK);
    ck_assert_uint_eq(info.live_count, CAP);
    ck_assert(!info.index16);
    for (unsigned i = 0; i < CAP; i++) ck_assert_int_eq(hh_pool_free(p, e[i]), HH_OK);
    ck_assert_int_eq(hh_pool_info_get(p, &info), HH_OK);
    ck_assert_uint_eq(info.live_count, 0);
    ck_assert_uint_eq(info.peak_count, CAP);
    hh_pool_destroy(p);
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 0, .capacity = 4 }, &p), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 8, .capacity = 4, .elem_align = 3 }, &p),
                     HH_E_INVALID_ARG);
}
END_TEST

START_TEST(pool_index16_variant) {
    hh_pool *p = NULL;
    enum { CAP = 65535 };
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 2, .capacity = CAP }, &p), HH_OK);
    hh_pool_info info;
    ck_assert_int_eq(hh_pool_info_get(p, &info), HH_OK);
    ck_assert(info.index16);
    ck_assert_uint_eq(info.elem_stride, 2);
    static uint16_t *e[CAP];
    for (int round = 0; round < 2; round++) {
        for (unsigned i = 0; i < CAP; i++) {
            e[i] = hh_pool_alloc(p);
            ck_assert_ptr_nonnull(e[i]);
            *e[i] = (uint16_t)(i ^ 0x5A5A);
        }
        ck_assert_ptr_null(hh_pool_alloc(p));
        for (unsigned i = 0; i < CAP; i++) ck_assert_uint_eq(*e[i], (uint16_t)(i ^ 0x5A5A));
        for (unsigned i = 0; i < CAP; i += 2) ck_assert_int_eq(hh_pool_free(p, e[i]), HH_OK);
        for (unsigned i = 1; i < CAP; i += 2) ck_assert_int_eq(hh_pool_free(p, e[i]), HH_OK);
    }
    hh_pool_destroy(p);
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 16, .capacity = 70000, .flags = HH_POOL_INDEX16 }, &p),
                     HH_E_INVALID_ARG);
    /* Small elements above the 16-bit limit: refused, not silently linked by
       pointer at 4x the memory (issue 13); 8-byte elements have no limit. */
    hh_test_capture_errors();
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 2, .capacity = CAP + 1 }, &p), HH_E_INVALID_ARG);
    ck_assert_ptr_null(p);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 7, .capacity = 100000 }, &p), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 8, .capacity = 100000 }, &p), HH_OK);
    ck_assert_int_eq(hh_pool_info_get(p, &info), HH_OK);
    ck_assert(!info.index16);
    ck_assert_uint_eq(info.elem_stride, 8);
    hh_pool_destroy(p);
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 16, .capacity = 3, .flags = HH_POOL_INDEX16 }, &p),
                     HH_OK);
    ck_assert_int_eq(hh_pool_info_get(p, &info), HH_OK);
    ck_assert(info.index16);
    hh_pool_destroy(p);
}
END_TEST

/* ---------------------------------------------------------------------------
   Scratch buffer
--------------------------------------------------------------------------- */
START_TEST(scratch_growth_reset_and_alignment) {
    hh_scratch *s = NULL;
    ck_assert_int_eq(hh_scratch_create(&(hh_scratch_desc){ .initial_bytes = 4096 }, &s), HH_OK);
    hh_scratch_info info;
    uint8_t *ps[64];
    unsigned n = 0;
    for (unsigned i = 0; i < 64; i++, n++) {
        ps[i] = hh_scratch_alloc(s, 1000 + i, 8);
        ck_assert_ptr_nonnull(ps[i]);
        hh_test_fill(ps[i], 1000 + i, i);
    }
    ck_assert_int_eq(hh_scratch_info_get(s, &info), HH_OK);
    ck_assert_uint_ge(info.map_count, 3);
    ck_assert_uint_le(info.map_count, 6);  /* geometric: 4K, 8K, 16K, 32K, 64K */
    ck_assert_uint_eq(info.retired_count, info.map_count - 1);
    for (unsigned i = 0; i < n; i++) ck_assert_int_eq(hh_test_verify(ps[i], 1000 + i, i), -1);
    size_t cap = info.capacity_bytes;
    hh_scratch_reset(s);
    ck_assert_int_eq(hh_scratch_info_get(s, &info), HH_OK);
    ck_assert_uint_eq(info.retired_count, 0);
    ck_assert_uint_eq(info.used_bytes, 0);
    ck_assert_uint_eq(info.capacity_bytes, cap);  /* the largest buffer stays */
    for (unsigned i = 0; i < 64; i++) ck_assert_ptr_nonnull(hh_scratch_alloc(s, 1000 + i, 8));  /* warm-up */
    hh_scratch_reset(s);
    ck_assert_int_eq(hh_scratch_info_get(s, &info), HH_OK);
    uint64_t maps = info.map_count;
    for (int loop = 0; loop < 10; loop++) {  /* a steady loop stops mapping */
        for (unsigned i = 0; i < 64; i++) ck_assert_ptr_nonnull(hh_scratch_alloc(s, 1000 + i, 8));
        hh_scratch_reset(s);
    }
    ck_assert_int_eq(hh_scratch_info_get(s, &info), HH_OK);
    ck_assert_uint_eq(info.map_count, maps);
    for (size_t align = 128; align <= 8192; align *= 2) {
        uint8_t *p = hh_scratch_alloc(s, 3, align);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % align, 0);
        p[2] = 7;
    }
    uint8_t *big = hh_scratch_alloc(s, 1u << 20, 4096);
    ck_assert_ptr_nonnull(big);
    ck_assert_uint_eq((uintptr_t)big % 4096, 0);
    memset(big, 1, 1u << 20);
    ck_assert_ptr_null(hh_scratch_alloc(s, 0, 8));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_ptr_null(hh_scratch_alloc(s, 8, 12));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    hh_scratch_destroy(s);
}
END_TEST

/* ---------------------------------------------------------------------------
   Page pool
--------------------------------------------------------------------------- */
START_TEST(pagepool_cache_limit_and_trim) {
    hh_memstack *ms = stack_new(0);
    hh_mark m;
    hh_mark_push(ms, &m);
    for (int i = 0; i < 40; i++) alloc_filled(ms, 60000, 16, (uint64_t)i);  /* ~40 pages */
    hh_pagepool_stats st = pool_now();
    ck_assert_uint_ge(st.pages_used, pool_base.pages_used + 40);
    ck_assert_uint_eq(st.used_bytes, st.pages_used * st.page_bytes + st.small_pages_used * st.small_page_bytes +
                                         st.oversize_bytes);
    ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    st = pool_now();
    /* released pages are cached; the stack keeps its bottom chunk and one spare */
    ck_assert_uint_ge(st.pages_cached, 38);
    ck_assert_uint_le(st.cached_bytes, st.cache_limit_bytes);
    size_t released = hh_pagepool_trim(0);
    ck_assert_uint_ge(released, 38u * HH_PAGEPOOL_PAGE_SIZE);
    st = pool_now();
    ck_assert_uint_eq(st.cached_bytes, 0);
    uint64_t maps = st.os_maps;
    hh_pagepool_set_cache_limit(2 * HH_PAGEPOOL_PAGE_SIZE);
    hh_mark_push(ms, &m);
    for (int i = 0; i < 10; i++) alloc_filled(ms, 60000, 16, (uint64_t)i);
    ck_assert_uint_ge(pool_now().os_maps, maps + 8);  /* 10 pages: bottom chunk and spare came back */
    ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
    st = pool_now();
    ck_assert_uint_le(st.cached_bytes, 2 * HH_PAGEPOOL_PAGE_SIZE);
    ck_assert_uint_eq(st.cache_limit_bytes, 2 * HH_PAGEPOOL_PAGE_SIZE);
    hh_pagepool_set_cache_limit(HH_PAGEPOOL_DEFAULT_CACHE);
    ck_assert_int_eq(hh_pagepool_stats_get(NULL), HH_E_INVALID_ARG);
    hh_memstack_destroy(ms);
}
END_TEST

/* ---------------------------------------------------------------------------
   Error contracts of NULL objects and NULL outs (issue #15, item 6): every
   NULL object or out is reported once (HH_E_INVALID_ARG, the message starts
   with the function's name), a non-NULL out is cleared before that early
   return, and nothing else changes.
--------------------------------------------------------------------------- */

static bool all_bytes(const void *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (((const uint8_t *)p)[i] != v) return false;
    return true;
}

static int junk_object;   /* what a stale out pointer points at before a failing create */

START_TEST(creates_clear_out_before_reporting_a_null_desc) {
    hh_pool *pool = (hh_pool *)(void *)&junk_object;
    ck_assert_int_eq(hh_pool_create(NULL, &pool), HH_E_INVALID_ARG);
    ck_assert_ptr_null(pool);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_pool_create");
    hh_stack *st = (hh_stack *)(void *)&junk_object;
    ck_assert_int_eq(hh_stack_create(NULL, &st), HH_E_INVALID_ARG);
    ck_assert_ptr_null(st);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stack_create");
    hh_dstack *ds = (hh_dstack *)(void *)&junk_object;
    ck_assert_int_eq(hh_dstack_create(NULL, &ds), HH_E_INVALID_ARG);
    ck_assert_ptr_null(ds);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dstack_create");
    hh_frame *f = (hh_frame *)(void *)&junk_object;
    ck_assert_int_eq(hh_frame_create(NULL, &f), HH_E_INVALID_ARG);
    ck_assert_ptr_null(f);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_frame_create");
    hh_dframe *df = (hh_dframe *)(void *)&junk_object;
    ck_assert_int_eq(hh_dframe_create(NULL, &df), HH_E_INVALID_ARG);
    ck_assert_ptr_null(df);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dframe_create");
    hh_memstack *ms = (hh_memstack *)(void *)&junk_object;   /* NULL desc is the defaults here: not an error */
    ck_assert_int_eq(hh_memstack_create(NULL, &ms), HH_OK);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_memstack_destroy(ms);
    hh_scratch *sc = (hh_scratch *)(void *)&junk_object;
    ck_assert_int_eq(hh_scratch_create(NULL, &sc), HH_OK);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_scratch_destroy(sc);
    /* NULL out: reported, nothing created */
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 8, .capacity = 4 }, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_pool_create");
    ck_assert_int_eq(hh_stack_create(&(hh_stack_desc){ .capacity = 64 }, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stack_create");
    ck_assert_int_eq(hh_dstack_create(&(hh_stack_desc){ .capacity = 64 }, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dstack_create");
    ck_assert_int_eq(hh_frame_create(&(hh_frame_desc){ .capacity = 64 }, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_frame_create");
    ck_assert_int_eq(hh_dframe_create(&(hh_frame_desc){ .capacity = 64 }, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dframe_create");
    ck_assert_int_eq(hh_memstack_create(NULL, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_create");
    ck_assert_int_eq(hh_scratch_create(NULL, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_scratch_create");
}
END_TEST

START_TEST(info_getters_clear_out_for_a_null_object) {
    hh_memstack_info mi;
    memset(&mi, 0xA5, sizeof mi);
    ck_assert_int_eq(hh_memstack_info_get(NULL, &mi), HH_E_INVALID_ARG);
    ck_assert(all_bytes(&mi, sizeof mi, 0));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_info_get");
    hh_pool_info pi;
    memset(&pi, 0xA5, sizeof pi);
    ck_assert_int_eq(hh_pool_info_get(NULL, &pi), HH_E_INVALID_ARG);
    ck_assert(all_bytes(&pi, sizeof pi, 0));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_pool_info_get");
    hh_scratch_info si;
    memset(&si, 0xA5, sizeof si);
    ck_assert_int_eq(hh_scratch_info_get(NULL, &si), HH_E_INVALID_ARG);
    ck_assert(all_bytes(&si, sizeof si, 0));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_scratch_info_get");
    /* NULL out with a live object: reported, the object unchanged */
    hh_memstack *ms = stack_new(0);
    ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 100, 16));
    hh_memstack_info before = stack_info(ms);
    ck_assert_int_eq(hh_memstack_info_get(ms, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_info_get");
    hh_memstack_info after = stack_info(ms);
    ck_assert_uint_eq(after.used_bytes, before.used_bytes);
    ck_assert_uint_eq(after.alloc_count, before.alloc_count);
    hh_memstack_destroy(ms);
    hh_pool *pool;
    ck_assert_int_eq(hh_pool_create(&(hh_pool_desc){ .elem_size = 16, .capacity = 8 }, &pool), HH_OK);
    ck_assert_int_eq(hh_pool_info_get(pool, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_pool_info_get");
    hh_pool_destroy(pool);
    hh_scratch *sc;
    ck_assert_int_eq(hh_scratch_create(NULL, &sc), HH_OK);
    ck_assert_int_eq(hh_scratch_info_get(sc, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_scratch_info_get");
    hh_scratch_destroy(sc);
    ck_assert_int_eq(hh_pagepool_stats_get(NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_pagepool_stats_get");
}
END_TEST

/* hh_stackvec_init's vector is its out: a failed init leaves it empty, so a
   later push is refused ("not initialised") instead of using stale fields. */
START_TEST(stackvec_init_failure_leaves_the_vector_empty) {
    hh_memstack *ms = stack_new(0);
    hh_stackvec v;
    const size_t bad[][2] = { { 0, 0 }, { 8, 24 } };   /* elem_size 0; align not a power of two */
    for (unsigned k = 0; k < 3; k++) {
        memset(&v, 0xA5, sizeof v);
        hh_status s = k == 2 ? hh_stackvec_init(&v, NULL, 8, 0) : hh_stackvec_init(&v, ms, bad[k][0], bad[k][1]);
        ck_assert_int_eq(s, HH_E_INVALID_ARG);
        ck_assert(all_bytes(&v, sizeof v, 0));
        hh_test_expect_one(HH_E_INVALID_ARG, "hh_stackvec_init");
        ck_assert_ptr_null(hh_stackvec_push(&v));
        hh_test_expect_one(HH_E_INVALID_ARG, "hh_stackvec_push");
        ck_assert_ptr_null(hh_stackvec_at(&v, 0));      /* an empty vector: no element 0, no message */
        ck_assert_uint_eq(hh_test_captured_count(), 0);
    }
    ck_assert_int_eq(hh_stackvec_init(NULL, ms, 8, 0), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stackvec_init");
    ck_assert_uint_eq(stack_info(ms).chunk_count, 0);   /* nothing allocated on the stack */
    hh_memstack_destroy(ms);
}
END_TEST

/* Getters that return a value (no status) still report a NULL object; the
   value is the documented neutral one (0, NULL, an empty marker). */
START_TEST(value_getters_report_a_null_object) {
    ck_assert_uint_eq(hh_stack_used(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stack_used");
    ck_assert_uint_eq(hh_stack_get_marker(NULL).offset, 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stack_get_marker");
    ck_assert_uint_eq(hh_dstack_used(NULL, HH_DSTACK_LOW), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dstack_used");
    ck_assert_uint_eq(hh_dstack_free_bytes(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dstack_free_bytes");
    ck_assert_uint_eq(hh_dstack_get_marker(NULL, HH_DSTACK_HIGH).offset, 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dstack_get_marker");
    ck_assert_uint_eq(hh_frame_used(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_frame_used");
    ck_assert_uint_eq(hh_dframe_used(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dframe_used");
    ck_assert_uint_eq(hh_dframe_frame(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dframe_frame");
    ck_assert_ptr_null(hh_stackvec_at(NULL, 0));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stackvec_at");
    hh_mark_scope_end(NULL);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mark_scope_end");
    /* a bad end of a live double-ended stack: reported, the stack unchanged */
    hh_dstack *ds;
    ck_assert_int_eq(hh_dstack_create(&(hh_stack_desc){ .capacity = 256 }, &ds), HH_OK);
    ck_assert_ptr_nonnull(hh_dstack_alloc(ds, HH_DSTACK_LOW, 32, 16));
    ck_assert_uint_eq(hh_dstack_used(ds, (hh_dstack_end)7), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_dstack_used");
    ck_assert_uint_eq(hh_dstack_used(ds, HH_DSTACK_LOW), 32);
    ck_assert_uint_eq(hh_dstack_free_bytes(ds), 256 - 32);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_dstack_destroy(ds);
    /* the already-uniform NULL paths stay one message each */
    ck_assert_int_eq(hh_memstack_walk(NULL, NULL, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_walk");
    ck_assert_int_eq(hh_memstack_walk_marks(NULL, NULL, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_walk_marks");
    ck_assert_int_eq(hh_memstack_check(NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_check");
    ck_assert_int_eq(hh_memstack_trim(NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_memstack_trim");
    ck_assert_int_eq(hh_stack_free_to_marker(NULL, (hh_stack_marker){ 0 }), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_stack_free_to_marker");
    ck_assert_int_eq(hh_pool_free(NULL, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_pool_free");
    /* destroy of NULL stays a silent no-op, like free(NULL) */
    hh_memstack_destroy(NULL);
    hh_stack_destroy(NULL);
    hh_dstack_destroy(NULL);
    hh_frame_destroy(NULL);
    hh_dframe_destroy(NULL);
    hh_pool_destroy(NULL);
    hh_scratch_destroy(NULL);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
   Suite
--------------------------------------------------------------------------- */
Suite *hh_test_linear_suite(void) {
    Suite *s = suite_create("linear");
    TCase *tc = tcase_create("memstack");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, memstack_alignment_up_to_4096);
    tcase_add_test(tc, memstack_bad_arguments_are_reported_once);
    tcase_add_test(tc, marks_across_chunk_boundaries);
    tcase_add_test(tc, marks_nest_and_keep_outer_blocks);
    tcase_add_test(tc, mark_pop_out_of_order_changes_nothing);
    tcase_add_test(tc, enforce_marks_refuses_unmarked_allocation);
    tcase_add_test(tc, mark_scope_pops_at_scope_exit);
    tcase_add_test(tc, destroy_with_open_marks_is_reported);
    tcase_add_test(tc, popped_memory_is_no_access_and_reuse_undefined);
    tcase_add_test(tc, oversize_gets_its_own_chunk);
    tcase_add_test(tc, zeroed_and_ones_after_dirty_reuse);
    tcase_add_test(tc, walker_reports_chunks_top_and_marks);
    tcase_add_test(tc, thread_stacks_are_private_and_freed_at_exit);
    tcase_add_test(tc, thread_stack_of_main_thread);
    tcase_add_test(tc, stackvec_grows_in_place_when_on_top);
    tcase_add_test(tc, memstack_fault_injection);
    tcase_add_test(tc, memstack_random_shadow_model);
    tcase_add_test(tc, pagepool_cache_limit_and_trim);
    suite_add_tcase(s, tc);

    TCase *tg = tcase_create("gea");
    tcase_add_checked_fixture(tg, setup, teardown);
    tcase_add_test(tg, stack_markers_and_exhaustion);
    tcase_add_test(tg, dstack_ends_collide_cleanly);
    tcase_add_test(tg, frame_allocator_lifetimes);
    tcase_add_test(tg, pool_exhaustion_reuse_and_bad_frees);
    tcase_add_test(tg, pool_index16_variant);
    tcase_add_test(tg, scratch_growth_reset_and_alignment);
    tcase_add_test(tg, other_allocators_fault_injection);
    suite_add_tcase(s, tg);

    TCase *tn = tcase_create("contracts");
    tcase_add_checked_fixture(tn, setup, teardown);
    tcase_add_test(tn, creates_clear_out_before_reporting_a_null_desc);
    tcase_add_test(tn, info_getters_clear_out_for_a_null_object);
    tcase_add_test(tn, stackvec_init_failure_leaves_the_vector_empty);
    tcase_add_test(tn, value_getters_report_a_null_object);
    suite_add_tcase(s, tn);
    return s;
}
