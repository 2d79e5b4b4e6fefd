/* fuzz_heap.c -- libFuzzer harness: relocatable heap + defrag operation sequences.
 *
 * The input decodes into a heap configuration (capacity, flags, handle count,
 * caller memory, policy) followed by a stream of operations: alloc, alloc_ex,
 * free, resize, pin, unpin, deref-and-rewrite, defrag step / step_ex / full,
 * policy changes, operations on stale / forged / foreign handles, bad
 * arguments, and injected faults (hh_test_fail_after) around allocating calls.
 *
 * A shadow model holds every live handle's requested size, alignment, tag,
 * byte-pattern key and pin count. After every operation the harness checks:
 *   S1  hh_heap_check() == HH_OK;
 *   S2  every byte of every live block still holds its pattern, the block is
 *       aligned, hh_size() >= requested, hh_tag() is the tag given;
 *   S3  a pinned block is where hh_pin said it was;
 *   S4  stats agree with the model (live and pinned counts, used + free = managed);
 *   S5  the walk shows each live handle exactly once, with its tag and pin state;
 *   S6  every failing call returned the documented status, set hh_last_error()
 *       to it and sent exactly one message; successful calls sent none;
 *   S7  on_move is never called for a pinned block, and the moved bytes are intact;
 *   S8  an allocation fails with HH_E_NO_MEMORY only if no free block was large
 *       enough for it (no fault armed, handle table not full).
 */
#include "fuzz_util.h"

#include <string.h>

#include "hheap/defrag.h"
#include "hheap/heap.h"

enum {
    MAX_OBJS = 48,          /* live objects the model tracks */
    MAX_OPS = 1200,         /* operations decoded from one input */
    DEAD_RING = 16,         /* freed handles kept for stale-handle operations */
};

typedef struct obj {
    hh_handle h;
    size_t    size;         /* bytes asked for (and owned by the model) */
    size_t    align;
    uint32_t  tag;
    uint64_t  key;          /* pattern key of the contents */
    unsigned  pins;
    void     *pinned_at;
} obj;

typedef struct model {
    hh_heap  *heap;
    obj       objs[MAX_OBJS];
    size_t    count;
    hh_handle dead[DEAD_RING];
    unsigned  dead_next;
    uint64_t  next_key;
    uint32_t  max_handles;
    uint32_t  flags;        /* the heap's desc flags */
    bool      fault_armed;
    uint64_t  moves_seen;
} model;

static model M;

/* ---------------------------------------------------------------------------
   Model helpers
--------------------------------------------------------------------------- */
static obj *find(hh_handle h) {
    for (size_t i = 0; i < M.count; i++)
        if (M.objs[i].h.id == h.id) return &M.objs[i];
    return NULL;
}

static void on_move(hh_handle h, void *old_addr, void *new_addr, size_t size, void *user) {
    (void)old_addr; (void)user;
    M.moves_seen++;
    obj *o = find(h);
    if (o == NULL) return;          /* the object being added by hh_alloc is not in the model yet */
    FZ_CHECK(o->pins == 0, "S7: pinned block %#llx moved", (unsigned long long)h.id);
    size_t n = o->size < size ? o->size : size;
    long bad = fz_verify(new_addr, n, o->key);
    FZ_CHECK(bad < 0, "S7: block %#llx byte %ld wrong right after its move", (unsigned long long)h.id, bad);
}

static void model_add(hh_handle h, size_t size, size_t align, uint32_t tag) {
    FZ_CHECK(M.count < MAX_OBJS, "model full");
    obj *o = &M.objs[M.count++];
    *o = (obj){ .h = h, .size = size, .align = align, .tag = tag, .key = ++M.next_key };
    void *p = hh_deref(M.heap, h);
    FZ_CHECK(p != NULL, "fresh handle does not deref");
    fz_fill(p, size, o->key);
}

static void model_remove(size_t i) {
    M.dead[M.dead_next++ % DEAD_RING] = M.objs[i].h;
    M.objs[i] = M.objs[--M.count];
}

static size_t managed_bytes;

static void walk_fn(const hh_block_info *b, void *user) {
    unsigned *seen = user;
    if (b->state == HH_BLOCK_FREE) {
        FZ_CHECK(hh_is_null(b->handle), "S5: free block with a handle");
        return;
    }
    obj *o = find(b->handle);
    FZ_CHECK(o != NULL, "S5: walk shows handle %#llx the model does not know", (unsigned long long)b->handle.id);
    FZ_CHECK(b->tag == o->tag, "S5: tag %u, model %u", b->tag, o->tag);
    FZ_CHECK((b->state == HH_BLOCK_PINNED) == (o->pins > 0), "S5: pin state of %#llx", (unsigned long long)b->handle.id);
    FZ_CHECK(b->offset + b->size <= managed_bytes, "S5: block beyond the managed range");
    seen[o - M.objs]++;
}

static void dump_fn(const hh_block_info *b, void *user) {
    (void)user;
    obj *o = find(b->handle);
    fprintf(stderr, "  block @%zu size %zu state %d handle %#llx align %zu\n", b->offset, b->size, b->state,
            (unsigned long long)b->handle.id, o ? o->align : 0);
}
/* Prints every block (on the way to a failed check). */
static void dump_heap(void) { hh_heap_walk(M.heap, dump_fn, NULL); }

/* S1..S5 over the whole heap. */
static void verify_all(void) {
    unsigned before = fz_err.count;
    FZ_CHECK(hh_heap_check(M.heap) == HH_OK, "S1: hh_heap_check failed");
    for (size_t i = 0; i < M.count; i++) {
        obj *o = &M.objs[i];
        unsigned char *p = hh_deref(M.heap, o->h);
        FZ_CHECK(p != NULL, "S2: object %zu (%#llx) lost", i, (unsigned long long)o->h.id);
        FZ_CHECK(((uintptr_t)p & (o->align - 1)) == 0, "S2: object %zu lost its %zu alignment", i, o->align);
        FZ_CHECK(hh_size(M.heap, o->h) >= o->size, "S2: object %zu shrank", i);
        FZ_CHECK(hh_tag(M.heap, o->h) == o->tag, "S2: object %zu tag", i);
        if (o->pins) FZ_CHECK((void *)p == o->pinned_at, "S3: pinned object %zu moved", i);
        long bad = fz_verify(p, o->size, o->key);
        FZ_CHECK(bad < 0, "S2: object %zu (%zu bytes, align %zu) byte %ld corrupt", i, o->size, o->align, bad);
    }
    hh_heap_stats st;
    hh_heap_stats_get(M.heap, &st);
    unsigned pinned = 0;
    for (size_t i = 0; i < M.count; i++) pinned += M.objs[i].pins > 0;
    FZ_CHECK(st.live_blocks == M.count, "S4: live_blocks %u, model %zu", st.live_blocks, M.count);
    FZ_CHECK(st.pinned_blocks == pinned, "S4: pinned_blocks %u, model %u", st.pinned_blocks, pinned);
    FZ_CHECK(st.used_bytes + st.free_bytes == st.capacity, "S4: used + free != capacity");
    FZ_CHECK(st.largest_free <= st.free_bytes, "S4: largest_free > free_bytes");
    unsigned seen[MAX_OBJS] = {0};
    hh_heap_walk(M.heap, walk_fn, seen);
    for (size_t i = 0; i < M.count; i++) FZ_CHECK(seen[i] == 1, "S5: object %zu seen %u times", i, seen[i]);
    FZ_CHECK(fz_err.count == before, "checks reported an error");
}

/* S6 for a call that failed with status s. */
static void expect_fail(unsigned before, hh_status got, hh_status want, const char *what) {
    FZ_CHECK(got == want, "S6: %s returned %s, expected %s", what, hh_status_str(got), hh_status_str(want));
    FZ_CHECK(fz_err.count == before + 1, "S6: %s sent %u messages", what, fz_err.count - before);
    FZ_CHECK(fz_err.last == want && hh_last_error() == want, "S6: %s: last error %s", what, hh_status_str(hh_last_error()));
}
static void expect_ok(unsigned before, hh_status got, const char *what) {
    FZ_CHECK(got == HH_OK, "S6: %s failed: %s", what, hh_status_str(got));
    FZ_CHECK(fz_err.count == before, "S6: successful %s sent a message", what);
}

/* Bytes a free block must offer so that an allocation of (size, align) is sure
   to fit: header, the debug guard, alignment padding, and the TLSF good-fit
   rounding (a request is rounded up to the next of 16 second-level classes per
   power of two, so a hole less than ~1/16 larger may be passed over: allowed).
   An alignment above 16 may cost up to twice the alignment (search for
   size + align, plus a lead too small to stand alone as a free block). */
static size_t fit_need(size_t size, size_t align) {
    size_t body = (size + HH_HEAP_GRANULE - 1) / HH_HEAP_GRANULE * HH_HEAP_GRANULE;
    return body + HH_HEAP_HEADER_BYTES + HH_HEAP_GRANULE + (align > HH_HEAP_GRANULE ? 2 * align : 0) + body / 8 +
           2 * HH_HEAP_GRANULE;
}

/* S8: a NO_MEMORY the heap had no excuse for. */
static void check_no_memory_excuse(size_t size, size_t align, const char *what) {
    if (M.fault_armed) return;
    hh_heap_stats st;
    hh_heap_stats_get(M.heap, &st);
    if (st.live_blocks + 2 >= M.max_handles) return;     /* handle table (nearly) full */
    FZ_CHECK(st.largest_free < fit_need(size, align),
             "S8: %s of %zu (align %zu) failed with a %zu-byte hole free", what, size, align, st.largest_free);
}

/* ---------------------------------------------------------------------------
   Operations
--------------------------------------------------------------------------- */
static size_t pick_size(fz_in *in) {
    uint8_t sel = fz_u8(in);
    uint16_t v = fz_u16(in);
    switch (sel & 3) {
    case 0: return 1 + (v % 64);
    case 1: return 1 + (v % 512);
    case 2: return 1 + (v % 4096);
    default: return 1 + (v % 12288);
    }
}

static obj *pick_obj(fz_in *in) {
    uint8_t b = fz_u8(in);
    return M.count ? &M.objs[b % M.count] : NULL;
}

static void op_alloc(fz_in *in, bool ex) {
    size_t size = pick_size(in);
    size_t align = 16;
    uint32_t tag = 0;
    if (ex) {
        uint8_t a = fz_u8(in);
        align = (size_t)1 << (a % 13);                   /* 1 .. 4096 */
        tag = fz_u8(in);
    }
    if (M.count == MAX_OBJS) return;
    unsigned before = fz_err.count;
    hh_handle h = ex ? hh_alloc_ex(M.heap, size, align, tag) : hh_alloc(M.heap, size);
    if (hh_is_null(h)) {
        expect_fail(before, hh_last_error(), HH_E_NO_MEMORY, "alloc");
        check_no_memory_excuse(size, align, "alloc");
        return;
    }
    FZ_CHECK(fz_err.count == before, "S6: successful alloc sent a message");
    FZ_CHECK(find(h) == NULL, "new handle %#llx aliases a live one", (unsigned long long)h.id);
    for (unsigned i = 0; i < DEAD_RING; i++)
        FZ_CHECK(M.dead[i].id != h.id, "new handle %#llx equals a freed one", (unsigned long long)h.id);
    model_add(h, size, align < 16 ? 16 : align, tag);
}

static void op_free(fz_in *in) {
    obj *o = pick_obj(in);
    if (!o) return;
    unsigned before = fz_err.count;
    hh_status s = hh_free(M.heap, o->h);
    if (o->pins) {
        expect_fail(before, s, HH_E_PINNED, "free of a pinned block");
        return;
    }
    expect_ok(before, s, "free");
    hh_handle h = o->h;
    model_remove((size_t)(o - M.objs));
    FZ_CHECK(hh_deref(M.heap, h) == NULL, "freed handle still derefs");
    fz_errors_reset();
}

static void op_resize(fz_in *in) {
    obj *o = pick_obj(in);
    size_t ns = pick_size(in);
    if (!o) return;
    unsigned before = fz_err.count;
    size_t old_size = hh_size(M.heap, o->h);
    hh_status s = hh_resize(M.heap, o->h, ns);
    if (s != HH_OK) {
        if (s == HH_E_PINNED) FZ_CHECK(o->pins > 0, "resize: PINNED for an unpinned block");
        else {
            expect_fail(before, s, HH_E_NO_MEMORY, "resize");
            check_no_memory_excuse(ns, o->align, "resize");
        }
        FZ_CHECK(fz_err.count == before + 1, "S6: failed resize sent %u messages", fz_err.count - before);
        FZ_CHECK(hh_size(M.heap, o->h) == old_size, "failed resize changed the size");
        return;                      /* contents are checked by verify_all */
    }
    FZ_CHECK(fz_err.count == before, "S6: successful resize sent a message");
    unsigned char *p = hh_deref(M.heap, o->h);
    FZ_CHECK(p != NULL, "resized handle does not deref");
    if (o->pins) FZ_CHECK((void *)p == o->pinned_at, "resize moved a pinned block");
    size_t keep = o->size < ns ? o->size : ns;
    long bad = fz_verify(p, keep, o->key);
    FZ_CHECK(bad < 0, "resize %zu -> %zu lost byte %ld", o->size, ns, bad);
    /* The grown tail takes the pattern too (the model owns exactly ns bytes). */
    o->size = ns;
    fz_fill(p, ns, o->key);
}

static void op_pin(fz_in *in) {
    obj *o = pick_obj(in);
    if (!o || o->pins >= 200) return;
    unsigned before = fz_err.count;
    void *p = hh_pin(M.heap, o->h);
    FZ_CHECK(p != NULL, "pin failed: %s", hh_status_str(hh_last_error()));
    FZ_CHECK(fz_err.count == before, "S6: pin sent a message");
    if (o->pins) FZ_CHECK(p == o->pinned_at, "second pin gave another address");
    FZ_CHECK(p == hh_deref(M.heap, o->h), "pin and deref disagree");
    o->pins++;
    o->pinned_at = p;
}

static void op_unpin(fz_in *in) {
    obj *o = pick_obj(in);
    if (!o) return;
    unsigned before = fz_err.count;
    hh_status s = hh_unpin(M.heap, o->h);
    if (o->pins == 0) {
        expect_fail(before, s, HH_E_INVALID_ARG, "unpin of an unpinned block");
        return;
    }
    expect_ok(before, s, "unpin");
    if (--o->pins == 0) o->pinned_at = NULL;
}

/* Writes a fresh pattern through the deref'd pointer (the game touching its object). */
static void op_touch(fz_in *in) {
    obj *o = pick_obj(in);
    if (!o) return;
    unsigned char *p = hh_deref(M.heap, o->h);
    FZ_CHECK(p != NULL, "live handle does not deref");
    long bad = fz_verify(p, o->size, o->key);
    FZ_CHECK(bad < 0, "touch: byte %ld corrupt", bad);
    o->key = ++M.next_key;
    fz_fill(p, o->size, o->key);
}

static void check_report(const hh_defrag_report *r, uint64_t moves_before, const char *what) {
    hh_heap_stats st;
    hh_heap_stats_get(M.heap, &st);
    FZ_CHECK(M.moves_seen - moves_before >= r->moves, "%s: report says %u moves, on_move saw %llu", what,
             r->moves, (unsigned long long)(M.moves_seen - moves_before));
    (void)st;
}

static void op_step(fz_in *in) {
    uint8_t n = fz_u8(in);
    uint64_t mb = M.moves_seen;
    hh_defrag_report r = hh_defrag_step(M.heap, n % 9 ? n % 9 : HH_DEFRAG_UNLIMITED);
    /* HH_HEAP_STRESS_MOVES: "every defrag step moves every movable block" -- the
       move budget does not hold there by design. */
    bool stress = M.flags & HH_HEAP_STRESS_MOVES;
    if (n % 9 && !stress) FZ_CHECK(r.moves <= n % 9, "step(%u) made %u moves", n % 9, r.moves);
    check_report(&r, mb, "step");
}

static void op_step_ex(fz_in *in) {
    hh_defrag_budget b = { .max_moves = fz_u8(in) % 6, .max_bytes = (size_t)fz_u16(in) * (fz_u8(in) & 1), .max_ns = 0 };
    uint64_t mb = M.moves_seen;
    hh_defrag_report r = hh_defrag_step_ex(M.heap, &b);
    if (b.max_moves && !(M.flags & HH_HEAP_STRESS_MOVES)) FZ_CHECK(r.moves <= b.max_moves, "step_ex made %u moves > %u", r.moves, b.max_moves);
    check_report(&r, mb, "step_ex");
}

static void op_full(void) {
    uint64_t mb = M.moves_seen;
    hh_defrag_report r = hh_defrag_full(M.heap);
    check_report(&r, mb, "full");
    /* With no pins and no alignment above 16 nothing can leave a hole below the
       top free region (an aligned block may have to leave a gap below itself). */
    bool pinned_or_aligned = false;
    for (size_t i = 0; i < M.count; i++) pinned_or_aligned |= M.objs[i].pins > 0 || M.objs[i].align > 16;
    hh_heap_stats fst;
    hh_heap_stats_get(M.heap, &fst);
    if (!pinned_or_aligned && !M.fault_armed && (M.flags & HH_HEAP_STRESS_MOVES) && (!r.compact || fst.free_blocks > 1) &&
        !fz_strict()) {
        /* tests/fuzz/repro_stress_full_compact.c (under memcheck the report may even say compact) */
        FZ_KNOWN_BUG("heap-stress-full-not-compact", "HH_HEAP_STRESS_MOVES: hh_defrag_full left %u free blocks "
                     "(report.compact %d)", fst.free_blocks, r.compact);
    } else if (!pinned_or_aligned && !M.fault_armed) {
        if (!r.compact) dump_heap();
        FZ_CHECK(r.compact, "defrag_full left the heap not compact (no pins)");
        hh_heap_stats st;
        hh_heap_stats_get(M.heap, &st);
        if (st.free_blocks > 1) dump_heap();
        FZ_CHECK(st.free_blocks <= 1, "defrag_full left %u free blocks (no pins)", st.free_blocks);
    }
}

/* Stale, forged and foreign handles must be rejected and touch nothing. */
static void op_bad_handle(fz_in *in, hh_handle foreign) {
    uint8_t which = fz_u8(in), what = fz_u8(in);
    hh_handle h;
    switch (which % 3) {
    case 0: h = M.dead[fz_u8(in) % DEAD_RING]; break;
    case 1: h.id = (uint64_t)fz_u32(in) | ((uint64_t)fz_u32(in) << 32); break;
    default: h = foreign; break;
    }
    if (hh_is_null(h) || find(h) != NULL) return;
    unsigned before = fz_err.count;
    if ((h.id >> HH_HANDLE_INDEX_BITS) == 0 && !fz_strict()) {
        /* bugs.md 2026-12-02 "forged handle with id < 2^24": such a handle matches
           never-issued slots; the calls stay silent (hh_free may even return HH_OK).
           Run the call anyway: verify_all checks that nothing was touched. */
        hh_status s = HH_OK;
        switch (what % 6) {
        case 0: s = hh_free(M.heap, h); break;
        case 1: FZ_CHECK(hh_deref(M.heap, h) == NULL, "forged deref gave a pointer"); break;
        case 2: FZ_CHECK(hh_pin(M.heap, h) == NULL, "forged pin gave a pointer"); break;
        case 3: s = hh_unpin(M.heap, h); break;
        case 4: s = hh_resize(M.heap, h, 64); break;
        default: break;
        }
        if (s != HH_E_STALE_HANDLE || fz_err.count != before + 1)
            FZ_KNOWN_BUG("heap-forged-small-id", "handle %#llx (op %u): status %s, %u messages",
                         (unsigned long long)h.id, what % 6, hh_status_str(s), fz_err.count - before);
        fz_errors_reset();
        return;
    }
    switch (what % 6) {
    case 0: expect_fail(before, hh_free(M.heap, h), HH_E_STALE_HANDLE, "free(stale)"); break;
    case 1: FZ_CHECK(hh_deref(M.heap, h) == NULL, "stale deref");
            expect_fail(before, HH_E_STALE_HANDLE, HH_E_STALE_HANDLE, "deref(stale)"); break;
    case 2: FZ_CHECK(hh_pin(M.heap, h) == NULL, "stale pin");
            expect_fail(before, HH_E_STALE_HANDLE, HH_E_STALE_HANDLE, "pin(stale)"); break;
    case 3: expect_fail(before, hh_unpin(M.heap, h), HH_E_STALE_HANDLE, "unpin(stale)"); break;
    case 4: expect_fail(before, hh_resize(M.heap, h, 64), HH_E_STALE_HANDLE, "resize(stale)"); break;
    default: FZ_CHECK(hh_size(M.heap, h) == 0 && hh_tag(M.heap, h) == 0, "stale size/tag"); break;
    }
    fz_errors_reset();
}

static void op_bad_args(fz_in *in) {
    uint8_t which = fz_u8(in);
    unsigned before = fz_err.count;
    hh_handle h;
    switch (which % 7) {
    case 0: h = hh_alloc(M.heap, 0);
            FZ_CHECK(hh_is_null(h), "alloc(0) succeeded");
            expect_fail(before, hh_last_error(), HH_E_INVALID_ARG, "alloc(0)"); break;
    case 1: h = hh_alloc_ex(M.heap, 32, 24, 0);
            FZ_CHECK(hh_is_null(h), "align 24 accepted");
            expect_fail(before, hh_last_error(), HH_E_INVALID_ARG, "alloc_ex(align 24)"); break;
    case 2: h = hh_alloc_ex(M.heap, 32, 8192, 0);
            FZ_CHECK(hh_is_null(h), "align 8192 accepted");
            expect_fail(before, hh_last_error(), HH_E_INVALID_ARG, "alloc_ex(align 8192)"); break;
    case 3: h = hh_alloc(M.heap, SIZE_MAX - (which >> 3));
            FZ_CHECK(hh_is_null(h), "alloc(SIZE_MAX) succeeded");
            FZ_CHECK(fz_err.count == before + 1, "alloc(SIZE_MAX): %u messages", fz_err.count - before);
            FZ_CHECK(hh_last_error() == HH_E_INVALID_ARG || hh_last_error() == HH_E_NO_MEMORY, "alloc(SIZE_MAX): %s",
                     hh_status_str(hh_last_error())); break;
    case 4: expect_ok(before, hh_free(M.heap, HH_NULL), "free(HH_NULL)"); break;
    case 5: {
        obj *o = pick_obj(in);
        if (!o) break;
        size_t old = hh_size(M.heap, o->h);
        hh_status s = hh_resize(M.heap, o->h, (which & 8) ? 0 : SIZE_MAX - 8);
        FZ_CHECK(s == HH_E_INVALID_ARG || s == HH_E_NO_MEMORY, "resize to 0 / SIZE_MAX: %s", hh_status_str(s));
        FZ_CHECK(fz_err.count == before + 1, "bad resize: %u messages", fz_err.count - before);
        FZ_CHECK(hh_size(M.heap, o->h) == old, "bad resize changed the size");
        break;
    }
    default:
        FZ_CHECK(hh_is_null(hh_alloc(NULL, 16)), "alloc(NULL heap)");
        expect_fail(before, hh_last_error(), HH_E_INVALID_ARG, "alloc(NULL heap)");
        before = fz_err.count;
        FZ_CHECK(hh_heap_check(NULL) != HH_OK, "check(NULL heap)");
        break;
    }
    fz_errors_reset();
}

/* One allocating call with the n-th seam call failing: a failure must be a
   clean HH_E_NO_MEMORY (allocations) and leave everything as it was. */
static void op_fault(fz_in *in, hh_handle foreign) {
    uint8_t n = fz_u8(in), what = fz_u8(in);
    M.fault_armed = true;
    hh_test_fail_after(n % 4);
    switch (what % 4) {
    case 0: op_alloc(in, true); break;
    case 1: op_resize(in); break;
    case 2: op_step(in); break;
    default: op_full(); break;
    }
    (void)foreign;
    hh_test_fail_after(-1);
    M.fault_armed = false;
    fz_errors_reset();
}

/* ---------------------------------------------------------------------------
   Entry point
--------------------------------------------------------------------------- */
static const size_t capacities[4] = { 16384, 65536, 262144, 1u << 20 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = { data, size, 0 };
    uint8_t cfg = fz_u8(&in), cfg2 = fz_u8(&in);
    hh_set_error_handler(fz_on_error, NULL);
    fz_errors_reset();
    memset(&M, 0, sizeof M);

    hh_heap_desc d = { .capacity = capacities[cfg & 3], .on_move = on_move };
    if (cfg & 0x04) d.flags |= HH_HEAP_DEBUG;
    if (cfg & 0x08) d.flags |= HH_HEAP_STRESS_MOVES;
    if (cfg & 0x10) d.flags |= HH_HEAP_NO_AUTO_COMPACT;
    if (cfg & 0x20) d.flags |= HH_HEAP_THREADSAFE;
    if (cfg & 0x40) d.max_handles = 16 + (cfg2 & 31);    /* small table: exhaustion */
    void *mem = NULL;
    if (cfg & 0x80) {
        mem = aligned_alloc(4096, d.capacity);
        FZ_CHECK(mem != NULL, "aligned_alloc");
        d.memory = mem;
    }
    FZ_CHECK(hh_heap_create(&d, &M.heap) == HH_OK, "create failed: %s", hh_status_str(hh_last_error()));
    hh_heap_desc got;
    hh_heap_desc_get(M.heap, &got);
    M.max_handles = got.max_handles;
    M.flags = got.flags;
    managed_bytes = hh_heap_managed_bytes(M.heap);
    hh_defrag_set_policy(M.heap, (hh_defrag_policy)((cfg2 >> 5) % 3));

    hh_heap *other = NULL;
    FZ_CHECK(hh_heap_create(&(hh_heap_desc){ .capacity = 16384 }, &other) == HH_OK, "second heap");
    hh_handle foreign = hh_alloc(other, 32);
    FZ_CHECK(!hh_is_null(foreign), "second heap alloc");

    unsigned op = 0;
    for (; op < MAX_OPS && fz_more(&in); op++) {
        uint8_t code = fz_u8(&in);
        switch (code % 16) {
        case 0: case 1: op_alloc(&in, false); break;
        case 2:         op_alloc(&in, true); break;
        case 3: case 4: op_free(&in); break;
        case 5:         op_resize(&in); break;
        case 6:         op_pin(&in); break;
        case 7:         op_unpin(&in); break;
        case 8:         op_touch(&in); break;
        case 9: case 10: op_step(&in); break;
        case 11:        op_step_ex(&in); break;
        case 12:        op_full(); break;
        case 13: {
            hh_defrag_policy p = (hh_defrag_policy)(fz_u8(&in) % 3);
            hh_defrag_set_policy(M.heap, p);
            FZ_CHECK(hh_defrag_get_policy(M.heap) == p, "policy not set");
            break;
        }
        case 14:        op_bad_handle(&in, foreign); break;
        default:
            if (code & 0x10) op_fault(&in, foreign);
            else op_bad_args(&in);
            break;
        }
        verify_all();
    }

    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_heap: %zu input bytes, %u operations, %zu live objects, %llu moves\n", size, op, M.count,
                (unsigned long long)M.moves_seen);
    /* Unpin and free everything; the heap must end empty and intact. */
    for (size_t i = 0; i < M.count; i++)
        while (M.objs[i].pins) { FZ_CHECK(hh_unpin(M.heap, M.objs[i].h) == HH_OK, "final unpin"); M.objs[i].pins--; }
    while (M.count) {
        FZ_CHECK(hh_free(M.heap, M.objs[M.count - 1].h) == HH_OK, "final free");
        M.count--;
    }
    hh_heap_stats st;
    hh_heap_stats_get(M.heap, &st);
    FZ_CHECK(st.live_blocks == 0 && st.used_bytes == 0, "heap not empty after freeing everything");
    hh_defrag_step(M.heap, 1);                         /* merges the heap's free-block cache (heap.h) */
    hh_heap_stats_get(M.heap, &st);
    FZ_CHECK(st.free_blocks == 1, "empty heap has %u free blocks", st.free_blocks);
    FZ_CHECK(hh_heap_check(M.heap) == HH_OK, "final check");
    hh_heap_destroy(M.heap);
    hh_heap_destroy(other);
    free(mem);
    hh_set_error_handler(NULL, NULL);
    return 0;
}
