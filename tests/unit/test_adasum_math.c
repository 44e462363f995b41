/* Adasum's kernels for the host arena's tree (collectives/adasum_math.h): the Gram matrix of 1 to
 * 8 vectors and their weighted sum, for float32 and float64, at counts that leave every tail of
 * the vector loops, over buffers of several tensors and ranges that start inside one, against
 * sums computed here in long double; and the pairwise rule's coefficients, zero vectors
 * included. (The processor's AVX2 versions run where it has them, the portable ones elsewhere.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "collectives/adasum_math.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const size_t counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 1021};

/* Element i of vector j: values of both signs and several magnitudes. */
static double value(int j, size_t i) {
    return sin(1.0 + (double)j * 7.31 + (double)i * 0.917) * (1.0 + (double)(i % 5));
}

static void fill(void *buf, hvd_dtype_t w, int j, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (w == HVD_FLOAT32)
            ((float *)buf)[i] = (float)value(j, i);
        else
            ((double *)buf)[i] = value(j, i);
}

static long double at(const void *buf, hvd_dtype_t w, size_t i) {
    return w == HVD_FLOAT32 ? (long double)((const float *)buf)[i]
                            : (long double)((const double *)buf)[i];
}

/* The tensors of a test: one, or three (the first ends inside the range tested). */
typedef struct {
    hvd_adasum_parts_t t;
    size_t starts[4];
} parts_t;

static void make_parts(parts_t *p, hvd_dtype_t w, size_t n, int split) {
    size_t sizes[3] = {n / 3, n / 3 + 1, 0};
    sizes[2] = n - sizes[0] - sizes[1];
    hvd__adasum_parts(&p->t, w, p->starts, split && n >= 3 ? sizes : NULL, split && n >= 3 ? 3 : 0,
                      n);
}

/* m vectors of n elements, and where each one's range [lo, n) starts. */
typedef struct {
    void *v[HVD_ADASUM_GROUP_MAX];
    const void *from[HVD_ADASUM_GROUP_MAX];
    int m;
} vectors_t;

static void vectors_make(vectors_t *vs, hvd_dtype_t w, int m, size_t n, size_t lo) {
    size_t ws = w == HVD_FLOAT32 ? 4 : 8;
    vs->m = m;
    for (int j = 0; j < m; j++) {
        vs->v[j] = malloc(n * ws);
        fill(vs->v[j], w, j, n);
        vs->from[j] = (const char *)vs->v[j] + lo * ws;
    }
}

static void vectors_free(vectors_t *vs) {
    for (int j = 0; j < vs->m; j++)
        free(vs->v[j]);
}

/* Every dtype, group size and count, with one tensor and three, from the first element and
 * from one inside the first tensor. */
static void each_case(void (*check)(hvd_dtype_t w, int m, size_t n, int split, size_t lo)) {
    hvd_dtype_t ws[] = {HVD_FLOAT32, HVD_FLOAT64};
    for (int d = 0; d < 2; d++)
        for (int m = 1; m <= HVD_ADASUM_GROUP_MAX; m++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (int split = 0; split < 2; split++) {
                    check(ws[d], m, counts[c], split, 0);
                    if (counts[c] > 2)
                        check(ws[d], m, counts[c], split, counts[c] / 3 + 1);
                }
}

/* Every tensor's Gram matrix over [lo, n) of m vectors, against long double sums. */
static void check_gram(hvd_dtype_t w, int m, size_t n, int split, size_t lo) {
    vectors_t vs;
    vectors_make(&vs, w, m, n, lo);
    void *const *v = vs.v;
    const void *const *from = vs.from;
    parts_t p;
    make_parts(&p, w, n, split);
    size_t per = (size_t)m * (size_t)(m + 1) / 2;
    double *sums = calloc(per * p.t.nparts, sizeof(double));
    hvd__adasum_gram(&p.t, sums, from, m, lo, n);
    for (size_t k = 0; k < p.t.nparts; k++) {
        size_t a = p.starts[k] > lo ? p.starts[k] : lo, b = p.starts[k + 1];
        size_t e = 0;
        for (int i = 0; i < m; i++)
            for (int j = i; j < m; j++, e++) {
                long double want = 0, scale = 0;
                for (size_t x = a; x < b; x++) {
                    want += at(v[i], w, x) * at(v[j], w, x);
                    scale += fabsl(at(v[i], w, x) * at(v[j], w, x));
                }
                double got = sums[per * k + e];
                if (!(fabsl(got - want) <= 1e-13L * (scale + 1)))
                    fail_msg("gram %s m=%d n=%zu tensor %zu (%zu..%zu) entry (%d,%d): %.17g, want "
                             "%.17Lg",
                             w == HVD_FLOAT32 ? "float32" : "float64", m, n, k, a, b, i, j, got,
                             want);
            }
    }
    free(sums);
    vectors_free(&vs);
}

static void test_gram(void **state) {
    (void)state;
    each_case(check_gram);
}

/* The weighted sum of m vectors over [lo, n), tensor by tensor, into a buffer of its own
 * (into < 0) or in place over vector `into`. */
static void check_mix_into(hvd_dtype_t w, int m, size_t n, int split, size_t lo, int into) {
    size_t ws = w == HVD_FLOAT32 ? 4 : 8;
    vectors_t vs;
    vectors_make(&vs, w, m, n, lo);
    void *const *v = vs.v;
    parts_t p;
    make_parts(&p, w, n, split);
    double *weights = malloc(sizeof(double) * (size_t)m * p.t.nparts);
    for (size_t k = 0; k < p.t.nparts; k++)
        for (int j = 0; j < m; j++)
            weights[(size_t)m * k + (size_t)j] = 0.25 + 0.5 * (double)j - 0.3 * (double)k;
    /* the reference, before the in-place run overwrites a vector */
    long double *want = calloc(n, sizeof *want), *scale = calloc(n, sizeof *scale);
    for (size_t k = 0; k < p.t.nparts; k++)
        for (size_t x = p.starts[k] > lo ? p.starts[k] : lo; x < p.starts[k + 1]; x++)
            for (int j = 0; j < m; j++) {
                long double term = (long double)weights[(size_t)m * k + (size_t)j] * at(v[j], w, x);
                want[x] += term;
                scale[x] += fabsl(term);
            }
    void *out = into < 0 ? malloc(n * ws) : v[into];
    hvd__adasum_mix(&p.t, weights, (char *)out + lo * ws, vs.from, m, lo, n);
    double tol = w == HVD_FLOAT32 ? 4.0 * m * FLT_EPSILON : 4.0 * m * DBL_EPSILON;
    for (size_t x = lo; x < n; x++)
        if (!(fabsl(at(out, w, x) - want[x]) <= tol * (scale[x] + 1e-30L)))
            fail_msg("mix %s m=%d n=%zu into %d element %zu: %.9Lg, want %.9Lg",
                     w == HVD_FLOAT32 ? "float32" : "float64", m, n, into, x, at(out, w, x),
                     want[x]);
    if (into < 0)
        free(out);
    free(want);
    free(scale);
    free(weights);
    vectors_free(&vs);
}

static void check_mix(hvd_dtype_t w, int m, size_t n, int split, size_t lo) {
    check_mix_into(w, m, n, split, lo, -1);
    check_mix_into(w, m, n, split, lo, 0);
    check_mix_into(w, m, n, split, lo, m / 2);
    check_mix_into(w, m, n, split, lo, m - 1);
}

static void test_mix(void **state) {
    (void)state;
    each_case(check_mix);
}

static void test_coeffs(void **state) {
    (void)state;
    double ca, cb;
    /* a = b: each halves */
    hvd__adasum_coeffs(4.0, 4.0, 4.0, &ca, &cb);
    assert_true(ca == 0.5 && cb == 0.5);
    /* orthogonal: both stay */
    hvd__adasum_coeffs(0.0, 2.0, 3.0, &ca, &cb);
    assert_true(ca == 1.0 && cb == 1.0);
    /* a zero vector (a squared norm below sqrt(DBL_MIN)): its coefficient stays 1 */
    hvd__adasum_coeffs(0.0, 0.0, 5.0, &ca, &cb);
    assert_true(ca == 1.0 && cb == 1.0);
    hvd__adasum_coeffs(1e-160, 1e-160, 5.0, &ca, &cb);
    assert_true(ca == 1.0);
    /* the rule: 1 - a.b / (2 |a|^2), 1 - a.b / (2 |b|^2) */
    hvd__adasum_coeffs(1.0, 2.0, 4.0, &ca, &cb);
    assert_true(ca == 0.75 && cb == 0.875);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gram),
        cmocka_unit_test(test_mix),
        cmocka_unit_test(test_coeffs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
