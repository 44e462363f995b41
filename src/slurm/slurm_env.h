/* What Slurm tells the processes it starts, in the compact forms Slurm writes them:
 *
 * - per-node counts, as in SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and
 *   SLURM_JOB_CPUS_PER_NODE: comma-separated "N" or "N(xM)" (M nodes of N each), so
 *   "2(x3),1" is 2, 2, 2, 1;
 * - host lists, as in SLURM_JOB_NODELIST: comma-separated names, each with bracketed ranges
 *   "prefix[lo-hi,k,...]" (several bracket groups multiply out), where a range's lo written
 *   with leading zeros pads every number to its width: "node[01-03,07],gpu1" is node01,
 *   node02, node03, node07, gpu1.
 *
 * Both come from the environment, which the user controls: every field is checked and the
 * expansion is bounded (HVD_SLURM_MAX_NODES entries, HVD_SLURM_NAME_MAX bytes a name), so a
 * malformed or huge value is an error naming the variable's text, never a crash. */
#ifndef HVD_SLURM_SLURM_ENV_H
#define HVD_SLURM_SLURM_ENV_H

#include <hvd/types.h>

#include <stddef.h>

#define HVD_SLURM_MAX_NODES (1 << 20)
#define HVD_SLURM_NAME_MAX 255

/* Expand a per-node count list into *counts_p (malloc'd, *n_p entries, each >= 0).
 * HVD_ERR_INVALID_ARG quoting text when it is malformed or longer than HVD_SLURM_MAX_NODES. */
hvd_status_t hvd__slurm_counts_expand(const char *text, int **counts_p, size_t *n_p);

/* Expand a host list into *names_p (*n_p malloc'd names, in Slurm's order; release with
 * hvd__slurm_names_free). HVD_ERR_INVALID_ARG quoting text when it is malformed (unbalanced
 * brackets, a range going down, an empty name) or expands beyond the bounds above. */
hvd_status_t hvd__slurm_hostlist_expand(const char *text, char ***names_p, size_t *n_p);
void hvd__slurm_names_free(char **names, size_t n);

#endif
