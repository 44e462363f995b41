/* What runs a remote host's ranks over ssh: the ssh command line and shell quoting, and the
 * supervisor itself (`horovodrun --internal-exec`, run here without ssh): several ranks at
 * once, each with its directory, environment, output, exit code and end reported in frames,
 * one rank stopped or killed by command, and every tree ending when the input ends (the
 * launcher is gone). The codec itself is tested in test_exec_wire.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "runner/launch/exec_wire.h"
#include "runner/launch/remote_exec.h"
#include "runner/launch/ssh.h"
#include "wire/le.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 30000

/* argv is exactly want (both NULL-terminated). */
static void expect_argv(char *const *argv, const char *const *want) {
    size_t i = 0;
    for (; want[i]; i++)
        assert_string_equal(argv[i], want[i]);
    assert_null(argv[i]);
}

static void test_ssh_argv(void **state) {
    (void)state;
    char **argv;
    hvd_ssh_opts_t o = {.port = 2222, .identity = "/k ey", .connect_timeout_s = 7};
    assert_int_equal(hvd__ssh_argv(&o, "user@h2", "'/x' --internal-exec", &argv), HVD_OK);
    const char *want[] = {"ssh",
                          "-o",
                          "BatchMode=yes",
                          "-o",
                          "PasswordAuthentication=no",
                          "-o",
                          "StrictHostKeyChecking=no",
                          "-o",
                          "ServerAliveInterval=5",
                          "-o",
                          "ServerAliveCountMax=6",
                          "-o",
                          "ConnectTimeout=7",
                          "-p",
                          "2222",
                          "-i",
                          "/k ey",
                          "user@h2",
                          "'/x' --internal-exec",
                          NULL};
    expect_argv(argv, want);
    hvd__ssh_argv_free(argv);
    /* no port, identity or timeout: none of their options */
    assert_int_equal(hvd__ssh_argv(NULL, "h3", "true", &argv), HVD_OK);
    size_t n = 0;
    while (argv[n])
        n++;
    assert_int_equal(n, 13);
    assert_string_equal(argv[11], "h3");
    hvd__ssh_argv_free(argv);
    /* horovodrun starting itself: the path quoted for the remote shell, then the option */
    assert_int_equal(
        hvd__ssh_argv_program(NULL, "h3", "/opt/my hvd/horovodrun", "--internal-exec", &argv),
        HVD_OK);
    assert_string_equal(argv[12], "'/opt/my hvd/horovodrun' --internal-exec");
    hvd__ssh_argv_free(argv);
    /* inside a Slurm allocation: a one-task step on that node, the program and option as
     * srun's command (no shell, so no quoting), the ssh options not used */
    hvd_ssh_opts_t srun = {.port = 2222, .identity = "/k", .connect_timeout_s = 7, .srun = 1};
    setenv("SLURM_JOB_ID", "7",
           1); /* h3 a node of this allocation: no --jobid (unit.slurm_alloc) */
    setenv("SLURM_JOB_NODELIST", "h[1-3]", 1);
    assert_int_equal(
        hvd__ssh_argv_program(&srun, "h3", "/opt/my hvd/horovodrun", "--internal-exec", &argv),
        HVD_OK);
    const char *want_srun[] = {"srun",
                               "--nodes=1",
                               "--ntasks=1",
                               "--overlap",
                               "--whole",
                               "--export=NONE",
                               "--mpi=none",
                               "--cpu-bind=none",
                               "--quiet",
                               "--nodelist=h3",
                               "/opt/my hvd/horovodrun",
                               "--internal-exec",
                               NULL};
    expect_argv(argv, want_srun);
    hvd__ssh_argv_free(argv);
    /* and nothing for the reachability check to do */
    const char *hosts[] = {"h2", "h3"};
    assert_int_equal(hvd__ssh_check_hosts(&srun, hosts, 2, 1, 0, -1, -1), HVD_OK);
    /* an rsh agent (horovod.spark's): its words, the host, the command for its shell; no ssh
     * option, and no check (it answers for its hosts) */
    hvd_ssh_opts_t agent = {
        .port = 2222, .connect_timeout_s = 7, .agent = " /venv/bin/python  -m horovod.spark.rsh"};
    assert_int_equal(
        hvd__ssh_argv_program(&agent, "h-0af3", "/opt/my hvd/horovodrun", "--internal-exec", &argv),
        HVD_OK);
    const char *want_agent[] = {"/venv/bin/python",
                                "-m",
                                "horovod.spark.rsh",
                                "h-0af3",
                                "'/opt/my hvd/horovodrun' --internal-exec",
                                NULL};
    expect_argv(argv, want_agent);
    hvd__ssh_argv_free(argv);
    assert_int_equal(hvd__ssh_check_hosts(&agent, hosts, 2, 1, 0, -1, -1), HVD_OK);
    hvd_ssh_opts_t blank = {.agent = "  "};
    assert_int_equal(hvd__ssh_argv(&blank, "h", "true", &argv), HVD_ERR_INVALID_ARG);
}

static void test_shell_quote(void **state) {
    (void)state;
    char out[64];
    assert_int_equal(hvd__shell_quote("/usr/bin/x-1.2", out, sizeof out), 14);
    assert_string_equal(out, "/usr/bin/x-1.2");
    hvd__shell_quote("", out, sizeof out);
    assert_string_equal(out, "''");
    hvd__shell_quote("a b", out, sizeof out);
    assert_string_equal(out, "'a b'");
    hvd__shell_quote("it's", out, sizeof out);
    assert_string_equal(out, "'it'\"'\"'s'");
    /* too small: truncated, NUL-terminated, and the length needed is returned */
    char tiny[4];
    assert_int_equal(hvd__shell_quote("a b c", tiny, sizeof tiny), 7);
    assert_string_equal(tiny, "'a ");
}

/* ---- the supervisor, run as `horovodrun --internal-exec` ------------------------------------ */

typedef struct {
    pid_t pid;
    int in_w, out_r, err_r;
} sup_t;

/* What came back: each rank's output, status and end, the supervisor's own stderr. */
#define MAX_RANKS 4
typedef struct {
    int ready;
    char out[MAX_RANKS][4096], err[MAX_RANKS][4096];
    size_t out_len[MAX_RANKS], err_len[MAX_RANKS];
    int status[MAX_RANKS], exited[MAX_RANKS], ended[MAX_RANKS];
    int stopped[MAX_RANKS], states[MAX_RANKS]; /* the last STATE, and how many came */
    long state_pid[MAX_RANKS];
    char own_err[4096];
    size_t own_err_len;
    hvd_exec_reader_t rx;
} seen_t;

static uint8_t *make_spec(const char *cwd, char **env, char **argv, size_t nranks, char ***rank_env,
                          size_t *len_p) {
    char *none[] = {NULL};
    char **empty[MAX_RANKS] = {none, none, none, none};
    hvd_exec_spec_t spec = {.cwd = (char *)cwd,
                            .grace_ms = 1000,
                            .env = env,
                            .argv = argv,
                            .nranks = nranks,
                            .rank_env = rank_env ? rank_env : empty};
    uint8_t *buf;
    assert_int_equal(hvd__exec_spec_encode(&spec, &buf, len_p), HVD_OK);
    return buf;
}

static void start_supervisor(const uint8_t *spec, size_t len, sup_t *s) {
    int in[2], out[2], err[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        for (int fd = 3; fd < 64; fd++)
            close(fd);
        execl(HVD_HOROVODRUN, "horovodrun", HVD_EXEC_OPTION, (char *)NULL);
        _exit(99);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    assert_int_equal(write(in[1], spec, len), (ssize_t)len);
    s->in_w = in[1];
    s->out_r = out[0];
    s->err_r = err[0];
}

static void take_frames(seen_t *v, const uint8_t *data, size_t n) {
    assert_int_equal(hvd__exec_reader_feed(&v->rx, data, n), HVD_OK);
    hvd_exec_frame_t f;
    int got;
    while ((got = hvd__exec_reader_next(&v->rx, &f)) == 1) {
        size_t i = f.index;
        assert_false(f.type != HVD_EXEC_READY && v->ended[i]); /* nothing after END */
        if (f.type == HVD_EXEC_READY) {
            v->ready++;
        } else if (f.type == HVD_EXEC_OUT || f.type == HVD_EXEC_ERR) {
            char *b = f.type == HVD_EXEC_OUT ? v->out[i] : v->err[i];
            size_t *l = f.type == HVD_EXEC_OUT ? &v->out_len[i] : &v->err_len[i];
            assert_true(*l + f.len < sizeof v->out[i]);
            memcpy(b + *l, f.data, f.len);
            *l += f.len;
        } else if (f.type == HVD_EXEC_EXIT) {
            assert_false(v->exited[i]);
            v->exited[i] = 1;
            v->status[i] = (int)hvd__le32_get(f.data);
        } else if (f.type == HVD_EXEC_STATE) {
            assert_false(v->exited[i]);
            v->stopped[i] = (int)hvd__le32_get(f.data);
            v->state_pid[i] = (long)hvd__le32_get(f.data + 4);
            v->states[i]++;
        } else {
            assert_int_equal(f.type, HVD_EXEC_END);
            assert_true(v->exited[i]); /* the status always comes first */
            v->ended[i] = 1;
        }
    }
    assert_int_equal(got, 0);
}

/* One read from whichever pipe is ready; 0 once both have ended. */
static int pump(sup_t *s, seen_t *v, int timeout_ms) {
    struct pollfd p[2] = {{.fd = s->out_r, .events = POLLIN}, {.fd = s->err_r, .events = POLLIN}};
    if (s->out_r < 0 && s->err_r < 0)
        return 0;
    poll(p, 2, timeout_ms);
    uint8_t buf[8192];
    for (int i = 0; i < 2; i++) {
        int *fd = i ? &s->err_r : &s->out_r;
        if (!p[i].revents)
            continue;
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n <= 0) {
            close(*fd);
            *fd = -1;
        } else if (i == 0) {
            take_frames(v, buf, (size_t)n);
        } else {
            assert_true(v->own_err_len + (size_t)n < sizeof v->own_err);
            memcpy(v->own_err + v->own_err_len, buf, (size_t)n);
            v->own_err_len += (size_t)n;
        }
    }
    return 1;
}

/* Read frames while *flag (a field of v) is value; fails past the deadline or when the
 * supervisor's outputs end first. */
static void pump_while(sup_t *s, seen_t *v, const int *flag, int value, int64_t deadline) {
    while (*flag == value) {
        assert_true(hvd__clock_now_ms() < deadline);
        assert_true(pump(s, v, 100));
    }
}

/* Read both outputs to their ends and reap; returns the supervisor's exit code. */
static int finish_supervisor(sup_t *s, seen_t *v) {
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    while (pump(s, v, 100))
        assert_true(hvd__clock_now_ms() < deadline);
    for (size_t i = 0; i < MAX_RANKS; i++)
        v->out[i][v->out_len[i]] = v->err[i][v->err_len[i]] = '\0';
    v->own_err[v->own_err_len] = '\0';
    int status;
    assert_int_equal(waitpid(s->pid, &status, 0), s->pid);
    if (s->in_w >= 0)
        close(s->in_w);
    hvd__exec_reader_fini(&v->rx);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static seen_t *new_seen(size_t nranks) {
    seen_t *v = calloc(1, sizeof *v);
    hvd__exec_reader_init(&v->rx, nranks);
    return v;
}

/* Three ranks through one supervisor: each with the shared and its own variables, its own
 * output on its own stream, its own exit code. */
static void test_supervisor_runs_ranks(void **state) {
    (void)state;
    char *env[] = {"HVD_TEST_VALUE=from the launcher", NULL};
    char *argv[] = {"sh", "-c",
                    "pwd; echo \"$HVD_TEST_VALUE $HOROVOD_RANK\"; echo err$HOROVOD_RANK >&2; "
                    "exit $((HOROVOD_RANK + 3))",
                    NULL};
    char *r0[] = {"HOROVOD_RANK=0", NULL}, *r1[] = {"HOROVOD_RANK=1", NULL},
         *r2[] = {"HOROVOD_RANK=2", "HVD_TEST_VALUE=its own", NULL};
    char **ranks[] = {r0, r1, r2};
    size_t len;
    uint8_t *spec = make_spec("/tmp", env, argv, 3, ranks, &len);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    seen_t *v = new_seen(3);
    assert_int_equal(finish_supervisor(&s, v), 0);
    assert_int_equal(v->ready, 1);
    const char *want_out[] = {"/tmp\nfrom the launcher 0\n", "/tmp\nfrom the launcher 1\n",
                              "/tmp\nits own 2\n"};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(v->out[i], want_out[i]);
        char want_err[16];
        snprintf(want_err, sizeof want_err, "err%d\n", i);
        assert_string_equal(v->err[i], want_err);
        assert_true(v->ended[i]);
        assert_true(WIFEXITED(v->status[i]));
        assert_int_equal(WEXITSTATUS(v->status[i]), i + 3);
    }
    assert_string_equal(v->own_err, "");
    free(v);
}

static void test_supervisor_missing_dir(void **state) {
    (void)state;
    char *argv[] = {"sh", "-c", "echo ran", NULL};
    char *env[] = {"HOROVOD_HOSTNAME=h7", NULL}; /* errors name the host as the user wrote it */
    size_t len;
    uint8_t *spec = make_spec("/no/such/dir", env, argv, 1, NULL, &len);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    seen_t *v = new_seen(1);
    assert_int_equal(finish_supervisor(&s, v), 0);
    assert_string_equal(v->out[0], "ran\n");
    assert_int_equal(v->status[0], 0);
    assert_non_null(strstr(
        v->own_err, "horovodrun (on h7): cannot change to the launcher's directory /no/such/dir"));
    free(v);
}

static void test_supervisor_bad_spec(void **state) {
    (void)state;
    const uint8_t junk[HVD_EXEC_SPEC_HEADER_LEN] = "GARBAGE!!!!";
    sup_t s;
    start_supervisor(junk, sizeof junk, &s);
    seen_t *v = new_seen(1);
    assert_int_equal(finish_supervisor(&s, v), 126);
    assert_int_equal(v->ready, 0);
    assert_non_null(strstr(v->own_err, "wrong magic"));
    free(v);
}

/* Wait until every rank of a "sleep 1000 & echo $! > pidfile.N; echo started; wait" command
 * has started; returns the sleepers' pids. */
static void wait_started(sup_t *s, seen_t *v, size_t nranks) {
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    for (;;) {
        size_t up = 0;
        for (size_t i = 0; i < nranks; i++)
            up += v->out_len[i] > 0;
        if (up == nranks)
            return;
        assert_true(hvd__clock_now_ms() < deadline);
        assert_true(pump(s, v, 100));
    }
}

static int read_pid(const char *dir, size_t i) {
    char path[128];
    snprintf(path, sizeof path, "%s/pid.%zu", dir, i);
    int pid = 0;
    for (int tries = 0; tries < 100 && !pid; tries++) {
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        if (!pid)
            hvd__clock_sleep_ms(10);
    }
    assert_true(pid > 0);
    unlink(path);
    return pid;
}

static void assert_gone(int pid) {
    int64_t until = hvd__clock_now_ms() + DEADLINE_MS;
    while (kill(pid, 0) == 0 && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(10);
    assert_int_equal(kill(pid, 0), -1);
}

static uint8_t *sleepers_spec(const char *dir, size_t nranks, size_t *len_p) {
    char script[256];
    snprintf(script, sizeof script,
             "sleep 1000 & echo $! > %s/pid.$HOROVOD_RANK; echo started; wait", dir);
    char *argv[] = {"sh", "-c", script, NULL};
    static char names[MAX_RANKS][32];
    static char *lists[MAX_RANKS][2];
    char **ranks[MAX_RANKS];
    for (size_t i = 0; i < nranks; i++) {
        snprintf(names[i], sizeof names[i], "HOROVOD_RANK=%zu", i);
        lists[i][0] = names[i];
        lists[i][1] = NULL;
        ranks[i] = lists[i];
    }
    return make_spec("/", NULL, argv, nranks, ranks, len_p);
}

/* The launcher going away (end of input) ends every rank's whole tree, background children
 * included, within the grace period. */
static void test_supervisor_input_end_stops_trees(void **state) {
    (void)state;
    char dir[] = "/tmp/hvd-exec-pids.XXXXXX";
    assert_non_null(mkdtemp(dir));
    size_t len;
    uint8_t *spec = sleepers_spec(dir, 2, &len);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    seen_t *v = new_seen(2);
    wait_started(&s, v, 2);
    int sleepers[2] = {read_pid(dir, 0), read_pid(dir, 1)};
    assert_int_equal(kill(sleepers[0], 0), 0);
    close(s.in_w); /* the launcher is gone */
    s.in_w = -1;
    assert_int_equal(finish_supervisor(&s, v), 0);
    for (int i = 0; i < 2; i++) {
        assert_true(WIFSIGNALED(v->status[i]) || WEXITSTATUS(v->status[i]) == 143);
        assert_gone(sleepers[i]);
    }
    rmdir(dir);
    free(v);
}

/* STOP and KILL commands end one rank and leave the others running. */
static void test_supervisor_commands_one_rank(void **state) {
    (void)state;
    char dir[] = "/tmp/hvd-exec-pids.XXXXXX";
    assert_non_null(mkdtemp(dir));
    size_t len;
    uint8_t *spec = sleepers_spec(dir, 3, &len);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    seen_t *v = new_seen(3);
    wait_started(&s, v, 3);
    int sleepers[3] = {read_pid(dir, 0), read_pid(dir, 1), read_pid(dir, 2)};
    uint8_t c[HVD_EXEC_COMMAND_LEN];
    hvd__exec_command_encode(c, HVD_EXEC_STOP, 1);
    assert_int_equal(write(s.in_w, c, sizeof c), (ssize_t)sizeof c);
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    pump_while(&s, v, &v->ended[1], 0, deadline);
    assert_gone(sleepers[1]);
    assert_int_equal(kill(sleepers[0], 0), 0);
    assert_int_equal(kill(sleepers[2], 0), 0);
    assert_false(v->exited[0] || v->exited[2]);
    hvd__exec_command_encode(c, HVD_EXEC_KILL, 2);
    assert_int_equal(write(s.in_w, c, sizeof c), (ssize_t)sizeof c);
    pump_while(&s, v, &v->ended[2], 0, deadline);
    assert_true(WIFSIGNALED(v->status[2]) && WTERMSIG(v->status[2]) == SIGKILL);
    assert_gone(sleepers[2]);
    assert_false(v->exited[0]);
    /* a command naming no rank stops everything, with a message */
    hvd__exec_command_encode(c, HVD_EXEC_STOP, 3);
    assert_int_equal(write(s.in_w, c, sizeof c), (ssize_t)sizeof c);
    assert_int_equal(finish_supervisor(&s, v), 0);
    assert_true(v->ended[0]);
    assert_gone(sleepers[0]);
    assert_non_null(strstr(v->own_err, "malformed command"));
    rmdir(dir);
    free(v);
}

/* A rank whose command is stopped by a signal is reported (STATE, with its pid), and so is
 * its SIGCONT; its neighbour, running, is never reported stopped. */
static void test_supervisor_reports_stopped_rank(void **state) {
    (void)state;
    char dir[] = "/tmp/hvd-exec-pids.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char script[256];
    snprintf(
        script, sizeof script,
        "echo $$ > %s/pid.$HOROVOD_RANK; echo started; "
        "if [ $HOROVOD_RANK = 1 ]; then kill -STOP $$; sleep 2; else sleep 5; fi; echo resumed",
        dir);
    char *argv[] = {"sh", "-c", script, NULL};
    char *r0[] = {"HOROVOD_RANK=0", NULL}, *r1[] = {"HOROVOD_RANK=1", NULL};
    char **ranks[] = {r0, r1};
    size_t len;
    uint8_t *spec = make_spec("/", NULL, argv, 2, ranks, &len);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    seen_t *v = new_seen(2);
    wait_started(&s, v, 2);
    int pid1 = read_pid(dir, 1);
    read_pid(dir, 0); /* (its file goes, for the rmdir below) */
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    pump_while(&s, v, &v->stopped[1], 0, deadline); /* looked at once a second */
    assert_int_equal(v->state_pid[1], pid1);
    assert_int_equal(kill(pid1, SIGCONT), 0);
    pump_while(&s, v, &v->stopped[1], 1, deadline);
    assert_int_equal(v->states[1], 2);
    assert_int_equal(finish_supervisor(&s, v), 0);
    assert_int_equal(v->states[0], 0); /* sleeping is not stopped */
    assert_true(v->exited[1] && WIFEXITED(v->status[1]) && WEXITSTATUS(v->status[1]) == 0);
    assert_non_null(strstr(v->out[1], "resumed"));
    rmdir(dir);
    free(v);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ssh_argv),
        cmocka_unit_test(test_shell_quote),
        cmocka_unit_test(test_supervisor_runs_ranks),
        cmocka_unit_test(test_supervisor_missing_dir),
        cmocka_unit_test(test_supervisor_bad_spec),
        cmocka_unit_test(test_supervisor_input_end_stops_trees),
        cmocka_unit_test(test_supervisor_commands_one_rank),
        cmocka_unit_test(test_supervisor_reports_stopped_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
