/* hh_viz.c -- hh-viz: turns a .hhmap heap-map dump into pictures.
 *
 *   hh-viz [options] DUMP.hhmap
 *     --out DIR       output directory (default: out/viz)
 *     --width PX      picture width (default 1024, at least 480)
 *     --every K       draw every K-th frame (default 1)
 *     --frames A:B    only frames A..B (by frame number; A: or :B open-ended)
 *     --no-frames     only timeline.png, plot.png and index.html
 *     --progress / --no-progress   force the progress bar on / off (default: on a terminal)
 *     --quiet         no summary lines
 *     --bench N       instead of rendering: draw the middle frame N times and
 *                     print the median / max time of drawing and of PNG writing
 *
 * Writes DIR/frames/frame_NNNNNN.png, DIR/timeline.png, DIR/plot.png and
 * DIR/index.html (open it in a browser: an offline flipbook).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cairo.h>
#include <fontconfig/fontconfig.h>

#include "hheap/mapdump.h"
#include "viz_draw.h"
#include "viz_render.h"

/* hheap errors (a damaged dump) as one plain line. */
static void on_error(hh_status s, const char *message, void *user) {
    (void)s;
    (void)user;
    fprintf(stderr, "hh-viz: %s\n", message);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --bench: draw the middle frame n times (and write it as PNG n times). */
static int bench(const char *dump, int width, unsigned n, const char *out_dir) {
    hh_mapdump_reader *r;
    if (hh_mapdump_open(dump, &r) != HH_OK) return 1;
    hh_mapdump_file_info info;
    hh_mapdump_info(r, &info);
    const hh_mapdump_frame *f;
    size_t count = 0;
    while (hh_mapdump_next(r, &f) == HH_OK && f) count++;
    hh_mapdump_rewind(r);
    for (size_t i = 0; i <= count / 2; i++)
        if (hh_mapdump_next(r, &f) != HH_OK || !f) { hh_mapdump_reader_close(r); return 1; }
    double *draw = calloc(n, sizeof *draw), *png = calloc(n, sizeof *png);
    char path[4096];
    snprintf(path, sizeof path, "%s/bench.png", out_dir);
    int rc = draw && png ? 0 : 1;
    for (unsigned i = 0; rc == 0 && i < n; i++) {
        double t0 = now_ms();
        cairo_surface_t *s = viz_draw_frame(f, &info, width, NULL);
        double t1 = now_ms();
        if (!s || viz_write_png(s, path) != 0) { fprintf(stderr, "hh-viz: cannot draw or write %s\n", path); rc = 1; }
        double t2 = now_ms();
        if (s) cairo_surface_destroy(s);
        draw[i] = t1 - t0;
        png[i] = t2 - t1;
    }
    if (rc == 0) {
        qsort(draw, n, sizeof *draw, cmp_double);
        qsort(png, n, sizeof *png, cmp_double);
        printf("hh-viz bench: frame %llu (%zu blocks), %d px wide, %u runs: draw median %.2f ms (max %.2f), "
               "PNG encode+write median %.2f ms (max %.2f), total median %.2f ms\n",
               (unsigned long long)f->frame, f->block_count, width, n, draw[n / 2], draw[n - 1], png[n / 2], png[n - 1],
               draw[n / 2] + png[n / 2]);
    }
    free(draw);
    free(png);
    hh_mapdump_reader_close(r);
    return rc;
}

static void usage(FILE *f) {
    fputs("usage: hh-viz [--out DIR] [--width PX] [--every K] [--frames A:B] [--no-frames]\n"
          "              [--progress|--no-progress] [--quiet] [--bench N] DUMP.hhmap\n"
          "exit status: 0 ok, 1 error, 2 bad usage, 3 dump damaged (the frames before the damage are drawn)\n", f);
}

/* Parses an unsigned number; false if s is not one. */
static bool parse_u64(const char *s, unsigned long long *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == 0;
}

int main(int argc, char **argv) {
    viz_opts o = { .width = 1024, .every = 1, .out_dir = "out/viz", .progress = -1 };
    const char *dump = NULL;
    unsigned bench_runs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned long long n;
        if (!strcmp(a, "--out") && v) { o.out_dir = v; i++; }
        else if (!strcmp(a, "--width") && v) {
            if (!parse_u64(v, &n) || n < 480 || n > 8192) { fprintf(stderr, "hh-viz: --width must be 480..8192\n"); return 2; }
            o.width = (int)n; i++;
        } else if (!strcmp(a, "--every") && v) {
            if (!parse_u64(v, &n) || n == 0 || n > 1000000) { fprintf(stderr, "hh-viz: --every must be a positive number\n"); return 2; }
            o.every = (unsigned)n; i++;
        } else if (!strcmp(a, "--frames") && v) {
            const char *colon = strchr(v, ':');
            char lo[32] = "", hi[32] = "";
            if (!colon || (size_t)(colon - v) >= sizeof lo || strlen(colon + 1) >= sizeof hi) {
                fprintf(stderr, "hh-viz: --frames wants A:B\n"); return 2;
            }
            memcpy(lo, v, (size_t)(colon - v));
            strcpy(hi, colon + 1);
            unsigned long long l = 0, h = UINT64_MAX;
            if ((lo[0] && !parse_u64(lo, &l)) || (hi[0] && !parse_u64(hi, &h)) || l > h) {
                fprintf(stderr, "hh-viz: --frames wants A:B with A <= B\n"); return 2;
            }
            o.has_range = true; o.lo = l; o.hi = h; i++;
        } else if (!strcmp(a, "--bench") && v) {
            if (!parse_u64(v, &n) || n == 0 || n > 100000) { fprintf(stderr, "hh-viz: --bench wants a run count\n"); return 2; }
            bench_runs = (unsigned)n; i++;
        } else if (!strcmp(a, "--no-frames")) o.no_frames = true;
        else if (!strcmp(a, "--progress")) o.progress = 1;
        else if (!strcmp(a, "--no-progress")) o.progress = 0;
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (a[0] == '-' ) { fprintf(stderr, "hh-viz: unknown option %s\n", a); usage(stderr); return 2; }
        else if (!dump) dump = a;
        else { fprintf(stderr, "hh-viz: more than one dump given\n"); return 2; }
    }
    if (!dump) { usage(stderr); return 2; }
    hh_set_error_handler(on_error, NULL);
    viz_result res;
    int rc;
    if (bench_runs) {
        rc = viz_render_mkdir(o.out_dir) == 0 ? bench(dump, o.width, bench_runs, o.out_dir) : 1;
    } else {
        rc = viz_render(dump, &o, &res);
        if (rc == 0 && res.truncated) rc = 3;   /* pictures drawn from the good frames, but say the dump is damaged */
    }
    cairo_debug_reset_static_data();     /* drop cairo's and fontconfig's caches: memcheck sees a clean exit */
    FcFini();
    return rc;
}
