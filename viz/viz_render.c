/* viz_render.c -- the hh-viz pipeline over one dump.
 *
 * Pass 1 reads every frame once and keeps what the summary pictures need
 * (one colour column per frame for the timeline, the metrics for the plot and
 * the flipbook); a truncated dump is reported and its complete frames are
 * used. Pass 2 rewinds and draws the selected frames (--frames, --every),
 * with a progress bar on a terminal.
 */
#include "viz_render.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hheap/mapdump.h"
#include "viz_draw.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* mkdir -p; 0 on success. */
/* Why a write failed: the errno it left, if any. */
static const char *io_reason(int e) { return e ? strerror(e) : "write or encoding failed"; }

int viz_render_mkdir(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    return 0;
}

static void progress_bar(size_t done, size_t total) {
    int w = 40, fill = total ? (int)((double)done * w / (double)total) : w;
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = 0;
    fprintf(stderr, "\r  rendering [%s] %zu/%zu frames", bar, done, total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

static bool selected(const viz_opts *o, uint64_t frame, size_t index_in_range) {
    if (o->has_range && (frame < o->lo || frame > o->hi)) return false;
    return index_in_range % (o->every ? o->every : 1) == 0;
}

static int write_png(cairo_surface_t *s, const char *path) { return viz_write_png(s, path); }

int viz_render(const char *dump_path, const viz_opts *o, viz_result *res) {
    memset(res, 0, sizeof *res);
    int width = o->width ? o->width : 1024;
    char path[4096];
    if (viz_render_mkdir(o->out_dir) != 0) { fprintf(stderr, "hh-viz: cannot create %s: %s\n", o->out_dir, strerror(errno)); return 1; }
    if (!o->no_frames) {
        snprintf(path, sizeof path, "%s/frames", o->out_dir);
        if (viz_render_mkdir(path) != 0) { fprintf(stderr, "hh-viz: cannot create %s: %s\n", path, strerror(errno)); return 1; }
    }
    hh_mapdump_reader *r;
    if (hh_mapdump_open(dump_path, &r) != HH_OK) { fprintf(stderr, "hh-viz: cannot read %s\n", dump_path); return 1; }
    hh_mapdump_file_info info;
    hh_mapdump_info(r, &info);

    /* Pass 1: timeline columns and metrics of every frame. */
    viz_timeline tl;
    viz_timeline_init(&tl, 440);
    viz_series se = {0};
    const hh_mapdump_frame *f;
    hh_status st;
    int rc = 0;
    while ((st = hh_mapdump_next(r, &f)) == HH_OK && f != NULL) {
        if (!viz_timeline_add(&tl, f) || !viz_series_add(&se, f)) { fprintf(stderr, "hh-viz: out of memory\n"); rc = 1; goto out; }
    }
    if (st != HH_OK) {
        res->truncated = true;
        fprintf(stderr, "hh-viz: warning: %s is damaged (see the message above); using its first %zu frames\n",
                dump_path, se.count);
    }
    res->frames_read = se.count;
    if (se.count == 0) { fprintf(stderr, "hh-viz: %s holds no frames\n", dump_path); rc = 1; goto out; }

    /* Pass 2: the frame pictures. */
    unsigned char *drawn = calloc(se.count, 1);
    float *fr = malloc(se.count * sizeof *fr);
    if (!drawn || !fr) { free(drawn); free(fr); fprintf(stderr, "hh-viz: out of memory\n"); rc = 1; goto out; }
    for (size_t i = 0; i < se.count; i++) fr[i] = se.frag[i];
    size_t total = 0, in_range = 0;
    for (size_t i = 0; i < se.count; i++) {
        bool in = !o->has_range || (se.frame[i] >= o->lo && se.frame[i] <= o->hi);
        if (in && selected(o, se.frame[i], in_range)) total++;
        in_range += in;
    }
    bool bar = o->progress > 0 || (o->progress < 0 && isatty(STDERR_FILENO));
    if (!o->no_frames && total > 0) {
        hh_mapdump_rewind(r);
        in_range = 0;
        for (size_t i = 0; i < se.count; i++) {
            if (hh_mapdump_next(r, &f) != HH_OK || f == NULL) break;
            bool in = !o->has_range || (f->frame >= o->lo && f->frame <= o->hi);
            bool sel = in && selected(o, f->frame, in_range);
            in_range += in;
            if (!sel) continue;
            double t0 = now_ms();
            viz_history hist = { fr, i + 1 };
            cairo_surface_t *s = viz_draw_frame(f, &info, width, &hist);
            double t1 = now_ms();
            if (!s) { fprintf(stderr, "hh-viz: drawing frame %llu failed\n", (unsigned long long)f->frame); rc = 1; break; }
            snprintf(path, sizeof path, "%s/frames/frame_%06llu.png", o->out_dir, (unsigned long long)f->frame);
            errno = 0;
            int w = write_png(s, path), e = errno;
            cairo_surface_destroy(s);
            double t2 = now_ms();
            if (w != 0) { fprintf(stderr, "hh-viz: cannot write %s: %s\n", path, io_reason(e)); rc = 1; break; }
            drawn[i] = 1;
            res->frames_drawn++;
            res->draw_ms_total += t1 - t0;
            if (t1 - t0 > res->draw_ms_max) res->draw_ms_max = t1 - t0;
            res->png_ms_total += t2 - t1;
            if (bar) progress_bar(res->frames_drawn, total);
        }
    }
    free(fr);

    /* Summary pictures and the flipbook. */
    viz_axes tl_axes = {0}, plot_axes = {0};
    cairo_surface_t *ts = rc == 0 ? viz_draw_timeline(&tl, &info, width, &tl_axes) : NULL;
    if (ts) {
        snprintf(path, sizeof path, "%s/timeline.png", o->out_dir);
        errno = 0;
        if (write_png(ts, path) != 0) { fprintf(stderr, "hh-viz: cannot write %s: %s\n", path, io_reason(errno)); rc = 1; }
        cairo_surface_destroy(ts);
    } else if (rc == 0) { fprintf(stderr, "hh-viz: drawing the timeline failed\n"); rc = 1; }
    cairo_surface_t *ps = rc == 0 ? viz_draw_plot(&se, width, info.label, &plot_axes) : NULL;
    if (ps) {
        snprintf(path, sizeof path, "%s/plot.png", o->out_dir);
        errno = 0;
        if (write_png(ps, path) != 0) { fprintf(stderr, "hh-viz: cannot write %s: %s\n", path, io_reason(errno)); rc = 1; }
        cairo_surface_destroy(ps);
    } else if (rc == 0) { fprintf(stderr, "hh-viz: drawing the plot failed\n"); rc = 1; }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/index.html", o->out_dir);
        errno = 0;
        if (viz_write_html(path, &se, drawn, info.label, &tl_axes, &plot_axes) != 0) {
            fprintf(stderr, "hh-viz: cannot write %s: %s\n", path, io_reason(errno));
            rc = 1;
        }
    }
    free(drawn);
    if (rc == 0 && !o->quiet) {
        printf("hh-viz: %zu frames read, %zu pictures drawn in %s/ (timeline.png, plot.png, index.html)\n",
               res->frames_read, res->frames_drawn, o->out_dir);
        if (res->frames_drawn)
            printf("hh-viz: %d px wide frame: draw %.2f ms mean (%.2f max), PNG encode+write %.2f ms mean\n", width,
                   res->draw_ms_total / res->frames_drawn, res->draw_ms_max, res->png_ms_total / res->frames_drawn);
    }
out:
    viz_timeline_free(&tl);
    viz_series_free(&se);
    hh_mapdump_reader_close(r);
    return rc;
}
