/* Reducescatter: the first half of the ring allreduce, arranged so that rank r ends up
 * owning block r; float16/bfloat16 accumulate in float32 and are rounded once. */
#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "collectives/ring.h"
#include "common/error.h"

#include <string.h>

typedef struct {
    void *out;
    size_t out_off; /* element offset of this rank's block */
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
} finish_t;

static void finalize(hvd_ring_t *ring, size_t off, size_t n) {
    finish_t *f = ring->finalize_arg;
    size_t wsize = hvd__dtype_size(ring->wdtype), osize = hvd__dtype_size(f->dtype);
    void *w = (char *)ring->work + off * wsize;
    if (f->op == HVD_AVERAGE)
        hvd__reduce_average(w, n, ring->wdtype, ring->g->size);
    void *o = (char *)f->out + (off - f->out_off) * osize;
    if (ring->wdtype != f->dtype)
        hvd__f32_to_half(o, w, n, f->dtype);
    else if (n)
        memcpy(o, w, n * osize);
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
    void *work = hvd__group_scratch(g, 0, total);
    if (!work)
        return HVD_ERR_NO_MEMORY;
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
