/* The elastic driver's record of how each worker of a round ended it, and the decision that
 * follows once every worker has (Horovod's rules; docs/running.md, "Elastic jobs").
 *
 * A round is one world: the workers of one slot plan. Each records exactly one outcome:
 * READY (it re-initialises and waits for the next round: a survivor), SUCCESS (its process
 * exited 0) or FAILURE (exited non-zero, or the driver declared it dead). A READY worker
 * whose process then fails becomes FAILURE (it cannot join the next round); every other
 * change is refused, so nothing is counted twice.
 *
 * The reference waits for the last record on a barrier without a deadline; here the registry
 * only counts, and the driver owns the deadlines (a silent worker is declared FAILURE).
 *
 * Thread safety: none; the driver's loop is its only user. */
#ifndef HVD_RUNNER_WORKER_REGISTRY_H
#define HVD_RUNNER_WORKER_REGISTRY_H
#include <hvd/types.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    HVD_WORKER_PENDING = 0, /* nothing recorded yet this round */
    HVD_WORKER_READY,
    HVD_WORKER_SUCCESS,
    HVD_WORKER_FAILURE,
} hvd_worker_state_t;

typedef struct {
    char *host;
    int local_rank;
    hvd_worker_state_t state;
} hvd_registry_slot_t;

typedef struct {
    int round; /* 0 for the first world, +1 per reset */
    hvd_registry_slot_t *slots;
    size_t count, recorded;
} hvd_worker_registry_t;

/* What the driver does once every worker has recorded (Horovod's rules, in this order). */
typedef enum {
    HVD_ROUND_STOP_SUCCESS,     /* a worker succeeded: the job is complete */
    HVD_ROUND_STOP_ALL_FAILED,  /* every worker failed */
    HVD_ROUND_STOP_BLACKLISTED, /* every recorded worker's host is now blacklisted */
    HVD_ROUND_RESUME,           /* blacklist the failed hosts and start the next round */
} hvd_round_outcome_t;

void hvd__registry_init(hvd_worker_registry_t *r);
void hvd__registry_fini(hvd_worker_registry_t *r);
/* Start round `round` with count slots (hosts copied), all PENDING. HVD_ERR_NO_MEMORY leaves the
 * registry empty. */
hvd_status_t hvd__registry_reset(hvd_worker_registry_t *r, int round, const char *const *hosts,
                                 const int *local_ranks, size_t count);
/* Record state for slot i. Returns 1 when recorded, 0 when the transition is refused (see
 * above). */
int hvd__registry_record(hvd_worker_registry_t *r, size_t i, hvd_worker_state_t state);
/* Every slot has an outcome. */
bool hvd__registry_complete(const hvd_worker_registry_t *r);
size_t hvd__registry_count(const hvd_worker_registry_t *r, hvd_worker_state_t state);
/* The decision for a complete round. blacklisted(host) says whether a host is blacklisted
 * after the failed hosts were (the driver blacklists them first, RESUME or not). */
hvd_round_outcome_t hvd__registry_outcome(const hvd_worker_registry_t *r,
                                          bool (*blacklisted)(void *arg, const char *host),
                                          void *arg);
const char *hvd__registry_state_name(hvd_worker_state_t state);
#endif
