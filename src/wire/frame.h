/* The data-plane wire between two ranks.
 *
 * Connection set-up (the lower rank connects, the higher rank accepts), authenticated with
 * the job secret in both directions and bound to one init generation of one pair of ranks:
 *
 *   acceptor  -> connector  CHALLENGE  magic "HVDC" | version u16 | reserved u16 | nonce_a[16]
 *   connector -> acceptor   HELLO      magic "HVDH" | version u16 | reserved u16 | from u32 |
 *                                      to u32 | generation u32 | nonce_c[16] | mac[32]
 *   acceptor  -> connector  WELCOME    magic "HVDW" | version u16 | reserved u16 | mac[32]
 *
 * HELLO's mac is HMAC-SHA256(secret, "hvd-hello" | nonce_a | nonce_c | from | to |
 * generation), WELCOME's the same over "hvd-welcome". A fresh nonce_a per connection means a
 * recorded HELLO cannot be replayed; messages have fixed sizes, so nothing is allocated for
 * a stranger, who is dropped on the first wrong byte.
 *
 * After set-up the stream is a sequence of frames: magic "HVDF" | kind u8 | reserved[3] |
 * payload length u64, then the payload. kind DATA carries collective data; kind ABORT
 * carries status i32 | message (at most HVD_FRAME_ABORT_MAX bytes) and is the last frame a
 * failing rank sends. All integers little-endian. */
#ifndef HVD_WIRE_FRAME_H
#define HVD_WIRE_FRAME_H

#include <hvd/types.h>

#include "crypto/secret.h"

#include <stddef.h>
#include <stdint.h>

#define HVD_WIRE_VERSION 1
#define HVD_NONCE_LEN 16
#define HVD_MAC_LEN 32

#define HVD_CHALLENGE_LEN (4 + 2 + 2 + HVD_NONCE_LEN)
#define HVD_HELLO_LEN (4 + 2 + 2 + 4 + 4 + 4 + HVD_NONCE_LEN + HVD_MAC_LEN)
#define HVD_WELCOME_LEN (4 + 2 + 2 + HVD_MAC_LEN)

#define HVD_FRAME_HEADER_LEN 16
#define HVD_FRAME_DATA 1
#define HVD_FRAME_ABORT 2
#define HVD_FRAME_ABORT_MAX 1024

typedef struct {
    uint32_t from, to, generation;
    uint8_t nonce_a[HVD_NONCE_LEN], nonce_c[HVD_NONCE_LEN];
} hvd_hello_t;

void hvd__frame_challenge_encode(uint8_t out[HVD_CHALLENGE_LEN],
                                 const uint8_t nonce_a[HVD_NONCE_LEN]);
/* HVD_ERR_PROTOCOL unless in is a CHALLENGE of this version. */
hvd_status_t hvd__frame_challenge_decode(const uint8_t in[HVD_CHALLENGE_LEN],
                                         uint8_t nonce_a_p[HVD_NONCE_LEN]);

/* Encode HELLO with its mac computed from the secret. */
hvd_status_t hvd__frame_hello_encode(uint8_t out[HVD_HELLO_LEN], const hvd_hello_t *h,
                                     const hvd_secret_t *secret);
/* Parse HELLO and check its mac against nonce_a (the challenge this side sent):
 * HVD_ERR_PROTOCOL for a malformed message, HVD_ERR_AUTH for a wrong mac. */
hvd_status_t hvd__frame_hello_decode(const uint8_t in[HVD_HELLO_LEN],
                                     const uint8_t nonce_a[HVD_NONCE_LEN],
                                     const hvd_secret_t *secret, hvd_hello_t *h_p);

hvd_status_t hvd__frame_welcome_encode(uint8_t out[HVD_WELCOME_LEN], const hvd_hello_t *h,
                                       const hvd_secret_t *secret);
/* HVD_ERR_AUTH unless in is the WELCOME the acceptor of h must send. */
hvd_status_t hvd__frame_welcome_check(const uint8_t in[HVD_WELCOME_LEN], const hvd_hello_t *h,
                                      const hvd_secret_t *secret);

void hvd__frame_header_encode(uint8_t out[HVD_FRAME_HEADER_LEN], int kind, uint64_t len);
/* HVD_ERR_PROTOCOL for a wrong magic or unknown kind. */
hvd_status_t hvd__frame_header_decode(const uint8_t in[HVD_FRAME_HEADER_LEN], int *kind_p,
                                      uint64_t *len_p);

#endif
