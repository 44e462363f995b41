/* Facts about this host that identify it: its name and the kernel namespaces this process
 * runs in. host_hash (runner/discovery/host_hash.h) combines them so that two containers on one
 * machine, which may share a host name, count as different hosts. */
#ifndef HVD_OS_HOSTINFO_H
#define HVD_OS_HOSTINFO_H

#include <hvd/types.h>

#include <stddef.h>

/* This host's name (gethostname) into out. HVD_ERR_IO if it cannot be read or does not fit. */
hvd_status_t hvd__hostinfo_name(char *out, size_t out_size);

/* The space-joined targets of the links in /proc/self/ns, in name order (e.g.
 * "cgroup:[4026531835] ipc:[4026531839] ..."), into out. An empty string when /proc is not
 * mounted. HVD_ERR_TOO_LARGE when out is too small. */
hvd_status_t hvd__hostinfo_namespaces(char *out, size_t out_size);

/* The cores online (sysconf), at least 1. */
int hvd__hostinfo_cpus(void);

#endif
