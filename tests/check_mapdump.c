/* check_mapdump.c -- .hhmap heap-map dumps (include/hheap/mapdump.h): round
 * trips against hh_heap_walk / the journal / the binned and mark-stack
 * walkers, every truncation and every single-byte corruption of a small file,
 * forged records with valid checksums, version and magic checks, I/O errors
 * and injected allocation failures. No cairo here (the render test is
 * tests/viz_render_test.c, run by `make check-demo`). */
#include "hheap/mapdump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/mapdump/mapdump_internal.h"
#include "test_util.h"

/* ---------------------------------------------------------------------------
   Fixtures and helpers
--------------------------------------------------------------------------- */
static hh_heap *heap;
static char path[64];

static void setup(void) {
    hh_test_capture_errors();
    ck_assert_int_eq(hh_heap_create(&(hh_heap_desc){ .capacity = 1u << 20 }, &heap), HH_OK);
    snprintf(path, sizeof path, "/tmp/hh-mapdump-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}
static void teardown(void) {
    ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    hh_heap_destroy(heap);
    unlink(path);
    hh_test_fail_after(-1);
    hh_set_error_handler(NULL, NULL);
}

/* Whole file into memory (caller frees). */
static uint8_t *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    ck_assert_int_ge(len, 0);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* What the walk said at write time. */
typedef struct snap {
    hh_block_info *b;
    size_t n, cap;
} snap;

static void snap_fn(const hh_block_info *b, void *user) {
    snap *s = user;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->b = realloc(s->b, s->cap * sizeof *s->b);
        ck_assert_ptr_nonnull(s->b);
    }
    s->b[s->n++] = *b;
}

static bool journal_has(hh_handle h) {
    const hh_move_record *rec;
    size_t n = hh_defrag_journal(heap, &rec);
    for (size_t i = 0; i < n; i++) if (rec[i].handle.id == h.id) return true;
    return false;
}

/* Checks frame f against the walk s, the journal and the stats taken at write time. */
static void check_frame(const hh_mapdump_frame *f, const snap *s, const hh_heap_stats *st,
                        const hh_move_record *rec, size_t nrec, const bool *moved) {
    ck_assert_uint_eq(f->block_count, s->n);
    uint64_t used = 0, freeb = 0, largest = 0;
    uint32_t holes = 0, live = 0, pinned = 0;
    for (size_t i = 0; i < s->n; i++) {
        const hh_mapdump_block *b = &f->blocks[i];
        ck_assert_uint_eq(b->offset, s->b[i].offset);
        ck_assert_uint_eq(b->size, s->b[i].size);
        ck_assert_int_eq(b->state, s->b[i].state);
        ck_assert_uint_eq(b->tag, s->b[i].state == HH_BLOCK_FREE ? 0 : s->b[i].tag);
        ck_assert_int_eq(b->moved, moved[i]);
        if (b->state == HH_BLOCK_FREE) {
            freeb += b->size;
            if (b->size > largest) largest = b->size;
            if (i + 1 < s->n) holes++;
        } else {
            used += b->size;
            live++;
            pinned += b->state == HH_BLOCK_PINNED;
        }
    }
    const hh_mapdump_metrics *m = &f->metrics;
    ck_assert_uint_eq(m->used_bytes, used);
    ck_assert_uint_eq(m->used_bytes, st->used_bytes);
    ck_assert_uint_eq(m->free_bytes, freeb);
    ck_assert_uint_eq(m->largest_free, st->largest_free);
    ck_assert_uint_eq(m->live_blocks, live);
    ck_assert_uint_eq(m->live_blocks, st->live_blocks);          /* the stats count pinned blocks as live too */
    ck_assert_uint_eq(m->pinned_blocks, st->pinned_blocks);
    ck_assert_uint_eq(m->pinned_blocks, pinned);
    ck_assert_uint_eq(m->holes, holes);
    ck_assert_uint_eq(m->free_blocks, st->free_blocks);
    ck_assert_double_eq_tol(m->fragmentation, st->fragmentation, 1e-12);
    ck_assert_uint_eq(m->total_moves, st->total_moves);
    ck_assert_uint_eq(f->move_count, nrec);
    uint64_t bytes = 0;
    for (size_t i = 0; i < nrec; i++) {
        ck_assert_uint_eq(f->moves[i].src_offset, rec[i].src_offset);
        ck_assert_uint_eq(f->moves[i].dst_offset, rec[i].dst_offset);
        ck_assert_uint_eq(f->moves[i].size, rec[i].size);
        bytes += rec[i].size;
    }
    ck_assert_uint_eq(m->bytes_moved, bytes);
    ck_assert_uint_eq(m->moves, nrec);
}

/* One recorded frame: what the reader must give back. */
typedef struct expect {
    snap               s;
    hh_heap_stats      st;
    hh_move_record    *rec;
    size_t             nrec;
    bool              *moved;
    uint64_t           frame;
} expect;

static void expect_take(expect *e, uint64_t frame) {
    memset(e, 0, sizeof *e);
    e->frame = frame;
    hh_heap_walk(heap, snap_fn, &e->s);
    hh_heap_stats_get(heap, &e->st);
    const hh_move_record *rec;
    e->nrec = hh_defrag_journal(heap, &rec);
    e->rec = malloc((e->nrec + 1) * sizeof *e->rec);
    ck_assert_ptr_nonnull(e->rec);
    if (e->nrec) memcpy(e->rec, rec, e->nrec * sizeof *rec);
    e->moved = calloc(e->s.n + 1, sizeof *e->moved);
    ck_assert_ptr_nonnull(e->moved);
    for (size_t i = 0; i < e->s.n; i++) e->moved[i] = e->s.b[i].state != HH_BLOCK_FREE && journal_has(e->s.b[i].handle);
}
static void expect_free(expect *e) { free(e->s.b); free(e->rec); free(e->moved); }

/* A small scene: blocks of several tags, some freed (holes), one pinned. */
static void make_scene(hh_handle *h, size_t n, hh_rng *r) {
    for (size_t i = 0; i < n; i++) {
        h[i] = hh_alloc_ex(heap, 32 + hh_rng_below(r, 2000), 16, (uint32_t)(1 + i % 5));
        ck_assert(!hh_is_null(h[i]));
    }
    for (size_t i = 0; i < n; i += 3) { ck_assert_int_eq(hh_free(heap, h[i]), HH_OK); h[i] = HH_NULL; }
    size_t p = n / 2 + ((n / 2) % 3 == 0);   /* a block that was not freed */
    ck_assert_ptr_nonnull(hh_pin(heap, h[p]));
}

/* Writes `frames` frames of a scene with defrag steps to path; fills ex[]. */
static void write_dump(unsigned frames, unsigned moves, expect *ex, uint32_t flags) {
    hh_rng r = hh_rng_make(hh_test_seed(11));
    hh_handle h[60];
    make_scene(h, HH_ARRAY_LEN_T(h), &r);
    hh_mapdump_writer *w;
    static const char *const names[] = { "none", "enemy", "bullet", "spark", "level", "ai" };
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .flags = flags, .tag_names = names,
                                                               .tag_name_count = 6, .label = "unit test" }, &w), HH_OK);
    for (unsigned f = 0; f < frames; f++) {
        hh_defrag_report rep = hh_defrag_step(heap, moves);
        ck_assert_int_eq(hh_mapdump_write_frame(w, 100 + f, &rep), HH_OK);
        if (ex) expect_take(&ex[f], 100 + f);
        /* Churn between frames: free one, allocate one. */
        size_t i = hh_rng_below(&r, HH_ARRAY_LEN_T(h));
        if (!hh_is_null(h[i]) && hh_free(heap, h[i]) == HH_OK) h[i] = HH_NULL;
        else if (hh_is_null(h[i])) h[i] = hh_alloc_ex(heap, 48 + hh_rng_below(&r, 900), 16, 3);
    }
    ck_assert_uint_gt(hh_mapdump_bytes_written(w), 0);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
}

/* Reads the whole reader; returns the status that ended it and the frame count. */
static hh_status drain(hh_mapdump_reader *r, size_t *frames) {
    const hh_mapdump_frame *f;
    hh_status s;
    *frames = 0;
    while ((s = hh_mapdump_next(r, &f)) == HH_OK && f != NULL) (*frames)++;
    return s;
}

/* ---------------------------------------------------------------------------
   Round trips
--------------------------------------------------------------------------- */
START_TEST(crc32_matches_the_standard_check_value) {
    ck_assert_uint_eq(md_crc32("123456789", 9), 0xCBF43926u);
    ck_assert_uint_eq(md_crc32("", 0), 0);
}
END_TEST

START_TEST(round_trip_matches_walk_journal_and_stats) {
    enum { FRAMES = 12 };
    expect ex[FRAMES];
    write_dump(FRAMES, 3, ex, 0);
    hh_mapdump_reader *r;
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    hh_mapdump_file_info info;
    ck_assert_int_eq(hh_mapdump_info(r, &info), HH_OK);
    ck_assert_uint_eq(info.version_major, HH_MAPDUMP_VERSION_MAJOR);
    ck_assert_uint_eq(info.managed_bytes, hh_heap_managed_bytes(heap));
    ck_assert_str_eq(info.label, "unit test");
    ck_assert_uint_eq(info.tag_name_count, 6);
    ck_assert_str_eq(info.tag_names[2], "bullet");
    unsigned moved_frames = 0;
    for (int pass = 0; pass < 2; pass++) {        /* the second pass after a rewind */
        for (unsigned i = 0; i < FRAMES; i++) {
            const hh_mapdump_frame *f;
            ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
            ck_assert_ptr_nonnull(f);
            ck_assert_uint_eq(f->frame, ex[i].frame);
            ck_assert_uint_eq(f->managed_bytes, hh_heap_managed_bytes(heap));
            ck_assert(!f->has_binned);
            ck_assert_uint_eq(f->stack_count, 0);
            check_frame(f, &ex[i].s, &ex[i].st, ex[i].rec, ex[i].nrec, ex[i].moved);
            moved_frames += ex[i].nrec > 0;
        }
        const hh_mapdump_frame *f = (const void *)1;
        ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
        ck_assert_ptr_null(f);
        ck_assert_uint_eq(hh_mapdump_frames_written(r), FRAMES);
        ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);    /* stays at the end */
        ck_assert_ptr_null(f);
        ck_assert_int_eq(hh_mapdump_rewind(r), HH_OK);
    }
    ck_assert_uint_gt(moved_frames, 0);                    /* the scene really moved blocks */
    hh_mapdump_reader_close(r);
    for (unsigned i = 0; i < FRAMES; i++) expect_free(&ex[i]);
}
END_TEST

/* Metrics computed independently from the walk: holes, largest hole, the
   sum-of-squares fragmentation and the compaction debt -- whose one meaning
   (pinned blocks above the lowest hole count) the defrag service shares: the
   dump once left pinned blocks out. */
START_TEST(metrics_match_an_independent_computation) {
    hh_handle h[40];
    for (int i = 0; i < 40; i++) h[i] = hh_alloc_ex(heap, 1000 + 100u * (unsigned)i, 16, 1);
    for (int i = 2; i < 40; i += 5) hh_free(heap, h[i]);
    ck_assert_ptr_nonnull(hh_pin(heap, h[20]));             /* above the first hole: debt all the same */
    ck_assert_ptr_nonnull(hh_pin(heap, h[36]));
    hh_mapdump_writer *w;
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 0, NULL), HH_OK);
    snap s = {0};
    hh_heap_walk(heap, snap_fn, &s);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);

    uint64_t freeb = 0, largest_hole = 0, hole_bytes = 0, debt = 0, high = 0;
    double sq = 0;
    uint32_t holes = 0;
    size_t first_hole = SIZE_MAX;
    for (size_t i = 0; i < s.n; i++) {
        if (s.b[i].state == HH_BLOCK_FREE) {
            freeb += s.b[i].size;
            sq += (double)s.b[i].size * (double)s.b[i].size;
            if (i + 1 < s.n) {
                holes++;
                hole_bytes += s.b[i].size;
                if (s.b[i].size > largest_hole) largest_hole = s.b[i].size;
                if (first_hole == SIZE_MAX) first_hole = i;
            }
        } else {
            high = s.b[i].offset + s.b[i].size;
            if (first_hole != SIZE_MAX) debt += s.b[i].size;      /* live or pinned */
        }
    }
    ck_assert_uint_eq(holes, 8);
    hh_mapdump_reader *r;
    const hh_mapdump_frame *f;
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->metrics.holes, holes);
    ck_assert_uint_eq(f->metrics.hole_bytes, hole_bytes);
    ck_assert_uint_eq(f->metrics.largest_hole, largest_hole);
    ck_assert_uint_eq(f->metrics.compaction_debt, debt);
    ck_assert_uint_eq(f->metrics.high_water, high);
    ck_assert_double_eq_tol(f->metrics.fragmentation_sq, 1.0 - sq / ((double)freeb * (double)freeb), 1e-12);
    ck_assert_uint_eq(f->metrics.defrag_ns, 0);
    ck_assert_uint_eq(f->metrics.moves, 0);
    /* The defrag service's own view rides along and agrees on the holes. */
    hh_defrag_metrics dm;
    ck_assert_int_eq(hh_defrag_metrics_get(heap, &dm), HH_OK);
    ck_assert(f->has_service);
    ck_assert_uint_eq(f->service.frames_to_compact, dm.frames_to_compact);
    ck_assert_uint_eq(f->service.stuck_holes, dm.stuck_holes);
    ck_assert_uint_eq(dm.hole_count, f->metrics.holes);
    ck_assert_double_eq_tol(dm.fragmentation_sq, f->metrics.fragmentation_sq, 1e-6);
    ck_assert_double_eq_tol(dm.fragmentation, f->metrics.fragmentation, 1e-12);
    ck_assert_uint_eq(dm.debt_bytes, f->metrics.compaction_debt);
    hh_mapdump_reader_close(r);
    free(s.b);
    hh_unpin(heap, h[20]);
    hh_unpin(heap, h[36]);

    /* Compacted: no hole, no debt, one free block, zero fragmentation both ways. */
    hh_defrag_full(heap);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 1, NULL), HH_OK);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->metrics.holes, 0);
    ck_assert_uint_eq(f->metrics.compaction_debt, 0);
    ck_assert_double_eq(f->metrics.fragmentation, 0.0);
    ck_assert_double_eq(f->metrics.fragmentation_sq, 0.0);
    ck_assert_uint_gt(f->metrics.moves, 0);                  /* the journal of hh_defrag_full */
    hh_mapdump_reader_close(r);
}
END_TEST

/* Randomised: many frames of random churn and steps, every frame compared. */
START_TEST(random_frames_round_trip) {
    hh_rng r = hh_rng_make(hh_test_seed(5));
    unsigned frames = hh_test_scaled(120, 12);
    expect *ex = calloc(frames, sizeof *ex);
    ck_assert_ptr_nonnull(ex);
    hh_handle h[200] = {{0}};
    hh_mapdump_writer *w;
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap }, &w), HH_OK);
    for (unsigned f = 0; f < frames; f++) {
        for (int k = 0; k < 20; k++) {
            size_t i = hh_rng_below(&r, 200);
            if (hh_is_null(h[i])) h[i] = hh_alloc_ex(heap, 16 + hh_rng_below(&r, 3000), (size_t)1 << hh_rng_below(&r, 8), hh_rng_below(&r, 9));
            else { hh_free(heap, h[i]); h[i] = HH_NULL; }
        }
        hh_defrag_report rep = hh_defrag_step(heap, hh_rng_below(&r, 6));
        ck_assert_int_eq(hh_mapdump_write_frame(w, f, &rep), HH_OK);
        expect_take(&ex[f], f);
    }
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
    size_t n;
    uint8_t *data = slurp(path, &n);
    hh_mapdump_reader *rd;
    ck_assert_int_eq(hh_mapdump_open_memory(data, n, &rd), HH_OK);
    for (unsigned f = 0; f < frames; f++) {
        const hh_mapdump_frame *fr;
        ck_assert_int_eq(hh_mapdump_next(rd, &fr), HH_OK);
        ck_assert_ptr_nonnull(fr);
        check_frame(fr, &ex[f].s, &ex[f].st, ex[f].rec, ex[f].nrec, ex[f].moved);
        expect_free(&ex[f]);
    }
    size_t more;
    ck_assert_int_eq(drain(rd, &more), HH_OK);
    ck_assert_uint_eq(more, 0);
    hh_mapdump_reader_close(rd);
    free(data);
    free(ex);
}
END_TEST

/* The binned and mark-stack sections carry what their walkers said. */
typedef struct region_list { hh_binned_region r[4096]; size_t n; } region_list;
static void region_fn(const hh_binned_region *r, void *user) {
    region_list *l = user;
    if (l->n < 4096) l->r[l->n++] = *r;
}
typedef struct chunk_list { hh_memstack_chunk_info c[64]; size_t n; hh_memstack_mark_info m[16]; size_t nm; } chunk_list;
static void chunk_fn(const hh_memstack_chunk_info *c, void *user) { chunk_list *l = user; if (l->n < 64) l->c[l->n++] = *c; }
static void mark_fn(const hh_memstack_mark_info *m, void *user) { chunk_list *l = user; if (l->nm < 16) l->m[l->nm++] = *m; }

START_TEST(binned_and_stack_sections_round_trip) {
    void *b[300];
    for (int i = 0; i < 300; i++) { b[i] = hh_bmalloc(16 + (size_t)(i % 40) * 24); ck_assert_ptr_nonnull(b[i]); }
    hh_memstack *ms;
    ck_assert_int_eq(hh_memstack_create(&(hh_memstack_desc){ .name = "scratch" }, &ms), HH_OK);
    hh_mark m1, m2;
    hh_mark_push(ms, &m1);
    ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 3000, 16));
    hh_mark_push(ms, &m2);
    ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 100000, 16));    /* an oversize chunk */
    ck_assert_ptr_nonnull(hh_memstack_alloc(ms, 5000, 16));

    hh_mapdump_writer *w;
    hh_memstack *stacks[1] = { ms };
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .flags = HH_MAPDUMP_BINNED,
                                                               .memstacks = stacks, .memstack_count = 1 }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 7, NULL), HH_OK);
    region_list *rl = calloc(1, sizeof *rl);
    ck_assert_ptr_nonnull(rl);
    hh_binned_walk(region_fn, rl);
    chunk_list cl = { .n = 0 };
    hh_memstack_walk(ms, chunk_fn, &cl);
    hh_memstack_walk_marks(ms, mark_fn, &cl);
    hh_memstack_info info;
    hh_memstack_info_get(ms, &info);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);

    hh_mapdump_reader *r;
    const hh_mapdump_frame *f;
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    ck_assert_int_eq(hh_mapdump_next(r, &f), HH_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert(f->has_binned);
    ck_assert_uint_eq(f->region_count, rl->n);
    uint64_t live = 0;
    for (size_t i = 0; i < rl->n; i++) {
        const hh_mapdump_region *g = &f->regions[i];
        ck_assert_int_eq(g->kind, rl->r[i].kind);
        ck_assert_int_eq(g->size_class, rl->r[i].size_class);
        ck_assert_uint_eq(g->size, rl->r[i].size);
        ck_assert_uint_eq(g->block_size, rl->r[i].block_size);
        ck_assert_uint_eq(g->capacity, rl->r[i].capacity);
        ck_assert_uint_eq(g->live, rl->r[i].live);
        ck_assert_uint_eq(g->cached, rl->r[i].cached);
        ck_assert_int_eq(g->committed, rl->r[i].committed);
        if (g->kind == HH_BINNED_REGION_CLASS) live += g->live;
    }
    ck_assert_uint_ge(live, 300);      /* ours at least (other suites may hold blocks too) */
    ck_assert_uint_eq(f->stack_count, 1);
    const hh_mapdump_stack *s = &f->stacks[0];
    ck_assert_str_eq(s->name, "scratch");
    ck_assert_uint_eq(s->chunk_count, cl.n);
    ck_assert_uint_ge(s->chunk_count, 2);
    ck_assert_uint_eq(s->used_bytes, info.used_bytes);
    ck_assert_uint_eq(s->reserved_bytes, info.reserved_bytes);
    for (size_t i = 0; i < cl.n; i++) {
        ck_assert_uint_eq(s->chunks[i].size, cl.c[i].size);
        ck_assert_uint_eq(s->chunks[i].used_bytes, cl.c[i].used_bytes);
        ck_assert_uint_eq(s->chunks[i].header_bytes, cl.c[i].header_bytes);
        ck_assert_int_eq(s->chunks[i].kind, cl.c[i].kind);
        ck_assert_int_eq(s->chunks[i].is_top, cl.c[i].is_top);
    }
    ck_assert_uint_eq(s->mark_count, 2);
    for (size_t i = 0; i < cl.nm; i++) {
        ck_assert_uint_eq(s->marks[i].depth, cl.m[i].depth);
        ck_assert_uint_eq(s->marks[i].chunk_index, cl.m[i].chunk_index);
        ck_assert_uint_eq(s->marks[i].offset, cl.m[i].offset);
    }
    ck_assert_uint_eq(s->marks[0].depth, 2);                      /* innermost first */
    hh_mapdump_reader_close(r);
    free(rl);
    ck_assert_int_eq(hh_mark_pop(&m2), HH_OK);
    ck_assert_int_eq(hh_mark_pop(&m1), HH_OK);
    hh_memstack_destroy(ms);
    for (int i = 0; i < 300; i++) hh_bfree(b[i]);
    hh_binned_thread_flush();
}
END_TEST

START_TEST(empty_dump_has_no_frames) {
    hh_mapdump_writer *w;
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
    hh_mapdump_reader *r;
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    size_t n;
    ck_assert_int_eq(drain(r, &n), HH_OK);
    ck_assert_uint_eq(n, 0);
    hh_mapdump_reader_close(r);
}
END_TEST

/* ---------------------------------------------------------------------------
   Damaged files
--------------------------------------------------------------------------- */
/* Every proper prefix of a small dump fails cleanly: HH_E_IO (short magic) or
   HH_E_CORRUPT, one message per failing call, never a clean end. */
START_TEST(every_truncation_is_reported) {
    write_dump(3, 2, NULL, 0);
    size_t n;
    uint8_t *data = slurp(path, &n);
    ck_assert_uint_lt(n, 20000);
    for (size_t len = 0; len < n; len++) {
        uint8_t *cut = malloc(len + 1);          /* exact size, so memcheck sees any overread */
        ck_assert_ptr_nonnull(cut);
        memcpy(cut, data, len);
        hh_test_reset_captured();
        hh_mapdump_reader *r;
        hh_status s = hh_mapdump_open_memory(cut, len, &r);
        if (s != HH_OK) {
            ck_assert_msg(s == HH_E_CORRUPT || s == HH_E_IO, "len %zu: status %d", len, s);
            ck_assert_ptr_null(r);
            ck_assert_uint_eq(hh_test_captured_count(), 1);
        } else {
            size_t frames;
            hh_status e = drain(r, &frames);
            ck_assert_msg(e == HH_E_CORRUPT, "len %zu of %zu: truncation not reported (%d)", len, n, e);
            ck_assert_uint_eq(hh_test_last_captured(), HH_E_CORRUPT);
            ck_assert_uint_eq(hh_test_captured_count(), 1);
            ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "trunc"));
            ck_assert_uint_le(frames, 3);
            const hh_mapdump_frame *f;
            ck_assert_int_eq(hh_mapdump_next(r, &f), HH_E_CORRUPT);   /* sticky */
            ck_assert_ptr_null(f);
            hh_mapdump_reader_close(r);
        }
        free(cut);
    }
    /* The whole file still reads. */
    hh_mapdump_reader *r;
    size_t frames;
    ck_assert_int_eq(hh_mapdump_open_memory(data, n, &r), HH_OK);
    ck_assert_int_eq(drain(r, &frames), HH_OK);
    ck_assert_uint_eq(frames, 3);
    hh_mapdump_reader_close(r);
    free(data);
}
END_TEST

/* Every single-byte corruption is caught, except in the minor version (which
   a reader accepts by design). */
START_TEST(every_byte_flip_is_reported) {
    write_dump(2, 2, NULL, HH_MAPDUMP_BINNED);
    size_t n;
    uint8_t *data = slurp(path, &n);
    size_t step = n > 6000 ? n / 3000 : 1;     /* keep memcheck runs short on big binned sections */
    for (size_t i = 0; i < n; i += (i < 64 ? 1 : step)) {
        if (i == 10 || i == 11) continue;
        uint8_t *bad = malloc(n);
        ck_assert_ptr_nonnull(bad);
        memcpy(bad, data, n);
        bad[i] ^= (uint8_t)(1u << (i % 8)) | 0x10;
        hh_mapdump_reader *r;
        hh_status s = hh_mapdump_open_memory(bad, n, &r);
        if (s == HH_OK) {
            size_t frames;
            s = drain(r, &frames);
            hh_mapdump_reader_close(r);
        }
        ck_assert_msg(s == HH_E_CORRUPT || s == HH_E_IO, "flip at byte %zu of %zu not caught (%d)", i, n, s);
        free(bad);
    }
    free(data);
}
END_TEST

/* Rewrites the payload of the first frame record with f applied and a fresh
   CRC, so only the parser's own checks stand between it and the bytes. */
static void forge(uint8_t *d, size_t n, void (*f)(uint8_t *payload, size_t len)) {
    size_t head = MD_FILE_HEAD_BYTES + md_get32(d + 12);
    ck_assert_uint_lt(head + MD_REC_HEAD_BYTES, n);
    uint8_t *rec = d + head;
    size_t len = md_get32(rec + 4);
    f(rec + MD_REC_HEAD_BYTES, len);
    md_put32(rec + 8, md_crc32(rec + MD_REC_HEAD_BYTES, len));
}
/* Section by id inside a payload (NULL if absent). */
static uint8_t *find_sec(uint8_t *p, size_t len, uint8_t id, uint32_t *sec_len) {
    size_t i = 0;
    while (i + 5 <= len) {
        uint32_t l = md_get32(p + i + 1);
        if (p[i] == id) { *sec_len = l; return p + i + 5; }
        i += 5 + l;
    }
    return NULL;
}
static void forge_block_count(uint8_t *p, size_t len) {
    uint32_t l;
    uint8_t *s = find_sec(p, len, MD_SEC_BLOCKS, &l);
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < 9; i++) s[i] = 0xFF;              /* count = huge (padded varint) */
    s[9] = 0x01;
}
static void forge_block_size(uint8_t *p, size_t len) {
    uint32_t l;
    uint8_t *s = find_sec(p, len, MD_SEC_BLOCKS, &l);
    ck_assert_ptr_nonnull(s);
    /* First block: flags, gap, size -> a size far beyond the managed range. */
    s[10] = 1;            /* live */
    s[11] = 0;            /* gap */
    s[12] = 0xFF; s[13] = 0xFF; s[14] = 0xFF; s[15] = 0x7F;
}
static void forge_section_len(uint8_t *p, size_t len) {
    uint32_t l;
    uint8_t *s = find_sec(p, len, MD_SEC_METRICS, &l);
    ck_assert_ptr_nonnull(s);
    md_put32(s - 4, 0x7FFFFFFF);
}
static void forge_fragmentation(uint8_t *p, size_t len) {
    uint32_t l;
    uint8_t *s = find_sec(p, len, MD_SEC_METRICS, &l);
    ck_assert_ptr_nonnull(s);
    uint64_t bits = md_f64_bits(2.5);
    for (int i = 0; i < 8; i++) s[12 * 8 + i] = (uint8_t)(bits >> (8 * i));
}
static void forge_varint_overflow(uint8_t *p, size_t len) {
    uint32_t l;
    uint8_t *s = find_sec(p, len, MD_SEC_MOVES, &l);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_ge(l, 1);
    s[0] = 0x80;          /* the count's varint never ends inside the section */
    for (uint32_t i = 1; i < l; i++) s[i] = 0xFF;
}

START_TEST(forged_records_with_valid_crc_are_rejected) {
    write_dump(2, 2, NULL, 0);
    size_t n;
    uint8_t *data = slurp(path, &n);
    void (*forgers[])(uint8_t *, size_t) = { forge_block_count, forge_block_size, forge_section_len,
                                             forge_fragmentation, forge_varint_overflow };
    const char *want[] = { "block count", "outside the managed range", "runs past", "fragmentation", "move" };
    for (size_t k = 0; k < HH_ARRAY_LEN_T(forgers); k++) {
        uint8_t *d = malloc(n);
        ck_assert_ptr_nonnull(d);
        memcpy(d, data, n);
        forge(d, n, forgers[k]);
        hh_mapdump_reader *r;
        ck_assert_int_eq(hh_mapdump_open_memory(d, n, &r), HH_OK);
        const hh_mapdump_frame *f;
        hh_test_reset_captured();
        ck_assert_int_eq(hh_mapdump_next(r, &f), HH_E_CORRUPT);
        ck_assert_ptr_null(f);
        ck_assert_uint_eq(hh_test_captured_count(), 1);
        ck_assert_msg(strstr(hh_test_last_message(), want[k]) != NULL, "forger %zu: message '%s'", k, hh_test_last_message());
        hh_mapdump_reader_close(r);
        free(d);
    }
    free(data);
}
END_TEST

START_TEST(other_major_version_is_refused_with_both_versions_named) {
    write_dump(1, 1, NULL, 0);
    size_t n;
    uint8_t *d = slurp(path, &n);
    d[8] = 2;                                            /* major 2 */
    d[10] = 0;                                           /* minor 0: the message names "2.0" */
    hh_mapdump_reader *r;
    hh_test_reset_captured();
    ck_assert_int_eq(hh_mapdump_open_memory(d, n, &r), HH_E_IO);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(hh_last_error(), HH_E_IO);
    ck_assert_uint_eq(hh_test_captured_count(), 1);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "version 2.0"));
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "version 1.x"));
    d[8] = 1;
    d[10] = 7;                                           /* a later minor version reads fine */
    ck_assert_int_eq(hh_mapdump_open_memory(d, n, &r), HH_OK);
    hh_mapdump_file_info info;
    hh_mapdump_info(r, &info);
    ck_assert_uint_eq(info.version_minor, 7);
    size_t frames;
    ck_assert_int_eq(drain(r, &frames), HH_OK);
    ck_assert_uint_eq(frames, 1);
    hh_mapdump_reader_close(r);
    free(d);
}
END_TEST

START_TEST(bad_magic_and_trailing_data_are_reported) {
    static const char junk[] = "P6\n640 480\n255\n....";
    hh_mapdump_reader *r;
    ck_assert_int_eq(hh_mapdump_open_memory(junk, sizeof junk, &r), HH_E_IO);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "not a .hhmap file"));
    write_dump(1, 1, NULL, 0);
    size_t n;
    uint8_t *d = slurp(path, &n);
    uint8_t *more = malloc(n + 3);
    ck_assert_ptr_nonnull(more);
    memcpy(more, d, n);
    memcpy(more + n, "abc", 3);
    ck_assert_int_eq(hh_mapdump_open_memory(more, n + 3, &r), HH_OK);
    size_t frames;
    ck_assert_int_eq(drain(r, &frames), HH_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "after the end record"));
    hh_mapdump_reader_close(r);
    free(more);
    free(d);
}
END_TEST

/* ---------------------------------------------------------------------------
   Arguments, I/O errors, allocation failures
--------------------------------------------------------------------------- */
START_TEST(bad_arguments_are_reported) {
    hh_mapdump_writer *w = (void *)1;
    ck_assert_int_eq(hh_mapdump_create(NULL, &(hh_mapdump_desc){ .heap = heap }, &w), HH_E_INVALID_ARG);
    ck_assert_ptr_null(w);
    ck_assert_int_eq(hh_mapdump_create(path, NULL, &w), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = NULL }, &w), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .flags = 0x80 }, &w), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .memstack_count = 1 }, &w), HH_E_INVALID_ARG);
    hh_memstack *nine[9] = { 0 };
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .memstacks = nine, .memstack_count = 9 }, &w),
                     HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .memstacks = nine, .memstack_count = 1 }, &w),
                     HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .tag_name_count = 65 }, &w), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap }, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_write_frame(NULL, 0, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_close(NULL), HH_OK);
    hh_mapdump_reader *r = (void *)1;
    ck_assert_int_eq(hh_mapdump_open(NULL, &r), HH_E_INVALID_ARG);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(hh_mapdump_open(path, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_open_memory(NULL, 5, &r), HH_E_INVALID_ARG);
    const hh_mapdump_frame *f;
    ck_assert_int_eq(hh_mapdump_next(NULL, &f), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_info(NULL, NULL), HH_E_INVALID_ARG);
    ck_assert_int_eq(hh_mapdump_rewind(NULL), HH_E_INVALID_ARG);
    hh_mapdump_reader_close(NULL);
    ck_assert_str_eq(hh_mapdump_state_str(HH_BLOCK_PINNED), "pinned");
    ck_assert_str_eq(hh_mapdump_state_str(9), "unknown");
    /* Long label and tag names are truncated, not overflowed. */
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *names[] = { big };
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .label = big, .tag_names = names,
                                                               .tag_name_count = 1 }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    hh_mapdump_file_info info;
    hh_mapdump_info(r, &info);
    ck_assert_uint_eq(strlen(info.label), HH_MAPDUMP_LABEL_BYTES - 1);
    ck_assert_uint_eq(strlen(info.tag_names[0]), HH_MAPDUMP_NAME_BYTES - 1);
    hh_mapdump_reader_close(r);
}
END_TEST

/* Error contracts of NULL objects and NULL outs (issue #15, item 6): every
   NULL reader, writer or out is reported once (HH_E_INVALID_ARG, the message
   led by the function's name), a non-NULL out is cleared before that early
   return, and nothing else changes. */

START_TEST(null_reader_writer_and_out_are_reported) {
    hh_test_reset_captured();
    hh_mapdump_file_info fi;
    memset(&fi, 0xA5, sizeof fi);
    ck_assert_int_eq(hh_mapdump_info(NULL, &fi), HH_E_INVALID_ARG);
    const uint8_t *b = (const uint8_t *)&fi;
    for (size_t i = 0; i < sizeof fi; i++) ck_assert_msg(b[i] == 0, "byte %zu of the info not cleared", i);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_info");
    ck_assert_uint_eq(hh_mapdump_frames_written(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_frames_written");
    ck_assert_uint_eq(hh_mapdump_bytes_written(NULL), 0);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_bytes_written");
    const hh_mapdump_frame *f = (const hh_mapdump_frame *)(const void *)&fi;
    ck_assert_int_eq(hh_mapdump_next(NULL, &f), HH_E_INVALID_ARG);
    ck_assert_ptr_null(f);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_next");
    ck_assert_int_eq(hh_mapdump_rewind(NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_rewind");
    ck_assert_int_eq(hh_mapdump_write_frame(NULL, 0, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_write_frame");
    hh_mapdump_reader *r = (hh_mapdump_reader *)(void *)&fi;
    ck_assert_int_eq(hh_mapdump_open(NULL, &r), HH_E_INVALID_ARG);
    ck_assert_ptr_null(r);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_open");
    r = (hh_mapdump_reader *)(void *)&fi;
    ck_assert_int_eq(hh_mapdump_open_memory(NULL, 5, &r), HH_E_INVALID_ARG);
    ck_assert_ptr_null(r);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_open_memory");
    hh_mapdump_writer *w = (hh_mapdump_writer *)(void *)&fi;
    ck_assert_int_eq(hh_mapdump_create(path, NULL, &w), HH_E_INVALID_ARG);
    ck_assert_ptr_null(w);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_create");
    ck_assert_int_eq(hh_mapdump_close(NULL), HH_OK);   /* like free(NULL): silent */
    hh_mapdump_reader_close(NULL);
    ck_assert_uint_eq(hh_test_captured_count(), 0);

    /* live reader and writer with a NULL out: reported, nothing changes */
    ck_assert_int_eq(hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap, .label = "contract" }, &w), HH_OK);
    ck_assert_int_eq(hh_mapdump_write_frame(w, 1, NULL), HH_OK);
    uint64_t written = hh_mapdump_bytes_written(w);
    ck_assert_uint_gt(written, 0);
    ck_assert_int_eq(hh_mapdump_close(w), HH_OK);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    ck_assert_int_eq(hh_mapdump_open(path, &r), HH_OK);
    ck_assert_int_eq(hh_mapdump_info(r, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_info");
    ck_assert_int_eq(hh_mapdump_next(r, NULL), HH_E_INVALID_ARG);
    hh_test_expect_one(HH_E_INVALID_ARG, "hh_mapdump_next");
    ck_assert_int_eq(hh_mapdump_info(r, &fi), HH_OK);
    ck_assert_str_eq(fi.label, "contract");
    size_t frames;
    ck_assert_int_eq(drain(r, &frames), HH_OK);         /* the failed calls consumed nothing */
    ck_assert_uint_eq(frames, 1);
    ck_assert_uint_eq(hh_mapdump_frames_written(r), 1);
    ck_assert_uint_eq(hh_test_captured_count(), 0);
    hh_mapdump_reader_close(r);
}
END_TEST

START_TEST(io_errors_are_reported) {
    hh_mapdump_writer *w;
    ck_assert_int_eq(hh_mapdump_create("/nonexistent-dir/x.hhmap", &(hh_mapdump_desc){ .heap = heap }, &w), HH_E_IO);
    ck_assert_ptr_nonnull(strstr(hh_test_last_message(), "/nonexistent-dir/x.hhmap"));
    hh_mapdump_reader *r;
    ck_assert_int_eq(hh_mapdump_open("/nonexistent-dir/x.hhmap", &r), HH_E_IO);
    if (access("/dev/full", W_OK) == 0) {
        /* The header fits the stdio buffer, so the failure shows at its flush. */
        hh_status s = hh_mapdump_create("/dev/full", &(hh_mapdump_desc){ .heap = heap }, &w);
        ck_assert_int_eq(s, HH_E_IO);
        ck_assert_int_eq(hh_last_error(), HH_E_IO);
    }
}
END_TEST

START_TEST(allocation_failures_are_clean) {
    hh_handle h[20];
    for (int i = 0; i < 20; i++) h[i] = hh_alloc_ex(heap, 200, 16, 2);
    for (int i = 0; i < 20; i += 2) hh_free(heap, h[i]);
    bool done = false;
    for (long n = 0; !done && n < 100; n++) {
        hh_mapdump_writer *w = NULL;
        hh_test_fail_after(n);
        hh_status s = hh_mapdump_create(path, &(hh_mapdump_desc){ .heap = heap }, &w);
        if (s == HH_OK) s = hh_mapdump_write_frame(w, 1, NULL);
        hh_status c = w ? hh_mapdump_close(w) : HH_OK;
        hh_mapdump_reader *r = NULL;
        if (s == HH_OK && c == HH_OK) s = hh_mapdump_open(path, &r);
        if (s == HH_OK) {
            size_t frames;
            s = drain(r, &frames);
            if (s == HH_OK) { ck_assert_uint_eq(frames, 1); done = true; }
        }
        hh_mapdump_reader_close(r);
        hh_test_fail_after(-1);
        ck_assert(s == HH_OK || s == HH_E_NO_MEMORY || (s == HH_E_CORRUPT && c == HH_E_NO_MEMORY));
        ck_assert_int_eq(hh_heap_check(heap), HH_OK);
    }
    ck_assert(done);
}
END_TEST

Suite *hh_test_mapdump_suite(void) {
    Suite *s = suite_create("mapdump");
    TCase *tc = tcase_create("round_trip");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, crc32_matches_the_standard_check_value);
    tcase_add_test(tc, round_trip_matches_walk_journal_and_stats);
    tcase_add_test(tc, metrics_match_an_independent_computation);
    tcase_add_test(tc, random_frames_round_trip);
    tcase_add_test(tc, binned_and_stack_sections_round_trip);
    tcase_add_test(tc, empty_dump_has_no_frames);
    suite_add_tcase(s, tc);
    tc = tcase_create("damaged");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_truncation_is_reported);
    tcase_add_test(tc, every_byte_flip_is_reported);
    tcase_add_test(tc, forged_records_with_valid_crc_are_rejected);
    tcase_add_test(tc, other_major_version_is_refused_with_both_versions_named);
    tcase_add_test(tc, bad_magic_and_trailing_data_are_reported);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, bad_arguments_are_reported);
    tcase_add_test(tc, null_reader_writer_and_out_are_reported);
    tcase_add_test(tc, io_errors_are_reported);
    tcase_add_test(tc, allocation_failures_are_clean);
    suite_add_tcase(s, tc);
    return s;
}
