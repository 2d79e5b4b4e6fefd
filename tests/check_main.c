/* check_main.c -- runs every suite (the list is generated from tests/check_*.c).
 * Exit status: 0 when every test passed. CK_FORK=no for Valgrind runs,
 * CK_RUN_SUITE=<name> / CK_RUN_CASE=<name> to run one part (Check's own env). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#define HH_SUITE(name) Suite *hh_test_##name##_suite(void);
#include "suites.h"
#undef HH_SUITE

/* Memcheck (3.19) leak-checks client-request blocks (our mempool chunks) only
   while at least one ordinary malloc block is alive at exit: this reachable
   anchor keeps leaks of pooled blocks reported for every suite. */
static void *leak_check_anchor;

int main(void) {
    leak_check_anchor = malloc(16);
    /* Randomised suites run longer than Check's 4 s default in fork mode. */
    setenv("CK_DEFAULT_TIMEOUT", "600", 0);
    SRunner *sr = srunner_create(NULL);
#define HH_SUITE(name) srunner_add_suite(sr, hh_test_##name##_suite());
#include "suites.h"
#undef HH_SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
    srunner_free(sr);
    (void)leak_check_anchor;
    /* No test run is a failure: a misspelt CK_RUN_SUITE/CK_RUN_CASE (a
       suite list in a make target, or one left in the environment) would
       otherwise pass having checked nothing. */
    if (ran == 0) fputs("hh-tests: no test ran (CK_RUN_SUITE / CK_RUN_CASE name no suite or case)\n", stderr);
    return failed == 0 && ran > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
