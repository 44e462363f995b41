/* horovodrun's command line: the CLI -> environment cases of Horovod's test_run.py
 * (reference 1.12), argparse behaviours, validation, and --config-file precedence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "runner/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hvd_params_t env;

static int setup(void **state) {
    (void)state;
    static const char *const none[] = {NULL};
    (void)none;
    return hvd__params_load(&env, NULL, NULL) == HVD_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    hvd__params_fini(&env);
    return 0;
}

/* Parse a space-separated command line ("horovodrun" is prepended). */
static hvd_status_t parse(const char *line, hvd_settings_t *s) {
    static char buf[4096];
    static char *argv[128];
    snprintf(buf, sizeof buf, "horovodrun %s", line);
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 127; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    return hvd__settings_parse(argc, argv, &env, s);
}

static void expect_env(const hvd_settings_t *s, const char *name, const char *value) {
    const char *got = hvd__env_list_get(&s->exports, name);
    if (!value) {
        if (got)
            fail_msg("%s should not be exported (is '%s')", name, got);
        return;
    }
    if (!got || strcmp(got, value) != 0)
        fail_msg("%s: expected '%s', got '%s'", name, value, got ? got : "(unset)");
}

static void test_reference_cases(void **state) {
    (void)state;
    hvd_settings_t s;
    assert_int_equal(parse("-np 2 --fusion-threshold-mb 10 --cycle-time-ms 20 --cache-capacity "
                           "512 --hierarchical-allreduce --hierarchical-allgather true",
                           &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "10485760");
    expect_env(&s, "HOROVOD_CYCLE_TIME", "20.0");
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "512");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLGATHER", "1");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --autotune --autotune-log-file /tmp/autotune.txt "
                           "--autotune-warmup-samples 1 --autotune-steps-per-sample 5 "
                           "--autotune-bayes-opt-max-samples 10 "
                           "--autotune-gaussian-process-noise 0.2 true",
                           &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_AUTOTUNE", "1");
    expect_env(&s, "HOROVOD_AUTOTUNE_LOG", "/tmp/autotune.txt");
    expect_env(&s, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "1");
    expect_env(&s, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "5");
    expect_env(&s, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "10");
    expect_env(&s, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.2");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --autotune --cache-capacity 1024 --no-hierarchical-allgather "
                           "true",
                           &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", NULL);
    expect_env(&s, "HOROVOD_CYCLE_TIME", NULL);
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "1024");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLREDUCE", NULL);
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLGATHER", "0");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --timeline-filename /tmp/timeline.json --timeline-mark-cycles "
                           "true",
                           &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_TIMELINE", "/tmp/timeline.json");
    expect_env(&s, "HOROVOD_TIMELINE_MARK_CYCLES", "1");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --no-stall-check true", &s), HVD_OK);
    expect_env(&s, "HOROVOD_STALL_CHECK_DISABLE", "1");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --stall-check-warning-time-seconds 10 "
                           "--stall-check-shutdown-time-seconds 20 true",
                           &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_STALL_CHECK_DISABLE", NULL);
    expect_env(&s, "HOROVOD_STALL_CHECK_TIME_SECONDS", "10");
    expect_env(&s, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "20");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --mpi-threads-disable --num-nccl-streams 2 --thread-affinity 1 "
                           "--gloo-timeout-seconds 60 true",
                           &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_MPI_THREADS_DISABLE", "1");
    expect_env(&s, "HOROVOD_NUM_NCCL_STREAMS", "2");
    expect_env(&s, "HOROVOD_THREAD_AFFINITY", "1");
    expect_env(&s, "HOROVOD_GLOO_TIMEOUT_SECONDS", "60");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --log-level INFO --log-hide-timestamp true", &s), HVD_OK);
    expect_env(&s, "HOROVOD_LOG_LEVEL", "INFO");
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "1");
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 4 --min-np 2 --max-np 8 true", &s), HVD_OK);
    assert_int_equal(s.num_proc, 4);
    assert_int_equal(s.min_np, 2);
    assert_int_equal(s.max_np, 8);
    assert_true(s.elastic);
    hvd__settings_fini(&s);

    assert_int_equal(parse("--num-proc 4 --min-num-proc 2 --max-num-proc 8 --slots-per-host 1 "
                           "--elastic-timeout 60 --reset-limit 10 --blacklist-cooldown-range "
                           "120 600 true",
                           &s),
                     HVD_OK);
    assert_int_equal(s.slots_per_host, 1);
    assert_int_equal(s.elastic_timeout, 60);
    assert_int_equal(s.reset_limit, 10);
    assert_int_equal(s.cooldown_min, 120);
    assert_int_equal(s.cooldown_max, 600);
    hvd__settings_fini(&s);

    assert_int_equal(parse("-np 2 --fusion-threshold-mb -1 true", &s), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "--fusion-threshold-mb"));
}

static void test_argparse_behaviour(void **state) {
    (void)state;
    hvd_settings_t s;
    /* prefixes, --opt=value, remainder */
    assert_int_equal(
        parse("-np=3 --slots=2 --fusion-thr=4 --verb python train.py --verbose -np 9", &s), HVD_OK);
    assert_int_equal(s.num_proc, 3);
    assert_int_equal(s.slots_per_host, 2);
    assert_true(s.verbose);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "4194304");
    assert_string_equal(s.command[0], "python");
    assert_string_equal(s.command[2], "--verbose");
    assert_string_equal(s.command[3], "-np");
    assert_null(s.command[5]);
    hvd__settings_fini(&s);
    /* -- ends options */
    assert_int_equal(parse("-np 1 -- --weird-program", &s), HVD_OK);
    assert_string_equal(s.command[0], "--weird-program");
    hvd__settings_fini(&s);
    /* repeatable and comma NIC forms, deduplicated */
    assert_int_equal(
        parse("-np 1 --network-interface eth0 --network-interfaces eth1,eth0 true", &s), HVD_OK);
    assert_int_equal(s.nic_count, 2);
    assert_string_equal(s.nics[1], "eth1");
    hvd__settings_fini(&s);
    /* ambiguous and unknown options */
    assert_int_equal(parse("-np 1 --auto true", &s), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "ambiguous option --auto"));
    assert_int_equal(parse("-np 1 --frobnicate true", &s), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "--frobnicate"));
    /* print-and-exit modes need neither -np nor a command */
    assert_int_equal(parse("--version", &s), HVD_OK);
    assert_true(s.show_version);
    hvd__settings_fini(&s);
    assert_int_equal(parse("-cb", &s), HVD_OK);
    assert_true(s.show_check_build);
    hvd__settings_fini(&s);
    /* timestamps: prefixing and log timestamps combine (the reference refused) */
    assert_int_equal(parse("-np 1 --prefix-output-with-timestamp --log-without-timestamp true", &s),
                     HVD_OK);
    assert_true(s.prefix_timestamp);
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "1");
    hvd__settings_fini(&s);
}

static void test_validation(void **state) {
    (void)state;
    hvd_settings_t s;
    struct {
        const char *line, *needle;
    } bad[] = {
        {"true", "-np"},
        {"-np 2", "no command"},
        {"-np 0 true", "-np"},
        {"-np x true", "invalid int value: 'x'"},
        {"-np 1 --cycle-time-ms -1 true", "--cycle-time-ms"},
        {"-np 1 --autotune-gaussian-process-noise 1.5 true", "[0, 1]"},
        {"-np 1 --blacklist-cooldown-range 0 10 true", "cooldown"},
        {"-np 1 --blacklist-cooldown-range 10 5000 true", "cooldown"},
        {"-np 1 --min-np 4 --max-np 2 true", "--max-np"},
        {"-np 1 -H a:1 --hostfile f true", "mutually exclusive"},
        {"-np 1 --hierarchical-allreduce --no-hierarchical-allreduce true", "not allowed with"},
        {"-np 1 --gloo --mpi true", "not allowed with"},
        {"-np 1 --thread-affinity 1,,2 true", "core ids"},
        {"-np 1 --log-level LOUD true", "LOUD"},
        {"-np 1 --ssh-port 70000 true", "port"},
        {"-np 1 --verbose=yes true", "takes no value"},
        {"-np", "expected a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse(bad[i].line, &s) != HVD_ERR_INVALID_ARG)
            fail_msg("'%s' was accepted", bad[i].line);
        if (!strstr(hvd_last_error(), bad[i].needle))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].line, hvd_last_error(), bad[i].needle);
    }
}

static void test_float_format(void **state) {
    (void)state;
    char buf[64];
    struct {
        double v;
        const char *text;
    } cases[] = {{20, "20.0"},
                 {2.5, "2.5"},
                 {0.1, "0.1"},
                 {0, "0.0"},
                 {1e-5, "1e-05"},
                 {0.8, "0.8"},
                 {1234567.0, "1234567.0"},
                 {1e20, "1e+20"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hvd__settings_format_float(cases[i].v, buf, sizeof buf);
        assert_string_equal(buf, cases[i].text);
    }
}

static char *write_file(const char *text) {
    static char path[64];
    strcpy(path, "/tmp/hvd-config-XXXXXX");
    int fd = mkstemp(path);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* The equivalent of Horovod's test/single/data/config.test.yaml and its expected parse. */
static void test_config_file(void **state) {
    (void)state;
    char *path = write_file("controller: gloo\n"
                            "params:\n"
                            "  fusion_threshold_mb: 32\n"
                            "  cycle_time_ms: 10\n"
                            "  cache_capacity: 2048\n"
                            "  hierarchical_allreduce: true\n"
                            "  hierarchical_allgather: true\n"
                            "autotune:\n"
                            "  enabled: true\n"
                            "  log_file: horovod_autotune_log.txt\n"
                            "  warmup_samples: 5\n"
                            "  steps_per_sample: 20\n"
                            "  bayes_opt_max_samples: 50\n"
                            "  gaussian_process_noise: 0.9\n"
                            "timeline:\n"
                            "  filename: horovod_timeline.json\n"
                            "  mark_cycles: true\n"
                            "stall_check:\n"
                            "  enabled: true\n"
                            "  warning_time_seconds: 120\n"
                            "  shutdown_time_seconds: 240\n"
                            "library_options:\n"
                            "  mpi_threads_disable: true\n"
                            "  num_nccl_streams: 2\n"
                            "  thread_affinity: 1\n"
                            "  gloo_timeout_seconds: 60\n"
                            "logging:\n"
                            "  level: INFO\n"
                            "  with_timestamp: false\n"
                            "  hide_timestamp: true\n");
    char line[256];
    hvd_settings_t s;
    snprintf(line, sizeof line, "-np 2 --config-file %s true", path);
    assert_int_equal(parse(line, &s), HVD_OK);
    assert_int_equal(s.controller, HVD_CONTROLLER_GLOO);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "33554432");
    expect_env(&s, "HOROVOD_CYCLE_TIME", "10.0");
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "2048");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLGATHER", "1");
    expect_env(&s, "HOROVOD_AUTOTUNE", "1");
    expect_env(&s, "HOROVOD_AUTOTUNE_LOG", "horovod_autotune_log.txt");
    expect_env(&s, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5");
    expect_env(&s, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "20");
    expect_env(&s, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "50");
    expect_env(&s, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.9");
    expect_env(&s, "HOROVOD_TIMELINE", "horovod_timeline.json");
    expect_env(&s, "HOROVOD_TIMELINE_MARK_CYCLES", "1");
    expect_env(&s, "HOROVOD_STALL_CHECK_DISABLE", "0");
    expect_env(&s, "HOROVOD_STALL_CHECK_TIME_SECONDS", "120");
    expect_env(&s, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "240");
    expect_env(&s, "HOROVOD_MPI_THREADS_DISABLE", "1");
    expect_env(&s, "HOROVOD_NUM_NCCL_STREAMS", "2");
    expect_env(&s, "HOROVOD_THREAD_AFFINITY", "1");
    expect_env(&s, "HOROVOD_GLOO_TIMEOUT_SECONDS", "60");
    expect_env(&s, "HOROVOD_LOG_LEVEL", "INFO");
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "1");
    hvd__settings_fini(&s);
    /* a flag anywhere on the command line wins over the file */
    snprintf(line, sizeof line,
             "-np 2 --fusion-threshold-mb 256 --config-file %s "
             "--no-hierarchical-allreduce true",
             path);
    assert_int_equal(parse(line, &s), HVD_OK);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "268435456");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLREDUCE", "0");
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "2048");
    hvd__settings_fini(&s);
    unlink(path);

    struct {
        const char *yaml, *needle;
    } bad[] = {
        {"params:\n  fusion_threshold_mb: lots\n", "fusion_threshold_mb: invalid int"},
        {"params:\n  cache_capacity: -5\n", "params.cache_capacity"},
        {"controller: carrier-pigeon\n", "not a controller"},
        {"params: [1, 2]\n", "must be a value or a section"},
        {"params:\n  fusion_threshold_mb: [1]\n", "must be a single value"},
        {"params:\n  hierarchical_allreduce: maybe\n", "not true or false"},
        {"params: {\n", "YAML error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_file(bad[i].yaml);
        snprintf(line, sizeof line, "-np 2 --config-file %s true", path);
        assert_int_equal(parse(line, &s), HVD_ERR_INVALID_ARG);
        if (!strstr(hvd_last_error(), bad[i].needle) || !strstr(hvd_last_error(), path))
            fail_msg("yaml %zu: error '%s' lacks '%s' or the file name", i, hvd_last_error(),
                     bad[i].needle);
        unlink(path);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_cases), cmocka_unit_test(test_argparse_behaviour),
        cmocka_unit_test(test_validation),      cmocka_unit_test(test_float_format),
        cmocka_unit_test(test_config_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
