/* NIC discovery, task side: the program horovodrun starts on every host of a job (Horovod's
 * task_fn; docs/running.md, "Across hosts") as `horovodrun --internal-task-service`, with its
 * input blob (discovery_msg.h: secret, index, n, driver addresses and port, nics filter, timeout)
 * on stdin.
 *
 * Task i: starts its own service (answering PINGs as "task service #i"), probes every driver
 * address in parallel and registers with the driver through the first that answered, listing
 * its host's addresses that pass the filter and the driver addresses it reached; polls the
 * driver every 100 ms for the addresses of task (i+1) % n; probes all of them in parallel
 * (a PING must come back from the right service, and the source address that service saw
 * must be this host's address on the interface of the same name, or in the same CIDR when
 * the filter names networks); reports what it reached; then keeps serving until the driver
 * says every report is in, so that its predecessor can finish probing it. Every step has the
 * deadline of the blob's timeout. */
#ifndef HVD_RUNNER_TASK_SERVICE_H
#define HVD_RUNNER_TASK_SERVICE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* Seconds the program waits for its input on stdin (ssh may be slow to connect). */
#define HVD_TASK_INPUT_TIMEOUT_S 120

/* Run the task for the input blob buf[0..len) (the whole blob, header included). Blocks
 * until the driver says every task reported, or the blob's timeout. Returns HVD_OK when this
 * task registered, probed its successor and reached at least one of its addresses;
 * otherwise an error whose hvd_last_error() names this host and what failed (which host
 * and address could not be reached, what timed out): HVD_ERR_PROTOCOL (bad blob),
 * HVD_ERR_TIMEOUT, HVD_ERR_PEER_LOST (driver unreachable), HVD_ERR_NOT_FOUND (no address
 * passes the filter, or no address of the successor was reached), HVD_ERR_IO. Thread safe:
 * tests run several tasks as threads of one process. */
hvd_status_t hvd__task_service_run(const uint8_t *buf, size_t len);

/* The task program: read the blob from stdin (bounded size, HVD_TASK_INPUT_TIMEOUT_S), run
 * it, and return the exit code: 1 after writing one line to stderr saying what failed. On
 * success it goes on as the host's supervisor (runner/launch/remote_exec.h) on the same input and
 * output, so that the launcher can start the host's ranks through the ssh session discovery
 * already opened; the input ending first ends it with 0. */
int hvd__task_service_main(void);

#endif
