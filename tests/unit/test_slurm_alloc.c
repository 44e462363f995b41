/* horovodrun inside a Slurm allocation (runner/slurm_alloc.h): hosts and slots from the
 * allocation's variables, nothing outside one, and a clear error for each inconsistency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner/slurm_alloc.h"

#include <hvd/hvd.h>

#include <string.h>

static const char *lookup(const char *name, void *arg) {
    for (const char *const *e = arg; *e; e += 2)
        if (strcmp(*e, name) == 0)
            return e[1];
    return NULL;
}

static void expect(const char *const *kv, const char *names, const int *slots, size_t n) {
    hvd_host_list_t hosts;
    int found;
    assert_int_equal(hvd__slurm_alloc_hosts(lookup, (void *)kv, &hosts, &found), HVD_OK);
    assert_int_equal(found, 1);
    assert_int_equal(hosts.count, n);
    char buf[256] = "";
    for (size_t i = 0; i < n; i++) {
        strcat(buf, i ? " " : "");
        strcat(buf, hosts.hosts[i].name);
        assert_int_equal(hosts.hosts[i].slots, slots[i]);
    }
    assert_string_equal(buf, names);
    hvd__hosts_fini(&hosts);
}

static void test_tasks_and_cpus(void **state) {
    (void)state;
    /* salloc -N 3 --ntasks-per-node 2: the tasks per node win over the CPUs */
    expect((const char *const[]){"SLURM_JOB_ID", "7", "SLURM_JOB_NODELIST", "node[01-03]",
                                 "SLURM_TASKS_PER_NODE", "2(x3)", "SLURM_JOB_CPUS_PER_NODE",
                                 "8(x3)", NULL},
           "node01 node02 node03", (const int[]){2, 2, 2}, 3);
    /* salloc -N 2 (no task count): a slot per CPU */
    expect((const char *const[]){"SLURM_JOB_ID", "8", "SLURM_JOB_NODELIST", "a1,b[7,9]",
                                 "SLURM_JOB_CPUS_PER_NODE", "4,2(x2)", NULL},
           "a1 b7 b9", (const int[]){4, 2, 2}, 3);
    /* a node with no task for the job is left out */
    expect((const char *const[]){"SLURM_JOB_ID", "9", "SLURM_JOB_NODELIST", "n[1-3]",
                                 "SLURM_TASKS_PER_NODE", "1,0,3", NULL},
           "n1 n3", (const int[]){1, 3}, 2);
}

static void test_outside_and_bad(void **state) {
    (void)state;
    hvd_host_list_t hosts = {0};
    int found = 7;
    const char *none[] = {"SLURM_JOB_NODELIST", "n1", NULL}; /* no job id: not an allocation */
    assert_int_equal(hvd__slurm_alloc_hosts(lookup, none, &hosts, &found), HVD_OK);
    assert_int_equal(found, 0);
    assert_null(hosts.hosts);
    const char *no_counts[] = {"SLURM_JOB_ID", "3", "SLURM_JOB_NODELIST", "n1", NULL};
    assert_int_equal(hvd__slurm_alloc_hosts(lookup, no_counts, &hosts, &found),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "give the hosts with -H or --hostfile"));
    const char *mismatch[] = {
        "SLURM_JOB_ID", "3", "SLURM_JOB_NODELIST", "n[1-3]", "SLURM_TASKS_PER_NODE", "2(x2)", NULL};
    assert_int_equal(hvd__slurm_alloc_hosts(lookup, mismatch, &hosts, &found), HVD_ERR_INVALID_ARG);
    assert_non_null(
        strstr(hvd_last_error(), "gives 2 nodes but SLURM_JOB_NODELIST=n[1-3] names 3"));
    const char *bad_list[] = {
        "SLURM_JOB_ID", "3", "SLURM_JOB_NODELIST", "n[1-", "SLURM_TASKS_PER_NODE", "1", NULL};
    assert_int_equal(hvd__slurm_alloc_hosts(lookup, bad_list, &hosts, &found), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "SLURM_JOB_NODELIST"));
    const char *bad_counts[] = {
        "SLURM_JOB_ID", "3", "SLURM_JOB_NODELIST", "n1", "SLURM_JOB_CPUS_PER_NODE", "2(x", NULL};
    assert_int_equal(hvd__slurm_alloc_hosts(lookup, bad_counts, &hosts, &found),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "SLURM_JOB_CPUS_PER_NODE"));
    assert_int_equal(found, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_and_cpus),
        cmocka_unit_test(test_outside_and_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
