/* stress_binned_mt.c -- multithreaded malloc/free stress with cross-thread
 * frees and pattern checks, written against plain malloc so the same binary
 * runs on glibc and on the LD_PRELOAD shim (make check-shim compares their
 * output). Usage: stress_binned_mt [SEED OPS THREADS]
 *
 * Each thread allocates blocks of random sizes (mostly small, some large),
 * fills them with a pattern derived from (seed, size), and passes every
 * second block to the next thread through a locked mailbox; the receiver
 * verifies the pattern, reallocates some, and frees them. The printed
 * checksum depends only on the seed and op count, never on timing. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"

enum { MAX_THREADS = 16, MAILBOX = 4096 };

typedef struct mailbox {
    pthread_mutex_t lock;
    void *items[MAILBOX];
    size_t sizes[MAILBOX];
    uint64_t keys[MAILBOX];
    unsigned n;
} mailbox;

static mailbox boxes[MAX_THREADS];
static unsigned nthreads = 4;
static unsigned long ops = 200000;
static uint64_t seed0 = 1;
static unsigned long failures;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

static void fill(unsigned char *p, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(key + i * 131u);
}
static int verify(const unsigned char *p, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(key + i * 131u)) return 0;
    return 1;
}

static void fail(const char *what) {
    pthread_mutex_lock(&fail_lock);
    failures++;
    if (failures < 5) fprintf(stderr, "stress_binned_mt: %s\n", what);
    pthread_mutex_unlock(&fail_lock);
}

static void drain(mailbox *b) {
    pthread_mutex_lock(&b->lock);
    unsigned n = b->n;
    void *items[MAILBOX]; size_t sizes[MAILBOX]; uint64_t keys[MAILBOX];
    memcpy(items, b->items, n * sizeof *items);
    memcpy(sizes, b->sizes, n * sizeof *sizes);
    memcpy(keys, b->keys, n * sizeof *keys);
    b->n = 0;
    pthread_mutex_unlock(&b->lock);
    for (unsigned i = 0; i < n; i++) {
        if (!verify(items[i], sizes[i], keys[i])) fail("pattern broken in a block from another thread");
        if (i % 3 == 0) {
            unsigned char *q = realloc(items[i], sizes[i] * 2 + 1);
            if (q == NULL) { fail("realloc failed"); continue; }
            if (!verify(q, sizes[i], keys[i])) fail("realloc lost the contents");
            items[i] = q;
        }
        free(items[i]);
    }
}

static void *worker(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    hh_rng s = { seed0 * 0x9E3779B97F4A7C15ULL + id + 1 };
    enum { KEEP = 512 };
    unsigned char *mine[KEEP] = { 0 };
    size_t msz[KEEP] = { 0 };
    uint64_t mkey[KEEP] = { 0 };
    mailbox *next = &boxes[(id + 1) % nthreads];
    for (unsigned long k = 0; k < ops; k++) {
        unsigned slot = (unsigned)(hh_rng_next(&s) % KEEP);
        if (mine[slot]) {
            if (!verify(mine[slot], msz[slot], mkey[slot])) fail("pattern broken in own block");
            if (k & 1) {
                pthread_mutex_lock(&next->lock);
                if (next->n < MAILBOX) {
                    next->items[next->n] = mine[slot];
                    next->sizes[next->n] = msz[slot];
                    next->keys[next->n++] = mkey[slot];
                    mine[slot] = NULL;
                }
                pthread_mutex_unlock(&next->lock);
            }
            if (mine[slot]) free(mine[slot]);
            mine[slot] = NULL;
        }
        uint64_t r = hh_rng_next(&s);
        size_t size = (r % 100) < 97 ? 1 + (size_t)(r >> 8) % 512 : 1 + (size_t)(r >> 8) % 100000;
        mine[slot] = malloc(size);
        if (mine[slot] == NULL) { fail("malloc failed"); continue; }
        msz[slot] = size;
        mkey[slot] = r;
        fill(mine[slot], size, r);
        if ((k & 255) == 0) drain(&boxes[id]);
    }
    for (unsigned i = 0; i < KEEP; i++) {
        if (mine[i] && !verify(mine[i], msz[i], mkey[i])) fail("pattern broken at the end");
        free(mine[i]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seed0 = strtoull(argv[1], NULL, 0);
    if (argc > 2) ops = strtoul(argv[2], NULL, 0);
    if (argc > 3) nthreads = (unsigned)strtoul(argv[3], NULL, 0);
    if (nthreads < 1 || nthreads > MAX_THREADS) nthreads = 4;
    for (unsigned i = 0; i < nthreads; i++) pthread_mutex_init(&boxes[i].lock, NULL);
    pthread_t t[MAX_THREADS];
    for (unsigned i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    for (unsigned i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    for (unsigned i = 0; i < nthreads; i++) drain(&boxes[i]);
    printf("stress_binned_mt: seed %llu ops %lu threads %u failures %lu\n", (unsigned long long)seed0, ops, nthreads,
           failures);
    return failures == 0 ? 0 : 1;
}
