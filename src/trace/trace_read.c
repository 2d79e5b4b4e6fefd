/* trace_read.c -- the hh_trace reader: loads a trace file, checks its
 * checksum and decodes its records (trace_internal.h: the design and
 * invariants T1-T4).
 */
#include "trace_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/hh_bytes.h"
#include "../common/hh_error.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
typedef hhi_cursor cursor;         /* reader position in a loaded file (hh_bytes.h) */

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
        /* Only what the heap accepted is recorded (hh_alloc_ex, hh_resize). */
        if ((kind == HH_EV_ALLOC || kind == HH_EV_RESIZE) && (ev.ev.size == 0 || ev.ev.size > HH_HEAP_MAX_ALLOC)) {
            *why = "a block size the heap never accepts";
            return -1;
        }
        if (kind == HH_EV_ALLOC && ev.ev.align != 0 && (ev.ev.align & (ev.ev.align - 1)) != 0) {
            *why = "an alignment that is not a power of two";
            return -1;
        }
        if (kind == HH_EV_ALLOC && ev.ev.align > HH_HEAP_MAX_ALIGN) {
            *why = "an alignment above HH_HEAP_MAX_ALIGN";
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
    if (len < TRACE_HEADER_BYTES || memcmp(data, TRACE_MAGIC, TRACE_MAGIC_BYTES) != 0)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s is not an hheap trace", path);
    cursor c = { data + TRACE_MAGIC_BYTES, data + len - 8, false };
    hh_trace_info *in = &log->info;
    in->version = (uint32_t)hhi_get_le(&c, 4);
    if (in->version != HH_TRACE_VERSION)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s has trace version %u, this library reads %d", path,
                         in->version, HH_TRACE_VERSION);
    if (len < TRACE_HEADER_BYTES + 1 + 8)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s is truncated (%zu bytes)", path, len);
    uint64_t stored = 0;
    for (int i = 0; i < 8; i++) stored |= (uint64_t)data[len - 8 + (size_t)i] << (8 * i);
    if (hhi_trace_fnv_bytes(TRACE_FNV_OFFSET, data, len - 8) != stored)
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
    /* What hh_defrag_configure would refuse at replay is damage here: a
       trace records only configurations its heap accepted. */
    const char *bad_cfg = hh_defrag_config_problem(&in->defrag);
    if (bad_cfg != NULL)
        return hhi_error(HH_E_CORRUPT, "hh_trace_load: %s: defrag configuration in the header: %s", path, bad_cfg);
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
