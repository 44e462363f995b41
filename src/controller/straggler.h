/* The straggler report (HVD_STRAGGLER_STEPS, hvd_report_stragglers), kept by rank 0: when
 * each rank arrived at each named collective (its request reached the coordinator, or its
 * response-cache bit first showed in a cycle message: cycle-time resolution), how late it
 * was behind the first rank to arrive, and which rank came last. Every window of K steps
 * (a step: the first name seen is agreed again, as the autotuner counts them) it reports
 * each rank's average lateness and the rank most often last, so that a rank that slows the
 * job is named. Not thread safe: the coordinator's progress engine owns it. */
#ifndef HVD_CONTROLLER_STRAGGLER_H
#define HVD_CONTROLLER_STRAGGLER_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_straggler hvd_straggler_t;

/* size ranks; hosts (may be NULL) names each rank's host, and must outlive s; steps >= 1. */
hvd_status_t hvd__straggler_create(int size, const char *const *hosts, int steps,
                                   hvd_straggler_t **s_p);
void hvd__straggler_destroy(hvd_straggler_t *s);

/* rank arrived at name at now_us (a monotonic clock); later calls for the same rank and
 * name, before it is agreed, change nothing. */
void hvd__straggler_arrive(hvd_straggler_t *s, const char *name, int rank, int64_t now_us);

/* name was agreed by every rank that takes part: its lateness counts in the window (ranks
 * that never arrived, outside its process set or joined, are left out). 1 when this closed
 * a window of steps: its report is in msg (n bytes), and the window starts again. */
int hvd__straggler_done(hvd_straggler_t *s, const char *name, char *msg, size_t n);

/* name failed (or will never be agreed): it leaves the tracking and counts for nothing. */
void hvd__straggler_forget(hvd_straggler_t *s, const char *name);

/* Names being tracked now (arrived at by some rank, not agreed yet). */
size_t hvd__straggler_pending(const hvd_straggler_t *s);

#endif
