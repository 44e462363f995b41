/* Starting and ending a rank's process tree.
 *
 * Each rank runs under a supervisor process (the "middleman", as in Horovod's
 * safe_shell_exec), forked from the launcher without exec. The middleman starts its own
 * session, becomes a child subreaper (so daemonised descendants are reparented to it), runs
 * the command in a process group of its own, and then waits for one of: the command's exit,
 * or the launcher's word to stop. The word is the launcher shutting down its end of a control
 * socket (or writing a byte to it); the same end-of-file is seen when the launcher dies, even
 * by SIGKILL, because only the launcher holds that end, so a rank's tree never outlives its
 * launcher. To stop, the middleman sends SIGTERM to everything in the tree (the command's
 * process group, its own session, and every descendant found in /proc), waits the grace
 * period, then SIGKILLs what is left and reaps it.
 *
 * Over the control socket the middleman reports the command's pid right after starting it and
 * the command's raw wait status as soon as the command ends (before it cleans up what the
 * command left behind, so a failure is known at once). It then exits with the command's exit
 * code, or 128 + signal when the command was killed by a signal.
 *
 * Everything the middleman needs is prepared before fork; after fork it uses only system
 * calls (no malloc, no stdio, no locks), because the launcher has other threads.
 *
 * The launcher must block SIGCHLD (and any signal it reads with signalfd) in every thread;
 * the command starts with an empty signal mask and default signal dispositions. */
#ifndef HVD_OS_SPAWN_H
#define HVD_OS_SPAWN_H

#include <hvd/types.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    char *const *argv; /* argv[0] is looked up in the PATH of envp (like `env` does) */
    char *const *envp; /* the command's whole environment (NULL: empty) */
    int grace_ms;      /* SIGTERM -> SIGKILL; <= 0 means HVD_SPAWN_DEFAULT_GRACE_MS */
    long nofile_soft;  /* soft RLIMIT_NOFILE the command starts with; 0: inherit */
    /* What the command reads on stdin (NULL: /dev/null). The bytes are put in a pipe before
     * the command starts, and the middleman keeps the pipe's write end open for as long as it
     * lives, so the command sees end of file only when its supervision ends: an ssh client
     * forwards that end of file to the remote side, which ends the remote rank. At most
     * HVD_SPAWN_STDIN_MAX bytes. */
    const void *stdin_data;
    size_t stdin_len;
    /* With stdin_data: when non-NULL, receives a second write end of that pipe (non-blocking,
     * close-on-exec, the caller's to close) for writing more after the start; the command's
     * input still ends only when the middleman and the caller have both closed theirs. */
    int *stdin_writer_p;
} hvd_spawn_config_t;

#define HVD_SPAWN_STDIN_MAX (1024 * 1024)

#define HVD_SPAWN_DEFAULT_GRACE_MS 5000

typedef struct {
    pid_t pid;         /* the middleman */
    pid_t cmd_pid;     /* the command, once reported (0 before) */
    int out_fd;        /* command's stdout, read end, non-blocking, close-on-exec */
    int err_fd;        /* command's stderr, read end, non-blocking, close-on-exec */
    int ctl_fd;        /* control socket: readable when the middleman reports */
    int stop_sent;     /* hvd__spawn_stop was called */
    int reported;      /* the command's final status arrived: cmd_status is valid */
    int cmd_status;    /* the command's raw wait status */
    int ctl_eof;       /* the middleman closed its end (it is exiting or gone) */
    int reaped;        /* the middleman was reaped: mm_status is valid */
    int mm_status;     /* the middleman's raw wait status */
    int64_t kill_sent; /* hvd__spawn_kill time (monotonic ms), 0 if not */
} hvd_spawn_t;

/* Start the middleman and, under it, the command. A command that cannot be executed exits
 * 127 (not found) or 126 (found but not executable) after writing
 * "horovodrun: cannot execute 'X': <reason>" to its stderr pipe. The caller owns the fds
 * (hvd__spawn_close) and must reap the middleman (hvd__spawn_reap). Does not block.
 * HVD_ERR_INVALID_ARG for an empty argv; HVD_ERR_NO_MEMORY; HVD_ERR_IO if a pipe or fork
 * fails. On error nothing is left behind. */
hvd_status_t hvd__spawn_start(const hvd_spawn_config_t *cfg, hvd_spawn_t *proc_p);

/* Ask the middleman to end the tree (SIGTERM, grace, SIGKILL). Idempotent, does not block. */
void hvd__spawn_stop(hvd_spawn_t *proc);

/* Backstop for a middleman that does not finish: SIGKILL it and the command's process group
 * (the command also gets SIGKILL from the kernel when its middleman dies). Idempotent. */
void hvd__spawn_kill(hvd_spawn_t *proc);

/* Read what the middleman reported so far (call when ctl_fd is readable; never blocks).
 * Updates cmd_pid, reported/cmd_status and ctl_eof. Returns 1 when the final status arrived
 * in this call, 0 otherwise. */
int hvd__spawn_read_report(hvd_spawn_t *proc);

/* Reap the middleman if it has exited (waitpid on its pid only, never blocks). Returns 1
 * when it was reaped (now or before): reaped/mm_status are then valid. */
int hvd__spawn_reap(hvd_spawn_t *proc);

/* The command's raw wait status as best known: the reported one, else the middleman's own
 * (a middleman killed from outside reports nothing). Valid once reported or reaped. */
int hvd__spawn_status(const hvd_spawn_t *proc);

/* 1 when the command (its main process) is stopped by a signal (SIGSTOP, SIGTSTP, ...: state
 * T in /proc/<pid>/stat), 0 when it runs, sleeps, has ended, is unknown or is stopped by a
 * debugger (state t: someone is looking at it, which is not a rank left behind). */
int hvd__spawn_cmd_stopped(const hvd_spawn_t *proc);

/* Close the launcher's fds of a rank (idempotent). */
void hvd__spawn_close(hvd_spawn_t *proc);

/* The signals a launcher reads through a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP); they must
 * be blocked in every thread of the launcher. */
void hvd__spawn_launcher_signals(sigset_t *set_p);

/* Exit code for a raw wait status: the code, or 128 + signal. */
int hvd__spawn_exit_code(int wait_status);

/* "exit code N" or "killed by signal N (SIGNAME)" for a raw wait status. */
void hvd__spawn_describe_status(int wait_status, char *out, size_t out_size);

#endif
