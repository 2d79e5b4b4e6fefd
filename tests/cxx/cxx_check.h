/* cxx_check.h -- the C++ tests' tiny harness (Check is a C library): CHECK
 * counts and reports without stopping, capture() records what the error
 * handler was sent. Each test's main() ends with cxx_check_summary(). */
#ifndef HH_CXX_CHECK_H
#define HH_CXX_CHECK_H

#include <cstdio>

#include "hheap/common.h"

static int failures, checks;
#define CHECK(cond)                                                                      \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            failures++;                                                                  \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                                \
    } while (0)

static hh_status last_reported = HH_OK;   /* the last status sent to the error handler */
static unsigned reports;                  /* how many were sent */
static void capture(hh_status s, const char *, void *) {
    last_reported = s;
    reports++;
}

/* Prints "<name> (<compiler>, C++ <version>): N passed, N failed"; the exit status. */
static int cxx_check_summary(const char *name) {
#if defined(__clang__)
    const char *compiler = "clang++";
#else
    const char *compiler = "g++";
#endif
    std::printf("%s (%s, C++ %ld): %d passed, %d failed\n", name, compiler, static_cast<long>(__cplusplus),
                checks - failures, failures);
    return failures ? 1 : 0;
}

#endif
