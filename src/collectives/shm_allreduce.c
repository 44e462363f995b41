/* Allreduce in the host arena (shm_coll.h). */
#include <hvd/hvd.h>

#include "collectives/coll.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "collectives/shm_coll.h"
#include "common/error.h"
#include "common/log.h"

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

/* Large allreduces of a group whose ranks may read each other's memory (g->cma_pids: with
 * HVD_CMA=1, off by default, as for the allgather) skip the arena's copies: each rank reads
 * its slice of every other rank's input straight from the owner's buffer, reduces it into its
 * own output, and then reads every other slice of the result straight from its owner's
 * output. A rank moves about 3/2 of the vector through memory where the sliced path moves 5
 * (np 2), but the kernel pins every page it reads. Measured on this project's 2-core VM
 * (np 2, out of place), one session: 8 MiB 3.4 -> 1.8 ms, 16 MiB 6.0 -> 4.4 ms; later the same
 * day, 4-64 MiB 1.3-1.9x slower than the slices (64 MiB in place 21-23 against 11-13 ms): the
 * VM's page pinning varies more than its copies, which is why HVD_CMA stays off. With more
 * ranks than cores it was twice as slow (np 4: 16 MiB 7.0 -> 12.5 ms), so an oversubscribed
 * host (a->yield) keeps the slices whatever HVD_CMA says. */
#define CMA_MIN_BYTES ((size_t)1 << 20)
/* A slice is read from each peer this many bytes at a time (a system call each): the pieces of
 * every peer stay in the L2 cache while they are reduced. */
#define CMA_PIECE_BYTES ((size_t)64 << 10)

/* Elements [from, from + n) of every rank's input, reduced in group rank order, finished, into
 * out (this rank's output at from): each piece of the peers' inputs is read into scratch,
 * then reduced through an L1 tile (read whole before it is written: send may be recv). */
static hvd_status_t cma_reduce_slice(hvd_group_t *g, const uint64_t *sends, const uint8_t *send,
                                     uint8_t *out, size_t from, size_t n, hvd_dtype_t dtype,
                                     hvd_reduce_op_t op, double postscale, const char *what) {
    int p = g->size, me = g->rank;
    size_t esize = hvd__dtype_size(dtype), piece = CMA_PIECE_BYTES / esize;
    uint8_t *bufs = hvd__group_scratch(g, 0, (size_t)p * CMA_PIECE_BYTES);
    if (!bufs)
        return hvd__group_arena_failed(g, HVD_ERR_NO_MEMORY, what);
    const uint8_t *src[HVD_ARENA_MAX_RANKS];
    for (size_t at = from; at < from + n; at += piece) {
        size_t k = from + n - at < piece ? from + n - at : piece;
        for (int r = 0; r < p; r++) {
            if (r == me) {
                src[r] = send + at * esize;
                continue;
            }
            uint8_t *buf = bufs + (size_t)r * CMA_PIECE_BYTES;
            hvd_status_t st = hvd__shm_cma_read(g, r, sends[r] + at * esize, buf, k * esize, what);
            if (st != HVD_OK)
                return hvd__group_arena_failed(g, st, what);
            src[r] = buf;
        }
        size_t step = TILE_BYTES / esize;
        _Alignas(64) uint8_t tile[TILE_BYTES];
        for (size_t t = 0; t < k; t += step) {
            size_t m = k - t < step ? k - t : step;
            memcpy(tile, src[0] + t * esize, m * esize);
            for (int r = 1; r < p; r++)
                hvd__reduce(tile, src[r] + t * esize, m, dtype, op);
            hvd__allreduce_finish(tile, m, dtype, op, p, postscale);
            memcpy(out + (at + t) * esize, tile, m * esize);
        }
    }
    return HVD_OK;
}

/* The allreduce by cross-memory attach (see CMA_MIN_BYTES), for a valid call whose working
 * dtype is its own and that has no prescale. Three steps: the agreement, which also publishes
 * each rank's buffers; every slice reduced; every slice read (no rank leaves, and changes its
 * output, while another still reads it). */
static hvd_status_t by_cma(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                           const void *send, void *recv, size_t count, hvd_dtype_t dtype,
                           hvd_reduce_op_t op, double postscale, const char *what) {
    int p = g->size, me = g->rank;
    size_t esize = hvd__dtype_size(dtype);
    static int said; /* (once a process: e2e.shm looks for it) */
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        HVD_LOG_D("%s: reading the host's ranks' buffers in place (HVD_CMA=1, from %zu bytes)",
                  what, (size_t)CMA_MIN_BYTES);
    uint64_t mine[2] = {(uint64_t)(uintptr_t)send, (uint64_t)(uintptr_t)recv};
    memcpy(hvd__arena_data(a, a->self), mine, sizeof mine);
    sig->flags |= HVD_SIG_CMA;
    hvd_status_t st = hvd__group_arena_agree(g, a, idx, sig, what);
    if (st != HVD_OK)
        return st;
    uint64_t sends[HVD_ARENA_MAX_RANKS], recvs[HVD_ARENA_MAX_RANKS];
    for (int r = 0; r < p; r++) {
        uint64_t theirs[2];
        memcpy(theirs, hvd__arena_data(a, idx[r]), sizeof theirs);
        sends[r] = theirs[0];
        recvs[r] = theirs[1];
        g->lens[r] = count / (size_t)p + ((size_t)r < count % (size_t)p);
        g->offs[r] = r == 0 ? 0 : g->offs[r - 1] + g->lens[r - 1];
    }
    st = cma_reduce_slice(g, sends, send, recv, g->offs[me], g->lens[me], dtype, op, postscale,
                          what);
    if (st != HVD_OK)
        return st;
    if ((st = hvd__arena_step(a)) != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    for (int r = 0; r < p; r++) {
        if (r == me || g->lens[r] == 0)
            continue;
        size_t off = g->offs[r] * esize;
        st = hvd__shm_cma_read(g, r, recvs[r] + off, (uint8_t *)recv + off, g->lens[r] * esize,
                               what);
        if (st != HVD_OK)
            return hvd__group_arena_failed(g, st, what);
    }
    hvd__arena_flip(a);
    if ((st = hvd__arena_step(a)) != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    hvd__arena_flip(a);
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
    if (g->cma_pids && !a->yield && wbytes >= CMA_MIN_BYTES && w == dtype && prescale == 1.0)
        return by_cma(g, a, idx, sig, send, recv, count, dtype, op, postscale, what);
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
