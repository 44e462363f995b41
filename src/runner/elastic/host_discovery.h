/* Elastic mode's host discovery script (docs/running.md, "Elastic jobs"): run the user's
 * script, read `host` or `host:slots` per line from its stdout, and keep the last good answer.
 *
 * Where the reference waits forever and trusts the output, this bounds both: every run has a
 * deadline (its whole process group is killed after it) and an output cap, and malformed lines
 * are rejected with their line number. The script is a shell command line, run by /bin/sh -c
 * as the reference runs it, with horovodrun's environment.
 *
 * A failing run (non-zero exit, killed at the deadline, too much output, a malformed line) is
 * fatal only when no run has succeeded yet: the job cannot start without hosts. Later failures
 * are logged and the last good host set is used, so a flaky script never shrinks the job. */
#ifndef HVD_RUNNER_HOST_DISCOVERY_H
#define HVD_RUNNER_HOST_DISCOVERY_H

#include <hvd/types.h>

#include "runner/hosts/hosts.h"

#include <stddef.h>

#define HVD_DISCOVERY_TIMEOUT_MS 10000
#define HVD_DISCOVERY_OUTPUT_CAP (1024 * 1024)

typedef struct {
    const char *script; /* --host-discovery-script */
    int default_slots;  /* --slots-per-host; 0: every line must give its slots */
    int timeout_ms;     /* each run; <= 0: HVD_DISCOVERY_TIMEOUT_MS */
    size_t output_cap;  /* stdout bytes; 0: HVD_DISCOVERY_OUTPUT_CAP */
} hvd_host_discovery_config_t;

/* One run. *list_p on success (hvd__hosts_fini). Errors name the script and say what went
 * wrong: HVD_ERR_TIMEOUT, HVD_ERR_IO (could not run; non-zero exit or a signal, with the last
 * line it wrote to stderr), HVD_ERR_INVALID_ARG (too much output; a malformed line). */
hvd_status_t hvd__host_discovery_run(const hvd_host_discovery_config_t *cfg,
                                     hvd_host_list_t *list_p);

typedef struct hvd_host_discovery hvd_host_discovery_t;

hvd_status_t hvd__host_discovery_create(const hvd_host_discovery_config_t *cfg,
                                        hvd_host_discovery_t **d_p);
void hvd__host_discovery_destroy(hvd_host_discovery_t *d);

/* Run the script once and return the hosts to use in *list_p (a copy, hvd__hosts_fini): this
 * run's, or after a failed run the last good set (*stale_p = 1, and the failure is logged as a
 * warning). The error of a failed run is returned only when no run has succeeded yet. */
hvd_status_t hvd__host_discovery_poll(hvd_host_discovery_t *d, hvd_host_list_t *list_p,
                                      int *stale_p);

#endif
