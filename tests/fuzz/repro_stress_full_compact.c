/* repro_stress_full_compact.c -- reproducer (bugs.md 2026-12-02, reliability):
 * with HH_HEAP_STRESS_MOVES, hh_defrag_full() on a heap of [hole 96][live 96][top]
 * makes its one move but ends with report.compact == false and two free blocks
 * (the hole at offset 0 stays), under every policy. Without the flag it compacts.
 * Build: cc -Iinclude tests/fuzz/repro_stress_full_compact.c build/test/libhheap-test.a -pthread
 * Exit 0 when hh_defrag_full always ends compact. */
#include <stdio.h>
#include "hheap.h"
int main(void) {
    int bad = 0;
    for (int pol = 0; pol < 3; pol++) for (int fl = 0; fl < 2; fl++) for (int sz = 80; sz <= 96; sz += 16) {
        hh_heap *h; hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16, .flags = fl ? HH_HEAP_STRESS_MOVES : 0 }, &h);
        hh_defrag_set_policy(h, (hh_defrag_policy)pol);
        hh_handle a = hh_alloc(h, (size_t)sz), b = hh_alloc(h, (size_t)sz);
        hh_free(h, a);
        hh_defrag_report r = hh_defrag_full(h);
        hh_heap_stats st; hh_heap_stats_get(h, &st);
        printf("policy %s stress %d size %d: moves %u compact %d free_blocks %u\n", hh_defrag_policy_str((hh_defrag_policy)pol), fl, sz, r.moves, r.compact, st.free_blocks);
        bad |= !r.compact || st.free_blocks != 1;
        hh_free(h, b); hh_heap_destroy(h);
    }
    return bad;
}
