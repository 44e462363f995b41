/* Adasum, the adaptive summation of Maleki et al. ("Scaling Distributed Training with
 * Adaptive Summation", MLSys 2021), as Horovod's op=Adasum defines it: the ranks' vectors
 * combine pairwise up a binary tree, two vectors a and b into
 *
 *     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
 *
 * (a coefficient stays 1 when its vector is zero), the dot product and squared norms summed in
 * float64 (adasum_math.h). A buffer holding several tensors (a fused response) is that many
 * vectors: each tensor gets its own coefficients, so fusing never changes a result.
 *
 * The tree: a group of p ranks takes q, the largest power of two not above p. Rank q + i
 * (i < p - q) first hands its vector to rank i, which combines the two; then ranks 0..q-1
 * combine by recursive vector halving and distance doubling: at level l, ranks r and r ^ 2^l
 * exchange halves of the piece they hold, each combines its half of the two blocks' vectors,
 * and the 2^(l+1) ranks of the block sum their partial dot products and norms (recursive
 * doubling, a few float64 per tensor) before applying the coefficients; the pieces are then
 * gathered back in the reverse order, and rank q + i gets the result from rank i. So every
 * node of the tree, the folded pairs included, is one pairwise Adasum of two whole vectors:
 * the properties of the pairwise operation (Adasum(a, a) = a, orthogonal vectors add, a zero
 * vector leaves the other) hold for any rank count, as for Horovod's power-of-two trees, to
 * which it is identical when p is a power of two. Each rank moves about twice its vector, as
 * a sum's halving-doubling does. This is the algorithm over the transport; a group that is
 * exactly one host's ranks computes the same tree in its shared-memory arena
 * (hvd__shm_adasum, shm_coll.h). */
#ifndef HVD_COLLECTIVES_ADASUM_H
#define HVD_COLLECTIVES_ADASUM_H

#include "collectives/adasum_math.h"
#include "collectives/group.h"

#include <hvd/types.h>

#include <stddef.h>

/* HVD_OK when Adasum takes dtype, else HVD_ERR_INVALID_ARG naming it. */
hvd_status_t hvd__adasum_check(hvd_dtype_t dtype);

/* Adasum of count elements of dtype (float16, bfloat16, float32 or float64: the caller checked)
 * from send into recv (may be send), in tensors of parts[0..nparts) elements (NULL, 0: one
 * tensor), prescaled and postscaled as a sum is. Every rank of g has agreed on the call. */
hvd_status_t hvd__adasum_run(hvd_group_t *g, const void *send, void *recv, size_t count,
                             hvd_dtype_t dtype, double prescale, double postscale,
                             const size_t *parts, size_t nparts, const char *what);

#endif
