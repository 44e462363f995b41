/* The asymmetric fence of os/fence.h over membarrier(2): registration once per process, and
 * the heavy side's call. */
#include "os/fence.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

/* membarrier(2)'s commands (linux/membarrier.h), named here for headers that lack them */
#define MB_QUERY 0
#define MB_GLOBAL_EXPEDITED (1 << 1)
#define MB_REGISTER_GLOBAL_EXPEDITED (1 << 2)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int light_ok;

static long membarrier(int cmd) {
#ifdef SYS_membarrier
    return syscall(SYS_membarrier, cmd, 0, 0);
#else
    (void)cmd;
    return -1;
#endif
}

static void register_once(void) {
    long cmds = membarrier(MB_QUERY);
    light_ok = cmds > 0 && (cmds & MB_GLOBAL_EXPEDITED) && (cmds & MB_REGISTER_GLOBAL_EXPEDITED) &&
               membarrier(MB_REGISTER_GLOBAL_EXPEDITED) == 0;
}

int hvd__fence_light_ok(void) {
    pthread_once(&once, register_once);
    return light_ok;
}

int hvd__fence_heavy(void) {
    return membarrier(MB_GLOBAL_EXPEDITED) == 0 ? 0 : -1;
}
