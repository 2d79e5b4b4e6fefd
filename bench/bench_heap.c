/* bench_heap.c -- the relocatable handle heap against same-run baselines
 * (see bench_util.h for the BENCH line format). Every timed case runs ours and
 * the baseline alternately (A B A B ...), `bench_reps()` times each.
 *
 *   deref_seq            hh_deref of 1M handles in allocation order, reading 8 bytes
 *                        of each object, vs a raw pointer to the same object;
 *                        ns per access (goal <= 1.2x)
 *   deref_shuffled       the same in one random order shared by both sides (goal <= 2.0x, issue 12)
 *   deref_call_seq       the exported function (hh_deref) instead of the inline macro
 *   deref_many_seq, deref_many_shuffled
 *                        hh_deref_many over chunks of 64 handles, each chunk's payloads
 *                        read right after (the raw side is the same plain loop)
 *   deref_floor_seq, deref_floor_shuffled
 *                        hh_deref against the lower bound of any handle table: the
 *                        same two dependent loads (the handle's slot, then the
 *                        payload) through the heap's own table with no test at all
 *                        -- what the checks (range, key, tag) cost over the floor
 *   deref_shuffled_thp   deref_shuffled on a heap made with HH_HEAP_HUGE_PAGES (range and
 *                        slots in transparent huge pages; the raw pointers share the range)
 *   alloc_free_churn     10,000 live slots; each op frees a random slot and refills
 *                        it with a size from a game-object mix (16 B .. 8 KiB);
 *                        hh_alloc + hh_free vs malloc + free on the same size and slot
 *                        sequence; ns per alloc+free pair (goal <= 1.0x)
 *   alloc_free_churn_16_1024  the same churn over 20,000 live slots, sizes uniform in
 *                        16..1024 B (the issue 12 figure; goal <= 1.2x)
 *   alloc_free_batch     10,000 allocations of the mix, then free all in random order
 *   alloc_free_64B_lifo  alloc 64 B, touch, free at once: the fast paths alone
 *                        (the allocation cases keep one heap across their reps, as
 *                        malloc keeps its arena: both pay first-touch faults once)
 *   mem_*                100,000 live blocks of the mix (or of 32 B):
 *     mem_overhead_<mix>   bytes per live block beyond the usable payload: block header,
 *                          padding, handle slot and the heap's own metadata
 *                          (hh_heap_overhead_bytes) vs glibc's chunk overhead (mallinfo2)
 *     mem_rounding_<mix>   usable minus requested bytes per block (hh_size vs
 *                          malloc_usable_size)
 *     mem_total_<mix>      every byte the allocator holds for the blocks, per block
 *
 * QUICK=1: 256K objects for deref, fewer ops, 3 repetitions.
 * bench_heap deref|alloc|mem runs one group of cases alone.
 * bench_heap --record TRACE writes an hh_trace of a frame workload (see below).
 */
#define _GNU_SOURCE 1   /* malloc_usable_size, mallinfo2 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hheap.h"
#include "bench_util.h"

static volatile uint64_t sink;

/* ---------------------------------------------------------------------------
   Helpers
--------------------------------------------------------------------------- */
/* Game-object size mix: 70% 16..128 B, 25% 129..1024 B, 5% 1..8 KiB. */
static size_t mix_size(hh_rng *r) {
    uint32_t k = hh_rng_below(r, 100);
    if (k < 70) return 16 + hh_rng_below(r, 113);
    if (k < 95) return 129 + hh_rng_below(r, 896);
    return 1025 + hh_rng_below(r, 7168);
}

static void shuffle_u32(uint32_t *v, size_t n, hh_rng *r) {
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = hh_rng_below(r, (uint32_t)(i + 1));
        uint32_t t = v[i]; v[i] = v[j]; v[j] = t;
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) { fprintf(stderr, "bench_heap: out of memory (%zu bytes)\n", n); exit(1); }
    return p;
}

static hh_heap *heap_make(size_t capacity, uint32_t max_handles, uint32_t flags) {
    hh_heap *h = NULL;
    hh_status s = hh_heap_create(&(hh_heap_desc){ .capacity = capacity, .max_handles = max_handles, .flags = flags }, &h);
    if (s != HH_OK) { fprintf(stderr, "bench_heap: hh_heap_create: %s\n", hh_status_str(s)); exit(1); }
    return h;
}

static void print_single(const char *name, const char *unit, double ours, const char *base_name, double base) {
    bench_summary a = { ours, ours, ours }, b = { base, base, base };
    bench_print("heap", name, unit, a, base_name, b);
}

/* ---------------------------------------------------------------------------
   Deref: handles vs raw pointers to the very same objects
--------------------------------------------------------------------------- */
/* Every deref case (and its baseline) copies the heap, the array and the count
   into locals before its loop, as a user's loop has them: read through the
   ctx pointer they would be reloaded after every possible call, which
   measures the bench, not the lookup. */
typedef struct deref_ctx {
    hh_heap         *heap;
    const hh_handle *hs;       /* handles in visiting order */
    uint64_t *const *ps;       /* raw pointers in the same order */
    size_t           n;
    int              passes;
} deref_ctx;

static BENCH_NOINLINE double deref_inline_run(void *arg) {
    const deref_ctx *c = arg;
    const hh_heap *heap = c->heap;
    const hh_handle *hs = c->hs;
    size_t n = c->n;
    uint64_t sum = 0, t0 = bench_now_ns();
    for (int p = 0; p < c->passes; p++)
        for (size_t i = 0; i < n; i++) sum += *(const uint64_t *)hh_deref(heap, hs[i]);
    uint64_t dt = bench_now_ns() - t0;
    sink += sum;
    return (double)dt / ((double)c->n * c->passes);
}

static BENCH_NOINLINE double deref_call_run(void *arg) {
    const deref_ctx *c = arg;
    const hh_heap *heap = c->heap;
    const hh_handle *hs = c->hs;
    size_t n = c->n;
    uint64_t sum = 0, t0 = bench_now_ns();
    for (int p = 0; p < c->passes; p++)
        for (size_t i = 0; i < n; i++) sum += *(const uint64_t *)(hh_deref)(heap, hs[i]);
    uint64_t dt = bench_now_ns() - t0;
    sink += sum;
    return (double)dt / ((double)c->n * c->passes);
}

/* hh_deref_many in chunks of 64 handles, each chunk's payloads read right after. */
static BENCH_NOINLINE double deref_many_run(void *arg) {
    enum { CHUNK = 64 };
    const deref_ctx *c = arg;
    const hh_heap *heap = c->heap;
    const hh_handle *hs = c->hs;
    size_t n = c->n;
    void *out[CHUNK];
    uint64_t sum = 0, t0 = bench_now_ns();
    for (int p = 0; p < c->passes; p++)
        for (size_t i = 0; i < n; i += CHUNK) {
            size_t k = n - i < CHUNK ? n - i : CHUNK;
            hh_deref_many(heap, hs + i, k, out);
            for (size_t j = 0; j < k; j++) sum += *(const uint64_t *)out[j];
        }
    uint64_t dt = bench_now_ns() - t0;
    sink += sum;
    return (double)dt / ((double)c->n * c->passes);
}

static BENCH_NOINLINE double deref_raw_run(void *arg) {
    const deref_ctx *c = arg;
    uint64_t *const *ps = c->ps;
    size_t n = c->n;
    uint64_t sum = 0, t0 = bench_now_ns();
    for (int p = 0; p < c->passes; p++)
        for (size_t i = 0; i < n; i++) sum += *ps[i];
    uint64_t dt = bench_now_ns() - t0;
    sink += sum;
    return (double)dt / ((double)c->n * c->passes);
}

/* The floor: slot load, then payload load, nothing checked. It reads the
   heap's public-for-inlining head (heap.h: private to the library) only to
   measure the table the real lookup uses; not a usable lookup. */
static BENCH_NOINLINE double deref_floor_run(void *arg) {
    const deref_ctx *c = arg;
    const hh_heap_head *t = (const hh_heap_head *)(const void *)c->heap;
    const uint64_t *slots = t->slots;
    const char *base = t->base;
    const hh_handle *hs = c->hs;
    size_t n = c->n;
    uint64_t sum = 0, t0 = bench_now_ns();
    for (int p = 0; p < c->passes; p++)
        for (size_t i = 0; i < n; i++) {
            uint64_t w = slots[hs[i].id & HH_HANDLE_INDEX_MASK];
            sum += *(const uint64_t *)(const void *)(base + ((w >> 32) << HH_HEAP_SLOT_UNIT_SHIFT));
        }
    uint64_t dt = bench_now_ns() - t0;
    sink += sum;
    return (double)dt / ((double)c->n * c->passes);
}

/* flags: HH_HEAP_HUGE_PAGES for the *_thp cases (the raw pointers then point
   into huge pages too: the ratio shows what the slot table costs). */
static void bench_deref(size_t n, int reps, uint32_t flags) {
    enum { OBJ_BYTES = 32 };
    hh_heap *heap = heap_make(n * 64 + (4u << 20), (uint32_t)(n + 1024), flags);
    hh_handle *hs = xmalloc(n * sizeof *hs), *hs2 = xmalloc(n * sizeof *hs2);
    uint64_t **ps = xmalloc(n * sizeof *ps), **ps2 = xmalloc(n * sizeof *ps2);
    uint32_t *perm = xmalloc(n * sizeof *perm);
    for (size_t i = 0; i < n; i++) {
        hs[i] = hh_alloc(heap, OBJ_BYTES);
        if (hh_is_null(hs[i])) { fprintf(stderr, "bench_heap: hh_alloc failed at %zu\n", i); exit(1); }
        ps[i] = hh_deref(heap, hs[i]);
        memset(ps[i], 0, OBJ_BYTES);
        *ps[i] = i;
        perm[i] = (uint32_t)i;
    }
    hh_rng r = { 0x5EEDull };
    shuffle_u32(perm, n, &r);
    for (size_t i = 0; i < n; i++) {
        hs2[i] = hs[perm[i]];
        ps2[i] = ps[perm[i]];
    }
    deref_ctx seq = { heap, hs, (uint64_t *const *)ps, n, 20 };
    deref_ctx shuf = { heap, hs2, (uint64_t *const *)ps2, n, 3 };
    deref_inline_run(&seq); deref_raw_run(&seq);             /* warm the caches and TLB */
    if (flags & HH_HEAP_HUGE_PAGES) {
        bench_pair("heap", "deref_shuffled_thp", "ns/op", deref_inline_run, "raw_ptr", deref_raw_run, &shuf, reps);
        free(perm); free(ps2); free(ps); free(hs2); free(hs);
        hh_heap_destroy(heap);
        return;
    }
    bench_pair("heap", "deref_seq", "ns/op", deref_inline_run, "raw_ptr", deref_raw_run, &seq, reps);
    bench_pair("heap", "deref_shuffled", "ns/op", deref_inline_run, "raw_ptr", deref_raw_run, &shuf, reps);
    bench_pair("heap", "deref_call_seq", "ns/op", deref_call_run, "raw_ptr", deref_raw_run, &seq, reps);
    bench_pair("heap", "deref_many_seq", "ns/op", deref_many_run, "raw_ptr", deref_raw_run, &seq, reps);
    bench_pair("heap", "deref_many_shuffled", "ns/op", deref_many_run, "raw_ptr", deref_raw_run, &shuf, reps);
    bench_pair("heap", "deref_floor_seq", "ns/op", deref_inline_run, "two_loads", deref_floor_run, &seq, reps);
    bench_pair("heap", "deref_floor_shuffled", "ns/op", deref_inline_run, "two_loads", deref_floor_run, &shuf, reps);
    printf("heap: deref over %zu objects of %d B (%.1f MiB of blocks, %.1f MiB of handle slots)\n", n, OBJ_BYTES,
           (double)n * ((OBJ_BYTES + HH_HEAP_HEADER_BYTES + 15) & ~15) / 1048576.0, (double)n * sizeof(hh_handle_slot) / 1048576.0);
    free(perm); free(ps2); free(ps); free(hs2); free(hs);
    hh_heap_destroy(heap);
}

/* ---------------------------------------------------------------------------
   Allocation: one op sequence, replayed on hh_alloc/hh_free and malloc/free
--------------------------------------------------------------------------- */
typedef struct churn_ctx {
    size_t    slots;           /* live slots */
    size_t    ops;             /* timed ops */
    uint32_t *slot_seq;        /* [ops] slot each op refills */
    size_t   *size_seq;        /* [slots + ops] sizes: prefill, then one per op */
    hh_handle *hs;             /* [slots] */
    void    **ps;              /* [slots] */
    size_t    capacity;
    hh_heap  *heap;            /* kept across reps, as malloc keeps its arena (churn_heap) */
} churn_ctx;

/* The heap a case's reps share. malloc's arena outlives a rep, so from the
   second rep on glibc runs on pages it has already touched; a fresh heap per
   rep made every hheap rep pay first-touch page faults (~15 us each on these
   VMs), a cost glibc paid once. Both sides now pay it once, in their first rep;
   the medians compare steady states. churn_done destroys it. */
static hh_heap *churn_heap(churn_ctx *c) {
    if (!c->heap) c->heap = heap_make(c->capacity, 0, 0);
    return c->heap;
}

static void churn_done(churn_ctx *c) {
    if (c->heap) hh_heap_destroy(c->heap);
    c->heap = NULL;
}

static BENCH_NOINLINE double churn_hheap(void *arg) {
    churn_ctx *c = arg;
    hh_heap *heap = churn_heap(c);
    for (size_t i = 0; i < c->slots; i++) {
        c->hs[i] = hh_alloc(heap, c->size_seq[i]);
        *(uint64_t *)hh_deref(heap, c->hs[i]) = i;
    }
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < c->ops; i++) {
        uint32_t s = c->slot_seq[i];
        hh_free(heap, c->hs[s]);
        hh_handle h = hh_alloc(heap, c->size_seq[c->slots + i]);
        *(uint64_t *)hh_deref(heap, h) = i;
        c->hs[s] = h;
    }
    uint64_t dt = bench_now_ns() - t0;
    for (size_t i = 0; i < c->slots; i++) hh_free(heap, c->hs[i]);
    return (double)dt / (double)c->ops;
}

static BENCH_NOINLINE double churn_malloc(void *arg) {
    churn_ctx *c = arg;
    for (size_t i = 0; i < c->slots; i++) {
        c->ps[i] = malloc(c->size_seq[i]);
        *(uint64_t *)c->ps[i] = i;
    }
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < c->ops; i++) {
        uint32_t s = c->slot_seq[i];
        free(c->ps[s]);
        void *p = malloc(c->size_seq[c->slots + i]);
        *(uint64_t *)p = i;
        c->ps[s] = p;
    }
    uint64_t dt = bench_now_ns() - t0;
    for (size_t i = 0; i < c->slots; i++) free(c->ps[i]);
    return (double)dt / (double)c->ops;
}

/* Batch: allocate all slots (timed), then free them in the order of slot_seq
   (a permutation of 0..slots-1, timed); `ops` rounds. */
static BENCH_NOINLINE double batch_hheap(void *arg) {
    churn_ctx *c = arg;
    hh_heap *heap = churn_heap(c);
    uint64_t t0 = bench_now_ns();
    for (size_t r = 0; r < c->ops; r++) {
        for (size_t i = 0; i < c->slots; i++) {
            c->hs[i] = hh_alloc(heap, c->size_seq[i]);
            *(uint64_t *)hh_deref(heap, c->hs[i]) = i;
        }
        for (size_t i = 0; i < c->slots; i++) hh_free(heap, c->hs[c->slot_seq[i]]);
    }
    uint64_t dt = bench_now_ns() - t0;
    return (double)dt / (double)(c->ops * c->slots);
}

static BENCH_NOINLINE double batch_malloc(void *arg) {
    churn_ctx *c = arg;
    uint64_t t0 = bench_now_ns();
    for (size_t r = 0; r < c->ops; r++) {
        for (size_t i = 0; i < c->slots; i++) {
            c->ps[i] = malloc(c->size_seq[i]);
            *(uint64_t *)c->ps[i] = i;
        }
        for (size_t i = 0; i < c->slots; i++) free(c->ps[c->slot_seq[i]]);
    }
    uint64_t dt = bench_now_ns() - t0;
    return (double)dt / (double)(c->ops * c->slots);
}

/* LIFO: alloc 64 B, write it, free it, `ops` times. */
static BENCH_NOINLINE double lifo_hheap(void *arg) {
    churn_ctx *c = arg;
    hh_heap *heap = churn_heap(c);
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < c->ops; i++) {
        hh_handle h = hh_alloc(heap, 64);
        *(volatile uint64_t *)hh_deref(heap, h) = i;
        hh_free(heap, h);
    }
    uint64_t dt = bench_now_ns() - t0;
    return (double)dt / (double)c->ops;
}

static BENCH_NOINLINE double lifo_malloc(void *arg) {
    churn_ctx *c = arg;
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < c->ops; i++) {
        void *p = malloc(64);
        *(volatile uint64_t *)p = i;
        free(p);
    }
    uint64_t dt = bench_now_ns() - t0;
    return (double)dt / (double)c->ops;
}

static void bench_alloc(size_t ops, int reps) {
    enum { SLOTS = 10000 };
    churn_ctx c = { .slots = SLOTS, .ops = ops, .capacity = 64u << 20 };
    c.slot_seq = xmalloc((ops > SLOTS ? ops : SLOTS) * sizeof *c.slot_seq);
    c.size_seq = xmalloc((SLOTS + ops) * sizeof *c.size_seq);
    c.hs = xmalloc(SLOTS * sizeof *c.hs);
    c.ps = xmalloc(SLOTS * sizeof *c.ps);
    hh_rng r = { 0xA110Cull };
    for (size_t i = 0; i < SLOTS + ops; i++) c.size_seq[i] = mix_size(&r);
    for (size_t i = 0; i < ops; i++) c.slot_seq[i] = hh_rng_below(&r, SLOTS);
    bench_pair("heap", "alloc_free_churn", "ns/op", churn_hheap, "glibc", churn_malloc, &c, reps);
    churn_done(&c);

    {                                                        /* uniform 16..1024 B over 20k slots */
        enum { USLOTS = 2 * SLOTS };
        churn_ctx u = { .slots = USLOTS, .ops = ops, .capacity = 64u << 20 };
        u.slot_seq = xmalloc(ops * sizeof *u.slot_seq);
        u.size_seq = xmalloc((USLOTS + ops) * sizeof *u.size_seq);
        u.hs = xmalloc(USLOTS * sizeof *u.hs);
        u.ps = xmalloc(USLOTS * sizeof *u.ps);
        for (size_t i = 0; i < USLOTS + ops; i++) u.size_seq[i] = 16 + hh_rng_below(&r, 1009);
        for (size_t i = 0; i < ops; i++) u.slot_seq[i] = hh_rng_below(&r, USLOTS);
        bench_pair("heap", "alloc_free_churn_16_1024", "ns/op", churn_hheap, "glibc", churn_malloc, &u, reps);
        churn_done(&u);
        free(u.ps); free(u.hs); free(u.size_seq); free(u.slot_seq);
    }

    for (uint32_t i = 0; i < SLOTS; i++) c.slot_seq[i] = i;
    shuffle_u32(c.slot_seq, SLOTS, &r);
    churn_ctx b = c;
    b.ops = ops / SLOTS > 4 ? ops / SLOTS / 4 : 1;          /* rounds */
    bench_pair("heap", "alloc_free_batch", "ns/op", batch_hheap, "glibc", batch_malloc, &b, reps);
    churn_done(&b);

    churn_ctx l = c;
    l.ops = ops * 4;
    l.capacity = 1u << 20;
    bench_pair("heap", "alloc_free_64B_lifo", "ns/op", lifo_hheap, "glibc", lifo_malloc, &l, reps);
    churn_done(&l);
    printf("heap: alloc/free mix 70%% 16-128 B, 25%% 129-1024 B, 5%% 1-8 KiB; churn %zu ops over %d live slots\n", ops,
           (int)SLOTS);
    free(c.ps); free(c.hs); free(c.size_seq); free(c.slot_seq);
}

/* ---------------------------------------------------------------------------
   Memory: overhead and rounding per live block (deterministic, one run)
--------------------------------------------------------------------------- */
static void bench_memory(const char *mix, size_t n, size_t fixed) {
    hh_rng r = { 0x3E3Full };
    size_t *req = xmalloc(n * sizeof *req);
    for (size_t i = 0; i < n; i++) req[i] = fixed ? fixed : mix_size(&r);

    /* A heap sized for its load (whole blocks + 25% + 1 MiB): the heap's bitmaps
       scale with capacity, so an oversized heap would inflate the per-block figure. */
    size_t whole = 0;
    for (size_t i = 0; i < n; i++) whole += (req[i] + HH_HEAP_HEADER_BYTES + 15) & ~(size_t)15;   /* header + payload, a granule */
    hh_heap *heap = heap_make(whole + whole / 4 + (1u << 20), (uint32_t)(n + 64), 0);
    hh_handle *hs = xmalloc(n * sizeof *hs);
    size_t req_total = 0, ours_usable = 0;
    for (size_t i = 0; i < n; i++) {
        hs[i] = hh_alloc(heap, req[i]);
        if (hh_is_null(hs[i])) { fprintf(stderr, "bench_heap: memory case: hh_alloc failed\n"); exit(1); }
        req_total += req[i];
        ours_usable += hh_size(heap, hs[i]);
    }
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    size_t meta = hh_heap_overhead_bytes(heap);
    double ours_overhead = ((double)st.used_bytes - (double)ours_usable + (double)meta) / (double)n;
    double ours_round = ((double)ours_usable - (double)req_total) / (double)n;
    double ours_total = ((double)st.used_bytes + (double)meta) / (double)n;

    void **ps = xmalloc(n * sizeof *ps);
    struct mallinfo2 before = mallinfo2();
    size_t glibc_usable = 0;
    for (size_t i = 0; i < n; i++) {
        ps[i] = malloc(req[i]);
        glibc_usable += malloc_usable_size(ps[i]);
    }
    struct mallinfo2 after = mallinfo2();
    double held = (double)(after.uordblks - before.uordblks) + (double)(after.hblkhd - before.hblkhd);
    double glibc_overhead = (held - (double)glibc_usable) / (double)n;
    double glibc_round = ((double)glibc_usable - (double)req_total) / (double)n;
    double glibc_total = held / (double)n;

    char name[64];
    snprintf(name, sizeof name, "mem_overhead_%s", mix);
    print_single(name, "bytes/block", ours_overhead, "glibc", glibc_overhead);
    snprintf(name, sizeof name, "mem_rounding_%s", mix);
    print_single(name, "bytes/block", ours_round, "glibc", glibc_round);
    snprintf(name, sizeof name, "mem_total_%s", mix);
    print_single(name, "bytes/block", ours_total, "glibc", glibc_total);
    printf("heap: %s: %zu blocks, %.1f requested B/block; hheap: %u B header + %zu B handle slot per block, "
           "metadata outside the range %zu B (%.2f B/block) for a %.1f MiB heap\n",
           mix, n, (double)req_total / (double)n, (unsigned)HH_HEAP_HEADER_BYTES, sizeof(uint64_t), meta,
           (double)meta / (double)n, (double)st.capacity / 1048576.0);

    for (size_t i = 0; i < n; i++) free(ps[i]);
    free(ps);
    free(hs);
    hh_heap_destroy(heap);
    free(req);
}

/* ---------------------------------------------------------------------------
   --record PATH: a game-like frame workload recorded with hh_trace, for
   build/hh-replay (bench/run.py replays it). Each frame allocates and frees about
   150 objects of the mix, resizes a few, pins one across the frame and calls
   hh_defrag_step(heap, 16). Every call succeeds (a failed call that changed the
   heap would not be in the trace).
--------------------------------------------------------------------------- */
static int record_frames(const char *path, int frames) {
    enum { LIVE_MAX = 20000 };
    hh_heap *heap = heap_make(32u << 20, LIVE_MAX + 64, 0);
    hh_trace *tr = NULL;
    if (hh_trace_open(heap, path, &tr) != HH_OK) return 1;
    hh_handle *live = xmalloc(LIVE_MAX * sizeof *live);
    size_t n = 0;
    hh_rng r = { 0xF4A3Eull };
    for (int f = 0; f < frames; f++) {
        size_t target = 8000 + (size_t)(4000.0 * (f % 200 < 100 ? f % 100 : 100 - f % 100) / 100.0);
        for (int k = 0; k < 150; k++) {
            if (n < target || (n < LIVE_MAX && hh_rng_below(&r, 2))) {
                hh_handle h = hh_rng_below(&r, 10) == 0 ? hh_alloc_ex(heap, mix_size(&r), 64, 1 + hh_rng_below(&r, 4))
                                                     : hh_alloc(heap, mix_size(&r));
                if (hh_is_null(h)) break;
                live[n++] = h;
            }
            if (n > 0 && (n > target || hh_rng_below(&r, 2))) {
                size_t j = hh_rng_below(&r, (uint32_t)n);
                hh_free(heap, live[j]);
                live[j] = live[--n];
            }
        }
        for (int k = 0; k < 5 && n > 0; k++) hh_resize(heap, live[hh_rng_below(&r, (uint32_t)n)], mix_size(&r));
        hh_handle pinned = n ? live[hh_rng_below(&r, (uint32_t)n)] : HH_NULL;
        if (n) hh_pin(heap, pinned);
        hh_defrag_step(heap, 16);
        if (n) hh_unpin(heap, pinned);
    }
    uint64_t events = hh_trace_event_count(tr);
    hh_status st = hh_trace_close(tr);
    printf("heap: recorded %llu events over %d frames into %s\n", (unsigned long long)events, frames, path);
    free(live);
    hh_heap_destroy(heap);
    return st == HH_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--record") == 0) return record_frames(argv[2], bench_quick() ? 300 : 1500);
    const char *only = argc == 2 ? argv[1] : "";   /* one group: targeted runs on a shared machine */
    if (argc > 2 || (argc == 2 && strcmp(only, "deref") && strcmp(only, "alloc") && strcmp(only, "mem"))) {
        fprintf(stderr, "usage: bench_heap [deref|alloc|mem] | --record TRACE\n");
        return 2;
    }
    int quick = bench_quick(), reps = bench_reps();
    if (!*only || !strcmp(only, "deref")) {
        bench_deref(quick ? 256u * 1024 : 1024u * 1024, reps, 0);
        bench_deref(quick ? 256u * 1024 : 1024u * 1024, reps, HH_HEAP_HUGE_PAGES);
    }
    if (!*only || !strcmp(only, "alloc")) bench_alloc(quick ? 200000 : 1000000, reps);
    if (!*only || !strcmp(only, "mem")) {
        bench_memory("mix", 100000, 0);
        bench_memory("32B", 100000, 32);
    }
    return 0;
}
