/* binned_shim.c -- LD_PRELOAD malloc replacement on top of the binned
 * allocator; built into build/libhheap_malloc.so only (never into libhheap).
 *
 * Traps handled:
 *  - allocation before TLS/caches are ready: the cacheless path serves it
 *    (hhi_tcache_get returns NULL while a cache is being made);
 *  - fork: binned_page.c registers pthread_atfork handlers that hold every
 *    allocator lock across fork(), so the child never inherits a held lock;
 *  - pointers from another allocator reaching free(): the registry says they
 *    are not ours; free() ignores them silently, realloc() hands them to
 *    glibc's __libc_realloc when that exists (never touching their memory);
 *  - aligned calls: glibc's rules (memalign/aligned_alloc round an alignment
 *    up to a power of two, posix_memalign wants one; EINVAL only for a bad
 *    alignment, ENOMEM for the rest);
 *  - out of memory: errno = ENOMEM and NULL, no message. A double free is
 *    reported through the hheap error handler (one line on stderr) and ignored.
 */
#include "binned_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../common/hh_error.h"

#define SHIM_API __attribute__((visibility("default")))

/* ---------------------------------------------------------------------------
   Options, read once at load from the environment:
     HHEAP_VERBOSE=1      one line when the shim becomes active, and every
                          misuse reported (foreign pointers too, which are
                          otherwise ignored silently)
     HHEAP_SHOW_STATS=1   a table of the allocator's statistics at exit
     HHEAP_LEAK_REPORT=1  blocks still live at exit: count, bytes, the first few
     HHEAP_DECAY_MS=n     decay period (default 250; 0: memory goes back only
                          when the program calls hh_binned_trim)
     HHEAP_PURGE_THREAD=0 no background purge thread (default: one, started
                          once decay holds 1 MiB of freed memory, so freed
                          memory goes back in an idle program too)
     HHEAP_LARGE_HUGEPAGES=1  large blocks' mappings advised to use
                          transparent huge pages (hh_binned_set_large_hugepages;
                          default off: a program that touches big blocks
                          sparsely would keep 2 MiB resident per spot)
     HHEAP_SMALL_HUGEPAGES=1  small blocks' spans advised to use transparent
                          huge pages (hh_binned_set_small_hugepages; default
                          off: fewer TLB misses for scattered blocks, a few
                          MB more resident at the peak)
--------------------------------------------------------------------------- */
enum { SHIM_DECAY_MS_DEFAULT = 250, SHIM_LEAKS_LISTED = 10 };

static struct {
    bool verbose, show_stats, leak_report;
    int fd;                    /* a copy of stderr taken at load: programs may close 2 before exit */
} shim_opt = { .fd = 2 };

/* Flags of every shim call: quiet about foreign pointers (another
   allocator's, before the shim was active) and out of memory (errno says it),
   unless HHEAP_VERBOSE. Set once, before main. */
static unsigned shim_flags = HHI_QUIET_FOREIGN | HHI_QUIET_OOM;
#define SHIM_FLAGS shim_flags

/* glibc's own realloc, for pointers glibc handed out before we could. */
extern void *__libc_realloc(void *p, size_t size) __attribute__((weak));

SHIM_API void *malloc(size_t size);
SHIM_API void  free(void *p);
SHIM_API void *calloc(size_t count, size_t size);
SHIM_API void *realloc(void *p, size_t size);
SHIM_API void *reallocarray(void *p, size_t count, size_t size);
SHIM_API int   posix_memalign(void **out, size_t align, size_t size);
SHIM_API void *aligned_alloc(size_t align, size_t size);
SHIM_API void *memalign(size_t align, size_t size);
SHIM_API void *valloc(size_t size);
SHIM_API void *pvalloc(size_t size);
SHIM_API size_t malloc_usable_size(void *p);

static inline void *set_errno(void *p) {
    if (p == NULL) errno = ENOMEM;
    return p;
}

/* malloc's slow path: the errno check lives here so malloc itself stays a
   leaf (no stack frame) ending in a tail call. */
static HH_NOINLINE HH_COLD void *shim_malloc_slow(size_t size, unsigned flags) {
    return set_errno(hhi_binned_malloc_slow(size, flags));
}

void *malloc(size_t size) { return hhi_bmalloc_fast_with(size, SHIM_FLAGS, shim_malloc_slow); }

void free(void *p) { hhi_bfree_fast(p, SHIM_FLAGS); }

void *calloc(size_t count, size_t size) { return set_errno(hhi_binned_calloc(count, size, SHIM_FLAGS)); }

/* Ours, or not ours at all (another allocator's or garbage). */
static bool shim_foreign(void *p) {
    uintptr_t a = (uintptr_t)p;
    if (!atomic_load_explicit(&hhi_bg.ready, memory_order_acquire) || (a >> HHI_ADDR_BITS) != 0) return true;
    return hhi_registry_get(a) == HHI_REG_NONE;
}

void *realloc(void *p, size_t size) {
    if (p != NULL && shim_foreign(p)) return __libc_realloc ? __libc_realloc(p, size) : set_errno(NULL);
    void *q = hhi_binned_realloc(p, size, SHIM_FLAGS);
    if (q == NULL && size != 0) errno = ENOMEM;
    return q;
}

void *reallocarray(void *p, size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) return set_errno(NULL);
    return realloc(p, count * size);
}

/* memalign and aligned_alloc as glibc (2.36) serves them: an alignment below
   16 is malloc's, one that is not a power of two is rounded up to the next
   (memalign(24, n) is 32-aligned), one above SIZE_MAX / 2 + 1 is EINVAL; the
   rest either succeeds or fails with ENOMEM. */
static void *shim_memalign(size_t align, size_t size) {
    if (align > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    if (align < 16) align = 16;
    if (!hh_is_pow2(align)) {
        size_t a = 32;
        while (a < align) a <<= 1;
        align = a;
    }
    if (align > HHI_MAX_ALIGN) return set_errno(NULL);
    return set_errno(hhi_binned_memalign(align, size, SHIM_FLAGS));
}

int posix_memalign(void **out, size_t align, size_t size) {
    if (!hh_is_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
    int saved = errno;          /* posix_memalign reports through its result only */
    void *p = shim_memalign(align, size);
    errno = saved;
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t size) { return shim_memalign(align, size); }
void *memalign(size_t align, size_t size) { return shim_memalign(align, size); }

void *valloc(size_t size) { return set_errno(hhi_binned_memalign(hhi_os_page_size(), size, SHIM_FLAGS)); }

void *pvalloc(size_t size) {
    size_t page = hhi_os_page_size();
    if (size > SIZE_MAX - page) return set_errno(NULL);
    return set_errno(hhi_binned_memalign(page, hh_align_up(size ? size : 1, page), SHIM_FLAGS));
}

size_t malloc_usable_size(void *p) {
    if (p == NULL) return 0;
    hh_status st;
    return hhi_binned_usable(p, &st);
}

/* ---------------------------------------------------------------------------
   Load-time options and exit reports. Output goes to stderr with write(2)
   from stack buffers: nothing here allocates (we are malloc).
--------------------------------------------------------------------------- */
static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v != NULL && v[0] == '1' && v[1] == 0;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    if (n > 0) (void)!write(shim_opt.fd, line, (size_t)n);
}

static void shim_show_stats(void) {
    hh_binned_stats st;
    hh_binned_stats_get(&st);
    say("hheap: binned statistics at exit (pid %d)\n", (int)getpid());
    say("hheap:  class   block     allocs  hit%%     live     live KiB  pages\n");
    for (int c = 0; c < HH_BINNED_CLASS_COUNT; c++) {
        const hh_binned_class_stats *k = &st.classes[c];
        if (k->allocs == 0 && k->pages == 0) continue;
        say("hheap:  %5d %7zu %10llu %5.1f %8llu %11llu %6u\n", c, k->block_size, (unsigned long long)k->allocs,
            100.0 * k->cache_hit_rate, (unsigned long long)k->live_blocks,
            (unsigned long long)(k->live_bytes >> 10), k->pages);
    }
    say("hheap:  small live %llu blocks, %llu KiB; large live %llu blocks, %llu KiB (cached %zu KiB)\n",
        (unsigned long long)st.small_live_blocks, (unsigned long long)(st.small_live_bytes >> 10),
        (unsigned long long)st.large_live_blocks, (unsigned long long)(st.large_live_bytes >> 10),
        st.large_cached_bytes >> 10);
    say("hheap:  spans %u, pages in classes %u, free %u (decommitted %u), thread caches %u, mapped %zu KiB\n",
        st.spans, st.pages_in_classes, st.pages_free, st.pages_decommitted, st.thread_caches, st.mapped_bytes >> 10);
}

typedef struct leak_acc { unsigned listed; } leak_acc;
static void shim_leak_one(const void *block, size_t size, void *user) {
    leak_acc *a = user;
    if (a->listed++ < SHIM_LEAKS_LISTED) say("hheap:  live at exit: %p, %zu bytes\n", block, size);
}

static void shim_at_exit(void) {
    if (shim_opt.show_stats) shim_show_stats();
    if (shim_opt.leak_report) {
        leak_acc a = { 0 };
        size_t bytes = 0;
        size_t n = hh_binned_leak_report(shim_leak_one, &a, &bytes);
        say("hheap: leak report: %zu blocks, %zu bytes live at exit%s\n", n, bytes,
            n > SHIM_LEAKS_LISTED ? " (first ones listed above)" : "");
    }
}

__attribute__((constructor)) static void shim_load(void) {
    shim_opt.verbose = env_on("HHEAP_VERBOSE");
    shim_opt.show_stats = env_on("HHEAP_SHOW_STATS");
    shim_opt.leak_report = env_on("HHEAP_LEAK_REPORT");
    if (shim_opt.verbose) shim_flags = HHI_QUIET_OOM;
    uint32_t decay = SHIM_DECAY_MS_DEFAULT;
    const char *d = getenv("HHEAP_DECAY_MS");
    if (d != NULL && *d != 0) {
        char *end = NULL;
        unsigned long v = strtoul(d, &end, 10);
        if (*end == 0 && v <= 60000) decay = (uint32_t)v;
        else if (shim_opt.verbose) say("hheap: HHEAP_DECAY_MS=%s ignored (0..60000)\n", d);
    }
    hhi_binned_set_decay(decay, false);   /* no clock read at load (hh_platform.h: hhi_os_entropy) */
    const char *pt = getenv("HHEAP_PURGE_THREAD");
    bool purge_thread = !(pt != NULL && pt[0] == '0' && pt[1] == 0);
    purge_thread = purge_thread && decay != 0;
    hh_binned_set_purge_thread(purge_thread);
    bool huge = env_on("HHEAP_LARGE_HUGEPAGES");
    hh_binned_set_large_hugepages(huge);
    bool small_huge = env_on("HHEAP_SMALL_HUGEPAGES");
    hh_binned_set_small_hugepages(small_huge);
    if (shim_opt.show_stats || shim_opt.leak_report) {
        int fd = fcntl(2, F_DUPFD_CLOEXEC, 10);
        if (fd >= 0) shim_opt.fd = fd;
        atexit(shim_at_exit);
    }
    if (shim_opt.verbose)
        say("hheap: libhheap_malloc.so active in pid %d (decay %u ms%s%s%s%s%s)\n", (int)getpid(), (unsigned)decay,
            purge_thread ? ", purge thread" : "", huge ? ", huge pages for large blocks" : "",
            small_huge ? ", huge pages for small blocks" : "",
            shim_opt.show_stats ? ", stats at exit" : "", shim_opt.leak_report ? ", leak report at exit" : "");
}
