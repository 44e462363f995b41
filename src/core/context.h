/* The single mutable global of libhvd: the context that hvd_init fills and hvd_shutdown
 * empties. Later modules (controller, background thread) hang off it. */
#ifndef HVD_CORE_CONTEXT_H
#define HVD_CORE_CONTEXT_H

#include "collectives/group.h"
#include "common/params.h"
#include "crypto/secret.h"
#include "rendezvous/store_client.h"
#include "transport/transport.h"

typedef struct {
    int initialized;
    unsigned generation; /* hvd_init calls so far in this process; names the check-in scope */
    hvd_params_t params;
    hvd_secret_t secret;
    hvd_store_client_t *store; /* NULL for a job of size 1 without a launcher */
    hvd_transport_t *tp;       /* NULL when size is 1 */
    hvd_group_t global, local, cross;
} hvd_context_t;

/* Enter a collective: takes the collective lock (one collective at a time, and none during
 * init or shutdown) and returns the context, or HVD_ERR_SHUT_DOWN (lock not held) when hvd
 * is not initialised. */
hvd_status_t hvd__context_enter(hvd_context_t **ctx_p);
void hvd__context_leave(void);

#endif
