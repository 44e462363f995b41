/* --config-file: the YAML walker (entries, key paths, lines, nulls, errors) and the merge into
 * the settings (the reference's config.test.yaml, precedence of flags, validation after the
 * merge, warnings for unknown keys). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "log_capture.h"

#include <hvd/hvd.h>

#include "common/error.h"
#include "common/log.h"
#include "runner/cli/config_file.h"
#include "runner/cli/settings.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hvd_params_t env;

static const char *no_env(const char *name, void *arg) {
    (void)name;
    (void)arg;
    return NULL;
}

static int setup(void **state) {
    (void)state;
    return hvd__params_load(&env, no_env, NULL) == HVD_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    hvd__params_fini(&env);
    return 0;
}

static char path[64];

static const char *write_file(const char *text) {
    strcpy(path, "/tmp/hvd-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* ---- the walker ---- */

typedef struct {
    char lines[32][160];
    int n;
} record_t;

static hvd_status_t record(const hvd_config_entry_t *e, void *arg) {
    record_t *r = arg;
    static const char *const kinds[] = {"scalar", "null", "mapping", "sequence"};
    assert_string_equal(e->file, path);
    if (r->n < 32)
        snprintf(r->lines[r->n++], sizeof r->lines[0], "%d %s %s '%s'", e->line, e->path,
                 kinds[e->kind], e->value);
    return HVD_OK;
}

static void test_walk(void **state) {
    (void)state;
    record_t r = {0};
    write_file("# comment\n"
               "controller: gloo\n"
               "params:\n"
               "  fusion_threshold_mb: 32\n"
               "  cycle_time_ms: \"10\"\n"
               "  empty:\n"
               "  tilde: ~\n"
               "  quoted_null: 'null'\n"
               "  list: [1, 2]\n"
               "  nested: {a: 1}\n"
               "top_list:\n"
               "  - 1\n"
               "flow: {x: y}\n"
               "novalue:\n");
    assert_int_equal(hvd__config_file_read(path, record, &r), HVD_OK);
    unlink(path);
    const char *want[] = {"2 controller scalar 'gloo'",
                          "4 params.fusion_threshold_mb scalar '32'",
                          "5 params.cycle_time_ms scalar '10'",
                          "7 params.empty null ''",
                          "7 params.tilde null ''",
                          "8 params.quoted_null scalar 'null'",
                          "9 params.list sequence ''",
                          "10 params.nested mapping ''",
                          "12 top_list sequence ''",
                          "13 flow.x scalar 'y'",
                          "15 novalue null ''"};
    /* libyaml puts an empty value's mark at the next token, so only its line is loose */
    assert_int_equal(r.n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < r.n; i++) {
        const char *got = strchr(r.lines[i], ' ') + 1, *exp = strchr(want[i], ' ') + 1;
        if (strcmp(got, exp) != 0)
            fail_msg("entry %d: got '%s', want '%s'", i, r.lines[i], want[i]);
    }
    assert_string_equal(r.lines[0], want[0]);
    assert_string_equal(r.lines[1], want[1]);
    assert_string_equal(r.lines[5], want[5]);
    assert_string_equal(r.lines[8], want[8]);

    /* an empty file or a comment-only file has no entries */
    r.n = 0;
    write_file("");
    assert_int_equal(hvd__config_file_read(path, record, &r), HVD_OK);
    unlink(path);
    write_file("# nothing here\n---\n");
    assert_int_equal(hvd__config_file_read(path, record, &r), HVD_OK);
    unlink(path);
    assert_int_equal(r.n, 0);
}

static hvd_status_t refuse(const hvd_config_entry_t *e, void *arg) {
    (void)arg;
    if (strcmp(e->path, "b") == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "refused %s at %d", e->path, e->line);
    return HVD_OK;
}

static void expect_walk_error(const char *yaml, const char *needle) {
    record_t r = {0};
    write_file(yaml);
    assert_int_equal(hvd__config_file_read(path, record, &r), HVD_ERR_INVALID_ARG);
    if (!strstr(hvd_last_error(), needle) || !strstr(hvd_last_error(), path))
        fail_msg("'%s': error '%s' lacks '%s' or the file", yaml, hvd_last_error(), needle);
    unlink(path);
}

static void test_walk_errors(void **state) {
    (void)state;
    expect_walk_error("params: {\n", ":2: YAML error");
    expect_walk_error("a: 1\n  b: 2\n", ":2: YAML error: mapping values are not allowed");
    expect_walk_error("- a\n- b\n", ":1: the config file must be a mapping");
    expect_walk_error("just a scalar\n", "must be a mapping");
    expect_walk_error("a: 1\n? [x, y]\n: 2\n", ":2: keys must be plain names");
    expect_walk_error("a: 1\n---\nb: 2\n", ":3: a second YAML document");
    expect_walk_error("a: 1\n---\n- [\n", "YAML error");
    expect_walk_error("a: *nothing\n", "YAML error");
    /* the visitor's error stops the walk and comes back as it is */
    write_file("a: 1\nb: 2\nc: 3\n");
    assert_int_equal(hvd__config_file_read(path, refuse, NULL), HVD_ERR_INVALID_ARG);
    assert_string_equal(hvd_last_error(), "refused b at 2");
    unlink(path);
    assert_int_equal(hvd__config_file_read("/nonexistent/x.yaml", refuse, NULL),
                     HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "cannot open config file /nonexistent/x.yaml"));
    /* a wrong path (a binary, a huge log) is refused before parsing, in bounded memory */
    assert_int_equal(hvd__config_file_read("/dev/zero", refuse, NULL), HVD_ERR_INVALID_ARG);
    assert_string_equal(hvd_last_error(), "config file /dev/zero: line 1 holds a NUL byte (a "
                                          "config file is text; is it the right file?)");
    size_t big = HVD_CONFIG_FILE_MAX_BYTES + 1;
    char *text = malloc(big + 1);
    assert_non_null(text);
    memset(text, '#', big);
    text[big] = '\0';
    for (size_t i = 80; i < big; i += 80)
        text[i] = '\n';
    write_file(text);
    assert_int_equal(hvd__config_file_read(path, refuse, NULL), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "is larger than 1048576 bytes"));
    unlink(path);
    text[big - 1] = '\0'; /* exactly the bound: all comments, an empty configuration */
    write_file(text);
    assert_int_equal(hvd__config_file_read(path, refuse, NULL), HVD_OK);
    unlink(path);
    free(text);
    /* an alias that makes a section its own member terminates (walked two levels at most) */
    record_t r = {0};
    write_file("params: &p\n  x: 1\n  self: *p\n");
    assert_int_equal(hvd__config_file_read(path, record, &r), HVD_OK);
    unlink(path);
}

/* ---- the merge into settings ---- */

static hvd_status_t parse_with(const char *yaml, const char *before, const char *after,
                               hvd_settings_t *s) {
    write_file(yaml);
    static char buf[4096];
    static char *argv[128];
    snprintf(buf, sizeof buf, "horovodrun -np 2 %s --config-file %s %s true", before, path, after);
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 127; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    hvd_status_t st = hvd__settings_parse(argc, argv, &env, s);
    unlink(path);
    return st;
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

/* Horovod's test/single/data/config.test.yaml, as YAML of the same shape. */
static const char reference_yaml[] = "controller: gloo\n"
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
                                     "  hide_timestamp: true\n";

static void test_reference_config(void **state) {
    (void)state;
    hvd_settings_t s;
    capture_start();
    assert_int_equal(parse_with(reference_yaml, "", "", &s), HVD_OK);
    /* the reference silently ignores hide_timestamp; hvd says so */
    assert_non_null(strstr(capture_end(), ":29: unknown config key 'logging.hide_timestamp' "
                                          "ignored"));
    assert_int_equal(s.controller, HVD_CONTROLLER_GLOO);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "33554432");
    expect_env(&s, "HOROVOD_CYCLE_TIME", "10.0");
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "2048");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLGATHER", "1");
    expect_env(&s, "HOROVOD_TORUS_ALLREDUCE", NULL);
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
    /* log_with_timestamp is falsy in the reference's parse: no with_timestamp key, no export */
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", NULL);
    assert_int_equal(s.log_level, HVD_LOG_INFO); /* the launcher logs at the file's level too */
    assert_int_equal(s.exports.count, 21);
    hvd__settings_fini(&s);

    /* with_timestamp is the key that is read */
    assert_int_equal(parse_with("logging:\n  with_timestamp: false\n", "", "", &s), HVD_OK);
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "1");
    assert_true(s.log_hide_time);
    hvd__settings_fini(&s);
    assert_int_equal(parse_with("logging:\n  with_timestamp: yes\n", "", "", &s), HVD_OK);
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "0");
    hvd__settings_fini(&s);
}

static void test_precedence(void **state) {
    (void)state;
    hvd_settings_t s;
    /* a flag anywhere on the command line wins over the file (test_config_file_override_args) */
    capture_start();
    assert_int_equal(parse_with(reference_yaml, "--fusion-threshold-mb 256 --mpi",
                                "--no-hierarchical-allreduce --cycle-time-ms 2 --log-level ERROR "
                                "--no-stall-check --thread-affinity 0,1 --no-autotune",
                                &s),
                     HVD_OK);
    capture_end();
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "268435456");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLREDUCE", "0");
    expect_env(&s, "HOROVOD_CYCLE_TIME", "2.0");
    expect_env(&s, "HOROVOD_LOG_LEVEL", "ERROR");
    expect_env(&s, "HOROVOD_STALL_CHECK_DISABLE", "1");
    expect_env(&s, "HOROVOD_THREAD_AFFINITY", "0,1");
    expect_env(&s, "HOROVOD_AUTOTUNE", NULL); /* --no-autotune beats enabled: true */
    expect_env(&s, "HOROVOD_AUTOTUNE_LOG", NULL);
    assert_int_equal(s.controller, HVD_CONTROLLER_MPI);
    assert_int_equal(s.log_level, HVD_LOG_ERROR);
    /* values without a flag still come from the file */
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "2048");
    expect_env(&s, "HOROVOD_HIERARCHICAL_ALLGATHER", "1");
    expect_env(&s, "HOROVOD_STALL_CHECK_TIME_SECONDS", "120");
    hvd__settings_fini(&s);

    /* a file value that a flag overrides is not validated: it is never used */
    assert_int_equal(parse_with("params:\n  cache_capacity: -5\n", "--cache-capacity 3", "", &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "3");
    hvd__settings_fini(&s);
    /* the deprecated spelling is the same setting: it also beats the file */
    capture_start();
    assert_int_equal(
        parse_with("logging:\n  with_timestamp: true\n", "--log-hide-timestamp", "", &s), HVD_OK);
    assert_non_null(strstr(capture_end(), "--log-hide-timestamp is deprecated"));
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "1");
    hvd__settings_fini(&s);
    /* the controller from the file is used when no controller flag is given */
    assert_int_equal(parse_with("controller: MPI\n", "", "", &s), HVD_OK);
    assert_int_equal(s.controller, HVD_CONTROLLER_MPI);
    hvd__settings_fini(&s);
    /* autotune knobs from the file go only with autotune on */
    assert_int_equal(parse_with("autotune:\n  enabled: false\n  warmup_samples: 5\n", "", "", &s),
                     HVD_OK);
    assert_int_equal(s.exports.count, 0);
    hvd__settings_fini(&s);
    assert_int_equal(parse_with("autotune:\n  warmup_samples: 5\n", "--autotune", "", &s), HVD_OK);
    expect_env(&s, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5");
    hvd__settings_fini(&s);
    /* null values are "not set"; an empty section is fine */
    assert_int_equal(parse_with("params:\ntimeline:\n  filename: ~\n  mark_cycles: true\n"
                                "logging:\n  level:\n",
                                "", "", &s),
                     HVD_OK);
    assert_int_equal(s.exports.count, 0);
    hvd__settings_fini(&s);
    /* a later key of the same name replaces an earlier one, as in PyYAML */
    assert_int_equal(parse_with("params:\n  cache_capacity: 1\n  cache_capacity: 9\n", "", "", &s),
                     HVD_OK);
    expect_env(&s, "HOROVOD_CACHE_CAPACITY", "9");
    hvd__settings_fini(&s);
    /* unknown keys and sections warn with file and line, and do not fail */
    capture_start();
    assert_int_equal(parse_with("params:\n  fusion_treshold_mb: 3\nextra:\n  k: v\n", "", "", &s),
                     HVD_OK);
    const char *log = capture_end();
    assert_non_null(strstr(log, ":2: unknown config key 'params.fusion_treshold_mb' ignored"));
    assert_non_null(strstr(log, ":4: unknown config key 'extra.k' ignored"));
    assert_int_equal(s.exports.count, 0);
    hvd__settings_fini(&s);
}

static void test_config_errors(void **state) {
    (void)state;
    const struct {
        const char *yaml, *needle;
    } bad[] = {
        {"params:\n  fusion_threshold_mb: lots\n",
         ":2: params.fusion_threshold_mb: invalid int value: 'lots'"},
        {"params:\n  fusion_threshold_mb: 1.5\n", "params.fusion_threshold_mb: invalid int"},
        {"params:\n  cycle_time_ms: fast\n", ":2: params.cycle_time_ms: invalid float value"},
        {"\nparams:\n  cache_capacity: -5\n", ":3: params.cache_capacity: must be >= 0 (got -5)"},
        {"autotune:\n  gaussian_process_noise: 1.5\n",
         "autotune.gaussian_process_noise: must be in [0, 1] (got 1.5)"},
        {"stall_check:\n  warning_time_seconds: -1\n", "stall_check.warning_time_seconds: must"},
        {"library_options:\n  gloo_timeout_seconds: 0\n",
         "library_options.gloo_timeout_seconds: must be in [1, 86400] (got 0)"},
        {"library_options:\n  thread_affinity: 1,,2\n",
         "library_options.thread_affinity: '1,,2' is not a comma list"},
        {"library_options:\n  num_nccl_streams: -2\n", "library_options.num_nccl_streams"},
        {"logging:\n  level: LOUD\n", ":2: logging.level: 'LOUD' is not one of TRACE"},
        {"controller: carrier-pigeon\n",
         ":1: controller: 'carrier-pigeon' is not a controller (gloo or mpi)"},
        {"controller: [gloo]\n", ":1: controller: must be a single value, not a list"},
        {"params: [1, 2]\n", ":1: 'params' must be a section"},
        {"params: 5\n", ":1: 'params' must be a section"},
        {"params:\n  fusion_threshold_mb: [1]\n",
         ":2: params.fusion_threshold_mb: must be a single value, not a list"},
        {"params:\n  fusion_threshold_mb: {a: 1}\n", "must be a single value, not a section"},
        {"params:\n  hierarchical_allreduce: maybe\n",
         "params.hierarchical_allreduce: 'maybe' is not true or false"},
        {"params: {\n", "YAML error"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hvd_settings_t s;
        if (parse_with(bad[i].yaml, "", "", &s) != HVD_ERR_INVALID_ARG)
            fail_msg("yaml '%s' was accepted", bad[i].yaml);
        if (!strstr(hvd_last_error(), bad[i].needle) || !strstr(hvd_last_error(), path))
            fail_msg("yaml '%s': error '%s' lacks '%s' or the file name", bad[i].yaml,
                     hvd_last_error(), bad[i].needle);
        assert_int_equal(s.exports.count, 0);
        hvd__settings_fini(&s);
    }
    /* print-and-exit modes do not read the file */
    hvd_settings_t s;
    char *argv[] = {"horovodrun", "--version", "--config-file", "/nonexistent.yaml", NULL};
    assert_int_equal(hvd__settings_parse(4, argv, &env, &s), HVD_OK);
    assert_true(s.show_version);
    hvd__settings_fini(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk),
        cmocka_unit_test(test_walk_errors),
        cmocka_unit_test(test_reference_config),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
