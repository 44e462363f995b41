/* Is a silent peer starved or dead? A rank whose wait saw nothing move for a whole
 * HOROVOD_GLOO_TIMEOUT_SECONDS asks, before it fails, whether the peers it waits for are
 * processes on this machine that still run: a thread of theirs waits for a core, or their
 * threads ran since the last look (a rank waiting for another wakes every 100 ms to look
 * around). Such a peer is slow, not lost (2,048 ranks on 2 cores leave every rank seconds
 * between turns), and the wait goes on; a stopped peer (SIGSTOP, a debugger), a wedged one
 * (all its threads blocked) or one that is gone fails the wait as before, within one more
 * look. A peer on another machine, or whose process this rank cannot see (another pid
 * namespace), is never assumed alive. */
#ifndef HVD_CORE_PEER_WATCH_H
#define HVD_CORE_PEER_WATCH_H

#include <stdint.h>

struct hvd_context;

typedef struct {
    long pid;        /* the peer's process here; 0: not watchable */
    int looked;      /* 1 once pid was worked out; 2 once run_ns holds a reading */
    uint64_t run_ns; /* its threads' CPU time at the last look */
} hvd_peer_watch_t;

/* The transport's question (hvd_tcp_config_t.progressing; arg: the context): 1 when rank is
 * a process of this machine that ran since the last call or waits for a core, 0 when it is
 * stopped, did not run, is gone or cannot be watched. Called from the thread of the wait. */
int hvd__peer_watch_progressing(void *arg, int rank);

#endif
