/* tests/check_trace.c -- hh_trace recorder, reader and replay (include/hheap/trace.h) */
#include "hheap/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hheap.h"
#include "test_util.h"

static char path[64];
static hh_heap *heap;

static void setup(void) {
    hh_test_capture_errors();
    hh_test_reset_captured();
    strcpy(path, "/tmp/hh-check-trace-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20, .max_handles = 4096 }, &heap), HH_OK);
}

static void teardown(void) {
    if (heap) {
        ck_assert_int_eq(hh_heap_check(heap), HH_OK);
        hh_heap_destroy(heap);
        heap = NULL;
    }
    unlink(path);
}

/* ---------------------------------------------------------------------------
   Helpers
--------------------------------------------------------------------------- */
typedef struct block_list { hh_block_info *b; size_t n, cap; } block_list;

static void collect(const hh_block_info *b, void *user) {
    block_list *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->b = realloc(l->b, l->cap * sizeof *l->b);
        ck_assert_ptr_nonnull(l->b);
    }
    l->b[l->n++] = *b;
}

/* Every block of a and b: same offset, size, state and tag, in address order. */
static void assert_same_blocks(const hh_heap *a, const hh_heap *b) {
    block_list la = { 0 }, lb = { 0 };
    hh_heap_walk(a, collect, &la);
    hh_heap_walk(b, collect, &lb);
    ck_assert_uint_eq(la.n, lb.n);
    for (size_t i = 0; i < la.n; i++) {
        ck_assert_uint_eq(la.b[i].offset, lb.b[i].offset);
        ck_assert_uint_eq(la.b[i].size, lb.b[i].size);
        ck_assert_int_eq(la.b[i].state, lb.b[i].state);
        ck_assert_uint_eq(la.b[i].tag, lb.b[i].tag);
    }
    free(la.b);
    free(lb.b);
}

/* The shadow of the trace: what the test did, in order (successful calls only). */
typedef struct shadow_ev { hh_heap_event_kind kind; uint64_t handle; size_t size; uint32_t tag, moves; } shadow_ev;
typedef struct trace_shadow {
    shadow_ev *e;
    size_t n, cap;
    hh_defrag_policy policy, recorded;    /* set by the workload / last seen in the trace */
} trace_shadow;

static void shadow_add(trace_shadow *s, shadow_ev ev) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->e = realloc(s->e, s->cap * sizeof *s->e);
        ck_assert_ptr_nonnull(s->e);
    }
    s->e[s->n++] = ev;
}

/* A policy change appears in the trace just before the next event. */
static void shadow_push(trace_shadow *s, hh_heap_event_kind kind, hh_handle h, size_t size, uint32_t tag,
                        uint32_t moves) {
    if (s->policy != s->recorded) {
        shadow_add(s, (shadow_ev){ (hh_heap_event_kind)HH_TRACE_EV_POLICY, 0, 0, (uint32_t)s->policy, 0 });
        s->recorded = s->policy;
    }
    shadow_add(s, (shadow_ev){ kind, h.id, size, tag, moves });
}

/* A random workload on heap (alloc, alloc_ex, free, resize, pin, unpin, defrag
   steps under move/byte/time budgets, policy changes), recorded in the shadow.
   Every call succeeds (the heap is roomy, pinned blocks are not resized): a failed
   call that changed the heap would not be in the trace (see trace.h). */
static void random_workload(hh_heap *hp, unsigned ops, uint64_t seed, trace_shadow *sh, bool time_budgets) {
    enum { LIVE_MAX = 600 };
    hh_handle live[LIVE_MAX];
    unsigned pins[LIVE_MAX];
    size_t n = 0;
    hh_rng r = hh_rng_make(seed);
    for (unsigned i = 0; i < ops; i++) {
        uint32_t k = hh_rng_below(&r, 100);
        if (k < 40 && n < LIVE_MAX) {
            size_t size = 1 + hh_rng_below(&r, hh_rng_below(&r, 8) == 0 ? 4000 : 200);
            hh_handle h;
            uint32_t tag = 0;
            size_t align = 16;
            if (hh_rng_below(&r, 4) == 0) {
                align = (size_t)1 << hh_rng_below(&r, 9);
                tag = hh_rng_below(&r, 7);
                h = hh_alloc_ex(hp, size, align, tag);
            } else {
                h = hh_alloc(hp, size);
            }
            ck_assert_msg(!hh_is_null(h), "workload: allocation of %zu bytes failed", size);
            void *p = hh_deref(hp, h);
            ck_assert_ptr_nonnull(p);
            memset(p, (int)(i & 0xFF), size);
            shadow_push(sh, HH_EV_ALLOC, h, size, tag, 0);
            pins[n] = 0;
            live[n++] = h;
        } else if (k < 70 && n > 0) {
            size_t j = hh_rng_below(&r, (uint32_t)n);
            while (pins[j]) {
                ck_assert_int_eq(hh_unpin(hp, live[j]), HH_OK);
                shadow_push(sh, HH_EV_UNPIN, live[j], 0, 0, 0);
                pins[j]--;
            }
            ck_assert_int_eq(hh_free(hp, live[j]), HH_OK);
            shadow_push(sh, HH_EV_FREE, live[j], 0, 0, 0);
            live[j] = live[--n];
            pins[j] = pins[n];
        } else if (k < 78 && n > 0) {
            size_t j = hh_rng_below(&r, (uint32_t)n);
            size_t size = 1 + hh_rng_below(&r, 600);
            if (pins[j]) continue;
            ck_assert_int_eq(hh_resize(hp, live[j], size), HH_OK);
            shadow_push(sh, HH_EV_RESIZE, live[j], size, 0, 0);
        } else if (k < 84 && n > 0) {
            size_t j = hh_rng_below(&r, (uint32_t)n);
            if (pins[j] < 2 && hh_pin(hp, live[j])) {
                pins[j]++;
                shadow_push(sh, HH_EV_PIN, live[j], 0, 0, 0);
            }
        } else if (k < 88 && n > 0) {
            size_t j = hh_rng_below(&r, (uint32_t)n);
            if (pins[j]) {
                ck_assert_int_eq(hh_unpin(hp, live[j]), HH_OK);
                pins[j]--;
                shadow_push(sh, HH_EV_UNPIN, live[j], 0, 0, 0);
            }
        } else if (k < 90) {
            sh->policy = (hh_defrag_policy)hh_rng_below(&r, 3);
            hh_defrag_set_policy(hp, sh->policy);
        } else {
            hh_defrag_budget b = { .max_moves = hh_rng_below(&r, 6) };
            if (hh_rng_below(&r, 3) == 0) b.max_bytes = hh_rng_below(&r, 2000);
            if (time_budgets && hh_rng_below(&r, 2) == 0) b.max_ns = 1 + hh_rng_below(&r, 3000);
            hh_defrag_report rep = hh_defrag_step_ex(hp, &b);
            shadow_push(sh, HH_EV_DEFRAG_STEP, HH_NULL, 0, 0, rep.moves);
        }
        if (i % 64 == 0) ck_assert_int_eq(hh_heap_check(hp), HH_OK);
    }
}

/* Records a workload into `path`, then loads and replays it into a fresh heap:
   the log must match the shadow, the replay must reproduce every block. */
/* A heap made from the desc a trace recorded (hh_trace_desc). */
static hh_heap *fresh_heap_for(const hh_trace_log *log) {
    hh_heap_desc d;
    hh_trace_desc(&log->info, &d);
    hh_heap *fresh = NULL;
    ck_assert_int_eq(hh_heap_create(&d, &fresh), HH_OK);
    return fresh;
}

static void record_and_replay(unsigned ops, uint64_t seed, bool time_budgets) {
    hh_heap_stats st0;
    hh_heap_stats_get(heap, &st0);                              /* moves before the open (T3) */
    hh_trace *tr = NULL;
    ck_assert_int_eq(hh_trace_open(heap, path, &tr), HH_OK);
    trace_shadow sh = { 0 };
    sh.policy = sh.recorded = hh_defrag_get_policy(heap);
    random_workload(heap, ops, seed, &sh, time_budgets);
    ck_assert_uint_eq(hh_trace_event_count(tr), sh.n);
    ck_assert_int_eq(hh_trace_close(tr), HH_OK);

    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    ck_assert_uint_eq(log->event_count, sh.n);
    for (size_t i = 0; i < sh.n; i++) {
        const hh_heap_event *e = &log->events[i].ev;
        ck_assert_int_eq(e->kind, sh.e[i].kind);
        if (e->kind == HH_EV_DEFRAG_STEP) {
            ck_assert_uint_eq(e->moves, sh.e[i].moves);
            continue;
        }
        if (e->kind == (hh_heap_event_kind)HH_TRACE_EV_POLICY) {
            ck_assert_uint_eq((uint32_t)log->events[i].policy, sh.e[i].tag);
            continue;
        }
        ck_assert_uint_eq(e->handle.id, sh.e[i].handle);
        if (e->kind == HH_EV_ALLOC || e->kind == HH_EV_RESIZE) ck_assert_uint_eq(e->size, sh.e[i].size);
        if (e->kind == HH_EV_ALLOC) ck_assert_uint_eq(e->tag, sh.e[i].tag);
    }
    hh_trace_summary orig;
    hh_trace_summarise(heap, &orig);
    orig.moves -= st0.total_moves;
    orig.bytes_moved -= st0.total_bytes_moved;
    ck_assert(hh_trace_summary_equal(&orig, &log->summary));
    ck_assert_uint_eq(log->info.capacity, 1u << 20);

    hh_heap *fresh = fresh_heap_for(log);
    hh_status st = hh_trace_replay(log, fresh, NULL, NULL);
    ck_assert_msg(st == HH_OK, "replay: %s: %s", hh_status_str(st), hh_test_last_message());
    ck_assert_int_eq(hh_heap_check(fresh), HH_OK);
    assert_same_blocks(heap, fresh);
    hh_trace_summary rep;
    hh_trace_summarise(fresh, &rep);
    ck_assert(hh_trace_summary_equal(&rep, &orig));
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
    free(sh.e);
}

static long file_size(const char *p) {
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static unsigned char *file_read(const char *p, long *n) {
    *n = file_size(p);
    unsigned char *buf = malloc((size_t)*n + 1);
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(buf, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return buf;
}

static void file_write(const char *p, const unsigned char *buf, long n) {
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

/* A small closed trace at `path`: a few allocations, frees and a defrag step. */
static void record_small(void) {
    hh_trace *tr = NULL;
    ck_assert_int_eq(hh_trace_open(heap, path, &tr), HH_OK);
    hh_handle h[8];
    for (int i = 0; i < 8; i++) h[i] = hh_alloc(heap, 100 + 10 * (size_t)i);
    for (int i = 0; i < 8; i += 2) hh_free(heap, h[i]);
    hh_defrag_step(heap, 2);
    ck_assert_int_eq(hh_trace_close(tr), HH_OK);
}

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---------------------------------------------------------------------------
   Tests: round trip
--------------------------------------------------------------------------- */
START_TEST(replay_random_workload) {
    record_and_replay(hh_test_scaled(20000, 800), hh_test_seed(7), false);
} END_TEST

START_TEST(replay_time_budgeted_steps) {
    /* With the deterministic defrag config (recorded in the trace) steps under a
       max_ns budget replay exactly. */
    ck_assert_int_eq(hh_defrag_configure(heap, &(hh_defrag_config){ .deterministic = true }), HH_OK);
    record_and_replay(hh_test_scaled(8000, 600), hh_test_seed(11), true);
} END_TEST

/* hh_defrag_full is recorded as itself and replays as itself (it was recorded
   as an unlimited step, replayed as one -- a different algorithm -- and the
   replay reported HH_E_CORRUPT for the library's own trace). */
START_TEST(full_compaction_replays_as_itself) {
    hh_trace *tr = NULL;
    ck_assert_int_eq(hh_trace_open(heap, path, &tr), HH_OK);
    hh_handle h[600];
    for (int i = 0; i < 600; i++) h[i] = hh_alloc(heap, 40 + (size_t)(i % 7) * 56);
    for (int i = 0; i < 600; i += 3) hh_free(heap, h[i]);
    hh_defrag_step(heap, 3);
    hh_defrag_report full = hh_defrag_full(heap);
    ck_assert_uint_gt(full.moves, 0);
    ck_assert_int_eq(hh_trace_close(tr), HH_OK);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    ck_assert_int_eq(log->events[log->event_count - 1].ev.kind, HH_EV_DEFRAG_FULL);
    ck_assert_uint_eq(log->events[log->event_count - 1].ev.moves, full.moves);
    hh_heap *fresh = fresh_heap_for(log);
    ck_assert_int_eq(hh_trace_replay(log, fresh, NULL, NULL), HH_OK);
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
} END_TEST

/* A heap used and emptied before the recording starts: its freed blocks wait
   in the heap's cache at their old places, and a replay on a fresh heap must
   still place every block where the recording did (it failed with
   HH_E_CORRUPT, "hash differs", before installing the hook merged the cache). */
START_TEST(recording_after_frees_replays) {
    hh_handle a[8];
    for (int i = 0; i < 8; i++) a[i] = hh_alloc(heap, 64);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(hh_free(heap, a[i]), HH_OK);
    hh_trace *tr = NULL;
    ck_assert_int_eq(hh_trace_open(heap, path, &tr), HH_OK);
    hh_handle b[5];
    for (int i = 0; i < 5; i++) b[i] = hh_alloc_ex(heap, 64, 16, (uint32_t)i + 1);
    ck_assert_int_eq(hh_free(heap, b[1]), HH_OK);
    ck_assert(!hh_is_null(hh_alloc(heap, 64)));
    ck_assert_int_eq(hh_trace_close(tr), HH_OK);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    hh_heap *fresh = fresh_heap_for(log);
    ck_assert_int_eq(hh_trace_replay(log, fresh, NULL, NULL), HH_OK);
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
} END_TEST

/* A growable heap that had grown before its trace was opened (and one
   opened with a commit of its own): the desc of the trace starts the fresh
   heap at the managed size recorded, so the blocks land at the same offsets.
   hh_trace_desc used to leave commit out: the fresh heap started at the
   default commit, and the replay differed (found by an adversarial pass). */
START_TEST(growable_heap_trace_replays_from_its_managed_size) {
    for (int k = 0; k < 2; k++) {
        hh_heap *g;
        hh_heap_desc d = { .capacity = 4u << 20, .flags = HH_HEAP_GROWABLE, .commit = k ? 16384 : 0 };
        ck_assert_int_eq(hh_heap_create(&d, &g), HH_OK);
        if (k == 0) {
            hh_handle big = hh_alloc(g, 1u << 20);             /* grows past the default commit */
            ck_assert_int_eq(hh_free(g, big), HH_OK);
        }
        size_t managed = hh_heap_managed_bytes(g);
        hh_trace *tr = NULL;
        ck_assert_int_eq(hh_trace_open(g, path, &tr), HH_OK);
        for (int i = 0; i < 40; i++) ck_assert(!hh_is_null(hh_alloc(g, 100 + 300 * (size_t)i)));
        ck_assert_int_eq(hh_trace_close(tr), HH_OK);
        hh_trace_log *log = NULL;
        ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
        ck_assert_uint_eq(log->info.managed_bytes, managed);
        hh_heap *fresh = fresh_heap_for(log);
        ck_assert_uint_eq(hh_heap_managed_bytes(fresh), managed);
        ck_assert_int_eq(hh_trace_replay(log, fresh, NULL, NULL), HH_OK);
        hh_heap_destroy(fresh);
        hh_trace_log_free(log);
        hh_heap_destroy(g);
    }
} END_TEST

START_TEST(empty_trace_round_trip) {
    hh_trace *tr = NULL;
    ck_assert_int_eq(hh_trace_open(heap, path, &tr), HH_OK);
    ck_assert_int_eq(hh_trace_close(tr), HH_OK);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    ck_assert_uint_eq(log->event_count, 0);
    ck_assert_uint_eq(log->summary.live_blocks, 0);
    hh_heap *fresh = fresh_heap_for(log);
    ck_assert_int_eq(hh_trace_replay(log, fresh, NULL, NULL), HH_OK);
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
} END_TEST

START_TEST(reopened_heap_counts_moves_from_open) {
    /* moves made before the trace opened are not part of the summary (T3) */
    hh_handle a = hh_alloc(heap, 64), b = hh_alloc(heap, 64);
    hh_free(heap, a);
    ck_assert_uint_eq(hh_defrag_full(heap).moves, 1);
    hh_free(heap, b);
    record_and_replay(hh_test_scaled(2000, 300), 3, false);
} END_TEST

static void count_fn(hh_heap *h, size_t i, void *user) {
    size_t *seen = user;
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(i, *seen);
    (*seen)++;
}

START_TEST(replay_callback_sees_every_event) {
    record_small();
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    ck_assert_uint_eq(log->event_count, 8 + 4 + 1);
    hh_heap *fresh = fresh_heap_for(log);
    size_t seen = 0;
    ck_assert_int_eq(hh_trace_replay(log, fresh, count_fn, &seen), HH_OK);
    ck_assert_uint_eq(seen, log->event_count);
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
} END_TEST

/* ---------------------------------------------------------------------------
   Tests: bad traces give clean errors
--------------------------------------------------------------------------- */
START_TEST(truncated_trace_is_corrupt) {
    record_small();
    long n;
    unsigned char *buf = file_read(path, &n);
    long cuts[] = { 0, 5, 47, 95, 96, 100, n / 2, n - 9, n - 1 };
    for (size_t i = 0; i < HH_ARRAY_LEN_T(cuts); i++) {
        file_write(path, buf, cuts[i]);
        hh_test_reset_captured();
        hh_trace_log *log = (hh_trace_log *)1;
        ck_assert_int_eq(hh_trace_load(path, &log), HH_E_CORRUPT);
        ck_assert_ptr_null(log);
        ck_assert_int_eq(hh_test_last_captured(), HH_E_CORRUPT);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
    }
    free(buf);
} END_TEST

START_TEST(flipped_byte_is_corrupt) {
    record_small();
    long n;
    unsigned char *buf = file_read(path, &n);
    for (long at = 0; at < n; at += 3) {
        buf[at] ^= 0x41;
        file_write(path, buf, n);
        buf[at] ^= 0x41;
        hh_trace_log *log = NULL;
        hh_test_reset_captured();
        ck_assert_int_eq(hh_trace_load(path, &log), HH_E_CORRUPT);
        ck_assert_ptr_null(log);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
    }
    file_write(path, buf, n);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);          /* the control: intact again */
    hh_trace_log_free(log);
    free(buf);
} END_TEST

START_TEST(unknown_version_and_missing_file) {
    record_small();
    long n;
    unsigned char *buf = file_read(path, &n);
    buf[8] = 99;                                                /* version field */
    uint64_t h = fnv(buf, (size_t)n - 8);
    for (int i = 0; i < 8; i++) buf[n - 8 + i] = (unsigned char)(h >> (8 * i));
    file_write(path, buf, n);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "version"));
    ck_assert_int_eq(hh_trace_load("/nonexistent-dir/none.hhtrace", &log), HH_E_IO);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_IO);
    ck_assert_int_eq(hh_trace_load(NULL, &log), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_trace_load(path, NULL), HH_E_INVALID_ARG);
    free(buf);
} END_TEST

/* Writes a trace to `path`: the header of a real one (record_small's, or of
   the trace a previous call wrote there), with `patch` (if any) copied over
   it at `at`, then the given event records, an end record counting
   `events`, an empty summary and the checksum. */
static void write_trace(const void *patch, size_t at, size_t patch_len, const unsigned char *ev, size_t ev_len,
                        unsigned events) {
    long n;
    unsigned char *buf = file_read(path, &n);
    if (n < 96) {
        free(buf);
        record_small();
        buf = file_read(path, &n);
    }
    unsigned char out[256];
    memcpy(out, buf, 96);                                       /* the real header */
    if (patch) memcpy(out + at, patch, patch_len);
    size_t k = 96;
    memcpy(out + k, ev, ev_len);
    k += ev_len;
    out[k++] = 0xFF;                                            /* end */
    out[k++] = (unsigned char)events;
    for (int i = 0; i < 1 + 8 + 8; i++) out[k++] = 0;           /* blocks, hash (8 bytes), 8 more varints */
    uint64_t h = fnv(out, k);
    for (int i = 0; i < 8; i++) out[k++] = (unsigned char)(h >> (8 * i));
    file_write(path, out, (long)k);
    free(buf);
}

START_TEST(well_formed_but_inconsistent_trace_fails_replay) {
    /* A trace with a valid checksum whose first event frees a handle it never
       allocated: load succeeds, replay stops with HH_E_CORRUPT at event 0. */
    static const unsigned char ev[] = { HH_EV_FREE, 0x05 };      /* handle id 5 */
    write_trace(NULL, 0, 0, ev, sizeof ev, 1);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    ck_assert_uint_eq(log->event_count, 1);
    hh_heap *fresh = fresh_heap_for(log);
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_replay(log, fresh, NULL, NULL), HH_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "event 0"));
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
} END_TEST

/* An operation the replay makes fails: one message, the replay's, quoting
   the operation's (the operation used to send its own as well: two). */
START_TEST(a_failed_replayed_operation_is_one_message) {
    static const unsigned char ev[] = { HH_EV_ALLOC, 0x05, 100, 0, 0,   /* handle 5, 100 bytes, align 0, tag 0 */
                                        HH_EV_UNPIN, 0x05 };             /* never pinned */
    write_trace(NULL, 0, 0, ev, sizeof ev, 2);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    hh_heap *fresh = fresh_heap_for(log);
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_replay(log, fresh, NULL, NULL), HH_E_CORRUPT);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "event 1"));
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "hh_unpin"));
    hh_heap_destroy(fresh);
    hh_trace_log_free(log);
} END_TEST

/* Records the heap never accepts -- an alignment that is no power of two, a
   threshold outside [0, 1] in the header, a stop threshold above the start
   once the defaults apply -- are corrupt at load (they used to load, and
   replay failed later, with two messages). */
START_TEST(records_the_heap_never_accepts_are_corrupt_at_load) {
    static const unsigned char ev[] = { HH_EV_ALLOC, 0x05, 100, 3, 0 };   /* align 3 */
    write_trace(NULL, 0, 0, ev, sizeof ev, 1);
    hh_trace_log *log = NULL;
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_load(path, &log), HH_E_CORRUPT);
    ck_assert_ptr_null(log);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "power of two"));
    double two = 2.0;                                           /* trigger_start_fragmentation, header offset 52 */
    static const unsigned char none[] = { HH_EV_FREE, 0x05 };
    write_trace(&two, 52, sizeof two, none, sizeof none, 1);      /* the header of the trace above */
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_load(path, &log), HH_E_CORRUPT);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "thresholds"));
    /* Each threshold in range, but stop above start once the zero start
       takes its default (0.10): hh_defrag_configure would refuse it. */
    unsigned char cfg[24] = { 0 };                              /* start 0, wasted 0, stop 0.5: offsets 52..75 */
    double half = 0.5;
    memcpy(cfg + 16, &half, sizeof half);
    write_trace(cfg, 52, sizeof cfg, none, sizeof none, 1);
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_load(path, &log), HH_E_CORRUPT);
    ck_assert_ptr_null(log);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "stop fragmentation above start"));
} END_TEST

START_TEST(replay_on_smaller_heap_diverges) {
    record_and_replay(hh_test_scaled(3000, 400), 5, false);
    hh_trace_log *log = NULL;
    ck_assert_int_eq(hh_trace_load(path, &log), HH_OK);
    hh_heap *small = NULL;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = HH_HEAP_MIN_CAPACITY, .max_handles = 4096 }, &small),
                     HH_OK);
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_replay(log, small, NULL, NULL), HH_E_CORRUPT);
    ck_assert_int_eq(hh_test_last_captured(), HH_E_CORRUPT);
    ck_assert_uint_eq(hh_test_captured_count(), 1);             /* the replay's, not the allocation's too */
    ck_assert_int_eq(hh_heap_check(small), HH_OK);
    hh_heap_destroy(small);
    hh_trace_log_free(log);
} END_TEST

/* ---------------------------------------------------------------------------
   Tests: argument checks and failures
--------------------------------------------------------------------------- */
START_TEST(open_rejects_bad_arguments) {
    hh_trace *tr = (hh_trace *)1;
    ck_assert_int_eq(hh_trace_open(NULL, path, &tr), HH_E_INVALID_ARG);
    ck_assert_ptr_null(tr);
    ck_assert_int_eq(hh_trace_open(heap, NULL, &tr), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_trace_open(heap, path, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_trace_open(heap, "/nonexistent-dir/x.hhtrace", &tr), HH_E_IO);
    ck_assert_ptr_null(tr);
    hh_handle h = hh_alloc(heap, 32);                          /* a failed open installed no hook */
    hh_test_reset_captured();
    ck_assert_int_eq(hh_trace_open(heap, path, &tr), HH_E_INVALID_ARG);   /* not empty */
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_int_eq(hh_free(heap, h), HH_OK);
    ck_assert_int_eq(hh_trace_close(NULL), HH_OK);
    ck_assert_uint_eq(hh_trace_event_count(NULL), 0);
    hh_heap *other = NULL;
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &other), HH_OK);
    hh_alloc(other, 16);
    hh_trace_log log = { 0 };
    ck_assert_int_eq(hh_trace_replay(&log, other, NULL, NULL), HH_E_INVALID_ARG);        /* not fresh */
    ck_assert_int_eq(hh_trace_replay(NULL, other, NULL, NULL), HH_E_INVALID_ARG);
    hh_heap_destroy(other);
} END_TEST

/* Every NULL object or out is reported once (naming the function) and an out
   given is cleared: these four were silent or left the out as it was. */
START_TEST(null_arguments_are_reported_once) {
    hh_test_reset_captured();
    ck_assert_uint_eq(hh_trace_event_count(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_trace_event_count");
    hh_trace_summary s;
    memset(&s, 0xAB, sizeof s);
    hh_trace_summarise(NULL, &s);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_trace_summarise");
    ck_assert_uint_eq(s.blocks, 0);
    ck_assert_uint_eq(s.walk_hash, 0);
    ck_assert(!hh_trace_summary_equal(NULL, &s));
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_trace_summary_equal");
    hh_heap_desc d;
    memset(&d, 0xAB, sizeof d);
    hh_trace_desc(NULL, &d);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_trace_desc");
    ck_assert_uint_eq(d.capacity, 0);
    ck_assert_ptr_null(d.memory);
    hh_defrag_config c;
    memset(&c, 0xAB, sizeof c);
    hh_defrag_config_get(NULL, &c);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_defrag_config_get");
    ck_assert_uint_eq(c.decommit_retain_bytes, 0);
    ck_assert(!c.trigger);
} END_TEST

START_TEST(open_and_load_survive_injected_failures) {
    record_small();
    for (long n = 0;; n++) {                                     /* load */
        hh_trace_log *log = NULL;
        hh_test_fail_after(n);
        hh_status st = hh_trace_load(path, &log);
        unsigned fired = hh_test_fail_count();
        hh_test_fail_after(-1);
        if (st == HH_OK) {
            ck_assert_uint_eq(fired, 0);
            ck_assert_uint_eq(log->event_count, 13);
            hh_trace_log_free(log);
            break;
        }
        ck_assert_msg(st == HH_E_NO_MEMORY, "load with fault at %ld: %s: %s", n, hh_status_str(st),
                      hh_test_last_message());
        ck_assert_ptr_null(log);
        ck_assert_int_lt(n, 50);
    }
    hh_heap *empty = NULL;                                       /* open needs an empty heap */
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &empty), HH_OK);
    for (long n = 0;; n++) {                                     /* open */
        hh_trace *tr = NULL;
        hh_test_fail_after(n);
        hh_status st = hh_trace_open(empty, path, &tr);
        hh_test_fail_after(-1);
        if (st == HH_OK) {
            hh_handle h = hh_alloc(empty, 40);
            hh_free(empty, h);
            ck_assert_uint_eq(hh_trace_event_count(tr), 2);
            ck_assert_int_eq(hh_trace_close(tr), HH_OK);
            break;
        }
        ck_assert_int_eq(st, HH_E_NO_MEMORY);
        ck_assert_ptr_null(tr);
        ck_assert_int_lt(n, 50);
    }
    ck_assert_int_eq(hh_heap_check(empty), HH_OK);
    hh_heap_destroy(empty);
} END_TEST

Suite *hh_test_trace_suite(void) {
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("round_trip");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, replay_random_workload);
    tcase_add_test(tc, replay_time_budgeted_steps);
    tcase_add_test(tc, empty_trace_round_trip);
    tcase_add_test(tc, full_compaction_replays_as_itself);
    tcase_add_test(tc, reopened_heap_counts_moves_from_open);
    tcase_add_test(tc, replay_callback_sees_every_event);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad_traces");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, truncated_trace_is_corrupt);
    tcase_add_test(tc, flipped_byte_is_corrupt);
    tcase_add_test(tc, unknown_version_and_missing_file);
    tcase_add_test(tc, well_formed_but_inconsistent_trace_fails_replay);
    tcase_add_test(tc, a_failed_replayed_operation_is_one_message);
    tcase_add_test(tc, records_the_heap_never_accepts_are_corrupt_at_load);
    tcase_add_test(tc, replay_on_smaller_heap_diverges);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, open_rejects_bad_arguments);
    tcase_add_test(tc, recording_after_frees_replays);
    tcase_add_test(tc, growable_heap_trace_replays_from_its_managed_size);
    tcase_add_test(tc, null_arguments_are_reported_once);
    tcase_add_test(tc, open_and_load_survive_injected_failures);
    suite_add_tcase(s, tc);
    return s;
}
