/* The pipelined ring: reduce-scatter, allgather, or both back to back (allreduce), as one
 * exchange. Each segment is cut into chunks; the send of a chunk in step s+1 waits only for
 * the receive (and reduction) of that chunk in step s, so reduction overlaps the transfers
 * and the kernel's socket buffers never run dry between steps. Bandwidth-optimal: each rank
 * sends and receives 2 (p-1)/p of the data for allreduce.
 *
 * Step s of the reduce-scatter sends segment own-1-s to the right neighbour and receives
 * segment own-2-s from the left one; after p-1 steps this rank holds segment own fully
 * reduced. Step s of the allgather sends segment own-s and receives own-s-1 (mod p). */
#ifndef HVD_COLLECTIVES_RING_H
#define HVD_COLLECTIVES_RING_H

#include "collectives/group.h"

typedef struct hvd_ring hvd_ring_t;

/* Called when a chunk of the owned segment is fully reduced: elements [off, off + n) of
 * work are final. It finishes them (average, scale, convert) into out. */
typedef void (*hvd_ring_finalize_fn)(hvd_ring_t *ring, size_t off, size_t n);

struct hvd_ring {
    hvd_group_t *g;
    const size_t *seg_off, *seg_len; /* elements of each of the p segments */
    int own;                         /* the segment this rank reduces and provides */
    /* reduce-scatter (skipped when work is NULL) */
    void *work;            /* p segments in the working dtype; reduced in place */
    const void *first_src; /* out of place: this rank's contribution, read on first touch */
    hvd_dtype_t wdtype;
    hvd_reduce_op_t op;
    hvd_ring_finalize_fn finalize;
    void *finalize_arg;
    /* allgather (skipped when out is NULL) */
    void *out;    /* p segments of the output dtype */
    size_t osize; /* bytes per output element */
    /* internal */
    void *tmp;
    size_t nchunks;
};

/* Run the ring. Segments must cover the same layout in work and out. */
hvd_status_t hvd__ring_run(hvd_ring_t *ring, const char *what);

/* Bytes per pipelined chunk. */
#define HVD_RING_CHUNK_BYTES (256 * 1024)

#endif
