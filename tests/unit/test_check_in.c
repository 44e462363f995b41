/* The check-in (core/check_in.h) of a whole job played by threads, each with its own context,
 * against the real rendezvous server:
 *   - with the launcher's plan published (a static horovodrun launch of more than
 *     HVD_CHECK_IN_ALL_MAX ranks; the contexts here have 0): every rank gets every
 *     rank's place from the plan, the count of ranks on its machine (unless its host alone
 *     outnumbers the cores), and no address until it resolves it; the resolver reads single
 *     records, checked against the plan, and the whole scope once after LOOKUPS_BEFORE_SCOPE;
 *   - without a plan, with one that does not give a rank its environment's place, or in a
 *     job no bigger than HVD_CHECK_IN_ALL_MAX: every rank reads every record;
 *   - a rank missing: the others time out naming it; the launcher's abort key ends the wait. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "core/check_in.h"
#include "core/context.h"
#include "os/hostinfo.h"
#include "rendezvous/kv_protocol.h"
#include "runner/rendezvous/kv_server.h"
#include "rendezvous/rank_plan.h"
#include "runner/hosts/hosts.h"
#include "runner/hosts/store_scopes.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RANKS 48

static hvd_secret_t secret;
static hvd_kv_server_t *server;

typedef struct {
    hvd_context_t c;
    hvd_rank_info_t infos[MAX_RANKS];
    int on_machine, lazy;
    hvd_status_t st;
    char error[1024];
} rank_t;

static rank_t ranks[MAX_RANKS];

/* The job "hosts" (as -H) at np, its ranks' contexts as horovodrun's environment makes them. */
static void start(const char *hosts_text, int np, int publish, int timeout_s) {
    hvd_host_list_t hosts;
    hvd_slot_plan_t plan;
    assert_int_equal(hvd__hosts_parse(hosts_text, &hosts), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&hosts, np, &plan), HVD_OK);
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    hvd_kv_server_config_t kc = {.bind_addr = "127.0.0.1", .secret = &secret};
    assert_int_equal(hvd__kv_server_start(&kc, &server), HVD_OK);
    assert_int_equal(
        hvd__store_scopes_declare(server, &plan, publish ? HVD_RANK_PLAN_STATIC_KEY : NULL),
        HVD_OK);
    memset(ranks, 0, sizeof ranks);
    for (int r = 0; r < np; r++) {
        hvd_context_t *c = &ranks[r].c;
        const hvd_slot_t *sl = &plan.slots[r];
        c->params.rank = r;
        c->params.size = np;
        c->params.local_rank = sl->local_rank;
        c->params.local_size = sl->local_size;
        c->params.cross_rank = sl->cross_rank;
        c->params.cross_size = sl->cross_size;
        c->params.hostname = strdup(sl->host);
        c->params.rendezvous_addr = strdup("127.0.0.1");
        c->params.rendezvous_port = hvd__kv_server_port(server);
        c->params.gloo_timeout_seconds = timeout_s;
        assert_int_equal(
            hvd__store_client_create("127.0.0.1", c->params.rendezvous_port, &secret, &c->store),
            HVD_OK);
    }
    hvd__slot_plan_fini(&plan);
    hvd__hosts_fini(&hosts);
}

static void stop(int np) {
    for (int r = 0; r < np; r++) {
        hvd__store_client_destroy(ranks[r].c.store);
        free(ranks[r].c.params.hostname);
        free(ranks[r].c.params.rendezvous_addr);
    }
    hvd__kv_server_stop(server);
}

static void *check_in_thread(void *arg) {
    rank_t *k = arg;
    char addr[16];
    snprintf(addr, sizeof addr, "10.0.0.%d", (k->c.params.rank + 1) & 0xff);
    k->st =
        hvd__check_in(&k->c, addr, 20000 + k->c.params.rank, k->infos, &k->on_machine, &k->lazy);
    snprintf(k->error, sizeof k->error, "%s", hvd_last_error());
    return NULL;
}

/* Check ranks [0, np) in, skipping rank `absent` (-1: none). */
static void run(int np, int absent) {
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < np; r++)
        if (r != absent)
            assert_int_equal(pthread_create(&th[r], NULL, check_in_thread, &ranks[r]), 0);
    for (int r = 0; r < np; r++)
        if (r != absent)
            pthread_join(th[r], NULL);
}

/* Every rank's place as hosts.c gives it, for rank `from`'s view. */
static void check_places(int np, int from) {
    const hvd_rank_info_t *in = ranks[from].infos;
    for (int r = 0; r < np; r++) {
        assert_string_equal(in[r].addr.host, ranks[r].c.params.hostname);
        assert_int_equal(in[r].local_rank, ranks[r].c.params.local_rank);
        assert_int_equal(in[r].cross_rank, ranks[r].c.params.cross_rank);
    }
}

static void test_planned(void **state) {
    (void)state;
    const int np = 40; /* 1 on h0, 39 on h1: a machine with two "hosts" */
    start("h0:1,h1:39", np, 1, 20);
    run(np, -1);
    for (int r = 0; r < np; r++) {
        if (ranks[r].st != HVD_OK)
            fail_msg("rank %d: %s", r, ranks[r].error);
        assert_int_equal(ranks[r].lazy, 1);
        /* one machine runs every rank here, whatever the host names; a host with more ranks
         * than the machine has cores does not ask (it is oversubscribed already) */
        int slots = r < 1 ? 1 : 39;
        assert_int_equal(ranks[r].on_machine, slots > hvd__hostinfo_cpus() ? slots : np);
        check_places(np, r);
        /* no address is read at check-in, this host's ranks' neither */
        for (int q = 0; q < np; q++)
            if (ranks[r].infos[q].addr.port != 0)
                fail_msg("rank %d knows rank %d's address", r, q);
        assert_string_equal(ranks[r].c.check_in.machine, ranks[0].c.check_in.machine);
        assert_true(ranks[r].c.check_in.pid_ns != 0);
    }
    /* rank 0 resolves every other rank one by one: single reads, then the scope; each record
     * is checked against the host the plan gives its rank */
    hvd_context_t *c = &ranks[0].c;
    assert_string_equal(c->check_in.scope, "init.0");
    char *hosts[MAX_RANKS];
    for (int q = 0; q < np; q++)
        hosts[q] = ranks[q].c.params.hostname;
    c->hosts = hosts;
    hvd_tcp_peer_addr_t addrs[MAX_RANKS];
    for (int q = 0; q < np; q++)
        addrs[q] = ranks[0].infos[q].addr;
    for (int q = 1; q < np; q++) {
        if (addrs[q].port == 0)
            assert_int_equal(hvd__check_in_resolve(c, q, addrs), HVD_OK);
        assert_int_equal(addrs[q].port, 20000 + q);
        char want[16];
        snprintf(want, sizeof want, "10.0.0.%d", (q + 1) & 0xff);
        assert_string_equal(addrs[q].addr, want);
    }
    assert_int_equal(c->check_in.scanned, 1);
    assert_true(c->check_in.lookups <= 33);
    /* one record: where its rank runs (this process, in this pid namespace) */
    hvd_rank_info_t info;
    assert_int_equal(hvd__check_in_record(c, 7, &info), HVD_OK);
    assert_int_equal(info.pid, (long)getpid());
    assert_int_equal(info.pid_ns, c->check_in.pid_ns);
    assert_string_equal(info.machine, c->check_in.machine);
    /* a record on another host than the plan's is refused, naming both */
    hosts[7] = "h9";
    addrs[7].port = 0;
    assert_int_equal(hvd__check_in_resolve(c, 7, addrs), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "puts it on host h1, the launcher's plan on h9"));
    hosts[7] = ranks[7].c.params.hostname;
    /* a rank that never checked in cannot be resolved: the error names it and the store */
    addrs[39].port = 0;
    c->check_in.scope[4] = '9'; /* init.9: another generation, where nobody checked in */
    assert_int_equal(hvd__check_in_resolve(c, 39, addrs), HVD_ERR_NOT_FOUND);
    assert_non_null(strstr(hvd_last_error(), "could not learn where rank 39 listens"));
    c->hosts = NULL;
    stop(np);
}

static void test_every_record(void **state) {
    (void)state;
    /* no plan published (elastic rounds, mpirun): every record */
    start("h0:2,h1:3", 5, 0, 20);
    run(5, -1);
    for (int r = 0; r < 5; r++) {
        if (ranks[r].st != HVD_OK)
            fail_msg("rank %d: %s", r, ranks[r].error);
        assert_int_equal(ranks[r].lazy, 0);
        assert_int_equal(ranks[r].on_machine, 5);
        check_places(5, r);
        for (int q = 0; q < 5; q++)
            assert_int_equal(ranks[r].infos[q].addr.port, 20000 + q);
    }
    stop(5);
    /* a plan published, but a job no bigger than HVD_CHECK_IN_ALL_MAX: every record */
    start("h0:2,h1:3", 5, 1, 20);
    for (int r = 0; r < 5; r++)
        ranks[r].c.params.check_in_all_max = 5;
    run(5, -1);
    for (int r = 0; r < 5; r++) {
        if (ranks[r].st != HVD_OK)
            fail_msg("rank %d: %s", r, ranks[r].error);
        assert_int_equal(ranks[r].lazy, 0);
        assert_int_equal(ranks[r].infos[(r + 3) % 5].addr.port, 20000 + (r + 3) % 5);
    }
    stop(5);
    /* a plan that does not give the ranks their environment's place: every record too */
    start("h0:2,h1:3", 5, 1, 20);
    for (int r = 0; r < 5; r++) {
        free(ranks[r].c.params.hostname);
        ranks[r].c.params.hostname = strdup(r < 2 ? "other0" : "other1");
    }
    run(5, -1);
    for (int r = 0; r < 5; r++) {
        if (ranks[r].st != HVD_OK)
            fail_msg("rank %d: %s", r, ranks[r].error);
        assert_int_equal(ranks[r].lazy, 0);
        assert_string_equal(ranks[r].infos[4].addr.host, "other1");
    }
    stop(5);
}

static void test_missing_rank(void **state) {
    (void)state;
    for (int publish = 0; publish <= 1; publish++) {
        /* rank 2 never comes: the others give up a timeout after the latest arrival, naming it */
        start("h0:2,h1:2", 4, publish, 1);
        int64_t t0 = hvd__clock_now_ms();
        run(4, 2);
        int64_t took = hvd__clock_now_ms() - t0;
        assert_true(took < 4000);
        for (int r = 0; r < 4; r++) {
            if (r == 2)
                continue;
            assert_int_equal(ranks[r].st, HVD_ERR_TIMEOUT);
            if (!strstr(ranks[r].error, "ranks 2 (1 of 4 missing) never did"))
                fail_msg("rank %d (plan %d): %s", r, publish, ranks[r].error);
        }
        stop(4);
        /* the launcher's abort key ends the wait at once, with its cause */
        start("h0:2,h1:2", 4, publish, 30);
        assert_int_equal(hvd__kv_store_put(hvd__kv_server_store(server), "init.0", HVD_KV_ABORT_KEY,
                                           "rank 2 was killed", 17),
                         HVD_OK);
        t0 = hvd__clock_now_ms();
        run(4, 2);
        assert_true(hvd__clock_now_ms() - t0 < 5000);
        for (int r = 0; r < 4; r++) {
            if (r == 2)
                continue;
            assert_int_equal(ranks[r].st, HVD_ERR_PEER_LOST);
            assert_non_null(strstr(ranks[r].error, "rank 2 was killed"));
        }
        stop(4);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planned),
        cmocka_unit_test(test_every_record),
        cmocka_unit_test(test_missing_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
