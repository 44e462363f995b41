/* The negotiation messages of the core (docs/libhvd.md, "Named asynchronous operations: the core"):
 * every rank sends the coordinator a RequestList of the named operations it has ready, the
 * coordinator answers with a ResponseList of what every rank executes, in that order.
 *
 * Encoding (all integers little-endian, doubles as their IEEE-754 bits):
 *   RequestList  "HVDQ" | version u16 | flags u16 (bit 0: shutdown) | count u32 | requests
 *   Request      rank i32 | type u8 | dtype u8 | op u8 | ndims u8 | root i32 |
 *                pset i32 | pset_size i32 |
 *                prescale f64 | postscale f64 | dims i64 x ndims | name_len u16 | name |
 *                timeout_ms u32 | key_len u16 | key
 *   ResponseList "HVDP" | version u16 | flags u16 (bit 0: shutdown) | count u32 | responses
 *   Response     type u8 | dtype u8 | op u8 | status u8 | last_joined_rank i32 | pset i32 |
 *                prescale f64 | postscale f64 | nnames u32 | (name_len u16 | name) x nnames |
 *                nsizes u32 | sizes i64 x nsizes | error_len u16 | error
 * Decoders check every length against the bytes that remain before allocating, and the
 * counts and lengths against the HVD_NEG_* bounds, so a hostile or corrupt message costs at
 * most its own size in memory. Names are 1..HVD_NEG_NAME_MAX bytes without NUL. */
#ifndef HVD_WIRE_NEGOTIATE_H
#define HVD_WIRE_NEGOTIATE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

#define HVD_NEG_VERSION 3
#define HVD_NEG_NAME_MAX 1024
#define HVD_NEG_MAX_DIMS 8
#define HVD_NEG_ERROR_MAX 4096

/* Request and response types: the reference's values. */
typedef enum {
    HVD_REQ_ALLREDUCE = 0,
    HVD_REQ_ALLGATHER = 1,
    HVD_REQ_BROADCAST = 2,
    HVD_REQ_JOIN = 3,
    HVD_REQ_ADASUM = 4,
    HVD_REQ_ALLTOALL = 5,
    HVD_REQ_BARRIER = 6,
    HVD_REQ_REDUCESCATTER = 7,
    HVD_RESP_ERROR = 8,
    /* hvd's own (the reference has no point-to-point): one send and its matching receive,
     * negotiated under one name that both ranks derive alike (core/p2p.c). A request's root
     * is the partner's global rank, op HVD_P2P_SEND or HVD_P2P_RECV, dims [count, bytes];
     * the response's sizes are [bytes, source rank, destination rank]. */
    HVD_REQ_P2P = 9
} hvd_req_type_t;

/* The op of an HVD_REQ_P2P request: which side of the pair the requesting rank is. */
#define HVD_P2P_SEND 0
#define HVD_P2P_RECV 1

typedef struct {
    int32_t rank;
    uint8_t type, dtype, op, ndims;
    int32_t root;
    /* the process set (0: every rank) and its number of ranks: the coordinator counts a name
     * ready when that many ranks asked for it */
    int32_t pset, pset_size;
    double prescale, postscale;
    int64_t dims[HVD_NEG_MAX_DIMS];
    char *name; /* owned, NUL-terminated */
    /* The caller's deadline for the name to be agreed (0: none; hvd_enqueue_ex): past it the
     * coordinator fails the name, naming the ranks that never asked for it. */
    uint32_t timeout_ms;
    /* The caller's place of the operation in an order every rank follows (NULL or "": none;
     * owned when set, at most HVD_NEG_NAME_MAX bytes): ranks that ask for different names
     * under one key in one process set are told at once, both sides named. */
    char *key;
} hvd_request_t;

typedef struct {
    hvd_request_t *items;
    uint32_t count;
    int shutdown;
} hvd_request_list_t;

/* What an ERROR response's failure is (its status byte). */
#define HVD_NEG_FAIL_MISMATCH 0 /* the ranks disagree: HVD_ERR_MISMATCH */
#define HVD_NEG_FAIL_TIMEOUT 1  /* the name's deadline passed first: HVD_ERR_TIMEOUT */

typedef struct {
    uint8_t type, dtype, op;
    uint8_t status; /* an ERROR response's HVD_NEG_FAIL_*; 0 otherwise */
    int32_t last_joined_rank;
    int32_t pset; /* the process set that runs it; only its members execute it */
    double prescale, postscale;
    char **names; /* owned */
    uint32_t nnames;
    int64_t *sizes; /* owned */
    uint32_t nsizes;
    char *error; /* owned; "" when none */
} hvd_response_t;

typedef struct {
    hvd_response_t *items;
    uint32_t count;
    int shutdown;
} hvd_response_list_t;

/* "ALLREDUCE", ..., "ERROR" (the reference's names, for messages and the timeline);
 * "UNKNOWN" outside the enum. */
const char *hvd__neg_type_name(int type);

/* Encode into a malloc'd buffer (*buf_p, *len_p). HVD_ERR_INVALID_ARG when an item breaks
 * the bounds above (named), HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__neg_requests_encode(const hvd_request_list_t *l, uint8_t **buf_p, size_t *len_p);
hvd_status_t hvd__neg_responses_encode(const hvd_response_list_t *l, uint8_t **buf_p,
                                       size_t *len_p);

/* Decode exactly len bytes. HVD_ERR_PROTOCOL naming what is wrong (truncated, trailing
 * bytes, bad magic or version, a bound exceeded); *l_p is written only on success and is
 * released with the matching _fini. */
hvd_status_t hvd__neg_requests_decode(const uint8_t *buf, size_t len, hvd_request_list_t *l_p);
hvd_status_t hvd__neg_responses_decode(const uint8_t *buf, size_t len, hvd_response_list_t *l_p);

void hvd__neg_requests_fini(hvd_request_list_t *l);
void hvd__neg_responses_fini(hvd_response_list_t *l);

#endif
