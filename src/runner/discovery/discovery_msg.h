/* The messages of NIC discovery (driver service <-> task services), carried as bodies of
 * the service wire (runner/service/service.h), and the start-up blob the launcher feeds to each
 * task program on its standard input.
 *
 *   REGISTER   task -> driver  index u32 | host str | host_hash str | task port u16 |
 *                              addrs (the task host's filtered (iface, ipv4) list) |
 *                              reached (driver addresses the task's PINGs reached) -> ACK
 *   GET_TASK   task -> driver  asker u32 | index u32 -> TASK_INFO, or NOT_YET (host str:
 *                              the name of that task's host) until it has registered
 *   TASK_INFO                  index u32 | host str | port u16 | addrs
 *   REPORT     task -> driver  from u32 | to u32 | addrs of task `to` that a matching PING
 *                              from task `from` reached [| failed: count u16 | count x
 *                              (iface str | ipv4 str | cause u8 | detail str), only when
 *                              some address failed] -> ACK
 *   WAIT_DONE  task -> driver  index u32 -> DONE once every report is in, else NOT_YET
 *
 * An address list is count u16 | count x (iface str | ipv4 str). Strings are u16-length
 * prefixed and bounded (the field sizes below); lists hold at most HVD_DISC_MAX_ADDRS.
 *
 * Task input blob: magic "HVDT" | version u16 | reserved u16 | body length u32 | body, the
 * body being secret[32] | index u32 | n u32 | timeout_s u32 | host str | driver port u16 |
 * driver addresses (count u16, str each) | nics filter items (count u16, str each)
 * [| flags u16, only when not 0: HVD_DISC_FLAG_*]. It holds
 * the job secret, which is why it travels on stdin (ssh carries it encrypted) and never on a
 * command line; buffers holding it are wiped before they are freed. */
#ifndef HVD_RUNNER_DISCOVERY_MSG_H
#define HVD_RUNNER_DISCOVERY_MSG_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "os/netif.h"
#include "runner/discovery/host_hash.h"
#include "runner/discovery/nic_filter.h"

#include <stddef.h>
#include <stdint.h>

#define HVD_DISC_REGISTER 16
#define HVD_DISC_GET_TASK 17
#define HVD_DISC_TASK_INFO 18
#define HVD_DISC_NOT_YET 19
#define HVD_DISC_REPORT 20
#define HVD_DISC_WAIT_DONE 21
#define HVD_DISC_DONE 22

#define HVD_DISC_MAX_ADDRS 64   /* addresses per host in any list */
#define HVD_DISC_HOST_MAX 256   /* a host name as the user wrote it, with its NUL */
#define HVD_DISC_MAX_HOSTS 4096 /* hosts in one discovery */
#define HVD_DISC_IFACE_MAX 32   /* an interface name field, as hvd_netif_t's */

/* PONG names of the services. The task's is followed by " #<index>". */
#define HVD_DISC_DRIVER_NAME "driver service"
#define HVD_DISC_TASK_NAME "task service"

typedef struct {
    hvd_netif_t items[HVD_DISC_MAX_ADDRS];
    size_t count;
} hvd_disc_addrs_t;

typedef struct {
    uint32_t index;
    char host[HVD_DISC_HOST_MAX];
    char host_hash[HVD_HOST_HASH_MAX];
    uint16_t port;
    hvd_disc_addrs_t addrs;
    char reached[HVD_DISC_MAX_ADDRS][16]; /* driver addresses this task reached */
    size_t reached_count;
} hvd_disc_register_t;

typedef struct {
    uint32_t index;
    char host[HVD_DISC_HOST_MAX];
    uint16_t port;
    hvd_disc_addrs_t addrs;
} hvd_disc_task_info_t;

/* Why a probe of an address failed (a REPORT's failed list). */
enum {
    HVD_DISC_CAUSE_OTHER = 0,    /* the detail says */
    HVD_DISC_CAUSE_REFUSED = 1,  /* nothing listens there (connection refused) */
    HVD_DISC_CAUSE_NO_ROUTE = 2, /* no route to the host or network */
    HVD_DISC_CAUSE_TIMEOUT = 3,  /* no answer in time (a dropped link, a filtered port) */
    HVD_DISC_CAUSE_SECRET = 4,   /* a service answered, but not with this job's secret */
    HVD_DISC_CAUSE_MAX = 4
};
#define HVD_DISC_DETAIL_MAX 160

typedef struct {
    hvd_netif_t where; /* the address probed */
    uint8_t cause;     /* HVD_DISC_CAUSE_* */
    char detail[HVD_DISC_DETAIL_MAX];
} hvd_disc_failure_t;

/* "refused", "no route", "timed out", "wrong secret", or "failed" (other). */
const char *hvd__disc_cause_name(uint8_t cause);

/* Why a probe of a service failed (HVD_DISC_CAUSE_*), from its status, whether it had
 * connected (the PING after the connection failed), and its error message: a service that
 * closes the connection on this job's authenticated request, or answers with a MAC this
 * job's secret does not verify, holds another secret. */
uint8_t hvd__disc_cause_of(hvd_status_t st, int connected, const char *msg);

typedef struct {
    uint32_t from, to;
    hvd_disc_addrs_t reached;
    hvd_disc_failure_t failed[HVD_DISC_MAX_ADDRS];
    size_t failed_count;
} hvd_disc_report_t;

/* Task input flags. */
#define HVD_DISC_FLAG_MESH 1u /* every task probes every other (horovodrun --check-network) */

typedef struct {
    hvd_secret_t secret;
    uint32_t index, n, timeout_s;
    char host[HVD_DISC_HOST_MAX];
    uint16_t driver_port;
    char driver_addrs[HVD_DISC_MAX_ADDRS][16];
    size_t driver_addr_count;
    char nics[HVD_NIC_FILTER_MAX][HVD_NIC_KEY_MAX];
    size_t nic_count;
    uint16_t flags; /* HVD_DISC_FLAG_* */
} hvd_disc_input_t;

#define HVD_DISC_INPUT_HEAD_LEN 12
#define HVD_DISC_INPUT_MAX_BODY (64u * 1024u)

/* Encoders write into buf[0..cap) and return HVD_ERR_TOO_LARGE when it does not fit (never
 * with HVD_SVC_MAX_BODY bytes). Decoders return HVD_ERR_PROTOCOL naming the field, also for
 * trailing bytes or a count over its bound. All are pure and thread safe. */
hvd_status_t hvd__disc_register_encode(const hvd_disc_register_t *m, uint8_t *buf, size_t cap,
                                       size_t *len_p);
hvd_status_t hvd__disc_register_decode(const uint8_t *p, size_t len, hvd_disc_register_t *m_p);
hvd_status_t hvd__disc_get_task_encode(uint32_t asker, uint32_t index, uint8_t *buf, size_t cap,
                                       size_t *len_p);
hvd_status_t hvd__disc_get_task_decode(const uint8_t *p, size_t len, uint32_t *asker_p,
                                       uint32_t *index_p);
hvd_status_t hvd__disc_task_info_encode(const hvd_disc_task_info_t *m, uint8_t *buf, size_t cap,
                                        size_t *len_p);
hvd_status_t hvd__disc_task_info_decode(const uint8_t *p, size_t len, hvd_disc_task_info_t *m_p);
hvd_status_t hvd__disc_report_encode(const hvd_disc_report_t *m, uint8_t *buf, size_t cap,
                                     size_t *len_p);
hvd_status_t hvd__disc_report_decode(const uint8_t *p, size_t len, hvd_disc_report_t *m_p);
hvd_status_t hvd__disc_index_encode(uint32_t index, uint8_t *buf, size_t cap, size_t *len_p);
hvd_status_t hvd__disc_index_decode(const uint8_t *p, size_t len, const char *what,
                                    uint32_t *index_p);

/* The whole blob (header and body) into a new buffer; the caller releases it with
 * hvd__disc_input_free, which wipes it. HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__disc_input_encode(const hvd_disc_input_t *in, uint8_t **buf_p, size_t *len_p);
void hvd__disc_input_free(uint8_t *buf, size_t len);
/* The blob's header: HVD_ERR_PROTOCOL (magic, version naming it, reserved bytes),
 * HVD_ERR_TOO_LARGE (body over HVD_DISC_INPUT_MAX_BODY). */
hvd_status_t hvd__disc_input_head_decode(const uint8_t head[HVD_DISC_INPUT_HEAD_LEN],
                                         size_t *body_len_p);
/* The blob's body. Also checks index < n, n >= 1, n <= HVD_DISC_MAX_HOSTS. */
hvd_status_t hvd__disc_input_body_decode(const uint8_t *p, size_t len, hvd_disc_input_t *in_p);

#endif
