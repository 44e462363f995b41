/* A group of ranks over a transport (the global, local or cross communicator), and the
 * agreement step every collective starts with.
 *
 * Every rank describes its call in a signature (which collective, dtype, op, root, count,
 * a digest of per-rank counts, and the call's sequence number). The agreement is an
 * allgather of the signatures, by Bruck's algorithm: ceil(log2 p) rounds; in round i each
 * rank sends what it has gathered to rank - 2^i and receives from rank + 2^i. (One round of
 * direct messages to every rank was measured slower at 4 ranks on 2 cores.) It always moves the
 * signatures and may carry data too (small allreduce and allgather use it as their whole
 * algorithm). The number of messages and their signature parts do not depend on the arguments, so
 * ranks that disagree still finish in step, each with every rank's signature; every rank then
 * reports the same HVD_ERR_MISMATCH naming the disagreeing ranks, and the group stays usable. */
#ifndef HVD_COLLECTIVES_GROUP_H
#define HVD_COLLECTIVES_GROUP_H

#include <hvd/types.h>

#include "transport/transport.h"
#include "wire/sig.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_group {
    hvd_transport_t *tp;
    /* "global", "local", "cross", "process set 7": a copy, because callers build names on
     * their stack and the engine thread formats them long after (a dangling pointer here
     * was read by ASan from another thread's frame). */
    char name[32];
    int rank, size; /* within the group */
    int *members;   /* group rank -> global rank */
    uint32_t seq;   /* collectives called on this group so far */
    /* Set by the core when every rank is known to make the same valid call (it agreed on it
     * already): the next signature-only agreement is skipped (one message round saved);
     * one that carries data still runs. Cleared by that agreement. */
    int agreed;
    /* scratch reused across calls (grown, freed by fini) */
    void *scratch[3];
    size_t scratch_cap[3];
    hvd_xfer_t *xfers;
    size_t xfers_cap;
    hvd_sig_t *sigs;
    uint8_t *sigbuf;
    size_t *lens, *offs; /* size entries each, for the algorithms' per-rank layouts */
    uint8_t *vbuf;       /* hvd__group_allgather_var's blocks */
    size_t vcap, *vpos;
    const uint8_t **vblocks; /* a cross group's blocks in the global group's allgather_var */
    int vpeers_linked;       /* allgather_var's peers connected at once (group.c, link_peers) */
    /* When the members are exactly the ranks of this host's shared-memory arena: group rank
     * -> arena member index (hvd__group_arena; NULL until looked up, or not such a group). */
    int *arena_idx;
    int arena_looked; /* 1 once looked up */
    /* Group rank -> process id, set by the core on a group with an arena when every rank of
     * the host can read every other's memory (process_vm_readv, checked at init): large
     * blocks are then copied once, straight from their owner. NULL: through the arena. */
    long *cma_pids;
    /* Set by the core on the global group of a job on several hosts with the same number of
     * ranks each, every host with its arena (else NULL: everything flat). The variable
     * allgather (the engine's cycle messages) then always goes hierarchically. Allreduces of at
     * least hier_min_bytes (in the working dtype) go hierarchically (shm_coll.h):
     * reduce-scatter inside each host (hier_local), allreduce across hosts between ranks of
     * equal local rank (hier_cross), allgather inside each host. Allgathers of at least
     * hier_ag_min_bytes in all go across hosts first (each rank's block to the ranks of
     * equal local rank), then inside each host. SIZE_MAX: that collective stays flat.
     * hier_grid[h * L + j] is the group rank of local rank j on host h (cross rank h). */
    struct hvd_group *hier_local, *hier_cross;
    size_t hier_min_bytes, hier_ag_min_bytes;
    int *hier_grid;
    /* HVD_REPRODUCIBLE, set by the core: every allreduce sums each element in rank order on
     * whichever path it takes (allreduce.c), so its bits depend on nothing but the inputs. */
    int ordered;
} hvd_group_t;

/* members (copied) lists the global ranks of the group in group-rank order; rank is this
 * process's index in it. */
hvd_status_t hvd__group_init(hvd_group_t *g, hvd_transport_t *tp, const char *name,
                             const int *members, int size, int rank);
void hvd__group_fini(hvd_group_t *g);

/* Scratch buffer slot (0..2) of at least bytes; NULL and an error when out of memory. */
void *hvd__group_scratch(hvd_group_t *g, int slot, size_t bytes);
/* An array of at least n transfers, zeroed. */
hvd_xfer_t *hvd__group_xfers(hvd_group_t *g, size_t n);

/* Global rank of group rank r. */
static inline int hvd__group_peer(const hvd_group_t *g, int r) {
    return g->members[((r % g->size) + g->size) % g->size];
}

/* The agreement (see top). mine is this rank's signature. With data: this rank contributes
 * data (lens[rank] bytes) and gathered receives every rank's block j at offset offs[j]
 * (lens[j] bytes each, as this rank expects them; NULL lens/offs/gathered: signatures
 * only). stage must hold sum(lens) bytes (the rotated blocks). Returns HVD_OK when all
 * signatures match, HVD_ERR_MISMATCH (message names the ranks) when they do not, the local
 * HVD_ERR_INVALID_ARG unchanged when this rank's own flags say invalid, or a transport
 * error. The sequence number is assigned here. */
hvd_status_t hvd__group_agree(hvd_group_t *g, hvd_sig_t *mine, const void *data, const size_t *lens,
                              const size_t *offs, void *gathered, void *stage, const char *what);

/* The transport's host arena when this group's members are exactly its members (every
 * collective of the group may then run there), else NULL; *idx_p: group rank -> member
 * index. Looked up once; the answer is the same on every rank of the group. */
struct hvd_arena *hvd__group_arena(hvd_group_t *g, const int **idx_p);

/* The end of an agreement once g->sigs holds every rank's signature: HVD_OK when all equal
 * mine, this rank's own HVD_INVALID_ARG (local_error) when its flags say invalid, else
 * HVD_ERR_MISMATCH naming the ranks. Sequence numbers are the caller's to assign. */
hvd_status_t hvd__group_judge(hvd_group_t *g, const hvd_sig_t *mine, const char *local_error,
                              const char *what);

/* The agreement in the arena a (idx as from hvd__group_arena) for a collective that wrote its
 * data into this rank's slot already: one step carrying every rank's signature, judged as
 * hvd__group_agree does. On HVD_OK every slot of the step stays readable until the caller
 * flips the arena; on a disagreement the step is over. */
hvd_status_t hvd__group_arena_agree(hvd_group_t *g, struct hvd_arena *a, const int *idx,
                                    hvd_sig_t *mine, const char *what);
/* A failure in the arena: abort the transport (which records the cause for the host's other
 * ranks) and name the collective. Returns st. */
hvd_status_t hvd__group_arena_failed(hvd_group_t *g, hvd_status_t st, const char *what);

/* Run one phase of transfers on the group's transport, naming the collective on error. */
hvd_status_t hvd__group_exchange(hvd_group_t *g, hvd_xfer_t *xfers, size_t n, const char *what);

/* Every rank contributes len bytes of mine (at most max, which every rank passes alike);
 * blocks[r] and lens[r] receive every rank's block (this rank's too). The blocks live in the
 * group's buffer until its next call. One step of the host's arena when the group is the
 * host's ranks; on several hosts with their arenas (hier_grid), Bruck across hosts between
 * the ranks of equal local rank, then the arena (one step, or as many as the longest of the
 * host's collections needs); else one Bruck allgather: ceil(log2 p) rounds, each message
 * bounded by the blocks it may carry. For the core's per-cycle control messages, whose size
 * each rank alone knows. */
hvd_status_t hvd__group_allgather_var(hvd_group_t *g, const void *mine, size_t len, size_t max,
                                      const uint8_t **blocks, size_t *lens, const char *what);

/* The box exchange: hvd__group_allgather_var in the host arena, without copies.
 * hvd__group_box is where this rank writes its block of len bytes before the exchange (its
 * box when the block fits, else its slot): NULL unless hvd__group_allgather_var would use
 * the host arena for max (the group is its members, and max fits a slot). hvd__group_box_exchange
 * then takes one step; blocks[r] point into the members' boxes, readable only until this group's
 * next step (hvd__group_box_keep copies them into the group's buffer, as hvd__group_allgather_var
 * leaves them). */
uint8_t *hvd__group_box(hvd_group_t *g, size_t len, size_t max);
hvd_status_t hvd__group_box_exchange(hvd_group_t *g, size_t len, size_t max, const uint8_t **blocks,
                                     size_t *lens, const char *what);
hvd_status_t hvd__group_box_keep(hvd_group_t *g, const uint8_t **blocks, const size_t *lens);

/* HVD_ERR_MISMATCH with the message every rank builds alike from g->sigs (one per rank):
 * the distinct calls and the ranks that made each. */
hvd_status_t hvd__group_report_mismatch(hvd_group_t *g, const char *what);

/* "allreduce", "broadcast", ... for a hvd_coll_t; "?" outside it. */
const char *hvd__coll_name(unsigned coll);

/* "allreduce(count 10, float32, sum)" for messages. */
void hvd__sig_describe(const hvd_sig_t *s, char *out, size_t out_size);

#endif
