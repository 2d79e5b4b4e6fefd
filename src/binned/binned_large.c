/* binned_large.c -- blocks above 32 KiB (or with an alignment no class can
 * give) mapped straight from the OS.
 *
 * The mapping starts at a 4 MiB boundary with a hhi_blarge header; the user
 * pointer is base + offset (64, or the alignment). The registry byte of the
 * first 4 MiB chunk says LARGE, so free finds the header in O(1) from the
 * pointer by masking, and a pointer whose chunk says LARGE_FREED is a double
 * free (until the OS reuses the address range for something of ours). */
#include "binned_internal.h"

#include "../common/hh_error.h"

void *hhi_large_alloc(size_t size, size_t align, unsigned flags) {
    if (!hhi_binned_init()) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: initialisation failed (OS refused memory)", NULL);
        return NULL;
    }
    size_t page = hhi_os_page_size();
    size_t offset = align > HHI_LARGE_HDR ? align : HHI_LARGE_HDR;
    if (size > SIZE_MAX / 2 - offset - page) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: request too large", NULL);
        return NULL;
    }
    size_t map_size = hh_align_up(offset + size, page);
    char *base = hhi_os_map(map_size, HHI_SPAN_SIZE);
    if (base == NULL) {
        hhi_binned_fail(HH_E_NO_MEMORY, flags, "binned: the OS refused a large block", NULL);
        return NULL;
    }
    hhi_blarge *h = (hhi_blarge *)(void *)base;
    h->magic = HHI_LARGE_MAGIC;
    h->map_size = map_size;
    h->offset = offset;
    h->size = size;
    hhi_lock_acquire(&hhi_bg.large_lock);
    h->prev = NULL;
    h->next = hhi_bg.large;
    if (h->next) h->next->prev = h;
    hhi_bg.large = h;
    hhi_bg.large_count++;
    hhi_bg.large_bytes += map_size - offset;
    hhi_bg.large_mapped += map_size;
    atomic_store_explicit(&hhi_bg.registry[(uintptr_t)base >> HHI_SPAN_SHIFT], HHI_REG_LARGE, memory_order_release);
    hhi_lock_release(&hhi_bg.large_lock);
    void *p = base + offset;
    hh_track_alloc(&hhi_bg, p, map_size - offset);
    if (HH_DEBUG >= 2 && !(flags & HHI_ZERO)) memset(p, HH_FILL_ALLOC, size);
    return p;
}

/* The header of the live large block at a, or NULL. */
static hhi_blarge *large_header(uintptr_t a) {
    hhi_blarge *h = (hhi_blarge *)(a & ~(uintptr_t)HHI_SPAN_MASK);
    if (h->magic != HHI_LARGE_MAGIC || (uintptr_t)h + h->offset != a) return NULL;
    return h;
}

hh_status hhi_large_free(uintptr_t a, unsigned flags) {
    hhi_lock_acquire(&hhi_bg.large_lock);
    if (hhi_registry_get(a) != HHI_REG_LARGE) {
        hhi_lock_release(&hhi_bg.large_lock);
        return hhi_binned_fail(HH_E_DOUBLE_FREE, flags, "hh_bfree: large block %p already freed", (void *)a);
    }
    hhi_blarge *h = large_header(a);
    if (h == NULL) {
        hhi_lock_release(&hhi_bg.large_lock);
        return hhi_binned_fail(HH_E_FOREIGN_POINTER, flags, "hh_bfree: %p is inside a large block, not its start",
                               (void *)a);
    }
    if (h->prev) h->prev->next = h->next;
    else hhi_bg.large = h->next;
    if (h->next) h->next->prev = h->prev;
    hhi_bg.large_count--;
    hhi_bg.large_bytes -= h->map_size - h->offset;
    hhi_bg.large_mapped -= h->map_size;
    h->magic = 0;
    atomic_store_explicit(&hhi_bg.registry[a >> HHI_SPAN_SHIFT], HHI_REG_LARGE_FREED, memory_order_release);
    size_t map_size = h->map_size;
    hhi_lock_release(&hhi_bg.large_lock);
    hh_track_free(&hhi_bg, (void *)a, map_size - h->offset);
    hhi_os_unmap(h, map_size);
    return HH_OK;
}

size_t hhi_large_usable(uintptr_t a) {
    hhi_lock_acquire(&hhi_bg.large_lock);
    size_t n = 0;
    if (hhi_registry_get(a) == HHI_REG_LARGE) {
        hhi_blarge *h = large_header(a);
        if (h != NULL) n = h->map_size - h->offset;
    }
    hhi_lock_release(&hhi_bg.large_lock);
    return n;
}
