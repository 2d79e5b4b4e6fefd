/* stack.c -- Game Engine Architecture stack allocators over one buffer: the
 * shared one-buffer bump stack (hhi_lstack, also used by frame.c), the stack
 * allocator with markers (hh_stack) and the double-ended stack (hh_dstack).
 *
 * Invariants:
 *   L1  (hhi_lstack) 0 <= top <= capacity; see linear_internal.h.
 *   D1  (hh_dstack) low + high <= capacity: the low end uses [base, base+low),
 *       the high end [base+capacity-high, base+capacity); they never overlap.
 *   D2  each end is its own memcheck pool (anchors: &ds->low_anchor and
 *       &ds->high_anchor); the gap between the ends is no-access.
 */
#include "linear_internal.h"

#include "../common/hh_meta.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
struct hh_stack {
    hhi_lstack s;                  /* the buffer and its top */
};

struct hh_dstack {
    uint8_t *base;                 /* first byte of the buffer */
    size_t   capacity;             /* bytes */
    size_t   used[2];              /* bytes in use at HH_DSTACK_LOW / HH_DSTACK_HIGH */
    bool     owned;                /* mapped by us */
    char     anchor[2];            /* addresses used as memcheck pool ids, one per end */
};

/* ---------------------------------------------------------------------------
   hhi_lstack
--------------------------------------------------------------------------- */
/* Resolves and validates a buffer: maps capacity bytes when memory is NULL. */
static hh_status buffer_make(size_t capacity, void *memory, const char *who, uint8_t **base, bool *owned) {
    if (capacity == 0) return hhi_error(HH_E_INVALID_ARG, "%s: capacity 0", who);
    if (capacity > SIZE_MAX / 4) return hhi_error(HH_E_INVALID_ARG, "%s: capacity %zu too large", who, capacity);
    if (memory != NULL) {
        *base = memory;
        *owned = false;
        return HH_OK;
    }
    *base = hhi_os_map(capacity, 0);
    if (*base == NULL) return hhi_error(HH_E_NO_MEMORY, "%s: cannot map %zu bytes", who, capacity);
    *owned = true;
    return HH_OK;
}

static void buffer_drop(uint8_t *base, size_t capacity, bool owned) {
    hh_track_undefined(base, capacity);  /* a caller buffer becomes plain memory again */
    if (owned) hhi_os_unmap(base, capacity);
}

size_t hhi_linear_null_value(const char *who, const char *what) {
    hhi_error(HH_E_INVALID_ARG, "%s: %s is NULL", who, what);
    return 0;
}

/* Validates size/align for a `who` allocation; false after reporting. */
static bool alloc_args_ok(size_t size, size_t *align, const char *who) {
    size_t a = *align;
    if (size == 0) {
        hhi_error(HH_E_INVALID_ARG, "%s: size 0", who);
        return false;
    }
    if (!hhi_linear_align_ok(align)) {
        hhi_error(HH_E_INVALID_ARG, "%s: align %zu is not a power of two", who, a);
        return false;
    }
    return true;
}

hh_status hhi_lstack_init(hhi_lstack *s, size_t capacity, void *memory, const char *who) {
    *s = (hhi_lstack){ 0 };
    hh_status st = buffer_make(capacity, memory, who, &s->base, &s->owned);
    if (st != HH_OK) return st;
    s->capacity = capacity;
    hh_track_pool_create(s, s->base);
    hh_track_noaccess(s->base, capacity);
    return HH_OK;
}

void hhi_lstack_fini(hhi_lstack *s) {
    if (s->base == NULL) return;
    hh_track_pool_destroy(s);
    buffer_drop(s->base, s->capacity, s->owned);
    *s = (hhi_lstack){ 0 };
}

void *hhi_lstack_alloc(hhi_lstack *s, size_t size, size_t align, const char *who) {
    if (!alloc_args_ok(size, &align, who)) return NULL;
    uintptr_t start = (uintptr_t)s->base + s->top, end = (uintptr_t)s->base + s->capacity;
    uintptr_t p = hh_align_up_ptr(start, align);
    if (p < start || p > end || size > end - p) {
        hhi_error(HH_E_NO_MEMORY, "%s: %zu bytes (align %zu) do not fit: %zu of %zu bytes used", who, size, align,
                  s->top, s->capacity);
        return NULL;
    }
    s->top = (size_t)(p + size - (uintptr_t)s->base);
    hh_track_alloc(s, (void *)p, size);
    return (void *)p;
}

void hhi_lstack_cut(hhi_lstack *s, size_t offset) {
    hh_assert_internal(offset <= s->top);
    hhi_linear_track_cut(s, s->base, offset, s->top);
    s->top = offset;
}

/* ---------------------------------------------------------------------------
   hh_stack
--------------------------------------------------------------------------- */
hh_status hh_stack_create(const hh_stack_desc *desc, hh_stack **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_stack_create: out is NULL");
    *out = NULL;  /* before any other early return: a failed create never leaves a stale pointer */
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_stack_create: desc is NULL");
    hh_stack *s = hhi_meta_alloc(sizeof *s);
    if (s == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_stack_create: no memory for the stack object");
    hh_status st = hhi_lstack_init(&s->s, desc->capacity, desc->memory, "hh_stack_create");
    if (st != HH_OK) {
        hhi_meta_free(s);
        return st;
    }
    *out = s;
    return HH_OK;
}

void hh_stack_destroy(hh_stack *s) {
    if (s == NULL) return;
    hhi_lstack_fini(&s->s);
    hhi_meta_free(s);
}

void *hh_stack_alloc(hh_stack *s, size_t size, size_t align) {
    if (s == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_stack_alloc: stack is NULL");
        return NULL;
    }
    return hhi_lstack_alloc(&s->s, size, align, "hh_stack_alloc");
}

hh_stack_marker hh_stack_get_marker(const hh_stack *s) {
    if (s == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_stack_get_marker: stack is NULL");
        return (hh_stack_marker){ 0 };
    }
    return (hh_stack_marker){ s->s.top };
}

hh_status hh_stack_free_to_marker(hh_stack *s, hh_stack_marker m) {
    if (s == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_stack_free_to_marker: stack is NULL");
    if (m.offset > s->s.top)
        return hhi_error(HH_E_INVALID_ARG, "hh_stack_free_to_marker: marker %zu is above the top %zu (stale marker)",
                         m.offset, s->s.top);
    hhi_lstack_cut(&s->s, m.offset);
    return HH_OK;
}

void hh_stack_clear(hh_stack *s) {
    if (s == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_stack_clear: stack is NULL");
        return;
    }
    hhi_lstack_cut(&s->s, 0);
}

size_t hh_stack_used(const hh_stack *s) {
    if (s == NULL) return hhi_linear_null_value("hh_stack_used", "stack");
    return s->s.top;
}

/* ---------------------------------------------------------------------------
   hh_dstack
--------------------------------------------------------------------------- */
static bool end_ok(hh_dstack_end end) { return end == HH_DSTACK_LOW || end == HH_DSTACK_HIGH; }

/* Cuts end e back to `keep` bytes (keep <= used[e]): memcheck forgets the
   allocations above and the freed bytes become no-access. */
static void dstack_cut(hh_dstack *ds, hh_dstack_end e, size_t keep) {
    size_t old = ds->used[e];
    if (e == HH_DSTACK_LOW) {
        hhi_linear_track_cut(&ds->anchor[e], ds->base, keep, old);
    } else {
        uint8_t *top = ds->base + ds->capacity;
        if (keep == 0) {
            hh_track_pool_destroy(&ds->anchor[e]);
            hh_track_pool_create(&ds->anchor[e], ds->base);
        } else {
            hh_track_trim(&ds->anchor[e], top - keep, keep);
        }
        hh_track_noaccess(top - old, old - keep);
    }
    ds->used[e] = keep;
}

hh_status hh_dstack_create(const hh_stack_desc *desc, hh_dstack **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_dstack_create: out is NULL");
    *out = NULL;  /* before any other early return: a failed create never leaves a stale pointer */
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_dstack_create: desc is NULL");
    hh_dstack *ds = hhi_meta_alloc(sizeof *ds);
    if (ds == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_dstack_create: no memory for the stack object");
    hh_status st = buffer_make(desc->capacity, desc->memory, "hh_dstack_create", &ds->base, &ds->owned);
    if (st != HH_OK) {
        hhi_meta_free(ds);
        return st;
    }
    ds->capacity = desc->capacity;
    hh_track_pool_create(&ds->anchor[0], ds->base);
    hh_track_pool_create(&ds->anchor[1], ds->base);
    hh_track_noaccess(ds->base, ds->capacity);
    *out = ds;
    return HH_OK;
}

void hh_dstack_destroy(hh_dstack *ds) {
    if (ds == NULL) return;
    hh_track_pool_destroy(&ds->anchor[0]);
    hh_track_pool_destroy(&ds->anchor[1]);
    buffer_drop(ds->base, ds->capacity, ds->owned);
    hhi_meta_free(ds);
}

void *hh_dstack_alloc(hh_dstack *ds, hh_dstack_end end, size_t size, size_t align) {
    if (ds == NULL || !end_ok(end)) {
        hhi_error(HH_E_INVALID_ARG, "hh_dstack_alloc: %s", ds == NULL ? "stack is NULL" : "bad end");
        return NULL;
    }
    if (!alloc_args_ok(size, &align, "hh_dstack_alloc")) return NULL;
    uintptr_t lo = (uintptr_t)ds->base + ds->used[HH_DSTACK_LOW];
    uintptr_t hi = (uintptr_t)ds->base + ds->capacity - ds->used[HH_DSTACK_HIGH];
    uintptr_t p;
    bool fits;
    if (end == HH_DSTACK_LOW) {
        p = hh_align_up_ptr(lo, align);
        fits = p >= lo && p <= hi && size <= hi - p;
    } else {
        fits = size <= hi - lo;
        p = fits ? (hi - size) & ~(uintptr_t)(align - 1) : 0;
        fits = fits && p >= lo;
    }
    if (!fits) {
        hhi_error(HH_E_NO_MEMORY, "hh_dstack_alloc: %zu bytes at the %s end would cross the other end (%zu free)", size,
                  end == HH_DSTACK_LOW ? "low" : "high", (size_t)(hi - lo));
        return NULL;
    }
    if (end == HH_DSTACK_LOW) ds->used[end] = (size_t)(p + size - (uintptr_t)ds->base);
    else ds->used[end] = (size_t)((uintptr_t)ds->base + ds->capacity - p);
    hh_track_alloc(&ds->anchor[end], (void *)p, size);
    return (void *)p;
}

hh_stack_marker hh_dstack_get_marker(const hh_dstack *ds, hh_dstack_end end) {
    if (ds == NULL || !end_ok(end)) {
        hhi_error(HH_E_INVALID_ARG, "hh_dstack_get_marker: %s", ds == NULL ? "stack is NULL" : "bad end");
        return (hh_stack_marker){ 0 };
    }
    return (hh_stack_marker){ ds->used[end] };
}

hh_status hh_dstack_free_to_marker(hh_dstack *ds, hh_dstack_end end, hh_stack_marker m) {
    if (ds == NULL || !end_ok(end)) return hhi_error(HH_E_INVALID_ARG, "hh_dstack_free_to_marker: %s", ds == NULL ? "stack is NULL" : "bad end");
    if (m.offset > ds->used[end])
        return hhi_error(HH_E_INVALID_ARG, "hh_dstack_free_to_marker: marker %zu is above the %s top %zu (stale)",
                         m.offset, end == HH_DSTACK_LOW ? "low" : "high", ds->used[end]);
    dstack_cut(ds, end, m.offset);
    return HH_OK;
}

void hh_dstack_clear(hh_dstack *ds, hh_dstack_end end) {
    if (ds == NULL || !end_ok(end)) {
        hhi_error(HH_E_INVALID_ARG, "hh_dstack_clear: %s", ds == NULL ? "stack is NULL" : "bad end");
        return;
    }
    dstack_cut(ds, end, 0);
}

size_t hh_dstack_used(const hh_dstack *ds, hh_dstack_end end) {
    if (ds == NULL) return hhi_linear_null_value("hh_dstack_used", "stack");
    if (!end_ok(end)) {
        hhi_error(HH_E_INVALID_ARG, "hh_dstack_used: end %d is neither HH_DSTACK_LOW nor HH_DSTACK_HIGH", (int)end);
        return 0;
    }
    return ds->used[end];
}

size_t hh_dstack_free_bytes(const hh_dstack *ds) {
    if (ds == NULL) return hhi_linear_null_value("hh_dstack_free_bytes", "stack");
    return ds->capacity - ds->used[0] - ds->used[1];
}
