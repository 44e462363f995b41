/* Ranks as threads over real TCP on loopback: each thread builds its own listener, tcp
 * transport and global group, as hvd_init does for processes. Checks the control-plane
 * gather and broadcast (sizes only the sender knows, allocated by the receiver after the
 * bound check), an oversized message rejected with its sender named and the failure
 * reaching every rank, and an allreduce on the same group. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "collectives/coll.h"
#include "collectives/control.h"
#include "os/socket.h"
#include "transport/tcp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 4 };

typedef struct {
    int rank;
    int oversized; /* this scenario sends rank 1's message over the bound */
    hvd_status_t gather_st, bcast_st, allreduce_st;
    char error[512];
    int ok; /* the data checks passed */
} rank_t;

static hvd_tcp_peer_addr_t addrs[N];
static int listen_fds[N];
static hvd_secret_t secret;
static pthread_barrier_t ready;

static void *run_rank(void *arg) {
    rank_t *me = arg;
    int r = me->rank;
    pthread_barrier_wait(&ready); /* every listener exists */
    hvd_tcp_config_t cfg = {.rank = r,
                            .size = N,
                            .peers = addrs,
                            .listen_fd = listen_fds[r],
                            .secret = &secret,
                            .timeout_ms = 10000,
                            .busy_poll_us = 200,
                            .yield_when_idle = 1};
    hvd_transport_t *tp;
    if (hvd__tcp_create(&cfg, &tp) != HVD_OK)
        return NULL;
    int members[N] = {0, 1, 2, 3};
    hvd_group_t g;
    hvd__group_init(&g, tp, "global", members, N, r);
    /* gather to rank 0: rank r sends r * 1000 + 5 bytes of value r */
    size_t len = (size_t)r * 1000 + 5;
    if (me->oversized && r == 1)
        len = 70000;
    uint8_t *mine = malloc(len);
    memset(mine, r, len);
    uint8_t *bufs[N];
    size_t lens[N];
    me->gather_st = hvd__control_gather(&g, 0, mine, len, 65536, r == 0 ? bufs : NULL,
                                        r == 0 ? lens : NULL, "gather test");
    if (me->gather_st != HVD_OK)
        snprintf(me->error, sizeof me->error, "%s", hvd_last_error());
    int ok = 1;
    if (r == 0) {
        for (int k = 0; k < N; k++) {
            if (me->gather_st == HVD_OK) {
                ok &= lens[k] == (size_t)k * 1000 + 5;
                for (size_t i = 0; ok && i < lens[k]; i++)
                    ok &= bufs[k][i] == k;
            }
            free(bufs[k]);
        }
    }
    free(mine);
    if (me->gather_st == HVD_OK) {
        /* broadcast from rank 2 */
        uint8_t *buf = NULL;
        size_t blen = 0;
        if (r == 2) {
            blen = 10007;
            buf = malloc(blen);
            for (size_t i = 0; i < blen; i++)
                buf[i] = (uint8_t)(i * 7);
        }
        me->bcast_st = hvd__control_bcast(&g, 2, &buf, &blen, 65536, "bcast test");
        if (me->bcast_st == HVD_OK) {
            ok &= blen == 10007;
            for (size_t i = 0; ok && i < blen; i++)
                ok &= buf[i] == (uint8_t)(i * 7);
        }
        free(buf);
        /* and a collective on the same group */
        float x[70000];
        for (int i = 0; i < 70000; i++)
            x[i] = (float)(r + i % 5);
        me->allreduce_st = hvd__coll_allreduce(&g, x, x, 70000, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
        for (int i = 0; me->allreduce_st == HVD_OK && i < 70000; i++)
            ok &= x[i] == (float)(6 + 4 * (i % 5));
    }
    me->ok = ok;
    hvd__group_fini(&g);
    tp->ops->destroy(tp);
    return NULL;
}

static void run(rank_t *ranks, int oversized) {
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    for (int r = 0; r < N; r++) {
        assert_int_equal(hvd__socket_listen("127.0.0.1", 16, &listen_fds[r], &addrs[r].port),
                         HVD_OK);
        snprintf(addrs[r].addr, sizeof addrs[r].addr, "127.0.0.1");
        snprintf(addrs[r].host, sizeof addrs[r].host, "thread%d", r);
    }
    pthread_barrier_init(&ready, NULL, N);
    pthread_t th[N];
    for (int r = 0; r < N; r++) {
        ranks[r] = (rank_t){.rank = r, .oversized = oversized};
        pthread_create(&th[r], NULL, run_rank, &ranks[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&ready);
}

static void test_gather_bcast_allreduce(void **state) {
    (void)state;
    rank_t ranks[N];
    run(ranks, 0);
    for (int r = 0; r < N; r++) {
        assert_int_equal(ranks[r].gather_st, HVD_OK);
        assert_int_equal(ranks[r].bcast_st, HVD_OK);
        assert_int_equal(ranks[r].allreduce_st, HVD_OK);
        assert_true(ranks[r].ok);
    }
}

static void test_oversized_message_fails_everywhere(void **state) {
    (void)state;
    rank_t ranks[N];
    run(ranks, 1);
    assert_int_equal(ranks[0].gather_st, HVD_ERR_PROTOCOL);
    assert_non_null(strstr(ranks[0].error, "rank 1 (host thread1) sent a 70000-byte message"));
    /* The senders' gather may well have finished (their bytes were in flight); the failure
     * reaches each of them by the next collective that needs rank 0, the allreduce at the
     * latest. */
    for (int r = 1; r < N; r++)
        assert_true(ranks[r].gather_st != HVD_OK || ranks[r].bcast_st != HVD_OK ||
                    ranks[r].allreduce_st != HVD_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_bcast_allreduce),
        cmocka_unit_test(test_oversized_message_fails_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
