/* The worker side of elastic mode against a fake driver: this process runs the rendezvous
 * store in-process (hvd__kv_server_start) and writes the driver's keys straight into it,
 * while worker processes (this executable again, run with --child) train under
 * hvd_elastic_run with the environment horovodrun gives elastic workers. Each worker is its
 * own host ("h<i>", local rank 0); it adds the same value on every rank at every step and
 * checks at the end that its accumulator equals the closed form, so progress lost or counted
 * twice fails it. Scenarios:
 *   kill       a worker is SIGKILLed mid-training; the driver PUTs both abort keys of round
 *              0, collects the survivors' ready records ("failure") and assigns round 1
 *              (sync=1); the survivors finish with the exact result after one reset.
 *   hosts      a `hosts` event: every rank gets HVD_ERR_HOSTS_UPDATED at the same commit,
 *              reports "update", is re-assigned with sync=0 and resumes at the step it
 *              committed (no progress lost).
 *   removed    after a `hosts` event one slot is assigned `removed`: its hvd_elastic_run
 *              returns HVD_ERR_SHUT_DOWN naming the slot, it exits 0, the others finish.
 *   computing  the abort arrives while every rank computes (no collective running, every
 *              peer alive): the next collective fails at once with the driver's text.
 *   stopped    a SIGSTOPped worker: the survivors block in an allreduce that could wait
 *              HOROVOD_GLOO_TIMEOUT_SECONDS=60; the driver's abort key makes it fail within
 *              a few seconds (asserted < 10 s); a `stop` assignment then ends them with the
 *              driver's message and exit 0.
 *   checkin    round 0 fails as it forms (a worker never starts): init.r0/abort makes the
 *              others' hvd_init fail at once with the driver's text; calling it again joins
 *              round 1.
 *   heartbeat  every worker PUTs elastic_alive/<slot> = its pid, again after the key is
 *              removed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/params.h"
#include "crypto/secret.h"
#include "rendezvous/elastic_msg.h"
#include "runner/rendezvous/kv_server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_CHILDREN 4

static char self_exe[4096];
static hvd_secret_t secret;
static hvd_kv_server_t *server;
static hvd_kv_store_t *store;
static char dir[256];
static pid_t children[MAX_CHILDREN];
static int nchildren;

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ==== the worker (--child) ================================================================ */

typedef struct {
    long long steps, commit_every;
    int sleep_ms;
    hvd_elastic_state_t *state;
    int64_t step;
    double acc;
} child_t;

static hvd_status_t child_reset(void *user) {
    (void)user;
    printf("init rank %d size %d\n", hvd_rank(), hvd_size());
    return HVD_OK;
}

static hvd_status_t child_failed(const child_t *c, hvd_status_t st, const char *what) {
    printf("failed %s step %lld wall %lld in %s: %s\n", hvd_status_str(st), (long long)c->step,
           (long long)wall_ms(), what, hvd_last_error());
    return st;
}

static hvd_status_t child_train(hvd_elastic_state_t *state, void *arg) {
    child_t *c = arg;
    printf("enter step %lld resets %d\n", (long long)c->step, hvd_elastic_resets(state));
    while (c->step < c->steps) {
        double v = (double)c->step, r = -1;
        hvd_status_t st = hvd_allreduce(&v, &r, 1, HVD_FLOAT64, HVD_AVERAGE);
        if (st != HVD_OK)
            return child_failed(c, st, "allreduce");
        if (r != (double)c->step) {
            printf("wrong allreduce step %lld gave %.17g\n", (long long)c->step, r);
            return HVD_ERR_MISMATCH;
        }
        c->acc += r;
        c->step++;
        if (c->sleep_ms > 0)
            hvd__clock_sleep_ms(c->sleep_ms);
        if (c->step % c->commit_every == 0) {
            st = hvd_elastic_commit(state);
            if (st == HVD_ERR_HOSTS_UPDATED)
                printf("hosts_updated step %lld\n", (long long)c->step);
            if (st != HVD_OK)
                return child_failed(c, st, "commit");
            printf("commit step %lld\n", (long long)c->step);
        }
    }
    return HVD_OK;
}

static int child_main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    child_t c = {.steps = 40, .commit_every = 4};
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0)
            c.steps = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--commit-every") == 0)
            c.commit_every = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--sleep-ms") == 0)
            c.sleep_ms = atoi(argv[i + 1]);
    }
    hvd_status_t st;
    for (;;) {
        int64_t t0 = hvd__clock_now_ms();
        st = hvd_init();
        if (st == HVD_OK)
            break;
        printf("init_failed %s after %lld ms wall %lld: %s\n", hvd_status_str(st),
               (long long)(hvd__clock_now_ms() - t0), (long long)wall_ms(), hvd_last_error());
        if (st == HVD_ERR_SHUT_DOWN)
            return 0;
        if (st != HVD_ERR_PEER_LOST && st != HVD_ERR_TIMEOUT)
            return 3;
    }
    printf("init rank %d size %d\n", hvd_rank(), hvd_size());
    hvd_elastic_callbacks_t cb = {.reset = child_reset};
    if (hvd_elastic_state_create(&cb, &c.state) != HVD_OK ||
        hvd_elastic_state_add(c.state, "step", &c.step, 1, HVD_INT64) != HVD_OK ||
        hvd_elastic_state_add(c.state, "acc", &c.acc, 1, HVD_FLOAT64) != HVD_OK)
        return 3;
    st = hvd_elastic_run(c.state, child_train, &c);
    int resets = hvd_elastic_resets(c.state);
    hvd_elastic_state_destroy(c.state);
    if (st == HVD_ERR_SHUT_DOWN) {
        printf("shutdown %s\n", hvd_last_error());
        return 0;
    }
    if (st != HVD_OK) {
        printf("run_failed %s: %s\n", hvd_status_str(st), hvd_last_error());
        hvd_shutdown();
        return 3;
    }
    double want = (double)c.steps * (double)(c.steps - 1) / 2;
    printf("done step %lld acc %.17g resets %d%s\n", (long long)c.step, c.acc, resets,
           c.acc == want && c.step == c.steps ? "" : " WRONG");
    if (hvd_shutdown() != HVD_OK)
        return 3;
    return c.acc == want && c.step == c.steps ? 0 : 1;
}

/* ==== the fake driver ===================================================================== */

static int setup(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    hvd_kv_server_config_t cfg = {.bind_addr = "127.0.0.1", .secret = &secret};
    assert_int_equal(hvd__kv_server_start(&cfg, &server), HVD_OK);
    store = hvd__kv_server_store(server);
    snprintf(dir, sizeof dir, "%s/hvd-elastic-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
    nchildren = 0;
    return 0;
}

static void kill_children(void) {
    for (int i = 0; i < nchildren; i++)
        if (children[i] > 0) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
}

static int teardown(void **state) {
    (void)state;
    kill_children(); /* after a failed assertion: nothing may outlive the test */
    hvd__kv_server_stop(server);
    server = NULL;
    for (int i = 0; i < MAX_CHILDREN; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/child%d.out", dir, i);
        unlink(path);
    }
    rmdir(dir);
    return 0;
}

/* Start worker i of a round-0 world of size n (host h<i>, local rank 0, cross rank i) with
 * its output in dir/child<i>.out. extra_env: more NAME=value entries (NULL-terminated). */
static void start_child(int i, int n, const char *const *args, const char *const *extra_env) {
    static char vars[16][128];
    char hex[HVD_SECRET_HEX_LEN + 1];
    hvd__secret_to_hex(&secret, hex);
    int k = 0;
    snprintf(vars[k++], 128, "HOROVOD_RANK=%d", i);
    snprintf(vars[k++], 128, "HOROVOD_SIZE=%d", n);
    snprintf(vars[k++], 128, "HOROVOD_LOCAL_RANK=0");
    snprintf(vars[k++], 128, "HOROVOD_LOCAL_SIZE=1");
    snprintf(vars[k++], 128, "HOROVOD_CROSS_RANK=%d", i);
    snprintf(vars[k++], 128, "HOROVOD_CROSS_SIZE=%d", n);
    snprintf(vars[k++], 128, "HOROVOD_HOSTNAME=h%d", i);
    snprintf(vars[k++], 128, "HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1");
    snprintf(vars[k++], 128, "HOROVOD_GLOO_RENDEZVOUS_PORT=%d", hvd__kv_server_port(server));
    snprintf(vars[k++], 128, "%s=%s", HVD_SECRET_ENV, hex);
    snprintf(vars[k++], 128, "HOROVOD_ELASTIC=1");
    snprintf(vars[k++], 128, "HOROVOD_ELASTIC_ROUND=0");
    snprintf(vars[k++], 128, "HOROVOD_ELASTIC_TIMEOUT=20");
    /* every environment entry of this process except HOROVOD_* ones, then ours */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char **envp = calloc(nenv + 32, sizeof *envp);
    assert_non_null(envp);
    size_t e = 0;
    for (size_t j = 0; j < nenv; j++)
        if (strncmp(environ[j], "HOROVOD_", 8) != 0 &&
            strncmp(environ[j], HVD_SECRET_ENV, strlen(HVD_SECRET_ENV)) != 0)
            envp[e++] = environ[j];
    for (int j = 0; j < k; j++)
        envp[e++] = vars[j];
    int timeout_set = 0;
    for (; extra_env && *extra_env; extra_env++) {
        timeout_set |= strncmp(*extra_env, "HOROVOD_GLOO_TIMEOUT_SECONDS=", 29) == 0;
        envp[e++] = (char *)*extra_env;
    }
    if (!timeout_set)
        envp[e++] = "HOROVOD_GLOO_TIMEOUT_SECONDS=20";
    const char *argv[16] = {"test_elastic_recovery", "--child"};
    int a = 2;
    for (; args && *args && a < 15; args++)
        argv[a++] = *args;
    argv[a] = NULL;
    char out[512];
    snprintf(out, sizeof out, "%s/child%d.out", dir, i);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        execve(self_exe, (char *const *)argv, envp);
        _exit(127);
    }
    free(envp);
    explicit_bzero(hex, sizeof hex);
    children[i] = pid;
    if (i >= nchildren)
        nchildren = i + 1;
}

static char *child_output(int i) {
    char path[512];
    snprintf(path, sizeof path, "%s/child%d.out", dir, i);
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* The line of child i's output that contains needle (from its start, newline excluded)
 * into line, or 0 when there is none yet. The nth match (0: the first). */
static int find_line(int i, const char *needle, int nth, char *line, size_t line_size) {
    char *out = child_output(i);
    int found = 0;
    for (char *p = out; (p = strstr(p, needle)) != NULL; p++) {
        char *start = p;
        while (start > out && start[-1] != '\n')
            start--;
        if (nth-- > 0) {
            p = strchr(p, '\n');
            if (!p)
                break;
            continue;
        }
        size_t len = strcspn(start, "\n");
        if (len >= line_size)
            len = line_size - 1;
        memcpy(line, start, len);
        line[len] = '\0';
        found = 1;
        break;
    }
    free(out);
    return found;
}

static void dump_children(void) {
    for (int i = 0; i < nchildren; i++) {
        char *out = child_output(i);
        print_message("---- child %d:\n%s\n", i, out);
        free(out);
    }
}

/* Wait (polling the file, bounded) until child i printed a line containing needle. */
static void wait_line(int i, const char *needle, int timeout_ms, char *line, size_t line_size) {
    int64_t deadline = hvd__clock_deadline_ms(timeout_ms);
    char scratch[1024];
    if (!line) {
        line = scratch;
        line_size = sizeof scratch;
    }
    while (!find_line(i, needle, 0, line, line_size)) {
        if (hvd__clock_remaining_ms(deadline) == 0) {
            dump_children();
            fail_msg("child %d printed no line with '%s' within %d ms", i, needle, timeout_ms);
        }
        hvd__clock_sleep_ms(20);
    }
}

/* Wait for child i to exit (bounded); returns its wait status. */
static int wait_exit(int i, int timeout_ms) {
    int64_t deadline = hvd__clock_deadline_ms(timeout_ms);
    for (;;) {
        int status;
        pid_t r = waitpid(children[i], &status, WNOHANG);
        if (r == children[i]) {
            children[i] = 0;
            return status;
        }
        if (hvd__clock_remaining_ms(deadline) == 0) {
            dump_children();
            fail_msg("child %d did not exit within %d ms", i, timeout_ms);
        }
        hvd__clock_sleep_ms(20);
    }
}

static void expect_exit_0(int i) {
    int status = wait_exit(i, 30000);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        dump_children();
        fail_msg("child %d ended with status 0x%x, want exit 0", i, status);
    }
}

static void put(const char *scope, const char *key, const char *value) {
    assert_int_equal(hvd__kv_store_put(store, scope, key, value, strlen(value)), HVD_OK);
}

/* The driver ends a round after a failure: both abort keys of round at once. */
static void abort_round(int round, const char *text) {
    char scope[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_INIT, round, scope);
    put(scope, HVD_ELASTIC_ABORT_KEY, text);
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_EVENTS, round, scope);
    put(scope, HVD_ELASTIC_ABORT_KEY, text);
}

/* Wait for the ready records of the n slots h0..h<n-1> in round, each want. */
static void expect_ready(int round, int n, const char *want) {
    char scope[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_READY, round, scope);
    if (hvd__kv_store_wait(store, scope, NULL, (size_t)n, hvd__clock_deadline_ms(20000)) !=
        HVD_OK) {
        dump_children();
        fail_msg("no %d ready records in %s: %s", n, scope, hvd_last_error());
    }
    for (int i = 0; i < n; i++) {
        char slot[HVD_ELASTIC_NAME_MAX], host[16];
        snprintf(host, sizeof host, "h%d", i);
        assert_int_equal(hvd__elastic_msg_slot(host, 0, slot), HVD_OK);
        uint8_t *v;
        size_t len;
        assert_int_equal(hvd__kv_store_get(store, scope, slot, &v, &len), HVD_OK);
        hvd_elastic_ready_t r, w;
        assert_int_equal(hvd__elastic_msg_ready_parse(want, strlen(want), &w), HVD_OK);
        assert_int_equal(hvd__elastic_msg_ready_parse((const char *)v, len, &r), HVD_OK);
        assert_int_equal(r, w);
        free(v);
    }
}

/* Start round: clear the store (as the driver does) and PUT each slot h<i>:0 its
 * assignment: removed when removed[i], else rank i of n (one per host). */
static void assign_round(int round, int nslots, int n, int sync, const int *removed) {
    assert_int_equal(hvd__kv_store_reset(store, NULL, NULL, 0), HVD_OK);
    char scope[HVD_ELASTIC_NAME_MAX];
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_ASSIGN, round, scope);
    for (int i = 0, rank = 0; i < nslots; i++) {
        hvd_elastic_assign_t a = {.verdict = HVD_ELASTIC_ASSIGNED,
                                  .rank = rank,
                                  .size = n,
                                  .local_rank = 0,
                                  .local_size = 1,
                                  .cross_rank = rank,
                                  .cross_size = n,
                                  .sync = sync};
        if (removed && removed[i])
            a.verdict = HVD_ELASTIC_REMOVED;
        else
            rank++;
        char value[HVD_ELASTIC_VALUE_MAX + 1], slot[HVD_ELASTIC_NAME_MAX], host[16];
        assert_true(hvd__elastic_msg_assign_format(&a, value, sizeof value) > 0);
        snprintf(host, sizeof host, "h%d", i);
        assert_int_equal(hvd__elastic_msg_slot(host, 0, slot), HVD_OK);
        put(scope, slot, value);
    }
}

static long long field(const char *line, const char *name) {
    const char *p = strstr(line, name);
    if (!p)
        fail_msg("no '%s' in '%s'", name, line);
    return atoll(p + strlen(name));
}

/* a: a worker is SIGKILLed mid-training */
static void test_kill(void **state) {
    (void)state;
    const char *args[] = {"--steps", "100", "--commit-every", "4", "--sleep-ms", "20", NULL};
    for (int i = 0; i < 3; i++)
        start_child(i, 3, args, NULL);
    wait_line(0, "commit step 12", 20000, NULL, 0);
    kill(children[2], SIGKILL);
    int status = wait_exit(2, 5000);
    assert_true(WIFSIGNALED(status));
    abort_round(0, "rank 2 (host h2, local rank 0) failed: killed by signal 9");
    expect_ready(0, 2, "failure");
    assign_round(1, 2, 2, 1, NULL);
    expect_exit_0(0);
    expect_exit_0(1);
    char line[1024];
    wait_line(0, "done step 100 acc 4950 resets 1", 1000, line, sizeof line);
    wait_line(1, "done step 100 acc 4950 resets 1", 1000, NULL, 0);
    wait_line(1, "init rank 1 size 2", 1000, NULL, 0);
}

/* b: a hosts event: every rank re-initialises at the same commit and loses nothing */
static void test_hosts_updated(void **state) {
    (void)state;
    const char *args[] = {"--steps", "80", "--commit-every", "4", "--sleep-ms", "20", NULL};
    for (int i = 0; i < 2; i++)
        start_child(i, 2, args, NULL);
    wait_line(0, "commit step 8", 20000, NULL, 0);
    put("elastic_ev.r0", HVD_ELASTIC_HOSTS_KEY, "added");
    expect_ready(0, 2, "update");
    char line[2][1024];
    long long at[2];
    for (int i = 0; i < 2; i++) {
        wait_line(i, "hosts_updated step ", 1000, line[i], sizeof line[i]);
        at[i] = field(line[i], "hosts_updated step ");
    }
    assert_int_equal(at[0], at[1]); /* the same commit on every rank */
    assert_int_equal(at[0] % 4, 0);
    assign_round(1, 2, 2, 0, NULL);
    expect_exit_0(0);
    expect_exit_0(1);
    for (int i = 0; i < 2; i++) {
        char enter[1024];
        /* the second entry into the training function resumes where the commit was */
        int64_t deadline = hvd__clock_deadline_ms(1000);
        while (!find_line(i, "enter step ", 1, enter, sizeof enter))
            if (hvd__clock_remaining_ms(deadline) == 0)
                fail_msg("child %d never re-entered training", i);
        assert_int_equal(field(enter, "enter step "), at[i]);
        assert_int_equal(field(enter, "resets "), 1);
        wait_line(i, "done step 80 acc 3160 resets 1", 1000, NULL, 0);
        /* no failure on the way */
        assert_false(find_line(i, "failed PEER_LOST", 0, enter, sizeof enter));
    }
}

/* c: a slot removed from the job */
static void test_removed(void **state) {
    (void)state;
    const char *args[] = {"--steps", "60", "--commit-every", "4", "--sleep-ms", "20", NULL};
    for (int i = 0; i < 3; i++)
        start_child(i, 3, args, NULL);
    wait_line(0, "commit step 8", 20000, NULL, 0);
    put("elastic_ev.r0", HVD_ELASTIC_HOSTS_KEY, "removed");
    expect_ready(0, 3, "update");
    int removed[3] = {0, 1, 0}; /* h1 goes; h2 becomes rank 1 */
    assign_round(1, 3, 2, 0, removed);
    expect_exit_0(1);
    char line[1024];
    wait_line(1, "shutdown ", 1000, line, sizeof line);
    assert_non_null(strstr(line, "(host h1, local rank 0) was removed from the elastic job"));
    expect_exit_0(0);
    expect_exit_0(2);
    wait_line(0, "done step 60 acc 1770 resets 1", 1000, NULL, 0);
    wait_line(2, "init rank 1 size 2", 1000, NULL, 0);
}

/* d: a stopped worker; the driver's abort ends the survivors' wait at once */
static void test_stopped_worker(void **state) {
    (void)state;
    const char *args[] = {"--steps", "400", "--commit-every", "4", "--sleep-ms", "10", NULL};
    const char *env[] = {"HOROVOD_GLOO_TIMEOUT_SECONDS=60", NULL};
    for (int i = 0; i < 3; i++)
        start_child(i, 3, args, env);
    wait_line(0, "commit step 8", 20000, NULL, 0);
    kill(children[2], SIGSTOP);
    hvd__clock_sleep_ms(500); /* the survivors are now blocked in an allreduce (not asserted) */
    int64_t t_abort = wall_ms();
    abort_round(0, "rank 2 (host h2, local rank 0) sent no heartbeat for 60 s");
    expect_ready(0, 2, "failure");
    for (int i = 0; i < 2; i++) {
        char line[1024];
        wait_line(i, "failed ", 1000, line, sizeof line);
        /* not before the abort (the survivors really waited for the stopped peer), and
         * long before the 60 s its silence would take to time out */
        long long took = field(line, " wall ") - t_abort;
        if (took < 0 || took > 10000)
            fail_msg("child %d's collective failed %lld ms after the abort: %s", i, took, line);
        assert_non_null(strstr(line, "the elastic driver ended round 0"));
        assert_non_null(strstr(line, "sent no heartbeat for 60 s"));
    }
    kill(children[2], SIGKILL); /* as the driver kills a silent worker */
    wait_exit(2, 5000);
    hvd_elastic_assign_t stop = {.verdict = HVD_ELASTIC_STOP};
    snprintf(stop.message, sizeof stop.message, "the job ends here");
    char value[HVD_ELASTIC_VALUE_MAX + 1];
    assert_true(hvd__elastic_msg_assign_format(&stop, value, sizeof value) > 0);
    assert_int_equal(hvd__kv_store_reset(store, NULL, NULL, 0), HVD_OK);
    put("elastic_assign.r1", "h0:0", value);
    put("elastic_assign.r1", "h1:0", value);
    for (int i = 0; i < 2; i++) {
        expect_exit_0(i);
        wait_line(i, "shutdown the elastic driver stopped the job: the job ends here", 1000, NULL,
                  0);
    }
}

/* d2: an abort while no collective runs (every rank computes): the engine fails anyway, so
 * the next collective fails at once although every peer is alive and would answer */
static void test_abort_while_computing(void **state) {
    (void)state;
    const char *args[] = {"--steps", "8", "--commit-every", "2", "--sleep-ms", "700", NULL};
    for (int i = 0; i < 2; i++)
        start_child(i, 2, args, NULL);
    wait_line(0, "commit step 2", 20000, NULL, 0);
    wait_line(1, "commit step 2", 20000, NULL, 0);
    abort_round(0, "rank 2 (host h2, local rank 0) failed: exit code 1");
    expect_ready(0, 2, "failure");
    for (int i = 0; i < 2; i++) {
        char line[1024];
        wait_line(i, "failed ", 1000, line, sizeof line);
        /* without the interrupt this allreduce would have succeeded: every peer is alive */
        assert_non_null(strstr(line, "failed HVD_ERR_PEER_LOST step "));
        assert_non_null(strstr(line, "the elastic driver ended round 0: rank 2 (host h2, local "
                                     "rank 0) failed: exit code 1"));
    }
    assign_round(1, 2, 2, 1, NULL);
    for (int i = 0; i < 2; i++) {
        expect_exit_0(i);
        wait_line(i, "done step 8 acc 28 resets 1", 1000, NULL, 0);
    }
}

/* f: round 0 fails before it forms: check-in ends at once, the next hvd_init joins round 1 */
static void test_check_in_abort(void **state) {
    (void)state;
    const char *args[] = {"--steps", "20", "--commit-every", "4", NULL};
    const char *env[] = {"HOROVOD_GLOO_TIMEOUT_SECONDS=60", NULL};
    for (int i = 0; i < 2; i++)
        start_child(i, 3, args, env); /* the third never comes */
    assert_int_equal(hvd__kv_store_wait(store, "init.r0", NULL, 2, hvd__clock_deadline_ms(20000)),
                     HVD_OK);
    int64_t t_abort = wall_ms();
    put("init.r0", HVD_ELASTIC_ABORT_KEY, "rank 2 (host h2) exited with code 1 before checking in");
    expect_ready(0, 2, "failure");
    for (int i = 0; i < 2; i++) {
        char line[1024];
        wait_line(i, "init_failed ", 1000, line, sizeof line);
        assert_non_null(strstr(line, "init_failed HVD_ERR_PEER_LOST"));
        assert_non_null(strstr(line, "elastic round 0 failed before it formed: rank 2 (host h2) "
                                     "exited with code 1 before checking in"));
        long long took = field(line, " wall ") - t_abort;
        if (took < 0 || took > 10000)
            fail_msg("child %d's check-in failed %lld ms after the abort: %s", i, took, line);
    }
    assign_round(1, 2, 2, 1, NULL);
    for (int i = 0; i < 2; i++)
        expect_exit_0(i);
    wait_line(0, "done step 20 acc 190 resets 0", 1000, NULL, 0);
    wait_line(1, "init rank 1 size 2", 1000, NULL, 0);
}

/* e: heartbeats */
static void test_heartbeat(void **state) {
    (void)state;
    const char *args[] = {"--steps", "150", "--commit-every", "10", "--sleep-ms", "20", NULL};
    for (int i = 0; i < 2; i++)
        start_child(i, 2, args, NULL);
    for (int round = 0; round < 2; round++) {
        if (hvd__kv_store_wait(store, HVD_ELASTIC_ALIVE_SCOPE, NULL, 2,
                               hvd__clock_deadline_ms(10000)) != HVD_OK) {
            dump_children();
            fail_msg("no heartbeats: %s", hvd_last_error());
        }
        for (int i = 0; i < 2; i++) {
            char slot[16];
            snprintf(slot, sizeof slot, "h%d:0", i);
            /* the beat of one may come a moment after the other's */
            assert_int_equal(hvd__kv_store_wait(store, HVD_ELASTIC_ALIVE_SCOPE, slot, 0,
                                                hvd__clock_deadline_ms(5000)),
                             HVD_OK);
            uint8_t *v;
            size_t len;
            assert_int_equal(hvd__kv_store_get(store, HVD_ELASTIC_ALIVE_SCOPE, slot, &v, &len),
                             HVD_OK);
            assert_int_equal(atol((const char *)v), (long)children[i]);
            free(v);
            /* gone: it must come back (the next round of this loop checks) */
            assert_int_equal(hvd__kv_store_delete(store, HVD_ELASTIC_ALIVE_SCOPE, slot), HVD_OK);
        }
    }
    expect_exit_0(0);
    expect_exit_0(1);
    wait_line(0, "done step 150 acc 11175 resets 0", 1000, NULL, 0);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--child") == 0)
        return child_main(argc, argv);
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (n <= 0) {
        fprintf(stderr, "cannot find this executable: %s\n", strerror(errno));
        return 1;
    }
    self_exe[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_heartbeat, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hosts_updated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopped_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abort_while_computing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_in_abort, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
