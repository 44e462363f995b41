#include "core/mpi_env.h"

#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *launcher;
    const char *rank, *size, *local_rank, *local_size;
} mpi_vars_t;

static const mpi_vars_t launchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

static hvd_status_t get_int(hvd_mpi_env_lookup_fn lookup, void *arg, const char *name, int min,
                            int *out) {
    const char *v = lookup(name, arg);
    if (!v || !*v)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "started by an MPI launcher but %s is not set",
                              name);
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < min || x > 1 << 30)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s=%s is not a number >= %d", name, v, min);
    *out = (int)x;
    return HVD_OK;
}

/* "<host name>-<network namespace inode>" */
static hvd_status_t host_identity(hvd_params_t *p) {
    char name[256] = "localhost";
    gethostname(name, sizeof name - 1);
    struct stat st;
    char id[320];
    if (stat("/proc/self/ns/net", &st) == 0)
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

hvd_status_t hvd__mpi_env_apply(hvd_params_t *p, hvd_mpi_env_lookup_fn lookup, void *arg,
                                const char **launcher_p) {
    *launcher_p = NULL;
    if (lookup("HOROVOD_RANK", arg))
        return HVD_OK;
    const mpi_vars_t *m = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !m; i++)
        if (lookup(launchers[i].rank, arg))
            m = &launchers[i];
    if (!m)
        return HVD_OK;
    int rank, size, local_rank, local_size;
    hvd_status_t st = get_int(lookup, arg, m->rank, 0, &rank);
    if (st == HVD_OK)
        st = get_int(lookup, arg, m->size, 1, &size);
    if (st == HVD_OK)
        st = get_int(lookup, arg, m->local_rank, 0, &local_rank);
    if (st == HVD_OK)
        st = get_int(lookup, arg, m->local_size, 1, &local_size);
    if (st == HVD_OK && !lookup("HOROVOD_HOSTNAME", arg))
        st = host_identity(p);
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
