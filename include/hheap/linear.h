/* hheap/linear.h -- non-relocatable linear allocators: page pool, mark stack
 * with LIFO marks, stack vector, GEA stack / double-ended stack, single-frame and
 * double-buffered frame allocators, fixed-size pool, growable scratch buffer.
 *
 * Nothing here ever moves. Every allocator hands out raw pointers that stay
 * valid until the allocator releases them wholesale (mark pop, free-to-marker,
 * frame reset, scratch reset, destroy) or, for the pool, until hh_pool_free.
 *
 * Sections of this header:
 *   Page pool         hh_pagepool_*     process-wide, thread-safe page cache
 *   Mark stack        hh_memstack_*, hh_mark_*, HH_MARK_SCOPE
 *   Walker            hh_memstack_info_get / _walk / _walk_marks / _check
 *   Stack vector      hh_stackvec_*
 *   GEA stacks        hh_stack_*, hh_dstack_*
 *   Frame allocators  hh_frame_*, hh_dframe_*
 *   Pool              hh_pool_*
 *   Scratch buffer    hh_scratch_*
 *
 * How to use the mark stack (Unreal FMemStack semantics):
 *
 *     hh_memstack *ms = hh_memstack_thread();          // this thread's own stack
 *     {
 *         HH_MARK_SCOPE(m, ms);                        // pops at the closing brace
 *         float *v = hh_memstack_alloc(ms, 1024 * sizeof *v, 16);
 *         ...                                          // v dies at scope exit
 *     }
 *
 *   or explicitly: hh_mark m; hh_mark_push(ms, &m); ... hh_mark_pop(&m);
 *
 * Marks nest to any depth and must be popped in LIFO order: popping a mark that
 * is not the innermost open one returns HH_E_MARK_ORDER and changes nothing; a
 * second pop of the same mark returns HH_E_MARK_ORDER too. Popping restores the
 * top saved at push and gives the chunks added since then back to the page pool
 * (a stack keeps its oldest chunk, emptied, and one spare chunk, so a scope loop
 * stays on the fast path; hh_memstack_trim returns those too).
 * A mark must stay at the address it was pushed at (keep it on the C stack; do
 * not copy it) until it is popped.
 *
 * hh_memstack_desc defaults (zero-initialise; zero fields take the default):
 *
 *     field        default   meaning
 *     flags        0         HH_MEMSTACK_ENFORCE_MARKS: allocation with no open
 *                            mark fails with HH_E_NO_MARK
 *     name         "memstack" label shown by the walker / heap-map dump
 *
 * Sizes and alignments: every allocation function takes size > 0 (0 is
 * HH_E_INVALID_ARG) and an alignment that is a power of two (0 means the
 * default, 16). Block starts are at least 8-byte aligned. Failures return NULL,
 * set hh_last_error() and send one message to the error handler.
 *
 * NULL arguments (the same contract in every function below): a NULL object,
 * out or callback is reported once (HH_E_INVALID_ARG, the message led by the
 * function's name) and changes nothing. An out the call was given -- the
 * pointer of a create, an info struct, the vector of hh_stackvec_init -- is
 * cleared (NULL / all zero) before any early return, so a failed call never
 * leaves stale data in it. Getters that return a value rather than a status
 * (hh_stack_used, hh_dframe_frame ...) report a NULL object and return 0.
 * Deliberate exceptions: destroy functions take NULL as a no-op (like free),
 * hh_pool_free takes a NULL element as a no-op, and a NULL desc means the
 * defaults for hh_memstack_create and hh_scratch_create (the others require one).
 *
 * Memory checking: in a build with HH_TRACK_VALGRIND=1, memcheck reports a read
 * of popped / reset / freed memory as an invalid read, and reused memory reads
 * as uninitialised; with HH_TRACK_ASAN=1 the same ranges are poisoned.
 *
 * Threads: the page pool is thread-safe (its getter, hh_pagepool_stats_get,
 * takes the pool lock like every pool call). Every other object is used by one
 * thread at a time (the caller serialises), so its getters take no lock;
 * hh_memstack_thread() gives each thread its own stack, freed when the thread
 * exits.
 */
#ifndef HHEAP_LINEAR_H
#define HHEAP_LINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
   Page pool (process-wide, thread-safe)
   Feeds the mark stacks: 64 KiB pages, small pages (one OS page, 4 KiB on
   Linux) for the first chunk of a stack, and oversize chunks mapped for one
   request and unmapped when released (never cached). Freed pages are cached up
   to cache_limit_bytes (default 16 MiB); hh_pagepool_trim gives cached pages
   back to the OS.
--------------------------------------------------------------------------- */
enum {
    HH_PAGEPOOL_PAGE_SIZE = 64 * 1024,          /* bytes of a large page */
    HH_PAGEPOOL_DEFAULT_CACHE = 16 * 1024 * 1024 /* default cache limit in bytes */
};

typedef struct hh_pagepool_stats {
    size_t   page_bytes;          /* size of a large page (HH_PAGEPOOL_PAGE_SIZE) */
    size_t   small_page_bytes;    /* size of a small page */
    size_t   pages_used;          /* large pages handed out now */
    size_t   pages_cached;        /* large pages in the cache */
    size_t   small_pages_used;    /* small pages handed out now */
    size_t   small_pages_cached;  /* small pages in the cache */
    size_t   oversize_count;      /* live oversize chunks */
    size_t   oversize_bytes;      /* bytes of live oversize chunks */
    size_t   used_bytes;          /* all bytes handed out now (pages + oversize) */
    size_t   cached_bytes;        /* all bytes held in the cache */
    size_t   cache_limit_bytes;   /* current cache limit */
    uint64_t os_maps, os_unmaps;  /* OS calls made since process start */
} hh_pagepool_stats;

/* Fills *out with a consistent snapshot, taken under the pool lock.
   out NULL: HH_E_INVALID_ARG. */
HH_API hh_status hh_pagepool_stats_get(hh_pagepool_stats *out);
/* Sets the cache limit in bytes (0 disables caching) and trims down to it. */
HH_API void      hh_pagepool_set_cache_limit(size_t bytes);
/* Unmaps cached pages until at most keep_bytes stay cached; returns bytes unmapped. */
HH_API size_t    hh_pagepool_trim(size_t keep_bytes);

/* ---------------------------------------------------------------------------
   Mark stack
--------------------------------------------------------------------------- */
typedef struct hh_memstack hh_memstack;

enum hh_memstack_flags {
    HH_MEMSTACK_ENFORCE_MARKS = 1u << 0   /* allocating with no open mark is HH_E_NO_MARK */
};

typedef struct hh_memstack_desc {  /* zero-initialise; see the defaults table above */
    uint32_t    flags;             /* hh_memstack_flags */
    const char *name;              /* label for tools (not copied: must outlive the stack) */
} hh_memstack_desc;

/* A mark: complete type so callers keep it on the C stack. The fields are the
   library's; read them only through hh_memstack_walk_marks. */
typedef struct hh_mark {
    struct hh_memstack *ms;        /* owning stack while open; NULL once popped */
    struct hh_mark     *prev;      /* enclosing open mark, NULL for the outermost */
    void               *top;       /* stack top when pushed */
    void               *chunk;     /* top chunk when pushed (NULL: stack was empty) */
    uint32_t            depth;     /* 1 for the outermost open mark */
    uint32_t            magic;     /* set while open, cleared by pop */
} hh_mark;

/* Creates a stack (desc NULL: defaults). No memory is taken until the first
   allocation. HH_E_INVALID_ARG (out NULL, unknown flags), HH_E_NO_MEMORY. */
HH_API hh_status hh_memstack_create(const hh_memstack_desc *desc, hh_memstack **out);
/* Gives every chunk back to the page pool. Open marks are reported
   (HH_E_MARK_ORDER, "destroyed with N open marks") and become closed; the stack is
   freed anyway. NULL is a no-op. Do not destroy the stack of hh_memstack_thread(). */
HH_API void      hh_memstack_destroy(hh_memstack *ms);

/* Gives the stack's spare chunk back to the page pool, and its bottom chunk too
   when nothing is allocated and no mark is open. (Pops keep the oldest chunk,
   emptied, and one spare, so scope loops stay on the fast path.) HH_E_INVALID_ARG. */
HH_API hh_status hh_memstack_trim(hh_memstack *ms);

/* The calling thread's own stack, created on first use (NULL + HH_E_NO_MEMORY if
   that fails) and destroyed when the thread exits. */
HH_API hh_memstack *hh_memstack_thread(void);
/* Destroys the calling thread's stack now (a later hh_memstack_thread makes a new
   one). For the main thread, whose thread-exit destructors never run. */
HH_API void         hh_memstack_thread_release(void);

/* Bump allocation; NULL + last error: HH_E_INVALID_ARG (ms NULL, size 0, align not
   a power of two), HH_E_NO_MARK (enforce-marks, no open mark), HH_E_NO_MEMORY.
   Requests above about 64 KiB get an oversize chunk of their own. */
HH_API void *hh_memstack_alloc(hh_memstack *ms, size_t size, size_t align);
/* As hh_memstack_alloc, the bytes set to 0 / to 0xFF. */
HH_API void *hh_memstack_alloc_zeroed(hh_memstack *ms, size_t size, size_t align);
HH_API void *hh_memstack_alloc_ones(hh_memstack *ms, size_t size, size_t align);

/* Opens a mark at the current top. ms NULL or mark NULL: reported
   (HH_E_INVALID_ARG) and the mark stays closed (popping it fails). */
HH_API void      hh_mark_push(hh_memstack *ms, hh_mark *mark);
/* Closes the innermost open mark: restores its top, gives back later chunks.
   HH_E_MARK_ORDER (not the innermost open mark, or already popped: nothing
   changes), HH_E_INVALID_ARG (mark NULL). */
HH_API hh_status hh_mark_pop(hh_mark *mark);
/* Scope-exit helper for HH_MARK_SCOPE: pops the mark if it is still open (a
   closed one is left alone, silently). mark NULL: HH_E_INVALID_ARG. */
HH_API void      hh_mark_scope_end(hh_mark *mark);

#if defined(__GNUC__) || defined(__clang__)
#  define HH_ATTR_CLEANUP(fn) __attribute__((cleanup(fn)))
/* Declares hh_mark `name` pushed on ms, popped when `name` goes out of scope.
   Expands to a declaration and a statement: write it inside a block, never as
   the lone body of an if/for. */
#  define HH_MARK_SCOPE(name, ms) \
      hh_mark name HH_ATTR_CLEANUP(hh_mark_scope_end); \
      hh_mark_push((ms), &name)
#endif /* without cleanup support HH_MARK_SCOPE is not defined: push/pop by hand */

/* ---------------------------------------------------------------------------
   Mark stack walker (for hh_mapdump and tools)
   Use from the thread that owns the stack (or with that thread stopped). For
   a process-wide, thread-safe summary of all linear memory use
   hh_pagepool_stats_get: every mark-stack chunk comes from the page pool.
   A dump draws each chunk as [base, base+size): header_bytes of metadata,
   used_bytes of allocations, the rest free (top chunk) or wasted (older ones);
   marks sit at chunk base + offset.
   Chunks are visited oldest first. Accounting: a chunk's size is the whole
   mapping (header included); used_bytes runs from the chunk's payload start to
   its top (alignment padding included); wasted_bytes are chunk headers plus the
   unused tails of chunks below the top one; free_bytes is what is left in the
   top chunk. reserved_bytes == used + wasted + free.
--------------------------------------------------------------------------- */
enum hh_lchunk_kind { HH_LCHUNK_SMALL, HH_LCHUNK_PAGE, HH_LCHUNK_OVERSIZE };

typedef struct hh_memstack_chunk_info {
    const void *base;            /* first byte of the chunk (its header) */
    size_t      size;            /* bytes of the chunk, header included */
    size_t      header_bytes;    /* bytes of the header at base */
    size_t      used_bytes;      /* payload bytes below this chunk's top */
    uint32_t    index;           /* 0 for the oldest chunk */
    int         kind;            /* hh_lchunk_kind */
    bool        is_top;          /* the chunk allocations come from */
} hh_memstack_chunk_info;

typedef struct hh_memstack_mark_info {
    uint32_t    depth;           /* 1 = outermost */
    uint32_t    chunk_index;     /* chunk holding the saved top (UINT32_MAX: stack was empty) */
    size_t      offset;          /* saved top as bytes from that chunk's base */
} hh_memstack_mark_info;

typedef struct hh_memstack_info {
    const char *name;            /* desc name */
    uint32_t    flags;           /* desc flags */
    uint32_t    chunk_count;
    uint32_t    open_marks;
    size_t      reserved_bytes;  /* sum of chunk sizes */
    size_t      used_bytes;
    size_t      wasted_bytes;
    size_t      free_bytes;
    uint64_t    alloc_count;     /* successful allocations since create */
    size_t      peak_reserved_bytes;
    size_t      spare_bytes;     /* one released chunk kept for reuse (not in reserved_bytes) */
} hh_memstack_info;

typedef void (*hh_memstack_chunk_fn)(const hh_memstack_chunk_info *c, void *user);
typedef void (*hh_memstack_mark_fn)(const hh_memstack_mark_info *m, void *user);

/* Summary of ms. HH_E_INVALID_ARG if either pointer is NULL (*out zeroed
   when it is not). */
HH_API hh_status hh_memstack_info_get(const hh_memstack *ms, hh_memstack_info *out);
/* Calls fn for every chunk, oldest first. HH_E_INVALID_ARG if ms or fn is NULL. */
HH_API hh_status hh_memstack_walk(const hh_memstack *ms, hh_memstack_chunk_fn fn, void *user);
/* Calls fn for every open mark, innermost first. HH_E_INVALID_ARG on NULL. */
HH_API hh_status hh_memstack_walk_marks(const hh_memstack *ms, hh_memstack_mark_fn fn, void *user);
/* Checks the stack's invariants (chunk list, top inside the top chunk, marks
   ordered and inside live chunks). HH_OK or HH_E_CORRUPT + message. */
HH_API hh_status hh_memstack_check(const hh_memstack *ms);

/* ---------------------------------------------------------------------------
   Stack vector: a growable array on a mark stack. While its buffer is the top
   allocation (and no mark was pushed after it) it grows in place; otherwise it
   copies into a buffer twice as large and abandons the old one (the stack gets
   it back at the next pop). Its memory dies with the enclosing mark.
--------------------------------------------------------------------------- */
typedef struct hh_stackvec {
    hh_memstack *ms;             /* stack the buffer lives on */
    void        *data;           /* elements, NULL until the first growth */
    size_t       count;          /* elements in use */
    size_t       capacity;       /* elements the buffer holds */
    size_t       elem_size;      /* bytes per element */
    size_t       align;          /* alignment of data */
    uint64_t     grow_in_place;  /* growths done without a copy */
    uint64_t     grow_copy;      /* growths that copied */
} hh_stackvec;

/* HH_E_INVALID_ARG (NULLs, elem_size 0, align not a power of two; 0: 16).
   *v is the out: on failure it is left all zero, and every other call on it
   then fails with HH_E_INVALID_ARG ("not initialised"). */
HH_API hh_status hh_stackvec_init(hh_stackvec *v, hh_memstack *ms, size_t elem_size, size_t align);
/* Ensures capacity >= n elements. HH_E_NO_MEMORY keeps the vector as it was. */
HH_API hh_status hh_stackvec_reserve(hh_stackvec *v, size_t n);
/* Appends one element (uninitialised) and returns it; NULL + last error on failure. */
HH_API void     *hh_stackvec_push(hh_stackvec *v);
/* Appends n elements copied from src. */
HH_API hh_status hh_stackvec_append(hh_stackvec *v, const void *src, size_t n);
/* Element i, NULL (no message) when i >= count; v NULL: NULL + HH_E_INVALID_ARG. */
HH_API void     *hh_stackvec_at(const hh_stackvec *v, size_t i);

/* ---------------------------------------------------------------------------
   GEA stack allocator over one buffer, with markers
--------------------------------------------------------------------------- */
typedef struct hh_stack hh_stack;
typedef struct hh_stack_marker { size_t offset; } hh_stack_marker;  /* bytes in use when taken */

typedef struct hh_stack_desc {
    size_t  capacity;            /* bytes (required) */
    void   *memory;              /* caller buffer of capacity bytes; NULL: mapped by the stack */
} hh_stack_desc;

/* HH_E_INVALID_ARG (out or desc NULL, capacity 0 or too large), HH_E_NO_MEMORY. */
HH_API hh_status hh_stack_create(const hh_stack_desc *desc, hh_stack **out);
HH_API void      hh_stack_destroy(hh_stack *s);
/* NULL + HH_E_NO_MEMORY when the buffer is full (nothing changes). */
HH_API void     *hh_stack_alloc(hh_stack *s, size_t size, size_t align);
HH_API hh_stack_marker hh_stack_get_marker(const hh_stack *s);
/* Frees everything allocated after the marker. HH_E_INVALID_ARG if the marker is
   above the current top (stale). */
HH_API hh_status hh_stack_free_to_marker(hh_stack *s, hh_stack_marker m);
HH_API void      hh_stack_clear(hh_stack *s);
/* Bytes in use (0 + HH_E_INVALID_ARG for NULL). */
HH_API size_t    hh_stack_used(const hh_stack *s);

/* ---------------------------------------------------------------------------
   Double-ended stack: low end grows up, high end grows down, one buffer.
   An allocation that would make the ends cross fails with HH_E_NO_MEMORY and
   changes nothing. Markers of each end are bytes in use at that end.
--------------------------------------------------------------------------- */
typedef struct hh_dstack hh_dstack;
typedef enum hh_dstack_end { HH_DSTACK_LOW = 0, HH_DSTACK_HIGH = 1 } hh_dstack_end;

HH_API hh_status hh_dstack_create(const hh_stack_desc *desc, hh_dstack **out);
HH_API void      hh_dstack_destroy(hh_dstack *ds);
HH_API void     *hh_dstack_alloc(hh_dstack *ds, hh_dstack_end end, size_t size, size_t align);
HH_API hh_stack_marker hh_dstack_get_marker(const hh_dstack *ds, hh_dstack_end end);
HH_API hh_status hh_dstack_free_to_marker(hh_dstack *ds, hh_dstack_end end, hh_stack_marker m);
HH_API void      hh_dstack_clear(hh_dstack *ds, hh_dstack_end end);
/* Bytes in use at one end; bytes still free between the ends. 0 +
   HH_E_INVALID_ARG for a NULL stack or an end that is neither LOW nor HIGH. */
HH_API size_t    hh_dstack_used(const hh_dstack *ds, hh_dstack_end end);
HH_API size_t    hh_dstack_free_bytes(const hh_dstack *ds);

/* ---------------------------------------------------------------------------
   Frame allocators
   Single-frame: everything allocated during a frame dies at hh_frame_reset.
   Double-buffered: two buffers; hh_dframe_swap makes the other buffer current
   and clears it, so memory allocated in frame i stays valid through frame i+1
   and dies at the swap that ends frame i+1.
--------------------------------------------------------------------------- */
typedef struct hh_frame hh_frame;
typedef struct hh_dframe hh_dframe;

typedef struct hh_frame_desc {
    size_t  capacity;            /* bytes per frame buffer (required) */
} hh_frame_desc;

HH_API hh_status hh_frame_create(const hh_frame_desc *desc, hh_frame **out);
HH_API void      hh_frame_destroy(hh_frame *f);
HH_API void     *hh_frame_alloc(hh_frame *f, size_t size, size_t align);
HH_API void      hh_frame_reset(hh_frame *f);
/* Bytes in use this frame (0 + HH_E_INVALID_ARG for NULL). */
HH_API size_t    hh_frame_used(const hh_frame *f);

HH_API hh_status hh_dframe_create(const hh_frame_desc *desc, hh_dframe **out);
HH_API void      hh_dframe_destroy(hh_dframe *df);
HH_API void     *hh_dframe_alloc(hh_dframe *df, size_t size, size_t align);
HH_API void      hh_dframe_swap(hh_dframe *df);
/* Bytes in use in the current buffer; frames swapped so far (each 0 +
   HH_E_INVALID_ARG for NULL). */
HH_API size_t    hh_dframe_used(const hh_dframe *df);
HH_API uint64_t  hh_dframe_frame(const hh_dframe *df);

/* ---------------------------------------------------------------------------
   Pool allocator: fixed-size elements, free list kept inside free elements.
   Elements smaller than a pointer (or with HH_POOL_INDEX16) link by 16-bit
   index, which limits the pool to 65535 elements of at least 2 bytes (a
   1-byte element takes 2): a larger capacity is refused (HH_E_INVALID_ARG),
   never served with pointer links behind the caller's back. Elements of a
   pointer or more take their size rounded up to the alignment, any capacity;
   hh_pool_info.elem_stride reports what each element really costs.
   hh_pool_free detects double frees and foreign pointers in O(1) (one bit per
   element of side metadata).
--------------------------------------------------------------------------- */
typedef struct hh_pool hh_pool;

enum hh_pool_flags { HH_POOL_INDEX16 = 1u << 0 };

typedef struct hh_pool_desc {
    size_t   elem_size;          /* bytes per element (required) */
    size_t   elem_align;         /* 0: min(16, largest power of two dividing elem_size) */
    size_t   capacity;           /* elements (required) */
    uint32_t flags;              /* hh_pool_flags */
} hh_pool_desc;

typedef struct hh_pool_info {
    size_t   elem_size, elem_stride, capacity;
    size_t   live_count;         /* elements handed out now */
    size_t   peak_count;
    bool     index16;            /* 16-bit index links in use */
} hh_pool_info;

HH_API hh_status hh_pool_create(const hh_pool_desc *desc, hh_pool **out);
HH_API void      hh_pool_destroy(hh_pool *p);
/* One element (uninitialised); NULL + HH_E_NO_MEMORY when all are in use. */
HH_API void     *hh_pool_alloc(hh_pool *p);
/* NULL is a no-op (HH_OK). HH_E_FOREIGN_POINTER, HH_E_DOUBLE_FREE: nothing changes. */
HH_API hh_status hh_pool_free(hh_pool *p, void *elem);
/* HH_E_INVALID_ARG if either pointer is NULL (*out zeroed when it is not). */
HH_API hh_status hh_pool_info_get(const hh_pool *p, hh_pool_info *out);

/* ---------------------------------------------------------------------------
   Scratch buffer (pbrt ScratchBuffer semantics, improved): bump allocation;
   when the buffer is full a buffer at least twice as large is mapped and the
   old one kept until reset; reset frees all but the largest buffer, so a steady
   loop stops mapping. Alignment is of the address (any power of two).
--------------------------------------------------------------------------- */
typedef struct hh_scratch hh_scratch;

typedef struct hh_scratch_desc {
    size_t  initial_bytes;       /* 0: 16 KiB */
} hh_scratch_desc;

typedef struct hh_scratch_info {
    size_t   capacity_bytes;     /* size of the current buffer */
    size_t   used_bytes;         /* bytes used in the current buffer */
    uint32_t retired_count;      /* older buffers waiting for reset */
    uint64_t map_count;          /* buffers mapped since create */
} hh_scratch_info;

HH_API hh_status hh_scratch_create(const hh_scratch_desc *desc, hh_scratch **out);
HH_API void      hh_scratch_destroy(hh_scratch *s);
HH_API void     *hh_scratch_alloc(hh_scratch *s, size_t size, size_t align);
HH_API void      hh_scratch_reset(hh_scratch *s);
/* HH_E_INVALID_ARG if either pointer is NULL (*out zeroed when it is not). */
HH_API hh_status hh_scratch_info_get(const hh_scratch *s, hh_scratch_info *out);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_LINEAR_H */
