/* The rendezvous store's predefined scopes for a slot plan: global, local_<host> and
 * cross_<local_rank>, sized from the plan so that "finished" DELETEs can clear them
 * (rendezvous/kv_protocol.h). The launcher declares them once; the elastic driver at every
 * round. */
#ifndef HVD_RUNNER_STORE_SCOPES_H
#define HVD_RUNNER_STORE_SCOPES_H
#include <hvd/types.h>
#include "runner/rendezvous/kv_server.h"
#include "runner/hosts/hosts.h"

/* Clear the store and declare the plan's scopes (hvd__kv_server_reset); with plan_key, also
 * publish the plan itself for the ranks' check-in (rendezvous/rank_plan.h) under
 * plan/<plan_key>. */
hvd_status_t hvd__store_scopes_declare(hvd_kv_server_t *server, const hvd_slot_plan_t *plan,
                                       const char *plan_key);
#endif
