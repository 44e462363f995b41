/* Elastic host discovery: the output format (host or host:slots per line, --slots-per-host,
 * every malformed form named by line), and running the script (exit codes with its stderr,
 * the deadline killing its whole process group, the output cap, the last good set kept when
 * a later run fails, a first failure being fatal). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "runner/process/capture.h"
#include "runner/elastic/host_discovery.h"

#include <hvd/hvd.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static hvd_status_t parse(const char *text, int default_slots, hvd_host_list_t *l) {
    return hvd__hosts_parse_discovery(text, strlen(text), default_slots, l);
}

static void test_parse_ok(void **state) {
    (void)state;
    hvd_host_list_t l;
    assert_int_equal(parse("h1:2\nh2\n\n  10.0.0.3:4  \r\n", 3, &l), HVD_OK);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.hosts[0].name, "h1");
    assert_int_equal(l.hosts[0].slots, 2);
    assert_string_equal(l.hosts[1].name, "h2");
    assert_int_equal(l.hosts[1].slots, 3);
    assert_string_equal(l.hosts[2].name, "10.0.0.3");
    assert_int_equal(l.hosts[2].slots, 4);
    hvd__hosts_fini(&l);
    /* no output: no hosts yet, which is valid */
    assert_int_equal(parse("", 0, &l), HVD_OK);
    assert_int_equal(l.count, 0);
    hvd__hosts_fini(&l);
    assert_int_equal(parse("\n \n", 0, &l), HVD_OK);
    assert_int_equal(l.count, 0);
    hvd__hosts_fini(&l);
    /* no final newline */
    assert_int_equal(parse("a:1\nb:1", 0, &l), HVD_OK);
    assert_int_equal(l.count, 2);
    hvd__hosts_fini(&l);
}

static void expect_bad(const char *text, int default_slots, const char *needle) {
    hvd_host_list_t l;
    assert_int_equal(parse(text, default_slots, &l), HVD_ERR_INVALID_ARG);
    if (!strstr(hvd_last_error(), needle))
        fail_msg("error for [%s]: [%s] lacks [%s]", text, hvd_last_error(), needle);
}

static void test_parse_bad(void **state) {
    (void)state;
    expect_bad("h1:2\nh2\n", 0, "line 2 'h2' gives no slots and --slots-per-host was not set");
    expect_bad("h1:0\n", 0, "line 1 'h1:0': slots '0' is not a whole number");
    expect_bad("h1:two\n", 0, "slots 'two'");
    expect_bad("h1:-1\n", 0, "slots '-1'");
    expect_bad("a:1\nbad host:2\n", 0, "line 2 'bad host:2'");
    expect_bad("user@h1:2\n", 0, "may hold only letters");
    expect_bad(":2\n", 0, "the host name is empty");
    expect_bad("h1:2\nh2:1\nh1:4\n", 0, "line 3: host 'h1' is listed twice");
    const char nul[] = "h1:2\nh\0:1\n";
    hvd_host_list_t l;
    assert_int_equal(hvd__hosts_parse_discovery(nul, sizeof nul - 1, 0, &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "line 2 holds a NUL byte"));
}

/* The helpers that keep the end of a program's output and find its last line. */
static void test_tail_and_last_line(void **state) {
    (void)state;
    char buf[8];
    size_t len = 0;
    hvd__capture_keep_tail(buf, sizeof buf, &len, "abc", 3);
    hvd__capture_keep_tail(buf, sizeof buf, &len, "defgh", 5);
    assert_int_equal(len, 8);
    assert_memory_equal(buf, "abcdefgh", 8);
    hvd__capture_keep_tail(buf, sizeof buf, &len, "ij", 2);
    assert_memory_equal(buf, "cdefghij", 8);
    hvd__capture_keep_tail(buf, sizeof buf, &len, "0123456789", 10);
    assert_memory_equal(buf, "23456789", 8);
    char line[64];
    const char *text = "first\nsecond line\r\n\n";
    hvd__capture_last_line(text, strlen(text), line, sizeof line);
    assert_string_equal(line, "second line");
    hvd__capture_last_line("only", 4, line, sizeof line);
    assert_string_equal(line, "only");
    hvd__capture_last_line("", 0, line, sizeof line);
    assert_string_equal(line, "");
}

static char dir[] = "/tmp/hvd-hostdisc.XXXXXX";

static const char *script(const char *name, const char *body) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
    return path;
}

static void test_run(void **state) {
    (void)state;
    hvd_host_list_t l;
    hvd_host_discovery_config_t c = {.script = script("ok", "echo h1:2; echo h2"),
                                     .default_slots = 1};
    assert_int_equal(hvd__host_discovery_run(&c, &l), HVD_OK);
    assert_int_equal(l.count, 2);
    assert_int_equal(l.hosts[1].slots, 1);
    hvd__hosts_fini(&l);

    c.script = script("fails", "echo h1:2; echo 'no cluster today' >&2; exit 3");
    assert_int_equal(hvd__host_discovery_run(&c, &l), HVD_ERR_IO);
    assert_non_null(strstr(hvd_last_error(), "failed with exit code 3: no cluster today"));

    c.script = script("malformed", "echo h1:2; echo 'h2 slots=4'");
    assert_int_equal(hvd__host_discovery_run(&c, &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "line 2 'h2 slots=4'"));
    assert_non_null(strstr(hvd_last_error(), "may hold only letters"));

    c.script = script("chatty", "yes h1:1 | head -c 100000");
    c.output_cap = 1000;
    assert_int_equal(hvd__host_discovery_run(&c, &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "printed more than 1000 bytes"));
    c.output_cap = 0;
}

/* A hanging script is killed at the deadline, with what it started. */
static void test_run_deadline(void **state) {
    (void)state;
    char body[512];
    snprintf(body, sizeof body, "sleep 60 & echo $! > %s/child; wait", dir);
    hvd_host_discovery_config_t c = {.script = script("hangs", body), .timeout_ms = 300};
    hvd_host_list_t l;
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__host_discovery_run(&c, &l), HVD_ERR_TIMEOUT);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took < 10000);
    assert_non_null(strstr(hvd_last_error(), "did not finish within 300 ms"));
    char path[256];
    snprintf(path, sizeof path, "%s/child", dir);
    FILE *f = fopen(path, "r");
    int child = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%d", &child), 1);
    fclose(f);
    int64_t until = hvd__clock_now_ms() + 10000;
    while (kill(child, 0) == 0 && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(10);
    assert_int_equal(kill(child, 0), -1);
}

/* The first failure is fatal; later ones keep the last good set. */
static void test_poll_keeps_last_good(void **state) {
    (void)state;
    char body[512];
    /* answers in turn: fail, h1:2 h2:2, fail, h3:1 */
    snprintf(body, sizeof body,
             "n=$(cat %s/n 2>/dev/null || echo 0); echo $((n + 1)) > %s/n\n"
             "case $n in 0|2) exit 1 ;; 1) echo h1:2; echo h2:2 ;; *) echo h3:1 ;; esac",
             dir, dir);
    hvd_host_discovery_config_t c = {.script = script("turns", body)};
    hvd_host_discovery_t *d;
    assert_int_equal(hvd__host_discovery_create(&c, &d), HVD_OK);
    hvd_host_list_t l;
    int stale = -1;
    assert_int_equal(hvd__host_discovery_poll(d, &l, &stale), HVD_ERR_IO);
    assert_int_equal(hvd__host_discovery_poll(d, &l, &stale), HVD_OK);
    assert_int_equal(stale, 0);
    assert_int_equal(l.count, 2);
    hvd__hosts_fini(&l);
    assert_int_equal(hvd__host_discovery_poll(d, &l, &stale), HVD_OK);
    assert_int_equal(stale, 1);
    assert_int_equal(l.count, 2);
    assert_string_equal(l.hosts[1].name, "h2");
    hvd__hosts_fini(&l);
    assert_int_equal(hvd__host_discovery_poll(d, &l, &stale), HVD_OK);
    assert_int_equal(stale, 0);
    assert_int_equal(l.count, 1);
    assert_string_equal(l.hosts[0].name, "h3");
    hvd__hosts_fini(&l);
    hvd__host_discovery_destroy(d);
}

static int setup(void **state) {
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tail_and_last_line), cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_bad),          cmocka_unit_test(test_run),
        cmocka_unit_test(test_run_deadline),       cmocka_unit_test(test_poll_keeps_last_good),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
