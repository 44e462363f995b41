/* The single mutable global of libhvd: the context that hvd_init fills and hvd_shutdown
 * empties. Later modules (controller, background thread) hang off it. */
#ifndef HVD_CORE_CONTEXT_H
#define HVD_CORE_CONTEXT_H

#include <hvd/hvd.h>

#include "collectives/group.h"
#include "core/check_in.h"
#include "core/peer_watch.h"
#include "common/params.h"
#include "crypto/secret.h"
#include "rendezvous/store_client.h"
#include "transport/transport.h"

#include <pthread.h>

typedef struct hvd_engine hvd_engine_t;

typedef struct hvd_context {
    int initialized;
    unsigned generation; /* hvd_init calls so far in this process; names the check-in scope */
    int elastic;         /* HOROVOD_ELASTIC: rounds instead of generations (elastic_rendezvous.h) */
    int round;           /* elastic: the round of this init; names the check-in scope */
    hvd_params_t params;
    hvd_secret_t secret;
    hvd_store_client_t *store;     /* NULL for a job of size 1 without a launcher */
    hvd_check_in_state_t check_in; /* for peers' addresses learnt after a planned check-in */
    hvd_transport_t *tp;           /* NULL when size is 1 */
    hvd_group_t global, local, cross;
    char **hosts;            /* every rank's host name, for messages */
    long *pids;              /* every rank's process id, for messages (0: unknown) */
    hvd_peer_watch_t *watch; /* every rank's, for a wait that saw nothing move (peer_watch.h) */
    int homogeneous;         /* every host runs the same number of ranks */
    /* registered process sets (core/process_set.h), under its lock */
    struct hvd_pset **psets;
    int npsets, next_pset;
    hvd_engine_t *engine; /* the core: every collective goes through it */
    /* hvd_init_store: the program's store the ranks meet through, and whether rank 0's
     * secret travels in it (no secret given out of band); only while hvd_init_store runs */
    const hvd_store_t *ext_store;
    int ext_publish_secret;
} hvd_context_t;

/* The context and its locks (context.c); only hvd_init and hvd_shutdown (init.c) write the
 * context, under all three. hvd__ctx_lock guards the fields the queries read;
 * hvd__ctx_use_lock is read-held by every API call that uses the engine (hvd__context_enter)
 * and write-held by init and shutdown; hvd__ctx_life_lock orders init and shutdown. */
extern hvd_context_t hvd__ctx;
extern pthread_mutex_t hvd__ctx_lock;
extern pthread_rwlock_t hvd__ctx_use_lock;
extern pthread_mutex_t hvd__ctx_life_lock;

/* 1 and the round (into *round_p, may be NULL) when hvd is initialised in elastic mode;
 * 0 otherwise. Thread safe. */
int hvd__context_elastic(int *round_p);

/* The group of a communicator, or NULL for an unknown one. */
hvd_group_t *hvd__context_group(hvd_context_t *c, int comm);

/* Enter an API call that uses the engine: holds off hvd_shutdown's teardown (not its
 * stopping of the engine, which completes what waits) until hvd__context_leave, and returns
 * the context, or HVD_ERR_SHUT_DOWN (nothing held) when hvd is not initialised. */
hvd_status_t hvd__context_enter(hvd_context_t **ctx_p);
void hvd__context_leave(void);

#endif
