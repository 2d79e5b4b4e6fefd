/* viz_timeline.c -- the space-time picture: one colour column per frame
 * (offset 0 at the bottom), the high-water line and the frame axis.
 */
#include "viz_draw_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        viz_rgb c = viz_block_base_color(b);
        if (b->moved) c = viz_rgb_mix(c, c_moved, 0.55);
        viz_acc_span(acc, n, (double)b->offset / bpc, (double)(b->offset + b->size) / bpc, c);
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

cairo_surface_t *viz_draw_timeline(const viz_timeline *t, const hh_mapdump_file_info *info, int width, viz_axes *axes) {
    if (width < 480) width = 480;
    int x0 = MARGIN + AXIS_W, x1 = width - MARGIN, y0 = 60, h = t->col_h, height = y0 + h + 56;
    cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) { cairo_surface_destroy(surf); return NULL; }
    cairo_t *cr = cairo_create(surf);
    viz_set_rgb(cr, c_bg);
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
        viz_set_rgb(cr, c_accent);
        cairo_set_line_width(cr, 1.5);
        for (size_t i = 0; i < t->frame_count; i++) {
            double x = x0 + pw * ((double)i + 0.5) / (double)t->frame_count;
            double y = y0 + h - h * fmin(1, (double)t->high_water[i]);
            if (i == 0) cairo_move_to(cr, x, y); else cairo_line_to(cr, x, y);
        }
        cairo_stroke(cr);
    }
    viz_stroke_rect(cr, x0 - 1, y0 - 1, pw + 2, h + 2, c_grid, 1);
    char buf[64];
    double tw = viz_text_at(cr, MARGIN, 26, 17, true, c_text, 0, "heap over time");
    if (info && info->label[0]) viz_text_at(cr, MARGIN + tw + 14, 26, 11.5, false, c_dim, 0, info->label);
    viz_text_at(cr, MARGIN, 45, 11, false, c_dim, 0,
            "frames →, offsets ↑ · dark = free space · bright = moved that frame · yellow = top of the live data: "
            "holes rise and merge as hh_defrag_step runs");
    for (int k = 0; k <= 8; k++) {
        double y = y0 + h - h * k / 8.0;
        viz_text_at(cr, x0 - 8, y + 3.5, 10, false, c_dim, 1, viz_fmt_bytes(buf, sizeof buf, (double)t->managed_bytes * k / 8.0));
    }
    viz_frame_ticks(cr, x0, x1, y0 + h + 2, t->frame_no, t->frame_count);
    viz_text_at(cr, (x0 + x1) / 2.0, y0 + h + 36, 10.5, false, c_dim, 0.5, "frame");
    if (axes) *axes = (viz_axes){ x0, x1, y0, y0 + h, width, height };
    cairo_destroy(cr);
    return surf;
}
