/* Bayesian optimisation (bayes_opt.h). */
#include "controller/bayes_opt.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LENGTH_SCALE 0.2
/* Random points the expected improvement is evaluated at, then refinement rounds around the
 * best of them (each halving the step). */
#define CANDIDATES 2048
#define REFINE_ROUNDS 12
/* Expected improvement's exploration margin, in normalised score units: 0.2 found the
 * global peak of tests/unit/test_bayes_opt.c's two-peak function in 16 samples for each of 42
 * seeds tried, 0.01 for 3 of 10 (it kept refining the lower peak). */
#define XI 0.2

struct hvd_bo {
    int dims, n;
    double noise;
    uint64_t rng;
    double x[HVD_BO_MAX_SAMPLES][HVD_BO_MAX_DIMS];
    double y[HVD_BO_MAX_SAMPLES];
    /* the fit of the current samples: normalised scores, the Cholesky factor of K + noise I
     * (row-major n x n, lower) and alpha = (K + noise I)^-1 y */
    int fitted;
    double mean, scale;
    double *chol, *alpha, *ynorm;
};

static double uniform(hvd_bo_t *bo) {
    /* xorshift64*: a fixed sequence per seed */
    bo->rng ^= bo->rng >> 12;
    bo->rng ^= bo->rng << 25;
    bo->rng ^= bo->rng >> 27;
    return (double)((bo->rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static double kernel(const hvd_bo_t *bo, const double *a, const double *b) {
    double d2 = 0;
    for (int i = 0; i < bo->dims; i++)
        d2 += (a[i] - b[i]) * (a[i] - b[i]);
    return exp(-d2 / (2 * LENGTH_SCALE * LENGTH_SCALE));
}

hvd_status_t hvd__bo_create(int dims, double noise, uint64_t seed, hvd_bo_t **bo_p) {
    if (dims < 1 || dims > HVD_BO_MAX_DIMS)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "bayesian optimisation: %d dimensions (1 to %d)",
                              dims, HVD_BO_MAX_DIMS);
    if (!(noise >= 0 && noise <= 1))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "bayesian optimisation: noise %g is not in [0, 1]", noise);
    hvd_bo_t *bo = calloc(1, sizeof *bo);
    size_t n = HVD_BO_MAX_SAMPLES;
    if (bo) {
        bo->chol = malloc(n * n * sizeof *bo->chol);
        bo->alpha = malloc(n * sizeof *bo->alpha);
        bo->ynorm = malloc(n * sizeof *bo->ynorm);
    }
    if (!bo || !bo->chol || !bo->alpha || !bo->ynorm) {
        hvd__bo_destroy(bo);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for bayesian optimisation");
    }
    bo->dims = dims;
    /* a floor: the kernel matrix of two close points is singular without it */
    bo->noise = noise > 1e-6 ? noise : 1e-6;
    bo->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    *bo_p = bo;
    return HVD_OK;
}

void hvd__bo_destroy(hvd_bo_t *bo) {
    if (!bo)
        return;
    free(bo->chol);
    free(bo->alpha);
    free(bo->ynorm);
    free(bo);
}

hvd_status_t hvd__bo_add(hvd_bo_t *bo, const double *x, double y) {
    if (bo->n >= HVD_BO_MAX_SAMPLES)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "bayesian optimisation: %d samples already",
                              HVD_BO_MAX_SAMPLES);
    if (!isfinite(y))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "bayesian optimisation: score %g", y);
    for (int i = 0; i < bo->dims; i++)
        bo->x[bo->n][i] = x[i] < 0 ? 0 : x[i] > 1 ? 1 : x[i];
    bo->y[bo->n++] = y;
    bo->fitted = 0;
    return HVD_OK;
}

int hvd__bo_count(const hvd_bo_t *bo) {
    return bo->n;
}

int hvd__bo_best(const hvd_bo_t *bo, double *x, double *y) {
    if (!bo->n)
        return 0;
    int b = 0;
    for (int k = 1; k < bo->n; k++)
        if (bo->y[k] > bo->y[b])
            b = k;
    memcpy(x, bo->x[b], (size_t)bo->dims * sizeof *x);
    *y = bo->y[b];
    return 1;
}

/* Normalise the scores and factor K + noise I (positive definite: the noise is on its
 * diagonal). */
static void fit(hvd_bo_t *bo) {
    int n = bo->n;
    double sum = 0, sq = 0;
    for (int k = 0; k < n; k++)
        sum += bo->y[k];
    bo->mean = sum / n;
    for (int k = 0; k < n; k++)
        sq += (bo->y[k] - bo->mean) * (bo->y[k] - bo->mean);
    bo->scale = n > 1 && sq > 0 ? sqrt(sq / n) : 1.0;
    for (int k = 0; k < n; k++)
        bo->ynorm[k] = (bo->y[k] - bo->mean) / bo->scale;
    double *L = bo->chol;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double s = kernel(bo, bo->x[i], bo->x[j]) + (i == j ? bo->noise : 0);
            for (int k = 0; k < j; k++)
                s -= L[i * n + k] * L[j * n + k];
            L[i * n + j] = i == j ? sqrt(s > 1e-12 ? s : 1e-12) : s / L[j * n + j];
        }
    }
    /* alpha = L^-T L^-1 y */
    for (int i = 0; i < n; i++) {
        double s = bo->ynorm[i];
        for (int k = 0; k < i; k++)
            s -= L[i * n + k] * bo->alpha[k];
        bo->alpha[i] = s / L[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = bo->alpha[i];
        for (int k = i + 1; k < n; k++)
            s -= L[k * n + i] * bo->alpha[k];
        bo->alpha[i] = s / L[i * n + i];
    }
    bo->fitted = 1;
}

/* Expected improvement at x over the best normalised score. */
static double expected_improvement(const hvd_bo_t *bo, const double *x, double best) {
    int n = bo->n;
    double ks[HVD_BO_MAX_SAMPLES], v[HVD_BO_MAX_SAMPLES], mu = 0;
    for (int k = 0; k < n; k++) {
        ks[k] = kernel(bo, x, bo->x[k]);
        mu += ks[k] * bo->alpha[k];
    }
    /* variance: k(x, x) - |L^-1 k*|^2 */
    const double *L = bo->chol;
    double var = 1.0;
    for (int i = 0; i < n; i++) {
        double s = ks[i];
        for (int k = 0; k < i; k++)
            s -= L[i * n + k] * v[k];
        v[i] = s / L[i * n + i];
        var -= v[i] * v[i];
    }
    double sigma = var > 1e-12 ? sqrt(var) : 1e-6, gain = mu - best - XI, z = gain / sigma;
    /* gain Phi(z) + sigma phi(z), the normal distribution's CDF and density */
    return gain * 0.5 * erfc(-z / 1.4142135623730951) +
           sigma * exp(-0.5 * z * z) / 2.5066282746310002;
}

void hvd__bo_next(hvd_bo_t *bo, double *x) {
    int d = bo->dims;
    if (!bo->n) {
        for (int i = 0; i < d; i++)
            x[i] = 0.5;
        return;
    }
    if (!bo->fitted)
        fit(bo);
    double best = bo->ynorm[0];
    for (int k = 1; k < bo->n; k++)
        best = bo->ynorm[k] > best ? bo->ynorm[k] : best;
    double cand[HVD_BO_MAX_DIMS], top[HVD_BO_MAX_DIMS], top_ei = -1;
    for (int c = 0; c < CANDIDATES; c++) {
        for (int i = 0; i < d; i++)
            cand[i] = uniform(bo);
        double ei = expected_improvement(bo, cand, best);
        if (ei > top_ei) {
            top_ei = ei;
            memcpy(top, cand, (size_t)d * sizeof *top);
        }
    }
    /* refine: try a step either way along each coordinate, halving the step each round */
    double step = 0.1;
    for (int round = 0; round < REFINE_ROUNDS; round++, step /= 2) {
        for (int i = 0; i < d; i++) {
            for (int sign = -1; sign <= 1; sign += 2) {
                memcpy(cand, top, (size_t)d * sizeof *cand);
                cand[i] += sign * step;
                if (cand[i] < 0 || cand[i] > 1)
                    continue;
                double ei = expected_improvement(bo, cand, best);
                if (ei > top_ei) {
                    top_ei = ei;
                    memcpy(top, cand, (size_t)d * sizeof *top);
                }
            }
        }
    }
    memcpy(x, top, (size_t)d * sizeof *x);
}
