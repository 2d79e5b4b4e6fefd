/* hh_bytes.h -- byte encoding shared by the library's file formats (.hhmap,
 * .hhtrace): little-endian fixed-width fields and LEB128 varints, and a
 * bounds-checked read cursor whose errors are sticky (read on, check once). */
#ifndef HH_BYTES_H
#define HH_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { HHI_VARINT_MAX = 10 };   /* bytes of the longest 64-bit LEB128 varint */

/* Writes v as `bytes` little-endian bytes at p; returns the end. */
static inline uint8_t *hhi_put_le(uint8_t *p, uint64_t v, unsigned bytes) {
    for (unsigned i = 0; i < bytes; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* Writes v as a LEB128 varint (at most HHI_VARINT_MAX bytes); returns the end. */
static inline uint8_t *hhi_put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

typedef struct hhi_cursor {
    const uint8_t *p, *end;   /* next byte, end of the data */
    bool bad;                 /* ran past the end or met a malformed value: every later read gives 0 */
} hhi_cursor;

static inline size_t hhi_cur_left(const hhi_cursor *c) { return c->bad ? 0 : (size_t)(c->end - c->p); }

/* `bytes` little-endian bytes (1..8); 0 and bad when fewer are left. */
static inline uint64_t hhi_get_le(hhi_cursor *c, unsigned bytes) {
    if (hhi_cur_left(c) < bytes) {
        c->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) v |= (uint64_t)c->p[i] << (8 * i);
    c->p += bytes;
    return v;
}
static inline uint8_t  hhi_get_u8(hhi_cursor *c) { return (uint8_t)hhi_get_le(c, 1); }
static inline uint32_t hhi_get_u32(hhi_cursor *c) { return (uint32_t)hhi_get_le(c, 4); }
static inline uint64_t hhi_get_u64(hhi_cursor *c) { return hhi_get_le(c, 8); }

/* LEB128: at most HHI_VARINT_MAX bytes and no bits beyond 64, else bad. */
static inline uint64_t hhi_get_varint(hhi_cursor *c) {
    uint64_t v = 0;
    for (unsigned i = 0; i < HHI_VARINT_MAX; i++) {
        uint8_t b = hhi_get_u8(c);
        if (c->bad) return 0;
        if (i == HHI_VARINT_MAX - 1 && b > 1) break;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) return v;
    }
    c->bad = true;
    return 0;
}
/* A varint that must fit 32 bits, else bad. */
static inline uint32_t hhi_get_varint32(hhi_cursor *c) {
    uint64_t v = hhi_get_varint(c);
    if (v > UINT32_MAX) c->bad = true;
    return (uint32_t)v;
}

#endif /* HH_BYTES_H */
