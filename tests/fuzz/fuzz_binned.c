/* fuzz_binned.c -- libFuzzer harness: binned allocator operation sequences.
 *
 * Operations decoded from the input: bmalloc / bcalloc / bmemalign / brealloc
 * (small, class-boundary, large and huge sizes), bfree, busable, and bad frees:
 * a second free of a block just freed, an interior pointer, a pointer into the
 * harness's own stack and globals, a glibc malloc block; thread-cache flushes,
 * trims and cache-limit changes. Checks after every operation:
 *   B1  every live block holds its pattern in every byte it asked for;
 *   B2  hh_busable(p) >= size asked, alignment as asked;
 *   B3  bad frees and bad reallocs are reported with the documented status and
 *       exactly one message, and change nothing (B1 still holds);
 *   B4  hh_binned_check() == HH_OK (every 64 operations and at the end; it
 *       walks every span);
 *   B5  at the end, with everything freed, the leak report is back where it began.
 */
#include "fuzz_util.h"

#include <string.h>

#include "hheap/binned.h"

enum { MAX_BLOCKS = 64, MAX_OPS = 800 };

typedef struct blk { unsigned char *p; size_t size, align; uint64_t key; } blk;

static blk B[MAX_BLOCKS];
static size_t nb;
static uint64_t next_key;
static unsigned char some_global[64];

static size_t pick_size(fz_in *in) {
    uint8_t sel = fz_u8(in);
    uint16_t v = fz_u16(in);
    switch (sel & 7) {
    case 0: return v % 17;                                   /* 0 .. 16, size 0 included */
    case 1: return 1 + v % 128;
    case 2: return 1 + v % 2048;
    case 3: { int c = v % HH_BINNED_CLASS_COUNT;             /* class boundaries */
              size_t s = hh_binned_class_size(c);
              return s + (size_t)(sel >> 3) % 3 - 1; }
    case 4: return 1 + v % (HH_BINNED_SMALL_MAX / 4);
    case 5: return HH_BINNED_SMALL_MAX - 8 + v % 32;
    case 6: return 33000 + (size_t)v % 40000;                /* large: OS-mapped */
    default: return 1 + v % 512;
    }
}

static void verify_block(const blk *b, const char *when) {
    long bad = fz_verify(b->p, b->size, b->key);
    FZ_CHECK(bad < 0, "B1 (%s): block %p (%zu bytes) byte %ld corrupt", when, (void *)b->p, b->size, bad);
}

static void verify_all(void) {
    for (size_t i = 0; i < nb; i++) verify_block(&B[i], "verify");
}

static void add(unsigned char *p, size_t size, size_t align) {
    FZ_CHECK(((uintptr_t)p & (align - 1)) == 0, "B2: %p not %zu-aligned", (void *)p, align);
    FZ_CHECK(((uintptr_t)p & 15) == 0, "B2: %p not 16-aligned", (void *)p);
    unsigned before = fz_err.count;
    size_t usable = hh_busable(p);
    if (size == 0 && align >= 65536 && usable == 0 && !fz_strict()) {
        /* tests/fuzz/repro_binned_memalign0.c: an OS-served hh_bmemalign(align, 0)
           block is called foreign by hh_busable (it frees cleanly). */
        FZ_KNOWN_BUG("binned-memalign-size0", "hh_bmemalign(%zu, 0) block unknown to hh_busable", align);
        fz_errors_reset();
    } else {
        FZ_CHECK(usable >= size, "B2: busable %zu < %zu", usable, size);
        FZ_CHECK(fz_err.count == before, "busable of a live block reported");
    }
    for (size_t i = 0; i < nb; i++) FZ_CHECK(B[i].p != p, "B2: %p handed out twice", (void *)p);
    B[nb] = (blk){ p, size, align, ++next_key };
    fz_fill(p, size, B[nb].key);
    nb++;
}

static void remove_at(size_t i) { B[i] = B[--nb]; }

static void expect_bad(unsigned before, hh_status want, const char *what) {
    FZ_CHECK(fz_err.count == before + 1, "B3: %s sent %u messages", what, fz_err.count - before);
    FZ_CHECK(fz_err.last == want && hh_last_error() == want, "B3: %s reported %s, expected %s", what,
             hh_status_str(fz_err.last), hh_status_str(want));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = { data, size, 0 };
    hh_set_error_handler(fz_on_error, NULL);
    fz_errors_reset();
    nb = 0;
    hh_binned_thread_flush();
    size_t base_bytes;
    size_t base_leaks = hh_binned_leak_report(NULL, NULL, &base_bytes);
    uint8_t cfg = fz_u8(&in);
    if (cfg & 1) FZ_CHECK(hh_binned_set_thread_cache_limit((size_t)(cfg >> 1) * 16384) == HH_OK, "cache limit");

    for (unsigned op = 0; op < MAX_OPS && fz_more(&in); op++) {
        uint8_t code = fz_u8(&in);
        unsigned before = fz_err.count;
        blk *b = nb ? &B[fz_u8(&in) % nb] : NULL;
        switch (code % 14) {
        case 0: case 1: {                                        /* malloc */
            if (nb == MAX_BLOCKS) break;
            size_t s = pick_size(&in);
            unsigned char *p = hh_bmalloc(s);
            FZ_CHECK(p != NULL, "bmalloc(%zu) failed: %s", s, hh_status_str(hh_last_error()));
            add(p, s, 16);
            break;
        }
        case 2: {                                                /* calloc */
            if (nb == MAX_BLOCKS) break;
            size_t n = 1 + fz_u8(&in) % 64, s = pick_size(&in) % 600;
            unsigned char *p = hh_bcalloc(n, s);
            FZ_CHECK(p != NULL, "bcalloc(%zu, %zu) failed", n, s);
            for (size_t i = 0; i < n * s; i++) FZ_CHECK(p[i] == 0, "bcalloc byte %zu not zero", i);
            add(p, n * s, 16);
            break;
        }
        case 3: {                                                /* memalign */
            if (nb == MAX_BLOCKS) break;
            size_t align = (size_t)1 << (fz_u8(&in) % 22);       /* 1 .. 2 MiB */
            size_t s = pick_size(&in);
            unsigned char *p = hh_bmemalign(align, s);
            FZ_CHECK(p != NULL, "bmemalign(%zu, %zu) failed: %s", align, s, hh_status_str(hh_last_error()));
            if (s == 0 && align >= 65536 && !fz_strict() && hh_busable(p) == 0) {
                /* tests/fuzz/repro_binned_memalign0.c: hh_busable and hh_brealloc call this
                   block foreign; keep it out of the model, free it now. */
                FZ_KNOWN_BUG("binned-memalign-size0", "hh_bmemalign(%zu, 0) block unknown to hh_busable/hh_brealloc", align);
                hh_bfree(p);
                fz_errors_reset();
                break;
            }
            add(p, s, align < 16 ? 16 : align);
            break;
        }
        case 4: {                                                /* realloc */
            if (!b) break;
            size_t s = pick_size(&in);
            if (s == 0) s = 1;                                   /* realloc(p, 0) frees: op 5 covers free */
            unsigned char *p = hh_brealloc(b->p, s);
            FZ_CHECK(p != NULL, "brealloc(%p of %zu, align %zu -> %zu) failed: %s", (void *)b->p, b->size, b->align, s,
                     hh_status_str(hh_last_error()));
            size_t keep = b->size < s ? b->size : s;
            long bad = fz_verify(p, keep, b->key);
            FZ_CHECK(bad < 0, "brealloc %zu -> %zu lost byte %ld", b->size, s, bad);
            FZ_CHECK(hh_busable(p) >= s, "realloc usable");
            b->p = p;
            b->size = s;
            b->align = 16;
            fz_fill(p, s, b->key);
            break;
        }
        case 5: case 6:                                          /* free */
            if (!b) break;
            hh_bfree(b->p);
            FZ_CHECK(fz_err.count == before, "clean bfree reported");
            remove_at((size_t)(b - B));
            break;
        case 7: {                                                /* double free, right after the free */
            if (!b) break;
            unsigned char *p = b->p;
            size_t bsize = b->size, balign = b->align;
            hh_bfree(p);
            remove_at((size_t)(b - B));
            before = fz_err.count;
            hh_bfree(p);
            if (fz_err.last == HH_E_FOREIGN_POINTER && fz_err.count == before + 1 && !fz_strict()) {
                /* tests/fuzz/repro_binned_double_free_kind.c: the block's page became empty */
                FZ_KNOWN_BUG("binned-double-free-empty-page", "double free of a %zu-byte block (align %zu) reported as "
                             "foreign pointer", bsize, balign);
            } else {
                expect_bad(before, HH_E_DOUBLE_FREE, "double free");
            }
            before = fz_err.count;
            FZ_CHECK(hh_brealloc(p, 64) == NULL, "brealloc of a freed block succeeded");
            FZ_CHECK(fz_err.count == before + 1, "brealloc(freed) sent %u messages", fz_err.count - before);
            break;
        }
        case 8: {                                                /* interior pointer */
            if (!b || b->size < 32) break;
            size_t off = 16 * (1 + fz_u8(&in) % (b->size / 16 - 1 ? b->size / 16 - 1 : 1));
            if (off >= b->size) off = 16;
            hh_bfree(b->p + off);
            expect_bad(before, HH_E_FOREIGN_POINTER, "interior free");
            before = fz_err.count;
            FZ_CHECK(hh_busable(b->p + off) == 0, "busable(interior)");
            expect_bad(before, HH_E_FOREIGN_POINTER, "interior busable");
            break;
        }
        case 9: {                                                /* foreign: stack, global, glibc */
            unsigned char local[32];
            void *glibc = malloc(48);
            void *targets[3] = { local + 16, some_global + 16, glibc };
            for (int i = 0; i < 3; i++) {
                before = fz_err.count;
                hh_bfree(targets[i]);
                expect_bad(before, HH_E_FOREIGN_POINTER, "foreign free");
            }
            free(glibc);
            break;
        }
        case 10:                                                 /* busable of a live block */
            if (b) FZ_CHECK(hh_busable(b->p) >= b->size, "busable");
            break;
        case 11:
            hh_binned_thread_flush();
            break;
        case 12:
            (void)hh_binned_trim(fz_u8(&in) & 1 ? 0 : 100000);
            break;
        default: {                                               /* bad arguments */
            uint8_t w = fz_u8(&in);
            if (w & 1) {
                FZ_CHECK(hh_bcalloc(SIZE_MAX / 2, 3) == NULL, "calloc overflow accepted");
                expect_bad(before, HH_E_INVALID_ARG, "calloc overflow");
            } else if (w & 2) {
                FZ_CHECK(hh_bmemalign(24, 64) == NULL, "align 24 accepted");
                expect_bad(before, HH_E_INVALID_ARG, "memalign(24)");
            } else {
                FZ_CHECK(hh_bmalloc(SIZE_MAX - w) == NULL, "bmalloc(SIZE_MAX) succeeded");
                expect_bad(before, HH_E_NO_MEMORY, "bmalloc(SIZE_MAX)");
            }
            break;
        }
        }
        verify_all();
        if ((op & 63) == 63) FZ_CHECK(hh_binned_check() == HH_OK, "B4: hh_binned_check failed");
    }

    for (size_t i = 0; i < nb; i++) hh_bfree(B[i].p);
    nb = 0;
    FZ_CHECK(hh_binned_check() == HH_OK, "B4: final hh_binned_check failed");
    hh_binned_thread_flush();
    size_t bytes;
    size_t leaks = hh_binned_leak_report(NULL, NULL, &bytes);
    FZ_CHECK(leaks == base_leaks && bytes == base_bytes, "B5: %zu blocks / %zu bytes live after freeing all (was %zu / %zu)",
             leaks, bytes, base_leaks, base_bytes);
    if (cfg & 1) hh_binned_set_thread_cache_limit(1u << 20);
    hh_set_error_handler(NULL, NULL);
    return 0;
}
