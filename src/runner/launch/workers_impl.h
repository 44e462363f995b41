/* The worker pool's insides (workers.h is its interface), shared by its four files:
 * workers_env.c (each worker's environment and the --verbose command line), workers_io.c
 * (the event loop: pipes, signals, frames, deadlines), workers_start.c (starting local
 * workers and remote host sessions) and workers.c (create, destroy and the queries). One epoll
 * set holds every pipe and control socket, tagged with its owner's index, plus the signalfd
 * and a wake eventfd. */
#ifndef HVD_RUNNER_LAUNCH_WORKERS_IMPL_H
#define HVD_RUNNER_LAUNCH_WORKERS_IMPL_H

#include "runner/launch/workers.h"

#include "os/spawn.h"
#include "runner/launch/exec_wire.h"
#include "runner/launch/output.h"
#include "runner/process/env_list.h"

#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>

/* A middleman asked to stop that is still running this long after its grace period is
 * SIGKILLed (with its command's process group). */
#define BACKSTOP_MS 5000
/* A middleman SIGKILLed this long ago and still not reaped (stuck in the kernel) is given up
 * on, so that horovodrun always ends. */
#define ABANDON_MS 5000
/* After a middleman is reaped, output still in its pipes is drained for at most this long (a
 * process that escaped the tree could hold a pipe open forever). */
#define DRAIN_MS 2000
/* Reaping does not rely on SIGCHLD alone: look at least this often. */
#define REAP_TICK_MS 1000
#define READ_CHUNK 65536
/* How long destroy waits for workers it stops (grace + backstop + abandon cover the rest). */
#define DESTROY_TICK_MS 100

/* Event tags: a worker's or a session's index shifted left, and which of its fds is ready. */
enum { EV_OUT = 0, EV_ERR = 1, EV_CTL = 2, EV_S_OUT = 3, EV_S_ERR = 4, EV_S_CTL = 5 };
#define EV_SHIFT 3
#define EV_SIGNAL UINT64_MAX
#define EV_WAKE (UINT64_MAX - 1)

/* One ssh session running every rank of one start on one remote host, under `horovodrun
 * --internal-exec` over there (remote_exec.h): frames come back on ssh's stdout
 * (exec_wire.h), ssh's own messages on its stderr, stop/kill commands go out on its stdin. */
typedef struct {
    hvd_spawn_t proc; /* ssh, under a middleman */
    int in_fd;        /* our write end of ssh's stdin */
    char *host;
    size_t *ids, n; /* its workers' ids, by index in the session */
    size_t left;    /* of them not ended yet */
    hvd_exec_reader_t rx;
    hvd_output_stream_t err; /* tagged as the session's first rank */
    int out_open, err_open, ctl_open;
    int ready;    /* READY came (or ssh ended): no longer connecting */
    int finished; /* ssh ended and its workers were ended */
    int gone;     /* its middleman reaped or given up on */
    int64_t stop_ms, idle_ms;
} session_t;

typedef struct {
    hvd_slot_t slot; /* host owned */
    /* A local worker's middleman. A remote worker has no process here: its status is filled
     * in from its session's frames, and kill_sent is when KILL was sent for it. */
    hvd_spawn_t proc;
    session_t *s;   /* remote: its host session, else NULL */
    uint32_t index; /* in that session */
    hvd_output_stream_t out, err;
    int out_open, err_open, ctl_open; /* registered with epoll */
    int handled;                      /* final status passed to on_exit */
    int stopped;                      /* we asked it to stop: its exit is not a cause */
    int remote_stopped;               /* remote: its command is stopped by a signal (STATE) */
    long remote_pid;                  /* remote: its command's pid over there (STATE), or 0 */
    int gone;                         /* middleman reaped or given up on */
    int64_t stop_ms, gone_ms;
} worker_t;

struct hvd_workers {
    const hvd_workers_config_t *cfg;
    worker_t **w;
    size_t n, cap;
    session_t **sessions;
    size_t ns, scap;
    size_t sessions_live; /* ssh middlemen not gone */
    size_t connecting;    /* sessions started that did not say READY yet */
    int epfd, sfd, wakefd;
    sigset_t old_mask;
    int grace_ms;
    long nofile_soft; /* the limit workers start with, when we raised ours; 0 otherwise */
    struct rlimit saved_nofile;
    int raised_nofile;
    int stopping;    /* every worker was asked to stop */
    int interrupted; /* signal that interrupted horovodrun, 0 if none */
    size_t live;     /* workers started and not gone */
    size_t open_streams;
    int need_reap;
    int64_t last_reap_ms;
    char *rbuf;
    hvd_env_list_t base; /* environment shared by every worker */
};

/* environment (workers_env.c) */
hvd_status_t hvd__wk_build_base_env(hvd_workers_t *w);
int hvd__wk_is_slot_name(const char *entry);
void hvd__wk_print_command(const hvd_workers_t *w, char *const *ssh_argv,
                           const hvd_env_list_t *vars, const hvd_env_list_t *extra);
hvd_status_t hvd__wk_slot_env(const hvd_workers_t *w, const hvd_slot_t *slot, hvd_env_list_t *vars);
void hvd__wk_wipe_env(hvd_env_list_t *vars);

/* the event loop (workers_io.c) */
void hvd__wk_enforce_deadlines(hvd_workers_t *w);
int hvd__wk_watch(hvd_workers_t *w, int fd, uint64_t tag);
int hvd__wk_watch_proc(hvd_workers_t *w, const hvd_spawn_t *proc, size_t i, int first_kind,
                       int *out_open, int *err_open, int *ctl_open);
void hvd__wk_session_stop(session_t *s);

/* starting (workers_start.c) */
void hvd__wk_session_free(session_t *s);
void hvd__wk_worker_free(worker_t *r);

#endif
