/* The TCP transport's frames (tcp_impl.h): sending and receiving them on a peer's socket or
 * its shared-memory rings, read through a staging buffer when small. */
#include "transport/tcp_impl.h"

/* ---- moving frames ------------------------------------------------------------------- */

size_t hvd__tcpx_xfer_payload_len(const hvd_xfer_t *x) {
    size_t n = 0;
    for (int i = 0; i < x->iovcnt; i++)
        n += x->iov[i].iov_len;
    return n;
}

/* Returns 1 progressed, 0 would block, or a negative status. */
int hvd__tcpx_advance_send(tcp_t *t, int r, hvd_xfer_t *x) {
    peer_t *p = &t->peers[r];
    size_t plen = hvd__tcpx_xfer_payload_len(x);
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
    ssize_t n = hvd__tcpx_peer_sendv(p, iov, cnt);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        char what[160];
        snprintf(what, sizeof what,
                 "closed the data connection while this rank was sending "
                 "to it (%s): the process exited or was killed",
                 strerror(errno));
        return hvd__tcpx_peer_lost(t, r, what);
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
    ssize_t n = hvd__tcpx_peer_recv(p, p->stage, STAGE_SIZE);
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
    return hvd__tcpx_peer_lost(t, r, what);
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
    if (mlen > 0 && hvd__tcpx_attributed((const char *)payload + 4, (size_t)mlen))
        return hvd__error_set(st, "%.*s", mlen, (const char *)payload + 4);
    return hvd__error_set(st, "rank %d (host %s)" FAILED_FIRST "%.*s", r, t->addrs[r].host, mlen,
                          (const char *)payload + 4);
}

int hvd__tcpx_advance_recv(tcp_t *t, int r, hvd_xfer_t *x) {
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
            ssize_t n = hvd__tcpx_peer_recv(p, p->stage + p->stage_end, STAGE_SIZE - p->stage_end);
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
            ssize_t n = hvd__tcpx_peer_recv(p, dst, want);
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
