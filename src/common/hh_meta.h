/* hh_meta.h -- the seam for library-owned metadata memory, and the test fault
 * injector shared by it and the OS seam.
 *
 * hhi_meta_alloc/free wrap malloc/free for handle arrays, tables and chunk
 * lists (never for user blocks). With HH_TESTING=1, hh_test_fail_after(n) makes
 * the n-th following call of hhi_meta_alloc or of the OS seam fail. */
#ifndef HH_META_H
#define HH_META_H

#include <stdbool.h>
#include <stddef.h>

#include "hh_compiler.h"
#include "hh_config.h"

/* Zeroed metadata memory; NULL on failure (OS or injected). Does not report. */
HH_INTERNAL void *hhi_meta_alloc(size_t size);
HH_INTERNAL void  hhi_meta_free(void *p);

#if HH_TESTING
/* true if the fault injector says this call must fail (counts the call). */
HH_INTERNAL bool hhi_fault_fire(void);
#  define hhi_fault() hhi_fault_fire()
#else
#  define hhi_fault() false
#endif

#endif /* HH_META_H */
