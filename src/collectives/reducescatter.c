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

hvd_status_t hvd__coll_reducescatter(hvd_group_t *g, const void *send, void *recv, size_t count,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op) {
    char what[128];
    hvd__coll_what(g, "reducescatter", what, sizeof what);
    hvd_sig_t sig = {
        .coll = HVD_COLL_REDUCESCATTER, .dtype = (uint8_t)dtype, .op = (uint8_t)op, .count = count};
    int p = g->size;
    int half = dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16;
    hvd_dtype_t wdtype = half ? HVD_FLOAT32 : dtype;
    size_t block = 0, total = 0;
    hvd_status_t st = hvd__reduce_check(dtype, op);
    if (st == HVD_OK)
        st = hvd__coll_check_blocks(send, recv, count, hvd__dtype_size(wdtype), p, what, &block,
                                    &total);
    if (st != HVD_OK)
        sig.flags |= HVD_SIG_INVALID;
    st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK || count == 0)
        return st;
    size_t n = count * (size_t)p;
    void *work = hvd__group_scratch(g, 0, total);
    if (!work)
        return HVD_ERR_NO_MEMORY;
    finish_t fin = {.out = recv, .out_off = (size_t)g->rank * count, .dtype = dtype, .op = op};
    for (int r = 0; r < p; r++) {
        g->lens[r] = count;
        g->offs[r] = (size_t)r * count;
    }
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
             (const char *)send < (const char *)recv + count * hvd__dtype_size(dtype))
        memcpy(work, send, total); /* in place: results land on input other ranks still read */
    else
        ring.first_src = send;
    if (p == 1) {
        if (!half && ring.first_src)
            memcpy(work, send, total);
        finalize(&ring, 0, count);
        return HVD_OK;
    }
    return hvd__ring_run(&ring, what);
}
