/* handles_internal.h -- private to the handle table: a test hook (tests may
 * include it to reach into slots, e.g. to age a generation up to the wrap).
 * The inline issue/release fast paths are public, in hheap/handles.h. */
#ifndef HH_HANDLES_INTERNAL_H
#define HH_HANDLES_INTERNAL_H

#include "hheap/handles.h"
#include "../common/hh_compiler.h"

/* Test hook: sets the generation a free or never-used slot will be issued with next. */
HH_INTERNAL void hhi_handles_set_next_gen(hh_handle_table *t, uint32_t idx, uint32_t gen);

#endif /* HH_HANDLES_INTERNAL_H */
