/* The policy for ranks left behind once others exited (runner/launch/stopped_ranks.h), on fake
 * workers and a fake clock: a stopped rank is named at once and killed after the timeout; a
 * SIGCONT cancels that; a running rank is never killed, and is reported every 30 s; nothing
 * happens before a rank has exited. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner/launch/stopped_ranks.h"

#include <stdio.h>
#include <string.h>

#define N 4

static struct {
    int running[N], stopped[N], killed[N];
    hvd_slot_t slots[N];
    char said[16][1024];
    int nsaid;
} fake;

static int f_running(void *arg, size_t id) {
    (void)arg;
    return fake.running[id];
}
static int f_stopped(void *arg, size_t id, long *pid_p) {
    (void)arg;
    *pid_p = 1000 + (long)id;
    return fake.stopped[id];
}
static const hvd_slot_t *f_slot(void *arg, size_t id) {
    (void)arg;
    return &fake.slots[id];
}
static void f_say(void *arg, const char *line) {
    (void)arg;
    assert_true(fake.nsaid < 16);
    snprintf(fake.said[fake.nsaid++], sizeof fake.said[0], "%s", line);
}
static void f_kill(void *arg, size_t id) {
    (void)arg;
    fake.killed[id]++;
    fake.running[id] = 0;
}

static const hvd_stopped_ranks_ops_t ops = {f_running, f_stopped, f_slot, f_say, f_kill, NULL};

static int setup(void **state) {
    (void)state;
    memset(&fake, 0, sizeof fake);
    for (int i = 0; i < N; i++) {
        fake.running[i] = 1;
        fake.slots[i] = (hvd_slot_t){.rank = i, .size = N, .host = i < 2 ? "h1" : "h2"};
    }
    return 0;
}

static void expect_said(int k, const char *text) {
    assert_true(k < fake.nsaid);
    if (!strstr(fake.said[k], text))
        fail_msg("message %d '%s' lacks '%s'", k, fake.said[k], text);
}

static void test_stopped_rank_is_killed_after_the_timeout(void **state) {
    (void)state;
    hvd_stopped_ranks_t s;
    hvd__stopped_ranks_init(&s, 2);
    fake.stopped[1] = 1;
    /* nobody has exited: a stopped rank is a user's business */
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 0, N, 1000), -1);
    assert_int_equal(fake.nsaid, 0);
    fake.running[0] = fake.running[2] = fake.running[3] = 0;
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 3, N, 2000), -1);
    assert_int_equal(fake.nsaid, 1);
    expect_said(0, "rank 1 (host h1, pid 1001) is stopped; every other rank has exited: it is "
                   "killed in 2 s unless it continues");
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 3, N, 3700), -1);
    assert_int_equal(fake.killed[1], 0);
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 3, N, 4000), 1);
    assert_int_equal(fake.killed[1], 1);
    expect_said(1, "rank 1 (host h1, pid 1001) stayed stopped for 2 s after every other rank had "
                   "exited: killing it");
    /* nothing is left: nothing more is said or done */
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 3, N, 60000), -1);
    assert_int_equal(fake.nsaid, 2);
    hvd__stopped_ranks_fini(&s);
}

static void test_continued_rank_is_not_killed(void **state) {
    (void)state;
    hvd_stopped_ranks_t s;
    hvd__stopped_ranks_init(&s, 2);
    fake.running[0] = fake.running[1] = 0;
    fake.stopped[3] = 1;
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 2, N, 1000), -1);
    expect_said(0, "rank 3 (host h2, pid 1003) is stopped; 2 of 4 ranks have exited");
    fake.stopped[3] = 0; /* SIGCONT */
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 2, N, 2500), -1);
    expect_said(1, "rank 3 (host h2, pid 1003) continued");
    fake.stopped[3] = 1; /* stopped again: a new timeout from now */
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 2, N, 2750), -1);
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 2, N, 4500), -1);
    assert_int_equal(fake.killed[3], 0);
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 2, N, 4750), 3);
    assert_int_equal(fake.killed[3], 1);
    assert_int_equal(fake.killed[2], 0); /* rank 2 runs */
    hvd__stopped_ranks_fini(&s);
}

static void test_running_rank_is_reported_never_killed(void **state) {
    (void)state;
    hvd_stopped_ranks_t s;
    hvd__stopped_ranks_init(&s, 2);
    fake.running[0] = fake.running[1] = fake.running[3] = 0;
    int64_t t = 1000;
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 3, N, t), -1);
    for (; t < 1000 + 95000; t += 250)
        assert_int_equal(hvd__stopped_ranks_check(&s, &ops, NULL, N, 3, N, t), -1);
    assert_int_equal(fake.killed[2], 0);
    /* at 31 s, 61 s and 91 s */
    assert_int_equal(fake.nsaid, 3);
    for (int k = 0; k < 3; k++)
        expect_said(k, "waiting for rank 2 (host h2): every other rank has exited");
    hvd__stopped_ranks_fini(&s);
}

static void test_ids_and_many_remaining(void **state) {
    (void)state;
    hvd_stopped_ranks_t s;
    hvd__stopped_ranks_init(&s, 30);
    size_t ids[] = {3, 1, 2}; /* an elastic round: these workers are its ranks */
    fake.running[1] = 0;
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, ids, 3, 1, 3, 0), -1);
    assert_int_equal(hvd__stopped_ranks_check(&s, &ops, ids, 3, 1, 3, 30000), -1);
    expect_said(0, "waiting for ranks 3 (host h2), 2 (host h2): 1 of 3 ranks have exited");
    assert_int_equal(fake.running[0], 1); /* worker 0 is not the round's: never looked at */
    hvd__stopped_ranks_fini(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_stopped_rank_is_killed_after_the_timeout, setup),
        cmocka_unit_test_setup(test_continued_rank_is_not_killed, setup),
        cmocka_unit_test_setup(test_running_rank_is_reported_never_killed, setup),
        cmocka_unit_test_setup(test_ids_and_many_remaining, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
