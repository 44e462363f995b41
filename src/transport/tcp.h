/* The TCP transport: one connection per pair of ranks that talk, made on first use (the
 * lower rank connects, the higher accepts; both authenticate with the job secret, see
 * wire/frame.h; a peer on the same host over a unix socket, with the frames in shared
 * memory, see shm_ring.h), non-blocking sockets progressed by the calling thread, which busy-polls
 * for busy_poll_us before it sleeps in epoll_wait, and an idle deadline on every wait. */
#ifndef HVD_TRANSPORT_TCP_H
#define HVD_TRANSPORT_TCP_H

#include "crypto/secret.h"
#include "transport/transport.h"

typedef struct {
    char host[64]; /* the peer's host name, for messages */
    char addr[16]; /* dotted IPv4 of its data-plane listener */
    int port;
} hvd_tcp_peer_addr_t;

typedef struct {
    int rank, size;
    const hvd_tcp_peer_addr_t *peers; /* size entries, copied */
    int listen_fd;                    /* this rank's listener; the transport owns it */
    const hvd_secret_t *secret;       /* copied */
    uint32_t generation;              /* hvd_init generation: connections never cross it */
    int timeout_ms;                   /* idle deadline of every wait */
    int busy_poll_us;                 /* 0: never busy-poll */
    int yield_when_idle;              /* sched_yield while busy-polling (more ranks than cores) */
    const char *congestion;           /* TCP congestion control, or NULL/"default"; copied */
    /* Same-host peers: local[r] marks the ranks of this host, reached through shared-memory
     * rings over a unix socket: unix_listen_fd is this rank's listener there (named by
     * hvd__tcp_unix_name; -1: none; the transport owns it), keyed_unix_names says which way
     * every rank of the job named its listener (1: by secret, generation and rank; 0: by its
     * TCP address). A peer that cannot be reached so is reached over TCP. local NULL: no
     * same-host path at all, and unix_listen_fd is ignored. */
    const unsigned char *local;
    int unix_listen_fd;
    int keyed_unix_names;
    /* Peers whose port is 0 are not known yet (a planned check-in, core/check_in.h): before
     * this rank first connects to one, resolve(resolve_arg, r, addrs) fills addrs[r] (it may
     * fill others too). NULL: every peer is known. Called from the thread of the exchange. */
    hvd_status_t (*resolve)(void *arg, int rank, hvd_tcp_peer_addr_t *addrs);
    void *resolve_arg;
    /* A wait that saw nothing move for timeout_ms asks, before it fails, whether each peer it
     * waits for still runs (progressing(progress_arg, r): 1 when a process of this machine
     * that ran since the last question or waits for a core, core/peer_watch.h); if one does,
     * the wait goes on for another timeout. NULL: it fails. */
    int (*progressing)(void *arg, int rank);
    void *progress_arg;
} hvd_tcp_config_t;

/* The abstract unix socket name of a rank's same-host listener. With secret (the job's,
 * known to every rank before it checks in, as under horovodrun): keyed by the secret, the
 * generation and the rank, so that a same-host peer computes it without asking the launcher's
 * store for an address (a thousand ranks on one host each asking for twenty starved the
 * launcher) and no process without the secret can know it before the rank binds it. Without
 * (the secret comes with the check-in: PMIx, hvd_init_store): named after its TCP listener
 * addr:port, which its peers learn at check-in, unique on its host while that listener lives.
 * Returns its length (no terminator needed), 0 on failure. */
#define HVD_TCP_UNIX_NAME_MAX 48
size_t hvd__tcp_unix_name(const hvd_secret_t *secret, uint32_t generation, int rank,
                          const char *addr, int port, char out[HVD_TCP_UNIX_NAME_MAX]);

/* Set up the host arena (shm_arena.h) among this host's ranks (members, n of them: the local
 * communicator's, every one of which calls this at the same point): each connects to the
 * arena's creator, the host's highest rank, and the transport offers the arena (ops->arena)
 * only when every member mapped it. Without shared memory anywhere among them it still
 * takes part (answering no). Returns a transport error (the exchange's) or HVD_OK. */
/* Data bytes of each shared-memory ring between two of a host's n ranks: the same on all of
 * them (they agree on the memory's size), a power of two, smaller on hosts with many ranks so
 * that one rank's rings to all the others stay within a budget. */
size_t hvd__tcp_ring_cap(int n);

hvd_status_t hvd__tcp_arena_join(hvd_transport_t *t, const int *members, int n);

/* Create the transport. On failure listen_fd and unix_listen_fd are closed. */
hvd_status_t hvd__tcp_create(const hvd_tcp_config_t *cfg, hvd_transport_t **t_p);

#endif
