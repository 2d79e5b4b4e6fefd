/* heap_slots.c -- the heap's own handle slots (8 bytes each; layout and
 * policy in heap_internal.h). The generic table (src/handles, 16-byte slots
 * holding any pointer) stays for other users; the heap knows its payloads lie
 * in one range, so a slot holds a 32-bit offset (in 8-byte units) beside the
 * key, which halves the table and lets hh_deref read key and place with one
 * load.
 */
#include "heap_internal.h"

#include "../common/hh_error.h"

bool hhi_slots_commit_more(hhi_slots *t) {
    uint32_t to = hhi_slot_array_grow(t->head.slots, sizeof(uint64_t), t->head.capacity, t->committed);
    if (to == t->committed) return false;
    t->committed = to;
    return true;
}

size_t hhi_slots_reservation(size_t obj_bytes) {
    return HH_HEAP_SLOT_TABLE_BYTES + hh_align_up(obj_bytes, hhi_os_page_size());
}

void *hhi_slots_map(uint32_t max_handles, bool growable, bool huge, size_t obj_bytes, uint32_t *committed) {
    uint32_t cap = max_handles + 1u;                  /* + sentinel slot 0 */
    *committed = growable && cap > (uint32_t)HH_HANDLE_COMMIT_SLOTS ? (uint32_t)HH_HANDLE_COMMIT_SLOTS : cap;
    char *r = hhi_os_reserve(hhi_slots_reservation(obj_bytes), huge ? HHI_SLOT_HUGE_BYTES : 0, true);
    if (r == NULL) return NULL;
    char *obj = r + HH_HEAP_SLOT_TABLE_BYTES;
    if (!hhi_os_commit(obj, obj_bytes) ||
        !hhi_os_commit(r, hh_align_up((size_t)*committed * sizeof(uint64_t), hhi_os_page_size()))) {
        hhi_slots_unmap(obj, obj_bytes);
        return NULL;
    }
    if (huge) hhi_os_hugepages(r, (size_t)cap * sizeof(uint64_t), true);
    return obj;
}

void hhi_slots_unmap(void *obj, size_t obj_bytes) {
    /* Untracked: no tool annotation ever touched the reservation, and
       hhi_os_unmap's un-poisoning costs memcheck time by the 128 MiB. */
    hhi_os_unmap_untracked((char *)obj - HH_HEAP_SLOT_TABLE_BYTES, hhi_slots_reservation(obj_bytes));
}

hh_status hhi_slots_init(hhi_slots *t, char *base, uint32_t max_handles, uint32_t committed) {
    uint32_t cap = max_handles + 1u;
    uint64_t *slots = (uint64_t *)(void *)((char *)t - HH_HEAP_SLOT_TABLE_BYTES);
    uint8_t epoch = 0, tag = hhi_handle_tag_acquire(&epoch);
    if (tag == 0)
        return hhi_error(HH_E_NO_MEMORY, "hh_heap_create: all %u table tags are held by live heaps and tables",
                         (unsigned)HH_HANDLE_TAG_COUNT);
    uint32_t min_free = HH_HANDLE_MIN_FREE_DEFAULT;
    if (min_free > max_handles / 4) min_free = max_handles / 4;
    /* Past every generation the tag's earlier heaps issued; the first heap of
       a tag starts in its epoch (the tag may have served generic tables). */
    uint32_t first_gen;
    if (!hhi_handle_tag_heap_gen(tag, &first_gen)) first_gen = ((uint32_t)epoch << HHI_GEN_EPOCH_SHIFT) | 1u;
    first_gen &= HHI_GEN_MASK;
    *t = (hhi_slots){ .head = { .slots = slots, .base = base, .capacity = cap, .tag_bias = (uint32_t)tag << HH_HANDLE_INDEX_BITS },
                      .hwm = 1, .committed = committed,
                      .min_free = min_free, .first_gen = first_gen, .first_key = first_gen << 8, .tag = tag };
    /* slot 0, the sentinel, stays 0: tag 0, no handle matches it */
    return HH_OK;
}

/* The furthest generation a table's slots reached, as an advance on
   first_gen: a live slot's is its handle's, a free slot's the next one it
   would issue (one past its last). A slot that went all the way round -- a
   retired one, or one with a single issue left -- reads first_gen - 1: it
   issued (nearly) every generation, so no start avoids it, and counting it
   would start the next heap where this one started, on every slot: it is
   left out. */
static uint32_t slots_max_advance(const hhi_slots *t) {
    uint32_t most = 0;
    for (uint32_t i = 1; i < t->hwm; i++) {
        uint32_t gen = (uint32_t)*slot_word(t, i) >> 8 & HHI_GEN_MASK;
        uint32_t adv = (gen - t->first_gen) & HHI_GEN_MASK;
        if (adv > most && adv != HHI_GEN_MASK) most = adv;
    }
    return most;
}

void hhi_slots_fini(hhi_slots *t) {
    if (t->tag == 0) return;
    /* The tag's next heap starts one past the furthest generation: a handle
       of this heap names none of its blocks, unless that heap's slots come
       all the way round (2^24 generations) to this heap's. */
    hhi_handle_tag_heap_gen_set(t->tag, (t->first_gen + slots_max_advance(t) + 1u) & HHI_GEN_MASK);
    hhi_handle_tag_release(t->tag);
    t->tag = 0;
}

hh_status hhi_slots_check(const hhi_slots *t, hh_handle hd, const char *who) {
    if (hhi_slot_lookup(t, hd) != NULL) return HH_OK;
    if (hh_is_null(hd)) return hhi_error(HH_E_STALE_HANDLE, "%s: null handle", who);
    uint32_t idx = hh_handle_index(hd);
    unsigned tag = (unsigned)((hd.id >> HH_HANDLE_INDEX_BITS) & 0xFF);
    if (tag != t->tag)
        return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx belongs to another table (tag %u, this table %u)", who,
                         (unsigned long long)hd.id, tag, (unsigned)t->tag);
    if (idx == 0 || idx >= HH_SLOT_LOAD(&t->hwm))   /* read without the lock by hh_deref's slow path */
        return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx was never issued", who, (unsigned long long)hd.id);
    if ((hd.id >> 32) > HHI_GEN_MASK)                  /* no slot issues generations of 2^24 and up */
        return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx has a generation no slot of this heap issues", who,
                         (unsigned long long)hd.id);
    uint64_t w = HH_SLOT_LOAD(slot_word(t, idx));
    return hhi_error(HH_E_STALE_HANDLE, "%s: handle %#llx is stale (freed; slot generation now %u)", who,
                     (unsigned long long)hd.id, (unsigned)(((uint32_t)w >> 8) & HHI_GEN_MASK));
}

void hhi_heap_slot_age(hh_heap *h, uint32_t idx, uint32_t left) {
    uint64_t *w = slot_word(&h->handles, idx);
    hh_assert((uint8_t)*w == 0);                      /* free: tag 0 */
    uint32_t gen = (h->handles.first_gen - left) & HHI_GEN_MASK;
    *w = (*w & ~(uint64_t)0xFFFFFFFFu) | (gen << 8);
}
