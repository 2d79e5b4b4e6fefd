/* repro_binned_memalign0.c -- minimal reproducer (reliability report, binned):
 * hh_bmemalign(align, 0) with an alignment served from the OS (above 32 KiB)
 * returns a block that hh_busable() and hh_brealloc() call foreign
 * (HH_E_FOREIGN_POINTER; usable 0, realloc NULL),
 * although hh_bmalloc(0) is documented to give "a unique minimum-size block".
 * Build: cc -Iinclude tests/fuzz/repro_binned_memalign0.c build/test/libhheap-test.a -pthread
 * Exit 0 when fixed. */
#include <stdio.h>

#include "hheap.h"

static unsigned reports;
static void on_error(hh_status s, const char *m, void *u) {
    (void)u;
    reports++;
    printf("  reported %s: %s\n", hh_status_str(s), m);
}

int main(void) {
    hh_set_error_handler(on_error, NULL);
    int bad = 0;
    for (size_t align = 16; align <= ((size_t)2 << 20); align *= 2) {
        reports = 0;
        void *p = hh_bmemalign(align, 0);
        size_t u = hh_busable(p);
        void *q = hh_brealloc(p, 100);
        if (q != NULL) p = q;
        hh_bfree(p);
        if (p == NULL || u == 0 || q == NULL || reports) {
            printf("hh_bmemalign(%zu, 0) = %p, hh_busable = %zu, hh_brealloc(p, 100) = %p, %u reports\n", align, p, u, q,
                   reports);
            bad = 1;
        }
    }
    size_t bytes, leaks = hh_binned_leak_report(NULL, NULL, &bytes);
    printf("leak report after freeing all: %zu blocks, %zu bytes\n", leaks, bytes);
    return bad || leaks;
}
