/* Allreduce: small inputs are gathered whole in the agreement rounds and reduced locally in
 * rank order (every rank computes the same bits); larger ones run the pipelined ring, or with
 * HVD_REPRODUCIBLE a direct exchange that also sums in rank order (ordered() below).
 * float16 and bfloat16 are converted to float32 first, travel and accumulate as float32,
 * and are rounded once at the end. */
#include "collectives/coll.h"
#include "collectives/adasum.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/halving.h"
#include "collectives/reduce.h"
#include "collectives/ring.h"
#include "collectives/shm_coll.h"
#include "common/error.h"
#include "transport/shm_arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    void *out;
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    double postscale;
} finish_t;

static void ring_finalize(hvd_ring_t *ring, size_t off, size_t n) {
    finish_t *f = ring->finalize_arg;
    size_t wsize = hvd__dtype_size(ring->wdtype), osize = hvd__dtype_size(f->dtype);
    hvd__allreduce_from_work((char *)f->out + off * osize, (char *)ring->work + off * wsize, n,
                             f->dtype, f->op, ring->g->size, f->postscale);
}

static hvd_status_t small(hvd_group_t *g, hvd_sig_t *sig, const void *send, void *recv,
                          size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                          double postscale, const char *what) {
    int p = g->size;
    size_t wbytes = count * hvd__dtype_size(hvd__allreduce_work_dtype(dtype));
    uint8_t *mine = hvd__group_scratch(g, 0, wbytes);
    uint8_t *all = hvd__group_scratch(g, 1, wbytes * (size_t)p);
    uint8_t *stage = hvd__group_scratch(g, 2, wbytes * (size_t)p);
    if (!mine || !all || !stage)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    if (!(sig->flags & HVD_SIG_INVALID))
        hvd__allreduce_to_work(mine, send, count, dtype, prescale);
    for (int r = 0; r < p; r++) {
        g->lens[r] = (sig->flags & HVD_SIG_INVALID) && r == g->rank ? 0 : wbytes;
        g->offs[r] = (size_t)r * wbytes;
    }
    hvd_status_t st = hvd__group_agree(g, sig, mine, g->lens, g->offs, all, stage, what);
    if (st != HVD_OK)
        return st;
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    for (int r = 1; r < p; r++)
        hvd__reduce(all, all + (size_t)r * wbytes, count, w, op);
    hvd__allreduce_from_work(recv, all, count, dtype, op, p, postscale);
    return HVD_OK;
}

/* The ring's segments of count elements over p ranks, the first count % p one longer, in
 * g->lens and g->offs (elements). */
static void split_segments(hvd_group_t *g, size_t count) {
    int p = g->size;
    for (int r = 0; r < p; r++) {
        g->lens[r] = count / (size_t)p + ((size_t)r < count % (size_t)p);
        g->offs[r] = r == 0 ? 0 : g->offs[r - 1] + g->lens[r - 1];
    }
}

/* HVD_REPRODUCIBLE between hosts: each rank receives every rank's piece of its own segment
 * (the alltoall's direct exchange), folds them in rank order as the arena and the small path
 * do, finishes its segment, and the finished segments go round the ring allgather. The same
 * bytes cross the network as in the ring; what changes is that each element's sum no longer
 * starts at the rank after its segment's owner, which made its bits depend on where fusion
 * had put it. (Called after the agreement, with p > 1.) */
static hvd_status_t ordered(hvd_group_t *g, const void *send, void *recv, size_t count,
                            hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                            double postscale, const char *what) {
    int p = g->size, me = g->rank;
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    size_t wsize = hvd__dtype_size(w), osize = hvd__dtype_size(dtype);
    split_segments(g, count);
    size_t mine = g->lens[me], mine_off = g->offs[me];
    /* the exchange's byte layouts: segment r of the input to rank r; every rank's piece of
     * this rank's segment, in rank order */
    size_t *b = malloc(4 * (size_t)p * sizeof *b);
    if (!b)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    size_t *soff = b, *sbytes = b + p, *roff = b + 2 * p, *rbytes = b + 3 * p;
    for (int r = 0; r < p; r++) {
        soff[r] = g->offs[r] * wsize;
        sbytes[r] = g->lens[r] * wsize;
        roff[r] = (size_t)r * mine * wsize;
        rbytes[r] = mine * wsize;
    }
    /* The input in the working dtype (converted and prescaled into scratch or recv, else send
     * itself), and every rank's piece of this rank's segment. */
    const void *src = send;
    hvd_status_t st = HVD_OK;
    if (hvd__allreduce_is_half(dtype) || prescale != 1.0) {
        void *work = hvd__allreduce_is_half(dtype) ? hvd__group_scratch(g, 0, count * wsize) : recv;
        if (work)
            hvd__allreduce_to_work(work, send, count, dtype, prescale);
        src = work;
    }
    uint8_t *pieces = hvd__group_scratch(g, 1, (size_t)p * mine * wsize);
    if (!src || !pieces)
        st = HVD_ERR_NO_MEMORY;
    if (st == HVD_OK)
        st = hvd__coll_exchange(g, src, soff, sbytes, pieces, roff, rbytes, what);
    if (st == HVD_OK) {
        /* the segment in the working dtype: in the scratch copy for half types, else where it
         * ends up in recv (the exchange is over: nothing reads this rank's input any more) */
        uint8_t *acc =
            (uint8_t *)(hvd__allreduce_is_half(dtype) ? (void *)src : recv) + mine_off * wsize;
        if (mine)
            memcpy(acc, pieces, mine * wsize);
        for (int r = 1; r < p; r++)
            hvd__reduce(acc, pieces + (size_t)r * mine * wsize, mine, w, op);
        hvd__allreduce_from_work((uint8_t *)recv + mine_off * osize, acc, mine, dtype, op, p,
                                 postscale);
        /* then every finished segment to every rank, in the output dtype, as bytes */
        for (int r = 0; r < p; r++) {
            g->lens[r] *= osize;
            g->offs[r] *= osize;
        }
        hvd_ring_t ring = {
            .g = g, .seg_off = g->offs, .seg_len = g->lens, .own = me, .out = recv, .osize = 1};
        st = hvd__ring_run(&ring, what);
    }
    free(b);
    return st;
}

hvd_status_t hvd__allreduce_check(const void *send, const void *recv, size_t count,
                                  hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                                  double postscale, const char *what, size_t *work_bytes_p) {
    hvd_status_t st = op == HVD_ADASUM ? hvd__adasum_check(dtype) : hvd__reduce_check(dtype, op);
    if (st == HVD_OK)
        st = hvd__coll_bytes(count, hvd__dtype_size(hvd__allreduce_work_dtype(dtype)), what,
                             work_bytes_p);
    if (st == HVD_OK)
        st = hvd__coll_check_buf(send, count, what, "sendbuf");
    if (st == HVD_OK)
        st = hvd__coll_check_buf(recv, count, what, "recvbuf");
    if (st == HVD_OK && (prescale != 1.0 || postscale != 1.0) &&
        (dtype == HVD_BOOL || (op != HVD_SUM && op != HVD_AVERAGE && op != HVD_ADASUM)))
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s: prescale/postscale need op sum, average or adasum and a "
                            "numeric dtype",
                            what);
    return st;
}

size_t hvd__allreduce_small_limit(int p) {
    return p <= 4 ? HVD_SMALL_ALLREDUCE_BYTES_UPTO4 : HVD_SMALL_BYTES;
}

size_t hvd__allreduce_inline_limit(const hvd_group_t *g) {
    size_t small = hvd__allreduce_small_limit(g->size);
    return g->hier_grid && small < HVD_HIER_INLINE_BYTES ? HVD_HIER_INLINE_BYTES : small;
}

hvd_status_t hvd__coll_adasum(hvd_group_t *g, const void *send, void *recv, size_t count,
                              hvd_dtype_t dtype, double prescale, double postscale,
                              const size_t *parts, size_t nparts) {
    char what[128];
    hvd__coll_what(g, "adasum allreduce", what, sizeof what);
    hvd_sig_t sig = {.coll = HVD_COLL_ALLREDUCE,
                     .dtype = (uint8_t)dtype,
                     .op = HVD_ADASUM,
                     .flags = g->ordered ? HVD_SIG_ORDERED : 0,
                     .count = count};
    const int *idx;
    hvd_arena_t *a = g->size > 1 ? hvd__group_arena(g, &idx) : NULL;
    if (a)
        return hvd__shm_adasum(g, a, idx, &sig, send, recv, count, dtype, prescale, postscale,
                               parts, nparts, what);
    hvd_status_t st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK || count == 0)
        return st;
    return hvd__adasum_run(g, send, recv, count, dtype, prescale, postscale, parts, nparts, what);
}

hvd_status_t hvd__coll_allreduce(hvd_group_t *g, const void *send, void *recv, size_t count,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                                 double postscale) {
    char what[128];
    hvd__coll_what(g, "allreduce", what, sizeof what);
    hvd_sig_t sig = {.coll = HVD_COLL_ALLREDUCE,
                     .dtype = (uint8_t)dtype,
                     .op = (uint8_t)op,
                     .flags = (g->ordered ? HVD_SIG_ORDERED : 0) |
                              (prescale != 1.0 ? HVD_SIG_PRESCALED : 0),
                     .count = count};
    size_t bytes = 0;
    hvd_status_t st =
        hvd__allreduce_check(send, recv, count, dtype, op, prescale, postscale, what, &bytes);
    if (st != HVD_OK) {
        sig.flags |= HVD_SIG_INVALID;
        const int *idx;
        hvd_arena_t *a = g->size > 1 ? hvd__group_arena(g, &idx) : NULL;
        if (a)
            return hvd__shm_allreduce(g, a, idx, &sig, NULL, NULL, 0, HVD_UINT8, HVD_SUM, 1.0, 1.0,
                                      what);
        return small(g, &sig, NULL, NULL, 0, HVD_UINT8, HVD_SUM, 1.0, 1.0, what);
    }
    int p = g->size;
    if (op == HVD_ADASUM)
        return hvd__coll_adasum(g, send, recv, count, dtype, prescale, postscale, NULL, 0);
    if (g->hier_local && bytes >= g->hier_min_bytes && !g->ordered)
        return hvd__shm_hier_allreduce(g, &sig, send, recv, count, dtype, op, prescale, postscale,
                                       what, hvd__coll_allreduce);
    const int *idx;
    hvd_arena_t *a = p > 1 ? hvd__group_arena(g, &idx) : NULL;
    if (a)
        return hvd__shm_allreduce(g, a, idx, &sig, send, recv, count, dtype, op, prescale,
                                  postscale, what);
    if (p == 1 || bytes <= hvd__allreduce_small_limit(p))
        return small(g, &sig, send, recv, count, dtype, op, prescale, postscale, what);

    st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK)
        return st;
    if (g->ordered)
        return ordered(g, send, recv, count, dtype, op, prescale, postscale, what);
    split_segments(g, count);
    finish_t fin = {.out = recv, .dtype = dtype, .op = op, .postscale = postscale};
    hvd_ring_t ring = {.g = g,
                       .seg_off = g->offs,
                       .seg_len = g->lens,
                       .own = (g->rank + 1) % p,
                       .wdtype = hvd__allreduce_work_dtype(dtype),
                       .op = op,
                       .finalize = ring_finalize,
                       .finalize_arg = &fin,
                       .out = recv,
                       .osize = hvd__dtype_size(dtype)};
    if (hvd__allreduce_is_half(dtype) || prescale != 1.0) {
        /* The input is converted (and scaled) once up front; the ring works on that copy
         * (half types) or on recv (others). */
        void *work = hvd__allreduce_is_half(dtype) ? hvd__group_scratch(g, 0, bytes) : recv;
        if (!work)
            return hvd__error_pass(HVD_ERR_NO_MEMORY);
        hvd__allreduce_to_work(work, send, count, dtype, prescale);
        ring.work = work;
    } else {
        ring.work = recv;
        ring.first_src = send == recv ? NULL : send;
    }
    /* Power-of-two groups take fewer, pairwise steps (halving.c); measured at np=4 on 2
     * cores: 1-16 MiB 10-25 % faster than the ring, 64 MiB 20 % slower. */
    if ((p & (p - 1)) == 0 && p >= 4 && bytes <= HVD_HALVING_MAX_BYTES)
        return hvd__halving_run(&ring, count, what);
    return hvd__ring_run(&ring, what);
}
