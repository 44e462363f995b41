/* Ranks started by an MPI launcher: rank, size and local place from Open MPI's, MPICH's or a
 * Slurm step's variables (which wins when several are set), HOROVOD_RANK winning over them, clear
 * errors for missing or bad values, and the cross ranks worked out from every rank's local rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/mpi_env.h"

#include <hvd/hvd.h>

#include <string.h>

typedef struct {
    const char *const *kv; /* name, value, name, value, ..., NULL */
} table_t;

static const char *lookup(const char *name, void *arg) {
    const table_t *t = arg;
    for (const char *const *e = t->kv; *e; e += 2)
        if (strcmp(*e, name) == 0)
            return e[1];
    return NULL;
}

static hvd_params_t load(void) {
    hvd_params_t p;
    assert_int_equal(hvd__params_load(&p, lookup, &(table_t){(const char *const[]){NULL}}), 0);
    return p;
}

static void test_open_mpi(void **state) {
    (void)state;
    const char *kv[] = {"OMPI_COMM_WORLD_RANK",
                        "5",
                        "OMPI_COMM_WORLD_SIZE",
                        "8",
                        "OMPI_COMM_WORLD_LOCAL_RANK",
                        "1",
                        "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "4",
                        NULL};
    hvd_params_t p = load();
    const char *who;
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){kv}, &who), HVD_OK);
    assert_string_equal(who, "Open MPI");
    assert_int_equal(p.rank, 5);
    assert_int_equal(p.size, 8);
    assert_int_equal(p.local_rank, 1);
    assert_int_equal(p.local_size, 4);
    assert_int_equal(p.cross_rank, 0);
    assert_int_equal(p.cross_size, 1);
    /* the host identity: this machine's name and its network namespace */
    assert_non_null(strchr(p.hostname, '-'));
    assert_string_not_equal(p.hostname, "localhost");
    hvd__params_fini(&p);
}

static void test_mpich_and_hostname(void **state) {
    (void)state;
    const char *kv[] = {"PMI_RANK",
                        "0",
                        "PMI_SIZE",
                        "2",
                        "MPI_LOCALRANKID",
                        "0",
                        "MPI_LOCALNRANKS",
                        "1",
                        "HOROVOD_HOSTNAME",
                        "given",
                        NULL};
    hvd_params_t p = load();
    const char *who;
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){kv}, &who), HVD_OK);
    assert_string_equal(who, "MPICH");
    assert_int_equal(p.size, 2);
    assert_int_equal(p.local_size, 1);
    /* HOROVOD_HOSTNAME is the user's: not replaced (params_load read the empty table) */
    assert_string_equal(p.hostname, "localhost");
    hvd__params_fini(&p);
}

static void test_horovod_rank_wins_and_none(void **state) {
    (void)state;
    const char *kv[] = {"HOROVOD_RANK", "1", "OMPI_COMM_WORLD_RANK", "5", NULL};
    hvd_params_t p = load();
    const char *who = "x";
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){kv}, &who), HVD_OK);
    assert_null(who);
    assert_int_equal(p.rank, 0); /* untouched */
    const char *none[] = {NULL};
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){none}, &who), HVD_OK);
    assert_null(who);
    hvd__params_fini(&p);
}

static void test_bad_values(void **state) {
    (void)state;
    const char *missing[] = {"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2", NULL};
    const char *bad[] = {"PMI_RANK",        "x1", "PMI_SIZE", "2", "MPI_LOCALRANKID", "0",
                         "MPI_LOCALNRANKS", "1",  NULL};
    const char *zero[] = {"PMI_RANK",        "0", "PMI_SIZE", "0", "MPI_LOCALRANKID", "0",
                          "MPI_LOCALNRANKS", "1", NULL};
    hvd_params_t p = load();
    const char *who;
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){missing}, &who),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "OMPI_COMM_WORLD_LOCAL_RANK is not set"));
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){bad}, &who), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "PMI_RANK=x1"));
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){zero}, &who), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "PMI_SIZE=0"));
    hvd__params_fini(&p);
}

/* srun's variables (as Slurm 22.05 sets them for `srun -N 3 --ntasks-per-node 2`... on node 2
 * of a step whose nodes run 2, 2 and 1 tasks); the node's name is the host identity. */
static void test_slurm(void **state) {
    (void)state;
    const char *kv[] = {"SLURM_STEP_ID", "0", "SLURM_PROCID", "4", "SLURM_STEP_NUM_TASKS", "5",
                        "SLURM_LOCALID", "0", "SLURM_NODEID", "2", "SLURM_STEP_TASKS_PER_NODE",
                        "2(x2),1", "SLURMD_NODENAME", "node07",
                        /* the allocation's count, not the step's: not used */
                        "SLURM_NTASKS", "6",
                        /* Slurm's PMI-2 plugin sets these: still a Slurm step */
                        "PMI_RANK", "4", "PMI_SIZE", "5", NULL};
    hvd_params_t p = load();
    const char *who;
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){kv}, &who), HVD_OK);
    assert_string_equal(who, "Slurm");
    assert_int_equal(p.rank, 4);
    assert_int_equal(p.size, 5);
    assert_int_equal(p.local_rank, 0);
    assert_int_equal(p.local_size, 1);
    assert_string_equal(p.hostname, "node07");
    hvd__params_fini(&p);
}

/* mpirun inside an allocation: its ranks carry a daemon step's Slurm variables too, and the
 * MPI launcher's win. */
static void test_mpi_inside_slurm(void **state) {
    (void)state;
    const char *ompi[] = {"SLURM_STEP_ID",
                          "1",
                          "SLURM_PROCID",
                          "0",
                          "SLURM_STEP_NUM_TASKS",
                          "2",
                          "SLURM_LOCALID",
                          "0",
                          "SLURM_NODEID",
                          "0",
                          "SLURM_STEP_TASKS_PER_NODE",
                          "1(x2)",
                          "OMPI_COMM_WORLD_RANK",
                          "3",
                          "OMPI_COMM_WORLD_SIZE",
                          "8",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "3",
                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "4",
                          NULL};
    hvd_params_t p = load();
    const char *who;
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){ompi}, &who), HVD_OK);
    assert_string_equal(who, "Open MPI");
    assert_int_equal(p.rank, 3);
    const char *hydra[] = {
        "SLURM_STEP_ID",   "1", "SLURM_PROCID",    "0", "PMI_RANK", "5", "PMI_SIZE", "6",
        "MPI_LOCALRANKID", "2", "MPI_LOCALNRANKS", "3", NULL};
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){hydra}, &who), HVD_OK);
    assert_string_equal(who, "MPICH");
    assert_int_equal(p.rank, 5);
    assert_int_equal(p.local_size, 3);
    hvd__params_fini(&p);
}

static void test_slurm_bad(void **state) {
    (void)state;
    const char *no_counts[] = {"SLURM_STEP_ID",
                               "0",
                               "SLURM_PROCID",
                               "0",
                               "SLURM_STEP_NUM_TASKS",
                               "2",
                               "SLURM_LOCALID",
                               "0",
                               "SLURM_NODEID",
                               "0",
                               NULL};
    const char *garbled[] = {"SLURM_STEP_ID",
                             "0",
                             "SLURM_PROCID",
                             "0",
                             "SLURM_STEP_NUM_TASKS",
                             "2",
                             "SLURM_LOCALID",
                             "0",
                             "SLURM_NODEID",
                             "0",
                             "SLURM_STEP_TASKS_PER_NODE",
                             "2(x",
                             NULL};
    const char *off_end[] = {"SLURM_STEP_ID",
                             "0",
                             "SLURM_PROCID",
                             "0",
                             "SLURM_STEP_NUM_TASKS",
                             "2",
                             "SLURM_LOCALID",
                             "0",
                             "SLURM_NODEID",
                             "3",
                             "SLURM_STEP_TASKS_PER_NODE",
                             "1(x2)",
                             NULL};
    const char *local[] = {"SLURM_STEP_ID",
                           "0",
                           "SLURM_PROCID",
                           "1",
                           "SLURM_STEP_NUM_TASKS",
                           "2",
                           "SLURM_LOCALID",
                           "1",
                           "SLURM_NODEID",
                           "0",
                           "SLURM_STEP_TASKS_PER_NODE",
                           "1(x2)",
                           NULL};
    hvd_params_t p = load();
    const char *who;
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){no_counts}, &who),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "SLURM_STEP_TASKS_PER_NODE is not set"));
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){garbled}, &who),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "'2(x' is malformed"));
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){off_end}, &who),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "no tasks for SLURM_NODEID=3"));
    assert_int_equal(hvd__mpi_env_apply(&p, lookup, &(table_t){local}, &who), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "SLURM_LOCALID=1 but this host runs 1"));
    hvd__params_fini(&p);
}

static void test_cross(void **state) {
    (void)state;
    /* hosts of 2, 3 and 1 ranks in rank order: local ranks 0 1 | 0 1 2 | 0 */
    int local[] = {0, 1, 0, 1, 2, 0};
    int cross[6], size;
    hvd__mpi_env_cross(local, 6, 3, cross, &size);
    int want[] = {0, 0, 1, 1, 0, 2};
    assert_memory_equal(cross, want, sizeof want);
    assert_int_equal(size, 2); /* local rank 1: on the first two hosts */
    hvd__mpi_env_cross(local, 6, 5, cross, &size);
    assert_int_equal(size, 3);
    hvd__mpi_env_cross(local, 6, 4, cross, &size);
    assert_int_equal(size, 1);
    int one[] = {0};
    hvd__mpi_env_cross(one, 1, 0, cross, &size);
    assert_int_equal(cross[0], 0);
    assert_int_equal(size, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_mpi),
        cmocka_unit_test(test_mpich_and_hostname),
        cmocka_unit_test(test_horovod_rank_wins_and_none),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_slurm),
        cmocka_unit_test(test_mpi_inside_slurm),
        cmocka_unit_test(test_slurm_bad),
        cmocka_unit_test(test_cross),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
