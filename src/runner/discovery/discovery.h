/* NIC discovery, driver side (docs/running.md, "Across hosts"): which network interfaces
 * connect all hosts of a job, found by the hosts themselves.
 *
 * The launcher starts the driver service, then one task program per host (horovodrun
 * --internal-task-service, task_service.h), feeding each its input blob on stdin. Task i
 * registers its addresses with the driver, asks for the addresses of task (i+1) % n, probes
 * every one of them in parallel with an authenticated PING whose source address must lie on
 * the matching interface of its own host, and reports what it reached. The common interfaces
 * are the keys (nic_filter.h: interface names, or CIDRs when the filter names networks)
 * reached on every link of the ring, ordered as on the first host.
 *
 * Differences from the reference, for complaints of Horovod's users:
 * the wire is authenticated per connection (runner/service/service.h) and the secret travels on
 * stdin; the filter may name networks; a failure prints the per-host reachability matrix;
 * a timeout names the hosts it still waits for; a dead task process stops the wait at once
 * (check callback); the driver also picks the address every task reached it on, for the
 * rendezvous server. */
#ifndef HVD_RUNNER_DISCOVERY_H
#define HVD_RUNNER_DISCOVERY_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "os/netif.h"
#include "runner/discovery/discovery_msg.h"
#include "runner/discovery/nic_filter.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const hvd_secret_t *secret; /* required; copied */
    const char *const *hosts;   /* n host names as the user wrote them, in -H order */
    size_t host_count;          /* n >= 1 */
    const char *const *nics;    /* --network-interface(s) items (names and/or CIDRs) */
    size_t nic_count;           /* 0: no filter */
    int timeout_s;              /* --start-timeout: the tasks' deadline, quoted by errors */
    const char *bind_addr;      /* NULL or "": every IPv4 address of this host */
    /* The network check (horovodrun --check-network; 2 hosts or more): every task probes
     * every other on each address, and hvd__driver_wait's result is the reachability matrix,
     * in hvd__driver_message whether or not every link works (HVD_OK when an interface works
     * on every link, HVD_ERR_NOT_FOUND when none does); the result names the interfaces that
     * do, and no hosts. */
    int mesh;
} hvd_driver_config_t;

typedef struct {
    char host[HVD_DISC_HOST_MAX];          /* as the user wrote it */
    char host_hash[HVD_HOST_HASH_MAX];     /* host_hash.h, as the task computed it */
    char iface[HVD_DISC_IFACE_MAX];        /* this host's interface of the first common key */
    char addr[16];                         /* its address there, reached by the predecessor */
    char driver_iface[HVD_DISC_IFACE_MAX]; /* the task's interface its REGISTER came from;
                                            "" when the source was none of its addresses */
} hvd_disc_host_t;

typedef struct {
    char nics[HVD_DISC_MAX_ADDRS][HVD_NIC_KEY_MAX]; /* common keys, ordered as on host 0 */
    size_t nic_count;                               /* >= 1 on success */
    hvd_disc_host_t *hosts;                         /* host_count entries, in -H order; owned */
    size_t host_count;
    char driver_addr[16]; /* the driver address every task reached (for the rendezvous) */
    char driver_iface[HVD_DISC_IFACE_MAX];
} hvd_disc_result_t;

/* Abort check for hvd__driver_wait: return non-zero, with a one-line reason in msg, when
 * the wait should stop (typically: a task process exited, and why). */
typedef int (*hvd_driver_check_fn)(void *arg, char *msg, size_t msg_size);

typedef struct hvd_driver hvd_driver_t;

/* Validate the configuration (the nics filter: HVD_ERR_INVALID_ARG naming the bad item),
 * list this host's addresses and start the driver service on an ephemeral port. Statuses:
 * HVD_ERR_INVALID_ARG, HVD_ERR_IO, HVD_ERR_NO_MEMORY. *driver_p only on success. */
hvd_status_t hvd__driver_start(const hvd_driver_config_t *cfg, hvd_driver_t **driver_p);

/* The addresses the driver advertises (every IPv4 address of this host that is up, or
 * bind_addr) and its port. Owned by the driver; never block. */
const hvd_netif_t *hvd__driver_addrs(const hvd_driver_t *d, size_t *count_p);
int hvd__driver_port(const hvd_driver_t *d);

/* Everything task index needs, as the blob to write to its stdin (discovery_msg.h): the
 * secret, index, n, the driver's addresses and port, the nics filter and the timeout. The
 * caller releases *buf_p with hvd__disc_input_free (which wipes the secret). Statuses:
 * HVD_ERR_INVALID_ARG (index out of range), HVD_ERR_NO_MEMORY. Thread safe. */
hvd_status_t hvd__driver_task_input(const hvd_driver_t *d, size_t index, uint8_t **buf_p,
                                    size_t *len_p);

/* Wait until every task has registered, reported its probe and been told it is done, then
 * compute the result. Calls check(arg, ...) about every 100 ms from this thread (NULL: no
 * check). Blocks until then, deadline_ms, or an abort. Statuses:
 *  HVD_ERR_TIMEOUT  "Timed out waiting for <activity>. Please check connectivity between
 *                   servers. You may need to increase the --start-timeout parameter if you
 *                   have too many servers. Timeout after N seconds." and the hosts (name and
 *                   index) still waited for;
 *  HVD_ERR_PEER_LOST  the check callback's reason;
 *  HVD_ERR_NOT_FOUND  no common interface, or no driver address reached by every task: the
 *                   message holds the per-host reachability matrix.
 * The full message (hvd_last_error() keeps its first 1 KiB) is hvd__driver_message().
 * On success the caller owns *result_p (hvd__disc_result_fini). One thread at a time. */
hvd_status_t hvd__driver_wait(hvd_driver_t *d, int64_t deadline_ms, hvd_driver_check_fn check,
                              void *arg, hvd_disc_result_t *result_p);

/* The untruncated message of the last failed hvd__driver_wait ("" if none); owned by the
 * driver, valid until the next wait or stop. */
const char *hvd__driver_message(const hvd_driver_t *d);

/* How many tasks have registered and reported so far (for progress messages). Thread safe. */
void hvd__driver_progress(hvd_driver_t *d, size_t *registered_p, size_t *reported_p);

/* Stop the service (joining its threads) and free the driver. Tasks still polling it get
 * connection errors. NULL is ignored. */
void hvd__driver_stop(hvd_driver_t *d);

void hvd__disc_result_fini(hvd_disc_result_t *r);

/* One-line text form of a result, for the start-up cache (cache.h), and its parser.
 * Format errors are HVD_ERR_PROTOCOL; *r_p only on success (release with _fini). */
hvd_status_t hvd__disc_result_format(const hvd_disc_result_t *r, char **text_p);
hvd_status_t hvd__disc_result_parse(const char *text, hvd_disc_result_t *r_p);

#endif
