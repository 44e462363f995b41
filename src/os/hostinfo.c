/* This host's name, namespaces and core count (hostinfo.h). The /proc/self/ns links are sorted by
 * name, so the list does not depend on readdir's order and every process in the same namespaces
 * gets the same text. */
#include "os/hostinfo.h"

#include "common/error.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

hvd_status_t hvd__hostinfo_name(char *out, size_t out_size) {
    char name[HOST_NAME_MAX + 1];
    if (gethostname(name, sizeof name) != 0)
        return hvd__error_set(HVD_ERR_IO, "cannot read the host name: %s", strerror(errno));
    name[sizeof name - 1] = '\0';
    if ((size_t)snprintf(out, out_size, "%s", name) >= out_size)
        return hvd__error_set(HVD_ERR_IO, "host name '%s' is too long", name);
    return HVD_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

#define NS_MAX 32

hvd_status_t hvd__hostinfo_namespaces(char *out, size_t out_size) {
    if (out_size == 0)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "no room for the namespace list");
    out[0] = '\0';
    DIR *dir = opendir("/proc/self/ns");
    if (!dir)
        return HVD_OK;
    char *names[NS_MAX];
    size_t n = 0;
    struct dirent *de;
    while (n < NS_MAX && (de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        names[n] = strdup(de->d_name);
        if (names[n])
            n++;
    }
    closedir(dir);
    qsort(names, n, sizeof *names, by_name);
    hvd_status_t st = HVD_OK;
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/ns/%s", names[i]);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len < 0)
            continue;
        target[len] = '\0';
        int w = snprintf(out + used, out_size - used, "%s%s", used ? " " : "", target);
        if (w < 0 || (size_t)w >= out_size - used) {
            st = hvd__error_set(HVD_ERR_TOO_LARGE, "the namespace list does not fit in %zu bytes",
                                out_size);
            out[used] = '\0';
            break;
        }
        used += (size_t)w;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    return st;
}

int hvd__hostinfo_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
