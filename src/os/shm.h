/* Anonymous shared memory for peers on one host: a memfd (no name in /dev/shm or on disk,
 * gone when the last process holding it exits, however it exits), passed to the peer over
 * an authenticated unix socket (socket.h, SCM_RIGHTS) and mapped by both. */
#ifndef HVD_OS_SHM_H
#define HVD_OS_SHM_H

#include <hvd/types.h>

#include <stddef.h>

/* A new memfd of size bytes (zero-filled), close-on-exec and sealed against shrinking, so
 * that a peer cannot truncate it under our mapping (SIGBUS). what names it in errors. */
hvd_status_t hvd__shm_create(size_t size, const char *what, int *fd_p);

/* Map fd shared, read-write. HVD_ERR_PROTOCOL when it is not a sealed memfd of exactly size
 * bytes (a peer handing over something else). */
hvd_status_t hvd__shm_map(int fd, size_t size, void **addr_p);

void hvd__shm_unmap(void *addr, size_t size);

#endif
