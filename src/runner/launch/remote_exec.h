/* The supervisor of a remote host's ranks: `horovodrun --internal-exec`.
 *
 * horovodrun reaches each remote host through one ssh session, `ssh ... HOST '<horovodrun>'
 * --internal-exec`, and writes on ssh's stdin the spec of every rank it runs there
 * (runner/launch/exec_wire.h): the launcher's working directory, the variables shared by the ranks
 * and each rank's own (the job secret among them, so it is never on a command line), and the
 * command. The supervisor changes to that directory, starts each rank under its own middleman
 * (os/spawn.h, as a local rank), and from then on runs one event loop (no thread per rank):
 * the ranks' stdout and stderr go back as frames on its stdout, which ssh carries to the
 * launcher, where they are tagged; each rank's exit status goes back as soon as it is known;
 * stop and kill commands for single ranks come in on its stdin.
 *
 * Why a supervisor at all: ssh without a terminal does not signal the remote command when the
 * connection goes away, so a rank that writes nothing would run on forever after horovodrun
 * died. The supervisor treats the end of its stdin (the launcher's middleman holds the other
 * end; ssh forwards its closing, and sshd closes it when the connection drops), a failed write
 * to its stdout and SIGTERM/SIGINT/SIGHUP as "the launcher is gone" and stops every rank's
 * tree (SIGTERM, the spec's grace period, SIGKILL). If the supervisor itself is killed, each
 * rank's middleman sees its control socket close and ends the rank's tree. */
#ifndef HVD_RUNNER_REMOTE_EXEC_H
#define HVD_RUNNER_REMOTE_EXEC_H

/* The option that selects the supervisor in horovodrun's argv (argv[1]). */
#define HVD_EXEC_OPTION "--internal-exec"

/* Read the spec from stdin (bounded by a deadline), run the ranks, and return once every rank
 * has ended and its output was sent: 0. A spec that cannot be read is reported on stderr and
 * returns 126 (the launcher then takes that code for each of the host's ranks). */
int hvd__remote_exec_main(void);

#endif
