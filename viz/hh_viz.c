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
 *
 * Writes DIR/frames/frame_NNNNNN.png, DIR/timeline.png, DIR/plot.png and
 * DIR/index.html (open it in a browser: an offline flipbook).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hheap/mapdump.h"
#include "viz_render.h"

static void usage(FILE *f) {
    fputs("usage: hh-viz [--out DIR] [--width PX] [--every K] [--frames A:B] [--no-frames]\n"
          "              [--progress|--no-progress] [--quiet] DUMP.hhmap\n", f);
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
    viz_result res;
    return viz_render(dump, &o, &res);
}
