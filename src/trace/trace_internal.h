/* trace_internal.h -- what the trace recorder (trace_record.c), reader
 * (trace_read.c) and replayer (trace_replay.c) share: the file layout constants
 * and the FNV-1a hash of the checksum and the summary (include/hheap/trace.h
 * documents the file format).
 *
 * Recorder: every event is encoded into a 64 KiB buffer (kind byte + varints)
 * and the buffer goes to the file with one fwrite when it is nearly full, so
 * the hook costs a few dozen instructions per operation. A running FNV-1a hash
 * over every byte written becomes the trailing checksum.
 *
 * Reader: the whole file is read into memory, the checksum checked first (it
 * catches truncation and bit flips), then the records are decoded twice: once
 * to count and validate them, once to fill the event array.
 *
 * Replay: recorded handle -> new handle through a map indexed by the recorded
 * handle's slot index (the map entry also keeps the recorded id, so a handle
 * that was never allocated, or already freed, is caught).
 *
 * Invariants
 *   T1  a trace file is header, events, end record, checksum -- nothing else.
 *   T2  the hook is installed exactly while the hh_trace is open.
 *   T3  summary moves/bytes_moved count from the open (the heap's totals at open
 *       are subtracted), so a replay on a fresh heap compares equal.
 *   T4  replay map: map[idx].rec == recorded id <=> the recorded handle is live.
 */
#ifndef HH_TRACE_INTERNAL_H
#define HH_TRACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hheap/trace.h"

/* ---------------------------------------------------------------------------
   Layout constants (T1)
--------------------------------------------------------------------------- */
enum {
    TRACE_BUF_BYTES    = 64 * 1024,  /* write buffer */
    TRACE_EVENT_MAX    = 64,         /* upper bound of one encoded record (6 varints + kind) */
    TRACE_HEADER_BYTES = 96,
    TRACE_END          = 0xFF,       /* kind byte of the end record */
    TRACE_ALIGN_PAGE   = 4096,
    TRACE_MAGIC_BYTES  = 8,
};
/* The file's first 8 bytes (the string's NUL is the eighth). A macro, not a
   static array, so that a file of the module that does not use it gets no
   unused-variable warning. */
#define TRACE_MAGIC "HHTRACE"
_Static_assert(sizeof TRACE_MAGIC == TRACE_MAGIC_BYTES, "trace magic is 8 bytes");

/* ---------------------------------------------------------------------------
   FNV-1a (the trailing checksum and the summary's walk hash)
--------------------------------------------------------------------------- */
#define TRACE_FNV_OFFSET 0xcbf29ce484222325ull
#define TRACE_FNV_PRIME  0x100000001b3ull

static inline uint64_t hhi_trace_fnv_bytes(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * TRACE_FNV_PRIME;
    return h;
}

static inline uint64_t hhi_trace_fnv_u64(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xFF)) * TRACE_FNV_PRIME;
    return h;
}

#endif /* HH_TRACE_INTERNAL_H */
