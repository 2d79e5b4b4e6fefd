/* bench_vheap.c -- the virtual heap's passes (include/hheap/vheap.h), measured
 * in the same run against
 *   - the lower bound of bytes to move: the live bytes of the blocks that end
 *     above the compact boundary (the live bytes) must move, nothing else must;
 *   - a sort-and-slide full compaction: sort the blocks by offset and slide each
 *     down to the end of the previous one (every block above the lowest hole
 *     moves once; on a GPU those copies overlap and need a staging buffer).
 * Three size mixes, fragmented by random frees; passes of 16 moves / 8 MiB run
 * until the heap reports compact. Then a streaming case: meshes in and out
 * every frame with one pass a frame, high water against the same trace with no
 * passes. Bytes and high water are deterministic (seeded); times are medians.
 *
 *   build/bench/bench_vheap        (QUICK=1: fewer seeds)
 */
#include "bench_util.h"

#include "hheap/vheap.h"

enum { MIX_UNIFORM, MIX_MESHES, MIX_RANDOM, MIX_COUNT };
static const char *const mix_name[MIX_COUNT] = { "uniform", "meshes", "random" };

static uint64_t pick_size(int mix, hh_rng *r) {
    static const uint64_t meshes[8] = { 4096, 12288, 24576, 65536, 98304, 131072, 262144, 524288 };
    switch (mix) {
    case MIX_UNIFORM: return 65536;
    case MIX_MESHES: return meshes[hh_rng_below(r, 8)];
    default: return 256u + 256u * hh_rng_below(r, 1024);
    }
}

typedef struct blk { uint64_t off, size; } blk;
typedef struct blks { blk v[8192]; size_t n; } blks;
static void collect(const hh_block_info *b, void *user) {
    blks *l = user;
    if ((b->state == HH_BLOCK_LIVE || b->state == HH_BLOCK_PINNED) && l->n < 8192)
        l->v[l->n++] = (blk){ b->offset, b->size };
}

/* Sort-and-slide over the same layout (walk order is offset order): bytes it
   moves and the high water it reaches (each block aligned to 256). */
static void sort_and_slide(const blks *l, double *bytes, double *hw) {
    uint64_t cur = 0, moved = 0;
    for (size_t i = 0; i < l->n; i++) {
        uint64_t dst = (cur + 255u) & ~(uint64_t)255u;
        if (dst != l->v[i].off) moved += l->v[i].size;
        cur = dst + l->v[i].size;
    }
    *bytes = (double)moved;
    *hw = (double)cur;
}

typedef struct result {
    double bytes, lower_bound, slide_bytes, high_water, slide_high_water, passes, ns_per_move, used;
} result;

static result compact_case(int mix, uint64_t seed, hh_vdefrag_policy policy, uint64_t size) {
    result res = {0};
    hh_rng r = { seed * 0x9E3779B97F4A7C15ULL + 1 };
    hh_vheap *h;
    if (hh_vheap_create(&(hh_vheap_desc){ .size = size }, &h) != HH_OK) exit(1);
    static hh_handle hs[8192];
    size_t n = 0;
    uint64_t used = 0;
    while (n < 8192 && used < size / 10 * 9) {
        uint64_t s = pick_size(mix, &r);
        hh_handle x = hh_valloc(h, s, 256, 0);
        if (hh_is_null(x)) break;
        hs[n++] = x;
        used += hh_vsize(h, x);
    }
    for (size_t i = 0; i < n; i++)
        if (hh_rng_below(&r, 100) < 40) hh_vfree(h, hs[i]);
    hh_vheap_stats st;
    hh_vheap_stats_get(h, &st);
    static blks l;
    l.n = 0;
    hh_vheap_walk(h, collect, &l);
    for (size_t i = 0; i < l.n; i++)
        if (l.v[i].off + l.v[i].size > st.used_bytes) res.lower_bound += (double)l.v[i].size;
    sort_and_slide(&l, &res.slide_bytes, &res.slide_high_water);
    res.used = (double)st.used_bytes;

    uint64_t moves = 0, t0 = bench_now_ns();
    for (int pass = 0; pass < 100000; pass++) {
        hh_vdefrag_pass p;
        if (hh_vdefrag_begin(h, &(hh_vdefrag_budget){ .max_moves = 16, .max_bytes = 8u << 20, .policy = policy }, &p)
            != HH_OK) exit(1);
        res.bytes += (double)p.bytes;
        moves += p.move_count;
        res.passes++;
        hh_vdefrag_end(h, NULL, NULL);
        if (p.compact) break;
    }
    uint64_t t1 = bench_now_ns();
    res.ns_per_move = moves ? (double)(t1 - t0) / (double)moves : 0;
    hh_vheap_stats_get(h, &st);
    res.high_water = (double)st.high_water;
    hh_vheap_destroy(h);
    return res;
}

/* Streaming: `frames` frames; each frame drops and loads a few meshes (a wave
   every 100 frames); with_passes: one pass of 8 moves / 4 MiB a frame. Returns
   the mean over frames of high water / live bytes. */
static double stream_case(int mix, uint64_t seed, bool with_passes, double *ns_per_frame) {
    hh_rng r = { seed * 0x9E3779B97F4A7C15ULL + 7 };
    hh_vheap *h;
    if (hh_vheap_create(&(hh_vheap_desc){ .size = 1ull << 30 }, &h) != HH_OK) exit(1);
    static hh_handle live[4096];
    size_t n = 0;
    uint64_t live_bytes = 0, target = 96u << 20;
    double sum = 0;
    int frames = bench_quick() ? 300 : 1500;
    uint64_t pass_ns = 0;
    for (int f = 0; f < frames; f++) {
        int churn = (f % 100 == 99) ? 200 : 4;
        for (int k = 0; k < churn && n > 0; k++) {
            size_t i = hh_rng_below(&r, (uint32_t)n);
            live_bytes -= hh_vsize(h, live[i]);
            hh_vfree(h, live[i]);
            live[i] = live[--n];
        }
        while (live_bytes < target && n < 4096) {
            hh_handle x = hh_valloc(h, pick_size(mix, &r), 256, 0);
            if (hh_is_null(x)) break;
            live[n++] = x;
            live_bytes += hh_vsize(h, x);
        }
        if (with_passes) {
            uint64_t t0 = bench_now_ns();
            hh_vdefrag_pass p;
            hh_vdefrag_begin(h, &(hh_vdefrag_budget){ .max_moves = 8, .max_bytes = 4u << 20 }, &p);
            hh_vdefrag_end(h, NULL, NULL);
            pass_ns += bench_now_ns() - t0;
        }
        hh_vheap_stats st;
        hh_vheap_stats_get(h, &st);
        sum += (double)st.high_water / (double)live_bytes;
    }
    if (ns_per_frame) *ns_per_frame = (double)pass_ns / frames;
    hh_vheap_destroy(h);
    return sum / frames;
}

static void line(const char *name, const char *unit, double *ours, const char *base_name, double *base, int n) {
    bench_print("vheap", name, unit, bench_summarise(ours, n), base_name, bench_summarise(base, n));
}

int main(void) {
    int reps = bench_quick() ? 3 : 5;
    uint64_t t0 = bench_now_ns();
    printf("bench_vheap: hh_vdefrag passes (%s run), 256 MiB virtual heap 90%% full, 40%% freed at random;\n"
           "  passes of 16 moves / 8 MiB until compact; 256-byte alignment\n", bench_quick() ? "QUICK" : "full");
    for (int mix = 0; mix < MIX_COUNT; mix++) {
        double bytes[8], lb[8], slide[8], hw[8], shw[8], ns[8], ratio_lb[8], ratio_slide[8], passes[8], dummy[8];
        for (int i = 0; i < reps; i++) {
            result res = compact_case(mix, 100 + (uint64_t)i, HH_VDEFRAG_FILL, 256u << 20);
            bytes[i] = res.bytes;
            lb[i] = res.lower_bound;
            slide[i] = res.slide_bytes;
            hw[i] = res.high_water;
            shw[i] = res.slide_high_water;
            ns[i] = res.ns_per_move;
            passes[i] = res.passes;
            ratio_lb[i] = res.lower_bound > 0 ? res.bytes / res.lower_bound : 1;
            ratio_slide[i] = res.slide_bytes > 0 ? res.bytes / res.slide_bytes : 1;
            dummy[i] = 1;
        }
        char name[64];
        snprintf(name, sizeof name, "bytes_to_compact_%s", mix_name[mix]);
        line(name, "bytes", bytes, "lower_bound", lb, reps);
        snprintf(name, sizeof name, "bytes_vs_slide_%s", mix_name[mix]);
        line(name, "bytes", bytes, "sort_slide", slide, reps);
        snprintf(name, sizeof name, "high_water_%s", mix_name[mix]);
        line(name, "bytes", hw, "sort_slide", shw, reps);
        printf("  %s: moved %.3fx the lower bound, %.3fx sort-and-slide; high water %.3fx sort-and-slide's; "
               "%.0f passes; %.0f ns per planned+ended move (medians over %d seeds)\n", mix_name[mix],
               bench_summarise(ratio_lb, reps).median, bench_summarise(ratio_slide, reps).median,
               bench_summarise(hw, reps).median / bench_summarise(shw, reps).median,
               bench_summarise(passes, reps).median, bench_summarise(ns, reps).median, reps);
        (void)dummy;
    }
    printf("  AUTO (FILL + two-copy slides until fully compact), 16 MiB heap, same layouts scaled down:\n");
    for (int mix = 1; mix < MIX_COUNT; mix++) {
        double fb[8], ab[8], fhw[8], ahw[8], used[8], slide[8];
        for (int i = 0; i < reps; i++) {
            result f = compact_case(mix, 300 + (uint64_t)i, HH_VDEFRAG_FILL, 16u << 20);
            result a = compact_case(mix, 300 + (uint64_t)i, HH_VDEFRAG_AUTO, 16u << 20);
            fb[i] = f.bytes / f.lower_bound;
            ab[i] = a.bytes / a.lower_bound;
            fhw[i] = f.high_water / f.used;
            ahw[i] = a.high_water / a.used;
            slide[i] = a.slide_bytes / a.lower_bound;
            used[i] = a.passes;
        }
        char name[64];
        snprintf(name, sizeof name, "auto_bytes_over_lower_bound_%s", mix_name[mix]);
        line(name, "ratio", ab, "fill", fb, reps);
        printf("  %s: bytes / lower bound: FILL %.3f, AUTO %.3f, sort-and-slide %.3f; high water / used: FILL %.4f, "
               "AUTO %.4f; AUTO passes %.0f\n", mix_name[mix], bench_summarise(fb, reps).median,
               bench_summarise(ab, reps).median, bench_summarise(slide, reps).median, bench_summarise(fhw, reps).median,
               bench_summarise(ahw, reps).median, bench_summarise(used, reps).median);
    }
    printf("  streaming: 96 MiB of meshes live in a 1 GiB virtual heap, 4 swapped a frame, a wave of 200 every 100 frames\n");
    for (int mix = 0; mix < MIX_COUNT; mix++) {
        double with[8], without[8], ns[8];
        for (int i = 0; i < reps; i++) {
            with[i] = stream_case(mix, 200 + (uint64_t)i, true, &ns[i]);
            without[i] = stream_case(mix, 200 + (uint64_t)i, false, NULL);
        }
        char name[64];
        snprintf(name, sizeof name, "stream_high_water_over_live_%s", mix_name[mix]);
        line(name, "ratio", with, "no_passes", without, reps);
        printf("  %s: high water / live %.3f with a pass a frame, %.3f without; %.1f us of planning a frame\n",
               mix_name[mix], bench_summarise(with, reps).median, bench_summarise(without, reps).median,
               bench_summarise(ns, reps).median / 1e3);
    }
    printf("  total %.1f s\n", (double)(bench_now_ns() - t0) / 1e9);
    return 0;
}
