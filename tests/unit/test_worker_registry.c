/* The elastic driver's round registry (worker_registry.h): one outcome per worker and round,
 * READY -> FAILURE as the only change, and the decision once every worker has recorded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/elastic/worker_registry.h"

#include <stdbool.h>
#include <string.h>

/* Four workers: a:0 a:1 b:0 b:1. */
static void four(hvd_worker_registry_t *r, int round) {
    const char *hosts[] = {"a", "a", "b", "b"};
    int lrs[] = {0, 1, 0, 1};
    hvd__registry_init(r);
    assert_int_equal(hvd__registry_reset(r, round, hosts, lrs, 4), HVD_OK);
}

/* Hosts blacklisted in a test: a comma-free list of names. */
static const char *black;
static bool blacklisted(void *arg, const char *host) {
    (void)arg;
    return black && strstr(black, host) != NULL;
}

static void test_slots_and_complete(void **state) {
    (void)state;
    hvd_worker_registry_t r;
    four(&r, 3);
    assert_int_equal(r.round, 3);
    assert_string_equal(r.slots[3].host, "b");
    assert_int_equal(r.slots[3].local_rank, 1);
    assert_string_equal(r.slots[0].host, "a");
    assert_int_equal(r.slots[0].local_rank, 0);
    assert_false(hvd__registry_complete(&r));
    for (size_t i = 0; i < 4; i++) {
        assert_false(hvd__registry_complete(&r));
        assert_int_equal(hvd__registry_record(&r, i, HVD_WORKER_READY), 1);
    }
    assert_true(hvd__registry_complete(&r));
    assert_int_equal(hvd__registry_count(&r, HVD_WORKER_READY), 4);
    hvd__registry_fini(&r);
}

static void test_transitions(void **state) {
    (void)state;
    hvd_worker_registry_t r;
    four(&r, 0);
    /* nothing recorded twice; only READY -> FAILURE changes an outcome */
    assert_int_equal(hvd__registry_record(&r, 0, HVD_WORKER_READY), 1);
    assert_int_equal(hvd__registry_record(&r, 0, HVD_WORKER_READY), 0);
    assert_int_equal(hvd__registry_record(&r, 0, HVD_WORKER_SUCCESS), 0);
    assert_int_equal(hvd__registry_record(&r, 0, HVD_WORKER_FAILURE), 1);
    assert_int_equal(hvd__registry_record(&r, 0, HVD_WORKER_READY), 0);
    assert_int_equal(r.slots[0].state, HVD_WORKER_FAILURE);
    assert_int_equal(hvd__registry_record(&r, 1, HVD_WORKER_SUCCESS), 1);
    assert_int_equal(hvd__registry_record(&r, 1, HVD_WORKER_FAILURE), 0);
    assert_int_equal(r.slots[1].state, HVD_WORKER_SUCCESS);
    assert_int_equal(hvd__registry_record(&r, 2, HVD_WORKER_FAILURE), 1);
    assert_int_equal(hvd__registry_record(&r, 2, HVD_WORKER_SUCCESS), 0);
    /* a changed outcome is not a second record: one worker is still missing */
    assert_false(hvd__registry_complete(&r));
    assert_int_equal(hvd__registry_record(&r, 9, HVD_WORKER_READY), 0);
    assert_int_equal(hvd__registry_record(&r, 3, HVD_WORKER_PENDING), 0);
    assert_int_equal(hvd__registry_record(&r, 3, HVD_WORKER_READY), 1);
    assert_true(hvd__registry_complete(&r));
    assert_string_equal(hvd__registry_state_name(r.slots[3].state), "ready");
    hvd__registry_fini(&r);
}

static hvd_round_outcome_t outcome_of(const hvd_worker_state_t states[4], const char *bl) {
    hvd_worker_registry_t r;
    four(&r, 0);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(hvd__registry_record(&r, i, states[i]), 1);
    black = bl;
    hvd_round_outcome_t o = hvd__registry_outcome(&r, blacklisted, NULL);
    black = NULL;
    hvd__registry_fini(&r);
    return o;
}

/* The reference's order of rules: success, all failed, blacklist, resume. */
static void test_outcomes(void **state) {
    (void)state;
    const hvd_worker_state_t R = HVD_WORKER_READY, S = HVD_WORKER_SUCCESS, F = HVD_WORKER_FAILURE;
    /* any success ends the job, even with failures and survivors */
    assert_int_equal(outcome_of((hvd_worker_state_t[]){S, R, R, R}, NULL), HVD_ROUND_STOP_SUCCESS);
    assert_int_equal(outcome_of((hvd_worker_state_t[]){F, S, F, F}, "a b"), HVD_ROUND_STOP_SUCCESS);
    assert_int_equal(outcome_of((hvd_worker_state_t[]){F, F, F, F}, "a b"),
                     HVD_ROUND_STOP_ALL_FAILED);
    /* host a failed: b's survivors go on */
    assert_int_equal(outcome_of((hvd_worker_state_t[]){F, R, R, R}, "a"), HVD_ROUND_RESUME);
    /* survivors whose hosts are all blacklisted cannot go on */
    assert_int_equal(outcome_of((hvd_worker_state_t[]){F, R, F, R}, "a b"),
                     HVD_ROUND_STOP_BLACKLISTED);
    /* a pure host change: everyone ready, nothing blacklisted */
    assert_int_equal(outcome_of((hvd_worker_state_t[]){R, R, R, R}, NULL), HVD_ROUND_RESUME);
}

static void test_reset_replaces(void **state) {
    (void)state;
    hvd_worker_registry_t r;
    four(&r, 0);
    assert_int_equal(hvd__registry_record(&r, 0, HVD_WORKER_READY), 1);
    const char *hosts[] = {"b"};
    int lrs[] = {0};
    assert_int_equal(hvd__registry_reset(&r, 1, hosts, lrs, 1), HVD_OK);
    assert_int_equal(r.round, 1);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.slots[0].state, HVD_WORKER_PENDING);
    assert_string_equal(r.slots[0].host, "b");
    assert_false(hvd__registry_complete(&r));
    hvd__registry_fini(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_and_complete),
        cmocka_unit_test(test_transitions),
        cmocka_unit_test(test_outcomes),
        cmocka_unit_test(test_reset_replaces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
