/* viz_render_test.c -- the render test (run by `make check-demo`): a small
 * heap with blocks of known tags, states and a known move is dumped, read back
 * and drawn; the picture must have the layout's size and the expected colour
 * at the centre pixel of every block, the moved block must be outlined, and
 * the timeline and plot must come out with their colours and sizes too.
 *
 *   viz_render_test                       the test (exit 0 = pass)
 *   viz_render_test --probe-screenshot P  checks that PNG P (a browser
 *                                         screenshot of index.html) shows a heap map
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hheap.h"
#include "viz_draw.h"

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "viz_render_test: FAIL %s:%d: ", __FILE__, __LINE__); \
                                             fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static viz_rgb pixel(cairo_surface_t *s, int x, int y) {
    cairo_surface_flush(s);
    const uint8_t *d = cairo_image_surface_get_data(s);
    uint32_t v = ((const uint32_t *)(const void *)(d + (size_t)y * (size_t)cairo_image_surface_get_stride(s)))[x];
    return (viz_rgb){ (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
}
static bool same(viz_rgb a, viz_rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }
static bool near(viz_rgb a, viz_rgb b, int tol) {
    return abs(a.r - b.r) <= tol && abs(a.g - b.g) <= tol && abs(a.b - b.b) <= tol;
}

typedef struct found { uint64_t offset, size; int state; uint32_t tag; bool moved; } found;

/* Checks the colour at the centre of block b (and the outline rows if moved). */
static void check_block(cairo_surface_t *s, const viz_layout *l, const hh_mapdump_block *b, const char *what) {
    int x, y;
    viz_layout_pixel(l, b->offset + b->size / 2, &x, &y);
    viz_rgb want = viz_block_color(b);
    /* The shade is the tag colour, or a little lighter (never another tag's or the pinned colour). */
    viz_rgb base = b->state == HH_BLOCK_FREE ? viz_color_free() : b->state == HH_BLOCK_PINNED ? viz_color_pinned()
                                                                                                : viz_color_tag(b->tag);
    CHECK(near(want, base, 45) && (b->state != HH_BLOCK_PINNED || same(want, base)) && (b->state != HH_BLOCK_FREE || same(want, base)),
          "%s: block colour #%02x%02x%02x too far from its base", what, want.r, want.g, want.b);
    viz_rgb got = pixel(s, x, y);
    CHECK(same(got, want), "%s at offset %llu, pixel (%d,%d): got #%02x%02x%02x want #%02x%02x%02x", what,
          (unsigned long long)b->offset, x, y, got.r, got.g, got.b, want.r, want.g, want.b);
    int top = y - (l->row_h - 1) / 2;
    viz_rgb edge = pixel(s, x, top);
    if (b->moved) CHECK(same(edge, viz_color_moved()), "%s: moved block not outlined at (%d,%d)", what, x, top);
    else CHECK(same(edge, want), "%s: unmoved block outlined at (%d,%d)", what, x, top);
}

static int render_test(void) {
    hh_heap *heap;
    if (hh_heap_create(&(hh_heap_desc){ .capacity = 256 * 1024 }, &heap) != HH_OK) return 1;
    /* Layout, bottom up: A(tag 1) X(tag 5, freed) B(tag 2) C(tag 3, pinned) D(tag 4) E(tag 6) ... free top. */
    hh_handle a = hh_alloc_ex(heap, 40000, 16, 1);
    hh_handle x = hh_alloc_ex(heap, 24000, 16, 5);
    hh_handle b = hh_alloc_ex(heap, 30000, 16, 2);
    hh_handle c = hh_alloc_ex(heap, 20000, 16, 3);
    hh_handle g = hh_alloc_ex(heap, 2000, 16, 5);
    hh_handle d = hh_alloc_ex(heap, 30000, 16, 4);
    hh_handle e = hh_alloc_ex(heap, 30000, 16, 6);
    CHECK(!hh_is_null(a) && !hh_is_null(b) && !hh_is_null(c) && !hh_is_null(d) && !hh_is_null(e) && !hh_is_null(g), "alloc");
    hh_pin(heap, c);
    hh_free(heap, x);             /* a hole between A and B: B slides down into it */
    hh_free(heap, g);             /* a small hole under D (stays: only one move allowed) */
    hh_defrag_report rep = hh_defrag_step(heap, 1);
    CHECK(rep.moves == 1, "defrag step made %u moves, want 1", rep.moves);

    char path[] = "/tmp/hh-viz-test-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    hh_mapdump_writer *w;
    static const char *const names[] = { "none", "one", "two", "three", "four", "five", "six" };
    CHECK(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .tag_names = names, .tag_name_count = 7 }, &w) == HH_OK, "create");
    CHECK(hh_mapdump_write_frame(w, 42, &rep) == HH_OK, "write");
    CHECK(hh_mapdump_close(w) == HH_OK, "close");

    hh_mapdump_reader *r;
    const hh_mapdump_frame *f = NULL;
    CHECK(hh_mapdump_open(path, &r) == HH_OK, "open");
    CHECK(hh_mapdump_next(r, &f) == HH_OK && f != NULL, "read");
    if (!f) return 1;
    hh_mapdump_file_info info;
    hh_mapdump_info(r, &info);

    const int width = 640;
    viz_layout l;
    viz_frame_layout(f, width, &l);
    cairo_surface_t *s = viz_draw_frame(f, &info, width, NULL);
    CHECK(s != NULL, "draw");
    if (!s) return 1;
    CHECK(cairo_image_surface_get_width(s) == width, "width %d", cairo_image_surface_get_width(s));
    CHECK(cairo_image_surface_get_height(s) == l.height, "height %d, layout %d", cairo_image_surface_get_height(s), l.height);
    CHECK(!l.panel, "no binned/stack data, yet a panel");
    CHECK(l.map_w > 300 && l.rows > 20, "map %dx%d", l.map_w, l.rows);

    int seen_moved = 0, seen_pinned = 0, seen_free = 0, seen_tags = 0;
    for (size_t i = 0; i < f->block_count; i++) {
        const hh_mapdump_block *bl = &f->blocks[i];
        if (bl->size < 4 * l.bytes_per_cell * 3) continue;     /* too small to have a pure centre cell */
        char what[64];
        snprintf(what, sizeof what, "block %zu (%s, tag %u)", i, hh_mapdump_state_str(bl->state), (unsigned)bl->tag);
        check_block(s, &l, bl, what);
        seen_moved += bl->moved;
        seen_pinned += bl->state == HH_BLOCK_PINNED;
        seen_free += bl->state == HH_BLOCK_FREE;
        seen_tags += bl->state == HH_BLOCK_LIVE;
    }
    CHECK(seen_moved == 1 && seen_pinned == 1 && seen_free >= 1 && seen_tags >= 4,
          "blocks checked: moved %d pinned %d free %d live %d", seen_moved, seen_pinned, seen_free, seen_tags);
    /* The first block is tag 1 at offset 0: bottom-left pixel region. */
    CHECK(f->blocks[0].tag == 1 && f->blocks[0].offset == 0, "first block");
    int x0, y0;
    viz_layout_pixel(&l, 0, &x0, &y0);
    CHECK(x0 == l.map_x && y0 > l.map_y + (l.rows - 1) * l.row_h, "offset 0 not at the bottom left (%d,%d)", x0, y0);
    /* The header carries text: bright pixels in the top band. */
    int bright = 0;
    for (int yy = 0; yy < 60; yy++)
        for (int xx = 0; xx < width; xx++) { viz_rgb p = pixel(s, xx, yy); bright += p.r > 200 && p.g > 200 && p.b > 200; }
    CHECK(bright > 150, "header has %d bright pixels", bright);
    char png[64];
    snprintf(png, sizeof png, "%s.png", path);
    CHECK(viz_write_png(s, png) == 0, "png write");
    cairo_surface_t *back = cairo_image_surface_create_from_png(png);
    CHECK(cairo_surface_status(back) == CAIRO_STATUS_SUCCESS && cairo_image_surface_get_width(back) == width &&
          cairo_image_surface_get_height(back) == l.height, "PNG round trip size");
    if (cairo_surface_status(back) == CAIRO_STATUS_SUCCESS) {
        int px, py;
        viz_layout_pixel(&l, f->blocks[0].size / 2, &px, &py);
        CHECK(same(pixel(back, px, py), viz_block_color(&f->blocks[0])), "PNG round trip colour");
    }
    cairo_surface_destroy(back);
    unlink(png);
    cairo_surface_destroy(s);

    /* Timeline: one column; the middle of block A is tag 1, the top is free. */
    viz_timeline t;
    viz_timeline_init(&t, 100);
    CHECK(viz_timeline_add(&t, f), "timeline add");
    viz_axes ax;
    cairo_surface_t *ts = viz_draw_timeline(&t, &info, 600, &ax);
    int tx0 = ax.x0, tx1 = ax.x1;
    CHECK(ax.width == 600 && ax.y1 - ax.y0 == 100 && ax.x1 > ax.x0, "timeline axes");
    CHECK(ts && cairo_image_surface_get_width(ts) == 600, "timeline size");
    if (ts) {
        int h = cairo_image_surface_get_height(ts);
        int col = (tx0 + tx1) / 2;
        /* Plot area: y from 60 to 60 + col_h; offset 0 at the bottom. */
        int ya = 60 + 100 - 1 - (int)((double)(f->blocks[0].size / 2) / (double)f->managed_bytes * 100);
        CHECK(same(pixel(ts, col, ya), viz_color_tag(1)), "timeline: block A colour at (%d,%d)", col, ya);
        CHECK(same(pixel(ts, col, 62), viz_color_free()), "timeline: top is free");
        CHECK(h > 160, "timeline height %d", h);
        cairo_surface_destroy(ts);
    }
    viz_series se = {0};
    CHECK(viz_series_add(&se, f), "series add");
    cairo_surface_t *ps = viz_draw_plot(&se, 700, "test", NULL);
    CHECK(ps && cairo_image_surface_get_width(ps) == 700, "plot size");
    if (ps) cairo_surface_destroy(ps);
    viz_series_free(&se);
    viz_timeline_free(&t);

    hh_mapdump_reader_close(r);
    unlink(path);
    hh_unpin(heap, c);
    hh_heap_destroy(heap);
    if (failures == 0) printf("  render test: size, block colours at known pixels, moved outline, timeline, plot, PNG: ok\n");
    return failures ? 1 : 0;
}

/* A browser screenshot of index.html must show a heap map: many pixels of the
   free colour and of at least three tag colours. */
static int probe(const char *png) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) { fprintf(stderr, "probe: cannot read %s\n", png); return 1; }
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    long freec = 0, tags[8] = { 0 };
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            viz_rgb p = pixel(s, x, y);
            if (near(p, viz_color_free(), 3)) freec++;
            for (uint32_t t = 1; t < 8; t++) if (near(p, viz_color_tag(t), 3)) tags[t]++;
        }
    int tag_kinds = 0;
    for (int t = 1; t < 8; t++) tag_kinds += tags[t] > 200;
    cairo_surface_destroy(s);
    printf("  screenshot %dx%d: %ld free-colour pixels, %d tag colours with > 200 pixels\n", w, h, freec, tag_kinds);
    return freec > 2000 && tag_kinds >= 3 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--probe-screenshot")) return probe(argv[2]);
    return render_test();
}
