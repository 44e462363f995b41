/* horovodrun's command line: every flag of Horovod's launcher (docs/reference.md, "`horovodrun`"),
 * parsed the way argparse does it, merged with --config-file, validated, and turned into the
 * HOROVOD_* variables exported to the workers.
 *
 * Argparse behaviours kept: --opt value and --opt=value; any unambiguous prefix of a --long
 * option (--slots -> --slots-per-host; an ambiguous one is an error listing the candidates);
 * single-dash long options (-np, -cb, -hostfile, -prefix-timestamp), and a value attached to
 * a one-letter option (-p2222); a value may start with '-' only if it is a negative number
 * or holds a space; the first argument that is not an option starts the user command, and
 * every later argument belongs to it.
 * Changes: "--" also ends the options (and is dropped); --prefix-output-with-timestamp
 * combines with the log timestamp flags; --thread-affinity takes a comma list; -np is not
 * needed with --host-discovery-script; values are checked against the bounds the workers
 * accept (the HOROVOD_* table), so a job never starts with a value every rank would reject.
 * Precedence (as in Horovod): a value from --config-file is used only when no flag for the
 * same setting appears anywhere on the command line. */
#ifndef HVD_RUNNER_SETTINGS_H
#define HVD_RUNNER_SETTINGS_H

#include <hvd/types.h>

#include "common/params.h"
#include "runner/process/env_list.h"

typedef enum {
    HVD_CONTROLLER_DEFAULT = 0, /* no --gloo/--mpi/--jsrun and no config `controller` */
    HVD_CONTROLLER_GLOO,        /* --gloo, or `controller: gloo` */
    HVD_CONTROLLER_MPI,         /* --mpi, or `controller: mpi` */
    HVD_CONTROLLER_JSRUN        /* --jsrun */
} hvd_controller_t;

typedef struct {
    /* Print-and-exit modes. When one is set the other fields may be unset: -np and the
     * command are not required, and the config file is not read. */
    int show_help;        /* -h, --help */
    int show_help_env;    /* --help-env: the HOROVOD_* table */
    int show_version;     /* -v, --version */
    int show_check_build; /* -cb, --check-build */
    int dry_run;          /* --dry-run: print the slot plan, one line per rank, and exit */
    int check_network;    /* --check-network: probe every pair of hosts, print the matrix, exit */

    /* Job shape. At most one of hosts, hostfile and discovery_script is set; with none the
     * job runs on localhost:<num_proc>. */
    int num_proc;                 /* -np/--num-proc, >= 1; -1 when not given (print modes, or
                                     elastic with a discovery script and no --min-np) */
    const char *hosts;            /* -H/--hosts text, not yet parsed (hosts.h), or NULL */
    const char *hostfile;         /* -hostfile/--hostfile path, or NULL */
    const char *discovery_script; /* --host-discovery-script path, or NULL */
    char **command; /* the user command: points into argv, NULL-terminated (argv[argc] is NULL
                       as main() receives it); NULL only in print-and-exit modes and with
                       --check-network (which runs no command) */

    /* Launch. */
    int start_timeout;       /* --start-timeout, else HOROVOD_START_TIMEOUT (30); seconds >= 1 */
    const char *output_dir;  /* --output-filename: DIR/rank.N/{stdout,stderr}, or NULL */
    int prefix_timestamp;    /* -prefix-timestamp/--prefix-output-with-timestamp */
    int verbose;             /* --verbose */
    int disable_cache;       /* --disable-cache */
    const char *config_file; /* --config-file path (already applied), or NULL */
    char **nics;             /* --network-interface(s): deduplicated, in the order given; owned */
    size_t nic_count;        /* 0: discover the interfaces */
    int ssh_port;            /* -p/--ssh-port in [1, 65535]; 0: ssh's default */
    const char *ssh_identity_file; /* -i/--ssh-identity-file, or NULL */
    /* --internal-rsh-agent "PROGRAM [ARG...]" (words split at spaces), or NULL: reach every
     * host through this program instead of ssh, as mpirun's plm_rsh_agent (horovod.spark's
     * rsh, which runs the command in the host's Spark task). Host names are then only names
     * (host hashes), never resolved; see ssh.h. Not in --help: for horovod.spark. */
    const char *rsh_agent;
    hvd_controller_t controller; /* --gloo/--mpi/--jsrun or the config's `controller` */
    const char *mpi_args;        /* --mpi-args text for mpirun, or NULL */
    const char *binding_args;    /* --binding-args text for mpirun, or NULL */
    int tcp;                     /* --tcp (also exported as NCCL_IB_DISABLE=1) */

    /* Elastic. elastic is set by --min-np or --host-discovery-script (not by --max-np alone,
     * as in the reference); the other fields are parsed and checked in every mode. */
    int elastic;
    int min_np;          /* --min-np/--min-num-proc; defaults to num_proc (1 when that is -1) */
    int max_np;          /* --max-np/--max-num-proc; -1: no cap */
    int slots_per_host;  /* --slots-per-host, >= 1; 0 when not given */
    int elastic_timeout; /* --elastic-timeout, else HOROVOD_ELASTIC_TIMEOUT (600); seconds */
    int gloo_timeout;    /* --gloo-timeout-seconds, else HOROVOD_GLOO_TIMEOUT_SECONDS (30) */
    int reset_limit;     /* --reset-limit, >= 0; -1: unlimited */
    int cooldown_min, cooldown_max; /* --blacklist-cooldown-range, 1 <= MIN <= MAX <= 3600;
                                       both 0 when not given (blacklisted for good) */

    /* The launcher's own logging: --log-level / --log-with(out)-timestamp or the config file,
     * else HOROVOD_LOG_LEVEL / HOROVOD_LOG_HIDE_TIME from the launcher's environment. */
    hvd_log_level_t log_level;
    int log_hide_time;

    /* Variables exported to every worker because a flag or the config file set them, with
     * the reference's names and value formats. Nothing is here for an absent flag, so a
     * variable set in the launcher's environment passes through unchanged. Owned. */
    hvd_env_list_t exports;
} hvd_settings_t;

/* Parse argv (argv[0] is the program; argv[argc] must be NULL). launcher_env supplies the
 * defaults that come from the launcher's own environment (start and elastic timeouts, log
 * level and timestamps). Reads --config-file when given; warns (HVD_LOG_W) about deprecated
 * flags and unknown config keys. Does not block except to read the config file; not
 * thread-safe (it reports through the calling thread's last error).
 * Returns HVD_OK, HVD_ERR_INVALID_ARG (the message names the flag or config key and value at
 * fault, in a form fit for "horovodrun: error: <message>") or HVD_ERR_NO_MEMORY. On error
 * *settings is zeroed. The settings borrow strings from argv, which must outlive them. */
hvd_status_t hvd__settings_parse(int argc, char **argv, const hvd_params_t *launcher_env,
                                 hvd_settings_t *settings);

/* Free what the settings own; safe on zeroed settings. */
void hvd__settings_fini(hvd_settings_t *settings);

/* Python's str(float) for the exported float values: the shortest text that reads back to
 * the same double, positional with at least one decimal for magnitudes in [1e-4, 1e16)
 * ("20.0", "2.5", "0.0001"), exponent form otherwise ("1e-05", "1e+16"). */
void hvd__settings_format_float(double value, char *out, size_t out_size);

#endif
