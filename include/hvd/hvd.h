/* libhvd: the library every training process links.
 *
 * Unless stated otherwise a function may be called from any thread, returns an hvd_status_t
 * (HVD_OK or a negative error, see types.h) and on error leaves a description in
 * hvd_last_error() of the calling thread. Outputs are written only on success. */
#ifndef HVD_HVD_H
#define HVD_HVD_H

#include <hvd/types.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_VERSION_MAJOR 0
#define HVD_VERSION_MINOR 1
#define HVD_VERSION_PATCH 0

/* Static name of a status code ("HVD_ERR_TIMEOUT", ...); never NULL, never freed. Unknown
 * values give "HVD_ERR_UNKNOWN". Does not block; thread safe. */
HVD_API const char *hvd_status_str(hvd_status_t status);

/* The detailed message of the calling thread's last error ("" when none): which rank, peer,
 * host or key was involved and what timed out. The string is owned by the library and stays
 * valid until this thread's next failing call. Does not block; thread safe (thread-local). */
HVD_API const char *hvd_last_error(void);

/* Version of libhvd as "MAJOR.MINOR.PATCH"; static storage. */
HVD_API const char *hvd_version(void);

/* Bytes of one element of dtype; 0 for a value that is no hvd_dtype_t. Does not block. */
HVD_API size_t hvd_dtype_size(hvd_dtype_t dtype);

/* Options of hvd_init_ex. Zero (or hvd_config_init) means "from the environment, else the
 * default" for every field, so a zero-initialised struct behaves exactly like hvd_init. */
typedef struct {
    /* Deadline in seconds for the rendezvous and for every wait inside a collective;
     * 0: HOROVOD_GLOO_TIMEOUT_SECONDS (default 30). */
    int timeout_seconds;
    /* Microseconds a collective busy-polls its sockets before it sleeps in the kernel;
     * 0: the default (HVD_BUSY_POLL_US, itself 1000 when the host has a core for every local
     * rank, and 10000 yielding the core on every idle turn when it has more ranks than
     * cores); negative: never busy-poll. */
    int busy_poll_us;
    /* Network interface whose address the data plane listens on; NULL: HOROVOD_GLOO_IFACE,
     * else the address this host uses to reach the rendezvous server. Copied. */
    const char *network_interface;
} hvd_config_t;

/* Set every field of *config to "unset" (equivalent to zeroing it). */
HVD_API void hvd_config_init(hvd_config_t *config);

/* Initialise from the HOROVOD_* environment set by horovodrun. Without a launcher
 * (no HOROVOD_GLOO_RENDEZVOUS_ADDR) the process is rank 0 of a job of size 1. Under
 * horovodrun every rank opens a listening socket for the data plane, publishes its address
 * while checking in with the rendezvous store, and waits, up to HOROVOD_GLOO_TIMEOUT_SECONDS,
 * until all ranks have; the error names the ranks that did not. Data connections are made
 * when a collective first needs them. Blocks. Not thread safe with hvd_shutdown. Returns
 * HVD_ERR_STATE if already initialised, HVD_ERR_INVALID_ARG for a malformed variable (named in
 * the message), HVD_ERR_TIMEOUT, HVD_ERR_AUTH, HVD_ERR_IO. */
HVD_API hvd_status_t hvd_init(void);

/* hvd_init with options; config may be NULL (same as hvd_init). Fields that are set take
 * precedence over the environment. */
HVD_API hvd_status_t hvd_init_ex(const hvd_config_t *config);

/* A key-value store that every rank of a job can reach, provided by the program: the ranks
 * form the job through it instead of through horovodrun's (hvd_init_store). This is how a
 * framework that has a store of its own, such as torch.distributed's c10d store under
 * torchrun, runs hvd without horovodrun. The callbacks are called only during
 * hvd_init_store, on its thread. */
typedef struct {
    int rank, size; /* this process's rank in the job, and the job's size */
    /* An address (IPv4 literal or name) that every host of the job reaches, such as the
     * launcher's MASTER_ADDR: the data plane listens on the interface this host reaches it
     * through. NULL: HOROVOD_GLOO_IFACE or the config's network_interface, else this host's
     * first address that is not loopback. Copied. */
    const char *route_addr;
    /* Give key the value (len bytes) for every rank. HVD_OK or an error status. */
    hvd_status_t (*set)(void *user, const char *key, const void *value, size_t len);
    /* Wait at most timeout_ms until key has a value, then copy at most cap bytes of it into
     * buf and its whole length into *len_p. HVD_OK, HVD_ERR_TIMEOUT when it never came, or
     * another error status. */
    hvd_status_t (*get)(void *user, const char *key, int timeout_ms, void *buf, size_t cap,
                        size_t *len_p);
    /* Optional (may be NULL): the store's description of its last failure, for messages. */
    const char *(*last_error)(void *user);
    void *user;
} hvd_store_t;

/* hvd_init_ex for a job whose rank and size come from the program and whose ranks meet through
 * store: every rank publishes where its data plane listens (keys "hvd.<n>.*", n counting this
 * process's hvd_init calls) and reads every other rank's. Ranks on one host (same host name
 * and network namespace, or the same HOROVOD_HOSTNAME) form the local communicator and share
 * memory. The job secret that guards the data plane is _HOROVOD_SECRET_KEY or the file named
 * by HVD_SECRET_FILE when set (the same on every rank: nothing secret enters the store);
 * otherwise rank 0 makes one and publishes it in the store, which is then exactly as
 * protected as the store is. Every wait is bounded by the config's timeout_seconds
 * (HOROVOD_GLOO_TIMEOUT_SECONDS); a rank that never checks in is named. Blocks. Returns as
 * hvd_init_ex, and HVD_ERR_INVALID_ARG for a NULL store or callback, or rank or size out of
 * range. */
HVD_API hvd_status_t hvd_init_store(const hvd_config_t *config, const hvd_store_t *store);

/* Release everything hvd_init acquired (connections, sockets, buffers); hvd_init may then be
 * called again. Returns HVD_ERR_SHUT_DOWN if not initialised. Blocks briefly. */
HVD_API hvd_status_t hvd_shutdown(void);

/* 1 between a successful hvd_init and hvd_shutdown, else 0. */
HVD_API int hvd_is_initialized(void);

/* Topology of this process, as assigned by the launcher. Each returns -1 when hvd is not
 * initialised. */
HVD_API int hvd_rank(void);
HVD_API int hvd_size(void);
HVD_API int hvd_local_rank(void);
HVD_API int hvd_local_size(void);
HVD_API int hvd_cross_rank(void);
HVD_API int hvd_cross_size(void);

/* ---- Blocking collectives ------------------------------------------------------------
 *
 * Every rank of the communicator calls the same sequence of collectives with the same
 * count, dtype, op and root; ranks that disagree all get HVD_ERR_MISMATCH with a message
 * naming two ranks that disagree and how. sendbuf == recvbuf is in place; otherwise the
 * buffers must not overlap. count is in elements; count 0 is valid and moves nothing (but
 * still agrees with the other ranks). The caller owns the buffers; they are not retained
 * after the call returns. Only one thread may run collectives at a time.
 *
 * Every wait inside a collective has the deadline HOROVOD_GLOO_TIMEOUT_SECONDS. Errors:
 * HVD_ERR_INVALID_ARG (NULL buffer with count > 0, unknown dtype or op, ADASUM, AVERAGE of
 * BOOL, root out of range), HVD_ERR_MISMATCH, HVD_ERR_PEER_LOST (a peer's process died or
 * its connection closed: the message names the rank and host), HVD_ERR_TIMEOUT (a peer
 * stopped answering: the message names who was being waited for), HVD_ERR_SHUT_DOWN. After
 * HVD_ERR_PEER_LOST or HVD_ERR_TIMEOUT on any rank, every rank's collectives fail with that
 * first cause until hvd_shutdown; hvd_init may then be called again.
 *
 * Reductions: integers wrap on overflow and integer AVERAGE rounds toward zero; BOOL
 * reduces as logic (SUM/MAX = or, MIN/PRODUCT = and); float16 and bfloat16 accumulate in
 * float32 and are rounded once. Every rank receives bitwise identical results. */
HVD_API hvd_status_t hvd_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                   hvd_dtype_t dtype, hvd_reduce_op_t op);

/* The communicators of a job: every rank, the ranks on this host (local), and the ranks
 * with this process's local rank on every host (cross). */
typedef enum { HVD_COMM_GLOBAL = 0, HVD_COMM_LOCAL = 1, HVD_COMM_CROSS = 2 } hvd_comm_t;

/* hvd_allreduce on communicator comm, with each input multiplied by prescale before the
 * reduction and the result by postscale after it (in float32 for half types, in double for
 * float64 and integers, whose results are then rounded toward zero). 1.0 and 1.0 give
 * hvd_allreduce. Scale factors other than 1.0 need op SUM or AVERAGE and a non-BOOL dtype. */
HVD_API hvd_status_t hvd_allreduce_ex(const void *sendbuf, void *recvbuf, size_t count,
                                      hvd_dtype_t dtype, hvd_reduce_op_t op, double prescale,
                                      double postscale, hvd_comm_t comm);

/* Copy root's buf to every rank's buf. */
HVD_API hvd_status_t hvd_broadcast(void *buf, size_t count, hvd_dtype_t dtype, int root);

/* recvbuf holds size * count elements, rank r's block at offset r * count. */
HVD_API hvd_status_t hvd_allgather(const void *sendbuf, size_t count, void *recvbuf,
                                   hvd_dtype_t dtype);

/* Rank r contributes recvcounts[r] elements; blocks are concatenated in rank order. Every
 * rank passes the same recvcounts (size entries). sendbuf may be recvbuf + this rank's
 * offset (in place). */
HVD_API hvd_status_t hvd_allgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                    hvd_dtype_t dtype);

/* sendbuf holds size * count elements; block j goes to rank j; recvbuf block i came from
 * rank i. */
HVD_API hvd_status_t hvd_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                  hvd_dtype_t dtype);

/* sendbuf holds size * count elements; rank r receives in recvbuf (count elements) the
 * reduction of every rank's block r. */
HVD_API hvd_status_t hvd_reducescatter(const void *sendbuf, void *recvbuf, size_t count,
                                       hvd_dtype_t dtype, hvd_reduce_op_t op);

/* Return once every rank has entered the barrier. */
HVD_API hvd_status_t hvd_barrier(void);

/* ---- Named asynchronous collectives (the core: background negotiation and fusion) ----
 *
 * Each call enqueues one named operation and returns at once with a handle. Ranks may
 * enqueue names in any order and from any thread; an operation runs once every rank has
 * enqueued its name (rank 0 coordinates, and every rank runs the agreed operations in the
 * same order). Allreduces that are ready together are fused into one collective on a
 * persistent buffer of HOROVOD_FUSION_THRESHOLD bytes. Buffers must stay valid and
 * untouched until the handle completes.
 *
 * Names are 1..1024 bytes without NUL, copied at enqueue. Enqueueing a name still in flight on this
 * rank fails at once with HVD_ERR_INVALID_ARG; the earlier operation is unaffected. When
 * ranks disagree on a name's operation, dtype, count, reduce op, scale factors or root,
 * every rank's handle completes with HVD_ERR_MISMATCH and a message naming the ranks.
 * A name enqueued on only some ranks keeps waiting (the stall inspector names it and the
 * missing ranks after HOROVOD_STALL_CHECK_TIME_SECONDS) without holding up other names or
 * blocking calls. When a rank fails or dies, every pending handle on every rank completes
 * with the first failure's status and a message naming its rank and host.
 *
 * The blocking collectives above are ordered calls on the same engine: they may be mixed
 * freely with the asynchronous ones. */

/* Allreduce of the named buffer (count elements; sendbuf == recvbuf is in place). */
HVD_API hvd_status_t hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf,
                                         size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                         hvd_handle_t *handle_p);
/* hvd_allreduce_async with scale factors (as hvd_allreduce_ex; global communicator). */
HVD_API hvd_status_t hvd_allreduce_async_ex(const char *name, const void *sendbuf, void *recvbuf,
                                            size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                            double prescale, double postscale,
                                            hvd_handle_t *handle_p);
/* n allreduces enqueued atomically, named "<name>.0" .. "<name>.<n-1>", so that they are
 * negotiated together and fused as one unit (when they fit the fusion threshold).
 * handles receives n handles, each waited for separately. */
HVD_API hvd_status_t hvd_grouped_allreduce_async(const char *name, size_t n,
                                                 const void *const *sendbufs, void *const *recvbufs,
                                                 const size_t *counts, hvd_dtype_t dtype,
                                                 hvd_reduce_op_t op, hvd_handle_t *handles);
HVD_API hvd_status_t hvd_broadcast_async(const char *name, void *buf, size_t count,
                                         hvd_dtype_t dtype, int root, hvd_handle_t *handle_p);
/* recvbuf holds size * count elements, as hvd_allgather. */
HVD_API hvd_status_t hvd_allgather_async(const char *name, const void *sendbuf, size_t count,
                                         void *recvbuf, hvd_dtype_t dtype, hvd_handle_t *handle_p);
/* As hvd_alltoall. */
HVD_API hvd_status_t hvd_alltoall_async(const char *name, const void *sendbuf, void *recvbuf,
                                        size_t count, hvd_dtype_t dtype, hvd_handle_t *handle_p);
/* As hvd_reducescatter (op SUM or AVERAGE). */
HVD_API hvd_status_t hvd_reducescatter_async(const char *name, const void *sendbuf, void *recvbuf,
                                             size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                             hvd_handle_t *handle_p);

/* ---- Tensor operations: the general form of the named asynchronous collectives ---------
 *
 * What a framework binding needs beyond the calls above: a tensor's shape (so ranks that
 * disagree are told the shapes, and allgather may take a different first dimension on every
 * rank), alltoall with per-rank splits, reducescatter of any first dimension, outputs whose
 * size only the negotiation knows, and several operations enqueued as one group. */

/* Operation types (the values of Horovod's request types). */
typedef enum {
    HVD_OP_ALLREDUCE = 0,
    HVD_OP_ALLGATHER = 1,
    HVD_OP_BROADCAST = 2,
    HVD_OP_ALLTOALL = 5,
    HVD_OP_REDUCESCATTER = 7
} hvd_op_type_t;

/* Allocator of an output the library sizes: called once per operation, from whichever thread
 * runs it (never with a library lock the caller could need), with the output's element count
 * and, per rank of the job, the elements that came from it (n entries). Returns a buffer of
 * count elements, or NULL for an empty output or on failure (the operation then fails with
 * HVD_ERR_NO_MEMORY when count > 0). The memory is the caller's. */
typedef void *(*hvd_alloc_fn)(void *user, size_t count, const size_t *counts, int n);

typedef struct {
    const char *name; /* 1..1024 bytes without NUL; unique among operations in flight */
    const void *send; /* input (not broadcast) */
    /* output: allreduce count elements; reducescatter this rank's rows; broadcast: the
     * buffer, the root's sent and every other rank's received */
    void *recv;
    hvd_dtype_t dtype;
    /* The tensor's shape: count = product of shape[0..ndim); ndim 0 is a scalar (1 element).
     * Allgather and alltoall need ndim >= 1 and agree on every dimension but the first. */
    int ndim;
    const int64_t *shape;
    hvd_reduce_op_t op;         /* allreduce; reducescatter SUM or AVERAGE */
    double prescale, postscale; /* allreduce and reducescatter */
    int root;                   /* broadcast: the root's global rank */
    /* alltoall: rows of the first dimension sent to each rank (size entries, summing to at
     * most shape[0]); NULL splits shape[0] evenly (it must divide by the size). */
    const int64_t *splits;
    /* allgather, alltoall: when alloc is set, recv is ignored and the output is allocated
     * through it once its size is known (allgather: the sum of every rank's rows; alltoall:
     * what every rank sent here). Without alloc, recv must hold the output already: allgather
     * size * count elements (every rank sends the same shape), alltoall count elements with
     * even splits. */
    hvd_alloc_fn alloc;
    void *alloc_user;
    int process_set; /* 0: every rank of the job */
} hvd_tensor_op_t;

/* Set *op to the defaults: no buffers, scalar float32, AVERAGE, scale factors 1.0, root 0,
 * even splits, no allocator, the global process set. */
HVD_API void hvd_tensor_op_init(hvd_tensor_op_t *op);

/* Enqueue n operations of one type atomically (handles receives n handles): they are
 * negotiated together and, where the type allows, fused together. Reducescatter gives rank r
 * shape[0] / size rows, one more for the ranks below shape[0] % size. Arguments are checked
 * before anything is enqueued: HVD_ERR_INVALID_ARG names the operation and what is wrong,
 * and then nothing was enqueued. Ranks that disagree on a name's shape, dtype, op, scale
 * factors or root all complete it with HVD_ERR_MISMATCH and Horovod's message. Otherwise as
 * the named asynchronous collectives above. */
HVD_API hvd_status_t hvd_enqueue(hvd_op_type_t type, const hvd_tensor_op_t *ops, size_t n,
                                 hvd_handle_t *handles);

/* What hvd_enqueue_ex adds: a framework whose collectives every rank calls in one order
 * (torch.distributed's, where a mismatch is a bug to report, not a wait) says so. */
typedef struct {
    /* > 0: the operations fail with HVD_ERR_TIMEOUT once this many milliseconds pass after
     * the first rank enqueued one of them without every rank of its process set having
     * done so; the message names each rank that never did, its host, and the operations it
     * waits in instead (or that it waits in none, and when its last one ended). 0: wait as
     * hvd_enqueue does (the stall inspector warns). */
    int timeout_ms;
    /* NULL, or one key per operation (NULL or "" for none, at most 1024 bytes): the
     * operation's place in an order every rank of its process set follows, used once per
     * process set (a sequence number). Ranks that enqueue different names under one key
     * fail at once with HVD_ERR_MISMATCH, the message naming a rank of each side and what
     * each enqueued (type, dtype, shape, op or root). */
    const char *const *keys;
} hvd_enqueue_opts_t;

/* Set *opts to hvd_enqueue's behaviour: no deadline, no keys. */
HVD_API void hvd_enqueue_opts_init(hvd_enqueue_opts_t *opts);

/* hvd_enqueue with opts (NULL: hvd_enqueue). Also HVD_ERR_INVALID_ARG for a negative
 * timeout or a key over 1024 bytes. */
HVD_API hvd_status_t hvd_enqueue_ex(hvd_op_type_t type, const hvd_tensor_op_t *ops, size_t n,
                                    const hvd_enqueue_opts_t *opts, hvd_handle_t *handles);

/* ---- Process sets ---------------------------------------------------------------------
 *
 * A process set is a subset of the job's ranks whose members run collectives among
 * themselves: pass its id as hvd_tensor_op_t.process_set (0 is every rank). Only its
 * members may enqueue on it; ranks outside it are not involved, and operations of different
 * sets (and of the whole job) proceed side by side. A set's operations are negotiated among
 * its members (rank 0 of the job coordinates them) and fused only with each other; they
 * always take the coordinator's path, not the response cache's. hvd_shutdown forgets every
 * set (an elastic re-initialisation too, as in Horovod). */

/* Register the set of the given global ranks (any order, no duplicates, not every rank) and
 * return its id in *id_p. Collective: every rank of the job calls it with the same ranks, in
 * the same order of registrations, so ids agree; ranks that disagree all get HVD_ERR_MISMATCH
 * ("Attempted to register process set with mismatching size/values on different ranks").
 * HVD_ERR_INVALID_ARG for a rank out of range, a duplicate, or a set registered already.
 * Blocks. */
HVD_API hvd_status_t hvd_add_process_set(const int *ranks, int n, int *id_p);
/* Unregister set id (collective, as hvd_add_process_set). Its operations must be complete.
 * HVD_ERR_INVALID_ARG for id 0 or an unknown id. Blocks. */
HVD_API hvd_status_t hvd_remove_process_set(int id);
/* This process's rank in set id (-1 when not a member) and the set's size; either pointer
 * may be NULL. HVD_ERR_INVALID_ARG for an unknown set. */
HVD_API hvd_status_t hvd_process_set_info(int id, int *rank_p, int *size_p);
/* The set's members as global ranks in set-rank order: up to max into ranks, their number
 * into *n_p. */
HVD_API hvd_status_t hvd_process_set_ranks(int id, int *ranks, int max, int *n_p);
/* The ids of the registered sets, 0 first: up to max into ids; returns their number, or a
 * negative status when hvd is not initialised. */
HVD_API int hvd_process_set_ids(int *ids, int max);

/* 1 when every host runs the same number of ranks, 0 when not, -1 when not initialised. */
HVD_API int hvd_is_homogeneous(void);

/* 1 when the handle's operation is done (hvd_wait then returns at once), 0 while it is
 * pending, negative for a handle that is unknown or already released. Never blocks. */
HVD_API int hvd_poll(hvd_handle_t handle);
/* Wait for the operation and release the handle; returns its status (details in
 * hvd_last_error). The waiting thread drives the negotiation and the data itself, so a
 * wait costs no thread hand-off. Bounded by the job's timeout like every wait. */
HVD_API hvd_status_t hvd_wait(hvd_handle_t handle);
/* hvd_wait for a thread that waits while the process computes on every core (a completion
 * thread beside the training threads): it drives the cycles too, but sleeps in the kernel
 * whenever it waits for another rank instead of busy-polling first, so it never takes a core
 * the computation needs. A little slower per operation when cores are free. */
HVD_API hvd_status_t hvd_wait_resting(hvd_handle_t handle);

/* Completion callback: what a framework whose kernels must not block (TensorFlow's
 * asynchronous kernels) uses instead of a waiting thread. */
typedef void (*hvd_done_fn)(void *user, hvd_status_t status, const char *message);
/* Instead of waiting for handle, have fn(user, status, message) called exactly once when its
 * operation completes (message: the error, as hvd_last_error would give it; NULL on
 * success); the handle is released then. fn runs on the thread that completes the operation
 * (the library's background thread, a thread that waits for another handle, one that fails
 * the job or shuts it down, or this one at once when the operation has completed already),
 * after any allocation through hvd_alloc_fn, while that thread may be running a cycle: fn
 * may enqueue further operations, but must not wait for any (hvd_wait, a blocking
 * collective, hvd_join, hvd_shutdown), and should return quickly. No thread waits for the
 * operation, so the background thread drives the cycles (every HOROVOD_CYCLE_TIME while
 * operations are in flight). HVD_ERR_INVALID_ARG for an unknown handle or one a thread
 * waits for already. */
HVD_API hvd_status_t hvd_on_done(hvd_handle_t handle, hvd_done_fn fn, void *user);

/* For a rank that has run out of data: blocks until every rank has joined. Until then this
 * rank takes part in the other ranks' allreduces with zeros (AVERAGE still divides by the
 * job's size). *last_joined_rank_p (may be NULL) receives the rank that joined last.
 * Allgather, broadcast, alltoall and reducescatter fail while a rank has joined. */
HVD_API hvd_status_t hvd_join(int *last_joined_rank_p);

/* Timeline (rank 0 writes it): start writing a Chrome trace to path (replacing one already
 * being written; HOROVOD_TIMELINE starts one at init), with CYCLE_START marks when
 * mark_cycles. Stop closes it; the file is valid JSON at every moment. */
HVD_API hvd_status_t hvd_start_timeline(const char *path, int mark_cycles);
HVD_API hvd_status_t hvd_stop_timeline(void);

/* Straggler report (rank 0 logs it; HVD_STRAGGLER_STEPS sets it at init): every `steps` steps
 * (a step: the first named collective comes round again), each rank's average lateness in
 * arriving at the named collectives, behind the first rank to arrive, and the rank most
 * often last, as a warning in the log and an instant event in the timeline. 0 stops it (it
 * then costs nothing). Any rank may call it; rank 0's call is the one that counts. */
HVD_API hvd_status_t hvd_report_stragglers(int steps);

/* ---- Elastic training (horovodrun --elastic / --host-discovery-script) -------------------
 *
 * A job whose workers may die, or whose hosts may come and go, keeps training: the elastic
 * driver in horovodrun forms a new world (a round) from the workers that are left and any new
 * ones, and every worker of it re-initialises and carries on from the last commit.
 *
 * The training state lives in an hvd_elastic_state_t: buffers registered with
 * hvd_elastic_state_add (saved, restored and broadcast by the library itself) and/or the
 * program's own callbacks. hvd_elastic_run calls the training function and, when it fails
 * because a peer was lost (HVD_ERR_PEER_LOST, HVD_ERR_TIMEOUT) or the host set changed
 * (HVD_ERR_HOSTS_UPDATED, raised by a commit), shuts hvd down, initialises it again in the
 * driver's next round (a new rank and size), and calls the function again:
 *
 *   loop: if a sync is due: broadcast the state from rank 0 (then save it);
 *         st = fn(state, arg)
 *         HVD_OK: return HVD_OK
 *         HVD_ERR_PEER_LOST, HVD_ERR_TIMEOUT: restore the last commit; re-initialise
 *         HVD_ERR_HOSTS_UPDATED: keep the state (just committed); re-initialise
 *         anything else: return it
 *         re-initialise: hvd_shutdown, hvd_init (the new round), callbacks.reset
 *
 * The first call of run with a state always syncs; after a re-initialisation the driver
 * decides, for every worker of the round alike (so no two ranks can disagree on which
 * collectives follow). A failure while re-initialising or syncing starts the recovery again.
 * A worker the driver removes gets HVD_ERR_SHUT_DOWN ("... was removed from the elastic job")
 * and should exit with status 0; a job the driver stops gets HVD_ERR_SHUT_DOWN with the
 * driver's reason. Without HOROVOD_ELASTIC (a plain job, or a process alone) everything works
 * the same and simply never re-initialises: commit saves and there are no host updates.
 *
 * The functions below block (the collective ones until every rank calls them) and must be
 * called by one thread at a time, the one that trains. */
typedef struct hvd_elastic_state hvd_elastic_state_t;

/* The program's part of the state. Any callback may be NULL; a non-OK status from one is
 * returned by the call that made it (from hvd_elastic_run: a failing sync or reset callback
 * with HVD_ERR_PEER_LOST / HVD_ERR_TIMEOUT starts the recovery again, other statuses end the
 * run). */
typedef struct {
    /* copy live training state to the committed copy */
    hvd_status_t (*save)(void *user);
    /* copy the committed copy back */
    hvd_status_t (*restore)(void *user);
    /* make every rank's live state root's (broadcasts) */
    hvd_status_t (*sync)(void *user, int root);
    /* after re-init in a new world, before sync (e.g. rescale lr) */
    hvd_status_t (*reset)(void *user);
    void *user;            /* passed to every callback */
} hvd_elastic_callbacks_t; /* any may be NULL */

/* Create a state with the given callbacks (copied; NULL: none) into *state_p. Needs no
 * hvd_init. HVD_ERR_INVALID_ARG, HVD_ERR_NO_MEMORY. */
HVD_API hvd_status_t hvd_elastic_state_create(const hvd_elastic_callbacks_t *callbacks,
                                              hvd_elastic_state_t **state_p);
/* Free the state and its committed copies (never the registered buffers). NULL: no-op. */
HVD_API void hvd_elastic_state_destroy(hvd_elastic_state_t *state);
/* Register a buffer the state saves, restores and broadcasts itself (count elements of dtype;
 * name, 1..255 bytes, unique in the state, is copied; the buffer stays the caller's and must
 * outlive the state). Its current contents become its committed copy. HVD_ERR_INVALID_ARG
 * (NULL or empty name, a name registered already, unknown dtype, NULL buf with count > 0),
 * HVD_ERR_NO_MEMORY. */
HVD_API hvd_status_t hvd_elastic_state_add(hvd_elastic_state_t *state, const char *name, void *buf,
                                           size_t count, hvd_dtype_t dtype);
/* Commit locally: copy every buffer to its committed copy, then callbacks.save. */
HVD_API hvd_status_t hvd_elastic_state_save(hvd_elastic_state_t *state);
/* Roll back: copy every committed copy back into its buffer, then callbacks.restore. */
HVD_API hvd_status_t hvd_elastic_state_restore(hvd_elastic_state_t *state);
/* Collective: broadcast every buffer from rank 0, callbacks.sync(user, 0), then save. */
HVD_API hvd_status_t hvd_elastic_state_sync(hvd_elastic_state_t *state);
/* Collective: save, then the host-update check below. HVD_OK, HVD_ERR_HOSTS_UPDATED (on
 * every rank alike, at the same commit), or a collective's error. */
HVD_API hvd_status_t hvd_elastic_commit(hvd_elastic_state_t *state);
/* Collective: HVD_ERR_HOSTS_UPDATED on every rank when the driver announced a host change
 * in this round (rank 0's view, broadcast in one 8-byte collective), else HVD_OK. Without
 * HOROVOD_ELASTIC: HVD_OK, no collective. */
HVD_API hvd_status_t hvd_elastic_check_host_updates(hvd_elastic_state_t *state);

/* The training function: returns HVD_OK when training is complete, or the status of the call
 * that failed. */
typedef hvd_status_t (*hvd_elastic_fn)(hvd_elastic_state_t *state, void *arg);
/* Run fn with the semantics above (Horovod's elastic.run). Needs hvd_init done; returns with hvd
 * initialised on HVD_OK (in the latest round) and on errors from fn. HVD_ERR_SHUT_DOWN when
 * hvd is not initialised, or the worker was removed or the job stopped (the message says
 * which); HVD_ERR_TIMEOUT when the driver gave no new place in time; fn's other errors. */
HVD_API hvd_status_t hvd_elastic_run(hvd_elastic_state_t *state, hvd_elastic_fn fn, void *arg);
/* Re-initialisations hvd_elastic_run made with this state so far. */
HVD_API int hvd_elastic_resets(const hvd_elastic_state_t *state);

/* ---- Point-to-point messages (torch.distributed send/recv/isend/irecv) ------------------
 *
 * A send from this rank to rank dst and a receive at dst from this rank with the same tag are
 * one message. Messages between one pair with one tag match in the order posted: the n-th
 * send from a to b with tag t is the n-th receive at b from a with tag t; messages of
 * different tags (and of different pairs) match independently, whatever their order of
 * posting. dst and src are global ranks other than this one; tag >= 0; count is in elements
 * and may be 0. The two sides must agree on the bytes (count times the dtype's size); their
 * dtypes may differ, as in torch.distributed.
 *
 * The asynchronous calls enqueue the side and return at once with a handle for hvd_poll and
 * hvd_wait; the buffer is the caller's and must stay valid and untouched (for a receive,
 * unread) until the handle completes. Any number of sends and receives may be outstanding
 * on any rank, to and from any peers, in any order of posting (for example isend to every
 * peer, then irecv from every peer, on every rank): a message waits only for its partner to
 * post, and none holds up the others or the collectives. They may be mixed freely with the
 * blocking and the named collectives, from any thread. A message moves through the same
 * transports as the collectives (shared memory on one host, TCP across hosts).
 *
 * Errors at the call (nothing was enqueued, the sequence of the (peer, tag) unchanged):
 * HVD_ERR_INVALID_ARG (NULL handle_p; NULL buf with count > 0; unknown dtype; negative tag;
 * dst or src this rank or out of range, named in the message), HVD_ERR_SHUT_DOWN, or the
 * engine's first failure. The handle completes with: HVD_OK once the bytes have moved (a
 * send's buffer may then be reused; a receive's holds the message); HVD_ERR_MISMATCH on both
 * sides when they disagree on the bytes (the message names both ranks and both sizes), or
 * when the partner has joined (hvd_join); HVD_ERR_PEER_LOST / HVD_ERR_TIMEOUT, naming the
 * rank and host, when a peer dies or stops answering (every rank's pending operations fail
 * with that first cause, as for the collectives, within HOROVOD_GLOO_TIMEOUT_SECONDS);
 * HVD_ERR_SHUT_DOWN. A side whose partner never posts keeps waiting, as a named collective
 * does: the stall inspector names the message ("p2p:<src>-><dst>:tag=<t>:#<n>") and the
 * missing rank after HOROVOD_STALL_CHECK_TIME_SECONDS, and fails it with HVD_ERR_TIMEOUT
 * after HOROVOD_STALL_SHUTDOWN_TIME_SECONDS when that is set; with a deadline
 * (hvd_send_async_ex) it fails then. */

/* Post a send of count elements of buf to rank dst. Does not block; thread safe. */
HVD_API hvd_status_t hvd_send_async(const void *buf, size_t count, hvd_dtype_t dtype, int dst,
                                    int tag, hvd_handle_t *handle_p);
/* Post a receive of count elements into buf from rank src. Does not block; thread safe. */
HVD_API hvd_status_t hvd_recv_async(void *buf, size_t count, hvd_dtype_t dtype, int src, int tag,
                                    hvd_handle_t *handle_p);
/* hvd_send_async and hvd_recv_async with a deadline: when timeout_ms > 0 and the partner has
 * not posted the other side within timeout_ms, the side fails with HVD_ERR_TIMEOUT, the
 * message naming the partner, its host and pid, and what it does instead. Also
 * HVD_ERR_INVALID_ARG for a negative timeout_ms. */
HVD_API hvd_status_t hvd_send_async_ex(const void *buf, size_t count, hvd_dtype_t dtype, int dst,
                                       int tag, int timeout_ms, hvd_handle_t *handle_p);
HVD_API hvd_status_t hvd_recv_async_ex(void *buf, size_t count, hvd_dtype_t dtype, int src, int tag,
                                       int timeout_ms, hvd_handle_t *handle_p);
/* hvd_send_async, then hvd_wait: blocks until the message has moved (its partner must post
 * the receive) and returns its status. Thread safe. */
HVD_API hvd_status_t hvd_send(const void *buf, size_t count, hvd_dtype_t dtype, int dst, int tag);
/* hvd_recv_async, then hvd_wait: blocks until the message has arrived in buf. Thread safe. */
HVD_API hvd_status_t hvd_recv(void *buf, size_t count, hvd_dtype_t dtype, int src, int tag);

#ifdef __cplusplus
}
#endif

#endif /* HVD_HVD_H */
