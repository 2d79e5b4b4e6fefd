/* Must be reported by memcheck: a raw pointer kept across hh_defrag_step and
 * read afterwards. The block moved; its old bytes are no-access. With
 * -DHH_WRONG_CONTROL the pointer is taken again after the step (the right
 * use) and the run must be clean. */
#include <stdio.h>
#include <string.h>

#include "hheap.h"

int main(void) {
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &heap) != HH_OK) return 2;
    hh_handle a = hh_alloc(heap, 256), b = hh_alloc(heap, 256);
    char *raw = hh_deref(heap, b);        /* kept across the step: the bug */
    memset(raw, 42, 256);                 /* every byte written: the read below is of known bytes */
    hh_free(heap, a);
    hh_defrag_step(heap, 4);              /* b slides down into a's hole */
#ifdef HH_WRONG_CONTROL
    raw = hh_deref(heap, b);              /* control build: the pointer taken again */
#endif
    volatile char c = raw[200];           /* stale read: the old place is no-access now */
    printf("read %d; moved=%d\n", c, (char *)hh_deref(heap, b) != raw);
    hh_heap_destroy(heap);
    return 0;
}
