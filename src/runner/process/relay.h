/* Running one command as horovodrun's own child and passing its output through unchanged:
 * the supervisor of a remote rank (runner/launch/remote_exec.h) and `horovodrun --mpi`, which runs
 * mpirun (mpirun tags the ranks' lines itself).
 *
 * The command runs under the middleman (os/spawn.h), so its whole tree ends when it is
 * stopped, and when this process dies. It is stopped (SIGTERM, grace, SIGKILL) on SIGINT,
 * SIGTERM or SIGHUP to this process, when writing its output to our stdout or stderr fails
 * (whoever reads them is gone), and, with stop_on_stdin_eof, when our stdin ends. */
#ifndef HVD_RUNNER_RELAY_H
#define HVD_RUNNER_RELAY_H

#include <hvd/types.h>

typedef struct {
    char *const *argv;
    char *const *envp;
    int grace_ms;          /* SIGTERM -> SIGKILL; <= 0: 5000 */
    int stop_on_stdin_eof; /* our stdin ending means the one who started us is gone */
} hvd_relay_config_t;

/* Blocks until the command's tree is gone and its output copied (bounded: a tree that does
 * not end is killed, output held open by an escaped process is given up 2 s after).
 * *exit_code_p: the command's exit code, or 128 + signal. Errors only when the command could
 * not be started (HVD_ERR_IO, HVD_ERR_NO_MEMORY). Blocks the signals it handles in the
 * calling thread for good; the caller must be single-threaded or have blocked them too. */
hvd_status_t hvd__relay_run(const hvd_relay_config_t *cfg, int *exit_code_p);

#endif
