/* hh_assert.h -- assertion tiers for our own invariants (never for caller errors).
 *
 *   hh_assert(e)            HH_DEBUG >= 1   cheap
 *   hh_assert_internal(e)   HH_DEBUG >= 2   internal state
 *   hh_assert_expensive(e)  HH_DEBUG >= 3   whole-structure checks
 *   HH_ALWAYS(e) / HH_NEVER(e)  "can't happen, but stay safe in release": evaluate
 *                           to e in release and trap in debug when the claim is false.
 */
#ifndef HH_ASSERT_H
#define HH_ASSERT_H

#include "hh_compiler.h"
#include "hh_config.h"

/* Prints one line without allocating and aborts. */
HH_INTERNAL HH_COLD HH_NORETURN void hhi_assert_fail(const char *expr, const char *file, int line,
                                                    const char *func);

#define hhi_assert_check(e) ((e) ? (void)0 : hhi_assert_fail(#e, __FILE__, __LINE__, __func__))

#if HH_DEBUG >= 1
#  define hh_assert(e) hhi_assert_check(e)
#  define HH_ALWAYS(e) ((e) ? 1 : (hhi_assert_fail(#e, __FILE__, __LINE__, __func__), 0))
#  define HH_NEVER(e)  ((e) ? (hhi_assert_fail("!(" #e ")", __FILE__, __LINE__, __func__), 1) : 0)
#else
#  define hh_assert(e) ((void)0)
#  define HH_ALWAYS(e) (e)
#  define HH_NEVER(e)  (e)
#endif
#if HH_DEBUG >= 2
#  define hh_assert_internal(e) hhi_assert_check(e)
#else
#  define hh_assert_internal(e) ((void)0)
#endif
#if HH_DEBUG >= 3
#  define hh_assert_expensive(e) hhi_assert_check(e)
#else
#  define hh_assert_expensive(e) ((void)0)
#endif

#endif /* HH_ASSERT_H */
