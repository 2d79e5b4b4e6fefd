/* mapdump_internal.h -- the .hhmap byte layout shared by the writer and the
 * reader (docs/hhmap.md is the specification; keep the two in step).
 *
 * Invariants of the format (numbered as in docs/hhmap.md):
 *   F1  every integer is little-endian; u16/u32/u64 fixed width, "varint" is
 *       unsigned LEB128 of at most 10 bytes.
 *   F2  the file is: header, then frame records, then exactly one end record.
 *   F3  a record is type (4 bytes), payload length (u32), CRC-32 of the payload
 *       (u32), payload; a reader never trusts a length before checking it
 *       against what is left.
 *   F4  a frame payload is a list of sections (u8 id, u32 length, body);
 *       unknown ids are skipped, so minor versions may add sections; a known
 *       section may grow at its end (readers ignore the extra bytes).
 *   F5  blocks are listed in offset order and tile no more than managed_bytes.
 */
#ifndef HH_MAPDUMP_INTERNAL_H
#define HH_MAPDUMP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hheap/mapdump.h"

#include "../common/hh_compiler.h"

/* ---------------------------------------------------------------------------
   Layout constants
--------------------------------------------------------------------------- */
enum {
    MD_MAGIC_BYTES     = 8,
    MD_FILE_HEAD_BYTES = 20,           /* magic, major, minor, body length, body CRC */
    MD_REC_HEAD_BYTES  = 12,           /* type, payload length, payload CRC */
    MD_SEC_HEAD_BYTES  = 5,            /* id, length */
    MD_MAX_HEADER_BODY = 1u << 16,     /* bytes; a larger header body is corrupt */
    MD_MAX_RECORD      = 1u << 30,     /* bytes; a larger record is corrupt */
    MD_METRICS_V1_BYTES = 8 * 19,      /* fields of hh_mapdump_metrics in v1.0 */
};

/* Section ids inside a frame record (F4). */
enum {
    MD_SEC_FRAME   = 1,                /* u64 frame, u64 managed_bytes */
    MD_SEC_METRICS = 2,                /* MD_METRICS_V1_BYTES of u64 */
    MD_SEC_BLOCKS  = 3,
    MD_SEC_MOVES   = 4,
    MD_SEC_BINNED  = 5,
    MD_SEC_STACKS  = 6,
    MD_SEC_SERVICE = 7,                /* MD_SERVICE_V1_FIELDS varints (hh_defrag_metrics_get) */
};
enum { MD_SERVICE_V1_FIELDS = 8 };

/* Block flag byte. */
enum { MD_BLOCK_STATE_MASK = 0x3, MD_BLOCK_MOVED = 0x4 };

static const uint8_t md_magic[MD_MAGIC_BYTES] = { 0x89, 'H', 'H', 'M', 'A', 'P', '\r', '\n' };
static const uint8_t md_rec_frame[4] = { 'F', 'R', 'A', 'M' };
static const uint8_t md_rec_end[4]   = { 'E', 'N', 'D', '!' };

/* ---------------------------------------------------------------------------
   CRC-32 (IEEE 802.3, reflected, as zlib's crc32) with a 16-entry table made
   on the caller's stack: fast enough for frame records, no global state.
--------------------------------------------------------------------------- */
static inline uint32_t md_crc32(const void *data, size_t n) {
    uint32_t t[16];
    for (uint32_t i = 0; i < 16; i++) {
        uint32_t c = i;
        for (int k = 0; k < 4; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        t[i] = c;
    }
    const uint8_t *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ t[crc & 15u];
        crc = (crc >> 4) ^ t[crc & 15u];
    }
    return crc ^ 0xFFFFFFFFu;
}

static inline void md_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t md_get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint16_t md_get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* double <-> u64 by its IEEE-754 bits (C11 gives no other portable way). */
static inline uint64_t md_f64_bits(double d) { uint64_t u; memcpy(&u, &d, sizeof u); return u; }
static inline double md_bits_f64(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }

#endif /* HH_MAPDUMP_INTERNAL_H */
