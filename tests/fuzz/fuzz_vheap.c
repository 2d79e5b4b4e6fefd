/* fuzz_vheap.c -- libFuzzer harness: the virtual heap (include/hheap/vheap.h).
 *
 * The input decodes into a configuration byte (size, handle-table size)
 * followed by operations: alloc, free, resize, pin, unpin, grow, shrink,
 * begin a pass, end it (each move's result chosen by the input: done,
 * skipped, cancelled), free / pin / allocate while a pass is open, operations
 * on stale, forged and foreign handles, and injected metadata faults
 * (hh_test_fail_after) around allocating calls.
 *
 * The shadow buffer stands in for the GPU buffer: every live block holds its
 * byte pattern there; the harness performs a pass's copies just before it
 * ends the pass, scribbles every range the heap frees, and checks after
 * every operation:
 *   S1  hh_vheap_check() == HH_OK;
 *   S2  every byte of every live block at hh_voffset, its alignment, hh_vsize;
 *   S3  a pinned block has not moved;
 *   S4  stats agree with the model (live and pinned counts, used + reserved +
 *       free = size);
 *   S5  a planned pass: moves disjoint (downwards but for AUTO slides), of
 *       unpinned blocks, aligned; offsets
 *       unchanged until end;
 *   S6  every failing call returned the documented status and sent exactly
 *       one message.
 */
#include "fuzz_util.h"

#include "hheap/vheap.h"

enum {
    MAX_OBJS = 48,
    MAX_OPS = 800,
    MAX_SIZE = 1u << 20,    /* largest the heap may grow to */
};

typedef struct obj {
    hh_handle h;
    uint64_t  size, align, key;
    unsigned  pins;
    uint64_t  pinned_at;
} obj;

typedef struct vmodel {
    hh_vheap *heap;
    uint8_t  *buf;
    uint64_t  size;
    obj       o[MAX_OBJS];
    size_t    n;
    uint64_t  next_key;
    hh_handle dead;
    bool      pass;
    uint32_t  nmoves;
    hh_vmove  moves[64];
    hh_vmove_result res[64];
} vmodel;

static vmodel V;

static void scribble(uint64_t off, uint64_t n) { memset(V.buf + off, 0xDD, (size_t)n); }

static size_t find(hh_handle h) {
    for (size_t i = 0; i < V.n; i++)
        if (V.o[i].h.id == h.id) return i;
    return SIZE_MAX;
}
static bool moving(hh_handle h) {
    for (uint32_t i = 0; V.pass && i < V.nmoves; i++)
        if (V.moves[i].handle.id == h.id) return true;
    return false;
}

static void expect_fail(hh_status got, hh_status want, const char *what) {
    FZ_CHECK(got == want, "%s: %s, expected %s", what, hh_status_str(got), hh_status_str(want));
    FZ_CHECK(fz_err.count == 1 && fz_err.last == want, "%s: %u messages, last %s", what, fz_err.count,
             hh_status_str(fz_err.last));
}

/* bytes: check every byte too (after every pass's end and every 8th
   operation: a misplaced block stays wrong until then, so nothing escapes;
   checking bytes after every operation would cost most of the run). */
static void verify_all(bool bytes) {
    FZ_CHECK(hh_vheap_check(V.heap) == HH_OK, "S1 check: %s", hh_status_str(hh_last_error()));
    unsigned pinned = 0;
    for (size_t i = 0; i < V.n; i++) {
        const obj *o = &V.o[i];
        uint64_t off = hh_voffset(V.heap, o->h);
        FZ_CHECK(off != HH_VOFFSET_NONE && off + o->size <= V.size, "S2 offset %llu", (unsigned long long)off);
        FZ_CHECK(off % o->align == 0, "S2 alignment");
        FZ_CHECK(hh_vsize(V.heap, o->h) >= o->size, "S2 size");
        FZ_CHECK(!bytes || fz_verify(V.buf + off, (size_t)o->size, o->key) == -1, "S2 bytes of block at %llu",
                 (unsigned long long)off);
        if (o->pins) {
            FZ_CHECK(off == o->pinned_at, "S3 pinned block moved");
            pinned++;
        }
    }
    hh_vheap_stats st;
    hh_vheap_stats_get(V.heap, &st);
    FZ_CHECK(st.live_blocks == V.n && st.pinned_blocks == pinned, "S4 counts %u/%zu %u/%u", st.live_blocks, V.n,
             st.pinned_blocks, pinned);
    FZ_CHECK(st.used_bytes + st.reserved_bytes + st.free_bytes == st.size && st.size == V.size, "S4 bytes");
}

static void op_alloc(fz_in *in) {
    uint64_t size = 1 + (fz_u16(in) % (fz_u8(in) & 1 ? 32768u : 2048u));
    uint64_t align = (uint64_t)1 << (fz_u8(in) % 17);
    bool fault = (fz_u8(in) & 7) == 0;
    if (V.n == MAX_OBJS) return;
    if (fault) hh_test_fail_after(0);
    fz_errors_reset();
    hh_handle h = hh_valloc(V.heap, size, align, 7);
    hh_test_fail_after(-1);
    if (hh_is_null(h)) {
        expect_fail(hh_last_error(), HH_E_NO_MEMORY, "alloc");
        return;
    }
    FZ_CHECK(fz_err.count == 0, "alloc succeeded with a message");
    obj *o = &V.o[V.n++];
    *o = (obj){ .h = h, .size = size, .align = align < 16 ? 16 : align, .key = V.next_key++ };
    fz_fill(V.buf + hh_voffset(V.heap, h), (size_t)size, o->key);
}

static void op_free(fz_in *in) {
    if (V.n == 0) return;
    size_t i = fz_u8(in) % V.n;
    obj *o = &V.o[i];
    fz_errors_reset();
    if (o->pins) {
        expect_fail(hh_vfree(V.heap, o->h), HH_E_PINNED, "free pinned");
        return;
    }
    uint64_t off = hh_voffset(V.heap, o->h), size = hh_vsize(V.heap, o->h);
    bool mv = moving(o->h);
    FZ_CHECK(hh_vfree(V.heap, o->h) == HH_OK, "free");
    if (!mv) scribble(off, size);                 /* a source stays reserved (scribbled at end) */
    V.dead = o->h;
    *o = V.o[--V.n];
}

static void op_resize(fz_in *in) {
    if (V.n == 0) return;
    obj *o = &V.o[fz_u8(in) % V.n];
    uint64_t ns = 1 + fz_u16(in) % 8192;
    uint64_t off = hh_voffset(V.heap, o->h), old = hh_vsize(V.heap, o->h);
    fz_errors_reset();
    hh_status s = hh_vresize(V.heap, o->h, ns);
    if (moving(o->h)) { expect_fail(s, HH_E_PINNED, "resize in pass"); return; }
    if (s != HH_OK) { expect_fail(s, HH_E_NO_MEMORY, "resize"); FZ_CHECK(hh_vsize(V.heap, o->h) == old, "resize kept"); return; }
    FZ_CHECK(hh_voffset(V.heap, o->h) == off, "resize moved the block");
    uint64_t now = hh_vsize(V.heap, o->h);
    if (now < old) scribble(off + now, old - now);
    if (ns > o->size) fz_fill(V.buf + off, (size_t)ns, o->key);
    o->size = ns;
}

static void op_pin(fz_in *in, bool pin) {
    if (V.n == 0) return;
    obj *o = &V.o[fz_u8(in) % V.n];
    fz_errors_reset();
    if (pin) {
        hh_status s = hh_vpin(V.heap, o->h);
        if (o->pins == HH_VHEAP_MAX_PINS) { expect_fail(s, HH_E_INVALID_ARG, "pin overflow"); return; }
        FZ_CHECK(s == HH_OK, "pin");
        if (o->pins++ == 0) o->pinned_at = hh_voffset(V.heap, o->h);
    } else {
        hh_status s = hh_vunpin(V.heap, o->h);
        if (o->pins == 0) { expect_fail(s, HH_E_INVALID_ARG, "unpin"); return; }
        FZ_CHECK(s == HH_OK, "unpin");
        o->pins--;
    }
}

static void op_begin(fz_in *in) {
    uint8_t k = fz_u8(in);
    hh_vdefrag_budget b = { .max_moves = 1u + k % 64u, .max_bytes = (fz_u8(in) & 1) ? 0 : 1u + fz_u16(in) * 64u,
                            .policy = (k & 0x40) ? HH_VDEFRAG_AUTO : HH_VDEFRAG_FILL };
    bool fault = (fz_u8(in) & 7) == 0;
    hh_vdefrag_pass p;
    fz_errors_reset();
    if (V.pass) { expect_fail(hh_vdefrag_begin(V.heap, &b, &p), HH_E_INVALID_ARG, "second begin"); return; }
    if (fault) hh_test_fail_after(0);
    hh_status s = hh_vdefrag_begin(V.heap, &b, &p);
    hh_test_fail_after(-1);
    if (s != HH_OK) { expect_fail(s, HH_E_NO_MEMORY, "begin"); FZ_CHECK(!hh_vdefrag_active(V.heap), "no pass"); return; }
    FZ_CHECK(p.move_count <= b.max_moves && (!b.max_bytes || p.bytes <= b.max_bytes), "S5 budget");
    V.pass = true;
    V.nmoves = p.move_count;
    memcpy(V.moves, p.moves, p.move_count * sizeof *V.moves);
    for (uint32_t i = 0; i < p.move_count; i++) {
        const hh_vmove *m = &p.moves[i];
        size_t oi = find(m->handle);
        FZ_CHECK(oi != SIZE_MAX && V.o[oi].pins == 0, "S5 planned a pinned or unknown block");
        FZ_CHECK(hh_voffset(V.heap, m->handle) == m->src_offset && m->dst_offset % V.o[oi].align == 0 &&
                 (m->dst_offset + m->size <= m->src_offset || m->src_offset + m->size <= m->dst_offset) &&
                 m->dst_offset + m->size <= V.size, "S5 move %u", i);
        for (uint32_t j = 0; j < i; j++) {
            const hh_vmove *q = &p.moves[j];
            FZ_CHECK(m->dst_offset + m->size <= q->dst_offset || q->dst_offset + q->size <= m->dst_offset, "S5 dst overlap");
            FZ_CHECK(m->dst_offset + m->size <= q->src_offset || q->src_offset + q->size <= m->dst_offset, "S5 dst/src");
            FZ_CHECK(q->dst_offset + q->size <= m->src_offset || m->src_offset + m->size <= q->dst_offset, "S5 src/dst");
        }
        V.res[i] = (hh_vmove_result)(fz_u8(in) % 4 == 3 ? (fz_u8(in) % 3) : HH_VMOVE_DONE);
    }
}

static void op_end(void) {
    fz_errors_reset();
    if (!V.pass) { expect_fail(hh_vdefrag_end(V.heap, NULL, NULL), HH_E_INVALID_ARG, "end without pass"); return; }
    bool gone[64];
    for (uint32_t i = 0; i < V.nmoves; i++) {         /* the engine's copies */
        const hh_vmove *m = &V.moves[i];
        gone[i] = find(m->handle) == SIZE_MAX;
        if (!gone[i] && V.res[i] == HH_VMOVE_DONE) memcpy(V.buf + m->dst_offset, V.buf + m->src_offset, (size_t)m->size);
        if (V.res[i] == HH_VMOVE_SKIPPED) memset(V.buf + m->dst_offset, 0xAB, (size_t)m->size);
    }
    hh_vdefrag_report rep;
    FZ_CHECK(hh_vdefrag_end(V.heap, V.res, &rep) == HH_OK, "end");
    FZ_CHECK(rep.done + rep.skipped + rep.cancelled == V.nmoves, "report");
    for (uint32_t i = 0; i < V.nmoves; i++) {
        const hh_vmove *m = &V.moves[i];
        size_t oi = gone[i] ? SIZE_MAX : find(m->handle);
        if (oi == SIZE_MAX || (V.res[i] == HH_VMOVE_CANCELLED && V.o[oi].pins == 0)) {
            FZ_CHECK(hh_voffset(V.heap, m->handle) == HH_VOFFSET_NONE, "cancelled handle still live");
            scribble(m->src_offset, m->size);
            scribble(m->dst_offset, m->size);
            if (oi != SIZE_MAX) V.o[oi] = V.o[--V.n];
            continue;
        }
        bool stays = V.res[i] != HH_VMOVE_DONE || V.o[oi].pins;
        FZ_CHECK(hh_voffset(V.heap, m->handle) == (stays ? m->src_offset : m->dst_offset), "offset after end");
        scribble(stays ? m->dst_offset : m->src_offset, m->size);
    }
    fz_errors_reset();
    V.pass = false;
}

static void op_grow_shrink(fz_in *in) {
    uint8_t k = fz_u8(in);
    fz_errors_reset();
    if (k & 1) {
        uint64_t ns = V.size + 16u * (fz_u16(in) % 4096u);
        if (ns > MAX_SIZE) return;
        if ((k & 0x0E) == 0) hh_test_fail_after(0);
        hh_status s = hh_vheap_grow(V.heap, ns);
        hh_test_fail_after(-1);
        if (s != HH_OK) { expect_fail(s, HH_E_NO_MEMORY, "grow"); return; }
        scribble(V.size, ns - V.size);
        V.size = ns;
    } else {
        uint64_t ns;
        FZ_CHECK(hh_vheap_shrink(V.heap, &ns) == HH_OK && ns <= V.size, "shrink");
        hh_vheap_stats st;
        hh_vheap_stats_get(V.heap, &st);
        FZ_CHECK(ns == st.high_water, "shrink to the highest used byte");
        V.size = ns;
    }
}

static void op_bad(fz_in *in, hh_vheap *other, hh_handle foreign) {
    uint8_t k = fz_u8(in) % 6;
    fz_errors_reset();
    hh_handle forged = { ((uint64_t)fz_u32(in) << 32) | fz_u32(in) };
    switch (k) {
    case 0: if (!hh_is_null(V.dead)) expect_fail(hh_vfree(V.heap, V.dead), HH_E_STALE_HANDLE, "stale free"); break;
    case 1: expect_fail(hh_vfree(V.heap, foreign), HH_E_STALE_HANDLE, "foreign free"); break;
    case 2:
        if (find(forged) == SIZE_MAX && !hh_is_null(forged)) {
            FZ_CHECK(hh_voffset(V.heap, forged) == HH_VOFFSET_NONE, "forged offset");
            FZ_CHECK(fz_err.count == 1 && fz_err.last == HH_E_STALE_HANDLE, "forged message");
        }
        break;
    case 3: hh_valloc(V.heap, 64, 48, 0); expect_fail(hh_last_error(), HH_E_INVALID_ARG, "bad align"); break;
    case 4: hh_valloc(V.heap, 0, 16, 0); expect_fail(hh_last_error(), HH_E_INVALID_ARG, "size 0"); break;
    default:
        if (forged.id == foreign.id) break;          /* the one live handle of the other heap */
        expect_fail(hh_vpin(other, V.dead.id ? V.dead : forged), HH_E_STALE_HANDLE, "pin foreign");
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = { data, size, 0 };
    uint8_t cfg = fz_u8(&in);
    hh_set_error_handler(fz_on_error, NULL);
    fz_errors_reset();
    memset(&V, 0, sizeof V);
    static const uint64_t sizes[4] = { 4096, 16384, 65536, 262144 };
    V.size = sizes[cfg & 3];
    V.next_key = 1;
    hh_vheap_desc d = { .size = V.size, .max_handles = (cfg & 4) ? 8u + (cfg >> 4) : 0 };
    FZ_CHECK(hh_vheap_create(&d, &V.heap) == HH_OK, "create");
    V.buf = malloc(MAX_SIZE);                      /* bytes past the heap's size are never read */
    FZ_CHECK(V.buf != NULL, "buffer");
    memset(V.buf, 0xDD, (size_t)V.size);
    hh_vheap *other;
    FZ_CHECK(hh_vheap_create(&(hh_vheap_desc){ .size = 4096 }, &other) == HH_OK, "second heap");
    hh_handle foreign = hh_valloc(other, 32, 16, 0);

    for (unsigned op = 0; op < MAX_OPS && fz_more(&in); op++) {
        uint8_t code = fz_u8(&in);
        switch (code % 12) {
        case 0: case 1: case 2: op_alloc(&in); break;
        case 3: case 4:         op_free(&in); break;
        case 5:                 op_resize(&in); break;
        case 6:                 op_pin(&in, true); break;
        case 7:                 op_pin(&in, false); break;
        case 8:                 op_begin(&in); break;
        case 9:                 op_end(); break;
        case 10:                op_grow_shrink(&in); break;
        default:                op_bad(&in, other, foreign); break;
        }
        verify_all(code % 12 == 9 || op % 8 == 7);
    }
    if (V.pass) op_end();
    verify_all(true);
    hh_vheap_destroy(V.heap);
    hh_vheap_destroy(other);
    free(V.buf);
    hh_set_error_handler(NULL, NULL);
    return 0;
}
