/* Control-plane gather and broadcast (control.h). */
#include "collectives/control.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

hvd_status_t hvd__control_gather(hvd_group_t *g, int root, const void *mine, size_t len, size_t max,
                                 uint8_t **bufs, size_t *lens, const char *what) {
    int p = g->size, me = g->rank;
    if (me != root) {
        hvd_xfer_t *x = hvd__group_xfers(g, 1);
        if (!x)
            return hvd__error_pass(HVD_ERR_NO_MEMORY);
        x->peer = hvd__group_peer(g, root);
        x->is_send = 1;
        x->iov[0].iov_base = (void *)mine;
        x->iov[0].iov_len = len;
        x->iovcnt = 1;
        return hvd__group_exchange(g, x, 1, what);
    }
    for (int r = 0; r < p; r++) {
        bufs[r] = NULL;
        lens[r] = 0;
    }
    bufs[me] = malloc(len ? len : 1);
    if (!bufs[me])
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    if (len)
        memcpy(bufs[me], mine, len);
    lens[me] = len;
    hvd_xfer_t *xs = hvd__group_xfers(g, (size_t)p);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    size_t n = 0;
    for (int r = 0; r < p; r++) {
        if (r == me)
            continue;
        xs[n].peer = hvd__group_peer(g, r);
        xs[n].alloc_max = max;
        xs[n].tag = (size_t)r;
        n++;
    }
    hvd_status_t st = hvd__group_exchange(g, xs, n, what);
    /* Hand over what arrived, also on failure, so the caller frees every buffer. */
    for (size_t i = 0; i < n; i++) {
        if (xs[i].iovcnt) {
            bufs[xs[i].tag] = xs[i].iov[0].iov_base;
            lens[xs[i].tag] = xs[i].iov[0].iov_len;
        }
    }
    return st;
}

hvd_status_t hvd__control_bcast(hvd_group_t *g, int root, uint8_t **buf_p, size_t *len_p,
                                size_t max, const char *what) {
    int p = g->size, me = g->rank;
    hvd_xfer_t *xs = hvd__group_xfers(g, (size_t)p);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    if (me != root) {
        xs[0].peer = hvd__group_peer(g, root);
        xs[0].alloc_max = max;
        hvd_status_t st = hvd__group_exchange(g, xs, 1, what);
        if (st != HVD_OK) {
            free(xs[0].iovcnt ? xs[0].iov[0].iov_base : NULL);
            return st;
        }
        *buf_p = xs[0].iov[0].iov_base;
        *len_p = xs[0].iov[0].iov_len;
        return HVD_OK;
    }
    size_t n = 0;
    for (int r = 0; r < p; r++) {
        if (r == me)
            continue;
        xs[n].peer = hvd__group_peer(g, r);
        xs[n].is_send = 1;
        xs[n].iov[0].iov_base = *buf_p;
        xs[n].iov[0].iov_len = *len_p;
        xs[n].iovcnt = 1;
        n++;
    }
    return hvd__group_exchange(g, xs, n, what);
}
