/* Checks of libhvd's point-to-point messages (hvd_send_async, hvd_recv_async, hvd_send,
 * hvd_recv), run as N processes under horovodrun; every rank runs this program with the same
 * scenario name as argv[1]. Written against the public header only.
 *
 * Every message's bytes are drawn from (source, destination, tag, number on that triple,
 * index), so the receiver computes what it must get and compares every byte; receive buffers
 * are pre-filled with a sentinel and carry guard bytes behind the message, so a short or long
 * write is caught too.
 *
 * Scenarios (tests/mrank/p2p.cmake runs them):
 *   ring      each rank sends to rank+1 and receives from rank-1: counts 0, 1, 1001 and 4 MiB,
 *             asynchronous (isend and irecv, waited in either order) and blocking (even ranks
 *             send first, odd ranks receive first).
 *   many      every rank isends three messages (tags 0, 1 and 0 again) to every peer, then
 *             irecvs them all, then waits in reverse order: nothing is matched before both
 *             sides posted, and no post order deadlocks.
 *   order     eight messages of different sizes on one pair and tag: some receives posted
 *             before the sends, some after, waited out of order: the n-th receive gets the
 *             n-th send.
 *   tags      the sender isends tag 1 then sends tag 2 (blocking); the receiver receives tag 2
 *             (blocking) before it posts tag 1: tags match independently.
 *   dtypes    every dtype at counts 1, 5 and 1003; a pair whose dtypes differ but whose bytes
 *             agree (float32 x 4 into uint8 x 16) is fine.
 *   mismatch  rank 0 sends 16 bytes that rank 1 receives as 32: both get HVD_ERR_MISMATCH
 *             naming both ranks and both sizes; the next message on that pair and tag works.
 *   invalid   self, out-of-range and negative peers, a negative tag, a NULL buffer, a NULL
 *             handle, an unknown dtype: HVD_ERR_INVALID_ARG naming the argument, and nothing
 *             enqueued (a ring afterwards matches as if they never happened).
 *   mixed     a thread runs blocking allreduces while the main thread sends and receives,
 *             with named asynchronous allreduces posted among the messages: every result
 *             exact.
 *   stall     rank 1 posts its receive of "p2p:0->1:tag=77:#0" only after --delay-ms (the
 *             test checks that the stall inspector named it); then both complete.
 *   peer_death (--dir D) rank 1 _exit(3)s while rank 0 waits on a receive from it; rank 0
 *             writes its wait's status and message to D/rank.0 (SIGTERM held).
 *
 * A failed check prints "FAIL p2p_check <scenario> [rank R of N] line L: ..." and exits 1.
 * Rank 0 prints "p2p_check <scenario>: ok (...)" when every check passed. */
#include <hvd/hvd.h>

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RANK_CHECK_PROGRAM "p2p_check"
#include "rank_check.h"

#define GUARD 16
#define SENTINEL 0xa5

static long long g_bytes; /* bytes compared */

static struct {
    const char *dir;
    int delay_ms;
} opt = {NULL, 3000};

static void init_hvd(void) {
    OK(hvd_init());
    g_rank = hvd_rank();
    g_size = hvd_size();
    CHECK(g_rank >= 0 && g_size >= 1 && g_rank < g_size, "rank %d of %d", g_rank, g_size);
}

static int next(int d) {
    return (g_rank + d + g_size) % g_size;
}

/* ---- messages ------------------------------------------------------------------------- */

/* Byte i of the n-th message from src to dst with tag. */
static uint8_t pattern(int src, int dst, int tag, int n, size_t i) {
    uint64_t h = (uint64_t)src * 1000003u ^ (uint64_t)dst * 10007u ^ (uint64_t)tag * 101u ^
                 (uint64_t)n * 7919u;
    h += i * 0x9e3779b97f4a7c15ull;
    return (uint8_t)(h >> 56);
}

typedef struct {
    int peer, tag, n, sending;
    size_t bytes;
    uint8_t *buf; /* bytes + GUARD */
    hvd_handle_t h;
} msg_t;

/* A message of bytes bytes: a send filled with its pattern, a receive with sentinels. */
static void msg_init(msg_t *m, int sending, int peer, int tag, int n, size_t bytes) {
    m->peer = peer;
    m->tag = tag;
    m->n = n;
    m->sending = sending;
    m->bytes = bytes;
    m->buf = xmalloc(bytes + GUARD);
    memset(m->buf, SENTINEL, bytes + GUARD);
    if (sending)
        for (size_t i = 0; i < bytes; i++)
            m->buf[i] = pattern(g_rank, peer, tag, n, i);
}

/* The receive holds the n-th message from its peer, and nothing past it; a send's buffer is
 * unchanged. */
static void msg_check(const msg_t *m, int line) {
    int src = m->sending ? g_rank : m->peer, dst = m->sending ? m->peer : g_rank;
    for (size_t i = 0; i < m->bytes; i++)
        if (m->buf[i] != pattern(src, dst, m->tag, m->n, i))
            fail_at(line, "%s %d->%d tag %d #%d (%zu bytes): byte %zu is 0x%02x, expected 0x%02x",
                    m->sending ? "send buffer" : "receive", src, dst, m->tag, m->n, m->bytes, i,
                    m->buf[i], pattern(src, dst, m->tag, m->n, i));
    for (size_t i = 0; i < GUARD; i++)
        if (m->buf[m->bytes + i] != SENTINEL)
            fail_at(line, "%d->%d tag %d #%d: guard byte %zu past %zu bytes was written", src, dst,
                    m->tag, m->n, i, m->bytes);
    g_bytes += (long long)m->bytes;
}

static void msg_fini(msg_t *m) {
    free(m->buf);
    m->buf = NULL;
}

/* Post m as count elements of dtype (bytes must be a multiple of its size). */
static void msg_post_as(msg_t *m, hvd_dtype_t dtype, size_t esize, int line) {
    hvd_status_t st = m->sending
                          ? hvd_send_async(m->buf, m->bytes / esize, dtype, m->peer, m->tag, &m->h)
                          : hvd_recv_async(m->buf, m->bytes / esize, dtype, m->peer, m->tag, &m->h);
    if (st != HVD_OK)
        fail_at(line, "posting %s peer %d tag %d: %s: %s", m->sending ? "send" : "recv", m->peer,
                m->tag, hvd_status_str(st), hvd_last_error());
}

static void msg_post(msg_t *m, int line) {
    msg_post_as(m, HVD_UINT8, 1, line);
}

static void msg_wait(msg_t *m, int line) {
    hvd_status_t st = hvd_wait(m->h);
    if (st != HVD_OK)
        fail_at(line, "waiting for %s peer %d tag %d #%d: %s: %s", m->sending ? "send" : "recv",
                m->peer, m->tag, m->n, hvd_status_str(st), hvd_last_error());
    msg_check(m, line);
}

/* ---- scenarios ------------------------------------------------------------------------ */

static const size_t ring_bytes[] = {0, 1, 1001 * 4, 4u << 20};

static int scenario_ring(void) {
    init_hvd();
    int n = 0; /* messages so far on (me -> next, tag 3) and (prev -> me, tag 3): the same */
    for (int round = 0; round < 2; round++) {
        for (size_t k = 0; k < sizeof ring_bytes / sizeof *ring_bytes; k++, n++) {
            msg_t s, r;
            msg_init(&s, 1, next(1), 3, n, ring_bytes[k]);
            msg_init(&r, 0, next(-1), 3, n, ring_bytes[k]);
            /* float32 where the size allows: counts in elements, 4 MiB = 1 Mi floats */
            int f = ring_bytes[k] % 4 == 0;
            if (round == 0) {
                msg_post_as(&s, f ? HVD_FLOAT32 : HVD_UINT8, f ? 4 : 1, __LINE__);
                msg_post_as(&r, f ? HVD_FLOAT32 : HVD_UINT8, f ? 4 : 1, __LINE__);
                msg_wait(&s, __LINE__);
                msg_wait(&r, __LINE__);
            } else {
                /* receive first, wait the receive first */
                msg_post(&r, __LINE__);
                msg_post(&s, __LINE__);
                msg_wait(&r, __LINE__);
                msg_wait(&s, __LINE__);
            }
            msg_fini(&s);
            msg_fini(&r);
        }
    }
    /* Blocking: even ranks send first, odd ranks receive first, so the ring unwinds (at an odd
     * size the last rank, even, sends to rank 0, which has sent already). */
    for (size_t k = 0; k < sizeof ring_bytes / sizeof *ring_bytes; k++, n++) {
        msg_t s, r;
        msg_init(&s, 1, next(1), 3, n, ring_bytes[k]);
        msg_init(&r, 0, next(-1), 3, n, ring_bytes[k]);
        if (g_rank % 2 == 0) {
            OK(hvd_send(s.buf, s.bytes, HVD_UINT8, s.peer, 3));
            OK(hvd_recv(r.buf, r.bytes, HVD_UINT8, r.peer, 3));
        } else {
            OK(hvd_recv(r.buf, r.bytes, HVD_UINT8, r.peer, 3));
            OK(hvd_send(s.buf, s.bytes, HVD_UINT8, s.peer, 3));
        }
        msg_check(&s, __LINE__);
        msg_check(&r, __LINE__);
        msg_fini(&s);
        msg_fini(&r);
    }
    return 0;
}

static int scenario_many(void) {
    init_hvd();
    int p = g_size, per = 3, total = 2 * per * (p - 1);
    msg_t *m = xmalloc((size_t)(total ? total : 1) * sizeof *m);
    for (int step = 0; step < 3; step++) {
        int k = 0;
        /* every send to every peer first: tags 0, 1, 0 (the second tag-0 message is #1) */
        for (int d = 1; d < p; d++)
            for (int j = 0; j < per; j++) {
                int tag = j == 1, nth = 2 * step + (j == 2);
                if (tag == 1)
                    nth = step;
                msg_init(&m[k], 1, next(d), tag, nth, (size_t)(100 * d + 7 * j + step));
                msg_post(&m[k++], __LINE__);
            }
        for (int d = 1; d < p; d++)
            for (int j = 0; j < per; j++) {
                int tag = j == 1, nth = 2 * step + (j == 2);
                if (tag == 1)
                    nth = step;
                /* the peer next(-d) sent to me as its next(d), at size 100 * d + ... */
                msg_init(&m[k], 0, next(-d), tag, nth, (size_t)(100 * d + 7 * j + step));
                msg_post(&m[k++], __LINE__);
            }
        for (k = total - 1; k >= 0; k--)
            msg_wait(&m[k], __LINE__);
        for (k = 0; k < total; k++)
            msg_fini(&m[k]);
    }
    free(m);
    return 0;
}

static int scenario_order(void) {
    init_hvd();
    enum { N = 8 };
    static const size_t sizes[N] = {5, 0, 70000, 1, 3, 300000, 17, 2};
    if (g_size < 2)
        return 0;
    msg_t s[N], r[N];
    for (int i = 0; i < N; i++) {
        msg_init(&s[i], 1, next(1), 9, i, sizes[i]);
        msg_init(&r[i], 0, next(-1), 9, i, sizes[i]);
    }
    /* receives 0..3 before any send, then the sends, then receives 4..7 */
    for (int i = 0; i < 4; i++)
        msg_post(&r[i], __LINE__);
    for (int i = 0; i < N; i++)
        msg_post(&s[i], __LINE__);
    for (int i = 4; i < N; i++)
        msg_post(&r[i], __LINE__);
    static const int wait_order[N] = {5, 2, 7, 0, 1, 6, 3, 4};
    for (int i = 0; i < N; i++)
        msg_wait(&r[wait_order[i]], __LINE__);
    for (int i = N - 1; i >= 0; i--)
        msg_wait(&s[i], __LINE__);
    for (int i = 0; i < N; i++) {
        msg_fini(&s[i]);
        msg_fini(&r[i]);
    }
    return 0;
}

static int scenario_tags(void) {
    init_hvd();
    /* pairs (0,1), (2,3), ...: the even rank sends, the odd one receives; then the reverse */
    for (int dir = 0; dir < 2; dir++) {
        int partner = g_rank ^ 1;
        if (partner >= g_size)
            continue;
        int sender = (g_rank % 2 == 0) == (dir == 0);
        msg_t a, b;
        msg_init(&a, sender, partner, 1, dir, 1000 + (size_t)dir);
        msg_init(&b, sender, partner, 2, dir, 64 + (size_t)dir);
        if (sender) {
            msg_post(&a, __LINE__);                              /* tag 1, async */
            OK(hvd_send(b.buf, b.bytes, HVD_UINT8, partner, 2)); /* tag 2, blocking */
            msg_wait(&a, __LINE__);
        } else {
            OK(hvd_recv(b.buf, b.bytes, HVD_UINT8, partner, 2)); /* tag 2 before tag 1 */
            msg_check(&b, __LINE__);
            msg_post(&a, __LINE__);
            msg_wait(&a, __LINE__);
        }
        msg_fini(&a);
        msg_fini(&b);
    }
    return 0;
}

static int scenario_dtypes(void) {
    init_hvd();
    static const struct {
        hvd_dtype_t dt;
        size_t size;
    } dts[] = {{HVD_UINT8, 1},   {HVD_INT8, 1},  {HVD_UINT16, 2},  {HVD_INT16, 2},
               {HVD_INT32, 4},   {HVD_INT64, 8}, {HVD_FLOAT16, 2}, {HVD_FLOAT32, 4},
               {HVD_FLOAT64, 8}, {HVD_BOOL, 1},  {HVD_BFLOAT16, 2}};
    static const size_t counts[] = {1, 5, 1003};
    int n = 0;
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        CHECK(hvd_dtype_size(dts[d].dt) == dts[d].size, "dtype %d size", (int)dts[d].dt);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++, n++) {
            msg_t s, r;
            msg_init(&s, 1, next(1), 4, n, counts[c] * dts[d].size);
            msg_init(&r, 0, next(-1), 4, n, counts[c] * dts[d].size);
            msg_post_as(&r, dts[d].dt, dts[d].size, __LINE__);
            msg_post_as(&s, dts[d].dt, dts[d].size, __LINE__);
            msg_wait(&s, __LINE__);
            msg_wait(&r, __LINE__);
            msg_fini(&s);
            msg_fini(&r);
        }
    }
    /* different dtypes, the same bytes: a message is bytes */
    msg_t s, r;
    msg_init(&s, 1, next(1), 4, n, 16);
    msg_init(&r, 0, next(-1), 4, n, 16);
    msg_post_as(&s, HVD_FLOAT32, 4, __LINE__);
    msg_post_as(&r, HVD_UINT8, 1, __LINE__);
    msg_wait(&s, __LINE__);
    msg_wait(&r, __LINE__);
    msg_fini(&s);
    msg_fini(&r);
    return 0;
}

static int scenario_mismatch(void) {
    init_hvd();
    if (g_rank <= 1) {
        float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        hvd_handle_t h;
        if (g_rank == 0)
            OK(hvd_send_async(buf, 4, HVD_FLOAT32, 1, 5, &h));
        else
            OK(hvd_recv_async(buf, 8, HVD_FLOAT32, 0, 5, &h));
        EXPECT(HVD_ERR_MISMATCH, hvd_wait(h));
        const char *msg = hvd_last_error();
        HAS(msg, "rank 0 sends 16 bytes");
        HAS(msg, "rank 1 receives 32 bytes");
        HAS(msg, "to rank 1");
        HAS(msg, "from rank 0");
        if (g_rank == 1)
            CHECK(buf[0] == 1 && buf[7] == 8, "a mismatched receive wrote its buffer");
    }
    /* The pair and every other rank go on: a ring, and the next message on (0, 1, tag 5). */
    msg_t s, r;
    msg_init(&s, 1, next(1), 3, 0, 333);
    msg_init(&r, 0, next(-1), 3, 0, 333);
    msg_post(&s, __LINE__);
    msg_post(&r, __LINE__);
    msg_wait(&r, __LINE__);
    msg_wait(&s, __LINE__);
    msg_fini(&s);
    msg_fini(&r);
    if (g_rank <= 1) {
        msg_t m;
        msg_init(&m, g_rank == 0, 1 - g_rank, 5, 1, 40);
        msg_post(&m, __LINE__);
        msg_wait(&m, __LINE__);
        msg_fini(&m);
    }
    float x = (float)g_rank, sum = 0;
    OK(hvd_allreduce(&x, &sum, 1, HVD_FLOAT32, HVD_SUM));
    CHECK(sum == (float)(g_size * (g_size - 1) / 2), "allreduce after the mismatch: %g", sum);
    return 0;
}

static int scenario_invalid(void) {
    init_hvd();
    uint8_t buf[8] = {0};
    hvd_handle_t h = -7;
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send_async(buf, 8, HVD_UINT8, g_rank, 0, &h));
    HAS(hvd_last_error(), "this rank itself");
    EXPECT(HVD_ERR_INVALID_ARG, hvd_recv_async(buf, 8, HVD_UINT8, g_rank, 0, &h));
    HAS(hvd_last_error(), "src");
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send_async(buf, 8, HVD_UINT8, g_size, 0, &h));
    char want[64];
    snprintf(want, sizeof want, "dst %d is not a rank of the job of %d", g_size, g_size);
    HAS(hvd_last_error(), want);
    EXPECT(HVD_ERR_INVALID_ARG, hvd_recv_async(buf, 8, HVD_UINT8, -1, 0, &h));
    HAS(hvd_last_error(), "src -1 is not a rank");
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send(buf, 8, HVD_UINT8, g_size + 5, 0));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_recv(buf, 8, HVD_UINT8, -3, 0));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send_async(buf, 8, HVD_UINT8, next(1), -1, &h));
    HAS(hvd_last_error(), "tag -1 is negative");
    EXPECT(HVD_ERR_INVALID_ARG, hvd_recv(buf, 8, HVD_UINT8, next(-1), -5));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send_async(NULL, 8, HVD_UINT8, next(1), 0, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_recv_async(NULL, 1, HVD_INT32, next(-1), 0, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send_async(buf, 8, HVD_UINT8, next(1), 0, NULL));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_send_async(buf, 1, (hvd_dtype_t)99, next(1), 0, &h));
    HAS(hvd_last_error(), "unknown dtype");
    CHECK(h == -7, "a failed post wrote the handle");
    /* NULL with count 0 is valid (moves nothing) */
    if (g_size > 1) {
        hvd_handle_t hs, hr;
        OK(hvd_send_async(NULL, 0, HVD_FLOAT64, next(1), 0, &hs));
        OK(hvd_recv_async(NULL, 0, HVD_FLOAT64, next(-1), 0, &hr));
        OK(hvd_wait(hs));
        OK(hvd_wait(hr));
        /* nothing above was enqueued: this is message #1 of tag 0 on both sides */
        msg_t s, r;
        msg_init(&s, 1, next(1), 0, 1, 77);
        msg_init(&r, 0, next(-1), 0, 1, 77);
        msg_post(&r, __LINE__);
        msg_post(&s, __LINE__);
        msg_wait(&s, __LINE__);
        msg_wait(&r, __LINE__);
        msg_fini(&s);
        msg_fini(&r);
    }
    OK(hvd_shutdown());
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_send_async(buf, 8, HVD_UINT8, 0, 0, &h));
    OK(hvd_init());
    return 0;
}

/* ---- mixed: allreduces on another thread and named ones among the messages ---------- */

static volatile int g_stop_thread;

static void *allreduce_thread(void *arg) {
    (void)arg;
    for (int it = 0; it < 60; it++) {
        size_t count = (size_t)(1 + (it * 997) % 50000);
        int32_t *x = xmalloc(count * sizeof *x), *y = xmalloc(count * sizeof *y);
        for (size_t i = 0; i < count; i++)
            x[i] = (int32_t)(g_rank * 3 + (int)(i % 101) + it);
        OK(hvd_allreduce(x, y, count, HVD_INT32, HVD_SUM));
        for (size_t i = 0; i < count; i++) {
            int32_t want =
                (int32_t)(3 * g_size * (g_size - 1) / 2 + g_size * ((int)(i % 101) + it));
            if (y[i] != want)
                fail_at(__LINE__, "blocking allreduce %d: [%zu] = %d, expected %d", it, i, y[i],
                        want);
        }
        free(x);
        free(y);
    }
    g_stop_thread = 1;
    return NULL;
}

static int scenario_mixed(void) {
    init_hvd();
    pthread_t th;
    CHECK(pthread_create(&th, NULL, allreduce_thread, NULL) == 0, "pthread_create");
    for (int step = 0; step < 40; step++) {
        size_t bytes = (size_t)(1 + (step * 7919) % 200000);
        msg_t s, r;
        msg_init(&s, 1, next(1), 6, step, bytes);
        msg_init(&r, 0, next(-1), 6, step, bytes);
        double a[33], b[33];
        for (int i = 0; i < 33; i++)
            a[i] = g_rank + i + step;
        char name[32];
        snprintf(name, sizeof name, "mixed.%d", step % 4);
        hvd_handle_t ha;
        msg_post(&s, __LINE__);
        OK(hvd_allreduce_async(name, a, b, 33, HVD_FLOAT64, HVD_SUM, &ha));
        msg_post(&r, __LINE__);
        msg_wait(&r, __LINE__);
        OK(hvd_wait(ha));
        for (int i = 0; i < 33; i++) {
            double want = (double)g_size * (g_size - 1) / 2 + (double)g_size * (i + step);
            CHECK(b[i] == want, "allreduce %s [%d] = %g, expected %g", name, i, b[i], want);
        }
        msg_wait(&s, __LINE__);
        msg_fini(&s);
        msg_fini(&r);
    }
    pthread_join(th, NULL);
    CHECK(g_stop_thread, "the allreduce thread did not finish");
    return 0;
}

static int scenario_stall(void) {
    init_hvd();
    if (g_rank <= 1) {
        msg_t m;
        msg_init(&m, g_rank == 0, 1 - g_rank, 77, 0, 1234);
        if (g_rank == 1)
            sleep_ms(opt.delay_ms);
        msg_post(&m, __LINE__);
        msg_wait(&m, __LINE__);
        msg_fini(&m);
    }
    OK(hvd_barrier());
    return 0;
}

static int scenario_peer_death(void) {
    CHECK(opt.dir, "peer_death needs --dir");
    /* horovodrun terminates the survivors once the victim's exit is seen: hold SIGTERM until
     * the result is written (tests/e2e/test_core_faults.sh does the same). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    init_hvd();
    OK(hvd_barrier());
    if (g_rank == 1) {
        sleep_ms(500);
        _exit(3);
    }
    if (g_rank != 0) {
        sleep_ms(30000);
        return 0;
    }
    uint8_t buf[64];
    double t0 = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    hvd_status_t st = hvd_recv(buf, sizeof buf, HVD_UINT8, 1, 0);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double took = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
    char path[4096];
    snprintf(path, sizeof path, "%s/rank.0", opt.dir);
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot write %s", path);
    fprintf(f, "status=%s\nmsg=%s\nseconds=%.1f\n", hvd_status_str(st),
            st == HVD_OK ? "" : hvd_last_error(), took);
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: p2p_check SCENARIO [--dir D] [--delay-ms T]\n");
        return 2;
    }
    g_scn = argv[1];
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            opt.dir = argv[++i];
        else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc)
            opt.delay_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "p2p_check: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    static const struct {
        const char *name;
        int (*fn)(void);
    } scenarios[] = {{"ring", scenario_ring},       {"many", scenario_many},
                     {"order", scenario_order},     {"tags", scenario_tags},
                     {"dtypes", scenario_dtypes},   {"mismatch", scenario_mismatch},
                     {"invalid", scenario_invalid}, {"mixed", scenario_mixed},
                     {"stall", scenario_stall},     {"peer_death", scenario_peer_death}};
    for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++) {
        if (strcmp(g_scn, scenarios[i].name) != 0)
            continue;
        int rc = scenarios[i].fn();
        if (rc == 0 && strcmp(g_scn, "peer_death") != 0) {
            OK(hvd_barrier());
            if (g_rank == 0)
                printf("p2p_check %s: ok (np %d, %lld bytes compared on rank 0)\n", g_scn, g_size,
                       g_bytes);
            OK(hvd_shutdown());
        }
        return rc;
    }
    fprintf(stderr, "p2p_check: unknown scenario %s\n", g_scn);
    return 2;
}
