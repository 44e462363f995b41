/* The keys and values of elastic mode's driver/worker protocol (docs/running.md, "Elastic jobs"),
 * shared by the elastic driver (src/runner) and the workers (src/core/elastic*.c), so that
 * both sides name and encode every key with one piece of code.
 *
 *   init.r<R>/rank_<n>          workers' check-in of round R (core/init.c)
 *   init.r<R>/abort             driver: round R failed before it formed (text)
 *   elastic_alive/<slot>        worker's agent thread: heartbeat, value = pid
 *   elastic_ev.r<R>/hosts       driver: the host set changed (added, removed or mixed)
 *   elastic_ev.r<R>/abort       driver: a worker of round R died or went silent (text)
 *   elastic_ready.r<R>/<slot>   re-initialising worker: "failure" or "update"
 *   elastic_assign.r<R>/<slot>  driver: the slot's place in round R, "removed", or
 *                               "stop <message>"
 *
 * A slot is "<HOROVOD_HOSTNAME>:<HOROVOD_LOCAL_RANK>". Parsers are strict: a value is bounded
 * (HVD_ELASTIC_VALUE_MAX), every field is required, and anything else is HVD_ERR_PROTOCOL
 * naming the text (made printable). */
#ifndef HVD_RENDEZVOUS_ELASTIC_MSG_H
#define HVD_RENDEZVOUS_ELASTIC_MSG_H

#include <hvd/types.h>

#include "rendezvous/kv_protocol.h"

#include <stddef.h>

/* Longest value of any elastic key (an assignment, a stop or abort message). */
#define HVD_ELASTIC_VALUE_MAX 1024
/* Room for a scope or key name (the store's names are at most 128 characters). */
#define HVD_ELASTIC_NAME_MAX 132

#define HVD_ELASTIC_ALIVE_SCOPE "elastic_alive"
#define HVD_ELASTIC_ABORT_KEY HVD_KV_ABORT_KEY
#define HVD_ELASTIC_HOSTS_KEY "hosts"

typedef enum {
    HVD_ELASTIC_SCOPE_INIT,   /* init.r<R> */
    HVD_ELASTIC_SCOPE_EVENTS, /* elastic_ev.r<R> */
    HVD_ELASTIC_SCOPE_READY,  /* elastic_ready.r<R> */
    HVD_ELASTIC_SCOPE_ASSIGN, /* elastic_assign.r<R> */
} hvd_elastic_scope_t;

/* The name of a round's scope into out[HVD_ELASTIC_NAME_MAX]. */
void hvd__elastic_msg_scope(hvd_elastic_scope_t kind, int round, char *out);

/* "<host>:<local_rank>" into out[HVD_ELASTIC_NAME_MAX]. HVD_ERR_INVALID_ARG (naming the host)
 * when it is not a valid store key (characters other than A-Z a-z 0-9 _ . : -, too long). */
hvd_status_t hvd__elastic_msg_slot(const char *host, int local_rank, char *out);

/* Why a worker left its round: its ready record. */
typedef enum { HVD_ELASTIC_READY_FAILURE = 0, HVD_ELASTIC_READY_UPDATE = 1 } hvd_elastic_ready_t;

/* "failure" / "update". */
const char *hvd__elastic_msg_ready_str(hvd_elastic_ready_t reason);
/* Exactly "failure" or "update" (len bytes, no terminator needed). */
hvd_status_t hvd__elastic_msg_ready_parse(const char *text, size_t len,
                                          hvd_elastic_ready_t *reason_p);

typedef enum {
    HVD_ELASTIC_ASSIGNED = 0, /* a place in the round (the fields below) */
    HVD_ELASTIC_REMOVED = 1,  /* the slot has no place any more: the process should exit 0 */
    HVD_ELASTIC_STOP = 2,     /* the job ends: message says why */
} hvd_elastic_verdict_t;

typedef struct {
    hvd_elastic_verdict_t verdict;
    int rank, size, local_rank, local_size, cross_rank, cross_size;
    int sync; /* 1: every worker of the round syncs its state from rank 0 before training */
    char message[HVD_ELASTIC_VALUE_MAX + 1]; /* STOP: the driver's text (may be empty) */
} hvd_elastic_assign_t;

/* An assignment value: "removed"; "stop" or "stop <message>" (printable text, tabs and
 * newlines allowed); or the seven fields "rank=R size=S local_rank=.. local_size=..
 * cross_rank=.. cross_size=.. sync=0|1", each exactly once, in any order, separated by single
 * spaces, as unsigned decimals without sign or leading zeros and consistent (rank < size,
 * local_rank < local_size <= size, cross_rank < cross_size <= size). Anything else, or more
 * than HVD_ELASTIC_VALUE_MAX bytes: HVD_ERR_PROTOCOL naming the text. *out is written only on
 * success. */
hvd_status_t hvd__elastic_msg_assign_parse(const char *text, size_t len, hvd_elastic_assign_t *out);

/* The value hvd__elastic_msg_assign_parse reads back, into out[n]. Returns its length, or -1
 * if it does not fit or a stop message holds characters the parser refuses. */
int hvd__elastic_msg_assign_format(const hvd_elastic_assign_t *a, char *out, size_t n);

/* Printable copy of text[0..len) for messages: at most out_size - 1 bytes, control
 * characters and bytes over 0x7e as '?', "..." when cut. */
void hvd__elastic_msg_printable(const char *text, size_t len, char *out, size_t out_size);

#endif
