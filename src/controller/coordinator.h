/* The coordinator's table (docs/libhvd.md, "Named asynchronous operations: the core"): rank 0 of a
 * group feeds it every rank's requests, in rank order, cycle after cycle; a name is ready once
 * every rank that has not joined has requested it. Ready names come out in the order they became
 * ready, each as a response for every rank to execute, or as an ERROR response when the ranks
 * disagree (dtype, op, shape, scale factors, reduce op, broadcast root), with the reference's
 * message followed by the two ranks that disagree. JOIN requests count a rank as done for every
 * name; when all ranks have joined, a JOIN response (with the last rank to join) follows.
 * A joined rank stands in for itself in the process sets it belongs to as well (it
 * contributes zeros to their allreduces), once the coordinator can tell their members. */
#ifndef HVD_CONTROLLER_COORDINATOR_H
#define HVD_CONTROLLER_COORDINATOR_H

#include "controller/membership.h"
#include "wire/negotiate.h"

typedef struct hvd_coord hvd_coord_t;

hvd_status_t hvd__coord_create(int size, hvd_coord_t **c_p);
void hvd__coord_destroy(hvd_coord_t *c);

/* How the coordinator learns a process set's members, so that a member that has joined
 * counts as asking for the set's names. Without it joined ranks belong to no set, and an
 * operation of a set with a joined member waits for that member. */
void hvd__coord_set_members(hvd_coord_t *c, hvd_pset_member_fn fn, void *arg);

/* Record one request (copied). HVD_ERR_INVALID_ARG for a rank outside the group or a second
 * request of the same name from the same rank before it was answered. */
hvd_status_t hvd__coord_add(hvd_coord_t *c, const hvd_request_t *req);

/* Move every ready name into out (appended; out->items grows), oldest first, then a JOIN
 * response if every rank has joined. Names whose deadline has passed (set_now's clock) are
 * ready first, as failures. */
hvd_status_t hvd__coord_take_ready(hvd_coord_t *c, hvd_response_list_t *out);

/* Names some rank has requested that are not ready yet. */
size_t hvd__coord_pending(const hvd_coord_t *c);

/* Deadlines and keys (hvd_enqueue_ex). A name whose requests give a timeout_ms fails with
 * an ERROR response (status HVD_NEG_FAIL_TIMEOUT) once that long has passed since its first
 * request, unless ready before: the message names every rank that never asked for it, its
 * host, and what it does instead (the operations it waits in, or the last one it finished
 * and how long ago). A request's key is its place in an order all ranks follow: two names
 * of one process set under one key fail at once (HVD_NEG_FAIL_MISMATCH), the message naming
 * a rank of each side and what each asked for. */

/* Horovod's front doors name an operation "<kind>.<the user's name>" (allreduce.grad.w,
 * broadcast.noname.7: unnamed ones share one counter per process set, so that the number is
 * the operation's place in the order). Two pending names with the same user's name under
 * different kinds are rivals: if, HVD_COORD_RIVAL_GRACE_MS after both came, one rank still
 * has asked for one and not the other while another rank has asked for the other only, the
 * ranks disagree on what that name is, and both fail (HVD_NEG_FAIL_MISMATCH), a rank of each
 * side named. The grace lets ranks that submit both operations in different orders (which
 * Horovod allows) agree first. The user's name in name, or NULL when it has none. */
#define HVD_COORD_RIVAL_GRACE_MS 1000
const char *hvd__coord_user_name(const char *name);

/* The clock (monotonic, ms) of the requests added next and of take_ready's deadlines. */
void hvd__coord_set_now(hvd_coord_t *c, int64_t now_ms);
/* Each rank's host and process id, for messages (the arrays must outlive c; NULL: unknown,
 * as a pid of 0). */
void hvd__coord_set_hosts(hvd_coord_t *c, const char *const *hosts, const long *pids);
/* Every rank finished name, an operation that never reached the coordinator (a cached one). */
void hvd__coord_done_by_all(hvd_coord_t *c, const char *name);
/* Whether a deadline has passed at now_ms: take_ready has a failure to hand out. */
int hvd__coord_due(const hvd_coord_t *c, int64_t now_ms);
/* What rank r does at now_ms, for the stall inspector's report (into msg, n bytes): its pid,
 * the operations it waits in (blocking: a call outside the coordinator's view that the caller
 * knows it waits in, or NULL) or that it waits in none (it runs its own code), and the last
 * one it finished and how long ago. (now_ms becomes its clock, as with set_now.) */
void hvd__coord_describe_rank(hvd_coord_t *c, int r, int64_t now_ms, const char *blocking,
                              char *msg, size_t n);

#endif
