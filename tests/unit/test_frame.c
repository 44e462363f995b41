/* The data-plane wire codecs (wire/frame.h): a handshake built by one side verifies on the
 * other; a wrong secret, a replayed HELLO (other challenge nonce), a changed rank or
 * generation, a HELLO passed off as a WELCOME, a wrong magic or version are all rejected;
 * frame headers round-trip and unknown kinds are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "wire/frame.h"

#include <string.h>

static hvd_secret_t secret, other;

static int setup(void **state) {
    (void)state;
    assert_int_equal(hvd__secret_generate(&secret), HVD_OK);
    assert_int_equal(hvd__secret_generate(&other), HVD_OK);
    return 0;
}

static hvd_hello_t sample(void) {
    hvd_hello_t h = {.from = 1, .to = 3, .generation = 7};
    memset(h.nonce_a, 0xa5, sizeof h.nonce_a);
    memset(h.nonce_c, 0x5a, sizeof h.nonce_c);
    return h;
}

static void test_handshake_round_trip(void **state) {
    (void)state;
    uint8_t ch[HVD_CHALLENGE_LEN], nonce[HVD_NONCE_LEN];
    hvd_hello_t h = sample();
    hvd__frame_challenge_encode(ch, h.nonce_a);
    assert_int_equal(hvd__frame_challenge_decode(ch, nonce), HVD_OK);
    assert_memory_equal(nonce, h.nonce_a, HVD_NONCE_LEN);

    uint8_t hello[HVD_HELLO_LEN], welcome[HVD_WELCOME_LEN];
    assert_int_equal(hvd__frame_hello_encode(hello, &h, &secret), HVD_OK);
    hvd_hello_t got;
    assert_int_equal(hvd__frame_hello_decode(hello, h.nonce_a, &secret, &got), HVD_OK);
    assert_int_equal(got.from, 1);
    assert_int_equal(got.to, 3);
    assert_int_equal(got.generation, 7);
    assert_memory_equal(got.nonce_c, h.nonce_c, HVD_NONCE_LEN);
    assert_int_equal(hvd__frame_welcome_encode(welcome, &got, &secret), HVD_OK);
    assert_int_equal(hvd__frame_welcome_check(welcome, &h, &secret), HVD_OK);
}

static void test_hello_rejections(void **state) {
    (void)state;
    hvd_hello_t h = sample(), got;
    uint8_t hello[HVD_HELLO_LEN], bad[HVD_HELLO_LEN];
    assert_int_equal(hvd__frame_hello_encode(hello, &h, &secret), HVD_OK);
    /* another job's secret */
    assert_int_equal(hvd__frame_hello_decode(hello, h.nonce_a, &other, &got), HVD_ERR_AUTH);
    /* replayed against a different challenge */
    uint8_t fresh[HVD_NONCE_LEN];
    memset(fresh, 0x11, sizeof fresh);
    assert_int_equal(hvd__frame_hello_decode(hello, fresh, &secret, &got), HVD_ERR_AUTH);
    /* any field changed in flight: from, to, generation, nonce, mac */
    const size_t offsets[] = {8, 12, 16, 20, HVD_HELLO_LEN - 1};
    for (size_t i = 0; i < sizeof offsets / sizeof *offsets; i++) {
        memcpy(bad, hello, sizeof bad);
        bad[offsets[i]] ^= 1;
        assert_int_equal(hvd__frame_hello_decode(bad, h.nonce_a, &secret, &got), HVD_ERR_AUTH);
    }
    /* wrong magic, wrong version */
    memcpy(bad, hello, sizeof bad);
    bad[0] = 'X';
    assert_int_equal(hvd__frame_hello_decode(bad, h.nonce_a, &secret, &got), HVD_ERR_PROTOCOL);
    memcpy(bad, hello, sizeof bad);
    bad[4] = 99;
    assert_int_equal(hvd__frame_hello_decode(bad, h.nonce_a, &secret, &got), HVD_ERR_PROTOCOL);
}

static void test_welcome_rejections(void **state) {
    (void)state;
    hvd_hello_t h = sample();
    uint8_t w[HVD_WELCOME_LEN];
    assert_int_equal(hvd__frame_welcome_encode(w, &h, &other), HVD_OK);
    assert_int_equal(hvd__frame_welcome_check(w, &h, &secret), HVD_ERR_AUTH);
    assert_int_equal(hvd__frame_welcome_encode(w, &h, &secret), HVD_OK);
    hvd_hello_t moved = h;
    moved.to = 4;
    assert_int_equal(hvd__frame_welcome_check(w, &moved, &secret), HVD_ERR_AUTH);
    /* the HELLO's mac (other label) does not pass as the WELCOME's */
    uint8_t hello[HVD_HELLO_LEN];
    assert_int_equal(hvd__frame_hello_encode(hello, &h, &secret), HVD_OK);
    memcpy(w + 8, hello + 20 + HVD_NONCE_LEN, HVD_MAC_LEN);
    assert_int_equal(hvd__frame_welcome_check(w, &h, &secret), HVD_ERR_AUTH);
}

static void test_frame_header(void **state) {
    (void)state;
    uint8_t hdr[HVD_FRAME_HEADER_LEN];
    int kind;
    uint64_t len;
    hvd__frame_header_encode(hdr, HVD_FRAME_DATA, 0x0102030405060708ull);
    assert_int_equal(hvd__frame_header_decode(hdr, &kind, &len), HVD_OK);
    assert_int_equal(kind, HVD_FRAME_DATA);
    assert_true(len == 0x0102030405060708ull);
    assert_int_equal(hdr[8], 0x08); /* little-endian on the wire */
    hvd__frame_header_encode(hdr, HVD_FRAME_ABORT, 5);
    assert_int_equal(hvd__frame_header_decode(hdr, &kind, &len), HVD_OK);
    assert_int_equal(kind, HVD_FRAME_ABORT);
    hdr[4] = 9;
    assert_int_equal(hvd__frame_header_decode(hdr, &kind, &len), HVD_ERR_PROTOCOL);
    hvd__frame_header_encode(hdr, HVD_FRAME_DATA, 1);
    hdr[1] = 'x';
    assert_int_equal(hvd__frame_header_decode(hdr, &kind, &len), HVD_ERR_PROTOCOL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_round_trip),
        cmocka_unit_test(test_hello_rejections),
        cmocka_unit_test(test_welcome_rejections),
        cmocka_unit_test(test_frame_header),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
