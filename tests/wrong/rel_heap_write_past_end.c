/* rel_heap_write_past_end.c -- must be caught: writes one byte past the usable
 * end of a relocatable-heap block. The heap runs with HH_HEAP_DEBUG, which puts
 * guard bytes after every block and marks them no-access for the memory tool
 * (memcheck mempool client requests with HH_TRACK_VALGRIND=1, ASan poisoning
 * with HH_TRACK_ASAN=1). `make check-wrong-rel` runs it under both tools and
 * passes only if the tool reports an invalid write -- and only if the control
 * build (-DHH_WRONG_CONTROL: the same program writing the last byte instead)
 * runs clean, which shows the report comes from the bug and nothing else. */
#include <stdio.h>

#include "hheap.h"

int main(void) {
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_DEBUG }, &heap) != HH_OK) return 2;
    hh_handle a = hh_alloc(heap, 40), b = hh_alloc(heap, 40);
    if (hh_is_null(a) || hh_is_null(b)) return 2;
    unsigned char *p = hh_deref(heap, a);
    size_t usable = hh_size(heap, a);
    for (size_t i = 0; i < usable; i++) p[i] = (unsigned char)i;   /* in bounds: fine */
    volatile unsigned char *q = p;
#ifndef HH_WRONG_CONTROL
    q[usable] = 0xEE;                                               /* BUG: one past the end */
#else
    q[usable - 1] = 0xEE;                                           /* control build: the last byte, in bounds */
#endif
    printf("wrote past the end of a %zu-byte block\n", usable);
    hh_free(heap, b);
    hh_free(heap, a);
    hh_heap_destroy(heap);
    return 0;
}
