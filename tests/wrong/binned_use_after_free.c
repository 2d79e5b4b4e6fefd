/* binned_use_after_free.c -- deliberately wrong: reads a binned block after
 * hh_bfree. Run under memcheck (make check-binned-wrong) it must be reported
 * as an invalid read; a clean run means the binned allocator's memcheck
 * client requests are broken. Built against the test library
 * (HH_TRACK_VALGRIND=1). */
#include <stdio.h>
#include <string.h>

#include "hheap/binned.h"

int main(void) {
    char *p = hh_bmalloc(48);
    if (p == NULL) return 1;
    memset(p, 7, 48);
    hh_bfree(p);
    volatile char c = p[20];   /* use after free: memcheck must say "Invalid read" */
    printf("read %d after free\n", c);
    return 0;
}
