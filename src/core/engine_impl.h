/* The engine's state, shared by its three parts, from the top: engine.c (threads, waiting,
 * entry points), cycle.c (one cycle: intake, the cycle message, cache, negotiation) and
 * execute.c (running blocking calls and responses), with the state's operations they share
 * in engine_state.c below them. Private to src/core. */
#ifndef HVD_CORE_ENGINE_IMPL_H
#define HVD_CORE_ENGINE_IMPL_H

#include "controller/autotune.h"
#include "controller/coordinator.h"
#include "controller/response_cache.h"
#include "controller/stall.h"
#include "controller/straggler.h"
#include "core/context.h"
#include "core/engine.h"
#include "timeline/timeline.h"
#include "wire/cycle.h"

#include <pthread.h>
#include <stdint.h>

/* A named operation this rank has enqueued and not yet sent to the coordinator: waiting for
 * its cache bit to be set by every rank (hits), to be sent (uncached), or for its stale cache
 * entry to be erased everywhere (invalid). */
typedef struct {
    hvd_entry_t *e;
    uint32_t bit;
    int64_t since_ms;
} hvd_pend_t;

typedef struct {
    hvd_pend_t *v;
    size_t n, cap;
} hvd_pend_list_t;

/* A negotiation open in rank 0's timeline, and the ranks already marked ready in it (a
 * cached name's bit is re-sent every cycle until all ranks have it). */
typedef struct {
    char *name;
    uint8_t *marked;
} hvd_tl_open_t;

/* A posted blocking call. */
typedef struct {
    hvd_blocking_op_t op;
    hvd_group_t *g;
    hvd_sig_t sig;    /* seq: the call's number on its communicator */
    int payload_path; /* runs on the cycle messages' payloads */
    uint8_t *payload; /* this rank's input in the cycle message (the engine's payload) */
    size_t payload_len;
    int64_t posted_ms;
    int express; /* not posted: its caller runs the cycle (no other thread looks at it) */
    int done;    /* atomic */
    hvd_status_t status;
    char error[1024];
} hvd_posted_t;

/* The next sequence number of point-to-point messages per (direction, peer, tag): an open
 * addressing table (p2p.c), keys HVD_P2P_NO_KEY where empty. */
typedef struct {
    uint64_t key;
    uint32_t next;
} hvd_p2p_seq_t;

#define HVD_P2P_NO_KEY UINT64_MAX

struct hvd_engine {
    hvd_context_t *ctx;
    hvd_tq_t *tq;
    hvd_cache_t *cache; /* NULL when HOROVOD_CACHE_CAPACITY is 0 */
    hvd_coord_t *coord; /* rank 0 */
    hvd_stall_t *stall; /* rank 0, unless disabled */
    /* rank 0, while a straggler report is asked for (hvd__engine_stragglers; prog_lock) */
    hvd_straggler_t *strag;
    /* rank 0, HVD_STALL_STACKS: the ranks a stall warning named, asked for their stacks in
     * the next cycle message (wire form: little-endian u32 each) */
    uint8_t stack_ranks[4 * HVD_CYC_STACKS_MAX];
    uint16_t nstack_ranks;
    size_t fusion_threshold;
    int64_t cycle_us, timeout_ms, stall_warn_ms;
    /* When the first cycle message of every rank arrived (0: not yet): a blocking call's wait
     * for the others counts from then at the earliest (cycle.c), since a rank whose engine
     * had not started could not call anything yet (2,048 ranks on 2 cores finish hvd_init
     * over more than a timeout). */
    int64_t formed_ms;

    /* prog_lock: one cycle at a time; everything below "cycle state" is its. */
    pthread_mutex_t prog_lock;
    /* state_lock + cv: the posted blocking call, cycle count, dead state, thread stop. */
    pthread_mutex_t state_lock;
    pthread_cond_t cv;     /* a cycle ended: for waiters sleeping while another thread drives */
    int wake_fd;           /* eventfd: wakes the background thread (stop, work) */
    int drivers;           /* threads waiting, hence running cycles themselves (atomic) */
    int resting_waiters;   /* of those, in hvd_wait_resting (atomic) */
    int64_t bg_wake_at_us; /* when the background thread's sleep ends at the latest (atomic) */
    uint64_t pushes;       /* hvd__engine_push calls that enqueued (atomic) */
    /* hvd__engine_on_done registrations (atomic): operations nobody waits for but a
     * framework's kernel does (hvd_on_done); the background thread starts a cycle for them
     * at once instead of one interval after the push (thread_main). */
    uint64_t callbacks;
    int sleepers;          /* threads waiting on cv (atomic; changed under state_lock) */
    uint64_t cycles;       /* completed (atomic; count_cycle) */
    int64_t last_cycle_us; /* start of the latest cycle (atomic) */
    int64_t last_push_us;  /* the latest hvd__engine_push (atomic) */
    /* The background thread's interval (atomic): the cycle time while this rank has named
     * operations in flight; otherwise doubled after each of its cycles (and whenever it
     * found that waiters drove the cycles meanwhile), up to HVD_IDLE_INTERVAL_US; back to
     * the cycle time when work shows up (hvd__engine_push wakes the thread). Cycles are
     * collective, so a rank with nothing in flight still joins every cycle another rank
     * starts, only later: nothing it has not enqueued could complete sooner anyway, and
     * the training code keeps its cores (at np=4 on 2 cores, cycling every millisecond
     * regardless halved the example's speed). */
    int64_t bg_interval_us;
    unsigned idle_cycles; /* consecutive background cycles with nothing in flight here */
    int in_background;    /* the running cycle is the background thread's (prog_lock) */
    int resting; /* the running cycle's thread waits quietly throughout (prog_lock; engine.c) */
    hvd_posted_t *posted;          /* state_lock */
    uint32_t blocking_seq[3];      /* blocking_lock */
    pthread_mutex_t blocking_lock; /* one blocking call at a time */
    uint8_t *payload;              /* the blocking call's payload (blocking_lock) */
    size_t payload_cap;
    /* The latest allreduce that passed prepare's checks onto the payload path, and its work
     * bytes + 1 (0: none): a call that differs from it only in its buffers (neither NULL)
     * passes them too. A loop of the same call skips them (blocking_lock). */
    hvd_blocking_op_t memo;
    size_t memo_bytes;
    /* Blocking calls run by their callers in express cycles (atomic): for the background
     * thread, a sign that waiters drive the cycles, as last_cycle_us is for the others. */
    uint64_t express_calls;
    pthread_t thread;
    int thread_started, stop_thread;
    int dead; /* state_lock; atomic reads */
    hvd_status_t dead_status;
    char dead_reason[1024];
    /* A peer shut down or exited while this rank waited in nothing (state_lock): the
     * operation this rank asks for next is then the uneven-inputs case, and its error names
     * it between these two parts (hvd__engine_dead_error_for). Empty otherwise. */
    char dead_uneven_head[512];
    char dead_uneven_tail[48];
    /* hvd__engine_interrupt (another thread): set once under state_lock, read atomically;
     * the next cycle, or the background thread if none runs, fails the engine with it. */
    int interrupted;
    hvd_status_t int_status;
    char int_reason[1024];

    /* p2p_lock: the sequence numbers of point-to-point messages, taken and enqueued under
     * it so that the n-th post on a (peer, tag) is the n-th name (p2p.c). */
    pthread_mutex_t p2p_lock;
    hvd_p2p_seq_t *p2p_seqs;
    size_t p2p_cap, p2p_used;

    /* cycle state */
    /* Autotune (HOROVOD_AUTOTUNE, rank 0 of a job of several): the parameter manager, fed a
     * step each time the first allreduce it saw comes round again, and whether its latest
     * configuration still has to go out in rank 0's cycle message (every rank applies it
     * after that cycle). */
    hvd_tune_t *tune;
    /* the global group's hierarchical thresholds when autotune turns the knob on (the job's
     * own setting, or 0: always, when the job started with it off) */
    size_t hier_ar_on_bytes, hier_ag_on_bytes;
    int tune_pending;
    uint64_t tune_bytes;
    char *tune_marker;
    hvd_timeline_t *tl; /* rank 0 */
    int mark_cycles;
    hvd_pend_list_t hits, uncached, invalid;
    hvd_entry_t *join_entry; /* this rank's pending join */
    int joined, join_unsent, last_joined;
    int shutdown_requested;
    int exiting;        /* with shutdown_requested: the process exits without hvd_shutdown */
    size_t payload_max; /* bound on the payload of a cycle message (cycle.c; 0 until known) */
    uint8_t *msg;       /* this rank's encoded cycle message */
    size_t msg_cap;
    uint8_t *words; /* hit and invalid words of this rank, and the combined ones */
    size_t words_cap;
    hvd_cycle_msg_t *msgs; /* every rank's decoded message this cycle */
    const uint8_t **blocks;
    size_t *block_lens;
    uint8_t *fusion; /* the fusion buffer, grown up to the threshold */
    size_t fusion_cap;
    uint8_t *zeros; /* a joined rank's stand-in input */
    size_t zeros_cap;
    hvd_tl_open_t *tl_open; /* rank 0: negotiations open in the timeline */
    size_t tl_nopen, tl_open_cap;
};

#define HVD_IDLE_INTERVAL_US 50000

/* engine_state.c */
/* Fail the engine (prog_lock held): poison the transport unless the cause came from a
 * peer already, complete everything pending with st and message, refuse later work. */
void hvd__engine_fail(hvd_engine_t *e, hvd_status_t st, const char *message, int tell_peers);
/* Whether the engine has failed; its first failure as this thread's error. */
int hvd__engine_is_dead(hvd_engine_t *e);
hvd_status_t hvd__engine_dead_error(hvd_engine_t *e);
/* The same for a new operation this rank asks for (what: its description, e.g. "'name'"):
 * after a peer's shutdown or exit that found this rank waiting in nothing, the message says
 * this rank waits in it, with the uneven-inputs hint, as when it was waiting already. */
hvd_status_t hvd__engine_dead_error_for(hvd_engine_t *e, const char *what);
/* "; this rank waits in <where>: if the ranks ran different numbers of steps, ..." */
void hvd__engine_uneven_hint(const char *where, char *buf, size_t n);
/* The stall report's view of a missing rank (an hvd_stall_describe_fn; engine: the engine). */
void hvd__engine_describe_rank(void *engine, int rank, int64_t now_ms, char *buf, size_t n);

/* The coarse clock (deadlines, stall warnings; the fine one is hvd__clock_now_us). */
int64_t hvd__engine_now_ms(void);
/* Grow *buf (contents kept) to at least need bytes: the engine's reused buffers. */
hvd_status_t hvd__engine_reserve(uint8_t **buf, size_t *cap, size_t need);

/* Count a background cycle as idle (nothing in flight here) or not, adjusting its interval. */
void hvd__engine_note_idle(hvd_engine_t *e, int idle);
/* Complete a blocking call (its waiter may return at once). */
void hvd__engine_finish_blocking(hvd_engine_t *e, hvd_posted_t *p, hvd_status_t st,
                                 const char *message);

/* cycle.c: forget the timeline's open negotiations (a new timeline starts). */
void hvd__engine_tl_reset(hvd_engine_t *e);

/* cycle.c: one cycle (prog_lock held). HVD_OK, or the status that failed the engine. With
 * express, the cycle carries that blocking call of the calling thread, not e->posted (none
 * is posted then: the caller holds blocking_lock). */
hvd_status_t hvd__engine_cycle(hvd_engine_t *e, hvd_posted_t *express);

/* execute.c (prog_lock held) */
/* Run every response of l in order (fused already). A failure of the data plane fails the
 * engine and is returned; argument errors complete their entries only. */
hvd_status_t hvd__engine_execute(hvd_engine_t *e, const hvd_response_list_t *l);
/* Run the posted blocking call p, every member having posted it (msgs: this cycle's);
 * agreed: every member's signature is the same and valid. */
hvd_status_t hvd__engine_run_blocking(hvd_engine_t *e, hvd_posted_t *p, int agreed);

#endif
