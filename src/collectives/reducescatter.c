/* Reducescatter: the first half of the ring allreduce, arranged so that rank r ends up
 * owning block r (among one host's ranks: in its arena); float16/bfloat16 accumulate in
 * float32 and are rounded once. */
#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "collectives/ring.h"
#include "collectives/shm_coll.h"
#include "common/error.h"

#include <string.h>

#define ARENA_MIN_BYTES ((size_t)8 << 20)

typedef struct {
    void *out;
    size_t out_off; /* element offset of this rank's block */
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
} finish_t;

/* n reduced elements w (working dtype wdtype) of a group of p: the average's division and
 * the conversion to the output dtype, into o. */
static void finish_block(const finish_t *f, void *w, size_t n, hvd_dtype_t wdtype, int p, void *o) {
    if (f->op == HVD_AVERAGE)
        hvd__reduce_average(w, n, wdtype, p);
    if (wdtype != f->dtype)
        hvd__f32_to_half(o, w, n, f->dtype);
    else if (n)
        memcpy(o, w, n * hvd__dtype_size(f->dtype));
}

static void finalize(hvd_ring_t *ring, size_t off, size_t n) {
    finish_t *f = ring->finalize_arg;
    finish_block(f, (char *)ring->work + off * hvd__dtype_size(ring->wdtype), n, ring->wdtype,
                 ring->g->size, (char *)f->out + (off - f->out_off) * hvd__dtype_size(f->dtype));
}

/* counts: the elements each rank receives (NULL: count each). */
static hvd_status_t reducescatter(hvd_group_t *g, const void *send, void *recv,
                                  const size_t *counts, size_t count, hvd_dtype_t dtype,
                                  hvd_reduce_op_t op) {
    char what[128];
    hvd__coll_what(g, "reducescatter", what, sizeof what);
    int p = g->size;
    size_t n = 0;
    for (int r = 0; r < p; r++) {
        size_t c = counts ? counts[r] : count;
        g->lens[r] = c;
        g->offs[r] = n;
        n += c;
    }
    size_t mine = g->lens[g->rank];
    hvd_sig_t sig = {
        .coll = HVD_COLL_REDUCESCATTER, .dtype = (uint8_t)dtype, .op = (uint8_t)op, .count = n};
    int half = dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16;
    hvd_dtype_t wdtype = half ? HVD_FLOAT32 : dtype;
    size_t total = 0;
    hvd_status_t st = hvd__reduce_check(dtype, op);
    if (st == HVD_OK)
        st = hvd__coll_bytes(n, hvd__dtype_size(wdtype), what, &total);
    if (st == HVD_OK)
        st = hvd__coll_check_buf(send, n, what, "sendbuf");
    if (st == HVD_OK)
        st = hvd__coll_check_buf(recv, mine, what, "recvbuf");
    if (st != HVD_OK)
        sig.flags |= HVD_SIG_INVALID;
    st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK || n == 0)
        return st;
    /* One host's ranks from 8 MiB: in its arena (3 alternating repeats, medians, np 2 / np 4:
     * 16 MiB 2.12 / 4.80 ms against the ring's 2.64 / 5.63, 64 MiB 10.4 / 20.2 against
     * 11.7 / 23.0; level at 4 MiB, and at 1 MiB the ring's single exchange was faster). */
    const int *idx;
    hvd_arena_t *a = p > 1 && total >= ARENA_MIN_BYTES ? hvd__group_arena(g, &idx) : NULL;
    void *work = hvd__group_scratch(g, 0, a ? mine * hvd__dtype_size(wdtype) : total);
    if (!work)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    finish_t fin = {.out = recv, .out_off = g->offs[g->rank], .dtype = dtype, .op = op};
    hvd_ring_t ring = {.g = g,
                       .seg_off = g->offs,
                       .seg_len = g->lens,
                       .own = g->rank,
                       .work = work,
                       .wdtype = wdtype,
                       .op = op,
                       .finalize = finalize,
                       .finalize_arg = &fin};
    if (a) { /* every rank reduces its own block from all slots, in parallel */
        st = hvd__shm_reduce_scatter(g, a, idx, send, work, g->offs, g->lens, dtype, op, 1.0, what);
        if (st == HVD_OK)
            finish_block(&fin, work, mine, wdtype, p, recv);
        return st;
    }
    if (half)
        hvd__half_to_f32(work, send, n, dtype);
    else if ((const char *)recv < (const char *)send + total &&
             (const char *)send < (const char *)recv + mine * hvd__dtype_size(dtype))
        memcpy(work, send, total); /* in place: results land on input other ranks still read */
    else
        ring.first_src = send;
    if (p == 1) {
        if (!half && ring.first_src)
            memcpy(work, send, total);
        finalize(&ring, 0, mine);
        return HVD_OK;
    }
    return hvd__ring_run(&ring, what);
}

hvd_status_t hvd__coll_reducescatter(hvd_group_t *g, const void *send, void *recv, size_t count,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op) {
    return reducescatter(g, send, recv, NULL, count, dtype, op);
}

hvd_status_t hvd__coll_reducescatterv(hvd_group_t *g, const void *send, void *recv,
                                      const size_t *counts, hvd_dtype_t dtype, hvd_reduce_op_t op) {
    return reducescatter(g, send, recv, counts, 0, dtype, op);
}
