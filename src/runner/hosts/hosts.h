/* Hosts and the slot plan.
 *
 * A host list comes from `-H host:slots,...` or a hostfile (`host slots=N` lines, blank lines
 * and `#` comments allowed). The slot plan assigns exactly num_proc ranks with Horovod's
 * semantics (docs/reference.md, "`horovodrun`"): walk hosts in order, local ranks 0..slots-1 on
 * each; cross_rank is the host's index among hosts that have that local rank; local_size is the
 * number of ranks on the host; cross_size the number of hosts having that local rank. */
#ifndef HVD_RUNNER_HOSTS_H
#define HVD_RUNNER_HOSTS_H

#include <hvd/types.h>

#include <stddef.h>

typedef struct {
    char *name; /* as written by the user */
    int slots;
} hvd_host_t;

typedef struct {
    hvd_host_t *hosts;
    size_t count;
} hvd_host_list_t;

typedef struct {
    int rank, size, local_rank, local_size, cross_rank, cross_size;
    const char *host; /* points into the host list the plan was made from */
} hvd_slot_t;

typedef struct {
    hvd_slot_t *slots; /* in rank order */
    size_t count;
} hvd_slot_plan_t;

/* Parse "h1:2,h2:4". Errors (HVD_ERR_INVALID_ARG) name the offending item and why. */
hvd_status_t hvd__hosts_parse(const char *text, hvd_host_list_t *list_p);

/* The most hvd reads of a hostfile: a line (without its newline; a host name is at most 255
 * characters) and the whole file (100,000 hosts of 160-character names). Beyond
 * either the file is refused, in constant memory (a user who points --hostfile at /dev/zero
 * or a log gets an error, not an exhausted login node). */
#define HVD_HOSTFILE_MAX_LINE 4096
#define HVD_HOSTFILE_MAX_BYTES (16u << 20)

/* Parse a hostfile. Errors name the file, the line number and the line. */
hvd_status_t hvd__hosts_parse_file(const char *path, hvd_host_list_t *list_p);

/* Parse a host discovery script's output (elastic mode, docs/running.md, "Elastic jobs"):
 * one host per line, "host" (default_slots slots; < 1 means none was given, which is then an
 * error) or "host:slots" with slots >= 1; blank lines and surrounding spaces are ignored; no
 * output is a valid empty list ("no hosts yet"). Errors (HVD_ERR_INVALID_ARG) name the line
 * number and the line. */
hvd_status_t hvd__hosts_parse_discovery(const char *text, size_t len, int default_slots,
                                        hvd_host_list_t *list_p);

void hvd__hosts_fini(hvd_host_list_t *list);

/* Plan exactly num_proc ranks over the hosts (num_proc >= 1). Too few slots is
 * HVD_ERR_INVALID_ARG saying how many were requested and how many were found. The plan's host
 * pointers borrow from hosts, which must outlive it. */
hvd_status_t hvd__slot_plan_create(const hvd_host_list_t *hosts, int num_proc,
                                   hvd_slot_plan_t *plan_p);

void hvd__slot_plan_fini(hvd_slot_plan_t *plan);

/* Write the --dry-run line for a slot into out (no newline):
 * "rank=R size=S local_rank=LR local_size=LS cross_rank=CR cross_size=CS host=H". */
int hvd__slot_format(const hvd_slot_t *slot, char *out, size_t out_size);

#endif
