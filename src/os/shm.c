/* memfd shared memory (shm.h). Regions are preallocated (fallocate) and mapped with MAP_POPULATE so
 * the first bytes through a ring do not fault page by page; the seals keep a peer from resizing a
 * region under a mapping, and map checks them before trusting a handed-over descriptor. */
#include "os/shm.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

hvd_status_t hvd__shm_create(size_t size, const char *what, int *fd_p) {
    int fd = memfd_create(what, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return hvd__error_set(HVD_ERR_IO, "memfd_create for %s: %s", what, strerror(errno));
    /* fallocate: the pages exist from the start, so that the first pass of bytes through a
     * ring does not take a page fault every 4 KiB (measured: a 4 KiB allreduce at np 2 took
     * 35 us until its ring had wrapped once, 2.4 us after). */
    if (ftruncate(fd, (off_t)size) != 0 || fallocate(fd, 0, 0, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(fd);
        return hvd__error_set(HVD_ERR_IO, "cannot size the shared memory of %s (%zu bytes): %s",
                              what, size, strerror(e));
    }
    *fd_p = fd;
    return HVD_OK;
}

hvd_status_t hvd__shm_map(int fd, size_t size, void **addr_p) {
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != size || seals < 0 || !(seals & F_SEAL_SHRINK))
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "the shared memory a peer handed over is not a sealed region of "
                              "%zu bytes",
                              size);
    /* MAP_POPULATE: this process's page tables too, for the same reason */
    void *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (a == MAP_FAILED)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "cannot map %zu bytes of shared memory: %s", size,
                              strerror(errno));
    *addr_p = a;
    return HVD_OK;
}

void hvd__shm_unmap(void *addr, size_t size) {
    if (addr)
        munmap(addr, size);
}
