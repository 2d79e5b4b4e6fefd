/* bench_linear.c -- linear allocators against glibc malloc/free, same process,
 * interleaved (see bench_util.h for the BENCH line format).
 *
 *   memstack_10k_256B      10,000 allocations of 256 B then free all (mark push /
 *                          pop vs malloc + free of each), repeated; ns per allocation
 *   memstack_16B           the same with 16-byte allocations (the bump path's floor)
 *   memstack_thread_scope  hh_memstack_thread + HH_MARK_SCOPE + 4 allocations, as a
 *                          function would use it, vs 4 malloc/free pairs
 *   pool_64B               1,000 pool alloc then free of 64 B elements vs malloc/free
 *   pool_64B_churn         random alloc/free with ~500 live elements
 *   scratch_per_use        a "use" takes 3 temporary buffers (1, 4, 16 KiB) and ends;
 *                          scratch alloc + reset vs a fresh malloc + free per buffer
 *   scratch_256K_use       one 256 KiB temporary buffer per use
 *   memstack_10k_256B_notrim   the first case again, last, with glibc told never to
 *                          trim or mmap (mallopt): glibc's default gives the 2.5 MB
 *                          back after every round and page-faults it in again, which
 *                          dominates its figure; this shows the allocator cost alone
 *
 * Every figure is ns per allocation (or per use for the scratch cases); lower is better.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hheap.h"
#include "bench_util.h"

#if defined(__GNUC__) || defined(__clang__)
#  define HH_BENCH_NOINLINE __attribute__((noinline))
#else
#  define HH_BENCH_NOINLINE
#endif

enum { N_ALLOCS = 10000 };

static void *ptrs[N_ALLOCS];
static volatile uintptr_t sink;
static int rounds = 40;

/* ---------------------------------------------------------------------------
   Mark stack vs malloc
--------------------------------------------------------------------------- */
typedef struct stack_ctx { hh_memstack *ms; size_t size; } stack_ctx;

static double memstack_run(void *arg) {
    stack_ctx *c = arg;
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < rounds; r++) {
        hh_mark m;
        hh_mark_push(c->ms, &m);
        for (int i = 0; i < N_ALLOCS; i++) {
            char *p = hh_memstack_alloc(c->ms, c->size, 16);
            p[0] = (char)i;
            ptrs[i] = p;
        }
        sink += (uintptr_t)ptrs[N_ALLOCS - 1];
        hh_mark_pop(&m);
    }
    return (double)(bench_now_ns() - t0) / ((double)rounds * N_ALLOCS);
}

static double malloc_run(void *arg) {
    stack_ctx *c = arg;
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < N_ALLOCS; i++) {
            char *p = malloc(c->size);
            p[0] = (char)i;
            ptrs[i] = p;
        }
        sink += (uintptr_t)ptrs[N_ALLOCS - 1];
        for (int i = 0; i < N_ALLOCS; i++) free(ptrs[i]);
    }
    return (double)(bench_now_ns() - t0) / ((double)rounds * N_ALLOCS);
}

enum { SCOPE_CALLS = 200000 };

static HH_BENCH_NOINLINE void scope_body(void) {
    hh_memstack *ms = hh_memstack_thread();
    HH_MARK_SCOPE(m, ms);
    for (int i = 0; i < 4; i++) {
        char *p = hh_memstack_alloc(ms, 64 + 32 * (size_t)i, 16);
        p[0] = (char)i;
        sink += (uintptr_t)p;
    }
}

static HH_BENCH_NOINLINE void scope_body_malloc(void) {
    char *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = malloc(64 + 32 * (size_t)i);
        p[i][0] = (char)i;
        sink += (uintptr_t)p[i];
    }
    for (int i = 0; i < 4; i++) free(p[i]);
}

static double scope_run(void *arg) {
    (void)arg;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < SCOPE_CALLS; i++) scope_body();
    return (double)(bench_now_ns() - t0) / (SCOPE_CALLS * 4.0);
}

static double scope_malloc_run(void *arg) {
    (void)arg;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < SCOPE_CALLS; i++) scope_body_malloc();
    return (double)(bench_now_ns() - t0) / (SCOPE_CALLS * 4.0);
}

/* ---------------------------------------------------------------------------
   Pool vs malloc
--------------------------------------------------------------------------- */
enum { POOL_N = 1000, CHURN_OPS = 400000 };

static double pool_run(void *arg) {
    hh_pool *p = arg;
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < rounds * 10; r++) {
        for (int i = 0; i < POOL_N; i++) {
            char *e = hh_pool_alloc(p);
            e[0] = (char)i;
            ptrs[i] = e;
        }
        for (int i = 0; i < POOL_N; i++) hh_pool_free(p, ptrs[i]);
    }
    return (double)(bench_now_ns() - t0) / ((double)rounds * 10 * POOL_N);
}

static double pool_malloc_run(void *arg) {
    (void)arg;
    uint64_t t0 = bench_now_ns();
    for (int r = 0; r < rounds * 10; r++) {
        for (int i = 0; i < POOL_N; i++) {
            char *e = malloc(64);
            e[0] = (char)i;
            ptrs[i] = e;
        }
        for (int i = 0; i < POOL_N; i++) free(ptrs[i]);
    }
    return (double)(bench_now_ns() - t0) / ((double)rounds * 10 * POOL_N);
}

/* The same xorshift sequence drives both sides: slot i in [0, POOL_N) is
   freed if full, filled otherwise. */
static double churn(hh_pool *p) {
    uint64_t x = 88172645463325252ULL;
    memset(ptrs, 0, sizeof(void *) * POOL_N);
    uint64_t t0 = bench_now_ns();
    for (int op = 0; op < CHURN_OPS; op++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        unsigned i = (unsigned)(x % POOL_N);
        if (ptrs[i] != NULL) {
            if (p) hh_pool_free(p, ptrs[i]);
            else free(ptrs[i]);
            ptrs[i] = NULL;
        } else {
            char *e = p ? hh_pool_alloc(p) : malloc(64);
            e[0] = 1;
            ptrs[i] = e;
        }
    }
    double ns = (double)(bench_now_ns() - t0) / CHURN_OPS;
    for (unsigned i = 0; i < POOL_N; i++) {
        if (ptrs[i] == NULL) continue;
        if (p) hh_pool_free(p, ptrs[i]);
        else free(ptrs[i]);
    }
    return ns;
}
static double churn_pool(void *arg) { return churn(arg); }
static double churn_malloc(void *arg) { (void)arg; return churn(NULL); }

/* ---------------------------------------------------------------------------
   Scratch vs a fresh malloc per use
--------------------------------------------------------------------------- */
typedef struct scratch_ctx { hh_scratch *s; const size_t *sizes; int n; int uses; } scratch_ctx;

static double scratch_run(void *arg) {
    scratch_ctx *c = arg;
    uint64_t t0 = bench_now_ns();
    for (int u = 0; u < c->uses; u++) {
        for (int k = 0; k < c->n; k++) {
            char *b = hh_scratch_alloc(c->s, c->sizes[k], 64);
            b[0] = (char)u;
            b[c->sizes[k] - 1] = (char)k;
            sink += (uintptr_t)b;
        }
        hh_scratch_reset(c->s);
    }
    return (double)(bench_now_ns() - t0) / c->uses;
}

static double scratch_malloc_run(void *arg) {
    scratch_ctx *c = arg;
    char *b[8];
    uint64_t t0 = bench_now_ns();
    for (int u = 0; u < c->uses; u++) {
        for (int k = 0; k < c->n; k++) {
            b[k] = malloc(c->sizes[k]);
            b[k][0] = (char)u;
            b[k][c->sizes[k] - 1] = (char)k;
            sink += (uintptr_t)b[k];
        }
        for (int k = 0; k < c->n; k++) free(b[k]);
    }
    return (double)(bench_now_ns() - t0) / c->uses;
}

int main(void) {
    int reps = bench_reps();
    if (bench_quick()) rounds = 8;
    hh_memstack *ms = NULL;
    hh_pool *pool = NULL;
    hh_scratch *scratch = NULL;
    if (hh_memstack_create(NULL, &ms) != HH_OK ||
        hh_pool_create(&(hh_pool_desc){ .elem_size = 64, .capacity = POOL_N }, &pool) != HH_OK ||
        hh_scratch_create(NULL, &scratch) != HH_OK) {
        fprintf(stderr, "bench_linear: setup failed\n");
        return 1;
    }
    printf("# linear: %d repetitions per side, medians; ns per allocation (per use for scratch)\n", reps);

    stack_ctx big = { ms, 256 }, small = { ms, 16 };
    memstack_run(&big);  /* warm-up: pages mapped and cached, malloc arena grown */
    malloc_run(&big);
    bench_pair("linear", "memstack_10k_256B", "ns/op", memstack_run, "glibc_malloc_free", malloc_run, &big, reps);
    bench_pair("linear", "memstack_16B", "ns/op", memstack_run, "glibc_malloc_free", malloc_run, &small, reps);
    scope_run(NULL);
    bench_pair("linear", "memstack_thread_scope", "ns/op", scope_run, "glibc_malloc_free", scope_malloc_run, NULL,
               reps);
    bench_pair("linear", "pool_64B", "ns/op", pool_run, "glibc_malloc_free", pool_malloc_run, pool, reps);
    bench_pair("linear", "pool_64B_churn", "ns/op", churn_pool, "glibc_malloc_free", churn_malloc, pool, reps);

    static const size_t use3[] = { 1024, 4096, 16384 };
    static const size_t use256k[] = { 256 * 1024 };
    scratch_ctx sc3 = { scratch, use3, 3, rounds * 2000 }, sc256 = { scratch, use256k, 1, rounds * 200 };
    scratch_run(&sc3);
    bench_pair("linear", "scratch_per_use", "ns/use", scratch_run, "glibc_malloc_free", scratch_malloc_run, &sc3, reps);
    scratch_run(&sc256);
    bench_pair("linear", "scratch_256K_use", "ns/use", scratch_run, "glibc_malloc_free", scratch_malloc_run, &sc256,
               reps);

    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    malloc_run(&big);
    bench_pair("linear", "memstack_10k_256B_notrim", "ns/op", memstack_run, "glibc_malloc_free_notrim", malloc_run,
               &big, reps);

    hh_scratch_destroy(scratch);
    hh_pool_destroy(pool);
    hh_memstack_destroy(ms);
    hh_memstack_thread_release();
    return 0;
}
