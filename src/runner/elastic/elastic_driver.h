/* horovodrun's elastic mode (docs/running.md, "Elastic jobs"): discover hosts, start workers on
 * their slots, and carry the job from one world ("round") to the next when workers fail or hosts
 * come and go.
 *
 * The driver talks to workers only through the job's authenticated rendezvous store, with the
 * keys of rendezvous/elastic_msg.h. In short:
 *  - it starts a worker per slot of round R with HOROVOD_ELASTIC=1 and HOROVOD_ELASTIC_ROUND=R;
 *  - every worker ends round R exactly once (worker_registry.h): READY (it re-initialises:
 *    a ready record in the store), SUCCESS (exit 0) or FAILURE (exit != 0, or declared dead:
 *    no heartbeat for the silence timeout). A failure is known at once because the driver
 *    supervises every process; it then tells the round's survivors (abort keys) so that their
 *    pending collectives fail now instead of at their timeout, and blacklists the host;
 *  - when every worker has ended the round, the reference's rules decide: stop on a success,
 *    stop when all failed or no host is left or the reset limit is reached, else the next
 *    round: wait (up to the elastic timeout) for min_np slots, plan ranks over the hosts in
 *    the host manager's stable order (rank 0 stays on the oldest surviving host), answer each
 *    survivor with its new place (or `removed`), start workers for new slots only, and tell
 *    everyone whether to sync state (one decision for all; the reference's per-rank skip_sync
 *    could deadlock);
 *  - host changes found by discovery during a round are announced to its workers, who reset
 *    at their next commit.
 * Every wait has a deadline, and the messages name the workers and hosts waited for. */
#ifndef HVD_RUNNER_ELASTIC_DRIVER_H
#define HVD_RUNNER_ELASTIC_DRIVER_H
#include <hvd/types.h>
#include "os/netif.h"
#include "runner/rendezvous/kv_server.h"
#include "runner/elastic/host_discovery.h"
#include "runner/hosts/hosts.h"
#include "runner/launch/workers.h"

/* How often discovery runs (Horovod's DISCOVER_HOSTS_FREQUENCY_SECS). */
#define HVD_ELASTIC_DISCOVERY_INTERVAL_MS 1000
/* A discovered host that did not answer ssh is tried again after this long. */
#define HVD_ELASTIC_SSH_RETRY_MS 10000
/* Most workers started over a job's life. */
#define HVD_ELASTIC_MAX_WORKERS 65536

typedef struct {
    /* Hosts: the discovery script's (script != NULL), else the fixed list (-H/--hostfile). */
    const hvd_host_discovery_config_t *script;
    const hvd_host_list_t *fixed;
    int discovery_interval_ms;              /* <= 0: HVD_ELASTIC_DISCOVERY_INTERVAL_MS */
    int initial_np;                         /* round 0 waits for this many slots (-np) */
    int min_np, max_np;                     /* later rounds for min_np; max_np < 0: no cap */
    int reset_limit;                        /* < 0: unlimited */
    int elastic_timeout_s;                  /* wait for min_np slots */
    int cooldown_lower_s, cooldown_upper_s; /* both 0: blacklisted for good */
    int start_timeout_s;                    /* a new worker's first heartbeat */
    int silence_timeout_s;                  /* later heartbeats (HOROVOD_GLOO_TIMEOUT_SECONDS) */
    hvd_kv_server_t *server;                /* the job's store, started */
    /* How workers run: command, environment, output (on_exit, arg and max_workers are the
     * driver's own). */
    const hvd_workers_config_t *workers;
    const hvd_netif_t *ifs; /* this machine's interfaces: which hosts are local */
    size_t nifs;
    /* Remote hosts already checked over ssh; other remote hosts are checked when discovery
     * first lists them, and left out while they do not answer. */
    const char *const *verified;
    size_t nverified;
    int verbose;
} hvd_elastic_config_t;

/* Run the elastic job to its end. *exit_code_p: 0 when it completed (every worker of the
 * last round exited 0); otherwise 1 or the first failing worker's code after a report on
 * err_fd (the reset limit, every worker failed, no hosts left, not enough slots within the
 * elastic timeout, a discovery script that never worked); 128 + signal when interrupted.
 * Returns an error only when the driver itself could not run (HVD_ERR_NO_MEMORY, HVD_ERR_IO).
 * The caller blocks the launcher signals in every thread first (workers.h). */
hvd_status_t hvd__elastic_run(const hvd_elastic_config_t *cfg, int *exit_code_p);
#endif
