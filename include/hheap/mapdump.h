/* hheap/mapdump.h -- heap-map dumps: a per-frame record of the relocatable heap,
 * the binned region and the mark stacks, written to a `.hhmap` file and read
 * back by tools (hh-viz) and tests.
 *
 * How to use (writer)
 *   hh_mapdump_writer *w;
 *   hh_mapdump_create("run.hhmap", &(hh_mapdump_desc){ .heap = heap,
 *                      .flags = HH_MAPDUMP_BINNED }, &w);
 *   for (;;) {                                   // the game loop
 *       ...
 *       hh_defrag_report r = hh_defrag_step(heap, 16);
 *       hh_mapdump_write_frame(w, frame_no, &r); // after the step: its moves are in the journal
 *   }
 *   hh_mapdump_close(w);                         // writes the end record
 *
 * How to use (reader)
 *   hh_mapdump_reader *r;
 *   hh_mapdump_open("run.hhmap", &r);
 *   const hh_mapdump_frame *f;
 *   while (hh_mapdump_next(r, &f) == HH_OK && f != NULL) { ... f->blocks[i] ... }
 *   hh_mapdump_reader_close(r);
 *
 * The file format is specified in docs/hhmap.md (version HH_MAPDUMP_VERSION_MAJOR.
 * HH_MAPDUMP_VERSION_MINOR). Every frame is one self-contained record with a
 * length and a CRC-32, written whole and flushed: a crash loses at most the
 * frame being written. A reader rejects another major version (HH_E_IO, the
 * message names both versions), and reports a corrupt or truncated file with
 * HH_E_CORRUPT and a message giving the byte offset; it never reads outside
 * what it has read in, whatever the file holds.
 *
 * NULL arguments, in every function: a NULL writer, reader, path, desc or out
 * is reported once (HH_E_INVALID_ARG, the message led by the function's name)
 * and changes nothing; an out the call was given is cleared (NULL / all zero)
 * before any early return. hh_mapdump_close(NULL) and
 * hh_mapdump_reader_close(NULL) are no-ops (like free). Writers and readers
 * are not thread-safe (one thread at a time), so their getters take no lock;
 * the writer reads the heap through hh_heap_walk and the other heap getters,
 * which take the heap's lock.
 *
 * hh_mapdump_desc defaults (zero fields):
 *   heap            required, unless vheap is given instead
 *   vheap           NULL; a virtual heap (vheap.h) to record instead of heap: every
 *                   frame then holds its blocks (a range reserved by an open pass is
 *                   a live block with tag 0), the done moves of its last ended pass
 *                   (hh_vdefrag_journal) as the frame's moves, and no service section
 *   flags           0: heap only; HH_MAPDUMP_BINNED adds the binned region
 *   memstacks       NULL / memstack_count 0: no mark-stack section
 *   tag_names       NULL: tags are shown as numbers; else tag_names[tag] labels tag
 *   label           NULL: ""; a free text (program, seed ...) stored in the file header
 */
#ifndef HHEAP_MAPDUMP_H
#define HHEAP_MAPDUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"
#include "hheap/heap.h"
#include "hheap/defrag.h"
#include "hheap/linear.h"
#include "hheap/binned.h"
#include "hheap/vheap.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    HH_MAPDUMP_VERSION_MAJOR = 1,      /* a reader refuses any other major version */
    HH_MAPDUMP_VERSION_MINOR = 1,      /* minor versions only append fields or sections (1.1: virtual heaps) */
    HH_MAPDUMP_MAX_STACKS    = 8,      /* mark stacks one writer follows */
    HH_MAPDUMP_MAX_TAGS      = 64,     /* tag names stored in the header */
    HH_MAPDUMP_NAME_BYTES    = 32,     /* bytes of a stored name, terminator included */
    HH_MAPDUMP_LABEL_BYTES   = 128,    /* bytes of the stored label, terminator included */
};

enum hh_mapdump_flags {
    HH_MAPDUMP_BINNED = 1u << 0,       /* add the binned region (hh_binned_walk) to every frame */
    HH_MAPDUMP_VIRTUAL = 1u << 1,      /* set by the writer in the file header (never in a desc):
                                          the frames record an hh_vheap (desc.vheap) */
};

/* ---------------------------------------------------------------------------
   Writer
--------------------------------------------------------------------------- */
typedef struct hh_mapdump_writer hh_mapdump_writer;

typedef struct hh_mapdump_desc {          /* zero-initialise; see the defaults table above */
    const hh_heap      *heap;              /* the relocatable heap to record (required) */
    uint32_t            flags;             /* hh_mapdump_flags */
    hh_memstack *const *memstacks;         /* mark stacks to record (pointers copied) */
    uint32_t            memstack_count;    /* <= HH_MAPDUMP_MAX_STACKS */
    const char *const  *tag_names;         /* tag_names[tag]: label of a tag (copied, truncated) */
    uint32_t            tag_name_count;    /* <= HH_MAPDUMP_MAX_TAGS */
    const char         *label;             /* free text for the file header (copied, truncated) */
    const hh_vheap     *vheap;             /* instead of heap: record a virtual heap (vheap.h); exactly
                                              one of heap and vheap is set (format 1.1) */
} hh_mapdump_desc;

/* Creates (truncates) path and writes the file header. HH_E_INVALID_ARG for a bad
   desc, HH_E_IO if the file cannot be created or written, HH_E_NO_MEMORY. */
HH_API hh_status hh_mapdump_create(const char *path, const hh_mapdump_desc *desc, hh_mapdump_writer **out);
/* Appends one frame: every block of the heap (offset order, moved-this-frame
   set for the blocks in hh_defrag_journal), the journal's moves, the metrics,
   and the binned and mark-stack sections the desc asked for; then flushes.
   step: the report of this frame's defrag step (NULL: none ran; its time is 0).
   Must not run concurrently with mutations of the heap. HH_E_IO (the writer
   stays usable for close), HH_E_NO_MEMORY, HH_E_INVALID_ARG. */
HH_API hh_status hh_mapdump_write_frame(hh_mapdump_writer *w, uint64_t frame, const hh_defrag_report *step);
/* Writes the end record, closes the file and frees w. Returns HH_E_IO if any
   write since create failed (the message says which). NULL: HH_OK. */
HH_API hh_status hh_mapdump_close(hh_mapdump_writer *w);
/* Bytes written so far (header and records); 0 + HH_E_INVALID_ARG for NULL. */
HH_API uint64_t  hh_mapdump_bytes_written(const hh_mapdump_writer *w);

/* ---------------------------------------------------------------------------
   Metrics of one frame (computed by the writer from hh_heap_walk)
   A hole is a free block below the top free region (the free block that ends
   the heap, if any); a heap whose only free block is at the top has 0 holes.
--------------------------------------------------------------------------- */
typedef struct hh_mapdump_metrics {
    uint64_t managed_bytes;        /* used_bytes + free_bytes */
    uint64_t used_bytes;           /* whole live and pinned blocks */
    uint64_t free_bytes;           /* whole free blocks, the top region included */
    uint64_t largest_free;         /* largest free block, the top region included */
    uint64_t largest_hole;         /* largest hole (0 if none) */
    uint64_t hole_bytes;           /* bytes in holes */
    uint64_t compaction_debt;      /* bytes of live and pinned blocks above the lowest hole
                                      (as hh_defrag_metrics.debt_bytes) */
    uint64_t high_water;           /* end offset of the highest live or pinned block */
    uint32_t live_blocks;          /* live + pinned */
    uint32_t pinned_blocks;
    uint32_t free_blocks;          /* holes + the top region */
    uint32_t holes;
    double   fragmentation;        /* 1 - largest_free / free_bytes (0 if no free bytes) */
    double   fragmentation_sq;     /* 1 - sum(free_i^2) / free_bytes^2: 0 = one free block */
    uint32_t moves;                /* moves in this frame's journal */
    uint64_t bytes_moved;          /* whole-block bytes of those moves */
    uint64_t defrag_ns;            /* elapsed_ns of the frame's step (0 if none) */
    uint64_t total_moves;          /* hh_heap_stats totals at the time of the frame */
    uint64_t total_bytes_moved;
} hh_mapdump_metrics;

/* ---------------------------------------------------------------------------
   Reader: one frame at a time; the frame's arrays stay valid until the next
   hh_mapdump_next or hh_mapdump_reader_close.
--------------------------------------------------------------------------- */
typedef struct hh_mapdump_reader hh_mapdump_reader;

typedef struct hh_mapdump_block {
    uint64_t offset, size;         /* whole block, from the managed start */
    uint32_t tag;                  /* 0 for free blocks */
    uint8_t  state;                /* HH_BLOCK_FREE / LIVE / PINNED */
    bool     moved;                /* moved by this frame's defrag step */
} hh_mapdump_block;

typedef struct hh_mapdump_move {
    uint64_t src_offset, dst_offset, size;   /* as hh_move_record */
} hh_mapdump_move;

typedef struct hh_mapdump_region {         /* one binned page or large block (hh_binned_region) */
    uint64_t size;                 /* bytes */
    uint32_t block_size;           /* class block size, usable bytes of a large block */
    uint32_t capacity, live, cached;
    int16_t  size_class;           /* -1 unless kind is HH_BINNED_REGION_CLASS */
    uint8_t  kind;                 /* HH_BINNED_REGION_* */
    bool     committed;
} hh_mapdump_region;

typedef struct hh_mapdump_chunk {           /* one mark-stack chunk (hh_memstack_chunk_info) */
    uint64_t size, header_bytes, used_bytes;
    uint8_t  kind;                 /* hh_lchunk_kind */
    bool     is_top;
} hh_mapdump_chunk;

typedef struct hh_mapdump_mark {            /* one open mark, innermost first */
    uint32_t depth, chunk_index;   /* chunk_index UINT32_MAX: the stack was empty at push */
    uint64_t offset;               /* saved top, bytes from the chunk's base */
} hh_mapdump_mark;

typedef struct hh_mapdump_stack {
    char     name[HH_MAPDUMP_NAME_BYTES];
    uint64_t reserved_bytes, used_bytes, wasted_bytes, free_bytes, peak_reserved_bytes;
    uint64_t alloc_count;
    uint32_t chunk_count, mark_count;
    const hh_mapdump_chunk *chunks;
    const hh_mapdump_mark  *marks;
} hh_mapdump_stack;

/* The defrag service's own view (hh_defrag_metrics_get) at the time of the frame. */
typedef struct hh_mapdump_service {
    uint64_t frames_to_compact;    /* estimate: steps of the last step's size to close the holes */
    uint64_t stuck_holes;          /* holes the service found unclosable (under pinned blocks ...) */
    uint64_t stuck_hole_bytes;
    uint64_t blocking_pinned_bytes;/* pinned blocks right above those holes */
    uint64_t decommitted_bytes;    /* top-region bytes given back to the OS */
    uint64_t compact_steps;        /* steps so far that ended compact */
    uint64_t steps;                /* steps so far */
    bool     trigger_active;       /* hysteresis trigger state */
} hh_mapdump_service;

typedef struct hh_mapdump_frame {
    uint64_t                 frame;          /* the number given to hh_mapdump_write_frame */
    uint64_t                 managed_bytes;  /* size of the address space the blocks tile */
    hh_mapdump_metrics       metrics;
    bool                     has_service;    /* the defrag-service section was present */
    hh_mapdump_service       service;
    size_t                   block_count;
    const hh_mapdump_block  *blocks;         /* offset order */
    size_t                   move_count;
    const hh_mapdump_move   *moves;          /* journal order */
    bool                     has_binned;     /* the binned section was present */
    size_t                   region_count;
    const hh_mapdump_region *regions;
    uint32_t                 stack_count;
    const hh_mapdump_stack  *stacks;
} hh_mapdump_frame;

typedef struct hh_mapdump_file_info {
    uint32_t version_major, version_minor;
    uint64_t managed_bytes;        /* of the heap at create */
    char     label[HH_MAPDUMP_LABEL_BYTES];
    uint32_t tag_name_count;
    char     tag_names[HH_MAPDUMP_MAX_TAGS][HH_MAPDUMP_NAME_BYTES];
    uint32_t flags;                /* writer flags of the header (HH_MAPDUMP_BINNED, HH_MAPDUMP_VIRTUAL) */
} hh_mapdump_file_info;

/* Opens a dump and checks its header. HH_E_IO (cannot open, not an .hhmap
   file, other major version), HH_E_CORRUPT (bad header), HH_E_NO_MEMORY. */
HH_API hh_status hh_mapdump_open(const char *path, hh_mapdump_reader **out);
/* As hh_mapdump_open over bytes in memory (not copied: keep them alive). */
HH_API hh_status hh_mapdump_open_memory(const void *data, size_t bytes, hh_mapdump_reader **out);
/* The file header. HH_E_INVALID_ARG on NULL (*out zeroed when only r is). */
HH_API hh_status hh_mapdump_info(const hh_mapdump_reader *r, hh_mapdump_file_info *out);
/* Reads the next frame into *out. At the end record: HH_OK and *out = NULL.
   HH_E_CORRUPT (bad record, checksum mismatch, or the file ends without an end
   record: truncated) with *out = NULL; every later call fails the same way.
   r or out NULL: HH_E_INVALID_ARG (*out = NULL when out is not). */
HH_API hh_status hh_mapdump_next(hh_mapdump_reader *r, const hh_mapdump_frame **out);
/* Goes back to the first frame. HH_E_IO if the file cannot be re-read. */
HH_API hh_status hh_mapdump_rewind(hh_mapdump_reader *r);
/* Frames the end record says were written (0 until the end record is read;
   0 + HH_E_INVALID_ARG for NULL). */
HH_API uint64_t  hh_mapdump_frames_written(const hh_mapdump_reader *r);
/* Closes the reader. NULL is a no-op. */
HH_API void      hh_mapdump_reader_close(hh_mapdump_reader *r);

/* Short name of a block state ("free", "live", "pinned"). */
HH_API const char *hh_mapdump_state_str(int state);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_MAPDUMP_H */
