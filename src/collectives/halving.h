/* Recursive halving and doubling allreduce for groups whose size is a power of two (see
 * halving.c). Uses the same description as the ring (ring.h): work, first_src, wdtype, op,
 * finalize, out, osize; the segment fields are not used. */
#ifndef HVD_COLLECTIVES_HALVING_H
#define HVD_COLLECTIVES_HALVING_H

#include "collectives/ring.h"

/* Above this many bytes per rank the ring is faster (measured, np=4). */
#define HVD_HALVING_MAX_BYTES (32u << 20)

hvd_status_t hvd__halving_run(hvd_ring_t *ring, size_t count, const char *what);

#endif
