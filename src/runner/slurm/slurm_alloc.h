/* horovodrun inside a Slurm allocation (salloc, sbatch): with no -H, --hostfile or discovery
 * script, the job's hosts and slots are the allocation's, and remote ranks start through
 * srun instead of ssh (runner/launch/ssh.h, hvd_ssh_opts_t.srun): no ssh keys are needed, and Slurm
 * accounts for and cleans up everything the job starts.
 *
 * Hosts: SLURM_JOB_NODELIST expanded as Slurm does (slurm/slurm_env.h). Slots per host:
 * SLURM_TASKS_PER_NODE when the allocation asked for tasks (-n, --ntasks-per-node), else
 * SLURM_JOB_CPUS_PER_NODE, both in Slurm's "2(x3),1" form, one entry per node. */
#ifndef HVD_RUNNER_SLURM_ALLOC_H
#define HVD_RUNNER_SLURM_ALLOC_H

#include <hvd/types.h>

#include "runner/hosts/hosts.h"

typedef const char *(*hvd_slurm_lookup_fn)(const char *name, void *arg);
/* The lookup of this process's environment (getenv; arg unused). */
const char *hvd__slurm_getenv(const char *name, void *arg);

/* *found_p = 0 (and nothing else) outside an allocation (no SLURM_JOB_ID or
 * SLURM_JOB_NODELIST); else 1 and *hosts_p the allocation's hosts. HVD_ERR_INVALID_ARG names
 * the variable that is malformed or disagrees with the node list. */
hvd_status_t hvd__slurm_alloc_hosts(hvd_slurm_lookup_fn lookup, void *arg, hvd_host_list_t *hosts_p,
                                    int *found_p);

/* Which job's allocation holds host, for `srun --jobid` (an elastic job's hosts may come from
 * another allocation of the same user: scripts/horovodrun-slurm-hosts). *job is set to ""
 * when srun needs no --jobid: outside an allocation, or host is a node of the allocation
 * horovodrun runs in (SLURM_JOB_NODELIST). Else squeue (--me, running jobs, found in PATH,
 * HVD_SLURM_SQUEUE_TIMEOUT_MS at most) names the jobs holding host: one named as this job
 * (SLURM_JOB_NAME) first, else the lowest id. HVD_ERR_NOT_FOUND naming host when no job of
 * this user holds it, HVD_ERR_IO when squeue fails. */
#define HVD_SLURM_SQUEUE_TIMEOUT_MS 20000
hvd_status_t hvd__slurm_job_of_host(hvd_slurm_lookup_fn lookup, void *arg, const char *host,
                                    char *job, size_t size);

#endif
