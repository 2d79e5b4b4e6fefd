/* handles_internal.h -- private to the handle table and its embedders in
 * this library (the heap, the virtual heap): the unchecked inline fast paths
 * of issue and release, and a test hook. They validate nothing: the caller
 * has checked its arguments and holds whatever lock serialises the table.
 * hh_handle_alloc / hh_handle_release wrap the same code, so the reuse policy
 * is written once. Not installed: outside code goes through hheap/handles.h.
 */
#ifndef HH_HANDLES_INTERNAL_H
#define HH_HANDLES_INTERNAL_H

#include "hheap/handles.h"
#include "../common/hh_compiler.h"

/* Table identity, shared by every table kind (the heap keeps its own compact
   slots, src/heap/heap_slots.c, in the same tag space): a tag 1..255 that no
   live table holds, and the number of times it was taken (mod 256: the epoch
   that spreads the first generations of its successive tables); 0 when all
   are held. Lock-free. */
HH_INTERNAL uint8_t hhi_handle_tag_acquire(uint8_t *epoch);
HH_INTERNAL void    hhi_handle_tag_release(uint8_t tag);
/* The heaps' generations of a tag (24 bits: src/heap/heap_slots.c). A heap
   that takes the tag starts its slots at *first (false: no heap held the tag
   yet) and, destroyed while it still holds the tag, leaves the next start
   past every generation it issued: so a handle of a destroyed heap names no
   block of the later heaps of its tag. Only the tag's holder calls them. */
HH_INTERNAL bool hhi_handle_tag_heap_gen(uint8_t tag, uint32_t *first);
HH_INTERNAL void hhi_handle_tag_heap_gen_set(uint8_t tag, uint32_t next);

/* A slot array -- the generic table's and the heap's 8-byte one: cap slots of
   `size` bytes in one range that never moves, mapped whole or, growable,
   reserved as read-only zero pages (a never-issued slot reads 0) with the
   first HH_HANDLE_COMMIT_SLOTS committed; huge: transparent huge pages
   advised. NULL on failure, nothing left mapped; *committed: slots writable. */
HH_INTERNAL void    *hhi_slot_array_map(uint32_t cap, size_t size, bool growable, bool huge, uint32_t *committed);
/* Commits the next HH_HANDLE_COMMIT_SLOTS slots of an array of cap (fewer at
   cap): the new count of committed slots, `have` itself when all are or the
   OS refuses (nothing reported: the caller reports). */
HH_INTERNAL uint32_t hhi_slot_array_grow(void *slots, size_t size, uint32_t cap, uint32_t have);

/* Test hook: sets the generation a free or never-used slot will be issued with next. */
HH_INTERNAL void hhi_handles_set_next_gen(hh_handle_table *t, uint32_t idx, uint32_t gen);

/* Takes the oldest slot of the free FIFO (free_count > 0). */
static inline uint32_t hh_handle_fifo_take(hh_handle_table *t) {
    uint32_t idx = t->free_head;
    t->free_head = (uint32_t)(uintptr_t)t->slots[idx].ptr;   /* a free slot's ptr links the FIFO */
    if (--t->free_count == 0) t->free_tail = 0;
    return idx;
}

/* Picks the slot for a new handle: a rested free slot, else a never-used one
   (committing more slots of a growable table), else any free slot. 0 when
   the table is full (or a growable table's commit failed with no free slot).
   The slot stays free (its key has HH_HANDLE_KEY_FREE) until
   hh_handle_issue_fast issues it. */
static inline uint32_t hh_handle_slot_take(hh_handle_table *t) {
    if (t->free_count > t->min_free) return hh_handle_fifo_take(t);
    if (HH_UNLIKELY(t->hwm >= t->committed) && !hh_handle_table_commit_more(t))
        return t->free_count > 0 ? hh_handle_fifo_take(t) : 0;
    uint32_t idx = t->hwm;
    HH_SLOT_STORE(&t->slots[idx].key, HH_HANDLE_KEY_FREE | hh_handle_key_make(t->first_gen, t->tag));   /* first generation */
    HH_SLOT_STORE(&t->hwm, idx + 1);   /* read lock-free by hh_handle_check */
    return idx;
}

/* A new handle for ptr, or HH_NULL when the table is full (nothing reported). */
static inline hh_handle hh_handle_issue_fast(hh_handle_table *t, void *ptr) {
    uint32_t idx = hh_handle_slot_take(t);
    if (HH_UNLIKELY(idx == 0)) return HH_NULL;
    hh_handle_slot *s = &t->slots[idx];
    uint64_t key = s->key & ~HH_HANDLE_KEY_FREE;
    HH_SLOT_STORE(&s->ptr, ptr);
    HH_SLOT_STORE_REL(&s->key, key);   /* publishes ptr */
    t->live_count++;
    return hh_handle_from_key(idx, key);
}

/* Re-points live slot idx (a moved block). */
static inline void hh_handle_repoint_fast(hh_handle_table *t, uint32_t idx, void *ptr) {
    HH_SLOT_STORE(&t->slots[idx].ptr, ptr);
}

/* Releases live slot s (index idx): bumps its generation and queues it at the
   FIFO's tail, or retires it when the next generation would wrap. */
static inline void hh_handle_drop_fast(hh_handle_table *t, hh_handle_slot *s, uint32_t idx) {
    uint64_t key = s->key;                         /* live: (generation << 8) | tag, the table's own tag */
    t->live_count--;
    if (HH_UNLIKELY((key >> 8) == HH_HANDLE_GEN_MAX)) {   /* the next generation would wrap: retire the slot for good */
        HH_SLOT_STORE_REL(&s->key, HH_HANDLE_KEY_FREE | key);
        HH_SLOT_STORE(&s->ptr, (void *)NULL);
        t->retired_count++;
        return;
    }
    HH_SLOT_STORE_REL(&s->key, HH_HANDLE_KEY_FREE | (key + ((uint64_t)1 << 8)));   /* next generation, dead first */
    HH_SLOT_STORE(&s->ptr, (void *)NULL);                         /* end of the FIFO */
    if (t->free_tail) HH_SLOT_STORE(&t->slots[t->free_tail].ptr, (void *)(uintptr_t)idx);
    else t->free_head = idx;
    t->free_tail = idx;
    t->free_count++;
}

#endif /* HH_HANDLES_INTERNAL_H */
