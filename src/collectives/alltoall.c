/* Alltoall: every pair exchanges its blocks directly, all transfers progressing at once
 * (rank r starts with r+1, r+2, ... so the ranks do not all queue on rank 0 first). */
#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "common/error.h"

#include <stdlib.h>
#include <string.h>

hvd_status_t hvd__coll_exchange(hvd_group_t *g, const void *send_, const size_t *soff,
                                const size_t *sbytes, void *recv_, const size_t *roff,
                                const size_t *rbytes, const char *what) {
    const char *send = send_;
    char *recv = recv_;
    int p = g->size, me = g->rank;
    if (rbytes[me])
        memcpy(recv + roff[me], send + soff[me], rbytes[me]);
    hvd_xfer_t *xs = hvd__group_xfers(g, 2 * (size_t)(p - 1));
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    size_t n = 0;
    for (int d = 1; d < p; d++) {
        int to = (me + d) % p, from = (me - d + p) % p;
        hvd_xfer_t *s = &xs[n++], *r = &xs[n++];
        s->peer = hvd__group_peer(g, to);
        s->is_send = 1;
        s->iov[0].iov_base = (char *)send + soff[to];
        s->iov[0].iov_len = sbytes[to];
        s->iovcnt = 1;
        r->peer = hvd__group_peer(g, from);
        r->iov[0].iov_base = recv + roff[from];
        r->iov[0].iov_len = rbytes[from];
        r->iovcnt = 1;
    }
    return hvd__group_exchange(g, xs, n, what);
}

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
            return hvd__error_pass(HVD_ERR_NO_MEMORY);
        memcpy(copy, send, total);
        send = copy;
    }
    for (int r = 0; r < p; r++) {
        g->lens[r] = block;
        g->offs[r] = (size_t)r * block;
    }
    return hvd__coll_exchange(g, send, g->offs, g->lens, recv, g->offs, g->lens, what);
}

hvd_status_t hvd__coll_alltoallv(hvd_group_t *g, const void *send, const size_t *sendcounts,
                                 void *recv, const size_t *recvcounts, hvd_dtype_t dtype) {
    char what[128];
    hvd__coll_what(g, "alltoallv", what, sizeof what);
    /* The counts differ by rank by design: the signature carries the dtype only. */
    hvd_sig_t sig = {.coll = HVD_COLL_ALLTOALL, .dtype = (uint8_t)dtype};
    int p = g->size;
    size_t es = hvd__dtype_size(dtype), sent = 0, got = 0;
    hvd_status_t st = es ? HVD_OK : hvd__error_set(HVD_ERR_INVALID_ARG, "%s: unknown dtype", what);
    size_t *b = malloc(4 * (size_t)p * sizeof *b);
    if (!b && st == HVD_OK)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    size_t *soff = b, *sbytes = b + p, *roff = b + 2 * p, *rbytes = b + 3 * p;
    for (int r = 0; r < p && st == HVD_OK; r++) {
        if ((st = hvd__coll_bytes(sendcounts[r], es, what, &sbytes[r])) != HVD_OK ||
            (st = hvd__coll_bytes(recvcounts[r], es, what, &rbytes[r])) != HVD_OK)
            break;
        soff[r] = sent;
        roff[r] = got;
        sent += sbytes[r];
        got += rbytes[r];
    }
    if (st == HVD_OK && sendcounts[g->rank] != recvcounts[g->rank])
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s: this rank sends itself %zu elements but "
                            "expects %zu",
                            what, sendcounts[g->rank], recvcounts[g->rank]);
    if (st == HVD_OK && ((!send && sent) || (!recv && got)))
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s: a buffer is NULL", what);
    if (st != HVD_OK)
        sig.flags |= HVD_SIG_INVALID;
    hvd_status_t agreed = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st == HVD_OK)
        st = agreed;
    if (st == HVD_OK && send == recv && sent) {
        void *copy = hvd__group_scratch(g, 0, sent);
        if (!copy)
            st = HVD_ERR_NO_MEMORY;
        else
            send = memcpy(copy, send, sent);
    }
    if (st == HVD_OK)
        st = hvd__coll_exchange(g, send, soff, sbytes, recv, roff, rbytes, what);
    free(b);
    return st;
}
