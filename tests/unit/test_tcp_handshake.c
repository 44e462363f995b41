/* How long the tcp transport keeps a same-host connection that has not authenticated: rank 1
 * of two waits in an exchange for rank 0, which never comes, with a timeout of 1 s (so a
 * connection has 1 s for its HELLO), while two child processes connect to its same-host
 * listener and never send one.
 *   - one blocks in read: dropped (end of stream) within a few handshake limits;
 *   - one keeps running (as a rank starved of CPU among thousands does, still on its way to
 *     its HELLO): kept for as long as it runs, five limits here, then dropped within a few
 *     limits once it blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "os/socket.h"
#include "transport/tcp.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT_MS 1000
#define SPIN_MS (5 * LIMIT_MS)

static hvd_secret_t secret;
static char uname_[HVD_TCP_UNIX_NAME_MAX];
static size_t uname_len;

typedef struct {
    int eof_while_spinning; /* spinner: the rank hung up while it still ran */
    int64_t eof_after_ms;   /* from connecting (sleeper) or from the end of the spin */
} report_t;

static int connect_listener(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, uname_, uname_len);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + uname_len);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) != 0)
        _exit(3);
    return fd;
}

/* Read (blocking) until the rank hangs up; the CHALLENGE it sends first is discarded. */
static void read_to_eof(int fd) {
    char buf[64];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR))
            return;
    }
}

/* A child that connects and never sends a HELLO; spin_ms > 0: it runs that long first. */
static pid_t stranger(int report_fd, int spin_ms) {
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    report_t r = {0};
    int fd = connect_listener();
    int64_t t0 = hvd__clock_now_ms();
    while (hvd__clock_now_ms() - t0 < spin_ms) {
        char buf[64];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            r.eof_while_spinning = 1;
            break;
        }
    }
    int64_t t1 = hvd__clock_now_ms();
    if (!r.eof_while_spinning)
        read_to_eof(fd);
    r.eof_after_ms = hvd__clock_now_ms() - t1;
    _exit(write(report_fd, &r, sizeof r) == (ssize_t)sizeof r ? 0 : 4);
}

static int always_runs(void *arg, int rank) {
    (void)arg;
    (void)rank;
    return 1; /* rank 0 "is starved": the exchange waits until interrupted */
}

typedef struct {
    hvd_transport_t *t;
    hvd_status_t st;
} waiter_t;

static void *wait_for_rank0(void *arg) {
    waiter_t *w = arg;
    uint64_t in = 0;
    hvd_xfer_t x;
    memset(&x, 0, sizeof x);
    x.peer = 0;
    x.iov[0] = (struct iovec){&in, sizeof in};
    x.iovcnt = 1;
    w->st = w->t->ops->exchange(w->t, &x, 1, "test exchange");
    return NULL;
}

static report_t collect(int fd, pid_t pid) {
    report_t r;
    memset(&r, 0xff, sizeof r);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 60000), 1);
    assert_int_equal(read(fd, &r, sizeof r), (ssize_t)sizeof r);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return r;
}

static void test_a_running_connector_is_kept_an_idle_one_dropped(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    hvd_tcp_peer_addr_t addrs[2];
    int lfd, ufd;
    assert_int_equal(hvd__socket_listen("127.0.0.1", 16, &lfd, &addrs[1].port), HVD_OK);
    addrs[0] = addrs[1];
    addrs[0].port = 0;
    for (int r = 0; r < 2; r++) {
        snprintf(addrs[r].addr, sizeof addrs[r].addr, "127.0.0.1");
        snprintf(addrs[r].host, sizeof addrs[r].host, "here");
    }
    uname_len = hvd__tcp_unix_name(&secret, 0, 1, NULL, 0, uname_);
    assert_true(uname_len > 0);
    assert_int_equal(hvd__socket_unix_listen(uname_, uname_len, 16, &ufd), HVD_OK);
    const unsigned char local[2] = {1, 1};
    hvd_tcp_config_t cfg = {.rank = 1,
                            .size = 2,
                            .peers = addrs,
                            .listen_fd = lfd,
                            .secret = &secret,
                            .timeout_ms = LIMIT_MS,
                            .local = local,
                            .unix_listen_fd = ufd,
                            .keyed_unix_names = 1,
                            .progressing = always_runs};
    hvd_transport_t *t;
    assert_int_equal(hvd__tcp_create(&cfg, &t), HVD_OK);

    int sleeper_pipe[2], spinner_pipe[2];
    assert_int_equal(pipe(sleeper_pipe), 0);
    assert_int_equal(pipe(spinner_pipe), 0);
    pid_t sleeper = stranger(sleeper_pipe[1], 0);
    pid_t spinner = stranger(spinner_pipe[1], SPIN_MS);
    waiter_t w = {.t = t};
    pthread_t th;
    pthread_create(&th, NULL, wait_for_rank0, &w);

    report_t s = collect(sleeper_pipe[0], sleeper);
    report_t r = collect(spinner_pipe[0], spinner);
    t->ops->interrupt(t, HVD_ERR_PEER_LOST, "test over");
    pthread_join(th, NULL);
    assert_int_equal(w.st, HVD_ERR_PEER_LOST);
    t->ops->destroy(t);
    for (int i = 0; i < 2; i++) {
        close(sleeper_pipe[i]);
        close(spinner_pipe[i]);
    }

    /* the idle one: at the first limit, or the second when it ran once after the accept */
    if (s.eof_after_ms < LIMIT_MS - 100 || s.eof_after_ms >= SPIN_MS - LIMIT_MS)
        fail_msg("the blocked connector was dropped after %lld ms (limit %d ms)",
                 (long long)s.eof_after_ms, LIMIT_MS);
    if (r.eof_while_spinning)
        fail_msg("the running connector was dropped while it ran");
    if (r.eof_after_ms >= SPIN_MS)
        fail_msg("the connector was kept %lld ms after it stopped running (limit %d ms)",
                 (long long)r.eof_after_ms, LIMIT_MS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_running_connector_is_kept_an_idle_one_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
