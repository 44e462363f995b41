/* Rank and size from an MPI launcher's variables (mpi_env.h). The launchers table is searched in
 * order, because mpirun inside Slurm also carries Slurm's variables and Slurm's PMI-2 plugin sets
 * PMI_RANK; under srun the local size is this node's entry of SLURM_STEP_TASKS_PER_NODE. */
#include "core/mpi_env.h"

#include "common/error.h"
#include "slurm/slurm_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *launcher;
    const char *marker; /* set only in this launcher's ranks */
    const char *rank, *size, *local_rank, *local_size;
} mpi_vars_t;

/* In this order: mpirun inside a Slurm allocation starts its daemons with srun, so its ranks
 * also carry the Slurm variables of a daemon's step; and Slurm's PMI-2 plugin sets PMI_RANK,
 * so MPICH's Hydra is told by MPI_LOCALRANKID (a PMI_RANK without it, and outside a Slurm
 * step, still means MPICH, to name the variable it lacks). Slurm has no local size variable:
 * it is this node's entry of SLURM_STEP_TASKS_PER_NODE. */
static const mpi_vars_t launchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH", "MPI_LOCALRANKID", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL},
    {"MPICH", "PMI_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

static hvd_status_t get_int(hvd_mpi_env_lookup_fn lookup, void *arg, const char *who,
                            const char *name, int min, int *out) {
    const char *v = lookup(name, arg);
    if (!v || !*v)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "started by %s's launcher but %s is not set",
                              who, name);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < min || x > 1 << 30)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s=%s is not a number >= %d", name, v, min);
    *out = (int)x;
    return HVD_OK;
}

hvd_status_t hvd__mpi_env_host_identity(hvd_params_t *p, const char *node_name) {
    char name[256] = "localhost";
    gethostname(name, sizeof name - 1);
    struct stat st;
    char id[320];
    if (node_name && *node_name)
        snprintf(id, sizeof id, "%s", node_name);
    else if (stat("/proc/self/ns/net", &st) == 0)
        snprintf(id, sizeof id, "%s-%lu", name, (unsigned long)st.st_ino);
    else
        snprintf(id, sizeof id, "%s", name);
    char *copy = strdup(id);
    if (!copy)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    free(p->hostname);
    p->hostname = copy;
    return HVD_OK;
}

/* This node's entry of SLURM_STEP_TASKS_PER_NODE ("2(x3),1"), SLURM_NODEID being its index. */
static hvd_status_t slurm_local_size(hvd_mpi_env_lookup_fn lookup, void *arg, int *out) {
    int node;
    hvd_status_t st = get_int(lookup, arg, "Slurm", "SLURM_NODEID", 0, &node);
    if (st != HVD_OK)
        return st;
    const char *text = lookup("SLURM_STEP_TASKS_PER_NODE", arg);
    if (!text || !*text)
        return hvd__error_set(
            HVD_ERR_INVALID_ARG,
            "started by Slurm's launcher but SLURM_STEP_TASKS_PER_NODE is not set");
    int *counts;
    size_t n;
    if ((st = hvd__slurm_counts_expand(text, &counts, &n)) != HVD_OK)
        return hvd__error_wrap(st, "SLURM_STEP_TASKS_PER_NODE");
    if ((size_t)node >= n || counts[node] < 1)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "SLURM_STEP_TASKS_PER_NODE=%s has no tasks for SLURM_NODEID=%d", text,
                            node);
    else
        *out = counts[node];
    free(counts);
    return st;
}

hvd_status_t hvd__mpi_env_apply(hvd_params_t *p, hvd_mpi_env_lookup_fn lookup, void *arg,
                                const char **launcher_p) {
    *launcher_p = NULL;
    if (lookup("HOROVOD_RANK", arg))
        return HVD_OK;
    const mpi_vars_t *m = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !m; i++)
        if (lookup(launchers[i].marker, arg))
            m = &launchers[i];
    if (!m)
        return HVD_OK;
    int rank, size, local_rank, local_size;
    hvd_status_t st = get_int(lookup, arg, m->launcher, m->rank, 0, &rank);
    if (st == HVD_OK)
        st = get_int(lookup, arg, m->launcher, m->size, 1, &size);
    if (st == HVD_OK)
        st = get_int(lookup, arg, m->launcher, m->local_rank, 0, &local_rank);
    if (st == HVD_OK)
        st = m->local_size ? get_int(lookup, arg, m->launcher, m->local_size, 1, &local_size)
                           : slurm_local_size(lookup, arg, &local_size);
    if (st == HVD_OK && local_rank >= local_size)
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s=%d but this host runs %d of the ranks",
                            m->local_rank, local_rank, local_size);
    if (st == HVD_OK && !lookup("HOROVOD_HOSTNAME", arg))
        st = hvd__mpi_env_host_identity(p, m->local_size ? NULL : lookup("SLURMD_NODENAME", arg));
    if (st != HVD_OK)
        return st;
    p->rank = rank;
    p->size = size;
    p->local_rank = local_rank;
    p->local_size = local_size;
    p->cross_rank = 0;
    p->cross_size = 1;
    *launcher_p = m->launcher;
    return HVD_OK;
}

void hvd__mpi_env_cross(const int *local_rank, int size, int self, int *cross_rank,
                        int *cross_size_p) {
    int own = 0;
    for (int r = 0; r < size; r++) {
        int below = 0;
        for (int q = 0; q < r; q++)
            below += local_rank[q] == local_rank[r];
        cross_rank[r] = below;
        own += local_rank[r] == local_rank[self];
    }
    *cross_size_p = own;
}
