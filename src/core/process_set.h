/* Process sets: subsets of the job's ranks whose members run collectives among themselves
 * (Horovod's; include/hvd/hvd.h, "Process sets"). Each registered set has an id (0 is every rank,
 * never stored here), its members as sorted global ranks, and, on its members, a group over the
 * job's transport.
 *
 * Their operations go through the same engine and cycles as everything else: a request
 * names its set and the set's size, so the coordinator counts it ready when every member
 * asked; every rank sees the agreed responses in the same order and the members run them on
 * the set's group, the others pass. Registration and removal are collective over the whole
 * job, so every rank numbers the sets alike. */
#ifndef HVD_CORE_PROCESS_SET_H
#define HVD_CORE_PROCESS_SET_H

#include "collectives/group.h"

typedef struct hvd_context hvd_context_t;

typedef struct hvd_pset {
    int id;
    int *members; /* sorted global ranks */
    int size;
    int rank;          /* this process's place in members; -1 when not a member */
    hvd_group_t group; /* members only */
} hvd_pset_t;

/* The group of set id when this process is a member (*rank_p, *size_p its place and the
 * set's size, either may be NULL); NULL and HVD_ERR_INVALID_ARG in hvd_last_error naming the
 * set when it does not exist or this process is not in it (*rank_p -1 then, for a known set).
 * Id 0 is the global group. Valid until the set is removed or hvd shut down. */
hvd_group_t *hvd__pset_group(hvd_context_t *c, int id, int *rank_p, int *size_p);

/* The member of set id at set rank r as a global rank, or -1. */
int hvd__pset_member(hvd_context_t *c, int id, int r);

/* Free every registered set (at shutdown, with the transport still there). */
void hvd__psets_free(hvd_context_t *c);

/* For the entry points that edit the table (process_set_api.c): its lock (the engine's
 * thread reads the table while user threads register and remove sets), the set id under
 * it, or NULL, and freeing a set taken out of the table. */
void hvd__pset_table_lock(void);
void hvd__pset_table_unlock(void);
hvd_pset_t *hvd__pset_find_locked(hvd_context_t *c, int id);
void hvd__pset_destroy(hvd_pset_t *s);

#endif
