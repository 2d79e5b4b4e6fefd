/* cxx_headers.cpp -- every public header from C++: one translation unit that
 * includes them all (through hheap.h and each on its own) and calls into each
 * module, built with g++ and clang++ (-std=c++11 .. c++20, -Wall -Wextra
 * -Wpedantic -Werror) against build/libhheap.a and run by `make check-cxx`.
 * It asserts a little behaviour per module, enough to prove the C linkage and
 * the inline parts of the headers (hh_deref's fast path, HH_NULL) work in C++.
 */
#include "hheap/common.h"
#include "hheap/handles.h"
#include "hheap/heap.h"
#include "hheap/defrag.h"
#include "hheap/linear.h"
#include "hheap/binned.h"
#include "hheap/mapdump.h"
#include "hheap/trace.h"
#include "hheap/vheap.h"
#include "hheap.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "cxx_check.h"

int main() {
    hh_set_error_handler(capture, nullptr);

    /* common.h */
    CHECK(hh_version() == HH_VERSION);
    CHECK(hh_is_null(HH_NULL));
    CHECK(std::strcmp(hh_status_str(HH_OK), hh_status_str(HH_E_STALE_HANDLE)) != 0);

    /* handles.h */
    hh_handle_table_desc td = hh_handle_table_desc();
    td.capacity = 16;
    hh_handle_table *table = nullptr;
    CHECK(hh_handle_table_create(&td, &table) == HH_OK);
    int payload = 42;
    hh_handle th = hh_handle_alloc(table, &payload);
    CHECK(!hh_is_null(th) && hh_handle_get(table, th) == &payload);
    CHECK(hh_handle_release(table, th) == HH_OK);
    CHECK(hh_handle_get(table, th) == nullptr);
    hh_handle_table_destroy(table);

    /* heap.h + defrag.h */
    hh_heap_desc hd = hh_heap_desc();
    hd.capacity = 1u << 20;
    hh_heap *heap = nullptr;
    CHECK(hh_heap_create(&hd, &heap) == HH_OK);
    hh_handle a = hh_alloc(heap, 256), b = hh_alloc(heap, 256);
    std::memset(hh_deref(heap, b), 0x5B, 256);
    void *b_before = hh_deref(heap, b);
    CHECK(hh_free(heap, a) == HH_OK);
    CHECK(hh_deref(heap, a) == nullptr && last_reported == HH_E_STALE_HANDLE);
    hh_defrag_report rep = hh_defrag_full(heap);
    unsigned char *bp = static_cast<unsigned char *>(hh_deref(heap, b));
    CHECK(rep.moves >= 1 && bp != b_before && bp[0] == 0x5B && bp[255] == 0x5B);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    CHECK(st.live_blocks == 1 && st.total_moves >= 1);
    CHECK(hh_heap_check(heap) == HH_OK);
    CHECK(hh_defrag_policy_str(hh_defrag_get_policy(heap)) != nullptr);

    /* mapdump.h: one frame written and read back */
    char dir[] = "/tmp/hh-cxx-XXXXXX";
    CHECK(mkdtemp(dir) != nullptr);
    char dump[64], trace_path[64];
    std::snprintf(dump, sizeof dump, "%s/t.hhmap", dir);
    std::snprintf(trace_path, sizeof trace_path, "%s/t.hhtrace", dir);
    hh_mapdump_desc md = hh_mapdump_desc();
    md.heap = heap;
    hh_mapdump_writer *w = nullptr;
    CHECK(hh_mapdump_create(dump, &md, &w) == HH_OK);
    CHECK(hh_mapdump_write_frame(w, 7, &rep) == HH_OK);
    CHECK(hh_mapdump_close(w) == HH_OK);
    hh_mapdump_reader *r = nullptr;
    CHECK(hh_mapdump_open(dump, &r) == HH_OK);
    const hh_mapdump_frame *f = nullptr;
    CHECK(hh_mapdump_next(r, &f) == HH_OK && f != nullptr && f->frame == 7);
    hh_mapdump_reader_close(r);

    /* trace.h: record two operations on the emptied heap, load them back */
    CHECK(hh_free(heap, b) == HH_OK);
    hh_trace *tr = nullptr;
    CHECK(hh_trace_open(heap, trace_path, &tr) == HH_OK);
    hh_handle c = hh_alloc(heap, 64);
    CHECK(hh_free(heap, c) == HH_OK);
    CHECK(hh_trace_event_count(tr) == 2);
    CHECK(hh_trace_close(tr) == HH_OK);
    hh_trace_log *log = nullptr;
    CHECK(hh_trace_load(trace_path, &log) == HH_OK && log != nullptr && log->event_count == 2);
    hh_trace_log_free(log);
    hh_heap_destroy(heap);
    unlink(dump);
    unlink(trace_path);
    rmdir(dir);

    /* vheap.h: allocate two blocks, free the low one, one pass moves the high one down */
    hh_vheap *vh = nullptr;
    hh_vheap_desc vd = {};
    vd.size = 1u << 20;
    CHECK(hh_vheap_create(&vd, &vh) == HH_OK);
    hh_handle v1 = hh_valloc(vh, 4096, 256, 1), v2 = hh_valloc(vh, 4096, 256, 2);
    CHECK(hh_voffset(vh, v2) == 4096);
    CHECK(hh_vfree(vh, v1) == HH_OK);
    hh_vdefrag_pass vp;
    hh_vdefrag_budget vb = {};
    vb.max_moves = 4;
    CHECK(hh_vdefrag_begin(vh, &vb, &vp) == HH_OK && vp.move_count == 1 && vp.moves[0].dst_offset == 0);
    CHECK(hh_vdefrag_end(vh, nullptr, nullptr) == HH_OK && hh_voffset(vh, v2) == 0);
    CHECK(hh_vheap_check(vh) == HH_OK);
    hh_vheap_destroy(vh);

    /* linear.h */
    hh_memstack *ms = hh_memstack_thread();
    CHECK(ms != nullptr);
    hh_mark m;
    hh_mark_push(ms, &m);
    CHECK(hh_memstack_alloc(ms, 100, 16) != nullptr);
    CHECK(hh_mark_pop(&m) == HH_OK);
    CHECK(hh_mark_pop(&m) == HH_E_MARK_ORDER);
    {
        HH_MARK_SCOPE(scope, ms);
        CHECK(hh_memstack_alloc_zeroed(ms, 32, 8) != nullptr);
    }
    hh_memstack_info mi;
    CHECK(hh_memstack_info_get(ms, &mi) == HH_OK);
    hh_memstack_thread_release();

    /* binned.h */
    void *p = hh_bmalloc(100);
    CHECK(p != nullptr && hh_busable(p) >= 100);
    hh_bfree(p);
    hh_binned_stats bs;
    hh_binned_stats_get(&bs);
    hh_binned_thread_flush();

    return cxx_check_summary("cxx_headers");
}
