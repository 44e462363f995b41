/* The TCP transport's insides (tcp.h is its interface), shared by its five files, bottom to
 * top: tcp_peer.c (peers, their sockets and rings, failure), tcp_arena.c (the host arena),
 * tcp_conn.c (accepting, authenticating and connecting), tcp_frames.c (moving frames over a
 * socket or a same-host peer's rings) and tcp.c (the exchange loop, the arena's agreement,
 * create and destroy). */
#ifndef HVD_TRANSPORT_TCP_IMPL_H
#define HVD_TRANSPORT_TCP_IMPL_H

#include "transport/tcp.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "crypto/hmac.h"
#include "os/proc_activity.h"
#include "os/shm.h"
#include "os/socket.h"
#include "transport/shm_arena.h"
#include "transport/shm_ring.h"
#include "wire/frame.h"
#include "wire/le.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* Received bytes are read into a per-connection staging buffer when the frame (or what is
 * left of it) is small, so one recv() usually takes a header and its payload, often the
 * next header too; larger payloads are read straight into the caller's buffer. */
#define STAGE_SIZE (64 * 1024)
#define DIRECT_MIN 4096
/* Connections accepted but not yet authenticated: at most this many plus one per rank of
 * the job (every peer may connect at once, e.g. a host's ranks to the creator of its arena;
 * beyond, the oldest is dropped to make room), each for at most HANDSHAKE_MS, or the
 * transport's timeout when that is shorter (a same-host connector that still runs gets
 * more: connector_runs). */
#define MAX_PENDING 16
#define HANDSHAKE_MS 10000
/* How much longer than HOROVOD_GLOO_TIMEOUT_SECONDS an exchange waits for another rank's
 * failure before it fails with its own timeout (tcp_exchange says why). */
#define TIMEOUT_GRACE_US 250000
/* Data bytes of each direction's ring between two ranks of one host: 1 MiB keeps a ring step
 * of a large allreduce streaming (measured against 4 MiB: no faster at np 2). Every ring is
 * allocated whole when its pair connects (hvd__shm_create), so on a host with many ranks the
 * rings shrink to keep what one rank's rings to all the others may take within
 * SHM_RING_BUDGET, down to SHM_RING_MIN: at 1 MiB, 512 ranks of one host connected along a
 * recursive doubling's pattern took 10 GiB of memory and seconds to zero it. */
#define SHM_RING_CAP ((size_t)1 << 20)
#define SHM_RING_MIN ((size_t)64 << 10)
#define SHM_RING_BUDGET ((size_t)32 << 20)
/* The host arena (shm_arena.h): data bytes of each slot, i.e. what a rank contributes per
 * step of a large shared-memory collective. */
#define ARENA_DATA ((size_t)256 << 10)

typedef enum {
    PEER_NONE,       /* no connection yet */
    PEER_AWAIT,      /* higher rank: waiting for the peer to connect to us */
    PEER_CONNECTING, /* lower rank: connect() in progress */
    PEER_CHALLENGE,  /* connected, waiting for the acceptor's CHALLENGE */
    PEER_WELCOME,    /* HELLO sent, waiting for WELCOME */
    PEER_READY,
} peer_state_t;

typedef struct {
    peer_state_t state;
    int fd;
    /* A peer on this host: the connection is a unix socket that carries only the handshake,
     * doorbell bytes and the hang-up, and frames travel through two rings in a memfd the
     * acceptor created and passed with its WELCOME (shm_fd until mapped). */
    int is_shm;
    int shm_fd;
    void *shm;
    hvd_ring_t tx, rx;
    int hup;                   /* the unix socket reached end of stream: the peer is gone */
    hvd_hello_t hello;         /* connector side: what we sent, to check WELCOME */
    uint8_t hs[HVD_HELLO_LEN]; /* handshake bytes received so far */
    size_t hs_got;
    /* receive side */
    uint8_t *stage;
    size_t stage_pos, stage_end;
    uint8_t hdr[HVD_FRAME_HEADER_LEN];
    size_t hdr_got;
    int in_frame; /* a frame header has been read */
    int frame_kind;
    uint64_t frame_len, frame_got;
    /* send side: header of the frame being sent */
    uint8_t shdr[HVD_FRAME_HEADER_LEN];
    int send_mid_frame; /* a frame is partly sent: an ABORT cannot be inserted */
    /* per-exchange queues: heads of the transfers to and from this peer */
    size_t send_head, recv_head; /* index into the exchange, or NONE */
    int active;                  /* listed in this exchange */
} peer_t;

typedef struct {
    int fd;
    int is_unix; /* accepted on the same-host listener */
    uint8_t nonce_a[HVD_NONCE_LEN];
    uint8_t buf[HVD_HELLO_LEN];
    size_t got;
    int64_t since_ms;
    uint64_t seq;    /* order of acceptance (since_ms ties within a millisecond) */
    long pid;        /* the same-host connector's process (SO_PEERCRED), 0 when unknown */
    uint64_t run_ns; /* its CPU time when since_ms was last set */
    char from[64];
} pending_t;

typedef struct {
    hvd_transport_t base;
    hvd_tcp_peer_addr_t *addrs;
    peer_t *peers;
    int listen_fd, epfd;
    int ulisten_fd;  /* same-host (abstract unix) listener, or -1 */
    uint8_t *local;  /* per rank: on this host, reached through shared memory */
    size_t ring_cap; /* data bytes of each shared-memory ring */
    int rdfd;        /* level-triggered epoll of ready peers and the listener (tcp_wait_fd) */
    hvd_secret_t secret;
    int keyed_unix_names; /* hvd_tcp_config_t's */
    int (*progressing)(void *arg, int rank);
    void *progress_arg;
    uint32_t generation;
    int timeout_ms, busy_poll_us, yield_when_idle;
    char congestion[16];
    pending_t *pending;
    int npending, max_pending;
    uint64_t accepted; /* connections accepted so far (pending_t.seq) */
    int handshake_ms;  /* how long an accepted connection has for its HELLO */
    /* first cause once poisoned */
    hvd_status_t poison;
    char poison_msg[1024];
    /* tcp_interrupt, from another thread: int_fd (an eventfd in both epoll sets, never
     * read) turns readable so that a sleeping exchange or engine wakes; interrupted (atomic)
     * is checked on every turn of the exchange loop; the cause is written once under
     * int_lock before the flag is set. */
    int int_fd;
    int interrupted;
    pthread_mutex_t int_lock;
    hvd_status_t int_status;
    char int_msg[1024];
    /* per-exchange scratch: next transfer in the same queue, and the peers involved */
    size_t *next;
    size_t next_cap;
    int *active;
    /* The host arena: members are this host's ranks in ascending order (arena_ranks,
     * arena_self this rank's index); the highest creates it (arena_fd, passed with every
     * same-host WELCOME it sends), the others map what arrives with its WELCOME
     * (arena_in_fd until mapped). Used once hvd__tcp_arena_join agreed every member maps
     * it. */
    int arena_n, arena_self, *arena_ranks;
    int arena_fd, arena_in_fd;
    void *arena_mem;
    int arena_usable;
    hvd_arena_t arena;
    hvd_status_t (*resolve)(void *arg, int rank, hvd_tcp_peer_addr_t *addrs);
    void *resolve_arg;
} tcp_t;

#define NONE ((size_t)-1)
/* How an ABORT's message names the rank where the failure arose: the rank that failed, or
 * the rank that saw a peer vanish (whose message then names that peer). */
#define FAILED_FIRST " failed first: "
#define SAW " saw: "

/* tcp_peer.c: naming peers, the epoll sets, a same-host peer's rings and doorbell, sending and
 * receiving on either, and failure (the first cause, the ABORT, the interrupt) */
const char *hvd__tcpx_peer_name(tcp_t *t, int r, char *buf, size_t n);
void hvd__tcpx_epoll_add(tcp_t *t, int fd);
void hvd__tcpx_rd_add(tcp_t *t, int fd);
void hvd__tcpx_close_fd(tcp_t *t, int fd);
size_t hvd__tcpx_shm_bytes(const tcp_t *t);
void hvd__tcpx_peer_reset(tcp_t *t, peer_t *p);
hvd_status_t hvd__tcpx_shm_attach(tcp_t *t, int r, peer_t *p, int fd);
void hvd__tcpx_drain_doorbell(peer_t *p);
ssize_t hvd__tcpx_peer_sendv(peer_t *p, struct iovec *iov, int cnt);
ssize_t hvd__tcpx_peer_recv(peer_t *p, void *buf, size_t len);
int hvd__tcpx_attributed(const char *m, size_t len);
void hvd__tcpx_tcp_abort(hvd_transport_t *base, hvd_status_t status, const char *message);
hvd_status_t hvd__tcpx_tcp_health(hvd_transport_t *base);
int hvd__tcpx_is_interrupted(tcp_t *t);
hvd_status_t hvd__tcpx_interrupt_error(tcp_t *t);
void hvd__tcpx_tcp_interrupt(hvd_transport_t *base, hvd_status_t status, const char *message);
hvd_status_t hvd__tcpx_peer_lost(tcp_t *t, int r, const char *what);

/* tcp_arena.c: the host arena's plan and mapping, and the transport's arena op */
hvd_status_t hvd__tcpx_arena_plan(tcp_t *t);
void hvd__tcpx_arena_map(tcp_t *t, int from);
hvd_arena_t *hvd__tcpx_tcp_arena(hvd_transport_t *base);

/* tcp_conn.c: accepting, authenticating and connecting */
void hvd__tcpx_accept_all(tcp_t *t);
hvd_status_t hvd__tcpx_resolve(tcp_t *t, int r);
hvd_status_t hvd__tcpx_start_connection(tcp_t *t, int r);
int hvd__tcpx_step_connect(tcp_t *t, int r);
int hvd__tcpx_step_pending(tcp_t *t);

/* tcp_frames.c: moving frames */
int hvd__tcpx_advance_recv(tcp_t *t, int r, hvd_xfer_t *x);
int hvd__tcpx_advance_send(tcp_t *t, int r, hvd_xfer_t *x);
size_t hvd__tcpx_xfer_payload_len(const hvd_xfer_t *x);

/* tcp.c: the exchange loop (the arena's agreement uses it), create and destroy */
hvd_status_t hvd__tcpx_tcp_exchange(hvd_transport_t *base, hvd_xfer_t *xfers, size_t n,
                                    const char *what);

#endif
