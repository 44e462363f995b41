/* Asking this process for its stacks (stack_dump.h). */
#include "os/stack_dump.h"

#include <signal.h>
#include <stddef.h>
#include <unistd.h>

int hvd__stack_dump_request(void) {
    struct sigaction sa;
    if (sigaction(SIGUSR2, NULL, &sa) != 0)
        return 0;
    int handled = (sa.sa_flags & SA_SIGINFO) ? sa.sa_sigaction != NULL
                                             : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
    /* (to the process, not this thread: the kernel hands it to a thread that does not block
     * it, and faulthandler prints every thread's stack from any of them) */
    return handled && kill(getpid(), SIGUSR2) == 0;
}
