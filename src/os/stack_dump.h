/* Asking this process for its stacks (HVD_STALL_STACKS): libhvd prints none itself, a C
 * library cannot walk an interpreter's frames, but a Python program's faulthandler can, on
 * a signal (horovod's init registers it for SIGUSR2 when HVD_STALL_STACKS=1). SIGUSR2 ends a
 * process that does not handle it, so it is sent only where a handler is installed. */
#ifndef HVD_OS_STACK_DUMP_H
#define HVD_OS_STACK_DUMP_H

/* Signal this process with SIGUSR2 if something handles it: 1 when signalled, else 0. */
int hvd__stack_dump_request(void);

#endif
