/* asan_unmap_shim.c -- link-time workaround (-Wl,--wrap=munmap) for the ASan
 * builds of mk/reliability.mk (check-asan, fuzz, must-be-caught under ASan).
 *
 * Why: with HH_TRACK_ASAN=1 the library poisons free ranges of memory it mapped
 * and, today, unmaps some of them still poisoned (heap destroy, binned spans;
 * see /work/notes/bugs.md 2026-12-02 "ASan poison survives hh_heap_destroy").
 * ASan (clang 14) does not clear shadow bytes on munmap, so the next mmap that
 * lands on those addresses -- in any module -- is reported as use-after-poison
 * at its first write, far from the cause. Until the seam (hhi_os_unmap or
 * hhi_os_map in src/common/hh_platform.c) un-poisons itself, every munmap of
 * the statically linked library passes through here first.
 * Build with REL_ASAN_UNMAP_SHIM=0 to see the raw behaviour. */
#include <stddef.h>
#include <sanitizer/asan_interface.h>

int __real_munmap(void *addr, size_t length);
int __wrap_munmap(void *addr, size_t length);

int __wrap_munmap(void *addr, size_t length) {
    ASAN_UNPOISON_MEMORY_REGION(addr, length);
    return __real_munmap(addr, length);
}
