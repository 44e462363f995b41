/* Adasum over a group's transport (adasum.h). */
#include "collectives/adasum.h"
#include "collectives/allreduce_work.h"

#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "common/error.h"

#include <string.h>

typedef struct adasum adasum_t;

/* While a halving step's chunks arrive: the partial sums of each as it lands (the copy out
 * of the transport and the arithmetic overlap). */
typedef struct {
    adasum_t *s;
    const char *mine; /* this rank's values of the kept range, indexed from its start */
    size_t lo;        /* the kept range's first element */
    int lower;        /* this rank holds the lower block's vector */
} arrival_t;

struct adasum {
    hvd_group_t *g;
    hvd_adasum_parts_t t;  /* the buffer's tensors, in the working dtype */
    double *sums, *theirs; /* 3 per part: a.b, |a|^2, |b|^2 */
    void *tmp;             /* what the partner sends */
    const char *what;
};

static hvd_status_t check_len(hvd_xfer_t *x) {
    if (x->frame_len != x->iov[0].iov_len)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "adasum: rank %d sent %llu bytes where %zu were due", x->peer,
                              (unsigned long long)x->frame_len, x->iov[0].iov_len);
    return HVD_OK;
}

static hvd_status_t chunk_arrived(hvd_xfer_t *x) {
    hvd_status_t st = check_len(x);
    arrival_t *r = x->arg;
    if (st != HVD_OK)
        return st;
    adasum_t *s = r->s;
    size_t off = x->tag, n = x->iov[0].iov_len / s->t.wsize; /* (elements from the range start) */
    const char *mine = r->mine + off * s->t.wsize, *theirs = (const char *)x->iov[0].iov_base;
    hvd__adasum_dots(&s->t, s->sums, r->lower ? mine : theirs, r->lower ? theirs : mine,
                     r->lo + off, r->lo + off + n);
    return HVD_OK;
}

/* Send sbytes of sbuf to group rank peer and receive rbytes from it into rbuf (either may be
 * empty: both sides know the sizes, so both skip alike), in chunks that move side by side;
 * arrival (may be NULL) is told of each received chunk. */
static hvd_status_t swap_chunks(adasum_t *s, int peer, const void *sbuf, size_t sbytes, void *rbuf,
                                size_t rbytes, arrival_t *arrival) {
    size_t chunk = HVD_RING_CHUNK_BYTES - HVD_RING_CHUNK_BYTES % s->t.wsize;
    size_t ns = (sbytes + chunk - 1) / chunk, nr = (rbytes + chunk - 1) / chunk;
    if (!ns && !nr)
        return HVD_OK;
    hvd_xfer_t *xs = hvd__group_xfers(s->g, ns + nr);
    if (!xs)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    for (size_t k = 0; k < ns + nr; k++) {
        int is_send = k < ns;
        size_t at = (is_send ? k : k - ns) * chunk, total = is_send ? sbytes : rbytes;
        size_t len = total - at < chunk ? total - at : chunk;
        hvd_xfer_t *x = &xs[k];
        x->peer = hvd__group_peer(s->g, peer);
        x->is_send = is_send;
        x->iov[0].iov_base = is_send ? (char *)sbuf + at : (char *)rbuf + at;
        x->iov[0].iov_len = len;
        x->iovcnt = 1;
        if (!is_send) {
            x->tag = at / s->t.wsize;
            x->on_done = arrival ? chunk_arrived : check_len;
            x->arg = arrival;
        }
    }
    return hvd__group_exchange(s->g, xs, ns + nr, s->what);
}

static hvd_status_t swap(adasum_t *s, int peer, const void *sbuf, size_t sbytes, void *rbuf,
                         size_t rbytes) {
    return swap_chunks(s, peer, sbuf, sbytes, rbuf, rbytes, NULL);
}

/* Sum s->sums over the 2^levels ranks of me's aligned block (recursive doubling). IEEE
 * addition commutes, so every rank of the block ends with the same bits. */
static hvd_status_t block_sum(adasum_t *s, int me, int levels) {
    size_t bytes = 3 * s->t.nparts * sizeof *s->sums;
    for (int j = 0; j < levels; j++) {
        hvd_status_t st = swap(s, me ^ (1 << j), s->sums, bytes, s->theirs, bytes);
        if (st != HVD_OK)
            return st;
        for (size_t i = 0; i < 3 * s->t.nparts; i++)
            s->sums[i] += s->theirs[i];
    }
    return HVD_OK;
}

/* Ranks 0..q-1 (q = 2^levels): src holds this rank's vector (work itself, or the caller's
 * input, read in the first step only); on return, work holds the whole tree's. */
static hvd_status_t halving_doubling(adasum_t *s, int me, int levels, const char *src, char *work,
                                     size_t count) {
    size_t lo[32], hi[32], cur_lo = 0, cur_hi = count, ws = s->t.wsize;
    for (int l = 0; l < levels; l++, src = work) {
        int d = 1 << l, peer = me ^ d, lower = (me & d) == 0;
        size_t mid = cur_lo + (cur_hi - cur_lo) / 2;
        size_t klo = lower ? cur_lo : mid, khi = lower ? mid : cur_hi;
        size_t slo = lower ? mid : cur_lo, shi = lower ? cur_hi : mid;
        /* a is the lower block's vector, b the upper's, on both sides of the pair; the
         * partial sums accumulate as the partner's chunks arrive */
        const char *mine = src + klo * ws;
        arrival_t arrival = {.s = s, .mine = mine, .lo = klo, .lower = lower};
        memset(s->sums, 0, 3 * s->t.nparts * sizeof *s->sums);
        hvd_status_t st = swap_chunks(s, peer, src + slo * ws, (shi - slo) * ws, s->tmp,
                                      (khi - klo) * ws, &arrival);
        if (st != HVD_OK)
            return st;
        const void *a = lower ? (const void *)mine : s->tmp,
                   *b = lower ? s->tmp : (const void *)mine;
        st = block_sum(s, me, l + 1);
        if (st != HVD_OK)
            return st;
        hvd__adasum_combine(&s->t, s->sums, work + klo * ws, a, b, klo, khi);
        lo[l] = cur_lo = klo;
        hi[l] = cur_hi = khi;
    }
    for (int l = levels - 1; l >= 0; l--) {
        size_t plo = l == 0 ? 0 : lo[l - 1], phi = l == 0 ? count : hi[l - 1];
        size_t olo = lo[l] == plo ? hi[l] : plo, ohi = lo[l] == plo ? phi : lo[l];
        hvd_status_t st = swap(s, me ^ (1 << l), work + lo[l] * ws, (hi[l] - lo[l]) * ws,
                               work + olo * ws, (ohi - olo) * ws);
        if (st != HVD_OK)
            return st;
    }
    return HVD_OK;
}

hvd_status_t hvd__adasum_check(hvd_dtype_t dtype) {
    if (dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16 || dtype == HVD_FLOAT32 ||
        dtype == HVD_FLOAT64)
        return HVD_OK;
    if (hvd__dtype_size(dtype) == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "unknown dtype %d", (int)dtype);
    return hvd__error_set(HVD_ERR_INVALID_ARG,
                          "reduce op adasum is not supported for %s (it takes float16, bfloat16, "
                          "float32 or float64)",
                          hvd__dtype_name(dtype));
}

hvd_status_t hvd__adasum_run(hvd_group_t *g, const void *send, void *recv, size_t count,
                             hvd_dtype_t dtype, double prescale, double postscale,
                             const size_t *parts, size_t nparts, const char *what) {
    adasum_t s = {.g = g, .what = what};
    size_t np = parts && nparts ? nparts : 1;
    /* (sums, theirs and starts share one scratch: 6 doubles and a size_t per part, + 1) */
    s.sums = hvd__group_scratch(g, 2, 6 * np * sizeof(double) + (np + 1) * sizeof(size_t));
    if (!s.sums)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    s.theirs = s.sums + 3 * np;
    hvd__adasum_parts(&s.t, dtype, (size_t *)(s.theirs + 3 * np), parts, nparts, count);
    int p = g->size, me = g->rank, levels = 0;
    while ((2 << levels) <= p)
        levels++;
    int q = 1 << levels;
    size_t bytes = count * s.t.wsize;
    char *work = s.t.w == dtype ? recv : hvd__group_scratch(g, 0, bytes + 1);
    s.tmp = hvd__group_scratch(g, 1, bytes + 1);
    if (!work || !s.tmp)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    /* The input in the working dtype: read where it is when nothing converts or scales it
     * (the first step writes work; a copy up front took a third of the memory traffic). */
    const char *src = send;
    if (s.t.w != dtype || prescale != 1.0 || p == 1 || send == recv) {
        hvd__allreduce_to_work(work, send, count, dtype, prescale);
        src = work;
    }

    hvd_status_t st = HVD_OK;
    if (me >= q) {
        /* folded: hand the vector to rank me - q, get the tree's back */
        st = swap(&s, me - q, src, bytes, NULL, 0);
        if (st == HVD_OK)
            st = swap(&s, me - q, NULL, 0, work, bytes);
    } else {
        if (me + q < p) {
            arrival_t arrival = {.s = &s, .mine = src, .lo = 0, .lower = 1};
            memset(s.sums, 0, 3 * s.t.nparts * sizeof *s.sums);
            st = swap_chunks(&s, me + q, NULL, 0, s.tmp, bytes, &arrival);
            if (st == HVD_OK)
                hvd__adasum_combine(&s.t, s.sums, work, src, s.tmp, 0, count);
            src = work;
        }
        if (st == HVD_OK)
            st = halving_doubling(&s, me, levels, src, work, count);
        if (st == HVD_OK && me + q < p)
            st = swap(&s, me + q, work, bytes, NULL, 0);
    }
    if (st != HVD_OK)
        return st;
    hvd__allreduce_finish(work, count, dtype, HVD_SUM, p, postscale);
    hvd__allreduce_to_out(recv, work, count, dtype);
    return HVD_OK;
}
