/* hh_demo.c -- hh-demo, the main job: a game loop on all three regions of
 * hheap, recorded frame by frame into a .hhmap dump and rendered to pictures.
 *
 * The simulation, once a frame:
 *   - relocatable heap (by handle): waves of enemies (1-4 KiB, each with an AI
 *     path of 0.5-2 KiB) every 150 frames, the rockets they fire (0.4-1 KiB,
 *     short-lived), long-lived level chunks (16-64 KiB) loaded between loader
 *     temporaries, streamed in and out now and then and half swapped out at a
 *     level transition (2/5 of the run), and three GPU upload buffers that are
 *     pinned for stretches of frames;
 *   - mark stack (hh_memstack_thread): the frame's temporaries under a frame
 *     mark (enemy index list, collision grid) and a nested render mark (a
 *     render list with one command per live object);
 *   - binned region (hh_bmalloc): small non-moving objects: bullets (64-192 B),
 *     particle bursts when enemies die (48-160 B), sound events and network
 *     messages (16-512 B);
 *   - then hh_defrag_step(heap, N), a check of every byte of every object the
 *     demo owns (re-derefed after the step), and one dump frame.
 * The last frames (--outro, a tenth of the run by default) are the level's end:
 * the battle is over -- the remaining enemies, their AI paths, the rockets and
 * the loader temporaries are freed at once, the GPU buffers unpinned, nothing
 * new spawns on the heap -- and the steps, still N moves a frame, close the
 * holes: the run's last pictures show what the holes of a running game come
 * to once the traffic stops (a loading screen, a menu).
 * Every object holds a pattern derived from its own key: a block that was
 * moved wrongly, overwritten or lost fails the check and the demo exits 1.
 *
 *   hh-demo [options]        (hh-demo --help lists the options and defaults)
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cairo.h>
#include <fontconfig/fontconfig.h>

#include "hheap.h"
#include "hh_cli.h"
#include "../tests/test_rng.h"
#include "viz_render.h"

/* ---------------------------------------------------------------------------
   Options and tags
--------------------------------------------------------------------------- */
typedef struct demo_opts {
    unsigned    frames, moves, every, width;
    unsigned    outro;        /* the level's end: the last this many frames (UINT_MAX: a tenth of the run) */
    hh_defrag_policy policy;
    uint64_t    seed;
    unsigned    heap_mib;
    const char *out;
    bool        render, quiet;
} demo_opts;

enum { TAG_NONE, TAG_ENEMY, TAG_PROJECTILE, TAG_PARTICLE, TAG_LEVEL, TAG_AI, TAG_GPU, TAG_LOADER, TAG_COUNT };
/* Particles live in the binned region, so their heap tag has no name (and no legend entry). */
static const char *const tag_names[TAG_COUNT] = { "", "enemy", "rocket", "", "level chunk", "AI path", "GPU buffer",
                                                  "loader temp" };

/* ---------------------------------------------------------------------------
   Byte patterns (the RNG is tests/test_rng.h, shared with the tests and the
   benchmarks)
--------------------------------------------------------------------------- */

#define HH_MIN_DEMO(a, b) ((a) < (b) ? (a) : (b))
#if defined(__GNUC__) || defined(__clang__)
#  define HH_DEMO_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#  define HH_DEMO_PRINTF(f, a)
#endif

static uint64_t pattern_word(uint64_t key, size_t i) { return key ^ ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL); }

static void fill_pattern(void *p, size_t size, uint64_t key) {
    uint64_t *w = p;
    for (size_t i = 0; i < size / 8; i++) w[i] = pattern_word(key, i);
}
/* Index of the first wrong word, or -1. */
static long check_pattern(const void *p, size_t size, uint64_t key) {
    const uint64_t *w = p;
    for (size_t i = 0; i < size / 8; i++) if (w[i] != pattern_word(key, i)) return (long)i;
    return -1;
}

/* ---------------------------------------------------------------------------
   Objects the demo owns
--------------------------------------------------------------------------- */
typedef struct obj {
    hh_handle h;
    uint32_t  size;          /* bytes asked for (a multiple of 8) */
    uint32_t  tag;
    uint32_t  dies;          /* frame at which it is freed (UINT32_MAX: never on its own) */
    uint64_t  key;           /* pattern key */
    int       pin_from, pin_to;   /* pinned during [pin_from, pin_to) (GPU buffers), else -1 */
    void     *pinned_at;     /* address while pinned */
} obj;

typedef struct bobj { void *p; uint32_t size, dies; uint64_t key; } bobj;

typedef struct demo {
    demo_opts  o;
    hh_rng     r;
    hh_heap   *heap;
    hh_memstack *ms;                 /* this thread's mark stack (frame temporaries) */
    hh_memstack *stacks[1];          /* the dump's list of mark stacks: lives as long as the writer */
    hh_mapdump_writer *w;            /* the .hhmap dump, one frame per game frame */
    hh_trace  *trace;                /* every heap operation, for hh-replay (NULL: could not open) */
    char       dump_path[4096];
    char       label[128];           /* the dump's label and the summary's title */
    bool       tty;                  /* stdout is a terminal: progress on one line */
    unsigned   log_every;            /* progress line every this many frames */
    unsigned   outro_at;             /* first frame of the level's end (frames: none) */
    hh_defrag_metrics at_end;        /* the heap when the level ended (before its clear-out) */
    unsigned   compact_at;           /* first frame of the end after which no hole was left (UINT_MAX: none) */
    hh_mapdump_metrics last;         /* the last frame's metrics (summary) */
    uint64_t   dump_bytes;
    double     t_sim, t_render;      /* seconds: game loop with checks and dump; pictures */
    viz_result vr;                   /* what the render drew, and its times */
    obj       *objs;   size_t nobj, capobj;
    bobj      *bobjs;  size_t nb, capb;
    uint64_t   next_key;
    unsigned   level_div;    /* level chunk sizes are divided by this on small heaps */
    /* counters */
    uint64_t   allocs, alloc_fail, frees, ballocs, bfrees, temps, temp_bytes;
    uint64_t   moves, bytes_moved, checked_bytes, checks;
    uint64_t   step_ns_total, step_ns_max;
    unsigned   nomem_errors, other_errors;
} demo;

static void on_error(hh_status s, const char *msg, void *user) {
    demo *d = user;
    if (s == HH_E_NO_MEMORY) { d->nomem_errors++; return; }    /* a full heap is part of the game: skip the spawn */
    d->other_errors++;
    fprintf(stderr, "hh-demo: hheap error: %s: %s\n", hh_status_str(s), msg);
}

static obj *spawn(demo *d, uint32_t size, uint32_t tag, uint32_t dies) {
    size = (size + 7u) & ~7u;
    hh_handle h = hh_alloc_ex(d->heap, size, 16, tag);
    if (hh_is_null(h)) { d->alloc_fail++; return NULL; }
    if (d->nobj == d->capobj) {
        size_t cap = d->capobj ? d->capobj * 2 : 1024;
        obj *n = realloc(d->objs, cap * sizeof *n);
        if (!n) { fprintf(stderr, "hh-demo: out of memory\n"); exit(1); }
        d->objs = n;
        d->capobj = cap;
    }
    obj *o = &d->objs[d->nobj++];
    *o = (obj){ .h = h, .size = size, .tag = tag, .dies = dies, .key = ++d->next_key * 0xD1B54A32D192ED03ULL,
                .pin_from = -1, .pin_to = -1 };
    fill_pattern(hh_deref(d->heap, h), size, o->key);
    d->allocs++;
    return o;
}

/* Drops o's pin, if it has one; an unpin that fails means the demo lost track
   of its own pins, which must not pass silently. */
static void obj_unpin(demo *d, obj *o) {
    if (!o->pinned_at) return;
    if (hh_unpin(d->heap, o->h) != HH_OK) { fprintf(stderr, "hh-demo: unpin of a pinned object failed\n"); exit(1); }
    o->pinned_at = NULL;
}

static void kill_obj(demo *d, size_t i) {
    obj *o = &d->objs[i];
    obj_unpin(d, o);
    if (hh_free(d->heap, o->h) != HH_OK) { fprintf(stderr, "hh-demo: free of a live object failed\n"); exit(1); }
    d->frees++;
    d->objs[i] = d->objs[--d->nobj];
}

static void bspawn(demo *d, uint32_t size, uint32_t dies) {
    size = (size + 7u) & ~7u;
    void *p = hh_bmalloc(size);
    if (!p) { d->alloc_fail++; return; }
    if (d->nb == d->capb) {
        size_t cap = d->capb ? d->capb * 2 : 1024;
        bobj *n = realloc(d->bobjs, cap * sizeof *n);
        if (!n) { fprintf(stderr, "hh-demo: out of memory\n"); exit(1); }
        d->bobjs = n;
        d->capb = cap;
    }
    bobj *b = &d->bobjs[d->nb++];
    *b = (bobj){ .p = p, .size = size, .dies = dies, .key = ++d->next_key * 0x9E6C63D0676A9A99ULL };
    fill_pattern(p, size, b->key);
    d->ballocs++;
}

/* ---------------------------------------------------------------------------
   One frame of the game
--------------------------------------------------------------------------- */
/* Frees the binned objects whose time has come. */
static void bobjs_expire(demo *d, unsigned f) {
    for (size_t i = 0; i < d->nb;) {
        if (d->bobjs[i].dies <= f) {
            hh_bfree(d->bobjs[i].p);
            d->bfrees++;
            d->bobjs[i] = d->bobjs[--d->nb];
        } else i++;
    }
}

/* A frame of the level's end: at its first frame everything short-lived on
   the heap goes and the GPU buffers are unpinned (only the level chunks and
   the buffers stay); then no heap traffic, and the binned objects die on
   their schedule. */
static void level_end(demo *d, unsigned f) {
    if (f == d->outro_at) {
        if (hh_defrag_metrics_get(d->heap, &d->at_end) != HH_OK) {   /* cannot fail on a live heap: say so if it does */
            fprintf(stderr, "hh-demo: no defrag metrics at the level's end\n");
            exit(1);
        }
        for (size_t i = d->nobj; i-- > 0;) {
            obj *o = &d->objs[i];
            if (o->tag == TAG_GPU) obj_unpin(d, o);
            else if (o->tag != TAG_LEVEL) kill_obj(d, i);
        }
    }
    bobjs_expire(d, f);
}

static void simulate(demo *d, unsigned f) {
    hh_memstack *ms = d->ms;
    hh_rng *r = &d->r;
    if (f >= d->outro_at) { level_end(d, f); return; }
    /* Deaths first: everything whose time has come; dying enemies leave a burst of particles. */
    unsigned bursts = 0;
    for (size_t i = 0; i < d->nobj;) {
        if (d->objs[i].dies <= f) {
            bursts += d->objs[i].tag == TAG_ENEMY;
            kill_obj(d, i);
        } else i++;
    }
    bobjs_expire(d, f);

    /* Waves: every 150 frames a wave of enemies arrives over 40 frames; the
       battle dies down, and the quiet frames let the defrag step catch up. */
    unsigned phase = f % 150;
    if (phase < 40) {
        unsigned n = hh_rng_range(r, 4, 9);
        for (unsigned k = 0; k < n; k++) {
            uint32_t life = hh_rng_range(r, 30, 130);
            obj *e = spawn(d, hh_rng_range(r, 1024, 4096), TAG_ENEMY, f + life);
            if (e) spawn(d, hh_rng_range(r, 512, 2048), TAG_AI, f + life);   /* dies with its enemy */
        }
    }
    /* Enemies fire projectiles; a temporary index list of them lives on the mark stack. */
    uint32_t *enemies = hh_memstack_alloc(ms, (d->nobj + 1) * sizeof *enemies, 16);
    size_t ne = 0;
    if (enemies) {
        d->temps++;
        d->temp_bytes += (d->nobj + 1) * sizeof *enemies;
        for (size_t i = 0; i < d->nobj; i++) if (d->objs[i].tag == TAG_ENEMY) enemies[ne++] = (uint32_t)i;
    }
    size_t shots = 0;
    for (size_t k = 0; k < ne; k++) if (hh_rng_chance(r, 0.05)) shots++;
    for (size_t k = 0; k < shots; k++) {       /* big rockets by handle, small bullets in the binned region */
        if (hh_rng_chance(r, 0.3)) spawn(d, hh_rng_range(r, 384, 1024), TAG_PROJECTILE, f + hh_rng_range(r, 8, 45));
        else bspawn(d, hh_rng_range(r, 64, 192), f + hh_rng_range(r, 8, 45));
    }
    for (unsigned b = 0; b < bursts; b++) {
        unsigned n = hh_rng_range(r, 12, 36);
        for (unsigned k = 0; k < n; k++) bspawn(d, hh_rng_range(r, 48, 160), f + hh_rng_range(r, 4, 40));   /* small: binned */
    }
    /* Level streaming: every 75 frames two chunks go and two others come in;
       at 2/5 of the run a level transition swaps out half of the level. */
    unsigned transition_at = d->o.frames * 2 / 5;
    if (f > 0 && (f % 75 == 0 || f == transition_at)) {
        bool transition = f == transition_at;
        size_t cand[256], nc = 0;
        for (size_t i = 0; i < d->nobj && nc < 256; i++) if (d->objs[i].tag == TAG_LEVEL) cand[nc++] = i;
        size_t out = transition ? nc / 2 : HH_MIN_DEMO(nc, 2);
        /* Kill from the highest index down so the indices stay valid (kill_obj swaps in the last). */
        for (size_t k = 0; k < out; k++) {
            size_t j = k + (size_t)(hh_rng_next(r) % (nc - k));
            size_t t = cand[k]; cand[k] = cand[j]; cand[j] = t;
        }
        for (size_t k = 0; k < out; k++)
            for (size_t m = k + 1; m < out; m++) if (cand[m] > cand[k]) { size_t t = cand[k]; cand[k] = cand[m]; cand[m] = t; }
        for (size_t k = 0; k < out; k++) kill_obj(d, cand[k]);
        size_t in = transition ? out * 3 / 4 : out;
        for (size_t k = 0; k < in; k++) {
            spawn(d, hh_rng_range(r, 16384, 65536) / d->level_div, TAG_LEVEL, UINT32_MAX);
            if (transition) spawn(d, hh_rng_range(r, 4096, 16384), TAG_LOADER, f + hh_rng_range(r, 1, 30));
        }
    }
    /* Pins follow each GPU buffer's schedule. */
    for (size_t i = 0; i < d->nobj; i++) {
        obj *o = &d->objs[i];
        if (o->tag != TAG_GPU) continue;
        bool want = (int)f >= o->pin_from && (int)f < o->pin_to;
        if (want && !o->pinned_at) o->pinned_at = hh_pin(d->heap, o->h);
        else if (!want) obj_unpin(d, o);
    }
    /* Binned: sound events and network messages. */
    unsigned nb = hh_rng_range(r, 8, 30);
    for (unsigned k = 0; k < nb; k++) bspawn(d, hh_rng_range(r, 16, 512), f + hh_rng_range(r, 5, 120));
    /* Collision grid: a frame temporary. */
    size_t grid = 64 * 64 * sizeof(uint16_t);
    uint16_t *g = hh_memstack_alloc_zeroed(ms, grid, 64);
    if (g) {
        d->temps++;
        d->temp_bytes += grid;
        for (size_t k = 0; k < ne; k++) g[(enemies[k] * 2654435761u) % (64 * 64)]++;
    }
}

/* Checks every byte of every object; exits on the first bad one. */
static void verify(demo *d, unsigned f) {
    for (size_t i = 0; i < d->nobj; i++) {
        obj *o = &d->objs[i];
        const void *p = hh_deref(d->heap, o->h);
        if (p == NULL || hh_size(d->heap, o->h) < o->size) {
            fprintf(stderr, "hh-demo: frame %u: object %zu (%s) lost its block\n", f, i, tag_names[o->tag]);
            exit(1);
        }
        if (o->pinned_at && p != o->pinned_at) {
            fprintf(stderr, "hh-demo: frame %u: a pinned %s moved\n", f, tag_names[o->tag]);
            exit(1);
        }
        long bad = check_pattern(p, o->size, o->key);
        if (bad >= 0) {
            fprintf(stderr, "hh-demo: frame %u: %s of %u bytes is wrong at word %ld\n", f, tag_names[o->tag], o->size, bad);
            exit(1);
        }
        d->checked_bytes += o->size;
    }
    for (size_t i = 0; i < d->nb; i++) {
        if (check_pattern(d->bobjs[i].p, d->bobjs[i].size, d->bobjs[i].key) >= 0) {
            fprintf(stderr, "hh-demo: frame %u: binned object %zu is wrong\n", f, i);
            exit(1);
        }
        d->checked_bytes += d->bobjs[i].size;
    }
    d->checks++;
}

/* ---------------------------------------------------------------------------
   Command line
--------------------------------------------------------------------------- */
/* The value of "--moves unlimited": hh_defrag_step's "no limit". */
static unsigned demo_moves_unlimited(void) { return HH_DEFRAG_UNLIMITED; }

enum { OPT_FRAMES, OPT_MOVES, OPT_POLICY, OPT_SEED, OPT_HEAP_MIB, OPT_OUT, OPT_EVERY, OPT_WIDTH, OPT_NO_RENDER,
       OPT_QUIET, OPT_OUTRO, OPT_COUNT };

/* Command line into *o, whose fields hold the defaults (shown by --help).
   Usage errors exit 2 (hh_cli.h). */
static void parse_options(demo_opts *o, int argc, char **argv) {
    char def[6][32];
    snprintf(def[0], sizeof def[0], "%u", o->frames);
    snprintf(def[1], sizeof def[1], "%u", o->moves);
    snprintf(def[2], sizeof def[2], "%" PRIu64, o->seed);
    snprintf(def[3], sizeof def[3], "%u", o->heap_mib);
    snprintf(def[4], sizeof def[4], "%u", o->width);
    snprintf(def[5], sizeof def[5], "%u", o->every);
    const hh_cli_opt opts[OPT_COUNT] = {
        [OPT_FRAMES]    = { "frames", 'n', "N", "frames to simulate, 1..1000000", def[0] },
        [OPT_MOVES]     = { "moves", 'm', "N", "defrag moves per frame, 0..1000000, or 'unlimited'", def[1] },
        [OPT_POLICY]    = { "policy", 'p', "P", "defrag policy: auto (the library's default: moves what pays off), "
                            "slide (the textbook algorithm: every hole rises) or fill", hh_defrag_policy_str(o->policy) },
        [OPT_SEED]      = { "seed", 's', "S", "random seed, 0..18446744073709551615", def[2] },
        [OPT_HEAP_MIB]  = { "heap-mib", 0, "M", "relocatable heap size in MiB, 1..4096", def[3] },
        [OPT_OUT]       = { "out", 'o', "DIR", "output directory (dump, trace, pictures, index.html)", o->out },
        [OPT_EVERY]     = { "every", 0, "K", "draw every K-th frame, 1..1000000", def[5] },
        [OPT_WIDTH]     = { "width", 'w', "PX", "picture width in pixels, 480..8192", def[4] },
        [OPT_NO_RENDER] = { "no-render", 0, NULL, "write the dump and the trace, draw no pictures", "off" },
        [OPT_QUIET]     = { "quiet", 'q', NULL, "no per-frame lines", "off" },
        [OPT_OUTRO]     = { "outro", 0, "N", "the level's end: the last N frames free everything short-lived, unpin, "
                            "spawn nothing and let the steps close the holes; 0..1000000 (at most --frames)",
                            "a tenth of --frames" },
    };
    hh_cli cli;
    hh_cli_init(&cli, "hh-demo", "", "exit status: 0 ok, 1 a check failed or an error, 2 bad usage\n", opts, OPT_COUNT);
    const char *v;
    int opt;
    while ((opt = hh_cli_next(&cli, argc, argv, &v)) != -1) {
        switch (opt) {
        case OPT_FRAMES: o->frames = (unsigned)hh_cli_uint(&cli, v, 1, 1000000); break;
        case OPT_MOVES:
            o->moves = !strcmp(v, "unlimited") ? demo_moves_unlimited() : (unsigned)hh_cli_uint(&cli, v, 0, 1000000);
            break;
        case OPT_POLICY:
            if (!strcmp(v, "auto")) o->policy = HH_DEFRAG_AUTO;
            else if (!strcmp(v, "slide")) o->policy = HH_DEFRAG_SLIDE;
            else if (!strcmp(v, "fill")) o->policy = HH_DEFRAG_FILL;
            else hh_cli_bad_value(&cli, v, "not a policy (accepted: auto, slide, fill)");
            break;
        case OPT_SEED: o->seed = hh_cli_uint(&cli, v, 0, UINT64_MAX); break;
        case OPT_HEAP_MIB: o->heap_mib = (unsigned)hh_cli_uint(&cli, v, 1, 4096); break;
        case OPT_OUT:
            if (!*v) hh_cli_bad_value(&cli, v, "an empty directory name");
            o->out = v;
            break;
        case OPT_EVERY: o->every = (unsigned)hh_cli_uint(&cli, v, 1, 1000000); break;
        case OPT_WIDTH: o->width = (unsigned)hh_cli_uint(&cli, v, 480, 8192); break;
        case OPT_NO_RENDER: o->render = false; break;
        case OPT_QUIET: o->quiet = true; break;
        case OPT_OUTRO: o->outro = (unsigned)hh_cli_uint(&cli, v, 0, 1000000); break;
        default: break;
        }
    }
    if (optind < argc) hh_cli_usage_error(&cli, "hh-demo takes no operands");
    if (o->outro == UINT_MAX) o->outro = o->frames / 10;
    if (o->outro > o->frames) hh_cli_usage_error(&cli, "--outro is longer than --frames");
}

/* ---------------------------------------------------------------------------
   Output helpers
--------------------------------------------------------------------------- */
/* Summary table: one row, a value formatted like printf. */
static void row(const char *name, const char *fmt, ...) HH_DEMO_PRINTF(2, 3);
static void row(const char *name, const char *fmt, ...) {
    char v[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    printf("  | %-42s | %22s |\n", name, v);
}
static void rule(void) { printf("  +--------------------------------------------+------------------------+\n"); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *fmt_bytes(char *buf, size_t n, double b) {
    static const char *const u[] = { "B", "KiB", "MiB", "GiB" };
    int i = 0;
    while (b >= 1024 && i < 3) { b /= 1024; i++; }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* ---------------------------------------------------------------------------
   Setup and teardown
--------------------------------------------------------------------------- */
/* Creates the heap (with the chosen policy), takes the thread's mark stack,
   creates the output directory and opens the dump and the trace. False after
   a message if something cannot be created. */
static bool demo_open(demo *d) {
    size_t cap = (size_t)d->o.heap_mib << 20;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = cap }, &d->heap) != HH_OK) {
        fprintf(stderr, "hh-demo: cannot create a %u MiB heap\n", d->o.heap_mib);
        return false;
    }
    hh_defrag_set_policy(d->heap, d->o.policy);
    d->ms = hh_memstack_thread();
    if (!d->ms) { fprintf(stderr, "hh-demo: no mark stack\n"); return false; }

    char cmd_dir[4096];
    snprintf(cmd_dir, sizeof cmd_dir, "%s", d->o.out);
    for (char *p = cmd_dir + 1; *p; p++) if (*p == '/') { *p = 0; mkdir(cmd_dir, 0755); *p = '/'; }
    mkdir(cmd_dir, 0755);
    snprintf(d->dump_path, sizeof d->dump_path, "%s/demo.hhmap", d->o.out);
    char moves[24];
    if (d->o.moves == HH_DEFRAG_UNLIMITED) snprintf(moves, sizeof moves, "unlimited");
    else snprintf(moves, sizeof moves, "%u", d->o.moves);
    snprintf(d->label, sizeof d->label, "hh-demo seed %" PRIu64 ", %u MiB heap, %s moves/frame, policy %s", d->o.seed,
             d->o.heap_mib, moves, hh_defrag_policy_str(d->o.policy));
    d->stacks[0] = d->ms;
    if (hh_mapdump_create(d->dump_path, &(hh_mapdump_desc){ .heap = d->heap, .flags = HH_MAPDUMP_BINNED,
                                                             .memstacks = d->stacks, .memstack_count = 1,
                                                             .tag_names = tag_names, .tag_name_count = TAG_COUNT,
                                                             .label = d->label }, &d->w) != HH_OK) {
        fprintf(stderr, "hh-demo: cannot write %s\n", d->dump_path);
        return false;
    }
    /* Every heap operation also goes to a trace that build/hh-replay can replay. */
    char trace_path[4096];
    snprintf(trace_path, sizeof trace_path, "%s/demo.hhtrace", d->o.out);
    if (hh_trace_open(d->heap, trace_path, &d->trace) != HH_OK) d->trace = NULL;
    d->tty = isatty(STDOUT_FILENO);
    d->log_every = d->tty ? 1 : (d->o.frames >= 20 ? d->o.frames / 20 : 1);
    return true;
}

/* The level: long-lived chunks filling about a third of the heap, loaded with
   temporaries between them that die over the first 40 frames (the first
   holes), and three GPU buffers that are pinned on a schedule. */
static void level_load(demo *d) {
    double scale = (double)((size_t)d->o.heap_mib << 20) / (4.0 * 1048576.0);
    d->level_div = scale < 1 ? 2u : 1u;
    unsigned chunks = (unsigned)(36 * scale);
    for (unsigned k = 0; k < chunks; k++) {
        spawn(d, hh_rng_range(&d->r, 16384, 65536) / d->level_div, TAG_LEVEL, UINT32_MAX);
        if (k % 12 == 5) {
            obj *g = spawn(d, hh_rng_range(&d->r, 12288, 24576), TAG_GPU, UINT32_MAX);
            if (g) {
                unsigned q = d->o.frames / 4;
                g->pin_from = (int)(k / 12 * q / 2);
                g->pin_to = g->pin_from + (int)(q * (1 + k / 12));
            }
        }
        spawn(d, hh_rng_range(&d->r, 4096, 20480) / d->level_div, TAG_LOADER, 1 + hh_rng_range(&d->r, 0, 40));
    }
}

/* Closes the dump and reads the last frame's metrics back (as the dump carries
   them), then frees everything the game owns and closes the trace, the heap,
   the mark stack and the binned cache (so that memcheck sees no leak). */
static bool demo_close(demo *d) {
    d->dump_bytes = hh_mapdump_bytes_written(d->w);
    if (hh_mapdump_close(d->w) != HH_OK) { fprintf(stderr, "hh-demo: closing the dump failed\n"); return false; }
    hh_mapdump_reader *rd;
    if (hh_mapdump_open(d->dump_path, &rd) == HH_OK) {
        const hh_mapdump_frame *fr;
        while (hh_mapdump_next(rd, &fr) == HH_OK && fr) d->last = fr->metrics;
        hh_mapdump_reader_close(rd);
    }
    while (d->nobj) kill_obj(d, d->nobj - 1);
    for (size_t i = 0; i < d->nb; i++) hh_bfree(d->bobjs[i].p);
    free(d->objs);
    free(d->bobjs);
    if (d->trace) hh_trace_close(d->trace);
    hh_heap_destroy(d->heap);
    hh_memstack_thread_release();
    hh_binned_thread_flush();
    return true;
}

/* ---------------------------------------------------------------------------
   The parts of a frame after the game's own work
--------------------------------------------------------------------------- */
/* The render list: one 48-byte command per live object, on the mark stack
   (NULL when it is full); *len its bytes. */
static uint8_t *render_list(demo *d, size_t *len) {
    size_t rl = (d->nobj + 1) * 48;
    uint8_t *cmds = hh_memstack_alloc(d->ms, rl, 16);
    if (cmds) { memset(cmds, 0x5A, rl); d->temps++; d->temp_bytes += rl; }
    *len = rl;
    return cmds;
}

/* The once-a-frame defrag step, counted for the summary. */
static hh_defrag_report defrag_step(demo *d) {
    hh_defrag_report rep = hh_defrag_step(d->heap, d->o.moves);
    d->moves += rep.moves;
    d->bytes_moved += rep.bytes_moved;
    d->step_ns_total += rep.elapsed_ns;
    if (rep.elapsed_ns > d->step_ns_max) d->step_ns_max = rep.elapsed_ns;
    return rep;
}

/* After the step: every byte of every object (verify exits on a bad one), the
   render list, and the whole heap every 10th frame. False after a message. */
static bool frame_check(demo *d, unsigned f, const uint8_t *cmds, size_t rl) {
    verify(d, f);
    if (cmds) for (size_t k = 0; k < rl; k++) if (cmds[k] != 0x5A) { fprintf(stderr, "hh-demo: render list overwritten\n"); return false; }
    if (f % 10 == 0 && hh_heap_check(d->heap) != HH_OK) { fprintf(stderr, "hh-demo: frame %u: heap check failed\n", f); return false; }
    return true;
}

/* Frame f into the dump (with the step's report); false after a message. */
static bool frame_dump(demo *d, unsigned f, const hh_defrag_report *rep) {
    if (hh_mapdump_write_frame(d->w, f, rep) != HH_OK) { fprintf(stderr, "hh-demo: writing the dump failed\n"); return false; }
    return true;
}

/* The progress line (every log_every-th frame and the last; on a terminal
   one line redrawn); keeps the fragmentation for the summary. */
static void frame_log(demo *d, unsigned f, const hh_defrag_report *rep) {
    hh_heap_stats st;
    hh_heap_stats_get(d->heap, &st);
    d->last.fragmentation = st.fragmentation;
    if (!d->o.quiet && (f % d->log_every == 0 || f + 1 == d->o.frames)) {
        char a[32];
        printf("%sframe %5u/%u  objects %5zu (%u pinned)  binned %4zu  used %5.1f%%  frag %5.1f%%  moved %3u (%s)  step %.3f ms%s",
               d->tty ? "\r" : "", f + 1, d->o.frames, d->nobj, (unsigned)st.pinned_blocks, d->nb,
               100.0 * (double)st.used_bytes / (double)st.capacity, st.fragmentation * 100, rep->moves,
               fmt_bytes(a, sizeof a, (double)rep->bytes_moved), rep->elapsed_ns / 1e6, d->tty ? "   " : "\n");
        fflush(stdout);
    }
}

/* ---------------------------------------------------------------------------
   Pictures and summary
--------------------------------------------------------------------------- */
/* Draws the pictures of the dump (unless --no-render); 0 or hh-viz's status. */
static int demo_render(demo *d) {
    double t0 = now_s();
    int rc = 0;
    if (d->o.render) {
        viz_opts vo = { .width = (int)d->o.width, .every = d->o.every, .out_dir = d->o.out, .progress = -1, .quiet = true };
        rc = viz_render(d->dump_path, &vo, &d->vr);
    }
    d->t_render = now_s() - t0;
    return rc;
}

/* The summary table; render_rc: what demo_render returned. */
static void demo_summary(const demo *d, int render_rc) {
    char a[32], b[32];
    const viz_result *vr = &d->vr;
    printf("\n  hh-demo summary: %s\n", d->label);
    rule();
    row("frames", "%u", d->o.frames);
    row("allocations, relocatable heap", "%" PRIu64, d->allocs);
    row("  failed (heap full)", "%" PRIu64, d->alloc_fail);
    row("allocations, binned region", "%" PRIu64, d->ballocs);
    row("temporaries on the mark stack", "%" PRIu64 " (%s)", d->temps, fmt_bytes(a, sizeof a, (double)d->temp_bytes));
    rule();
    row("defrag moves", "%" PRIu64, d->moves);
    row("bytes moved", "%s", fmt_bytes(a, sizeof a, (double)d->bytes_moved));
    row("defrag step, mean / max", "%.2f / %.2f us", d->step_ns_total / 1e3 / d->o.frames, d->step_ns_max / 1e3);
    row("final fragmentation", "%.1f%%", d->last.fragmentation * 100);
    row("final fragmentation (sum of squares)", "%.1f%%", d->last.fragmentation_sq * 100);
    row("final holes", "%u (%s)", (unsigned)d->last.holes, fmt_bytes(b, sizeof b, (double)d->last.hole_bytes));
    if (d->outro_at < d->o.frames) {
        row("level's end at frame", "%u", d->outro_at);
        row("  then: fragmentation", "%.1f%%", d->at_end.fragmentation * 100);
        row("  then: holes", "%u", (unsigned)d->at_end.hole_count);
        if (d->compact_at != UINT_MAX) row("  no hole left after frame", "%u (%u steps)", d->compact_at,
                                           d->compact_at - d->outro_at + 1);
        else row("  no hole left after frame", "never (%u steps)", d->o.frames - d->outro_at);
    }
    rule();
    row("bytes checked (every object, every frame)", "%s", fmt_bytes(a, sizeof a, (double)d->checked_bytes));
    row("dump", "%s", fmt_bytes(b, sizeof b, (double)d->dump_bytes));
    row("simulation + checks + dump", "%.2f s", d->t_sim);
    if (d->o.render && render_rc == 0) {
        row("pictures drawn", "%zu", vr->frames_drawn);
        if (vr->frames_drawn) {
            row("draw per frame (mean / max)", "%.2f / %.2f ms", vr->draw_ms_total / vr->frames_drawn, vr->draw_ms_max);
            row("PNG encode + write per frame (mean)", "%.2f ms", vr->png_ms_total / vr->frames_drawn);
        }
        row("render (all pictures)", "%.2f s", d->t_render);
    }
    rule();
    if (d->o.render && render_rc == 0)
        printf("\n  open %s/index.html (flipbook), %s/timeline.png, %s/plot.png\n", d->o.out, d->o.out, d->o.out);
}

/* ---------------------------------------------------------------------------
   Main: the game loop
--------------------------------------------------------------------------- */
int main(int argc, char **argv) {
    demo d = { .o = { .frames = 600, .moves = 16, .every = 1, .width = 1024, .policy = HH_DEFRAG_AUTO, .seed = 1,
                      .heap_mib = 4, .out = "out/demo", .render = true, .outro = UINT_MAX } };
    parse_options(&d.o, argc, argv);
    d.outro_at = d.o.frames - d.o.outro;
    d.compact_at = UINT_MAX;
    /* The demo's own seeding (not hh_rng_make): its dump and pictures follow from it. */
    d.r = (hh_rng){ d.o.seed * 0x9E3779B97F4A7C15ULL + 0x1234567 };
    hh_set_error_handler(on_error, &d);
    if (!demo_open(&d)) return 1;
    level_load(&d);

    double t0 = now_s();
    for (unsigned f = 0; f < d.o.frames; f++) {
        hh_mark frame_mark, render_mark;
        hh_mark_push(d.ms, &frame_mark);
        simulate(&d, f);                                   /* deaths, waves, shots, streaming, pins, temporaries */
        hh_mark_push(d.ms, &render_mark);
        size_t rl;
        uint8_t *cmds = render_list(&d, &rl);
        hh_defrag_report rep = defrag_step(&d);
        if (!frame_check(&d, f, cmds, rl) || !frame_dump(&d, f, &rep)) return 1;
        if (f >= d.outro_at && d.compact_at == UINT_MAX) {
            hh_defrag_metrics m;
            if (hh_defrag_metrics_get(d.heap, &m) == HH_OK && m.hole_count == 0) d.compact_at = f;
        }
        hh_mark_pop(&render_mark);
        hh_mark_pop(&frame_mark);
        frame_log(&d, f, &rep);
    }
    if (d.tty && !d.o.quiet) printf("\n");
    d.t_sim = now_s() - t0;
    if (!demo_close(&d)) return 1;

    int rc = demo_render(&d);
    demo_summary(&d, rc);
    if (d.other_errors) { fprintf(stderr, "hh-demo: %u unexpected hheap errors\n", d.other_errors); rc = 1; }
    cairo_debug_reset_static_data();     /* drop cairo's and fontconfig's caches: memcheck sees a clean exit */
    FcFini();
    return rc;
}
