/* horovodrun's command line: the CLI -> environment cases of Horovod's test_run.py, every flag
 * of Horovod's launcher (docs/reference.md, "`horovodrun`"), argparse behaviours, validation, and
 * the print-and-exit outputs. The config file has its own test (test_config_file.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "log_capture.h"

#include <hvd/hvd.h>

#include "common/log.h"
#include "runner/cli/help.h"
#include "runner/cli/settings.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hvd_params_t env;

/* The tests must not depend on the environment they run in: every variable reads as unset. */
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

/* Parse an argv given as a NULL-terminated list ("horovodrun" is prepended). */
static hvd_status_t parse_v(const char *const *args, hvd_settings_t *s) {
    static char *argv[128];
    int argc = 0;
    argv[argc++] = "horovodrun";
    while (*args && argc < 127)
        argv[argc++] = (char *)*args++;
    argv[argc] = NULL;
    return hvd__settings_parse(argc, argv, &env, s);
}
#define PARSE(s, ...) parse_v((const char *const[]){__VA_ARGS__, NULL}, (s))

/* Parse a space-separated command line. */
static hvd_status_t parse(const char *line, hvd_settings_t *s) {
    static char buf[4096];
    static const char *args[128];
    snprintf(buf, sizeof buf, "%s", line);
    int n = 0;
    for (char *tok = strtok(buf, " "); tok && n < 127; tok = strtok(NULL, " "))
        args[n++] = tok;
    args[n] = NULL;
    return parse_v(args, s);
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

/* line must parse, and export exactly the NAME=VALUE pairs of want (in any order). */
static void expect_exports(const char *line, const char *const *want) {
    hvd_settings_t s;
    if (parse(line, &s) != HVD_OK)
        fail_msg("'%s': %s", line, hvd_last_error());
    size_t n = 0;
    for (; want[n]; n++) {
        const char *eq = strchr(want[n], '=');
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - want[n]), want[n]);
        expect_env(&s, name, eq + 1);
    }
    if (s.exports.count != n) {
        for (size_t i = 0; i < s.exports.count; i++)
            print_message("exported: %s\n", s.exports.entries[i]);
        fail_msg("'%s': %zu exports, expected %zu", line, s.exports.count, n);
    }
    hvd__settings_fini(&s);
}
#define EXPORTS(line, ...) expect_exports(line, (const char *const[]){__VA_ARGS__, NULL})
#define NO_EXPORTS(line) expect_exports(line, (const char *const[]){NULL})

static void expect_invalid(const char *line, const char *needle) {
    hvd_settings_t s;
    memset(&s, 0xab, sizeof s);
    if (parse(line, &s) != HVD_ERR_INVALID_ARG)
        fail_msg("'%s' was accepted", line);
    if (!strstr(hvd_last_error(), needle))
        fail_msg("'%s': error '%s' lacks '%s'", line, hvd_last_error(), needle);
    /* on error the settings are zeroed, so fini is safe and nothing leaks */
    assert_null(s.command);
    assert_int_equal(s.exports.count, 0);
    assert_int_equal(s.nic_count, 0);
    hvd__settings_fini(&s);
}

/* Every CLI -> environment case of Horovod's test_run.py. */
static void test_reference_cases(void **state) {
    (void)state;
    EXPORTS("-np 2 --fusion-threshold-mb 10 --cycle-time-ms 20 --cache-capacity 512 "
            "--hierarchical-allreduce --hierarchical-allgather true",
            "HOROVOD_FUSION_THRESHOLD=10485760", "HOROVOD_CYCLE_TIME=20.0",
            "HOROVOD_CACHE_CAPACITY=512", "HOROVOD_HIERARCHICAL_ALLREDUCE=1",
            "HOROVOD_HIERARCHICAL_ALLGATHER=1");
    EXPORTS("-np 2 --autotune --autotune-log-file /tmp/autotune.txt --autotune-warmup-samples 1 "
            "--autotune-steps-per-sample 5 --autotune-bayes-opt-max-samples 10 "
            "--autotune-gaussian-process-noise 0.2 true",
            "HOROVOD_AUTOTUNE=1", "HOROVOD_AUTOTUNE_LOG=/tmp/autotune.txt",
            "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=5",
            "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=10",
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.2");
    /* test_autotuning_with_fixed_param */
    EXPORTS("-np 2 --autotune --cache-capacity 1024 --no-hierarchical-allgather true",
            "HOROVOD_AUTOTUNE=1", "HOROVOD_CACHE_CAPACITY=1024",
            "HOROVOD_HIERARCHICAL_ALLGATHER=0");
    EXPORTS("-np 2 --timeline-filename /tmp/timeline.json --timeline-mark-cycles true",
            "HOROVOD_TIMELINE=/tmp/timeline.json", "HOROVOD_TIMELINE_MARK_CYCLES=1");
    EXPORTS("-np 2 --no-stall-check true", "HOROVOD_STALL_CHECK_DISABLE=1");
    EXPORTS("-np 2 --stall-check-warning-time-seconds 10 --stall-check-shutdown-time-seconds 20 "
            "true",
            "HOROVOD_STALL_CHECK_TIME_SECONDS=10", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=20");
    EXPORTS("-np 2 --mpi-threads-disable --num-nccl-streams 2 --thread-affinity 1 "
            "--gloo-timeout-seconds 60 true",
            "HOROVOD_MPI_THREADS_DISABLE=1", "HOROVOD_NUM_NCCL_STREAMS=2",
            "HOROVOD_THREAD_AFFINITY=1", "HOROVOD_GLOO_TIMEOUT_SECONDS=60");
    capture_start();
    EXPORTS("-np 2 --log-level INFO --log-hide-timestamp true", "HOROVOD_LOG_LEVEL=INFO",
            "HOROVOD_LOG_HIDE_TIME=1");
    assert_non_null(
        strstr(capture_end(), "--log-hide-timestamp is deprecated; use --log-without-timestamp"));

    hvd_settings_t s;
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
    assert_int_equal(s.num_proc, 4);
    assert_int_equal(s.min_np, 2);
    assert_int_equal(s.max_np, 8);
    assert_int_equal(s.slots_per_host, 1);
    assert_int_equal(s.elastic_timeout, 60);
    assert_int_equal(s.reset_limit, 10);
    assert_int_equal(s.cooldown_min, 120);
    assert_int_equal(s.cooldown_max, 600);
    hvd__settings_fini(&s);

    expect_invalid("-np 2 --fusion-threshold-mb -1 true",
                   "--fusion-threshold-mb: must be >= 0 (got -1)");
}

/* Horovod's flag -> variable mappings, beyond the test_run.py rows. */
static void test_flag_exports(void **state) {
    (void)state;
    NO_EXPORTS("-np 1 true"); /* nothing for absent flags */
    EXPORTS("-np 1 --torus-allreduce true", "HOROVOD_TORUS_ALLREDUCE=1");
    EXPORTS("-np 1 --no-torus-allreduce --no-hierarchical-allreduce true",
            "HOROVOD_TORUS_ALLREDUCE=0", "HOROVOD_HIERARCHICAL_ALLREDUCE=0");
    EXPORTS("-np 1 --cycle-time-ms 0.5 --fusion-threshold-mb 0 --cache-capacity 0 true",
            "HOROVOD_CYCLE_TIME=0.5", "HOROVOD_FUSION_THRESHOLD=0", "HOROVOD_CACHE_CAPACITY=0");
    EXPORTS("-np 1 --cycle-time-ms 2.5 true", "HOROVOD_CYCLE_TIME=2.5");
    EXPORTS("-np 1 --cycle-time-ms 1e1 true", "HOROVOD_CYCLE_TIME=10.0");
    /* autotune knobs only go with --autotune */
    NO_EXPORTS("-np 1 --autotune-log-file /tmp/a --autotune-warmup-samples 4 "
               "--autotune-gaussian-process-noise 1 true");
    NO_EXPORTS("-np 1 --no-autotune --autotune-steps-per-sample 3 true");
    EXPORTS("-np 1 --autotune --autotune-gaussian-process-noise 1 true", "HOROVOD_AUTOTUNE=1",
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=1.0");
    /* mark-cycles only with a timeline file */
    NO_EXPORTS("-np 1 --timeline-mark-cycles true");
    EXPORTS("-np 1 --timeline-filename /tmp/t.json --no-timeline-mark-cycles true",
            "HOROVOD_TIMELINE=/tmp/t.json", "HOROVOD_TIMELINE_MARK_CYCLES=0");
    NO_EXPORTS("-np 1 --timeline-filename= true"); /* empty name: no timeline */
    EXPORTS("-np 1 --stall-check true", "HOROVOD_STALL_CHECK_DISABLE=0");
    EXPORTS("-np 1 --no-mpi-threads-disable true", "HOROVOD_MPI_THREADS_DISABLE=0");
    EXPORTS("-np 1 --tcp true", "NCCL_IB_DISABLE=1");
    EXPORTS("-np 1 --thread-affinity 0,1,2,3 true", "HOROVOD_THREAD_AFFINITY=0,1,2,3");
    EXPORTS("-np 1 --log-with-timestamp true", "HOROVOD_LOG_HIDE_TIME=0");
    EXPORTS("-np 1 --log-without-timestamp true", "HOROVOD_LOG_HIDE_TIME=1");
    EXPORTS("-np 1 --log-level debug true", "HOROVOD_LOG_LEVEL=debug");
    capture_start();
    EXPORTS("-np 1 --no-log-hide-timestamp true", "HOROVOD_LOG_HIDE_TIME=0");
    assert_non_null(strstr(capture_end(), "--no-log-hide-timestamp is deprecated"));
    /* launcher-side flags export nothing */
    NO_EXPORTS("-np 1 --verbose --disable-cache --start-timeout 5 --output-filename /tmp/o "
               "-p 2222 -i /k --network-interface lo --gloo --mpi-args=-x --binding-args=-y "
               "--prefix-output-with-timestamp --internal-rsh-agent /x true");
}

/* Every flag and alias of Horovod's launcher (and hvd's own) is recognised and lands in
 * its field. */
static void test_every_flag(void **state) {
    (void)state;
    hvd_settings_t s;
    assert_int_equal(PARSE(&s, "--num-proc", "3", "--disable-cache", "--start-timeout", "7",
                           "--network-interfaces", "eth0,eth1", "--network-interface", "eth2",
                           "--output-filename", "/tmp/out", "--verbose", "-p", "2222", "-i", "/key",
                           "--hostfile", "/hf", "--gloo", "--mpi-args", "-x FOO=1", "--tcp",
                           "--binding-args", "-bind-to none", "-prefix-timestamp", "--dry-run",
                           "--min-np", "2", "--max-np", "4", "--slots-per-host", "2",
                           "--elastic-timeout", "9", "--reset-limit", "0",
                           "--blacklist-cooldown-range", "1", "3600", "--log-level", "ERROR",
                           "--log-without-timestamp", "--internal-rsh-agent",
                           "/py -m horovod.spark.rsh", "python", "train.py"),
                     HVD_OK);
    assert_int_equal(s.num_proc, 3);
    assert_string_equal(s.rsh_agent, "/py -m horovod.spark.rsh");
    assert_true(s.disable_cache);
    assert_int_equal(s.start_timeout, 7);
    assert_int_equal(s.nic_count, 3);
    assert_string_equal(s.nics[0], "eth0");
    assert_string_equal(s.nics[1], "eth1");
    assert_string_equal(s.nics[2], "eth2");
    assert_string_equal(s.output_dir, "/tmp/out");
    assert_true(s.verbose);
    assert_int_equal(s.ssh_port, 2222);
    assert_string_equal(s.ssh_identity_file, "/key");
    assert_string_equal(s.hostfile, "/hf");
    assert_null(s.hosts);
    assert_null(s.discovery_script);
    assert_int_equal(s.controller, HVD_CONTROLLER_GLOO);
    assert_string_equal(s.mpi_args, "-x FOO=1");
    assert_true(s.tcp);
    assert_string_equal(s.binding_args, "-bind-to none");
    assert_true(s.prefix_timestamp);
    assert_true(s.dry_run);
    assert_true(s.elastic);
    assert_int_equal(s.min_np, 2);
    assert_int_equal(s.max_np, 4);
    assert_int_equal(s.slots_per_host, 2);
    assert_int_equal(s.elastic_timeout, 9);
    assert_int_equal(s.reset_limit, 0);
    assert_int_equal(s.cooldown_min, 1);
    assert_int_equal(s.cooldown_max, 3600);
    assert_int_equal(s.log_level, HVD_LOG_ERROR);
    assert_true(s.log_hide_time);
    assert_string_equal(s.command[0], "python");
    assert_string_equal(s.command[1], "train.py");
    assert_null(s.command[2]);
    assert_false(s.show_help || s.show_version || s.show_check_build || s.show_help_env);
    hvd__settings_fini(&s);

    assert_int_equal(PARSE(&s, "-np", "1", "--ssh-port", "22", "--ssh-identity-file", "/k2", "-H",
                           "a:1", "--mpi", "--prefix-output-with-timestamp", "true"),
                     HVD_OK);
    assert_int_equal(s.ssh_port, 22);
    assert_string_equal(s.ssh_identity_file, "/k2");
    assert_string_equal(s.hosts, "a:1");
    assert_int_equal(s.controller, HVD_CONTROLLER_MPI);
    assert_true(s.prefix_timestamp);
    assert_false(s.elastic);
    assert_int_equal(s.max_np, -1);
    assert_int_equal(s.reset_limit, -1);
    assert_int_equal(s.slots_per_host, 0);
    assert_int_equal(s.cooldown_min, 0);
    hvd__settings_fini(&s);

    assert_int_equal(PARSE(&s, "-np", "1", "--hosts", "a:1", "--jsrun", "true"), HVD_OK);
    assert_string_equal(s.hosts, "a:1");
    assert_int_equal(s.controller, HVD_CONTROLLER_JSRUN);
    hvd__settings_fini(&s);
    assert_int_equal(PARSE(&s, "-np", "1", "-hostfile", "/hf2", "true"), HVD_OK);
    assert_string_equal(s.hostfile, "/hf2");
    hvd__settings_fini(&s);

    /* print-and-exit modes need neither -np nor a command */
    const struct {
        const char *flag;
        size_t field;
    } print[] = {{"-h", offsetof(hvd_settings_t, show_help)},
                 {"--help", offsetof(hvd_settings_t, show_help)},
                 {"--help-env", offsetof(hvd_settings_t, show_help_env)},
                 {"-v", offsetof(hvd_settings_t, show_version)},
                 {"--version", offsetof(hvd_settings_t, show_version)},
                 {"-cb", offsetof(hvd_settings_t, show_check_build)},
                 {"--check-build", offsetof(hvd_settings_t, show_check_build)}};
    for (size_t i = 0; i < sizeof print / sizeof print[0]; i++) {
        if (PARSE(&s, print[i].flag) != HVD_OK)
            fail_msg("%s: %s", print[i].flag, hvd_last_error());
        assert_true(*(int *)((char *)&s + print[i].field));
        assert_int_equal(s.num_proc, -1);
        assert_null(s.command);
        hvd__settings_fini(&s);
    }
    /* they win over values that a run would reject, as argparse's exiting actions do */
    assert_int_equal(parse("--help --fusion-threshold-mb -1", &s), HVD_OK);
    assert_true(s.show_help);
    hvd__settings_fini(&s);
    /* but an unknown option is still an error */
    expect_invalid("--help --frobnicate", "unrecognized option --frobnicate");
}

static void test_argparse_behaviour(void **state) {
    (void)state;
    hvd_settings_t s;
    /* prefixes, --opt=value, single-dash --opt=value, remainder */
    assert_int_equal(parse("-np=3 --slots=2 --fusion-thr=4 --verb --cycle=1.5 python train.py "
                           "--verbose -np 9 -- x",
                           &s),
                     HVD_OK);
    assert_int_equal(s.num_proc, 3);
    assert_int_equal(s.slots_per_host, 2);
    assert_true(s.verbose);
    expect_env(&s, "HOROVOD_FUSION_THRESHOLD", "4194304");
    expect_env(&s, "HOROVOD_CYCLE_TIME", "1.5");
    assert_string_equal(s.command[0], "python");
    assert_string_equal(s.command[2], "--verbose");
    assert_string_equal(s.command[3], "-np");
    assert_string_equal(s.command[5], "--"); /* the command's own "--" is kept */
    assert_null(s.command[7]);
    hvd__settings_fini(&s);
    /* -- ends the options and is dropped */
    assert_int_equal(parse("-np 1 -- --weird-program -x", &s), HVD_OK);
    assert_string_equal(s.command[0], "--weird-program");
    assert_string_equal(s.command[1], "-x");
    hvd__settings_fini(&s);
    /* "-" and a negative number are not options: they start the command */
    assert_int_equal(parse("-np 1 - a", &s), HVD_OK);
    assert_string_equal(s.command[0], "-");
    hvd__settings_fini(&s);
    /* a prefix of an alias resolves to the option (--min- means --min-np/--min-num-proc) */
    assert_int_equal(parse("-np 2 --min-num 2 --max-n=3 --reset 4 true", &s), HVD_OK);
    assert_int_equal(s.min_np, 2);
    assert_int_equal(s.max_np, 3);
    assert_int_equal(s.reset_limit, 4);
    hvd__settings_fini(&s);
    assert_int_equal(parse("-np 2 --min 2 true", &s), HVD_OK);
    assert_int_equal(s.min_np, 2);
    hvd__settings_fini(&s);
    /* single-dash forms: a one-letter option's attached value, single-dash long prefixes */
    assert_int_equal(parse("-n 2 -p2222 -Hlocalhost:2 -i/key -c true", &s), HVD_OK);
    assert_int_equal(s.num_proc, 2);
    assert_int_equal(s.ssh_port, 2222);
    assert_string_equal(s.hosts, "localhost:2");
    assert_string_equal(s.ssh_identity_file, "/key");
    assert_true(s.show_check_build); /* -c is a prefix of -cb only */
    hvd__settings_fini(&s);
    assert_int_equal(parse("-np 2 -host /hf true", &s), HVD_OK);
    assert_string_equal(s.hostfile, "/hf");
    hvd__settings_fini(&s);
    /* values that start with '-' */
    expect_invalid("-np 2 --fusion-threshold-mb -1 true", "must be >= 0"); /* a value */
    expect_invalid("-np 2 --cycle-time-ms -.5 true", "--cycle-time-ms: must be >= 0 (got -0.5)");
    expect_invalid("-np 2 --output-filename --verbose true",
                   "--output-filename: expected one argument");
    assert_int_equal(
        PARSE(&s, "-np", "1", "--binding-args", "-bind-to none", "--mpi-args", "-x A -x B", "true"),
        HVD_OK); /* a value with a space may start with '-' */
    assert_string_equal(s.mpi_args, "-x A -x B");
    hvd__settings_fini(&s);
    assert_int_equal(parse("-np 1 --mpi-args=-x true", &s), HVD_OK);
    assert_string_equal(s.mpi_args, "-x");
    hvd__settings_fini(&s);
    /* missing values */
    expect_invalid("-np", "-np: expected one argument");
    expect_invalid("-np 1 --blacklist-cooldown-range 1", "expected 2 arguments");
    expect_invalid("-np 1 --blacklist-cooldown-range 1 --tcp true", "expected 2 arguments");
    expect_invalid("-np 1 --blacklist-cooldown-range=1 2 true", "takes two values");
    expect_invalid("-np 1 --verbose=yes true", "--verbose takes no value");
    /* ambiguous and unknown options */
    expect_invalid("-np 1 --auto true", "ambiguous option: --auto could match --autotune, "
                                        "--autotune-log-file, --autotune-warmup-samples");
    expect_invalid("-np 1 --num 2 true", "could match --num-proc, --num-nccl-streams");
    expect_invalid("-np 1 --hier true", "ambiguous option: --hier");
    expect_invalid("-np 1 --no-h true", "--no-hierarchical-allreduce, --no-hierarchical-allgather");
    expect_invalid("-np 1 -pre true", "ambiguous option: -pre could match -p, -prefix-timestamp");
    expect_invalid("-np 1 --frobnicate true",
                   "unrecognized option --frobnicate (see horovodrun --help)");
    expect_invalid("-np 1 --frobnicate=3 true", "unrecognized option --frobnicate (");
    expect_invalid("-np 1 -x true", "unrecognized option -x");
    expect_invalid("-np 1 -vx true", "unrecognized option -vx");
    expect_invalid("-np 1 --- true", "unrecognized option ---");
    /* --x and --no-x (and the controllers) exclude each other; repeating is fine */
    expect_invalid("-np 1 --hierarchical-allreduce --no-hierarchical-allreduce true",
                   "--no-hierarchical-allreduce: not allowed with --hierarchical-allreduce");
    expect_invalid("-np 1 --gloo --mpi true", "--mpi: not allowed with --gloo");
    expect_invalid("-np 1 --log-with-timestamp --log-without-timestamp true", "not allowed with");
    expect_invalid("-np 1 --stall-check --no-stall-check true", "not allowed with");
    assert_int_equal(parse("-np 1 --autotune --autotune --gloo --gloo -np 2 true", &s), HVD_OK);
    assert_int_equal(s.num_proc, 2); /* a repeated value option: the last wins */
    hvd__settings_fini(&s);
    /* NIC forms: repeatable, comma lists, deduplicated in order; spaces trimmed */
    capture_start();
    assert_int_equal(PARSE(&s, "-np", "1", "--network-interface", "eth0", "--network-interfaces",
                           "eth1, eth0", "--network-interface", "eth2,eth3", "true"),
                     HVD_OK);
    assert_non_null(strstr(capture_end(), "--network-interface with a comma list is deprecated"));
    assert_int_equal(s.nic_count, 4);
    assert_string_equal(s.nics[0], "eth0");
    assert_string_equal(s.nics[1], "eth1");
    assert_string_equal(s.nics[2], "eth2");
    assert_string_equal(s.nics[3], "eth3");
    hvd__settings_fini(&s);
    expect_invalid("-np 1 --network-interfaces eth0,,eth1 true",
                   "--network-interfaces: empty interface name in 'eth0,,eth1'");
    /* timestamps: prefixing and log timestamps combine (the reference refused) */
    assert_int_equal(parse("-np 1 --prefix-output-with-timestamp --log-without-timestamp true", &s),
                     HVD_OK);
    assert_true(s.prefix_timestamp);
    assert_true(s.log_hide_time);
    expect_env(&s, "HOROVOD_LOG_HIDE_TIME", "1");
    hvd__settings_fini(&s);
    assert_int_equal(parse("-np 1 -prefix-timestamp --log-with-timestamp true", &s), HVD_OK);
    assert_true(s.prefix_timestamp);
    assert_false(s.log_hide_time);
    hvd__settings_fini(&s);
}

static void test_defaults_and_elastic(void **state) {
    (void)state;
    hvd_settings_t s;
    /* defaults come from the launcher's environment (hvd_params_t), flags win */
    hvd_params_t saved = env;
    env.start_timeout = 77;
    env.elastic_timeout = 88;
    env.log_level = HVD_LOG_DEBUG;
    env.log_hide_time = 1;
    assert_int_equal(parse("-np 1 true", &s), HVD_OK);
    assert_int_equal(s.start_timeout, 77);
    assert_int_equal(s.elastic_timeout, 88);
    assert_int_equal(s.log_level, HVD_LOG_DEBUG);
    assert_true(s.log_hide_time);
    assert_int_equal(s.controller, HVD_CONTROLLER_DEFAULT);
    assert_int_equal(s.ssh_port, 0);
    assert_null(s.nics);
    hvd__settings_fini(&s);
    assert_int_equal(parse("-np 1 --start-timeout 5 --elastic-timeout 6 --log-level fatal "
                           "--log-with-timestamp true",
                           &s),
                     HVD_OK);
    assert_int_equal(s.start_timeout, 5);
    assert_int_equal(s.elastic_timeout, 6);
    assert_int_equal(s.log_level, HVD_LOG_FATAL);
    assert_false(s.log_hide_time);
    hvd__settings_fini(&s);
    env = saved;
    assert_int_equal(parse("-np 1 true", &s), HVD_OK);
    assert_int_equal(s.start_timeout, 30);
    assert_int_equal(s.elastic_timeout, 600);
    assert_int_equal(s.log_level, HVD_LOG_WARNING);
    assert_int_equal(s.min_np, 1);
    assert_false(s.elastic);
    hvd__settings_fini(&s);

    /* elastic iff --min-np or --host-discovery-script; --max-np alone is not elastic */
    assert_int_equal(parse("-np 2 --max-np 4 true", &s), HVD_OK);
    assert_false(s.elastic);
    assert_int_equal(s.min_np, 2);
    hvd__settings_fini(&s);
    /* with a discovery script -np may be left out */
    assert_int_equal(parse("--host-discovery-script ./discover.sh true", &s), HVD_OK);
    assert_true(s.elastic);
    assert_string_equal(s.discovery_script, "./discover.sh");
    assert_int_equal(s.num_proc, -1);
    assert_int_equal(s.min_np, 1);
    hvd__settings_fini(&s);
    assert_int_equal(parse("--host-discovery-script d --min-np 3 --max-np 5 true", &s), HVD_OK);
    assert_int_equal(s.num_proc, 3);
    assert_int_equal(s.min_np, 3);
    hvd__settings_fini(&s);
    /* but not with --min-np alone */
    expect_invalid("--min-np 2 true", "the following argument is required: -np/--num-proc");
}

static void test_validation(void **state) {
    (void)state;
    const struct {
        const char *line, *needle;
    } bad[] = {
        {"true", "the following argument is required: -np/--num-proc"},
        {"-np 2", "no command to run"},
        {"-np 0 true", "-np: must be in [1, 1000000] (got 0)"},
        {"-np -3 true", "-np: must be in [1, 1000000] (got -3)"},
        {"-np 2000000 true", "-np: must be in [1, 1000000]"},
        {"-np x true", "-np: invalid int value: 'x'"},
        {"-np 1.5 true", "invalid int value: '1.5'"},
        {"-np 99999999999999999999 true", "invalid int value"},
        {"--num-proc 0 true", "--num-proc: must be in"},
        {"-np 1 --cycle-time-ms -1 true", "--cycle-time-ms: must be >= 0 (got -1.0)"},
        {"-np 1 --cycle-time-ms fast true", "--cycle-time-ms: invalid float value: 'fast'"},
        {"-np 1 --cycle-time-ms nan true", "invalid float value: 'nan'"},
        {"-np 1 --cycle-time-ms inf true", "invalid float value: 'inf'"},
        {"-np 1 --cache-capacity -1 true", "--cache-capacity: must be >= 0 (got -1)"},
        {"-np 1 --cache-capacity 3000000000 true", "--cache-capacity: 3000000000 is out of range"},
        {"-np 1 --fusion-threshold-mb 99999999999999 true", "--fusion-threshold-mb: must be"},
        {"-np 1 --autotune-warmup-samples -1 true", "--autotune-warmup-samples: must be >= 0"},
        {"-np 1 --autotune-steps-per-sample -1 true", "--autotune-steps-per-sample: must be >= 0"},
        {"-np 1 --autotune-bayes-opt-max-samples -1 true", "--autotune-bayes-opt-max-samples"},
        {"-np 1 --autotune-gaussian-process-noise 1.5 true",
         "--autotune-gaussian-process-noise: must be in [0, 1] (got 1.5)"},
        {"-np 1 --autotune-gaussian-process-noise -0.1 true", "must be in [0, 1] (got -0.1)"},
        {"-np 1 --stall-check-warning-time-seconds -1 true", "--stall-check-warning-time-seconds"},
        {"-np 1 --stall-check-shutdown-time-seconds -1 true", "--stall-check-shutdown"},
        {"-np 1 --num-nccl-streams -1 true", "--num-nccl-streams: must be >= 0"},
        {"-np 1 --gloo-timeout-seconds 0 true", "--gloo-timeout-seconds: must be in [1, 86400]"},
        {"-np 1 --start-timeout 0 true", "--start-timeout: must be >= 1 (got 0)"},
        {"-np 1 --elastic-timeout 0 true", "--elastic-timeout: must be >= 1"},
        {"-np 1 --reset-limit -1 true", "--reset-limit: must be >= 0 (got -1)"},
        {"-np 1 --slots-per-host 0 true", "--slots-per-host: must be in [1, 1000000]"},
        {"-np 1 -p 0 true", "-p: must be in [1, 65535] (got 0)"},
        {"-np 1 --ssh-port 70000 true", "--ssh-port: must be in [1, 65535] (got 70000)"},
        {"-np 1 --min-np 0 true", "--min-np: must be in [1, 1000000]"},
        {"-np 1 --blacklist-cooldown-range 0 10 true",
         "--blacklist-cooldown-range: need 1 <= MIN <= MAX <= 3600 seconds (got 0 10)"},
        {"-np 1 --blacklist-cooldown-range 10 5000 true", "(got 10 5000)"},
        {"-np 1 --blacklist-cooldown-range 600 120 true", "(got 600 120)"},
        {"-np 1 --blacklist-cooldown-range a 1 true", "invalid int values: 'a' '1'"},
        {"-np 4 --min-np 4 --max-np 2 true", "--max-np 2 is less than --min-np 4"},
        {"-np 2 --min-np 4 true", "--min-np 4 is more than -np 2"},
        {"-np 9 --max-np 8 true", "-np 9 is more than --max-np 8"},
        {"-np 1 --thread-affinity 1,,2 true", "--thread-affinity: '1,,2' is not a comma list"},
        {"-np 1 --thread-affinity a true", "'a' is not a comma list of core ids"},
        {"-np 1 --thread-affinity -1 true", "'-1' is not a comma list"},
        {"-np 1 --thread-affinity 1, true", "'1,' is not"},
        {"-np 1 --log-level LOUD true",
         "--log-level: 'LOUD' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL"},
        {"-np 1 -H a:1 --hostfile f true",
         "--hostfile: not allowed with -H (-H/--hosts, --hostfile and --host-discovery-script "
         "are mutually exclusive)"},
        {"-np 1 --hostfile f --hosts a:1 true", "--hosts: not allowed with --hostfile"},
        {"-np 1 -H a:1 --host-discovery-script d true", "--host-discovery-script: not allowed"},
        {"-np 1 --hostfile f --host-discovery-script d true", "mutually exclusive"},
        {"-np 1 --config-file /nonexistent/c.yaml true",
         "cannot open config file /nonexistent/c.yaml"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_invalid(bad[i].line, bad[i].needle);
}

static void test_float_format(void **state) {
    (void)state;
    char buf[64];
    const struct {
        double v;
        const char *text;
    } cases[] = {{20, "20.0"},
                 {2.5, "2.5"},
                 {0.5, "0.5"},
                 {0.1, "0.1"},
                 {0, "0.0"},
                 {-2.5, "-2.5"},
                 {1e-4, "0.0001"},
                 {1e-5, "1e-05"},
                 {0.8, "0.8"},
                 {0.1 + 0.2, "0.30000000000000004"},
                 {123.456, "123.456"},
                 {1234567.0, "1234567.0"},
                 {1e15, "1000000000000000.0"},
                 {1e16, "1e+16"},
                 {1.5e16, "1.5e+16"},
                 {1e20, "1e+20"},
                 {1.2345e-7, "1.2345e-07"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hvd__settings_format_float(cases[i].v, buf, sizeof buf);
        assert_string_equal(buf, cases[i].text);
    }
}

/* Write what printer prints to a string. */
static char *printed(void (*printer)(FILE *)) {
    static char buf[32768];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    printer(f);
    fclose(f);
    return buf;
}

static void test_help_outputs(void **state) {
    (void)state;
    assert_string_equal(printed(hvd__help_print_version),
                        "horovodrun (hvd) 0.1.0, compatible with Horovod 0.28.1\n");
    assert_string_equal(printed(hvd__help_print_check_build), "Horovod v0.28.1 (hvd 0.1.0):\n"
                                                              "\n"
                                                              "Available Frameworks:\n"
#ifdef HVD_WITH_TENSORFLOW
                                                              "    [X] TensorFlow\n"
#else
                                                              "    [ ] TensorFlow\n"
#endif
#ifdef HVD_WITH_PYTORCH
                                                              "    [X] PyTorch\n"
#else
                                                              "    [ ] PyTorch\n"
#endif
                                                              "    [ ] MXNet\n"
                                                              "\n"
                                                              "Available Controllers:\n"
                                                              "    [ ] MPI\n"
                                                              "    [X] Gloo\n"
                                                              "\n"
                                                              "Available Tensor Operations:\n"
                                                              "    [ ] NCCL\n"
                                                              "    [ ] DDL\n"
                                                              "    [ ] CCL\n"
                                                              "    [ ] MPI\n"
                                                              "    [X] Gloo\n");
    /* --help names every visible flag and every group */
    const char *help = printed(hvd__help_print_usage);
    static const char *const flags[] = {"-np, --num-proc",
                                        "-v, --version",
                                        "-cb, --check-build",
                                        "--disable-cache",
                                        "--start-timeout",
                                        "--network-interfaces",
                                        "--network-interface ",
                                        "--output-filename",
                                        "--verbose",
                                        "--config-file",
                                        "-p, --ssh-port",
                                        "-i, --ssh-identity-file",
                                        "--fusion-threshold-mb",
                                        "--cycle-time-ms",
                                        "--cache-capacity",
                                        "--hierarchical-allreduce",
                                        "--no-hierarchical-allreduce",
                                        "--hierarchical-allgather",
                                        "--no-hierarchical-allgather",
                                        "--torus-allreduce",
                                        "--no-torus-allreduce",
                                        "--autotune ",
                                        "--autotune-log-file",
                                        "--autotune-warmup-samples",
                                        "--autotune-steps-per-sample",
                                        "--autotune-bayes-opt-max-samples",
                                        "--autotune-gaussian-process-noise",
                                        "--min-np, --min-num-proc",
                                        "--max-np, --max-num-proc",
                                        "--slots-per-host",
                                        "--elastic-timeout",
                                        "--reset-limit",
                                        "--blacklist-cooldown-range MIN MAX",
                                        "--timeline-filename",
                                        "--timeline-mark-cycles",
                                        "--no-stall-check",
                                        "--stall-check-warning-time-seconds",
                                        "--stall-check-shutdown-time-seconds",
                                        "--mpi-threads-disable",
                                        "--mpi-args",
                                        "--tcp",
                                        "--binding-args",
                                        "--num-nccl-streams",
                                        "--thread-affinity",
                                        "--gloo-timeout-seconds",
                                        "--log-level",
                                        "--log-without-timestamp",
                                        "--log-with-timestamp",
                                        "-prefix-timestamp, --prefix-output-with-timestamp",
                                        "-H, --hosts",
                                        "-hostfile, --hostfile",
                                        "--host-discovery-script",
                                        "--gloo",
                                        "--mpi",
                                        "--jsrun",
                                        "--dry-run",
                                        "-h, --help",
                                        "--help-env",
                                        "--no-autotune",
                                        "--log-hide-timestamp",
                                        "usage: horovodrun",
                                        "SSH arguments:",
                                        "tuneable parameter arguments:",
                                        "autotune arguments:",
                                        "elastic arguments:",
                                        "timeline arguments:",
                                        "stall check arguments:",
                                        "library arguments:",
                                        "logging arguments:",
                                        "host arguments:",
                                        "controller arguments:"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strstr(help, flags[i]))
            fail_msg("--help lacks '%s'", flags[i]);
    /* lines fit a 100-column terminal */
    for (const char *p = help; *p;) {
        size_t n = strcspn(p, "\n");
        if (n > 100)
            fail_msg("--help line too long: %.*s", (int)n, p);
        p += n + (p[n] ? 1 : 0);
    }
    const char *envs = printed(hvd__help_print_env);
    assert_non_null(strstr(envs, "HOROVOD_GLOO_TIMEOUT_SECONDS"));
    assert_non_null(strstr(envs, "HOROVOD_FUSION_THRESHOLD"));
    assert_non_null(strstr(envs, "[launcher] "));

    /* the dry-run plan printer */
    hvd_host_list_t hosts;
    hvd_slot_plan_t plan;
    assert_int_equal(hvd__hosts_parse("a:1,b:1", &hosts), HVD_OK);
    assert_int_equal(hvd__slot_plan_create(&hosts, 2, &plan), HVD_OK);
    static char buf[1024];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    hvd__help_print_plan(f, &plan);
    fclose(f);
    assert_string_equal(buf,
                        "rank=0 size=2 local_rank=0 local_size=1 cross_rank=0 cross_size=2 host=a\n"
                        "rank=1 size=2 local_rank=0 local_size=1 cross_rank=1 cross_size=2 "
                        "host=b\n");
    hvd__slot_plan_fini(&plan);
    hvd__hosts_fini(&hosts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_cases),      cmocka_unit_test(test_flag_exports),
        cmocka_unit_test(test_every_flag),           cmocka_unit_test(test_argparse_behaviour),
        cmocka_unit_test(test_defaults_and_elastic), cmocka_unit_test(test_validation),
        cmocka_unit_test(test_float_format),         cmocka_unit_test(test_help_outputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
