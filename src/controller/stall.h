/* The stall inspector, kept by the coordinator (docs/libhvd.md, "Named asynchronous operations: the
 * core"): it remembers when each name was first reported ready by some rank and which ranks have
 * reported it; a check lists the names that some but not all ranks have submitted for longer than
 * the warning time, and for each missing rank the names it has not submitted. A rank whose oldest
 * missing name is older than the shutdown time (when that is set, and not below the
 * warning time) is marked with "!" and the check asks for a shutdown.
 *
 * Unlike the reference, the message names the ranks' hosts when they are known and the
 * stall's age, so an operator can see at once where to look. Not thread safe: the
 * coordinator's progress engine owns it. */
#ifndef HVD_CONTROLLER_STALL_H
#define HVD_CONTROLLER_STALL_H

#include <hvd/types.h>

#include "controller/membership.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_stall hvd_stall_t;

/* size ranks; hosts (may be NULL) names each rank's host, copied. warn_s > 0;
 * shutdown_s 0 = never. */
hvd_status_t hvd__stall_create(int size, const char *const *hosts, int warn_s, int shutdown_s,
                               hvd_stall_t **s_p);
void hvd__stall_destroy(hvd_stall_t *s);

/* How the inspector learns a process set's members, so that a set's name waits only for
 * them (without it every rank is expected for every name). */
void hvd__stall_set_members(hvd_stall_t *s, hvd_pset_member_fn fn, void *arg);

/* How the report describes a missing rank beyond its host and the names it has not
 * submitted: what it does instead (the coordinator knows: hvd__coord_describe_rank). fn
 * writes a NUL-terminated text into buf (n bytes); an empty one adds nothing. */
typedef void (*hvd_stall_describe_fn)(void *arg, int rank, int64_t now_ms, char *buf, size_t n);
void hvd__stall_set_describer(hvd_stall_t *s, hvd_stall_describe_fn fn, void *arg);

/* The first ranks (at most max, and at most HVD_STALL_MISSING_MAX) that the last report
 * named as missing, into ranks; how many. 0 after a check that reported nothing. */
#define HVD_STALL_MISSING_MAX 16
int hvd__stall_missing(const hvd_stall_t *s, int *ranks, int max);

/* rank has submitted name of process set pset (0: the whole job; now_ms: a monotonic
 * clock). */
hvd_status_t hvd__stall_ready(hvd_stall_t *s, const char *name, int pset, int rank, int64_t now_ms);
/* rank has submitted name, which only ranks[0..n) take part in (a point-to-point message:
 * its two ranks), so that it waits for them alone. */
hvd_status_t hvd__stall_ready_among(hvd_stall_t *s, const char *name, const int *ranks, int n,
                                    int rank, int64_t now_ms);
/* name (pending: some rank submitted it) has key, its place in an order every rank follows
 * (hvd_enqueue_ex; the torch.distributed backend's 'dist.<group>#<sequence number>'): the
 * report names it beside the name, which may repeat. */
void hvd__stall_key(hvd_stall_t *s, const char *name, const char *key);

/* name was agreed by every rank (or failed): forget it. */
void hvd__stall_done(hvd_stall_t *s, const char *name);

/* At most once per warning period: 1 and the report in msg when something is stalled,
 * else 0. *shutdown_p = 1 when a rank passed the shutdown time. */
int hvd__stall_check(hvd_stall_t *s, int64_t now_ms, char *msg, size_t msg_size, int *shutdown_p);

/* Whether no negotiation is pending (hvd__stall_check has nothing to look at). */
int hvd__stall_idle(const hvd_stall_t *s);

#endif
