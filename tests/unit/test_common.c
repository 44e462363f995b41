/* Status strings, thread-local errors, logging format and the HOROVOD_* parameter table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/params.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_status_names(void **state) {
    (void)state;
    assert_string_equal(hvd_status_str(HVD_OK), "HVD_OK");
    assert_string_equal(hvd_status_str(HVD_ERR_TIMEOUT), "HVD_ERR_TIMEOUT");
    assert_string_equal(hvd_status_str(HVD_ERR_PEER_LOST), "HVD_ERR_PEER_LOST");
    assert_string_equal(hvd_status_str(HVD_ERR_MISMATCH), "HVD_ERR_MISMATCH");
    assert_string_equal(hvd_status_str(HVD_ERR_HOSTS_UPDATED), "HVD_ERR_HOSTS_UPDATED");
    assert_string_equal(hvd_status_str(HVD_ERR_SHUT_DOWN), "HVD_ERR_SHUT_DOWN");
    assert_string_equal(hvd_status_str(HVD_ERR_INVALID_ARG), "HVD_ERR_INVALID_ARG");
    assert_string_equal(hvd_status_str(12345), "HVD_ERR_UNKNOWN");
    /* every error is negative and named */
    for (int s = -1; s >= HVD_ERR_STATE; s--)
        assert_string_not_equal(hvd_status_str(s), "HVD_ERR_UNKNOWN");
    assert_string_equal(hvd_version(), "0.1.0");
}

static void *other_thread(void *arg) {
    (void)arg;
    /* A fresh thread starts with no error and its errors stay its own. */
    int clean = hvd_last_error()[0] == '\0';
    hvd__error_set(HVD_ERR_IO, "thread error");
    return (void *)(intptr_t)clean;
}

static void test_error_thread_local(void **state) {
    (void)state;
    hvd_status_t st = hvd__error_set(HVD_ERR_TIMEOUT, "waited %d s for rank %d", 30, 3);
    assert_int_equal(st, HVD_ERR_TIMEOUT);
    assert_string_equal(hvd_last_error(), "waited 30 s for rank 3");
    pthread_t t;
    void *clean;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, &clean);
    assert_true((intptr_t)clean);
    assert_string_equal(hvd_last_error(), "waited 30 s for rank 3");
    hvd__error_wrap(HVD_ERR_TIMEOUT, "init of rank %d", 1);
    assert_string_equal(hvd_last_error(), "init of rank 1: waited 30 s for rank 3");
    hvd__error_clear();
    assert_string_equal(hvd_last_error(), "");
}

static void test_api_before_init(void **state) {
    (void)state;
    assert_int_equal(hvd_is_initialized(), 0);
    assert_int_equal(hvd_rank(), -1);
    assert_int_equal(hvd_size(), -1);
    assert_int_equal(hvd_shutdown(), HVD_ERR_SHUT_DOWN);
    assert_non_null(strstr(hvd_last_error(), "not initialised"));
}

/* Capture log output through a pipe. */
static char *capture_log(hvd_log_level_t threshold, int hide_time, int rank, hvd_log_level_t level,
                         const char *msg) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    hvd__log_set_fds(fds[1], fds[1]);
    hvd__log_configure(threshold, hide_time, rank);
    HVD_LOG(level, "%s", msg);
    close(fds[1]);
    static char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    buf[n > 0 ? n : 0] = '\0';
    hvd__log_set_fds(1, 2);
    hvd__log_configure(HVD_LOG_WARNING, 0, -1);
    return buf;
}

static void test_log_format(void **state) {
    (void)state;
    char *line = capture_log(HVD_LOG_TRACE, 1, -1, HVD_LOG_WARNING, "hello");
    /* [W test_common.c:LINE] hello */
    assert_true(strncmp(line, "[W test_common.c:", 17) == 0);
    assert_non_null(strstr(line, "] hello\n"));
    line = capture_log(HVD_LOG_TRACE, 1, 3, HVD_LOG_ERROR, "boom");
    assert_true(strncmp(line, "[E test_common.c:", 17) == 0);
    assert_non_null(strstr(line, "] [3]: boom\n"));
    line = capture_log(HVD_LOG_TRACE, 0, -1, HVD_LOG_INFO, "timed");
    /* [YYYY-MM-DD HH:MM:SS.uuuuuu: I file:line] */
    assert_int_equal(line[0], '[');
    assert_int_equal(line[5], '-');
    assert_int_equal(line[11], ' ');
    assert_int_equal(line[20], '.');
    assert_int_equal(line[27], ':');
    assert_true(strncmp(line + 28, " I test_common.c:", 17) == 0);
    /* below threshold: nothing */
    line = capture_log(HVD_LOG_WARNING, 1, -1, HVD_LOG_DEBUG, "quiet");
    assert_string_equal(line, "");
    hvd_log_level_t lv;
    assert_int_equal(hvd__log_level_parse("TRACE", &lv), 0);
    assert_int_equal(lv, HVD_LOG_TRACE);
    assert_int_equal(hvd__log_level_parse("Warning", &lv), 0);
    assert_int_equal(lv, HVD_LOG_WARNING);
    assert_int_equal(hvd__log_level_parse("loud", &lv), -1);
}

/* A fake environment for the parameter table. */
static const char *const *fake_env;
static const char *fake_lookup(const char *name, void *arg) {
    (void)arg;
    size_t n = strlen(name);
    for (const char *const *e = fake_env; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static void test_params_defaults(void **state) {
    (void)state;
    static const char *const env[] = {NULL};
    fake_env = env;
    hvd_params_t p;
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_OK);
    assert_int_equal(p.rank, 0);
    assert_int_equal(p.size, 1);
    assert_string_equal(p.hostname, "localhost");
    assert_null(p.rendezvous_addr);
    assert_int_equal(p.rendezvous_port, -1);
    assert_int_equal(p.gloo_timeout_seconds, 30);
    assert_int_equal(p.fusion_threshold, 134217728LL);
    assert_true(p.cycle_time_ms == 1.0);
    assert_int_equal(p.cache_capacity, 1024);
    assert_int_equal(p.stall_check_time_seconds, 60);
    assert_int_equal(p.log_level, HVD_LOG_WARNING);
    assert_int_equal(p.start_timeout, 30);
    assert_int_equal(p.elastic_timeout, 600);
    hvd__params_fini(&p);
}

static void test_params_values(void **state) {
    (void)state;
    static const char *const env[] = {"HOROVOD_RANK=3",
                                      "HOROVOD_SIZE=8",
                                      "HOROVOD_HOSTNAME=node-1",
                                      "HOROVOD_CYCLE_TIME=20.0",
                                      "HOROVOD_FUSION_THRESHOLD=10485760",
                                      "HOROVOD_LOG_LEVEL=DEBUG",
                                      "HOROVOD_LOG_HIDE_TIME=1",
                                      "HOROVOD_ELASTIC=true",
                                      "HOROVOD_STALL_CHECK_DISABLE=0",
                                      "HOROVOD_TIMELINE=/tmp/t.json",
                                      NULL};
    fake_env = env;
    hvd_params_t p;
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_OK);
    assert_int_equal(p.rank, 3);
    assert_int_equal(p.size, 8);
    assert_string_equal(p.hostname, "node-1");
    assert_true(p.cycle_time_ms == 20.0);
    assert_int_equal(p.fusion_threshold, 10485760LL);
    assert_int_equal(p.log_level, HVD_LOG_DEBUG);
    assert_int_equal(p.log_hide_time, 1);
    assert_int_equal(p.elastic, 1);
    assert_int_equal(p.stall_check_disable, 0);
    assert_string_equal(p.timeline, "/tmp/t.json");
    hvd__params_fini(&p);
    assert_null(p.timeline);
}

/* The hierarchical switches: auto (-1) unless set, and then what they say. */
static void test_params_auto_switches(void **state) {
    (void)state;
    static const char *const none[] = {NULL};
    fake_env = none;
    hvd_params_t p;
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_OK);
    assert_int_equal(p.hierarchical_allreduce, -1);
    assert_int_equal(p.hierarchical_allgather, -1);
    hvd__params_fini(&p);
    static const char *const set[] = {"HOROVOD_HIERARCHICAL_ALLREDUCE=0",
                                      "HOROVOD_HIERARCHICAL_ALLGATHER=true", NULL};
    fake_env = set;
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_OK);
    assert_int_equal(p.hierarchical_allreduce, 0);
    assert_int_equal(p.hierarchical_allgather, 1);
    hvd__params_fini(&p);
    static const char *const autos[] = {"HOROVOD_HIERARCHICAL_ALLREDUCE=AUTO",
                                        "HOROVOD_HIERARCHICAL_ALLGATHER=1", NULL};
    fake_env = autos;
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_OK);
    assert_int_equal(p.hierarchical_allreduce, -1);
    assert_int_equal(p.hierarchical_allgather, 1);
    hvd__params_fini(&p);
}

static void expect_bad(const char *assignment, const char *needle) {
    const char *env[] = {assignment, NULL};
    fake_env = env;
    hvd_params_t p;
    memset(&p, 0x5a, sizeof p);
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_ERR_INVALID_ARG);
    if (!strstr(hvd_last_error(), needle))
        fail_msg("error '%s' lacks '%s'", hvd_last_error(), needle);
    assert_null(p.hostname); /* zeroed on error */
}

static void test_params_errors(void **state) {
    (void)state;
    expect_bad("HOROVOD_SIZE=abc", "HOROVOD_SIZE='abc' is not an integer");
    expect_bad("HOROVOD_SIZE=0", "HOROVOD_SIZE=0 is out of range");
    expect_bad("HOROVOD_RANK=-1", "HOROVOD_RANK=-1 is out of range");
    expect_bad("HOROVOD_RANK=99999999999", "HOROVOD_RANK");
    expect_bad("HOROVOD_CYCLE_TIME=fast", "HOROVOD_CYCLE_TIME='fast' is not a number");
    expect_bad("HOROVOD_ELASTIC=maybe", "HOROVOD_ELASTIC='maybe' is not a boolean");
    /* only the switches hvd may decide take "auto" */
    expect_bad("HOROVOD_ELASTIC=auto", "HOROVOD_ELASTIC='auto' is not a boolean (use 0/1 or");
    expect_bad("HOROVOD_HIERARCHICAL_ALLREDUCE=maybe",
               "HOROVOD_HIERARCHICAL_ALLREDUCE='maybe' is not a boolean (use 0/1, true/false or "
               "auto)");
    expect_bad("HOROVOD_GLOO_RENDEZVOUS_PORT=70000", "HOROVOD_GLOO_RENDEZVOUS_PORT");
    expect_bad("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=1.5", "out of range");
    /* an unknown log level means warning, as in Horovod */
    static const char *const env[] = {"HOROVOD_LOG_LEVEL=shouty", NULL};
    fake_env = env;
    hvd_params_t p;
    assert_int_equal(hvd__params_load(&p, fake_lookup, NULL), HVD_OK);
    assert_int_equal(p.log_level, HVD_LOG_WARNING);
    hvd__params_fini(&p);
}

static void test_params_table_unique(void **state) {
    (void)state;
    size_t n;
    const hvd_param_def_t *t = hvd__params_table(&n);
    assert_true(n > 30);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(t[i].help);
        for (size_t j = i + 1; j < n; j++)
            assert_string_not_equal(t[i].name, t[j].name);
    }
}

static void test_clock(void **state) {
    (void)state;
    int64_t t0 = hvd__clock_now_ms();
    hvd__clock_sleep_ms(20);
    assert_true(hvd__clock_now_ms() - t0 >= 20);
    assert_int_equal(hvd__clock_remaining_ms(t0 - 5), 0);
    assert_int_equal(hvd__clock_deadline_ms(-1), INT64_MAX);
    assert_true(hvd__clock_remaining_ms(hvd__clock_deadline_ms(10000)) > 9000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),        cmocka_unit_test(test_error_thread_local),
        cmocka_unit_test(test_api_before_init),     cmocka_unit_test(test_log_format),
        cmocka_unit_test(test_params_defaults),     cmocka_unit_test(test_params_values),
        cmocka_unit_test(test_params_errors),       cmocka_unit_test(test_params_auto_switches),
        cmocka_unit_test(test_params_table_unique), cmocka_unit_test(test_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
