/* handles_internal.h -- private helpers of the handle table (tests may include it
 * to reach into slots, e.g. to age a generation up to the wrap). */
#ifndef HH_HANDLES_INTERNAL_H
#define HH_HANDLES_INTERNAL_H

#include "hheap/handles.h"
#include "../common/hh_compiler.h"

#define HHI_GEN_MAX UINT32_MAX   /* a slot issued with this generation retires on release */

static inline uint64_t hhi_handle_key(uint32_t gen, uint8_t tag) { return ((uint64_t)gen << 8) | tag; }
static inline uint32_t hhi_key_gen(uint64_t key) { return (uint32_t)((key & ~HH_HANDLE_KEY_FREE) >> 8); }
static inline hh_handle hhi_handle_make(uint32_t idx, uint64_t key) {
    return (hh_handle){ ((key & ~HH_HANDLE_KEY_FREE) << HH_HANDLE_INDEX_BITS) | idx };
}

/* Test hook: sets the generation a free or never-used slot will be issued with next. */
HH_INTERNAL void hhi_handles_set_next_gen(hh_handle_table *t, uint32_t idx, uint32_t gen);

#endif /* HH_HANDLES_INTERNAL_H */
