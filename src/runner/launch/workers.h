/* The launcher's supervised worker processes: start one per slot (locally under a middleman,
 * or over ssh), forward and tag their output, learn at once when one ends, stop or kill
 * them, and turn SIGINT/SIGTERM/SIGHUP of horovodrun into stopping them all.
 *
 * Policy lives in the callers: the static launch (launch.h) ends the job on the first failure;
 * the elastic driver (elastic_driver.h) records outcomes per round and starts new workers
 * while others run. Both drive the same event loop, hvd__workers_step, from one thread.
 *
 * Each worker runs under a small supervisor process (the "middleman", as in Horovod's
 * safe_shell_exec, os/spawn.h): it leads its own session so that the worker's whole process
 * tree can be signalled, and it ends that tree when horovodrun goes away, even after a
 * SIGKILL of horovodrun (it watches a pipe whose other end only horovodrun holds). */
#ifndef HVD_RUNNER_WORKERS_H
#define HVD_RUNNER_WORKERS_H
#include <hvd/types.h>
#include "crypto/secret.h"
#include "os/spawn.h"
#include "runner/process/env_list.h"
#include "runner/hosts/hosts.h"
#include "runner/launch/ssh.h"
#include <stddef.h>

typedef struct hvd_workers hvd_workers_t;

/* An ssh session to a remote host opened before the launch: NIC discovery's task service,
 * which goes on as that host's supervisor once discovery is done (task_service.h). proc is
 * ssh under a middleman, in_fd our write end of its stdin. A start that uses it sets taken
 * (the pool owns it from then on); the owner ends the others. */
typedef struct {
    const char *host;
    hvd_spawn_t proc;
    int in_fd;
    int taken;
} hvd_ready_session_t;

/* A worker's command ended (raw wait status as os/spawn.h gives it). stopped: the pool was
 * asked to stop or kill it, so its end is not a failure of its own. */
typedef void (*hvd_workers_exit_fn)(void *arg, size_t id, int status, int stopped);

typedef struct {
    char *const *command;          /* argv of the user command, NULL-terminated */
    const hvd_env_list_t *exports; /* flag-derived and rendezvous variables for every worker */
    const hvd_secret_t *secret;    /* passed in the environment, never on a command line */
    const char *output_dir;        /* --output-filename, or NULL */
    int output_np;                 /* ranks counted for the file names' width */
    int prefix_timestamp;          /* --prefix-output-with-timestamp */
    int verbose;                   /* print each worker's command (never the secret) */
    int kill_grace_ms;             /* SIGTERM -> SIGKILL grace period; <= 0: 5000 */
    size_t max_workers;            /* most workers started over the pool's life */
    size_t extra_fds; /* descriptors the launcher needs besides the workers' (the store's) */
    /* Remote workers run under `ssh <options> host '<remote_exe>' --internal-exec`, one
     * session for all the ranks of a start on one host, with their spec on ssh's stdin
     * (runner/launch/remote_exec.h), in cwd over there. */
    const hvd_ssh_opts_t *ssh;
    const char *remote_exe;
    const char *cwd;
    int out_fd, err_fd; /* tagged output (normally 1 and 2); the pool's own messages go to
                           err_fd, --verbose command lines to out_fd */
    hvd_workers_exit_fn on_exit;
    void *arg;
} hvd_workers_config_t;

/* Set up the pool: signal handling (the caller must have blocked the signals of
 * hvd__spawn_launcher_signals() in every thread; the calling thread's mask is saved and
 * restored by destroy) and the environment shared by every worker: horovodrun's own (minus
 * BASH_FUNC_*, OLDPWD*, *CUDA_VISIBLE_DEVICES* and any inherited secret), then cfg->exports.
 * cfg and what it points to must outlive the pool. Errors: HVD_ERR_IO, HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__workers_create(const hvd_workers_config_t *cfg, hvd_workers_t **w_p);
/* Stop and kill what still runs, wait (bounded) for it, and free everything. NULL is a
 * no-op. */
void hvd__workers_destroy(hvd_workers_t *w);

/* Start a worker for slot (copied) with the shared environment, then extra (may be NULL),
 * then the slot's variables and the secret, so computed values always win. remote: over
 * ssh. *id_p: the worker's id (0, 1, ... in start order). Errors name the slot's rank and
 * host: HVD_ERR_IO, HVD_ERR_NO_MEMORY, HVD_ERR_TOO_LARGE (over cfg->max_workers). Does not
 * block. */
hvd_status_t hvd__workers_start(hvd_workers_t *w, const hvd_slot_t *slot, int remote,
                                const hvd_env_list_t *extra, size_t *id_p);
/* Start n workers on one remote host (slots[*].host, all the same) through one ssh session:
 * ready's when given and still running (it is then marked taken), else a new one. ids[k]
 * (may be NULL): the id of slots[k]'s worker. Otherwise as hvd__workers_start. Does not block
 * (beyond writing the spec into ready's pipe): a new session connects while the loop runs
 * (hvd__workers_connecting). */
hvd_status_t hvd__workers_start_remote(hvd_workers_t *w, const hvd_slot_t *slots, size_t n,
                                       const hvd_env_list_t *extra, hvd_ready_session_t *ready,
                                       size_t *ids);
/* Sessions started that have not yet answered (their ssh is still connecting). */
size_t hvd__workers_connecting(const hvd_workers_t *w);
/* Ask a worker to end (SIGTERM to its tree, grace, SIGKILL); its end is reported with
 * stopped = 1. Idempotent. */
void hvd__workers_stop(hvd_workers_t *w, size_t id);
/* Stop every worker that still runs. */
void hvd__workers_stop_all(hvd_workers_t *w);
/* SIGKILL a worker's tree now (a silent worker gets no grace). */
void hvd__workers_kill(hvd_workers_t *w, size_t id);

/* Wait up to timeout_ms for events (output, a worker's end, a signal, hvd__workers_wake) and
 * handle them: on_exit runs from here. Enforces the pool's own deadlines (a middleman that does
 * not end is killed, then given up on). */
void hvd__workers_step(hvd_workers_t *w, int timeout_ms);
/* Make a step return soon; any thread. */
void hvd__workers_wake(hvd_workers_t *w);
/* Workers whose middleman has not been reaped, and whether anything (a middleman or an open
 * output pipe) still needs steps. */
size_t hvd__workers_live(const hvd_workers_t *w);
int hvd__workers_busy(const hvd_workers_t *w);
/* The signal that interrupted horovodrun (every worker is then being stopped), or 0. */
int hvd__workers_interrupted(const hvd_workers_t *w);
/* Whether a worker's process (its middleman) is still there. */
int hvd__workers_running(const hvd_workers_t *w, size_t id);
/* 1 when worker id's command is stopped by a signal (state T: SIGSTOP, SIGTSTP), as seen now
 * (local) or as its host's supervisor last reported (remote, once a second); 0 otherwise.
 * *pid_p: the command's pid, 0 if unknown. */
int hvd__workers_stopped(const hvd_workers_t *w, size_t id, long *pid_p);
/* The slot a worker was started for. */
const hvd_slot_t *hvd__workers_slot(const hvd_workers_t *w, size_t id);
/* Write "<who> was the first to fail: <status>" and the worker's last stderr lines to the
 * pool's err_fd; who names the worker ("rank 3 (host h2)"). */
void hvd__workers_report(const hvd_workers_t *w, size_t id, const char *who);
/* One message line to err_fd, written at once so it never splits a tagged line. */
void hvd__workers_say(const hvd_workers_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* 1 when a variable of horovodrun's environment is not passed to workers: Horovod's
 * BASH_FUNC_.*, OLDPWD and .*CUDA_VISIBLE_DEVICES (matched as re.match does), and an
 * inherited secret (each job has its own). name need not be NUL-terminated. */
int hvd__workers_excluded_name(const char *name, size_t len);

/* 1 as well for every name but the job's own, HOROVOD_* and HVD_*: what an rsh agent's ranks
 * get (ssh.h), who run in another program's environment (a Spark task's: its PATH,
 * PYTHONPATH, JAVA_HOME...), which the launcher's must not overwrite. */
int hvd__workers_not_job_variable(const char *name, size_t len);
#endif
