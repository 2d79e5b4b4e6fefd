/* bench_instr.c -- callgrind driver: instructions per fast-path call.
 *
 * Run by bench/run.py (make bench-instr) as
 *   valgrind --tool=callgrind --instr-atstart=no build/bench/bench_instr
 * Each measurement is a loop of K calls bracketed by callgrind client requests
 * (zero, start instrumentation, loop, stop, dump with a name), so each dump holds
 * exactly the loop. For every case the program prints
 *   INSTR <region> <case> <ops> <dump> <baseline> <ops> <dump>
 * and the runner turns the two dumps into a BENCH line of Ir/op (instructions per
 * operation, loop overhead included on both sides): ours against a baseline
 * doing the nearest plain-C thing (raw pointer load, glibc malloc/free, memmove).
 * Instruction counts do not depend on machine noise: track them over time.
 *
 * Run natively, the client requests are no-ops and it only checks it works.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <valgrind/callgrind.h>

#include "hheap.h"
#include "bench_util.h"

enum { K = 10000 };

static volatile uint64_t sink;
static hh_handle hs[K];
static void *ps[K];

#define MEASURE(dump, body)                 \
    do {                                    \
        CALLGRIND_ZERO_STATS;               \
        CALLGRIND_START_INSTRUMENTATION;    \
        body;                               \
        CALLGRIND_STOP_INSTRUMENTATION;     \
        CALLGRIND_DUMP_STATS_AT(dump);      \
    } while (0)

static void instr_line(const char *region, const char *name, long ops, const char *dump, const char *base, long bops,
                       const char *bdump) {
    printf("INSTR %s %s %ld %s %s %ld %s\n", region, name, ops, dump, base, bops, bdump);
}

static hh_heap *heap_make(size_t capacity) {
    hh_heap *h = NULL;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = capacity, .max_handles = 4 * K }, &h) != HH_OK) {
        fprintf(stderr, "bench_instr: hh_heap_create failed\n");
        exit(1);
    }
    return h;
}

/* ---------------------------------------------------------------------------
   Loops (noinline so each is the same code natively and under callgrind)
--------------------------------------------------------------------------- */
static BENCH_NOINLINE void loop_deref_inline(hh_heap *heap) {
    uint64_t s = 0;
    for (int i = 0; i < K; i++) s += *(const uint64_t *)hh_deref(heap, hs[i]);
    sink += s;
}
static BENCH_NOINLINE void loop_deref_call(hh_heap *heap) {
    uint64_t s = 0;
    for (int i = 0; i < K; i++) s += *(const uint64_t *)(hh_deref)(heap, hs[i]);
    sink += s;
}
static BENCH_NOINLINE void loop_raw_load(void) {
    uint64_t s = 0;
    for (int i = 0; i < K; i++) s += *(const uint64_t *)ps[i];
    sink += s;
}
static BENCH_NOINLINE void loop_hh_alloc(hh_heap *heap, size_t size) {
    for (int i = 0; i < K; i++) hs[i] = hh_alloc(heap, size);
}
static BENCH_NOINLINE void loop_hh_free(hh_heap *heap) {
    for (int i = 0; i < K; i++) hh_free(heap, hs[i]);
}
static BENCH_NOINLINE void loop_malloc(size_t size) {
    for (int i = 0; i < K; i++) ps[i] = malloc(size);
}
static BENCH_NOINLINE void loop_free(void) {
    for (int i = 0; i < K; i++) free(ps[i]);
}

/* ---------------------------------------------------------------------------
   Heap
--------------------------------------------------------------------------- */
static void instr_heap(void) {
    hh_heap *heap = heap_make(16u << 20);
    /* warm-up round on both sides (first-touch paths, glibc's arena setup) */
    loop_hh_alloc(heap, 64); loop_hh_free(heap);
    loop_malloc(64); loop_free();

    MEASURE("heap_alloc", loop_hh_alloc(heap, 64));
    MEASURE("glibc_malloc", loop_malloc(64));
    instr_line("heap", "hh_alloc_64B", K, "heap_alloc", "malloc", K, "glibc_malloc");
    for (int i = 0; i < K; i++) *(uint64_t *)hh_deref(heap, hs[i]) = (uint64_t)i;
    for (int i = 0; i < K; i++) *(uint64_t *)ps[i] = (uint64_t)i;
    loop_deref_inline(heap); loop_raw_load();
    MEASURE("heap_deref", loop_deref_inline(heap));
    MEASURE("raw_load", loop_raw_load());
    instr_line("heap", "hh_deref", K, "heap_deref", "raw_ptr", K, "raw_load");
    MEASURE("heap_deref_call", loop_deref_call(heap));
    instr_line("heap", "hh_deref_call", K, "heap_deref_call", "raw_ptr", K, "raw_load");
    MEASURE("heap_free", loop_hh_free(heap));
    MEASURE("glibc_free", loop_free());
    instr_line("heap", "hh_free_64B", K, "heap_free", "free", K, "glibc_free");
    hh_heap_destroy(heap);

    /* The same allocations on a fresh heap: no freed block of the size waits
       in the free-block cache, every block is carved from the top region
       (the path of a heap that grows; glibc: the same warm malloc loop). */
    heap = heap_make(16u << 20);
    MEASURE("heap_alloc_carve", loop_hh_alloc(heap, 64));
    MEASURE("glibc_malloc_carve", loop_malloc(64));
    instr_line("heap", "hh_alloc_64B_carve", K, "heap_alloc_carve", "malloc", K, "glibc_malloc_carve");
    loop_free();
    hh_heap_destroy(heap);
}

/* ---------------------------------------------------------------------------
   Defrag: one unlimited step over K blocks of 64 B with every other one freed
   (the second such round: the first grows the journal and makes the service state)
--------------------------------------------------------------------------- */
static uint32_t moves_made;
static BENCH_NOINLINE void loop_defrag(hh_heap *heap) { moves_made = hh_defrag_step(heap, HH_DEFRAG_UNLIMITED).moves; }
static BENCH_NOINLINE void loop_memmove(char *buf, long n, size_t bytes) {
    for (long i = 0; i < n; i++) memmove(buf + (size_t)i * bytes, buf + (size_t)(i + 1) * bytes, bytes);
}

static void instr_defrag(void) {
    hh_heap *heap = heap_make(16u << 20);
    loop_hh_alloc(heap, 64);                  /* warm-up round: the service state and the journal */
    for (int i = 0; i < K; i += 2) hh_free(heap, hs[i]);   /* grow once, as in a game's first frames */
    loop_defrag(heap);
    for (int i = 1; i < K; i += 2) hh_free(heap, hs[i]);
    hh_defrag_full(heap);                     /* no hole, no cached block: the next K blocks are laid */
    loop_hh_alloc(heap, 64);                  /* out in address order, and every other one is freed */
    for (int i = 0; i < K; i += 2) hh_free(heap, hs[i]);
    MEASURE("defrag_step", loop_defrag(heap));   /* (the step also merges those K/2 cached frees) */
    hh_heap_destroy(heap);
    if (moves_made == 0) {
        printf("instr: hh_defrag_step made no move\n");
        return;
    }
    char *buf = malloc((size_t)(moves_made + 2) * 64);
    memset(buf, 1, (size_t)(moves_made + 2) * 64);
    MEASURE("memmove_64B", loop_memmove(buf, moves_made, 64));
    free(buf);
    instr_line("defrag", "defrag_step_per_move_64B", moves_made, "defrag_step", "memmove_64B", moves_made, "memmove_64B");
}

/* ---------------------------------------------------------------------------
   Linear: hh_memstack_alloc inside a mark
--------------------------------------------------------------------------- */
static BENCH_NOINLINE void loop_memstack(hh_memstack *ms) {
    for (int i = 0; i < K; i++) ps[i] = hh_memstack_alloc(ms, 32, 16);
}

static void instr_linear(void) {
    hh_memstack *ms = NULL;
    if (hh_memstack_create(NULL, &ms) != HH_OK) {
        printf("instr: hh_memstack_create failed\n");
        return;
    }
    hh_mark m;
    hh_mark_push(ms, &m);
    loop_memstack(ms);                      /* warm: chunks fetched once */
    hh_mark_pop(&m);
    hh_mark_push(ms, &m);
    MEASURE("memstack_alloc", loop_memstack(ms));
    hh_mark_pop(&m);
    hh_memstack_destroy(ms);
    loop_malloc(32); loop_free();
    MEASURE("glibc_malloc32", loop_malloc(32));
    loop_free();
    instr_line("linear", "hh_memstack_alloc_32B", K, "memstack_alloc", "malloc", K, "glibc_malloc32");
}

/* ---------------------------------------------------------------------------
   Binned: hh_bmalloc / hh_bfree of 64 B with a warm thread cache
--------------------------------------------------------------------------- */
static BENCH_NOINLINE void loop_bmalloc(size_t size) {
    for (int i = 0; i < K; i++) ps[i] = hh_bmalloc(size);
}
static BENCH_NOINLINE void loop_bfree(void) {
    for (int i = 0; i < K; i++) hh_bfree(ps[i]);
}

/* The fast paths alone: each block freed at once, so the bin never runs dry
   or full (K blocks in a row would count refills and flushes too). */
static BENCH_NOINLINE void loop_bpair(size_t size) {
    for (int i = 0; i < K; i++) {
        void *p = hh_bmalloc(size);
        ps[i & 7] = p;
        hh_bfree(p);
    }
}
static BENCH_NOINLINE void loop_pair(size_t size) {
    for (int i = 0; i < K; i++) {
        void *p = malloc(size);
        ps[i & 7] = p;
        free(p);
    }
}

static void instr_binned(void) {
    loop_bpair(64);
    MEASURE("bpair", loop_bpair(64));
    loop_pair(64);
    MEASURE("glibc_pair64", loop_pair(64));
    instr_line("binned", "hh_bmalloc+hh_bfree_64B_pair", K, "bpair", "malloc+free", K, "glibc_pair64");
    loop_bmalloc(64); loop_bfree();
    MEASURE("bmalloc", loop_bmalloc(64));
    MEASURE("bfree", loop_bfree());
    loop_malloc(64); loop_free();
    MEASURE("glibc_malloc64", loop_malloc(64));
    MEASURE("glibc_free64", loop_free());
    instr_line("binned", "hh_bmalloc_64B", K, "bmalloc", "malloc", K, "glibc_malloc64");
    instr_line("binned", "hh_bfree_64B", K, "bfree", "free", K, "glibc_free64");
}

int main(void) {
    instr_heap();
    instr_defrag();
    instr_linear();
    instr_binned();
    fflush(stdout);
    return 0;
}
