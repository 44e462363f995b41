/* The host arena: one shared-memory region that every rank of a host maps (a memfd created
 * by the host's highest rank and handed to the others with the WELCOME of their same-host
 * connection, tcp.c), where collectives among exactly those ranks run without frames:
 * each rank owns a progress word and two data slots, writes its contribution into its slot,
 * publishes, and reads the other ranks' slots straight from shared memory
 * (collectives/shm_coll.c).
 *
 * Steps. Every use is a sequence of steps that all member ranks take in the same order (the
 * engine runs collectives in one agreed order). A step: write into this rank's slot of the
 * current parity, publish (progress word = ++seq), wait until every member published the
 * same value, read what the step needs, then flip the parity for the next step. Because a
 * rank reads only between its wait and its next publish, and writes a slot only two steps
 * after it was last read, the double buffer needs no other handshake.
 *
 * Small steps go in the box: besides its slots, each member has a box for each parity of
 * the step number, whose first word is the step number it published there; the bytes a rank
 * writes into its box before publishing travel with that word, in the same two cache lines,
 * so a step that fits moves as one transfer from each member. The box is read, like the
 * slots, between the wait and the next publish, and is rewritten two steps on.
 *
 * Waiting spins for spin_us (yielding the core on every turn after HVD_SPIN_ALONE_US, or on
 * every turn when the host is oversubscribed), then sleeps on a futex that publishers wake;
 * every wait also watches the members' liveness and this process's interrupt through
 * check(), bounds the time without progress by timeout_ms, and reads the abort record: the
 * first rank that fails writes its cause there, so every member fails with that same first
 * cause. */
#ifndef HVD_TRANSPORT_SHM_ARENA_H
#define HVD_TRANSPORT_SHM_ARENA_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* The most members an arena has: beyond, the slots' memory and every rank's scan of the
 * others' progress grow too much (a host with more ranks goes without). */
#define HVD_ARENA_MAX_RANKS 64

/* Bytes at the start of each slot before its data, for the step's signature. */
#define HVD_ARENA_SLOT_HEAD 64

typedef struct hvd_arena hvd_arena_t;

/* HVD_OK while the wait may go on; otherwise the status (the error message set) that ends
 * it: a member lost, this process interrupted, the transport poisoned. */
typedef hvd_status_t (*hvd_arena_check_fn)(void *ctx);

struct hvd_arena {
    uint8_t *base; /* the mapping */
    size_t bytes;
    int n;             /* member ranks */
    int self;          /* this rank's index among them */
    const int *ranks;  /* index -> global rank (n entries, the owner's), for messages */
    size_t data_bytes; /* data bytes of each slot */
    uint64_t seq;      /* what this rank published last */
    int parity;        /* slot of the current step */
    int light_publish; /* publish without a full fence (os/fence.h; set by attach) */
    /* waiting */
    int spin_us;      /* spin this long before sleeping (0: sleep at once) */
    int yield;        /* sched_yield on every spin turn (more ranks than cores) */
    const int *quiet; /* when set (atomically read), sleep at once */
    int timeout_ms;   /* without progress */
    hvd_arena_check_fn check;
    void *check_ctx;
    /* At the timeout, whether a member still missing (its global rank) still runs: then the
     * wait goes on (hvd_tcp_config_t.progressing, core/peer_watch.h). NULL: it fails. */
    int (*progressing)(void *ctx, int rank);
    void *progress_ctx;
};

/* Shared bytes of an arena of n members with data_bytes per slot. */
size_t hvd__arena_bytes(int n, size_t data_bytes);

/* Write the header of a fresh (zero-filled) arena. */
void hvd__arena_format(void *mem, int n, size_t data_bytes);

/* View mem (bytes long, mapped) as the arena of n members with data_bytes per slot, this rank
 * member self. HVD_ERR_PROTOCOL when its header says otherwise. Waiting parameters are the
 * caller's to set afterwards. */
hvd_status_t hvd__arena_attach(hvd_arena_t *a, void *mem, size_t bytes, int n, int self,
                               size_t data_bytes);

/* Inline bytes of a box. */
#define HVD_ARENA_BOX_BYTES 120

/* This rank's box for the step it publishes next (HVD_ARENA_BOX_BYTES bytes). */
uint8_t *hvd__arena_box_out(const hvd_arena_t *a);
/* Member idx's box of the step this rank published last (read after its wait). */
const uint8_t *hvd__arena_box_in(const hvd_arena_t *a, int idx);

/* Member idx's slot of the current step: its head (HVD_ARENA_SLOT_HEAD bytes) and data. */
uint8_t *hvd__arena_head(const hvd_arena_t *a, int idx);
uint8_t *hvd__arena_data(const hvd_arena_t *a, int idx);

/* Publish this rank's part of the current step (what it wrote into its slot, or that it
 * finished reading) and wake sleeping members. */
void hvd__arena_publish(hvd_arena_t *a);

/* Wait until every member published this rank's current value. Fails with the abort
 * record's cause, check()'s, or HVD_ERR_TIMEOUT naming the ranks not there yet; the caller
 * then aborts (the transport's abort records its cause in the arena, so the other members
 * stop too). */
hvd_status_t hvd__arena_wait(hvd_arena_t *a);

/* Publish, then wait: one barrier of the members. */
hvd_status_t hvd__arena_step(hvd_arena_t *a);

/* The next step uses the other slot. */
static inline void hvd__arena_flip(hvd_arena_t *a) {
    a->parity ^= 1;
}

/* Record status and message as the arena's failure unless one is recorded already (the first
 * cause wins), and wake every sleeping member. */
void hvd__arena_abort(hvd_arena_t *a, hvd_status_t status, const char *message);

/* This rank's wait record: the global rank it waits for while it sleeps in a wait (-1: none
 * any more), rewritten on every sleep slice, here and in the transport's own waits. A member
 * that times out waiting for this rank reads it (hvd__arena_waits_for) to tell a rank that is
 * blocked behind another from one that is stopped, whose record grows old. */
void hvd__arena_note_wait(hvd_arena_t *a, int rank);
/* Whom member idx says it waits for, or -1 (none, or its record is stale). */
int hvd__arena_waits_for(const hvd_arena_t *a, int idx);

/* Wake every member sleeping in a wait (they look at their own state: an interrupt). */
void hvd__arena_wake(hvd_arena_t *a);

#endif
