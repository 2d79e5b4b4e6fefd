// consumer.cpp -- the C++ side of the CMake consumer: hheap.hpp through hheap::hheap.
#include <cstdio>

#include <hheap.hpp>

struct thing { int value; };

int main() {
    hh::heap heap(1u << 20);
    hh::unique_handle<thing> gone = heap.make<thing>(thing{1});
    hh::unique_handle<thing> kept = heap.make<thing>(thing{42});
    gone.reset();
    heap.defrag_full();
    bool ok = kept && kept->value == 42 && heap.stats().live_blocks == 1;
    {
        hh::mark_scope scratch;
        ok = ok && scratch.alloc_array<int>(64) != nullptr;
    }
    hh_memstack_thread_release();
    std::printf("consumer_cpp: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
