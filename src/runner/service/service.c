/* Codecs of the service wire (layouts in service.h); the socket side is service_io.c. */
#include "runner/service/service.h"

#include "common/error.h"
#include "crypto/hmac.h"
#include "wire/le.h"

#include <string.h>

static const uint8_t MAGIC_CHALLENGE[4] = {'H', 'V', 'D', 'S'};
static const uint8_t MAGIC_REQUEST[4] = {'H', 'V', 'D', 'Q'};
static const uint8_t MAGIC_RESPONSE[4] = {'H', 'V', 'D', 'R'};

static const char LABEL_REQ[] = "hvd-svc-req";
static const char LABEL_RESP[] = "hvd-svc-resp";

static hvd_status_t check_magic_version(const uint8_t *in, const uint8_t magic[4],
                                        const char *what) {
    if (memcmp(in, magic, 4) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "bad magic: not a %s of the hvd service wire",
                              what);
    uint16_t version = hvd__le16_get(in + 4);
    if (version != HVD_SVC_VERSION)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "%s of service wire version %u, this is version %d (mixed hvd "
                              "versions in one job?)",
                              what, version, HVD_SVC_VERSION);
    return HVD_OK;
}

void hvd__svc_challenge_encode(uint8_t out[HVD_SVC_CHALLENGE_LEN],
                               const uint8_t nonce_s[HVD_SVC_NONCE_LEN]) {
    memcpy(out, MAGIC_CHALLENGE, 4);
    hvd__le16_put(out + 4, HVD_SVC_VERSION);
    hvd__le16_put(out + 6, 0);
    memcpy(out + 8, nonce_s, HVD_SVC_NONCE_LEN);
}

hvd_status_t hvd__svc_challenge_decode(const uint8_t in[HVD_SVC_CHALLENGE_LEN],
                                       uint8_t nonce_s_p[HVD_SVC_NONCE_LEN]) {
    hvd_status_t st = check_magic_version(in, MAGIC_CHALLENGE, "CHALLENGE");
    if (st != HVD_OK)
        return st;
    if (hvd__le16_get(in + 6) != 0)
        return hvd__error_set(HVD_ERR_PROTOCOL, "CHALLENGE with non-zero reserved bytes");
    memcpy(nonce_s_p, in + 8, HVD_SVC_NONCE_LEN);
    return HVD_OK;
}

/* Header bytes common to both directions: magic | version | type | seq | len. */
static void put_head(uint8_t *out, const uint8_t magic[4], const hvd_svc_head_t *h) {
    memcpy(out, magic, 4);
    hvd__le16_put(out + 4, HVD_SVC_VERSION);
    hvd__le16_put(out + 6, h->type);
    hvd__le32_put(out + 8, h->seq);
    hvd__le32_put(out + 12, h->len);
}

static hvd_status_t get_head(const uint8_t *in, const uint8_t magic[4], const char *what,
                             hvd_svc_head_t *h_p) {
    hvd_status_t st = check_magic_version(in, magic, what);
    if (st != HVD_OK)
        return st;
    uint32_t len = hvd__le32_get(in + 12);
    if (len > HVD_SVC_MAX_BODY)
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "oversize %s: body of %u bytes, the limit is %u bytes", what, len,
                              HVD_SVC_MAX_BODY);
    memset(h_p, 0, sizeof *h_p);
    h_p->type = hvd__le16_get(in + 6);
    h_p->seq = hvd__le32_get(in + 8);
    h_p->len = len;
    return HVD_OK;
}

static hvd_status_t mac_of(const char *label, const uint8_t *nonce_s, const uint8_t *nonce_c,
                           const uint8_t *head, size_t head_len, const uint8_t *body,
                           size_t body_len, const hvd_secret_t *secret,
                           uint8_t mac[HVD_SVC_MAC_LEN]) {
    const void *parts[5];
    size_t lens[5], n = 0;
    parts[n] = label, lens[n++] = strlen(label);
    parts[n] = nonce_s, lens[n++] = HVD_SVC_NONCE_LEN;
    if (nonce_c)
        parts[n] = nonce_c, lens[n++] = HVD_SVC_NONCE_LEN;
    parts[n] = head, lens[n++] = head_len;
    parts[n] = body, lens[n++] = body_len;
    if (hvd__hmac_sha256(secret->bytes, HVD_SECRET_LEN, parts, lens, n, mac) != 0)
        return hvd__error_set(HVD_ERR_IO, "HMAC-SHA256 failed");
    return HVD_OK;
}

hvd_status_t hvd__svc_request_encode(uint8_t out[HVD_SVC_REQ_PREFIX_LEN], const hvd_svc_head_t *h,
                                     const uint8_t *body, const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                     const hvd_secret_t *secret) {
    if (h->len > HVD_SVC_MAX_BODY)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "request body of %u bytes over the limit of %u",
                              h->len, HVD_SVC_MAX_BODY);
    put_head(out, MAGIC_REQUEST, h);
    memcpy(out + 16, h->nonce_c, HVD_SVC_NONCE_LEN);
    return mac_of(LABEL_REQ, nonce_s, NULL, out, HVD_SVC_REQ_HEAD_LEN, body, h->len, secret,
                  out + HVD_SVC_REQ_HEAD_LEN);
}

hvd_status_t hvd__svc_request_head_decode(const uint8_t in[HVD_SVC_REQ_PREFIX_LEN],
                                          hvd_svc_head_t *h_p) {
    hvd_svc_head_t h;
    hvd_status_t st = get_head(in, MAGIC_REQUEST, "REQUEST", &h);
    if (st != HVD_OK)
        return st;
    memcpy(h.nonce_c, in + 16, HVD_SVC_NONCE_LEN);
    *h_p = h;
    return HVD_OK;
}

hvd_status_t hvd__svc_request_verify(const uint8_t in[HVD_SVC_REQ_PREFIX_LEN],
                                     const hvd_svc_head_t *h, const uint8_t *body,
                                     const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                     uint32_t expected_seq, const hvd_secret_t *secret) {
    uint8_t mac[HVD_SVC_MAC_LEN];
    hvd_status_t st =
        mac_of(LABEL_REQ, nonce_s, NULL, in, HVD_SVC_REQ_HEAD_LEN, body, h->len, secret, mac);
    if (st != HVD_OK)
        return st;
    if (!hvd__crypto_equal(mac, in + HVD_SVC_REQ_HEAD_LEN, HVD_SVC_MAC_LEN))
        return hvd__error_set(HVD_ERR_AUTH, "bad MAC (wrong secret, tampered message, or a "
                                            "message recorded on another connection)");
    if (h->seq != expected_seq)
        return hvd__error_set(HVD_ERR_AUTH,
                              "replayed or out-of-order message (seq %u, expected %u)", h->seq,
                              expected_seq);
    return HVD_OK;
}

hvd_status_t hvd__svc_response_encode(uint8_t out[HVD_SVC_RESP_PREFIX_LEN], const hvd_svc_head_t *h,
                                      const uint8_t *body, const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                      const uint8_t nonce_c[HVD_SVC_NONCE_LEN],
                                      const hvd_secret_t *secret) {
    if (h->len > HVD_SVC_MAX_BODY)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "response body of %u bytes over the limit of %u",
                              h->len, HVD_SVC_MAX_BODY);
    put_head(out, MAGIC_RESPONSE, h);
    return mac_of(LABEL_RESP, nonce_s, nonce_c, out, HVD_SVC_RESP_HEAD_LEN, body, h->len, secret,
                  out + HVD_SVC_RESP_HEAD_LEN);
}

hvd_status_t hvd__svc_response_head_decode(const uint8_t in[HVD_SVC_RESP_PREFIX_LEN],
                                           hvd_svc_head_t *h_p) {
    return get_head(in, MAGIC_RESPONSE, "RESPONSE", h_p);
}

hvd_status_t hvd__svc_response_verify(const uint8_t in[HVD_SVC_RESP_PREFIX_LEN],
                                      const hvd_svc_head_t *h, const uint8_t *body,
                                      const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                      const uint8_t nonce_c[HVD_SVC_NONCE_LEN], uint32_t seq,
                                      const hvd_secret_t *secret) {
    uint8_t mac[HVD_SVC_MAC_LEN];
    hvd_status_t st =
        mac_of(LABEL_RESP, nonce_s, nonce_c, in, HVD_SVC_RESP_HEAD_LEN, body, h->len, secret, mac);
    if (st != HVD_OK)
        return st;
    if (!hvd__crypto_equal(mac, in + HVD_SVC_RESP_HEAD_LEN, HVD_SVC_MAC_LEN))
        return hvd__error_set(HVD_ERR_AUTH, "bad MAC on the response (the service does not "
                                            "hold this job's secret, or the message was altered)");
    if (h->seq != seq)
        return hvd__error_set(HVD_ERR_AUTH, "response to request %u, expected %u", h->seq, seq);
    return HVD_OK;
}

/* A message of len bytes is a prefix_len-byte header plus exactly body_len bytes. */
static hvd_status_t check_framing(const char *what, size_t len, size_t prefix_len,
                                  uint32_t body_len) {
    if (len - prefix_len != body_len)
        return hvd__error_set(HVD_ERR_PROTOCOL, "%s body of %zu bytes, the header says %u", what,
                              len - prefix_len, body_len);
    return HVD_OK;
}

hvd_status_t hvd__svc_request_parse(const uint8_t *buf, size_t len,
                                    const uint8_t nonce_s[HVD_SVC_NONCE_LEN], uint32_t expected_seq,
                                    const hvd_secret_t *secret, hvd_svc_head_t *h_p,
                                    const uint8_t **body_p) {
    if (len < HVD_SVC_REQ_PREFIX_LEN)
        return hvd__error_set(HVD_ERR_PROTOCOL, "truncated REQUEST: %zu bytes, the header is %d",
                              len, HVD_SVC_REQ_PREFIX_LEN);
    hvd_svc_head_t h;
    hvd_status_t st = hvd__svc_request_head_decode(buf, &h);
    if (st != HVD_OK)
        return st;
    if ((st = check_framing("REQUEST", len, HVD_SVC_REQ_PREFIX_LEN, h.len)) != HVD_OK)
        return st;
    st = hvd__svc_request_verify(buf, &h, buf + HVD_SVC_REQ_PREFIX_LEN, nonce_s, expected_seq,
                                 secret);
    if (st != HVD_OK)
        return st;
    *h_p = h;
    *body_p = buf + HVD_SVC_REQ_PREFIX_LEN;
    return HVD_OK;
}

hvd_status_t hvd__svc_response_parse(const uint8_t *buf, size_t len,
                                     const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                     const uint8_t nonce_c[HVD_SVC_NONCE_LEN], uint32_t seq,
                                     const hvd_secret_t *secret, hvd_svc_head_t *h_p,
                                     const uint8_t **body_p) {
    if (len < HVD_SVC_RESP_PREFIX_LEN)
        return hvd__error_set(HVD_ERR_PROTOCOL, "truncated RESPONSE: %zu bytes, the header is %d",
                              len, HVD_SVC_RESP_PREFIX_LEN);
    hvd_svc_head_t h;
    hvd_status_t st = hvd__svc_response_head_decode(buf, &h);
    if (st != HVD_OK)
        return st;
    if ((st = check_framing("RESPONSE", len, HVD_SVC_RESP_PREFIX_LEN, h.len)) != HVD_OK)
        return st;
    st = hvd__svc_response_verify(buf, &h, buf + HVD_SVC_RESP_PREFIX_LEN, nonce_s, nonce_c, seq,
                                  secret);
    if (st != HVD_OK)
        return st;
    *h_p = h;
    *body_p = buf + HVD_SVC_RESP_PREFIX_LEN;
    return HVD_OK;
}

/* --- body encoder ------------------------------------------------------------------------- */

void hvd__svc_enc_init(hvd_svc_enc_t *e, uint8_t *buf, size_t cap) {
    e->buf = buf;
    e->cap = cap;
    e->len = 0;
    e->overflow = 0;
}

/* Room for n more bytes, else mark the encoder overflowed. */
static uint8_t *enc_room(hvd_svc_enc_t *e, size_t n) {
    if (e->overflow || n > e->cap - e->len) {
        e->overflow = 1;
        return NULL;
    }
    uint8_t *p = e->buf + e->len;
    e->len += n;
    return p;
}

void hvd__svc_enc_u8(hvd_svc_enc_t *e, uint8_t v) {
    uint8_t *p = enc_room(e, 1);
    if (p)
        *p = v;
}

void hvd__svc_enc_u16(hvd_svc_enc_t *e, uint16_t v) {
    uint8_t *p = enc_room(e, 2);
    if (p)
        hvd__le16_put(p, v);
}

void hvd__svc_enc_u32(hvd_svc_enc_t *e, uint32_t v) {
    uint8_t *p = enc_room(e, 4);
    if (p)
        hvd__le32_put(p, v);
}

void hvd__svc_enc_bytes(hvd_svc_enc_t *e, const void *src, size_t n) {
    uint8_t *p = enc_room(e, n);
    if (p && n)
        memcpy(p, src, n);
}

void hvd__svc_enc_str(hvd_svc_enc_t *e, const char *s) {
    size_t n = strlen(s);
    if (n > UINT16_MAX) {
        e->overflow = 1;
        return;
    }
    hvd__svc_enc_u16(e, (uint16_t)n);
    hvd__svc_enc_bytes(e, s, n);
}

hvd_status_t hvd__svc_enc_finish(const hvd_svc_enc_t *e, const char *what, size_t *len_p) {
    if (e->overflow)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "%s does not fit in %zu bytes", what, e->cap);
    *len_p = e->len;
    return HVD_OK;
}

/* --- body decoder ------------------------------------------------------------------------- */

void hvd__svc_dec_init(hvd_svc_dec_t *d, const uint8_t *p, size_t len, const char *what) {
    d->p = p;
    d->len = len;
    d->off = 0;
    d->what = what;
    d->status = HVD_OK;
}

static const uint8_t *dec_take(hvd_svc_dec_t *d, const char *field, size_t n) {
    if (d->status != HVD_OK)
        return NULL;
    if (n > d->len - d->off) {
        d->status = hvd__error_set(HVD_ERR_PROTOCOL, "%s: truncated at field '%s'", d->what, field);
        return NULL;
    }
    const uint8_t *p = d->p + d->off;
    d->off += n;
    return p;
}

hvd_status_t hvd__svc_dec_u8(hvd_svc_dec_t *d, const char *field, uint8_t *v_p) {
    const uint8_t *p = dec_take(d, field, 1);
    if (p)
        *v_p = *p;
    return d->status;
}

hvd_status_t hvd__svc_dec_u16(hvd_svc_dec_t *d, const char *field, uint16_t *v_p) {
    const uint8_t *p = dec_take(d, field, 2);
    if (p)
        *v_p = hvd__le16_get(p);
    return d->status;
}

hvd_status_t hvd__svc_dec_u32(hvd_svc_dec_t *d, const char *field, uint32_t *v_p) {
    const uint8_t *p = dec_take(d, field, 4);
    if (p)
        *v_p = hvd__le32_get(p);
    return d->status;
}

hvd_status_t hvd__svc_dec_bytes(hvd_svc_dec_t *d, const char *field, void *out, size_t n) {
    const uint8_t *p = dec_take(d, field, n);
    if (p && n)
        memcpy(out, p, n);
    return d->status;
}

hvd_status_t hvd__svc_dec_str(hvd_svc_dec_t *d, const char *field, char *out, size_t out_size) {
    uint16_t n = 0;
    if (hvd__svc_dec_u16(d, field, &n) != HVD_OK)
        return d->status;
    if (out_size == 0 || n > out_size - 1)
        return d->status = hvd__error_set(HVD_ERR_PROTOCOL,
                                          "%s: field '%s' is %u bytes long, at most %zu allowed",
                                          d->what, field, n, out_size ? out_size - 1 : 0);
    const uint8_t *p = dec_take(d, field, n);
    if (!p)
        return d->status;
    if (n && memchr(p, '\0', n))
        return d->status = hvd__error_set(HVD_ERR_PROTOCOL, "%s: field '%s' holds a NUL byte",
                                          d->what, field);
    memcpy(out, p, n);
    out[n] = '\0';
    return HVD_OK;
}

hvd_status_t hvd__svc_dec_end(hvd_svc_dec_t *d) {
    if (d->status == HVD_OK && d->off != d->len)
        d->status = hvd__error_set(HVD_ERR_PROTOCOL,
                                   "%s: %zu unexpected bytes after the last "
                                   "field",
                                   d->what, d->len - d->off);
    return d->status;
}
