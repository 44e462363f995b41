/* Starting and ending a rank's process tree.
 *
 * Each rank runs under a supervisor process (the "middleman", as in Horovod's
 * safe_shell_exec), forked from the launcher without exec. The middleman starts its own
 * session, becomes a child subreaper (so daemonised descendants are reparented to it), runs
 * the command in a process group of its own, and then waits for one of: the command's exit,
 * or the launcher's word to stop. The word is the launcher shutting down its end of a
 * socket pair, which also happens when the launcher dies, even by SIGKILL, so a rank's tree
 * never outlives its launcher. To stop, the middleman sends SIGTERM to everything in the
 * tree, waits the grace period, then SIGKILLs what is left. Over the same socket it reports
 * the command's pid right after starting it and its raw wait status at the end.
 *
 * The launcher must block SIGCHLD (and any signal it reads with signalfd) in every thread;
 * the command starts with an empty signal mask and default signal dispositions. */
#ifndef HVD_OS_SPAWN_H
#define HVD_OS_SPAWN_H

#include <hvd/types.h>

#include <signal.h>
#include <sys/types.h>

typedef struct {
    char *const *argv; /* argv[0] is looked up in PATH */
    char *const *envp; /* the command's whole environment */
    int grace_ms;      /* SIGTERM -> SIGKILL */
} hvd_spawn_config_t;

typedef struct {
    pid_t pid;     /* the middleman */
    pid_t cmd_pid; /* the command, once reported (0 before) */
    int out_fd;    /* command's stdout, read end, non-blocking */
    int err_fd;    /* command's stderr, read end, non-blocking */
    int ctl_fd;    /* control socket: readable when the middleman reports */
    int stop_sent;
} hvd_spawn_t;

/* Start the middleman and, under it, the command. A command that cannot be executed exits
 * 127 after writing "horovodrun: cannot execute 'X': <reason>" to its stderr pipe. The caller
 * owns the fds and must reap the middleman. HVD_ERR_IO if a pipe or fork fails. */
hvd_status_t hvd__spawn_start(const hvd_spawn_config_t *cfg, hvd_spawn_t *proc_p);

/* Ask the middleman to end the tree (idempotent). */
void hvd__spawn_stop(hvd_spawn_t *proc);

/* Read what the middleman reported so far from ctl_fd (call when it is readable). Sets
 * proc->cmd_pid; when the final report arrived, sets *status_p to the command's raw wait
 * status and returns 1; returns 0 otherwise (-1 on EOF without a final report). */
int hvd__spawn_read_report(hvd_spawn_t *proc, int *status_p);

/* Close the fds of a finished rank. */
void hvd__spawn_close(hvd_spawn_t *proc);

/* The signals a launcher reads through a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP); they must
 * be blocked in every thread of the launcher. */
void hvd__spawn_launcher_signals(sigset_t *set_p);

/* Exit code for a raw wait status: the code, or 128 + signal. */
int hvd__spawn_exit_code(int wait_status);

#endif
