/* The service wire (runner/service/service.h): codecs round-trip; a wrong secret, a changed byte,
 * an unknown version, non-zero reserved bytes, an oversize length and truncated input are refused;
 * a live server rejects (and logs, naming the peer and the reason) a request replayed on another
 * connection or on its own, an oversize length before reading a body, and a connection over its
 * limit; it goes on serving afterwards and stops promptly with idle connections open. The body
 * decoder never reads past its end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "log_capture.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "os/socket.h"
#include "wire/le.h"
#include "runner/service/service.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hvd_secret_t secret, other;

static int setup(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    assert_int_equal(hvd__secret_generate(&other), HVD_OK);
    return 0;
}

/* --- codecs ------------------------------------------------------------------------------- */

static void nonce_fill(uint8_t *n, uint8_t v) {
    memset(n, v, HVD_SVC_NONCE_LEN);
}

/* A whole REQUEST in buf; returns its length. */
static size_t make_request(uint8_t *buf, uint16_t type, uint32_t seq, const char *body,
                           const uint8_t *nonce_s, const hvd_secret_t *key) {
    hvd_svc_head_t h = {.type = type, .seq = seq, .len = (uint32_t)strlen(body)};
    nonce_fill(h.nonce_c, 0x3c);
    assert_int_equal(hvd__svc_request_encode(buf, &h, (const uint8_t *)body, nonce_s, key), HVD_OK);
    memcpy(buf + HVD_SVC_REQ_PREFIX_LEN, body, h.len);
    return HVD_SVC_REQ_PREFIX_LEN + h.len;
}

static void test_challenge(void **state) {
    (void)state;
    uint8_t nonce[HVD_SVC_NONCE_LEN], got[HVD_SVC_NONCE_LEN], ch[HVD_SVC_CHALLENGE_LEN];
    nonce_fill(nonce, 0xa5);
    hvd__svc_challenge_encode(ch, nonce);
    assert_memory_equal(ch, "HVDS", 4);
    assert_int_equal(hvd__svc_challenge_decode(ch, got), HVD_OK);
    assert_memory_equal(got, nonce, sizeof nonce);

    uint8_t bad[HVD_SVC_CHALLENGE_LEN];
    memcpy(bad, ch, sizeof bad);
    bad[6] = 1; /* reserved */
    assert_int_equal(hvd__svc_challenge_decode(bad, got), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "reserved"));
    memcpy(bad, ch, sizeof bad);
    hvd__le16_put(bad + 4, 7); /* version */
    assert_int_equal(hvd__svc_challenge_decode(bad, got), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "version 7"));
    memcpy(bad, ch, sizeof bad);
    bad[3] = 'X';
    assert_int_equal(hvd__svc_challenge_decode(bad, got), HVD_ERR_PROTOCOL);
}

static void test_request_round_trip(void **state) {
    (void)state;
    uint8_t nonce_s[HVD_SVC_NONCE_LEN], buf[256];
    nonce_fill(nonce_s, 0x11);
    size_t len = make_request(buf, 42, 5, "hello body", nonce_s, &secret);
    assert_memory_equal(buf, "HVDQ", 4);
    hvd_svc_head_t h;
    const uint8_t *body = NULL;
    assert_int_equal(hvd__svc_request_parse(buf, len, nonce_s, 5, &secret, &h, &body), HVD_OK);
    assert_int_equal(h.type, 42);
    assert_int_equal(h.seq, 5);
    assert_int_equal(h.len, 10);
    assert_memory_equal(body, "hello body", 10);

    /* the response binds both nonces and the request's seq */
    uint8_t resp[256], nonce_c[HVD_SVC_NONCE_LEN];
    nonce_fill(nonce_c, 0x3c);
    hvd_svc_head_t rh = {.type = 43, .seq = 5, .len = 3};
    assert_int_equal(
        hvd__svc_response_encode(resp, &rh, (const uint8_t *)"abc", nonce_s, nonce_c, &secret),
        HVD_OK);
    memcpy(resp + HVD_SVC_RESP_PREFIX_LEN, "abc", 3);
    size_t rlen = HVD_SVC_RESP_PREFIX_LEN + 3;
    assert_int_equal(hvd__svc_response_parse(resp, rlen, nonce_s, nonce_c, 5, &secret, &rh, &body),
                     HVD_OK);
    assert_int_equal(rh.type, 43);
    assert_memory_equal(body, "abc", 3);
    /* for another request (other nonce_c, other seq) or another connection: refused */
    uint8_t wrong[HVD_SVC_NONCE_LEN];
    nonce_fill(wrong, 0x77);
    assert_int_equal(hvd__svc_response_parse(resp, rlen, nonce_s, wrong, 5, &secret, &rh, &body),
                     HVD_ERR_AUTH);
    assert_int_equal(hvd__svc_response_parse(resp, rlen, wrong, nonce_c, 5, &secret, &rh, &body),
                     HVD_ERR_AUTH);
    assert_int_equal(hvd__svc_response_parse(resp, rlen, nonce_s, nonce_c, 6, &secret, &rh, &body),
                     HVD_ERR_AUTH);
    /* a request is never taken for a response, nor the other way round */
    assert_int_equal(hvd__svc_response_parse(buf, len, nonce_s, nonce_c, 5, &secret, &rh, &body),
                     HVD_ERR_PROTOCOL);
}

static void test_request_rejections(void **state) {
    (void)state;
    uint8_t nonce_s[HVD_SVC_NONCE_LEN], buf[256], bad[256];
    nonce_fill(nonce_s, 0x11);
    size_t len = make_request(buf, 42, 0, "payload", nonce_s, &secret);
    hvd_svc_head_t h;
    const uint8_t *body;

    /* wrong secret */
    assert_int_equal(hvd__svc_request_parse(buf, len, nonce_s, 0, &other, &h, &body), HVD_ERR_AUTH);
    assert_non_null(strstr(hvd_last_error(), "bad MAC"));
    /* every byte of header, mac and body is covered */
    for (size_t i = 0; i < len; i++) {
        if (i >= 4 && i < 6)
            continue; /* the version: a protocol error, checked below */
        memcpy(bad, buf, len);
        bad[i] ^= 0x01;
        hvd_status_t st = hvd__svc_request_parse(bad, len, nonce_s, 0, &secret, &h, &body);
        if (st == HVD_OK)
            fail_msg("flipping byte %zu went unnoticed", i);
    }
    /* recorded on another connection (other challenge) */
    uint8_t fresh[HVD_SVC_NONCE_LEN];
    nonce_fill(fresh, 0x12);
    assert_int_equal(hvd__svc_request_parse(buf, len, fresh, 0, &secret, &h, &body), HVD_ERR_AUTH);
    /* replayed on its own connection: the next seq is expected */
    assert_int_equal(hvd__svc_request_parse(buf, len, nonce_s, 1, &secret, &h, &body),
                     HVD_ERR_AUTH);
    assert_non_null(strstr(hvd_last_error(), "replayed"));
    /* unknown version, named */
    memcpy(bad, buf, len);
    hvd__le16_put(bad + 4, 2);
    assert_int_equal(hvd__svc_request_parse(bad, len, nonce_s, 0, &secret, &h, &body),
                     HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "version 2"));
    /* oversize length: refused from the header alone */
    memcpy(bad, buf, HVD_SVC_REQ_PREFIX_LEN);
    hvd__le32_put(bad + 12, HVD_SVC_MAX_BODY + 1);
    assert_int_equal(hvd__svc_request_head_decode(bad, &h), HVD_ERR_TOO_LARGE);
    hvd__le32_put(bad + 12, UINT32_MAX);
    assert_int_equal(hvd__svc_request_head_decode(bad, &h), HVD_ERR_TOO_LARGE);
    hvd__le32_put(bad + 12, HVD_SVC_MAX_BODY);
    assert_int_equal(hvd__svc_request_head_decode(bad, &h), HVD_OK);
    /* encoding refuses an oversize body too */
    hvd_svc_head_t big = {.type = 1, .len = HVD_SVC_MAX_BODY + 1};
    assert_int_equal(hvd__svc_request_encode(bad, &big, buf, nonce_s, &secret), HVD_ERR_TOO_LARGE);
    /* truncated, or with bytes after the body */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(hvd__svc_request_parse(buf, cut, nonce_s, 0, &secret, &h, &body),
                         HVD_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[len] = 0;
    assert_int_equal(hvd__svc_request_parse(bad, len + 1, nonce_s, 0, &secret, &h, &body),
                     HVD_ERR_PROTOCOL);
}

static void test_body_codec(void **state) {
    (void)state;
    uint8_t buf[64];
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, buf, sizeof buf);
    hvd__svc_enc_u8(&e, 7);
    hvd__svc_enc_u16(&e, 0x1234);
    hvd__svc_enc_u32(&e, 0xdeadbeef);
    hvd__svc_enc_str(&e, "eth0");
    hvd__svc_enc_str(&e, "");
    size_t len = 0;
    assert_int_equal(hvd__svc_enc_finish(&e, "test", &len), HVD_OK);
    assert_int_equal(len, 1 + 2 + 4 + 2 + 4 + 2);

    hvd_svc_dec_t d;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    char s[8], s2[8];
    hvd__svc_dec_init(&d, buf, len, "TEST");
    assert_int_equal(hvd__svc_dec_u8(&d, "a", &u8), HVD_OK);
    assert_int_equal(hvd__svc_dec_u16(&d, "b", &u16), HVD_OK);
    assert_int_equal(hvd__svc_dec_u32(&d, "c", &u32), HVD_OK);
    assert_int_equal(hvd__svc_dec_str(&d, "d", s, sizeof s), HVD_OK);
    assert_int_equal(hvd__svc_dec_str(&d, "e", s2, sizeof s2), HVD_OK);
    assert_int_equal(hvd__svc_dec_end(&d), HVD_OK);
    assert_int_equal(u8, 7);
    assert_int_equal(u16, 0x1234);
    assert_int_equal(u32, 0xdeadbeef);
    assert_string_equal(s, "eth0");
    assert_string_equal(s2, "");

    /* every truncation fails, naming the field, and never reads past the end */
    const char *fields[] = {"a", "b", "b", "c", "c", "c", "c", "d",
                            "d", "d", "d", "d", "d", "e", "e"};
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size: ASan catches an over-read */
        memcpy(copy, buf, cut);
        hvd__svc_dec_init(&d, copy, cut, "TEST");
        hvd__svc_dec_u8(&d, "a", &u8);
        hvd__svc_dec_u16(&d, "b", &u16);
        hvd__svc_dec_u32(&d, "c", &u32);
        hvd__svc_dec_str(&d, "d", s, sizeof s);
        hvd__svc_dec_str(&d, "e", s2, sizeof s2);
        assert_int_equal(hvd__svc_dec_end(&d), HVD_ERR_PROTOCOL);
        char want[32];
        snprintf(want, sizeof want, "field '%s'", fields[cut]);
        if (!strstr(hvd_last_error(), want))
            fail_msg("cut at %zu: '%s' lacks %s", cut, hvd_last_error(), want);
        free(copy);
    }
    /* trailing bytes */
    hvd__svc_dec_init(&d, buf, len, "TEST");
    hvd__svc_dec_u8(&d, "a", &u8);
    assert_int_equal(hvd__svc_dec_end(&d), HVD_ERR_PROTOCOL);
    /* a string longer than the field allows, and one holding a NUL */
    hvd__svc_dec_init(&d, buf + 7, 6, "TEST");
    char tiny[4];
    assert_int_equal(hvd__svc_dec_str(&d, "name", tiny, sizeof tiny), HVD_ERR_PROTOCOL);
    assert_non_null(strstr(hvd_last_error(), "'name'"));
    uint8_t nul[] = {3, 0, 'a', 0, 'b'};
    hvd__svc_dec_init(&d, nul, sizeof nul, "TEST");
    assert_int_equal(hvd__svc_dec_str(&d, "name", s, sizeof s), HVD_ERR_PROTOCOL);
    /* the encoder stops at its capacity */
    hvd__svc_enc_init(&e, buf, 5);
    hvd__svc_enc_u32(&e, 1);
    hvd__svc_enc_u32(&e, 2);
    assert_int_equal(hvd__svc_enc_finish(&e, "small", &len), HVD_ERR_TOO_LARGE);
}

/* --- live server -------------------------------------------------------------------------- */

/* Echo handler: type 100 answers type 101 with the body; type 102 is refused. */
static hvd_status_t echo(void *arg, const char *peer, uint16_t type, const uint8_t *body,
                         size_t len, uint16_t *rt, uint8_t *resp, size_t cap, size_t *rlen) {
    (void)arg;
    (void)peer;
    if (type == 102)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "type 102 is refused by this test");
    assert_true(len <= cap);
    memcpy(resp, body, len);
    *rlen = len;
    *rt = 101;
    return HVD_OK;
}

static hvd_svc_server_t *start_server(const hvd_secret_t *key, unsigned max_conns, int idle_ms) {
    hvd_svc_server_config_t cfg = {.name = "test service",
                                   .bind_addr = "127.0.0.1",
                                   .secret = key,
                                   .max_connections = max_conns,
                                   .idle_ms = idle_ms,
                                   .handler = echo};
    hvd_svc_server_t *s = NULL;
    assert_int_equal(hvd__svc_server_start(&cfg, &s), HVD_OK);
    return s;
}

#define TEST_DEADLINE_MS 30000 /* bounds every wait of these tests; never reached when passing */

static int raw_connect(int port) {
    int fd = -1;
    assert_int_equal(
        hvd__socket_connect("127.0.0.1", port, hvd__clock_deadline_ms(TEST_DEADLINE_MS), &fd),
        HVD_OK);
    return fd;
}

/* Read exactly len bytes; returns 0, or -1 when the peer closed first. */
static int raw_read(int fd, void *buf, size_t len) {
    size_t have = 0;
    int64_t deadline = hvd__clock_deadline_ms(TEST_DEADLINE_MS);
    while (have < len) {
        size_t got = 0;
        hvd_status_t st =
            hvd__socket_recv_some(fd, (uint8_t *)buf + have, len - have, deadline, "srv", &got);
        if (st == HVD_ERR_PEER_LOST)
            return -1;
        assert_int_equal(st, HVD_OK);
        if (got == 0)
            return -1;
        have += got;
    }
    return 0;
}

static void raw_send(int fd, const void *buf, size_t len) {
    assert_int_equal(
        hvd__socket_send_all(fd, buf, len, hvd__clock_deadline_ms(TEST_DEADLINE_MS), "srv"),
        HVD_OK);
}

/* 1 when the server closed fd (after whatever it sent). */
static int closed_by_server(int fd) {
    uint8_t b[256];
    for (;;) {
        size_t got = 0;
        hvd_status_t st = hvd__socket_recv_some(
            fd, b, sizeof b, hvd__clock_deadline_ms(TEST_DEADLINE_MS), "srv", &got);
        if (st == HVD_ERR_PEER_LOST || (st == HVD_OK && got == 0))
            return 1;
        if (st != HVD_OK)
            return 0;
    }
}

static void test_client_round_trip(void **state) {
    (void)state;
    hvd_svc_server_t *s = start_server(&secret, 0, 0);
    int port = hvd__svc_server_port(s);
    hvd_svc_client_t *c = NULL;
    int64_t deadline = hvd__clock_deadline_ms(TEST_DEADLINE_MS);
    assert_int_equal(hvd__svc_client_open("127.0.0.1", port, &secret, deadline, &c), HVD_OK);
    char name[HVD_SVC_NAME_MAX], source[16];
    assert_int_equal(hvd__svc_client_ping(c, deadline, name, source), HVD_OK);
    assert_string_equal(name, "test service");
    assert_string_equal(source, "127.0.0.1");
    /* several requests on one connection */
    for (int i = 0; i < 3; i++) {
        uint8_t resp[64];
        uint16_t rt = 0;
        size_t rlen = 0;
        assert_int_equal(hvd__svc_client_call(c, 100, (const uint8_t *)"xyz", 3, deadline, &rt,
                                              resp, sizeof resp, &rlen),
                         HVD_OK);
        assert_int_equal(rt, 101);
        assert_int_equal(rlen, 3);
        assert_memory_equal(resp, "xyz", 3);
    }
    /* a refusal comes back as HVD_ERR_STATE with the handler's message */
    capture_start();
    uint8_t resp[64];
    uint16_t rt = 0;
    size_t rlen = 0;
    assert_int_equal(hvd__svc_client_call(c, 102, NULL, 0, deadline, &rt, resp, sizeof resp, &rlen),
                     HVD_ERR_STATE);
    assert_non_null(strstr(hvd_last_error(), "type 102 is refused by this test"));
    assert_non_null(strstr(capture_read(), "test service: refused a request from 127.0.0.1:"));
    capture_end();
    hvd__svc_client_close(c);

    /* a client with another secret: its request is rejected and the connection closed */
    capture_start();
    assert_int_equal(hvd__svc_client_open("127.0.0.1", port, &other, deadline, &c), HVD_OK);
    assert_int_not_equal(hvd__svc_client_ping(c, deadline, name, source), HVD_OK);
    hvd__svc_client_close(c);
    hvd__svc_server_stop(s);
    const char *log = capture_read();
    assert_non_null(strstr(log, "test service: rejected a message from 127.0.0.1:"));
    assert_non_null(strstr(log, "bad MAC"));
    capture_end();
}

static void test_server_replays(void **state) {
    (void)state;
    hvd_svc_server_t *s = start_server(&secret, 0, 0);
    int port = hvd__svc_server_port(s);
    capture_start();

    /* connection A: a genuine request, recorded */
    int a = raw_connect(port);
    uint8_t ch[HVD_SVC_CHALLENGE_LEN], nonce_a[HVD_SVC_NONCE_LEN];
    assert_int_equal(raw_read(a, ch, sizeof ch), 0);
    assert_int_equal(hvd__svc_challenge_decode(ch, nonce_a), HVD_OK);
    uint8_t recorded[256];
    size_t len = make_request(recorded, 100, 0, "genuine", nonce_a, &secret);
    raw_send(a, recorded, len);
    uint8_t resp[HVD_SVC_RESP_PREFIX_LEN + 7];
    assert_int_equal(raw_read(a, resp, sizeof resp), 0);
    assert_memory_equal(resp, "HVDR", 4);

    /* connection B: the recorded bytes do not authenticate against B's challenge */
    int b = raw_connect(port);
    assert_int_equal(raw_read(b, ch, sizeof ch), 0);
    raw_send(b, recorded, len);
    assert_true(closed_by_server(b));
    close(b);
    const char *log = capture_read();
    assert_non_null(strstr(log, "test service: rejected a message from 127.0.0.1:"));
    assert_non_null(strstr(log, "bad MAC"));

    /* connection A again: the same bytes, same seq, are a replay */
    raw_send(a, recorded, len);
    assert_true(closed_by_server(a));
    close(a);
    assert_non_null(strstr(capture_read(), "replayed or out-of-order message (seq 0, expected 1)"));

    /* oversize length: refused at once, without waiting for (or allocating) a body */
    int o = raw_connect(port);
    assert_int_equal(raw_read(o, ch, sizeof ch), 0);
    uint8_t head[HVD_SVC_REQ_PREFIX_LEN] = {0};
    memcpy(head, "HVDQ", 4);
    hvd__le16_put(head + 4, HVD_SVC_VERSION);
    hvd__le32_put(head + 12, 0x7fffffffu);
    raw_send(o, head, sizeof head);
    assert_true(closed_by_server(o));
    close(o);
    assert_non_null(strstr(capture_read(), "oversize REQUEST"));

    /* wrong version and garbage */
    o = raw_connect(port);
    assert_int_equal(raw_read(o, ch, sizeof ch), 0);
    hvd__le32_put(head + 12, 0);
    hvd__le16_put(head + 4, 9);
    raw_send(o, head, sizeof head);
    assert_true(closed_by_server(o));
    close(o);
    assert_non_null(strstr(capture_read(), "version 9"));

    /* still serving */
    hvd_svc_client_t *c = NULL;
    int64_t deadline = hvd__clock_deadline_ms(TEST_DEADLINE_MS);
    char name[HVD_SVC_NAME_MAX], source[16];
    assert_int_equal(hvd__svc_client_open("127.0.0.1", port, &secret, deadline, &c), HVD_OK);
    assert_int_equal(hvd__svc_client_ping(c, deadline, name, source), HVD_OK);
    hvd__svc_client_close(c);
    hvd__svc_server_stop(s);
    capture_end();
}

static void ping_ok(hvd_svc_client_t *c) {
    char name[HVD_SVC_NAME_MAX], source[16];
    assert_int_equal(
        hvd__svc_client_ping(c, hvd__clock_deadline_ms(TEST_DEADLINE_MS), name, source), HVD_OK);
}

/* At its connection limit the server makes room by dropping the connection that has been
 * silent longest since it connected, never one that authenticated; only when every
 * connection authenticated is a new one refused. Its refusals are logged at a bounded rate. */
static void test_server_limits_and_stop(void **state) {
    (void)state;
    /* a long idle deadline: only the limit can free a slot, and stop must not wait for it */
    hvd_svc_server_t *s = start_server(&secret, 2, 600000);
    int port = hvd__svc_server_port(s);
    int64_t deadline = hvd__clock_deadline_ms(TEST_DEADLINE_MS);
    capture_start();
    uint8_t ch[HVD_SVC_CHALLENGE_LEN];
    hvd_svc_client_t *a = NULL, *e = NULL;
    assert_int_equal(hvd__svc_client_open("127.0.0.1", port, &secret, deadline, &a), HVD_OK);
    ping_ok(a); /* a authenticated */
    int b = raw_connect(port);
    assert_int_equal(raw_read(b, ch, sizeof ch), 0);
    /* over the limit: the silent b makes room for c */
    int c = raw_connect(port);
    assert_int_equal(raw_read(c, ch, sizeof ch), 0);
    assert_true(closed_by_server(b));
    close(b);
    assert_non_null(strstr(capture_read(), "silent since it connected, to make room for"));
    /* and c, now the oldest stranger, for d; a stays and is served */
    int d = raw_connect(port);
    assert_int_equal(raw_read(d, ch, sizeof ch), 0);
    assert_true(closed_by_server(c));
    close(c);
    ping_ok(a);
    /* a second client takes d's place and authenticates: now nothing can be dropped, and a
     * new connection is closed without a challenge */
    assert_int_equal(hvd__svc_client_open("127.0.0.1", port, &secret, deadline, &e), HVD_OK);
    ping_ok(e);
    assert_true(closed_by_server(d));
    close(d);
    int f = raw_connect(port);
    assert_int_equal(raw_read(f, ch, sizeof ch), -1);
    close(f);
    assert_non_null(strstr(capture_read(), "2 connections are open already"));
    ping_ok(a);
    ping_ok(e);
    /* once one closes, a new connection is served */
    hvd__svc_client_close(e);
    int served = 0;
    for (int i = 0; i < 100 && !served; i++) {
        int g = raw_connect(port);
        served = raw_read(g, ch, sizeof ch) == 0;
        close(g);
        if (!served)
            hvd__clock_sleep_ms(20); /* the closed connection's thread is still finishing */
    }
    assert_true(served);
    /* a barrage of strangers with garbage: every one is refused, the log stays short, and a
     * is still served */
    for (int i = 0; i < 200; i++) {
        int x = raw_connect(port);
        if (raw_read(x, ch, sizeof ch) == 0) {
            uint8_t junk[HVD_SVC_REQ_PREFIX_LEN];
            memset(junk, 0xa5, sizeof junk);
            ssize_t w = write(x, junk, sizeof junk);
            (void)w;
            closed_by_server(x);
        }
        close(x);
    }
    ping_ok(a);
    const char *log = capture_read();
    size_t lines = 0;
    for (const char *q = log; (q = strstr(q, "test service: rejected a message")); q++)
        lines++;
    assert_true(lines >= 1 && lines <= 40);
    /* stop with a idle inside its read: returns, and closes a */
    hvd__svc_server_stop(s);
    assert_int_not_equal(
        hvd__svc_client_ping(a, deadline, (char[HVD_SVC_NAME_MAX]){0}, (char[16]){0}), HVD_OK);
    hvd__svc_client_close(a);
    capture_end();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_challenge),
        cmocka_unit_test(test_request_round_trip),
        cmocka_unit_test(test_request_rejections),
        cmocka_unit_test(test_body_codec),
        cmocka_unit_test(test_client_round_trip),
        cmocka_unit_test(test_server_replays),
        cmocka_unit_test(test_server_limits_and_stop),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
