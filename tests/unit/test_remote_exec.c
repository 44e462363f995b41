/* What a remote rank gets over ssh: the spec codec (round trip, every malformed form), the
 * ssh command line and shell quoting, and the supervisor itself (`horovodrun
 * --internal-exec`, run here without ssh): directory, environment, exit codes, output, and
 * the rank's tree ending when its input ends (the launcher is gone). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "runner/remote_exec.h"
#include "runner/ssh.h"
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

static void test_spec_round_trip(void **state) {
    (void)state;
    char *env[] = {"A=1", "EMPTY=", "MULTI=line one\nline two", "_HOROVOD_SECRET_KEY=abc", NULL};
    char *argv[] = {"sh", "-c", "echo 'quoted' \"$A\"", "", NULL};
    uint8_t *buf;
    size_t len;
    assert_int_equal(hvd__exec_spec_encode("/some dir", env, argv, &buf, &len), HVD_OK);
    size_t payload;
    assert_int_equal(hvd__exec_spec_header(buf, &payload), HVD_OK);
    assert_int_equal(payload + HVD_EXEC_SPEC_HEADER_LEN, len);
    hvd_exec_spec_t spec;
    assert_int_equal(hvd__exec_spec_decode(buf + HVD_EXEC_SPEC_HEADER_LEN, payload, &spec), HVD_OK);
    assert_string_equal(spec.cwd, "/some dir");
    assert_int_equal(spec.env_count, 4);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(spec.env[i], env[i]);
    assert_null(spec.env[4]);
    assert_int_equal(spec.argc, 4);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(spec.argv[i], argv[i]);
    assert_null(spec.argv[4]);
    hvd__exec_spec_fini(&spec);

    /* every truncation of the payload is refused, never read past */
    for (size_t cut = 0; cut < payload; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf + HVD_EXEC_SPEC_HEADER_LEN, cut);
        assert_int_equal(hvd__exec_spec_decode(copy, cut, &spec), HVD_ERR_PROTOCOL);
        free(copy);
    }
    free(buf);
}

static void test_spec_malformed(void **state) {
    (void)state;
    char *argv[] = {"true", NULL};
    uint8_t *buf;
    size_t len, payload;
    hvd_exec_spec_t spec;
    assert_int_equal(hvd__exec_spec_encode("/", NULL, argv, &buf, &len), HVD_OK);
    uint8_t h[HVD_EXEC_SPEC_HEADER_LEN];
    memcpy(h, buf, sizeof h);
    h[0] = 'X'; /* magic */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);
    memcpy(h, buf, sizeof h);
    hvd__le16_put(h + 4, 2); /* version */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);
    memcpy(h, buf, sizeof h);
    h[6] = 1; /* reserved */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);
    memcpy(h, buf, sizeof h);
    hvd__le32_put(h + 8, HVD_EXEC_SPEC_MAX); /* more than the bound */
    assert_int_equal(hvd__exec_spec_header(h, &payload), HVD_ERR_PROTOCOL);

    /* trailing bytes */
    uint8_t *p = buf + HVD_EXEC_SPEC_HEADER_LEN;
    size_t n = len - HVD_EXEC_SPEC_HEADER_LEN;
    uint8_t *longer = calloc(n + 1, 1);
    memcpy(longer, p, n);
    assert_int_equal(hvd__exec_spec_decode(longer, n + 1, &spec), HVD_ERR_PROTOCOL);
    free(longer);
    /* a count far beyond what is there is refused before allocating */
    uint8_t huge_env[] = {1, 0, 0, 0, '/', 0xff, 0xff, 0xff, 0x7f};
    assert_int_equal(hvd__exec_spec_decode(huge_env, sizeof huge_env, &spec), HVD_ERR_PROTOCOL);
    free(buf);

    /* an env entry that is not NAME=VALUE; an empty argv; a NUL inside a string */
    char *bad_env[] = {"NOEQUALS", NULL};
    assert_int_equal(hvd__exec_spec_encode("/", bad_env, argv, &buf, &len), HVD_OK);
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);
    char *no_argv[] = {NULL};
    assert_int_equal(hvd__exec_spec_encode("/", NULL, no_argv, &buf, &len), HVD_OK);
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);
    assert_int_equal(hvd__exec_spec_encode("/ab", NULL, argv, &buf, &len), HVD_OK);
    buf[12 + 4 + 1] = 0; /* "/\0b" */
    assert_int_equal(hvd__exec_spec_decode(buf + 12, len - 12, &spec), HVD_ERR_PROTOCOL);
    free(buf);

    /* too large to send */
    size_t big = HVD_EXEC_SPEC_MAX;
    char *value = malloc(big);
    memset(value, 'x', big - 1);
    memcpy(value, "BIG=", 4);
    value[big - 1] = '\0';
    char *big_env[] = {value, NULL};
    assert_int_equal(hvd__exec_spec_encode("/", big_env, argv, &buf, &len), HVD_ERR_INVALID_ARG);
    free(value);
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
    for (size_t i = 0; want[i]; i++)
        assert_string_equal(argv[i], want[i]);
    assert_null(argv[sizeof want / sizeof want[0] - 1]);
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

/* Read both outputs to their ends and reap; returns the exit code. */
static int finish_supervisor(sup_t *s, char *out, size_t out_cap, char *err, size_t err_cap) {
    size_t no = 0, ne = 0;
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    while (s->out_r >= 0 || s->err_r >= 0) {
        assert_true(hvd__clock_now_ms() < deadline);
        struct pollfd p[2] = {{.fd = s->out_r, .events = POLLIN},
                              {.fd = s->err_r, .events = POLLIN}};
        poll(p, 2, 100);
        int *fds[2] = {&s->out_r, &s->err_r};
        char *bufs[2] = {out, err};
        size_t *lens[2] = {&no, &ne}, caps[2] = {out_cap, err_cap};
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            ssize_t n = read(*fds[i], bufs[i] + *lens[i], caps[i] - 1 - *lens[i]);
            if (n <= 0) {
                close(*fds[i]);
                *fds[i] = -1;
            } else {
                *lens[i] += (size_t)n;
            }
        }
    }
    out[no] = err[ne] = '\0';
    int status;
    assert_int_equal(waitpid(s->pid, &status, 0), s->pid);
    if (s->in_w >= 0)
        close(s->in_w);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_supervisor_runs_command(void **state) {
    (void)state;
    char *env[] = {"HVD_TEST_VALUE=from the launcher", NULL};
    char *argv[] = {"sh", "-c", "pwd; echo \"$HVD_TEST_VALUE\"; echo to-stderr >&2; exit 5", NULL};
    uint8_t *spec;
    size_t len;
    assert_int_equal(hvd__exec_spec_encode("/tmp", env, argv, &spec, &len), HVD_OK);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    char out[4096], err[4096];
    assert_int_equal(finish_supervisor(&s, out, sizeof out, err, sizeof err), 5);
    assert_string_equal(out, "/tmp\nfrom the launcher\n");
    assert_string_equal(err, "to-stderr\n");
}

static void test_supervisor_missing_dir(void **state) {
    (void)state;
    char *argv[] = {"sh", "-c", "echo ran", NULL};
    uint8_t *spec;
    size_t len;
    char *env[] = {"HOROVOD_HOSTNAME=h7", NULL}; /* errors name the host as the user wrote it */
    assert_int_equal(hvd__exec_spec_encode("/no/such/dir", env, argv, &spec, &len), HVD_OK);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    char out[4096], err[4096];
    assert_int_equal(finish_supervisor(&s, out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "ran\n");
    assert_non_null(
        strstr(err, "horovodrun (on h7): cannot change to the launcher's directory /no/such/dir"));
}

static void test_supervisor_bad_spec(void **state) {
    (void)state;
    const uint8_t junk[HVD_EXEC_SPEC_HEADER_LEN] = "GARBAGE!!!!";
    sup_t s;
    start_supervisor(junk, sizeof junk, &s);
    char out[4096], err[4096];
    assert_int_equal(finish_supervisor(&s, out, sizeof out, err, sizeof err), 126);
    assert_non_null(strstr(err, "wrong magic"));
}

/* The launcher going away (end of input) ends the rank's whole tree, background children
 * included, within the grace period. */
static void test_supervisor_input_end_stops_tree(void **state) {
    (void)state;
    char pidfile[] = "/tmp/hvd-exec-pids.XXXXXX";
    int fd = mkstemp(pidfile);
    assert_true(fd >= 0);
    close(fd);
    char script[256];
    snprintf(script, sizeof script, "sleep 1000 & echo $! > %s; echo started; wait", pidfile);
    char *argv[] = {"sh", "-c", script, NULL};
    uint8_t *spec;
    size_t len;
    assert_int_equal(hvd__exec_spec_encode("/", NULL, argv, &spec, &len), HVD_OK);
    sup_t s;
    start_supervisor(spec, len, &s);
    free(spec);
    char line[64] = "";
    int64_t deadline = hvd__clock_now_ms() + DEADLINE_MS;
    ssize_t n = 0;
    while (n <= 0 && hvd__clock_now_ms() < deadline)
        n = read(s.out_r, line, sizeof line - 1); /* "started" */
    assert_true(n > 0);
    FILE *f = fopen(pidfile, "r");
    int sleeper = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%d", &sleeper), 1);
    fclose(f);
    unlink(pidfile);
    assert_int_equal(kill(sleeper, 0), 0);
    close(s.in_w); /* the launcher is gone */
    s.in_w = -1;
    char out[4096], err[4096];
    int code = finish_supervisor(&s, out, sizeof out, err, sizeof err);
    assert_int_equal(code, 143); /* sh ended by SIGTERM */
    int64_t until = hvd__clock_now_ms() + DEADLINE_MS;
    while (kill(sleeper, 0) == 0 && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(10);
    assert_int_equal(kill(sleeper, 0), -1);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_round_trip),
        cmocka_unit_test(test_spec_malformed),
        cmocka_unit_test(test_ssh_argv),
        cmocka_unit_test(test_shell_quote),
        cmocka_unit_test(test_supervisor_runs_command),
        cmocka_unit_test(test_supervisor_missing_dir),
        cmocka_unit_test(test_supervisor_bad_spec),
        cmocka_unit_test(test_supervisor_input_end_stops_tree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
