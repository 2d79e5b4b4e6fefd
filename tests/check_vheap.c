/* check_vheap.c -- the virtual heap (include/hheap/vheap.h): handle and error
 * contracts, alignment, pins, resize, grow/shrink, two-phase passes, and a
 * shadow model -- a byte array standing in for the GPU buffer, in which the
 * test performs the planned copies (or skips or cancels them) and verifies
 * every byte of every block after every pass; frees, allocations and pins
 * during a pass; fault injection on the metadata.
 *
 * The shadow buffer plays a GPU that reuses memory: a range the heap frees is
 * scribbled over (0xDD), a source is scribbled after a done copy, and a fresh
 * block is filled with its own pattern at once -- so a block the heap placed
 * over a live, reserved or just-moved range shows up as wrong bytes. */
#include "hheap/vheap.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hheap/mapdump.h"
#include <string.h>

#include "../src/vheap/vheap_internal.h"
#include "test_util.h"

/* ---------------------------------------------------------------------------
   Shadow model
--------------------------------------------------------------------------- */
typedef struct vobj {
    hh_handle h;
    uint64_t  size, align, key;
    unsigned  pins;
    unsigned  pass_pins;    /* pins sh_pass took (and drops after the pass) */
    uint64_t  pinned_at;
} vobj;

typedef struct vshadow {
    hh_vheap *heap;
    uint8_t  *buf;          /* the "GPU buffer" */
    uint64_t  buf_size;
    vobj     *o;
    size_t    n, cap;
    uint64_t  next_key;
} vshadow;

static void sh_init(vshadow *s, uint64_t size) {
    memset(s, 0, sizeof *s);
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = size }, &s->heap), HH_OK);
    s->buf_size = size;
    s->buf = malloc(size);
    ck_assert_ptr_nonnull(s->buf);
    memset(s->buf, 0xDD, size);
    s->next_key = 1;
}

static void sh_fini(vshadow *s) {
    ck_assert_int_eq(hh_vheap_check(s->heap), HH_OK);
    hh_vheap_destroy(s->heap);
    free(s->buf);
    free(s->o);
}

static void sh_grow_buf(vshadow *s, uint64_t size) {
    s->buf = realloc(s->buf, size);
    ck_assert_ptr_nonnull(s->buf);
    if (size > s->buf_size) memset(s->buf + s->buf_size, 0xDD, size - s->buf_size);
    s->buf_size = size;
}

/* Allocates and fills; false if the heap said no (with a status of NO_MEMORY). */
static bool sh_alloc(vshadow *s, uint64_t size, uint64_t align, uint32_t tag) {
    hh_handle h = hh_valloc(s->heap, size, align, tag);
    if (hh_is_null(h)) {
        ck_assert_int_eq(hh_last_error(), HH_E_NO_MEMORY);
        return false;
    }
    uint64_t off = hh_voffset(s->heap, h);
    ck_assert_uint_eq(off % (align < 16 ? 16 : align), 0);
    ck_assert_uint_ge(hh_vsize(s->heap, h), size);
    ck_assert_uint_le(off + size, s->buf_size);
    ck_assert_uint_eq(hh_vtag(s->heap, h), tag);
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->o = realloc(s->o, s->cap * sizeof *s->o);
        ck_assert_ptr_nonnull(s->o);
    }
    vobj *o = &s->o[s->n++];
    *o = (vobj){ .h = h, .size = size, .align = align, .key = s->next_key++ };
    hh_test_fill(s->buf + off, (size_t)size, o->key);
    return true;
}

/* Drops object i from the shadow; the heap's range is scribbled (reusable). */
static void sh_forget(vshadow *s, size_t i, uint64_t off, uint64_t size) {
    if (off != HH_VOFFSET_NONE) memset(s->buf + off, 0xDD, (size_t)size);
    s->o[i] = s->o[--s->n];
}

static void sh_free(vshadow *s, size_t i) {
    uint64_t off = hh_voffset(s->heap, s->o[i].h), size = hh_vsize(s->heap, s->o[i].h);
    ck_assert_int_eq(hh_vfree(s->heap, s->o[i].h), HH_OK);
    ck_assert_uint_eq(hh_voffset(s->heap, s->o[i].h), HH_VOFFSET_NONE);
    sh_forget(s, i, off, size);
}

static size_t sh_find(const vshadow *s, hh_handle h) {
    for (size_t i = 0; i < s->n; i++)
        if (s->o[i].h.id == h.id) return i;
    return SIZE_MAX;
}

/* Every byte of every object, alignment, no two objects overlapping (sorted
   check through the walk), pinned objects unmoved, the heap's invariants. */
typedef struct walk_acc { uint64_t end, live, free; uint32_t n; } walk_acc;
static void walk_fn(const hh_block_info *b, void *user) {
    walk_acc *a = user;
    ck_assert_uint_eq(b->offset, a->end);
    a->end = b->offset + b->size;
    if (b->state == HH_BLOCK_LIVE || b->state == HH_BLOCK_PINNED) { a->live += b->size; a->n++; }
    if (b->state == HH_BLOCK_FREE) a->free += b->size;
}

static void sh_verify(vshadow *s) {
    ck_assert_int_eq(hh_vheap_check(s->heap), HH_OK);
    for (size_t i = 0; i < s->n; i++) {
        const vobj *o = &s->o[i];
        uint64_t off = hh_voffset(s->heap, o->h);
        ck_assert_uint_ne(off, HH_VOFFSET_NONE);
        ck_assert_uint_eq(off % (o->align < 16 ? 16 : o->align), 0);
        if (o->pins) ck_assert_uint_eq(off, o->pinned_at);
        long bad = hh_test_verify(s->buf + off, (size_t)o->size, o->key);
        if (bad != -1) ck_abort_msg("object %zu (key %llu) at %llu: byte %ld wrong", i, (unsigned long long)o->key,
                                    (unsigned long long)off, bad);
    }
    walk_acc a = {0};
    hh_vheap_walk(s->heap, walk_fn, &a);
    ck_assert_uint_eq(a.end, hh_vheap_size(s->heap));
    ck_assert_uint_eq(a.n, s->n);
    hh_vheap_stats st;
    hh_vheap_stats_get(s->heap, &st);
    ck_assert_uint_eq(st.live_blocks, s->n);
    ck_assert_uint_eq(st.used_bytes, a.live);
    ck_assert_uint_eq(st.free_bytes, a.free);
}

/* Ranges of one pass are pairwise disjoint and inside the heap. */
static void check_pass_disjoint(const hh_vdefrag_pass *p, uint64_t size) {
    for (uint32_t i = 0; i < p->move_count; i++) {
        const hh_vmove *m = &p->moves[i];
        ck_assert(m->dst_offset + m->size <= m->src_offset ||            /* never overlapping; */
                  m->src_offset + m->size <= m->dst_offset);             /* upwards: an AUTO slide */
        ck_assert_uint_le(m->dst_offset + m->size, size);
        ck_assert_uint_le(m->src_offset + m->size, size);
        for (uint32_t j = 0; j < i; j++) {
            const hh_vmove *q = &p->moves[j];
            uint64_t a[2] = { m->src_offset, m->dst_offset }, b[2] = { q->src_offset, q->dst_offset };
            for (int x = 0; x < 2; x++)
                for (int y = 0; y < 2; y++)
                    ck_assert(a[x] + m->size <= b[y] || b[y] + q->size <= a[x]);
        }
    }
}

/* One pass in the shadow: plan, perform each copy as `choose` says (rng: 0 =
   every move done), optionally free / allocate / pin during the pass, end,
   verify. Returns the pass's done bytes. */
static uint64_t sh_pass(vshadow *s, const hh_vdefrag_budget *budget, hh_rng *rng, bool chaos, bool *compact) {
    hh_vdefrag_pass p;
    ck_assert_int_eq(hh_vdefrag_begin(s->heap, budget, &p), HH_OK);
    ck_assert(hh_vdefrag_active(s->heap));
    check_pass_disjoint(&p, s->buf_size);
    ck_assert_int_eq(hh_vheap_check(s->heap), HH_OK);
    if (compact) *compact = p.compact;
    hh_vmove_result *res = calloc(p.move_count + 1u, sizeof *res);
    ck_assert_ptr_nonnull(res);
    bool *freed = calloc(p.move_count + 1u, sizeof *freed);      /* gone from the model */
    bool *stale = calloc(p.move_count + 1u, sizeof *stale);      /* freed by hh_vfree during the pass */
    ck_assert_ptr_nonnull(freed);
    ck_assert_ptr_nonnull(stale);
    for (uint32_t i = 0; i < p.move_count; i++) {
        const hh_vmove *m = &p.moves[i];
        size_t oi = sh_find(s, m->handle);
        ck_assert_uint_ne(oi, SIZE_MAX);
        ck_assert_uint_eq(hh_voffset(s->heap, m->handle), m->src_offset);   /* unchanged until end */
        ck_assert_uint_eq(s->o[oi].pins, 0);
        unsigned pick = chaos ? hh_rng_below(rng, 10) : 0;
        if (pick == 7) {                                   /* skipped: resource in use */
            res[i] = HH_VMOVE_SKIPPED;
            memset(s->buf + m->dst_offset, 0xAB, (size_t)m->size);   /* a half-done copy must not matter */
        } else if (pick == 8) {                            /* cancelled: the engine drops the resource */
            res[i] = HH_VMOVE_CANCELLED;
            s->o[oi] = s->o[--s->n];
            freed[i] = true;
        } else if (pick == 9) {                            /* freed during the pass */
            ck_assert_int_eq(hh_vfree(s->heap, m->handle), HH_OK);
            ck_assert_uint_eq(hh_voffset(s->heap, m->handle), HH_VOFFSET_NONE);
            ck_assert_int_eq(hh_vfree(s->heap, m->handle), HH_E_STALE_HANDLE);
            s->o[oi] = s->o[--s->n];
            res[i] = (hh_vmove_result)hh_rng_below(rng, 3);   /* whatever the caller says: cancelled */
            freed[i] = stale[i] = true;
        } else if (pick == 6) {                            /* pinned during the pass: stays at src */
            ck_assert_int_eq(hh_vpin(s->heap, m->handle), HH_OK);
            s->o[oi].pins++;
            s->o[oi].pass_pins++;
            s->o[oi].pinned_at = m->src_offset;
            res[i] = HH_VMOVE_DONE;
            memcpy(s->buf + m->dst_offset, s->buf + m->src_offset, (size_t)m->size);
        } else {
            memcpy(s->buf + m->dst_offset, s->buf + m->src_offset, (size_t)m->size);
            res[i] = HH_VMOVE_DONE;
        }
        ck_assert_int_eq(hh_vresize(s->heap, m->handle, 16), stale[i] ? HH_E_STALE_HANDLE : HH_E_PINNED);
    }
    if (chaos) {                                           /* allocations and frees of other blocks mid-pass */
        for (int k = 0; k < 3; k++) sh_alloc(s, 16u * (1u + hh_rng_below(rng, 64)), 16u << hh_rng_below(rng, 5), 3);
        if (s->n > 4) {
            size_t i = hh_rng_below(rng, (uint32_t)s->n);
            bool moving = false;
            for (uint32_t k = 0; k < p.move_count; k++) moving |= p.moves[k].handle.id == s->o[i].h.id;
            if (!moving && s->o[i].pins == 0) sh_free(s, i);
        }
    }
    /* a bad result leaves the pass open and unchanged */
    if (p.move_count) {
        hh_vmove_result keep = res[0];
        res[0] = (hh_vmove_result)7;
        ck_assert_int_eq(hh_vdefrag_end(s->heap, res, NULL), HH_E_INVALID_ARG);
        ck_assert(hh_vdefrag_active(s->heap));
        res[0] = keep;
    }
    hh_vdefrag_report rep;
    const hh_vmove *mv = p.moves;
    uint32_t count = p.move_count;
    hh_vmove *copy = malloc((count + 1u) * sizeof *copy);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, mv, count * sizeof *copy);
    ck_assert_int_eq(hh_vdefrag_end(s->heap, res, &rep), HH_OK);
    ck_assert(!hh_vdefrag_active(s->heap));
    ck_assert_uint_eq(rep.done + rep.skipped + rep.cancelled, count);
    /* the model's side of the results: moved sources and dropped ranges are garbage now */
    for (uint32_t i = 0; i < count; i++) {
        const hh_vmove *m = &copy[i];
        if (freed[i]) {
            ck_assert_uint_eq(hh_voffset(s->heap, m->handle), HH_VOFFSET_NONE);
            memset(s->buf + m->src_offset, 0xDD, (size_t)m->size);
            memset(s->buf + m->dst_offset, 0xDD, (size_t)m->size);
        } else {
            uint64_t off = hh_voffset(s->heap, m->handle);
            size_t oi = sh_find(s, m->handle);
            bool stays = res[i] == HH_VMOVE_SKIPPED || s->o[oi].pins;
            ck_assert_uint_eq(off, stays ? m->src_offset : m->dst_offset);
            memset(s->buf + (stays ? m->dst_offset : m->src_offset), 0xEE, (size_t)m->size);
        }
    }
    sh_verify(s);
    uint64_t done = rep.bytes_moved;
    const hh_vmove *j;
    ck_assert_uint_eq(hh_vdefrag_journal(s->heap, &j), rep.done);
    /* unpin what the pass pinned */
    for (size_t i = 0; i < s->n; i++)
        for (; s->o[i].pass_pins; s->o[i].pass_pins--, s->o[i].pins--)
            ck_assert_int_eq(hh_vunpin(s->heap, s->o[i].h), HH_OK);
    free(copy);
    free(res);
    free(freed);
    free(stale);
    return done;
}

/* ---------------------------------------------------------------------------
   Fixtures
--------------------------------------------------------------------------- */
static void setup(void) {
    hh_test_capture_errors();
    hh_test_fail_after(-1);
}
static void teardown(void) {
    hh_test_fail_after(-1);
    hh_set_error_handler(NULL, NULL);
}

/* ---------------------------------------------------------------------------
   Contracts
--------------------------------------------------------------------------- */
START_TEST(bad_arguments) {
    hh_vheap *h = NULL;
    ck_assert_int_eq(hh_vheap_create(NULL, &h), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 0 }, &h), HH_E_INVALID_ARG);
    ck_assert_ptr_null(h);
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 4096, .flags = 1 }, &h), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = HH_VHEAP_MAX_SIZE + 16 }, &h), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 1u << 20 }, &h), HH_OK);
    hh_test_reset_captured();
    ck_assert(hh_is_null(hh_valloc(h, 0, 16, 0)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_INVALID_ARG);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert(hh_is_null(hh_valloc(h, 64, 3, 0)));
    ck_assert(hh_is_null(hh_valloc(h, 64, 0, 0)));
    ck_assert(hh_is_null(hh_valloc(h, 64, 1u << 17, 0)));
    ck_assert(hh_is_null(hh_valloc(h, UINT64_MAX, 16, 0)));
    ck_assert_int_eq(hh_last_error(), HH_E_INVALID_ARG);
    ck_assert(hh_is_null(hh_valloc(h, 2u << 20, 16, 0)));
    ck_assert_int_eq(hh_last_error(), HH_E_NO_MEMORY);
    ck_assert(hh_is_null(hh_valloc(NULL, 64, 16, 0)));
    ck_assert_int_eq(hh_vfree(h, HH_NULL), HH_OK);
    ck_assert_int_eq(hh_vfree(NULL, HH_NULL), HH_E_INVALID_ARG);
    hh_vdefrag_pass p;
    ck_assert_int_eq(hh_vdefrag_begin(NULL, NULL, &p), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vdefrag_begin(h, NULL, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vdefrag_end(h, NULL, NULL), HH_E_INVALID_ARG);   /* no pass open */
    ck_assert_int_eq(hh_vheap_grow(h, 1024), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vheap_grow(NULL, 1u << 21), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_vheap_check(h), HH_OK);
    hh_vheap_destroy(h);
    hh_vheap_destroy(NULL);
}
END_TEST

START_TEST(stale_forged_foreign) {
    hh_vheap *a, *b;
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 1u << 20 }, &a), HH_OK);
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 1u << 20 }, &b), HH_OK);
    hh_handle x = hh_valloc(a, 100, 16, 5), y = hh_valloc(b, 100, 16, 5);
    ck_assert(!hh_is_null(x) && !hh_is_null(y));
    hh_test_reset_captured();
    ck_assert_uint_eq(hh_voffset(a, y), HH_VOFFSET_NONE);          /* foreign */
    ck_assert_int_eq(hh_test_last_captured(), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_vfree(a, y), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_vfree(a, (hh_handle){ x.id ^ 0x100000000ull }), HH_E_STALE_HANDLE);   /* forged generation */
    ck_assert_int_eq(hh_vfree(a, (hh_handle){ 0xFFFFFFull }), HH_E_STALE_HANDLE);
    ck_assert_uint_eq(hh_vsize(a, y), 0);
    ck_assert_uint_eq(hh_vtag(a, y), 0);
    ck_assert_int_eq(hh_vfree(a, x), HH_OK);
    ck_assert_int_eq(hh_vfree(a, x), HH_E_STALE_HANDLE);             /* double free */
    ck_assert_int_eq(hh_vpin(a, x), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_vunpin(a, x), HH_E_STALE_HANDLE);
    ck_assert_int_eq(hh_vresize(a, x, 64), HH_E_STALE_HANDLE);
    ck_assert_uint_eq(hh_voffset(a, HH_NULL), HH_VOFFSET_NONE);
    ck_assert_uint_eq(hh_voffset(b, y), 0);                          /* b untouched */
    ck_assert_int_eq(hh_vheap_check(a), HH_OK);
    ck_assert_int_eq(hh_vheap_check(b), HH_OK);
    hh_vheap_destroy(a);
    hh_vheap_destroy(b);
}
END_TEST

START_TEST(handle_table_full) {
    hh_vheap *h;
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 1u << 20, .max_handles = 8 }, &h), HH_OK);
    hh_handle v[8];
    for (int i = 0; i < 8; i++) ck_assert(!hh_is_null(v[i] = hh_valloc(h, 64, 16, 0)));
    hh_test_reset_captured();
    ck_assert(hh_is_null(hh_valloc(h, 64, 16, 0)));
    ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_int_eq(hh_vheap_check(h), HH_OK);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(hh_vfree(h, v[i]), HH_OK);
    hh_vheap_stats st;
    hh_vheap_stats_get(h, &st);
    ck_assert_uint_eq(st.free_blocks, 1);
    ck_assert_uint_eq(st.free_bytes, 1u << 20);
    hh_vheap_destroy(h);
}
END_TEST

START_TEST(alignment_up_to_64k) {
    vshadow s;
    sh_init(&s, 4u << 20);
    for (uint64_t a = 1; a <= HH_VHEAP_MAX_ALIGN; a <<= 1) {
        ck_assert(sh_alloc(&s, 1 + a % 1000, a, 1));
        ck_assert(sh_alloc(&s, 48, 16, 2));
    }
    sh_verify(&s);
    for (size_t i = 0; i < s.n; i += 2) sh_free(&s, i);
    bool compact = false;
    for (int k = 0; k < 50 && !compact; k++) sh_pass(&s, &(hh_vdefrag_budget){ .max_moves = 4 }, NULL, false, &compact);
    ck_assert(compact);
    sh_fini(&s);
}
END_TEST

START_TEST(pins) {
    vshadow s;
    sh_init(&s, 1u << 20);
    for (int i = 0; i < 64; i++) ck_assert(sh_alloc(&s, 1024, 256, 0));
    hh_handle top = s.o[63].h;
    ck_assert_int_eq(hh_vpin(s.heap, top), HH_OK);
    s.o[63].pins = 1;
    s.o[63].pinned_at = hh_voffset(s.heap, top);
    ck_assert_int_eq(hh_vfree(s.heap, top), HH_E_PINNED);
    ck_assert_int_eq(hh_vunpin(s.heap, s.o[0].h), HH_E_INVALID_ARG);
    for (int i = 0; i < 40; i++) sh_free(&s, s.o[0].pins ? 1 : 0);
    bool compact = false;
    for (int k = 0; k < 50 && !compact; k++) sh_pass(&s, &(hh_vdefrag_budget){ .max_moves = 3 }, NULL, false, &compact);
    ck_assert(compact);
    size_t ti = sh_find(&s, top);
    ck_assert_uint_eq(hh_voffset(s.heap, top), s.o[ti].pinned_at);
    hh_vheap_stats st;
    hh_vheap_stats_get(s.heap, &st);
    ck_assert_uint_eq(st.pinned_blocks, 1);
    for (unsigned i = 1; i < HH_VHEAP_MAX_PINS; i++) ck_assert_int_eq(hh_vpin(s.heap, top), HH_OK);
    ck_assert_int_eq(hh_vpin(s.heap, top), HH_E_INVALID_ARG);
    for (unsigned i = 0; i < HH_VHEAP_MAX_PINS; i++) ck_assert_int_eq(hh_vunpin(s.heap, top), HH_OK);
    s.o[ti].pins = 0;
    ck_assert_int_eq(hh_vunpin(s.heap, top), HH_E_INVALID_ARG);
    sh_verify(&s);
    sh_fini(&s);
}
END_TEST

START_TEST(resize_in_place) {
    vshadow s;
    sh_init(&s, 64u << 10);
    ck_assert(sh_alloc(&s, 1000, 16, 0));
    ck_assert(sh_alloc(&s, 1000, 16, 0));
    hh_handle a = s.o[0].h;
    ck_assert_int_eq(hh_vresize(s.heap, a, 100), HH_OK);     /* shrink: the tail becomes free */
    s.o[0].size = 100;
    ck_assert_uint_eq(hh_vsize(s.heap, a), 112);
    ck_assert_int_eq(hh_vresize(s.heap, a, 1008), HH_OK);    /* grow back into it */
    hh_test_fill(s.buf + hh_voffset(s.heap, a), 1008, s.o[0].key);
    s.o[0].size = 1008;
    hh_test_reset_captured();
    uint64_t off = hh_voffset(s.heap, a);
    ck_assert_int_eq(hh_vresize(s.heap, a, 5000), HH_E_NO_MEMORY);   /* the next block is live */
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_uint_eq(hh_voffset(s.heap, a), off);
    ck_assert_uint_eq(hh_vsize(s.heap, a), 1008);
    ck_assert_int_eq(hh_vresize(s.heap, a, 0), HH_E_INVALID_ARG);
    hh_handle b = s.o[1].h;
    ck_assert_int_eq(hh_vresize(s.heap, b, 30000), HH_OK);   /* the top region follows b */
    hh_test_fill(s.buf + hh_voffset(s.heap, b), 30000, s.o[1].key);
    s.o[1].size = 30000;
    sh_verify(&s);
    sh_fini(&s);
}
END_TEST

START_TEST(grow_and_shrink) {
    vshadow s;
    sh_init(&s, 64u << 10);
    int n = 0;
    while (sh_alloc(&s, 4096, 256, 0)) n++;
    ck_assert_int_eq(n, 16);
    ck_assert_int_eq(hh_vheap_grow(s.heap, 128u << 10), HH_OK);
    sh_grow_buf(&s, 128u << 10);
    while (sh_alloc(&s, 4096, 256, 0)) n++;
    ck_assert_int_eq(n, 32);
    for (int i = 0; i < 20; i++) sh_free(&s, (size_t)i * 7 % s.n);
    ck_assert_int_eq(hh_vheap_grow(s.heap, 160u << 10), HH_OK);      /* the top free block grows */
    sh_grow_buf(&s, 160u << 10);
    hh_vheap_stats st;
    hh_vheap_stats_get(s.heap, &st);
    bool compact = false;
    for (int k = 0; k < 50 && !compact; k++) sh_pass(&s, &(hh_vdefrag_budget){ .max_moves = 2 }, NULL, false, &compact);
    ck_assert(compact);
    uint64_t ns;
    ck_assert_int_eq(hh_vheap_shrink(s.heap, &ns), HH_OK);
    ck_assert_uint_eq(ns, (uint64_t)s.n * 4096);                      /* down to the live bytes */
    ck_assert_uint_eq(hh_vheap_size(s.heap), ns);
    s.buf_size = ns;
    sh_verify(&s);
    ck_assert(!sh_alloc(&s, 16, 16, 0));                              /* full */
    ck_assert_int_eq(hh_vheap_grow(s.heap, ns + 4096), HH_OK);
    sh_grow_buf(&s, ns + 4096);
    ck_assert(sh_alloc(&s, 4096, 256, 0));
    while (s.n) sh_free(&s, 0);
    ck_assert_int_eq(hh_vheap_shrink(s.heap, &ns), HH_OK);
    ck_assert_uint_eq(ns, 0);                                         /* an empty range */
    ck_assert(hh_is_null(hh_valloc(s.heap, 16, 16, 0)));
    ck_assert_int_eq(hh_vheap_grow(s.heap, 4096), HH_OK);
    ck_assert(sh_alloc(&s, 4096, 16, 0));
    sh_verify(&s);
    sh_fini(&s);
}
END_TEST

/* ---------------------------------------------------------------------------
   Passes
--------------------------------------------------------------------------- */
START_TEST(pass_contract) {
    vshadow s;
    sh_init(&s, 1u << 20);
    for (int i = 0; i < 8; i++) ck_assert(sh_alloc(&s, 4096, 4096, 0));
    sh_free(&s, 0);                                   /* a hole at 0 */
    hh_handle last = s.o[s.n - 1].h;                  /* swap-removal put the top block at index 0 */
    (void)last;
    hh_vdefrag_pass p, q;
    ck_assert_int_eq(hh_vdefrag_begin(s.heap, &(hh_vdefrag_budget){ .max_moves = 1 }, &p), HH_OK);
    ck_assert_uint_eq(p.move_count, 1);
    ck_assert_uint_eq(p.moves[0].dst_offset, 0);
    ck_assert_uint_eq(p.moves[0].src_offset, 7 * 4096);
    ck_assert_int_eq(hh_vdefrag_begin(s.heap, NULL, &q), HH_E_INVALID_ARG);   /* one pass at a time */
    /* the destination is reserved: a new 4096-block cannot land at 0 */
    ck_assert(sh_alloc(&s, 4096, 16, 0));
    ck_assert_uint_eq(hh_voffset(s.heap, s.o[s.n - 1].h), 8 * 4096);
    /* free the moving block during the pass: stale now, its source reserved until end */
    size_t mi = sh_find(&s, p.moves[0].handle);
    ck_assert_int_eq(hh_vfree(s.heap, p.moves[0].handle), HH_OK);
    s.o[mi] = s.o[--s.n];
    ck_assert(sh_alloc(&s, 4096, 16, 0));
    ck_assert_uint_eq(hh_voffset(s.heap, s.o[s.n - 1].h), 9 * 4096);   /* neither 0 nor 7*4096 */
    ck_assert_int_eq(hh_vheap_check(s.heap), HH_OK);
    hh_vdefrag_report r;
    const hh_vmove_result done = HH_VMOVE_DONE;
    ck_assert_int_eq(hh_vdefrag_end(s.heap, &done, &r), HH_OK);
    ck_assert_uint_eq(r.cancelled, 1);                /* freed during the pass: cancelled */
    ck_assert_uint_eq(r.done, 0);
    sh_verify(&s);
    /* a move ends cancelled by the caller: the handle is freed at end */
    ck_assert_int_eq(hh_vdefrag_begin(s.heap, &(hh_vdefrag_budget){ .max_moves = 1 }, &p), HH_OK);
    ck_assert_uint_eq(p.move_count, 1);
    hh_handle moving = p.moves[0].handle;
    ck_assert_uint_eq(hh_voffset(s.heap, moving), p.moves[0].src_offset);
    const hh_vmove_result cancel = HH_VMOVE_CANCELLED;
    ck_assert_int_eq(hh_vdefrag_end(s.heap, &cancel, &r), HH_OK);
    ck_assert_uint_eq(r.cancelled, 1);
    ck_assert_uint_eq(hh_voffset(s.heap, moving), HH_VOFFSET_NONE);
    size_t gone = sh_find(&s, moving);
    ck_assert_uint_ne(gone, SIZE_MAX);
    s.o[gone] = s.o[--s.n];
    sh_verify(&s);
    /* max_bytes: a budget smaller than any block plans nothing and is not compact */
    ck_assert_int_eq(hh_vdefrag_begin(s.heap, &(hh_vdefrag_budget){ .max_bytes = 100 }, &p), HH_OK);
    ck_assert_uint_eq(p.move_count, 0);
    ck_assert(!p.compact);
    ck_assert_int_eq(hh_vdefrag_end(s.heap, NULL, NULL), HH_OK);
    sh_fini(&s);
}
END_TEST

/* Uniform sizes, random frees: the passes move exactly the lower bound (the
   live bytes above the final compact boundary) and end compact. */
START_TEST(lower_bound_uniform) {
    vshadow s;
    sh_init(&s, 256u << 10);
    hh_rng rng = hh_rng_make(hh_test_seed(7));
    while (sh_alloc(&s, 2048, 256, 0)) {}
    for (int i = 0; i < 50; i++) sh_free(&s, hh_rng_below(&rng, (uint32_t)s.n));
    uint64_t boundary = (uint64_t)s.n * 2048, bound = 0;
    for (size_t i = 0; i < s.n; i++)
        if (hh_voffset(s.heap, s.o[i].h) >= boundary) bound += 2048;
    ck_assert_uint_gt(bound, 0);
    uint64_t moved = 0;
    bool compact = false;
    int passes = 0;
    while (!compact) {
        moved += sh_pass(&s, &(hh_vdefrag_budget){ .max_moves = 8, .max_bytes = 64u << 10 }, NULL, false, &compact);
        ck_assert_int_lt(++passes, 200);
    }
    ck_assert_uint_eq(moved, bound);
    hh_vheap_stats st;
    hh_vheap_stats_get(s.heap, &st);
    ck_assert_uint_eq(st.high_water, boundary);
    ck_assert_uint_eq(st.free_blocks, 1);
    sh_fini(&s);
}
END_TEST


/* A hole smaller than every block above it: FILL leaves it, AUTO closes it
   with a slide of two non-overlapping copies. */
START_TEST(auto_slide_closes_small_holes) {
    vshadow s;
    sh_init(&s, 64u << 10);
    ck_assert(sh_alloc(&s, 512, 16, 0));
    ck_assert(sh_alloc(&s, 256, 16, 0));
    ck_assert(sh_alloc(&s, 2048, 16, 0));
    ck_assert(sh_alloc(&s, 1024, 16, 0));
    ck_assert(sh_alloc(&s, 4096, 16, 0));
    sh_free(&s, 1);                                   /* a 256-byte hole at 512, nothing above fits it */
    bool compact = false;
    for (int k = 0; k < 10 && !compact; k++) sh_pass(&s, &(hh_vdefrag_budget){ .max_moves = 4 }, NULL, false, &compact);
    ck_assert(compact);
    hh_vheap_stats st;
    hh_vheap_stats_get(s.heap, &st);
    ck_assert_uint_eq(st.free_blocks, 2);             /* FILL: the hole stays */
    ck_assert_uint_eq(st.high_water, 512 + 256 + 2048 + 1024 + 4096);
    compact = false;
    uint64_t moved = 0;
    for (int k = 0; k < 20 && !compact; k++)
        moved += sh_pass(&s, &(hh_vdefrag_budget){ .max_moves = 4, .policy = HH_VDEFRAG_AUTO }, NULL, false, &compact);
    ck_assert(compact);
    hh_vheap_stats_get(s.heap, &st);
    ck_assert_uint_eq(st.free_blocks, 1);             /* AUTO: one free block, at the top */
    ck_assert_uint_eq(st.high_water, 512 + 2048 + 1024 + 4096);
    ck_assert_uint_gt(moved, 0);
    hh_vdefrag_pass p;
    ck_assert_int_eq(hh_vdefrag_begin(s.heap, &(hh_vdefrag_budget){ .policy = (hh_vdefrag_policy)9 }, &p),
                     HH_E_INVALID_ARG);
    ck_assert(!hh_vdefrag_active(s.heap));
    sh_fini(&s);
}
END_TEST

/* Randomised: allocations, frees, resizes, pins, passes with skipped and
   cancelled moves, frees/allocs/pins during passes, grow; every byte checked
   after every pass. SEED via HH_TEST_SEED. */
START_TEST(shadow_stress) {
    vshadow s;
    sh_init(&s, 512u << 10);
    hh_rng rng = hh_rng_make(hh_test_seed(16));
    unsigned ops = hh_test_scaled(3000, 300);
    uint64_t moved = 0;
    for (unsigned op = 0; op < ops; op++) {
        unsigned k = hh_rng_below(&rng, 100);
        if (k < 45) {
            uint64_t size = 1 + hh_rng_below(&rng, hh_rng_below(&rng, 4) ? 1024 : 16384);
            sh_alloc(&s, size, (uint64_t)1 << hh_rng_below(&rng, 13), hh_rng_below(&rng, 8));
        } else if (k < 80 && s.n) {
            size_t i = hh_rng_below(&rng, (uint32_t)s.n);
            if (s.o[i].pins == 0) sh_free(&s, i);
        } else if (k < 84 && s.n) {
            size_t i = hh_rng_below(&rng, (uint32_t)s.n);
            vobj *o = &s.o[i];
            uint64_t ns = 1 + hh_rng_below(&rng, 4096);
            uint64_t off = hh_voffset(s.heap, o->h);
            hh_status st = hh_vresize(s.heap, o->h, ns);
            if (st == HH_OK) {
                ck_assert_uint_eq(hh_voffset(s.heap, o->h), off);
                if (ns > o->size) hh_test_fill(s.buf + off, (size_t)ns, o->key);
                else memset(s.buf + off + ns, 0xDD, (size_t)(o->size - ns));   /* the cut tail is free */
                o->size = ns;
            } else {
                ck_assert_int_eq(st, HH_E_NO_MEMORY);
            }
        } else if (k < 87 && s.n) {
            size_t i = hh_rng_below(&rng, (uint32_t)s.n);
            if (s.o[i].pins) {
                ck_assert_int_eq(hh_vunpin(s.heap, s.o[i].h), HH_OK);
                s.o[i].pins--;
            } else {
                ck_assert_int_eq(hh_vpin(s.heap, s.o[i].h), HH_OK);
                s.o[i].pins++;
                s.o[i].pinned_at = hh_voffset(s.heap, s.o[i].h);
            }
        } else if (k < 99) {
            hh_vdefrag_budget b = { .max_moves = 1 + hh_rng_below(&rng, 16),
                                    .max_bytes = hh_rng_below(&rng, 2) ? 0 : 1u + hh_rng_below(&rng, 256u << 10),
                                    .policy = (hh_vdefrag_policy)hh_rng_below(&rng, 2) };
            moved += sh_pass(&s, &b, &rng, true, NULL);
        } else if (hh_vheap_size(s.heap) < (2u << 20)) {
            uint64_t ns = hh_vheap_size(s.heap) + 16u * (1 + hh_rng_below(&rng, 4096));
            ck_assert_int_eq(hh_vheap_grow(s.heap, ns), HH_OK);
            sh_grow_buf(&s, ns);
        }
        ck_assert_int_eq(hh_vheap_check(s.heap), HH_OK);
    }
    ck_assert_uint_gt(moved, 0);
    sh_verify(&s);
    sh_fini(&s);
}
END_TEST

/* Injected metadata failures at every allocation point of a scenario: each
   failing call reports HH_E_NO_MEMORY once and changes nothing; the heap
   stays valid and every block keeps its bytes. */
START_TEST(fault_injection) {
    int n;
    for (n = 0; n < 400; n++) {
        vshadow s;
        memset(&s, 0, sizeof s);
        hh_test_reset_captured();
        hh_test_fail_after(n);
        hh_vheap *h = NULL;
        hh_status cs = hh_vheap_create(&(hh_vheap_desc){ .size = 1u << 20 }, &h);
        if (cs != HH_OK) {
            ck_assert_int_eq(cs, HH_E_NO_MEMORY);
            ck_assert_ptr_null(h);
            ck_assert_uint_eq(hh_test_captured_count(), 1);
            continue;
        }
        hh_test_fail_after(-1);
        s.heap = h;
        s.buf_size = 1u << 20;
        s.buf = malloc(s.buf_size);
        memset(s.buf, 0xDD, s.buf_size);
        s.next_key = 1;
        hh_test_fail_after(n);
        bool failed = false;
        for (int i = 0; i < 300 && !failed; i++) {
            hh_test_reset_captured();
            if (!sh_alloc(&s, 64 + (uint64_t)(i % 7) * 32, 16, 0)) {
                failed = true;
                ck_assert_uint_eq(hh_test_captured_count(), 1);
            }
        }
        for (size_t i = 0; i < s.n; i += 2) sh_free(&s, i);
        hh_vdefrag_pass p;
        hh_test_reset_captured();
        hh_status bs = hh_vdefrag_begin(h, &(hh_vdefrag_budget){ .max_moves = 64 }, &p);
        if (bs == HH_OK) {
            for (uint32_t i = 0; i < p.move_count; i++)
                memcpy(s.buf + p.moves[i].dst_offset, s.buf + p.moves[i].src_offset, (size_t)p.moves[i].size);
            uint32_t cnt = p.move_count;
            hh_vmove *cp = malloc((cnt + 1u) * sizeof *cp);
            memcpy(cp, p.moves, cnt * sizeof *cp);
            ck_assert_int_eq(hh_vdefrag_end(h, NULL, NULL), HH_OK);
            for (uint32_t i = 0; i < cnt; i++) memset(s.buf + cp[i].src_offset, 0xEE, (size_t)cp[i].size);
            free(cp);
        } else {
            ck_assert_int_eq(bs, HH_E_NO_MEMORY);
            ck_assert(!hh_vdefrag_active(h));
            failed = true;
        }
        bool fired = hh_test_fail_count() > 0;
        hh_test_fail_after(-1);
        if (failed) ck_assert(fired);
        sh_verify(&s);
        sh_fini(&s);
        if (!fired) break;
    }
    ck_assert_int_ge(n, 3);
}
END_TEST

START_TEST(size_classes) {
    /* every member of hhi_vclass_up(n) holds n bytes; classes are monotone */
    unsigned prev = 0, bad = 0;
    for (uint64_t g = 1; g < 20000; g = g < 4096 ? g + 1 : g + 7) {
        uint64_t n = g * 16;
        unsigned c = hhi_vclass(n), u = hhi_vclass_up(n);
        bad += c < prev;
        bad += u != c && u != c + 1;
        bad += g > 1 && hhi_vclass(n - 16) == c && u != c + 1;    /* not the class's first size */
        bad += g > 1 && hhi_vclass(n - 16) != c && u != c;        /* the class's first size */
        prev = c;
    }
    ck_assert_uint_eq(bad, 0);
    ck_assert_uint_lt(hhi_vclass(HH_VHEAP_MAX_SIZE), 1u << 13);
    ck_assert_uint_eq(sizeof(hhi_vblk), 32);
}
END_TEST


/* ---------------------------------------------------------------------------
   Heap maps: a virtual heap's frames read back as the walk and the last pass said
--------------------------------------------------------------------------- */
typedef struct blist { hh_block_info b[256]; size_t n; } blist;
static void collect(const hh_block_info *b, void *user) {
    blist *l = user;
    if (l->n < 256) l->b[l->n++] = *b;
}

START_TEST(mapdump_roundtrip) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/hh-vheap-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    hh_vheap *h;
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 64u << 10 }, &h), HH_OK);
    hh_handle v[12];
    for (int i = 0; i < 12; i++) v[i] = hh_valloc(h, 1024 + 512 * (uint64_t)(i % 3), 256, (uint32_t)i % 4);
    for (int i = 2; i < 12; i += 3) ck_assert_int_eq(hh_vfree(h, v[i]), HH_OK);   /* 2048-byte holes */
    ck_assert_int_eq(hh_vpin(h, v[1]), HH_OK);
    hh_mapdump_writer *w;
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = (const hh_heap *)(const void *)h, .vheap = h },
                                       &w), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .flags = HH_MAPDUMP_VIRTUAL, .vheap = h }, &w),
                     HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .vheap = h, .label = "vheap" }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 0, NULL), HH_OK);
    hh_vdefrag_pass p;
    ck_assert_int_eq(hh_vdefrag_begin(h, &(hh_vdefrag_budget){ .max_moves = 3 }, &p), HH_OK);
    ck_assert_uint_gt(p.move_count, 0);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 1, NULL), HH_OK);   /* mid-pass: reservations are live blocks */
    ck_assert_int_eq(hh_vdefrag_end(h, NULL, NULL), HH_OK);
    blist want = {0};
    hh_vheap_walk(h, collect, &want);
    const hh_vmove *jr;
    size_t nj = hh_vdefrag_journal(h, &jr);
    ck_assert_uint_eq(nj, p.move_count);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 2, NULL), HH_OK);
    ck_assert_int_eq(hh_vheap_grow(h, 96u << 10), HH_OK);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 3, NULL), HH_OK);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);

    hh_mapdump_reader *r;
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    hh_mapdump_file_info info;
    ck_assert_int_eq(hh_mapdump_info(r, &info), HH_OK);
    ck_assert_uint_eq(info.flags & HH_MAPDUMP_VIRTUAL, HH_MAPDUMP_VIRTUAL);
    ck_assert_uint_eq(info.version_minor, HH_MAPDUMP_VERSION_MINOR);
    ck_assert_uint_eq(info.managed_bytes, 64u << 10);
    const hh_mapdump_frame *f;
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(f->frame, (uint64_t)k);
        ck_assert(!f->has_service);
        if (k == 2) {
            ck_assert_uint_eq(f->managed_bytes, 64u << 10);
            ck_assert_uint_eq(f->block_count, want.n);
            size_t moved = 0;
            for (size_t i = 0; i < want.n; i++) {
                ck_assert_uint_eq(f->blocks[i].offset, want.b[i].offset);
                ck_assert_uint_eq(f->blocks[i].size, want.b[i].size);
                ck_assert_uint_eq(f->blocks[i].state, (uint8_t)want.b[i].state);
                moved += f->blocks[i].moved;
            }
            ck_assert_uint_eq(moved, nj);
            ck_assert_uint_eq(f->move_count, nj);
            for (size_t i = 0; i < nj; i++) {
                ck_assert_uint_eq(f->moves[i].src_offset, jr[i].src_offset);
                ck_assert_uint_eq(f->moves[i].dst_offset, jr[i].dst_offset);
            }
            ck_assert_uint_eq(f->metrics.pinned_blocks, 1);
            ck_assert_uint_eq(f->metrics.total_moves, nj);
        }
        if (k == 3) ck_assert_uint_eq(f->managed_bytes, 96u << 10);
    }
    ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
    ck_assert_ptr_null(f);
    hh_mapdump_reader_close(r);
    hh_vheap_destroy(h);
    unlink(path);
}
END_TEST

/* ---------------------------------------------------------------------------
   Error contracts of NULL objects and NULL outs (issue #15, item 6): every
   NULL heap or out is reported once (HH_E_INVALID_ARG, the message led by the
   function's name), a non-NULL out is cleared before that early return, and
   nothing else changes. Stale handles are reported by every handle getter,
   as by hh_voffset and the relocatable heap's hh_size / hh_tag.
--------------------------------------------------------------------------- */

static bool all_zero(const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const uint8_t *)p)[i] != 0) return false;
    return true;
}

static void count_block(const hh_block_info *b, void *user) { (void)b; ++*(unsigned *)user; }

START_TEST(null_heap_and_null_out_are_reported) {
    hh_test_reset_captured();
    ck_assert_uint_eq(hh_vheap_size(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_size");
    uint64_t sz = 12345;
    ck_assert_int_eq(hh_vheap_shrink(NULL, &sz), HH_E_INVALID_ARG);
    ck_assert_uint_eq(sz, 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_shrink");
    hh_vheap_stats st;
    memset(&st, 0xA5, sizeof st);
    hh_vheap_stats_get(NULL, &st);
    ck_assert(all_zero(&st, sizeof st));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_stats_get");
    unsigned blocks = 0;
    hh_vheap_walk(NULL, count_block, &blocks);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_walk");
    ck_assert(!hh_vdefrag_active(NULL));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vdefrag_active");
    const hh_vmove *j = (const hh_vmove *)(const void *)&blocks;
    ck_assert_uint_eq(hh_vdefrag_journal(NULL, &j), 0);
    ck_assert_ptr_null(j);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vdefrag_journal");
    ck_assert_uint_eq(hh_vsize(NULL, HH_NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vsize");
    ck_assert_uint_eq(hh_vtag(NULL, HH_NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vtag");
    ck_assert_uint_eq(hh_voffset(NULL, HH_NULL), HH_VOFFSET_NONE);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_voffset");
    hh_vdefrag_pass pass;
    memset(&pass, 0xA5, sizeof pass);
    ck_assert_int_eq(hh_vdefrag_begin(NULL, NULL, &pass), HH_E_INVALID_ARG);
    ck_assert(all_zero(&pass, sizeof pass));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vdefrag_begin");
    hh_vdefrag_report rep;
    memset(&rep, 0xA5, sizeof rep);
    ck_assert_int_eq(hh_vdefrag_end(NULL, NULL, &rep), HH_E_INVALID_ARG);
    ck_assert(all_zero(&rep, sizeof rep));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vdefrag_end");
    ck_assert_int_eq(hh_vheap_check(NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_check");
    hh_vheap *h = (hh_vheap *)(void *)&blocks;
    ck_assert_int_eq(hh_vheap_create(NULL, &h), HH_E_INVALID_ARG);
    ck_assert_ptr_null(h);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_create");
    hh_vheap_destroy(NULL);                            /* like free(NULL): silent */
    ck_assert_uint_eq(hh_test_captured_count(), 0);

    /* a live heap with a NULL out or callback: reported, the heap unchanged */
    ck_assert_int_eq(hh_vheap_create(&(hh_vheap_desc){ .size = 1u << 20 }, &h), HH_OK);
    hh_handle a = hh_valloc(h, 100, 16, 7), b = hh_valloc(h, 100, 16, 8);
    ck_assert_int_eq(hh_vfree(h, a), HH_OK);            /* a hole below b: a pass has a move */
    hh_vheap_stats before;
    hh_vheap_stats_get(h, &before);
    hh_vheap_stats_get(h, NULL);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_stats_get");
    hh_vheap_walk(h, NULL, NULL);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vheap_walk");
    ck_assert_int_eq(hh_vdefrag_begin(h, NULL, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vdefrag_begin");
    ck_assert(!hh_vdefrag_active(h));
    ck_assert_int_eq(hh_vdefrag_begin(h, NULL, &pass), HH_OK);
    ck_assert_uint_eq(pass.move_count, 1);
    ck_assert_int_eq(hh_vdefrag_end(h, NULL, NULL), HH_OK);   /* report is optional: no message */
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    ck_assert_uint_eq(hh_vdefrag_journal(h, NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_vdefrag_journal");
    ck_assert_uint_eq(hh_vdefrag_journal(h, &j), 1);         /* the journal was not touched */
    ck_assert_uint_eq(j[0].dst_offset, 0);
    ck_assert_int_eq(hh_vheap_shrink(h, NULL), HH_OK);       /* out_size is optional: no message */
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_vheap_stats after;
    hh_vheap_stats_get(h, &after);
    ck_assert_uint_eq(after.live_blocks, before.live_blocks);
    ck_assert_uint_eq(after.used_bytes, before.used_bytes);
    /* stale handles: every getter reports them */
    hh_test_reset_captured();
    ck_assert_int_eq(hh_vfree(h, b), HH_OK);
    ck_assert_uint_eq(hh_vsize(h, b), 0);
    hh_test_expect_one(HH_E_STALE_HANDLE, "hh_vsize");
    ck_assert_uint_eq(hh_vtag(h, b), 0);
    hh_test_expect_one(HH_E_STALE_HANDLE, "hh_vtag");
    ck_assert_uint_eq(hh_voffset(h, b), HH_VOFFSET_NONE);
    hh_test_expect_one(HH_E_STALE_HANDLE, "hh_voffset");
    ck_assert_int_eq(hh_vheap_check(h), HH_OK);
    hh_vheap_destroy(h);
}
END_TEST

Suite *hh_test_vheap_suite(void) {
    Suite *s = suite_create("vheap");
    TCase *tc = tcase_create("contract");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, stale_forged_foreign);
    tcase_add_test(tc, handle_table_full);
    tcase_add_test(tc, alignment_up_to_64k);
    tcase_add_test(tc, pins);
    tcase_add_test(tc, resize_in_place);
    tcase_add_test(tc, grow_and_shrink);
    tcase_add_test(tc, size_classes);
    tcase_add_test(tc, null_heap_and_null_out_are_reported);
    suite_add_tcase(s, tc);
    tc = tcase_create("passes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pass_contract);
    tcase_add_test(tc, lower_bound_uniform);
    tcase_add_test(tc, auto_slide_closes_small_holes);
    tcase_add_test(tc, shadow_stress);
    tcase_add_test(tc, fault_injection);
    tcase_add_test(tc, mapdump_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}
