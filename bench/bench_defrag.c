/* bench_defrag.c -- the incremental defragmentation service (include/hheap/defrag.h).
 *
 *   build/bench/bench_defrag          (make bench-defrag; QUICK=1 for a smoke run)
 *
 * Prints BENCH lines (bench/bench_util.h), each with a baseline measured in the
 * same run:
 *   1. bytes moved to reach `compact` per policy (SLIDE, FILL, AUTO) against the
 *      lower bound: the payload of the live blocks that lie above the final
 *      compact boundary (the top free region's start), which must move at
 *      least once. Five heaps: a game-like mix of repeated object sizes (one
 *      block in three freed), random sizes, repeated sizes with pinned blocks,
 *      the game mix with one block in ten freed (sparse holes), and the game
 *      mix on a half-full heap. Plus AUTO against
 *      SLIDE directly. Medians over seeds.
 *   2. hh_defrag_full copy throughput against memmove bandwidth over the same
 *      bytes in the same block sizes; resident memory before/after the
 *      compaction (pages given back with madvise).
 *   3. per-step time of hh_defrag_step(heap, 16) on a fragmented 64 MiB heap of
 *      ~1 KiB blocks (median, p99) against memmove of the bytes a step moves;
 *      frames to compact against the ideal (blocks above the boundary / 16).
 *   4. the frame loop: waves of game objects with mixed lifetimes, one
 *      hh_defrag_step(heap, 16) per frame: step median/p99, steady-state mean
 *      and max fragmentation and failed allocations against the same loop
 *      without steps; bytes moved per frame.
 * Never asserts a time. Everything is seeded (deterministic work).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"   /* and hh_rng (tests/test_rng.h): every seed here is non-zero, hh_rng_make(seed) is the state seed * golden + 1 */
#include "hheap.h"

/* ---------------------------------------------------------------------------
   Helpers
--------------------------------------------------------------------------- */

static hh_heap *heap_make(size_t capacity) {
    hh_heap *h = NULL;
    hh_heap_desc d = { .capacity = capacity, .max_handles = (uint32_t)(capacity / 32) };
    if (hh_heap_create(&d, &h) != HH_OK) {
        fprintf(stderr, "bench_defrag: cannot create a %zu-byte heap\n", capacity);
        exit(1);
    }
    return h;
}

static double percentile(double *v, size_t n, double p) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, bench_cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void summary_print(const char *name, const char *unit, double *ours, const char *base_name, double *base, int n) {
    bench_print("defrag", name, unit, bench_summarise(ours, n), base_name, bench_summarise(base, n));
}

/* ---------------------------------------------------------------------------
   1. Bytes moved to compact, per policy, against the lower bound
--------------------------------------------------------------------------- */
enum { MIX_GAME, MIX_RANDOM, MIX_PINNED, MIX_SPARSE, MIX_HALF, MIX_COUNT };
static const char *const mix_name[MIX_COUNT] = { "game", "random", "pinned", "sparse", "half" };

typedef struct snap { size_t off, size; hh_handle h; int state; } snap;
typedef struct snap_vec { snap *v; size_t n, cap; } snap_vec;
static void snap_visit(const hh_block_info *b, void *user) {
    snap_vec *s = user;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) exit(1);
    }
    s->v[s->n++] = (snap){ b->offset, b->size, b->handle, b->state };
}

/* Builds the fragmented heap of `mix` (seeded), compacts it with `pol` in
   steps of 16 and returns bytes moved; *lb gets the lower bound. */
static double bytes_to_compact(int mix, hh_defrag_policy pol, uint64_t seed, double *lb, unsigned *steps_out) {
    static const size_t game_sizes[] = { 48, 64, 64, 96, 128, 128, 160, 256, 512, 1024 };
    hh_heap *h = heap_make(8u << 20);
    hh_defrag_set_policy(h, pol);
    hh_rng r = hh_rng_make(seed);
    size_t cap = 1u << 18, n = 0;
    hh_handle *hs = malloc(cap * sizeof *hs);
    size_t filled = 0, fill_max = mix == MIX_HALF ? (4u << 20) : SIZE_MAX;
    for (;; n++) {
        size_t size = mix == MIX_RANDOM ? 16 + hh_rng_below(&r, 2000) : game_sizes[hh_rng_below(&r, 10)];
        if (n == cap || filled >= fill_max) break;
        hs[n] = hh_alloc(h, size);
        if (hh_is_null(hs[n])) break;
        filled += size;
    }
    uint32_t one_in = mix == MIX_SPARSE ? 10 : 3;       /* sparse: 10% of the blocks freed */
    for (size_t i = 0; i < n; i++)
        if (hh_rng_below(&r, one_in) == 0) hh_free(h, hs[i]);
    if (mix == MIX_PINNED)
            for (size_t i = 0; i < n / 4; i += 97)          /* pins low in the heap (loaded early, kept) */
            if (hh_size(h, hs[i])) (void)hh_pin(h, hs[i]);
    snap_vec before = {0};
    hh_heap_walk(h, snap_visit, &before);
    double bytes = 0;
    unsigned steps = 0;
    for (;;) {
        hh_defrag_report rep = hh_defrag_step(h, 16);
        bytes += (double)rep.bytes_moved;
        steps++;
        if (rep.compact || steps > 1000000) break;
    }
    hh_defrag_metrics m;
    hh_defrag_metrics_get(h, &m);
    size_t boundary = hh_heap_managed_bytes(h) - m.top_free_bytes;
    double low = 0;
    for (size_t i = 0; i < before.n; i++)
        if (before.v[i].state == HH_BLOCK_LIVE && before.v[i].off + before.v[i].size > boundary)
            low += (double)hh_size(h, before.v[i].h);
    *lb = low;
    if (steps_out) *steps_out = steps;
    free(before.v);
    free(hs);
    hh_heap_destroy(h);
    return bytes;
}

static void bench_policies(void) {
    int reps = bench_quick() ? 3 : 5;
    static const hh_defrag_policy pols[3] = { HH_DEFRAG_SLIDE, HH_DEFRAG_FILL, HH_DEFRAG_AUTO };
    for (int mix = 0; mix < MIX_COUNT; mix++) {
        double bytes[3][8], lbs[3][8], ratio[3][8];
        for (int rep = 0; rep < reps; rep++)
            for (int p = 0; p < 3; p++) {
                bytes[p][rep] = bytes_to_compact(mix, pols[p], 1000 + (uint64_t)rep, &lbs[p][rep], NULL);
                ratio[p][rep] = lbs[p][rep] > 0 ? bytes[p][rep] / lbs[p][rep] : 0;
            }
        for (int p = 0; p < 3; p++) {
            char name[64];
            snprintf(name, sizeof name, "bytes_to_compact_%s_%s", mix_name[mix], hh_defrag_policy_str(pols[p]));
            double lbcopy[8];
            memcpy(lbcopy, lbs[p], sizeof lbcopy);
            summary_print(name, "bytes", bytes[p], "lower_bound", lbcopy, reps);
            printf("  %s: %s moves %.3fx the lower bound (median over %d seeds)\n", mix_name[mix],
                   hh_defrag_policy_str(pols[p]), bench_summarise(ratio[p], reps).median, reps);
        }
        char name[64];
        snprintf(name, sizeof name, "bytes_to_compact_%s_auto_vs_slide", mix_name[mix]);
        summary_print(name, "bytes", bytes[2], "slide", bytes[0], reps);
    }
}

/* ---------------------------------------------------------------------------
   2. Full-compaction throughput against memmove
--------------------------------------------------------------------------- */
typedef struct full_ctx {
    size_t capacity;
    bool   decommit;                  /* let the compaction give pages back (timed with it) */
    double moved_bytes, avg_block;
    size_t rss_before, rss_after, decommitted;
} full_ctx;

/* A fragmented heap of ~1 KiB blocks (one in three freed); returns MB/s of hh_defrag_full. */
static double full_ours(void *arg) {
    full_ctx *c = arg;
    hh_heap *h = heap_make(c->capacity);
    hh_defrag_configure(h, &(hh_defrag_config){ .no_decommit = !c->decommit });
    hh_rng r = hh_rng_make(77);
    size_t n = 0, cap = c->capacity / 512;
    hh_handle *hs = malloc(cap * sizeof *hs);
    while (n < cap) {
        hh_handle x = hh_alloc(h, 512 + hh_rng_below(&r, 1024));
        if (hh_is_null(x)) break;
        memset(hh_deref(h, x), (int)n, 64);
        hs[n++] = x;
    }
    for (size_t i = 0; i < n; i++)
        if (hh_rng_below(&r, 3) == 0) hh_free(h, hs[i]);
    c->rss_before = (size_t)bench_vm_bytes("VmRSS:");
    uint64_t t0 = bench_now_ns();
    hh_defrag_report rep = hh_defrag_full(h);
    uint64_t dt = bench_now_ns() - t0;
    c->rss_after = (size_t)bench_vm_bytes("VmRSS:");
    hh_defrag_metrics m;
    hh_defrag_metrics_get(h, &m);
    c->decommitted = m.decommitted_bytes;
    c->moved_bytes = (double)rep.bytes_moved;
    c->avg_block = rep.moves ? (double)rep.bytes_moved / rep.moves : 1024;
    free(hs);
    hh_heap_destroy(h);
    return (double)rep.bytes_moved / ((double)dt / 1e9) / 1e6;
}

/* memmove of the same bytes in blocks of the same average size with the same
   layout as the compaction (one block in three a hole, so each block moves
   down by a third of its offset on average: kept blocks pack at the bottom of
   a buffer of the heap's size); MB/s. */
static double full_memmove(void *arg) {
    full_ctx *c = arg;
    size_t blk = (size_t)c->avg_block, total = (size_t)c->moved_bytes;
    if (total == 0) total = 1u << 20;
    size_t span = c->capacity;
    char *buf = malloc(span);
    if (!buf) exit(1);
    memset(buf, 1, span);
    uint64_t t0 = bench_now_ns();
    size_t dst = 0, src = blk, k = 0;
    for (size_t done = 0; done < total; done += blk) {
        if (src + blk > span) src = blk, dst = 0;
        memmove(buf + dst, buf + src, blk);
        dst += blk;
        src += (++k % 2) ? blk : 2 * blk;                /* 2 kept, 1 hole */
    }
    uint64_t dt = bench_now_ns() - t0;
    volatile char sink = buf[span / 3];
    (void)sink;
    free(buf);
    return (double)total / ((double)dt / 1e9) / 1e6;
}

static void bench_full(void) {
    full_ctx c = { .capacity = bench_quick() ? (16u << 20) : (64u << 20) };
    (void)full_ours(&c);                      /* warm-up, and figures for the baseline */
    bench_pair("defrag", "full_copy_throughput", "MB/s", full_ours, "memmove", full_memmove, &c, bench_reps());
    c.decommit = true;                        /* the same, giving the freed pages back inside the call */
    bench_pair("defrag", "full_copy_throughput_with_madvise", "MB/s", full_ours, "memmove", full_memmove, &c,
               bench_reps());
    double rb[1] = { (double)c.rss_before / (1 << 20) }, ra[1] = { (double)c.rss_after / (1 << 20) };
    summary_print("rss_after_full_compaction", "MiB", ra, "rss_before", rb, 1);
    printf("  full compaction gave %.1f MiB back to the OS (madvise)\n", (double)c.decommitted / (1 << 20));
}

/* ---------------------------------------------------------------------------
   3. Per-step time at N = 16, ~1 KiB blocks, 64 MiB
--------------------------------------------------------------------------- */
typedef struct step_ctx { double p50, p99, frames, ideal, step_bytes; } step_ctx;

static void step_run(step_ctx *out) {
    size_t capacity = bench_quick() ? (16u << 20) : (64u << 20);
    hh_heap *h = heap_make(capacity);
    hh_rng r = hh_rng_make(5);
    size_t cap = capacity / 700, n = 0;
    hh_handle *hs = malloc(cap * sizeof *hs);
    while (n < cap) {
        hh_handle x = hh_alloc(h, 768 + hh_rng_below(&r, 512));
        if (hh_is_null(x)) break;
        hs[n++] = x;
    }
    for (size_t i = 0; i < n; i++)
        if (hh_rng_below(&r, 2) == 0) hh_free(h, hs[i]);
    snap_vec before = {0};
    hh_heap_walk(h, snap_visit, &before);
    size_t cap_steps = 1u << 20, k = 0;
    double *t = malloc(cap_steps * sizeof *t), bytes = 0;
    for (;;) {
        uint64_t t0 = bench_now_ns();
        hh_defrag_report rep = hh_defrag_step(h, 16);
        uint64_t dt = bench_now_ns() - t0;
        if (k < cap_steps) t[k++] = (double)dt;
        bytes += (double)rep.bytes_moved;
        if (rep.compact) break;
    }
    /* Ideal: every live block above the final boundary moves once, 16 a frame. */
    hh_defrag_metrics m;
    hh_defrag_metrics_get(h, &m);
    size_t boundary = hh_heap_managed_bytes(h) - m.top_free_bytes, must = 0;
    for (size_t i = 0; i < before.n; i++)
        if (before.v[i].state == HH_BLOCK_LIVE && before.v[i].off + before.v[i].size > boundary) must++;
    out->ideal = (double)((must + 15) / 16);
    out->frames = (double)k;
    out->step_bytes = k ? bytes / (double)k : 0;
    out->p50 = percentile(t, k, 0.50);
    out->p99 = percentile(t, k, 0.99);
    free(before.v);
    free(t);
    free(hs);
    hh_heap_destroy(h);
}

/* The copy floor of a step: memmove of `bytes` bytes in 1 KiB pieces between
   scattered places of a 64 MiB buffer (cold, like the heap's blocks); the
   median of 101 tries, in ns. */
static double memmove_ns(double bytes) {
    size_t total = (size_t)bytes, blk = 1024, span = 64u << 20;
    if (total < blk) total = blk;
    char *buf = malloc(span);
    if (!buf) exit(1);
    memset(buf, 1, span);
    hh_rng r = hh_rng_make(9);
    double t[101];
    for (int rep = 0; rep < 101; rep++) {
        uint64_t t0 = bench_now_ns();
        for (size_t done = 0; done < total; done += blk) {
            size_t src = (size_t)hh_rng_below(&r, (uint32_t)(span / blk - 1)) * blk;
            size_t dst = (size_t)hh_rng_below(&r, (uint32_t)(span / blk - 1)) * blk;
            memmove(buf + dst, buf + src, blk);
        }
        t[rep] = (double)(bench_now_ns() - t0);
    }
    free(buf);
    return percentile(t, 101, 0.5);
}

static void bench_steps(void) {
    int reps = bench_quick() ? 2 : 5;
    double p50[8], p99[8], frames[8], ideal[8], mm50[8], mm99[8];
    for (int i = 0; i < reps; i++) {
        step_ctx c;
        step_run(&c);
        p50[i] = c.p50;
        p99[i] = c.p99;
        frames[i] = c.frames;
        ideal[i] = c.ideal;
        mm50[i] = memmove_ns(c.step_bytes);
        mm99[i] = mm50[i];
    }
    summary_print("step16_1k_64MiB_median", "ns", p50, "memmove_step_bytes_cold", mm50, reps);
    summary_print("step16_1k_64MiB_p99", "ns", p99, "memmove_step_bytes_cold", mm99, reps);
    summary_print("frames_to_compact_64MiB_n16", "frames", frames, "ideal_blocks_above_boundary_div_16", ideal, reps);
}

/* ---------------------------------------------------------------------------
   4. The frame loop
--------------------------------------------------------------------------- */
typedef struct obj { hh_handle h; uint32_t dies; } obj;
typedef struct loop_result {
    double p50, p99, frag_mean, frag_max, bytes_per_frame, failed, frames;
} loop_result;

/* Game objects spawned in waves: a trickle every frame, a burst every 120
   frames; lifetimes mostly short (1..90 frames), some medium, a few long
   (until the end). One step of 16 moves per frame when `defrag`. */
static loop_result frame_loop(bool defrag, unsigned frames, size_t capacity, uint64_t seed) {
    static const size_t sizes[] = { 48, 64, 64, 96, 128, 128, 160, 256, 384, 512, 1024, 2048 };
    hh_heap *h = heap_make(capacity);
    hh_rng r = hh_rng_make(seed);
    size_t cap = 1u << 17, n = 0;
    obj *objs = malloc(cap * sizeof *objs);
    double *t = malloc(frames * sizeof *t);
    double frag_sum = 0, frag_max = 0, failed = 0, bytes = 0;
    unsigned measured = 0, warm = frames / 5;
    for (unsigned f = 0; f < frames; f++) {
        for (size_t i = 0; i < n;) {                           /* deaths */
            if (objs[i].dies <= f) {
                hh_free(h, objs[i].h);
                objs[i] = objs[--n];
            } else {
                i++;
            }
        }
        unsigned spawn = 8 + hh_rng_below(&r, 17) + (f % 120 == 0 ? 400 : 0);   /* a trickle, a wave every 2 s */
        for (unsigned s = 0; s < spawn && n < cap; s++) {
            unsigned k = hh_rng_below(&r, 100);
            uint32_t life = k < 75 ? 1 + hh_rng_below(&r, 120) : k < 95 ? 200 + hh_rng_below(&r, 1300) : 2000 + hh_rng_below(&r, 8000);
            hh_handle x = hh_alloc(h, sizes[hh_rng_below(&r, 12)]);
            if (hh_is_null(x)) {
                failed++;
                continue;
            }
            objs[n++] = (obj){ x, f + life };
        }
        if (defrag) {
            uint64_t t0 = bench_now_ns();
            hh_defrag_report rep = hh_defrag_step(h, 16);
            t[f] = (double)(bench_now_ns() - t0);
            if (f >= warm) bytes += (double)rep.bytes_moved;
        } else {
            t[f] = 0;
        }
        if (f >= warm) {
            hh_heap_stats st;
            hh_heap_stats_get(h, &st);
            frag_sum += st.fragmentation;
            if (st.fragmentation > frag_max) frag_max = st.fragmentation;
            measured++;
        }
    }
    loop_result res = { .p50 = percentile(t, frames, 0.5), .p99 = percentile(t, frames, 0.99),
                        .frag_mean = measured ? frag_sum / measured : 0, .frag_max = frag_max,
                        .bytes_per_frame = measured ? bytes / measured : 0, .failed = failed, .frames = frames };
    free(t);
    free(objs);
    hh_heap_destroy(h);
    return res;
}

/* The loop at one heap size: live objects take about 3.5 MiB in steady
   state (waves push it higher), so 8 MiB is a tight heap and 16 MiB a roomy one. */
static void frame_loop_at(size_t capacity, unsigned frames, int reps) {
    double p50[4], p99[4], fm[4], fx[4], bpf[4], fail[4], bfm[4], bfx[4], bfail[4], zero[4] = {0};
    for (int i = 0; i < reps; i++) {
        loop_result a = frame_loop(true, frames, capacity, 2024 + (uint64_t)i);
        loop_result b = frame_loop(false, frames, capacity, 2024 + (uint64_t)i);   /* same seed: same objects */
        p50[i] = a.p50;
        p99[i] = a.p99;
        fm[i] = a.frag_mean * 100;
        fx[i] = a.frag_max * 100;
        bpf[i] = a.bytes_per_frame;
        fail[i] = a.failed;
        bfm[i] = b.frag_mean * 100;
        bfx[i] = b.frag_max * 100;
        bfail[i] = b.failed;
    }
    char name[96];
    unsigned mib = (unsigned)(capacity >> 20);
#define FL_PRINT(what, unit, ours, base_name, base)                                   \
    do {                                                                              \
        snprintf(name, sizeof name, "frameloop_%uMiB_%s", mib, what);                 \
        summary_print(name, unit, ours, base_name, base, reps);                      \
    } while (0)
    FL_PRINT("step_median", "ns", p50, "none", zero);
    FL_PRINT("step_p99", "ns", p99, "none", zero);
    FL_PRINT("frag_mean", "percent", fm, "no_defrag", bfm);
    FL_PRINT("frag_max", "percent", fx, "no_defrag", bfx);
    FL_PRINT("bytes_moved_per_frame", "bytes", bpf, "none", zero);
    FL_PRINT("failed_allocs", "count", fail, "no_defrag", bfail);
#undef FL_PRINT
}

static void bench_frame_loop(void) {
    unsigned frames = bench_quick() ? 1200 : 5000;
    int reps = bench_quick() ? 1 : 3;
    printf("  frame loop: %u frames, 8-24 objects a frame plus a wave of 400 every 120 frames; 75%% live\n"
           "  1-120 frames, 20%% 200-1500, 5%% 2000-10000; one hh_defrag_step(heap, 16) per frame after the frees\n"
           "  and spawns; fragmentation = 1 - largest_free / free_bytes after the step, from frame %u on;\n"
           "  baseline: the same loop without steps\n", frames, frames / 5);
    frame_loop_at(8u << 20, frames, reps);
    frame_loop_at(16u << 20, frames, reps);
}

/* Expected failures (filling a heap until it refuses) are part of the setups. */
static void quiet(hh_status s, const char *message, void *user) {
    (void)s;
    (void)message;
    (void)user;
}

int main(void) {
    uint64_t t0 = bench_now_ns();
    hh_set_error_handler(quiet, NULL);
    printf("bench_defrag: hh_defrag_* (%s run)\n", bench_quick() ? "QUICK" : "full");
    bench_policies();
    bench_full();
    bench_steps();
    bench_frame_loop();
    printf("  total %.1f s\n", (double)(bench_now_ns() - t0) / 1e9);
    return 0;
}
