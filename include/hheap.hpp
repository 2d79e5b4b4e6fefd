/* hheap.hpp -- thin C++ layer over hheap (C++11 and later): a RAII heap, typed
 * handles, a move-only owning handle and a mark-scope guard.
 *
 * How to use
 *   hh::heap heap(64u << 20);                        // hh_heap_create; check heap.status()
 *   hh::unique_handle<enemy> e = heap.make<enemy>(); // hh_alloc_ex + placement new
 *   e->hp = 100;                                     // get() derefs: valid until the next
 *   heap.defrag_step(16);                            //   defrag step, resize or free,
 *   e->hp -= 1;                                      //   so deref again after one
 *   { hh::mark_scope scratch; int *tmp = scratch.alloc_array<int>(256); ... }  // popped here
 *
 * Nothing throws: a failed create leaves the heap empty with status() telling
 * why; a failed allocation gives a null handle (get() == nullptr), with the
 * library's error handler told as in C. Objects in the relocatable heap are
 * moved with memmove, so T must be trivially copyable (static-asserted).
 * Every type here is a thin wrapper over the C handle or pointer: get()/raw()
 * reach the C API for anything this header does not wrap.
 */
#ifndef HHEAP_HPP
#define HHEAP_HPP

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "hheap.h"

namespace hh {

namespace detail {
/* The alignment hh_alloc_ex is asked for: T's own, at least the heap's 16. */
template <class T> constexpr std::size_t align_of() { return alignof(T) < 16 ? 16 : alignof(T); }
/* T(args...) where T has such a constructor, else T{args...} (aggregates). */
template <class T, class... Args> void construct(std::true_type, void *p, Args &&...args) {
    ::new (p) T(std::forward<Args>(args)...);
}
template <class T, class... Args> void construct(std::false_type, void *p, Args &&...args) {
    ::new (p) T{std::forward<Args>(args)...};
}
} // namespace detail

/* A typed view of a heap handle: does not own the block (copyable, like the C
   handle). get() derefs through the heap, so it follows every move. */
template <class T> class handle {
public:
    handle() noexcept : heap_(nullptr), h_(HH_NULL) {}
    handle(hh_heap *heap, hh_handle h) noexcept : heap_(heap), h_(h) {}

    /* The block's current address; nullptr if null or stale. */
    T *get() const noexcept { return heap_ && !hh_is_null(h_) ? static_cast<T *>(hh_deref(heap_, h_)) : nullptr; }
    T *operator->() const noexcept { return get(); }
    T &operator*() const noexcept { return *get(); }
    T &operator[](std::size_t i) const noexcept { return get()[i]; }
    /* Elements the block holds (usable bytes / sizeof(T)); 0 if stale. */
    std::size_t count() const noexcept { return heap_ ? hh_size(heap_, h_) / sizeof(T) : 0; }

    hh_handle raw() const noexcept { return h_; }
    hh_heap *heap() const noexcept { return heap_; }
    bool is_null() const noexcept { return hh_is_null(h_); }
    explicit operator bool() const noexcept { return get() != nullptr; }

    friend bool operator==(const handle &a, const handle &b) noexcept {
        return a.heap_ == b.heap_ && hh_handle_eq(a.h_, b.h_);
    }
    friend bool operator!=(const handle &a, const handle &b) noexcept { return !(a == b); }

private:
    hh_heap  *heap_;
    hh_handle h_;
};

/* Owns one block: frees it on destruction (and on reset or move-assignment);
   moving transfers the ownership and leaves the source null. */
template <class T> class unique_handle {
public:
    unique_handle() noexcept {}
    /* Takes ownership of h (a block of heap). */
    unique_handle(hh_heap *heap, hh_handle h) noexcept : h_(heap, h) {}
    explicit unique_handle(handle<T> h) noexcept : h_(h) {}
    ~unique_handle() { reset(); }

    unique_handle(const unique_handle &) = delete;
    unique_handle &operator=(const unique_handle &) = delete;
    unique_handle(unique_handle &&o) noexcept : h_(o.release()) {}
    unique_handle &operator=(unique_handle &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = o.release();
        }
        return *this;
    }

    T *get() const noexcept { return h_.get(); }
    T *operator->() const noexcept { return h_.get(); }
    T &operator*() const noexcept { return *h_.get(); }
    T &operator[](std::size_t i) const noexcept { return h_[i]; }
    std::size_t count() const noexcept { return h_.count(); }
    explicit operator bool() const noexcept { return h_.get() != nullptr; }

    /* The non-owning view (stays valid while this owner holds the block). */
    handle<T> view() const noexcept { return h_; }
    hh_handle raw() const noexcept { return h_.raw(); }
    hh_heap *heap() const noexcept { return h_.heap(); }

    /* Gives up ownership without freeing; this becomes null. */
    handle<T> release() noexcept {
        handle<T> h = h_;
        h_ = handle<T>();
        return h;
    }
    /* Frees the block now (hh_free's status; HH_OK when already null). */
    hh_status reset() noexcept {
        hh_status s = HH_OK;
        if (!h_.is_null()) s = hh_free(h_.heap(), h_.raw());
        h_ = handle<T>();
        return s;
    }

private:
    handle<T> h_;
};

/* Allocates one T in heap and constructs it from args (T(args...), or T{args...}
   for an aggregate); a null owner on failure. */
template <class T, class... Args> unique_handle<T> make_unique_handle(hh_heap *heap, Args &&...args) {
    static_assert(std::is_trivially_copyable<T>::value, "blocks of the relocatable heap move with memmove");
    hh_handle h = hh_alloc_ex(heap, sizeof(T), detail::align_of<T>(), 0);
    void *p = hh_is_null(h) ? nullptr : hh_deref(heap, h);
    if (p == nullptr) return unique_handle<T>();
    detail::construct<T>(typename std::is_constructible<T, Args...>::type(), p, std::forward<Args>(args)...);
    return unique_handle<T>(heap, h);
}

/* Allocates n value-initialised Ts (n > 0); a null owner on failure. */
template <class T> unique_handle<T> make_unique_array(hh_heap *heap, std::size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "blocks of the relocatable heap move with memmove");
    if (n == 0 || n > static_cast<std::size_t>(-1) / sizeof(T)) return unique_handle<T>();
    hh_handle h = hh_alloc_ex(heap, n * sizeof(T), detail::align_of<T>(), 0);
    T *p = hh_is_null(h) ? nullptr : static_cast<T *>(hh_deref(heap, h));
    if (p == nullptr) return unique_handle<T>();
    for (std::size_t i = 0; i < n; i++) ::new (static_cast<void *>(p + i)) T();
    return unique_handle<T>(heap, h);
}

/* Owns an hh_heap: created by the constructor, destroyed by the destructor.
   Move-only. A failed create leaves it empty (get() == nullptr, status() why). */
class heap {
public:
    heap() noexcept : h_(nullptr), status_(HH_E_INVALID_ARG) {}
    explicit heap(std::size_t capacity) noexcept : h_(nullptr) {
        hh_heap_desc d = hh_heap_desc();
        d.capacity = capacity;
        status_ = hh_heap_create(&d, &h_);
    }
    explicit heap(const hh_heap_desc &desc) noexcept : h_(nullptr) { status_ = hh_heap_create(&desc, &h_); }
    /* Adopts a heap made with hh_heap_create. */
    static heap adopt(hh_heap *h) noexcept {
        heap r;
        r.h_ = h;
        r.status_ = h ? HH_OK : HH_E_INVALID_ARG;
        return r;
    }
    ~heap() { hh_heap_destroy(h_); }

    heap(const heap &) = delete;
    heap &operator=(const heap &) = delete;
    heap(heap &&o) noexcept : h_(o.h_), status_(o.status_) {
        o.h_ = nullptr;
        o.status_ = HH_E_INVALID_ARG;
    }
    heap &operator=(heap &&o) noexcept {
        if (this != &o) {
            hh_heap_destroy(h_);
            h_ = o.h_;
            status_ = o.status_;
            o.h_ = nullptr;
            o.status_ = HH_E_INVALID_ARG;
        }
        return *this;
    }

    hh_heap *get() const noexcept { return h_; }
    /* The create status (HH_OK for a live heap). */
    hh_status status() const noexcept { return status_; }
    explicit operator bool() const noexcept { return h_ != nullptr; }
    /* Gives up ownership: the caller destroys the heap. */
    hh_heap *release() noexcept {
        hh_heap *h = h_;
        h_ = nullptr;
        status_ = HH_E_INVALID_ARG;
        return h;
    }

    template <class T, class... Args> unique_handle<T> make(Args &&...args) {
        return make_unique_handle<T>(h_, std::forward<Args>(args)...);
    }
    template <class T> unique_handle<T> make_array(std::size_t n) { return make_unique_array<T>(h_, n); }

    hh_defrag_report defrag_step(uint32_t max_moves) noexcept { return hh_defrag_step(h_, max_moves); }
    hh_defrag_report defrag_full() noexcept { return hh_defrag_full(h_); }
    hh_heap_stats stats() const noexcept {
        hh_heap_stats s = hh_heap_stats();
        hh_heap_stats_get(h_, &s);
        return s;
    }
    hh_status check() const noexcept { return hh_heap_check(h_); }

private:
    hh_heap  *h_;
    hh_status status_;
};

/* A mark on a mark stack for the lifetime of a scope: everything allocated on
   the stack after it is given back when the scope ends (or at pop()). Neither
   copyable nor movable: the open mark is linked into the stack by address. */
class mark_scope {
public:
    /* Pushes a mark on ms; the calling thread's own stack by default. */
    explicit mark_scope(hh_memstack *ms = hh_memstack_thread()) noexcept : ms_(ms), mark_() { hh_mark_push(ms, &mark_); }
    ~mark_scope() { hh_mark_scope_end(&mark_); }
    mark_scope(const mark_scope &) = delete;
    mark_scope &operator=(const mark_scope &) = delete;

    /* Pops now (hh_mark_pop's status: HH_E_MARK_ORDER while an inner mark is open). */
    hh_status pop() noexcept { return hh_mark_pop(&mark_); }
    bool open() const noexcept { return mark_.ms != nullptr; }
    hh_memstack *stack() const noexcept { return ms_; }

    void *alloc(std::size_t size, std::size_t align = 16) noexcept { return hh_memstack_alloc(ms_, size, align); }
    /* n value-initialised Ts on the stack; nullptr on failure. */
    template <class T> T *alloc_array(std::size_t n) noexcept {
        static_assert(std::is_trivially_destructible<T>::value, "a pop runs no destructors");
        if (n == 0 || n > static_cast<std::size_t>(-1) / sizeof(T)) return nullptr;
        T *p = static_cast<T *>(hh_memstack_alloc(ms_, n * sizeof(T), alignof(T)));
        if (p != nullptr)
            for (std::size_t i = 0; i < n; i++) ::new (static_cast<void *>(p + i)) T();
        return p;
    }

private:
    hh_memstack *ms_;
    hh_mark      mark_;
};

} // namespace hh

#endif /* HHEAP_HPP */
