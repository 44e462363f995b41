/* Allreduce in the host arena (shm_coll.h). */
#include <hvd/hvd.h>

#include "collectives/coll.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "collectives/shm_coll.h"
#include "common/error.h"

#include <stdio.h>
#include <string.h>

/* Up to this many bytes per rank (in the working dtype), one step and every rank reduces
 * every slot; above, the sliced reduction's two steps per chunk. */
#define SHM_SMALL_BYTES (16 * 1024)
/* A range is reduced through a buffer this big, so the partial sums stay in L1. */
#define TILE_BYTES 8192

void hvd__shm_reduce_into(const hvd_arena_t *a, const int *idx, int p, size_t at, size_t n,
                          hvd_dtype_t w, hvd_reduce_op_t op, uint8_t *dst) {
    size_t wsize = hvd__dtype_size(w), step = TILE_BYTES / wsize;
    _Alignas(64) uint8_t tile[TILE_BYTES];
    for (size_t t = 0; t < n; t += step) {
        size_t k = n - t < step ? n - t : step, off = (at + t) * wsize;
        memcpy(tile, hvd__arena_data(a, idx[0]) + off, k * wsize);
        for (int r = 1; r < p; r++)
            hvd__reduce(tile, hvd__arena_data(a, idx[r]) + off, k, w, op);
        memcpy(dst + t * wsize, tile, k * wsize);
    }
}

/* Elements [from, from + n) of the current chunk: reduced over every member's slot in group
 * rank order, finished (scaled, averaged) and written back into this rank's slot for the
 * others (each tile is read whole before it is written), and rounded into out. */
static void reduce_slice(hvd_group_t *g, hvd_arena_t *a, const int *idx, size_t from, size_t n,
                         void *out, hvd_dtype_t dtype, hvd_reduce_op_t op, double postscale) {
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    uint8_t *mine = hvd__arena_data(a, a->self) + from * hvd__dtype_size(w);
    hvd__shm_reduce_into(a, idx, g->size, from, n, w, op, mine);
    hvd__allreduce_finish(mine, n, dtype, op, g->size, postscale);
    hvd__allreduce_to_out(out, mine, n, dtype);
}

static hvd_status_t sliced(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                           const void *send, void *recv, size_t count, hvd_dtype_t dtype,
                           hvd_reduce_op_t op, double prescale, double postscale,
                           const char *what) {
    int p = g->size, me = g->rank;
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    size_t wsize = hvd__dtype_size(w), osize = hvd__dtype_size(dtype);
    size_t chunk = a->data_bytes / wsize;
    hvd_status_t st;
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        hvd__allreduce_to_work(hvd__arena_data(a, a->self), (const uint8_t *)send + off * osize, n,
                               dtype, prescale);
        if (off == 0)
            st = hvd__group_arena_agree(g, a, idx, sig, what);
        else if ((st = hvd__arena_step(a)) != HVD_OK)
            st = hvd__group_arena_failed(g, st, what);
        if (st != HVD_OK)
            return st;
        for (int r = 0; r < p; r++) {
            g->lens[r] = n / (size_t)p + ((size_t)r < n % (size_t)p);
            g->offs[r] = r == 0 ? 0 : g->offs[r - 1] + g->lens[r - 1];
        }
        uint8_t *out = (uint8_t *)recv + off * osize;
        reduce_slice(g, a, idx, g->offs[me], g->lens[me], out + g->offs[me] * osize, dtype, op,
                     postscale);
        if ((st = hvd__arena_step(a)) != HVD_OK)
            return hvd__group_arena_failed(g, st, what);
        for (int r = 0; r < p; r++)
            if (r != me)
                hvd__allreduce_to_out(out + g->offs[r] * osize,
                                      hvd__arena_data(a, idx[r]) + g->offs[r] * wsize, g->lens[r],
                                      dtype);
        hvd__arena_flip(a);
    }
    return HVD_OK;
}

hvd_status_t hvd__shm_allreduce(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                                const void *send, void *recv, size_t count, hvd_dtype_t dtype,
                                hvd_reduce_op_t op, double prescale, double postscale,
                                const char *what) {
    int p = g->size;
    int valid = !(sig->flags & HVD_SIG_INVALID);
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    size_t wbytes = valid ? count * hvd__dtype_size(w) : 0;
    if (wbytes > SHM_SMALL_BYTES || wbytes > a->data_bytes)
        return sliced(g, a, idx, sig, send, recv, count, dtype, op, prescale, postscale, what);
    if (valid)
        hvd__allreduce_to_work(hvd__arena_data(a, a->self), send, count, dtype, prescale);
    hvd_status_t st = hvd__group_arena_agree(g, a, idx, sig, what);
    if (st != HVD_OK)
        return st;
    const uint8_t *blocks[HVD_ARENA_MAX_RANKS];
    for (int r = 0; r < p; r++)
        blocks[r] = hvd__arena_data(a, idx[r]);
    /* the half types accumulate in float32 scratch, the others in recv */
    void *acc = count == 0 ? NULL : w != dtype ? hvd__group_scratch(g, 0, wbytes) : recv;
    if (acc)
        hvd__allreduce_combine(blocks, p, acc, recv, count, dtype, op, postscale);
    hvd__arena_flip(a);
    return acc || count == 0 ? HVD_OK : HVD_ERR_NO_MEMORY; /* the scratch's error is set */
}
