/* Recursive halving and doubling (Rabenseifner's allreduce) for power-of-two groups: the
 * reduce-scatter halves the range each step (keep one half, send the other to the partner
 * rank ^ mask, reduce what comes back), then the allgather doubles it back in the reverse
 * order. Each rank moves 2 (p-1)/p of the data, as in the ring, but in 2 log2 p steps
 * instead of 2 (p-1), and each step is a pairwise exchange: on a host with more ranks than
 * cores that is far fewer waits for the scheduler (np=4 on 2 cores). Within a step the
 * halves move in chunks, reduced as each arrives. */
#include "collectives/dtype.h"
#include "collectives/halving.h"
#include "collectives/reduce.h"
#include "common/error.h"

typedef struct {
    hvd_ring_t *ring;
    const void *mine; /* where this rank's own values of the kept range are read */
} step_t;

static hvd_status_t rs_received(hvd_xfer_t *x) {
    step_t *s = x->arg;
    size_t wsize = hvd__dtype_size(s->ring->wdtype);
    size_t off = x->tag, n = x->iov[0].iov_len / wsize;
    if (x->frame_len != x->iov[0].iov_len)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "halving step: rank %d sent %llu bytes for a "
                              "chunk of %zu",
                              x->peer, (unsigned long long)x->frame_len, x->iov[0].iov_len);
    char *dst = (char *)s->ring->work + off * wsize;
    const char *mine = (const char *)s->mine + off * wsize;
    hvd__reduce3(dst, mine, s->ring->tmp, n, s->ring->wdtype, s->ring->op);
    return HVD_OK;
}

static hvd_status_t ag_received(hvd_xfer_t *x) {
    if (x->frame_len != x->iov[0].iov_len)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "doubling step: rank %d sent %llu bytes for a "
                              "chunk of %zu",
                              x->peer, (unsigned long long)x->frame_len, x->iov[0].iov_len);
    return HVD_OK;
}

/* One pairwise step: send [slo, shi) from sbuf and receive [rlo, rhi) (into tmp chunk by
 * chunk when reducing, else straight into rbuf), in chunks. Ranges are in elements of esize
 * bytes. */
static hvd_status_t exchange_step(hvd_ring_t *ring, step_t *st, int peer, const void *sbuf,
                                  size_t slo, size_t shi, void *rbuf, size_t rlo, size_t rhi,
                                  size_t esize, int reduce, const char *what) {
    hvd_group_t *g = ring->g;
    size_t chunk = HVD_RING_CHUNK_BYTES / esize ? HVD_RING_CHUNK_BYTES / esize : 1;
    size_t ns = (shi - slo + chunk - 1) / chunk, nr = (rhi - rlo + chunk - 1) / chunk;
    hvd_xfer_t *xs = hvd__group_xfers(g, ns + nr);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    for (size_t k = 0; k < ns + nr; k++) {
        hvd_xfer_t *x = &xs[k];
        int is_send = k < ns;
        size_t a = is_send ? slo + k * chunk : rlo + (k - ns) * chunk;
        size_t end = is_send ? shi : rhi, b = a + chunk < end ? a + chunk : end;
        x->peer = peer;
        x->is_send = is_send;
        x->iov[0].iov_base = is_send  ? (char *)sbuf + a * esize
                             : reduce ? ring->tmp
                                      : (char *)rbuf + a * esize;
        x->iov[0].iov_len = (b - a) * esize;
        x->iovcnt = 1;
        x->tag = a;
        if (!is_send) {
            x->on_done = reduce ? rs_received : ag_received;
            x->arg = st;
        }
    }
    return hvd__group_exchange(g, xs, ns + nr, what);
}

hvd_status_t hvd__halving_run(hvd_ring_t *ring, size_t count, const char *what) {
    hvd_group_t *g = ring->g;
    int p = g->size, me = g->rank, steps = 0;
    while ((1 << steps) < p)
        steps++;
    size_t wsize = hvd__dtype_size(ring->wdtype);
    size_t chunk = HVD_RING_CHUNK_BYTES / wsize ? HVD_RING_CHUNK_BYTES / wsize : 1;
    ring->tmp = hvd__group_scratch(g, 2, chunk * wsize);
    if (!ring->tmp)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    size_t lo[32], hi[32]; /* kept range after each step */
    size_t cur_lo = 0, cur_hi = count;
    hvd_status_t st = HVD_OK;
    for (int s = 0; s < steps; s++) {
        int mask = p >> (s + 1), peer = me ^ mask;
        size_t mid = cur_lo + (cur_hi - cur_lo) / 2;
        int keep_low = (me & mask) == 0;
        size_t klo = keep_low ? cur_lo : mid, khi = keep_low ? mid : cur_hi;
        size_t slo = keep_low ? mid : cur_lo, shi = keep_low ? cur_hi : mid;
        const void *src = s == 0 && ring->first_src ? ring->first_src : ring->work;
        step_t stp = {.ring = ring, .mine = src};
        st = exchange_step(ring, &stp, hvd__group_peer(g, peer), src, slo, shi, NULL, klo, khi,
                           wsize, 1, what);
        if (st != HVD_OK)
            return st;
        lo[s] = cur_lo = klo;
        hi[s] = cur_hi = khi;
    }
    ring->finalize(ring, cur_lo, cur_hi - cur_lo);
    for (int s = steps - 1; s >= 0; s--) {
        int mask = p >> (s + 1), peer = me ^ mask;
        size_t plo = s == 0 ? 0 : lo[s - 1], phi = s == 0 ? count : hi[s - 1];
        /* the partner owns the other half of [plo, phi) */
        size_t olo = lo[s] == plo ? hi[s] : plo, ohi = lo[s] == plo ? phi : lo[s];
        step_t stp = {.ring = ring};
        st = exchange_step(ring, &stp, hvd__group_peer(g, peer), ring->out, lo[s], hi[s], ring->out,
                           olo, ohi, ring->osize, 0, what);
        if (st != HVD_OK)
            return st;
    }
    return HVD_OK;
}
