/* bench_binned.c -- binned allocator benchmarks (make bench-binned).
 *
 * Workloads (our own):
 *   pairs     one thread: malloc + free of a small size (16..512 B), back to back
 *   churn     larson-like: 4 threads (BENCH_CHURN_THREADS) replace random slots of their own array
 *             of 8000 blocks (16..1024 B, ~16 MB live in all); one free in
 *             eight is of a block another thread allocated (blocks travel
 *             through per-thread mailboxes); 12M replacements in all
 *   many      churn with 16 threads on this 2-core machine (many threads:
 *             preemption inside the allocator, 16 thread caches)
 *   prodcons  one thread allocates 64..256 B blocks, another frees them
 *   mixed     a "game frame" loop: 150000 long-lived nodes (~17 MB), short
 *             strings, growing arrays (realloc), a few 64 KiB..1 MiB buffers
 *             per frame
 *   large     malloc-large-like: 8 slots of 5..25 MiB blocks replaced at
 *             random, every page of each new block written once (so mapping,
 *             unmapping and page faults count)
 *   release   memory that goes back without calls from the program: 8 MB
 *             stay live while 400 MB (3/4 in 16..2048 B blocks, 1/4 in
 *             64 KiB..1 MiB buffers) are allocated, written and freed; the
 *             program then sleeps 1 s, idle, and its rss figure is the
 *             resident size then (VmRSS), not the peak
 *
 * Part 1, in process: hh_b* against glibc malloc, interleaved (A B A B ...),
 * medians of bench_reps() runs: BENCH binned <workload> ns/op hh ... glibc ...
 * Part 2, out of process: the same workload binary on plain malloc under
 * LD_PRELOAD of each peer library given as name=path arguments (the Makefile
 * finds them with dpkg -L; the peer named shim-huge is our shim with
 * HHEAP_SMALL_HUGEPAGES=1) and of our shim, all interleaved per repetition:
 *   BENCH binned preload-<workload> ns/op shim ... <peer> ...
 *   BENCH binned rss-<workload> bytes shim ... glibc ...   (peak RSS: VmHWM)
 *   BENCH binned steady-<workload> ns/op shim ... <peer> ...   (churn, many)
 * and per workload one line against issue 13's targets (time <= 1.1x the best
 * peer's, RSS <= 1.1x the lowest peer's), reported, never failed. The steady
 * lines time the loops alone (from the moment every thread has filled its
 * slots until every thread has ended its loop), which separates the fast
 * paths from thread start, fill and exit; information, not a goal.
 * Internal mode: bench_binned --child <workload> <hh|libc> runs once and
 * prints "RESULT <ns/op> <peak RSS bytes> <steady ns/op>" (the `release`
 * workload: RSS 1 s after its frees instead; steady 0 where there is none).
 * BENCH_BINNED_ONLY=w1,w2 runs only the named workloads (both parts).
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "hheap/binned.h"

static volatile uintptr_t sink;
static int churn_threads = 4;  /* BENCH_CHURN_THREADS=n (1..16) overrides */
static double scale = 1.0;     /* QUICK=1: a third of the work */

/* Each workload is written once as a macro over the allocator calls and
   instantiated twice, so both sides run identical code with direct calls. */
#define DEFINE_WORKLOADS(NAME, MALLOC, FREE, REALLOC)                                                     \
    static double pairs_##NAME(void) {                                                                    \
        size_t sizes[256];                                                                                \
        hh_rng s = { 42 };                                                                                \
        for (int i = 0; i < 256; i++) sizes[i] = 16 + hh_rng_next(&s) % 497;                              \
        long n = (long)(20000000 * scale);                                                                \
        uintptr_t acc = 0;                                                                                \
        uint64_t t0 = bench_now_ns();                                                                     \
        for (long i = 0; i < n; i++) {                                                                    \
            char *p = MALLOC(sizes[i & 255]);                                                             \
            p[0] = (char)i;                                                                               \
            acc += (uintptr_t)p;                                                                          \
            FREE(p);                                                                                      \
        }                                                                                                 \
        sink = acc;                                                                                       \
        return (double)(bench_now_ns() - t0) / (double)n;                                                 \
    }                                                                                                     \
                                                                                                          \
    typedef struct churn_ctx_##NAME {                                                                     \
        pthread_mutex_t lock;                                                                             \
        void *mail[256];                                                                                  \
        unsigned n;                                                                                       \
        char pad[64];                                                                                     \
    } churn_ctx_##NAME;                                                                                   \
    static churn_ctx_##NAME churn_box_##NAME[CHURN_MAX];                                              \
    static long churn_ops_##NAME;                                                                         \
                                                                                                          \
    static void *churn_thread_##NAME(void *arg) {                                                         \
        unsigned id = (unsigned)(uintptr_t)arg;                                                           \
        enum { SLOTS = 8000 };                                                                            \
        void **slot = calloc(SLOTS, sizeof *slot);                                                        \
        hh_rng s = { id * 7919 + 1 };                                                                     \
        churn_ctx_##NAME *mine = &churn_box_##NAME[id], *next = &churn_box_##NAME[(id + 1) % churn_threads]; \
        for (unsigned i = 0; i < SLOTS; i++) slot[i] = MALLOC(16 + hh_rng_next(&s) % 1009);               \
        pthread_barrier_wait(&churn_gate); /* every thread has filled: the steady part starts */          \
        for (long k = 0; k < churn_ops_##NAME; k++) {                                                     \
            uint64_t r = hh_rng_next(&s);                                                                 \
            unsigned i = (unsigned)(r % SLOTS);                                                           \
            if ((r >> 32) % 8 == 0) {                                                                     \
                pthread_mutex_lock(&next->lock);                                                          \
                if (next->n < 256) {                                                                      \
                    next->mail[next->n++] = slot[i];                                                      \
                    slot[i] = NULL;                                                                       \
                }                                                                                         \
                pthread_mutex_unlock(&next->lock);                                                        \
            }                                                                                             \
            FREE(slot[i]);                                                                                \
            slot[i] = MALLOC(16 + (r >> 40) % 1009);                                                      \
            ((char *)slot[i])[0] = 1;                                                                     \
            if ((k & 63) == 0 && mine->n > 0) {                                                           \
                void *got[256];                                                                           \
                pthread_mutex_lock(&mine->lock);                                                          \
                unsigned m = mine->n;                                                                     \
                memcpy(got, mine->mail, m * sizeof *got);                                                 \
                mine->n = 0;                                                                              \
                pthread_mutex_unlock(&mine->lock);                                                        \
                for (unsigned j = 0; j < m; j++) FREE(got[j]);                                            \
            }                                                                                             \
        }                                                                                                 \
        pthread_barrier_wait(&churn_gate); /* every thread's loop has ended */                            \
        for (unsigned i = 0; i < SLOTS; i++) FREE(slot[i]);                                               \
        free(slot);                                                                                       \
        return NULL;                                                                                      \
    }                                                                                                     \
                                                                                                          \
    static double churn_##NAME(void) {                                                                    \
        pthread_t t[CHURN_MAX];                                                                       \
        churn_ops_##NAME = (long)(12000000 * scale) / churn_threads; /* 12M operations in all */           \
        for (int i = 0; i < churn_threads; i++) {                                                         \
            pthread_mutex_init(&churn_box_##NAME[i].lock, NULL);                                          \
            churn_box_##NAME[i].n = 0;                                                                    \
        }                                                                                                 \
        pthread_barrier_init(&churn_gate, NULL, (unsigned)churn_threads + 1);                             \
        uint64_t t0 = bench_now_ns();                                                                     \
        for (uintptr_t i = 0; i < (uintptr_t)churn_threads; i++)                                          \
            if (pthread_create(&t[i], NULL, churn_thread_##NAME, (void *)i) != 0) abort(); /* or the gate waits forever */ \
        pthread_barrier_wait(&churn_gate);                                                                \
        uint64_t t1 = bench_now_ns();                                                                     \
        pthread_barrier_wait(&churn_gate);                                                                \
        steady_result = (double)(bench_now_ns() - t1) / (double)(churn_ops_##NAME * churn_threads);       \
        for (int i = 0; i < churn_threads; i++) pthread_join(t[i], NULL);                                 \
        pthread_barrier_destroy(&churn_gate);                                                             \
        double ns = (double)(bench_now_ns() - t0) / (double)(churn_ops_##NAME * churn_threads);           \
        for (int i = 0; i < churn_threads; i++) {                                                         \
            for (unsigned j = 0; j < churn_box_##NAME[i].n; j++) FREE(churn_box_##NAME[i].mail[j]);      \
            churn_box_##NAME[i].n = 0;                                                                    \
        }                                                                                                 \
        return ns;                                                                                        \
    }                                                                                                     \
                                                                                                          \
    static double many_##NAME(void) {                                                                     \
        int keep = churn_threads;                                                                         \
        churn_threads = CHURN_MAX;                                                                        \
        double ns = churn_##NAME();                                                                       \
        churn_threads = keep;                                                                             \
        return ns;                                                                                        \
    }                                                                                                     \
                                                                                                          \
    static struct {                                                                                       \
        pthread_mutex_t lock;                                                                             \
        pthread_cond_t cond;                                                                              \
        void **batch[8];                                                                                  \
        unsigned head, count;                                                                             \
        int done;                                                                                         \
    } pc_##NAME = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, { 0 }, 0, 0, 0 };               \
                                                                                                          \
    static void *pc_consumer_##NAME(void *arg) {                                                          \
        (void)arg;                                                                                        \
        for (;;) {                                                                                        \
            pthread_mutex_lock(&pc_##NAME.lock);                                                          \
            while (pc_##NAME.count == 0 && !pc_##NAME.done) pthread_cond_wait(&pc_##NAME.cond, &pc_##NAME.lock); \
            if (pc_##NAME.count == 0) {                                                                   \
                pthread_mutex_unlock(&pc_##NAME.lock);                                                    \
                return NULL;                                                                              \
            }                                                                                             \
            void **b = pc_##NAME.batch[pc_##NAME.head];                                                   \
            pc_##NAME.head = (pc_##NAME.head + 1) % 8;                                                    \
            pc_##NAME.count--;                                                                            \
            pthread_cond_broadcast(&pc_##NAME.cond);                                                      \
            pthread_mutex_unlock(&pc_##NAME.lock);                                                        \
            for (int i = 0; i < PC_BATCH; i++) FREE(b[i]);                                                \
            free(b);                                                                                      \
        }                                                                                                 \
    }                                                                                                     \
                                                                                                          \
    static double prodcons_##NAME(void) {                                                                 \
        long batches = (long)(40000 * scale);                                                             \
        pthread_t c;                                                                                      \
        pc_##NAME.head = pc_##NAME.count = 0;                                                             \
        pc_##NAME.done = 0;                                                                               \
        hh_rng s = { 99 };                                                                                \
        uint64_t t0 = bench_now_ns();                                                                     \
        pthread_create(&c, NULL, pc_consumer_##NAME, NULL);                                               \
        for (long k = 0; k < batches; k++) {                                                              \
            void **b = malloc(PC_BATCH * sizeof *b);                                                      \
            for (int i = 0; i < PC_BATCH; i++) {                                                          \
                b[i] = MALLOC(64 + hh_rng_next(&s) % 193);                                                \
                ((char *)b[i])[0] = 1;                                                                    \
            }                                                                                             \
            pthread_mutex_lock(&pc_##NAME.lock);                                                          \
            while (pc_##NAME.count == 8) pthread_cond_wait(&pc_##NAME.cond, &pc_##NAME.lock);             \
            pc_##NAME.batch[(pc_##NAME.head + pc_##NAME.count++) % 8] = b;                                \
            pthread_cond_broadcast(&pc_##NAME.cond);                                                      \
            pthread_mutex_unlock(&pc_##NAME.lock);                                                        \
        }                                                                                                 \
        pthread_mutex_lock(&pc_##NAME.lock);                                                              \
        pc_##NAME.done = 1;                                                                               \
        pthread_cond_broadcast(&pc_##NAME.cond);                                                          \
        pthread_mutex_unlock(&pc_##NAME.lock);                                                            \
        pthread_join(c, NULL);                                                                            \
        return (double)(bench_now_ns() - t0) / (double)(batches * PC_BATCH);                              \
    }                                                                                                     \
                                                                                                          \
    static double mixed_##NAME(void) {                                                                    \
        enum { NODES = 150000, STRS = 512, VECS = 64 };                                                    \
        void **node = calloc(NODES, sizeof *node);                                                        \
        char **str = calloc(STRS, sizeof *str);                                                           \
        char **vec = calloc(VECS, sizeof *vec);                                                           \
        size_t *vlen = calloc(VECS, sizeof *vlen);                                                        \
        hh_rng s = { 7 };                                                                                 \
        long frames = (long)(400 * scale), ops = 0;                                                       \
        uint64_t t0 = bench_now_ns();                                                                     \
        for (long f = 0; f < frames; f++) {                                                               \
            for (int i = 0; i < 500; i++, ops++) { /* long-lived objects: replace a few */                \
                unsigned k = (unsigned)(hh_rng_next(&s) % NODES);                                         \
                FREE(node[k]);                                                                            \
                node[k] = MALLOC(32 + hh_rng_next(&s) % 160);                                             \
                memset(node[k], 1, 32);                                                                   \
            }                                                                                             \
            for (int i = 0; i < 2000; i++, ops++) { /* short strings */                                   \
                unsigned k = (unsigned)(hh_rng_next(&s) % STRS);                                          \
                FREE(str[k]);                                                                             \
                size_t len = 8 + hh_rng_next(&s) % 90;                                                    \
                str[k] = MALLOC(len);                                                                     \
                memset(str[k], 'a', len - 1);                                                             \
                str[k][len - 1] = 0;                                                                      \
            }                                                                                             \
            for (int i = 0; i < 200; i++, ops++) { /* growing arrays */                                   \
                unsigned k = (unsigned)(hh_rng_next(&s) % VECS);                                          \
                size_t n = vlen[k] ? vlen[k] * 2 : 16;                                                    \
                if (n > 65536) {                                                                          \
                    FREE(vec[k]);                                                                         \
                    vec[k] = NULL;                                                                        \
                    n = 16;                                                                               \
                }                                                                                         \
                vec[k] = REALLOC(vec[k], n);                                                              \
                memset(vec[k] + vlen[k] % n, 2, n - vlen[k] % n);                                         \
                vlen[k] = n;                                                                              \
            }                                                                                             \
            for (int i = 0; i < 4; i++, ops++) { /* frame buffers */                                      \
                size_t n = 65536u << (hh_rng_next(&s) % 5);                                               \
                char *b = MALLOC(n);                                                                      \
                memset(b, 3, n / 4);                                                                      \
                FREE(b);                                                                                  \
            }                                                                                             \
        }                                                                                                 \
        double ns = (double)(bench_now_ns() - t0) / (double)ops;                                          \
        for (int i = 0; i < NODES; i++) FREE(node[i]);                                                    \
        for (int i = 0; i < STRS; i++) FREE(str[i]);                                                      \
        for (int i = 0; i < VECS; i++) FREE(vec[i]);                                                      \
        free(node); free(str); free(vec); free(vlen);                                                     \
        return ns;                                                                                        \
    }

#define DEFINE_LARGE(NAME, MALLOC, FREE)                                                                  \
    static double large_##NAME(void) {                                                                    \
        enum { SLOTS = 8 };                                                                               \
        char *slot[SLOTS] = { 0 };                                                                        \
        hh_rng s = { 11 };                                                                                \
        long n = (long)(240 * scale);                                                                     \
        uint64_t t0 = bench_now_ns();                                                                     \
        for (long i = 0; i < n; i++) {                                                                    \
            unsigned k = (unsigned)(hh_rng_next(&s) % SLOTS);                                             \
            FREE(slot[k]);                                                                                \
            size_t size = ((size_t)5 << 20) + (size_t)(hh_rng_next(&s) % ((size_t)20 << 20));            \
            slot[k] = MALLOC(size);                                                                       \
            for (size_t off = 0; off < size; off += 4096) slot[k][off] = (char)i;                         \
        }                                                                                                 \
        double ns = (double)(bench_now_ns() - t0) / (double)n;                                            \
        for (int k = 0; k < SLOTS; k++) FREE(slot[k]);                                                    \
        return ns;                                                                                        \
    }

/* Set by a workload whose memory figure is not the peak (release). */
static double rss_result;
/* churn and many: ns per operation of the replacement loops alone, from the
   moment every thread has filled its slots to the moment every thread has
   ended its loop (thread start and exit, the fill and the final frees left
   out). The threads and the timer meet at churn_gate twice. */
static double steady_result;
static pthread_barrier_t churn_gate;

#define DEFINE_RELEASE(NAME, MALLOC, FREE)                                                                \
    static double release_##NAME(void) {                                                                  \
        enum { KEEP = 8000 };                                                                             \
        size_t total = (size_t)(400e6 * (scale < 1 ? 0.5 : 1.0)), got = 0, n = 0, cap = 1 << 20;          \
        void **keep = calloc(KEEP, sizeof *keep), **v = malloc(cap * sizeof *v);                          \
        hh_rng s = { 5 };                                                                                 \
        for (int i = 0; i < KEEP; i++) {                                                                  \
            keep[i] = MALLOC(1000);                                                                       \
            memset(keep[i], 1, 1000);                                                                     \
        }                                                                                                 \
        uint64_t t0 = bench_now_ns();                                                                     \
        while (got < total && n < cap) {                                                                  \
            uint64_t r = hh_rng_next(&s);                                                                 \
            /* one block in 1024 a buffer: about 3/4 of the bytes small */                                \
            size_t size = r % 1024 != 0 ? 16 + (size_t)(r >> 16) % 2033 : ((size_t)64 << 10) << ((r >> 16) % 5); \
            char *p = MALLOC(size);                                                                       \
            memset(p, 7, size);                                                                           \
            v[n++] = p;                                                                                   \
            got += size;                                                                                  \
        }                                                                                                 \
        for (size_t i = 0; i < n; i++) FREE(v[i]);                                                        \
        double ns = (double)(bench_now_ns() - t0) / (double)n;                                            \
        free(v);                                                                                          \
        struct timespec idle = { 1, 0 };                                                                  \
        while (nanosleep(&idle, &idle) != 0 && errno == EINTR) {}                                         \
        rss_result = bench_vm_bytes("VmRSS:");                                                            \
        for (int i = 0; i < KEEP; i++) FREE(keep[i]);                                                     \
        free(keep);                                                                                       \
        return ns;                                                                                        \
    }

enum { CHURN_MAX = 16, PC_BATCH = 256 };

DEFINE_WORKLOADS(hh, hh_bmalloc, hh_bfree, hh_brealloc)
DEFINE_WORKLOADS(libc, malloc, free, realloc)
DEFINE_LARGE(hh, hh_bmalloc, hh_bfree)
DEFINE_LARGE(libc, malloc, free)
DEFINE_RELEASE(hh, hh_bmalloc, hh_bfree)
DEFINE_RELEASE(libc, malloc, free)

typedef struct workload {
    const char *name;
    double (*hh)(void);
    double (*libc)(void);
} workload;

static const workload workloads[] = {
    { "pairs", pairs_hh, pairs_libc },
    { "churn", churn_hh, churn_libc },
    { "many", many_hh, many_libc },
    { "prodcons", prodcons_hh, prodcons_libc },
    { "mixed", mixed_hh, mixed_libc },
    { "large", large_hh, large_libc },
    { "release", release_hh, release_libc },
};

/* BENCH_BINNED_ONLY: a comma-separated list of workloads to run (all if unset). */
static int selected(const char *name) {
    const char *only = getenv("BENCH_BINNED_ONLY");
    if (only == NULL || *only == 0) return 1;
    size_t len = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += len)
        if ((p == only || p[-1] == ',') && (p[len] == 0 || p[len] == ',')) return 1;
    return 0;
}
enum { NW = sizeof workloads / sizeof workloads[0] };

static double call_hh(void *ctx) { return ((const workload *)ctx)->hh(); }
static double call_libc(void *ctx) { return ((const workload *)ctx)->libc(); }

/* ---------------------------------------------------------------------------
   Out-of-process runs
--------------------------------------------------------------------------- */
typedef struct peer { const char *name, *path; } peer;

/* The lowest median among the peers (glibc among them; shim-huge, ours,
   not) of figure v, and its peer's name. Columns as in main: 0 shim, 1
   glibc, 2.. peers. */
static double best_peer(double v[][64], int reps, const peer *peers, int np, const char **name) {
    double best = bench_summarise(v[1], reps).median;
    *name = "glibc";
    for (int p = 0; p < np; p++) {
        double m = bench_summarise(v[2 + p], reps).median;
        if (strcmp(peers[p].name, "shim-huge") != 0 && m < best) best = m, *name = peers[p].name;
    }
    return best;
}

/* Issue 13's targets for one workload, from the medians above: the shim's
   time at most 1.1x the best peer's and its RSS at most 1.1x the lowest
   peer's. Reported, never failed. */
static void goal_line(const char *w, double ns[][64], double rss[][64], int reps, const peer *peers, int np) {
    const char *best_name, *low_name;
    double tr = bench_summarise(ns[0], reps).median / best_peer(ns, reps, peers, np, &best_name);
    double rr = bench_summarise(rss[0], reps).median / best_peer(rss, reps, peers, np, &low_name);
    printf("bench_binned: %s: time %.2fx the best peer's (%s), RSS %.2fx the lowest peer's (%s); "
           "goal <= 1.1x each: %s\n", w, tr, best_name, rr, low_name, tr <= 1.1 && rr <= 1.1 ? "met" : "missed");
}

/* churn and many: the steady figures (the loops alone) beside the peers',
   and how far the shim's is from the best peer's. Information only: the
   goal line above judges the whole run, as issue 13 defines it. */
static void steady_lines(const char *w, double steady[][64], int reps, const peer *peers, int np) {
    char name[64];
    snprintf(name, sizeof name, "steady-%s", w);
    bench_summary shim = bench_summarise(steady[0], reps);
    bench_print("binned", name, "ns/op", shim, "glibc", bench_summarise(steady[1], reps));
    for (int p = 0; p < np; p++) bench_print("binned", name, "ns/op", shim, peers[p].name, bench_summarise(steady[2 + p], reps));
    const char *best_name;
    double best = best_peer(steady, reps, peers, np, &best_name);
    printf("bench_binned: %s, the loops alone: time %.2fx the best peer's (%s)\n", w, shim.median / best, best_name);
}

/* Runs `self --child w libc` with LD_PRELOAD=path (NULL: none); ns/op, peak
   RSS and the steady ns/op (0 when the workload has none) out. false if the
   run failed. */
static int run_child(const char *self, const char *w, const char *preload, double *ns, double *rss, double *steady) {
    char *argv[] = { (char *)self, "--child", (char *)w, "libc", NULL }, buf[256];
    return bench_spawn(argv, preload, buf, sizeof buf) && sscanf(buf, "RESULT %lf %lf %lf", ns, rss, steady) == 3;
}

static int child_main(const char *w, const char *api) {
    for (int i = 0; i < NW; i++) {
        if (strcmp(workloads[i].name, w) != 0) continue;
        double ns = strcmp(api, "hh") == 0 ? workloads[i].hh() : workloads[i].libc();
        /* VmHWM, not ru_maxrss: the latter survives exec and would report the
           parent's peak. */
        printf("RESULT %.4f %.0f %.4f\n", ns, rss_result > 0 ? rss_result : bench_vm_bytes("VmHWM:"), steady_result);
        return 0;
    }
    return 2;
}

int main(int argc, char **argv) {
    if (bench_quick()) scale = 1.0 / 3;
    const char *ct = getenv("BENCH_CHURN_THREADS");
    if (ct && atoi(ct) >= 1 && atoi(ct) <= CHURN_MAX) churn_threads = atoi(ct);
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], argv[3]);
    int reps = bench_reps();

    printf("bench_binned: part 1, in process, hh_b* vs glibc malloc (%d interleaved runs, %d threads in churn)\n", reps,
           churn_threads);
    for (int i = 0; i < NW; i++)
        if (selected(workloads[i].name)) bench_pair("binned", workloads[i].name, "ns/op", call_hh, "glibc", call_libc, (void *)&workloads[i], reps);

    /* Part 2: peers given as name=path; "shim" is ours. */
    peer peers[8];
    int np = 0;
    const char *shim = NULL;
    for (int i = 1; i < argc && np < 8; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq || eq[1] == 0) {
            printf("bench_binned: skipping peer argument '%s' (no library path)\n", argv[i]);
            continue;
        }
        *eq = 0;
        if (strcmp(argv[i], "shim") == 0) shim = eq + 1;
        else peers[np++] = (peer){ argv[i], eq + 1 };
    }
    if (shim == NULL) {
        printf("bench_binned: no shim=PATH argument, part 2 skipped\n");
        return 0;
    }
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return 0;
    self[sl] = 0;
    printf("bench_binned: part 2, the same workload binary on plain malloc, LD_PRELOAD per allocator "
           "(%d interleaved runs)\n", reps);
    for (int w = 0; w < NW; w++) {
        if (!selected(workloads[w].name)) continue;
        /* columns: 0 shim, 1 glibc, 2.. peers */
        double ns[10][64], rss[10][64], steady[10][64];
        int ok = 1;
        for (int r = 0; r < reps && ok; r++) {
            ok &= run_child(self, workloads[w].name, shim, &ns[0][r], &rss[0][r], &steady[0][r]);
            ok &= run_child(self, workloads[w].name, NULL, &ns[1][r], &rss[1][r], &steady[1][r]);
            for (int p = 0; p < np; p++) {
                /* "shim-huge": our shim with small-block spans on huge pages */
                bool huge = strcmp(peers[p].name, "shim-huge") == 0;
                if (huge) setenv("HHEAP_SMALL_HUGEPAGES", "1", 1);
                ok &= run_child(self, workloads[w].name, peers[p].path, &ns[2 + p][r], &rss[2 + p][r], &steady[2 + p][r]);
                if (huge) unsetenv("HHEAP_SMALL_HUGEPAGES");
            }
        }
        if (!ok) {
            printf("bench_binned: a child run of %s failed; skipped\n", workloads[w].name);
            continue;
        }
        char name[64];
        bench_summary shim_ns = bench_summarise(ns[0], reps), shim_rss = bench_summarise(rss[0], reps);
        snprintf(name, sizeof name, "preload-%s", workloads[w].name);
        bench_print("binned", name, "ns/op", shim_ns, "glibc", bench_summarise(ns[1], reps));
        for (int p = 0; p < np; p++) bench_print("binned", name, "ns/op", shim_ns, peers[p].name, bench_summarise(ns[2 + p], reps));
        snprintf(name, sizeof name, "rss-%s", workloads[w].name);
        bench_print("binned", name, "bytes", shim_rss, "glibc", bench_summarise(rss[1], reps));
        for (int p = 0; p < np; p++) bench_print("binned", name, "bytes", shim_rss, peers[p].name, bench_summarise(rss[2 + p], reps));
        goal_line(workloads[w].name, ns, rss, reps, peers, np);
        if (steady[0][0] > 0) steady_lines(workloads[w].name, steady, reps, peers, np);
    }
    return 0;
}
