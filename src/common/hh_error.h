/* hh_error.h -- the one error path: hhi_error() sets the thread-local last error
 * and sends one formatted line to the registered handler. Never allocates. */
#ifndef HH_ERROR_H
#define HH_ERROR_H

#include "hheap/common.h"
#include "hh_compiler.h"

/* Reports a failure and returns s, so callers can `return hhi_error(...)`.
   The message is formatted into a fixed stack buffer (truncated at 255 bytes). */
HH_INTERNAL HH_COLD HH_NOINLINE hh_status hhi_error(hh_status s, const char *fmt, ...) HH_PRINTF(2, 3);

/* Sets the thread-local last error without a message (for fast-path failures
   that the caller reports itself). */
HH_INTERNAL void hhi_set_last_error(hh_status s);

/* Holds this thread's reports back (nested: begin/end pairs) while a caller
   makes public calls on the user's behalf and reports their failure itself,
   once, in its own words: hhi_error sets the last error and keeps the first
   message held, which hhi_error_held_message returns ("" when none was).
   hhi_error_hold_end(report): true when the caller will not report (the
   calls succeeded) -- a message held meanwhile (a user callback's, say) is
   sent then, so none is lost; false when the caller reports, quoting it. */
HH_INTERNAL void        hhi_error_hold_begin(void);
HH_INTERNAL void        hhi_error_hold_end(bool report);
HH_INTERNAL const char *hhi_error_held_message(void);

#endif /* HH_ERROR_H */
