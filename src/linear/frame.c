/* frame.c -- Game Engine Architecture frame allocators.
 *
 * hh_frame: one buffer, everything dies at hh_frame_reset (once a frame).
 * hh_dframe: two buffers; allocations go to buffer `cur`; hh_dframe_swap flips
 * cur and clears the newly current buffer, so a block allocated in frame i
 * survives frame i+1 and dies at the swap that ends frame i+1.
 *
 * Invariants: F1 cur is 0 or 1; F2 frame counts the swaps since create.
 * Memory checking follows hhi_lstack (L1): freed frames are no-access.
 */
#include "linear_internal.h"

#include "../common/hh_meta.h"

/* ---------------------------------------------------------------------------
   Types
--------------------------------------------------------------------------- */
struct hh_frame {
    hhi_lstack s;                  /* the frame buffer */
};

struct hh_dframe {
    hhi_lstack s[2];               /* the two frame buffers */
    unsigned   cur;                /* buffer allocations come from (F1) */
    uint64_t   frame;              /* swaps since create (F2) */
};

/* ---------------------------------------------------------------------------
   hh_frame
--------------------------------------------------------------------------- */
hh_status hh_frame_create(const hh_frame_desc *desc, hh_frame **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_frame_create: out is NULL");
    *out = NULL;  /* before any other early return: a failed create never leaves a stale pointer */
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_frame_create: desc is NULL");
    hh_frame *f = hhi_meta_alloc(sizeof *f);
    if (f == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_frame_create: no memory for the frame object");
    hh_status st = hhi_lstack_init(&f->s, desc->capacity, NULL, "hh_frame_create");
    if (st != HH_OK) {
        hhi_meta_free(f);
        return st;
    }
    *out = f;
    return HH_OK;
}

void hh_frame_destroy(hh_frame *f) {
    if (f == NULL) return;
    hhi_lstack_fini(&f->s);
    hhi_meta_free(f);
}

void *hh_frame_alloc(hh_frame *f, size_t size, size_t align) {
    if (f == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_frame_alloc: frame is NULL");
        return NULL;
    }
    return hhi_lstack_alloc(&f->s, size, align, "hh_frame_alloc");
}

void hh_frame_reset(hh_frame *f) {
    if (f == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_frame_reset: frame is NULL");
        return;
    }
    hhi_lstack_cut(&f->s, 0);
}

size_t hh_frame_used(const hh_frame *f) {
    if (f == NULL) return hhi_linear_null_value("hh_frame_used", "frame");
    return f->s.top;
}

/* ---------------------------------------------------------------------------
   hh_dframe
--------------------------------------------------------------------------- */
hh_status hh_dframe_create(const hh_frame_desc *desc, hh_dframe **out) {
    if (out == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_dframe_create: out is NULL");
    *out = NULL;  /* before any other early return: a failed create never leaves a stale pointer */
    if (desc == NULL) return hhi_error(HH_E_INVALID_ARG, "hh_dframe_create: desc is NULL");
    hh_dframe *df = hhi_meta_alloc(sizeof *df);
    if (df == NULL) return hhi_error(HH_E_NO_MEMORY, "hh_dframe_create: no memory for the frame object");
    for (unsigned i = 0; i < 2; i++) {
        hh_status st = hhi_lstack_init(&df->s[i], desc->capacity, NULL, "hh_dframe_create");
        if (st != HH_OK) {
            if (i == 1) hhi_lstack_fini(&df->s[0]);
            hhi_meta_free(df);
            return st;
        }
    }
    *out = df;
    return HH_OK;
}

void hh_dframe_destroy(hh_dframe *df) {
    if (df == NULL) return;
    hhi_lstack_fini(&df->s[0]);
    hhi_lstack_fini(&df->s[1]);
    hhi_meta_free(df);
}

void *hh_dframe_alloc(hh_dframe *df, size_t size, size_t align) {
    if (df == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_dframe_alloc: frame is NULL");
        return NULL;
    }
    return hhi_lstack_alloc(&df->s[df->cur], size, align, "hh_dframe_alloc");
}

void hh_dframe_swap(hh_dframe *df) {
    if (df == NULL) {
        hhi_error(HH_E_INVALID_ARG, "hh_dframe_swap: frame is NULL");
        return;
    }
    df->cur ^= 1u;
    hhi_lstack_cut(&df->s[df->cur], 0);
    df->frame++;
}

size_t hh_dframe_used(const hh_dframe *df) {
    if (df == NULL) return hhi_linear_null_value("hh_dframe_used", "frame");
    return df->s[df->cur].top;
}

uint64_t hh_dframe_frame(const hh_dframe *df) {
    if (df == NULL) return hhi_linear_null_value("hh_dframe_frame", "frame");
    return df->frame;
}
