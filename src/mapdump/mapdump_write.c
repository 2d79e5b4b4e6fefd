/* mapdump_write.c -- the .hhmap writer: one record per frame over the public
 * walkers (hh_heap_walk, hh_defrag_journal, hh_binned_walk, hh_memstack_walk;
 * for a virtual heap hh_vheap_walk and hh_vdefrag_journal instead of the first two).
 *
 * A frame is encoded whole into a growable buffer, then written with one
 * fwrite and flushed, so a crash leaves at most a partial last record, which
 * the reader reports as truncation. The metrics (holes, largest hole, the
 * sum-of-squares fragmentation, compaction debt) are computed here in the same
 * pass over the blocks that encodes them.
 *
 * Invariants:
 *   W1  buf[0 .. len) is the record being built; nothing reaches the file
 *       before the record is complete.
 *   W2  once a write fails (io_failed), no later record is written; close
 *       reports the first failure.
 */
#include "mapdump_internal.h"

#include "../common/hh_bytes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/hh_error.h"
#include "../common/hh_frag.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
struct hh_mapdump_writer {
    FILE          *f;                              /* the open dump file */
    const hh_heap *heap;                           /* heap recorded every frame, or NULL and ... */
    const hh_vheap *vheap;                         /* ... the virtual heap recorded instead */
    uint32_t       flags;                          /* hh_mapdump_flags */
    uint32_t       stack_count;                    /* entries of stacks[] in use */
    hh_memstack   *stacks[HH_MAPDUMP_MAX_STACKS];  /* mark stacks recorded every frame */
    uint8_t       *buf;                            /* record under construction (W1) */
    size_t         len, cap;                       /* bytes used / allocated in buf */
    bool           oom;                            /* a buffer growth failed in this record */
    bool           io_failed;                      /* a write failed (W2) */
    uint64_t       frames;                         /* frame records written */
    uint64_t       bytes;                          /* bytes written to the file */
    uint64_t      *moved;                          /* sorted handle ids of the journal */
    size_t         moved_cap;                      /* entries allocated in moved */
};

/* State of the pass over the blocks (walk callback). */
typedef struct walk_state {
    hh_mapdump_writer *w;
    const uint64_t    *moved;                      /* sorted journal handle ids */
    size_t             moved_count;
    uint64_t           prev_end;                   /* end offset of the previous block */
    uint64_t           count;                      /* blocks encoded */
    hh_mapdump_metrics m;                          /* metrics being summed */
    double             sum_sq;                     /* sum of free_i^2 */
    bool               last_free;                  /* the previous block was free */
    uint64_t           last_free_size;             /* and its size */
    bool               seen_free;                  /* a free block was seen ... */
    uint64_t           first_free;                 /* ... and the offset of the first */
} walk_state;

/* ---------------------------------------------------------------------------
   Record buffer
--------------------------------------------------------------------------- */
/* Makes room for n more bytes; false (and oom set) if growth fails. */
static bool buf_reserve(hh_mapdump_writer *w, size_t n) {
    if (w->oom) return false;
    if (w->cap - w->len >= n) return true;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap - w->len < n) {
        if (cap > SIZE_MAX / 2) { w->oom = true; return false; }
        cap *= 2;
    }
    uint8_t *nb = hhi_meta_alloc(cap);
    if (nb == NULL) { w->oom = true; return false; }
    if (w->len) memcpy(nb, w->buf, w->len);
    hhi_meta_free(w->buf);
    w->buf = nb;
    w->cap = cap;
    return true;
}

static void put_bytes(hh_mapdump_writer *w, const void *p, size_t n) {
    if (n == 0 || !buf_reserve(w, n)) return;       /* memcpy from NULL is undefined even for 0 bytes */
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}
static void put_u8(hh_mapdump_writer *w, uint8_t v) { put_bytes(w, &v, 1); }
static void put_le(hh_mapdump_writer *w, uint64_t v, unsigned bytes) {
    uint8_t b[8];
    put_bytes(w, b, (size_t)(hhi_put_le(b, v, bytes) - b));
}
static void put_u16(hh_mapdump_writer *w, uint16_t v) { put_le(w, v, 2); }
static void put_u32(hh_mapdump_writer *w, uint32_t v) { put_le(w, v, 4); }
static void put_u64(hh_mapdump_writer *w, uint64_t v) { put_le(w, v, 8); }
static void put_varint(hh_mapdump_writer *w, uint64_t v) {
    uint8_t b[HHI_VARINT_MAX];
    put_bytes(w, b, (size_t)(hhi_put_varint(b, v) - b));
}
/* A short string: u8 length (truncated to max - 1 bytes), bytes. */
static void put_str(hh_mapdump_writer *w, const char *s, size_t max) {
    size_t n = s ? strlen(s) : 0;
    if (n > max - 1) n = max - 1;
    put_u8(w, (uint8_t)n);
    put_bytes(w, s, n);
}

/* Opens a section; returns where its length goes (patched by sec_end). */
static size_t sec_begin(hh_mapdump_writer *w, uint8_t id) {
    put_u8(w, id);
    size_t at = w->len;
    put_u32(w, 0);
    return at;
}
static void sec_end(hh_mapdump_writer *w, size_t at) {
    if (w->oom) return;
    md_put32(w->buf + at, (uint32_t)(w->len - at - 4));
}

/* Writes buf[0 .. len) and flushes; reports the first failure (W2). */
static hh_status buf_flush(hh_mapdump_writer *w, const char *what) {
    if (w->io_failed) return HH_E_IO;
    if (fwrite(w->buf, 1, w->len, w->f) != w->len || fflush(w->f) != 0) {
        w->io_failed = true;
        return hhi_error(HH_E_IO, "hh_mapdump: writing the %s failed (disk full or file closed?)", what);
    }
    w->bytes += w->len;
    return HH_OK;
}

/* Starts a record of the given type: header with length and CRC patched by rec_finish. */
static void rec_begin(hh_mapdump_writer *w, const uint8_t type[4]) {
    w->len = 0;
    w->oom = false;
    put_bytes(w, type, 4);
    put_u32(w, 0);
    put_u32(w, 0);
}
static hh_status rec_finish(hh_mapdump_writer *w, const char *what) {
    if (w->oom) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump: no memory for the %s record", what);
    size_t payload = w->len - MD_REC_HEAD_BYTES;
    if (payload > MD_MAX_RECORD) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump: %s record of %zu bytes is too large", what, payload);
    md_put32(w->buf + 4, (uint32_t)payload);
    md_put32(w->buf + 8, md_crc32(w->buf + MD_REC_HEAD_BYTES, payload));
    return buf_flush(w, what);
}

/* ---------------------------------------------------------------------------
   Sections
--------------------------------------------------------------------------- */
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Size of the recorded range: the heap's managed bytes or the virtual heap's size. */
static uint64_t managed_bytes(const hh_mapdump_writer *w) {
    return w->vheap ? hh_vheap_size(w->vheap) : hh_heap_managed_bytes(w->heap);
}

static bool is_moved(const walk_state *s, hh_handle h) {
    size_t lo = 0, hi = s->moved_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->moved[mid] == h.id) return true;
        if (s->moved[mid] < h.id) lo = mid + 1; else hi = mid;
    }
    return false;
}

/* Encodes one block and folds it into the metrics (a free block becomes a hole
   once another block follows it). */
static void walk_block(const hh_block_info *b, void *user) {
    walk_state *s = user;
    hh_mapdump_writer *w = s->w;
    hh_block_info rb;
    if (b->state == HH_VBLOCK_RESERVED) {      /* a virtual heap's pass reservation: used, no handle */
        rb = *b;
        rb.state = HH_BLOCK_LIVE;
        rb.tag = 0;
        b = &rb;
    }
    bool moved = b->state != HH_BLOCK_FREE && !hh_is_null(b->handle) && is_moved(s, b->handle);
    put_u8(w, (uint8_t)((b->state & MD_BLOCK_STATE_MASK) | (moved ? MD_BLOCK_MOVED : 0)));
    put_varint(w, b->offset >= s->prev_end ? b->offset - s->prev_end : 0);
    put_varint(w, b->size);
    if (b->state != HH_BLOCK_FREE) put_varint(w, b->tag);
    s->prev_end = b->offset + b->size;
    s->count++;

    if (s->last_free) {                               /* the previous free block is a hole */
        s->m.holes++;
        s->m.hole_bytes += s->last_free_size;
        if (s->last_free_size > s->m.largest_hole) s->m.largest_hole = s->last_free_size;
    }
    s->last_free = b->state == HH_BLOCK_FREE;
    s->last_free_size = b->size;
    if (b->state == HH_BLOCK_FREE) {
        s->m.free_blocks++;
        s->m.free_bytes += b->size;
        if (b->size > s->m.largest_free) s->m.largest_free = b->size;
        s->sum_sq += (double)b->size * (double)b->size;
        if (!s->seen_free) s->first_free = b->offset;
        s->seen_free = true;
    } else {
        s->m.live_blocks++;
        s->m.used_bytes += b->size;
        s->m.high_water = b->offset + b->size;
        if (b->state == HH_BLOCK_PINNED) s->m.pinned_blocks++;
    }
}

/* The frame's moves: the relocatable heap's journal or the virtual heap's
   last pass, read through one accessor. */
typedef struct md_moves {
    const hh_move_record *rec;
    const hh_vmove       *vrec;
    size_t                n;
} md_moves;
static hh_move_record move_at(const md_moves *m, size_t i) {
    if (m->rec) return m->rec[i];
    const hh_vmove *v = &m->vrec[i];
    return (hh_move_record){ .handle = v->handle, .src_offset = (size_t)v->src_offset,
                             .dst_offset = (size_t)v->dst_offset, .size = (size_t)v->size };
}

/* BLOCKS + METRICS + MOVES sections from the walk and the journal. */
static void write_heap_sections(hh_mapdump_writer *w, const hh_defrag_report *step, hh_mapdump_metrics *out) {
    md_moves mv = {0};
    if (w->vheap) mv.n = hh_vdefrag_journal(w->vheap, &mv.vrec);
    else mv.n = hh_defrag_journal(w->heap, &mv.rec);
    size_t nrec = mv.n;
    if (nrec > w->moved_cap) {
        uint64_t *nm = hhi_meta_alloc(nrec * sizeof *nm);
        if (nm == NULL) { w->oom = true; return; }
        hhi_meta_free(w->moved);
        w->moved = nm;
        w->moved_cap = nrec;
    }
    uint64_t bytes_moved = 0;
    for (size_t i = 0; i < nrec; i++) {
        hh_move_record r = move_at(&mv, i);
        w->moved[i] = r.handle.id;
        bytes_moved += r.size;
    }
    if (nrec > 1) qsort(w->moved, nrec, sizeof *w->moved, cmp_u64);

    uint64_t total_moves, total_bytes_moved;
    if (w->vheap) {
        hh_vheap_stats vs;
        hh_vheap_stats_get(w->vheap, &vs);
        total_moves = vs.total_moves;
        total_bytes_moved = vs.total_bytes_moved;
    } else {
        hh_heap_stats st;
        hh_heap_stats_get(w->heap, &st);
        total_moves = st.total_moves;
        total_bytes_moved = st.total_bytes_moved;
    }

    /* The block count goes first but is known only after the walk: reserve a
       fixed 10-byte varint slot (a padded LEB128 is still valid LEB128). */
    size_t at = sec_begin(w, MD_SEC_BLOCKS);
    size_t count_at = w->len;
    put_bytes(w, (const uint8_t[10]){0}, 10);
    walk_state s = { .w = w, .moved = w->moved, .moved_count = nrec };
    if (w->vheap) hh_vheap_walk(w->vheap, walk_block, &s);
    else hh_heap_walk(w->heap, walk_block, &s);
    if (!w->oom) {
        uint64_t v = s.count;
        for (int i = 0; i < 10; i++) {
            w->buf[count_at + (size_t)i] = (uint8_t)((v & 0x7F) | (i < 9 ? 0x80 : 0));
            v >>= 7;
        }
    }
    sec_end(w, at);

    hh_mapdump_metrics *m = &s.m;
    m->managed_bytes = managed_bytes(w);
    m->fragmentation = hhi_fragmentation(m->largest_free, m->free_bytes);
    m->fragmentation_sq = hhi_fragmentation_sq(s.sum_sq, m->free_bytes);
    m->compaction_debt = hhi_compaction_debt(m->used_bytes, s.first_free, m->holes > 0);   /* the first free block is a hole
                                                                                             unless it is the top */
    m->moves = (uint32_t)nrec;
    m->bytes_moved = bytes_moved;
    m->defrag_ns = step ? step->elapsed_ns : 0;
    m->total_moves = total_moves;
    m->total_bytes_moved = total_bytes_moved;

    at = sec_begin(w, MD_SEC_METRICS);
    const uint64_t f[] = {
        m->managed_bytes, m->used_bytes, m->free_bytes, m->largest_free, m->largest_hole,
        m->hole_bytes, m->compaction_debt, m->high_water, m->live_blocks, m->pinned_blocks,
        m->free_blocks, m->holes, md_f64_bits(m->fragmentation), md_f64_bits(m->fragmentation_sq),
        m->moves, m->bytes_moved, m->defrag_ns, m->total_moves, m->total_bytes_moved,
    };
    _Static_assert(sizeof f == MD_METRICS_V1_BYTES, "metrics layout and MD_METRICS_V1_BYTES disagree");
    for (size_t i = 0; i < HH_ARRAY_LEN(f); i++) put_u64(w, f[i]);
    sec_end(w, at);

    at = sec_begin(w, MD_SEC_MOVES);
    put_varint(w, nrec);
    for (size_t i = 0; i < nrec; i++) {
        hh_move_record r = move_at(&mv, i);
        put_varint(w, r.src_offset);
        put_varint(w, r.dst_offset);
        put_varint(w, r.size);
    }
    sec_end(w, at);
    *out = *m;
}

/* SERVICE: the defrag service's metrics, when it can give them. */
static void write_service_section(hh_mapdump_writer *w) {
    hh_defrag_metrics dm;
    if (hh_defrag_metrics_get(w->heap, &dm) != HH_OK) return;   /* reported by the service; the frame goes on */
    size_t at = sec_begin(w, MD_SEC_SERVICE);
    const uint64_t v[MD_SERVICE_V1_FIELDS] = { dm.frames_to_compact, dm.stuck_holes, dm.stuck_hole_bytes,
                                               dm.blocking_pinned_bytes, dm.decommitted_bytes, dm.compact_steps,
                                               dm.steps, dm.trigger_active ? 1u : 0u };
    for (size_t i = 0; i < MD_SERVICE_V1_FIELDS; i++) put_varint(w, v[i]);
    sec_end(w, at);
}

/* BINNED: one entry per page / large block of hh_binned_walk. */
typedef struct binned_state { hh_mapdump_writer *w; uint64_t count; } binned_state;

static void walk_region(const hh_binned_region *r, void *user) {
    binned_state *s = user;
    hh_mapdump_writer *w = s->w;
    put_u8(w, (uint8_t)r->kind);
    put_u8(w, r->committed ? 1 : 0);
    put_varint(w, (uint64_t)(r->size_class + 1));
    put_varint(w, r->size);
    put_varint(w, r->block_size);
    put_varint(w, r->capacity);
    put_varint(w, r->live);
    put_varint(w, r->cached);
    s->count++;
}

static void write_binned_section(hh_mapdump_writer *w) {
    size_t at = sec_begin(w, MD_SEC_BINNED);
    size_t count_at = w->len;
    put_u32(w, 0);
    binned_state s = { .w = w };
    hh_binned_walk(walk_region, &s);
    if (!w->oom) md_put32(w->buf + count_at, (uint32_t)s.count);
    sec_end(w, at);
}

/* STACKS: summary, chunks and open marks of every followed mark stack. */
static void walk_chunk(const hh_memstack_chunk_info *c, void *user) {
    hh_mapdump_writer *w = user;
    put_u8(w, (uint8_t)c->kind);
    put_u8(w, c->is_top ? 1 : 0);
    put_varint(w, c->size);
    put_varint(w, c->header_bytes);
    put_varint(w, c->used_bytes);
}
static void walk_mark(const hh_memstack_mark_info *m, void *user) {
    hh_mapdump_writer *w = user;
    put_varint(w, m->depth);
    put_varint(w, m->chunk_index == UINT32_MAX ? 0 : (uint64_t)m->chunk_index + 1);
    put_varint(w, m->offset);
}

static void write_stacks_section(hh_mapdump_writer *w) {
    size_t at = sec_begin(w, MD_SEC_STACKS);
    put_u8(w, (uint8_t)w->stack_count);
    for (uint32_t i = 0; i < w->stack_count; i++) {
        hh_memstack_info info = {0};
        hh_memstack_info_get(w->stacks[i], &info);
        put_str(w, info.name, HH_MAPDUMP_NAME_BYTES);
        put_varint(w, info.reserved_bytes);
        put_varint(w, info.used_bytes);
        put_varint(w, info.wasted_bytes);
        put_varint(w, info.free_bytes);
        put_varint(w, info.peak_reserved_bytes);
        put_varint(w, info.alloc_count);
        put_varint(w, info.chunk_count);
        put_varint(w, info.open_marks);
        hh_memstack_walk(w->stacks[i], walk_chunk, w);
        hh_memstack_walk_marks(w->stacks[i], walk_mark, w);
    }
    sec_end(w, at);
}

/* ---------------------------------------------------------------------------
   Public API
--------------------------------------------------------------------------- */
hh_status hh_mapdump_create(const char *path, const hh_mapdump_desc *desc, hh_mapdump_writer **out) {
    if (out) *out = NULL;
    if (path == NULL || desc == NULL || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_create: NULL argument");
    if ((desc->heap == NULL) == (desc->vheap == NULL))
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_create: give exactly one of desc.heap and desc.vheap");
    if (desc->flags & ~(uint32_t)HH_MAPDUMP_BINNED)
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_create: unknown flags 0x%x", (unsigned)desc->flags);
    if (desc->memstack_count > HH_MAPDUMP_MAX_STACKS || (desc->memstack_count && desc->memstacks == NULL))
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_create: memstack_count %u (at most %d, with a memstacks array)",
                         (unsigned)desc->memstack_count, HH_MAPDUMP_MAX_STACKS);
    for (uint32_t i = 0; i < desc->memstack_count; i++)
        if (desc->memstacks[i] == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_create: memstacks[%u] is NULL", (unsigned)i);
    if (desc->tag_name_count > HH_MAPDUMP_MAX_TAGS || (desc->tag_name_count && desc->tag_names == NULL))
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_create: tag_name_count %u (at most %d, with a tag_names array)",
                         (unsigned)desc->tag_name_count, HH_MAPDUMP_MAX_TAGS);

    hh_mapdump_writer *w = hhi_meta_alloc(sizeof *w);
    if (w == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump_create: no memory for the writer");
    w->heap = desc->heap;
    w->vheap = desc->vheap;
    w->flags = desc->flags;
    w->stack_count = desc->memstack_count;
    for (uint32_t i = 0; i < w->stack_count; i++) w->stacks[i] = desc->memstacks[i];

    /* Header: fixed part, then the body (managed bytes, flags, label, tag names). */
    w->len = 0;
    put_bytes(w, md_magic, MD_MAGIC_BYTES);
    put_u16(w, HH_MAPDUMP_VERSION_MAJOR);
    put_u16(w, HH_MAPDUMP_VERSION_MINOR);
    put_u32(w, 0);
    put_u32(w, 0);
    put_u64(w, managed_bytes(w));
    put_u32(w, w->flags | (w->vheap ? (uint32_t)HH_MAPDUMP_VIRTUAL : 0u));
    put_u32(w, w->stack_count);
    put_str(w, desc->label, HH_MAPDUMP_LABEL_BYTES);
    put_u8(w, (uint8_t)desc->tag_name_count);
    for (uint32_t i = 0; i < desc->tag_name_count; i++) put_str(w, desc->tag_names[i], HH_MAPDUMP_NAME_BYTES);
    if (w->oom) {
        hhi_meta_free(w->buf);
        hhi_meta_free(w);
        return hhi_error(HH_E_NO_MEMORY, "hh_mapdump_create: no memory for the header");
    }
    size_t body = w->len - MD_FILE_HEAD_BYTES;
    md_put32(w->buf + 12, (uint32_t)body);
    md_put32(w->buf + 16, md_crc32(w->buf + MD_FILE_HEAD_BYTES, body));

    w->f = fopen(path, "wb");
    if (w->f == NULL) {
        int e = errno;
        hhi_meta_free(w->buf);
        hhi_meta_free(w);
        return hhi_error(HH_E_IO, "hh_mapdump_create: cannot create '%s': %s", path, strerror(e));
    }
    hh_status s = buf_flush(w, "file header");
    if (s != HH_OK) {
        fclose(w->f);
        hhi_meta_free(w->buf);
        hhi_meta_free(w);
        return s;
    }
    *out = w;
    return HH_OK;
}

hh_status hh_mapdump_write_frame(hh_mapdump_writer *w, uint64_t frame, const hh_defrag_report *step) {
    if (w == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_write_frame: writer is NULL");
    if (w->io_failed) return hhi_error(HH_E_IO, "hh_mapdump_write_frame: an earlier write failed; frame %llu dropped",
                                       (unsigned long long)frame);
    rec_begin(w, md_rec_frame);
    size_t at = sec_begin(w, MD_SEC_FRAME);
    put_u64(w, frame);
    put_u64(w, managed_bytes(w));
    sec_end(w, at);
    hh_mapdump_metrics m;
    write_heap_sections(w, step, &m);
    if (w->heap) write_service_section(w);
    if (w->flags & HH_MAPDUMP_BINNED) write_binned_section(w);
    if (w->stack_count) write_stacks_section(w);
    hh_status s = rec_finish(w, "frame");
    if (s == HH_OK) w->frames++;
    return s;
}

hh_status hh_mapdump_close(hh_mapdump_writer *w) {
    if (w == NULL) return HH_OK;
    hh_status s;
    if (w->io_failed) {
        s = hhi_error(HH_E_IO, "hh_mapdump_close: the dump is incomplete: an earlier write failed");
    } else {
        rec_begin(w, md_rec_end);
        put_u64(w, w->frames);
        s = rec_finish(w, "end");
    }
    if (fclose(w->f) != 0 && s == HH_OK) s = hhi_error(HH_E_IO, "hh_mapdump_close: closing the file failed");
    hhi_meta_free(w->moved);
    hhi_meta_free(w->buf);
    hhi_meta_free(w);
    return s;
}

uint64_t hh_mapdump_bytes_written(const hh_mapdump_writer *w) {
    if (w == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_mapdump_bytes_written: writer is NULL");
        return 0;
    }
    return w->bytes;
}
