/* Static launch: start one process per slot of the plan (runner/launch/workers.h supervises them,
 * locally or over ssh, and tags their output) and end the whole job on the first failure or on
 * a signal. */
#ifndef HVD_RUNNER_LAUNCH_H
#define HVD_RUNNER_LAUNCH_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "runner/rendezvous/kv_server.h"
#include "runner/process/env_list.h"
#include "runner/hosts/hosts.h"
#include "runner/launch/ssh.h"
#include "runner/launch/workers.h"

/* Each rank's own variables take about 250 bytes of a spec (the shared ones count once). */
#define HVD_LAUNCH_SESSION_RANKS 512

typedef struct {
    const hvd_slot_plan_t *plan;
    char *const *command;          /* argv of the user command, NULL-terminated */
    const hvd_env_list_t *exports; /* flag-derived and rendezvous variables for every rank */
    const hvd_secret_t *secret;    /* passed in the environment, never on a command line */
    const char *output_dir;        /* --output-filename, or NULL */
    int prefix_timestamp;          /* --prefix-output-with-timestamp */
    int verbose;                   /* print each worker's command (never the secret) */
    int kill_grace_ms;             /* SIGTERM -> SIGKILL grace period; <= 0: 5000 */
    /* Remote slots (NULL: every slot is on this host): remote[i] != 0 starts slot i on its
     * host through that host's one ssh session, `ssh <ssh options> host '<remote_exe>'
     * --internal-exec` with the spec of all its ranks on ssh's stdin (runner/launch/remote_exec.h),
     * to be run in cwd over there. */
    const unsigned char *remote;
    /* Sessions to remote hosts opened before (NIC discovery's, runner/launch/workers.h): a host's
     * ranks start through its session when there is one. Those used are marked taken. */
    hvd_ready_session_t *ready;
    size_t nready;
    /* Most ranks started through one session (0: HVD_LAUNCH_SESSION_RANKS); a host with more
     * gets several, so that each spec stays well under HVD_EXEC_SPEC_MAX. */
    size_t session_ranks;
    const hvd_ssh_opts_t *ssh;
    const char *remote_exe;
    const char *cwd;
    int out_fd, err_fd; /* where tagged output goes (normally 1 and 2); the
                           launcher's own messages go to err_fd, --verbose
                           command lines to out_fd */
    /* The job's rendezvous store, or NULL. When a rank fails, its cause goes into the check-in
     * scopes the ranks wait in (init.<g>/abort, kv_protocol.h), so that ranks still waiting
     * for it fail at once with that cause instead of at their rendezvous timeout. */
    hvd_kv_server_t *server;
    /* Once some ranks have exited, a remaining rank stopped by a signal for this long is
     * killed and fails the job (runner/launch/stopped_ranks.h); HOROVOD_GLOO_TIMEOUT_SECONDS. */
    int stopped_timeout_s;
} hvd_launch_config_t;

/* Run the job to completion; blocks until every rank's middleman has been reaped and its
 * output drained (every wait inside is bounded; see launch.c for the deadlines).
 *
 * Each rank's environment is horovodrun's own (minus BASH_FUNC_*, OLDPWD*, *CUDA_VISIBLE_DEVICES*
 * and any inherited secret), then cfg->exports, then the slot's variables and the secret, so
 * computed values always win.
 *
 * *exit_code_p is horovodrun's exit status: 0 when every rank exited 0; otherwise the first
 * failing rank's exit code (128 + signal for a signal), after the other ranks were terminated
 * and a report naming that rank, its host, its status and its last stderr lines was written
 * to err_fd; 128 + signal when horovodrun itself got SIGINT, SIGTERM or SIGHUP first.
 * Returns an error status only when the launch itself could not proceed (a rank could not be
 * started: the ranks already started are ended and reaped first; HVD_ERR_IO, HVD_ERR_NO_MEMORY,
 * HVD_ERR_INVALID_ARG for an empty plan or command).
 *
 * The caller must have blocked the signals of hvd__spawn_launcher_signals() in every thread
 * (this function blocks them in the calling thread for its duration, which is enough for a
 * single-threaded caller) and should ignore SIGPIPE, so that a closed console cannot kill it.
 * Not reentrant: one launch at a time per process. */
hvd_status_t hvd__launch_run(const hvd_launch_config_t *cfg, int *exit_code_p);

#endif
