/* The rendezvous of a job started by a plain `mpirun` (Open MPI), without horovodrun: no
 * store to check in with, so the ranks exchange their check-in records through the launcher's
 * own key-value service, PMIx, which every Open MPI rank is connected to and which only the
 * job's processes can read. Rank 0 also publishes a fresh job secret there, which then guards
 * the data plane as horovodrun's would.
 *
 * libpmix is loaded with dlopen when this path is taken, so libhvd does not depend on it and
 * works unchanged where it is missing (the error then says so). Every wait is bounded: the
 * fence carries PMIx's own timeout. Built only when pmix.h was found (HVD_HAVE_PMIX); without
 * it the call fails with a message naming the missing package. */
#ifndef HVD_CORE_PMIX_EXCHANGE_H
#define HVD_CORE_PMIX_EXCHANGE_H

#include <hvd/types.h>

#include "crypto/secret.h"

/* Publish record (this rank's check-in line) and, on rank 0, secret; wait (at most
 * timeout_s) until all size ranks have; then read every rank's record into records_p[size]
 * (malloc'd strings, free with hvd__pmix_records_free) and rank 0's secret into *secret_p.
 * Errors name the PMIx call and its reason: HVD_ERR_UNSUPPORTED (no PMIx library, or not
 * started by a PMIx launcher), HVD_ERR_TIMEOUT, HVD_ERR_PROTOCOL, HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__pmix_exchange(int rank, int size, const char *record, const hvd_secret_t *secret,
                                int timeout_s, char ***records_p, hvd_secret_t *secret_p);

void hvd__pmix_records_free(char **records, int size);

#endif
