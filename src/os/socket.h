/* TCP sockets with deadlines. Every call takes an absolute deadline (clock.h) and fails with
 * HVD_ERR_TIMEOUT naming the peer when it passes, so no socket wait in hvd is unbounded. */
#ifndef HVD_OS_SOCKET_H
#define HVD_OS_SOCKET_H

#include <hvd/types.h>

#include <stddef.h>
#include <sys/types.h>
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

/* Make this thread's socket waits (connect, send, receive, hvd__socket_pause) also end, with
 * HVD_ERR_SHUT_DOWN, as soon as fd polls readable: how a helper thread blocked in a request
 * is stopped at once (the elastic agent at process exit). -1 (the default) removes it. */
void hvd__socket_set_cancel_fd(int fd);

/* Sleep ms milliseconds, or less when this thread's cancel descriptor turns readable: then
 * HVD_ERR_SHUT_DOWN, else HVD_OK. */
hvd_status_t hvd__socket_pause(int64_t ms);

/* Listen on addr (dotted IPv4; "" or NULL: every address) on an ephemeral port: a
 * non-blocking, close-on-exec socket. *port_p is the port the kernel chose. */
hvd_status_t hvd__socket_listen(const char *addr, int backlog, int *fd_p, int *port_p);

/* Start a non-blocking connect to addr:port (dotted IPv4). HVD_OK with the connection in
 * progress or made; HVD_ERR_PEER_LOST when refused at once. */
hvd_status_t hvd__socket_connect_start(const char *addr, int port, int *fd_p);

/* Options of a data-plane connection: TCP_NODELAY (no Nagle delay on small frames), TCP
 * keepalive probing after 10 s idle so a vanished host is noticed, and 4 MiB kernel
 * buffers so a ring step streams without waiting for the reader. */
void hvd__socket_tune_data(int fd);

/* Use TCP congestion control algorithm name on fd ("default" or empty: leave the system's).
 * Returns 0, or -1 when the kernel refuses it (not available, or not allowed for this
 * user: net.ipv4.tcp_allowed_congestion_control); the connection then keeps the default. */
int hvd__socket_set_congestion(int fd, const char *name);

/* The local IPv4 address this host would use to reach host:port (a name or an address),
 * found by connecting a UDP socket, which sends nothing. Into out[16]. */
hvd_status_t hvd__socket_route_addr(const char *host, int port, char *out);

/* The local address of a connected socket, dotted IPv4, into out[16]. -1 on failure. */
int hvd__socket_local_addr(int fd, char *out);
/* Unix-domain stream sockets in the abstract namespace (Linux): the name is bytes, not a
 * path, so nothing is left on disk after a crash, and it is visible only inside this
 * network namespace (one host of hvd's). name: at most 100 bytes, no terminator needed.
 * Non-blocking, close-on-exec. HVD_ERR_IO when the name is taken. */
hvd_status_t hvd__socket_unix_listen(const char *name, size_t len, int backlog, int *fd_p);
/* Start a non-blocking connect to an abstract name. HVD_ERR_PEER_LOST when nobody listens
 * there (yet): the caller retries until its deadline. */
hvd_status_t hvd__socket_unix_connect(const char *name, size_t len, int *fd_p);
/* The process at the other end of a unix socket, as this process's pid namespace numbers it
 * (SO_PEERCRED: the connector's at connect time), or 0 when unknown or not visible here. */
long hvd__socket_peer_pid(int fd);
/* The most descriptors one message carries. */
#define HVD_SOCKET_MAX_FDS 2
/* sendmsg of len bytes carrying descriptors fds[0..nfds) (SCM_RIGHTS, nfds at most
 * HVD_SOCKET_MAX_FDS), non-blocking. Returns the bytes sent (the descriptors travel with the
 * first), or -1 with errno. */
ssize_t hvd__socket_send_with_fds(int fd, const void *buf, size_t len, const int *fds, int nfds);
/* recv of up to len bytes, non-blocking; descriptors that came with them fill the empty (-1)
 * entries of got[0..max) in order (close-on-exec); any beyond are closed. Returns the bytes
 * received, 0 at end of stream, or -1 with errno. */
ssize_t hvd__socket_recv_with_fds(int fd, void *buf, size_t len, int *got, int max);

#endif
