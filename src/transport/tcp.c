/* The TCP transport (tcp.h). One thread drives everything: exchange() loops over the
 * transfers it was given, making every non-blocking send and receive that can progress, and
 * only when nothing can (after busy_poll_us of trying) sleeps in epoll_wait. Connection
 * set-up and the handshake of connections accepted from other ranks (or strangers) are
 * state machines stepped by the same loop, so a stranger who connects and stalls never
 * blocks the job. */
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

static void arena_map(tcp_t *t, int from);

static const char *peer_name(tcp_t *t, int r, char *buf, size_t n) {
    if (t->addrs[r].port == 0) /* not learnt yet */
        snprintf(buf, n, "rank %d (host %s)", r, t->addrs[r].host);
    else
        snprintf(buf, n, "rank %d (host %s, %s:%d)", r, t->addrs[r].host, t->addrs[r].addr,
                 t->addrs[r].port);
    return buf;
}

static void epoll_add(tcp_t *t, int fd) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, .data.fd = fd};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Watch a connected peer (or the listener) for the engine's idle wait (tcp_wait_fd). */
static void rd_add(tcp_t *t, int fd) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
    epoll_ctl(t->rdfd, EPOLL_CTL_ADD, fd, &ev);
}

static void close_fd(tcp_t *t, int fd) {
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, fd, NULL);
    epoll_ctl(t->rdfd, EPOLL_CTL_DEL, fd, NULL); /* fails harmlessly for fds never added */
    close(fd);
}

static size_t shm_bytes(const tcp_t *t) {
    return 2 * hvd__ring_bytes(t->ring_cap);
}

size_t hvd__tcp_ring_cap(int n) {
    size_t cap = SHM_RING_CAP;
    while (cap > SHM_RING_MIN && (size_t)(n > 1 ? n - 1 : 1) * 2 * cap > SHM_RING_BUDGET)
        cap /= 2;
    return cap;
}

static void peer_reset(tcp_t *t, peer_t *p) {
    if (p->fd >= 0)
        close_fd(t, p->fd);
    if (p->shm_fd >= 0)
        close(p->shm_fd);
    hvd__shm_unmap(p->shm, shm_bytes(t));
    free(p->stage);
    memset(p, 0, sizeof *p);
    p->fd = p->shm_fd = -1;
    p->send_head = p->recv_head = NONE;
}

/* Map a pair's shared memory and attach its rings: ring 0 carries the lower rank's frames
 * to the higher, ring 1 the other way. Takes fd (closed: the mapping keeps the memory). */
static hvd_status_t shm_attach(tcp_t *t, int r, peer_t *p, int fd) {
    void *mem;
    hvd_status_t st = hvd__shm_map(fd, shm_bytes(t), &mem);
    close(fd);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d (host %s)", r, t->addrs[r].host);
    p->shm = mem;
    uint8_t *ring0 = mem, *ring1 = ring0 + hvd__ring_bytes(t->ring_cap);
    int lower = t->base.rank < r;
    hvd__ring_attach(&p->tx, lower ? ring0 : ring1, t->ring_cap);
    hvd__ring_attach(&p->rx, lower ? ring1 : ring0, t->ring_cap);
    p->is_shm = 1;
    return HVD_OK;
}

/* One byte on the unix socket wakes a peer sleeping on our ring (or on its own: the byte
 * only means "look"). A full socket buffer already holds a wake-up. */
static void ring_doorbell(peer_t *p) {
    static const char bell = 'b';
    ssize_t n = send(p->fd, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n;
}

/* Read and drop the doorbell bytes a same-host peer sent; notes its hang-up. */
static void drain_doorbell(peer_t *p) {
    char sink[256];
    for (;;) {
        ssize_t n = recv(p->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            p->hup = 1;
        return;
    }
}

/* The byte pipe to a READY peer, as sendmsg and recv (non-blocking; -1 and errno, or 0 at
 * the end of the stream): the socket, or for a same-host peer the rings, whose end is the
 * unix socket's hang-up once every byte written before it has been read. */
static ssize_t peer_sendv(peer_t *p, struct iovec *iov, int cnt) {
    if (!p->is_shm) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        return sendmsg(p->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (p->hup) {
        errno = EPIPE;
        return -1;
    }
    ssize_t n = hvd__ring_writev(&p->tx, iov, cnt);
    if (n < 0) {
        errno = EPROTO;
        return -1;
    }
    if (n == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (hvd__ring_take_reader(&p->tx))
        ring_doorbell(p);
    return n;
}

static ssize_t peer_recv(peer_t *p, void *buf, size_t len) {
    if (!p->is_shm)
        return recv(p->fd, buf, len, MSG_DONTWAIT);
    ssize_t n = hvd__ring_read(&p->rx, buf, len);
    if (n < 0) {
        errno = EPROTO;
        return -1;
    }
    if (n > 0) {
        if (hvd__ring_take_writer(&p->rx))
            ring_doorbell(p);
        return n;
    }
    if (p->hup && hvd__ring_readable(&p->rx) == 0)
        return 0;
    errno = EAGAIN;
    return -1;
}

/* ---- failure -------------------------------------------------------------------------- */

/* Read and discard what a peer already sent, so that close() sends FIN rather than RST (an
 * RST can destroy the ABORT frame we just queued before the peer reads it). Bounded. */
static void drain_input(int fd) {
    uint8_t sink[4096];
    for (int i = 0; i < 256; i++)
        if (recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0)
            return;
}

/* How an ABORT's message names the rank where the failure arose: the rank that failed, or
 * the rank that saw a peer vanish (whose message then names that peer). */
#define FAILED_FIRST " failed first: "
#define SAW " saw: "

static int attributed(const char *m, size_t len) {
    return memmem(m, len, FAILED_FIRST, strlen(FAILED_FIRST)) || memmem(m, len, SAW, strlen(SAW));
}

static void tcp_abort(hvd_transport_t *base, hvd_status_t status, const char *message) {
    tcp_t *t = (tcp_t *)base;
    if (t->poison != HVD_OK)
        return;
    t->poison = status;
    /* The first cause names its rank once, where it arose; a cause adopted from a peer's
     * ABORT already does and travels on unchanged. */
    if (attributed(message, strlen(message)))
        snprintf(t->poison_msg, sizeof t->poison_msg, "%s", message);
    else
        snprintf(t->poison_msg, sizeof t->poison_msg, "rank %d (host %s)%s%s", base->rank,
                 t->addrs[base->rank].host, status == HVD_ERR_PEER_LOST ? SAW : FAILED_FIRST,
                 message);
    /* Tell every connected peer the cause; a frame can only be inserted between frames. */
    size_t mlen = strlen(t->poison_msg);
    if (mlen > HVD_FRAME_ABORT_MAX - 4)
        mlen = HVD_FRAME_ABORT_MAX - 4;
    uint8_t frame[HVD_FRAME_HEADER_LEN + HVD_FRAME_ABORT_MAX];
    hvd__frame_header_encode(frame, HVD_FRAME_ABORT, 4 + mlen);
    uint32_t st = (uint32_t)status;
    for (int i = 0; i < 4; i++)
        frame[HVD_FRAME_HEADER_LEN + i] = (uint8_t)(st >> (8 * i));
    memcpy(frame + HVD_FRAME_HEADER_LEN + 4, t->poison_msg, mlen);
    /* Same-host ranks waiting in the arena read the cause there. */
    if (t->arena_mem)
        hvd__arena_abort(&t->arena, status, t->poison_msg);
    for (int r = 0; r < base->size; r++) {
        peer_t *p = &t->peers[r];
        if (p->state == PEER_READY && !p->send_mid_frame) {
            struct iovec iov = {.iov_base = frame, .iov_len = HVD_FRAME_HEADER_LEN + 4 + mlen};
            ssize_t n = peer_sendv(p, &iov, 1);
            (void)n; /* best effort: the connection closing tells the peer anyway */
        }
        if (p->fd >= 0) {
            shutdown(p->fd, SHUT_WR);
            drain_input(p->fd);
        }
        peer_reset(t, p);
    }
    for (int i = 0; i < t->npending; i++)
        close_fd(t, t->pending[i].fd);
    t->npending = 0;
    /* Peers that still want to connect to us are refused at once instead of waiting. */
    if (t->listen_fd >= 0) {
        close_fd(t, t->listen_fd);
        t->listen_fd = -1;
    }
    if (t->ulisten_fd >= 0) {
        close_fd(t, t->ulisten_fd);
        t->ulisten_fd = -1;
    }
}

static hvd_status_t tcp_health(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    if (t->poison == HVD_OK)
        return HVD_OK;
    return hvd__error_set(t->poison, "%s", t->poison_msg);
}

/* ---- accepting and authenticating ---------------------------------------------------- */

static void pending_drop(tcp_t *t, int i, const char *why) {
    if (why)
        HVD_LOG_W("rank %d: dropped a data connection from %s: %s", t->base.rank,
                  t->pending[i].from, why);
    close_fd(t, t->pending[i].fd);
    t->pending[i] = t->pending[--t->npending];
}

/* The connection waiting longest for its HELLO: the one to give up when the list is full. A
 * peer answers its CHALLENGE within a round trip, so under a flood the strangers that came
 * before it are the oldest; dropping slot 0 instead could hit a peer, because removing an
 * entry moves the newest one there. */
static int oldest_pending(const tcp_t *t) {
    int oldest = 0;
    for (int i = 1; i < t->npending; i++)
        if (t->pending[i].seq < t->pending[oldest].seq)
            oldest = i;
    return oldest;
}

/* Accept what waits on one listener (is_unix: the same-host one) and send each its
 * CHALLENGE. */
static void accept_on(tcp_t *t, int lfd, int is_unix) {
    if (lfd < 0)
        return;
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or a transient error the next loop retries */
        if (t->npending == t->max_pending)
            pending_drop(t, oldest_pending(t), "too many unauthenticated connections");
        pending_t *pd = &t->pending[t->npending];
        memset(pd, 0, sizeof *pd);
        pd->fd = fd;
        pd->is_unix = is_unix;
        pd->since_ms = hvd__clock_now_ms();
        pd->seq = t->accepted++;
        if (is_unix) {
            pd->pid = hvd__socket_peer_pid(fd);
            if (pd->pid > 0)
                snprintf(pd->from, sizeof pd->from, "this host's unix socket (pid %ld)", pd->pid);
            else
                snprintf(pd->from, sizeof pd->from, "this host's unix socket");
            hvd_proc_activity_t a;
            if (pd->pid > 0 && hvd__proc_activity(pd->pid, &a) == 0)
                pd->run_ns = a.run_ns;
        } else {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
            char ip[16] = "?";
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
            snprintf(pd->from, sizeof pd->from, "%s:%d", ip, ntohs(in->sin_port));
        }
        uint8_t ch[HVD_CHALLENGE_LEN];
        if (getrandom(pd->nonce_a, HVD_NONCE_LEN, 0) != HVD_NONCE_LEN) {
            close(fd);
            continue;
        }
        hvd__frame_challenge_encode(ch, pd->nonce_a);
        /* A fresh socket's buffer always takes 24 bytes; anything else means it is gone. */
        if (send(fd, ch, sizeof ch, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof ch) {
            close(fd);
            continue;
        }
        if (!is_unix) {
            hvd__socket_tune_data(fd);
            hvd__socket_set_congestion(fd, t->congestion);
        }
        epoll_add(t, fd);
        t->npending++;
    }
}

static void accept_all(tcp_t *t) {
    accept_on(t, t->listen_fd, 0);
    accept_on(t, t->ulisten_fd, 1);
}

/* Whether a same-host connector that sent no HELLO within handshake_ms is still at it: a
 * thread of its process waits for a core or ran since the last look. With thousands of
 * ranks on a few cores a rank may wait longer than that for its turn to answer the
 * CHALLENGE; it gets another handshake_ms, a stopped or idle one is dropped. (Strangers
 * that keep running cannot crowd peers out: the oldest pending connection makes room.) */
static int connector_runs(pending_t *pd) {
    hvd_proc_activity_t a;
    if (!pd->is_unix || pd->pid <= 0 || hvd__proc_activity(pd->pid, &a) != 0)
        return 0;
    int ran = a.run_ns > pd->run_ns;
    pd->run_ns = a.run_ns;
    return !a.stopped && (a.runnable || ran);
}

/* Step every accepted connection's handshake. Returns 1 if anything happened. */
static int step_pending(tcp_t *t) {
    int progressed = 0;
    int64_t now = hvd__clock_now_ms();
    for (int i = 0; i < t->npending;) {
        pending_t *pd = &t->pending[i];
        ssize_t n = recv(pd->fd, pd->buf + pd->got, HVD_HELLO_LEN - pd->got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            pending_drop(t, i, NULL); /* closed before authenticating: nothing to say */
            progressed = 1;
            continue;
        }
        if (n < 0) {
            if (now - pd->since_ms > t->handshake_ms && connector_runs(pd)) {
                pd->since_ms = now;
            } else if (now - pd->since_ms > t->handshake_ms) {
                char why[64];
                snprintf(why, sizeof why, "no authentication within %d ms", t->handshake_ms);
                pending_drop(t, i, why);
                progressed = 1;
                continue;
            }
            i++;
            continue;
        }
        progressed = 1;
        pd->got += (size_t)n;
        /* Reject garbage on its first bytes instead of waiting for a full message. */
        if (pd->got >= 4 && memcmp(pd->buf, "HVDH", 4) != 0) {
            pending_drop(t, i, "not an hvd HELLO (wrong magic)");
            continue;
        }
        if (pd->got < HVD_HELLO_LEN) {
            i++;
            continue;
        }
        hvd_hello_t h;
        hvd_status_t st = hvd__frame_hello_decode(pd->buf, pd->nonce_a, &t->secret, &h);
        if (st != HVD_OK) {
            pending_drop(t, i, hvd_last_error());
            continue;
        }
        if (h.to != (uint32_t)t->base.rank || h.from >= (uint32_t)t->base.rank ||
            h.generation != t->generation) {
            char why[160];
            snprintf(why, sizeof why,
                     "HELLO from rank %u to rank %u of generation %u (this is rank %d of "
                     "generation %u)",
                     h.from, h.to, h.generation, t->base.rank, t->generation);
            pending_drop(t, i, why);
            continue;
        }
        peer_t *p = &t->peers[h.from];
        if (p->state == PEER_READY) {
            pending_drop(t, i, "a second connection from an already connected rank");
            continue;
        }
        if (pd->is_unix && !t->local[h.from]) {
            pending_drop(t, i, "a same-host connection from a rank on another host");
            continue;
        }
        /* A same-host peer gets the pair's shared memory with the WELCOME. */
        int shm_fd = -1;
        if (pd->is_unix && hvd__shm_create(shm_bytes(t), "hvd-rings", &shm_fd) != HVD_OK) {
            pending_drop(t, i, hvd_last_error());
            continue;
        }
        uint8_t w[HVD_WELCOME_LEN];
        ssize_t sent = -1;
        int fds[2] = {shm_fd, t->arena_fd};
        if (hvd__frame_welcome_encode(w, &h, &t->secret) == HVD_OK)
            sent = shm_fd >= 0 ? hvd__socket_send_with_fds(pd->fd, w, sizeof w, fds,
                                                           t->arena_fd >= 0 ? 2 : 1)
                               : send(pd->fd, w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent != (ssize_t)sizeof w) {
            if (shm_fd >= 0)
                close(shm_fd);
            pending_drop(t, i, "could not send WELCOME");
            continue;
        }
        /* The connection becomes rank from's; it leaves the pending list without closing. */
        int fd = pd->fd;
        t->pending[i] = t->pending[--t->npending];
        if (p->fd >= 0)
            close_fd(t, p->fd);
        p->fd = fd;
        p->state = PEER_READY;
        rd_add(t, fd);
        p->stage = malloc(STAGE_SIZE);
        if (!p->stage) {
            if (shm_fd >= 0)
                close(shm_fd);
            tcp_abort(&t->base, HVD_ERR_NO_MEMORY, "out of memory for a connection buffer");
            return 1;
        }
        if (shm_fd >= 0 && shm_attach(t, (int)h.from, p, shm_fd) != HVD_OK) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", hvd_last_error());
            tcp_abort(&t->base, HVD_ERR_IO, copy);
            return 1;
        }
        HVD_LOG_D("rank %d: accepted data connection from rank %u%s", t->base.rank, h.from,
                  p->is_shm ? " through shared memory" : "");
    }
    return progressed;
}

/* ---- connecting ----------------------------------------------------------------------- */

static hvd_status_t peer_lost(tcp_t *t, int r, const char *what) {
    char name[128];
    return hvd__error_set(HVD_ERR_PEER_LOST, "%s %s", peer_name(t, r, name, sizeof name), what);
}

/* Step the connector's side of peer r's set-up. Returns 1 progressed, 0 nothing, or an
 * error status (negative). */
static int step_connect(tcp_t *t, int r) {
    peer_t *p = &t->peers[r];
    if (p->state == PEER_CONNECTING) {
        struct pollfd pf = {.fd = p->fd, .events = POLLOUT};
        if (poll(&pf, 1, 0) <= 0)
            return 0;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            char what[160];
            snprintf(what, sizeof what, "refused the data connection (%s): is it still running?",
                     strerror(err));
            return peer_lost(t, r, what);
        }
        p->state = PEER_CHALLENGE;
        p->hs_got = 0;
        return 1;
    }
    size_t want = p->state == PEER_CHALLENGE ? HVD_CHALLENGE_LEN : HVD_WELCOME_LEN;
    ssize_t n;
    if (p->is_shm && p->state == PEER_WELCOME) {
        /* The pair's rings, and from the host's highest rank the arena too. */
        int fds[2] = {p->shm_fd, t->arena_in_fd};
        n = hvd__socket_recv_with_fds(p->fd, p->hs + p->hs_got, want - p->hs_got, fds,
                                      t->arena_n && r == t->arena_ranks[t->arena_n - 1] ? 2 : 1);
        p->shm_fd = fds[0];
        t->arena_in_fd = fds[1];
    } else {
        n = recv(p->fd, p->hs + p->hs_got, want - p->hs_got, MSG_DONTWAIT);
    }
    if (n == 0)
        return peer_lost(t, r,
                         "closed the data connection during the handshake (a different "
                         "job on that port, or the rank exited?)");
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                   ? 0
                   : peer_lost(t, r, strerror(errno));
    p->hs_got += (size_t)n;
    if (p->hs_got < want)
        return 1;
    hvd_status_t st;
    if (p->state == PEER_CHALLENGE) {
        memset(&p->hello, 0, sizeof p->hello);
        st = hvd__frame_challenge_decode(p->hs, p->hello.nonce_a);
        if (st != HVD_OK)
            return hvd__error_wrap(HVD_ERR_PROTOCOL, "rank %d (%s:%d)", r, t->addrs[r].addr,
                                   t->addrs[r].port);
        p->hello.from = (uint32_t)t->base.rank;
        p->hello.to = (uint32_t)r;
        p->hello.generation = t->generation;
        if (getrandom(p->hello.nonce_c, HVD_NONCE_LEN, 0) != HVD_NONCE_LEN)
            return hvd__error_set(HVD_ERR_IO, "getrandom failed");
        uint8_t hello[HVD_HELLO_LEN];
        st = hvd__frame_hello_encode(hello, &p->hello, &t->secret);
        if (st != HVD_OK)
            return st;
        if (send(p->fd, hello, sizeof hello, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof hello)
            return peer_lost(t, r, "closed the data connection during the handshake");
        p->state = PEER_WELCOME;
        p->hs_got = 0;
        return 1;
    }
    st = hvd__frame_welcome_check(p->hs, &p->hello, &t->secret);
    if (st != HVD_OK)
        return hvd__error_wrap(HVD_ERR_AUTH, "rank %d (%s:%d)", r, t->addrs[r].addr,
                               t->addrs[r].port);
    p->stage = malloc(STAGE_SIZE);
    if (!p->stage)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a connection buffer");
    if (p->is_shm) {
        int fd = p->shm_fd;
        p->shm_fd = -1;
        p->is_shm = 0; /* until attached */
        if (fd < 0)
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "rank %d (host %s) sent no shared memory with its WELCOME", r,
                                  t->addrs[r].host);
        st = shm_attach(t, r, p, fd);
        if (st != HVD_OK)
            return st;
        if (t->arena_in_fd >= 0 && !t->arena_mem)
            arena_map(t, r);
    }
    p->state = PEER_READY;
    rd_add(t, p->fd);
    HVD_LOG_D("rank %d: connected to rank %d%s", t->base.rank, r,
              p->is_shm ? " through shared memory" : "");
    return 1;
}

/* Fill t->addrs[r] (a planned check-in leaves addresses to be learnt, tcp.h). */
static hvd_status_t resolve(tcp_t *t, int r) {
    return t->resolve ? t->resolve(t->resolve_arg, r, t->addrs)
                      : hvd__error_set(HVD_ERR_INVALID_ARG, "rank %d's address is not known", r);
}

static hvd_status_t start_connection(tcp_t *t, int r) {
    peer_t *p = &t->peers[r];
    if (r < t->base.rank) {
        p->state = PEER_AWAIT;
        return HVD_OK;
    }
    /* (a keyed name needs no address: a same-host peer is reached without the store) */
    if (t->addrs[r].port == 0 && !(t->local[r] && t->keyed_unix_names)) {
        hvd_status_t st = resolve(t, r);
        if (st != HVD_OK)
            return st;
    }
    if (t->local[r]) {
        char name[HVD_TCP_UNIX_NAME_MAX];
        size_t len = hvd__tcp_unix_name(t->keyed_unix_names ? &t->secret : NULL, t->generation, r,
                                        t->addrs[r].addr, t->addrs[r].port, name);
        if (len && hvd__socket_unix_connect(name, len, &p->fd) == HVD_OK) {
            p->is_shm = 1; /* once the WELCOME brings the memory */
            epoll_add(t, p->fd);
            p->state = PEER_CONNECTING;
            return HVD_OK;
        }
        /* Not reachable that way (a host name shared across network namespaces, or no
         * listener): TCP, as to any other host. */
        HVD_LOG_D("rank %d: rank %d is not reachable over this host's unix socket (%s); using "
                  "TCP",
                  t->base.rank, r, hvd_last_error());
        hvd__error_clear();
        t->local[r] = 0;
        if (t->addrs[r].port == 0) {
            hvd_status_t st = resolve(t, r);
            if (st != HVD_OK)
                return st;
        }
    }
    hvd_status_t st = hvd__socket_connect_start(t->addrs[r].addr, t->addrs[r].port, &p->fd);
    if (st != HVD_OK) {
        char name[128];
        return hvd__error_wrap(st, "connecting to %s", peer_name(t, r, name, sizeof name));
    }
    if (hvd__socket_set_congestion(p->fd, t->congestion) != 0)
        HVD_LOG_D("rank %d: TCP congestion control '%s' refused; using the system's", t->base.rank,
                  t->congestion);
    epoll_add(t, p->fd);
    p->state = PEER_CONNECTING;
    return HVD_OK;
}

/* ---- moving frames ------------------------------------------------------------------- */

static size_t xfer_payload_len(const hvd_xfer_t *x) {
    size_t n = 0;
    for (int i = 0; i < x->iovcnt; i++)
        n += x->iov[i].iov_len;
    return n;
}

/* Returns 1 progressed, 0 would block, or a negative status. */
static int advance_send(tcp_t *t, int r, hvd_xfer_t *x) {
    peer_t *p = &t->peers[r];
    size_t plen = xfer_payload_len(x);
    if (x->pos == 0)
        hvd__frame_header_encode(p->shdr, HVD_FRAME_DATA, plen);
    struct iovec iov[1 + HVD_XFER_MAX_IOV];
    int cnt = 0;
    uint64_t skip = x->pos;
    if (skip < HVD_FRAME_HEADER_LEN) {
        iov[cnt].iov_base = p->shdr + skip;
        iov[cnt++].iov_len = HVD_FRAME_HEADER_LEN - skip;
        skip = 0;
    } else {
        skip -= HVD_FRAME_HEADER_LEN;
    }
    for (int i = 0; i < x->iovcnt; i++) {
        size_t l = x->iov[i].iov_len;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        iov[cnt].iov_base = (char *)x->iov[i].iov_base + skip;
        iov[cnt++].iov_len = l - skip;
        skip = 0;
    }
    ssize_t n = peer_sendv(p, iov, cnt);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        char what[160];
        snprintf(what, sizeof what,
                 "closed the data connection while this rank was sending "
                 "to it (%s): the process exited or was killed",
                 strerror(errno));
        return peer_lost(t, r, what);
    }
    x->pos += (uint64_t)n;
    p->send_mid_frame = x->pos < HVD_FRAME_HEADER_LEN + plen;
    if (!p->send_mid_frame)
        x->done = 1;
    return 1;
}

/* recv() into the staging buffer. Returns 1 got bytes, 0 would block, negative on error. */
static int fill_stage(tcp_t *t, int r) {
    peer_t *p = &t->peers[r];
    p->stage_pos = p->stage_end = 0;
    ssize_t n = peer_recv(p, p->stage, STAGE_SIZE);
    if (n > 0) {
        p->stage_end = (size_t)n;
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    char what[160];
    if (n == 0)
        snprintf(what, sizeof what,
                 "closed the data connection: the process exited or was "
                 "killed");
    else
        snprintf(what, sizeof what, "lost the data connection: %s", strerror(errno));
    return peer_lost(t, r, what);
}

/* Where payload byte off of x goes: a pointer and how many contiguous bytes, or NULL when
 * off is beyond the receive regions (the excess of a longer frame is discarded). */
static uint8_t *recv_dst(hvd_xfer_t *x, uint64_t off, size_t *room_p) {
    for (int i = 0; i < x->iovcnt; i++) {
        if (off < x->iov[i].iov_len) {
            *room_p = x->iov[i].iov_len - off;
            return (uint8_t *)x->iov[i].iov_base + off;
        }
        off -= x->iov[i].iov_len;
    }
    *room_p = 0;
    return NULL;
}

/* An ABORT frame from a peer: adopt its cause as ours, word for word (it names the rank
 * where it arose, which need not be that peer). */
static hvd_status_t take_abort(tcp_t *t, int r, const uint8_t *payload, size_t len) {
    hvd_status_t st = HVD_ERR_PEER_LOST;
    if (len >= 4) {
        st = (hvd_status_t)(payload[0] | (payload[1] << 8) | (payload[2] << 16) |
                            ((uint32_t)payload[3] << 24));
        if (st >= 0)
            st = HVD_ERR_PROTOCOL;
    }
    int mlen = len > 4 ? (int)(len - 4) : 0;
    if (mlen > 0 && attributed((const char *)payload + 4, (size_t)mlen))
        return hvd__error_set(st, "%.*s", mlen, (const char *)payload + 4);
    return hvd__error_set(st, "rank %d (host %s)" FAILED_FIRST "%.*s", r, t->addrs[r].host, mlen,
                          (const char *)payload + 4);
}

static int advance_recv(tcp_t *t, int r, hvd_xfer_t *x) {
    peer_t *p = &t->peers[r];
    int progressed = 0;
    for (;;) {
        size_t avail = p->stage_end - p->stage_pos;
        if (!p->in_frame) {
            if (avail == 0) {
                int got = fill_stage(t, r);
                if (got <= 0)
                    return got < 0 ? got : progressed;
                progressed = 1;
                continue;
            }
            size_t take = HVD_FRAME_HEADER_LEN - p->hdr_got;
            if (take > avail)
                take = avail;
            memcpy(p->hdr + p->hdr_got, p->stage + p->stage_pos, take);
            p->stage_pos += take;
            p->hdr_got += take;
            progressed = 1;
            if (p->hdr_got < HVD_FRAME_HEADER_LEN)
                continue;
            hvd_status_t st = hvd__frame_header_decode(p->hdr, &p->frame_kind, &p->frame_len);
            if (st != HVD_OK)
                return hvd__error_wrap(st, "from rank %d (host %s)", r, t->addrs[r].host);
            if (p->frame_kind == HVD_FRAME_ABORT && p->frame_len > HVD_FRAME_ABORT_MAX)
                return hvd__error_set(HVD_ERR_PROTOCOL, "rank %d sent an oversized ABORT", r);
            p->in_frame = 1;
            p->frame_got = 0;
            p->hdr_got = 0;
            x->frame_len = p->frame_len;
            if (x->iovcnt == 0 && x->alloc_max > 0 && p->frame_kind == HVD_FRAME_DATA) {
                if (p->frame_len > x->alloc_max)
                    return hvd__error_set(HVD_ERR_PROTOCOL,
                                          "rank %d (host %s) sent a %llu-byte message, more than "
                                          "the %zu allowed here",
                                          r, t->addrs[r].host, (unsigned long long)p->frame_len,
                                          x->alloc_max);
                x->iov[0].iov_base = malloc(p->frame_len ? (size_t)p->frame_len : 1);
                if (!x->iov[0].iov_base)
                    return hvd__error_set(HVD_ERR_NO_MEMORY,
                                          "out of memory for %llu bytes from "
                                          "rank %d",
                                          (unsigned long long)p->frame_len, r);
                x->iov[0].iov_len = (size_t)p->frame_len;
                x->iovcnt = 1;
            }
            continue; /* avail changed */
        }
        if (p->frame_kind == HVD_FRAME_ABORT) {
            /* Small and bounded: wait until all of it is staged, then report it. */
            if (avail >= p->frame_len)
                return take_abort(t, r, p->stage + p->stage_pos, (size_t)p->frame_len);
            if (p->stage_pos > 0) {
                memmove(p->stage, p->stage + p->stage_pos, avail);
                p->stage_end = avail;
                p->stage_pos = 0;
            }
            ssize_t n = peer_recv(p, p->stage + p->stage_end, STAGE_SIZE - p->stage_end);
            if (n > 0) {
                p->stage_end += (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return progressed;
            return take_abort(t, r, p->stage + p->stage_pos, avail);
        }
        uint64_t left = p->frame_len - p->frame_got;
        if (left == 0) {
            p->in_frame = 0;
            x->done = 1;
            return 1;
        }
        size_t room;
        uint8_t *dst = recv_dst(x, p->frame_got, &room);
        if (avail > 0) {
            size_t take = avail < left ? avail : (size_t)left;
            if (dst) {
                if (take > room)
                    take = room;
                memcpy(dst, p->stage + p->stage_pos, take);
            } else if (take > avail) {
                take = avail;
            }
            p->stage_pos += take;
            p->frame_got += take;
            progressed = 1;
            continue;
        }
        if (dst && left >= DIRECT_MIN && room >= DIRECT_MIN) {
            size_t want = room < left ? room : (size_t)left;
            ssize_t n = peer_recv(p, dst, want);
            if (n > 0) {
                p->frame_got += (uint64_t)n;
                progressed = 1;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return progressed;
            /* fall through to fill_stage for the error report */
        }
        int got = fill_stage(t, r);
        if (got <= 0)
            return got < 0 ? got : progressed;
        progressed = 1;
    }
}

/* ---- the exchange loop ---------------------------------------------------------------- */

static void describe_waits(tcp_t *t, hvd_xfer_t *xfers, char *out, size_t out_size) {
    size_t n = 0;
    out[0] = '\0';
    for (int r = 0; r < t->base.size && n < out_size; r++) {
        peer_t *p = &t->peers[r];
        if (!p->active)
            continue;
        char name[128];
        peer_name(t, r, name, sizeof name);
        const char *what = NULL;
        char buf[200];
        if (p->state == PEER_AWAIT)
            what = "to connect to this rank";
        else if (p->state != PEER_READY)
            what = "to complete the connection handshake";
        else if (p->recv_head != NONE) {
            hvd_xfer_t *x = &xfers[p->recv_head];
            snprintf(buf, sizeof buf, "to send data (%llu of %llu bytes of the frame received)",
                     (unsigned long long)(p->in_frame ? p->frame_got : 0),
                     (unsigned long long)(p->in_frame ? p->frame_len : xfer_payload_len(x)));
            what = buf;
        } else if (p->send_head != NONE) {
            what = "to read the data this rank is sending";
        }
        if (!what)
            continue;
        /* a same-host peer blocked behind another rank says so in the arena */
        int via = -1;
        for (int i = 0; t->arena_usable && i < t->arena_n; i++)
            if (t->arena_ranks[i] == r && i != t->arena_self)
                via = hvd__arena_waits_for(&t->arena, i);
        char also[64] = "";
        if (via >= 0 && via != t->base.rank)
            snprintf(also, sizeof also, " (itself waiting for rank %d)", via);
        int w = snprintf(out + n, out_size - n, "%s%s %s%s", n ? "; " : "", name, what, also);
        if (w > 0)
            n += (size_t)w;
    }
}

/* The first peer the exchange still waits for, for this rank's wait record (-1: none). */
static int first_waited(tcp_t *t) {
    for (int r = 0; r < t->base.size; r++) {
        const peer_t *p = &t->peers[r];
        if (p->active && (p->state != PEER_READY || p->recv_head != NONE || p->send_head != NONE))
            return r;
    }
    return -1;
}

/* Peers asked at one look whether they still run: a wait on thousands of peers asks a few,
 * and goes on if one runs (the stopped one is then the last left, and fails the wait). */
#define WATCHED_MAX 64

/* Whether a same-host peer this wait waits for still runs (tcp.h, progressing). Every peer
 * asked takes a reading that the next look compares with. */
static int waited_peer_runs(tcp_t *t) {
    if (!t->progressing)
        return 0;
    int runs = 0, asked = 0;
    for (int r = 0; r < t->base.size && asked < WATCHED_MAX; r++) {
        const peer_t *p = &t->peers[r];
        if (!t->local[r] || !p->active ||
            (p->state == PEER_READY && p->recv_head == NONE && p->send_head == NONE))
            continue;
        asked++;
        runs |= t->progressing(t->progress_arg, r);
    }
    return runs;
}

static int is_interrupted(tcp_t *t) {
    return __atomic_load_n(&t->interrupted, __ATOMIC_ACQUIRE);
}

/* The interrupt's cause as this thread's error (set once before the flag, never changed). */
static hvd_status_t interrupt_error(tcp_t *t) {
    return hvd__error_set(t->int_status, "%s", t->int_msg);
}

static void tcp_interrupt(hvd_transport_t *base, hvd_status_t status, const char *message) {
    tcp_t *t = (tcp_t *)base;
    pthread_mutex_lock(&t->int_lock);
    if (!t->interrupted) {
        t->int_status = status < 0 ? status : HVD_ERR_PEER_LOST;
        snprintf(t->int_msg, sizeof t->int_msg, "%s", message ? message : "interrupted");
        __atomic_store_n(&t->interrupted, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(t->int_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            HVD_LOG_D("rank %d: cannot wake the transport: %s", base->rank, strerror(errno));
        if (__atomic_load_n(&t->arena_mem, __ATOMIC_ACQUIRE))
            hvd__arena_wake(&t->arena);
    }
    pthread_mutex_unlock(&t->int_lock);
}

/* Before the exchange sleeps: drop the doorbell bytes of its same-host peers and ask each to
 * ring when its ring moves the way this rank waits for. 1 when something can move already
 * (then do not sleep), also a hang-up, which the next read or write reports. */
static int shm_sleep(tcp_t *t, hvd_xfer_t *xfers, int nactive) {
    int ready = 0;
    for (int k = 0; k < nactive; k++) {
        peer_t *p = &t->peers[t->active[k]];
        if (p->state != PEER_READY || !p->is_shm)
            continue;
        drain_doorbell(p);
        if (p->hup)
            ready = 1;
        if (p->recv_head != NONE && hvd__ring_reader_sleep(&p->rx))
            ready = 1;
        if (p->send_head != NONE) {
            const hvd_xfer_t *x = &xfers[p->send_head];
            if ((!x->after || x->after->done) && hvd__ring_writer_sleep(&p->tx))
                ready = 1;
        }
    }
    return ready;
}

static int ensure_scratch(tcp_t *t, size_t n) {
    if (n <= t->next_cap)
        return 0;
    size_t *nx = realloc(t->next, n * sizeof *nx);
    if (!nx)
        return -1;
    t->next = nx;
    t->next_cap = n;
    return 0;
}

/* Advance peer r's send (is_send) or receive queue as far as it goes without blocking:
 * completed transfers leave the queue and run their on_done. Returns 1 if anything moved,
 * 0 if nothing could, or a negative status. */
static int drain_queue(tcp_t *t, int r, hvd_xfer_t *xfers, int is_send, size_t *remaining) {
    peer_t *p = &t->peers[r];
    size_t *head = is_send ? &p->send_head : &p->recv_head;
    int progressed = 0;
    while (*head != NONE) {
        hvd_xfer_t *x = &xfers[*head];
        if (is_send && x->after && !x->after->done)
            break;
        int rc = is_send ? advance_send(t, r, x) : advance_recv(t, r, x);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        progressed = 1;
        if (!x->done)
            break;
        *head = t->next[*head];
        (*remaining)--;
        if (x->on_done) {
            hvd_status_t st = x->on_done(x);
            if (st != HVD_OK)
                return st;
        }
    }
    return progressed;
}

static hvd_status_t tcp_exchange(hvd_transport_t *base, hvd_xfer_t *xfers, size_t n,
                                 const char *what) {
    tcp_t *t = (tcp_t *)base;
    if (t->poison != HVD_OK)
        return tcp_health(base);
    int nactive = 0;
    int noted = 0; /* this rank's wait record in the host arena says whom it waits for */
    hvd_status_t st = HVD_OK;
    if (is_interrupted(t)) {
        st = interrupt_error(t);
        goto fail;
    }
    if (ensure_scratch(t, n) != 0)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    /* Build the per-peer queues (array order) and start missing connections. */
    for (size_t i = n; i-- > 0;) {
        hvd_xfer_t *x = &xfers[i];
        if (x->peer < 0 || x->peer >= base->size || x->peer == base->rank) {
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: transfer to invalid peer %d", what,
                                  x->peer);
        }
        x->done = 0;
        x->pos = 0;
        x->frame_len = 0;
        peer_t *p = &t->peers[x->peer];
        if (!p->active) {
            p->active = 1;
            p->send_head = p->recv_head = NONE;
            t->active[nactive++] = x->peer;
        }
        size_t *head = x->is_send ? &p->send_head : &p->recv_head;
        t->next[i] = *head;
        *head = i;
    }
    for (int k = 0; k < nactive; k++) {
        int r = t->active[k];
        if (t->peers[r].state == PEER_NONE && (st = start_connection(t, r)) != HVD_OK)
            goto fail;
    }
    size_t remaining = n;
    int64_t last_progress = hvd__clock_now_us();
    const int64_t base_limit_us = (int64_t)t->timeout_ms * 1000;
    int64_t idle_limit_us = base_limit_us;
    int grace = 0, looked = 0;
    while (remaining > 0) {
        int progressed = 0;
        if (is_interrupted(t)) {
            st = interrupt_error(t);
            goto fail;
        }
        if (t->npending > 0)
            progressed |= step_pending(t);
        for (int k = 0; k < nactive; k++) {
            int r = t->active[k];
            peer_t *p = &t->peers[r];
            if (p->state == PEER_AWAIT) {
                accept_all(t);
                progressed |= step_pending(t);
                if (p->state != PEER_READY)
                    continue;
            }
            while (p->state == PEER_CONNECTING || p->state == PEER_CHALLENGE ||
                   p->state == PEER_WELCOME) {
                int rc = step_connect(t, r);
                if (rc < 0) {
                    st = rc;
                    goto fail;
                }
                if (rc == 0)
                    break;
                progressed = 1;
            }
            if (p->state != PEER_READY)
                continue;
            int sent = drain_queue(t, r, xfers, 1, &remaining);
            int got = sent < 0 ? 0 : drain_queue(t, r, xfers, 0, &remaining);
            int rc = sent < 0 ? sent : got < 0 ? got : (sent | got);
            if (rc < 0) {
                st = rc;
                goto fail;
            }
            progressed |= rc;
        }
        if (remaining == 0)
            break;
        int64_t now = hvd__clock_now_us();
        if (progressed) {
            last_progress = now;
            looked = 0;
            continue;
        }
        int64_t idle = now - last_progress;
        if (!looked && idle >= base_limit_us / 2) {
            /* half-way: the readings the look at the timeout compares with (a stopped peer
             * still fails the wait at the timeout, and the grace below keeps its meaning) */
            (void)waited_peer_runs(t);
            looked = 1;
        }
        if (idle >= idle_limit_us && !grace) {
            /* A peer blocked behind another rank (on its host, say) times out at about the
             * same moment and tells every peer whom it waited for: a moment for that cause
             * to arrive (it ends this wait, as any peer's failure does) before naming the
             * peer this rank waited for, who may only be blocked. */
            grace = 1;
            idle_limit_us += TIMEOUT_GRACE_US;
            continue;
        }
        if (idle >= idle_limit_us && waited_peer_runs(t)) {
            /* starved, not lost: another timeout (tcp.h, progressing) */
            last_progress = now;
            idle_limit_us = base_limit_us;
            grace = 0;
            continue;
        }
        if (idle >= idle_limit_us) {
            char waits[768];
            describe_waits(t, xfers, waits, sizeof waits);
            st = hvd__error_set(HVD_ERR_TIMEOUT,
                                "%s: no progress for %d s (HOROVOD_GLOO_TIMEOUT_SECONDS) waiting "
                                "for %s",
                                what, t->timeout_ms / 1000, waits);
            goto fail;
        }
        if (idle < t->busy_poll_us && !__atomic_load_n(&t->base.quiet, __ATOMIC_RELAXED)) {
            if (t->yield_when_idle || idle >= HVD_SPIN_ALONE_US)
                sched_yield();
            continue;
        }
        /* Nothing moved for the whole busy-poll budget: sleep until a socket changes. Every
         * socket was tried since its last event, so edge-triggered epoll cannot miss one;
         * same-host peers are asked to ring when their rings move. */
        if (shm_sleep(t, xfers, nactive))
            continue;
        accept_all(t);
        if (t->arena_usable) {
            /* (rewritten every slice: a record that grows old means a stopped process) */
            hvd__arena_note_wait(&t->arena, first_waited(t));
            noted = 1;
        }
        struct epoll_event ev[32];
        int64_t left_ms = (idle_limit_us - idle) / 1000 + 1;
        int rc = epoll_wait(t->epfd, ev, 32, left_ms > 100 ? 100 : (int)left_ms);
        (void)rc;
    }
    for (int k = 0; k < nactive; k++)
        t->peers[t->active[k]].active = 0;
    if (noted)
        hvd__arena_note_wait(&t->arena, -1);
    return HVD_OK;

fail:
    for (int k = 0; k < nactive; k++)
        t->peers[t->active[k]].active = 0;
    if (st == HVD_OK)
        st = HVD_ERR_IO;
    {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", hvd_last_error());
        tcp_abort(base, st, copy);
    }
    /* (only now: a host peer timing out meanwhile reads either the record or the abort) */
    if (noted)
        hvd__arena_note_wait(&t->arena, -1);
    return hvd__error_prefix(st, what);
}

/* ---- the host arena ------------------------------------------------------------------ */

/* This rank's view of its host's arena: who the members are, and for the highest of them the
 * arena itself (mapped now; passed with the WELCOMEs). Failing to create it is no error:
 * the host's ranks then agree to go without (hvd__tcp_arena_join). */
static hvd_status_t arena_plan(tcp_t *t) {
    int n = 1;
    for (int r = 0; r < t->base.size; r++)
        n += t->local[r];
    if (n < 2 || n > HVD_ARENA_MAX_RANKS)
        return HVD_OK;
    if (!(t->arena_ranks = malloc((size_t)n * sizeof *t->arena_ranks)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the host arena's %d ranks", n);
    for (int r = 0, i = 0; r < t->base.size; r++) {
        if (r == t->base.rank)
            t->arena_self = i;
        if (r == t->base.rank || t->local[r])
            t->arena_ranks[i++] = r;
    }
    t->arena_n = n;
    if (t->arena_ranks[n - 1] != t->base.rank)
        return HVD_OK;
    if (hvd__shm_create(hvd__arena_bytes(n, ARENA_DATA), "hvd-arena", &t->arena_fd) != HVD_OK) {
        HVD_LOG_D("rank %d: no shared-memory arena for this host: %s", t->base.rank,
                  hvd_last_error());
        hvd__error_clear();
        t->arena_fd = -1;
        return HVD_OK;
    }
    arena_map(t, -1);
    return HVD_OK;
}

static hvd_status_t tcp_arena_check(void *ctx);

/* Map the arena (from: the rank whose WELCOME brought arena_in_fd, or -1 for the creator's
 * own fresh arena_fd, whose header it writes) and attach this rank's view. A bad arena is
 * logged and left unused. */
static void arena_map(tcp_t *t, int from) {
    size_t bytes = hvd__arena_bytes(t->arena_n, ARENA_DATA);
    int fd = from < 0 ? t->arena_fd : t->arena_in_fd;
    void *mem = NULL;
    hvd_status_t st = hvd__shm_map(fd, bytes, &mem);
    if (st == HVD_OK && from < 0)
        hvd__arena_format(mem, t->arena_n, ARENA_DATA);
    if (st == HVD_OK && (st = hvd__arena_attach(&t->arena, mem, bytes, t->arena_n, t->arena_self,
                                                ARENA_DATA)) != HVD_OK)
        hvd__shm_unmap(mem, bytes);
    int *owned = from >= 0 ? &t->arena_in_fd : st != HVD_OK ? &t->arena_fd : NULL;
    if (owned) { /* what arrived is mapped or unusable; an unusable own arena is not passed on */
        close(*owned);
        *owned = -1;
    }
    if (st != HVD_OK) {
        HVD_LOG_D("rank %d: the shared-memory arena from rank %d is unusable: %s", t->base.rank,
                  from, hvd_last_error());
        hvd__error_clear();
        return;
    }
    hvd_arena_t *a = &t->arena;
    a->ranks = t->arena_ranks;
    a->spin_us = t->busy_poll_us;
    a->yield = t->yield_when_idle;
    a->quiet = &t->base.quiet;
    a->timeout_ms = t->timeout_ms;
    a->check = tcp_arena_check;
    a->check_ctx = t;
    a->progressing = t->progressing;
    a->progress_ctx = t->progress_arg;
    __atomic_store_n(&t->arena_mem, mem, __ATOMIC_RELEASE);
}

/* The arena's liveness check: the transport not poisoned or interrupted, and no member this
 * rank is connected to gone (the highest member is connected to all, so a lost member is
 * noticed there and reaches the others through the abort record). */
static hvd_status_t tcp_arena_check(void *ctx) {
    tcp_t *t = ctx;
    if (t->poison != HVD_OK)
        return tcp_health(&t->base);
    if (is_interrupted(t))
        return interrupt_error(t);
    for (int i = 0; i < t->arena_n; i++) {
        int r = t->arena_ranks[i];
        peer_t *p = &t->peers[r];
        if (r == t->base.rank || p->state != PEER_READY || !p->is_shm)
            continue;
        drain_doorbell(p);
        if (p->hup)
            return peer_lost(t, r, "exited during a collective in shared memory");
    }
    return HVD_OK;
}

static hvd_arena_t *tcp_arena(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    return t->arena_usable && t->poison == HVD_OK ? &t->arena : NULL;
}

/* One byte to or from peer, as a whole exchange's transfer. */
static void byte_xfer(hvd_xfer_t *x, int peer, int is_send, uint8_t *b) {
    memset(x, 0, sizeof *x);
    x->peer = peer;
    x->is_send = is_send;
    x->iov[0].iov_base = b;
    x->iov[0].iov_len = 1;
    x->iovcnt = 1;
}

hvd_status_t hvd__tcp_arena_join(hvd_transport_t *base, const int *members, int n) {
    tcp_t *t = (tcp_t *)base;
    if (n < 2 || n > HVD_ARENA_MAX_RANKS)
        return HVD_OK;
    int top = members[0];
    for (int i = 1; i < n; i++)
        top = members[i] > top ? members[i] : top;
    const char *what = "setting up the host's shared-memory arena";
    hvd_status_t st;
    if (base->rank != top) {
        /* Connect to the creator (its WELCOME brings the arena), say whether it is mapped,
         * learn whether every member's is. */
        uint8_t hello = 0, mine, all = 0;
        hvd_xfer_t x[2];
        byte_xfer(&x[0], top, 0, &hello);
        if ((st = tcp_exchange(base, x, 1, what)) != HVD_OK)
            return st;
        mine = t->arena_mem != NULL && t->arena_n == n;
        byte_xfer(&x[0], top, 1, &mine);
        byte_xfer(&x[1], top, 0, &all);
        if ((st = tcp_exchange(base, x, 2, what)) != HVD_OK)
            return st;
        t->arena_usable = all == 1 && mine;
    } else {
        hvd_xfer_t *x = calloc((size_t)n, sizeof *x);
        uint8_t *got = calloc((size_t)n, 1), one = 1, all;
        if (!x || !got) {
            free(x);
            free(got);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
        }
        int k = 0;
        for (int i = 0; i < n; i++)
            if (members[i] != top)
                byte_xfer(&x[k++], members[i], 1, &one);
        st = tcp_exchange(base, x, (size_t)k, what);
        for (int i = 0, j = 0; st == HVD_OK && i < n; i++)
            if (members[i] != top)
                byte_xfer(&x[j], members[i], 0, &got[j]), j++;
        if (st == HVD_OK)
            st = tcp_exchange(base, x, (size_t)k, what);
        all = t->arena_mem != NULL && t->arena_n == n;
        for (int j = 0; j < k; j++)
            all &= got[j] == 1;
        for (int i = 0, j = 0; st == HVD_OK && i < n; i++)
            if (members[i] != top)
                byte_xfer(&x[j++], members[i], 1, &all);
        if (st == HVD_OK)
            st = tcp_exchange(base, x, (size_t)k, what);
        free(x);
        free(got);
        if (st != HVD_OK)
            return st;
        t->arena_usable = all;
    }
    HVD_LOG_D("rank %d: %s collectives among this host's %d ranks", base->rank,
              t->arena_usable ? "shared-memory arena for" : "no shared-memory arena for", n);
    return HVD_OK;
}

static void tcp_destroy(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    if (!t)
        return;
    for (int r = 0; r < base->size; r++)
        peer_reset(t, &t->peers[r]);
    for (int i = 0; i < t->npending; i++)
        close(t->pending[i].fd);
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    if (t->ulisten_fd >= 0)
        close(t->ulisten_fd);
    if (t->epfd >= 0)
        close(t->epfd);
    if (t->rdfd >= 0)
        close(t->rdfd);
    if (t->int_fd >= 0)
        close(t->int_fd);
    pthread_mutex_destroy(&t->int_lock);
    if (t->arena_mem)
        hvd__shm_unmap(t->arena_mem, t->arena.bytes);
    if (t->arena_fd >= 0)
        close(t->arena_fd);
    if (t->arena_in_fd >= 0)
        close(t->arena_in_fd);
    free(t->arena_ranks);
    free(t->pending);
    hvd__secret_wipe(&t->secret);
    free(t->peers);
    free(t->local);
    free(t->addrs);
    free(t->next);
    free(t->active);
    free(t);
}

static int tcp_wait_fd(hvd_transport_t *base) {
    return ((tcp_t *)base)->rdfd;
}

static int tcp_buffered(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    for (int r = 0; r < base->size; r++) {
        const peer_t *p = &t->peers[r];
        if (p->state == PEER_READY && (p->stage_end > p->stage_pos || p->hdr_got || p->in_frame))
            return 1;
    }
    /* Same-host peers write into rings, which poll cannot see: ask each to ring when it
     * writes (the engine polls tcp_wait_fd next), then look. */
    int any = 0;
    for (int r = 0; r < base->size; r++) {
        peer_t *p = &t->peers[r];
        if (p->state != PEER_READY || !p->is_shm)
            continue;
        drain_doorbell(p);
        any |= hvd__ring_reader_sleep(&p->rx) || p->hup;
    }
    return any;
}

static const hvd_transport_ops_t TCP_OPS = {
    .name = "tcp",
    .exchange = tcp_exchange,
    .wait_fd = tcp_wait_fd,
    .buffered = tcp_buffered,
    .abort = tcp_abort,
    .interrupt = tcp_interrupt,
    .health = tcp_health,
    .arena = tcp_arena,
    .destroy = tcp_destroy,
};

hvd_status_t hvd__tcp_create(const hvd_tcp_config_t *cfg, hvd_transport_t **t_p) {
    tcp_t *t = calloc(1, sizeof *t);
    if (!t) {
        close(cfg->listen_fd);
        if (cfg->local && cfg->unix_listen_fd >= 0)
            close(cfg->unix_listen_fd);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating the tcp transport");
    }
    t->base.ops = &TCP_OPS;
    t->base.rank = cfg->rank;
    t->base.size = cfg->size;
    t->listen_fd = cfg->listen_fd;
    t->ulisten_fd = cfg->local ? cfg->unix_listen_fd : -1;
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->rdfd = epoll_create1(EPOLL_CLOEXEC);
    t->int_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    t->arena_fd = t->arena_in_fd = -1;
    pthread_mutex_init(&t->int_lock, NULL);
    t->secret = *cfg->secret;
    t->generation = cfg->generation;
    t->timeout_ms = cfg->timeout_ms;
    t->busy_poll_us = cfg->busy_poll_us;
    t->yield_when_idle = cfg->yield_when_idle;
    snprintf(t->congestion, sizeof t->congestion, "%s", cfg->congestion ? cfg->congestion : "");
    t->addrs = calloc((size_t)cfg->size, sizeof *t->addrs);
    t->peers = calloc((size_t)cfg->size, sizeof *t->peers);
    t->active = calloc((size_t)cfg->size, sizeof *t->active);
    t->local = calloc((size_t)cfg->size, 1);
    t->max_pending = MAX_PENDING + cfg->size;
    t->handshake_ms =
        cfg->timeout_ms > 0 && cfg->timeout_ms < HANDSHAKE_MS ? cfg->timeout_ms : HANDSHAKE_MS;
    t->pending = calloc((size_t)t->max_pending, sizeof *t->pending);
    if (t->epfd < 0 || t->rdfd < 0 || t->int_fd < 0 || !t->addrs || !t->peers || !t->active ||
        !t->local || !t->pending) {
        tcp_destroy(&t->base);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "cannot create the tcp transport");
    }
    memcpy(t->addrs, cfg->peers, (size_t)cfg->size * sizeof *t->addrs);
    t->resolve = cfg->resolve;
    t->keyed_unix_names = cfg->keyed_unix_names;
    t->progressing = cfg->progressing;
    t->progress_arg = cfg->progress_arg;
    t->resolve_arg = cfg->resolve_arg;
    int nlocal = 0;
    for (int r = 0; r < cfg->size; r++) {
        t->peers[r].fd = t->peers[r].shm_fd = -1;
        t->peers[r].send_head = t->peers[r].recv_head = NONE;
        t->local[r] = cfg->local && cfg->local[r] && r != cfg->rank;
        nlocal += t->local[r];
    }
    t->ring_cap = hvd__tcp_ring_cap(nlocal + 1);
    if (cfg->local && arena_plan(t) != HVD_OK) {
        tcp_destroy(&t->base);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "cannot create the tcp transport");
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = t->listen_fd};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->listen_fd, &ev);
    rd_add(t, t->listen_fd);
    if (t->ulisten_fd >= 0) {
        struct epoll_event uev = {.events = EPOLLIN | EPOLLET, .data.fd = t->ulisten_fd};
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->ulisten_fd, &uev);
        rd_add(t, t->ulisten_fd);
    }
    /* Level-triggered in both sets: once interrupted, every later wait returns at once. */
    struct epoll_event iev = {.events = EPOLLIN, .data.fd = t->int_fd};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->int_fd, &iev);
    epoll_ctl(t->rdfd, EPOLL_CTL_ADD, t->int_fd, &iev);
    *t_p = &t->base;
    return HVD_OK;
}

size_t hvd__tcp_unix_name(const hvd_secret_t *secret, uint32_t generation, int rank,
                          const char *addr, int port, char out[HVD_TCP_UNIX_NAME_MAX]) {
    int n;
    if (secret) {
        static const char label[] = "hvd unix listener";
        uint8_t gen[4], who[4], mac[HVD_HMAC_LEN];
        hvd__le32_put(gen, generation);
        hvd__le32_put(who, (uint32_t)rank);
        const void *parts[] = {label, gen, who};
        const size_t lens[] = {sizeof label - 1, sizeof gen, sizeof who};
        if (hvd__hmac_sha256(secret->bytes, sizeof secret->bytes, parts, lens, 3, mac) != 0)
            return 0;
        /* 96 bits: no guess lands on a name before its rank binds it */
        n = snprintf(out, HVD_TCP_UNIX_NAME_MAX, "hvd-data-");
        for (int i = 0; i < 12; i++)
            n += snprintf(out + n, HVD_TCP_UNIX_NAME_MAX - (size_t)n, "%02x", mac[i]);
    } else {
        n = snprintf(out, HVD_TCP_UNIX_NAME_MAX, "hvd-data-%s:%d", addr, port);
    }
    return n > 0 && n < HVD_TCP_UNIX_NAME_MAX ? (size_t)n : 0;
}
