/* Starved or dead (peer_watch.h). */
#include "core/peer_watch.h"

#include "common/error.h"
#include "common/log.h"
#include "core/context.h"
#include "os/proc_activity.h"

#include <stdlib.h>
#include <string.h>

/* The peer's pid, when its record says it runs on this machine in this pid namespace (so
 * that the pid names it here), else 0. After a planned check-in the record is read now: one
 * request, only for a peer that was silent for a whole timeout. */
static long watchable_pid(hvd_context_t *c, int rank) {
    hvd_rank_info_t info;
    if (hvd__check_in_record(c, rank, &info) != HVD_OK) {
        hvd__error_clear();
        return 0;
    }
    int here = c->check_in.pid_ns && info.pid_ns == c->check_in.pid_ns &&
               strcmp(info.machine, c->check_in.machine) == 0;
    return here && info.pid > 0 ? info.pid : 0;
}

int hvd__peer_watch_progressing(void *arg, int rank) {
    hvd_context_t *c = arg;
    if (!c->watch || rank < 0 || rank >= c->params.size)
        return 0;
    hvd_peer_watch_t *w = &c->watch[rank];
    if (!w->looked) {
        w->pid = watchable_pid(c, rank);
        w->looked = 1;
    }
    if (w->pid <= 0)
        return 0;
    int runs = hvd__proc_still_runs(w->pid, &w->run_ns, w->looked == 2);
    if (runs < 0)
        return 0;
    w->looked = 2;
    if (!runs)
        return 0;
    HVD_LOG_D("rank %d: rank %d (pid %ld) has sent nothing for a timeout but still runs (%s); "
              "waiting on",
              c->params.rank, rank, w->pid, runs == 2 ? "waiting for a core" : "it ran since");
    return 1;
}
