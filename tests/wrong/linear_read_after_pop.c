/* linear_read_after_pop.c -- must be caught: reads a mark-stack block after the
 * mark that owned it was popped. Built against the test library
 * (HH_TRACK_VALGRIND=1); under memcheck the read must be an "Invalid read".
 * With -DHH_WRONG_CONTROL the stale read is left out and the run must be clean,
 * which shows that the report comes from the read and nothing else. */
#include <stdio.h>

#include "hheap/linear.h"

int main(void) {
    hh_memstack *ms = NULL;
    if (hh_memstack_create(NULL, &ms) != HH_OK) return 2;
    char *keep = hh_memstack_alloc(ms, 32, 16);  /* the chunk survives the pop: only a trim marks the block */
    hh_mark m;
    hh_mark_push(ms, &m);
    volatile char *p = hh_memstack_alloc(ms, 64, 16);
    if (keep == NULL || p == NULL) return 2;
    keep[0] = 1;
    p[10] = 42;
    if (hh_mark_pop(&m) != HH_OK) return 2;
    int seen = keep[0];
#ifndef HH_WRONG_CONTROL
    seen += p[10];  /* BUG: p died with the mark */
#endif
    printf("read %d\n", seen);
    hh_memstack_destroy(ms);
    return 0;
}
