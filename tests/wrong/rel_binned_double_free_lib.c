/* rel_binned_double_free_lib.c -- must be caught: frees a binned block twice.
 * The binned allocator validates every free in O(1) and reports a second free
 * as HH_E_DOUBLE_FREE through the error handler (default: one "hheap: ..." line
 * on stderr), leaving the allocator intact -- so here the catcher is the library
 * itself, and the memory tools must stay silent (no invalid access while
 * detecting it). `make check-wrong-rel` runs it under memcheck and under ASan and
 * passes only if the program exits 3 (the library reported the double free and
 * hh_binned_check still passes) with an "hheap:" line and no tool report. */
#include <stdio.h>
#include <string.h>

#include "hheap/binned.h"

int main(void) {
    char *keep = hh_bmalloc(48);
    char *p = hh_bmalloc(48);
    if (keep == NULL || p == NULL) return 2;
    memset(keep, 1, 48);
    memset(p, 2, 48);
    hh_bfree(p);
    hh_clear_last_error();
    hh_bfree(p);                                         /* BUG: double free */
    hh_status seen = hh_last_error();
    int intact = hh_binned_check() == HH_OK && keep[47] == 1;
    char *again = hh_bmalloc(48);                        /* the allocator still works */
    hh_bfree(again);
    hh_bfree(keep);
    printf("second free reported as: %s; allocator intact: %d\n", hh_status_str(seen), intact);
    return (seen == HH_E_DOUBLE_FREE && intact && again != NULL) ? 3 : 0;
}
