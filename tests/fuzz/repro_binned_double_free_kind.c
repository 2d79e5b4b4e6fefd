/* repro_binned_double_free_kind.c -- reproducer (reliability report, binned):
 * DESIGN.md: "hh_bfree of a pointer it already freed reports HH_E_DOUBLE_FREE".
 * Found by fuzz_binned: once the page of a freed block has become empty (all its
 * blocks flushed back from the thread cache, the page returned to the pool), a
 * second hh_bfree of the block reports HH_E_FOREIGN_POINTER ("is not a block of
 * the binned allocator") instead. Safe (reported, ignored), but the wrong status.
 * Build: cc -Iinclude tests/fuzz/repro_binned_double_free_kind.c build/test/libhheap-test.a -pthread
 * Exit 0 when every case reports HH_E_DOUBLE_FREE. */
#include <stdio.h>

#include "hheap.h"

static hh_status last;
static void on_error(hh_status s, const char *m, void *u) { (void)u; last = s; printf("   reported: %s\n", m); }

int main(void) {
    hh_set_error_handler(on_error, NULL);
    hh_binned_set_thread_cache_limit(65536);       /* a small cache: blocks of 28 KiB flush soon */
    int bad = 0;
    for (int n = 1; n <= 4; n++) {
        void *ps[4];
        for (int i = 0; i < n; i++) ps[i] = hh_bmalloc(28740);
        for (int i = 1; i < n; i++) hh_bfree(ps[i]);
        hh_bfree(ps[0]);
        last = HH_OK;
        hh_bfree(ps[0]);                           /* the double free */
        printf("%d blocks of 28740 B, second free of one -> %s\n", n, hh_status_str(last));
        bad |= last != HH_E_DOUBLE_FREE;
    }
    void *q = hh_bmalloc(100);
    hh_bfree(q);
    hh_binned_thread_flush();
    hh_binned_trim(0);
    last = HH_OK;
    hh_bfree(q);
    printf("100 B block, freed, flushed, trimmed, freed again -> %s\n", hh_status_str(last));
    bad |= last != HH_E_DOUBLE_FREE;
    hh_binned_set_thread_cache_limit(1u << 20);
    return bad;
}
