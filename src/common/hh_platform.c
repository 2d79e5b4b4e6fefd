/* hh_platform.c -- Linux implementation of the OS seam (see hh_platform.h). */
#if !defined(_GNU_SOURCE)
#  define _GNU_SOURCE 1       /* MAP_ANONYMOUS, madvise, mremap */
#endif
#include "hh_platform.h"

#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hh_meta.h"
#include "hh_track.h"

size_t hhi_os_page_size(void) {
    static atomic_size_t cached = 0;
    size_t p = atomic_load_explicit(&cached, memory_order_relaxed);
    if (p == 0) {
        long v = sysconf(_SC_PAGESIZE);
        p = v > 0 ? (size_t)v : 4096u;
        atomic_store_explicit(&cached, p, memory_order_relaxed);
    }
    return p;
}

/* mmap of size bytes at alignment align with the given protection and flags. */
static void *map_aligned(size_t size, size_t align, int prot, int flags) {
    if (hhi_fault()) return NULL;
    size_t page = hhi_os_page_size();
    if (size == 0 || size > SIZE_MAX / 2) return NULL;
    size = hh_align_up(size, page);
    if (align <= page) {
        void *p = mmap(NULL, size, prot, flags, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    /* First exactly size bytes: where the kernel put them, or at the aligned
       address just below or above (mappings grow downwards, so the range
       below a fresh mapping is usually free). Only if that fails, over-map
       by align and trim both ends -- which needs size + align of address
       space for a moment: under a tight RLIMIT_AS (ulimit -v) a 4 MiB span
       would need 8 MiB and fail while smaller mappings still succeed. */
    void *first = mmap(NULL, size, prot, flags, -1, 0);
    if (first == MAP_FAILED) return NULL;
    if (((uintptr_t)first & (align - 1)) == 0) return first;
    munmap(first, size);
    uintptr_t down = (uintptr_t)first & ~(uintptr_t)(align - 1);
    uintptr_t hints[2] = { down, down + align };
    for (int i = 0; i < 2; i++) {
        void *q = mmap((void *)hints[i], size, prot, flags, -1, 0);
        if (q == (void *)hints[i]) return q;
        if (q != MAP_FAILED) munmap(q, size);
    }
    if (size > SIZE_MAX - align) return NULL;
    size_t span = size + align;
    char *raw = mmap(NULL, span, prot, flags, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *p = (char *)hh_align_up_ptr((uintptr_t)raw, align);
    size_t lead = (size_t)(p - raw), tail = span - lead - size;
    if (lead) munmap(raw, lead);
    if (tail) munmap(p + size, tail);
    return p;
}

void *hhi_os_map(size_t size, size_t align) {
    return map_aligned(size, align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
}

void *hhi_os_reserve(size_t size, size_t align, bool readable) {
    return map_aligned(size, align, readable ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
}

bool hhi_os_commit(void *p, size_t size) {
    if (size == 0) return true;
    if (hhi_fault()) return false;
    return mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
}

void hhi_os_hugepages(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    if (size) (void)madvise(p, hh_align_up(size, hhi_os_page_size()), MADV_HUGEPAGE);   /* a hint: may be refused */
#else
    (void)p;
    (void)size;
#endif
}

void hhi_os_unmap(void *p, size_t size) {
    if (p == NULL) return;
    size = hh_align_up(size, hhi_os_page_size());
    /* ASan keeps shadow bytes across munmap: un-poison first, or the next
       mapping at this address would be reported as use-after-poison. */
    hh_track_undefined(p, size);
    munmap(p, size);
}

void hhi_os_unmap_untracked(void *p, size_t size) {
    if (p != NULL) munmap(p, hh_align_up(size, hhi_os_page_size()));
}

bool hhi_os_move(void *from, size_t size, void *to) {
    if (hhi_fault()) return false;
    /* As for munmap: ASan would keep the poison of the old range (and not
       move it with the pages). */
    hh_track_undefined(from, size);
    hh_track_undefined(to, size);
    return mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to;
}

bool hhi_os_decommit(void *p, size_t size) {
    if (size == 0) return true;
    if (hhi_fault()) return false;
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
