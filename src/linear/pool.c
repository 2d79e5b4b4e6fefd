/* pool.c -- fixed-size element pool with the free list inside free elements.
 *
 * Elements are handed out from a free list threaded through the free
 * elements themselves (GEA's pool allocator); elements never used yet are
 * taken from a high-water index instead, so creating a large pool touches no
 * page. A free element's first bytes hold the link: a pointer to the next free
 * element, or, in the 16-bit variant (elements smaller than a pointer, or
 * HH_POOL_INDEX16), the next free element's index (POOL_END16 ends the list).
 * A side bitmap (one bit per element) makes double-free and foreign-pointer
 * detection O(1).
 *
 * Invariants:
 *   Q1  every element index < fresh is either live (bit set) or on the free
 *       list (bit clear), never both; elements >= fresh were never handed out.
 *   Q2  live_count == number of set bits; the free list holds fresh - live_count
 *       elements.
 *   Q3  to memcheck, a live element is a pool chunk; a free one is no-access.
 */
#include "linear_internal.h"

#include <string.h>

#include "../common/hh_meta.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   Constants and types
--------------------------------------------------------------------------- */
enum { POOL_END16 = 0xFFFF, POOL_MAX16 = 0xFFFF /* elements addressable by 16-bit links, END excluded */ };

struct hh_pool {
    uint8_t  *base;                /* element 0 */
    size_t    elem_size;           /* bytes asked for per element */
    size_t    stride;              /* bytes between elements (>= link size, multiple of align) */
    size_t    capacity;            /* elements */
    size_t    map_bytes;           /* bytes mapped at base */
    size_t    fresh;               /* elements [fresh, capacity) were never handed out (Q1) */
    uint8_t  *free_head;           /* first free element, NULL when the list is empty */
    uint64_t *live;                /* bitmap: bit i set while element i is handed out */
    size_t    live_count;
    size_t    peak_count;
    bool      index16;             /* links are 16-bit indices */
    uint8_t   stride_shift;        /* log2(stride) when stride is a power of two, else 0xFF */
};

/* ---------------------------------------------------------------------------
   Links (memcpy: elements may be less aligned than a pointer)
--------------------------------------------------------------------------- */
static size_t elem_index(const hh_pool *p, size_t off, size_t *rem);

static uint8_t *link_read(const hh_pool *p, uint8_t *e) {
    uint8_t *next;
    if (p->index16) {
        uint16_t i;
        hh_track_defined(e, sizeof i);
        memcpy(&i, e, sizeof i);
        next = i == POOL_END16 ? NULL : p->base + (size_t)i * p->stride;
    } else {
        hh_track_defined(e, sizeof next);
        memcpy(&next, e, sizeof next);
    }
    return next;
}

static void link_write(const hh_pool *p, uint8_t *e, uint8_t *next) {
    if (p->index16) {
        size_t rem;
        uint16_t i = next == NULL ? (uint16_t)POOL_END16 : (uint16_t)elem_index(p, (size_t)(next - p->base), &rem);
        hh_track_undefined(e, sizeof i);
        memcpy(e, &i, sizeof i);
        hh_track_noaccess(e, sizeof i);
    } else {
        hh_track_undefined(e, sizeof next);
        memcpy(e, &next, sizeof next);
        hh_track_noaccess(e, sizeof next);
    }
}

/* Index of the element at byte offset off; *rem gets the offset into it. */
static size_t elem_index(const hh_pool *p, size_t off, size_t *rem) {
    if (hh_likely(p->stride_shift != 0xFF)) {  /* shift instead of a division on the hot path */
        *rem = off & (p->stride - 1);
        return off >> p->stride_shift;
    }
    *rem = off % p->stride;
    return off / p->stride;
}

static bool bit_get(const hh_pool *p, size_t i) { return (p->live[i / 64] >> (i % 64)) & 1u; }
static void bit_flip(hh_pool *p, size_t i) { p->live[i / 64] ^= (uint64_t)1 << (i % 64); }

/* Largest power of two dividing n, capped at 16. */
static size_t natural_align(size_t n) {
    size_t a = n & (~n + 1);
    return a > 16 ? 16 : a;
}

/* ---------------------------------------------------------------------------
   Public interface
--------------------------------------------------------------------------- */
hh_status hh_pool_create(const hh_pool_desc *desc, hh_pool **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_pool_create: out is NULL");
    *out = NULL;  /* before any other early return: a failed create never leaves a stale pointer */
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_pool_create: desc is NULL");
    if (desc->elem_size == 0 || desc->capacity == 0)
        return hhi_error(HH_E_INVALID_ARG, "hh_pool_create: elem_size and capacity must be non-zero");
    if ((desc->flags & ~(uint32_t)HH_POOL_INDEX16) != 0)
        return hhi_error(HH_E_INVALID_ARG, "hh_pool_create: unknown flags 0x%x", (unsigned)desc->flags);
    size_t align = desc->elem_align != 0 ? desc->elem_align : natural_align(desc->elem_size);
    if (!hh_is_pow2(align) || align > 4096)
        return hhi_error(HH_E_INVALID_ARG, "hh_pool_create: elem_align %zu is not a power of two <= 4096", align);
    /* Elements smaller than a pointer link by 16-bit index: the limit is the
       header's 65535. Above it they are refused rather than silently given
       pointer links (a 2-byte element would take 8: 4x the memory asked for). */
    bool forced16 = (desc->flags & HH_POOL_INDEX16) != 0;
    bool index16 = forced16 || desc->elem_size < sizeof(void *);
    if (index16 && desc->capacity > POOL_MAX16)
        return hhi_error(HH_E_INVALID_ARG,
                         "hh_pool_create: %zu elements of %zu bytes: elements below %zu bytes (or HH_POOL_INDEX16) "
                         "link by 16-bit index, at most %u of them; use elem_size %zu for more",
                         desc->capacity, desc->elem_size, sizeof(void *), (unsigned)POOL_MAX16, sizeof(void *));
    size_t link = index16 ? sizeof(uint16_t) : sizeof(void *);
    size_t stride = hh_align_up(HH_MAX(desc->elem_size, link), align);
    if (desc->elem_size > SIZE_MAX / 4 || desc->capacity > SIZE_MAX / 4 / stride)
        return hhi_error(HH_E_INVALID_ARG, "hh_pool_create: %zu elements of %zu bytes is too large", desc->capacity,
                         desc->elem_size);
    hh_pool *p = hhi_meta_alloc(sizeof *p);
    uint64_t *live = hhi_meta_alloc((desc->capacity + 63) / 64 * sizeof(uint64_t));
    size_t map_bytes = desc->capacity * stride;
    uint8_t *base = p != NULL && live != NULL ? hhi_os_map(map_bytes, 0) /* page-aligned: align <= 4096 */ : NULL;
    if (base == NULL) {
        hhi_meta_free(live);
        hhi_meta_free(p);
        return hhi_error(HH_E_NO_MEMORY, "hh_pool_create: cannot allocate %zu elements of %zu bytes", desc->capacity,
                         desc->elem_size);
    }
    *p = (hh_pool){ .base = base, .elem_size = desc->elem_size, .stride = stride, .capacity = desc->capacity,
                    .map_bytes = map_bytes, .live = live, .index16 = index16,
                    .stride_shift = hh_is_pow2(stride) ? (uint8_t)hh_ctz64(stride) : 0xFF };
    hh_track_pool_create(p, base);
    hh_track_noaccess(base, map_bytes);
    *out = p;
    return HH_OK;
}

void hh_pool_destroy(hh_pool *p) {
    if (p == NULL) return;
    hh_track_pool_destroy(p);
    hh_track_undefined(p->base, p->map_bytes);
    hhi_os_unmap(p->base, p->map_bytes);
    hhi_meta_free(p->live);
    hhi_meta_free(p);
}

void *hh_pool_alloc(hh_pool *p) {
    if (p == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_pool_alloc: pool is NULL");
        return NULL;
    }
    uint8_t *e = p->free_head;
    if (hh_likely(e != NULL)) {
        p->free_head = link_read(p, e);
    } else if (p->fresh < p->capacity) {
        e = p->base + p->fresh++ * p->stride;
    } else {
        hhi_error(HH_E_NO_MEMORY, "hh_pool_alloc: all %zu elements are in use", p->capacity);
        return NULL;
    }
    size_t rem, i = elem_index(p, (size_t)(e - p->base), &rem);
    hh_assert_internal(rem == 0 && !bit_get(p, i));
    bit_flip(p, i);
    if (++p->live_count > p->peak_count) p->peak_count = p->live_count;
    hh_track_alloc(p, e, p->elem_size);
    return e;
}

hh_status hh_pool_free(hh_pool *p, void *elem) {
    if (p == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_pool_free: pool is NULL");
    if (elem == NULL) return HH_OK;
    uint8_t *e = elem;
    size_t off = (size_t)((uintptr_t)e - (uintptr_t)p->base);
    size_t rem = 0, i = elem_index(p, off, &rem);
    if ((uintptr_t)e < (uintptr_t)p->base || i >= p->fresh || rem != 0)
        return hhi_error(HH_E_FOREIGN_POINTER, "hh_pool_free: %p is not an element this pool gave out", elem);
    if (!bit_get(p, i)) return hhi_error(HH_E_DOUBLE_FREE, "hh_pool_free: element %zu (%p) is already free", i, elem);
    bit_flip(p, i);
    p->live_count--;
    hh_track_free(p, e, p->elem_size);
    link_write(p, e, p->free_head);
    p->free_head = e;
    return HH_OK;
}

hh_status hh_pool_info_get(const hh_pool *p, hh_pool_info *out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_pool_info_get: out is NULL");
    if (p == NULL) {
        memset(out, 0, sizeof *out);  /* the caller may read it without checking the status */
        return hhi_error(HH_E_INVALID_ARG, "hh_pool_info_get: pool is NULL");
    }
    *out = (hh_pool_info){ .elem_size = p->elem_size, .elem_stride = p->stride, .capacity = p->capacity,
                           .live_count = p->live_count, .peak_count = p->peak_count, .index16 = p->index16 };
    return HH_OK;
}
