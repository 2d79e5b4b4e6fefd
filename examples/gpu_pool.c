/* gpu_pool.c -- a mesh streaming pool on a virtual heap (include/hheap/vheap.h).
 *
 * A game keeps its vertex data in one big GPU buffer and streams meshes in and
 * out as the camera moves. The buffer here is a plain byte array standing in
 * for the GPU buffer; "uploads" and "copy commands" are memcpy. The library
 * never touches the buffer: it hands out offsets and, once a frame, plans a
 * few moves that the engine records as copy commands and executes.
 *
 * Every frame:
 *   1. unload a few meshes, load a few (an occasional wave of many); a load
 *      that finds no room grows the pool (and the buffer) by a quarter;
 *   2. hh_vdefrag_begin: plan up to 8 moves / 2 MiB; record them as copies;
 *      a mesh the GPU still reads this frame is SKIPPED; a mesh the streamer
 *      evicts while its copy is in flight is freed at once (its move ends
 *      cancelled, its source stays reserved until the pass ends);
 *   3. "submit": run the copies, then hh_vdefrag_end;
 *   4. write the frame to the heap map.
 * At the end every resident mesh's bytes are checked at hh_voffset, the pool
 * is compacted and shrunk to its live bytes, and the map is closed. Render it
 * with hh-viz (make example-gpu-pool does both).
 *
 *   gpu_pool [--frames N] [--seed S] [--out DIR]      (defaults: 600, 1, out/gpu_pool)
 * Exit status: 0 ok, 1 a mesh lost its bytes or a call failed.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hheap.h"

enum { TAG_STATIC = 1, TAG_STREAMED = 2, MAX_MESHES = 4096 };

typedef struct mesh {
    hh_handle h;
    uint64_t  bytes;
    uint32_t  id;
    uint32_t  pinned_until;   /* frame; 0: not pinned (a transfer queue reads it: it must not move) */
} mesh;

static uint8_t *gpu;          /* the "GPU buffer" */
static uint64_t gpu_size;
static mesh     meshes[MAX_MESHES];
static uint32_t mesh_count, next_id = 1;
static uint64_t rng_state;

static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* The "vertex data" of mesh id: a pattern that shows a wrong or shifted copy. */
static uint8_t vertex_byte(uint32_t id, uint64_t i) { return (uint8_t)((id * 2654435761u) ^ (uint32_t)(i * 31u) ^ (uint32_t)(i >> 8)); }

static bool fail(const char *what) {
    fprintf(stderr, "gpu_pool: %s: %s\n", what, hh_status_str(hh_last_error()));
    return false;
}
static int die(const char *what) { fail(what); return 1; }

/* Loads a mesh: allocate (growing the pool if it is full), upload its bytes. */
static bool load_mesh(hh_vheap *pool, uint32_t tag) {
    if (mesh_count == MAX_MESHES) return true;
    static const uint64_t sizes[] = { 6144, 24576, 49152, 98304, 196608, 393216 };
    uint64_t bytes = sizes[rnd(6)] + 256u * rnd(64);
    hh_handle h = hh_valloc(pool, bytes, 256, tag);
    if (hh_is_null(h)) {                           /* full: grow the pool by a quarter, and the buffer with it */
        uint64_t ns = gpu_size + gpu_size / 4 + bytes;
        if (hh_vheap_grow(pool, ns) != HH_OK) return fail("grow");
        uint8_t *g = realloc(gpu, (size_t)ns);
        if (g == NULL) return fail("buffer");
        gpu = g;
        gpu_size = ns;
        h = hh_valloc(pool, bytes, 256, tag);
        if (hh_is_null(h)) return fail("alloc after grow");
    }
    mesh *m = &meshes[mesh_count++];
    *m = (mesh){ .h = h, .bytes = bytes, .id = next_id++ };
    uint8_t *p = gpu + hh_voffset(pool, h);
    for (uint64_t i = 0; i < bytes; i++) p[i] = vertex_byte(m->id, i);
    return true;
}

static void unload_mesh(hh_vheap *pool, uint32_t i) {
    if (meshes[i].pinned_until) return;            /* in use by a transfer: evict later */
    hh_vfree(pool, meshes[i].h);                   /* during a pass too: see hh_vfree in vheap.h */
    meshes[i] = meshes[--mesh_count];
}

static bool check_meshes(const hh_vheap *pool) {
    for (uint32_t k = 0; k < mesh_count; k++) {
        const uint8_t *p = gpu + hh_voffset(pool, meshes[k].h);
        for (uint64_t i = 0; i < meshes[k].bytes; i++)
            if (p[i] != vertex_byte(meshes[k].id, i)) {
                fprintf(stderr, "gpu_pool: mesh %u lost its bytes at %llu\n", meshes[k].id, (unsigned long long)i);
                return false;
            }
    }
    return true;
}

static size_t find_mesh(hh_handle h) {
    for (uint32_t k = 0; k < mesh_count; k++)
        if (meshes[k].h.id == h.id) return k;
    return SIZE_MAX;
}

int main(int argc, char **argv) {
    unsigned frames = 600;
    uint64_t seed = 1;
    const char *out = "out/gpu_pool";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else {
            fprintf(stderr, "usage: gpu_pool [--frames N] [--seed S] [--out DIR]\n");
            return 2;
        }
    }
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;

    gpu_size = 48u << 20;
    gpu = malloc((size_t)gpu_size);
    hh_vheap *pool;
    if (gpu == NULL || hh_vheap_create(&(hh_vheap_desc){ .size = gpu_size }, &pool) != HH_OK) return die("create");

    char path[512];
    mkdir("out", 0777);
    mkdir(out, 0777);
    snprintf(path, sizeof path, "%s/gpu_pool.hhmap", out);
    static const char *const tags[] = { "reserved", "static", "streamed" };
    hh_mapdump_writer *map;
    if (hh_mapdump_create(path, &(hh_mapdump_desc){ .vheap = pool, .tag_names = tags, .tag_name_count = 3,
                                                    .label = "examples/gpu_pool: a virtual heap of meshes" }, &map) != HH_OK)
        return die("heap map");

    for (int i = 0; i < 40; i++)                   /* the level's static geometry */
        if (!load_mesh(pool, TAG_STATIC)) return 1;

    uint64_t moved = 0, skipped = 0, cancelled = 0, max_hw = 0;
    for (unsigned f = 0; f < frames; f++) {
        /* 1. streaming: a few out, a few in; every 150 frames the camera jumps */
        unsigned out_n = (f % 150 == 149) ? mesh_count / 3 : 2 + rnd(4), in_n = (f % 150 == 149) ? 0 : 2 + rnd(4);
        if (f % 150 == 0 && f) in_n = 60;
        for (unsigned k = 0; k < out_n && mesh_count > 40; k++) unload_mesh(pool, 40 + rnd(mesh_count - 40));
        for (unsigned k = 0; k < in_n && mesh_count < 400; k++)
            if (!load_mesh(pool, TAG_STREAMED)) return 1;

        /* a transfer queue reads a mesh for 40 frames: pinned meanwhile, so no pass moves it */
        for (uint32_t k = 40; k < mesh_count; k++)
            if (meshes[k].pinned_until && meshes[k].pinned_until <= f) {
                hh_vunpin(pool, meshes[k].h);
                meshes[k].pinned_until = 0;
            }
        if (rnd(8) == 0 && mesh_count > 40) {
            mesh *m = &meshes[40 + rnd(mesh_count - 40)];
            if (!m->pinned_until && hh_vpin(pool, m->h) == HH_OK) m->pinned_until = f + 40;
        }

        /* 2. plan this frame's moves and record them as copy commands */
        hh_vdefrag_pass pass;
        if (hh_vdefrag_begin(pool, &(hh_vdefrag_budget){ .max_moves = 8, .max_bytes = 2u << 20 }, &pass) != HH_OK)
            return die("begin");
        hh_vmove_result results[8];
        for (uint32_t i = 0; i < pass.move_count; i++) {
            results[i] = rnd(10) == 0 ? HH_VMOVE_SKIPPED : HH_VMOVE_DONE;   /* the GPU draws it this frame */
            size_t k = find_mesh(pass.moves[i].handle);
            if (rnd(25) == 0 && k != SIZE_MAX && k >= 40) unload_mesh(pool, (uint32_t)k);   /* evicted in flight */
        }
        /* 3. submit: the copies run (a freed mesh's copy is harmless: both ranges are reserved) */
        for (uint32_t i = 0; i < pass.move_count; i++)
            if (results[i] == HH_VMOVE_DONE)
                memcpy(gpu + pass.moves[i].dst_offset, gpu + pass.moves[i].src_offset, (size_t)pass.moves[i].size);
        hh_vdefrag_report rep;
        if (hh_vdefrag_end(pool, results, &rep) != HH_OK) return die("end");
        moved += rep.bytes_moved;
        skipped += rep.skipped;
        cancelled += rep.cancelled;

        /* 4. the heap map */
        if (hh_mapdump_write_frame(map, f, NULL) != HH_OK) return die("write frame");
        hh_vheap_stats st;
        hh_vheap_stats_get(pool, &st);
        if (st.high_water > max_hw) max_hw = st.high_water;
    }
    if (!check_meshes(pool) || hh_vheap_check(pool) != HH_OK) return 1;

    /* level unload: the transfers finish, the pool compacts completely and gives the tail of the buffer back */
    for (uint32_t k = 0; k < mesh_count; k++)
        if (meshes[k].pinned_until) {
            hh_vunpin(pool, meshes[k].h);
            meshes[k].pinned_until = 0;
        }
    hh_vdefrag_pass pass;
    unsigned passes = 0;
    uint64_t final_bytes = 0;
    do {
        /* AUTO: fills, then slides (two copies) until no hole is left */
        if (hh_vdefrag_begin(pool, &(hh_vdefrag_budget){ .policy = HH_VDEFRAG_AUTO }, &pass) != HH_OK) return die("begin");
        for (uint32_t i = 0; i < pass.move_count; i++)
            memcpy(gpu + pass.moves[i].dst_offset, gpu + pass.moves[i].src_offset, (size_t)pass.moves[i].size);
        hh_vdefrag_end(pool, NULL, NULL);
        final_bytes += pass.bytes;
        passes++;
    } while (!pass.compact && passes < 5000);
    uint64_t new_size;
    hh_vheap_shrink(pool, &new_size);
    if (hh_mapdump_write_frame(map, frames, NULL) != HH_OK) return die("write frame");
    if (!check_meshes(pool) || hh_vheap_check(pool) != HH_OK) return 1;
    hh_vheap_stats st;
    hh_vheap_stats_get(pool, &st);
    printf("gpu_pool: %u frames, %u meshes resident (%.1f MiB); frame passes copied %.1f MiB, %llu moves skipped, "
           "%llu cancelled; high water peak %.1f MiB; %u final passes (AUTO) copied %.1f MiB and the pool shrinks "
           "to %.1f MiB; metadata %.1f KiB for %u blocks; map in %s\n",
           frames, mesh_count, (double)st.used_bytes / 1048576, (double)moved / 1048576,
           (unsigned long long)skipped, (unsigned long long)cancelled, (double)max_hw / 1048576, passes,
           (double)final_bytes / 1048576, (double)new_size / 1048576, (double)st.meta_bytes / 1024, st.records, path);
    if (hh_mapdump_close(map) != HH_OK) return die("close");
    hh_vheap_destroy(pool);
    free(gpu);
    return 0;
}
