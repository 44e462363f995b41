/* Whether another process on this machine is still running: what its threads have run so
 * far and whether one of them waits for a core, read from /proc. A rank waiting for a peer
 * that answered nothing for a whole timeout asks this to tell a peer that is starved of CPU
 * (thousands of ranks on a few cores) from one that is stopped, wedged or gone
 * (core/peer_watch.h). */
#ifndef HVD_OS_PROC_ACTIVITY_H
#define HVD_OS_PROC_ACTIVITY_H

#include <stdint.h>

typedef struct {
    uint64_t run_ns; /* CPU time of all its threads so far (schedstat), ns */
    int runnable;    /* a thread is running or waiting for a core */
    int stopped;     /* a thread is stopped (SIGSTOP, a debugger) */
} hvd_proc_activity_t;

/* Fill *a for process pid. -1 when it is gone, a zombie, or cannot be read. */
int hvd__proc_activity(long pid, hvd_proc_activity_t *a);

/* Whether process pid still runs, judged from two readings: 2 when a thread of it waits for a
 * core, 1 when its threads ran since *run_ns (the last reading; have_last 0: none yet), 0
 * when it is stopped or did not run since, -1 when it is gone or cannot be read (*run_ns is
 * then left as it was). Otherwise *run_ns takes this reading. The one judgement of a silent peer's
 * waits and of a connection that has not yet authenticated. */
int hvd__proc_still_runs(long pid, uint64_t *run_ns, int have_last);

/* This process's pid namespace (the inode of /proc/self/ns/pid), 0 when unknown: a pid a
 * peer reports names the same process here only when both say the same namespace (and the
 * same machine). */
unsigned long hvd__proc_pid_ns(void);

#endif
