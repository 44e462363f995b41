/* Adasum (op HVD_ADASUM) on N ranks, against a reference this program computes on its own:
 * every rank generates every rank's input, combines them in float64 along the tree that
 * src/collectives/adasum.h describes (rank q + i folded into rank i, q the largest power of
 * two not above the size, then pairs at distance 1, 2, 4, ...), and compares its result.
 *
 *   adasum_check SCENARIO
 *
 * values   blocking hvd_allreduce (out of place and in place) / hvd_allreduce_ex (scale
 *          factors) for float16, bfloat16, float32, float64 at sizes 0, 1, 2, 3, 7, 13, 1021,
 *          65537, 262147
 * fused    several named allreduces enqueued together (fused into one buffer): each tensor is
 *          a vector of its own, with its own coefficients
 * grouped  hvd_grouped_allreduce_async
 * pset     a process set of the ranks but the last (and the global set beside it)
 * props    Adasum(a, a) = a; orthogonal vectors add; zero vectors leave the other
 * errors   integer dtypes and reducescatter refuse Adasum, naming what is wrong */
#define RANK_CHECK_PROGRAM "adasum_check"
#include "rank_check.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>

/* ---- inputs and the reference ------------------------------------------------------------ */

/* Rank r's element i of a test with this seed: k / 64 for an integer |k| <= 64 (exact in every
 * dtype tested). */
static double input(int r, size_t i, unsigned seed) {
    uint64_t x = (uint64_t)r * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^ seed;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (double)((int)(x % 129) - 64) / 64.0;
}

/* a = Adasum(a, b), n elements, in float64 */
static void ref_pair(double *a, const double *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += a[i] * b[i];
        aa += a[i] * a[i];
        bb += b[i] * b[i];
    }
    const double tiny = sqrt(DBL_MIN);
    double ca = aa >= tiny ? 1 - ab / (2 * aa) : 1, cb = bb >= tiny ? 1 - ab / (2 * bb) : 1;
    for (size_t i = 0; i < n; i++)
        a[i] = ca * a[i] + cb * b[i];
}

/* The tree over v[0..p) (each n elements; destroyed); the result in v[0]. */
static void ref_tree(double **v, int p, size_t n) {
    int q = 1;
    while (2 * q <= p)
        q *= 2;
    for (int i = 0; i + q < p; i++)
        ref_pair(v[i], v[q + i], n);
    for (int d = 1; d < q; d *= 2)
        for (int i = 0; i < q; i += 2 * d)
            ref_pair(v[i], v[i + d], n);
}

/* The reference for members[0..p) (global ranks; their inputs under seed), scaled. */
static double *reference(const int *members, int p, size_t n, unsigned seed, double scale) {
    double **v = xmalloc((size_t)p * sizeof *v);
    for (int j = 0; j < p; j++) {
        v[j] = xmalloc(n * sizeof **v);
        for (size_t i = 0; i < n; i++)
            v[j][i] = input(members[j], i, seed);
    }
    ref_tree(v, p, n);
    double *out = v[0];
    for (size_t i = 0; i < n; i++)
        out[i] *= scale;
    for (int j = 1; j < p; j++)
        free(v[j]);
    free(v);
    return out;
}

typedef struct {
    hvd_dtype_t dt;
    const char *name;
    size_t size;
    double tol; /* relative (compare) */
} dtype_t;

static const dtype_t DTYPES[] = {
    {HVD_FLOAT16, "float16", 2, 2e-3},
    {HVD_BFLOAT16, "bfloat16", 2, 1e-2},
    {HVD_FLOAT32, "float32", 4, 2e-6},
    {HVD_FLOAT64, "float64", 8, 1e-12},
};

static void *make_input(const dtype_t *d, int r, size_t n, unsigned seed) {
    uint8_t *buf = xmalloc(n * d->size);
    for (size_t i = 0; i < n; i++) {
        double x = input(r, i, seed);
        switch (d->dt) {
        case HVD_FLOAT16: {
            uint16_t h = f16_of(x);
            memcpy(buf + 2 * i, &h, 2);
            break;
        }
        case HVD_BFLOAT16: {
            uint16_t h = bf16_of(x);
            memcpy(buf + 2 * i, &h, 2);
            break;
        }
        case HVD_FLOAT32: {
            float f = (float)x;
            memcpy(buf + 4 * i, &f, 4);
            break;
        }
        default:
            memcpy(buf + 8 * i, &x, 8);
        }
    }
    return buf;
}

static double element(const dtype_t *d, const void *buf, size_t i) {
    const uint8_t *b = buf;
    uint16_t h;
    float f;
    double x;
    switch (d->dt) {
    case HVD_FLOAT16:
        memcpy(&h, b + 2 * i, 2);
        return f16_val(h);
    case HVD_BFLOAT16:
        memcpy(&h, b + 2 * i, 2);
        return bf16_val(h);
    case HVD_FLOAT32:
        memcpy(&f, b + 4 * i, 4);
        return f;
    default:
        memcpy(&x, b + 8 * i, 8);
        return x;
    }
}

/* The error allowed is relative to the largest of the result's values and the inputs' bound
 * (1): the tree's intermediate vectors are rounded to the dtype at the inputs' scale, so a
 * result that cancels to something small keeps an error of that scale. */
static void compare(const char *what, const dtype_t *d, const void *got, const double *want,
                    size_t n) {
    double most = 1.0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        most = fmax(most, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs(element(d, got, i) - want[i]);
        if (!(e <= worst)) { /* (NaN counts as worst) */
            worst = e;
            at = i;
        }
    }
    CHECK(worst <= d->tol * most,
          "%s %s n=%zu: element %zu is %.9g, expected %.9g (error %.3g > %.3g)", what, d->name, n,
          at, n ? element(d, got, at) : 0.0, n ? want[at] : 0.0, worst, d->tol * most);
}

static int *world(void) {
    int *all = xmalloc((size_t)g_size * sizeof *all);
    for (int r = 0; r < g_size; r++)
        all[r] = r;
    return all;
}

/* ---- scenarios ---------------------------------------------------------------------------- */

static const size_t SIZES[] = {0, 1, 2, 3, 7, 13, 1021, 65537, 262147};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static void scn_values(void) {
    int *all = world();
    for (size_t k = 0; k < sizeof DTYPES / sizeof DTYPES[0]; k++) {
        const dtype_t *d = &DTYPES[k];
        for (size_t s = 0; s < NSIZES; s++) {
            size_t n = SIZES[s];
            unsigned seed = (unsigned)(k * 100 + s);
            void *in = make_input(d, g_rank, n, seed), *out = xmalloc(n * d->size);
            double *want = reference(all, g_size, n, seed, 1.0);
            OK(hvd_allreduce(in, out, n, d->dt, HVD_ADASUM));
            compare("allreduce", d, out, want, n);
            /* in place: the input is read where it is while the result is written over it */
            memcpy(out, in, n * d->size);
            OK(hvd_allreduce(out, out, n, d->dt, HVD_ADASUM));
            compare("allreduce in place", d, out, want, n);
            /* in place, scaled: Adasum(c a, c b) = c Adasum(a, b) */
            double *scaled = reference(all, g_size, n, seed, 0.5 * 3.0);
            OK(hvd_allreduce_ex(in, in, n, d->dt, HVD_ADASUM, 0.5, 3.0, HVD_COMM_GLOBAL));
            compare("allreduce_ex in place, prescale 0.5, postscale 3", d, in, scaled, n);
            free(in);
            free(out);
            free(want);
            free(scaled);
        }
    }
    free(all);
}

/* Tensors of these sizes (elements) enqueued together: all under the fusion threshold and
 * the direct-reduction size (128 KiB of float64), so one fused buffer holds them. The large
 * set is more than a shared-memory slot (256 KiB) in every dtype, so that tensors and ranks'
 * slices straddle the arena's chunks; the small one fits the arena's whole-tree path. */
#define NPARTS 10
typedef struct {
    size_t n, sizes[NPARTS];
} parts_t;
static const parts_t SMALL_PARTS = {5, {5, 1, 300, 4099, 17}};
static const parts_t LARGE_PARTS = {10, {5, 1, 300, 4099, 17, 16000, 15001, 16383, 12000, 16001}};

static void check_parts(const char *what, const parts_t *ps, const dtype_t *d, void **outs,
                        const int *members, int p, unsigned seed0) {
    for (size_t t = 0; t < ps->n; t++) {
        double *want = reference(members, p, ps->sizes[t], seed0 + (unsigned)t, 1.0);
        compare(what, d, outs[t], want, ps->sizes[t]);
        free(want);
    }
}

static void enqueue_parts(const parts_t *ps, const dtype_t *d, int pset, const char *prefix,
                          void **ins, void **outs, int64_t *shapes, hvd_handle_t *hs,
                          unsigned seed0) {
    hvd_tensor_op_t ops[NPARTS];
    char names[NPARTS][64];
    for (size_t t = 0; t < ps->n; t++) {
        ins[t] = make_input(d, g_rank, ps->sizes[t], seed0 + (unsigned)t);
        outs[t] = xmalloc(ps->sizes[t] * d->size);
        shapes[t] = (int64_t)ps->sizes[t];
        hvd_tensor_op_init(&ops[t]);
        snprintf(names[t], sizeof names[t], "%s.%s.%zu.%zu", prefix, d->name, ps->n, t);
        ops[t].name = names[t];
        ops[t].send = ins[t];
        ops[t].recv = outs[t];
        ops[t].dtype = d->dt;
        ops[t].ndim = 1;
        ops[t].shape = &shapes[t];
        ops[t].op = HVD_ADASUM;
        ops[t].process_set = pset;
    }
    OK(hvd_enqueue(HVD_OP_ALLREDUCE, ops, ps->n, hs));
}

static void free_parts(const parts_t *ps, void **ins, void **outs) {
    for (size_t t = 0; t < ps->n; t++) {
        free(ins[t]);
        free(outs[t]);
    }
}

static void scn_fused(void) {
    int *all = world();
    const parts_t *sets[] = {&SMALL_PARTS, &LARGE_PARTS};
    for (size_t k = 0; k < sizeof DTYPES / sizeof DTYPES[0]; k++) {
        const dtype_t *d = &DTYPES[k];
        for (int round = 0; round < 6; round++) { /* (the response cache serves later rounds) */
            const parts_t *ps = sets[round % 2];
            void *ins[NPARTS], *outs[NPARTS];
            int64_t shapes[NPARTS];
            hvd_handle_t hs[NPARTS];
            unsigned seed0 = (unsigned)(1000 + 10 * k + round);
            enqueue_parts(ps, d, 0, "fused", ins, outs, shapes, hs, seed0);
            for (size_t t = 0; t < ps->n; t++)
                OK(hvd_wait(hs[t]));
            check_parts("fused", ps, d, outs, all, g_size, seed0);
            free_parts(ps, ins, outs);
        }
    }
    free(all);
}

static void scn_grouped(void) {
    int *all = world();
    const dtype_t *d = &DTYPES[2];
    const parts_t *ps = &LARGE_PARTS;
    const void *ins[NPARTS];
    void *outs[NPARTS];
    size_t counts[NPARTS];
    hvd_handle_t hs[NPARTS];
    for (size_t t = 0; t < ps->n; t++) {
        ins[t] = make_input(d, g_rank, ps->sizes[t], 2000 + (unsigned)t);
        outs[t] = xmalloc(ps->sizes[t] * d->size);
        counts[t] = ps->sizes[t];
    }
    OK(hvd_grouped_allreduce_async("grouped", ps->n, ins, outs, counts, d->dt, HVD_ADASUM, hs));
    for (size_t t = 0; t < ps->n; t++)
        OK(hvd_wait(hs[t]));
    check_parts("grouped", ps, d, outs, all, g_size, 2000);
    for (size_t t = 0; t < ps->n; t++) {
        free((void *)ins[t]);
        free(outs[t]);
    }
    free(all);
}

static void scn_pset(void) {
    CHECK(g_size >= 3, "needs 3 ranks or more");
    int p = g_size - 1, *members = world(), id;
    OK(hvd_add_process_set(members, p, &id));
    const dtype_t *d = &DTYPES[3];
    if (g_rank < p) {
        void *ins[NPARTS], *outs[NPARTS];
        int64_t shapes[NPARTS];
        hvd_handle_t hs[NPARTS];
        const parts_t *ps = &LARGE_PARTS;
        enqueue_parts(ps, d, id, "pset", ins, outs, shapes, hs, 3000);
        for (size_t t = 0; t < ps->n; t++)
            OK(hvd_wait(hs[t]));
        check_parts("process set", ps, d, outs, members, p, 3000);
        free_parts(ps, ins, outs);
    }
    /* and the whole job beside it */
    size_t n = 1021;
    void *in = make_input(d, g_rank, n, 3100), *out = xmalloc(n * d->size);
    double *want = reference(members, g_size, n, 3100, 1.0);
    OK(hvd_allreduce(in, out, n, d->dt, HVD_ADASUM));
    compare("global after the set", d, out, want, n);
    free(in);
    free(out);
    free(want);
    OK(hvd_barrier());
    OK(hvd_remove_process_set(id));
    free(members);
}

/* The properties at n elements of float64: 64 (every rank runs the whole tree) and 20000
 * (160 KB, more than that path takes: the tree by slices, from the Gram matrices). */
static void props_at(size_t n) {
    double *a = xmalloc(n * sizeof *a), *out = xmalloc(n * sizeof *out);
    /* the same vector everywhere: itself */
    for (size_t i = 0; i < n; i++)
        a[i] = sin((double)i + 1.0);
    OK(hvd_allreduce(a, out, n, HVD_FLOAT64, HVD_ADASUM));
    for (size_t i = 0; i < n; i++)
        CHECK(fabs(out[i] - a[i]) <= 1e-12,
              "Adasum(a, ..., a), n=%zu: element %zu is %.17g, not %.17g", n, i, out[i], a[i]);
    /* orthogonal vectors (rank r: the r-th unit vector, scaled): their sum */
    CHECK((size_t)g_size <= n, "at most %zu ranks", n);
    for (size_t i = 0; i < n; i++)
        a[i] = i == (size_t)g_rank ? g_rank + 1.0 : 0.0;
    OK(hvd_allreduce(a, out, n, HVD_FLOAT64, HVD_ADASUM));
    for (size_t i = 0; i < n; i++) {
        double want = i < (size_t)g_size ? (double)i + 1.0 : 0.0;
        CHECK(fabs(out[i] - want) <= 1e-12, "orthogonal, n=%zu: element %zu is %.17g, not %.17g", n,
              i, out[i], want);
    }
    /* zero everywhere but the last rank: that rank's vector */
    for (size_t i = 0; i < n; i++)
        a[i] = g_rank == g_size - 1 ? cos((double)i + 0.5) : 0.0;
    OK(hvd_allreduce(a, out, n, HVD_FLOAT64, HVD_ADASUM));
    for (size_t i = 0; i < n; i++)
        CHECK(fabs(out[i] - cos((double)i + 0.5)) <= 1e-12,
              "zeros and b, n=%zu: element %zu is %.17g, not %.17g", n, i, out[i],
              cos((double)i + 0.5));
    free(a);
    free(out);
}

static void scn_props(void) {
    props_at(64);
    props_at(20000);
}

static void scn_errors(void) {
    int32_t a[5] = {1, 2, 3, 4, 5}, b[5];
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce(a, b, 5, HVD_INT32, HVD_ADASUM));
    HAS(hvd_last_error(), "adasum is not supported for int32");
    hvd_handle_t h;
    EXPECT(HVD_ERR_INVALID_ARG,
           hvd_allreduce_async("adasum.int", a, b, 5, HVD_INT64, HVD_ADASUM, &h));
    HAS(hvd_last_error(), "int64");
    float f[4] = {1, 2, 3, 4}, g[4];
    EXPECT(HVD_ERR_INVALID_ARG, hvd_reducescatter(f, g, 1, HVD_FLOAT32, HVD_ADASUM));
    HAS(hvd_last_error(), "adasum is supported by allreduce only");
    /* the job goes on */
    OK(hvd_allreduce(f, g, 4, HVD_FLOAT32, HVD_ADASUM));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: adasum_check values|fused|grouped|pset|props|errors\n");
        return 2;
    }
    g_scn = argv[1];
    OK(hvd_init());
    g_rank = hvd_rank();
    g_size = hvd_size();
    if (!strcmp(g_scn, "values"))
        scn_values();
    else if (!strcmp(g_scn, "fused"))
        scn_fused();
    else if (!strcmp(g_scn, "grouped"))
        scn_grouped();
    else if (!strcmp(g_scn, "pset"))
        scn_pset();
    else if (!strcmp(g_scn, "props"))
        scn_props();
    else if (!strcmp(g_scn, "errors"))
        scn_errors();
    else
        CHECK(0, "unknown scenario");
    OK(hvd_shutdown());
    if (g_rank == 0)
        printf("adasum_check %s: ok on %d ranks\n", g_scn, g_size);
    return 0;
}
