/* The rendezvous of a job formed through the program's own key-value store (hvd_init_store:
 * torch.distributed's c10d store under torchrun or any env:// launcher), without horovodrun:
 * every rank publishes its check-in record there and reads every other rank's, as the PMIx
 * path does through mpirun's store (core/pmix_exchange.h).
 *
 * The job secret either comes out of band (the same _HOROVOD_SECRET_KEY, or HVD_SECRET_FILE,
 * on every rank: nothing secret goes into the store) or rank 0 makes one and publishes it in
 * the store, which is then exactly as protected as that store is. Keys carry the init
 * generation ("hvd.<g>.rank_<r>"), so a re-initialisation in the same store never reads the
 * previous one's records. */
#ifndef HVD_CORE_STORE_EXCHANGE_H
#define HVD_CORE_STORE_EXCHANGE_H

#include <hvd/hvd.h>

#include "crypto/secret.h"

/* Longest record or value read back from the store. */
#define HVD_STORE_VALUE_MAX 1024

/* Publish record (this rank's check-in line) and, on rank 0 when publish_secret, *secret;
 * then read every rank's record into records_p[size] (malloc'd strings, as the PMIx
 * exchange's: free with hvd__pmix_records_free) and, when publish_secret, rank 0's
 * secret into *secret_p (else *secret_p = *secret). Every read waits at most until
 * timeout_s after the call began; the error names the rank whose record never came and the
 * key. HVD_ERR_TIMEOUT, HVD_ERR_PROTOCOL (a value too long or malformed), the store's own
 * errors (with its message), HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__store_exchange(const hvd_store_t *store, unsigned generation, const char *record,
                                 const hvd_secret_t *secret, int publish_secret, int timeout_s,
                                 char ***records_p, hvd_secret_t *secret_p);

#endif
