/* fuzz_hhmap.c -- libFuzzer harness: the .hhmap reader on arbitrary bytes.
 *
 * The input is the file. The reader (hh_mapdump_open_memory / _info / _next /
 * _rewind) must never read outside the input, never crash, never leak, and
 * report every rejection with one message and a documented status. Checks:
 *   M1  open: HH_OK, or HH_E_IO / HH_E_CORRUPT / HH_E_NO_MEMORY with out NULL
 *       and exactly one message;
 *   M2  every frame it returns is self-consistent: blocks in offset order,
 *       tiling no more than managed_bytes, states valid; array pointers non-NULL
 *       whenever their counts are non-zero (every element is read, so ASan /
 *       memcheck see any out-of-bounds array);
 *   M3  next: HH_OK (frame or end), or HH_E_CORRUPT / HH_E_NO_MEMORY with
 *       *out NULL and one message; after a failure every later call fails too;
 *   M4  rewind reproduces the same sequence (same count, same first status).
 * The seed corpus (tests/fuzz/corpus_hhmap/) holds real dumps written by the
 * library, so mutations start from valid records (libFuzzer's comparison hooks
 * let it fix up the CRCs). */
#include "fuzz_util.h"

#include <string.h>

#include "hheap/heap.h"
#include "hheap/mapdump.h"

enum { MAX_FRAMES = 4096 };

static uint64_t frame_digest(const hh_mapdump_frame *f) {
    uint64_t d = f->frame * 31 + f->block_count * 7 + f->move_count * 3 + f->region_count + f->stack_count;
    uint64_t end = 0;
    FZ_CHECK(f->block_count == 0 || f->blocks != NULL, "M2: blocks NULL");
    for (size_t i = 0; i < f->block_count; i++) {
        const hh_mapdump_block *b = &f->blocks[i];
        FZ_CHECK(b->state == HH_BLOCK_FREE || b->state == HH_BLOCK_LIVE || b->state == HH_BLOCK_PINNED,
                 "M2: block %zu state %u", i, b->state);
        FZ_CHECK(b->offset >= end, "M2: block %zu at %llu overlaps the previous (end %llu)", i,
                 (unsigned long long)b->offset, (unsigned long long)end);
        FZ_CHECK(b->size <= f->managed_bytes && b->offset <= f->managed_bytes - b->size,
                 "M2: block %zu beyond managed_bytes", i);
        end = b->offset + b->size;
        d = d * 1099511628211ULL + b->offset + b->size + b->tag + b->moved;
    }
    FZ_CHECK(f->move_count == 0 || f->moves != NULL, "M2: moves NULL");
    for (size_t i = 0; i < f->move_count; i++) d = d * 31 + f->moves[i].src_offset + f->moves[i].dst_offset + f->moves[i].size;
    FZ_CHECK(f->region_count == 0 || f->regions != NULL, "M2: regions NULL");
    for (size_t i = 0; i < f->region_count; i++) d = d * 31 + f->regions[i].size + f->regions[i].live + f->regions[i].kind;
    FZ_CHECK(f->stack_count == 0 || f->stacks != NULL, "M2: stacks NULL");
    for (uint32_t i = 0; i < f->stack_count; i++) {
        const hh_mapdump_stack *s = &f->stacks[i];
        FZ_CHECK(memchr(s->name, 0, sizeof s->name) != NULL, "M2: stack name not terminated");
        FZ_CHECK(s->chunk_count == 0 || s->chunks != NULL, "M2: chunks NULL");
        FZ_CHECK(s->mark_count == 0 || s->marks != NULL, "M2: marks NULL");
        for (uint32_t k = 0; k < s->chunk_count; k++) d = d * 31 + s->chunks[k].size + s->chunks[k].used_bytes;
        for (uint32_t k = 0; k < s->mark_count; k++) d = d * 31 + s->marks[k].offset + s->marks[k].depth;
    }
    return d;
}

/* Reads every frame; returns the count, *status the status that ended it. */
static size_t read_all(hh_mapdump_reader *r, hh_status *status, uint64_t *digest) {
    size_t n = 0;
    *digest = 0;
    for (;;) {
        const hh_mapdump_frame *f = (const hh_mapdump_frame *)1;
        unsigned before = fz_err.count;
        hh_status s = hh_mapdump_next(r, &f);
        if (s != HH_OK) {
            FZ_CHECK(s == HH_E_CORRUPT || s == HH_E_NO_MEMORY || s == HH_E_IO, "M3: next returned %s", hh_status_str(s));
            FZ_CHECK(f == NULL, "M3: failing next left a frame");
            FZ_CHECK(fz_err.count == before + 1, "M3: failing next sent %u messages", fz_err.count - before);
            const hh_mapdump_frame *g = (const hh_mapdump_frame *)1;
            FZ_CHECK(hh_mapdump_next(r, &g) != HH_OK && g == NULL, "M3: next after a failure succeeded");
            *status = s;
            return n;
        }
        FZ_CHECK(fz_err.count == before, "M3: successful next sent a message");
        if (f == NULL) { *status = HH_OK; return n; }
        *digest = *digest * 1000003 + frame_digest(f);
        if (++n == MAX_FRAMES) { *status = HH_OK; return n; }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hh_set_error_handler(fz_on_error, NULL);
    fz_errors_reset();
    hh_mapdump_reader *r = (hh_mapdump_reader *)1;
    hh_status s = hh_mapdump_open_memory(data, size, &r);
    if (s != HH_OK) {
        FZ_CHECK(s == HH_E_IO || s == HH_E_CORRUPT || s == HH_E_NO_MEMORY, "M1: open returned %s", hh_status_str(s));
        FZ_CHECK(fz_err.count == 1, "M1: failing open sent %u messages", fz_err.count);
        FZ_CHECK(r == NULL, "M1: failing open left a reader");
        hh_set_error_handler(NULL, NULL);
        return 0;
    }
    FZ_CHECK(fz_err.count == 0, "M1: successful open sent a message");
    hh_mapdump_file_info info;
    FZ_CHECK(hh_mapdump_info(r, &info) == HH_OK, "info failed");
    FZ_CHECK(memchr(info.label, 0, sizeof info.label) != NULL, "label not terminated");
    FZ_CHECK(info.tag_name_count <= HH_MAPDUMP_MAX_TAGS, "tag_name_count %u", info.tag_name_count);
    hh_status s1, s2;
    uint64_t d1, d2;
    size_t n1 = read_all(r, &s1, &d1);
    (void)hh_mapdump_frames_written(r);
    unsigned before = fz_err.count;
    hh_status rw = hh_mapdump_rewind(r);
    if (rw == HH_OK) {
        FZ_CHECK(fz_err.count == before, "rewind sent a message");
        size_t n2 = read_all(r, &s2, &d2);
        FZ_CHECK(n1 == n2 && s1 == s2 && d1 == d2, "M4: rewind read %zu frames (%s), first pass %zu (%s)", n2,
                 hh_status_str(s2), n1, hh_status_str(s1));
    }
    hh_mapdump_reader_close(r);
    hh_set_error_handler(NULL, NULL);
    return 0;
}
