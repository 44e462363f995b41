/* Static launch on the local host: start one process per slot of the plan, forward and tag
 * their output, supervise them, and end the whole job on the first failure or on a signal.
 *
 * Each rank runs under a small supervisor process (the "middleman", as in Horovod's
 * safe_shell_exec): it leads its own session so that the rank's whole process tree can be
 * signalled, and it ends that tree when horovodrun goes away, even after a SIGKILL of
 * horovodrun (it watches a pipe whose other end only horovodrun holds). */
#ifndef HVD_RUNNER_LAUNCH_H
#define HVD_RUNNER_LAUNCH_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "runner/env_list.h"
#include "runner/hosts.h"

typedef struct {
    const hvd_slot_plan_t *plan;
    char *const *command;          /* argv of the user command, NULL-terminated */
    const hvd_env_list_t *exports; /* flag-derived and rendezvous variables for every rank */
    const hvd_secret_t *secret;    /* passed in the environment, never on a command line */
    const char *output_dir;        /* --output-filename, or NULL */
    int prefix_timestamp;          /* --prefix-output-with-timestamp */
    int verbose;                   /* print each worker's command (never the secret) */
    int kill_grace_ms;             /* SIGTERM -> SIGKILL grace period */
    int out_fd, err_fd;            /* where tagged output goes (normally 1 and 2) */
} hvd_launch_config_t;

/* Run the job to completion. *exit_code_p is horovodrun's exit status: 0 when every rank
 * exited 0; otherwise the first failing rank's exit code (128 + signal for a signal), after
 * the other ranks were terminated and a report naming that rank, its status and its last
 * stderr lines was written to err_fd; 128 + signal when horovodrun itself got SIGINT or
 * SIGTERM. Returns an error status only when the launch itself could not proceed. */
hvd_status_t hvd__launch_run(const hvd_launch_config_t *cfg, int *exit_code_p);

#endif
