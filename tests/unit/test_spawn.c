/* The per-rank supervisor (middleman): exit statuses, exec failures, the command's
 * environment, fds, signal state and limits, and ending whole process trees (children,
 * grandchildren that left the session, orphans, processes that ignore SIGTERM or are stopped)
 * when told to, when the command ends, and when the launcher dies. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Generous: the machine running the tests may be loaded. */
#define DEADLINE_MS 30000

typedef struct {
    char out[8192], err[8192];
    size_t out_len, err_len;
    int code;          /* the middleman's exit code */
    int reported;      /* the final report arrived */
    int status;        /* the command's raw wait status, as reported */
    int64_t ms;        /* from start to reaped */
    int64_t report_ms; /* from start to the final report */
    pid_t cmd_pid;     /* as reported */
} result_t;

static void drain(int *fd, char *buf, size_t *len, size_t cap) {
    if (*fd < 0)
        return;
    ssize_t n = read(*fd, buf + *len, cap - 1 - *len);
    if (n > 0) {
        *len += (size_t)n;
        buf[*len] = '\0';
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(*fd);
        *fd = -1;
    }
}

/* Run the spawned process to the end: read its pipes and reports, stop it at stop_after_ms
 * (-1: never), reap the middleman. Fails the test past the deadline. */
static void finish(hvd_spawn_t *p, int64_t start, int stop_after_ms, result_t *res) {
    memset(res, 0, sizeof *res);
    int64_t deadline = start + DEADLINE_MS;
    int ctl_done = 0;
    for (;;) {
        if (stop_after_ms >= 0 && hvd__clock_now_ms() - start >= stop_after_ms)
            hvd__spawn_stop(p);
        if (p->out_fd < 0 && p->err_fd < 0 && ctl_done && hvd__spawn_reap(p))
            break;
        if (hvd__clock_now_ms() > deadline)
            fail_msg("spawned process did not finish within %d ms", DEADLINE_MS);
        struct pollfd f[3] = {{.fd = p->out_fd, .events = POLLIN},
                              {.fd = p->err_fd, .events = POLLIN},
                              {.fd = ctl_done ? -1 : p->ctl_fd, .events = POLLIN}};
        poll(f, 3, 20);
        if (f[0].revents)
            drain(&p->out_fd, res->out, &res->out_len, sizeof res->out);
        if (f[1].revents)
            drain(&p->err_fd, res->err, &res->err_len, sizeof res->err);
        if (f[2].revents) {
            if (hvd__spawn_read_report(p))
                res->report_ms = hvd__clock_now_ms() - start;
            ctl_done = p->ctl_eof;
        }
    }
    res->ms = hvd__clock_now_ms() - start;
    res->code = hvd__spawn_exit_code(p->mm_status);
    res->reported = p->reported;
    res->status = p->cmd_status;
    res->cmd_pid = p->cmd_pid;
    hvd__spawn_close(p);
}

static void run_argv(char *const *argv, char *const *envp, int stop_after_ms, int grace_ms,
                     result_t *res) {
    hvd_spawn_config_t cfg = {.argv = argv, .envp = envp, .grace_ms = grace_ms};
    hvd_spawn_t p;
    int64_t start = hvd__clock_now_ms();
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    finish(&p, start, stop_after_ms, res);
}

static void run_sh(const char *script, int stop_after_ms, int grace_ms, result_t *res) {
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    run_argv(argv, environ, stop_after_ms, grace_ms, res);
}

/* Alive and not a zombie. */
static int alive(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static int wait_dead(pid_t pid, int ms) {
    int64_t until = hvd__clock_now_ms() + ms;
    while (alive(pid) && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(10);
    return !alive(pid);
}

/* stdin_data: the command reads exactly those bytes, and then no end of file while the
 * middleman lives (ssh must not forward one), only when it is stopped. */
static void test_stdin_data(void **state) {
    (void)state;
    /* 100000 bytes: more than a default pipe holds, so the pipe must have been grown */
    size_t len = 100000;
    char *data = malloc(len);
    assert_non_null(data);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)('a' + i % 26);
    char *argv[] = {"sh", "-c", "head -c 100000 | cksum; cat >/dev/null; echo eof >&2", NULL};
    hvd_spawn_config_t cfg = {
        .argv = argv, .envp = environ, .grace_ms = 2000, .stdin_data = data, .stdin_len = len};
    hvd_spawn_t p;
    int64_t start = hvd__clock_now_ms();
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    result_t r;
    /* stopped after 500 ms: until then cat must still be waiting for more input */
    finish(&p, start, 500, &r);
    assert_true(r.ms >= 500);
    assert_int_equal(r.code, 143);
    assert_null(strstr(r.err, "eof"));
    /* the same bytes through cksum here */
    char tmpl[] = "/tmp/hvd-spawn-stdin.XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    char check[256];
    snprintf(check, sizeof check, "cksum < %s", tmpl);
    FILE *f = popen(check, "r");
    char want[128] = "";
    assert_non_null(fgets(want, sizeof want, f));
    pclose(f);
    unlink(tmpl);
    assert_string_equal(r.out, want);
    free(data);
}

static void test_stdin_too_large(void **state) {
    (void)state;
    char *argv[] = {"true", NULL};
    static char big[HVD_SPAWN_STDIN_MAX + 1];
    hvd_spawn_config_t cfg = {.argv = argv, .stdin_data = big, .stdin_len = sizeof big};
    hvd_spawn_t p;
    assert_int_equal(hvd__spawn_start(&cfg, &p), HVD_ERR_INVALID_ARG);
}

static void test_exit_codes(void **state) {
    (void)state;
    result_t r;
    run_sh("exit 0", -1, 1000, &r);
    assert_int_equal(r.code, 0);
    assert_true(r.reported && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
    run_sh("exit 7", -1, 1000, &r);
    assert_int_equal(r.code, 7);
    assert_true(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 7);
    run_sh("false", -1, 1000, &r);
    assert_int_equal(r.code, 1);
    run_sh("kill -TERM $$", -1, 1000, &r);
    assert_int_equal(r.code, 143);
    assert_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGTERM);
    run_sh("kill -KILL $$", -1, 1000, &r);
    assert_int_equal(r.code, 137);
    assert_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
    assert_true(r.cmd_pid > 0);
    char what[96];
    hvd__spawn_describe_status(r.status, what, sizeof what);
    assert_string_equal(what, "killed by signal 9 (SIGKILL)");
    hvd__spawn_describe_status(7 << 8, what, sizeof what);
    assert_string_equal(what, "exit code 7");
}

static void test_output_pipes(void **state) {
    (void)state;
    result_t r;
    run_sh("echo hello", -1, 1000, &r);
    assert_string_equal(r.out, "hello\n");
    assert_string_equal(r.err, "");
    run_sh("echo hello >&2", -1, 1000, &r);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "hello\n");
    run_sh("printf 'no end of line'", -1, 1000, &r);
    assert_string_equal(r.out, "no end of line");
    /* stdin is /dev/null: cat ends at once */
    run_sh("cat; echo done", -1, 1000, &r);
    assert_string_equal(r.out, "done\n");
}

static void test_exec_failure(void **state) {
    (void)state;
    result_t r;
    char *missing[] = {"/nonexistent/program", NULL};
    run_argv(missing, environ, -1, 1000, &r);
    assert_int_equal(r.code, 127);
    assert_string_equal(r.err, "horovodrun: cannot execute '/nonexistent/program': No such file or "
                               "directory\n");
    /* looked up in PATH and not found */
    char *unknown[] = {"hvd-no-such-command-4711", "arg", NULL};
    run_argv(unknown, environ, -1, 1000, &r);
    assert_int_equal(r.code, 127);
    assert_string_equal(r.err, "horovodrun: cannot execute 'hvd-no-such-command-4711': No such "
                               "file or directory\n");
    /* found but not executable */
    char dir[] = "/tmp/hvd-spawn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[128];
    snprintf(file, sizeof file, "%s/data", dir);
    FILE *f = fopen(file, "w");
    fputs("echo not a program\n", f);
    fclose(f);
    char *data[] = {file, NULL};
    run_argv(data, environ, -1, 1000, &r);
    assert_int_equal(r.code, 126);
    assert_non_null(strstr(r.err, "Permission denied"));
    /* executable without "#!": run by /bin/sh, as execvp does */
    chmod(file, 0755);
    run_argv(data, environ, -1, 1000, &r);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.out, "not a program\n");
    unlink(file);
    rmdir(dir);
    /* an empty command is refused before anything starts */
    char *empty[] = {NULL};
    hvd_spawn_config_t cfg = {.argv = empty};
    hvd_spawn_t p;
    assert_int_equal(hvd__spawn_start(&cfg, &p), HVD_ERR_INVALID_ARG);
}

static void test_environment(void **state) {
    (void)state;
    result_t r;
    /* the command's PATH is searched, and envp is its whole environment */
    char *envp[] = {"PATH=/usr/bin:/bin", "HVD_SPAWN_TEST=a b", NULL};
    char *argv[] = {"env", NULL};
    run_argv(argv, envp, -1, 1000, &r);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.out, "PATH=/usr/bin:/bin\nHVD_SPAWN_TEST=a b\n");
    char *no_path[] = {"HVD_SPAWN_TEST=1", NULL};
    char *sh[] = {"sh", "-c", "echo $HVD_SPAWN_TEST", NULL};
    run_argv(sh, no_path, -1, 1000, &r); /* no PATH: execvp's default /bin:/usr/bin */
    assert_string_equal(r.out, "1\n");
}

static void test_clean_start(void **state) {
    (void)state;
    /* The launcher's fds (even without close-on-exec), ignored signals and blocked signals do
     * not reach the command. */
    int leak = open("/dev/null", O_RDONLY);
    assert_true(leak >= 3);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_usr1;
    sigaction(SIGUSR1, &ign, &old_usr1);
    sigset_t block, old_mask;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR2);
    sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &old_mask);
    /* Look with programs exec'd directly: a shell's own state changes while it forks. ls
     * itself holds fd 3 open on the directory it lists. */
    result_t r, sig;
    char *ls[] = {"ls", "/proc/self/fd", NULL};
    run_argv(ls, environ, -1, 1000, &r);
    char *grep[] = {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status", NULL};
    run_argv(grep, environ, -1, 1000, &sig);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    close(leak);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.out, "0\n1\n2\n3\n");
    assert_string_equal(sig.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    /* the file limit the command starts with */
    char *argv[] = {"sh", "-c", "ulimit -n", NULL};
    hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = 1000, .nofile_soft = 77};
    hvd_spawn_t p;
    int64_t start = hvd__clock_now_ms();
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    finish(&p, start, -1, &r);
    assert_string_equal(r.out, "77\n");
    /* the command leads its own process group, in the middleman's session */
    run_sh("ps -o pid=,pgid=,sid= -p $$ | awk '{print ($1==$2) \" \" ($3!=$2)}'", -1, 1000, &r);
    assert_string_equal(r.out, "1 1\n");
}

/* Read every pid written by the tree into dir/pid.* (one per file). */
static int read_pids(const char *dir, pid_t *pids, int max) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cat %s/pid.* 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int n = 0;
    long pid;
    while (n < max && fscanf(f, "%ld", &pid) == 1)
        pids[n++] = (pid_t)pid;
    pclose(f);
    return n;
}

static int count_files(const char *dir, const char *prefix) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^%s'", dir, prefix);
    FILE *f = popen(cmd, "r");
    int n = 0;
    if (fscanf(f, "%d", &n) != 1)
        n = 0;
    pclose(f);
    return n;
}

static void remove_dir(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static result_t last; /* of check_tree_ends */

/* Start a tree in dir that writes `npids` pid files and then "ready" on stdout; stop it once
 * ready (when stop is set); check it ended within [min_ms, max_ms] and that no pid
 * survived. */
static void check_tree_ends(const char *tree, int npids, int stop, int grace_ms, int min_ms,
                            int max_ms, int expect_code) {
    char dir[] = "/tmp/hvd-spawn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char script[2048];
    snprintf(script, sizeof script, "cd %s || exit 99; %s", dir, tree);
    char *argv[] = {"sh", "-c", script, NULL};
    hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = grace_ms};
    hvd_spawn_t p;
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    /* wait until every process of the tree has written its pid */
    int64_t until = hvd__clock_now_ms() + DEADLINE_MS;
    while (count_files(dir, "pid.") < npids && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(20);
    assert_int_equal(count_files(dir, "pid."), npids);
    hvd__clock_sleep_ms(50); /* let the last writer get from `echo` to its `exec` */
    result_t r;
    int64_t t0 = hvd__clock_now_ms();
    finish(&p, t0, stop ? 0 : -1, &r);
    if (r.ms < min_ms || r.ms > max_ms)
        fail_msg("tree took %lld ms to end (expected %d..%d)", (long long)r.ms, min_ms, max_ms);
    assert_int_equal(r.code, expect_code);
    last = r;
    pid_t pids[16];
    int n = read_pids(dir, pids, 16);
    assert_int_equal(n, npids);
    for (int i = 0; i < n; i++)
        if (!wait_dead(pids[i], 2000))
            fail_msg("pid %d of the tree survived", (int)pids[i]);
    remove_dir(dir);
}

static void test_stop_kills_tree(void **state) {
    (void)state;
    /* children in the group, a child that left the session (with its own child), and an
     * orphaned grandchild (reparented to the middleman) */
    check_tree_ends("sleep 100 & echo $! > pid.1; "
                    "sleep 100 & echo $! > pid.2; "
                    "setsid sh -c 'sleep 100 & echo $! > pid.3; echo $$ > pid.4; wait' & "
                    "(sh -c 'echo $$ > pid.5; exec sleep 100' &); "
                    "echo $$ > pid.0; wait",
                    6, 1, 5000, 0, 4000, 143);
}

static void test_sigterm_ignored(void **state) {
    (void)state;
    /* a child ignoring SIGTERM is SIGKILLed once the grace period is over */
    check_tree_ends("sh -c 'trap \"\" TERM; echo $$ > pid.1; while :; do sleep 0.05; done' & "
                    "sleep 100 & echo $! > pid.2; echo $$ > pid.0; wait",
                    3, 1, 700, 650, 8000, 143);
}

static void test_stopped_process(void **state) {
    (void)state;
    /* a stopped process gets SIGCONT with its SIGTERM: it ends long before the grace */
    check_tree_ends("sh -c 'echo $$ > pid.1; kill -STOP $$; sleep 100' & echo $$ > pid.0; wait", 2,
                    1, 20000, 0, 8000, 143);
}

static void test_leftovers_end_with_command(void **state) {
    (void)state;
    /* The command exits 0 leaving behind a process that ignores SIGTERM: its status is
     * reported at once, and the leftover is ended after the usual grace. */
    check_tree_ends("sleep 100 & echo $! > pid.1; "
                    "sh -c 'trap \"\" TERM; echo $$ > pid.2; while :; do sleep 0.05; done' & "
                    "while [ ! -e pid.2 ]; do sleep 0.02; done; echo $$ > pid.0; exit 0",
                    3, 0, 3000, 0, 15000, 0);
    assert_true(last.reported && WIFEXITED(last.status) && WEXITSTATUS(last.status) == 0);
    if (last.ms - last.report_ms < 1000)
        fail_msg("status reported %lld ms after start, middleman reaped at %lld ms",
                 (long long)last.report_ms, (long long)last.ms);
}

static void test_launcher_death(void **state) {
    (void)state;
    /* A launcher process starts a tree and is SIGKILLed: the middleman ends the tree. */
    char dir[] = "/tmp/hvd-spawn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t launcher = fork();
    assert_true(launcher >= 0);
    if (launcher == 0) {
        char script[512];
        snprintf(script, sizeof script,
                 "cd %s; sleep 100 & echo $! > pid.1; sleep 100 & echo $! > pid.2; "
                 "echo $$ > pid.0; wait",
                 dir);
        char *argv[] = {"sh", "-c", script, NULL};
        hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = 500};
        hvd_spawn_t p;
        if (hvd__spawn_start(&cfg, &p) != 0)
            _exit(1);
        for (;;)
            pause();
    }
    int64_t until = hvd__clock_now_ms() + DEADLINE_MS;
    while (count_files(dir, "pid.") < 3 && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(20);
    assert_int_equal(count_files(dir, "pid."), 3);
    hvd__clock_sleep_ms(50);
    kill(launcher, SIGKILL);
    assert_int_equal(waitpid(launcher, NULL, 0), launcher);
    pid_t pids[8];
    int n = read_pids(dir, pids, 8);
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++)
        if (!wait_dead(pids[i], 10000))
            fail_msg("pid %d outlived its launcher", (int)pids[i]);
    remove_dir(dir);
}

static void test_middleman_death(void **state) {
    (void)state;
    /* The middleman is killed from outside: its command does not run on unsupervised. */
    char *argv[] = {"sleep", "100", NULL};
    hvd_spawn_config_t cfg = {.argv = argv, .envp = environ, .grace_ms = 500};
    hvd_spawn_t p;
    assert_int_equal(hvd__spawn_start(&cfg, &p), 0);
    int64_t until = hvd__clock_now_ms() + DEADLINE_MS;
    while (p.cmd_pid == 0 && hvd__clock_now_ms() < until) {
        struct pollfd f = {.fd = p.ctl_fd, .events = POLLIN};
        poll(&f, 1, 20);
        hvd__spawn_read_report(&p);
    }
    assert_true(p.cmd_pid > 0);
    pid_t cmd = p.cmd_pid;
    hvd__spawn_kill(&p);
    assert_true(p.kill_sent > 0);
    result_t r;
    finish(&p, hvd__clock_now_ms(), -1, &r);
    assert_int_equal(r.code, 137);
    assert_false(r.reported);
    assert_true(wait_dead(cmd, 5000));
    /* killing a reaped middleman again is a no-op, not a stray signal */
    hvd__spawn_kill(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_output_pipes),
        cmocka_unit_test(test_exec_failure),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_clean_start),
        cmocka_unit_test(test_stop_kills_tree),
        cmocka_unit_test(test_sigterm_ignored),
        cmocka_unit_test(test_stopped_process),
        cmocka_unit_test(test_leftovers_end_with_command),
        cmocka_unit_test(test_launcher_death),
        cmocka_unit_test(test_middleman_death),
        cmocka_unit_test(test_stdin_data),
        cmocka_unit_test(test_stdin_too_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
