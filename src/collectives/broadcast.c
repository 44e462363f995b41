/* Broadcast: a binomial tree for small buffers (ceil(log2 p) hops), a pipelined chain for
 * large ones (each rank forwards a chunk as soon as it has it, so the time approaches one
 * transfer of the buffer however many ranks there are). */
#include "collectives/coll.h"
#include "collectives/shm_coll.h"
#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "common/error.h"

static hvd_status_t tree(hvd_group_t *g, void *buf, size_t bytes, int root, const char *what) {
    int p = g->size, vr = (g->rank - root + p) % p;
    hvd_xfer_t *xs = hvd__group_xfers(g, 32);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    size_t n = 0;
    hvd_xfer_t *from_parent = NULL;
    int mask = 1;
    for (; mask < p; mask <<= 1) {
        if (vr & mask) {
            from_parent = &xs[n++];
            from_parent->peer = hvd__group_peer(g, vr - mask + root);
            from_parent->iov[0].iov_base = buf;
            from_parent->iov[0].iov_len = bytes;
            from_parent->iovcnt = 1;
            break;
        }
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask < p) {
            hvd_xfer_t *x = &xs[n++];
            x->peer = hvd__group_peer(g, vr + mask + root);
            x->is_send = 1;
            x->iov[0].iov_base = buf;
            x->iov[0].iov_len = bytes;
            x->iovcnt = 1;
            x->after = from_parent;
        }
    }
    return hvd__group_exchange(g, xs, n, what);
}

static hvd_status_t chain(hvd_group_t *g, void *buf, size_t bytes, int root, const char *what) {
    int p = g->size, vr = (g->rank - root + p) % p;
    size_t nc = (bytes + HVD_RING_CHUNK_BYTES - 1) / HVD_RING_CHUNK_BYTES;
    int has_prev = vr > 0, has_next = vr < p - 1;
    hvd_xfer_t *xs = hvd__group_xfers(g, 2 * nc);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    size_t n = 0;
    for (size_t k = 0; k < nc; k++) {
        size_t off = k * HVD_RING_CHUNK_BYTES;
        size_t len = bytes - off < HVD_RING_CHUNK_BYTES ? bytes - off : HVD_RING_CHUNK_BYTES;
        hvd_xfer_t *in = NULL;
        if (has_prev) {
            in = &xs[n++];
            in->peer = hvd__group_peer(g, vr - 1 + root);
            in->iov[0].iov_base = (char *)buf + off;
            in->iov[0].iov_len = len;
            in->iovcnt = 1;
        }
        if (has_next) {
            hvd_xfer_t *out = &xs[n++];
            out->peer = hvd__group_peer(g, vr + 1 + root);
            out->is_send = 1;
            out->iov[0].iov_base = (char *)buf + off;
            out->iov[0].iov_len = len;
            out->iovcnt = 1;
            out->after = in;
        }
    }
    return hvd__group_exchange(g, xs, n, what);
}

hvd_status_t hvd__coll_broadcast(hvd_group_t *g, void *buf, size_t count, hvd_dtype_t dtype,
                                 int root) {
    char what[128];
    hvd__coll_what(g, "broadcast", what, sizeof what);
    hvd_sig_t sig = {
        .coll = HVD_COLL_BROADCAST, .dtype = (uint8_t)dtype, .root = root, .count = count};
    size_t bytes = 0;
    hvd_status_t st = hvd__coll_bytes(count, hvd__dtype_size(dtype), what, &bytes);
    if (st == HVD_OK)
        st = hvd__coll_check_buf(buf, count, what, "buf");
    if (st == HVD_OK && (root < 0 || root >= g->size))
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s: root %d is not a rank of a job of size %d",
                            what, root, g->size);
    if (st != HVD_OK)
        sig.flags |= HVD_SIG_INVALID;
    const int *idx;
    hvd_arena_t *a = g->size > 1 ? hvd__group_arena(g, &idx) : NULL;
    if (a)
        return hvd__shm_broadcast(g, a, idx, &sig, buf, bytes, root, what);
    st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK || g->size == 1 || bytes == 0)
        return st;
    if (bytes <= HVD_SMALL_BYTES || g->size == 2)
        return tree(g, buf, bytes, root, what);
    return chain(g, buf, bytes, root, what);
}
