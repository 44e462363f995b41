/* The shared-memory byte ring (shm_ring.h). */
#include "transport/shm_ring.h"

#include <string.h>

/* The control block: each side's counter and flag on its own cache line, so that a write
 * by one side does not keep stealing the line the other side polls. */
typedef struct {
    uint64_t head;         /* bytes ever written: producer */
    uint32_t writer_waits; /* set by the producer, taken by the consumer */
    uint8_t pad0[64 - 12];
    uint64_t tail;         /* bytes ever read: consumer */
    uint32_t reader_waits; /* set by the consumer, taken by the producer */
    uint8_t pad1[64 - 12];
} ctl_t;

_Static_assert(sizeof(ctl_t) <= HVD_RING_CTL_BYTES, "ring control block too large");

size_t hvd__ring_bytes(size_t cap) {
    return HVD_RING_CTL_BYTES + cap;
}

void hvd__ring_attach(hvd_ring_t *r, void *mem, size_t cap) {
    r->ctl = mem;
    r->data = (uint8_t *)mem + HVD_RING_CTL_BYTES;
    r->cap = cap;
}

static uint64_t load(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

ssize_t hvd__ring_writev(hvd_ring_t *r, const struct iovec *iov, int cnt) {
    ctl_t *c = r->ctl;
    uint64_t head = __atomic_load_n(&c->head, __ATOMIC_RELAXED), tail = load(&c->tail);
    if (head - tail > r->cap)
        return -1;
    size_t room = r->cap - (size_t)(head - tail), done = 0;
    for (int i = 0; i < cnt && room > 0; i++) {
        const uint8_t *src = iov[i].iov_base;
        size_t left = iov[i].iov_len < room ? iov[i].iov_len : room;
        room -= left;
        while (left > 0) {
            size_t at = (size_t)(head + done) & (r->cap - 1);
            size_t n = r->cap - at < left ? r->cap - at : left;
            memcpy(r->data + at, src, n);
            src += n;
            left -= n;
            done += n;
        }
    }
    if (done)
        __atomic_store_n(&c->head, head + done, __ATOMIC_RELEASE);
    return (ssize_t)done;
}

ssize_t hvd__ring_read(hvd_ring_t *r, void *dst, size_t len) {
    ctl_t *c = r->ctl;
    uint64_t tail = __atomic_load_n(&c->tail, __ATOMIC_RELAXED), head = load(&c->head);
    if (head - tail > r->cap)
        return -1;
    size_t avail = (size_t)(head - tail), want = len < avail ? len : avail, done = 0;
    uint8_t *out = dst;
    while (done < want) {
        size_t at = (size_t)(tail + done) & (r->cap - 1);
        size_t n = r->cap - at < want - done ? r->cap - at : want - done;
        memcpy(out + done, r->data + at, n);
        done += n;
    }
    if (done)
        __atomic_store_n(&c->tail, tail + done, __ATOMIC_RELEASE);
    return (ssize_t)done;
}

size_t hvd__ring_readable(const hvd_ring_t *r) {
    const ctl_t *c = r->ctl;
    uint64_t d = load(&c->head) - __atomic_load_n(&c->tail, __ATOMIC_RELAXED);
    return d <= r->cap ? (size_t)d : 0;
}

/* The flag is stored, then the counter loaded, both sequentially consistent; the other side
 * stores its counter, then loads the flag the same way: one of the two sees the other. */
int hvd__ring_reader_sleep(hvd_ring_t *r) {
    ctl_t *c = r->ctl;
    __atomic_store_n(&c->reader_waits, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&c->head, __ATOMIC_SEQ_CST) != c->tail;
}

int hvd__ring_writer_sleep(hvd_ring_t *r) {
    ctl_t *c = r->ctl;
    __atomic_store_n(&c->writer_waits, 1, __ATOMIC_SEQ_CST);
    return c->head - __atomic_load_n(&c->tail, __ATOMIC_SEQ_CST) < r->cap;
}

/* Take a sleep flag: 1 when it was set (and is now clear). The fence pairs with the
 * sleeper's (set flag, then look); the plain load first keeps the common case free of a
 * locked instruction. */
static int take(uint32_t *flag) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(flag, __ATOMIC_RELAXED))
        return 0;
    return __atomic_exchange_n(flag, 0, __ATOMIC_SEQ_CST) != 0;
}

int hvd__ring_take_reader(hvd_ring_t *r) {
    return take(&((ctl_t *)r->ctl)->reader_waits);
}

int hvd__ring_take_writer(hvd_ring_t *r) {
    return take(&((ctl_t *)r->ctl)->writer_waits);
}
