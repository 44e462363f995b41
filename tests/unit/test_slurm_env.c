/* Slurm's compact forms (slurm/slurm_env.h): per-node counts ("2(x3),1") and host lists
 * ("node[01-03,07]"), as Slurm writes them, and every malformed or oversized one refused with
 * the text quoted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "slurm/slurm_env.h"

#include <hvd/hvd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_counts(const char *text, const int *want, size_t n) {
    int *got;
    size_t m;
    assert_int_equal(hvd__slurm_counts_expand(text, &got, &m), HVD_OK);
    assert_int_equal(m, n);
    assert_memory_equal(got, want, n * sizeof *want);
    free(got);
}

static void test_counts(void **state) {
    (void)state;
    expect_counts("2(x3),1", (const int[]){2, 2, 2, 1}, 4);
    expect_counts("4", (const int[]){4}, 1);
    expect_counts("1,2,3", (const int[]){1, 2, 3}, 3);
    expect_counts("8(x1)", (const int[]){8}, 1);
    expect_counts("0(x2),16", (const int[]){0, 0, 16}, 3);
    const char *bad[] = {"",     ",", "2,",   ",2", "2(x)",       "2(3)",      "2(x0)",
                         "2(x3", "x", "2 ,1", "-1", "1234567890", "2(x1)(x2)", "2,,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int *got = (int *)1;
        size_t m = 7;
        assert_int_equal(hvd__slurm_counts_expand(bad[i], &got, &m), HVD_ERR_INVALID_ARG);
        assert_null(got);
        assert_int_equal(m, 0);
        assert_non_null(strstr(hvd_last_error(), "malformed"));
    }
    /* a million nodes is Slurm's business; more is refused before anything is allocated */
    int *got;
    size_t m;
    assert_int_equal(hvd__slurm_counts_expand("1(x1048576)", &got, &m), HVD_OK);
    assert_int_equal(m, HVD_SLURM_MAX_NODES);
    free(got);
    assert_int_equal(hvd__slurm_counts_expand("1(x1048576),1", &got, &m), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__slurm_counts_expand("1(x999999999)", &got, &m), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "longer than"));
}

static void expect_hosts(const char *text, const char *joined) {
    char **names;
    size_t n;
    assert_int_equal(hvd__slurm_hostlist_expand(text, &names, &n), HVD_OK);
    char buf[1024] = "";
    for (size_t i = 0; i < n; i++) {
        strcat(buf, i ? " " : "");
        strcat(buf, names[i]);
    }
    assert_string_equal(buf, joined);
    hvd__slurm_names_free(names, n);
}

static void test_hostlists(void **state) {
    (void)state;
    expect_hosts("h1", "h1");
    expect_hosts("h[1-3]", "h1 h2 h3");
    expect_hosts("node[01-03,07],gpu1", "node01 node02 node03 node07 gpu1");
    expect_hosts("n[098-101]", "n098 n099 n100 n101");
    expect_hosts("n[8-11]", "n8 n9 n10 n11");
    expect_hosts("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    expect_hosts("a[1]b,c", "a1b c");
    expect_hosts("x[0],y[00-01]", "x0 y00 y01");
    const char *bad[] = {"",       ",",     "a,",    ",a",      "a,,b",  "a[",     "a]",
                         "a[]",    "a[1-]", "a[-1]", "a[3-1]",  "a[1,]", "a[,1]",  "a[1-2",
                         "a[[1]]", "a[1]]", "a[x]",  "a[1-2x]", "a b",   "a[1]\t", "[1-2]]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char **names = (char **)1;
        size_t n = 7;
        if (hvd__slurm_hostlist_expand(bad[i], &names, &n) != HVD_ERR_INVALID_ARG)
            fail_msg("'%s' was accepted", bad[i]);
        assert_null(names);
        assert_int_equal(n, 0);
    }
    /* a bracket group alone names hosts "1", "2" (Slurm allows it) */
    expect_hosts("[1-2]", "1 2");
}

static void test_hostlist_bounds(void **state) {
    (void)state;
    char **names;
    size_t n;
    /* one group at Slurm's limit, and beyond it, and beyond it by multiplying groups */
    assert_int_equal(hvd__slurm_hostlist_expand("n[1-1048576]", &names, &n), HVD_OK);
    assert_int_equal(n, HVD_SLURM_MAX_NODES);
    assert_string_equal(names[n - 1], "n1048576");
    hvd__slurm_names_free(names, n);
    assert_int_equal(hvd__slurm_hostlist_expand("n[0-1048576]", &names, &n), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "more than"));
    assert_int_equal(hvd__slurm_hostlist_expand("a[1-2000]b[1-2000]", &names, &n),
                     HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__slurm_hostlist_expand("a[1-999999999]", &names, &n), HVD_ERR_INVALID_ARG);
    /* names up to HVD_SLURM_NAME_MAX bytes, not one more */
    char longname[HVD_SLURM_NAME_MAX + 8];
    memset(longname, 'n', HVD_SLURM_NAME_MAX - 1);
    snprintf(longname + HVD_SLURM_NAME_MAX - 1, 8, "[1-9]");
    assert_int_equal(hvd__slurm_hostlist_expand(longname, &names, &n), HVD_OK);
    assert_int_equal(strlen(names[0]), HVD_SLURM_NAME_MAX);
    hvd__slurm_names_free(names, n);
    snprintf(longname + HVD_SLURM_NAME_MAX - 1, 8, "[10]");
    assert_int_equal(hvd__slurm_hostlist_expand(longname, &names, &n), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "longer than"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_hostlists),
        cmocka_unit_test(test_hostlist_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
