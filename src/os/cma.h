/* Cross-memory attach: reading another process's memory with process_vm_readv, so that a
 * block moves between ranks of one host in one copy instead of two through shared memory.
 * The kernel allows it between processes of the same user unless a security policy (Yama's
 * ptrace_scope, a container's seccomp filter) says no; callers check first and fall back to
 * copying through shared memory. */
#ifndef HVD_OS_CMA_H
#define HVD_OS_CMA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Copy len bytes at remote address addr in process pid into dst. 0, or an errno (ESRCH: the
 * process is gone; EPERM/EFAULT/ENOSYS: not allowed or not readable). */
int hvd__cma_read(pid_t pid, uint64_t addr, void *dst, size_t len);

#endif
