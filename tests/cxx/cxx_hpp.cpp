/* cxx_hpp.cpp -- tests of include/hheap.hpp (the C++ layer), built with g++ and
 * clang++ at several -std levels by `make check-cxx` and run there.
 * Each test asserts behaviour through the C API beside the wrapper: a block the
 * owner should have freed is stale in hh_deref, moves are seen in the stats. */
#include "hheap.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "cxx_check.h"

struct enemy {
    int   hp;
    float x, y;
    char  name[52];
    enemy() : hp(0), x(0), y(0), name() {}
    enemy(int h, float px, float py) : hp(h), x(px), y(py), name() { std::strcpy(name, "grunt"); }
};

struct point {
    float x, y;
};

struct alignas(64) cache_line {
    unsigned char bytes[64];
};

static bool live(hh_heap *heap, hh_handle h) {
    unsigned before = reports;
    bool ok = hh_deref(heap, h) != nullptr;
    reports = before;                    /* a stale deref reports; that is the point here */
    return ok;
}

static void test_heap_raii() {
    hh_heap *raw = nullptr;
    {
        hh::heap heap(1u << 20);
        CHECK(heap && heap.status() == HH_OK && heap.get() != nullptr);
        raw = heap.get();
        CHECK(heap.stats().capacity >= (1u << 19));
        hh::heap moved(std::move(heap));            /* ownership moves, the source is empty */
        CHECK(!heap && heap.get() == nullptr && moved.get() == raw);
        hh::heap assigned;
        CHECK(!assigned);
        assigned = std::move(moved);
        CHECK(assigned.get() == raw && !moved);
        CHECK(assigned.check() == HH_OK);
    }
    hh::heap bad(0);                                /* capacity 0: create fails, nothing throws */
    CHECK(!bad && bad.status() == HH_E_INVALID_ARG && last_reported == HH_E_INVALID_ARG);
    hh::heap adopted = hh::heap::adopt(bad.release());
    CHECK(!adopted);
    hh_heap_desc d = hh_heap_desc();
    d.capacity = 1u << 20;
    hh_heap *mine = nullptr;
    CHECK(hh_heap_create(&d, &mine) == HH_OK);
    hh::heap owner = hh::heap::adopt(mine);
    CHECK(owner.get() == mine);
    hh_heap *back = owner.release();
    CHECK(back == mine && !owner);
    hh_heap_destroy(back);
}

static void test_typed_handle_and_make() {
    hh::heap heap(1u << 20);
    hh::unique_handle<enemy> e = heap.make<enemy>(100, 1.5f, 2.5f);
    CHECK(e && e->hp == 100 && e->x == 1.5f && std::strcmp((*e).name, "grunt") == 0);
    CHECK(e.get() == hh_deref(heap.get(), e.raw()));
    CHECK(hh_size(heap.get(), e.raw()) >= sizeof(enemy));
    hh::handle<enemy> view = e.view();               /* non-owning copies see the same block */
    hh::handle<enemy> copy = view;
    CHECK(copy == view && copy.get() == e.get() && copy.heap() == heap.get());
    copy->hp = 7;
    CHECK(e->hp == 7);

    hh::unique_handle<point> pt = heap.make<point>(1.5f, -2.0f);   /* an aggregate: brace-initialised */
    CHECK(pt && pt->x == 1.5f && pt->y == -2.0f);

    hh::unique_handle<cache_line> c = heap.make<cache_line>();
    CHECK(c && reinterpret_cast<std::uintptr_t>(c.get()) % 64 == 0);

    hh::unique_handle<int> arr = heap.make_array<int>(100);
    CHECK(arr && arr.count() >= 100 && arr[0] == 0 && arr[99] == 0);
    arr[99] = 5;
    CHECK(arr.get()[99] == 5);
    CHECK(!heap.make_array<int>(0));

    hh::unique_handle<enemy> none;
    CHECK(!none && none.get() == nullptr && none.reset() == HH_OK);
    hh::handle<enemy> null_view;
    CHECK(null_view.is_null() && null_view.get() == nullptr && null_view.count() == 0);
}

static void test_owning_handle_frees() {
    hh::heap heap(1u << 20);
    hh_handle raw;
    {
        hh::unique_handle<enemy> e = heap.make<enemy>();
        raw = e.raw();
        CHECK(live(heap.get(), raw));
        CHECK(heap.stats().live_blocks == 1);
    }
    CHECK(!live(heap.get(), raw));                    /* freed at the end of its scope */
    CHECK(heap.stats().live_blocks == 0);

    hh::unique_handle<enemy> a = heap.make<enemy>(1, 0.f, 0.f);
    hh_handle ra = a.raw();
    CHECK(a.reset() == HH_OK && !a && !live(heap.get(), ra));

    hh::unique_handle<enemy> b = heap.make<enemy>(2, 0.f, 0.f);
    hh::handle<enemy> kept = b.release();            /* released: the caller owns it now */
    CHECK(!b && live(heap.get(), kept.raw()));
    hh::unique_handle<enemy> readopt(kept);
    CHECK(readopt->hp == 2);
}

static void test_moves_transfer_ownership() {
    hh::heap heap(1u << 20);
    hh::unique_handle<enemy> a = heap.make<enemy>(10, 0.f, 0.f);
    hh_handle ra = a.raw();
    hh::unique_handle<enemy> b(std::move(a));
    CHECK(!a && a.raw().id == 0 && b.raw().id == ra.id && b->hp == 10);
    CHECK(live(heap.get(), ra) && heap.stats().live_blocks == 1);   /* moving did not free */

    hh::unique_handle<enemy> c = heap.make<enemy>(20, 0.f, 0.f);
    hh_handle rc = c.raw();
    c = std::move(b);                                 /* c's old block is freed, b's moves in */
    CHECK(!b && c.raw().id == ra.id && c->hp == 10);
    CHECK(!live(heap.get(), rc) && heap.stats().live_blocks == 1);
    hh::unique_handle<enemy> &alias = c;
    c = std::move(alias);                             /* self-move keeps the block */
    CHECK(c && c->hp == 10);
}

static void test_get_follows_defrag() {
    hh::heap heap(1u << 20);
    hh::unique_handle<enemy> first = heap.make<enemy>(1, 0.f, 0.f);
    hh::unique_handle<enemy> second = heap.make<enemy>(2, 3.f, 4.f);
    hh::handle<enemy> view = second.view();
    enemy *before = second.get();
    first.reset();                                    /* a hole below `second` */
    uint64_t moves0 = heap.stats().total_moves;
    hh_defrag_report rep = heap.defrag_step(16);
    CHECK(rep.moves >= 1 && heap.stats().total_moves > moves0);
    CHECK(second.get() != before);                    /* the block moved down into the hole */
    CHECK(second.get() == hh_deref(heap.get(), second.raw()) && view.get() == second.get());
    CHECK(second->hp == 2 && second->x == 3.f && std::strcmp(second->name, "grunt") == 0);
    CHECK(heap.check() == HH_OK);
}

static void test_mark_scope() {
    hh_memstack *ms = nullptr;
    CHECK(hh_memstack_create(nullptr, &ms) == HH_OK);
    hh_memstack_info info;
    CHECK(hh_memstack_info_get(ms, &info) == HH_OK);
    size_t used0 = info.used_bytes;
    {
        hh::mark_scope outer(ms);
        CHECK(outer.open() && outer.stack() == ms);
        int *xs = outer.alloc_array<int>(1000);
        CHECK(xs != nullptr && xs[0] == 0 && xs[999] == 0);
        {
            hh::mark_scope inner(ms);
            CHECK(inner.alloc(4096) != nullptr);
            CHECK(outer.pop() == HH_E_MARK_ORDER && outer.open());   /* LIFO: inner is still open */
        }
        CHECK(hh_memstack_info_get(ms, &info) == HH_OK && info.used_bytes >= 1000 * sizeof(int));
        CHECK(info.open_marks == 1);
    }
    CHECK(hh_memstack_info_get(ms, &info) == HH_OK && info.used_bytes == used0 && info.open_marks == 0);
    {
        hh::mark_scope early(ms);
        CHECK(early.alloc(64, 64) != nullptr);
        CHECK(early.pop() == HH_OK && !early.open());   /* popped early: the destructor does nothing */
    }
    CHECK(hh_memstack_info_get(ms, &info) == HH_OK && info.open_marks == 0);
    hh_memstack_destroy(ms);

    {
        hh::mark_scope on_thread;                          /* default: this thread's own stack */
        CHECK(on_thread.stack() == hh_memstack_thread() && on_thread.alloc(32) != nullptr);
    }
    hh_memstack_thread_release();
}

int main() {
    hh_set_error_handler(capture, nullptr);
    test_heap_raii();
    test_typed_handle_and_make();
    test_owning_handle_frees();
    test_moves_transfer_ownership();
    test_get_follows_defrag();
    test_mark_scope();
    hh_binned_thread_flush();
    return cxx_check_summary("cxx_hpp");
}
