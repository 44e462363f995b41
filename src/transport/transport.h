/* The transport ops table: how the collectives move bytes between ranks.
 *
 * A collective describes one phase of its algorithm as an array of transfers (sends and
 * receives, each to or from one peer) and hands the whole array to exchange(), which
 * progresses all of them at once on the calling thread and returns when every one is done or
 * the first error occurs. Transfers to the same peer in the same direction run in array
 * order; a send may also wait for another transfer (after), which is how a ring pipelines:
 * the send of a chunk in step s+1 waits for the receive of that chunk in step s, whose
 * on_done callback has reduced it. The caller's thread never sleeps while progress is
 * possible (the tcp transport busy-polls before it blocks in the kernel).
 *
 * Every send is one frame on the wire: a fixed header carrying the payload length, then the
 * payload. A receive names where the payload goes (up to two regions) and learns the
 * length the sender actually sent: a longer frame fills the regions and the rest is
 * discarded, a shorter one fills what it has. Ranks that disagree on sizes therefore stay in
 * step, and the collective layer, which exchanges signatures first, reports a mismatch
 * instead of hanging or corrupting memory.
 *
 * Once an exchange fails (a peer lost, a deadline passed, a protocol violation) the
 * transport is poisoned: it tells its connected peers the cause, closes its connections and
 * fails every later exchange with the same first cause, so a failure on one rank reaches
 * every rank. */
#ifndef HVD_TRANSPORT_TRANSPORT_H
#define HVD_TRANSPORT_TRANSPORT_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* A waiter busy-polls on its core for this long, then yields the core on every further idle
 * turn until its busy-poll budget ends. A peer that answers within a few microseconds is
 * running; one that takes longer is more often waiting for a core (other jobs, data loader
 * workers, or the waiter itself: a job's processes often start on one core and are spread
 * only some milliseconds later), and a waiter that kept spinning would keep that core from
 * it. A yield with nothing else to run returns at once, so an idle machine's latency is
 * unchanged. At 50 us, 4 of 10 two-rank jobs on this machine spent their first ~120 small
 * allreduces at 60-150 us each, both ranks on one core spinning in turn; at 5 us none of 12. */
#define HVD_SPIN_ALONE_US 5

#define HVD_XFER_MAX_IOV 2

typedef struct hvd_xfer hvd_xfer_t;

/* Called on the exchanging thread when a transfer completes, before transfers that wait
 * for it may start. A non-OK status aborts the exchange with it. */
typedef hvd_status_t (*hvd_xfer_done_fn)(hvd_xfer_t *x);

struct hvd_xfer {
    /* set by the caller */
    int peer;    /* global rank */
    int is_send; /* 1 send, 0 receive */
    struct iovec iov[HVD_XFER_MAX_IOV];
    int iovcnt;               /* 0..HVD_XFER_MAX_IOV */
    hvd_xfer_t *after;        /* sends only: start once this transfer is done (or NULL) */
    hvd_xfer_done_fn on_done; /* or NULL */
    void *arg;                /* for on_done */
    size_t tag;               /* the caller's, e.g. where a received chunk belongs */
    /* receives with iovcnt 0: the transport allocates the payload (malloc, at most alloc_max
     * bytes, else HVD_ERR_PROTOCOL) into iov[0]; the caller frees iov[0].iov_base after the
     * exchange, whatever it returned. For messages whose size only the sender knows. */
    size_t alloc_max;
    /* set by the transport */
    uint64_t frame_len; /* receives: payload length the sender sent */
    int done;
    /* transport-private progress state */
    uint64_t pos; /* bytes of header+payload handled */
};

typedef struct hvd_transport hvd_transport_t;

typedef struct {
    const char *name;
    /* Progress xfers[0..n) to completion. The idle deadline (milliseconds without any
     * progress) bounds every wait; its error names the peers being waited for. what names
     * the collective for error messages ("allreduce #12 of 4096 float32"). */
    hvd_status_t (*exchange)(hvd_transport_t *t, hvd_xfer_t *xfers, size_t n, const char *what);
    /* Poison the transport with status and message (the first cause wins) and tell the
     * connected peers. Idempotent. */
    void (*abort)(hvd_transport_t *t, hvd_status_t status, const char *message);
    /* Interrupt the transport from any thread, also while another thread is inside
     * exchange (the only op that is thread safe): record status and message (the first
     * cause wins) and wake the exchange, which then fails with them on its own thread and
     * poisons the transport as any failure does (abort, telling the peers). An exchange
     * that starts later fails at once; wait_fd polls readable from now on. Never blocks.
     * NULL when the transport cannot be interrupted. */
    void (*interrupt)(hvd_transport_t *t, hvd_status_t status, const char *message);
    /* For a thread that waits between exchanges for a peer to start one (the core's
     * background thread joins the cycles other ranks start): a descriptor that polls
     * readable while a peer has sent something or is connecting, and whether bytes already
     * read from a peer wait to be used (poll cannot see those). -1 / 0 when not supported. */
    int (*wait_fd)(hvd_transport_t *t);
    int (*buffered)(hvd_transport_t *t);
    /* The shared-memory arena of this rank's host (shm_arena.h), when every rank of the host
     * maps it; NULL otherwise or once poisoned, and when not supported (NULL op). A
     * collective that fails in it aborts the transport (abort records the cause in the
     * arena too). */
    struct hvd_arena *(*arena)(hvd_transport_t *t);
    /* HVD_OK, or the first cause once poisoned (copied to hvd_last_error). */
    hvd_status_t (*health)(hvd_transport_t *t);
    void (*destroy)(hvd_transport_t *t);
} hvd_transport_ops_t;

struct hvd_transport {
    const hvd_transport_ops_t *ops;
    int rank, size; /* global */
    /* Wait without busy-polling (the core's background thread, whose idle cycles must not
     * burn a core the training code needs). Read atomically on every idle turn: another
     * thread may clear it mid-exchange when it starts waiting for that exchange. */
    int quiet;
};

#endif
