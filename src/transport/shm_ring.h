/* A single-producer, single-consumer byte ring in memory shared by two processes of one
 * host: the shared-memory half of a same-host connection (tcp.c carries the same frames
 * over it as over a socket). The producer owns head, the consumer tail; both only grow, so
 * head - tail is what waits to be read. Nothing in the shared part is trusted: a peer that
 * scribbles on it makes the next read or write fail, never touch memory outside the ring.
 *
 * Sleeping without missing a wake-up: a side that finds nothing to do sets its "waits" flag,
 * then looks again (hvd__ring_reader_sleep / _writer_sleep); the other side, after moving
 * bytes, takes the flag (hvd__ring_take_reader / _writer) and, when it was set, rings the
 * sleeper's doorbell (a byte on their unix socket). */
#ifndef HVD_TRANSPORT_SHM_RING_H
#define HVD_TRANSPORT_SHM_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Bytes of shared control block before each ring's data. */
#define HVD_RING_CTL_BYTES 256

typedef struct {
    void *ctl;     /* shared control block */
    uint8_t *data; /* shared, cap bytes */
    size_t cap;    /* a power of two */
} hvd_ring_t;

/* Shared bytes a ring of cap data bytes takes (control block included). */
size_t hvd__ring_bytes(size_t cap);

/* View the ring at mem (hvd__ring_bytes(cap) bytes, zero-filled before first use by
 * either side). cap must be a power of two. */
void hvd__ring_attach(hvd_ring_t *r, void *mem, size_t cap);

/* Producer: copy as much of iov[0..cnt) as fits, in order. Returns the bytes written (0 when
 * full), or -1 when the shared counters are corrupt. */
ssize_t hvd__ring_writev(hvd_ring_t *r, const struct iovec *iov, int cnt);

/* Consumer: copy up to len bytes out. Returns the bytes read (0 when empty), or -1 when the
 * shared counters are corrupt. */
ssize_t hvd__ring_read(hvd_ring_t *r, void *dst, size_t len);

/* Consumer: bytes waiting (0 also when corrupt: the next read reports it). */
size_t hvd__ring_readable(const hvd_ring_t *r);

/* About to sleep: ask to be woken, then look again. 1 when there is something to do already
 * (data to read; room to write), so do not sleep. */
int hvd__ring_reader_sleep(hvd_ring_t *r);
int hvd__ring_writer_sleep(hvd_ring_t *r);

/* After writing (reading): 1 when the other side asked to be woken; the request is taken,
 * the caller rings its doorbell. */
int hvd__ring_take_reader(hvd_ring_t *r);
int hvd__ring_take_writer(hvd_ring_t *r);

#endif
