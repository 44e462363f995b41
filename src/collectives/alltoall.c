/* Alltoall: every pair exchanges its blocks directly, all transfers progressing at once
 * (rank r starts with r+1, r+2, ... so the ranks do not all queue on rank 0 first). */
#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "common/error.h"

#include <string.h>

hvd_status_t hvd__coll_alltoall(hvd_group_t *g, const void *send, void *recv, size_t count,
                                hvd_dtype_t dtype) {
    char what[128];
    hvd__coll_what(g, "alltoall", what, sizeof what);
    hvd_sig_t sig = {.coll = HVD_COLL_ALLTOALL, .dtype = (uint8_t)dtype, .count = count};
    int p = g->size;
    size_t block = 0, total = 0;
    hvd_status_t st =
        hvd__coll_check_blocks(send, recv, count, hvd__dtype_size(dtype), p, what, &block, &total);
    if (st != HVD_OK)
        sig.flags |= HVD_SIG_INVALID;
    st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK || total == 0)
        return st;
    if (send == recv) {
        /* In place: the blocks we send would be overwritten by those we receive. */
        void *copy = hvd__group_scratch(g, 0, total);
        if (!copy)
            return HVD_ERR_NO_MEMORY;
        memcpy(copy, send, total);
        send = copy;
    }
    memcpy((char *)recv + (size_t)g->rank * block, (const char *)send + (size_t)g->rank * block,
           block);
    hvd_xfer_t *xs = hvd__group_xfers(g, 2 * (size_t)(p - 1));
    if (!xs)
        return HVD_ERR_NO_MEMORY;
    size_t n = 0;
    for (int d = 1; d < p; d++) {
        int to = (g->rank + d) % p, from = (g->rank - d + p) % p;
        hvd_xfer_t *s = &xs[n++], *r = &xs[n++];
        s->peer = hvd__group_peer(g, to);
        s->is_send = 1;
        s->iov[0].iov_base = (char *)send + (size_t)to * block;
        s->iov[0].iov_len = block;
        s->iovcnt = 1;
        r->peer = hvd__group_peer(g, from);
        r->iov[0].iov_base = (char *)recv + (size_t)from * block;
        r->iov[0].iov_len = block;
        r->iovcnt = 1;
    }
    return hvd__group_exchange(g, xs, n, what);
}
