/* test_util.c -- see test_util.h. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hh_status captured_status = HH_OK;
static unsigned captured_count = 0;
static char captured_msg[320];

static void capture(hh_status s, const char *message, void *user) {
    (void)user;
    captured_status = s;
    captured_count++;
    snprintf(captured_msg, sizeof captured_msg, "%s", message);
}

void hh_test_capture_errors(void) {
    hh_test_reset_captured();
    hh_set_error_handler(capture, NULL);
}
hh_status hh_test_last_captured(void) { return captured_status; }
unsigned hh_test_captured_count(void) { return captured_count; }
const char *hh_test_last_message(void) { return captured_msg; }
void hh_test_reset_captured(void) {
    captured_status = HH_OK;
    captured_count = 0;
    captured_msg[0] = 0;
    hh_clear_last_error();
}

void hh_test_expect_one(hh_status want, const char *fn) {
    ck_assert_msg(captured_count == 1, "%s: %u messages, want 1", fn, captured_count);
    ck_assert_int_eq(captured_status, want);
    ck_assert_int_eq(hh_last_error(), want);
    size_t n = strlen(fn);
    ck_assert_msg(strncmp(captured_msg, fn, n) == 0 && captured_msg[n] == ':', "message \"%s\" is not led by %s",
                  captured_msg, fn);
    hh_test_reset_captured();
}

double hh_test_scale(void) {
    const char *e = getenv("HH_TEST_SCALE");
    if (e && *e) return atof(e);
    return hh_test_under_valgrind() ? 0.1 : 1.0;
}

bool hh_test_under_valgrind(void) {
    const char *e = getenv("HH_TEST_UNDER_VALGRIND");
    return e != NULL && *e == '1';
}

bool hh_test_own_process(void) {
    const char *e = getenv("CK_FORK");
    return e == NULL || strcmp(e, "no") != 0;
}

unsigned hh_test_scaled(unsigned n, unsigned min) {
    double v = (double)n * hh_test_scale();
    return v < (double)min ? min : (unsigned)v;
}

uint64_t hh_test_seed(uint64_t dflt) {
    const char *e = getenv("HH_TEST_SEED");
    return (e && *e) ? strtoull(e, NULL, 0) : dflt;
}

static inline uint8_t pattern_byte(uint64_t key, size_t i) {
    uint64_t x = key * 0x9E3779B97F4A7C15ULL + (uint64_t)(i / 8) * 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 31;
    return (uint8_t)(x >> ((i % 8) * 8));
}

void hh_test_fill(void *p, size_t n, uint64_t key) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = pattern_byte(key, i);
}

long hh_test_verify(const void *p, size_t n, uint64_t key) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern_byte(key, i)) return (long)i;
    return -1;
}

/* ---------------------------------------------------------------------------
   Shadow model
--------------------------------------------------------------------------- */
void hh_shadow_init(hh_shadow *s) { *s = (hh_shadow){0}; }
void hh_shadow_fini(hh_shadow *s) {
    free(s->objs);
    *s = (hh_shadow){0};
}

hh_shadow_obj *hh_shadow_add(hh_shadow *s, const hh_heap *heap, hh_handle h, size_t size, size_t align, uint64_t key) {
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->objs = realloc(s->objs, s->cap * sizeof *s->objs);
        ck_assert_ptr_nonnull(s->objs);
    }
    hh_shadow_obj *o = &s->objs[s->count++];
    *o = (hh_shadow_obj){ .h = h, .size = size, .key = key, .align = align };
    void *p = hh_deref(heap, h);
    ck_assert_ptr_nonnull(p);
    hh_test_fill(p, size, key);
    return o;
}

void hh_shadow_remove(hh_shadow *s, size_t i) { s->objs[i] = s->objs[--s->count]; }

/* One Check call per failed check, none per passed one: Check records the
   location of every ck_assert with a write(2), which would dominate the
   randomised tests (one object = four checks). */
void hh_shadow_verify(const hh_shadow *s, const hh_heap *heap) {
    for (size_t i = 0; i < s->count; i++) {
        const hh_shadow_obj *o = &s->objs[i];
        const unsigned char *p = hh_deref(heap, o->h);
        if (p == NULL) ck_abort_msg("object %zu (handle %#llx) lost", i, (unsigned long long)o->h.id);
        if (((uintptr_t)p & (o->align - 1)) != 0) ck_abort_msg("object %zu lost its %zu alignment", i, o->align);
        if (hh_size(heap, o->h) < o->size) ck_abort_msg("object %zu shrank", i);
        if (o->pins && (const void *)p != o->pinned_at) ck_abort_msg("pinned object %zu moved", i);
        long bad = hh_test_verify(p, o->size, o->key);
        if (bad >= 0) ck_abort_msg("object %zu (%zu bytes): byte %ld corrupt", i, o->size, bad);
    }
}

_Noreturn void hh_test_child_exit(int code) {
    char cmd[16];
    snprintf(cmd, sizeof cmd, "exit %d", code);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(code);
}

#include "../src/common/hh_config.h"   /* HH_TRACK_VALGRIND, HH_TRACK_ASAN: which checker the build has */
#if HH_TRACK_VALGRIND
#  include <valgrind/memcheck.h>
int hh_test_checker_state(const void *p, size_t n) {
    static uint8_t vbits[256];
    if (!RUNNING_ON_VALGRIND) return -1;
    ck_assert_uint_le(n, sizeof vbits);
    unsigned r = VALGRIND_GET_VBITS(p, vbits, n);  /* silent, unlike the CHECK_* requests */
    if (r == 3) return 2;
    ck_assert_uint_eq(r, 1);
    for (size_t i = 0; i < n; i++)
        if (vbits[i] != 0) return 1;
    return 0;
}
#elif HH_TRACK_ASAN
#  include <sanitizer/asan_interface.h>
int hh_test_checker_state(const void *p, size_t n) {
    return __asan_region_is_poisoned((void *)(uintptr_t)p, n) != NULL ? 2 : 0;  /* ASan has no "undefined" */
}
#else
int hh_test_checker_state(const void *p, size_t n) {
    (void)p;
    (void)n;
    return -1;
}
#endif
