/* The Bayesian optimiser of autotune (src/controller/bayes_opt.h): it finds the maximum of
 * known score functions within a tuning run's budget (4 starting points as Horovod's, then
 * 16 samples), with and without noise, reproducibly, and refuses bad arguments. */
#include "controller/bayes_opt.h"

#include <hvd/hvd.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

typedef double (*score_fn)(const double *x, int k);

/* one peak at 0.73 */
static double parabola(const double *x, int k) {
    (void)k;
    return -(x[0] - 0.73) * (x[0] - 0.73);
}

/* the global peak (1.0) at (0.3, 0.8), a lower one (0.6) at (0.8, 0.2) */
static double two_peaks(const double *x, int k) {
    (void)k;
    double a = (x[0] - 0.3) * (x[0] - 0.3) + (x[1] - 0.8) * (x[1] - 0.8);
    double b = (x[0] - 0.8) * (x[0] - 0.8) + (x[1] - 0.2) * (x[1] - 0.2);
    return exp(-a / 0.05) + 0.6 * exp(-b / 0.05);
}

/* two_peaks measured with noise of +-0.05 (a fixed pseudo-random sequence) */
static double noisy_peaks(const double *x, int k) {
    uint64_t h = (uint64_t)(k + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return two_peaks(x, k) + ((double)(h % 1001) / 1000.0 - 0.5) * 0.1;
}

/* Tune f over dims dimensions; the true score of the best point measured. */
static double tune(score_fn f, score_fn truth, int dims, uint64_t seed, double *best_x) {
    hvd_bo_t *bo;
    assert_int_equal(hvd__bo_create(dims, 0.1, seed, &bo), HVD_OK);
    static const double starts[4][2] = {{0.06, 0.05}, {0.5, 0.5}, {0.25, 0.25}, {0.125, 0.1}};
    int k = 0;
    for (; k < 4; k++)
        assert_int_equal(hvd__bo_add(bo, starts[k], f(starts[k], k)), HVD_OK);
    for (; k < 20; k++) {
        double x[2];
        hvd__bo_next(bo, x);
        for (int i = 0; i < dims; i++)
            assert_true(x[i] >= 0 && x[i] <= 1);
        assert_int_equal(hvd__bo_add(bo, x, f(x, k)), HVD_OK);
    }
    assert_int_equal(hvd__bo_count(bo), 20);
    /* the best by the true score among the measured points (the optimiser only sees f) */
    double y;
    assert_true(hvd__bo_best(bo, best_x, &y));
    hvd__bo_destroy(bo);
    return truth(best_x, 0);
}

static void test_one_dimension(void **state) {
    (void)state;
    double x[2];
    tune(parabola, parabola, 1, 7, x);
    assert_true(fabs(x[0] - 0.73) < 0.03);
}

static void test_finds_the_global_peak(void **state) {
    (void)state;
    double x[2];
    double got = tune(two_peaks, two_peaks, 2, 11, x);
    assert_true(got > 0.9); /* not the 0.6 peak, nor a starting point (all under 0.1) */
}

static void test_with_noise(void **state) {
    (void)state;
    double x[2];
    double got = tune(noisy_peaks, two_peaks, 2, 13, x);
    assert_true(got > 0.9);
}

static void test_reproducible(void **state) {
    (void)state;
    double a[2], b[2];
    tune(noisy_peaks, two_peaks, 2, 5, a);
    tune(noisy_peaks, two_peaks, 2, 5, b);
    assert_memory_equal(a, b, sizeof a);
}

static void test_first_point_and_errors(void **state) {
    (void)state;
    hvd_bo_t *bo;
    assert_int_equal(hvd__bo_create(0, 0.5, 1, &bo), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__bo_create(HVD_BO_MAX_DIMS + 1, 0.5, 1, &bo), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__bo_create(2, 1.5, 1, &bo), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__bo_create(2, 0.8, 1, &bo), HVD_OK);
    double x[2], y;
    assert_false(hvd__bo_best(bo, x, &y));
    hvd__bo_next(bo, x);
    assert_true(x[0] == 0.5 && x[1] == 0.5);
    assert_int_equal(hvd__bo_add(bo, x, NAN), HVD_ERR_INVALID_ARG);
    double out[2] = {-1, 2}; /* clamped into the cube */
    assert_int_equal(hvd__bo_add(bo, out, 3.0), HVD_OK);
    assert_true(hvd__bo_best(bo, x, &y));
    assert_true(x[0] == 0 && x[1] == 1 && y == 3.0);
    hvd__bo_destroy(bo);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_dimension),
        cmocka_unit_test(test_finds_the_global_peak),
        cmocka_unit_test(test_with_noise),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_first_point_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
