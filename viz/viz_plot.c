/* viz_plot.c -- the metrics plot: fragmentation, holes, bytes moved and
 * compaction debt per frame, and the per-frame series behind it (also read by
 * index.html).
 */
#include "viz_draw_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    viz_fill_rect(cr, x0, y0, x1 - x0, h, (viz_rgb){ 0x15, 0x18, 0x1f });
    for (int k = 0; k <= 4; k++) {
        double y = y0 + h - h * k / 4.0;
        viz_set_rgb(cr, c_grid);
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
        viz_text_at(cr, x0 - 8, y + 3.5, 10, false, c_dim, 1, buf);
    }
    viz_text_at(cr, x0, y0 - 8, 12.5, true, c_text, 0, title);
    double lx = x1;
    for (int k = nser - 1; k >= 0; k--) {
        double w = viz_text_at(cr, lx, y0 - 8, 10.5, false, col[k], 1, names[k]);
        viz_fill_rect(cr, lx - w - 14, y0 - 16, 10, 8, col[k]);
        lx -= w + 26;
    }
    if (s->count == 0 || ymax <= 0) return;
    double pw = x1 - x0;
    for (int k = 0; k < nser; k++) {
        viz_set_rgb(cr, col[k]);
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
    viz_set_rgb(cr, c_bg);
    cairo_paint(cr);
    double x0 = MARGIN + AXIS_W, x1 = width - MARGIN;
    double tw = viz_text_at(cr, MARGIN, 26, 17, true, c_text, 0, "defragmentation per frame");
    if (label && label[0]) viz_text_at(cr, MARGIN + tw + 14, 26, 11.5, false, c_dim, 0, label);
    viz_text_at(cr, MARGIN, 45, 11, false, c_dim, 0,
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
    viz_frame_ticks(cr, x0, x1, y + panel_h + 2, s->frame, s->count);
    if (axes) *axes = (viz_axes){ (int)x0, (int)x1, top, (int)(y + panel_h), width, height };
    cairo_destroy(cr);
    return surf;
}
