/* The TCP transport's peers at the lowest level (tcp_impl.h): naming them, the epoll sets,
 * a same-host peer's rings and doorbell, sending and receiving on either, and failure: the
 * first cause, the ABORT that carries it to the others, and the interrupt. */
#include "transport/tcp_impl.h"

const char *hvd__tcpx_peer_name(tcp_t *t, int r, char *buf, size_t n) {
    if (t->addrs[r].port == 0) /* not learnt yet */
        snprintf(buf, n, "rank %d (host %s)", r, t->addrs[r].host);
    else
        snprintf(buf, n, "rank %d (host %s, %s:%d)", r, t->addrs[r].host, t->addrs[r].addr,
                 t->addrs[r].port);
    return buf;
}

void hvd__tcpx_epoll_add(tcp_t *t, int fd) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, .data.fd = fd};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Watch a connected peer (or the listener) for the engine's idle wait (tcp_wait_fd). */
void hvd__tcpx_rd_add(tcp_t *t, int fd) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
    epoll_ctl(t->rdfd, EPOLL_CTL_ADD, fd, &ev);
}

void hvd__tcpx_close_fd(tcp_t *t, int fd) {
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, fd, NULL);
    epoll_ctl(t->rdfd, EPOLL_CTL_DEL, fd, NULL); /* fails harmlessly for fds never added */
    close(fd);
}

size_t hvd__tcpx_shm_bytes(const tcp_t *t) {
    return 2 * hvd__ring_bytes(t->ring_cap);
}

size_t hvd__tcp_ring_cap(int n) {
    size_t cap = SHM_RING_CAP;
    while (cap > SHM_RING_MIN && (size_t)(n > 1 ? n - 1 : 1) * 2 * cap > SHM_RING_BUDGET)
        cap /= 2;
    return cap;
}

void hvd__tcpx_peer_reset(tcp_t *t, peer_t *p) {
    if (p->fd >= 0)
        hvd__tcpx_close_fd(t, p->fd);
    if (p->shm_fd >= 0)
        close(p->shm_fd);
    hvd__shm_unmap(p->shm, hvd__tcpx_shm_bytes(t));
    free(p->stage);
    memset(p, 0, sizeof *p);
    p->fd = p->shm_fd = -1;
    p->send_head = p->recv_head = NONE;
}

/* Map a pair's shared memory and attach its rings: ring 0 carries the lower rank's frames
 * to the higher, ring 1 the other way. Takes fd (closed: the mapping keeps the memory). */
hvd_status_t hvd__tcpx_shm_attach(tcp_t *t, int r, peer_t *p, int fd) {
    void *mem;
    hvd_status_t st = hvd__shm_map(fd, hvd__tcpx_shm_bytes(t), &mem);
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
void hvd__tcpx_drain_doorbell(peer_t *p) {
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
ssize_t hvd__tcpx_peer_sendv(peer_t *p, struct iovec *iov, int cnt) {
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

ssize_t hvd__tcpx_peer_recv(peer_t *p, void *buf, size_t len) {
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

int hvd__tcpx_attributed(const char *m, size_t len) {
    return memmem(m, len, FAILED_FIRST, strlen(FAILED_FIRST)) || memmem(m, len, SAW, strlen(SAW));
}

void hvd__tcpx_tcp_abort(hvd_transport_t *base, hvd_status_t status, const char *message) {
    tcp_t *t = (tcp_t *)base;
    if (t->poison != HVD_OK)
        return;
    t->poison = status;
    /* The first cause names its rank once, where it arose; a cause adopted from a peer's
     * ABORT already does and travels on unchanged. */
    if (hvd__tcpx_attributed(message, strlen(message)))
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
            ssize_t n = hvd__tcpx_peer_sendv(p, &iov, 1);
            (void)n; /* best effort: the connection closing tells the peer anyway */
        }
        if (p->fd >= 0) {
            shutdown(p->fd, SHUT_WR);
            drain_input(p->fd);
        }
        hvd__tcpx_peer_reset(t, p);
    }
    for (int i = 0; i < t->npending; i++)
        hvd__tcpx_close_fd(t, t->pending[i].fd);
    t->npending = 0;
    /* Peers that still want to connect to us are refused at once instead of waiting. */
    if (t->listen_fd >= 0) {
        hvd__tcpx_close_fd(t, t->listen_fd);
        t->listen_fd = -1;
    }
    if (t->ulisten_fd >= 0) {
        hvd__tcpx_close_fd(t, t->ulisten_fd);
        t->ulisten_fd = -1;
    }
}

hvd_status_t hvd__tcpx_tcp_health(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    if (t->poison == HVD_OK)
        return HVD_OK;
    return hvd__error_set(t->poison, "%s", t->poison_msg);
}

/* ---- the exchange loop ---------------------------------------------------------------- */

int hvd__tcpx_is_interrupted(tcp_t *t) {
    return __atomic_load_n(&t->interrupted, __ATOMIC_ACQUIRE);
}

/* The interrupt's cause as this thread's error (set once before the flag, never changed). */
hvd_status_t hvd__tcpx_interrupt_error(tcp_t *t) {
    return hvd__error_set(t->int_status, "%s", t->int_msg);
}

void hvd__tcpx_tcp_interrupt(hvd_transport_t *base, hvd_status_t status, const char *message) {
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

hvd_status_t hvd__tcpx_peer_lost(tcp_t *t, int r, const char *what) {
    char name[128];
    return hvd__error_set(HVD_ERR_PEER_LOST, "%s %s", hvd__tcpx_peer_name(t, r, name, sizeof name),
                          what);
}
