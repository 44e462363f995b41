/* The elastic agent: one thread per elastic worker process, from its first hvd_init until
 * the process exits (it outlives hvd_shutdown/hvd_init, which is why it has its own store
 * client and its own state rather than the context's). It
 *   - PUTs the heartbeat elastic_alive/<slot> = pid every second, so the driver can tell a
 *     silent worker (stopped, hung in the kernel, partitioned) from a slow one;
 *   - long-polls elastic_ev.r<R>/ for the round the process is in (one more key than it has
 *     seen, at most a second per request): `abort` interrupts the engine of that round, so
 *     collectives waiting for a dead or silent peer fail at once instead of after
 *     HOROVOD_GLOO_TIMEOUT_SECONDS; `hosts` sets the flag the next commit turns into
 *     HVD_ERR_HOSTS_UPDATED.
 * Store errors are logged at debug level and retried; nothing here blocks the process or its
 * exit (the thread is stopped and joined by an atexit handler, its requests cancelled). */
#ifndef HVD_CORE_ELASTIC_AGENT_H
#define HVD_CORE_ELASTIC_AGENT_H

#include <hvd/types.h>

#include "crypto/secret.h"

typedef struct hvd_engine hvd_engine_t;

/* Start the agent for slot (host:local_rank) against the store at addr:port, watching
 * round. silence_s is the driver's heartbeat deadline (HOROVOD_GLOO_TIMEOUT_SECONDS): a
 * heartbeat may take up to a third of it to get through. Idempotent: later calls (every
 * hvd_init) return HVD_OK at once. Copies its arguments. HVD_ERR_NO_MEMORY, HVD_ERR_IO when
 * the thread or its descriptor cannot be made. */
hvd_status_t hvd__elastic_agent_start(const char *addr, int port, const hvd_secret_t *secret,
                                      const char *slot, int round, int silence_s);

/* The round the process is in now (hvd_init, before checking in). */
void hvd__elastic_agent_set_round(int round);

/* The engine of round (hvd_init, once it runs): an abort of that round interrupts it, also
 * one the agent saw before this call. The engine must stay alive until
 * hvd__elastic_agent_detach returns. No-op when the agent is not running. */
void hvd__elastic_agent_attach(hvd_engine_t *engine, int round);
/* Forget the engine (hvd_shutdown, before destroying it): once this returns the agent no
 * longer touches it. */
void hvd__elastic_agent_detach(void);

/* 1 when the driver announced a host change during round. */
int hvd__elastic_agent_hosts_updated(int round);

#endif
