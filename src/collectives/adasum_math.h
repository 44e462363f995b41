/* Adasum's pairwise operation on a buffer of tensors: two vectors a and b combine as
 *
 *     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
 *
 * (a coefficient stays 1 when its vector is zero), the dot product and squared norms summed in
 * float64, per tensor: a fused buffer is several vectors. The sums come from any split of the
 * buffer into ranges (hvd__adasum_dots adds a range's share), so that the tree algorithms
 * (adasum.c over the transport, shm_adasum.c in the host arena) can each compute them where
 * their data is. */
#ifndef HVD_COLLECTIVES_ADASUM_MATH_H
#define HVD_COLLECTIVES_ADASUM_MATH_H

#include <hvd/types.h>

#include <stddef.h>

/* A buffer's tensors for the pairwise kernels: values in the working dtype w (float32, or
 * float64), tensor k the elements [starts[k], starts[k + 1]). */
typedef struct {
    hvd_dtype_t w;
    size_t wsize;
    const size_t *starts; /* nparts + 1 entries, the last the buffer's count */
    size_t nparts;
} hvd_adasum_parts_t;

/* t for a buffer of count elements of dtype in tensors of parts[0..nparts) elements (NULL, 0:
 * one tensor), starts (nparts + 1 entries, or 2) filled in. */
void hvd__adasum_parts(hvd_adasum_parts_t *t, hvd_dtype_t dtype, size_t *starts,
                       const size_t *parts, size_t nparts, size_t count);

/* sums[3k .. 3k + 3) += (a.b, |a|^2, |b|^2) of tensor k's elements in [lo, hi), in float64, for
 * every tensor k that overlaps the range (a and b hold the range, indexed from lo). */
void hvd__adasum_dots(const hvd_adasum_parts_t *t, double *sums, const void *a, const void *b,
                      size_t lo, size_t hi);

/* out = ca a + cb b over [lo, hi), tensor by tensor, with each tensor's coefficients from its
 * whole-vector sums (as hvd__adasum_dots leaves them, summed over every range); out, a and b
 * hold the range, indexed from lo; out may be a or b. */
void hvd__adasum_combine(const hvd_adasum_parts_t *t, const double *sums, void *out, const void *a,
                         const void *b, size_t lo, size_t hi);

/* The pairwise rule's coefficients from a pair's whole-vector sums: a's and b's. */
void hvd__adasum_coeffs(double ab, double aa, double bb, double *ca, double *cb);

/* The most vectors hvd__adasum_gram and hvd__adasum_mix take at once. */
#define HVD_ADASUM_GROUP_MAX 8

/* The Gram matrix of m <= HVD_ADASUM_GROUP_MAX vectors, per tensor: sums[per k + e] += v[i] .
 * v[j] over tensor k's elements in [lo, hi), in float64, for every tensor k that overlaps the
 * range, per = m (m + 1) / 2 and e the place of (i, j), i <= j, in the matrix's upper triangle
 * read row by row ((0, 0), (0, 1), ..., (0, m - 1), (1, 1), ...); v[i] hold the range, indexed
 * from lo. */
void hvd__adasum_gram(const hvd_adasum_parts_t *t, double *sums, const void *const *v, int m,
                      size_t lo, size_t hi);

/* out = the sum of w[m k + i] v[i] over [lo, hi), tensor by tensor (k), in the working dtype;
 * out and v[i] hold the range, indexed from lo; out may be one of v. */
void hvd__adasum_mix(const hvd_adasum_parts_t *t, const double *w, void *out, const void *const *v,
                     int m, size_t lo, size_t hi);

#endif
