/* The allocation's hosts and srun's --jobid (slurm_alloc.h). Nodes given 0 tasks are left out;
 * squeue runs through capture.h under its deadline, and each job's node list is expanded with
 * slurm_env.h to find the host. */
#include "runner/slurm/slurm_alloc.h"

#include "common/error.h"
#include "runner/process/capture.h"
#include "slurm/slurm_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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

const char *hvd__slurm_getenv(const char *name, void *arg) {
    (void)arg;
    return getenv(name);
}

static int list_holds(const char *list, const char *host, hvd_status_t *st_p) {
    char **names = NULL;
    size_t n = 0;
    int found = 0;
    *st_p = hvd__slurm_hostlist_expand(list, &names, &n);
    for (size_t i = 0; *st_p == HVD_OK && i < n && !found; i++)
        found = strcmp(names[i], host) == 0;
    hvd__slurm_names_free(names, n);
    return found;
}

/* squeue's "ID NODELIST NAME" lines: the job holding host, preferring one called name. */
static hvd_status_t pick_job(char *text, const char *host, const char *name, char *job,
                             size_t size) {
    char best[64] = "";
    int best_named = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char id[64], list[4096];
        int used = 0;
        if (sscanf(line, " %63s %4095s %n", id, list, &used) < 2)
            continue;
        hvd_status_t st;
        if (!list_holds(list, host, &st) || st != HVD_OK)
            continue; /* (a list squeue wrote that we cannot read cannot be ours to use) */
        int named = name && strcmp(line + used, name) == 0;
        if (!*best || (named && !best_named)) {
            snprintf(best, sizeof best, "%s", id);
            best_named = named;
        }
    }
    if (!*best)
        return hvd__error_set(HVD_ERR_NOT_FOUND,
                              "host %s is in no running Slurm job of yours (squeue --me): inside "
                              "an allocation, horovodrun starts remote ranks with srun, which "
                              "needs an allocation holding the host",
                              host);
    snprintf(job, size, "%s", best);
    return HVD_OK;
}

hvd_status_t hvd__slurm_job_of_host(hvd_slurm_lookup_fn lookup, void *arg, const char *host,
                                    char *job, size_t size) {
    *job = '\0';
    const char *own = lookup("SLURM_JOB_ID", arg), *list = lookup("SLURM_JOB_NODELIST", arg);
    if (!own || !*own)
        return HVD_OK;
    hvd_status_t st = HVD_OK;
    if (list && *list && list_holds(list, host, &st))
        return HVD_OK;
    if (st != HVD_OK)
        return hvd__error_wrap(st, "SLURM_JOB_NODELIST");
    char out_text[1 << 16] = "", err_text[1024] = "";
    hvd_capture_buf_t out = {.buf = out_text, .cap = sizeof out_text},
                      err = {.buf = err_text, .cap = sizeof err_text};
    int status = 0, timed_out = 0;
    st = hvd__capture_shell("exec squeue --me --noheader --states=RUNNING --sort=i "
                            "--format='%i %N %j'",
                            HVD_SLURM_SQUEUE_TIMEOUT_MS, &out, &err, &status, &timed_out);
    if (st == HVD_OK && (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        char why[512];
        hvd__capture_last_line(err.buf, err.len, why, sizeof why);
        if (!*why)
            hvd__capture_last_line(out.buf, out.len, why, sizeof why);
        st = hvd__error_set(HVD_ERR_IO, "squeue, asked which job holds host %s, %s%s%s", host,
                            timed_out ? "did not answer in time" : "failed", *why ? ": " : "", why);
    }
    if (st == HVD_OK)
        st = pick_job(out.buf, host, lookup("SLURM_JOB_NAME", arg), job, size);
    return st;
}
