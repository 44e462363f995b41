/* ssh: the command line every remote launch uses, and the start-up check that every remote
 * host can be reached.
 *
 * Always non-interactive: BatchMode (never a password or passphrase prompt that would hang the
 * launch), no password authentication, no host key prompt (as Horovod). Keepalives make a
 * connection to a host that was cut off fail within HVD_SSH_ALIVE_S instead of TCP's minutes.
 * `ssh` is looked up in PATH, so an ssh config or wrapper there applies (user@host, jump hosts,
 * per-host ports all work through ~/.ssh/config). */
#ifndef HVD_RUNNER_SSH_H
#define HVD_RUNNER_SSH_H

#include <hvd/types.h>

#include <stddef.h>

#define HVD_SSH_ALIVE_INTERVAL_S 5
#define HVD_SSH_ALIVE_COUNT 6
#define HVD_SSH_ALIVE_S (HVD_SSH_ALIVE_INTERVAL_S * HVD_SSH_ALIVE_COUNT)
/* The reachability check: attempts per host (Horovod's 5) and each one's connect timeout. */
#define HVD_SSH_CHECK_ATTEMPTS 5
#define HVD_SSH_CHECK_CONNECT_S 10
/* Pause before another attempt. */
#define HVD_SSH_RETRY_PAUSE_MS 300

typedef struct {
    int port;              /* -p; 0: ssh's default */
    const char *identity;  /* -i; NULL: ssh's default */
    int connect_timeout_s; /* -o ConnectTimeout; 0: none */
    /* Inside a Slurm allocation (runner/slurm/slurm_alloc.h): reach a host with `srun --nodes=1
     * --ntasks=1 --nodelist=HOST --overlap ...` instead of ssh, a step of the allocation with
     * the same stdin/stdout channel; no reachability check (Slurm vouches for its nodes). */
    int srun;
    /* A program that stands in for ssh (horovodrun --internal-rsh-agent: horovod.spark's rsh):
     * its words, split at spaces, then the host and the remote command, as mpirun runs its
     * plm_rsh_agent. None of ssh's options, and no reachability check: the agent answers for
     * its hosts. NULL: ssh (or srun). */
    const char *agent;
} hvd_ssh_opts_t;

/* argv for `ssh <options> host remote_command` (NULL-terminated, malloc'd; free with
 * hvd__ssh_argv_free). remote_command is one string that the remote login shell runs. */
hvd_status_t hvd__ssh_argv(const hvd_ssh_opts_t *opts, const char *host, const char *remote_command,
                           char ***argv_p);
void hvd__ssh_argv_free(char **argv);

/* The same for running program (a path, quoted for the remote shell) with one option
 * (a plain word): how horovodrun starts itself on another host (through srun when
 * opts->srun: program and option are then srun's command, no shell). */
hvd_status_t hvd__ssh_argv_program(const hvd_ssh_opts_t *opts, const char *host,
                                   const char *program, const char *option, char ***argv_p);

/* Append s to out quoted for a POSIX shell as Python's shlex.quote does (unchanged when it is
 * made only of safe characters). Returns the length it needs (like snprintf). */
size_t hvd__shell_quote(const char *s, char *out, size_t out_size);

/* Run `ssh ... host true` on every host at once, each up to HVD_SSH_CHECK_ATTEMPTS times
 * (retrying only failures that can pass: not "Permission denied" or an unknown host name),
 * all within timeout_s. verbose prints Horovod's progress lines and one line per host with
 * its time to out_fd. On failure every failed host's ssh output is written to err_fd as
 * "ssh not successful for host H:\n<output>", and the error is HVD_ERR_IO naming the hosts. */
/* Whether ssh's output (its own words) shows a failure that another attempt cannot fix: a
 * refused key, an unknown host name, a changed host key. */
int hvd__ssh_failure_is_permanent(const char *out, size_t len);
/* "ssh not successful for host H:" and ssh's output to fd, with a hint for a refused key. */
void hvd__ssh_say_failure(int fd, const char *host, const char *out, size_t len);

hvd_status_t hvd__ssh_check_hosts(const hvd_ssh_opts_t *opts, const char *const *hosts,
                                  size_t count, int timeout_s, int verbose, int out_fd, int err_fd);

#endif
