/* The shared-memory byte ring and its memfd: bytes come out in order across wrap-arounds
 * and partial writes; a full ring takes nothing, an empty one gives nothing; corrupt shared
 * counters fail instead of reading or writing outside the ring; the sleep flags follow the
 * no-lost-wake-up protocol; a memfd must be sealed and of the expected size to be mapped;
 * and two processes see each other's bytes through a passed descriptor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "os/shm.h"
#include "os/socket.h"
#include "transport/shm_ring.h"
#include "transport/tcp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CAP 64

static void test_order_across_wraps_and_partial_writes(void **state) {
    (void)state;
    uint8_t *mem = calloc(1, hvd__ring_bytes(CAP));
    hvd_ring_t w, r;
    hvd__ring_attach(&w, mem, CAP);
    hvd__ring_attach(&r, mem, CAP);
    uint8_t src[1000], dst[1000];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    size_t wrote = 0, read = 0;
    int step = 0;
    while (read < sizeof src) {
        /* two regions per write, of odd sizes, so that writes straddle the wrap */
        size_t a = (size_t)(step % 13) + 1, b = (size_t)(step % 5);
        if (wrote + a > sizeof src)
            a = sizeof src - wrote;
        if (wrote + a + b > sizeof src)
            b = sizeof src - wrote - a;
        struct iovec iov[2] = {{src + wrote, a}, {src + wrote + a, b}};
        ssize_t n = hvd__ring_writev(&w, iov, 2);
        assert_true(n >= 0 && (size_t)n <= a + b);
        wrote += (size_t)n;
        size_t want = (size_t)(step % 11) + 1;
        if (read + want > sizeof src)
            want = sizeof src - read;
        ssize_t m = hvd__ring_read(&r, dst + read, want);
        assert_true(m >= 0 && (size_t)m <= want);
        read += (size_t)m;
        assert_true(wrote - read <= CAP);
        assert_int_equal(hvd__ring_readable(&r), wrote - read);
        step++;
    }
    assert_memory_equal(src, dst, sizeof src);
    free(mem);
}

static void test_full_and_empty(void **state) {
    (void)state;
    uint8_t *mem = calloc(1, hvd__ring_bytes(CAP));
    hvd_ring_t q;
    hvd__ring_attach(&q, mem, CAP);
    uint8_t buf[CAP + 10] = {0}, out[CAP + 10];
    assert_int_equal(hvd__ring_read(&q, out, sizeof out), 0);
    struct iovec iov = {buf, sizeof buf};
    assert_int_equal(hvd__ring_writev(&q, &iov, 1), CAP); /* only what fits */
    assert_int_equal(hvd__ring_writev(&q, &iov, 1), 0);
    assert_int_equal(hvd__ring_read(&q, out, sizeof out), CAP);
    free(mem);
}

static void test_corrupt_counters_fail(void **state) {
    (void)state;
    uint8_t *mem = calloc(1, hvd__ring_bytes(CAP));
    hvd_ring_t q;
    hvd__ring_attach(&q, mem, CAP);
    /* a peer claims to have written more than the ring holds: head is the first word */
    uint64_t bogus = 10 * CAP;
    memcpy(mem, &bogus, sizeof bogus);
    uint8_t out[CAP];
    assert_int_equal(hvd__ring_read(&q, out, sizeof out), -1);
    assert_int_equal(hvd__ring_readable(&q), 0);
    struct iovec iov = {out, 1};
    assert_int_equal(hvd__ring_writev(&q, &iov, 1), -1);
    free(mem);
}

static void test_sleep_flags(void **state) {
    (void)state;
    uint8_t *mem = calloc(1, hvd__ring_bytes(CAP));
    hvd_ring_t q;
    hvd__ring_attach(&q, mem, CAP);
    uint8_t b[CAP] = {0};
    /* nothing to read: the reader may sleep, and the next write must wake it once */
    assert_int_equal(hvd__ring_take_reader(&q), 0);
    assert_int_equal(hvd__ring_reader_sleep(&q), 0);
    struct iovec one = {b, 1};
    assert_int_equal(hvd__ring_writev(&q, &one, 1), 1);
    assert_int_equal(hvd__ring_take_reader(&q), 1);
    assert_int_equal(hvd__ring_take_reader(&q), 0);
    /* data waiting: the reader is told not to sleep */
    assert_int_equal(hvd__ring_reader_sleep(&q), 1);
    /* full: the writer may sleep; a read makes room and must wake it once */
    struct iovec rest = {b, CAP - 1};
    assert_int_equal(hvd__ring_writev(&q, &rest, 1), CAP - 1);
    assert_int_equal(hvd__ring_writer_sleep(&q), 0);
    assert_int_equal(hvd__ring_read(&q, b, 5), 5);
    assert_int_equal(hvd__ring_take_writer(&q), 1);
    assert_int_equal(hvd__ring_take_writer(&q), 0);
    assert_int_equal(hvd__ring_writer_sleep(&q), 1); /* room now */
    free(mem);
}

static void test_memfd_checks(void **state) {
    (void)state;
    int fd;
    assert_int_equal(hvd__shm_create(4096, "test", &fd), HVD_OK);
    void *a;
    assert_int_equal(hvd__shm_map(fd, 8192, &a), HVD_ERR_PROTOCOL); /* wrong size */
    assert_int_equal(hvd__shm_map(fd, 4096, &a), HVD_OK);
    assert_int_equal(ftruncate(fd, 0), -1); /* sealed: nobody can shrink it under us */
    hvd__shm_unmap(a, 4096);
    close(fd);
    /* an unsealed file is refused */
    char path[] = "/tmp/hvd-shm-test-XXXXXX";
    int plain = mkstemp(path);
    assert_true(plain >= 0);
    unlink(path);
    assert_int_equal(ftruncate(plain, 4096), 0);
    assert_int_equal(hvd__shm_map(plain, 4096, &a), HVD_ERR_PROTOCOL);
    close(plain);
}

/* A child writes through the ring in a memfd it received over a socket pair. */
static void test_across_processes(void **state) {
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    size_t bytes = hvd__ring_bytes(4096);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        int fd = -1;
        char c;
        for (int i = 0; i < 1000 && fd < 0; i++) {
            ssize_t n = hvd__socket_recv_with_fds(sv[1], &c, 1, &fd, 1);
            if (n < 0 && errno == EAGAIN)
                usleep(1000);
        }
        void *mem;
        if (fd < 0 || hvd__shm_map(fd, bytes, &mem) != HVD_OK)
            _exit(2);
        hvd_ring_t q;
        hvd__ring_attach(&q, mem, 4096);
        char msg[] = "hello from the child";
        struct iovec iov = {msg, sizeof msg};
        _exit(hvd__ring_writev(&q, &iov, 1) == (ssize_t)sizeof msg ? 0 : 3);
    }
    close(sv[1]);
    int fd;
    assert_int_equal(hvd__shm_create(bytes, "test", &fd), HVD_OK);
    void *mem;
    assert_int_equal(hvd__shm_map(fd, bytes, &mem), HVD_OK);
    assert_int_equal(hvd__socket_send_with_fds(sv[0], "x", 1, &fd, 1), 1);
    close(fd);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    hvd_ring_t q;
    hvd__ring_attach(&q, mem, 4096);
    char got[64] = {0};
    assert_int_equal(hvd__ring_read(&q, got, sizeof got), 21);
    assert_string_equal(got, "hello from the child");
    hvd__shm_unmap(mem, bytes);
    close(sv[0]);
}

/* The pairs' ring size: 1 MiB on small hosts; on big ones what one rank's rings to every
 * other rank of its host take stays within 32 MiB, down to 64 KiB each (1,024 ranks of one
 * host once took 2 MiB per connected pair, 20 GiB in all); always a power of two. */
static void test_ring_cap_shrinks_with_the_host(void **state) {
    (void)state;
    assert_int_equal(hvd__tcp_ring_cap(1), 1 << 20);
    assert_int_equal(hvd__tcp_ring_cap(2), 1 << 20);
    assert_int_equal(hvd__tcp_ring_cap(16), 1 << 20);
    assert_int_equal(hvd__tcp_ring_cap(64), 256 << 10);
    assert_int_equal(hvd__tcp_ring_cap(1024), 64 << 10);
    for (int n = 1; n <= 4096; n = n * 3 + 1) {
        size_t cap = hvd__tcp_ring_cap(n);
        assert_true(cap >= (64 << 10) && (cap & (cap - 1)) == 0);
        assert_true(cap == (64 << 10) || (size_t)(n - 1) * 2 * cap <= (32u << 20));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_across_wraps_and_partial_writes),
        cmocka_unit_test(test_full_and_empty),
        cmocka_unit_test(test_corrupt_counters_fail),
        cmocka_unit_test(test_sleep_flags),
        cmocka_unit_test(test_memfd_checks),
        cmocka_unit_test(test_across_processes),
        cmocka_unit_test(test_ring_cap_shrinks_with_the_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
