/* Bayesian optimisation of a noisy score over [0, 1]^dims, for autotune (Horovod's parameter
 * manager: a Gaussian process and expected improvement).
 *
 * The model is a Gaussian process with a squared-exponential kernel (length scale 0.2 in the
 * unit cube) over the scores normalised to mean 0 and variance 1, with noise added to the
 * kernel's diagonal (Horovod's gaussian_process_noise, 0.8 by default: training steps are
 * noisy, and a point measured twice need not score the same). The next point maximises the
 * expected improvement over the best score so far, searched over a fixed set of random points
 * and then refined around the best of them; the random points come from a seeded generator,
 * so a run is reproducible. Maximising. Not thread safe: one owner. */
#ifndef HVD_CONTROLLER_BAYES_OPT_H
#define HVD_CONTROLLER_BAYES_OPT_H

#include <hvd/types.h>

#include <stdint.h>

/* At most this many dimensions and samples (a tuning run takes tens). */
#define HVD_BO_MAX_DIMS 8
#define HVD_BO_MAX_SAMPLES 256

typedef struct hvd_bo hvd_bo_t;

/* noise: in [0, 1]; seed: the candidate points' generator. */
hvd_status_t hvd__bo_create(int dims, double noise, uint64_t seed, hvd_bo_t **bo_p);
void hvd__bo_destroy(hvd_bo_t *bo);

/* Record that x (dims coordinates in [0, 1], clamped) scored y. HVD_ERR_INVALID_ARG once
 * HVD_BO_MAX_SAMPLES are in, or for a score that is not finite. */
hvd_status_t hvd__bo_add(hvd_bo_t *bo, const double *x, double y);

/* The next point to measure (x: dims coordinates). With no sample yet, the cube's centre. */
void hvd__bo_next(hvd_bo_t *bo, double *x);

/* The best sample so far into x and *y; 0 when there is none. */
int hvd__bo_best(const hvd_bo_t *bo, double *x, double *y);

/* Samples recorded so far. */
int hvd__bo_count(const hvd_bo_t *bo);

#endif
