/* viz_render.h -- turns a .hhmap dump into the picture set: frames/frame_N.png,
 * timeline.png, plot.png and index.html (the flipbook). Shared by hh-viz and
 * hh-demo. */
#ifndef HH_VIZ_RENDER_H
#define HH_VIZ_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct viz_opts {
    int         width;          /* picture width in pixels (default 1024) */
    unsigned    every;          /* render every K-th frame of the range (default 1) */
    bool        has_range;      /* only frames lo..hi (inclusive, by frame number) */
    uint64_t    lo, hi;
    const char *out_dir;        /* created if missing */
    int         progress;       /* 1: progress bar, 0: none, -1: on a terminal only */
    bool        quiet;          /* no summary lines */
    bool        no_frames;      /* timeline, plot and html only */
} viz_opts;

typedef struct viz_result {
    size_t   frames_read;       /* frames in the dump (up to a truncation) */
    size_t   frames_drawn;      /* frame pictures written */
    double   draw_ms_total;     /* drawing time of those (cairo, no PNG) */
    double   draw_ms_max;
    double   png_ms_total;      /* PNG encoding + writing time */
    bool     truncated;         /* the dump ended early (reported as a warning) */
} viz_result;

/* Renders dump_path into o->out_dir. Returns 0 on success; otherwise prints
   one line "hh-viz: ..." on stderr and returns 1. */
int viz_render(const char *dump_path, const viz_opts *o, viz_result *res);

/* mkdir -p path; 0 on success. */
int viz_render_mkdir(const char *path);

/* Writes index.html (see viz_html.c). */
struct viz_series;
struct viz_axes;
int viz_write_html(const char *path, const struct viz_series *s, const unsigned char *drawn, const char *label,
                   const struct viz_axes *timeline, const struct viz_axes *plot);

#endif /* HH_VIZ_RENDER_H */
