/* stackvec.c -- growable array on a mark stack.
 *
 * Improvement over Unreal's TMemStackAllocator, which always copies on growth
 * and strands the old buffer: while the vector's buffer is the top allocation
 * of the stack it grows in place (hhi_memstack_try_grow), so a vector filled
 * without interleaved allocations never copies. Otherwise it doubles into a
 * new buffer; the old one is reclaimed by the next pop of the enclosing mark.
 *
 * Invariants: count <= capacity; data == NULL iff capacity == 0; data is
 * aligned to align and holds capacity * elem_size bytes.
 */
#include "linear_internal.h"

#include <string.h>

/* ---------------------------------------------------------------------------
   Helpers
--------------------------------------------------------------------------- */
/* Grows the buffer to hold at least n elements. Caller validated v. */
static hh_status vec_grow(hh_stackvec *v, size_t n) {
    if (n <= v->capacity) return HH_OK;
    size_t cap = v->capacity < 8 ? 8 : v->capacity * 2;
    if (cap < n) cap = n;
    if (cap > SIZE_MAX / 4 / v->elem_size)
        return hhi_error(HH_E_NO_MEMORY, "hh_stackvec: %zu elements of %zu bytes is too large", n, v->elem_size);
    size_t old_bytes = v->capacity * v->elem_size, new_bytes = cap * v->elem_size;
    if (v->data != NULL && hhi_memstack_try_grow(v->ms, v->data, old_bytes, new_bytes)) {
        v->capacity = cap;
        v->grow_in_place++;
        return HH_OK;
    }
    void *p = hh_memstack_alloc(v->ms, new_bytes, v->align);
    if (p == NULL) return hh_last_error();  /* the stack reported it */
    if (v->count != 0) memcpy(p, v->data, v->count * v->elem_size);
    if (v->data != NULL) v->grow_copy++;
    v->data = p;
    v->capacity = cap;
    return HH_OK;
}

static bool vec_ok(const hh_stackvec *v) { return v != NULL && v->ms != NULL && v->elem_size != 0; }

/* ---------------------------------------------------------------------------
   Public interface
--------------------------------------------------------------------------- */
hh_status hh_stackvec_init(hh_stackvec *v, hh_memstack *ms, size_t elem_size, size_t align) {
    if (v == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_init: vector is NULL");
    *v = (hh_stackvec){ 0 };  /* v is the out: a failed init leaves an empty vector that every call refuses */
    if (ms == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_init: stack is NULL");
    if (elem_size == 0) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_init: elem_size 0");
    size_t a = align;
    if (!hhi_linear_align_ok(&a)) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_init: align %zu is not a power of two", align);
    *v = (hh_stackvec){ .ms = ms, .elem_size = elem_size, .align = a };
    return HH_OK;
}

hh_status hh_stackvec_reserve(hh_stackvec *v, size_t n) {
    if (!vec_ok(v)) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_reserve: vector not initialised");
    return vec_grow(v, n);
}

void *hh_stackvec_push(hh_stackvec *v) {
    if (!vec_ok(v)) {
        hhi_error(HH_E_INVALID_ARG, "hh_stackvec_push: vector not initialised");
        return NULL;
    }
    if (hh_unlikely(v->count == v->capacity) && vec_grow(v, v->count + 1) != HH_OK) return NULL;
    return (uint8_t *)v->data + v->elem_size * v->count++;
}

hh_status hh_stackvec_append(hh_stackvec *v, const void *src, size_t n) {
    if (!vec_ok(v)) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_append: vector not initialised");
    if (src == NULL && n != 0) return hhi_error(HH_E_INVALID_ARG, "hh_stackvec_append: src is NULL");
    if (n > SIZE_MAX - v->count) return hhi_error(HH_E_NO_MEMORY, "hh_stackvec_append: count overflows");
    hh_status s = vec_grow(v, v->count + n);
    if (s != HH_OK) return s;
    if (n != 0) memcpy((uint8_t *)v->data + v->elem_size * v->count, src, n * v->elem_size);
    v->count += n;
    return HH_OK;
}

void *hh_stackvec_at(const hh_stackvec *v, size_t i) {
    if (v == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_stackvec_at: vector is NULL");
        return NULL;
    }
    if (i >= v->count) return NULL;  /* a query answer, not an error (linear.h) */
    return (uint8_t *)v->data + v->elem_size * i;
}
