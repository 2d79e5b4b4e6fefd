/* hh_platform.c -- Linux implementation of the OS seam (see hh_platform.h). */
#if !defined(_GNU_SOURCE)
#  define _GNU_SOURCE 1       /* MAP_ANONYMOUS, madvise, mremap */
#endif
#include "hh_platform.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hh_meta.h"
#include "hh_track.h"

size_t hhi_os_page_size(void) {
    static atomic_size_t cached = 0;
    size_t p = atomic_load_explicit(&cached, memory_order_relaxed);
    if (p == 0) {
        /* The auxiliary vector, as sysconf reads it: getauxval lies in
           libc's text beside mmap, which the library calls anyway, sysconf
           in a window of its own (hh_platform.h: hhi_os_entropy). */
        unsigned long v = getauxval(AT_PAGESZ);
        if (v == 0) {
            long sv = sysconf(_SC_PAGESIZE);
            v = sv > 0 ? (unsigned long)sv : 4096u;
        }
        p = (size_t)v;
        atomic_store_explicit(&cached, p, memory_order_relaxed);
    }
    return p;
}

uint64_t hhi_os_entropy(void) {
    uint64_t x = 0;
#if defined(SYS_getrandom)
    /* syscall() sits beside mmap in libc's text, getrandom() elsewhere. Not
       AT_RANDOM: glibc's stack and pointer guards are made of those bytes.
       errno kept: the first malloc calls this, and a refusal (ENOSYS, a
       seccomp EPERM) must not show through a malloc that succeeds. */
    int saved = errno;
    long got = syscall(SYS_getrandom, &x, sizeof x, 1 /* GRND_NONBLOCK */);
    errno = saved;
    if (got == (long)sizeof x) return x;
#endif
    return hhi_now_ns();
}

#if HH_TESTING
_Thread_local uint64_t hhi_test_os_maps_here, hhi_test_os_unmaps_here;
_Thread_local uint64_t hhi_test_os_decommits_here;
_Atomic(hhi_test_decommit_hook) hhi_test_os_decommit_hook;
#endif

/* The map calls of map_aligned and every unmap, counted per thread under
   HH_TESTING (a purge thread's unmaps are not the test's). */
static void *os_mmap(void *at, size_t size, int prot, int flags) {
    HHI_TEST_COUNT_HERE(hhi_test_os_maps_here);
    return mmap(at, size, prot, flags, -1, 0);
}

static void os_munmap(void *p, size_t size) {
    HHI_TEST_COUNT_HERE(hhi_test_os_unmaps_here);
    munmap(p, size);
}

/* Maps [at, at+size) only if that range is free: with MAP_FIXED_NOREPLACE
   a taken range fails without creating anything (one syscall). Kernels
   before 4.17 ignore the flag and treat `at` as a hint: a mapping made
   elsewhere is undone. */
static bool map_exact(uintptr_t at, size_t size, int prot, int flags) {
#ifdef MAP_FIXED_NOREPLACE
    flags |= MAP_FIXED_NOREPLACE;
#endif
    void *q = os_mmap((void *)at, size, prot, flags);
    if (q == (void *)at) return true;
    if (q != MAP_FAILED) os_munmap(q, size);
    return false;
}

/* Base of the last aligned mapping map_aligned made: the kernel hands out
   addresses top-down, so the aligned range just below it is usually free
   and the next span or large block can go there in a single mmap. Only a
   hint (any thread may overwrite it; map_exact never takes a used range).
   Forgotten when that mapping goes (hint_forget): kept, a program that maps
   and unmaps one big block over and over would walk down the address space
   a block at a time and never reuse the range it gave back. */
static _Atomic uintptr_t last_aligned;

/* [p, p + size) is unmapped or moved away: if the hint lies in it, the
   kernel's placement decides the next mapping again. */
static void hint_forget(const void *p, size_t size) {
    uintptr_t last = atomic_load_explicit(&last_aligned, memory_order_relaxed);
    if (last - (uintptr_t)p < size)
        atomic_compare_exchange_strong_explicit(&last_aligned, &last, 0, memory_order_relaxed, memory_order_relaxed);
}

/* The highest mapping start at or below `at` whose address `skew` bytes in
   is a multiple of mask + 1; 0 if there is none above address 0. */
static uintptr_t skew_down(uintptr_t at, uintptr_t mask, size_t skew) {
    uintptr_t aligned = (at + skew) & ~mask;
    return aligned > skew ? aligned - skew : 0;
}

/* mmap of size bytes with the address `skew` bytes into the mapping a
   multiple of align (skew 0: the mapping itself aligned; skew < align), with
   the given protection and flags.
   Step 2 holds up to size + align - page bytes of address space for a
   moment and step 3 size + align; each failing leaves nothing behind, and
   the last step needs exactly size bytes: under a tight RLIMIT_AS (ulimit
   -v) a 4 MiB span must not need 8 MiB of address space, or small blocks
   fail while bigger mappings of exactly their size still succeed. */
static void *map_aligned(size_t size, size_t align, size_t skew, int prot, int flags) {
    if (hhi_fault()) return NULL;
    size_t page = hhi_os_page_size();
    if (size == 0 || size > SIZE_MAX / 2) return NULL;
    size = hh_align_up(size, page);
    if (align <= page) {
        void *p = os_mmap(NULL, size, prot, flags);
        return p == MAP_FAILED ? NULL : p;
    }
    uintptr_t mask = (uintptr_t)(align - 1), done = 0;
    /* 1. Just below the last one: one mmap in the common case. */
    uintptr_t last = atomic_load_explicit(&last_aligned, memory_order_relaxed);
    if (last > size + align + skew) {
        uintptr_t at = skew_down(last - size, mask, skew);
        if (at != 0 && map_exact(at, size, prot, flags)) done = at;
    }
    /* 2. Where the kernel puts it: aligned by luck, or extended down to the
       aligned address below it (that range is usually free: mappings grow
       downwards) and the surplus top cut off -- 2 mmap and 1 munmap. */
    uintptr_t first = 0, below = 0;
    if (done == 0) {
        void *f = os_mmap(NULL, size, prot, flags);
        if (f == MAP_FAILED) return NULL;
        first = (uintptr_t)f;
        below = skew_down(first, mask, skew);
        if (((first + skew) & mask) == 0) {
            done = first;
        } else if (below != 0 && map_exact(below, first - below, prot, flags)) {
            done = below;
            os_munmap((void *)(done + size), first - done);
        } else {
            os_munmap(f, size);
        }
    }
    /* 3. The range below was taken (the kernel filled a hole): over-map by
       align and trim both ends, or, when the address-space limit refuses
       that, exactly size bytes at the aligned addresses around the hole. */
    if (done == 0 && size <= SIZE_MAX - align) {
        size_t span = size + align;
        void *raw = os_mmap(NULL, span, prot, flags);
        if (raw != MAP_FAILED) {
            uintptr_t r = (uintptr_t)raw;
            done = ((r + skew + mask) & ~mask) - skew;
            size_t lead = (size_t)(done - r), tail = span - lead - size;
            if (lead) os_munmap(raw, lead);
            if (tail) os_munmap((void *)(done + size), tail);
        }
    }
    if (done == 0) {
        uintptr_t hints[2] = { below, below != 0 ? below + align : 0 };
        for (int i = 0; i < 2 && done == 0; i++)
            if (hints[i] != 0 && map_exact(hints[i], size, prot, flags)) done = hints[i];
    }
    if (done != 0) atomic_store_explicit(&last_aligned, done, memory_order_relaxed);
    return (void *)done;
}

void *hhi_os_map(size_t size, size_t align) {
    return map_aligned(size, align, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

void *hhi_os_map_skewed(size_t size, size_t align, size_t skew) {
    if (align > hhi_os_page_size()) skew &= align - 1;   /* only its remainder matters */
    return map_aligned(size, align, skew, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

void *hhi_os_reserve(size_t size, size_t align, bool readable) {
    return map_aligned(size, align, 0, readable ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
}

bool hhi_os_commit(void *p, size_t size) {
    if (size == 0) return true;
    if (hhi_fault()) return false;
    return mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
}

void hhi_os_hugepages(void *p, size_t size, bool on) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    if (size) (void)madvise(p, hh_align_up(size, hhi_os_page_size()), on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);   /* a hint: may be refused */
#else
    (void)p;
    (void)size;
    (void)on;
#endif
}

void hhi_os_unmap(void *p, size_t size) {
    if (p == NULL) return;
    size = hh_align_up(size, hhi_os_page_size());
    /* ASan keeps shadow bytes across munmap: un-poison first, or the next
       mapping at this address would be reported as use-after-poison. */
    hh_track_undefined(p, size);
    hint_forget(p, size);
    os_munmap(p, size);
}

void hhi_os_unmap_untracked(void *p, size_t size) {
    if (p == NULL) return;
    size = hh_align_up(size, hhi_os_page_size());
    hint_forget(p, size);
    os_munmap(p, size);
}

bool hhi_os_move(void *from, size_t size, void *to) {
    /* As for munmap: ASan would keep the poison of the old range (and not
       move it with the pages). */
    hh_track_undefined(from, size);
    hh_track_undefined(to, size);
    hint_forget(from, size);
    if (hhi_fault()) return false;   /* after the marks, as mremap failing leaves them */
    return mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to;
}

bool hhi_os_decommit(void *p, size_t size) {
    if (size == 0) return true;
#if HH_TESTING
    hhi_test_decommit_hook hook = atomic_load_explicit(&hhi_test_os_decommit_hook, memory_order_relaxed);
    if (hook) hook(p, size);
#endif
    if (hhi_fault()) return false;
    HHI_TEST_COUNT_HERE(hhi_test_os_decommits_here);
    return madvise(p, size, MADV_DONTNEED) == 0;
}

#if HH_TESTING
static _Atomic uint64_t test_clock_step, test_clock_now;
void hhi_test_clock_step(uint64_t step_ns) {
    atomic_store(&test_clock_now, 0);
    atomic_store(&test_clock_step, step_ns);
}
#endif

uint64_t hhi_now_ns(void) {
#if HH_TESTING
    uint64_t step = atomic_load_explicit(&test_clock_step, memory_order_relaxed);
    if (step != 0) return atomic_fetch_add(&test_clock_now, step) + step;
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t hhi_os_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long total = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &total, &resident);
    fclose(f);
    return n == 2 ? (size_t)resident * hhi_os_page_size() : 0;
}

void hhi_lock_init(hhi_lock *l) { pthread_mutex_init(&l->m, NULL); }
void hhi_lock_destroy(hhi_lock *l) { pthread_mutex_destroy(&l->m); }
