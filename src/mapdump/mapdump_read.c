/* mapdump_read.c -- the .hhmap reader: header check, then one frame record at
 * a time, every length checked before it is used.
 *
 * The reader never trusts the file: a record's length is checked against a
 * hard limit (and, in memory, against the bytes left) before anything is
 * allocated; its CRC is checked before it is parsed; and the parser itself
 * bounds-checks every field, so even a record with a forged CRC cannot make it
 * read outside the payload. Element counts are checked against the bytes left
 * before arrays are sized (every element takes at least one byte).
 *
 * Invariants:
 *   R1  status != HH_OK is sticky: after the first error every hh_mapdump_next
 *       fails the same way (without a second message).
 *   R2  the arrays of the frame handed out are owned by the reader and grow
 *       only; they stay valid until the next hh_mapdump_next / close.
 */
#include "mapdump_internal.h"

#include "../common/hh_bytes.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "../common/hh_error.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
/* A growable array of elements of one size. */
typedef struct md_array { void *p; size_t cap; } md_array;

struct hh_mapdump_reader {
    FILE                *f;             /* file source, or NULL for memory */
    uint64_t             file_len;      /* size of the file (UINT64_MAX if unknown: a pipe) */
    const uint8_t       *mem;           /* memory source */
    size_t               mem_len, mem_pos;
    uint64_t             pos;           /* byte offset of the next unread byte */
    uint64_t             first_record;  /* offset of the first record (after the header) */
    hh_status            status;        /* sticky error (R1) */
    bool                 at_end;        /* the end record was read */
    uint64_t             frames_read;   /* frame records read since the start */
    uint64_t             frames_written;/* from the end record */
    hh_mapdump_file_info info;
    md_array             payload, blocks, moves, regions, chunks, marks;
    hh_mapdump_stack     stacks[HH_MAPDUMP_MAX_STACKS];
    hh_mapdump_frame     frame;         /* the frame handed out */
};

/* Bounds-checked cursor over one payload. */
typedef hhi_cursor cursor;   /* bounds-checked, sticky errors (hh_bytes.h) */

/* ---------------------------------------------------------------------------
   Source
--------------------------------------------------------------------------- */
/* Reads up to n bytes; returns how many were read (short only at the end). */
static size_t src_read(hh_mapdump_reader *r, void *dst, size_t n) {
    size_t got;
    if (r->f) {
        got = fread(dst, 1, n, r->f);
    } else {
        got = HH_MIN(n, r->mem_len - r->mem_pos);
        if (got) memcpy(dst, r->mem + r->mem_pos, got);
        r->mem_pos += got;
    }
    r->pos += got;
    return got;
}

/* Bytes left in the source (SIZE_MAX if unknown), so that no length read from
   the file makes us allocate more than the file could hold. */
static size_t src_left(const hh_mapdump_reader *r) {
    if (r->f == NULL) return r->mem_len - r->mem_pos;
    if (r->file_len == UINT64_MAX || r->pos > r->file_len) return SIZE_MAX;
    uint64_t left = r->file_len - r->pos;
    return left > SIZE_MAX ? SIZE_MAX : (size_t)left;
}

/* Makes a hold at least n elements of elem bytes. */
static bool array_fit(md_array *a, size_t n, size_t elem) {
    if (n <= a->cap) return true;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < n) cap *= 2;
    if (cap > SIZE_MAX / elem) return false;
    void *p = hhi_meta_alloc(cap * elem);
    if (p == NULL) return false;
    hhi_meta_free(a->p);
    a->p = p;
    a->cap = cap;
    return true;
}

static void reader_free(hh_mapdump_reader *r) {
    if (r->f) fclose(r->f);
    md_array *arrays[] = { &r->payload, &r->blocks, &r->moves, &r->regions, &r->chunks, &r->marks };
    for (size_t i = 0; i < HH_ARRAY_LEN(arrays); i++) hhi_meta_free(arrays[i]->p);
    hhi_meta_free(r);
}

/* Reports err once and makes it sticky (R1). */
static hh_status fail(hh_mapdump_reader *r, hh_status s) {
    r->status = s;
    return s;
}

/* ---------------------------------------------------------------------------
   Cursor
--------------------------------------------------------------------------- */
/* A u8-length string into dst (max bytes, terminated). */
static void cur_str(cursor *c, char *dst, size_t max) {
    size_t n = hhi_get_u8(c);
    if (n > hhi_cur_left(c) || n > max - 1) { c->bad = true; dst[0] = 0; return; }
    memcpy(dst, c->p, n);
    dst[n] = 0;
    c->p += n;
}

/* ---------------------------------------------------------------------------
   Sections (each returns false with a message in *why on a malformed body)
--------------------------------------------------------------------------- */
static bool parse_blocks(hh_mapdump_reader *r, cursor *c, const char **why) {
    uint64_t n = hhi_get_varint(c);
    if (c->bad || n > hhi_cur_left(c) / 3) { *why = "block count exceeds the section"; return false; }  /* >= 3 bytes each */
    if (!array_fit(&r->blocks, (size_t)n, sizeof(hh_mapdump_block))) { *why = NULL; return false; }
    hh_mapdump_block *b = r->blocks.p;
    uint64_t end = 0, managed = r->frame.managed_bytes;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t fl = hhi_get_u8(c);
        uint64_t gap = hhi_get_varint(c), size = hhi_get_varint(c);
        int state = fl & MD_BLOCK_STATE_MASK;
        uint32_t tag = state == HH_BLOCK_FREE ? 0 : hhi_get_varint32(c);
        if (c->bad) { *why = "block list cut short"; return false; }
        if ((fl & ~(MD_BLOCK_STATE_MASK | MD_BLOCK_MOVED)) || state > HH_BLOCK_PINNED ||
            (state == HH_BLOCK_FREE && (fl & MD_BLOCK_MOVED))) { *why = "bad block flags"; return false; }
        if (size == 0 || gap > managed - end || size > managed - end - gap) {
            *why = "block outside the managed range";
            return false;
        }
        b[i] = (hh_mapdump_block){ .offset = end + gap, .size = size, .tag = tag, .state = (uint8_t)state,
                                   .moved = (fl & MD_BLOCK_MOVED) != 0 };
        end += gap + size;
    }
    r->frame.blocks = b;
    r->frame.block_count = (size_t)n;
    return true;
}

static bool parse_metrics(hh_mapdump_reader *r, cursor *c, const char **why) {
    if (hhi_cur_left(c) < MD_METRICS_V1_BYTES) { *why = "metrics section too short"; return false; }
    hh_mapdump_metrics *m = &r->frame.metrics;
    m->managed_bytes = hhi_get_u64(c);
    m->used_bytes = hhi_get_u64(c);
    m->free_bytes = hhi_get_u64(c);
    m->largest_free = hhi_get_u64(c);
    m->largest_hole = hhi_get_u64(c);
    m->hole_bytes = hhi_get_u64(c);
    m->compaction_debt = hhi_get_u64(c);
    m->high_water = hhi_get_u64(c);
    uint64_t counts[4];
    for (int i = 0; i < 4; i++) {
        counts[i] = hhi_get_u64(c);
        if (counts[i] > UINT32_MAX) { *why = "block count in metrics out of range"; return false; }
    }
    m->live_blocks = (uint32_t)counts[0];
    m->pinned_blocks = (uint32_t)counts[1];
    m->free_blocks = (uint32_t)counts[2];
    m->holes = (uint32_t)counts[3];
    m->fragmentation = md_bits_f64(hhi_get_u64(c));
    m->fragmentation_sq = md_bits_f64(hhi_get_u64(c));
    uint64_t moves = hhi_get_u64(c);
    if (moves > UINT32_MAX) { *why = "move count in metrics out of range"; return false; }
    m->moves = (uint32_t)moves;
    m->bytes_moved = hhi_get_u64(c);
    m->defrag_ns = hhi_get_u64(c);
    m->total_moves = hhi_get_u64(c);
    m->total_bytes_moved = hhi_get_u64(c);
    if (!(m->fragmentation >= 0.0 && m->fragmentation <= 1.0) || !(m->fragmentation_sq >= 0.0 && m->fragmentation_sq <= 1.0)) {
        *why = "fragmentation outside [0, 1]";
        return false;
    }
    return true;
}

static bool parse_moves(hh_mapdump_reader *r, cursor *c, const char **why) {
    uint64_t n = hhi_get_varint(c);
    if (c->bad || n > hhi_cur_left(c) / 3) { *why = "move count exceeds the section"; return false; }
    if (!array_fit(&r->moves, (size_t)n, sizeof(hh_mapdump_move))) { *why = NULL; return false; }
    hh_mapdump_move *mv = r->moves.p;
    for (uint64_t i = 0; i < n; i++) {
        mv[i].src_offset = hhi_get_varint(c);
        mv[i].dst_offset = hhi_get_varint(c);
        mv[i].size = hhi_get_varint(c);
    }
    if (c->bad) { *why = "move list cut short"; return false; }
    r->frame.moves = mv;
    r->frame.move_count = (size_t)n;
    return true;
}

static bool parse_service(hh_mapdump_reader *r, cursor *c, const char **why) {
    uint64_t v[MD_SERVICE_V1_FIELDS];
    for (size_t i = 0; i < MD_SERVICE_V1_FIELDS; i++) v[i] = hhi_get_varint(c);
    if (c->bad || v[7] > 1) { *why = "bad defrag-service section"; return false; }
    r->frame.service = (hh_mapdump_service){ .frames_to_compact = v[0], .stuck_holes = v[1], .stuck_hole_bytes = v[2],
                                             .blocking_pinned_bytes = v[3], .decommitted_bytes = v[4],
                                             .compact_steps = v[5], .steps = v[6], .trigger_active = v[7] != 0 };
    r->frame.has_service = true;
    return true;
}

static bool parse_binned(hh_mapdump_reader *r, cursor *c, const char **why) {
    uint32_t n = hhi_get_u32(c);
    if (c->bad || n > hhi_cur_left(c) / 8) { *why = "region count exceeds the section"; return false; }  /* >= 8 bytes each */
    if (!array_fit(&r->regions, n, sizeof(hh_mapdump_region))) { *why = NULL; return false; }
    hh_mapdump_region *g = r->regions.p;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t kind = hhi_get_u8(c), committed = hhi_get_u8(c);
        uint64_t cls = hhi_get_varint(c);
        g[i].size = hhi_get_varint(c);
        g[i].block_size = hhi_get_varint32(c);
        g[i].capacity = hhi_get_varint32(c);
        g[i].live = hhi_get_varint32(c);
        g[i].cached = hhi_get_varint32(c);
        if (c->bad) { *why = "region list cut short"; return false; }
        if (kind > HH_BINNED_REGION_LARGE || committed > 1 || cls > HH_BINNED_CLASS_COUNT ||
            (kind == HH_BINNED_REGION_CLASS && cls == 0)) { *why = "bad region"; return false; }
        g[i].kind = kind;
        g[i].committed = committed != 0;
        g[i].size_class = (int16_t)((int)cls - 1);
    }
    r->frame.has_binned = true;
    r->frame.regions = g;
    r->frame.region_count = n;
    return true;
}

static bool parse_stacks(hh_mapdump_reader *r, cursor *c, const char **why) {
    uint32_t n = hhi_get_u8(c);
    if (c->bad || n > HH_MAPDUMP_MAX_STACKS) { *why = "too many mark stacks"; return false; }
    /* First pass: the headers, to size the chunk and mark arrays. */
    cursor start = *c;
    size_t nchunks = 0, nmarks = 0;
    for (int pass = 0; pass < 2; pass++) {
        *c = start;
        size_t ci = 0, mi = 0;
        for (uint32_t i = 0; i < n; i++) {
            hh_mapdump_stack *s = &r->stacks[i];
            cur_str(c, s->name, sizeof s->name);
            s->reserved_bytes = hhi_get_varint(c);
            s->used_bytes = hhi_get_varint(c);
            s->wasted_bytes = hhi_get_varint(c);
            s->free_bytes = hhi_get_varint(c);
            s->peak_reserved_bytes = hhi_get_varint(c);
            s->alloc_count = hhi_get_varint(c);
            s->chunk_count = hhi_get_varint32(c);
            s->mark_count = hhi_get_varint32(c);
            if (c->bad || s->chunk_count > hhi_cur_left(c) / 5 || s->mark_count > hhi_cur_left(c) / 3) {
                *why = "mark-stack section cut short";
                return false;
            }
            hh_mapdump_chunk *ch = pass ? (hh_mapdump_chunk *)r->chunks.p + ci : NULL;
            for (uint32_t k = 0; k < s->chunk_count; k++) {
                uint8_t kind = hhi_get_u8(c), top = hhi_get_u8(c);
                uint64_t size = hhi_get_varint(c), head = hhi_get_varint(c), used = hhi_get_varint(c);
                if (c->bad || kind > HH_LCHUNK_OVERSIZE || top > 1) { *why = "bad mark-stack chunk"; return false; }
                if (ch) ch[k] = (hh_mapdump_chunk){ .size = size, .header_bytes = head, .used_bytes = used,
                                                    .kind = kind, .is_top = top != 0 };
            }
            hh_mapdump_mark *mk = pass ? (hh_mapdump_mark *)r->marks.p + mi : NULL;
            for (uint32_t k = 0; k < s->mark_count; k++) {
                uint32_t depth = hhi_get_varint32(c), chunk = hhi_get_varint32(c);
                uint64_t off = hhi_get_varint(c);
                if (c->bad || chunk > s->chunk_count) { *why = "bad mark"; return false; }
                if (mk) mk[k] = (hh_mapdump_mark){ .depth = depth, .chunk_index = chunk ? chunk - 1 : UINT32_MAX, .offset = off };
            }
            s->chunks = pass ? ch : NULL;
            s->marks = pass ? mk : NULL;
            ci += s->chunk_count;
            mi += s->mark_count;
        }
        if (pass == 0) {
            nchunks = ci;
            nmarks = mi;
            if (!array_fit(&r->chunks, nchunks ? nchunks : 1, sizeof(hh_mapdump_chunk)) ||
                !array_fit(&r->marks, nmarks ? nmarks : 1, sizeof(hh_mapdump_mark))) { *why = NULL; return false; }
        }
    }
    r->frame.stacks = r->stacks;
    r->frame.stack_count = n;
    return true;
}

/* Parses a frame payload into r->frame. HH_OK, HH_E_CORRUPT or HH_E_NO_MEMORY (reported). */
static hh_status parse_frame(hh_mapdump_reader *r, const uint8_t *p, size_t n, uint64_t rec_at) {
    memset(&r->frame, 0, sizeof r->frame);
    cursor c = { p, p + n, false };
    unsigned seen = 0;
    while (hhi_cur_left(&c) > 0) {
        uint64_t sec_at = rec_at + MD_REC_HEAD_BYTES + (uint64_t)(c.p - p);
        uint8_t id = hhi_get_u8(&c);
        uint32_t len = hhi_get_u32(&c);
        if (c.bad || len > hhi_cur_left(&c))
            return hhi_error(HH_E_CORRUPT, "hh_mapdump: section header at byte %llu runs past its record",
                             (unsigned long long)sec_at);
        cursor s = { c.p, c.p + len, false };
        c.p += len;
        if (id >= 1 && id <= MD_SEC_SERVICE) {
            if (seen & (1u << id))
                return hhi_error(HH_E_CORRUPT, "hh_mapdump: section %u repeated at byte %llu", id, (unsigned long long)sec_at);
            seen |= 1u << id;
        }
        /* The frame section must come first: the block parser needs managed_bytes. */
        if (id != MD_SEC_FRAME && !(seen & (1u << MD_SEC_FRAME)))
            return hhi_error(HH_E_CORRUPT, "hh_mapdump: frame record at byte %llu does not start with its frame section",
                             (unsigned long long)rec_at);
        const char *why = "";
        bool ok = true;
        switch (id) {
        case MD_SEC_FRAME:
            r->frame.frame = hhi_get_u64(&s);
            r->frame.managed_bytes = hhi_get_u64(&s);
            if (s.bad) { ok = false; why = "frame section too short"; }
            break;
        case MD_SEC_METRICS: ok = parse_metrics(r, &s, &why); break;
        case MD_SEC_BLOCKS:  ok = parse_blocks(r, &s, &why); break;
        case MD_SEC_MOVES:   ok = parse_moves(r, &s, &why); break;
        case MD_SEC_BINNED:  ok = parse_binned(r, &s, &why); break;
        case MD_SEC_STACKS:  ok = parse_stacks(r, &s, &why); break;
        case MD_SEC_SERVICE: ok = parse_service(r, &s, &why); break;
        default: break;      /* a section of a later minor version (F4) */
        }
        if (!ok) {
            if (why == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump: no memory for section %u of frame at byte %llu",
                                              id, (unsigned long long)rec_at);
            return hhi_error(HH_E_CORRUPT, "hh_mapdump: %s (section %u at byte %llu)", why, id, (unsigned long long)sec_at);
        }
    }
    unsigned need = 1u << MD_SEC_FRAME | 1u << MD_SEC_METRICS | 1u << MD_SEC_BLOCKS;
    if ((seen & need) != need)
        return hhi_error(HH_E_CORRUPT, "hh_mapdump: frame record at byte %llu lacks a required section",
                         (unsigned long long)rec_at);
    return HH_OK;
}

/* Reads and checks the file header. */
static hh_status read_header(hh_mapdump_reader *r) {
    uint8_t h[MD_FILE_HEAD_BYTES];
    size_t got = src_read(r, h, sizeof h);
    if (got < MD_MAGIC_BYTES || memcmp(h, md_magic, MD_MAGIC_BYTES) != 0)
        return hhi_error(HH_E_IO, "hh_mapdump: not a .hhmap file (bad magic)");
    if (got < sizeof h) return hhi_error(HH_E_CORRUPT, "hh_mapdump: truncated file header (%zu of %d bytes)", got, MD_FILE_HEAD_BYTES);
    r->info.version_major = md_get16(h + 8);
    r->info.version_minor = md_get16(h + 10);
    if (r->info.version_major != HH_MAPDUMP_VERSION_MAJOR)
        return hhi_error(HH_E_IO, "hh_mapdump: file format version %u.%u, this reader reads version %d.x",
                         (unsigned)r->info.version_major, (unsigned)r->info.version_minor, HH_MAPDUMP_VERSION_MAJOR);
    uint32_t body = md_get32(h + 12), crc = md_get32(h + 16);
    if (body > MD_MAX_HEADER_BODY || body > src_left(r))
        return hhi_error(HH_E_CORRUPT, "hh_mapdump: header body length %u is impossible", (unsigned)body);
    if (!array_fit(&r->payload, body ? body : 1, 1)) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump: no memory for the header");
    if (src_read(r, r->payload.p, body) != body) return hhi_error(HH_E_CORRUPT, "hh_mapdump: truncated file header");
    if (md_crc32(r->payload.p, body) != crc) return hhi_error(HH_E_CORRUPT, "hh_mapdump: file header checksum mismatch");
    cursor c = { r->payload.p, (const uint8_t *)r->payload.p + body, false };
    r->info.managed_bytes = hhi_get_u64(&c);
    r->info.flags = hhi_get_u32(&c);                        /* writer flags */
    (void)hhi_get_u32(&c);                                  /* stacks followed */
    cur_str(&c, r->info.label, sizeof r->info.label);
    r->info.tag_name_count = hhi_get_u8(&c);
    if (r->info.tag_name_count > HH_MAPDUMP_MAX_TAGS) c.bad = true;
    for (uint32_t i = 0; i < r->info.tag_name_count && !c.bad; i++) cur_str(&c, r->info.tag_names[i], HH_MAPDUMP_NAME_BYTES);
    if (c.bad) return hhi_error(HH_E_CORRUPT, "hh_mapdump: malformed file header body");
    r->first_record = r->pos;
    return HH_OK;
}

static hh_status reader_start(hh_mapdump_reader *r, hh_mapdump_reader **out) {
    hh_status s = read_header(r);
    if (s != HH_OK) {
        reader_free(r);
        return s;
    }
    *out = r;
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Public API
--------------------------------------------------------------------------- */
hh_status hh_mapdump_open(const char *path, hh_mapdump_reader **out) {
    if (out) *out = NULL;
    if (path == NULL || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_open: %s is NULL", out == NULL ? "out" : "path");
    hh_mapdump_reader *r = hhi_meta_alloc(sizeof *r);
    if (r == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump_open: no memory for the reader");
    r->f = fopen(path, "rb");
    if (r->f == NULL) {
        int e = errno;
        hhi_meta_free(r);
        return hhi_error(HH_E_IO, "hh_mapdump_open: cannot open '%s': %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fileno(r->f), &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fclose(r->f);
        hhi_meta_free(r);
        return hhi_error(HH_E_IO, "hh_mapdump_open: '%s' is %s, not a .hhmap file", path,
                         S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    }
    long end = -1;
    if (fseek(r->f, 0, SEEK_END) == 0) end = ftell(r->f);
    r->file_len = end >= 0 ? (uint64_t)end : UINT64_MAX;
    if (fseek(r->f, 0, SEEK_SET) != 0) r->file_len = UINT64_MAX;
    return reader_start(r, out);
}

hh_status hh_mapdump_open_memory(const void *data, size_t bytes, hh_mapdump_reader **out) {
    if (out) *out = NULL;
    if ((data == NULL && bytes) || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_open_memory: %s is NULL", out == NULL ? "out" : "data");
    hh_mapdump_reader *r = hhi_meta_alloc(sizeof *r);
    if (r == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_mapdump_open_memory: no memory for the reader");
    r->mem = data;
    r->mem_len = bytes;
    return reader_start(r, out);
}

hh_status hh_mapdump_info(const hh_mapdump_reader *r, hh_mapdump_file_info *out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_info: out is NULL");
    if (r == NULL) {
        memset(out, 0, sizeof *out);   /* the caller may read it without checking the status */
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_info: reader is NULL");
    }
    *out = r->info;
    return HH_OK;
}

hh_status hh_mapdump_next(hh_mapdump_reader *r, const hh_mapdump_frame **out) {
    if (out) *out = NULL;
    if (r == NULL || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_next: %s is NULL", r == NULL ? "reader" : "out");
    if (r->status != HH_OK) return r->status;   /* R1: already reported once */
    if (r->at_end) return HH_OK;

    uint64_t at = r->pos;
    uint8_t h[MD_REC_HEAD_BYTES];
    size_t got = src_read(r, h, sizeof h);
    if (got < sizeof h)
        return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: truncated after %llu frames at byte %llu (no end record: "
                                 "the writer stopped early)", (unsigned long long)r->frames_read, (unsigned long long)at));
    uint32_t len = md_get32(h + 4), crc = md_get32(h + 8);
    bool is_frame = memcmp(h, md_rec_frame, 4) == 0, is_end = memcmp(h, md_rec_end, 4) == 0;
    if (!is_frame && !is_end)
        return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: unknown record type at byte %llu", (unsigned long long)at));
    if (len > MD_MAX_RECORD || (is_end && len < 8))
        return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: impossible record length %u at byte %llu",
                                 (unsigned)len, (unsigned long long)at));
    if (len > src_left(r))
        return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: record at byte %llu is truncated (%u bytes announced, %zu left)",
                                 (unsigned long long)at, (unsigned)len, src_left(r)));
    if (!array_fit(&r->payload, len ? len : 1, 1))
        return fail(r, hhi_error(HH_E_NO_MEMORY, "hh_mapdump: no memory for a record of %u bytes", (unsigned)len));
    if (src_read(r, r->payload.p, len) != len)
        return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: record at byte %llu is truncated", (unsigned long long)at));
    if (md_crc32(r->payload.p, len) != crc)
        return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: checksum mismatch in the record at byte %llu", (unsigned long long)at));

    if (is_end) {
        cursor c = { r->payload.p, (const uint8_t *)r->payload.p + len, false };
        r->frames_written = hhi_get_u64(&c);
        if (r->frames_written != r->frames_read)
            return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: end record counts %llu frames, the file holds %llu",
                                     (unsigned long long)r->frames_written, (unsigned long long)r->frames_read));
        uint8_t extra;
        if (src_read(r, &extra, 1) != 0)
            return fail(r, hhi_error(HH_E_CORRUPT, "hh_mapdump: data after the end record at byte %llu",
                                     (unsigned long long)(r->pos - 1)));
        r->at_end = true;
        return HH_OK;
    }
    hh_status s = parse_frame(r, r->payload.p, len, at);
    if (s != HH_OK) return fail(r, s);
    r->frames_read++;
    *out = &r->frame;
    return HH_OK;
}

hh_status hh_mapdump_rewind(hh_mapdump_reader *r) {
    if (r == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_mapdump_rewind: reader is NULL");
    if (r->f) {
        if (fseek(r->f, (long)r->first_record, SEEK_SET) != 0)
            return fail(r, hhi_error(HH_E_IO, "hh_mapdump_rewind: cannot seek"));
    } else {
        r->mem_pos = (size_t)r->first_record;
    }
    r->pos = r->first_record;
    r->status = HH_OK;
    r->at_end = false;
    r->frames_read = 0;
    return HH_OK;
}

uint64_t hh_mapdump_frames_written(const hh_mapdump_reader *r) {
    if (r == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_mapdump_frames_written: reader is NULL");
        return 0;
    }
    return r->frames_written;
}

void hh_mapdump_reader_close(hh_mapdump_reader *r) {
    if (r) reader_free(r);
}

const char *hh_mapdump_state_str(int state) {
    switch (state) {
    case HH_BLOCK_FREE: return "free";
    case HH_BLOCK_LIVE: return "live";
    case HH_BLOCK_PINNED: return "pinned";
    }
    return "unknown";
}
