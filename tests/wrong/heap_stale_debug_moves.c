/* Must be reported by memcheck (and ASan): a raw pointer kept across a normal
 * hh_defrag_step on a heap with HH_HEAP_DEBUG_MOVES. Without the flag the
 * step slides b down into a's hole and then c into b's old place, so the
 * stale pointer to b reads c's live bytes and nothing notices. With it, b's
 * old place is held until the next step (c stays where it is), filled with
 * HH_FILL_MOVED and no-access, so the stale read is reported. With
 * -DHH_WRONG_CONTROL the pointer is taken again after the step (the right
 * use) and the run must be clean. */
#include <stdio.h>
#include <string.h>

#include "hheap.h"

int main(void) {
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_DEBUG_MOVES }, &heap) != HH_OK) return 2;
    hh_defrag_set_policy(heap, HH_DEFRAG_SLIDE);
    hh_handle a = hh_alloc(heap, 256), b = hh_alloc(heap, 256), c = hh_alloc(heap, 256), d = hh_alloc(heap, 256);
    memset(hh_deref(heap, b), 1, 256);
    memset(hh_deref(heap, c), 2, 256);    /* written: without the flag the stale read is silent */
    memset(hh_deref(heap, d), 3, 256);
    char *raw = hh_deref(heap, b);        /* kept across the step: the bug */
    hh_free(heap, a);
    hh_defrag_step(heap, 4);              /* b slides down into a's hole; c may not follow into b's place */
#ifdef HH_WRONG_CONTROL
    raw = hh_deref(heap, b);              /* control build: the pointer taken again */
#endif
    volatile char v = raw[200];           /* stale read: b's old place is held, 0xDB, no-access */
    printf("read %d; moved=%d\n", v, (char *)hh_deref(heap, b) != raw);
    hh_free(heap, b);
    hh_free(heap, c);
    hh_free(heap, d);
    hh_heap_destroy(heap);
    return 0;
}
