/* check_common.c -- status strings, last error, error handler, fault seam. */
#include "hheap/common.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "../src/common/hh_error.h"
#include "../src/common/hh_meta.h"
#include "../src/common/hh_platform.h"
#include "test_util.h"

static void setup(void) { hh_test_capture_errors(); }
static void teardown(void) { hh_set_error_handler(NULL, NULL); hh_test_fail_after(-1); }

START_TEST(status_strings_cover_every_code) {
    for (int s = 0; s < HH_STATUS_COUNT; s++) {
        const char *t = hh_status_str((hh_status)s);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_ne(t, "unknown status");
        for (int u = 0; u < s; u++) ck_assert_str_ne(t, hh_status_str((hh_status)u));
    }
    ck_assert_str_eq(hh_status_str((hh_status)HH_STATUS_COUNT), "unknown status");
    ck_assert_str_eq(hh_status_str((hh_status)-1), "unknown status");
    ck_assert_str_eq(hh_status_str(HH_E_STALE_HANDLE), "stale handle");
}
END_TEST

START_TEST(error_sets_last_error_and_calls_handler_once) {
    ck_assert_int_eq(hh_last_error(), HH_OK);
    ck_assert_int_eq(hhi_error(HH_E_PINNED, "block %d pinned", 7), HH_E_PINNED);
    ck_assert_int_eq(hh_last_error(), HH_E_PINNED);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_str_eq(hh_test_last_message(), "block 7 pinned");
    hh_clear_last_error();
    ck_assert_int_eq(hh_last_error(), HH_OK);
}
END_TEST

static void *thread_error(void *arg) {
    (void)arg;
    hh_status before = hh_last_error();
    hhi_set_last_error(HH_E_IO);
    return (void *)(uintptr_t)(before == HH_OK && hh_last_error() == HH_E_IO);
}

START_TEST(last_error_is_thread_local) {
    hhi_set_last_error(HH_E_CORRUPT);
    pthread_t t;
    void *ok = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, thread_error, NULL), 0);
    pthread_join(t, &ok);
    ck_assert_ptr_nonnull(ok);
    ck_assert_int_eq(hh_last_error(), HH_E_CORRUPT);
}
END_TEST

START_TEST(long_message_is_truncated_not_overflowed) {
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    hhi_error(HH_E_IO, "%s", big);
    ck_assert_uint_eq(strlen(hh_test_last_message()), 255);
}
END_TEST

START_TEST(fault_injector_fails_exactly_the_nth_call) {
    hh_test_fail_after(2);
    void *a = hhi_meta_alloc(8), *b = hhi_meta_alloc(8), *c = hhi_meta_alloc(8), *d = hhi_meta_alloc(8);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(hh_test_fail_count(), 1);
    hhi_meta_free(a); hhi_meta_free(b); hhi_meta_free(d);
    hh_test_fail_after(0);
    ck_assert_ptr_null(hhi_os_map(4096, 0));
    void *m = hhi_os_map(3 * 65536, 65536);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq((uintptr_t)m % 65536, 0);
    hhi_os_unmap(m, 3 * 65536);
}
END_TEST

/* The permissions /proc/self/maps lists for the mapping that starts at p
   ("rw-p", "r--p", "---p"), or "" if none starts there. */
static void maps_perms(const void *p, char out[8]) {
    out[0] = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo == (unsigned long)(uintptr_t)p) {
            memcpy(out, perms, 5);
            break;
        }
    }
    fclose(f);
}

/* A reservation is what it says at any alignment: read-only or no-access,
   never writable (an aligned one came back read-write, charged to the commit
   limit, before its first mmap honoured the reservation's protection). */
START_TEST(aligned_reservations_keep_their_protection) {
    const size_t sizes[] = { 1u << 20, 3u << 20 };
    for (size_t i = 0; i < 2; i++) {
        for (int readable = 0; readable < 2; readable++) {
            char *p = hhi_os_reserve(sizes[i], 2u << 20, readable != 0);
            ck_assert_ptr_nonnull(p);
            ck_assert_uint_eq((uintptr_t)p % (2u << 20), 0);
            char perms[8];
            maps_perms(p, perms);
            ck_assert_str_eq(perms, readable ? "r--p" : "---p");
            hhi_os_unmap(p, sizes[i]);
        }
    }
} END_TEST

/* A run of fresh aligned mappings -- large blocks and spans as the binned
   allocator makes them -- costs about one mmap each: the next goes just
   below the last (the kernel hands out addresses top-down). Before, a size
   that is not a multiple of the alignment always took a first mmap, its
   munmap and a second mmap at the aligned address: 3N calls or more. */
START_TEST(aligned_mappings_take_few_syscalls) {
    enum { N = 32 };
    const size_t align = (size_t)2 << 20;
    char *p[N];
    size_t size[N];
    uint64_t maps = hhi_test_os_maps_here, unmaps = hhi_test_os_unmaps_here;
    for (int i = 0; i < N; i++) {
        size[i] = (i & 1) ? ((size_t)5 << 20) + 4096 : (size_t)3 << 20;
        p[i] = hhi_os_map(size[i], align);
        ck_assert_ptr_nonnull(p[i]);
        ck_assert_uint_eq((uintptr_t)p[i] % align, 0);
        p[i][0] = 1;                                /* writable at both ends */
        p[i][size[i] - 1] = 2;
    }
    uint64_t calls = (hhi_test_os_maps_here - maps) + (hhi_test_os_unmaps_here - unmaps);
    for (int i = 0; i < N; i++)                     /* no two overlap, and none lost a byte */
        for (int j = i + 1; j < N; j++)
            ck_assert(p[i] + size[i] <= p[j] || p[j] + size[j] <= p[i]);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(p[i][0], 1);
        ck_assert_int_eq(p[i][size[i] - 1], 2);
        hhi_os_unmap(p[i], size[i]);
    }
    if (hh_test_under_valgrind()) return;           /* the tool places mappings itself */
    ck_assert_msg(calls <= 2 * N, "%llu mmap/munmap calls for %d aligned mappings", (unsigned long long)calls, N);
}
END_TEST

/* A big block mapped and unmapped over and over comes back to about the same
   place: the hint below the last aligned mapping is forgotten when that
   mapping goes (kept, each cycle went 6 MiB lower: 2.4 GiB over this run). */
START_TEST(aligned_map_unmap_cycles_reuse_the_range) {
    enum { CYCLES = 400 };
    const size_t align = (size_t)2 << 20, size = ((size_t)5 << 20) + 4096;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < CYCLES; i++) {
        char *p = hhi_os_map(size, align);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % align, 0);
        p[0] = 1;
        if ((uintptr_t)p < lo) lo = (uintptr_t)p;
        if ((uintptr_t)p > hi) hi = (uintptr_t)p;
        hhi_os_unmap(p, size);
    }
    if (hh_test_under_valgrind()) return;           /* the tool places mappings itself */
    ck_assert_msg(hi - lo < ((uintptr_t)256 << 20), "%d map/unmap cycles spread over %llu MiB", CYCLES,
                  (unsigned long long)((hi - lo) >> 20));
}
END_TEST

START_TEST(clock_is_monotonic) {
    uint64_t a = hhi_now_ns(), b = hhi_now_ns();
    ck_assert_uint_ge(b, a);
    ck_assert_uint_gt(hhi_os_rss_bytes(), 0);
}
END_TEST

Suite *hh_test_common_suite(void) {
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, status_strings_cover_every_code);
    tcase_add_test(tc, error_sets_last_error_and_calls_handler_once);
    tcase_add_test(tc, last_error_is_thread_local);
    tcase_add_test(tc, long_message_is_truncated_not_overflowed);
    tcase_add_test(tc, fault_injector_fails_exactly_the_nth_call);
    tcase_add_test(tc, clock_is_monotonic);
    tcase_add_test(tc, aligned_reservations_keep_their_protection);
    tcase_add_test(tc, aligned_mappings_take_few_syscalls);
    tcase_add_test(tc, aligned_map_unmap_cycles_reuse_the_range);
    suite_add_tcase(s, tc);
    return s;
}
