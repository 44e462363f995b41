/* The stall inspector: nothing is reported before the warning time or for names every rank
 * submitted; after it, each missing rank is listed with its host, age and up to six names;
 * checks are rate-limited to one per warning period; the shutdown time marks ranks with "!"
 * and asks for a shutdown, but never when it is below the warning time. A point-to-point
 * message expects its two ranks only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "controller/stall.h"

#include <stdio.h>
#include <string.h>

static const char *hosts[] = {"h0", "h1", "h2", "h3"};

static void test_warning_names_missing_ranks(void **state) {
    (void)state;
    hvd_stall_t *s;
    assert_int_equal(hvd__stall_create(4, hosts, 60, 0, &s), HVD_OK);
    char msg[2048];
    int shut;
    hvd__stall_ready(s, "grad.w", 0, 0, 1000);
    hvd__stall_ready(s, "grad.w", 0, 2, 1500);
    hvd__stall_key(s, "grad.w", "g#7");
    hvd__stall_key(s, "grad.w", "g#8"); /* (the first key stays) */
    hvd__stall_key(s, "not.pending", "g#9");
    hvd__stall_ready(s, "grad.all", 0, 0, 1000);
    for (int r = 1; r < 4; r++)
        hvd__stall_ready(s, "grad.all", 0, r, 1000);
    hvd__stall_done(s, "grad.all");
    assert_int_equal(hvd__stall_check(s, 30000, msg, sizeof msg, &shut), 0);
    assert_int_equal(hvd__stall_check(s, 59000, msg, sizeof msg, &shut), 0); /* rate limit */
    assert_int_equal(hvd__stall_check(s, 91000, msg, sizeof msg, &shut), 1);
    assert_int_equal(shut, 0);
    assert_non_null(strstr(msg, "for more than 60 seconds"));
    assert_non_null(strstr(msg, "Missing ranks:\n1 (host h1, missing for 90 s): [grad.w (at "
                                "'g#7')]\n3 (host h3, missing for 90 s): [grad.w (at 'g#7')]"));
    assert_null(strstr(msg, "\n0"));
    assert_null(strstr(msg, "grad.all"));
    hvd__stall_destroy(s);
}

/* A describer that says what a rank does, as the coordinator would. */
static void describe(void *arg, int rank, int64_t now_ms, char *buf, size_t n) {
    (*(int *)arg)++;
    if (rank == 2)
        snprintf(buf, n, "pid %d, waits in no operation, at %lld", 100 + rank, (long long)now_ms);
    else
        buf[0] = '\0';
}

static void test_each_missing_rank_described_and_listed(void **state) {
    (void)state;
    hvd_stall_t *s;
    assert_int_equal(hvd__stall_create(4, hosts, 1, 0, &s), HVD_OK);
    int calls = 0, ranks[HVD_STALL_MISSING_MAX];
    hvd__stall_set_describer(s, describe, &calls);
    char msg[2048];
    int shut;
    hvd__stall_ready(s, "x", 0, 0, 0);
    hvd__stall_ready(s, "x", 0, 3, 0);
    assert_int_equal(hvd__stall_check(s, 1500, msg, sizeof msg, &shut), 1);
    assert_int_equal(calls, 2); /* ranks 1 and 2 only */
    assert_non_null(strstr(msg,
                           "\n1 (host h1, missing for 1 s): [x]\n2 (host h2, missing for 1 s): "
                           "[x]; pid 102, waits in no operation, at 1500"));
    assert_int_equal(hvd__stall_missing(s, ranks, HVD_STALL_MISSING_MAX), 2);
    assert_int_equal(ranks[0], 1);
    assert_int_equal(ranks[1], 2);
    assert_int_equal(hvd__stall_missing(s, ranks, 1), 1);
    /* a check that reports nothing forgets them */
    hvd__stall_done(s, "x");
    assert_int_equal(hvd__stall_check(s, 3000, msg, sizeof msg, &shut), 0);
    assert_int_equal(hvd__stall_missing(s, ranks, HVD_STALL_MISSING_MAX), 0);
    hvd__stall_destroy(s);
}

static void test_many_names_and_shutdown(void **state) {
    (void)state;
    hvd_stall_t *s;
    assert_int_equal(hvd__stall_create(2, NULL, 2, 5, &s), HVD_OK);
    char msg[2048], name[16];
    int shut;
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "t%d", i);
        hvd__stall_ready(s, name, 0, 0, 0);
    }
    assert_int_equal(hvd__stall_check(s, 3000, msg, sizeof msg, &shut), 1);
    assert_int_equal(shut, 0);
    assert_non_null(strstr(msg, "\n1: ["));
    assert_non_null(strstr(msg, " ...]"));
    assert_int_equal(hvd__stall_check(s, 6000, msg, sizeof msg, &shut), 1);
    assert_int_equal(shut, 1);
    assert_non_null(strstr(msg, "\n1!: ["));
    /* the shutdown sentence first: where the report travels as an error, it may be cut */
    assert_ptr_equal(strstr(msg, "One or more rank (marked by \"!\") is stalled for longer than 5 "
                                 "seconds. Will shutdown.\nOne or more tensors"),
                     msg);
    hvd__stall_destroy(s);
    /* a shutdown time below the warning time never shuts down */
    assert_int_equal(hvd__stall_create(2, NULL, 10, 5, &s), HVD_OK);
    hvd__stall_ready(s, "x", 0, 1, 0);
    assert_int_equal(hvd__stall_check(s, 100000, msg, sizeof msg, &shut), 1);
    assert_int_equal(shut, 0);
    assert_non_null(strstr(msg, "\n0: [x]"));
    hvd__stall_destroy(s);
}

static void test_bounds(void **state) {
    (void)state;
    hvd_stall_t *s;
    assert_int_equal(hvd__stall_create(0, NULL, 1, 0, &s), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__stall_create(2, NULL, 1, 0, &s), HVD_OK);
    assert_int_equal(hvd__stall_ready(s, "x", 0, 2, 0), HVD_ERR_INVALID_ARG);
    char tiny[40];
    int shut;
    hvd__stall_ready(s, "x", 0, 0, 0);
    assert_int_equal(hvd__stall_check(s, 5000, tiny, sizeof tiny, &shut), 1);
    assert_int_equal(strlen(tiny), sizeof tiny - 1); /* truncated, terminated */
    hvd__stall_destroy(s);
}

/* Process set 3 is global ranks {1, 2} of 4. */
static int set3_member(void *arg, int pset, int set_rank) {
    (void)arg;
    return pset == 3 && set_rank >= 0 && set_rank < 2 ? 1 + set_rank : -1;
}

/* A process set's name waits for its members only: ranks outside the set are never listed
 * as missing it (the whole job's names still wait for every rank). */
static void test_process_set_names_wait_for_members_only(void **state) {
    (void)state;
    hvd_stall_t *s;
    assert_int_equal(hvd__stall_create(4, hosts, 10, 0, &s), HVD_OK);
    hvd__stall_set_members(s, set3_member, NULL);
    char msg[2048];
    int shut;
    hvd__stall_ready(s, "ps.x", 3, 1, 0);
    assert_int_equal(hvd__stall_check(s, 11000, msg, sizeof msg, &shut), 1);
    assert_non_null(strstr(msg, "Missing ranks:\n2 (host h2, missing for 11 s): [ps.x]"));
    assert_null(strstr(msg, "\n0"));
    assert_null(strstr(msg, "\n3"));
    /* the member's request ends the stall */
    hvd__stall_ready(s, "ps.x", 3, 2, 11500);
    assert_int_equal(hvd__stall_check(s, 30000, msg, sizeof msg, &shut), 0);
    hvd__stall_destroy(s);
}

/* A point-to-point message waits for its partner only: the other ranks are never listed. */
static void test_p2p_waits_for_its_partner_only(void **state) {
    (void)state;
    hvd_stall_t *s;
    assert_int_equal(hvd__stall_create(4, hosts, 10, 0, &s), HVD_OK);
    char msg[2048];
    int shut;
    int pair[2] = {0, 3};
    hvd__stall_ready_among(s, "p2p:0->3:tag=1:#0", pair, 2, 0, 0);
    assert_int_equal(hvd__stall_check(s, 11000, msg, sizeof msg, &shut), 1);
    assert_non_null(
        strstr(msg, "Missing ranks:\n3 (host h3, missing for 11 s): [p2p:0->3:tag=1:#0]"));
    assert_null(strstr(msg, "\n1"));
    assert_null(strstr(msg, "\n2"));
    hvd__stall_ready_among(s, "p2p:0->3:tag=1:#0", pair, 2, 3, 11500);
    assert_int_equal(hvd__stall_check(s, 30000, msg, sizeof msg, &shut), 0);
    hvd__stall_destroy(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p_waits_for_its_partner_only),
        cmocka_unit_test(test_warning_names_missing_ranks),
        cmocka_unit_test(test_many_names_and_shutdown),
        cmocka_unit_test(test_each_missing_rank_described_and_listed),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_process_set_names_wait_for_members_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
