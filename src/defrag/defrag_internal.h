/* defrag_internal.h -- state of the incremental defragmentation service.
 * The state hangs off the heap (heap->defrag), created on first use, so two
 * heaps never share a cursor. The mechanism (moving one block) is the heap's
 * (heap_internal.h); this module decides which block goes where and when. */
#ifndef HH_DEFRAG_INTERNAL_H
#define HH_DEFRAG_INTERNAL_H

#include "hheap/defrag.h"
#include "../heap/heap_internal.h"

struct hhi_defrag {
    uint64_t steps;              /* steps run on this heap */
    uint64_t steps_compact;      /* steps that ended with the heap compact */
};

#endif
