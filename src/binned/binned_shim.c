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

#define SHIM_API __attribute__((visibility("default")))
#define SHIM_FLAGS (HHI_QUIET_FOREIGN | HHI_QUIET_OOM)

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
