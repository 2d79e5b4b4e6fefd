/* binned_purge.c -- the optional background purge thread: decay passes for a
 * program that has gone quiet.
 *
 * Without it, decay (hh_binned_set_decay_ms) runs from the allocator's own
 * slow paths, so a program that frees 400 MB and then waits -- for input, a
 * timer, the next level -- keeps it all resident: no slow path runs to notice
 * that time has passed. This thread runs the passes instead, and while it
 * runs they are its alone: the slow paths do none, so the madvise/munmap
 * calls of a pass never land inside the program's malloc or free (a game's
 * frame thread). A page freed at t is decommitted by about t + 2 periods (it
 * must be dirty at one pass to go at the next; passes come a period apart).
 *
 * Sleep. While decay holds something (hhi_decay_has_work) the thread sleeps
 * until the next pass is due (hhi_bg.decay_next_ns). With nothing held it
 * sleeps without a timeout: it clears hhi_bg.decay_work before it looks,
 * and whatever later goes where decay gives it back notes it
 * (hhi_decay_work_note, on slow paths, under the allocator's locks); the
 * first note after the clear sees `idle` and wakes it, the others cost one
 * load. The flag and `idle` are a store-then-load pair on each side (the
 * thread: idle, then the flag; a noter: the flag, then idle), both
 * sequentially consistent, so one of them sees the other's store: no note
 * is lost. A quiet program's thread thus wakes for nothing. With decay off
 * it neither clears the flag nor says it is idle: only a new period (a
 * kick) or a stop wakes it, never a free.
 *
 * Life cycle (hhi_bg.purge_state):
 *   OFF      no thread; hh_binned_set_purge_thread(false), the library default
 *   WANTED   asked for; the next decay-aware slow path after decay came to
 *            hold HHI_PURGE_START_BYTES starts it (lazily: a program that
 *            never frees much never gets a thread, and nothing is started
 *            from a constructor or under an allocator lock)
 *   STARTING one slow path is inside pthread_create (which may allocate:
 *            the nested calls see STARTING and do not start another)
 *   RUNNING  the thread exists
 * fork: the child has no thread; a RUNNING or STARTING parent leaves the
 * child WANTED, so the child starts its own on the first slow path after it
 * freed something decay can give back while decay holds
 * HHI_PURGE_START_BYTES (what it inherited counts too).
 * Exit: a destructor stops and joins the thread, so nothing runs in it while
 * the process tears down and memcheck sees no thread left behind.
 *
 * What it touches: only what a decay pass touches -- empty pages (no block
 * handed out to a cache or a user), pool pages and cached large mappings,
 * under the allocator's own locks. Never a thread cache, never a live block.
 * All signals are blocked in it: process signals go to the program's threads.
 */
#include "binned_internal.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>


/* The thread's bookkeeping. `lock` guards current/kick and the changes of
   hhi_bg.purge_state that start or end the thread; the thread holds it
   only around its waits. Each thread gets its own id and runs while
   `current` holds it: a stop sets current to 0 and a newer start to the
   newer id, so a thread told to stop can never be revived by a newer
   start (a plain stop flag, cleared by the next start, could be). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;            /* stop or kick (CLOCK_MONOTONIC timed waits) */
    pthread_cond_t passed;          /* a pass ended (hhi_purge_wait_pass) */
    bool cond_ready;                /* wake/passed set up with the monotonic clock */
    uint64_t current;               /* id of the thread that should run, 0: none */
    uint64_t last_id;               /* ids handed out */
    bool kick;                      /* run a pass now (tests) */
    _Atomic bool idle;              /* asleep without a timeout: a note must wake it */
    pthread_t tid;
    _Atomic uint64_t passes;        /* passes the thread has run */
} purge = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Sets up the condition variables on the monotonic clock (purge.lock held):
   the wall clock may jump. */
static void purge_cond_init(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&purge.wake, &attr);
    pthread_cond_init(&purge.passed, &attr);
    pthread_condattr_destroy(&attr);
    purge.cond_ready = true;
}

/* When the next pass is due, as an absolute CLOCK_MONOTONIC time: at most a
   period away (the decay clock, hhi_now_ns, may be a test's virtual one),
   1 ms at least (a pass that found the trim lock taken moved the due time
   on all the same). `fresh` (the thread just started, or a note ended an
   idle spell): a whole period, whatever the due time says. The program
   has just begun to free what decay now holds, too young for a pass to
   give back; a pass at once would only walk every transfer batch back to
   its pages while the program is still freeing, contending for the class
   locks (the `release` workload: 120-260 futex calls instead of about 15
   in three runs of ten; the thread that looked every half period first
   looked half a period after its start). */
static struct timespec purge_next_wake(uint64_t period, bool fresh) {
    uint64_t now = hhi_now_ns(), due = atomic_load_explicit(&hhi_bg.decay_next_ns, memory_order_relaxed);
    uint64_t wait = due > now ? due - now : 0;
    if (wait > period || fresh || due == 0) wait = period;   /* 0: no period started yet */
    if (wait < 1000000u) wait = 1000000u;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + wait % 1000000000u;
    ts.tv_sec += (time_t)(wait / 1000000000u + ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    return ts;
}

#if HH_TESTING
_Atomic uint64_t hhi_test_purge_wakeups;
#endif

static void *purge_main(void *arg) {
    uint64_t mine = (uint64_t)(uintptr_t)arg;
    bool fresh = true;
    for (;;) {
        /* Decay off: nothing to do until hh_binned_set_decay_ms gives a
           period (it nudges: a kick) or a stop. The thread then neither
           clears the flag nor says it is idle, so frees do not wake it:
           every free into a cache would, once it had woken (256 wake-ups
           in 256 frees). */
        uint64_t period = atomic_load_explicit(&hhi_bg.decay_ns, memory_order_relaxed);
        bool off = period == 0;
        /* Cleared before looking (see Sleep above). */
        if (!off) atomic_store(&hhi_bg.decay_work, false);
        bool idle = !off && !hhi_decay_has_work();
        struct timespec until = off || idle ? (struct timespec){ 0, 0 } : purge_next_wake(period, fresh);
        fresh = false;
        pthread_mutex_lock(&purge.lock);
        if (idle) atomic_store(&purge.idle, true);
        while (purge.current == mine && !purge.kick) {
            if (off) {
                pthread_cond_wait(&purge.wake, &purge.lock);
            } else if (!idle) {
                if (pthread_cond_timedwait(&purge.wake, &purge.lock, &until) != 0) break;   /* timed out */
            } else if (atomic_load(&hhi_bg.decay_work)) {
                fresh = true;   /* noted: look again, the first pass a period on */
                break;
            } else {
                pthread_cond_wait(&purge.wake, &purge.lock);
            }
        }
        atomic_store(&purge.idle, false);
        HHI_TEST_COUNT(hhi_test_purge_wakeups);
        bool stop = purge.current != mine;
        purge.kick = false;
        pthread_mutex_unlock(&purge.lock);
        if (stop) return NULL;
        if (fresh) continue;
        hhi_decay_pass(false);
        /* A pass stopped at its 1 ms budget: finish it in more slices (the
           locks are let go between them, so allocating threads get in). */
        for (unsigned slices = 0; slices < 4096 && hhi_decay_continue(); slices++)
            if (hhi_purge_state() != HHI_PURGE_RUNNING) break;
        pthread_mutex_lock(&purge.lock);
        atomic_fetch_add(&purge.passes, 1);
        pthread_cond_broadcast(&purge.passed);
        pthread_mutex_unlock(&purge.lock);
    }
}

/* The state has just become WANTED (hh_binned_set_purge_thread): the next
   slow path counts what decay holds (hhi_decay_maybe), noted or not, since
   decay may have come to hold much while nothing was counted, the thread
   being off. Release: see purge_worth_starting. */
static void purge_count_soon(void) {
    atomic_store_explicit(&hhi_bg.purge_seen, HHI_PURGE_START_BYTES, memory_order_relaxed);
    atomic_fetch_add_explicit(&hhi_bg.decay_noted, 1, memory_order_release);
}

/* Stops and joins the thread if there is one; the state becomes `then`. */
static void purge_stop(int then) {
    pthread_mutex_lock(&purge.lock);
    int st = atomic_load(&hhi_bg.purge_state);
    /* STARTING: another thread is inside pthread_create; it sees `then`
       and stops what it started. */
    atomic_store(&hhi_bg.purge_state, then);
    pthread_t tid = purge.tid;
    if (st == HHI_PURGE_RUNNING) {
        purge.current = 0;
        pthread_cond_broadcast(&purge.wake);
    }
    pthread_mutex_unlock(&purge.lock);
    if (st == HHI_PURGE_RUNNING) pthread_join(tid, NULL);
}

void hhi_purge_start(void) {
    int expect = HHI_PURGE_WANTED;
    if (!atomic_compare_exchange_strong(&hhi_bg.purge_state, &expect, HHI_PURGE_STARTING)) return;
    pthread_mutex_lock(&purge.lock);
    if (!purge.cond_ready) purge_cond_init();
    purge.kick = false;
    uint64_t id = ++purge.last_id;
    purge.current = id;
    pthread_mutex_unlock(&purge.lock);
    /* Created with every signal blocked (it inherits the mask), then the
       caller's mask is put back. pthread_create may call malloc: the nested
       slow paths see STARTING. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t tid;
    bool made = pthread_create(&tid, NULL, purge_main, (void *)(uintptr_t)id) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_lock(&purge.lock);
    expect = HHI_PURGE_STARTING;
    if (made && atomic_compare_exchange_strong(&hhi_bg.purge_state, &expect, HHI_PURGE_RUNNING)) {
        purge.tid = tid;
        pthread_mutex_unlock(&purge.lock);
        return;
    }
    /* No thread could be made: decay stays with the slow paths (OFF, no
       retry on every call). Or the state changed meanwhile (a stop, perhaps
       a new start): it says what to do, and this thread goes. */
    if (!made) {
        expect = HHI_PURGE_STARTING;
        atomic_compare_exchange_strong(&hhi_bg.purge_state, &expect, HHI_PURGE_OFF);
    }
    if (purge.current == id) purge.current = 0;   /* else a newer start owns it */
    pthread_cond_broadcast(&purge.wake);
    pthread_mutex_unlock(&purge.lock);
    if (made) pthread_join(tid, NULL);
}

void hhi_decay_work_noted(void) {
    /* The flag, then idle (both seq_cst): the thread stores idle, then
       loads the flag, so a thread about to sleep sees this note or this
       call sees it idle and wakes it (see Sleep above). */
    atomic_store(&hhi_bg.decay_work, true);
    if (!atomic_load(&purge.idle)) return;
    pthread_mutex_lock(&purge.lock);
    pthread_cond_broadcast(&purge.wake);
    pthread_mutex_unlock(&purge.lock);
}

void hhi_purge_nudge(void) {
    if (atomic_load(&hhi_bg.purge_state) != HHI_PURGE_RUNNING) return;
    pthread_mutex_lock(&purge.lock);
    purge.kick = true;
    pthread_cond_broadcast(&purge.wake);
    pthread_mutex_unlock(&purge.lock);
}

/* fork: the purge lock is held across fork() (after every allocator lock),
   so the child's copy is in a known state. */
void hhi_purge_fork_prepare(void) { pthread_mutex_lock(&purge.lock); }
void hhi_purge_fork_parent(void) { pthread_mutex_unlock(&purge.lock); }
/* The thread does not exist in the child: fresh condition variables (the
   parent's may record its waiter) and WANTED if the parent had one -- started
   once the child itself gives memory to decay and decay holds
   HHI_PURGE_START_BYTES (a child that only execs, as a shell's do, never
   pays for a thread). */
void hhi_purge_fork_child(void) {
    int st = atomic_load(&hhi_bg.purge_state);
    if (st == HHI_PURGE_RUNNING || st == HHI_PURGE_STARTING) atomic_store(&hhi_bg.purge_state, HHI_PURGE_WANTED);
    /* The child counts after its first note of its own (whatever it
       inherited: the parent's thread noted nothing, or a parent's thread
       was inside a count, its claimed notes and its flag now the child's). */
    atomic_store_explicit(&hhi_bg.purge_seen, HHI_PURGE_START_BYTES, memory_order_relaxed);
    atomic_store_explicit(&hhi_bg.decay_noted, 0, memory_order_relaxed);
    atomic_store_explicit(&hhi_bg.purge_counting, false, memory_order_relaxed);
    atomic_store_explicit(&hhi_bg.decay_work, false, memory_order_relaxed);
    atomic_store(&purge.idle, false);
    if (purge.cond_ready) purge_cond_init();
    purge.kick = false;
    pthread_mutex_unlock(&purge.lock);
}

#if HH_TESTING
bool hhi_purge_running(void) { return atomic_load(&hhi_bg.purge_state) == HHI_PURGE_RUNNING; }
bool hhi_purge_idle(void) { return atomic_load(&purge.idle); }

/* Kicks the thread until it has ended a pass that began after this call
   (a pass under way at the kick may have begun before it): returns the
   thread's pass count, or the old count at once when no thread runs. */
uint64_t hhi_purge_kick_and_wait(void) {
    pthread_mutex_lock(&purge.lock);
    uint64_t want = atomic_load(&purge.passes) + 2;
    while (atomic_load(&purge.passes) < want && atomic_load(&hhi_bg.purge_state) == HHI_PURGE_RUNNING) {
        purge.kick = true;
        pthread_cond_broadcast(&purge.wake);
        pthread_cond_wait(&purge.passed, &purge.lock);
    }
    uint64_t now = atomic_load(&purge.passes);
    pthread_mutex_unlock(&purge.lock);
    return now;
}
#endif

/* Process exit (or the library's unload): no thread outlives us. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((destructor)) static void purge_at_exit(void) { purge_stop(HHI_PURGE_OFF); }
#endif

hh_status hh_binned_set_purge_thread(bool on) {
    if (on) {
        int expect = HHI_PURGE_OFF;
        if (atomic_compare_exchange_strong(&hhi_bg.purge_state, &expect, HHI_PURGE_WANTED)) purge_count_soon();
    } else {
        purge_stop(HHI_PURGE_OFF);
    }
    return HH_OK;
}

bool hh_binned_purge_thread(void) { return atomic_load(&hhi_bg.purge_state) != HHI_PURGE_OFF; }
