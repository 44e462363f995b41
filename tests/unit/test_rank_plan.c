/* The slot plan the ranks read from the store (rendezvous/rank_plan.h): what the launcher
 * publishes gives every rank of every plan shape the place hosts.c's plan gives it; the
 * decoder rejects every malformed plan with an error naming what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/rendezvous/kv_server.h"
#include "rendezvous/rank_plan.h"
#include "runner/hosts/hosts.h"
#include "runner/hosts/store_scopes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_round_trip_and_places(void **state) {
    (void)state;
    const char *hosts[] = {"a", "node-07.example.org", "c"};
    int slots[] = {3, 1, 2};
    char *text;
    size_t len;
    assert_int_equal(hvd__rank_plan_encode(hosts, slots, 3, &text, &len), HVD_OK);
    assert_string_equal(text, "HVP1 3 6\n3 a\n1 node-07.example.org\n2 c\n");
    assert_int_equal(len, strlen(text));
    hvd_rank_plan_t plan;
    assert_int_equal(hvd__rank_plan_decode(text, len, &plan), HVD_OK);
    assert_int_equal(plan.size, 6);
    assert_int_equal(plan.count, 3);
    assert_string_equal(plan.hosts[1], "node-07.example.org");
    assert_int_equal(plan.first[2], 4);
    hvd_rank_place_t places[6];
    assert_int_equal(hvd__rank_plan_places(&plan, places), HVD_OK);
    /* rank: host, local rank/size, cross rank/size (local rank 0 on 3 hosts, 1 on 2, 2 on 1) */
    const int want[6][5] = {{0, 0, 3, 0, 3}, {0, 1, 3, 0, 2}, {0, 2, 3, 0, 1},
                            {1, 0, 1, 1, 3}, {2, 0, 2, 2, 3}, {2, 1, 2, 1, 2}};
    for (int r = 0; r < 6; r++) {
        assert_int_equal(places[r].host, want[r][0]);
        assert_int_equal(places[r].local_rank, want[r][1]);
        assert_int_equal(places[r].local_size, want[r][2]);
        assert_int_equal(places[r].cross_rank, want[r][3]);
        assert_int_equal(places[r].cross_size, want[r][4]);
    }
    hvd__rank_plan_fini(&plan);
    free(text);
}

/* Consecutive alike hosts go in one range, as Slurm writes node lists; what decodes is the
 * same list of hosts. */
static void test_ranges(void **state) {
    (void)state;
    const char *hosts[] = {"node01", "node02", "node03", "node04", "n8",     "n9",
                           "n10",    "x",      "node98", "node99", "node100"};
    int slots[] = {2, 2, 2, 1, 1, 1, 1, 1, 4, 4, 4};
    char *text;
    size_t len;
    assert_int_equal(hvd__rank_plan_encode(hosts, slots, 11, &text, &len), HVD_OK);
    assert_string_equal(text, "HVP1 11 23\n2 node[01-03]\n1 node04\n1 n[8-10]\n1 x\n"
                              "4 node[98-100]\n");
    hvd_rank_plan_t plan;
    assert_int_equal(hvd__rank_plan_decode(text, len, &plan), HVD_OK);
    assert_int_equal(plan.count, 11);
    assert_int_equal(plan.size, 23);
    for (size_t h = 0; h < 11; h++) {
        assert_string_equal(plan.hosts[h], hosts[h]);
        assert_int_equal(plan.slots[h], slots[h]);
    }
    assert_int_equal(plan.first[10], 19);
    hvd__rank_plan_fini(&plan);
    free(text);
    /* padded numbers stay in one range while they keep its width: p09..p99, then p100 */
    static char pnames[92][8];
    static const char *pad[92];
    static int ones[92];
    for (int i = 0; i < 92; i++) {
        snprintf(pnames[i], sizeof pnames[i], "p%02d", i + 9);
        pad[i] = pnames[i];
        ones[i] = 1;
    }
    assert_int_equal(hvd__rank_plan_encode(pad, ones, 92, &text, &len), HVD_OK);
    assert_string_equal(text, "HVP1 92 92\n1 p[09-99]\n1 p100\n");
    free(text);
    /* 2,048 nodes of 8: one line */
    static const char *many[2048];
    static int eight[2048];
    static char names[2048][16];
    for (int i = 0; i < 2048; i++) {
        snprintf(names[i], sizeof names[i], "sim%05d", i);
        many[i] = names[i];
        eight[i] = 8;
    }
    assert_int_equal(hvd__rank_plan_encode(many, eight, 2048, &text, &len), HVD_OK);
    assert_string_equal(text, "HVP1 2048 16384\n8 sim[00000-02047]\n");
    assert_int_equal(hvd__rank_plan_decode(text, len, &plan), HVD_OK);
    assert_string_equal(plan.hosts[2047], "sim02047");
    assert_int_equal(plan.first[2047], 16376);
    hvd__rank_plan_fini(&plan);
    free(text);
}

static void test_encode_refuses(void **state) {
    (void)state;
    char *text;
    size_t len;
    const char *spaced[] = {"a b"}, *empty[] = {""}, *bracket[] = {"a[1]"};
    int one[] = {1}, zero[] = {0};
    assert_int_equal(hvd__rank_plan_encode(spaced, one, 1, &text, &len), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__rank_plan_encode(empty, one, 1, &text, &len), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__rank_plan_encode(bracket, one, 1, &text, &len), HVD_ERR_INVALID_ARG);
    const char *a[] = {"a"};
    assert_int_equal(hvd__rank_plan_encode(a, zero, 1, &text, &len), HVD_ERR_INVALID_ARG);
}

static void test_decode_rejects(void **state) {
    (void)state;
    const char *bad[] = {
        "",                            /* empty */
        "HVP2 1 1\n1 a\n",             /* magic */
        "HVP1 1 1\n",                  /* no host line */
        "HVP1 1 2\n1 a\n",             /* hosts hold fewer ranks than the header */
        "HVP1 1 1\n2 a\n",             /* more */
        "HVP1 2 2\n1 a\n",             /* a host line missing */
        "HVP1 1 1\n1 a\nx",            /* bytes after the last line */
        "HVP1 1 1\n0 a\n",             /* a host with no rank */
        "HVP1 1 1\n1 a b\n",           /* a space in a name */
        "HVP1 1 1\n1 \n",              /* an empty name */
        "HVP1 1 1\n1 a",               /* no newline */
        "HVP1 0 0\n",                  /* no host */
        "HVP1 1 99999999999\n1 a\n",   /* a number too long */
        "HVP1 1000000 1000000\n1 a\n", /* more hosts than the bytes can hold */
        "HVP1 1 1\n1 a\x01\n",         /* a control byte */
        "HVP1 -1 1\n1 a\n",            /* a sign */
        "HVP1 2 2\n1 a[3-2]\n",        /* a range backwards */
        "HVP1 3 3\n1 a[08-100]\n",     /* padded numbers of another width */
        "HVP1 2 2\n1 a[1-2]x\n",       /* bytes after a range */
        "HVP1 2 2\n1 a[1-3]\n",        /* more hosts than the header's */
        "HVP1 2 2\n1 a[-2]\n",         /* no first number */
        "HVP1 2 2\n1 a[1-2\n",         /* unclosed */
        "HVP1 1 1\n1 a]\n",            /* a bracket in a name */
        "HVP1 2 3\n2 a[1-2]\n",        /* more ranks than the header's */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hvd_rank_plan_t plan;
        hvd_status_t st = hvd__rank_plan_decode(bad[i], strlen(bad[i]), &plan);
        if (st != HVD_ERR_PROTOCOL)
            fail_msg("plan %zu (%s) decoded with status %d", i, bad[i], st);
        assert_true(strlen(hvd_last_error()) > 0);
    }
}

/* What horovodrun publishes for a plan from hosts.c, read back as a rank reads it: every
 * rank's place is the launcher's, with fewer ranks than slots too. */
static void check_published(const char *hosts_text, int np) {
    hvd_host_list_t hosts;
    hvd_slot_plan_t plan;
    assert_int_equal(hvd__hosts_parse(hosts_text, &hosts), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&hosts, np, &plan), HVD_OK);
    hvd_secret_t secret;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    hvd_kv_server_config_t kc = {.bind_addr = "127.0.0.1", .secret = &secret};
    hvd_kv_server_t *server;
    assert_int_equal(hvd__kv_server_start(&kc, &server), HVD_OK);
    assert_int_equal(hvd__store_scopes_declare(server, &plan, HVD_RANK_PLAN_STATIC_KEY), HVD_OK);
    uint8_t *text;
    size_t len;
    assert_int_equal(hvd__kv_store_get(hvd__kv_server_store(server), HVD_RANK_PLAN_SCOPE,
                                       HVD_RANK_PLAN_STATIC_KEY, &text, &len),
                     HVD_OK);
    hvd_rank_plan_t rp;
    assert_int_equal(hvd__rank_plan_decode((const char *)text, len, &rp), HVD_OK);
    assert_int_equal(rp.size, np);
    hvd_rank_place_t *places = calloc((size_t)np, sizeof *places);
    assert_int_equal(hvd__rank_plan_places(&rp, places), HVD_OK);
    for (int r = 0; r < np; r++) {
        const hvd_slot_t *sl = &plan.slots[r];
        assert_string_equal(rp.hosts[places[r].host], sl->host);
        assert_int_equal(places[r].local_rank, sl->local_rank);
        assert_int_equal(places[r].local_size, sl->local_size);
        assert_int_equal(places[r].cross_rank, sl->cross_rank);
        assert_int_equal(places[r].cross_size, sl->cross_size);
    }
    /* without a key, nothing is published */
    assert_int_equal(hvd__store_scopes_declare(server, &plan, NULL), HVD_OK);
    assert_false(hvd__kv_store_has(hvd__kv_server_store(server), HVD_RANK_PLAN_SCOPE,
                                   HVD_RANK_PLAN_STATIC_KEY));
    free(places);
    free(text);
    hvd__rank_plan_fini(&rp);
    hvd__kv_server_stop(server);
    hvd__slot_plan_fini(&plan);
    hvd__hosts_fini(&hosts);
}

static void test_published_plans(void **state) {
    (void)state;
    check_published("h1:2,h2:2", 4);
    check_published("h1:4,h2:1,h3:3", 8);
    check_published("h1:4,h2:1,h3:3", 6); /* the last host partly filled */
    check_published("localhost:1", 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_places), cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_encode_refuses),        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_published_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
