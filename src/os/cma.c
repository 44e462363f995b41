/* process_vm_readv in a loop (cma.h): a partial read goes on from where it stopped, and a read of
 * nothing means an unreadable page, reported as EFAULT. */
#include "os/cma.h"

#include <errno.h>
#include <sys/uio.h>

int hvd__cma_read(pid_t pid, uint64_t addr, void *dst, size_t len) {
    size_t done = 0;
    while (done < len) {
        struct iovec local = {.iov_base = (char *)dst + done, .iov_len = len - done};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)(addr + done), .iov_len = len - done};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EFAULT; /* a partial read stops at an unreadable page */
        done += (size_t)n;
    }
    return 0;
}
