/* consumer.c -- the C side of the CMake consumer: a handle survives a defrag. */
#include <stdio.h>
#include <string.h>

#include <hheap.h>

int main(void) {
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &heap) != HH_OK) return 1;
    hh_handle a = hh_alloc(heap, 128), b = hh_alloc(heap, 128);
    strcpy(hh_deref(heap, b), "still here");
    hh_free(heap, a);
    hh_defrag_full(heap);
    int ok = strcmp(hh_deref(heap, b), "still here") == 0 && hh_version() == HH_VERSION;
    hh_heap_destroy(heap);
    printf("consumer_c: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
