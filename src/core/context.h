/* The single mutable global of libhvd: the context that hvd_init fills and hvd_shutdown
 * empties. Later modules (transport, controller, background thread) hang off it. */
#ifndef HVD_CORE_CONTEXT_H
#define HVD_CORE_CONTEXT_H

#include "common/params.h"
#include "crypto/secret.h"
#include "rendezvous/store_client.h"

typedef struct {
    int initialized;
    unsigned generation; /* hvd_init calls so far in this process; names the check-in scope */
    hvd_params_t params;
    hvd_secret_t secret;
    hvd_store_client_t *store; /* NULL for a job of size 1 without a launcher */
} hvd_context_t;

#endif
