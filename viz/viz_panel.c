/* viz_panel.c -- the side panel of a frame picture: the binned allocator's
 * pages grouped by size class and the mark stacks' chunks (drawn only when
 * the dump has them).
 */
#include "viz_draw_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------
   Binned pages and mark stacks
--------------------------------------------------------------------------- */
static int cmp_region(const void *pa, const void *pb) {
    const hh_mapdump_region *a = pa, *b = pb;
    if (a->size_class != b->size_class) return a->size_class - b->size_class;
    return (a->live < b->live) - (a->live > b->live);   /* more live first; no overflow */
}

/* The binned pages: a grid of squares grouped by class, filled by occupancy. */
double viz_panel_binned(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, double y, double h_max) {
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
    viz_text_at(cr, x0, y + 12, 13, true, c_text, 0, "binned pages");
    snprintf(line, sizeof line, "%zu pages · %llu blocks · %s live", n, (unsigned long long)live,
             viz_fmt_bytes(a, sizeof a, (double)live_bytes));
    viz_text_fit(cr, x0, y + 28, 10.5, false, c_dim, w, line);
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
        viz_rgb cc = viz_class_color(r->size_class);
        viz_fill_rect(cr, px0, py0, s, s, (viz_rgb){ 0x2a, 0x2f, 0x3b });
        double frac = r->capacity ? (double)r->live / r->capacity : 0, cfrac = r->capacity ? (double)r->cached / r->capacity : 0;
        if (cfrac > 0) viz_fill_rect(cr, px0, py0 + s * (1 - frac - cfrac), s, s * cfrac, viz_rgb_mix(cc, c_bg, 0.65));
        if (frac > 0) viz_fill_rect(cr, px0, py0 + s * (1 - frac), s, s * frac, cc);
        if (!r->committed) viz_stroke_rect(cr, px0, py0, s, s, c_dim, 1);
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
        viz_fill_rect(cr, x0, y + 2, 9, 9, viz_class_color(best));
        snprintf(line, sizeof line, "%u B class: %u page%s, %llu of %llu blocks (%.0f%%)", (unsigned)cls_bs[best],
                 (unsigned)cls_pages[best], cls_pages[best] == 1 ? "" : "s", (unsigned long long)cls_live[best],
                 (unsigned long long)cls_cap[best], cls_cap[best] ? 100.0 * (double)cls_live[best] / (double)cls_cap[best] : 0.0);
        viz_text_fit(cr, x0 + 14, y + 10.5, 10, false, c_text, w - 14, line);
        cls_pages[best] = 0;
        y += 15;
    }
    if (large) {
        snprintf(line, sizeof line, "+ %zu large block%s, %s", large, large == 1 ? "" : "s", viz_fmt_bytes(b, sizeof b, (double)large_bytes));
        viz_text_fit(cr, x0, y + 10.5, 10, false, c_dim, w, line);
        y += 15;
    }
    free(pages);
    return y + 10;
}

/* The mark stacks: chunks end to end (width by size), used part filled, open
   marks as ticks with their depth. */
double viz_panel_stacks(cairo_t *cr, const viz_layout *l, const hh_mapdump_frame *f, double y) {
    double x0 = l->panel_x, w = l->panel_w;
    viz_text_at(cr, x0, y + 12, 13, true, c_text, 0, "mark stacks");
    y += 20;
    char a[32], b[32], line[200];
    const viz_rgb used_c = { 0x58, 0xc4, 0xdd }, chunk_c = { 0x2a, 0x2f, 0x3b }, head_c = { 0x4a, 0x50, 0x5e };
    for (uint32_t i = 0; i < f->stack_count; i++) {
        const hh_mapdump_stack *s = &f->stacks[i];
        double nw = viz_text_at(cr, x0, y + 10, 11, true, c_text, 0, s->name[0] ? s->name : "memstack");
        snprintf(line, sizeof line, "  %s used of %s", viz_fmt_bytes(a, sizeof a, (double)s->used_bytes),
                 viz_fmt_bytes(b, sizeof b, (double)s->reserved_bytes));
        viz_text_at(cr, x0 + nw, y + 10, 10.5, false, c_text, 0, line);
        snprintf(line, sizeof line, "%u chunk%s · %u open mark%s · peak %s", (unsigned)s->chunk_count,
                 s->chunk_count == 1 ? "" : "s", (unsigned)s->mark_count, s->mark_count == 1 ? "" : "s",
                 viz_fmt_bytes(a, sizeof a, (double)s->peak_reserved_bytes));
        viz_text_fit(cr, x0, y + 24, 10, false, c_dim, w, line);
        y += 32;
        double bar_h = 16, total = 0;
        for (uint32_t k = 0; k < s->chunk_count; k++) total += (double)s->chunks[k].size;
        if (s->chunk_count == 0 || total <= 0) {
            viz_stroke_rect(cr, x0, y, w, bar_h, c_grid, 1);
            viz_text_at(cr, x0 + w / 2, y + 12, 10, false, c_dim, 0.5, "empty");
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
            viz_fill_rect(cr, xx, y, cw, bar_h, chunk_c);
            double hb = fmin(cw, cw * (double)c->header_bytes / (double)c->size);
            viz_fill_rect(cr, xx, y, fmax(1, hb), bar_h, head_c);
            double ub = fmin(cw - hb, cw * (double)c->used_bytes / (double)c->size);
            if (ub > 0) viz_fill_rect(cr, xx + hb, y, ub, bar_h, used_c);
            if (c->is_top) viz_stroke_rect(cr, xx, y, cw, bar_h, c_text, 1);
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
            viz_set_rgb(cr, c_accent);
            cairo_set_line_width(cr, 2);
            cairo_move_to(cr, mx, y - 3);
            cairo_line_to(cr, mx, y + bar_h + 3);
            cairo_stroke(cr);
            snprintf(line, sizeof line, "%u", (unsigned)m->depth);
            viz_text_at(cr, mx, y + bar_h + 14, 9.5, true, c_accent, 0.5, line);
        }
        free(cx);
        y += bar_h + 24;
    }
    viz_text_fit(cr, x0, y + 4, 9.5, false, c_dim, w, "blue: used · grey: free · dark: chunk header");
    viz_text_fit(cr, x0, y + 17, 9.5, false, c_dim, w, "yellow ticks: open marks (depth), white frame: top chunk");
    return y + 30;
}
