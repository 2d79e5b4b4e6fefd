/* hheap.h -- umbrella header: every public hheap header, nothing else. */
#ifndef HHEAP_H
#define HHEAP_H
#include "hheap/common.h"
#include "hheap/handles.h"
#include "hheap/heap.h"
#include "hheap/defrag.h"
#include "hheap/linear.h"
#include "hheap/binned.h"
#include "hheap/mapdump.h"
#include "hheap/trace.h"
#include "hheap/vheap.h"
#endif
