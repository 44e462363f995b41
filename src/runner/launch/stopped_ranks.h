/* Ranks left behind once the others have exited (issue 32): a job whose ranks have partly
 * exited normally, with some still there, ends only when those end too. A rank that is
 * stopped (SIGSTOP, SIGTSTP: it can make no progress on its own) would keep horovodrun, and
 * the operator's reservation, waiting for ever, as Horovod and mpirun do. So, once at least
 * one rank of the job has exited:
 *
 *  - a remaining rank seen stopped is named at once ("rank 1 (host h, pid p) is stopped;
 *    every other rank has exited"), and if it stays stopped for the timeout
 *    (HOROVOD_GLOO_TIMEOUT_SECONDS) it is killed and the job fails naming it; a SIGCONT
 *    before then cancels this;
 *  - a remaining rank that runs (a long checkpoint write after the others finished is
 *    legitimate) is never killed for this; every 30 s horovodrun says which ranks it still
 *    waits for, so that a user sees why the job has not ended.
 *
 * Only the policy lives here; the caller (the static launch, the elastic driver) says which
 * workers are the job's ranks and how many have exited, and the ops say what a worker's
 * state is and act on it (hvd__stopped_ranks_workers_ops: the real worker pool). */
#ifndef HVD_RUNNER_STOPPED_RANKS_H
#define HVD_RUNNER_STOPPED_RANKS_H

#include "runner/hosts/hosts.h"
#include "runner/launch/workers.h"

#include <stddef.h>
#include <stdint.h>

/* How often horovodrun says which remaining ranks it waits for. */
#define HVD_STOPPED_RANKS_REPORT_MS 30000

typedef struct {
    int (*running)(void *arg, size_t id);              /* its process is still there */
    int (*stopped)(void *arg, size_t id, long *pid_p); /* hvd__workers_stopped */
    const hvd_slot_t *(*slot)(void *arg, size_t id);   /* its rank and host */
    void (*say)(void *arg, const char *line);          /* one message line, no newline */
    void (*kill)(void *arg, size_t id);                /* SIGKILL its tree */
    void *arg;
} hvd_stopped_ranks_ops_t;

typedef struct {
    int64_t timeout_ms;
    int64_t *since; /* by worker id: when it was first seen stopped (this time), 0: it is not */
    size_t cap;
    int watching;                         /* a rank has exited */
    int64_t next_report_ms, last_look_ms; /* valid while watching */
} hvd_stopped_ranks_t;

void hvd__stopped_ranks_init(hvd_stopped_ranks_t *s, int timeout_s);
void hvd__stopped_ranks_fini(hvd_stopped_ranks_t *s);

/* Look at the job's remaining ranks: workers ids[0..n) (NULL: ids 0..n-1; those no longer
 * running are skipped) of a job of total ranks, of which exited have exited (nothing happens
 * while that is 0). Call after every step of the event loop (it is cheap: one /proc read per
 * remaining local rank, four times a second at most). Returns the id of a worker it killed
 * for staying stopped for the timeout, or -1; the caller then fails the job naming that rank.
 * Out of memory, a rank is simply not watched. */
long hvd__stopped_ranks_check(hvd_stopped_ranks_t *s, const hvd_stopped_ranks_ops_t *ops,
                              const size_t *ids, size_t n, size_t exited, size_t total,
                              int64_t now_ms);

/* Ops over a worker pool (messages go to the pool's err_fd with a "horovodrun: " prefix). */
hvd_stopped_ranks_ops_t hvd__stopped_ranks_workers_ops(hvd_workers_t *w);

#endif
