/* viz_frame.c -- one frame picture (see viz_draw.h for the geometry): the
 * layout, the heap map, the header with its metrics and sparkline, the offset
 * axis and the legend; the side panel is viz_panel.c.
 *
 * The heap map itself is written straight into the image surface's pixels:
 * per cell, the colours of the blocks covering it are summed weighted by the
 * bytes they cover (one pass over the blocks, one over the cells), so a frame
 * costs O(blocks + cells) whatever the block sizes. Text, panels and legends
 * are drawn with cairo on top.
 */
#include "viz_draw_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------
   Layout
--------------------------------------------------------------------------- */
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
        viz_acc_span(acc, ncells, s, e, viz_block_color(b));
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
    uint32_t gap = viz_px(c_gap), moved = viz_px(c_moved);
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
            if (flags[i] & CELL_EDGE) col = viz_rgb_mix(col, c_gap, 0.6);   /* where a wide block begins */
            uint32_t body = viz_px(col);
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
   Frame picture: header, axis, legend (the side panel: viz_panel.c)
--------------------------------------------------------------------------- */
static void draw_header(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, const viz_history *hist) {
    const hh_mapdump_metrics *m = &f->metrics;
    char t[64], a[32], b[32];
    snprintf(t, sizeof t, "frame %llu", (unsigned long long)f->frame);
    double x = MARGIN;
    x += viz_text_at(cr, x, 36, 22, true, c_text, 0, t) + 28;

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
        viz_font(cr, 15, true);
        double wv = viz_text_width(cr, chip[i].value);
        viz_font(cr, 10.5, false);
        double wl = viz_text_width(cr, chip[i].label), w = fmax(wv, wl);
        if (x + w > right) break;
        viz_text_at(cr, x, 20, 10.5, false, c_dim, 0, chip[i].label);
        viz_text_at(cr, x, 39, 15, true, chip[i].c, 0, chip[i].value);
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
    viz_font(cr, 11.5, false);
    for (int i = 0; i < np; i++) {
        char trial[640];
        snprintf(trial, sizeof trial, "%s%s%s", line, i ? " · " : "", parts[i]);
        if (viz_text_width(cr, trial) > l->width - 2 * MARGIN) break;
        memcpy(line, trial, sizeof line);
    }
    viz_text_at(cr, MARGIN, 62, 11.5, false, c_dim, 0, line);

    if (spark_w) {     /* fragmentation so far, newest at the right */
        double x0 = l->width - MARGIN - spark_w, y0 = 8, h = 40;
        viz_fill_rect(cr, x0, y0, spark_w, h, (viz_rgb){ 0x18, 0x1b, 0x23 });
        size_t n0 = hist->count > (size_t)spark_w ? hist->count - (size_t)spark_w : 0;
        size_t cnt = hist->count - n0;
        cairo_set_line_width(cr, 1.3);
        viz_set_rgb(cr, c_accent);
        for (size_t i = 0; i < cnt; i++) {
            double xx = x0 + (cnt > 1 ? spark_w * (double)i / (double)(cnt - 1) : 0);
            double yy = y0 + h - 2 - (h - 4) * fmin(1.0, fmax(0.0, hist->fragmentation[n0 + i]));
            if (i == 0) cairo_move_to(cr, xx, yy); else cairo_line_to(cr, xx, yy);
        }
        cairo_stroke(cr);
        viz_text_at(cr, x0 + 4, y0 + 11, 9, false, c_dim, 0, "fragmentation, last frames");
    }
}

/* A small arrow left of the map pointing at the row of the lowest hole: the
   compaction front, which the defrag step pushes upwards. */
static void draw_front(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f) {
    uint64_t off;
    if (!lowest_hole(f, &off)) return;
    int x, y;
    viz_layout_pixel(l, off, &x, &y);
    viz_set_rgb(cr, c_accent);
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
        viz_text_at(cr, l->map_x - 10, y + 3.5, 10, false, c_dim, 1, viz_fmt_bytes(buf, sizeof buf, v));
        viz_set_rgb(cr, c_grid);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, l->map_x - 7, y + 0.5);
        cairo_line_to(cr, l->map_x - 1, y + 0.5);
        cairo_stroke(cr);
    }
}

/* One legend entry at (*x, *y); wraps to a new line (x back to x0) past x_max. */
static void swatch(cairo_t *cr, double *x, double *y, double x0, double x_max, viz_rgb fill, viz_rgb edge, bool outline,
                   const char *label) {
    viz_font(cr, 11.5, false);
    double w = 19 + viz_text_width(cr, label);
    if (*x + w > x_max && *x > x0) { *x = x0; *y += 18; }
    viz_fill_rect(cr, *x, *y - 10, 14, 12, fill);
    if (outline) viz_stroke_rect(cr, *x, *y - 10, 14, 12, edge, 1.5);
    *x += 19;
    *x += viz_text_at(cr, *x, *y, 11.5, false, c_text, 0, label) + 16;
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
               t == HH_MAPDUMP_MAX_TAGS ? "other tags" : viz_tag_name(info, t, buf, sizeof buf));
    }
    swatch(cr, &x, &y, l->map_x, x_max, c_pinned, c_text, false, "pinned");
    swatch(cr, &x, &y, l->map_x, x_max, c_free, c_text, false, "free");
    swatch(cr, &x, &y, l->map_x, x_max, c_free, c_moved, true, "moved this frame");
    viz_font(cr, 11.5, false);
    if (x + 110 > x_max) { x = l->map_x; y += 18; }
    viz_set_rgb(cr, c_accent);
    cairo_move_to(cr, x + 12, y - 4);
    cairo_line_to(cr, x + 3, y - 9);
    cairo_line_to(cr, x + 3, y + 1);
    cairo_close_path(cr);
    cairo_fill(cr);
    viz_text_at(cr, x + 19, y, 11.5, false, c_text, 0, "lowest hole");
    char a[32], b[32], line[256];
    snprintf(line, sizeof line, "1 cell = %s · 1 row = %s · offset 0 at bottom left, addresses grow → and ↑: "
             "the defrag step pushes holes up to the top",
             viz_fmt_bytes(a, sizeof a, l->bytes_per_cell), viz_fmt_bytes(b, sizeof b, l->bytes_per_cell * l->map_w));
    viz_text_fit(cr, l->map_x, y + 22, 11, false, c_dim, l->width - MARGIN - l->map_x, line);
}

cairo_surface_t *viz_draw_frame(const hh_mapdump_frame *f, const hh_mapdump_file_info *info, int width, const viz_history *hist) {
    viz_layout l;
    viz_frame_layout(f, width, &l);
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, l.width, l.height);
    if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    cairo_t *cr = cairo_create(surf);
    viz_set_rgb(cr, c_bg);
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
        if (f->has_binned) y = viz_panel_binned(cr, &l, f, y, h - stacks_h);
        if (f->stack_count) viz_panel_stacks(cr, &l, f, y);
    }
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    return surf;
}
