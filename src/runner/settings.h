/* horovodrun's command line: every flag of Horovod's launcher (reference section 1), parsed
 * the way argparse does it (any unambiguous prefix of a long option, --opt value and
 * --opt=value, the first non-option token starts the user command), merged with
 * --config-file (a flag given on the command line always wins), validated, and turned into
 * the HOROVOD_* variables exported to the workers. */
#ifndef HVD_RUNNER_SETTINGS_H
#define HVD_RUNNER_SETTINGS_H

#include <hvd/types.h>

#include "common/params.h"
#include "runner/env_list.h"

typedef enum {
    HVD_CONTROLLER_DEFAULT = 0, /* neither flag: the built-in path */
    HVD_CONTROLLER_GLOO,
    HVD_CONTROLLER_MPI,
    HVD_CONTROLLER_JSRUN
} hvd_controller_t;

typedef struct {
    /* what to do */
    int show_help, show_help_env, show_version, show_check_build, dry_run;
    /* job shape */
    int num_proc;                 /* -np; -1 when not given */
    const char *hosts;            /* -H, or NULL */
    const char *hostfile;         /* --hostfile, or NULL */
    const char *discovery_script; /* --host-discovery-script, or NULL */
    char **command;               /* the user command (points into argv), NULL-terminated */
    /* launch */
    int start_timeout; /* seconds */
    const char *output_dir;
    int prefix_timestamp, verbose, disable_cache;
    const char *config_file;
    char **nics; /* --network-interface(s), deduplicated, in order given */
    size_t nic_count;
    int ssh_port; /* 0: ssh's default */
    const char *ssh_identity_file;
    hvd_controller_t controller;
    const char *mpi_args, *binding_args;
    /* elastic (elastic is set by --min-np or --host-discovery-script) */
    int elastic, min_np, max_np, slots_per_host, elastic_timeout, reset_limit;
    int cooldown_min, cooldown_max; /* 0 when not given */
    /* the launcher's own log level (--log-level, else HOROVOD_LOG_LEVEL) */
    hvd_log_level_t log_level;
    int log_hide_time;
    /* variables exported to every worker because a flag or the config file set them */
    hvd_env_list_t exports;
} hvd_settings_t;

/* Parse argv (argv[0] is the program). launcher_env supplies defaults (start and elastic
 * timeouts, log level). On HVD_ERR_INVALID_ARG the message names the flag or value at fault
 * and *settings is left empty. The settings borrow strings from argv. */
hvd_status_t hvd__settings_parse(int argc, char **argv, const hvd_params_t *launcher_env,
                                 hvd_settings_t *settings);

void hvd__settings_fini(hvd_settings_t *settings);

/* Python's str(float) for the exported float values: the shortest text that reads back to
 * the same double, with ".0" when it would otherwise look like an integer ("20.0", "2.5"). */
void hvd__settings_format_float(double value, char *out, size_t out_size);

#endif
