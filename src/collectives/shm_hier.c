/* Hierarchical allreduce (shm_coll.h): inside each host in its arena, across hosts between
 * ranks of equal local rank over the transport. */
#include "collectives/coll.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "collectives/shm_coll.h"
#include "common/error.h"

#include <string.h>

/* Elements of part r in step k of c elements per part. */
static size_t piece(const size_t *plen, int r, size_t k, size_t c) {
    return plen[r] > k * c ? (plen[r] - k * c < c ? plen[r] - k * c : c) : 0;
}

hvd_status_t hvd__shm_reduce_scatter(hvd_group_t *lg, hvd_arena_t *a, const int *idx,
                                     const void *send, uint8_t *part, const size_t *poff,
                                     const size_t *plen, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                     double prescale, const char *what) {
    int L = lg->size, me = lg->rank;
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    size_t wsize = hvd__dtype_size(w), osize = hvd__dtype_size(dtype);
    size_t c = a->data_bytes / wsize / (size_t)L, most = 0;
    for (int r = 0; r < L; r++)
        most = plen[r] > most ? plen[r] : most;
    for (size_t k = 0; k * c < most; k++) {
        uint8_t *slot = hvd__arena_data(a, a->self);
        for (int r = 0; r < L; r++)
            hvd__allreduce_to_work(slot + (size_t)r * c * wsize,
                                   (const uint8_t *)send + (poff[r] + k * c) * osize,
                                   piece(plen, r, k, c), dtype, prescale);
        hvd_status_t st = hvd__arena_step(a);
        if (st != HVD_OK)
            return hvd__group_arena_failed(lg, st, what);
        hvd__shm_reduce_into(a, idx, L, (size_t)me * c, piece(plen, me, k, c), w, op,
                             part + k * c * wsize);
        hvd__arena_flip(a);
    }
    return HVD_OK;
}

/* Allgather inside the host: every rank's finished part (working dtype) into recv. */
static hvd_status_t host_allgather(hvd_group_t *lg, hvd_arena_t *a, const int *idx,
                                   const uint8_t *part, void *recv, const size_t *poff,
                                   const size_t *plen, hvd_dtype_t dtype, const char *what) {
    int L = lg->size, me = lg->rank;
    size_t wsize = hvd__dtype_size(hvd__allreduce_work_dtype(dtype)),
           osize = hvd__dtype_size(dtype);
    size_t c = a->data_bytes / wsize;
    for (size_t k = 0; k * c < plen[0]; k++) {
        size_t n = piece(plen, me, k, c);
        if (n)
            memcpy(hvd__arena_data(a, a->self), part + k * c * wsize, n * wsize);
        hvd_status_t st = hvd__arena_step(a);
        if (st != HVD_OK)
            return hvd__group_arena_failed(lg, st, what);
        for (int r = 0; r < L; r++)
            hvd__allreduce_to_out((uint8_t *)recv + (poff[r] + k * c) * osize,
                                  hvd__arena_data(a, idx[r]), piece(plen, r, k, c), dtype);
        hvd__arena_flip(a);
    }
    return HVD_OK;
}

hvd_status_t hvd__shm_hier_allreduce(hvd_group_t *g, hvd_sig_t *sig, const void *send, void *recv,
                                     size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                     double prescale, double postscale, const char *what,
                                     hvd_cross_allreduce_fn cross) {
    hvd_status_t st = hvd__group_agree(g, sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK || count == 0)
        return st;
    hvd_group_t *lg = g->hier_local, *cg = g->hier_cross;
    const int *idx;
    hvd_arena_t *a = hvd__group_arena(lg, &idx);
    if (!a)
        return hvd__error_set(HVD_ERR_PROTOCOL, "%s: the host's arena is gone", what);
    int L = lg->size;
    size_t *poff = lg->offs, *plen = lg->lens; /* part r of the vector: local rank r's */
    for (int r = 0; r < L; r++) {
        plen[r] = count / (size_t)L + ((size_t)r < count % (size_t)L);
        poff[r] = r == 0 ? 0 : poff[r - 1] + plen[r - 1];
    }
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    size_t mine = plen[lg->rank];
    uint8_t *part = hvd__group_scratch(g, 0, mine * hvd__dtype_size(w));
    if (!part)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    st = hvd__shm_reduce_scatter(lg, a, idx, send, part, poff, plen, dtype, op, prescale, what);
    if (st != HVD_OK)
        return st;
    /* Across hosts the part is summed as is; the average's division and the postscale come
     * once, by the job's size, on the result. */
    st = cross(cg, part, part, mine, w, op == HVD_AVERAGE ? HVD_SUM : op, 1.0, 1.0);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "%s, between hosts", what);
    hvd__allreduce_finish(part, mine, dtype, op, g->size, postscale);
    return host_allgather(lg, a, idx, part, recv, poff, plen, dtype, what);
}

/* Local rank j's bundle is the blocks of local rank j on every host, in host order. Bytes
 * [at, at + n) of it, from src, to their blocks' places in recv (g->lens/offs: bytes). */
static void bundle_scatter(const hvd_group_t *g, int hosts, int j, size_t at, const uint8_t *src,
                           size_t n, uint8_t *recv) {
    int L = g->hier_local->size;
    size_t pos = 0;
    for (int h = 0; h < hosts && n; h++) {
        int r = g->hier_grid[h * L + j];
        size_t len = g->lens[r];
        if (at < pos + len) {
            size_t skip = at - pos, take = len - skip < n ? len - skip : n;
            memcpy(recv + g->offs[r] + skip, src, take);
            src += take;
            at += take;
            n -= take;
        }
        pos += len;
    }
}

static size_t bundle_len(const hvd_group_t *g, int hosts, int j) {
    size_t n = 0;
    for (int h = 0; h < hosts; h++)
        n += g->lens[g->hier_grid[h * g->hier_local->size + j]];
    return n;
}

hvd_status_t hvd__shm_hier_allgather(hvd_group_t *g, const void *send, void *recv, const char *what,
                                     hvd_cross_allgather_fn cross) {
    hvd_group_t *lg = g->hier_local, *cg = g->hier_cross;
    const int *idx;
    hvd_arena_t *a = hvd__group_arena(lg, &idx);
    if (!a)
        return hvd__error_set(HVD_ERR_PROTOCOL, "%s: the host's arena is gone", what);
    int L = lg->size, H = cg->size, me = lg->rank;
    /* 1. Across hosts: this rank's block to the ranks of equal local rank, which gives it its
     * bundle. */
    size_t *counts = hvd__group_scratch(g, 1, (size_t)H * sizeof *counts);
    size_t mine = bundle_len(g, H, me);
    uint8_t *bundle = hvd__group_scratch(g, 0, mine);
    if (!counts || !bundle)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    for (int h = 0; h < H; h++)
        counts[h] = g->lens[g->hier_grid[h * L + me]];
    hvd_status_t st = cross(cg, send, bundle, counts, 0, HVD_UINT8);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "%s, between hosts", what);
    bundle_scatter(g, H, me, 0, bundle, mine, recv);
    /* 2. Inside the host: every rank's bundle, a slot at a time. */
    size_t c = a->data_bytes, most = 0;
    for (int j = 0; j < L; j++) {
        size_t n = bundle_len(g, H, j);
        most = n > most ? n : most;
    }
    for (size_t at = 0; at < most; at += c) {
        if (mine > at)
            memcpy(hvd__arena_data(a, a->self), bundle + at, mine - at < c ? mine - at : c);
        st = hvd__arena_step(a);
        if (st != HVD_OK)
            return hvd__group_arena_failed(lg, st, what);
        for (int j = 0; j < L; j++) {
            size_t n = bundle_len(g, H, j);
            if (j != me && n > at)
                bundle_scatter(g, H, j, at, hvd__arena_data(a, idx[j]), n - at < c ? n - at : c,
                               recv);
        }
        hvd__arena_flip(a);
    }
    return HVD_OK;
}
