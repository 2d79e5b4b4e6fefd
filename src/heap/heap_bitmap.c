/* heap_bitmap.c -- hierarchical bitmap over granules (see heap_internal.h).
 *
 * Level 0 has a bit per granule; a bit of level k+1 is set iff the matching
 * 64-bit word of level k is non-zero. With 64-ary fan-out, next/prev searches
 * touch at most two words per level: O(log64 n), about 4 levels for 1 TiB of
 * 16-byte granules. All levels live in one metadata allocation.
 */
#include "heap_internal.h"

#include "../common/hh_meta.h"

static bool bitmap_init(hhi_bitmap *bm, size_t nbits, bool mapped);

bool hhi_bitmap_init(hhi_bitmap *bm, size_t nbits) { return bitmap_init(bm, nbits, false); }
bool hhi_bitmap_init_mapped(hhi_bitmap *bm, size_t nbits) { return bitmap_init(bm, nbits, true); }

static bool bitmap_init(hhi_bitmap *bm, size_t nbits, bool mapped) {
    *bm = (hhi_bitmap){ .nbits = nbits };
    size_t n = nbits ? nbits : 1, total = 0;
    uint32_t l = 0;
    for (;;) {
        size_t w = (n + 63) / 64;
        if (l == HHI_BM_MAX_LEVELS) return false;
        bm->words[l++] = w;
        total += w;
        if (w == 1) break;
        n = w;
    }
    bm->nlevels = l;
    uint64_t *mem = mapped ? hhi_os_map(total * sizeof(uint64_t), 0) : hhi_meta_alloc(total * sizeof(uint64_t));
    if (mem == NULL) return false;
    bm->bytes = total * sizeof(uint64_t);
    bm->mapped = mapped;
    for (uint32_t i = 0; i < l; i++) {
        bm->level[i] = mem;
        mem += bm->words[i];
    }
    return true;
}

void hhi_bitmap_fini(hhi_bitmap *bm) {
    if (bm->level[0] && bm->mapped) hhi_os_unmap(bm->level[0], bm->bytes);
    else if (bm->level[0]) hhi_meta_free(bm->level[0]);
    *bm = (hhi_bitmap){0};
}

void hhi_bitmap_set(hhi_bitmap *bm, size_t i) {
    hh_assert(i < bm->nbits);
    for (uint32_t l = 0; l < bm->nlevels; l++) {
        uint64_t *w = &bm->level[l][i / 64];
        bool was_zero = *w == 0;
        *w |= (uint64_t)1 << (i % 64);
        if (!was_zero) return;          /* upper levels already know this word is non-zero */
        i /= 64;
    }
}

void hhi_bitmap_clear(hhi_bitmap *bm, size_t i) {
    hh_assert(i < bm->nbits);
    for (uint32_t l = 0; l < bm->nlevels; l++) {
        uint64_t *w = &bm->level[l][i / 64];
        *w &= ~((uint64_t)1 << (i % 64));
        if (*w != 0) return;            /* word still non-zero: upper levels unchanged */
        i /= 64;
    }
}

bool hhi_bitmap_test(const hhi_bitmap *bm, size_t i) {
    return i < bm->nbits && (bm->level[0][i / 64] >> (i % 64)) & 1;
}

/* Smallest set index >= i at level l. */
static size_t level_next(const hhi_bitmap *bm, uint32_t l, size_t i) {
    size_t w = i / 64;
    if (w >= bm->words[l]) return HHI_BM_NONE;
    uint64_t word = bm->level[l][w] & (~(uint64_t)0 << (i % 64));
    if (word) return w * 64 + hh_ctz64(word);
    if (l + 1 == bm->nlevels) return HHI_BM_NONE;
    size_t nw = level_next(bm, l + 1, w + 1);   /* next non-zero word of this level */
    if (nw == HHI_BM_NONE) return HHI_BM_NONE;
    return nw * 64 + hh_ctz64(bm->level[l][nw]);
}

/* Largest set index <= i at level l. */
static size_t level_prev(const hhi_bitmap *bm, uint32_t l, size_t i) {
    size_t w = i / 64;
    if (w >= bm->words[l]) {
        w = bm->words[l] - 1;
        i = w * 64 + 63;
    }
    unsigned b = (unsigned)(i % 64);
    uint64_t mask = b == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (b + 1)) - 1);
    uint64_t word = bm->level[l][w] & mask;
    if (word) return w * 64 + hh_fls64(word);
    if (w == 0 || l + 1 == bm->nlevels) return HHI_BM_NONE;
    size_t pw = level_prev(bm, l + 1, w - 1);
    if (pw == HHI_BM_NONE) return HHI_BM_NONE;
    return pw * 64 + hh_fls64(bm->level[l][pw]);
}

size_t hhi_bitmap_next(const hhi_bitmap *bm, size_t i) {
    if (i >= bm->nbits) return HHI_BM_NONE;
    return level_next(bm, 0, i);
}

size_t hhi_bitmap_prev(const hhi_bitmap *bm, size_t i) {
    if (bm->nbits == 0) return HHI_BM_NONE;
    if (i >= bm->nbits) i = bm->nbits - 1;
    return level_prev(bm, 0, i);
}

bool hhi_bitmap_consistent(const hhi_bitmap *bm) {
    for (uint32_t l = 0; l + 1 < bm->nlevels; l++)
        for (size_t w = 0; w < bm->words[l]; w++)
            if ((bm->level[l][w] != 0) != (bool)((bm->level[l + 1][w / 64] >> (w % 64)) & 1)) return false;
    return true;
}
