/* hh_error.c -- status strings, thread-local last error, error handler, assert failure.
 *
 * The status text table is indexed by hh_status and static-asserted against
 * HH_STATUS_COUNT so the two cannot drift. The handler pair is process-wide and
 * read with relaxed atomics: installing a handler while other threads fail is
 * safe (they see the old or the new one, never a torn pair of fn and user,
 * because both live in one struct swapped under a tiny spinlock).
 */
#include "hh_error.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hh_assert.h"

/* ---------------------------------------------------------------------------
   Status text
--------------------------------------------------------------------------- */
static const char *const status_text[] = {
    [HH_OK]                = "ok",
    [HH_E_INVALID_ARG]     = "invalid argument",
    [HH_E_STALE_HANDLE]    = "stale handle",
    [HH_E_NO_MEMORY]       = "out of memory",
    [HH_E_PINNED]          = "block is pinned",
    [HH_E_MARK_ORDER]      = "mark popped out of order",
    [HH_E_NO_MARK]         = "no mark open",
    [HH_E_DOUBLE_FREE]     = "double free",
    [HH_E_FOREIGN_POINTER] = "foreign pointer",
    [HH_E_CORRUPT]         = "heap corrupt",
    [HH_E_IO]              = "i/o error",
};
_Static_assert(HH_ARRAY_LEN(status_text) == HH_STATUS_COUNT, "status table out of sync with hh_status");

const char *hh_status_str(hh_status s) {
    if ((unsigned)s >= HH_STATUS_COUNT || status_text[s] == NULL) return "unknown status";
    return status_text[s];
}

int hh_version(void) { return HH_VERSION; }

/* ---------------------------------------------------------------------------
   Last error (thread-local)
--------------------------------------------------------------------------- */
static _Thread_local hh_status last_error = HH_OK;

hh_status hh_last_error(void) { return last_error; }
void hh_clear_last_error(void) { last_error = HH_OK; }
void hhi_set_last_error(hh_status s) { last_error = s; }

static _Thread_local unsigned hold_depth;
static _Thread_local char held[256];            /* the first message held; "" when none */
static _Thread_local hh_status held_status;
static void send(hh_status s, const char *msg);

void hhi_error_hold_begin(void) {
    if (hold_depth++ == 0) held[0] = 0;
}
void hhi_error_hold_end(bool report) {
    hh_assert(hold_depth > 0);
    if (--hold_depth == 0 && report && held[0] != 0) send(held_status, held);
}
const char *hhi_error_held_message(void) { return held; }

/* ---------------------------------------------------------------------------
   Handler
--------------------------------------------------------------------------- */
static void default_handler(hh_status s, const char *message, void *user) {
    (void)user;
    /* One line; fputs on a stack buffer does not allocate on glibc for stderr (unbuffered). */
    char line[320];
    snprintf(line, sizeof line, "hheap: %s: %s\n", hh_status_str(s), message);
    fputs(line, stderr);
}

static struct {
    atomic_flag lock;       /* guards fn+user as a pair; held for a few instructions */
    hh_error_fn fn;         /* NULL: default_handler */
    void       *user;
} handler = { ATOMIC_FLAG_INIT, NULL, NULL };

/* Takes the flag: held for a few instructions, or across a fork in progress;
   yields now and then so a preempted holder (or memcheck's one-at-a-time
   threads) can finish. */
static void handler_acquire(void) {
    for (unsigned spins = 0; atomic_flag_test_and_set_explicit(&handler.lock, memory_order_acquire); spins++)
        if ((spins & 255) == 255) sched_yield();
}

/* fork: the handler flag is held across fork(), so a child never inherits it
   set by a thread that does not exist there (hh_set_error_handler and
   hhi_error would spin forever). */
static void handler_fork_prepare(void) { handler_acquire(); }
static void handler_fork_release(void) { atomic_flag_clear_explicit(&handler.lock, memory_order_release); }

/* Registered before every other module's handlers (lowest constructor
   priority runs first), so its prepare runs last: the flag is held only for
   the fork itself, not while the other prepare handlers wait for their locks
   (a report meanwhile would wait for them all). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor(101))) static void handler_register_atfork(void) {
    pthread_atfork(handler_fork_prepare, handler_fork_release, handler_fork_release);
}
#endif

void hh_set_error_handler(hh_error_fn fn, void *user) {
    handler_acquire();
    handler.fn = fn;
    handler.user = user;
    atomic_flag_clear_explicit(&handler.lock, memory_order_release);
}

hh_status hhi_error(hh_status s, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    last_error = s;
    if (hold_depth > 0) {                              /* the caller reports it (hhi_error_hold_begin) */
        if (held[0] == 0) {
            memcpy(held, msg, sizeof held);
            held_status = s;
        }
        return s;
    }
    send(s, msg);
    return s;
}

/* One message to the registered handler (or the default one). */
static void send(hh_status s, const char *msg) {
    /* A fork child never inherits the flag set (fork handlers above), so
       waiting for it cannot hang. */
    handler_acquire();
    hh_error_fn fn = handler.fn;
    void *user = handler.user;
    atomic_flag_clear_explicit(&handler.lock, memory_order_release);
    if (fn == NULL) {
        fn = default_handler;
        user = NULL;
    }
    fn(s, msg, user);
}

/* ---------------------------------------------------------------------------
   Assertion failure: formats into a stack buffer, writes once, aborts.
--------------------------------------------------------------------------- */
void hhi_assert_fail(const char *expr, const char *file, int line, const char *func) {
    char buf[512];
    snprintf(buf, sizeof buf, "hheap: assertion failed: %s (%s:%d, %s)\n", expr, file, line, func);
    fputs(buf, stderr);
    abort();
}
