/* viz_paint.c -- what every picture of hh-viz shares: the palette, the
 * colours of blocks and size classes, text and rectangles drawn with cairo,
 * size formatting, the per-cell colour accumulation of the heap raster and
 * the timeline, and the frame-number ticks under the timeline and the plot.
 */
#include "viz_draw_internal.h"

#include <math.h>
#include <stdio.h>

/* ---------------------------------------------------------------------------
   Palette
--------------------------------------------------------------------------- */
/* Tag colours: distinct hues, none close to the pinned magenta or to white. */
static const viz_rgb c_tags[] = {
    { 0x9a, 0xa5, 0xb1 },   /* 0: untagged, grey */
    { 0xe8, 0x5d, 0x3f },   /* 1: red-orange */
    { 0xf5, 0xb3, 0x2f },   /* 2: amber */
    { 0x3f, 0xc9, 0xb0 },   /* 3: teal */
    { 0x4f, 0x8d, 0xf5 },   /* 4: blue */
    { 0x9b, 0x6c, 0xe0 },   /* 5: violet */
    { 0x7c, 0xc2, 0x4a },   /* 6: green */
    { 0xd9, 0x8a, 0x5b },   /* 7: tan */
    { 0x5b, 0xc0, 0xeb },   /* 8: sky */
    { 0xc7, 0x4a, 0x7a },   /* 9: raspberry */
};

viz_rgb viz_color_free(void) { return c_free; }
viz_rgb viz_color_pinned(void) { return c_pinned; }
viz_rgb viz_color_moved(void) { return c_moved; }
viz_rgb viz_color_background(void) { return c_bg; }
viz_rgb viz_color_tag(uint32_t tag) {
    if (tag == 0) return c_tags[0];
    return c_tags[1 + (tag - 1) % (sizeof c_tags / sizeof c_tags[0] - 1)];
}

viz_rgb viz_rgb_mix(viz_rgb a, viz_rgb b, double t) {
    return (viz_rgb){ (uint8_t)lrint(a.r + (b.r - a.r) * t), (uint8_t)lrint(a.g + (b.g - a.g) * t),
                      (uint8_t)lrint(a.b + (b.b - a.b) * t) };
}

viz_rgb viz_block_base_color(const hh_mapdump_block *b) {
    if (b->state == HH_BLOCK_FREE) return c_free;
    if (b->state == HH_BLOCK_PINNED) return c_pinned;
    return viz_color_tag(b->tag);
}

/* In the heap map, about half of the live blocks (chosen by a hash of the
   offset, so a block keeps its shade while it stays put) are drawn a little
   lighter: neighbours of one tag stay distinguishable. */
viz_rgb viz_block_color(const hh_mapdump_block *b) {
    viz_rgb c = viz_block_base_color(b);
    if (b->state == HH_BLOCK_LIVE && (((b->offset >> 4) * 2654435761u) >> 13 & 1)) c = viz_rgb_mix(c, c_moved, 0.16);
    return c;
}

/* Colour of binned size class cls: golden-ratio hue walk. */
viz_rgb viz_class_color(int cls) {
    double h = fmod(0.08 + cls * 0.618034, 1.0) * 6.0, s = 0.55, v = 0.92;
    int i = (int)h;
    double f = h - i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    double r, g, b;
    switch (i) {
    case 0: r = v; g = t; b = p; break;
    case 1: r = q; g = v; b = p; break;
    case 2: r = p; g = v; b = t; break;
    case 3: r = p; g = q; b = v; break;
    case 4: r = t; g = p; b = v; break;
    default: r = v; g = p; b = q; break;
    }
    return (viz_rgb){ (uint8_t)(r * 255), (uint8_t)(g * 255), (uint8_t)(b * 255) };
}

/* ---------------------------------------------------------------------------
   Small helpers: text, rectangles, number formatting
--------------------------------------------------------------------------- */
const char *viz_fmt_bytes(char *buf, size_t n, double bytes) {
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (bytes >= 1024.0 && u < 4) { bytes /= 1024.0; u++; }
    if (u == 0) snprintf(buf, n, "%.0f B", bytes);
    else snprintf(buf, n, bytes < 10 ? "%.2f %s" : bytes < 100 ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

void viz_set_rgb(cairo_t *cr, viz_rgb c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

void viz_font(cairo_t *cr, double size, bool bold) {
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double viz_text_width(cairo_t *cr, const char *s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

/* Draws s with its baseline at y; align 0 left, 1 right, 0.5 centred. Returns the width. */
double viz_text_at(cairo_t *cr, double x, double y, double size, bool bold, viz_rgb c, double align, const char *s) {
    viz_font(cr, size, bold);
    double w = viz_text_width(cr, s);
    viz_set_rgb(cr, c);
    cairo_move_to(cr, x - w * align, y);
    cairo_show_text(cr, s);
    return w;
}

/* As viz_text_at (left aligned), the font shrunk (down to 60%) until s fits max_w. */
void viz_text_fit(cairo_t *cr, double x, double y, double size, bool bold, viz_rgb c, double max_w, const char *s) {
    double sz = size;
    viz_font(cr, sz, bold);
    while (sz > size * 0.6 && viz_text_width(cr, s) > max_w) viz_font(cr, sz -= 0.5, bold);
    viz_set_rgb(cr, c);
    cairo_move_to(cr, x, y);
    cairo_show_text(cr, s);
}

void viz_fill_rect(cairo_t *cr, double x, double y, double w, double h, viz_rgb c) {
    viz_set_rgb(cr, c);
    cairo_rectangle(cr, x, y, w, h);
    cairo_fill(cr);
}

void viz_stroke_rect(cairo_t *cr, double x, double y, double w, double h, viz_rgb c, double lw) {
    viz_set_rgb(cr, c);
    cairo_set_line_width(cr, lw);
    cairo_rectangle(cr, x + lw / 2, y + lw / 2, w - lw, h - lw);
    cairo_stroke(cr);
}

const char *viz_tag_name(const hh_mapdump_file_info *info, uint32_t tag, char *buf, size_t n) {
    if (info && tag < info->tag_name_count && info->tag_names[tag][0]) return info->tag_names[tag];
    snprintf(buf, n, "tag %u", (unsigned)tag);
    return buf;
}

/* ---------------------------------------------------------------------------
   Cell accumulation (heap raster and timeline columns)
--------------------------------------------------------------------------- */
/* Adds the colour of bytes [s, e) (in cell units) to the cells it covers. */
void viz_acc_span(cell_acc *acc, size_t ncells, double s, double e, viz_rgb c) {
    if (s < 0) s = 0;
    if (e > (double)ncells) e = (double)ncells;          /* hostile or resized frames: stay in the raster */
    if (e <= s) return;
    size_t c0 = (size_t)s, c1 = (size_t)ceil(e);
    if (c1 > ncells) c1 = ncells;
    for (size_t i = c0; i < c1; i++) {
        double ov = fmin(e, (double)i + 1) - fmax(s, (double)i);
        if (ov <= 0) continue;
        acc[i].r += (float)(c.r * ov);
        acc[i].g += (float)(c.g * ov);
        acc[i].b += (float)(c.b * ov);
        acc[i].w += (float)ov;
    }
}

/* ---------------------------------------------------------------------------
   Frame axis ticks (timeline and plot)
--------------------------------------------------------------------------- */
/* Frame-number ticks along [x0, x1] at the bottom of a plot: round frame
   numbers (a 1-2-5 step giving at most ~10 ticks), each placed at the column
   of the first frame at or after it. */
void viz_frame_ticks(cairo_t *cr, double x0, double x1, double y, const uint64_t *frames, size_t count) {
    if (count == 0) return;
    uint64_t lo = frames[0], hi = frames[count - 1], span = hi > lo ? hi - lo : 1;
    int max_ticks = (int)fmin(10, fmax(2, (x1 - x0) / 80));
    uint64_t step = 1;
    for (uint64_t p = 1;; p *= 10) {
        if (span / p <= (uint64_t)max_ticks) { step = p; break; }
        if (span / (2 * p) <= (uint64_t)max_ticks) { step = 2 * p; break; }
        if (span / (5 * p) <= (uint64_t)max_ticks) { step = 5 * p; break; }
    }
    char buf[32];
    size_t i = 0;
    for (uint64_t v = (lo + step - 1) / step * step; v <= hi; v += step) {
        while (i < count && frames[i] < v) i++;
        if (i == count) break;
        double x = x0 + (x1 - x0) * ((double)i + 0.5) / (double)count;
        viz_set_rgb(cr, c_grid);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, floor(x) + 0.5, y);
        cairo_line_to(cr, floor(x) + 0.5, y + 4);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
        viz_text_at(cr, x, y + 15, 10, false, c_dim, 0.5, buf);
        if (v > UINT64_MAX - step) break;
    }
}
