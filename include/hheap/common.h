/* hheap/common.h -- status codes, error reporting, handles and version.
 *
 * Every hheap module includes this header. It defines:
 *   - hh_status: the result of every fallible call, with hh_status_str();
 *   - hh_last_error(): the thread-local status of the last failing call;
 *   - hh_set_error_handler(): where the one-line message of a failure goes
 *     (default: one line on stderr, "hheap: <status>: <message>");
 *   - hh_handle / HH_NULL: the 64-bit handle type shared by the handle table
 *     and the relocatable heap.
 *
 * Error contract: a failing call returns a status (or HH_NULL / NULL), sets
 * hh_last_error() for the calling thread and passes exactly one message to the
 * error handler. It never corrupts or leaks a live block, and moves one only
 * where heap.h says a call may compact (an allocation that found no hole).
 */
#ifndef HHEAP_COMMON_H
#define HHEAP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HH_VERSION_MAJOR 0
#define HH_VERSION_MINOR 1
#define HH_VERSION_PATCH 0
#define HH_VERSION ((HH_VERSION_MAJOR * 10000) + (HH_VERSION_MINOR * 100) + HH_VERSION_PATCH)

/* Symbol visibility: libhheap.so exports only what carries HH_API. */
#if defined(__GNUC__) || defined(__clang__)
#  define HH_API __attribute__((visibility("default")))
#  define HH_NODISCARD __attribute__((warn_unused_result))
#  define HH_LIKELY(x)   __builtin_expect(!!(x), 1)
#  define HH_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#  define HH_LIKELY(x)   (x)
#  define HH_UNLIKELY(x) (x)
#  define HH_API
#  define HH_NODISCARD
#endif

/* Compile-time checks and the null handle in the form each language accepts:
   the public headers are C11 and C++ (C++ has neither _Static_assert nor
   compound literals). */
#ifdef __cplusplus
#  define HH_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#  define HH_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ---------------------------------------------------------------------------
   Status codes
--------------------------------------------------------------------------- */
typedef enum hh_status {
    HH_OK = 0,
    HH_E_INVALID_ARG,     /* size 0 where not allowed, align not a power of two, NULL heap ... */
    HH_E_STALE_HANDLE,    /* handle freed, never issued, or from another heap */
    HH_E_NO_MEMORY,       /* not enough free bytes even after compaction */
    HH_E_PINNED,          /* operation needs the block unpinned */
    HH_E_MARK_ORDER,      /* mark popped out of LIFO order */
    HH_E_NO_MARK,         /* allocation from a mark stack that enforces marks, with none open */
    HH_E_DOUBLE_FREE,
    HH_E_FOREIGN_POINTER, /* pointer not owned by this allocator */
    HH_E_CORRUPT,         /* an integrity check found broken metadata */
    HH_E_IO,
} hh_status;

enum { HH_STATUS_COUNT = HH_E_IO + 1 };

/* Short text for a status ("stale handle"); "unknown status" when out of range. */
HH_API const char *hh_status_str(hh_status s);

/* Status of the last failing hheap call on this thread; HH_OK if none failed.
   Successful calls do not reset it; hh_clear_last_error() does. */
HH_API hh_status hh_last_error(void);
HH_API void      hh_clear_last_error(void);

/* Receives every failure: its status and a one-line message (no newline).
   Called on the failing thread, possibly with a heap lock held: it must not
   call back into the object that failed. */
typedef void (*hh_error_fn)(hh_status s, const char *message, void *user);

/* Installs fn (NULL restores the default stderr handler). Process-wide. */
HH_API void hh_set_error_handler(hh_error_fn fn, void *user);

/* Version of the library actually linked, as HH_VERSION. */
HH_API int hh_version(void);

/* ---------------------------------------------------------------------------
   Handles
   Layout of id (see handles.h): bits 0..23 slot index, bits 24..31 the owning
   table's tag, bits 32..63 the slot's generation. id 0 is the null handle.
--------------------------------------------------------------------------- */
typedef struct hh_handle { uint64_t id; } hh_handle;

#ifdef __cplusplus
#  define HH_NULL (hh_handle{0})
#else
#  define HH_NULL ((hh_handle){0})
#endif
static inline bool hh_is_null(hh_handle h) { return h.id == 0; }
static inline bool hh_handle_eq(hh_handle a, hh_handle b) { return a.id == b.id; }

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_COMMON_H */
