/* The elastic driver's view of the hosts (docs/running.md, "Elastic jobs"): which discovered
 * hosts may run workers, in which order ranks are assigned to them, and which are blacklisted.
 *
 * Why it exists: each discovery poll gives a host -> slots map; the driver needs to know
 * whether that changed in a way workers must hear about (a host removed, added, or both), and
 * a stable assignment order so that rank 0, which holds the state every new worker is synced
 * from, stays on the oldest surviving host. Hosts whose workers failed are blacklisted, for
 * the life of the job or, with a cooldown range, for an exponentially growing period after
 * which they come back if discovery still lists them.
 *
 * Decisions where the reference is accidental:
 *  - Newly available hosts are appended in discovery order, not in set iteration order, so
 *    the assignment is deterministic.
 *  - A blacklisted host leaves the assignment order at once; when its cooldown ends it
 *    comes back at the end, behind the hosts that did not fail.
 *  - The update flags compare the available view before and after the poll (blacklisted
 *    hosts excluded on both sides), so a blacklisted host that disappears or changes slots
 *    is not reported as a change, and blacklisting alone is never reported (the driver
 *    reacts to the failure itself). A resurrected host is reported as ADDED.
 *  - The cooldown formula is the reference's code, not its docs: after the c-th blacklisting
 *    (c counted from 1) the period is L * 2^c + u * L seconds, u uniform in [0, 1), clamped to
 *    [L, U]. The first period therefore lasts 2L..3L, the second 4L..5L, and so on up to U.
 *
 * Time is a parameter (milliseconds on any monotonic clock, hvd__clock_now_ms() in the driver)
 * and the random source is injectable, so tests never sleep.
 *
 * Thread safety: none; the driver calls every function under its own lock. */
#ifndef HVD_RUNNER_HOST_MANAGER_H
#define HVD_RUNNER_HOST_MANAGER_H

#include <hvd/types.h>

#include "runner/hosts/hosts.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest host name accepted, and most hosts known at once (discovered or remembered because
 * they were blacklisted); beyond them calls fail with HVD_ERR_TOO_LARGE. */
#define HVD_HOST_MANAGER_NAME_MAX 255
#define HVD_HOST_MANAGER_HOSTS_MAX 65536

/* What an update changed in the available view; a flag set (MIXED = REMOVED | ADDED). */
typedef enum {
    HVD_HOST_UPDATE_NONE = 0,
    HVD_HOST_UPDATE_REMOVED = 1, /* a host disappeared or lost slots */
    HVD_HOST_UPDATE_ADDED = 2,   /* a new host, more slots, or a host back from its cooldown */
    HVD_HOST_UPDATE_MIXED = 3,
} hvd_host_update_t;

/* Returns a number uniform in [0, 1); values outside are clamped. */
typedef double (*hvd_host_random_fn)(void *arg);

typedef struct {
    /* --blacklist-cooldown-range L U in seconds, 1 <= L <= U; both 0: no range, a blacklisted
     * host never comes back. */
    int cooldown_lower_s;
    int cooldown_upper_s;
    hvd_host_random_fn random; /* NULL: an internal generator seeded from the clock */
    void *random_arg;
} hvd_host_manager_config_t;

typedef struct hvd_host_manager hvd_host_manager_t;

/* Create a manager with no hosts. cfg is copied. Errors: HVD_ERR_INVALID_ARG for a bad range,
 * HVD_ERR_NO_MEMORY. Does not block. */
hvd_status_t hvd__host_manager_create(const hvd_host_manager_config_t *cfg,
                                      hvd_host_manager_t **hm_p);

/* Free the manager; NULL is allowed. Snapshots taken from it stay valid. */
void hvd__host_manager_destroy(hvd_host_manager_t *hm);

/* Apply one discovery poll: discovered[0..n) in the order discovery listed them (names are
 * copied; the caller keeps ownership). A blacklisted host whose cooldown has ended by now_ms
 * and that is still discovered is whitelisted. The assignment order becomes the previous
 * order restricted to hosts still available, then newly available hosts in discovery order.
 * *result_p gets the change to the available view. On error nothing changes and *result_p is
 * not written. Errors: HVD_ERR_INVALID_ARG naming the host for an empty or over-long name, a
 * name listed twice, or slots < 1; HVD_ERR_TOO_LARGE past HVD_HOST_MANAGER_HOSTS_MAX hosts;
 * HVD_ERR_NO_MEMORY. Does not block. */
hvd_status_t hvd__host_manager_update(hvd_host_manager_t *hm, const hvd_host_t *discovered,
                                      size_t n, int64_t now_ms, hvd_host_update_t *result_p);

/* Number of available hosts (discovered and not blacklisted). */
size_t hvd__host_manager_host_count(const hvd_host_manager_t *hm);

/* Sum of the slots of the available hosts. */
int64_t hvd__host_manager_slot_count(const hvd_host_manager_t *hm);

/* Copy the available hosts, in assignment order, into a list the caller owns and frees with
 * hvd__hosts_fini(); it does not change when the manager does. Errors: HVD_ERR_NO_MEMORY
 * (*list_p untouched). */
hvd_status_t hvd__host_manager_snapshot(const hvd_host_manager_t *hm, hvd_host_list_t *list_p);

/* Blacklist host (it need not be discovered) at now_ms: it leaves the available view at once.
 * With a cooldown range, unless the host is still inside a cooldown period (which is then
 * left as it is), its failure count is incremented and a new period starts (formula above).
 * *newly_p (may be NULL) says whether the host was not blacklisted before. Errors:
 * HVD_ERR_INVALID_ARG for an empty or over-long name, HVD_ERR_TOO_LARGE, HVD_ERR_NO_MEMORY.
 * Does not block. */
hvd_status_t hvd__host_manager_blacklist(hvd_host_manager_t *hm, const char *host, int64_t now_ms,
                                         bool *newly_p);

/* Whether host is blacklisted: from hvd__host_manager_blacklist() until an update re-admits it
 * (after its cooldown, and only if discovery still lists it). Unknown hosts are not. */
bool hvd__host_manager_is_blacklisted(const hvd_host_manager_t *hm, const char *host);

/* When host's current cooldown ends (ms, same clock as now_ms): INT64_MAX for a host
 * blacklisted without a range, 0 for a host that is not blacklisted. For the driver's log. */
int64_t hvd__host_manager_cooldown_end_ms(const hvd_host_manager_t *hm, const char *host);

#endif
