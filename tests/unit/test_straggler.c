/* The straggler report: each rank's lateness behind the first to arrive at a name, the rank
 * alone in arriving last, a report every window of steps (a step: the first name agreed
 * comes round again) and a fresh window after it; ties name no rank; a name one rank alone
 * arrived at, or one that failed, counts for nothing; arrivals after the first of a rank
 * change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "controller/straggler.h"

#include <stdio.h>
#include <string.h>

static const char *hosts[] = {"h0", "h1", "h2"};

/* One step: "a" then "b", rank 2 arriving late_us after ranks 0 and 1 (at t). */
static int step(hvd_straggler_t *s, int64_t t, int64_t late_us, char *msg, size_t n) {
    int reported = 0;
    const char *names[] = {"a", "b"};
    for (int i = 0; i < 2; i++) {
        hvd__straggler_arrive(s, names[i], 0, t);
        hvd__straggler_arrive(s, names[i], 1, t + 100);
        hvd__straggler_arrive(s, names[i], 2, t + late_us);
        hvd__straggler_arrive(s, names[i], 2, t + 2 * late_us); /* (a later cycle: ignored) */
        reported |= hvd__straggler_done(s, names[i], msg, n);
    }
    return reported;
}

static void test_the_late_rank_is_named_every_window(void **state) {
    (void)state;
    hvd_straggler_t *s;
    assert_int_equal(hvd__straggler_create(3, hosts, 2, &s), HVD_OK);
    char msg[1024];
    assert_false(step(s, 0, 5000, msg, sizeof msg));      /* "a" becomes the step's marker */
    assert_false(step(s, 100000, 5000, msg, sizeof msg)); /* step 1 of the window */
    assert_true(step(s, 200000, 5000, msg, sizeof msg));  /* step 2: the window closes at "a" */
    /* "a" x3 (its first agreement only marks) and "b" x2 after the marker: 5 collectives */
    assert_non_null(strstr(msg, "Stragglers over the last 2 steps (5 collectives): rank 2 "
                                "(host h2) was last in 100% of them, 5.0 ms late on average; "
                                "average lateness (ms): rank 2 5.0, rank 1 0.1, rank 0 0.0"));
    assert_int_equal(hvd__straggler_pending(s), 0);
    /* the next window starts afresh: rank 1 now the late one, by 9 ms */
    for (int k = 0; k < 2; k++) {
        int64_t t = 300000 + k * 100000;
        const char *names[] = {"b", "a"};
        for (int i = 0; i < 2; i++) {
            hvd__straggler_arrive(s, names[i], 0, t);
            hvd__straggler_arrive(s, names[i], 2, t);
            hvd__straggler_arrive(s, names[i], 1, t + 9000);
            if (hvd__straggler_done(s, names[i], msg, sizeof msg))
                assert_int_equal(k, 1);
        }
    }
    /* (with the "b" of the step that closed the last window, where rank 2 was late) */
    assert_non_null(strstr(msg, "(5 collectives): rank 1 (host h1) was last in 80% of them, "
                                "7.2 ms late on average"));
    hvd__straggler_destroy(s);
}

static void test_ties_and_lone_arrivals_name_no_one(void **state) {
    (void)state;
    hvd_straggler_t *s;
    assert_int_equal(hvd__straggler_create(3, NULL, 1, &s), HVD_OK);
    char msg[1024] = "";
    hvd__straggler_arrive(s, "m", 0, 10);
    hvd__straggler_arrive(s, "m", 1, 10);
    assert_false(hvd__straggler_done(s, "m", msg, sizeof msg)); /* the marker (it counts) */
    hvd__straggler_arrive(s, "x", 1, 50); /* one rank alone: counts for nothing */
    assert_false(hvd__straggler_done(s, "x", msg, sizeof msg));
    hvd__straggler_arrive(s, "m", 0, 100); /* a tie between ranks 0 and 2 for last */
    hvd__straggler_arrive(s, "m", 1, 90);
    hvd__straggler_arrive(s, "m", 2, 100);
    assert_true(hvd__straggler_done(s, "m", msg, sizeof msg));
    assert_non_null(strstr(msg, "(2 collectives): no rank came last alone"));
    hvd__straggler_arrive(s, "z", 7, 1); /* a rank outside the job: ignored */
    assert_int_equal(hvd__straggler_pending(s), 0);
    /* a name that failed is forgotten, never counted */
    hvd__straggler_arrive(s, "f", 0, 200);
    hvd__straggler_arrive(s, "f", 1, 900);
    assert_int_equal(hvd__straggler_pending(s), 1);
    hvd__straggler_forget(s, "f");
    hvd__straggler_forget(s, "never.seen");
    assert_int_equal(hvd__straggler_pending(s), 0);
    hvd__straggler_arrive(s, "m", 0, 1000);
    hvd__straggler_arrive(s, "m", 1, 1000);
    assert_true(hvd__straggler_done(s, "m", msg, sizeof msg));
    assert_non_null(strstr(msg, "(1 collectives): no rank came last alone"));
    hvd__straggler_destroy(s);
    assert_int_equal(hvd__straggler_create(0, NULL, 1, &s), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__straggler_create(2, NULL, 0, &s), HVD_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_late_rank_is_named_every_window),
        cmocka_unit_test(test_ties_and_lone_arrivals_name_no_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
