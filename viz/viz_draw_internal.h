/* viz_draw_internal.h -- what the picture files of hh-viz share and the tools
 * do not see (viz_draw.h is their interface): the palette, the frame layout
 * constants, and the helpers of viz_paint.c and viz_panel.c.
 *
 * Rooms: viz_paint.c (palette, text, rectangles, cell accumulation, frame
 * ticks), viz_frame.c (one frame picture), viz_panel.c (its side panel),
 * viz_timeline.c (space-time picture), viz_plot.c (metrics plot), viz_png.c
 * (PNG encoding), viz_html.c (the flipbook), viz_render.c (the pipeline over
 * one dump).
 */
#ifndef HH_VIZ_DRAW_INTERNAL_H
#define HH_VIZ_DRAW_INTERNAL_H

#include "viz_draw.h"

/* ---------------------------------------------------------------------------
   Palette (static const in this header: every picture file reads it; the
   compilers do not warn about unused constants declared in a header)
--------------------------------------------------------------------------- */
static const viz_rgb c_bg      = { 0x10, 0x12, 0x18 };
static const viz_rgb c_gap     = { 0x0a, 0x0b, 0x10 };
static const viz_rgb c_free    = { 0x22, 0x27, 0x33 };
static const viz_rgb c_pinned  = { 0xff, 0x3d, 0xd0 };
static const viz_rgb c_moved   = { 0xff, 0xff, 0xff };
static const viz_rgb c_text    = { 0xe8, 0xea, 0xee };
static const viz_rgb c_dim     = { 0x8d, 0x96, 0xa8 };
static const viz_rgb c_grid    = { 0x2c, 0x31, 0x3d };
static const viz_rgb c_accent  = { 0xff, 0xd1, 0x66 };

/* ---------------------------------------------------------------------------
   Layout of the pictures (pixels)
--------------------------------------------------------------------------- */
enum {
    MARGIN = 16, HEADER_H = 74, AXIS_W = 64, ROW_H = 6, LEGEND_H = 76,
};

/* One cell of a raster being accumulated: colour sums weighted by the bytes
   (in cell units) that cover it, and that weight. */
typedef struct cell_acc { float r, g, b, w; } cell_acc;

/* An opaque ARGB32 pixel of colour c. */
static inline uint32_t viz_px(viz_rgb c) { return 0xFF000000u | (uint32_t)c.r << 16 | (uint32_t)c.g << 8 | c.b; }

/* ---------------------------------------------------------------------------
   Colours (viz_paint.c)
--------------------------------------------------------------------------- */
/* a blended towards b by t (0: a, 1: b). */
viz_rgb viz_rgb_mix(viz_rgb a, viz_rgb b, double t);
/* Colour of block b by its state and tag, without the alternating shade. */
viz_rgb viz_block_base_color(const hh_mapdump_block *b);
/* Colour of binned size class cls. */
viz_rgb viz_class_color(int cls);

/* ---------------------------------------------------------------------------
   Text and rectangles (viz_paint.c)
--------------------------------------------------------------------------- */
void   viz_set_rgb(cairo_t *cr, viz_rgb c);
/* Selects DejaVu Sans at size (bold or not). */
void   viz_font(cairo_t *cr, double size, bool bold);
/* Advance width of s in the current font. */
double viz_text_width(cairo_t *cr, const char *s);
/* Draws s with its baseline at y; align 0 left, 1 right, 0.5 centred. Returns the width. */
double viz_text_at(cairo_t *cr, double x, double y, double size, bool bold, viz_rgb c, double align, const char *s);
/* As viz_text_at (left aligned), the font shrunk (down to 60%) until s fits max_w. */
void   viz_text_fit(cairo_t *cr, double x, double y, double size, bool bold, viz_rgb c, double max_w, const char *s);
void   viz_fill_rect(cairo_t *cr, double x, double y, double w, double h, viz_rgb c);
/* Outline of line width lw drawn inside the rectangle. */
void   viz_stroke_rect(cairo_t *cr, double x, double y, double w, double h, viz_rgb c, double lw);
/* The dump's name of tag (info may be NULL), else "tag N" written into buf. */
const char *viz_tag_name(const hh_mapdump_file_info *info, uint32_t tag, char *buf, size_t n);

/* ---------------------------------------------------------------------------
   Rasters and axes (viz_paint.c)
--------------------------------------------------------------------------- */
/* Adds the colour of bytes [s, e) (in cell units) to the cells it covers. */
void viz_acc_span(cell_acc *acc, size_t ncells, double s, double e, viz_rgb c);
/* Frame-number ticks along [x0, x1] below a picture's frame axis at y. */
void viz_frame_ticks(cairo_t *cr, double x0, double x1, double y, const uint64_t *frames, size_t count);

/* ---------------------------------------------------------------------------
   Side panel of a frame picture (viz_panel.c); each returns the y below it
--------------------------------------------------------------------------- */
/* The binned pages: a grid of squares grouped by class, filled by occupancy,
   from y down to at most y + h_max. */
double viz_panel_binned(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, double y, double h_max);
/* The mark stacks: one bar of chunks per stack. */
double viz_panel_stacks(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, double y);

#endif /* HH_VIZ_DRAW_INTERNAL_H */
