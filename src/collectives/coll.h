/* The collectives on a group, as the public entry points call them. Each validates its
 * arguments, agrees with the other ranks (group.h: invalid arguments on one rank become
 * HVD_ERR_MISMATCH on the others instead of a hang), then runs the algorithm its size
 * calls for. Arguments follow the public declarations in hvd.h. */
#ifndef HVD_COLLECTIVES_COLL_H
#define HVD_COLLECTIVES_COLL_H

#include "collectives/group.h"

/* At most this many bytes per rank (in the working dtype), allreduce gathers every rank's
 * input in ceil(log2 p) rounds and reduces locally (latency-optimal); above, the pipelined
 * ring (bandwidth-optimal). Allgather and broadcast switch at the same total size. */
#define HVD_SMALL_BYTES (16 * 1024)
/* Allreduce on groups of up to 4 gathers up to 64 KiB per rank: one round still beats the
 * ring's two there (np=2: 20 us against 39 at 32 KiB). */
#define HVD_SMALL_ALLREDUCE_BYTES_UPTO4 (64 * 1024)

hvd_status_t hvd__coll_allreduce(hvd_group_t *g, const void *send, void *recv, size_t count,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                                 double postscale);
/* Adasum (adasum.h) of count elements in tensors of parts[0..nparts) elements (NULL, 0: one),
 * after the agreement; hvd__coll_allreduce with HVD_ADASUM comes here with one tensor. */
hvd_status_t hvd__coll_adasum(hvd_group_t *g, const void *send, void *recv, size_t count,
                              hvd_dtype_t dtype, double prescale, double postscale,
                              const size_t *parts, size_t nparts);
hvd_status_t hvd__coll_broadcast(hvd_group_t *g, void *buf, size_t count, hvd_dtype_t dtype,
                                 int root);
/* counts: one per rank (allgatherv); fixed_count used when counts is NULL (allgather). */
hvd_status_t hvd__coll_allgather(hvd_group_t *g, const void *send, void *recv, const size_t *counts,
                                 size_t fixed_count, hvd_dtype_t dtype);
hvd_status_t hvd__coll_alltoall(hvd_group_t *g, const void *send, void *recv, size_t count,
                                hvd_dtype_t dtype);
hvd_status_t hvd__coll_reducescatter(hvd_group_t *g, const void *send, void *recv, size_t count,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op);
/* Reducescatter where rank r receives counts[r] elements (block r of send, blocks laid out
 * in rank order); every rank passes the same counts. */
hvd_status_t hvd__coll_reducescatterv(hvd_group_t *g, const void *send, void *recv,
                                      const size_t *counts, hvd_dtype_t dtype, hvd_reduce_op_t op);
/* Alltoall where this rank sends sendcounts[j] elements to rank j and receives
 * recvcounts[i] from rank i, blocks laid out in rank order in send and recv. */
hvd_status_t hvd__coll_alltoallv(hvd_group_t *g, const void *send, const size_t *sendcounts,
                                 void *recv, const size_t *recvcounts, hvd_dtype_t dtype);
hvd_status_t hvd__coll_barrier(hvd_group_t *g);
/* The alltoall's exchange, after the agreement: block j of send (soff[j], sbytes[j] bytes) to
 * rank j, block i of recv (roff[i], rbytes[i]) from rank i, this rank's own copied; every
 * pair's transfers in flight at once (rank r starts with r+1, r+2, ... so that the ranks do
 * not all queue on rank 0 first). */
hvd_status_t hvd__coll_exchange(hvd_group_t *g, const void *send, const size_t *soff,
                                const size_t *sbytes, void *recv, const size_t *roff,
                                const size_t *rbytes, const char *what);

/* The allreduce's pieces the core uses to run a small blocking allreduce inside its cycle
 * message (one round, as hvd__coll_allreduce's small path): argument checks (*work_bytes_p:
 * count in the working dtype, float32 for half types) and the per-rank size limit of the
 * small path (the conversions and the local reduction: allreduce_work.h). */
hvd_status_t hvd__allreduce_check(const void *send, const void *recv, size_t count,
                                  hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                                  double postscale, const char *what, size_t *work_bytes_p);
size_t hvd__allreduce_small_limit(int p);
/* Bytes per rank (working dtype) up to which the engine carries a blocking allreduce on g in
 * its cycle messages: the small path's limit, and 32 KiB on a group whose cycle messages go
 * hierarchically (group.h, hier_grid), where gathering every rank's 32 KiB beat the ring's
 * 2(p - 1) steps on 3 hosts x 2 ranks (64 KiB did not). */
#define HVD_HIER_INLINE_BYTES (32 * 1024)
size_t hvd__allreduce_inline_limit(const hvd_group_t *g);
/* Shared by the collectives: "allreduce #12 on the global communicator". */
void hvd__coll_what(const hvd_group_t *g, const char *name, char *out, size_t out_size);
/* HVD_OK, or HVD_ERR_INVALID_ARG when ptr is NULL but bytes are expected. */
hvd_status_t hvd__coll_check_buf(const void *ptr, size_t count, const char *what,
                                 const char *which);
/* The arguments of a collective whose send buffer holds one block of count elements of
 * esize bytes per rank (alltoall, reducescatter): both buffers present when count > 0, and
 * *block_p = count * esize, *total_p = p * block without overflow. */
hvd_status_t hvd__coll_check_blocks(const void *send, const void *recv, size_t count, size_t esize,
                                    int p, const char *what, size_t *block_p, size_t *total_p);
/* count * size without overflow, or HVD_ERR_INVALID_ARG. */
hvd_status_t hvd__coll_bytes(size_t count, size_t size, const char *what, size_t *bytes_p);

#endif
