/* pagepool.c -- the process-wide page pool that feeds the mark stacks.
 *
 * Two page kinds are cached: large pages (HH_PAGEPOOL_PAGE_SIZE, 64 KiB) and
 * small pages (one OS page) used for the first chunk of a stack, so a stack
 * that allocates a few bytes does not pin 64 KiB. Oversize chunks are mapped
 * for one request and unmapped when released; they are counted but never cached.
 *
 * Unlike Unreal's FPageAllocator the cache is bounded (cache_limit_bytes) and
 * can be trimmed, so memory given back by a level or a frame spike returns to
 * the OS.
 *
 * Invariants (all under pool.lock):
 *   P1  free[k] is a singly linked list of cached pages of kind k, linked through
 *       the first word of each page; its length is cached[k].
 *   P2  cached_bytes() <= cache_limit after every put / trim / limit change.
 *   P3  a cached page is no-access to memcheck except while its link word is
 *       read or written under the lock.
 */
#include "linear_internal.h"

#include <string.h>

#include "../common/hh_meta.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   State
--------------------------------------------------------------------------- */
enum { KIND_CACHED = 2 };  /* kinds with a cache: HH_LCHUNK_SMALL, HH_LCHUNK_PAGE */

typedef struct page_link { struct page_link *next; } page_link;

static struct {
    pthread_mutex_t lock;
    page_link *free[KIND_CACHED];     /* P1 */
    size_t     cached[KIND_CACHED];   /* pages in free[k] */
    size_t     used[KIND_CACHED];     /* pages handed out */
    size_t     oversize_count;        /* live oversize chunks */
    size_t     oversize_bytes;
    size_t     cache_limit;           /* bytes */
    uint64_t   os_maps, os_unmaps;
} pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cache_limit = HH_PAGEPOOL_DEFAULT_CACHE,
};

/* ---------------------------------------------------------------------------
   fork: the pool lock is held across fork(), so a child never inherits it
   taken by a thread that does not exist there (it would block forever on
   its first page). Registered before main, like the binned allocator's.
--------------------------------------------------------------------------- */
static void pool_fork_prepare(void) { pthread_mutex_lock(&pool.lock); }
static void pool_fork_release(void) { pthread_mutex_unlock(&pool.lock); }

#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor)) static void pool_register_atfork(void) {
    pthread_atfork(pool_fork_prepare, pool_fork_release, pool_fork_release);
}
#else
#  error "the page pool registers its fork handlers from a constructor (GCC or Clang)"
#endif

/* ---------------------------------------------------------------------------
   Helpers (caller holds pool.lock)
--------------------------------------------------------------------------- */
static size_t kind_size(int kind) {
    return kind == HH_LCHUNK_SMALL ? hhi_linear_small_page_size() : (size_t)HH_PAGEPOOL_PAGE_SIZE;
}

static size_t cached_bytes(void) {
    return pool.cached[HH_LCHUNK_SMALL] * kind_size(HH_LCHUNK_SMALL) +
           pool.cached[HH_LCHUNK_PAGE] * kind_size(HH_LCHUNK_PAGE);
}

/* Pops a cached page of the kind, NULL if none. */
static void *cache_pop(int kind) {
    page_link *p = pool.free[kind];
    if (p == NULL) return NULL;
    hh_track_defined(p, sizeof *p);
    pool.free[kind] = p->next;
    pool.cached[kind]--;
    hh_track_undefined(p, kind_size(kind));
    return p;
}

static void cache_push(void *page, int kind) {
    page_link *p = page;
    hh_track_undefined(p, sizeof *p);
    p->next = pool.free[kind];
    hh_track_noaccess(p, kind_size(kind));
    pool.free[kind] = p;
    pool.cached[kind]++;
}

static void os_unmap(void *p, size_t size) {
    hh_track_undefined(p, size);  /* leave no no-access marks behind on a later mapping here */
    hhi_os_unmap(p, size);
    pool.os_unmaps++;
}

/* Unmaps cached pages, large first, until at most keep bytes stay cached.
   Returns the bytes unmapped. */
static size_t trim_locked(size_t keep) {
    size_t released = 0;
    for (int kind = HH_LCHUNK_PAGE; kind >= HH_LCHUNK_SMALL; kind--) {
        while (cached_bytes() > keep && pool.free[kind] != NULL) {
            void *p = cache_pop(kind);
            os_unmap(p, kind_size(kind));
            released += kind_size(kind);
        }
    }
    return released;
}

/* ---------------------------------------------------------------------------
   Internal interface
--------------------------------------------------------------------------- */
size_t hhi_linear_small_page_size(void) {
    size_t os = hhi_os_page_size();
    return os < 1024 ? 1024 : os;
}

void *hhi_linear_page_get(int kind, size_t size) {
    if (hhi_fault()) return NULL;  /* every acquisition is a fault point, cached or not */
    void *p = NULL;
    if (kind != HH_LCHUNK_OVERSIZE) {
        size = kind_size(kind);
        pthread_mutex_lock(&pool.lock);
        p = cache_pop(kind);
        if (p != NULL) pool.used[kind]++;
        pthread_mutex_unlock(&pool.lock);
        if (p != NULL) return p;
    }
    p = hhi_os_map(size, 0);
    if (p == NULL) return NULL;
    pthread_mutex_lock(&pool.lock);
    pool.os_maps++;
    if (kind == HH_LCHUNK_OVERSIZE) {
        pool.oversize_count++;
        pool.oversize_bytes += size;
    } else {
        pool.used[kind]++;
    }
    pthread_mutex_unlock(&pool.lock);
    return p;
}

void hhi_linear_page_put(void *p, int kind, size_t size) {
    if (p == NULL) return;
    pthread_mutex_lock(&pool.lock);
    if (kind == HH_LCHUNK_OVERSIZE) {
        hh_assert_internal(pool.oversize_count > 0 && pool.oversize_bytes >= size);
        pool.oversize_count--;
        pool.oversize_bytes -= size;
        os_unmap(p, size);
    } else {
        hh_assert_internal(pool.used[kind] > 0);
        pool.used[kind]--;
        if (cached_bytes() + kind_size(kind) <= pool.cache_limit) {
            cache_push(p, kind);
        } else {
            os_unmap(p, kind_size(kind));
        }
    }
    pthread_mutex_unlock(&pool.lock);
}

/* ---------------------------------------------------------------------------
   Public interface
--------------------------------------------------------------------------- */
hh_status hh_pagepool_stats_get(hh_pagepool_stats *out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_pagepool_stats_get: out is NULL");
    size_t small = kind_size(HH_LCHUNK_SMALL), large = kind_size(HH_LCHUNK_PAGE);
    pthread_mutex_lock(&pool.lock);
    *out = (hh_pagepool_stats){
        .page_bytes = large,
        .small_page_bytes = small,
        .pages_used = pool.used[HH_LCHUNK_PAGE],
        .pages_cached = pool.cached[HH_LCHUNK_PAGE],
        .small_pages_used = pool.used[HH_LCHUNK_SMALL],
        .small_pages_cached = pool.cached[HH_LCHUNK_SMALL],
        .oversize_count = pool.oversize_count,
        .oversize_bytes = pool.oversize_bytes,
        .used_bytes = pool.used[HH_LCHUNK_PAGE] * large + pool.used[HH_LCHUNK_SMALL] * small + pool.oversize_bytes,
        .cached_bytes = cached_bytes(),
        .cache_limit_bytes = pool.cache_limit,
        .os_maps = pool.os_maps,
        .os_unmaps = pool.os_unmaps,
    };
    pthread_mutex_unlock(&pool.lock);
    return HH_OK;
}

void hh_pagepool_set_cache_limit(size_t bytes) {
    pthread_mutex_lock(&pool.lock);
    pool.cache_limit = bytes;
    trim_locked(bytes);
    pthread_mutex_unlock(&pool.lock);
}

size_t hh_pagepool_trim(size_t keep_bytes) {
    pthread_mutex_lock(&pool.lock);
    size_t released = trim_locked(keep_bytes);
    pthread_mutex_unlock(&pool.lock);
    return released;
}
