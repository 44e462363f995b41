/* Codecs of the data-plane wire (layouts in frame.h). */
#include "wire/frame.h"

#include "common/error.h"
#include "crypto/hmac.h"
#include "wire/le.h"

#include <string.h>

static const uint8_t MAGIC_CHALLENGE[4] = {'H', 'V', 'D', 'C'};
static const uint8_t MAGIC_HELLO[4] = {'H', 'V', 'D', 'H'};
static const uint8_t MAGIC_WELCOME[4] = {'H', 'V', 'D', 'W'};
static const uint8_t MAGIC_FRAME[4] = {'H', 'V', 'D', 'F'};

static void put_preamble(uint8_t *out, const uint8_t magic[4]) {
    memcpy(out, magic, 4);
    hvd__le16_put(out + 4, HVD_WIRE_VERSION);
    hvd__le16_put(out + 6, 0);
}

static hvd_status_t check_preamble(const uint8_t *in, const uint8_t magic[4], const char *what) {
    if (memcmp(in, magic, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "data connection: expected a %s message", what);
    if (hvd__le16_get(in + 4) != HVD_WIRE_VERSION)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "data connection: %s of wire version %u, this is version %d "
                              "(mixed hvd versions in one job?)",
                              what, hvd__le16_get(in + 4), HVD_WIRE_VERSION);
    return HVD_OK;
}

void hvd__frame_challenge_encode(uint8_t out[HVD_CHALLENGE_LEN],
                                 const uint8_t nonce_a[HVD_NONCE_LEN]) {
    put_preamble(out, MAGIC_CHALLENGE);
    memcpy(out + 8, nonce_a, HVD_NONCE_LEN);
}

hvd_status_t hvd__frame_challenge_decode(const uint8_t in[HVD_CHALLENGE_LEN],
                                         uint8_t nonce_a_p[HVD_NONCE_LEN]) {
    hvd_status_t st = check_preamble(in, MAGIC_CHALLENGE, "CHALLENGE");
    if (st == HVD_OK)
        memcpy(nonce_a_p, in + 8, HVD_NONCE_LEN);
    return st;
}

/* The mac binds both nonces, both ranks and the generation, with a label per direction so a
 * HELLO can never pass as a WELCOME. */
static hvd_status_t hello_mac(const char *label, const hvd_hello_t *h, const hvd_secret_t *secret,
                              uint8_t mac[HVD_MAC_LEN]) {
    uint8_t ids[12];
    hvd__le32_put(ids, h->from);
    hvd__le32_put(ids + 4, h->to);
    hvd__le32_put(ids + 8, h->generation);
    const void *parts[] = {label, h->nonce_a, h->nonce_c, ids};
    const size_t lens[] = {strlen(label), HVD_NONCE_LEN, HVD_NONCE_LEN, sizeof ids};
    if (hvd__hmac_sha256(secret->bytes, HVD_SECRET_LEN, parts, lens, 4, mac) != 0)
        return hvd__error_set(HVD_ERR_IO, "HMAC-SHA256 failed");
    return HVD_OK;
}

hvd_status_t hvd__frame_hello_encode(uint8_t out[HVD_HELLO_LEN], const hvd_hello_t *h,
                                     const hvd_secret_t *secret) {
    put_preamble(out, MAGIC_HELLO);
    hvd__le32_put(out + 8, h->from);
    hvd__le32_put(out + 12, h->to);
    hvd__le32_put(out + 16, h->generation);
    memcpy(out + 20, h->nonce_c, HVD_NONCE_LEN);
    return hello_mac("hvd-hello", h, secret, out + 20 + HVD_NONCE_LEN);
}

hvd_status_t hvd__frame_hello_decode(const uint8_t in[HVD_HELLO_LEN],
                                     const uint8_t nonce_a[HVD_NONCE_LEN],
                                     const hvd_secret_t *secret, hvd_hello_t *h_p) {
    hvd_status_t st = check_preamble(in, MAGIC_HELLO, "HELLO");
    if (st != HVD_OK)
        return st;
    hvd_hello_t h;
    h.from = hvd__le32_get(in + 8);
    h.to = hvd__le32_get(in + 12);
    h.generation = hvd__le32_get(in + 16);
    memcpy(h.nonce_a, nonce_a, HVD_NONCE_LEN);
    memcpy(h.nonce_c, in + 20, HVD_NONCE_LEN);
    uint8_t mac[HVD_MAC_LEN];
    st = hello_mac("hvd-hello", &h, secret, mac);
    if (st != HVD_OK)
        return st;
    if (!hvd__crypto_equal(mac, in + 20 + HVD_NONCE_LEN, HVD_MAC_LEN))
        return hvd__error_set(HVD_ERR_AUTH, "data connection: HELLO failed authentication "
                                            "(wrong job secret or replayed message)");
    *h_p = h;
    return HVD_OK;
}

hvd_status_t hvd__frame_welcome_encode(uint8_t out[HVD_WELCOME_LEN], const hvd_hello_t *h,
                                       const hvd_secret_t *secret) {
    put_preamble(out, MAGIC_WELCOME);
    return hello_mac("hvd-welcome", h, secret, out + 8);
}

hvd_status_t hvd__frame_welcome_check(const uint8_t in[HVD_WELCOME_LEN], const hvd_hello_t *h,
                                      const hvd_secret_t *secret) {
    hvd_status_t st = check_preamble(in, MAGIC_WELCOME, "WELCOME");
    if (st != HVD_OK)
        return st;
    uint8_t mac[HVD_MAC_LEN];
    st = hello_mac("hvd-welcome", h, secret, mac);
    if (st != HVD_OK)
        return st;
    if (!hvd__crypto_equal(mac, in + 8, HVD_MAC_LEN))
        return hvd__error_set(HVD_ERR_AUTH, "data connection: WELCOME failed authentication "
                                            "(the listener does not hold the job secret)");
    return HVD_OK;
}

void hvd__frame_header_encode(uint8_t out[HVD_FRAME_HEADER_LEN], int kind, uint64_t len) {
    memcpy(out, MAGIC_FRAME, 4);
    out[4] = (uint8_t)kind;
    out[5] = out[6] = out[7] = 0;
    hvd__le64_put(out + 8, len);
}

hvd_status_t hvd__frame_header_decode(const uint8_t in[HVD_FRAME_HEADER_LEN], int *kind_p,
                                      uint64_t *len_p) {
    if (memcmp(in, MAGIC_FRAME, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "data stream out of step: no frame header");
    if (in[4] != HVD_FRAME_DATA && in[4] != HVD_FRAME_ABORT)
        return hvd__error_set(HVD_ERR_PROTOCOL, "data stream: unknown frame kind %u", in[4]);
    *kind_p = in[4];
    *len_p = hvd__le64_get(in + 8);
    return HVD_OK;
}
