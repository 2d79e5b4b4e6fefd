/* viz_draw.h -- cairo drawing of heap maps: one frame, the space-time
 * timeline, the metrics plot. Used by hh-viz, hh-demo and the render test.
 *
 * Geometry of a frame picture (all in pixels):
 *   header band (frame number + metrics), then the heap map on the left and
 *   the side panel (binned pages, mark stacks) on the right when the dump has
 *   them, then the legend. The heap map is the managed address space laid out
 *   as rows of cells: offset 0 is the bottom-left cell, addresses grow to the
 *   right and then upwards, so holes that the defrag step pushes to the top of
 *   the heap rise in the picture. One cell covers bytes_per_cell bytes; a cell
 *   shared by several blocks shows their colours mixed by bytes.
 */
#ifndef HH_VIZ_DRAW_H
#define HH_VIZ_DRAW_H

#include <cairo.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/mapdump.h"

typedef struct viz_rgb { uint8_t r, g, b; } viz_rgb;

/* Colours, exposed so that tests can look for them. */
viz_rgb viz_color_free(void);
viz_rgb viz_color_pinned(void);
viz_rgb viz_color_moved(void);
viz_rgb viz_color_background(void);
/* Colour of a live block of the given tag. */
viz_rgb viz_color_tag(uint32_t tag);
/* Colour of block b in the heap map: its state / tag colour, a shade lighter
   for about half of the live blocks (by offset) so that neighbours differ. */
viz_rgb viz_block_color(const hh_mapdump_block *b);

/* Layout of the heap map inside a frame picture of a given width. */
typedef struct viz_layout {
    int      width, height;           /* whole picture */
    int      map_x, map_y;            /* top-left pixel of the map area */
    int      map_w;                   /* cells per row (one pixel each) */
    int      rows;                    /* rows of cells */
    int      row_h;                   /* pixels per row, the last one a gap */
    double   bytes_per_cell;
    uint64_t managed_bytes;
    bool     panel;                   /* a side panel is drawn */
    int      panel_x, panel_w;
} viz_layout;

/* Computes the layout of frame f's picture at the given width (>= 480). */
void viz_frame_layout(const hh_mapdump_frame *f, int width, viz_layout *out);
/* Pixel at the centre of the cell holding byte `offset` (inside the coloured
   band of its row, not on an outline row). */
void viz_layout_pixel(const viz_layout *l, uint64_t offset, int *x, int *y);

/* Optional per-frame history shown as a sparkline in the header. */
typedef struct viz_history {
    const float *fragmentation;       /* one value in [0,1] per frame up to and including this one */
    size_t       count;
} viz_history;

/* Draws frame f. Returns a new ARGB32 surface (caller destroys it), NULL if
   cairo fails. info gives the tag names (may be NULL). */
cairo_surface_t *viz_draw_frame(const hh_mapdump_frame *f, const hh_mapdump_file_info *info, int width,
                                const viz_history *hist);

/* Space-time picture: columns[i] is the colour column of frame i (height
   `col_h` cells, bottom = offset 0, RGB bytes). */
typedef struct viz_timeline {
    uint8_t  *cells;                  /* frame_count * col_h * 3 bytes */
    float    *high_water;             /* per frame: highest live byte / managed, 0..1 */
    uint64_t *frame_no;               /* per frame: its number */
    size_t    frame_count, frame_cap;
    int       col_h;                  /* cells per column */
    uint64_t  managed_bytes;
} viz_timeline;

void viz_timeline_init(viz_timeline *t, int col_h);
/* Appends frame f's column; false on out of memory. */
bool viz_timeline_add(viz_timeline *t, const hh_mapdump_frame *f);
void viz_timeline_free(viz_timeline *t);
/* Where the frame axis of a timeline or plot lies in its picture (pixels):
   frame i of n is drawn at x0 + (x1 - x0) * (i + 0.5) / n, between y0 and y1. */
typedef struct viz_axes { int x0, x1, y0, y1, width, height; } viz_axes;

/* Draws the timeline; *axes (may be NULL) receives where the frames are. */
cairo_surface_t *viz_draw_timeline(const viz_timeline *t, const hh_mapdump_file_info *info, int width, viz_axes *axes);

/* Per-frame numbers for the plot (and index.html). */
typedef struct viz_series {
    uint64_t *frame;
    float    *frag, *frag_sq;         /* 0..1 */
    uint32_t *holes, *moves;
    uint64_t *bytes_moved, *largest_hole, *debt, *used, *defrag_ns;
    size_t    count, cap;
} viz_series;

bool viz_series_add(viz_series *s, const hh_mapdump_frame *f);
void viz_series_free(viz_series *s);
/* label (may be NULL): shown under the title (the dump's label). */
cairo_surface_t *viz_draw_plot(const viz_series *s, int width, const char *label, viz_axes *axes);

/* Writes an RGB24 surface as an 8-bit RGB PNG (viz_png.c); 0 on success. */
int viz_write_png(cairo_surface_t *s, const char *path);

/* "12.3 KiB" style size text into buf. */
const char *viz_fmt_bytes(char *buf, size_t n, double bytes);

#endif /* HH_VIZ_DRAW_H */
