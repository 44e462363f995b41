/* The rendezvous HTTP server over real loopback sockets: the protocol of kv_protocol.h, every
 * way a request can be refused (unauthenticated, forged, replayed, malformed, oversize) with
 * no state change, held GETs released by a PUT or their deadline, the workers' store client
 * against it, and 1,000 concurrent waiting clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "rendezvous/kv_auth.h"
#include "rendezvous/kv_server.h"
#include "rendezvous/store_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static hvd_secret_t secret, other_secret;
static hvd_kv_server_t *server;
static int port;

static int setup(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    assert_int_equal(hvd__secret_generate(&other_secret), HVD_OK);
    hvd_kv_server_config_t cfg = {
        .bind_addr = "127.0.0.1", .secret = &secret, .limits = {.max_value_bytes = 1024}};
    assert_int_equal(hvd__kv_server_start(&cfg, &server), HVD_OK);
    port = hvd__kv_server_port(server);
    assert_true(port > 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    hvd__kv_server_stop(server);
    return 0;
}

static int connect_server(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Read a whole response (the server closes or we have Content-Length bytes). */
static int read_response(int fd, char *buf, size_t size, int timeout_ms) {
    size_t n = 0;
    int64_t deadline = hvd__clock_deadline_ms(timeout_ms);
    while (n < size - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, hvd__clock_remaining_ms(deadline)) <= 0)
            break;
        ssize_t r = read(fd, buf + n, size - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        char *cl = strcasestr(buf, "Content-Length: ");
        if (end && cl && n >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 16))
            break;
    }
    buf[n] = '\0';
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    return status;
}

/* Send raw bytes, return the status of the response (0: none). */
static int raw(const char *bytes, size_t len, char *resp, size_t resp_size) {
    int fd = connect_server();
    assert_int_equal(write(fd, bytes, len), (ssize_t)len);
    int status = read_response(fd, resp, resp_size, 5000);
    close(fd);
    return status;
}

/* A request; sign_with NULL sends no Authorization header. extra is more header lines. */
static int request(const char *method, const char *path, const char *body,
                   const hvd_secret_t *sign_with, const char *extra, char *resp, size_t resp_size) {
    char auth[HVD_KV_AUTH_MAX + 32] = "";
    size_t blen = body ? strlen(body) : 0;
    if (sign_with) {
        char h[HVD_KV_AUTH_MAX];
        assert_int_equal(hvd__kv_auth_sign(sign_with, method, path, body, blen, h), HVD_OK);
        snprintf(auth, sizeof auth, "Authorization: %s\r\n", h);
    }
    char req[8192];
    int n =
        snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n%s%s\r\n%s",
                 method, path, blen, auth, extra ? extra : "", body ? body : "");
    return raw(req, (size_t)n, resp, resp_size);
}

static char *body_of(char *resp) {
    char *b = strstr(resp, "\r\n\r\n");
    return b ? b + 4 : resp;
}

static void test_put_get(void **state) {
    (void)state;
    char resp[4096];
    assert_int_equal(request("GET", "/s1/k", NULL, &secret, NULL, resp, sizeof resp), 404);
    assert_int_equal(request("PUT", "/s1/k", "hello", &secret, NULL, resp, sizeof resp), 200);
    assert_int_equal(request("GET", "/s1/k", NULL, &secret, NULL, resp, sizeof resp), 200);
    assert_string_equal(body_of(resp), "hello");
    assert_int_equal(request("PUT", "/s1/host:1", "", &secret, NULL, resp, sizeof resp), 200);
    assert_int_equal(request("DELETE", "/s1/k", NULL, &secret, NULL, resp, sizeof resp), 200);
    assert_int_equal(request("GET", "/s1/k", NULL, &secret, NULL, resp, sizeof resp), 404);
}

static void test_auth_refusals(void **state) {
    (void)state;
    char resp[4096];
    /* no header: 401, nothing stored */
    assert_int_equal(request("PUT", "/s2/k", "x", NULL, NULL, resp, sizeof resp), 401);
    /* wrong secret: 403 */
    assert_int_equal(request("PUT", "/s2/k", "x", &other_secret, NULL, resp, sizeof resp), 403);
    assert_int_equal(request("GET", "/s2/k", NULL, &secret, NULL, resp, sizeof resp), 404);
    /* a stranger cannot read or delete either */
    assert_int_equal(request("PUT", "/s2/k", "secret-data", &secret, NULL, resp, sizeof resp), 200);
    assert_int_equal(request("GET", "/s2/k", NULL, NULL, NULL, resp, sizeof resp), 401);
    assert_null(strstr(resp, "secret-data"));
    assert_int_equal(request("DELETE", "/s2/k", NULL, &other_secret, NULL, resp, sizeof resp), 403);
    assert_int_equal(request("GET", "/s2/k", NULL, &secret, NULL, resp, sizeof resp), 200);
    /* a signature for one body does not cover another */
    char h[HVD_KV_AUTH_MAX], req[2048];
    assert_int_equal(hvd__kv_auth_sign(&secret, "PUT", "/s2/k", "good", 4, h), HVD_OK);
    int n = snprintf(req, sizeof req,
                     "PUT /s2/k HTTP/1.1\r\nContent-Length: 4\r\nAuthorization: %s\r\n\r\nevil", h);
    assert_int_equal(raw(req, (size_t)n, resp, sizeof resp), 403);
    assert_int_equal(request("GET", "/s2/k", NULL, &secret, NULL, resp, sizeof resp), 200);
    assert_string_equal(body_of(resp), "secret-data");
    /* a captured request replayed */
    n = snprintf(req, sizeof req,
                 "PUT /s2/k HTTP/1.1\r\nContent-Length: 4\r\nAuthorization: %s\r\n\r\ngood", h);
    assert_int_equal(raw(req, (size_t)n, resp, sizeof resp), 200);
    assert_int_equal(request("PUT", "/s2/k", "newer", &secret, NULL, resp, sizeof resp), 200);
    assert_int_equal(raw(req, (size_t)n, resp, sizeof resp), 403);
    assert_int_equal(request("GET", "/s2/k", NULL, &secret, NULL, resp, sizeof resp), 200);
    assert_string_equal(body_of(resp), "newer");
}

static void test_malformed(void **state) {
    (void)state;
    char resp[4096];
    /* bad paths (authenticated, so it is the path that is refused) */
    const char *bad_paths[] = {"/onlyscope", "/a/b/c", "/a b/c",     "/a/b%2Fc",
                               "/%00/x",     "//k",    "/a/b?wait=1"};
    for (size_t i = 0; i < sizeof bad_paths / sizeof *bad_paths; i++) {
        int st = request("GET", bad_paths[i], NULL, &secret, NULL, resp, sizeof resp);
        if (st != 400 && st != 403)
            fail_msg("path %s: got %d", bad_paths[i], st);
    }
    assert_int_equal(request("GET", "/a/b/c", NULL, &secret, NULL, resp, sizeof resp), 400);
    assert_int_equal(request("PUT", "/s3/", "x", &secret, NULL, resp, sizeof resp), 400);
    assert_int_equal(request("POST", "/s3/k", "x", &secret, NULL, resp, sizeof resp), 501);
    assert_int_equal(
        request("GET", "/s3/k", NULL, &secret, "X-Hvd-Wait-Ms: soon\r\n", resp, sizeof resp), 400);
    /* PUT without a length */
    const char no_len[] = "PUT /s3/k HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(raw(no_len, sizeof no_len - 1, resp, sizeof resp), 411);
    /* garbage: answered 400 or dropped, never a crash; the server serves on */
    const char *garbage[] = {"\x01\x02\x03\r\n\r\n", "GET\r\n\r\n", "HELLO WORLD\r\n\r\n",
                             "GET / HTTP/9.9\r\n\r\n"};
    for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) {
        int st = raw(garbage[i], strlen(garbage[i]), resp, sizeof resp);
        assert_true(st == 0 || (st >= 400 && st < 600));
    }
    /* a huge header block is bounded by the server */
    size_t big = 200000;
    char *huge = malloc(big);
    memcpy(huge, "GET /s3/k HTTP/1.1\r\nX-Pad: ", 27);
    memset(huge + 27, 'a', big - 31);
    memcpy(huge + big - 4, "\r\n\r\n", 4);
    int fd = connect_server();
    ssize_t w = send(fd, huge, big, MSG_NOSIGNAL);
    (void)w;
    int st = read_response(fd, resp, sizeof resp, 5000);
    close(fd);
    free(huge);
    assert_true(st == 0 || st == 431 || st == 413 || st == 400);
    assert_int_equal(request("PUT", "/s3/ok", "still here", &secret, NULL, resp, sizeof resp), 200);
}

static void test_oversize(void **state) {
    (void)state;
    char resp[4096];
    /* announced too large: 413 before the body is read (we never send it) */
    const char head[] = "PUT /s4/k HTTP/1.1\r\nContent-Length: 5000000\r\n\r\n";
    assert_int_equal(raw(head, sizeof head - 1, resp, sizeof resp), 413);
    /* chunked, over the limit: 413 */
    char req[4096];
    char chunk[1500];
    memset(chunk, 'z', sizeof chunk);
    int n =
        snprintf(req, sizeof req,
                 "PUT /s4/k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%.*s\r\n0\r\n\r\n",
                 (unsigned)sizeof chunk, (int)sizeof chunk, chunk);
    assert_int_equal(raw(req, (size_t)n, resp, sizeof resp), 413);
    /* a signed value just over the limit: 413, nothing stored; at the limit: fine */
    char *v = malloc(1026);
    memset(v, 'v', 1025);
    v[1025] = '\0';
    assert_int_equal(request("PUT", "/s4/k", v, &secret, NULL, resp, sizeof resp), 413);
    assert_int_equal(request("GET", "/s4/k", NULL, &secret, NULL, resp, sizeof resp), 404);
    v[1024] = '\0';
    assert_int_equal(request("PUT", "/s4/k", v, &secret, NULL, resp, sizeof resp), 200);
    free(v);
}

static void test_wait(void **state) {
    (void)state;
    hvd_store_client_t *c;
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &secret, &c), HVD_OK);
    /* a held GET times out at its deadline with 404 -> HVD_ERR_TIMEOUT */
    uint8_t *v;
    size_t n;
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__store_get(c, "w", "late", 1, hvd__clock_deadline_ms(300), &v, &n),
                     HVD_ERR_TIMEOUT);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took >= 280 && took < 3000);
    assert_non_null(strstr(hvd_last_error(), "w/late"));
    /* a held GET released by a PUT from another client */
    pid_t pid = fork();
    if (pid == 0) {
        hvd__clock_sleep_ms(200);
        hvd_store_client_t *c2;
        hvd__store_client_create("127.0.0.1", port, &secret, &c2);
        _exit(hvd__store_put(c2, "w", "late", "arrived", 7, hvd__clock_deadline_ms(5000)) == HVD_OK
                  ? 0
                  : 1);
    }
    t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__store_get(c, "w", "late", 1, hvd__clock_deadline_ms(10000), &v, &n),
                     HVD_OK);
    took = hvd__clock_now_ms() - t0;
    assert_true(took < 5000);
    assert_string_equal((char *)v, "arrived");
    free(v);
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(status, 0);
    /* whole scope with a minimum count */
    for (int i = 0; i < 3; i++) {
        char k[16];
        snprintf(k, sizeof k, "rank_%d", i);
        assert_int_equal(hvd__store_put(c, "ws", k, k, strlen(k), hvd__clock_deadline_ms(5000)),
                         HVD_OK);
    }
    hvd_store_scope_t sc;
    assert_int_equal(hvd__store_get_scope(c, "ws", 3, hvd__clock_deadline_ms(5000), &sc), HVD_OK);
    assert_int_equal(sc.count, 3);
    hvd__store_scope_fini(&sc);
    assert_int_equal(hvd__store_get_scope(c, "ws", 4, hvd__clock_deadline_ms(300), &sc),
                     HVD_ERR_TIMEOUT);
    assert_int_equal(sc.count, 3); /* what there was */
    hvd__store_scope_fini(&sc);
    /* a client with the wrong secret is told so */
    hvd_store_client_t *bad;
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &other_secret, &bad), HVD_OK);
    assert_int_equal(hvd__store_put(bad, "ws", "x", "y", 1, hvd__clock_deadline_ms(5000)),
                     HVD_ERR_AUTH);
    assert_non_null(strstr(hvd_last_error(), "secret"));
    hvd__store_client_destroy(bad);
    hvd__store_client_destroy(c);
}

/* 1,000 clients, each holding a GET for the same key, all released by one PUT; meanwhile
 * 100 other clients PUT and GET their own keys. */
#define N_WAITERS 1000

static void test_concurrent_clients(void **state) {
    (void)state;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2 * N_WAITERS + 100)
        fail_msg("RLIMIT_NOFILE %lu too low for the concurrency test", (unsigned long)rl.rlim_cur);
    int *fds = calloc(N_WAITERS, sizeof *fds);
    for (int i = 0; i < N_WAITERS; i++) {
        char h[HVD_KV_AUTH_MAX], req[1024];
        assert_int_equal(hvd__kv_auth_sign(&secret, "GET", "/conc/go", NULL, 0, h), HVD_OK);
        int n = snprintf(
            req, sizeof req,
            "GET /conc/go HTTP/1.1\r\nAuthorization: %s\r\nX-Hvd-Wait-Ms: 60000\r\n\r\n", h);
        fds[i] = connect_server();
        assert_int_equal(write(fds[i], req, (size_t)n), n);
    }
    /* other traffic while they are held */
    hvd_store_client_t *c;
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &secret, &c), HVD_OK);
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(hvd__store_put(c, "conc2", k, k, strlen(k), hvd__clock_deadline_ms(10000)),
                         HVD_OK);
    }
    hvd_store_scope_t sc;
    assert_int_equal(hvd__store_get_scope(c, "conc2", 100, hvd__clock_deadline_ms(10000), &sc),
                     HVD_OK);
    assert_int_equal(sc.count, 100);
    hvd__store_scope_fini(&sc);
    /* nobody has been answered yet */
    int early = 0;
    for (int i = 0; i < N_WAITERS; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        early += poll(&p, 1, 0) > 0;
    }
    assert_int_equal(early, 0);
    assert_int_equal(hvd__store_put(c, "conc", "go", "GO!", 3, hvd__clock_deadline_ms(10000)),
                     HVD_OK);
    int ok = 0;
    for (int i = 0; i < N_WAITERS; i++) {
        char resp[1024];
        int st = read_response(fds[i], resp, sizeof resp, 20000);
        if (st == 200 && strcmp(body_of(resp), "GO!") == 0)
            ok++;
        close(fds[i]);
    }
    assert_int_equal(ok, N_WAITERS);
    free(fds);
    hvd__store_client_destroy(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get),   cmocka_unit_test(test_auth_refusals),
        cmocka_unit_test(test_malformed), cmocka_unit_test(test_oversize),
        cmocka_unit_test(test_wait),      cmocka_unit_test(test_concurrent_clients),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
