/* The tensor queue of the core: named operations enqueued by any user thread, taken by the
 * progress engine, completed with a status, and waited for through handles.
 *
 * Life of an entry: hvd__tq_push (PENDING, its name now "in flight": a second push of the
 * same name fails until it completes) -> hvd__tq_take (handed to negotiation, still in
 * flight) -> hvd__tq_complete (DONE with a status; the name is free again) -> hvd__tq_wait
 * or a successful hvd__tq_poll + hvd__tq_release (the handle is gone).
 *
 * Waiting never sleeps while there is work it can do itself: hvd__tq_wait calls the
 * caller's progress function (the engine, which moves the data on the waiting thread) and
 * only blocks on a condition variable when progress says someone else is driving. Every
 * function is thread safe. */
#ifndef HVD_CONTROLLER_TENSOR_QUEUE_H
#define HVD_CONTROLLER_TENSOR_QUEUE_H

#include <hvd/types.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The dimensions a shape keeps (wire/negotiate.h HVD_NEG_MAX_DIMS): later ones are folded
 * into the last. */
#define HVD_ENTRY_MAX_DIMS 8

typedef struct hvd_entry {
    /* set by the enqueuer */
    char *name; /* owned */
    int type;   /* hvd_req_type_t */
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    int root;     /* broadcast: the root; p2p: the partner's global rank */
    int p2p_send; /* p2p: 1 for the sending side, 0 for the receiving one */
    const void *send;
    void *recv;
    size_t count;
    double prescale, postscale;
    /* The tensor's shape (ndims 0: a count-only entry of the fixed-size API; the product of
     * dims is count otherwise), checked across ranks by the coordinator. */
    int ndims;
    int64_t dims[HVD_ENTRY_MAX_DIMS];
    /* alltoall: elements sent to each rank (nsplits entries, copied at push), NULL: even */
    size_t *splits;
    int nsplits;
    /* allgather, alltoall: allocate the output once its size is known (hvd.h hvd_alloc_fn) */
    void *(*alloc)(void *user, size_t count, const size_t *counts, int n);
    void *alloc_user;
    /* the process set (0: every rank), its number of ranks, and this rank's place in it */
    int pset, pset_size;
    /* hvd_enqueue_ex: the deadline for the name to be agreed (0: none) and the operation's
     * key (owned once pushed; NULL: none), as the coordinator takes them (coordinator.h) */
    uint32_t timeout_ms;
    char *key;
    /* set by the queue */
    hvd_handle_t handle;
    int done;
    hvd_status_t status;
    char error[512];
    int in_flight; /* its name blocks a second push */
    int taken;     /* hvd__tq_take has handed it out */
    int waited;    /* a thread is in hvd__tq_wait for it */
    /* hvd__tq_on_done: called once completed, instead of a waiter (then waited is set) */
    void (*done_fn)(void *user, hvd_status_t status, const char *message);
    void *done_user;
    struct hvd_entry *next_done; /* entries whose done_fn is due (complete, fail_all) */
    struct hvd_entry *next_new;  /* FIFO of entries not yet taken */
    struct hvd_entry *chain_name, *chain_handle; /* hash chains */
} hvd_entry_t;

typedef struct hvd_tq hvd_tq_t;

/* Progress for a waiter: do some work (or wait briefly for another thread that does), and
 * return 0, or a status that should fail every pending entry. */
typedef hvd_status_t (*hvd_tq_progress_fn)(void *arg);

hvd_status_t hvd__tq_create(hvd_tq_t **q_p);
/* Free every entry still held (pending or not yet released). */
void hvd__tq_destroy(hvd_tq_t *q);

/* Enqueue a copy of *e (name copied). HVD_ERR_INVALID_ARG naming the tensor when the same
 * name is in flight; HVD_ERR_SHUT_DOWN after hvd__tq_fail_all with a shutdown. */
hvd_status_t hvd__tq_push(hvd_tq_t *q, const hvd_entry_t *e, hvd_handle_t *handle_p);

/* Enqueue n entries atomically: all of them (handles[i] for tmpls[i]) or none (a name in
 * flight or repeated within the batch, a shut-down queue). They are taken together. */
hvd_status_t hvd__tq_push_many(hvd_tq_t *q, const hvd_entry_t *tmpls, size_t n,
                               hvd_handle_t *handles);

/* Move up to max entries pushed since the last take into out[], in push order. They stay
 * owned by the queue. Returns how many. */
size_t hvd__tq_take(hvd_tq_t *q, hvd_entry_t **out, size_t max);

/* The in-flight entry of name, or NULL. */
hvd_entry_t *hvd__tq_find(hvd_tq_t *q, const char *name);

/* Complete an in-flight entry: wakes its waiters and frees its name for reuse. message
 * (may be NULL) is copied for hvd_last_error of the waiter. The waiter may release e at
 * once: the caller must not touch e afterwards. */
void hvd__tq_complete(hvd_tq_t *q, hvd_entry_t *e, hvd_status_t status, const char *message);

/* Complete every in-flight entry with status/message; with shutdown, later pushes fail. */
void hvd__tq_fail_all(hvd_tq_t *q, hvd_status_t status, const char *message, int shutdown);

/* 1 done, 0 pending, negative for an unknown handle. */
int hvd__tq_poll(hvd_tq_t *q, hvd_handle_t h);

/* Wait for h to complete, calling progress(arg) between checks, then release it and
 * return its status (its message in hvd_last_error). HVD_ERR_INVALID_ARG for an unknown
 * handle, or one another thread is already waiting for. */
hvd_status_t hvd__tq_wait(hvd_tq_t *q, hvd_handle_t h, hvd_tq_progress_fn progress, void *arg);

/* Instead of waiting for h, have fn(user, status, message) called once it completes
 * (message NULL on success), and the handle released: at once on this thread when it has
 * completed already, otherwise on the thread that completes it, after the queue's lock is
 * let go. HVD_ERR_INVALID_ARG for an unknown handle, or one a thread waits for already. */
hvd_status_t hvd__tq_on_done(hvd_tq_t *q, hvd_handle_t h,
                             void (*fn)(void *user, hvd_status_t status, const char *message),
                             void *user);

/* Whether hvd__tq_take would hand anything out, without taking the lock: a push that races
 * with it may be missed (the next look sees it). */
int hvd__tq_has_new(hvd_tq_t *q);

/* Entries in flight (pushed, not completed). */
size_t hvd__tq_in_flight(hvd_tq_t *q);

/* The name of one in-flight operation the engine has taken (not a join) into buf (at most
 * size bytes, NUL-terminated): 1, or 0 when there is none. For messages. */
int hvd__tq_in_flight_name(hvd_tq_t *q, char *buf, size_t size);

#endif
