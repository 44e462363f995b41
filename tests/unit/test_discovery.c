/* NIC discovery (runner/discovery/discovery.h, runner/discovery/task_service.h) with the driver and
 * the task services of n = 3 "hosts" as threads of this process, all on loopback: the common set
 * and per-host result for a name filter, a CIDR filter and no filter; a task that never starts
 * (timeout naming its host; the check callback stopping the wait); forged and replayed
 * messages sent to a live driver (rejected, logged, discovery unaffected); an empty
 * intersection (the error prints the reachability matrix). Also the pieces: the nics filter
 * parser, host_hash, and the discovery message and task input codecs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "log_capture.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/log.h"
#include "os/netif.h"
#include "os/socket.h"
#include "runner/discovery/discovery.h"
#include "runner/discovery/discovery_msg.h"
#include "runner/discovery/host_hash.h"
#include "runner/discovery/nic_filter.h"
#include "runner/discovery/task_service.h"
#include "runner/service/service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 3
#define WAIT_MS 60000 /* bounds each test's waits; never reached when passing */

static const char *const hosts[N] = {"h0", "h1", "h2"};
static hvd_secret_t secret, other;

static int setup(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    assert_int_equal(hvd__secret_generate(&other), HVD_OK);
    return 0;
}

static void expect(const char *text, const char *part) {
    if (!strstr(text, part))
        fail_msg("'%s'\nlacks '%s'", text, part);
}

/* --- task threads ------------------------------------------------------------------------- */

typedef struct {
    uint8_t *blob;
    size_t len;
    hvd_status_t status;
    char error[1024];
    pthread_t thread;
    int started;
} task_run_t;

static void *task_thread(void *arg) {
    task_run_t *t = arg;
    t->status = hvd__task_service_run(t->blob, t->len);
    snprintf(t->error, sizeof t->error, "%s", t->status == HVD_OK ? "" : hvd_last_error());
    return NULL;
}

/* Start the tasks whose bit is set in mask. */
static void tasks_start(hvd_driver_t *d, task_run_t *runs, size_t n, unsigned mask) {
    for (size_t i = 0; i < n; i++) {
        memset(&runs[i], 0, sizeof runs[i]);
        if (!(mask & (1u << i)))
            continue;
        assert_int_equal(hvd__driver_task_input(d, i, &runs[i].blob, &runs[i].len), HVD_OK);
        assert_int_equal(pthread_create(&runs[i].thread, NULL, task_thread, &runs[i]), 0);
        runs[i].started = 1;
    }
}

static void tasks_join(task_run_t *runs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!runs[i].started)
            continue;
        pthread_join(runs[i].thread, NULL);
        hvd__disc_input_free(runs[i].blob, runs[i].len);
    }
}

static hvd_driver_t *driver_start(const char *const *nics, size_t nic_count, int timeout_s) {
    hvd_driver_config_t cfg = {.secret = &secret,
                               .hosts = hosts,
                               .host_count = N,
                               .nics = nics,
                               .nic_count = nic_count,
                               .timeout_s = timeout_s};
    hvd_driver_t *d = NULL;
    assert_int_equal(hvd__driver_start(&cfg, &d), HVD_OK);
    return d;
}

/* Discovery with every task started; asserts each task succeeded. */
static void run_ok(const char *const *nics, size_t nic_count, hvd_disc_result_t *r) {
    hvd_driver_t *d = driver_start(nics, nic_count, 60);
    task_run_t runs[N];
    tasks_start(d, runs, N, 0x7);
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(WAIT_MS), NULL, NULL, r);
    if (st != HVD_OK)
        fail_msg("driver wait: %s", hvd__driver_message(d));
    tasks_join(runs, N);
    for (size_t i = 0; i < N; i++)
        if (runs[i].status != HVD_OK)
            fail_msg("task %zu: %s", i, runs[i].error);
    hvd__driver_stop(d);
}

static void check_hosts(const hvd_disc_result_t *r, const char *iface) {
    assert_int_equal(r->host_count, N);
    for (size_t i = 0; i < N; i++) {
        assert_string_equal(r->hosts[i].host, hosts[i]);
        assert_string_equal(r->hosts[i].iface, iface);
        assert_string_equal(r->hosts[i].addr, "127.0.0.1");
        assert_string_equal(r->hosts[i].driver_iface, "lo");
        assert_true(strlen(r->hosts[i].host_hash) > 32);
        /* one machine, one set of namespaces: one host_hash */
        assert_string_equal(r->hosts[i].host_hash, r->hosts[0].host_hash);
    }
    assert_string_equal(r->driver_addr, "127.0.0.1");
    assert_string_equal(r->driver_iface, "lo");
}

static void test_ring_name_filter(void **state) {
    (void)state;
    const char *nics[] = {"lo"};
    hvd_disc_result_t r;
    run_ok(nics, 1, &r);
    assert_int_equal(r.nic_count, 1);
    assert_string_equal(r.nics[0], "lo");
    check_hosts(&r, "lo");
    hvd__disc_result_fini(&r);
}

static void test_ring_cidr_filter(void **state) {
    (void)state;
    const char *nics[] = {"127.0.0.0/8"};
    hvd_disc_result_t r;
    run_ok(nics, 1, &r);
    assert_int_equal(r.nic_count, 1);
    assert_string_equal(r.nics[0], "127.0.0.0/8");
    check_hosts(&r, "lo");
    hvd__disc_result_fini(&r);
}

static void test_ring_no_filter(void **state) {
    (void)state;
    hvd_disc_result_t r;
    run_ok(NULL, 0, &r);
    /* every interface of this host reaches itself; loopback comes first in the kernel's
     * order, and every common name is an interface here */
    hvd_netif_t *own = NULL;
    size_t count = 0;
    assert_int_equal(hvd__netif_list(&own, &count), HVD_OK);
    assert_true(r.nic_count >= 1);
    assert_string_equal(r.nics[0], own[0].name);
    for (size_t i = 0; i < r.nic_count; i++)
        assert_non_null(hvd__netif_by_name(r.nics[i], own, count));
    free(own);
    int has_lo = 0;
    for (size_t i = 0; i < r.nic_count; i++)
        has_lo |= strcmp(r.nics[i], "lo") == 0;
    assert_true(has_lo);
    hvd__disc_result_fini(&r);
}

/* A task program as its own process, with its input on stdin: fork first (this process has
 * no other thread yet), then start the driver and feed each child its blob. */
typedef struct {
    pid_t pid;
    int in, err; /* our ends: the child's stdin and stderr */
} child_t;

static child_t spawn_task_program(void) {
    int in[2], err[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(err), 0);
    child_t c = {.pid = fork()};
    assert_true(c.pid >= 0);
    if (c.pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(err[1], STDERR_FILENO);
        close(in[0]);
        close(in[1]);
        close(err[0]);
        close(err[1]);
        /* not the other children's pipes: a successful task goes on reading its stdin (for a
         * launch spec) until it ends, and that end must be ours alone */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        _exit(hvd__task_service_main());
    }
    close(in[0]);
    close(err[1]);
    c.in = in[1];
    c.err = err[0];
    return c;
}

/* Wait for the child; returns its exit code and its stderr in out. */
static int finish_task_program(child_t *c, char *out, size_t size) {
    close(c->in);
    size_t have = 0;
    for (;;) {
        ssize_t n = read(c->err, out + have, size - 1 - have);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    out[have] = '\0';
    close(c->err);
    int status = 0;
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_task_program_stdin(void **state) {
    (void)state;
    child_t kids[N + 2];
    for (size_t i = 0; i < N + 2; i++)
        kids[i] = spawn_task_program();
    const char *nics[] = {"lo"};
    hvd_driver_t *d = driver_start(nics, 1, 60);
    for (size_t i = 0; i < N; i++) {
        uint8_t *blob = NULL;
        size_t len = 0;
        assert_int_equal(hvd__driver_task_input(d, i, &blob, &len), HVD_OK);
        /* in two pieces, as a pipe or ssh may deliver it */
        assert_int_equal(write(kids[i].in, blob, 5), 5);
        assert_int_equal(write(kids[i].in, blob + 5, len - 5), (ssize_t)(len - 5));
        hvd__disc_input_free(blob, len);
    }
    /* not a blob; and stdin closed after half a header */
    assert_int_equal(write(kids[N].in, "HVDX\1\0\0\0\0\0\0\0", 12), 12);
    assert_int_equal(write(kids[N + 1].in, "HVDT\1\0", 6), 6);

    hvd_disc_result_t r;
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(WAIT_MS), NULL, NULL, &r);
    if (st != HVD_OK)
        fail_msg("driver wait: %s", hvd__driver_message(d));
    assert_string_equal(r.nics[0], "lo");
    check_hosts(&r, "lo");
    hvd__disc_result_fini(&r);
    char err[4096];
    for (size_t i = 0; i < N; i++) {
        int code = finish_task_program(&kids[i], err, sizeof err);
        if (code != 0 || err[0])
            fail_msg("task program %zu: exit %d, stderr '%s'", i, code, err);
    }
    assert_int_equal(finish_task_program(&kids[N], err, sizeof err), 1);
    expect(err, "horovodrun --internal-task-service: the task input does not start with the "
                "task input magic");
    assert_int_equal(finish_task_program(&kids[N + 1], err, sizeof err), 1);
    expect(err, "horovodrun --internal-task-service: stdin ended after 6 of 12 bytes");
    assert_non_null(strchr(err, '\n'));
    assert_int_equal(strchr(err, '\n') + 1 - err, strlen(err)); /* one line */
    hvd__driver_stop(d);
}

static void test_task_never_starts(void **state) {
    (void)state;
    const char *nics[] = {"lo"};
    hvd_driver_t *d = driver_start(nics, 1, 3);
    task_run_t runs[N];
    tasks_start(d, runs, N, 0x3); /* h2 never starts */
    hvd_disc_result_t r;
    /* once h0 and h1 are in, the driver can only be waiting for h2 */
    size_t registered = 0, reported = 0;
    int64_t limit = hvd__clock_deadline_ms(WAIT_MS);
    while (registered < 2 && hvd__clock_now_ms() < limit) {
        hvd__driver_progress(d, &registered, &reported);
        hvd__clock_sleep_ms(10);
    }
    assert_int_equal(registered, 2);
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(300), NULL, NULL, &r);
    assert_int_equal(st, HVD_ERR_TIMEOUT);
    const char *msg = hvd__driver_message(d);
    assert_non_null(strstr(msg, "Timed out waiting for tasks to start. Please check connectivity "
                                "between servers. You may need to increase the --start-timeout "
                                "parameter if you have too many servers. Timeout after 3 "
                                "seconds."));
    assert_non_null(strstr(msg, "Still waiting for 1 of 3 hosts: h2 (index 2)"));
    assert_null(strstr(msg, "h0 (index 0)"));
    assert_non_null(strstr(hvd_last_error(), "h2 (index 2)"));
    tasks_join(runs, N);
    /* task 1 gave up waiting for its successor, and says who that is */
    if (runs[1].status != HVD_ERR_TIMEOUT)
        fail_msg("task 1: %d %s", runs[1].status, runs[1].error);
    expect(runs[1].error, "task service of host h1 (index 1)");
    expect(runs[1].error, "waiting for host h2 (index 2) to register");
    hvd__driver_stop(d);
}

static int checks;
static int check_dead(void *arg, char *msg, size_t size) {
    (void)arg;
    if (++checks < 2)
        return 0;
    snprintf(msg, size,
             "the task service on host h2 exited with code 255: ssh: connect to host "
             "h2 port 22: Connection refused");
    return 1;
}

static void test_check_stops_wait(void **state) {
    (void)state;
    const char *nics[] = {"lo"};
    hvd_driver_t *d = driver_start(nics, 1, 2);
    task_run_t runs[N];
    tasks_start(d, runs, N, 0x3);
    hvd_disc_result_t r;
    checks = 0;
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(WAIT_MS), check_dead, NULL, &r);
    assert_int_equal(st, HVD_ERR_PEER_LOST);
    assert_true(checks >= 2);
    assert_non_null(strstr(hvd_last_error(), "NIC discovery stopped: the task service on host h2 "
                                             "exited with code 255: ssh: connect"));
    hvd__driver_stop(d); /* the tasks lose the driver and give up */
    tasks_join(runs, N);
    assert_int_not_equal(runs[0].status, HVD_OK);
}

/* --- hostile messages to a live driver ---------------------------------------------------- */

static int raw_connect(int port, uint8_t nonce_s[HVD_SVC_NONCE_LEN]) {
    int fd = -1;
    int64_t deadline = hvd__clock_deadline_ms(WAIT_MS);
    assert_int_equal(hvd__socket_connect("127.0.0.1", port, deadline, &fd), HVD_OK);
    uint8_t ch[HVD_SVC_CHALLENGE_LEN];
    size_t have = 0;
    while (have < sizeof ch) {
        size_t got = 0;
        assert_int_equal(
            hvd__socket_recv_some(fd, ch + have, sizeof ch - have, deadline, "driver", &got),
            HVD_OK);
        assert_true(got > 0);
        have += got;
    }
    assert_int_equal(hvd__svc_challenge_decode(ch, nonce_s), HVD_OK);
    return fd;
}

static void raw_send(int fd, const void *p, size_t len) {
    assert_int_equal(hvd__socket_send_all(fd, p, len, hvd__clock_deadline_ms(WAIT_MS), "driver"),
                     HVD_OK);
}

/* Read until the driver closes fd; returns the bytes read before that. */
static size_t drain(int fd, uint8_t *buf, size_t cap) {
    size_t have = 0;
    for (;;) {
        size_t got = 0;
        uint8_t junk[256];
        uint8_t *dst = have < cap ? buf + have : junk;
        size_t room = have < cap ? cap - have : sizeof junk;
        hvd_status_t st =
            hvd__socket_recv_some(fd, dst, room, hvd__clock_deadline_ms(WAIT_MS), "driver", &got);
        if (st != HVD_OK || got == 0)
            return have;
        have += got;
    }
}

static size_t register_request(uint8_t *out, uint32_t index, uint32_t seq,
                               const uint8_t nonce_s[HVD_SVC_NONCE_LEN], const hvd_secret_t *key) {
    hvd_disc_register_t *reg = calloc(1, sizeof *reg);
    reg->index = index;
    snprintf(reg->host, sizeof reg->host, "%s", index < N ? hosts[index] : "nowhere");
    snprintf(reg->host_hash, sizeof reg->host_hash, "forged-0");
    reg->port = 1;
    reg->addrs.count = 1;
    snprintf(reg->addrs.items[0].name, sizeof reg->addrs.items[0].name, "lo");
    snprintf(reg->addrs.items[0].addr, sizeof reg->addrs.items[0].addr, "127.0.0.1");
    size_t len = 0;
    assert_int_equal(hvd__disc_register_encode(reg, out + HVD_SVC_REQ_PREFIX_LEN, 4096, &len),
                     HVD_OK);
    hvd_svc_head_t h = {.type = HVD_DISC_REGISTER, .seq = seq, .len = (uint32_t)len};
    memset(h.nonce_c, 0x42, sizeof h.nonce_c);
    assert_int_equal(hvd__svc_request_encode(out, &h, out + HVD_SVC_REQ_PREFIX_LEN, nonce_s, key),
                     HVD_OK);
    free(reg);
    return HVD_SVC_REQ_PREFIX_LEN + len;
}

static void test_hostile_messages(void **state) {
    (void)state;
    const char *nics[] = {"lo"};
    hvd_driver_t *d = driver_start(nics, 1, 60);
    int port = hvd__driver_port(d);
    capture_start();

    /* an authentic REGISTER (of a task index the job does not have), recorded */
    uint8_t nonce_a[HVD_SVC_NONCE_LEN], nonce_b[HVD_SVC_NONCE_LEN], nonce_c[HVD_SVC_NONCE_LEN];
    int a = raw_connect(port, nonce_a);
    uint8_t recorded[4096 + HVD_SVC_REQ_PREFIX_LEN], resp[1024];
    size_t len = register_request(recorded, 7, 0, nonce_a, &secret);
    raw_send(a, recorded, len);
    /* refused by the driver (an ERROR response), the connection stays open */
    uint8_t prefix[HVD_SVC_RESP_PREFIX_LEN];
    size_t have = 0;
    while (have < sizeof prefix) {
        size_t got = 0;
        assert_int_equal(hvd__socket_recv_some(a, prefix + have, sizeof prefix - have,
                                               hvd__clock_deadline_ms(WAIT_MS), "driver", &got),
                         HVD_OK);
        assert_true(got > 0);
        have += got;
    }
    hvd_svc_head_t rh;
    assert_int_equal(hvd__svc_response_head_decode(prefix, &rh), HVD_OK);
    assert_int_equal(rh.type, HVD_SVC_ERROR);

    /* replayed on a new connection: bad MAC, closed, logged with the peer */
    int b = raw_connect(port, nonce_b);
    raw_send(b, recorded, len);
    drain(b, resp, sizeof resp);
    close(b);
    /* replayed on its own connection: same seq */
    raw_send(a, recorded, len);
    drain(a, resp, sizeof resp);
    close(a);
    /* forged: a REGISTER of task 0 made with another secret */
    int c = raw_connect(port, nonce_c);
    len = register_request(recorded, 0, 0, nonce_c, &other);
    raw_send(c, recorded, len);
    assert_int_equal(drain(c, resp, sizeof resp), 0);
    close(c);

    const char *log = capture_read();
    assert_non_null(strstr(log, "driver service: refused a request from 127.0.0.1:"));
    assert_non_null(strstr(log, "REGISTER of task 7, but there are 3 hosts"));
    assert_non_null(strstr(log, "driver service: rejected a message from 127.0.0.1:"));
    assert_non_null(strstr(log, "bad MAC (wrong secret"));
    assert_non_null(strstr(log, "replayed or out-of-order message (seq 0, expected 1)"));
    /* two bad MACs: the replay on b and the forgery on c */
    const char *first = strstr(log, "bad MAC"), *second = first ? strstr(first + 1, "bad MAC") : 0;
    assert_non_null(second);
    size_t registered = 9, reported = 9;
    hvd__driver_progress(d, &registered, &reported);
    assert_int_equal(registered, 0); /* nothing was recorded */

    /* discovery is unaffected */
    task_run_t runs[N];
    tasks_start(d, runs, N, 0x7);
    hvd_disc_result_t r;
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(WAIT_MS), NULL, NULL, &r);
    if (st != HVD_OK)
        fail_msg("driver wait: %s", hvd__driver_message(d));
    tasks_join(runs, N);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(runs[i].status, HVD_OK);
    assert_int_equal(r.nic_count, 1);
    assert_string_equal(r.nics[0], "lo");
    check_hosts(&r, "lo");
    hvd__disc_result_fini(&r);
    hvd__driver_stop(d);
    capture_end();
}

/* --- empty intersections ------------------------------------------------------------------ */

static void test_filter_matches_nothing(void **state) {
    (void)state;
    const char *nics[] = {"eth9"};
    hvd_driver_t *d = driver_start(nics, 1, 60);
    task_run_t runs[N];
    tasks_start(d, runs, N, 0x7);
    hvd_disc_result_t r;
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(WAIT_MS), NULL, NULL, &r);
    assert_int_equal(st, HVD_ERR_NOT_FOUND);
    const char *msg = hvd__driver_message(d);
    assert_non_null(strstr(msg, "Unable to find a set of common task-to-task communication "
                                "interfaces"));
    assert_non_null(strstr(msg, "Interface filter: eth9."));
    assert_non_null(strstr(msg, "\n  h0 (index 0) -> h1 (index 1): h1 has no address that passes "
                                "the interface filter"));
    assert_non_null(strstr(msg, "\n  h2 (index 2) -> h0 (index 0): h0 has no address"));
    tasks_join(runs, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(runs[i].status, HVD_ERR_NOT_FOUND);
        assert_non_null(strstr(runs[i].error, "no network interface of this host passes the "
                                              "interface filter eth9 (its interfaces: lo "
                                              "127.0.0.1"));
    }
    hvd__driver_stop(d);
}

/* The test plays task 2: it registers an address of its choosing (port, interface name)
 * where the real task 1 will probe, probes task 0 "successfully" and reports. Returns the
 * driver's status; *task1_error_p is task 1's error (static storage). */
static hvd_status_t play_task2(const char *const *nics, size_t nic_count, int port,
                               const char *iface, const char **msg_p, const char **task1_error_p) {
    static char driver_msg[8192], task1_error[1024];
    hvd_driver_t *d = driver_start(nics, nic_count, 60);
    task_run_t runs[N];
    tasks_start(d, runs, N, 0x3);
    int64_t deadline = hvd__clock_deadline_ms(WAIT_MS);
    size_t n = 0;
    const hvd_netif_t *daddrs = hvd__driver_addrs(d, &n);
    assert_non_null(hvd__netif_by_addr("127.0.0.1", daddrs, n));
    hvd_svc_client_t *c = NULL;
    assert_int_equal(hvd__svc_client_open("127.0.0.1", hvd__driver_port(d), &secret, deadline, &c),
                     HVD_OK);
    uint8_t *body = malloc(HVD_SVC_MAX_BODY), *resp = malloc(HVD_SVC_MAX_BODY);
    uint16_t rt = 0;
    size_t len = 0, rlen = 0;
    hvd_disc_register_t *reg = calloc(1, sizeof *reg);
    reg->index = 2;
    snprintf(reg->host, sizeof reg->host, "h2");
    snprintf(reg->host_hash, sizeof reg->host_hash, "h2-0");
    reg->port = (uint16_t)port;
    reg->addrs.count = 1;
    snprintf(reg->addrs.items[0].name, sizeof reg->addrs.items[0].name, "%s", iface);
    snprintf(reg->addrs.items[0].addr, sizeof reg->addrs.items[0].addr, "127.0.0.1");
    reg->reached_count = 1;
    snprintf(reg->reached[0], sizeof reg->reached[0], "127.0.0.1");
    assert_int_equal(hvd__disc_register_encode(reg, body, HVD_SVC_MAX_BODY, &len), HVD_OK);
    assert_int_equal(hvd__svc_client_call(c, HVD_DISC_REGISTER, body, len, deadline, &rt, resp,
                                          HVD_SVC_MAX_BODY, &rlen),
                     HVD_OK);
    assert_int_equal(rt, HVD_SVC_ACK);
    /* "probe" task 0: claim all its addresses reached */
    hvd_disc_task_info_t info;
    assert_int_equal(hvd__disc_get_task_encode(2, 0, body, HVD_SVC_MAX_BODY, &len), HVD_OK);
    for (;;) {
        assert_int_equal(hvd__svc_client_call(c, HVD_DISC_GET_TASK, body, len, deadline, &rt, resp,
                                              HVD_SVC_MAX_BODY, &rlen),
                         HVD_OK);
        if (rt == HVD_DISC_TASK_INFO)
            break;
        assert_int_equal(rt, HVD_DISC_NOT_YET);
        hvd__clock_sleep_ms(20);
    }
    assert_int_equal(hvd__disc_task_info_decode(resp, rlen, &info), HVD_OK);
    assert_string_equal(info.host, "h0");
    hvd_disc_report_t rep = {.from = 2, .to = 0, .reached = info.addrs};
    assert_int_equal(hvd__disc_report_encode(&rep, body, HVD_SVC_MAX_BODY, &len), HVD_OK);
    assert_int_equal(hvd__svc_client_call(c, HVD_DISC_REPORT, body, len, deadline, &rt, resp,
                                          HVD_SVC_MAX_BODY, &rlen),
                     HVD_OK);
    /* like a task, wait until every report is in */
    assert_int_equal(hvd__disc_index_encode(2, body, HVD_SVC_MAX_BODY, &len), HVD_OK);
    for (;;) {
        assert_int_equal(hvd__svc_client_call(c, HVD_DISC_WAIT_DONE, body, len, deadline, &rt, resp,
                                              HVD_SVC_MAX_BODY, &rlen),
                         HVD_OK);
        if (rt == HVD_DISC_DONE)
            break;
        assert_int_equal(rt, HVD_DISC_NOT_YET);
        hvd__clock_sleep_ms(20);
    }
    hvd__svc_client_close(c);

    hvd_disc_result_t r;
    hvd_status_t st = hvd__driver_wait(d, hvd__clock_deadline_ms(WAIT_MS), NULL, NULL, &r);
    if (st == HVD_OK)
        hvd__disc_result_fini(&r);
    else /* the error as hvd_last_error() holds at least the start of the message */
        assert_int_equal(strncmp(hvd_last_error(), hvd__driver_message(d), 40), 0);
    snprintf(driver_msg, sizeof driver_msg, "%s", hvd__driver_message(d));
    tasks_join(runs, N);
    assert_int_equal(runs[0].status, HVD_OK);
    snprintf(task1_error, sizeof task1_error, "%s", runs[1].error);
    free(reg);
    free(body);
    free(resp);
    hvd__driver_stop(d);
    *msg_p = driver_msg;
    *task1_error_p = task1_error;
    return st;
}

/* Nothing listens where task 2 says it serves: task 1 cannot reach it, and the matrix says
 * so address by address. */
static void test_matrix_refused(void **state) {
    (void)state;
    /* a bound, never listening socket: connections to its port are refused */
    int hole = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(hole, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(hole, (struct sockaddr *)&sa, &sl), 0);
    int port = ntohs(sa.sin_port);
    const char *nics[] = {"lo"}, *msg, *task1;
    assert_int_equal(play_task2(nics, 1, port, "lo", &msg, &task1), HVD_ERR_NOT_FOUND);
    expect(msg, "Unable to find a set of common task-to-task communication interfaces");
    expect(msg, "\n  h0 (index 0) -> h1 (index 1): lo 127.0.0.1 reached");
    expect(msg, "\n  h1 (index 1) -> h2 (index 2): lo 127.0.0.1 not reached");
    expect(msg, "\n  h2 (index 2) -> h0 (index 0): lo 127.0.0.1 reached");
    char want[160];
    snprintf(want, sizeof want,
             "could not reach the task service of host h2 (index 2) on any of its addresses: lo "
             "127.0.0.1:%d (",
             port);
    expect(task1, want);
    close(hole);
}

/* Task 2 serves, but says its address is on eth7: task 1's PING comes from this host's
 * loopback, not from an interface named eth7, so match_intf refuses it. */
static void test_matrix_interface_mismatch(void **state) {
    (void)state;
    hvd_svc_server_config_t cfg = {
        .name = "task service #2", .bind_addr = "127.0.0.1", .secret = &secret};
    hvd_svc_server_t *s = NULL;
    assert_int_equal(hvd__svc_server_start(&cfg, &s), HVD_OK);
    const char *msg, *task1;
    assert_int_equal(play_task2(NULL, 0, hvd__svc_server_port(s), "eth7", &msg, &task1),
                     HVD_ERR_NOT_FOUND);
    expect(msg, "Interface filter: (none).");
    expect(msg, "\n  h1 (index 1) -> h2 (index 2): eth7 127.0.0.1 not reached");
    expect(task1, "eth7 127.0.0.1:");
    expect(task1, "reached from 127.0.0.1, which is not this host's address on eth7");
    hvd__svc_server_stop(s);
}

/* A service of another name, or one without the job's secret, does not count as task 2. */
static void test_matrix_wrong_service(void **state) {
    (void)state;
    hvd_svc_server_config_t cfg = {
        .name = "task service #5", .bind_addr = "127.0.0.1", .secret = &secret};
    hvd_svc_server_t *s = NULL;
    assert_int_equal(hvd__svc_server_start(&cfg, &s), HVD_OK);
    const char *nics[] = {"lo"}, *msg, *task1;
    assert_int_equal(play_task2(nics, 1, hvd__svc_server_port(s), "lo", &msg, &task1),
                     HVD_ERR_NOT_FOUND);
    expect(task1, "answered by 'task service #5', not the task service #2");
    hvd__svc_server_stop(s);

    capture_start(); /* the impostor logs the rejected PINGs */
    cfg.name = "task service #2";
    cfg.secret = &other;
    assert_int_equal(hvd__svc_server_start(&cfg, &s), HVD_OK);
    assert_int_equal(play_task2(nics, 1, hvd__svc_server_port(s), "lo", &msg, &task1),
                     HVD_ERR_NOT_FOUND);
    expect(msg, "\n  h1 (index 1) -> h2 (index 2): lo 127.0.0.1 not reached");
    expect(task1, "could not reach the task service of host h2 (index 2)");
    hvd__svc_server_stop(s);
    expect(capture_read(), "task service #2: rejected a message from 127.0.0.1:");
    capture_end();
}

/* --- pieces ------------------------------------------------------------------------------- */

static void test_nic_filter(void **state) {
    (void)state;
    hvd_nic_filter_t f;
    const char *ok[] = {"eth0", "10.77.0.0/24", "ib0", "eth0", "192.168.1.7/32"};
    assert_int_equal(hvd__nic_filter_parse(ok, 5, &f), HVD_OK);
    assert_int_equal(f.name_count, 2); /* eth0 once */
    assert_int_equal(f.cidr_count, 2);
    assert_string_equal(hvd__nic_filter_key(&f, "enp1s0", "10.77.0.9"), "10.77.0.0/24");
    assert_string_equal(hvd__nic_filter_key(&f, "eth0", "172.16.0.1"), "eth0");
    assert_null(hvd__nic_filter_key(&f, "docker0", "172.17.0.1"));
    assert_string_equal(hvd__nic_filter_key(&f, "x", "192.168.1.7"), "192.168.1.7/32");
    assert_null(hvd__nic_filter_key(&f, "x", "192.168.1.8"));
    char text[128];
    hvd__nic_filter_format(&f, text, sizeof text);
    assert_string_equal(text, "eth0,ib0,10.77.0.0/24,192.168.1.7/32");

    assert_int_equal(hvd__nic_filter_parse(NULL, 0, &f), HVD_OK);
    assert_true(hvd__nic_filter_is_empty(&f));
    assert_string_equal(hvd__nic_filter_key(&f, "anything", "1.2.3.4"), "anything");

    struct {
        const char *item, *says;
    } bad[] = {
        {"10.77.0.1/24", "did you mean 10.77.0.0/24?"},
        {"10.77.0.0/33", "prefix length"},
        {"10.77.0.0/", "prefix length"},
        {"10.77.0.0/2x", "prefix length"},
        {"10.77.0/24", "is not an IPv4 address"},
        {"/24", "not an IPv4 network"},
        {"10.77.0.5", "is an address"},
        {"averyveryverylongname", "not a valid interface name"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *items[] = {bad[i].item};
        assert_int_equal(hvd__nic_filter_parse(items, 1, &f), HVD_ERR_INVALID_ARG);
        if (!strstr(hvd_last_error(), bad[i].says))
            fail_msg("'%s': '%s' lacks '%s'", bad[i].item, hvd_last_error(), bad[i].says);
    }
    /* the driver refuses a bad filter at start */
    const char *nics[] = {"10.0.0.1/8"};
    hvd_driver_config_t cfg = {.secret = &secret,
                               .hosts = hosts,
                               .host_count = N,
                               .nics = nics,
                               .nic_count = 1,
                               .timeout_s = 5};
    hvd_driver_t *d = NULL;
    assert_int_equal(hvd__driver_start(&cfg, &d), HVD_ERR_INVALID_ARG);
    assert_null(d);
}

static void test_host_hash(void **state) {
    (void)state;
    char a[HVD_HOST_HASH_MAX], b[HVD_HOST_HASH_MAX];
    hvd__host_hash_compute("node1.cluster.example", "ns1 ns2", NULL, a, sizeof a);
    assert_int_equal(strncmp(a, "node1-", 6), 0);
    assert_int_equal(strlen(a), 6 + 32);
    for (size_t i = 6; i < strlen(a); i++)
        assert_non_null(strchr("0123456789abcdef", a[i]));
    hvd__host_hash_compute("node1.cluster.example", "ns1 ns2", "", b, sizeof b);
    assert_string_equal(a, b); /* an empty salt is no salt */
    hvd__host_hash_compute("node1.cluster.example", "ns1 ns2", "salt", b, sizeof b);
    assert_string_not_equal(a, b);
    hvd__host_hash_compute("node1.cluster.example", "ns1 ns3", NULL, b, sizeof b);
    assert_string_not_equal(a, b); /* another container on the same machine */
    hvd__host_hash_compute("node1.other", "ns1 ns2", NULL, b, sizeof b);
    assert_string_not_equal(a, b);
    /* SHA-256("x-y") truncated: a fixed vector, so the format cannot drift */
    hvd__host_hash_compute("x", "y", NULL, a, sizeof a);
    assert_string_equal(a, "x-cc96fed8b030120e59a6a0372a92de2d");
    assert_int_equal(hvd__host_hash(NULL, a, sizeof a), HVD_OK);
    assert_int_equal(hvd__host_hash("", b, sizeof b), HVD_OK);
    assert_string_equal(a, b);
}

static void test_messages(void **state) {
    (void)state;
    hvd_disc_register_t *m = calloc(1, sizeof *m), *got = calloc(1, sizeof *got);
    m->index = 2;
    snprintf(m->host, sizeof m->host, "node-2.example");
    snprintf(m->host_hash, sizeof m->host_hash, "node-2-abc");
    m->port = 4242;
    m->addrs.count = 2;
    snprintf(m->addrs.items[0].name, sizeof m->addrs.items[0].name, "eth0");
    snprintf(m->addrs.items[0].addr, sizeof m->addrs.items[0].addr, "10.0.0.2");
    snprintf(m->addrs.items[1].name, sizeof m->addrs.items[1].name, "ib0");
    snprintf(m->addrs.items[1].addr, sizeof m->addrs.items[1].addr, "10.1.0.2");
    m->reached_count = 1;
    snprintf(m->reached[0], sizeof m->reached[0], "10.0.0.1");
    uint8_t buf[4096];
    size_t len = 0;
    assert_int_equal(hvd__disc_register_encode(m, buf, sizeof buf, &len), HVD_OK);
    assert_int_equal(hvd__disc_register_decode(buf, len, got), HVD_OK);
    assert_int_equal(got->index, 2);
    assert_string_equal(got->host, "node-2.example");
    assert_int_equal(got->port, 4242);
    assert_int_equal(got->addrs.count, 2);
    assert_string_equal(got->addrs.items[1].name, "ib0");
    assert_string_equal(got->reached[0], "10.0.0.1");
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(hvd__disc_register_decode(buf, cut, got), HVD_ERR_PROTOCOL);
    /* a count over the bound is refused before reading entries */
    hvd_disc_report_t rep = {.from = 1, .to = 2};
    assert_int_equal(hvd__disc_report_encode(&rep, buf, sizeof buf, &len), HVD_OK);
    buf[8] = 0xff;
    buf[9] = 0xff;
    hvd_disc_report_t rgot;
    assert_int_equal(hvd__disc_report_decode(buf, len, &rgot), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "65535 entries"));
    /* the network check's failed addresses, with their causes: round trip; a cause this
     * version does not know, an empty list, or a cut one, refused */
    hvd_disc_report_t *fr = calloc(1, sizeof *fr), *fback = calloc(1, sizeof *fback);
    fr->from = 0;
    fr->to = 1;
    fr->reached.count = 1;
    snprintf(fr->reached.items[0].name, sizeof fr->reached.items[0].name, "eth0");
    snprintf(fr->reached.items[0].addr, sizeof fr->reached.items[0].addr, "10.0.0.2");
    fr->failed_count = 2;
    snprintf(fr->failed[0].where.name, sizeof fr->failed[0].where.name, "eth1");
    snprintf(fr->failed[0].where.addr, sizeof fr->failed[0].where.addr, "10.1.0.2");
    fr->failed[0].cause = HVD_DISC_CAUSE_TIMEOUT;
    snprintf(fr->failed[0].detail, sizeof fr->failed[0].detail, "timed out connecting");
    snprintf(fr->failed[1].where.name, sizeof fr->failed[1].where.name, "ib0");
    snprintf(fr->failed[1].where.addr, sizeof fr->failed[1].where.addr, "10.2.0.2");
    fr->failed[1].cause = HVD_DISC_CAUSE_SECRET;
    assert_int_equal(hvd__disc_report_encode(fr, buf, sizeof buf, &len), HVD_OK);
    assert_int_equal(hvd__disc_report_decode(buf, len, fback), HVD_OK);
    assert_int_equal(fback->failed_count, 2);
    assert_string_equal(fback->failed[0].where.addr, "10.1.0.2");
    assert_int_equal(fback->failed[0].cause, HVD_DISC_CAUSE_TIMEOUT);
    assert_string_equal(fback->failed[0].detail, "timed out connecting");
    assert_string_equal(hvd__disc_cause_name(fback->failed[1].cause), "wrong secret");
    assert_string_equal(hvd__disc_cause_name(HVD_DISC_CAUSE_REFUSED), "refused");
    assert_string_equal(hvd__disc_cause_name(HVD_DISC_CAUSE_NO_ROUTE), "no route");
    /* each cause from how the probe failed (the messages are the socket layer's) */
    assert_int_equal(hvd__disc_cause_of(HVD_ERR_PEER_LOST, 0,
                                        "cannot connect to 10.0.0.2:4000: Connection refused"),
                     HVD_DISC_CAUSE_REFUSED);
    assert_int_equal(
        hvd__disc_cause_of(HVD_ERR_IO, 0, "cannot connect to 10.0.0.2:4000: No route to host"),
        HVD_DISC_CAUSE_NO_ROUTE);
    assert_int_equal(hvd__disc_cause_of(HVD_ERR_IO, 0,
                                        "cannot connect to 10.0.0.2:4000: Network is unreachable"),
                     HVD_DISC_CAUSE_NO_ROUTE);
    assert_int_equal(hvd__disc_cause_of(HVD_ERR_TIMEOUT, 0, "timed out connecting to 10.0.0.2"),
                     HVD_DISC_CAUSE_TIMEOUT);
    assert_int_equal(hvd__disc_cause_of(HVD_ERR_TIMEOUT, 1, "no answer"), HVD_DISC_CAUSE_TIMEOUT);
    assert_int_equal(
        hvd__disc_cause_of(HVD_ERR_PEER_LOST, 1, "10.0.0.2:4000 closed the connection"),
        HVD_DISC_CAUSE_SECRET);
    assert_int_equal(hvd__disc_cause_of(HVD_ERR_AUTH, 1, "response from 10.0.0.2:4000 rejected"),
                     HVD_DISC_CAUSE_SECRET);
    assert_int_equal(hvd__disc_cause_of(HVD_ERR_PROTOCOL, 1, "answered PING with message type 9"),
                     HVD_DISC_CAUSE_OTHER);
    for (size_t cut = len - 8; cut < len; cut++)
        assert_int_equal(hvd__disc_report_decode(buf, cut, fback), HVD_ERR_PROTOCOL);
    buf[len - 3] = HVD_DISC_CAUSE_MAX + 1; /* (the last failure's cause, then its empty detail) */
    assert_int_equal(hvd__disc_report_decode(buf, len, fback), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "unknown cause"));
    fr->failed_count = 0;
    assert_int_equal(hvd__disc_report_encode(fr, buf, sizeof buf, &len), HVD_OK);
    buf[len++] = 0; /* an empty failed list: written by no encoder */
    buf[len++] = 0;
    assert_int_equal(hvd__disc_report_decode(buf, len, fback), HVD_ERR_PROTOCOL);
    free(fr);
    free(fback);
    free(m);
    free(got);

    /* the task input: round trip, bounds, version */
    hvd_disc_input_t *in = calloc(1, sizeof *in), *back = calloc(1, sizeof *back);
    in->secret = secret;
    in->index = 1;
    in->n = 3;
    in->timeout_s = 30;
    snprintf(in->host, sizeof in->host, "h1");
    in->driver_port = 999;
    in->driver_addr_count = 1;
    snprintf(in->driver_addrs[0], sizeof in->driver_addrs[0], "10.0.0.1");
    in->nic_count = 1;
    snprintf(in->nics[0], sizeof in->nics[0], "10.0.0.0/8");
    uint8_t *blob = NULL;
    assert_int_equal(hvd__disc_input_encode(in, &blob, &len), HVD_OK);
    size_t body = 0;
    assert_int_equal(hvd__disc_input_head_decode(blob, &body), HVD_OK);
    assert_int_equal(body, len - HVD_DISC_INPUT_HEAD_LEN);
    assert_int_equal(hvd__disc_input_body_decode(blob + HVD_DISC_INPUT_HEAD_LEN, body, back),
                     HVD_OK);
    assert_memory_equal(back->secret.bytes, secret.bytes, HVD_SECRET_LEN);
    assert_int_equal(back->index, 1);
    assert_string_equal(back->nics[0], "10.0.0.0/8");
    assert_int_equal(back->flags, 0);
    /* the network check's flag travels; unknown flags are refused */
    in->flags = HVD_DISC_FLAG_MESH;
    hvd__disc_input_free(blob, len);
    assert_int_equal(hvd__disc_input_encode(in, &blob, &len), HVD_OK);
    assert_int_equal(hvd__disc_input_body_decode(blob + HVD_DISC_INPUT_HEAD_LEN,
                                                 len - HVD_DISC_INPUT_HEAD_LEN, back),
                     HVD_OK);
    assert_int_equal(back->flags, HVD_DISC_FLAG_MESH);
    blob[len - 2] = 0x02;
    assert_int_equal(hvd__disc_input_body_decode(blob + HVD_DISC_INPUT_HEAD_LEN,
                                                 len - HVD_DISC_INPUT_HEAD_LEN, back),
                     HVD_ERR_PROTOCOL);
    in->flags = 0;
    hvd__disc_input_free(blob, len);
    assert_int_equal(hvd__disc_input_encode(in, &blob, &len), HVD_OK);
    blob[4] = 3;
    assert_int_equal(hvd__disc_input_head_decode(blob, &body), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "version 3"));
    blob[4] = 1;
    blob[11] = 0x7f;
    assert_int_equal(hvd__disc_input_head_decode(blob, &body), HVD_ERR_TOO_LARGE);
    blob[11] = 0;
    /* index out of range */
    in->index = 3;
    hvd__disc_input_free(blob, len);
    assert_int_equal(hvd__disc_input_encode(in, &blob, &len), HVD_OK);
    assert_int_equal(hvd__disc_input_body_decode(blob + HVD_DISC_INPUT_HEAD_LEN,
                                                 len - HVD_DISC_INPUT_HEAD_LEN, back),
                     HVD_ERR_PROTOCOL);
    /* the task program refuses a bad blob with a clear error, before any network use */
    assert_int_equal(hvd__task_service_run(blob, len - 1), HVD_ERR_PROTOCOL);
    assert_int_equal(hvd__task_service_run(blob, 3), HVD_ERR_PROTOCOL);
    hvd__disc_input_free(blob, len);
    free(in);
    free(back);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nic_filter),
        cmocka_unit_test(test_host_hash),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_ring_name_filter),
        cmocka_unit_test(test_ring_cidr_filter),
        cmocka_unit_test(test_ring_no_filter),
        cmocka_unit_test(test_task_program_stdin),
        cmocka_unit_test(test_task_never_starts),
        cmocka_unit_test(test_check_stops_wait),
        cmocka_unit_test(test_hostile_messages),
        cmocka_unit_test(test_filter_matches_nothing),
        cmocka_unit_test(test_matrix_refused),
        cmocka_unit_test(test_matrix_interface_mismatch),
        cmocka_unit_test(test_matrix_wrong_service),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
