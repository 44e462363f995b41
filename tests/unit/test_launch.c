/* hvd__launch_run with hand-built slot plans: the environment contract, tagged output that
 * never mixes lines, --output-filename, --verbose without the secret, kill-all on the first
 * failure and its report, exit code propagation, SIGINT/SIGTERM/SIGKILL of the launcher, many
 * ranks under a low fd limit, remote hosts (one ssh session each, through a stand-in for ssh),
 * and no leaked fds or children. Deadlines are generous: the
 * machine running the tests may be loaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/params.h"
#include "runner/launch/launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 160
#define DEADLINE_MS 30000

typedef struct {
    hvd_slot_t slots[MAX_RANKS];
    hvd_slot_plan_t plan;
} plan_t;

/* n ranks on one host. */
static void make_plan(plan_t *p, int n, const char *host) {
    assert_true(n <= MAX_RANKS);
    for (int i = 0; i < n; i++)
        p->slots[i] = (hvd_slot_t){.rank = i,
                                   .size = n,
                                   .local_rank = i,
                                   .local_size = n,
                                   .cross_rank = 0,
                                   .cross_size = 1,
                                   .host = host};
    p->plan = (hvd_slot_plan_t){.slots = p->slots, .count = (size_t)n};
}

static hvd_secret_t test_secret(void) {
    hvd_secret_t s;
    for (int i = 0; i < HVD_SECRET_LEN; i++)
        s.bytes[i] = (uint8_t)(0xa0 + i);
    return s;
}

static char *read_all_fd(int fd) {
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    ssize_t n = pread(fd, buf, (size_t)st.st_size, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static char *read_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strdup("");
    char *text = read_all_fd(fd);
    close(fd);
    return text;
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

typedef struct {
    hvd_status_t st;
    int code;
    char *out, *err;
    int64_t ms;
} result_t;

static void result_free(result_t *r) {
    free(r->out);
    free(r->err);
}

/* Run a launch in this process with the console captured; check that it leaves no fd and
 * no child behind. */
static void launch(hvd_launch_config_t cfg, result_t *res) {
    int fds_before = count_fds();
    int out = memfd_create("out", MFD_CLOEXEC), err = memfd_create("err", MFD_CLOEXEC);
    assert_true(out >= 0 && err >= 0);
    cfg.out_fd = out;
    cfg.err_fd = err;
    res->code = -1;
    int64_t t0 = hvd__clock_now_ms();
    res->st = hvd__launch_run(&cfg, &res->code);
    res->ms = hvd__clock_now_ms() - t0;
    res->out = read_all_fd(out);
    res->err = read_all_fd(err);
    close(out);
    close(err);
    assert_int_equal(count_fds(), fds_before);
    int st;
    assert_int_equal(waitpid(-1, &st, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static char *make_dir(void) {
    char tmpl[] = "/tmp/hvd-launch-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    return strdup(tmpl);
}

static void remove_dir(char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/* Alive and not a zombie. */
static int alive(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static int wait_dead(pid_t pid, int ms) {
    int64_t until = hvd__clock_now_ms() + ms;
    while (alive(pid) && hvd__clock_now_ms() < until)
        hvd__clock_sleep_ms(10);
    return !alive(pid);
}

/* The pids the ranks wrote into dir/pid.*; fails unless there are exactly `expect`. */
static int read_pids(const char *dir, pid_t *pids, int expect) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cat %s/pid.* 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int n = 0;
    long pid;
    while (n < 64 && fscanf(f, "%ld", &pid) == 1)
        pids[n++] = (pid_t)pid;
    pclose(f);
    assert_int_equal(n, expect);
    return n;
}

static int count_pid_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, "pid.", 4) == 0;
    if (d)
        closedir(d);
    return n;
}

static int count_substr(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- environment ---- */

static void test_env_contract(void **state) {
    (void)state;
    setenv("HOROVOD_RANK", "99", 1); /* computed values must win over inherited ones */
    setenv("HOROVOD_HOSTNAME", "inherited-host", 1);
    setenv(HVD_SECRET_ENV, "stale-secret", 1);
    setenv("OLDPWD", "/old", 1);
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    setenv("MY_CUDA_VISIBLE_DEVICES_X", "2", 1);
    setenv("BASH_FUNC_hvd%%", "() { :; }", 1);
    setenv("HVD_TEST_PLAIN", "plain", 1);
    setenv("HVD_TEST_EXPORTED", "inherited", 1);
    hvd_env_list_t exports;
    hvd__env_list_init(&exports);
    assert_int_equal(hvd__env_list_set(&exports, "HOROVOD_SIZE", "77"), 0);
    assert_int_equal(hvd__env_list_set(&exports, "HVD_TEST_EXPORTED", "exported"), 0);
    assert_int_equal(hvd__env_list_set(&exports, "HOROVOD_GLOO_RENDEZVOUS_PORT", "1234"), 0);
    assert_int_equal(hvd__env_list_set(&exports, "HVD_TEST_QUOTED", "a b'c"), 0);
    plan_t p;
    make_plan(&p, 2, "node-a");
    p.slots[1].local_rank = 0;
    p.slots[1].local_size = 1;
    p.slots[1].cross_rank = 1;
    p.slots[1].cross_size = 2;
    p.slots[1].host = "node-b";
    hvd_secret_t secret = test_secret();
    char hex[HVD_SECRET_HEX_LEN + 1];
    hvd__secret_to_hex(&secret, hex);
    char *cmd[] = {"env", NULL};
    result_t r;
    launch((hvd_launch_config_t){.plan = &p.plan,
                                 .command = cmd,
                                 .exports = &exports,
                                 .secret = &secret,
                                 .verbose = 1,
                                 .kill_grace_ms = 1000},
           &r);
    assert_int_equal(r.st, 0);
    assert_int_equal(r.code, 0);
    const char *expect[2][12] = {
        {"HOROVOD_RANK=0", "HOROVOD_SIZE=2", "HOROVOD_LOCAL_RANK=0", "HOROVOD_LOCAL_SIZE=2",
         "HOROVOD_CROSS_RANK=0", "HOROVOD_CROSS_SIZE=1", "HOROVOD_HOSTNAME=node-a",
         "PYTHONUNBUFFERED=1", "HVD_TEST_PLAIN=plain", "HVD_TEST_EXPORTED=exported",
         "HOROVOD_GLOO_RENDEZVOUS_PORT=1234", "HVD_TEST_QUOTED=a b'c"},
        {"HOROVOD_RANK=1", "HOROVOD_SIZE=2", "HOROVOD_LOCAL_RANK=0", "HOROVOD_LOCAL_SIZE=1",
         "HOROVOD_CROSS_RANK=1", "HOROVOD_CROSS_SIZE=2", "HOROVOD_HOSTNAME=node-b",
         "PYTHONUNBUFFERED=1", "HVD_TEST_PLAIN=plain", "HVD_TEST_EXPORTED=exported",
         "HOROVOD_GLOO_RENDEZVOUS_PORT=1234", "HVD_TEST_QUOTED=a b'c"}};
    for (int rank = 0; rank < 2; rank++) {
        char line[256];
        for (int i = 0; i < 12; i++) {
            snprintf(line, sizeof line, "\n[%d]<stdout>:%s\n", rank, expect[rank][i]);
            if (count_substr(r.out, line) != 1)
                fail_msg("rank %d: expected one \"%s\" in:\n%s", rank, expect[rank][i], r.out);
        }
        /* each variable once: the overridden values are gone, not shadowed */
        const char *once[] = {
            "HOROVOD_RANK=", "HOROVOD_SIZE=", "HOROVOD_HOSTNAME=", HVD_SECRET_ENV "="};
        for (int i = 0; i < 4; i++) {
            snprintf(line, sizeof line, "[%d]<stdout>:%s", rank, once[i]);
            assert_int_equal(count_substr(r.out, line), 1);
        }
        snprintf(line, sizeof line, "[%d]<stdout>:%s=%s\n", rank, HVD_SECRET_ENV, hex);
        assert_int_equal(count_substr(r.out, line), 1);
    }
    const char *never[] = {
        "OLDPWD=", "CUDA_VISIBLE_DEVICES", "BASH_FUNC_", "stale-secret", "=99\n", "inherited"};
    for (int i = 0; i < 6; i++)
        if (strstr(r.out, never[i]))
            fail_msg("\"%s\" reached a worker:\n%s", never[i], r.out);
    /* --verbose: the command with its variables, quoted, and never the secret */
    assert_non_null(strstr(r.out, "env HOROVOD_HOSTNAME=node-a HOROVOD_RANK=0 HOROVOD_SIZE=2 "
                                  "HOROVOD_LOCAL_RANK=0 HOROVOD_LOCAL_SIZE=2 "
                                  "HOROVOD_CROSS_RANK=0 HOROVOD_CROSS_SIZE=1 "
                                  "PYTHONUNBUFFERED=1 HVD_TEST_EXPORTED=exported "
                                  "HOROVOD_GLOO_RENDEZVOUS_PORT=1234 "
                                  "HVD_TEST_QUOTED='a b'\"'\"'c' env\n"));
    assert_non_null(strstr(r.out, "env HOROVOD_HOSTNAME=node-b HOROVOD_RANK=1 "));
    for (const char *l = r.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, "env ", 4) == 0) {
            const char *end = strchr(l, '\n');
            char *line = strndup(l, (size_t)(end - l));
            assert_null(strstr(line, hex));
            assert_null(strstr(line, HVD_SECRET_ENV));
            free(line);
        }
    assert_null(strstr(r.err, hex));
    result_free(&r);
    hvd__env_list_fini(&exports);
    const char *names[] = {"HOROVOD_RANK",   "HOROVOD_HOSTNAME",          HVD_SECRET_ENV,
                           "OLDPWD",         "CUDA_VISIBLE_DEVICES",      "BASH_FUNC_hvd%%",
                           "HVD_TEST_PLAIN", "MY_CUDA_VISIBLE_DEVICES_X", "HVD_TEST_EXPORTED"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

/* ---- output ---- */

static void test_tagged_output(void **state) {
    (void)state;
    /* Two ranks each print 300 lines of 3000 bytes as fast as they can, to stdout and
     * stderr: every console line is whole, tagged with its own rank, in order. */
    plan_t p;
    make_plan(&p, 2, "localhost");
    char *cmd[] = {"sh", "-c",
                   "awk -v r=\"$HOROVOD_RANK\" 'BEGIN { s = sprintf(\"%3000s\", \"\"); "
                   "gsub(/ /, \"x\", s); for (i = 0; i < 300; i++) { print r \"-\" i \"-\" s; "
                   "print r \"-\" i \"-\" s > \"/dev/stderr\" } }'",
                   NULL};
    result_t r;
    launch((hvd_launch_config_t){.plan = &p.plan, .command = cmd, .kill_grace_ms = 1000}, &r);
    assert_int_equal(r.st, 0);
    assert_int_equal(r.code, 0);
    char *xs = malloc(3001);
    memset(xs, 'x', 3000);
    xs[3000] = '\0';
    const char *texts[2] = {r.out, r.err};
    const char *tags[2] = {"stdout", "stderr"};
    for (int t = 0; t < 2; t++) {
        int next[2] = {0, 0};
        for (const char *l = texts[t]; *l;) {
            const char *end = strchr(l, '\n');
            assert_non_null(end);
            int rank, i, used = 0;
            char tag[8];
            if (sscanf(l, "[%d]<%6[a-z]>:%*d-%d-%n", &rank, tag, &i, &used) != 3 || used == 0)
                fail_msg("bad line: %.80s", l);
            assert_string_equal(tag, tags[t]);
            assert_true(rank == 0 || rank == 1);
            assert_int_equal(i, next[rank]++);
            assert_int_equal(end - (l + used), 3000);
            assert_memory_equal(l + used, xs, 3000);
            l = end + 1;
        }
        assert_int_equal(next[0], 300);
        assert_int_equal(next[1], 300);
    }
    free(xs);
    result_free(&r);
}

static void check_rank_files(const char *dir, const char *sub, int rank) {
    char path[512], expect[64];
    snprintf(path, sizeof path, "%s/%s/stdout", dir, sub);
    char *text = read_file(path);
    snprintf(expect, sizeof expect, "[%d]<stdout>:out %d\n", rank, rank);
    assert_string_equal(text, expect);
    free(text);
    snprintf(path, sizeof path, "%s/%s/stderr", dir, sub);
    text = read_file(path);
    snprintf(expect, sizeof expect, "[%d]<stderr>:err %d", rank, rank);
    assert_string_equal(text, expect);
    free(text);
}

static void test_output_files(void **state) {
    (void)state;
    char *dir = make_dir();
    char out_dir[256];
    snprintf(out_dir, sizeof out_dir, "%s/logs", dir);
    char *cmd[] = {"sh", "-c", "echo out $HOROVOD_RANK; printf \"err $HOROVOD_RANK\" >&2", NULL};
    plan_t p;
    make_plan(&p, 11, "localhost");
    result_t r;
    launch(
        (hvd_launch_config_t){
            .plan = &p.plan, .command = cmd, .output_dir = out_dir, .kill_grace_ms = 1000},
        &r);
    assert_int_equal(r.code, 0);
    /* the console gets the same lines */
    assert_non_null(strstr(r.out, "[10]<stdout>:out 10\n"));
    assert_non_null(strstr(r.err, "[7]<stderr>:err 7"));
    check_rank_files(out_dir, "rank.00", 0);
    check_rank_files(out_dir, "rank.05", 5);
    check_rank_files(out_dir, "rank.10", 10);
    result_free(&r);
    /* --prefix-output-with-timestamp: asctime()-style time before the tag */
    plan_t one;
    make_plan(&one, 1, "localhost");
    char *hi[] = {"echo", "hi", NULL};
    launch(
        (hvd_launch_config_t){
            .plan = &one.plan, .command = hi, .prefix_timestamp = 1, .kill_grace_ms = 1000},
        &r);
    char day[4], mon[4], rest[32];
    int mday, hh, mm, ss, year, used = 0;
    assert_int_equal(
        sscanf(r.out, "%3s %3s %d %d:%d:%d %d%n", day, mon, &mday, &hh, &mm, &ss, &year, &used), 7);
    assert_int_equal(used, 24);
    assert_true(year >= 2024 && mday >= 1 && mday <= 31);
    snprintf(rest, sizeof rest, "%s", r.out + used);
    assert_string_equal(rest, "[0]<stdout>:hi\n");
    result_free(&r);
    /* -np 1 works (Horovod's log10(0) crash) */
    make_plan(&p, 1, "localhost");
    launch(
        (hvd_launch_config_t){
            .plan = &p.plan, .command = cmd, .output_dir = out_dir, .kill_grace_ms = 1000},
        &r);
    assert_int_equal(r.code, 0);
    check_rank_files(out_dir, "rank.0", 0);
    result_free(&r);
    /* an output directory that cannot be made stops the launch before any rank starts */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/rank.0/stdout", out_dir);
    launch(
        (hvd_launch_config_t){
            .plan = &p.plan, .command = cmd, .output_dir = bad, .kill_grace_ms = 1000},
        &r);
    assert_int_equal(r.st, HVD_ERR_IO);
    assert_non_null(strstr(r.err, "cannot start rank 0"));
    result_free(&r);
    remove_dir(dir);
}

/* ---- failures ---- */

static int64_t realtime_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_failure_ends_job(void **state) {
    (void)state;
    char *dir = make_dir();
    char script[1024];
    snprintf(script, sizeof script,
             "cd %s || exit 99; "
             "if [ $HOROVOD_RANK = 1 ]; then "
             "  while [ $(ls | grep -c '^pid') -lt 2 ]; do sleep 0.05; done; "
             "  i=1; while [ $i -le 12 ]; do echo \"err line $i\" >&2; i=$((i+1)); done; "
             "  date +%%s%%N > failed_at; exit 3; "
             "fi; "
             "echo $$ > pid.$HOROVOD_RANK; exec sleep 60",
             dir);
    char *cmd[] = {"sh", "-c", script, NULL};
    plan_t p;
    make_plan(&p, 3, "localhost");
    result_t r;
    launch((hvd_launch_config_t){.plan = &p.plan, .command = cmd, .kill_grace_ms = 5000}, &r);
    int64_t ended = realtime_ms();
    char path[256];
    snprintf(path, sizeof path, "%s/failed_at", dir);
    char *failed_at = read_file(path);
    int64_t failed_ms = strtoll(failed_at, NULL, 10) / 1000000;
    free(failed_at);
    /* the others obey SIGTERM: the job ends well within 2 s of the failure */
    if (ended - failed_ms > 2000)
        fail_msg("the job ended %lld ms after the failure", (long long)(ended - failed_ms));
    assert_int_equal(r.st, 0);
    assert_int_equal(r.code, 3);
    assert_non_null(strstr(r.err, "Process 1 exit with status code 3.\n"));
    assert_non_null(strstr(r.err, "Terminating remaining workers after failure of Process 1.\n"));
    assert_null(strstr(r.err, "Process 0 exit"));
    assert_null(strstr(r.err, "Process 2 exit"));
    const char *report = strstr(r.err, "horovodrun: rank 1 (host localhost) was the first to "
                                       "fail: exit code 3.\n");
    assert_non_null(report);
    /* the last 10 stderr lines, oldest first */
    for (int i = 3; i <= 12; i++) {
        char line[64];
        snprintf(line, sizeof line, "    err line %d\n", i);
        assert_non_null(strstr(report, line));
    }
    assert_null(strstr(report, "    err line 2\n"));
    assert_true(strstr(report, "err line 3\n") < strstr(report, "err line 12\n"));
    pid_t pids[4];
    int n = read_pids(dir, pids, 2);
    for (int i = 0; i < n; i++)
        assert_false(alive(pids[i]));
    result_free(&r);
    remove_dir(dir);
}

static void test_exit_codes(void **state) {
    (void)state;
    plan_t p;
    make_plan(&p, 3, "localhost");
    result_t r;
    /* all succeed */
    char *ok[] = {"true", NULL};
    launch((hvd_launch_config_t){.plan = &p.plan, .command = ok, .kill_grace_ms = 1000}, &r);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.err, "");
    result_free(&r);
    /* one exits 0 early: the others go on and finish */
    char *early[] = {"sh", "-c", "[ $HOROVOD_RANK = 0 ] && exit 0; sleep 0.5; echo done", NULL};
    launch((hvd_launch_config_t){.plan = &p.plan, .command = early, .kill_grace_ms = 1000}, &r);
    assert_int_equal(r.code, 0);
    assert_int_equal(count_substr(r.out, ">:done\n"), 2);
    result_free(&r);
    /* killed by a signal: 128 + 9, named */
    char *killed[] = {"sh", "-c", "[ $HOROVOD_RANK = 2 ] && kill -9 $$; exec sleep 60", NULL};
    launch((hvd_launch_config_t){.plan = &p.plan, .command = killed, .kill_grace_ms = 1000}, &r);
    assert_int_equal(r.code, 137);
    assert_non_null(strstr(r.err, "Process 2 exit with status code 137.\n"));
    assert_non_null(strstr(r.err, "rank 2 (host localhost) was the first to fail: killed by "
                                  "signal 9 (SIGKILL).\n"));
    assert_non_null(strstr(r.err, "rank 2 wrote nothing to stderr"));
    assert_true(r.ms < 10000);
    result_free(&r);
    /* a command that cannot be executed */
    char *missing[] = {"/nonexistent/hvd-launch-test", NULL};
    launch((hvd_launch_config_t){.plan = &p.plan, .command = missing, .kill_grace_ms = 1000}, &r);
    assert_int_equal(r.code, 127);
    assert_non_null(strstr(r.err, "    horovodrun: cannot execute '/nonexistent/hvd-launch-test': "
                                  "No such file or directory\n"));
    result_free(&r);
    /* a single rank failing: no one else to terminate */
    plan_t one;
    make_plan(&one, 1, "localhost");
    char *fail1[] = {"sh", "-c", "echo bye >&2; exit 42", NULL};
    launch((hvd_launch_config_t){.plan = &one.plan, .command = fail1, .kill_grace_ms = 1000}, &r);
    assert_int_equal(r.code, 42);
    assert_null(strstr(r.err, "Terminating remaining"));
    assert_non_null(strstr(r.err, "    bye\n"));
    result_free(&r);
    /* nothing to launch */
    plan_t none = {.plan = {.slots = NULL, .count = 0}};
    launch((hvd_launch_config_t){.plan = &none.plan, .command = ok}, &r);
    assert_int_equal(r.st, HVD_ERR_INVALID_ARG);
    result_free(&r);
}

static void test_stubborn_rank(void **state) {
    (void)state;
    /* a rank that ignores SIGTERM is SIGKILLed after the grace period */
    char *dir = make_dir();
    char script[512];
    snprintf(script, sizeof script,
             "cd %s; if [ $HOROVOD_RANK = 0 ]; then "
             "while [ ! -e pid.1 ]; do sleep 0.05; done; exit 1; fi; "
             "trap '' TERM; echo $$ > pid.1; while :; do sleep 0.05; done",
             dir);
    char *cmd[] = {"sh", "-c", script, NULL};
    plan_t p;
    make_plan(&p, 2, "localhost");
    result_t r;
    launch((hvd_launch_config_t){.plan = &p.plan, .command = cmd, .kill_grace_ms = 400}, &r);
    assert_int_equal(r.code, 1);
    pid_t pid;
    read_pids(dir, &pid, 1);
    assert_false(alive(pid));
    result_free(&r);
    remove_dir(dir);
}

/* ---- the launcher interrupted or killed ---- */

/* Fork a launcher of 3 ranks, each a tree (two children, one orphan) that records its pids and
 * prints "ready"; wait until all are ready and their output has streamed through; then
 * send sig. Returns the launcher's wait status. */
static int signal_launcher(int sig, char *dir) {
    char script[1024];
    snprintf(script, sizeof script,
             "cd %s; r=$HOROVOD_RANK; sleep 100 & echo $! > pid.$r.1; "
             "(sleep 100 & echo $! > pid.$r.2); echo $$ > pid.$r.0; echo ready; wait",
             dir);
    char out_path[256];
    snprintf(out_path, sizeof out_path, "%s/console", dir);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        char *cmd[] = {"sh", "-c", script, NULL};
        plan_t p;
        make_plan(&p, 3, "localhost");
        hvd_launch_config_t cfg = {
            .plan = &p.plan, .command = cmd, .kill_grace_ms = 1000, .out_fd = out, .err_fd = out};
        int code = 200;
        hvd_status_t st = hvd__launch_run(&cfg, &code);
        _exit(st == HVD_OK ? code : 201);
    }
    int64_t until = hvd__clock_now_ms() + DEADLINE_MS;
    for (;;) {
        char *console = read_file(out_path);
        int ready = count_substr(console, ">:ready\n");
        free(console);
        if (ready == 3 && count_pid_files(dir) == 9)
            break;
        if (hvd__clock_now_ms() > until)
            fail_msg("the ranks did not all start and print");
        hvd__clock_sleep_ms(20);
    }
    kill(child, sig);
    int status = 0;
    until = hvd__clock_now_ms() + DEADLINE_MS;
    while (waitpid(child, &status, WNOHANG) == 0) {
        if (hvd__clock_now_ms() > until) {
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            fail_msg("the launcher did not end after signal %d", sig);
        }
        hvd__clock_sleep_ms(10);
    }
    return status;
}

static void check_tree_gone(const char *dir, int within_ms) {
    pid_t pids[16];
    int n = read_pids(dir, pids, 9);
    for (int i = 0; i < n; i++)
        if (!wait_dead(pids[i], within_ms))
            fail_msg("pid %d of a rank's tree survived", (int)pids[i]);
}

static void test_launcher_sigterm_sigint(void **state) {
    (void)state;
    const struct {
        int sig, code;
        const char *name;
    } cases[] = {{SIGTERM, 143, "SIGTERM"}, {SIGINT, 130, "SIGINT"}};
    for (size_t i = 0; i < 2; i++) {
        char *dir = make_dir();
        int status = signal_launcher(cases[i].sig, dir);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), cases[i].code);
        /* the launcher returned only after every tree was gone */
        check_tree_gone(dir, 1000);
        char path[256], expect[64];
        snprintf(path, sizeof path, "%s/console", dir);
        char *console = read_file(path);
        snprintf(expect, sizeof expect, "received %s, terminating all ranks", cases[i].name);
        assert_non_null(strstr(console, expect));
        assert_null(strstr(console, "was the first to fail"));
        free(console);
        remove_dir(dir);
    }
}

static void test_launcher_sigkill(void **state) {
    (void)state;
    /* no orphans: each middleman sees its control socket close and ends its tree */
    char *dir = make_dir();
    int status = signal_launcher(SIGKILL, dir);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    check_tree_gone(dir, 15000);
    remove_dir(dir);
}

/* ---- scale ---- */

static void test_many_ranks_low_fd_limit(void **state) {
    (void)state;
    /* 150 ranks need about 450 fds in the launcher; with a soft limit of 100 it raises its
     * own, and the ranks still start with 100. */
    int nranks = 150;
    char *dir = make_dir();
    char out_path[256];
    snprintf(out_path, sizeof out_path, "%s/console", dir);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = 100;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(202);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        char *cmd[] = {"sh", "-c", "ulimit -n", NULL};
        static plan_t p;
        make_plan(&p, nranks, "localhost");
        hvd_launch_config_t cfg = {
            .plan = &p.plan, .command = cmd, .kill_grace_ms = 1000, .out_fd = out, .err_fd = out};
        int code = 200;
        hvd_status_t st = hvd__launch_run(&cfg, &code);
        getrlimit(RLIMIT_NOFILE, &rl);
        _exit(st != HVD_OK ? 201 : rl.rlim_cur != 100 ? 203 : code);
    }
    int status = 0;
    int64_t until = hvd__clock_now_ms() + 90000;
    while (waitpid(child, &status, WNOHANG) == 0) {
        if (hvd__clock_now_ms() > until) {
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            fail_msg("%d ranks did not finish", nranks);
        }
        hvd__clock_sleep_ms(20);
    }
    char *console = read_file(out_path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("launcher ended with status 0x%x:\n%s", status, console);
    for (int i = 0; i < nranks; i++) {
        char line[64];
        snprintf(line, sizeof line, "[%d]<stdout>:100\n", i);
        if (!strstr(console, line))
            fail_msg("rank %d did not report its limit:\n%s", i, console);
    }
    free(console);
    remove_dir(dir);
}

/* ---- remote hosts, through a stand-in for ssh ------------------------------------------------ */

/* A directory holding an `ssh` that runs the remote command here (its last argument, the host
 * the one before), logging each host it is asked for; hosts named down* fail as ssh does when
 * sshd is not there. It goes first in PATH for the test's duration. */
static char *fake_ssh(char **old_path_p) {
    char *dir = make_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/ssh", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "#!/bin/sh\n"
            "for a; do host=$cmd; cmd=$a; done\n"
            "echo \"$host\" >> %s/sessions\n"
            "case $host in down*) echo \"ssh: connect to host $host port 22: Connection "
            "refused\" >&2; exit 255;; esac\n"
            "exec sh -c \"$cmd\"\n",
            dir);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
    const char *old = getenv("PATH");
    *old_path_p = strdup(old ? old : "/usr/bin:/bin");
    char *new_path = malloc(strlen(dir) + strlen(*old_path_p) + 2);
    sprintf(new_path, "%s:%s", dir, *old_path_p);
    setenv("PATH", new_path, 1);
    free(new_path);
    return dir;
}

static void fake_ssh_done(char *dir, char *old_path) {
    setenv("PATH", old_path, 1);
    free(old_path);
    remove_dir(dir);
}

/* rank 0 here, then hosts[i] for each further rank */
static void make_remote_plan(plan_t *p, int n, const char *const *hosts, unsigned char *remote) {
    make_plan(p, n, "localhost");
    for (int i = 1; i < n; i++) {
        p->slots[i].host = hosts[i];
        remote[i] = 1;
    }
    remote[0] = 0;
}

static hvd_launch_config_t remote_cfg(plan_t *p, char **cmd, const unsigned char *remote) {
    return (hvd_launch_config_t){.plan = &p->plan,
                                 .command = cmd,
                                 .kill_grace_ms = 2000,
                                 .remote = remote,
                                 .remote_exe = HVD_HOROVODRUN,
                                 .cwd = "/"};
}

/* Every rank of a remote host runs through one ssh session, with its own tagged output and
 * variables; a host's ranks need not be next to each other in the plan. */
static void test_remote_one_session_per_host(void **state) {
    (void)state;
    char *old_path;
    char *dir = fake_ssh(&old_path);
    const char *hosts[] = {"localhost", "hA", "hB", "hA", "hA", "hB"};
    unsigned char remote[6];
    plan_t p;
    make_remote_plan(&p, 6, hosts, remote);
    char *cmd[] = {"sh", "-c",
                   "echo \"out $HOROVOD_RANK on $HOROVOD_HOSTNAME in $(pwd)\"; "
                   "echo \"err $HOROVOD_RANK\" >&2",
                   NULL};
    result_t r;
    launch(remote_cfg(&p, cmd, remote), &r);
    assert_int_equal(r.st, 0);
    assert_int_equal(r.code, 0);
    for (int i = 0; i < 6; i++) {
        char line[128];
        /* remote ranks run in the spec's directory, the local one where the launcher is */
        snprintf(line, sizeof line, "[%d]<stdout>:out %d on %s in %s", i, i, hosts[i],
                 i ? "/\n" : "");
        if (!strstr(r.out, line))
            fail_msg("no [%s] in:\n%s", line, r.out);
        snprintf(line, sizeof line, "[%d]<stderr>:err %d\n", i, i);
        if (!strstr(r.err, line))
            fail_msg("no [%s] in:\n%s", line, r.err);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/sessions", dir);
    char *sessions = read_file(path);
    /* one session each, in whichever order their ssh got going */
    if (strcmp(sessions, "hA\nhB\n") != 0 && strcmp(sessions, "hB\nhA\n") != 0)
        fail_msg("ssh sessions: %s", sessions);
    free(sessions);
    result_free(&r);

    /* a host with more ranks than a session takes gets several sessions */
    unlink(path);
    hvd_launch_config_t cfg = remote_cfg(&p, cmd, remote);
    cfg.session_ranks = 2;
    launch(cfg, &r);
    assert_int_equal(r.code, 0);
    for (int i = 0; i < 6; i++) {
        char line[128];
        snprintf(line, sizeof line, "[%d]<stdout>:out %d on %s in ", i, i, hosts[i]);
        if (!strstr(r.out, line))
            fail_msg("no [%s] in:\n%s", line, r.out);
    }
    sessions = read_file(path);
    size_t na = 0, nb = 0;
    for (const char *q = sessions; (q = strchr(q, 'h')) != NULL; q += 2) {
        if (q[1] == 'A')
            na++;
        else
            nb++;
    }
    if (na != 2 || nb != 1) /* hA's three ranks in sessions of 2 and 1, hB's two in one */
        fail_msg("ssh sessions: %s", sessions);
    free(sessions);
    result_free(&r);
    fake_ssh_done(dir, old_path);
}

/* A remote rank's failure ends the job at once (its host's other ranks and the rest stopped),
 * names it with its stderr; an ssh that cannot connect fails its ranks with ssh's 255 and
 * message. */
static void test_remote_failures(void **state) {
    (void)state;
    char *old_path;
    char *dir = fake_ssh(&old_path);
    const char *hosts[] = {"localhost", "hA", "hA", "hA"};
    unsigned char remote[4];
    plan_t p;
    make_remote_plan(&p, 4, hosts, remote);
    char *cmd[] = {"sh", "-c",
                   "if [ $HOROVOD_RANK = 2 ]; then sleep 0.3; echo 'rank 2 is out' >&2; exit 7; "
                   "fi; exec sleep 60",
                   NULL};
    result_t r;
    launch(remote_cfg(&p, cmd, remote), &r);
    assert_int_equal(r.st, 0);
    assert_int_equal(r.code, 7);
    if (r.ms > 15000)
        fail_msg("the job took %lld ms to end after rank 2 failed", (long long)r.ms);
    const char *report =
        strstr(r.err, "horovodrun: rank 2 (host hA) was the first to fail: exit code 7.\n");
    if (!report || !strstr(report, "    rank 2 is out\n"))
        fail_msg("no report of rank 2:\n%s", r.err);
    assert_null(strstr(r.err, "Process 1 exit"));
    result_free(&r);

    const char *down[] = {"localhost", "hA", "downB", "downB"};
    make_remote_plan(&p, 4, down, remote);
    char *quick[] = {"sh", "-c", "sleep 60", NULL};
    launch(remote_cfg(&p, quick, remote), &r);
    assert_int_equal(r.code, 255);
    report = strstr(r.err, "horovodrun: rank 2 (host downB) was the first to fail: exit code 255.");
    if (!report || !strstr(report, "port 22: Connection refused"))
        fail_msg("no report of the ssh failure:\n%s", r.err);
    result_free(&r);
    fake_ssh_done(dir, old_path);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_contract),
        cmocka_unit_test(test_tagged_output),
        cmocka_unit_test(test_output_files),
        cmocka_unit_test(test_failure_ends_job),
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_stubborn_rank),
        cmocka_unit_test(test_launcher_sigterm_sigint),
        cmocka_unit_test(test_launcher_sigkill),
        cmocka_unit_test(test_many_ranks_low_fd_limit),
        cmocka_unit_test(test_remote_one_session_per_host),
        cmocka_unit_test(test_remote_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
