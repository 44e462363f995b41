/* The coordinator's table: names become ready only when every rank asked, in the order they
 * became ready (not the order first asked); disagreements become ERROR responses with the
 * reference's message and the two ranks; duplicates from one rank are refused; JOIN counts a
 * rank as done for every name and, once all joined, yields a JOIN response naming the last.
 * Point-to-point names wait for their two ranks only and must be one send and one receive of
 * the same bytes. Keys: two names under one key fail at once, both sides named; deadlines:
 * a name not agreed in time fails naming the ranks that never asked and what they do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "controller/coordinator.h"

#include <string.h>

static hvd_request_t req(const char *name, int rank, int dtype, int64_t n) {
    hvd_request_t r = {.rank = rank,
                       .type = HVD_REQ_ALLREDUCE,
                       .dtype = (uint8_t)dtype,
                       .op = 1,
                       .ndims = 1,
                       .root = -1,
                       .prescale = 1,
                       .postscale = 1,
                       .dims = {n},
                       .name = (char *)name};
    return r;
}

static void test_ready_order_and_sizes(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(3, &c), HVD_OK);
    hvd_request_t a0 = req("a", 0, 7, 10), b0 = req("b", 0, 7, 20);
    assert_int_equal(hvd__coord_add(c, &a0), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &b0), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &a0), HVD_ERR_INVALID_ARG); /* twice from rank 0 */
    for (int r = 1; r < 3; r++) {
        hvd_request_t b = req("b", r, 7, 20);
        assert_int_equal(hvd__coord_add(c, &b), HVD_OK);
    }
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    assert_string_equal(out.items[0].names[0], "b");
    assert_int_equal(out.items[0].type, HVD_REQ_ALLREDUCE);
    assert_true(out.items[0].sizes[0] == 20);
    assert_int_equal(hvd__coord_pending(c), 1);
    for (int r = 1; r < 3; r++) {
        hvd_request_t a = req("a", r, 7, 10);
        assert_int_equal(hvd__coord_add(c, &a), HVD_OK);
    }
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    assert_string_equal(out.items[1].names[0], "a");
    assert_int_equal(hvd__coord_pending(c), 0);
    /* the name can be requested again once answered */
    assert_int_equal(hvd__coord_add(c, &a0), HVD_OK);
    hvd__neg_responses_fini(&out);
    hvd__coord_destroy(c);
}

static void test_mismatches(void **state) {
    (void)state;
    struct {
        hvd_request_t other;
        const char *want;
    } cases[4];
    cases[0].other = req("t", 2, 4, 10);
    cases[0].want = "Mismatched data types: One rank had type float32, but another rank had type "
                    "int32. (rank 0 and rank 2, tensor 't')";
    cases[1].other = req("t", 2, 7, 11);
    cases[1].want = "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [10], "
                    "but another rank sent a tensor of shape [11].";
    cases[2].other = req("t", 2, 7, 10);
    cases[2].other.op = 4;
    cases[2].want = "Mismatched reduction operation";
    cases[3].other = req("t", 2, 7, 10);
    cases[3].other.postscale = 0.5;
    cases[3].want = "Mismatched prescale and/or postscale factors: One rank sent factors (1, 1), "
                    "but another rank sent factors (1, 0.5).";
    for (int i = 0; i < 4; i++) {
        hvd_coord_t *c;
        assert_int_equal(hvd__coord_create(3, &c), HVD_OK);
        hvd_request_t r0 = req("t", 0, 7, 10), r1 = req("t", 1, 7, 10);
        hvd__coord_add(c, &r0);
        hvd__coord_add(c, &r1);
        hvd__coord_add(c, &cases[i].other);
        hvd_response_list_t out = {0};
        assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
        assert_int_equal(out.count, 1);
        assert_int_equal(out.items[0].type, HVD_RESP_ERROR);
        assert_non_null(strstr(out.items[0].error, cases[i].want));
        hvd__neg_responses_fini(&out);
        hvd__coord_destroy(c);
    }
}

static void test_join(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(3, &c), HVD_OK);
    hvd_request_t x0 = req("x", 0, 7, 5), x1 = req("x", 1, 7, 5);
    hvd__coord_add(c, &x0);
    hvd__coord_add(c, &x1);
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0);
    hvd_request_t j2 = {.rank = 2, .type = HVD_REQ_JOIN, .name = (char *)"join.noname"};
    assert_int_equal(hvd__coord_add(c, &j2), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1); /* x is ready without rank 2; no JOIN response yet */
    assert_string_equal(out.items[0].names[0], "x");
    hvd_request_t j0 = j2, j1 = j2;
    j0.rank = 0;
    j1.rank = 1;
    hvd__coord_add(c, &j1);
    hvd__coord_add(c, &j0);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.items[1].type, HVD_REQ_JOIN);
    assert_int_equal(out.items[1].last_joined_rank, 0);
    hvd__neg_responses_fini(&out);
    hvd__coord_destroy(c);
}

/* While a rank has joined, an allgather is answered at its first request with the Join
 * error (ranks that joined at different times name their unnamed operations differently, so
 * waiting for the others' requests could wait forever); an allreduce still waits. */
static void test_join_refuses_allgather_at_once(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(3, &c), HVD_OK);
    hvd_request_t j1 = {.rank = 1, .type = HVD_REQ_JOIN, .name = (char *)"join.noname"};
    assert_int_equal(hvd__coord_add(c, &j1), HVD_OK);
    hvd_request_t g0 = req("allgather.noname.1", 0, 7, 5), s0 = req("sum", 0, 7, 5);
    g0.type = HVD_REQ_ALLGATHER;
    assert_int_equal(hvd__coord_add(c, &g0), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &s0), HVD_OK);
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    assert_string_equal(out.items[0].names[0], "allgather.noname.1");
    assert_int_equal(out.items[0].type, HVD_RESP_ERROR);
    assert_non_null(strstr(out.items[0].error, "Allgather is not supported with Join"));
    hvd__neg_responses_fini(&out);
    /* rank 2 asks for a name of its own numbering: refused at once as well */
    hvd_request_t g2 = req("allgather.noname.2", 2, 7, 5);
    g2.type = HVD_REQ_ALLGATHER;
    assert_int_equal(hvd__coord_add(c, &g2), HVD_OK);
    hvd_response_list_t out2 = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out2), HVD_OK);
    assert_int_equal(out2.count, 1);
    assert_int_equal(out2.items[0].type, HVD_RESP_ERROR);
    assert_int_equal(hvd__coord_pending(c), 1); /* "sum" waits for rank 2 */
    hvd__neg_responses_fini(&out2);
    hvd__coord_destroy(c);
}

/* Process set 5 is global ranks {0, 2} of 4; any other set has no members. */
static int set5_member(void *arg, int pset, int set_rank) {
    (void)arg;
    static const int members[] = {0, 2};
    return pset == 5 && set_rank >= 0 && set_rank < 2 ? members[set_rank] : -1;
}

/* A joined member of a process set stands in for itself there as in the whole job: the
 * set's allreduce is ready once its other members asked (the joined one adds zeros), its
 * allgather is refused at once; a set the joined rank is not in still waits for its
 * members. Without the membership hook the set's allreduce waits for every member. */
static void test_join_in_a_process_set(void **state) {
    (void)state;
    for (int hooked = 0; hooked < 2; hooked++) {
        hvd_coord_t *c;
        assert_int_equal(hvd__coord_create(4, &c), HVD_OK);
        if (hooked)
            hvd__coord_set_members(c, set5_member, NULL);
        hvd_request_t j2 = {.rank = 2, .type = HVD_REQ_JOIN, .name = (char *)"join.noname"};
        assert_int_equal(hvd__coord_add(c, &j2), HVD_OK);
        hvd_request_t a0 = req("ps.sum", 0, 7, 5), g0 = req("ps.gather", 0, 7, 5);
        a0.pset = g0.pset = 5;
        a0.pset_size = g0.pset_size = 2;
        g0.type = HVD_REQ_ALLGATHER;
        hvd_request_t o1 = req("other.sum", 1, 7, 5); /* set 6: ranks {1, 3} */
        o1.pset = 6;
        o1.pset_size = 2;
        assert_int_equal(hvd__coord_add(c, &a0), HVD_OK);
        assert_int_equal(hvd__coord_add(c, &g0), HVD_OK);
        assert_int_equal(hvd__coord_add(c, &o1), HVD_OK);
        hvd_response_list_t out = {0};
        assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
        if (!hooked) {
            assert_int_equal(out.count, 0);
            assert_int_equal(hvd__coord_pending(c), 3);
        } else {
            assert_int_equal(out.count, 2);
            assert_string_equal(out.items[0].names[0], "ps.sum");
            assert_int_equal(out.items[0].type, HVD_REQ_ALLREDUCE);
            assert_int_equal(out.items[0].pset, 5);
            assert_string_equal(out.items[1].names[0], "ps.gather");
            assert_int_equal(out.items[1].type, HVD_RESP_ERROR);
            assert_non_null(strstr(out.items[1].error, "Allgather is not supported with Join"));
            assert_int_equal(hvd__coord_pending(c), 1); /* other.sum waits for rank 3 */
        }
        hvd__neg_responses_fini(&out);
        hvd__coord_destroy(c);
    }
}

static hvd_request_t p2p(const char *name, int rank, int partner, int op, int dtype, int64_t count,
                         int64_t bytes) {
    hvd_request_t r = {.rank = rank,
                       .type = HVD_REQ_P2P,
                       .dtype = (uint8_t)dtype,
                       .op = (uint8_t)op,
                       .ndims = 2,
                       .root = partner,
                       .prescale = 1,
                       .postscale = 1,
                       .dims = {count, bytes},
                       .name = (char *)name};
    return r;
}

/* A point-to-point name is ready once its two ranks asked (the other ranks never do), in any
 * order; the response carries the bytes and both ranks; sides that disagree on bytes get one
 * ERROR naming both ranks and sizes, while other dtypes with the same bytes are fine. */
static void test_p2p_pairs(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(4, &c), HVD_OK);
    hvd_request_t recv = p2p("m", 3, 1, HVD_P2P_RECV, 0, 16, 16);
    hvd_request_t send = p2p("m", 1, 3, HVD_P2P_SEND, 7, 4, 16);
    assert_int_equal(hvd__coord_add(c, &recv), HVD_OK);
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0);
    assert_int_equal(hvd__coord_add(c, &send), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.items[0].type, HVD_REQ_P2P);
    assert_int_equal(out.items[0].nsizes, 3);
    assert_true(out.items[0].sizes[0] == 16 && out.items[0].sizes[1] == 1 &&
                out.items[0].sizes[2] == 3);
    /* bytes differ */
    hvd_request_t s2 = p2p("n", 0, 2, HVD_P2P_SEND, 7, 4, 16);
    hvd_request_t r2 = p2p("n", 2, 0, HVD_P2P_RECV, 7, 8, 32);
    assert_int_equal(hvd__coord_add(c, &s2), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &r2), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.items[1].type, HVD_RESP_ERROR);
    assert_string_equal(out.items[1].error,
                        "Mismatched point-to-point sizes: rank 0 sends 16 bytes (4 x float32) to "
                        "rank 2, but rank 2 receives 32 bytes (8 x float32) from rank 0 (message "
                        "'n').");
    /* two sends under one name, a partner out of range or the rank itself */
    hvd_request_t a = p2p("o", 0, 1, HVD_P2P_SEND, 7, 1, 4),
                  b = p2p("o", 1, 0, HVD_P2P_SEND, 7, 1, 4);
    assert_int_equal(hvd__coord_add(c, &a), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &b), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 3);
    assert_int_equal(out.items[2].type, HVD_RESP_ERROR);
    assert_non_null(strstr(out.items[2].error, "one send and one receive"));
    hvd_request_t bad = p2p("p", 0, 4, HVD_P2P_SEND, 7, 1, 4);
    assert_int_equal(hvd__coord_add(c, &bad), HVD_ERR_INVALID_ARG);
    bad.root = 0;
    assert_int_equal(hvd__coord_add(c, &bad), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__coord_pending(c), 0);
    hvd__neg_responses_fini(&out);
    hvd__coord_destroy(c);
}

/* A rank outside the pair joining changes nothing; the partner joining answers the waiting
 * side with the Join error at once. */
static void test_p2p_join(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(3, &c), HVD_OK);
    hvd_request_t j = {.rank = 2, .type = HVD_REQ_JOIN, .name = "join.noname"};
    assert_int_equal(hvd__coord_add(c, &j), HVD_OK);
    hvd_request_t s = p2p("m", 0, 1, HVD_P2P_SEND, 7, 1, 4);
    assert_int_equal(hvd__coord_add(c, &s), HVD_OK);
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0);
    hvd_request_t r = p2p("m", 1, 0, HVD_P2P_RECV, 7, 1, 4);
    assert_int_equal(hvd__coord_add(c, &r), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.items[0].type, HVD_REQ_P2P);
    hvd_request_t s2 = p2p("m2", 0, 2, HVD_P2P_SEND, 7, 1, 4);
    assert_int_equal(hvd__coord_add(c, &s2), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.items[1].type, HVD_RESP_ERROR);
    assert_non_null(strstr(out.items[1].error, "not supported with Join"));
    hvd__neg_responses_fini(&out);
    hvd__coord_destroy(c);
}

/* rank's request for name under key, with a deadline */
static hvd_request_t keyed(const char *name, int rank, int type, const char *key, uint32_t ms) {
    hvd_request_t r = req(name, rank, 7, 4);
    r.type = (uint8_t)type;
    r.root = type == HVD_REQ_BROADCAST ? 0 : -1;
    r.key = (char *)key;
    r.timeout_ms = ms;
    return r;
}

static void test_key_mismatch_fails_both_at_once(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(3, &c), HVD_OK);
    static const char *const hosts[] = {"h0", "h1", "h2"};
    hvd__coord_set_hosts(c, hosts, NULL);
    hvd__coord_set_now(c, 1000);
    /* ranks 0 and 2 at #1 all_reduce "a"; rank 1 broadcasts "b" there; "c" has another key */
    hvd_request_t a0 = keyed("a", 0, HVD_REQ_ALLREDUCE, "g#1", 0);
    hvd_request_t b1 = keyed("b", 1, HVD_REQ_BROADCAST, "g#1", 0);
    hvd_request_t c1 = keyed("c", 1, HVD_REQ_ALLREDUCE, "g#2", 0);
    hvd_request_t a2 = keyed("a", 2, HVD_REQ_ALLREDUCE, "g#1", 0);
    assert_int_equal(hvd__coord_add(c, &a0), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &c1), HVD_OK);
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0); /* no conflict yet: different keys */
    assert_int_equal(hvd__coord_add(c, &b1), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &a2), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2);
    for (int i = 0; i < 2; i++) {
        hvd_response_t *r = &out.items[i];
        assert_int_equal(r->type, HVD_RESP_ERROR);
        assert_int_equal(r->status, HVD_NEG_FAIL_MISMATCH);
        assert_non_null(strstr(r->error, "Mismatched operations at 'g#1': rank 0 (host h0) "
                                         "asked for ALLREDUCE 'a' (float32 [4], sum), but rank 1 "
                                         "(host h1) asked for BROADCAST 'b' (float32 [4], root "
                                         "0)."));
    }
    /* one failure for each name (in either order) */
    const char *n0 = out.items[0].names[0], *n1 = out.items[1].names[0];
    assert_true((!strcmp(n0, "a") && !strcmp(n1, "b")) || (!strcmp(n0, "b") && !strcmp(n1, "a")));
    assert_int_equal(hvd__coord_pending(c), 1); /* "c" waits on */
    /* a third rank that comes to g#1 after the failure fails at once, as the others did */
    hvd__neg_responses_fini(&out);
    hvd_request_t b2 = keyed("b", 2, HVD_REQ_BROADCAST, "g#1", 0);
    assert_int_equal(hvd__coord_add(c, &b2), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.items[0].type, HVD_RESP_ERROR);
    assert_non_null(strstr(out.items[0].error, "Mismatched operations at 'g#1': rank 0"));
    assert_non_null(strstr(out.items[0].error, "(rank 2 asked for 'b' after that failure)"));
    /* the same key in another process set is another place */
    hvd_request_t d0 = keyed("d", 0, HVD_REQ_ALLREDUCE, "g#2", 0);
    d0.pset = 1;
    d0.pset_size = 2;
    assert_int_equal(hvd__coord_add(c, &d0), HVD_OK);
    hvd__neg_responses_fini(&out);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0);
    hvd__coord_destroy(c);
}

/* Rivals (hvd__coord_user_name): one user's name under two operations, the ranks apart on
 * it for the grace time, fails both names, each side named; ranks that submit both in
 * different orders, or that are only late, do not. */
static void test_one_name_two_operations(void **state) {
    (void)state;
    assert_string_equal(hvd__coord_user_name("allreduce.grad.w"), "grad.w");
    assert_string_equal(hvd__coord_user_name("broadcast.noname.3"), "noname.3");
    assert_null(hvd__coord_user_name("allreduce."));
    assert_null(hvd__coord_user_name("dist.0:all_reduce(float32[4], SUM)#1"));
    assert_null(hvd__coord_user_name("grad"));
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(2, &c), HVD_OK);
    static const char *const hosts[] = {"h0", "h1"};
    hvd__coord_set_hosts(c, hosts, NULL);
    hvd__coord_set_now(c, 1000);
    hvd_response_list_t out = {0};
    /* x: rank 0 allreduces, rank 1 broadcasts */
    hvd_request_t ax0 = keyed("allreduce.x", 0, HVD_REQ_ALLREDUCE, NULL, 0);
    hvd_request_t bx1 = keyed("broadcast.x", 1, HVD_REQ_BROADCAST, NULL, 0);
    /* y: both ranks submit both, in different orders */
    hvd_request_t ay0 = keyed("allreduce.y", 0, HVD_REQ_ALLREDUCE, NULL, 0);
    hvd_request_t by1 = keyed("broadcast.y", 1, HVD_REQ_BROADCAST, NULL, 0);
    /* z: rank 0 submits both, rank 1 is late with one */
    hvd_request_t az0 = keyed("allreduce.z", 0, HVD_REQ_ALLREDUCE, NULL, 0);
    hvd_request_t bz0 = keyed("broadcast.z", 0, HVD_REQ_BROADCAST, NULL, 0);
    hvd_request_t bz1 = keyed("broadcast.z", 1, HVD_REQ_BROADCAST, NULL, 0);
    hvd_request_t *first[] = {&ax0, &bx1, &ay0, &by1, &az0, &bz0};
    for (size_t i = 0; i < sizeof first / sizeof first[0]; i++)
        assert_int_equal(hvd__coord_add(c, first[i]), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0);
    assert_false(hvd__coord_due(c, 1999));
    hvd__coord_set_now(c, 1500);
    hvd_request_t by0 = keyed("broadcast.y", 0, HVD_REQ_BROADCAST, NULL, 0);
    hvd_request_t ay1 = keyed("allreduce.y", 1, HVD_REQ_ALLREDUCE, NULL, 0);
    assert_int_equal(hvd__coord_add(c, &by0), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &ay1), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2); /* y's two, not failures */
    for (int i = 0; i < 2; i++)
        assert_int_not_equal(out.items[i].type, HVD_RESP_ERROR);
    hvd__neg_responses_fini(&out);
    assert_true(hvd__coord_due(c, 2000));
    hvd__coord_set_now(c, 2000);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 2); /* x's two, failed; z waits on */
    for (int i = 0; i < 2; i++) {
        hvd_response_t *r = &out.items[i];
        assert_int_equal(r->type, HVD_RESP_ERROR);
        assert_int_equal(r->status, HVD_NEG_FAIL_MISMATCH);
        assert_non_null(strstr(r->error, "Mismatched operations under the name 'x': rank 0 "
                                         "(host h0) asked for ALLREDUCE 'allreduce.x' (float32 "
                                         "[4], sum), but rank 1 (host h1) asked for BROADCAST "
                                         "'broadcast.x' (float32 [4], root 0)."));
    }
    hvd__neg_responses_fini(&out);
    assert_false(hvd__coord_due(c, 5000)); /* z: not apart, no longer rivals */
    assert_int_equal(hvd__coord_add(c, &bz1), HVD_OK);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    assert_string_equal(out.items[0].names[0], "broadcast.z");
    assert_int_not_equal(out.items[0].type, HVD_RESP_ERROR);
    hvd__neg_responses_fini(&out);
    assert_int_equal(hvd__coord_pending(c), 1); /* allreduce.z waits for rank 1 */
    hvd__coord_destroy(c);
}

static void test_deadline_names_the_missing_ranks(void **state) {
    (void)state;
    hvd_coord_t *c;
    assert_int_equal(hvd__coord_create(4, &c), HVD_OK);
    static const long pids[] = {100, 101, 102, 0};
    hvd__coord_set_hosts(c, NULL, pids);
    hvd__coord_set_now(c, 1000);
    /* "x" agreed by all: each rank's last operation */
    for (int r = 0; r < 4; r++) {
        hvd_request_t x = keyed("x", r, HVD_REQ_ALLREDUCE, NULL, 0);
        assert_int_equal(hvd__coord_add(c, &x), HVD_OK);
    }
    hvd_response_list_t out = {0};
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    hvd__neg_responses_fini(&out);
    /* at 2000: ranks 0 and 1 ask for "a" (2 s); rank 2 waits in "b"; rank 3 in nothing */
    hvd__coord_set_now(c, 2000);
    hvd_request_t a0 = keyed("a", 0, HVD_REQ_ALLREDUCE, "g#2", 2000);
    hvd_request_t a1 = keyed("a", 1, HVD_REQ_ALLREDUCE, "g#2", 2000);
    hvd_request_t b2 = keyed("b", 2, HVD_REQ_ALLREDUCE, NULL, 0);
    assert_int_equal(hvd__coord_add(c, &a0), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &a1), HVD_OK);
    assert_int_equal(hvd__coord_add(c, &b2), HVD_OK);
    assert_false(hvd__coord_due(c, 3999));
    hvd__coord_set_now(c, 3999);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 0);
    assert_true(hvd__coord_due(c, 4000));
    hvd__coord_set_now(c, 4000);
    assert_int_equal(hvd__coord_take_ready(c, &out), HVD_OK);
    assert_int_equal(out.count, 1);
    hvd_response_t *r = &out.items[0];
    assert_int_equal(r->type, HVD_RESP_ERROR);
    assert_int_equal(r->status, HVD_NEG_FAIL_TIMEOUT);
    assert_string_equal(r->names[0], "a");
    assert_non_null(strstr(r->error,
                           "Timed out at 'g#2': ALLREDUCE 'a' (float32 [4], sum) "
                           "waited 2.0 s, its deadline, for 2 ranks that never asked "
                           "for it: rank 2 (host ?, pid 102) waits in ALLREDUCE 'b' (float32 "
                           "[4], sum) (for 2.0 s); rank 3 (host ?) waits in no "
                           "operation"));
    assert_non_null(strstr(r->error, "its last, 'x', ended 3.0 s ago"));
    assert_null(strstr(r->error, "rank 0 ")); /* those that asked are not named */
    assert_false(hvd__coord_due(c, 10000));
    assert_int_equal(hvd__coord_pending(c), 1); /* "b" has no deadline */
    hvd__neg_responses_fini(&out);
    hvd__coord_destroy(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_mismatch_fails_both_at_once),
        cmocka_unit_test(test_one_name_two_operations),
        cmocka_unit_test(test_deadline_names_the_missing_ranks),
        cmocka_unit_test(test_p2p_pairs),
        cmocka_unit_test(test_p2p_join),
        cmocka_unit_test(test_ready_order_and_sizes),
        cmocka_unit_test(test_mismatches),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_join_refuses_allgather_at_once),
        cmocka_unit_test(test_join_in_a_process_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
