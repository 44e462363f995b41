/* The check-in: at hvd_init every rank of the generation (or elastic round) announces where
 * its data plane listens, waits until every rank has, and learns each rank's place (host,
 * local and cross rank), with the launcher's abort key and a timeout counted from the latest
 * arrival ending the wait early (check_in.c says how).
 *
 * Two ways through the rendezvous store:
 *  - planned (a static horovodrun launch, which publishes its slot plan, rendezvous/rank_plan.h,
 *    of more than HVD_CHECK_IN_ALL_MAX ranks, 256 by default: smaller jobs read every record,
 *    which costs them little and leaves them needing nothing from horovodrun after hvd_init):
 *    a rank reads the plan (O(hosts) bytes), waits for the count of check-ins (a few bytes),
 *    and counts its own machine's. Every rank's address, this host's too, is read from the
 *    store when this rank first connects to it (hvd__check_in_resolve), so a 16,384-rank job,
 *    or 2,048 ranks on one host, moves O(ranks) bytes in all instead of a record per rank per
 *    rank.
 *  - every record (elastic rounds, mpirun's ranks, a plan that does not match the rank's
 *    environment): every rank reads every rank's record in one held request.
 * A plain Open MPI mpirun's ranks check in through PMIx instead (core/pmix_exchange.h). */
#ifndef HVD_CORE_CHECK_IN_H
#define HVD_CORE_CHECK_IN_H

#include <hvd/types.h>

#include "transport/tcp.h"

struct hvd_context;

/* What a rank publishes when it checks in: where its data-plane listener is (port 0: not
 * known yet, see hvd__check_in_resolve), and its place on its host. */
typedef struct {
    hvd_tcp_peer_addr_t addr;
    int local_rank, cross_rank;
    /* the machine it runs on (the kernel's boot id): ranks under different host names
     * (network namespaces, 127.0.0.x) may still share one machine's cores */
    char machine[40];
    long pid; /* its process id, for messages (0: unknown, as after a planned check-in) */
    unsigned long pid_ns; /* its pid namespace (0: unknown): with machine, says whether pid
                           * names the same process here (core/peer_watch.h) */
} hvd_rank_info_t;

/* The context's part for resolving addresses after a planned check-in. */
typedef struct {
    char scope[160];      /* the check-in scope; "" after a check-in with every record */
    char machine[40];     /* this rank's machine (hvd_rank_info_t.machine) */
    unsigned long pid_ns; /* this rank's pid namespace (hvd_rank_info_t.pid_ns) */
    int lookups;          /* single-record reads so far */
    int scanned;          /* the whole scope was read once (after LOOKUPS_BEFORE_SCOPE lookups) */
} hvd_check_in_state_t;

/* Check in with this rank's listener addr:port and fill infos[size] (from the plan, or every
 * record) and *on_machine_p (ranks on this rank's machine, whatever their host names; after a
 * planned check-in, this host's alone when they outnumber the cores already). After
 * a planned check-in no rank has an address yet; *lazy_p is then 1 and the
 * transport resolves the others with hvd__check_in_resolve. Errors name this rank and what it
 * waited for. */
hvd_status_t hvd__check_in(struct hvd_context *c, const char *addr, int port,
                           hvd_rank_info_t *infos, int *on_machine_p, int *lazy_p);

/* The transport's resolver (hvd_tcp_config_t.resolve; arg: the context): fill addrs[rank]
 * from its check-in record in the store. After a few single reads (a rank that connects to
 * many peers, such as the coordinator) it reads the whole scope once and fills every address
 * still unknown. */
hvd_status_t hvd__check_in_resolve(void *arg, int rank, hvd_tcp_peer_addr_t *addrs);

/* Rank's check-in record after a planned check-in (one read of the store), into *info. */
hvd_status_t hvd__check_in_record(struct hvd_context *c, int rank, hvd_rank_info_t *info);

#endif
