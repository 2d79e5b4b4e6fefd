/* test_util.c -- see test_util.h. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

double hh_test_scale(void) {
    const char *e = getenv("HH_TEST_SCALE");
    if (e && *e) return atof(e);
    e = getenv("HH_TEST_UNDER_VALGRIND");
    if (e && *e == '1') return 0.1;
    return 1.0;
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
