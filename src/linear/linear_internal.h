/* linear_internal.h -- shared internals of src/linear: the page pool seam, the
 * mark-stack chunk and object layout, and the inline allocation fast path.
 *
 * Mark stack model (invariants, checked by hh_memstack_check):
 *   M1  ms->chunk is the newest chunk; chunk->prev links to older ones; the
 *       chain ends in NULL. ms->chunk_count is its length.
 *   M2  when ms->chunk != NULL: payload(chunk) <= ms->top <= ms->end ==
 *       chunk_end(chunk); every older chunk's c->top lies in its own payload.
 *   M3  ms->marks is the innermost open mark; following ->prev gives strictly
 *       decreasing depths ending at 1; every open mark's chunk is in the chain
 *       (or NULL) and its top lies in that chunk's payload.
 *   M4  ms->fast_end == ms->end unless the stack enforces marks and none is
 *       open, in which case it is NULL (so the fast path always falls to the
 *       slow path, which reports HH_E_NO_MARK).
 *   M5  Under HH_TRACK_VALGRIND every chunk is its own memcheck mempool (anchor:
 *       the chunk header); live allocations are pool chunks, everything else in
 *       the payload is no-access.
 */
#ifndef HH_LINEAR_INTERNAL_H
#define HH_LINEAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/linear.h"
#include "../common/hh_assert.h"
#include "../common/hh_compiler.h"
#include "../common/hh_config.h"
#include "../common/hh_error.h"
#include "../common/hh_track.h"

/* ---------------------------------------------------------------------------
   Constants
--------------------------------------------------------------------------- */
enum {
    HHI_LINEAR_MIN_ALIGN = 8,      /* every block start: ASan cannot poison a granule's head */
    HHI_LINEAR_DEFAULT_ALIGN = 16, /* align 0 means this */
    HHI_MARK_MAGIC = 0x4D41524Bu,  /* "MARK": set in an open mark */
    HHI_CHUNK_HEADER = 64          /* bytes reserved at the start of every chunk */
};

/* ---------------------------------------------------------------------------
   Page pool (pagepool.c)
--------------------------------------------------------------------------- */
/* Returns a page of the kind (HH_LCHUNK_SMALL / HH_LCHUNK_PAGE), or for
   HH_LCHUNK_OVERSIZE a fresh mapping of `size` bytes; NULL on failure (OS or
   injected fault; every acquisition is one fault-injection point). Not reported.
   The returned memory is addressable and undefined. */
HH_INTERNAL void  *hhi_linear_page_get(int kind, size_t size);
/* Gives back what hhi_linear_page_get returned (same kind and size). */
HH_INTERNAL void   hhi_linear_page_put(void *p, int kind, size_t size);
/* Size in bytes of a small page. */
HH_INTERNAL size_t hhi_linear_small_page_size(void);

/* ---------------------------------------------------------------------------
   Mark stack layout
--------------------------------------------------------------------------- */
typedef struct hhi_chunk {
    struct hhi_chunk *prev;        /* next older chunk, NULL for the oldest */
    uint8_t          *top;         /* saved top when this chunk stopped being the top one */
    size_t            size;        /* bytes of the mapping, header included */
    int               kind;        /* hh_lchunk_kind */
    uint32_t          index;       /* 0 for the oldest chunk */
} hhi_chunk;

_Static_assert(sizeof(hhi_chunk) <= HHI_CHUNK_HEADER, "chunk header does not fit its reserved space");

static inline uint8_t *hhi_chunk_payload(hhi_chunk *c) { return (uint8_t *)c + HHI_CHUNK_HEADER; }
static inline uint8_t *hhi_chunk_end(hhi_chunk *c) { return (uint8_t *)c + c->size; }

struct hh_memstack {
    uint8_t     *top;              /* next free byte in the top chunk (hot: first) */
    uint8_t     *fast_end;         /* end of the top chunk, or NULL to force the slow path (M4) */
    uint8_t     *end;              /* end of the top chunk (NULL when there is none) */
    hhi_chunk   *chunk;            /* top (newest) chunk, NULL when empty */
    hh_mark     *marks;            /* innermost open mark */
    hhi_chunk   *spare;            /* one released non-oversize chunk kept for reuse, or NULL */
    uint32_t     mark_count;       /* open marks */
    uint32_t     chunk_count;      /* chunks in the chain */
    uint32_t     flags;            /* hh_memstack_flags */
    bool         is_thread;        /* owned by hh_memstack_thread's TLS slot */
    const char  *name;             /* desc name or "memstack" */
    uint64_t     alloc_count;      /* successful allocations */
    size_t       reserved_bytes;   /* sum of chunk sizes */
    size_t       peak_reserved_bytes;
};

/* Slow path of every memstack allocation: validation, errors, new chunks. */
HH_INTERNAL HH_NOINLINE void *hhi_memstack_alloc_slow(hh_memstack *ms, size_t size, size_t align);

/* The fast path: one likely test (valid arguments, fits in the top chunk, marks
   allowed), else the slow path. */
HH_INLINE void *hhi_memstack_alloc_fast(hh_memstack *ms, size_t size, size_t align) {
    if (hh_likely(ms != NULL)) {
        size_t a = align < HHI_LINEAR_MIN_ALIGN ? HHI_LINEAR_MIN_ALIGN : align;
        uintptr_t p = hh_align_up_ptr((uintptr_t)ms->top, a);
        /* size-1 < remaining rejects size 0 (wraps) and a too-large size in one test */
        if (hh_likely((align & (align - 1)) == 0 && align != 0 && p >= (uintptr_t)ms->top &&
                      size - 1 < (uintptr_t)ms->fast_end - p && p < (uintptr_t)ms->fast_end)) {
            ms->top = (uint8_t *)(p + size);
            ms->alloc_count++;
            hh_track_alloc(ms->chunk, (void *)p, size);
            return (void *)p;
        }
    }
    return hhi_memstack_alloc_slow(ms, size, align);
}

/* Grows the allocation [p, p+old_size) to new_size in place if it is the top
   allocation of the top chunk, no open mark lies above p, and the chunk has room.
   true on success. Never reports. */
HH_INTERNAL bool hhi_memstack_try_grow(hh_memstack *ms, void *p, size_t old_size, size_t new_size);

/* ---------------------------------------------------------------------------
   One-buffer bump stack shared by hh_stack, hh_frame and hh_dframe (stack.c).
   L1  0 <= top <= capacity; [base, base+top) holds the live allocations, the
       rest is no-access to memcheck. The memcheck pool anchor is the struct.
--------------------------------------------------------------------------- */
typedef struct hhi_lstack {
    uint8_t *base;                 /* first byte of the buffer */
    size_t   capacity;             /* bytes of the buffer */
    size_t   top;                  /* bytes in use */
    bool     owned;                /* mapped by us (unmapped at fini) */
} hhi_lstack;

/* Maps capacity bytes (or adopts memory). HH_E_INVALID_ARG / HH_E_NO_MEMORY,
   reported under the caller's name `who`. */
HH_INTERNAL hh_status hhi_lstack_init(hhi_lstack *s, size_t capacity, void *memory, const char *who);
HH_INTERNAL void      hhi_lstack_fini(hhi_lstack *s);
/* NULL + reported status on bad arguments or a full buffer (nothing changes). */
HH_INTERNAL void     *hhi_lstack_alloc(hhi_lstack *s, size_t size, size_t align, const char *who);
/* Frees everything above offset (offset <= top). */
HH_INTERNAL void      hhi_lstack_cut(hhi_lstack *s, size_t offset);

/* Reports a NULL object passed to a value getter (`who`: the public function,
   `what`: the object's name) and returns the getter's neutral answer, 0
   (stack.c). Cold and apart, so the getters stay a test and a load. */
HH_INTERNAL HH_COLD HH_NOINLINE size_t hhi_linear_null_value(const char *who, const char *what);

/* Cuts the memcheck pool `pool` back to [base, base+keep): allocations above
   are forgotten and the rest of [base, base+span) is made no-access. */
static inline void hhi_linear_track_cut(void *pool, void *base, size_t keep, size_t span) {
    if (keep == 0) {
        hh_track_pool_destroy(pool);
        hh_track_pool_create(pool, base);
    } else {
        hh_track_trim(pool, base, keep);
    }
    hh_track_noaccess((uint8_t *)base + keep, span - keep);
    (void)pool;
}

/* Resolves align 0 to the default; false if align is not a power of two. */
static inline bool hhi_linear_align_ok(size_t *align) {
    if (*align == 0) *align = HHI_LINEAR_DEFAULT_ALIGN;
    if (!hh_is_pow2(*align)) return false;
    if (*align < HHI_LINEAR_MIN_ALIGN) *align = HHI_LINEAR_MIN_ALIGN;
    return true;
}

#endif /* HH_LINEAR_INTERNAL_H */
