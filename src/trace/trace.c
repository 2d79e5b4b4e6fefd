/* trace.c -- hh_trace: a recorder on the heap's event hook, the trace reader and
 * the replayer (include/hheap/trace.h documents the file format).
 *
 * Recorder: every event is encoded into a 64 KiB buffer (kind byte + varints)
 * and the buffer goes to the file with one fwrite when it is nearly full, so
 * the hook costs a few dozen instructions per operation. A running FNV-1a hash
 * over every byte written becomes the trailing checksum.
 *
 * Reader: the whole file is read into memory, the checksum checked first (it
 * catches truncation and bit flips), then the records are decoded twice: once
 * to count and validate them, once to fill the event array.
 *
 * Replay: recorded handle -> new handle through a map indexed by the recorded
 * handle's slot index (the map entry also keeps the recorded id, so a handle
 * that was never allocated, or already freed, is caught).
 *
 * Invariants
 *   T1  a trace file is header, events, end record, checksum -- nothing else.
 *   T2  the hook is installed exactly while the hh_trace is open.
 *   T3  summary moves/bytes_moved count from the open (the heap's totals at open
 *       are subtracted), so a replay on a fresh heap compares equal.
 *   T4  replay map: map[idx].rec == recorded id <=> the recorded handle is live.
 */
#include "hheap/trace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/hh_bytes.h"
#include "../common/hh_error.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Constants
--------------------------------------------------------------------------- */
enum {
    TRACE_BUF_BYTES    = 64 * 1024,  /* write buffer */
    TRACE_EVENT_MAX    = 64,         /* upper bound of one encoded record (6 varints + kind) */
    TRACE_HEADER_BYTES = 96,
    TRACE_END          = 0xFF,       /* kind byte of the end record */
    TRACE_ALIGN_PAGE   = 4096,
};
static const char trace_magic[8] = { 'H', 'H', 'T', 'R', 'A', 'C', 'E', 0 };
static const uint64_t fnv_offset = 0xcbf29ce484222325ull, fnv_prime = 0x100000001b3ull;

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
struct hh_trace {
    hh_heap  *heap;                /* traced heap (hook installed on it) */
    FILE     *file;                /* open for writing */
    uint64_t  hash;                /* FNV-1a of every byte flushed so far */
    uint64_t  events;              /* events recorded */
    uint64_t  moves0, bytes0;      /* heap totals at open (T3) */
    size_t    len;                 /* bytes used in buf */
    bool      io_error;            /* a write failed: later events are dropped */
    hh_defrag_policy policy;       /* policy last recorded */
    uint8_t   buf[TRACE_BUF_BYTES];
};

typedef hhi_cursor cursor;         /* reader position in a loaded file (hh_bytes.h) */

typedef struct replay_slot {       /* T4 */
    uint64_t  rec;                 /* recorded handle id, 0: none */
    hh_handle now;                 /* its handle in the replayed heap */
} replay_slot;

/* ---------------------------------------------------------------------------
   Encoding helpers
--------------------------------------------------------------------------- */
static uint64_t fnv_bytes(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * fnv_prime;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xFF)) * fnv_prime;
    return h;
}

static uint8_t *put_f64(uint8_t *p, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return hhi_put_le(p, bits, 8);
}

/* ---------------------------------------------------------------------------
   Recorder
--------------------------------------------------------------------------- */
/* Writes the buffer out (hash first). A failed write sets io_error for close. */
static void trace_flush(hh_trace *t) {
    if (t->len == 0) return;
    t->hash = fnv_bytes(t->hash, t->buf, t->len);
    if (!t->io_error && fwrite(t->buf, 1, t->len, t->file) != t->len) t->io_error = true;
    t->len = 0;
}

/* The event hook: one record per event (heap lock held by the caller). */
static void trace_hook(const hh_heap_event *e, void *user) {
    hh_trace *t = user;
    if (e->kind == HH_EV_MOVE) return;             /* a step's outcome, not an input: the replay makes it again */
    if (t->len + 2 * TRACE_EVENT_MAX > sizeof t->buf) trace_flush(t);
    uint8_t *p = t->buf + t->len;
    /* hh_defrag_set_policy has no event: a change shows up before the next one.
       The policy is a plain field read (no lock), safe from inside the hook. */
    hh_defrag_policy pol = hh_defrag_get_policy(t->heap);
    if (pol != t->policy) {
        *p++ = HH_TRACE_EV_POLICY;
        p = hhi_put_varint(p, (uint64_t)pol);
        t->policy = pol;
        t->events++;
    }
    *p++ = (uint8_t)e->kind;
    switch (e->kind) {
    case HH_EV_ALLOC:
        p = hhi_put_varint(p, e->handle.id);
        p = hhi_put_varint(p, e->size);
        p = hhi_put_varint(p, e->align);
        p = hhi_put_varint(p, e->tag);
        break;
    case HH_EV_RESIZE:
        p = hhi_put_varint(p, e->handle.id);
        p = hhi_put_varint(p, e->size);
        break;
    case HH_EV_FREE:
    case HH_EV_PIN:
    case HH_EV_UNPIN:
        p = hhi_put_varint(p, e->handle.id);
        break;
    case HH_EV_DEFRAG_STEP:
        p = hhi_put_varint(p, (uint64_t)pol);
        p = hhi_put_varint(p, e->max_moves);
        p = hhi_put_varint(p, e->moves);
        p = hhi_put_varint(p, e->max_bytes);
        p = hhi_put_varint(p, e->max_ns);
        break;
    case HH_EV_DEFRAG_FULL:
        p = hhi_put_varint(p, (uint64_t)pol);
        p = hhi_put_varint(p, e->moves);
        break;
    default:
        p--;                       /* an event kind this version does not know: dropped */
        t->len = (size_t)(p - t->buf);
        return;
    }
    t->len = (size_t)(p - t->buf);
    t->events++;
}

/* ---------------------------------------------------------------------------
   Summary
--------------------------------------------------------------------------- */
typedef struct walk_acc { uint64_t blocks, hash; } walk_acc;

static void summary_walk(const hh_block_info *b, void *user) {
    walk_acc *a = user;
    a->blocks++;
    a->hash = fnv_u64(a->hash, b->offset);
    a->hash = fnv_u64(a->hash, b->size);
    a->hash = fnv_u64(a->hash, (uint64_t)b->state);
    a->hash = fnv_u64(a->hash, b->tag);
}

/* ---------------------------------------------------------------------------
   Reader
--------------------------------------------------------------------------- */
/* Decodes the events after the header; stores them if out != NULL. Returns the
   number of events, or -1 with *why set. Leaves c after the end byte. */
static long long decode_events(cursor *c, hh_trace_event *out, size_t cap, const char **why) {
    size_t n = 0;
    for (;;) {
        if (c->p >= c->end) {
            *why = "no end record";
            return -1;
        }
        uint8_t kind = *c->p++;
        if (kind == TRACE_END) return (long long)n;
        hh_trace_event ev;
        memset(&ev, 0, sizeof ev);
        ev.ev.kind = (hh_heap_event_kind)kind;
        switch (kind) {
        case HH_EV_ALLOC:
            ev.ev.handle.id = hhi_get_varint(c);
            ev.ev.size = (size_t)hhi_get_varint(c);
            ev.ev.align = (size_t)hhi_get_varint(c);
            ev.ev.tag = (uint32_t)hhi_get_varint(c);
            break;
        case HH_EV_RESIZE:
            ev.ev.handle.id = hhi_get_varint(c);
            ev.ev.size = (size_t)hhi_get_varint(c);
            break;
        case HH_EV_FREE:
        case HH_EV_PIN:
        case HH_EV_UNPIN:
            ev.ev.handle.id = hhi_get_varint(c);
            break;
        case HH_TRACE_EV_POLICY:
        case HH_EV_DEFRAG_FULL:
        case HH_EV_DEFRAG_STEP: {
            uint64_t pol = hhi_get_varint(c);
            if (pol > HH_DEFRAG_FILL) {
                *why = "unknown defrag policy";
                return -1;
            }
            ev.policy = (hh_defrag_policy)pol;
            if (kind == HH_TRACE_EV_POLICY) break;
            if (kind == HH_EV_DEFRAG_FULL) {
                ev.ev.moves = (uint32_t)hhi_get_varint(c);
                break;
            }
            ev.ev.max_moves = (uint32_t)hhi_get_varint(c);
            ev.ev.moves = (uint32_t)hhi_get_varint(c);
            ev.ev.max_bytes = (size_t)hhi_get_varint(c);
            ev.ev.max_ns = hhi_get_varint(c);
            break;
        }
        default:
            *why = "unknown event kind";
            return -1;
        }
        if (c->bad) {
            *why = "record cut short";
            return -1;
        }
        if (kind != HH_EV_DEFRAG_STEP && kind != HH_EV_DEFRAG_FULL && kind != HH_TRACE_EV_POLICY && ev.ev.handle.id == 0) {
            *why = "null handle in a record";
            return -1;
        }
        if (out) {
            if (n >= cap) {
                *why = "event count changed";
                return -1;
            }
            out[n] = ev;
        }
        n++;
    }
}

/* Reads the whole file into metadata memory. */
static hh_status read_file(const char *path, uint8_t **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return hhi_error(HH_E_IO, "hh_trace_load: cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fclose(f);
        return hhi_error(HH_E_IO, "hh_trace_load: %s is %s, not a trace file", path,
                         S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    }
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return hhi_error(HH_E_IO, "hh_trace_load: cannot read %s", path);
    }
    uint8_t *buf = hhi_meta_alloc((size_t)size + 1);
    if (buf == NULL) {
        fclose(f);
        return hhi_error(HH_E_NO_MEMORY, "hh_trace_load: no memory for %ld bytes of %s", size, path);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    bool err = ferror(f) != 0;
    fclose(f);
    if (err || got != (size_t)size) {
        hhi_meta_free(buf);
        return hhi_error(HH_E_IO, "hh_trace_load: read error on %s", path);
    }
    *data = buf;
    *len = (size_t)size;
    return HH_OK;
}

/* Parses a checked file image into log (events allocated here). */
static hh_status parse_trace(const char *path, const uint8_t *data, size_t len, hh_trace_log *log) {
    if (len < TRACE_HEADER_BYTES || memcmp(data, trace_magic, sizeof trace_magic) != 0)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s is not an hheap trace", path);
    cursor c = { data + sizeof trace_magic, data + len - 8, false };
    hh_trace_info *in = &log->info;
    in->version = (uint32_t)hhi_get_le(&c, 4);
    if (in->version != HH_TRACE_VERSION)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s has trace version %u, this library reads %d", path,
                         in->version, HH_TRACE_VERSION);
    if (len < TRACE_HEADER_BYTES + 1 + 8)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s is truncated (%zu bytes)", path, len);
    uint64_t stored = 0;
    for (int i = 0; i < 8; i++) stored |= (uint64_t)data[len - 8 + (size_t)i] << (8 * i);
    if (fnv_bytes(fnv_offset, data, len - 8) != stored)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: checksum mismatch (truncated or altered)", path);
    in->capacity = (size_t)hhi_get_le(&c, 8);
    in->managed_bytes = (size_t)hhi_get_le(&c, 8);
    in->max_handles = (uint32_t)hhi_get_le(&c, 4);
    in->flags = (uint32_t)hhi_get_le(&c, 4);
    uint32_t pol = (uint32_t)hhi_get_le(&c, 4);
    in->base_misalign = (uint32_t)hhi_get_le(&c, 4);
    in->caller_memory = hhi_get_le(&c, 4) != 0;
    uint32_t bits = (uint32_t)hhi_get_le(&c, 4);
    in->defrag.deterministic = bits & 1;
    in->defrag.trigger = (bits >> 1) & 1;
    in->defrag.no_decommit = (bits >> 2) & 1;
    uint64_t f = hhi_get_le(&c, 8);
    memcpy(&in->defrag.trigger_start_fragmentation, &f, sizeof f);
    in->defrag.trigger_start_wasted_bytes = (size_t)hhi_get_le(&c, 8);
    f = hhi_get_le(&c, 8);
    memcpy(&in->defrag.trigger_stop_fragmentation, &f, sizeof f);
    in->defrag.decommit_retain_bytes = (size_t)hhi_get_le(&c, 8);
    in->defrag.decommit_min_bytes = (size_t)hhi_get_le(&c, 8);
    (void)hhi_get_le(&c, 4);
    if (pol > HH_DEFRAG_FILL || in->base_misalign >= TRACE_ALIGN_PAGE || in->capacity == 0)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: bad header", path);
    in->policy = (hh_defrag_policy)pol;

    const char *why = NULL;
    cursor first = c;
    long long n = decode_events(&first, NULL, 0, &why);
    if (n < 0) return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: %s", path, why);
    if (n > 0) {
        log->events = hhi_meta_alloc((size_t)n * sizeof *log->events);
        if (log->events == NULL)
            return hhi_error(HH_E_NO_MEMORY, "hh_trace_load: no memory for %lld events", n);
        if (decode_events(&c, log->events, (size_t)n, &why) != n)
            return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: %s", path, why ? why : "decoding differs");
    } else {
        c = first;
    }
    log->event_count = (size_t)n;

    hh_trace_summary *s = &log->summary;
    s->events = hhi_get_varint(&c);
    s->blocks = hhi_get_varint(&c);
    s->walk_hash = hhi_get_le(&c, 8);
    s->used_bytes = (size_t)hhi_get_varint(&c);
    s->free_bytes = (size_t)hhi_get_varint(&c);
    s->largest_free = (size_t)hhi_get_varint(&c);
    s->live_blocks = (uint32_t)hhi_get_varint(&c);
    s->free_blocks = (uint32_t)hhi_get_varint(&c);
    s->pinned_blocks = (uint32_t)hhi_get_varint(&c);
    s->moves = hhi_get_varint(&c);
    s->bytes_moved = hhi_get_varint(&c);
    if (c.bad || c.p != c.end)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: malformed end record", path);
    if (s->events != (uint64_t)n)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: end record counts %llu events, file has %lld", path,
                         (unsigned long long)s->events, n);
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Replay helpers
--------------------------------------------------------------------------- */
static bool config_equal(const hh_defrag_config *a, const hh_defrag_config *b) {
    return a->deterministic == b->deterministic && a->trigger == b->trigger && a->no_decommit == b->no_decommit &&
           a->trigger_start_fragmentation == b->trigger_start_fragmentation &&
           a->trigger_start_wasted_bytes == b->trigger_start_wasted_bytes &&
           a->trigger_stop_fragmentation == b->trigger_stop_fragmentation &&
           a->decommit_retain_bytes == b->decommit_retain_bytes && a->decommit_min_bytes == b->decommit_min_bytes;
}

/* The replay slot of a recorded handle id; grows the map as needed. NULL:
   no memory (reported). */
static replay_slot *map_slot(replay_slot **map, size_t *cap, uint64_t rec) {
    size_t idx = (size_t)(rec & HH_HANDLE_INDEX_MASK);
    if (idx >= *cap) {
        size_t ncap = *cap ? *cap : 1024;
        while (ncap <= idx) ncap *= 2;
        replay_slot *n = hhi_meta_alloc(ncap * sizeof *n);
        if (n == NULL) {
            hhi_error(HH_E_NO_MEMORY, "hh_trace_replay: no memory for the handle map (%zu entries)", ncap);
            return NULL;
        }
        if (*map) memcpy(n, *map, *cap * sizeof *n);
        hhi_meta_free(*map);
        *map = n;
        *cap = ncap;
    }
    return &(*map)[idx];
}

/* The live replayed handle of a recorded one; HH_NULL if the trace never
   allocated it (or freed it already). */
static hh_handle map_find(const replay_slot *map, size_t cap, uint64_t rec) {
    size_t idx = (size_t)(rec & HH_HANDLE_INDEX_MASK);
    if (idx >= cap || map[idx].rec != rec) return HH_NULL;
    return map[idx].now;
}

/* Applies one event to heap. HH_OK or HH_E_CORRUPT/HH_E_NO_MEMORY (reported). */
static hh_status replay_one(hh_heap *heap, const hh_trace_event *te, size_t i, bool deterministic, replay_slot **map,
                            size_t *cap) {
    const hh_heap_event *e = &te->ev;
    if (e->kind == HH_EV_ALLOC) {
        replay_slot *s = map_slot(map, cap, e->handle.id);
        if (s == NULL) return HH_E_NO_MEMORY;
        if (s->rec != 0)
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu allocates handle %#llx twice", i,
                             (unsigned long long)e->handle.id);
        hh_handle h = hh_alloc_ex(heap, e->size, e->align ? e->align : HH_HEAP_GRANULE, e->tag);
        if (hh_is_null(h))
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu: allocation of %zu bytes failed where the "
                             "recording succeeded", i, e->size);
        s->rec = e->handle.id;
        s->now = h;
        return HH_OK;
    }
    if (e->kind == (hh_heap_event_kind)HH_TRACE_EV_POLICY) {
        hh_defrag_set_policy(heap, te->policy);
        return HH_OK;
    }
    if (e->kind == HH_EV_DEFRAG_FULL) {                /* replayed as itself: a full compaction */
        if (hh_defrag_get_policy(heap) != te->policy) hh_defrag_set_policy(heap, te->policy);
        hh_defrag_report r = hh_defrag_full(heap);
        if (r.moves != e->moves)
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu: full compaction made %u moves, the recording %u",
                             i, r.moves, e->moves);
        return HH_OK;
    }
    if (e->kind == HH_EV_DEFRAG_STEP) {
        if (hh_defrag_get_policy(heap) != te->policy) hh_defrag_set_policy(heap, te->policy);
        hh_defrag_budget b = { .max_moves = e->max_moves, .max_bytes = e->max_bytes, .max_ns = e->max_ns };
        if (b.max_ns && !deterministic) {
            /* The time limit cannot be replayed: make exactly the recorded moves.
               Zero moves: a byte budget no block fits runs the step without a move.
               (Exact unless the step's work cap, which follows max_moves, bites
               first; deterministic mode ignores max_ns, so its budget replays as is.) */
            b.max_ns = 0;
            b.max_moves = e->moves;
            if (e->moves == 0) b.max_bytes = 1;
        }
        hh_defrag_report r = hh_defrag_step_ex(heap, &b);
        if (r.moves != e->moves)
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu: defrag step made %u moves, the recording %u",
                             i, r.moves, e->moves);
        return HH_OK;
    }
    hh_handle h = map_find(*map, *cap, e->handle.id);
    if (hh_is_null(h))
        return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu uses handle %#llx, which is not live", i,
                         (unsigned long long)e->handle.id);
    hh_status st = HH_OK;
    switch (e->kind) {
    case HH_EV_FREE:
        st = hh_free(heap, h);
        if (st == HH_OK) (*map)[e->handle.id & HH_HANDLE_INDEX_MASK].rec = 0;
        break;
    case HH_EV_RESIZE: st = hh_resize(heap, h, e->size); break;
    case HH_EV_PIN: st = hh_pin(heap, h) ? HH_OK : hh_last_error(); break;
    case HH_EV_UNPIN: st = hh_unpin(heap, h); break;
    default: return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu has unknown kind %d", i, (int)e->kind);
    }
    if (st != HH_OK)
        return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu (kind %d) failed with \"%s\" where the recording "
                         "succeeded", i, (int)e->kind, hh_status_str(st));
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Public API: recording
--------------------------------------------------------------------------- */
hh_status hh_trace_open(hh_heap *heap, const char *path, hh_trace **out) {
    if (out) *out = NULL;
    if (heap == NULL || path == NULL || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_trace_open: NULL argument");
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    if (st.live_blocks != 0 || st.pinned_blocks != 0)
        return hhi_error(HH_E_INVALID_ARG, "hh_trace_open: the heap must be empty (%u live, %u pinned blocks)",
                         st.live_blocks, st.pinned_blocks);
    hh_trace *t = hhi_meta_alloc(sizeof *t);
    if (t == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_trace_open: no memory for the trace buffer");
    t->file = fopen(path, "wb");
    if (t->file == NULL) {
        int e = errno;
        hhi_meta_free(t);
        return hhi_error(HH_E_IO, "hh_trace_open: cannot create %s: %s", path, strerror(e));
    }
    hh_heap_desc d;
    hh_heap_desc_get(heap, &d);
    hh_defrag_config cfg;
    hh_defrag_config_get(heap, &cfg);
    t->heap = heap;
    t->policy = hh_defrag_get_policy(heap);
    t->hash = fnv_offset;
    t->moves0 = st.total_moves;
    t->bytes0 = st.total_bytes_moved;
    uint8_t *p = t->buf;
    memcpy(p, trace_magic, sizeof trace_magic);
    p += sizeof trace_magic;
    p = hhi_put_le(p, HH_TRACE_VERSION, 4);
    p = hhi_put_le(p, d.capacity, 8);
    p = hhi_put_le(p, hh_heap_managed_bytes(heap), 8);
    p = hhi_put_le(p, d.max_handles, 4);
    p = hhi_put_le(p, d.flags, 4);
    p = hhi_put_le(p, (uint32_t)hh_defrag_get_policy(heap), 4);
    p = hhi_put_le(p, (uint32_t)((uintptr_t)hh_heap_base(heap) % TRACE_ALIGN_PAGE), 4);
    p = hhi_put_le(p, d.memory != NULL, 4);
    p = hhi_put_le(p, (uint32_t)cfg.deterministic | (uint32_t)cfg.trigger << 1 | (uint32_t)cfg.no_decommit << 2, 4);
    p = put_f64(p, cfg.trigger_start_fragmentation);
    p = hhi_put_le(p, cfg.trigger_start_wasted_bytes, 8);
    p = put_f64(p, cfg.trigger_stop_fragmentation);
    p = hhi_put_le(p, cfg.decommit_retain_bytes, 8);
    p = hhi_put_le(p, cfg.decommit_min_bytes, 8);
    p = hhi_put_le(p, 0, 4);
    t->len = (size_t)(p - t->buf);
    hh_heap_set_event_hook(heap, trace_hook, t);                 /* T2 */
    *out = t;
    return HH_OK;
}

uint64_t hh_trace_event_count(const hh_trace *t) { return t ? t->events : 0; }

hh_status hh_trace_close(hh_trace *t) {
    if (t == NULL) return HH_OK;
    hh_heap_set_event_hook(t->heap, NULL, NULL);                 /* T2 */
    hh_trace_summary s;
    hh_trace_summarise(t->heap, &s);
    trace_flush(t);
    uint8_t *p = t->buf;
    *p++ = TRACE_END;
    p = hhi_put_varint(p, t->events);
    p = hhi_put_varint(p, s.blocks);
    p = hhi_put_le(p, s.walk_hash, 8);
    p = hhi_put_varint(p, s.used_bytes);
    p = hhi_put_varint(p, s.free_bytes);
    p = hhi_put_varint(p, s.largest_free);
    p = hhi_put_varint(p, s.live_blocks);
    p = hhi_put_varint(p, s.free_blocks);
    p = hhi_put_varint(p, s.pinned_blocks);
    p = hhi_put_varint(p, s.moves - t->moves0);                      /* T3 */
    p = hhi_put_varint(p, s.bytes_moved - t->bytes0);
    t->len = (size_t)(p - t->buf);
    trace_flush(t);
    uint8_t sum[8];
    hhi_put_le(sum, t->hash, 8);
    if (!t->io_error && fwrite(sum, 1, sizeof sum, t->file) != sizeof sum) t->io_error = true;
    if (fclose(t->file) != 0) t->io_error = true;
    bool failed = t->io_error;
    hhi_meta_free(t);
    return failed ? hhi_error(HH_E_IO, "hh_trace_close: a write to the trace file failed; the trace is incomplete")
                  : HH_OK;
}

/* ---------------------------------------------------------------------------
   Public API: reading
--------------------------------------------------------------------------- */
hh_status hh_trace_load(const char *path, hh_trace_log **out) {
    if (out) *out = NULL;
    if (path == NULL || out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_trace_load: NULL argument");
    uint8_t *data = NULL;
    size_t len = 0;
    hh_status st = read_file(path, &data, &len);
    if (st != HH_OK) return st;
    hh_trace_log *log = hhi_meta_alloc(sizeof *log);
    if (log == NULL) {
        hhi_meta_free(data);
        return hhi_error(HH_E_NO_MEMORY, "hh_trace_load: no memory");
    }
    st = parse_trace(path, data, len, log);
    hhi_meta_free(data);
    if (st != HH_OK) {
        hh_trace_log_free(log);
        return st;
    }
    *out = log;
    return HH_OK;
}

void hh_trace_log_free(hh_trace_log *log) {
    if (log == NULL) return;
    hhi_meta_free(log->events);
    hhi_meta_free(log);
}

/* ---------------------------------------------------------------------------
   Public API: replaying
--------------------------------------------------------------------------- */
void hh_trace_desc(const hh_trace_info *info, hh_heap_desc *out) {
    if (info == NULL || out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_desc: NULL argument");
        return;
    }
    memset(out, 0, sizeof *out);
    out->capacity = info->capacity;
    out->max_handles = info->max_handles;
    out->flags = info->flags;
}

void hh_trace_summarise(const hh_heap *heap, hh_trace_summary *out) {
    if (heap == NULL || out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_summarise: NULL argument");
        return;
    }
    walk_acc a = { 0, fnv_offset };
    hh_heap_walk(heap, summary_walk, &a);
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    memset(out, 0, sizeof *out);
    out->blocks = a.blocks;
    out->walk_hash = a.hash;
    out->used_bytes = st.used_bytes;
    out->free_bytes = st.free_bytes;
    out->largest_free = st.largest_free;
    out->live_blocks = st.live_blocks;
    out->free_blocks = st.free_blocks;
    out->pinned_blocks = st.pinned_blocks;
    out->moves = st.total_moves;
    out->bytes_moved = st.total_bytes_moved;
}

bool hh_trace_summary_equal(const hh_trace_summary *a, const hh_trace_summary *b) {
    if (a == NULL || b == NULL) return false;
    return a->blocks == b->blocks && a->walk_hash == b->walk_hash && a->used_bytes == b->used_bytes &&
           a->free_bytes == b->free_bytes && a->largest_free == b->largest_free && a->live_blocks == b->live_blocks &&
           a->free_blocks == b->free_blocks && a->pinned_blocks == b->pinned_blocks && a->moves == b->moves &&
           a->bytes_moved == b->bytes_moved;
}

hh_status hh_trace_replay(const hh_trace_log *log, hh_heap *heap, hh_trace_replay_fn fn, void *user) {
    if (log == NULL || heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_trace_replay: NULL argument");
    hh_heap_stats st;
    hh_heap_stats_get(heap, &st);
    if (st.live_blocks != 0 || st.pinned_blocks != 0 || st.total_moves != 0)
        return hhi_error(HH_E_INVALID_ARG, "hh_trace_replay: the heap must be fresh (%u live blocks, %llu moves)",
                         st.live_blocks, (unsigned long long)st.total_moves);
    /* Only what differs is set: both calls create the defrag state, which the
       recorded heap may not have had yet. */
    if (hh_defrag_get_policy(heap) != log->info.policy) hh_defrag_set_policy(heap, log->info.policy);
    hh_defrag_config cur;
    hh_defrag_config_get(heap, &cur);
    if (!config_equal(&cur, &log->info.defrag)) {
        hh_status cs = hh_defrag_configure(heap, &log->info.defrag);
        if (cs != HH_OK) return cs;
    }
    replay_slot *map = NULL;
    size_t cap = 0, want = (size_t)log->info.max_handles + 2;
    if (map_slot(&map, &cap, want - 1) == NULL) return HH_E_NO_MEMORY;
    hh_status ret = HH_OK;
    for (size_t i = 0; i < log->event_count && ret == HH_OK; i++) {
        ret = replay_one(heap, &log->events[i], i, log->info.defrag.deterministic, &map, &cap);
        if (ret == HH_OK && fn) fn(heap, i, user);
    }
    hhi_meta_free(map);
    if (ret != HH_OK) return ret;
    hh_trace_summary now;
    hh_trace_summarise(heap, &now);
    if (!hh_trace_summary_equal(&now, &log->summary)) {
        const hh_trace_summary *r = &log->summary;
        return hhi_error(HH_E_CORRUPT, "hh_trace_replay: final state differs: blocks %llu/%llu, hash %s, used %zu/%zu, "
                         "live %u/%u, moves %llu/%llu (replayed/recorded)",
                         (unsigned long long)now.blocks, (unsigned long long)r->blocks,
                         now.walk_hash == r->walk_hash ? "same" : "differs", now.used_bytes, r->used_bytes,
                         now.live_blocks, r->live_blocks, (unsigned long long)now.moves, (unsigned long long)r->moves);
    }
    return HH_OK;
}
