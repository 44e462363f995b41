/* Adasum over a group's transport (adasum.h). */
#include "collectives/adasum.h"

#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "common/error.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct {
    hvd_group_t *g;
    hvd_dtype_t w; /* working dtype: float32 or float64 */
    size_t wsize;
    const size_t *parts; /* tensor sizes in elements; one part of count when none given */
    size_t nparts;
    double *sums, *theirs; /* 3 per part: a.b, |a|^2, |b|^2 */
    void *tmp;             /* what the partner sends */
    const char *what;
} adasum_t;

static hvd_status_t check_len(hvd_xfer_t *x) {
    if (x->frame_len != x->iov[0].iov_len)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "adasum: rank %d sent %llu bytes where %zu were due", x->peer,
                              (unsigned long long)x->frame_len, x->iov[0].iov_len);
    return HVD_OK;
}

/* Send sbytes of sbuf to group rank peer and receive rbytes from it into rbuf (either may be
 * empty: both sides know the sizes, so both skip alike). */
static hvd_status_t swap(adasum_t *s, int peer, const void *sbuf, size_t sbytes, void *rbuf,
                         size_t rbytes) {
    size_t n = (sbytes > 0) + (rbytes > 0);
    if (!n)
        return HVD_OK;
    hvd_xfer_t *xs = hvd__group_xfers(s->g, n);
    if (!xs)
        return HVD_ERR_NO_MEMORY;
    size_t k = 0;
    if (sbytes) {
        xs[k].peer = hvd__group_peer(s->g, peer);
        xs[k].is_send = 1;
        xs[k].iov[0].iov_base = (void *)sbuf;
        xs[k].iov[0].iov_len = sbytes;
        xs[k].iovcnt = 1;
        k++;
    }
    if (rbytes) {
        xs[k].peer = hvd__group_peer(s->g, peer);
        xs[k].iov[0].iov_base = rbuf;
        xs[k].iov[0].iov_len = rbytes;
        xs[k].iovcnt = 1;
        xs[k].on_done = check_len;
    }
    return hvd__group_exchange(s->g, xs, n, s->what);
}

#define DEFINE_DOTS(NAME, T)                                                                       \
    static void NAME(const T *a, const T *b, size_t n, double *out) {                              \
        double ab = 0, aa = 0, bb = 0;                                                             \
        for (size_t i = 0; i < n; i++) {                                                           \
            double x = a[i], y = b[i];                                                             \
            ab += x * y;                                                                           \
            aa += x * x;                                                                           \
            bb += y * y;                                                                           \
        }                                                                                          \
        out[0] += ab;                                                                              \
        out[1] += aa;                                                                              \
        out[2] += bb;                                                                              \
    }
DEFINE_DOTS(dots_f32, float)
DEFINE_DOTS(dots_f64, double)

#define DEFINE_SCALED_ADD(NAME, T)                                                                 \
    static void NAME(T *out, const T *a, double ca, const T *b, double cb, size_t n) {             \
        for (size_t i = 0; i < n; i++)                                                             \
            out[i] = (T)(ca * a[i] + cb * b[i]);                                                   \
    }
DEFINE_SCALED_ADD(scaled_add_f32, float)
DEFINE_SCALED_ADD(scaled_add_f64, double)

/* The parts' overlap with [lo, hi), one at a time: *k is the part, [*x, *y) the overlap;
 * *start is where part *k begins. Returns 0 when no part is left. */
static int next_overlap(const adasum_t *s, size_t lo, size_t hi, size_t *k, size_t *start,
                        size_t *x, size_t *y) {
    for (; *k < s->nparts && *start < hi; *start += s->parts[*k], ++*k) {
        size_t end = *start + s->parts[*k];
        *x = *start > lo ? *start : lo;
        *y = end < hi ? end : hi;
        if (*x < *y)
            return 1;
    }
    return 0;
}

/* s->sums = per part (a.b, |a|^2, |b|^2) over [lo, hi), a and b indexed from lo. */
static void partial_sums(adasum_t *s, const void *a, const void *b, size_t lo, size_t hi) {
    memset(s->sums, 0, 3 * s->nparts * sizeof *s->sums);
    size_t k = 0, start = 0, x, y;
    while (next_overlap(s, lo, hi, &k, &start, &x, &y)) {
        size_t off = (x - lo) * s->wsize;
        if (s->w == HVD_FLOAT32)
            dots_f32((const float *)((const char *)a + off), (const float *)((const char *)b + off),
                     y - x, &s->sums[3 * k]);
        else
            dots_f64((const double *)((const char *)a + off),
                     (const double *)((const char *)b + off), y - x, &s->sums[3 * k]);
        start += s->parts[k];
        k++;
    }
}

/* out[lo, hi) = per part ca a + cb b with the coefficients of s->sums (a, b, out indexed
 * from lo; out may be a or b). */
static void combine(adasum_t *s, void *out, const void *a, const void *b, size_t lo, size_t hi) {
    /* Horovod's bound: a squared norm below sqrt(DBL_MIN) counts as a zero vector */
    const double tiny = sqrt(DBL_MIN);
    size_t k = 0, start = 0, x, y;
    while (next_overlap(s, lo, hi, &k, &start, &x, &y)) {
        const double *m = &s->sums[3 * k];
        double ca = m[1] >= tiny ? 1.0 - m[0] / (2.0 * m[1]) : 1.0;
        double cb = m[2] >= tiny ? 1.0 - m[0] / (2.0 * m[2]) : 1.0;
        size_t off = (x - lo) * s->wsize;
        if (s->w == HVD_FLOAT32)
            scaled_add_f32((float *)((char *)out + off), (const float *)((const char *)a + off), ca,
                           (const float *)((const char *)b + off), cb, y - x);
        else
            scaled_add_f64((double *)((char *)out + off), (const double *)((const char *)a + off),
                           ca, (const double *)((const char *)b + off), cb, y - x);
        start += s->parts[k];
        k++;
    }
}

/* Sum s->sums over the 2^levels ranks of me's aligned block (recursive doubling). IEEE
 * addition commutes, so every rank of the block ends with the same bits. */
static hvd_status_t block_sum(adasum_t *s, int me, int levels) {
    size_t bytes = 3 * s->nparts * sizeof *s->sums;
    for (int j = 0; j < levels; j++) {
        hvd_status_t st = swap(s, me ^ (1 << j), s->sums, bytes, s->theirs, bytes);
        if (st != HVD_OK)
            return st;
        for (size_t i = 0; i < 3 * s->nparts; i++)
            s->sums[i] += s->theirs[i];
    }
    return HVD_OK;
}

/* Ranks 0..q-1 (q = 2^levels): work holds this rank's vector; on return, the whole tree's. */
static hvd_status_t halving_doubling(adasum_t *s, int me, int levels, char *work, size_t count) {
    size_t lo[32], hi[32], cur_lo = 0, cur_hi = count, ws = s->wsize;
    for (int l = 0; l < levels; l++) {
        int d = 1 << l, peer = me ^ d, lower = (me & d) == 0;
        size_t mid = cur_lo + (cur_hi - cur_lo) / 2;
        size_t klo = lower ? cur_lo : mid, khi = lower ? mid : cur_hi;
        size_t slo = lower ? mid : cur_lo, shi = lower ? cur_hi : mid;
        hvd_status_t st =
            swap(s, peer, work + slo * ws, (shi - slo) * ws, s->tmp, (khi - klo) * ws);
        if (st != HVD_OK)
            return st;
        /* a is the lower block's vector, b the upper's, on both sides of the pair */
        const void *mine = work + klo * ws, *a = lower ? mine : s->tmp, *b = lower ? s->tmp : mine;
        partial_sums(s, a, b, klo, khi);
        st = block_sum(s, me, l + 1);
        if (st != HVD_OK)
            return st;
        combine(s, work + klo * ws, a, b, klo, khi);
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
    adasum_t s = {.g = g,
                  .w = hvd__allreduce_work_dtype(dtype),
                  .parts = parts,
                  .nparts = nparts,
                  .what = what};
    size_t one = count;
    if (!parts || !nparts) {
        s.parts = &one;
        s.nparts = 1;
    }
    s.wsize = hvd__dtype_size(s.w);
    int p = g->size, me = g->rank, levels = 0;
    while ((2 << levels) <= p)
        levels++;
    int q = 1 << levels;
    size_t bytes = count * s.wsize;
    char *work = s.w == dtype ? recv : hvd__group_scratch(g, 0, bytes + 1);
    s.tmp = hvd__group_scratch(g, 1, bytes + 1);
    s.sums = hvd__group_scratch(g, 2, 6 * s.nparts * sizeof(double));
    if (!work || !s.tmp || !s.sums)
        return HVD_ERR_NO_MEMORY;
    s.theirs = s.sums + 3 * s.nparts;
    hvd__allreduce_to_work(work, send, count, dtype, prescale);

    hvd_status_t st = HVD_OK;
    if (me >= q) {
        /* folded: hand the vector to rank me - q, get the tree's back */
        st = swap(&s, me - q, work, bytes, NULL, 0);
        if (st == HVD_OK)
            st = swap(&s, me - q, NULL, 0, work, bytes);
    } else {
        if (me + q < p) {
            st = swap(&s, me + q, NULL, 0, s.tmp, bytes);
            if (st == HVD_OK) {
                partial_sums(&s, work, s.tmp, 0, count);
                combine(&s, work, work, s.tmp, 0, count);
            }
        }
        if (st == HVD_OK)
            st = halving_doubling(&s, me, levels, work, count);
        if (st == HVD_OK && me + q < p)
            st = swap(&s, me + q, work, bytes, NULL, 0);
    }
    if (st != HVD_OK)
        return st;
    hvd__allreduce_finish(work, count, dtype, HVD_SUM, p, postscale);
    hvd__allreduce_to_out(recv, work, count, dtype);
    return HVD_OK;
}
