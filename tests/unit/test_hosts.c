/* Host strings, hostfiles and the slot plan (reference 2.2 semantics, exactly -np ranks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void expect_error(const char *hosts, const char *needle) {
    hvd_host_list_t l;
    assert_int_equal(hvd__hosts_parse(hosts, &l), HVD_ERR_INVALID_ARG);
    if (!strstr(hvd_last_error(), needle))
        fail_msg("-H '%s': error '%s' lacks '%s'", hosts, hvd_last_error(), needle);
}

static void test_parse_hosts(void **state) {
    (void)state;
    hvd_host_list_t l;
    assert_int_equal(hvd__hosts_parse("worker-0:2, worker_1.example:4 ,10.0.0.3:0", &l), HVD_OK);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.hosts[0].name, "worker-0");
    assert_int_equal(l.hosts[0].slots, 2);
    assert_string_equal(l.hosts[1].name, "worker_1.example");
    assert_int_equal(l.hosts[1].slots, 4);
    assert_int_equal(l.hosts[2].slots, 0);
    hvd__hosts_fini(&l);
    expect_error("a:2,b", "invalid host 'b'");
    expect_error("a:2,", "empty host");
    expect_error("a:x", "slots 'x' is not a number");
    expect_error("a:-1", "slots '-1'");
    expect_error("a:2,a:1", "host 'a' appears twice");
    expect_error("a b:2", "invalid host 'a b:2'");
    expect_error("user@a:2", "invalid host 'user@a:2'");
    expect_error("", "empty host");
}

static char *write_file(const char *text) {
    static char path[64];
    strcpy(path, "/tmp/hvd-hostfile-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_hostfile(void **state) {
    (void)state;
    hvd_host_list_t l;
    char *p = write_file("# cluster\n\nh1 slots=2\n  h2   slots = 3   # big\nh3\n");
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_OK);
    unlink(p);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.hosts[1].name, "h2");
    assert_int_equal(l.hosts[1].slots, 3);
    assert_int_equal(l.hosts[2].slots, 1);
    hvd__hosts_fini(&l);
    p = write_file("h1 slots=2\nh2 slots=two\n");
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), ":2: expected 'host slots=N', got 'h2 slots=two'"));
    unlink(p);
    p = write_file("h1 max_slots=2\n");
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    unlink(p);
    p = write_file("# nothing\n\n");
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "lists no hosts"));
    unlink(p);
    assert_int_equal(hvd__hosts_parse_file("/nonexistent/hosts", &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "/nonexistent/hosts"));
}

/* plan[i] must equal "rank=.. size=.. ..." */
static void expect_plan(const char *hosts, int np, const char *const *lines, size_t n) {
    hvd_host_list_t l;
    hvd_slot_plan_t plan;
    assert_int_equal(hvd__hosts_parse(hosts, &l), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&l, np, &plan), HVD_OK);
    assert_int_equal(plan.count, n);
    for (size_t i = 0; i < n; i++) {
        char line[256];
        hvd__slot_format(&plan.slots[i], line, sizeof line);
        assert_string_equal(line, lines[i]);
    }
    hvd__slot_plan_fini(&plan);
    hvd__hosts_fini(&l);
}

static void test_slot_plans(void **state) {
    (void)state;
    const char *homog[] = {
        "rank=0 size=4 local_rank=0 local_size=2 cross_rank=0 cross_size=2 host=a",
        "rank=1 size=4 local_rank=1 local_size=2 cross_rank=0 cross_size=2 host=a",
        "rank=2 size=4 local_rank=0 local_size=2 cross_rank=1 cross_size=2 host=b",
        "rank=3 size=4 local_rank=1 local_size=2 cross_rank=1 cross_size=2 host=b"};
    expect_plan("a:2,b:2", 4, homog, 4);
    /* heterogeneous: non-uniform cross_size; 0-slot hosts skipped */
    const char *het[] = {
        "rank=0 size=4 local_rank=0 local_size=1 cross_rank=0 cross_size=2 host=a",
        "rank=1 size=4 local_rank=0 local_size=3 cross_rank=1 cross_size=2 host=c",
        "rank=2 size=4 local_rank=1 local_size=3 cross_rank=0 cross_size=1 host=c",
        "rank=3 size=4 local_rank=2 local_size=3 cross_rank=0 cross_size=1 host=c"};
    expect_plan("a:1,b:0,c:3", 4, het, 4);
    /* exactly -np ranks even with more slots (the reference launched all 4) */
    const char *capped[] = {
        "rank=0 size=2 local_rank=0 local_size=2 cross_rank=0 cross_size=1 host=localhost",
        "rank=1 size=2 local_rank=1 local_size=2 cross_rank=0 cross_size=1 host=localhost"};
    expect_plan("localhost:4", 2, capped, 2);
    /* too few slots */
    hvd_host_list_t l;
    hvd_slot_plan_t plan;
    assert_int_equal(hvd__hosts_parse("a:2,b:2", &l), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&l, 5, &plan), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(),
                           "requested 5 processes but the hosts provide only 4 slots (a:2, b:2)"));
    assert_int_equal(hvd__slot_plan_create(&l, 0, &plan), HVD_ERR_INVALID_ARG);
    hvd__hosts_fini(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_hosts),
        cmocka_unit_test(test_hostfile),
        cmocka_unit_test(test_slot_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
