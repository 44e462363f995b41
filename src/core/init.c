/* hvd_init / hvd_shutdown and the topology queries. */
#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "core/check_in.h"
#include "os/hostinfo.h"
#include "core/context.h"
#include "core/process_set.h"
#include "core/elastic_agent.h"
#include "core/elastic_rendezvous.h"
#include "core/engine.h"
#include "core/mpi_env.h"
#include "core/pmix_exchange.h"
#include "os/cma.h"
#include "os/netif.h"
#include "os/socket.h"
#include "rendezvous/elastic_msg.h"
#include "rendezvous/kv_protocol.h"
#include "collectives/coll.h"
#include "transport/tcp.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static hvd_config_t config; /* options of the current hvd_init_ex call */
/* "Open MPI", "MPICH" or "Slurm" when the rank came from such a launcher's environment (the cross
 * rank is then worked out at check-in), else NULL. */
static const char *mpi_launcher;

static const char *getenv_lookup(const char *name, void *arg) {
    (void)arg;
    return getenv(name);
}

/* Under an MPI launcher only local ranks are known up front: every rank's cross rank follows
 * from all of them. */
static hvd_status_t cross_from_check_in(hvd_context_t *c, hvd_rank_info_t *infos) {
    hvd_params_t *p = &c->params;
    int *local = calloc((size_t)p->size, sizeof *local);
    int *cross = calloc((size_t)p->size, sizeof *cross);
    if (!local || !cross) {
        free(local);
        free(cross);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    for (int r = 0; r < p->size; r++)
        local[r] = infos[r].local_rank;
    hvd__mpi_env_cross(local, p->size, p->rank, cross, &p->cross_size);
    for (int r = 0; r < p->size; r++)
        infos[r].cross_rank = cross[r];
    p->cross_rank = cross[p->rank];
    free(local);
    free(cross);
    return HVD_OK;
}

/* A job formed through the program's store knows only its rank and size up front: every
 * rank's local rank (its place among the ranks of its host, in global rank order), the local
 * size and the cross ranks follow from the host names of the check-in. */
static hvd_status_t topology_from_hosts(hvd_context_t *c, hvd_rank_info_t *infos) {
    hvd_params_t *p = &c->params;
    int *local = calloc((size_t)p->size, sizeof *local);
    if (!local)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    int local_size = 0;
    for (int r = 0; r < p->size; r++) {
        for (int q = 0; q < r; q++)
            local[r] += strcmp(infos[q].addr.host, infos[r].addr.host) == 0;
        infos[r].local_rank = local[r];
        local_size += strcmp(infos[r].addr.host, infos[p->rank].addr.host) == 0;
    }
    p->local_rank = local[p->rank];
    p->local_size = local_size;
    free(local);
    return cross_from_check_in(c, infos);
}

static hvd_status_t check_topology(const hvd_params_t *p) {
    if (p->rank >= p->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "HOROVOD_RANK=%d is not below HOROVOD_SIZE=%d",
                              p->rank, p->size);
    if (p->local_rank >= p->local_size || p->local_size > p->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "HOROVOD_LOCAL_RANK=%d / HOROVOD_LOCAL_SIZE=%d are inconsistent "
                              "with HOROVOD_SIZE=%d",
                              p->local_rank, p->local_size, p->size);
    if (p->cross_rank >= p->cross_size || p->cross_size > p->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "HOROVOD_CROSS_RANK=%d / HOROVOD_CROSS_SIZE=%d are inconsistent "
                              "with HOROVOD_SIZE=%d",
                              p->cross_rank, p->cross_size, p->size);
    return HVD_OK;
}

/* The address the data plane listens on: the configured interface's, else the one this
 * host uses to reach the rendezvous server (which the other hosts reach it by too). */
static hvd_status_t listen_addr(const hvd_params_t *p, char *out) {
    const char *iface = config.network_interface ? config.network_interface : p->gloo_iface;
    if (iface && *iface) {
        hvd_netif_t *list;
        size_t count;
        hvd_status_t st = hvd__netif_list(&list, &count);
        if (st != HVD_OK)
            return st;
        /* a network (horovodrun --network-interface 10.0.0.0/16): this host's address in it,
         * whatever its interface is called here */
        const hvd_netif_t *i = strchr(iface, '/') ? hvd__netif_in_network(iface, list, count)
                                                  : hvd__netif_by_name(iface, list, count);
        if (i)
            snprintf(out, 16, "%s", i->addr);
        free(list);
        if (!i)
            return hvd__error_set(
                HVD_ERR_INVALID_ARG, "HOROVOD_GLOO_IFACE=%s: no %s with an IPv4 address on host %s",
                iface, strchr(iface, '/') ? "interface in that network" : "such interface",
                p->hostname);
        return HVD_OK;
    }
    if (p->rendezvous_addr && *p->rendezvous_addr)
        return hvd__socket_route_addr(p->rendezvous_addr, p->rendezvous_port, out);
    /* (the port only names a UDP destination nothing is sent to) */
    if (hvd__ctx.ext_store && hvd__ctx.ext_store->route_addr && *hvd__ctx.ext_store->route_addr)
        return hvd__socket_route_addr(hvd__ctx.ext_store->route_addr, 9, out);
    /* no store to route towards (a plain mpirun): the first address that is not loopback */
    hvd_netif_t *list;
    size_t count;
    hvd_status_t st = hvd__netif_list(&list, &count);
    if (st != HVD_OK)
        return st;
    snprintf(out, 16, "127.0.0.1");
    for (size_t i = 0; i < count; i++)
        if (strncmp(list[i].addr, "127.", 4) != 0) {
            snprintf(out, 16, "%s", list[i].addr);
            break;
        }
    free(list);
    return HVD_OK;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Horovod's is_homogeneous: every host runs the same number of ranks (hosts told apart as
 * the local groups are). Sorting the names makes this O(p log p) for big jobs. */
static hvd_status_t find_homogeneous(const hvd_rank_info_t *infos, int size, int *homogeneous_p) {
    const char **names = malloc((size_t)size * sizeof *names);
    if (!names)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    for (int r = 0; r < size; r++)
        names[r] = infos[r].addr.host;
    qsort(names, (size_t)size, sizeof *names, cmp_str_ptr);
    int homogeneous = 1, first_run = -1, run = 1;
    for (int r = 1; r <= size && homogeneous; r++) {
        if (r < size && strcmp(names[r], names[r - 1]) == 0) {
            run++;
            continue;
        }
        if (first_run < 0)
            first_run = run;
        homogeneous = run == first_run;
        run = 1;
    }
    free(names);
    *homogeneous_p = homogeneous;
    return HVD_OK;
}

/* Build the local (same host) and cross (same local rank) groups from the check-in data,
 * ordered by local and cross rank, and check them against what the launcher said. */
static hvd_status_t make_groups(hvd_context_t *c, const hvd_rank_info_t *infos) {
    const hvd_params_t *p = &c->params;
    int *loc = calloc((size_t)p->size, sizeof *loc), *crs = calloc((size_t)p->size, sizeof *crs);
    hvd_status_t st = HVD_OK;
    if (!loc || !crs) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    int nl = 0, nc = 0;
    for (int i = 0; i < p->size; i++)
        loc[i] = crs[i] = -1;
    for (int r = 0; r < p->size; r++) {
        const hvd_rank_info_t *in = &infos[r];
        if (strcmp(in->addr.host, infos[p->rank].addr.host) == 0) {
            if (in->local_rank < 0 || in->local_rank >= p->size || loc[in->local_rank] >= 0) {
                st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                    "ranks on host %s have inconsistent HOROVOD_LOCAL_RANK values "
                                    "(rank %d has %d)",
                                    in->addr.host, r, in->local_rank);
                goto out;
            }
            loc[in->local_rank] = r;
            nl++;
        }
        if (in->local_rank == p->local_rank) {
            if (in->cross_rank < 0 || in->cross_rank >= p->size || crs[in->cross_rank] >= 0) {
                st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                    "ranks with local rank %d have inconsistent "
                                    "HOROVOD_CROSS_RANK values (rank %d has %d)",
                                    p->local_rank, r, in->cross_rank);
                goto out;
            }
            crs[in->cross_rank] = r;
            nc++;
        }
    }
    if (nl != p->local_size || nc != p->cross_size) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "rank %d: the launcher said local size %d and cross size %d, but the "
                            "rendezvous shows %d ranks on host %s and %d with local rank %d",
                            p->rank, p->local_size, p->cross_size, nl, p->hostname, nc,
                            p->local_rank);
        goto out;
    }
    for (int i = 0; i < nl; i++)
        if (loc[i] < 0)
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "host %s has no rank with local rank %d",
                                p->hostname, i);
    for (int i = 0; i < nc && st == HVD_OK; i++)
        if (crs[i] < 0)
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "no rank has local rank %d and cross rank %d",
                                p->local_rank, i);
    if (st == HVD_OK)
        st = find_homogeneous(infos, p->size, &c->homogeneous);
    if (st != HVD_OK)
        goto out;
    st = hvd__group_init(&c->local, c->tp, "local", loc, nl, p->local_rank);
    if (st == HVD_OK) {
        st = hvd__group_init(&c->cross, c->tp, "cross", crs, nc, p->cross_rank);
        if (st != HVD_OK)
            hvd__group_fini(&c->local);
    }
out:
    free(loc);
    free(crs);
    return st;
}

/* A job of one: the three groups are this process alone and no transport exists. */
static hvd_status_t make_solo_groups(hvd_context_t *c) {
    int zero = 0;
    c->homogeneous = 1;
    hvd_status_t st = hvd__group_init(&c->global, NULL, "global", &zero, 1, 0);
    if (st == HVD_OK && (st = hvd__group_init(&c->local, NULL, "local", &zero, 1, 0)) != HVD_OK)
        hvd__group_fini(&c->global);
    if (st == HVD_OK && (st = hvd__group_init(&c->cross, NULL, "cross", &zero, 1, 0)) != HVD_OK) {
        hvd__group_fini(&c->global);
        hvd__group_fini(&c->local);
    }
    return st;
}

/* Sizes from which allreduce and allgather go hierarchically when HOROVOD_HIERARCHICAL_* is
 * left to hvd (auto), in KiB. Measured across network-namespace hosts on one machine
 * (tools/compare_hosts.sh; README, "Hierarchical collectives"): the hierarchical allreduce
 * is level or ahead from 256 KiB with two hosts and with three (there, an earlier sweep of
 * 5-50 calls per size put it behind at 4-16 MiB; with 100-1,000 calls it is level or
 * ahead); the hierarchical allgather is ahead only from 32 MiB. */
#define HIER_AUTO_AR_KIB 256
#define HIER_AUTO_AG_KIB 32768

/* The group rank of local rank j on host h at grid[h * L + j], from every rank's place; NULL
 * when the places do not form that grid (a host whose ranks have different cross ranks). */
static int *hier_grid(const hvd_context_t *c, const hvd_rank_info_t *infos) {
    int L = c->local.size, H = c->cross.size, n = c->params.size;
    int *grid = malloc((size_t)n * sizeof *grid);
    if (!grid || L * H != n)
        return free(grid), NULL;
    for (int i = 0; i < n; i++)
        grid[i] = -1;
    for (int r = 0; r < n; r++) {
        const hvd_rank_info_t *in = &infos[r];
        int h = in->cross_rank, j = in->local_rank;
        if (h < 0 || h >= H || j < 0 || j >= L || grid[h * L + j] >= 0)
            return free(grid), NULL;
        grid[h * L + j] = r;
    }
    for (int h = 0; h < H; h++)
        for (int j = 1; j < L; j++)
            if (strcmp(infos[grid[h * L]].addr.host, infos[grid[h * L + j]].addr.host))
                return free(grid), NULL;
    return grid;
}

/* The debug log's word on one collective's way (setting: 1, 0, or -1 for auto from kib). */
static void log_hier_choice(int rank, const char *coll, int setting, size_t kib) {
    if (setting < 0)
        HVD_LOG_D("rank %d: %s hierarchical from %zu KiB (auto)", rank, coll, kib);
    else
        HVD_LOG_D("rank %d: %s %s", rank, coll,
                  setting ? "hierarchical: in each host's shared memory, then across hosts"
                          : "flat");
}

static size_t hier_min(int setting, size_t auto_kib) {
    return setting > 0 ? 0 : setting < 0 ? auto_kib * 1024 : SIZE_MAX;
}

/* A job of several hosts with the same number (at least two) of ranks each, every host with
 * its arena, which the ranks agree on here (one small allreduce): the engine's cycle messages
 * go hierarchically (group.c, hier_allgather_var) whatever the settings, and with
 * HOROVOD_HIERARCHICAL_ALLREDUCE/_ALLGATHER (1, or auto) the global group's allreduce and
 * allgather too (shm_coll.h), always or from the auto sizes on. */
static hvd_status_t plan_hierarchical(hvd_context_t *c, const hvd_rank_info_t *infos) {
    const hvd_params_t *p = &c->params;
    int ar = p->hierarchical_allreduce, ag = p->hierarchical_allgather;
    if (!c->homogeneous || c->local.size < 2 || c->cross.size < 2)
        return HVD_OK;
    const int *idx;
    int *grid = hier_grid(c, infos);
    /* every host has its arena; every rank sees the ranks form a grid of hosts x local ranks */
    int32_t mine[2] = {hvd__group_arena(&c->local, &idx) != NULL, grid != NULL}, all[2] = {0, 0};
    hvd_status_t st = hvd__coll_allreduce(&c->global, mine, all, 2, HVD_INT32, HVD_MIN, 1.0, 1.0);
    if (st != HVD_OK || !all[0]) {
        free(grid);
        if (st == HVD_OK)
            HVD_LOG_D("rank %d: allreduce and allgather flat: not every host has a shared-memory "
                      "arena",
                      p->rank);
        return st;
    }
    if (!all[1]) {
        free(grid);
        grid = NULL;
        ag = 0;
        HVD_LOG_D("rank %d: allgather flat: the ranks' cross ranks do not follow their hosts",
                  p->rank);
    }
    hvd_group_t *g = &c->global;
    g->hier_local = &c->local;
    g->hier_cross = &c->cross;
    g->hier_grid = grid;
    g->hier_min_bytes = hier_min(ar, HIER_AUTO_AR_KIB);
    g->hier_ag_min_bytes = hier_min(ag, HIER_AUTO_AG_KIB);
    log_hier_choice(p->rank, "allreduce", ar, HIER_AUTO_AR_KIB);
    log_hier_choice(p->rank, "allgather", ag, HIER_AUTO_AG_KIB);
    return HVD_OK;
}

/* HVD_CMA: whether every rank of this host can read every other's memory with
 * process_vm_readv (same user, no policy against it), tried on a random value each rank
 * publishes with its address; if all can, the host's groups with an arena (the local one,
 * and the global one on a one-host job) get every member's pid (group.h: cma_pids). */
static hvd_status_t plan_cma(hvd_context_t *c) {
    static uint64_t canary;
    const int *idx;
    hvd_group_t *lg = &c->local;
    int L = lg->size;
    if (!c->params.cma || L < 2 || !hvd__group_arena(lg, &idx))
        return HVD_OK;
    if (getrandom(&canary, sizeof canary, 0) != (ssize_t)sizeof canary)
        canary = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    uint64_t mine[3] = {(uint64_t)getpid(), (uint64_t)(uintptr_t)&canary, canary};
    uint64_t *all = calloc((size_t)L * 3, sizeof *all);
    if (!all)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    hvd_status_t st = hvd__coll_allgather(lg, mine, all, NULL, 3, HVD_INT64);
    int32_t ok = st == HVD_OK, every = 0;
    for (int r = 0; ok && r < L; r++) {
        uint64_t v = 0;
        ok =
            r == lg->rank || (hvd__cma_read((pid_t)all[3 * r], all[3 * r + 1], &v, sizeof v) == 0 &&
                              v == all[3 * r + 2]);
    }
    if (st == HVD_OK)
        st = hvd__coll_allreduce(lg, &ok, &every, 1, HVD_INT32, HVD_MIN, 1.0, 1.0);
    hvd_group_t *gg = hvd__group_arena(&c->global, &idx) ? &c->global : NULL;
    if (st == HVD_OK && every) {
        lg->cma_pids = calloc((size_t)L, sizeof *lg->cma_pids);
        if (gg)
            gg->cma_pids = calloc((size_t)gg->size, sizeof *gg->cma_pids);
        if (!lg->cma_pids || (gg && !gg->cma_pids))
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        for (int r = 0; st == HVD_OK && r < L; r++) {
            lg->cma_pids[r] = (long)all[3 * r];
            if (gg) /* the one-host job's global ranks are the local group's members */
                gg->cma_pids[lg->members[r]] = (long)all[3 * r];
        }
    }
    free(all);
    if (st == HVD_OK)
        HVD_LOG_D("rank %d: large blocks between this host's ranks: %s", c->params.rank,
                  every ? "read from each other's memory (process_vm_readv)"
                        : "through shared memory (process_vm_readv not allowed)");
    return st;
}

/* Listener, check-in, transport and groups of a job of more than one rank. */
/* Ranks per core beyond which an idle wait sleeps at once instead of polling first: at np 32
 * on 2 cores polling (yielding) still made 8-byte allreduces 4-5x faster than sleeping
 * (270 us against 1,250), but with 1,024 ranks a core the pollers kept the ranks with work
 * to do, and the launcher answering their check-ins, off the cores (2,048 ranks on 2 cores:
 * 63 s from launch to the end against 54). */
#define HVD_NO_POLL_RANKS_PER_CORE 64

static hvd_status_t connect_job(hvd_context_t *c) {
    const hvd_params_t *p = &c->params;
    char addr[16];
    int lfd = -1, port = 0;
    hvd_status_t st = listen_addr(p, addr);
    if (st == HVD_OK)
        st = hvd__socket_listen(addr, 128, &lfd, &port);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not open its data-plane listener", p->rank);
    /* Same-host peers reach this rank through a unix socket (tcp.h, hvd__tcp_unix_name),
     * open before anyone checks in: named by the job secret, generation and rank when the
     * secret is known already (horovodrun's, from the environment), else after its TCP
     * listener. Without it (HVD_SHM=0, or the name taken) they use TCP. */
    int ulfd = -1, keyed = c->store != NULL;
    uint32_t generation = c->elastic ? (uint32_t)c->round : c->generation;
    if (p->shm) {
        char uname[HVD_TCP_UNIX_NAME_MAX];
        size_t ulen =
            hvd__tcp_unix_name(keyed ? &c->secret : NULL, generation, p->rank, addr, port, uname);
        if (!ulen || hvd__socket_unix_listen(uname, ulen, 128, &ulfd) != HVD_OK) {
            HVD_LOG_D("rank %d: no same-host listener (%s); same-host peers use TCP", p->rank,
                      hvd_last_error());
            hvd__error_clear();
            ulfd = -1;
        }
    }
    unsigned char *local = NULL;
    hvd_rank_info_t *infos = calloc((size_t)p->size, sizeof *infos);
    hvd_tcp_peer_addr_t *addrs = calloc((size_t)p->size, sizeof *addrs);
    int *all = calloc((size_t)p->size, sizeof *all);
    local = calloc((size_t)p->size, 1);
    if (!infos || !addrs || !all || !local) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto err_close;
    }
    int on_machine = 0, lazy = 0;
    st = hvd__check_in(c, addr, port, infos, &on_machine, &lazy);
    if (st == HVD_OK && c->ext_store)
        st = topology_from_hosts(c, infos);
    else if (st == HVD_OK && mpi_launcher)
        st = cross_from_check_in(c, infos);
    if (st != HVD_OK)
        goto err_close;
    for (int r = 0; r < p->size; r++) {
        addrs[r] = infos[r].addr;
        all[r] = r;
        /* the host identity the local communicator uses */
        local[r] = strcmp(infos[r].addr.host, infos[p->rank].addr.host) == 0;
        c->pids[r] = r == p->rank ? (long)getpid() : infos[r].pid;
        if (!lazy) { /* (else peer_watch.c reads the record when it is needed) */
            int here = c->check_in.pid_ns && infos[r].pid_ns == c->check_in.pid_ns &&
                       strcmp(infos[r].machine, c->check_in.machine) == 0;
            c->watch[r] = (hvd_peer_watch_t){.pid = here ? infos[r].pid : 0, .looked = 1};
        }
        if (!(c->hosts[r] = strdup(infos[r].addr.host))) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
            goto err_close;
        }
    }
    int busy = config.busy_poll_us ? config.busy_poll_us : p->busy_poll_us;
    /* more ranks on this machine than cores, whatever host names they run under */
    int cpus = hvd__hostinfo_cpus();
    int oversubscribed = p->local_size > cpus || on_machine > cpus;
    /* Automatic: poll for a millisecond, then sleep in the kernel. With more ranks than
     * cores every idle turn yields the core, so a peer sharing it runs at once instead of
     * after a sleep and a wake-up (~30 us each here; np=4 on 2 cores: 8-byte allreduces took
     * 38-58 us when sleeping at once, 7-17 us polling one or ten milliseconds alike). Ten
     * milliseconds did not poll faster but cost every other process on the machine: the
     * eight conformance tests side by side took 47 s against 35 (yielding pollers that
     * stay runnable starve those with work to do). */
    if (busy < 0 && config.busy_poll_us == 0)
        busy = on_machine > HVD_NO_POLL_RANKS_PER_CORE * cpus ? 0 : 1000;
    hvd_tcp_config_t tc = {
        .rank = p->rank,
        .size = p->size,
        .peers = addrs,
        .listen_fd = lfd,
        .secret = &c->secret,
        /* elastic: every worker of a round, old or new, agrees on the round alone */
        .generation = generation,
        .timeout_ms =
            (config.timeout_seconds > 0 ? config.timeout_seconds : p->gloo_timeout_seconds) * 1000,
        .busy_poll_us = busy > 0 ? busy : 0,
        .yield_when_idle = oversubscribed,
        .congestion = p->tcp_congestion,
        .local = p->shm ? local : NULL,
        .unix_listen_fd = ulfd,
        .keyed_unix_names = keyed,
        .resolve = lazy ? hvd__check_in_resolve : NULL,
        .resolve_arg = c,
        .progressing = hvd__peer_watch_progressing,
        .progress_arg = c,
    };
    ulfd = -1; /* the transport's now, even when its creation fails */
    st = hvd__tcp_create(&tc, &c->tp);
    if (st != HVD_OK)
        goto out;
    st = hvd__group_init(&c->global, c->tp, "global", all, p->size, p->rank);
    if (st == HVD_OK && (st = make_groups(c, infos)) != HVD_OK)
        hvd__group_fini(&c->global);
    if (st == HVD_OK) {
        /* (a rank set otherwise fails its first allreduce with the others, naming the
         * setting: the flag is part of every allreduce's signature) */
        c->global.ordered = c->local.ordered = c->cross.ordered = p->reproducible;
        if (p->reproducible)
            HVD_LOG_D("rank %d: allreduce sums in rank order on every path (HVD_REPRODUCIBLE)",
                      p->rank);
    }
    /* Collectives among exactly this host's ranks run in its shared-memory arena. */
    if (st == HVD_OK &&
        ((st = hvd__tcp_arena_join(c->tp, c->local.members, c->local.size)) != HVD_OK ||
         (st = plan_hierarchical(c, infos)) != HVD_OK || (st = plan_cma(c)) != HVD_OK)) {
        hvd__group_fini(&c->global);
        hvd__group_fini(&c->local);
        hvd__group_fini(&c->cross);
    }
    if (st != HVD_OK) {
        c->tp->ops->destroy(c->tp);
        c->tp = NULL;
    }
    goto out;
err_close:
    close(lfd);
    if (ulfd >= 0)
        close(ulfd);
out:
    free(local);
    free(infos);
    free(addrs);
    free(all);
    return st;
}

static void free_hosts(hvd_context_t *c) {
    if (c->hosts)
        for (int r = 0; r < c->params.size; r++)
            free(c->hosts[r]);
    free(c->hosts);
    c->hosts = NULL;
    free(c->pids);
    c->pids = NULL;
    free(c->watch);
    c->watch = NULL;
}

/* The groups and transport (the store and secret are the caller's). */
static void free_groups(hvd_context_t *c) {
    hvd__psets_free(c);
    hvd__group_fini(&c->global);
    hvd__group_fini(&c->local);
    hvd__group_fini(&c->cross);
    if (c->tp)
        c->tp->ops->destroy(c->tp);
    c->tp = NULL;
}

static hvd_status_t start_engine(hvd_context_t *c) {
    c->pids[c->params.rank] = (long)getpid();
    if (!c->hosts[c->params.rank] &&
        !(c->hosts[c->params.rank] = strdup(c->params.hostname ? c->params.hostname : "?")))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    return hvd__engine_create(c, &c->engine);
}

/* The job secret and the store client, from the launcher's variables. */
static hvd_status_t open_store(hvd_context_t *c) {
    const hvd_params_t *p = &c->params;
    if (p->rendezvous_port <= 0)
        return hvd__error_set(
            HVD_ERR_INVALID_ARG,
            "HOROVOD_GLOO_RENDEZVOUS_ADDR is set but HOROVOD_GLOO_RENDEZVOUS_PORT "
            "is not a valid port");
    if (!p->secret_key)
        return hvd__error_set(HVD_ERR_AUTH, "%s is not set: workers must be started by horovodrun",
                              HVD_SECRET_ENV);
    hvd_status_t st = hvd__secret_from_hex(p->secret_key, &c->secret);
    if (st != HVD_OK)
        return st;
    st = hvd__store_client_create(p->rendezvous_addr, p->rendezvous_port, &c->secret, &c->store);
    if (st != HVD_OK)
        hvd__secret_wipe(&c->secret);
    return st;
}

/* Elastic mode, before anything depends on the topology: start the agent (first init), and
 * on a re-init take this process's place in the next round from the driver, which replaces
 * the launcher's rank variables. */
static hvd_status_t enter_elastic(hvd_context_t *c) {
    hvd_params_t *p = &c->params;
    if (!p->rendezvous_addr || !*p->rendezvous_addr)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "HOROVOD_ELASTIC=1 but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: "
                              "elastic workers are started by horovodrun with "
                              "--host-discovery-script or --min-np");
    hvd_status_t st = open_store(c);
    char slot[HVD_ELASTIC_NAME_MAX];
    if (st == HVD_OK && (st = hvd__elastic_msg_slot(p->hostname, p->local_rank, slot)) == HVD_OK)
        st = hvd__elastic_agent_start(p->rendezvous_addr, p->rendezvous_port, &c->secret, slot,
                                      p->elastic_round, p->gloo_timeout_seconds);
    if (st == HVD_OK)
        st = hvd__elastic_rdv_enter(c->store, p);
    c->round = hvd__elastic_rdv_round();
    hvd__elastic_agent_set_round(c->round);
    return st;
}

/* hvd_init_store: the rank and size are the program's, the place on the host follows at
 * check-in (topology_from_hosts), and the secret is the one given out of band or, failing
 * that, a fresh one that rank 0 publishes in the store (check_in.c). */
static hvd_status_t store_params(hvd_params_t *p) {
    const hvd_store_t *s = hvd__ctx.ext_store;
    p->rank = s->rank;
    p->size = s->size;
    p->local_rank = p->cross_rank = 0;
    p->local_size = p->cross_size = 1;
    p->elastic = 0;
    free(p->rendezvous_addr); /* the store replaces horovodrun's */
    p->rendezvous_addr = NULL;
    mpi_launcher = NULL;
    hvd_status_t st = HVD_OK;
    if (!getenv_lookup("HOROVOD_HOSTNAME", NULL))
        st = hvd__mpi_env_host_identity(p, NULL);
    hvd__ctx.ext_publish_secret = 0;
    if (st != HVD_OK)
        return st;
    if (p->secret_key)
        return hvd__secret_from_hex(p->secret_key, &hvd__ctx.secret);
    if (p->secret_file)
        return hvd__secret_read_file(p->secret_file, &hvd__ctx.secret);
    hvd__ctx.ext_publish_secret = 1;
    return hvd__secret_generate(&hvd__ctx.secret);
}

static hvd_status_t init_locked(void) {
    hvd_status_t st = hvd__params_load(&hvd__ctx.params, NULL, NULL);
    if (st != HVD_OK)
        return st;
    hvd_params_t *p = &hvd__ctx.params;
    st = hvd__ctx.ext_store ? store_params(p)
                            : hvd__mpi_env_apply(p, getenv_lookup, NULL, &mpi_launcher);
    if (st != HVD_OK) {
        hvd__secret_wipe(&hvd__ctx.secret);
        hvd__params_fini(&hvd__ctx.params);
        return st;
    }
    hvd__ctx.elastic = p->elastic;
    if (hvd__ctx.elastic && (st = enter_elastic(&hvd__ctx)) != HVD_OK)
        goto err_release;
    hvd__ctx.hosts = calloc((size_t)(p->size > 0 ? p->size : 1), sizeof *hvd__ctx.hosts);
    hvd__ctx.pids = calloc((size_t)(p->size > 0 ? p->size : 1), sizeof *hvd__ctx.pids);
    hvd__ctx.watch = calloc((size_t)(p->size > 0 ? p->size : 1), sizeof *hvd__ctx.watch);
    if (!hvd__ctx.hosts || !hvd__ctx.pids || !hvd__ctx.watch) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto err_release;
    }
    hvd__log_configure(p->log_level, p->log_hide_time, p->size > 1 ? p->rank : -1);
    st = check_topology(p);
    if (st != HVD_OK)
        goto err_release;
    /* A plain Open MPI mpirun, or srun with PMIx: the ranks meet through PMIx; rank 0 makes
     * the job secret. */
    int via_pmix = (!p->rendezvous_addr || !*p->rendezvous_addr) && p->size > 1 && mpi_launcher &&
                   (strcmp(mpi_launcher, "Open MPI") == 0 ||
                    (strcmp(mpi_launcher, "Slurm") == 0 && getenv("PMIX_RANK")));
    /* the program's store: the same path, its exchange through that store (check_in.c) */
    int via_store = hvd__ctx.ext_store && p->size > 1;
    if (!p->rendezvous_addr || !*p->rendezvous_addr) {
        if (p->size != 1 && mpi_launcher && strcmp(mpi_launcher, "Slurm") == 0 && !via_pmix) {
            const char *type = getenv("SLURM_MPI_TYPE");
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "rank %d of %d was started by srun without PMIx (--mpi=%s): "
                                "start it with `srun --mpi=pmix` (or MpiDefault=pmix in "
                                "slurm.conf), through which the ranks meet, or run horovodrun "
                                "inside the allocation",
                                p->rank, p->size, type && *type ? type : "none");
            goto err_release;
        }
        if (p->size != 1 && mpi_launcher && !via_pmix) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "rank %d of %d was started by %s's launcher but "
                                "HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: start the job with "
                                "`horovodrun --mpi`, which runs mpirun and gives every rank the "
                                "rendezvous store",
                                p->rank, p->size, mpi_launcher);
            goto err_release;
        }
        if (p->size != 1 && !via_pmix && !via_store) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "HOROVOD_SIZE=%d but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: "
                                "start the job with horovodrun",
                                p->size);
            goto err_release;
        }
        if (!via_pmix && !via_store) {
            st = make_solo_groups(&hvd__ctx);
            if (st == HVD_OK && (st = start_engine(&hvd__ctx)) != HVD_OK)
                free_groups(&hvd__ctx);
            if (st != HVD_OK)
                goto err_release;
            return HVD_OK;
        }
    }
    if (via_pmix || via_store) {
        /* rank 0's secret replaces this one in the exchange (check_in); store_params made the
         * store path's */
        if (via_pmix && (st = hvd__secret_generate(&hvd__ctx.secret)) != HVD_OK)
            goto err_release;
        if (config.timeout_seconds > 0)
            hvd__ctx.params.gloo_timeout_seconds = config.timeout_seconds;
        st = connect_job(&hvd__ctx);
        if (st == HVD_OK && (st = start_engine(&hvd__ctx)) != HVD_OK)
            free_groups(&hvd__ctx);
        if (st != HVD_OK)
            goto err_release;
        return HVD_OK;
    }
    if (!hvd__ctx.store && (st = open_store(&hvd__ctx)) != HVD_OK)
        goto err_release;
    if (config.timeout_seconds > 0)
        hvd__ctx.params.gloo_timeout_seconds = config.timeout_seconds;
    st = p->size == 1 ? make_solo_groups(&hvd__ctx) : connect_job(&hvd__ctx);
    if (st != HVD_OK)
        goto err_release;
    if ((st = start_engine(&hvd__ctx)) != HVD_OK) {
        free_groups(&hvd__ctx);
        goto err_release;
    }
    if (hvd__ctx.elastic)
        hvd__elastic_agent_attach(hvd__ctx.engine, hvd__ctx.round);
    return HVD_OK;

    /* Everything below is safe on what was not made yet (elastic mode opens the store
     * before the topology is known, the other paths after). */
err_release:
    hvd__store_client_destroy(hvd__ctx.store);
    hvd__ctx.store = NULL;
    hvd__secret_wipe(&hvd__ctx.secret);
    free_hosts(&hvd__ctx);
    hvd__params_fini(&hvd__ctx.params);
    return st;
}

void hvd_config_init(hvd_config_t *c) {
    if (c)
        memset(c, 0, sizeof *c);
}

hvd_status_t hvd_init(void) {
    return hvd_init_ex(NULL);
}

/* A program that ends (exit, or a return from main) while initialised, without
 * hvd_shutdown: tell the other ranks in one last cycle, so that their collectives fail saying
 * so instead of with a bare lost connection. Only in the process that initialised: a forked
 * child that exits has no engine thread and must not speak for its parent. If another thread
 * is initialising or shutting down right now, that thread's work stands. */
static pid_t init_pid;
static void exit_without_shutdown(void) {
    if (getpid() != init_pid || pthread_mutex_trylock(&hvd__ctx_life_lock) != 0)
        return;
    pthread_mutex_lock(&hvd__ctx_lock);
    hvd_engine_t *e = hvd__ctx.initialized ? hvd__ctx.engine : NULL;
    int rank = hvd__ctx.params.rank;
    pthread_mutex_unlock(&hvd__ctx_lock);
    if (e) {
        HVD_LOG_W("rank %d: the program is exiting without hvd_shutdown; telling the other ranks",
                  rank);
        hvd__engine_exit(e);
    }
    pthread_mutex_unlock(&hvd__ctx_life_lock);
}

static void watch_exit(void) {
    static int registered;
    init_pid = getpid();
    if (!registered && atexit(exit_without_shutdown) == 0)
        registered = 1;
}

/* hvd_init_ex, through the program's store when store is not NULL. */
static hvd_status_t init_with(const hvd_config_t *cfg, const hvd_store_t *store) {
    pthread_mutex_lock(&hvd__ctx_life_lock);
    pthread_rwlock_wrlock(&hvd__ctx_use_lock);
    pthread_mutex_lock(&hvd__ctx_lock);
    if (cfg)
        config = *cfg;
    else
        hvd_config_init(&config);
    if (config.timeout_seconds < 0) {
        pthread_mutex_unlock(&hvd__ctx_lock);
        pthread_rwlock_unlock(&hvd__ctx_use_lock);
        pthread_mutex_unlock(&hvd__ctx_life_lock);
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_init_ex: timeout_seconds %d is negative",
                              config.timeout_seconds);
    }
    hvd_status_t st;
    if (hvd__ctx.initialized) {
        st = hvd__error_set(HVD_ERR_STATE, "hvd_init: already initialised (call hvd_shutdown "
                                           "first)");
    } else {
        hvd__ctx.ext_store = store;
        st = init_locked();
        if (st == HVD_OK) {
            hvd__ctx.initialized = 1;
            watch_exit();
        } else if (hvd__ctx.elastic && st == HVD_ERR_SHUT_DOWN) /* removed or stopped: expected */
            HVD_LOG_I("hvd_init: %s", hvd_last_error());
        else if (hvd__ctx.elastic && (st == HVD_ERR_PEER_LOST || st == HVD_ERR_TIMEOUT) &&
                 !hvd__elastic_rdv_failed()) /* the round failed as it formed: recoverable */
            HVD_LOG_W("hvd_init: %s", hvd_last_error());
        else
            HVD_LOG_E("hvd_init failed: %s", hvd_last_error());
        /* A failed attempt still used a generation on the ranks that got further. */
        hvd__ctx.generation++;
    }
    config.network_interface = NULL; /* the caller's string is not kept */
    hvd__ctx.ext_store = NULL;       /* nor its store */
    pthread_mutex_unlock(&hvd__ctx_lock);
    pthread_rwlock_unlock(&hvd__ctx_use_lock);
    pthread_mutex_unlock(&hvd__ctx_life_lock);
    return st;
}

hvd_status_t hvd_init_ex(const hvd_config_t *cfg) {
    return init_with(cfg, NULL);
}

hvd_status_t hvd_init_store(const hvd_config_t *cfg, const hvd_store_t *store) {
    if (!store || !store->set || !store->get)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_init_store: %s",
                              !store ? "store is NULL" : "the store's set or get is NULL");
    if (store->size < 1 || store->rank < 0 || store->rank >= store->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "hvd_init_store: rank %d is not a rank of a job of size %d",
                              store->rank, store->size);
    return init_with(cfg, store);
}

hvd_status_t hvd_shutdown(void) {
    pthread_mutex_lock(&hvd__ctx_life_lock);
    pthread_mutex_lock(&hvd__ctx_lock);
    int initialized = hvd__ctx.initialized;
    pthread_mutex_unlock(&hvd__ctx_lock);
    if (!initialized) {
        pthread_mutex_unlock(&hvd__ctx_life_lock);
        return hvd__error_set(HVD_ERR_SHUT_DOWN, "hvd_shutdown: hvd is not initialised");
    }
    /* Stopping the engine completes every call waiting in it, so the write lock below
     * does not wait for calls that could wait for ever. */
    hvd__engine_stop(hvd__ctx.engine);
    /* From here the elastic agent no longer interrupts the engine, which can go. */
    hvd__elastic_agent_detach();
    pthread_rwlock_wrlock(&hvd__ctx_use_lock);
    pthread_mutex_lock(&hvd__ctx_lock);
    hvd__engine_destroy(hvd__ctx.engine);
    hvd__ctx.engine = NULL;
    free_groups(&hvd__ctx);
    hvd__store_client_destroy(hvd__ctx.store);
    hvd__ctx.store = NULL;
    hvd__secret_wipe(&hvd__ctx.secret);
    free_hosts(&hvd__ctx);
    hvd__params_fini(&hvd__ctx.params);
    hvd__ctx.initialized = 0;
    pthread_mutex_unlock(&hvd__ctx_lock);
    pthread_rwlock_unlock(&hvd__ctx_use_lock);
    pthread_mutex_unlock(&hvd__ctx_life_lock);
    return HVD_OK;
}
