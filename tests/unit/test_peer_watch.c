/* core/peer_watch.h over os/proc_activity.h, on real child processes: one asleep in pause()
 * (alive but idle: neither waits for a core nor runs), one spinning (runs), one stopped with
 * SIGSTOP, one gone. The watch says a peer still runs only when it waits for a core or ran
 * since the previous look, never when it is stopped, idle or gone, and never for a peer it
 * cannot watch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "core/context.h"
#include "core/peer_watch.h"
#include "os/proc_activity.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child(int spin) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        volatile unsigned long n = 0;
        for (;;) {
            if (spin)
                n++;
            else
                pause();
        }
    }
    return pid;
}

static void end(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Wait up to 5 s for pid's activity to satisfy want (1: idle, 2: stopped). */
static void settle(pid_t pid, int want, hvd_proc_activity_t *a) {
    int64_t deadline = hvd__clock_deadline_ms(5000);
    for (;;) {
        assert_int_equal(hvd__proc_activity(pid, a), 0);
        if (want == 1 ? !a->runnable && !a->stopped : a->stopped)
            return;
        if (hvd__clock_remaining_ms(deadline) == 0)
            fail_msg("pid %d never got %s", (int)pid, want == 1 ? "idle" : "stopped");
        hvd__clock_sleep_ms(10);
    }
}

static void test_activity(void **state) {
    (void)state;
    hvd_proc_activity_t a, b;
    pid_t idle = child(0), spin = child(1);
    settle(idle, 1, &a);
    hvd__clock_sleep_ms(100);
    assert_int_equal(hvd__proc_activity(idle, &b), 0);
    assert_true(b.run_ns == a.run_ns); /* asleep: it did not run */
    assert_int_equal(hvd__proc_activity(spin, &a), 0);
    hvd__clock_sleep_ms(100);
    assert_int_equal(hvd__proc_activity(spin, &b), 0);
    assert_true(b.run_ns > a.run_ns);
    kill(spin, SIGSTOP);
    settle(spin, 2, &a);
    assert_false(a.runnable);
    end(spin);
    end(idle);
    assert_int_equal(hvd__proc_activity(idle, &a), -1); /* gone */
    assert_true(hvd__proc_pid_ns() != 0);
}

static void test_watch(void **state) {
    (void)state;
    hvd_context_t c;
    memset(&c, 0, sizeof c);
    c.params.size = 3;
    hvd_peer_watch_t watch[3];
    memset(watch, 0, sizeof watch);
    c.watch = watch;
    pid_t idle = child(0), spin = child(1);
    hvd_proc_activity_t a;
    settle(idle, 1, &a);
    watch[1] = (hvd_peer_watch_t){.pid = idle, .looked = 1};
    watch[2] = (hvd_peer_watch_t){.pid = spin, .looked = 1};
    /* idle: not at the first look (no reading to compare with), nor at the second */
    assert_int_equal(hvd__peer_watch_progressing(&c, 1), 0);
    assert_int_equal(hvd__peer_watch_progressing(&c, 1), 0);
    /* spinning: it waits for a core or ran since the last look, at every look */
    for (int i = 0; i < 3; i++) {
        hvd__clock_sleep_ms(50);
        assert_int_equal(hvd__peer_watch_progressing(&c, 2), 1);
    }
    /* stopped: no more, however its threads last ran */
    kill(spin, SIGSTOP);
    settle(spin, 2, &a);
    assert_int_equal(hvd__peer_watch_progressing(&c, 2), 0);
    /* gone, or not watchable (another machine's, rank 0 here), or out of range: no */
    end(spin);
    assert_int_equal(hvd__peer_watch_progressing(&c, 2), 0);
    watch[0] = (hvd_peer_watch_t){.pid = 0, .looked = 1};
    assert_int_equal(hvd__peer_watch_progressing(&c, 0), 0);
    assert_int_equal(hvd__peer_watch_progressing(&c, 3), 0);
    assert_int_equal(hvd__peer_watch_progressing(&c, -1), 0);
    end(idle);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activity),
        cmocka_unit_test(test_watch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
