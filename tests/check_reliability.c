/* check_reliability.c -- fault injection across modules, and concurrency.
 *
 * Fault injection (SQLite's faultsim loop, DESIGN "Quality bars"): each scenario
 * runs for n = 0, 1, 2, ... with hh_test_fail_after(n) armed, until a run
 * completes with no fault fired. After every run the test asserts:
 *   F1  every failing call returned the documented status (HH_E_NO_MEMORY for an
 *       allocation) and sent exactly one message;
 *   F2  the structure checks pass (hh_heap_check, hh_binned_check, hh_memstack_check);
 *   F3  every live block made before the fault still holds every byte it held;
 *   F4  nothing leaks: everything is released at the end of each run (memcheck
 *       and LeakSanitizer see the whole suite; binned live counts go back to the
 *       baseline).
 * The number of faults injected (and survived) is printed on stderr.
 *
 * Concurrency: an HH_HEAP_THREADSAFE heap shared by THREADS threads under the
 * frame contract of heap.h -- in the work phase every thread allocates, frees,
 * resizes, pins, unpins and derefs its own handles (the heap is created with
 * HH_HEAP_NO_AUTO_COMPACT, so no allocation moves another thread's block); in
 * the defrag phase thread 0 runs hh_defrag_step while the others only use
 * pinned pointers and locked calls (alloc + pin, free, unpin-less queries). And
 * the binned allocator under waves of short-lived threads with cross-thread
 * frees. Both are run under TSan by `make check-tsan`.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hheap.h"

/* Totals printed at the end of the suite run (figures for the issue). */
static unsigned long faults_survived;

static void report_faults(const char *scenario, unsigned long fired, unsigned runs) {
    faults_survived += fired;
    fprintf(stderr, "reliability: %-26s %3lu faults injected and survived in %u runs (total %lu)\n", scenario, fired,
            runs, faults_survived);
}

/* ---------------------------------------------------------------------------
   Relocatable heap under faults
--------------------------------------------------------------------------- */
START_TEST(heap_create_faults) {
    hh_test_capture_errors();
    unsigned long fired = 0;
    unsigned n;
    for (n = 0;; n++) {
        hh_test_reset_captured();
        static unsigned char buffer[1u << 16] __attribute__((aligned(4096)));
        hh_heap_desc d = { .capacity = (n & 1) ? sizeof buffer : 1u << 20, .memory = (n & 1) ? buffer : NULL,
                           .flags = HH_HEAP_DEBUG };
        hh_heap *h = NULL;
        hh_test_fail_after(n / 2);
        hh_status s = hh_heap_create(&d, &h);
        unsigned f = hh_test_fail_count();
        hh_test_fail_after(-1);
        fired += f;
        if (f == 0) {
            ck_assert_int_eq(s, HH_OK);
            hh_heap_destroy(h);
            if (n & 1) continue;       /* both variants must reach the no-fault run */
            break;
        }
        ck_assert_int_eq(s, HH_E_NO_MEMORY);                              /* F1 */
        ck_assert_ptr_null(h);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
        ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
    }
    ck_assert_uint_gt(fired, 0);
    report_faults("heap create", fired, n + 1);
} END_TEST

/* A fragmented heap with pinned blocks; then compaction, large allocations and
   resizes with one seam call failing. No live block may change. */
START_TEST(heap_workload_faults) {
    hh_test_capture_errors();
    unsigned long fired = 0;
    unsigned n, runs = 0;
    for (n = 0;; n++, runs++) {
        hh_heap *h;
        ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 18, .flags = HH_HEAP_DEBUG }, &h), HH_OK);
        hh_shadow sh;
        hh_shadow_init(&sh);
        for (unsigned i = 0; i < 120; i++) {
            hh_handle x = hh_alloc_ex(h, 24 + (i * 37) % 700, (size_t)16 << (i % 3), i);
            ck_assert(!hh_is_null(x));
            hh_shadow_add(&sh, h, x, 24 + (i * 37) % 700, (size_t)16 << (i % 3), 1000 + i);
        }
        for (size_t i = 0; i < sh.count; i += 2) {                       /* holes everywhere */
            ck_assert_int_eq(hh_free(h, sh.objs[i].h), HH_OK);
            hh_shadow_remove(&sh, i);
        }
        for (size_t i = 0; i < sh.count; i += 11) {
            sh.objs[i].pinned_at = hh_pin(h, sh.objs[i].h);
            sh.objs[i].pins = 1;
        }
        hh_shadow_verify(&sh, h);
        hh_test_reset_captured();

        hh_test_fail_after(n);
        hh_defrag_step(h, 3);
        hh_handle big = hh_alloc(h, 20000);
        hh_status rs = hh_resize(h, sh.objs[1].h, 3000);
        hh_defrag_full(h);
        hh_handle big2 = hh_alloc_ex(h, 9000, 256, 7);
        unsigned f = hh_test_fail_count();
        hh_test_fail_after(-1);
        fired += f;

        /* F1: failures are NO_MEMORY and each sent one message. */
        unsigned fails = hh_is_null(big) + (rs != HH_OK) + hh_is_null(big2);
        ck_assert_uint_eq(hh_test_captured_count(), fails);
        if (fails) ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
        if (rs == HH_OK) {                      /* the model now owns 3000 bytes of object 1 */
            unsigned char *p = hh_deref(h, sh.objs[1].h);
            long bad = hh_test_verify(p, sh.objs[1].size, sh.objs[1].key);
            ck_assert_msg(bad < 0, "resize under faults lost byte %ld", bad);
            sh.objs[1].size = 3000;
            hh_test_fill(p, 3000, sh.objs[1].key);
        }
        ck_assert_int_eq(hh_heap_check(h), HH_OK);                           /* F2 */
        hh_shadow_verify(&sh, h);                                            /* F3 */
        hh_heap_stats st;
        hh_heap_stats_get(h, &st);
        ck_assert_uint_eq(st.live_blocks, sh.count + !hh_is_null(big) + !hh_is_null(big2));
        ck_assert_int_eq(hh_free(h, big), HH_OK);
        ck_assert_int_eq(hh_free(h, big2), HH_OK);
        for (size_t i = 0; i < sh.count; i++) {
            if (sh.objs[i].pins) ck_assert_int_eq(hh_unpin(h, sh.objs[i].h), HH_OK);
            ck_assert_int_eq(hh_free(h, sh.objs[i].h), HH_OK);
        }
        hh_heap_stats_get(h, &st);
        ck_assert_uint_eq(st.live_blocks, 0);
        hh_shadow_fini(&sh);
        hh_heap_destroy(h);
        if (f == 0) break;
    }
    report_faults("heap workload", fired, runs + 1);
} END_TEST

/* bugs.md 2026-12-02 (fixed since): a forged handle whose upper 40 bits are zero
   must be rejected like any other (HH_E_STALE_HANDLE, one message). FUZZ_STRICT=0
   only reports it (as the fuzz harnesses do with their known bugs). */
START_TEST(forged_small_handle) {
    hh_test_capture_errors();
    hh_heap *h;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &h), HH_OK);
    hh_handle live = hh_alloc(h, 32);
    hh_handle forged = { 5 };
    hh_test_reset_captured();
    hh_status s = hh_free(h, forged);
    void *p = hh_deref(h, forged);
    bool ok = s == HH_E_STALE_HANDLE && p == NULL && hh_test_captured_count() == 2;
    const char *strict = getenv("FUZZ_STRICT");
    if (!ok) fprintf(stderr, "reliability: KNOWN BUG heap-forged-small-id: hh_free({5}) = %s, %u messages\n",
                     hh_status_str(s), hh_test_captured_count());
    if (!strict || *strict != '0') ck_assert_msg(ok, "forged handle {5} accepted");
    ck_assert_int_eq(hh_heap_check(h), HH_OK);
    ck_assert_ptr_nonnull(hh_deref(h, live));
    ck_assert_int_eq(hh_free(h, live), HH_OK);
    hh_heap_destroy(h);
} END_TEST

/* ---------------------------------------------------------------------------
   Binned allocator under faults (spans, large mappings, thread-cache slabs)
--------------------------------------------------------------------------- */
typedef struct bblock { unsigned char *p; size_t size; uint64_t key; } bblock;

START_TEST(binned_faults) {
    hh_test_capture_errors();
    hh_binned_thread_flush();
    size_t base_bytes;
    size_t base_leaks = hh_binned_leak_report(NULL, NULL, &base_bytes);
    unsigned long fired = 0;
    unsigned n, runs = 0;
    enum { KEEP = 24 };
    for (n = 0;; n++, runs++) {
        bblock keep[KEEP];
        for (unsigned i = 0; i < KEEP; i++) {                 /* live blocks made before the fault */
            keep[i].size = 16 + (size_t)i * 911 % 20000;
            keep[i].p = hh_bmalloc(keep[i].size);
            ck_assert_ptr_nonnull(keep[i].p);
            keep[i].key = 77 + i + n * 1000;
            hh_test_fill(keep[i].p, keep[i].size, keep[i].key);
        }
        hh_test_reset_captured();
        hh_test_fail_after(n);
        void *large = hh_bmalloc(300000);                         /* OS mapping */
        void *aligned = hh_bmemalign((size_t)1 << 20, 5000);      /* OS mapping, big alignment */
        void *zeroed = hh_bcalloc(1000, 40);                      /* a bin of a class maybe never used */
        void *grown = hh_brealloc(keep[0].p, 200000);             /* small -> large: copy */
        unsigned f = hh_test_fail_count();
        hh_test_fail_after(-1);
        fired += f;
        unsigned fails = (large == NULL) + (aligned == NULL) + (zeroed == NULL) + (grown == NULL);
        ck_assert_uint_eq(hh_test_captured_count(), fails);                      /* F1 */
        if (fails) ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
        if (grown != NULL) { keep[0].p = grown; }                                 /* contents kept: checked below */
        if (zeroed != NULL) for (size_t i = 0; i < 40000; i++) ck_assert_uint_eq(((unsigned char *)zeroed)[i], 0);
        ck_assert_int_eq(hh_binned_check(), HH_OK);                              /* F2 */
        for (unsigned i = 0; i < KEEP; i++)                                       /* F3 */
            ck_assert_msg(hh_test_verify(keep[i].p, keep[i].size, keep[i].key) < 0, "binned block %u changed", i);
        hh_bfree(large);
        hh_bfree(aligned);
        hh_bfree(zeroed);
        for (unsigned i = 0; i < KEEP; i++) hh_bfree(keep[i].p);
        ck_assert_uint_eq(hh_test_captured_count(), fails);                      /* the frees were clean */
        if (f == 0) break;
    }
    hh_binned_thread_flush();
    size_t bytes;
    ck_assert_uint_eq(hh_binned_leak_report(NULL, NULL, &bytes), base_leaks);   /* F4 */
    ck_assert_uint_eq(bytes, base_bytes);
    ck_assert_int_eq(hh_binned_check(), HH_OK);
    report_faults("binned", fired, runs + 1);
} END_TEST

/* A fresh thread (a new thread cache) allocating from many classes while the
   n-th seam call fails: failures are NULL + HH_E_NO_MEMORY in that thread, its
   other blocks stay intact, and nothing is left behind when it exits. */
typedef struct bf_thread { unsigned fails, wrong_status, corrupt, allocated; } bf_thread;

static void *bf_main(void *arg) {
    bf_thread *r = arg;
    enum { N = 160 };
    static _Thread_local unsigned char *blocks[N];
    for (unsigned i = 0; i < N; i++) {
        size_t size = hh_binned_class_size((int)(i % HH_BINNED_CLASS_COUNT)) - (i % 5);
        hh_clear_last_error();
        blocks[i] = hh_bmalloc(size);
        if (blocks[i] == NULL) {
            r->fails++;
            if (hh_last_error() != HH_E_NO_MEMORY) r->wrong_status++;
            continue;
        }
        r->allocated++;
        hh_test_fill(blocks[i], size, i + 5);
    }
    for (unsigned i = 0; i < N; i++) {
        size_t size = hh_binned_class_size((int)(i % HH_BINNED_CLASS_COUNT)) - (i % 5);
        if (blocks[i] && hh_test_verify(blocks[i], size, i + 5) >= 0) r->corrupt++;
        hh_bfree(blocks[i]);
    }
    return NULL;                                  /* thread exit flushes its cache */
}

static atomic_ulong bf_messages;
static void bf_on_error(hh_status st, const char *message, void *user) {
    (void)st; (void)message; (void)user;
    atomic_fetch_add(&bf_messages, 1);
}

START_TEST(binned_thread_faults) {
    hh_binned_thread_flush();
    size_t base_bytes, base_leaks = hh_binned_leak_report(NULL, NULL, &base_bytes);
    hh_set_error_handler(bf_on_error, NULL);
    unsigned long fired = 0;
    unsigned n, runs = 0;
    for (n = 0;; n++, runs++) {
        bf_thread r = {0};
        atomic_store(&bf_messages, 0);
        hh_binned_trim(0);                        /* give pages back so the thread must map again */
        hh_test_fail_after(n);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, bf_main, &r), 0);
        pthread_join(t, NULL);
        unsigned f = hh_test_fail_count();
        hh_test_fail_after(-1);
        fired += f;
        ck_assert_uint_eq(r.wrong_status, 0);                                    /* F1 */
        ck_assert_uint_eq(atomic_load(&bf_messages), r.fails);
        ck_assert_uint_eq(r.corrupt, 0);                                         /* F3 */
        ck_assert_int_eq(hh_binned_check(), HH_OK);                              /* F2 */
        if (f == 0) {
            ck_assert_uint_eq(r.fails, 0);
            break;
        }
        if (n > 200) break;                       /* bounded: the countdown outlives the thread's calls */
    }
    hh_test_capture_errors();
    hh_binned_thread_flush();
    size_t bytes;
    ck_assert_uint_eq(hh_binned_leak_report(NULL, NULL, &bytes), base_leaks);   /* F4 */
    ck_assert_uint_eq(bytes, base_bytes);
    report_faults("binned new thread", fired, runs + 1);
} END_TEST

/* ---------------------------------------------------------------------------
   Linear allocators under faults
--------------------------------------------------------------------------- */
START_TEST(memstack_faults) {
    hh_test_capture_errors();
    unsigned long fired = 0;
    unsigned n, runs = 0;
    enum { BLOCKS = 40 };
    for (n = 0;; n++, runs++) {
        hh_test_reset_captured();
        hh_test_fail_after(n);
        hh_memstack *ms = NULL;
        hh_status cs = hh_memstack_create(NULL, &ms);
        unsigned calls_failed = cs != HH_OK;
        unsigned char *blk[BLOCKS] = {0};
        size_t sz[BLOCKS];
        hh_mark m;
        if (cs == HH_OK) {
            hh_mark_push(ms, &m);
            for (unsigned i = 0; i < BLOCKS; i++) {
                sz[i] = (i % 7 == 6) ? 100000 + i : 24 + (size_t)i * 523 % 9000;   /* some oversize chunks */
                blk[i] = hh_memstack_alloc(ms, sz[i], (size_t)8 << (i % 4));
                if (blk[i] == NULL) {
                    calls_failed++;
                    ck_assert_int_eq(hh_last_error(), HH_E_NO_MEMORY);
                    continue;
                }
                hh_test_fill(blk[i], sz[i], i + 1);
            }
        } else {
            ck_assert_int_eq(cs, HH_E_NO_MEMORY);
        }
        unsigned f = hh_test_fail_count();
        hh_test_fail_after(-1);
        fired += f;
        ck_assert_uint_eq(hh_test_captured_count(), calls_failed);               /* F1 */
        if (calls_failed) ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
        if (ms != NULL) {
            ck_assert_int_eq(hh_memstack_check(ms), HH_OK);                      /* F2 */
            for (unsigned i = 0; i < BLOCKS; i++)                                 /* F3 */
                if (blk[i]) ck_assert_msg(hh_test_verify(blk[i], sz[i], i + 1) < 0, "memstack block %u changed", i);
            ck_assert_int_eq(hh_mark_pop(&m), HH_OK);
            ck_assert_int_eq(hh_memstack_check(ms), HH_OK);
            hh_memstack_destroy(ms);
        }
        if (f == 0) break;
    }
    hh_pagepool_trim(0);
    report_faults("memstack", fired, runs + 1);
} END_TEST

/* Creation of every other linear allocator, each seam call failing in turn. */
START_TEST(linear_create_faults) {
    hh_test_capture_errors();
    unsigned long fired = 0;
    unsigned runs = 0;
    for (int kind = 0; kind < 6; kind++) {
        for (unsigned n = 0;; n++, runs++) {
            hh_test_reset_captured();
            hh_test_fail_after(n);
            hh_status s = HH_OK;
            void *obj = NULL, *a = NULL;
            switch (kind) {
            case 0: { hh_pool *p = NULL; s = hh_pool_create(&(hh_pool_desc){ .elem_size = 48, .capacity = 500 }, &p);
                      if (p) { a = hh_pool_alloc(p); ck_assert_int_eq(hh_pool_free(p, a), HH_OK); hh_pool_destroy(p); obj = p; } break; }
            case 1: { hh_stack *p = NULL; s = hh_stack_create(&(hh_stack_desc){ .capacity = 1u << 16 }, &p);
                      if (p) { a = hh_stack_alloc(p, 100, 16); hh_stack_destroy(p); obj = p; } break; }
            case 2: { hh_dstack *p = NULL; s = hh_dstack_create(&(hh_stack_desc){ .capacity = 1u << 16 }, &p);
                      if (p) { a = hh_dstack_alloc(p, HH_DSTACK_HIGH, 100, 16); hh_dstack_destroy(p); obj = p; } break; }
            case 3: { hh_frame *p = NULL; s = hh_frame_create(&(hh_frame_desc){ .capacity = 1u << 16 }, &p);
                      if (p) { a = hh_frame_alloc(p, 100, 16); hh_frame_destroy(p); obj = p; } break; }
            case 4: { hh_dframe *p = NULL; s = hh_dframe_create(&(hh_frame_desc){ .capacity = 1u << 16 }, &p);
                      if (p) { a = hh_dframe_alloc(p, 100, 16); hh_dframe_swap(p); hh_dframe_destroy(p); obj = p; } break; }
            default: { hh_scratch *p = NULL; s = hh_scratch_create(&(hh_scratch_desc){ .initial_bytes = 4096 }, &p);
                      if (p) { a = hh_scratch_alloc(p, 100000, 64); hh_scratch_reset(p); hh_scratch_destroy(p); obj = p; } break; }
            }
            unsigned f = hh_test_fail_count();
            hh_test_fail_after(-1);
            fired += f;
            if (obj == NULL) {
                ck_assert_int_eq(s, HH_E_NO_MEMORY);                             /* F1 */
                ck_assert_uint_eq(hh_test_captured_count(), 1);
            } else if (a == NULL) {                   /* created, then the allocation hit the fault */
                ck_assert_uint_eq(hh_test_captured_count(), 1);
                ck_assert_int_eq(hh_test_last_captured(), HH_E_NO_MEMORY);
            } else {
                ck_assert_uint_eq(hh_test_captured_count(), 0);
            }
            if (f == 0) {
                ck_assert_ptr_nonnull(obj);
                break;
            }
        }
    }
    report_faults("linear create", fired, runs + 6);
} END_TEST

/* ---------------------------------------------------------------------------
   Heap-map dump (writer and reader) under faults
--------------------------------------------------------------------------- */
/* Writes a 6-frame dump of a changing heap with the n-th seam call failing,
   then reads it back (no fault): every frame the writer accepted must read
   back, and a failed write_frame leaves a file the reader still understands. */
START_TEST(mapdump_faults) {
    hh_test_capture_errors();
    unsigned long fired = 0;
    unsigned n, runs = 0;
    char path[] = "/tmp/hh-rel-mapdump-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (n = 0;; n++, runs++) {
        hh_heap *h;
        ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 16 }, &h), HH_OK);
        hh_handle hs[64];
        for (unsigned i = 0; i < 64; i++) hs[i] = hh_alloc(h, 40 + i * 8);
        hh_test_reset_captured();
        hh_test_fail_after(n);
        hh_mapdump_writer *w = NULL;
        hh_status s = hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = h, .flags = HH_MAPDUMP_BINNED, .label = "faults" }, &w);
        unsigned failed = s != HH_OK, written = 0;
        if (s != HH_OK) {
            ck_assert_int_eq(s, HH_E_NO_MEMORY);                                 /* F1 */
            ck_assert_ptr_null(w);
        } else {
            for (unsigned f = 0; f < 6; f++) {
                hh_free(h, hs[f * 3]);
                hs[f * 3] = HH_NULL;
                hh_defrag_report r = hh_defrag_step(h, 2);
                hh_status ws = hh_mapdump_write_frame(w, f, &r);
                if (ws == HH_OK) written++;
                else {
                    ck_assert_int_eq(ws, HH_E_NO_MEMORY);
                    failed++;
                }
            }
        }
        unsigned f = hh_test_fail_count();
        hh_test_fail_after(-1);
        fired += f;
        ck_assert_uint_eq(hh_test_captured_count(), failed);                    /* F1: one message each */
        ck_assert_int_eq(hh_heap_check(h), HH_OK);                               /* F2 */
        if (w != NULL) ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
        if (s == HH_OK) {                                                         /* read back, no fault */
            hh_mapdump_reader *rd;
            ck_assert_int_eq(hh_mapdump_open(path, &rd), HH_OK);
            const hh_mapdump_frame *fr;
            unsigned frames = 0;
            while (hh_mapdump_next(rd, &fr) == HH_OK && fr != NULL) frames++;
            ck_assert_uint_eq(frames, written);
            ck_assert_uint_eq(hh_mapdump_frames_written(rd), written);
            hh_mapdump_reader_close(rd);
            /* and the reader itself under the same fault */
            hh_test_reset_captured();
            hh_test_fail_after(n);
            hh_status os = hh_mapdump_open(path, &rd);
            unsigned rfail = 0;
            if (os == HH_OK) {
                hh_status ns;
                while ((ns = hh_mapdump_next(rd, &fr)) == HH_OK && fr != NULL) {}
                if (ns != HH_OK) { ck_assert_int_eq(ns, HH_E_NO_MEMORY); rfail = 1; }
            } else {
                ck_assert_int_eq(os, HH_E_NO_MEMORY);
                rfail = 1;
            }
            fired += hh_test_fail_count();
            hh_test_fail_after(-1);
            ck_assert_uint_eq(hh_test_captured_count(), rfail);
            if (os == HH_OK) hh_mapdump_reader_close(rd);
        }
        for (unsigned i = 0; i < 64; i++) ck_assert_int_eq(hh_free(h, hs[i]), HH_OK);
        hh_heap_destroy(h);
        if (f == 0) break;
    }
    unlink(path);
    report_faults("mapdump write + read", fired, runs + 1);
} END_TEST

/* ---------------------------------------------------------------------------
   Concurrency: one HH_HEAP_THREADSAFE heap, THREADS threads, frames
--------------------------------------------------------------------------- */
enum { THREADS = 4, OBJS_PER_THREAD = 48 };

typedef struct tobj {
    hh_handle h;
    size_t    size;
    uint64_t  key;
    unsigned char *pinned_at;   /* non-NULL while this thread holds one pin */
} tobj;

typedef struct mt_ctx {
    hh_heap          *heap;
    pthread_barrier_t barrier;
    unsigned          frames;
    atomic_ulong      ops;
    atomic_ulong      moves;
    atomic_int        failed;
    char              why[256];
    pthread_mutex_t   why_lock;
} mt_ctx;

/* The error handler runs on the failing thread: the threaded tests count
   messages atomically (test_util's capture handler is single-threaded). */
static atomic_ulong mt_errors, mt_pinned_errors;
static void mt_on_error(hh_status st, const char *message, void *user) {
    (void)message; (void)user;
    atomic_fetch_add(&mt_errors, 1);
    if (st == HH_E_PINNED) atomic_fetch_add(&mt_pinned_errors, 1);
}

typedef struct mt_thread { mt_ctx *c; unsigned idx; tobj objs[OBJS_PER_THREAD]; unsigned count; } mt_thread;

static void mt_fail(mt_ctx *c, const char *fmt, unsigned idx, long a, long b) {
    pthread_mutex_lock(&c->why_lock);
    if (!atomic_load(&c->failed)) {
        snprintf(c->why, sizeof c->why, fmt, idx, a, b);
        atomic_store(&c->failed, 1);
    }
    pthread_mutex_unlock(&c->why_lock);
}

/* Reads every object of the thread (via deref, or its pin) against its pattern. */
static void mt_verify(mt_thread *t, bool deref_allowed) {
    for (unsigned i = 0; i < t->count; i++) {
        tobj *o = &t->objs[i];
        unsigned char *p;
        if (o->pinned_at) p = o->pinned_at;
        else if (deref_allowed) p = hh_deref(t->c->heap, o->h);
        else continue;
        if (p == NULL) { mt_fail(t->c, "thread %u: object %ld lost (%ld)", t->idx, (long)i, 0); return; }
        long bad = hh_test_verify(p, o->size, o->key);
        if (bad >= 0) { mt_fail(t->c, "thread %u: object %ld byte %ld corrupt", t->idx, (long)i, bad); return; }
    }
}

static void mt_work_phase(mt_thread *t, hh_rng *r, unsigned ops) {
    hh_heap *heap = t->c->heap;
    for (unsigned k = 0; k < ops; k++) {
        uint32_t what = hh_rng_below(r, 10);
        tobj *o = t->count ? &t->objs[hh_rng_below(r, t->count)] : NULL;
        if (what < 3 || o == NULL) {                                  /* alloc */
            if (t->count == OBJS_PER_THREAD) continue;
            size_t size = 8 + hh_rng_below(r, what == 0 ? 4000 : 300);
            hh_handle h = hh_alloc_ex(heap, size, (size_t)16 << hh_rng_below(r, 3), t->idx);
            if (hh_is_null(h)) { mt_fail(t->c, "thread %u: alloc of %ld failed (%ld)", t->idx, (long)size, hh_last_error()); return; }
            tobj *n = &t->objs[t->count++];
            *n = (tobj){ .h = h, .size = size, .key = hh_rng_next(r) };
            hh_test_fill(hh_deref(heap, h), size, n->key);
        } else if (what < 5) {                                        /* free */
            if (o->pinned_at) { if (hh_unpin(heap, o->h) != HH_OK) mt_fail(t->c, "thread %u: unpin %ld %ld", t->idx, 0, 0); }
            if (hh_free(heap, o->h) != HH_OK) { mt_fail(t->c, "thread %u: free failed %ld %ld", t->idx, 0, 0); return; }
            *o = t->objs[--t->count];
        } else if (what == 5) {                                       /* resize */
            size_t ns = 8 + hh_rng_below(r, 2000);
            hh_status s = hh_resize(heap, o->h, ns);
            if (s == HH_E_PINNED && o->pinned_at) continue;
            if (s != HH_OK) { mt_fail(t->c, "thread %u: resize to %ld: %ld", t->idx, (long)ns, s); return; }
            unsigned char *p = hh_deref(heap, o->h);
            size_t keep = o->size < ns ? o->size : ns;
            long bad = hh_test_verify(p, keep, o->key);
            if (bad >= 0) { mt_fail(t->c, "thread %u: resize lost byte %ld of %ld", t->idx, bad, (long)keep); return; }
            o->size = ns;
            hh_test_fill(p, ns, o->key);
        } else if (what == 6) {                                       /* pin / unpin */
            if (o->pinned_at) {
                if (hh_unpin(heap, o->h) != HH_OK) { mt_fail(t->c, "thread %u: unpin failed %ld %ld", t->idx, 0, 0); return; }
                o->pinned_at = NULL;
            } else {
                o->pinned_at = hh_pin(heap, o->h);
                if (o->pinned_at == NULL) { mt_fail(t->c, "thread %u: pin failed %ld %ld", t->idx, 0, 0); return; }
            }
        } else {                                                      /* deref, check, rewrite */
            unsigned char *p = hh_deref(heap, o->h);
            if (p == NULL || hh_test_verify(p, o->size, o->key) >= 0) {
                mt_fail(t->c, "thread %u: object %ld bad on deref (%ld)", t->idx, (long)(o - t->objs), 0); return;
            }
            o->key = hh_rng_next(r);
            hh_test_fill(p, o->size, o->key);
        }
        atomic_fetch_add(&t->c->ops, 1);
    }
}

/* While thread 0 defrags, the others only allocate-and-pin, free, and read
   through pins: no unpinned pointer is used. */
static void mt_defrag_phase_other(mt_thread *t, hh_rng *r) {
    hh_heap *heap = t->c->heap;
    for (unsigned k = 0; k < 6; k++) {
        if (hh_rng_below(r, 2) == 0 && t->count < OBJS_PER_THREAD) {
            size_t size = 8 + hh_rng_below(r, 500);
            hh_handle h = hh_alloc(heap, size);
            if (hh_is_null(h)) { mt_fail(t->c, "thread %u: alloc in defrag phase %ld %ld", t->idx, 0, 0); return; }
            unsigned char *p = hh_pin(heap, h);
            if (p == NULL) { mt_fail(t->c, "thread %u: pin of a fresh block %ld %ld", t->idx, 0, 0); return; }
            tobj *n = &t->objs[t->count++];
            *n = (tobj){ .h = h, .size = size, .key = hh_rng_next(r), .pinned_at = p };
            hh_test_fill(p, size, n->key);
        } else if (t->count) {
            tobj *o = &t->objs[hh_rng_below(r, t->count)];
            if (o->pinned_at) continue;
            if (hh_free(heap, o->h) != HH_OK) { mt_fail(t->c, "thread %u: free in defrag phase %ld %ld", t->idx, 0, 0); return; }
            *o = t->objs[--t->count];
        }
        atomic_fetch_add(&t->c->ops, 1);
    }
    mt_verify(t, false);
}

static void *mt_main(void *arg) {
    mt_thread *t = arg;
    mt_ctx *c = t->c;
    hh_rng r = hh_rng_make(hh_test_seed(0xC0FFEE) + t->idx);
    for (unsigned f = 0; f < c->frames && !atomic_load(&c->failed); f++) {
        mt_verify(t, true);
        mt_work_phase(t, &r, 40);
        pthread_barrier_wait(&c->barrier);                 /* frame boundary: nobody holds unpinned pointers */
        if (t->idx == 0) {
            hh_defrag_report rep = hh_defrag_step(c->heap, 8);
            atomic_fetch_add(&c->moves, rep.moves);
            if ((f & 15) == 0) hh_defrag_set_policy(c->heap, (hh_defrag_policy)(f / 16 % 3));
            if ((f & 7) == 0 && hh_heap_check(c->heap) != HH_OK) mt_fail(c, "thread %u: heap check failed (frame %ld) %ld", 0, f, 0);
        } else {
            mt_defrag_phase_other(t, &r);
        }
        pthread_barrier_wait(&c->barrier);                 /* defrag done: deref again */
    }
    mt_verify(t, true);
    for (unsigned i = 0; i < t->count; i++) {
        if (t->objs[i].pinned_at) hh_unpin(c->heap, t->objs[i].h);
        if (hh_free(c->heap, t->objs[i].h) != HH_OK) mt_fail(c, "thread %u: final free %ld %ld", t->idx, i, 0);
    }
    t->count = 0;
    return NULL;
}

START_TEST(threadsafe_heap_frames) {
    atomic_store(&mt_errors, 0);
    atomic_store(&mt_pinned_errors, 0);
    hh_set_error_handler(mt_on_error, NULL);
    static mt_ctx c;
    static mt_thread th[THREADS];
    memset(&c, 0, sizeof c);
    c.frames = hh_test_scaled(300, 20);
    pthread_mutex_init(&c.why_lock, NULL);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 8u << 20,
                                                    .flags = HH_HEAP_THREADSAFE | HH_HEAP_NO_AUTO_COMPACT }, &c.heap), HH_OK);
    ck_assert_int_eq(pthread_barrier_init(&c.barrier, NULL, THREADS), 0);
    pthread_t tid[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        th[i] = (mt_thread){ .c = &c, .idx = i };
        ck_assert_int_eq(pthread_create(&tid[i], NULL, mt_main, &th[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) pthread_join(tid[i], NULL);
    hh_test_capture_errors();
    ck_assert_msg(!atomic_load(&c.failed), "%s", c.why);
    /* The only expected failures: resizes of pinned blocks that had to move. */
    ck_assert_uint_eq(atomic_load(&mt_errors), atomic_load(&mt_pinned_errors));
    ck_assert_int_eq(hh_heap_check(c.heap), HH_OK);
    hh_heap_stats st;
    hh_heap_stats_get(c.heap, &st);
    ck_assert_uint_eq(st.live_blocks, 0);
    ck_assert_uint_gt(atomic_load(&c.moves), 0);
    fprintf(stderr, "reliability: threadsafe heap: %u threads, %u frames, %lu operations, %lu moves by defrag\n",
            THREADS, c.frames, atomic_load(&c.ops), atomic_load(&c.moves));
    pthread_barrier_destroy(&c.barrier);
    pthread_mutex_destroy(&c.why_lock);
    hh_heap_destroy(c.heap);
} END_TEST

/* ---------------------------------------------------------------------------
   Concurrency: binned churn with thread creation and exit, cross-thread frees
--------------------------------------------------------------------------- */
enum { XCHG = 256, WAVE_THREADS = 6 };

typedef struct bx {
    pthread_mutex_t lock;
    bblock          slot[XCHG];     /* blocks handed between threads (p NULL: empty) */
    atomic_ulong    ops;
    atomic_int      failed;
    unsigned        ops_per_thread;
} bx;

static void *bx_main(void *arg) {
    bx *x = arg;
    static atomic_uint seed_ctr;
    hh_rng r = hh_rng_make(hh_test_seed(0xB1) * 131 + atomic_fetch_add(&seed_ctr, 1));
    bblock mine[32] = {{0}};
    for (unsigned k = 0; k < x->ops_per_thread && !atomic_load(&x->failed); k++) {
        unsigned i = hh_rng_below(&r, 32);
        if (mine[i].p) {
            if (hh_test_verify(mine[i].p, mine[i].size, mine[i].key) >= 0) { atomic_store(&x->failed, 1); break; }
            if (hh_rng_below(&r, 2)) {                       /* hand it to whoever comes next */
                unsigned s = hh_rng_below(&r, XCHG);
                pthread_mutex_lock(&x->lock);
                bblock old = x->slot[s];
                x->slot[s] = mine[i];
                pthread_mutex_unlock(&x->lock);
                mine[i] = old;                               /* adopt what was there (maybe another thread's) */
                if (mine[i].p && hh_test_verify(mine[i].p, mine[i].size, mine[i].key) >= 0) { atomic_store(&x->failed, 2); break; }
            } else {
                hh_bfree(mine[i].p);
                mine[i].p = NULL;
            }
        } else {
            size_t size = hh_rng_below(&r, 8) == 0 ? 33000 + hh_rng_below(&r, 60000) : 1 + hh_rng_below(&r, 2048);
            mine[i].p = hh_rng_below(&r, 4) ? hh_bmalloc(size) : hh_bcalloc(1, size);
            if (mine[i].p == NULL) { atomic_store(&x->failed, 3); break; }
            mine[i].size = size;
            mine[i].key = hh_rng_next(&r);
            hh_test_fill(mine[i].p, size, mine[i].key);
        }
        atomic_fetch_add(&x->ops, 1);
    }
    for (unsigned i = 0; i < 32; i++) hh_bfree(mine[i].p);
    return NULL;                                             /* thread exit flushes its cache */
}

START_TEST(binned_thread_churn) {
    atomic_store(&mt_errors, 0);
    hh_set_error_handler(mt_on_error, NULL);
    hh_binned_thread_flush();
    size_t base_bytes, base = hh_binned_leak_report(NULL, NULL, &base_bytes);
    static bx x;
    memset(&x, 0, sizeof x);
    pthread_mutex_init(&x.lock, NULL);
    x.ops_per_thread = hh_test_scaled(3000, 300);
    unsigned waves = hh_test_scaled(12, 3);
    for (unsigned w = 0; w < waves; w++) {
        pthread_t tid[WAVE_THREADS];
        for (unsigned i = 0; i < WAVE_THREADS; i++) ck_assert_int_eq(pthread_create(&tid[i], NULL, bx_main, &x), 0);
        for (unsigned i = 0; i < WAVE_THREADS; i++) pthread_join(tid[i], NULL);
        ck_assert_msg(!atomic_load(&x.failed), "binned churn failed (%d) in wave %u", atomic_load(&x.failed), w);
        ck_assert_uint_eq(atomic_load(&mt_errors), 0);
        ck_assert_int_eq(hh_binned_check(), HH_OK);
    }
    for (unsigned s = 0; s < XCHG; s++) {                    /* blocks of threads long gone */
        if (x.slot[s].p) ck_assert_int_lt(hh_test_verify(x.slot[s].p, x.slot[s].size, x.slot[s].key), 0);
        hh_bfree(x.slot[s].p);
    }
    hh_binned_thread_flush();
    size_t bytes;
    ck_assert_uint_eq(hh_binned_leak_report(NULL, NULL, &bytes), base);
    ck_assert_uint_eq(bytes, base_bytes);
    ck_assert_uint_eq(atomic_load(&mt_errors), 0);
    hh_test_capture_errors();
    fprintf(stderr, "reliability: binned churn: %u waves x %u threads, %lu operations\n", waves, WAVE_THREADS,
            atomic_load(&x.ops));
    pthread_mutex_destroy(&x.lock);
} END_TEST

/* ---------------------------------------------------------------------------
   fork while other threads hold the library's locks (issue 13 bug 3): the
   binned locks, the page pool lock and the error-handler flag are each taken
   in a loop by a thread of their own; every fork child must find all of them
   free (an alarm kills a child that blocks, and the test then fails).
--------------------------------------------------------------------------- */
static atomic_int fk_stop;

static void fk_quiet(hh_status s, const char *message, void *user) {
    (void)s;
    (void)message;
    (void)user;
}

static void *fk_pagepool(void *arg) {
    (void)arg;
    while (!atomic_load(&fk_stop)) {
        hh_memstack *ms = NULL;
        if (hh_memstack_create(NULL, &ms) != HH_OK) continue;
        for (int i = 0; i < 8; i++) (void)hh_memstack_alloc(ms, 40000, 16);
        hh_memstack_destroy(ms);
        hh_pagepool_trim(0);
    }
    return NULL;
}

static void *fk_binned(void *arg) {
    (void)arg;
    while (!atomic_load(&fk_stop)) {
        void *v[16];
        for (int i = 0; i < 16; i++) v[i] = hh_bmalloc(i == 0 ? 200000 : (size_t)(16 << (i % 11)));
        for (int i = 0; i < 16; i++) hh_bfree(v[i]);
        hh_binned_thread_flush();
        hh_binned_trim(0);
    }
    return NULL;
}

static void *fk_handler(void *arg) {
    (void)arg;
    int local = 0;
    while (!atomic_load(&fk_stop)) {
        hh_set_error_handler(fk_quiet, NULL);
        hh_bfree(&local);                       /* a report: reads the handler under its flag */
    }
    return NULL;
}

/* The two getters that are lock-free by contract -- hh_defrag_get_policy (the
   trace recorder calls it inside the event hook) and hh_trace_event_count --
   read while other threads set the policy (the first set creates the defrag
   state) and record events. TSan (make check-tsan) reported both before their
   fields were published atomically. */
typedef struct lf_ctx {
    hh_heap *heap;
    atomic_int stop;
} lf_ctx;
static void *lf_policy_setter(void *arg) {
    lf_ctx *c = arg;
    for (unsigned i = 0; !atomic_load(&c->stop) && i < 20000; i++)
        hh_defrag_set_policy(c->heap, (hh_defrag_policy)(i % 3));
    return NULL;
}
static void *lf_recorder(void *arg) {
    lf_ctx *c = arg;
    for (unsigned i = 0; !atomic_load(&c->stop) && i < 20000; i++) hh_free(c->heap, hh_alloc(c->heap, 64));
    return NULL;
}
START_TEST(lock_free_getters_race_their_writers) {
    char path[] = "/tmp/hh_lf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    lf_ctx c = { 0 };
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_THREADSAFE }, &c.heap), HH_OK);
    hh_trace *tr = NULL;
    ck_assert_int_eq(hh_trace_open(c.heap, path, &tr), HH_OK);
    pthread_t ts, tr_thread;
    ck_assert_int_eq(pthread_create(&ts, NULL, lf_policy_setter, &c), 0);
    ck_assert_int_eq(pthread_create(&tr_thread, NULL, lf_recorder, &c), 0);
    uint64_t last = 0;
    for (unsigned i = 0; i < 20000; i++) {
        ck_assert_uint_le((unsigned)hh_defrag_get_policy(c.heap), HH_DEFRAG_FILL);
        uint64_t n = hh_trace_event_count(tr);
        ck_assert_uint_ge(n, last);                      /* never goes back */
        last = n;
    }
    atomic_store(&c.stop, 1);
    pthread_join(ts, NULL);
    pthread_join(tr_thread, NULL);
    ck_assert_int_eq(hh_trace_close(tr), HH_OK);
    hh_heap_destroy(c.heap);
    unlink(path);
} END_TEST

START_TEST(fork_while_threads_hold_every_lock) {
    atomic_store(&fk_stop, 0);
    hh_set_error_handler(fk_quiet, NULL);
    void *(*fns[3])(void *) = { fk_pagepool, fk_binned, fk_handler };
    pthread_t t[3];
    for (int i = 0; i < 3; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, fns[i], NULL), 0);
    nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);   /* let the threads get going */
    unsigned forks = hh_test_scaled(40, 4), bad = 0;
    for (unsigned k = 0; k < forks; k++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            alarm(20);                           /* a child blocked on an inherited lock dies */
            int ok = 1;
            hh_set_error_handler(fk_quiet, NULL);
            hh_memstack *ms = NULL;
            if (hh_memstack_create(NULL, &ms) != HH_OK || hh_memstack_alloc(ms, 100000, 16) == NULL) ok = 0;
            hh_memstack_destroy(ms);
            hh_pagepool_trim(0);
            void *p = hh_bmalloc(100), *q = hh_bmalloc(300000);
            if (p == NULL || q == NULL) ok = 0;
            hh_bfree(p);
            hh_bfree(q);
            hh_binned_trim(0);
            if (hh_binned_check() != HH_OK) ok = 0;
            hh_test_child_exit(ok ? 0 : 3);
        }
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
    }
    atomic_store(&fk_stop, 1);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    hh_test_capture_errors();
    ck_assert_msg(bad == 0, "%u of %u fork children blocked or failed", bad, forks);
} END_TEST

/* ---------------------------------------------------------------------------
   hh_deref of stale handles, lock-free, while another thread allocates and
   frees on an HH_HEAP_THREADSAFE heap (issue 13 bug 7): every such deref
   returns NULL, and under TSan (`make check-tsan`) the slot and high-water
   mark loads are race-free.
--------------------------------------------------------------------------- */
enum { SD_RING = 64 };
static struct {
    hh_heap *heap;
    _Atomic uint64_t ring[SD_RING];   /* ids of handles freed before they were published */
    atomic_int stop;
    atomic_ulong derefs, non_null;
    unsigned rounds;
} sd;

static void sd_quiet(hh_status s, const char *message, void *user) {
    (void)s;
    (void)message;
    (void)user;
}

static void *sd_churn(void *arg) {
    (void)arg;
    hh_handle live[32] = { { 0 } };
    for (unsigned r = 0; r < sd.rounds; r++) {
        unsigned k = r % 32;
        if (!hh_is_null(live[k])) hh_free(sd.heap, live[k]);
        live[k] = hh_alloc(sd.heap, 32 + (r % 7) * 16);       /* reuses freed slots, raises the mark */
        hh_handle h = hh_alloc(sd.heap, 48);
        if (hh_is_null(h)) continue;
        hh_free(sd.heap, h);
        atomic_store_explicit(&sd.ring[r % SD_RING], h.id, memory_order_release);
    }
    for (unsigned k = 0; k < 32; k++) hh_free(sd.heap, live[k]);
    atomic_store(&sd.stop, 1);
    return NULL;
}

static void *sd_deref(void *arg) {
    (void)arg;
    for (unsigned j = 0; !atomic_load(&sd.stop); j++) {
        hh_handle h = { atomic_load_explicit(&sd.ring[j % SD_RING], memory_order_acquire) };
        if (hh_is_null(h)) continue;
        atomic_fetch_add_explicit(&sd.derefs, 1, memory_order_relaxed);
        if (hh_deref(sd.heap, h) != NULL) atomic_fetch_add_explicit(&sd.non_null, 1, memory_order_relaxed);
    }
    return NULL;
}

START_TEST(stale_deref_races_alloc_and_free) {
    memset(&sd, 0, sizeof sd);
    hh_set_error_handler(sd_quiet, NULL);
    sd.rounds = hh_test_scaled(20000, 1000);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .flags = HH_HEAP_THREADSAFE }, &sd.heap),
                     HH_OK);
    pthread_t t[2];
    ck_assert_int_eq(pthread_create(&t[0], NULL, sd_churn, NULL), 0);
    ck_assert_int_eq(pthread_create(&t[1], NULL, sd_deref, NULL), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    hh_test_capture_errors();
    ck_assert_uint_eq(atomic_load(&sd.non_null), 0);     /* a freed handle never derefs to a block */
    ck_assert_int_eq(hh_heap_check(sd.heap), HH_OK);
    hh_heap_destroy(sd.heap);
} END_TEST

Suite *hh_test_reliability_suite(void) {
    Suite *s = suite_create("reliability");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, heap_create_faults);
    tcase_add_test(tc, heap_workload_faults);
    tcase_add_test(tc, forged_small_handle);
    tcase_add_test(tc, binned_faults);
    tcase_add_test(tc, binned_thread_faults);
    tcase_add_test(tc, memstack_faults);
    tcase_add_test(tc, linear_create_faults);
    tcase_add_test(tc, mapdump_faults);
    suite_add_tcase(s, tc);
    tc = tcase_create("concurrency");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, threadsafe_heap_frames);
    tcase_add_test(tc, binned_thread_churn);
    tcase_add_test(tc, fork_while_threads_hold_every_lock);
    tcase_add_test(tc, stale_deref_races_alloc_and_free);
    tcase_add_test(tc, lock_free_getters_race_their_writers);
    suite_add_tcase(s, tc);
    return s;
}
