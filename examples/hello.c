/* The smallest hvd program: every rank initialises through the launcher's rendezvous (which
 * completes only when all ranks have checked in), reports where it sits in the job, and shuts
 * down. Run it with:  horovodrun -np 4 ./build/examples/hello */
#include <hvd/hvd.h>

#include <stdio.h>
#include <unistd.h>

int main(void) {
    hvd_status_t st = hvd_init();
    if (st != HVD_OK) {
        fprintf(stderr, "hvd_init failed: %s: %s\n", hvd_status_str(st), hvd_last_error());
        return 1;
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    printf("hello from rank %d of %d (local %d of %d, cross %d of %d) on %s, pid %ld\n", hvd_rank(),
           hvd_size(), hvd_local_rank(), hvd_local_size(), hvd_cross_rank(), hvd_cross_size(), host,
           (long)getpid());
    st = hvd_shutdown();
    if (st != HVD_OK) {
        fprintf(stderr, "hvd_shutdown failed: %s: %s\n", hvd_status_str(st), hvd_last_error());
        return 1;
    }
    return 0;
}
