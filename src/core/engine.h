/* The progress engine of the core (docs/libhvd.md, "Named asynchronous operations: the core"):
 * named operations enqueued by any thread are negotiated across the ranks in cycles, fused and
 * executed in one agreed order; blocking collectives are posted to the same cycles, so both kinds
 * may be mixed freely.
 *
 * A cycle is one collective step of every rank: each sends every other rank its cycle
 * message (wire/cycle.h: status flags, response-cache hits, its posted blocking call with
 * small data inline); then, when some rank has requests the cache does not know, rank 0
 * gathers them, decides what is ready (controller/coordinator.h) and broadcasts the
 * responses; every rank then runs the blocking call (if every member posted it) and the
 * responses, fused (controller/fusion.h), in the same order.
 *
 * Who runs cycles: any thread that waits (hvd_wait, a blocking call) runs them itself back
 * to back, so a waiter never sleeps on a hand-off; the background thread joins the cycles
 * other ranks start as their messages arrive, and starts one itself HOROVOD_CYCLE_TIME ms
 * after work was enqueued that no thread waits for (less often while nothing is in flight;
 * engine_impl.h). One cycle runs at a time per process; cycles are matched across ranks by
 * their order, so it does not matter which thread runs one.
 *
 * Failure: a cycle that fails (a peer lost, a timeout, a protocol error) poisons the
 * transport, which tells every peer the first cause; every pending handle and blocking call
 * on every rank completes with it, and later calls fail with it until hvd_shutdown. */
#ifndef HVD_CORE_ENGINE_H
#define HVD_CORE_ENGINE_H

#include "collectives/group.h"
#include "controller/tensor_queue.h"

#include <hvd/hvd.h>

typedef struct hvd_context hvd_context_t;
typedef struct hvd_engine hvd_engine_t;

/* A blocking collective, described by its public entry point. */
typedef struct {
    hvd_coll_t coll;
    hvd_comm_t comm;
    const void *send;
    void *recv; /* broadcast: the buffer */
    size_t count;
    const size_t *counts; /* allgatherv */
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    int root;
    double prescale, postscale;
} hvd_blocking_op_t;

/* Start the engine of an initialised context (its groups and transport) and its thread. */
hvd_status_t hvd__engine_create(hvd_context_t *ctx, hvd_engine_t **e_p);
/* Tell the other ranks this one is shutting down (one last cycle, bounded by the timeout),
 * fail what is pending with HVD_ERR_SHUT_DOWN and stop the thread. Idempotent; safe while
 * other threads wait. */
void hvd__engine_stop(hvd_engine_t *e);
/* The same for a process that exits without hvd_shutdown: the last cycle tells the other
 * ranks so (they fail with HVD_ERR_PEER_LOST saying this rank exited without it). */
void hvd__engine_exit(hvd_engine_t *e);
/* From any thread, while calls may be waiting in the engine (the elastic agent, when the
 * driver ends the round): make every pending handle and blocking call, and every later one,
 * fail promptly with status and message, as a failed cycle does (the transport is
 * interrupted, so a cycle waiting for a silent peer ends at once, and the peers are told).
 * Works when no cycle runs too: the background thread notices. The first cause wins.
 * Never blocks on the data plane; the engine must stay alive for the duration of the call. */
void hvd__engine_interrupt(hvd_engine_t *e, hvd_status_t status, const char *message);
/* Free everything (after hvd__engine_stop, once no thread uses the engine). */
void hvd__engine_destroy(hvd_engine_t *e);

/* Enqueue n named operations atomically (entries as tensor_queue.h; names copied). */
hvd_status_t hvd__engine_push(hvd_engine_t *e, const hvd_entry_t *entries, size_t n,
                              hvd_handle_t *handles);
/* Enqueue one side of a point-to-point message (p2p.c): *x as for hvd__engine_push, type
 * HVD_REQ_P2P, root the partner's global rank, p2p_send the side, name NULL. It is named
 * from its source, destination, tag and its sequence number on that triple, as the partner
 * names the other side. */
hvd_status_t hvd__engine_push_p2p(hvd_engine_t *e, hvd_entry_t *x, int tag, hvd_handle_t *handle_p);
int hvd__engine_poll(hvd_engine_t *e, hvd_handle_t h);
/* Wait for h, running the cycles meanwhile; resting: without busy-polling (hvd_wait_resting). */
hvd_status_t hvd__engine_wait(hvd_engine_t *e, hvd_handle_t h, int resting);
/* hvd_on_done: fn called once h completes, from the thread that completes it. */
hvd_status_t hvd__engine_on_done(hvd_engine_t *e, hvd_handle_t h, hvd_done_fn fn, void *user);
/* Enqueue a join and wait for every rank to join. */
hvd_status_t hvd__engine_join(hvd_engine_t *e, int *last_joined_rank_p);
/* Run a blocking collective (one at a time per process; others wait their turn). */
hvd_status_t hvd__engine_blocking(hvd_engine_t *e, const hvd_blocking_op_t *op);

/* Timeline control (rank 0 writes; other ranks accept and ignore). path NULL stops. */
hvd_status_t hvd__engine_timeline(hvd_engine_t *e, const char *path, int mark_cycles);
/* Rank 0: report stragglers every steps steps from now on (0: stop). Others: nothing. */
hvd_status_t hvd__engine_stragglers(hvd_engine_t *e, int steps);

#endif
