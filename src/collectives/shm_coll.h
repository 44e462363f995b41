/* Collectives in the host's shared-memory arena (transport/shm_arena.h), for groups whose
 * members are exactly the ranks of one host: every rank writes its part into its own slot,
 * and the others read it there, with no frames and no copies through a transport.
 *
 * The agreement (hvd__group_agree's) rides along: each rank's signature goes into its slot's
 * head with its first step, so a mismatch or a rank's invalid arguments end the call on
 * every rank after that one step, as over the transport. A failure in the arena aborts the
 * transport, whose abort records the first cause for the other ranks of the host. */
#ifndef HVD_COLLECTIVES_SHM_COLL_H
#define HVD_COLLECTIVES_SHM_COLL_H

#include "collectives/group.h"
#include "transport/shm_arena.h"

/* Allreduce (as hvd__coll_allreduce; sig carries HVD_SIG_INVALID when this rank's arguments
 * were rejected, then send and recv are unused) in arena a, idx mapping group ranks to its
 * members. Small inputs: one step, after which every rank reduces all slots in rank order.
 * Larger ones: per chunk of a slot's size, every rank reduces its 1/p slice of all slots in
 * rank order and writes it back into its own slot, a second step, and every rank copies the
 * other slices out. Both give every rank the same bits. */
hvd_status_t hvd__shm_allreduce(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                                const void *send, void *recv, size_t count, hvd_dtype_t dtype,
                                hvd_reduce_op_t op, double prescale, double postscale,
                                const char *what);

/* Adasum (adasum.h's tree and pairwise operation, the same results up to the float64
 * partial sums' order) in arena a, for a valid call of count > 0 elements or none: every
 * rank combines its slice of every chunk, and a level of the tree is one step of partial
 * dot products (shm_adasum.c says how). parts/nparts as for hvd__adasum_run. */
hvd_status_t hvd__shm_adasum(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                             const void *send, void *recv, size_t count, hvd_dtype_t dtype,
                             double prescale, double postscale, const size_t *parts, size_t nparts,
                             const char *what);

/* dst[0..n) = elements [at, at + n) of the current step's slots of group ranks 0..p-1 (idx),
 * reduced in rank order in the working dtype w through an L1-sized tile; dst may be that
 * range of this rank's own slot. */
void hvd__shm_reduce_into(const hvd_arena_t *a, const int *idx, int p, size_t at, size_t n,
                          hvd_dtype_t w, hvd_reduce_op_t op, uint8_t *dst);

/* len bytes at address addr of group rank r's memory into dst, by cross-memory attach
 * (g->cma_pids): HVD_OK, or the failure with its message (what: the collective; the rank
 * gone, or the reason the kernel refused), for the caller to pass to hvd__group_arena_failed. */
hvd_status_t hvd__shm_cma_read(hvd_group_t *g, int r, uint64_t addr, void *dst, size_t len,
                               const char *what);

/* Broadcast of bytes from group rank root (valid when sig says so) in arena a: the root
 * writes slot-sized chunks into its slot, one step each (the first carries the agreement),
 * and the others copy each out. */
hvd_status_t hvd__shm_broadcast(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                                void *buf, size_t bytes, int root, const char *what);

/* Reduce-scatter in arena a among exactly its members (lg): group rank r's part of send,
 * elements [poff[r], poff[r] + plen[r]), reduced over all members in rank order, into this
 * rank's part (in the working dtype: float32 for float16/bfloat16; prescale applied to the
 * inputs, nothing else). Each step every rank writes a slot's share of every part into its
 * slot and reduces its own share over all slots. */
hvd_status_t hvd__shm_reduce_scatter(hvd_group_t *lg, hvd_arena_t *a, const int *idx,
                                     const void *send, uint8_t *part, const size_t *poff,
                                     const size_t *plen, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                     double prescale, const char *what);

/* The collective a hierarchical one runs across hosts (on hier_cross, over the transport):
 * the entry point that chose the hierarchical path hands itself in, so that this layer, below
 * the entry points, never calls up into them. */
typedef hvd_status_t (*hvd_cross_allreduce_fn)(hvd_group_t *g, const void *send, void *recv,
                                               size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                               double prescale, double postscale);
typedef hvd_status_t (*hvd_cross_allgather_fn)(hvd_group_t *g, const void *send, void *recv,
                                               const size_t *counts, size_t fixed_count,
                                               hvd_dtype_t dtype);

/* Allreduce on a group with hier_local and hier_cross set (group.h): the agreement on the
 * group, a reduce-scatter in the host's arena (local rank r gets part r of the vector), an
 * allreduce of each part across hosts (cross, on hier_cross), and an allgather in the arena.
 * sig must be valid (invalid calls take the flat path, which agrees alike). */
hvd_status_t hvd__shm_hier_allreduce(hvd_group_t *g, hvd_sig_t *sig, const void *send, void *recv,
                                     size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                     double prescale, double postscale, const char *what,
                                     hvd_cross_allreduce_fn cross);

/* Allgather(v) in arena a among exactly its members, after the agreement, g->lens/offs
 * holding every rank's block in bytes (total in all): from 256 KiB each rank reads every
 * other block straight from its owner when the group has cma_pids (group.h), else a slot of
 * every block per step. */
hvd_status_t hvd__shm_allgather(hvd_group_t *g, hvd_arena_t *a, const int *idx, const void *send,
                                void *recv, size_t total, const char *what);

/* Allgather(v) on a group with hier_grid set (group.h), after its agreement, g->lens/offs
 * holding every rank's block in bytes: each rank's block goes to the ranks of equal local
 * rank on the other hosts (cross, on hier_cross), then every rank's collection of
 * those ("bundle") to the other ranks of its host through the arena, a slot at a time. */
hvd_status_t hvd__shm_hier_allgather(hvd_group_t *g, const void *send, void *recv, const char *what,
                                     hvd_cross_allgather_fn cross);

#endif
