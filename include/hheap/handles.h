/* hheap/handles.h -- generational handle table (generic). The relocatable heap
 * issues handles of the same layout from its own 8-byte slots (heap.h), with a
 * generation below 2^24, in the same tag space as these tables.
 *
 * A handle is a 64-bit id:   bits 0..23  slot index (slot 0 is never issued)
 *                            bits 24..31 tag of the owning table (1..255)
 *                            bits 32..63 the slot's generation (1..2^32-1)
 * A slot stores {ptr, key}; a handle is live iff slots[index].key == id >> 24.
 * Lookup is therefore a bounds-clamped index (out of range -> slot 0) plus one
 * 64-bit compare: no branch on the null handle, none on the range.
 *
 * Lifecycle of a slot: issued with generation g; on release its generation
 * becomes g+1 and the slot joins the tail of a FIFO free queue. A slot is taken
 * from the head of that queue only while more than `min_free` slots wait in it
 * (or when no never-used slot is left), so a freed slot rests for a long time
 * before it is reused and a stale handle meets a new generation at most after
 * 2^32 reuses of the same slot. A slot whose generation would wrap is retired:
 * it is never issued again, so a stale handle can never alias a new object.
 * A free or retired slot carries HH_HANDLE_KEY_FREE in its key, which no
 * handle's id >> 24 can equal, so a forged handle never matches it.
 *
 * Handles of another table are rejected because the tag differs: a table
 * takes a tag (1..255) that no live table holds, so at most 255 tables live at
 * once (the 256th init fails with HH_E_NO_MEMORY), and a handle of another
 * live table can never match. A tag freed by a destroyed table is reused last
 * (round-robin over the free ones), and each reuse starts the new table's
 * generations in another epoch (the top 8 bits of the first generation count
 * how often the tag was taken), so a handle of a destroyed table is also
 * rejected unless a slot of its tag's new table was reused 2^24 times or the
 * tag was taken 256 more times.
 *
 * The table is not thread-safe; the heap serialises it under its own lock.
 * Lookups (hh_handle_get) only read, with atomic loads, and the slot array
 * never moves (it is reserved once, at create time, for `capacity` slots), so
 * lookups may run concurrently with mutations of other handles, and a lookup
 * of a handle freed before it started returns NULL.
 *
 * Growable tables (HH_HANDLE_TABLE_GROWABLE): the reservation is read-only
 * zero pages (no commit charge; a lookup there finds key 0 and fails, as for
 * any never-issued slot) and pages are committed read/write as new slots are
 * first issued, HH_HANDLE_COMMIT_SLOTS at a time. `capacity` stays the lookup
 * bound, so a lookup is still one clamp and one compare. A commit the OS
 * refuses leaves the table as it was (issue returns HH_NULL).
 */
#ifndef HHEAP_HANDLES_H
#define HHEAP_HANDLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    HH_HANDLE_INDEX_BITS = 24,
    HH_HANDLE_TAG_BITS   = 8,
    HH_HANDLE_GEN_BITS   = 32,
    HH_HANDLE_MAX_SLOTS  = (1 << 24) - 1,   /* usable slots 1..2^24-1 */
    HH_HANDLE_MIN_FREE_DEFAULT = 64,        /* freed slots that rest before reuse */
    HH_HANDLE_TAG_COUNT  = 255,             /* tags 1..255: at most this many tables live at once */
    HH_HANDLE_EPOCH_SHIFT = 24,             /* a table's first generation is (epoch << 24) + 1 */
    HH_HANDLE_TABLE_GROWABLE = 1u << 0,     /* desc flag: commit slot pages as they are first used */
    HH_HANDLE_COMMIT_SLOTS = 4096,          /* slots committed at a time by a growable table (64 KiB) */
    HH_HANDLE_TABLE_HUGE_PAGES = 1u << 1,   /* desc flag: ask for transparent huge pages for the slot array
                                               (fewer TLB misses when lookups are scattered over many slots) */
};
HH_STATIC_ASSERT(HH_HANDLE_INDEX_BITS + HH_HANDLE_TAG_BITS + HH_HANDLE_GEN_BITS == 64, "handle layout");

/* Slot fields are read without the lock (hh_deref, hh_handle_get) while the
   owner mutates other slots -- or, for a stale handle, that very slot. Every
   write of a slot's key or ptr, and of hwm, is therefore an atomic store and
   every lock-free read an atomic load (GCC/Clang builtins, which compile as C
   and C++ and are plain moves on x86-64 and ARM64 for these orders). The key
   is written with release after ptr on issue and before ptr on release, and
   read with acquire before ptr: a handle freed before the reader learnt of it
   never matches, and the reader never sees a torn slot. */
#if defined(__GNUC__) || defined(__clang__)
#  define HH_SLOT_LOAD_ACQ(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#  define HH_SLOT_LOAD(p)         __atomic_load_n((p), __ATOMIC_RELAXED)
#  define HH_SLOT_STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#  define HH_SLOT_STORE(p, v)     __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#else
#  define HH_SLOT_LOAD_ACQ(p)     (*(p))
#  define HH_SLOT_LOAD(p)         (*(p))
#  define HH_SLOT_STORE_REL(p, v) (*(p) = (v))
#  define HH_SLOT_STORE(p, v)     (*(p) = (v))
#endif

#define HH_HANDLE_INDEX_MASK ((uint64_t)0xFFFFFF)
#define HH_HANDLE_KEY_FREE   ((uint64_t)1 << 63)   /* set in the key of every non-live slot */

/* One slot: 16 bytes. Fields are private to the table. */
typedef struct hh_handle_slot {
    void    *ptr;        /* live: the object's address; free: index of the next free slot */
    uint64_t key;        /* live: (generation << 8) | tag; else HH_HANDLE_KEY_FREE | next generation << 8 | tag */
} hh_handle_slot;

/* The table. The layout is public only so that it can be embedded by value and
   so that lookups inline; treat every field as private. */
typedef struct hh_handle_table {
    hh_handle_slot *slots;       /* reserved array of `capacity` slots, never moves; [0] is the sentinel */
    uint32_t capacity;           /* slots reserved, including slot 0 */
    uint32_t hwm;                /* first never-issued index (1 at start) */
    uint32_t free_head;          /* FIFO of released slots: oldest ... */
    uint32_t free_tail;          /* ... newest (0: empty) */
    uint32_t free_count;         /* slots waiting in the FIFO */
    uint32_t min_free;           /* reuse from the FIFO only while free_count > min_free */
    uint32_t live_count;         /* handles currently issued */
    uint32_t retired_count;      /* slots retired after generation wrap */
    uint8_t  tag;                /* this table's tag, 1..255, held by no other live table */
    size_t   reserved_bytes;     /* bytes mapped for slots */
    uint32_t first_gen;          /* generation of a slot's first handle: (tag epoch << 24) + 1 */
    uint32_t committed;          /* slots [0, committed) are writable; == capacity unless growable */
} hh_handle_table;

/* Zero-initialise; zero fields take defaults. */
typedef struct hh_handle_table_desc {
    uint32_t capacity;   /* maximum live handles (required, 1..HH_HANDLE_MAX_SLOTS) */
    uint32_t min_free;   /* 0: HH_HANDLE_MIN_FREE_DEFAULT (capped to capacity / 4) */
    uint32_t flags;      /* HH_HANDLE_TABLE_GROWABLE: capacity is a limit, slots committed as used;
                            HH_HANDLE_TABLE_HUGE_PAGES */
} hh_handle_table_desc;

typedef struct hh_handle_table_stats {
    uint32_t capacity, live, free_queued, retired, never_used;
} hh_handle_table_stats;

/* ---------------------------------------------------------------------------
   Life cycle
--------------------------------------------------------------------------- */
/* Initialises a table in caller storage. HH_E_INVALID_ARG for a bad desc,
   HH_E_NO_MEMORY if the slot array cannot be mapped (t is then untouched). */
HH_API hh_status hh_handle_table_init(hh_handle_table *t, const hh_handle_table_desc *desc);
/* Releases the slot array; outstanding handles simply become invalid. */
HH_API void      hh_handle_table_fini(hh_handle_table *t);
/* Heap-allocated variants of the two above. */
HH_API hh_status hh_handle_table_create(const hh_handle_table_desc *desc, hh_handle_table **out);
HH_API void      hh_handle_table_destroy(hh_handle_table *t);

/* ---------------------------------------------------------------------------
   Handles
--------------------------------------------------------------------------- */
/* A new handle for ptr; HH_NULL + HH_E_NO_MEMORY ("handle table full") when no slot is left. */
HH_API hh_handle hh_handle_alloc(hh_handle_table *t, void *ptr);
/* Releases h. HH_OK for HH_NULL (no-op); HH_E_STALE_HANDLE (nothing touched) if h is not live. */
HH_API hh_status hh_handle_release(hh_handle_table *t, hh_handle h);
/* Re-points a live handle; HH_E_STALE_HANDLE if h is not live. */
HH_API hh_status hh_handle_set(hh_handle_table *t, hh_handle h, void *ptr);
/* The pointer behind h, NULL if h is null or not live (no error reported: see
   hh_handle_check); a NULL or uninitialised table is reported. */
HH_API void     *hh_handle_get(const hh_handle_table *t, hh_handle h);
/* HH_OK if h is live, else HH_E_STALE_HANDLE reported through the error handler (who = caller name). */
HH_API hh_status hh_handle_check(const hh_handle_table *t, hh_handle h, const char *who);
HH_API void      hh_handle_table_stats_get(const hh_handle_table *t, hh_handle_table_stats *out);
/* Growable tables: commits the next HH_HANDLE_COMMIT_SLOTS slots (fewer at the
   limit). false, nothing changed, when the table is at its capacity or the OS
   refuses (not reported: the caller reports); a NULL table is reported. Called
   by the issue fast path. */
HH_API bool      hh_handle_table_commit_more(hh_handle_table *t);

/* Index part of a handle (for tools and dumps). */
static inline uint32_t hh_handle_index(hh_handle h) { return (uint32_t)(h.id & HH_HANDLE_INDEX_MASK); }
/* Generation part of a handle. */
static inline uint32_t hh_handle_generation(hh_handle h) { return (uint32_t)(h.id >> 32); }

/* The lookup fast path: clamp, one compare (hh_handle_get inlines it). */
static inline void *hh_handle_lookup(const hh_handle_table *t, hh_handle h) {
    uint32_t idx = (uint32_t)(h.id & HH_HANDLE_INDEX_MASK);
    idx = idx < t->capacity ? idx : 0;                /* out of range -> sentinel slot 0 */
    const hh_handle_slot *s = &t->slots[idx];
    uint64_t key = HH_SLOT_LOAD_ACQ(&s->key);
    return key == (h.id >> HH_HANDLE_INDEX_BITS) ? HH_SLOT_LOAD(&s->ptr) : NULL;
}

#define HH_HANDLE_GEN_MAX UINT32_MAX   /* a slot issued with this generation retires on release */

static inline uint64_t hh_handle_key_make(uint32_t gen, uint8_t tag) { return ((uint64_t)gen << 8) | tag; }
static inline uint32_t hh_handle_key_gen(uint64_t key) { return (uint32_t)((key & ~HH_HANDLE_KEY_FREE) >> 8); }
static inline hh_handle hh_handle_from_key(uint32_t idx, uint64_t key) {
    hh_handle h;                       /* no compound literal: this header is also C++ */
    h.id = ((key & ~HH_HANDLE_KEY_FREE) << HH_HANDLE_INDEX_BITS) | idx;
    return h;
}

/* Slot-index access for embedders that keep a live handle's index (the heap
   keeps it in each block header): the handle issued in live slot idx and the
   pointer it names. idx must be issued and live. (The unchecked issue and
   release fast paths the heap inlines are private: src/handles/handles_internal.h.) */
static inline hh_handle hh_handle_at(const hh_handle_table *t, uint32_t idx) {
    return hh_handle_from_key(idx, t->slots[idx].key);
}
static inline void *hh_handle_ptr_at(const hh_handle_table *t, uint32_t idx) { return t->slots[idx].ptr; }

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_HANDLES_H */
