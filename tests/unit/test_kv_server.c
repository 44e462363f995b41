/* The rendezvous HTTP server over real loopback sockets, driven by a small raw HTTP client
 * written here (so malformed requests can be sent too) that signs with hvd__kv_auth_sign:
 *   - start-up errors (no secret, bad address, port in use), the reported port;
 *   - PUT/GET/DELETE, 404 with an empty body, empty values, launcher writes to the store;
 *   - held GETs released by a PUT from another thread or by a direct store write, and held
 *     GETs answered 404 at their deadline; whole-scope reads with a minimum count, and their
 *     count-only form;
 *   - refusals change nothing: no Authorization (401), wrong secret, forged body, other
 *     path or method, replayed request (403);
 *   - malformed requests (garbage, bad path characters, 3 segments, query strings,
 *     percent-encoding, bad methods, missing or unwanted lengths, bad wait headers) get
 *     400/411/501 and the server keeps serving;
 *   - oversize bodies: 413 before reading an announced one, 413 for a chunked one, 507 when
 *     the store is full;
 *   - the 3 s request timeout, the connection limit (extra clients wait their turn), held
 *     clients that hang up giving their connection back, the bound on buffered request
 *     bodies (503 beyond it), stop with held requests (503);
 *   - 1,000 concurrent waiting clients released by one PUT while other clients PUT and GET,
 *     and the workers' store client against the server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "common/clock.h"
#include "rendezvous/kv_auth.h"
#include "rendezvous/kv_protocol.h"
#include "runner/rendezvous/kv_server.h"
#include "rendezvous/store_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_VALUE 1024

static hvd_secret_t secret, other_secret;
static hvd_kv_server_t *server;
static hvd_kv_store_t *store;
static int port;

/* ---- a raw HTTP client ---- */

typedef struct {
    int status; /* 0: no response (closed, reset or timed out) */
    char head[4096];
    uint8_t *body;
    size_t body_len;
} resp_t;

static void resp_fini(resp_t *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int connect_port(int p) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)p),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        fail_msg("connect to port %d: %s", p, strerror(errno));
    return fd;
}

static void send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the server may close early (e.g. after an early 413) */
        c += w;
        n -= (size_t)w;
    }
}

/* Read one response: the head, then Content-Length bytes of body (none for a HEAD request,
 * whose Content-Length describes the body it would have had). */
static int read_resp_for(int fd, resp_t *r, int timeout_ms, int head_only) {
    memset(r, 0, sizeof *r);
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap + 1);
    int64_t deadline = hvd__clock_deadline_ms(timeout_ms);
    size_t head_len = 0, want = SIZE_MAX;
    for (;;) {
        if (head_len && n >= head_len + want)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, hvd__clock_remaining_ms(deadline)) <= 0)
            break;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        ssize_t got = recv(fd, buf + n, cap - n, 0);
        if (got <= 0)
            break;
        n += (size_t)got;
        buf[n] = '\0';
        if (!head_len) {
            char *end = strstr(buf, "\r\n\r\n");
            if (!end)
                continue;
            head_len = (size_t)(end + 4 - buf);
            char *cl = strcasestr(buf, "\r\nContent-Length:");
            want = cl && cl < end && !head_only ? (size_t)strtoul(cl + 17, NULL, 10) : 0;
        }
    }
    if (head_len && n >= head_len + want) {
        size_t h = head_len < sizeof r->head ? head_len : sizeof r->head - 1;
        memcpy(r->head, buf, h);
        r->head[h] = '\0';
        r->body = malloc(want + 1);
        memcpy(r->body, buf + head_len, want);
        r->body[want] = 0;
        r->body_len = want;
        sscanf(buf, "HTTP/1.%*d %d", &r->status);
    }
    free(buf);
    return r->status;
}

static int read_resp(int fd, resp_t *r, int timeout_ms) {
    return read_resp_for(fd, r, timeout_ms, 0);
}

static int raw_port(int p, const void *bytes, size_t len, resp_t *r) {
    int fd = connect_port(p);
    send_all(fd, bytes, len);
    int st = read_resp_for(fd, r, 10000, len > 5 && memcmp(bytes, "HEAD ", 5) == 0);
    close(fd);
    return st;
}

static int raw(const void *bytes, size_t len, resp_t *r) {
    return raw_port(port, bytes, len, r);
}

/* Build a request into out. sign: NULL = no Authorization; sign_target: what the signature
 * covers (NULL: target). Content-Length is sent for PUT always, for others with a body. */
static size_t build(char *out, size_t size, const char *method, const char *target,
                    const void *body, size_t blen, const hvd_secret_t *sign,
                    const char *sign_target, const char *extra) {
    char auth[HVD_KV_AUTH_MAX + 32] = "";
    if (sign) {
        char h[HVD_KV_AUTH_MAX];
        assert_int_equal(
            hvd__kv_auth_sign(sign, method, sign_target ? sign_target : target, body, blen, h),
            HVD_OK);
        snprintf(auth, sizeof auth, "Authorization: %s\r\n", h);
    }
    char cl[64] = "";
    if (strcmp(method, "PUT") == 0 || blen)
        snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", blen);
    int n = snprintf(out, size, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s%s\r\n", method, target,
                     cl, auth, extra ? extra : "");
    assert_true(n > 0 && (size_t)n + blen <= size);
    if (blen)
        memcpy(out + n, body, blen);
    return (size_t)n + blen;
}

static int request(const char *method, const char *target, const char *body,
                   const hvd_secret_t *sign, const char *extra, resp_t *r) {
    char req[8192];
    size_t n =
        build(req, sizeof req, method, target, body, body ? strlen(body) : 0, sign, NULL, extra);
    return raw(req, n, r);
}

/* Status only; the response is dropped. */
static int status_of(const char *method, const char *target, const char *body,
                     const hvd_secret_t *sign, const char *extra) {
    resp_t r;
    int st = request(method, target, body, sign, extra, &r);
    resp_fini(&r);
    return st;
}

static int get_value(const char *target, char *out, size_t size) {
    resp_t r;
    int st = request("GET", target, NULL, &secret, NULL, &r);
    snprintf(out, size, "%s", r.body ? (char *)r.body : "");
    resp_fini(&r);
    return st;
}

static void assert_serving(void) {
    char v[64];
    assert_int_equal(status_of("PUT", "/alive/k", "yes", &secret, NULL), 200);
    assert_int_equal(get_value("/alive/k", v, sizeof v), 200);
    assert_string_equal(v, "yes");
}

/* ---- fixtures ---- */

static int setup(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    assert_int_equal(hvd__secret_generate(&other_secret), HVD_OK);
    hvd_kv_server_config_t cfg = {
        .bind_addr = "127.0.0.1", .secret = &secret, .max_value_bytes = MAX_VALUE};
    assert_int_equal(hvd__kv_server_start(&cfg, &server), HVD_OK);
    port = hvd__kv_server_port(server);
    store = hvd__kv_server_store(server);
    assert_true(port > 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    hvd__kv_server_stop(server);
    return 0;
}

/* ---- tests ---- */

static void test_start_errors(void **state) {
    (void)state;
    hvd_kv_server_t *s = NULL;
    hvd_kv_server_config_t cfg = {.bind_addr = "127.0.0.1"};
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_ERR_INVALID_ARG);
    cfg.secret = &secret;
    cfg.port = 70000;
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_ERR_INVALID_ARG);
    cfg.port = 0;
    cfg.bind_addr = "not-an-address";
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "not-an-address"));
    /* the port of a running server is taken: the error names it */
    cfg.bind_addr = "127.0.0.1";
    cfg.port = port;
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_ERR_IO);
    char want[32];
    snprintf(want, sizeof want, ":%d", port);
    assert_non_null(strstr(hvd_last_error(), want));
    assert_null(s);
    /* an explicit free port is used as given; no address means every interface */
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(probe, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(probe, (struct sockaddr *)&a, &alen), 0);
    close(probe);
    cfg.bind_addr = NULL;
    cfg.port = ntohs(a.sin_port);
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_OK);
    assert_int_equal(hvd__kv_server_port(s), cfg.port);
    resp_t r;
    char req[1024];
    size_t n = build(req, sizeof req, "PUT", "/x/y", "1", 1, &secret, NULL, NULL);
    assert_int_equal(raw_port(cfg.port, req, n, &r), 200);
    resp_fini(&r);
    hvd__kv_server_stop(s);
    hvd__kv_server_stop(NULL);
}

static void test_put_get_delete(void **state) {
    (void)state;
    resp_t r;
    char v[256];
    /* missing: 404 with an empty body */
    assert_int_equal(request("GET", "/s1/k", NULL, &secret, NULL, &r), 404);
    assert_int_equal(r.body_len, 0);
    assert_non_null(strcasestr(r.head, "Content-Length: 0"));
    resp_fini(&r);
    assert_int_equal(status_of("PUT", "/s1/k", "hello", &secret, NULL), 200);
    assert_int_equal(get_value("/s1/k", v, sizeof v), 200);
    assert_string_equal(v, "hello");
    assert_int_equal(status_of("PUT", "/s1/k", "again", &secret, NULL), 200); /* overwrite */
    assert_int_equal(get_value("/s1/k", v, sizeof v), 200);
    assert_string_equal(v, "again");
    /* an empty value, and names with ':' '.' '-' */
    assert_int_equal(status_of("PUT", "/local_h-1.x/h-1.x:0", "", &secret, NULL), 200);
    assert_int_equal(request("GET", "/local_h-1.x/h-1.x:0", NULL, &secret, NULL, &r), 200);
    assert_int_equal(r.body_len, 0);
    resp_fini(&r);
    /* binary bytes survive */
    const char bin[] = {'a', 0, 'b', (char)0xff};
    char req[1024];
    size_t n = build(req, sizeof req, "PUT", "/s1/bin", bin, sizeof bin, &secret, NULL, NULL);
    assert_int_equal(raw(req, n, &r), 200);
    resp_fini(&r);
    assert_int_equal(request("GET", "/s1/bin", NULL, &secret, NULL, &r), 200);
    assert_int_equal(r.body_len, sizeof bin);
    assert_memory_equal(r.body, bin, sizeof bin);
    resp_fini(&r);
    /* what the server stored is what the launcher reads, and the other way round */
    uint8_t *sv;
    size_t sl;
    assert_int_equal(hvd__kv_store_get(store, "s1", "k", &sv, &sl), HVD_OK);
    assert_string_equal((char *)sv, "again");
    free(sv);
    assert_int_equal(hvd__kv_store_put(store, "launcher", "plan", "p", 1), HVD_OK);
    assert_int_equal(get_value("/launcher/plan", v, sizeof v), 200);
    assert_string_equal(v, "p");
    /* DELETE in an ad-hoc scope removes the key */
    assert_int_equal(status_of("DELETE", "/s1/k", NULL, &secret, NULL), 200);
    assert_int_equal(status_of("GET", "/s1/k", NULL, &secret, NULL), 404);
    assert_int_equal(status_of("DELETE", "/s1/never", NULL, &secret, NULL), 200);
    /* DELETE in a predefined scope marks a rank finished; the last one clears the scope */
    const char *names[] = {"global"};
    int sizes[] = {2};
    assert_int_equal(hvd__kv_server_reset(server, names, sizes, 1), HVD_OK);
    assert_int_equal(status_of("GET", "/launcher/plan", NULL, &secret, NULL), 404);
    assert_int_equal(status_of("PUT", "/global/0", "a0", &secret, NULL), 200);
    assert_int_equal(status_of("PUT", "/global/1", "a1", &secret, NULL), 200);
    assert_int_equal(status_of("DELETE", "/global/0", NULL, &secret, NULL), 200);
    assert_int_equal(status_of("DELETE", "/global/0", NULL, &secret, NULL), 200);
    assert_int_equal(get_value("/global/1", v, sizeof v), 200);
    assert_int_equal(status_of("DELETE", "/global/1", NULL, &secret, NULL), 200);
    assert_int_equal(status_of("GET", "/global/1", NULL, &secret, NULL), 404);
    assert_int_equal(status_of("GET", "/global/0", NULL, &secret, NULL), 404);
    assert_int_equal(hvd__kv_server_reset(server, NULL, NULL, 0), HVD_OK);
}

typedef struct {
    int delay_ms;
    const char *target, *value;
    int direct; /* write through the store API instead of HTTP */
    int status;
} late_put_t;

static void *late_put(void *arg) {
    late_put_t *lp = arg;
    hvd__clock_sleep_ms(lp->delay_ms);
    if (lp->direct) {
        char scope[64], *key;
        snprintf(scope, sizeof scope, "%s", lp->target + 1);
        key = strchr(scope, '/');
        *key++ = '\0';
        lp->status = hvd__kv_store_put(store, scope, key, lp->value, strlen(lp->value)) == HVD_OK
                         ? 200
                         : 500;
    } else {
        lp->status = status_of("PUT", lp->target, lp->value, &secret, NULL);
    }
    return NULL;
}

static void test_wait(void **state) {
    (void)state;
    resp_t r;
    /* not there: held until the deadline, then 404 */
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(request("GET", "/w/late", NULL, &secret, "X-Hvd-Wait-Ms: 200\r\n", &r), 404);
    int64_t took = hvd__clock_now_ms() - t0;
    resp_fini(&r);
    assert_true(took >= 190);
    assert_true(took < 3000);
    /* released by a PUT from another thread, long before the deadline */
    for (int direct = 0; direct < 2; direct++) {
        late_put_t lp = {150, direct ? "/w/direct" : "/w/late", direct ? "launcher" : "arrived",
                         direct, 0};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, late_put, &lp), 0);
        t0 = hvd__clock_now_ms();
        assert_int_equal(request("GET", lp.target, NULL, &secret, "X-Hvd-Wait-Ms: 20000\r\n", &r),
                         200);
        took = hvd__clock_now_ms() - t0;
        assert_string_equal((char *)r.body, lp.value);
        resp_fini(&r);
        pthread_join(th, NULL);
        assert_int_equal(lp.status, 200);
        assert_true(took >= 100);
        assert_true(took < 5000);
    }
    /* a present key is answered at once even with a wait */
    t0 = hvd__clock_now_ms();
    assert_int_equal(status_of("GET", "/w/late", NULL, &secret, "X-Hvd-Wait-Ms: 20000\r\n"), 200);
    assert_true(hvd__clock_now_ms() - t0 < 2000);
    /* a PUT to another key of the scope does not release it; its own key does */
    late_put_t other = {50, "/w/other", "o", 0, 0}, mine = {300, "/w/mine", "m", 0, 0};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, late_put, &other), 0);
    assert_int_equal(pthread_create(&t2, NULL, late_put, &mine), 0);
    t0 = hvd__clock_now_ms();
    assert_int_equal(request("GET", "/w/mine", NULL, &secret, "X-Hvd-Wait-Ms: 20000\r\n", &r), 200);
    assert_true(hvd__clock_now_ms() - t0 >= 250);
    assert_string_equal((char *)r.body, "m");
    resp_fini(&r);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
}

static void decode(resp_t *r, hvd_store_scope_t *sc) {
    assert_int_equal(hvd__store_scope_decode(r->body, r->body_len, sc), HVD_OK);
}

static void test_scope_read(void **state) {
    (void)state;
    resp_t r;
    hvd_store_scope_t sc;
    assert_int_equal(request("GET", "/ws/", NULL, &secret, NULL, &r), 200); /* unknown: empty */
    assert_int_equal(r.body_len, 8);
    assert_memory_equal(r.body, HVD_KV_SCOPE_MAGIC "\0\0\0\0", 8);
    resp_fini(&r);
    assert_int_equal(status_of("PUT", "/ws/rank_2", "c", &secret, NULL), 200);
    assert_int_equal(status_of("PUT", "/ws/rank_0", "a", &secret, NULL), 200);
    assert_int_equal(status_of("PUT", "/ws/rank_1", "b", &secret, NULL), 200);
    assert_int_equal(request("GET", "/ws/", NULL, &secret, NULL, &r), 200);
    decode(&r, &sc);
    assert_int_equal(sc.count, 3);
    assert_string_equal(sc.entries[0].key, "rank_0");
    assert_string_equal((char *)sc.entries[2].value, "c");
    hvd__store_scope_fini(&sc);
    resp_fini(&r);
    /* short of the minimum count at the deadline: 200 with what there is */
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(
        request("GET", "/ws/", NULL, &secret, "X-Hvd-Wait-Ms: 200\r\nX-Hvd-Min-Count: 5\r\n", &r),
        200);
    assert_true(hvd__clock_now_ms() - t0 >= 190);
    decode(&r, &sc);
    assert_int_equal(sc.count, 3);
    hvd__store_scope_fini(&sc);
    resp_fini(&r);
    /* released when the count is reached (a PUT that does not reach it does not) */
    late_put_t p3 = {50, "/ws/rank_3", "d", 0, 0}, p4 = {250, "/ws/rank_4", "e", 0, 0};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, late_put, &p3), 0);
    assert_int_equal(pthread_create(&t2, NULL, late_put, &p4), 0);
    t0 = hvd__clock_now_ms();
    assert_int_equal(
        request("GET", "/ws/", NULL, &secret, "X-Hvd-Wait-Ms: 20000\r\nX-Hvd-Min-Count: 5\r\n", &r),
        200);
    int64_t took = hvd__clock_now_ms() - t0;
    assert_true(took >= 200 && took < 5000);
    decode(&r, &sc);
    assert_int_equal(sc.count, 5);
    assert_string_equal(sc.entries[4].key, "rank_4");
    hvd__store_scope_fini(&sc);
    resp_fini(&r);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    /* the workers' store client speaks the same protocol */
    hvd_store_client_t *c;
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &secret, &c), HVD_OK);
    assert_int_equal(hvd__store_get_scope(c, "ws", 5, hvd__clock_deadline_ms(5000), &sc), HVD_OK);
    assert_int_equal(sc.count, 5);
    hvd__store_scope_fini(&sc);
    assert_int_equal(hvd__store_get_scope(c, "ws", 6, hvd__clock_deadline_ms(300), &sc),
                     HVD_ERR_TIMEOUT);
    assert_int_equal(sc.count, 5);
    hvd__store_scope_fini(&sc);
    assert_int_equal(hvd__store_put(c, "ws", "client", "cv", 2, hvd__clock_deadline_ms(5000)),
                     HVD_OK);
    uint8_t *v;
    size_t n;
    assert_int_equal(hvd__store_get(c, "ws", "client", 1, hvd__clock_deadline_ms(5000), &v, &n),
                     HVD_OK);
    assert_string_equal((char *)v, "cv");
    free(v);
    assert_int_equal(hvd__store_delete(c, "ws", "client", hvd__clock_deadline_ms(5000)), HVD_OK);
    assert_false(hvd__kv_store_has(store, "ws", "client"));
    hvd__store_client_destroy(c);
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &other_secret, &c), HVD_OK);
    assert_int_equal(hvd__store_put(c, "ws", "x", "y", 1, hvd__clock_deadline_ms(5000)),
                     HVD_ERR_AUTH);
    hvd__store_client_destroy(c);
}

/* The abort key ends a held scope read at once (a launcher's direct write, as horovodrun
 * makes when a rank dies before checking in), and every scope answer says how long ago the
 * scope last changed. */
static void test_scope_abort_and_age(void **state) {
    (void)state;
    hvd_store_client_t *c;
    hvd_store_scope_t sc;
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &secret, &c), HVD_OK);
    assert_int_equal(hvd__store_get_scope(c, "ab", 0, hvd__clock_deadline_ms(5000), &sc), HVD_OK);
    assert_int_equal(sc.count, 0);
    assert_int_equal(sc.age_ms, -1); /* nothing was ever put */
    hvd__store_scope_fini(&sc);
    assert_int_equal(hvd__store_put(c, "ab", "rank_0", "a", 1, hvd__clock_deadline_ms(5000)),
                     HVD_OK);
    hvd__clock_sleep_ms(300);
    assert_int_equal(hvd__store_get_scope(c, "ab", 1, hvd__clock_deadline_ms(5000), &sc), HVD_OK);
    assert_true(sc.age_ms >= 290 && sc.age_ms < 5000);
    hvd__store_scope_fini(&sc);
    /* held for 5 keys; the abort key (the second key) releases it long before its deadline */
    late_put_t lp = {150, "/ab/" HVD_KV_ABORT_KEY, "rank 1 died", 1, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, late_put, &lp), 0);
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__store_get_scope(c, "ab", 5, hvd__clock_deadline_ms(20000), &sc), HVD_OK);
    int64_t took = hvd__clock_now_ms() - t0;
    pthread_join(th, NULL);
    assert_int_equal(lp.status, 200);
    assert_true(took >= 100 && took < 5000);
    assert_int_equal(sc.count, 2);
    const hvd_store_entry_t *e = hvd__store_scope_find(&sc, HVD_KV_ABORT_KEY);
    assert_non_null(e);
    assert_string_equal((const char *)e->value, "rank 1 died");
    assert_true(sc.age_ms >= 0 && sc.age_ms < 1000);
    hvd__store_scope_fini(&sc);
    /* with the key there, a new read does not wait at all */
    t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__store_get_scope(c, "ab", 5, hvd__clock_deadline_ms(20000), &sc), HVD_OK);
    assert_true(hvd__clock_now_ms() - t0 < 2000);
    hvd__store_scope_fini(&sc);
    hvd__store_client_destroy(c);
}

/* Count-only reads: the wait of a whole-scope read, answered with the count and at most the
 * abort key, however big the scope; the header is refused anywhere else. */
static void test_scope_count(void **state) {
    (void)state;
    hvd_store_client_t *c;
    hvd_store_scope_t sc;
    assert_int_equal(hvd__store_client_create("127.0.0.1", port, &secret, &c), HVD_OK);
    char key[32], big[600];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "rank_%d", i);
        assert_int_equal(
            hvd__store_put(c, "cnt", key, big, strlen(big), hvd__clock_deadline_ms(5000)), HVD_OK);
    }
    assert_int_equal(hvd__store_count_scope(c, "cnt", 3, hvd__clock_deadline_ms(5000), &sc),
                     HVD_OK);
    assert_int_equal(sc.total, 3);
    assert_int_equal(sc.count, 0); /* no record came with it */
    assert_true(sc.age_ms >= 0 && sc.age_ms < 5000);
    hvd__store_scope_fini(&sc);
    /* an unknown scope counts 0 */
    assert_int_equal(hvd__store_count_scope(c, "nothing", 0, hvd__clock_deadline_ms(5000), &sc),
                     HVD_OK);
    assert_int_equal(sc.total, 0);
    assert_int_equal(sc.age_ms, -1);
    hvd__store_scope_fini(&sc);
    /* held for 4, released by the fourth PUT from another thread */
    late_put_t lp = {150, "/cnt/rank_3", "x", 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, late_put, &lp), 0);
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__store_count_scope(c, "cnt", 4, hvd__clock_deadline_ms(20000), &sc),
                     HVD_OK);
    pthread_join(th, NULL);
    assert_true(hvd__clock_now_ms() - t0 >= 100);
    assert_int_equal(sc.total, 4);
    hvd__store_scope_fini(&sc);
    /* short at its deadline: HVD_ERR_TIMEOUT with the count so far */
    assert_int_equal(hvd__store_count_scope(c, "cnt", 9, hvd__clock_deadline_ms(300), &sc),
                     HVD_ERR_TIMEOUT);
    assert_int_equal(sc.total, 4);
    hvd__store_scope_fini(&sc);
    /* held for 9; the abort key ends it, and comes with the answer */
    late_put_t ab = {150, "/cnt/" HVD_KV_ABORT_KEY, "rank 5 died", 0, 0};
    assert_int_equal(pthread_create(&th, NULL, late_put, &ab), 0);
    t0 = hvd__clock_now_ms();
    assert_int_equal(hvd__store_count_scope(c, "cnt", 9, hvd__clock_deadline_ms(20000), &sc),
                     HVD_OK);
    pthread_join(th, NULL);
    assert_true(hvd__clock_now_ms() - t0 < 5000);
    assert_int_equal(sc.total, 5);
    assert_int_equal(sc.count, 1);
    const hvd_store_entry_t *e = hvd__store_scope_find(&sc, HVD_KV_ABORT_KEY);
    assert_non_null(e);
    assert_string_equal((const char *)e->value, "rank 5 died");
    hvd__store_scope_fini(&sc);
    hvd__store_client_destroy(c);
    /* the header only as "1", only on a scope read */
    assert_int_equal(status_of("GET", "/cnt/", NULL, &secret, HVD_KV_COUNT_ONLY_HEADER ": 2\r\n"),
                     400);
    assert_int_equal(
        status_of("GET", "/cnt/rank_0", NULL, &secret, HVD_KV_COUNT_ONLY_HEADER ": 1\r\n"), 400);
    resp_t r;
    assert_int_equal(request("GET", "/cnt/", NULL, &secret, HVD_KV_COUNT_ONLY_HEADER ": 1\r\n", &r),
                     200);
    assert_true(r.body_len < 64); /* the records are 3 KiB */
    resp_fini(&r);
}

static void test_auth_refusals(void **state) {
    (void)state;
    resp_t r;
    char v[64], req[2048];
    assert_int_equal(status_of("PUT", "/s2/k", "original", &secret, NULL), 200);
    uint64_t version = hvd__kv_store_version(store);
    /* no header: 401 (with a challenge), nothing read or written */
    assert_int_equal(request("PUT", "/s2/k", "x", NULL, NULL, &r), 401);
    assert_non_null(strcasestr(r.head, "WWW-Authenticate: HVD1"));
    resp_fini(&r);
    assert_int_equal(request("GET", "/s2/k", NULL, NULL, NULL, &r), 401);
    assert_null(memmem(r.body, r.body_len, "original", 8));
    resp_fini(&r);
    assert_int_equal(status_of("DELETE", "/s2/k", NULL, NULL, NULL), 401);
    assert_int_equal(status_of("PUT", "/s2/new", "x", NULL, NULL), 401);
    /* wrong secret, garbage header: 403 */
    assert_int_equal(status_of("PUT", "/s2/k", "x", &other_secret, NULL), 403);
    assert_int_equal(status_of("GET", "/s2/k", NULL, &other_secret, NULL), 403);
    assert_int_equal(status_of("DELETE", "/s2/k", NULL, &other_secret, NULL), 403);
    assert_int_equal(status_of("PUT", "/s2/k", "x", NULL, "Authorization: HVD1 ts=1,nonce=00\r\n"),
                     403);
    /* a signature covers method, path and body */
    size_t n = build(req, sizeof req, "PUT", "/s2/k", "evil", 4, &secret, NULL, NULL);
    memcpy(req + n - 4, "EVIL", 4); /* body changed in flight */
    assert_int_equal(raw(req, n, &r), 403);
    resp_fini(&r);
    n = build(req, sizeof req, "PUT", "/s2/k", "evil", 4, &secret, "/s2/other", NULL);
    assert_int_equal(raw(req, n, &r), 403);
    resp_fini(&r);
    n = build(req, sizeof req, "DELETE", "/s2/k", NULL, 0, &secret, NULL, NULL);
    memcpy(req, "GET   ", 6); /* "GET    /s2/k": a signed DELETE sent as GET */
    assert_int_equal(raw(req, n, &r), 403);
    resp_fini(&r);
    assert_int_equal(hvd__kv_store_version(store), version);
    assert_int_equal(get_value("/s2/k", v, sizeof v), 200);
    assert_string_equal(v, "original");
    /* a captured request replayed: refused, nothing changes */
    n = build(req, sizeof req, "PUT", "/s2/k", "captured", 8, &secret, NULL, NULL);
    assert_int_equal(raw(req, n, &r), 200);
    resp_fini(&r);
    assert_int_equal(status_of("PUT", "/s2/k", "newer", &secret, NULL), 200);
    version = hvd__kv_store_version(store);
    assert_int_equal(raw(req, n, &r), 403);
    resp_fini(&r);
    n = build(req, sizeof req, "DELETE", "/s2/k", NULL, 0, &secret, NULL, NULL);
    assert_int_equal(raw(req, n, &r), 200);
    resp_fini(&r);
    assert_int_equal(status_of("PUT", "/s2/k", "after", &secret, NULL), 200);
    version = hvd__kv_store_version(store);
    assert_int_equal(raw(req, n, &r), 403); /* the DELETE again */
    resp_fini(&r);
    assert_int_equal(hvd__kv_store_version(store), version);
    assert_int_equal(get_value("/s2/k", v, sizeof v), 200);
    assert_string_equal(v, "after");
}

static void test_malformed(void **state) {
    (void)state;
    resp_t r;
    char req[4096];
    /* bad targets, each correctly signed over exactly what is sent: the path is refused */
    const char *bad_targets[] = {"/onlyscope", "/a/b/c", "/a/b%2Fc", "/%61/b",      "//k",
                                 "/a/b?x=1",   "/a/b?",  "/s/",      "/",           "*",
                                 "/a/b#f",     "/a/b/",  "/a\\b/c",  "/a/\x01",     "/a/b;c",
                                 "a/b",        "/é/b",   "/a//b",    "http://h/a/b"};
    for (size_t i = 0; i < sizeof bad_targets / sizeof *bad_targets; i++) {
        const char *method = i % 2 ? "PUT" : "GET";
        if (strcmp(bad_targets[i], "/s/") == 0)
            method = "PUT"; /* a whole scope can only be read */
        size_t n = build(req, sizeof req, method, bad_targets[i], "v",
                         strcmp(method, "PUT") ? 0 : 1, &secret, NULL, NULL);
        int st = raw(req, n, &r);
        resp_fini(&r);
        if (st != 400)
            fail_msg("%s %s: got %d, want 400", method, bad_targets[i], st);
    }
    assert_int_equal(status_of("DELETE", "/s3/", NULL, &secret, NULL), 400);
    char longname[HVD_KV_NAME_MAX + 8] = "/s/";
    memset(longname + 3, 'k', HVD_KV_NAME_MAX + 1);
    longname[HVD_KV_NAME_MAX + 4] = '\0';
    assert_int_equal(status_of("GET", longname, NULL, &secret, NULL), 400);
    longname[HVD_KV_NAME_MAX + 3] = '\0';
    assert_int_equal(status_of("GET", longname, NULL, &secret, NULL), 404); /* 128: valid */
    /* methods */
    assert_int_equal(status_of("POST", "/s3/k", "x", &secret, NULL), 501);
    assert_int_equal(status_of("HEAD", "/s3/k", NULL, &secret, NULL), 501);
    assert_int_equal(status_of("PATCH", "/s3/k", NULL, NULL, NULL), 501);
    assert_int_equal(status_of("get", "/s3/k", NULL, &secret, NULL), 501);
    /* framing: PUT without a length, a body on GET, an unknown transfer coding */
    const char no_len[] = "PUT /s3/k HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(raw(no_len, sizeof no_len - 1, &r), 411);
    resp_fini(&r);
    assert_int_equal(status_of("GET", "/s3/k", "body", &secret, NULL), 400);
    assert_int_equal(status_of("DELETE", "/s3/k", "body", &secret, NULL), 400);
    const char gzip[] = "PUT /s3/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_int_equal(raw(gzip, sizeof gzip - 1, &r), 501);
    resp_fini(&r);
    const char bad_cl[] = "PUT /s3/k HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n";
    assert_int_equal(raw(bad_cl, sizeof bad_cl - 1, &r), 400);
    resp_fini(&r);
    /* wait headers must be plain numbers */
    const char *bad_waits[] = {"X-Hvd-Wait-Ms: soon\r\n", "X-Hvd-Wait-Ms: -1\r\n",
                               "X-Hvd-Wait-Ms: 99999999999\r\n", "X-Hvd-Min-Count: 1.5\r\n",
                               "X-Hvd-Wait-Ms: \r\n"};
    for (size_t i = 0; i < sizeof bad_waits / sizeof *bad_waits; i++)
        assert_int_equal(status_of("GET", "/s3/", NULL, &secret, bad_waits[i]), 400);
    assert_false(hvd__kv_store_has(store, "s3", "k"));
    /* garbage: answered with an error or dropped, never a crash; the server serves on */
    const char *garbage[] = {"\x01\x02\x03\r\n\r\n",
                             "GET\r\n\r\n",
                             "HELLO WORLD\r\n\r\n",
                             "GET / HTTP/9.9\r\n\r\n",
                             "GET /a/b HTTP/1.1\r\nno colon here\r\n\r\n",
                             "PUT /a/b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"};
    for (size_t i = 0; i < sizeof garbage / sizeof *garbage; i++) {
        int st = raw(garbage[i], strlen(garbage[i]), &r);
        resp_fini(&r);
        if (!(st == 0 || (st >= 400 && st < 600)))
            fail_msg("garbage #%zu: got %d", i, st);
        assert_serving();
    }
    uint8_t noise[4096];
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (uint8_t)(i * 7919u >> 3);
    raw(noise, sizeof noise, &r);
    resp_fini(&r);
    /* a huge header block is bounded by the server */
    size_t big = 200000;
    char *huge = malloc(big);
    memcpy(huge, "GET /s3/k HTTP/1.1\r\nX-Pad: ", 27);
    memset(huge + 27, 'a', big - 31);
    memcpy(huge + big - 4, "\r\n\r\n", 4);
    int st = raw(huge, big, &r);
    resp_fini(&r);
    free(huge);
    assert_true(st == 0 || (st >= 400 && st < 500));
    assert_serving();
}

static void test_oversize(void **state) {
    (void)state;
    resp_t r;
    char req[8192];
    uint64_t version = hvd__kv_store_version(store);
    /* announced too large: 413 before the body is read (it is never sent) */
    const char head[] = "PUT /s4/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n";
    int fd = connect_port(port);
    send_all(fd, head, sizeof head - 1);
    int64_t t0 = hvd__clock_now_ms();
    assert_int_equal(read_resp(fd, &r, 5000), 413);
    assert_true(hvd__clock_now_ms() - t0 < 2500); /* not the request timeout */
    resp_fini(&r);
    close(fd);
    /* a signed value one byte over the limit: 413; at the limit: stored */
    char *val = malloc(MAX_VALUE + 2);
    memset(val, 'v', MAX_VALUE + 1);
    val[MAX_VALUE + 1] = '\0';
    assert_int_equal(status_of("PUT", "/s4/k", val, &secret, NULL), 413);
    assert_int_equal(hvd__kv_store_version(store), version);
    assert_false(hvd__kv_store_has(store, "s4", "k"));
    val[MAX_VALUE] = '\0';
    assert_int_equal(status_of("PUT", "/s4/k", val, &secret, NULL), 200);
    free(val);
    /* chunked: over the limit in total is 413 and nothing stored */
    char chunk[700];
    memset(chunk, 'z', sizeof chunk);
    char h[HVD_KV_AUTH_MAX];
    char body[1400];
    memcpy(body, chunk, 700);
    memcpy(body + 700, chunk, 700);
    assert_int_equal(hvd__kv_auth_sign(&secret, "PUT", "/s4/chunky", body, 1400, h), HVD_OK);
    int n =
        snprintf(req, sizeof req,
                 "PUT /s4/chunky HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nTransfer-Encoding: "
                 "chunked\r\n\r\n2bc\r\n%.*s\r\n2bc\r\n%.*s\r\n0\r\n\r\n",
                 h, 700, chunk, 700, chunk);
    assert_int_equal(raw(req, (size_t)n, &r), 413);
    resp_fini(&r);
    assert_false(hvd__kv_store_has(store, "s4", "chunky"));
    /* chunked within the limit: stored exactly */
    assert_int_equal(hvd__kv_auth_sign(&secret, "PUT", "/s4/chunky", body, 1000, h), HVD_OK);
    n = snprintf(req, sizeof req,
                 "PUT /s4/chunky HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nTransfer-Encoding: "
                 "chunked\r\n\r\n2bc\r\n%.*s\r\n12c\r\n%.*s\r\n0\r\n\r\n",
                 h, 700, chunk, 300, chunk);
    assert_int_equal(raw(req, (size_t)n, &r), 200);
    resp_fini(&r);
    assert_int_equal(request("GET", "/s4/chunky", NULL, &secret, NULL, &r), 200);
    assert_int_equal(r.body_len, 1000);
    assert_memory_equal(r.body, body, 1000);
    resp_fini(&r);
    /* a full store: 507, nothing stored */
    hvd_kv_server_t *small;
    hvd_kv_server_config_t cfg = {.bind_addr = "127.0.0.1", .secret = &secret, .max_keys = 2};
    assert_int_equal(hvd__kv_server_start(&cfg, &small), HVD_OK);
    int sp = hvd__kv_server_port(small);
    for (int i = 0; i < 3; i++) {
        char target[32];
        snprintf(target, sizeof target, "/full/k%d", i);
        size_t len = build(req, sizeof req, "PUT", target, "v", 1, &secret, NULL, NULL);
        assert_int_equal(raw_port(sp, req, len, &r), i < 2 ? 200 : 507);
        resp_fini(&r);
    }
    assert_false(hvd__kv_store_has(hvd__kv_server_store(small), "full", "k2"));
    hvd__kv_server_stop(small);
    assert_serving();
}

static void test_request_timeout(void **state) {
    (void)state;
    /* a client that starts a request and goes silent is cut off after the 3 s timeout */
    int fd = connect_port(port);
    send_all(fd, "GET /s5/k HTTP/1.1\r\n", 20);
    int64_t t0 = hvd__clock_now_ms();
    char buf[256];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    ssize_t got = recv(fd, buf, sizeof buf, 0);
    int64_t took = hvd__clock_now_ms() - t0;
    close(fd);
    assert_true(got <= 0 || strncmp(buf, "HTTP/1.1 4", 10) == 0);
    assert_true(took >= 2000);
    assert_true(took < 8000);
    assert_serving();
}

static void test_connection_limit(void **state) {
    (void)state;
    hvd_kv_server_t *s;
    hvd_kv_server_config_t cfg = {
        .bind_addr = "127.0.0.1", .secret = &secret, .max_connections = 4};
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_OK);
    int sp = hvd__kv_server_port(s);
    int fds[4];
    char req[1024];
    for (int i = 0; i < 4; i++) {
        size_t n = build(req, sizeof req, "GET", "/lim/go", NULL, 0, &secret, NULL,
                         "X-Hvd-Wait-Ms: 20000\r\n");
        fds[i] = connect_port(sp);
        send_all(fds[i], req, n);
    }
    hvd__clock_sleep_ms(200);
    /* a fifth connection waits, unserved, until one of them is done */
    resp_t r;
    size_t n = build(req, sizeof req, "GET", "/lim/go", NULL, 0, &secret, NULL, NULL);
    int fifth = connect_port(sp);
    send_all(fifth, req, n);
    assert_int_equal(read_resp(fifth, &r, 500), 0);
    resp_fini(&r);
    /* the launcher's write releases the four, and the fifth is served */
    assert_int_equal(hvd__kv_store_put(hvd__kv_server_store(s), "lim", "go", "ok", 2), HVD_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(read_resp(fds[i], &r, 5000), 200);
        assert_string_equal((char *)r.body, "ok");
        resp_fini(&r);
        close(fds[i]);
    }
    assert_int_equal(read_resp(fifth, &r, 5000), 200);
    assert_string_equal((char *)r.body, "ok");
    resp_fini(&r);
    close(fifth);
    hvd__kv_server_stop(s);
    /* horovodrun's limit: the default for small jobs, a held poll per rank and room to spare
     * for big ones (16,384 ranks must not queue behind 4,096 connections) */
    assert_int_equal(hvd__kv_server_connections_for(1), HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS);
    assert_int_equal(hvd__kv_server_connections_for(3000), HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS);
    assert_true(hvd__kv_server_connections_for(16384) >= 16384 + 1024);
}

static void test_hung_up_client(void **state) {
    (void)state;
    /* a held client that goes away gives its connection back long before its deadline */
    hvd_kv_server_t *s;
    hvd_kv_server_config_t cfg = {
        .bind_addr = "127.0.0.1", .secret = &secret, .max_connections = 1};
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_OK);
    int sp = hvd__kv_server_port(s);
    char req[1024];
    size_t n = build(req, sizeof req, "GET", "/gone/k", NULL, 0, &secret, NULL,
                     "X-Hvd-Wait-Ms: 60000\r\n");
    int fd = connect_port(sp);
    send_all(fd, req, n);
    hvd__clock_sleep_ms(200);
    close(fd);
    int64_t t0 = hvd__clock_now_ms();
    resp_t r;
    n = build(req, sizeof req, "GET", "/gone/k", NULL, 0, &secret, NULL, NULL);
    assert_int_equal(raw_port(sp, req, n, &r), 404);
    resp_fini(&r);
    assert_true(hvd__clock_now_ms() - t0 < 5000);
    hvd__kv_server_stop(s);
}

static void test_body_budget(void **state) {
    (void)state;
    /* bodies buffered at once are bounded (here 4 x 16 MiB): a PUT beyond is told to retry */
    hvd_kv_server_t *s;
    hvd_kv_server_config_t cfg = {
        .bind_addr = "127.0.0.1", .secret = &secret, .max_value_bytes = 16u << 20};
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_OK);
    int sp = hvd__kv_server_port(s);
    const char head[] = "PUT /big/k HTTP/1.1\r\nHost: x\r\nContent-Length: 16777216\r\n\r\n";
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = connect_port(sp);
        send_all(fds[i], head, sizeof head - 1);
    }
    hvd__clock_sleep_ms(200);
    resp_t r;
    assert_int_equal(raw_port(sp, head, sizeof head - 1, &r), 503);
    resp_fini(&r);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    hvd__clock_sleep_ms(200);
    /* the budget comes back when the connections go */
    char req[1024];
    size_t n = build(req, sizeof req, "PUT", "/big/k", "small", 5, &secret, NULL, NULL);
    assert_int_equal(raw_port(sp, req, n, &r), 200);
    resp_fini(&r);
    hvd__kv_server_stop(s);
}

static void test_stop_with_held_requests(void **state) {
    (void)state;
    hvd_kv_server_t *s;
    hvd_kv_server_config_t cfg = {.bind_addr = "127.0.0.1", .secret = &secret};
    assert_int_equal(hvd__kv_server_start(&cfg, &s), HVD_OK);
    int sp = hvd__kv_server_port(s);
    enum { HELD = 20 };
    int fds[HELD];
    char req[1024];
    for (int i = 0; i < HELD; i++) {
        size_t n = build(req, sizeof req, "GET", i % 2 ? "/stop/never" : "/stop/", NULL, 0, &secret,
                         NULL, "X-Hvd-Wait-Ms: 60000\r\nX-Hvd-Min-Count: 3\r\n");
        fds[i] = connect_port(sp);
        send_all(fds[i], req, n);
    }
    hvd__clock_sleep_ms(200);
    int64_t t0 = hvd__clock_now_ms();
    hvd__kv_server_stop(s);
    assert_true(hvd__clock_now_ms() - t0 < 3000);
    int answered = 0;
    for (int i = 0; i < HELD; i++) {
        resp_t r;
        int st = read_resp(fds[i], &r, 2000);
        resp_fini(&r);
        close(fds[i]);
        assert_true(st == 503 || st == 0);
        answered += st == 503;
    }
    assert_int_equal(answered, HELD);
}

/* ---- 1,000 concurrent clients ---- */

#define N_WAITERS 1000
#define N_OPENERS 4
#define N_PUTTERS 4
#define SCOPE_MIN 100 /* whole-scope waiters want this many keys in conc_scope */

typedef struct {
    int first, count;
    int *fds;
} opener_t;

static int is_scope_waiter(int i) {
    return i % 5 == 4; /* one in five waits for the whole scope, the rest for one key */
}

static void *open_waiters(void *arg) {
    opener_t *o = arg;
    for (int i = o->first; i < o->first + o->count; i++) {
        char h[HVD_KV_AUTH_MAX], req[1024];
        const char *target = is_scope_waiter(i) ? "/conc_scope/" : "/conc/go";
        if (hvd__kv_auth_sign(&secret, "GET", target, NULL, 0, h) != HVD_OK)
            return (void *)1;
        int n = snprintf(req, sizeof req,
                         "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nX-Hvd-Wait-Ms: "
                         "60000\r\nX-Hvd-Min-Count: %d\r\n\r\n",
                         target, h, SCOPE_MIN);
        o->fds[i] = connect_port(port);
        send_all(o->fds[i], req, (size_t)n);
    }
    return NULL;
}

static void *putter(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < SCOPE_MIN / N_PUTTERS; i++) {
        char target[64], value[64], got[64];
        snprintf(target, sizeof target, "/conc_scope/p%d_%d", id, i);
        snprintf(value, sizeof value, "v%d_%d", id, i);
        if (status_of("PUT", target, value, &secret, NULL) != 200)
            return (void *)1;
        snprintf(target, sizeof target, "/conc_own%d/k%d", id, i);
        if (status_of("PUT", target, value, &secret, NULL) != 200)
            return (void *)1;
        if (get_value(target, got, sizeof got) != 200 || strcmp(got, value) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent_clients(void **state) {
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * N_WAITERS + 200)
        fail_msg("RLIMIT_NOFILE %lu too low for %d clients", (unsigned long)rl.rlim_cur, N_WAITERS);
    int *fds = calloc(N_WAITERS, sizeof *fds);
    pthread_t th[N_OPENERS > N_PUTTERS ? N_OPENERS : N_PUTTERS];
    opener_t op[N_OPENERS];
    for (int t = 0; t < N_OPENERS; t++) {
        op[t] = (opener_t){t * (N_WAITERS / N_OPENERS), N_WAITERS / N_OPENERS, fds};
        assert_int_equal(pthread_create(&th[t], NULL, open_waiters, &op[t]), 0);
    }
    for (int t = 0; t < N_OPENERS; t++) {
        void *ret;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    /* other clients PUT and GET meanwhile, filling conc_scope to the whole-scope waiters'
     * minimum */
    for (int t = 0; t < N_PUTTERS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, putter, (void *)(intptr_t)t), 0);
    for (int t = 0; t < N_PUTTERS; t++) {
        void *ret;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    /* give the server time to have held every key waiter; none has an answer yet */
    hvd__clock_sleep_ms(300);
    int early = 0;
    for (int i = 0; i < N_WAITERS; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        if (!is_scope_waiter(i))
            early += poll(&p, 1, 0) > 0;
    }
    assert_int_equal(early, 0);
    assert_int_equal(status_of("PUT", "/conc/go", "GO!", &secret, NULL), 200);
    int ok = 0;
    for (int i = 0; i < N_WAITERS; i++) {
        resp_t r;
        int st = read_resp(fds[i], &r, 20000);
        if (st == 200 && !is_scope_waiter(i) && strcmp((char *)r.body, "GO!") == 0) {
            ok++;
        } else if (st == 200 && is_scope_waiter(i)) {
            hvd_store_scope_t sc = {0};
            if (hvd__store_scope_decode(r.body, r.body_len, &sc) == HVD_OK &&
                sc.count >= SCOPE_MIN && hvd__store_scope_find(&sc, "p3_24") &&
                strcmp((char *)hvd__store_scope_find(&sc, "p0_0")->value, "v0_0") == 0)
                ok++;
            hvd__store_scope_fini(&sc);
        }
        resp_fini(&r);
        close(fds[i]);
    }
    assert_int_equal(ok, N_WAITERS);
    free(fds);
    assert_serving();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_errors),
        cmocka_unit_test(test_put_get_delete),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_scope_read),
        cmocka_unit_test(test_scope_abort_and_age),
        cmocka_unit_test(test_scope_count),
        cmocka_unit_test(test_auth_refusals),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_oversize),
        cmocka_unit_test(test_request_timeout),
        cmocka_unit_test(test_connection_limit),
        cmocka_unit_test(test_hung_up_client),
        cmocka_unit_test(test_body_budget),
        cmocka_unit_test(test_stop_with_held_requests),
        cmocka_unit_test(test_concurrent_clients),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
