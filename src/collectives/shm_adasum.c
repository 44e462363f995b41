/* Adasum in the host arena (shm_coll.h): the tree of adasum.h, computed by slices, up to three
 * levels of it at a time.
 *
 * Every rank owns a 1/p slice of each chunk (a slot's worth of elements) of every rank's
 * vector, as in the sliced sum, and first gathers its slice of every other vector into private
 * memory.
 *
 * A node of the tree is a weighted sum of the vectors below it, and the pairwise rule needs only
 * the dot product of two nodes and their squared norms: these follow from the dot products
 * among the vectors below (their Gram matrix). So a stage of up to three levels is one exchange:
 * the stage combines its nodes in groups of at most eight into one node each; every rank
 * computes each group's Gram matrix over its slices, the ranks sum them (a few float64 per
 * tensor, in rank order, so every rank derives the same weights), and every rank runs the
 * stage's pairwise combinations on the weights, tensor by tensor, in float64. Then it writes
 * each group's weighted sum of its slices as the new node. At the last stage the one group's
 * sum is this rank's slice of the result, which goes out through its slot.
 *
 * The arithmetic per element grows with the group (ten products for four vectors, 36 for eight,
 * on values in L1), but each stage takes one pass over the slices where combining level by level
 * takes one per level, plus the level's dot products: at np 4, 16 MiB, the pairwise way's
 * combinations read the slices from memory twice over and took a fifth of the time (perf).
 *
 * The vectors pass through the slots a chunk per step: every rank writes its input chunk into
 * its slot and copies its slices of the others' out (its own slice it reads where the input
 * is, when the input needs no conversion or scale); at the end it writes its result slice of
 * a chunk into its slot and copies the others' out.
 *
 * The transport's version (adasum.c) moves halves between the pairs and waits for a block's
 * sums at every level; here nothing moves twice, all p ranks share every stage's arithmetic
 * (the folded ones included), and the result is the same tree of pairwise combinations (the
 * same up to rounding: the dot products of the nodes come from the Gram matrix in float64
 * rather than from the nodes' rounded values). */
#include "collectives/adasum.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/shm_coll.h"
#include "common/error.h"

#include <string.h>

/* Up to this many bytes per vector, every rank runs the whole tree itself (local_tree). */
#define LOCAL_TREE_BYTES (64 * 1024)
/* The first stage's Gram matrices are taken over this many bytes of each vector at a time,
 * right after they were copied, while they are in L1. */
#define TILE_BYTES 8192
/* Levels per stage: groups of up to 2^3 nodes (HVD_ADASUM_GROUP_MAX). */
#define STAGE_LEVELS 3
/* Levels of a tree of at most HVD_ARENA_MAX_RANKS ranks, the fold included. */
#define MAX_LEVELS 8
_Static_assert((1 << STAGE_LEVELS) <= HVD_ADASUM_GROUP_MAX, "a stage's group outgrows the kernels");
_Static_assert(HVD_ARENA_MAX_RANKS <= (1 << (MAX_LEVELS - 1)), "a tree outgrows MAX_LEVELS");

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

/* The nodes one stage combines into one: the root (the lowest, into which the others go) first. */
typedef struct {
    int m, node[HVD_ADASUM_GROUP_MAX];
    size_t sums; /* where its Gram matrices start in the stage's sums: per tensor, gram_n(m) */
    size_t ws;   /* where its weights start: per tensor, m */
} group_t;

/* Entries of an m x m Gram matrix's upper triangle. */
static size_t gram_n(int m) {
    return (size_t)m * (size_t)(m + 1) / 2;
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
    char *priv;          /* this rank's slices of every node: p x mine elements (node r at r) */
    /* This rank's own vector in the working dtype, indexed by element, where it is whole
     * (the input when it needs neither a conversion nor a scale), until a stage combines
     * into it; else NULL: its slices are in priv. */
    const char *own;
    int q, fold, nlevels, nstages;
    int npairs[MAX_LEVELS], x[MAX_LEVELS][HVD_ARENA_MAX_RANKS / 2],
        y[MAX_LEVELS][HVD_ARENA_MAX_RANKS / 2]; /* the tree */
    int ngroups;                                /* the current stage's */
    group_t group[HVD_ARENA_MAX_RANKS];
    size_t nsums;           /* the current stage's Gram entries, over groups and tensors */
    double *sums, *tot, *w; /* this rank's Gram entries, the group's sums, the weights */
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

/* Node r's values in slice v, from its i-th element: in priv, or where own is. */
static const char *in(const shm_adasum_t *s, int r, const slice_t *v, size_t i) {
    if (r == s->g->rank && s->own)
        return s->own + (v->c + v->lo + i) * s->t.wsize;
    return s->priv + ((size_t)r * s->mine + v->at + i) * s->t.wsize;
}

/* Where slice v of node r goes in priv. */
static char *out(const shm_adasum_t *s, int r, const slice_t *v) {
    return s->priv + ((size_t)r * s->mine + v->at) * s->t.wsize;
}

static hvd_status_t step(shm_adasum_t *s) {
    hvd_status_t st = hvd__arena_step(s->a);
    return st == HVD_OK ? HVD_OK : hvd__group_arena_failed(s->g, st, s->what);
}

/* The level after stage st's last. */
static int stage_end(const shm_adasum_t *s, int st) {
    int t1 = (st + 1) * STAGE_LEVELS;
    return t1 < s->nlevels ? t1 : s->nlevels;
}

/* Stage st's groups (levels [STAGE_LEVELS st, stage_end)), its sums zeroed. */
static void stage_groups(shm_adasum_t *s, int st) {
    int p = s->g->size, t0 = st * STAGE_LEVELS, t1 = stage_end(s, st);
    /* each node's nodes so far (those combined into it), and whether the stage has it */
    int m[HVD_ARENA_MAX_RANKS] = {0}, below[HVD_ARENA_MAX_RANKS][HVD_ADASUM_GROUP_MAX];
    for (int t = t0; t < t1; t++)
        for (int j = 0; j < s->npairs[t]; j++) {
            int x = s->x[t][j], y = s->y[t][j];
            for (int r = 0; r < 2; r++) {
                int node = r ? y : x;
                if (t == t0 || !m[node]) /* (a node the stage meets first at a later level) */
                    m[node] = 1, below[node][0] = node;
            }
            memcpy(&below[x][m[x]], below[y], (size_t)m[y] * sizeof(int));
            m[x] += m[y];
            m[y] = -1; /* combined into x */
        }
    s->ngroups = 0;
    s->nsums = 0;
    size_t nw = 0, np = s->t.nparts;
    for (int r = 0; r < p; r++)
        if (m[r] > 0) {
            group_t *gr = &s->group[s->ngroups++];
            gr->m = m[r];
            memcpy(gr->node, below[r], (size_t)m[r] * sizeof(int));
            gr->sums = s->nsums;
            gr->ws = nw;
            s->nsums += gram_n(gr->m) * np;
            nw += (size_t)gr->m * np;
        }
    memset(s->sums, 0, s->nsums * sizeof(double));
}

/* The current stage's Gram entries over elements [i, i + k) of slice v, added to s->sums. */
static void partials(shm_adasum_t *s, const slice_t *v, size_t i, size_t k) {
    for (int j = 0; j < s->ngroups; j++) {
        const group_t *gr = &s->group[j];
        const void *vec[HVD_ADASUM_GROUP_MAX];
        for (int e = 0; e < gr->m; e++)
            vec[e] = in(s, gr->node[e], v, i);
        hvd__adasum_gram(&s->t, s->sums + gr->sums, vec, gr->m, v->c + v->lo + i,
                         v->c + v->lo + i + k);
    }
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

/* u' G v for weight vectors u and v over a group of m nodes whose Gram matrix's upper triangle
 * is gram. */
static double bilinear(const double *gram, const double *u, const double *v, int m) {
    double sum = 0;
    for (int i = 0, at = 0; i < m; i++)
        for (int j = i; j < m; j++, at++)
            sum += i == j ? gram[at] * u[i] * v[i] : gram[at] * (u[i] * v[j] + u[j] * v[i]);
    return sum;
}

/* Stage st's weights (s->w) from its summed Gram matrices (s->tot): for each group and tensor,
 * the stage's pairwise combinations run on the nodes' weights over the group. */
static void weights(shm_adasum_t *s, int st) {
    int t0 = st * STAGE_LEVELS, t1 = stage_end(s, st);
    size_t np = s->t.nparts;
    for (int j = 0; j < s->ngroups; j++) {
        const group_t *gr = &s->group[j];
        int m = gr->m, at[HVD_ARENA_MAX_RANKS]; /* a node's place in the group, or -1 */
        for (int r = 0; r < s->g->size; r++)
            at[r] = -1;
        for (int e = 0; e < m; e++)
            at[gr->node[e]] = e;
        for (size_t k = 0; k < np; k++) {
            const double *gram = s->tot + gr->sums + gram_n(m) * k;
            double wt[HVD_ADASUM_GROUP_MAX][HVD_ADASUM_GROUP_MAX] = {{0}};
            for (int e = 0; e < m; e++)
                wt[e][e] = 1;
            for (int t = t0; t < t1; t++)
                for (int pr = 0; pr < s->npairs[t]; pr++) {
                    int x = at[s->x[t][pr]], y = at[s->y[t][pr]];
                    if (x < 0)
                        continue; /* another group's */
                    double ca, cb;
                    hvd__adasum_coeffs(bilinear(gram, wt[x], wt[y], m),
                                       bilinear(gram, wt[x], wt[x], m),
                                       bilinear(gram, wt[y], wt[y], m), &ca, &cb);
                    for (int e = 0; e < m; e++)
                        wt[x][e] = ca * wt[x][e] + cb * wt[y][e];
                }
            memcpy(s->w + gr->ws + (size_t)m * k, wt[0], (size_t)m * sizeof(double));
        }
    }
}

/* Group gr's weighted sum over slice v (its weights in s->w), into dst (which may be its
 * root's slice). */
static void mix(shm_adasum_t *s, const group_t *gr, const slice_t *v, void *dst) {
    const void *vec[HVD_ADASUM_GROUP_MAX];
    for (int e = 0; e < gr->m; e++)
        vec[e] = in(s, gr->node[e], v, 0);
    hvd__adasum_mix(&s->t, s->w + gr->ws, dst, vec, gr->m, v->c + v->lo, v->c + v->lo + v->len);
}

/* The gathering, a chunk per step (the first carries the agreement), with the first stage's
 * Gram entries. */
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

/* The stages below the last: sum the Gram entries, derive the weights, write each group's sum
 * (into priv, as its root's slice) and take the next stage's Gram entries chunk by chunk while
 * its values are in cache. On return the last stage's weights are in s->w and its one group
 * (the root's) is s->group[0]. */
static hvd_status_t stages(shm_adasum_t *s) {
    for (int st = 0;; st++) {
        hvd_status_t rc = sum_partials(s, s->nsums);
        if (rc != HVD_OK)
            return rc;
        weights(s, st);
        if (st + 1 == s->nstages)
            return HVD_OK;
        int n = s->ngroups;
        group_t done[HVD_ARENA_MAX_RANKS]; /* this stage's (s->group becomes the next's) */
        memcpy(done, s->group, (size_t)n * sizeof *done);
        stage_groups(s, st + 1);
        const char *own = s->own;
        for (size_t k = 0; k < nchunks(s); k++) {
            slice_t v = slice_k(s, k);
            s->own = own;
            for (int j = 0; j < n; j++)
                mix(s, &done[j], &v, out(s, done[j].node[0], &v));
            s->own = NULL; /* (the next stage's nodes are this one's roots: all in priv) */
            partials(s, &v, 0, v.len);
        }
    }
}

/* The root's group, summed and finished: this rank's slice of a chunk into its slot (and
 * recv), a step, and the other slices out of theirs. */
static hvd_status_t results(shm_adasum_t *s, void *recv, double postscale) {
    size_t ws = s->t.wsize, os = hvd__dtype_size(s->dtype);
    hvd_arena_t *a = s->a;
    /* last chunk first: the last gathered or combined are those still in cache */
    for (size_t k = nchunks(s); k-- > 0;) {
        slice_t v = slice_k(s, k);
        uint8_t *mine = hvd__arena_data(a, a->self) + v.lo * ws;
        mix(s, &s->group[0], &v, mine);
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

/* A small vector: every rank's in one step, and every rank runs the whole tree on all of them,
 * pair by pair (the same arithmetic in the same order everywhere, so the same bits): the p - 1
 * pairwise combinations cost each rank less than the steps of the sliced way, above all with
 * more ranks than cores. s->priv holds p vectors, s->sums 3 doubles per tensor. */
static hvd_status_t local_tree(shm_adasum_t *s, hvd_sig_t *sig, const void *send, void *recv,
                               double prescale, double postscale) {
    size_t ws = s->t.wsize, n = s->count, np = s->t.nparts;
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
    for (int t = 0; t < s->nlevels; t++)
        for (int j = 0; j < s->npairs[t]; j++) {
            int x = s->x[t][j], y = s->y[t][j];
            char *o = s->priv + (size_t)x * n * ws;
            memset(s->sums, 0, 3 * np * sizeof(double));
            hvd__adasum_dots(&s->t, s->sums, node[x], node[y], 0, n);
            hvd__adasum_combine(&s->t, s->sums, o, node[x], node[y], 0, n);
            node[x] = o;
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
    for (int t = 0; t < s.nlevels; t++)
        s.npairs[t] = level_pairs(p, s.q, s.fold, t, s.x[t], s.y[t]);
    s.nstages = (s.nlevels + STAGE_LEVELS - 1) / STAGE_LEVELS;
    size_t np = parts && nparts ? nparts : 1;
    /* a stage's Gram entries: at most (GROUP_MAX + 1) / 2 per node and tensor (a group of m
     * nodes has m (m + 1) / 2), its weights one per node and tensor */
    size_t most = ((size_t)p * (HVD_ADASUM_GROUP_MAX + 1) + 1) / 2 * np;
    size_t *starts = hvd__group_scratch(
        g, 2, (np + 1) * sizeof(size_t) + (2 * most + (size_t)p * np) * sizeof(double));
    if (!starts)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    s.sums = (double *)(starts + np + 1);
    s.tot = s.sums + most;
    s.w = s.tot + most;
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
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    if (s.t.w == dtype && prescale == 1.0)
        s.own = send;

    stage_groups(&s, 0);
    hvd_status_t st = gather(&s, sig, send, prescale);
    if (st == HVD_OK)
        st = stages(&s);
    if (st == HVD_OK)
        st = results(&s, recv, postscale);
    return st;
}
