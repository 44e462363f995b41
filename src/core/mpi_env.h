/* A job started by an MPI launcher (`horovodrun --mpi`, or mpirun given the rendezvous
 * variables some other way): the rank, size and place on the host come from the launcher's
 * environment instead of HOROVOD_RANK and friends, which mpirun cannot set per rank.
 *
 * Open MPI sets OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE; MPICH's Hydra sets
 * PMI_RANK / PMI_SIZE and MPI_LOCALRANKID / MPI_LOCALNRANKS; a Slurm step (srun) sets
 * SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_LOCALID, and this node's task count is its entry
 * of SLURM_STEP_TASKS_PER_NODE (SLURM_NODEID). The host name (unless HOROVOD_HOSTNAME is set)
 * is Slurm's node name under srun, else this machine's name plus its network namespace, which
 * tells containers and namespaces on one machine apart. Nothing says what the cross rank is:
 * it is worked out at check-in, when every rank's local rank is known (ranks with the same
 * local rank, in global rank order). HOROVOD_RANK in the environment wins: then horovodrun's
 * contract applies as usual. */
#ifndef HVD_CORE_MPI_ENV_H
#define HVD_CORE_MPI_ENV_H

#include <hvd/types.h>

#include "common/params.h"

/* Environment lookup (getenv in production, a table in tests). */
typedef const char *(*hvd_mpi_env_lookup_fn)(const char *name, void *arg);

/* When HOROVOD_RANK is not set and an MPI launcher's variables are, overwrite rank, size,
 * local rank and size (and hostname, unless HOROVOD_HOSTNAME is set) in *p, set cross rank 0
 * and size 1 until check-in, and *launcher_p to "Open MPI", "MPICH" or "Slurm" (NULL
 * otherwise).
 * HVD_ERR_INVALID_ARG naming the variable when one is missing or not a number in range. */
hvd_status_t hvd__mpi_env_apply(hvd_params_t *p, hvd_mpi_env_lookup_fn lookup, void *arg,
                                const char **launcher_p);

/* Set p->hostname to node_name when given (Slurm's name for this node tells nodes apart),
 * else to "<host name>-<network namespace inode>", which tells containers and network
 * namespaces on one machine apart. HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__mpi_env_host_identity(hvd_params_t *p, const char *node_name);

/* Cross ranks from every rank's local rank: cross_rank[r] = how many ranks below r have the
 * same local rank; *cross_size_p = the number of ranks with local_rank[self]. */
void hvd__mpi_env_cross(const int *local_rank, int size, int self, int *cross_rank,
                        int *cross_size_p);

#endif
