/* fuzz_linear.c -- libFuzzer harness: mark stack (and pool) operation sequences.
 *
 * Mark stack: alloc / alloc_zeroed / alloc_ones (small, page-crossing and
 * oversize sizes, alignments 0..4096), mark push, pop of the innermost mark,
 * out-of-order pops of an outer mark, second pops of a popped mark, bad
 * arguments, and the enforce-marks flag. Pool: alloc, free, double free,
 * interior and foreign frees. Checks after every operation:
 *   L1  every live allocation holds its pattern in every byte;
 *   L2  alignment as asked; zeroed / ones allocations read as 0 / 0xFF;
 *   L3  an out-of-order or repeated pop returns HH_E_MARK_ORDER with one
 *       message and changes nothing (L1 holds, open marks unchanged);
 *   L4  hh_memstack_check() == HH_OK and the stack's open-mark count matches;
 *   L5  pool double / foreign frees: HH_E_DOUBLE_FREE / HH_E_FOREIGN_POINTER,
 *       one message, nothing changed; pool live count matches the model.
 */
#include "fuzz_util.h"

#include <string.h>

#include "hheap/linear.h"

enum { MAX_MARKS = 12, MAX_RECS = 64, MAX_OPS = 600, POOL_CAP = 48 };

typedef struct rec { unsigned char *p; size_t size; uint64_t key; unsigned depth; } rec;

static hh_mark marks[MAX_MARKS];
static bool popped[MAX_MARKS];          /* marks[i] was pushed and popped, not pushed again */
static unsigned depth;                  /* open marks: marks[0 .. depth-1] */
static rec R[MAX_RECS];
static size_t nr;
static unsigned char *P[POOL_CAP];
static uint64_t PK[POOL_CAP];
static size_t np;
static uint64_t next_key;

static void verify_all(const hh_memstack *ms, size_t pool_elem) {
    for (size_t i = 0; i < nr; i++) {
        long bad = fz_verify(R[i].p, R[i].size, R[i].key);
        FZ_CHECK(bad < 0, "L1: allocation %zu (%zu bytes, depth %u) byte %ld corrupt", i, R[i].size, R[i].depth, bad);
    }
    for (size_t i = 0; i < np; i++) FZ_CHECK(fz_verify(P[i], pool_elem, PK[i]) < 0, "L5: pool element %zu corrupt", i);
    unsigned before = fz_err.count;
    FZ_CHECK(hh_memstack_check(ms) == HH_OK, "L4: hh_memstack_check failed");
    hh_memstack_info info;
    FZ_CHECK(hh_memstack_info_get(ms, &info) == HH_OK, "info");
    FZ_CHECK(info.open_marks == depth, "L4: %u open marks, model %u", info.open_marks, depth);
    FZ_CHECK(fz_err.count == before, "checks reported");
}

static size_t pick_size(fz_in *in) {
    uint8_t sel = fz_u8(in);
    uint16_t v = fz_u16(in);
    switch (sel & 7) {
    case 0: case 1: case 2: return 1 + v % 64;
    case 3: case 4: return 1 + v % 4000;
    case 5: return 1 + v % 20000;                      /* fills 64 KiB pages fast */
    case 6: return 1 + v % 70000;                      /* crosses 64 KiB pages */
    default: return 60000 + (size_t)v;                 /* oversize chunks */
    }
}

static void expect_fail(unsigned before, hh_status want, const char *what) {
    FZ_CHECK(fz_err.count == before + 1, "%s sent %u messages", what, fz_err.count - before);
    FZ_CHECK(fz_err.last == want && hh_last_error() == want, "%s: %s, expected %s", what, hh_status_str(fz_err.last),
             hh_status_str(want));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = { data, size, 0 };
    hh_set_error_handler(fz_on_error, NULL);
    fz_errors_reset();
    depth = 0;
    nr = np = 0;
    memset(popped, 0, sizeof popped);
    uint8_t cfg = fz_u8(&in);
    bool enforce = cfg & 1;
    hh_memstack *ms = NULL;
    FZ_CHECK(hh_memstack_create(&(hh_memstack_desc){ .flags = enforce ? HH_MEMSTACK_ENFORCE_MARKS : 0, .name = "fuzz" },
                                &ms) == HH_OK, "memstack create");
    size_t pool_elem = 1 + (cfg >> 1) % 96;
    hh_pool *pool = NULL;
    FZ_CHECK(hh_pool_create(&(hh_pool_desc){ .elem_size = pool_elem, .capacity = POOL_CAP,
                                             .flags = (cfg & 0x80) ? HH_POOL_INDEX16 : 0 }, &pool) == HH_OK, "pool create");

    for (unsigned op = 0; op < MAX_OPS && fz_more(&in); op++) {
        uint8_t code = fz_u8(&in);
        unsigned before = fz_err.count;
        switch (code % 13) {
        case 0: case 1: case 2: {                                   /* alloc / zeroed / ones */
            size_t s = pick_size(&in);
            uint8_t a = fz_u8(&in) % 14;
            size_t align = a == 13 ? 0 : (size_t)1 << a;            /* 0: default */
            int kind = code % 3;
            unsigned char *p = kind == 0 ? hh_memstack_alloc(ms, s, align)
                             : kind == 1 ? hh_memstack_alloc_zeroed(ms, s, align)
                                         : hh_memstack_alloc_ones(ms, s, align);
            if (enforce && depth == 0) {
                FZ_CHECK(p == NULL, "enforce-marks: allocation with no mark succeeded");
                expect_fail(before, HH_E_NO_MARK, "alloc without mark");
                break;
            }
            FZ_CHECK(p != NULL, "memstack alloc(%zu, %zu) failed: %s", s, align, hh_status_str(hh_last_error()));
            FZ_CHECK(((uintptr_t)p & ((align ? align : 16) - 1)) == 0, "L2: %p not %zu-aligned", (void *)p, align);
            if (kind == 1) for (size_t i = 0; i < s; i++) FZ_CHECK(p[i] == 0, "L2: zeroed byte %zu", i);
            if (kind == 2) for (size_t i = 0; i < s; i++) FZ_CHECK(p[i] == 0xFF, "L2: ones byte %zu", i);
            for (size_t i = 0; i < nr; i++)
                FZ_CHECK(p + s <= R[i].p || R[i].p + R[i].size <= p, "allocation overlaps a live one");
            if (nr == MAX_RECS) break;                              /* still live, just not modelled */
            R[nr] = (rec){ p, s, ++next_key, depth };
            fz_fill(p, s, R[nr].key);
            nr++;
            break;
        }
        case 3: case 4:                                             /* push */
            if (depth == MAX_MARKS) break;
            hh_mark_push(ms, &marks[depth]);
            FZ_CHECK(fz_err.count == before, "push reported");
            popped[depth] = false;
            depth++;
            break;
        case 5: case 6: {                                           /* pop the innermost */
            if (depth == 0) break;
            FZ_CHECK(hh_mark_pop(&marks[depth - 1]) == HH_OK, "pop of the innermost mark failed");
            depth--;
            popped[depth] = true;
            for (size_t i = 0; i < nr;)
                if (R[i].depth > depth) R[i] = R[--nr];
                else i++;
            break;
        }
        case 7: {                                                   /* out-of-order pop */
            if (depth < 2) break;
            unsigned k = fz_u8(&in) % (depth - 1);
            expect_fail(before, hh_mark_pop(&marks[k]) == HH_E_MARK_ORDER ? HH_E_MARK_ORDER : HH_E_CORRUPT, "out-of-order pop");
            break;
        }
        case 8:                                                     /* second pop */
            if (depth < MAX_MARKS && popped[depth]) {
                hh_status s = hh_mark_pop(&marks[depth]);
                FZ_CHECK(s == HH_E_MARK_ORDER, "second pop: %s", hh_status_str(s));
                expect_fail(before, HH_E_MARK_ORDER, "second pop");
            }
            break;
        case 9: {                                                   /* bad arguments */
            uint8_t w = fz_u8(&in);
            void *p = (w & 1) ? hh_memstack_alloc(ms, 0, 16) : hh_memstack_alloc(ms, 16, 24);
            FZ_CHECK(p == NULL, "bad alloc accepted");
            expect_fail(before, HH_E_INVALID_ARG, "bad alloc");
            before = fz_err.count;
            FZ_CHECK(hh_mark_pop(NULL) == HH_E_INVALID_ARG, "pop(NULL)");
            expect_fail(before, HH_E_INVALID_ARG, "pop(NULL)");
            break;
        }
        case 10: {                                                  /* pool alloc */
            unsigned char *e = hh_pool_alloc(pool);
            if (np == POOL_CAP) {
                FZ_CHECK(e == NULL, "pool gave more than its capacity");
                expect_fail(before, HH_E_NO_MEMORY, "full pool");
                break;
            }
            FZ_CHECK(e != NULL, "pool alloc failed");
            P[np] = e;
            PK[np] = ++next_key;
            fz_fill(e, pool_elem, PK[np]);
            np++;
            break;
        }
        case 11: {                                                  /* pool free (+ double free) */
            if (!np) break;
            size_t i = fz_u8(&in) % np;
            unsigned char *e = P[i];
            FZ_CHECK(hh_pool_free(pool, e) == HH_OK, "pool free failed");
            P[i] = P[--np];
            PK[i] = PK[np];
            if (fz_u8(&in) & 1) {
                before = fz_err.count;
                FZ_CHECK(hh_pool_free(pool, e) == HH_E_DOUBLE_FREE, "pool double free not detected");
                expect_fail(before, HH_E_DOUBLE_FREE, "pool double free");
            }
            break;
        }
        default: {                                                  /* pool foreign / interior */
            unsigned char local[8];
            unsigned char *bad = (np && pool_elem > 1 && (fz_u8(&in) & 1)) ? P[0] + 1 : local;
            FZ_CHECK(hh_pool_free(pool, bad) == HH_E_FOREIGN_POINTER, "pool foreign free not detected");
            expect_fail(before, HH_E_FOREIGN_POINTER, "pool foreign free");
            break;
        }
        }
        verify_all(ms, pool_elem);
        hh_pool_info pi;
        FZ_CHECK(hh_pool_info_get(pool, &pi) == HH_OK && pi.live_count == np, "L5: pool live %zu, model %zu", pi.live_count, np);
    }

    while (depth) {
        FZ_CHECK(hh_mark_pop(&marks[depth - 1]) == HH_OK, "final pop");
        depth--;
    }
    FZ_CHECK(hh_memstack_check(ms) == HH_OK, "final check");
    hh_memstack_destroy(ms);
    hh_pool_destroy(pool);
    hh_set_error_handler(NULL, NULL);
    return 0;
}
