/* The host arena (shm_arena.h).
 *
 * Layout, every part on its own cache lines so that a rank's writes do not steal the lines
 * the others poll:
 *   header    magic, members, data bytes per slot
 *   wake      futex word (bumped by publishers when someone sleeps) and sleeper count
 *   abort     state (0 none, 1 being written, 2 recorded), status, message
 *   boxes     per member two mailboxes (two lines each), by the parity of the step number:
 *             the step number it published last with that parity, then the step's inline
 *             bytes (hvd__arena_box), so that a small step moves in the very lines that
 *             announce it (one transfer per member, not a flag line and then data lines)
 *   waits     per member one line: whom it waits for while it sleeps, and when it last
 *             said so (hvd__arena_note_wait)
 *   slots     per member two slots (parity 0 and 1): head, then data
 * Nothing read from the shared part is trusted for memory safety: sizes come from this
 * rank's own arguments, the message is bounded. */
#include "transport/shm_arena.h"

#include "common/clock.h"
#include "common/error.h"
#include "os/fence.h"
#include "transport/transport.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
/* "hvdc": the layout with wait records ("hvdb" had none, "hvda" no boxes either), so that
 * ranks of different builds on one host refuse each other's arena instead of misreading it. */
#define MAGIC 0x68766463u
/* A wait record younger than this is its member's: waiters rewrite theirs on every sleep
 * slice (at most 100 ms apart, tcp.c and SLEEP_SLICE_MS below), and a stopped process's
 * grows old. */
#define WAIT_FRESH_MS 500
#define ABORT_MSG 1024
/* How long a sleeper waits before it looks at the members' liveness again: a member killed
 * while the others sleep is noticed within this (plus the hang-up check). */
#define SLEEP_SLICE_MS 50
/* The sleep when the heavy fence failed (a light publish may then go unseen until the
 * sleeper looks again). */
#define UNFENCED_SLICE_US 200
/* Arenas of at most this many members publish without a locked store (os/fence.h), and their
 * sleepers pay for it with membarrier, which interrupts every CPU running a registered
 * process. A few ranks gain a cache-line transfer per step (np 2, 8 B: 0.39 -> 0.30 us); on a
 * host of dozens of ranks, every rank that goes to sleep would interrupt dozens of CPUs, so
 * larger arenas keep the locked store and sleep without the fence. Decided from the member
 * count alone, which every member reads alike from the arena's header. */
#define LIGHT_MAX_MEMBERS 8
/* Spin turns between liveness checks while spinning (each check may be a few syscalls). */
#define CHECK_EVERY 4096

typedef struct {
    uint32_t magic, n;
    uint64_t data_bytes;
} header_t;

typedef struct {
    uint32_t bell;     /* futex word */
    uint32_t sleepers; /* members inside a futex wait (or about to be) */
} wake_t;

typedef struct {
    uint32_t state;
    int32_t status;
    char msg[ABORT_MSG];
} abort_t;

static size_t lines(size_t bytes) {
    return (bytes + LINE - 1) / LINE * LINE;
}

#define OFF_WAKE LINE
#define OFF_ABORT (2 * LINE)
/* A box is two lines, on a two-line boundary (the pair the caches fetch together): the step
 * number (BOX_HEAD bytes), then the inline bytes. */
#define BOX_HEAD 8
#define BOX (BOX_HEAD + HVD_ARENA_BOX_BYTES)
#define OFF_BOXES ((OFF_ABORT + sizeof(abort_t) + BOX - 1) / BOX * BOX)

static size_t slot_bytes(size_t data_bytes) {
    return lines(HVD_ARENA_SLOT_HEAD + data_bytes);
}

typedef struct {
    int32_t rank;    /* the global rank waited for, -1 none */
    int64_t beat_ms; /* hvd__clock_now_ms when written */
} wait_rec_t;

static size_t off_waits(int n) {
    return OFF_BOXES + (size_t)n * 2 * BOX;
}

static size_t off_slots(int n) {
    return off_waits(n) + (size_t)n * LINE;
}

static wait_rec_t *wait_rec(const hvd_arena_t *a, int idx) {
    return (wait_rec_t *)(a->base + off_waits(a->n) + (size_t)idx * LINE);
}

void hvd__arena_note_wait(hvd_arena_t *a, int rank) {
    wait_rec_t *w = wait_rec(a, a->self);
    __atomic_store_n(&w->beat_ms, hvd__clock_now_ms(), __ATOMIC_RELAXED);
    __atomic_store_n(&w->rank, rank, __ATOMIC_RELEASE);
}

int hvd__arena_waits_for(const hvd_arena_t *a, int idx) {
    const wait_rec_t *w = wait_rec(a, idx);
    int rank = __atomic_load_n(&w->rank, __ATOMIC_ACQUIRE);
    int64_t age = hvd__clock_now_ms() - __atomic_load_n(&w->beat_ms, __ATOMIC_RELAXED);
    return rank >= 0 && age < WAIT_FRESH_MS ? rank : -1;
}

size_t hvd__arena_bytes(int n, size_t data_bytes) {
    return off_slots(n) + (size_t)n * 2 * slot_bytes(data_bytes);
}

void hvd__arena_format(void *mem, int n, size_t data_bytes) {
    header_t *h = mem;
    h->n = (uint32_t)n;
    h->data_bytes = data_bytes;
    __atomic_store_n(&h->magic, MAGIC, __ATOMIC_RELEASE);
}

/* Member idx's box for step number seq: its first 8 bytes hold the latest step number of
 * seq's parity that idx published, so "idx published seq" is "that word >= seq" (the word
 * only grows, and holds seq - 2 or less until then). */
static uint8_t *box(const hvd_arena_t *a, int idx, uint64_t seq) {
    return a->base + OFF_BOXES + ((size_t)idx * 2 + (size_t)(seq & 1)) * BOX;
}

static uint64_t *box_seq(const hvd_arena_t *a, int idx, uint64_t seq) {
    return (uint64_t *)box(a, idx, seq);
}

static int published(const hvd_arena_t *a, int idx, uint64_t want) {
    return __atomic_load_n(box_seq(a, idx, want), __ATOMIC_ACQUIRE) >= want;
}

hvd_status_t hvd__arena_attach(hvd_arena_t *a, void *mem, size_t bytes, int n, int self,
                               size_t data_bytes) {
    const header_t *h = mem;
    if (bytes < hvd__arena_bytes(n, data_bytes) ||
        __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != MAGIC || h->n != (uint32_t)n ||
        h->data_bytes != data_bytes)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "the host's shared-memory arena is not the expected one (%d ranks, "
                              "%zu bytes per slot)",
                              n, data_bytes);
    memset(a, 0, sizeof *a);
    a->base = mem;
    a->bytes = bytes;
    a->n = n;
    a->self = self;
    a->data_bytes = data_bytes;
    a->light_publish = n <= LIGHT_MAX_MEMBERS && hvd__fence_light_ok();
    for (uint64_t parity = 0; parity < 2; parity++) {
        uint64_t v = __atomic_load_n(box_seq(a, self, parity), __ATOMIC_RELAXED);
        if (v > a->seq)
            a->seq = v;
    }
    return HVD_OK;
}

uint8_t *hvd__arena_box_out(const hvd_arena_t *a) {
    return box(a, a->self, a->seq + 1) + BOX_HEAD;
}

const uint8_t *hvd__arena_box_in(const hvd_arena_t *a, int idx) {
    return box(a, idx, a->seq) + BOX_HEAD;
}

uint8_t *hvd__arena_head(const hvd_arena_t *a, int idx) {
    return a->base + off_slots(a->n) +
           ((size_t)idx * 2 + (size_t)a->parity) * slot_bytes(a->data_bytes);
}

uint8_t *hvd__arena_data(const hvd_arena_t *a, int idx) {
    return hvd__arena_head(a, idx) + HVD_ARENA_SLOT_HEAD;
}

static wake_t *wake(const hvd_arena_t *a) {
    return (wake_t *)(a->base + OFF_WAKE);
}

static abort_t *abort_rec(const hvd_arena_t *a) {
    return (abort_t *)(a->base + OFF_ABORT);
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts) {
    /* Not FUTEX_PRIVATE_FLAG: the word is shared between processes. */
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

void hvd__arena_wake(hvd_arena_t *a) {
    wake_t *w = wake(a);
    __atomic_add_fetch(&w->bell, 1, __ATOMIC_SEQ_CST);
    futex(&w->bell, FUTEX_WAKE, INT_MAX, NULL);
}

void hvd__arena_publish(hvd_arena_t *a) {
    /* Store progress, then load the sleepers; the sleeper adds itself, then loads progress:
     * with a fence between on both sides a sleeper either sees this value or is seen. Here
     * that is a compiler barrier when the sleeper's side fences for both (os/fence.h), else
     * sequentially consistent accesses (a locked store). */
    a->seq++;
    uint64_t *mine = box_seq(a, a->self, a->seq);
    uint32_t sleepers;
    if (a->light_publish) {
        __atomic_store_n(mine, a->seq, __ATOMIC_RELEASE);
        hvd__fence_light();
        sleepers = __atomic_load_n(&wake(a)->sleepers, __ATOMIC_RELAXED);
    } else {
        __atomic_store_n(mine, a->seq, __ATOMIC_SEQ_CST);
        sleepers = __atomic_load_n(&wake(a)->sleepers, __ATOMIC_SEQ_CST);
    }
    if (sleepers > 0)
        hvd__arena_wake(a);
}

void hvd__arena_abort(hvd_arena_t *a, hvd_status_t status, const char *message) {
    abort_t *r = abort_rec(a);
    uint32_t none = 0;
    if (__atomic_compare_exchange_n(&r->state, &none, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        r->status = status;
        snprintf(r->msg, sizeof r->msg, "%s", message ? message : "");
        __atomic_store_n(&r->state, 2, __ATOMIC_RELEASE);
    }
    hvd__arena_wake(a);
}

/* The recorded failure as this thread's error, or HVD_OK when there is none (yet). */
static hvd_status_t aborted(const hvd_arena_t *a) {
    const abort_t *r = abort_rec(a);
    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != 2)
        return HVD_OK;
    hvd_status_t st = r->status < 0 ? r->status : HVD_ERR_PEER_LOST;
    return hvd__error_set(st, "%.*s", (int)strnlen(r->msg, sizeof r->msg), r->msg);
}

/* Members that have not published want yet; the first one in *first. */
static int missing(const hvd_arena_t *a, uint64_t want, int *first) {
    int m = 0;
    for (int i = 0; i < a->n; i++) {
        if (i != a->self && !published(a, i, want)) {
            if (!m)
                *first = i;
            m++;
        }
    }
    return m;
}

/* Whether a member that has not published want still runs (hvd_arena_t.progressing). Each
 * one asked takes a reading the next timeout's look compares with. */
static int missing_member_runs(const hvd_arena_t *a, uint64_t want) {
    int runs = 0;
    for (int i = 0; a->progressing && i < a->n; i++)
        if (i != a->self && !published(a, i, want))
            runs |= a->progressing(a->progress_ctx, a->ranks ? a->ranks[i] : i);
    return runs;
}

static hvd_status_t timeout_error(hvd_arena_t *a, uint64_t want) {
    char who[512];
    size_t len = 0;
    who[0] = '\0';
    for (int i = 0; i < a->n && len < sizeof who; i++) {
        if (i == a->self || published(a, i, want))
            continue;
        /* A member that still says whom it waits for is blocked, not stopped: name that
         * rank too (a rank waiting across hosts for a stopped one, say). */
        int self = a->ranks ? a->ranks[a->self] : a->self, via = hvd__arena_waits_for(a, i);
        char also[64] = "";
        if (via >= 0 && via != self)
            snprintf(also, sizeof also, " (itself waiting for rank %d)", via);
        int w = snprintf(who + len, sizeof who - len, "%s%d%s", len ? ", " : "",
                         a->ranks ? a->ranks[i] : i, also);
        if (w > 0)
            len += (size_t)w;
    }
    return hvd__error_set(HVD_ERR_TIMEOUT,
                          "no progress for %d s (HOROVOD_GLOO_TIMEOUT_SECONDS) waiting for rank %s "
                          "to reach the same step in shared memory",
                          a->timeout_ms / 1000, who);
}

/* A wait that saw a failure (st) ends with it only if the step is still incomplete: a member
 * that published and then exited or aborted (hvd_shutdown after its last step) completed
 * this step, and the failure belongs to the next. */
static hvd_status_t unless_done(const hvd_arena_t *a, uint64_t want, hvd_status_t st) {
    int first;
    return missing(a, want, &first) ? st : HVD_OK;
}

static hvd_status_t aborted(const hvd_arena_t *a);

/* check() failed with st: a member that failed first records its cause before its sockets
 * close, so a hang-up seen now may be that member's abort, whose cause wins. */
static hvd_status_t check_failed(const hvd_arena_t *a, uint64_t want, hvd_status_t st) {
    hvd_status_t first = aborted(a);
    return unless_done(a, want, first != HVD_OK ? first : st);
}

static hvd_status_t wait_published(hvd_arena_t *a, int *noted);

hvd_status_t hvd__arena_wait(hvd_arena_t *a) {
    int noted = 0;
    hvd_status_t st = wait_published(a, &noted);
    /* A failed wait leaves its record to age: the caller aborts next, and until then a host
     * peer timing out on this rank still reads whom it was waiting for. */
    if (noted && st == HVD_OK)
        hvd__arena_note_wait(a, -1);
    return st;
}

/* hvd__arena_wait; *noted once this rank's wait record says whom it waits for. */
static hvd_status_t wait_published(hvd_arena_t *a, int *noted) {
    uint64_t want = a->seq;
    int first = 0, left = missing(a, want, &first);
    if (!left)
        return HVD_OK;
    int64_t start = hvd__clock_now_us(), last_progress = start;
    unsigned turn = 0;
    int looked = 0; /* the missing members' activity was read once (missing_member_runs) */
    wake_t *w = wake(a);
    int64_t now = start;
    for (;;) {
        hvd_status_t st = aborted(a);
        if (st != HVD_OK)
            return unless_done(a, want, st);
        /* the clock every 32 turns: reading it on every turn took a sixth of an 8-byte
         * allreduce's time (perf, np 2) */
        if (turn % 32 == 0)
            now = hvd__clock_now_us();
        int quiet = a->quiet && __atomic_load_n(a->quiet, __ATOMIC_RELAXED);
        if (!quiet && now - start < a->spin_us) {
            if (a->yield || now - start >= HVD_SPIN_ALONE_US)
                sched_yield();
            else
                cpu_relax();
            if (++turn % CHECK_EVERY == 0 && a->check && (st = a->check(a->check_ctx)) != HVD_OK)
                return check_failed(a, want, st);
        } else {
            /* Ask to be woken, then look again before sleeping (publish: store, then load the
             * sleepers; here: add, then load the progress; the heavy fence stands in for the
             * publishers' half, os/fence.h). Without it a publish may go unseen: sleep a
             * short slice then. */
            uint32_t bell = __atomic_load_n(&w->bell, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&w->sleepers, 1, __ATOMIC_SEQ_CST);
            long slice_ns = SLEEP_SLICE_MS * 1000000L;
            if (a->n <= LIGHT_MAX_MEMBERS && hvd__fence_heavy() != 0)
                slice_ns = UNFENCED_SLICE_US * 1000L;
            int still = missing(a, want, &first);
            if (still) {
                hvd__arena_note_wait(a, a->ranks ? a->ranks[first] : first);
                *noted = 1;
            }
            if (still && __atomic_load_n(&abort_rec(a)->state, __ATOMIC_ACQUIRE) != 2) {
                struct timespec ts = {0, slice_ns};
                futex(&w->bell, FUTEX_WAIT, bell, &ts);
            }
            __atomic_sub_fetch(&w->sleepers, 1, __ATOMIC_SEQ_CST);
            if (a->check && (st = a->check(a->check_ctx)) != HVD_OK)
                return check_failed(a, want, st);
            now = hvd__clock_now_us();
            int64_t limit = (int64_t)a->timeout_ms * 1000;
            if (still && !looked && now - last_progress >= limit / 2) {
                /* half-way: the readings the look at the timeout compares with (so that a
                 * stopped member fails the wait at the timeout, as a member's peers on other
                 * hosts expect: tcp.c's grace) */
                (void)missing_member_runs(a, want);
                looked = 1;
            }
            if (still && now - last_progress >= limit && missing(a, want, &first) == left) {
                if (!missing_member_runs(a, want))
                    return timeout_error(a, want);
                last_progress = now; /* starved, not lost: another timeout */
            }
        }
        int now_left = missing(a, want, &first);
        if (!now_left)
            return HVD_OK;
        if (now_left != left) {
            left = now_left;
            last_progress = now;
            looked = 0;
        }
    }
}

hvd_status_t hvd__arena_step(hvd_arena_t *a) {
    hvd__arena_publish(a);
    return hvd__arena_wait(a);
}
