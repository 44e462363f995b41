/* The tcp transport's interrupt (transport.h), which the elastic agent uses when the driver
 * ends a round: two ranks over loopback, rank 1 going silent after a first exchange.
 *   - an exchange waiting for the silent peer (deadline 60 s) fails within seconds once
 *     another thread interrupts it, with the interrupt's status and message;
 *   - the transport is poisoned: later exchanges fail at once with the same cause, and the
 *     peer's next exchange fails with it too (the ABORT frame that tcp_abort sends);
 *   - an exchange that starts after the interrupt fails at once; the wait descriptor polls
 *     readable; the first of two interrupts wins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "os/socket.h"
#include "transport/tcp.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hvd_tcp_peer_addr_t addrs[2];
static hvd_transport_t *tps[2];
static hvd_secret_t secret;

static void make_pair(void) {
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    int fds[2];
    for (int r = 0; r < 2; r++) {
        assert_int_equal(hvd__socket_listen("127.0.0.1", 16, &fds[r], &addrs[r].port), HVD_OK);
        snprintf(addrs[r].addr, sizeof addrs[r].addr, "127.0.0.1");
        snprintf(addrs[r].host, sizeof addrs[r].host, "thread%d", r);
    }
    for (int r = 0; r < 2; r++) {
        hvd_tcp_config_t cfg = {.rank = r,
                                .size = 2,
                                .peers = addrs,
                                .listen_fd = fds[r],
                                .secret = &secret,
                                .timeout_ms = 60000,
                                .busy_poll_us = 100};
        assert_int_equal(hvd__tcp_create(&cfg, &tps[r]), HVD_OK);
    }
}

static void destroy_pair(void) {
    for (int r = 0; r < 2; r++)
        tps[r]->ops->destroy(tps[r]);
}

typedef struct {
    int rank;
    int recv_only; /* wait for a message that never comes */
    hvd_status_t st;
    char error[1024];
    int64_t took_ms;
} xchg_t;

/* One exchange of rank me->rank with the other: send 8 bytes and receive 8 (or only
 * receive). */
static void *exchange(void *arg) {
    xchg_t *me = arg;
    uint64_t out = 42 + (uint64_t)me->rank, in = 0;
    hvd_xfer_t x[2];
    memset(x, 0, sizeof x);
    size_t n = 0;
    if (!me->recv_only) {
        x[n].peer = 1 - me->rank;
        x[n].is_send = 1;
        x[n].iov[0] = (struct iovec){&out, sizeof out};
        x[n++].iovcnt = 1;
    }
    x[n].peer = 1 - me->rank;
    x[n].iov[0] = (struct iovec){&in, sizeof in};
    x[n++].iovcnt = 1;
    int64_t t0 = hvd__clock_now_ms();
    me->st = tps[me->rank]->ops->exchange(tps[me->rank], x, n, "test exchange");
    me->took_ms = hvd__clock_now_ms() - t0;
    if (me->st != HVD_OK)
        snprintf(me->error, sizeof me->error, "%s", hvd_last_error());
    else if (in != 42 + (uint64_t)(1 - me->rank))
        me->st = HVD_ERR_PROTOCOL;
    return NULL;
}

static void both_exchange(void) {
    xchg_t a = {.rank = 0}, b = {.rank = 1};
    pthread_t t;
    pthread_create(&t, NULL, exchange, &b);
    exchange(&a);
    pthread_join(t, NULL);
    assert_int_equal(a.st, HVD_OK);
    assert_int_equal(b.st, HVD_OK);
}

static void test_interrupt_wakes_a_waiting_exchange(void **state) {
    (void)state;
    make_pair();
    both_exchange(); /* connected */
    /* rank 1 is now silent; rank 0 waits for it on another thread */
    xchg_t w = {.rank = 0, .recv_only = 1};
    pthread_t t;
    pthread_create(&t, NULL, exchange, &w);
    hvd__clock_sleep_ms(300); /* let it sleep in epoll (not an assertion) */
    tps[0]->ops->interrupt(tps[0], HVD_ERR_PEER_LOST, "the elastic driver ended round 3: gone");
    pthread_join(t, NULL);
    assert_int_equal(w.st, HVD_ERR_PEER_LOST);
    assert_non_null(strstr(w.error, "the elastic driver ended round 3: gone"));
    assert_non_null(strstr(w.error, "test exchange"));
    /* generous: the deadline it would otherwise hit is 60 s */
    if (w.took_ms > 10000)
        fail_msg("the interrupted exchange took %lld ms", (long long)w.took_ms);

    /* poisoned: the next exchange fails at once with the same cause */
    xchg_t again = {.rank = 0};
    exchange(&again);
    assert_int_equal(again.st, HVD_ERR_PEER_LOST);
    assert_non_null(strstr(again.error, "the elastic driver ended round 3: gone"));
    assert_true(again.took_ms < 1000);
    assert_int_equal(tps[0]->ops->health(tps[0]), HVD_ERR_PEER_LOST);

    /* and the peer hears of it: its next exchange fails with rank 0's cause */
    xchg_t peer = {.rank = 1};
    exchange(&peer);
    assert_int_equal(peer.st, HVD_ERR_PEER_LOST);
    assert_non_null(strstr(peer.error, "the elastic driver ended round 3: gone"));
    assert_non_null(strstr(peer.error, "rank 0 (host thread0)"));
    destroy_pair();
}

static void test_interrupt_before_exchange(void **state) {
    (void)state;
    make_pair();
    int wfd = tps[0]->ops->wait_fd(tps[0]);
    struct pollfd p = {.fd = wfd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0); /* nothing to see yet */
    tps[0]->ops->interrupt(tps[0], HVD_ERR_PEER_LOST, "first cause");
    tps[0]->ops->interrupt(tps[0], HVD_ERR_TIMEOUT, "second cause");
    assert_int_equal(poll(&p, 1, 0), 1); /* the engine's idle wait wakes */
    xchg_t x = {.rank = 0};
    exchange(&x);
    assert_int_equal(x.st, HVD_ERR_PEER_LOST);
    assert_non_null(strstr(x.error, "first cause"));
    assert_null(strstr(x.error, "second cause"));
    assert_true(x.took_ms < 1000);
    /* a non-error status still fails the exchange */
    tps[1]->ops->interrupt(tps[1], HVD_OK, "odd");
    xchg_t y = {.rank = 1, .recv_only = 1};
    exchange(&y);
    assert_true(y.st < 0);
    destroy_pair();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interrupt_wakes_a_waiting_exchange),
        cmocka_unit_test(test_interrupt_before_exchange),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
