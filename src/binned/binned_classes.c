/* binned_classes.c -- the size classes and the O(1) size-to-class tables.
 *
 * Classes: 16-byte steps to 128 B (8 classes), then four per power of two,
 * p*5/4, p*6/4, p*7/4, p*2 for p = 128 .. 16384 (32 classes), up to 32 KiB.
 * Every class above 1024 B is a multiple of 256, so two tables cover all
 * sizes: one indexed by (size + 15) >> 4 up to 1024 B, one by
 * (size + 255) >> 8 up to 32 KiB. The tables were generated from the rule
 * above; the unit test class_table_matches_rule checks every size 0..32768
 * against hhi_class_size, and the static asserts below pin the shape.
 */
#include "binned_internal.h"

#define HHI_CLASS_LIST(X) \
    X(0, 16, 0) \
    X(1, 32, 16) \
    X(2, 48, 32) \
    X(3, 64, 48) \
    X(4, 80, 64) \
    X(5, 96, 80) \
    X(6, 112, 96) \
    X(7, 128, 112) \
    X(8, 160, 128) \
    X(9, 192, 160) \
    X(10, 224, 192) \
    X(11, 256, 224) \
    X(12, 320, 256) \
    X(13, 384, 320) \
    X(14, 448, 384) \
    X(15, 512, 448) \
    X(16, 640, 512) \
    X(17, 768, 640) \
    X(18, 896, 768) \
    X(19, 1024, 896) \
    X(20, 1280, 1024) \
    X(21, 1536, 1280) \
    X(22, 1792, 1536) \
    X(23, 2048, 1792) \
    X(24, 2560, 2048) \
    X(25, 3072, 2560) \
    X(26, 3584, 3072) \
    X(27, 4096, 3584) \
    X(28, 5120, 4096) \
    X(29, 6144, 5120) \
    X(30, 7168, 6144) \
    X(31, 8192, 7168) \
    X(32, 10240, 8192) \
    X(33, 12288, 10240) \
    X(34, 14336, 12288) \
    X(35, 16384, 14336) \
    X(36, 20480, 16384) \
    X(37, 24576, 20480) \
    X(38, 28672, 24576) \
    X(39, 32768, 28672)

/* Each class is a multiple of 16, larger than the one before, and above
   1024 B a multiple of 256 (the coarse table relies on it). */
#define HHI_CLASS_ASSERT(i, size, prev)                                                   \
    _Static_assert((size) % 16 == 0 && (size) > (prev) && ((size) <= 1024 || (size) % 256 == 0), \
                   "size class " #i " breaks the class rules");
HHI_CLASS_LIST(HHI_CLASS_ASSERT)

#define HHI_CLASS_SIZE(i, size, prev) [i] = size,
const uint32_t hhi_class_size[HHI_CLASS_COUNT] = { HHI_CLASS_LIST(HHI_CLASS_SIZE) };

#define HHI_CLASS_ONE(i, size, prev) +1
_Static_assert(0 HHI_CLASS_LIST(HHI_CLASS_ONE) == HHI_CLASS_COUNT, "class list and HH_BINNED_CLASS_COUNT disagree");
#define HHI_CLASS_LAST(i, size, prev) (i == HHI_CLASS_COUNT - 1 ? size : 0) +
_Static_assert(HHI_CLASS_LIST(HHI_CLASS_LAST) 0 == HH_BINNED_SMALL_MAX, "last class must be HH_BINNED_SMALL_MAX");

const uint8_t hhi_class_small[65] = {
     0,  0,  1,  2,  3,  4,  5,  6,  7,  8,  8,  9,  9, 10, 10, 11, 11, 12, 12, 12, 12, 13, 13, 13,
    13, 14, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16, 16, 17, 17, 17, 17, 17, 17, 17,
    17, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19, 19, 19, 19, 19, 19,
};
_Static_assert(HH_ARRAY_LEN(hhi_class_small) == 1024 / 16 + 1, "fine table covers 0..1024");

const uint8_t hhi_class_large[129] = {
    19, 19, 19, 19, 19, 20, 21, 22, 23, 24, 24, 25, 25, 26, 26, 27, 27, 28, 28, 28, 28, 29, 29, 29,
    29, 30, 30, 30, 30, 31, 31, 31, 31, 32, 32, 32, 32, 32, 32, 32, 32, 33, 33, 33, 33, 33, 33, 33,
    33, 34, 34, 34, 34, 34, 34, 34, 34, 35, 35, 35, 35, 35, 35, 35, 35, 36, 36, 36, 36, 36, 36, 36,
    36, 36, 36, 36, 36, 36, 36, 36, 36, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37, 37,
    37, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 38, 39, 39, 39, 39, 39, 39, 39,
    39, 39, 39, 39, 39, 39, 39, 39, 39,
};
_Static_assert(HH_ARRAY_LEN(hhi_class_large) == HH_BINNED_SMALL_MAX / 256 + 1, "coarse table covers 1025..32768");

/* Blocks per page. Up to HHI_STATE_SLOT blocks the state bytes live in the
   span header and the page is all blocks; above, they share the page (one
   byte per block at its tail). */
uint32_t hhi_class_capacity(unsigned c) {
    uint32_t size = hhi_class_size[c];
    uint32_t n = (uint32_t)(HHI_PAGE_SIZE / size);
    return n <= HHI_STATE_SLOT ? n : (uint32_t)(HHI_PAGE_SIZE / (size + 1u));
}

bool hhi_class_tail_state(unsigned c) { return HHI_PAGE_SIZE / hhi_class_size[c] > HHI_STATE_SLOT; }

size_t hh_binned_class_size(int cls) {
    return cls >= 0 && cls < HHI_CLASS_COUNT ? hhi_class_size[cls] : 0;
}

int hh_binned_class_of(size_t size) { return size <= HHI_SMALL_MAX ? (int)hhi_size_class(size) : -1; }
