/* hh_replay.c -- build/hh-replay: replays an hh_trace recording (include/hheap/trace.h)
 * against a fresh hheap heap and against glibc malloc, and checks that the
 * replay reproduces the recorded heap state.
 *
 *   hh-replay [--reps N] TRACE      (hh-replay --help lists the options and defaults)
 *
 * 1. A measured replay on hheap: peak used bytes, fragmentation after every event
 *    (hh_heap_stats), and at ~256 sample points the footprint (managed range minus
 *    the free region at the top) and the share of free bytes in holes below the top.
 *    Its final state is compared with the recording's summary: exit 1 if different.
 * 2. The same on glibc (malloc/realloc/free; pins and defrag steps ignored, since
 *    glibc cannot move blocks): peak in-use bytes and footprint from mallinfo2,
 *    free bytes not in the releasable top chunk.
 * 3. Timed replays, hheap and glibc interleaved REPS times each (default 5,
 *    QUICK=1: 3), printed as BENCH lines (bench/bench_util.h) of region "replay".
 *
 * Exit status: 0 replay identical, 1 replay differs or failed, 2 bad usage or
 * unreadable trace.
 */
#define _GNU_SOURCE 1   /* mallinfo2 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hheap.h"
#include "bench_util.h"
#include "hh_cli.h"

enum { SAMPLES = 256, PAGE = 4096 };

typedef struct hheap_measure {
    size_t   every;                /* sample period in events */
    size_t   peak_used;            /* max stats.used_bytes */
    double   frag_sum, frag_max;   /* stats.fragmentation over all events */
    size_t   frag_n;
    size_t   peak_footprint;       /* max (managed - top free region), sampled */
    double   below_sum;            /* free bytes below the top / free bytes, sampled */
    size_t   below_n;
} hheap_measure;

typedef struct top_acc { size_t last_off, last_size; int last_state; } top_acc;

static void top_walk(const hh_block_info *b, void *user) {
    top_acc *a = user;
    a->last_off = b->offset;
    a->last_size = b->size;
    a->last_state = b->state;
}

static void measure_event(hh_heap *heap, size_t i, void *user) {
    hheap_measure *m = user;
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    if (st.used_bytes > m->peak_used) m->peak_used = st.used_bytes;
    m->frag_sum += st.fragmentation;
    if (st.fragmentation > m->frag_max) m->frag_max = st.fragmentation;
    m->frag_n++;
    if (i % m->every == 0) {
        top_acc a = { 0, 0, HH_BLOCK_LIVE };
        hh_heap_walk(heap, top_walk, &a);
        size_t top_free = a.last_state == HH_BLOCK_FREE ? a.last_size : 0;
        size_t footprint = hh_heap_managed_bytes(heap) - top_free;
        if (footprint > m->peak_footprint) m->peak_footprint = footprint;
        if (st.free_bytes) m->below_sum += (double)(st.free_bytes - top_free) / (double)st.free_bytes;
        m->below_n++;
    }
}

/* A heap like the recorded one; *buf gets a caller buffer when the recording ran
   on one whose base was not page-aligned (alignments above 16 depend on it). */
static hh_heap *replay_heap(const hh_trace_info *info, void **buf) {
    hh_heap_desc d;
    hh_trace_desc(info, &d);
    *buf = NULL;
    if (info->caller_memory && info->base_misalign) {
        char *raw = aligned_alloc(PAGE, ((info->capacity + info->base_misalign) / PAGE + 1) * PAGE);
        if (raw == NULL) return NULL;
        *buf = raw;
        d.memory = raw + info->base_misalign;
    }
    hh_heap *heap = NULL;
    if (hh_heap_create(&d, &heap) != HH_OK) {
        free(*buf);
        return NULL;
    }
    return heap;
}

/* ---------------------------------------------------------------------------
   glibc replay
--------------------------------------------------------------------------- */
typedef struct glibc_slot { uint64_t rec; void *p; } glibc_slot;

typedef struct glibc_measure {
    size_t every;
    size_t inuse0, footprint0;     /* before the replay (the loaded trace itself lives in malloc) */
    size_t peak_inuse, peak_footprint;
    double below_sum;
    size_t below_n;
} glibc_measure;

static void glibc_sample(glibc_measure *m) {
    struct mallinfo2 mi = mallinfo2();
    size_t inuse = mi.uordblks + mi.hblkhd - m->inuse0, footprint = mi.arena - mi.keepcost + mi.hblkhd - m->footprint0;
    if (inuse > m->peak_inuse) m->peak_inuse = inuse;
    if (footprint > m->peak_footprint) m->peak_footprint = footprint;
    if (mi.fordblks) m->below_sum += (double)(mi.fordblks - mi.keepcost) / (double)mi.fordblks;
    m->below_n++;
}

/* Replays log on malloc; returns elapsed ns (0 on failure). Frees everything
   afterwards (not timed). */
static uint64_t glibc_replay(const hh_trace_log *log, glibc_slot *map, size_t cap, glibc_measure *m) {
    memset(map, 0, cap * sizeof *map);
    if (m) {
        struct mallinfo2 mi = mallinfo2();
        m->inuse0 = mi.uordblks + mi.hblkhd;
        m->footprint0 = mi.arena - mi.keepcost + mi.hblkhd;
    }
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < log->event_count; i++) {
        const hh_heap_event *e = &log->events[i].ev;
        size_t idx = (size_t)(e->handle.id & HH_HANDLE_INDEX_MASK);
        if (e->kind != HH_EV_DEFRAG_STEP && e->kind != HH_EV_DEFRAG_FULL && idx >= cap) return 0;
        switch (e->kind) {
        case HH_EV_ALLOC: {
            void *p = NULL;
            if (e->align > 16) {
                if (posix_memalign(&p, e->align, e->size) != 0) p = NULL;
            } else {
                p = malloc(e->size);
            }
            if (p == NULL) return 0;
            map[idx].rec = e->handle.id;
            map[idx].p = p;
            break;
        }
        case HH_EV_FREE:
            free(map[idx].p);
            map[idx].p = NULL;
            break;
        case HH_EV_RESIZE: {
            void *p = realloc(map[idx].p, e->size);
            if (p == NULL) return 0;
            map[idx].p = p;
            break;
        }
        default: break;            /* pin, unpin, defrag: nothing moves on glibc */
        }
        if (m && i % m->every == 0) glibc_sample(m);
    }
    uint64_t dt = bench_now_ns() - t0;
    for (size_t i = 0; i < cap; i++) free(map[i].p);
    return dt ? dt : 1;
}

/* ---------------------------------------------------------------------------
   Main
--------------------------------------------------------------------------- */
/* hheap errors (an unreadable or damaged trace) as one plain line. */
static void on_error(hh_status s, const char *message, void *user) {
    (void)s;
    (void)user;
    fprintf(stderr, "hh-replay: %s\n", message);
}

enum { OPT_REPS, OPT_COUNT };

int main(int argc, char **argv) {
    int reps = bench_quick() ? 3 : 5;
    char reps_def[48];
    snprintf(reps_def, sizeof reps_def, "%d%s", reps, bench_quick() ? " (QUICK=1 set)" : "; 3 with QUICK=1");
    const hh_cli_opt opts[OPT_COUNT] = {
        [OPT_REPS] = { "reps", 'r', "N", "timed replays of each allocator, 1..64", reps_def },
    };
    hh_cli cli;
    hh_cli_init(&cli, "hh-replay", "TRACE.hhtrace",
                "replays a trace written by hh_trace_open on a fresh heap (checking the final state) and on glibc\n"
                "exit status: 0 replay identical, 1 replay differs or failed, 2 bad usage or unreadable trace\n",
                opts, OPT_COUNT);
    const char *v;
    int opt;
    while ((opt = hh_cli_next(&cli, argc, argv, &v)) != -1)
        if (opt == OPT_REPS) reps = (int)hh_cli_uint(&cli, v, 1, 64);
    if (optind >= argc) hh_cli_usage_error(&cli, "no trace given");
    if (optind + 1 < argc) hh_cli_usage_error(&cli, "more than one trace given");
    const char *path = argv[optind];
    hh_set_error_handler(on_error, NULL);

    hh_trace_log *log = NULL;
    if (hh_trace_load(path, &log) != HH_OK) return 2;      /* the error handler printed why */
    const hh_trace_info *in = &log->info;
    size_t n = log->event_count, cap = (size_t)in->max_handles + 2;
    size_t every = n / SAMPLES ? n / SAMPLES : 1;
    for (size_t i = 0; i < n; i++) {
        size_t idx = (size_t)(log->events[i].ev.handle.id & HH_HANDLE_INDEX_MASK);
        if (idx >= cap) cap = idx + 1;
    }

    /* short case name from the file name */
    char name[48];
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t k = 0;
    for (; base[k] && base[k] != '.' && k < 32; k++)
        name[k] = (char)((base[k] == ' ' || base[k] == '\t') ? '_' : base[k]);
    name[k] = 0;
    if (k == 0) strcpy(name, "trace");

    printf("replay: %s: %zu events, heap of %.1f MiB (%u handles, flags %#x, policy %s)\n", path, n,
           (double)in->capacity / 1048576.0, in->max_handles, in->flags, hh_defrag_policy_str(in->policy));

    /* 1. measured, verified replay on hheap */
    void *buf = NULL;
    hh_heap *heap = replay_heap(in, &buf);
    if (heap == NULL) {
        fprintf(stderr, "hh-replay: cannot create a heap of %zu bytes\n", in->capacity);
        hh_trace_log_free(log);
        return 2;
    }
    hheap_measure hm = { .every = every };
    hh_status st = hh_trace_replay(log, heap, measure_event, &hm);
    hh_trace_summary now;
    hh_trace_summarise(heap, &now);
    hh_heap_destroy(heap);
    free(buf);
    printf("replay: final state %s: %llu blocks (%u live, %u pinned), walk hash %016llx, %llu moves / %llu bytes moved "
           "(recorded: %llu blocks, hash %016llx, %llu moves)\n",
           st == HH_OK ? "IDENTICAL" : "DIFFERS", (unsigned long long)now.blocks, now.live_blocks, now.pinned_blocks,
           (unsigned long long)now.walk_hash, (unsigned long long)now.moves, (unsigned long long)now.bytes_moved,
           (unsigned long long)log->summary.blocks, (unsigned long long)log->summary.walk_hash,
           (unsigned long long)log->summary.moves);
    if (st != HH_OK) {
        hh_trace_log_free(log);
        return 1;
    }

    /* 2. measured replay on glibc */
    glibc_slot *gmap = calloc(cap, sizeof *gmap);
    if (gmap == NULL) {
        fprintf(stderr, "hh-replay: out of memory\n");
        hh_trace_log_free(log);
        return 2;
    }
    glibc_measure gm = { .every = every };
    if (glibc_replay(log, gmap, cap, &gm) == 0) {
        fprintf(stderr, "hh-replay: glibc replay failed (out of memory or a handle beyond the table)\n");
        free(gmap);
        hh_trace_log_free(log);
        return 1;
    }
    printf("replay: hheap: peak used %.2f MiB, peak footprint %.2f MiB, fragmentation mean %.3f max %.3f, "
           "free bytes in holes below the top %.1f%% (mean of samples)\n",
           (double)hm.peak_used / 1048576.0, (double)hm.peak_footprint / 1048576.0,
           hm.frag_n ? hm.frag_sum / (double)hm.frag_n : 0.0, hm.frag_max,
           hm.below_n ? 100.0 * hm.below_sum / (double)hm.below_n : 0.0);
    printf("replay: glibc: peak in use %.2f MiB, peak footprint %.2f MiB, free bytes outside the top chunk %.1f%% "
           "(mean of samples; moves and pins ignored)\n",
           (double)gm.peak_inuse / 1048576.0, (double)gm.peak_footprint / 1048576.0,
           gm.below_n ? 100.0 * gm.below_sum / (double)gm.below_n : 0.0);

    /* 3. timed, interleaved */
    double a[64], b[64];
    int ok = 1;
    for (int r = 0; r < reps && ok; r++) {
        heap = replay_heap(in, &buf);
        if (heap == NULL) { ok = 0; break; }
        uint64_t t0 = bench_now_ns();
        st = hh_trace_replay(log, heap, NULL, NULL);
        uint64_t dt = bench_now_ns() - t0;
        hh_heap_destroy(heap);
        free(buf);
        if (st != HH_OK) { ok = 0; break; }
        a[r] = (double)dt / (double)(n ? n : 1);
        uint64_t g = glibc_replay(log, gmap, cap, NULL);
        if (g == 0) { ok = 0; break; }
        b[r] = (double)g / (double)(n ? n : 1);
    }
    if (ok && n) {
        char c1[80], c2[80];
        snprintf(c1, sizeof c1, "%s_time", name);
        bench_print("replay", c1, "ns/event", bench_summarise(a, reps), "glibc", bench_summarise(b, reps));
        bench_summary pf = { (double)hm.peak_footprint, (double)hm.peak_footprint, (double)hm.peak_footprint };
        bench_summary gf = { (double)gm.peak_footprint, (double)gm.peak_footprint, (double)gm.peak_footprint };
        snprintf(c2, sizeof c2, "%s_peak_footprint", name);
        bench_print("replay", c2, "bytes", pf, "glibc", gf);
    }
    free(gmap);
    hh_trace_log_free(log);
    return ok ? 0 : 1;
}
