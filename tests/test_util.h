/* test_util.h -- shared helpers of the Check suites: error capture, seeded RNG,
 * byte patterns, a scale factor for randomised tests (smaller under Valgrind). */
#ifndef HH_TEST_UTIL_H
#define HH_TEST_UTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hheap/common.h"
#include "hheap/testing.h"
#include "test_rng.h"

/* Prototypes of every hh_test_<name>_suite (generated list). */
#define HH_ARRAY_LEN_T(a) (sizeof(a) / sizeof((a)[0]))
#define HH_SUITE(name) Suite *hh_test_##name##_suite(void);
#include "suites.h"
#undef HH_SUITE

/* Installs a handler that records errors instead of printing them. */
void      hh_test_capture_errors(void);
/* Status of the last captured error (HH_OK if none since the last reset). */
hh_status hh_test_last_captured(void);
/* Number of errors captured since the last reset; and the last message. */
unsigned  hh_test_captured_count(void);
const char *hh_test_last_message(void);
void      hh_test_reset_captured(void);
/* Exactly one error of status `want` since the last reset, its message led by
   "fn:" (the contract of every NULL-argument report); then resets. */
void      hh_test_expect_one(hh_status want, const char *fn);

/* true when the suites run under Valgrind (make check-valgrind sets
   HH_TEST_UNDER_VALGRIND=1): the tool places mappings itself and blurs RSS. */
bool      hh_test_under_valgrind(void);
/* true when each test runs in a process of its own (Check's default; not
   under CK_FORK=no, where every earlier test's mappings are still there). */
bool      hh_test_own_process(void);
/* 1 normally; HH_TEST_SCALE env overrides; under Valgrind 0.1. */
double    hh_test_scale(void);
/* n scaled, at least `min`. */
unsigned  hh_test_scaled(unsigned n, unsigned min);
/* Seed for randomised tests: HH_TEST_SEED env or the given default. */
uint64_t  hh_test_seed(uint64_t dflt);

/* The RNG (hh_rng, hh_rng_make, hh_rng_next, hh_rng_below): tests/test_rng.h. */

/* Fills p[0..n) with the pattern of `key` and checks it; returns the index of
   the first wrong byte or -1. */
void      hh_test_fill(void *p, size_t n, uint64_t key);
long      hh_test_verify(const void *p, size_t n, uint64_t key);

/* The memory checker's view of [p, p+n) (n <= 256): 0 addressable and
   defined, 1 addressable but undefined (memcheck only), 2 no access; -1 no
   checker (not under memcheck, not an ASan build). */
int       hh_test_checker_state(const void *p, size_t n);

/* A fork child's end, with its exit code: through exec, because under
   memcheck a fork child would run a leak check at exit, and a block another
   thread was just handing out (in a register of a thread the child does not
   have) would count as lost. */
_Noreturn void hh_test_child_exit(int code);

#endif

/* ---------------------------------------------------------------------------
   Shadow model of a relocatable heap: what every live handle must contain.
--------------------------------------------------------------------------- */
#include "hheap/heap.h"

typedef struct hh_shadow_obj {
    hh_handle h;
    size_t    size;       /* bytes the test owns (requested) */
    uint64_t  key;        /* pattern key of its contents */
    unsigned  pins;       /* pins the test holds */
    void     *pinned_at;  /* address while pinned */
    size_t    align;
} hh_shadow_obj;

typedef struct hh_shadow {
    hh_shadow_obj *objs;
    size_t count, cap;
} hh_shadow;

void hh_shadow_init(hh_shadow *s);
void hh_shadow_fini(hh_shadow *s);
/* Records a fresh object and fills its bytes with the pattern of key. */
hh_shadow_obj *hh_shadow_add(hh_shadow *s, const hh_heap *heap, hh_handle h, size_t size, size_t align, uint64_t key);
void hh_shadow_remove(hh_shadow *s, size_t i);
/* Checks every byte of every object, its alignment, hh_size and that pinned
   objects have not moved. Fails the running Check test with a message. */
void hh_shadow_verify(const hh_shadow *s, const hh_heap *heap);
