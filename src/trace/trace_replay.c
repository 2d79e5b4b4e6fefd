/* trace_replay.c -- the hh_trace replayer and the end-of-trace summary it
 * compares: applies a loaded trace to a fresh heap, event by event
 * (trace_internal.h: the design and invariants T1-T4).
 */
#include "trace_internal.h"

#include <string.h>

#include "../common/hh_error.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
typedef struct replay_slot {       /* T4 */
    uint64_t  rec;                 /* recorded handle id, 0: none */
    hh_handle now;                 /* its handle in the replayed heap */
} replay_slot;

/* ---------------------------------------------------------------------------
   Summary
--------------------------------------------------------------------------- */
typedef struct walk_acc { uint64_t blocks, hash; } walk_acc;

static void summary_walk(const hh_block_info *b, void *user) {
    walk_acc *a = user;
    a->blocks++;
    a->hash = hhi_trace_fnv_u64(a->hash, b->offset);
    a->hash = hhi_trace_fnv_u64(a->hash, b->size);
    a->hash = hhi_trace_fnv_u64(a->hash, (uint64_t)b->state);
    a->hash = hhi_trace_fnv_u64(a->hash, b->tag);
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

/* The replay's calls report nothing themselves (hhi_error_hold_begin): a
   failure is one message, the replay's, which quotes theirs; a message held
   from a call that succeeded is sent as it was. */

/* Sets the policy the trace recorded if it differs: HH_OK, or HH_E_NO_MEMORY
   reported (the heap could not make its defrag state). */
static hh_status policy_to(hh_heap *heap, hh_defrag_policy p) {
    if (hh_defrag_get_policy(heap) == p) return HH_OK;
    hhi_error_hold_begin();
    hh_defrag_set_policy(heap, p);
    bool ok = hh_defrag_get_policy(heap) == p;
    hhi_error_hold_end(ok);
    return ok ? HH_OK
              : hhi_error(HH_E_NO_MEMORY, "hh_trace_replay: cannot set the recorded defrag policy (%s)",
                          hhi_error_held_message());
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
        hhi_error_hold_begin();
        hh_handle h = hh_alloc_ex(heap, e->size, e->align ? e->align : HH_HEAP_GRANULE, e->tag);
        hhi_error_hold_end(!hh_is_null(h));
        if (hh_is_null(h))
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu: allocation of %zu bytes failed where the "
                             "recording succeeded (%s)", i, e->size, hhi_error_held_message());
        s->rec = e->handle.id;
        s->now = h;
        return HH_OK;
    }
    if (e->kind == (hh_heap_event_kind)HH_TRACE_EV_POLICY) return policy_to(heap, te->policy);
    if (e->kind == HH_EV_DEFRAG_FULL) {                /* replayed as itself: a full compaction */
        hh_status ps = policy_to(heap, te->policy);
        if (ps != HH_OK) return ps;
        hhi_error_hold_begin();
        hh_defrag_report r = hh_defrag_full(heap);
        hhi_error_hold_end(r.moves == e->moves);
        if (r.moves != e->moves)
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu: full compaction made %u moves, the recording %u%s%s",
                             i, r.moves, e->moves, *hhi_error_held_message() ? ": " : "", hhi_error_held_message());
        return HH_OK;
    }
    if (e->kind == HH_EV_DEFRAG_STEP) {
        hh_status ps = policy_to(heap, te->policy);
        if (ps != HH_OK) return ps;
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
        hhi_error_hold_begin();
        hh_defrag_report r = hh_defrag_step_ex(heap, &b);
        hhi_error_hold_end(r.moves == e->moves);
        if (r.moves != e->moves)
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu: defrag step made %u moves, the recording %u%s%s",
                             i, r.moves, e->moves, *hhi_error_held_message() ? ": " : "", hhi_error_held_message());
        return HH_OK;
    }
    hh_handle h = map_find(*map, *cap, e->handle.id);
    if (hh_is_null(h))
        return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu uses handle %#llx, which is not live", i,
                         (unsigned long long)e->handle.id);
    hh_status st = HH_OK;
    bool unknown = false;
    hhi_error_hold_begin();
    switch (e->kind) {
    case HH_EV_FREE:
        st = hh_free(heap, h);
        if (st == HH_OK) (*map)[e->handle.id & HH_HANDLE_INDEX_MASK].rec = 0;
        break;
    case HH_EV_RESIZE: st = hh_resize(heap, h, e->size); break;
    case HH_EV_PIN: st = hh_pin(heap, h) ? HH_OK : hh_last_error(); break;
    case HH_EV_UNPIN: st = hh_unpin(heap, h); break;
    default: unknown = true; break;
    }
    hhi_error_hold_end(st == HH_OK);
    if (unknown) return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu has unknown kind %d", i, (int)e->kind);
    if (st != HH_OK)
        return hhi_error(HH_E_CORRUPT, "hh_trace_replay: event %zu (kind %d) failed with \"%s\" where the recording "
                         "succeeded (%s)", i, (int)e->kind, hh_status_str(st), hhi_error_held_message());
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Public API: replaying
--------------------------------------------------------------------------- */
void hh_trace_desc(const hh_trace_info *info, hh_heap_desc *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_desc: out is NULL");
        return;
    }
    memset(out, 0, sizeof *out);
    if (info == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_desc: info is NULL");
        return;
    }
    memset(out, 0, sizeof *out);
    out->capacity = info->capacity;
    out->max_handles = info->max_handles;
    out->flags = info->flags;
    /* A growable heap starts managing what the recorded one managed at open:
       blocks land at the same offsets only in the same range. */
    if (info->flags & HH_HEAP_GROWABLE) out->commit = info->managed_bytes;
}

void hh_trace_summarise(const hh_heap *heap, hh_trace_summary *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_summarise: out is NULL");
        return;
    }
    memset(out, 0, sizeof *out);
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_summarise: heap is NULL");
        return;
    }
    walk_acc a = { 0, TRACE_FNV_OFFSET };
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
    if (a == NULL || b == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_trace_summary_equal: %s is NULL", a == NULL ? "a" : "b");
        return false;
    }
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
    hh_status ps = policy_to(heap, log->info.policy);
    if (ps != HH_OK) return ps;
    hh_defrag_config cur;
    hh_defrag_config_get(heap, &cur);
    if (!config_equal(&cur, &log->info.defrag)) {
        hhi_error_hold_begin();
        hh_status cs = hh_defrag_configure(heap, &log->info.defrag);
        hhi_error_hold_end(cs == HH_OK);
        if (cs == HH_E_NO_MEMORY) return hhi_error(cs, "hh_trace_replay: %s", hhi_error_held_message());
        if (cs != HH_OK)
            return hhi_error(HH_E_CORRUPT, "hh_trace_replay: the trace's defrag configuration is refused (%s)",
                             hhi_error_held_message());
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
