/* Adasum in the host arena (shm_coll.h): the tree of adasum.h, computed by slices.
 *
 * Every rank owns a 1/p slice of each chunk (a slot's worth of elements) of every rank's
 * vector, as in the sliced sum. First each rank gathers its slice of every other vector into
 * private memory and takes the first level's partial dot products from it; from then on a
 * level of the tree is one step that sums the ranks' partial dot products and norms (a few
 * float64 per tensor and pair, in rank order, so every rank derives the same coefficients),
 * after which each rank combines its slices of the level's pairs and takes the next level's
 * partials from them while they are in cache. Last, each rank combines its slice of the
 * root's pair, and every rank collects the other slices.
 *
 * The vectors pass through the slots a chunk per step: every rank writes its input chunk into
 * its slot and copies its slices of the others' out (its own slice it reads where the input
 * is, when the input needs no conversion or scale); at the end it writes its result slice of
 * a chunk into its slot and copies the others' out.
 *
 * The transport's version (adasum.c) moves halves between the pairs and waits for a block's
 * sums at every level; here nothing moves twice, all p ranks share every level's arithmetic
 * (the folded ones included), and the result is the same tree of pairwise combinations. */
#include "collectives/adasum.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/shm_coll.h"
#include "common/error.h"

#include <string.h>

/* Up to this many bytes per vector, every rank runs the whole tree itself (local_tree). */
#define LOCAL_TREE_BYTES (64 * 1024)
/* The partials are taken over this many bytes of each vector at a time, right after they
 * were copied, while they are in L1. */
#define TILE_BYTES 8192

/* Group rank r's slice of a chunk of n elements: [*lo, *lo + *len). */
static void slice_of(size_t n, int p, int r, size_t *lo, size_t *len) {
    size_t base = n / (size_t)p, extra = n % (size_t)p, ur = (size_t)r;
    *len = base + (ur < extra);
    *lo = ur * base + (ur < extra ? ur : extra);
}

/* Level t's pairs (x[j] combines with y[j] into x[j]) in a tree of p ranks, q the largest
 * power of two not above p, fold = (p > q): level 0 folds q + i into i, then pairs at
 * distance 1, 2, 4, ... Returns how many. */
static int level_pairs(int p, int q, int fold, int t, int *x, int *y) {
    int n = 0;
    if (fold && t == 0) {
        for (int i = 0; i + q < p; i++, n++) {
            x[n] = i;
            y[n] = q + i;
        }
        return n;
    }
    int d = 1 << (t - fold);
    for (int i = 0; i + d < q; i += 2 * d, n++) {
        x[n] = i;
        y[n] = i + d;
    }
    return n;
}

typedef struct {
    hvd_group_t *g;
    hvd_arena_t *a;
    const int *idx;
    const char *what;
    hvd_adasum_parts_t t;
    hvd_dtype_t dtype;   /* the caller's */
    size_t count, chunk; /* elements, and elements per chunk (a slot's worth) */
    size_t mine;         /* elements of this rank's slices, over all chunks */
    char *priv;          /* this rank's slices of every rank's vector: p x mine elements */
    /* This rank's own vector in the working dtype, indexed by element, where it is whole
     * (the input when it needs neither a conversion nor a scale), until a level combines
     * into it; else NULL: its slices are in priv. */
    const char *own;
    int q, fold, nlevels;
    int npairs, *x, *y; /* the current level's pairs */
    double *sums, *tot; /* a level's partials, this rank's and summed: 3 x nparts per pair */
    size_t per_pair;    /* 3 x nparts */
} shm_adasum_t;

/* This rank's slice of one chunk: the chunk's first element c and size n, the slice
 * [lo, lo + len) within it, and at, where the slice starts in the private vectors. */
typedef struct {
    size_t c, n, lo, len, at;
} slice_t;

/* How many chunks the vectors have. */
static size_t nchunks(const shm_adasum_t *s) {
    return (s->count + s->chunk - 1) / s->chunk;
}

/* The slice of chunk k (every chunk but the last is whole, so each holds a whole chunk's
 * slice before it). */
static slice_t slice_k(const shm_adasum_t *s, size_t k) {
    size_t whole_lo, whole_len;
    slice_of(s->chunk, s->g->size, s->g->rank, &whole_lo, &whole_len);
    slice_t v = {.c = k * s->chunk, .at = k * whole_len};
    v.n = s->count - v.c < s->chunk ? s->count - v.c : s->chunk;
    slice_of(v.n, s->g->size, s->g->rank, &v.lo, &v.len);
    return v;
}

/* Vector r's values in slice v, from its i-th element: in priv, or where own is. */
static const char *in(const shm_adasum_t *s, int r, const slice_t *v, size_t i) {
    if (r == s->g->rank && s->own)
        return s->own + (v->c + v->lo + i) * s->t.wsize;
    return s->priv + ((size_t)r * s->mine + v->at + i) * s->t.wsize;
}

/* Where slice v of vector r goes in priv. */
static char *out(const shm_adasum_t *s, int r, const slice_t *v) {
    return s->priv + ((size_t)r * s->mine + v->at) * s->t.wsize;
}

static hvd_status_t step(shm_adasum_t *s) {
    hvd_status_t st = hvd__arena_step(s->a);
    return st == HVD_OK ? HVD_OK : hvd__group_arena_failed(s->g, st, s->what);
}

/* The current level's partials over elements [i, i + k) of slice v, added to s->sums. */
static void partials(shm_adasum_t *s, const slice_t *v, size_t i, size_t k) {
    for (int j = 0; j < s->npairs; j++)
        hvd__adasum_dots(&s->t, s->sums + s->per_pair * (size_t)j, in(s, s->x[j], v, i),
                         in(s, s->y[j], v, i), v->c + v->lo + i, v->c + v->lo + i + k);
}

/* s->tot = the sum over the group of every rank's s->sums (n doubles), in rank order, a slot
 * at a time. */
static hvd_status_t sum_partials(shm_adasum_t *s, size_t n) {
    size_t per = s->a->data_bytes / sizeof(double);
    for (size_t off = 0; off < n; off += per) {
        size_t k = n - off < per ? n - off : per;
        memcpy(hvd__arena_data(s->a, s->a->self), s->sums + off, k * sizeof(double));
        hvd_status_t st = step(s);
        if (st != HVD_OK)
            return st;
        hvd__shm_reduce_into(s->a, s->idx, s->g->size, 0, k, HVD_FLOAT64, HVD_SUM,
                             (uint8_t *)(s->tot + off));
        hvd__arena_flip(s->a);
    }
    return HVD_OK;
}

/* The gathering, a chunk per step (the first carries the agreement). */
static hvd_status_t gather(shm_adasum_t *s, hvd_sig_t *sig, const void *send, double prescale) {
    size_t ws = s->t.wsize, os = hvd__dtype_size(s->dtype);
    hvd_arena_t *a = s->a;
    for (size_t chunk = 0; chunk < nchunks(s); chunk++) {
        slice_t v = slice_k(s, chunk);
        /* (this rank's own slice it reads where the input is, if it may: the others only
         * need theirs, and at np 2 that halves the writes into the slot) */
        uint8_t *slot = hvd__arena_data(a, a->self);
        const uint8_t *src = (const uint8_t *)send + v.c * os;
        if (s->own) {
            size_t after = v.lo + v.len;
            hvd__allreduce_to_work(slot, src, v.lo, s->dtype, prescale);
            hvd__allreduce_to_work(slot + after * ws, src + after * os, v.n - after, s->dtype,
                                   prescale);
        } else {
            hvd__allreduce_to_work(slot, src, v.n, s->dtype, prescale);
        }
        hvd_status_t st =
            v.c == 0 ? hvd__group_arena_agree(s->g, a, s->idx, sig, s->what) : step(s);
        if (st != HVD_OK)
            return st;
        for (size_t i = 0; i < v.len; i += TILE_BYTES / ws) {
            size_t k = v.len - i < TILE_BYTES / ws ? v.len - i : TILE_BYTES / ws;
            for (int r = 0; r < s->g->size; r++)
                if (r != s->g->rank || !s->own)
                    memcpy(out(s, r, &v) + i * ws, hvd__arena_data(a, s->idx[r]) + (v.lo + i) * ws,
                           k * ws);
            partials(s, &v, i, k);
        }
        hvd__arena_flip(a);
    }
    return HVD_OK;
}

/* The levels below the root: sum the partials, combine (into priv), and the next level's
 * partials chunk by chunk while its values are in cache. On return s->tot holds the root's
 * sums, and s->x[0], s->y[0] are its pair. */
static hvd_status_t levels(shm_adasum_t *s) {
    int p = s->g->size, me = s->g->rank;
    for (int t = 0;; t++) {
        hvd_status_t st = sum_partials(s, s->per_pair * (size_t)s->npairs);
        if (st != HVD_OK || t + 1 == s->nlevels)
            return st;
        int x[HVD_ARENA_MAX_RANKS / 2], y[HVD_ARENA_MAX_RANKS / 2];
        int n = s->npairs;
        memcpy(x, s->x, (size_t)n * sizeof *x);
        memcpy(y, s->y, (size_t)n * sizeof *y);
        s->npairs = level_pairs(p, s->q, s->fold, t + 1, s->x, s->y);
        memset(s->sums, 0, s->per_pair * (size_t)s->npairs * sizeof(double));
        /* this level's inputs; the next level's from priv if this rank's vector took a
         * combination here */
        const char *own = s->own, *own_next = s->own;
        for (int j = 0; j < n; j++)
            if (x[j] == me)
                own_next = NULL;
        for (size_t k = 0; k < nchunks(s); k++) {
            slice_t v = slice_k(s, k);
            s->own = own;
            for (int j = 0; j < n; j++)
                hvd__adasum_combine(&s->t, s->tot + s->per_pair * (size_t)j, out(s, x[j], &v),
                                    in(s, x[j], &v, 0), in(s, y[j], &v, 0), v.c + v.lo,
                                    v.c + v.lo + v.len);
            s->own = own_next;
            partials(s, &v, 0, v.len);
        }
    }
}

/* The root's pair (the last level's one pair, x[0] and y[0]), combined and finished: this
 * rank's slice of a chunk into its slot (and recv), a step, and the other slices out of
 * theirs. */
static hvd_status_t results(shm_adasum_t *s, void *recv, double postscale) {
    size_t ws = s->t.wsize, os = hvd__dtype_size(s->dtype);
    hvd_arena_t *a = s->a;
    /* last chunk first: the last gathered are those still in cache */
    for (size_t k = nchunks(s); k-- > 0;) {
        slice_t v = slice_k(s, k);
        uint8_t *mine = hvd__arena_data(a, a->self) + v.lo * ws;
        hvd__adasum_combine(&s->t, s->tot, mine, in(s, s->x[0], &v, 0), in(s, s->y[0], &v, 0),
                            v.c + v.lo, v.c + v.lo + v.len);
        hvd__allreduce_finish(mine, v.len, s->dtype, HVD_SUM, s->g->size, postscale);
        uint8_t *res = (uint8_t *)recv + v.c * os;
        hvd__allreduce_to_out(res + v.lo * os, mine, v.len, s->dtype);
        hvd_status_t st = step(s);
        if (st != HVD_OK)
            return st;
        for (int r = 0; r < s->g->size; r++) {
            size_t rlo, rlen;
            slice_of(v.n, s->g->size, r, &rlo, &rlen);
            if (r != s->g->rank)
                hvd__allreduce_to_out(res + rlo * os, hvd__arena_data(a, s->idx[r]) + rlo * ws,
                                      rlen, s->dtype);
        }
        hvd__arena_flip(a);
    }
    return HVD_OK;
}

/* A small vector: every rank's in one step, and every rank runs the whole tree on all of them
 * (the same arithmetic in the same order everywhere, so the same bits): the p - 1 pairwise
 * combinations cost each rank less than the steps of the sliced way, above all with more ranks
 * than cores. s->priv holds p vectors. */
static hvd_status_t local_tree(shm_adasum_t *s, hvd_sig_t *sig, const void *send, void *recv,
                               double prescale, double postscale) {
    size_t ws = s->t.wsize, n = s->count;
    hvd_arena_t *a = s->a;
    int p = s->g->size;
    hvd__allreduce_to_work(hvd__arena_data(a, a->self), send, n, s->dtype, prescale);
    hvd_status_t st = hvd__group_arena_agree(s->g, a, s->idx, sig, s->what);
    if (st != HVD_OK)
        return st;
    /* each node of the tree: the rank's slot, until a combination goes into priv */
    const char *node[HVD_ARENA_MAX_RANKS];
    for (int r = 0; r < p; r++)
        node[r] = (const char *)hvd__arena_data(a, s->idx[r]);
    for (int t = 0; t < s->nlevels; t++) {
        int n_pairs = level_pairs(p, s->q, s->fold, t, s->x, s->y);
        for (int j = 0; j < n_pairs; j++) {
            char *o = s->priv + (size_t)s->x[j] * n * ws;
            memset(s->sums, 0, s->per_pair * sizeof(double));
            hvd__adasum_dots(&s->t, s->sums, node[s->x[j]], node[s->y[j]], 0, n);
            hvd__adasum_combine(&s->t, s->sums, o, node[s->x[j]], node[s->y[j]], 0, n);
            node[s->x[j]] = o;
        }
    }
    char *root = s->priv; /* (node 0, combined into at every level) */
    hvd__allreduce_finish(root, n, s->dtype, HVD_SUM, p, postscale);
    hvd__allreduce_to_out(recv, root, n, s->dtype);
    hvd__arena_flip(a);
    return HVD_OK;
}

hvd_status_t hvd__shm_adasum(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                             const void *send, void *recv, size_t count, hvd_dtype_t dtype,
                             double prescale, double postscale, const size_t *parts, size_t nparts,
                             const char *what) {
    int p = g->size;
    if (count == 0) {
        hvd_status_t st = hvd__group_arena_agree(g, a, idx, sig, what);
        if (st == HVD_OK)
            hvd__arena_flip(a);
        return st;
    }
    shm_adasum_t s = {
        .g = g, .a = a, .idx = idx, .what = what, .dtype = dtype, .count = count, .q = 1};
    while (2 * s.q <= p)
        s.q *= 2;
    s.fold = p > s.q;
    s.nlevels = s.fold;
    for (int q = s.q; q > 1; q /= 2)
        s.nlevels++;
    int most = p / 2; /* pairs on any level */
    size_t np = parts && nparts ? nparts : 1;
    s.per_pair = 3 * np;
    size_t *starts = hvd__group_scratch(g, 2,
                                        (np + 1) * sizeof(size_t) +
                                            2 * s.per_pair * (size_t)most * sizeof(double) +
                                            2 * (size_t)most * sizeof(int));
    if (!starts)
        return HVD_ERR_NO_MEMORY;
    s.sums = (double *)(starts + np + 1);
    s.tot = s.sums + s.per_pair * (size_t)most;
    s.x = (int *)(s.tot + s.per_pair * (size_t)most);
    s.y = s.x + most;
    hvd__adasum_parts(&s.t, dtype, starts, parts, nparts, count);
    size_t ws = s.t.wsize;
    if (count * ws <= LOCAL_TREE_BYTES && count * ws <= a->data_bytes) {
        s.priv = hvd__group_scratch(g, 0, (size_t)p * count * ws);
        return s.priv ? local_tree(&s, sig, send, recv, prescale, postscale) : HVD_ERR_NO_MEMORY;
    }
    s.chunk = a->data_bytes / ws;
    slice_t last = slice_k(&s, nchunks(&s) - 1);
    s.mine = last.at + last.len;
    s.priv = hvd__group_scratch(g, 0, (size_t)p * s.mine * ws + 1);
    if (!s.priv)
        return HVD_ERR_NO_MEMORY;
    if (s.t.w == dtype && prescale == 1.0)
        s.own = send;

    s.npairs = level_pairs(p, s.q, s.fold, 0, s.x, s.y);
    memset(s.sums, 0, s.per_pair * (size_t)s.npairs * sizeof(double));
    hvd_status_t st = gather(&s, sig, send, prescale);
    if (st == HVD_OK)
        st = levels(&s);
    if (st == HVD_OK)
        st = results(&s, recv, postscale);
    return st;
}
