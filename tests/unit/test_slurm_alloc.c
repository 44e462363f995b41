/* horovodrun inside a Slurm allocation (runner/slurm/slurm_alloc.h): hosts and slots from the
 * allocation's variables, nothing outside one, and a clear error for each inconsistency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runner/slurm/slurm_alloc.h"

#include <hvd/hvd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A fake squeue first in PATH, printing text and exiting with code. */
static void fake_squeue(const char *dir, const char *text, int code) {
    char path[256];
    snprintf(path, sizeof path, "%s/squeue", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(
        f,
        "#!/bin/sh\n[ \"$*\" = '--me --noheader --states=RUNNING --sort=i --format=%%i %%N %%j' ]"
        " || { echo \"unexpected: $*\" >&2; exit 3; }\nprintf '%%s' '%s'\nexit %d\n",
        text, code);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

static void test_job_of_host(void **state) {
    (void)state;
    char job[64] = "x", dir[] = "/tmp/hvd-test-squeue-XXXXXX", path[4096];
    assert_non_null(mkdtemp(dir));
    const char *old_path = getenv("PATH");
    snprintf(path, sizeof path, "%s:%s", dir, old_path ? old_path : "/usr/bin:/bin");
    assert_int_equal(setenv("PATH", path, 1), 0);
    /* outside an allocation, and on a node of the allocation horovodrun runs in: no --jobid
     * (and no squeue: the fake one would fail) */
    fake_squeue(dir, "", 1);
    const char *none[] = {NULL};
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)none, "h3", job, sizeof job), HVD_OK);
    assert_string_equal(job, "");
    const char *own[] = {"SLURM_JOB_ID", "7", "SLURM_JOB_NODELIST", "h[1-3]", NULL};
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)own, "h3", job, sizeof job), HVD_OK);
    assert_string_equal(job, "");
    /* a node of another job: the one named as this job first, else the first squeue lists */
    fake_squeue(dir, "5 h[3-4] other\n9 h3 train\n12 h[5-6] train\n", 0);
    const char *named[] = {"SLURM_JOB_ID", "7", "SLURM_JOB_NODELIST", "h[1-2]", "SLURM_JOB_NAME",
                           "train",        NULL};
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)named, "h3", job, sizeof job), HVD_OK);
    assert_string_equal(job, "9");
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)named, "h4", job, sizeof job), HVD_OK);
    assert_string_equal(job, "5");
    const char *unnamed[] = {"SLURM_JOB_ID", "7", "SLURM_JOB_NODELIST", "h[1-2]", NULL};
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)unnamed, "h3", job, sizeof job),
                     HVD_OK);
    assert_string_equal(job, "5");
    /* a node of no job of this user, and squeue failing: errors naming the host and why */
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)named, "h9", job, sizeof job),
                     HVD_ERR_NOT_FOUND);
    assert_non_null(strstr(hvd_last_error(), "host h9 is in no running Slurm job of yours"));
    fake_squeue(dir, "slurm_load_jobs error: Unable to contact slurm controller\n", 1);
    assert_int_equal(hvd__slurm_job_of_host(lookup, (void *)named, "h3", job, sizeof job),
                     HVD_ERR_IO);
    assert_non_null(strstr(hvd_last_error(), "which job holds host h3, failed: slurm_load_jobs "
                                             "error: Unable to contact slurm controller"));
    char file[256];
    snprintf(file, sizeof file, "%s/squeue", dir);
    unlink(file);
    rmdir(dir);
    assert_int_equal(setenv("PATH", old_path ? old_path : "/usr/bin:/bin", 1), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_and_cpus),
        cmocka_unit_test(test_outside_and_bad),
        cmocka_unit_test(test_job_of_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
