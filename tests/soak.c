/* soak.c -- long-running game-loop workload over all three regions (make soak).
 *
 * Usage: soak [SECONDS [SEED]]        (SOAK_SECONDS=600 by default via make)
 *
 * Each frame, like hh-demo: game objects (tagged by kind, sizes that repeat)
 * spawn and despawn in waves in the relocatable heap, a few are pinned for some
 * frames, some are resized; per-frame scratch comes from the thread's mark
 * stack under a mark; particles and strings come from the binned allocator
 * with lifetimes of a few frames; then hh_defrag_step(heap, 16) runs.
 * A shadow model holds every object's size and byte pattern:
 *   - every frame: the objects touched that frame are verified and rewritten;
 *   - every 32 frames: every byte of every heap object and binned block;
 *   - every 256 frames: hh_heap_check, hh_binned_check, hh_memstack_check.
 * Once a second it prints one line (frame, objects, fragmentation, RSS). At the
 * end it prints resident memory at the end of warm-up and at the end, the peak
 * of the first and of the last population wave,
 * fragmentation min/mean/max after warm-up, and exits non-zero if any check
 * failed, any byte was wrong, or the last wave's resident peak exceeds the first's
 * by more than 25% + 8 MiB (a leak or metadata growth). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hheap.h"
#include "test_rng.h"

enum {
    MAX_OBJS = 20000,          /* live game objects at most */
    MAX_PARTS = 4096,          /* live binned particles at most */
    KINDS = 6,
};

static const size_t kind_size[KINDS] = { 48, 96, 160, 320, 1024, 4000 };

typedef struct obj { hh_handle h; size_t size; uint64_t key; uint32_t pin_frames; void *pinned_at; } obj;
typedef struct part { unsigned char *p; size_t size; uint64_t key; uint32_t dies; } part;

static obj objs[MAX_OBJS];
static size_t nobj;
static part parts[MAX_PARTS];
static size_t npart;
static uint64_t next_key, errors;
static hh_rng rng;   /* seeded in main (never 0) */

static uint32_t below(uint32_t n) { return hh_rng_below(&rng, n); }

static uint8_t pat(uint64_t key, size_t i) { return (uint8_t)(((key ^ (uint64_t)i * 0x9E3779B97F4A7C15ULL) * 0xBF58476D1CE4E5B9ULL) >> 56); }
static void fill(void *p, size_t n, uint64_t key) { unsigned char *b = p; for (size_t i = 0; i < n; i++) b[i] = pat(key, i); }
static long verify(const void *p, size_t n, uint64_t key) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) if (b[i] != pat(key, i)) return (long)i;
    return -1;
}

static void fail(const char *what, long a, long b) {
    errors++;
    if (errors <= 20) fprintf(stderr, "soak: ERROR %s (%ld, %ld)\n", what, a, b);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static unsigned long objects_lost_or_corrupt;

static void check_obj(hh_heap *heap, obj *o) {
    unsigned char *p = hh_deref(heap, o->h);
    if (p == NULL) { objects_lost_or_corrupt++; fail("object lost", (long)(o - objs), 0); return; }
    if (o->pinned_at && (void *)p != o->pinned_at) fail("pinned object moved", (long)(o - objs), 0);
    long bad = verify(p, o->size, o->key);
    if (bad >= 0) { objects_lost_or_corrupt++; fail("object byte corrupt", (long)(o - objs), bad); }
}

static void spawn(hh_heap *heap) {
    if (nobj == MAX_OBJS) return;
    int kind = (int)below(KINDS);
    size_t size = kind_size[kind] - below(8) * 4;
    hh_handle h = hh_alloc_ex(heap, size, kind == 5 ? 64 : 16, (uint32_t)kind + 1);
    if (hh_is_null(h)) return;              /* full: the wave will recede */
    obj *o = &objs[nobj++];
    *o = (obj){ .h = h, .size = size, .key = ++next_key };
    fill(hh_deref(heap, h), size, o->key);
}

static void despawn(hh_heap *heap, size_t i) {
    obj *o = &objs[i];
    check_obj(heap, o);
    if (o->pinned_at && hh_unpin(heap, o->h) != HH_OK) fail("unpin", (long)i, 0);
    if (hh_free(heap, o->h) != HH_OK) fail("free", (long)i, 0);
    *o = objs[--nobj];
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 600;
    rng.s = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x50A4;
    if (rng.s == 0) rng.s = 1;
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 64u << 20 }, &heap) != HH_OK) return 2;
    hh_memstack *ms = hh_memstack_thread();
    if (ms == NULL) return 2;

    double t0 = now_s(), warm = t0 + (seconds < 60 ? seconds * 0.2 : 20), next_print = t0 + 1;
    /* Resident memory is compared at the same point of the population wave: the
       peak over the first whole wave after warm-up against the peak over the
       last whole wave (and the value at the end, after everything is freed). */
    size_t rss_start = 0, rss_peak = 0, rss_end, rss_first_wave = 0, rss_cur_wave = 0, rss_last_wave = 0;
    unsigned long warm_frame = 0, waves_done = 0;
    double frag_min = 1, frag_max = 0, frag_sum = 0;
    unsigned long frag_n = 0, frames = 0, heap_checks = 0, full_verifies = 0;
    uint64_t moves = 0, bytes_moved = 0;
    printf("soak: %.0f s, seed %#llx, heap 64 MiB, demo-like frames (waves of objects, pins, resizes, binned "
           "particles, mark-stack scratch), defrag_step(16) per frame\n", seconds, (unsigned long long)rng.s);
    for (;; frames++) {
        double t = now_s();
        if (t - t0 >= seconds) break;
        /* Population follows a slow wave between ~15% and 100% of MAX_OBJS: frees leave holes everywhere. */
        double phase = (double)(frames % 4000) / 4000.0;
        size_t target = (size_t)(MAX_OBJS * (0.15 + 0.85 * (phase < 0.5 ? phase * 2 : (1 - phase) * 2)));
        unsigned churn = 40 + below(80);
        for (unsigned k = 0; k < churn; k++) {
            if (nobj < target && below(3)) spawn(heap);
            else if (nobj) despawn(heap, below((uint32_t)nobj));
        }
        /* Touch some objects: verify and rewrite through a fresh deref (frame contract). */
        for (unsigned k = 0; k < 64 && nobj; k++) {
            obj *o = &objs[below((uint32_t)nobj)];
            check_obj(heap, o);
            unsigned char *p = hh_deref(heap, o->h);
            if (p) { o->key = ++next_key; fill(p, o->size, o->key); }
        }
        /* Pins for a few frames; resizes. */
        if (nobj && below(4) == 0) {
            obj *o = &objs[below((uint32_t)nobj)];
            if (!o->pinned_at) { o->pinned_at = hh_pin(heap, o->h); o->pin_frames = 1 + below(30); }
        }
        for (size_t i = 0; i < nobj; i += 1 + below(512))
            if (objs[i].pinned_at && --objs[i].pin_frames == 0) {
                if (hh_unpin(heap, objs[i].h) != HH_OK) fail("unpin", (long)i, 0);
                objs[i].pinned_at = NULL;
            }
        if (nobj && below(2) == 0) {
            obj *o = &objs[below((uint32_t)nobj)];
            size_t ns = 16 + below(6000);
            if (!o->pinned_at && hh_resize(heap, o->h, ns) == HH_OK) {
                unsigned char *p = hh_deref(heap, o->h);
                long bad = verify(p, o->size < ns ? o->size : ns, o->key);
                if (bad >= 0) fail("resize lost bytes", (long)(o - objs), bad);
                o->size = ns;
                fill(p, ns, o->key);
            }
        }
        /* Binned particles with lifetimes; mark-stack scratch for the frame. */
        for (size_t i = 0; i < npart;) {
            if (parts[i].dies <= frames) {
                long bad = verify(parts[i].p, parts[i].size, parts[i].key);
                if (bad >= 0) fail("binned byte corrupt", (long)i, bad);
                hh_bfree(parts[i].p);
                parts[i] = parts[--npart];
            } else i++;
        }
        for (unsigned k = 0; k < 50 && npart < MAX_PARTS; k++) {
            size_t size = below(8) ? 16 + below(240) : 1000 + below(40000);
            unsigned char *p = hh_bmalloc(size);
            if (!p) { fail("bmalloc", (long)size, 0); break; }
            parts[npart] = (part){ p, size, ++next_key, (uint32_t)(frames + 1 + below(120)) };
            fill(p, size, parts[npart].key);
            npart++;
        }
        {
            hh_mark m;
            hh_mark_push(ms, &m);
            size_t total = 0;
            for (unsigned k = 0; k < 20; k++) {
                size_t size = 64 + below(k == 0 ? 200000 : 8000);
                unsigned char *p = hh_memstack_alloc(ms, size, 16);
                if (!p) { fail("memstack alloc", (long)size, 0); break; }
                memset(p, (int)k, size);
                total += size;
            }
            if (hh_mark_pop(&m) != HH_OK) fail("mark pop", 0, 0);
            (void)total;
        }

        hh_defrag_report r = hh_defrag_step(heap, 16);
        moves += r.moves;
        bytes_moved += r.bytes_moved;

        if ((frames & 31) == 0) {
            full_verifies++;
            for (size_t i = 0; i < nobj; i++) check_obj(heap, &objs[i]);
            for (size_t i = 0; i < npart; i++)
                if (verify(parts[i].p, parts[i].size, parts[i].key) >= 0) fail("binned byte corrupt", (long)i, 0);
        }
        if ((frames & 255) == 0) {
            heap_checks++;
            if (hh_heap_check(heap) != HH_OK) fail("hh_heap_check", (long)frames, 0);
            if (hh_binned_check() != HH_OK) fail("hh_binned_check", (long)frames, 0);
            if (hh_memstack_check(ms) != HH_OK) fail("hh_memstack_check", (long)frames, 0);
        }
        hh_heap_stats st;
        hh_heap_stats_get(heap, &st);
        t = now_s();
        if (t >= warm) {
            if (rss_start == 0) { rss_start = rss_bytes(); warm_frame = frames; }
            if ((frames & 63) == 0) {
                size_t rss = rss_bytes();
                rss_cur_wave = rss > rss_cur_wave ? rss : rss_cur_wave;
            }
            if (frames > warm_frame && (frames - warm_frame) % 4000 == 0) {   /* one whole wave done */
                if (waves_done++ == 0) rss_first_wave = rss_cur_wave;
                rss_last_wave = rss_cur_wave;
                rss_cur_wave = 0;
            }
            frag_min = st.fragmentation < frag_min ? st.fragmentation : frag_min;
            frag_max = st.fragmentation > frag_max ? st.fragmentation : frag_max;
            frag_sum += st.fragmentation;
            frag_n++;
        }
        if (t >= next_print) {
            size_t rss = rss_bytes();
            rss_peak = rss > rss_peak ? rss : rss_peak;
            printf("soak: t=%4.0fs frame %7lu objects %5zu (%5.1f MiB used, %3u pinned) frag %.3f largest_free %5.1f MiB "
                   "binned %4zu rss %6.1f MiB\n", t - t0, frames, nobj, (double)st.used_bytes / 1048576.0,
                   st.pinned_blocks, st.fragmentation, (double)st.largest_free / 1048576.0, npart, (double)rss / 1048576.0);
            fflush(stdout);
            next_print += (seconds > 120 ? 10 : 1);
        }
    }
    while (nobj) despawn(heap, nobj - 1);
    for (size_t i = 0; i < npart; i++) hh_bfree(parts[i].p);
    if (hh_heap_check(heap) != HH_OK) fail("final hh_heap_check", 0, 0);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    if (st.live_blocks != 0) fail("live blocks after freeing all", (long)st.live_blocks, 0);
    hh_binned_thread_flush();
    size_t leak_bytes, leaks = hh_binned_leak_report(NULL, NULL, &leak_bytes);
    if (leaks) fail("binned blocks leaked", (long)leaks, (long)leak_bytes);
    rss_end = rss_bytes();
    if (rss_start == 0) rss_start = rss_end;
    if (waves_done == 0) rss_first_wave = rss_last_wave = rss_start;
    double growth = (double)rss_last_wave - (double)rss_first_wave;
    bool rss_ok = growth <= 0.25 * (double)rss_first_wave + 8.0 * 1048576.0;
    if (!rss_ok) fail("resident memory grew after warm-up (MiB)", (long)(growth / 1048576.0), 0);
    printf("soak: RESULT %.0f s, %lu frames, %llu defrag moves (%.1f MiB moved), %lu full byte verifications, "
           "%lu structure checks\n", now_s() - t0, frames, (unsigned long long)moves, (double)bytes_moved / 1048576.0,
           full_verifies, heap_checks);
    printf("soak: RESULT resident memory: %.1f MiB at the end of warm-up, %.1f MiB at the end (all freed), "
           "peak %.1f MiB\n", (double)rss_start / 1048576.0, (double)rss_end / 1048576.0, (double)rss_peak / 1048576.0);
    printf("soak: RESULT resident peak per population wave (%lu waves of 4000 frames): first %.1f MiB, last %.1f MiB -> %s\n",
           waves_done, (double)rss_first_wave / 1048576.0, (double)rss_last_wave / 1048576.0, rss_ok ? "flat" : "GREW");
    printf("soak: RESULT fragmentation after warm-up: min %.3f mean %.3f max %.3f\n", frag_n ? frag_min : 0,
           frag_n ? frag_sum / (double)frag_n : 0, frag_max);
    printf("soak: RESULT %lu objects lost or corrupt, %llu errors -> %s\n", objects_lost_or_corrupt,
           (unsigned long long)errors, errors ? "FAIL" : "PASS");
    hh_heap_destroy(heap);
    hh_memstack_thread_release();
    return errors ? 1 : 0;
}
