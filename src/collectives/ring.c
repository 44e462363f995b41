/* The pipelined ring (ring.h). */
#include "collectives/ring.h"

#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "common/error.h"

#include <string.h>

static int mod(int a, int p) {
    return ((a % p) + p) % p;
}

/* Chunk k of nc of a segment of len elements: balanced, the first len % nc one longer. */
static void chunk_of(size_t len, size_t nc, size_t k, size_t *start_p, size_t *n_p) {
    size_t base = len / nc, rem = len % nc;
    *start_p = base * k + (k < rem ? k : rem);
    *n_p = base + (k < rem ? 1 : 0);
}

/* A reduce-scatter receive finished: fold the chunk into work, and finish it if this was
 * the last step (the segment this rank owns). */
static hvd_status_t rs_received(hvd_xfer_t *x) {
    hvd_ring_t *ring = x->arg;
    int p = ring->g->size;
    size_t j = (size_t)(x - ring->g->xfers) / 2;
    size_t s = j / ring->nchunks, k = j % ring->nchunks;
    int seg = mod(ring->own - 2 - (int)s, p);
    size_t start, n;
    chunk_of(ring->seg_len[seg], ring->nchunks, k, &start, &n);
    size_t off = ring->seg_off[seg] + start, wsize = hvd__dtype_size(ring->wdtype);
    if (x->frame_len != n * wsize)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "ring step %zu: rank %d sent %llu bytes for a chunk of %zu", s,
                              x->peer, (unsigned long long)x->frame_len, n * wsize);
    char *dst = (char *)ring->work + off * wsize;
    const char *mine = ring->first_src ? (const char *)ring->first_src + off * wsize : dst;
    hvd__reduce3(dst, mine, ring->tmp, n, ring->wdtype, ring->op);
    if ((int)s == p - 2 && ring->finalize)
        ring->finalize(ring, off, n);
    return HVD_OK;
}

static hvd_status_t ag_received(hvd_xfer_t *x) {
    size_t want = x->iov[0].iov_len;
    if (x->frame_len != want)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "ring allgather: rank %d sent %llu bytes for "
                              "a chunk of %zu",
                              x->peer, (unsigned long long)x->frame_len, want);
    return HVD_OK;
}

hvd_status_t hvd__ring_run(hvd_ring_t *ring, const char *what) {
    hvd_group_t *g = ring->g;
    int p = g->size, right = hvd__group_peer(g, g->rank + 1),
        left = hvd__group_peer(g, g->rank - 1);
    size_t wsize = ring->work ? hvd__dtype_size(ring->wdtype) : 0;
    size_t maxseg = 0;
    for (int i = 0; i < p; i++)
        if (ring->seg_len[i] > maxseg)
            maxseg = ring->seg_len[i];
    size_t esize = wsize > ring->osize ? wsize : ring->osize;
    size_t nc = (maxseg * esize + HVD_RING_CHUNK_BYTES - 1) / HVD_RING_CHUNK_BYTES;
    if (nc == 0)
        nc = 1;
    ring->nchunks = nc;
    size_t steps = (size_t)(p - 1) * nc;
    int do_rs = ring->work != NULL, do_ag = ring->out != NULL;
    size_t nx = 2 * steps * (size_t)(do_rs + do_ag);
    if (do_rs) {
        ring->tmp = hvd__group_scratch(g, 2, ((maxseg + nc - 1) / nc) * wsize);
        if (!ring->tmp)
            return hvd__error_pass(HVD_ERR_NO_MEMORY);
    }
    hvd_xfer_t *xs = hvd__group_xfers(g, nx);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    size_t ag0 = do_rs ? 2 * steps : 0;
    for (size_t s = 0; s + 1 < (size_t)p; s++) {
        for (size_t k = 0; k < nc; k++) {
            size_t j = s * nc + k, start, n;
            if (do_rs) {
                hvd_xfer_t *snd = &xs[2 * j], *rcv = &xs[2 * j + 1];
                int sseg = mod(ring->own - 1 - (int)s, p), rseg = mod(ring->own - 2 - (int)s, p);
                chunk_of(ring->seg_len[sseg], nc, k, &start, &n);
                const char *src = (s == 0 && ring->first_src) ? ring->first_src : ring->work;
                snd->peer = right;
                snd->is_send = 1;
                snd->iov[0].iov_base = (char *)src + (ring->seg_off[sseg] + start) * wsize;
                snd->iov[0].iov_len = n * wsize;
                snd->iovcnt = 1;
                snd->after = s > 0 ? &xs[2 * (j - nc) + 1] : NULL;
                chunk_of(ring->seg_len[rseg], nc, k, &start, &n);
                rcv->peer = left;
                rcv->iov[0].iov_base = ring->tmp;
                rcv->iov[0].iov_len = n * wsize;
                rcv->iovcnt = 1;
                rcv->on_done = rs_received;
                rcv->arg = ring;
            }
            if (do_ag) {
                hvd_xfer_t *snd = &xs[ag0 + 2 * j], *rcv = &xs[ag0 + 2 * j + 1];
                int sseg = mod(ring->own - (int)s, p), rseg = mod(ring->own - 1 - (int)s, p);
                chunk_of(ring->seg_len[sseg], nc, k, &start, &n);
                snd->peer = right;
                snd->is_send = 1;
                snd->iov[0].iov_base =
                    (char *)ring->out + (ring->seg_off[sseg] + start) * ring->osize;
                snd->iov[0].iov_len = n * ring->osize;
                snd->iovcnt = 1;
                if (s > 0)
                    snd->after = &xs[ag0 + 2 * (j - nc) + 1];
                else if (do_rs)
                    snd->after = &xs[2 * ((size_t)(p - 2) * nc + k) + 1];
                chunk_of(ring->seg_len[rseg], nc, k, &start, &n);
                rcv->peer = left;
                rcv->iov[0].iov_base =
                    (char *)ring->out + (ring->seg_off[rseg] + start) * ring->osize;
                rcv->iov[0].iov_len = n * ring->osize;
                rcv->iovcnt = 1;
                rcv->on_done = ag_received;
            }
        }
    }
    return hvd__group_exchange(g, xs, nx, what);
}
