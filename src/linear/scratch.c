/* scratch.c -- growable scratch buffer (pbrt ScratchBuffer semantics, improved).
 *
 * Bump allocation in the current buffer. When a request does not fit, a new
 * buffer at least twice as large (and large enough for the request) is mapped;
 * the old one is retired, since its allocations stay valid until reset.
 * hh_scratch_reset unmaps the retired buffers and keeps the current one, which
 * is the largest, so a loop with a steady peak stops mapping after warm-up.
 * Alignment is applied to the address, not to an offset from the buffer start,
 * so alignments above the buffer's own alignment are honoured (pbrt aligns the
 * offset, which is only right up to the 64-byte alignment of its buffer).
 *
 * Invariants:
 *   S1  cur == NULL or start(cur) <= ptr <= end(cur); retired buffers are
 *       linked through their headers, newest first, and are all smaller than cur.
 *   S2  to memcheck, everything in every buffer except live allocations is
 *       no-access; the pool anchor is the scratch object.
 */
#include "linear_internal.h"

#include <string.h>

#include "../common/hh_meta.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
enum { SCRATCH_HEADER = 64, SCRATCH_DEFAULT_BYTES = 16 * 1024 };

typedef struct sbuf {
    struct sbuf *prev;             /* next older retired buffer */
    size_t       size;             /* bytes mapped, header included */
} sbuf;

_Static_assert(sizeof(sbuf) <= SCRATCH_HEADER, "scratch header too large");

struct hh_scratch {
    uint8_t  *ptr;                 /* next free byte of cur (hot) */
    uint8_t  *end;                 /* end of cur */
    sbuf     *cur;                 /* current buffer, NULL before the first allocation */
    sbuf     *retired;             /* older buffers, newest first (S1) */
    uint32_t  retired_count;
    size_t    initial_bytes;       /* resolved desc value */
    uint64_t  map_count;           /* buffers mapped since create */
};

static uint8_t *buf_start(sbuf *b) { return (uint8_t *)b + SCRATCH_HEADER; }

static void buf_unmap(sbuf *b) {
    size_t size = b->size;
    hh_track_undefined(b, size);
    hhi_os_unmap(b, size);
}

/* Maps a buffer able to hold size bytes at align and makes it current. */
static HH_NOINLINE HH_COLD void *scratch_alloc_slow(hh_scratch *s, size_t size, size_t align) {
    size_t old = s->cur != NULL ? s->cur->size : 0;
    size_t need = SCRATCH_HEADER + size + (align > SCRATCH_HEADER ? align : 0);
    size_t want = old != 0 ? old * 2 : s->initial_bytes;
    size_t bytes = hh_align_up(HH_MAX(want, need), hhi_os_page_size());
    sbuf *b = hhi_os_map(bytes, 0);
    if (b == NULL) {
        hhi_error(HH_E_NO_MEMORY, "hh_scratch_alloc: cannot map a %zu-byte buffer for %zu bytes", bytes, size);
        return NULL;
    }
    s->map_count++;
    hh_track_noaccess(buf_start(b), bytes - SCRATCH_HEADER);
    *b = (sbuf){ .prev = NULL, .size = bytes };
    if (s->cur != NULL) {
        if (s->ptr == buf_start(s->cur)) {
            buf_unmap(s->cur);  /* nothing lives in it: no need to keep it */
        } else {
            s->cur->prev = s->retired;
            s->retired = s->cur;
            s->retired_count++;
        }
    }
    s->cur = b;
    s->ptr = buf_start(b);
    s->end = (uint8_t *)b + bytes;
    uintptr_t p = hh_align_up_ptr((uintptr_t)s->ptr, align);
    s->ptr = (uint8_t *)(p + size);
    hh_track_alloc(s, (void *)p, size);
    return (void *)p;
}

/* ---------------------------------------------------------------------------
   Public interface
--------------------------------------------------------------------------- */
hh_status hh_scratch_create(const hh_scratch_desc *desc, hh_scratch **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_scratch_create: out is NULL");
    *out = NULL;
    size_t initial = desc != NULL && desc->initial_bytes != 0 ? desc->initial_bytes : SCRATCH_DEFAULT_BYTES;
    if (initial > SIZE_MAX / 8) return hhi_error(HH_E_INVALID_ARG, "hh_scratch_create: initial_bytes too large");
    hh_scratch *s = hhi_meta_alloc(sizeof *s);
    if (s == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_scratch_create: no memory for the scratch object");
    s->initial_bytes = initial;
    hh_track_pool_create(s, NULL);
    *out = s;
    return HH_OK;
}

void hh_scratch_destroy(hh_scratch *s) {
    if (s == NULL) return;
    hh_track_pool_destroy(s);
    while (s->retired != NULL) {
        sbuf *b = s->retired;
        s->retired = b->prev;
        buf_unmap(b);
    }
    if (s->cur != NULL) buf_unmap(s->cur);
    hhi_meta_free(s);
}

void *hh_scratch_alloc(hh_scratch *s, size_t size, size_t align) {
    if (hh_unlikely(s == NULL || size == 0 || size > SIZE_MAX / 8 || !hhi_linear_align_ok(&align) ||
                    align > SIZE_MAX / 8)) {
        hhi_error(HH_E_INVALID_ARG, "hh_scratch_alloc: %s", s == NULL ? "scratch is NULL" : size == 0 ? "size 0"
                  : size > SIZE_MAX / 8 ? "size too large" : "align is not a power of two");
        return NULL;
    }
    uintptr_t p = hh_align_up_ptr((uintptr_t)s->ptr, align);
    if (hh_likely(s->cur != NULL && p <= (uintptr_t)s->end && size <= (uintptr_t)s->end - p)) {
        s->ptr = (uint8_t *)(p + size);
        hh_track_alloc(s, (void *)p, size);
        return (void *)p;
    }
    return scratch_alloc_slow(s, size, align);
}

void hh_scratch_reset(hh_scratch *s) {
    if (s == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_scratch_reset: scratch is NULL");
        return;
    }
    hh_track_pool_destroy(s);
    hh_track_pool_create(s, NULL);
    while (s->retired != NULL) {
        sbuf *b = s->retired;
        s->retired = b->prev;
        buf_unmap(b);
    }
    s->retired_count = 0;
    if (s->cur != NULL) {
        hh_track_noaccess(buf_start(s->cur), s->cur->size - SCRATCH_HEADER);
        s->ptr = buf_start(s->cur);
    }
}

hh_status hh_scratch_info_get(const hh_scratch *s, hh_scratch_info *out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_scratch_info_get: out is NULL");
    if (s == NULL) {
        memset(out, 0, sizeof *out);  /* the caller may read it without checking the status */
        return hhi_error(HH_E_INVALID_ARG, "hh_scratch_info_get: scratch is NULL");
    }
    *out = (hh_scratch_info){
        .capacity_bytes = s->cur != NULL ? s->cur->size - SCRATCH_HEADER : 0,
        .used_bytes = s->cur != NULL ? (size_t)(s->ptr - buf_start(s->cur)) : 0,
        .retired_count = s->retired_count,
        .map_count = s->map_count,
    };
    return HH_OK;
}
