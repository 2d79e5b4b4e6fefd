/* Must be reported by memcheck: a raw pointer kept across hh_defrag_step on a
 * heap with HH_HEAP_STRESS_MOVES. The heap is packed (no hole), so a normal
 * step would move nothing and the bug would hide; the stress flag moves every
 * movable block on every step, so the stale read lands on no-access bytes.
 * With -DHH_WRONG_CONTROL the pointer is taken again after the step (the
 * right use) and the run must be clean. */
#include <stdio.h>
#include <string.h>

#include "hheap.h"

int main(void) {
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_STRESS_MOVES }, &heap) != HH_OK) return 2;
    hh_handle a = hh_alloc(heap, 256), b = hh_alloc(heap, 256);
    char *raw = hh_deref(heap, a);        /* kept across the step: the bug */
    memset(raw, 42, 256);                 /* every byte written: the read below is of known bytes */
    hh_defrag_step(heap, 1);              /* packed heap: only the stress flag moves a */
#ifdef HH_WRONG_CONTROL
    raw = hh_deref(heap, a);              /* control build: the pointer taken again */
#endif
    volatile char c = raw[100];           /* stale read */
    printf("read %d; moved=%d\n", c, (char *)hh_deref(heap, a) != raw);
    hh_free(heap, a);
    hh_free(heap, b);
    hh_heap_destroy(heap);
    return 0;
}
