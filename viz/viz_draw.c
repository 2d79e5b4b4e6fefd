/* viz_draw.c -- cairo drawing of heap maps (see viz_draw.h for the geometry).
 *
 * The heap map itself is written straight into the image surface's pixels:
 * per cell, the colours of the blocks covering it are summed weighted by the
 * bytes they cover (one pass over the blocks, one over the cells), so a frame
 * costs O(blocks + cells) whatever the block sizes. Text, panels and legends
 * are drawn with cairo on top.
 */
#include "viz_draw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------
   Palette
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

static viz_rgb rgb_mix(viz_rgb a, viz_rgb b, double t) {
    return (viz_rgb){ (uint8_t)lrint(a.r + (b.r - a.r) * t), (uint8_t)lrint(a.g + (b.g - a.g) * t),
                      (uint8_t)lrint(a.b + (b.b - a.b) * t) };
}

static viz_rgb block_color(const hh_mapdump_block *b) {
    if (b->state == HH_BLOCK_FREE) return c_free;
    if (b->state == HH_BLOCK_PINNED) return c_pinned;
    return viz_color_tag(b->tag);
}

/* In the heap map, about half of the live blocks (chosen by a hash of the
   offset, so a block keeps its shade while it stays put) are drawn a little
   lighter: neighbours of one tag stay distinguishable. */
viz_rgb viz_block_color(const hh_mapdump_block *b) {
    viz_rgb c = block_color(b);
    if (b->state == HH_BLOCK_LIVE && (((b->offset >> 4) * 2654435761u) >> 13 & 1)) c = rgb_mix(c, c_moved, 0.16);
    return c;
}

/* Colour of binned size class cls: golden-ratio hue walk. */
static viz_rgb class_color(int cls) {
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

static void set_rgb(cairo_t *cr, viz_rgb c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

static void font(cairo_t *cr, double size, bool bold) {
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static double text_width(cairo_t *cr, const char *s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

/* Draws s with its baseline at y; align 0 left, 1 right, 0.5 centred. Returns the width. */
static double text_at(cairo_t *cr, double x, double y, double size, bool bold, viz_rgb c, double align, const char *s) {
    font(cr, size, bold);
    double w = text_width(cr, s);
    set_rgb(cr, c);
    cairo_move_to(cr, x - w * align, y);
    cairo_show_text(cr, s);
    return w;
}

/* As text_at (left aligned), the font shrunk (down to 60%) until s fits max_w. */
static void text_fit(cairo_t *cr, double x, double y, double size, bool bold, viz_rgb c, double max_w, const char *s) {
    double sz = size;
    font(cr, sz, bold);
    while (sz > size * 0.6 && text_width(cr, s) > max_w) font(cr, sz -= 0.5, bold);
    set_rgb(cr, c);
    cairo_move_to(cr, x, y);
    cairo_show_text(cr, s);
}

static void fill_rect(cairo_t *cr, double x, double y, double w, double h, viz_rgb c) {
    set_rgb(cr, c);
    cairo_rectangle(cr, x, y, w, h);
    cairo_fill(cr);
}

static void stroke_rect(cairo_t *cr, double x, double y, double w, double h, viz_rgb c, double lw) {
    set_rgb(cr, c);
    cairo_set_line_width(cr, lw);
    cairo_rectangle(cr, x + lw / 2, y + lw / 2, w - lw, h - lw);
    cairo_stroke(cr);
}

static const char *tag_name(const hh_mapdump_file_info *info, uint32_t tag, char *buf, size_t n) {
    if (info && tag < info->tag_name_count && info->tag_names[tag][0]) return info->tag_names[tag];
    snprintf(buf, n, "tag %u", (unsigned)tag);
    return buf;
}

static inline uint32_t px(viz_rgb c) { return 0xFF000000u | (uint32_t)c.r << 16 | (uint32_t)c.g << 8 | c.b; }

/* ---------------------------------------------------------------------------
   Layout
--------------------------------------------------------------------------- */
enum {
    MARGIN = 16, HEADER_H = 74, AXIS_W = 64, ROW_H = 6, LEGEND_H = 76,
};

void viz_frame_layout(const hh_mapdump_frame *f, int width, viz_layout *l) {
    memset(l, 0, sizeof *l);
    if (width < 480) width = 480;
    l->width = width;
    l->managed_bytes = f->managed_bytes ? f->managed_bytes : 1;
    l->panel = f->has_binned || f->stack_count > 0;
    l->panel_w = l->panel ? (int)fmin(fmax(width * 0.27, 220), 340) : 0;
    l->map_x = MARGIN + AXIS_W;
    l->map_y = HEADER_H + 10;
    l->map_w = width - l->map_x - MARGIN - (l->panel ? l->panel_w + MARGIN : 0);
    l->panel_x = l->map_x + l->map_w + MARGIN;
    l->row_h = ROW_H;
    int target_h = (int)(width * 0.52);
    l->rows = target_h / ROW_H;
    l->bytes_per_cell = (double)l->managed_bytes / ((double)l->map_w * l->rows);
    l->height = l->map_y + l->rows * ROW_H + 12 + LEGEND_H + MARGIN / 2;
}

/* Top pixel row of map row r (row 0 at the bottom). */
static int row_top(const viz_layout *l, int r) { return l->map_y + (l->rows - 1 - r) * l->row_h; }

void viz_layout_pixel(const viz_layout *l, uint64_t offset, int *x, int *y) {
    uint64_t cell = (uint64_t)((double)offset / l->bytes_per_cell);
    int r = (int)(cell / (uint64_t)l->map_w), c = (int)(cell % (uint64_t)l->map_w);
    *x = l->map_x + c;
    *y = row_top(l, r) + (l->row_h - 1) / 2;
}

/* ---------------------------------------------------------------------------
   Heap raster
--------------------------------------------------------------------------- */
enum { CELL_MOVED = 1, CELL_EDGE = 2, CELL_MOVED_START = 4, CELL_MOVED_END = 8 };

typedef struct cell_acc { float r, g, b, w; } cell_acc;

/* Adds the colour of bytes [s, e) (in cell units) to the cells it covers. */
static void acc_span(cell_acc *acc, size_t ncells, double s, double e, viz_rgb c) {
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

/* Writes the map of frame f into the surface pixels. */
static bool draw_map(cairo_surface_t *surf, const viz_layout *l, const hh_mapdump_frame *f) {
    size_t ncells = (size_t)l->map_w * (size_t)l->rows;
    cell_acc *acc = calloc(ncells, sizeof *acc);
    uint8_t *flags = calloc(ncells, 1);
    if (!acc || !flags) { free(acc); free(flags); return false; }
    double bpc = l->bytes_per_cell;
    for (size_t i = 0; i < f->block_count; i++) {
        const hh_mapdump_block *b = &f->blocks[i];
        double s = (double)b->offset / bpc, e = (double)(b->offset + b->size) / bpc;
        acc_span(acc, ncells, s, e, viz_block_color(b));
        size_t c0 = (size_t)s, c1 = (size_t)ceil(e);
        if (c1 > ncells) c1 = ncells;
        if (c0 >= ncells) continue;
        if (b->state != HH_BLOCK_FREE && e - s >= 3) flags[c0] |= CELL_EDGE;
        if (b->moved) {
            for (size_t c = c0; c < c1; c++) flags[c] |= CELL_MOVED;
            flags[c0] |= CELL_MOVED_START;
            if (c1 > c0) flags[c1 - 1] |= CELL_MOVED_END;
        }
    }
    cairo_surface_flush(surf);
    uint8_t *data = cairo_image_surface_get_data(surf);
    int stride = cairo_image_surface_get_stride(surf);
    uint32_t gap = px(c_gap), moved = px(c_moved);
    for (int r = 0; r < l->rows; r++) {
        int top = row_top(l, r);
        for (int c = 0; c < l->map_w; c++) {
            size_t i = (size_t)r * (size_t)l->map_w + (size_t)c;
            viz_rgb col;
            if (acc[i].w <= 0) col = c_bg;     /* beyond the managed range */
            else {
                double rest = 1.0 - acc[i].w;  /* the last cell may be partly outside */
                if (rest < 0) rest = 0;
                double w = acc[i].w + rest;
                col = (viz_rgb){ (uint8_t)((acc[i].r + c_bg.r * rest) / w), (uint8_t)((acc[i].g + c_bg.g * rest) / w),
                                 (uint8_t)((acc[i].b + c_bg.b * rest) / w) };
            }
            if (flags[i] & CELL_EDGE) col = rgb_mix(col, c_gap, 0.6);   /* where a wide block begins */
            uint32_t body = px(col);
            bool mv = flags[i] & CELL_MOVED, mend = flags[i] & (CELL_MOVED_START | CELL_MOVED_END);
            for (int y = 0; y < l->row_h; y++) {
                uint32_t v;
                if (y == l->row_h - 1) v = gap;
                else if (mv && (y == 0 || y == l->row_h - 2 || mend)) v = moved;
                else v = body;
                ((uint32_t *)(void *)(data + (size_t)(top + y) * (size_t)stride))[l->map_x + c] = v;
            }
        }
    }
    cairo_surface_mark_dirty(surf);
    free(acc);
    free(flags);
    return true;
}

/* Offset of the lowest hole (a free block with another block above it);
   false if there is none. */
static bool lowest_hole(const hh_mapdump_frame *f, uint64_t *off) {
    for (size_t i = 0; i + 1 < f->block_count; i++)
        if (f->blocks[i].state == HH_BLOCK_FREE) { *off = f->blocks[i].offset; return true; }
    return false;
}

/* ---------------------------------------------------------------------------
   Frame picture: header, axis, legend, side panel
--------------------------------------------------------------------------- */
static void draw_header(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, const viz_history *hist) {
    const hh_mapdump_metrics *m = &f->metrics;
    char t[64], a[32], b[32];
    snprintf(t, sizeof t, "frame %llu", (unsigned long long)f->frame);
    double x = MARGIN;
    x += text_at(cr, x, 36, 22, true, c_text, 0, t) + 28;

    double spark_w = hist && hist->count > 1 ? 150 : 0;
    double right = l->width - MARGIN - (spark_w ? spark_w + 18 : 0);
    struct { const char *label; char value[48]; viz_rgb c; } chip[6];
    int n = 0;
    chip[n].label = "fragmentation"; snprintf(chip[n].value, 48, "%.1f%%", m->fragmentation * 100); chip[n++].c = c_accent;
    chip[n].label = "sum-of-squares"; snprintf(chip[n].value, 48, "%.1f%%", m->fragmentation_sq * 100); chip[n++].c = c_text;
    chip[n].label = "holes"; snprintf(chip[n].value, 48, "%u · %s", (unsigned)m->holes, viz_fmt_bytes(b, sizeof b, (double)m->hole_bytes)); chip[n++].c = c_text;
    chip[n].label = "largest hole"; viz_fmt_bytes(chip[n].value, 48, (double)m->largest_hole); chip[n++].c = c_text;
    chip[n].label = "moved this frame";
    snprintf(chip[n].value, 48, "%u · %s", (unsigned)m->moves, viz_fmt_bytes(a, sizeof a, (double)m->bytes_moved));
    chip[n++].c = m->moves ? c_moved : c_dim;
    chip[n].label = "compaction debt"; viz_fmt_bytes(chip[n].value, 48, (double)m->compaction_debt); chip[n++].c = c_text;
    for (int i = 0; i < n; i++) {
        font(cr, 15, true);
        double wv = text_width(cr, chip[i].value);
        font(cr, 10.5, false);
        double wl = text_width(cr, chip[i].label), w = fmax(wv, wl);
        if (x + w > right) break;
        text_at(cr, x, 20, 10.5, false, c_dim, 0, chip[i].label);
        text_at(cr, x, 39, 15, true, chip[i].c, 0, chip[i].value);
        x += w + 24;
    }
    /* Second line: as many of these parts as fit the width, in order. */
    char parts[6][96];
    int np = 0;
    snprintf(parts[np++], 96, "%u live blocks (%u pinned)", (unsigned)m->live_blocks, (unsigned)m->pinned_blocks);
    snprintf(parts[np++], 96, "%s used of %s", viz_fmt_bytes(a, sizeof a, (double)m->used_bytes),
             viz_fmt_bytes(b, sizeof b, (double)m->managed_bytes));
    snprintf(parts[np++], 96, "%u free blocks", (unsigned)m->free_blocks);
    snprintf(parts[np++], 96, "defrag step %.3f ms", m->defrag_ns / 1e6);
    if (f->has_service) {
        if (f->service.frames_to_compact)
            snprintf(parts[np++], 96, "≈%llu frames to compact", (unsigned long long)f->service.frames_to_compact);
        else snprintf(parts[np++], 96, "compact");
        if (f->service.stuck_holes)
            snprintf(parts[np++], 96, "%llu hole%s stuck under pinned blocks", (unsigned long long)f->service.stuck_holes,
                     f->service.stuck_holes == 1 ? "" : "s");
    }
    char line[640] = "";
    font(cr, 11.5, false);
    for (int i = 0; i < np; i++) {
        char trial[640];
        snprintf(trial, sizeof trial, "%s%s%s", line, i ? " · " : "", parts[i]);
        if (text_width(cr, trial) > l->width - 2 * MARGIN) break;
        memcpy(line, trial, sizeof line);
    }
    text_at(cr, MARGIN, 62, 11.5, false, c_dim, 0, line);

    if (spark_w) {     /* fragmentation so far, newest at the right */
        double x0 = l->width - MARGIN - spark_w, y0 = 8, h = 40;
        fill_rect(cr, x0, y0, spark_w, h, (viz_rgb){ 0x18, 0x1b, 0x23 });
        size_t n0 = hist->count > (size_t)spark_w ? hist->count - (size_t)spark_w : 0;
        size_t cnt = hist->count - n0;
        cairo_set_line_width(cr, 1.3);
        set_rgb(cr, c_accent);
        for (size_t i = 0; i < cnt; i++) {
            double xx = x0 + (cnt > 1 ? spark_w * (double)i / (double)(cnt - 1) : 0);
            double yy = y0 + h - 2 - (h - 4) * fmin(1.0, fmax(0.0, hist->fragmentation[n0 + i]));
            if (i == 0) cairo_move_to(cr, xx, yy); else cairo_line_to(cr, xx, yy);
        }
        cairo_stroke(cr);
        text_at(cr, x0 + 4, y0 + 11, 9, false, c_dim, 0, "fragmentation, last frames");
    }
}

/* A small arrow left of the map pointing at the row of the lowest hole: the
   compaction front, which the defrag step pushes upwards. */
static void draw_front(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f) {
    uint64_t off;
    if (!lowest_hole(f, &off)) return;
    int x, y;
    viz_layout_pixel(l, off, &x, &y);
    set_rgb(cr, c_accent);
    cairo_move_to(cr, l->map_x - 1, y + 0.5);
    cairo_line_to(cr, l->map_x - 8, y - 4.5);
    cairo_line_to(cr, l->map_x - 8, y + 5.5);
    cairo_close_path(cr);
    cairo_fill(cr);
}

/* Offset labels at round values (a 1-2-4-8 step of a power of 1024 giving 4 to
   8 labels), each at the row that holds that offset. */
static void draw_axis(cairo_t *cr, const viz_layout *l) {
    double row_bytes = l->bytes_per_cell * l->map_w, total = (double)l->managed_bytes;
    double step = 1;
    while (total / step > 8) step *= 2;                  /* powers of two: KiB / MiB stay round */
    char buf[32];
    for (double v = 0; v <= total + 0.5; v += step) {
        int r = (int)(v / row_bytes);
        double y = r >= l->rows ? l->map_y : row_top(l, r) + l->row_h;   /* boundary below the row */
        text_at(cr, l->map_x - 10, y + 3.5, 10, false, c_dim, 1, viz_fmt_bytes(buf, sizeof buf, v));
        set_rgb(cr, c_grid);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, l->map_x - 7, y + 0.5);
        cairo_line_to(cr, l->map_x - 1, y + 0.5);
        cairo_stroke(cr);
    }
}

/* One legend entry at (*x, *y); wraps to a new line (x back to x0) past x_max. */
static void swatch(cairo_t *cr, double *x, double *y, double x0, double x_max, viz_rgb fill, viz_rgb edge, bool outline,
                   const char *label) {
    font(cr, 11.5, false);
    double w = 19 + text_width(cr, label);
    if (*x + w > x_max && *x > x0) { *x = x0; *y += 18; }
    fill_rect(cr, *x, *y - 10, 14, 12, fill);
    if (outline) stroke_rect(cr, *x, *y - 10, 14, 12, edge, 1.5);
    *x += 19;
    *x += text_at(cr, *x, *y, 11.5, false, c_text, 0, label) + 16;
}

static void draw_legend(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, const hh_mapdump_file_info *info) {
    double y = l->map_y + l->rows * l->row_h + 24;
    double x = l->map_x;
    bool seen[HH_MAPDUMP_MAX_TAGS + 1] = { false };
    for (size_t i = 0; i < f->block_count; i++)
        if (f->blocks[i].state == HH_BLOCK_LIVE) seen[f->blocks[i].tag < HH_MAPDUMP_MAX_TAGS ? f->blocks[i].tag : HH_MAPDUMP_MAX_TAGS] = true;
    if (info)   /* named tags always appear, so the legend does not jump between frames */
        for (uint32_t t = 0; t < info->tag_name_count; t++) if (info->tag_names[t][0]) seen[t] = true;
    char buf[40];
    double x_max = l->width - MARGIN;
    for (uint32_t t = 0; t <= HH_MAPDUMP_MAX_TAGS; t++) {
        if (!seen[t]) continue;
        swatch(cr, &x, &y, l->map_x, x_max, viz_color_tag(t), c_text, false,
               t == HH_MAPDUMP_MAX_TAGS ? "other tags" : tag_name(info, t, buf, sizeof buf));
    }
    swatch(cr, &x, &y, l->map_x, x_max, c_pinned, c_text, false, "pinned");
    swatch(cr, &x, &y, l->map_x, x_max, c_free, c_text, false, "free");
    swatch(cr, &x, &y, l->map_x, x_max, c_free, c_moved, true, "moved this frame");
    font(cr, 11.5, false);
    if (x + 110 > x_max) { x = l->map_x; y += 18; }
    set_rgb(cr, c_accent);
    cairo_move_to(cr, x + 12, y - 4);
    cairo_line_to(cr, x + 3, y - 9);
    cairo_line_to(cr, x + 3, y + 1);
    cairo_close_path(cr);
    cairo_fill(cr);
    text_at(cr, x + 19, y, 11.5, false, c_text, 0, "lowest hole");
    char a[32], b[32], line[256];
    snprintf(line, sizeof line, "1 cell = %s · 1 row = %s · offset 0 at bottom left, addresses grow → and ↑: "
             "the defrag step pushes holes up to the top",
             viz_fmt_bytes(a, sizeof a, l->bytes_per_cell), viz_fmt_bytes(b, sizeof b, l->bytes_per_cell * l->map_w));
    text_fit(cr, l->map_x, y + 22, 11, false, c_dim, l->width - MARGIN - l->map_x, line);
}

static int cmp_region(const void *pa, const void *pb) {
    const hh_mapdump_region *a = pa, *b = pb;
    if (a->size_class != b->size_class) return a->size_class - b->size_class;
    return (a->live < b->live) - (a->live > b->live);   /* more live first; no overflow */
}

/* The binned pages: a grid of squares grouped by class, filled by occupancy. */
static double draw_binned(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, double y, double h_max) {
    double x0 = l->panel_x, w = l->panel_w;
    size_t n = 0, large = 0;
    uint64_t live = 0, large_bytes = 0, live_bytes = 0;
    hh_mapdump_region *pages = malloc((f->region_count ? f->region_count : 1) * sizeof *pages);
    if (!pages) return y;
    for (size_t i = 0; i < f->region_count; i++) {
        const hh_mapdump_region *r = &f->regions[i];
        if (r->kind == HH_BINNED_REGION_CLASS) {
            pages[n++] = *r;
            live += r->live;
            live_bytes += (uint64_t)r->live * r->block_size;
        } else if (r->kind == HH_BINNED_REGION_LARGE) {
            large++;
            large_bytes += r->size;
        }
    }
    qsort(pages, n, sizeof *pages, cmp_region);
    char a[32], b[32], line[160];
    text_at(cr, x0, y + 12, 13, true, c_text, 0, "binned pages");
    snprintf(line, sizeof line, "%zu pages · %llu blocks · %s live", n, (unsigned long long)live,
             viz_fmt_bytes(a, sizeof a, (double)live_bytes));
    text_fit(cr, x0, y + 28, 10.5, false, c_dim, w, line);
    y += 38;
    double gap = 3, s = 24;
    int cols = 1;
    for (; s >= 4; s -= 2) {
        cols = (int)((w + gap) / (s + gap));
        double rows = ceil((double)n / cols);
        if (rows * (s + gap) <= h_max - 70) break;
    }
    if (s < 4) s = 4;
    cols = (int)((w + gap) / (s + gap));
    for (size_t i = 0; i < n; i++) {
        const hh_mapdump_region *r = &pages[i];
        double px0 = x0 + (double)(i % (size_t)cols) * (s + gap), py0 = y + (double)(i / (size_t)cols) * (s + gap);
        viz_rgb cc = class_color(r->size_class);
        fill_rect(cr, px0, py0, s, s, (viz_rgb){ 0x2a, 0x2f, 0x3b });
        double frac = r->capacity ? (double)r->live / r->capacity : 0, cfrac = r->capacity ? (double)r->cached / r->capacity : 0;
        if (cfrac > 0) fill_rect(cr, px0, py0 + s * (1 - frac - cfrac), s, s * cfrac, rgb_mix(cc, c_bg, 0.65));
        if (frac > 0) fill_rect(cr, px0, py0 + s * (1 - frac), s, s * frac, cc);
        if (!r->committed) stroke_rect(cr, px0, py0, s, s, c_dim, 1);
    }
    y += ceil((double)n / cols) * (s + gap) + 6;
    /* The busiest classes, by live bytes. */
    uint64_t cls_live[HH_BINNED_CLASS_COUNT] = { 0 }, cls_cap[HH_BINNED_CLASS_COUNT] = { 0 };
    uint32_t cls_bs[HH_BINNED_CLASS_COUNT] = { 0 }, cls_pages[HH_BINNED_CLASS_COUNT] = { 0 };
    for (size_t i = 0; i < n; i++) {
        int c = pages[i].size_class;
        if (c < 0 || c >= HH_BINNED_CLASS_COUNT) continue;
        cls_live[c] += pages[i].live;
        cls_cap[c] += pages[i].capacity;
        cls_bs[c] = pages[i].block_size;
        cls_pages[c]++;
    }
    for (int k = 0; k < 4; k++) {
        int best = -1;
        for (int c = 0; c < HH_BINNED_CLASS_COUNT; c++)
            if (cls_pages[c] && (best < 0 || cls_live[c] * cls_bs[c] > cls_live[best] * cls_bs[best])) best = c;
        if (best < 0 || y + 14 > l->map_y + h_max) break;
        fill_rect(cr, x0, y + 2, 9, 9, class_color(best));
        snprintf(line, sizeof line, "%u B class: %u page%s, %llu of %llu blocks (%.0f%%)", (unsigned)cls_bs[best],
                 (unsigned)cls_pages[best], cls_pages[best] == 1 ? "" : "s", (unsigned long long)cls_live[best],
                 (unsigned long long)cls_cap[best], cls_cap[best] ? 100.0 * (double)cls_live[best] / (double)cls_cap[best] : 0.0);
        text_fit(cr, x0 + 14, y + 10.5, 10, false, c_text, w - 14, line);
        cls_pages[best] = 0;
        y += 15;
    }
    if (large) {
        snprintf(line, sizeof line, "+ %zu large block%s, %s", large, large == 1 ? "" : "s", viz_fmt_bytes(b, sizeof b, (double)large_bytes));
        text_fit(cr, x0, y + 10.5, 10, false, c_dim, w, line);
        y += 15;
    }
    free(pages);
    return y + 10;
}

/* The mark stacks: chunks end to end (width by size), used part filled, open
   marks as ticks with their depth. */
static double draw_stacks(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, double y) {
    double x0 = l->panel_x, w = l->panel_w;
    text_at(cr, x0, y + 12, 13, true, c_text, 0, "mark stacks");
    y += 20;
    char a[32], b[32], line[200];
    const viz_rgb used_c = { 0x58, 0xc4, 0xdd }, chunk_c = { 0x2a, 0x2f, 0x3b }, head_c = { 0x4a, 0x50, 0x5e };
    for (uint32_t i = 0; i < f->stack_count; i++) {
        const hh_mapdump_stack *s = &f->stacks[i];
        double nw = text_at(cr, x0, y + 10, 11, true, c_text, 0, s->name[0] ? s->name : "memstack");
        snprintf(line, sizeof line, "  %s used of %s", viz_fmt_bytes(a, sizeof a, (double)s->used_bytes),
                 viz_fmt_bytes(b, sizeof b, (double)s->reserved_bytes));
        text_at(cr, x0 + nw, y + 10, 10.5, false, c_text, 0, line);
        snprintf(line, sizeof line, "%u chunk%s · %u open mark%s · peak %s", (unsigned)s->chunk_count,
                 s->chunk_count == 1 ? "" : "s", (unsigned)s->mark_count, s->mark_count == 1 ? "" : "s",
                 viz_fmt_bytes(a, sizeof a, (double)s->peak_reserved_bytes));
        text_fit(cr, x0, y + 24, 10, false, c_dim, w, line);
        y += 32;
        double bar_h = 16, total = 0;
        for (uint32_t k = 0; k < s->chunk_count; k++) total += (double)s->chunks[k].size;
        if (s->chunk_count == 0 || total <= 0) {
            stroke_rect(cr, x0, y, w, bar_h, c_grid, 1);
            text_at(cr, x0 + w / 2, y + 12, 10, false, c_dim, 0.5, "empty");
            y += bar_h + 22;
            continue;
        }
        /* Chunk widths by size, at least 8 px each. */
        double min_w = 8, avail = w - 2.0 * s->chunk_count;
        double *cx = malloc(((size_t)s->chunk_count + 1) * sizeof *cx);
        if (!cx) break;
        double scale = avail / total, fixed = 0;
        for (uint32_t k = 0; k < s->chunk_count; k++) if (s->chunks[k].size * scale < min_w) fixed += min_w;
        double rest_total = 0;
        for (uint32_t k = 0; k < s->chunk_count; k++) if (s->chunks[k].size * scale >= min_w) rest_total += (double)s->chunks[k].size;
        double rest_scale = rest_total > 0 ? fmax(0, avail - fixed) / rest_total : 0;
        double xx = x0;
        for (uint32_t k = 0; k < s->chunk_count; k++) {
            const hh_mapdump_chunk *c = &s->chunks[k];
            double cw = c->size * scale < min_w ? min_w : c->size * rest_scale;
            cx[k] = xx;
            fill_rect(cr, xx, y, cw, bar_h, chunk_c);
            double hb = fmin(cw, cw * (double)c->header_bytes / (double)c->size);
            fill_rect(cr, xx, y, fmax(1, hb), bar_h, head_c);
            double ub = fmin(cw - hb, cw * (double)c->used_bytes / (double)c->size);
            if (ub > 0) fill_rect(cr, xx + hb, y, ub, bar_h, used_c);
            if (c->is_top) stroke_rect(cr, xx, y, cw, bar_h, c_text, 1);
            xx += cw + 2;
        }
        cx[s->chunk_count] = xx;
        for (uint32_t k = 0; k < s->mark_count; k++) {
            const hh_mapdump_mark *m = &s->marks[k];
            double mx = x0;
            if (m->chunk_index < s->chunk_count) {
                const hh_mapdump_chunk *c = &s->chunks[m->chunk_index];
                double cw = cx[m->chunk_index + 1] - 2 - cx[m->chunk_index];
                mx = cx[m->chunk_index] + cw * fmin(1.0, (double)m->offset / (double)c->size);
            }
            set_rgb(cr, c_accent);
            cairo_set_line_width(cr, 2);
            cairo_move_to(cr, mx, y - 3);
            cairo_line_to(cr, mx, y + bar_h + 3);
            cairo_stroke(cr);
            snprintf(line, sizeof line, "%u", (unsigned)m->depth);
            text_at(cr, mx, y + bar_h + 14, 9.5, true, c_accent, 0.5, line);
        }
        free(cx);
        y += bar_h + 24;
    }
    text_fit(cr, x0, y + 4, 9.5, false, c_dim, w, "blue: used · grey: free · dark: chunk header");
    text_fit(cr, x0, y + 17, 9.5, false, c_dim, w, "yellow ticks: open marks (depth), white frame: top chunk");
    return y + 30;
}

cairo_surface_t *viz_draw_frame(const hh_mapdump_frame *f, const hh_mapdump_file_info *info, int width, const viz_history *hist) {
    viz_layout l;
    viz_frame_layout(f, width, &l);
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, l.width, l.height);
    if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    cairo_t *cr = cairo_create(surf);
    set_rgb(cr, c_bg);
    cairo_paint(cr);
    cairo_surface_flush(surf);
    if (!draw_map(surf, &l, f)) { cairo_destroy(cr); cairo_surface_destroy(surf); return NULL; }
    draw_header(cr, &l, f, hist);
    draw_axis(cr, &l);
    draw_front(cr, &l, f);
    draw_legend(cr, &l, f, info);
    if (l.panel) {
        double y = l.map_y, h = l.rows * l.row_h;
        double stacks_h = f->stack_count ? 60 + 74.0 * f->stack_count : 0;
        if (f->has_binned) y = draw_binned(cr, &l, f, y, h - stacks_h);
        if (f->stack_count) draw_stacks(cr, &l, f, y);
    }
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    return surf;
}

/* ---------------------------------------------------------------------------
   Timeline
--------------------------------------------------------------------------- */
void viz_timeline_init(viz_timeline *t, int col_h) {
    memset(t, 0, sizeof *t);
    t->col_h = col_h;
}

void viz_timeline_free(viz_timeline *t) {
    free(t->cells);
    free(t->high_water);
    free(t->frame_no);
    memset(t, 0, sizeof *t);
}

bool viz_timeline_add(viz_timeline *t, const hh_mapdump_frame *f) {
    if (t->frame_count == t->frame_cap) {
        size_t cap = t->frame_cap ? t->frame_cap * 2 : 256;
        uint8_t *c = realloc(t->cells, cap * (size_t)t->col_h * 3);
        if (!c) return false;
        t->cells = c;
        float *hw = realloc(t->high_water, cap * sizeof *hw);
        if (!hw) return false;
        t->high_water = hw;
        uint64_t *fn = realloc(t->frame_no, cap * sizeof *fn);
        if (!fn) return false;
        t->frame_no = fn;
        t->frame_cap = cap;
    }
    if (!t->managed_bytes) t->managed_bytes = f->managed_bytes ? f->managed_bytes : 1;
    size_t n = (size_t)t->col_h;
    cell_acc *acc = calloc(n, sizeof *acc);
    if (!acc) return false;
    double bpc = (double)t->managed_bytes / (double)n;
    for (size_t i = 0; i < f->block_count; i++) {
        const hh_mapdump_block *b = &f->blocks[i];
        viz_rgb c = block_color(b);
        if (b->moved) c = rgb_mix(c, c_moved, 0.55);
        acc_span(acc, n, (double)b->offset / bpc, (double)(b->offset + b->size) / bpc, c);
    }
    uint8_t *col = t->cells + t->frame_count * n * 3;
    for (size_t i = 0; i < n; i++) {
        double rest = fmax(0, 1.0 - acc[i].w), w = acc[i].w + rest;
        col[3 * i + 0] = (uint8_t)((acc[i].r + c_bg.r * rest) / w);
        col[3 * i + 1] = (uint8_t)((acc[i].g + c_bg.g * rest) / w);
        col[3 * i + 2] = (uint8_t)((acc[i].b + c_bg.b * rest) / w);
    }
    free(acc);
    t->high_water[t->frame_count] = (float)((double)f->metrics.high_water / (double)t->managed_bytes);
    t->frame_no[t->frame_count] = f->frame;
    t->frame_count++;
    return true;
}

/* Frame-number ticks along [x0, x1] at the bottom of a plot: round frame
   numbers (a 1-2-5 step giving at most ~10 ticks), each placed at the column
   of the first frame at or after it. */
static void frame_ticks(cairo_t *cr, double x0, double x1, double y, const uint64_t *frames, size_t count) {
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
        set_rgb(cr, c_grid);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, floor(x) + 0.5, y);
        cairo_line_to(cr, floor(x) + 0.5, y + 4);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
        text_at(cr, x, y + 15, 10, false, c_dim, 0.5, buf);
        if (v > UINT64_MAX - step) break;
    }
}

cairo_surface_t *viz_draw_timeline(const viz_timeline *t, const hh_mapdump_file_info *info, int width, viz_axes *axes) {
    if (width < 480) width = 480;
    int x0 = MARGIN + AXIS_W, x1 = width - MARGIN, y0 = 60, h = t->col_h, height = y0 + h + 56;
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    cairo_t *cr = cairo_create(surf);
    set_rgb(cr, c_bg);
    cairo_paint(cr);
    cairo_surface_flush(surf);
    uint8_t *data = cairo_image_surface_get_data(surf);
    int stride = cairo_image_surface_get_stride(surf);
    int pw = x1 - x0;
    if (t->frame_count) {
        for (int xx = 0; xx < pw; xx++) {
            size_t fi = (size_t)((double)xx * (double)t->frame_count / pw);
            if (fi >= t->frame_count) fi = t->frame_count - 1;
            const uint8_t *col = t->cells + fi * (size_t)h * 3;
            for (int yy = 0; yy < h; yy++) {
                const uint8_t *c = col + (size_t)(h - 1 - yy) * 3;   /* offset 0 at the bottom */
                ((uint32_t *)(void *)(data + (size_t)(y0 + yy) * (size_t)stride))[x0 + xx] =
                    0xFF000000u | (uint32_t)c[0] << 16 | (uint32_t)c[1] << 8 | c[2];
            }
        }
    }
    cairo_surface_mark_dirty(surf);
    /* High-water line: the end of the highest live block. */
    if (t->frame_count) {
        set_rgb(cr, c_accent);
        cairo_set_line_width(cr, 1.5);
        for (size_t i = 0; i < t->frame_count; i++) {
            double x = x0 + pw * ((double)i + 0.5) / (double)t->frame_count;
            double y = y0 + h - h * fmin(1, (double)t->high_water[i]);
            if (i == 0) cairo_move_to(cr, x, y); else cairo_line_to(cr, x, y);
        }
        cairo_stroke(cr);
    }
    stroke_rect(cr, x0 - 1, y0 - 1, pw + 2, h + 2, c_grid, 1);
    char buf[64];
    double tw = text_at(cr, MARGIN, 26, 17, true, c_text, 0, "heap over time");
    if (info && info->label[0]) text_at(cr, MARGIN + tw + 14, 26, 11.5, false, c_dim, 0, info->label);
    text_at(cr, MARGIN, 45, 11, false, c_dim, 0,
            "frames →, offsets ↑ · dark = free space · bright = moved that frame · yellow = top of the live data: "
            "holes rise and merge as hh_defrag_step runs");
    for (int k = 0; k <= 8; k++) {
        double y = y0 + h - h * k / 8.0;
        text_at(cr, x0 - 8, y + 3.5, 10, false, c_dim, 1, viz_fmt_bytes(buf, sizeof buf, (double)t->managed_bytes * k / 8.0));
    }
    frame_ticks(cr, x0, x1, y0 + h + 2, t->frame_no, t->frame_count);
    text_at(cr, (x0 + x1) / 2.0, y0 + h + 36, 10.5, false, c_dim, 0.5, "frame");
    if (axes) *axes = (viz_axes){ x0, x1, y0, y0 + h, width, height };
    cairo_destroy(cr);
    return surf;
}

/* ---------------------------------------------------------------------------
   Metrics plot
--------------------------------------------------------------------------- */
#define GROW(p, cap) do { void *np_ = realloc((p), (cap) * sizeof *(p)); if (!np_) return false; (p) = np_; } while (0)

bool viz_series_add(viz_series *s, const hh_mapdump_frame *f) {
    if (s->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        GROW(s->frame, cap); GROW(s->frag, cap); GROW(s->frag_sq, cap); GROW(s->holes, cap); GROW(s->moves, cap);
        GROW(s->bytes_moved, cap); GROW(s->largest_hole, cap); GROW(s->debt, cap); GROW(s->used, cap); GROW(s->defrag_ns, cap);
        s->cap = cap;
    }
    const hh_mapdump_metrics *m = &f->metrics;
    size_t i = s->count++;
    s->frame[i] = f->frame;
    s->frag[i] = (float)m->fragmentation;
    s->frag_sq[i] = (float)m->fragmentation_sq;
    s->holes[i] = m->holes;
    s->moves[i] = m->moves;
    s->bytes_moved[i] = m->bytes_moved;
    s->largest_hole[i] = m->largest_hole;
    s->debt[i] = m->compaction_debt;
    s->used[i] = m->used_bytes;
    s->defrag_ns[i] = m->defrag_ns;
    return true;
}

void viz_series_free(viz_series *s) {
    free(s->frame); free(s->frag); free(s->frag_sq); free(s->holes); free(s->moves);
    free(s->bytes_moved); free(s->largest_hole); free(s->debt); free(s->used); free(s->defrag_ns);
    memset(s, 0, sizeof *s);
}

typedef double (*series_fn)(const viz_series *s, size_t i);
static double s_frag(const viz_series *s, size_t i) { return s->frag[i]; }
static double s_frag_sq(const viz_series *s, size_t i) { return s->frag_sq[i]; }
static double s_holes(const viz_series *s, size_t i) { return s->holes[i]; }
static double s_moved(const viz_series *s, size_t i) { return (double)s->bytes_moved[i]; }
static double s_debt(const viz_series *s, size_t i) { return (double)s->debt[i]; }

/* One panel: box, title, y labels, then lines or bars. */
static void plot_panel(cairo_t *cr, const viz_series *s, double x0, double x1, double y0, double h, const char *title,
                       const char *unit, double ymax, bool bytes, int nser, const series_fn *fn, const viz_rgb *col,
                       const char *const *names, bool bars) {
    char buf[48];
    fill_rect(cr, x0, y0, x1 - x0, h, (viz_rgb){ 0x15, 0x18, 0x1f });
    for (int k = 0; k <= 4; k++) {
        double y = y0 + h - h * k / 4.0;
        set_rgb(cr, c_grid);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, x0, floor(y) + 0.5);
        cairo_line_to(cr, x1, floor(y) + 0.5);
        cairo_stroke(cr);
        double v = ymax * k / 4.0;
        if (bytes) {                                  /* every label in the unit of the axis maximum */
            static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
            int u = 0;
            double scale = 1;
            while (u < 4 && scale * 1024 <= ymax) { scale *= 1024; u++; }
            double x = v / scale;
            snprintf(buf, sizeof buf, x == floor(x) ? "%.0f %s" : fabs(x * 10 - floor(x * 10 + 0.5)) < 1e-9 ? "%.1f %s" : "%.2f %s",
                     x, units[u]);
        }
        else if (unit[0] == '%') snprintf(buf, sizeof buf, "%.0f%%", v * 100);
        else snprintf(buf, sizeof buf, "%.0f", v);
        text_at(cr, x0 - 8, y + 3.5, 10, false, c_dim, 1, buf);
    }
    text_at(cr, x0, y0 - 8, 12.5, true, c_text, 0, title);
    double lx = x1;
    for (int k = nser - 1; k >= 0; k--) {
        double w = text_at(cr, lx, y0 - 8, 10.5, false, col[k], 1, names[k]);
        fill_rect(cr, lx - w - 14, y0 - 16, 10, 8, col[k]);
        lx -= w + 26;
    }
    if (s->count == 0 || ymax <= 0) return;
    double pw = x1 - x0;
    for (int k = 0; k < nser; k++) {
        set_rgb(cr, col[k]);
        if (bars) {
            double bw = pw / (double)s->count;
            for (size_t i = 0; i < s->count; i++) {
                double v = fn[k](s, i) / ymax, bh = h * fmin(1, v);
                if (bh <= 0) continue;
                cairo_rectangle(cr, x0 + bw * (double)i, y0 + h - bh, fmax(bw - (bw > 3 ? 1 : 0), 0.8), bh);
            }
            cairo_fill(cr);
        } else {
            cairo_set_line_width(cr, 1.6);
            for (size_t i = 0; i < s->count; i++) {
                double x = x0 + pw * ((double)i + 0.5) / (double)s->count;
                double y = y0 + h - h * fmin(1, fn[k](s, i) / ymax);
                if (i == 0) cairo_move_to(cr, x, y); else cairo_line_to(cr, x, y);
            }
            cairo_stroke(cr);
        }
    }
}

/* An axis maximum >= v that is 4 round steps (the panels have 4 grid
   intervals): step from 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten,
   at least min_step (1 for counts, so the tick labels stay whole). */
static double nice_max(double v, double min_step) {
    static const double steps[] = { 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10 };
    double want = v / 4;
    if (want <= min_step) return 4 * min_step;
    double p = pow(10, floor(log10(want))), m = want / p;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (m <= steps[i] * 1.0000001) return 4 * fmax(min_step, steps[i] * p);
    return 40 * p;
}
/* The same in bytes: steps counted in B, KiB, MiB ... */
static double nice_bytes(double v) {
    if (v <= 0) return 4096;
    double p = 1;
    while (p * 1024 <= v) p *= 1024;
    return nice_max(v / p, p == 1 ? 1 : 0.25) * p;
}

cairo_surface_t *viz_draw_plot(const viz_series *s, int width, const char *label, viz_axes *axes) {
    if (width < 480) width = 480;
    int panel_h = 130, gap = 46, top = 86, height = top + 4 * panel_h + 3 * gap + 44;
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    cairo_t *cr = cairo_create(surf);
    set_rgb(cr, c_bg);
    cairo_paint(cr);
    double x0 = MARGIN + AXIS_W, x1 = width - MARGIN;
    double tw = text_at(cr, MARGIN, 26, 17, true, c_text, 0, "defragmentation per frame");
    if (label && label[0]) text_at(cr, MARGIN + tw + 14, 26, 11.5, false, c_dim, 0, label);
    text_at(cr, MARGIN, 45, 11, false, c_dim, 0,
            "fragmentation = 1 - largest free / free bytes; sum-of-squares = 1 - Σ free² / (Σ free)²; "
            "a hole is a free block below the top free region");
    double maxh = 0, maxb = 0, maxd = 0;
    for (size_t i = 0; i < s->count; i++) {
        maxh = fmax(maxh, s->holes[i]);
        maxb = fmax(maxb, (double)s->bytes_moved[i]);
        maxd = fmax(maxd, (double)s->debt[i]);
    }
    const series_fn f1[] = { s_frag, s_frag_sq };
    const viz_rgb c1[] = { c_accent, { 0x3f, 0xc9, 0xb0 } };
    const char *const n1[] = { "largest-free", "sum-of-squares" };
    double y = top;
    plot_panel(cr, s, x0, x1, y, panel_h, "fragmentation", "%", 1.0, false, 2, f1, c1, n1, false);
    y += panel_h + gap;
    const series_fn f2[] = { s_holes };
    const viz_rgb c2[] = { { 0x9b, 0x6c, 0xe0 } };
    const char *const n2[] = { "holes below the top free region" };
    plot_panel(cr, s, x0, x1, y, panel_h, "holes", "", nice_max(maxh, 1), false, 1, f2, c2, n2, false);
    y += panel_h + gap;
    const series_fn f3[] = { s_moved };
    const viz_rgb c3[] = { { 0x4f, 0x8d, 0xf5 } };
    const char *const n3[] = { "bytes moved by hh_defrag_step" };
    plot_panel(cr, s, x0, x1, y, panel_h, "bytes moved", "", nice_bytes(maxb), true, 1, f3, c3, n3, true);
    y += panel_h + gap;
    const series_fn f4[] = { s_debt };
    const viz_rgb c4[] = { { 0xe8, 0x5d, 0x3f } };
    const char *const n4[] = { "live bytes above the lowest hole" };
    plot_panel(cr, s, x0, x1, y, panel_h, "compaction debt", "", nice_bytes(maxd), true, 1, f4, c4, n4, false);
    frame_ticks(cr, x0, x1, y + panel_h + 2, s->frame, s->count);
    if (axes) *axes = (viz_axes){ (int)x0, (int)x1, top, (int)(y + panel_h), width, height };
    cairo_destroy(cr);
    return surf;
}
