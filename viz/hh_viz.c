/* hh_viz.c -- hh-viz: turns a .hhmap heap-map dump into pictures.
 *
 *   hh-viz [options] DUMP.hhmap      (hh-viz --help lists the options and defaults)
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
#include "hh_cli.h"
#include "viz_draw.h"
#include "viz_render.h"

/* hheap errors (a damaged dump) as one plain line. */
static void on_error(hh_status s, const char *message, void *user) {
    (void)s;
    (void)user;
    fprintf(stderr, "hh-viz: %s\n", message);
}

static void quiet_error(hh_status s, const char *message, void *user) {
    (void)s;
    (void)message;
    (void)user;
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

/* --frames A:B (A: or :B open-ended) into lo..hi; a usage error otherwise. */
static void parse_frames(const hh_cli *c, const char *v, uint64_t *lo, uint64_t *hi) {
    static const char *const why = "wants A:B, A: or :B with frame numbers 0..18446744073709551615, A <= B";
    const char *colon = strchr(v, ':');
    if (!colon) hh_cli_bad_value(c, v, why);
    char part[32];
    *lo = 0;
    *hi = UINT64_MAX;
    for (int side = 0; side < 2; side++) {
        const char *b = side ? colon + 1 : v, *e = side ? v + strlen(v) : colon;
        if (e == b) continue;
        if ((size_t)(e - b) >= sizeof part || *b == '-' || *b == '+') hh_cli_bad_value(c, v, why);
        memcpy(part, b, (size_t)(e - b));
        part[e - b] = 0;
        char *end;
        errno = 0;
        unsigned long long n = strtoull(part, &end, 10);
        if (errno || *end) hh_cli_bad_value(c, v, why);
        *(side ? hi : lo) = n;
    }
    if (*lo > *hi) hh_cli_bad_value(c, v, "the range is empty (A > B)");
}

/* Frame numbers of the dump, first and last, and how many; false if it cannot
   be opened (the error handler has said why). */
static bool dump_frame_span(const char *dump, uint64_t *first, uint64_t *last, size_t *count) {
    hh_mapdump_reader *r;
    if (hh_mapdump_open(dump, &r) != HH_OK) return false;
    const hh_mapdump_frame *f;
    *count = 0;
    hh_set_error_handler(quiet_error, NULL);   /* damage is reported once, by the render that follows */
    while (hh_mapdump_next(r, &f) == HH_OK && f) {
        if (*count == 0) *first = f->frame;
        *last = f->frame;
        ++*count;
    }
    hh_set_error_handler(on_error, NULL);
    hh_mapdump_reader_close(r);
    return true;
}

enum { OPT_OUT, OPT_WIDTH, OPT_EVERY, OPT_FRAMES, OPT_NO_FRAMES, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_QUIET, OPT_BENCH,
       OPT_COUNT };

int main(int argc, char **argv) {
    viz_opts o = { .width = 1024, .every = 1, .out_dir = "out/viz", .progress = -1 };
    static const hh_cli_opt opts[OPT_COUNT] = {
        [OPT_OUT]         = { "out", 'o', "DIR", "output directory, created if missing", "out/viz" },
        [OPT_WIDTH]       = { "width", 'w', "PX", "picture width in pixels, 480..8192", "1024" },
        [OPT_EVERY]       = { "every", 0, "K", "draw every K-th frame of the range, 1..1000000", "1" },
        [OPT_FRAMES]      = { "frames", 0, "A:B", "only frames A..B by frame number (A: and :B open-ended)", "all" },
        [OPT_NO_FRAMES]   = { "no-frames", 0, NULL, "only timeline.png, plot.png and index.html", "off" },
        [OPT_PROGRESS]    = { "progress", 0, NULL, "show the progress bar", "on a terminal only" },
        [OPT_NO_PROGRESS] = { "no-progress", 0, NULL, "no progress bar", "on a terminal only" },
        [OPT_QUIET]       = { "quiet", 'q', NULL, "no summary lines", "off" },
        [OPT_BENCH]       = { "bench", 0, "N", "instead of rendering, time drawing the middle frame N times, 1..100000",
                              "off" },
    };
    hh_cli cli;
    hh_cli_init(&cli, "hh-viz", "DUMP.hhmap",
                "writes DIR/frames/frame_NNNNNN.png, DIR/timeline.png, DIR/plot.png and DIR/index.html (a flipbook)\n"
                "exit status: 0 ok, 1 error, 2 bad usage, 3 dump damaged (the frames before the damage are drawn)\n",
                opts, OPT_COUNT);
    unsigned bench_runs = 0;
    const char *frames_arg = NULL, *v;
    int opt;
    while ((opt = hh_cli_next(&cli, argc, argv, &v)) != -1) {
        switch (opt) {
        case OPT_OUT:
            if (!*v) hh_cli_bad_value(&cli, v, "an empty directory name");
            o.out_dir = v;
            break;
        case OPT_WIDTH: o.width = (int)hh_cli_uint(&cli, v, 480, 8192); break;
        case OPT_EVERY: o.every = (unsigned)hh_cli_uint(&cli, v, 1, 1000000); break;
        case OPT_FRAMES:
            parse_frames(&cli, v, &o.lo, &o.hi);
            o.has_range = true;
            frames_arg = v;
            break;
        case OPT_NO_FRAMES: o.no_frames = true; break;
        case OPT_PROGRESS: o.progress = 1; break;
        case OPT_NO_PROGRESS: o.progress = 0; break;
        case OPT_QUIET: o.quiet = true; break;
        case OPT_BENCH: bench_runs = (unsigned)hh_cli_uint(&cli, v, 1, 100000); break;
        default: break;
        }
    }
    if (optind >= argc) hh_cli_usage_error(&cli, "no dump given");
    if (optind + 1 < argc) hh_cli_usage_error(&cli, "more than one dump given");
    const char *dump = argv[optind];
    hh_set_error_handler(on_error, NULL);
    if (o.has_range) {            /* an empty range is a mistake, not an empty picture set */
        uint64_t first = 0, last = 0;
        size_t count = 0;
        if (!dump_frame_span(dump, &first, &last, &count)) return 1;
        if (count == 0 || last < o.lo || first > o.hi) {
            if (count)
                fprintf(stderr, "hh-viz: --frames %s: no frame of %s is in that range (it has frames %llu..%llu)\n",
                        frames_arg, dump, (unsigned long long)first, (unsigned long long)last);
            else
                fprintf(stderr, "hh-viz: --frames %s: %s has no frames\n", frames_arg, dump);
            return 2;
        }
    }
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
