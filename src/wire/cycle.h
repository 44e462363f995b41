/* The per-cycle control message of the core: what every rank tells every other rank at the
 * start of each background cycle (one variable allgather, group.h). It replaces the
 * reference's status bits + cache bit vector with one message that also carries this rank's
 * pending blocking collective (and, for small ones, its data), so a blocking call and the
 * named operations share one agreement per cycle.
 *
 * Encoding (little-endian):
 *   "HC" | version u8 | flags u8 | comm u8 | ext u8 | nwords u32 | payload_len u32 |
 *   reason_len u16 | signature (HVD_SIG_LEN bytes, sig.h) |
 *   hits u64 x nwords | invalid u64 x nwords (only with HVD_CYC_INVALID) |
 *   payload | reason | tune (16 bytes, only with HVD_CYC_TUNE: fusion threshold u64 |
 *   cycle time in us u32 | knobs u32, bit 0 the response cache) |
 *   stacks (only with ext HVD_CYC_EXT_STACKS: count u16 | rank u32 x count)
 * ext was a reserved zero byte: flags a cycle rarely needs (so that version 2 stays).
 * Bounds (nwords, payload, reason) are checked against the caller's limits before anything
 * is used; the decoded message points into the buffer (no allocation). */
#ifndef HVD_WIRE_CYCLE_H
#define HVD_WIRE_CYCLE_H

#include <hvd/types.h>

#include "wire/sig.h"

#include <stddef.h>
#include <stdint.h>

/* 2: the header lost its two padding bytes and the signature its four, so that a blocking
 * call's message with 8 bytes of payload fits the first cache line of an arena box. */
#define HVD_CYC_VERSION 2
#define HVD_CYC_HEADER_LEN (16 + HVD_SIG_LEN)
#define HVD_CYC_REASON_MAX 1024

/* Flags. */
#define HVD_CYC_SHUTDOWN 0x01u /* this rank is shutting down (reason says why) */
#define HVD_CYC_UNCACHED 0x02u /* requests to send to the coordinator this cycle */
#define HVD_CYC_INVALID 0x04u  /* invalid words follow: cache entries to erase everywhere */
#define HVD_CYC_BLOCKING 0x08u /* a blocking collective is posted (comm, sig, payload) */
#define HVD_CYC_PAYLOAD 0x10u  /* the payload holds the blocking collective's input */
#define HVD_CYC_EXITING 0x20u  /* with SHUTDOWN: the process exits without hvd_shutdown */
#define HVD_CYC_ORDERED 0x40u  /* this rank's allreduces sum in rank order (HVD_REPRODUCIBLE) */
#define HVD_CYC_TUNE 0x80u     /* rank 0's autotune: every rank switches to tune after this cycle */
#define HVD_CYC_TUNE_LEN 16

/* ext flags. */
/* rank 0's stall inspector asks the ranks listed for their stacks (HVD_STALL_STACKS) */
#define HVD_CYC_EXT_STACKS 0x01u
#define HVD_CYC_STACKS_MAX 16

typedef struct {
    uint8_t flags, comm;
    hvd_sig_t sig;
    uint32_t nwords;
    const uint8_t *hits;    /* nwords little-endian u64 words */
    const uint8_t *invalid; /* idem, or NULL */
    const uint8_t *payload;
    uint32_t payload_len;
    const char *reason; /* not NUL-terminated */
    uint16_t reason_len;
    /* with HVD_CYC_TUNE */
    uint64_t tune_fusion;
    uint32_t tune_cycle_us, tune_knobs; /* knobs: HVD_TUNE_KNOB_* */
    uint8_t ext;                        /* HVD_CYC_EXT_* */
    /* with HVD_CYC_EXT_STACKS: nstacks (at most HVD_CYC_STACKS_MAX) ranks */
    uint16_t nstacks;
    const uint8_t *stacks; /* nstacks little-endian u32 (read with hvd__cycle_stack_rank) */
} hvd_cycle_msg_t;

/* The two-valued knobs of a tuning announcement (tune_knobs). */
#define HVD_TUNE_KNOB_CACHE 1u
#define HVD_TUNE_KNOB_HIER_ALLREDUCE 2u
#define HVD_TUNE_KNOB_HIER_ALLGATHER 4u

/* Bytes hvd__cycle_encode writes for m. */
size_t hvd__cycle_size(const hvd_cycle_msg_t *m);
/* Write m into out (hvd__cycle_size(m) bytes). */
void hvd__cycle_encode(const hvd_cycle_msg_t *m, uint8_t *out);
/* Decode len bytes. HVD_ERR_PROTOCOL naming what is wrong (and from_rank) when the message
 * is truncated, has trailing bytes, a bad magic or version, or exceeds max_words or
 * max_payload. */
hvd_status_t hvd__cycle_decode(const uint8_t *buf, size_t len, uint32_t max_words,
                               size_t max_payload, int from_rank, hvd_cycle_msg_t *m);

/* Rank i of a message's stacks section. */
int hvd__cycle_stack_rank(const hvd_cycle_msg_t *m, uint16_t i);

/* Word w of a bit-vector in wire form. */
uint64_t hvd__cycle_word(const uint8_t *words, uint32_t w);

#endif
