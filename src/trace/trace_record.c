/* trace_record.c -- the hh_trace recorder: a hook on the heap's event stream
 * that encodes every operation into a buffer and writes the trace file
 * (trace_internal.h: the design and invariants T1-T4).
 */
#include "trace_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../common/hh_bytes.h"
#include "../common/hh_error.h"
#include "../common/hh_meta.h"

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

/* ---------------------------------------------------------------------------
   Encoding helpers
--------------------------------------------------------------------------- */
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
    t->hash = hhi_trace_fnv_bytes(t->hash, t->buf, t->len);
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
        __atomic_store_n(&t->events, t->events + 1, __ATOMIC_RELAXED);   /* read lock-free by hh_trace_event_count */
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
    __atomic_store_n(&t->events, t->events + 1, __ATOMIC_RELAXED);   /* read lock-free by hh_trace_event_count */
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
    t->hash = TRACE_FNV_OFFSET;
    t->moves0 = st.total_moves;
    t->bytes0 = st.total_bytes_moved;
    uint8_t *p = t->buf;
    memcpy(p, TRACE_MAGIC, TRACE_MAGIC_BYTES);
    p += TRACE_MAGIC_BYTES;
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

uint64_t hh_trace_event_count(const hh_trace *t) {
    if (t == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_event_count: trace is NULL");
        return 0;
    }
    return __atomic_load_n(&t->events, __ATOMIC_RELAXED);   /* no heap lock: the hook counts under it */
}

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
