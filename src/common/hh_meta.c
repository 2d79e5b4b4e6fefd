/* hh_meta.c -- metadata allocation seam and the HH_TESTING fault injector.
 *
 * The countdown is process-wide and atomic so a test can arm it and let any
 * thread's next seam call fail. Armed with n: calls 0..n-1 succeed, call n
 * fails, later calls succeed again (one fault per arm, like SQLite's
 * faultsimConfig(nDelay, nRepeat=1)).
 */
#include "hh_meta.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "hheap/common.h"
#include "hheap/testing.h"

#if HH_TESTING
static atomic_long fail_countdown = -1;   /* -1: disarmed */
static atomic_uint fail_fired = 0;        /* faults fired since the last arm */

void hh_test_fail_after(long n) {
    atomic_store(&fail_fired, 0);
    atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

unsigned hh_test_fail_count(void) { return atomic_load(&fail_fired); }

bool hhi_fault_fire(void) {
    long c = atomic_load(&fail_countdown);
    while (c >= 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &c, c - 1)) {
            if (c == 0) {
                atomic_fetch_add(&fail_fired, 1);
                return true;
            }
            return false;
        }
    }
    return false;
}
#endif

void *hhi_meta_alloc(size_t size) {
    if (hhi_fault()) return NULL;
    return calloc(1, size);
}

void hhi_meta_free(void *p) { free(p); }
