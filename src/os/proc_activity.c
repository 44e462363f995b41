/* Another process's activity from /proc (proc_activity.h). */
#include "os/proc_activity.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read a small /proc file into buf (terminated). Bytes read, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

/* The state letter of /proc/<pid>/task/<tid>/stat ("tid (comm) S ..."; comm may hold anything,
 * so the state follows the last ')'), or 0. */
static char thread_state(const char *dir) {
    char path[96], buf[512];
    snprintf(path, sizeof path, "%s/stat", dir);
    ssize_t n = read_small(path, buf, sizeof buf);
    if (n <= 0)
        return 0;
    const char *p = memrchr(buf, ')', (size_t)n);
    return p && p[1] == ' ' ? p[2] : 0;
}

int hvd__proc_activity(long pid, hvd_proc_activity_t *a) {
    memset(a, 0, sizeof *a);
    char tasks[48];
    snprintf(tasks, sizeof tasks, "/proc/%ld/task", pid);
    DIR *d = opendir(tasks);
    if (!d)
        return -1;
    int threads = 0, dead = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char dir[80], path[96], buf[128];
        snprintf(dir, sizeof dir, "%s/%.16s", tasks, e->d_name);
        char state = thread_state(dir);
        if (!state)
            continue; /* the thread ended meanwhile */
        threads++;
        dead += state == 'Z' || state == 'X';
        a->runnable |= state == 'R';
        a->stopped |= state == 'T' || state == 't';
        /* schedstat: ns on a core, ns waiting for one, timeslices */
        snprintf(path, sizeof path, "%s/schedstat", dir);
        unsigned long long ran;
        if (read_small(path, buf, sizeof buf) > 0 && sscanf(buf, "%llu", &ran) == 1)
            a->run_ns += ran;
    }
    closedir(d);
    return threads > dead ? 0 : -1;
}

unsigned long hvd__proc_pid_ns(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

int hvd__proc_still_runs(long pid, uint64_t *run_ns, int have_last) {
    hvd_proc_activity_t a;
    if (pid <= 0 || hvd__proc_activity(pid, &a) != 0)
        return -1;
    int ran = have_last && a.run_ns > *run_ns;
    *run_ns = a.run_ns;
    if (a.stopped)
        return 0;
    return a.runnable ? 2 : ran;
}
