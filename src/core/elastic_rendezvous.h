/* The worker's side of elastic rounds at hvd_init (keys: rendezvous/elastic_msg.h): which round
 * this process is in, and the rank_and_size exchange that moves it to the next one.
 *
 * The first hvd_init of an elastic process joins the round it was started for
 * (HOROVOD_ELASTIC_ROUND) with the launcher's rank variables. Every later one first says why
 * it left its round R (elastic_ready.r<R>/<slot> = failure or update), then waits for its
 * place in round R+1 (elastic_assign.r<R+1>/<slot>), adopts it and checks in at init.r<R+1>.
 * Unlike the rest of the context this state lives as long as the process: hvd_shutdown does
 * not reset it (it is what the next hvd_init continues from). Thread safe. */
#ifndef HVD_CORE_ELASTIC_RENDEZVOUS_H
#define HVD_CORE_ELASTIC_RENDEZVOUS_H

#include <hvd/types.h>

#include "common/params.h"
#include "rendezvous/elastic_msg.h"
#include "rendezvous/store_client.h"

/* Called by hvd_init in elastic mode once the parameters are loaded and the store client
 * exists. First call: the launcher's round and topology stand. Later calls: the exchange
 * above, bounded by HOROVOD_ELASTIC_TIMEOUT + HOROVOD_GLOO_TIMEOUT_SECONDS, after which
 * params' rank, size, local and cross fields are the driver's. Statuses: HVD_ERR_SHUT_DOWN
 * (the slot was removed, or the driver stopped the job: the message says which),
 * HVD_ERR_TIMEOUT (naming the key, the store and the round), HVD_ERR_PROTOCOL (a malformed
 * answer, quoted), store errors. On any error the round does not change. Blocks. */
hvd_status_t hvd__elastic_rdv_enter(hvd_store_client_t *store, hvd_params_t *params);

/* The round this process is in (or was started for). */
int hvd__elastic_rdv_round(void);

/* 1 when the current round's workers must sync their state before training: the driver's
 * flag, the same for every worker of the round (1 for the first round of a process). */
int hvd__elastic_rdv_sync(void);

/* What the next ready record says (default failure); reset to failure once used. */
void hvd__elastic_rdv_set_reason(hvd_elastic_ready_t reason);

/* 1 when the latest hvd__elastic_rdv_enter failed: the driver did not answer, refused the
 * slot or sent garbage, so calling hvd_init again cannot help (a failed check-in can). */
int hvd__elastic_rdv_failed(void);

/* HVD_ERR_PEER_LOST with the driver's text when a check-in scope of round holds the abort
 * key (the round failed before it formed), else HVD_OK. */
hvd_status_t hvd__elastic_rdv_check_abort(const hvd_store_scope_t *scope, int round);

#endif
