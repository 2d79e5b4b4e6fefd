/* hheap/testing.h -- the test seam: fault injection for test builds.
 *
 * These functions exist only in libraries built with -DHH_TESTING=1 (the test
 * build of `make check`); a release library neither defines nor exports them
 * (`make check-exports` verifies it), so a program that calls them links only
 * against a test build. Not part of hheap.h.
 *
 * hh_test_fail_after(n): the n-th following metadata allocation or OS call
 * (mmap/madvise) fails, counting from 0; -1 disarms. Every failure path of the
 * library can so be reached deterministically; a call that fails this way must
 * report HH_E_NO_MEMORY and leave everything as it was.
 * hh_test_fail_count(): how many injected failures have fired since the last arm.
 */
#ifndef HHEAP_TESTING_H
#define HHEAP_TESTING_H

#include "hheap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

HH_API void     hh_test_fail_after(long n);
HH_API unsigned hh_test_fail_count(void);

#ifdef __cplusplus
}
#endif
#endif /* HHEAP_TESTING_H */
