/* How the controller's modules (coordinator, stall inspector), which know process sets only
 * by id, learn their members from the core that registered them. */
#ifndef HVD_CONTROLLER_MEMBERSHIP_H
#define HVD_CONTROLLER_MEMBERSHIP_H

/* The global rank at place set_rank of process set pset, or -1 past its end (or for a set
 * that no longer exists). */
typedef int (*hvd_pset_member_fn)(void *arg, int pset, int set_rank);

#endif
