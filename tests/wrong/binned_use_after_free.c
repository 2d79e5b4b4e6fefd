/* binned_use_after_free.c -- deliberately wrong: reads a binned block after
 * hh_bfree. Run under memcheck (make check-binned-wrong) it must be reported
 * as an invalid read; a clean run means the binned allocator's memcheck
 * client requests are broken. Built against the test library
 * (HH_TRACK_VALGRIND=1). With -DHH_WRONG_CONTROL the read comes before the
 * free and the run must be clean, which shows that the report comes from the
 * stale read and nothing else. */
#include <stdio.h>
#include <string.h>

#include "hheap/binned.h"

int main(void) {
    char *p = hh_bmalloc(48);
    if (p == NULL) return 1;
    memset(p, 7, 48);
#ifndef HH_WRONG_CONTROL
    hh_bfree(p);
    volatile char c = p[20];   /* BUG: use after free; memcheck must say "Invalid read" */
#else
    volatile char c = p[20];   /* control build: the same read while the block is live */
    hh_bfree(p);
#endif
    printf("read %d\n", c);
    return 0;
}
