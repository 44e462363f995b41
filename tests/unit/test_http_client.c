/* The workers' HTTP client against a scripted one-connection server on loopback: responses
 * parsed exactly, and every failure (refused, silent, truncated, oversize, malformed) turned
 * into the right status before its deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "http/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    int listen_fd;
    int port;
    const char *reply; /* sent after the request head is read; NULL: say nothing */
    size_t reply_len;
    int hold_ms; /* keep the connection open this long after replying */
    char request[4096];
    pthread_t thread;
} fake_server_t;

static void *serve_one(void *arg) {
    fake_server_t *s = arg;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    size_t n = 0;
    while (n < sizeof s->request - 1) {
        ssize_t r = read(fd, s->request + n, sizeof s->request - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        s->request[n] = '\0';
        char *end = strstr(s->request, "\r\n\r\n");
        if (end) {
            /* read the body announced by Content-Length, if any */
            char *cl = strstr(s->request, "Content-Length: ");
            size_t want = cl ? (size_t)atoi(cl + 16) : 0;
            if (n >= (size_t)(end + 4 - s->request) + want)
                break;
        }
    }
    if (s->reply)
        (void)!write(fd, s->reply, s->reply_len);
    hvd__clock_sleep_ms(s->hold_ms);
    close(fd);
    return NULL;
}

static void server_start(fake_server_t *s, const char *reply, int hold_ms) {
    memset(s, 0, sizeof *s);
    s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->listen_fd, 4), 0);
    socklen_t len = sizeof a;
    getsockname(s->listen_fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    s->reply = reply;
    s->reply_len = reply ? strlen(reply) : 0;
    s->hold_ms = hold_ms;
    pthread_create(&s->thread, NULL, serve_one, s);
}

static void server_stop(fake_server_t *s) {
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
}

static hvd_status_t do_request(int port, const char *method, const char *body, size_t max_body,
                               int timeout_ms, hvd_http_response_t *resp) {
    hvd_http_header_t h[] = {{"X-Test", "yes"}};
    hvd_http_request_t req = {.host = "127.0.0.1",
                              .port = port,
                              .method = method,
                              .target = "/scope/key",
                              .headers = h,
                              .header_count = 1,
                              .body = body,
                              .body_len = body ? strlen(body) : 0,
                              .max_response_body = max_body,
                              .deadline_ms = hvd__clock_deadline_ms(timeout_ms)};
    return hvd__http_request(&req, resp);
}

static void test_ok_response(void **state) {
    (void)state;
    fake_server_t s;
    server_start(&s, "HTTP/1.0 200 OK\r\nServer: x\r\nContent-Length: 5\r\n\r\nhello", 0);
    hvd_http_response_t resp;
    assert_int_equal(do_request(s.port, "PUT", "value", 100, 5000, &resp), HVD_OK);
    server_stop(&s);
    assert_int_equal(resp.status, 200);
    assert_int_equal(resp.body_len, 5);
    assert_string_equal((char *)resp.body, "hello");
    hvd__http_response_fini(&resp);
    /* the request the server saw */
    assert_true(strncmp(s.request, "PUT /scope/key HTTP/1.1\r\n", 25) == 0);
    assert_non_null(strstr(s.request, "Content-Length: 5\r\n"));
    assert_non_null(strstr(s.request, "X-Test: yes\r\n"));
    assert_non_null(strstr(s.request, "\r\n\r\nvalue"));
}

static void test_empty_and_unsized(void **state) {
    (void)state;
    fake_server_t s;
    server_start(&s, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 0);
    hvd_http_response_t resp;
    assert_int_equal(do_request(s.port, "GET", NULL, 100, 5000, &resp), HVD_OK);
    server_stop(&s);
    assert_int_equal(resp.status, 404);
    assert_int_equal(resp.body_len, 0);
    hvd__http_response_fini(&resp);
    /* no Content-Length: body runs to EOF, still bounded */
    server_start(&s, "HTTP/1.0 200 OK\r\n\r\nto the end", 0);
    assert_int_equal(do_request(s.port, "GET", NULL, 100, 5000, &resp), HVD_OK);
    server_stop(&s);
    assert_string_equal((char *)resp.body, "to the end");
    hvd__http_response_fini(&resp);
    server_start(&s, "HTTP/1.0 200 OK\r\n\r\nto the end", 0);
    assert_int_equal(do_request(s.port, "GET", NULL, 4, 5000, &resp), HVD_ERR_TOO_LARGE);
    server_stop(&s);
}

static void test_failures(void **state) {
    (void)state;
    fake_server_t s;
    hvd_http_response_t resp;
    /* oversize announced body: refused before reading it */
    server_start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n", 0);
    assert_int_equal(do_request(s.port, "GET", NULL, 1000, 5000, &resp), HVD_ERR_TOO_LARGE);
    assert_non_null(strstr(hvd_last_error(), "over the limit"));
    server_stop(&s);
    /* truncated body */
    server_start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0);
    assert_int_equal(do_request(s.port, "GET", NULL, 1000, 5000, &resp), HVD_ERR_PEER_LOST);
    server_stop(&s);
    /* malformed status line */
    server_start(&s, "HTTP/9 banana\r\n\r\n", 0);
    assert_int_equal(do_request(s.port, "GET", NULL, 1000, 5000, &resp), HVD_ERR_PROTOCOL);
    server_stop(&s);
    /* closed without a word */
    server_start(&s, NULL, 0);
    assert_int_equal(do_request(s.port, "GET", NULL, 1000, 5000, &resp), HVD_ERR_PEER_LOST);
    assert_non_null(strstr(hvd_last_error(), "127.0.0.1:"));
    server_stop(&s);
    /* silent server: the deadline holds */
    server_start(&s, NULL, 1500);
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(do_request(s.port, "GET", NULL, 1000, 300, &resp), HVD_ERR_TIMEOUT);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took >= 250 && took < 1400);
    server_stop(&s);
    /* nobody listening */
    server_start(&s, NULL, 0);
    int port = s.port;
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* unblock the acceptor */
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd);
    server_stop(&s);
    assert_int_equal(do_request(port, "GET", NULL, 1000, 2000, &resp), HVD_ERR_PEER_LOST);
    assert_non_null(strstr(hvd_last_error(), "cannot connect"));
}

static void test_parse_head(void **state) {
    (void)state;
    int status;
    long long cl;
    const char *ok = "HTTP/1.1 200 OK\r\ncontent-LENGTH:  42 \r\n\r\n";
    assert_int_equal(hvd__http_parse_head(ok, strlen(ok), &status, &cl), HVD_OK);
    assert_int_equal(status, 200);
    assert_int_equal(cl, 42);
    const char *none = "HTTP/1.0 413 Too Large\r\n\r\n";
    assert_int_equal(hvd__http_parse_head(none, strlen(none), &status, &cl), HVD_OK);
    assert_int_equal(status, 413);
    assert_int_equal(cl, -1);
    const char *bad[] = {"",
                         "HTTP/1.1 2x0 OK\r\n\r\n",
                         "SMTP/1.1 200 OK\r\n\r\n",
                         "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
                         "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                         "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                         "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(hvd__http_parse_head(bad[i], strlen(bad[i]), &status, &cl),
                         HVD_ERR_PROTOCOL);
}

static void test_head_value(void **state) {
    (void)state;
    char v[8];
    const char *h = "HTTP/1.1 200 OK\r\nX-Age:  42 \r\nx-ageless: 7\r\n\r\nX-After: 1\r\n";
    assert_int_equal(hvd__http_head_value(h, strlen(h), "x-age", v, sizeof v), 1);
    assert_string_equal(v, "42");
    assert_int_equal(hvd__http_head_value(h, strlen(h), "X-Ageless", v, sizeof v), 1);
    assert_string_equal(v, "7");
    /* not a prefix match, nothing after the blank line, nothing in the status line */
    assert_int_equal(hvd__http_head_value(h, strlen(h), "X-Ag", v, sizeof v), 0);
    assert_string_equal(v, "");
    assert_int_equal(hvd__http_head_value(h, strlen(h), "X-After", v, sizeof v), 0);
    assert_int_equal(hvd__http_head_value(h, strlen(h), "HTTP/1.1 200 OK", v, sizeof v), 0);
    /* a value that does not fit is absent, not cut */
    const char *big = "HTTP/1.1 200 OK\r\nX-Age: 12345678\r\n\r\n";
    assert_int_equal(hvd__http_head_value(big, strlen(big), "X-Age", v, sizeof v), 0);
    assert_string_equal(v, "");
    /* a bare CR inside the line (found by fuzz_http_head) makes it no value */
    const char *cr = "HTTP/1.1 200 OK\nX-Age: 12\r34\n\r\n";
    assert_int_equal(hvd__http_head_value(cr, strlen(cr), "X-Age", v, sizeof v), 0);
    assert_string_equal(v, "");
    const char *empty = "HTTP/1.1 200 OK\r\nX-Age:\r\n\r\n";
    assert_int_equal(hvd__http_head_value(empty, strlen(empty), "X-Age", v, sizeof v), 1);
    assert_string_equal(v, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_response), cmocka_unit_test(test_empty_and_unsized),
        cmocka_unit_test(test_failures),    cmocka_unit_test(test_parse_head),
        cmocka_unit_test(test_head_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
