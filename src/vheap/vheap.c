/* vheap.c -- the virtual heap: records, the free tree, blocks by handle,
 * grow/shrink, stats, walk, check. The pass (planning and ending moves) is in
 * vheap_defrag.c. Data structures and invariants: vheap_internal.h.
 */
#include "vheap_internal.h"

#include <string.h>

#include "../common/hh_assert.h"
#include "../common/hh_error.h"
#include "../common/hh_frag.h"
#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Records
--------------------------------------------------------------------------- */
/* Ensures n unused records, growing the pool (doubling) if needed. false when
   metadata memory runs out; nothing changed then. Indices survive growth. */
bool hhi_vreserve_records(hh_vheap *h, uint32_t n) {
    if (h->rec_unused_count >= n) return true;
    uint64_t want = (uint64_t)h->rec_cap * 2u;
    if (want < 64) want = 64;
    if (want < (uint64_t)h->rec_cap + n) want = (uint64_t)h->rec_cap + n;
    if (want > ((uint64_t)1 << 31)) return false;
    hhi_vblk *nr = hhi_meta_alloc((size_t)want * sizeof *nr);
    if (nr == NULL) return false;
    if (h->rec_cap) memcpy(nr, h->rec, (size_t)h->rec_cap * sizeof *nr);
    hhi_meta_free(h->rec);
    h->rec = nr;
    /* chain the new records in index order, ahead of the existing chain */
    uint32_t first = h->rec_cap ? h->rec_cap : 1u;   /* record 0 is the null record */
    for (uint32_t i = (uint32_t)want - 1u; i >= first; i--) {
        nr[i].word = (uint64_t)VB_UNUSED << VB_STATE_SHIFT;
        nr[i].u.t.left = h->rec_unused;
        h->rec_unused = i;
        h->rec_unused_count++;
        h->count[VB_UNUSED]++;
    }
    h->rec_cap = (uint32_t)want;
    return true;
}

/* Takes an unused record (one must be reserved). */
static uint32_t rec_take(hh_vheap *h, uint64_t off, uint64_t size, unsigned state) {
    uint32_t r = h->rec_unused;
    hh_assert(r != 0);
    h->rec_unused = h->rec[r].u.t.left;
    h->rec_unused_count--;
    h->count[VB_UNUSED]--;
    hhi_vblk *b = &h->rec[r];
    memset(b, 0, sizeof *b);
    b->off = off;
    b->word = size | ((uint64_t)state << VB_STATE_SHIFT);
    h->bytes[state] += size;
    h->count[state]++;
    return r;
}

static void rec_put(hh_vheap *h, uint32_t r) {
    hhi_vblk *b = &h->rec[r];
    if (h->cursor == r) h->cursor = 0;       /* the sweep restarts from the top */
    unsigned s = vb_state(b);
    h->bytes[s] -= vb_size(b);
    h->count[s]--;
    b->word = (uint64_t)VB_UNUSED << VB_STATE_SHIFT;
    b->off = 0;
    b->prev = b->next = 0;
    b->u.t.left = h->rec_unused;
    b->u.t.right = 0;
    h->rec_unused = r;
    h->rec_unused_count++;
    h->count[VB_UNUSED]++;
}

/* Changes a record's state, keeping the counters (V5). */
void hhi_vset_state(hh_vheap *h, uint32_t r, unsigned state) {
    hhi_vblk *b = &h->rec[r];
    unsigned s = vb_state(b);
    h->bytes[s] -= vb_size(b);
    h->count[s]--;
    b->word = (b->word & ~((uint64_t)7 << VB_STATE_SHIFT)) | ((uint64_t)state << VB_STATE_SHIFT);
    h->bytes[state] += vb_size(b);
    h->count[state]++;
}

/* Changes a record's size, keeping the counters. Never on a node in the tree. */
static void rec_resize(hh_vheap *h, uint32_t r, uint64_t size) {
    hhi_vblk *b = &h->rec[r];
    unsigned s = vb_state(b);
    h->bytes[s] = h->bytes[s] - vb_size(b) + size;
    vb_set_size(b, size);
}

/* Links record n into the address list right after p (0: at the head). */
static void addr_insert_after(hh_vheap *h, uint32_t p, uint32_t n) {
    uint32_t nx = p ? h->rec[p].next : h->head;
    h->rec[n].prev = p;
    h->rec[n].next = nx;
    if (p) h->rec[p].next = n; else h->head = n;
    if (nx) h->rec[nx].prev = n; else h->tail = n;
}

static void addr_unlink(hh_vheap *h, uint32_t n) {
    uint32_t p = h->rec[n].prev, nx = h->rec[n].next;
    if (p) h->rec[p].next = nx; else h->head = nx;
    if (nx) h->rec[nx].prev = p; else h->tail = p;
}

/* ---------------------------------------------------------------------------
   Free tree: a treap by offset, priorities hashed from the record index, each
   node's aux = the largest size class in its subtree.
--------------------------------------------------------------------------- */
static uint32_t prio(uint32_t i) {
    uint32_t x = i * 0x9E3779B1u;
    x ^= x >> 15;
    x *= 0x85EBCA77u;
    x ^= x >> 13;
    return x;
}

static unsigned t_max(const hh_vheap *h, uint32_t n) { return n ? vb_aux(&h->rec[n]) : 0; }

static void t_pull(hh_vheap *h, uint32_t n) {
    hhi_vblk *b = &h->rec[n];
    unsigned m = hhi_vclass(vb_size(b));
    if (b->u.t.left && t_max(h, b->u.t.left) > m) m = t_max(h, b->u.t.left);
    if (b->u.t.right && t_max(h, b->u.t.right) > m) m = t_max(h, b->u.t.right);
    vb_set_aux(b, m);
}

static uint32_t t_rot_right(hh_vheap *h, uint32_t x) {
    uint32_t y = h->rec[x].u.t.left;
    h->rec[x].u.t.left = h->rec[y].u.t.right;
    h->rec[y].u.t.right = x;
    t_pull(h, x);
    t_pull(h, y);
    return y;
}

static uint32_t t_rot_left(hh_vheap *h, uint32_t x) {
    uint32_t y = h->rec[x].u.t.right;
    h->rec[x].u.t.right = h->rec[y].u.t.left;
    h->rec[y].u.t.left = x;
    t_pull(h, x);
    t_pull(h, y);
    return y;
}

static uint32_t t_insert(hh_vheap *h, uint32_t root, uint32_t n) {
    if (root == 0) {
        h->rec[n].u.t.left = h->rec[n].u.t.right = 0;
        t_pull(h, n);
        return n;
    }
    if (h->rec[n].off < h->rec[root].off) {
        h->rec[root].u.t.left = t_insert(h, h->rec[root].u.t.left, n);
        if (prio(h->rec[root].u.t.left) > prio(root)) return t_rot_right(h, root);
    } else {
        h->rec[root].u.t.right = t_insert(h, h->rec[root].u.t.right, n);
        if (prio(h->rec[root].u.t.right) > prio(root)) return t_rot_left(h, root);
    }
    t_pull(h, root);
    return root;
}

static uint32_t t_merge(hh_vheap *h, uint32_t a, uint32_t b) {
    if (a == 0) return b;
    if (b == 0) return a;
    if (prio(a) > prio(b)) {
        h->rec[a].u.t.right = t_merge(h, h->rec[a].u.t.right, b);
        t_pull(h, a);
        return a;
    }
    h->rec[b].u.t.left = t_merge(h, a, h->rec[b].u.t.left);
    t_pull(h, b);
    return b;
}

static uint32_t t_remove(hh_vheap *h, uint32_t root, uint32_t n) {
    hh_assert(root != 0);
    if (root == n) return t_merge(h, h->rec[n].u.t.left, h->rec[n].u.t.right);
    if (h->rec[n].off < h->rec[root].off) h->rec[root].u.t.left = t_remove(h, h->rec[root].u.t.left, n);
    else h->rec[root].u.t.right = t_remove(h, h->rec[root].u.t.right, n);
    t_pull(h, root);
    return root;
}

static void tree_add(hh_vheap *h, uint32_t n) { h->root = t_insert(h, h->root, n); }
static void tree_del(hh_vheap *h, uint32_t n) { h->root = t_remove(h, h->root, n); }

uint32_t hhi_vtree_min(const hh_vheap *h) {
    uint32_t n = h->root;
    while (n && h->rec[n].u.t.left) n = h->rec[n].u.t.left;
    return n;
}

/* The aligned start of size bytes inside free block n, below limit; false if
   they do not fit. */
static bool t_fits(const hh_vheap *h, uint32_t n, uint64_t size, uint64_t align, uint64_t limit, uint64_t *dst) {
    const hhi_vblk *b = &h->rec[n];
    uint64_t start = (b->off + align - 1u) & ~(align - 1u);
    if (start < b->off || start + size > vb_end(b) || start >= limit) return false;
    *dst = start;
    return true;
}

/* In-order search for the lowest fitting node, pruned by the subtree class
   (a subtree whose largest class is below size's class holds no block of
   size bytes) and cut after *budget visits. */
static uint32_t t_find_exact(const hh_vheap *h, uint32_t n, uint64_t size, uint64_t align, uint64_t limit,
                             unsigned minc, int *budget, uint64_t *dst) {
    if (n == 0 || t_max(h, n) < minc || *budget <= 0) return 0;
    (*budget)--;
    uint32_t r = t_find_exact(h, h->rec[n].u.t.left, size, align, limit, minc, budget, dst);
    if (r) return r;
    if (h->rec[n].off >= limit) return 0;              /* everything from here on is at or above limit */
    if (t_fits(h, n, size, align, limit, dst)) return n;
    return t_find_exact(h, h->rec[n].u.t.right, size, align, limit, minc, budget, dst);
}

enum { HHI_VFIND_VISITS = 48 };   /* nodes the exact search may visit before the guaranteed descent */

uint32_t hhi_vfind(const hh_vheap *h, uint64_t size, uint64_t align, uint64_t limit, uint64_t *dst) {
    int budget = HHI_VFIND_VISITS;
    uint32_t r = t_find_exact(h, h->root, size, align, limit, hhi_vclass(size), &budget, dst);
    if (r || budget > 0) return r;           /* the exact search saw the whole candidate set */
    /* Cut short: descend to the lowest node of a class whose every member
       holds size plus the worst alignment padding. O(depth). */
    uint64_t need = size + (align > HH_VHEAP_GRANULE ? align - HH_VHEAP_GRANULE : 0);
    unsigned c = hhi_vclass_up(need);
    uint32_t n = h->root;
    while (n && t_max(h, n) >= c) {
        uint32_t l = h->rec[n].u.t.left;
        if (l && t_max(h, l) >= c) { n = l; continue; }
        if (hhi_vclass(vb_size(&h->rec[n])) >= c) return t_fits(h, n, size, align, limit, dst) ? n : 0;
        n = h->rec[n].u.t.right;
    }
    return 0;
}

uint32_t hhi_vcarve(hh_vheap *h, uint32_t r, uint64_t start, uint64_t len, unsigned state) {
    hhi_vblk *b = &h->rec[r];
    hh_assert(vb_state(b) == VB_FREE && start >= b->off && start + len <= vb_end(b));
    tree_del(h, r);
    uint64_t off = b->off, end = vb_end(b);
    if (start > off) {                         /* the part before stays free */
        uint32_t f = rec_take(h, off, start - off, VB_FREE);
        addr_insert_after(h, h->rec[r].prev, f);
        tree_add(h, f);
    }
    if (start + len < end) {                   /* and so does the part after */
        uint32_t t = rec_take(h, start + len, end - (start + len), VB_FREE);
        addr_insert_after(h, r, t);
        tree_add(h, t);
    }
    b = &h->rec[r];
    b->off = start;
    rec_resize(h, r, len);
    hhi_vset_state(h, r, state);
    vb_set_aux(b, 0);
    b->u.t.left = b->u.t.right = 0;
    return r;
}

void hhi_vrelease(hh_vheap *h, uint32_t r) {
    hhi_vset_state(h, r, VB_FREE);
    uint32_t p = h->rec[r].prev;
    if (p && vb_state(&h->rec[p]) == VB_FREE) {        /* absorb the free block before */
        tree_del(h, p);
        uint64_t s = vb_size(&h->rec[p]);
        addr_unlink(h, p);
        h->rec[r].off = h->rec[p].off;
        rec_put(h, p);
        rec_resize(h, r, vb_size(&h->rec[r]) + s);
    }
    uint32_t n = h->rec[r].next;
    if (n && vb_state(&h->rec[n]) == VB_FREE) {        /* and the one after */
        tree_del(h, n);
        uint64_t s = vb_size(&h->rec[n]);
        addr_unlink(h, n);
        rec_put(h, n);
        rec_resize(h, r, vb_size(&h->rec[r]) + s);
    }
    tree_add(h, r);
}

/* ---------------------------------------------------------------------------
   Life cycle
--------------------------------------------------------------------------- */
hh_status hh_vheap_create(const hh_vheap_desc *desc, hh_vheap **out) {
    if (out) *out = NULL;
    if (desc == NULL || out == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_vheap_create: %s is NULL", out == NULL ? "out" : "desc");
    hh_vheap_desc d = *desc;
    d.size &= ~(uint64_t)(HH_VHEAP_GRANULE - 1);
    if (d.size == 0 || d.size > HH_VHEAP_MAX_SIZE)
        return hhi_error(HH_E_INVALID_ARG, "hh_vheap_create: size %llu not in %d..2^47 bytes",
                         (unsigned long long)desc->size, HH_VHEAP_GRANULE);
    if (d.flags != 0) return hhi_error(HH_E_INVALID_ARG, "hh_vheap_create: unknown flags 0x%x", (unsigned)d.flags);
    if (d.max_handles == 0) {
        uint64_t m = d.size / 256u;
        d.max_handles = (uint32_t)(m < 64 ? 64 : m > HH_HANDLE_MAX_SLOTS - 1u ? HH_HANDLE_MAX_SLOTS - 1u : m);
    }
    if (d.max_handles > HH_HANDLE_MAX_SLOTS - 1u)
        return hhi_error(HH_E_INVALID_ARG, "hh_vheap_create: max_handles %u above %u", (unsigned)d.max_handles,
                         (unsigned)HH_HANDLE_MAX_SLOTS - 1u);

    hh_vheap *h = hhi_meta_alloc(sizeof *h);
    if (h == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_vheap_create: no memory for the heap object");
    h->desc = d;
    h->size = d.size;
    hh_status s = hh_handle_table_init(&h->handles, &(hh_handle_table_desc){ .capacity = d.max_handles });
    if (s != HH_OK) {                          /* reported by the table */
        hhi_meta_free(h);
        return s;
    }
    if (!hhi_vreserve_records(h, 64)) {
        hh_handle_table_fini(&h->handles);
        hhi_meta_free(h);
        return hhi_error(HH_E_NO_MEMORY, "hh_vheap_create: no memory for the block records");
    }
    uint32_t r = rec_take(h, 0, d.size, VB_FREE);
    addr_insert_after(h, 0, r);
    tree_add(h, r);
    *out = h;
    return HH_OK;
}

void hh_vheap_destroy(hh_vheap *heap) {
    if (heap == NULL) return;
    hh_handle_table_fini(&heap->handles);
    hhi_meta_free(heap->rec);
    hhi_meta_free(heap->pass_buf);
    hhi_meta_free(heap);
}

uint64_t hh_vheap_size(const hh_vheap *heap) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_vheap_size: heap is NULL");
        return 0;
    }
    return heap->size;
}

hh_status hh_vheap_grow(hh_vheap *heap, uint64_t new_size) {
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_vheap_grow: heap is NULL");
    new_size &= ~(uint64_t)(HH_VHEAP_GRANULE - 1);
    if (new_size < heap->size || new_size > HH_VHEAP_MAX_SIZE)
        return hhi_error(HH_E_INVALID_ARG, "hh_vheap_grow: new size %llu below the current %llu or above 2^47",
                         (unsigned long long)new_size, (unsigned long long)heap->size);
    if (new_size == heap->size) return HH_OK;
    if (!hhi_vreserve_records(heap, 1))
        return hhi_error(HH_E_NO_MEMORY, "hh_vheap_grow: no memory for a block record");
    uint32_t r = rec_take(heap, heap->size, new_size - heap->size, VB_DST);
    addr_insert_after(heap, heap->tail, r);
    heap->size = new_size;
    hhi_vrelease(heap, r);                     /* joins the top free region, if there is one */
    return HH_OK;
}

hh_status hh_vheap_shrink(hh_vheap *heap, uint64_t *out_size) {
    if (heap == NULL) {
        if (out_size) *out_size = 0;   /* the out is cleared before every early return */
        return hhi_error(HH_E_INVALID_ARG, "hh_vheap_shrink: heap is NULL");
    }
    uint32_t t = heap->tail;
    if (t && vb_state(&heap->rec[t]) == VB_FREE) {
        tree_del(heap, t);
        heap->size = heap->rec[t].off;
        addr_unlink(heap, t);
        rec_put(heap, t);
    }
    if (out_size) *out_size = heap->size;
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Blocks
--------------------------------------------------------------------------- */
/* The record of a live handle, or 0 after reporting HH_E_STALE_HANDLE. */
static uint32_t live_rec(const hh_vheap *heap, hh_handle h, const char *who) {
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "%s: heap is NULL", who);
        return 0;
    }
    void *p = hh_handle_lookup(&heap->handles, h);
    if (p == NULL) {
        hhi_error(HH_E_STALE_HANDLE, "%s: handle 0x%llx is stale, forged or of another heap", who,
                  (unsigned long long)h.id);
        return 0;
    }
    return (uint32_t)(uintptr_t)p;
}

hh_handle hh_valloc(hh_vheap *heap, uint64_t size, uint64_t align, uint32_t tag) {
    if (heap == NULL) { hhi_error(HH_E_INVALID_ARG, "hh_valloc: heap is NULL"); return HH_NULL; }
    if (size == 0 || size > HH_VHEAP_MAX_SIZE) {
        hhi_error(HH_E_INVALID_ARG, "hh_valloc: size %llu not in 1..2^47", (unsigned long long)size);
        return HH_NULL;
    }
    if (!hh_is_pow2((size_t)align) || align > HH_VHEAP_MAX_ALIGN) {
        hhi_error(HH_E_INVALID_ARG, "hh_valloc: alignment %llu is not a power of two in 1..%d",
                  (unsigned long long)align, HH_VHEAP_MAX_ALIGN);
        return HH_NULL;
    }
    if (align < HH_VHEAP_GRANULE) align = HH_VHEAP_GRANULE;
    uint64_t bsize = (size + HH_VHEAP_GRANULE - 1u) & ~(uint64_t)(HH_VHEAP_GRANULE - 1);
    if (!hhi_vreserve_records(heap, 2)) {
        hhi_error(HH_E_NO_MEMORY, "hh_valloc: no memory for block records");
        return HH_NULL;
    }
    uint64_t dst = 0;
    uint32_t f = hhi_vfind(heap, bsize, align, UINT64_MAX, &dst);
    if (f == 0) {
        hhi_error(HH_E_NO_MEMORY, "hh_valloc: no free range of %llu bytes aligned to %llu (%llu bytes free in %u "
                  "blocks): run hh_vdefrag passes or hh_vheap_grow", (unsigned long long)bsize,
                  (unsigned long long)align, (unsigned long long)heap->bytes[VB_FREE], heap->count[VB_FREE]);
        return HH_NULL;
    }
    /* the handle first: a full table must leave the blocks untouched */
    hh_handle hd = hh_handle_issue_fast(&heap->handles, (void *)(uintptr_t)f);
    if (hh_is_null(hd)) {
        hhi_error(HH_E_NO_MEMORY, "hh_valloc: handle table full (%u live)", heap->handles.live_count);
        return HH_NULL;
    }
    uint32_t r = hhi_vcarve(heap, f, dst, bsize, VB_LIVE);
    hhi_vblk *b = &heap->rec[r];
    b->u.l.slot = hh_handle_index(hd);
    b->u.l.tag = tag;
    vb_set_aux(b, (unsigned)hh_fls64(align) << VB_ALIGN_SHIFT);
    return hd;
}

hh_status hh_vfree(hh_vheap *heap, hh_handle h) {
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_vfree: heap is NULL");
    if (hh_is_null(h)) return HH_OK;
    uint32_t r = live_rec(heap, h, "hh_vfree");
    if (r == 0) return HH_E_STALE_HANDLE;
    hhi_vblk *b = &heap->rec[r];
    if (vb_pins(b)) return hhi_error(HH_E_PINNED, "hh_vfree: block of handle 0x%llx is pinned", (unsigned long long)h.id);
    hh_handle_release(&heap->handles, h);
    if (vb_state(b) == VB_SRC) {               /* its move's source stays reserved until the pass ends */
        hhi_vset_state(heap, r, VB_ZOMBIE);
        vb_set_aux(&heap->rec[r], 0);
        return HH_OK;
    }
    vb_set_aux(b, 0);
    hhi_vrelease(heap, r);
    return HH_OK;
}

hh_status hh_vresize(hh_vheap *heap, hh_handle h, uint64_t new_size) {
    uint32_t r = live_rec(heap, h, "hh_vresize");
    if (r == 0) return hh_last_error();
    if (new_size == 0 || new_size > HH_VHEAP_MAX_SIZE)
        return hhi_error(HH_E_INVALID_ARG, "hh_vresize: size %llu not in 1..2^47", (unsigned long long)new_size);
    if (vb_state(&heap->rec[r]) == VB_SRC)
        return hhi_error(HH_E_PINNED, "hh_vresize: the open pass moves this block; end the pass first");
    uint64_t bsize = (new_size + HH_VHEAP_GRANULE - 1u) & ~(uint64_t)(HH_VHEAP_GRANULE - 1);
    uint64_t old = vb_size(&heap->rec[r]);
    if (bsize == old) return HH_OK;
    if (!hhi_vreserve_records(heap, 2)) return hhi_error(HH_E_NO_MEMORY, "hh_vresize: no memory for block records");
    uint32_t n = heap->rec[r].next;
    bool next_free = n && vb_state(&heap->rec[n]) == VB_FREE;
    if (bsize < old) {                         /* the tail becomes free */
        uint32_t t = rec_take(heap, heap->rec[r].off + bsize, old - bsize, VB_DST);
        rec_resize(heap, r, bsize);
        addr_insert_after(heap, r, t);
        hhi_vrelease(heap, t);
        return HH_OK;
    }
    uint64_t extra = bsize - old;
    if (!next_free || vb_size(&heap->rec[n]) < extra)
        return hhi_error(HH_E_NO_MEMORY, "hh_vresize: no free range of %llu bytes right after the block; allocate "
                         "a new block and copy", (unsigned long long)extra);
    hhi_vcarve(heap, n, heap->rec[n].off, extra, VB_DST);   /* the rest of n stays free */
    addr_unlink(heap, n);
    rec_put(heap, n);
    rec_resize(heap, r, bsize);
    return HH_OK;
}

uint64_t hh_voffset(const hh_vheap *heap, hh_handle h) {
    uint32_t r = live_rec(heap, h, "hh_voffset");
    return r ? heap->rec[r].off : HH_VOFFSET_NONE;
}

/* Like hh_voffset (and the relocatable heap's hh_size / hh_tag), the getters
   report a NULL heap or a stale handle: a silent 0 would hide the bug. */
uint64_t hh_vsize(const hh_vheap *heap, hh_handle h) {
    uint32_t r = live_rec(heap, h, "hh_vsize");
    return r ? vb_size(&heap->rec[r]) : 0;
}

uint32_t hh_vtag(const hh_vheap *heap, hh_handle h) {
    uint32_t r = live_rec(heap, h, "hh_vtag");
    return r ? heap->rec[r].u.l.tag : 0;
}

hh_status hh_vpin(hh_vheap *heap, hh_handle h) {
    uint32_t r = live_rec(heap, h, "hh_vpin");
    if (r == 0) return hh_last_error();
    hhi_vblk *b = &heap->rec[r];
    unsigned p = vb_pins(b);
    if (p >= HH_VHEAP_MAX_PINS) return hhi_error(HH_E_INVALID_ARG, "hh_vpin: pin count would pass %d", HH_VHEAP_MAX_PINS);
    vb_set_aux(b, vb_aux(b) + 1u);
    if (p == 0) heap->pinned++;
    return HH_OK;
}

hh_status hh_vunpin(hh_vheap *heap, hh_handle h) {
    uint32_t r = live_rec(heap, h, "hh_vunpin");
    if (r == 0) return hh_last_error();
    hhi_vblk *b = &heap->rec[r];
    if (vb_pins(b) == 0) return hhi_error(HH_E_INVALID_ARG, "hh_vunpin: block of handle 0x%llx is not pinned",
                                          (unsigned long long)h.id);
    vb_set_aux(b, vb_aux(b) - 1u);
    if (vb_pins(b) == 0) heap->pinned--;
    return HH_OK;
}

/* ---------------------------------------------------------------------------
   Statistics, walk, check
--------------------------------------------------------------------------- */
/* The largest free block: only subtrees that reach the largest class can hold it. */
static uint64_t t_largest(const hh_vheap *h, uint32_t n, unsigned c) {
    if (n == 0 || t_max(h, n) < c) return 0;
    uint64_t best = vb_size(&h->rec[n]);
    uint64_t l = t_largest(h, h->rec[n].u.t.left, c), r = t_largest(h, h->rec[n].u.t.right, c);
    return HH_MAX(best, HH_MAX(l, r));
}

void hh_vheap_stats_get(const hh_vheap *heap, hh_vheap_stats *out) {
    if (out == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_vheap_stats_get: out is NULL");
        return;
    }
    memset(out, 0, sizeof *out);
    if (heap == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_vheap_stats_get: heap is NULL");
        return;
    }
    out->size = heap->size;
    out->used_bytes = heap->bytes[VB_LIVE] + heap->bytes[VB_SRC];
    out->reserved_bytes = heap->bytes[VB_DST] + heap->bytes[VB_ZOMBIE];
    out->free_bytes = heap->bytes[VB_FREE];
    out->largest_free = heap->root ? t_largest(heap, heap->root, t_max(heap, heap->root)) : 0;
    uint32_t t = heap->tail;
    if (t && vb_state(&heap->rec[t]) == VB_FREE) t = heap->rec[t].prev;
    out->high_water = t ? vb_end(&heap->rec[t]) : 0;
    out->live_blocks = heap->count[VB_LIVE] + heap->count[VB_SRC];
    out->free_blocks = heap->count[VB_FREE];
    out->pinned_blocks = heap->pinned;
    out->fragmentation = hhi_fragmentation(out->largest_free, out->free_bytes);
    out->total_moves = heap->total_moves;
    out->total_bytes_moved = heap->total_bytes_moved;
    out->meta_bytes = sizeof *heap + (uint64_t)heap->rec_cap * sizeof(hhi_vblk) +
                      (uint64_t)heap->handles.hwm * sizeof(hh_handle_slot) +
                      (uint64_t)heap->pass_cap * (2u * sizeof(hh_vmove) + 2u * sizeof(uint32_t));
    out->records = heap->rec_cap - 1u - heap->rec_unused_count;
}

void hh_vheap_walk(const hh_vheap *heap, hh_walk_fn fn, void *user) {
    if (heap == NULL || fn == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_vheap_walk: %s is NULL", heap == NULL ? "heap" : "fn");
        return;
    }
    for (uint32_t r = heap->head; r; r = heap->rec[r].next) {
        const hhi_vblk *b = &heap->rec[r];
        hh_block_info info = { .offset = (size_t)b->off, .size = (size_t)vb_size(b), .handle = HH_NULL };
        switch (vb_state(b)) {
        case VB_FREE: info.state = HH_BLOCK_FREE; break;
        case VB_LIVE:
        case VB_SRC:
            info.state = vb_pins(b) ? HH_BLOCK_PINNED : HH_BLOCK_LIVE;
            info.handle = hh_handle_at(&heap->handles, b->u.l.slot);
            info.tag = b->u.l.tag;
            break;
        default: info.state = HH_VBLOCK_RESERVED; break;
        }
        fn(&info, user);
    }
}

#define FAIL(...) return hhi_error(HH_E_CORRUPT, "hh_vheap_check: " __VA_ARGS__)

/* V3: BST order, heap order and subtree classes; counts the nodes. */
static hh_status check_tree(const hh_vheap *h, uint32_t n, uint64_t lo, uint64_t hi, uint32_t depth, uint32_t *count) {
    if (n == 0) return HH_OK;
    if (n >= h->rec_cap || depth > 200) FAIL("V3 free tree node %u out of range or tree too deep", n);
    const hhi_vblk *b = &h->rec[n];
    if (vb_state(b) != VB_FREE) FAIL("V3 tree node %u (offset %llu) is not free", n, (unsigned long long)b->off);
    if (b->off < lo || b->off >= hi) FAIL("V3 tree node %u (offset %llu) out of order", n, (unsigned long long)b->off);
    uint32_t l = b->u.t.left, r = b->u.t.right;
    if ((l && prio(l) > prio(n)) || (r && prio(r) > prio(n))) FAIL("V3 tree node %u breaks the heap order", n);
    unsigned m = hhi_vclass(vb_size(b));
    if (l && l < h->rec_cap && t_max(h, l) > m) m = t_max(h, l);
    if (r && r < h->rec_cap && t_max(h, r) > m) m = t_max(h, r);
    if (++*count > h->count[VB_FREE]) FAIL("V3 more tree nodes than free blocks");
    hh_status s = check_tree(h, l, lo, b->off, depth + 1, count);
    if (s != HH_OK) return s;
    s = check_tree(h, r, b->off + 1, hi, depth + 1, count);
    if (s != HH_OK) return s;
    if (vb_aux(b) != m) FAIL("V3 tree node %u has class %u, its subtree %u", n, vb_aux(b), m);
    return HH_OK;
}

hh_status hh_vheap_check(const hh_vheap *heap) {
    if (heap == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_vheap_check: heap is NULL");
    const hh_vheap *h = heap;
    uint64_t bytes[VB_NSTATES] = {0};
    uint32_t count[VB_NSTATES] = {0}, pinned = 0, seen = 0;
    uint64_t at = 0;
    uint32_t prev = 0;
    for (uint32_t r = h->head; r; r = h->rec[r].next) {
        if (r >= h->rec_cap || ++seen > h->rec_cap) FAIL("V1 address list broken at record %u", r);
        const hhi_vblk *b = &h->rec[r];
        unsigned st = vb_state(b);
        uint64_t sz = vb_size(b);
        if (b->prev != prev) FAIL("V1 record %u: prev %u, expected %u", r, b->prev, prev);
        if (b->off != at) FAIL("V1 block at %llu, expected %llu", (unsigned long long)b->off, (unsigned long long)at);
        if (sz == 0 || sz % HH_VHEAP_GRANULE || b->off % HH_VHEAP_GRANULE)
            FAIL("V1 block at %llu: size %llu", (unsigned long long)b->off, (unsigned long long)sz);
        if (st >= VB_UNUSED) FAIL("V1 block at %llu in state %u", (unsigned long long)b->off, st);
        if (st == VB_FREE && prev && vb_state(&h->rec[prev]) == VB_FREE)
            FAIL("V2 free blocks at %llu and %llu are adjacent", (unsigned long long)h->rec[prev].off,
                 (unsigned long long)b->off);
        if (st == VB_LIVE || st == VB_SRC) {
            uint32_t slot = b->u.l.slot;
            if (slot == 0 || slot >= h->handles.capacity)
                FAIL("V4 block at %llu: slot %u out of range", (unsigned long long)b->off, slot);
            hh_handle hd = hh_handle_at(&h->handles, slot);
            if (hh_handle_lookup(&h->handles, hd) != (void *)(uintptr_t)r)
                FAIL("V4 block at %llu: its slot %u does not name it", (unsigned long long)b->off, slot);
            if (b->off & (((uint64_t)1 << vb_align_log2(b)) - 1u))
                FAIL("V4 block at %llu is not aligned to %llu", (unsigned long long)b->off,
                     (unsigned long long)1 << vb_align_log2(b));
            if (vb_pins(b)) pinned++;
        }
        if (st != VB_FREE && st != VB_LIVE && !h->pass_open)
            FAIL("V6 block at %llu in pass state %u with no pass open", (unsigned long long)b->off, st);
        bytes[st] += sz;
        count[st]++;
        at += sz;
        prev = r;
    }
    if (at != h->size) FAIL("V1 blocks end at %llu, size is %llu", (unsigned long long)at, (unsigned long long)h->size);
    if (prev != h->tail) FAIL("V1 tail is %u, last record %u", h->tail, prev);
    for (unsigned s = 0; s < VB_UNUSED; s++)
        if (bytes[s] != h->bytes[s] || count[s] != h->count[s])
            FAIL("V5 state %u: %llu bytes in %u blocks, counters say %llu in %u", s, (unsigned long long)bytes[s],
                 count[s], (unsigned long long)h->bytes[s], h->count[s]);
    if (pinned != h->pinned) FAIL("V5 %u pinned blocks, counter says %u", pinned, h->pinned);
    if (h->handles.live_count != count[VB_LIVE] + count[VB_SRC])
        FAIL("V4 %u live handles, %u live blocks", h->handles.live_count, count[VB_LIVE] + count[VB_SRC]);
    uint32_t nodes = 0;
    hh_status s = check_tree(h, h->root, 0, UINT64_MAX, 0, &nodes);
    if (s != HH_OK) return s;
    if (nodes != h->count[VB_FREE]) FAIL("V3 %u tree nodes, %u free blocks", nodes, h->count[VB_FREE]);
    if (h->pass_open) {
        if (count[VB_SRC] + count[VB_ZOMBIE] != h->move_count || count[VB_DST] != h->move_count)
            FAIL("V6 %u moves planned, %u sources, %u destinations", h->move_count, count[VB_SRC] + count[VB_ZOMBIE],
                 count[VB_DST]);
        for (uint32_t i = 0; i < h->move_count; i++) {
            uint32_t sr = h->mv_src[i], dr = h->mv_dst[i];
            if (sr == 0 || dr == 0 || sr >= h->rec_cap || dr >= h->rec_cap) FAIL("V6 move %u: bad records", i);
            const hhi_vblk *sb = &h->rec[sr], *db = &h->rec[dr];
            if ((vb_state(sb) != VB_SRC && vb_state(sb) != VB_ZOMBIE) || vb_state(db) != VB_DST)
                FAIL("V6 move %u: source state %u, destination state %u", i, vb_state(sb), vb_state(db));
            if (vb_size(sb) != vb_size(db) || db->off == sb->off || sb->off != h->moves[i].src_offset ||
                db->off != h->moves[i].dst_offset)
                FAIL("V6 move %u does not match its records", i);
            if (vb_state(sb) == VB_SRC && hh_handle_at(&h->handles, sb->u.l.slot).id != h->moves[i].handle.id)
                FAIL("V6 move %u: the source's handle is not the move's", i);
        }
    }
    uint32_t unused = 0;
    for (uint32_t r = h->rec_unused; r; r = h->rec[r].u.t.left) {
        if (r >= h->rec_cap || ++unused > h->rec_cap) FAIL("V7 unused chain broken at %u", r);
        if (vb_state(&h->rec[r]) != VB_UNUSED) FAIL("V7 unused record %u in state %u", r, vb_state(&h->rec[r]));
    }
    if (unused != h->rec_unused_count || unused + seen != h->rec_cap - 1u)
        FAIL("V7 %u unused + %u used records, capacity %u", unused, seen, h->rec_cap);
    if (h->journal_count > h->pass_cap) FAIL("V8 journal of %u moves, capacity %u", h->journal_count, h->pass_cap);
    if (h->cursor && (h->cursor >= h->rec_cap || vb_state(&h->rec[h->cursor]) >= VB_UNUSED))
        FAIL("V8 sweep cursor %u is not a block", h->cursor);
    return HH_OK;
}
