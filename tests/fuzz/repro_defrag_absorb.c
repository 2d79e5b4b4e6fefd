/* repro_defrag_absorb.c -- minimal reproducer (bugs.md 2026-12-02, reliability):
 * hh_defrag_step on a fragmented HH_HEAP_DEBUG heap with 16/32/64-aligned
 * blocks and a few pins trips
 *   hh_assert(absorb < (HHI_MAX_SLACK + 1) * HHI_GRANULE)  src/heap/heap.c hhi_heap_move_into
 * called from src/defrag/defrag.c run_moves. Build against the test library:
 *   cc -Iinclude tests/fuzz/repro_defrag_absorb.c build/test/libhheap-test.a -pthread
 * Exit 0 and "check 0" when fixed. Same workload: tests/check_reliability.c heap_workload_faults. */
#include <stdio.h>

#include "hheap.h"

int main(void) {
    hh_heap *h;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 18, .flags = HH_HEAP_DEBUG }, &h) != HH_OK) return 2;
    hh_handle arr[120];
    size_t cnt = 120;
    for (unsigned i = 0; i < 120; i++) arr[i] = hh_alloc_ex(h, 24 + (i * 37) % 700, (size_t)16 << (i % 3), i);
    for (size_t i = 0; i < cnt; i += 2) {       /* free every other one (swap-remove order) */
        hh_free(h, arr[i]);
        arr[i] = arr[--cnt];
    }
    for (size_t i = 0; i < cnt; i += 11) hh_pin(h, arr[i]);
    hh_defrag_report r = hh_defrag_step(h, 3);
    hh_status s = hh_heap_check(h);
    printf("moves %u, check %d\n", r.moves, (int)s);
    hh_heap_destroy(h);
    return s == HH_OK ? 0 : 1;
}
