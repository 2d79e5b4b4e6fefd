/* check_handles.c -- generational handle table (include/hheap/handles.h). */
#include "hheap/handles.h"

#include <string.h>

#include "../src/handles/handles_internal.h"
#include "test_util.h"
#include "hheap/heap.h"

static hh_handle_table *t;
static int objs[64];

static void setup(void) {
    hh_test_capture_errors();
    ck_assert_int_eq(hh_handle_table_create(&(hh_handle_table_desc){ .capacity = 32, .min_free = 4 }, &t), HH_OK);
}
static void teardown(void) {
    hh_handle_table_destroy(t);
    hh_set_error_handler(NULL, NULL);
}

START_TEST(null_handle_looks_up_as_null) {
    ck_assert_ptr_null(hh_handle_get(t, HH_NULL));
    ck_assert_ptr_null(hh_handle_lookup(t, HH_NULL));
    ck_assert_int_eq(hh_handle_release(t, HH_NULL), HH_OK);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
}
END_TEST

/* Issue 15: a NULL out or table is reported once, like hh_heap_stats_get
   (a NULL out was silently ignored before). */
START_TEST(stats_get_reports_null_arguments) {
    hh_handle_table_stats_get(t, NULL);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    hh_handle_table_stats st = { .live = 99 };
    hh_handle_table_stats_get(NULL, &st);
    ck_assert_uint_eq(hh_test_captured_count(), 2);
    ck_assert_uint_eq(st.live, 0);
    hh_handle h = hh_handle_alloc(t, &objs[0]);
    hh_handle_table_stats_get(t, &st);
    ck_assert_uint_eq(st.live, 1);
    ck_assert_uint_eq(hh_test_captured_count(), 2);
    ck_assert_int_eq(hh_handle_release(t, h), HH_OK);
}
END_TEST

/* The rest of the table's API and the heap's plain getters: a NULL table or
   heap is reported once, naming the function and the argument, and an out
   given is cleared (each was silent, named another function or kept a stale
   out before). */
START_TEST(null_tables_and_heaps_are_reported) {
    hh_test_reset_captured();
    ck_assert_ptr_null(hh_handle_get(NULL, HH_NULL));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_handle_get");
    ck_assert(!hh_handle_table_commit_more(NULL));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_handle_table_commit_more");
    hh_handle_table *tp = (hh_handle_table *)1;
    ck_assert_int_eq(hh_handle_table_create(NULL, &tp), HH_E_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "desc"));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_handle_table_create");
    ck_assert_ptr_null(tp);
    ck_assert_ptr_null(hh_heap_base(NULL));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_heap_base");
    ck_assert_uint_eq(hh_heap_managed_bytes(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_heap_managed_bytes");
    ck_assert_uint_eq(hh_heap_overhead_bytes(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_heap_overhead_bytes");
    hh_heap_desc d;
    memset(&d, 0xAB, sizeof d);
    hh_heap_desc_get(NULL, &d);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_heap_desc_get");
    ck_assert_uint_eq(d.capacity, 0);
    ck_assert(d.on_move == NULL);
}
END_TEST

START_TEST(slot_zero_never_issued) {
    for (int i = 0; i < 32; i++) {
        hh_handle h = hh_handle_alloc(t, &objs[i]);
        ck_assert(!hh_is_null(h));
        ck_assert_uint_ne(hh_handle_index(h), 0);
        ck_assert_ptr_eq(hh_handle_get(t, h), &objs[i]);
    }
}
END_TEST

START_TEST(stale_after_release) {
    hh_handle h = hh_handle_alloc(t, &objs[0]);
    ck_assert_int_eq(hh_handle_release(t, h), HH_OK);
    ck_assert_ptr_null(hh_handle_get(t, h));
    ck_assert_int_eq(hh_handle_release(t, h), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_handle_set(t, h, &objs[1]), HH_E_STALE_HANDLE);
}
END_TEST

START_TEST(forged_and_out_of_range_handles_rejected) {
    hh_handle h = hh_handle_alloc(t, &objs[0]);
    hh_handle forged = { h.id + ((uint64_t)1 << 32) };            /* next generation */
    ck_assert_ptr_null(hh_handle_get(t, forged));
    ck_assert_int_eq(hh_handle_release(t, forged), HH_E_STALE_HANDLE);
    hh_handle far = { (h.id & ~HH_HANDLE_INDEX_MASK) | 0xFFFFFF };  /* index beyond capacity */
    ck_assert_ptr_null(hh_handle_get(t, far));
    ck_assert_int_eq(hh_handle_release(t, far), HH_E_STALE_HANDLE);
    hh_handle zero_idx = { h.id & ~HH_HANDLE_INDEX_MASK };          /* slot 0 with a generation */
    ck_assert_ptr_null(hh_handle_get(t, zero_idx));
    /* A never-issued slot of this table carries the free bit: no forged key matches it. */
    hh_handle unissued = { (h.id & ~HH_HANDLE_INDEX_MASK) | 20 };
    ck_assert_ptr_null(hh_handle_get(t, unissued));
    /* Generation 0 was never issued: a small forged id must not pass for a live slot. */
    hh_handle small[] = { { 5 }, { 20 }, { 0xFFFFFF } };
    for (size_t i = 0; i < HH_ARRAY_LEN_T(small); i++) {
        ck_assert_ptr_null(hh_handle_get(t, small[i]));
        hh_test_reset_captured();
        ck_assert_int_eq(hh_handle_release(t, small[i]), HH_E_STALE_HANDLE);
        ck_assert_int_eq(hh_handle_check(t, small[i], "test"), HH_E_STALE_HANDLE);
        ck_assert_int_eq(hh_handle_set(t, small[i], &objs[3]), HH_E_STALE_HANDLE);
        ck_assert_uint_eq(hh_test_captured_count(), 3);
    }
    ck_assert_ptr_eq(hh_handle_get(t, h), &objs[0]);
}
END_TEST

START_TEST(handle_of_another_table_rejected) {
    hh_handle_table *other;
    ck_assert_int_eq(hh_handle_table_create(&(hh_handle_table_desc){ .capacity = 32 }, &other), HH_OK);
    hh_handle a = hh_handle_alloc(t, &objs[0]);
    hh_handle b = hh_handle_alloc(other, &objs[1]);
    ck_assert_uint_eq(hh_handle_index(a), hh_handle_index(b));     /* same slot, same generation ... */
    ck_assert_ptr_null(hh_handle_get(t, b));                        /* ... but another tag */
    ck_assert_int_eq(hh_handle_release(t, b), HH_E_STALE_HANDLE);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "another table"));
    ck_assert_ptr_eq(hh_handle_get(other, b), &objs[1]);
    hh_handle_table_destroy(other);
}
END_TEST

START_TEST(generation_bumps_and_fifo_delays_reuse) {
    hh_handle first = hh_handle_alloc(t, &objs[0]);
    ck_assert_int_eq(hh_handle_release(t, first), HH_OK);
    /* min_free = 4: the freed slot rests while never-used slots remain. */
    for (int i = 0; i < 10; i++) {
        hh_handle h = hh_handle_alloc(t, &objs[i]);
        ck_assert_uint_ne(hh_handle_index(h), hh_handle_index(first));
    }
    hh_handle_table_stats st;
    hh_handle_table_stats_get(t, &st);
    ck_assert_uint_eq(st.live, 10);
    ck_assert_uint_eq(st.free_queued, 1);
}
END_TEST

START_TEST(reuse_gives_new_generation) {
    hh_handle hs[32];
    for (int i = 0; i < 32; i++) hs[i] = hh_handle_alloc(t, &objs[i]);
    for (int i = 0; i < 32; i++) ck_assert_int_eq(hh_handle_release(t, hs[i]), HH_OK);
    for (int i = 0; i < 32; i++) {             /* FIFO: oldest freed first */
        hh_handle h = hh_handle_alloc(t, &objs[i]);
        ck_assert_uint_eq(hh_handle_index(h), hh_handle_index(hs[i]));
        ck_assert_uint_eq(hh_handle_generation(h), hh_handle_generation(hs[i]) + 1);
        ck_assert_ptr_null(hh_handle_get(t, hs[i]));
    }
}
END_TEST

START_TEST(exhaustion_reports_table_full) {
    for (int i = 0; i < 32; i++) ck_assert(!hh_is_null(hh_handle_alloc(t, &objs[i])));
    hh_handle h = hh_handle_alloc(t, &objs[0]);
    ck_assert(hh_is_null(h));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_int_eq(hh_last_error(), HH_E_NO_MEMORY);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "handle table full"));
}
END_TEST

START_TEST(generation_wrap_retires_slot) {
    hh_handle h = hh_handle_alloc(t, &objs[0]);
    uint32_t idx = hh_handle_index(h);
    ck_assert_int_eq(hh_handle_release(t, h), HH_OK);
    hhi_handles_set_next_gen(t, idx, UINT32_MAX);       /* age the slot to its last generation */
    /* Drain until the slot is issued again (FIFO, after min_free others). */
    hh_handle last = HH_NULL;
    for (int i = 0; i < 32 && hh_is_null(last); i++) {
        hh_handle x = hh_handle_alloc(t, &objs[1]);
        if (hh_handle_index(x) == idx) last = x;
    }
    ck_assert(!hh_is_null(last));
    ck_assert_uint_eq(hh_handle_generation(last), UINT32_MAX);
    ck_assert_int_eq(hh_handle_release(t, last), HH_OK);
    hh_handle_table_stats st;
    hh_handle_table_stats_get(t, &st);
    ck_assert_uint_eq(st.retired, 1);
    ck_assert_ptr_null(hh_handle_get(t, last));
    /* The retired slot is never handed out again: the table is now one slot smaller. */
    for (int i = 0; i < 40; i++) {
        hh_handle x = hh_handle_alloc(t, &objs[2]);
        if (hh_is_null(x)) break;
        ck_assert_uint_ne(hh_handle_index(x), idx);
    }
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
}
END_TEST

START_TEST(bad_desc_rejected) {
    hh_handle_table *x = (hh_handle_table *)&objs[0];
    ck_assert_int_eq(hh_handle_table_create(&(hh_handle_table_desc){ .capacity = 0 }, &x), HH_E_INVALID_ARG);
    ck_assert_ptr_null(x);
    ck_assert_int_eq(hh_handle_table_create(&(hh_handle_table_desc){ .capacity = HH_HANDLE_MAX_SLOTS + 1u }, &x),
                     HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_handle_table_create(NULL, &x), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
}
END_TEST

START_TEST(create_survives_injected_faults) {
    for (long n = 0;; n++) {
        hh_handle_table *x = NULL;
        hh_test_fail_after(n);
        hh_status s = hh_handle_table_create(&(hh_handle_table_desc){ .capacity = 100 }, &x);
        unsigned fired = hh_test_fail_count();
        hh_test_fail_after(-1);
        if (s == HH_OK) {
            ck_assert_uint_eq(fired, 0);
            ck_assert(!hh_is_null(hh_handle_alloc(x, &objs[0])));
            hh_handle_table_destroy(x);
            break;
        }
        ck_assert_int_eq(s, HH_E_NO_MEMORY);
        ck_assert_ptr_null(x);
        ck_assert_int_lt(n, 10);
    }
}
END_TEST


/* Issue 12: a tag is never handed to a table while another live table holds
   it; when all 255 are held, init fails with HH_E_NO_MEMORY and a message. */
START_TEST(live_tables_never_share_a_tag) {
    static hh_handle_table many[HH_HANDLE_TAG_COUNT + 1];
    bool seen[256] = { false };
    seen[t->tag] = true;
    unsigned n = 0;
    hh_status s = HH_OK;
    while (n <= HH_HANDLE_TAG_COUNT &&
           (s = hh_handle_table_init(&many[n], &(hh_handle_table_desc){ .capacity = 8 })) == HH_OK) {
        ck_assert_uint_ne(many[n].tag, 0);
        ck_assert_msg(!seen[many[n].tag], "tag %u handed out twice", many[n].tag);
        seen[many[n].tag] = true;
        n++;
    }
    ck_assert_int_eq(s, HH_E_NO_MEMORY);
    ck_assert_uint_lt(n, HH_HANDLE_TAG_COUNT);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "tags"));
    uint8_t freed = many[0].tag;
    hh_handle_table_fini(&many[0]);                       /* one tag free again: init succeeds with it */
    ck_assert_int_eq(hh_handle_table_init(&many[0], &(hh_handle_table_desc){ .capacity = 8 }), HH_OK);
    ck_assert_uint_eq(many[0].tag, freed);
    ck_assert_uint_ne(many[0].first_gen, 1);              /* a new epoch of that tag */
    for (unsigned i = 0; i < n; i++) hh_handle_table_fini(&many[i]);
}
END_TEST

Suite *hh_test_handles_suite(void) {
    Suite *s = suite_create("handles");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, null_handle_looks_up_as_null);
    tcase_add_test(tc, slot_zero_never_issued);
    tcase_add_test(tc, stats_get_reports_null_arguments);
    tcase_add_test(tc, null_tables_and_heaps_are_reported);
    tcase_add_test(tc, stale_after_release);
    tcase_add_test(tc, forged_and_out_of_range_handles_rejected);
    tcase_add_test(tc, handle_of_another_table_rejected);
    tcase_add_test(tc, live_tables_never_share_a_tag);
    tcase_add_test(tc, generation_bumps_and_fifo_delays_reuse);
    tcase_add_test(tc, reuse_gives_new_generation);
    tcase_add_test(tc, exhaustion_reports_table_full);
    tcase_add_test(tc, generation_wrap_retires_slot);
    tcase_add_test(tc, bad_desc_rejected);
    tcase_add_test(tc, create_survives_injected_faults);
    suite_add_tcase(s, tc);
    return s;
}
