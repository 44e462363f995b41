/* Host strings, hostfiles and the slot plan (Horovod's semantics, exactly -np ranks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/hosts/hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void expect_error(const char *hosts, const char *needle) {
    hvd_host_list_t l = {(hvd_host_t *)&l, 77}; /* must stay untouched on error */
    if (hvd__hosts_parse(hosts, &l) != HVD_ERR_INVALID_ARG)
        fail_msg("-H '%s' was accepted", hosts);
    if (!strstr(hvd_last_error(), needle))
        fail_msg("-H '%s': error '%s' lacks '%s'", hosts, hvd_last_error(), needle);
    assert_ptr_equal(l.hosts, (hvd_host_t *)&l);
    assert_int_equal(l.count, 77);
}

static void test_parse_hosts(void **state) {
    (void)state;
    hvd_host_list_t l;
    assert_int_equal(hvd__hosts_parse("worker-0:2, worker_1.example:4 ,\t10.0.0.3:0", &l), HVD_OK);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.hosts[0].name, "worker-0");
    assert_int_equal(l.hosts[0].slots, 2);
    assert_string_equal(l.hosts[1].name, "worker_1.example");
    assert_int_equal(l.hosts[1].slots, 4);
    assert_string_equal(l.hosts[2].name, "10.0.0.3");
    assert_int_equal(l.hosts[2].slots, 0);
    hvd__hosts_fini(&l);
    assert_null(l.hosts);
    assert_int_equal(l.count, 0);
    hvd__hosts_fini(&l); /* idempotent */

    assert_int_equal(hvd__hosts_parse("localhost:1000000", &l), HVD_OK);
    assert_int_equal(l.count, 1);
    assert_int_equal(l.hosts[0].slots, 1000000);
    hvd__hosts_fini(&l);
}

static void test_parse_hosts_errors(void **state) {
    (void)state;
    expect_error("h1", "invalid host 'h1' in -H: expected host:slots (e.g. worker-0:2)");
    expect_error("a:2,b", "invalid host 'b' in -H: expected host:slots");
    expect_error("a:2,", "empty host in -H 'a:2,'");
    expect_error(",a:2", "empty host");
    expect_error("a:2,,b:1", "empty host");
    expect_error("a:2, ,b:1", "empty host");
    expect_error("", "empty host");
    expect_error("   ", "empty host");
    expect_error("a:x", "invalid host 'a:x' in -H: slots 'x' is not a number");
    expect_error("a:", "slots '' is not a number");
    expect_error("a:-1", "slots '-1' is not a number");
    expect_error("a:+1", "slots '+1' is not a number");
    expect_error("a:1.5", "slots '1.5' is not a number");
}

static void test_parse_hosts_names_and_duplicates(void **state) {
    (void)state;
    hvd_host_list_t l;
    /* whitespace around an item is trimmed, so "a:2 " is fine */
    assert_int_equal(hvd__hosts_parse("a:2 ", &l), HVD_OK);
    hvd__hosts_fini(&l);
    expect_error("a:2 x", "slots '2 x' is not a number");
    expect_error("a:2:3", "slots '2:3' is not a number");
    expect_error("a:99999999999", "slots '99999999999' is more than 1000000");
    expect_error("a:2,a:1", "host 'a' appears twice in -H; give each host once with all its slots");
    expect_error("a:1,b:1,a:1", "host 'a' appears twice");
    expect_error("a b:2", "invalid host 'a b:2' in -H: a host name may hold only letters");
    expect_error("user@a:2", "invalid host 'user@a:2' in -H: a host name may hold only");
    expect_error("[::1]:2", "invalid host '[::1]:2'");
    expect_error(":2", "invalid host ':2' in -H: the host name is empty");
    char longname[400];
    memset(longname, 'h', 300);
    strcpy(longname + 300, ":1");
    expect_error(longname, "longer than 255 characters");
}

static char *write_bytes(const char *text, size_t len) {
    static char path[64];
    strcpy(path, "/tmp/hvd-hostfile-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

static char *write_file(const char *text) {
    return write_bytes(text, strlen(text));
}

static void expect_file_error(const char *text, const char *needle) {
    hvd_host_list_t l;
    char *p = write_file(text);
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    /* every error names the file */
    if (!strstr(hvd_last_error(), needle) || !strstr(hvd_last_error(), p))
        fail_msg("hostfile '%s': error '%s' lacks '%s' or the path", text, hvd_last_error(),
                 needle);
    unlink(p);
}

static void test_hostfile(void **state) {
    (void)state;
    hvd_host_list_t l;
    char *p = write_file("# cluster\n"
                         "\n"
                         "h1 slots=2\n"
                         "  h2   slots = 3   # big\n"
                         "h3\n"
                         "\th4\tslots=0\r\n"
                         "   # indented comment\n"
                         "10.0.0.5 slots=4"); /* no final newline */
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_OK);
    unlink(p);
    assert_int_equal(l.count, 5);
    assert_string_equal(l.hosts[0].name, "h1");
    assert_int_equal(l.hosts[0].slots, 2);
    assert_string_equal(l.hosts[1].name, "h2");
    assert_int_equal(l.hosts[1].slots, 3);
    assert_string_equal(l.hosts[2].name, "h3");
    assert_int_equal(l.hosts[2].slots, 1); /* a bare host is one slot */
    assert_string_equal(l.hosts[3].name, "h4");
    assert_int_equal(l.hosts[3].slots, 0);
    assert_string_equal(l.hosts[4].name, "10.0.0.5");
    assert_int_equal(l.hosts[4].slots, 4);
    hvd__hosts_fini(&l);

    /* a line as long as the bound is read whole, not cut */
    char big[HVD_HOSTFILE_MAX_LINE + 3];
    memset(big, ' ', sizeof big);
    memcpy(big + HVD_HOSTFILE_MAX_LINE - 10, "hh slots=7\n", 12);
    p = write_file(big);
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_OK);
    unlink(p);
    assert_int_equal(l.count, 1);
    assert_int_equal(l.hosts[0].slots, 7);
    hvd__hosts_fini(&l);
    /* one byte more is refused, naming the line and the bound */
    memcpy(big + HVD_HOSTFILE_MAX_LINE - 9, "hh slots=7\n", 12);
    expect_file_error(big, ": line 1 is longer than 4096 bytes");

    expect_file_error("h1 slots=2\nh2 slots=two\n",
                      ":2: expected 'host slots=N', got 'h2 slots=two'");
    expect_file_error("h1 max_slots=2\n", ":1: expected 'host slots=N', got 'h1 max_slots=2'");
    expect_file_error("h1 slots=\n", ":1: expected 'host slots=N'");
    expect_file_error("h1 slots 2\n", ":1: expected 'host slots=N'");
    expect_file_error("h1 slots=2 extra\n", ":1: expected 'host slots=N', got 'h1 slots=2 extra'");
    expect_file_error("h1 slots=-2\n", ":1: expected 'host slots=N'");
    expect_file_error("h1:2\n", ":1: invalid host 'h1:2' in line 'h1:2'");
    expect_file_error("slots=2\n", ":1: expected 'host slots=N', got 'slots=2'");
    expect_file_error("# a\nbad/name slots=1\n", ":2: invalid host 'bad/name'");
    expect_file_error("h1 slots=99999999\n", ":1: slots in line 'h1 slots=99999999' is more than");
    expect_file_error("h1 slots=1\n\nh2\nh1 slots=3\n",
                      ":4: host 'h1' appears twice (first on line 1)");
    expect_file_error("# nothing\n\n", "lists no hosts");
    p = write_bytes("h1 slots=1\nh2\0 slots=1\n", 23);
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    unlink(p);
    assert_non_null(strstr(hvd_last_error(), ": line 2 holds a NUL byte"));
    expect_file_error("", "lists no hosts");
    assert_int_equal(hvd__hosts_parse_file("/nonexistent/hosts", &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "cannot open hostfile /nonexistent/hosts"));
}

/* 100,000 hosts: all kept in order, and a duplicate of the first found at the end. */
static void test_hostfile_many_hosts(void **state) {
    (void)state;
    enum { N = 100000 };
    size_t cap = (size_t)N * 24 + 64, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len, "node-%d slots=%d\n", i, 1 + i % 3);
    hvd_host_list_t l;
    char *p = write_bytes(text, len);
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_OK);
    unlink(p);
    assert_int_equal(l.count, N);
    for (int i = 0; i < N; i += 997) {
        char want[32];
        snprintf(want, sizeof want, "node-%d", i);
        assert_string_equal(l.hosts[i].name, want);
        assert_int_equal(l.hosts[i].slots, 1 + i % 3);
    }
    hvd__hosts_fini(&l);
    len += (size_t)snprintf(text + len, cap - len, "node-7 slots=1\n");
    p = write_bytes(text, len);
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    unlink(p);
    assert_non_null(strstr(hvd_last_error(), ":100001: host 'node-7' appears twice (first on "
                                             "line 8)"));
    free(text);
}

/* A file over the size bound is refused (the bound counts bytes, comments included). */
static void test_hostfile_size_bound(void **state) {
    (void)state;
    size_t len = HVD_HOSTFILE_MAX_BYTES + 1;
    char *text = malloc(len);
    assert_non_null(text);
    memset(text, '#', len);
    memcpy(text, "h1 slots=1\n", 11);
    for (size_t i = 100; i < len; i += 100)
        text[i] = '\n';
    char *p = write_bytes(text, len);
    hvd_host_list_t l;
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "is larger than 16777216 bytes"));
    assert_non_null(strstr(hvd_last_error(), p));
    unlink(p);
    /* exactly the bound is read */
    p = write_bytes(text, len - 1);
    assert_int_equal(hvd__hosts_parse_file(p, &l), HVD_OK);
    unlink(p);
    assert_int_equal(l.count, 1);
    hvd__hosts_fini(&l);
    free(text);
}

/* plan[i] must equal lines[i] ("rank=.. size=.. ..."). */
static void expect_plan(const char *hosts, int np, const char *const *lines, size_t n) {
    hvd_host_list_t l;
    hvd_slot_plan_t plan;
    assert_int_equal(hvd__hosts_parse(hosts, &l), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&l, np, &plan), HVD_OK);
    assert_int_equal(plan.count, n);
    for (size_t i = 0; i < n; i++) {
        char line[256];
        hvd__slot_format(&plan.slots[i], line, sizeof line);
        if (strcmp(line, lines[i]) != 0)
            fail_msg("-H %s -np %d rank %zu:\n  got  %s\n  want %s", hosts, np, i, line, lines[i]);
    }
    hvd__slot_plan_fini(&plan);
    assert_null(plan.slots);
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
    /* heterogeneous slots: non-uniform cross_size */
    const char *het[] = {
        "rank=0 size=7 local_rank=0 local_size=2 cross_rank=0 cross_size=3 host=a",
        "rank=1 size=7 local_rank=1 local_size=2 cross_rank=0 cross_size=2 host=a",
        "rank=2 size=7 local_rank=0 local_size=4 cross_rank=1 cross_size=3 host=b",
        "rank=3 size=7 local_rank=1 local_size=4 cross_rank=1 cross_size=2 host=b",
        "rank=4 size=7 local_rank=2 local_size=4 cross_rank=0 cross_size=1 host=b",
        "rank=5 size=7 local_rank=3 local_size=4 cross_rank=0 cross_size=1 host=b",
        "rank=6 size=7 local_rank=0 local_size=1 cross_rank=2 cross_size=3 host=c"};
    expect_plan("a:2,b:4,c:1", 7, het, 7);
    /* 0-slot hosts are skipped and take no cross index */
    const char *skip[] = {
        "rank=0 size=4 local_rank=0 local_size=1 cross_rank=0 cross_size=2 host=a",
        "rank=1 size=4 local_rank=0 local_size=3 cross_rank=1 cross_size=2 host=c",
        "rank=2 size=4 local_rank=1 local_size=3 cross_rank=0 cross_size=1 host=c",
        "rank=3 size=4 local_rank=2 local_size=3 cross_rank=0 cross_size=1 host=c"};
    expect_plan("z:0,a:1,b:0,c:3", 4, skip, 4);
    /* -np smaller than the slots: sizes count assigned ranks only */
    const char *partial[] = {
        "rank=0 size=3 local_rank=0 local_size=2 cross_rank=0 cross_size=2 host=a",
        "rank=1 size=3 local_rank=1 local_size=2 cross_rank=0 cross_size=1 host=a",
        "rank=2 size=3 local_rank=0 local_size=1 cross_rank=1 cross_size=2 host=b"};
    expect_plan("a:2,b:2", 3, partial, 3);
    /* exactly -np ranks even with more slots (the reference launched all 4) */
    const char *capped[] = {
        "rank=0 size=2 local_rank=0 local_size=2 cross_rank=0 cross_size=1 host=localhost",
        "rank=1 size=2 local_rank=1 local_size=2 cross_rank=0 cross_size=1 host=localhost"};
    expect_plan("localhost:4", 2, capped, 2);
    /* later hosts unused */
    const char *first_only[] = {
        "rank=0 size=1 local_rank=0 local_size=1 cross_rank=0 cross_size=1 host=a"};
    expect_plan("a:2,b:2", 1, first_only, 1);
}

static void test_slot_plan_errors(void **state) {
    (void)state;
    hvd_host_list_t l;
    hvd_slot_plan_t plan = {(hvd_slot_t *)&plan, 99};
    assert_int_equal(hvd__hosts_parse("h1:2,h2:2", &l), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&l, 5, &plan), HVD_ERR_INVALID_ARG);
    assert_string_equal(hvd_last_error(),
                        "requested 5 processes but the hosts provide only 4 slots (h1:2, h2:2)");
    assert_ptr_equal(plan.slots, (hvd_slot_t *)&plan); /* untouched on error */
    assert_int_equal(hvd__slot_plan_create(&l, 0, &plan), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "-np must be at least 1"));
    assert_int_equal(hvd__slot_plan_create(&l, -3, &plan), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__slot_plan_create(&l, 4, &plan), HVD_OK); /* exactly the slots */
    assert_int_equal(plan.count, 4);
    hvd__slot_plan_fini(&plan);
    hvd__hosts_fini(&l);

    assert_int_equal(hvd__hosts_parse("a:0,b:0", &l), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&l, 1, &plan), HVD_ERR_INVALID_ARG);
    assert_string_equal(hvd_last_error(),
                        "requested 1 processes but the hosts provide only 0 slots (a:0, b:0)");
    hvd__hosts_fini(&l);

    /* a huge host list is cut short in the message, not overflowed */
    char *big = malloc(200 * 70);
    size_t used = 0;
    for (int i = 0; i < 200; i++)
        used += (size_t)sprintf(big + used, "%sa-rather-long-host-name-for-the-message-%03d:1",
                                i ? "," : "", i);
    assert_int_equal(hvd__hosts_parse(big, &l), HVD_OK);
    free(big);
    assert_int_equal(hvd__slot_plan_create(&l, 1000, &plan), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "requested 1000 processes but the hosts provide "
                                             "only 200 slots (a-rather-long-host-name"));
    assert_non_null(strstr(hvd_last_error(), "...)"));
    hvd__hosts_fini(&l);
}

/* Properties every plan has, over many pseudo-random host lists. */
static void test_slot_plan_properties(void **state) {
    (void)state;
    unsigned seed = 12345;
    for (int iter = 0; iter < 500; iter++) {
        char text[512];
        size_t used = 0;
        int nhosts = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 8;
        int total = 0;
        for (int h = 0; h < nhosts; h++) {
            int slots = (int)((seed = seed * 1103515245u + 12345u) >> 16) % 5;
            total += slots;
            used += (size_t)snprintf(text + used, sizeof text - used, "%sh%d:%d", h ? "," : "", h,
                                     slots);
        }
        if (total == 0)
            continue;
        int np = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % total;
        hvd_host_list_t l;
        hvd_slot_plan_t plan;
        assert_int_equal(hvd__hosts_parse(text, &l), HVD_OK);
        assert_int_equal(hvd__slot_plan_create(&l, np, &plan), HVD_OK);
        assert_int_equal(plan.count, (size_t)np);
        for (int r = 0; r < np; r++) {
            const hvd_slot_t *s = &plan.slots[r];
            assert_int_equal(s->rank, r);
            assert_int_equal(s->size, np);
            assert_true(s->local_rank < s->local_size);
            assert_true(s->cross_rank < s->cross_size);
            int local = 0, cross = 0;
            for (int q = 0; q < np; q++) {
                local += strcmp(plan.slots[q].host, s->host) == 0;
                cross += plan.slots[q].local_rank == s->local_rank;
            }
            assert_int_equal(s->local_size, local);
            assert_int_equal(s->cross_size, cross);
            /* ranks of a host are consecutive, local ranks counting from 0 */
            if (r > 0 && strcmp(plan.slots[r - 1].host, s->host) == 0)
                assert_int_equal(s->local_rank, plan.slots[r - 1].local_rank + 1);
            else
                assert_int_equal(s->local_rank, 0);
        }
        hvd__slot_plan_fini(&plan);
        hvd__hosts_fini(&l);
    }
}

static void test_slot_format(void **state) {
    (void)state;
    hvd_slot_t s = {3, 8, 1, 4, 0, 2, "worker-1"};
    char line[128];
    int n = hvd__slot_format(&s, line, sizeof line);
    assert_string_equal(line, "rank=3 size=8 local_rank=1 local_size=4 cross_rank=0 "
                              "cross_size=2 host=worker-1");
    assert_int_equal(n, (int)strlen(line));
    char small[10];
    assert_int_equal(hvd__slot_format(&s, small, sizeof small), n); /* snprintf's contract */
    assert_string_equal(small, "rank=3 si");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_hosts),
        cmocka_unit_test(test_parse_hosts_errors),
        cmocka_unit_test(test_parse_hosts_names_and_duplicates),
        cmocka_unit_test(test_hostfile),
        cmocka_unit_test(test_hostfile_many_hosts),
        cmocka_unit_test(test_hostfile_size_bound),
        cmocka_unit_test(test_slot_plans),
        cmocka_unit_test(test_slot_plan_errors),
        cmocka_unit_test(test_slot_plan_properties),
        cmocka_unit_test(test_slot_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
