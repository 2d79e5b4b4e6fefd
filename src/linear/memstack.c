/* memstack.c -- the mark stack (Unreal FMemStack semantics), its LIFO marks,
 * the thread-local instance, the walker and the checker.
 *
 * Algorithm: bump allocation in the top chunk of a singly linked chunk chain.
 * The first chunk is a small page; later ones are 64 KiB pages; a request that
 * does not fit a page gets an oversize chunk of its own. A mark saves (top
 * chunk, top); popping it gives back every chunk newer than the saved one
 * (keeping at most one as a spare to avoid page-pool round trips in tight
 * scope loops) and restores top. The invariants M1..M5 are listed in
 * linear_internal.h.
 */
#include "linear_internal.h"

#include <pthread.h>
#include <string.h>

#include "../common/hh_meta.h"
#include "../common/hh_platform.h"

/* ---------------------------------------------------------------------------
   Chunks
--------------------------------------------------------------------------- */
/* Bytes a chunk must have to hold one allocation of size/align: the payload of
   a chunk starts HHI_CHUNK_HEADER (64) bytes into a page-aligned mapping, so an
   alignment up to 64 costs nothing and a larger one at most `align` bytes. */
static size_t chunk_need(size_t size, size_t align) {
    return (align > HHI_CHUNK_HEADER ? align : HHI_CHUNK_HEADER) + size;
}

/* Refreshes the cached fast-path limit (M4). */
static void stack_update_fast_end(hh_memstack *ms) {
    bool blocked = (ms->flags & HH_MEMSTACK_ENFORCE_MARKS) != 0 && ms->mark_count == 0;
    ms->fast_end = blocked ? NULL : ms->end;
}

/* Releases chunk c (already unlinked): keeps it as the spare if possible,
   otherwise returns it to the page pool. */
static void chunk_release(hh_memstack *ms, hhi_chunk *c) {
    hh_track_pool_destroy(c);
    hh_track_noaccess(hhi_chunk_payload(c), c->size - HHI_CHUNK_HEADER);
    if (ms->spare == NULL && c->kind != HH_LCHUNK_OVERSIZE) {
        ms->spare = c;
        return;
    }
    hhi_linear_page_put(c, c->kind, c->size);
}

/* Maps (or takes the spare of) a chunk able to hold need bytes and links it as
   the new top chunk. false (nothing changed) when the page pool fails. */
static bool chunk_push(hh_memstack *ms, size_t need) {
    size_t small = hhi_linear_small_page_size();
    int kind;
    size_t size;
    if (ms->chunk == NULL && need <= small) {
        kind = HH_LCHUNK_SMALL;
        size = small;
    } else if (need <= HH_PAGEPOOL_PAGE_SIZE) {
        kind = HH_LCHUNK_PAGE;
        size = HH_PAGEPOOL_PAGE_SIZE;
    } else {
        kind = HH_LCHUNK_OVERSIZE;
        size = hh_align_up(need, hhi_os_page_size());
    }
    hhi_chunk *c = NULL;
    if (ms->spare != NULL && kind != HH_LCHUNK_OVERSIZE && ms->spare->size >= size) {
        c = ms->spare;  /* a spare large page serves a small request too */
        ms->spare = NULL;
        kind = c->kind;
        size = c->size;
    } else {
        c = hhi_linear_page_get(kind, size);
        if (c == NULL) return false;
        hh_track_noaccess(hhi_chunk_payload(c), size - HHI_CHUNK_HEADER);
    }
    hh_track_defined(c, sizeof *c);
    if (ms->chunk != NULL) ms->chunk->top = ms->top;
    *c = (hhi_chunk){ .prev = ms->chunk, .top = NULL, .size = size, .kind = kind, .index = ms->chunk_count };
    hh_track_pool_create(c, c);
    ms->chunk = c;
    ms->chunk_count++;
    ms->top = hhi_chunk_payload(c);
    ms->end = hhi_chunk_end(c);
    ms->reserved_bytes += size;
    if (ms->reserved_bytes > ms->peak_reserved_bytes) ms->peak_reserved_bytes = ms->reserved_bytes;
    stack_update_fast_end(ms);
    return true;
}

/* Unwinds the stack to (chunk, top): releases every newer chunk and cuts the
   memcheck pool of `chunk` at top. chunk NULL empties the stack; with
   keep_bottom the oldest chunk then stays, empty (unless it is oversize), so a
   scope loop on an empty stack (the common hh_memstack_thread pattern) never
   leaves the fast path. */
static void stack_unwind(hh_memstack *ms, hhi_chunk *chunk, uint8_t *top, bool keep_bottom) {
    while (ms->chunk != chunk && ms->chunk != NULL) {
        hhi_chunk *c = ms->chunk;
        if (chunk == NULL && keep_bottom && c->prev == NULL && c->kind != HH_LCHUNK_OVERSIZE) {
            chunk = c;
            top = hhi_chunk_payload(c);
            break;
        }
        ms->chunk = c->prev;
        ms->chunk_count--;
        ms->reserved_bytes -= c->size;
        chunk_release(ms, c);
    }
    hh_assert_internal(ms->chunk == chunk);
    if (chunk == NULL) {
        ms->top = ms->end = NULL;
    } else {
        uint8_t *payload = hhi_chunk_payload(chunk);
        ms->top = top;
        ms->end = hhi_chunk_end(chunk);
        hhi_linear_track_cut(chunk, payload, (size_t)(top - payload), (size_t)(ms->end - payload));
    }
    stack_update_fast_end(ms);
}

static void stack_free_all(hh_memstack *ms) {
    stack_unwind(ms, NULL, NULL, false);
    if (ms->spare != NULL) {
        hhi_linear_page_put(ms->spare, ms->spare->kind, ms->spare->size);
        ms->spare = NULL;
    }
}

/* ---------------------------------------------------------------------------
   Thread-local stack
   The TLS slot gives the fast lookup; the pthread key only exists for its
   destructor, which frees the stack when the thread exits.
--------------------------------------------------------------------------- */
static _Thread_local hh_memstack *tls_stack;
static pthread_key_t  tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static bool           tls_key_ok;

static void stack_destroy(hh_memstack *ms, const char *who);

static void tls_destructor(void *p) {
    hh_memstack *ms = p;
    if (ms == NULL) return;
    tls_stack = NULL;
    stack_destroy(ms, "thread exit");
}

static void tls_key_create(void) { tls_key_ok = pthread_key_create(&tls_key, tls_destructor) == 0; }

static HH_NOINLINE HH_COLD hh_memstack *tls_stack_make(void) {
    pthread_once(&tls_once, tls_key_create);
    if (!tls_key_ok) {
        hhi_error(HH_E_NO_MEMORY, "hh_memstack_thread: no thread-specific key available");
        return NULL;
    }
    hh_memstack *ms = NULL;
    if (hh_memstack_create(&(hh_memstack_desc){ .name = "thread" }, &ms) != HH_OK) return NULL;
    if (pthread_setspecific(tls_key, ms) != 0) {
        hh_memstack_destroy(ms);
        hhi_error(HH_E_NO_MEMORY, "hh_memstack_thread: pthread_setspecific failed");
        return NULL;
    }
    ms->is_thread = true;
    tls_stack = ms;
    return ms;
}

/* ---------------------------------------------------------------------------
   Internal interface
--------------------------------------------------------------------------- */
void *hhi_memstack_alloc_slow(hh_memstack *ms, size_t size, size_t align) {
    if (ms == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_memstack_alloc: stack is NULL");
        return NULL;
    }
    if (size == 0) {
        hhi_error(HH_E_INVALID_ARG, "hh_memstack_alloc: size 0");
        return NULL;
    }
    size_t a = align;
    if (!hhi_linear_align_ok(&a)) {
        hhi_error(HH_E_INVALID_ARG, "hh_memstack_alloc: align %zu is not a power of two", align);
        return NULL;
    }
    if ((ms->flags & HH_MEMSTACK_ENFORCE_MARKS) != 0 && ms->mark_count == 0) {
        hhi_error(HH_E_NO_MARK, "hh_memstack_alloc: stack '%s' enforces marks and none is open (push a mark first)",
                  ms->name);
        return NULL;
    }
    if (size > SIZE_MAX / 4 || a > SIZE_MAX / 4) {
        hhi_error(HH_E_NO_MEMORY, "hh_memstack_alloc: %zu bytes aligned to %zu is too large", size, a);
        return NULL;
    }
    uintptr_t p = hh_align_up_ptr((uintptr_t)ms->top, a);
    if (ms->chunk == NULL || p > (uintptr_t)ms->end || size > (uintptr_t)ms->end - p) {
        if (!chunk_push(ms, chunk_need(size, a))) {
            hhi_error(HH_E_NO_MEMORY, "hh_memstack_alloc: no chunk for %zu bytes (page pool failed)", size);
            return NULL;
        }
        p = hh_align_up_ptr((uintptr_t)ms->top, a);
        hh_assert_internal(p + size <= (uintptr_t)ms->end);
    }
    ms->top = (uint8_t *)(p + size);
    ms->alloc_count++;
    hh_track_alloc(ms->chunk, (void *)p, size);
    return (void *)p;
}

bool hhi_memstack_try_grow(hh_memstack *ms, void *p, size_t old_size, size_t new_size) {
    uint8_t *b = p;
    if (ms == NULL || ms->chunk == NULL || b + old_size != ms->top || new_size < old_size) return false;
    if (new_size > (size_t)(ms->end - b)) return false;
    /* A mark pushed after the buffer would cut the grown part at its pop. */
    const hh_mark *m = ms->marks;
    if (m != NULL && m->chunk == ms->chunk && (uint8_t *)m->top > b) return false;
    ms->top = b + new_size;
    hh_track_move(ms->chunk, p, p, new_size);
    hh_track_undefined(b + old_size, new_size - old_size);  /* CHANGE only edits the record */
    return true;
}

/* ---------------------------------------------------------------------------
   Public interface: create / destroy / thread
--------------------------------------------------------------------------- */
/* The one place hh_memstack_desc defaults are applied (table in linear.h). */
static hh_memstack_desc memstack_desc_defaults(const hh_memstack_desc *desc) {
    hh_memstack_desc d = desc != NULL ? *desc : (hh_memstack_desc){ 0 };
    if (d.name == NULL) d.name = "memstack";
    return d;
}

hh_status hh_memstack_create(const hh_memstack_desc *desc, hh_memstack **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_memstack_create: out is NULL");
    *out = NULL;
    hh_memstack_desc d = memstack_desc_defaults(desc);
    if ((d.flags & ~(uint32_t)HH_MEMSTACK_ENFORCE_MARKS) != 0)
        return hhi_error(HH_E_INVALID_ARG, "hh_memstack_create: unknown flags 0x%x", (unsigned)d.flags);
    hh_memstack *ms = hhi_meta_alloc(sizeof *ms);
    if (ms == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_memstack_create: no memory for the stack object");
    ms->flags = d.flags;
    ms->name = d.name;
    stack_update_fast_end(ms);
    *out = ms;
    return HH_OK;
}

/* Frees ms; open marks are reported. On an explicit destroy the caller's marks
   are still where they were pushed (the mark contract), so they are closed: a
   later pop (an HH_MARK_SCOPE cleanup) then fails cleanly instead of touching
   the freed stack. At thread exit the frames that held them are gone: not touched. */
static void stack_destroy(hh_memstack *ms, const char *who) {
    if (ms->mark_count != 0)
        hhi_error(HH_E_MARK_ORDER, "%s: stack '%s' destroyed with %u open mark%s", who, ms->name,
                  (unsigned)ms->mark_count, ms->mark_count == 1 ? "" : "s");
    if (strcmp(who, "thread exit") != 0)
        for (hh_mark *m = ms->marks, *n; m != NULL; m = n) {
            n = m->prev;
            m->magic = 0;
            m->ms = NULL;
        }
    ms->marks = NULL;
    ms->mark_count = 0;
    stack_free_all(ms);
    hhi_meta_free(ms);
}

void hh_memstack_destroy(hh_memstack *ms) {
    if (ms == NULL) return;
    if (ms->is_thread) {
        hhi_error(HH_E_INVALID_ARG, "hh_memstack_destroy: stack '%s' belongs to a thread; use "
                  "hh_memstack_thread_release", ms->name);
        return;
    }
    stack_destroy(ms, "hh_memstack_destroy");
}

hh_status hh_memstack_trim(hh_memstack *ms) {
    if (ms == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_memstack_trim: stack is NULL");
    if (ms->spare != NULL) {
        hhi_linear_page_put(ms->spare, ms->spare->kind, ms->spare->size);
        ms->spare = NULL;
    }
    /* the bottom chunk goes only when nothing lives in it and no mark refers to it */
    if (ms->mark_count == 0 && ms->chunk_count == 1 && ms->top == hhi_chunk_payload(ms->chunk))
        stack_free_all(ms);
    return HH_OK;
}

hh_memstack *hh_memstack_thread(void) {
    hh_memstack *ms = tls_stack;
    return hh_likely(ms != NULL) ? ms : tls_stack_make();
}

void hh_memstack_thread_release(void) {
    hh_memstack *ms = tls_stack;
    if (ms == NULL) return;
    tls_stack = NULL;
    pthread_setspecific(tls_key, NULL);
    stack_destroy(ms, "hh_memstack_thread_release");
}

/* ---------------------------------------------------------------------------
   Public interface: allocation
--------------------------------------------------------------------------- */
void *hh_memstack_alloc(hh_memstack *ms, size_t size, size_t align) {
    return hhi_memstack_alloc_fast(ms, size, align);
}

void *hh_memstack_alloc_zeroed(hh_memstack *ms, size_t size, size_t align) {
    void *p = hhi_memstack_alloc_fast(ms, size, align);
    if (p != NULL) memset(p, 0, size);
    return p;
}

void *hh_memstack_alloc_ones(hh_memstack *ms, size_t size, size_t align) {
    void *p = hhi_memstack_alloc_fast(ms, size, align);
    if (p != NULL) memset(p, 0xFF, size);
    return p;
}

/* ---------------------------------------------------------------------------
   Public interface: marks
--------------------------------------------------------------------------- */
void hh_mark_push(hh_memstack *ms, hh_mark *mark) {
    if (mark == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_mark_push: mark is NULL");
        return;
    }
    if (ms == NULL) {
        *mark = (hh_mark){ 0 };
        hhi_error(HH_E_INVALID_ARG, "hh_mark_push: stack is NULL");
        return;
    }
    if (hh_unlikely(ms->marks == mark)) {          /* pushing the open top mark again would make a cycle */
        hhi_error(HH_E_INVALID_ARG, "hh_mark_push: this mark is already the open top mark of '%s'", ms->name);
        return;
    }
    *mark = (hh_mark){ .ms = ms, .prev = ms->marks, .top = ms->top, .chunk = ms->chunk,
                       .depth = ms->mark_count + 1, .magic = HHI_MARK_MAGIC };
    ms->marks = mark;
    ms->mark_count++;
    stack_update_fast_end(ms);
}

hh_status hh_mark_pop(hh_mark *mark) {
    if (mark == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_mark_pop: mark is NULL");
    if (mark->magic != HHI_MARK_MAGIC || mark->ms == NULL)
        return hhi_error(HH_E_MARK_ORDER, "hh_mark_pop: mark %p is not open (popped twice or never pushed)",
                         (void *)mark);
    hh_memstack *ms = mark->ms;
    hh_assert_expensive(hh_memstack_check(ms) == HH_OK);
    if (ms->marks != mark && mark->depth >= ms->mark_count)
        return hhi_error(HH_E_MARK_ORDER, "hh_mark_pop: mark %p is not open on stack '%s'", (void *)mark, ms->name);
    if (ms->marks != mark)
        return hhi_error(HH_E_MARK_ORDER,
                         "hh_mark_pop: mark at depth %u popped while %u inner mark%s still open on '%s' (LIFO order)",
                         (unsigned)mark->depth, (unsigned)(ms->mark_count - mark->depth),
                         ms->mark_count - mark->depth == 1 ? " is" : "s are", ms->name);
    stack_unwind(ms, mark->chunk, (uint8_t *)mark->top, true);
    ms->marks = mark->prev;
    ms->mark_count--;
    mark->ms = NULL;
    mark->magic = 0;
    stack_update_fast_end(ms);
    hh_assert_expensive(hh_memstack_check(ms) == HH_OK);
    return HH_OK;
}

void hh_mark_scope_end(hh_mark *mark) {
    if (mark == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_mark_scope_end: mark is NULL");
        return;
    }
    if (mark->magic == HHI_MARK_MAGIC && mark->ms != NULL) (void)hh_mark_pop(mark);
}

/* ---------------------------------------------------------------------------
   Public interface: walker, info, check
--------------------------------------------------------------------------- */
/* Top of chunk c as seen now: the live top for the top chunk. */
static uint8_t *chunk_top(const hh_memstack *ms, hhi_chunk *c) { return c == ms->chunk ? ms->top : c->top; }

hh_status hh_memstack_walk(const hh_memstack *ms, hh_memstack_chunk_fn fn, void *user) {
    if (ms == NULL || fn == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_memstack_walk: %s is NULL", ms == NULL ? "stack" : "fn");
    /* The chain runs newest to oldest; visit oldest first without allocating:
       for index i, walk down from the top (O(n^2), n is small: chunks are 64 KiB). */
    for (uint32_t i = 0; i < ms->chunk_count; i++) {
        hhi_chunk *c = ms->chunk;
        while (c != NULL && c->index != i) c = c->prev;
        if (HH_NEVER(c == NULL)) return hhi_error(HH_E_CORRUPT, "hh_memstack_walk: chunk %u missing", i);
        hh_memstack_chunk_info info = {
            .base = c,
            .size = c->size,
            .header_bytes = HHI_CHUNK_HEADER,
            .used_bytes = (size_t)(chunk_top(ms, c) - hhi_chunk_payload(c)),
            .index = c->index,
            .kind = c->kind,
            .is_top = c == ms->chunk,
        };
        fn(&info, user);
    }
    return HH_OK;
}

hh_status hh_memstack_walk_marks(const hh_memstack *ms, hh_memstack_mark_fn fn, void *user) {
    if (ms == NULL || fn == NULL)
        return hhi_error(HH_E_INVALID_ARG, "hh_memstack_walk_marks: %s is NULL", ms == NULL ? "stack" : "fn");
    for (const hh_mark *m = ms->marks; m != NULL; m = m->prev) {
        const hhi_chunk *c = m->chunk;
        hh_memstack_mark_info info = {
            .depth = m->depth,
            .chunk_index = c != NULL ? c->index : UINT32_MAX,
            .offset = c != NULL ? (size_t)((const uint8_t *)m->top - (const uint8_t *)c) : 0,
        };
        fn(&info, user);
    }
    return HH_OK;
}

hh_status hh_memstack_info_get(const hh_memstack *ms, hh_memstack_info *out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_memstack_info_get: out is NULL");
    if (ms == NULL) {
        memset(out, 0, sizeof *out);  /* the caller may read it without checking the status */
        return hhi_error(HH_E_INVALID_ARG, "hh_memstack_info_get: stack is NULL");
    }
    hh_memstack_info info = {
        .name = ms->name,
        .flags = ms->flags,
        .chunk_count = ms->chunk_count,
        .open_marks = ms->mark_count,
        .reserved_bytes = ms->reserved_bytes,
        .alloc_count = ms->alloc_count,
        .peak_reserved_bytes = ms->peak_reserved_bytes,
        .spare_bytes = ms->spare != NULL ? ms->spare->size : 0,
    };
    for (hhi_chunk *c = ms->chunk; c != NULL; c = c->prev) {
        size_t used = (size_t)(chunk_top(ms, c) - hhi_chunk_payload(c));
        size_t rest = c->size - HHI_CHUNK_HEADER - used;
        info.used_bytes += used;
        info.wasted_bytes += HHI_CHUNK_HEADER;
        if (c == ms->chunk) info.free_bytes = rest;
        else info.wasted_bytes += rest;
    }
    *out = info;
    return HH_OK;
}

hh_status hh_memstack_check(const hh_memstack *ms) {
    if (ms == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_memstack_check: stack is NULL");
    uint32_t n = 0;
    size_t reserved = 0;
    for (hhi_chunk *c = ms->chunk; c != NULL; c = c->prev, n++) {
        if (n > ms->chunk_count) return hhi_error(HH_E_CORRUPT, "memstack '%s': M1 chain longer than count", ms->name);
        if (c->index != ms->chunk_count - 1 - n)
            return hhi_error(HH_E_CORRUPT, "memstack '%s': M1 chunk index %u at position %u", ms->name, c->index, n);
        uint8_t *t = chunk_top(ms, c);
        if (t < hhi_chunk_payload(c) || t > hhi_chunk_end(c))
            return hhi_error(HH_E_CORRUPT, "memstack '%s': M2 top of chunk %u outside its payload", ms->name, c->index);
        reserved += c->size;
    }
    if (n != ms->chunk_count) return hhi_error(HH_E_CORRUPT, "memstack '%s': M1 chain length %u != %u", ms->name, n,
                                               ms->chunk_count);
    if (reserved != ms->reserved_bytes) return hhi_error(HH_E_CORRUPT, "memstack '%s': reserved bytes drift", ms->name);
    if (ms->chunk != NULL && ms->end != hhi_chunk_end(ms->chunk))
        return hhi_error(HH_E_CORRUPT, "memstack '%s': M2 end is not the top chunk's end", ms->name);
    if (ms->chunk == NULL && (ms->top != NULL || ms->end != NULL))
        return hhi_error(HH_E_CORRUPT, "memstack '%s': M2 empty stack with a top", ms->name);
    uint32_t depth = ms->mark_count;
    for (const hh_mark *m = ms->marks; m != NULL; m = m->prev, depth--) {
        if (m->magic != HHI_MARK_MAGIC || m->ms != ms || m->depth != depth)
            return hhi_error(HH_E_CORRUPT, "memstack '%s': M3 open mark at depth %u is damaged", ms->name, depth);
        if (m->chunk != NULL) {
            hhi_chunk *c = ms->chunk;
            while (c != NULL && c != m->chunk) c = c->prev;
            if (c == NULL || (uint8_t *)m->top < hhi_chunk_payload(c) || (uint8_t *)m->top > hhi_chunk_end(c))
                return hhi_error(HH_E_CORRUPT, "memstack '%s': M3 mark at depth %u outside live chunks", ms->name,
                                 depth);
        }
    }
    if (depth != 0) return hhi_error(HH_E_CORRUPT, "memstack '%s': M3 mark chain too short", ms->name);
    bool blocked = (ms->flags & HH_MEMSTACK_ENFORCE_MARKS) != 0 && ms->mark_count == 0;
    if (ms->fast_end != (blocked ? NULL : ms->end))
        return hhi_error(HH_E_CORRUPT, "memstack '%s': M4 fast-path limit is stale", ms->name);
    return HH_OK;
}
