#include "runner/slurm_alloc.h"

#include "common/error.h"
#include "slurm/slurm_env.h"

#include <stdlib.h>
#include <string.h>

hvd_status_t hvd__slurm_alloc_hosts(hvd_slurm_lookup_fn lookup, void *arg, hvd_host_list_t *hosts_p,
                                    int *found_p) {
    *found_p = 0;
    const char *job = lookup("SLURM_JOB_ID", arg), *list = lookup("SLURM_JOB_NODELIST", arg);
    if (!job || !*job || !list || !*list)
        return HVD_OK;
    const char *var = "SLURM_TASKS_PER_NODE", *counts_text = lookup(var, arg);
    if (!counts_text || !*counts_text) {
        var = "SLURM_JOB_CPUS_PER_NODE";
        counts_text = lookup(var, arg);
    }
    if (!counts_text || !*counts_text)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "inside Slurm allocation %s (SLURM_JOB_NODELIST=%.200s) but neither "
                              "SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE is set: give the "
                              "hosts with -H or --hostfile",
                              job, list);
    char **names = NULL;
    size_t n = 0, m = 0;
    int *counts = NULL;
    hvd_status_t st = hvd__slurm_hostlist_expand(list, &names, &n);
    if (st != HVD_OK) {
        st = hvd__error_wrap(st, "SLURM_JOB_NODELIST");
        goto out;
    }
    if ((st = hvd__slurm_counts_expand(counts_text, &counts, &m)) != HVD_OK) {
        st = hvd__error_wrap(st, "%s", var);
        goto out;
    }
    if (m != n) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s=%.200s gives %zu nodes but SLURM_JOB_NODELIST=%.200s names %zu",
                            var, counts_text, m, list, n);
        goto out;
    }
    hvd_host_t *hosts = calloc(n, sizeof *hosts);
    if (!hosts) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] < 1)
            continue; /* a node of the allocation with no task for this job */
        hosts[kept].name = names[i];
        hosts[kept++].slots = counts[i];
        names[i] = NULL;
    }
    hosts_p->hosts = hosts;
    hosts_p->count = kept;
    *found_p = 1;
out:
    hvd__slurm_names_free(names, n);
    free(counts);
    return st;
}
