/* NIC discovery from the launcher's side (docs/running.md, "Across hosts"): start the driver
 * service, start the task service on every host of the job (`horovodrun --internal-task-service`,
 * directly on this machine, over ssh elsewhere, its input with the job secret on stdin), wait for
 * the ring probe to finish within --start-timeout, and end the tasks.
 *
 * A task process that dies early (ssh failed, the program is missing on that host) ends the
 * wait at once with that host's name, exit status and last stderr line, instead of a timeout.
 * On a failed probe the driver's full message (the per-host reachability matrix) is written
 * to err_fd before returning. */
#ifndef HVD_RUNNER_NIC_DISCOVERY_H
#define HVD_RUNNER_NIC_DISCOVERY_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "runner/discovery/discovery.h"
#include "runner/launch/ssh.h"
#include "runner/launch/workers.h"

#include <stddef.h>

/* The option that selects the task program in horovodrun's argv (argv[1]). */
#define HVD_TASK_OPTION "--internal-task-service"

typedef struct {
    const char *const *hosts;    /* every host of the job once, in -H order */
    const unsigned char *remote; /* per host: started over ssh */
    size_t count;
    const hvd_ssh_opts_t *ssh;
    const char *exe; /* horovodrun's path, the same on every host */
    const hvd_secret_t *secret;
    const char *const *nics; /* --network-interface(s) items: names and/or CIDRs */
    size_t nic_count;
    int timeout_s; /* --start-timeout */
    int verbose;   /* Horovod's progress lines, and each task's command, to out_fd */
    int out_fd, err_fd;
    /* When set, a successful discovery keeps the remote hosts' tasks running and hands them
     * over here (malloc'd; end with hvd__ready_sessions_end): each goes on as its host's
     * supervisor, so the launch reuses its ssh session instead of opening another. */
    hvd_ready_session_t **keep_p;
    size_t *nkeep_p;
    /* The task services' ssh sessions stand for the ssh check (hvd__ssh_check_hosts), which
     * then need not open sessions of its own: ssh failing to reach a host is retried as the
     * check retries it, and reported in the check's words ("ssh not successful for host H:"
     * and ssh's output to err_fd, the error "could not connect to some hosts via ssh: H"). */
    int ssh_check;
    /* The network check (horovodrun --check-network): every host probes every other, and
     * the matrix (discovery.h) goes to out_fd whether or not every link works; the status
     * is HVD_ERR_NOT_FOUND when no interface works on every link. */
    int mesh;
} hvd_nic_discovery_config_t;

/* Run discovery; *result_p on success (hvd__disc_result_fini). Statuses as
 * hvd__driver_wait's, plus HVD_ERR_IO when a task could not be started. Blocks at most
 * timeout_s plus a few seconds to end the tasks. */
hvd_status_t hvd__nic_discovery_run(const hvd_nic_discovery_config_t *cfg,
                                    hvd_disc_result_t *result_p);

/* End the kept sessions a launch did not take (bounded: stop, grace, kill), close their fds and
 * free the array. NULL is a no-op. */
void hvd__ready_sessions_end(hvd_ready_session_t *sessions, size_t n);

#endif
