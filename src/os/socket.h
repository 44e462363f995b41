/* TCP sockets with deadlines. Every call takes an absolute deadline (clock.h) and fails with
 * HVD_ERR_TIMEOUT naming the peer when it passes, so no socket wait in hvd is unbounded. */
#ifndef HVD_OS_SOCKET_H
#define HVD_OS_SOCKET_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* Connect to host:port (a numeric address or a name) before deadline_ms. The socket is
 * non-blocking, close-on-exec, with TCP_NODELAY. HVD_ERR_PEER_LOST when the connection is
 * refused or reset (the peer is not there), HVD_ERR_TIMEOUT, HVD_ERR_IO otherwise. */
hvd_status_t hvd__socket_connect(const char *host, int port, int64_t deadline_ms, int *fd_p);

/* Send all len bytes before deadline_ms. HVD_ERR_PEER_LOST if the peer closed. */
hvd_status_t hvd__socket_send_all(int fd, const void *buf, size_t len, int64_t deadline_ms,
                                  const char *peer);

/* Receive up to len bytes, waiting until at least one arrives or deadline_ms. *got_p = 0
 * means the peer closed the connection in order. */
hvd_status_t hvd__socket_recv_some(int fd, void *buf, size_t len, int64_t deadline_ms,
                                   const char *peer, size_t *got_p);

#endif
