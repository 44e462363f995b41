/* The service wire: request/response RPC between horovodrun's driver service and the task services
 * it starts on every host (NIC discovery, docs/running.md "Across hosts"), authenticated with the
 * job secret. It replaces the reference's pickled frames (HMAC over the body only, so a recorded
 * frame replays anywhere) with explicit little-endian messages bound to one connection:
 *
 *   server -> client  CHALLENGE  magic "HVDS" | version u16 | reserved u16 (0) | nonce_s[16]
 *   client -> server  REQUEST    magic "HVDQ" | version u16 | type u16 | seq u32 |
 *                                body length u32 | nonce_c[16] | mac[32] | body
 *   server -> client  RESPONSE   magic "HVDR" | version u16 | type u16 | seq u32 |
 *                                body length u32 | mac[32] | body
 *
 * REQUEST's mac is HMAC-SHA256(secret, "hvd-svc-req" | nonce_s | the 32 header bytes before
 * the mac | body); RESPONSE's is HMAC-SHA256(secret, "hvd-svc-resp" | nonce_s | nonce_c |
 * the 16 header bytes before the mac | body). nonce_s is fresh per connection, so a request
 * recorded on one connection fails authentication on any other; seq starts at 0 on each
 * connection and grows by exactly 1 per request, so a request replayed on its own connection
 * is refused too. nonce_c is fresh per request and binds the response to its request.
 * Body lengths are checked against HVD_SVC_MAX_BODY before anything is allocated, and the
 * server closes the connection on the first bad byte, so a stranger costs one bounded
 * buffer for at most the idle timeout.
 *
 * Bodies are built with the bounded encoder and parsed with the bounded decoder below
 * (u8/u16/u32 and u16-length-prefixed strings), which never read or write past their ends.
 *
 * The same module carries the socket side: a client that connects with a deadline, and a
 * threaded server (bounded concurrent connections, an idle deadline per connection, prompt
 * stop) that answers PING itself and hands every other authenticated request to a handler. */
#ifndef HVD_RUNNER_SERVICE_SERVICE_H
#define HVD_RUNNER_SERVICE_SERVICE_H

#include <hvd/types.h>

#include "crypto/secret.h"

#include <stddef.h>
#include <stdint.h>

#define HVD_SVC_VERSION 1
#define HVD_SVC_NONCE_LEN 16
#define HVD_SVC_MAC_LEN 32
/* Largest request or response body; checked before any allocation. */
#define HVD_SVC_MAX_BODY (64u * 1024u)

#define HVD_SVC_CHALLENGE_LEN (4 + 2 + 2 + HVD_SVC_NONCE_LEN)
#define HVD_SVC_REQ_HEAD_LEN (4 + 2 + 2 + 4 + 4 + HVD_SVC_NONCE_LEN) /* bytes before the mac */
#define HVD_SVC_REQ_PREFIX_LEN (HVD_SVC_REQ_HEAD_LEN + HVD_SVC_MAC_LEN)
#define HVD_SVC_RESP_HEAD_LEN (4 + 2 + 2 + 4 + 4)
#define HVD_SVC_RESP_PREFIX_LEN (HVD_SVC_RESP_HEAD_LEN + HVD_SVC_MAC_LEN)

/* Message types every service understands. Services number their own from 16. */
#define HVD_SVC_PING 1  /* empty body */
#define HVD_SVC_PONG 2  /* str service name | str source address the server saw */
#define HVD_SVC_ACK 3   /* empty body */
#define HVD_SVC_ERROR 4 /* str message: the service refused an authenticated request */

/* Longest string a service puts in a PONG or ERROR. */
#define HVD_SVC_NAME_MAX 64
#define HVD_SVC_ERROR_MAX 512

/* A decoded REQUEST or RESPONSE header. nonce_c is meaningful for requests only. */
typedef struct {
    uint16_t type;
    uint32_t seq;
    uint32_t len;
    uint8_t nonce_c[HVD_SVC_NONCE_LEN];
} hvd_svc_head_t;

/* --- message codecs (no I/O; thread safe) ------------------------------------------------- */

void hvd__svc_challenge_encode(uint8_t out[HVD_SVC_CHALLENGE_LEN],
                               const uint8_t nonce_s[HVD_SVC_NONCE_LEN]);
/* HVD_ERR_PROTOCOL for a wrong magic, an unknown version (named) or non-zero reserved bytes. */
hvd_status_t hvd__svc_challenge_decode(const uint8_t in[HVD_SVC_CHALLENGE_LEN],
                                       uint8_t nonce_s_p[HVD_SVC_NONCE_LEN]);

/* Write a REQUEST prefix (header and mac) for h (h->len bytes of body) into out.
 * HVD_ERR_TOO_LARGE when h->len exceeds HVD_SVC_MAX_BODY; HVD_ERR_IO if HMAC fails. */
hvd_status_t hvd__svc_request_encode(uint8_t out[HVD_SVC_REQ_PREFIX_LEN], const hvd_svc_head_t *h,
                                     const uint8_t *body, const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                     const hvd_secret_t *secret);
/* Parse a REQUEST header (magic, version, length) without authenticating it, so that the
 * reader knows how many body bytes follow. HVD_ERR_PROTOCOL (wrong magic, unknown version),
 * HVD_ERR_TOO_LARGE (length over HVD_SVC_MAX_BODY). */
hvd_status_t hvd__svc_request_head_decode(const uint8_t in[HVD_SVC_REQ_PREFIX_LEN],
                                          hvd_svc_head_t *h_p);
/* Authenticate a whole REQUEST (prefix as received, body of h->len bytes) against the
 * challenge nonce_s this side sent and the sequence number it expects. HVD_ERR_AUTH for a
 * wrong mac ("bad MAC ...") or an unexpected seq ("replayed or out-of-order ..."). */
hvd_status_t hvd__svc_request_verify(const uint8_t in[HVD_SVC_REQ_PREFIX_LEN],
                                     const hvd_svc_head_t *h, const uint8_t *body,
                                     const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                     uint32_t expected_seq, const hvd_secret_t *secret);

/* Write a RESPONSE prefix for h (h->type, h->seq, h->len; nonce_c is the request's). */
hvd_status_t hvd__svc_response_encode(uint8_t out[HVD_SVC_RESP_PREFIX_LEN], const hvd_svc_head_t *h,
                                      const uint8_t *body, const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                      const uint8_t nonce_c[HVD_SVC_NONCE_LEN],
                                      const hvd_secret_t *secret);
/* As hvd__svc_request_head_decode, for a RESPONSE. */
hvd_status_t hvd__svc_response_head_decode(const uint8_t in[HVD_SVC_RESP_PREFIX_LEN],
                                           hvd_svc_head_t *h_p);
/* Authenticate a RESPONSE to the request (seq, nonce_c) sent on the connection of nonce_s. */
hvd_status_t hvd__svc_response_verify(const uint8_t in[HVD_SVC_RESP_PREFIX_LEN],
                                      const hvd_svc_head_t *h, const uint8_t *body,
                                      const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                      const uint8_t nonce_c[HVD_SVC_NONCE_LEN], uint32_t seq,
                                      const hvd_secret_t *secret);

/* Decode and authenticate one whole REQUEST held in buf[0..len) (tests, fuzzing). On success
 * *h_p is its header and *body_p points into buf. HVD_ERR_PROTOCOL also for truncated input
 * or bytes after the body. */
hvd_status_t hvd__svc_request_parse(const uint8_t *buf, size_t len,
                                    const uint8_t nonce_s[HVD_SVC_NONCE_LEN], uint32_t expected_seq,
                                    const hvd_secret_t *secret, hvd_svc_head_t *h_p,
                                    const uint8_t **body_p);
/* The same for a RESPONSE to request (seq, nonce_c). */
hvd_status_t hvd__svc_response_parse(const uint8_t *buf, size_t len,
                                     const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                     const uint8_t nonce_c[HVD_SVC_NONCE_LEN], uint32_t seq,
                                     const hvd_secret_t *secret, hvd_svc_head_t *h_p,
                                     const uint8_t **body_p);

/* --- bounded body encoder and decoder ----------------------------------------------------- */

/* Writes into a caller-owned buffer; once a value does not fit, the encoder is marked
 * overflowed and writes nothing more, so a sequence of puts is checked once at the end. */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
    int overflow;
} hvd_svc_enc_t;

void hvd__svc_enc_init(hvd_svc_enc_t *e, uint8_t *buf, size_t cap);
void hvd__svc_enc_u8(hvd_svc_enc_t *e, uint8_t v);
void hvd__svc_enc_u16(hvd_svc_enc_t *e, uint16_t v);
void hvd__svc_enc_u32(hvd_svc_enc_t *e, uint32_t v);
void hvd__svc_enc_bytes(hvd_svc_enc_t *e, const void *p, size_t n);
/* u16 length, then the bytes of s (no NUL). Strings over 65535 bytes overflow. */
void hvd__svc_enc_str(hvd_svc_enc_t *e, const char *s);
/* HVD_ERR_TOO_LARGE naming what when anything overflowed; else *len_p = bytes written. */
hvd_status_t hvd__svc_enc_finish(const hvd_svc_enc_t *e, const char *what, size_t *len_p);

/* Reads from a borrowed buffer. The first failure is sticky: later calls return it without
 * reading, so a decoder may chain calls and test once. Errors are HVD_ERR_PROTOCOL naming
 * the field (and the message being decoded, from hvd__svc_dec_init). */
typedef struct {
    const uint8_t *p;
    size_t len, off;
    const char *what;
    hvd_status_t status;
} hvd_svc_dec_t;

void hvd__svc_dec_init(hvd_svc_dec_t *d, const uint8_t *p, size_t len, const char *what);
hvd_status_t hvd__svc_dec_u8(hvd_svc_dec_t *d, const char *field, uint8_t *v_p);
hvd_status_t hvd__svc_dec_u16(hvd_svc_dec_t *d, const char *field, uint16_t *v_p);
hvd_status_t hvd__svc_dec_u32(hvd_svc_dec_t *d, const char *field, uint32_t *v_p);
hvd_status_t hvd__svc_dec_bytes(hvd_svc_dec_t *d, const char *field, void *out, size_t n);
/* A string of at most out_size - 1 bytes without NUL bytes, NUL-terminated into out. */
hvd_status_t hvd__svc_dec_str(hvd_svc_dec_t *d, const char *field, char *out, size_t out_size);
/* HVD_ERR_PROTOCOL when bytes are left over (or an earlier call failed). */
hvd_status_t hvd__svc_dec_end(hvd_svc_dec_t *d);

/* --- client ------------------------------------------------------------------------------- */

typedef struct hvd_svc_client hvd_svc_client_t;

/* Connect to addr:port (numeric IPv4 or a host name) and read the server's challenge, both
 * before deadline_ms. secret is copied. Blocks. Statuses: HVD_ERR_PEER_LOST (refused or
 * closed), HVD_ERR_TIMEOUT, HVD_ERR_PROTOCOL (not a service of this version), HVD_ERR_IO,
 * HVD_ERR_NO_MEMORY; every message names addr:port. */
hvd_status_t hvd__svc_client_open(const char *addr, int port, const hvd_secret_t *secret,
                                  int64_t deadline_ms, hvd_svc_client_t **client_p);

/* Send one request and read its response before deadline_ms. The response body goes to
 * resp[0..resp_cap); *resp_len_p is its length. A response of type HVD_SVC_ERROR becomes
 * HVD_ERR_STATE with the service's message. Other statuses as hvd__svc_client_open, plus
 * HVD_ERR_AUTH (the response failed authentication: the server does not hold the secret)
 * and HVD_ERR_TOO_LARGE (body over resp_cap or the limit). After any error the connection
 * is unusable: close it. One thread at a time per client. */
hvd_status_t hvd__svc_client_call(hvd_svc_client_t *c, uint16_t type, const uint8_t *body,
                                  size_t len, int64_t deadline_ms, uint16_t *resp_type_p,
                                  uint8_t *resp, size_t resp_cap, size_t *resp_len_p);

/* PING and decode the PONG: the service's name and the source address it saw. */
hvd_status_t hvd__svc_client_ping(hvd_svc_client_t *c, int64_t deadline_ms,
                                  char name_p[HVD_SVC_NAME_MAX], char source_p[16]);

/* "addr:port" of the server, for messages. */
const char *hvd__svc_client_peer(const hvd_svc_client_t *c);

/* Close the connection and free the client (NULL is ignored). */
void hvd__svc_client_close(hvd_svc_client_t *c);

/* --- server ------------------------------------------------------------------------------- */

/* Answers one authenticated request of a type other than PING. peer_addr is the source IPv4
 * address of the connection. Write the response type and up to resp_cap body bytes; return
 * HVD_OK, or an error whose hvd_last_error() text is sent back as an HVD_SVC_ERROR response
 * and logged at WARNING. Called from connection threads, concurrently: must be thread safe
 * and must not block for long. */
typedef hvd_status_t (*hvd_svc_handler_fn)(void *arg, const char *peer_addr, uint16_t type,
                                           const uint8_t *body, size_t len, uint16_t *resp_type_p,
                                           uint8_t *resp, size_t resp_cap, size_t *resp_len_p);

#define HVD_SVC_DEFAULT_MAX_CONNECTIONS 64u
#define HVD_SVC_DEFAULT_IDLE_MS 10000

typedef struct {
    const char *name;           /* e.g. "driver service": in PONGs and log lines; copied */
    const char *bind_addr;      /* NULL or "": every IPv4 address */
    const hvd_secret_t *secret; /* required; copied */
    unsigned max_connections;   /* 0: HVD_SVC_DEFAULT_MAX_CONNECTIONS */
    int idle_ms;                /* silence allowed between requests; 0: default */
    hvd_svc_handler_fn handler; /* NULL: only PING is served */
    void *handler_arg;
} hvd_svc_server_config_t;

typedef struct hvd_svc_server hvd_svc_server_t;

/* Listen on an ephemeral port and start the accept thread; returns once the port accepts
 * connections. A rejected message is logged once at WARNING naming the peer and the reason,
 * and only its connection is closed. Statuses: HVD_ERR_INVALID_ARG (no secret or name, bad
 * bind_addr), HVD_ERR_IO (listen or thread creation failed), HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__svc_server_start(const hvd_svc_server_config_t *cfg, hvd_svc_server_t **server_p);

/* The port listened on. Never blocks. */
int hvd__svc_server_port(const hvd_svc_server_t *s);

/* Stop accepting, close every connection and join every thread; returns within a few
 * milliseconds of the current handler calls returning. NULL is ignored. */
void hvd__svc_server_stop(hvd_svc_server_t *s);

#endif
