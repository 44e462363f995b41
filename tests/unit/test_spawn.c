/* The per-rank supervisor: exit statuses, exec failures, and ending whole process trees
 * (grandchildren, orphans, processes that ignore SIGTERM) when told to or when the launcher
 * dies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "os/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int run(const char *script, int stop_after_ms, int grace_ms, char *err_out, size_t n,
               int *status_p) {
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = grace_ms};
    hvd_spawn_t p;
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    int64_t start = hvd__clock_now_ms(), deadline = start + 30000;
    int got = 0, status = -1;
    size_t elen = 0;
    while (hvd__clock_now_ms() < deadline) {
        if (stop_after_ms >= 0 && hvd__clock_now_ms() - start >= stop_after_ms)
            hvd__spawn_stop(&p);
        struct pollfd f[2] = {{.fd = p.ctl_fd, .events = POLLIN},
                              {.fd = p.err_fd, .events = POLLIN}};
        poll(f, 2, 20);
        if (f[1].revents) {
            ssize_t r = read(p.err_fd, err_out + elen, n - 1 - elen);
            if (r > 0)
                elen += (size_t)r;
        }
        if (f[0].revents) {
            int r = hvd__spawn_read_report(&p, &status);
            if (r == 1) {
                got = 1;
                break;
            }
        }
    }
    err_out[elen] = '\0';
    int mstatus;
    assert_int_equal(waitpid(p.pid, &mstatus, 0), p.pid);
    hvd__spawn_close(&p);
    assert_true(got);
    *status_p = status;
    return hvd__spawn_exit_code(mstatus);
}

static void test_exit_codes(void **state) {
    (void)state;
    char err[1024];
    int st;
    assert_int_equal(run("exit 0", -1, 1000, err, sizeof err, &st), 0);
    assert_int_equal(run("exit 7", -1, 1000, err, sizeof err, &st), 7);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 7);
    assert_int_equal(run("kill -9 $$", -1, 1000, err, sizeof err, &st), 137);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    assert_int_equal(run("echo oops >&2; exit 3", -1, 1000, err, sizeof err, &st), 3);
    assert_string_equal(err, "oops\n");
}

static void test_exec_failure(void **state) {
    (void)state;
    char *argv[] = {"/nonexistent/program", NULL};
    hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = 1000};
    hvd_spawn_t p;
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    int mstatus;
    assert_int_equal(waitpid(p.pid, &mstatus, 0), p.pid);
    assert_int_equal(hvd__spawn_exit_code(mstatus), 127);
    char err[512] = "";
    ssize_t r = read(p.err_fd, err, sizeof err - 1);
    err[r > 0 ? r : 0] = '\0';
    assert_non_null(strstr(err, "cannot execute '/nonexistent/program'"));
    hvd__spawn_close(&p);
}

static int alive(pid_t pid) {
    return kill(pid, 0) == 0 || errno != ESRCH;
}

/* Start a tree that records its pids, then check every one is gone. */
static void check_tree_ends(const char *tree, int stop_after_ms, int grace_ms, int min_ms,
                            int max_ms) {
    char dir[] = "/tmp/hvd-spawn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char script[1024];
    snprintf(script, sizeof script, "cd %s; %s", dir, tree);
    char err[1024];
    int st;
    int64_t t0 = hvd__clock_now_ms();
    int code = run(script, stop_after_ms, grace_ms, err, sizeof err, &st);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(code >= 128);
    if (took < min_ms || took > max_ms)
        fail_msg("tree took %lld ms to end (expected %d..%d)", (long long)took, min_ms, max_ms);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cat %s/pid.* 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    int pids = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        pids++;
        int64_t until = hvd__clock_now_ms() + 2000;
        while (alive((pid_t)pid) && hvd__clock_now_ms() < until)
            hvd__clock_sleep_ms(10);
        if (alive((pid_t)pid))
            fail_msg("pid %ld of the tree survived", pid);
    }
    pclose(f);
    assert_true(pids >= 3);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_stop_kills_tree(void **state) {
    (void)state;
    /* children, and a grandchild that escapes into its own session */
    check_tree_ends("sh -c 'echo $$ > pid.1; exec sleep 100' & "
                    "sh -c 'echo $$ > pid.2; exec sleep 100' & "
                    "setsid sh -c 'echo $$ > pid.3; exec sleep 100' & "
                    "echo $$ > pid.0; wait",
                    300, 1000, 250, 5000);
}

static void test_sigterm_ignored(void **state) {
    (void)state;
    /* a child ignoring SIGTERM is SIGKILLed after the grace period */
    check_tree_ends("sh -c 'trap \"\" TERM; echo $$ > pid.1; while :; do sleep 0.1; done' & "
                    "sh -c 'echo $$ > pid.2; exec sleep 100' & echo $$ > pid.0; wait",
                    200, 700, 800, 6000);
}

static void test_launcher_death(void **state) {
    (void)state;
    /* A launcher process starts a tree and is SIGKILLed: the middleman ends the tree. */
    char dir[] = "/tmp/hvd-spawn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t launcher = fork();
    if (launcher == 0) {
        char script[512];
        snprintf(script, sizeof script,
                 "cd %s; sh -c 'echo $$ > pid.1; exec sleep 100' & echo $$ > pid.0; wait", dir);
        char *argv[] = {"sh", "-c", script, NULL};
        hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = 500};
        hvd_spawn_t p;
        if (hvd__spawn_start(&cfg, &p) != 0)
            _exit(1);
        pause();
        _exit(0);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/pid.1", dir);
    int64_t until = hvd__clock_now_ms() + 10000;
    while (access(path, R_OK) != 0 && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(10);
    hvd__clock_sleep_ms(50);
    kill(launcher, SIGKILL);
    waitpid(launcher, NULL, 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cat %s/pid.*", dir);
    FILE *f = popen(cmd, "r");
    long pid;
    int n = 0;
    while (fscanf(f, "%ld", &pid) == 1) {
        n++;
        until = hvd__clock_now_ms() + 5000;
        while (alive((pid_t)pid) && hvd__clock_now_ms() < until)
            hvd__clock_sleep_ms(10);
        if (alive((pid_t)pid))
            fail_msg("pid %ld outlived its launcher", pid);
    }
    pclose(f);
    assert_int_equal(n, 2);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    /* the launch loop's contract: SIGCHLD blocked (reports come through the socket) */
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGCHLD);
    sigprocmask(SIG_BLOCK, &m, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_codes),      cmocka_unit_test(test_exec_failure),
        cmocka_unit_test(test_stop_kills_tree), cmocka_unit_test(test_sigterm_ignored),
        cmocka_unit_test(test_launcher_death),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
