/* bench_footprint.c -- does compaction pay off? Footprint of the relocatable
 * heap under game workloads, against non-moving allocators on the same trace.
 *
 *   build/bench/bench_footprint [name=libpath ...]   (make bench-footprint; QUICK=1: shorter traces)
 *
 * Workloads (seeded, generated in memory before anything is measured):
 *   phases     alternating phases of small (16-256 B) and large (2-32 KiB)
 *              objects, the same bytes per frame in both; 8% of each phase's
 *              objects live 1000-4000 frames, the rest 1-120 frames, so the
 *              survivors of a phase stay scattered through the next ones.
 *   streaming  level streaming: every 150 frames a zone of 1-16 KiB chunks
 *              loads over 10 frames and the oldest of three loaded zones
 *              unloads at once (5% of its chunks persist for 2000 frames), over
 *              a background of 64-512 B game objects living 5-300 frames.
 *   demo       hh-demo's heap traffic: waves of enemies with AI paths and
 *              rockets, long-lived level chunks streamed in and out, a level
 *              transition (see gen_demo).
 *
 * Figures, per workload (peak live = the most bytes the program had asked for
 * and not yet freed, the same number for every allocator):
 *   hheap-N           highest live byte / peak live on a roomy 64 MiB heap, one
 *                     hh_defrag_step(heap, N) a frame (N = 0: no steps); also
 *                     mean fragmentation, bytes moved / bytes freed, step p50 and
 *                     p99 and the slowest single hh_alloc.
 *   hheap-100us       the same with hh_defrag_step_ex(max_ns = 100 us).
 *   tight-N           capacity 1.25 x the peak live *block* bytes (what hheap's
 *                     own blocks need at the peak, headers included): failed
 *                     allocations, slowest hh_alloc, mean fragmentation.
 *   <peer>            peak RSS growth / peak live when the same trace runs on
 *                     malloc/free in a child process with LD_PRELOAD=<peer>
 *                     (glibc: none). Each object is written when allocated so
 *                     its pages are resident, as hheap's are.
 * BENCH lines carry medians over seeds with min and max (bench_util.h); the
 * baseline column of the hheap lines is the best peer of the same run.
 * HH_BENCH_POLICY=fill|slide runs the hheap cases under that policy (default AUTO).
 */
#define _DEFAULT_SOURCE 1   /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_util.h"
#include "hheap.h"

/* ---------------------------------------------------------------------------
   Traces: per frame, a run of ops; an op allocates object `id` of `size`
   bytes, or frees it (size 0).
--------------------------------------------------------------------------- */
typedef struct op { uint32_t id, size; } op;
typedef struct trace {
    op       *ops;
    size_t    nops;
    uint32_t *frame_end;        /* ops[frame_end[f-1] .. frame_end[f]) belong to frame f */
    uint32_t  frames, objects;
    uint32_t *size_of;          /* id -> size */
    size_t    peak_live;        /* requested bytes */
} trace;

/* The trace's arrays live in their own mappings, not in malloc: a child run
   measures the resident growth of the allocator under test, and memory that
   generation had freed into that allocator would hide some of it. Virtual
   space is reserved generously; only the pages written become resident. */
static void *tmem(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "bench_footprint: cannot reserve %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

enum { MAX_OPS = 1u << 26, MAX_OBJECTS = 1u << 25, MAX_LIFE = 1u << 13 };

static void trace_push(trace *t, uint32_t id, uint32_t size) {
    if (t->nops == MAX_OPS) abort();
    t->ops[t->nops++] = (op){ id, size };
}

/* Generator state: deaths are bucketed by frame (a linked list through
   next_dead, by object id), so no sort and no allocation is needed. */
typedef struct gen_state {
    hh_rng r;
    trace    *t;
    uint32_t *dead_head;        /* frame -> first object dying then (UINT32_MAX: none) */
    uint32_t *next_dead;        /* id -> next object dying in the same frame */
    uint32_t  frame;
} gen_state;

static void gen_alloc(gen_state *g, uint32_t size, uint32_t life) {
    trace *t = g->t;
    if (t->objects == MAX_OBJECTS) abort();
    uint32_t id = t->objects++;
    t->size_of[id] = size;
    trace_push(t, id, size);
    if (life == 0) life = 1;
    if (life >= MAX_LIFE) life = MAX_LIFE - 1;
    uint32_t f = g->frame + life;
    if (f >= t->frames) return;                        /* outlives the trace */
    g->next_dead[id] = g->dead_head[f];
    g->dead_head[f] = id;
}

static uint32_t urange(hh_rng *r, uint32_t lo, uint32_t hi) { return lo + hh_rng_below(r, hi - lo + 1); }

/* One frame of "phases". */
static void gen_phases(gen_state *g) {
    enum { PHASE = 400, BYTES_PER_FRAME = 24 << 10 };
    bool large = (g->frame / PHASE) % 2 == 1;
    for (uint32_t b = 0; b < BYTES_PER_FRAME;) {
        uint32_t size = large ? urange(&g->r, 2048, 32768) : urange(&g->r, 16, 256);
        uint32_t life = hh_rng_below(&g->r, 100) < 8 ? urange(&g->r, 1000, 4000) : urange(&g->r, 1, 120);
        gen_alloc(g, size, life);
        b += size;
    }
}

/* One frame of "streaming". Zones are 150 frames apart; each lives three zone
   periods, then unloads at once. */
static void gen_streaming(gen_state *g) {
    enum { ZONE = 150, LOAD_FRAMES = 10, ZONE_BYTES = 3 << 20 };
    uint32_t in_zone = g->frame % ZONE, zone = g->frame / ZONE;
    if (in_zone < LOAD_FRAMES) {
        uint32_t unload = (zone + 3) * ZONE;           /* the whole zone dies at one frame */
        for (uint32_t b = 0; b < ZONE_BYTES / LOAD_FRAMES;) {
            uint32_t size = urange(&g->r, 1024, 16384);
            uint32_t life = hh_rng_below(&g->r, 100) < 5 ? 2000 : unload - g->frame;
            gen_alloc(g, size, life);
            b += size;
        }
    }
    uint32_t n = urange(&g->r, 20, 60);
    for (uint32_t i = 0; i < n; i++) gen_alloc(g, urange(&g->r, 64, 512), urange(&g->r, 5, 300));
}

/* One frame of "demo": hh-demo's heap traffic (viz/hh_demo.c) without its
   pins, which malloc cannot express. A level of 36 long-lived chunks of
   16-64 KiB with loader temporaries between them; every 75 frames two chunks
   stream out and two in (drawn as each chunk's lifetime: 75 frames times a
   geometric count with p = 2/36), and at 2/5 of the run a level transition
   unloads half of them; every 150 frames a wave of enemies (1-4 KiB, each
   with a 0.5-2 KiB AI path, living 30-130 frames) arrives over 40 frames and
   fires rockets (0.4-1 KiB, 8-45 frames), 1.5% of the live enemies a frame. */
typedef struct demo_gen { uint32_t enemies; uint16_t enemy_deaths[8192]; } demo_gen;
static demo_gen dg;

static uint32_t chunk_life(gen_state *g) {
    uint32_t k = 1;
    while (hh_rng_below(&g->r, 36) >= 2 && k < 100) k++;
    uint32_t life = 75 * k, end = g->frame + life, transition = g->t->frames * 2 / 5;
    if (g->frame < transition && end > transition && hh_rng_below(&g->r, 2)) life = transition - g->frame;
    return life;
}

static void gen_demo(gen_state *g) {
    uint32_t f = g->frame;
    if (f == 0) {
        dg = (demo_gen){ 0 };
        for (unsigned k = 0; k < 36; k++) {
            gen_alloc(g, urange(&g->r, 16384, 65536), chunk_life(g));
            if (k % 12 == 5) gen_alloc(g, urange(&g->r, 12288, 24576), MAX_LIFE);   /* GPU buffers */
            gen_alloc(g, urange(&g->r, 4096, 20480), 1 + urange(&g->r, 0, 40));
        }
    }
    dg.enemies -= dg.enemy_deaths[f % 8192];
    dg.enemy_deaths[f % 8192] = 0;
    if (f % 150 < 40) {
        for (uint32_t k = urange(&g->r, 4, 9); k > 0; k--) {
            uint32_t life = urange(&g->r, 30, 130);
            gen_alloc(g, urange(&g->r, 1024, 4096), life);
            gen_alloc(g, urange(&g->r, 512, 2048), life);
            dg.enemies++;
            dg.enemy_deaths[(f + life) % 8192]++;
        }
    }
    for (uint32_t k = 0; k < dg.enemies; k++)
        if (hh_rng_below(&g->r, 1000) < 15) gen_alloc(g, urange(&g->r, 384, 1024), urange(&g->r, 8, 45));
    if (f > 0 && f % 75 == 0)
        for (int k = 0; k < 2; k++) gen_alloc(g, urange(&g->r, 16384, 65536), chunk_life(g));
    if (f == g->t->frames * 2 / 5)                     /* the new level's half, with its loaders */
        for (int k = 0; k < 14; k++) {
            gen_alloc(g, urange(&g->r, 16384, 65536), chunk_life(g));
            gen_alloc(g, urange(&g->r, 4096, 16384), urange(&g->r, 1, 30));
        }
}

static trace trace_make(void (*gen)(gen_state *), uint32_t frames, uint64_t seed) {
    trace t = { .frames = frames };
    t.ops = tmem((size_t)MAX_OPS * sizeof *t.ops);
    t.size_of = tmem((size_t)MAX_OBJECTS * sizeof *t.size_of);
    t.frame_end = tmem((size_t)frames * sizeof *t.frame_end);
    gen_state g = { .r = { seed * 0x9E3779B97F4A7C15ULL + 7 }, .t = &t };
    g.dead_head = tmem((size_t)frames * sizeof *g.dead_head);
    g.next_dead = tmem((size_t)MAX_OBJECTS * sizeof *g.next_dead);
    memset(g.dead_head, 0xFF, (size_t)frames * sizeof *g.dead_head);
    size_t live = 0;
    for (uint32_t f = 0; f < frames; f++) {
        g.frame = f;
        for (uint32_t id = g.dead_head[f]; id != UINT32_MAX; id = g.next_dead[id]) {
            trace_push(&t, id, 0);
            live -= t.size_of[id];
        }
        size_t before = t.nops;
        gen(&g);
        for (size_t i = before; i < t.nops; i++) live += t.ops[i].size;
        if (live > t.peak_live) t.peak_live = live;
        t.frame_end[f] = (uint32_t)t.nops;
    }
    munmap(g.dead_head, (size_t)frames * sizeof *g.dead_head);
    munmap(g.next_dead, (size_t)MAX_OBJECTS * sizeof *g.next_dead);
    return t;
}

static void trace_free(trace *t) {
    munmap(t->ops, (size_t)MAX_OPS * sizeof *t->ops);
    munmap(t->size_of, (size_t)MAX_OBJECTS * sizeof *t->size_of);
    munmap(t->frame_end, (size_t)t->frames * sizeof *t->frame_end);
}

typedef struct workload { const char *name; void (*gen)(gen_state *); } workload;
static const workload workloads[] = { { "phases", gen_phases }, { "streaming", gen_streaming }, { "demo", gen_demo } };
enum { NW = sizeof workloads / sizeof workloads[0] };

static uint32_t frames_for(void) { return bench_quick() ? 2400 : 6000; }

/* ---------------------------------------------------------------------------
   hheap runs
--------------------------------------------------------------------------- */
typedef struct hh_result {
    double   top_ratio;          /* highest live byte / peak live */
    double   top_block_ratio;    /* highest live byte / peak live block bytes (headers excluded from the gap) */
    double   mean_frag;
    double   moved_over_freed;
    double   step_p50_us, step_p99_us, alloc_max_us;
    size_t   peak_block_bytes;   /* peak of used_bytes */
    uint32_t failed;
} hh_result;

static void quiet(hh_status s, const char *message, void *user) {
    (void)s;
    (void)message;
    (void)user;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Runs trace t on a heap of `capacity` bytes; max_moves / max_ns pick the
   step (steps false: none). Objects are filled with a byte of their id and
   spot-checked (first, middle, last byte) when freed: a bench that loses
   bytes is no bench. */
static hh_result run_hheap(const trace *t, size_t capacity, bool steps, uint32_t max_moves, uint64_t max_ns) {
    hh_result res = { 0 };
    hh_heap *h = NULL;
    hh_heap_desc d = { .capacity = capacity, .max_handles = 1u << 20 };
    if (hh_heap_create(&d, &h) != HH_OK) {
        fprintf(stderr, "bench_footprint: cannot create a heap of %zu bytes\n", capacity);
        exit(1);
    }
    hh_set_error_handler(quiet, NULL);          /* failed allocations are counted, not printed */
    const char *pol = getenv("HH_BENCH_POLICY");  /* auto (default), fill, slide */
    if (pol && strcmp(pol, "fill") == 0) hh_defrag_set_policy(h, HH_DEFRAG_FILL);
    if (pol && strcmp(pol, "slide") == 0) hh_defrag_set_policy(h, HH_DEFRAG_SLIDE);
    hh_handle *hd = calloc(t->objects, sizeof *hd);
    uint64_t *step_ns = calloc(t->frames, sizeof *step_ns);
    size_t highest = 0, freed = 0, moved = 0;
    double frag_sum = 0;
    uint64_t alloc_max = 0;
    size_t k = 0;
    for (uint32_t f = 0; f < t->frames; f++) {
        for (; k < t->frame_end[f]; k++) {
            op o = t->ops[k];
            if (o.size) {
                uint64_t t0 = bench_now_ns();
                hh_handle x = hh_alloc(h, o.size);
                uint64_t dt = bench_now_ns() - t0;
                if (dt > alloc_max) alloc_max = dt;
                if (hh_is_null(x)) {
                    res.failed++;
                    continue;
                }
                hd[o.id] = x;
                memset(hh_deref(h, x), (int)(o.id & 0xFF), o.size);
            } else if (!hh_is_null(hd[o.id])) {
                const unsigned char *p = hh_deref(h, hd[o.id]);
                uint32_t n = t->size_of[o.id];
                if (p[0] != (o.id & 0xFF) || p[n - 1] != (o.id & 0xFF) || p[n / 2] != (o.id & 0xFF)) {
                    fprintf(stderr, "bench_footprint: object %u corrupted\n", o.id);
                    exit(1);
                }
                hh_free(h, hd[o.id]);
                hd[o.id] = HH_NULL;
                freed += n;
            }
        }
        if (steps) {
            hh_defrag_report r = max_ns ? hh_defrag_step_ex(h, &(hh_defrag_budget){ .max_ns = max_ns })
                                        : hh_defrag_step(h, max_moves);
            step_ns[f] = r.elapsed_ns;
            moved += r.bytes_moved;
        }
        hh_defrag_metrics m;
        hh_defrag_metrics_get(h, &m);
        size_t top = hh_heap_managed_bytes(h) - m.top_free_bytes;
        if (top > highest) highest = top;
        frag_sum += m.fragmentation;
        hh_heap_stats s;
        hh_heap_stats_get(h, &s);
        if (s.used_bytes > res.peak_block_bytes) res.peak_block_bytes = s.used_bytes;
    }
    hh_heap_stats s;
    hh_heap_stats_get(h, &s);
    moved = (size_t)s.total_bytes_moved;               /* steps and allocation-time compaction alike */
    qsort(step_ns, t->frames, sizeof *step_ns, cmp_u64);
    res.top_ratio = (double)highest / (double)t->peak_live;
    res.top_block_ratio = (double)highest / (double)res.peak_block_bytes;
    res.mean_frag = frag_sum / t->frames;
    res.moved_over_freed = freed ? (double)moved / (double)freed : 0;
    res.step_p50_us = step_ns[t->frames / 2] / 1e3;
    res.step_p99_us = step_ns[t->frames * 99 / 100] / 1e3;
    res.alloc_max_us = alloc_max / 1e3;
    free(step_ns);
    free(hd);
    hh_heap_destroy(h);
    return res;
}

/* ---------------------------------------------------------------------------
   malloc runs (child processes)
--------------------------------------------------------------------------- */

/* Child: generates the trace, notes the resident set, runs it on malloc and
   prints the peak growth (VmHWM, which the generator's own peak may already
   hold: it is resident before the run starts, so it cancels out). */
static int child_main(const char *w, uint64_t seed) {
    for (int i = 0; i < NW; i++) {
        if (strcmp(workloads[i].name, w) != 0) continue;
        trace t = trace_make(workloads[i].gen, frames_for(), seed);
        void **p = tmem((size_t)t.objects * sizeof *p);
        double before = bench_vm_bytes("VmRSS:");
        for (size_t k = 0; k < t.nops; k++) {
            op o = t.ops[k];
            if (o.size) {
                p[o.id] = malloc(o.size);
                if (p[o.id]) memset(p[o.id], (int)(o.id & 0xFF), o.size);
            } else {
                free(p[o.id]);
                p[o.id] = NULL;
            }
        }
        double hwm = bench_vm_bytes("VmHWM:");
        printf("RESULT %.6f\n", (hwm - before) / (double)t.peak_live);
        return 0;
    }
    return 2;
}

static bool run_child(const char *self, const char *w, uint64_t seed, const char *preload, double *ratio) {
    char sd[32], buf[256];
    snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
    char *argv[] = { (char *)self, "--child", (char *)w, sd, NULL };
    return bench_spawn(argv, preload, buf, sizeof buf) && sscanf(buf, "RESULT %lf", ratio) == 1;
}

/* ---------------------------------------------------------------------------
   Main
--------------------------------------------------------------------------- */
enum { MAXSEEDS = 7, MAXPEERS = 6 };
typedef struct hh_case { const char *name; bool steps; uint32_t n; uint64_t ns; } hh_case;
static const hh_case cases[] = {
    { "hheap-nostep", false, 0, 0 }, { "hheap-16", true, 16, 0 },      { "hheap-64", true, 64, 0 },
    { "hheap-256", true, 256, 0 },   { "hheap-100us", true, 0, 100000 },
};
enum { NC = sizeof cases / sizeof cases[0] };

static bench_summary summ(const double *v, int n) {
    double c[MAXSEEDS];
    memcpy(c, v, (size_t)n * sizeof *c);
    return bench_summarise(c, n);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], strtoull(argv[3], NULL, 10));
    int seeds = bench_quick() ? 1 : 3;
    const char *pname[MAXPEERS] = { "glibc" }, *ppath[MAXPEERS] = { NULL };
    int np = 1;
    for (int i = 1; i < argc && np < MAXPEERS; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq || eq[1] == 0) {
            printf("bench_footprint: skipping peer argument '%s' (no library path)\n", argv[i]);
            continue;
        }
        *eq = 0;
        pname[np] = argv[i];
        ppath[np++] = eq + 1;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return 1;
    self[sl] = 0;
    printf("bench_footprint: %u frames, %d seed(s); ratios over peak live (requested) bytes\n", frames_for(), seeds);

    for (int w = 0; w < NW; w++) {
        double peer[MAXPEERS][MAXSEEDS], best[MAXSEEDS];
        hh_result hr[NC][MAXSEEDS], tight[2][MAXSEEDS];
        for (int s = 0; s < seeds; s++) {
            uint64_t seed = 1000 + (uint64_t)s;
            trace t = trace_make(workloads[w].gen, frames_for(), seed);
            best[s] = 1e300;
            for (int p = 0; p < np; p++) {
                if (!run_child(self, workloads[w].name, seed, ppath[p], &peer[p][s])) {
                    printf("bench_footprint: the %s run of %s failed\n", pname[p], workloads[w].name);
                    peer[p][s] = 0;
                    continue;
                }
                if (peer[p][s] < best[s]) best[s] = peer[p][s];
            }
            for (int c = 0; c < NC; c++) hr[c][s] = run_hheap(&t, 64u << 20, cases[c].steps, cases[c].n, cases[c].ns);
            size_t cap = (size_t)((double)hr[0][s].peak_block_bytes * 1.25);
            if (cap < HH_HEAP_MIN_CAPACITY) cap = HH_HEAP_MIN_CAPACITY;
            tight[0][s] = run_hheap(&t, cap, true, 64, 0);
            tight[1][s] = run_hheap(&t, cap, true, 256, 0);
            trace_free(&t);
        }
        const char *wn = workloads[w].name;
        char name[96];
        bench_summary bs = summ(best, seeds);
        for (int p = 0; p < np; p++) {
            snprintf(name, sizeof name, "%s-%s", wn, pname[p]);
            bench_print("footprint", name, "ratio", summ(peer[p], seeds), "best-peer", bs);
        }
        for (int c = 0; c < NC; c++) {
            double v[7][MAXSEEDS];
            for (int s = 0; s < seeds; s++) {
                v[0][s] = hr[c][s].top_ratio;
                v[1][s] = hr[c][s].mean_frag;
                v[2][s] = hr[c][s].moved_over_freed;
                v[3][s] = hr[c][s].step_p50_us;
                v[4][s] = hr[c][s].step_p99_us;
                v[5][s] = hr[c][s].alloc_max_us;
                v[6][s] = hr[c][s].top_block_ratio;
            }
            snprintf(name, sizeof name, "%s-%s", wn, cases[c].name);
            bench_print("footprint", name, "ratio", summ(v[0], seeds), "best-peer", bs);
            bench_summary fr = summ(v[1], seeds), mv = summ(v[2], seeds), p50 = summ(v[3], seeds),
                          p99 = summ(v[4], seeds), am = summ(v[5], seeds), tb = summ(v[6], seeds);
            printf("  %-22s top/peak-block %.3f  mean frag %.3f  moved/freed %.2f  step p50 %.1f us p99 %.1f us  slowest alloc %.1f us\n",
                   name, tb.median, fr.median, mv.median, p50.median, p99.median, am.median);
        }
        for (int k = 0; k < 2; k++) {
            double v[3][MAXSEEDS];
            for (int s = 0; s < seeds; s++) {
                v[0][s] = tight[k][s].failed;
                v[1][s] = tight[k][s].alloc_max_us;
                v[2][s] = tight[k][s].mean_frag;
            }
            snprintf(name, sizeof name, "%s-tight1.25-N%d", wn, k ? 256 : 64);
            bench_summary fa = summ(v[0], seeds), am = summ(v[1], seeds), fr = summ(v[2], seeds);
            printf("  %-22s failed allocs %.0f  slowest alloc %.1f us (min %.1f max %.1f)  mean frag %.3f\n", name,
                   fa.median, am.median, am.min, am.max, fr.median);
        }
    }
    return 0;
}
