/* `horovodrun --mpi`: hand the job to the MPI installation's own launcher.
 *
 * Three steps, each its own function so each can be checked without an MPI installation:
 *
 * 1. Which MPI is installed: `mpirun --version` (looked up in the PATH of the job's
 *    environment, as the shell that runs the final command will look it up) is run with a
 *    deadline, because a broken mpirun (a wrapper waiting for a license server, a stale NFS
 *    mount) must not hang the launcher before anything has started. Its exit status and text
 *    give the implementation.
 * 2. The mpirun command line: one string for `/bin/sh -c`, laid out exactly as Horovod lays it
 *    out (users compare it with the reference's --verbose output and with what they would type
 *    themselves), with each implementation's spelling of the same intent: which hosts, how
 *    many ranks, no process binding, which network interfaces, where output goes. Variables
 *    reach the ranks by NAME only (`-x NAME` for Open MPI and Spectrum MPI; MPICH and Intel MPI
 *    pass the whole environment by default): values travel in mpirun's own environment and
 *    never on a command line that `ps` shows to every user, which is how the job's secret
 *    gets to the ranks.
 * 3. Running it: `/bin/sh -c <command>` as horovodrun's child under the relay
 * (runner/process/relay.h), not by replacing horovodrun as Horovod does with execve, because
 * horovodrun keeps serving the rendezvous store while mpirun runs. mpirun tags the ranks' lines
 * itself, so its output is passed through unchanged and its exit code becomes horovodrun's. */
#ifndef HVD_RUNNER_MPI_RUN_H
#define HVD_RUNNER_MPI_RUN_H

#include "runner/process/env_list.h"
#include "runner/hosts/hosts.h"

#include <hvd/types.h>

#include <stddef.h>

typedef enum {
    HVD_MPI_OPENMPI = 0,
    HVD_MPI_SPECTRUM,
    HVD_MPI_MPICH,
    HVD_MPI_INTEL,
    HVD_MPI_UNKNOWN, /* mpirun ran and succeeded, but its text names no MPI we know */
    HVD_MPI_MISSING  /* mpirun could not be run, failed, or did not finish in time */
} hvd_mpi_impl_t;

/* How long `mpirun --version` may take before it is killed and MPI counts as missing. */
#define HVD_MPI_DETECT_TIMEOUT_MS 10000
/* How much of its output is kept (the name is in the first line). */
#define HVD_MPI_DETECT_OUTPUT_CAP 8192
/* At this many hosts Open MPI's tree spawn over ssh breaks down (Horovod's threshold). */
#define HVD_MPI_LARGE_CLUSTER_HOSTS 64

/* The implementation named by `mpirun --version`'s text (exit_ok: it exited 0). A failed run
 * is MISSING whatever it printed. The most specific names are checked first (Spectrum MPI and
 * Intel MPI derive from Open MPI and MPICH, and their text may mention those too); on
 * Horovod's tested texts this gives Horovod's answers. Pure; output may be NULL. */
hvd_mpi_impl_t hvd__mpi_impl_parse(int exit_ok, const char *output);

/* "Open MPI", "IBM Spectrum MPI", "MPICH", "Intel(R) MPI", "unknown MPI", "no MPI". */
const char *hvd__mpi_impl_name(hvd_mpi_impl_t impl);

/* What to tell a user whose mpirun is UNKNOWN or MISSING (one paragraph, no newline). */
const char *hvd__mpi_not_found_text(void);

/* Run `mpirun --version` with envp as its whole environment (NULL: empty), mpirun found in
 * envp's PATH (without one: /bin:/usr/bin), stdin /dev/null, stdout and stderr captured
 * together. Blocks for at most timeout_ms (<= 0: HVD_MPI_DETECT_TIMEOUT_MS); then it and
 * everything it started are killed. output (may be NULL) receives what it printed, at most
 * cap - 1 bytes and NUL-terminated; when the result is MISSING a last line says why (not in
 * PATH, could not be started, its exit status, or the deadline), and the thread's last error
 * says the same. Not thread-safe with other code that reaps children with waitpid(-1). */
hvd_mpi_impl_t hvd__mpi_detect_timeout(char *const *envp, int timeout_ms, char *output, size_t cap);

/* hvd__mpi_detect_timeout with HVD_MPI_DETECT_TIMEOUT_MS. */
hvd_mpi_impl_t hvd__mpi_detect(char *const *envp, char *output, size_t cap);

typedef struct {
    hvd_mpi_impl_t impl;
    int np; /* -np */
    /* -H for Open MPI and Spectrum MPI, as the user wrote it. NULL: made from hosts, or
     * "localhost:<np>" when there are none. */
    const char *hosts_text;
    /* The parsed hosts: their number (large-cluster flags), names (-hosts) and slots (-ppn).
     * NULL or empty: localhost with np slots. */
    const hvd_host_list_t *hosts;
    int ssh_port;             /* 0: none */
    const char *ssh_identity; /* NULL: none */
    /* horovodrun --internal-rsh-agent (horovod.spark's rsh): Open MPI and Spectrum MPI start
     * their daemons through it (-mca plm_rsh_agent), instead of ssh; MPICH's and Intel MPI's
     * launchers take one program without arguments, so they are refused. NULL: ssh. */
    const char *rsh_agent;
    /* Network interfaces the ranks must use, given by the user or found by discovery. */
    const char *const *nics;
    size_t nic_count;
    int nics_from_user;       /* MPICH and Intel MPI are told (-iface) only the user's choice */
    const char *output_dir;   /* --output-filename; NULL: none */
    int prefix_timestamp;     /* --prefix-output-with-timestamp */
    int tcp;                  /* --tcp */
    const char *binding_args; /* --binding-args text (Open MPI, Spectrum MPI); NULL: default */
    const char *mpi_args;     /* --mpi-args text, appended as written; NULL: none */
    /* Names of the variables the ranks must get (Open MPI, Spectrum MPI: `-x NAME`, emitted
     * in byte order whatever the order here). Names only: the values stay in the
     * environment given to hvd__mpi_run. */
    const char *const *env_names;
    size_t env_name_count;
    char *const *argv; /* the user's command, NULL-terminated, non-empty */
} hvd_mpi_config_t;

/* Build the mpirun command for c->impl (one string for `/bin/sh -c`):
 *   mpirun BASIC -np N{PPN}HOSTS BINDING IMPL_FLAGS SSH TCP_IFACE NCCL_IFACE OUTPUT ENV EXTRA CMD
 * with a single space between pieces, kept when a piece is empty, as Horovod does. The user's
 * command words are quoted for the shell; hosts, interface names and the output directory are
 * quoted only when they hold characters the shell would interpret (never for ordinary
 * values), the ssh identity file is escaped for the double quotes it sits in; --binding-args
 * and --mpi-args are flag text and go in as written. *cmd_p is malloc'd (the caller frees
 * it). HVD_ERR_INVALID_ARG for UNKNOWN or MISSING, np < 1, an empty command, unequal slots per
 * host or more than one user-given interface with MPICH or Intel MPI (messages as Horovod's);
 * HVD_ERR_NO_MEMORY. Pure, thread-safe. */
hvd_status_t hvd__mpi_command(const hvd_mpi_config_t *c, char **cmd_p);

/* mpirun's own environment: base (NULL: empty), plus PATH and PYTHONPATH from launcher_env
 * when base lacks them (mpirun and the ranks' interpreter must be found as on the launcher;
 * base's value wins when both have one). *env_p is initialised here (the caller finis it).
 * HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__mpi_env(char *const *base, char *const *launcher_env, hvd_env_list_t *env_p);

/* Run `/bin/sh -c cmd` with envp (see hvd__mpi_env) under the relay: output passed through
 * to our stdout and stderr unchanged, stopped (with its whole tree) on SIGINT, SIGTERM or
 * SIGHUP to this process. Blocks until it ends; the relay's bounds apply (runner/process/relay.h).
 * *exit_code_p: mpirun's exit code, or 128 + signal. Blocks SIGCHLD, SIGINT, SIGTERM and
 * SIGHUP in the calling thread for good (the caller must be single-threaded or have blocked
 * them everywhere). HVD_ERR_IO or HVD_ERR_NO_MEMORY when it could not be started. */
hvd_status_t hvd__mpi_run(const char *cmd, char *const *envp, int *exit_code_p);

#endif
