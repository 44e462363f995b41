/* A collective call's signature: which collective, dtype, op, root, count, a digest of
 * per-rank counts, flags and the call's number on its communicator, as every rank of a group
 * exchanges it before the call (collectives/group.h, the agreement) and as the engine's cycle
 * messages carry it (wire/cycle.h); and its wire form. */
#ifndef HVD_WIRE_SIG_H
#define HVD_WIRE_SIG_H

#include <stdint.h>

typedef enum {
    HVD_COLL_ALLREDUCE = 1,
    HVD_COLL_BROADCAST,
    HVD_COLL_ALLGATHER,
    HVD_COLL_ALLGATHERV,
    HVD_COLL_ALLTOALL,
    HVD_COLL_REDUCESCATTER,
    HVD_COLL_BARRIER,
} hvd_coll_t;

#define HVD_SIG_INVALID 1u /* this rank's arguments were rejected locally */
#define HVD_SIG_ORDERED 2u /* an allreduce summing in rank order (hvd_group_t.ordered) */
/* An allreduce with a prescale other than 1: ranks that disagree on it would take different
 * paths in the arena (shm_allreduce.c), so they must fail the agreement instead. */
#define HVD_SIG_PRESCALED 4u
/* An allreduce in the arena by cross-memory attach (shm_allreduce.c): the ranks of a host
 * decide that each on its own (from whether the host is oversubscribed), so a rank that
 * decided otherwise fails the agreement instead of reading the others' slots wrongly. */
#define HVD_SIG_CMA 8u
#define HVD_SIG_LEN 28

typedef struct {
    uint8_t coll, dtype, op, flags;
    int32_t root;
    uint64_t count;
    uint64_t extra; /* allgatherv: digest of recvcounts */
    uint32_t seq;
} hvd_sig_t;

/* The signature's wire form (HVD_SIG_LEN bytes, little-endian) and equality. */
void hvd__sig_encode(uint8_t *out, const hvd_sig_t *s);
void hvd__sig_decode(const uint8_t *in, hvd_sig_t *s);
int hvd__sig_equal(const hvd_sig_t *a, const hvd_sig_t *b);

#endif
